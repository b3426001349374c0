#!/usr/bin/env bash
# The paper, rehearsed end to end on a CPU (docs/rehearsal.md): config/rehearsal.yaml (config/paper.yaml with
# only sizes changed) through the paper's own command, `snakemake --profile slurm`, with the real
# snakemake-executor-plugin-slurm against the project's fake Slurm (tests/fake_slurm: sbatch runs the batch
# script on this machine and enforces --time / --signal, srun enforces its options), slurm_ray.sh starting
# a real Ray head, verl's trainer with vLLM's CPU build for every method and ablation arm, evaluation
# through vLLM servers, then the tables, figures and claim ledger; it ends with scripts/pipeline.sh's
# one-screen summary.
#
#   bash scripts/rehearse.sh                 # from a fresh clone: sets up .venv and .venv-vllm first
#   bash scripts/rehearse.sh --until evaluate_run  # extra arguments go to snakemake (targets first)
#   REHEARSAL_SLICE=ci bash scripts/rehearse.sh    # the part CI runs: math, every method, one arm per study
#   REHEARSAL_PILOT=0 bash scripts/rehearse.sh     # without the pilot invocation (its jobs still run in the DAG)
#
# Results go where the paper's go (results/, figures/); the fake Slurm's records (every sbatch/srun call,
# each job's state, limit and signals) to results/rehearsal/slurm, each job's log to results/rehearsal/logs.
# The exit status is Snakemake's.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_venv.sh        # the summary's and the model builder's environment
bash scripts/setup_venv_vllm.sh   # verl + vLLM's CPU build: the jobs' environment (Snakemake runs in it)
export PYTHONHASHSEED=0 TOKENIZERS_PARALLELISM=false WANDB_MODE=disabled HF_HUB_OFFLINE=1
PY=.venv-vllm/bin/python
CONFIG="${REHEARSAL_CONFIG:-config/rehearsal.yaml}"
start=$(date +%s)

# 1. The stand-in for Qwen3-8B, made offline at the config's model.path (the base_model rule then reads
#    it as it reads the downloaded Qwen3-8B): a tiny Qwen3 with this repo's tokenizer, warm-started on the
#    embedded tasks' expert demonstrations so that it calls tools and the episodes run to several turns.
model_path="$($PY -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["model"]["path"])' "$CONFIG")"
if [[ ! -f "$model_path/config.json" ]]; then
  echo "[rehearse] the stand-in model -> $model_path"
  $PY scripts/rehearsal_model.py --out "$model_path"
fi

# 2. The fake Slurm on PATH. Its state lives under results/, so a rerun sees the jobs of the last one.
export PATH="$PWD/tests/fake_slurm:$PATH"
export FAKE_SLURM_DIR="$PWD/results/rehearsal/slurm"
mkdir -p "$FAKE_SLURM_DIR"
export RTPO_SLURM_ACCOUNT=rehearsal FAKE_SLURM_ACCOUNT=rehearsal RTPO_SLURM_PARTITION=cpu RTPO_SLURM_GPU_PARTITION=gpu
# The fake Slurm has one node, this machine: Ray's head binds the loopback address, so no Ray traffic
# leaves it (slurm_ray.sh would otherwise probe the default route's source address).
export RTPO_RAY_HEAD_IP="${RTPO_RAY_HEAD_IP:-127.0.0.1}"
export RTPO_RAY_POLL=1            # slurm_ray.sh polls the Ray head every second (default 5): start-up counts here

# 3. The paper's commands (./slurm is the site profile; Snakemake adds the workflow profile,
#    workflow/profiles/default, by itself), on the rehearsal config. Every fake node is this machine:
#    --jobs 1 (REHEARSAL_JOBS) keeps one job in flight instead of the profile's 40 (a training job holds
#    ~9 GB RSS: Ray, a vLLM server and its engine, the FSDP workers; two at once hit Ray's OOM killer on 23 GB); the status checks poll every second, not every 40 s. REHEARSAL_SLICE=ci: math with
#    every method and the credit-assignment study's RTPO-CA arm (psi = full), evaluated (.ci/run).
#    First the pilot (docs/cluster.md): here one cell (rtpo/math: its seed-0 run's first step, which the
#    training job then resumes) and one task (math: the first shard of vanilla's evaluation), not every cell
#    and task as on a cluster -- each piloted cell costs a Slurm job's start-up, which the ~90-minute
#    rehearsal cannot pay 18 times; then `rtpo check-config` sizing the DAG from it (results/rehearsal/).
targets=()
if [[ "${REHEARSAL_SLICE:-}" == ci ]]; then
  for m in vanilla grpo tree_grpo arpo seeupo rtpo; do targets+=("results/eval/math/$m/seed0.json"); done
  targets+=(results/ablations/credit_assignment/psi-full/math/rtpo_ca/eval_seed0.json)
fi
snakemake_slurm() {  # the paper's command on the rehearsal config; sets rc
  set +e
  $PY -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])' \
    .venv-vllm/bin/snakemake --profile slurm "$@" --configfile "$CONFIG" \
    --jobs "${REHEARSAL_JOBS:-1}" --slurm-init-seconds-before-status-checks 1 --seconds-between-status-checks 1 \
    --latency-wait 5 &
  pid=$!
  trap 'kill -TERM "$pid" 2>/dev/null || true' TERM HUP
  trap ':' INT
  rc=0
  wait "$pid" || rc=$?
  while kill -0 "$pid" 2>/dev/null; do rc=0; wait "$pid" || rc=$?; done
  trap - TERM HUP INT
  set -e
}
rc=0
if [[ "${REHEARSAL_PILOT:-1}" == 1 ]]; then
  snakemake_slurm pilot "$@"
  if [[ "$rc" == 0 ]]; then
    mkdir -p results/rehearsal
    for c in "$CONFIG" config/paper.yaml; do  # the rehearsal sized from its pilot; the paper from constants
      out="results/rehearsal/check-config.$(basename "$c" .yaml).txt"
      .venv-vllm/bin/rtpo check-config --config "$c" > "$out" 2>&1 || true
      echo "[rehearse] rtpo check-config --config $c (full table: $out):" >&2
      grep -E "^(sizing|DAG): " "$out" >&2 || tail -3 "$out" >&2
    done
  fi
fi
if [[ "$rc" == 0 ]]; then
  snakemake_slurm ${targets[@]+"${targets[@]}"} "$@"
fi
.venv-vllm/bin/rtpo report summary --start "$start" --rc "$rc" -- "$@" --configfile "$CONFIG" >&2 || true
.venv-vllm/bin/python scripts/rehearsal_report.py --slurm "$FAKE_SLURM_DIR" --out results/rehearsal --since "$start" >&2 || true
exit "$rc"
