"""The claim ledger: one row per claim of the paper, its figure, ours, and a verdict by a stated rule.

Claims come from the digest's §4 (main results, consistency, credit assignment, drift), §F (F.1
tool use, F.2 ratio dynamics), §G (G.1-G.7, G.9) and the theorem checks of `rtpo theory`; one small
builder per section below (registry `SECTIONS`, in ledger order), each returning its claims. Each row:

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from rtpo.atomic import atomic_call, atomic_write_text
from rtpo.experiment import MAIN, Study
from rtpo.report.load import Results, benchmark_label
from rtpo.report.paper_reference import HARDEST_BENCHMARKS, PAPER, PAPER_COL, PaperFigure
from rtpo.report.stats import (
    EFFECT_EXCLUDED, INCONCLUSIVE, KIND_CONTROL, KIND_DERIVATION, KIND_EMPIRICAL, KIND_IMPLEMENTATION, KIND_STRUCTURAL,
    KINDS,
    NO_EFFECT, NOT_MEASURABLE, NOT_REPRODUCED, NOT_RUN, OPPOSITE_SIGN, REPRODUCED, RULE_EFFECT, RULE_EQUIVALENCE,
    RULE_STRUCTURAL, RULE_THEORY, SMALLER, VERDICTS, bh_adjust, direction_verdict, effect_verdict, equivalence_verdict,
    paired, paired_ratio, seeds_for_power, structural_verdict, summarize, t_pvalues, theory_kind, theory_verdict,
    unscorable,
)
from rtpo.report.table_base import headline_tasks, latex_escape, method_label, to_markdown
from rtpo.report.tables_main import learning_cells
from rtpo.report.tables_studies import hit_metric

EARLY, LATE, FOURTH, FROM_40 = (0.0, 0.2), (0.8, 1.0), (0.6, 0.8), (0.4, 1.0)
NO_MISMATCH = 1e-6   # nats/token: a KL(rollout‖train) below this is float rounding (fp32 kernels), not a mismatch
RATIO_MARGIN = 0.02  # equivalence margin of "the ratio stays at 1.0" (GRPO's recovered 0.97 is outside it)
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

# why a structural claim holds by construction (its note says so)
BY_DESIGN_RATIO = ("RTPO samples and scores with the same context ids and the same fp32 kernels, so its ratio is 1 "
                   "up to float rounding; the paper's caveat (training–inference engine differences) cannot arise")
BY_DESIGN_KL = ("the k3 KL estimator is >= 0 per token and RTPO's KL is ~0 (same ids and kernels at rollout and "
                "training), so this difference cannot be negative")
BY_DESIGN_SYNCS = "the number of weight syncs per step is set by the sync schedule in the config"
BY_DESIGN_TOKENS = "a larger G generates more siblings per trunk, hence more tokens"
BY_DESIGN_GEO = ("geo_ratio = exp(mean log(p_train / p_rollout)) over tokens sampled from the rollout policy: its log is "
                 "minus the k1 estimate of KL(rollout‖train), > 0 in expectation for any mismatch, so GRPO's geometric "
                 "ratio is below 1 whenever its KL rows are positive (the arithmetic ratio_mean has expectation 1 under "
                 "any mismatch and cannot show it); the mismatch that can move is its recovery, F.2-recovery-grpo")
BY_DESIGN_JITTER = ("RTPO's ratio is 1 up to float rounding (4.2-ratio-rtpo), so its std over steps is ~0, and any "
                    "mismatch gives SeeUPO's a positive std; the SeeUPO-specific claim is F.2-seeupo-jitter-grpo")
BY_DESIGN_G2 = ("a row has zero advantage iff its G siblings' binary returns are all equal, and 'all G + 1 equal' implies "
                "'the first G equal', so for exchangeable siblings the zero-advantage fraction cannot rise with G "
                "(G = 2 above G = 3) except by sampling noise; the paper's reason, the (G − 2)/(G − 1) factor, is "
                "theory-08/09's")
# why a row's dynamic needs runs that learn (NOT_MEASURABLE)
NEEDS_LEARNING = ("a training dynamic the paper explains by the policy getting better at the task (or, for a late "
                  "decline, over-optimising after a peak); these runs' training reward does not rise (table_learning: "
                  "its 95 % CI over seeds does not exclude 0), so nothing here can show or refute it")


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


# ------------------------------------------------------------------------------------------------
# helpers shared by the builders
# ------------------------------------------------------------------------------------------------

def _scale(d: PerSeed, k: float) -> PerSeed:
    return {s: v * k for s, v in d.items()}


def _pp(a: PerSeed, b: PerSeed) -> PerSeed:
    """100 (a − b) per seed: a paired difference of two fractions, in percentage points."""
    return _scale(paired(a, b), 100)


def _level(d: PerSeed, k: float = 1.0) -> float:
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


def probe_resolution(res: Results, task: str, method: str, window: tuple[float, float]) -> float:
    """The step (pp) a per-seed mean of the online-success probe over `window` moves by: one task of the
    held-out probe at one of its readings in the window (train.heldout_prompts tasks; NaN when the runs
    recorded no probe, or have no steps)."""
    if res.online_column(task) != "heldout_success":
        return math.nan
    n_tasks = int((res.cfg.get("train") or {}).get("heldout_prompts") or 0)
    df = res.step_rows(MAIN, "", task, method)
    if not n_tasks or df.empty:
        return math.nan
    from rtpo.report.load import select_window

    readings = [int(select_window(g.sort_values("step"), window)["heldout_success"].notna().sum())
                for _, g in df.groupby("seed")]
    r = min(readings) if readings else 0
    return 100.0 / (n_tasks * r) if r else math.nan


def _headline(res: Results) -> list[str]:
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


def _bench(b: str | None) -> str:
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


# ------------------------------------------------------------------------------------------------
# one builder per section of the paper
# ------------------------------------------------------------------------------------------------

def main_results(res: Results) -> list[Claim]:
    """§4.1, Table 1: RTPO's overall accuracy (pass@1 averaged over the headline benchmarks) against
    every baseline."""
    head = _headline(res)
    rtpo = res.eval_macro_by_seed(head, "rtpo", "pass@1")
    out = []
    for m, ref in (("vanilla", "gain_vs_vanilla"), ("grpo", "gain_vs_grpo"), ("seeupo", "gain_vs_seeupo"),
                   ("tree_grpo", "beats_tree_grpo"), ("arpo", "beats_arpo")):
        base = res.eval_macro_by_seed(head, m, "pass@1")
        out.append(Claim(
            f"4.1-{m}", PAPER[ref], f"RTPO achieves higher overall accuracy than {method_label(m)}",
            f"RTPO − {method_label(m)}: pass@1 averaged over the {'+'.join(head)} benchmarks", "pp",
            _pp(rtpo, base), evidence="table01_main, table01_gains",
            note=TRAINED_VS_UNTRAINED if m == "vanilla" else "",
            family=FAMILY_UNTRAINED if m == "vanilla" else FAMILY_COMPARISON,
            **paper_effect(PAPER[ref], "pp", _level(base, 100), method_label(m))))
    return out


TRAINED_VS_UNTRAINED = ("trained against untrained: every RL method beats Vanilla here (table01_vs_vanilla), so this "
                        "row says RL training works at this scale, not that RTPO's does better")
TRAINED_VS_UNTRAINED_CALLS = ("trained against untrained: every RL method's tool use differs from Vanilla's (tableG5), so "
                              "this row is about RL training at this scale, not RTPO's in particular")


def tool_use(res: Results) -> list[Claim]:
    """§F.1: RTPO's lead on the hardest math tier, its fewer Python calls there, more search calls."""
    ev = res.eval_by_seed
    hm = hardest(res, "math")
    out = []
    for m, ref in (("seeupo", "aime24_vs_seeupo"), ("grpo", "aime24_vs_grpo")):
        base = ev("math", m, hm, "pass@1") if hm else {}
        out.append(Claim(
            f"F.1-hard-{m}", PAPER[ref], f"RTPO leads {method_label(m)} on the hardest math benchmark",
            f"RTPO − {method_label(m)}: pass@1 on {_bench(hm)}", "pp",
            _pp(ev("math", "rtpo", hm, "pass@1"), base) if hm else {},
            evidence="table01_main", note="" if hm else "no math evaluation",
            **paper_effect(PAPER[ref], "pp", _level(base, 100), method_label(m))))
    van = ev("math", "vanilla", hm, "tool_calls_per_traj") if hm else {}
    out.append(Claim(
        "F.1-math-calls", PAPER["aime24_python_calls"], "RTPO uses fewer tool calls than Vanilla on hard math",
        f"Vanilla − RTPO: tool calls per trajectory on {_bench(hm)}", "calls",
        paired(van, ev("math", "rtpo", hm, "tool_calls_per_traj")) if hm else {}, evidence="tableG5_tool_use",
        family=FAMILY_UNTRAINED, note=TRAINED_VS_UNTRAINED_CALLS,
        **paper_effect(PAPER["aime24_python_calls"], "calls", _level(van), "Vanilla")))
    grpo_calls = ev("search", "grpo", "overall", "tool_calls_per_traj")
    turns = float(((res.cfg.get("env") or {}).get("search") or {}).get("max_turns", math.nan))
    out.append(Claim(
        "F.1-search-calls", PAPER["search_calls"], "RTPO issues more search calls than GRPO on knowledge tasks",
        "RTPO − GRPO: tool calls per trajectory, search evaluation (all samples)", "calls",
        paired(ev("search", "rtpo", "overall", "tool_calls_per_traj"), grpo_calls), evidence="tableG5_tool_use",
        note=f"a trajectory makes at most one call a turn: search's turn limit {turns:g} caps the effect" if turns == turns
        else "", **paper_effect(PAPER["search_calls"], "calls", _level(grpo_calls), "GRPO", cap=turns)))
    return out


