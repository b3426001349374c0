#!/usr/bin/env bash
# Start a Ray cluster on the current Slurm allocation, run a command against it, tear it down.
#
#   usage (inside an allocation, on its first node):  slurm_ray.sh <command> [args...]
#   e.g.  slurm_ray.sh python -m verl.trainer.main_ppo trainer.nnodes=2 ...
#
# `rtpo train --engine verl` calls this when SLURM_JOB_ID is set. Inside a job (a batch script or a
# job step: SLURMD_NODENAME set), the Ray head runs here, on this node, without srun: it shares this
# process's step and so sees the GPUs and CPUs Slurm gave it (CUDA_VISIBLE_DEVICES). From a shell
# outside the nodes (salloc's shell on the login node) it runs on the first node of the allocation
# in a step of its own, started like a worker's. One Ray worker runs on every other node, each in its
# own `srun --overlap --nodes=1 --ntasks=1 -w <node>` step that asks for that node's GPUs
# (--gres=gpu:<n>), CPUs (--cpus-per-task) and memory (--mem=0: all the job's memory there);
# --overlap lets it share the node with the steps already running. Those steps run with the SLURM_*
# variables of this job step removed (as the Slurm jobstep executor runs its own srun), since srun
# reads SLURM_NTASKS, SLURM_NNODES, SLURM_GPUS... as defaults of its options and the job's values
# (--gpus=16) conflict with a one-node step's. The command then runs here with
# RAY_ADDRESS=<head address>:<port>, so verl's ray.init() joins the cluster; its exit status is
# this script's.
#
# Where it runs. With one node, Snakemake's jobstep executor runs the job in
# `srun -n1 --gpus=<gpu> --nodes=1`: that step holds the node's GPUs and the head inherits them. A
# nested `srun --overlap -N1 -n1` without a GPU option (what this script used to start the head
# with) may get no GPU, depending on the Slurm version and its GRES/cgroup settings. With several
# nodes that jobstep line (`srun -n1 --nodes=2`) cannot be placed, so the profile sets `mpi` on the
# training rules: the jobstep executor then runs the job in the batch script itself, on the first
# node of the allocation, which holds that node's GPUs. The nodes are SLURM_JOB_NODELIST, or, when
# the jobstep executor has removed it, `scontrol show job $SLURM_JOB_ID`'s NodeList. The head is
# the node this runs on ($SLURMD_NODENAME), else the first node. When the head runs here and
# CUDA_VISIBLE_DEVICES lists fewer GPUs than Ray is to be told (below), the script stops (exit 2)
# rather than start Ray on GPUs it cannot use.
#
# Head address. `hostname --ip-address` is not used: it resolves the host name, which on
# Debian-style /etc/hosts gives 127.0.1.1, and elsewhere may give an address on a network the
# other nodes do not share. Instead this asks the kernel, on the head node itself (here, or in an
# `srun -w <head>` step from outside the nodes), which source address it would use to reach the
# first other node of the allocation: `ip -4 -o route get <second node's address as the head resolves it>` -> its `src`.
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
#   RTPO_GPUS_PER_NODE  GPUs Ray may use per node, and each worker's step asks for (default:
#                       $SLURM_GPUS_ON_NODE, else as many as CUDA_VISIBLE_DEVICES lists, else 8)
#   RTPO_CPUS_PER_NODE  CPUs Ray may use per node, and each worker's step asks for (default:
#                       $SLURM_CPUS_ON_NODE, else the first count of $SLURM_JOB_CPUS_PER_NODE, else
#                       with the head here `nproc`, i.e. the CPUs this step holds; else Ray's own)
#   RTPO_RAY_WAIT       seconds to wait for all nodes to join (default 300)
#   RTPO_RAY_POLL       seconds between checks while waiting (default 5)
#   RTPO_RAY_TMPDIR     Ray's --temp-dir on the head (default: Ray's, /tmp/ray)
#   RAY_BIN             the `ray` executable (default: next to `python` on PATH); the wait for
#                       the nodes runs `$RAY_BIN status --address=<head>:<port>` and counts them
# Ray stops when the head and the workers' srun steps end (this script terminates them on exit); it never runs
# `ray stop`, which would stop every Ray instance on the node, not only this one.
set -euo pipefail

die() {
  echo "slurm_ray.sh: $*" >&2
  exit 2
}

