"""The GPU environment spec, as `rtpo check-config` reads it: which packages environment.yml's pip list and
pyproject.toml's `gpu` extra install (verl's extras expanded where they pull flash-attn), and so which
attention implementations a GPU run can name (rtpo.verl_ext.startup's `attention` rule)."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from rtpo.verl_ext.budget import TORCH_ATTENTION


@dataclass(frozen=True)
class EnvSpec:
    """What the GPU environment installs: the requirement names of environment.yml's pip list and of
    pyproject.toml's `gpu` extra, with verl's extras expanded where they pull flash-attn."""

    requirements: frozenset
    sources: tuple

    def installs(self, name: str) -> bool:
        return _norm(name) in self.requirements

    def attention(self) -> set[str]:
        have = set(TORCH_ATTENTION) if self.installs("torch") else set()
        if self.installs("flash-attn"):
            have.add("flash_attention_2")
        if self.installs("flash-attn-3") or self.installs("flash_attn_interface"):
            have.add("flash_attention_3")
        return have


# verl 0.9.1's extras that pull flash-attn (its METADATA: flash-attn-cu130torch211, fsdp and megatron)
VERL_FLASH_EXTRAS = {"flash-attn-cu130torch211", "fsdp", "megatron"}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_names(req: str) -> set[str]:
    req = req.split(";")[0].split("#")[0].strip()
    if not req or req.startswith("-") and not req.startswith("-e"):
        return set()
    if req.startswith("-e"):  # -e .[gpu]: the extra is read from pyproject.toml itself
        return set()
    m = re.match(r"([A-Za-z0-9][A-Za-z0-9_.\-]*)\s*(\[([^\]]*)\])?", req)
    if not m:
        return set()
    names = {_norm(m.group(1))}
    extras = {_norm(e.strip()) for e in (m.group(3) or "").split(",") if e.strip()}
    if _norm(m.group(1)) == "verl" and extras & VERL_FLASH_EXTRAS:
        names.add("flash-attn")
    if _norm(m.group(1)) == "verl" and "vllm" in extras:
        names |= {"torch", "vllm", "transformers"}
    return names


def env_spec(root: Path) -> EnvSpec:
    """The GPU environment spec of the repository at `root` (environment.yml + the `gpu` extra)."""
    import tomllib

    names: set[str] = set()
    sources = []
    env_yml = root / "environment.yml"
    if env_yml.exists():
        sources.append(str(env_yml.name))
        doc = yaml.safe_load(env_yml.read_text()) or {}
        for dep in doc.get("dependencies", []):
            if isinstance(dep, dict):
                for r in dep.get("pip", []):
                    names |= _requirement_names(str(r))
            elif isinstance(dep, str) and not dep.startswith(("python", "pip")):
                names |= _requirement_names(dep.split("=")[0])
    pp = root / "pyproject.toml"
    if pp.exists():
        sources.append("pyproject.toml [project.optional-dependencies] gpu")
        proj = tomllib.loads(pp.read_text()).get("project", {})
        for r in proj.get("optional-dependencies", {}).get("gpu", []):
            names |= _requirement_names(r)
        for r in proj.get("dependencies", []):  # rtpo itself: torch (sdpa) is a base dependency
            names |= _requirement_names(r)
    return EnvSpec(frozenset(names), tuple(sources))


# --------------------------------------------------------------------------------------------------
# The NVIDIA driver the GPU stack needs
# --------------------------------------------------------------------------------------------------
# The oldest driver branch of each CUDA major version (NVIDIA's CUDA Toolkit release notes, "CUDA Toolkit
# and Minimum Required Driver Version"; minor-version compatibility within a major version): torch 2.11.0
# and vLLM 0.24.0 from PyPI are CUDA 13.0 builds (cuda-toolkit 13.0.2, nvidia-*-cu13 in their metadata).
MIN_DRIVER = {13: 580, 12: 525}
GPU_STACK_CUDA = "13.0"  # environment.yml's torch 2.11.0 / vLLM 0.24.0 wheels


class DeviceError(OSError):
    """A verl job cannot use the device its config names, or names none on a node with GPUs (an OSError:
    `rtpo` prints the message and exits 2 at start-up, before any data, Ray or verl)."""


class DriverError(DeviceError):
    """The NVIDIA driver is older than the CUDA build of torch needs (an OSError: `rtpo` prints the
    message and exits 2, as for any unusable input)."""


def nvidia_smi(env: dict[str, str] | None = None) -> list[str]:
    """The driver version `nvidia-smi` reports for each GPU it lists (e.g. ["580.65.06"] x 8); [] where there
    is no nvidia-smi, it fails, or it lists no GPU."""
    import os
    import shutil
    import subprocess

    env = dict(os.environ if env is None else env)
    exe = shutil.which("nvidia-smi", path=env.get("PATH"))
    if exe is None:
        return []
    try:
        r = subprocess.run([exe, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                           text=True, timeout=60, env=env)
    except (OSError, subprocess.TimeoutExpired):
        return []
    lines = [x.strip() for x in r.stdout.splitlines() if x.strip()]
    return lines if r.returncode == 0 else []


def nvidia_driver(env: dict[str, str] | None = None) -> str | None:
    """The driver version `nvidia-smi` reports (e.g. "580.65.06"), None where there is no nvidia-smi."""
    found = nvidia_smi(env)
    return found[0] if found else None


def needed_driver(cuda: str | None) -> int | None:
    """The oldest driver branch a CUDA build `cuda` ("13.0") runs on (MIN_DRIVER); None: no CUDA build."""
    if not cuda:
        return None
    return MIN_DRIVER.get(int(str(cuda).split(".")[0]))


def check_nvidia_driver(cuda: str | None = None, env: dict[str, str] | None = None) -> str | None:
    """Raise DriverError when nvidia-smi reports a driver older than the CUDA build `cuda` (default: the
    installed torch's, torch.version.cuda) needs; return the driver found (None: no nvidia-smi, or a CPU
    build of torch: nothing to check)."""
    found = nvidia_driver(env)
    if found is None:
        return None
    if cuda is None:
        try:
            import torch

            cuda = torch.version.cuda
        except ImportError:  # pragma: no cover
            cuda = None
    if not cuda:
        return found
    major = int(str(cuda).split(".")[0])
    need = needed_driver(cuda)
    m = re.match(r"(\d+)", found)
    if need is None or m is None or int(m.group(1)) >= need:
        return found
    raise DriverError(
        f"NVIDIA driver {found} found; torch built for CUDA {cuda} needs driver >= {need} (CUDA {major}.x). "
        f"Update the driver, or install CUDA {12 if major > 12 else major} builds of torch and vLLM (docs/cluster.md, "
        "\"NVIDIA driver\"; environment.yml)")


# --------------------------------------------------------------------------------------------------
# The device of a verl job (job_device, launch.verl_device): never a silent CPU run on a GPU node
# --------------------------------------------------------------------------------------------------
def torch_cuda() -> tuple[str, str | None, bool, str]:
    """(torch's version, the CUDA version it is built for (None: a CPU build), whether it can use CUDA now,
    torch's own warning when it cannot, e.g. "The NVIDIA driver on your system is too old")."""
    import warnings

    import torch

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ok = bool(torch.cuda.is_available())
    said = " ".join(str(w.message).strip() for w in caught if "cuda" in str(w.message).lower())
    return str(torch.__version__), torch.version.cuda, ok, said


def visible_devices(env: dict[str, str] | None = None) -> str | None:
    """CUDA_VISIBLE_DEVICES when it names a device (Slurm sets it for a job with GPUs), else None."""
    import os

    v = (os.environ if env is None else env).get("CUDA_VISIBLE_DEVICES")
    return v if v is not None and v.strip() not in ("", "-1", "NoDevFiles") else None


def cuda_facts(env: dict[str, str] | None = None) -> str:
    """One paragraph naming the driver found, the driver needed and torch's CUDA version (and what else says
    this node has GPUs): what a DeviceError prints."""
    version, cuda, _, said = torch_cuda()
    gpus = nvidia_smi(env)
    found = (f"NVIDIA driver {gpus[0]} found (nvidia-smi lists {len(gpus)} GPU{'s' if len(gpus) != 1 else ''})"
             if gpus else "no NVIDIA driver found (no nvidia-smi on PATH, or it lists no GPU)")
    need = needed_driver(cuda or GPU_STACK_CUDA)
    if cuda:
        build = f"torch {version} is built for CUDA {cuda}, which needs driver >= {need}"
    else:
        build = (f"torch {version} is a CPU build (no CUDA); the GPU environment (environment.yml: torch 2.11.0, "
                 f"CUDA {GPU_STACK_CUDA}) needs driver >= {need}")
    vis = visible_devices(env)
    parts = [found, build] + ([f"CUDA_VISIBLE_DEVICES={vis}"] if vis is not None else [])
    return "; ".join(parts) + (f". torch says: {said}" if said else "")


def check_cuda(env: dict[str, str] | None = None) -> str | None:
    """For a job whose config asks for CUDA (verl.device: cuda), before anything else runs: the driver against
    torch's CUDA build, then whether torch can use CUDA. Raises DriverError (driver too old) or DeviceError
    (CUDA unusable), each naming the driver found, the driver needed and torch's CUDA version; returns the
    driver found (None: no nvidia-smi, yet CUDA works, e.g. some containers)."""
    _, cuda, ok, _ = torch_cuda()
    gpus = nvidia_smi(env)
    need = needed_driver(cuda)
    m = re.match(r"(\d+)", gpus[0]) if gpus else None
    old = bool(m and need and int(m.group(1)) < need)
    if ok and not old:
        return gpus[0] if gpus else None
    what = ("the NVIDIA driver is too old for torch's CUDA build" if old else
            "torch cannot use CUDA here (torch.cuda.is_available() is False)")
    raise (DriverError if old else DeviceError)(
        f"verl.device is cuda, but {what}: {cuda_facts(env)}. Run the job on a GPU node whose driver is new enough, "
        "or install CUDA 12 builds of torch and vLLM for an older driver (docs/cluster.md, \"NVIDIA driver\"); "
        "no CPU run is started in its place (verl.device: cpu runs the CPU harness on purpose)")


def gpu_node(env: dict[str, str] | None = None) -> str | None:
    """What says this node has GPUs (nvidia-smi lists some, or CUDA_VISIBLE_DEVICES names one), None if nothing."""
    gpus = nvidia_smi(env)
    if gpus:
        return f"nvidia-smi lists {len(gpus)} GPU{'s' if len(gpus) != 1 else ''}"
    vis = visible_devices(env)
    return f"CUDA_VISIBLE_DEVICES={vis}" if vis is not None else None


DEVICES = ("cpu", "cuda")  # verl.device


def job_device(dev: str | None, env: dict[str, str] | None = None) -> str:
    """The device of a verl job, decided at start-up, before any data, Ray or verl, and never silently:

      * ``verl.device: cuda`` (config/paper.yaml): the driver and CUDA checks first (`check_cuda`);
        a node that cannot run CUDA stops the job, naming the driver found, the driver needed and torch's
        CUDA version (exit 2). A CPU run is never started in its place.
      * ``verl.device: cpu`` (the rehearsal, the tests): the CPU harness (rtpo.verl_ext.cpu_harness), by
        choice; where the node has GPUs this says so on stderr.
      * no ``verl.device`` (the schema requires it for ``engine: verl``; `rtpo train --engine verl` on a
        config of the local engine may lack it): "cuda" when torch can use CUDA (after the driver check);
        refused when the node has GPUs that torch cannot use (nvidia-smi lists some, or
        CUDA_VISIBLE_DEVICES names one); "cpu" only on a node with no sign of a GPU.
    """
    if dev is not None and str(dev) not in DEVICES:
        raise ValueError(f"verl.device must be one of {list(DEVICES)}, got {dev!r}")
    if dev == "cuda":
        check_cuda(env)
        return "cuda"
    if dev == "cpu":
        seen = gpu_node(env)
        if seen:
            print(f"rtpo: verl.device is cpu: the CPU harness runs, though {seen} (set verl.device: cuda to use them)",
                  file=sys.stderr)
        return "cpu"
    if torch_cuda()[2]:
        check_cuda(env)
        return "cuda"
    seen = gpu_node(env)
    if seen:
        raise DeviceError(f"verl.device is not set and this node has GPUs ({seen}) that torch cannot use: "
                          f"{cuda_facts(env)}. Set verl.device: cuda (the job then stops here until the node can "
                          "run CUDA) or verl.device: cpu to run the CPU harness on purpose; it is never chosen "
                          "silently on a GPU node")
    return "cpu"
