"""The pilot (rtpo.verl_ext.pilot, workflow/rules/pilot.smk) and the sizing `rtpo check-config` takes from it
(rtpo.verl_ext.sizing): which cells and tasks are piloted, what a pilot job's measurements become, and how
every job of the DAG is then sized, each figure naming its source, with the DAG's GPU-hours and critical
path in one line. The rehearsal (scripts/rehearse.sh) runs the pilot end to end through the fake Slurm:
docs/cluster.md. The pilot files here are planted, in the format the collectors write."""

from __future__ import annotations

import json
import re

import pytest

from rtpo.config import ROOT, ConfigError, load_config
from rtpo.signals import TIMINGS_FILE, Timings
from rtpo.verl_ext import pilot as P
from rtpo.verl_ext import startup as st
from rtpo.verl_ext.sizing import with_defaults

PROFILES = (ROOT / "slurm", ROOT / "workflow" / "profiles" / "default")


def paper(*sets: str) -> dict:
    return load_config(ROOT / "config" / "paper.yaml", list(sets))


def test_what_is_piloted():
    cells = P.pilot_cells(paper())
    assert len(cells) == 15 and ("rtpo", "math") in cells and ("grpo", "airline") in cells
    assert not any(m == "vanilla" for m, _ in cells)  # nothing to train
    assert P.pilot_eval_tasks(paper()) == ["airline", "math", "search"]
    assert P.targets(paper())[:1] == ["results/pilot/math/grpo.json"] and "results/pilot/search/eval.json" in P.targets(paper())
    rehearsal = load_config(ROOT / "config" / "rehearsal.yaml")
    assert P.pilot_cells(rehearsal) == [("rtpo", "math")] and P.pilot_eval_tasks(rehearsal) == ["math"]
    assert P.pilot_cells(load_config(ROOT / "config" / "smoke.yaml")) == []  # the local engine pilots nothing
    with pytest.raises(ConfigError, match=r"pilot.cells: 'rtpo_ca/search' is not a main-grid cell"):
        P.pilot_cells(paper("pilot.cells=[rtpo_ca/search]"))
    with pytest.raises(ConfigError, match=r"'grpo/search' trains 16 steps, not more than pilot.steps = 16"):
        P.pilot_cells(paper("pilot.steps=16", "pilot.cells=[grpo/search]"))


