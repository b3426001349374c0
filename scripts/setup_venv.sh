#!/usr/bin/env bash
# Create or update ./.venv with the CPU default stack (used by both README commands).
# Re-installs only when pyproject.toml or constraints/cpu.txt changed since the last install.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-$(command -v python3.11 || command -v python3)}"
if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv with $PY"
  "$PY" -m venv .venv
fi
want="$(cat pyproject.toml constraints/cpu.txt | sha256sum | cut -d' ' -f1)"
have="$(cat .venv/.rtpo-installed 2>/dev/null || true)"
if [ "$want" != "$have" ]; then
  echo "[setup] installing rtpo and its pinned dependencies into .venv (first time: several minutes)"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -c constraints/cpu.txt -e ".[dev]"
  echo "$want" > .venv/.rtpo-installed
fi
