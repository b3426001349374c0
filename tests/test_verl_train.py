"""`rtpo train --engine verl` (rtpo/verl_ext/train.py, beside rtpo/train.py): the run is the experiment's, its
files are the run's, and run.json says the steps its checked records hold. verl itself is faked here (its
launcher, rtpo.verl_ext.launch.train_verl, writes what a run writes); tests/test_verl.py runs the real one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rtpo.config import load_config
from rtpo.experiment import Experiment, RunKey

ROOT = Path(__file__).resolve().parent.parent
SMOKE = ROOT / "config" / "smoke.yaml"
KEY = RunKey("sweep", "h2/psi-full", "search", "grpo", 0)


@pytest.fixture()
def sweep_inputs(tmp_path, monkeypatch):
    """The inputs of a sweep run under results/ of a working directory (their content is not read by the fake)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    data = tmp_path / "results" / "sweep" / "data" / "h2"
    data.mkdir(parents=True)
    (data / "train.jsonl").write_text('{"id": "t0"}\n')
    base = tmp_path / "results" / "sweep" / "models" / "base"
    base.mkdir(parents=True)
    (base / "config.json").write_text("{}")
    (base / "tokenizer.json").write_text("{}")  # a model directory holds its tokenizer (rtpo.inputs.check_model_dir)
    return tmp_path


def _run():
    cfg = load_config(SMOKE)
    cfg["engine"] = "verl"   # what --engine verl does: the run's settings record the engine it trains on
    return Experiment(cfg).run(KEY)


def _fake_verl(monkeypatch, seen: dict, records: list[int]):
    import rtpo.verl_ext.launch as launch

    def fake(args, cfg):
        seen.update(args=args, cfg=cfg)
        out = Path(args.out)
        (out / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "psi": "full"}) + "\n" for s in records))
        (out / "summary.json").write_text("{}")
        return 0

    monkeypatch.setattr(launch, "train_verl", fake)


def _argv(out: Path) -> list[str]:
    return ["train", "--engine", "verl", "--config", str(SMOKE), "--scope", KEY.scope, "--variant", KEY.variant,
            "--method", KEY.method, "--task", KEY.task, "--seed", str(KEY.seed), "--out", str(out)]


def test_verl_training_takes_its_files_and_settings_from_the_run(sweep_inputs, monkeypatch):
    """The verl branch of `rtpo train` (in rtpo/cli.py before) trained a sweep run on
    results/data/<task>/train.jsonl, the main grid's data, hard-coded, with the config as given: the run's
    own data (its horizon's), base model and `--set` overrides come from the experiment now."""
    from rtpo.cli import main

    run = _run()
    seen: dict = {}
    _fake_verl(monkeypatch, seen, list(range(run.steps)))
    out = sweep_inputs / "results" / "sweep" / KEY.variant / KEY.method / "seed0"
    assert main(_argv(out)) == 0
    args, cfg = seen["args"], seen["cfg"]
    assert (args.train_file, args.model) == ("results/sweep/data/h2/train.jsonl", "results/sweep/models/base")
    assert cfg["env"]["search"]["max_turns"] == run.config["env"]["search"]["max_turns"] == 3   # K + extra_turns
    rec = json.loads((out / "run.json").read_text())
    assert rec["key"] == KEY.as_dict() and rec["settings"] == run.settings and rec["stamp"] == run.stamp
    assert rec["settings"]["engine"] == "verl"
    assert rec["inputs"]["train_file"]["path"] == "results/sweep/data/h2/train.jsonl"
    assert rec["steps"] == {"planned": run.steps, "completed": run.steps}


def test_verl_completed_steps_are_the_checked_records(sweep_inputs, monkeypatch, capsys):
    """The steps a verl run completed were its metrics.jsonl's lines, counted: a repeated record made
    run.json say more steps than the run took. They are the records' steps 0..N-1 now, or refused."""
    from rtpo.cli import main

    run = _run()
    seen: dict = {}
    _fake_verl(monkeypatch, seen, [0] * (run.steps + 1))   # one record twice
    out = sweep_inputs / "run"
    assert main(_argv(out)) == 2
    err = capsys.readouterr().err
    assert f"{out / 'metrics.jsonl'}: holds the records of steps [0, 0]" in err, err
    assert json.loads((out / "run.json").read_text())["steps"]["completed"] == 0
