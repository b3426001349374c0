"""The paper's tables, recomputed from our runs (CSV, Markdown and LaTeX under the tables dir).

Every table is a `Table`: `data` is the tidy numbers (one row per cell: its keys, the metric, the
unit, mean / std / n / 95 % CI over seeds and the per-seed `seeds` and `values`) and goes to
`<name>.csv`; `display` is the formatted grid (mean ± std) that goes to `<name>.md` and `<name>.tex`.
Values in the CSV are in the unit of the source file (`unit` column: fractions, tokens, seconds);
the Markdown/LaTeX grids show fractions as percent. Our numbers only: where a table shows the
paper's figure, the column is named "paper (Qwen3-8B)" and the figure comes from paper_reference.py.

Tables (paper numbering; builders below, registry `TABLES`):
  table01_main, table01_gains       §4.1 Table 1: pass@1 by task and tier (+ its standard errors); RTPO's gains
  table01_vs_vanilla                every RL method against Vanilla, paired by eval problem and seed
  table_learning                    training reward, last fifth of the steps - first fifth, with diagnostics
  table_budget                      rollouts per prompt (E.3's counting), methods > ±10 % off the task median
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

Timings (wall-clock seconds) never sit in these tables: they go to timing_<table>.* files of their
own (timing_table11_group_size_cost, timing_table14_training_cost, timing_tableG6_sync), so that two
runs of the DAG on one machine give byte-identical tables apart from the timing_* files.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import numpy as np
import pandas as pd

from rtpo.atomic import atomic_call, atomic_write_text
from rtpo.config import method_settings
from rtpo.report.load import MAIN, Results, benchmark_label, select_window, sort_benchmarks, training_steps
from rtpo.report.paper_reference import PAPER_COL, PAPER_GAINS
from rtpo.report.stats import (
    paired, paired_cells, paired_ratio, problem_summary, relative_gain, se_over_seeds, summarize,
)

METHOD_LABELS = {"vanilla": "Vanilla", "grpo": "GRPO", "grpo_tis": "GRPO-TIS", "tree_grpo": "Tree-GRPO", "arpo": "ARPO",
                 "seeupo": "SeeUPO", "rtpo": "RTPO", "rtpo_ca": "RTPO-CA"}
# Table 1 of the paper covers math and knowledge (search) QA; its "overall" averages their benchmarks.
HEADLINE_TASKS = ("math", "search")


TIMING_NOTE = ("a timing: machine- and load-dependent, so kept out of the other tables (two runs of the DAG on one "
               "machine agree on every other table byte for byte, not on this one).")


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
    Block = tuple[str, str, Callable[[str], dict[int, float]], Callable[[str], dict]]
    blocks: list[Block] = []
    for t in tasks:
        for b in res.benchmarks(t):
            blocks.append((t, b, lambda m, t=t, b=b: res.eval_by_seed(t, m, b, "pass@1"),
                           lambda m, t=t, b=b: res.problem_cells([t], m, benchmark=b)))
        blocks.append((t, "average", lambda m, t=t: res.eval_macro_by_seed([t], m, "pass@1"),
                       lambda m, t=t: res.problem_cells([t], m)))
    all_name = "+".join(head)
    if len(head) > 1:
        blocks.append((all_name, "average", lambda m: res.eval_macro_by_seed(head, m, "pass@1"),
                       lambda m: res.problem_cells(head, m)))
    se_task: dict[str, dict[str, tuple[float, float]]] = {}
    for task, bench, get, cells in blocks:
        line = {"task": task, "benchmark": benchmark_label(bench)}
        se_e = {"task": task, "benchmark": "SE over problems × samples"}
        se_s = {"task": task, "benchmark": "SE over seeds"}
        for m in methods:
            d = get(m)
            ps = problem_summary(cells(m))
            sse = se_over_seeds(d.values())
            rows.append({**cell({"task": task, "benchmark": bench, "method": m}, "pass@1", "fraction", d),
                         "se_eval": ps.se, "se_eval_df": ps.df, "se_seeds": sse})
            line[method_label(m)] = ms(d, 100)
            se_e[method_label(m)], se_s[method_label(m)] = fmt_value(ps.se * 100, 1), fmt_value(sse * 100, 1)
            if bench == "average":
                se_task.setdefault(task, {})[m] = (ps.se, sse)
        disp.append(line)
        if bench == "average":
            disp += [se_e, se_s]
    notes = [
        "pass@1 (%) on each evaluation benchmark (embedded scale: a task's difficulty tiers); "
        "'average' = mean over the task's benchmarks, per seed, then over seeds; "
        f"'{all_name}' averages the benchmarks of {', '.join(head)} (the paper's Table 1 covers math and "
        "knowledge QA).",
        "standard errors of the 'average' (pp): 'SE over problems × samples' = how precisely the evaluation "
        "pins down the trained models' pass@1 (per-problem pass@1 from the eval JSON's per_problem, variance "
        "over problems within each benchmark and seed; the seeds' models held fixed); 'SE over seeds' = "
        "std over seeds / √n (what retraining moves; includes the evaluation's noise). — = no per-problem "
        "records, or fewer than 2 seeds.",
        "per-task standard error of pass@1 (root-mean-square over the methods, pp): " + "; ".join(
            f"{t} {_rms([v[0] for v in se.values()]):.1f} (problems × samples), "
            f"{_rms([v[1] for v in se.values()]):.1f} (seeds)" for t, se in se_task.items()) + ".",
        seeds_note(res),
    ]
    return [Table("table01_main", "Table 1: main results, pass@1 (%) by task and difficulty tier",
                  pd.DataFrame(rows), pd.DataFrame(disp), notes)]


def _rms(xs: Iterable[float]) -> float:
    """Root mean square, in percentage points, of the finite values (NaN if none)."""
    v = [x for x in xs if x is not None and not math.isnan(x)]
    return 100 * math.sqrt(sum(x * x for x in v) / len(v)) if v else math.nan


def excludes_zero(lo: float, hi: float) -> str:
    """"yes (+)" / "yes (−)" when the interval [lo, hi] excludes 0 on that side, "no", or "—" without one."""
    if lo is None or hi is None or math.isnan(lo) or math.isnan(hi):
        return "—"
    if lo > 0:
        return "yes (+)"
    if hi < 0:
        return "yes (−)"
    return "no"


def vanilla_comparisons(res: Results) -> list[dict[str, Any]]:
    """Every RL method of the main grid against Vanilla, per task and on the headline tasks together:
    pass@1 differences paired by evaluation problem and seed (stats.problem_summary of
    stats.paired_cells), and paired by seed only (Student t over seeds)."""
    methods = [m for m in res.cfg.get("methods", []) if m != "vanilla" and not res.eval_rows(MAIN, "", None, m).empty]
    if "vanilla" not in res.cfg.get("methods", []) or res.eval_rows(MAIN, "", None, "vanilla").empty:
        return []
    groups = [(t, [t]) for t in tasks_with(res)]
    head = headline_tasks(res)
    if len(head) > 1:
        groups.append(("+".join(head), head))
    out = []
    for name, ts in groups:
        base_cells = res.problem_cells(ts, "vanilla")
        base_seed = res.eval_macro_by_seed(ts, "vanilla", "pass@1")
        for m in methods:
            ps = problem_summary(paired_cells(res.problem_cells(ts, m), base_cells))
            by_seed = paired(res.eval_macro_by_seed(ts, m, "pass@1"), base_seed)
            out.append({"task": name, "method": m, "problem": ps, "seed": by_seed})
    return out


def table01_vs_vanilla(res: Results) -> list[Table]:
    comps = vanilla_comparisons(res)
    if not comps:
        return []
    rows, disp = [], []
    for c in comps:
        ps, by_seed = c["problem"], c["seed"]
        keys = {"task": c["task"], "method": c["method"], "comparison": f"{c['method']} - vanilla"}
        s = summarize(by_seed.values())
        rows.append({**keys, "metric": "diff pass@1, paired by problem and seed", "unit": "fraction",
                     "mean": ps.mean, "std": s.std, "se": ps.se, "df": ps.df, "ci95_lo": ps.lo, "ci95_hi": ps.hi,
                     "n": ps.n_problems, "n_seeds": ps.n_seeds,
                     "seeds": ";".join(map(str, by_seed)), "values": ";".join(repr(v) for v in by_seed.values())})
        rows.append({**keys, "metric": "diff pass@1, paired by seed", "unit": "fraction", "mean": s.mean,
                     "std": s.std, "se": s.std / math.sqrt(s.n) if s.n >= 2 else math.nan, "df": max(s.n - 1, 0),
                     "ci95_lo": s.lo, "ci95_hi": s.hi, "n": s.n, "n_seeds": s.n,
                     "seeds": ";".join(map(str, by_seed)), "values": ";".join(repr(v) for v in by_seed.values())})
        ci = "—" if math.isnan(ps.mean) else (
            f"{100 * ps.mean:+.1f}" + ("" if math.isnan(ps.lo) else f" [{100 * ps.lo:+.1f}, {100 * ps.hi:+.1f}]"))
        disp.append({"task": c["task"], "method": method_label(c["method"]),
                     "Δ pass@1 vs Vanilla (pp) [95 % CI], paired by problem and seed": ci,
                     "SE (pp)": fmt_value(100 * ps.se, 1), "problem-seed pairs": str(ps.n_problems),
                     "CI excludes 0": excludes_zero(ps.lo, ps.hi),
                     "Δ paired by seed (pp) [95 % CI]": diff_ci(by_seed, 100)})
    notes = [
        "Δ = method − Vanilla in pass@1 (pp) on the task's evaluation (the task's benchmarks macro-averaged, "
        "then averaged over seeds). Paired by problem and seed: per-problem differences of pass@1 over the "
        "same problems, with the same seed's Vanilla (the same base model and evaluation sampling seeds), "
        "SE over problems and samples with each seed's trained model held fixed, t interval with "
        "Σ (problems − 1) degrees of freedom: whether these trained models differ beyond evaluation noise. "
        "Paired by seed: t interval over the per-seed differences (n − 1 df): whether the method beats "
        "Vanilla across retrained seeds, the stricter question.",
        seeds_note(res),
    ]
    return [Table("table01_vs_vanilla", "Table 1 (paired): every RL method against Vanilla, pass@1 difference",
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

def hit_metric(res: Results, task: str, scope: str) -> str:
    """"hit" (output-hit, §F.3) where the scope's evaluations carry it, else "pass@1"."""
    if res.evals.empty:
        return "pass@1"
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
    metric = hit_metric(res, st.task, st.name)
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
    col = res.online_column(AIRLINE)
    df = res.step_rows(MAIN, "", AIRLINE)
    steps = pick_steps(df.step[df[col].notna()])
    rows, disp = [], []
    for m in methods_with(res, AIRLINE, "steps"):
        line = {"method": method_label(m)}
        for s in steps:
            d = step_values(res, AIRLINE, m, col, s)
            rows.append(cell({"task": AIRLINE, "method": m, "step": s}, col, "fraction", d))
            line[f"step {s}"] = ms(d, 100)
        disp.append(line)
    what = ("success (%) on a fixed held-out batch of training-split tasks that no step trains on (one "
            "rollout each, the same sampling seeds at every measurement), by the weights after the step shown"
            if col == "heldout_success" else
            "online success (%) of the step's on-policy first-pass trajectories (trunks / chains): each step "
            "draws other prompts, so a step's value mixes the policy's change with its prompts' difficulty")
    notes = [what + "; `step` as logged in metrics.jsonl, 0-based; at most 6 evenly spaced steps.", seeds_note(res)]
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
    """The reference variant: the main grid's G for the study's method on its task (per-task overrides
    included) if it is a variant, else the first."""
    default = res.main_setting(st.methods[0], st.task, "group_size")
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
    out = []
    for timing, spec in ((False, (("tokens_total", "training-generation tokens", "tokens"),
                                  ("trained_tokens", "trained tokens", "tokens"))),
                         (True, (("time_total", "wall-clock (s)", "seconds"),))):
        rows, disp = [], []
        for v in st.variants:
            line = {"G": str(v.value)}
            for col, label, unit in spec:
                d = res.steps_by_seed(st.task, m, col, "sum", st.name, v.name)
                rows.append(cell({"study": st.name, "variant": v.name, "task": st.task, "method": m}, col, unit, d))
                line[label] = ms(d, 1, 1 if unit == "seconds" else 0)
                if col in ("time_total", "tokens_total"):
                    r = paired_ratio(d, res.steps_by_seed(st.task, m, col, "sum", st.name, ref))
                    rows.append(cell({"study": st.name, "variant": v.name, "task": st.task, "method": m},
                                     f"{col} change vs {ref}", "percent", r))
                    line[f"Δ {label.split(' (')[0]} vs {ref} (%)"] = "—" if v.name == ref else diff_ci(r, 1, 1)
            disp.append(line)
        what = ("wall-clock = sum of the per-step `time.total` (seconds, CPU here; the paper reports GPU-hours)"
                if timing else "training-generation tokens = all tokens generated during training (trunks, "
                "siblings, continuations); trained tokens = tokens that received a gradient")
        notes = [f"training cost of {method_label(m)} on {st.task}: {what}; Δ = per-seed percent change against "
                 f"{ref}.", seeds_note(res, st.name)]
        if timing:
            notes.append(TIMING_NOTE)
        name = "table11_group_size_cost"
        out.append(Table(f"timing_{name}" if timing else name,
                         "Table 11: cost of the sibling group size G" + (" (wall-clock)" if timing else ""),
                         pd.DataFrame(rows), pd.DataFrame(disp), notes))
    return out


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
    trows, tdisp = [], []
    for t in tasks:
        grpo = {c: res.steps_by_seed(t, "grpo", c, "sum") for c in ("time_total", "tokens_total")}
        for m in methods_with(res, t, "steps"):
            keys = {"task": t, "method": m}
            line = {"task": t, "method": method_label(m)}
            wall = res.steps_by_seed(t, m, "time_total", "sum")
            trows.append(cell(keys, "time_total", "seconds", wall))
            r = paired_ratio(wall, grpo["time_total"])
            trows.append(cell(keys, "time_total change vs grpo", "percent", r))
            tdisp.append({"task": t, "method": method_label(m), "wall-clock (s)": ms(wall, 1, 1),
                          "Δ wall-clock vs GRPO (%)": "—" if m == "grpo" else diff_ci(r, 1, 1)})
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
            r = paired_ratio(res.steps_by_seed(t, m, "tokens_total", "sum"), grpo["tokens_total"])
            rows.append(cell(keys, "tokens_total change vs grpo", "percent", r))
            line["Δ generated tokens vs GRPO (%)"] = "—" if m == "grpo" else diff_ci(r, 1, 1)
            disp.append(line)
    notes = ["whole training run: tokens generated during training by kind (trunk / chain / tree / branch / "
             "sibling / continuation, as the method labels them), summed over steps; tool calls per trunk, "
             "rollouts per prompt (every complete trajectory; E.3's counting in table_budget) and syncs are means "
             "over steps; Δ = per-seed percent change against GRPO with its 95 % t-interval. Wall-clock: "
             "timing_table14_training_cost.", seeds_note(res)]
    tnotes = ["whole training run: wall-clock = sum of per-step `time.total` (seconds); Δ = per-seed percent "
              "change against GRPO with its 95 % t-interval.", seeds_note(res), TIMING_NOTE]
    return [Table("table14_training_cost", "Table 14: training cost across methods",
                  pd.DataFrame(rows), pd.DataFrame(disp), notes),
            Table("timing_table14_training_cost", "Table 14: training wall-clock across methods",
                  pd.DataFrame(trows), pd.DataFrame(tdisp), tnotes)]