def consistency(res: Results) -> list[Claim]:
    """§4.2, Figure 3 and §F.2: RTPO's rollout–training ratio stays at 1 and its KL is the lowest;
    GRPO's ratio stays below 1; SeeUPO's jitters."""
    st = res.steps_by_seed
    grpo_ratio = {"math": PAPER["ratio_grpo_math"], "search": PAPER["ratio_grpo_search"]}
    out = []
    for t in _headline(res):
        out.append(Claim(
            f"4.2-ratio-rtpo-{t}", PAPER["ratio_rtpo"], f"RTPO keeps the rollout–training ratio at 1.0 ({t})",
            "RTPO: mean over training steps of ratio_mean", "ratio", st(t, "rtpo", "ratio_mean"),
            rule="equivalence", center=PAPER["ratio_rtpo"].value, margin=RATIO_MARGIN,
            evidence="fig03_consistency", kind=KIND_STRUCTURAL, construction=BY_DESIGN_RATIO))
        out.append(Claim(
            f"4.2-ratio-grpo-{t}", grpo_ratio.get(t, PAPER["ratio_grpo_other"]),
            f"GRPO's ratio stays below 1 under psi ≠ full ({t})",
            "1 − GRPO's geometric-mean ratio (geo_ratio), mean over training steps", "ratio",
            {s: 1 - v for s, v in st(t, "grpo", "geo_ratio").items()}, evidence="fig03_consistency",
            kind=KIND_STRUCTURAL, construction=BY_DESIGN_GEO))
        early_kl = st(t, "grpo", "kl_rollout_train", window=EARLY)
        psi = str(((res.cfg.get("env") or {}).get(t) or {}).get("psi", "full"))
        ref = PAPER[f"recovery_grpo_{t}"] if f"recovery_grpo_{t}" in PAPER else PAPER["ratio_grpo_other"]
        note = ("the paper's ratio 1 − r read as the mismatch; KL is a property of the weights, which move whether "
                "or not the training reward rises (every method's pass@1 is above the warm start), so this dynamic "
                "does not presuppose learning")
        if psi == "full" or _level(early_kl) < NO_MISMATCH:
            # GRPO samples and trains on the same context (psi = full), or this model's psi drops nothing it
            # attends to: a mismatch of float noise has nothing to recover from
            note = (f"no mismatch to recover on {t}: psi = {psi}, GRPO's first-fifth KL "
                    f"{_level(early_kl):.2g} nats/token (below {NO_MISMATCH:g})")
            early_kl = {}
        out.append(Claim(
            f"F.2-recovery-grpo-{t}", ref, f"GRPO's rollout–training mismatch recovers over training ({t})",
            "GRPO: KL(rollout‖train), first fifth of steps − last fifth", "nats/token",
            paired(early_kl, st(t, "grpo", "kl_rollout_train", window=LATE)), evidence="fig03_consistency",
            note=note, **paper_effect(ref, "nats/token", _level(early_kl), "GRPO's first-fifth KL")))
        for m in ("grpo", "seeupo"):
            out.append(Claim(
                f"4.2-kl-{m}-{t}", PAPER["kl_lowest"], f"RTPO has lower rollout–training KL than "
                f"{method_label(m)} ({t})", f"{method_label(m)} − RTPO: KL(rollout‖train) averaged over training "
                "steps", "nats/token", paired(st(t, m, "kl_rollout_train"), st(t, "rtpo", "kl_rollout_train")),
                evidence="fig03_consistency", kind=KIND_STRUCTURAL, construction=BY_DESIGN_KL))
    out.append(Claim(
        "F.2-seeupo-jitter", PAPER["seeupo_jitter"], "SeeUPO's ratio fluctuates step to step; RTPO's does not "
        "(math)", "SeeUPO − RTPO: std over training steps of ratio_mean", "ratio",
        paired(st("math", "seeupo", "ratio_mean", "std"), st("math", "rtpo", "ratio_mean", "std")),
        evidence="fig03_consistency", kind=KIND_STRUCTURAL, construction=BY_DESIGN_JITTER))
    out.append(Claim(
        "F.2-seeupo-jitter-grpo", PAPER["seeupo_jitter"], "SeeUPO's ratio fluctuates more step to step than "
        "GRPO's (math)", "SeeUPO − GRPO: std over training steps of geo_ratio", "ratio",
        paired(st("math", "seeupo", "geo_ratio", "std"), st("math", "grpo", "geo_ratio", "std")),
        evidence="fig03_consistency", note="both score every token under the full history, so neither's jitter is "
                                           "fixed by construction; the paper gives a spike, not a size"))
    return out


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
            values = _pp(res.eval_macro_by_seed([ca.task], "rtpo_ca", "pass@1", ca.name, v),
                         res.eval_macro_by_seed([ca.task], m, "pass@1", ca.name, v))
        out.append(Claim(
            f"4.3-{m}", PAPER["rtpo_ca_best"], f"under full-history rollouts RTPO-CA beats {method_label(m)}",
            f"RTPO-CA − {method_label(m)}: pass@1 averaged over the math benchmarks (psi = full)", "pp", values,
            evidence="table02_credit_assignment", absent="" if ca else "study credit_assignment absent from the config"))
    return out