def test_what_a_pilot_job_measured(tmp_path):
    """A pilot run's directory as the trainer leaves it (checkpoint/rtpo_timings.json through Timings,
    metrics.jsonl, verl_command.json) -> results/pilot/<task>/<method>.json; an evaluation's shards
    (attempts.jsonl through EvalShards) -> results/pilot/<task>/eval.json; gathered into one file."""
    from rtpo.eval_shards import EvalShards

    run = tmp_path / "run"
    t = Timings(run / "checkpoint" / TIMINGS_FILE)
    t.add("startup", 1, 600.0)
    for step, s, save in ((1, 900.0, 0.0), (2, 700.0, 0.0), (3, 760.0, 180.0)):
        t.add("step", step, s, phases={"gen": 400.0, "update_actor": 200.0, **({"save_checkpoint": save} if save else {})},
              perf={"max_memory_allocated_gb": 61.0})
    t.add("save", 3, 180.0)
    t.memory([{"kind": "cuda", "max_reserved_gib": 70.5, "rank": 0}, {"kind": "cuda", "max_reserved_gib": 72.0, "rank": 1}])
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": i, "generated_tokens": 8_000_000, "time": {"rollout": 1.0}})
                                              + "\n" for i in range(3)))
    (run / "verl_command.json").write_text(json.dumps({"cmd": ["python", "trainer.n_gpus_per_node=8", "trainer.nnodes=1"],
                                                       "cpu_harness": False}))
    d = P.collect_train(run, "rtpo/math", "abc")
    assert d["gpus"] == 8 and d["startup_s"] == 600.0 and d["save_s"] == 180.0 and d["load_s"] is None
    assert d["first_step_s"] == 900.0 and d["step_s"] == 700.0  # the longest after the first, its save left out
    assert d["generated_tokens_per_gpu_s"] == pytest.approx(2 * 8e6 / ((700 + 580) * 8), rel=1e-3)  # steps 2, 3
    assert d["memory"]["peak_gib"] == 72.0 and d["steps"][2]["phases"]["save_checkpoint"] == 180.0
    assert d["steps"][0]["method_phases"] == {"rollout": 1.0}

    store = EvalShards(tmp_path / "e.json", {"k": 1}, 512, 10372)
    store.attempt(startup_s=900.0, rollout_s=600.0, trajectories=512, total=10372, generated_tokens=4_000_000,
                  servers={"tp": 2, "replicas": 2}, engine="verl")
    e = P.collect_eval(store.dir, "math")
    assert e["gpus"] == 4 and e["eval_trajectories"] == 10372
    assert e["trajectories_per_gpu_s"] == pytest.approx(512 / 600 / 4, rel=1e-3)
    # an evaluation already complete (its shards gone): measured from its eval JSON
    (tmp_path / "done.json").write_text(json.dumps({
        "throughput": {"startup_s": 800.0, "rollout_s": 3000.0, "trajectories": 2560, "generated_tokens": 9_000_000},
        "overall": {"samples": 2560}, "servers": {"tensor_parallel_size": 2, "replicas": 2}, "engine": "verl"}))
    done = P.collect_eval(tmp_path / "done.json.shards", "search")
    assert done["gpus"] == 4 and done["eval_trajectories"] == 2560 and done["startup_s"] == 800.0
    files = [tmp_path / "a.json", tmp_path / "b.json"]
    files[0].write_text(json.dumps(d))
    files[1].write_text(json.dumps(e))
    g = P.gather(files, "paper")
    assert g["config"] == "paper" and list(g["train"]) == ["rtpo/math"] and list(g["eval"]) == ["math"]
    with pytest.raises(ValueError, match="no step was timed"):
        P.collect_train(tmp_path / "empty", "grpo/math", "x")


def _pilot_file(tmp_path, cfg, **over) -> str:
    """A pilot file of config/paper.yaml: rtpo/math measured (its stamp: this config's), math's evaluation."""
    from rtpo.experiment import MAIN, Experiment, RunKey

    stamp = Experiment(with_defaults(cfg)).run_for(RunKey(MAIN, "", "math", "rtpo", 0)).stamp
    cell = {"cell": "rtpo/math", "stamp": stamp, "gpus": 8, "startup_s": 1200.0, "step_s": 1500.0, "save_s": 240.0,
            "load_s": 300.0, "memory": {"peak_gib": 76.5, "ranks": []}, **over}
    ev = {"task": "math", "gpus": 4, "startup_s": 600.0, "trajectories_per_gpu_s": 0.1, "eval_trajectories": 10372}
    p = tmp_path / "pilot.json"
    p.write_text(json.dumps({"config": "paper", "train": {"rtpo/math": cell}, "eval": {"math": ev}}))
    return str(p)


