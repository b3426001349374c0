#!/usr/bin/env bash
# One-command GPU smoke of the verl backend: every path only a GPU exercises, one PASS / FAIL / SKIP row
# per case with what it measured and tokens/s, then a table; exit 1 if any case failed, 2 if this
# environment cannot run it. Cases (`--list`; `--cases a,b` runs a subset):
#   per_stage       RTPO per_stage, --steps steps with a checkpoint every step, then a resume
#   interval        RTPO sync interval:2 on vllm_keep (K = 3): a stale stage 0, synced stages at noise level
#   kl              RTPO sync kl:0.01 on vllm_keep: KL(inference || train) scored by vLLM's prompt logprobs
#   grpo, arpo      one step each (verl's own sync trainer on flat rows; ARPO's entropy from the actor)
#   tp2             one RTPO step with vLLM tensor_parallel_size 2 (needs --gpus 2)
#   remove_padding  one RTPO step with use_remove_padding + config/paper.yaml's attention implementation
#   paper_length    one GRPO step with ~8000-token prompts and 4096-token turns (config/paper.yaml's math cell)
#   tree_grpo       two Tree-GRPO steps with paper.yaml's entropy bonus and KL (reference model on; kl_ref > 0)
#   seeupo          one SeeUPO step (K updates, reverse turn order) with paper.yaml's KL
#   paper_memory    torch only (no vLLM, no Ray): the actor's peak memory per pass at paper shape, extrapolated
#                   to 36 layers (also on its own: python scripts/gpu_memory.py; --cpu: its --tiny rehearsal)
#   eval            config/paper.yaml's evaluation of a few problems per task on vLLM (tokens/s per task)
# on a random Qwen3-0.6B-sized model (or --size tiny). Needs a CUDA GPU and the GPU stack
# (pip install -e '.[gpu]': verl[vllm]==0.9.1, vllm 0.24.0).
#   bash scripts/gpu_smoke.sh [--size tiny|0.6b] [--steps N] [--prompts N] [--out DIR] [--gpus N]
#                             [--eval-problems N (default 4; 0 skips)] [--eval-model DIR] [--skip-train]
#                             [--cases a,b,c] [--list] [--timeout S (per verl run, default 1800: a hung run FAILs)]
#                             [--memory-layers 2,4 (paper_memory)]
# CPU rehearsal of the same cases (vLLM's CPU build, fp32, tiny lengths; tp2 and remove_padding SKIP):
#   PYTHON=.venv-vllm/bin/python bash scripts/gpu_smoke.sh --cpu     # .venv-vllm: scripts/setup_venv_vllm.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python}"
export PYTHONHASHSEED=0 TOKENIZERS_PARALLELISM=false WANDB_MODE=disabled HF_HUB_OFFLINE=1
exec "$PY" scripts/gpu_smoke.py "$@"
