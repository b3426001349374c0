"""Tests for rtpo.metrics: SQuAD EM/F1, output-hit, \\boxed extraction, math equivalence,
unbiased pass@k (against brute-force enumeration) and trajectory statistics."""

from __future__ import annotations

import itertools
import math
import time

import pytest

from rtpo.metrics import (
    aggregate_pass_at_k, exact_match, extract_boxed, f1_score, math_equal, normalize_answer,
    output_hit, pass_at_k, qa_scores, trajectory_stats,
)

# ------------------------------------------------------------------ QA


@pytest.mark.parametrize("raw, norm", [
    ("The Denver Broncos", "denver broncos"),
    ("  An   apple, a day!  ", "apple day"),
    ("Theodore", "theodore"),           # "the" only as a whole word
    ("U.S.A.", "usa"),
    ("", ""),
])
def test_normalize_answer(raw, norm):
    assert normalize_answer(raw) == norm


def test_exact_match_squad_examples():
    assert exact_match("Denver Broncos", ["Denver Broncos", "Broncos"]) == 1.0
    assert exact_match("the Denver Broncos.", ["Denver Broncos"]) == 1.0
    assert exact_match("Denver", ["Denver Broncos"]) == 0.0
    assert exact_match("broncos", ["Denver Broncos", "Broncos"]) == 1.0  # max over aliases


def test_f1_squad_examples():
    # pred tokens [denver, broncos, team], gold [denver, broncos]: P = 2/3, R = 1, F1 = 0.8
    assert f1_score("the Denver Broncos team", ["Denver Broncos"]) == pytest.approx(0.8)
    assert f1_score("Carolina Panthers", ["Denver Broncos"]) == 0.0
    # max over golds
    assert f1_score("Broncos", ["Denver Broncos", "Broncos"]) == 1.0
    # repeated tokens count with multiplicity: pred [a1, a1], gold [a1]: P = 1/2, R = 1
    assert f1_score("x x", ["x"]) == pytest.approx(2 * 0.5 * 1 / 1.5)
    # both empty after normalisation agree; one empty scores 0
    assert f1_score("the", ["a"]) == 1.0
    assert f1_score("", ["Denver"]) == 0.0


def test_golds_must_be_a_nonempty_list():
    with pytest.raises(ValueError, match="empty"):
        exact_match("x", [])
    with pytest.raises(TypeError, match="list"):
        f1_score("x", "x")


def test_output_hit():
    out = "Searching... The river is the Vessel River, which flows through Lumen."
    assert output_hit(out, ["Vessel River"]) == 1.0
    assert output_hit(out, ["Nile", "vessel   river!"]) == 1.0
    assert output_hit(out, ["Nile"]) == 0.0
    assert output_hit(out, ["The"]) == 0.0  # a gold that normalises to "" never hits


def test_qa_scores():
    s = qa_scores("the Eiffel Tower", ["Eiffel Tower"], "I think... <answer>the Eiffel Tower</answer>")
    assert s == {"em": 1.0, "f1": 1.0, "hit": 1.0}
    s = qa_scores(None, ["Eiffel Tower"], "it might be the eiffel tower but I ran out of turns")
    assert s == {"em": 0.0, "f1": 0.0, "hit": 1.0}
    s = qa_scores("Louvre", ["Eiffel Tower"])  # no full output: hit uses the prediction
    assert s == {"em": 0.0, "f1": 0.0, "hit": 0.0}
    assert qa_scores(None, ["x"]) == {"em": 0.0, "f1": 0.0, "hit": 0.0}


# ------------------------------------------------------------------ \boxed


