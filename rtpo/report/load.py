"""Find and read the files the DAG wrote, as two tidy tables (docs/ARCHITECTURE.md has the schemas).

What to read is the config's experiment (rtpo.experiment, the runs the DAG writes): the main grid and
every ablation arm over its study's seeds (`report_keys`). The layout and the variant names are
rtpo.experiment's docstring; the theory checks are results/theory/theory_checks.csv (`rtpo theory`).

`load_results(results_dir, cfg)` returns a `Results` with
  steps  one row per (scope, variant, task, method, seed, step): the JSONL scalars, flattened
         (`tokens.trunk` -> `tokens_trunk`, `time.total` -> `time_total`, `trunks.n` -> `trunks_n`),
         plus `tokens_total` (sum over kinds) and `source` ("path:line");
  evals  one row per (scope, variant, task, method, seed, benchmark) with the eval metrics
         (`benchmark` == "overall" is the eval JSON's pooled `overall`), `k`, a `pass@k` column
         (= the JSON's `pass@{k}`), and `source` (the path);
  problems one row per (scope, variant, task, method, seed, benchmark, problem) from the eval JSON's
         `per_problem` (successes of that problem over its samples; empty for eval JSONs without it);
  theory theory_checks.csv as a DataFrame (None if absent);
  missing the expected files that were absent (the tables leave those cells out and say so).
Scope is "main" for the main runs and the study name for ablations; variant is "" for main runs.

Each file is read and checked by rtpo.report.read (one schema per kind of file, and what a schema cannot
say: a run's records are the steps its run.json says it completed, an eval JSON agrees with itself); here,
which files are read, and that every eval JSON of a task reports the same benchmarks (`check_benchmarks`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd

from rtpo.experiment import MAIN, Experiment, RunKey, Study
from rtpo.report.read import check_run, read_eval, read_metrics_jsonl, read_not_run, read_theory
from rtpo.run_record import RUN_FILE


def ablation_studies(cfg: dict[str, Any]) -> dict[str, Study]:
    """The studies of the config's `ablations` section (their task, methods and variants), in study order."""
    return Experiment(cfg).studies


def report_keys(cfg: dict[str, Any]) -> list[RunKey]:
    """The runs the report reads: the experiment's main grid and ablation arms (the sweep has its own report)."""
    return [r.key for r in Experiment(cfg).report_runs()]


# ------------------------------------------------------------------------------------------------
# the loaded results
# ------------------------------------------------------------------------------------------------

