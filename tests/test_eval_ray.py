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
