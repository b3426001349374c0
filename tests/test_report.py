"""rtpo.report: tables, figures and the claim ledger from a results tree.

Fast tests run `rtpo report all` once on a synthetic tree (tests/report_fixture.py) in the exact file
formats and check structure and that the numbers trace back to the raw JSONL / eval JSON. The slow
test checks what the smoke DAG itself produced (the `smoke_results` fixture of tests/conftest.py).
"""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rtpo.cli import main as rtpo_main
from rtpo.report.load import load_results, select_window
from rtpo.report.read import read_eval_json, read_metrics_jsonl
from rtpo.report.stats import (
    INCONCLUSIVE, KIND_STRUCTURAL, NOT_REPRODUCED, NOT_RUN, OPPOSITE_SIGN, REPRODUCED, VERDICTS, direction_verdict,
    equivalence_verdict,
    structural_verdict, summarize, t975, theory_verdict,
)
from tests.report_fixture import (
    PLANT_OFF_BEATS_ON, PLANT_OFF_SPREAD, PLANT_RTPO_VS_VANILLA, THEORY_ROWS, fixture_config, make_results_tree, write_config,
)

ROOT = Path(__file__).resolve().parent.parent
TABLES = ["table01_main", "table01_vs_vanilla", "table01_gains", "table_learning", "table_budget",
          "table02_credit_assignment", "table03_continuation",
          "table06_continuation_detail", "table07_airline_online", "table08_airline_eval", "table09_airline_tools",
          "table10_group_size", "table11_group_size_cost", "table12_trunk_failures", "table13_failure_dynamics",
          "table14_training_cost", "table21_budget", "tableG5_tool_use", "tableG6_sync",
          "timing_table11_group_size_cost", "timing_table14_training_cost", "timing_tableG6_sync"]
FIGURES = ["fig03_consistency", "fig_training_curves", "fig_main_results", "fig_group_size", "fig_continuation",
           "fig_sync", "fig_budget"]
STEPS = 6


def _report(workdir: Path, config: Path, what: str = "all") -> int:
    return rtpo_main(["report", what, "--config", str(config), "--results", str(workdir / "results"),
                      "--tables", str(workdir / "results" / "tables"), "--figures", str(workdir / "figures")])


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """A full synthetic tree (3 seeds, also for the ablations; every study of config.yaml) and its report."""
    work = tmp_path_factory.mktemp("report")
    cfg = fixture_config(**{"train.steps": STEPS, "seeds": [0, 1, 2], "ablations.seeds": [0, 1, 2]})
    config = write_config(cfg, work / "config.yaml")
    make_results_tree(work, cfg)
    assert _report(work, config) == 0
    return work, cfg


def _csv(work: Path, name: str) -> pd.DataFrame:
    return pd.read_csv(work / "results" / "tables" / f"{name}.csv", keep_default_na=True)


def _eval(work: Path, task: str, method: str, seed: int) -> dict:
    return json.loads((work / "results" / "eval" / task / method / f"seed{seed}.json").read_text())


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _md_grid(path: Path) -> list[list[str]]:
    rows = [line for line in path.read_text().splitlines() if line.startswith("|")]
    return [[c.strip() for c in r.strip("|").split(" | ")] for r in rows if not r.startswith("|---")]


# ------------------------------------------------------------------------------------------------
# structure
# ------------------------------------------------------------------------------------------------

def test_every_table_in_three_formats(tree):
    work, _ = tree
    tdir = work / "results" / "tables"
    for name in TABLES:
        df = _csv(work, name)
        assert len(df) > 0, name
        grid = _md_grid(tdir / f"{name}.md")
        assert len(grid) >= 2, name
        assert len({len(r) for r in grid}) == 1, f"{name}.md: ragged rows"
        tex = (tdir / f"{name}.tex").read_text()
        assert "\\begin{tabular}" in tex and "\\end{tabular}" in tex, name
        # as many LaTeX body rows as Markdown body rows
        body = tex.split("\\midrule", 1)[1].split("\\bottomrule", 1)[0]
        assert body.count("\\\\") == len(grid) - 1, name
        assert "±" not in tex and "Δ" not in tex, f"{name}.tex: raw unicode math left"
        if "mean" in df.columns:
            assert {"metric", "unit", "mean", "std", "n", "ci95_lo", "ci95_hi", "seeds", "values"} <= set(df.columns)


def test_figures_are_real_images(tree):
    import matplotlib.image as mpimg

    work, _ = tree
    for name in FIGURES:
        img = mpimg.imread(work / "figures" / f"{name}.png")
        h, w = img.shape[:2]
        assert w >= 800 and h >= 400, (name, img.shape)
        assert float(np.std(img[..., :3])) > 0.05, f"{name}.png is blank"
        assert (work / "figures" / f"{name}.pdf").read_bytes()[:4] == b"%PDF"


def test_inputs_manifest_lists_every_file_read(tree):
    work, cfg = tree
    man = _csv(work, "report_inputs")
    n_main = len(cfg["tasks"]) * len(cfg["methods"]) * len(cfg["seeds"])
    # vanilla (method.vanilla.steps = 0) is evaluated as is: an eval JSON but no metrics.jsonl
    trained = [m for m in cfg["methods"] if (cfg["method"].get(m) or {}).get("steps", 1) > 0]
    assert "vanilla" not in trained
    n_trained = len(cfg["tasks"]) * len(trained) * len(cfg["seeds"])
    assert (man[(man.kind == "metrics") & (man.scope == "main")].shape[0]) == n_trained
    assert (man[(man.kind == "eval") & (man.scope == "main")].shape[0]) == n_main
    assert set(man.scope) >= {"main", "group_size", "sync", "continuation", "credit_assignment", "theory"}
    assert all(Path(p).exists() for p in man.path)
    assert (man[man.kind == "metrics"].records == STEPS).all()
    assert (work / "results" / "tables" / "report_missing.txt").read_text() == ""


# ------------------------------------------------------------------------------------------------
# numbers trace to the runs
# ------------------------------------------------------------------------------------------------

def test_table1_cell_is_mean_of_eval_json(tree):
    work, cfg = tree
    df = _csv(work, "table01_main")
    for task, method, bench in (("math", "rtpo", "embedded-math-hard"), ("search", "grpo", "embedded-search-easy")):
        raw = [_eval(work, task, method, s)["benchmarks"][bench]["pass@1"] for s in cfg["seeds"]]
        row = df[(df.task == task) & (df.method == method) & (df.benchmark == bench)].iloc[0]
        assert row["mean"] == pytest.approx(np.mean(raw), abs=1e-12)
        assert row["std"] == pytest.approx(np.std(raw, ddof=1), abs=1e-12)
        assert row["n"] == len(cfg["seeds"])
        # the Markdown cell shows the same number in percent
        grid = _md_grid(work / "results" / "tables" / "table01_main.md")
        head = grid[0]
        line = next(r for r in grid if r[0] == task and r[1] == bench.replace("embedded-", ""))
        label = {"rtpo": "RTPO", "grpo": "GRPO"}[method]
        assert line[head.index(label)] == f"{100 * np.mean(raw):.1f} ± {100 * np.std(raw, ddof=1):.1f}"
    # the task average is the mean over benchmarks per seed, then over seeds
    per_seed = [np.mean([b["pass@1"] for b in _eval(work, "math", "arpo", s)["benchmarks"].values()])
                for s in cfg["seeds"]]
    row = df[(df.task == "math") & (df.method == "arpo") & (df.benchmark == "average")].iloc[0]
    assert row["mean"] == pytest.approx(np.mean(per_seed), abs=1e-12)


