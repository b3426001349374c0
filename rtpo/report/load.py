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
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pandas as pd

from rtpo.experiment import MAIN, Experiment, RunKey, Study
from rtpo.run_record import RUN_FILE, read_record

STEP_REQUIRED = ("step",)
# JSONL fields that must be numbers (or null); nested dicts tokens/time/trunks are all numeric.
# Unknown string fields (e.g. "psi") are kept as strings.
STEP_NUMERIC = ("step", "seed", "reward_mean", "success_rate", "heldout_success", "heldout_reward", "context_overflow", "ratio_mean", "kl_rollout_train", "zero_adv_frac",
                "geo_ratio", "abs_dlogp", "clip_share",
                "trained_tokens", "generated_tokens", "rollouts_per_prompt", "tool_calls", "tool_errors", "syncs", "loss", "grad_norm",
                "lr", "weight_version", "train_version")
STEP_NUMERIC_DICTS = ("tokens", "time", "trunks")
EVAL_REQUIRED = ("task", "method", "seed", "k", "benchmarks", "overall")
THEORY_COLUMNS = ("check", "paper_claim", "quantity", "closed_form", "monte_carlo", "tolerance", "holds", "note")


def ablation_studies(cfg: dict[str, Any]) -> dict[str, Study]:
    """The studies of the config's `ablations` section (their task, methods and variants), in study order."""
    return Experiment(cfg).studies


def report_keys(cfg: dict[str, Any]) -> list[RunKey]:
    """The runs the report reads: the experiment's main grid and ablation arms (the sweep has its own report)."""
    return [r.key for r in Experiment(cfg).report_runs()]


# ------------------------------------------------------------------------------------------------
# readers
# ------------------------------------------------------------------------------------------------

def _num(x: Any, name: str | None = None) -> float:
    """JSON scalar -> float (None -> nan: not measured); bools count as 0/1. A value that is not a
    number raises TypeError; a non-finite one (NaN / Infinity, a number beyond a float's range: the
    writers put null for "not measured") raises ValueError, either naming the field `name`."""
    if x is None:
        return math.nan
    if isinstance(x, (bool, int, float)):
        try:
            v = float(x)
        except OverflowError:
            v = math.inf
        if not math.isfinite(v):
            raise ValueError(f"field {name!r} is not finite: {_short(x)}" if name else f"not finite: {_short(x)}")
        return v
    raise TypeError(f"field {name!r} is not a number: {_short(x)}" if name else f"not a number: {_short(x)}")


def flatten_step(rec: dict[str, Any]) -> dict[str, Any]:
    """One JSONL record -> flat scalars. Nested dicts become `parent_child`; `turns` is kept as
    its count (`turns_n`) because per-turn lists do not fit one row; the per-turn `mismatch` records become
    `mismatch_k<k>_<field>` (e.g. mismatch_k2_geo_ratio); any other list of numbers
    (one value per stage, e.g. RTPO kl:tau's `sync_kl`) as its largest value (`sync_kl_max`, nan
    when empty). A value that should be a number and is not raises TypeError, one that is not finite
    ValueError, naming the field."""
    flat: dict[str, Any] = {}
    for key, val in rec.items():
        if key == "turns":
            if val is not None and not isinstance(val, list):
                raise TypeError(f"field 'turns' is not a list: {_short(val)}")
            flat["turns_n"] = float(len(val or []))
        elif key == "mismatch":   # per turn index k: {"k", "tokens", "geo_ratio", ...} -> mismatch_k<k>_<field>
            if val is not None and not isinstance(val, list):
                raise TypeError(f"field 'mismatch' is not a list of per-turn records: {_short(val)}")
            for d in val or []:
                if not isinstance(d, dict) or not isinstance(d.get("k"), int) or isinstance(d["k"], bool):
                    raise TypeError(f"field 'mismatch' is not a list of per-turn records: {_short(val)}")
                for sub, v in d.items():
                    if sub != "k":
                        flat[f"mismatch_k{d['k']}_{sub}"] = _num(v, f"mismatch[k={d['k']}].{sub}")
        elif key in STEP_NUMERIC_DICTS and val is not None and not isinstance(val, dict):
            raise TypeError(f"field {key!r} is not an object of numbers: {_short(val)}")
        elif isinstance(val, list):
            vals = []
            for i, v in enumerate(val):
                try:
                    vals.append(_num(v, f"{key}[{i}]"))
                except TypeError:
                    raise TypeError(f"field {key!r} is not a list of numbers: {_short(val)}") from None
            flat[f"{key}_max"] = max(vals) if vals else math.nan
        elif isinstance(val, dict):
            for sub, v in val.items():
                if isinstance(v, str) and key not in STEP_NUMERIC_DICTS:
                    flat[f"{key}_{sub}"] = v
                else:
                    flat[f"{key}_{sub}"] = _num(v, f"{key}.{sub}")
        elif isinstance(val, str) and key not in STEP_NUMERIC:
            flat[key] = val
        else:
            flat[key] = _num(val, key)
    tok = rec.get("tokens") or {}
    total = float(sum(_num(v, f"tokens.{k}") for k, v in tok.items() if v is not None))
    if not math.isfinite(total):
        raise ValueError(f"field 'tokens' sums to a non-finite total: {_short(tok)}")
    flat["tokens_total"] = total
    return flat


