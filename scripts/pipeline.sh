#!/usr/bin/env bash
# README command 1: the whole DAG on the CPU default (config/config.yaml) in ./.venv.
# Extra arguments go to snakemake (e.g. `bash scripts/pipeline.sh tables`, `--configfile config/smoke.yaml`).
# After Snakemake ends, a one-screen summary on stderr (`rtpo report summary`: jobs, wall time, where
# status.md, the tables and logs are; on a CPU-default run the verdict of `rtpo report compare
# --reference reference/cpu-default results/tables`). The exit status is Snakemake's, whatever the verdict.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_venv.sh
export PYTHONHASHSEED=0 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
# A local run schedules by cores alone: the cluster's per-rule resources (workflow/profiles/default, which
# Snakemake loads on every call) would only print as `mem=64 GB` in the job headers, so they stay out
# unless a profile is named (`--profile ...` / `--workflow-profile DIR`).
profile=(--workflow-profile none)
for a in "$@"; do
  case "$a" in --profile|--profile=*|--workflow-profile|--workflow-profile=*) profile=() ;; esac
done
start=$(date +%s)
# Snakemake runs in the background so that this script outlives it and can print the summary, and a
# SIGTERM / SIGHUP sent to this script reaches it (as `exec` did before). A background job of a script
# starts with SIGINT ignored; the python shim restores it, so Ctrl-C stops Snakemake as before.
.venv/bin/python -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])' \
  .venv/bin/snakemake --cores "${CORES:-2}" ${profile[@]+"${profile[@]}"} "$@" &
pid=$!
trap 'kill -TERM "$pid" 2>/dev/null || true' TERM HUP
trap ':' INT   # Ctrl-C reaches Snakemake directly (same process group); wait for it to wind down
rc=0
wait "$pid" || rc=$?
while kill -0 "$pid" 2>/dev/null; do rc=0; wait "$pid" || rc=$?; done
trap - TERM HUP INT
.venv/bin/rtpo report summary --start "$start" --rc "$rc" -- "$@" >&2 || true
exit "$rc"
