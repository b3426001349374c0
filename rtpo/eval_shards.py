"""An evaluation that resumes: its trajectories in shards, each written atomically as it finishes.

`rtpo evaluate --out R.json` splits its trajectories (eval-file order) into shards of `size`: the local
engine's CHUNK (its batched calls, so the CPU default samples exactly as before), on rollout servers
RTPO_EVAL_SHARD (the evaluation rules export it from the profile's `eval_shard` resource; default
SERVER_SHARD). Each finished shard goes to R.json.shards/<i>.json, renamed into place whole, with its
records (what the eval JSON is computed from), the web searches it made and, when asked, its
trajectories' tokens. A job killed at its time limit loses only the shards in flight: the retry (the
same command) reads the shards whose key matches -- the same run, settings, eval file, model, shard
size and trajectories -- and rolls out the rest. R.json is written from all shards, exactly as one
uninterrupted run writes it, then R.json.shards/ is removed. attempts.jsonl there records each
attempt's start-up, rollout time and tokens (the pilot reads the throughput from it).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from rtpo.atomic import atomic_write_text

SERVER_SHARD = 512  # trajectories per shard on rollout servers when RTPO_EVAL_SHARD is unset
SHARD_ENV = "RTPO_EVAL_SHARD"
MAX_SHARDS_ENV = "RTPO_EVAL_MAX_SHARDS"  # the pilot: stop after this many new shards


def env_int(name: str) -> int | None:
    """A positive integer from the environment, or None when unset; anything else is an error naming it."""
    v = os.environ.get(name)
    if not v:
        return None
    if not v.isdigit() or int(v) < 1:
        raise ValueError(f"{name}={v!r}: expected a positive integer")
    return int(v)


class EvalShards:
    """The finished shards of one evaluation (<out>.shards/); `key` identifies what they were made from."""

    def __init__(self, out: str | Path, key: dict[str, Any], size: int, n: int) -> None:
        self.out = Path(out)
        self.dir = self.out.with_name(self.out.name + ".shards")
        self.size, self.n = int(size), int(n)
        self.key = dict(key, shard_size=self.size, trajectories=self.n)
        self.id = hashlib.sha256(json.dumps(self.key, sort_keys=True, default=str).encode()).hexdigest()[:16]

    @property
    def count(self) -> int:
        return -(-self.n // self.size)

    def bounds(self, i: int) -> tuple[int, int]:
        """[start, end) of shard i in the evaluation's trajectory list."""
        return i * self.size, min((i + 1) * self.size, self.n)

    def path(self, i: int) -> Path:
        return self.dir / f"{i:05d}.json"

    def load(self) -> dict[int, dict[str, Any]]:
        """{shard: payload} of the shards an earlier attempt of this same evaluation finished. Shards of
        another evaluation (another key: settings, model, eval file, shard size changed) are removed."""
        done: dict[int, dict[str, Any]] = {}
        if not self.dir.is_dir():
            return done
        stale = 0
        for i in range(self.count):
            p = self.path(i)
            try:
                payload = json.loads(p.read_text())
            except FileNotFoundError:
                continue
            except (OSError, ValueError):
                payload = None
            lo, hi = self.bounds(i)
            if not isinstance(payload, dict) or payload.get("id") != self.id or len(payload.get("records") or []) != hi - lo:
                p.unlink(missing_ok=True)
                stale += 1
                continue
            done[i] = payload
        for p in self.dir.glob("*.json"):  # shards of a longer evaluation of another key
            if not p.stem.isdigit() or int(p.stem) >= self.count:
                p.unlink(missing_ok=True)
        if done or stale:
            print(f"[eval] {self.dir}: {len(done)} of {self.count} shards done by an earlier attempt, resumed"
                  + (f"; {stale} of another evaluation removed" if stale else ""), flush=True)
        return done

    def write(self, i: int, payload: dict[str, Any]) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.path(i), json.dumps({"id": self.id, "shard": i, **payload}, allow_nan=False))

    def attempt(self, **fields: Any) -> None:
        """One line of attempts.jsonl: what this attempt did (start-up, rollout time, tokens, shards)."""
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / "attempts.jsonl", "a") as f:
            f.write(json.dumps({"id": self.id, "at": round(time.time(), 1), **fields}) + "\n")

    def attempts(self) -> list[dict[str, Any]]:
        p = self.dir / "attempts.jsonl"
        if not p.exists():
            return []
        out = []
        for line in p.read_text().splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("id") == self.id:
                out.append(rec)
        return out

    def clear(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)