# ------------------------------------------------------------------------------------------------
# learning: does training move the training reward? (issue: the embedded study must show learning)
# ------------------------------------------------------------------------------------------------

EARLY, LATE = (0.0, 0.2), (0.8, 1.0)     # first / last fifth of a run's steps, by rank (load.select_window)
SATURATION = 0.05                        # first-fifth reward within this of 0 or 1: little room / no signal
FLAG_ZERO_ADV = 0.8                      # >= 80 % of trained rows/groups with advantage exactly 0
FLAG_CLIP = 0.1                          # PPO ratio clip active on >= 10 % of trained tokens
FLAG_KL = 0.01                           # KL(rollout || train) >= 0.01 nats/token (k3)
FLAG_KL_REF = 0.05                       # KL(train || reference) >= 0.05 nats/token (low-var KL)
MIN_WINDOW_STEPS = 3                     # fewer steps per fifth: each window is a few noisy batches


def trained_methods(res: Results, task: str) -> list[str]:
    """Main-grid methods (config order) that train (steps > 0) and have metrics on `task`."""
    return [m for m in methods_with(res, task, "steps") if training_steps(res.cfg, m, task) > 0]


def kl_coef(res: Results, method: str, task: str) -> float:
    try:
        return float(method_settings(res.cfg, method, task)["train"].get("kl_coef", 0.0) or 0.0)
    except Exception:  # a method without a config section: no reference model known
        return 0.0