# a step is a whole number a float holds exactly (the tables cast it to int64)
MAX_STEP = 2 ** 53


def read_metrics_jsonl(path: Path, expect: RunKey | None = None) -> list[dict[str, Any]]:
    """Read one metrics.jsonl; a bad line raises ValueError naming `path:line` and the field: a line
    that is not UTF-8, over rtpo.inputs.MAX_ROW_BYTES, not a JSON object, a value that should be a
    number and is not or is not finite (NaN, Infinity: the writers put null for "not measured"), a
    step that is not a whole number >= 0, or that repeats or goes back (a run's records have strictly
    increasing steps: a resumed run drops the records after its checkpoint before it appends)."""
    from rtpo.inputs import jsonl_lines, loads, nonfinite

    path = Path(path)
    rows = []
    first: dict[int, int] = {}   # step -> line
    prev: tuple[int, int] | None = None   # (step, line) of the previous record
    for i, line in jsonl_lines(path):
        where = f"{path}:{i}"
        try:
            rec = loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{where}: not valid JSON ({e.msg})") from e
        except ValueError as e:
            raise ValueError(f"{where}: not valid JSON ({e})") from None
        if not isinstance(rec, dict):
            raise ValueError(f"{where}: a record must be a JSON object")
        bad = nonfinite(rec)   # NaN / Infinity tokens, 1e999: anywhere in the record, `turns` included
        if bad:
            raise ValueError(f"{where}: field {bad[0]!r} is not finite: {bad[1]!r} (step {_short(rec.get('step'))}; "
                             "the writers put null for a value not measured)")
        for key in STEP_REQUIRED:
            if key not in rec:
                raise ValueError(f"{where}: missing field {key!r}")
        if expect is not None:
            for key in ("task", "method", "seed"):
                if key in rec and rec[key] != getattr(expect, key):
                    raise ValueError(f"{where}: field {key!r} is {_short(rec[key])} but the path says "
                                     f"{getattr(expect, key)!r}")
        step = rec["step"]
        if isinstance(step, float) and step.is_integer():
            step = int(step)
        if not (isinstance(step, int) and not isinstance(step, bool) and 0 <= step < MAX_STEP):
            raise ValueError(f"{where}: field 'step' must be a whole number >= 0, got {_short(rec['step'])}")
        try:
            flat = flatten_step(rec)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{where}: {e}") from None
        if step in first:
            raise ValueError(f"{where}: field 'step': step {step} is duplicated (first at line {first[step]})")
        if prev is not None and step < prev[0]:
            raise ValueError(f"{where}: field 'step': step {step} is out of order (line {prev[1]} has step "
                             f"{prev[0]}; steps must increase)")
        first[step] = i
        prev = (step, i)
        flat["source"] = where
        rows.append(flat)
    return rows


def _read_eval_doc(path: Path) -> dict[str, Any]:
    """An eval JSON's top-level object (rtpo.inputs.read_json: strict UTF-8, no NaN tokens); errors
    (ValueError) name the file."""
    from rtpo.inputs import read_json

    doc = read_json(path)
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: the top level must be a JSON object (an eval JSON), got "
                         f"{type(doc).__name__} {_short(doc)}")
    return doc


def _short(v: Any, n: int = 60) -> str:
    r = repr(v)
    return r if len(r) <= n else r[:n] + "..."


