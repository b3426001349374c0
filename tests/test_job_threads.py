"""A verl training job's processes do not inherit Snakemake's `threads` (rtpo.verl_ext.launch.without_job_threads):
Snakemake exports the job's thread count as six thread-pool variables, and every FSDP rank, vLLM worker and
agent-loop worker under the job's Ray cluster would run that many threads (on the rehearsal's 2 cores the
steps took twice as long: docs/rehearsal.md). The environment is taken from a real Snakemake job; that
train_verl hands verl the environment without them is tests/test_verl.py::test_rtpo_train_engine_verl_dispatches_to_main_ppo."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rtpo.verl_ext.launch import SNAKEMAKE_THREAD_VARS, without_job_threads


@pytest.fixture(scope="module")
def snakemake_job_env(tmp_path_factory) -> dict[str, str]:
    """The environment of a real Snakemake job's shell, for a rule with threads: 3."""
    d = tmp_path_factory.mktemp("smk")
    (d / "Snakefile").write_text(
        "rule env:\n"
        "    output: 'env.json'\n"
        "    threads: 3\n"
        f"    shell: \"{sys.executable} -c 'import json, os; json.dump(dict(os.environ), open(\\\"env.json\\\", \\\"w\\\"))'\"\n")
    r = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "3", "--quiet"], cwd=d, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads((d / "env.json").read_text())


def test_snakemakes_thread_variables_are_not_passed_to_verls_processes(snakemake_job_env):
    assert {k: snakemake_job_env.get(k) for k in SNAKEMAKE_THREAD_VARS} == dict.fromkeys(SNAKEMAKE_THREAD_VARS, "3")
    env, note = without_job_threads(snakemake_job_env)
    assert not set(SNAKEMAKE_THREAD_VARS) & set(env)
    assert "OMP_NUM_THREADS=3" in note and "Ray gives each worker" in note
    assert {k: v for k, v in snakemake_job_env.items() if k not in SNAKEMAKE_THREAD_VARS} == env  # nothing else


@pytest.mark.parametrize("user", [{"OMP_NUM_THREADS": "4"}, {"OMP_NUM_THREADS": "4", "MKL_NUM_THREADS": "4"}, {}])
def test_thread_variables_set_by_hand_are_kept(user):
    """Outside Snakemake (`rtpo train` from a shell) what the user set is theirs: kept, and nothing is said."""
    base = {"PATH": "/usr/bin", **user}
    assert without_job_threads(base) == (base, None)

