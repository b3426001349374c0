"""One-command GPU smoke of the verl backend (scripts/gpu_smoke.sh): vLLM rollout, FSDP2 actor, RTPO.

Builds a random Qwen3 model (``--size tiny``: the embedded CPU model's shape; ``--size 0.6b``: the
layer sizes of Qwen3-0.6B's config, random weights, this repo's small tokenizer), toy tasks whose
reward is the parity of the last turn's length (so a random model gets non-zero advantages), and
runs `rtpo train --engine verl` for a few RTPO steps on one GPU. Then prints, per step and stage,
the measured rollout-training ratio and KL(rollout || train) on the trained tokens, and the
generation throughput. Nothing is tuned: it checks that the GPU path runs and that on-policy
siblings have ratio ~1 (vLLM bf16 sampling vs FSDP bf16/fp32 training: expect |ratio - 1| ~ 1e-2).

Then a paper-config evaluation (`eval_smoke`: config/paper.yaml's K, 4096-token turns, psi, samples,
temperature, bf16, tensor parallel and max_model_len) of a few problems per task through
`rtpo evaluate --engine verl` (standalone vLLM servers), printing trajectories/s and generated
tokens/s per task: the figure the Slurm profile's evaluation runtime is derived from
(workflow/profiles/slurm/README.md). `--eval-model results/models/Qwen3-8B` measures the real model.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import types
from pathlib import Path

SIZES = {  # Qwen3Config fields; "0.6b" follows Qwen/Qwen3-0.6B's config.json (vocab: our tokenizer's)
    "tiny": dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                 head_dim=32, intermediate_size=384),
    "0.6b": dict(hidden_size=1024, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                 head_dim=128, intermediate_size=3072),
}


def build_model(out: Path, size: str, seed: int = 0) -> Path:
    """A randomly initialised Qwen3 of `size` with this repo's small BPE tokenizer, saved as an HF dir."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from rtpo.tokenizer import train_tokenizer

    texts = ["Answer each turn. Say yes or no, round 1 2 3 4 5 6 7 8 9 0.", "continue yes no maybe"] * 50
    tok = train_tokenizer(texts, vocab_size=512)
    cfg = Qwen3Config(vocab_size=len(tok), max_position_embeddings=4096, tie_word_embeddings=True,
                      rope_theta=1_000_000.0, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                      bos_token_id=None, torch_dtype="bfloat16", **SIZES[size])
    torch.manual_seed(seed)
    Qwen3ForCausalLM(cfg).save_pretrained(out)
    tok.save_pretrained(out)
    return out


def smoke_config(steps: int, prompts: int, gpus: int) -> dict:
    from rtpo.config import ROOT, load_config

    cfg = load_config(ROOT / "config" / "smoke.yaml", validate=False)
    cfg["engine"] = "verl"
    cfg["env"]["toy"] = {"max_turns": 3, "psi": "full", "max_new_tokens": 64, "max_prompt_tokens": 1024,
                         "reward": "parity"}
    cfg["train"].update(steps=steps, prompts_per_step=prompts, lr=1e-5, checkpoint_every=steps,
                        micro_batch_tokens=16384)
    cfg["method"]["rtpo"] = {"trunks": 4, "group_size": 3, "sync": "per_stage", "continuation": "on_policy",
                             "adv_norm_std": False, "leave_one_out": False}
    cfg["verl"] = {"device": "cuda", "rollout": "vllm", "n_gpus_per_node": gpus, "nnodes": 1,
                   "tensor_parallel_size": 1, "gpu_memory_utilization": 0.4, "strategy": "fsdp2",
                   "remove_padding": False, "attn_implementation": "sdpa", "enforce_eager": True,
                   "env_factory": "rtpo.verl_ext.toy:env_factory", "agent_workers": 1}
    return cfg


def report(metrics: Path) -> list[str]:
    lines = []
    for r in (json.loads(x) for x in metrics.read_text().splitlines() if x.strip()):
        t, tok = r.get("time", {}), r.get("tokens", {})
        gen = tok.get("trunk", 0) + tok.get("sibling", 0) + tok.get("continuation", 0)
        gen_s = t.get("rollout", 0.0) + t.get("siblings", 0.0)
        lines.append(f"step {r['step']}: reward {r['reward_mean']:.3f} ratio {r['ratio_mean']:.5f} "
                     f"KL {r['kl_rollout_train']:.2e} generated {gen} tok in {gen_s:.1f} s "
                     f"({gen / max(gen_s, 1e-9):.0f} tok/s) update {t.get('update', 0.0):.1f} s")
        for s in r.get("turns", []):
            lines.append(f"  stage k={s['k']}: ratio {s['ratio_mean']:.5f} KL {s['kl_rollout_train']:.2e} "
                         f"trained tokens {s['trained_tokens']} groups {s['groups']} zero-adv {s['zero_adv_frac']:.2f}")
    return lines


