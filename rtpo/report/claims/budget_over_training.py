"""§G.7, Table 21: the per-trunk budget over training."""

from __future__ import annotations

from rtpo.report.claims.claim import AIRLINE, Claim, EARLY, FAMILY_LEVEL, LATE, learns, mean_level, paper_effect, scaled
from rtpo.report.load import Results
from rtpo.report.paper_reference import PAPER
from rtpo.report.stats import paired


def budget_over_training(res: Results) -> list[Claim]:
    """§G.7, Table 21 (RTPO, airline): per-trunk tool calls and tokens fall, tool success rises."""
    out = []
    learned = learns(res, AIRLINE, "rtpo")
    for col, label, ref, sign, unit, k in (
            ("trunks_tool_calls_per_trunk", "tool calls per trunk fall", "budget_tool_calls", -1, "calls", 1),
            ("trunks_tokens_per_trunk", "generated tokens per trunk fall", "budget_tokens", -1, "tokens", 1),
            ("trunks_tool_success_rate", "tool execution success rises", "budget_tool_success", 1, "pp", 100)):
        early = res.steps_by_seed(AIRLINE, "rtpo", col, window=EARLY)
        late_minus_early = paired(res.steps_by_seed(AIRLINE, "rtpo", col, window=LATE), early)
        out.append(Claim(f"G.7-{col.split('_', 1)[1]}", PAPER[ref], f"over training, {label}",
                         f"RTPO (airline): {col}, last fifth of steps − first fifth", unit,
                         scaled(late_minus_early, k), sign=sign, evidence="table21_budget", learned=learned,
                         family=FAMILY_LEVEL,
                         **paper_effect(PAPER[ref], unit, mean_level(early, k), "RTPO's first-fifth")))
    return out
