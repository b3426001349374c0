"""Stopping a long job at a step boundary so that its retry resumes.

Slurm ends a job at its time limit with SIGTERM, then SIGKILL after KillWait (often 30 s: too
short to write a 98 GB checkpoint); `sbatch --signal=USR1@N` can send a warning N seconds ahead,
and preemption sends SIGTERM. A job therefore stops in one of two ways, both at a safe point (after
a step, with a checkpoint saved), and exits with status 143 (128 + SIGTERM): Slurm and Snakemake see
it fail, and the retry (`retries`, `rerun-incomplete`) resumes from that checkpoint.

  * a signal: within `StopOnSigterm`, SIGTERM, SIGUSR1 and a first SIGINT only set `requested`
    (the local engine's loop, rtpo.train); the verl launcher (rtpo.verl_ext.launch) turns them into
    a stop file that verl's trainer reads at its next step boundary (it runs in a Ray actor, out of
    reach of the launcher's signals);
  * the clock: the job knows when its slot ends (`job_deadline`: RTPO_JOB_DEADLINE, Slurm's
    SLURM_JOB_END_TIME, or `squeue` for SLURM_JOB_ID) and stops before a step that, with the
    checkpoint write after it, would not end in time (`stop_reason`). This needs no signal at all,
    which matters under the Snakemake slurm plugin: its batch script is a plain `#!/bin/sh` that
    traps nothing, so a `--signal=B:USR1` warning would kill the batch shell and with it the job.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

# the signals that ask a job to stop at its next safe point (SIGINT: a first Ctrl-C)
STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)
DEADLINE_ENV = "RTPO_JOB_DEADLINE"  # seconds since the epoch: the job's end (tests, other schedulers)
STOP_MARGIN_ENV = "RTPO_STOP_MARGIN_S"
DEFAULT_STOP_MARGIN_S = 300.0  # kept free before the limit: the process exits, Ray shuts down


class Stopped(Exception):
    """A job stopped at a safe point (signal or deadline); the process exits with `exit_code`."""

    exit_code = 128 + int(signal.SIGTERM)


class StopOnSigterm:
    """Within the block, SIGTERM and SIGUSR1 set `requested` instead of killing the process. So does a
    first SIGINT (Ctrl-C): the step in progress finishes and is saved; a second one interrupts.
    `on_request` (optional) is called from the handler on the first request (the verl launcher writes
    its stop file there)."""

    def __init__(self, on_request=None) -> None:
        self.requested = False
        self.signum: int | None = None
        self._on_request = on_request
        self._old: dict[int, object] = {}

    def __enter__(self) -> "StopOnSigterm":
        for sig in STOP_SIGNALS:
            try:
                self._old[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread: leave signals alone
                pass
        return self

    @property
    def name(self) -> str:
        """The signal that asked to stop ("SIGTERM", "SIGUSR1", "SIGINT"; "SIGTERM" before any)."""
        return signal.Signals(self.signum).name if self.signum is not None else "SIGTERM"

    def _handle(self, signum, frame) -> None:
        if signum == signal.SIGINT and self.requested:
            raise KeyboardInterrupt
        first = not self.requested
        self.requested = True
        self.signum = signum
        if first and self._on_request is not None:
            self._on_request(signum)

    def __exit__(self, *exc) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old = {}


def parse_time_left(s: str) -> float | None:
    """Seconds in squeue's %L ("[days-]hours:minutes:seconds", "minutes:seconds"); None for
    UNLIMITED, NOT_SET, INVALID or anything else."""
    m = re.fullmatch(r"(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)", s.strip())
    if not m:
        return None
    d, h, mi, se = (int(x) if x else 0 for x in m.groups())
    return float(((d * 24 + h) * 60 + mi) * 60 + se)


def job_deadline(env: dict[str, str] | None = None, now: float | None = None) -> float | None:
    """When this job's slot ends (seconds since the epoch), or None when nothing says.

    In order: RTPO_JOB_DEADLINE; SLURM_JOB_END_TIME (set by Slurm in the batch environment, but the
    Snakemake jobstep plugin removes SLURM_* variables other than the job's id before it runs a rule);
    `squeue -h -j $SLURM_JOB_ID -o %L` (the time left, which needs no clock agreement with the
    controller)."""
    env = os.environ if env is None else env
    now = time.time() if now is None else now
    for key in (DEADLINE_ENV, "SLURM_JOB_END_TIME"):
        v = env.get(key)
        if v:
            try:
                return float(v)
            except ValueError:
                raise ValueError(f"{key}={v!r}: expected seconds since the epoch") from None
    job = env.get("SLURM_JOB_ID")
    if not job:
        return None
    try:
        out = subprocess.run(["squeue", "-h", "-j", job, "-o", "%L"], capture_output=True, text=True,
                             timeout=30, env=dict(env)).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    left = parse_time_left(out.splitlines()[0]) if out.strip() else None
    return None if left is None else now + left


def stop_margin(env: dict[str, str] | None = None) -> float:
    env = os.environ if env is None else env
    v = env.get(STOP_MARGIN_ENV)
    try:
        return float(v) if v else DEFAULT_STOP_MARGIN_S
    except ValueError:
        raise ValueError(f"{STOP_MARGIN_ENV}={v!r}: expected seconds") from None


def stop_reason(now: float, step_s: float, checkpoint_s: float, deadline: float | None, margin_s: float,
                stop_file: str | Path | None = None) -> str | None:
    """Why a job should stop after the step it has just finished, or None to go on: its stop file
    exists (a signal reached the launcher), or one more step plus the checkpoint written after it
    (`step_s`, `checkpoint_s`: the longest seen in this job) would end past `deadline - margin_s`."""
    if stop_file is not None and Path(stop_file).exists():
        return f"stop requested ({Path(stop_file).read_text().strip() or Path(stop_file).name})"
    if deadline is not None and now + step_s + checkpoint_s + margin_s > deadline:
        return (f"the job's slot ends in {deadline - now:.0f} s: one more step ({step_s:.0f} s) and its checkpoint "
                f"({checkpoint_s:.0f} s) plus {margin_s:.0f} s of margin would not end in time")
    return None
