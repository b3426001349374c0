"""The controls of the CPU default (docs/design-controls.md 1-2): GRPO and Tree-GRPO with RTPO's optimizer steps
(study matched_updates), GRPO trained per turn on the contexts it sampled (study turn_rows) and RTPO / GRPO under
psi = full on search (study mismatch, with the sweep's target): their runs, and every other run unchanged by them."""

from __future__ import annotations

import copy

import pytest

from rtpo.config import ConfigError, load_config, validate_config
from rtpo.experiment import MAIN, Experiment, RunKey


def runs_view(exp: Experiment) -> dict:
    return {r.key: (r.sets, r.seed_group, r.copy_of, r.stamp, r.run_dir(), r.eval_file()) for r in exp.runs}


@pytest.mark.parametrize("name", ["config", "smoke"])
def test_controls_leave_every_other_run_as_it_was(name):
    cfg = load_config(f"config/{name}.yaml")
    without = copy.deepcopy(cfg)
    studies = [s for s in ("matched_updates", "turn_rows", "mismatch") if s in cfg["ablations"]]
    for study in studies:
        del without["ablations"][study]
    new, old = runs_view(Experiment(cfg)), runs_view(Experiment(without))
    assert {k: new[k] for k in old} == old
    assert {k.scope for k in set(new) - set(old)} == set(studies)


def test_the_controls_runs_in_the_cpu_default():
    cfg = load_config("config/config.yaml")
    exp = Experiment(cfg)
    mu_seeds = cfg["ablations"]["matched_updates"]["seeds"]
    mu = {r.key: r for r in exp.select("matched_updates")}
    assert set(mu) == {RunKey("matched_updates", "mb-4", "airline", m, s) for m in ("grpo", "tree_grpo") for s in mu_seeds}
    assert len(mu_seeds) >= 5   # Control A at >= 5 paired seeds, with RTPO's and the baselines' airline seeds
    for m in ("rtpo", "grpo", "tree_grpo"):
        assert set(mu_seeds) <= {r.seed for r in exp.select(MAIN, "airline", m)}
    for r in mu.values():
        assert r.sets == (f"method.{r.method}.mini_batches=4",) and r.copy_of is None and r.trains
        st = r.settings
        assert st["train"]["mini_batches"] == 4
        main = exp.run(RunKey(MAIN, "", r.task, r.method, r.seed)).settings   # otherwise the method's main run
        assert "mini_batches" not in main["train"]
        st["train"].pop("mini_batches")
        assert st == main and r.run_dir() == f"results/ablations/matched_updates/mb-4/airline/{r.method}/seed{r.seed}"
    tr = {r.key: r for r in exp.select("turn_rows")}
    tr_seeds = cfg["ablations"]["turn_rows"]["seeds"]
    assert set(tr) == {RunKey("turn_rows", "rows-turn", t, "grpo", s) for t in ("math", "search") for s in tr_seeds}
    for r in tr.values():
        assert r.sets == ("method.grpo.train_rows=turn",) and r.copy_of is None and r.trains
        st = r.settings
        assert st["method"].pop("train_rows") == "turn"
        assert st == exp.run(RunKey(MAIN, "", r.task, "grpo", r.seed)).settings   # paired with GRPO's main run
    mm = {r.key: r for r in exp.select("mismatch")}
    assert set(mm) == {RunKey("mismatch", "psi-full", "search", m, s) for m in ("rtpo", "grpo")
                       for s in cfg["ablations"]["seeds"]}
    for r in mm.values():
        assert r.sets == (f"method.{r.method}.psi=full",) and r.copy_of is None and r.settings["psi"] == "full"
        assert exp.run(RunKey(MAIN, "", "search", r.method, r.seed)).settings["psi"] == "qwen3"
        assert exp.in_sweep_target(r) and r not in exp.report_runs()   # Control B runs with `sweep`, not `all`
    st = exp.studies
    assert st["matched_updates"].tasks == ("airline",) and st["matched_updates"].methods == ("grpo", "tree_grpo")
    assert st["turn_rows"].tasks == ("math", "search") and "mismatch" not in st
    assert exp.sweep_studies["mismatch"].task == "search"
    # the studies whose rows cannot decide at the default's seeds run with config/overlays/optional.yaml
    assert not {"credit_assignment", "continuation", "sync"} & set(st)


