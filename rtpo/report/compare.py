"""`rtpo report compare`: a run's tables against reference tables, within the run's own uncertainty.

    rtpo report compare --reference reference/cpu-default results/tables

Why: two runs of the DAG on one machine write the same non-timing tables byte for byte, but another
CPU (AVX2 against AVX-512 MKL kernels, another thread count) rounds floats differently, a one-ulp
change in the warm start changes which tokens are sampled, and every number downstream is then a
fresh draw. This module tells that drift from a broken install: per table it says

  identical            the same CSV after parsing (same columns, rows, order and strings);
  within               the same columns and rows, and every number that differs lies within the
                       uncertainty the table itself states for that cell (or within float rounding);
  BEYOND               some number lies outside it, or a count / verdict / text changed (the line
                       names the table, the row key, the column, both values and the bound);
  STRUCTURE            columns or rows added or missing (named);
  MISSING              the table is in the reference and not in the run, or the other way round.

and a one-line verdict. Exit code (`exit_code`): 0 identical / within, 1 beyond / structure / missing,
2 bad input (a directory that does not exist or holds no tables; raised as OSError / ValueError).

Which files (`compared_files`): every `*.csv` of the tables directory except those of SKIP_FILES,
each with its reason; the `.md` / `.tex` files are the display of the same CSV (rounded), status.md
is markdown only and its numbers come from table01_main, table01_vs_vanilla, table_learning,
table_budget and claims, which are compared.

How a cell is compared (COLUMN_ROLES, one role per column name; a column without one is compared
exactly and the message says so):

  key          identifies the row (claim_id, comparison, tasks, study, variant, task, benchmark,
               method, step, metric, unit); rows are matched on their key, not their position.
  exact        counts fixed by the config (n, n_seeds, df, se_eval_df, seeds, steps, window_steps),
               the run's categorical conclusions (verdict, flag, excludes_zero, diagnosis: a changed
               verdict is BEYOND) and text (claim, rule, evidence, note, ...): must be equal; a number
               among them may differ by float rounding only (ROUNDING_REL / ROUNDING_ABS).
  uncertainty  std, ci95_lo/hi, se, se_eval, se_seeds, diff_std, diff_ci95_lo/hi, and the ledger's
               p-values (p_zero, p_effect and their _bh adjustments): the stated uncertainty; they move
               with their values and are not checked on their own (a p-value's decision is the verdict).
  bounded      a value and the stated uncertainty it is checked against (BOUNDS), the bound being
               max(the reference's, the run's):
      mean, ours_mean        the half-width of the row's 95 % t-interval over seeds (ci95_hi - ci95_lo) / 2;
                             table01_vs_vanilla's "paired by problem and seed" row: the larger of its
                             own half-width (evaluation noise, models held fixed) and that of the same
                             comparison's "paired by seed" row (another CPU retrains the models, so the
                             seed-level interval is the one a re-draw must stay within)
      diff_mean              (diff_ci95_hi - diff_ci95_lo) / 2 (table01_gains)
      values, diff_values    per seed: t(0.975, k - 1) x the seed std (std / diff_std; for claims,
                             which state no std, the CI half-width x sqrt(n), the same number): the
                             95 % range of one seed's value the table states
      rtpo_mean, baseline_mean   table01_gains: table01_main's CI half-width for that method on the
                             same tasks' "average" row (the table that states it)
      relative_gain_pct      propagated from rtpo_mean's and baseline_mean's bounds (interval
                             arithmetic on 100 (r - b) / b; unbounded when b's interval holds 0)
      task_median            table_budget: the largest CI half-width of the rows it is the median of
                             (a median moves by at most the largest move of its inputs)
      dev_from_median_pct    propagated from the row's mean and task_median bounds, as above
  A cell without a stated uncertainty (one seed: std and CI empty; a theory check) has bound 0:
  only float rounding is allowed, and the message says "no stated uncertainty".

What to expect on another CPU: every number is then a re-draw, and a 95 % bound lets a few per cent
of a re-draw's numbers out, so tables of hundreds of numbers are BEYOND by a handful. Such a line is
marked "[at chance level]" (TableResult.chance_level: every number out has a stated uncertainty, is
within CHANCE_FACTOR x its bound, and there are no more than chance_allowance(N) of them, the 99th
percentile of Binomial(N, 5 %)); the verdict counts those tables. It stays BEYOND (exit 1): only
identical / within pass. A broken install shows as STRUCTURE / MISSING, or numbers far outside.
"""