def learning_cells(res: Results) -> list[dict[str, Any]]:
    """Per (task, trained method): per-seed training reward over the first and last fifth of the steps,
    their difference, the diagnostics that explain a flat cell, and a diagnosis."""
    out = []
    for t in tasks_with(res, "steps"):
        for m in trained_methods(res, t):
            first = res.steps_by_seed(t, m, "reward_mean", "mean", window=EARLY)
            last = res.steps_by_seed(t, m, "reward_mean", "mean", window=LATE)
            delta = paired(last, first)
            diag = {c: res.steps_by_seed(t, m, c, "mean")
                    for c in ("zero_adv_frac", "clip_frac", "kl_rollout_train", "kl_ref")}
            has_ref = kl_coef(res, m, t) > 0
            if not has_ref:
                diag["kl_ref"] = {}
            df = res.step_rows(MAIN, "", t, m)
            n_steps = int(df.groupby("seed").step.count().min()) if not df.empty else 0
            win = len(select_window(pd.DataFrame({"step": range(n_steps)}), EARLY)) if n_steps else 0
            s = summarize(delta.values())
            out.append({"task": t, "method": m, "first": first, "last": last, "delta": delta, "summary": s,
                        "diag": diag, "has_ref": has_ref, "steps": n_steps, "window_steps": win,
                        "excludes_zero": excludes_zero(s.lo, s.hi),
                        "diagnosis": _diagnose(s, first, diag, win)})
    return out