if [[ -z "${SLURM_JOB_NODELIST:-}" && -z "${SLURM_JOB_ID:-}" ]]; then
  die "not inside a Slurm allocation (SLURM_JOB_NODELIST and SLURM_JOB_ID are unset)"
fi
if [[ $# -eq 0 ]]; then
  echo "usage: slurm_ray.sh <command> [args...]" >&2
  exit 2
fi
NODELIST="${SLURM_JOB_NODELIST:-}"
if [[ -z "$NODELIST" ]]; then  # the jobstep executor removes it: ask the controller
  NODELIST="$(scontrol -o show job "$SLURM_JOB_ID" 2>/dev/null | tr ' ' '\n' | sed -n 's/^NodeList=//p' | head -n1)" || true
  [[ -n "$NODELIST" && "$NODELIST" != "(null)" ]] \
    || die "not inside a Slurm allocation (SLURM_JOB_NODELIST is unset and \`scontrol show job $SLURM_JOB_ID\` names no nodes)"
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
VISIBLE=""  # GPUs this step holds, as CUDA_VISIBLE_DEVICES lists them (empty: not set)
if [[ -n "${CUDA_VISIBLE_DEVICES+x}" ]]; then
  VISIBLE=0
  [[ -n "$CUDA_VISIBLE_DEVICES" && "$CUDA_VISIBLE_DEVICES" != NoDevFiles ]] && VISIBLE=$(tr ',' '\n' <<<"$CUDA_VISIBLE_DEVICES" | grep -c .)
fi
HERE="${SLURMD_NODENAME:-}"  # the node this runs on, when it runs on one of the allocation's
GPUS="${RTPO_GPUS_PER_NODE:-${SLURM_GPUS_ON_NODE:-${VISIBLE:-8}}}"
JOB_CPUS="${SLURM_JOB_CPUS_PER_NODE:-}"  # e.g. 64(x2): 64 on each of 2 nodes
CPUS="${RTPO_CPUS_PER_NODE:-${SLURM_CPUS_ON_NODE:-${JOB_CPUS%%[!0-9]*}}}"
[[ -z "$CPUS" && -n "$HERE" ]] && CPUS="$(nproc 2>/dev/null || true)"
[[ "$GPUS" =~ ^[0-9]+$ ]] || die "GPUs per node '$GPUS' is not a number (RTPO_GPUS_PER_NODE / SLURM_GPUS_ON_NODE)"
if [[ -n "$HERE" && -n "$VISIBLE" ]] && (( VISIBLE < GPUS )); then
  die "this job step sees $VISIBLE GPU(s) (CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES}), but Ray would be told" \
      "$GPUS per node: run it in a step that holds the node's GPUs (the workflow profile's gpu / nodes / mpi, slurm/README.md)," \
      "or set RTPO_GPUS_PER_NODE"
fi
WAIT="${RTPO_RAY_WAIT:-300}"
POLL="${RTPO_RAY_POLL:-5}"
RAY_BIN="${RAY_BIN:-$(dirname "$(command -v python || echo .)")/ray}"
# Ray token authentication: `ray start` turns it on by itself when a token exists (~/.ray/auth_token, which
# any earlier local `ray.init()` writes), but `ray status` and a joining driver take the mode only from
# RAY_AUTH_MODE, so without this the wait below is refused ("InvalidAuthToken") and times out. One mode for
# the head, the workers (srun exports the environment), the wait and the driver: the user's, else token
# when a token is there to use.
if [[ -z "${RAY_AUTH_MODE:-}" ]] && { [[ -n "${RAY_AUTH_TOKEN:-}" ]] \
     || [[ -s "${RAY_AUTH_TOKEN_PATH:-${HOME:-/nonexistent}/.ray/auth_token}" ]]; }; then
  export RAY_AUTH_MODE=token
fi
[[ -x "$RAY_BIN" ]] || die "no Ray executable at $RAY_BIN (set RAY_BIN)"
mapfile -t NODES < <(scontrol show hostnames "$NODELIST")
NNODES=${#NODES[@]}
(( NNODES > 0 )) || die "scontrol show hostnames $NODELIST gave no nodes"
# The head is this node (or the first, from outside the nodes); the workers are the others.
HEAD="${HERE:-${NODES[0]}}"
SELF=-1
for i in "${!NODES[@]}"; do
  if [[ "${NODES[$i]}" == "$HEAD" ]]; then SELF=$i; break; fi
done
(( SELF >= 0 )) || die "this node ($HEAD, SLURMD_NODENAME) is not in the allocation's nodes ($NODELIST)"
WORKERS=()
for i in "${!NODES[@]}"; do
  (( i == SELF )) || WORKERS+=("${NODES[$i]}")
done

# Steps on other nodes (the workers; the head from outside the nodes): this step's SLURM_* removed
# but for the job's identity (srun reads the others as option defaults), then exactly one task on
# one node with that node's GPUs, CPUs and memory.
STEP_ENV=(env)
while IFS= read -r var; do
  case "$var" in
    SLURM_JOB_ID|SLURM_JOBID|SLURM_CONF|SLURM_CLUSTER_NAME|SLURM_SUBMIT_DIR|SLURM_SUBMIT_HOST|SLURM_ARRAY_*) ;;
    SLURM_*|SRUN_*|SBATCH_*) STEP_ENV+=(-u "$var") ;;
  esac
done < <(compgen -e)
STEP_ARG=(--overlap --nodes=1 --ntasks=1)
(( GPUS > 0 )) && STEP_ARG+=(--gres="gpu:$GPUS")
[[ -n "$CPUS" ]] && STEP_ARG+=(--cpus-per-task="$CPUS")
STEP_ARG+=(--mem=0)

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
  if [[ -n "$HERE" ]]; then
    HEAD_IP="$(head_ip_probe "${RTPO_RAY_IFACE:-}" "${WORKERS[0]:-}" | awk 'NF {print $1; exit}')"
  else
    HEAD_IP="$("${STEP_ENV[@]}" srun --overlap --nodes=1 --ntasks=1 -w "$HEAD" \
                 bash -c "$(declare -f head_ip_probe); head_ip_probe \"\$1\" \"\$2\"" head_ip_probe \
                 "${RTPO_RAY_IFACE:-}" "${WORKERS[0]:-}" | awk 'NF {print $1; exit}')" \
      || die "could not run the address probe on the head node $HEAD (srun failed); set RTPO_RAY_HEAD_IP"
  fi
  HOW="${RTPO_RAY_IFACE:+interface $RTPO_RAY_IFACE}"
  HOW="${HOW:-${WORKERS[0]:+route to }${WORKERS[0]:-default route}}"
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
  # `ray start --head` records its address in <temp dir>/ray_current_cluster and nothing removes it: a later
  # local ray.init() on this node (verl's, with num_cpus) would then try to join this finished cluster and
  # fail ("When connecting to an existing cluster, num_cpus and num_gpus must not be provided"). Ours only.
  local rec="${RTPO_RAY_TMPDIR:-/tmp/ray}/ray_current_cluster"
  if [[ -f "$rec" ]] && grep -q ":${PORT}\$" "$rec" 2>/dev/null; then rm -f "$rec"; fi
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
        echo "slurm_ray.sh: a Ray node (the head, or a worker's srun step) exited before the cluster was up (see its output above)" >&2
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

