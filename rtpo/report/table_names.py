"""The paper's tables by name, and the runs each reads: what the report's registry (rtpo.report.tables.TABLES,
in this order; a test holds the names equal) and the DAG's table targets (rtpo.dag.Dag.table_targets,
workflow/rules/report.smk: `snakemake table10_group_size` trains and evaluates only that table's runs) both
read. Torch-free, so that the workflow imports it without the report's stack.

Each table writes results/tables/<name>.{csv,md,tex} (`rtpo report tables --only <name>`) and reads "main"
(the main grid) or a study's arms, with the main runs of the same (task, method) (the arm that is the main
configuration copies them, and the ledger adds their other seeds).
"""

from __future__ import annotations

from rtpo.experiment import MAIN, Experiment, Run

TABLE_RUNS = {
    "table01_main": MAIN, "table01_vs_vanilla": MAIN, "table01_gains": MAIN, "table_learning": MAIN,
    "table_budget": MAIN, "table02_credit_assignment": "credit_assignment", "table03_continuation": "continuation",
    "table06_continuation_detail": "continuation", "table07_airline_online": MAIN, "table08_airline_eval": MAIN,
    "table09_airline_tools": MAIN, "table10_group_size": "group_size", "table11_group_size_cost": "group_size",
    "table12_trunk_failures": MAIN, "table13_failure_dynamics": MAIN, "table14_training_cost": MAIN,
    "table21_budget": MAIN, "tableG5_tool_use": MAIN, "tableG6_sync": "sync",
    "table_controls": ("matched_updates", "turn_rows"),
}
# main-grid methods a table reads on its arms' tasks besides the arms' own (the controls' table shows RTPO
# beside GRPO-K and GRPO on its own contexts)
TABLE_MAIN_METHODS = {"table_controls": ("rtpo",)}
TABLE_NAMES = tuple(TABLE_RUNS)


def table_runs(experiment: Experiment, name: str) -> list[Run]:
    """The runs of `experiment` that table `name` reads: the main grid's, or a study's arms plus the main runs
    of the same (task, method). ValueError naming an unknown table and the known ones."""
    if name not in TABLE_RUNS:
        raise ValueError(f"unknown table {name!r}; known: {', '.join(TABLE_NAMES)}")
    scope = TABLE_RUNS[name]
    if scope == MAIN:
        return experiment.select(MAIN)
    arms = [r for sc in ((scope,) if isinstance(scope, str) else scope) for r in experiment.select(sc)]
    pairs = {(r.task, r.method) for r in arms}
    pairs |= {(r.task, m) for r in arms for m in TABLE_MAIN_METHODS.get(name, ())}
    return [r for r in experiment.select(MAIN) if (r.task, r.method) in pairs] + arms


__all__ = ["TABLE_RUNS", "TABLE_MAIN_METHODS", "TABLE_NAMES", "table_runs"]
