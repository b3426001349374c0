"""RL step wall-clock, old code against new, side by side (not a test; prints figures).

    .venv/bin/python scripts/bench_step.py [--old f5ef859] [--methods rtpo grpo] [--tasks math]
        [--prompts 16] [--steps 2] [--pairs 3] [--model results/models/base] [--config config/config.yaml]

For every (task, method), runs `--pairs` pairs of processes, old then new (alternating, so drift
and noise from the rest of the machine fall on both), each building the engine, Roller and method
exactly as `rtpo train` does (rtpo.train) from the same model directory, config and seed, and
timing `--steps` method steps of `--prompts` prompts. The old code is a git worktree of `--old`
(made under /tmp and removed afterwards; `--old-tree DIR` uses an existing checkout instead).

Per pair it records the step wall-clock (median over the steps after the first, which warms up),
generated tokens (the step record's token counts), prefilled tokens (context tokens run through
the model to start sampling: the old engine prefills every context, the new one each distinct
context once), tokens/s, and how the step samples: `engine.sample` calls per step and requests per
call (RTPO's reverse stages sample in several small batches, GRPO's chains in a few large ones).
Prints per cell the medians, the old/new ratio with its spread over the pairs, and, per task,
RTPO / GRPO of the new code.

`--concurrent` runs the two processes of a pair at the same time instead, one per core, cores swapped
every pair (old and new of a cell; with `--new-only`, the two `--methods` of a task: e.g. `--new-only
--concurrent --methods rtpo grpo` for RTPO / GRPO under the same machine state).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Runs inside the tree under test (its rtpo on sys.path); prints one JSON line.
DRIVER = r'''
import json, random, resource, sys, time
import torch
def cpu_s():
    c = resource.getrusage(resource.RUSAGE_CHILDREN)   # tool-call sandboxes are child processes
    return time.process_time() + c.ru_utime + c.ru_stime
args = json.loads(sys.argv[1])
torch.set_num_threads(args["threads"])
from rtpo.config import load_config, method_settings
from rtpo.engine.base import SamplingParams
from rtpo.methods.registry import get_method
from rtpo.rollout import Roller
from rtpo.assembly import build_engine, env_factory, seed_everything, update_config
from rtpo.data import load_tasks

cfg = load_config(args["config"], [f"train.prompts_per_step={args['prompts']}"])
s = method_settings(cfg, args["method"], args["task"])
tr, mcfg, env_cfg, psi = s["train"], s["method"], s["env"], s["psi"]
seed_everything(args["seed"])
tasks = load_tasks(args["train_file"])
engine = build_engine(args["model"], cfg, args["seed"], reference=float(tr["kl_coef"]) > 0)
ctx_tokens, n_calls, n_rows, s_cpu, s_tok = [0], [0], [0], [0.0], [0]
orig = engine.sample
def counted(contexts, params, seeds=None):
    ctx_tokens[0] += sum(len(c) for c in contexts)
    n_calls[0] += 1
    n_rows[0] += len(contexts)
    t = time.process_time()
    comps = orig(contexts, params, seeds)
    s_cpu[0] += time.process_time() - t
    s_tok[0] += sum(len(c.ids) for c in comps)
    return comps
engine.sample = counted
params = SamplingParams(max_new_tokens=int(env_cfg["max_new_tokens"]), temperature=float(tr["temperature"]))
roller = Roller(engine, env_factory(env_cfg), psi, params)
algo = get_method(args["method"])(engine, roller, mcfg, update_config(tr), float(tr["temperature"]))
out = []
for step in range(args["steps"]):
    batch = random.Random(f"{args['seed']}:{step}").sample(tasks, min(args["prompts"], len(tasks)))
    c0, p0, k0, r0 = ctx_tokens[0], getattr(engine, "prefilled_tokens", None), n_calls[0], n_rows[0]
    sc0, st0 = s_cpu[0], s_tok[0]
    t0, cpu0 = time.perf_counter(), cpu_s()
    rec = algo.step(batch, step)
    wall, cpu = time.perf_counter() - t0, cpu_s() - cpu0
    p1 = getattr(engine, "prefilled_tokens", None)
    out.append({"wall": wall, "cpu": cpu, "generated": sum(rec.get("tokens", {}).values()),
                "prefilled": (p1 - p0) if p1 is not None else ctx_tokens[0] - c0,
                "rollouts_per_prompt": rec.get("rollouts_per_prompt"), "time": rec.get("time", {}),
                "sample_calls": n_calls[0] - k0, "sample_rows": n_rows[0] - r0,
                "sample_tok_cpu_s": (s_tok[0] - st0) / max(1e-9, s_cpu[0] - sc0)})
print("RESULT " + json.dumps(out))
'''


def start_once(tree: Path, a: argparse.Namespace, method: str, task: str, core: int | None = None) -> tuple:
    """Start one DRIVER process (pinned to `core` with taskset when given); `finish` collects it."""
    arg = {"config": str(tree / a.config), "model": str(ROOT / a.model), "method": method, "task": task,
           "prompts": a.prompts, "steps": a.steps, "seed": a.seed, "threads": a.threads,
           "train_file": str(ROOT / "results" / "data" / task / "train.jsonl")}
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONHASHSEED="0", TOKENIZERS_PARALLELISM="false",
               HF_HUB_OFFLINE="1")
    cmd = [sys.executable, "-c", DRIVER, json.dumps(arg)]
    if core is not None:
        cmd = ["taskset", "-c", str(core)] + cmd
    p = subprocess.Popen(cmd, cwd=tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return p, f"{tree} {method}/{task}"


def finish(started: tuple) -> list[dict]:
    p, what = started
    out, err = p.communicate()
    line = next((x for x in out.splitlines() if x.startswith("RESULT ")), None)
    if p.returncode or line is None:
        raise SystemExit(f"{what} failed (exit {p.returncode}):\n{err[-3000:]}")
    return json.loads(line[len("RESULT "):])


def run_once(tree: Path, a: argparse.Namespace, method: str, task: str) -> list[dict]:
    return finish(start_once(tree, a, method, task))


def summarise(steps: list[dict]) -> dict:
    warm = steps[1:] if len(steps) > 1 else steps
    wall = statistics.median(s["wall"] for s in warm)
    cpu = statistics.median(s["cpu"] for s in warm)
    gen = statistics.median(s["generated"] for s in warm)
    pre = statistics.median(s["prefilled"] for s in warm)
    calls = statistics.median(s["sample_calls"] for s in warm)
    batch = statistics.median(s["sample_rows"] / max(1, s["sample_calls"]) for s in warm)
    # the step record's phases (rollout / siblings / update; "other" = the rest of the step)
    names = sorted({k for s in warm for k in s["time"] if k != "total"})
    phases = {k: statistics.median(s["time"].get(k, 0.0) for s in warm) for k in names}
    phases["other"] = max(0.0, wall - sum(phases.values()))
    return {"wall": wall, "cpu": cpu, "generated": gen, "prefilled": pre, "tok_s": gen / wall, "phases": phases,
            "rpp": statistics.median((s["rollouts_per_prompt"] or 0) for s in warm), "calls": calls,
            "batch": batch, "sample_tok_cpu_s": statistics.median(s["sample_tok_cpu_s"] for s in warm)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old", default="f5ef859", help="commit of the old code")
    ap.add_argument("--old-tree", default=None, help="an existing checkout of the old code instead of a worktree")
    ap.add_argument("--methods", nargs="+", default=["grpo", "tree_grpo", "arpo", "seeupo", "rtpo"])
    ap.add_argument("--tasks", nargs="+", default=["math"])
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--steps", type=int, default=2, help="steps per process (the first is a warm-up when > 1)")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--config", default="config/config.yaml")
    ap.add_argument("--model", default="results/models/base")
    ap.add_argument("--new-only", action="store_true", help="time the working tree only (no old code)")
    ap.add_argument("--concurrent", action="store_true",
                    help="run the two processes of a pair at the same time, one per core (taskset), cores swapped "
                         "every pair: old and new of a cell, or with --new-only the two --methods of a task; "
                         "both see the same machine state (a shared machine's load moves step times by 20-30 %%)")
    a = ap.parse_args()
    cores = sorted(os.sched_getaffinity(0))[:2]
    if a.concurrent and (len(cores) < 2 or (a.new_only and len(a.methods) != 2)):
        raise SystemExit("--concurrent needs two cores, and with --new-only exactly two --methods")
    if not (ROOT / a.model / "config.json").exists():
        raise SystemExit(f"{a.model}: no model; build it first: .venv/bin/snakemake --cores 2 results/models/base")

    tmp = None
    old_tree = None
    if not a.new_only:
        if a.old_tree:
            old_tree = Path(a.old_tree)
        else:
            tmp = tempfile.mkdtemp(prefix="bench-old-")
            old_tree = Path(tmp) / "tree"
            subprocess.run(["git", "worktree", "add", "--detach", str(old_tree), a.old], cwd=ROOT, check=True,
                           capture_output=True)
    try:
        rows: dict[tuple[str, str], list] = {}
        if a.concurrent and not old_tree:   # the two methods of a task side by side
            m1, m2 = a.methods
            for task in a.tasks:
                for r in range(a.pairs):
                    c1, c2 = (cores[0], cores[1]) if r % 2 == 0 else (cores[1], cores[0])
                    s1, s2 = start_once(ROOT, a, m1, task, c1), start_once(ROOT, a, m2, task, c2)
                    x1, x2 = summarise(finish(s1)), summarise(finish(s2))
                    rows.setdefault((task, m1), []).append((None, x1))
                    rows.setdefault((task, m2), []).append((None, x2))
                    print(f"  {task} pair {r + 1} (at once): {m1} {x1['wall']:.2f}s / {m2} {x2['wall']:.2f}s", flush=True)
        for task in a.tasks if not (a.concurrent and not old_tree) else []:
            for m in a.methods:
                pairs = []
                for r in range(a.pairs):
                    if a.concurrent:   # old and new at the same time, cores swapped every pair
                        co, cn = (cores[0], cores[1]) if r % 2 == 0 else (cores[1], cores[0])
                        so, sn = start_once(old_tree, a, m, task, co), start_once(ROOT, a, m, task, cn)
                        old, new = summarise(finish(so)), summarise(finish(sn))
                    else:
                        old = summarise(run_once(old_tree, a, m, task)) if old_tree else None
                        new = summarise(run_once(ROOT, a, m, task))
                    pairs.append((old, new))
                    tag = f"old {old['wall']:.2f}s / " if old else ""
                    print(f"  {task}/{m} pair {r + 1}: {tag}new {new['wall']:.2f}s", flush=True)
                rows[(task, m)] = pairs
        how = "concurrent pairs (one process per core, cores swapped)" if a.concurrent else "alternating pairs"
        print(f"\nper step, {a.prompts} prompts, {a.threads} thread(s), median over steps 2..{a.steps} of each "
              f"process, {a.pairs} {how}; old = {(a.old_tree or a.old) if old_tree else '-'}; cpu = this process + its "
              f"tool sandboxes (less sensitive to other load than wall)")
        print(f"{'task':8} {'method':10} {'wall old':>8} {'wall new':>8} {'wall x (min-max)':>17} {'cpu old':>8} "
              f"{'cpu new':>8} {'cpu x':>6} {'gen old':>8} {'gen new':>8} {'pre old':>8} {'pre new':>8} "
              f"{'tok/s old':>9} {'tok/s new':>9} {'rpp':>5}")
        med = lambda xs, k: statistics.median(x[k] for x in xs)
        for (task, m), pairs in rows.items():
            new = [p[1] for p in pairs]
            if pairs[0][0] is not None:
                old = [p[0] for p in pairs]
                sp = [o["wall"] / n["wall"] for o, n in pairs]
                cp = [o["cpu"] / n["cpu"] for o, n in pairs]
                print(f"{task:8} {m:10} {med(old, 'wall'):8.2f} {med(new, 'wall'):8.2f} "
                      f"{statistics.median(sp):6.2f} ({min(sp):.2f}-{max(sp):.2f}) {med(old, 'cpu'):8.2f} "
                      f"{med(new, 'cpu'):8.2f} {statistics.median(cp):6.2f} "
                      f"{med(old, 'generated'):8.0f} {med(new, 'generated'):8.0f} {med(old, 'prefilled'):8.0f} "
                      f"{med(new, 'prefilled'):8.0f} {med(old, 'tok_s'):9.0f} {med(new, 'tok_s'):9.0f} {med(new, 'rpp'):5.1f}")
            else:
                print(f"{task:8} {m:10} {'-':>8} {med(new, 'wall'):8.2f} {'-':>17} {'-':>8} {med(new, 'cpu'):8.2f} "
                      f"{'-':>6} {'-':>8} {med(new, 'generated'):8.0f} {'-':>8} {med(new, 'prefilled'):8.0f} "
                      f"{'-':>9} {med(new, 'tok_s'):9.0f} {med(new, 'rpp'):5.1f}")
        print("\nwhere the step goes (s, median; the step record's phases, other = the rest of the wall-clock)")
        for (task, m), pairs in rows.items():
            for side, xs in (("old", [p[0] for p in pairs if p[0] is not None]), ("new", [p[1] for p in pairs])):
                if xs:
                    keys = sorted({k for x in xs for k in x["phases"]})
                    print(f"{task:8} {m:10} {side}: " + "  ".join(
                        f"{k} {statistics.median(x['phases'].get(k, 0.0) for x in xs):.2f}" for k in keys))
        print("\nnew code, per step: engine.sample calls, mean requests per call (small batches decode at a lower"
              " tok/s) and tokens generated per CPU second spent in engine.sample")
        print(f"{'task':8} {'method':10} {'calls':>6} {'batch':>6} {'sample tok/cpu-s':>16}")
        for (task, m), pairs in rows.items():
            new = [p[1] for p in pairs]
            print(f"{task:8} {m:10} {med(new, 'calls'):6.0f} {med(new, 'batch'):6.1f} {med(new, 'sample_tok_cpu_s'):16.0f}")
        for task in a.tasks:
            if (task, "rtpo") in rows and (task, "grpo") in rows:
                for k in ("wall", "cpu"):
                    rt = [p[1][k] for p in rows[(task, "rtpo")]]
                    gr = [p[1][k] for p in rows[(task, "grpo")]]
                    ratios = [x / y for x, y in zip(rt, gr)]
                    print(f"{task}: RTPO / GRPO step {k} (new code) = {statistics.median(rt) / statistics.median(gr):.2f} "
                          f"(pairwise {min(ratios):.2f}-{max(ratios):.2f}; paper G.4: 1.41 wall-clock)")
    finally:
        if tmp:
            subprocess.run(["git", "worktree", "remove", "--force", str(old_tree)], cwd=ROOT, capture_output=True)


if __name__ == "__main__":
    main()