def test_check_config_sizes_each_job_from_the_pilot(tmp_path):
    cfg = paper()
    res = st.load_profile(*PROFILES)
    rep = st.check_config(cfg, res, pilot=_pilot_file(tmp_path, cfg))
    out = st.format_report(rep)
    cells = {c.cell: c.sizing for c in rep.cells}
    assert str(cells["rtpo/math"]["step"]) == "25.0 (pilot)" and str(cells["rtpo/math"]["write"]) == "4.0 (pilot)"
    assert str(cells["rtpo/math"]["read"]) == "5.0 (pilot, or its run's resume)"
    assert str(cells["rtpo/math"]["startup"]) == "20.0 (pilot)"
    # GRPO on math: the piloted RTPO cell scaled by the tokens at the caps (2/3)
    assert str(cells["grpo/math"]["step"]) == "16.7 (pilot rtpo/math x 0.67 tokens at the caps)"
    assert cells["grpo/search"]["step"].source.startswith("pilot rtpo/math x") and "another task" in cells["grpo/search"]["step"].source
    assert "sizing: pilot file" in out and "1 training cells and 1 evaluation tasks measured" in out
    row = next(x for x in out.splitlines() if x.startswith("| rtpo/math | 3 | 78 |"))
    # 1440 min less 20 + 5 + 4 + 5 (stop margin) = 1406 min: 56 steps of 25 min per job, 2 jobs a run
    assert "| 56 | 2 |" in row and "| 5.0 (pilot, or its run's resume) |" in row
    ev = next(x for x in out.splitlines() if x.startswith("| evaluate_run | math |"))
    assert "10372" not in ev and "2593 (pilot) x 4" in ev and "0.042 (pilot)" in ev
    [dag] = [x for x in out.splitlines() if x.startswith("DAG: ")]
    assert re.match(r"DAG: [\d,]+ GPU-h = training [\d,]+ over \d+ Slurm jobs \+ evaluation [\d,]+ over \d+; critical path", dag)
    assert "step times from pilot (24 cells)" in dag and "sized from constants" not in dag
    # the measured peak memory (76.5 of 80 GiB): a warning, not a failure
    assert any("the pilot's peak 76.5 GiB" in str(w) for w in rep.warnings) and rep.ok
    # the pilot times no load; its run's next job, resuming from the pilot's checkpoint, does
    run = tmp_path / "run"
    Timings(run / "checkpoint" / TIMINGS_FILE).add("load", 3, 420.0)
    rep = st.check_config(cfg, res, pilot=_pilot_file(tmp_path, cfg, load_s=None, run=str(run)))
    assert str(next(c for c in rep.cells if c.cell == "rtpo/math").sizing["read"]) == "7.0 (pilot, or its run's resume)"


def test_check_config_says_when_nothing_was_measured(tmp_path):
    cfg = paper()
    res = st.load_profile(*PROFILES)
    out = st.format_report(st.check_config(cfg, res, pilot=tmp_path / "none.json"))
    assert "no pilot file" in out and "the whole DAG is sized from constants" in out
    assert "(E.3 anchor: E.3 math (rtpo, K 3, 4 trunks) 11.5 min/step x 1.00" in out
    # a pilot of other settings (here: a changed lr) is named and not used
    stale = st.check_config(paper("train.lr=2.0e-6"), res, pilot=_pilot_file(tmp_path, cfg))
    assert "pilot of rtpo/math measured other settings" in stale.pilot_note
    assert all(not c.sizing["step"].source.startswith("pilot") for c in stale.cells)
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"config": "rehearsal", "train": {}, "eval": {}}))
    assert "measured under config 'rehearsal', not 'paper': not used" in st.check_config(cfg, res, pilot=other).pilot_note


def test_an_evaluation_shard_that_cannot_fit_a_job_fails_naming_the_size(tmp_path):
    """Math's evaluation at the pilot's 0.1 trajectories/s per GPU on 4 GPUs: one shard of all its 10,372
    trajectories takes 432 min, past the 450-min runtime with its headroom: the rule fails, naming the
    eval_shard that fits (search, scaled from math, too)."""
    cfg = paper()
    res = st.load_profile(*PROFILES)
    res["evaluate_run"]["eval_shard"] = 20000
    rep = st.check_config(cfg, res, pilot=_pilot_file(tmp_path, cfg))
    fs = [f for f in rep.all_findings() if f.cell == "evaluate_run"]
    assert sorted(f.message.split(":")[0] for f in fs) == ["math", "search"]
    f = next(f for f in fs if f.message.startswith("math"))
    assert f.key.endswith("set-resources.evaluate_run.eval_shard") and "math: a shard of 10372 trajectories takes 432 min" in f.message
    assert "set eval_shard <= 2640" in f.message  # 4 shards in the job's 440 min after start-up
