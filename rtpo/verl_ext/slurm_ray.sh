#!/usr/bin/env bash
# Start a Ray cluster on the current Slurm allocation, run a command against it, tear it down.
#
#   usage (inside an allocation, on its first node):  slurm_ray.sh <command> [args...]
#   e.g.  slurm_ray.sh python -m verl.trainer.main_ppo trainer.nnodes=2 ...
#
# `rtpo train --engine verl` calls this when SLURM_JOB_ID is set. One Ray head on the first node of
# $SLURM_JOB_NODELIST and one Ray worker on every other node, each started by `srun --overlap`
# (so it also works inside the job step Snakemake's Slurm executor runs the rule in). The command
# then runs here with RAY_ADDRESS=<head address>:<port>, so verl's ray.init() joins the cluster; its
# exit status is this script's.
#
# Head address. `hostname --ip-address` is not used: it resolves the host name, which on
# Debian-style /etc/hosts gives 127.0.1.1, and elsewhere may give an address on a network the
# other nodes do not share. Instead this asks the kernel, on the head node itself (one
# `srun -w <head>` step), which source address it would use to reach the second node of the
# allocation: `ip -4 -o route get <second node's address as the head resolves it>` -> its `src`.
# That is the address of the interface that reaches the other nodes, whatever the host name maps
# to. With one node the route taken is the default one (to 192.0.2.1, a documentation address; no
# packet is sent). Without `ip`, the first of `hostname -I`; on one node, failing all, 127.0.0.1.
# RTPO_RAY_IFACE=<dev> takes the first IPv4 address of that interface instead (e.g. ib0, to put
# Ray on InfiniBand); RTPO_RAY_HEAD_IP=<addr> skips the probe and is taken as given. With more
# than one node a probed loopback address (127.x) is refused, exit 2: the workers could not reach
# it. On one node it is fine.
#
# Ports. Two jobs sharing a node must not both take Ray's fixed default ports, so they come from
# the job id: port P = 20000 + 3 * (SLURM_JOB_ID % 4000) for the head (GCS), P+1 for the Ray
# client server (default 10001) and P+2 for the dashboard agent's HTTP port (default 52365, on
# every node). That band, 20000-32001, keeps clear of Ray's worker ports (10002-19999, which the
# raylet checks are free before use), of Linux's ephemeral ports (32768-60999, where Ray's other
# ports -- node/object manager, agents' gRPC, metrics -- are picked at random) and of 6379/8265/10001.
# Job ids 4000 apart share ports. RTPO_RAY_PORT=<P> sets P (the others stay P+1, P+2).
#
# Environment (all optional):
#   RTPO_RAY_PORT       head port P (default from SLURM_JOB_ID, above); P+1, P+2 are used too
#   RTPO_RAY_HEAD_IP    head address to use as given (default: probed on the head, above)
#   RTPO_RAY_IFACE      network interface whose IPv4 address the head uses (e.g. ib0)
#   RTPO_GPUS_PER_NODE  GPUs Ray may use per node (default: $SLURM_GPUS_ON_NODE, else 8)
#   RTPO_CPUS_PER_NODE  CPUs Ray may use per node (default: $SLURM_CPUS_ON_NODE, else all)
#   RTPO_RAY_WAIT       seconds to wait for all nodes to join (default 300)
#   RTPO_RAY_POLL       seconds between checks while waiting (default 5)
#   RTPO_RAY_TMPDIR     Ray's --temp-dir on the head (default: Ray's, /tmp/ray)
#   RAY_BIN             the `ray` executable (default: next to `python` on PATH); the wait for
#                       the nodes runs `$RAY_BIN status --address=<head>:<port>` and counts them
# Ray stops when its srun steps end (this script terminates them on exit); it never runs
# `ray stop`, which would stop every Ray instance on the node, not only this one.
set -euo pipefail

die() {
  echo "slurm_ray.sh: $*" >&2
  exit 2
}