def test_control_config_errors_name_the_key():
    cfg = load_config("config/config.yaml")
    bad = copy.deepcopy(cfg)
    bad["ablations"]["matched_updates"]["mini_batches"]["chess"] = 2
    with pytest.raises(ConfigError, match="ablations.*matched_updates.*mini_batches"):
        validate_config(bad)
    bad = copy.deepcopy(cfg)
    bad["ablations"]["matched_updates"]["mini_batches"]["airline"] = 0
    with pytest.raises(ConfigError, match="matched_updates"):
        validate_config(bad)


# ------------------------------------------------------------------------------------------------
# the controls' ledger rows and table on a constructed results tree (tests/report_fixture.py)
# ------------------------------------------------------------------------------------------------
MAIN_SEEDS, ARM_SEEDS = [0, 1, 2, 3], [0, 1, 2]
JITTER = [0.001, -0.001, 0.0005, 0.0]   # per seed (fractions): a spread, so an interval has a width


def plant_pass1(path, value: float) -> None:
    """Set every benchmark's and the pooled pass@1 of one eval JSON to `value` (pass@k at least as high, and no
    per-problem values: the report refuses a pass@1 its problems contradict, rtpo.report.read.check_eval)."""
    import json

    doc = json.loads(path.read_text())
    doc.pop("per_problem", None)
    for b in [*doc["benchmarks"].values(), doc["overall"]]:
        b["pass@1"] = value
        b.update({k: max(v, value) for k, v in b.items() if k.startswith("pass@") and k != "pass@1"})
    path.write_text(json.dumps(doc, indent=1, sort_keys=True))


def plant_kl(run, value: float) -> None:
    import json

    recs = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    (run / "metrics.jsonl").write_text("".join(json.dumps({**r, "kl_rollout_train": value}) + "\n" for r in recs))


@pytest.fixture(scope="module")
def control_results(tmp_path_factory):
    """The fixture tree with planted pass@1 (fractions) per arm, each + JITTER[seed] x a per-arm factor:
    airline: RTPO 0.50, GRPO 0.30, GRPO-K 0.30 (RTPO leads GRPO-K by 20 pp; GRPO-K = GRPO within 0.05 pp);
    math: RTPO 0.20, GRPO 0.20, GRPO-K 0.25 (RTPO trails GRPO-K by 5 pp; GRPO-K gains 5 pp), GRPO-turn 0.20;
    search: RTPO 0.30, GRPO 0.26 under qwen3 (main), both 0.28 under full (interaction +4 pp; GRPO[full] −
    GRPO[qwen3] = +2 pp), GRPO-turn 0.30 (math + search: GRPO-turn − GRPO +2 pp, RTPO − GRPO-turn 0);
    GRPO[full]'s and GRPO-turn's KL 1e-9 (main's 0.001-0.05). Control B in `all` here (the fixture's grid)."""
    from tests.report_fixture import fixture_config, make_results_tree

    root = tmp_path_factory.mktemp("controls")
    cfg = fixture_config(seeds=MAIN_SEEDS, **{"ablations.seeds": ARM_SEEDS, "train.steps": 5,
                                              "ablations.matched_updates": {"methods": ["grpo"],
                                                                            "mini_batches": {"math": 3, "airline": 4}}})
    res = make_results_tree(root, cfg, theory=False)
    plan = {("main", "airline", "rtpo"): (0.50, 1), ("main", "airline", "grpo"): (0.30, -1),
            ("mb-4", "airline", "grpo"): (0.30, -0.5),
            ("main", "math", "rtpo"): (0.20, 1), ("main", "math", "grpo"): (0.20, -2),
            ("mb-3", "math", "grpo"): (0.25, 3),
            ("main", "search", "rtpo"): (0.30, 1), ("main", "search", "grpo"): (0.26, -1),
            ("psi-full", "search", "rtpo"): (0.28, 2), ("psi-full", "search", "grpo"): (0.28, -2),
            ("rows-turn", "math", "grpo"): (0.20, 1), ("rows-turn", "search", "grpo"): (0.30, -3)}
    study_of = {"psi": "mismatch", "mb-": "matched_updates", "rows": "turn_rows"}
    for (where, task, m), (level, f) in plan.items():
        for s in (MAIN_SEEDS if where == "main" else ARM_SEEDS):
            if where == "main":
                path = res / "eval" / task / m / f"seed{s}.json"
            else:
                study = next(v for k, v in study_of.items() if where.startswith(k))
                path = res / "ablations" / study / where / task / m / f"eval_seed{s}.json"
            plant_pass1(path, level + f * JITTER[s])
    for s in ARM_SEEDS:
        plant_kl(res / "ablations" / "mismatch" / "psi-full" / "search" / "grpo" / f"seed{s}", 1e-9)
        for t in ("math", "search"):
            plant_kl(res / "ablations" / "turn_rows" / "rows-turn" / t / "grpo" / f"seed{s}", 1e-9)
    from rtpo.report.load import load_results

    return load_results(res, cfg)


