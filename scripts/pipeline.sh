#!/usr/bin/env bash
# README command 1: the whole DAG on the CPU default (config/config.yaml) in ./.venv.
# Extra arguments go to snakemake (e.g. `bash scripts/pipeline.sh tables`, `--configfile config/smoke.yaml`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_venv.sh
export PYTHONHASHSEED=0 TOKENIZERS_PARALLELISM=false WANDB_MODE=disabled HF_HUB_OFFLINE=1
exec .venv/bin/snakemake --cores "${CORES:-2}" "$@"