from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

import pandas as pd

from rtpo.report.stats import t975

# ------------------------------------------------------------------------------------------------
# which files
# ------------------------------------------------------------------------------------------------

SKIP_FILES: dict[str, str] = {
    "timing_*": "wall-clock numbers: depend on the machine and its load",
    "report_inputs.csv": "absolute paths of the files the report read: depend on the checkout's location",
}
"""CSV files of a tables directory that are not compared (glob pattern -> why). Files that are not CSV
(.md, .tex: the display of the same CSV; status.md: markdown only, its numbers come from CSVs compared
here; report_missing.txt: paths, and a missing input shows as missing rows) are never read."""


def skip_reason(name: str) -> str | None:
    """Why file `name` is not compared, or None when it is."""
    if not name.endswith(".csv"):
        return "not a CSV (.md / .tex are the display of the CSV; status.md and report_missing.txt: see SKIP_FILES)"
    for pat, why in SKIP_FILES.items():
        if fnmatch.fnmatch(name, pat):
            return why
    return None


def compared_files(tables_dir: str | Path) -> list[str]:
    """Names of the CSV tables of `tables_dir` that compare looks at (sorted)."""
    d = Path(tables_dir)
    return sorted(p.name for p in d.iterdir() if p.is_file() and skip_reason(p.name) is None)


# ------------------------------------------------------------------------------------------------
# what each column is
# ------------------------------------------------------------------------------------------------

KEY = "key"
EXACT = "exact"
UNCERTAINTY = "uncertainty"
BOUNDED = "bounded"
UNSTATED = "no stated uncertainty"
ROUNDING = "float rounding"
LIST = ";"  # per-seed lists: "0;1;2", "0.25;0.5;0.125"

KEY_COLUMNS = ("claim_id", "comparison", "tasks", "study", "variant", "task", "benchmark", "method", "step",
               "metric", "unit")
COLUMN_ROLES: dict[str, str] = {
    **{c: KEY for c in KEY_COLUMNS},
    **{c: EXACT for c in ("n", "n_seeds", "df", "family", "se_eval_df", "seeds", "steps", "window_steps",
                          "verdict", "flag", "excludes_zero", "diagnosis",
                          "source", "claim", "paper (Qwen3-8B)", "quantity", "expected", "rule", "evidence", "note",
                          "paper_relative_gain_pct")},
    **{c: UNCERTAINTY for c in ("std", "ci95_lo", "ci95_hi", "se", "se_eval", "se_seeds",
                                "diff_std", "diff_ci95_lo", "diff_ci95_hi",
                                # the ledger's p-values move with its values; what they decide is the verdict
                                "p_zero", "p_effect", "p_zero_bh", "p_effect_bh", "n80")},
    **{c: BOUNDED for c in ("mean", "ours_mean", "values", "diff_mean", "diff_values", "rtpo_mean",
                            "baseline_mean", "relative_gain_pct", "task_median", "dev_from_median_pct")},
}
LIST_COLUMNS = ("seeds", "values", "diff_values")

ROUNDING_REL = 1e-9    # float rounding: fp64 sums in another order differ by ~1e-16 relative
ROUNDING_ABS = 1e-12

Row = Mapping[str, str]
Tables = Mapping[str, pd.DataFrame]


def num(s: str) -> float | None:
    """A CSV cell as a float ('' -> NaN), or None when it is text ('True' / 'False' are text)."""
    if s == "":
        return math.nan
    if s in ("True", "False"):
        return None
    try:
        return float(s)
    except ValueError:
        return None


def _f(row: Row, col: str) -> float:
    v = num(row.get(col, ""))
    return math.nan if v is None else v


def rounding_equal(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=ROUNDING_REL, abs_tol=ROUNDING_ABS)


# ------------------------------------------------------------------------------------------------
# the stated uncertainty of a bounded cell, on one side (reference or run)
# ------------------------------------------------------------------------------------------------

Bound = Callable[[str, Row, Tables], float]   # (table name, row, that side's tables) -> bound (NaN: none)