def _diagnose(s, first: Mapping[int, float], diag: Mapping[str, Mapping[int, float]], win: int) -> str:
    """Why a cell's CI does not exclude 0: the flags (thresholds above) that hold, in this order."""
    if s.n >= 2 and not math.isnan(s.lo) and (s.lo > 0 or s.hi < 0):
        return "learns" if s.lo > 0 else "reward falls"
    mean = lambda d: summarize(d.values()).mean if d else math.nan
    flags = []
    if s.n < 2:
        flags.append(f"{s.n} seed(s): no interval")
    r0 = mean(first)
    if not math.isnan(r0) and r0 <= SATURATION:
        flags.append(f"saturated at 0 (first-fifth reward {r0:.3f})")
    elif not math.isnan(r0) and r0 >= 1 - SATURATION:
        flags.append(f"saturated at 1 (first-fifth reward {r0:.3f})")
    z, c, k, kr = (mean(diag[x]) for x in ("zero_adv_frac", "clip_frac", "kl_rollout_train", "kl_ref"))
    if not math.isnan(z) and z >= FLAG_ZERO_ADV:
        flags.append(f"{100 * z:.0f} % zero advantage (little signal)")
    if not math.isnan(c) and c >= FLAG_CLIP:
        flags.append(f"clip active on {100 * c:.0f} % of tokens")
    if not math.isnan(k) and k >= FLAG_KL:
        flags.append(f"KL(rollout‖train) {k:.3g}")
    if not math.isnan(kr) and kr >= FLAG_KL_REF:
        flags.append(f"KL to ref {kr:.3g}")
    if win < MIN_WINDOW_STEPS:
        flags.append(f"{win} step(s) per fifth")
    if not flags:
        half = (s.hi - s.lo) / 2 if not math.isnan(s.lo) else math.nan
        flags.append(f"no flag: within seed noise (CI half-width {half:.3f})")
    return "; ".join(flags)


