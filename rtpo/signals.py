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
    SLURM_JOB_END_TIME, `squeue` for SLURM_JOB_ID, and last the rule's own runtime, which the
    workflow's training rules export as RTPO_RULE_DEADLINE) and stops before a step that, with the
    checkpoint write after it, would not end in time (`stop_reason`). This needs no signal at all,
    which matters under the Snakemake slurm plugin: its batch script is a plain `#!/bin/sh` that
    traps nothing, so a `--signal=B:USR1` warning would kill the batch shell and with it the job.
    A Slurm job left without any deadline says so in its log (`deadline_message`).

The jobstep plugin also removes SLURM_CONF from the rule's environment (it keeps the job's id and a
few names only), which `squeue`, `scontrol` and `srun` need on sites whose slurm.conf is not at the
built-in path (configless nodes: slurmd's cache). `slurm_conf` finds it again in the environment of
the job's own processes above this one (the plugin's process still has it).
"""

from __future__ import annotations

import json
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


RULE_DEADLINE_ENV = "RTPO_RULE_DEADLINE"  # the rule's shell start + its Slurm runtime (workflow/rules/train.smk)
# what Slurm's clock counted before the rule's shell started (the jobstep plugin's Snakemake parsing the
# workflow on the node: ~20-60 s in the rehearsal on 2 cores); taken off RTPO_RULE_DEADLINE
RULE_DEADLINE_SLACK_S = 120.0


def job_deadline(env: dict[str, str] | None = None, now: float | None = None) -> float | None:
    """When this job's slot ends (seconds since the epoch), or None when nothing says (`job_deadline_source`)."""
    return job_deadline_source(env, now)[0]


def job_deadline_source(env: dict[str, str] | None = None, now: float | None = None) -> tuple[float | None, str]:
    """(when this job's slot ends, in seconds since the epoch, or None; where that came from, or why there is none).

    In order: RTPO_JOB_DEADLINE; SLURM_JOB_END_TIME (set by Slurm in the batch environment, but the
    Snakemake jobstep plugin removes SLURM_* variables other than the job's id before it runs a rule);
    `squeue -h -j $SLURM_JOB_ID -o %L` (the time left, which needs no clock agreement with the
    controller; SLURM_CONF recovered by `slurm_conf` when the plugin dropped it); inside a Slurm job,
    last, RTPO_RULE_DEADLINE (the rule's shell start + its runtime, less RULE_DEADLINE_SLACK_S)."""
    env = os.environ if env is None else env
    now = time.time() if now is None else now
    for key in (DEADLINE_ENV, "SLURM_JOB_END_TIME"):
        v = env.get(key)
        if v:
            try:
                return float(v), key
            except ValueError:
                raise ValueError(f"{key}={v!r}: expected seconds since the epoch") from None
    job = env.get("SLURM_JOB_ID")
    if not job:
        return None, "not a Slurm job (no SLURM_JOB_ID, RTPO_JOB_DEADLINE or SLURM_JOB_END_TIME)"
    left, why = _squeue_time_left(job, env)
    if left is not None:
        return now + left, f"squeue -j {job} (time left {left:.0f} s)"
    v = env.get(RULE_DEADLINE_ENV)
    if v:
        try:
            rule = float(v)
        except ValueError:
            raise ValueError(f"{RULE_DEADLINE_ENV}={v!r}: expected seconds since the epoch") from None
        return (rule - RULE_DEADLINE_SLACK_S,
                f"{RULE_DEADLINE_ENV}, the rule's runtime from its shell's start less {RULE_DEADLINE_SLACK_S:.0f} s "
                f"(squeue gave none: {why})")
    return None, f"squeue gave none ({why}) and the rule exported no {RULE_DEADLINE_ENV}"


def _squeue_time_left(job: str, env: dict[str, str]) -> tuple[float | None, str]:
    """(seconds left of Slurm job `job` from squeue, or None; why not)."""
    env = dict(env)
    if not env.get("SLURM_CONF"):
        conf = slurm_conf(env)
        if conf:
            env["SLURM_CONF"] = conf
    try:
        r = subprocess.run(["squeue", "-h", "-j", job, "-o", "%L"], capture_output=True, text=True, timeout=30, env=env)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"{type(e).__name__}: {e}"
    if r.returncode != 0:
        return None, f"exit {r.returncode}: {(r.stderr or r.stdout).strip()[:200]}"
    out = r.stdout.strip()
    left = parse_time_left(out.splitlines()[0]) if out else None
    return left, "" if left is not None else f"time left {out[:40]!r}, not a time"


