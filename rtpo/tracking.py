"""Live tracking: one set of tag groups for every method, engine and scale, and runs named by their key.

Every run writes its step records to ``metrics.jsonl`` (rtpo.instrument); that file stays the record
the tables read. This module turns a record into scalars tagged ``<group>/<metrics.jsonl key>``, the
groups method-neutral:

    reward/        reward_mean, success_rate, heldout_success, heldout_reward
    consistency/   ratio_mean, kl_rollout_train, geo_ratio, abs_dlogp, clip_share (Figure 3's quantities);
                   consistency/turn<k>/<stat>: the rollout-training mismatch by turn ("mismatch")
    update/        loss, grad_norm, lr, kl_ref, clip_frac, zero_adv_frac, syncs
    tokens/        tokens/<kind> (chain, trunk, sibling, tree), generated_tokens, trained_tokens, context_overflow
    rollouts/      rollouts/<kind>, rollouts_per_prompt, tool_calls, tool_errors
    time/          time/<phase> (rollout, update, siblings, total)
    trajectories/  the first-pass trajectories (trunks for RTPO, chains for GRPO): n, turns_mean, ...

and what belongs to one method under that method's name: ``<method>/turn<k>/<stat>`` for per-turn
updates (RTPO's reverse stages, SeeUPO's turns) and ``<method>/<key>`` for any key not listed above.

A run is named by its full key, ``scope/variant/task/method/seedS`` (rtpo.experiment.RunKey; variant
``-`` for none), grouped by its scope (main, or the ablation study), and its run.json (key, effective
settings, inputs, code) is the tracker's config, under ``rtpo.run`` at both scales. The config's
``logging.backends`` says where it goes:
- local engine (the CPU default): TensorBoard events beside the run's metrics.jsonl (so ``tensorboard
  --logdir results/runs`` shows every run as task/method/seedS; run.json as its text summary ``run``);
  ``wandb`` logs through wandb itself, offline into the run directory's wandb/ unless WANDB_MODE says
  otherwise (``wandb sync <run>/wandb/offline-run-*`` uploads); any other backend verl's ``Tracking``
  knows (mlflow, ...) through it, when verl is installed;
- verl engine (paper scale): the list is verl's ``trainer.logger`` (rtpo.verl_ext.launch, with
  `tracker_overrides`), the trainers add these scalars to verl's step metrics (rtpo.verl_ext.trainer)
  and set `tracker_environ` in their own process (wandb's group, directory and offline default).

``rtpo tensorboard RUN_DIR|metrics.jsonl ...`` converts finished runs (`convert`).
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rtpo.inputs import RowError, read_json, read_jsonl

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


# a metrics.jsonl key -> its tag group (module docstring); a mapping or a per-turn list flattens into the group
GROUPS = {
    "reward": ("reward_mean", "success_rate", "heldout_success", "heldout_reward"),
    "consistency": ("ratio_mean", "kl_rollout_train", "geo_ratio", "abs_dlogp", "clip_share", "mismatch"),
    "update": ("loss", "grad_norm", "lr", "kl_ref", "clip_frac", "zero_adv_frac", "syncs"),
    "tokens": ("tokens", "generated_tokens", "trained_tokens", "context_overflow"),
    "rollouts": ("rollouts", "rollouts_per_prompt", "tool_calls", "tool_errors"),
    "time": ("time",),
    "trajectories": ("trunks",),
}
GROUP_OF = {key: group for group, keys in GROUPS.items() for key in keys}
PROJECT = "rtpo"


def scalars(rec: dict[str, Any], method: str | None = None) -> dict[str, float]:
    """One metrics.jsonl record as ``{tag: number}`` (module docstring); None, strings and bools are left
    out. `method` (default: the record's "method") names the group of what is not method-neutral."""
    out: dict[str, float] = {}
    own = str(method or rec.get("method") or "method")

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
            put(own, v)  # <method>/turn<k>/<stat>: RTPO's stages, SeeUPO's turns
        elif k in GROUP_OF:
            group = GROUP_OF[k]
            put(group if isinstance(v, (dict, list)) else f"{group}/{k}", v)
        else:
            put(f"{own}/{k}", v)
    return out


def run_name(key: Mapping[str, Any]) -> str:
    """A run's tracker name: its full key, as rtpo.experiment.RunKey prints it (scope/variant/task/method/seedS)."""
    return "/".join(str(v) for v in (key.get("scope") or "main", key.get("variant") or "-", key["task"],
                                       key["method"], f"seed{key['seed']}"))


def run_config(record: Mapping[str, Any]) -> dict[str, Any]:
    """What the tracker gets as the run's config: run.json (rtpo.run_record) less its step counts."""
    return {k: v for k, v in record.items() if k in ("key", "copy_of", "settings", "inputs", "code")}


def wandb_mode() -> str:
    """online | offline | disabled: WANDB_MODE if the user set it, else offline (nothing leaves the machine
    unless asked; `wandb sync` uploads later)."""
    import os

    return os.environ.get("WANDB_MODE") or "offline"


def tracker_overrides(record: Mapping[str, Any]) -> list[str]:
    """verl's Hydra overrides naming the run and carrying its run.json (`run_config`) as ``rtpo.run``, which
    verl passes, with the rest of its config, to every tracker it starts (wandb's config, mlflow's params)."""
    return [f"trainer.project_name={PROJECT}", f"trainer.experiment_name={_hydra(run_name(record['key']))}",
            f"+rtpo.run={_hydra(run_config(record))}"]


def tracker_environ(record: Mapping[str, Any] | None, run_dir: str | Path, names: list[str],
                    environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment variables verl's trackers read that its constructor cannot pass (set in the trainer's
    own process): wandb's group (the scope), tags, directory (the run directory) and mode (`wandb_mode`)."""
    import os

    environ = os.environ if environ is None else environ
    if "wandb" not in names:
        return {}
    out = {"WANDB_DIR": str(run_dir), "WANDB_MODE": environ.get("WANDB_MODE") or "offline"}
    if record:
        key = record["key"]
        out["WANDB_RUN_GROUP"] = str(key.get("scope") or "main")
        out["WANDB_TAGS"] = ",".join(str(t) for t in (key["task"], key["method"], key.get("variant")) if t)
    return out


def _hydra(v: Any) -> str:
    """A Python value as a Hydra override value: nested mappings and lists, strings quoted unless plain words."""
    import re

    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "null"
    if isinstance(v, (int, float)):
        return repr(v) if math.isfinite(v) else "null"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_hydra(x) for x in v) + "]"
    if isinstance(v, Mapping):
        return "{" + ",".join(f"{_hydra_key(k)}:{_hydra(x)}" for k, x in v.items()) + "}"
    s = str(v)
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.\-]*", s) and s.lower() not in ("true", "false", "null", "inf", "nan"):
        return s
    # Hydra's quoted values: a backslash escapes only a quote or another backslash before a quote or the
    # end; OmegaConf resolves ${...} unless escaped
    s = re.sub(r"(\\+)('|$)", lambda m: m.group(1) * 2 + m.group(2), s).replace("'", "\\'")
    return "'" + s.replace("${", "\\${") + "'"