def _g3(d: Mapping[int, float], scale: float = 1.0) -> str:
    x = summarize(d.values()).mean if d else math.nan
    return "—" if math.isnan(x) else f"{x * scale:.3g}"


def table_learning(res: Results) -> list[Table]:
    cells = learning_cells(res)
    if not cells:
        return []
    rows, disp = [], []
    for c in cells:
        keys = {"task": c["task"], "method": c["method"]}
        rows.append({**cell(keys, "reward last fifth - first fifth", "reward", c["delta"]),
                     "excludes_zero": c["excludes_zero"], "steps": c["steps"], "window_steps": c["window_steps"],
                     "diagnosis": c["diagnosis"]})
        rows.append(cell(keys, "reward first fifth", "reward", c["first"]))
        rows.append(cell(keys, "reward last fifth", "reward", c["last"]))
        for col, d in c["diag"].items():
            rows.append(cell(keys, col, "fraction" if col.endswith("frac") else "nats/token", d))
        disp.append({"task": c["task"], "method": method_label(c["method"]),
                     "Δ reward, last − first fifth [95 % CI]": diff_ci(c["delta"], 1, 3),
                     "first fifth": ms(c["first"], 1, 3), "last fifth": ms(c["last"], 1, 3),
                     "CI excludes 0": c["excludes_zero"],
                     "zero-adv. (%)": ms(c["diag"]["zero_adv_frac"], 100, 1),
                     "clip (%)": ms(c["diag"]["clip_frac"], 100, 1),
                     "KL(rollout‖train)": _g3(c["diag"]["kl_rollout_train"]),
                     "KL to ref": _g3(c["diag"]["kl_ref"]) if c["has_ref"] else "— (kl_coef 0)",
                     "steps (per fifth)": f"{c['steps']} ({c['window_steps']})",
                     "diagnosis": c["diagnosis"]})
    moved = [f"{c['task']}/{method_label(c['method'])} ({c['excludes_zero'][5:-1]})" for c in cells
             if c["excludes_zero"].startswith("yes")]
    notes = [
        "training reward = `reward_mean` of the step's on-policy first-pass trajectories (RTPO's trunks, the "
        "baselines' chains / roots) in metrics.jsonl; per seed the mean over the last fifth of the steps minus "
        "the mean over the first fifth (by step rank, at least one step each); mean [95 % t-interval] over seeds.",
        "CI excludes 0 in: " + (", ".join(moved) if moved else "no cell") + ".",
        "diagnostics, means over all steps: zero-adv. = trained rows/groups whose advantage is exactly 0; clip = "
        "tokens where the PPO ratio clip was active; KL(rollout‖train) = k3 estimate before the update; KL to "
        "ref = low-var KL to the reference model (only where kl_coef > 0). A cell whose CI does not exclude 0 "
        f"lists what holds: reward saturated (first fifth ≤ {SATURATION} or ≥ {1 - SATURATION}), zero advantage "
        f"≥ {100 * FLAG_ZERO_ADV:.0f} %, clip ≥ {100 * FLAG_CLIP:.0f} %, KL(rollout‖train) ≥ {FLAG_KL}, KL to ref "
        f"≥ {FLAG_KL_REF}, fewer than {MIN_WINDOW_STEPS} steps per fifth; 'no flag' = within seed noise.",
        seeds_note(res),
    ]
    return [Table("table_learning", "Learning: training reward, last fifth of the steps − first fifth",
                  pd.DataFrame(rows), pd.DataFrame(disp), notes)]


