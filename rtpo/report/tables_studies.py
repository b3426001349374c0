"""The ablation studies' tables (config `ablations`; registry: rtpo.report.tables.TABLES): §4.3 credit
assignment (table02), §4.4 on- vs off-policy continuation (table03, table06), §G.2 group size (table10,
table11) and §G.6 synchronisation frequency (tableG6_sync)."""

from __future__ import annotations

import pandas as pd

from rtpo.report.load import MAIN, Results, benchmark_label, sort_benchmarks
from rtpo.report.stats import paired, paired_ratio
from rtpo.report.table_base import TIMING_NOTE, Table, cell, diff_ci, method_label, ms, seed_phrase, seeds_note


# ------------------------------------------------------------------------------------------------
# §4.3 Table 2
# ------------------------------------------------------------------------------------------------

def left_out(study: str) -> str:
    """Why a study's tables and ledger rows are empty when the config leaves it out (the CPU default leaves the
    continuation, credit-assignment and sync studies to config/overlays/optional.yaml)."""
    return f"it has no ablations.{study} study (config/overlays/optional.yaml adds it)"


def not_run(name: str, title: str, study: str) -> list[Table]:
    """The table of a study the config leaves out: one row saying so, rather than a missing table."""
    note = (f"not run in this config: it has no ablations.{study} study (config/overlays/optional.yaml adds it: "
            "`bash scripts/pipeline.sh --configfile config/config.yaml config/overlays/optional.yaml`)")
    return [Table(name, title, pd.DataFrame([{"study": study, "note": note}]),
                  pd.DataFrame([{"metric": "not run in this config", "benchmark": "—"}]), [note])]


def table02_credit_assignment(res: Results) -> list[Table]:
    st = res.studies.get("credit_assignment")
    if st is None:
        return not_run("table02_credit_assignment", "Table 2: turn-level credit assignment under full-history "
                       "rollouts", "credit_assignment")
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
    if st is None:
        return not_run("table03_continuation", "Table 3: on-policy vs off-policy continuation", "continuation")
    if res.evals.empty or len(st.variants) < 1:
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
    if st is None:
        return not_run("table06_continuation_detail", "Table 6: on-policy vs off-policy continuation, all metrics",
                       "continuation")
    if res.evals.empty:
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
# §G.2 Tables 10-11 (group size)
# ------------------------------------------------------------------------------------------------

def _group_ref(res: Results, st) -> str:
    """The reference variant: the main grid's G for the study's method on its task (per-task overrides
    included) if it is a variant, else the first."""
    return st.variant_of(res.main_setting(st.methods[0], st.task, "group_size")) or st.variant_names()[0]


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
# §G.6 sync frequency
# ------------------------------------------------------------------------------------------------

def tableG6_sync(res: Results) -> list[Table]:
    st = res.studies.get("sync")
    if st is None:
        return not_run("tableG6_sync", "Synchronisation frequency of on-policy continuation (§G.6)", "sync")
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


# ------------------------------------------------------------------------------------------------
# this artifact's controls (not the paper's): matched optimizer steps, psi = full
# ------------------------------------------------------------------------------------------------

def optimizer_steps_by_seed(res: Results, task: str, method: str, scope: str = MAIN, variant: str = "") -> dict[int, float]:
    """{seed: optimizer steps per training step}, from the records' cumulative train_version (the engine's
    optimizer-step counter): its rise over the recorded steps per step, or its first value alone."""
    df = res.step_rows(scope, variant, task, method)
    if df.empty or "train_version" not in df.columns:
        return {}
    out = {}
    for seed, g in df.groupby("seed"):
        g = g.sort_values("step").dropna(subset=["train_version"])
        if g.empty:
            continue
        tv, st = g["train_version"].astype(float), g["step"].astype(float)
        span = st.iloc[-1] - st.iloc[0]
        out[int(seed)] = (tv.iloc[-1] - tv.iloc[0]) / span if span > 0 else tv.iloc[0] / (st.iloc[0] + 1)
    return out


