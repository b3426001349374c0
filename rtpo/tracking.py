"""Live tracking: one metric namespace (``rtpo/...``) for every method, engine and scale.

Every run writes its step records to ``metrics.jsonl`` (rtpo.instrument); that file stays the record
the tables read. This module turns a record into scalars named the same everywhere:

    rtpo/reward_mean, rtpo/ratio_mean, rtpo/kl_rollout_train, ...   top-level numbers
    rtpo/tokens/<kind>, rtpo/time/<phase>, rtpo/trunks/<stat>        nested mappings
    rtpo/turn<k>/<stat>                                              per-turn updates (RTPO's stages, SeeUPO's turns)
    rtpo/mismatch/turn<k>/<stat>                                     the rollout-training mismatch by turn

and sends them where the config's ``logging.backends`` says:
- local engine (the CPU default): TensorBoard event files beside the run's metrics.jsonl (so
  ``tensorboard --logdir results/runs`` shows every run as task/method/seedS), plus any other
  backend verl's ``Tracking`` knows (wandb, mlflow, ...) when verl is installed;
- verl engine (paper scale): the list is verl's ``trainer.logger`` (rtpo.verl_ext.launch) and the
  trainers add these scalars to verl's step metrics (rtpo.verl_ext.trainer), GRPO's included.

``rtpo tensorboard RUN_DIR|metrics.jsonl ...`` converts finished runs (`convert`).
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path
from typing import Any

from rtpo.inputs import RowError, read_jsonl

DEFAULT_BACKENDS = ("console", "tensorboard")
# verl's Tracking.supported_backend (verl/utils/tracking.py, 0.9.1): what `logging.backends` may name
BACKENDS = ("console", "tensorboard", "wandb", "mlflow", "swanlab", "vemlp_wandb", "clearml", "trackio", "file")
# a record's identity and bookkeeping, not a quantity to plot
SKIP = frozenset({"step", "seed", "method", "task", "psi", "engine", "weight_version", "train_version"})
# One events file per run, always this name: TensorBoard reads any file with "tfevents" in its name, and
# a fixed one keeps a resumed run's directory the same as an uninterrupted run's (torch's SummaryWriter
# names a file by time, host and pid, a new one per attempt)
EVENTS_FILE = "events.out.tfevents.rtpo"


def backends(cfg: dict[str, Any]) -> list[str]:
    """The config's ``logging.backends`` (default: console and tensorboard)."""
    return list((cfg.get("logging") or {}).get("backends", DEFAULT_BACKENDS))


def scalars(rec: dict[str, Any], prefix: str = "rtpo") -> dict[str, float]:
    """One metrics.jsonl record as ``{tag: number}`` (module docstring); None, strings and bools are left out."""
    out: dict[str, float] = {}

    def put(tag: str, v: Any) -> None:
        if isinstance(v, bool) or v is None:
            return
        if isinstance(v, (int, float)):
            if math.isfinite(v):
                out[tag] = float(v)
        elif isinstance(v, dict):
            for k, x in v.items():
                put(f"{tag}/{k}", x)
        elif isinstance(v, list) and v and all(isinstance(x, dict) and "k" in x for x in v):
            for x in v:  # per-turn entries: [{"k": 1, "ratio_mean": ...}, ...]
                for k, y in x.items():
                    if k != "k":
                        put(f"{tag}/turn{x['k']}/{k}", y)

    for k, v in rec.items():
        if k in SKIP:
            continue
        if k == "turns":
            put(prefix, v)  # rtpo/turn<k>/<stat>: the names verl's tracker already had
        else:
            put(f"{prefix}/{k}", v)
    return out


class EventsWriter:
    """Scalars into one TensorBoard events file (`EVENTS_FILE` in `logdir`), written with TensorBoard's
    own event protos and record writer; `records` (metrics.jsonl records) are written first, so a
    resumed run's file is rebuilt from the records it kept, then continued."""

    def __init__(self, logdir: str | Path, records: list[dict[str, Any]] = ()):
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.summary.writer.record_writer import RecordWriter

        self._Event = Event
        logdir = Path(logdir)
        logdir.mkdir(parents=True, exist_ok=True)
        self.path = logdir / EVENTS_FILE  # an earlier attempt's or conversion's file is replaced; other
        # events files (verl's own at paper scale, named by time and host) are left alone
        self._file = open(self.path, "wb")
        self._writer = RecordWriter(self._file)
        self._writer.write(Event(wall_time=time.time(), file_version="brain.Event:2").SerializeToString())
        for i, rec in enumerate(records):
            self.write(scalars(rec), int(rec.get("step", i)), flush=False)
        self.flush()

    def write(self, data: dict[str, float], step: int, flush: bool = True) -> int:
        from tensorboard.compat.proto.summary_pb2 import Summary

        if data:
            summary = Summary(value=[Summary.Value(tag=t, simple_value=v) for t, v in data.items()])
            self._writer.write(self._Event(wall_time=time.time(), step=step, summary=summary).SerializeToString())
        if flush:
            self.flush()
        return len(data)

    def flush(self) -> None:
        self._writer.flush()  # `tensorboard` reads the file while the run goes on

    def close(self) -> None:
        self._writer.close()


