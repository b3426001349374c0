"""Per-cell seed counts (config `seed_counts`) and per-study seeds (`ablations.<study>.seeds`): the runs the
experiment lists, their seed groups and the DAG's rules for them, that a config without them is unchanged,
how a comparison of two cells with different counts pairs its seeds, and a study the config leaves out.

Constructed configs throughout (the shipped CPU default is one of them); the results trees are
tests/report_fixture.py's synthetic ones, read by the real report code."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pandas as pd
import pytest
import yaml
from snakemake.utils import validate

from rtpo import dag
from rtpo.config import SCHEMA, ConfigError, load_config
from rtpo.experiment import MAIN, Experiment, seed_groups
from tests.report_fixture import cell_seeds, fixture_config, make_results_tree, write_config

ROOT = Path(__file__).resolve().parent.parent


def config(name: str, **changes) -> dict:
    cfg = yaml.safe_load((ROOT / "config" / f"{name}.yaml").read_text())
    cfg.update(copy.deepcopy(changes))
    validate(cfg, schema=str(SCHEMA))  # fills the schema's defaults, as common.smk does
    return cfg


def main_seeds(exp: Experiment) -> dict[tuple[str, str], list[int]]:
    out: dict[tuple[str, str], list[int]] = {}
    for r in exp.select(MAIN):
        out.setdefault((r.task, r.method), []).append(r.seed)
    return out


def produced(jobs: list[dag.SeedJob], tasks: list[str], methods: list[str]) -> list[tuple[str, str, int]]:
    """(task, method, seed) of every file the rules of `jobs` can make, one entry per (rule, file): a file
    two rules can make appears twice (Snakemake's AmbiguousRuleException)."""
    out = []
    for j in jobs:
        cons = j.wildcard_constraints
        for t in tasks:
            for m in methods:
                if all(re.fullmatch(cons.get(k, ".*"), v) for k, v in (("task", t), ("method", m))):
                    out += [(t, m, s) for s in j.seeds]
    return out


def test_per_cell_counts_give_exactly_the_runs_asked_for():
    cfg = config("smoke", seeds=[0, 1], seed_counts={"math": {"rtpo": 5, "grpo": 1}, "airline": {"vanilla": 3}})
    got = main_seeds(Experiment(cfg))
    for t in cfg["tasks"]:
        for m in cfg["methods"]:
            want = {("math", "rtpo"): [0, 1, 2, 3, 4], ("math", "grpo"): [0], ("airline", "vanilla"): [0, 1, 2]}
            assert got[(t, m)] == want.get((t, m), [0, 1]), (t, m)
    # the shipped CPU default: each cell at its seed_counts entry, the others at `seeds`
    cpu = load_config(ROOT / "config" / "config.yaml")
    got = main_seeds(Experiment(cpu))
    assert cpu["seed_counts"], "the CPU default gives some cells their own seed counts"
    for (t, m), seeds in got.items():
        assert seeds == cell_seeds(cpu, t, m), (t, m)
    assert len({len(s) for s in got.values()}) > 1


def test_a_five_seed_cell_trains_in_groups_of_four_and_one():
    cfg = config("smoke", seeds=[0, 1, 2], seeds_per_job=4, seed_counts={"math": {"rtpo": 5}, "search": {"rtpo": 6}})
    exp = Experiment(cfg)
    groups = {(r.task, r.method, r.seed): r.seed_group for r in exp.select(MAIN)}
    assert [groups[("math", "rtpo", s)] for s in range(5)] == [(0, 1, 2, 3)] * 4 + [(4,)]
    assert [groups[("search", "rtpo", s)] for s in range(6)] == [(0, 1, 2, 3)] * 4 + [(4, 5)] * 2
    assert {groups[("math", "grpo", s)] for s in range(3)} == {(0, 1, 2)}
    # the DAG: one rule per seed group, each constrained to the cells that have it, so every main run is
    # made by exactly one rule
    d = dag.Dag(cfg)
    jobs = d.main_seed_jobs("train_rtpo", "rtpo")
    assert {(j.rule, j.seeds) for j in jobs} == {("train_rtpo_seeds0to2", (0, 1, 2)), ("train_rtpo_seeds0to3", (0, 1, 2, 3)),
                                                 ("train_rtpo_seed4", (4,)), ("train_rtpo_seeds4to5", (4, 5))}
    made = produced(jobs, cfg["tasks"], ["rtpo"])
    assert sorted(made) == sorted((r.task, r.method, r.seed) for r in exp.select(MAIN, method="rtpo"))
    made = produced(d.main_seed_jobs("evaluate_run"), cfg["tasks"], cfg["methods"])
    assert sorted(made) == sorted(r.key.task_method_seed() for r in exp.select(MAIN))
    # a method whose cells share one group keeps the plain rule name
    assert [(j.rule, j.seeds, j.constraints) for j in d.main_seed_jobs("train_grpo", "grpo")] == \
        [("train_grpo", (0, 1, 2), ())]


def test_study_seeds_replace_the_ablation_seeds_for_their_arms():
    cfg = config("smoke", seeds=[0, 1, 2], seeds_per_job=2, seed_counts={"search": {"rtpo": 4}})
    cfg["ablations"]["continuation"]["seeds"] = [0, 1, 2, 3]
    cfg["ablations"]["seeds"] = [0]
    d = dag.Dag(cfg)
    arms = {c.key: c.seeds for c in d.cells}
    assert arms["continuation/off_policy/search/rtpo"] == (0, 1, 2, 3)
    assert arms["continuation/on_policy/search/rtpo"] == (0, 1, 2, 3)
    assert arms["sync/interval-2/search/rtpo"] == (0,)
    # the on-policy twin copies the main runs of all four seeds (the main cell has them), no retrain
    assert d.reused["continuation/on_policy/search/rtpo"] == ("search", "rtpo")
    assert {k for k in d.copied_runs if k.startswith("continuation/")} == \
        {f"continuation/on_policy/search/rtpo/seed{s}" for s in range(4)}
    jobs = d.ablation_seed_jobs("ablation_train")
    by_rule = {j.rule: (j.seeds, j.wildcard_constraints["cell"]) for j in jobs}
    assert by_rule["ablation_train_seeds0to1"][0] == (0, 1) and by_rule["ablation_train_seed0"][0] == (0,)
    off = "continuation/off_policy/search/rtpo"
    assert re.fullmatch(by_rule["ablation_train_seeds2to3"][1], off)
    assert not re.fullmatch(by_rule["ablation_train_seed0"][1], off)


def test_a_config_without_seed_counts_keeps_its_runs():
    """Every shipped config that has no seed_counts: the runs, seed groups and rules are the main grid's
    tasks x methods x seeds in groups of seeds_per_job, then the airline study, then the arms at
    ablations.seeds, enumerated here independently; seed_counts that restate `seeds` change nothing."""
    for name in ("smoke", "paper", "rehearsal"):
        cfg = config(name)
        assert "seed_counts" not in cfg
        exp = Experiment(cfg)
        per = int(cfg["seeds_per_job"])
        groups = {s: g for g in seed_groups(cfg["seeds"], per) for s in g}
        want = [(MAIN, "", t, m, s, groups[s]) for t in cfg["tasks"] for m in cfg["methods"] for s in cfg["seeds"]]
        abl = [int(s) for s in cfg["ablations"]["seeds"]]
        if "airline" in cfg["tasks"]:
            agroups = {s: g for g in seed_groups(abl, per) for s in g}
            want += [(MAIN, "", "airline", m, s, agroups[s]) for m in cfg["methods"] for s in abl
                     if s not in cfg["seeds"]]
        got = [(r.scope, r.variant, r.task, r.method, r.seed, r.seed_group) for r in exp.select(MAIN)]
        assert got == want, name
        assert all(r.seeds == tuple(abl) for r in exp.arms), name
        same = copy.deepcopy(cfg)
        if [int(s) for s in cfg["seeds"]] == list(range(len(cfg["seeds"]))):
            same["seed_counts"] = {t: {m: len(cfg["seeds"]) for m in cfg["methods"]} for t in cfg["tasks"]}
            exp2 = Experiment(same)
            assert [(str(r.key), r.sets, r.seed_group, r.stamp) for r in exp2.runs] == \
                [(str(r.key), r.sets, r.seed_group, r.stamp) for r in exp.runs], name
            d, d2 = dag.Dag(cfg), dag.Dag(same)
            for m in cfg["methods"]:
                assert d2.main_seed_jobs(f"train_{m}", m) == d.seed_jobs(f"train_{m}", cfg["seeds"]), name
            assert d2.main_seed_jobs("evaluate_run") == d.seed_jobs("evaluate_run", cfg["seeds"]), name


@pytest.mark.parametrize("edit, message", [
    ({"seed_counts": {"math": {"tree_grpo": 3}}}, "'seed_counts.math.tree_grpo' names a method"),
    ({"seed_counts": {"airline": {"rtpo": 3}}, "tasks": ["math", "search"]}, "'seed_counts.airline' names a task"),
    ({"seed_counts": {"math": {"rtpo": 3}}, "seeds": [1, 2]}, "'seeds' [1, 2] must be 0..n-1"),
    ({"seed_counts": {"airline": {"rtpo": 1}}, "seeds_per_job": 2},
     "must be among the 1 seeds of 'seed_counts.airline.rtpo'"),
])
def test_bad_seed_counts_name_the_key(edit, message):
    cfg = config("smoke", methods=["vanilla", "grpo", "rtpo"])
    cfg.update(edit)
    cfg["ablations"]["seeds"] = [0, 1] if "seeds_per_job" in edit else [0]
    cfg["seeds"] = edit.get("seeds", [0, 1] if "seeds_per_job" in edit else [0])
    assert any(message in e for e in dag.cross_reference_errors(cfg)), dag.cross_reference_errors(cfg)


def test_schema_refuses_a_negative_count_and_zero_leaves_a_cell_out(tmp_path):
    cfg = yaml.safe_load((ROOT / "config" / "smoke.yaml").read_text())
    cfg["seed_counts"] = {"math": {"rtpo": -1}}
    with pytest.raises(ConfigError, match="seed_counts"):
        load_config(write_config(cfg, tmp_path / "bad.yaml"))
    # 0: the cell is not run, on airline the G.1 study's seeds included (the CPU default's ARPO and SeeUPO)
    from rtpo.experiment import Experiment

    cfg = load_config("config/config.yaml")
    exp = Experiment(cfg)
    assert cfg["seed_counts"]["airline"]["arpo"] == 0
    assert not exp.select(task="airline", method="arpo") and not exp.select(task="airline", method="seeupo")
    assert {r.seed for r in exp.select("main", "math", "arpo")} == {0, 1, 2}


def test_a_paired_row_pairs_the_seeds_both_cells_have(tmp_path):
    """RTPO at 5 seeds on math and search, GRPO at 3: RTPO − GRPO pairs seeds 0-2 (n = 3); RTPO − Vanilla,
    both at 5, pairs all five."""
    from rtpo.report import ledger
    from rtpo.report.claims.verdicts import evaluate_claim
    from rtpo.report.load import load_results

    counts = {t: {"rtpo": 5, "vanilla": 5} for t in ("math", "search")}
    cfg = fixture_config(**{"train.steps": 4, "seeds": [0, 1, 2], "seed_counts": counts, "ablations.seeds": [0, 1, 2]})
    make_results_tree(tmp_path, cfg, theory=False)
    res = load_results(tmp_path / "results", cfg)
    assert sorted(res.eval_macro_by_seed(["math", "search"], "rtpo", "pass@1")) == [0, 1, 2, 3, 4]
    claims = {c.id: c for c in ledger.build_claims(res)}
    row = evaluate_claim(claims["4.1-grpo"])
    assert row["n"] == 3 and row["seeds"] == "0;1;2"
    row = evaluate_claim(claims["4.1-vanilla"])
    assert row["n"] == 5 and row["seeds"] == "0;1;2;3;4"


@pytest.mark.parametrize("study, rows, tables", [
    ("sync", ["G.6-acc"], ["tableG6_sync"]),
    ("continuation", ["4.4-average", "4.4-hardest", "4.4-horizon-trend"],
     ["table03_continuation", "table06_continuation_detail"]),
    ("credit_assignment", ["4.3-grpo", "4.3-tree_grpo", "4.3-seeupo"], ["table02_credit_assignment"]),
])
def test_a_study_left_out_gives_not_run_rows(tmp_path, study, rows, tables):
    """A study the config leaves out (the CPU default leaves sync, continuation and credit assignment to
    config/overlays/optional.yaml): the ledger's rows of it say "not run in this config" (counted apart, not
    inconclusive), and its tables say so too -- each table's own target (rtpo report tables --only ...)
    writes it rather than failing or leaving it missing."""
    from rtpo.report import ledger, tables_studies
    from rtpo.report.claims.verdicts import evaluate_claim
    from rtpo.report.cli import run_report
    from rtpo.report.load import load_results
    from rtpo.report.stats import NOT_RUN

    cfg = fixture_config(**{"train.steps": 4, "seeds": [0, 1], "ablations.seeds": [0, 1]})
    del cfg["ablations"][study]
    make_results_tree(tmp_path, cfg, theory=False)
    res = load_results(tmp_path / "results", cfg)
    assert study not in res.studies
    prefix = rows[0].split("-")[0] + "-"
    got = [c for c in ledger.build_claims(res) if c.id.startswith(prefix)]
    assert [c.id for c in got] == rows
    for c in got:
        row = evaluate_claim(c)
        # counted apart (not inconclusive: nothing ran), and no unrelated "not run" list (the deep-search one) added
        row_nr = evaluate_claim(c, not_run={"search": {"gaia"}})
        assert row["verdict"] == NOT_RUN and row["n"] == 0 and "not run in this config" in row["note"], row
        assert "gaia" not in row_nr["note"]
    counts = ledger.verdict_counts(pd.DataFrame([evaluate_claim(c) for c in got]))
    assert counts[NOT_RUN] == len(rows) and counts["inconclusive"] == 0
    for name in tables:
        (table,) = getattr(tables_studies, name)(res)
        assert "not run in this config" in table.display.iloc[0]["metric"]
        written = run_report("tables", tmp_path / "results", cfg, tmp_path / "tables", tmp_path / "figures",
                             only=[name])
        md = next(p for p in written if p.suffix == ".md")
        assert "not run in this config" in md.read_text() and "config/overlays/optional.yaml" in md.read_text()
