"""rtpo.dag, the workflow's Python without Snakemake: the grid, the ablation cells, which
cells reuse a main run, the settings fingerprints and their single source with the jobs.

The configs are validated and their schema defaults filled as Snakemake does (`snakemake.utils.validate`).
The workflow itself (rules, dry runs, the smoke DAG end to end) is tests/test_workflow.py's.
"""

from __future__ import annotations

import copy
import json
import types
from pathlib import Path

import pytest
import yaml
from snakemake.utils import validate

from rtpo import dag, experiment
from rtpo.config import SCHEMA, data_settings, set_path, task_file_options
from tests.report_fixture import every_study

ROOT = Path(__file__).resolve().parent.parent


def config(name: str) -> dict:
    cfg = yaml.safe_load((ROOT / "config" / f"{name}.yaml").read_text())
    validate(cfg, schema=str(SCHEMA))  # fills the schema's defaults, as common.smk does
    return cfg


@pytest.fixture(scope="module")
def cpu() -> dict:
    """The CPU default on one seed list with every study at every arm (tests.report_fixture.every_study): the
    grid these mechanics are stated on. The shipped config's per-cell seeds: tests/test_seed_counts.py."""
    cfg = every_study(config("config"))
    validate(cfg, schema=str(SCHEMA))
    return cfg


def test_fingerprint_is_canonical_and_stamps_are_short():
    a = experiment.fingerprint({"b": [1, {"y": 2, "x": 1}], "a": 0.5})
    assert a == experiment.fingerprint({"a": 0.5, "b": [1, {"x": 1, "y": 2}]}) == '{"a":0.5,"b":[1,{"x":1,"y":2}]}'
    assert len(experiment.stamp(a)) == 16 and experiment.stamp(a) != experiment.stamp(a.replace("0.5", "0.6"))


def test_ablation_cells_of_the_cpu_default(cpu):
    cells = experiment.ablation_cells(cpu["ablations"])
    a = cpu["ablations"]
    want = (len(a["group_size"]["values"]) + len(a["sync"]["values"]) + len(a["continuation"]["values"])
            + len(a["credit_assignment"]["methods"])
            + len(a["matched_updates"]["mini_batches"]) * len(a["matched_updates"]["methods"])
            + len(a["turn_rows"]["tasks"]) + len(a["mismatch"]["methods"]))
    assert len(cells) == want == len({c.key for c in cells})
    assert all(c.seeds == tuple(a["seeds"]) for c in cells)
    by_key = {c.key: c for c in cells}
    c = by_key["sync/interval-2/search/rtpo"]
    assert c.sets == ("method.rtpo.sync=interval:2",) and c.run_dir(1) == "results/ablations/sync/interval-2/search/rtpo/seed1"
    assert c.eval_file(0) == "results/ablations/sync/interval-2/search/rtpo/eval_seed0.json"
    ca = by_key["credit_assignment/psi-full/math/seeupo"]
    assert ca.sets == ("method.seeupo.psi=full",)
    assert experiment.variant_name("kl:0.01") == "kl-0.01"


def test_arms_that_equal_the_main_grid_copy_its_runs(cpu):
    d = dag.Dag(cpu)
    G = cpu["method"]["rtpo"]["group_size"]   # the main runs' G is one of the study's values
    assert G != 2 and cpu["method"]["rtpo"]["sync"] == "per_stage"
    assert d.reused[f"group_size/G{G}/airline/rtpo"] == ("airline", "rtpo")
    assert d.reused["sync/per_stage/search/rtpo"] == ("search", "rtpo")
    assert d.reused["group_size/G2/airline/rtpo"] is None
    assert d.reused["credit_assignment/psi-full/math/grpo"] is None  # grpo's psi is the env's (qwen3)
    trained, reused = {c.key for c in d.trained_cells()}, {c.key for c in d.reused_cells()}
    assert trained | reused == set(d.cell_by_key) and not trained & reused
    # every arm runs the ablation seeds, a copied one as copies of the main runs of those seeds (the ledger
    # adds the main grid's other seeds: rtpo.report.claims.claim.with_main_seeds)
    assert d.cell_by_key["sync/per_stage/search/rtpo"].seeds == tuple(cpu["ablations"]["seeds"])
    assert d.cell_by_key["group_size/G2/airline/rtpo"].seeds == tuple(cpu["ablations"]["seeds"])
    assert set(cpu["ablations"]["seeds"]) < set(cpu["seeds"])   # the CPU default has main seeds beyond them
    copied = d.copied_runs["sync/per_stage/search/rtpo/seed2"]
    assert copied.copy_of == experiment.RunKey("main", "", "search", "rtpo", 2)
    assert copied.key == experiment.RunKey("sync", "per_stage", "search", "rtpo", 2)
    assert d.copied_evals["sync/per_stage/search/rtpo/eval_seed1"].copy_of.eval_file() == \
        "results/eval/search/rtpo/seed1.json"
    cfg = copy.deepcopy(cpu)
    cfg["ablations"]["reuse_main_runs"] = False
    assert dag.Dag(cfg).reused_cells() == []


