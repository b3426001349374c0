"""The pilot: what one paper-shape job of each cell costs, measured before the DAG is submitted.

`snakemake --profile slurm pilot` (docs/cluster.md: the first cluster command after `download`) runs,
for each piloted (method, task) cell, the first `pilot.steps` steps of its seed-0 run, in that run's own
directory with its own job guard (RTPO_STOP_AFTER_STEP: the trainer stops there with a checkpoint, as at a
deadline, and exits 143); and, for each piloted task, the first evaluation shard of vanilla's seed-0
evaluation (RTPO_EVAL_MAX_SHARDS=1: the base model, which is what vanilla evaluates). The seed-0 training
job and vanilla's evaluation job depend on them in the DAG and resume from them, so no step and no
shard is spent twice. Each pilot job writes what it measured:

  results/pilot/<task>/<method>.json  (`collect_train`, from the run's checkpoint/rtpo_timings.json,
      metrics.jsonl and verl_command.json) start-up (rtpo train's start to the first step), every step's
      wall time with verl's phases (gen, old_log_prob, ref, update_actor, save_checkpoint, ...), generated
      tokens per GPU-second, checkpoint write (and read, when a load was timed), each rank's peak memory
  results/pilot/<task>/eval.json      (`collect_eval`, from the shards' attempts.jsonl) the servers'
      start-up, the shard's trajectories, rollout time, generated tokens per GPU-second

and rule `pilot` gathers them into results/pilot/pilot.json (`gather`), with the config's name and each
cell's training stamp (its settings), which `rtpo check-config` reads (rtpo.verl_ext.sizing): a cell
whose settings changed since is not sized from it.

    python -m rtpo.verl_ext.pilot train --run DIR --cell M/T --stamp S --out FILE
    python -m rtpo.verl_ext.pilot eval --shards DIR --task T --out FILE
    python -m rtpo.verl_ext.pilot gather --config NAME --out FILE FILE...
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

PILOT_FILE = "results/pilot/pilot.json"
DEFAULT_STEPS = 3


# --------------------------------------------------------------------------------------------------
# What is piloted (the DAG: workflow/rules/pilot.smk)
# --------------------------------------------------------------------------------------------------
def pilot_steps(cfg: Mapping[str, Any]) -> int:
    return int((cfg.get("pilot") or {}).get("steps", DEFAULT_STEPS))


def pilot_cells(cfg: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(method, task) of each piloted training cell: engine verl only; `pilot.cells` (method/task), default
    every main-grid cell that trains; a cell of no more steps than pilot.steps is left out (its pilot would
    be the whole run). An entry that names no such cell is an error naming it."""
    from rtpo.config import ConfigError
    from rtpo.experiment import MAIN, Experiment

    if cfg.get("engine") != "verl":
        return []
    steps = pilot_steps(cfg)
    trained = {(r.method, r.task): r.steps for r in Experiment(cfg).select(MAIN) if r.trains and r.seed == 0}
    want = (cfg.get("pilot") or {}).get("cells")
    if want is None:
        return [c for c, n in trained.items() if n > steps]
    out = []
    for name in want:
        method, _, task = str(name).partition("/")
        if (method, task) not in trained:
            raise ConfigError(f"pilot.cells: {name!r} is not a main-grid cell that trains with seed 0 "
                              f"(have: {sorted(f'{m}/{t}' for m, t in trained)})")
        if trained[(method, task)] <= steps:
            raise ConfigError(f"pilot.cells: {name!r} trains {trained[(method, task)]} steps, not more than "
                              f"pilot.steps = {steps}: its pilot would be the whole run")
        out.append((method, task))
    return out


def pilot_eval_tasks(cfg: Mapping[str, Any]) -> list[str]:
    """The tasks whose evaluation is piloted (vanilla's seed-0 evaluation: the base model): engine verl
    and vanilla among the methods (untrained), `pilot.eval_tasks` (default every task)."""
    from rtpo.config import ConfigError
    from rtpo.experiment import MAIN, Experiment

    if cfg.get("engine") != "verl":
        return []
    have = {r.task for r in Experiment(cfg).select(MAIN) if r.method == "vanilla" and r.seed == 0 and not r.trains}
    want = (cfg.get("pilot") or {}).get("eval_tasks")
    if want is None:
        return sorted(have)
    bad = [t for t in want if t not in have]
    if bad:
        raise ConfigError(f"pilot.eval_tasks: {bad} have no untrained vanilla run of seed 0 to pilot (have: {sorted(have)})")
    return list(want)


def train_file(task: str, method: str) -> str:
    return f"results/pilot/{task}/{method}.json"


def eval_file(task: str) -> str:
    return f"results/pilot/{task}/eval.json"


