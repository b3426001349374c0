"""Live tracking (rtpo.tracking): TensorBoard events beside a CPU run's metrics.jsonl, read back with
TensorBoard's own EventAccumulator; the same tags from `rtpo tensorboard` on a finished run."""

from __future__ import annotations

import json

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
    tags = set(_events(out).Tags()["scalars"])
    print(f"{len(tags)} tags:", sorted(tags))
    for tag in ("rtpo/reward_mean", "rtpo/success_rate", "rtpo/ratio_mean", "rtpo/kl_rollout_train",
                "rtpo/zero_adv_frac", "rtpo/turn0/ratio_mean", "rtpo/turn0/kl_rollout_train", "rtpo/tokens/trunk",
                "rtpo/time/total", "rtpo/trunks/turns_mean"):
        assert tag in tags, tag
    assert not any(t.endswith(("/step", "/seed")) for t in tags)  # identity, not quantities
    acc = _events(out)
    for name in ("ratio_mean", "kl_rollout_train", "reward_mean"):
        ev = acc.Scalars(f"rtpo/{name}")
        assert [e.step for e in ev] == [0, 1]
        assert [e.value for e in ev] == pytest.approx([r[name] for r in recs], rel=1e-6, abs=1e-7)


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
    assert main(["tensorboard", str(tmp_path / "runs"), "--out", str(tmp_path / "tb")]) == 0
    acc = _events(tmp_path / "tb" / "airline" / "grpo" / "seed0")
    assert set(acc.Tags()["scalars"]) == {"rtpo/reward_mean", "rtpo/ratio_mean", "rtpo/kl_rollout_train",
                                          "rtpo/tokens/chain", "rtpo/turn1/ratio_mean"}
    assert [e.value for e in acc.Scalars("rtpo/reward_mean")] == [0.0, 0.25, 0.5]
    (runs / "metrics.jsonl").write_text('{"step": 0}\nnot json\n')
    assert main(["tensorboard", str(runs / "metrics.jsonl")]) == 2
    assert "metrics.jsonl:2: not valid JSON" in capsys.readouterr().err
    (runs / "metrics.jsonl").write_text('{"step": 0}\n[1, 2]\n')
    assert main(["tensorboard", str(runs / "metrics.jsonl")]) == 2
    assert "metrics.jsonl:2: a record must be a JSON object, got list" in capsys.readouterr().err


def test_scalars_are_one_namespace():
    from rtpo.tracking import scalars

    rec = {"step": 4, "seed": 1, "psi": "qwen3", "reward_mean": 0.5, "ratio_mean": None, "syncs": 3,
           "turns": [{"k": 2, "ratio_mean": 1.0, "kl_rollout_train": 0.0, "groups": 4}],
           "mismatch": [{"k": 0, "geo_ratio": 0.99}], "time": {"rollout": 1.5}, "sync_kl": [0.1, 0.2],
           "context_overflow": float("nan"), "engine": "verl", "is_x": True}
    assert scalars(rec) == {"rtpo/reward_mean": 0.5, "rtpo/syncs": 3.0, "rtpo/turn2/ratio_mean": 1.0,
                            "rtpo/turn2/kl_rollout_train": 0.0, "rtpo/turn2/groups": 4.0,
                            "rtpo/mismatch/turn0/geo_ratio": 0.99, "rtpo/time/rollout": 1.5}
