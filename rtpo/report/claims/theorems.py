"""The theorem checks of `rtpo theory` (results/theory/theory_checks.csv): one ledger row each."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from rtpo.report.load import Results
from rtpo.report.paper_reference import PAPER, PAPER_COL
from rtpo.report.stats import INCONCLUSIVE, KIND_IMPLEMENTATION, theory_kind, theory_verdict


def theory_rows(res: Results) -> list[dict[str, Any]]:
    """The theorem checks of `rtpo theory` (results/theory/theory_checks.csv), one ledger row each: the
    Monte-Carlo value against the closed form (RULE_THEORY); one inconclusive row when the file is absent."""
    paper, evidence = PAPER["theorems"].text, "results/theory/theory_checks.csv"
    if res.theory is None:
        return [{"claim_id": "theory", "kind": KIND_IMPLEMENTATION, "source": "theory (rtpo theory)",
                 "claim": "the theorem checks",
                 PAPER_COL: paper, "quantity": "", "unit": "", "expected": "", "rule": "theory-check",
                 "ours_mean": math.nan, "ci95_lo": math.nan, "ci95_hi": math.nan, "n": 0, "seeds": "",
                 "values": "", "verdict": INCONCLUSIVE, "evidence": evidence, "note": "theory_checks.csv absent",
                 "timing": False}]
    rows = []
    for i, r in res.theory.reset_index(drop=True).iterrows():
        closed = r["closed_form"]
        expected = ("closed form " + (f"{float(closed):.4g}" if not pd.isna(closed) else "—")
                    + (f" ± {float(r['tolerance']):.3g}" if not pd.isna(r["tolerance"]) else ""))
        mc = float(r["monte_carlo"]) if not pd.isna(r["monte_carlo"]) else math.nan
        verdict = theory_verdict(float(closed) if not pd.isna(closed) else math.nan, mc,
                                 float(r["tolerance"]) if not pd.isna(r["tolerance"]) else math.nan,
                                 bool(r["holds"]), str(r.get("note", "")))
        rows.append({"claim_id": f"theory-{i + 1:02d}", "kind": theory_kind(r["check"]),
                     "source": "theory (rtpo theory)", "claim": str(r["paper_claim"]),
                     PAPER_COL: paper, "quantity": f"{r['check']}: {r['quantity']}", "unit": "",
                     "expected": expected, "rule": "theory-check",
                     "ours_mean": mc, "ci95_lo": math.nan, "ci95_hi": math.nan, "n": 0, "seeds": "", "values": "",
                     "verdict": verdict, "evidence": evidence,
                     "note": str(r.get("note", "")), "timing": False})
    return rows