def test_table7_online_success_traces_to_jsonl(tree):
    work, cfg = tree
    df = _csv(work, "table07_airline_online")
    for step in (0, STEPS - 1):
        raw = [next(r for r in _jsonl(work / "results" / "runs" / "airline" / "grpo" / f"seed{s}" / "metrics.jsonl")
                    if r["step"] == step)["success_rate"] for s in cfg["seeds"]]
        row = df[(df.method == "grpo") & (df.step == step)].iloc[0]
        assert row["mean"] == pytest.approx(np.mean(raw), abs=1e-12)
        assert [float(v) for v in row["values"].split(";")] == pytest.approx(raw)


def test_cost_tables_sum_the_steps(tree):
    work, cfg = tree
    df = _csv(work, "table14_training_cost")
    walls = [sum(r["time"]["total"] for r in _jsonl(work / "results" / "runs" / "math" / "rtpo" / f"seed{s}"
                                                     / "metrics.jsonl")) for s in cfg["seeds"]]
    # wall-clock lives in the timing_ table only
    assert not df.metric.str.startswith("time").any()
    tdf = _csv(work, "timing_table14_training_cost")
    row = tdf[(tdf.task == "math") & (tdf.method == "rtpo") & (tdf.metric == "time_total")].iloc[0]
    assert row["mean"] == pytest.approx(np.mean(walls))
    sib = [sum(r["tokens"].get("sibling", 0) for r in _jsonl(work / "results" / "runs" / "math" / "rtpo" /
                                                             f"seed{s}" / "metrics.jsonl")) for s in cfg["seeds"]]
    row = df[(df.task == "math") & (df.method == "rtpo") & (df.metric == "tokens_sibling")].iloc[0]
    assert row["mean"] == pytest.approx(np.mean(sib))
    # group-size study: training-generation tokens of G4 from its own runs
    g = _csv(work, "table11_group_size_cost")
    tok = [sum(sum(r["tokens"].values()) for r in _jsonl(work / "results" / "ablations" / "group_size" / "G4" /
                                                         "airline" / "rtpo" / f"seed{s}" / "metrics.jsonl"))
           for s in cfg["ablations"]["seeds"]]
    row = g[(g.variant == "G4") & (g.metric == "tokens_total")].iloc[0]
    assert row["mean"] == pytest.approx(np.mean(tok))


def test_table10_zero_advantage_is_the_step_mean(tree):
    work, cfg = tree
    df = _csv(work, "table10_group_size")
    vals = [np.mean([r["zero_adv_frac"] for r in _jsonl(work / "results" / "ablations" / "group_size" / "G2" /
                                                        "airline" / "rtpo" / f"seed{s}" / "metrics.jsonl")])
            for s in cfg["ablations"]["seeds"]]
    row = df[(df.variant == "G2") & (df.metric == "zero_adv_frac")].iloc[0]
    assert row["mean"] == pytest.approx(np.mean(vals))


# ------------------------------------------------------------------------------------------------
# the ledger
# ------------------------------------------------------------------------------------------------

def test_ledger_verdicts_follow_the_planted_effects(tree):
    work, _ = tree
    led = _csv(work, "claims").set_index("claim_id")
    # planted: RTPO is exactly PLANT_RTPO_VS_VANILLA above Vanilla on every benchmark and seed: an interval of
    # zero width, which cannot be scored
    r = led.loc["4.1-vanilla"]
    assert r["ours_mean"] == pytest.approx(100 * PLANT_RTPO_VS_VANILLA)
    assert r["verdict"] == INCONCLUSIVE and r["n"] == 3 and "zero width" in r["note"]
    # planted: off-policy continuation beats on-policy, by a little more in each seed -> the paper's direction
    # fails: its raw interval lies wholly on the other side, so it reads against the paper whatever the
    # adjustment over its family does ("not reproduced" once adjusted, "opposite sign" otherwise)
    r = led.loc["4.4-average"]
    assert r["ours_mean"] == pytest.approx(-100 * (PLANT_OFF_BEATS_ON + PLANT_OFF_SPREAD * 1.0))
    assert r["ci95_hi"] < 0 and r["p_zero"] < 0.05
    assert r["verdict"] == (NOT_REPRODUCED if r["p_zero_bh"] < 0.05 else OPPOSITE_SIGN)
    # the paper's figure sits in its own labelled column only
    assert "paper (Qwen3-8B)" in led.columns
    assert "66.78" in led.loc["4.1-vanilla", "paper (Qwen3-8B)"]


def test_ledger_effect_traces_to_jsonl(tree):
    work, cfg = tree
    led = _csv(work, "claims").set_index("claim_id")

    def step_mean(method, seed):
        recs = _jsonl(work / "results" / "runs" / "math" / method / f"seed{seed}" / "metrics.jsonl")
        return np.mean([r["kl_rollout_train"] for r in recs])
    diffs = [step_mean("grpo", s) - step_mean("rtpo", s) for s in cfg["seeds"]]
    r = led.loc["4.2-kl-grpo-math"]
    assert r["ours_mean"] == pytest.approx(np.mean(diffs))
    half = t975(2) * np.std(diffs, ddof=1) / math.sqrt(3)
    assert (r["ci95_lo"], r["ci95_hi"]) == pytest.approx((np.mean(diffs) - half, np.mean(diffs) + half))
    # GRPO − RTPO KL >= 0 holds by construction (k3 >= 0, RTPO's ~0): structural, never "reproduced"
    assert r["kind"] == KIND_STRUCTURAL
    expected = structural_verdict(direction_verdict(summarize(diffs), +1))
    assert r["verdict"] == expected


def test_ledger_covers_every_section_and_states_its_rule(tree):
    work, _ = tree
    led = _csv(work, "claims")
    srcs = " ".join(led.source)
    for sec in ("§4.1", "§4.2", "§4.3", "§4.4", "§F.1", "§F.2", "§G.1", "§G.2", "§G.3", "§G.4", "§G.5", "§G.6",
                "§G.7", "theory"):
        assert sec in srcs, sec
    assert set(led.verdict) <= set(VERDICTS)
    theory = led[led.rule == "theory-check"]
    assert list(theory.verdict) == [theory_verdict(r["closed_form"], r["monte_carlo"], r["tolerance"], r["holds"],
                                                   r.get("note", "")) for r in THEORY_ROWS]
    md = (work / "results" / "tables" / "claims.md").read_text()
    assert "Benjamini-Hochberg" in md and "interval of zero width" in md and "not measurable at this scale" in md
    assert "holds by construction" in md and "paper's sign, smaller effect" in md
    assert "\\begin{longtable}" in (work / "results" / "tables" / "claims.tex").read_text()


