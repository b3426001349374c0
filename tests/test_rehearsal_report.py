"""scripts/rehearsal_report.py --check-failed: what .ci/run asks after its time limit cut the rehearsal slice
(the profile keeps going past a failed job, so a failure before the cut must still fail CI; a job hung for half
an hour must too, rather than read as a slice that ran out of time)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _job(d: Path, jid: int, comment: str, state: str, t: float) -> None:
    (d / "jobs").mkdir(parents=True, exist_ok=True)
    (d / "jobs" / f"{jid}.json").write_text(json.dumps({"opts": {"--comment": comment}, "state": state,
                                                         "start": t, "end": t + 1.0}))


def _check(d: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "scripts/rehearsal_report.py", "--slurm", str(d), "--check-failed"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_a_job_failed_on_every_attempt_fails_the_check(tmp_path):
    for k in range(4):  # 1 + the profile's 3 retries, all failed
        _job(tmp_path, 1000 + k, "rule_evaluate_run_wildcards_math_grpo_0", "FAILED", k)
    _job(tmp_path, 1010, "rule_train_rtpo_wildcards_math_rtpo_0", "COMPLETED", 10)
    r = _check(tmp_path)
    assert r.returncode == 1 and "rule_evaluate_run_wildcards_math_grpo_0" in r.stdout and "train_rtpo" not in r.stdout


def test_a_failure_its_retry_mended_or_may_still_mend_passes(tmp_path):
    _job(tmp_path, 1000, "rule_train_rtpo_wildcards_math_rtpo_0", "FAILED", 0)      # mended by its retry
    _job(tmp_path, 1001, "rule_train_rtpo_wildcards_math_rtpo_0", "COMPLETED", 1)
    _job(tmp_path, 1002, "rule_train_grpo_wildcards_math_grpo_0", "FAILED", 2)      # cut before its retry
    r = _check(tmp_path)
    assert r.returncode == 0 and r.stdout == "", r.stdout + r.stderr


def test_a_job_running_for_half_an_hour_is_hung(tmp_path):
    _job(tmp_path, 1000, "rule_train_rtpo_wildcards_math_rtpo_0", "COMPLETED", 0)
    (tmp_path / "jobs" / "1001.json").write_text(json.dumps(   # as fake_slurm writes a job when it starts
        {"opts": {"--comment": "rule_pilot_eval_wildcards_math"}, "state": "RUNNING", "start": time.time() - 40 * 60}))
    r = _check(tmp_path)
    assert r.returncode == 1 and "hung: rule_pilot_eval_wildcards_math" in r.stdout and "running 40 min" in r.stdout
    (tmp_path / "jobs" / "1001.json").write_text(json.dumps(   # a job running for 5 minutes is just running
        {"opts": {"--comment": "rule_pilot_eval_wildcards_math"}, "state": "RUNNING", "start": time.time() - 5 * 60}))
    r = _check(tmp_path)
    assert r.returncode == 0 and r.stdout == "", r.stdout + r.stderr
