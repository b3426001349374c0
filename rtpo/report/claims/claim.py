"""What every claim builder shares: a `Claim` (one ledger row before its verdict), the Benjamini-Hochberg
families, the minimal effects, the windows over training steps, and the helpers that map the paper's figure to
our scale (`paper_effect`), find a benchmark, or add the main grid's seeds to an arm (`with_main_seeds`).
One module per section of the paper builds its claims from these (rtpo.report.claims); the verdict engine is
rtpo.report.claims.verdicts, the ledger (evaluation and writing) rtpo.report.ledger."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

from rtpo.experiment import MAIN, Study
from rtpo.report.load import Results, benchmark_label
from rtpo.report.paper_reference import HARDEST_BENCHMARKS, PaperFigure
from rtpo.report.stats import KIND_EMPIRICAL, paired
from rtpo.report.table_base import headline_tasks
from rtpo.report.tables_main import learning_cells

EARLY, LATE, FOURTH, FROM_40 = (0.0, 0.2), (0.8, 1.0), (0.6, 0.8), (0.4, 1.0)

AIRLINE = "airline"

PerSeed = dict[int, float]

# The Benjamini-Hochberg families (a row's `family`): p_zero is adjusted within its family only, so that rows
# that are significant for reasons that say nothing about RTPO against its baselines (trained against
# untrained; levels of RTPO's own runs, e.g. a limitation the paper states) do not lower the adjusted p of the
# comparisons, and adding or dropping a control moves no paper claim's p.
FAMILY_COMPARISON = "trained methods"    # RTPO against a trained baseline, or one RTPO arm against another
FAMILY_UNTRAINED = "against untrained"   # RTPO against the untrained warm start (Vanilla)
FAMILY_LEVEL = "RTPO alone"              # a level, share or change over training of RTPO's own runs
FAMILY_CONTROL = "controls"              # this artifact's controls (source "control*")
FAMILY_TIMING = "wall-clock"             # claims about wall-clock time (timing_claims.*)
FAMILIES = (FAMILY_COMPARISON, FAMILY_UNTRAINED, FAMILY_LEVEL, FAMILY_CONTROL, FAMILY_TIMING)

# The minimal effect (in the claim's unit) an empirical claim is tested against where the paper's figure
# does not map onto our scale: below it an effect is too small to count as the paper's (RULE_EFFECT).
MIN_EFFECT = {"pp": 1.0, "%": 5.0, "calls": 0.5, "tokens": 10.0, "turns": 0.5, "ratio": 0.01,
              "nats/token": 0.01, "syncs": 1.0}


@dataclass(frozen=True)
class Claim:
    """One ledger row before its verdict: `values` = {seed: our effect in `unit`}; the paper's figure and
    the claim's source are `ref`'s (paper_reference.PAPER)."""

    id: str
    ref: PaperFigure
    claim: str
    quantity: str
    unit: str
    values: PerSeed
    rule: str = "direction"          # direction | equivalence
    sign: int = 1                    # direction: the paper's sign of the effect
    center: float = math.nan         # equivalence
    margin: float = math.nan
    evidence: str = ""
    note: str = ""
    timing: bool = False             # a wall-clock claim: written to timing_claims.* (machine-dependent)
    kind: str = KIND_EMPIRICAL       # empirical | structural (stats.KINDS)
    construction: str = ""           # structural: why it holds by construction
    effect: float = math.nan         # empirical: the paper's effect size on our scale (> 0, in `unit`) ...
    effect_basis: str = ""           # ... and how it was mapped (paper_effect); NaN: MIN_EFFECT[unit]
    resolution: float = math.nan     # the step (in `unit`) a per-seed value moves by, where coarser than continuous
    learned: bool | None = None      # a training dynamic: whether the runs it describes learn (False: NOT_MEASURABLE)
    absent: str = ""                 # why the config runs nothing for it (a study left out): verdict NOT_RUN
    family: str = FAMILY_COMPARISON  # its Benjamini-Hochberg family when neither a control nor a timing (FAMILIES)

    @property
    def source(self) -> str:
        return self.ref.source

    @property
    def control(self) -> bool:
        """A row of this artifact's controls (paper_reference "control_*"): a Benjamini-Hochberg family of its
        own, so that adding or dropping a control moves no paper claim's adjusted p-value."""
        return self.ref.source.startswith("control")

    @property
    def paper(self) -> str:
        return self.ref.text

    @property
    def bh_family(self) -> str:
        """The Benjamini-Hochberg family the row's p_zero is adjusted in."""
        if self.timing:
            return FAMILY_TIMING
        return FAMILY_CONTROL if self.control else self.family