@dataclass
class Results:
    """Everything the report reads, as tidy DataFrames (see the module docstring)."""

    root: Path
    cfg: dict[str, Any]
    steps: pd.DataFrame
    evals: pd.DataFrame
    theory: pd.DataFrame | None
    studies: dict[str, Study]
    inputs: list[dict[str, Any]] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    problems: pd.DataFrame = field(default_factory=pd.DataFrame)
    # task -> {benchmark: reason} the data job left out (results/data/<task>/not_run.json) or an evaluation's
    # web-search probe did (its eval JSON's not_run, the reason naming the file), e.g. the
    # deep-search benchmarks without a web-search key, rtpo/data/paper.py); tables mark them "not run"
    not_run: dict[str, dict[str, str]] = field(default_factory=dict)
    # each run's run.json (rtpo.run_record): what it trained with and the run it copies
    records: dict[RunKey, dict[str, Any]] = field(default_factory=dict)

    # ---- selections --------------------------------------------------------------------------
    def __post_init__(self) -> None:
        # the report asks for the same small slices thousands of times: index them once
        self._step_idx = _index(self.steps, ["scope", "variant", "task", "method"])
        self._eval_idx = _index(self.evals, ["scope", "variant", "task", "method", "benchmark"])
        self._eval_run_idx = _index(self.evals, ["scope", "variant", "task", "method"])
        self._problem_idx = _index(self.problems, ["scope", "variant", "task", "method"])

    def run_settings(self, task: str, method: str, scope: str = MAIN, variant: str = "") -> dict[str, Any] | None:
        """The effective settings the runs of (scope, variant, task, method) trained with, from their run.json
        (None when none was read); every seed's are the same (rtpo.experiment)."""
        for key, rec in self.records.items():
            if (key.scope, key.variant, key.task, key.method) == (scope, variant, task, method):
                return rec["settings"]
        return None

    def main_setting(self, method: str, task: str, key: str) -> Any:
        """The main grid's method.<method>.<key> on `task` as its runs trained with it (run.json; None when
        the runs or the option are absent)."""
        s = self.run_settings(task, method)
        return None if s is None else (s.get("method") or {}).get(key)

    def copies_main(self, scope: str, variant: str, task: str, method: str) -> bool:
        """Whether the runs of this ablation arm are copies of main runs (their run.json `copy_of`)."""
        return any(rec.get("copy_of") is not None for key, rec in self.records.items()
                   if (key.scope, key.variant, key.task, key.method) == (scope, variant, task, method))

    def online_column(self, task: str, scope: str = MAIN, variant: str = "") -> str:
        """The step column that measures online success on `task`: `heldout_success` (a fixed held-out
        batch, train.heldout_prompts > 0) where the runs recorded it, else `success_rate` (each step's
        own training prompts: their difficulty changes from step to step, the policy's change does not
        show alone)."""
        df = self.step_rows(scope, variant, task)
        if not df.empty and "heldout_success" in df.columns and df["heldout_success"].notna().any():
            return "heldout_success"
        return "success_rate"

    def step_rows(self, scope: str = MAIN, variant: str = "", task: str | None = None,
                  method: str | None = None) -> pd.DataFrame:
        """The JSONL rows of one (scope, variant[, task[, method]]) slice (empty DataFrame if none)."""
        df = self.steps
        if df.empty:
            return df
        if task is not None and method is not None:
            return self._step_idx.get((scope, variant, task, method), df.iloc[0:0])
        m = (df.scope == scope) & (df.variant == variant)
        if task is not None:
            m &= df.task == task
        if method is not None:
            m &= df.method == method
        return df[m]

    def eval_rows(self, scope: str = MAIN, variant: str = "", task: str | None = None,
                  method: str | None = None, benchmark: str | None = None) -> pd.DataFrame:
        """The eval rows of one slice; benchmark "overall" is the eval JSON's pooled `overall`."""
        df = self.evals
        if df.empty:
            return df
        if task is not None and method is not None:
            if benchmark is not None:
                return self._eval_idx.get((scope, variant, task, method, benchmark), df.iloc[0:0])
            return self._eval_run_idx.get((scope, variant, task, method), df.iloc[0:0])
        m = (df.scope == scope) & (df.variant == variant)
        if task is not None:
            m &= df.task == task
        if method is not None:
            m &= df.method == method
        if benchmark is not None:
            m &= df.benchmark == benchmark
        return df[m]

    def problem_cells(self, tasks: Iterable[str], method: str, scope: str = MAIN, variant: str = "",
                      benchmark: str | None = None) -> dict[int, dict[str, dict[str, float]]]:
        """{seed: {benchmark: {problem id: pass@1 of that problem (successes / samples)}}} over the
        benchmarks of `tasks` (or just `benchmark`); {} without per-problem records."""
        out: dict[int, dict[str, dict[str, float]]] = {}
        for task in tasks:
            df = self._problem_idx.get((scope, variant, task, method))
            if df is None:
                continue
            if benchmark is not None:
                df = df[df.benchmark == benchmark]
            for seed, b, pid, p in zip(df.seed, df.benchmark, df.problem, df.p):
                out.setdefault(int(seed), {}).setdefault(b, {})[pid] = float(p)
        return out

    # ---- per-seed values (the unit every mean, std and CI is computed over) ------------------
    def eval_by_seed(self, task: str, method: str, benchmark: str, metric: str,
                     scope: str = MAIN, variant: str = "") -> dict[int, float]:
        """{seed: value} of one eval metric; NaN values are left out."""
        df = self.eval_rows(scope, variant, task, method, benchmark)
        if df.empty or metric not in df.columns:
            return {}
        return {int(s): float(v) for s, v in zip(df.seed, df[metric]) if not _isnan(v)}

    def eval_macro_by_seed(self, tasks: Iterable[str], method: str, metric: str,
                           scope: str = MAIN, variant: str = "") -> dict[int, float]:
        """{seed: mean over the benchmarks of `tasks` (not "overall")} — the paper's "average over
        benchmarks" (Table 1). A seed missing any benchmark of these tasks is left out."""
        df = self.evals
        if df.empty or metric not in df.columns:
            return {}
        df = df[(df.scope == scope) & (df.variant == variant) & df.task.isin(list(tasks))
                & (df.method == method) & (df.benchmark != "overall")]
        if df.empty:
            return {}
        expected = df.groupby("seed").benchmark.nunique().max()
        out = {}
        for seed, g in df.groupby("seed"):
            vals = g[metric].astype(float)
            if g.benchmark.nunique() == expected and not vals.isna().any():
                out[int(seed)] = float(vals.mean())
        return out

    def steps_by_seed(self, task: str, method: str, column: str, reduce: str = "mean",
                      scope: str = MAIN, variant: str = "", window: tuple[float, float] = (0.0, 1.0)
                      ) -> dict[int, float]:
        """{seed: reduction over training steps of one JSONL column}.

        reduce: "mean" (NaN-skipping), "sum", "std" (ddof=1), "last".
        window: the fraction of the run's steps to use, e.g. (0.8, 1.0) = the last fifth; steps are
        picked by rank, always at least one step when the run has any.
        """
        df = self.step_rows(scope, variant, task, method)
        if df.empty or column not in df.columns:
            return {}
        out = {}
        for seed, g in df.groupby("seed"):
            g = select_window(g.sort_values("step"), window)
            vals = g[column].astype(float)
            vals = vals[~vals.isna()]
            if vals.empty:
                continue
            if reduce == "mean":
                v = vals.mean()
            elif reduce == "sum":
                v = vals.sum()
            elif reduce == "std":
                v = vals.std(ddof=1) if len(vals) > 1 else math.nan
            elif reduce == "last":
                v = vals.iloc[-1]
            else:
                raise ValueError(f"unknown reduce {reduce!r}")
            if not _isnan(v):
                out[int(seed)] = float(v)
        return out

    def benchmarks(self, task: str, scope: str = MAIN, variant: str = "") -> list[str]:
        """The task's benchmark names in difficulty order (easy, medium, hard, then the rest by name)."""
        df = self.eval_rows(scope, variant, task)
        if df.empty:
            return []
        return sort_benchmarks(b for b in df.benchmark.unique() if b != "overall")

    def eval_k(self) -> int:
        if not self.evals.empty:
            return int(self.evals.k.max())
        return int((self.cfg.get("eval") or {}).get("samples", 1))