def test_seed_groups_name_their_jobs(cpu):
    assert experiment.seed_groups([0, 1, 2, 3, 4], 2) == [(0, 1), (2, 3), (4,)]
    assert [experiment.group_label(g) for g in [(3,), (0, 1, 2), (0, 2, 7)]] == ["seed3", "seeds0-2", "seeds0_2_7"]
    cfg = copy.deepcopy(cpu)
    cfg["seeds"], cfg["seeds_per_job"] = list(range(10)), 1
    assert dag.Dag(cfg).seed_jobs("train_rtpo", cfg["seeds"]) == [dag.SeedJob("train_rtpo", None)]
    cfg["seeds_per_job"] = 10
    (job,) = dag.Dag(cfg).seed_jobs("train_rtpo", cfg["seeds"])
    assert job.rule == "train_rtpo" and job.seeds == tuple(range(10)) and job.label == "seeds0-9"
    assert job.paths("runs/{task}/seed{seed}")[3] == "runs/{task}/seed3" and job.seed_arg() == "0 1 2 3 4 5 6 7 8 9"
    cfg["seeds_per_job"] = 4
    jobs = dag.Dag(cfg).seed_jobs("train_rtpo", cfg["seeds"])
    assert [j.rule for j in jobs] == ["train_rtpo_seeds0to3", "train_rtpo_seeds4to7", "train_rtpo_seeds8to9"]
    wild = dag.SeedJob("train_rtpo", None)
    assert wild.paths("runs/seed{seed}") == ["runs/seed{seed}"]
    assert wild.seed_arg(types.SimpleNamespace(seed="7")) == "7"


def test_seeds_per_job_cross_references(cpu):
    cfg = copy.deepcopy(cpu)
    cfg["seeds_per_job"], cfg["engine"] = 3, "verl"
    assert any("seeds_per_job" in e for e in dag.cross_reference_errors(cfg))
    cfg["engine"] = "local"
    cfg["ablations"]["seeds"] = [7]
    assert any("'ablations.seeds' [7] must be among 'seeds'" in e for e in dag.cross_reference_errors(cfg))


def test_grid_and_targets(cpu):
    d = dag.Dag(cpu)
    n = len(cpu["tasks"]) * len(cpu["methods"]) * len(cpu["seeds"])
    assert len(d.all_main_cells()) == n and len(d.experiment.select("main")) == n
    assert d.all_tasks() == sorted(cpu["tasks"])
    assert "results/runs/math/rtpo/seed0/summary.json" in d.train_targets()
    assert "results/runs/math/rtpo/seed0/final" in d.train_targets(with_final=True)
    assert "results/eval/search/grpo/seed1.json" in d.eval_targets()
    abl = d.ablation_targets(with_final=True)
    assert "results/theory" in abl and "results/ablations/group_size/G2/airline/rtpo/seed0/final" in abl
    G = cpu["method"]["rtpo"]["group_size"]
    assert f"results/ablations/group_size/G{G}/airline/rtpo/seed0/final" not in abl  # reused: no model of its own
    assert set(d.all_results()) <= set(d.every_run_output()) | {"results/theory"}
    assert d.data_targets()[:3] == ["results/data/airline/train.jsonl", "results/data/airline/eval.jsonl",
                                    "results/data/airline/experts.jsonl"]


