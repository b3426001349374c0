"""What every verl process must import for rtpo (set ``VERL_USE_EXTERNAL_MODULES=rtpo.verl_ext.plugin``).

verl imports the modules named in ``VERL_USE_EXTERNAL_MODULES`` at the end of ``import verl`` in
every process (driver, TaskRunner, workers, agent-loop workers), which is where registries must be
filled. Importing this module registers:
  * the agent loop "rtpo_agent" (`agent_loop.py`);
  * the V1 trainer modes "rtpo_engine_sync" and "rtpo_chain_sync" (`trainer.py`);
  * the rollout "vllm_keep" (`vllm_keep.py`: vLLM servers that keep their weights across sleep; vLLM
    itself is imported only when such servers are launched);
and patches verl's ``verl.utils.torch_functional.entropy_from_logits_with_chunking`` with rtpo's
(`entropy.py`: same values; with gradients, chunked in backward too instead of verl's whole-function
recompute, which keeps 8 B x T x V of fp32 copies for Tree-GRPO's entropy bonus; upstream verl #2448).
Engines read that attribute when they are built, after ``import verl`` has run this module.
The CPU harness adds ``rtpo.verl_ext.cpu`` (a CPU platform and the rollouts "hf" / "hf_keep").
"""

from __future__ import annotations

from rtpo.verl_ext import entropy as _entropy
from rtpo.verl_ext import agent_loop as _agent_loop  # noqa: F401  (registers "rtpo_agent" on import)
from rtpo.verl_ext import vllm_keep as _vllm_keep

_vllm_keep.register()
_entropy.patch()

try:  # the trainer needs TransferQueue (verl[verl-core]); the estimators and agent loop do not
    from rtpo.verl_ext import trainer as _trainer  # noqa: F401  (registers the trainer modes on import)
except ImportError as _e:  # pragma: no cover - reported when the trainer is selected
    import logging

    logging.getLogger(__name__).warning("rtpo.verl_ext.trainer not registered: %s", _e)