# ------------------------------------------------------------------------------------------------
# the per-prompt rollout budget (E.3: every method the same budget)
# ------------------------------------------------------------------------------------------------

BUDGET_TOLERANCE = 0.10   # a method more than ±10 % from the task's median rollouts per prompt is flagged


def paper_rollouts(res: Results, task: str, method: str) -> dict[int, float]:
    """{seed: mean over steps of the rollouts per prompt as E.3 counts them}: complete trajectories per
    prompt, for RTPO its trunks plus the sibling rollouts forked at every realized boundary (each continued
    to termination), without the trunk's own continuation regenerated from S_{k+1} (metrics' `rollouts`
    kind "continuation"). A method that generates no continuation kind counts every trajectory."""
    df = res.step_rows(MAIN, "", task, method)
    if df.empty or "rollouts_per_prompt" not in df.columns:
        return {}
    if "rollouts_continuation" in df.columns:
        cont = df["rollouts_continuation"].fillna(0.0)
    elif "tokens_continuation" in df.columns and df["tokens_continuation"].fillna(0).sum() > 0:
        return {}  # metrics from before the `rollouts` field: RTPO's count cannot be split
    else:
        cont = 0.0
    d = df.assign(_paper=df["rollouts_per_prompt"] - cont)
    return {int(s): float(g["_paper"].mean()) for s, g in d.groupby("seed")}


def closest_trunks_g(turns: float, target: float) -> tuple[int, int, float] | None:
    """(trunks T, group size G, T (1 + (G - 1) turns)) closest to `target` over T <= 8, 2 <= G <= 8 (ties:
    the smaller T·G): RTPO's E.3 count at a measured mean number of realized trunk turns."""
    if math.isnan(turns) or math.isnan(target) or target <= 0:
        return None
    best = min(((T, G, T * (1 + (G - 1) * turns)) for T in range(1, 9) for G in range(2, 9)),
               key=lambda x: (abs(x[2] - target), x[0] * x[1]))
    return best


