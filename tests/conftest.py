"""Shared fixtures and helpers for running the Snakemake workflow in tests.

`smoke_results` runs the whole smoke DAG (config/smoke.yaml) once per test session in a temporary
working copy and returns that directory: its results/ and figures/ are what the pipeline wrote.
Tests must treat it as read-only (copy it with `copy_workdir` before deleting or re-running).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# the snakemake of the environment running the tests (./.venv/bin/snakemake under scripts/test.sh)
SNAKEMAKE = Path(sys.executable).parent / "snakemake"
# what scripts/pipeline.sh exports too
PIPELINE_ENV = {"PYTHONHASHSEED": "0", "TOKENIZERS_PARALLELISM": "false", "WANDB_MODE": "disabled",
                "HF_HUB_OFFLINE": "1"}
# about 5 min on 2 idle cores; generous, since the test machine may be shared
SMOKE_TIMEOUT_S = 2400


def workflow_copy(dest: Path) -> Path:
    """A working copy of the pipeline in `dest`: workflow/ (with its workflow profile,
    workflow/profiles/default), config/, environment.yml and the repository's `slurm` site profile.
    Outputs of runs there land in dest/results, dest/figures."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copytree(ROOT / "workflow", dest / "workflow", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "config", dest / "config")
    shutil.copy2(ROOT / "environment.yml", dest / "environment.yml")
    shutil.copytree(ROOT / "slurm", dest / "slurm")
    return dest


def copy_workdir(src: Path, dest: Path) -> Path:
    """Copy a working directory with its results and Snakemake metadata, keeping mtimes."""
    shutil.copytree(src, dest, symlinks=True)
    return dest


def run_snakemake(workdir: Path, *args: str, env: dict[str, str] | None = None,
                  timeout: float = 300) -> subprocess.CompletedProcess:
    """`snakemake ARGS` in `workdir` (targets must come before --configfile).

    Runs in its own process group: on timeout the whole group (Snakemake and the jobs it started)
    is killed and subprocess.TimeoutExpired raised with the output so far.
    """
    full_env = {**os.environ, **PIPELINE_ENV, **(env or {})}
    proc = subprocess.Popen([str(SNAKEMAKE), *args], cwd=workdir, env=full_env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise subprocess.TimeoutExpired(proc.args, timeout, output=out, stderr=err) from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def failed_job_logs(output: str, workdir: Path, max_chars: int = 3000) -> str:
    """The tails of the log files of the jobs Snakemake reports as failed in `output`."""
    parts = []
    for block in output.split("Error in rule ")[1:]:
        rule = block.split(":", 1)[0]
        m = re.search(r"^\s+log: (\S+)", block, re.M)
        if m and (workdir / m.group(1)).exists():
            text = (workdir / m.group(1)).read_text(errors="replace")
            parts.append(f"--- rule {rule}: {m.group(1)} (last {max_chars} chars)\n{text[-max_chars:]}")
        else:
            parts.append(f"--- rule {rule}: no log\n{block[:1500]}")
    return "\n".join(parts)


@pytest.fixture(scope="session")
def smoke_results(tmp_path_factory) -> Path:
    """The smoke DAG run end to end: `snakemake --cores 2 --keep-going --configfile config/smoke.yaml`
    in a fresh working copy. Returns the working directory (results/, figures/, .snakemake/)."""
    work = workflow_copy(tmp_path_factory.mktemp("smoke_dag"))
    t0 = time.perf_counter()
    try:
        r = run_snakemake(work, "--cores", "2", "--keep-going", "--configfile", "config/smoke.yaml",
                          timeout=SMOKE_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        out = (e.output or "") + (e.stderr or "")
        (work / "smoke_dag.log").write_text(out)
        done = out.count("Finished jobid")
        pytest.fail(f"the smoke DAG did not finish within {SMOKE_TIMEOUT_S} s ({done} jobs done; is the machine "
                    f"busy?); output: {work / 'smoke_dag.log'}\n{out[-3000:]}", pytrace=False)
    wall = time.perf_counter() - t0
    (work / "smoke_dag.log").write_text(r.stdout + r.stderr)
    if r.returncode != 0:
        out = r.stdout + r.stderr
        pytest.fail(f"the smoke DAG failed (rc {r.returncode}, {wall:.0f} s; full output: {work / 'smoke_dag.log'})\n"
                    f"{failed_job_logs(out, work)}\n--- snakemake output (tail)\n{out[-4000:]}", pytrace=False)
    print(f"\nsmoke DAG: {wall:.0f} s wall-clock in {work}")
    return work