def test_verdict_rule():
    assert direction_verdict(summarize([1.0, 1.2, 0.9]), +1) == REPRODUCED
    assert direction_verdict(summarize([1.0, 1.2, 0.9]), -1) == NOT_REPRODUCED
    assert direction_verdict(summarize([-1.0, -1.2, -0.9]), -1) == REPRODUCED
    assert direction_verdict(summarize([1.0, -1.0, 0.5]), +1) == INCONCLUSIVE
    assert direction_verdict(summarize([5.0]), +1) == INCONCLUSIVE           # one seed
    assert direction_verdict(summarize([]), +1) == INCONCLUSIVE
    assert equivalence_verdict(summarize([1.0, 1.001, 0.999]), 1.0, 0.02) == REPRODUCED
    assert equivalence_verdict(summarize([0.9, 0.91, 0.89]), 1.0, 0.02) == NOT_REPRODUCED
    assert equivalence_verdict(summarize([0.9, 1.1, 1.0]), 1.0, 0.02) == INCONCLUSIVE
    s = summarize([1.0, 2.0, 3.0])
    t2 = 0.95 / math.sqrt(2 * 0.975 * 0.025)   # t(0.975, 2) in closed form, 4.30265... (the table had 4.303)
    assert (s.lo, s.hi) == pytest.approx((2 - t2 / math.sqrt(3), 2 + t2 / math.sqrt(3)), rel=1e-12)


def test_windows_do_not_overlap():
    g = pd.DataFrame({"step": range(10)})
    early, fourth, late = (select_window(g, w).step.tolist() for w in ((0, .2), (.6, .8), (.8, 1)))
    assert early == [0, 1] and fourth == [6, 7] and late == [8, 9]
    two = pd.DataFrame({"step": [0, 1]})
    assert select_window(two, (0, .2)).step.tolist() == [0] and select_window(two, (.8, 1)).step.tolist() == [1]


# ------------------------------------------------------------------------------------------------
# the ledger's per-section builders and the paper's reference table
# ------------------------------------------------------------------------------------------------

def test_claims_take_their_paper_figure_and_source_from_paper_reference(tree):
    from rtpo.report import ledger, table_base, tables, tables_main, tables_studies
    from rtpo.report.paper_reference import PAPER, PAPER_GAINS

    work, cfg = tree
    claims = ledger.build_claims(load_results(work / "results", cfg))
    ids = [c.id for c in claims]
    assert len(ids) == len(set(ids))
    assert ids == [c.id for section in ledger.SECTIONS for c in section(load_results(work / "results", cfg))]
    for c in claims:  # the very entry of the table, not a copy of its text
        assert any(c.ref is f for f in PAPER.values()), c.id
        assert (c.source, c.paper) == (c.ref.source, c.ref.text), c.id
        assert c.source.startswith("§") or (c.control and c.source == "control (this artifact)"), c.id
    # every entry is shown somewhere: by a claim of this tree (every task and study), the theorem rows, or
    # (the fallback for a headline task other than math / search) none here
    used = {k for k, f in PAPER.items() if any(c.ref is f for c in claims)} | {"theorems"}
    assert set(PAPER) - used == {"ratio_grpo_other"}
    assert PAPER_GAINS == {"vanilla": 66.78, "grpo": 21.50, "seeupo": 10.76}
    for k, f in PAPER.items():
        if not math.isnan(f.value):  # a number a table or a level claim uses is the one its text prints
            assert f"{f.value:g}" in f.text, k
    # the ledger and the table modules hold no paper figure of their own (texts with a number of two digits or more)
    code = "".join(Path(m.__file__).read_text() for m in (ledger, table_base, tables, tables_main, tables_studies))
    for k, f in PAPER.items():
        if re.search(r"\d[.,]?\d", f.text):
            assert f.text not in code, k
    for number in ("66.78", "21.50", "10.76", "89.61", "9,650.5", "56.25"):
        assert number not in code, number


def _synthetic(cfg: dict, steps: list[dict] = (), evals: list[dict] = ()):
    """Results of these rows; each main run's run.json records the config's method section as its settings
    (what the report reads a run trained with)."""
    from rtpo.experiment import RunKey
    from rtpo.report.load import Results, ablation_studies

    records = {}
    for t in cfg.get("tasks", []):
        for m in cfg.get("methods", []):
            for s in cfg.get("seeds", []):
                key = RunKey("main", "", t, m, s)
                records[key] = {"key": key.as_dict(), "copy_of": None,
                                "settings": {"method": dict((cfg.get("method") or {}).get(m) or {})}}
    return Results(Path("."), cfg, pd.DataFrame(list(steps)), pd.DataFrame(list(evals)), None,
                   ablation_studies(cfg), records=records)


def _group_size_results(default_g: int, values=(2, 3, 4)):
    cfg = {"tasks": ["airline"], "methods": ["rtpo"], "seeds": [0, 1], "method": {"rtpo": {"group_size": default_g}},
           "ablations": {"seeds": [0, 1], "group_size": {"task": "airline", "values": list(values)}}}
    zero = {2: 0.95, 3: 0.9, 4: 0.85}
    steps = [{"scope": "group_size", "variant": f"G{g}", "task": "airline", "method": "rtpo", "seed": s, "step": i,
              "zero_adv_frac": zero[g] + 0.01 * s, "time_total": 1.0 * g, "tokens_total": 100.0 * g}
             for g in values for s in (0, 1) for i in range(5)]
    evals = [{"scope": "group_size", "variant": f"G{g}", "task": "airline", "method": "rtpo", "benchmark": "overall",
              "seed": s, "k": 4, "pass@1": 0.1 * g, "tokens_per_success": 1000.0 - 100 * g}
             for g in values for s in (0, 1)]
    return _synthetic(cfg, steps, evals)


def test_group_size_builder_compares_the_default_g_with_the_next_larger():
    from rtpo.report.claims.group_size import group_size

    claims = {c.id: c for c in group_size(_group_size_results(default_g=3))}
    assert list(claims) == ["G.2-zero-adv", "G.2-pass1", "G.2-inference-tokens", "G.2-wallclock", "G.2-train-tokens",
                            "G.9-zero-adv-level", "G.2-G2-degenerate"]
    z = claims["G.2-zero-adv"]
    assert z.quantity.startswith("G4 vs G3") and z.sign == -1
    assert z.values == pytest.approx({0: 100 * (0.85 - 0.9), 1: 100 * (0.85 - 0.9)})
    assert claims["G.2-pass1"].values == pytest.approx({0: 10.0, 1: 10.0})
    assert claims["G.2-train-tokens"].values == pytest.approx({0: 100 * (4 / 3 - 1), 1: 100 * (4 / 3 - 1)})
    # the level claim tests against the paper's level, 80 % (§G.9)
    assert claims["G.9-zero-adv-level"].values == pytest.approx({0: 5.0, 1: 6.0})
    assert claims["G.2-G2-degenerate"].values == pytest.approx({0: 5.0, 1: 5.0})
    assert [c.id for c in claims.values() if c.timing] == ["G.2-wallclock"]
    assert claims["G.2-wallclock"].evidence.startswith("timing_")
    # default G = 2: G3 vs G2; a default without a larger variant: the two largest
    assert group_size(_group_size_results(default_g=2))[0].quantity.startswith("G3 vs G2")
    assert group_size(_group_size_results(default_g=4))[0].quantity.startswith("G4 vs G3")
    # one group size: one inconclusive row that says why
    (only,) = group_size(_group_size_results(default_g=3, values=(3,)))
    assert only.id == "G.2-zero-adv" and only.values == {} and "fewer than two group sizes" in only.note


