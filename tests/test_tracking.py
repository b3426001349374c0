"""Live tracking (rtpo.tracking): TensorBoard events beside a CPU run's metrics.jsonl, read back with
TensorBoard's own EventAccumulator; the same tags from `rtpo tensorboard` on a finished run; wandb offline,
read back from the run's own .wandb file; the run's name and config at paper scale (verl's Hydra overrides)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rtpo.config import load_config
from tests.helpers import tiny


def _events(logdir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    acc.Reload()
    return acc


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    d = tiny.airline_run_inputs(tmp_path_factory.mktemp("tracking"))
    cfg = load_config("config/smoke.yaml", ["train.steps=2", "train.checkpoint_every=1", "env.airline.max_turns=2"])
    return d, cfg


def test_cpu_run_writes_tensorboard_events_beside_metrics(inputs):
    """RTPO trains 1 step, then the same command with 2 steps resumes: the run directory's events hold
    steps 0 and 1 once each (the resumed writer purges what the first attempt left at step >= 1), under
    the tags verl's tracker gets at paper scale, with metrics.jsonl's values."""
    from rtpo.train import train

    d, cfg = inputs
    assert "tensorboard" in cfg.get("logging", {}).get("backends", ["console", "tensorboard"])
    out = d / "rtpo"
    short = json.loads(json.dumps(cfg))
    short["train"]["steps"] = 1
    train("rtpo", "airline", short, 0, out, d / "model", d / "data/train.jsonl", progress=False)
    train("rtpo", "airline", cfg, 0, out, d / "model", d / "data/train.jsonl", progress=False)
    recs = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    # one events file of a fixed name: the resumed run's files are the uninterrupted run's (tests/test_faults.py)
    assert sorted(p.name for p in out.glob("events.out.tfevents.*")) == ["events.out.tfevents.rtpo"]
    acc = _events(out)
    tags = set(acc.Tags()["scalars"])
    print(f"{len(tags)} tags:", sorted(tags))
    for tag in ("reward/reward_mean", "reward/success_rate", "consistency/ratio_mean",
                "consistency/kl_rollout_train", "consistency/turn0/kl", "update/zero_adv_frac", "rtpo/turn0/ratio_mean",
                "rtpo/turn0/kl_rollout_train", "tokens/trunk", "rollouts/sibling", "time/total",
                "trajectories/turns_mean"):
        assert tag in tags, tag
    assert not any(t.endswith(("/step", "/seed")) for t in tags)  # identity, not quantities
    # method-neutral groups; only RTPO's own per-stage updates under its name
    assert {t.split("/")[0] for t in tags} == {"reward", "consistency", "update", "tokens", "rollouts", "time",
                                               "trajectories", "rtpo"}, sorted(tags)
    assert all(t.startswith("rtpo/turn") for t in tags if t.startswith("rtpo/"))
    for name, group in (("ratio_mean", "consistency"), ("kl_rollout_train", "consistency"), ("reward_mean", "reward")):
        ev = acc.Scalars(f"{group}/{name}")
        assert [e.step for e in ev] == [0, 1]
        assert [e.value for e in ev] == pytest.approx([r[name] for r in recs], rel=1e-6, abs=1e-7)
    # run.json as the run's text summary (TensorBoard's TEXT tab), CleanRL's "hyperparameters"
    text = acc.Tensors("run")[0].tensor_proto.string_val[0].decode()
    run = json.loads((out / "run.json").read_text())
    assert "|key.scope|\"main\"|" in text and f"|settings.method.group_size|{run['settings']['method']['group_size']}|" in text


def test_logging_without_tensorboard_writes_no_events(inputs):
    from rtpo.train import train

    d, cfg = inputs
    cfg = json.loads(json.dumps(cfg))
    cfg["logging"] = {"backends": ["console"]}
    cfg["train"]["steps"] = 1
    out = d / "grpo-console"
    train("grpo", "airline", cfg, 0, out, d / "model", d / "data/train.jsonl", progress=False)
    assert (out / "metrics.jsonl").exists() and not list(out.glob("events.out.tfevents.*"))


def test_a_run_of_no_steps_writes_no_events(inputs):
    """vanilla (train.steps 0): no metrics.jsonl, and no events file either."""
    from rtpo.train import train

    d, cfg = inputs
    out = d / "vanilla"
    train("vanilla", "airline", cfg, 0, out, d / "model", d / "data/train.jsonl", progress=False)
    assert (out / "summary.json").exists() and not list(out.glob("events.out.tfevents.*"))


def test_rtpo_tensorboard_converts_a_finished_run(inputs, tmp_path, capsys):
    """`rtpo tensorboard RUNS --out DIR`: each metrics.jsonl under RUNS gets events under DIR at its own
    relative path, with the live run's tags and values; a broken line is exit 2 naming file and line."""
    from rtpo.cli import main

    d, _ = inputs
    runs = tmp_path / "runs" / "airline" / "grpo" / "seed0"
    runs.mkdir(parents=True)
    recs = [{"step": s, "reward_mean": 0.25 * s, "ratio_mean": 1.0, "kl_rollout_train": 0.0, "method": "grpo",
             "tokens": {"chain": 10 + s}, "turns": [{"k": 1, "ratio_mean": 0.9}], "loss": None}
            for s in range(3)]
    (runs / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    (runs / "run.json").write_text(json.dumps({"key": {"scope": "main", "variant": "", "task": "airline",
                                                       "method": "grpo", "seed": 0}, "settings": {"psi": "full"}}))
    assert main(["tensorboard", str(tmp_path / "runs"), "--out", str(tmp_path / "tb")]) == 0
    acc = _events(tmp_path / "tb" / "airline" / "grpo" / "seed0")
    assert '|settings.psi|"full"|' in acc.Tensors("run")[0].tensor_proto.string_val[0].decode()
    assert set(acc.Tags()["scalars"]) == {"reward/reward_mean", "consistency/ratio_mean",
                                          "consistency/kl_rollout_train", "tokens/chain", "grpo/turn1/ratio_mean"}
    assert [e.value for e in acc.Scalars("reward/reward_mean")] == [0.0, 0.25, 0.5]
    (runs / "metrics.jsonl").write_text('{"step": 0}\nnot json\n')
    assert main(["tensorboard", str(runs / "metrics.jsonl")]) == 2
    assert "metrics.jsonl:2: not valid JSON" in capsys.readouterr().err
    (runs / "metrics.jsonl").write_text('{"step": 0}\n[1, 2]\n')
    assert main(["tensorboard", str(runs / "metrics.jsonl")]) == 2
    assert "metrics.jsonl:2: a record must be a JSON object, got list" in capsys.readouterr().err


def test_scalars_are_method_neutral_groups_and_the_methods_own_under_its_name():
    from rtpo.tracking import scalars

    rec = {"step": 4, "seed": 1, "psi": "qwen3", "method": "seeupo", "reward_mean": 0.5, "ratio_mean": None,
           "syncs": 3, "turns": [{"k": 2, "ratio_mean": 1.0, "kl_rollout_train": 0.0, "groups": 4}],
           "mismatch": [{"k": 0, "geo_ratio": 0.99}], "time": {"rollout": 1.5}, "sync_kl": [0.1, 0.2],
           "context_overflow": float("nan"), "engine": "verl", "is_x": True, "trunks": {"n": 4},
           "tokens": {"chain": 30}, "generated_tokens": 30, "rollouts": {"chain": 8}, "tool_calls": 2,
           "branches": 5}
    assert scalars(rec) == {"reward/reward_mean": 0.5, "update/syncs": 3.0, "seeupo/turn2/ratio_mean": 1.0,
                            "seeupo/turn2/kl_rollout_train": 0.0, "seeupo/turn2/groups": 4.0,
                            "consistency/turn0/geo_ratio": 0.99, "time/rollout": 1.5, "trajectories/n": 4.0,
                            "tokens/chain": 30.0, "tokens/generated_tokens": 30.0, "rollouts/chain": 8.0,
                            "rollouts/tool_calls": 2.0, "seeupo/branches": 5.0}
    assert scalars({"turns": [{"k": 0, "ratio_mean": 1.0}]}, method="rtpo") == {"rtpo/turn0/ratio_mean": 1.0}


def _wandb_records(run_dir):
    """The records of the one offline wandb run under run_dir/wandb, read from its .wandb file (wandb's
    LevelDB-style log: a 7-byte header, then 32 KiB blocks of records, each a crc32, a length, a type and a
    chunk of a serialized wandb_internal_pb2.Record; types FULL 1, FIRST 2, MIDDLE 3, LAST 4)."""
    import struct

    from wandb.proto import wandb_internal_pb2 as pb

    (path,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")
    data, block = path.read_bytes(), 32768
    assert data[:4] == b":W&B", data[:8]
    pos, buf, recs = 7, b"", []
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _, n, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if n == 0 and kind == 0:
            pos += block - pos % block
            continue
        buf += data[pos + 7:pos + 7 + n]
        pos += 7 + n
        if kind in (1, 4):
            rec = pb.Record()
            rec.ParseFromString(buf)
            recs.append(rec)
            buf = b""
    return recs


def test_wandb_logs_offline_a_run_named_by_its_key_with_run_json_as_config(inputs, monkeypatch, capsys):
    """logging.backends naming wandb, WANDB_MODE unset (scripts/test.sh sets it to disabled): the run logs
    offline into its own directory, named by its full key (an ablation arm's name differs from its main
    run's), grouped by its study, run.json as its config, and each step's scalars under the TensorBoard
    tags. Before: named `{task}-{method}-seed{seed}` with no config, and only when WANDB_MODE was set."""
    from rtpo.train import train

    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    d, cfg = inputs
    cfg = json.loads(json.dumps(cfg))
    cfg["logging"] = {"backends": ["console", "wandb"]}
    cfg["train"]["steps"] = 1
    cfg["ablations"]["sync"]["task"] = "airline"  # the study's arms on the task the tiny inputs have
    out = d / "sync-wandb"
    train("rtpo", "airline", cfg, 0, out, d / "model", d / "data/train.jsonl", progress=False, scope="sync",
          variant="interval-2")
    assert "wandb offline" in capsys.readouterr().err
    recs = _wandb_records(out)
    run = next(r.run for r in recs if r.WhichOneof("record_type") == "run")
    assert (run.display_name, run.run_group, run.project) == ("sync/interval-2/airline/rtpo/seed0", "sync", "rtpo")
    assert set(run.tags) == {"airline", "rtpo", "interval-2"}
    config = {u.key: json.loads(u.value_json) for r in recs if r.WhichOneof("record_type") in ("run", "config")
              for u in (r.run.config.update if r.WhichOneof("record_type") == "run" else r.config.update)}
    saved = json.loads((out / "run.json").read_text())
    assert config["rtpo"]["run"]["key"] == saved["key"] == {"scope": "sync", "variant": "interval-2",
                                                            "task": "airline", "method": "rtpo", "seed": 0}
    assert config["rtpo"]["run"]["settings"] == saved["settings"]
    history = [{i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item}
               for r in recs if r.WhichOneof("record_type") == "history"]
    step0 = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])
    assert history[0]["_step"] == 0 and history[0]["reward/reward_mean"] == pytest.approx(step0["reward_mean"])
    assert "consistency/ratio_mean" in history[0] and not list(out.glob("events.out.tfevents.*"))