def _hydra_key(k: Any) -> str:
    import re

    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_\-]*", str(k)):
        raise ValueError(f"{k!r}: not a key a Hydra override can carry")
    return str(k)


def settings_text(record: Mapping[str, Any]) -> str:
    """run.json as a Markdown table of `key.path | value` rows (TensorBoard's text summary, as CleanRL's
    "hyperparameters")."""
    rows: list[tuple[str, Any]] = []

    def walk(v: Any, where: str) -> None:
        if isinstance(v, Mapping) and v:
            for k, x in v.items():
                walk(x, f"{where}.{k}" if where else str(k))
        else:
            rows.append((where, json.dumps(v)))

    walk(run_config(record), "")
    return "|key|value|\n|-|-|\n" + "\n".join(f"|{k}|{v}|" for k, v in rows)


class EventsWriter:
    """Scalars into one TensorBoard events file (`EVENTS_FILE` in `logdir`), written with TensorBoard's
    own event protos and record writer; `records` (metrics.jsonl records) are written first, so a
    resumed run's file is rebuilt from the records it kept, then continued."""

    def __init__(self, logdir: str | Path, records: list[dict[str, Any]] = (), run: Mapping[str, Any] | None = None):
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
        if run:  # run.json as the text summary "run" (TensorBoard's TEXT tab)
            self.text("run", settings_text(run))
        for i, rec in enumerate(records):
            self.write(scalars(rec), int(rec.get("step", i)), flush=False)
        self.flush()

    def write(self, data: dict[str, float], step: int, flush: bool = True) -> int:
        from tensorboard.compat.proto.summary_pb2 import Summary

        from rtpo.atomic import disk_full

        with disk_full(self.path):  # a full disk: DiskFull naming the events file
            if data:
                summary = Summary(value=[Summary.Value(tag=t, simple_value=v) for t, v in data.items()])
                self._writer.write(self._Event(wall_time=time.time(), step=step, summary=summary).SerializeToString())
            if flush:
                self.flush()
        return len(data)

    def text(self, tag: str, markdown: str, step: int = 0) -> None:
        """A text summary, as torch.utils.tensorboard.summary.text writes it (the text plugin's tensor)."""
        from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
        from tensorboard.compat.proto.tensor_pb2 import TensorProto
        from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto

        meta = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(plugin_name="text"))
        tensor = TensorProto(dtype="DT_STRING", string_val=[markdown.encode()],
                             tensor_shape=TensorShapeProto(dim=[TensorShapeProto.Dim(size=1)]))
        summary = Summary(value=[Summary.Value(tag=tag, metadata=meta, tensor=tensor)])
        self._writer.write(self._Event(wall_time=time.time(), step=step, summary=summary).SerializeToString())

    def flush(self) -> None:
        self._writer.flush()  # `tensorboard` reads the file while the run goes on

    def close(self) -> None:
        self._writer.close()