def read_eval_json(path: Path, expect: RunKey | None = None) -> list[dict[str, Any]]:
    """Read one eval JSON into rows (one per benchmark plus "overall"); errors (ValueError) name the
    file and field: a file that is not UTF-8 or JSON, a top level that is not an object, `k` that is
    not a whole number >= 1, `benchmarks` / `overall` that are not objects, a metric that is not a
    number or not finite (null is kept as "not measured")."""
    path = Path(path)
    doc = _read_eval_doc(path)
    for key in EVAL_REQUIRED:
        if key not in doc:
            raise ValueError(f"{path}: missing field {key!r}")
    if expect is not None:
        for key in ("task", "method", "seed"):
            if doc[key] != getattr(expect, key):
                raise ValueError(f"{path}: field {key!r} is {_short(doc[key])} but the path says "
                                 f"{getattr(expect, key)!r}")
    k = doc["k"]
    if isinstance(k, float) and k.is_integer():
        k = int(k)
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ValueError(f"{path}: field 'k' must be a whole number >= 1, got {_short(doc['k'])}")
    if not isinstance(doc["benchmarks"], dict) or not doc["benchmarks"]:
        raise ValueError(f"{path}: field 'benchmarks' must be a non-empty object, got {_short(doc['benchmarks'])}")
    rows = []
    for bench, name, metrics in [*((b, f"benchmarks.{b}", m) for b, m in doc["benchmarks"].items()),
                                 ("overall", "overall", doc["overall"])]:
        if not isinstance(metrics, dict):
            raise ValueError(f"{path}: field '{name}' must be an object of metrics, got {_short(metrics)}")
        if "pass@1" not in metrics:
            raise ValueError(f"{path}: {name} lacks 'pass@1'")
        row: dict[str, Any] = {"benchmark": bench, "k": k, "source": str(path)}
        for key, val in metrics.items():
            try:
                row[key] = _num(val)
            except TypeError:
                raise ValueError(f"{path}: {name}.{key} is not a number: {_short(val)}") from None
            except ValueError:
                raise ValueError(f"{path}: {name}.{key} is not finite: {_short(val)}") from None
            check_range(path, f"{name}.{key}", key, row[key])
        row["pass@k"] = row.get(f"pass@{k}", math.nan)
        rows.append(row)
    return rows


# every eval metric is a count or a mean of counts (>= 0) but the reward, whose sign is the task's; these are
# also fractions (<= 1): pass@k, hit / em / f1, and every *_rate
FRACTIONS = ("hit", "em", "f1", "exact_match", "accuracy", "success")
SIGNED = ("reward",)


def check_range(path: Path, name: str, key: str, v: float) -> None:
    """ValueError naming the file and the key when eval metric `key` is out of its range (NaN = not measured)."""
    if math.isnan(v) or key in SIGNED:
        return
    fraction = key.startswith("pass@") or key.endswith("_rate") or key in FRACTIONS
    if v < 0 or (fraction and v > 1):
        raise ValueError(f"{path}: {name} is {v:g}, outside [0, {'1' if fraction else 'inf'})"
                         f"{' (a fraction)' if fraction else ' (a count)'}")


def read_eval_problems(path: Path) -> list[dict[str, Any]]:
    """The eval JSON's `per_problem` list as rows (benchmark, problem, successes, samples, p = successes /
    samples); [] when the file has none (eval JSONs written before it existed). Errors name the entry."""
    path = Path(path)
    doc = _read_eval_doc(path)
    items = doc.get("per_problem")
    if items is None:
        return []
    if not isinstance(items, list):
        raise ValueError(f"{path}: field 'per_problem' must be a list")
    rows = []
    for i, d in enumerate(items):
        where = f"{path}: per_problem[{i}]"
        if not isinstance(d, dict) or not {"id", "benchmark", "successes", "samples"} <= set(d):
            raise ValueError(f"{where} needs id, benchmark, successes and samples")
        n, c = d["samples"], d["successes"]
        if not (isinstance(n, int) and isinstance(c, int) and not isinstance(n, bool) and not isinstance(c, bool)
                and n >= 1 and 0 <= c <= n):
            raise ValueError(f"{where}: successes {_short(c)} / samples {_short(n)} must be whole numbers, "
                             "0 <= successes <= samples, samples >= 1")
        rows.append({"benchmark": str(d["benchmark"]), "problem": str(d["id"]), "successes": c, "samples": n,
                     "p": c / n})
    return rows


def read_theory(path: Path) -> pd.DataFrame:
    try:
        df = pd.read_csv(path, encoding="utf-8", encoding_errors="strict")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 ({e.reason} at byte offset {e.start})") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        raise ValueError(f"{path}: not a readable CSV ({e})") from None
    missing = [c for c in THEORY_COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"{path}: missing columns {missing}")
    df["holds"] = df["holds"].map(lambda v: str(v).strip().lower() in ("true", "1", "yes"))
    return df


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
    # task -> {benchmark: reason} the data job left out (results/data/<task>/not_run.json, e.g. the
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