echo "slurm_ray.sh: head $HEAD ($ADDRESS, from ${HOW}), $NNODES node(s), $GPUS GPU(s) per node" \
     "(${HERE:+the head here, CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-unset}}${HERE:-the head in an srun step}), ports $PORT-$AGENT_PORT"
ON_HEAD=()  # here: nothing; from outside the nodes: a step on the head node
[[ -n "$HERE" ]] || ON_HEAD=("${STEP_ENV[@]}" srun "${STEP_ARG[@]}" -w "$HEAD")
${ON_HEAD[@]+"${ON_HEAD[@]}"} \
  "$RAY_BIN" start --head --node-ip-address="$HEAD_IP" --port="$PORT" --ray-client-server-port="$CLIENT_PORT" \
  --dashboard-agent-listen-port="$AGENT_PORT" --num-gpus="$GPUS" ${CPU_ARG[@]+"${CPU_ARG[@]}"} \
  ${TMP_ARG[@]+"${TMP_ARG[@]}"} --include-dashboard=false --disable-usage-stats --block &
PIDS+=($!)
wait_for_nodes 1  # the head answers: the workers can join
for node in ${WORKERS[@]+"${WORKERS[@]}"}; do
  "${STEP_ENV[@]}" srun "${STEP_ARG[@]}" -w "$node" \
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
