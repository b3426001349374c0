"""Jobs that always make progress: a training job stops at a step boundary with a checkpoint when a
signal reaches `rtpo train` or when one more step would outlast its Slurm slot, and exits 143 for
its retry (rtpo.signals, rtpo.verl_ext.launch.run_until_stopped, the verl trainers' step boundary).
The verl end-to-end case is in tests/test_verl.py (test_verl_run_stopped_at_its_deadline_resumes_...)."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from rtpo.signals import StopOnSigterm, job_deadline, parse_time_left, stop_reason


@pytest.mark.parametrize("s,want", [("1-02:03:04", 93784.0), ("02:03:04", 7384.0), ("3:04", 184.0),
                                    ("0:00", 0.0), ("UNLIMITED", None), ("INVALID", None), ("", None)])
def test_parse_time_left(s, want):
    assert parse_time_left(s) == want


def test_job_deadline_from_env_and_from_squeue(tmp_path):
    assert job_deadline({"RTPO_JOB_DEADLINE": "1234.5"}) == 1234.5
    assert job_deadline({"SLURM_JOB_END_TIME": "2000"}) == 2000.0
    assert job_deadline({}) is None
    with pytest.raises(ValueError, match="RTPO_JOB_DEADLINE='soon'"):
        job_deadline({"RTPO_JOB_DEADLINE": "soon"})
    # the Snakemake jobstep plugin keeps SLURM_JOB_ID only: ask squeue for the time left
    squeue = tmp_path / "squeue"
    squeue.write_text('#!/bin/sh\n[ "$*" = "-h -j 77 -o %L" ] || { echo "bad args: $*" >&2; exit 1; }\necho 1:02:03\n')
    squeue.chmod(0o755)
    env = {"SLURM_JOB_ID": "77", "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    assert job_deadline(env, now=1000.0) == 1000.0 + 3723
    env["SLURM_JOB_ID"] = "78"  # squeue fails: no deadline, not a crash
    assert job_deadline(env, now=1000.0) is None


def test_stop_reason(tmp_path):
    assert stop_reason(0, 100, 50, None, 300) is None
    assert stop_reason(0, 100, 50, 1000, 300) is None            # 450 s of 1000 used
    why = stop_reason(600, 100, 50, 1000, 300)                   # 1050 > 1000
    assert why and "ends in 400 s" in why and "one more step (100 s)" in why
    f = tmp_path / "stop_requested"
    assert stop_reason(0, 1, 1, None, 0, f) is None
    f.write_text("SIGUSR1 to rtpo train\n")
    assert "SIGUSR1 to rtpo train" in stop_reason(0, 1, 1, None, 0, f)


@pytest.mark.parametrize("sig", [signal.SIGUSR1, signal.SIGTERM])
def test_stop_on_sigterm_takes_usr1_as_sigterm(sig):
    seen = []
    with StopOnSigterm(on_request=seen.append) as stop:
        os.kill(os.getpid(), sig)
        time.sleep(0.05)
        assert stop.requested and stop.signum == sig
        os.kill(os.getpid(), sig)  # a second request calls on_request no more
        time.sleep(0.05)
    assert seen == [sig]


def test_launcher_forwards_usr1_to_the_trainer_as_a_stop_file(tmp_path):
    """rtpo train (run_until_stopped) gets SIGUSR1 while verl runs: it writes the stop file that the
    trainer polls (here a child standing in for main_ppo, which exits once it sees the file), and
    keeps waiting for it instead of dying."""
    from rtpo.verl_ext.launch import run_until_stopped, stop_overrides

    stop = tmp_path / "stop_requested"
    child = ("import pathlib, sys, time\n"
             f"p = pathlib.Path({str(stop)!r})\n"
             "t0 = time.time()\n"
             "while not p.exists() and time.time() - t0 < 60: time.sleep(0.05)\n"
             "print('saw', p.read_text().strip()); sys.exit(0 if p.exists() else 3)\n")
    threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGUSR1)).start()
    with open(tmp_path / "log", "w") as log:
        rc = run_until_stopped([sys.executable, "-c", child], dict(os.environ), log, tmp_path, stop)
    assert rc == 0, (tmp_path / "log").read_text()
    assert f"saw SIGUSR1 to rtpo train (pid {os.getpid()})" in (tmp_path / "log").read_text()
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL  # handlers restored
    ov = stop_overrides(stop, {"RTPO_JOB_DEADLINE": "1700000000", "RTPO_STOP_MARGIN_S": "60"})
    assert ov == [f"+rtpo.stop_file='{stop}'", "+rtpo.stop_margin_s=60.0", "+rtpo.deadline=1700000000.0"]
    assert stop_overrides(stop, {}) == [f"+rtpo.stop_file='{stop}'", "+rtpo.stop_margin_s=300.0"]
    # the pilot's step cap and the launch time the trainer measures its start-up from
    assert stop_overrides(stop, {"RTPO_STOP_AFTER_STEP": "3"}, launch_t0=12.5)[2:] == [
        "+rtpo.stop_after_step=3", "+rtpo.launch_t0=12.5"]
    with pytest.raises(ValueError, match="RTPO_STOP_AFTER_STEP='0'"):
        stop_overrides(stop, {"RTPO_STOP_AFTER_STEP": "0"})


def _fake_squeue(tmp_path: Path, body: str) -> dict:
    squeue = tmp_path / "squeue"
    squeue.write_text("#!/bin/sh\n" + body)
    squeue.chmod(0o755)
    return {"SLURM_JOB_ID": "77", "PATH": f"{tmp_path}:{os.environ['PATH']}"}


def test_a_slurm_job_whose_squeue_fails_takes_the_rules_runtime_and_says_so(tmp_path, capsys):
    """squeue fails (no SLURM_CONF, a slow controller): the deadline comes from the rule's runtime, which
    the train rule exports (workflow/rules/train.smk: RTPO_RULE_DEADLINE = its shell's start + runtime),
    less the job's own start-up; without that either, the job's log says it has no deadline."""
    from rtpo.signals import RULE_DEADLINE_SLACK_S, deadline_message, job_deadline_source
    from rtpo.verl_ext.launch import stop_overrides

    env = _fake_squeue(tmp_path, 'echo "slurm_load_jobs error: Unable to contact slurm controller" >&2; exit 1\n')
    env["RTPO_RULE_DEADLINE"] = "5000"
    deadline, source = job_deadline_source(env, now=1000.0)
    assert deadline == 5000 - RULE_DEADLINE_SLACK_S
    assert "RTPO_RULE_DEADLINE" in source and "Unable to contact slurm controller" in source
    assert stop_overrides(tmp_path / "stop", env)[-1] == f"+rtpo.deadline={5000 - RULE_DEADLINE_SLACK_S}"
    assert "job deadline in" in capsys.readouterr().err
    del env["RTPO_RULE_DEADLINE"]
    deadline, line = deadline_message(env, now=1000.0)
    assert deadline is None
    assert line.startswith("rtpo: WARNING: Slurm job 77 has no deadline") and "exit 1" in line, line
    stop_overrides(tmp_path / "stop", env)
    assert "has no deadline" in capsys.readouterr().err
    # squeue first: it knows the real end; the rule's runtime is the fallback only
    env = {**_fake_squeue(tmp_path, "echo 10:00\n"), "RTPO_RULE_DEADLINE": "5000"}
    assert job_deadline_source(env, now=1000.0)[0] == 1600.0


def test_slurm_conf_comes_back_from_the_jobs_own_process(tmp_path):
    """The Snakemake jobstep plugin keeps SLURM_CONF in its own environment but drops it from the rule's
    (snakemake_executor_plugin_slurm_jobstep: keep_slurm): a child without it finds it in its parent's
    (rtpo.signals.slurm_conf), and squeue gets it (here a squeue that fails without it)."""
    env = _fake_squeue(tmp_path, '[ "$SLURM_CONF" = /site/slurm.conf ] || { echo "no conf" >&2; exit 1; }\n'
                                 'echo 1:00:00\n')
    child = ("import json, os\n"
             "from rtpo.signals import slurm_conf, job_deadline_source\n"
             "print(json.dumps([slurm_conf(), job_deadline_source(dict(os.environ), now=0.0)]))\n")
    # the parent, as the jobstep plugin: SLURM_CONF in its environment, removed from its child's
    parent = ("import os, subprocess, sys\n"
              "env = {k: v for k, v in os.environ.items() if k != 'SLURM_CONF'}\n"
              f"sys.exit(subprocess.run([sys.executable, '-c', {child!r}], env=env).returncode)\n")
    import json
    import subprocess

    r = subprocess.run([sys.executable, "-c", parent], env={**os.environ, **env, "SLURM_CONF": "/site/slurm.conf"},
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    conf, (deadline, source) = json.loads(r.stdout)
    assert conf == "/site/slurm.conf" and deadline == 3600.0 and source.startswith("squeue"), r.stdout
    # a process with no such ancestor: None, and squeue then fails
    r = subprocess.run([sys.executable, "-c", child], env={k: v for k, v in {**os.environ, **env}.items()
                                                           if k != "SLURM_CONF"}, capture_output=True, text=True)
    conf, (deadline, source) = json.loads(r.stdout)
    assert conf is None and deadline is None and "no conf" in source