def load_results(results: str | Path, cfg: dict[str, Any]) -> Results:
    """Read every file the config asks for under `results`; absent ones go to `Results.missing`."""
    root = Path(results)
    step_rows: list[dict[str, Any]] = []
    eval_rows: list[dict[str, Any]] = []
    problem_rows: list[dict[str, Any]] = []
    inputs: list[dict[str, Any]] = []
    missing: list[str] = []
    records: dict[RunKey, dict[str, Any]] = {}
    for key in report_keys(cfg):
        tag = {"scope": key.scope, "variant": key.variant, "task": key.task, "method": key.method, "seed": key.seed}
        rdir = Path(key.run_dir(str(root)))
        mpath = rdir / "metrics.jsonl"
        recs = read_metrics_jsonl(mpath, key) if mpath.exists() else None
        rec = check_run(rdir, key, None if recs is None else len(recs))
        if rec is not None:
            records[key] = rec
        elif (rdir / "summary.json").exists():
            missing.append(str(rdir / RUN_FILE))
        if recs is not None:
            step_rows += [{**r, **tag} for r in recs]
            inputs.append({"kind": "metrics", **tag, "path": str(mpath), "records": len(recs)})
        elif training_steps(cfg, key.method, key.task) > 0:  # steps: 0 (vanilla) writes no records
            missing.append(str(mpath))
        epath = Path(key.eval_file(str(root)))
        if epath.exists():
            recs = read_eval_json(epath, key)
            eval_rows += [{**r, **tag} for r in recs]
            problem_rows += [{**r, **tag} for r in read_eval_problems(epath)]
            inputs.append({"kind": "eval", **tag, "path": str(epath), "records": len(recs)})
        else:
            missing.append(str(epath))
    theory = None
    tpath = root / "theory" / "theory_checks.csv"
    if tpath.exists():
        theory = read_theory(tpath)
        inputs.append({"kind": "theory", "scope": "theory", "variant": "", "task": "", "method": "", "seed": -1,
                       "path": str(tpath), "records": len(theory)})
    else:
        missing.append(str(tpath))
    steps = pd.DataFrame(step_rows)
    evals = pd.DataFrame(eval_rows)
    problems = pd.DataFrame(problem_rows)
    for df in (steps, evals, problems):
        if not df.empty:
            df["seed"] = df["seed"].astype(int)
    if not steps.empty:
        steps["step"] = steps["step"].astype(int)
    return Results(root, cfg, steps, evals, theory, ablation_studies(cfg), inputs, missing, problems,
                   not_run=read_not_run(root, cfg), records=records)


def check_run(run_dir: Path, key: RunKey, n_records: int | None = None) -> dict[str, Any] | None:
    """The run record (run.json) of the run `key` in `run_dir`, checked against what the report reads; None
    when the run has none. Refused (ValueError naming the file): a record of another run than its path says,
    and a short run: one whose metrics.jsonl holds fewer step records than run.json says it completed, or
    that completed fewer steps than it planned (a finished run's summary would hide the missing steps).
    n_records: the records of its metrics.jsonl (counted here when None)."""
    path = Path(run_dir) / RUN_FILE
    rec = read_record(run_dir)
    if rec is None:
        return None
    if rec["key"] != key.as_dict():
        raise ValueError(f"{path}: field 'key' is {_short(rec['key'], 200)}, but the path says {key.as_dict()}")
    done, planned = rec["steps"]["completed"], rec["steps"]["planned"]
    if n_records is None:
        mpath = Path(run_dir) / "metrics.jsonl"
        n_records = len(read_metrics_jsonl(mpath, key)) if mpath.exists() else 0
    if n_records < done:
        raise ValueError(f"{Path(run_dir) / 'metrics.jsonl'}: holds {n_records} step records, but {path} says "
                         f"{done} steps were completed: records are missing; rerun the run")
    if done < planned:
        raise ValueError(f"{path}: the run completed {done} of its {planned} steps (a short run); rerun it")
    return rec


def read_not_run(root: Path, cfg: dict[str, Any]) -> dict[str, dict[str, str]]:
    """{task: {benchmark: reason}} from results/data/<task>/not_run.json (paper scale only)."""
    out = {}
    for t in cfg.get("tasks", []):
        p = root / "data" / t / "not_run.json"
        if p.exists():
            from rtpo.inputs import read_json

            doc = read_json(p)
            benches = doc.get("benchmarks") or {} if isinstance(doc, dict) else None
            if not isinstance(benches, dict):
                raise ValueError(f"{p}: expected an object whose field 'benchmarks' maps benchmark -> reason")
            if benches:
                out[t] = {str(b): str(why) for b, why in benches.items()}
    return out
