"""Evaluation jobs start a Ray head of their own (rtpo.verl_ext.eval_servers.LocalRayHead): ports from the
Slurm job id as training's slurm_ray.sh derives them and a temp dir per job, so two evaluation jobs on
one node do not meet on Ray's fixed default ports (the dashboard agent's 52365 above all)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from rtpo.verl_ext.eval_servers import LocalRayHead, job_ports


def test_job_ports_follow_the_slurm_job_id():
    assert job_ports({"SLURM_JOB_ID": "123"}) == 20000 + 3 * 123
    assert job_ports({"SLURM_JOB_ID": "4123"}) == 20000 + 3 * 123  # slurm_ray.sh's formula, 4000 ids apart
    assert job_ports({"SLURM_JOB_ID": "5", "RTPO_RAY_PORT": "31000"}) == 31000
    assert 1024 <= job_ports({}) <= 65533


@pytest.mark.slow
def test_two_evaluation_jobs_on_one_node_get_their_own_ray(tmp_path):
    base = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    heads = []
    try:
        for job in ("101", "102"):
            heads.append(LocalRayHead({**base, "SLURM_JOB_ID": job, "RAY_AUTH_MODE": "disabled"}, num_cpus=1, num_gpus=0))
        a, b = heads
        assert (a.port, b.port) == (20303, 20306) and a.temp_dir != b.temp_dir
        assert Path(a.temp_dir).name.startswith("rtpo-ray-101-") and Path(b.temp_dir).name.startswith("rtpo-ray-102-")
        for h in heads:
            assert h.proc.poll() is None
            for port in (h.port, h.port + 2):  # GCS and the dashboard agent listen where they were told
                with socket.socket() as s:
                    assert s.connect_ex(("127.0.0.1", port)) == 0, (port, h.log.read_text()[-2000:])
    finally:
        for h in heads:
            h.stop()
    for h in heads:
        assert h.proc.poll() is not None and not Path(h.temp_dir).exists()


def test_auth_mode_follows_slurm_ray_sh(tmp_path):
    from rtpo.verl_ext.eval_servers import ray_auth_mode

    home = tmp_path / "home"
    assert ray_auth_mode({"HOME": str(home)}) is None
    (home / ".ray").mkdir(parents=True)
    (home / ".ray" / "auth_token").write_text("")
    assert ray_auth_mode({"HOME": str(home)}) is None  # an empty file is no token
    (home / ".ray" / "auth_token").write_text("a" * 64)
    assert ray_auth_mode({"HOME": str(home)}) == "token"
    assert ray_auth_mode({"HOME": str(home), "RAY_AUTH_MODE": "disabled"}) == "disabled"  # the user's wins
    assert ray_auth_mode({"HOME": "/nonexistent", "RAY_AUTH_TOKEN": "t" * 64}) == "token"
    tok = tmp_path / "tok"
    tok.write_text("b" * 64)
    assert ray_auth_mode({"HOME": "/nonexistent", "RAY_AUTH_TOKEN_PATH": str(tok)}) == "token"


@pytest.mark.slow
def test_an_evaluation_job_joins_its_own_head_when_a_ray_token_exists(tmp_path):
    """With a token in ~/.ray (any earlier local ray.init() of Ray 2.60 writes one) `ray start --head` turns
    token authentication on by itself; the evaluation job's driver must send the mode too, and Ray reads
    it once, when imported. Found in the rehearsal: every evaluation job failed with "InvalidAuthToken".
    `join_ray` runs in a fresh process, as `rtpo evaluate` does: HOME holds a token, RAY_AUTH_MODE unset."""
    import subprocess
    import sys

    home = tmp_path / "home"
    (home / ".ray").mkdir(parents=True)
    (home / ".ray" / "auth_token").write_text("c0ffee" * 10 + "beef")
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE")}
    env.update(HOME=str(home), SLURM_JOB_ID="117")
    body = ("head = join_ray({}, cpu=False)\n"
            "import ray\n"
            "try:\n    print('mode', os.environ.get('RAY_AUTH_MODE'), 'cpus', ray.cluster_resources().get('CPU'))\n"
            "finally:\n    head.stop()\n")
    prelude = "import os\nfrom rtpo.verl_ext.eval_servers import join_ray\n"
    out = subprocess.run([sys.executable, "-c", prelude + body], env=env, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0 and "mode token cpus" in out.stdout, out.stdout + out.stderr[-3000:]
    # Ray imported before the mode is known: refused with a message, not a driver that waits and fails
    late = subprocess.run([sys.executable, "-c", "import ray\n" + prelude + body], env=env, capture_output=True,
                          text=True, timeout=240)
    assert late.returncode != 0 and "imported before this job's authentication mode" in late.stderr, late.stderr[-2000:]