@pytest.mark.parametrize("text, boxed", [
    ("so the answer is $\\boxed{42}$.", "42"),
    ("\\boxed{1} first, then finally \\boxed{\\frac{\\sqrt{3}}{2}}", "\\frac{\\sqrt{3}}{2}"),
    ("\\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),
    ("\\boxed{{a}^{2}}", "{a}^{2}"),
    ("answer: \\fbox{7}", "7"),
    ("$\\boxed 5$", "5"),
    ("\\boxed{3} then a truncated \\boxed{\\frac{1}{", "3"),  # unclosed last box is skipped
    ("no box here", None),
    ("", None),
])
def test_extract_boxed(text, boxed):
    assert extract_boxed(text) == boxed


# ------------------------------------------------------------------ math equivalence

EQUAL = [
    ("\\frac{1}{2}", "0.5"),
    ("\\dfrac{1}{2}", "\\frac12"),
    ("\\tfrac{3}{4}", "0.75"),
    ("-\\frac{3}{4}", "\\frac{-3}{4}"),
    ("1,000", "1000"),
    ("$1,234,567$", "1234567"),
    ("1,000.5", "1000.5"),
    ("12.0", "12"),
    ("10.", "10"),
    ("\\boxed{\\frac{\\sqrt{3}}{2}}", "\\frac{\\sqrt3}{2}"),
    ("0.8660254038", "\\frac{\\sqrt{3}}{2}"),
    ("2\\sqrt{2}", "\\sqrt{8}"),
    ("\\sqrt[3]{8}", "2"),
    ("x=5", "5"),
    ("5\\text{ cm}", "5"),
    ("\\text{(B)}", "(B)"),
    ("90^\\circ", "90"),
    ("50\\%", "50"),
    ("\\left( 1, 2 \\right)", "(1,2)"),
    ("3, 2", "2,3"),                      # bare lists compare as multisets
    ("(x+1)^2", "x^2+2x+1"),
    ("\\frac{\\pi}{2}", "\\pi/2"),
    ("2\\pi", "6.283185307"),
    ("\\sin x", "\\sin(x)"),
    ("2^{10}", "1024"),
    ("\\infty", "\\infty"),
    ("\\frac{1}{3}", "0.3333333333"),
]

NOT_EQUAL = [
    ("\\frac{1}{2}", "0.6"),
    ("0.866", "\\frac{\\sqrt{3}}{2}"),   # tolerance is 1e-6 relative, not 1e-3
    ("1,2", "12"),                        # a list, not a thousands separator
    ("(2,1)", "(1,2)"),                   # tuples are ordered
    ("[0,1)", "[0,1]"),                   # interval brackets matter
    ("x^2+2x", "(x+1)^2"),
    ("7006651", "7006652"),               # integers are compared exactly
    ("12.0000001", "12"),
    ("2^{30}", "1073741825"),
    ("\\frac{1}{0}", "1"),
    ("3", "4"),
    ("a", "b"),
    ("", "1"),
    ("Paris", "London"),
]


@pytest.mark.parametrize("a, b", EQUAL)
def test_math_equal_positive(a, b):
    assert math_equal(a, b)
    assert math_equal(b, a)


@pytest.mark.parametrize("a, b", NOT_EQUAL)
def test_math_equal_negative(a, b):
    assert not math_equal(a, b)
    assert not math_equal(b, a)


def test_math_equal_none_and_garbage_never_raise():
    assert math_equal(None, "1") is False
    for junk in ["\\frac{", "}{", "^^", "\\boxed{", "((((", "1/", "\\unknowncmd{3}", "x_{1}",
                 "__import__('os').system('true')", "lambda: 1", "a" * 5000, "\\sqrt[3", "1=2=3",
                 "[1,2", "\u2212 5", "\\\\", "{}", "$$"]:
        assert math_equal(junk, "1") in (True, False)
        assert math_equal("1", junk) in (True, False)


def test_math_equal_is_fast_on_power_towers():
    t0 = time.perf_counter()
    assert not math_equal("9^{9^{9^{9}}}", "1")
    assert math_equal("9^{9^{9^{9}}}", "9^{9^{9^{9}}}")  # identical strings still match
    assert not math_equal("x^{10^{10}}", "x")
    assert time.perf_counter() - t0 < 5.0


# ------------------------------------------------------------------ pass@k


def _brute_pass_at_k(n: int, c: int, k: int) -> float:
    """Fraction of the k-subsets of n samples (the first c correct) that contain a correct one."""
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(i < c for i in s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("n", range(1, 8))
def test_pass_at_k_matches_brute_force(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(_brute_pass_at_k(n, c, k), abs=1e-12)


def test_pass_at_k_special_cases():
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert pass_at_k(5, 0, 3) == 0.0
    assert pass_at_k(5, 3, 3) == 1.0  # n - c < k: every draw of 3 contains a correct one
    with pytest.raises(ValueError, match="k"):
        pass_at_k(4, 1, 5)
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 1)
    with pytest.raises(ValueError):
        pass_at_k(4, 1, 0)
    with pytest.raises(TypeError):
        pass_at_k(4.0, 1, 1)


def test_aggregate_pass_at_k():
    res = aggregate_pass_at_k({"a": [True, False, False, False], "b": [False] * 4,
                               "c": [True, True, False, False]}, [1, 4])
    assert res["pass@1"] == pytest.approx((0.25 + 0.0 + 0.5) / 3)
    assert res["pass@4"] == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="'a'"):
        aggregate_pass_at_k({"a": [True]}, [2])
    with pytest.raises(ValueError):
        aggregate_pass_at_k({}, [1])


# ------------------------------------------------------------------ trajectory statistics


def _traj(**kw):
    base = {"reward": 0.0, "success": False, "tool_calls": 0, "tool_errors": 0, "truncated": False,
            "terminated": True, "response_tokens": 10}
    return {**base, **kw}


def test_trajectory_stats_handmade():
    trajs = [
        _traj(reward=1.0, success=True, tool_calls=2, tool_errors=0, response_tokens=100, em=1.0, f1=1.0, hit=1.0),
        _traj(tool_calls=3, tool_errors=1, truncated=True, terminated=False, response_tokens=300,
              em=0.0, f1=0.5, hit=1.0),
        _traj(reward=1.0, success=True, tool_calls=0, response_tokens=50, em=None, f1=None, hit=None),
        _traj(tool_calls=1, tool_errors=1, response_tokens=150),
    ]
    s = trajectory_stats(trajs)
    assert s["tool_calls_per_traj"] == pytest.approx(6 / 4)
    assert s["tool_success_rate"] == pytest.approx(1 - 2 / 6)
    assert s["truncation_rate"] == pytest.approx(0.25)
    assert s["normal_termination_rate"] == pytest.approx(0.75)
    assert s["response_tokens"] == pytest.approx(600 / 4)
    assert s["tokens_per_success"] == pytest.approx((100 + 50) / 2)
    assert s["em"] == pytest.approx(0.5)   # means over the trajectories that carry the field
    assert s["f1"] == pytest.approx(0.75)
    assert s["hit"] == pytest.approx(1.0)


def test_trajectory_stats_nan_cases_and_no_qa_fields():
    s = trajectory_stats([_traj(), _traj(response_tokens=30)])
    assert math.isnan(s["tool_success_rate"])   # no tool calls at all
    assert math.isnan(s["tokens_per_success"])  # no successes
    assert s["response_tokens"] == 20
    assert "em" not in s and "f1" not in s and "hit" not in s


def test_trajectory_stats_bad_input():
    with pytest.raises(ValueError, match="empty"):
        trajectory_stats([])
    bad = _traj()
    del bad["truncated"]
    with pytest.raises(ValueError, match=r"trajectory 1 .*'truncated'"):
        trajectory_stats([_traj(), bad])
    with pytest.raises(ValueError, match="tool_errors"):
        trajectory_stats([_traj(tool_calls=1, tool_errors=2)])


# ------------------------------------------------------------------ math-verify cross-check (paper scale)

def test_math_verify_crosscheck_counts_disagreements_on_the_projects_pairs():
    """math-verify (the field's grader) on this file's own equivalence pairs: the cross-check counts
    where it and math_equal disagree. Measured: 39 of 41 agree; math-verify rejects "10." = 10 and
    50\\% = 50, both of which math_equal accepts by its documented rules."""
    pytest.importorskip("math_verify")
    from rtpo.metrics_crosscheck import crosscheck

    pairs = [(a, b, math_equal(a, b)) for a, b in EQUAL + NOT_EQUAL]
    r = crosscheck(pairs + [(None, "1", False)])  # no prediction: not graded
    assert r["graded"] == len(EQUAL) + len(NOT_EQUAL) == 41
    assert r["disagree"] == r["ours_only"] + r["math_verify_only"] == 2
    assert r["ours_only"] == 2
    assert {(e["pred"], e["gold"]) for e in r["examples"]} == {("10.", "10"), ("50\\%", "50")}


def test_math_verify_crosscheck_without_the_package_names_it(monkeypatch):
    import builtins

    from rtpo import metrics_crosscheck

    real = builtins.__import__

    def no_math_verify(name, *a, **kw):
        if name == "math_verify":
            raise ImportError("No module named 'math_verify'")
        return real(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", no_math_verify)
    with pytest.raises(ValueError, match="pip install 'math-verify"):
        metrics_crosscheck.crosscheck([("1", "1", True)])


def test_evaluate_records_the_math_verify_crosscheck(tmp_path, monkeypatch):
    """`rtpo evaluate` with eval.math_verify on math: the eval JSON holds math-verify's count beside the
    project's numbers (a fake engine answers \\boxed{n}; the pass@1 is the project's grader's)."""
    pytest.importorskip("math_verify")
    import json

    import rtpo.evaluate as E
    from rtpo.config import load_config
    from rtpo.data import generate_tasks
    from tests.test_eval_concurrency import FakeServerEngine

    monkeypatch.setattr(E, "build_engine", lambda *a, **k: FakeServerEngine())
    cfg = load_config("config/smoke.yaml", ["eval.samples=2", "eval.math_verify=true"])
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "qwen3", "max_position_embeddings": 4096}))
    ev = tmp_path / "eval.jsonl"
    ev.write_text("".join(json.dumps(t.to_dict()) + "\n" for t in generate_tasks("math", 20, 0, "eval")))
    res = E.evaluate(model, "vanilla", "math", cfg, 0, ev, tmp_path / "eval.json", engine="local")
    mv = json.loads((tmp_path / "eval.json").read_text())["math_verify"]
    assert mv == res["math_verify"] and mv["version"] == "0.9.0"
    assert mv["graded"] == 40 and mv["disagree"] == mv["ours_only"] + mv["math_verify_only"]
    assert mv["disagree"] == 0  # integer answers: both graders agree on every one
    assert res["overall"]["samples"] == 40