def budget_cells(res: Results) -> list[dict[str, Any]]:
    out = []
    for t in tasks_with(res, "steps"):
        methods = trained_methods(res, t)
        paper = {m: paper_rollouts(res, t, m) for m in methods}
        means = [summarize(v.values()).mean for v in paper.values() if v]
        median = float(np.median(means)) if means else math.nan
        for m in methods:
            mean = summarize(paper[m].values()).mean if paper[m] else math.nan
            dev = 100 * (mean / median - 1) if median and not math.isnan(mean) else math.nan
            turns = res.steps_by_seed(t, m, "trunks_turns_mean", "mean")
            try:  # the run's own settings: method.<m>, overlaid by method.<m>.per_task.<task>
                settings = method_settings(res.cfg, m, t)["method"]
            except Exception:
                settings = ((res.cfg.get("method") or {}).get(m) or {})
            match = (closest_trunks_g(summarize(turns.values()).mean if turns else math.nan, median)
                     if "group_size" in settings and "trunks" in settings else None)
            out.append({"task": t, "method": m, "paper": paper[m], "median": median, "dev": dev,
                        "flag": (not math.isnan(dev)) and abs(dev) > 100 * BUDGET_TOLERANCE,
                        "all": res.steps_by_seed(t, m, "rollouts_per_prompt", "mean"), "turns": turns,
                        "generated": res.steps_by_seed(t, m, "generated_tokens", "mean"),
                        "trained": res.steps_by_seed(t, m, "trained_tokens", "mean"),
                        "overflow": res.steps_by_seed(t, m, "context_overflow", "mean"),
                        "match": match, "settings": settings})
    return out