TIER_ORDER = {"easy": 0, "medium": 1, "hard": 2}


def sort_benchmarks(names: Iterable[str]) -> list[str]:
    def key(b: str):
        tier = b.rsplit("-", 1)[-1]
        return (b.rsplit("-", 1)[0] if tier in TIER_ORDER else b, TIER_ORDER.get(tier, 9), b)
    return sorted(set(names), key=key)


def benchmark_label(b: str) -> str:
    """Short display name: "embedded-math-hard" -> "math-hard"; real benchmark names unchanged."""
    return b[len("embedded-"):] if b.startswith("embedded-") else b


def select_window(g: pd.DataFrame, window: tuple[float, float]) -> pd.DataFrame:
    """Rows of one run (sorted by step) whose rank falls in the fraction `window` of the run."""
    lo, hi = window
    if (lo, hi) == (0.0, 1.0):
        return g
    n = len(g)
    if n == 0:
        return g
    # the same rounding for every boundary, so adjacent windows do not overlap
    i0 = min(int(math.floor(lo * n + 0.5)), n - 1)
    i1 = max(int(math.floor(hi * n + 0.5)), i0 + 1)
    return g.iloc[i0:i1]


def _index(df: pd.DataFrame, keys: list[str]) -> dict[tuple, pd.DataFrame]:
    if df.empty:
        return {}
    return {k: g for k, g in df.groupby(keys, sort=False)}


def _isnan(v: Any) -> bool:
    try:
        return v is None or bool(np.isnan(v))
    except TypeError:
        return False


def training_steps(cfg: dict[str, Any], method: str, task: str) -> int:
    """The run's `train.steps` after its method section's override and that section's per_task.<task>
    override (vanilla: 0 = evaluated as is). Only for telling whether an absent metrics.jsonl is expected:
    where a run left its run.json, the report reads the steps from there (Results.run_settings)."""
    m = dict((cfg.get("method") or {}).get(method) or {})
    m.update(((m.pop("per_task", None) or {}).get(task)) or {})
    return int(m.get("steps", (cfg.get("train") or {}).get("steps", 1)))