def ci_half(row: Row, lo: str = "ci95_lo", hi: str = "ci95_hi") -> float:
    return (_f(row, hi) - _f(row, lo)) / 2


def _lookup(df: pd.DataFrame | None, **where: str) -> Row | None:
    if df is None or any(c not in df.columns for c in where):
        return None
    m = pd.Series(True, index=df.index)
    for c, v in where.items():
        m &= df[c] == v
    hit = df[m]
    return None if hit.empty else hit.iloc[0].to_dict()


def bound_mean(name: str, row: Row, tables: Tables) -> float:
    h = ci_half(row)
    if name == "table01_vs_vanilla" and row.get("metric", "").endswith("paired by problem and seed"):
        sib = _lookup(tables.get(name), task=row.get("task", ""), method=row.get("method", ""),
                      comparison=row.get("comparison", ""), metric="diff pass@1, paired by seed")
        if sib is not None:
            h = max(_finite(h), _finite(ci_half(sib))) if _any_finite(h, ci_half(sib)) else math.nan
    return h


def bound_per_seed(name: str, row: Row, tables: Tables) -> float:
    for std_col in ("std", "diff_std"):
        if std_col in row:
            k = int(_f(row, "n_seeds")) if "n_seeds" in row and not math.isnan(_f(row, "n_seeds")) else len(
                [s for s in row.get("seeds", "").split(LIST) if s])
            sd = _f(row, std_col)
            return t975(k - 1) * sd if k >= 2 and not math.isnan(sd) else math.nan
    n = _f(row, "n")
    return ci_half(row) * math.sqrt(n) if n >= 2 else math.nan


def bound_diff_mean(name: str, row: Row, tables: Tables) -> float:
    return ci_half(row, "diff_ci95_lo", "diff_ci95_hi")


def _main_average_half(tables: Tables, tasks: str, method: str) -> float:
    r = _lookup(tables.get("table01_main"), task=tasks, benchmark="average", method=method, metric="pass@1")
    return math.nan if r is None else ci_half(r)


def bound_rtpo_mean(name: str, row: Row, tables: Tables) -> float:
    return _main_average_half(tables, row.get("tasks", ""), "rtpo")


def _baseline(row: Row) -> str:
    return row.get("comparison", "").split(" vs ", 1)[-1]


def bound_baseline_mean(name: str, row: Row, tables: Tables) -> float:
    return _main_average_half(tables, row.get("tasks", ""), _baseline(row))


def ratio_bound(r: float, hr: float, b: float, hb: float) -> float:
    """Largest change of 100 (r - b) / b = 100 (r / b - 1) when r moves by hr and b by hb (corners of the
    box; NaN bounds count as 0); infinite when b's interval holds 0."""
    hr, hb = _finite(hr), _finite(hb)
    if any(math.isnan(x) for x in (r, b)) or abs(b) <= hb:
        return math.inf
    f0 = 100 * (r / b - 1)
    return max(abs(100 * ((r + sr * hr) / (b + sb * hb) - 1) - f0) for sr in (-1, 1) for sb in (-1, 1))


def bound_relative_gain(name: str, row: Row, tables: Tables) -> float:
    return ratio_bound(_f(row, "rtpo_mean"), bound_rtpo_mean(name, row, tables),
                       _f(row, "baseline_mean"), bound_baseline_mean(name, row, tables))


def bound_task_median(name: str, row: Row, tables: Tables) -> float:
    df = tables.get(name)
    if df is None:
        return math.nan
    rows = df[(df["task"] == row.get("task", "")) & (df["metric"] == row.get("metric", ""))]
    halves = [ci_half(r) for r in rows.to_dict("records")]
    return max((h for h in halves if not math.isnan(h)), default=math.nan)


def bound_dev_from_median(name: str, row: Row, tables: Tables) -> float:
    return ratio_bound(_f(row, "mean"), ci_half(row), _f(row, "task_median"), bound_task_median(name, row, tables))


