"""A CPU platform for verl's platform registry: the test harness that runs verl's real trainer on CPU.

verl 0.9.1 has no CPU training path (upstream issue verl-project/verl#3266). Selecting this platform
with ``VERL_PLATFORM=cpu`` (and importing this module through ``VERL_USE_EXTERNAL_MODULES``) gives:

* device "cpu", collective backend "gloo" (``utils/distributed.py`` builds
  ``cpu:gloo,{device}:{backend}``, i.e. ``cpu:gloo,cpu:gloo`` here, which torch accepts);
* ``current_device()`` == "cpu", so the FSDP2 engine's ``model.to(get_device_id())`` stays on CPU;
* Ray resource "GPU": the trainer's resource pools request one (logical) GPU per worker
  (``single_controller/ray/base.py`` hard-codes ``use_gpu=True``), so Ray must be started with
  ``+ray_kwargs.ray_init.num_gpus=1``; no CUDA is touched;
* a ``device_module`` shim for the ``torch.cuda``-style calls verl makes (memory statistics,
  streams, RNG state, ``empty_cache``), all no-ops or host-side equivalents.

This rests on verl internals (the platform ABC, device helpers); it is pinned to verl==0.9.1.
"""

from __future__ import annotations

import contextlib
import os
from types import ModuleType
from typing import Any, Optional

import torch

from verl.plugin.platform.platform_base import PlatformBase
from verl.plugin.platform.platform_manager import PlatformRegistry

PLATFORM_NAME = "cpu"


class _NullStream:
    """Stands in for torch.cuda.Stream / Event on CPU: every operation is immediate."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        pass

    def synchronize(self) -> None:
        pass

    def wait_stream(self, *a: Any) -> None:
        pass

    def wait_event(self, *a: Any) -> None:
        pass

    def record_event(self, *a: Any) -> "_NullStream":
        return self

    def record(self, *a: Any) -> None:
        pass

    def query(self) -> bool:
        return True

    def elapsed_time(self, other: Any) -> float:
        return 0.0


class CPUDeviceModule(ModuleType):
    """The subset of the ``torch.cuda`` API verl calls through ``get_torch_device()``, for CPU."""

    Stream = _NullStream
    Event = _NullStream

    def __init__(self) -> None:
        super().__init__("rtpo_cpu_device")

    # device selection ------------------------------------------------------------------------
    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def device_count() -> int:
        return 1

    @staticmethod
    def current_device() -> str:
        return "cpu"

    @staticmethod
    def set_device(device: Any) -> None:
        pass

    @staticmethod
    def get_device_name(device: Any = None) -> str:
        return "cpu"

    @staticmethod
    def synchronize(device: Any = None) -> None:
        pass

    # streams ---------------------------------------------------------------------------------
    @staticmethod
    def current_stream(device: Any = None) -> _NullStream:
        return _NullStream()

    @staticmethod
    def stream(s: Any = None):
        return contextlib.nullcontext()

    # memory ----------------------------------------------------------------------------------
    @staticmethod
    def empty_cache() -> None:
        pass

    @staticmethod
    def ipc_collect() -> None:
        pass

    @staticmethod
    def memory_allocated(device: Any = None) -> int:
        return 0

    @staticmethod
    def memory_reserved(device: Any = None) -> int:
        return 0

    @staticmethod
    def max_memory_allocated(device: Any = None) -> int:
        return 0

    @staticmethod
    def max_memory_reserved(device: Any = None) -> int:
        return 0

    @staticmethod
    def reset_peak_memory_stats(device: Any = None) -> None:
        pass

    @staticmethod
    def mem_get_info(device: Any = None) -> tuple[int, int]:
        import psutil

        vm = psutil.virtual_memory()
        return int(vm.available), int(vm.total)

    @staticmethod
    def set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
        pass

    # RNG ---------------------------------------------------------------------------------------
    @staticmethod
    def manual_seed(seed: int) -> None:
        torch.manual_seed(seed)

    @staticmethod
    def manual_seed_all(seed: int) -> None:
        torch.manual_seed(seed)

    @staticmethod
    def get_rng_state(device: Any = None) -> torch.Tensor:
        return torch.get_rng_state()

    @staticmethod
    def set_rng_state(state: torch.Tensor, device: Any = None) -> None:
        torch.set_rng_state(state)


_DEVICE_MODULE = CPUDeviceModule()


@PlatformRegistry.register(platform=PLATFORM_NAME)
class PlatformCPU(PlatformBase):
    """verl platform for CPU-only hosts (gloo collectives, logical Ray 'GPU' resources)."""

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> ModuleType:
        return _DEVICE_MODULE

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        # Never auto-detected: selected explicitly with VERL_PLATFORM=cpu.
        return os.environ.get("VERL_PLATFORM", "").strip().lower() == PLATFORM_NAME

    def current_device(self) -> str:  # type: ignore[override]
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        pass

    def synchronize(self, device_index: Optional[int] = None) -> None:
        pass

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        pass

    def empty_cache(self) -> None:
        pass

    def get_device_capability(self, device_index: int = 0) -> tuple[Optional[int], Optional[int]]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"

    @contextlib.contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        pass

    def profiler_stop(self) -> None:
        pass

    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_resource_options(self, num_gpus: float) -> dict[str, Any]:
        return {"num_gpus": num_gpus}

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None