def targets(cfg: Mapping[str, Any]) -> list[str]:
    return [train_file(t, m) for m, t in pilot_cells(cfg)] + [eval_file(t) for t in pilot_eval_tasks(cfg)]


# --------------------------------------------------------------------------------------------------
# Measuring (in the trainer's workers) and collecting (after the pilot job)
# --------------------------------------------------------------------------------------------------
def device_memory(*_: Any) -> dict[str, Any]:
    """This process's peak memory: torch's allocated and reserved peaks on its accelerator (the actor's
    own, not the colocated vLLM server's) and what the device has in use now, all in GiB; on the CPU
    harness the process's peak resident set. Runs in every actor worker (the trainer's stop)."""
    import os
    import resource

    out: dict[str, Any] = {"pid": os.getpid()}
    try:
        import torch

        if torch.cuda.is_available():
            free, total = torch.cuda.mem_get_info()
            return {**out, "device": torch.cuda.get_device_name(), "kind": "cuda",
                    "max_allocated_gib": round(torch.cuda.max_memory_allocated() / 2 ** 30, 2),
                    "max_reserved_gib": round(torch.cuda.max_memory_reserved() / 2 ** 30, 2),
                    "device_used_gib": round((total - free) / 2 ** 30, 2), "device_total_gib": round(total / 2 ** 30, 2)}
    except Exception:  # noqa: BLE001 - no torch or no CUDA: the CPU's figure below
        pass
    rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {**out, "device": "cpu", "kind": "cpu", "max_rss_gib": round(rss_kib / 2 ** 20, 3)}


def peak_gib(ranks: list[dict[str, Any]]) -> float | None:
    """The largest per-rank peak: reserved on a GPU (what the allocator holds), resident set on the CPU."""
    vals = [float(r.get("max_reserved_gib", r.get("max_rss_gib", 0.0)) or 0.0) for r in ranks]
    return max(vals) if vals else None


def _override(cmd: list[str], key: str) -> str | None:
    for a in cmd:
        k, _, v = str(a).lstrip("+").partition("=")
        if k == key:
            return v
    return None


def collect_train(run: str | Path, cell: str, stamp: str) -> dict[str, Any]:
    """What the pilot job of `cell` (method/task) measured in its run directory (module doc)."""
    from rtpo.signals import TIMINGS_FILE, Timings

    run = Path(run)
    t = Timings(run / "checkpoint" / TIMINGS_FILE)
    steps = sorted(t.entries("step"), key=lambda e: e["step"])
    if not steps:
        raise ValueError(f"{run / 'checkpoint' / TIMINGS_FILE}: no step was timed: the pilot job trained no step "
                         f"(its log: results/logs/pilot/{cell.split('/')[1]}/{cell.split('/')[0]}.log)")
    cmd = json.loads((run / "verl_command.json").read_text())
    argv = cmd.get("cmd", [])
    gpus = int(_override(argv, "trainer.n_gpus_per_node") or 1) * int(_override(argv, "trainer.nnodes") or 1)
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()] \
        if (run / "metrics.jsonl").exists() else []
    tokens = {int(r["step"]) + 1: int(r.get("generated_tokens") or 0) for r in records}
    rtpo_time = {int(r["step"]) + 1: r.get("time") or {} for r in records}  # the method's own phases (rtpo.instrument)
    rows = []
    for e in steps:
        save = float((e.get("phases") or {}).get("save_checkpoint", 0.0))
        rows.append({"step": e["step"], "s": e["s"], "train_s": round(e["s"] - save, 3),
                     "generated_tokens": tokens.get(int(e["step"])), "phases": e.get("phases") or {},
                     "method_phases": rtpo_time.get(int(e["step"]), {}),
                     "perf": e.get("perf") or {}})
    # the steady step: the longest after the first (the first compiles kernels and captures CUDA graphs)
    steady = rows[1:] or rows
    step = max(steady, key=lambda r: r["train_s"])
    rate_rows = [r for r in steady if r["generated_tokens"]]
    rate = (sum(r["generated_tokens"] for r in rate_rows) / (sum(r["train_s"] for r in rate_rows) * gpus)
            if rate_rows else None)
    memory = (t.data.get("memory") or {}).get("ranks") or []
    return {"cell": cell, "stamp": stamp, "run": str(run), "gpus": gpus, "cpu_harness": bool(cmd.get("cpu_harness")),
            "device": memory[0].get("device") if memory else None,
            "startup_s": t.longest("startup") or None, "step_s": step["train_s"], "first_step_s": rows[0]["train_s"],
            "steps": rows, "generated_tokens_per_gpu_s": None if rate is None else round(rate, 3),
            "save_s": t.longest("save") or None, "load_s": t.longest("load") or None,
            "memory": {"ranks": memory, "peak_gib": peak_gib(memory)}, "at": round(time.time(), 1)}