def policy_drift(res: Results) -> list[Claim]:
    """§4.4, Table 3 (§F.3): on-policy continuation beats off-policy continuation (study continuation),
    most on the longest horizons."""
    co = res.studies.get("continuation")
    if co is None or len(co.variants) < 2:
        return [Claim("4.4-average", PAPER["on_policy_gain"], "on-policy continuation beats off-policy continuation",
                      "on − off output-hit", "pp", {}, evidence="table03_continuation",
                      absent="study continuation absent from the config")]
    on, off = co.variant_names()[0], co.variant_names()[1]
    metric, m = hit_metric(res, co.task, co.name), co.methods[0]

    def on_minus_off(b: str | None) -> PerSeed:
        """{seed: on − off} of `metric` on benchmark b ("average": the macro average over the benchmarks)."""
        if b is None:
            return {}

        def arm(v: str) -> PerSeed:
            if b == "average":
                return with_main_seeds(res, co, v, m, lambda sc, va: res.eval_macro_by_seed([co.task], m, metric, sc, va))
            return with_main_seeds(res, co, v, m, lambda sc, va: res.eval_by_seed(co.task, m, b, metric, sc, va))
        return paired(arm(on), arm(off))
    hb, eb = hardest(res, co.task, co.name, on), easiest(res, co.task, co.name, on)
    out = [
        Claim("4.4-average", PAPER["on_policy_gain"], "on-policy continuation beats off-policy continuation",
              f"{on} − {off}: {metric} averaged over the {co.task} benchmarks", "pp",
              _scale(on_minus_off("average"), 100), evidence="table03_continuation",
              **paper_effect(PAPER["on_policy_gain"], "pp")),
        Claim("4.4-hardest", PAPER["on_policy_longest"], "on-policy continuation helps most on the longest horizons",
              f"{on} − {off}: {metric} on {_bench(hb)}", "pp", _scale(on_minus_off(hb), 100),
              evidence="table03_continuation", **paper_effect(PAPER["on_policy_longest"], "pp")),
    ]
    if hb and eb:
        out.append(Claim(
            "4.4-horizon-trend", PAPER["on_policy_trend"], "the on-policy gain grows with the horizon",
            f"gain on {benchmark_label(hb)} − gain on {benchmark_label(eb)} ({metric})", "pp",
            _pp(on_minus_off(hb), on_minus_off(eb)), evidence="table03_continuation",
            **paper_effect(PAPER["on_policy_trend"], "pp")))
    return out


