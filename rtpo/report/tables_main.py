"""The main grid's tables (config `methods` x `tasks` x `seeds`; registry: rtpo.report.tables.TABLES):
§4.1 Table 1 (table01_main, table01_gains, table01_vs_vanilla), §G.1 airline (table07-09), §G.3 RTPO's
trunk failures (table12, table13), §G.4 training cost (table14), §G.7 per-trunk budget (table21), §G.5
tool use (tableG5_tool_use), and the two diagnostics of this scale: table_learning (does training move the
reward?) and table_budget (rollouts per prompt in E.3's count)."""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Mapping

import numpy as np
import pandas as pd

from rtpo.report.load import MAIN, Results, benchmark_label, select_window
from rtpo.report.paper_reference import PAPER_COL, PAPER_GAINS
from rtpo.report.stats import (
    paired, paired_cells, paired_ratio, problem_summary, relative_gain, se_over_seeds, summarize,
)
from rtpo.report.table_base import (
    TIMING_NOTE, Table, cell, diff_ci, fmt_value, headline_tasks, method_label, methods_with, ms, pick_steps,
    seeds_note, step_values, tasks_with,
)


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
    return [m for m in methods_with(res, task, "steps")
            if int(((res.run_settings(task, m) or {}).get("train") or {}).get("steps", 0)) > 0]


def kl_coef(res: Results, method: str, task: str) -> float:
    """The KL coefficient the runs trained with (run.json); 0 without a record: no reference model known."""
    s = res.run_settings(task, method)
    return float(((s or {}).get("train") or {}).get("kl_coef", 0.0) or 0.0)


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
            settings = (res.run_settings(t, m) or {}).get("method") or {}   # what the runs trained with (run.json)
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
# §G.5 tool use
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
