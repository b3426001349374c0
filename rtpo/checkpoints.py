"""Checkpoints of a training run, the identity a resume must match, the DAG job guard, and the
fault-injection points (rtpo.train writes and resumes through these).

The checkpoint is one atomic unit: `checkpoint/step-<N>/` holds the engine state
(`engine.save`: weights, optimizer, RNG, counters), `state.json` (step, method state) and
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

The job guard (`--stamp`, what the DAG's training rules pass; `job_guard`): each run directory's
`.rtpo-job` holds "<stamp> running|complete". At the start of a job, a run directory whose file does
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

import copy
import hashlib
import json
import os
import re
import shutil
import time
import zipfile
from pathlib import Path
from typing import Any

from rtpo.atomic import atomic_dir, atomic_write_text
from rtpo.inputs import MANIFEST, CorruptFileError, RowError, check_safetensors, verify_manifest, write_manifest
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
                    identity: dict[str, Any] | None = None) -> Path:
    """Write checkpoint/step-<step>/ atomically (temporary directory, renamed into place), then
    remove older ones. identity: the run's identity (`run_identity`), checked on resume."""
    final = root / f"step-{step:08d}"
    fault_point("ckpt-begin", step, slow=True)
    with atomic_dir(final) as tmp:
        engine.save(tmp)                       # LocalEngine: tmp/engine.pt
        fault_point("ckpt-engine", step, slow=True)
        (tmp / "state.json").write_text(json.dumps({"step": step, "method": algo.state(), "identity": identity}))
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


def load_checkpoint(root: Path, engine: Any, algo: Any, log: JsonlWriter,
                    identity: dict[str, Any] | None = None) -> int:
    """Resume from the newest checkpoint under `root`: returns the next step (0 without one).

    Raises CheckpointError (naming the directory) when it cannot be read, or when it is of another run
    than `identity` (a checkpoint without one, written before run identities were recorded, is not compared); nothing is
    changed then.
    """
    found = checkpoint_dirs(root)
    if not found:
        return 0
    step, ck = found[-1]
    try:
        check_checkpoint_files(ck, step)
        state = json.loads((ck / "state.json").read_text())
        metrics = (ck / "metrics.jsonl").read_text()
        if int(state["step"]) != step:
            raise ValueError(f"state.json says step {state['step']}")
        if identity is not None and state.get("identity") is not None:
            differ = identity_diff(state["identity"], identity)
            if differ:
                raise CheckpointError(f"{ck}: this checkpoint is of another run ({differ}); resuming would mix two "
                                      f"runs' weights and records. Train into another --out, or delete {root} to "
                                      "train this run from scratch")
        engine.load(ck)
        algo.load_state(state.get("method", {}))
    except CheckpointError:
        raise
    except CorruptFileError as e:
        raise CheckpointError(f"{e}; cannot resume from the checkpoint {ck}: delete {root} to train this "
                              "run from scratch") from None
    except Exception as e:  # noqa: BLE001 - torch, pickle, zip and JSON errors of a damaged file
        raise CheckpointError(f"{ck}: cannot resume from this checkpoint ({type(e).__name__}: {e}); it is "
                              f"damaged or incomplete: delete {root} to train this run from scratch") from None
    atomic_write_text(log.path, metrics)
    prune_checkpoints(root, keep=ck)
    return step + 1


# ------------------------------------------------------------------------------ run identity, finite numbers
def _sha256_files(files: list[Path]) -> str | None:
    h, seen = hashlib.sha256(), False
    for f in files:
        if f.is_file():
            h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
            seen = True
    return h.hexdigest()[:16] if seen else None


def run_identity(method: str, task: str, seed: int, settings: dict[str, Any], model_dir: str | Path) -> dict[str, Any]:
    """What a checkpoint must match to be resumed: method, task, seed, a hash of the effective
    settings (`method_settings`, all but train.steps, so that a finished run can be extended), and the
    base model's and tokenizer's hashes (the model directory's checksum manifest when it has one, else
    its config.json; its tokenizer files)."""
    settings = copy.deepcopy(settings)
    settings.get("train", {}).pop("steps", None)
    md = Path(model_dir)
    return {"method": method, "task": task, "seed": int(seed),
            "settings": hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:16],
            "model": _sha256_files([md / MANIFEST] if (md / MANIFEST).is_file() else [md / "config.json"]),
            "tokenizer": _sha256_files([md / n for n in ("tokenizer.json", "tokenizer_config.json", "vocab.json",
                                                         "merges.txt", "special_tokens_map.json")])}


def identity_diff(saved: dict[str, Any], now: dict[str, Any]) -> str:
    """'key: saved -> now' for every key that differs, '' when they match."""
    return "; ".join(f"{k}: checkpoint {saved.get(k)!r}, this run {now.get(k)!r}"
                     for k in now if saved.get(k) != now.get(k))


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
