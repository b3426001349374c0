"""The CPU harness's verl plugin.

Import through ``VERL_USE_EXTERNAL_MODULES=rtpo.verl_ext.cpu,rtpo.verl_ext.plugin`` (the platform first).

Registers the CPU platform (select it with ``VERL_PLATFORM=cpu``) and the in-process Hugging Face
rollouts "hf" / "hf_keep" (``actor_rollout_ref.rollout.name=hf``), both in the subpackage
`rtpo.verl_ext.cpu_harness`, whose plugin this is; `rtpo.verl_ext.cpu_harness.forced` lists the
Hydra overrides a CPU forces and `launch.verl_env` the environment the rest of verl needs on CPU (docs/verl.md, "CPU harness").

Two patches, applied only when the CPU platform is selected (the second, `_patch_pin_memory`, below): verl's
``utils.distributed.initialize_global_process_group_ray`` builds the backend string
``cpu:gloo,{device}:{backend}``, which on a CPU platform reads ``cpu:gloo,cpu:gloo`` and torch
rejects (duplicate device type). The wrapper passes plain ``gloo`` instead. verl imports this
module at the end of ``import verl``, before any worker module binds the function by name.
A test harness resting on verl internals, pinned to verl==0.9.1.
"""

from __future__ import annotations

import os
import sys

from rtpo.verl_ext.cpu_harness import cpu_platform as _cpu_platform
from rtpo.verl_ext.cpu_harness import hf_rollout as _hf_rollout

_hf_rollout.register()


def _patch_gloo_backend() -> None:
    import verl.utils.distributed as dist

    orig = dist.initialize_global_process_group_ray
    if getattr(orig, "_rtpo_cpu", False):
        return

    def initialize_global_process_group_ray(timeout_second=None, backend=None):
        return orig(timeout_second=timeout_second, backend=backend or "gloo")

    initialize_global_process_group_ray._rtpo_cpu = True  # type: ignore[attr-defined]
    dist.initialize_global_process_group_ray = initialize_global_process_group_ray
    for name in ("verl.workers.engine_workers", "verl.checkpoint_engine.base"):  # already bound by name?
        mod = sys.modules.get(name)
        if mod is not None and getattr(mod, "initialize_global_process_group_ray", None) is orig:
            mod.initialize_global_process_group_ray = initialize_global_process_group_ray


def _patch_pin_memory() -> None:
    """verl's FSDP2 engine gives the reference model ``CPUOffloadPolicy(pin_memory=True)`` (hard-coded in
    verl/workers/engine/fsdp/transformer_impl.py), and pinning host memory needs a CUDA driver on torch's
    CUDA build (the GPU stack's torch 2.11.0 in .venv-vllm): "Found no NVIDIA driver". Any run with a KL
    term (train.kl_coef > 0, as the paper's 0.02) builds that model. With no CUDA device, pinning has
    nothing to pin for: ``Tensor.pin_memory`` returns the tensor itself."""
    import torch

    if torch.cuda.is_available() or getattr(torch.Tensor.pin_memory, "_rtpo_cpu", False):
        return

    def pin_memory(self, *args, **kwargs):
        return self

    pin_memory._rtpo_cpu = True  # type: ignore[attr-defined]
    torch.Tensor.pin_memory = pin_memory


if os.environ.get("VERL_PLATFORM", "").strip().lower() == _cpu_platform.PLATFORM_NAME:
    _patch_gloo_backend()
    _patch_pin_memory()
