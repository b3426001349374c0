"""Does the new code compute bit for bit what the old code did? (not a test: compares two checkouts)

    .venv/bin/python scripts/compare_trees.py --old-tree DIR [--model results/models/base]

An engine change that keeps the arithmetic leaves every DAG result as it was (no fresh pair of DAG
runs needed); one that does not, changes them all. In each tree this runs, on the same model:
  1. 36 `engine.sample` calls over random contexts (batches of 1-64 rows, identical siblings, a second
     turn extending each context so the prefix cache hits; temperature 1 with tool-call stops and
     entropies, temperature 0.7 with top_p 0.9, greedy) and keeps ids, logprobs, stop reasons, entropies;
  2. 2 RL steps (4 prompts) of RTPO and GRPO on math, search and airline and keeps a hash of the
     trained weights and the step records (timings left out).
and prints which of them differ.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

DRIVER = r'''
import hashlib, json, pickle, random, sys
import torch
torch.set_num_threads(1)
a = json.loads(sys.argv[1])
from rtpo.engine.base import SamplingParams
from rtpo.engine.local import LocalEngine
out = {"sample": [], "train": {}}
e = LocalEngine.from_pretrained(a["model"], seed=0, reference=False)
V, rng = len(e.tokenizer), random.Random(0)
for n, lo, hi, rep in [(1, 5, 50, 1), (3, 20, 200, 1), (4, 100, 300, 4), (17, 5, 300, 1), (16, 150, 160, 4), (64, 100, 130, 1)]:
    C = [c for c in ([rng.randrange(3, V) for _ in range(rng.randrange(lo, hi))] for _ in range(n)) for _ in range(rep)]
    for p in (SamplingParams(max_new_tokens=80, temperature=1.0, stop_at_tool_call=True, entropy_tokens=8),
              SamplingParams(max_new_tokens=40, temperature=0.7, top_p=0.9, stop_at_tool_call=False),
              SamplingParams(max_new_tokens=30, temperature=0.0)):
        seeds = [rng.randrange(2**62) for _ in C]
        for turn in range(2):
            comps = e.sample(C, p, seeds)
            out["sample"].append([(c.ids, c.logprobs, c.stop_reason, c.entropy) for c in comps])
            C = [c + x.ids + [rng.randrange(3, V) for _ in range(7)] for c, x in zip(C, comps)]
from rtpo.config import load_config, method_settings
from rtpo.methods.registry import get_method
from rtpo.rollout import Roller
from rtpo.assembly import build_engine, env_factory, seed_everything, update_config
from rtpo.data import load_tasks
def strip(x):
    if isinstance(x, dict):
        return {k: strip(v) for k, v in x.items() if k != "time"}
    return [strip(v) for v in x] if isinstance(x, list) else x
for method in ("rtpo", "grpo"):
    for task in ("math", "search", "airline"):
        cfg = load_config(a["config"], ["train.prompts_per_step=4"])
        s = method_settings(cfg, method, task)
        tr = s["train"]
        seed_everything(1)
        tasks = load_tasks(a["data"] + f"/{task}/train.jsonl")
        engine = build_engine(a["model"], cfg, 1, reference=float(tr["kl_coef"]) > 0)
        params = SamplingParams(max_new_tokens=int(s["env"]["max_new_tokens"]), temperature=float(tr["temperature"]))
        algo = get_method(method)(engine, Roller(engine, env_factory(s["env"]), s["psi"], params), s["method"],
                                  update_config(tr), float(tr["temperature"]))
        recs = [strip(algo.step(random.Random(f"1:{k}").sample(tasks, 4), k)) for k in range(2)]
        h = hashlib.sha256()
        for _, v in sorted(engine.model.state_dict().items()):
            h.update(v.numpy().tobytes())
        out["train"][f"{method}/{task}"] = {"weights": h.hexdigest(), "records": json.dumps(recs, sort_keys=True, default=str)}
        print(f"  {method}/{task}: weights {h.hexdigest()[:12]}", file=sys.stderr, flush=True)
pickle.dump(out, open(a["out"], "wb"))
'''


def run(tree: Path, model: Path, config: str, out: Path) -> dict:
    import pickle

    arg = {"model": str(model), "config": str(tree / config), "data": str(ROOT / "results" / "data"), "out": str(out)}
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONHASHSEED="0", TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1")
    print(f"{tree}:", flush=True)
    subprocess.run([sys.executable, "-c", DRIVER, json.dumps(arg)], cwd=tree, env=env, check=True)
    return pickle.load(open(out, "rb"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--old-tree", required=True)
    ap.add_argument("--model", default="results/models/base")
    ap.add_argument("--config", default="config/config.yaml")
    a = ap.parse_args()
    model = ROOT / a.model
    if not (model / "config.json").exists():
        raise SystemExit(f"{a.model}: no model; build it first: .venv/bin/snakemake --cores 2 results/models/base")
    with tempfile.TemporaryDirectory(prefix="compare-trees-") as tmp:
        old = run(Path(a.old_tree).resolve(), model, a.config, Path(tmp) / "old.pkl")
        new = run(ROOT, model, a.config, Path(tmp) / "new.pkl")
    same = True
    for i, (x, y) in enumerate(zip(old["sample"], new["sample"])):
        if x != y:
            same = False
            print(f"sample call {i}: {sum(p != q for p, q in zip(x, y))} of {len(x)} completions differ")
    n_tok = sum(len(c[0]) for call in new["sample"] for c in call)
    print(f"sample: {len(new['sample'])} calls, {n_tok} tokens: "
          f"{'identical' if all(x == y for x, y in zip(old['sample'], new['sample'])) else 'DIFFERENT'}")
    for cell, o in old["train"].items():
        n = new["train"][cell]
        w, r = o["weights"] == n["weights"], o["records"] == n["records"]
        same &= w and r
        print(f"{cell:14s} weights {'identical' if w else 'DIFFERENT'}, step records {'identical' if r else 'DIFFERENT'}")
    print("bit for bit the same" if same else "the arithmetic changed: the DAG's results will change")
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
