"""The ledger's verdicts say what the evidence can say: kinds counted apart, the paper's effect size excluded by
a tight interval (with the sign shown, or not), rows that cannot be scored (a zero-width interval, a quantity
coarser than its effect, a training dynamic of runs that do not learn), the paper's figure mapped to our scale,
the Benjamini-Hochberg adjustment the verdicts use, theory rows that cannot decide, exact t quantiles.
On constructed inputs; the audited rows' kinds on the synthetic results tree of tests/report_fixture.py."""

from __future__ import annotations

import math
from types import SimpleNamespace

import mpmath
import pandas as pd
import pytest

from rtpo.report import ledger
from rtpo.report.claims import claim as cl
from rtpo.report.claims import verdicts
from rtpo.report.claims.claim import Claim
from rtpo.report.claims.theorems import theory_rows
from rtpo.report.claims.verdicts import evaluate_claim
from rtpo.report.ledger import verdict_counts
from rtpo.report.paper_reference import PAPER
from rtpo.report.stats import (
    AGAINST_CONSTRUCTION, BY_CONSTRUCTION, INCONCLUSIVE, KIND_DERIVATION, KIND_EMPIRICAL, KIND_IMPLEMENTATION,
    KIND_STRUCTURAL, NO_EFFECT, NOT_MEASURABLE, NOT_REPRODUCED, REPRODUCED, SMALLER, bh_adjust, effect_verdict,
    summarize, t975, t_pvalues, t_quantile, theory_verdict,
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


def test_the_ledger_builds_the_audited_rows_as_their_kind(tmp_path):
    """On a synthetic results tree: the rows that hold by construction are structural (ratio-rtpo, kl-*, the
    geometric ratio, RTPO's jitter, G = 2, train tokens, syncs); the quantities that can move are empirical
    (GRPO's KL recovery, SeeUPO's jitter against GRPO's), each tested against the paper's effect where it maps."""
    from rtpo.report.load import load_results
    from tests.report_fixture import fixture_config, make_results_tree

    cfg = fixture_config(**{"train.steps": 6, "seeds": [0, 1, 2], "ablations.seeds": [0, 1, 2]})
    make_results_tree(tmp_path, cfg, theory=False)
    res = load_results(tmp_path / "results", cfg)
    claims = {c.id: c for c in ledger.build_claims(res)}
    structural = {i for i, c in claims.items() if c.kind == KIND_STRUCTURAL}
    assert structural == {"4.2-ratio-rtpo-math", "4.2-ratio-rtpo-search", "4.2-ratio-grpo-math", "4.2-ratio-grpo-search",
                          "4.2-kl-grpo-math", "4.2-kl-seeupo-math", "4.2-kl-grpo-search", "4.2-kl-seeupo-search",
                          "F.2-seeupo-jitter", "G.2-G2-degenerate", "G.2-train-tokens", "G.6-syncs-interval-2",
                          "G.6-syncs-kl-0.01", "C.B-grpo-kl", "C.M-grpo-kl-math", "C.M-grpo-kl-search"}
    assert all(c.construction for i, c in claims.items() if i in structural)
    for t in ("math", "search"):
        rec = claims[f"F.2-recovery-grpo-{t}"]
        assert rec.kind == KIND_EMPIRICAL and rec.unit == "nats/token" and rec.effect > 0
        assert "GRPO's first-fifth KL" in rec.effect_basis
    assert claims["F.2-seeupo-jitter-grpo"].kind == KIND_EMPIRICAL
    # the paper's percent figures map as they are; its relative changes at our baseline's level
    assert claims["G.1-tps-grpo"].effect == pytest.approx(56.0)
    assert claims["G.4-tokens_total-grpo"].effect == pytest.approx(40.0)
    assert "relative × Tree-GRPO's" in claims["G.1-length"].effect_basis
    # the fixture's RTPO reward rises on airline: its training dynamics are scored, not "not measurable"
    assert claims["G.3-failed-length"].learned is True and claims["G.7-tool_calls_per_trunk"].learned is True


# ------------------------------------------------------------------ empirical claims: the effect size
def test_tight_interval_around_zero_excludes_a_3pp_paper_effect():
    tight = summarize([-0.4, 0.3, 0.1, -0.2, 0.2])
    assert tight.lo < 0 < tight.hi < 3.0
    assert effect_verdict(tight, +1, 3.0) == NO_EFFECT
    # the same for a paper that claims a decrease, on the mirrored interval
    assert effect_verdict(tight, -1, 3.0) == NO_EFFECT
    # a wide interval around 0 cannot exclude it
    assert effect_verdict(summarize([-4.0, 5.0, 1.0]), +1, 3.0) == INCONCLUSIVE
    # an effect of the paper's sign but clearly below its size is not the paper's effect, and says so
    assert effect_verdict(summarize([0.5, 0.6, 0.55]), +1, 3.0) == SMALLER
    assert effect_verdict(summarize([-0.5, -0.6, -0.55]), -1, 3.0) == SMALLER
    # the paper's size within reach and 0 excluded: reproduced; the opposite side: not reproduced
    assert effect_verdict(summarize([3.0, 3.5, 2.8]), +1, 3.0) == REPRODUCED
    assert effect_verdict(summarize([-3.0, -3.5, -2.8]), +1, 3.0) == NOT_REPRODUCED
    assert effect_verdict(summarize([0.1]), +1, 3.0) == INCONCLUSIVE      # one seed
    with pytest.raises(ValueError):
        effect_verdict(tight, +1, 0.0)
    # through the ledger row: the mapped effect is stated in `expected`
    row = evaluate_claim(_claim([-0.4, 0.3, 0.1, -0.2, 0.2], effect=3.0, effect_basis="mapped so"))
    assert row["verdict"] == NO_EFFECT and row["expected"] == "> 0; paper's effect +3 pp (mapped so)"
    # no mapped effect: the stated minimal effect of the unit
    row = evaluate_claim(_claim([-0.4, 0.3, 0.1, -0.2, 0.2], sign=-1))
    assert row["expected"] == f"< 0; paper's effect −{cl.MIN_EFFECT['pp']:g} pp (no paper figure mapped to our " \
        f"scale: minimal effect {cl.MIN_EFFECT['pp']:g} pp)"
    assert row["verdict"] == NO_EFFECT
    k = verdict_counts(pd.DataFrame([row]))
    assert k[(KIND_EMPIRICAL, NO_EFFECT)] == 1 and k["effect excluded"] == 1 and k["empirical decided"] == 1


def test_sign_shown_but_smaller_is_told_apart_from_no_effect():
    smaller = evaluate_claim(_claim([-3.99, -2.0, -0.9, -1.7], unit="tokens", sign=-1, effect=10.0, effect_basis="b"))
    null = evaluate_claim(_claim([-1.0, 0.8, 0.3, -0.4], unit="tokens", sign=-1, effect=10.0, effect_basis="b"))
    assert smaller["ci95_hi"] < 0 and smaller["verdict"] == SMALLER
    assert null["ci95_lo"] < 0 < null["ci95_hi"] and null["verdict"] == NO_EFFECT
    k = verdict_counts(pd.DataFrame([smaller, null]))
    assert k[SMALLER] == 1 and k[NO_EFFECT] == 1 and k["effect excluded"] == 2 and k["decided"] == 0
    # unadjusted, the p-values say what the interval says: excludes 0 <=> p_zero < 0.05, below d <=> p_effect < 0.025
    for r in (smaller, null):
        assert (r["p_zero"] < 0.05) == (r["ci95_hi"] < 0 or r["ci95_lo"] > 0)
        assert (r["p_effect"] < 0.025) == (-r["ci95_lo"] < 10.0)


# ------------------------------------------------------------------ rows that cannot be scored
def test_a_zero_width_interval_cannot_be_scored():
    flat = summarize([0.0, 0.0, 0.0, 0.0])
    assert flat.lo == flat.hi == 0.0
    # before: "effect excluded" from an interval with no width; a quantity this coarse shows nothing
    assert effect_verdict(flat, -1, 1.0) == INCONCLUSIVE
    assert effect_verdict(summarize([2.0, 2.0, 2.0]), +1, 1.0) == INCONCLUSIVE   # nor "reproduced"
    # the same difference computed two ways differs in its last bits: still no width
    assert effect_verdict(summarize([25.000000000000004, 25.0, 24.999999999999996]), +1, 1.0) == INCONCLUSIVE
    assert math.isnan(t_pvalues(flat, -1, 1.0)[0])
    row = evaluate_claim(_claim([0.0, 0.0, 0.0, 0.0], sign=-1))
    assert row["verdict"] == INCONCLUSIVE and "zero width" in row["note"] and math.isnan(row["p_zero_bh"])
    # one seed one probe task off: an interval, which here cannot exclude 1 pp either
    assert effect_verdict(summarize([0.0, 0.0, 6.25, 0.0]), -1, 1.0) == INCONCLUSIVE


def test_a_quantity_coarser_than_its_effect_cannot_be_scored():
    vals = [-6.25, -6.25, -6.25, -6.25, -6.25, 0.0]      # one task of a 16-task probe: steps of 6.25 pp
    s = summarize(vals)
    assert effect_verdict(s, -1, 1.0) == REPRODUCED       # without the resolution it would be scored ...
    assert effect_verdict(s, -1, 1.0, resolution=6.25) == INCONCLUSIVE   # ... but 1 pp lies below one step
    assert effect_verdict(s, -1, 8.0, resolution=6.25) != INCONCLUSIVE   # an effect above one step can be tested
    row = evaluate_claim(_claim(vals, sign=-1, resolution=6.25))
    assert row["verdict"] == INCONCLUSIVE and "resolution 6.25 coarser than the effect tested (1)" in row["note"]


def test_a_training_dynamic_of_runs_that_do_not_learn_is_not_measurable():
    falls = [-3.0, -3.2, -2.9, -3.1]                      # would be "reproduced" for a claimed decrease
    assert evaluate_claim(_claim(falls, sign=-1, learned=True))["verdict"] == REPRODUCED
    assert evaluate_claim(_claim(falls, sign=-1))["verdict"] == REPRODUCED            # not a dynamic
    row = evaluate_claim(_claim(falls, sign=-1, learned=False))
    assert row["verdict"] == NOT_MEASURABLE and row["note"].startswith("not measurable:")
    assert math.isnan(row["p_zero"])                      # not a test: outside the multiplicity family
    rows = [row, evaluate_claim(_claim(falls, sign=-1))]
    k = verdict_counts(pd.DataFrame(rows))
    assert k[NOT_MEASURABLE] == 1 and k[(KIND_EMPIRICAL, NOT_MEASURABLE)] == 1
    assert k["empirical decided"] == 1 and k[INCONCLUSIVE] == 0       # counted apart from both
    assert "1 not measurable at this scale" in ledger.counts_text(pd.DataFrame(rows))


# ------------------------------------------------------------------ multiplicity
def test_benjamini_hochberg_against_statsmodels_and_by_hand():
    from statsmodels.stats.multitest import multipletests

    p = [0.001, 0.008, 0.039, 0.041, 0.042, 0.06, 0.074, 0.205]
    # by hand: p_(i) m / i, then the running minimum from the largest p down
    assert bh_adjust(p) == pytest.approx([0.008, 0.032, 0.0672, 0.0672, 0.0672, 0.08, 0.08457142857142857, 0.205])
    assert bh_adjust(p) == pytest.approx(list(multipletests(p, method="fdr_bh")[1]), rel=1e-15)
    # rows that are not tested (NaN) keep NaN and do not enlarge the family
    with_gaps = bh_adjust([math.nan, *p[:4], math.nan])
    assert math.isnan(with_gaps[0]) and math.isnan(with_gaps[-1])
    assert with_gaps[1:5] == pytest.approx(list(multipletests(p[:4], method="fdr_bh")[1]))


def test_the_verdicts_use_the_adjusted_p_values():
    marginal = _claim([1.2, 2.3, 0.4, 1.9], id="marginal", effect=1.0, effect_basis="b")
    alone = evaluate_claim(marginal)
    assert alone["ci95_lo"] > 0 and alone["verdict"] == REPRODUCED and alone["p_zero_bh"] == alone["p_zero"]
    nulls = [_claim([0.3 * (-1) ** (i + j) + 0.01 * j for j in range(4)], id=f"null{i}", effect=1.0,
                    effect_basis="b") for i in range(15)]
    rows = verdicts.evaluate_family([marginal, *nulls])
    r = rows[0]
    assert r["p_zero"] == alone["p_zero"] and r["p_zero_bh"] > 0.05
    assert r["verdict"] == INCONCLUSIVE                   # its interval still excludes 0: adjusted, not enough
    # a row far from 0 survives the same family; a structural row is not in it
    strong = _claim([5.0, 5.2, 4.9, 5.1], id="strong", effect=1.0, effect_basis="b")
    struct = _claim([5.0, 5.2, 4.9, 5.1], id="s", kind=KIND_STRUCTURAL, construction="c")
    rows = verdicts.evaluate_family([strong, struct, *nulls])
    assert rows[0]["verdict"] == REPRODUCED and math.isnan(rows[1]["p_zero_bh"])


def test_the_papers_figure_maps_to_our_scale():
    # a relative gain at our baseline's level (pp of pass@1)
    m = cl.paper_effect(PAPER["gain_vs_grpo"], "pp", cl.mean_level({0: 0.13, 1: 0.142}, 100), "GRPO")
    assert m["effect"] == pytest.approx(0.215 * 13.6)
    assert "+21.5 % relative × GRPO's 13.6 % (our mean) = 2.92 pp" in m["effect_basis"]
    # a figure already in the row's unit (a percent change) maps as it is
    m = cl.paper_effect(PAPER["airline_tps_vs_grpo"], "%")
    assert m["effect"] == pytest.approx(56.0) and "the same unit" in m["effect_basis"]
    row = evaluate_claim(_claim([-3.0, -6.2, -2.4, -2.8], unit="%", sign=-1, **m))
    assert row["verdict"] == SMALLER and "paper's effect −56 %" in row["expected"]
    # percentage points without levels: as they are, only in a pp row
    assert cl.paper_effect(PAPER["on_policy_gain"], "pp")["effect"] == pytest.approx(4.0)
    assert cl.paper_effect(PAPER["on_policy_gain"], "tokens") == {}
    # a rate whose two levels the paper gives maps as its odds ratio (57.63 -> 89.16 %: x6.05), never past 100 %
    m = cl.paper_effect(PAPER["airline_exec_success"], "pp", 80.0, "GRPO")
    odds = (89.16 / 10.84) / (57.63 / 42.37)
    assert m["effect"] == pytest.approx(100 * 4 * odds / (1 + 4 * odds) - 80.0) and m["effect"] < 20.0
    assert "odds ratio 6.05" in m["effect_basis"]
    # a rate without the paper's levels cannot gain beyond its headroom; counts beyond what their cap leaves
    m = cl.paper_effect(PAPER["gain_vs_vanilla"], "pp", 80.0, "Vanilla")
    assert m["effect"] == pytest.approx(20.0) and "headroom" in m["effect_basis"]
    m = cl.paper_effect(PAPER["search_calls"], "calls", 2.19, "GRPO", cap=6)
    assert m["effect"] == pytest.approx(6 - 2.19) and "its cap leaves (6 − 2.19)" in m["effect_basis"]
    assert cl.paper_effect(PAPER["search_calls"], "calls", 2.19, "GRPO")["effect"] == pytest.approx(2.19 * 2.065)
    assert cl.paper_effect(PAPER["airline_length"], "tokens", 74.3, "T")["effect"] == \
        pytest.approx(74.3 * (1 - 1688.8 / 2538.2))
    # no figure, or no level to carry a relative one: the row falls back to the stated minimal effect
    assert cl.paper_effect(PAPER["beats_arpo"], "pp", 10.0, "ARPO") == {}
    assert cl.paper_effect(PAPER["airline_length"], "tokens") == {}


def test_an_ablation_arm_of_the_main_configuration_takes_every_main_seed(monkeypatch):
    study = SimpleNamespace(name="group_size", task="airline")
    data = {("group_size", "G4"): {0: 0.9}, ("main", ""): {0: 0.9, 1: 0.91, 2: 0.92}}

    def fetch(scope, variant):
        return data.get((scope, variant), {})
    monkeypatch.setattr(cl, "main_twin", lambda res, st, v, m: v == "G4")
    assert cl.with_main_seeds(None, study, "G4", "rtpo", fetch) == {0: 0.9, 1: 0.91, 2: 0.92}
    assert cl.with_main_seeds(None, study, "G3", "rtpo", fetch) == {}
    # whether an arm is the main grid's is what its runs' run.json say (copy_of), not a guess from the config
    monkeypatch.undo()
    from rtpo.experiment import RunKey
    from rtpo.report.load import Results

    arm = RunKey("group_size", "G4", "airline", "rtpo", 0)
    res = Results(None, {}, pd.DataFrame(), pd.DataFrame(), None, {},
                  records={arm: {"key": arm.as_dict(), "copy_of": {**arm.as_dict(), "scope": "main", "variant": ""}}})
    assert cl.main_twin(res, study, "G4", "rtpo") is True
    res.records[arm]["copy_of"] = None
    assert cl.main_twin(res, study, "G4", "rtpo") is False
    assert cl.main_twin(Results(None, {}, pd.DataFrame(), pd.DataFrame(), None, {}), study, "G4", "rtpo") is False


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


def test_a_rate_maps_the_same_whichever_side_is_expressed():
    """Truncation 47.5 -> 42.5 % is termination 52.5 -> 57.5 %: carried to our level as an odds ratio, both give the
    same size at complementary levels (a relative change would give 0.73 pp against 8.9 pp, fidelity audit 3)."""
    from dataclasses import replace

    trunc = PAPER["airline_truncation"]
    term = replace(trunc, levels=(52.5, 57.5), change=100 * (57.5 / 52.5 - 1))
    for ours in (7.0, 30.0, 93.0):
        a = cl.paper_effect(trunc, "pp", ours, "Tree-GRPO")["effect"]
        b = cl.paper_effect(term, "pp", 100 - ours, "Tree-GRPO")["effect"]
        assert a == pytest.approx(b, rel=1e-12) and 0 < a < min(ours, 100 - ours)
    assert cl.paper_effect(PAPER["no_terminal"], "pp", 12.0, "R")["effect"] == pytest.approx(12.0)   # to 0 %


# ------------------------------------------------------------------ the rule the family cannot bend
@pytest.mark.parametrize("sign", [1, -1])
def test_an_adjusted_verdict_is_never_more_favourable_than_its_raw_interval(sign):
    """Over random rows and random families: a verdict with p_zero adjusted ranks no higher (stats.FAVOUR) than the
    same row scored alone (its raw interval), and a row whose raw interval lies wholly on the side the paper argues
    against reads 'opposite sign' or 'not reproduced', never 'no effect' (the 4.1-vanilla and G.1-length cases)."""
    import random

    from rtpo.report.stats import AGAINST_PAPER, FAVOUR

    rng = random.Random(sign)
    for trial in range(60):
        fam = []
        for i in range(rng.randint(1, 12)):
            mu, sd, n = rng.uniform(-4, 6), rng.uniform(0.2, 3), rng.randint(2, 6)
            fam.append(_claim([rng.gauss(mu, sd) for _ in range(n)], id=f"r{trial}-{i}", sign=sign,
                              effect=rng.uniform(0.5, 5), effect_basis="b"))
        rows = verdicts.evaluate_family(fam)
        for c, r in zip(fam, rows):
            raw = evaluate_claim(c)["verdict"]
            assert FAVOUR[r["verdict"]] <= FAVOUR[raw], (c.values, raw, r["verdict"])
            s = summarize(c.values.values())
            if sign * s.hi < 0 if sign > 0 else sign * s.lo < 0:   # the raw interval wholly on the wrong side
                assert r["verdict"] in AGAINST_PAPER, (c.values, r["verdict"])


def test_the_paper_size_test_is_never_adjusted():
    """4.1-vanilla in fidelity audit 3: raw 95 % interval [2.45, 5.42] wholly below d = 5.73 pp reads 'paper's sign,
    smaller effect' alone and must still read so in a large family (adjusting p_effect made it 'reproduced')."""
    from rtpo.report.stats import OPPOSITE_SIGN

    row = _claim([3.2, 4.9, 3.1, 4.6, 3.85], id="van", effect=5.73, effect_basis="b")
    alone = evaluate_claim(row)
    assert alone["ci95_hi"] < 5.73 and alone["verdict"] == SMALLER
    nulls = [_claim([0.3 * (-1) ** (i + j) + 0.01 * j for j in range(4)], id=f"n{i}", effect=1.0, effect_basis="b")
             for i in range(20)]
    assert verdicts.evaluate_family([row, *nulls])[0]["verdict"] == SMALLER
    # wrong side, significant alone, not once adjusted: "opposite sign", not "no effect of the paper's size"
    wrong = _claim([-5.6, -1.2, -9.8, -3.9, -7.5], id="g1", effect=33.8, effect_basis="b")
    assert evaluate_claim(wrong)["verdict"] == NOT_REPRODUCED
    adj = verdicts.evaluate_family([wrong, *nulls])[0]
    assert adj["p_zero_bh"] >= 0.05 and adj["verdict"] == OPPOSITE_SIGN


def test_an_inconclusive_row_says_how_many_seeds_would_decide_it():
    from statsmodels.stats.power import TTestPower

    vals = [1.0, -0.5, 2.5, 0.3]
    row = evaluate_claim(_claim(vals, id="i", effect=1.0, effect_basis="b"))
    s = summarize(vals)
    want = math.ceil(TTestPower().solve_power(effect_size=1.0 / s.std, alpha=0.05, power=0.8))
    assert row["verdict"] == INCONCLUSIVE and row["n80"] == want and want > 4
    assert f"~{want} paired seeds for 80 % power at 1 pp" in row["note"]
    assert math.isnan(evaluate_claim(_claim([3.0, 3.5, 2.8], id="d", effect=1.0, effect_basis="b"))["n80"])


def test_each_family_is_adjusted_on_its_own(tmp_path):
    """Trained-against-untrained rows and RTPO's own levels are families of their own: a strongly significant one
    lowers no comparison's adjusted p (fidelity audit 3: six such rows took G.1-pass1-tree_grpo from 0.087 to 0.020)."""
    marginal = _claim([1.2, 2.3, 0.4, 1.9, 1.1], id="cmp", effect=1.0, effect_basis="b")
    nulls = [_claim([0.3 * (-1) ** (i + j) + 0.01 * j for j in range(5)], id=f"n{i}", effect=1.0, effect_basis="b")
             for i in range(6)]
    trivial = [_claim([9.0 + 0.1 * j + i for j in range(5)], id=f"t{i}", effect=1.0, effect_basis="b",
                      family=cl.FAMILY_UNTRAINED if i % 2 else cl.FAMILY_LEVEL) for i in range(6)]
    claims = [marginal, *nulls, *trivial]
    res = SimpleNamespace(not_run={})
    old = ledger.build_claims, ledger.theory_rows
    try:
        ledger.build_claims, ledger.theory_rows = (lambda r: claims), (lambda r: [])
        df = ledger.evaluate_claims(res).set_index("claim_id")
        ledger.build_claims = lambda r: [marginal, *nulls]
        alone = ledger.evaluate_claims(res).set_index("claim_id")
    finally:
        ledger.build_claims, ledger.theory_rows = old
    assert df.loc["cmp", "p_zero_bh"] == pytest.approx(alone.loc["cmp", "p_zero_bh"])
    assert df.loc["t1", "family"] == cl.FAMILY_UNTRAINED and df.loc["t0", "family"] == cl.FAMILY_LEVEL
    assert df.loc["cmp", "family"] == cl.FAMILY_COMPARISON
