"""The ledger's verdicts say what the evidence can say: kinds counted apart, the
paper's effect size excluded by a tight interval, theory rows that cannot decide, exact t quantiles.
All on constructed inputs (no results tree)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import mpmath
import pandas as pd
import pytest

from rtpo.report import ledger
from rtpo.report.ledger import Claim, evaluate_claim, theory_rows, verdict_counts
from rtpo.report.paper_reference import PAPER
from rtpo.report.stats import (
    AGAINST_CONSTRUCTION, BY_CONSTRUCTION, EFFECT_EXCLUDED, INCONCLUSIVE, KIND_DERIVATION, KIND_EMPIRICAL,
    KIND_IMPLEMENTATION, KIND_STRUCTURAL, NOT_REPRODUCED, REPRODUCED, effect_verdict, summarize, t975, t_quantile,
    theory_verdict,
)

REF = PAPER["kl_lowest"]


def _claim(values, **kw) -> Claim:
    base = dict(id="x", ref=REF, claim="c", quantity="q", unit="pp", values=dict(enumerate(values)))
    return Claim(**{**base, **kw})


# ------------------------------------------------------------------ structural claims
def test_structural_claim_never_counts_as_reproduced_evidence():
    strong = [5.0, 5.1, 4.9]
    rows = [evaluate_claim(_claim(strong, id="s", kind=KIND_STRUCTURAL, construction="k3 >= 0")),
            evaluate_claim(_claim(strong, id="e"))]
    s, e = rows
    assert s["kind"] == KIND_STRUCTURAL and s["verdict"] == BY_CONSTRUCTION != REPRODUCED
    assert s["note"].startswith("by construction: k3 >= 0")
    assert e["kind"] == KIND_EMPIRICAL and e["verdict"] == REPRODUCED
    k = verdict_counts(pd.DataFrame(rows))
    assert k[REPRODUCED] == 1 and k[(KIND_EMPIRICAL, REPRODUCED)] == 1
    assert k[(KIND_STRUCTURAL, BY_CONSTRUCTION)] == 1 and (KIND_STRUCTURAL, REPRODUCED) not in k
    assert k[KIND_STRUCTURAL] == 1 and k[KIND_EMPIRICAL] == 1 and k["claims"] == 2 and k["decided"] == 1
    assert "1 structural (1 holds (by construction))" in ledger.counts_text(pd.DataFrame(rows))
    # an equivalence claim that holds by construction (RTPO's ratio) is not "reproduced" either
    ratio = evaluate_claim(_claim([1.0, 1.0, 1.0 + 1e-9], unit="ratio", rule="equivalence", center=1.0, margin=0.02,
                                  kind=KIND_STRUCTURAL, construction="same ids and kernels"))
    assert ratio["verdict"] == BY_CONSTRUCTION and ratio["expected"] == "= 1 ± 0.02"
    # data against the construction point at the implementation, never at the paper
    assert evaluate_claim(_claim([-5.0, -5.1, -4.9], kind=KIND_STRUCTURAL))["verdict"] == AGAINST_CONSTRUCTION
    assert evaluate_claim(_claim([5.0], kind=KIND_STRUCTURAL))["verdict"] == INCONCLUSIVE


def test_the_ledger_marks_the_audited_structural_claims():
    """the rows the fidelity audit names as holding by construction are built as structural."""
    import inspect
    src = inspect.getsource(ledger.consistency) + inspect.getsource(ledger.group_size) + \
        inspect.getsource(ledger.sync_frequency)
    assert src.count("kind=KIND_STRUCTURAL") == 4   # ratio-rtpo, kl-{grpo,seeupo}, train-tokens, syncs


# ------------------------------------------------------------------ empirical claims: the effect size
def test_tight_interval_around_zero_excludes_a_3pp_paper_effect():
    tight = summarize([-0.4, 0.3, 0.1, -0.2, 0.2])
    assert tight.lo < 0 < tight.hi < 3.0
    assert effect_verdict(tight, +1, 3.0) == EFFECT_EXCLUDED
    # the same for a paper that claims a decrease, on the mirrored interval
    assert effect_verdict(tight, -1, 3.0) == EFFECT_EXCLUDED
    # a wide interval around 0 cannot exclude it
    assert effect_verdict(summarize([-4.0, 5.0, 1.0]), +1, 3.0) == INCONCLUSIVE
    # an effect of the paper's sign but clearly below its size is not the paper's effect
    assert effect_verdict(summarize([0.5, 0.6, 0.55]), +1, 3.0) == EFFECT_EXCLUDED
    # the paper's size within reach and 0 excluded: reproduced; the opposite side: not reproduced
    assert effect_verdict(summarize([3.0, 3.5, 2.8]), +1, 3.0) == REPRODUCED
    assert effect_verdict(summarize([-3.0, -3.5, -2.8]), +1, 3.0) == NOT_REPRODUCED
    assert effect_verdict(summarize([0.1]), +1, 3.0) == INCONCLUSIVE      # one seed
    with pytest.raises(ValueError):
        effect_verdict(tight, +1, 0.0)
    # through the ledger row: the mapped effect is stated in `expected`
    row = evaluate_claim(_claim([-0.4, 0.3, 0.1, -0.2, 0.2], effect=3.0, effect_basis="mapped so"))
    assert row["verdict"] == EFFECT_EXCLUDED and row["expected"] == "> 0; paper's effect +3 pp (mapped so)"
    # no mapped effect: the stated minimal effect of the unit
    row = evaluate_claim(_claim([-0.4, 0.3, 0.1, -0.2, 0.2], sign=-1))
    assert row["expected"] == f"< 0; paper's effect −{ledger.MIN_EFFECT['pp']:g} pp (no paper figure mapped to our " \
        f"scale: minimal effect {ledger.MIN_EFFECT['pp']:g} pp)"
    assert row["verdict"] == EFFECT_EXCLUDED
    assert verdict_counts(pd.DataFrame([row]))[(KIND_EMPIRICAL, EFFECT_EXCLUDED)] == 1


def test_relative_paper_gain_maps_to_pp_at_our_baseline_level():
    effect, basis = ledger._relative_to_pp(21.5, {0: 0.13, 1: 0.142}, "GRPO")
    assert effect == pytest.approx(0.215 * 13.6)
    assert "+21.5 % relative × GRPO's 13.6 %" in basis and "+2.92 pp" in basis
    assert math.isnan(ledger._relative_to_pp(math.nan, {0: 0.1}, "X")[0])
    assert math.isnan(ledger._relative_to_pp(21.5, {}, "X")[0])


def test_an_ablation_arm_of_the_main_configuration_takes_every_main_seed(monkeypatch):
    study = SimpleNamespace(name="group_size", task="airline")
    data = {("group_size", "G4"): {0: 0.9}, ("main", ""): {0: 0.9, 1: 0.91, 2: 0.92}}

    def fetch(scope, variant):
        return data.get((scope, variant), {})
    monkeypatch.setattr(ledger, "main_twin", lambda res, st, v, m: v == "G4")
    assert ledger.with_main_seeds(None, study, "G4", "rtpo", fetch) == {0: 0.9, 1: 0.91, 2: 0.92}
    assert ledger.with_main_seeds(None, study, "G3", "rtpo", fetch) == {}
    # whether an arm is the main grid's is what its runs' run.json say (copy_of), not a guess from the config
    monkeypatch.undo()
    from rtpo.experiment import RunKey
    from rtpo.report.load import Results

    arm = RunKey("group_size", "G4", "airline", "rtpo", 0)
    res = Results(None, {}, pd.DataFrame(), pd.DataFrame(), None, {},
                  records={arm: {"key": arm.as_dict(), "copy_of": {**arm.as_dict(), "scope": "main", "variant": ""}}})
    assert ledger.main_twin(res, study, "G4", "rtpo") is True
    res.records[arm]["copy_of"] = None
    assert ledger.main_twin(res, study, "G4", "rtpo") is False
    assert ledger.main_twin(Results(None, {}, pd.DataFrame(), pd.DataFrame(), None, {}), study, "G4", "rtpo") is False


# ------------------------------------------------------------------ theory rows
def test_a_theory_row_can_come_out_inconclusive():
    # fails, but its note says it does not contradict the paper
    assert theory_verdict(1.0, 0.83, 0.126, False, "outside the paper's condition, so not a contradiction") \
        == INCONCLUSIVE
    assert theory_verdict(1.0, 0.83, 0.126, False, "a ratio near 1 does not contradict it") == INCONCLUSIVE
    # holds, but its tolerance is most of the value: the check cannot decide
    assert theory_verdict(37.34, 40.5, 30.1, True) == INCONCLUSIVE
    assert theory_verdict(5.727, 5.88, 1.07, True) == REPRODUCED
    assert theory_verdict(0.5, 0.67, 0.043, False, "the implemented estimator differs") == NOT_REPRODUCED
    assert theory_verdict(0.0, 0.0, 0.0, True) == REPRODUCED
    assert theory_verdict(math.nan, 0.5, math.nan, True) == REPRODUCED
    assert theory_verdict(1.0, math.nan, 0.1, True) == INCONCLUSIVE   # no Monte Carlo value
    df = pd.DataFrame([
        {"check": "Thm 1 interpretation", "paper_claim": "p", "quantity": "q", "closed_form": 1.0,
         "monte_carlo": 0.83, "tolerance": 0.126, "holds": False, "note": "so not a contradiction of it"},
        {"check": "C.3 paper's factor (G-2)/(G-1), G=3", "paper_claim": "p", "quantity": "q", "closed_form": 0.5,
         "monte_carlo": 0.67, "tolerance": 0.043, "holds": False, "note": "the code's factor differs"},
        {"check": "C.4 IS-weight variance", "paper_claim": "p", "quantity": "q", "closed_form": 37.34,
         "monte_carlo": 40.5, "tolerance": 30.1, "holds": True, "note": ""},
    ])
    rows = theory_rows(SimpleNamespace(theory=df))
    assert [r["verdict"] for r in rows] == [INCONCLUSIVE, NOT_REPRODUCED, INCONCLUSIVE]
    assert [r["kind"] for r in rows] == [KIND_IMPLEMENTATION, KIND_DERIVATION, KIND_IMPLEMENTATION]
    k = verdict_counts(pd.DataFrame(rows))
    assert k[(KIND_IMPLEMENTATION, INCONCLUSIVE)] == 2 and k[(KIND_DERIVATION, NOT_REPRODUCED)] == 1
    assert k.get((KIND_EMPIRICAL, NOT_REPRODUCED), 0) == 0


# ------------------------------------------------------------------ t quantiles
# t_quantile is scipy.stats.t.ppf; checked against closed forms (df 1, 2, 4), tabled values and the CDF
SCIPY_T = {(0.975, 1): 12.706204736174698, (0.975, 2): 4.302652729749464, (0.975, 4): 2.7764451051977934,
           (0.975, 30): 2.0422724563012373, (0.975, 120): 1.9799304050824413, (0.95, 2): 2.9199855803537256}


def test_t_quantiles_equal_scipys():
    for (p, df), v in SCIPY_T.items():
        assert t_quantile(p, df) == pytest.approx(v, rel=1e-12, abs=1e-12), (p, df)
    for p in (0.6, 0.9, 0.95, 0.975, 0.995):
        assert t_quantile(p, 1) == pytest.approx(math.tan(math.pi * (p - 0.5)), rel=1e-12)        # Cauchy
        assert t_quantile(p, 2) == pytest.approx((2 * p - 1) / math.sqrt(2 * p * (1 - p)), rel=1e-12)
        a = 4 * p * (1 - p)                                                                         # df = 4
        q = math.cos(math.acos(math.sqrt(a)) / 3) / math.sqrt(a)
        assert t_quantile(p, 4) == pytest.approx(2 * math.sqrt(q - 1), rel=1e-12)
        assert t_quantile(1 - p, 7) == -t_quantile(p, 7)
    # every df, not only tabled ones: the CDF at the quantile is p (numerical integration of the density)
    for df in (3, 7, 11, 25, 59, 250, 4000):
        t = t975(df)
        with mpmath.workdps(30):
            nu = mpmath.mpf(df)
            c = mpmath.gamma((nu + 1) / 2) / (mpmath.sqrt(nu * mpmath.pi) * mpmath.gamma(nu / 2))
            cdf = 0.5 + mpmath.quad(lambda x: c * (1 + x * x / nu) ** (-(nu + 1) / 2), [0, t])
        assert float(cdf) == pytest.approx(0.975, abs=1e-13), df
    # the old table's "next smaller tabled df" is gone: df 21 lies strictly between df 20 and 25
    assert t975(25) < t975(21) < t975(20)
    assert t975(200) > 1.96 > t_quantile(0.975, 1e7) > 1.9599
    assert t_quantile(0.5, 3) == 0.0
    for bad in ((0.0, 3), (1.0, 3), (0.9, 0)):
        with pytest.raises(ValueError):
            t_quantile(*bad)
    with pytest.raises(ValueError):
        t975(0)