class RunTracker:
    """The local engine's live tracking of one run: `log(rec)` after each metrics.jsonl record.

    TensorBoard events go to `run_dir` itself. A resumed run starts at step `start` with metrics.jsonl
    holding the records of the steps before it: the events file is rebuilt from those, so it never has
    the interrupted attempt's later steps twice."""

    def __init__(self, run_dir: str | Path, names: list[str], experiment: str, start: int = 0,
                 config: dict[str, Any] | None = None):
        self.run_dir = Path(run_dir)
        unknown = [b for b in names if b not in BACKENDS]
        if unknown:
            raise ValueError(f"logging.backends: unknown backend(s) {unknown}; choose from {list(BACKENDS)}")
        self._tb = None
        self._other = None
        self._start, self._tb_wanted = start, "tensorboard" in names
        if start == 0:  # a fresh start: an earlier attempt's events go with its metrics.jsonl
            (self.run_dir / EVENTS_FILE).unlink(missing_ok=True)
        if self._tb_wanted:
            try:  # the file itself is opened at the first step (a run of 0 steps, vanilla, writes none)
                import tensorboard.summary.writer.record_writer  # noqa: F401
            except ImportError as e:
                self._tb_wanted = False  # a library install without tensorboard: metrics.jsonl is the record anyway
                print(f"rtpo: no TensorBoard events for {self.run_dir} ({e}); pip install tensorboard, or "
                      "`rtpo tensorboard` after the run", file=sys.stderr)
        rest = [b for b in names if b not in ("console", "tensorboard")]
        if rest:  # wandb, mlflow, ...: verl's Tracking does each the way verl users know
            try:
                from verl.utils.tracking import Tracking
            except ImportError as e:
                raise ValueError(f"logging.backends {rest} need verl's Tracking (pip install -e '.[dev]'): {e}") from None
            self._other = Tracking(project_name="rtpo", experiment_name=experiment, default_backend=rest,
                                   config=config)

    def log(self, rec: dict[str, Any]) -> None:
        data, step = scalars(rec), int(rec.get("step", 0))
        if self._tb is None and self._tb_wanted:
            kept = _records(self.run_dir / "metrics.jsonl") if self._start else []
            self._tb = EventsWriter(self.run_dir, [r for r in kept if int(r.get("step", -1)) < self._start])
        if self._tb is not None:
            self._tb.write(data, step)
        if self._other is not None:
            self._other.log(data, step)

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        if self._other is not None:
            del self._other  # Tracking finishes its loggers when collected
            self._other = None


def _records(path: Path) -> list[dict[str, Any]]:
    """metrics.jsonl's records ([] when there is none yet); a line that is not a JSON object is an
    error naming the file and line (rtpo.inputs.read_jsonl, the reader of every JSON Lines input).
    Non-finite numbers pass: `scalars` leaves them out, as the live writer does."""
    if not path.exists():
        return []
    recs = []
    for n, rec in read_jsonl(path, finite=False):
        if not isinstance(rec, dict):
            raise RowError(path, n, f"a record must be a JSON object, got {type(rec).__name__}")
        recs.append(rec)
    return recs


def convert(metrics: str | Path, logdir: str | Path | None = None) -> tuple[Path, int]:
    """Write TensorBoard events for an existing metrics.jsonl (into `logdir`, default its own
    directory; its EVENTS_FILE replaced). Returns (logdir, scalars written). A line that is not a JSON
    object is an error naming the file and line."""
    metrics = Path(metrics)
    logdir = Path(logdir) if logdir is not None else metrics.parent
    if not metrics.is_file():
        raise FileNotFoundError(f"{metrics}: no such file")
    recs = _records(metrics)
    w = EventsWriter(logdir, recs)
    w.close()
    return logdir, sum(len(scalars(r)) for r in recs)


def main_convert(paths: list[str], out: str | None = None) -> int:
    """`rtpo tensorboard`: each path a metrics.jsonl or a directory searched for them."""
    files: list[tuple[Path, Path]] = []  # (metrics.jsonl, the root its events mirror under --out)
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(p.rglob("metrics.jsonl"))
            found = [f for f in found if "checkpoint" not in f.parts]  # a checkpoint's copy is not a run
            if not found:
                raise FileNotFoundError(f"{p}: no metrics.jsonl under it")
            files += [(f, p) for f in found]
        elif p.is_file():
            files.append((p, p.parent))
        else:
            raise FileNotFoundError(f"{p}: no such file or directory")
    for f, root in files:
        dest = None if out is None else Path(out) / f.parent.relative_to(root)
        logdir, n = convert(f, dest)
        print(f"{f}: {n} scalars -> {logdir}", file=sys.stderr)
    print(f"tensorboard --logdir {out or (paths[0] if len(paths) == 1 else '.')}")
    return 0