class RunTracker:
    """The local engine's live tracking of one run: `log(rec)` after each metrics.jsonl record.

    `run` is the run's run.json record (rtpo.run_record): its key names the run (`run_name`) and groups it
    (scope), and the record is the tracker's config. TensorBoard events go to `run_dir` itself. A resumed
    run starts at step `start` with metrics.jsonl holding the records of the steps before it: the events
    file is rebuilt from those, so it never has the interrupted attempt's later steps twice."""

    def __init__(self, run_dir: str | Path, names: list[str], run: Mapping[str, Any], start: int = 0):
        self.run_dir = Path(run_dir)
        unknown = [b for b in names if b not in BACKENDS]
        if unknown:
            raise ValueError(f"logging.backends: unknown backend(s) {unknown}; choose from {list(BACKENDS)}")
        self.run, self.name = dict(run), run_name(run["key"])
        self._tb = None
        self._wandb = None
        self._other = None
        self._start, self._tb_wanted = start, "tensorboard" in names
        if start == 0:  # a fresh start: an earlier attempt's events go with its metrics.jsonl
            (self.run_dir / EVENTS_FILE).unlink(missing_ok=True)
        if self._tb_wanted:
            try:  # the file itself is opened at the first step (a run of 0 steps, vanilla, writes none)
                import tensorboard.summary.writer.record_writer  # noqa: F401
            except ImportError as e:
                raise ValueError(f"logging.backends names tensorboard, which cannot be imported ({e}): pip install "
                                 "tensorboard (a base dependency of rtpo), or leave it out of logging.backends") from None
        if "wandb" in names:
            self._wandb = _start_wandb(self.run_dir, self.name, self.run)
        rest = [b for b in names if b not in ("console", "tensorboard", "wandb")]
        if rest:  # mlflow, ...: verl's Tracking does each the way verl users know
            try:
                from verl.utils.tracking import Tracking
            except ImportError as e:
                raise ValueError(f"logging.backends {rest} need verl's Tracking (pip install -e '.[dev]'): {e}") from None
            self._other = Tracking(project_name=PROJECT, experiment_name=self.name, default_backend=rest,
                                   config={"rtpo": {"run": run_config(self.run)}})

    def log(self, rec: dict[str, Any]) -> None:
        data, step = scalars(rec), int(rec.get("step", 0))
        if self._tb is None and self._tb_wanted:
            kept = _records(self.run_dir / "metrics.jsonl") if self._start else []
            from rtpo.atomic import disk_full

            with disk_full(self.run_dir / EVENTS_FILE):
                self._tb = EventsWriter(self.run_dir, [r for r in kept if int(r.get("step", -1)) < self._start],
                                        self.run)
        if self._tb is not None:
            self._tb.write(data, step)
        if self._wandb is not None:
            self._wandb.log(data, step=step)
        if self._other is not None:
            self._other.log(data, step)

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        if self._wandb is not None:
            self._wandb.finish()
            self._wandb = None
        if self._other is not None:
            self._other.finish()
            self._other = None


def _start_wandb(run_dir: Path, name: str, run: Mapping[str, Any]) -> Any:
    """wandb.init for one run: named by its key, grouped by its scope, run.json as its config, files under
    the run directory's wandb/, offline unless WANDB_MODE says otherwise (`wandb_mode`)."""
    try:
        import wandb
    except ImportError as e:
        raise ValueError(f"logging.backends names wandb, which cannot be imported ({e}): pip install wandb, or leave "
                         "it out of logging.backends") from None
    key, mode = run["key"], wandb_mode()
    tags = [str(t) for t in (key["task"], key["method"], key.get("variant")) if t]
    r = wandb.init(project=PROJECT, name=name, group=str(key.get("scope") or "main"), tags=tags,
                   config={"rtpo": {"run": run_config(run)}}, dir=str(run_dir), mode=mode, reinit="create_new")
    if mode == "offline":
        print(f"rtpo: wandb offline: {r.dir.rsplit('/files', 1)[0] if r.dir else run_dir}; upload with `wandb sync` "
              "(WANDB_MODE=online logs live)", file=sys.stderr)
    return r


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
    directory; its EVENTS_FILE replaced), with run.json beside it as the text summary `run`. Returns
    (logdir, scalars written). A line that is not a JSON object is an error naming the file and line."""
    metrics = Path(metrics)
    logdir = Path(logdir) if logdir is not None else metrics.parent
    if not metrics.is_file():
        raise FileNotFoundError(f"{metrics}: no such file")
    recs = _records(metrics)
    run = metrics.parent / "run.json"  # the run's record, as the live run writes it (its text summary)
    doc = read_json(run) if run.is_file() else None
    w = EventsWriter(logdir, recs, doc if isinstance(doc, dict) else None)
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
