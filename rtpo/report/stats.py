"""Seed statistics: mean, std, Student-t 95 % confidence intervals, paired differences, verdicts.

The unit of replication is the training seed (paper §D: "each experiment is repeated three
times"). A seed's value is one number per run (an eval metric, or a reduction over its training
steps); means, sample standard deviations (ddof = 1) and CIs are over those numbers. Differences
between two methods are paired by seed: runs with the same seed share the base model, the order
of training prompts and the evaluation sampling seeds.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Iterable, Mapping

import numpy as np

REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced"
INCONCLUSIVE = "inconclusive"
# empirical, the paper's (mapped) effect size excluded: two outcomes a reader must be able to tell apart
SMALLER = "paper's sign, smaller effect"         # the CI excludes 0 on the paper's side and lies below d
NO_EFFECT = "no effect of the paper's size"      # the CI holds 0 and lies below d
EFFECT_EXCLUDED = (SMALLER, NO_EFFECT)
# empirical, against the paper: the raw 95 % interval lies wholly on the side the paper argues against, but the
# test against zero is not significant once adjusted over its family (adjusted and significant: NOT_REPRODUCED)
OPPOSITE_SIGN = "opposite sign"
AGAINST_PAPER = (NOT_REPRODUCED, OPPOSITE_SIGN)
# empirical: a training dynamic (e.g. "failed trunks get shorter over training") of runs whose training reward
# does not rise: the paper's mechanism presupposes learning, so nothing here can show or refute it
NOT_MEASURABLE = "not measurable at this scale"
NOT_RUN = "not run in this config"               # the config leaves the study out: no runs, counted apart
BY_CONSTRUCTION = "holds (by construction)"      # structural: the data agree with what the design fixes
AGAINST_CONSTRUCTION = "contradicts its construction"  # structural: the data contradict it (an implementation bug)

# what kind of evidence a ledger row is (its `kind` column); counted apart, never pooled
KIND_EMPIRICAL = "empirical"                     # a comparison of trained runs whose outcome the design leaves open
KIND_STRUCTURAL = "structural"                   # holds by construction: never evidence for the paper
KIND_IMPLEMENTATION = "implementation check"     # a simulation against its own closed form (theory rows)
KIND_DERIVATION = "derivation check"             # a simulation against the paper's own expression (theory rows)
KIND_CONTROL = "control"                         # an empirical comparison of this artifact's controls, not a paper claim
KINDS = (KIND_EMPIRICAL, KIND_STRUCTURAL, KIND_IMPLEMENTATION, KIND_DERIVATION, KIND_CONTROL)
VERDICTS = (REPRODUCED, NOT_REPRODUCED, OPPOSITE_SIGN, SMALLER, NO_EFFECT, INCONCLUSIVE, NOT_MEASURABLE, NOT_RUN,
            BY_CONSTRUCTION, AGAINST_CONSTRUCTION)
# how favourable an empirical verdict is to the paper (higher: more): an adjusted verdict never ranks above the
# verdict of its row's raw interval (effect_verdict; tests/test_verdicts.py checks it over random rows)
FAVOUR = {REPRODUCED: 4, SMALLER: 3, INCONCLUSIVE: 2, NO_EFFECT: 1, OPPOSITE_SIGN: 0, NOT_REPRODUCED: 0}
ALPHA = 0.05   # two-sided level of every interval and test (95 % CIs; one-sided tests at ALPHA / 2)


@functools.lru_cache(maxsize=None)
def t_quantile(p: float, df: float) -> float:
    """The p-quantile of Student's t with df degrees of freedom (scipy.stats.t.ppf)."""
    from scipy import stats

    p, df = float(p), float(df)
    if not 0.0 < p < 1.0:
        raise ValueError(f"t_quantile: p must be in (0, 1), got {p}")
    if not df > 0 or math.isinf(df) or math.isnan(df):
        raise ValueError(f"t_quantile: degrees of freedom must be > 0 and finite, got {df}")
    return float(stats.t.ppf(p, df))


def t975(df: int) -> float:
    """t_{0.975, df}, the two-sided 95 % quantile of Student's t (exact for every df: t_quantile)."""
    if df < 1:
        raise ValueError(f"t975: degrees of freedom must be >= 1, got {df}")
    return t_quantile(0.975, df)


