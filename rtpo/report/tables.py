"""The paper's tables, recomputed from our runs (CSV, Markdown and LaTeX under the tables dir).

Every table is a `Table`: `data` is the tidy numbers (one row per cell: its keys, the metric, the
unit, mean / std / n / 95 % CI over seeds and the per-seed `seeds` and `values`) and goes to
`<name>.csv`; `display` is the formatted grid (mean ± std) that goes to `<name>.md` and `<name>.tex`.
Values in the CSV are in the unit of the source file (`unit` column: fractions, tokens, seconds);
the Markdown/LaTeX grids show fractions as percent. Our numbers only: where a table shows the
paper's figure, the column is named "paper (Qwen3-8B)" and the figure comes from paper_reference.py.

Tables (paper numbering; builders in rtpo.report.tables_main and tables_studies, the parts they
share in rtpo.report.table_base; registry `TABLES` here):
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
  table_controls                    this artifact's controls (not the paper's): GRPO with RTPO's optimizer
                                    steps per training step; RTPO and GRPO under psi = full

Timings (wall-clock seconds) never sit in these tables: they go to timing_<table>.* files of their
own (timing_table11_group_size_cost, timing_table14_training_cost, timing_tableG6_sync), so that two
runs of the DAG on one machine give byte-identical tables apart from the timing_* files.
"""

from __future__ import annotations

from typing import Callable

import pandas as pd

from rtpo.report.load import Results, benchmark_label
from rtpo.report.table_base import Table
from rtpo.report.tables_main import (
    table01_gains, table01_main, table01_vs_vanilla, table07_airline_online, table08_airline_eval,
    table09_airline_tools, table12_trunk_failures, table13_failure_dynamics, table14_training_cost, table21_budget,
    tableG5_tool_use, table_budget, table_learning,
)
from rtpo.report.tables_studies import (
    table02_credit_assignment, table03_continuation, table06_continuation_detail, table10_group_size,
    table11_group_size_cost, table_controls, tableG6_sync,
)


TABLES: tuple[Callable[[Results], list[Table]], ...] = (
    table01_main, table01_vs_vanilla, table01_gains, table_learning, table_budget, table02_credit_assignment,
    table03_continuation, table06_continuation_detail, table07_airline_online, table08_airline_eval,
    table09_airline_tools, table10_group_size, table11_group_size_cost, table12_trunk_failures,
    table13_failure_dynamics, table14_training_cost, table21_budget, tableG5_tool_use, tableG6_sync, table_controls,
)


def builders(only: list[str] | None = None) -> tuple[Callable[[Results], list[Table]], ...]:
    """The registry, or the builders named in `only` (a builder's name is its first table's, e.g.
    table01_main; rtpo.report.table_names.TABLE_NAMES): ValueError naming the unknown name and the known ones."""
    if not only:
        return TABLES
    by_name = {fn.__name__: fn for fn in TABLES}
    unknown = [n for n in only if n not in by_name]
    if unknown:
        raise ValueError(f"rtpo report tables --only: no table named {', '.join(unknown)} "
                         f"(tables: {', '.join(by_name)})")
    return tuple(fn for fn in TABLES if fn.__name__ in only)


def build_tables(res: Results) -> list[Table]:
    out: list[Table] = []
    for fn in TABLES:
        out += fn(res)
    return [mark_not_run(res, t) for t in out] if res.not_run else out


def mark_not_run(res: Results, t: Table) -> Table:
    """A 'not run' row for each benchmark of the table's tasks that the data job left out
    or an evaluation's web-search probe found unreachable (Results.not_run), and a note saying why."""
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
        notes.append(f"not run on {task}: {', '.join(sorted(benches))} ({reasons})")
    if not rows:
        return t
    return Table(t.name, t.title, t.data, pd.concat([t.display, pd.DataFrame(rows)], ignore_index=True),
                 [*t.notes, *notes])
