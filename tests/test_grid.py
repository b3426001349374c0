"""One experiment, one layout: the runs and files the DAG writes are exactly those the report reads, for
every shipped config; runs, variant names, paths, settings and copies come from rtpo.experiment alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from rtpo import experiment as grid
from rtpo.experiment import MAIN, Experiment, RunKey
from rtpo.config import load_config
from rtpo.dag import Dag
from rtpo.report.load import load_results
from tests.conftest import ROOT

# every shipped config, and config.yaml with each overlay (config/overlays/) merged over it as Snakemake merges
# `--configfile config/config.yaml config/overlays/X.yaml`
CONFIGS = (sorted(p.name for p in (ROOT / "config").glob("*.yaml"))
           + sorted(f"config.yaml+{p.name}" for p in (ROOT / "config" / "overlays").glob("*.yaml")))


def shipped_config(name: str) -> dict:
    """A CONFIGS entry, validated as load_config validates a file."""
    import yaml
    from snakemake.utils import update_config

    from rtpo.config import validate_config

    base, _, layer = name.partition("+")
    cfg = yaml.safe_load((ROOT / "config" / base).read_text())
    if layer:
        update_config(cfg, yaml.safe_load((ROOT / "config" / "overlays" / layer).read_text()))
    validate_config(cfg, source=name)
    return cfg


@pytest.mark.parametrize("name", CONFIGS)
def test_dag_writes_exactly_the_runs_the_report_reads(name):
    cfg = shipped_config(name)
    d = Dag(cfg)
    written = set(d.train_targets() + d.eval_targets() + d.ablation_targets()) - {"results/theory"}
    runs = {f"{r.run_dir()}/summary.json" for r in Experiment(cfg).report_runs()}
    evals = {r.eval_file() for r in Experiment(cfg).report_runs()}
    assert written == runs | evals, (sorted(written - runs - evals)[:5], sorted((runs | evals) - written)[:5])
    # the report's studies are the DAG's arms: same study, task, methods and variant names
    from rtpo.report.load import ablation_studies

    st = ablation_studies(cfg)
    in_all = [c for c in d.cells if grid.study_target(cfg["ablations"], c.study) == "all"]
    for c in in_all:
        assert c.variant in st[c.study].variant_names() and c.method in st[c.study].methods
        assert c.task in st[c.study].tasks and (c.variant, c.task, c.method) in st[c.study].cells
        assert st[c.study].task == c.task or c.study in ("matched_updates", "turn_rows")   # one task, or several
    assert sum(len(s.cells) for s in st.values()) == len(in_all)
    # the sweep's target: its cells, the arms of studies with `target: sweep` (Control B) and the main runs those
    # arms pair with by seed (same task and method), which its report reads
    with_sweep = [c for c in d.cells if c not in in_all]
    assert not set(st) & {c.study for c in with_sweep}
    twins = [r for r in Experiment(cfg).select(MAIN)
             if any((r.task, r.method) == (c.task, c.method) and r.seed in c.seeds for c in with_sweep)]
    read = {c.eval_file(s) for c in [*d.sweep, *with_sweep] for s in c.seeds} | \
           {f"{c.run_dir(s)}/summary.json" for c in [*d.sweep, *with_sweep] for s in c.seeds} | \
           {r.eval_file() for r in twins} | {f"{r.run_dir()}/summary.json" for r in twins}
    assert read == set(d.sweep_targets())
    assert bool(twins) == bool(with_sweep)


def test_variant_names_and_paths():
    assert [grid.study_variant("group_size", 3), grid.study_variant("sync", "interval:2"),
            grid.study_variant("sync", "kl:0.01"), grid.study_variant("continuation", "on_policy"),
            grid.study_variant("credit_assignment", "truncate:4")] == \
        ["G3", "interval-2", "kl-0.01", "on_policy", "psi-truncate-4"]
    assert grid.run_dir("math", "rtpo", 2) == "results/runs/math/rtpo/seed2"
    assert grid.eval_file("math", "rtpo", 2, "sync", "kl-0.01", root="ref") == \
        "ref/ablations/sync/kl-0.01/math/rtpo/eval_seed2.json"
    cells = grid.ablation_cells({"seeds": [0, 1], "group_size": {"task": "airline", "values": [2, 4]},
                                 "credit_assignment": {"task": "math", "psi": "full", "methods": ["grpo", "rtpo_ca"]}})
    assert [(c.key, c.sets, c.value) for c in cells] == [
        ("group_size/G2/airline/rtpo", ("method.rtpo.group_size=2",), 2),
        ("group_size/G4/airline/rtpo", ("method.rtpo.group_size=4",), 4),
        ("credit_assignment/psi-full/math/grpo", ("method.grpo.psi=full",), "full"),
        ("credit_assignment/psi-full/math/rtpo_ca", ("method.rtpo_ca.psi=full",), "full")]
    assert all(c.seeds == (0, 1) for c in cells)


def test_report_reads_a_run_from_the_path_the_grid_names(tmp_path):
    """A run written at the grid's path of an ablation arm is what the report loads for that arm; the
    same file one directory off is not (it is reported missing)."""
    from tests.report_fixture import fixture_config, make_results_tree

    cfg = fixture_config(seeds=[0], **{"ablations.seeds": [0], "train.steps": 2})
    make_results_tree(tmp_path, cfg, theory=False)
    res = load_results(tmp_path / "results", cfg)
    assert not res.missing or all("theory" in m for m in res.missing)
    arm = next(c for c in Experiment(cfg).arms if c.study == "sync" and c.value == "kl:0.01")
    path = Path(arm.eval_file(0, root=str(tmp_path / "results")))
    assert path.exists()
    moved = path.parent.parent / "kl:0.01" / arm.method / path.name
    moved.parent.mkdir(parents=True)
    path.rename(moved)
    assert str(path) in load_results(tmp_path / "results", cfg).missing


def test_report_takes_the_main_grids_group_size_from_its_runs(tmp_path):
    """The group-size tables and claims compare against the G the main grid's runs trained with on the
    study's task (their run.json: the per-task override included), not a value worked out from the config."""
    from rtpo.report.load import Results, ablation_studies
    from rtpo.report.tables_studies import _group_ref

    cfg = {"tasks": ["airline"], "methods": ["rtpo"], "seeds": [0],
           "method": {"rtpo": {"group_size": 4}},
           "ablations": {"seeds": [0], "group_size": {"task": "airline", "values": [2, 3, 4]}}}
    import pandas as pd

    key = RunKey("main", "", "airline", "rtpo", 0)
    res = Results(Path("."), cfg, pd.DataFrame(), pd.DataFrame(), None, ablation_studies(cfg),
                  records={key: {"key": key.as_dict(), "settings": {"method": {"group_size": 3}}}})
    assert res.main_setting("rtpo", "airline", "group_size") == 3
    assert _group_ref(res, res.studies["group_size"]) == "G3"
    res.records[key]["settings"]["method"]["group_size"] = 4
    assert _group_ref(res, res.studies["group_size"]) == "G4"
    res.records.clear()   # no run read: the first variant, nothing guessed from the config
    assert _group_ref(res, res.studies["group_size"]) == "G2"


@pytest.mark.parametrize("name", CONFIGS)
def test_one_list_of_runs(name):
    """Every run of a config once: its settings are rtpo.config.method_settings after its --set overrides,
    a copied arm has the same settings as the main run it copies, and the sweep's runs sit under sweep/."""
    import copy

    from rtpo.config import method_settings, set_path

    cfg = shipped_config(name)
    exp = Experiment(cfg)
    keys = [r.key for r in exp.runs]
    assert len(keys) == len(set(keys))
    for r in exp.runs:
        c = copy.deepcopy(cfg)
        for s in r.sets:
            set_path(c, s)
        assert r.settings == {"engine": c["engine"], "verl": c.get("verl"),
                              **method_settings(c, r.method, "search" if r.scope == "sweep" else r.task)}
        assert r.seed in r.seed_group
        if r.copy_of is not None:
            assert exp.run(r.copy_of).settings == r.settings and r.copy_of.seed == r.seed
            assert r.stamp == exp.run(r.copy_of).stamp
        if r.scope == "sweep":
            assert r.run_dir().startswith("results/sweep/h")
    assert {r.scope for r in exp.runs} >= {"main"}
