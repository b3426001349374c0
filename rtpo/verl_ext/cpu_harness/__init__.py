"""The CPU harness: what runs verl's real trainer and rollout servers on a machine without a GPU, for
the tests and for `--engine verl` on a machine without one (rtpo.verl_ext.launch picks it). Never
used on a GPU cluster.

  cpu_platform  `PlatformCPU`, verl platform "cpu" (``VERL_PLATFORM=cpu``): device "cpu", backend gloo,
                Ray's logical GPU, a ``torch.cuda``-like device-module shim
  hf_rollout    the rollouts "hf" and "hf_keep": an in-process Hugging Face server behind verl's
                LLM server client (the CPU's stand-in for vLLM, sleep levels 2 and 1)
  vllm_cpu      vLLM's CPU build as the harness's rollout (the optional .venv-vllm) and the vLLM
                plugin that keeps linear layers on their live weights (pyproject entry point)
  toy           the toy env as a verl env factory (the tests' and the GPU smoke's)

verl loads the harness through the plugin module `rtpo.verl_ext.cpu` (``VERL_USE_EXTERNAL_MODULES=
rtpo.verl_ext.cpu,rtpo.verl_ext.plugin``), which imports cpu_platform and hf_rollout and registers
them. Importing this package imports none of its modules: the vLLM plugin, which vLLM loads in every
process it starts (GPU ones included), must not pull in verl or register the harness.
Rests on verl internals; pinned to verl==0.9.1 (docs/verl.md, "CPU harness").
"""
