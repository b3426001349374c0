"""The verdict engine: one ledger row per claim, its seed summary, its two t-tests and its verdict by the
rule of its kind (stats.RULE_EFFECT, RULE_EQUIVALENCE, RULE_STRUCTURAL), with p_zero Benjamini-Hochberg
adjusted within the claim's family (`evaluate_family`). Every section's claims go through it
(rtpo.report.ledger.evaluate_claims)."""

from __future__ import annotations

import math
from typing import Any

from rtpo.report.claims.claim import Claim, MIN_EFFECT
from rtpo.report.paper_reference import PAPER_COL
from rtpo.report.stats import (
    INCONCLUSIVE, KIND_CONTROL, KIND_EMPIRICAL, KIND_STRUCTURAL, NOT_MEASURABLE, NOT_RUN, bh_adjust,
    direction_verdict, effect_verdict, equivalence_verdict, seeds_for_power, structural_verdict, summarize,
    t_pvalues, unscorable,
)

# why a row's dynamic needs runs that learn (NOT_MEASURABLE)
NEEDS_LEARNING = ("a training dynamic the paper explains by the policy getting better at the task (or, for a late "
                  "decline, over-optimising after a peak); these runs' training reward does not rise (table_learning: "
                  "its 95 % CI over seeds does not exclude 0), so nothing here can show or refute it")


def evaluate_family(claims: list[Claim], not_run: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The ledger rows of a family of claims: p_zero Benjamini-Hochberg adjusted over the family's scored
    empirical rows (RULE_EFFECT), the verdicts taken from the adjusted p_zero and the raw p_effect."""
    raw = [evaluate_claim(c, not_run) for c in claims]
    adj_zero = bh_adjust([r["p_zero"] for r in raw])
    return [evaluate_claim(c, not_run, z) if not math.isnan(z) else r for c, r, z in zip(claims, raw, adj_zero)]


def evaluate_claim(c: Claim, not_run: dict[str, Any] | None = None, p_zero_bh: float | None = None) -> dict[str, Any]:
    """One ledger row of a claim: its seed summary and its verdict by rule and kind (RULE_EFFECT for an
    empirical signed claim, RULE_EQUIVALENCE, RULE_STRUCTURAL for a structural one). `p_zero_bh`: the row's
    p_zero adjusted over its family (evaluate_family); alone, a row is a family of one."""
    d = c.values
    s = summarize(d.values())
    if c.kind not in (KIND_EMPIRICAL, KIND_STRUCTURAL, KIND_CONTROL):
        raise ValueError(f"claim {c.id}: kind {c.kind!r} is not empirical, structural or control")
    note = c.note
    p_zero = p_effect = n80 = math.nan
    if c.absent:  # nothing ran: neither evidence nor an open question of these runs
        verdict = NOT_RUN
        note = f"{NOT_RUN}: {c.absent}" + (f"; {note}" if note else "")
    elif c.rule == "equivalence":
        verdict = equivalence_verdict(s, c.center, c.margin)
    elif c.kind == KIND_STRUCTURAL:
        verdict = direction_verdict(s, c.sign)
    elif c.learned is False:
        verdict = NOT_MEASURABLE
        note = f"not measurable: {NEEDS_LEARNING}" + (f"; {note}" if note else "")
    else:
        effect = effect_of(c)[0]
        why = unscorable(s, effect, c.resolution)
        if not why:
            p_zero, p_effect = t_pvalues(s, c.sign, effect)
        elif s.n >= 2:
            note = (note + "; " if note else "") + f"cannot be scored: {why}"
        if not why and not (math.isnan(p_zero) or math.isnan(p_effect)):
            verdict = effect_verdict(s, c.sign, effect, c.resolution, p_zero if p_zero_bh is None else p_zero_bh)
        else:
            verdict = INCONCLUSIVE
        if verdict == INCONCLUSIVE:
            n80 = seeds_for_power(s, effect)
            if not math.isnan(n80):
                note = (note + "; " if note else "") + (
                    f"{_undecided(s, p_zero, p_zero_bh)}; ~{n80:.0f} paired seeds for 80 % power at "
                    f"{effect:.3g} {c.unit} (sd {s.std:.3g} over these {s.n})")
    if p_zero_bh is None:
        p_zero_bh = p_zero
    if c.kind == KIND_STRUCTURAL:
        verdict = structural_verdict(verdict)
        note = f"by construction: {c.construction}" + (f"; {note}" if note else "")
    if s.n == 0 and not c.note and not c.absent:
        note += ("; " if note else "") + "no runs or no values for this comparison"
    if s.n == 0 and not_run and not c.absent:  # e.g. the deep-search benchmarks without a web-search key
        note += "; not run: " + ", ".join(f"{b} ({t})" for t, bs in sorted(not_run.items()) for b in sorted(bs))
    elif s.n == 1:
        note = (note + "; " if note else "") + "one seed: no interval"
    return {"claim_id": c.id, "kind": c.kind, "family": c.bh_family if c.kind != KIND_STRUCTURAL else "",
            "source": c.source, "claim": c.claim, PAPER_COL: c.paper,
            "quantity": c.quantity, "unit": c.unit, "expected": _expected(c), "rule": c.rule,
            "ours_mean": s.mean, "ci95_lo": s.lo, "ci95_hi": s.hi, "n": s.n, "p_zero": p_zero, "p_effect": p_effect,
            "p_zero_bh": p_zero_bh if not math.isnan(p_zero) else math.nan, "n80": n80,
            "seeds": ";".join(map(str, d)), "values": ";".join(repr(float(v)) for v in d.values()),
            "verdict": verdict, "evidence": c.evidence, "note": note, "timing": c.timing}


def _undecided(s, p_zero: float, p_zero_bh: float | None) -> str:
    """Why an inconclusive row did not decide, in words."""
    if not math.isnan(p_zero) and p_zero < 0.05 and p_zero_bh is not None and p_zero_bh >= 0.05:
        return f"its raw interval excludes 0, not once adjusted (BH p {p_zero_bh:.2g})"
    return "its interval holds both 0 and the tested effect"


def effect_of(c: Claim) -> tuple[float, str]:
    """(d, how it was mapped): the effect size RULE_EFFECT tests an empirical claim against."""
    if not math.isnan(c.effect):
        return c.effect, c.effect_basis
    d = MIN_EFFECT.get(c.unit, 1.0)
    return d, f"no paper figure mapped to our scale: minimal effect {d:g} {c.unit}"


def _expected(c: Claim) -> str:
    if c.rule == "equivalence":
        return f"= {c.center:g} ± {c.margin:g}"
    head = "> 0" if c.sign > 0 else "< 0"
    if c.kind == KIND_STRUCTURAL:
        return head
    d, basis = effect_of(c)
    return f"{head}; paper's effect {'+' if c.sign > 0 else '−'}{d:.3g} {c.unit} ({basis})"
