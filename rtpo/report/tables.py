"""The paper's tables, recomputed from our runs (CSV, Markdown and LaTeX under the tables dir).

Every table is a `Table`: `data` is the tidy numbers (one row per cell: its keys, the metric, the
unit, mean / std / n / 95 % CI over seeds and the per-seed `seeds` and `values`) and goes to
`<name>.csv`; `display` is the formatted grid (mean ± std) that goes to `<name>.md` and `<name>.tex`.
Values in the CSV are in the unit of the source file (`unit` column: fractions, tokens, seconds);
the Markdown/LaTeX grids show fractions as percent. Our numbers only: where a table shows the
paper's figure, the column is named "paper (Qwen3-8B)".

Tables (paper numbering; builders below, registry `TABLES`):
  table01_main, table01_gains       §4.1 Table 1: pass@1 by task and tier; RTPO's relative gains
  table02_credit_assignment         §4.3 Table 2: full-history rollouts, pass@1 / pass@k
  table03_continuation              §4.4 Table 3: on- vs off-policy continuation, output-hit
  table06_continuation_detail       §F.3 Table 6: the same runs, every metric
  table07_airline_online            §G.1 Table 7: online success per training step
  table08_airline_eval              §G.1 Table 8: pass@1/pass@k, termination, truncation, length
  table09_airline_tools             §G.1 Table 9: tool calls, errors, execution success, tokens/success
  table10_group_size                §G.2 Table 10: zero-advantage %, pass@1, inference tokens vs G
  table11_group_size_cost           §G.2 Table 11: wall-clock and training-generation tokens vs G
  table12_trunk_failures            §G.3 Table 12: first-turn failures, no terminal signal, failed length
  table13_failure_dynamics          §G.3 Table 13: the same over training steps
  table14_training_cost             §G.4 Table 14: wall-clock, generated tokens by kind, tool calls/trunk
  table21_budget                    §G.7 Table 21: per-trunk budget over training steps
  tableG5_tool_use                  §G.5 Tables 18-19: accuracy and tool calls per benchmark
  tableG6_sync                      §G.6: synchronisation frequency study
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import numpy as np
import pandas as pd

from rtpo.report.load import MAIN, Results, benchmark_label, sort_benchmarks
from rtpo.report.stats import paired, paired_ratio, relative_gain, summarize

METHOD_LABELS = {"vanilla": "Vanilla", "grpo": "GRPO", "tree_grpo": "Tree-GRPO", "arpo": "ARPO",
                 "seeupo": "SeeUPO", "rtpo": "RTPO", "rtpo_ca": "RTPO-CA"}
PAPER_COL = "paper (Qwen3-8B)"
# Table 1 of the paper covers math and knowledge (search) QA; its "overall" averages their benchmarks.
HEADLINE_TASKS = ("math", "search")
# §4.1: RTPO's relative overall gains in the paper (percent)
PAPER_GAINS = {"vanilla": 66.78, "grpo": 21.50, "seeupo": 10.76}


def method_label(m: str) -> str:
    return METHOD_LABELS.get(m, m)


@dataclass
class Table:
    """One table: tidy numbers (CSV) and the formatted grid (Markdown, LaTeX)."""

    name: str
    title: str
    data: pd.DataFrame
    display: pd.DataFrame
    notes: list[str] = field(default_factory=list)


# ------------------------------------------------------------------------------------------------
# cells
# ------------------------------------------------------------------------------------------------

def cell(keys: Mapping[str, Any], metric: str, unit: str, by_seed: Mapping[int, float]) -> dict[str, Any]:
    """One tidy CSV row: keys, metric, unit, mean/std/n/CI over seeds, and the per-seed values."""
    s = summarize(by_seed.values())
    return {**keys, "metric": metric, "unit": unit, "mean": s.mean, "std": s.std, "n": s.n,
            "ci95_lo": s.lo, "ci95_hi": s.hi,
            "seeds": ";".join(str(k) for k in by_seed), "values": ";".join(repr(float(v)) for v in by_seed.values())}


def fmt_value(x: float, digits: int) -> str:
    if x is None or math.isnan(x):
        return "—"
    return f"{x:,.{digits}f}"


def ms(by_seed: Mapping[int, float], scale: float = 1.0, digits: int = 1) -> str:
    """"mean ± std" of the per-seed values times `scale`; just the mean with one seed; "—" with none."""
    s = summarize(by_seed.values())
    if s.n == 0:
        return "—"
    if s.n == 1:
        return fmt_value(s.mean * scale, digits)
    return f"{fmt_value(s.mean * scale, digits)} ± {fmt_value(s.std * scale, digits)}"


def diff_ci(by_seed: Mapping[int, float], scale: float = 1.0, digits: int = 1) -> str:
    """"mean [lo, hi]" (95 % t-interval) of paired per-seed differences; mean only with < 2 seeds."""
    s = summarize(by_seed.values())
    if s.n == 0:
        return "—"
    head = f"{s.mean * scale:+,.{digits}f}"
    if s.n < 2:
        return head
    return f"{head} [{s.lo * scale:+,.{digits}f}, {s.hi * scale:+,.{digits}f}]"


def seeds_note(res: Results, scope: str = MAIN) -> str:
    seeds = res.cfg.get("seeds", []) if scope == MAIN else (res.cfg.get("ablations") or {}).get("seeds", [])
    return (f"mean ± std (ddof = 1) over the seeds {list(seeds)} (n = {len(seeds)}); a single seed shows the "
            "value alone; — = no run or no value (e.g. no successful trajectory).")


def methods_with(res: Results, task: str, kind: str = "eval", scope: str = MAIN, variant: str = "") -> list[str]:
    """Config methods (config order) with at least one eval (kind="eval") or step row (kind="steps")."""
    df = res.eval_rows(scope, variant, task) if kind == "eval" else res.step_rows(scope, variant, task)
    have = set(df.method) if not df.empty else set()
    order = list(res.cfg.get("methods", [])) if scope == MAIN else []
    if scope != MAIN and scope in res.studies:
        order = list(res.studies[scope].methods)
    return [m for m in order if m in have]


def tasks_with(res: Results, kind: str = "eval") -> list[str]:
    df = res.eval_rows(MAIN) if kind == "eval" else res.step_rows(MAIN)
    have = set(df.task) if not df.empty else set()
    return [t for t in res.cfg.get("tasks", []) if t in have]


def pick_steps(steps: Iterable[int], max_n: int = 6) -> list[int]:
    """At most max_n steps, evenly spaced, always including the first and the last."""
    steps = sorted(set(int(s) for s in steps))
    if len(steps) <= max_n:
        return steps
    idx = np.unique(np.round(np.linspace(0, len(steps) - 1, max_n)).astype(int))
    return [steps[i] for i in idx]


def step_values(res: Results, task: str, method: str, column: str, step: int,
                scope: str = MAIN, variant: str = "") -> dict[int, float]:
    """{seed: value of `column` at training step `step`}."""
    df = res.step_rows(scope, variant, task, method)
    if df.empty or column not in df.columns:
        return {}
    df = df[df.step == step]
    return {int(s): float(v) for s, v in zip(df.seed, df[column]) if not (v is None or math.isnan(v))}


def headline_tasks(res: Results) -> list[str]:
    tasks = tasks_with(res)
    head = [t for t in tasks if t in HEADLINE_TASKS]
    return head or tasks


# ------------------------------------------------------------------------------------------------
# §4.1 Table 1
# ------------------------------------------------------------------------------------------------

def table01_main(res: Results) -> list[Table]:
    tasks = tasks_with(res)
    if not tasks:
        return []
    methods = [m for m in res.cfg.get("methods", []) if not res.eval_rows(MAIN, "", None, m).empty]
    rows, disp = [], []
    head = headline_tasks(res)
    blocks: list[tuple[str, str, Callable[[str], dict[int, float]]]] = []
    for t in tasks:
        for b in res.benchmarks(t):
            blocks.append((t, b, lambda m, t=t, b=b: res.eval_by_seed(t, m, b, "pass@1")))
        blocks.append((t, "average", lambda m, t=t: res.eval_macro_by_seed([t], m, "pass@1")))
    all_name = "+".join(head)
    if len(head) > 1:
        blocks.append((all_name, "average", lambda m: res.eval_macro_by_seed(head, m, "pass@1")))
    for task, bench, get in blocks:
        line = {"task": task, "benchmark": benchmark_label(bench)}
        for m in methods:
            d = get(m)
            rows.append(cell({"task": task, "benchmark": bench, "method": m}, "pass@1", "fraction", d))
            line[method_label(m)] = ms(d, 100)
        disp.append(line)
    notes = [
        "pass@1 (%) on each evaluation benchmark (embedded scale: a task's difficulty tiers); "
        "'average' = mean over the task's benchmarks, per seed, then over seeds; "
        f"'{all_name}' averages the benchmarks of {', '.join(head)} (the paper's Table 1 covers math and "
        "knowledge QA).",
        seeds_note(res),
    ]
    return [Table("table01_main", "Table 1: main results, pass@1 (%) by task and difficulty tier",
                  pd.DataFrame(rows), pd.DataFrame(disp), notes)]


def table01_gains(res: Results) -> list[Table]:
    head = headline_tasks(res)
    if not head or "rtpo" not in res.cfg.get("methods", []):
        return []
    ours = res.eval_macro_by_seed(head, "rtpo", "pass@1")
    if not ours:
        return []
    rows, disp = [], []
    for m in res.cfg.get("methods", []):
        if m == "rtpo":
            continue
        base = res.eval_macro_by_seed(head, m, "pass@1")
        if not base:
            continue
        so, sb = summarize(ours.values()), summarize(base.values())
        d = paired(ours, base)
        sd = summarize(d.values())
        rel = relative_gain(so.mean, sb.mean)
        rows.append({"comparison": f"rtpo vs {m}", "tasks": "+".join(head), "metric": "pass@1 macro average",
                     "rtpo_mean": so.mean, "baseline_mean": sb.mean, "relative_gain_pct": rel,
                     "diff_mean": sd.mean, "diff_std": sd.std, "diff_ci95_lo": sd.lo, "diff_ci95_hi": sd.hi,
                     "n": sd.n, "seeds": ";".join(map(str, d)), "diff_values": ";".join(repr(v) for v in d.values()),
                     "paper_relative_gain_pct": PAPER_GAINS.get(m, math.nan)})
        disp.append({"comparison": f"RTPO vs {method_label(m)}",
                     "RTPO pass@1 (%)": fmt_value(so.mean * 100, 1),
                     "baseline pass@1 (%)": fmt_value(sb.mean * 100, 1),
                     "relative gain (%)": fmt_value(rel, 1) if not math.isnan(rel) else "—",
                     "Δ pp [95 % CI]": diff_ci(d, 100),
                     f"{PAPER_COL}: relative gain (%)": fmt_value(PAPER_GAINS[m], 2) if m in PAPER_GAINS else "—"})
    notes = [
        "relative gain = 100·(RTPO − baseline)/baseline of the seed-mean macro-average pass@1 (the paper's "
        "'x % higher'); Δ pp = RTPO − baseline in percentage points, paired by seed, with its 95 % t-interval.",
        f"tasks averaged: {', '.join(head)}. The paper's column is its reported figure at Qwen3-8B scale, for "
        "reference only.",
    ]
    return [Table("table01_gains", "Table 1 (headline): RTPO's relative gains in overall pass@1",
                  pd.DataFrame(rows), pd.DataFrame(disp), notes)]


# ------------------------------------------------------------------------------------------------
# §4.3 Table 2
# ------------------------------------------------------------------------------------------------

def table02_credit_assignment(res: Results) -> list[Table]:
    st = res.studies.get("credit_assignment")
    if st is None:
        return []
    v = st.variants[0].name
    benches = res.benchmarks(st.task, st.name, v)
    if not benches:
        return []
    k = res.eval_k()
    rows, disp = [], []
    for m in st.methods:
        line = {"method": method_label(m)}
        for b in [*benches, "average"]:
            for metric, label in (("pass@1", "pass@1"), ("pass@k", f"pass@{k}")):
                d = (res.eval_macro_by_seed([st.task], m, metric, st.name, v) if b == "average"
                     else res.eval_by_seed(st.task, m, b, metric, st.name, v))
                rows.append(cell({"study": st.name, "variant": v, "task": st.task, "benchmark": b, "method": m},
                                 label, "fraction", d))
                line[f"{benchmark_label(b)} {label}"] = ms(d, 100)
        disp.append(line)
    notes = [f"credit assignment under matched full-history rollouts (variant {v}: every method rolls out and "
             f"trains with psi = {st.variants[0].value}); task {st.task}; pass@1 and pass@{k} in %; "
             "'average' = mean over benchmarks per seed.", seeds_note(res, st.name)]
    return [Table("table02_credit_assignment", f"Table 2: turn-level credit assignment under full-history "
                  f"rollouts (pass@1 / pass@{k}, %)", pd.DataFrame(rows), pd.DataFrame(disp), notes)]


# ------------------------------------------------------------------------------------------------
# §4.4 / §F.3 Tables 3 and 6
# ------------------------------------------------------------------------------------------------

def _hit_metric(res: Results, task: str, scope: str) -> str:
    df = res.eval_rows(scope, task=task) if scope == MAIN else res.evals[(res.evals.scope == scope)]
    return "hit" if ("hit" in df.columns and df["hit"].notna().any()) else "pass@1"


def table03_continuation(res: Results) -> list[Table]:
    st = res.studies.get("continuation")
    if st is None or res.evals.empty or len(st.variants) < 1:
        return []
    m = st.methods[0]
    ref = st.variants[0].name
    benches = sort_benchmarks(b for v in st.variant_names() for b in res.benchmarks(st.task, st.name, v))
    if not benches:
        return []
    metric = _hit_metric(res, st.task, st.name)
    rows, disp = [], []
    for b in [*benches, "average"]:
        line = {"benchmark": benchmark_label(b)}
        per_v = {}
        for v in st.variant_names():
            d = (res.eval_macro_by_seed([st.task], m, metric, st.name, v) if b == "average"
                 else res.eval_by_seed(st.task, m, b, metric, st.name, v))
            per_v[v] = d
            rows.append(cell({"study": st.name, "variant": v, "task": st.task, "benchmark": b, "method": m},
                             metric, "fraction", d))
            line[f"{v} {metric} (%)"] = ms(d, 100)
        for v in st.variant_names()[1:]:
            d = paired(per_v[ref], per_v[v])
            rows.append(cell({"study": st.name, "variant": f"{ref} - {v}", "task": st.task, "benchmark": b,
                              "method": m}, f"diff {metric}", "fraction", d))
            line[f"Δ {ref} − {v} (pp) [95 % CI]"] = diff_ci(d, 100)
        disp.append(line)
    label = "output-hit" if metric == "hit" else metric
    notes = [f"{label} accuracy (%) of {method_label(m)} on the {st.task} task with on-policy continuation "
             "(siblings continued under the synchronised current policy) against off-policy continuation "
             "(continuations reused from the rollout policy, clamped trajectory IS weight); output-hit: the "
             "normalised gold answer occurs in the full output (§F.3).",
             "Δ = paired per-seed difference with its 95 % t-interval; 'average' = mean over the benchmarks.",
             seeds_note(res, st.name)]
    return [Table("table03_continuation", f"Table 3: on-policy vs off-policy continuation ({label}, %)",
                  pd.DataFrame(rows), pd.DataFrame(disp), notes)]


DETAIL_METRICS = (("hit", "output-hit (%)", 100, 1), ("em", "EM (%)", 100, 1), ("f1", "F1 (%)", 100, 1),
                  ("pass@1", "pass@1 (%)", 100, 1), ("pass@k", "pass@k (%)", 100, 1),
                  ("tool_calls_per_traj", "tool calls / traj.", 1, 2),
                  ("response_tokens", "response tokens / traj.", 1, 1))


def table06_continuation_detail(res: Results) -> list[Table]:
    st = res.studies.get("continuation")
    if st is None or res.evals.empty:
        return []
    m = st.methods[0]
    k = res.eval_k()
    rows, disp = [], []
    for v in st.variant_names():
        for b in [*res.benchmarks(st.task, st.name, v), "overall"]:
            line = {"benchmark": benchmark_label(b), "variant": v}
            for metric, label, scale, dig in DETAIL_METRICS:
                if metric not in res.evals.columns:
                    continue
                d = res.eval_by_seed(st.task, m, b, metric, st.name, v)
                unit = "fraction" if scale == 100 else ("calls" if "tool" in metric else "tokens")
                rows.append(cell({"study": st.name, "variant": v, "task": st.task, "benchmark": b, "method": m},
                                 metric, unit, d))
                line[label.replace("pass@k", f"pass@{k}")] = ms(d, scale, dig)
            disp.append(line)
    notes = [f"every evaluation metric of the continuation study ({method_label(m)}, task {st.task}); "
             "'overall' pools all evaluation samples.", seeds_note(res, st.name)]
    return [Table("table06_continuation_detail", "Table 6: on-policy vs off-policy continuation, all metrics",
                  pd.DataFrame(rows), pd.DataFrame(disp), notes)]


# ------------------------------------------------------------------------------------------------
# §G.1 Tables 7-9 (airline)
# ------------------------------------------------------------------------------------------------

AIRLINE = "airline"


def table07_airline_online(res: Results) -> list[Table]:
    if AIRLINE not in tasks_with(res, "steps"):
        return []
    df = res.step_rows(MAIN, "", AIRLINE)
    steps = pick_steps(df.step)
    rows, disp = [], []
    for m in methods_with(res, AIRLINE, "steps"):
        line = {"method": method_label(m)}
        for s in steps:
            d = step_values(res, AIRLINE, m, "success_rate", s)
            rows.append(cell({"task": AIRLINE, "method": m, "step": s}, "success_rate", "fraction", d))
            line[f"step {s}"] = ms(d, 100)
        disp.append(line)
    notes = ["online success (%) of the step's on-policy first-pass trajectories (trunks / chains) at the "
             "training step shown (`step` as logged in metrics.jsonl, 0-based); at most 6 evenly spaced steps.",
             seeds_note(res)]
    return [Table("table07_airline_online", "Table 7: airline, online success per training step (%)",
                  pd.DataFrame(rows), pd.DataFrame(disp), notes)]


def table08_airline_eval(res: Results) -> list[Table]:
    if AIRLINE not in tasks_with(res):
        return []
    k = res.eval_k()
    spec = (("pass@1", "pass@1 (%)", "fraction", 100, 1), ("pass@k", f"pass@{k} (%)", "fraction", 100, 1),
            ("normal_termination_rate", "normal termination (%)", "fraction", 100, 1),
            ("truncation_rate", "truncation (%)", "fraction", 100, 1),
            ("response_tokens", "response length (tokens)", "tokens", 1, 1))
    rows, disp = [], []
    for m in methods_with(res, AIRLINE):
        line = {"method": method_label(m)}
        for metric, label, unit, scale, dig in spec:
            d = res.eval_by_seed(AIRLINE, m, "overall", metric)
            rows.append(cell({"task": AIRLINE, "method": m, "benchmark": "overall"}, metric, unit, d))
            line[label] = ms(d, scale, dig)
        disp.append(line)
    notes = ["held-out airline tasks, all eval samples pooled; normal termination = the trajectory ended with "
             "an answer; truncation = the turn limit ended it; response length = assistant tokens per trajectory.",
             seeds_note(res)]
    return [Table("table08_airline_eval", f"Table 8: airline evaluation (pass@1, pass@{k}, termination, length)",
                  pd.DataFrame(rows), pd.DataFrame(disp), notes)]


def _eval_tool_counts(res: Results, task: str, m: str, bench: str = "overall",
                      scope: str = MAIN, variant: str = "") -> tuple[dict[int, float], dict[int, float]]:
    """{seed: total tool calls}, {seed: total tool-error calls} over an evaluation, from the eval JSON's
    samples x tool_calls_per_traj and (1 - tool_success_rate) (no calls -> 0 errors)."""
    df = res.eval_rows(scope, variant, task, m, bench)
    calls, errs = {}, {}
    for _, r in df.iterrows():
        if math.isnan(r.get("samples", math.nan)) or math.isnan(r.get("tool_calls_per_traj", math.nan)):
            continue
        c = r["samples"] * r["tool_calls_per_traj"]
        calls[int(r.seed)] = float(round(c))
        rate = r.get("tool_success_rate", math.nan)
        errs[int(r.seed)] = 0.0 if c == 0 else (float(round(c * (1 - rate))) if not math.isnan(rate) else math.nan)
    return calls, {s: v for s, v in errs.items() if not math.isnan(v)}


def table09_airline_tools(res: Results) -> list[Table]:
    if AIRLINE not in tasks_with(res):
        return []
    rows, disp = [], []
    for m in methods_with(res, AIRLINE):
        calls, errs = _eval_tool_counts(res, AIRLINE, m)
        per = res.eval_by_seed(AIRLINE, m, "overall", "tool_calls_per_traj")
        succ = res.eval_by_seed(AIRLINE, m, "overall", "tool_success_rate")
        tps = res.eval_by_seed(AIRLINE, m, "overall", "tokens_per_success")
        keys = {"task": AIRLINE, "method": m, "benchmark": "overall"}
        rows += [cell(keys, "tool_calls", "calls", calls), cell(keys, "tool_errors", "calls", errs),
                 cell(keys, "tool_calls_per_traj", "calls", per), cell(keys, "tool_success_rate", "fraction", succ),
                 cell(keys, "tokens_per_success", "tokens", tps)]
        disp.append({"method": method_label(m), "tool calls (eval total)": ms(calls, 1, 1),
                     "tool-error calls": ms(errs, 1, 1), "tool calls / traj.": ms(per, 1, 2),
                     "execution success (%)": ms(succ, 100), "response tokens / success": ms(tps, 1, 1)})
    notes = ["over the whole airline evaluation (every sample); totals = samples × tool calls per trajectory; "
             "errors = totals × (1 − execution success); response tokens / success = assistant tokens of "
             "successful trajectories divided by their number (— when none succeeded).", seeds_note(res)]
    return [Table("table09_airline_tools", "Table 9: airline tool use and token cost per success",
                  pd.DataFrame(rows), pd.DataFrame(disp), notes)]


# ------------------------------------------------------------------------------------------------
# §G.2 Tables 10-11 (group size)
# ------------------------------------------------------------------------------------------------

def _group_ref(res: Results, st) -> str:
    """The reference variant: the config's default G for the study's method if it is a variant, else the first."""
    default = ((res.cfg.get("method") or {}).get(st.methods[0]) or {}).get("group_size")
    names = st.variant_names()
    return f"G{default}" if default is not None and f"G{default}" in names else names[0]


def table10_group_size(res: Results) -> list[Table]:
    st = res.studies.get("group_size")
    if st is None:
        return []
    m, k = st.methods[0], res.eval_k()
    spec = (("zero_adv_frac", "zero-advantage (%)", "fraction", 100, 1, "steps"),
            ("pass@1", "pass@1 (%)", "fraction", 100, 1, "eval"),
            ("pass@k", f"pass@{k} (%)", "fraction", 100, 1, "eval"),
            ("tokens_per_success", "inference tokens / success", "tokens", 1, 1, "eval"),
            ("response_tokens", "inference tokens / traj.", "tokens", 1, 1, "eval"))
    rows, disp = [], []
    for v in st.variants:
        line = {"G": str(v.value)}
        for metric, label, unit, scale, dig, src in spec:
            d = (res.steps_by_seed(st.task, m, metric, "mean", st.name, v.name) if src == "steps"
                 else res.eval_by_seed(st.task, m, "overall", metric, st.name, v.name))
            rows.append(cell({"study": st.name, "variant": v.name, "task": st.task, "method": m},
                             metric, unit, d))
            line[label] = ms(d, scale, dig)
        disp.append(line)
    notes = [f"{method_label(m)} on {st.task} with sibling group size G (incl. the trunk action). "
             "zero-advantage = fraction of trained rows whose advantage is exactly 0, mean over training steps; "
             "inference tokens = assistant tokens at evaluation (per successful / per trajectory).",
             seeds_note(res, st.name)]
    return [Table("table10_group_size", "Table 10: sensitivity to the sibling group size G",
                  pd.DataFrame(rows), pd.DataFrame(disp), notes)]


def table11_group_size_cost(res: Results) -> list[Table]:
    st = res.studies.get("group_size")
    if st is None:
        return []
    m, ref = st.methods[0], _group_ref(res, st)
    rows, disp = [], []
    ref_vals = {c: res.steps_by_seed(st.task, m, c, "sum", st.name, ref) for c in ("time_total", "tokens_total")}
    for v in st.variants:
        line = {"G": str(v.value)}
        for col, label, unit in (("time_total", "wall-clock (s)", "seconds"),
                                 ("tokens_total", "training-generation tokens", "tokens"),
                                 ("trained_tokens", "trained tokens", "tokens")):
            d = res.steps_by_seed(st.task, m, col, "sum", st.name, v.name)
            rows.append(cell({"study": st.name, "variant": v.name, "task": st.task, "method": m}, col, unit, d))
            line[label] = ms(d, 1, 1 if unit == "seconds" else 0)
            if col in ref_vals:
                r = paired_ratio(d, ref_vals[col])
                rows.append(cell({"study": st.name, "variant": v.name, "task": st.task, "method": m},
                                 f"{col} change vs {ref}", "percent", r))
                line[f"Δ {label.split(' (')[0]} vs {ref} (%)"] = "—" if v.name == ref else diff_ci(r, 1, 1)
        disp.append(line)
    notes = [f"training cost of {method_label(m)} on {st.task}: wall-clock = sum of the per-step `time.total` "
             "(seconds, CPU here; the paper reports GPU-hours); training-generation tokens = all tokens generated "
             f"during training (trunks, siblings, continuations); Δ = per-seed percent change against {ref}.",
             seeds_note(res, st.name)]
    return [Table("table11_group_size_cost", "Table 11: cost of the sibling group size G",
                  pd.DataFrame(rows), pd.DataFrame(disp), notes)]


# ------------------------------------------------------------------------------------------------
# §G.3 Tables 12-13, §G.4 Table 14, §G.7 Table 21
# ------------------------------------------------------------------------------------------------

def first_turn_share(res: Results, task: str, m: str) -> dict[int, float]:
    """{seed: mean over steps of first_turn_fail_frac / (1 - success_rate)}: the share of failed trunks
    that failed within the first turn (steps without failures are skipped)."""
    df = res.step_rows(MAIN, "", task, m)
    if df.empty or "trunks_first_turn_fail_frac" not in df.columns:
        return {}
    out = {}
    for seed, g in df.groupby("seed"):
        fail = 1.0 - g["success_rate"].astype(float)
        share = (g["trunks_first_turn_fail_frac"].astype(float) / fail)[fail > 0]
        share = share[~share.isna()]
        if len(share):
            out[int(seed)] = float(share.mean())
    return out


def table12_trunk_failures(res: Results) -> list[Table]:
    tasks = tasks_with(res, "steps")
    if not tasks:
        return []
    rows, disp = [], []
    for t in tasks:
        for m in methods_with(res, t, "steps"):
            line = {"task": t, "method": method_label(m)}
            for col, label, unit, scale, dig in (
                    ("trunks_first_turn_fail_frac", "first-turn failures (% of trunks)", "fraction", 100, 1),
                    ("first_turn_share", "first-turn share of failures (%)", "fraction", 100, 1),
                    ("trunks_no_terminal_frac", "no terminal signal (%)", "fraction", 100, 1),
                    ("trunks_failed_len_mean", "failed-trajectory length (turns)", "turns", 1, 2)):
                d = (first_turn_share(res, t, m) if col == "first_turn_share"
                     else res.steps_by_seed(t, m, col, "mean"))
                rows.append(cell({"task": t, "method": m}, col, unit, d))
                line[label] = ms(d, scale, dig)
            disp.append(line)
    notes = ["first-pass trajectories (RTPO's trunks, the baselines' chains) over all training steps (mean of "
             "the per-step values): failed within the first turn; ended by the turn limit without an answer "
             "(no terminal signal); mean number of turns of failed trajectories.", seeds_note(res)]
    return [Table("table12_trunk_failures", "Table 12: trunk quality and failures over training",
                  pd.DataFrame(rows), pd.DataFrame(disp), notes)]


def _over_steps(res: Results, name: str, title: str, spec, note: str) -> list[Table]:
    tasks = tasks_with(res, "steps")
    if not tasks:
        return []
    rows, disp = [], []
    for t in tasks:
        steps = pick_steps(res.step_rows(MAIN, "", t).step)
        for m in methods_with(res, t, "steps"):
            for col, label, unit, scale, dig in spec:
                line = {"task": t, "method": method_label(m), "metric": label}
                for s in steps:
                    d = step_values(res, t, m, col, s)
                    rows.append(cell({"task": t, "method": m, "step": s}, col, unit, d))
                    line[f"step {s}"] = ms(d, scale, dig)
                disp.append(line)
    return [Table(name, title, pd.DataFrame(rows), pd.DataFrame(disp), [note, seeds_note(res)])]


def table13_failure_dynamics(res: Results) -> list[Table]:
    spec = (("trunks_no_terminal_frac", "no terminal signal (%)", "fraction", 100, 1),
            ("trunks_failed_len_mean", "failed length (turns)", "turns", 1, 2))
    return _over_steps(res, "table13_failure_dynamics", "Table 13: failure dynamics over training steps", spec,
                       "first-pass trajectories at the training step shown (0-based, at most 6 evenly spaced).")


def table21_budget(res: Results) -> list[Table]:
    spec = (("trunks_tool_calls_per_trunk", "tool calls / trunk", "calls", 1, 2),
            ("trunks_tokens_per_trunk", "generated tokens / trunk", "tokens", 1, 1),
            ("trunks_tool_success_rate", "tool execution success (%)", "fraction", 100, 1))
    return _over_steps(res, "table21_budget", "Table 21: per-trunk budget consumption over training", spec,
                       "per first-pass trajectory at the training step shown (0-based, at most 6 evenly spaced); "
                       "tool execution success = 1 − errors / calls (— without calls).")


def token_kinds(res: Results) -> list[str]:
    cols = [c for c in res.steps.columns if c.startswith("tokens_") and c != "tokens_total"] if not res.steps.empty else []
    order = ["tokens_trunk", "tokens_chain", "tokens_tree", "tokens_branch", "tokens_sibling", "tokens_continuation"]
    return [c for c in order if c in cols] + sorted(c for c in cols if c not in order)


def table14_training_cost(res: Results) -> list[Table]:
    tasks = tasks_with(res, "steps")
    if not tasks:
        return []
    kinds = token_kinds(res)
    rows, disp = [], []
    for t in tasks:
        grpo = {c: res.steps_by_seed(t, "grpo", c, "sum") for c in ("time_total", "tokens_total")}
        for m in methods_with(res, t, "steps"):
            keys = {"task": t, "method": m}
            line = {"task": t, "method": method_label(m)}
            wall = res.steps_by_seed(t, m, "time_total", "sum")
            rows.append(cell(keys, "time_total", "seconds", wall))
            line["wall-clock (s)"] = ms(wall, 1, 1)
            by_kind = []
            df = res.step_rows(MAIN, "", t, m)
            for c in kinds:
                # a kind the method never generates is 0, not missing
                d = {int(s): float(g[c].fillna(0).sum()) for s, g in df.groupby("seed")} if not df.empty else {}
                rows.append(cell(keys, c, "tokens", d))
                mean = summarize(d.values()).mean
                if d and mean > 0:
                    by_kind.append(f"{c[len('tokens_'):]} {fmt_value(mean, 0)}")
            line["generated tokens by kind (mean)"] = "; ".join(by_kind) or "—"
            tot = res.steps_by_seed(t, m, "tokens_total", "sum")
            rows.append(cell(keys, "tokens_total", "tokens", tot))
            line["generated tokens"] = ms(tot, 1, 0)
            for c, label, unit, red, dig in (("trained_tokens", "trained tokens", "tokens", "sum", 0),
                                             ("trunks_tool_calls_per_trunk", "tool calls / trunk", "calls", "mean", 2),
                                             ("rollouts_per_prompt", "rollouts / prompt", "rollouts", "mean", 1),
                                             ("syncs", "syncs / step", "syncs", "mean", 1)):
                d = res.steps_by_seed(t, m, c, red)
                rows.append(cell(keys, c, unit, d))
                line[label] = ms(d, 1, dig)
            for c, label in (("time_total", "wall-clock"), ("tokens_total", "generated tokens")):
                r = paired_ratio(res.steps_by_seed(t, m, c, "sum"), grpo[c])
                rows.append(cell(keys, f"{c} change vs grpo", "percent", r))
                line[f"Δ {label} vs GRPO (%)"] = "—" if m == "grpo" else diff_ci(r, 1, 1)
            disp.append(line)
    notes = ["whole training run: wall-clock = sum of per-step `time.total` (seconds); tokens generated during "
             "training by kind (trunk / chain / tree / branch / sibling / continuation, as the method labels "
             "them), summed over steps; tool calls per trunk, rollouts per prompt and syncs are means over steps; "
             "Δ = per-seed percent change against GRPO with its 95 % t-interval.", seeds_note(res)]
    return [Table("table14_training_cost", "Table 14: training cost across methods",
                  pd.DataFrame(rows), pd.DataFrame(disp), notes)]


# ------------------------------------------------------------------------------------------------
# §G.5 tool use, §G.6 sync frequency
# ------------------------------------------------------------------------------------------------

def tableG5_tool_use(res: Results) -> list[Table]:
    tasks = tasks_with(res)
    if not tasks:
        return []
    rows, disp = [], []
    for t in tasks:
        methods = methods_with(res, t)
        for b in [*res.benchmarks(t), "overall"]:
            for metric, label, unit, scale, dig in (("pass@1", "pass@1 (%)", "fraction", 100, 1),
                                                    ("tool_calls_per_traj", "tool calls / traj.", "calls", 1, 2),
                                                    ("tool_success_rate", "tool execution success (%)",
                                                     "fraction", 100, 1)):
                line = {"task": t, "benchmark": benchmark_label(b), "metric": label}
                for m in methods:
                    d = res.eval_by_seed(t, m, b, metric)
                    rows.append(cell({"task": t, "benchmark": b, "method": m}, metric, unit, d))
                    line[method_label(m)] = ms(d, scale, dig)
                disp.append(line)
    notes = ["evaluation: accuracy next to tool calls per trajectory (python on math, search on search, airline "
             "DB tools on airline) and the fraction of calls that executed without error.", seeds_note(res)]
    return [Table("tableG5_tool_use", "Tool-use behaviour per task and benchmark (§G.5)",
                  pd.DataFrame(rows), pd.DataFrame(disp), notes)]


def tableG6_sync(res: Results) -> list[Table]:
    st = res.studies.get("sync")
    if st is None:
        return []
    m = st.methods[0]
    metric = _hit_metric(res, st.task, st.name)
    label = "output-hit" if metric == "hit" else metric
    benches = sort_benchmarks(b for v in st.variant_names() for b in res.benchmarks(st.task, st.name, v))
    rows, disp = [], []
    for b in [*benches, "average"]:
        line = {"metric": f"{label} (%)", "benchmark": benchmark_label(b)}
        for v in st.variant_names():
            d = (res.eval_macro_by_seed([st.task], m, metric, st.name, v) if b == "average"
                 else res.eval_by_seed(st.task, m, b, metric, st.name, v))
            rows.append(cell({"study": st.name, "variant": v, "task": st.task, "benchmark": b, "method": m},
                             metric, "fraction", d))
            line[v] = ms(d, 100)
        disp.append(line)
    for col, lab, unit, red, scale, dig in (("syncs", "weight syncs / step", "syncs", "mean", 1, 2),
                                            ("time_total", "wall-clock (s)", "seconds", "sum", 1, 1),
                                            ("tokens_total", "training-generation tokens", "tokens", "sum", 1, 0)):
        line = {"metric": lab, "benchmark": "training"}
        for v in st.variant_names():
            d = res.steps_by_seed(st.task, m, col, red, st.name, v)
            rows.append(cell({"study": st.name, "variant": v, "task": st.task, "benchmark": "training", "method": m},
                             col, unit, d))
            line[v] = ms(d, scale, dig)
        disp.append(line)
    notes = [f"{method_label(m)} on {st.task} with the inference weights synchronised per stage (before every "
             "turn's siblings: on-policy continuation, IS weight ≡ 1), every N stages (interval-N) or when the "
             "policy KL exceeds a threshold (kl-τ); the last two no longer guarantee ω ≡ 1 (§G.6).",
             seeds_note(res, st.name)]
    return [Table("tableG6_sync", f"Synchronisation frequency of on-policy continuation ({label}, cost) (§G.6)",
                  pd.DataFrame(rows), pd.DataFrame(disp), notes)]


TABLES: tuple[Callable[[Results], list[Table]], ...] = (
    table01_main, table01_gains, table02_credit_assignment, table03_continuation, table06_continuation_detail,
    table07_airline_online, table08_airline_eval, table09_airline_tools, table10_group_size,
    table11_group_size_cost, table12_trunk_failures, table13_failure_dynamics, table14_training_cost,
    table21_budget, tableG5_tool_use, tableG6_sync,
)


def build_tables(res: Results) -> list[Table]:
    out: list[Table] = []
    for fn in TABLES:
        out += fn(res)
    return out


# ------------------------------------------------------------------------------------------------
# writers
# ------------------------------------------------------------------------------------------------

_LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                  "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}
_LATEX_UNICODE = {"±": r"$\pm$", "Δ": r"$\Delta$", "−": "--", "≡": r"$\equiv$", "ω": r"$\omega$",
                  "τ": r"$\tau$", "·": r"$\cdot$", "×": r"$\times$", "ψ": r"$\psi$", "≤": r"$\leq$", "≥": r"$\geq$",
                  "σ": r"$\sigma$", "²": r"$^2$", "θ": r"$\theta$", "π": r"$\pi$", "μ": r"$\mu$",
                  "≠": r"$\neq$", "→": r"$\rightarrow$", "≈": r"$\approx$", "‖": r"$\|$", "√": r"$\surd$",
                  ">": r"$>$", "<": r"$<$"}


def latex_escape(s: str) -> str:
    out = "".join(_LATEX_SPECIAL.get(ch, ch) for ch in str(s))
    for a, b in _LATEX_UNICODE.items():
        out = out.replace(a, b)
    return out


def to_markdown(df: pd.DataFrame) -> str:
    cols = [str(c) for c in df.columns]
    esc = lambda x: str(x).replace("|", "\\|").replace("\n", " ")
    lines = ["| " + " | ".join(esc(c) for c in cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for rec in df.itertuples(index=False):
        lines.append("| " + " | ".join(esc(v) for v in rec) + " |")
    return "\n".join(lines)


def to_latex(df: pd.DataFrame, caption: str, label: str) -> str:
    body = pd.DataFrame([[latex_escape(v) for v in rec] for rec in df.itertuples(index=False)],
                        columns=[latex_escape(c) for c in df.columns])
    tex = body.to_latex(index=False, escape=False, caption=latex_escape(caption), label=label,
                        column_format="l" * len(df.columns))
    return tex


def write_table(t: Table, outdir: str | Path) -> list[Path]:
    """Write <name>.csv (tidy numbers), <name>.md and <name>.tex (the display grid, title and notes)."""
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{t.name}.csv", out / f"{t.name}.md", out / f"{t.name}.tex"]
    t.data.to_csv(paths[0], index=False)
    md = [f"## {t.title}", "", to_markdown(t.display), ""] + [f"- {n}" for n in t.notes]
    paths[1].write_text("\n".join(md) + "\n")
    caption = t.title + ". " + " ".join(t.notes)
    paths[2].write_text(to_latex(t.display, caption, f"tab:{t.name}"))
    return paths
