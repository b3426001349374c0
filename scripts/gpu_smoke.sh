#!/usr/bin/env bash
# One-command GPU smoke of the verl backend: vLLM rollout + FSDP2 actor, RTPO for 2 steps on a
# random Qwen3-0.6B-sized model (or --size tiny), printing per-stage ratio, KL and tokens/s; then a
# paper-config evaluation (config/paper.yaml: bf16, tensor parallel, max_model_len, K, 4096-token turns)
# of a handful of problems per task on vLLM (rtpo evaluate --engine verl), printing tokens/s per task.
# Needs a CUDA GPU and the GPU stack (pip install -e '.[gpu]': verl[vllm]==0.9.1, vllm 0.24.0).
#   bash scripts/gpu_smoke.sh [--size tiny|0.6b] [--steps N] [--prompts N] [--out DIR] [--gpus N]
#                             [--eval-problems N (default 4; 0 skips)] [--eval-model DIR] [--skip-train]
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python}"
export PYTHONHASHSEED=0 TOKENIZERS_PARALLELISM=false WANDB_MODE=disabled HF_HUB_OFFLINE=1
exec "$PY" -m rtpo.verl_ext.gpu_smoke "$@"
