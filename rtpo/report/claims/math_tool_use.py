"""§G.5, Tables 18-19: tool use on math."""

from __future__ import annotations

from rtpo.report.claims.claim import (
    Claim, FAMILY_UNTRAINED, PerSeed, TRAINED_VS_UNTRAINED, TRAINED_VS_UNTRAINED_CALLS, pp_diff,
)
from rtpo.report.load import Results
from rtpo.report.paper_reference import PAPER
from rtpo.report.stats import paired


def math_tool_use(res: Results) -> list[Claim]:
    """§G.5, Tables 18-19: on math RTPO is more accurate than Vanilla with fewer tool calls."""
    def ev(m: str, metric: str) -> PerSeed:
        return res.eval_by_seed("math", m, "overall", metric)
    return [
        Claim("G.5-accuracy", PAPER["math_accuracy_vs_vanilla"], "RTPO is more accurate than Vanilla on math",
              "RTPO − Vanilla: math pass@1 (all samples)", "pp", pp_diff(ev("rtpo", "pass@1"), ev("vanilla", "pass@1")),
              evidence="tableG5_tool_use", note=TRAINED_VS_UNTRAINED, family=FAMILY_UNTRAINED),
        Claim("G.5-calls", PAPER["math_calls_vs_vanilla"], "RTPO makes fewer tool calls than Vanilla on math",
              "RTPO − Vanilla: math tool calls per trajectory (all samples)", "calls",
              paired(ev("rtpo", "tool_calls_per_traj"), ev("vanilla", "tool_calls_per_traj")), sign=-1,
              evidence="tableG5_tool_use", note=TRAINED_VS_UNTRAINED_CALLS, family=FAMILY_UNTRAINED),
    ]
