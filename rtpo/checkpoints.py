"""Checkpoints of a training run, the DAG job guard, and the fault-injection points (rtpo.train writes
and resumes through these).

The checkpoint is one atomic unit: `checkpoint/step-<N>/` holds the engine state
(`engine.save`: weights, optimizer, RNG, counters), `state.json` (step, method state, and the run's
record as of step N: run.json, the run's identity, which a resume checks, rtpo.run_record.check_resume) and
`metrics.jsonl` as of step N. It is written under a temporary name and renamed into place
(rtpo.atomic), and older ones are removed only after that, so at every instant the newest complete
`step-*` is the checkpoint; what a killed write leaves behind is removed by the next run. Resuming
restores metrics.jsonl from the checkpoint (the records of later steps are recomputed); final/ and
summary.json are renamed into place too.

Checksums: a checkpoint and final/ carry rtpo.inputs.MANIFEST (size and sha256 of every
file, written last). Resuming verifies it and the checkpoint's metrics.jsonl (one record per step
0..N) before anything is changed: a damaged file fails with exit 2 naming it, never a silent resume
from other weights (which, on a completed run, would also re-export final/ from them). A checkpoint
without a manifest (written before manifests existed) is refused the same way: it cannot be told
from a damaged one. The summary is computed before final/ is replaced, so a run whose records
cannot be summarised leaves an existing final/ as it was.

The job guard (`rtpo train --job-guard`, what the DAG's training rules pass; `job_guard`): each run
directory's `.rtpo-job` holds "<stamp> running|complete", the stamp of the run's record
(rtpo.run_record.job_stamp: its settings and its inputs' settings). At the start of a job, a run directory whose file does
not say "<stamp> running" (another job's settings, or a job that finished: a rerun because settings
changed, an input was rebuilt, --forcerun or a deleted output) is cleared of its checkpoint and
records, so it trains from scratch; one that says so is resumed (the same job, killed or failed:
Slurm's time limit, preemption, a seed that failed). Only when every seed of the job has finished
do their files say "complete".

Fault injection (tests/test_faults.py): RTPO_FAULT_TRACE=<file> appends one line per point of the
run (`<unix time> <point> <step>`: step-begin, ckpt-begin, ckpt-engine, ckpt-files, ckpt-renamed,
ckpt-end, final-begin, final-exported, final-end, summary-end); RTPO_FAULT_DELAY=<seconds> sleeps
at each point inside a write (ckpt-begin .. ckpt-renamed, final-exported) to widen it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
import zipfile
from pathlib import Path
from typing import Any

from rtpo.atomic import atomic_dir, atomic_write_text
from rtpo.inputs import CorruptFileError, RowError, check_safetensors, verify_manifest, write_manifest
from rtpo.instrument import JsonlWriter


# ------------------------------------------------------------------------------ fault injection
def fault_point(point: str, step: int | None = None, slow: bool = False) -> None:
    """Trace `point` to $RTPO_FAULT_TRACE; sleep $RTPO_FAULT_DELAY seconds there if `slow`."""
    trace = os.environ.get("RTPO_FAULT_TRACE")
    if trace:
        with open(trace, "a") as f:
            f.write(f"{time.time():.6f} {point} {'' if step is None else step}\n")
    if slow and os.environ.get("RTPO_FAULT_DELAY"):
        time.sleep(float(os.environ["RTPO_FAULT_DELAY"]))


# ------------------------------------------------------------------------------ checkpoints
CKPT_RE = re.compile(r"step-(\d+)$")


class CheckpointError(ValueError):
    """A checkpoint that cannot be resumed from (names the directory and what is wrong)."""


def checkpoint_dirs(root: Path) -> list[tuple[int, Path]]:
    """The complete checkpoints under `root` as (step, dir), oldest first (temporaries are not complete)."""
    if not root.is_dir():
        return []
    out = [(int(m.group(1)), p) for p in root.iterdir() if p.is_dir() and (m := CKPT_RE.match(p.name))]
    return sorted(out)


def prune_checkpoints(root: Path, keep: Path) -> None:
    """Remove everything in `root` except the checkpoint `keep`: older checkpoints, temporaries of
    killed writes, files of the old single-directory layout (checkpoint/engine.pt + state.json)."""
    for p in root.iterdir():
        if p != keep:
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() and not p.is_symlink() else p.unlink(missing_ok=True)


def save_checkpoint(root: Path, step: int, engine: Any, algo: Any, log: JsonlWriter,
                    record: dict[str, Any] | None = None) -> Path:
    """Write checkpoint/step-<step>/ atomically (temporary directory, renamed into place), then
    remove older ones. record: the run's record (run.json as of this step), checked on resume."""
    final = root / f"step-{step:08d}"
    fault_point("ckpt-begin", step, slow=True)
    with atomic_dir(final) as tmp:
        engine.save(tmp)                       # LocalEngine: tmp/engine.pt
        fault_point("ckpt-engine", step, slow=True)
        (tmp / "state.json").write_text(json.dumps({"step": step, "method": algo.state(), "run": record}))
        shutil.copyfile(log.path, tmp / "metrics.jsonl")
        write_manifest(tmp)                    # last: it covers every file above
        fault_point("ckpt-files", step, slow=True)
    fault_point("ckpt-renamed", step, slow=True)
    prune_checkpoints(root, keep=final)
    fault_point("ckpt-end", step)
    return final