def test_run_settings_apply_the_cells_overrides(cpu):
    d = dag.Dag(cpu)
    s = d.run_settings("rtpo", "search", ("method.rtpo.sync=kl:0.01",))
    assert s["method"]["sync"] == "kl:0.01" and s["engine"] == cpu["engine"]
    assert d.run_settings("rtpo", "search")["method"]["sync"] == "per_stage"
    assert d.run_settings("rtpo_ca", "math")["psi"] == "full"  # a method's psi overrides the env's
    with pytest.raises(dag.ConfigError, match="override"):
        d.run_settings("rtpo", "math", ("method.rtpo.sync.x=1",))  # sync is not a mapping


def test_data_fingerprint_is_what_the_data_job_reads(cpu, tmp_path, monkeypatch):
    """`rtpo data` builds its generator options from rtpo.config.data_settings, the function the DAG
    fingerprints: an env option (max_turns) changes the data job's fingerprint, a key the data job
    does not read (psi) does not, and the options are exactly task_file_options(fingerprinted dict)."""
    import rtpo.data
    from rtpo import cli

    cfg = config("smoke")
    d = dag.Dag(cfg)
    base = experiment.fingerprint(d.data_settings("math"))
    for key, value, changes in (("max_turns", 2, True), ("psi", "truncate:1", False)):
        c = copy.deepcopy(cfg)
        c["env"]["math"][key] = value
        assert (experiment.fingerprint(dag.Dag(c).data_settings("math")) != base) is changes, key

    seen = []
    real = rtpo.data.write_task_files
    monkeypatch.setattr(rtpo.data, "write_task_files", lambda kind, opts, out, progress=False:
                        seen.append(opts) or real(kind, opts, out))
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    assert cli.main(["data", "--config", str(tmp_path / "c.yaml"), "--task", "airline", "--out", str(tmp_path)]) == 0
    assert seen == [task_file_options(data_settings(cfg, "airline"))]
    assert seen[0]["env"] == {k: v for k, v in cfg["env"]["airline"].items() if k in ("max_turns", "max_obs_chars", "top_k")}
    assert (tmp_path / "experts.jsonl").read_text().count("\n") == cfg["sft"]["demos_per_task"]


def _stamp(cfg, method: str, task: str) -> str:
    """The job stamp of a main run (every seed's is the same): rtpo.run_record.job_stamp of its identity."""
    return dag.Dag(cfg).experiment.select("main", task=task, method=method)[0].stamp


def test_train_stamp_follows_upstream_settings(cpu):
    stamp = _stamp(cpu, "grpo", "math")
    run = dag.Dag(cpu).experiment.select("main", task="math", method="grpo")[0]
    from rtpo.run_record import job_stamp

    assert stamp == run.stamp == job_stamp(run.identity)
    for path, value in (("sft.imperfection", 0.5), ("method.grpo.per_task.math.chains", 4),
                        ("method.grpo.lr", 1e-3), ("env.math.max_turns", 2)):
        c = copy.deepcopy(cpu)
        set_path(c, f"{path}={value}")
        assert _stamp(c, "grpo", "math") != stamp, path
    for path, value in (("model.threads", 7),                     # speed only
                        ("method.grpo.per_task.airline.chains", 4)):  # another task's budget
        c = copy.deepcopy(cpu)
        set_path(c, f"{path}={value}")
        assert _stamp(c, "grpo", "math") == stamp, path


def test_gpu_rules_and_cross_references(cpu):
    d = dag.Dag(cpu)
    rules = d.gpu_rules()
    assert "train_vanilla" not in rules and "train_rtpo" in rules and "evaluate_run" in rules
    assert "ablation_train" in rules
    assert dag.cross_reference_errors(cpu) == []
    c = copy.deepcopy(cpu)
    del c["env"]["search"]
    assert dag.cross_reference_errors(c)[0] == "'env.search' is missing, but 'tasks' uses it"
    c = copy.deepcopy(cpu)
    c["ablations"]["credit_assignment"]["methods"] = ["nope"]
    assert "'method.nope' is missing, but 'ablations.credit_assignment.methods' uses it" in dag.cross_reference_errors(c)