@dataclass(frozen=True)
class Summary:
    """mean, sample std (ddof=1) and 95 % t-interval of n values; std/CI are NaN when n < 2."""

    mean: float
    std: float
    n: int
    lo: float
    hi: float
    values: tuple[float, ...]


def summarize(values: Iterable[float]) -> Summary:
    vals = tuple(float(v) for v in values if v is not None and not math.isnan(float(v)))
    n = len(vals)
    if n == 0:
        return Summary(math.nan, math.nan, 0, math.nan, math.nan, vals)
    mean = float(np.mean(vals))
    if n < 2:
        return Summary(mean, math.nan, 1, math.nan, math.nan, vals)
    std = float(np.std(vals, ddof=1))
    half = t975(n - 1) * std / math.sqrt(n)
    return Summary(mean, std, n, mean - half, mean + half, vals)


def paired(a: Mapping[int, float], b: Mapping[int, float]) -> dict[int, float]:
    """{seed: a[seed] - b[seed]} over the seeds both have."""
    return {s: a[s] - b[s] for s in sorted(set(a) & set(b))}


def paired_ratio(a: Mapping[int, float], b: Mapping[int, float]) -> dict[int, float]:
    """{seed: 100 (a/b - 1)} (percent change of a relative to b) over seeds both have, b != 0."""
    return {s: 100.0 * (a[s] / b[s] - 1.0) for s in sorted(set(a) & set(b)) if b[s] != 0}


def relative_gain(a: float, b: float) -> float:
    """100 (a - b) / b, the paper's "x % higher" (NaN when b is 0 or NaN)."""
    if b == 0 or math.isnan(a) or math.isnan(b):
        return math.nan
    return 100.0 * (a - b) / b


# ------------------------------------------------------------------------------------------------
# verdict rules (stated verbatim in the ledger)
# ------------------------------------------------------------------------------------------------

RULE_EFFECT = (
    "effect (empirical claims): the effect is a per-seed number whose sign the paper claims, and d > 0 is the "
    "paper's effect size on our scale (the `expected` column states it and how it was mapped: the paper's "
    "relative change times our baseline's level; for a rate whose two levels the paper gives, the paper's odds "
    "ratio applied to our baseline's level, which is the same whichever side of the rate is expressed; a count "
    "capped at the headroom its cap leaves; the paper's figure as is where it is already in the row's unit; "
    "where the paper gives no figure, a stated minimal effect). Two tests over seeds (Student t): p_zero, "
    "two-sided, that the effect is 0; p_effect, one-sided, that it is at least d on the paper's side. Only "
    "p_zero is Benjamini-Hochberg adjusted, over the row's family (p_zero_bh); p_effect is never adjusted, so "
    "that an adjustment can only move a verdict away from the paper, never towards it. not reproduced if "
    "p_zero_bh < 0.05 with the mean on the opposite side; opposite sign if the raw p_zero < 0.05 with the mean "
    "on the opposite side but p_zero_bh >= 0.05 (the raw 95 % interval lies wholly on the side the paper argues "
    "against); paper's sign, smaller effect if p_zero_bh < 0.05 on the paper's side and p_effect < 0.025 (the "
    "sign is shown, the paper's size is excluded: the upper half of an equivalence / TOST test); reproduced if "
    "p_zero_bh < 0.05 on the paper's side and not p_effect < 0.025; no effect of the paper's size if p_zero_bh "
    ">= 0.05 and p_effect < 0.025; otherwise inconclusive, with the paired seeds a two-sided t-test at 0.05 "
    "would need for 80 % power at d given the seeds' sd (`n80`, unadjusted: what more compute could decide). "
    "Unadjusted, these are the 95 % t-interval's statements (excludes 0, lies below d). A row cannot be "
    "scored, and is inconclusive, with fewer than 2 seeds, with an interval of zero width (every seed the same "
    "value: no spread to test against), or when its quantity moves in steps coarser than d (`resolution`, e.g. "
    "one task of a 16-task probe). A training dynamic of runs whose training reward does not rise "
    "(table_learning: its 95 % CI does not exclude 0) is not measurable at this scale, counted apart.")
