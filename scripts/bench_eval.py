"""Evaluation throughput of the two sampling paths side by side: `rtpo evaluate --engine
local` (LocalEngine in this process) and `--engine verl` (verl's rollout servers in standalone mode;
on CPU the harness's HF rollout server, on a GPU vLLM), on the same model, eval split and config.

Prints trajectories/s and generated tokens/s of the rollout phase (server start-up separately), and
whether both paths sampled the same tokens (they do at temperature 0 on CPU). A benchmark, not a test:

    .venv/bin/python scripts/bench_eval.py --warm-start --problems 30 --samples 2 --temperature 0 \
        --max-new-tokens 80 --threads 2 --config config/smoke.yaml

Model: --model DIR; --warm-start: the tests' tiny Qwen3 warm-started on math demonstrations (episodes
with python-tool calls over several turns); default results/models/base (the embedded warm start)
when the pipeline made it, else a random tiny Qwen3. Outputs under /tmp/rtpo-bench-eval.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def warm_model(out: Path) -> Path:
    """The tiny Qwen3 of tests/test_eval_verl.py warm-started on 60 scripted math demonstrations (~25 s):
    greedy decoding then calls the python tool over several turns."""
    import random

    from rtpo.data import generate_tasks, get_expert
    from rtpo.envs import make_env
    from rtpo.sft import sft, turn_examples
    from tests.helpers import tiny

    eng = tiny.engine(seed=0, hidden=64, max_position=1024)
    rows = []
    for t in generate_tasks("math", 60, 1, "train"):
        msgs, _ = get_expert("math")(t, make_env(t, max_turns=3), 0.0, random.Random(0))
        rows += turn_examples(msgs, eng.tokenizer, "qwen3")
    sft(eng.model, eng.tokenizer, rows, 15, 5e-3, 16, False, seed=0)
    eng.model.save_pretrained(out)
    eng.tokenizer.save_pretrained(out)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=None)
    p.add_argument("--warm-start", action="store_true",
                   help="build the tests' warm-started tiny model (multi-turn tool episodes) and use it")
    p.add_argument("--task", default="math", choices=["math", "search", "airline"])
    p.add_argument("--problems", type=int, default=12)
    p.add_argument("--samples", type=int, default=2)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--max-new-tokens", type=int, default=None, help="default: the config's")
    p.add_argument("--threads", type=int, default=2, help="torch threads of the local engine and the HF server")
    p.add_argument("--config", default=str(ROOT / "config" / "config.yaml"))
    p.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "rtpo-bench-eval"))
    a = p.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ["RTPO_HF_SERVER_THREADS"] = str(a.threads)
    from rtpo.config import load_config
    from rtpo.data import generate_tasks
    from rtpo.evaluate import evaluate

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    model = Path(a.model) if a.model else ROOT / "results" / "models" / "base"
    if a.warm_start:
        model = warm_model(out / "warm_model")
    elif not (model / "config.json").exists():
        from gpu_smoke import build_model  # scripts/gpu_smoke.py (this script's directory is on sys.path)

        model = build_model(out / "model", "tiny")
    cfg = load_config(a.config)
    cfg["eval"] = {"samples": a.samples, "temperature": a.temperature}
    cfg["model"]["threads"] = a.threads
    if a.max_new_tokens:
        cfg["env"][a.task]["max_new_tokens"] = a.max_new_tokens
    cfg["verl"] = {**(cfg.get("verl") or {}), "device": "cpu", "dtype": "float32"}  # the HF rollout samples in fp32
    ev = out / "eval.jsonl"
    ev.write_text("".join(json.dumps(t.to_dict()) + "\n" for t in generate_tasks(a.task, a.problems, 0, "eval")))
    res, dumps = {}, {}
    for engine in ("local", "verl"):
        traj = out / f"{engine}.traj.jsonl"
        res[engine] = evaluate(model, "vanilla", a.task, cfg, 0, ev, out / f"{engine}.json", engine=engine,
                               trajectories=traj)
        dumps[engine] = [[u["action_ids"] for u in json.loads(x)["turns"]] for x in traj.read_text().splitlines()]
    same = sum(x == y for x, y in zip(dumps["local"], dumps["verl"]))
    print(f"model {model}, task {a.task}: {a.problems} problems x {a.samples} samples, temperature "
          f"{a.temperature}, {a.threads} threads")
    print(f"{'engine':<8} {'traj/s':>8} {'gen tok/s':>10} {'tokens':>8} {'rollout s':>10} {'start-up s':>11}")
    for engine, r in res.items():
        th = r["throughput"]
        print(f"{engine:<8} {th['trajectories_per_s']:>8.2f} {th['generated_tokens_per_s']:>10.0f} "
              f"{th['generated_tokens']:>8} {th['rollout_s']:>10.2f} {th['startup_s']:>11.1f}")
    print(f"identical trajectories: {same}/{len(dumps['local'])}; pass@1 local {res['local']['overall']['pass@1']} "
          f"verl {res['verl']['overall']['pass@1']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