def test_verl_runs_are_named_by_their_key_and_carry_run_json_as_config(tmp_path):
    """At paper scale verl starts the trackers: its overrides name the run by its key and carry run.json as
    `rtpo.run`, which Hydra and OmegaConf read back as the same dict (verl hands its whole config to wandb
    and mlflow); the trainer's process gets wandb's group, directory and offline default."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf

    from rtpo.verl_ext.launch import verl_overrides
    from rtpo.tracking import tracker_environ

    cfg = load_config("config/paper.yaml")
    record = {"key": {"scope": "sync", "variant": "interval-2", "task": "search", "method": "rtpo", "seed": 1},
              "settings": {"engine": "verl", "verl": cfg["verl"], "psi": "qwen3", "odd": "it's ${x} \\",
                           "method": {"sync": "interval:2", "group_size": 4}}, "steps": {"planned": 3}}
    ov = verl_overrides(cfg, "rtpo", "search", 1, tmp_path, tmp_path, "t", "v", cpu=False, run=record)
    parsed = {o.key_or_group: o.value() for o in OverridesParser.create().parse_overrides(ov)}
    assert parsed["trainer.experiment_name"] == "sync/interval-2/search/rtpo/seed1"
    assert parsed["trainer.project_name"] == "rtpo"
    from hydra import compose, initialize_config_dir

    import verl.trainer.main_ppo as main_ppo

    with initialize_config_dir(config_dir=str(Path(main_ppo.__file__).parent / "config"), version_base=None):
        composed = compose("ppo_trainer", overrides=ov)  # verl's own config takes them
    assert composed.trainer.experiment_name == "sync/interval-2/search/rtpo/seed1"
    run = OmegaConf.to_container(composed.rtpo.run, resolve=True)
    assert run == {k: record[k] for k in ("key", "settings")}
    main = verl_overrides(cfg, "rtpo", "search", 1, tmp_path, tmp_path, "t", "v", cpu=False)
    assert "trainer.experiment_name='main/-/search/rtpo/seed1'" in main  # no record: the main run's name
    env = tracker_environ(record, tmp_path, ["console", "wandb"], environ={})
    assert env == {"WANDB_DIR": str(tmp_path), "WANDB_MODE": "offline", "WANDB_RUN_GROUP": "sync",
                   "WANDB_TAGS": "search,rtpo,interval-2"}
    assert tracker_environ(record, tmp_path, ["console", "wandb"], environ={"WANDB_MODE": "online"})["WANDB_MODE"] == \
        "online"
    assert tracker_environ(record, tmp_path, ["console", "tensorboard"]) == {}


def test_run_name_is_the_run_keys_string():
    from rtpo.experiment import RunKey
    from rtpo.tracking import run_name

    for key in ({"scope": "main", "variant": "", "task": "math", "method": "grpo", "seed": 3},
                {"scope": "group_size", "variant": "G3", "task": "search", "method": "rtpo", "seed": 0}):
        assert run_name(key) == str(RunKey.of(key))