RULE_EQUIVALENCE = (
    "equivalence(c ± m): the paper claims the quantity equals c. reproduced if the 95 % t-interval over "
    "seeds lies inside [c - m, c + m]; not reproduced if it lies entirely outside; otherwise inconclusive. "
    "With fewer than 2 seeds: inconclusive.")
RULE_STRUCTURAL = (
    "structural claims hold by construction (the row's note says why): the same rule is applied, but its "
    f"outcome is reported as '{BY_CONSTRUCTION}' (for reproduced), '{AGAINST_CONSTRUCTION}' (for not "
    "reproduced: the implementation does not do what its design fixes) or inconclusive, and never counts as "
    "evidence for or against the paper.")
RULE_THEORY = (
    "theory-check: a numerical check of `rtpo theory` on tabular MDPs (results/theory/theory_checks.csv), "
    f"kind '{KIND_IMPLEMENTATION}' (a simulation against its own closed form) or '{KIND_DERIVATION}' (against "
    "the paper's own expression, the check's name says \"paper's\"). reproduced if |monte_carlo - closed_form| "
    "<= tolerance (z·SE, see theory_checks.md) and any sign the row claims holds (its `holds` column); "
    "inconclusive if the check cannot decide: its tolerance is at least half the closed form's size (the band "
    "would also accept half or one and a half times the value), or it fails but its note says the result is "
    "not a contradiction of the paper (e.g. outside the paper's condition); otherwise not reproduced. Not a "
    "seed statistic: the CI columns are empty and `ours` is the Monte Carlo value.")
THEORY_TOO_WIDE = 0.5   # tolerance / |closed form| from which a theory row cannot decide
NOT_A_CONTRADICTION = ("not a contradiction", "does not contradict")


def zero_width(s: Summary) -> bool:
    """Whether the seeds' values are all the same, up to float rounding (an exact per-seed difference computed
    two ways differs in its last bits: 25.000000000000004 against 25.0)."""
    return not math.isnan(s.std) and s.std <= 1e-9 * max(1.0, abs(s.mean))


def t_pvalues(s: Summary, sign: int, effect: float) -> tuple[float, float]:
    """(p_zero, p_effect) of RULE_EFFECT: the two-sided t-test that the mean is 0, and the one-sided t-test of
    H0 "the effect is at least `effect` on the paper's side" (sign = +1: > 0 claimed, -1: < 0). NaN when the
    interval cannot be formed (n < 2) or has zero width."""
    from scipy import stats

    if s.n < 2 or math.isnan(s.std) or zero_width(s):
        return math.nan, math.nan
    se = s.std / math.sqrt(s.n)
    df = s.n - 1
    p_zero = float(2 * stats.t.sf(abs(s.mean) / se, df))
    p_effect = float(stats.t.cdf((sign * s.mean - effect) / se, df))
    return p_zero, p_effect


def unscorable(s: Summary, effect: float, resolution: float = math.nan) -> str:
    """Why an empirical row cannot be scored (RULE_EFFECT), or "" when it can."""
    if s.n < 2 or math.isnan(s.lo):
        return f"{s.n} seed(s): no interval"
    if zero_width(s):
        return (f"interval of zero width: every seed's value is {s.mean:g}, no spread to test against "
                "(a quantity this coarse cannot resolve the effect)")
    if not math.isnan(resolution) and resolution > effect:
        return (f"resolution {resolution:.3g} coarser than the effect tested ({effect:.3g}): the quantity moves "
                "in steps larger than the effect it would have to show")
    return ""