def test_policy_drift_builder_is_on_minus_off_policy_output_hit():
    from rtpo.report.claims.policy_drift import policy_drift

    cfg = {"tasks": ["search"], "methods": ["rtpo"], "seeds": [0, 1],
           "ablations": {"seeds": [0, 1], "continuation": {"task": "search", "values": ["on_policy", "off_policy"]}}}
    hit = {("on_policy", "easy"): 0.5, ("off_policy", "easy"): 0.4, ("on_policy", "hard"): 0.6,
           ("off_policy", "hard"): 0.3}
    evals = [{"scope": "continuation", "variant": v, "task": "search", "method": "rtpo",
              "benchmark": f"embedded-search-{tier}", "seed": s, "k": 4, "pass@1": 0.0, "hit": h + 0.01 * s}
             for (v, tier), h in hit.items() for s in (0, 1)]
    claims = {c.id: c for c in policy_drift(_synthetic(cfg, evals=evals))}
    assert list(claims) == ["4.4-average", "4.4-hardest", "4.4-horizon-trend"]
    assert "hit averaged over the search benchmarks" in claims["4.4-average"].quantity
    assert claims["4.4-average"].values == pytest.approx({0: 20.0, 1: 20.0})     # (0.1 + 0.3) / 2
    assert claims["4.4-hardest"].values == pytest.approx({0: 30.0, 1: 30.0})
    assert claims["4.4-horizon-trend"].values == pytest.approx({0: 20.0, 1: 20.0})  # 0.3 - 0.1
    assert claims["4.4-average"].source == "§4.4, Table 3"
    # no continuation study: the claim stays, "not run in this config", and says why
    del cfg["ablations"]["continuation"]
    rows = policy_drift(_synthetic(cfg, evals=evals))
    assert [c.id for c in rows] == ["4.4-average", "4.4-hardest", "4.4-horizon-trend"]
    assert all(c.values == {} and "no ablations.continuation study" in c.absent for c in rows)


def test_consistency_builder_tests_the_ratio_against_the_papers_level():
    from rtpo.report.claims.consistency import RATIO_MARGIN, consistency

    cfg = {"tasks": ["math"], "methods": ["grpo", "rtpo"], "seeds": [0, 1], "env": {"math": {"psi": "qwen3"}}}
    steps = [{"scope": "main", "variant": "", "task": "math", "method": m, "seed": s, "step": i,
              "ratio_mean": (1.0 if m == "rtpo" else 0.9 + 0.01 * i), "geo_ratio": (1.0 if m == "rtpo" else 0.9 + 0.01 * i),
              "kl_rollout_train": 0.0 if m == "rtpo" else 0.03 - 0.002 * i}
             for m in ("grpo", "rtpo") for s in (0, 1) for i in range(5)]
    evals = [{"scope": "main", "variant": "", "task": "math", "method": m, "benchmark": "embedded-math-easy",
              "seed": s, "k": 4, "pass@1": 0.5} for m in ("grpo", "rtpo") for s in (0, 1)]
    claims = {c.id: c for c in consistency(_synthetic(cfg, steps, evals))}
    assert list(claims) == ["4.2-ratio-rtpo-math", "4.2-ratio-grpo-math", "F.2-recovery-grpo-math", "4.2-kl-grpo-math",
                            "4.2-kl-seeupo-math", "F.2-seeupo-jitter", "F.2-seeupo-jitter-grpo"]
    r = claims["4.2-ratio-rtpo-math"]
    assert (r.rule, r.center, r.margin) == ("equivalence", 1.0, RATIO_MARGIN) and r.values == {0: 1.0, 1: 1.0}
    assert claims["4.2-ratio-grpo-math"].values == pytest.approx({0: 0.08, 1: 0.08})   # 1 - mean(0.90..0.94)
    assert claims["4.2-ratio-grpo-math"].paper == "GRPO 0.89 → 0.97 over 30 steps"
    # GRPO's mismatch recovers: KL over the first fifth (step 0) − over the last (step 4), against the paper's
    # 73 % fall of 1 − ratio carried to our first-fifth KL
    rec = claims["F.2-recovery-grpo-math"]
    assert rec.values == pytest.approx({0: 0.008, 1: 0.008})
    assert rec.effect == pytest.approx(0.03 * (1 - 0.03 / 0.11))
    assert claims["4.2-kl-grpo-math"].values == pytest.approx({0: 0.026, 1: 0.026})
    # under psi = full there is no mismatch to recover: no values, and the note says why
    cfg["env"]["math"]["psi"] = "full"
    rec = {c.id: c for c in consistency(_synthetic(cfg, steps, evals))}["F.2-recovery-grpo-math"]
    assert rec.values == {} and "no mismatch to recover on math: psi = full" in rec.note
    assert claims["4.2-kl-seeupo-math"].values == {}   # no SeeUPO runs: n = 0, inconclusive


# ------------------------------------------------------------------------------------------------
# standard errors, paired comparisons, learning, budget, status, timings kept apart
# ------------------------------------------------------------------------------------------------

def _problems(work: Path, task: str, method: str, seed: int) -> dict[str, dict[str, float]]:
    """{benchmark: {problem: pass@1}} straight from the eval JSON's per_problem."""
    out: dict[str, dict[str, float]] = {}
    for d in _eval(work, task, method, seed)["per_problem"]:
        out.setdefault(d["benchmark"], {})[d["id"]] = d["successes"] / d["samples"]
    return out


def test_table1_states_standard_errors(tree):
    work, cfg = tree
    df = _csv(work, "table01_main")
    row = df[(df.task == "math") & (df.method == "grpo") & (df.benchmark == "average")].iloc[0]
    # SE over problems x samples, by hand: per seed and benchmark var(ddof=1)/n, summed, / (S B)^2
    S, var = len(cfg["seeds"]), 0.0
    per_seed = []
    for s in cfg["seeds"]:
        pb = _problems(work, "math", "grpo", s)
        B = len(pb)
        per_seed.append(np.mean([np.mean(list(v.values())) for v in pb.values()]))
        var += sum(np.var(list(v.values()), ddof=1) / len(v) for v in pb.values()) / (S * B) ** 2
    assert row["se_eval"] == pytest.approx(math.sqrt(var), rel=1e-9)
    assert row["se_seeds"] == pytest.approx(np.std(per_seed, ddof=1) / math.sqrt(S), rel=1e-9)
    assert row["mean"] == pytest.approx(np.mean(per_seed), abs=1e-12)  # per_problem agrees with pass@1
    grid = _md_grid(work / "results" / "tables" / "table01_main.md")
    head = grid[0]
    se_row = next(r for r in grid if r[0] == "math" and r[1] == "SE over problems × samples")
    assert se_row[head.index("GRPO")] == f"{100 * math.sqrt(var):.1f}"
    assert any(r[0] == "math" and r[1] == "SE over seeds" for r in grid)
    notes = (work / "results" / "tables" / "table01_main.md").read_text()
    assert "per-task standard error of pass@1" in notes and "math " in notes