def check_metrics(path: Path, step: int) -> None:
    """A checkpoint's metrics.jsonl holds one JSON record per step 0..step, in order: what the
    resumed run appends to and summarises at the end. Raises RowError naming the line."""
    n = -1
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise RowError(path, n + 1, f"corrupt JSON ({e})") from None
        got = rec.get("step") if isinstance(rec, dict) else None
        if got != n:
            raise RowError(path, n + 1, f"expected the record of step {n}, got {got!r}", field="step")
    if n != step:
        raise CorruptFileError(path, f"holds the records of {n + 1} steps, but the checkpoint is of step {step} "
                                     f"(expected {step + 1})")


def check_checkpoint_files(ck: Path, step: int) -> None:
    """Name a damaged file of a checkpoint before a loader fails on it without naming it: a torch
    file (a zip archive) cut short, a safetensors file whose header does not match its size, JSON
    that does not parse, metrics records that are not one per step; then every file against the
    manifest's sha256 (a flipped bit anywhere). (A kill cannot leave these: checkpoints are renamed
    into place whole.)"""
    for f in sorted(ck.iterdir()):
        if f.suffix == ".json":
            try:
                json.loads(f.read_text())
            except (UnicodeDecodeError, json.JSONDecodeError) as e:
                raise CorruptFileError(f, f"corrupt JSON ({e})") from None
        elif f.suffix == ".safetensors":
            check_safetensors(f)
        elif f.is_file():
            with f.open("rb") as fh:
                zipped = fh.read(2) == b"PK"
            if zipped and not zipfile.is_zipfile(f):
                raise CorruptFileError(f, "truncated or corrupt torch file (not a complete zip archive)")
    check_metrics(ck / "metrics.jsonl", step)  # before the checksums: it names the line
    verify_manifest(ck, required=True)


def verified_checkpoint(root: Path) -> tuple[int, Path, dict[str, Any]] | None:
    """The newest checkpoint under `root` as (step, directory, its state.json), every file verified; None
    without one. CheckpointError (naming the file and the directory) when it is damaged or incomplete;
    nothing is changed then."""
    found = checkpoint_dirs(root)
    if not found:
        return None
    step, ck = found[-1]
    try:
        check_checkpoint_files(ck, step)
        state = json.loads((ck / "state.json").read_text())
        if not isinstance(state, dict) or int(state["step"]) != step:
            raise ValueError(f"state.json says step {state.get('step') if isinstance(state, dict) else state!r}")
    except CorruptFileError as e:
        raise CheckpointError(f"{e}; cannot resume from the checkpoint {ck}: delete {root} to train this "
                              "run from scratch") from None
    except Exception as e:  # noqa: BLE001 - zip and JSON errors of a damaged file
        raise CheckpointError(f"{ck}: cannot resume from this checkpoint ({type(e).__name__}: {e}); it is "
                              f"damaged or incomplete: delete {root} to train this run from scratch") from None
    return step, ck, state


def checkpoint_record(state: dict[str, Any]) -> dict[str, Any] | None:
    """The run record a checkpoint carries (its state.json's "run"; None in one written before checkpoints
    carried it)."""
    rec = state.get("run")
    return rec if isinstance(rec, dict) else None


def load_checkpoint(checkpoint: tuple[int, Path, dict[str, Any]] | None, engine: Any, algo: Any,
                    log: JsonlWriter) -> int:
    """Resume from a verified checkpoint (`verified_checkpoint`; which run it is was checked before,
    rtpo.run_record.check_resume): the engine and method state, and metrics.jsonl as of its step. Returns
    the next step (0 without a checkpoint). CheckpointError (naming the directory) when the engine or the
    method cannot load it; nothing is changed then."""
    if checkpoint is None:
        return 0
    step, ck, state = checkpoint
    try:
        metrics = (ck / "metrics.jsonl").read_text()
        engine.load(ck)
        algo.load_state(state.get("method", {}))
    except Exception as e:  # noqa: BLE001 - torch, pickle, zip errors of a damaged file
        raise CheckpointError(f"{ck}: cannot resume from this checkpoint ({type(e).__name__}: {e}); it is "
                              f"damaged or incomplete: delete {ck.parent} to train this run from scratch") from None
    atomic_write_text(log.path, metrics)
    prune_checkpoints(ck.parent, keep=ck)
    return step + 1


# ------------------------------------------------------------------------------ the job guard
JOB_FILE = ".rtpo-job"


def job_guard(dirs: list[Path], stamp: str) -> None:
    """At the start of a DAG job: clear the run directories this job did not leave running (see the
    module docstring), then mark every one "<stamp> running"."""
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)
        f = d / JOB_FILE
        state = f.read_text().strip() if f.exists() else ""
        if state != f"{stamp} running":
            shutil.rmtree(d / "checkpoint", ignore_errors=True)
            (d / "metrics.jsonl").unlink(missing_ok=True)
        atomic_write_text(f, f"{stamp} running\n")


def job_complete(dirs: list[Path], stamp: str) -> None:
    for d in dirs:
        atomic_write_text(d / JOB_FILE, f"{stamp} complete\n")
