"""A fake Slurm for testing the real snakemake-executor-plugin-slurm without a cluster.

The six commands the plugin calls (sbatch, srun, sacct, squeue, sacctmgr, scontrol) are shell
wrappers in this directory that run `python3 fake_slurm.py <command> <args>`. Put this directory
first on PATH and set FAKE_SLURM_DIR to an empty directory. Every call appends one JSON line
{"cmd", "argv", "cwd"} to $FAKE_SLURM_DIR/calls.jsonl.

sbatch runs the job synchronously on this machine: the `--wrap=` command (or the script on stdin)
in the `-D` directory, output to `--output` (%j = job id), with SLURM_JOB_ID and SLURM_GPUS set
as Slurm would; it records the job's state (COMPLETED or FAILED) under $FAKE_SLURM_DIR/jobs and
prints the job id (`--parsable`). sacct and squeue report those states as `<id>|<STATE>`;
sacctmgr lists one account ($FAKE_SLURM_ACCOUNT, default "rtpo_test"); scontrol shows a config
with MinJobAge and MaxArraySize, and expands a node list (`scontrol show hostnames gpu[07-08],cpu1`);
srun drops its options (`-w NODE` included: every "node" is this machine) and runs the command.

A job runs in its own session; when its script exits, what is left of it is killed, as Slurm ends
a job's processes with the job.

Time limits / preemption (issue 20): with FAKE_SLURM_KILL_MATCH set, the first job whose --comment
contains it is killed as Slurm kills a job at its time limit: once FAKE_SLURM_KILL_WHEN
("<file>:<text>", the file relative to the job's directory) holds the text, SIGTERM to every process
of the job, SIGKILL to what is left FAKE_SLURM_KILL_WAIT seconds later (KillWait, default 30) --
slurmd's order, which gives the job steps the grace time even when the batch shell dies at once --
and the job ends in state FAKE_SLURM_KILL_STATE (default TIMEOUT). Later jobs that match run normally.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

# sbatch / srun options that take a separate value (`-A acct`, `--job-name NAME`)
VALUE_OPTS = {"-A", "--account", "-p", "--partition", "-t", "--time", "--mem", "--mem-per-cpu", "-D", "--chdir",
              "-J", "--job-name", "-o", "--output", "-e", "--error", "--comment", "-C", "--constraint",
              "--clusters", "-M", "-n", "--ntasks", "-c", "--cpus-per-task", "-N", "--nodes", "--jobid",
              "--gpus", "-G", "--gres", "--qos", "--reservation", "--exclude", "--array",
              "--starttime", "-S", "--endtime", "-E", "--format", "-o", "-u", "--user", "--states", "--name",
              "-w", "--nodelist"}


def state_dir() -> Path:
    d = os.environ.get("FAKE_SLURM_DIR")
    if not d:
        sys.exit("fake slurm: set FAKE_SLURM_DIR to a directory for its state")
    p = Path(d)
    (p / "jobs").mkdir(parents=True, exist_ok=True)
    return p


def record(cmd: str, argv: list[str]) -> None:
    with open(state_dir() / "calls.jsonl", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.write(json.dumps({"cmd": cmd, "argv": argv, "cwd": os.getcwd()}) + "\n")


def parse(argv: list[str], stop_at_positional: bool = True) -> tuple[dict[str, str], list[str]]:
    """Options (long and short, `--k=v`, `--k v`, `-n1`); the positional arguments after them.

    sbatch and srun stop at the first positional argument (the script, the command to run);
    sacct and squeue read options anywhere.
    """
    opts: dict[str, str] = {}
    positional: list[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if not a.startswith("-") or a == "-":
            if stop_at_positional:
                return opts, argv[i:]
            positional.append(a)
            i += 1
            continue
        if a.startswith("--") and "=" in a:
            k, v = a.split("=", 1)
            opts[k] = v
        elif a in VALUE_OPTS and i + 1 < len(argv):
            opts[a] = argv[i + 1]
            i += 1
        elif not a.startswith("--") and len(a) > 2 and a[:2] in VALUE_OPTS:  # -n1
            opts[a[:2]] = a[2:]
        else:
            opts[a] = ""
        i += 1
    return opts, positional


def next_job_id() -> str:
    counter = state_dir() / "next_id"
    with open(state_dir() / "lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        n = int(counter.read_text()) if counter.exists() else 1000
        counter.write_text(str(n + 1))
    return str(n)


def job_file(job_id: str) -> Path:
    return state_dir() / "jobs" / f"{job_id}.json"


def sbatch(argv: list[str]) -> int:
    opts, rest = parse(argv)
    job_id = next_job_id()
    name = opts.get("--job-name", opts.get("-J", ""))
    if "--wrap" in opts:
        script = opts["--wrap"]
    elif rest:
        script = sys.stdin.read() if rest[0] in ("/dev/stdin", "-") else Path(rest[0]).read_text()
    else:
        script = sys.stdin.read()
    workdir = opts.get("-D", opts.get("--chdir", os.getcwd()))
    log = opts.get("--output", opts.get("-o", f"slurm-{job_id}.out")).replace("%j", job_id)
    log_path = Path(workdir) / log if not os.path.isabs(log) else Path(log)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, SLURM_JOB_ID=job_id, SLURM_JOBID=job_id, SLURM_JOB_NAME=name)
    gpus = opts.get("--gpus", opts.get("-G"))
    if gpus:
        env["SLURM_GPUS"] = gpus
    job_file(job_id).write_text(json.dumps({"name": name, "state": "RUNNING", "opts": opts}))
    kill = kill_plan(opts, workdir)
    with open(log_path, "w") as out:
        proc = subprocess.Popen(["/bin/sh", "-c", script], cwd=workdir, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
        killed = run_job(proc, kill)
    rc = proc.returncode
    state = kill["state"] if killed else "COMPLETED" if rc == 0 else "FAILED"
    job_file(job_id).write_text(json.dumps({"name": name, "state": state, "rc": rc, "opts": opts,
                                            **({"killed": killed} if killed else {})}))
    print(job_id if "--parsable" in opts else f"Submitted batch job {job_id}")
    return 0


def kill_plan(opts: dict[str, str], workdir: str) -> dict | None:
    """The time-limit kill for this job (FAKE_SLURM_KILL_*), or None; each plan fires once."""
    match = os.environ.get("FAKE_SLURM_KILL_MATCH")
    if not match or match not in opts.get("--comment", ""):
        return None
    marker = state_dir() / "kill_fired"
    with open(state_dir() / "lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.exists():
            return None
        marker.write_text(match)
    path, _, text = os.environ.get("FAKE_SLURM_KILL_WHEN", ":").partition(":")
    return {"file": Path(workdir) / path if path else None, "text": text,
            "wait": float(os.environ.get("FAKE_SLURM_KILL_WAIT", "30")),
            "state": os.environ.get("FAKE_SLURM_KILL_STATE", "TIMEOUT")}


def _signal_job(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)  # the job's session: every process it started
    except ProcessLookupError:
        pass


def _job_alive(proc: subprocess.Popen) -> bool:
    """Whether any process of the job's session (process group) is left, the batch script included."""
    if proc.poll() is None:
        return True
    try:
        os.killpg(proc.pid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def run_job(proc: subprocess.Popen, kill: dict | None) -> dict | None:
    """Wait for the job; carry out `kill` when its condition holds. Returns what was done, or None.

    As slurmd ends a job at its time limit: SIGTERM to every process of the job, then up to KillWait
    for all of them to exit (the batch shell may die at once; the job steps it started get the
    whole grace time), then SIGKILL. A job that ends by itself has what it left behind killed.
    """
    done = None
    while proc.poll() is None or (done and _job_alive(proc)):
        if kill and done is None:
            f = kill["file"]
            if f is None or (f.exists() and kill["text"] in f.read_text(errors="replace")):
                _signal_job(proc, signal.SIGTERM)
                done = {"sigterm_at": time.time()}
        if done and "sigkill_at" not in done and time.time() - done["sigterm_at"] > kill["wait"]:
            _signal_job(proc, signal.SIGKILL)
            done["sigkill_at"] = time.time()
        time.sleep(0.05)
    if done:
        done["exited_after_s"] = round(time.time() - done["sigterm_at"], 2)
    _signal_job(proc, signal.SIGKILL)  # the job has ended: so do its processes
    return done


def jobs_named(name: str | None) -> list[tuple[str, str]]:
    out = []
    for p in sorted((state_dir() / "jobs").glob("*.json")):
        j = json.loads(p.read_text())
        if name is None or j["name"] == name:
            out.append((p.stem, j["state"]))
    return out


def sacct(argv: list[str]) -> int:
    opts, _ = parse(argv, stop_at_positional=False)
    if "-j" in opts:  # node list / failure reason of one job
        print("fakenode01")
        return 0
    if "-o" in opts and "account" in opts["-o"].lower():  # account guess: sacct -nu USER -o Account
        print(os.environ.get("FAKE_SLURM_ACCOUNT", "rtpo_test"))
        return 0
    for job_id, state in jobs_named(opts.get("--name")):
        print(f"{job_id}|{state}")
    return 0


def squeue(argv: list[str]) -> int:
    opts, _ = parse(argv, stop_at_positional=False)
    for job_id, state in jobs_named(opts.get("--name")):
        print(f"{job_id}|{state}")
    return 0


def sacctmgr(argv: list[str]) -> int:
    print(os.environ.get("FAKE_SLURM_ACCOUNT", "rtpo_test"))
    return 0


def hostnames(nodelist: str) -> list[str]:
    """`gpu[07-08,10],cpu1` -> gpu07 gpu08 gpu10 cpu1 (one bracket group per name, as Slurm writes them)."""
    out = []
    for name in re.findall(r"[^,\[]+(?:\[[^\]]*\][^,]*)?", nodelist):
        m = re.fullmatch(r"([^\[]*)\[([^\]]*)\](.*)", name)
        if not m:
            out.append(name)
            continue
        prefix, ranges, suffix = m.groups()
        for r in ranges.split(","):
            lo, _, hi = r.partition("-")
            for i in range(int(lo), int(hi or lo) + 1):
                out.append(f"{prefix}{i:0{len(lo)}d}{suffix}")
    return out


def scontrol(argv: list[str]) -> int:
    if argv[:2] == ["show", "config"]:
        print("MinJobAge               = 300 sec")
        print("MaxArraySize            = 1001")
    elif argv[:2] == ["show", "hostnames"] and len(argv) > 2:
        print("\n".join(hostnames(argv[2])))
    return 0


def srun(argv: list[str]) -> int:
    _, rest = parse(argv)
    if not rest:
        sys.exit("fake srun: no command")
    os.execvp(rest[0], rest)
    return 127  # not reached


COMMANDS = {"sbatch": sbatch, "srun": srun, "sacct": sacct, "squeue": squeue, "sacctmgr": sacctmgr,
            "scontrol": scontrol}


def main() -> int:
    cmd, argv = sys.argv[1], sys.argv[2:]
    record(cmd, argv)
    return COMMANDS[cmd](argv)


if __name__ == "__main__":
    sys.exit(main())
