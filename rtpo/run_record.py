"""run.json: what a run is, written by the run itself (`rtpo train`, beside summary.json; `rtpo evaluate` puts
the same record into its eval JSON under "record"), so that whatever reads the run downstream reads what it
trained with instead of working it out from the config again (as nanoGPT keeps its config in every
checkpoint).

    {"key":      {"scope", "variant", "task", "method", "seed"}   rtpo.experiment.RunKey
     "copy_of":  null | a key                                     the main run this one is a copy of
     "settings": {...}                                            the effective settings (rtpo.experiment)
     "inputs":   {"train_file": {"path", "sha256", "settings"},   what it trained from, and the settings
                  "base_model": {"path", "sha256", "settings"}}   of the jobs that built each
     "stamp":    "..."                                            the job stamp: `job_stamp` of the above
     "code":     {"package", "version", "git", "tree"}            what ran (git commit, else a tree hash)
     "steps":    {"planned": N, "completed": n}}                  n = the records in metrics.jsonl

run.json is the run's identity. `rtpo train` writes it before its first step, every checkpoint carries it
(the local engine's state.json, verl's checkpoint folder), and a resume checks it and nothing else
(`check_resume`): the checkpoint's record, the run directory's run.json and the run asked for must be one
run -- the same key, settings (train.steps aside: a finished run may be extended) and inputs (by sha256).
A checkpoint whose run.json is missing, or differs from its own, is refused naming both; so is a resume
of another run, naming the key or the file. The code version is recorded, not compared: a fix between a
kill and its resume is what resuming is for. The DAG's job guard (rtpo.checkpoints.job_guard) marks a run
directory with the run's `stamp`, derived from the same record.

Torch-free, so that the report reads it without the training stack.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import math
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

RUN_FILE = "run.json"
CHUNK = 1 << 20


def file_sha256(path: str | Path) -> str:
    """sha256 of one file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def model_sha256(model_dir: str | Path) -> str:
    """A model directory's identity: the sha256 of its checksum manifest (which lists the sha256 of every
    file, rtpo.inputs.MANIFEST), else of its files' names and bytes."""
    from rtpo.inputs import MANIFEST

    d = Path(model_dir)
    if (d / MANIFEST).is_file():
        return file_sha256(d / MANIFEST)
    h = hashlib.sha256()
    for f in sorted(p for p in d.rglob("*") if p.is_file()):
        h.update(str(f.relative_to(d)).encode() + b"\0" + file_sha256(f).encode() + b"\0")
    return h.hexdigest()