def airline(res: Results) -> list[Claim]:
    """§G.1, Tables 7-9 (τ3-airline): evaluation accuracy, termination, length, tool errors, tokens per
    success, and online success over training."""
    def ev(m: str, metric: str) -> PerSeed:
        return res.eval_by_seed(AIRLINE, m, "overall", metric)

    def online(m: str, window: tuple[float, float]) -> PerSeed:
        return res.steps_by_seed(AIRLINE, m, res.online_column(AIRLINE), window=window)
    k = res.eval_k()
    out = []
    for m in ("grpo", "tree_grpo"):
        out.append(Claim(
            f"G.1-pass1-{m}", PAPER["airline_pass1"], f"RTPO has higher airline pass@1 than {method_label(m)}",
            f"RTPO − {method_label(m)}: airline pass@1", "pp", _pp(ev("rtpo", "pass@1"), ev(m, "pass@1")),
            evidence="table08_airline_eval"))
    out += [
        Claim("G.1-passk-tree_grpo", PAPER["airline_pass4"], "RTPO has higher airline pass@4 than Tree-GRPO",
              f"RTPO − Tree-GRPO: airline pass@{k}", "pp", _pp(ev("rtpo", "pass@k"), ev("tree_grpo", "pass@k")),
              evidence="table08_airline_eval", note="" if k == 4 else f"our k = {k} (eval.samples)"),
        Claim("G.1-truncation", PAPER["airline_truncation"], "RTPO truncates less (terminates normally more "
              "often) than Tree-GRPO", "RTPO − Tree-GRPO: airline truncation rate", "pp",
              _pp(ev("rtpo", "truncation_rate"), ev("tree_grpo", "truncation_rate")), sign=-1,
              evidence="table08_airline_eval", note="one row for one quantity: an episode here either terminates "
              "normally or is truncated, so the paper's higher normal-termination rate (Table 8) is this row mirrored",
              **paper_effect(PAPER["airline_truncation"], "pp", _level(ev("tree_grpo", "truncation_rate"), 100),
                             "Tree-GRPO")),
        Claim("G.1-length", PAPER["airline_length"], "RTPO's responses are shorter than Tree-GRPO's",
              "RTPO − Tree-GRPO: airline response tokens per trajectory", "tokens",
              paired(ev("rtpo", "response_tokens"), ev("tree_grpo", "response_tokens")), sign=-1,
              evidence="table08_airline_eval",
              **paper_effect(PAPER["airline_length"], "tokens", _level(ev("tree_grpo", "response_tokens")),
                             "Tree-GRPO")),
        Claim("G.1-tool-errors", PAPER["airline_tool_errors"], "RTPO makes fewer tool-error calls",
              "RTPO − GRPO: tool-error calls per trajectory at evaluation", "calls",
              paired(_errors_per_traj(res, "rtpo"), _errors_per_traj(res, "grpo")), sign=-1,
              evidence="table09_airline_tools", note="compared against GRPO",
              **paper_effect(PAPER["airline_tool_errors"], "calls", _level(_errors_per_traj(res, "grpo")), "GRPO")),
        Claim("G.1-exec-success", PAPER["airline_exec_success"], "RTPO's tool calls execute successfully more often",
              "RTPO − GRPO: airline tool execution success", "pp",
              _pp(ev("rtpo", "tool_success_rate"), ev("grpo", "tool_success_rate")),
              evidence="table09_airline_tools", note="compared against GRPO",
              **paper_effect(PAPER["airline_exec_success"], "pp", _level(ev("grpo", "tool_success_rate"), 100),
                             "GRPO")),
    ]
    for m in ("tree_grpo", "grpo"):
        out.append(Claim(
            f"G.1-tps-{m}", PAPER[f"airline_tps_vs_{m}"], f"RTPO needs fewer response tokens per success than "
            f"{method_label(m)}", f"percent change of RTPO's airline tokens per success vs {method_label(m)}", "%",
            paired_ratio(ev("rtpo", "tokens_per_success"), ev(m, "tokens_per_success")), sign=-1,
            evidence="table09_airline_tools", **paper_effect(PAPER[f"airline_tps_vs_{m}"], "%")))
    for m in ("grpo", "tree_grpo"):
        out.append(Claim(
            f"G.1-online-{m}", PAPER["airline_online"], f"RTPO's online success beats {method_label(m)} from the "
            "early phase onward", f"RTPO − {method_label(m)}: online success ({res.online_column(AIRLINE)}), mean over the last 60 % of steps",
            "pp", _pp(online("rtpo", FROM_40), online(m, FROM_40)), evidence="table07_airline_online",
            resolution=probe_resolution(res, AIRLINE, "rtpo", FROM_40)))
    fourth = online("rtpo", FOURTH)
    learned = learns(res, AIRLINE, "rtpo")   # a decline after a peak: the paper's over-optimisation
    out.append(Claim(
        "G.1-late-decline", PAPER["airline_late_decline"], "RTPO's online success declines at the end of training",
        f"RTPO: online success ({res.online_column(AIRLINE)}) over the last fifth of steps − over the fourth fifth", "pp",
        _pp(online("rtpo", LATE), fourth), sign=-1, evidence="table07_airline_online", family=FAMILY_LEVEL,
        resolution=probe_resolution(res, AIRLINE, "rtpo", LATE), learned=learned,
        **paper_effect(PAPER["airline_late_decline"], "pp", _level(fourth, 100), "RTPO's fourth-fifth")))
    return out


def _errors_per_traj(res: Results, m: str) -> PerSeed:
    calls = res.eval_by_seed(AIRLINE, m, "overall", "tool_calls_per_traj")
    rate = res.eval_by_seed(AIRLINE, m, "overall", "tool_success_rate")
    out = {}
    for s, c in calls.items():
        if c == 0:
            out[s] = 0.0
        elif s in rate:
            out[s] = c * (1 - rate[s])
    return out


