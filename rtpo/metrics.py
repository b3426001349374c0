"""The field's metrics: QA scores, math answer equivalence, unbiased pass@k, trajectory statistics.

These functions are shared by the environments (terminal rewards) and by `rtpo.evaluate`
(the eval JSON of docs/ARCHITECTURE.md). All are pure functions of strings / numbers.

QA (paper §4.1, Table 1; §F.3, Table 6):
  * `exact_match`, `f1_score`: the SQuAD v1.1 definitions (answer normalisation, token-overlap F1),
    maximised over the gold answer and its aliases.
  * `output_hit`: the paper's "output-hit" accuracy for the deep-search benchmarks — a sample counts
    as correct when its *full output* contains the gold answer or an alias (after normalisation).

Math (paper §4.1, Table 1; §4.3, Table 2): `extract_boxed` and `math_equal`, the answer checker, are
rtpo.math_answers (a LaTeX -> sympy equivalence checker: a tool of its own); imported here so that every
metric has one import.

Pass@k (paper §D: "Pass@1"; §G.1, Table 8: "Pass@4"): the unbiased estimator of Chen et al. (2021).

Tool statistics (paper §G.1, Tables 8-9): tool calls per trajectory, tool execution success rate,
truncation and normal-termination rates, mean response tokens, response tokens per success.
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from typing import Any

from rtpo.math_answers import extract_boxed, math_equal  # noqa: F401  (re-exported: one import for every metric)

__all__ = [
    "normalize_answer", "exact_match", "f1_score", "output_hit", "qa_scores",
    "extract_boxed", "math_equal", "pass_at_k", "trajectory_stats", "aggregate_pass_at_k",
]

# --------------------------------------------------------------------------------------------
# QA metrics (SQuAD v1.1 evaluation script, Rajpurkar et al. 2016)
# --------------------------------------------------------------------------------------------

_PUNCT = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(s: str) -> str:
    """SQuAD normalisation: lowercase, drop punctuation, drop articles a/an/the, squash whitespace.

    >>> normalize_answer("The  Eiffel-Tower!")
    'eiffeltower'
    """
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def _check_golds(golds: list[str]) -> None:
    if isinstance(golds, str):
        raise TypeError(f"golds must be a list of strings, got the string {golds!r}")
    if len(golds) == 0:
        raise ValueError("golds is empty: a task needs at least one gold answer")


def exact_match(pred: str, golds: list[str]) -> float:
    """1.0 if the normalised prediction equals any normalised gold answer, else 0.0."""
    _check_golds(golds)
    p = normalize_answer(pred)
    return float(any(p == normalize_answer(g) for g in golds))


def _f1_single(pred: str, gold: str) -> float:
    pred_toks = normalize_answer(pred).split()
    gold_toks = normalize_answer(gold).split()
    if not pred_toks or not gold_toks:
        # SQuAD v2 convention: two empty answers agree, one empty answer scores 0.
        return float(pred_toks == gold_toks)
    common = Counter(pred_toks) & Counter(gold_toks)
    num_same = sum(common.values())
    if num_same == 0:
        return 0.0
    precision = num_same / len(pred_toks)
    recall = num_same / len(gold_toks)
    return 2 * precision * recall / (precision + recall)


def f1_score(pred: str, golds: list[str]) -> float:
    """SQuAD token-level F1 between the prediction and the best-matching gold answer, in [0, 1]."""
    _check_golds(golds)
    return max(_f1_single(pred, g) for g in golds)


def output_hit(output: str, golds: list[str]) -> float:
    """1.0 if some normalised gold answer is a substring of the normalised full output.

    This is the paper's output-hit accuracy (§F.3): the whole generated output (all turns, not
    only the extracted answer) is searched. Golds that normalise to "" (e.g. "the") never hit.
    Note it is a character substring test, as in the paper's definition, so a short numeric gold
    such as "1" also hits an output containing "1990".
    """
    _check_golds(golds)
    out = normalize_answer(output)
    for g in golds:
        ng = normalize_answer(g)
        if ng and ng in out:
            return 1.0
    return 0.0


def qa_scores(pred: str | None, golds: list[str], full_output: str = "") -> dict[str, float]:
    """{"em", "f1", "hit"} for one QA answer.

    pred:        the extracted final answer, or None when the episode gave none (em = f1 = 0).
    full_output: the whole generated text used for "hit"; when empty, the prediction itself is used.
    """
    _check_golds(golds)
    output = full_output if full_output else (pred or "")
    hit = output_hit(output, golds)
    if pred is None:
        return {"em": 0.0, "f1": 0.0, "hit": hit}
    return {"em": exact_match(pred, golds), "f1": f1_score(pred, golds), "hit": hit}


# --------------------------------------------------------------------------------------------
# pass@k and trajectory statistics
# --------------------------------------------------------------------------------------------

def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k (Chen et al., 2021): 1 - C(n-c, k) / C(n, k).

    n: samples drawn for the task, c: how many were correct, k: the budget (1 <= k <= n).
    """
    for name, v in (("n", n), ("c", c), ("k", k)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"pass_at_k: {name} must be an int, got {v!r}")
    if n < 1 or not 0 <= c <= n:
        raise ValueError(f"pass_at_k: need n >= 1 and 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"pass_at_k: need 1 <= k <= n, got k={k}, n={n} (draw more samples)")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def aggregate_pass_at_k(successes_by_task: dict[str, list[bool]], ks: list[int]) -> dict[str, float]:
    """Mean unbiased pass@k over tasks: {"pass@1": .., "pass@4": ..}.

    successes_by_task: task id -> one bool per sampled trajectory (n = len of the list).
    """
    if not successes_by_task:
        raise ValueError("aggregate_pass_at_k: no tasks")
    result: dict[str, float] = {}
    for k in ks:
        vals = []
        for tid, succ in successes_by_task.items():
            if len(succ) < k:
                raise ValueError(f"aggregate_pass_at_k: task {tid!r} has {len(succ)} samples, "
                                 f"fewer than k={k}")
            vals.append(pass_at_k(len(succ), sum(bool(x) for x in succ), k))
        result[f"pass@{k}"] = sum(vals) / len(vals)
    return result


_REQUIRED_TRAJ_KEYS = ("reward", "success", "tool_calls", "tool_errors", "truncated", "terminated",
                       "response_tokens")


def trajectory_stats(trajs: list[dict[str, Any]]) -> dict[str, float]:
    """Behaviour statistics over a list of finished trajectories (paper §G.1, Tables 8-9).

    Each trajectory dict has: reward (float), success (bool), tool_calls (int), tool_errors (int),
    truncated (bool, the turn limit ended it), terminated (bool, it ended with an answer),
    response_tokens (int, all assistant tokens), and optionally em / f1 / hit (floats).

    Returns:
      tool_calls_per_traj      mean tool calls per trajectory
      tool_success_rate        1 - total errors / total calls (nan when no calls were made)
      truncation_rate          fraction truncated
      normal_termination_rate  fraction that ended with an answer
      response_tokens          mean response tokens per trajectory
      tokens_per_success       total response tokens of successful trajectories / #successes
                               (nan when none succeeded)
      em, f1, hit              means over the trajectories that carry them (only when present)
    """
    if not trajs:
        raise ValueError("trajectory_stats: empty list of trajectories")
    for i, t in enumerate(trajs):
        for key in _REQUIRED_TRAJ_KEYS:
            if key not in t:
                raise ValueError(f"trajectory_stats: trajectory {i} lacks field {key!r}")
        if t["tool_errors"] > t["tool_calls"] or t["tool_errors"] < 0:
            raise ValueError(f"trajectory_stats: trajectory {i} field 'tool_errors' "
                             f"({t['tool_errors']}) not in [0, tool_calls={t['tool_calls']}]")
    n = len(trajs)
    calls = sum(t["tool_calls"] for t in trajs)
    errors = sum(t["tool_errors"] for t in trajs)
    succ = [t for t in trajs if t["success"]]
    stats = {
        "tool_calls_per_traj": calls / n,
        "tool_success_rate": (1.0 - errors / calls) if calls > 0 else float("nan"),
        "truncation_rate": sum(bool(t["truncated"]) for t in trajs) / n,
        "normal_termination_rate": sum(bool(t["terminated"]) for t in trajs) / n,
        "response_tokens": sum(t["response_tokens"] for t in trajs) / n,
        "tokens_per_success": (sum(t["response_tokens"] for t in succ) / len(succ)) if succ
        else float("nan"),
    }
    for key in ("em", "f1", "hit"):
        vals = [float(t[key]) for t in trajs if t.get(key) is not None]
        if vals:
            stats[key] = sum(vals) / len(vals)
    return stats
