"""What every table of rtpo.report.tables is made of: the `Table` record (tidy numbers for the CSV, a
display grid for Markdown and LaTeX, notes), per-seed cells and their formatting (mean ± std, paired
differences with their 95 % CI), the selections every builder uses (methods, tasks and steps that have
results) and the writers (<name>.csv, .md, .tex, each renamed into place)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd

from rtpo.atomic import atomic_call, atomic_write_text
from rtpo.report.load import MAIN, Results
from rtpo.report.stats import summarize


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


def scope_seeds(cfg: Mapping[str, Any], scope: str = MAIN) -> list[int]:
    """The seeds the config gives a scope: `seeds` for the main grid (a cell of `seed_counts` has its own:
    seed_phrase), a study's own `seeds` or else `ablations.seeds` for an ablation study."""
    if scope == MAIN:
        return list(cfg.get("seeds", []))
    abl = cfg.get("ablations") or {}
    return list((abl.get(scope) or {}).get("seeds", abl.get("seeds", [])))


def seed_counts_range(cfg: Mapping[str, Any], scope: str = MAIN) -> tuple[int, int]:
    """(fewest, most) seeds of a scope's cells: the main grid's differ by cell under `seed_counts`."""
    n = len(scope_seeds(cfg, scope))
    if scope != MAIN:
        own = [int(v) for v in (((cfg.get("ablations") or {}).get(scope) or {}).get("seed_counts") or {}).values()]
        return min([n, *own]), max([n, *own])
    counts = [int(v) for c in (cfg.get("seed_counts") or {}).values() for v in (c or {}).values() if int(v) > 0]
    return min([n, *counts]), max([n, *counts])


def seed_phrase(cfg: Mapping[str, Any], scope: str = MAIN) -> str:
    """'the seeds [0, 1, 2] (n = 3)', or for a main grid with per-cell counts the default and each exception."""
    seeds = scope_seeds(cfg, scope)
    counts = cfg.get("seed_counts") or {}
    if scope != MAIN:
        own = ((cfg.get("ablations") or {}).get(scope) or {}).get("seed_counts") or {}
        extra = "".join(f"; {method_label(m)}: seeds 0..{int(n) - 1} (n = {int(n)})" for m, n in own.items())
        return f"the seeds {seeds} (n = {len(seeds)}){extra}"
    if not counts:
        return f"the seeds {seeds} (n = {len(seeds)})"
    cells = "; ".join(f"{t}: " + ", ".join(f"{method_label(m)} {n}" if int(n) else f"{method_label(m)} not run"
                                           for m, n in (c or {}).items())
                      for t, c in counts.items() if c)
    return (f"each (task, method) cell's seeds 0..n-1, n = {len(seeds)} except {cells} (config seed_counts; a "
            "comparison pairs the seeds both cells have)")


def seeds_note(res: Results, scope: str = MAIN) -> str:
    return (f"mean ± std (ddof = 1) over {seed_phrase(res.cfg, scope)}; a single seed shows the "
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
    atomic_call(paths[0], t.data.to_csv, index=False)  # renamed into place
    md = [f"## {t.title}", "", to_markdown(t.display), ""] + [f"- {n}" for n in t.notes]
    atomic_write_text(paths[1], "\n".join(md) + "\n")
    caption = t.title + ". " + " ".join(t.notes)
    atomic_write_text(paths[2], to_latex(t.display, caption, f"tab:{t.name}"))
    return paths