def test_every_rl_method_against_vanilla_paired_by_problem_and_seed(tree):
    work, cfg = tree
    df = _csv(work, "table01_vs_vanilla")
    rl = [m for m in cfg["methods"] if m != "vanilla"]
    for t in [*cfg["tasks"], "math+search"]:
        assert set(df[df.task == t].method) == set(rl), t
    by_problem = df[df.metric == "diff pass@1, paired by problem and seed"].set_index(["task", "method"])
    # planted: RTPO has exactly one success of 4 more than Vanilla on every problem: Δ = 0.25, SE 0
    r = by_problem.loc[("math", "rtpo")]
    assert r["mean"] == pytest.approx(PLANT_RTPO_VS_VANILLA) and r["se"] == pytest.approx(0.0, abs=1e-12)
    assert r["n"] == 3 * sum(len(v) for v in _problems(work, "math", "rtpo", 0).values())
    # an unplanted one, by hand
    diffs, S = [], len(cfg["seeds"])
    var = 0.0
    for s in cfg["seeds"]:
        a, b = _problems(work, "search", "arpo", s), _problems(work, "search", "vanilla", s)
        B = len(a)
        for bench in a:
            d = [a[bench][p] - b[bench][p] for p in sorted(a[bench])]
            diffs.append(np.mean(d) / B)
            var += np.var(d, ddof=1) / len(d) / (S * B) ** 2
    r = by_problem.loc[("search", "arpo")]
    assert r["mean"] == pytest.approx(sum(diffs) / S, abs=1e-12)
    assert r["se"] == pytest.approx(math.sqrt(var), rel=1e-9)
    half = t975(int(r["df"])) * math.sqrt(var)
    assert (r["ci95_lo"], r["ci95_hi"]) == pytest.approx((r["mean"] - half, r["mean"] + half))
    grid = _md_grid(work / "results" / "tables" / "table01_vs_vanilla.md")
    line = next(x for x in grid if x[0] == "math" and x[1] == "RTPO")
    assert line[grid[0].index("CI excludes 0")] == "yes (+)"
    assert line[grid[0].index("Δ pass@1 vs Vanilla (pp) [95 % CI], paired by problem and seed")] == \
        "+25.0 [+25.0, +25.0]"


def _learning_tree(tmp_path: Path):
    """A small tree whose training rewards are set by hand: GRPO rises 0.1 -> 0.5 over 10 steps in every
    seed, SeeUPO sits at reward 0 (saturated at the floor), Tree-GRPO is flat at 0.4 with 95 % zero
    advantage and 30 % clipping."""
    cfg = fixture_config(**{"train.steps": 10, "tasks": ["math"], "methods": ["vanilla", "grpo", "seeupo",
                                                                              "tree_grpo"],
                            "seeds": [0, 1, 2], "ablations": {"seeds": [0]}})
    config = write_config(cfg, tmp_path / "config.yaml")
    make_results_tree(tmp_path, cfg, theory=False)
    for m in ("grpo", "seeupo", "tree_grpo"):
        for s in cfg["seeds"]:
            p = tmp_path / "results" / "runs" / "math" / m / f"seed{s}" / "metrics.jsonl"
            recs = _jsonl(p)
            for r in recs:
                if m == "grpo":
                    r["reward_mean"] = 0.1 + 0.4 * r["step"] / 9 + 0.01 * s
                elif m == "seeupo":
                    r["reward_mean"] = 0.0
                else:
                    r["reward_mean"] = 0.4 + (0.02 if (r["step"] + s) % 2 else -0.02)
                    r["zero_adv_frac"], r["clip_frac"] = 0.95, 0.3
            p.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in recs))
    return cfg, config


def test_learning_table_deltas_and_diagnoses(tmp_path):
    cfg, config = _learning_tree(tmp_path)
    assert _report(tmp_path, config, "tables") == 0
    df = _csv(tmp_path, "table_learning")
    d = df[df.metric == "reward last fifth - first fifth"].set_index("method")
    assert "vanilla" not in d.index  # steps: 0, nothing trained
    # GRPO: first fifth = steps 0-1, last fifth = steps 8-9 -> delta 0.4 * (8.5 - 0.5) / 9 in every seed
    assert d.loc["grpo", "mean"] == pytest.approx(0.4 * 8 / 9)
    assert d.loc["grpo", "excludes_zero"] == "yes (+)" and d.loc["grpo", "diagnosis"] == "learns"
    assert d.loc["grpo", "window_steps"] == 2 and d.loc["grpo", "steps"] == 10
    assert d.loc["seeupo", "excludes_zero"] in ("no", "—")
    assert "saturated at 0" in d.loc["seeupo", "diagnosis"]
    diag = d.loc["tree_grpo", "diagnosis"]
    assert d.loc["tree_grpo", "excludes_zero"] == "no"
    assert "95 % zero advantage" in diag and "clip active on 30 %" in diag and "2 step(s) per fifth" in diag
    # the diagnostics are the step means of the JSONL columns
    z = df[(df.method == "tree_grpo") & (df.metric == "zero_adv_frac")].iloc[0]
    assert z["mean"] == pytest.approx(0.95)
    md = (tmp_path / "results" / "tables" / "table_learning.md").read_text()
    assert "CI excludes 0 in: math/GRPO (+)." in md
    assert "— (kl_coef 0)" in md  # no reference model: no KL to ref shown


def test_budget_table_counts_like_e3_and_flags_rtpo(tree):
    work, cfg = tree
    df = _csv(work, "table_budget")
    paper = df[df.metric == "rollouts_per_prompt_paper"].set_index(["task", "method"])
    for s_ in cfg["seeds"]:
        recs = _jsonl(work / "results" / "runs" / "search" / "rtpo" / f"seed{s_}" / "metrics.jsonl")
        # E.3 counts trunks + sibling rollouts, not the trunk's own regenerated continuation
        want = np.mean([r["rollouts"]["trunk"] + r["rollouts"]["sibling"] for r in recs])
        got = float(paper.loc[("search", "rtpo"), "values"].split(";")[cfg["seeds"].index(s_)])
        assert got == pytest.approx(want)
        assert want < np.mean([r["rollouts_per_prompt"] for r in recs])
    # baselines 8 per prompt (ARPO 8.5, Tree-GRPO 8), RTPO 2 + 4 L with L ~ 2: flagged, the others not
    for t in cfg["tasks"]:
        block = paper.loc[t]
        med = float(np.median(block["mean"]))
        assert (block["task_median"] == med).all()
        for m, r in block.iterrows():
            assert bool(r["flag"]) == (abs(r["mean"] / med - 1) > 0.10), (t, m)
        assert bool(block.loc["rtpo", "flag"]) and not block.loc["grpo", "flag"]
    md = (work / "results" / "tables" / "table_budget.md").read_text()
    assert "Flagged: " in md and "RTPO" in md.split("Flagged: ")[1].split("\n")[0]


