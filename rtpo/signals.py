"""SIGTERM for long jobs: Slurm sends SIGTERM at a job's time limit or on preemption,
then SIGKILL after its grace time (KillWait / GraceTime). Within `StopOnSigterm`, SIGTERM only
sets `requested`; the job checks it at a safe point (rtpo.train: after a step, when it has saved a
checkpoint) and raises `Stopped`, which `rtpo` turns into exit status 143 (128 + SIGTERM), so that
Slurm and Snakemake see the job fail and its rerun resumes.
"""

from __future__ import annotations

import signal


class Stopped(Exception):
    """A job stopped on SIGTERM at a safe point; the process exits with `exit_code`."""

    exit_code = 128 + int(signal.SIGTERM)


class StopOnSigterm:
    """Within the block, SIGTERM sets `requested` instead of killing the process. So does a first
    SIGINT (Ctrl-C): the step in progress finishes and is saved; a second one interrupts."""

    def __init__(self) -> None:
        self.requested = False
        self._old: dict[int, object] = {}

    def __enter__(self) -> "StopOnSigterm":
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                self._old[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread: leave signals alone
                pass
        return self

    def _handle(self, signum, frame) -> None:
        if signum == signal.SIGINT and self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def __exit__(self, *exc) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old = {}