def effect_verdict(s: Summary, sign: int, effect: float, resolution: float = math.nan,
                   p_zero_adjusted: float | None = None) -> str:
    """RULE_EFFECT: the verdict of an empirical signed claim whose paper effect is `effect` (> 0, in the
    claim's unit, on the paper's side: sign = +1 the paper says the effect is > 0, -1 < 0).

    `p_zero_adjusted` is the test against zero adjusted over the row's family (the ledger passes its
    Benjamini-Hochberg adjustment; default: unadjusted). The test against d is always the raw one, so the
    adjusted verdict is never more favourable to the paper (FAVOUR) than the raw interval's."""
    if sign not in (1, -1):
        raise ValueError(f"sign must be +1 or -1, got {sign}")
    if not effect > 0:
        raise ValueError(f"effect must be > 0 (its size on the paper's side), got {effect}")
    if unscorable(s, effect, resolution):
        return INCONCLUSIVE
    raw_zero, p_effect = t_pvalues(s, sign, effect)
    p_zero = raw_zero if p_zero_adjusted is None else max(p_zero_adjusted, raw_zero)
    below = p_effect < ALPHA / 2
    wrong_side = sign * s.mean < 0
    if p_zero < ALPHA:
        if wrong_side:
            return NOT_REPRODUCED
        return SMALLER if below else REPRODUCED
    if raw_zero < ALPHA and wrong_side:
        return OPPOSITE_SIGN
    return NO_EFFECT if below else INCONCLUSIVE


