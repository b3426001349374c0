#!/usr/bin/env bash
# Start a Ray cluster on the current Slurm allocation, run a command against it, tear it down.
#
#   usage (inside an allocation, on its first node):  slurm_ray.sh <command> [args...]
#   e.g.  slurm_ray.sh python -m verl.trainer.main_ppo trainer.nnodes=2 ...
#
# `rtpo train --engine verl` calls this when SLURM_JOB_ID is set. One Ray head on the first node of
# $SLURM_JOB_NODELIST and one Ray worker on every other node, each started by `srun --overlap`
# (so it also works inside the job step Snakemake's Slurm executor runs the rule in). The command
# then runs here with RAY_ADDRESS pointing at the head, so verl's ray.init() joins the cluster.
#
# Environment (all optional):
#   RTPO_RAY_PORT       head port (default 6379)
#   RTPO_GPUS_PER_NODE  GPUs Ray may use per node (default: $SLURM_GPUS_ON_NODE, else 8)
#   RTPO_CPUS_PER_NODE  CPUs Ray may use per node (default: $SLURM_CPUS_ON_NODE, else all)
#   RTPO_RAY_WAIT       seconds to wait for all nodes to join (default 300)
#   RTPO_RAY_TMPDIR     Ray's --temp-dir on the head (default: Ray's, /tmp/ray)
#   RAY_BIN             the `ray` executable (default: next to `python` on PATH)
# Ray stops when its srun steps end (this script terminates them on exit); it never runs
# `ray stop`, which would stop every Ray instance on the node, not only this one.
set -euo pipefail

if [[ -z "${SLURM_JOB_NODELIST:-}" ]]; then
  echo "slurm_ray.sh: not inside a Slurm allocation (SLURM_JOB_NODELIST is unset)" >&2
  exit 2
fi
if [[ $# -eq 0 ]]; then
  echo "usage: slurm_ray.sh <command> [args...]" >&2
  exit 2
fi

PORT="${RTPO_RAY_PORT:-6379}"
GPUS="${RTPO_GPUS_PER_NODE:-${SLURM_GPUS_ON_NODE:-8}}"
CPUS="${RTPO_CPUS_PER_NODE:-${SLURM_CPUS_ON_NODE:-}}"
WAIT="${RTPO_RAY_WAIT:-300}"
RAY_BIN="${RAY_BIN:-$(dirname "$(command -v python)")/ray}"
mapfile -t NODES < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
NNODES=${#NODES[@]}
HEAD="${NODES[0]}"
HEAD_IP="$(srun --overlap --nodes=1 --ntasks=1 -w "$HEAD" hostname --ip-address | awk '{print $1}')"
ADDRESS="${HEAD_IP}:${PORT}"
CPU_ARG=()
[[ -n "$CPUS" ]] && CPU_ARG=(--num-cpus "$CPUS")
TMP_ARG=()
[[ -n "${RTPO_RAY_TMPDIR:-}" ]] && TMP_ARG=(--temp-dir "$RTPO_RAY_TMPDIR")

PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done  # SIGTERM: `ray start --block` shuts down
  wait 2>/dev/null || true
}
trap cleanup EXIT

echo "slurm_ray.sh: head $HEAD ($ADDRESS), $NNODES node(s), $GPUS GPU(s) per node"
srun --overlap --nodes=1 --ntasks=1 -w "$HEAD" \
  "$RAY_BIN" start --head --node-ip-address="$HEAD_IP" --port="$PORT" --num-gpus="$GPUS" ${CPU_ARG[@]+"${CPU_ARG[@]}"} \
  ${TMP_ARG[@]+"${TMP_ARG[@]}"} --include-dashboard=false --disable-usage-stats --block &
PIDS+=($!)
sleep 5
for node in "${NODES[@]:1}"; do
  srun --overlap --nodes=1 --ntasks=1 -w "$node" \
    "$RAY_BIN" start --address="$ADDRESS" --num-gpus="$GPUS" ${CPU_ARG[@]+"${CPU_ARG[@]}"} --block &
  PIDS+=($!)
done

# Wait until every node has joined.
deadline=$(( $(date +%s) + WAIT ))
until python - "$ADDRESS" "$NNODES" <<'EOF'
import sys, ray
ray.init(address=sys.argv[1], logging_level="ERROR")
alive = sum(1 for n in ray.nodes() if n["Alive"])
ray.shutdown()
sys.exit(0 if alive >= int(sys.argv[2]) else 1)
EOF
do
  if (( $(date +%s) > deadline )); then
    echo "slurm_ray.sh: the Ray cluster did not reach $NNODES node(s) within ${WAIT}s" >&2
    exit 3
  fi
  sleep 5
done
echo "slurm_ray.sh: Ray cluster up; running: $*"

export RAY_ADDRESS="$ADDRESS"
set +e
"$@"
rc=$?
set -e
exit $rc
