"""One-command GPU smoke of the verl backend (scripts/gpu_smoke.sh): vLLM rollout, FSDP2 actor, RTPO.

Builds a random Qwen3 model (``--size tiny``: the embedded CPU model's shape; ``--size 0.6b``: the
layer sizes of Qwen3-0.6B's config, random weights, this repo's small tokenizer), toy tasks whose
reward is the parity of the last turn's length (so a random model gets non-zero advantages), and
runs `rtpo train --engine verl` for a few RTPO steps on one GPU. Then prints, per step and stage,
the measured rollout-training ratio and KL(rollout || train) on the trained tokens, and the
generation throughput. Nothing is tuned: it checks that the GPU path runs and that on-policy
siblings have ratio ~1 (vLLM bf16 sampling vs FSDP bf16/fp32 training: expect |ratio - 1| ~ 1e-2).
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="results/gpu_smoke")
    p.add_argument("--size", choices=sorted(SIZES), default="0.6b")
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--gpus", type=int, default=1)
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
    return rc


if __name__ == "__main__":
    sys.exit(main())
