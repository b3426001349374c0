"""The fake Slurm's time limits (tests/fake_slurm/fake_slurm.py), which the rehearsal relies on: `--time`
ends a job with SIGTERM at the limit and SIGKILL KillWait later (state TIMEOUT), and `--signal=B:USR1@N`
warns the batch shell N seconds ahead, as slurmd does."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FAKE = ROOT / "tests" / "fake_slurm"


def sbatch(tmp_path: Path, script: str, *opts: str, **env_set: str) -> dict:
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    env = dict(os.environ, PATH=os.pathsep.join([str(FAKE), os.environ["PATH"]]), FAKE_SLURM_DIR=str(state),
               **env_set)
    t0 = time.time()
    r = subprocess.run(["sbatch", "--parsable", "-D", str(tmp_path), "-o", "job.out", *opts, f"--wrap={script}"],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    job = json.loads((state / "jobs" / f"{r.stdout.strip()}.json").read_text())
    job["wall_s"] = time.time() - t0
    return job


@pytest.mark.parametrize("spec, minutes", [("5", 5), ("2:30", 2.5), ("1:00:00", 60), ("1-0", 1440),
                                           ("1-2:03", 1563), ("0-0:0:30", 0.5)])
def test_time_formats(spec, minutes):
    import importlib.util

    mod = importlib.util.spec_from_file_location("fake_slurm", FAKE / "fake_slurm.py")
    fs = importlib.util.module_from_spec(mod)
    mod.loader.exec_module(fs)
    assert fs.parse_time(spec) == pytest.approx(minutes)


def test_warning_signal_reaches_the_batch_shell_then_the_limit_ends_the_job(tmp_path):
    """`--time=1` with a limit minute of 3 s and `--signal=B:USR1@2`: USR1 at ~1 s, which the script
    traps and records; SIGTERM at 3 s, which it ignores; SIGKILL KillWait (1 s) later; state TIMEOUT."""
    script = ("trap 'echo usr1 >> got' USR1; trap 'echo term >> got' TERM; "
              "for i in $(seq 100); do sleep 0.1; done; echo finished >> got")
    job = sbatch(tmp_path, script, "--time=1", "--signal=B:USR1@2", FAKE_SLURM_SECONDS_PER_MINUTE="3",
                 FAKE_SLURM_KILL_WAIT="1")
    got = (tmp_path / "got").read_text().split()
    assert got == ["usr1", "term"], got
    assert job["state"] == "TIMEOUT" and job["limit_s"] == 3
    assert [s["sig"] for s in job["signals"]] == [10] and 0.9 <= job["signals"][0]["at_s"] <= 2.0
    assert "sigkill_at" in job["killed"] and 3.9 <= job["wall_s"] < 8


def test_a_job_within_its_limit_completes(tmp_path):
    job = sbatch(tmp_path, "sleep 0.2; echo done > got", "--time=1", FAKE_SLURM_SECONDS_PER_MINUTE="5")
    assert job["state"] == "COMPLETED" and (tmp_path / "got").read_text() == "done\n"
    assert job["signals"] == [] and "killed" not in job


def test_a_job_that_exits_on_sigterm_is_not_sigkilled(tmp_path):
    job = sbatch(tmp_path, "trap 'exit 0' TERM; sleep 30 & wait", "--time=1", FAKE_SLURM_SECONDS_PER_MINUTE="1",
                 FAKE_SLURM_KILL_WAIT="20")
    assert job["state"] == "TIMEOUT" and "sigkill_at" not in job["killed"] and job["wall_s"] < 10


def test_a_bad_time_is_refused_as_sbatch_refuses_it(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    env = dict(os.environ, PATH=os.pathsep.join([str(FAKE), os.environ["PATH"]]), FAKE_SLURM_DIR=str(state))
    r = subprocess.run(["sbatch", "--time=soon", "--wrap=true"], env=env, capture_output=True, text=True)
    assert r.returncode == 1 and "Invalid time limit" in r.stderr


def test_a_job_reads_its_time_left_as_rtpo_signals_does(tmp_path):
    """SLURM_JOB_END_TIME in the batch environment and `squeue -h -j <id> -o %L` (rtpo.signals.job_deadline)."""
    from rtpo.signals import parse_time_left

    job = sbatch(tmp_path, 'squeue -h -j "$SLURM_JOB_ID" -o %L > left; echo "$SLURM_JOB_END_TIME" > end',
                 "--time=1-0", FAKE_SLURM_SECONDS_PER_MINUTE="60")
    assert job["state"] == "COMPLETED"
    left = parse_time_left((tmp_path / "left").read_text())
    assert 86400 - 30 < left <= 86400
    assert abs(int((tmp_path / "end").read_text()) - job["start"] - 86400) < 30