def group_size(res: Results) -> list[Claim]:
    """§G.2, Tables 10-11 and §G.9 (study group_size): a larger sibling group G lowers the zero-advantage
    fraction and raises pass@1 at a higher training cost; G = 2 degenerates."""
    gs = res.studies.get("group_size")
    lo_hi = _group_pair(res, gs) if gs else None
    if gs is None or lo_hi is None:
        return [Claim("G.2-zero-adv", PAPER["g_zero_adv"], "a larger G lowers the zero-advantage fraction",
                      "larger − smaller G: zero_adv_frac", "pp", {}, sign=-1, evidence="table10_group_size",
                      note="fewer than two group sizes in the config")]
    lo, hi = lo_hi
    m = gs.methods[0]

    def ev(v: str, metric: str) -> PerSeed:
        return with_main_seeds(res, gs, v, m, lambda sc, va: res.eval_by_seed(gs.task, m, "overall", metric, sc, va))

    def st(v: str, col: str, red: str = "mean") -> PerSeed:
        return with_main_seeds(res, gs, v, m, lambda sc, va: res.steps_by_seed(gs.task, m, col, red, sc, va))
    pair = f"{hi} vs {lo}"
    level = PAPER["g_zero_adv_level"]
    out = [
        Claim("G.2-zero-adv", PAPER["g_zero_adv"], "a larger G lowers the zero-advantage fraction",
              f"{pair}: zero_adv_frac averaged over training steps", "pp",
              _pp(st(hi, "zero_adv_frac"), st(lo, "zero_adv_frac")), sign=-1, evidence="table10_group_size",
              note="its sign holds for exchangeable siblings by set inclusion (G.2-G2-degenerate's note); its size "
                   "is the question",
              **paper_effect(PAPER["g_zero_adv"], "pp", _level(st(lo, "zero_adv_frac"), 100), lo)),
        Claim("G.2-pass1", PAPER["g_pass1"], "a larger G raises pass@1", f"{pair}: pass@1", "pp",
              _pp(ev(hi, "pass@1"), ev(lo, "pass@1")), evidence="table10_group_size",
              **paper_effect(PAPER["g_pass1"], "pp", _level(ev(lo, "pass@1"), 100), lo)),
        Claim("G.2-inference-tokens", PAPER["g_inference_tokens"], "a larger G cuts inference tokens per success",
              f"{pair}: tokens per success at evaluation", "tokens",
              paired(ev(hi, "tokens_per_success"), ev(lo, "tokens_per_success")), sign=-1,
              evidence="table10_group_size",
              **paper_effect(PAPER["g_inference_tokens"], "tokens", _level(ev(lo, "tokens_per_success")), lo)),
        Claim("G.2-wallclock", PAPER["g_wallclock"], "a larger G costs more wall-clock",
              f"{pair}: percent change of training wall-clock", "%",
              paired_ratio(st(hi, "time_total", "sum"), st(lo, "time_total", "sum")),
              evidence="timing_table11_group_size_cost", timing=True),
        Claim("G.2-train-tokens", PAPER["g_train_tokens"], "a larger G costs more training-generation tokens",
              f"{pair}: percent change of training-generation tokens", "%",
              paired_ratio(st(hi, "tokens_total", "sum"), st(lo, "tokens_total", "sum")),
              evidence="table11_group_size_cost", kind=KIND_STRUCTURAL, construction=BY_DESIGN_TOKENS),
        Claim("G.9-zero-adv-level", level, "most samples still have zero advantage at the largest G",
              f"{hi}: zero_adv_frac averaged over steps − {level.value:g} %", "pp",
              {s: 100 * v - level.value for s, v in st(hi, "zero_adv_frac").items()}, evidence="table10_group_size",
              family=FAMILY_LEVEL, note="a limitation of sparse binary reward the paper states, not a property of RTPO"
                   + (f"; {hi} is the main grid's configuration: every main seed counts"
                      if main_twin(res, gs, hi, m) else "")),
    ]
    g2, g3 = gs.variant_of(2), gs.variant_of(3)
    if g2 and g3:
        out.append(Claim("G.2-G2-degenerate", PAPER["g2_degenerate"], "G = 2 degenerates (little relative signal)",
                         f"{g2} − {g3}: zero_adv_frac averaged over steps", "pp",
                         _pp(st(g2, "zero_adv_frac"), st(g3, "zero_adv_frac")), evidence="table10_group_size",
                         kind=KIND_STRUCTURAL, construction=BY_DESIGN_G2))
    return out


def _group_pair(res: Results, st: Study) -> tuple[str, str] | None:
    """(smaller, larger) G variants to compare: the config's default G and the next larger one if both are
    run (the paper's 3 vs 4), otherwise the two largest."""
    vs = sorted(st.variants, key=lambda v: float(v.value))
    if len(vs) < 2:
        return None
    ref = st.variant_of(res.main_setting(st.methods[0], st.task, "group_size"))
    names = [v.name for v in vs]
    if ref is not None and names.index(ref) + 1 < len(names):
        i = names.index(ref)
        return names[i], names[i + 1]
    return names[-2], names[-1]


def trunk_failures(res: Results) -> list[Claim]:
    """§G.3, Tables 12-13 (RTPO, airline): trunks rarely fail in the first turn; trajectories without a
    terminal signal disappear and failed ones get shorter over training."""
    def late_minus_early(col: str) -> PerSeed:
        return paired(res.steps_by_seed(AIRLINE, "rtpo", col, window=LATE),
                      res.steps_by_seed(AIRLINE, "rtpo", col, window=EARLY))

    def early(col: str) -> PerSeed:
        return res.steps_by_seed(AIRLINE, "rtpo", col, window=EARLY)
    learned = learns(res, AIRLINE, "rtpo")
    return [
        Claim("G.3-first-turn", PAPER["first_turn_failures"], "most trunk failures happen after the first turn",
              "RTPO (airline): % of all trunks that fail within the first turn − % that fail in a later turn", "pp",
              _first_minus_later(res, AIRLINE, "rtpo"), sign=-1, evidence="table12_trunk_failures",
              family=FAMILY_LEVEL,
              note="in the paper's unit, a share of all trunks (its 6.88 % fail within the first turn; table12 gives "
                   "ours); 'most errors occur later' is the first-turn share below the later one. The digest gives no "
                   "overall failure rate, so the paper's gap does not map: the minimal effect"),
        Claim("G.3-no-terminal", PAPER["no_terminal"], "trajectories without a terminal signal disappear over "
              "training", "RTPO (airline): no_terminal_frac, last fifth of steps − first fifth", "pp",
              _scale(late_minus_early("trunks_no_terminal_frac"), 100), sign=-1, evidence="table13_failure_dynamics",
              family=FAMILY_LEVEL,
              learned=learned, **paper_effect(PAPER["no_terminal"], "pp", _level(early("trunks_no_terminal_frac"), 100),
                                              "RTPO's first-fifth")),
        Claim("G.3-failed-length", PAPER["failed_length"], "failed trajectories get shorter over training",
              "RTPO (airline): failed_len_mean, last fifth of steps − first fifth", "turns",
              late_minus_early("trunks_failed_len_mean"), sign=-1, evidence="table13_failure_dynamics",
              family=FAMILY_LEVEL,
              learned=learned, **paper_effect(PAPER["failed_length"], "turns", _level(early("trunks_failed_len_mean")),
                                              "RTPO's first-fifth")),
    ]