def eval_config(gpus: int, model: Path) -> dict:
    """config/paper.yaml as evaluation runs it (K, 4096-token turns, psi qwen3, k samples at temperature 1,
    vLLM in bf16, tensor_parallel_size, max_model_len), on the GPUs this smoke has."""
    from rtpo.config import ROOT, load_config
    from rtpo.verl_ext.eval_servers import model_positions

    cfg = load_config(ROOT / "config" / "paper.yaml")
    v = cfg["verl"]
    tp = max(1, min(int(v.get("tensor_parallel_size", 1)), gpus))
    v.update(device="cuda", tensor_parallel_size=tp, eval_replicas=max(1, gpus // tp))
    v["max_model_len"] = min(int(v.get("max_model_len") or 1 << 30), model_positions(model))
    return cfg


def eval_smoke(out: Path, model: Path, problems: int, gpus: int) -> tuple[int, list[str]]:
    """A paper-config evaluation of `problems` problems per task on vLLM (`rtpo evaluate --engine verl`:
    standalone servers, ServerEngine + Roller): per task, trajectories and generated tokens per second.
    Problems: the first of results/data/<task>/eval.jsonl when the data rules made it, else embedded ones."""
    from rtpo.config import ROOT
    from rtpo.data import generate_tasks, read_tasks
    from rtpo.evaluate import evaluate

    cfg = eval_config(gpus, model)
    v = cfg["verl"]
    lines, rc = [], 0
    for task in cfg["tasks"]:
        real = ROOT / "results" / "data" / task / "eval.jsonl"
        tasks = read_tasks(real)[:problems] if real.exists() else generate_tasks(task, problems, 0, "eval")
        ev = out / "eval" / f"{task}.eval.jsonl"
        ev.parent.mkdir(parents=True, exist_ok=True)
        ev.write_text("".join(json.dumps(t.to_dict()) + "\n" for t in tasks))
        try:
            res = evaluate(model, "rtpo", task, cfg, 0, ev, out / "eval" / f"{task}.json", engine="verl")
        except Exception as e:  # noqa: BLE001 - report every task, then fail
            rc = 1
            lines.append(f"eval {task}: FAILED: {type(e).__name__}: {e}")
            continue
        th, o = res["throughput"], res["overall"]
        lines.append(f"eval {task}: {len(tasks)} problems x {res['k']} samples on {gpus} GPU(s) "
                     f"(tp {v['tensor_parallel_size']} x {v['eval_replicas']} replicas, max_model_len {v['max_model_len']}): "
                     f"{th['generated_tokens']} tokens in {th['rollout_s']:.1f} s = {th['generated_tokens_per_s']:.0f} tok/s "
                     f"({th['generated_tokens_per_s'] / gpus:.0f} per GPU), {th['trajectories_per_s']:.2f} traj/s, "
                     f"server start-up {th['startup_s']:.0f} s, pass@1 {o['pass@1']}, "
                     f"response tokens/traj {o['response_tokens']}")
    return rc, lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="results/gpu_smoke")
    p.add_argument("--size", choices=sorted(SIZES), default="0.6b")
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--gpus", type=int, default=1)
    p.add_argument("--eval-problems", type=int, default=4,
                   help="problems per task of the paper-config evaluation on vLLM (0: skip it)")
    p.add_argument("--eval-model", default=None,
                   help="model directory to evaluate (e.g. results/models/Qwen3-8B); default: the smoke's model")
    p.add_argument("--skip-train", action="store_true", help="only the evaluation")
    a = p.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("gpu_smoke: no CUDA device visible; this smoke needs a GPU (the CPU path is tested by "
              "tests/test_verl.py)", file=sys.stderr)
        return 2
    try:
        import vllm  # noqa: F401
    except ImportError:
        print("gpu_smoke: vllm is not installed (pip install -e '.[gpu]')", file=sys.stderr)
        return 2
    from rtpo.envs.base import Task
    from rtpo.verl_ext.launch import train_verl

    out = Path(a.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    model = build_model(out / "model", a.size)
    rc = 0
    if not a.skip_train:
        tasks = [Task(id=f"toy-{i}", kind="toy", question=f"Say yes or no, round {i}.", answers=["yes"])
                 for i in range(4 * a.prompts)]
        (out / "train.jsonl").write_text("".join(json.dumps(t.to_dict()) + "\n" for t in tasks))
        args = types.SimpleNamespace(method="rtpo", task="toy", seed=0, out=str(out / "run"), model=str(model),
                                     train_file=str(out / "train.jsonl"))
        rc = train_verl(args, smoke_config(a.steps, a.prompts, a.gpus))
        print(f"gpu_smoke: model {a.size}, {a.steps} RTPO steps, {a.prompts} prompts/step, wall "
              f"{time.perf_counter() - t0:.0f} s, verl exit {rc}")
        metrics = out / "run" / "metrics.jsonl"
        if metrics.exists():
            print("\n".join(report(metrics)))
    if a.eval_problems > 0:
        t1 = time.perf_counter()
        em = Path(a.eval_model) if a.eval_model else model
        erc, lines = eval_smoke(out, em, a.eval_problems, a.gpus)
        print(f"gpu_smoke: paper-config evaluation of {em} on vLLM, {a.eval_problems} problems per task, "
              f"wall {time.perf_counter() - t1:.0f} s")
        print("\n".join(lines))
        rc = rc or erc
    return rc


if __name__ == "__main__":
    sys.exit(main())
