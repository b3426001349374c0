"""Evaluate a model directory on a task's eval split: `rtpo evaluate` (eval JSON in docs/ARCHITECTURE.md).

k samples per eval task at the configured temperature, rolled out with the method's own context
map psi. Benchmarks are the eval tasks grouped by `source` and `tier` (embedded: "embedded-math-easy", ...;
paper scale: the real benchmark names from the adapters).
"""

from __future__ import annotations

import json
import math
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from tqdm import tqdm

from rtpo.config import method_settings
from rtpo.engine.base import SamplingParams
from rtpo.eval.metrics import aggregate_pass_at_k, trajectory_stats
from rtpo.instrument import is_success
from rtpo.rollout import Roller, Start, Trajectory
from rtpo.train import build_engine, env_factory, load_tasks

CHUNK = 32  # trajectories rolled out together (one progress-bar tick each chunk)


def benchmark_of(task) -> str:
    return f"{task.source}-{task.tier}" if task.source.startswith("embedded") else task.source


def traj_record(t: Trajectory) -> dict[str, Any]:
    m = t.info.get("metrics", {}) or {}
    return {"reward": t.reward, "success": is_success(t), "tool_calls": t.tool_calls, "tool_errors": t.tool_errors,
            "truncated": t.truncated, "terminated": bool(t.done and not t.truncated and t.info.get("answer") is not None),
            "response_tokens": t.response_tokens, "turns": len(t.turns),
            "em": m.get("em"), "f1": m.get("f1"), "hit": m.get("hit")}


def summarize(recs: list[dict[str, Any]], task_ids: list[str], k: int) -> dict[str, Any]:
    by_task: dict[str, list[bool]] = defaultdict(list)
    for r, tid in zip(recs, task_ids):
        by_task[tid].append(r["success"])
    ks = sorted({1, k})
    out = {"n": len(by_task), "samples": len(recs), **aggregate_pass_at_k(dict(by_task), ks),
           "reward": sum(r["reward"] for r in recs) / len(recs), **trajectory_stats(recs)}
    return {key: (None if isinstance(v, float) and math.isnan(v) else v) for key, v in out.items()}


def per_problem(recs: list[dict[str, Any]], starts: list[Start]) -> list[dict[str, Any]]:
    """Successes of each eval problem over its samples, in eval-file order: what the report's standard
    errors and its Vanilla-paired differences (paired by problem and seed) are computed from."""
    out: dict[str, dict[str, Any]] = {}
    for r, st in zip(recs, starts):
        d = out.setdefault(st.task.id, {"id": st.task.id, "benchmark": benchmark_of(st.task), "successes": 0,
                                        "samples": 0})
        d["successes"] += int(bool(r["success"]))
        d["samples"] += 1
    return list(out.values())


def evaluate(model_dir: str | Path, method: str, task: str, cfg: dict[str, Any], seed: int,
             eval_file: str | Path, out: str | Path) -> dict[str, Any]:
    s = method_settings(cfg, method, task)
    ev = cfg["eval"]
    k = int(ev["samples"])
    engine = build_engine(model_dir, cfg, seed, reference=False)
    params = SamplingParams(max_new_tokens=int(s["env"]["max_new_tokens"]), temperature=float(ev["temperature"]))
    roller = Roller(engine, env_factory(s["env"]), s["psi"], params)
    tasks = load_tasks(eval_file)
    t0 = time.perf_counter()
    starts = [Start(t, first_kind="eval", rest_kind="eval", seed=seed * 1_000_003 + i * k + j)
              for i, t in enumerate(tasks) for j in range(k)]
    trajs: list[Trajectory] = []
    with tqdm(total=len(starts), desc=f"eval {method}/{task}/seed{seed}", unit="traj", mininterval=5) as bar:
        for i in range(0, len(starts), CHUNK):
            trajs += roller.run(starts[i:i + CHUNK])
            bar.update(len(starts[i:i + CHUNK]))
    recs = [traj_record(t) for t in trajs]
    groups: dict[str, list[int]] = defaultdict(list)
    for i, st in enumerate(starts):
        groups[benchmark_of(st.task)].append(i)
    result = {
        "task": task, "method": method, "seed": seed, "model": str(model_dir), "k": k, "psi": s["psi"],
        "wall_s": time.perf_counter() - t0,
        "benchmarks": {b: summarize([recs[i] for i in idx], [starts[i].task.id for i in idx], k)
                       for b, idx in sorted(groups.items())},
        "overall": summarize(recs, [st.task.id for st in starts], k),
        "per_problem": per_problem(recs, starts),
    }
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(result, indent=1, sort_keys=True))
    return result
