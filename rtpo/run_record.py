"""run.json: what a run is, written by the run itself (`rtpo train`, beside summary.json; `rtpo evaluate` puts
the same record into its eval JSON under "record"), so that whatever reads the run downstream reads what it
trained with instead of working it out from the config again (as nanoGPT keeps its config in every
checkpoint).

    {"key":      {"scope", "variant", "task", "method", "seed"}   rtpo.experiment.RunKey
     "copy_of":  null | a key                                     the main run this one is a copy of
     "settings": {...}                                            the effective settings (rtpo.experiment)
     "inputs":   {"train_file": {"path", "sha256"}, "base_model": {"path", "sha256"}}
     "code":     {"package", "version", "git", "tree"}            what ran (git commit, else a tree hash)
     "steps":    {"planned": N, "completed": n}}                  n = the records in metrics.jsonl

A resume compares the record of the run directory with the run it is asked to be (`record_diff`): another
key, other settings (train.steps aside: a finished run may be extended) or another data file or base model
is refused, naming the key or the file. The code version is recorded, not compared: a fix between a kill
and its resume is what resuming is for.

Torch-free, so that the report reads it without the training stack.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
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


def make_record(key: Mapping[str, Any], settings: Mapping[str, Any], train_file: str | Path | None,
                model_dir: str | Path, planned: int, completed: int = 0,
                copy_of: Mapping[str, Any] | None = None) -> dict[str, Any]:
    inputs = {"base_model": {"path": str(model_dir), "sha256": model_sha256(model_dir)}}
    if train_file is not None:
        inputs["train_file"] = {"path": str(train_file), "sha256": file_sha256(train_file)}
    return {"key": dict(key), "copy_of": None if copy_of is None else dict(copy_of),
            "settings": copy.deepcopy(dict(settings)), "inputs": inputs, "code": code_version(),
            "steps": {"planned": int(planned), "completed": int(completed)}}


def _without_steps(settings: Mapping[str, Any]) -> dict[str, Any]:
    s = copy.deepcopy(dict(settings))
    (s.get("train") or {}).pop("steps", None)
    return s


def record_diff(path: Path, saved: Mapping[str, Any], now: Mapping[str, Any]) -> str:
    """Why run record `saved` (the file `path`) is not the run `now`, '' when it is: another key, other
    settings (train.steps aside), or another train file or base model (named with both hashes)."""
    if saved.get("key") != now.get("key"):
        return f"{path}: the run directory holds run {saved.get('key')}, not {now.get('key')}"
    if _without_steps(saved.get("settings") or {}) != _without_steps(now.get("settings") or {}):
        a, b = _without_steps(saved.get("settings") or {}), _without_steps(now.get("settings") or {})
        keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
        return f"{path}: the run was trained with other settings (differ in: {', '.join(keys)})"
    for name in ("train_file", "base_model"):
        old, new = (saved.get("inputs") or {}).get(name), (now.get("inputs") or {}).get(name)
        if old and new and old.get("sha256") != new.get("sha256"):
            return (f"{path}: the run was trained on {name} {old.get('path')} (sha256 {str(old.get('sha256'))[:16]}), "
                    f"not {new.get('path')} (sha256 {str(new.get('sha256'))[:16]})")
    return ""


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


def write_record(run_dir: str | Path, record: Mapping[str, Any]) -> Path:
    from rtpo.atomic import atomic_write_text

    path = Path(run_dir) / RUN_FILE
    atomic_write_text(path, json.dumps(record, indent=1, sort_keys=True, allow_nan=False) + "\n")
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


__all__ = ["RUN_FILE", "file_sha256", "model_sha256", "code_version", "make_record", "record_diff", "read_record",
           "write_record", "copy_run"]
