"""The paper's claims, one module per section of the paper, each a builder `section(res) -> list[Claim]` over
the loaded results (rtpo.report.load.Results): main_results (§4.1), consistency (§4.2, §F.2),
credit_assignment (§4.3), policy_drift (§4.4, §F.3), tool_use (§F.1), airline (§G.1), group_size (§G.2,
§G.9), trunk_failures (§G.3), training_cost (§G.4), math_tool_use (§G.5), sync_frequency (§G.6),
budget_over_training (§G.7), controls (this artifact's, not the paper's) and theorems (`rtpo theory`'s
checks). claim.py holds what they share (Claim, the families, the minimal effects, paper_effect); verdicts.py
is the one verdict engine; rtpo.report.ledger evaluates every section in the ledger's order and writes it."""