BOUNDS: dict[str, tuple[Bound, str]] = {
    "mean": (bound_mean, "95 % CI half-width"),
    "ours_mean": (bound_mean, "95 % CI half-width"),
    "values": (bound_per_seed, "t x seed std"),
    "diff_mean": (bound_diff_mean, "95 % CI half-width of the difference"),
    "diff_values": (bound_per_seed, "t x seed std of the difference"),
    "rtpo_mean": (bound_rtpo_mean, "table01_main's 95 % CI half-width"),
    "baseline_mean": (bound_baseline_mean, "table01_main's 95 % CI half-width"),
    "relative_gain_pct": (bound_relative_gain, "propagated from rtpo_mean and baseline_mean"),
    "task_median": (bound_task_median, "largest 95 % CI half-width of the task's rows"),
    "dev_from_median_pct": (bound_dev_from_median, "propagated from mean and task_median"),
}


def _finite(x: float) -> float:
    return 0.0 if math.isnan(x) else x


def _any_finite(*xs: float) -> bool:
    return any(not math.isnan(x) for x in xs)


# ------------------------------------------------------------------------------------------------
# comparing one table
# ------------------------------------------------------------------------------------------------

IDENTICAL, WITHIN, BEYOND, STRUCTURE, MISSING = "identical", "within", "beyond", "structure", "missing"
LABELS = {IDENTICAL: "identical", WITHIN: "within", BEYOND: "BEYOND", STRUCTURE: "STRUCTURE", MISSING: "MISSING"}


@dataclass
class Diff:
    """One cell that differs: its row key, column, both values, the bound and whether it holds."""

    key: str
    column: str
    ref: str
    run: str
    delta: float            # |run - ref| (NaN for text, inf when a value is present on one side only)
    bound: float            # 0 when the table states no uncertainty for the cell
    what: str               # the bound's kind, or why the cell must be equal
    ok: bool
    bounded: bool = False   # a BOUNDED column (a value the table states an uncertainty for, or could)

    @property
    def severity(self) -> float:
        if self.ok:
            return self.delta / self.bound if self.bound > 0 and math.isfinite(self.bound) else 0.0
        if math.isnan(self.delta) or self.bound <= 0:
            return math.inf
        return self.delta / self.bound

    def describe(self) -> str:
        if math.isnan(self.delta):
            return f"[{self.key}] {self.column}: reference {self.ref!r}, run {self.run!r} ({self.what})"
        rel = "<=" if self.ok else ">"
        return (f"[{self.key}] {self.column}: reference {self.ref or '(empty)'}, run {self.run or '(empty)'}, "
                f"|diff| {_g(self.delta)} {rel} {_g(self.bound)} ({self.what})")


def _g(x: float) -> str:
    return "inf" if math.isinf(x) else f"{x:.4g}"


@dataclass
class TableResult:
    name: str
    status: str
    detail: str = ""
    diffs: list[Diff] = field(default_factory=list)   # every differing cell (ok and not)
    rows: int = 0
    numbers: int = 0    # bounded numbers compared (every row's mean, per-seed value, ...), equal ones included

    @property
    def beyond(self) -> list[Diff]:
        return sorted((d for d in self.diffs if not d.ok), key=lambda d: -d.severity)

    @property
    def unstated_only(self) -> bool:
        """Every out-of-bound number is one the table states no uncertainty for (e.g. one seed)."""
        b = self.beyond
        return bool(b) and all(d.what == UNSTATED for d in b)

    @property
    def chance_level(self) -> bool:
        """BEYOND, but only as a re-draw of the same experiment gives by chance (the chance rule, at CHANCE_RATE): every number
        out is a bounded one with a stated uncertainty, within CHANCE_FACTOR x its bound, and there are no
        more of them than chance_allowance(numbers)."""
        b = self.beyond
        return bool(b) and all(d.bounded and d.bound > 0 and d.delta <= CHANCE_FACTOR * d.bound for d in b) \
            and len(b) <= chance_allowance(self.numbers)


# The chance rule: a 95 % interval lets 5 % of the numbers of a re-drawn run out; a BEYOND table is "at chance
# level" when every number out has a stated uncertainty, is within CHANCE_FACTOR x its bound, and they are no
# more than Binomial(N, CHANCE_RATE) exceeds with probability CHANCE_P (N: the table's bounded numbers); no
# count, verdict or text changed.
CHANCE_RATE, CHANCE_FACTOR, CHANCE_P = 0.05, 3.0, 0.01