def collect_eval(shards: str | Path, task: str) -> dict[str, Any]:
    """What the pilot's evaluation shard measured (the last attempt in <out>.shards/attempts.jsonl); when the
    evaluation is complete already (<out> written, its shards gone), what its last attempt measured (the
    eval JSON's throughput)."""
    p = Path(shards) / "attempts.jsonl"
    result = Path(str(shards).removesuffix(".shards"))
    if not p.exists() and result.exists():
        r = json.loads(result.read_text())
        th, sv = r["throughput"], r.get("servers") or {}
        attempts = [{**th, "total": int(r["overall"]["samples"]),
                     "servers": {"tp": sv.get("tensor_parallel_size", 1), "replicas": sv.get("replicas", 1)},
                     "engine": r.get("engine")}]
    elif not p.exists():
        raise ValueError(f"{p} is missing: the pilot's evaluation wrote no shard")
    else:
        attempts = [json.loads(x) for x in p.read_text().splitlines() if x.strip()]
    a = next((x for x in reversed(attempts) if x.get("trajectories")), None)
    if a is None:
        raise ValueError(f"{p}: no attempt rolled out a trajectory")
    sv = a.get("servers") or {}
    gpus = int(sv.get("tp", 1)) * int(sv.get("replicas", 1))
    r = float(a["rollout_s"]) or 1e-9
    return {"task": task, "gpus": gpus, "engine": a.get("engine"), "startup_s": a.get("startup_s"),
            "trajectories": a["trajectories"], "rollout_s": a["rollout_s"], "generated_tokens": a["generated_tokens"],
            "eval_trajectories": a.get("total"),  # the whole evaluation's (problems x samples)
            "trajectories_per_gpu_s": round(a["trajectories"] / r / gpus, 5),
            "generated_tokens_per_gpu_s": round(a["generated_tokens"] / r / gpus, 3),
            "tokens_per_trajectory": round(a["generated_tokens"] / max(a["trajectories"], 1), 1),
            "shards": str(shards), "at": round(time.time(), 1)}


def gather(files: list[str | Path], config: str) -> dict[str, Any]:
    """The pilot file: every pilot job's measurements, with the config they were made under."""
    out: dict[str, Any] = {"config": config, "at": round(time.time(), 1), "train": {}, "eval": {}}
    for f in files:
        d = json.loads(Path(f).read_text())
        if "cell" in d:
            out["train"][d["cell"]] = d
        else:
            out["eval"][d["task"]] = d
    return out


def load(path: str | Path) -> dict[str, Any] | None:
    """The pilot file, or None when there is none."""
    p = Path(path)
    if not p.exists():
        return None
    try:
        d = json.loads(p.read_text())
    except ValueError as e:
        raise ValueError(f"{p}: not a pilot file ({e}); delete it or rerun `snakemake --profile slurm pilot`") from None
    if not isinstance(d, dict) or not isinstance(d.get("train"), dict) or not isinstance(d.get("eval"), dict):
        raise ValueError(f"{p}: not a pilot file (no train / eval sections); rerun `snakemake --profile slurm pilot`")
    return d


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rtpo.verl_ext.pilot", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="verb", required=True)
    t = sub.add_parser("train", help="what a pilot training job measured")
    t.add_argument("--run", required=True)
    t.add_argument("--cell", required=True, help="method/task")
    t.add_argument("--stamp", required=True)
    t.add_argument("--out", required=True)
    e = sub.add_parser("eval", help="what a pilot evaluation shard measured")
    e.add_argument("--shards", required=True)
    e.add_argument("--task", required=True)
    e.add_argument("--out", required=True)
    g = sub.add_parser("gather", help="the pilot file")
    g.add_argument("--config", required=True, help="the config's name")
    g.add_argument("--out", required=True)
    g.add_argument("files", nargs="*")
    a = ap.parse_args(argv)
    try:
        if a.verb == "train":
            d = collect_train(a.run, a.cell, a.stamp)
        elif a.verb == "eval":
            d = collect_eval(a.shards, a.task)
        else:
            d = gather(a.files, a.config)
    except (OSError, ValueError) as err:
        print(f"rtpo pilot: {err}", file=sys.stderr)
        return 2
    from rtpo.atomic import atomic_write_text

    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(a.out, json.dumps(d, indent=1, sort_keys=True) + "\n")
    print(json.dumps({k: v for k, v in d.items() if k not in ("steps", "train", "eval", "memory")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