def test_budget_table_shows_per_task_settings(tmp_path):
    cfg = fixture_config(**{"train.steps": 3, "tasks": ["math", "airline"], "methods": ["vanilla", "grpo", "rtpo"],
                            "seeds": [0], "ablations": {"seeds": [0]}})
    cfg["method"]["rtpo"].update(trunks=2, group_size=3)  # the default, whatever config.yaml ships
    cfg["method"]["rtpo"]["per_task"] = {"math": {"trunks": 1, "group_size": 4}}
    config = write_config(cfg, tmp_path / "config.yaml")
    make_results_tree(tmp_path, cfg, theory=False)
    assert _report(tmp_path, config, "tables") == 0
    grid = _md_grid(tmp_path / "results" / "tables" / "table_budget.md")
    col = grid[0].index("settings")
    rows = {(r[0], r[1]): r[col] for r in grid[1:]}
    assert rows[("math", "RTPO")] == "trunks 1, group_size 4" and rows[("airline", "RTPO")] == "trunks 2, group_size 3"


def test_closest_trunks_and_g_reproduce_the_papers_e3_choice():
    from rtpo.report.tables_main import closest_trunks_g

    # E.3: 16 rollouts per prompt; math 4 trunks, search 2, each with 2 siblings per realized boundary
    assert closest_trunks_g(1.5, 16) == (4, 3, 16.0)
    assert closest_trunks_g(3.5, 16) == (2, 3, 16.0)
    assert closest_trunks_g(2.0, 8)[:2] == (1, 4)      # 1 (1 + 3 * 2) = 7, the nearest to 8
    assert closest_trunks_g(math.nan, 8) is None


def test_status_file_numbers_come_from_the_run(tree):
    work, cfg = tree
    tdir = work / "results" / "tables"
    status = (tdir / "status.md").read_text()
    assert status.startswith("<!-- generated by `rtpo report status`")
    t1 = _csv(work, "table01_main")
    v = t1[(t1.task == "airline") & (t1.method == "vanilla") & (t1.benchmark == "average")].iloc[0]
    line = next(x for x in status.splitlines() if x.startswith("| warm start (Vanilla)"))
    assert f"{100 * v['mean']:.1f} ± {100 * v['std']:.1f}" in line
    led = _csv(work, "claims")
    emp = led[led.kind == "empirical"].verdict.value_counts()
    assert f"{len(led)} claims by kind" in status
    assert (f"{int(emp.sum())} empirical (" + ", ".join(f"{emp[v]} {v}" for v in
            VERDICTS if emp.get(v))) in status
    # a disagreement with the paper is reported as such (the planted off-policy win)
    assert "4.4-average" in status.split("Not reproduced: ")[1]
    assert "Learning (results/tables/table_learning.md)" in status and "Rollouts per prompt" in status
    # no timing in status.md (it must be byte-identical on a rerun): those go to timing_status.md
    assert "span of this results tree" not in status and not re.search(r"\d (min|s)\b", status)
    assert "training (main grid, sum of per-step time.total)" in (tdir / "timing_status.md").read_text()


def test_ledger_keeps_wall_clock_claims_apart(tree):
    work, _ = tree
    led, tim = _csv(work, "claims"), _csv(work, "timing_claims")
    assert set(tim.claim_id) == {"G.2-wallclock", "G.4-time_total-grpo"}
    assert not set(tim.claim_id) & set(led.claim_id)
    assert "G.4-tokens_total-grpo" in set(led.claim_id)
    assert "2 wall-clock claims are in timing_claims.md" in (work / "results" / "tables" / "claims.md").read_text()


def test_tables_do_not_depend_on_timings(tree, tmp_path):
    """Every table but the timing_* files is a function of the non-timing numbers: change every
    `time.*` and eval `wall_s`, rerun the report: the other files are byte-identical. The change
    inverts which runs are slow (t -> 100 / (1 + t)), so the wall-clock claims' verdicts change too
    (a count of them in claims.md would show)."""
    work, cfg = tree
    other = tmp_path / "other"
    shutil.copytree(work / "results", other / "results", ignore=shutil.ignore_patterns("tables"))
    for p in (other / "results").rglob("metrics.jsonl"):
        recs = _jsonl(p)
        for r in recs:
            r["time"] = {k: 100.0 / (1.0 + v) for k, v in r["time"].items()}
        p.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in recs))
    for p in [*(other / "results" / "eval").rglob("*.json"), *(other / "results" / "ablations").rglob("eval_*.json")]:
        doc = json.loads(p.read_text())
        doc["wall_s"] = 99.0
        p.write_text(json.dumps(doc, indent=1, sort_keys=True))
    config = write_config(cfg, other / "config.yaml")
    assert _report(other, config, "tables") == 0 and _report(other, config, "ledger") == 0
    assert _report(other, config, "status") == 0
    a, b = work / "results" / "tables", other / "results" / "tables"
    names = sorted(p.name for p in a.iterdir() if p.is_file() and p.name not in ("report_inputs.csv", ".tables.done"))
    assert "status.md" in names and "claims.csv" in names
    same = [n for n in names if not n.startswith("timing_")]
    for n in same:
        assert (a / n).read_bytes() == (b / n).read_bytes(), n
    # and the timing files did see the change, down to the wall-clock claims' values (their verdicts, at 3 seeds
    # of random times and Benjamini-Hochberg adjusted, are inconclusive in both)
    assert (a / "timing_table14_training_cost.csv").read_bytes() != (b / "timing_table14_training_cost.csv").read_bytes()
    ta, tb = pd.read_csv(a / "timing_claims.csv"), pd.read_csv(b / "timing_claims.csv")
    assert list(ta.claim_id) == list(tb.claim_id) and not np.allclose(ta.ours_mean, tb.ours_mean)


