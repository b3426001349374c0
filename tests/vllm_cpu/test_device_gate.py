"""No silent CPU fallback, on the GPU stack itself (.venv-vllm's torch 2.11.0 is the CUDA 13.0 build that
config/paper.yaml's cluster installs; on this machine, as on a node with a 535 driver, it cannot start CUDA):
`rtpo train` and `rtpo evaluate --engine verl` of config/paper.yaml (verl.device: cuda), in a subprocess,
with a fake nvidia-smi reporting 535.104.05 on PATH and nothing patched, exit 2 at start-up naming the driver
found, the driver needed and torch's CUDA version; no verl run, no evaluation server (on f1aae5b both took
the CPU harness)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.test_gpu_driver import NAMES, _model, fake_smi

ROOT = Path(__file__).resolve().parents[2]


def test_old_driver_stops_training_and_evaluation_on_the_cuda_build(tmp_path):
    import torch

    assert torch.version.cuda == "13.0" and not torch.cuda.is_available()  # the GPU stack's build, no CUDA here
    from rtpo.data import generate_tasks

    env = {**fake_smi(tmp_path / "smi", "535.104.05"), "PYTHONPATH": str(ROOT)}
    env.pop("SLURM_JOB_ID", None)
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(t.to_dict()) + "\n" for t in generate_tasks("math", 2, 0, "eval")))
    model = _model(tmp_path / "model")
    rtpo = [sys.executable, "-m", "rtpo.cli"]
    common = ["--config", str(ROOT / "config" / "paper.yaml"), "--task", "math", "--model", str(model)]
    runs = {"train": ["train", "--engine", "verl", "--method", "rtpo", "--seed", "0", "--train-file", str(tasks),
                      "--out", str(tmp_path / "run")],
            "evaluate": ["evaluate", "--engine", "verl", "--method", "vanilla", "--eval-file", str(tasks),
                         "--out", str(tmp_path / "eval.json")]}
    for verb, argv in runs.items():
        r = subprocess.run(rtpo + argv + common, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
        print(f"rtpo {verb}: exit {r.returncode}\n{r.stderr.strip().splitlines()[-1]}")
        assert r.returncode == 2, r.stderr[-3000:]
        assert "verl.device is cuda, but the NVIDIA driver is too old" in r.stderr, r.stderr[-3000:]
        assert all(n in r.stderr for n in NAMES) and "torch 2.11.0+cu130" in r.stderr, r.stderr[-3000:]
    run = tmp_path / "run"
    assert not (run / "verl_command.json").exists() and not (run / "verl.log").exists()
    assert not (run / "verl_data").exists() and not (tmp_path / "eval.json").exists()
    assert not list(tmp_path.glob("**/rtpo-ray-*")) and os.path.exists(model)
