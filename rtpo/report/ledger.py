"""The claim ledger: one row per claim of the paper, its figure, ours, and a verdict by a stated rule.

Claims come from the digest's §4 (main results, consistency, credit assignment, drift), §F (F.1
tool use, F.2 ratio dynamics), §G (G.1-G.7, G.9) and the theorem checks of `rtpo theory`; one module per
section of the paper builds its claims (rtpo/report/claims/: main_results §4.1, consistency §4.2 + F.2,
credit_assignment §4.3, policy_drift §4.4 + F.3, tool_use §F.1, airline §G.1, group_size §G.2 + G.9,
trunk_failures §G.3, training_cost §G.4, math_tool_use §G.5, sync_frequency §G.6, budget_over_training §G.7,
controls (this artifact's), theorems; what they share: claims/claim.py), one verdict engine judges them
(claims/verdicts.py), and this module evaluates them in ledger order (`SECTIONS`) and writes the ledger.
Each row:

  paper (Qwen3-8B)  the paper's figure and its source, from paper_reference.PAPER (for reference only:
                    never used in a computation, except the two levels the paper claims, see there)
  quantity          what we measure: a per-seed effect (a paired difference, a percent change, a
                    change between early and late training, or a level), in `unit`
  ours              mean over seeds with its 95 % Student-t interval
  kind              what the evidence can say (stats.KINDS, counted apart): empirical; structural (holds
                    by construction, e.g. RTPO's ratio of 1: never counts as reproduced); implementation
                    check / derivation check (the theory rows)
  expected          the paper's sign and, for empirical claims, its effect size on our scale with how it
                    was mapped (paper_effect: the paper's relative change times our baseline's level, or its
                    figure as is where it is in the row's unit), else MIN_EFFECT[unit]
  family            the Benjamini-Hochberg family the row is adjusted in (FAMILIES): comparisons of trained
                    methods, trained against untrained, RTPO's own levels, controls, wall-clock claims
  p_zero, p_effect  the row's two t-tests (RULE_EFFECT); p_zero_bh: p_zero adjusted over the row's family
  p_zero_bh         (evaluate_family). The verdicts use p_zero_bh and the raw p_effect, so an adjustment
                    never moves a verdict towards the paper
  n80               an inconclusive row: the paired seeds a t-test needs for 80 % power at the tested effect
  verdict           by `rule` and kind (stats.RULE_EFFECT / RULE_EQUIVALENCE / RULE_STRUCTURAL /
                    RULE_THEORY, quoted in the ledger itself): reproduced, not reproduced, paper's sign with
                    a smaller effect, no effect of the paper's size, inconclusive (also: cannot be scored, the
                    note says why), not measurable at this scale (a training dynamic of runs that do not
                    learn); structural: holds (by construction), contradicts its construction

Rows exist whatever the config runs: a comparison whose runs are absent has n = 0 and is
inconclusive, and its note says what is missing. An ablation arm that is the main grid's configuration
(its runs' run.json `copy_of`) takes every seed the main grid ran (with_main_seeds). Windows over training steps are fractions of
the run (by step rank): "early" = first fifth, "late" = last fifth (paper: Step 10 vs Step 50 of 50).

Writes claims.csv (numbers), claims.md and claims.tex (the ledger with its rules). Claims about
wall-clock time (`timing=True`) go to timing_claims.{csv,md} instead: they depend on the machine and
its load, and everything else the DAG writes into results/tables must be the same on a rerun.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from rtpo.atomic import atomic_call, atomic_write_text
from rtpo.report.claims.airline import airline
from rtpo.report.claims.budget_over_training import budget_over_training
from rtpo.report.claims.claim import Claim, FAMILIES, MIN_EFFECT
from rtpo.report.claims.consistency import RATIO_MARGIN, consistency
from rtpo.report.claims.controls import matched_updates, mismatch_control, turn_rows_control
from rtpo.report.claims.credit_assignment import credit_assignment
from rtpo.report.claims.group_size import group_size
from rtpo.report.claims.main_results import main_results
from rtpo.report.claims.math_tool_use import math_tool_use
from rtpo.report.claims.policy_drift import policy_drift
from rtpo.report.claims.sync_frequency import sync_frequency
from rtpo.report.claims.theorems import theory_rows
from rtpo.report.claims.tool_use import tool_use
from rtpo.report.claims.training_cost import training_cost
from rtpo.report.claims.trunk_failures import trunk_failures
from rtpo.report.claims.verdicts import evaluate_family
from rtpo.report.load import Results
from rtpo.report.paper_reference import PAPER_COL
from rtpo.report.stats import (
    EFFECT_EXCLUDED, INCONCLUSIVE, KINDS, KIND_CONTROL, KIND_DERIVATION, KIND_EMPIRICAL, KIND_IMPLEMENTATION,
    KIND_STRUCTURAL, NOT_MEASURABLE, NOT_REPRODUCED, NOT_RUN, NO_EFFECT, OPPOSITE_SIGN, REPRODUCED, RULE_EFFECT,
    RULE_EQUIVALENCE, RULE_STRUCTURAL, RULE_THEORY, SMALLER, VERDICTS,
)
from rtpo.report.table_base import latex_escape, to_markdown

# the ledger's sections, in its row order (the theorem checks follow: theory_rows); the controls last
SECTIONS: tuple[Callable[[Results], list[Claim]], ...] = (
    main_results, tool_use, consistency, credit_assignment, policy_drift, airline, group_size, trunk_failures,
    training_cost, math_tool_use, sync_frequency, budget_over_training, matched_updates, turn_rows_control,
    mismatch_control,
)


def build_claims(res: Results) -> list[Claim]:
    """Every claim the ledger checks, with our per-seed values from the loaded results."""
    return [c for section in SECTIONS for c in section(res)]

LEDGER_COLUMNS = ["claim_id", "kind", "family", "source", "claim", PAPER_COL, "quantity", "unit", "expected", "rule",
                  "ours_mean", "ci95_lo", "ci95_hi", "n", "p_zero", "p_effect", "p_zero_bh", "n80", "seeds", "values",
                  "verdict", "evidence", "note"]


def evaluate_claims(res: Results) -> pd.DataFrame:
    """The ledger frame: every claim of `SECTIONS` with its verdict, then the theorem checks. Each row's p_zero is
    Benjamini-Hochberg adjusted within its family (Claim.bh_family, FAMILIES)."""
    claims = build_claims(res)
    rows: list[dict[str, Any] | None] = [None] * len(claims)
    for family in FAMILIES:
        idx = [i for i, c in enumerate(claims) if c.bh_family == family]
        for i, row in zip(idx, evaluate_family([claims[i] for i in idx], res.not_run)):
            rows[i] = row
    return pd.DataFrame([*rows, *theory_rows(res)], columns=[*LEDGER_COLUMNS, "timing"])


def verdict_counts(df: pd.DataFrame) -> dict[Any, int]:
    """Counts of a ledger frame, kinds apart.

    (kind, verdict): every pair that occurs (stats.KINDS x stats.VERDICTS); "<kind>": the rows of each kind;
    each empirical verdict (reproduced, not reproduced, the two effect-excluded ones, inconclusive, not
    measurable at this scale): over the rows whose verdict it is (a structural claim's verdict is never one of
    them but inconclusive: it is not evidence); "effect excluded" = paper's sign, smaller effect + no effect of
    the paper's size; "decided" = reproduced + not reproduced; "empirical decided" adds the two excluded ones,
    over empirical claims only; "claims" = rows."""
    kinds = df["kind"] if "kind" in df.columns else pd.Series([KIND_EMPIRICAL] * len(df), index=df.index)
    out: dict[Any, int] = {}
    for (k, v), n in pd.Series(list(zip(kinds, df.verdict))).value_counts().items():
        out[(k, v)] = int(n)
    for k in KINDS:
        out[k] = int((kinds == k).sum())
    counts = df.verdict.value_counts()
    for v in (REPRODUCED, NOT_REPRODUCED, OPPOSITE_SIGN, SMALLER, NO_EFFECT, INCONCLUSIVE, NOT_MEASURABLE, NOT_RUN):
        out[v] = int(counts.get(v, 0))
    out["effect excluded"] = out[SMALLER] + out[NO_EFFECT]
    out["against the paper"] = out[NOT_REPRODUCED] + out[OPPOSITE_SIGN]
    out["decided"] = out[REPRODUCED] + out[NOT_REPRODUCED]
    out["empirical decided"] = sum(out.get((KIND_EMPIRICAL, v), 0)
                                   for v in (REPRODUCED, NOT_REPRODUCED, OPPOSITE_SIGN, *EFFECT_EXCLUDED))
    out["claims"] = int(len(df))
    return out


def counts_text(df: pd.DataFrame) -> str:
    """The ledger summary, one clause per kind: "40 empirical (3 reproduced, ...); 7 structural (...); ..."."""
    k = verdict_counts(df)
    # a ledger written by older rules (e.g. a committed reference) may hold verdicts of its own: listed too
    known = [*VERDICTS, *dict.fromkeys(v for v in df.verdict if v not in VERDICTS)]
    parts = []
    for kind in KINDS:
        if not k[kind]:
            continue
        vs = ", ".join(f"{k[(kind, v)]} {v}" for v in known if k.get((kind, v)))
        parts.append(f"{k[kind]} {kind} ({vs})")
    return "; ".join(parts) if parts else "none"


def _fmt_ours(r) -> str:
    if r["n"] == 0 and r["rule"] != "theory-check" or pd.isna(r["ours_mean"]):
        return "—"
    if r["unit"] in ("ratio", "nats/token", "nats/token/hop", ""):  # small quantities: 3 significant digits
        fmt = (lambda x, sign=False: f"{x:{'+' if sign else ''}#.3g}")
    else:
        digits = 2 if r["unit"] in ("calls", "turns", "syncs", "pp/hop") else 1
        fmt = (lambda x, sign=False, d=digits: f"{x:{'+' if sign else ''},.{d}f}")
    head = fmt(r["ours_mean"], sign=r["rule"] == "direction")
    if pd.isna(r["ci95_lo"]):
        return head
    return f"{head} [{fmt(r['ci95_lo'])}, {fmt(r['ci95_hi'])}]"


def ledger_display(df: pd.DataFrame, scale: str = "ours") -> pd.DataFrame:
    """The ledger grid; `scale` names our setting (the config's `name`, e.g. cpu-default)."""
    return pd.DataFrame({
        "id": df["claim_id"], "kind": df["kind"], "source": df["source"], "claim": df["claim"], PAPER_COL: df[PAPER_COL],
        "ours: quantity": df["quantity"], "unit": df["unit"],
        f"ours ({scale}): mean [95 % CI]": [_fmt_ours(r) for _, r in df.iterrows()],
        "n seeds": df["n"], "expected": df["expected"], "p: ≠ 0 (BH) / < d": [_fmt_p(r) for _, r in df.iterrows()],
        "verdict": df["verdict"], "seeds for 80 % power": [_fmt_n80(r) for _, r in df.iterrows()]})


def _fmt_p(r) -> str:
    """The p-values the verdict used (RULE_EFFECT): p_zero adjusted in its family, p_effect raw; "—" for rows
    not tested."""
    z, e = r.get("p_zero_bh", math.nan), r.get("p_effect", math.nan)
    if pd.isna(z) or pd.isna(e):
        return "—"
    return f"{float(z):.2g} / {float(e):.2g}"


def _fmt_n80(r) -> str:
    n = r.get("n80", math.nan)
    return "" if pd.isna(n) else f"{float(n):.0f}"


def rules_text() -> list[str]:
    return [
        "Kinds (the `kind` column; counted apart, never pooled):",
        f"- {KIND_EMPIRICAL}: a comparison of trained runs whose outcome the design leaves open; the only kind "
        "that is evidence for or against the paper.",
        f"- {KIND_STRUCTURAL}: holds by construction of this implementation (the note says why), e.g. RTPO's "
        "rollout–training ratio is 1 because sampling and scoring use the same ids and kernels, and GRPO − RTPO "
        "KL >= 0 because RTPO's is ~0 and k3 >= 0. Its verdict is never 'reproduced'.",
        f"- {NOT_MEASURABLE} (a verdict of empirical rows, counted apart from decided and inconclusive): the "
        "row's quantity is a training dynamic the paper explains by learning, and the runs' training reward does "
        "not rise (table_learning).",
        f"- {KIND_IMPLEMENTATION} / {KIND_DERIVATION}: the theory rows, a simulation against its own closed "
        "form / against the paper's own expression.",
        f"- {KIND_CONTROL}: this artifact's controls (source 'control'), not claims of the paper: comparisons of "
        "arms the paper does not run (GRPO with RTPO's optimizer steps per training step; RTPO and GRPO under "
        "psi = full), scored by the effect rule against the effect their note names; 'reproduced' there means the "
        "stated effect is shown. Their structural manipulation check counts with the structural rows.",
        "Verdict rules (the `rule` column and the kind say which applies):",
        f"- {RULE_EFFECT} Minimal effects by unit: "
        + ", ".join(f"{v:g} {u}" for u, v in MIN_EFFECT.items()) + ".",
        f"- {RULE_EQUIVALENCE} Here c = 1, m = {RATIO_MARGIN} for the rollout–training ratio.",
        f"- {RULE_STRUCTURAL}",
        f"- {RULE_THEORY}",
        "Multiplicity: the test against zero (p_zero) is Benjamini-Hochberg adjusted (statsmodels multipletests, "
        "fdr_bh) within the row's family (the `family` column): comparisons of trained methods (RTPO against a "
        "trained baseline, or RTPO arms against each other); trained against untrained (RTPO against Vanilla, which "
        "every RL method beats here); RTPO alone (levels and shares of RTPO's own runs, e.g. a limitation the paper "
        "states); the controls; the wall-clock claims. The test against the paper's effect (p_effect) is never "
        "adjusted: adjusting it would make 'reproduced' easier. So an adjusted verdict is never more favourable to "
        "the paper than the raw 95 % interval allows, and a raw interval wholly on the side the paper argues "
        "against reads 'opposite sign' (or 'not reproduced', once adjusted). The intervals shown are the "
        "unadjusted 95 % ones, so a row whose interval excludes 0 may still be inconclusive; its note says so.",
        "95 % interval: mean ± t(0.975, n−1)·sd/√n over the per-seed effects (ddof = 1; exact Student-t "
        "quantiles); differences between methods are paired by seed. An ablation arm that is the main grid's "
        "configuration takes every seed the main grid ran. The paper's column is its reported figure "
        "(Qwen3-8B, §4, §F, §G); a verdict uses it only where the `expected` column maps it to our scale. "
        "'Early' / 'late' = the first / last fifth of the training steps.",
    ]


def write_ledger(res: Results, outdir: str | Path) -> list[Path]:
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    full = evaluate_claims(res)
    is_timing = full["timing"].astype(bool)
    timing = full[is_timing].drop(columns="timing").reset_index(drop=True)
    df = full[~is_timing].drop(columns="timing").reset_index(drop=True)
    paths = [out / "claims.csv", out / "claims.md", out / "claims.tex", out / "timing_claims.csv",
             out / "timing_claims.md"]
    atomic_call(paths[0], df.to_csv, index=False)  # renamed into place
    atomic_call(paths[3], timing.to_csv, index=False)
    summary, tsummary = counts_text(df), counts_text(timing)
    disp = ledger_display(df, str(res.cfg.get("name", "ours")))
    not_run = [f"{b} ({t}: {why})" for t, bs in sorted(res.not_run.items()) for b, why in sorted(bs.items())]
    md = ["# Claim ledger: the paper's claims against our runs", "", f"{len(df)} claims: {summary}.",
          *([f"Not run, so no claim is scored on them: {'; '.join(not_run)}."] if not_run else []),
          f"{len(timing)} wall-clock claims are in timing_claims.md, with their verdicts: timings depend on the "
          "machine and its load, so nothing of them is counted here (this file is the same on a rerun).", "",
          *rules_text(), "", to_markdown(disp), ""]
    atomic_write_text(paths[1], "\n".join(md) + "\n")
    tmd = ["# Claim ledger: wall-clock claims", "", f"{len(timing)} claims: {tsummary}. Timings: they depend on "
           "the machine and its load (the rest of the ledger is claims.md).", "", *rules_text(), "",
           to_markdown(ledger_display(timing, str(res.cfg.get("name", "ours")))), ""]
    atomic_write_text(paths[4], "\n".join(tmd) + "\n")
    body = pd.DataFrame([[latex_escape(v) for v in rec] for rec in disp.itertuples(index=False)],
                        columns=[latex_escape(c) for c in disp.columns])
    colfmt = "llp{2cm}p{4cm}p{3cm}p{4cm}lp{3cm}lp{4cm}ll"   # one per ledger_display column
    tex = body.to_latex(index=False, escape=False, longtable=True, column_format=colfmt,
                        caption=latex_escape(f"Claim ledger ({summary}). " + " ".join(rules_text())),
                        label="tab:claims")
    atomic_write_text(paths[2], tex)
    return paths
