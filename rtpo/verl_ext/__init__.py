"""rtpo's verl backend (GPU clusters: verl 0.9.1 + vLLM + FSDP; a CPU harness for tests).

Modules (importing this package imports none of them, so `rtpo` stays light):
  plugin        what ``VERL_USE_EXTERNAL_MODULES`` loads in every verl process: registers the
                agent loop and the trainers
  agent_loop    `RTPOAgentLoop`: rtpo envs + tool parser + psi as a verl AgentLoopBase
  server_engine `ServerEngine`: rtpo's Roller sampling through verl's LLM server client
  trainer       the V1 trainer modes: "rtpo_engine_sync" (every local method, RTPO included, on
                `VerlEngine`), "rtpo_chain_sync" (GRPO on verl's own pipeline)
  engine        `VerlEngine`: rtpo's engine seam (PolicyEngine) inside a verl trainer process
  entropy       entropy with gradients without verl's whole-function recompute (Tree-GRPO's bonus)
  data, reward  task files -> verl parquet datasets; the reward hook verl resolves (rewards come from the envs)
  launch        `rtpo train --engine verl`: config -> Hydra overrides -> verl's main_ppo (local or Slurm)
  eval_servers  `rtpo evaluate --engine verl`: evaluation on verl's rollout servers in standalone mode
  startup       `rtpo check-config`: the start-up arithmetic of every cell, over budget (memory, disk and
                run-time estimates) and gpu_env (what the GPU environment spec installs)
  vllm_keep     the rollout "vllm_keep": vLLM servers that keep their weights across sleep (level 1)
  cpu           the CPU harness's plugin (``VERL_USE_EXTERNAL_MODULES=rtpo.verl_ext.cpu,...``): registers
                the harness of the subpackage cpu_harness (platform "cpu", rollouts "hf" and "hf_keep",
                vLLM's CPU build, the toy env factory): what runs verl's real trainer in the tests
See docs/verl.md.
"""

VERL_VERSION = "0.9.1"  # the exact verl release this plugin is written and tested against
PLUGIN_MODULES = "rtpo.verl_ext.plugin"
CPU_MODULES = "rtpo.verl_ext.cpu,rtpo.verl_ext.plugin"  # the platform first: later imports query it
# rollout -> its variant whose servers keep their weights across sleep (vLLM sleep level 1 instead of 2):
# what RTPO's lagging sync modes (interval:N, kl:tau) sample from (launch, engine, trainer)
KEEP_WEIGHTS_ROLLOUT = {"vllm": "vllm_keep", "hf": "hf_keep"}


def rollout_keeps_weights(name: str) -> bool:
    """Whether the servers of rollout `name` keep their weights across sleep (the `*_keep` variants)."""
    return str(name) in KEEP_WEIGHTS_ROLLOUT.values()