if [[ -z "${SLURM_JOB_NODELIST:-}" ]]; then
  die "not inside a Slurm allocation (SLURM_JOB_NODELIST is unset)"
fi
if [[ $# -eq 0 ]]; then
  echo "usage: slurm_ray.sh <command> [args...]" >&2
  exit 2
fi

if [[ -n "${RTPO_RAY_PORT:-}" ]]; then
  PORT="$RTPO_RAY_PORT"
else
  JOB="${SLURM_JOB_ID:-0}"
  [[ "$JOB" =~ ^[0-9]+$ ]] || die "SLURM_JOB_ID=$JOB is not a number: set RTPO_RAY_PORT"
  PORT=$(( 20000 + 3 * (10#$JOB % 4000) ))
fi
if ! [[ "$PORT" =~ ^[0-9]+$ ]] || (( PORT < 1024 || PORT > 65533 )); then
  die "RTPO_RAY_PORT=$PORT is not a port in 1024-65533"
fi
CLIENT_PORT=$(( PORT + 1 ))
AGENT_PORT=$(( PORT + 2 ))
GPUS="${RTPO_GPUS_PER_NODE:-${SLURM_GPUS_ON_NODE:-8}}"
CPUS="${RTPO_CPUS_PER_NODE:-${SLURM_CPUS_ON_NODE:-}}"
WAIT="${RTPO_RAY_WAIT:-300}"
POLL="${RTPO_RAY_POLL:-5}"
RAY_BIN="${RAY_BIN:-$(dirname "$(command -v python || echo .)")/ray}"
[[ -x "$RAY_BIN" ]] || die "no Ray executable at $RAY_BIN (set RAY_BIN)"
mapfile -t NODES < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
NNODES=${#NODES[@]}
(( NNODES > 0 )) || die "scontrol show hostnames $SLURM_JOB_NODELIST gave no nodes"
HEAD="${NODES[0]}"

# Runs on the head node: the IPv4 address it reaches node $2 from (or the first of interface $1).
head_ip_probe() {
  local iface="$1" peer="$2" target="" addr=""
  if [[ -n "$iface" ]]; then
    ip -4 -o addr show dev "$iface" | awk '{sub(/\/.*/, "", $4); print $4; exit}'
    return
  fi
  [[ -n "$peer" ]] && target="$(getent ahostsv4 "$peer" | awk '{print $1; exit}')"
  addr="$(ip -4 -o route get "${target:-192.0.2.1}" 2>/dev/null |
          awk '{for (i = 1; i < NF; i++) if ($i == "src") {print $(i + 1); exit}}')"
  [[ -n "$addr" ]] || addr="$(hostname -I 2>/dev/null | awk '{print $1}')"
  echo "$addr"
}
is_loopback() { [[ "$1" == 127.* || "$1" == ::1 || "$1" == localhost ]]; }

if [[ -n "${RTPO_RAY_HEAD_IP:-}" ]]; then
  HEAD_IP="$RTPO_RAY_HEAD_IP"
  HOW="RTPO_RAY_HEAD_IP"
else
  HEAD_IP="$(srun --overlap --nodes=1 --ntasks=1 -w "$HEAD" \
               bash -c "$(declare -f head_ip_probe); head_ip_probe \"\$1\" \"\$2\"" head_ip_probe \
               "${RTPO_RAY_IFACE:-}" "${NODES[1]:-}" | awk 'NF {print $1; exit}')" \
    || die "could not run the address probe on the head node $HEAD (srun failed); set RTPO_RAY_HEAD_IP"
  HOW="${RTPO_RAY_IFACE:+interface $RTPO_RAY_IFACE}"
  HOW="${HOW:-${NODES[1]:+route to }${NODES[1]:-default route}}"
  if [[ -z "$HEAD_IP" ]] && (( NNODES == 1 )); then
    HEAD_IP=127.0.0.1 HOW="no address found; one node"
  fi
  [[ -n "$HEAD_IP" ]] || die "found no IPv4 address for the head node $HEAD (${HOW}); set RTPO_RAY_HEAD_IP"
  if (( NNODES > 1 )) && is_loopback "$HEAD_IP"; then
    die "the head node $HEAD has the loopback address $HEAD_IP (${HOW}), which the other" \
        "$(( NNODES - 1 )) node(s) cannot reach; set RTPO_RAY_HEAD_IP to its address on the cluster" \
        "network, or RTPO_RAY_IFACE to the interface that carries it (e.g. ib0 or eth0)"
  fi
fi
ADDRESS="${HEAD_IP}:${PORT}"
CPU_ARG=()
[[ -n "$CPUS" ]] && CPU_ARG=(--num-cpus "$CPUS")
TMP_ARG=()
[[ -n "${RTPO_RAY_TMPDIR:-}" ]] && TMP_ARG=(--temp-dir "$RTPO_RAY_TMPDIR")

PIDS=()
cleanup() {
  for pid in ${PIDS[@]+"${PIDS[@]}"}; do kill "$pid" 2>/dev/null || true; done  # SIGTERM: `ray start --block` shuts down
  wait 2>/dev/null || true
}
trap cleanup EXIT

# Live nodes the head reports: `ray status` lists each as " 1 node_<id>" under Active: or Idle:
# (0 while the head does not answer).
ray_nodes() {
  { "$RAY_BIN" status --address="$ADDRESS" 2>/dev/null || true; } |
    awk '/^(Active|Idle):/ {s = 1; next} /^[^ ]/ {s = 0} s && NF == 2 && $1 ~ /^[0-9]+$/ {n += $1} END {print n + 0}'
}
wait_for_nodes() {  # $1: how many
  local deadline=$(( $(date +%s) + WAIT )) pid
  until (( $(ray_nodes) >= $1 )); do
    for pid in "${PIDS[@]}"; do
      if ! kill -0 "$pid" 2>/dev/null; then
        echo "slurm_ray.sh: a Ray node's srun step exited before the cluster was up (see its output above)" >&2
        exit 3
      fi
    done
    if (( $(date +%s) > deadline )); then
      echo "slurm_ray.sh: the Ray cluster did not reach $1 node(s) within ${WAIT}s ($ADDRESS)" >&2
      exit 3
    fi
    sleep "$POLL"
  done
}

echo "slurm_ray.sh: head $HEAD ($ADDRESS, from ${HOW}), $NNODES node(s), $GPUS GPU(s) per node," \
     "ports $PORT-$AGENT_PORT"
srun --overlap --nodes=1 --ntasks=1 -w "$HEAD" \
  "$RAY_BIN" start --head --node-ip-address="$HEAD_IP" --port="$PORT" --ray-client-server-port="$CLIENT_PORT" \
  --dashboard-agent-listen-port="$AGENT_PORT" --num-gpus="$GPUS" ${CPU_ARG[@]+"${CPU_ARG[@]}"} \
  ${TMP_ARG[@]+"${TMP_ARG[@]}"} --include-dashboard=false --disable-usage-stats --block &
PIDS+=($!)
wait_for_nodes 1  # the head answers: the workers can join
for node in "${NODES[@]:1}"; do
  srun --overlap --nodes=1 --ntasks=1 -w "$node" \
    "$RAY_BIN" start --address="$ADDRESS" --dashboard-agent-listen-port="$AGENT_PORT" --num-gpus="$GPUS" \
    ${CPU_ARG[@]+"${CPU_ARG[@]}"} --block &
  PIDS+=($!)
done
wait_for_nodes "$NNODES"
echo "slurm_ray.sh: Ray cluster up; running: $*"

export RAY_ADDRESS="$ADDRESS"
set +e
"$@"
rc=$?
set -e
exit $rc