def scaled(d: PerSeed, k: float) -> PerSeed:
    return {s: v * k for s, v in d.items()}


def pp_diff(a: PerSeed, b: PerSeed) -> PerSeed:
    """100 (a − b) per seed: a paired difference of two fractions, in percentage points."""
    return scaled(paired(a, b), 100)


def mean_level(d: PerSeed, k: float = 1.0) -> float:
    """The mean over seeds of a per-seed level, times k (NaN without seeds)."""
    return k * sum(d.values()) / len(d) if d else math.nan


def paper_effect(ref: PaperFigure, unit: str, level: float = math.nan, label: str = "",
                 cap: float = math.nan) -> dict[str, Any]:
    """The paper's effect of `ref` on our scale, as Claim(effect=, effect_basis=) keywords ({} where it does not
    map: the row then tests MIN_EFFECT[unit]).

    A relative change (change_unit "%") is taken as is by a row that is itself a percent change, and otherwise
    times our baseline's `level` (the mean over seeds of `label`'s value, in the row's unit): a scale-free
    figure carried to our level, as the paper's +21.5 % over GRPO becomes +21.5 % of our GRPO's pass@1. A rate
    whose two levels the paper gives (`ref.levels`) maps, in a pp row, as the paper's odds ratio applied to our
    level: the same size whichever side of the rate is expressed, never past 0 or 100 %. A rate in percentage
    points cannot gain more than its headroom (100 − level), a count no more than its `cap` leaves (e.g. tool
    calls per trajectory under a turn limit: cap − level). A figure in percentage points (change_unit "pp") is
    taken as is by a pp row: the paper gives no levels to scale it by."""
    c = ref.change
    if math.isnan(c) or c == 0:
        return {}
    if ref.change_unit == "pp":
        if unit != "pp":
            return {}
        return {"effect": abs(c), "effect_basis": f"the paper's {c:+.3g} pp, taken as is (it gives no levels to "
                                                  "scale by)"}
    if unit == "%":
        return {"effect": abs(c), "effect_basis": f"the paper's {c:+.3g} %, the same unit"}
    if math.isnan(level) or level == 0:
        return {}
    if unit == "pp" and ref.levels is not None:
        return _odds_effect(ref.levels, level, label)
    d = abs(c) / 100 * abs(level)
    basis = f"the paper's {c:+.3g} % relative × {label}'s {level:.3g} {'%' if unit == 'pp' else unit} (our mean)"
    if unit == "pp" and c > 0 and d > 100 - level:
        d = 100 - level
        basis += f", capped at the headroom 100 − {level:.3g}"
    if not math.isnan(cap) and c > 0 and d > cap - level:
        d = cap - level
        basis += f", capped at the headroom its cap leaves ({cap:g} − {level:.3g})"
    if not d > 0:
        return {}
    return {"effect": d, "effect_basis": f"{basis} = {d:.3g} {unit}"}


def _logit(p: float) -> float:
    return -math.inf if p <= 0 else math.inf if p >= 1 else math.log(p / (1 - p))