def chance_allowance(n: int, rate: float = CHANCE_RATE, p: float = CHANCE_P) -> int:
    """The smallest k with P(Binomial(n, rate) > k) < p: how many of n numbers may lie outside their 95 %
    bounds by chance alone (n = 100: 10; n = 1000: 67)."""
    if n <= 0:
        return 0
    tail, k = 1.0, 0
    lr, lq = math.log(rate), math.log1p(-rate)
    while k <= n:
        pmf = math.exp(math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * lr + (n - k) * lq)
        tail -= pmf          # now P(X > k)
        if tail < p:
            return k
        k += 1
    return n


def read_table(path: str | Path) -> pd.DataFrame:
    """A CSV table as strings (empty cells ''), as written; a file that does not parse: ValueError naming it."""
    try:
        return pd.read_csv(path, dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not a readable CSV table ({e})") from e


def row_keys(df: pd.DataFrame) -> list[str]:
    """One key per row from its key columns ("task=math method=rtpo ..."), '#k' appended to repeats."""
    cols = [c for c in df.columns if COLUMN_ROLES.get(c) == KEY]
    seen: dict[str, int] = {}
    out = []
    for rec in df[cols].to_dict("records") if cols else [{} for _ in range(len(df))]:
        k = " ".join(f"{c}={rec[c]}" for c in cols if rec[c] != "") or "row"
        seen[k] = seen.get(k, 0) + 1
        out.append(k if seen[k] == 1 else f"{k} #{seen[k]}")
    return out


def _cell_diffs(name: str, key: str, col: str, a: str, b: str, ra: Row, rb: Row,
                ta: Tables, tb: Tables) -> list[Diff]:
    """The Diffs of one cell whose strings differ (reference a, run b); a per-seed list element by element."""
    role = COLUMN_ROLES.get(col)
    if role == UNCERTAINTY:
        return [Diff(key, col, a, b, abs(_f(rb, col) - _f(ra, col)), math.inf, "a stated uncertainty", True)]
    if col not in LIST_COLUMNS:
        return _value_diff(name, key, col, col, a, b, role, ra, rb, ta, tb)
    xa, xb = a.split(LIST) if a else [], b.split(LIST) if b else []
    if len(xa) != len(xb):
        return [Diff(key, col, a, b, math.nan, 0.0, "a different number of seeds", False)]
    seeds = ra.get("seeds", "").split(LIST)
    out = []
    for i, (u, v) in enumerate(zip(xa, xb)):
        if u != v:
            label = f"{col}[seed {seeds[i]}]" if col != "seeds" and len(seeds) == len(xa) else f"{col}[{i}]"
            out += _value_diff(name, key, col, label, u, v, role, ra, rb, ta, tb)
    return out


def _value_diff(name: str, key: str, col: str, label: str, a: str, b: str, role: str | None,
                ra: Row, rb: Row, ta: Tables, tb: Tables) -> list[Diff]:
    if role == BOUNDED:
        fn, what = BOUNDS[col]
        ha, hb = fn(name, ra, ta), fn(name, rb, tb)
        out = (_scalar(key, label, a, b, 0.0, UNSTATED) if not _any_finite(ha, hb) else
               _scalar(key, label, a, b, max(_finite(ha), _finite(hb)), f"{what}, the larger of both"))
        for d in out:
            d.bounded = True
        return out
    if role == EXACT:
        return _scalar(key, label, a, b, 0.0, "must be equal")
    return _scalar(key, label, a, b, 0.0, "a column without a role in compare.COLUMN_ROLES: must be equal")


def _scalar(key: str, col: str, a: str, b: str, bound: float, what: str) -> list[Diff]:
    x, y = num(a), num(b)
    if x is None or y is None:
        return [Diff(key, col, a, b, math.nan, 0.0, "text" if what == "must be equal" else what, False)]
    if rounding_equal(x, y):
        return [Diff(key, col, a, b, abs(x - y) if not math.isnan(x) else 0.0, bound, ROUNDING, True)]
    if math.isnan(x) or math.isnan(y):
        return [Diff(key, col, a, b, math.inf, bound, "a value on one side only", False)]
    d = abs(y - x)
    return [Diff(key, col, a, b, d, bound, what, d <= bound * (1 + ROUNDING_REL) + ROUNDING_ABS)]


def count_bounded(df: pd.DataFrame) -> int:
    """How many bounded numbers a table holds (per-seed lists count each element)."""
    n = 0
    for c in df.columns:
        if COLUMN_ROLES.get(c) == BOUNDED:
            n += sum(len(v.split(LIST)) for v in df[c] if v != "") if c in LIST_COLUMNS else int((df[c] != "").sum())
    return n


def compare_table(name: str, ref: pd.DataFrame, run: pd.DataFrame,
                  ref_tables: Tables | None = None, run_tables: Tables | None = None) -> TableResult:
    """Compare one table (reference `ref`, run `run`; both as read_table gives them). ref_tables /
    run_tables: every table of each side by name, for bounds stated in another table (table01_gains)."""
    ref_tables = ref_tables if ref_tables is not None else {name: ref}
    run_tables = run_tables if run_tables is not None else {name: run}
    if list(ref.columns) == list(run.columns) and ref.equals(run):
        return TableResult(name, IDENTICAL, f"{len(ref)} rows", rows=len(ref))
    if list(ref.columns) != list(run.columns):
        added = [c for c in run.columns if c not in ref.columns]
        gone = [c for c in ref.columns if c not in run.columns]
        parts = ([f"columns missing in the run: {', '.join(gone)}"] if gone else []) + \
                ([f"columns only in the run: {', '.join(added)}"] if added else [])
        return TableResult(name, STRUCTURE, "; ".join(parts) or "the same columns in another order", rows=len(ref))
    ka, kb = row_keys(ref), row_keys(run)
    ia, ib = dict(zip(ka, range(len(ka)))), dict(zip(kb, range(len(kb))))
    gone, added = [k for k in ka if k not in ib], [k for k in kb if k not in ia]
    if gone or added:
        parts = ([f"{len(gone)} rows missing in the run, e.g. [{gone[0]}]"] if gone else []) + \
                ([f"{len(added)} rows only in the run, e.g. [{added[0]}]"] if added else [])
        return TableResult(name, STRUCTURE, "; ".join(parts), rows=len(ref))
    ra_all, rb_all = ref.to_dict("records"), run.to_dict("records")
    diffs: list[Diff] = []
    for k in ka:
        ra, rb = ra_all[ia[k]], rb_all[ib[k]]
        for c in ref.columns:
            if ra[c] != rb[c]:
                diffs += _cell_diffs(name, k, c, ra[c], rb[c], ra, rb, ref_tables, run_tables)
    res = TableResult(name, WITHIN, diffs=diffs, rows=len(ref), numbers=count_bounded(ref))
    bad = res.beyond
    if bad:
        res.status = BEYOND
        n_unstated = sum(1 for d in bad if d.what == UNSTATED)
        n_num = sum(1 for d in bad if d.bounded)
        parts = [f"{n_num} of {res.numbers} numbers beyond their stated uncertainty"
                 + (f" ({n_unstated} where the table states none)" if n_unstated else "")]
        if len(bad) > n_num:
            parts.append(f"{len(bad) - n_num} count(s) / verdict(s) / text(s) changed")
        res.detail = ("; ".join(parts) + (" [at chance level]" if res.chance_level else "")
                      + f"; worst: {bad[0].describe()}")
    else:
        checked = [d for d in diffs if COLUMN_ROLES.get(d.column.split('[', 1)[0]) != UNCERTAINTY]
        nrows = len({d.key for d in checked})
        moved = [d for d in checked if d.what != ROUNDING]
        if not checked:
            res.detail = "rows in another order" if ka != kb else "only the stated uncertainties differ"
        elif not moved:
            res.detail = f"{nrows} of {len(ref)} rows differ by float rounding only"
        else:
            worst = max(moved, key=lambda d: d.severity)
            res.detail = (f"{nrows} of {len(ref)} rows differ, every number within its stated uncertainty; "
                          f"closest to its bound ({100 * worst.severity:.0f} %): {worst.describe()}")
    return res


# ------------------------------------------------------------------------------------------------
# comparing two directories
# ------------------------------------------------------------------------------------------------

def _read_dir(d: Path, names: list[str]) -> dict[str, pd.DataFrame]:
    return {n[:-4]: read_table(d / n) for n in names}


def compare_dirs(reference: str | Path, tables: str | Path) -> list[TableResult]:
    """Compare every table of `reference` with the same-named table of `tables` (run); tables on one side
    only are MISSING. A directory that does not exist or a reference without tables: OSError / ValueError."""
    reference, tables = Path(reference), Path(tables)
    for what, d in (("reference directory", reference), ("tables directory", tables)):
        if not d.is_dir():
            raise FileNotFoundError(f"{what} {d} does not exist")
    ref_names, run_names = compared_files(reference), compared_files(tables)
    if not ref_names:
        raise ValueError(f"reference directory {reference} holds no tables to compare (make it with "
                         f"`rtpo report reference --tables <run>/results/tables --out {reference}`)")
    ref_t, run_t = _read_dir(reference, ref_names), _read_dir(tables, run_names)
    out = []
    for name in sorted(set(ref_t) | set(run_t)):
        if name not in run_t:
            out.append(TableResult(name, MISSING, f"in the reference, not in {tables}"))
        elif name not in ref_t:
            out.append(TableResult(name, MISSING, f"in {tables}, not in the reference"))
        else:
            out.append(compare_table(name, ref_t[name], run_t[name], ref_t, run_t))
    return out


def table_line(r: TableResult) -> str:
    return f"{LABELS[r.status]:<10} {r.name}" + (f": {r.detail}" if r.detail else "")


def verdict(results: list[TableResult]) -> str:
    """The one-line verdict over every table."""
    by = {s: [r.name for r in results if r.status == s] for s in LABELS}
    if len(by[IDENTICAL]) == len(results):
        return f"verdict: identical ({len(results)} tables)"
    bad = by[BEYOND] + by[STRUCTURE] + by[MISSING]
    if not bad:
        return (f"verdict: within the run's stated uncertainty ({len(by[IDENTICAL])} identical, "
                f"{len(by[WITHIN])} within)")
    parts = []
    if by[BEYOND]:
        unstated = [r.name for r in results if r.status == BEYOND and r.unstated_only]
        chance = [r.name for r in results if r.status == BEYOND and r.chance_level]
        notes = ([f"{len(chance)} at chance level"] if chance else []) + \
                ([f"{len(unstated)} only where the table states no uncertainty, e.g. one seed"] if unstated else [])
        parts.append(f"beyond stated uncertainty in {len(by[BEYOND])} table(s): {', '.join(by[BEYOND])}"
                     + (f" ({'; '.join(notes)})" if notes else ""))
    if by[STRUCTURE]:
        parts.append(f"structure differs in {len(by[STRUCTURE])}: {', '.join(by[STRUCTURE])}")
    if by[MISSING]:
        parts.append(f"missing on one side: {', '.join(by[MISSING])}")
    counts = f"({len(by[IDENTICAL])} identical, {len(by[WITHIN])} within, {len(results)} tables)"
    redraw = not by[STRUCTURE] and not by[MISSING] and all(
        r.chance_level or r.unstated_only for r in results if r.status == BEYOND)
    if redraw:  # what a correct run on another CPU gives: its numbers are a re-draw of the reference's
        return (f"verdict: DIFFERS as a re-draw does (float drift, e.g. another CPU: every table beyond its "
                f"stated uncertainty is at chance level or states none): {'; '.join(parts)} {counts}")
    return f"verdict: DIFFERS {'; '.join(parts)} {counts}"


def exit_code(results: list[TableResult]) -> int:
    """0 when every table is identical or within its stated uncertainty, else 1."""
    return 0 if all(r.status in (IDENTICAL, WITHIN) for r in results) else 1


def report_lines(results: list[TableResult], details: int = 3, only_different: bool = False) -> list[str]:
    """One line per table (BEYOND tables followed by up to `details` further out-of-bound numbers,
    indented) and the verdict."""
    lines = []
    for r in results:
        if only_different and r.status == IDENTICAL:
            continue
        lines.append(table_line(r))
        more = r.beyond[1:1 + details] if r.status == BEYOND else []
        lines += [f"    also {d.describe()}" for d in more]
        rest = len(r.beyond) - 1 - len(more) if r.status == BEYOND else 0
        if rest > 0:
            lines.append(f"    ... and {rest} more (--details N to list them)")
    lines.append(verdict(results))
    return lines
