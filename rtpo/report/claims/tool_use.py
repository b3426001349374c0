"""§F.1: tool use."""

from __future__ import annotations

import math

from rtpo.report.claims.claim import (
    Claim, FAMILY_UNTRAINED, TRAINED_VS_UNTRAINED_CALLS, bench_name, hardest, mean_level, paper_effect, pp_diff,
)
from rtpo.report.load import Results
from rtpo.report.paper_reference import PAPER
from rtpo.report.stats import paired
from rtpo.report.table_base import method_label


def tool_use(res: Results) -> list[Claim]:
    """§F.1: RTPO's lead on the hardest math tier, its fewer Python calls there, more search calls."""
    ev = res.eval_by_seed
    hm = hardest(res, "math")
    out = []
    for m, ref in (("seeupo", "aime24_vs_seeupo"), ("grpo", "aime24_vs_grpo")):
        base = ev("math", m, hm, "pass@1") if hm else {}
        out.append(Claim(
            f"F.1-hard-{m}", PAPER[ref], f"RTPO leads {method_label(m)} on the hardest math benchmark",
            f"RTPO − {method_label(m)}: pass@1 on {bench_name(hm)}", "pp",
            pp_diff(ev("math", "rtpo", hm, "pass@1"), base) if hm else {},
            evidence="table01_main", note="" if hm else "no math evaluation",
            **paper_effect(PAPER[ref], "pp", mean_level(base, 100), method_label(m))))
    van = ev("math", "vanilla", hm, "tool_calls_per_traj") if hm else {}
    out.append(Claim(
        "F.1-math-calls", PAPER["aime24_python_calls"], "RTPO uses fewer tool calls than Vanilla on hard math",
        f"Vanilla − RTPO: tool calls per trajectory on {bench_name(hm)}", "calls",
        paired(van, ev("math", "rtpo", hm, "tool_calls_per_traj")) if hm else {}, evidence="tableG5_tool_use",
        family=FAMILY_UNTRAINED, note=TRAINED_VS_UNTRAINED_CALLS,
        **paper_effect(PAPER["aime24_python_calls"], "calls", mean_level(van), "Vanilla")))
    grpo_calls = ev("search", "grpo", "overall", "tool_calls_per_traj")
    turns = float(((res.cfg.get("env") or {}).get("search") or {}).get("max_turns", math.nan))
    out.append(Claim(
        "F.1-search-calls", PAPER["search_calls"], "RTPO issues more search calls than GRPO on knowledge tasks",
        "RTPO − GRPO: tool calls per trajectory, search evaluation (all samples)", "calls",
        paired(ev("search", "rtpo", "overall", "tool_calls_per_traj"), grpo_calls), evidence="tableG5_tool_use",
        note=f"a trajectory makes at most one call a turn: search's turn limit {turns:g} caps the effect" if turns == turns
        else "", **paper_effect(PAPER["search_calls"], "calls", mean_level(grpo_calls), "GRPO", cap=turns)))
    return out