def _first_minus_later(res: Results, task: str, m: str) -> PerSeed:
    """{seed: 100 × mean over steps of (first-turn failures − later failures), each a share of all trunks}: a
    trunk fails within the first turn (trunks_first_turn_fail_frac) or later (1 − success_rate − that)."""
    df = res.step_rows(MAIN, "", task, m)
    if df.empty or "trunks_first_turn_fail_frac" not in df.columns:
        return {}
    out = {}
    for seed, g in df.groupby("seed"):
        first = g["trunks_first_turn_fail_frac"].astype(float)
        later = 1.0 - g["success_rate"].astype(float) - first
        d = (first - later).dropna()
        if len(d):
            out[int(seed)] = 100.0 * float(d.mean())
    return out


def training_cost(res: Results) -> list[Claim]:
    """§G.4, Table 14 (airline): RTPO costs more wall-clock and training-generation tokens than the baselines
    (the wall-clock claim is a timing: timing_claims.*)."""
    out = []
    for col, m, ref, what in (("time_total", "grpo", "cost_wallclock_vs_grpo", "wall-clock"),
                              ("tokens_total", "grpo", "cost_tokens_vs_grpo", "training-generation tokens"),
                              ("tokens_total", "tree_grpo", "cost_tokens_vs_tree_grpo", "training-generation tokens")):
        timing = col == "time_total"
        out.append(Claim(
            f"G.4-{col}-{m}", PAPER[ref], f"RTPO costs more {what} than {method_label(m)}",
            f"percent change of RTPO's airline {what} vs {method_label(m)}", "%",
            paired_ratio(res.steps_by_seed(AIRLINE, "rtpo", col, "sum"), res.steps_by_seed(AIRLINE, m, col, "sum")),
            evidence=("timing_" if timing else "") + "table14_training_cost", timing=timing,
            **paper_effect(PAPER[ref], "%")))
    return out


def math_tool_use(res: Results) -> list[Claim]:
    """§G.5, Tables 18-19: on math RTPO is more accurate than Vanilla with fewer tool calls."""
    def ev(m: str, metric: str) -> PerSeed:
        return res.eval_by_seed("math", m, "overall", metric)
    return [
        Claim("G.5-accuracy", PAPER["math_accuracy_vs_vanilla"], "RTPO is more accurate than Vanilla on math",
              "RTPO − Vanilla: math pass@1 (all samples)", "pp", _pp(ev("rtpo", "pass@1"), ev("vanilla", "pass@1")),
              evidence="tableG5_tool_use", note=TRAINED_VS_UNTRAINED, family=FAMILY_UNTRAINED),
        Claim("G.5-calls", PAPER["math_calls_vs_vanilla"], "RTPO makes fewer tool calls than Vanilla on math",
              "RTPO − Vanilla: math tool calls per trajectory (all samples)", "calls",
              paired(ev("rtpo", "tool_calls_per_traj"), ev("vanilla", "tool_calls_per_traj")), sign=-1,
              evidence="tableG5_tool_use", note=TRAINED_VS_UNTRAINED_CALLS, family=FAMILY_UNTRAINED),
    ]


NOT_RUN_SYNC = "it has no ablations.sync study"


def sync_frequency(res: Results) -> list[Claim]:
    """§G.6 (study sync): per-stage synchronisation (the first variant) beats every cheaper schedule on the
    hardest tier, which in turn synchronise less often."""
    sy = res.studies.get("sync")
    if sy is None:  # a config may leave the study out (the CPU default: its arms need >400 seeds to decide)
        return [Claim("G.6-acc", PAPER["sync_accuracy"], "per-stage synchronisation beats every cheaper schedule on "
                      "the hardest tier", "per_stage − a cheaper schedule: pass@1 on the hardest tier", "pp", {},
                      evidence="tableG6_sync", absent=NOT_RUN_SYNC)]
    if len(sy.variants) < 2:
        return []
    ref, m = sy.variant_names()[0], sy.methods[0]
    metric = hit_metric(res, sy.task, sy.name)
    hb = hardest(res, sy.task, sy.name, ref)

    def ev(v: str) -> PerSeed:
        return with_main_seeds(res, sy, v, m, lambda sc, va: res.eval_by_seed(sy.task, m, hb, metric, sc, va))

    def syncs(v: str) -> PerSeed:
        return with_main_seeds(res, sy, v, m, lambda sc, va: res.steps_by_seed(sy.task, m, "syncs", "mean", sc, va))
    out = []
    for v in sy.variant_names()[1:]:
        out.append(Claim(f"G.6-acc-{v}", PAPER["sync_accuracy"], f"per-stage synchronisation beats {v} on the "
                         f"hardest tier", f"{ref} − {v}: {metric} on {_bench(hb)}", "pp",
                         _pp(ev(ref), ev(v)) if hb else {}, evidence="tableG6_sync"))
        out.append(Claim(f"G.6-syncs-{v}", PAPER["sync_cost"], f"{v} synchronises less often than per-stage "
                         "(cheaper)", f"{ref} − {v}: weight syncs per training step", "syncs",
                         paired(syncs(ref), syncs(v)), evidence="tableG6_sync", kind=KIND_STRUCTURAL,
                         construction=BY_DESIGN_SYNCS))
    return out