def test_paper_scale_search_data():
    paper = config("paper")
    s = dag.Dag(paper).search
    assert s.corpus and s.index and s.inputs("search") == {"index": s.index} and s.inputs("math") == {}
    assert s.build_index_command == "python -m rtpo.retrieval.index build"
    dense = dag.SearchData.of({"data": {"search": {"corpus": {"path": "c.jsonl"},
                                                   "retriever": {"kind": "dense_index", "index": "ix"}}}})
    assert dense.build_index_command.startswith("python -m rtpo.retrieval.dense build --model ")
    assert dag.SearchData.of({"data": {}}).inputs("search") == {}
    bad = copy.deepcopy(paper)
    del bad["data"]["search"]["corpus"]
    assert any("needs 'data.search.corpus'" in e for e in dag.cross_reference_errors(bad))


def test_prepare_settings_name_the_web_key_only_at_paper_scale():
    paper = config("paper")
    web = (paper["data"]["search"].get("web") or {}).get("key_env", "SERPAPI_API_KEY")
    with_key = dag.Dag(paper, environ={web: "x"}).prepare_settings("search")
    without = dag.Dag(paper, environ={}).prepare_settings("search")
    assert with_key["web_key_set"] is True and without["web_key_set"] is False
    assert set(with_key["decontaminate_against"]) == set(dag.Dag(paper).tasks_with_benchmarks()) >= {"math", "search"}
    cpu = config("smoke")
    assert dag.Dag(cpu, environ={web: "x"}).prepare_settings("search") == dag.Dag(cpu).data_settings("search")


def test_effective_config_is_named_by_its_content(cpu):
    path, text = dag.effective_config(cpu, "config/config.yaml")
    assert path.startswith(f"results/config/{cpu['name']}-") and path.endswith(".yaml")
    assert text.startswith("# written by workflow/rules/common.smk from: config/config.yaml\n")
    assert yaml.safe_load(text) == json.loads(json.dumps(cpu))
    c = copy.deepcopy(cpu)
    c["train"]["lr"] = 0.123
    assert dag.effective_config(c, "x")[0] != path


def test_train_shell_names_the_params_the_rules_give():
    fields = {"params.config", "params.method", "params.task", "params.seeds", "params.out",
              "input.model", "input.train", "params.key", "params.logs", "log.job"}
    import string

    used = {f for _, f, _, _ in string.Formatter().parse(dag.TRAIN_SHELL) if f}
    assert used == fields
    shell = dag.TRAIN_SHELL.format(params=types.SimpleNamespace(config="c", method="m", task="t", seeds="0 1",
                                                                out="'o/seed{seed}'",
                                                                key=dag.key_args("sync", "kl-0.01"),
                                                                logs="--log 'l/seed{seed}.log'"),
                                   input=types.SimpleNamespace(model="M", train="T"), log=types.SimpleNamespace(job="L"))
    assert shell.startswith("exec rtpo train ")   # the job's process is rtpo itself: it gets Slurm's SIGTERM
    # the run's --set overrides come from its key (rtpo.experiment), not the command line
    assert ("--seed 0 1 --model M --train-file T --scope sync --variant kl-0.01 --out 'o/seed{seed}' "
            "--job-guard --log 'l/seed{seed}.log' > L 2>&1") in shell
    assert dag.key_args("main") == "--scope main"


def test_the_rules_call_the_pipeline_without_an_alias_layer_or_a_key_built_by_hand():
    """common.smk re-exported ~40 names of the DAG (`run_settings = PIPELINE.run_settings`, ...), so a rule was
    three hops from the code it ran, and built the run key of a copied arm's run.json by hand. The rules call
    PIPELINE (rtpo.dag.Dag) and the modules dag / experiment directly, and a copied arm's key is its Run's."""
    import re

    root = Path(__file__).resolve().parent.parent / "workflow"
    common = (root / "rules" / "common.smk").read_text()
    name = r"(?:PIPELINE|dag|experiment)\.[\w.]+"   # a name of the DAG, not a call of it
    aliases = re.findall(rf"^\w[\w, ]* = \(?\s*{name}\b(?!\()[^\n]*$|^\s+{name},?\s*(?:#.*)?$", common, re.M)
    assert not aliases, aliases
    for f in [root / "Snakefile", *sorted((root / "rules").glob("*.smk"))]:
        assert not re.search(r"[\"']scope[\"']\s*:", f.read_text()), f"{f} builds a run key by hand"
