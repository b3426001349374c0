"""Sampling engine only, old code against new, on the very calls RL steps make (not a test; prints figures).

    .venv/bin/python scripts/bench_replay.py --old-tree DIR [--methods rtpo grpo] [--tasks airline math]
        [--prompts 8] [--steps 2] [--rounds 3] [--repeats 2] [--model results/models/base]

1. Records every `engine.sample` call (contexts, sampling parameters, request seeds) of `--steps` RL steps
   per (method, task), run by the working tree exactly as `rtpo train` builds them, and where the
   inference weights changed (a sync: the prefix cache is emptied there).
2. Replays the recorded calls with the old tree's engine and the new one's, on the same model's weights,
   *at the same time*, one process per core (`taskset`), swapping the cores every round, and reports
   per (method, task) the seconds spent in `sample` (best of `--repeats` passes in each process), the
   medians over the rounds and the old/new ratio with its range.

Why: a whole RL step mixes sampling with updates, tool subprocesses and Python bookkeeping, and on a
shared 2-core machine its wall-clock varies by 20-30 % from one process to the next; two engines run
side by side on identical inputs see the same machine. Both trees sample the same tokens when their
arithmetic is the same (the engine's bit-for-bit changes); otherwise the ratio compares different work.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

RECORD = r'''
import pickle, random, sys, json
import torch
a = json.loads(sys.argv[1])
torch.set_num_threads(1)
from rtpo.config import load_config, method_settings
from rtpo.engine.base import SamplingParams
from rtpo.methods.registry import get_method
from rtpo.rollout import Roller
from rtpo.assembly import build_engine, env_factory, seed_everything, update_config
from rtpo.data import load_tasks
calls = []
for method in a["methods"]:
    for task in a["tasks"]:
        cell = f"{task}/{method}"
        cfg = load_config(a["config"], [f"train.prompts_per_step={a['prompts']}"])
        s = method_settings(cfg, method, task)
        tr, mcfg, env_cfg, psi = s["train"], s["method"], s["env"], s["psi"]
        seed_everything(a["seed"])
        tasks = load_tasks(a["data"] + f"/{task}/train.jsonl")
        engine = build_engine(a["model"], cfg, a["seed"], reference=float(tr["kl_coef"]) > 0)
        sample, changed = engine.sample, engine.inference_weights_changed
        def rec(contexts, params, seeds=None, _f=sample, _c=cell):
            calls.append((_c, [list(x) for x in contexts], params, seeds))
            return _f(contexts, params, seeds)
        def rec_sync(_f=changed, _c=cell):
            calls.append((_c, None, None, None))
            _f()
        engine.sample, engine.inference_weights_changed = rec, rec_sync
        params = SamplingParams(max_new_tokens=int(env_cfg["max_new_tokens"]), temperature=float(tr["temperature"]))
        roller = Roller(engine, env_factory(env_cfg), psi, params)
        algo = get_method(method)(engine, roller, mcfg, update_config(tr), float(tr["temperature"]))
        for step in range(a["steps"]):
            algo.step(random.Random(f"{a['seed']}:{step}").sample(tasks, min(a["prompts"], len(tasks))), step)
pickle.dump(calls, open(a["out"], "wb"))
'''

REPLAY = r'''
import pickle, sys, time, json
import torch
torch.set_num_threads(1)
from rtpo.engine.base import SamplingParams
from rtpo.engine.local import LocalEngine
model, calls_file, repeats = sys.argv[1], sys.argv[2], int(sys.argv[3])
calls = pickle.load(open(calls_file, "rb"))
e = LocalEngine.from_pretrained(model, seed=0, reference=False)
clear = getattr(e, "drop_prefix_cache", lambda: None)
best, tokens = {}, {}
for _ in range(repeats):
    spent, n = {}, {}
    clear()
    for cell, contexts, params, seeds in calls:
        if contexts is None:
            clear()
            continue
        t0 = time.perf_counter()
        comps = e.sample(contexts, params, seeds)
        spent[cell] = spent.get(cell, 0.0) + time.perf_counter() - t0
        n[cell] = n.get(cell, 0) + sum(len(c.ids) for c in comps)
    for c in spent:
        best[c] = min(best.get(c, float("inf")), spent[c])
    tokens = n
print("RESULT " + json.dumps({"seconds": best, "tokens": tokens}))
'''


def env_for(tree: Path) -> dict:
    return dict(os.environ, PYTHONPATH=str(tree), PYTHONHASHSEED="0", TOKENIZERS_PARALLELISM="false",
                HF_HUB_OFFLINE="1")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--old-tree", required=True, help="a checkout of the old code")
    ap.add_argument("--methods", nargs="+", default=["rtpo", "grpo"])
    ap.add_argument("--tasks", nargs="+", default=["math", "search", "airline"])
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3, help="pairs of concurrent runs, cores swapped in each")
    ap.add_argument("--repeats", type=int, default=2, help="passes over the calls per process (best kept)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--config", default="config/config.yaml")
    ap.add_argument("--model", default="results/models/base")
    a = ap.parse_args()
    model = ROOT / a.model
    if not (model / "config.json").exists():
        raise SystemExit(f"{a.model}: no model; build it first: .venv/bin/snakemake --cores 2 results/models/base")
    old = Path(a.old_tree).resolve()
    cores = sorted(os.sched_getaffinity(0))[:2]
    if len(cores) < 2:
        raise SystemExit("needs two cores (one per engine)")
    with tempfile.TemporaryDirectory(prefix="bench-replay-") as tmp:
        calls = Path(tmp) / "calls.pkl"
        rec = {"methods": a.methods, "tasks": a.tasks, "prompts": a.prompts, "steps": a.steps, "seed": a.seed,
               "config": str(ROOT / a.config), "model": str(model), "data": str(ROOT / "results" / "data"),
               "out": str(calls)}
        print(f"recording {a.steps} steps x {a.prompts} prompts of {a.methods} on {a.tasks} ...", flush=True)
        subprocess.run([sys.executable, "-c", RECORD, json.dumps(rec)], cwd=ROOT, env=env_for(ROOT), check=True)
        n_calls = sum(1 for c in pickle.load(open(calls, "rb")) if c[1] is not None)
        runs: dict[str, list[dict]] = {"old": [], "new": []}
        for r in range(a.rounds):
            for swap in (0, 1):
                procs = {}
                for side, tree in (("old", old), ("new", ROOT)):
                    core = cores[(side == "new") ^ swap]
                    procs[side] = subprocess.Popen(["taskset", "-c", str(core), sys.executable, "-c", REPLAY, str(model),
                                                    str(calls), str(a.repeats)], cwd=tree, env=env_for(tree),
                                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for side, p in procs.items():
                    out, err = p.communicate()
                    line = next((x for x in out.splitlines() if x.startswith("RESULT ")), None)
                    if p.returncode or line is None:
                        raise SystemExit(f"{side} replay failed (exit {p.returncode}):\n{err[-3000:]}")
                    runs[side].append(json.loads(line[len("RESULT "):]))
                print(f"  round {r + 1}{'b' if swap else 'a'}: " + ", ".join(
                    f"{c} {runs['old'][-1]['seconds'][c]:.2f}/{runs['new'][-1]['seconds'][c]:.2f}s"
                    for c in runs["new"][-1]["seconds"]), flush=True)
    print(f"\nengine.sample seconds on {n_calls} recorded calls, old = {old}, new = {ROOT}; best of {a.repeats} "
          f"passes per process, {2 * a.rounds} concurrent pairs (one engine per core, cores swapped)")
    print(f"{'cell':16s} {'old (s)':>8s} {'new (s)':>8s} {'old/new (min-max)':>20s} {'tokens old/new':>16s}")
    for cell in runs["new"][0]["seconds"]:
        o = [x["seconds"][cell] for x in runs["old"]]
        n = [x["seconds"][cell] for x in runs["new"]]
        ratio = [x / y for x, y in zip(o, n)]
        toks = f"{runs['old'][0]['tokens'][cell]}/{runs['new'][0]['tokens'][cell]}"
        print(f"{cell:16s} {statistics.median(o):8.2f} {statistics.median(n):8.2f} "
              f"{statistics.median(ratio):9.2f} ({min(ratio):.2f}-{max(ratio):.2f}) {toks:>16s}")


if __name__ == "__main__":
    main()
