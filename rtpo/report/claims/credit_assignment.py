"""§4.3, Table 2: credit assignment."""

from __future__ import annotations

from rtpo.report.claims.claim import Claim, PerSeed, pp_diff
from rtpo.report.load import Results
from rtpo.report.paper_reference import PAPER
from rtpo.report.table_base import method_label
from rtpo.report.tables_studies import left_out


def credit_assignment(res: Results) -> list[Claim]:
    """§4.3, Table 2: under matched full-history rollouts (study credit_assignment) RTPO-CA beats the
    trajectory- and tree-level baselines on the math average."""
    ca = res.studies.get("credit_assignment")
    methods = [m for m in (ca.methods if ca else ("grpo", "tree_grpo", "seeupo")) if m != "rtpo_ca"]
    out = []
    for m in methods:
        values: PerSeed = {}
        if ca is not None:
            v = ca.variants[0].name
            values = pp_diff(res.eval_macro_by_seed([ca.task], "rtpo_ca", "pass@1", ca.name, v),
                         res.eval_macro_by_seed([ca.task], m, "pass@1", ca.name, v))
        out.append(Claim(
            f"4.3-{m}", PAPER["rtpo_ca_best"], f"under full-history rollouts RTPO-CA beats {method_label(m)}",
            f"RTPO-CA − {method_label(m)}: pass@1 averaged over the math benchmarks (psi = full)", "pp", values,
            evidence="table02_credit_assignment", absent="" if ca else left_out("credit_assignment")))
    return out