def load_results(results: str | Path, cfg: dict[str, Any], keys: list[RunKey] | None = None,
                 studies: dict[str, Study] | None = None) -> Results:
    """Read every file the config asks for under `results`; absent ones go to `Results.missing`. `keys` and
    `studies`: the runs and studies to read when not the paper's report's (the sweep's report reads the studies
    of its target with the main runs they pair with: Experiment.sweep_study_runs); the theory checks are read
    with the paper's report's runs only."""
    root = Path(results)
    step_rows: list[dict[str, Any]] = []
    eval_rows: list[dict[str, Any]] = []
    problem_rows: list[dict[str, Any]] = []
    inputs: list[dict[str, Any]] = []
    missing: list[str] = []
    records: dict[RunKey, dict[str, Any]] = {}
    eval_not_run: dict[str, dict[str, str]] = {}
    for key in report_keys(cfg) if keys is None else keys:
        tag = {"scope": key.scope, "variant": key.variant, "task": key.task, "method": key.method, "seed": key.seed}
        rdir = Path(key.run_dir(str(root)))
        mpath = rdir / "metrics.jsonl"
        recs = read_metrics_jsonl(mpath, key) if mpath.exists() else None
        rec = check_run(rdir, key, recs)   # run.json, and the records it says the run completed
        if rec is not None:
            records[key] = rec
        elif (rdir / "summary.json").exists():
            missing.append(str(rdir / RUN_FILE))
        if recs is not None:
            step_rows += [{**r, **tag} for r in recs]
            inputs.append({"kind": "metrics", **tag, "path": str(mpath), "records": len(recs)})
        elif rec is None and training_steps(cfg, key.method, key.task) > 0:  # steps: 0 (vanilla) writes no records
            missing.append(str(mpath))
        epath = Path(key.eval_file(str(root)))
        if epath.exists():
            recs, problems, left_out = read_eval(epath, key)
            for bench, why in left_out.items():  # its web-search probe failed: "not run", never scored
                eval_not_run.setdefault(key.task, {}).setdefault(bench, f"{why} ({epath})")
            eval_rows += [{**r, **tag} for r in recs]
            problem_rows += [{**r, **tag} for r in problems]
            inputs.append({"kind": "eval", **tag, "path": str(epath), "records": len(recs)})
        else:
            missing.append(str(epath))
    check_benchmarks(eval_rows)
    theory = None
    tpath = root / "theory" / "theory_checks.csv"
    if keys is None and tpath.exists():
        theory = read_theory(tpath)
        inputs.append({"kind": "theory", "scope": "theory", "variant": "", "task": "", "method": "", "seed": -1,
                       "path": str(tpath), "records": len(theory)})
    elif keys is None:
        missing.append(str(tpath))
    steps = pd.DataFrame(step_rows)
    evals = pd.DataFrame(eval_rows)
    problems = pd.DataFrame(problem_rows)
    for df in (steps, evals, problems):
        if not df.empty:
            df["seed"] = df["seed"].astype(int)
    if not steps.empty:
        steps["step"] = steps["step"].astype(int)
    not_run = read_not_run(root, cfg)  # left out by the data job (results/data/<task>/not_run.json) ...
    for task, benches in eval_not_run.items():  # ... or by an evaluation whose probe failed (its eval JSON)
        for bench, why in benches.items():
            not_run.setdefault(task, {}).setdefault(bench, why)
    return Results(root, cfg, steps, evals, theory, ablation_studies(cfg) if studies is None else studies,
                   inputs, missing, problems,
                   not_run=not_run, records=records)


def check_benchmarks(eval_rows: list[dict[str, Any]]) -> None:
    """Every eval JSON of a task reports the same benchmarks (its task's eval split: those of the data job,
    less those it left out for every run, not_run.json): one that lacks a benchmark the task's others have
    would leave an empty cell without a word. ValueError naming the file and the benchmark."""
    by_file: dict[str, tuple[str, set[str]]] = {}
    for r in eval_rows:
        if r["benchmark"] != "overall":
            by_file.setdefault(r["source"], (r["task"], set()))[1].add(r["benchmark"])
    every: dict[str, set[str]] = {}
    for task, benches in by_file.values():
        every.setdefault(task, set()).update(benches)
    for path, (task, benches) in by_file.items():
        lacking = sorted(every[task] - benches)
        if lacking:
            others = sum(1 for t, b in by_file.values() if t == task and lacking[0] in b)
            raise ValueError(f"{path}: no benchmark {lacking[0]!r}, which {others} other eval JSON(s) of task {task!r} "
                             f"report{' (also missing: ' + ', '.join(lacking[1:]) + ')' if lacking[1:] else ''}: its "
                             "table cells would be empty; rerun this evaluation")