def seeds_for_power(s: Summary, effect: float, power: float = 0.8, most: int = 100_000) -> float:
    """The fewest paired seeds at which a two-sided one-sample t-test at ALPHA has `power` to detect an effect of
    size `effect` (> 0), taking the seeds' sd as the truth (statsmodels TTestPower.power, searched over n); NaN
    without an sd, or beyond `most`. Unadjusted: a family's adjustment asks for somewhat more."""
    from statsmodels.stats.power import TTestPower

    if s.n < 2 or math.isnan(s.std) or zero_width(s) or not effect > 0:
        return math.nan
    es = effect / s.std

    def enough(n: int) -> bool:
        return float(TTestPower().power(effect_size=es, nobs=n, alpha=ALPHA, alternative="two-sided")) >= power
    hi = 2
    while not enough(hi):
        if hi >= most:
            return math.nan
        hi *= 2
    lo = max(2, hi // 2)
    while lo < hi:   # the smallest n in [lo, hi] with enough power (power rises with n)
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if enough(mid) else (mid + 1, hi)
    return float(lo)


def bh_adjust(pvalues: Iterable[float]) -> list[float]:
    """Benjamini-Hochberg adjusted p-values (statsmodels' multipletests, fdr_bh) of a family; NaN entries (rows
    that are not tested) stay NaN and do not count in the family's size."""
    from statsmodels.stats.multitest import multipletests

    p = [float(x) for x in pvalues]
    idx = [i for i, x in enumerate(p) if not math.isnan(x)]
    out = [math.nan] * len(p)
    if idx:
        adj = multipletests([p[i] for i in idx], method="fdr_bh")[1]
        for i, a in zip(idx, adj):
            out[i] = float(a)
    return out


def structural_verdict(verdict: str) -> str:
    """RULE_STRUCTURAL: the outcome of the direction / equivalence rule for a claim that holds by
    construction: never 'reproduced'."""
    return {REPRODUCED: BY_CONSTRUCTION, NOT_REPRODUCED: AGAINST_CONSTRUCTION}.get(verdict, INCONCLUSIVE)


def theory_kind(check: str) -> str:
    """A theory row's kind: a derivation check when its closed form is the paper's own expression."""
    return KIND_DERIVATION if "paper's" in str(check).lower() else KIND_IMPLEMENTATION


def theory_verdict(closed_form: float, monte_carlo: float, tolerance: float, holds: bool, note: str = "") -> str:
    """RULE_THEORY: reproduced / not reproduced / inconclusive of one row of theory_checks.csv."""
    def bad(x) -> bool:
        return x is None or (isinstance(x, float) and math.isnan(x))
    if bad(monte_carlo):
        return INCONCLUSIVE
    if not bad(closed_form) and not bad(tolerance) and closed_form != 0 \
            and abs(float(tolerance)) >= THEORY_TOO_WIDE * abs(float(closed_form)):
        return INCONCLUSIVE
    if bool(holds):
        return REPRODUCED
    if any(p in str(note).lower() for p in NOT_A_CONTRADICTION):
        return INCONCLUSIVE
    return NOT_REPRODUCED


def direction_verdict(s: Summary, sign: int) -> str:
    """Verdict of a signed claim (sign = +1: paper says effect > 0; -1: < 0)."""
    if sign not in (1, -1):
        raise ValueError(f"sign must be +1 or -1, got {sign}")
    if s.n < 2 or math.isnan(s.lo):
        return INCONCLUSIVE
    lo, hi = s.lo * sign, s.hi * sign
    if sign < 0:
        lo, hi = hi, lo
    if lo > 0:
        return REPRODUCED
    if hi < 0:
        return NOT_REPRODUCED
    return INCONCLUSIVE


def equivalence_verdict(s: Summary, center: float, margin: float) -> str:
    if s.n < 2 or math.isnan(s.lo):
        return INCONCLUSIVE
    if center - margin <= s.lo and s.hi <= center + margin:
        return REPRODUCED
    if s.hi < center - margin or s.lo > center + margin:
        return NOT_REPRODUCED
    return INCONCLUSIVE


# ------------------------------------------------------------------------------------------------
# evaluation-level statistics: problems x samples (the unit below the seed)
# ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ProblemSummary:
    """The seed-mean of a macro average over benchmarks of per-problem values (a problem's pass@1, or
    a paired difference of two methods' pass@1 on it), with its standard error over problems and
    samples: the trained models of each seed held fixed, so it measures how precisely the evaluation
    pins the number down, not how much a retrained seed would move it (that is the seed SE).

        mean = 1/S sum_s 1/B sum_b mean_i x[s, b, i]
        se^2 = 1/(S B)^2 sum_s sum_b var_i(x[s, b, i]) / n[s, b]       (var with ddof = 1)
        95 % CI = mean ± t(0.975, sum (n[s, b] - 1)) se
    """

    mean: float
    se: float
    df: int
    lo: float
    hi: float
    n_seeds: int
    n_problems: int   # problem-seed pairs


def problem_summary(cells: Mapping[int, Mapping[str, Mapping[str, float]]]) -> ProblemSummary:
    """cells = {seed: {benchmark: {problem: value}}}. Seeds that lack a benchmark some other seed has
    are left out (as Results.eval_macro_by_seed does); benchmarks with one problem add no variance."""
    nan = ProblemSummary(math.nan, math.nan, 0, math.nan, math.nan, 0, 0)
    if not cells:
        return nan
    benches = set().union(*(set(c) for c in cells.values()))
    seeds = [s for s in sorted(cells) if set(cells[s]) == benches and all(cells[s][b] for b in benches)]
    if not seeds:
        return nan
    S, B = len(seeds), len(benches)
    mean = var = 0.0
    df = n = 0
    for s in seeds:
        for b in sorted(benches):
            x = np.array([cells[s][b][p] for p in sorted(cells[s][b])], dtype=float)
            mean += float(x.mean()) / (S * B)
            n += len(x)
            if len(x) > 1:
                var += float(x.var(ddof=1)) / len(x) / (S * B) ** 2
                df += len(x) - 1
    se = math.sqrt(var)
    if df < 1:
        return ProblemSummary(mean, math.nan, 0, math.nan, math.nan, S, n)
    half = t975(df) * se
    return ProblemSummary(mean, se, df, mean - half, mean + half, S, n)


def paired_cells(a: Mapping[int, Mapping[str, Mapping[str, float]]],
                 b: Mapping[int, Mapping[str, Mapping[str, float]]]) -> dict[int, dict[str, dict[str, float]]]:
    """{seed: {benchmark: {problem: a - b}}} over the (seed, benchmark, problem) triples both have: the
    difference of two methods paired by evaluation problem and seed (same seed = same base model, same
    training-prompt order and the same evaluation sampling seeds per problem)."""
    out: dict[int, dict[str, dict[str, float]]] = {}
    for s in sorted(set(a) & set(b)):
        for bench in sorted(set(a[s]) & set(b[s])):
            common = sorted(set(a[s][bench]) & set(b[s][bench]))
            if common:
                out.setdefault(s, {})[bench] = {p: a[s][bench][p] - b[s][bench][p] for p in common}
    return out


def se_over_seeds(values: Iterable[float]) -> float:
    """Standard error of the seed mean, std (ddof = 1) / sqrt(n); NaN with fewer than 2 seeds."""
    s = summarize(values)
    return s.std / math.sqrt(s.n) if s.n >= 2 else math.nan