def budget_over_training(res: Results) -> list[Claim]:
    """§G.7, Table 21 (RTPO, airline): per-trunk tool calls and tokens fall, tool success rises."""
    out = []
    learned = learns(res, AIRLINE, "rtpo")
    for col, label, ref, sign, unit, k in (
            ("trunks_tool_calls_per_trunk", "tool calls per trunk fall", "budget_tool_calls", -1, "calls", 1),
            ("trunks_tokens_per_trunk", "generated tokens per trunk fall", "budget_tokens", -1, "tokens", 1),
            ("trunks_tool_success_rate", "tool execution success rises", "budget_tool_success", 1, "pp", 100)):
        early = res.steps_by_seed(AIRLINE, "rtpo", col, window=EARLY)
        late_minus_early = paired(res.steps_by_seed(AIRLINE, "rtpo", col, window=LATE), early)
        out.append(Claim(f"G.7-{col.split('_', 1)[1]}", PAPER[ref], f"over training, {label}",
                         f"RTPO (airline): {col}, last fifth of steps − first fifth", unit,
                         _scale(late_minus_early, k), sign=sign, evidence="table21_budget", learned=learned,
                         family=FAMILY_LEVEL,
                         **paper_effect(PAPER[ref], unit, _level(early, k), "RTPO's first-fifth")))
    return out


CONTROL_NOTE = "a control of this artifact, not a claim of the paper"
MORE_UPDATES = ("if this row is 'no effect of the paper's size' while RTPO − GRPO was ahead, RTPO's lead there is "
                "explained by its extra optimizer steps")
EXTRA_STEPS_HELP = ("'no effect' here means the extra optimizer steps do not help GRPO, so they cannot explain a lead "
                    "of RTPO's; a gain here makes the RTPO − GRPO-K row the test of that lead")
BY_DESIGN_FULL = ("under psi = full GRPO samples and trains on the same context ids with the same fp32 kernels, so its "
                  "KL(rollout‖train) is ~0 (float rounding), and k3 >= 0 per token, so this difference cannot be "
                  "negative: the manipulation check that the mismatch arm removes the mismatch")


def matched_updates(res: Results) -> list[Claim]:
    """Control A (study matched_updates, docs/design-controls.md 1): per task, GRPO with as many optimizer steps
    per training step as RTPO takes (GRPO-K). Does RTPO's lead survive it (RTPO − GRPO-K, against the effect its
    4.1 / G.1 row tests), and does GRPO gain from the extra steps at all (GRPO-K − GRPO)?"""
    mu = res.studies.get("matched_updates")
    ref = PAPER["control_matched_updates"]
    if mu is None:
        return [Claim("C.A-rtpo-grpo_k", ref, "RTPO's lead over GRPO survives matched optimizer steps",
                      "RTPO − GRPO-K: pass@1", "pp", {}, kind=KIND_CONTROL, evidence="table_controls",
                      absent="study matched_updates absent from the config")]
    out = []
    for variant, task, m in mu.cells:
        label = f"{method_label(m)}-K"

        def arm(method: str, scope: str = MAIN, v: str = "") -> PerSeed:
            # G.1's quantity on airline (every sample), 4.1's elsewhere (the mean over the task's benchmarks)
            if task == AIRLINE:
                return res.eval_by_seed(task, method, "overall", "pass@1", scope, v)
            return res.eval_macro_by_seed([task], method, "pass@1", scope, v)
        rtpo, base, k_arm = arm("rtpo"), arm(m), arm(m, mu.name, variant)
        effect = ({} if task == AIRLINE   # G.1-pass1: the paper gives no airline gap, the minimal 1 pp
                  else paper_effect(PAPER[f"gain_vs_{m}"], "pp", _level(base, 100), method_label(m))
                  if f"gain_vs_{m}" in PAPER else {})
        k = next((v.value for v in mu.variants if v.name == variant), "K")
        out.append(Claim(
            f"C.A-rtpo-{m}_k-{task}", ref, f"RTPO's lead over {method_label(m)} survives matched optimizer steps "
            f"({task})", f"RTPO − {label} ({variant}: {k} optimizer steps per training step): {task} pass@1", "pp",
            _pp(rtpo, k_arm), kind=KIND_CONTROL, evidence="table_controls",
            note=f"{CONTROL_NOTE}; tested against the effect {'G.1-pass1' if task == AIRLINE else '4.1'}-{m} uses; "
                 f"{label} and RTPO paired by seed; {MORE_UPDATES}", **effect))
        out.append(Claim(
            f"C.A-{m}_k-{m}-{task}", ref, f"{label} gains on {method_label(m)} from the extra optimizer steps ({task})",
            f"{label} − {method_label(m)}: {task} pass@1", "pp", _pp(k_arm, base), kind=KIND_CONTROL,
            evidence="table_controls", note=f"{CONTROL_NOTE}; {EXTRA_STEPS_HELP}"))
    return out


def mismatch_control(res: Results) -> list[Claim]:
    """Control B (study mismatch, docs/design-controls.md 2): RTPO and GRPO under psi = full on the study's task.
    The paper's mechanism says RTPO gains most where psi is lossy: (RTPO − GRPO)[qwen3] − (RTPO − GRPO)[full] > 0;
    removing the mismatch should help GRPO; GRPO[full]'s KL is the manipulation check."""
    mm = res.studies.get("mismatch")
    ref = PAPER["control_mismatch"]
    if mm is None or not {"rtpo", "grpo"} <= set(mm.methods):
        in_sweep = str(((res.cfg.get("ablations") or {}).get("mismatch") or {}).get("target", "all")) == "sweep"
        why = ("it runs with the mechanism sweep's target (`bash scripts/pipeline.sh sweep`), whose ledger "
               "sweep_claims holds its rows" if in_sweep else "study mismatch (with rtpo and grpo) absent from the config")
        return [Claim("C.B-interaction", ref, "RTPO's gain over GRPO is larger under the lossy psi than under psi = full",
                      "(RTPO − GRPO)[main psi] − (RTPO − GRPO)[full]", "pp", {}, kind=KIND_CONTROL,
                      evidence="sweep_claims" if in_sweep else "table_controls", absent=why)]
    t, v = mm.task, mm.variants[0].name
    psi = str(((res.cfg.get("env") or {}).get(t) or {}).get("psi", "full"))

    def ev(method: str, scope: str = MAIN, variant: str = "") -> PerSeed:
        return res.eval_macro_by_seed([t], method, "pass@1", scope, variant)
    gap_main, gap_full = paired(ev("rtpo"), ev("grpo")), paired(ev("rtpo", mm.name, v), ev("grpo", mm.name, v))
    kl = lambda scope, variant: res.steps_by_seed(t, "grpo", "kl_rollout_train", "mean", scope, variant)  # noqa: E731
    return [
        Claim("C.B-interaction", ref, f"RTPO's gain over GRPO is larger under psi = {psi} than under psi = full ({t})",
              f"(RTPO − GRPO)[{psi}] − (RTPO − GRPO)[full]: pass@1 averaged over the {t} benchmarks", "pp",
              _pp(gap_main, gap_full), kind=KIND_CONTROL, evidence="table_controls",
              note=f"{CONTROL_NOTE}; the paper's mechanism (RTPO gains most where psi makes the flat methods' training "
                   f"context differ from their rollout's); the {psi} arms are the main grid's, paired by seed"),
        Claim("C.B-grpo-full", ref, f"removing the rollout–training mismatch helps GRPO ({t})",
              f"GRPO[full] − GRPO[{psi}]: pass@1 averaged over the {t} benchmarks", "pp",
              _pp(ev("grpo", mm.name, v), ev("grpo")), kind=KIND_CONTROL, evidence="table_controls",
              note=CONTROL_NOTE),
        Claim("C.B-grpo-kl", ref, f"psi = full removes GRPO's rollout–training mismatch ({t})",
              f"GRPO[{psi}] − GRPO[full]: KL(rollout‖train) averaged over training steps", "nats/token",
              paired(kl(MAIN, ""), kl(mm.name, v)), kind=KIND_STRUCTURAL, evidence="table_controls",
              construction=BY_DESIGN_FULL, note=f"{CONTROL_NOTE}: its manipulation check"),
    ]