def test_control_rows_give_the_verdicts_their_numbers_imply(control_results):
    from rtpo.report.ledger import evaluate_claims
    from rtpo.report.stats import BY_CONSTRUCTION, NO_EFFECT, NOT_REPRODUCED, REPRODUCED, SMALLER

    df = evaluate_claims(control_results).set_index("claim_id")
    rows = df[df.index.str.startswith("C.")]
    want = {"C.A-rtpo-grpo_k-math": NOT_REPRODUCED,     # RTPO 5 pp behind GRPO-K
            "C.A-grpo_k-grpo-math": REPRODUCED,         # GRPO-K 5 pp ahead of GRPO (d = 1 pp)
            "C.A-rtpo-grpo_k-airline": REPRODUCED,      # 20 pp ahead
            "C.A-grpo_k-grpo-airline": NO_EFFECT,       # within 0.05 pp of 0, below d = 1 pp
            "C.M-grpo_turn-grpo": SMALLER,              # +2 pp > 0, below 4.1's mapped d = 4.9 pp
            "C.M-rtpo-grpo_turn": NO_EFFECT,            # 0 pp
            "C.M-grpo-kl-math": BY_CONSTRUCTION, "C.M-grpo-kl-search": BY_CONSTRUCTION,
            "C.B-interaction": REPRODUCED,              # (+4) − (0) pp
            "C.B-grpo-full": REPRODUCED,                # +2 pp
            "C.B-grpo-kl": BY_CONSTRUCTION}
    assert dict(rows.verdict) == want, rows[["ours_mean", "ci95_lo", "ci95_hi", "n", "verdict"]]
    assert set(rows.kind) == {"control", "structural"} and rows.loc["C.B-grpo-kl", "kind"] == "structural"
    # GRPO-turn − GRPO on math + search: (0 + 4) / 2 = +2 pp, tested against 4.1-grpo's d (21.5 % of GRPO's 23 %)
    assert "= 4.94 pp" in rows.loc["C.M-grpo_turn-grpo", "expected"]
    assert rows.loc["C.M-grpo_turn-grpo", "ours_mean"] == pytest.approx(2.0, abs=0.5)
    assert "21.5 % relative" in rows.loc["C.M-grpo_turn-grpo", "expected"]
    assert (rows.source == "control (this artifact)").all()
    assert rows.loc["C.A-rtpo-grpo_k-airline", "ours_mean"] == pytest.approx(20.0, abs=0.5)
    assert rows.loc["C.A-rtpo-grpo_k-math", "ours_mean"] == pytest.approx(-5.0, abs=0.5)
    assert rows.loc["C.B-interaction", "ours_mean"] == pytest.approx(4.0, abs=0.5)
    assert (rows.loc[[i for i in rows.index if rows.loc[i, "kind"] != "structural"], "n"] == len(ARM_SEEDS)).all()
    # the survive rows test the effect their paper rows do: 4.1's mapping on math, G.1-pass1's 1 pp on airline
    assert "21.5 % relative" in rows.loc["C.A-rtpo-grpo_k-math", "expected"]
    assert "minimal effect 1 pp" in rows.loc["C.A-rtpo-grpo_k-airline", "expected"]
    # the "more updates" reading belongs to RTPO − GRPO-K; on GRPO-K − GRPO "no effect" says the opposite
    assert "explained by its extra optimizer steps" in rows.loc["C.A-rtpo-grpo_k-math", "note"]
    assert "explained by its extra optimizer steps" not in rows.loc["C.A-grpo_k-grpo-math", "note"]
    assert "cannot explain a lead" in rows.loc["C.A-grpo_k-grpo-math", "note"]