def table_budget(res: Results) -> list[Table]:
    cells = budget_cells(res)
    if not cells:
        return []
    rows, disp = [], []
    for c in cells:
        keys = {"task": c["task"], "method": c["method"]}
        rows.append({**cell(keys, "rollouts_per_prompt_paper", "rollouts", c["paper"]),
                     "task_median": c["median"], "dev_from_median_pct": c["dev"], "flag": bool(c["flag"])})
        rows.append(cell(keys, "rollouts_per_prompt", "rollouts", c["all"]))
        rows.append(cell(keys, "trunks_turns_mean", "turns", c["turns"]))
        rows.append(cell(keys, "generated_tokens_per_step", "tokens", c["generated"]))
        rows.append(cell(keys, "trained_tokens_per_step", "tokens", c["trained"]))
        rows.append(cell(keys, "context_overflow", "fraction", c["overflow"]))
        st = c["settings"]
        knobs = ", ".join(f"{k} {st[k]}" for k in ("chains", "trunks", "group_size", "trees", "expansions",
                                                   "rounds", "initial", "total") if k in st)
        match = "—"
        if c["match"] is not None:
            T, G, n = c["match"]
            match = f"trunks {T}, G {G}: {n:.1f} ({100 * (n / c['median'] - 1):+.0f} %)"
        disp.append({"task": c["task"], "method": method_label(c["method"]), "settings": knobs or "—",
                     "rollouts / prompt (E.3)": ms(c["paper"], 1, 2),
                     "vs task median (%)": "—" if math.isnan(c["dev"]) else f"{c['dev']:+.1f}",
                     "outside ±10 %": "YES" if c["flag"] else "no",
                     "all complete trajectories / prompt": ms(c["all"], 1, 2),
                     "realized turns / first-pass traj.": ms(c["turns"], 1, 2),
                     "generated tokens / step": ms(c["generated"], 1, 0),
                     "trained tokens / step": ms(c["trained"], 1, 0),
                     "ended by context bound (%)": ms(c["overflow"], 100, 1),
                     "closest RTPO (trunks, G) to the median": match})
    flagged = [f"{c['task']}/{method_label(c['method'])} ({c['dev']:+.0f} %)" for c in cells if c["flag"]]
    notes = [
        "rollouts per prompt as the paper counts them (E.3: complete trajectories per prompt; GRPO / SeeUPO their "
        "chains, ARPO its chains and branches, Tree-GRPO its tree leaves, RTPO its trunks plus the G − 1 "
        "sibling rollouts forked at every realized turn boundary, each continued to termination, i.e. "
        "T·(1 + (G − 1)·L) for L realized trunk turns); mean over steps per seed, then over seeds. 'All complete "
        "trajectories' also counts RTPO's regenerated trunk continuations from S_{k+1} (T·G·L in total).",
        f"flag: more than ±{100 * BUDGET_TOLERANCE:.0f} % from the median over the task's methods. Flagged: "
        + (", ".join(flagged) if flagged else "none") + ".",
        "generated tokens: every sampled turn once (a prefix shared by tree branches or RTPO siblings is "
        "generated once); trained tokens: the response tokens of the rows updated (a flattened row trains every "
        "turn of its trajectory, so a shared prefix is trained once per row holding it); ended by context bound: "
        "share of rollouts cut because the next context would not fit (RTPO: c_k only; flat-row methods: the "
        "full history), mean over steps.",
        "closest RTPO (trunks, G): the integer T ≤ 8, 2 ≤ G ≤ 8 whose T·(1 + (G − 1)·L) at this run's measured "
        "mean realized trunk turns L is nearest the task median (a budget suggestion; L changes as the policy "
        "learns, so the match holds for the turns measured here).",
        seeds_note(res),
    ]
    return [Table("table_budget", "Rollout budget per prompt and method (E.3 counting)",
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
    metric = hit_metric(res, st.task, st.name)
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
    trows, tdisp = [], []
    for col, lab, unit, red, scale, dig in (("syncs", "weight syncs / step", "syncs", "mean", 1, 2),
                                            ("time_total", "wall-clock (s)", "seconds", "sum", 1, 1),
                                            ("tokens_total", "training-generation tokens", "tokens", "sum", 1, 0)):
        line = {"metric": lab, "benchmark": "training"}
        for v in st.variant_names():
            d = res.steps_by_seed(st.task, m, col, red, st.name, v)
            (trows if col == "time_total" else rows).append(
                cell({"study": st.name, "variant": v, "task": st.task, "benchmark": "training", "method": m},
                     col, unit, d))
            line[v] = ms(d, scale, dig)
        (tdisp if col == "time_total" else disp).append(line)
    notes = [f"{method_label(m)} on {st.task} with the inference weights synchronised per stage (before every "
             "turn's siblings: on-policy continuation, IS weight ≡ 1), every N stages (interval-N) or when the "
             "policy KL exceeds a threshold (kl-τ); the last two no longer guarantee ω ≡ 1 (§G.6).",
             seeds_note(res, st.name)]
    return [Table("tableG6_sync", f"Synchronisation frequency of on-policy continuation ({label}, cost) (§G.6)",
                  pd.DataFrame(rows), pd.DataFrame(disp), notes),
            Table("timing_tableG6_sync", "Synchronisation frequency: training wall-clock (§G.6)",
                  pd.DataFrame(trows), pd.DataFrame(tdisp), [notes[0], seeds_note(res, st.name), TIMING_NOTE])]


TABLES: tuple[Callable[[Results], list[Table]], ...] = (
    table01_main, table01_vs_vanilla, table01_gains, table_learning, table_budget, table02_credit_assignment, table03_continuation, table06_continuation_detail,
    table07_airline_online, table08_airline_eval, table09_airline_tools, table10_group_size,
    table11_group_size_cost, table12_trunk_failures, table13_failure_dynamics, table14_training_cost,
    table21_budget, tableG5_tool_use, tableG6_sync,
)


def build_tables(res: Results) -> list[Table]:
    out: list[Table] = []
    for fn in TABLES:
        out += fn(res)
    return [mark_not_run(res, t) for t in out] if res.not_run else out


def mark_not_run(res: Results, t: Table) -> Table:
    """A 'not run' row for each benchmark of the table's tasks that the data job left out
    (Results.not_run: deep search without a web-search key), and a note saying why."""
    if "benchmark" not in t.display.columns or t.data.empty or "task" not in t.data.columns:
        return t
    rows, notes = [], []
    for task, benches in sorted(res.not_run.items()):
        if task not in set(t.data["task"]):
            continue
        for b in sorted(benches):
            rows.append({**{c: "not run" for c in t.display.columns}, "benchmark": benchmark_label(b),
                         **({"task": task} if "task" in t.display.columns else {})})
        reasons = "; ".join(sorted(set(benches.values())))
        notes.append(f"not run on {task}: {', '.join(sorted(benches))} ({reasons}; results/data/{task}/not_run.json)")
    if not rows:
        return t
    return Table(t.name, t.title, t.data, pd.concat([t.display, pd.DataFrame(rows)], ignore_index=True),
                 [*t.notes, *notes])


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
    atomic_call(paths[0], t.data.to_csv, index=False)  # issue 20: renamed into place
    md = [f"## {t.title}", "", to_markdown(t.display), ""] + [f"- {n}" for n in t.notes]
    atomic_write_text(paths[1], "\n".join(md) + "\n")
    caption = t.title + ". " + " ".join(t.notes)
    atomic_write_text(paths[2], to_latex(t.display, caption, f"tab:{t.name}"))
    return paths
