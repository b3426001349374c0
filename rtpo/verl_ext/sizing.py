"""Sizing the DAG's Slurm jobs (`rtpo check-config`, with rtpo.verl_ext.startup): each GPU rule's resources
against what its jobs run, and each rule's runtime, retries, steps per job and evaluation shards from the
best figure there is, every figure printed with its source:

  pilot        measured by the pilot (`snakemake --profile slurm pilot`: results/pilot/pilot.json,
               rtpo.verl_ext.pilot) for this very cell (its training stamp: the same settings), or for
               another cell of the task, else of another task, scaled by the generated tokens at the caps
  E.3 anchor   the paper's ~15 h (math) / ~5 h (knowledge) on 8 A100s, scaled to the cell
               (rtpo.verl_ext.budget.e3_step_s)
  stated       a constant of this module or of budget.py, written down, not measured (start-up 15 min,
               checkpoints at 0.5 GB/s, evaluation at 2,000 generated tokens/s per A100, ...)

and says plainly when the whole DAG is sized from constants. Then one line a user reads before submitting:
the DAG's GPU-hours (training and evaluation, Slurm jobs included) and its critical path.

A job makes progress when it writes a checkpoint before its limit (rtpo.signals: it stops at a step
boundary before the deadline); `job_progress` checks that for every cell, `check_profile` the rest of each
rule's resources: GPUs (a job total `gpu`, or per node: `gres: gpu:<type>:N` / slurm_extra
`--gpus-per-node=N`; over several nodes only the per-node form is accepted, a job total may be split
unevenly), nodes, host memory, CPUs, runtime, and an evaluation rule's `eval_shard`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rtpo.signals import DEFAULT_STOP_MARGIN_S
from rtpo.verl_ext.budget import (CHECKPOINT_WRITE_GB_S, E3_SOURCE, GB, GIB, MEMORY, MIB, STARTUP_MIN,
                                  STEP_TOKENS_PER_GPU_S, host_memory)

TRAIN_MIN_RUNTIME = 15 * 60  # minutes: E.3's longest training job (mathematics, ~15 h on 8 A100s)
PROFILE_SETTINGS = "<profile>"  # load_profile's entry of the profile's own settings (not a rule)
# Evaluation, stated (slurm/README.md, "Evaluation jobs"): the problems of config/paper.yaml's benchmarks
# (before results/data/<task>/eval.jsonl exists), vLLM's generated tokens/s per A100, the servers' start-up
EVAL_PROBLEMS = {"math": 2593, "search": 1628}
EVAL_TOKENS_PER_GPU_S = 2000.0
EVAL_STARTUP_MIN = 15.0
HEADROOM = 1.25  # an evaluation shard, or a training step, must fit a job this many times over
SHARDS_PER_JOB = 4  # the recommended eval_shard: a job's rollout time holds this many shards


@dataclass
class Finding:
    """One failed rule: the cell, the config key to change, the rule and the message."""

    cell: str
    key: str
    rule: str
    message: str

    def __str__(self) -> str:
        return f"{self.cell}: {self.key}: {self.message} [{self.rule}]"


@dataclass
class Fig:
    """A figure and where it comes from ("pilot", "pilot (other cell)", "E.3 anchor", "stated")."""

    value: float
    source: str

    def __str__(self) -> str:
        return f"{self.value:.1f} ({self.source})"


# --------------------------------------------------------------------------------------------------
# The profiles
# --------------------------------------------------------------------------------------------------
def load_profile(*paths: Path) -> dict[str, dict[str, Any]]:
    """rule -> resources of Snakemake profiles (directories holding profile.yaml or config.yaml, or the
    files themselves), merged as Snakemake merges a --profile and the --workflow-profile given after it:
    per top-level key, the later profile's section replacing the earlier one's; set-resources over
    default-resources. PROFILE_SETTINGS -> {"retries": the profiles' retries}."""
    prof: dict[str, Any] = {}
    for path in paths:
        p = Path(path)
        if p.is_dir():
            p = next((p / n for n in ("profile.yaml", "config.yaml") if (p / n).exists()), p / "profile.yaml")
        prof.update(yaml.safe_load(p.read_text()) or {})
    defaults = dict(prof.get("default-resources") or {})
    out = {"*": defaults, PROFILE_SETTINGS: {"retries": _int(prof.get("retries"), 0)}}
    for rule, res in (prof.get("set-resources") or {}).items():
        out[rule] = {**defaults, **(res or {})}
    return out


def _int(x: Any, default: int = 0) -> int:
    try:
        return int(x)
    except (TypeError, ValueError):
        return default


def gpu_request(r: Mapping[str, Any], nodes: int) -> tuple[int, int | None, str]:
    """(the job's GPUs, GPUs per node or None for a job total, how it was asked) of a rule's resources:
    slurm_extra `--gpus-per-node=[type:]N` or `gres: gpu[:type]:N` (sbatch --gres counts per node), else
    `gpu` / `gpus` (the plugin's --gpus: the job's total, which Slurm may place unevenly over nodes)."""
    m = re.search(r"--gpus-per-node[= ](?:[\w.]+:)?(\d+)", str(r.get("slurm_extra") or ""))
    if m:
        return int(m.group(1)) * nodes, int(m.group(1)), f"slurm_extra --gpus-per-node {m.group(1)}"
    m = re.fullmatch(r"gpu(?::[\w.]+)?:(\d+)", str(r.get("gres") or ""))
    if m:
        return int(m.group(1)) * nodes, int(m.group(1)), f"gres {r['gres']} (per node)"
    total = _int(r.get("gpu") or r.get("gpus"))
    return total, None, f"gpu {total} (the job's total)"


def _gpu_findings(rule: str, key: str, r: Mapping[str, Any], nodes: int, need: int, per_node_need: int,
                  why: str) -> list[Finding]:
    total, per, how = gpu_request(r, nodes)
    out = []
    if total < need:
        out.append(Finding(rule, f"{key}.gpu", "gpu", f"{how}: {total} GPUs < {why} = {need} (the plugin's --gpus is "
                                                      "the job's total; gres and --gpus-per-node count per node)"))
    if per is not None and per != per_node_need:
        out.append(Finding(rule, f"{key}.gres", "gpu", f"{how}: {per} GPUs per node, but each node runs "
                                                       f"{per_node_need} (verl.n_gpus_per_node): set them equal"))
    if per is None and nodes > 1:
        out.append(Finding(rule, f"{key}.gpu", "gpu split",
                           f"{how} over {nodes} nodes: a job total may be split unevenly (e.g. 6 + 2 on 8-GPU nodes), "
                           f"and slurm_ray.sh gives every node the head's count; ask per node instead: "
                           f"gres: gpu:<type>:{per_node_need} (sbatch --gres counts per node), without gpu / gpu_model"))
    if per is not None and (r.get("gpu") or r.get("gpu_model")):
        out.append(Finding(rule, f"{key}.gpu", "gpu", f"{how} next to gpu / gpu_model: the plugin would pass both "
                                                      "--gres and --gpus; keep the per-node form only"))
    return out


# --------------------------------------------------------------------------------------------------
# The figures of each training cell
# --------------------------------------------------------------------------------------------------
def read_pilot(cfg: Mapping[str, Any], path: str | Path | None = None) -> tuple[dict | None, str]:
    """(the pilot file when it was measured under this config, a line saying what was read)."""
    import os

    from rtpo.verl_ext.pilot import PILOT_FILE, load

    p = Path(path or os.environ.get("RTPO_PILOT") or PILOT_FILE)
    pilot = load(p)
    if pilot is None:
        return None, (f"no pilot file ({p}): the whole DAG is sized from constants (E.3's anchor and stated figures); "
                      "run `snakemake --profile slurm pilot` first to measure it")
    if pilot.get("config") != cfg.get("name"):
        return None, (f"{p} was measured under config {pilot.get('config')!r}, not {cfg.get('name')!r}: not used; the "
                      "whole DAG is sized from constants")
    return pilot, (f"pilot file {p} (config {pilot['config']!r}): {len(pilot['train'])} training cells and "
                   f"{len(pilot['eval'])} evaluation tasks measured")


def size_cells(cells: list[Any], pilot: dict | None, cfg: Mapping[str, Any], gpu: bool) -> list[str]:
    """Attach to each cell (CellReport) its `sizing`: step, start-up, checkpoint write and read in minutes,
    each a Fig with its source (module doc); returns notes (pilot cells whose settings changed since)."""
    from rtpo.experiment import MAIN, Experiment, RunKey

    exp = Experiment(with_defaults(cfg))  # the stamps of the DAG's jobs: Snakemake fills the schema's defaults
    train = (pilot or {}).get("train") or {}
    notes, fresh = [], {}
    for c in cells:
        p = train.get(f"{c.method}/{c.task}")
        if p is not None and ":" not in c.cell:
            if p.get("stamp") == exp.run_for(RunKey(MAIN, "", c.task, c.method, 0)).stamp:  # the piloted seed-0 run
                fresh[c.cell] = p
            else:
                notes.append(f"pilot of {c.cell} measured other settings (stamp {p.get('stamp')}): not used")
    by_label = {c.cell: c for c in cells}
    any_p = list(fresh.values())
    for c in cells:
        t = c.time
        p = fresh.get(c.cell)
        same = [(lbl, q) for lbl, q in fresh.items() if by_label[lbl].task == c.task]
        other = [(lbl, q) for lbl, q in fresh.items() if by_label[lbl].task != c.task]

        def scaled(lbl: str, q: dict, what: str) -> Fig:
            ref = by_label[lbl].time
            f = (t.step_tokens / max(ref.step_tokens, 1)) * (ref.gpus / t.gpus)
            return Fig(q["step_s"] * f / 60, f"pilot {lbl} x {f:.2f} {what}")

        if p is not None:
            step = Fig(p["step_s"] / 60, "pilot")
        elif same:
            step = scaled(*same[0], "tokens at the caps")
        elif other:  # measured on this cluster, though on another task, before the paper's anchor
            step = scaled(*other[0], "tokens at the caps, another task")
        elif gpu and t.anchor_step_s:
            step = Fig(t.anchor_step_s / 60, f"E.3 anchor: {t.anchor}")
        else:
            step = None
        ups = [q["startup_s"] for q in any_p if q.get("startup_s")]
        startup = (Fig(p["startup_s"] / 60, "pilot") if p is not None and p.get("startup_s") else
                   Fig(max(ups) / 60, "pilot, longest of the cells") if ups else Fig(STARTUP_MIN, "stated"))
        saves = [q["save_s"] for q in any_p if q.get("save_s")]
        if p is not None and p.get("save_s"):
            write = Fig(p["save_s"] / 60, "pilot")
        elif saves:
            write = Fig(max(saves) / 60, "pilot, longest of the cells")
        elif gpu and c.disk is not None:
            rate = float((cfg.get("verl") or {}).get("checkpoint_write_gb_s", CHECKPOINT_WRITE_GB_S))
            write = Fig(c.disk.checkpoint / GB / rate / 60, f"stated: {c.disk.checkpoint / GB:.1f} GB at {rate:g} GB/s")
        else:
            write = Fig(0.0, "not measured")
        loads = [q["load_s"] for q in any_p if q.get("load_s")] + [s for q in any_p for s in resumed_loads(q)]
        read = (Fig(max(loads) / 60, "pilot, or its run's resume") if loads
                else Fig(write.value, f"as the write ({write.source})"))
        c.sizing = {"step": step, "startup": startup, "write": write, "read": read,
                    "memory": (p or {}).get("memory", {}).get("peak_gib") if p else None}
    return notes


def resumed_loads(p: dict[str, Any]) -> list[float]:
    """Checkpoint loads timed since the pilot: its run (the seed-0 run) resumed from the pilot's checkpoint
    in the next job, and its checkpoint/rtpo_timings.json (rtpo.signals.Timings) holds that load."""
    from rtpo.signals import TIMINGS_FILE, Timings

    run = p.get("run")
    return [float(e["s"]) for e in Timings(Path(run) / "checkpoint" / TIMINGS_FILE).entries("load")] if run else []


def job_progress(c: Any, runtime: int, retries: int | None, caps: bool = False) -> list[str]:
    """Why one training cell's jobs cannot make progress within its rule's Slurm runtime (minutes);
    [] when they can.

    A job makes progress only if it writes a checkpoint before its limit: it stops at a step boundary
    when one more step and its checkpoint would not end in time (rtpo.signals: the deadline from
    squeue or the rule's runtime, less RTPO_STOP_MARGIN_S), and it saves every train.checkpoint_every
    steps, which is what is left when the job cannot learn its deadline. The step is the cell's sized one
    (`size_cells`: the pilot's, else E.3's scaled); caps=True takes the step at the caps instead (every turn
    at max_new_tokens at the stated throughput: an upper bound). Reasons: a job cannot fit start-up,
    reading the checkpoint, one step and writing a checkpoint; periodic saves do not fit a job; the run
    needs more jobs than 1 + the profile's retries."""
    t, z = c.time, c.sizing
    margin, up, rd, wr = DEFAULT_STOP_MARGIN_S / 60, z["startup"], z["read"], z["write"]
    fixed = up.value + rd.value + wr.value + margin  # start-up, the resume's read, the last write, the stop margin
    if caps:
        step, what = t.step_s / 60, (f"step at the caps {t.step_s / 60:.1f} min ({t.step_tokens / 1e6:.2f}M tokens / "
                                     f"{t.rate:g} tok/s per GPU x {t.gpus} GPUs, stated)")
    elif z["step"] is None:
        return []
    else:
        step, what = z["step"].value, f"step {z['step'].value:.1f} min ({z['step'].source})"
    if fixed + step > runtime:
        return [f"{c.cell} cannot make progress: {up.value:.1f} min start-up ({up.source}) + {rd.value:.1f} min checkpoint "
                f"read + {what} + {wr.value:.1f} min checkpoint write ({wr.source}) + {margin:g} min stop margin "
                f"= {fixed + step:.0f} min > runtime {runtime} min; raise the rule's runtime in the profile, or shrink "
                "the step (train.prompts_per_step)"]
    per_job = int((runtime - fixed) // step)
    out = []
    if min(t.checkpoint_every, t.steps) > per_job:
        out.append(f"{c.cell}: train.checkpoint_every {t.checkpoint_every} > the {per_job} steps of {step:.1f} min that "
                   f"fit one job ({runtime} min less {fixed:.0f} min of start-up, checkpoint read and write and stop "
                   f"margin): a job that cannot learn its deadline (no squeue) never saves; set "
                   f"train.checkpoint_every <= {per_job}")
    jobs = math.ceil(t.steps / per_job)
    if retries is not None and jobs > 1 + retries:
        out.append(f"{c.cell}: {t.steps} steps at {per_job} per job ({what}) need {jobs} jobs > 1 + retries "
                   f"({retries}); raise the profile's `retries` to {jobs - 1} (each retry resumes), or rerun "
                   "`snakemake --profile slurm` until it is done")
    return out


def run_cost(c: Any, runtime: int | None) -> dict[str, Any] | None:
    """One run of cell `c` at its sized figures: steps per job, jobs, wall hours, GPU-hours (None: unsized)."""
    z, t = c.sizing, c.time
    if z["step"] is None:
        return None
    step, up, rd, wr = z["step"].value, z["startup"].value, z["read"].value, z["write"].value
    fixed = up + rd + wr + DEFAULT_STOP_MARGIN_S / 60
    per_job = t.steps if runtime is None else max(int((runtime - fixed) // step), 1)
    jobs = math.ceil(t.steps / per_job)
    saves = jobs - 1 + t.steps // max(t.checkpoint_every, 1)
    wall = jobs * up + (jobs - 1) * rd + t.steps * step + saves * wr
    return {"per_job": per_job, "jobs": jobs, "wall_h": wall / 60, "gpu_h": wall / 60 * t.gpus}


# --------------------------------------------------------------------------------------------------
# Evaluation
# --------------------------------------------------------------------------------------------------
def eval_runs(cfg: Mapping[str, Any]) -> dict[tuple[str, str], int]:
    """(rule, task) -> evaluation jobs' runs: every main run and every trained ablation arm's seed (copied
    arms copy their eval JSON)."""
    from rtpo.experiment import MAIN, SWEEP, Experiment

    out: dict[tuple[str, str], int] = {}
    for r in Experiment(cfg).runs:
        if r.scope == SWEEP or r.copy_of is not None:
            continue
        key = ("evaluate_run" if r.scope == MAIN else "ablation_evaluate", r.task)
        out[key] = out.get(key, 0) + 1
    return out


def with_defaults(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of `cfg` with the schema's defaults filled in, as Snakemake's `validate` fills them for the
    DAG (rtpo's load_config does not): what each job's settings, and so its stamp, are computed from."""
    import copy

    import jsonschema

    from rtpo.config import SCHEMA

    base = jsonschema.Draft7Validator

    def properties(validator, props, instance, schema):
        if isinstance(instance, dict):
            for k, sub in props.items():
                if isinstance(sub, dict) and "default" in sub and k not in instance:
                    instance[k] = copy.deepcopy(sub["default"])
        yield from base.VALIDATORS["properties"](validator, props, instance, schema)

    filled = jsonschema.validators.extend(base, {"properties": properties})
    out = copy.deepcopy(dict(cfg))
    for _ in filled(yaml.safe_load(SCHEMA.read_text())).iter_errors(out):
        pass  # the config was validated when it was loaded; this walk only fills defaults
    return out


def eval_problems(cfg: Mapping[str, Any], task: str, pilot: dict | None = None) -> tuple[int | None, str]:
    """Problems of `task`'s evaluation: the pilot's (the evaluation it sharded), data.<task>.n_eval, else the
    stated count of config/paper.yaml's benchmarks."""
    p = ((pilot or {}).get("eval") or {}).get(task) or {}
    k = int(cfg["eval"]["samples"])
    if p.get("eval_trajectories"):
        return int(p["eval_trajectories"]) // k, "pilot"
    n = int(((cfg.get("data") or {}).get(task) or {}).get("n_eval") or 0)
    if n:
        return n, f"data.{task}.n_eval"
    if task in EVAL_PROBLEMS:
        return EVAL_PROBLEMS[task], "stated: slurm/README.md"
    return None, "unknown"


def size_eval(cfg: Mapping[str, Any], task: str, gpus: int, pilot: dict | None, gpu: bool) -> dict[str, Any] | None:
    """One evaluation run of `task`: its trajectories, minutes per trajectory on its GPUs, start-up."""
    problems, where = eval_problems(cfg, task, pilot)
    if problems is None:
        return None
    k = int(cfg["eval"]["samples"])
    env = cfg["env"][task]
    cap_tokens = int(env.get("max_turns", 3)) * int(env["max_new_tokens"])  # every turn at the cap
    ev = (pilot or {}).get("eval") or {}
    p = ev.get(task)
    if p is not None:
        rate, up = Fig(1 / (p["trajectories_per_gpu_s"] * gpus) / 60, "pilot"), Fig((p.get("startup_s") or 0) / 60, "pilot")
    elif ev:
        q = next(iter(ev.values()))
        qenv = cfg["env"][q["task"]]
        f = cap_tokens / (int(qenv.get("max_turns", 3)) * int(qenv["max_new_tokens"]))
        rate = Fig(f / (q["trajectories_per_gpu_s"] * gpus) / 60, f"pilot {q['task']} x {f:.2f} tokens at the caps")
        up = Fig((q.get("startup_s") or 0) / 60, f"pilot {q['task']}")
    elif gpu:
        rate = Fig(cap_tokens / (EVAL_TOKENS_PER_GPU_S * gpus) / 60,
                   f"stated {EVAL_TOKENS_PER_GPU_S:g} tok/s per GPU, every turn at the cap")
        up = Fig(EVAL_STARTUP_MIN, "stated")
    else:
        return None
    return {"trajectories": problems * k, "problems": f"{problems} ({where}) x {k}", "min_per_traj": rate, "startup": up}


def eval_progress(rule: str, key: str, e: dict[str, Any], runtime: int, shard: int, retries: int | None
                  ) -> tuple[list[Finding], list[Finding], dict[str, Any]]:
    """(findings, warnings, row) of one evaluation rule and task: a shard must fit a job with HEADROOM; the
    run's shards must fit 1 + retries jobs; the recommended eval_shard holds SHARDS_PER_JOB shards a job."""
    per, up = e["min_per_traj"].value, e["startup"].value
    rollout = e["trajectories"] * per
    left = runtime - up
    shard_min = min(shard, e["trajectories"]) * per
    rec = max(int(left / SHARDS_PER_JOB / per), 1) if left > 0 else 0
    findings, warnings = [], []
    if up + HEADROOM * shard_min > runtime:
        findings.append(Finding(rule, f"{key}.eval_shard", "progress",
                                f"{e['task']}: a shard of {min(shard, e['trajectories'])} trajectories takes {shard_min:.0f} min "
                                f"({e['min_per_traj'].source}) after {up:.0f} min start-up; with x{HEADROOM} headroom it "
                                f"does not fit runtime {runtime} min: set eval_shard <= {rec}"))
        jobs = None
    else:
        per_job = max(int((left / HEADROOM) // shard_min), 1) if shard_min else 1
        jobs = math.ceil(math.ceil(e["trajectories"] / shard) / per_job)
        if retries is not None and jobs > 1 + retries:
            warnings.append(Finding(rule, f"{key}.runtime", "progress",
                                    f"{e['task']}: {e['trajectories']} trajectories at {shard} a shard need {jobs} jobs > 1 "
                                    f"+ retries ({retries}); raise the runtime or `retries`"))
    row = {"rule": rule, "task": e["task"], "trajectories": e["problems"], "n": e["trajectories"], "min/traj": e["min_per_traj"],
           "start-up min": e["startup"], "rollout h": rollout / 60, "runtime": runtime, "eval_shard": shard,
           "recommended eval_shard": rec, "jobs": jobs}
    return findings, warnings, row


# --------------------------------------------------------------------------------------------------
# The Slurm profile
# --------------------------------------------------------------------------------------------------
def check_profile(cfg: Mapping[str, Any], resources: Mapping[str, Mapping[str, Any]], cells: list[Any],
                  shape: Any, where: str = "workflow/profiles/default/profile.yaml", pilot: dict | None = None,
                  gpu: bool = True) -> tuple[list[dict], list[Finding], list[Finding], list[dict]]:
    """The Slurm profile's resources of every GPU rule against what its jobs run (module doc):
    (rows, findings, warnings, evaluation rows). `cells` carry their `sizing` (`size_cells`). The warnings
    compare each training rule's runtime with its longest cell at the caps (an upper bound on the tokens at
    a stated throughput, so it warns and never fails)."""
    from rtpo.experiment import STUDIES
    from rtpo.verl_ext.eval_servers import server_layout

    from rtpo.verl_ext.launch import job_settings

    v = dict(cfg.get("verl") or {})
    job = job_settings(dict(cfg), str(v.get("rollout", "vllm")))  # the paper's job: what its overrides pass to verl
    gpn, nnodes = int(job["trainer.n_gpus_per_node"]), int(job["trainer.nnodes"])
    tp, replicas = server_layout(dict(cfg), cpu=not gpu)
    agent_workers = int(job["actor_rollout_ref.rollout.agent.num_workers"])
    search = (cfg.get("data") or {}).get("search") or {}
    retriever_workers = int((search.get("retriever") or {}).get("workers", 0)) \
        if (search.get("retriever") or {}).get("url") == "auto" else 0
    defaults = resources.get("*", {})
    # None: unknown (the DAG's check while Snakemake parses): the jobs a run needs are not counted
    retries = _int(resources[PROFILE_SETTINGS].get("retries"), 0) if PROFILE_SETTINGS in resources else None
    rows, findings, warnings, evals = [], [], [], []

    def get(rule: str) -> dict[str, Any]:
        return {**defaults, **(resources.get(rule) or {})}

    by_rule: dict[str, list[Any]] = {}
    for c in cells:
        by_rule.setdefault(train_rule(c), []).append(c)
    for rule, cs in sorted(by_rule.items()):
        r = get(rule)
        key = f"{where}: set-resources.{rule}"
        nodes = _int(r.get("nodes"), 1)
        row = {"rule": rule, "gpu": gpu_request(r, nodes)[0], "need gpu": gpn * nnodes, "nodes": nodes,
               "need nodes": nnodes, "mem_mb": _int(r.get("mem_mb")), "cpus": _int(r.get("cpus_per_task")),
               "runtime": _int(r.get("runtime")), "need runtime": TRAIN_MIN_RUNTIME if gpu else None}
        timed = [c for c in cs if c.time is not None]
        slow = max(timed, key=lambda c: c.time.run_min, default=None) if gpu else None
        row["est. runtime"] = math.ceil(slow.time.run_min) if slow else None
        rows.append(row)
        for c in timed:  # can every job of this rule make progress? (rtpo.signals: stop before the limit)
            findings += [Finding(rule, f"{key}.runtime", "progress", m) for m in job_progress(c, row["runtime"], retries)]
        if not gpu:  # the CPU harness: its sizing only
            continue
        keep = any(c.values.get("keep") for c in cs)
        ref = any(c.values.get("ref") for c in cs)
        host = host_memory(shape, gpn, gpn * nnodes, tp, keep, ref)
        need_mb = math.ceil(host["total"] * GIB / MIB)
        searches = any(c.task == "search" for c in cs)
        cpus = gpn + max(gpn // max(tp, 1), 1) + agent_workers + 2 + (retriever_workers if searches else 0)
        row.update({"need mem_mb": need_mb, "need cpus": cpus, "host GiB": {k: round(x, 1) for k, x in host.items()}})
        findings += _gpu_findings(rule, key, r, nodes, gpn * nnodes, gpn, f"verl.n_gpus_per_node x verl.nnodes = {gpn} x "
                                                                          f"{nnodes}")
        if nodes != nnodes:
            findings.append(Finding(rule, f"{key}.nodes", "nodes", f"nodes {nodes} != verl.nnodes {nnodes}"))
        if nodes > 1 and "mpi" not in r:
            findings.append(Finding(rule, f"{key}.mpi", "nodes",
                                    f"nodes {nodes} without mpi: the Slurm jobstep plugin then runs the job in `srun -n1 "
                                    f"--nodes={nodes}`, which srun cannot place (keep mpi: 0, "
                                    "workflow/profiles/default/profile.yaml)"))
        if row["mem_mb"] < need_mb:
            findings.append(Finding(rule, f"{key}.mem_mb", "host memory",
                                    f"mem_mb {row['mem_mb']} < the host-RAM estimate {need_mb} MB per node "
                                    f"({', '.join(f'{k} {x:.0f} GiB' for k, x in host.items() if k != 'total')})"))
        if row["cpus"] < cpus:
            findings.append(Finding(rule, f"{key}.cpus_per_task", "cpus",
                                    f"cpus_per_task {row['cpus']} < {cpus}: a worker per GPU, a server per replica, "
                                    f"{agent_workers} agent workers, driver and TaskRunner"
                                    + (f", {retriever_workers} retrieval workers" if searches else "")))
        if row["runtime"] < TRAIN_MIN_RUNTIME:
            findings.append(Finding(rule, f"{key}.runtime", "runtime",
                                    f"runtime {row['runtime']} min < {TRAIN_MIN_RUNTIME} (E.3: ~15 h for mathematics)"))
        gib = float(v.get("gpu_memory_gib", 80))
        for c in cs:
            peak = (c.sizing or {}).get("memory")
            if peak is not None and peak > 0.95 * gib:
                warnings.append(Finding(rule, f"{key}.gpu", "memory, measured",
                                        f"{c.cell}: the pilot's peak {peak:.1f} GiB on a rank is above 95% of "
                                        f"verl.gpu_memory_gib {gib:g}: lower train.micro_batch_tokens"))
        if slow is not None and slow.time.run_min > row["runtime"]:  # the upper bound: one line per rule
            why = job_progress(slow, row["runtime"], retries, caps=True)
            if why:
                warnings.append(Finding(rule, f"{key}.runtime", "at the caps, an upper bound", "; ".join(why)))

    eval_rules = ["evaluate_run"] + (["ablation_evaluate"] if any(s in cfg.get("ablations", {}) for s in STUDIES) else [])
    runs = eval_runs(cfg)
    from rtpo.eval_shards import SERVER_SHARD

    for rule in eval_rules:
        r = get(rule)
        key = f"{where}: set-resources.{rule}"
        need_mb = math.ceil((tp * replicas * MEMORY.worker_rss_gib + replicas * MEMORY.server_rss_gib
                             + MEMORY.driver_gib) * GIB / MIB)
        cpus = tp * replicas + replicas + 2 + retriever_workers
        nodes = _int(r.get("nodes"), 1)
        row = {"rule": rule, "gpu": gpu_request(r, nodes)[0], "need gpu": tp * replicas, "nodes": nodes, "need nodes": 1,
               "mem_mb": _int(r.get("mem_mb")), "need mem_mb": need_mb if gpu else None,
               "cpus": _int(r.get("cpus_per_task")), "need cpus": cpus if gpu else None,
               "runtime": _int(r.get("runtime")), "need runtime": None}
        rows.append(row)
        if gpu:
            findings += _gpu_findings(rule, key, r, nodes, tp * replicas, tp * replicas,
                                      f"verl.tensor_parallel_size x verl.eval_replicas = {tp} x {replicas}")
            if row["mem_mb"] < need_mb:
                findings.append(Finding(rule, f"{key}.mem_mb", "host memory", f"mem_mb {row['mem_mb']} < {need_mb}"))
            if row["cpus"] < cpus:
                findings.append(Finding(rule, f"{key}.cpus_per_task", "cpus", f"cpus_per_task {row['cpus']} < {cpus}"))
        shard = _int(r.get("eval_shard"), SERVER_SHARD)
        for (rl, task), n in sorted(runs.items()):
            if rl != rule:
                continue
            e = size_eval(cfg, task, tp * replicas, pilot, gpu)
            if e is None:
                continue
            e["task"] = task
            f, w, er = eval_progress(rule, key, e, row["runtime"], shard, retries)
            findings += f
            warnings += w
            er["runs"] = n
            evals.append(er)
    return rows, findings, warnings, evals


def train_rule(c: Any) -> str:
    return "ablation_train" if ":" in c.cell else f"train_{c.method}"


# --------------------------------------------------------------------------------------------------
# What the report prints
# --------------------------------------------------------------------------------------------------
def sizing_lines(rep: Any) -> list[str]:
    """The sizing table of every training cell and evaluation, then the DAG's GPU-hours and critical path
    (`dag_line`)."""
    cells = [c for c in rep.cells if getattr(c, "sizing", None)]
    if not cells:
        return []
    runtime = {r["rule"]: r["runtime"] for r in rep.resources}
    cols = ["cell", "runs", "steps", "step min", "start-up min", "ckpt write min", "ckpt read min", "steps/job", "jobs/run",
            "GPU-h/run"]
    lines = ["", f"sizing: {rep.pilot_note}", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for c in cells:
        z = c.sizing
        cost = run_cost(c, runtime.get(train_rule(c)))
        vals = [c.cell, c.runs, c.time.steps, z["step"] or "unsized", z["startup"], z["write"], z["read"]]
        vals += [cost["per_job"], cost["jobs"], f"{cost['gpu_h']:.1f}"] if cost else ["-", "-", "-"]
        lines.append("| " + " | ".join(map(str, vals)) + " |")
    if rep.eval_rows:
        cols = ["rule", "task", "runs", "trajectories", "min/traj", "start-up min", "rollout h", "runtime", "eval_shard",
                "recommended eval_shard", "jobs"]
        lines += ["", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        for e in rep.eval_rows:
            e = dict(e, **{"min/traj": f"{e['min/traj'].value:.3f} ({e['min/traj'].source})",
                           "rollout h": f"{e['rollout h']:.1f}"})
            lines.append("| " + " | ".join("-" if e.get(k) is None else str(e[k]) for k in cols) + " |")
    lines += ["", dag_line(rep)]
    return lines


def dag_line(rep: Any) -> str:
    """One line: the DAG's GPU-hours (training + evaluation, at the sized figures) over its Slurm jobs, its
    critical path (the longest run: its training jobs then its evaluation), and where the figures came from."""
    runtime = {r["rule"]: r["runtime"] for r in rep.resources}
    train_h = jobs = 0.0
    crit, crit_cell = 0.0, None
    unsized = []
    sources: dict[str, int] = {}
    for c in rep.cells:
        cost = run_cost(c, runtime.get(train_rule(c))) if getattr(c, "sizing", None) else None
        if cost is None:
            unsized.append(c.cell)
            continue
        src = next((k for k in ("pilot", "E.3 anchor") if c.sizing["step"].source.startswith(k)), "stated")
        sources[src] = sources.get(src, 0) + 1
        train_h += c.runs * cost["gpu_h"]
        jobs += c.runs * cost["jobs"]
        if cost["wall_h"] > crit:
            crit, crit_cell = cost["wall_h"], (c, cost)
    eval_h = eval_jobs = 0.0
    eval_wall: dict[str, float] = {}
    for e in rep.eval_rows:
        per = e["min/traj"].value * e["n"]
        wall = (e["start-up min"].value * (e["jobs"] or 1) + per) / 60
        eval_h += e["runs"] * wall * rep.eval_gpus
        eval_jobs += e["runs"] * (e["jobs"] or 1)
        eval_wall[e["task"]] = max(eval_wall.get(e["task"], 0.0), wall)
    gpu = "GPU-h" if rep.gpu else "device-h (the CPU harness: one logical GPU a job)"
    line = (f"DAG: {train_h + eval_h:,.0f} {gpu} = training {train_h:,.0f} over {jobs:.0f} Slurm jobs + evaluation "
            f"{eval_h:,.0f} over {eval_jobs:.0f}")
    if crit_cell is not None:
        c, cost = crit_cell
        path = crit + eval_wall.get(c.task, 0.0)
        line += (f"; critical path {path:,.1f} h ({c.cell}: {cost['jobs']} training job(s) in sequence, "
                 f"{crit:,.1f} h, then its evaluation {eval_wall.get(c.task, 0.0):,.1f} h)")
    if sources:
        line += "; step times from " + ", ".join(f"{k} ({n} cells)" for k, n in sorted(sources.items()))
    if unsized:
        line += f"; {len(unsized)} cells unsized ({', '.join(unsized[:3])}{', ...' if len(unsized) > 3 else ''})"
    if rep.pilot is None:
        line += "; the whole DAG is sized from constants (no pilot measured it)"
    caps = sum(c.runs * c.time.run_min / 60 * c.time.gpus for c in rep.cells if c.time is not None and c.time.rate)
    if rep.gpu and caps:
        line += f"; at the caps (every turn at max_new_tokens, stated throughput: an upper bound) training {caps:,.0f} GPU-h"
    return line



def disk_and_time_lines(rep: Any) -> list[str]:
    """What the disk and run-time columns assume, and the config's total disk over its runs."""
    cells = [c for c in rep.cells if c.disk is not None and c.time is not None]
    if not cells:
        return []

    def one(xs: set, fmt: str) -> str:
        return fmt.format(next(iter(xs))) if len(xs) == 1 else "per cell"

    ckpt = one({round(c.disk.checkpoint / GB, 1) for c in cells}, "{:.1f} GB")
    keep = one({c.disk.keep for c in cells}, "{}")
    final = one({round(c.disk.final / GB, 1) for c in cells}, "{:.1f} GB")
    rate = one({c.time.rate for c in cells}, "{:g}")
    gpus = one({c.time.gpus for c in cells}, "{}")
    runs = sum(c.runs for c in cells)
    total = sum(c.runs * c.disk.run for c in cells) + rep.untrained_final
    peak = sum(c.runs * c.disk.peak for c in cells) + rep.untrained_final
    stated = all(c.time.rate == STEP_TOKENS_PER_GPU_S for c in cells)
    return ["", f"disk (shared filesystem, GB = 1e9 B): ckpt GB = one checkpoint, the actor's save_contents without "
                f"hf_model: sharded weights + AdamW's two moments, all in the actor's param dtype "
                f"(fsdp_config.model_dtype; fp32: 12 B per parameter) = {ckpt}; GB/run = ckpt keep ({keep}: train.checkpoint_keep) x ckpt GB + final/ ({final}, written once "
                f"after training, in the base model's dtype). All {runs} training runs (cells x seeds)"
                + (f" and the untrained runs' final/ ({rep.untrained_final / GB:.1f} GB)" if rep.untrained_final else "")
                + f": {total / 1e12:.2f} TB; {peak / 1e12:.2f} TB if every run were writing a checkpoint at once "
                  "(keep 1: verl deletes the old one only once the new one is complete)",
            f"step time: E.3 step min = {E3_SOURCE}, i.e. 11.5 min (math) and 19.2 min (knowledge; airline "
            f"too) a step for RTPO at E.3's settings, scaled by the cell's generated tokens at the caps against that "
            f"RTPO cell's and by 8 / its GPUs; what `progress` checks (start-up, checkpoint read and write at "
            f"verl.checkpoint_write_gb_s = {CHECKPOINT_WRITE_GB_S:g} GB/s, stated, and one step must fit a job; "
            f"the run must fit 1 + retries jobs)",
            f"step time at the caps (an upper bound, warned about, not checked): tok/step M = generated tokens per step at the caps (prompts_per_step "
            f"x the method's rollouts x every turn at max_new_tokens: an upper bound); step min = tok/step / ({rate} "
            f"generated tok/s per GPU x {gpus} GPUs); verl.step_tokens_per_gpu_s = {rate} is "
            + ("stated, not measured (rollout 1,000 and training 500 tok/s per A100; docs/verl.md, \"Disk and run "
               "time\")" if stated else "the config's")
            + f"; run h = {STARTUP_MIN:g} min start-up + train.steps x step min; est. runtime (minutes) = the rule's "
              "longest run, against the profile's runtime"]