def test_controls_are_a_family_of_their_own(control_results):
    """Adding the control rows moves no paper row's adjusted p-value (their own Benjamini-Hochberg family)."""
    import pandas as pd

    from rtpo.report import ledger

    with_controls = ledger.evaluate_claims(control_results).set_index("claim_id")
    sections = ledger.SECTIONS
    try:
        ledger.SECTIONS = tuple(s for s in sections if s not in (ledger.matched_updates, ledger.turn_rows_control,
                                                                 ledger.mismatch_control))
        without = ledger.evaluate_claims(control_results).set_index("claim_id")
    finally:
        ledger.SECTIONS = sections
    cols = ["p_zero_bh", "p_effect", "verdict"]
    pd.testing.assert_frame_equal(with_controls.loc[without.index, cols], without[cols])


def test_controls_table_shows_pass1_and_optimizer_steps(control_results):
    from rtpo.report.tables_studies import table_controls

    (t,) = table_controls(control_results)
    d = t.data.set_index(["task", "arm", "metric"])
    assert d.loc[("airline", "GRPO-K (mb-4)", "optimizer_steps_per_step"), "mean"] == 4.0   # train_version +4 a step
    assert d.loc[("math", "GRPO-K (mb-3)", "optimizer_steps_per_step"), "mean"] == 3.0
    assert d.loc[("airline", "GRPO", "optimizer_steps_per_step"), "mean"] == 1.0
    assert d.loc[("airline", "RTPO", "pass@1"), "mean"] == pytest.approx(0.50 + sum(JITTER) / 4)
    assert d.loc[("search", "GRPO [full]", "pass@1"), "n"] == len(ARM_SEEDS)
    assert (d.loc[("search", "GRPO", "pass@1"), "n"] == len(MAIN_SEEDS)).all()   # in M and in B
    assert set(t.display["psi"]) == {"qwen3", "full"}
    assert d.loc[("search", "GRPO-turn (rows-turn)", "pass@1"), "n"] == len(ARM_SEEDS)
    assert (t.display.arm == "RTPO").sum() == 5   # once per (control, task): A math, airline; M math, search; B


def test_control_b_with_the_sweeps_target_is_read_by_the_sweeps_report(control_results):
    """With `target: sweep` (the CPU default's) Control B leaves the paper's ledger ("not run", pointing at
    sweep_claims) and the sweep's report gives its rows, read from its arms and the main runs they pair with:
    the values and verdicts they have when the study runs with `all`."""
    from rtpo.report.ledger import evaluate_claims
    from rtpo.report.load import load_results
    from rtpo.report.stats import NOT_RUN
    from rtpo.report.sweep import control_rows

    cfg = copy.deepcopy(control_results.cfg)
    cfg["ablations"]["mismatch"]["target"] = "sweep"
    in_all = evaluate_claims(control_results).set_index("claim_id")
    rows = {r["claim_id"]: r for r in control_rows(control_results.root, cfg)}
    assert list(rows) == ["C.B-interaction", "C.B-grpo-full", "C.B-grpo-kl"]
    for cid, r in rows.items():
        assert (r["verdict"], r["n"], r["evidence"]) == (in_all.loc[cid, "verdict"], in_all.loc[cid, "n"], "sweep_claims")
        assert r["ours_mean"] == pytest.approx(in_all.loc[cid, "ours_mean"])
    assert rows["C.B-interaction"]["family"] == in_all.loc["C.B-interaction", "family"] == "controls"
    paper = evaluate_claims(load_results(control_results.root, cfg)).set_index("claim_id")
    assert paper.loc["C.B-interaction", "verdict"] == NOT_RUN and "sweep_claims" in paper.loc["C.B-interaction", "note"]
    assert "C.B-grpo-full" not in paper.index
    # without the study, the sweep's report has no control rows
    del cfg["ablations"]["mismatch"]
    assert control_rows(control_results.root, cfg) == []
