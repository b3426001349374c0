"""§4.1, Table 1: the main results."""

from __future__ import annotations

from rtpo.report.claims.claim import (
    Claim, FAMILY_COMPARISON, FAMILY_UNTRAINED, TRAINED_VS_UNTRAINED, headline, mean_level, paper_effect, pp_diff,
)
from rtpo.report.load import Results
from rtpo.report.paper_reference import PAPER
from rtpo.report.table_base import method_label


def main_results(res: Results) -> list[Claim]:
    """§4.1, Table 1: RTPO's overall accuracy (pass@1 averaged over the headline benchmarks) against
    every baseline."""
    head = headline(res)
    rtpo = res.eval_macro_by_seed(head, "rtpo", "pass@1")
    out = []
    for m, ref in (("vanilla", "gain_vs_vanilla"), ("grpo", "gain_vs_grpo"), ("seeupo", "gain_vs_seeupo"),
                   ("tree_grpo", "beats_tree_grpo"), ("arpo", "beats_arpo")):
        base = res.eval_macro_by_seed(head, m, "pass@1")
        out.append(Claim(
            f"4.1-{m}", PAPER[ref], f"RTPO achieves higher overall accuracy than {method_label(m)}",
            f"RTPO − {method_label(m)}: pass@1 averaged over the {'+'.join(head)} benchmarks", "pp",
            pp_diff(rtpo, base), evidence="table01_main, table01_gains",
            note=TRAINED_VS_UNTRAINED if m == "vanilla" else "",
            family=FAMILY_UNTRAINED if m == "vanilla" else FAMILY_COMPARISON,
            **paper_effect(PAPER[ref], "pp", mean_level(base, 100), method_label(m))))
    return out
