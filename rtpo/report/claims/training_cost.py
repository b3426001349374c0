"""§G.4, Table 14: training cost."""

from __future__ import annotations

from rtpo.report.claims.claim import AIRLINE, Claim, paper_effect
from rtpo.report.load import Results
from rtpo.report.paper_reference import PAPER
from rtpo.report.stats import paired_ratio
from rtpo.report.table_base import method_label


def training_cost(res: Results) -> list[Claim]:
    """§G.4, Table 14 (airline): RTPO costs more wall-clock and training-generation tokens than the baselines
    (the wall-clock claim is a timing: timing_claims.*)."""
    out = []
    for col, m, ref, what in (("time_total", "grpo", "cost_wallclock_vs_grpo", "wall-clock"),
                              ("tokens_total", "grpo", "cost_tokens_vs_grpo", "training-generation tokens"),
                              ("tokens_total", "tree_grpo", "cost_tokens_vs_tree_grpo", "training-generation tokens")):
        timing = col == "time_total"
        out.append(Claim(
            f"G.4-{col}-{m}", PAPER[ref], f"RTPO costs more {what} than {method_label(m)}",
            f"percent change of RTPO's airline {what} vs {method_label(m)}", "%",
            paired_ratio(res.steps_by_seed(AIRLINE, "rtpo", col, "sum"), res.steps_by_seed(AIRLINE, m, col, "sum")),
            evidence=("timing_" if timing else "") + "table14_training_cost", timing=timing,
            **paper_effect(PAPER[ref], "%")))
    return out