def table_controls(res: Results) -> list[Table]:
    """The controls of docs/design-controls.md (ledger rows C.A-*, C.M-*, C.B-*): per task, RTPO, the flat methods
    and those methods with RTPO's optimizer steps (study matched_updates); GRPO and GRPO trained per turn on the
    contexts it sampled (study turn_rows); where the config runs it with `all`, RTPO and GRPO under psi = full
    (study mismatch). pass@1 (mean over the task's benchmarks; airline: every sample) and the optimizer steps
    each arm took per training step, from its records."""
    mu, tr, mm = (res.studies.get(s) for s in ("matched_updates", "turn_rows", "mismatch"))
    if mu is None and tr is None and mm is None:
        return []
    rows, disp, seen = [], [], set()

    def add(control: str, task: str, arm: str, method: str, psi: str, scope: str = MAIN, variant: str = "") -> None:
        if (control, task, arm) in seen:
            return
        seen.add((control, task, arm))
        p1 = (res.eval_by_seed(task, method, "overall", "pass@1", scope, variant) if task == "airline"
              else res.eval_macro_by_seed([task], method, "pass@1", scope, variant))
        steps = optimizer_steps_by_seed(res, task, method, scope, variant)
        keys = {"control": control, "task": task, "arm": arm, "method": method, "psi": psi, "scope": scope,
                "variant": variant}
        rows.append(cell(keys, "pass@1", "fraction", p1))
        rows.append(cell(keys, "optimizer_steps_per_step", "steps", steps))
        disp.append({"control": control, "task": task, "arm": arm, "psi": psi, "pass@1 (%)": ms(p1, 100),
                     "optimizer steps / training step": ms(steps, 1, 2), "n seeds": len(p1)})

    def main_psi(task: str, method: str) -> str:
        return str(res.main_setting(method, task, "psi") or ((res.cfg.get("env") or {}).get(task) or {}).get("psi"))
    a, m_, b = "A: matched optimizer steps", "M: GRPO on its own contexts", "B: psi = full"
    if mu is not None:
        for variant, task, m in mu.cells:
            add(a, task, "RTPO", "rtpo", main_psi(task, "rtpo"))
            add(a, task, method_label(m), m, main_psi(task, m))
            add(a, task, f"{method_label(m)}-K ({variant})", m, main_psi(task, m), mu.name, variant)
    if tr is not None:
        for variant, task, m in tr.cells:
            add(m_, task, "RTPO", "rtpo", main_psi(task, "rtpo"))
            add(m_, task, method_label(m), m, main_psi(task, m))
            add(m_, task, f"{method_label(m)}-turn ({variant})", m, main_psi(task, m), tr.name, variant)
    if mm is not None:
        v = mm.variants[0]
        for m in mm.methods:
            add(b, mm.task, method_label(m), m, main_psi(mm.task, m))
            add(b, mm.task, f"{method_label(m)} [{v.value}]", m, str(v.value), mm.name, v.name)
    studies = [st for st in (mu, tr, mm) if st is not None]
    notes = ["Controls of this artifact, not the paper's (docs/design-controls.md 1-2; ledger rows C.A-*, C.M-*"
             + (", C.B-*" if mm is not None else "") + "). A: a flat method-K is that method with its own rollouts of "
             "each training step cut by prompt into K mini-batches, one optimizer step each (train.mini_batches = K, "
             "verl's ppo_mini_batch_size meaning), K = RTPO's realised stage count on the task. M: GRPO-turn is GRPO "
             "with one training row per turn, (c_k, turn k), scored under the context it was sampled from "
             "(method.grpo.train_rows = turn): GRPO's chains and advantages without the rollout–training mismatch."
             + (" B: the methods under psi = full, where the flat methods sample and train on the same context."
                if mm is not None else ""),
             "pass@1 in % (mean over the task's benchmarks per seed; airline: over every sample); optimizer steps per "
             "training step from the runs' records (the rise of train_version per step). Unmarked arms are the main "
             "grid's runs (" + seed_phrase(res.cfg) + "); the control arms run "
             + "; ".join(f"{st.name}: {seed_phrase(res.cfg, st.name)}" for st in studies)
             + " (the n column gives each arm's count).", seeds_note(res, studies[0].name)]
    title = "Controls: flat methods with RTPO's optimizer steps; GRPO on its own contexts" + (
        "; RTPO and GRPO under psi = full" if mm is not None else "")
    return [Table("table_controls", title, pd.DataFrame(rows), pd.DataFrame(disp), notes)]
