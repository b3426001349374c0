#!/usr/bin/env bash
# README command 2: the whole test suite (slow tests included) in ./.venv.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_venv.sh
export PYTHONHASHSEED=0 TOKENIZERS_PARALLELISM=false WANDB_MODE=disabled HF_HUB_OFFLINE=1
# --durations=25: every run prints its 25 slowest tests (where the suite's time goes), unless the
# caller gives its own --durations
durations=(--durations=25)
for arg in "$@"; do
  [[ "$arg" == --durations || "$arg" == --durations=* ]] && durations=()
done
exec .venv/bin/python -m pytest -q ${durations[@]+"${durations[@]}"} "$@"
