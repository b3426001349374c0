"""The paper's reported figures (Qwen3-8B), each with where the paper states it: the one table the report reads.

Every paper figure the report shows sits here: the ledger's "paper (Qwen3-8B)" column (ledger.py takes
each claim's `source` and paper text from its entry) and the paper column of table01_gains (tables.py).
`source` is the paper's section / table / figure as the paper digest cites it; `text`
is the figure as the column prints it. They are the paper's numbers at its scale: no verdict compares our
numbers with them directly. Two kinds of use:
- `change` (in `change_unit`) is the paper's effect as a scale-free number, the size an empirical ledger row
  tests against once mapped to our scale (claims.claim.paper_effect): a relative change in % ("%": times our
  baseline's level in the row's unit, or as is when the row is itself a percent change), or percentage
  points ("pp": as is, where the paper gives a difference without the levels to scale it by).
  Where the change is between two rates whose levels the paper gives (`levels`, in %), a row in percentage
  points maps it as the paper's odds ratio applied to our baseline's level instead: the same effect whichever
  side of the rate a row expresses (truncation 47.5 → 42.5 % is termination 52.5 → 57.5 %), never past 0 or 100.
- `value` is a level the paper's claim *is*: the rollout-training ratio "stays at 1.0" (§4.2: the
  equivalence centre) and "above 80 % zero advantage at G = 4" (§G.9); and the three relative gains of §4.1
  that table01_gains shows next to ours (PAPER_GAINS).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

PAPER_COL = "paper (Qwen3-8B)"   # the column every paper figure is shown in


@dataclass(frozen=True)
class PaperFigure:
    """One reported figure: as printed (`text`), where the paper states it (`source`), the number a table or
    a level claim uses (`value`: a relative gain in % or a claimed level; NaN where none) and the paper's
    effect a ledger row maps to our scale (`change`, `change_unit`; NaN where the paper gives no figure)."""

    source: str
    text: str
    value: float = math.nan
    change: float = math.nan       # the paper's effect, signed, in change_unit (see the module doc)
    change_unit: str = "%"         # "%": a relative change; "pp": percentage points, taken as is
    levels: tuple[float, float] | None = None   # a rate's (baseline, treatment) levels in %, where the paper gives both


F = PaperFigure  # short, for the table below
PAPER: dict[str, PaperFigure] = {
    # ---- §4.1 main results (Table 1): relative overall accuracy over math + knowledge QA -----------------
    "gain_vs_vanilla": F("§4.1, Table 1", "+66.78 % relative overall accuracy", 66.78, change=66.78),
    "gain_vs_grpo": F("§4.1, Table 1", "+21.50 % relative", 21.50, change=21.50),
    "gain_vs_seeupo": F("§4.1, Table 1", "+10.76 % relative", 10.76, change=10.76),
    "beats_tree_grpo": F("§4.1, Table 1", "RTPO outperforms (no figure in the digest)"),
    "beats_arpo": F("§4.1, Table 1", "RTPO outperforms (no figure in the digest)"),
    # ---- §F.1 tool use on hard math and on knowledge QA --------------------------------------------------
    "aime24_vs_seeupo": F("§F.1", "AIME24 pass@1 33.33 vs 20.00 % (+13.3 pp)",
                          change=100 * (33.33 / 20.00 - 1), levels=(20.00, 33.33)),
    "aime24_vs_grpo": F("§F.1", "AIME24 pass@1 33.33 vs 10.00 % (+23.3 pp)",
                        change=100 * (33.33 / 10.00 - 1), levels=(10.00, 33.33)),
    "aime24_python_calls": F("§F.1, §G.5", "AIME24: 4 Python calls (RTPO) vs 17 (Vanilla)",
                               change=100 * (4 / 17 - 1)),
    "search_calls": F("§F.1", "613 / 867 calls (HotpotQA / 2Wiki) vs ≈200 for other methods",
                        change=100 * (613 / 200 - 1)),   # the smaller of the two
    # ---- §4.2 rollout-training consistency (Figure 3), §F.2 ratio dynamics -------------------------------
    "ratio_rtpo": F("§4.2, Figure 3", "1.0 throughout training", 1.0),
    "ratio_grpo_math": F("§4.2, §F.2", "GRPO 0.89 → 0.97 over 30 steps"),
    "ratio_grpo_search": F("§4.2, §F.2", "baselines ≈0.80 → 0.89 / 0.83"),
    "ratio_grpo_other": F("§4.2, §F.2", "below 1"),
    "kl_lowest": F("§4.2, Figure 3", "RTPO lowest average KL"),
    "seeupo_jitter": F("§F.2", "SeeUPO spike to 1.02 at step 9, sustained fluctuations"),
    # GRPO's mismatch recovers: 1 − ratio falls 0.11 → 0.03 (math), 0.20 → 0.17 (2Wiki) / 0.11 (HotpotQA)
    "recovery_grpo_math": F("§4.2, §F.2", "GRPO 0.89 → 0.97 over 30 steps", change=100 * (0.03 / 0.11 - 1)),
    "recovery_grpo_search": F("§4.2, §F.2", "baselines ≈0.80 → 0.89 / 0.83",
                              change=100 * (0.17 / 0.20 - 1)),   # the smaller of the two (2Wiki)
    # ---- §4.3 credit assignment under full-history rollouts (Table 2) ------------------------------------
    "rtpo_ca_best": F("§4.3, Table 2", "RTPO-CA highest overall average on 4 math benchmarks"),
    # ---- §4.4 policy drift correction (Table 3): on- minus off-policy continuation -------------------------
    "on_policy_gain": F("§4.4, Table 3", "+7.00 XBench, +5.83 GAIA, +3.50 WebWalkerQA, −0.33 HLE (pp, output-hit)",
                        change=(7.00 + 5.83 + 3.50 - 0.33) / 4, change_unit="pp"),   # no levels given
    "on_policy_longest": F("§4.4, §G.6", "largest gains on long-horizon XBench / GAIA Level 3",
                           change=7.00, change_unit="pp"),   # XBench
    "on_policy_trend": F("§4.4", "gains larger on longer retrieval horizons; HLE (short) ≈ tie",
                         change=7.00 + 0.33, change_unit="pp"),   # XBench − HLE
    # ---- §G.1 τ3-airline (Tables 7-9) ---------------------------------------------------------------------
    "airline_pass1": F("§G.1, Table 8", "RTPO highest pass@1 (17.50 %)"),
    "airline_pass4": F("§G.1, Table 8", "RTPO highest pass@4 (30.00 %)"),
    # (the paper's "highest normal termination rate" is this row mirrored: an episode terminates or is truncated)
    "airline_truncation": F("§G.1, Table 8", "47.50 → 42.50 % truncation (RTPO highest normal termination rate)", change=100 * (42.50 / 47.50 - 1),
                            levels=(47.50, 42.50)),
    "airline_length": F("§G.1, Table 8", "2,538.2 → 1,688.8 tokens", change=100 * (1688.8 / 2538.2 - 1)),
    "airline_tool_errors": F("§G.1, Table 9", "50 → 9 error calls (baseline not named in the digest)",
                               change=100 * (9 / 50 - 1)),
    "airline_exec_success": F("§G.1, Table 9", "57.63 → 89.16 % (baseline not named in the digest)",
                                change=100 * (89.16 / 57.63 - 1), levels=(57.63, 89.16)),
    "airline_tps_vs_tree_grpo": F("§G.1, Table 9, §G.4", "−38.2 % (9,650.5 tokens per success)",
                                    change=-38.2),
    "airline_tps_vs_grpo": F("§G.1, Table 9, §G.4", "−56.0 %", change=-56.0),
    "airline_online": F("§G.1, Table 7", "RTPO best from Step 20 (of 50) onward; peak 56.25 %"),
    "airline_late_decline": F("§G.1, Table 7, §G.9", "56.25 % (Step 40) → 40.63 % (Step 50)",
                                change=100 * (40.63 / 56.25 - 1), levels=(56.25, 40.63)),
    # ---- §G.2 sibling group size G (Tables 10-11), §G.9 ---------------------------------------------------
    "g_zero_adv": F("§G.2, Table 10", "89.61 → 82.66 % (G 3 → 4)", change=100 * (82.66 / 89.61 - 1),
                    levels=(89.61, 82.66)),
    "g_pass1": F("§G.2, Table 10", "17.50 → 20.00 % (G 3 → 4)", change=100 * (20.00 / 17.50 - 1),
                 levels=(17.50, 20.00)),
    "g_inference_tokens": F("§G.2, Table 10", "9,650.5 → 7,477.9 (G 3 → 4)", change=100 * (7477.9 / 9650.5 - 1)),
    "g_wallclock": F("§G.2, Table 11", "+30.6 % GPU-hours (G 3 → 4)"),
    "g_train_tokens": F("§G.2, Table 11", "+152.8 % (G 3 → 4)"),
    "g_zero_adv_level": F("§G.9", "> 80 % at G = 4", 80.0),
    "g2_degenerate": F("§G.2", "G = 2 degenerates (no figure)"),
    # ---- §G.3 trunk quality and failure dynamics (Tables 12-13) -------------------------------------------
    "first_turn_failures": F("§G.3, Table 12", "only 6.88 % of trunks fail within the first turn"),
    "no_terminal": F("§G.3, Table 13", "37.50 % (Step 10) → 0 % (Step 50)", change=-100.0, levels=(37.50, 0.0)),
    "failed_length": F("§G.3, Table 13", "13.30 → 2.84 turns", change=100 * (2.84 / 13.30 - 1)),
    # ---- §G.4 training cost (Table 14): RTPO against a baseline --------------------------------------------
    "cost_wallclock_vs_grpo": F("§G.4, Table 14", "+41.3 % wall-clock / GPU-hours"),
    "cost_tokens_vs_grpo": F("§G.4, Table 14", "+40.0 % training-generation tokens", change=40.0),
    "cost_tokens_vs_tree_grpo": F("§G.4, Table 14", "+8.3 % training tokens", change=8.3),
    # ---- §G.5 tool use on math (Tables 18-19) -------------------------------------------------------------
    "math_accuracy_vs_vanilla": F("§G.5, Tables 18-19", "higher accuracy on GSM8K, AIME24, AIME25"),
    "math_calls_vs_vanilla": F("§G.5, Tables 18-19", "fewer total tool calls on GSM8K, AIME24, AIME25"),
    # ---- §G.6 synchronisation frequency -------------------------------------------------------------------
    "sync_accuracy": F("§G.6", "largest gain on GAIA Level 3; comparable on HLE"),
    "sync_cost": F("§G.6", "fixed-interval / KL sync reduce cost"),
    # ---- §G.7 per-trunk budget, Step 10 → Step 50 (Table 21) ----------------------------------------------
    "budget_tool_calls": F("§G.7, Table 21", "7.34 → 0.94", change=100 * (0.94 / 7.34 - 1)),
    "budget_tokens": F("§G.7, Table 21", "8,013.5 → 1,669.3", change=100 * (1669.3 / 8013.5 - 1)),
    "budget_tool_success": F("§G.7, Table 21", "74.04 → 93.33 %", change=100 * (93.33 / 74.04 - 1),
                             levels=(74.04, 93.33)),
    # ---- this artifact's controls (docs/design-controls.md 1-2): no arm of the paper, no figure --------------
    "control_matched_updates": F("control (this artifact)", "no such arm in the paper: GRPO with RTPO's "
                                 "optimizer steps per training step"),
    "control_mismatch": F("control (this artifact)", "no such arm in the paper: RTPO and GRPO under psi = full "
                          "on knowledge QA"),
    "control_turn_rows": F("control (this artifact)", "no such arm in the paper: GRPO trained per turn on the "
                           "contexts it sampled (no rollout-training mismatch, GRPO's information)"),
    # ---- §C theorems (checked by `rtpo theory`) -----------------------------------------------------------
    "theorems": F("§C", "proved (§C)"),
}
del F

# table01_gains' paper column: RTPO's relative overall gain in % (§4.1)
PAPER_GAINS = {m: PAPER[f"gain_vs_{m}"].value for m in ("vanilla", "grpo", "seeupo")}

# The paper's hardest benchmarks per task, in the order the ledger looks for them when a run has no
# "-hard" tier (embedded scale): AIME24 / AIME25 on math (§F.1), the long-horizon deep-search sets on
# search (§4.4, §G.6: GAIA, XBench; then HLE); the airline task has one held-out set (§G.1).
HARDEST_BENCHMARKS = {"math": ("aime24", "aime25"), "search": ("gaia", "xbench", "hle"), "airline": ()}