def deadline_message(env: dict[str, str] | None = None, now: float | None = None) -> tuple[float | None, str]:
    """(the deadline, the line a job's log gets about it): where it came from, or -- in a Slurm job without
    one -- that the job stops only at its periodic checkpoints and loses what follows the last one."""
    env = os.environ if env is None else env
    now = time.time() if now is None else now
    deadline, source = job_deadline_source(env, now)
    if deadline is not None:
        return deadline, f"rtpo: job deadline in {deadline - now:.0f} s, from {source}"
    job = env.get("SLURM_JOB_ID")
    if not job:
        return None, f"rtpo: no job deadline ({source})"
    return None, (f"rtpo: WARNING: Slurm job {job} has no deadline: {source}. It cannot stop before its time "
                  "limit, saves only every train.checkpoint_every steps, and its retry loses every step after "
                  "the last of those")


def slurm_conf(env: dict[str, str] | None = None, pid: int | None = None) -> str | None:
    """SLURM_CONF of this job: the environment's, else that of the nearest process above `pid` (default:
    this one) that has it -- the Snakemake jobstep plugin removes it from the rule's environment but keeps
    it in its own (Linux /proc; None elsewhere or when no ancestor has it)."""
    env = os.environ if env is None else env
    if env.get("SLURM_CONF"):
        return env["SLURM_CONF"]
    pid = os.getpid() if pid is None else pid
    seen = set()
    while pid > 1 and pid not in seen:
        seen.add(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            pid = int(stat[stat.rindex(")") + 2:].split()[1])  # ppid: field 4, after "(comm)"
            raw = Path(f"/proc/{pid}/environ").read_bytes()
        except (OSError, ValueError, IndexError):
            return None
        for item in raw.split(b"\0"):
            if item.startswith(b"SLURM_CONF="):
                return item.split(b"=", 1)[1].decode(errors="replace") or None
    return None


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


TIMINGS_FILE = "rtpo_timings.json"  # in a verl run's checkpoint/ (its default_local_dir), next to its checkpoints


class Timings:
    """How long a run's start-ups, steps, saves and checkpoint loads took, over all of its jobs: one JSON
    file next to its checkpoints ({kind: [{"step", "s", "at", ...}]}, plus each rank's peak memory at the
    last stop), rewritten whole at each entry. A retry reads its longest step and save from it, so its
    first stop decision (`stop_reason`) counts the checkpoint it will have to write instead of 0; the pilot
    (rtpo.verl_ext.pilot) reads the rest. A new run starts without it (the job guard clears checkpoint/);
    an unreadable file is a lost measurement, not an error: the run starts a new one."""

    KINDS = ("startup", "step", "save", "load")

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            data = {}
        self.data: dict = data if isinstance(data, dict) else {}

    def entries(self, kind: str) -> list[dict]:
        return [e for e in self.data.get(kind) or [] if isinstance(e, dict) and isinstance(e.get("s"), (int, float))]

    def longest(self, kind: str) -> float:
        """The longest `kind` so far (seconds; 0 without one)."""
        return max((float(e["s"]) for e in self.entries(kind)), default=0.0)

    def add(self, kind: str, step: int, seconds: float, **extra) -> None:
        if kind not in self.KINDS:
            raise ValueError(f"Timings.add: kind {kind!r} is not one of {self.KINDS}")
        self.data.setdefault(kind, []).append({"step": int(step), "s": round(float(seconds), 3),
                                               "at": round(time.time(), 1), **extra})
        self.write()

    def memory(self, ranks: list[dict]) -> None:
        """Each rank's peak memory, measured at a stop (the pilot's last step)."""
        if ranks:
            self.data["memory"] = {"at": round(time.time(), 1), "ranks": ranks}
            self.write()

    def write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(self.data, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, self.path)