def test_problem_summary_and_per_problem_input(tmp_path):
    from rtpo.report.read import read_eval_problems
    from rtpo.report.stats import paired_cells, problem_summary

    cells = {0: {"a": {"p1": 1.0, "p2": 0.0}, "b": {"p3": 0.5, "p4": 0.5, "p5": 1.0}},
             1: {"a": {"p1": 0.5, "p2": 0.5}, "b": {"p3": 0.0, "p4": 0.5, "p5": 0.5}}}
    ps = problem_summary(cells)
    means = [(0.5 + 2 / 3) / 2, (0.5 + 1 / 3) / 2]
    assert ps.mean == pytest.approx(np.mean(means))
    var = (0.5 / 2 + (1 / 12) / 3 + 0.0 / 2 + (1 / 12) / 3) / 16
    assert ps.se == pytest.approx(math.sqrt(var)) and ps.df == 6 and ps.n_problems == 10 and ps.n_seeds == 2
    # a seed lacking a benchmark is left out; pairing keeps common problems only
    assert problem_summary({**cells, 2: {"a": {"p1": 1.0}}}).n_seeds == 2
    d = paired_cells(cells, {0: {"a": {"p1": 0.0}}, 1: {"a": {"p1": 0.5, "p9": 1.0}}})
    assert d == {0: {"a": {"p1": 1.0}}, 1: {"a": {"p1": 0.0}}}
    e = tmp_path / "seed0.json"
    doc = {"task": "math", "method": "rtpo", "seed": 0, "k": 4, "benchmarks": {"b": {"pass@1": 0.5}},
           "overall": {"pass@1": 0.5}}
    e.write_text(json.dumps({**doc, "per_problem": [{"id": "x", "benchmark": "b", "successes": 5, "samples": 4}]}))
    with pytest.raises(ValueError, match=r"seed0\.json: per_problem\[0\]: successes 5 > samples 4"):
        read_eval_problems(e)
    e.write_text(json.dumps(doc))   # an eval JSON written before per_problem existed
    assert read_eval_problems(e) == []


def test_status_resolution_scales_with_problems():
    from rtpo.report.stats import ProblemSummary
    from rtpo.report.status import resolution

    def comp(half):
        return {"problem": ProblemSummary(0.0, half / 1.96, 100, -half, half, 3, 90)}
    # median half-width 0.10 (10 pp) at 30 problems: a 5-pp half-width needs 4x the problems
    assert resolution([comp(0.08), comp(0.10), comp(0.30)], 30) == "10.0; ~120 (have 30)"
    assert resolution([], 30) == "—"


def test_steplog_records_clip_kl_ref_and_rollout_kinds():
    from types import SimpleNamespace

    from rtpo.engine.base import UpdateStats
    from rtpo.instrument import StepLog

    def traj(kind, reward=0.0):
        turn = SimpleNamespace(kind=kind, action_ids=[1, 2, 3])
        return SimpleNamespace(generated_turns=[turn], turns=[turn], tool_calls=0, tool_errors=0, reward=reward,
                               truncated=False, response_tokens=3, info={})
    log = StepLog()
    trunks = [traj("trunk", 1.0), traj("trunk")]
    log.add_trajectories(trunks)
    log.add_trajectories([traj("sibling") for _ in range(4)] + [traj("continuation")])
    log.add_update(UpdateStats(0.1, 1.0, 0.0, clip_frac=0.5, kl_ref=0.2, grad_norm=1.0, trained_tokens=10), [0.5])
    log.add_update(UpdateStats(0.1, 1.0, 0.0, clip_frac=0.0, kl_ref=0.0, grad_norm=1.0, trained_tokens=30), [0.0])
    rec = log.record(trunks, n_prompts=2)
    assert rec["clip_frac"] == pytest.approx(0.125) and rec["kl_ref"] == pytest.approx(0.05)  # token-weighted
    assert rec["rollouts"] == {"continuation": 0.5, "sibling": 2.0, "trunk": 1.0}
    assert rec["rollouts_per_prompt"] == pytest.approx(3.5)


# ------------------------------------------------------------------------------------------------
# smaller configs, missing and bad inputs
# ------------------------------------------------------------------------------------------------

def test_smoke_sized_config_reads_only_what_it_names(tmp_path):
    cfg = fixture_config(ROOT / "config" / "smoke.yaml")
    config = write_config(cfg, tmp_path / "config.yaml")
    make_results_tree(tmp_path, cfg)
    # a leftover variant the config does not name must be ignored
    stray = tmp_path / "results" / "ablations" / "group_size" / "G4"
    shutil.copytree(tmp_path / "results" / "ablations" / "group_size" / "G3", stray)
    assert _report(tmp_path, config, "tables") == 0
    assert _report(tmp_path, config, "ledger") == 0
    g = _csv(tmp_path, "table10_group_size")
    assert set(g.variant) == {"G2", "G3"}
    led = _csv(tmp_path, "claims")
    seeded = led[led.rule != "theory-check"]
    ran = seeded[seeded.verdict != NOT_RUN]   # Control B runs with the sweep's target, not this report's
    assert (seeded.n <= 1).all() and (ran.verdict == INCONCLUSIVE).all()
    assert set(seeded[seeded.verdict == NOT_RUN].claim_id) == {"C.B-interaction"}
    ca = _csv(tmp_path, "table02_credit_assignment")
    assert set(ca.method) == {"grpo", "rtpo_ca"}
    t1 = _csv(tmp_path, "table01_main")
    raw = json.loads((tmp_path / "results" / "eval" / "airline" / "seeupo" / "seed0.json").read_text())
    row = t1[(t1.task == "airline") & (t1.method == "seeupo") & (t1.benchmark == "embedded-airline-medium")].iloc[0]
    assert row["mean"] == raw["benchmarks"]["embedded-airline-medium"]["pass@1"] and row["n"] == 1 \
        and math.isnan(row["std"])


def test_missing_run_is_listed_and_left_out(tmp_path):
    cfg = fixture_config(**{"train.steps": 3, "seeds": [0, 1, 2], "ablations.seeds": [0]})
    config = write_config(cfg, tmp_path / "config.yaml")
    make_results_tree(tmp_path, cfg, theory=False)
    gone = tmp_path / "results" / "eval" / "math" / "grpo" / "seed1.json"
    gone.unlink()
    assert _report(tmp_path, config, "tables") == 0
    assert str(gone) in (tmp_path / "results" / "tables" / "report_missing.txt").read_text()
    t1 = _csv(tmp_path, "table01_main")
    row = t1[(t1.task == "math") & (t1.method == "grpo") & (t1.benchmark == "embedded-math-easy")].iloc[0]
    assert row["n"] == 2 and row["seeds"] == "0;2"
    assert _report(tmp_path, config, "ledger") == 0
    led = _csv(tmp_path, "claims").set_index("claim_id")
    assert led.loc["theory", "verdict"] == INCONCLUSIVE


def test_bad_inputs_name_file_and_line(tmp_path):
    p = tmp_path / "metrics.jsonl"
    p.write_text('{"step": 0, "reward_mean": 0.1}\n{"step": 1, "reward_mean": \n')
    with pytest.raises(ValueError, match=r"metrics\.jsonl:2: not valid JSON"):
        read_metrics_jsonl(p)
    p.write_text('{"reward_mean": 0.1}\n')
    with pytest.raises(ValueError, match=r":1: missing field 'step'"):
        read_metrics_jsonl(p)
    p.write_text('{"step": 0, "reward_mean": "high"}\n')
    with pytest.raises(ValueError, match=r":1: .*high"):
        read_metrics_jsonl(p)
    p.write_text('{"step": 0, "sync_kl": [0.1, "x"]}\n')
    with pytest.raises(ValueError, match=r":1: field 'sync_kl' is not a list of numbers"):
        read_metrics_jsonl(p)
    e = tmp_path / "seed0.json"
    e.write_text(json.dumps({"task": "math", "method": "rtpo", "seed": 0, "k": 2, "benchmarks": {}, "overall": {}}))
    with pytest.raises(ValueError, match=r"seed0\.json: field 'benchmarks'"):
        read_eval_json(e)
    e.write_text(json.dumps({"task": "math", "method": "rtpo", "seed": 0, "k": 2, "overall": {"pass@1": 0}}))
    with pytest.raises(ValueError, match="missing field 'benchmarks'"):
        read_eval_json(e)