def _odds_effect(levels: tuple[float, float], level: float, label: str) -> dict[str, Any]:
    """The paper's change of a rate, frm -> to (%), as its odds ratio applied to our level (%): |new − level| pp."""
    frm, to = levels
    if not 0 < level < 100:
        return {}
    z = _logit(level / 100) + _logit(to / 100) - _logit(frm / 100)
    new = 100.0 if z == math.inf else 0.0 if z == -math.inf else 100 / (1 + math.exp(-z))
    d = abs(new - level)
    if not d > 0:
        return {}
    ratio = math.exp(_logit(to / 100) - _logit(frm / 100)) if 0 < to < 100 and 0 < frm < 100 else None
    how = f"odds ratio {ratio:.3g}" if ratio is not None else "its odds ratio"
    return {"effect": d, "effect_basis": f"the paper's {frm:g} → {to:g} % as {how} on {label}'s {level:.3g} % "
                                         f"(our mean): {level:.3g} → {new:.3g} % = {d:.3g} pp"}


def _learning(res: Results) -> dict[tuple[str, str], bool]:
    """{(task, method): whether its training reward rises} (table_learning: last fifth − first fifth of the
    steps, 95 % CI over seeds excludes 0 upward); computed once per Results."""
    cache = getattr(res, "_ledger_learning", None)
    if cache is None:
        cache = {}
        try:
            for c in learning_cells(res):
                s = c["summary"]
                if s.n >= 2 and not math.isnan(s.lo):
                    cache[(c["task"], c["method"])] = bool(s.lo > 0)
        except Exception:  # a results tree without the step records the table needs: nothing is known
            cache = {}
        try:
            res._ledger_learning = cache
        except AttributeError:
            pass
    return cache


def learns(res: Results, task: str, method: str) -> bool | None:
    """Whether `method`'s runs on `task` learn (None: not known, e.g. fewer than 2 seeds)."""
    return _learning(res).get((task, method))


def headline(res: Results) -> list[str]:
    """Table 1's tasks (math + search) as far as the config runs them."""
    return headline_tasks(res) or ["math", "search"]


def hardest(res: Results, task: str, scope: str = MAIN, variant: str = "") -> str | None:
    """The hardest benchmark run: the last "-hard" tier (embedded scale), else the paper's hardest."""
    benches = res.benchmarks(task, scope, variant)
    hard = [b for b in benches if b.endswith("-hard")]
    if hard:
        return hard[-1]
    for b in HARDEST_BENCHMARKS.get(task, ()):
        if b in benches:
            return b
    return None


def easiest(res: Results, task: str, scope: str = MAIN, variant: str = "") -> str | None:
    easy = [b for b in res.benchmarks(task, scope, variant) if b.endswith("-easy")]
    return easy[0] if easy else None


def bench_name(b: str | None) -> str:
    return benchmark_label(b) if b else "the hardest tier"


def main_twin(res: Results, study: Study, variant: str, method: str) -> bool:
    """Whether this ablation arm is the main grid's configuration: its runs say they are copies of main runs
    (run.json `copy_of`, rtpo.experiment). Its per-seed values then come from every seed the main grid ran."""
    return res.copies_main(study.name, variant, study.task, method)


def with_main_seeds(res: Results, study: Study, variant: str, method: str, fetch: Callable[..., PerSeed]) -> PerSeed:
    """fetch(scope, variant) of an arm, plus the main grid's seeds when the arm is the main configuration
    (main_twin; a seed both have keeps the arm's value: it is a copy)."""
    own = fetch(study.name, variant)
    if not main_twin(res, study, variant, method):
        return own
    return {**fetch(MAIN, ""), **own}

TRAINED_VS_UNTRAINED = ("trained against untrained: every RL method beats Vanilla here (table01_vs_vanilla), so this "
                        "row says RL training works at this scale, not that RTPO's does better")
TRAINED_VS_UNTRAINED_CALLS = ("trained against untrained: every RL method's tool use differs from Vanilla's (tableG5), so "
                              "this row is about RL training at this scale, not RTPO's in particular")

CONTROL_NOTE = "a control of this artifact, not a claim of the paper"