OWN_CONTEXT = ("GRPO trained per turn on the contexts it sampled (train_rows: turn): no rollout–training mismatch, "
               "GRPO's rollouts, information and trajectory-level advantages")


def turn_rows_control(res: Results) -> list[Claim]:
    """The mismatch-isolating control (study turn_rows, docs/design-controls.md): GRPO trained per turn on the
    contexts it sampled, c_k = psi(S_k) (GRPO-turn), paired by seed with the main GRPO runs. It removes the
    rollout–training mismatch and nothing else: does the mismatch cost GRPO the paper's gap, and does RTPO's
    standing against GRPO survive its removal? Both on 4.1's quantity (pass@1 averaged over the study's
    benchmarks) against 4.1-grpo's effect."""
    tr = res.studies.get("turn_rows")
    ref = PAPER["control_turn_rows"]
    if tr is None:
        return [Claim("C.M-grpo_turn-grpo", ref, "removing the rollout–training mismatch helps GRPO",
                      "GRPO-turn − GRPO: pass@1", "pp", {}, kind=KIND_CONTROL, evidence="table_controls",
                      absent="study turn_rows absent from the config")]
    tasks = [t for t in _headline(res) if t in tr.tasks] or list(tr.tasks)
    v = tr.variants[0].name
    both = "+".join(tasks)
    grpo = res.eval_macro_by_seed(tasks, "grpo", "pass@1")
    turn = res.eval_macro_by_seed(tasks, "grpo", "pass@1", tr.name, v)
    rtpo = res.eval_macro_by_seed(tasks, "rtpo", "pass@1")
    effect = paper_effect(PAPER["gain_vs_grpo"], "pp", _level(grpo, 100), method_label("grpo"))
    out = [
        Claim("C.M-grpo_turn-grpo", ref, "removing the rollout–training mismatch helps GRPO by the paper's gap",
              f"GRPO-turn − GRPO: pass@1 averaged over the {both} benchmarks", "pp", _pp(turn, grpo),
              kind=KIND_CONTROL, evidence="table_controls",
              note=f"{CONTROL_NOTE}; {OWN_CONTEXT}; tested against 4.1-grpo's effect: if the mismatch were what "
                   "separates GRPO from RTPO, removing it would gain about that much", **effect),
        Claim("C.M-rtpo-grpo_turn", ref, "RTPO beats GRPO without GRPO's rollout–training mismatch",
              f"RTPO − GRPO-turn: pass@1 averaged over the {both} benchmarks", "pp", _pp(rtpo, turn),
              kind=KIND_CONTROL, evidence="table_controls",
              note=f"{CONTROL_NOTE}; 4.1-grpo with the mismatch removed from GRPO: what is left of RTPO's standing "
                   "comes from its credit assignment and continuations", **effect),
    ]
    for t in tr.tasks:
        kl = lambda scope, variant: res.steps_by_seed(t, "grpo", "kl_rollout_train", "mean", scope, variant)  # noqa: E731
        out.append(Claim(
            f"C.M-grpo-kl-{t}", ref, f"GRPO-turn has no rollout–training mismatch ({t})",
            "GRPO − GRPO-turn: KL(rollout‖train) averaged over training steps", "nats/token",
            paired(kl(MAIN, ""), kl(tr.name, v)), kind=KIND_STRUCTURAL, evidence="table_controls",
            construction=BY_DESIGN_OWN_CONTEXT, note=f"{CONTROL_NOTE}: its manipulation check"))
    return out


BY_DESIGN_OWN_CONTEXT = ("GRPO-turn scores each action under the exact ids it was sampled from with the same fp32 "
                         "kernels, so its KL(rollout‖train) is ~0 (float rounding) and k3 >= 0 per token: this "
                         "difference cannot be negative")

# the ledger's sections, in its row order (the theorem checks follow: theory_rows); the controls last
SECTIONS: tuple[Callable[[Results], list[Claim]], ...] = (
    main_results, tool_use, consistency, credit_assignment, policy_drift, airline, group_size, trunk_failures,
    training_cost, math_tool_use, sync_frequency, budget_over_training, matched_updates, turn_rows_control,
    mismatch_control,
)


def build_claims(res: Results) -> list[Claim]:
    """Every claim the ledger checks, with our per-seed values from the loaded results."""
    return [c for section in SECTIONS for c in section(res)]


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


# ------------------------------------------------------------------------------------------------
# evaluation and writers
# ------------------------------------------------------------------------------------------------

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