def test_record_that_contradicts_its_path_is_rejected(tmp_path):
    cfg = fixture_config(**{"train.steps": 2, "tasks": ["math"], "methods": ["rtpo"], "seeds": [0],
                            "ablations": {"seeds": [0]}})
    make_results_tree(tmp_path, cfg, theory=False)
    p = tmp_path / "results" / "runs" / "math" / "rtpo" / "seed0" / "metrics.jsonl"
    p.write_text(p.read_text().replace('"method": "rtpo"', '"method": "grpo"'))
    with pytest.raises(ValueError, match=r"metrics\.jsonl:1: field 'method' is 'grpo' but the path says 'rtpo'"):
        load_results(tmp_path / "results", cfg)


def test_one_table_by_name_writes_just_its_files_as_the_full_report_does(tree, tmp_path, capsys):
    """`rtpo report tables --only NAME` (the named Snakemake targets): the builder's tables, byte for byte as
    the full report writes them, and no other file; the names are rtpo.experiment's, in the registry's order;
    an unknown name fails with exit 2 naming it and the known ones."""
    from rtpo.report.table_names import TABLE_NAMES
    from rtpo.report.tables import TABLES

    assert tuple(fn.__name__ for fn in TABLES) == TABLE_NAMES
    work, cfg = tree
    config = write_config(cfg, tmp_path / "config.yaml")
    out = tmp_path / "one"
    for name, files in (("table10_group_size", {"table10_group_size"}),
                        ("table11_group_size_cost", {"table11_group_size_cost", "timing_table11_group_size_cost"})):
        assert rtpo_main(["report", "tables", "--only", name, "--config", str(config), "--results",
                          str(work / "results"), "--tables", str(out)]) == 0
        made = {p.name for p in out.iterdir()}
        assert {p.split(".")[0] for p in made} >= files
        for f in (f"{n}.{ext}" for n in files for ext in ("csv", "md", "tex")):
            assert (out / f).read_bytes() == (work / "results" / "tables" / f).read_bytes(), f
    assert made == {f"{n}.{ext}" for n in ("table10_group_size", "table11_group_size_cost",
                                           "timing_table11_group_size_cost") for ext in ("csv", "md", "tex")}
    capsys.readouterr()
    assert rtpo_main(["report", "tables", "--only", "table99", "--config", str(config), "--results",
                      str(work / "results"), "--tables", str(out)]) == 2
    err = capsys.readouterr().err
    assert "no table named table99" in err and "table01_main" in err


def test_cli_without_results_fails_cleanly(tmp_path, capsys):
    config = write_config(fixture_config(), tmp_path / "config.yaml")
    assert _report(tmp_path, config, "tables") == 2
    assert "no metrics.jsonl or eval JSON" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------
# what the smoke DAG produced
# ------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_smoke_dag_report(request, tmp_path):
    """The report files the smoke DAG wrote: present, well formed, and recomputable from its own runs."""
    try:
        base = Path(request.getfixturevalue("smoke_results"))
    except pytest.FixtureLookupError:
        pytest.skip("tests/conftest.py has no smoke_results fixture yet")
    results = base / "results" if (base / "results").is_dir() else base
    work = results.parent
    tdir, fdir = results / "tables", work / "figures"
    from rtpo.config import load_config

    # the config the DAG ran with (its working copy), else the repository's
    cfg_path = work / "config" / "smoke.yaml"
    cfg = load_config(cfg_path if cfg_path.exists() else ROOT / "config" / "smoke.yaml")
    res = load_results(results, cfg)
    assert not res.steps.empty and not res.evals.empty
    for name in ["table01_main", "table07_airline_online", "table10_group_size", "table14_training_cost",
                 "tableG6_sync", "table03_continuation", "table02_credit_assignment", "claims"]:
        for ext in ("csv", "md", "tex"):
            assert (tdir / f"{name}.{ext}").stat().st_size > 0, f"{name}.{ext}"
    for name in FIGURES:
        assert (fdir / f"{name}.png").stat().st_size > 10_000, name
    # every number in Table 1 is the eval JSON's value (one seed)
    t1 = pd.read_csv(tdir / "table01_main.csv")
    for r in t1[t1.benchmark.str.startswith("embedded-") & (t1.n > 0)].itertuples():
        for s in cfg["seeds"]:
            doc = json.loads((results / "eval" / r.task / r.method / f"seed{s}.json").read_text())
            assert r.mean == pytest.approx(doc["benchmarks"][r.benchmark]["pass@1"])
    # recomputing from the DAG's runs gives the DAG's tables and ledger
    out = tmp_path / "again"
    from rtpo.report.cli import run_report

    run_report("tables", results, cfg, out, tmp_path / "figs")
    run_report("ledger", results, cfg, out, tmp_path / "figs")
    for name in ["table01_main", "table14_training_cost", "table10_group_size", "claims"]:
        pd.testing.assert_frame_equal(pd.read_csv(tdir / f"{name}.csv"), pd.read_csv(out / f"{name}.csv"),
                                      check_exact=False, rtol=1e-9)
    led = pd.read_csv(tdir / "claims.csv")
    seeded = led[(led.rule != "theory-check") & (led.verdict != NOT_RUN)]   # Control B: the sweep's target
    assert (seeded.verdict == INCONCLUSIVE).all()  # one seed
    # the eval JSONs carry per_problem, and the learning / budget / status files were written
    doc = json.loads((results / "eval" / "math" / "rtpo" / "seed0.json").read_text())
    assert sum(p["samples"] for p in doc["per_problem"]) == doc["overall"]["samples"]
    assert doc["overall"]["pass@1"] == pytest.approx(np.mean([p["successes"] / p["samples"]
                                                              for p in doc["per_problem"]]))
    for name in ("table_learning", "table_budget", "table01_vs_vanilla", "timing_table14_training_cost"):
        assert (tdir / f"{name}.csv").stat().st_size > 0, name
    status = (tdir / "status.md").read_text()
    assert "Claim ledger (results/tables/claims.md)" in status and "span of this results tree" in \
        (tdir / "timing_status.md").read_text()
    budget = pd.read_csv(tdir / "table_budget.csv")
    paper = budget[budget.metric == "rollouts_per_prompt_paper"]
    assert set(paper.method) == set(cfg["methods"]) - {"vanilla"} and (paper["mean"] > 0).all()