@functools.lru_cache(maxsize=1)
def code_version() -> dict[str, Any]:
    """The code that runs: the package version, the git commit of the checkout it is imported from (None
    outside a git checkout, e.g. an installed wheel) and a hash of the package's own .py files (which also
    tells an edited tree from its commit)."""
    from importlib.metadata import PackageNotFoundError, version

    pkg = Path(__file__).resolve().parent
    try:
        ver = version("rtpo")
    except PackageNotFoundError:
        ver = None
    try:
        git = subprocess.run(["git", "-C", str(pkg), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        git = None
    h = hashlib.sha256()
    for f in sorted(pkg.rglob("*.py")):
        h.update(str(f.relative_to(pkg)).encode() + b"\0" + f.read_bytes() + b"\0")
    return {"package": "rtpo", "version": ver, "git": git, "tree": h.hexdigest()[:16]}


def fingerprint(obj: Any) -> str:
    """Canonical JSON: the same settings give the same string whatever the key order."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def stamp(settings_json: str) -> str:
    """16 hex digits of the sha256 of a settings JSON (`fingerprint`)."""
    return hashlib.sha256(settings_json.encode()).hexdigest()[:16]


INPUTS = ("train_file", "base_model")


def job_stamp(identity: Mapping[str, Any]) -> str:
    """The job stamp of a run (its checkpoint guard, rtpo.checkpoints.job_guard): the stamp of its settings
    and of the settings its inputs were built with (data, base model), from its run record or the identity
    rtpo.experiment gives it before there is one. Another setting upstream, another stamp."""
    inputs = identity.get("inputs") or {}
    return stamp(fingerprint({"run": identity["settings"], "data": (inputs.get("train_file") or {}).get("settings"),
                              "base": (inputs.get("base_model") or {}).get("settings")}))


def make_record(identity: Mapping[str, Any], train_file: str | Path | None, model_dir: str | Path,
                planned: int, completed: int = 0) -> dict[str, Any]:
    """The run record of a run about to train: its identity (rtpo.experiment.Run.identity: key, copy_of,
    settings, its inputs' paths and settings), the files it trains from here (`train_file`, `model_dir`:
    their paths and sha256), the job stamp, the code and the steps."""
    inputs = copy.deepcopy(dict(identity.get("inputs") or {}))
    files = {"train_file": train_file, "base_model": model_dir}
    for name in INPUTS:
        if files[name] is None:
            inputs.pop(name, None)
            continue
        path = Path(files[name])
        sha = model_sha256(path) if name == "base_model" else file_sha256(path)
        inputs[name] = {**(inputs.get(name) or {}), "path": str(path), "sha256": sha}
    record = {"key": dict(identity["key"]), "copy_of": None if identity.get("copy_of") is None else dict(identity["copy_of"]),
              "settings": copy.deepcopy(dict(identity["settings"])), "inputs": inputs, "code": code_version(),
              "steps": {"planned": int(planned), "completed": int(completed)}}
    record["stamp"] = job_stamp(record)
    return record


def _without_steps(settings: Mapping[str, Any]) -> dict[str, Any]:
    s = copy.deepcopy(dict(settings))
    (s.get("train") or {}).pop("steps", None)
    return s


def record_diff(path: Path, saved: Mapping[str, Any], now: Mapping[str, Any]) -> str:
    """Why run record `saved` (the file `path`) is not the run `now`, '' when it is: another key, other
    settings (train.steps aside), or another train file or base model (named with both hashes); an input
    that `now` has and `saved` does not record cannot be compared, and is a difference too."""
    if saved.get("key") != now.get("key"):
        return f"{path}: the run directory holds run {saved.get('key')}, not {now.get('key')}"
    if _without_steps(saved.get("settings") or {}) != _without_steps(now.get("settings") or {}):
        a, b = _without_steps(saved.get("settings") or {}), _without_steps(now.get("settings") or {})
        keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
        return f"{path}: the run was trained with other settings (differ in: {', '.join(keys)})"
    for name in INPUTS:
        old, new = (saved.get("inputs") or {}).get(name), (now.get("inputs") or {}).get(name)
        if new and not (old and old.get("sha256")):
            return (f"{path}: field 'inputs.{name}' is missing, so it cannot say which {name} the run trained "
                    f"on (this run: {new.get('path')}, sha256 {str(new.get('sha256'))[:16]})")
        if old and new and old.get("sha256") != new.get("sha256"):
            return (f"{path}: the run was trained on {name} {old.get('path')} (sha256 {str(old.get('sha256'))[:16]}), "
                    f"not {new.get('path')} (sha256 {str(new.get('sha256'))[:16]})")
    return ""


class RunMismatch(ValueError):
    """A run directory or checkpoint that holds another run than the one asked for (exit 2 names the file)."""


def check_resume(out: str | Path, checkpoint: str | Path, carried: Mapping[str, Any] | None,
                 record: Mapping[str, Any]) -> None:
    """Refuse (RunMismatch) to resume checkpoint `checkpoint` of run directory `out` as the run `record`:
    unless the checkpoint carries a run record (`carried`), `out`'s run.json is there and is that record's
    run, and both are the run asked for (`record_diff`). Nothing is read into the run or changed before."""
    out, checkpoint = Path(out), Path(checkpoint)
    run_file = out / RUN_FILE
    fresh = f"Train into another --out, or delete {out} to train this run from scratch"
    saved = read_record(out)
    if saved is None:
        raise RunMismatch(f"{checkpoint}: a checkpoint without its run record {run_file} (deleted?): which run it "
                          f"holds cannot be checked, and resuming could mix two runs. {fresh}")
    if carried is None:
        raise RunMismatch(f"{checkpoint}: the checkpoint carries no run record (written by an older rtpo), so it "
                          f"cannot be matched with {run_file}. {fresh}")
    why = record_diff(run_file, saved, carried)
    if why:
        raise RunMismatch(f"{checkpoint} and {run_file} are not one run ({why.split(': ', 1)[1]}). {fresh}")
    why = record_diff(run_file, saved, record)
    if why:
        raise RunMismatch(f"{why}; resuming would mix two runs. {fresh}")


def read_record(run_dir: str | Path) -> dict[str, Any] | None:
    """The run record of a run directory (None without one); ValueError naming the file when it is not a
    JSON object with a key, settings and steps."""
    from rtpo.inputs import read_json

    path = Path(run_dir) / RUN_FILE
    if not path.is_file():
        return None
    doc = read_json(path)
    if not isinstance(doc, dict) or not all(k in doc for k in ("key", "settings", "steps")):
        raise ValueError(f"{path}: not a run record (a JSON object with key, settings and steps)")
    steps = doc["steps"]
    if not (isinstance(steps, dict) and all(isinstance(steps.get(k), int) and not isinstance(steps.get(k), bool)
                                            and steps[k] >= 0 for k in ("planned", "completed"))):
        raise ValueError(f"{path}: field 'steps' must hold whole numbers planned, completed >= 0, got {steps!r}")
    return doc


def _strict(obj: Any) -> Any:
    """`obj` with every non-finite float as None: run.json is strict JSON even for a setting that is not
    finite (a NaN learning rate past the config check, which the training loop then stops on)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {k: _strict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_strict(v) for v in obj]
    return obj


def write_record(run_dir: str | Path, record: Mapping[str, Any]) -> Path:
    from rtpo.atomic import atomic_write_text

    path = Path(run_dir) / RUN_FILE
    atomic_write_text(path, json.dumps(_strict(record), indent=1, sort_keys=True, allow_nan=False) + "\n")
    return path


def copy_run(src: str | Path, out: str | Path, key: Mapping[str, Any]) -> None:
    """An ablation arm that is the main grid's configuration (rules ablation_reuse_run): the main run's
    metrics.jsonl and summary.json, and its run record under the arm's key with `copy_of` the main run's."""
    import shutil

    src, out = Path(src), Path(out)
    rec = read_record(src)
    if rec is None:
        raise FileNotFoundError(f"{src / RUN_FILE}: the run to copy has no run record")
    out.mkdir(parents=True, exist_ok=True)
    if (src / "metrics.jsonl").is_file():
        shutil.copyfile(src / "metrics.jsonl", out / "metrics.jsonl")
    write_record(out, {**rec, "key": dict(key), "copy_of": rec["key"]})
    shutil.copyfile(src / "summary.json", out / "summary.json")


__all__ = ["RUN_FILE", "INPUTS", "file_sha256", "model_sha256", "code_version", "fingerprint", "stamp", "job_stamp",
           "make_record", "record_diff", "RunMismatch", "check_resume", "read_record", "write_record", "copy_run"]
