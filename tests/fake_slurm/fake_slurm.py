"""A fake Slurm for testing the real snakemake-executor-plugin-slurm without a cluster.

The six commands the plugin calls (sbatch, srun, sacct, squeue, sacctmgr, scontrol) are shell
wrappers in this directory that run `python3 fake_slurm.py <command> <args>`. Put this directory
first on PATH and set FAKE_SLURM_DIR to an empty directory. Every call appends one JSON line
{"cmd", "argv", "cwd"} to $FAKE_SLURM_DIR/calls.jsonl.

sbatch runs the job synchronously on this machine: the `--wrap=` command (or the script on stdin)
in the `-D` directory, output to `--output` (%j = job id), with the batch environment Slurm sets
(below); it records the job's state (COMPLETED or FAILED) and its allocation under
$FAKE_SLURM_DIR/jobs and prints the job id (`--parsable`). sacct and squeue report those states as `<id>|<STATE>`;
sacctmgr lists one account ($FAKE_SLURM_ACCOUNT, default "rtpo_test"); scontrol shows a config
with MinJobAge and MaxArraySize, expands a node list (`scontrol show hostnames gpu[07-08],cpu1`) and
shows a job sbatch ran (`scontrol [-o] show job <id>`: JobId, JobState, NodeList, NumNodes, TRES);
srun checks its options against the job's allocation as real srun does, then runs the command
(every "node" is this machine); see "Allocations and job steps" below.

Allocations and job steps. Every fake node has FAKE_SLURM_GPUS_PER_NODE GPUs (default 8).
sbatch allocates -N/--nodes nodes (default 1), named FAKE_SLURM_NODE_PREFIX01.. (default "fakenode"),
and GPUs per node from --gpus=[type:]N (the job's total, split evenly), --gpus-per-node=[type:]N or
--gres=gpu[:type]:N (per node); more per node than a node has is refused as sbatch refuses it
("Requested node configuration is not available"). The batch script runs on the first node with
SLURM_JOB_ID, SLURM_JOB_NODELIST, SLURM_JOB_NUM_NODES / SLURM_NNODES, SLURMD_NODENAME, SLURM_GPUS
(from --gpus), SLURM_GPUS_ON_NODE and CUDA_VISIBLE_DEVICES=0,..,g-1 (the batch step holds the first
node's GPUs). srun finds the allocation from SLURM_JOB_ID (the job sbatch recorded; failing that,
SLURM_JOB_NODELIST with FAKE_SLURM_GPUS_PER_NODE GPUs on each node, as a hand-made allocation in a
test; a test may also write $FAKE_SLURM_DIR/jobs/<id>.json as {"name": "", "state": "RUNNING", "alloc":
{"nodes": [...], "gpus_per_node": g}} for an allocation made elsewhere, as by salloc) and makes a step of it:
  - nodes: -N/--nodes, else as many as -w/--nodelist names, else min(tasks, the allocation's nodes);
    tasks: -n/--ntasks, else nodes x --ntasks-per-node, else one per node. Options missing from the
    command line are read from the input environment as srun reads it (SLURM_NNODES, SLURM_NTASKS /
    SLURM_NPROCS, SLURM_NTASKS_PER_NODE, SLURM_GPUS, SLURM_GPUS_PER_NODE), so a nested srun that
    inherits them from its job gets them too (an inherited SLURM_NNODES gives way to a smaller -n).
  - fewer tasks than nodes is an error (real srun warns "can't run 1 processes on 2 nodes, setting
    nnodes to 1" and goes on with fewer nodes than were asked for, which for us is always the bug).
  - GPUs per node: --gpus=[type:]N (the step's total, split over its nodes), --gpus-per-node=[type:]N,
    --gpus-per-task=N (x tasks per node) or --gres=gpu[:type]:N (--gres=none: none); --gres=gpu and
    --gpus* together are refused. A step that asks for no GPU gets none: real Slurm may give it the
    job's GPUs (srun's default GRES; overlapping steps sharing GRES) or not (older versions, device
    cgroups), so a step that needs GPUs must ask for them. More per node than the allocation has ->
    "Unable to create step ... Requested node configuration is not available", exit 1. GPUs held by
    a live step are busy for a new step unless the new one has --overlap (real srun would wait;
    this one fails at once: "Requested nodes are busy").
  - -w/--nodelist: the nodes must be in the allocation.
  Each task runs with SLURM_STEP_ID, SLURM_STEP_NODELIST, SLURM_STEP_NUM_NODES, SLURM_NNODES,
  SLURM_NTASKS, SLURM_PROCID, SLURM_NODEID, SLURMD_NODENAME (its node), SLURM_GPUS_ON_NODE and
  CUDA_VISIBLE_DEVICES=0,..,g-1 for the GPUs its step got on its node (both unset when none); one
  task is exec'd (srun's pid is the task's), several run side by side and srun exits with the
  highest status. Each step is recorded in $FAKE_SLURM_DIR/steps.jsonl ({"job", "step", "pid",
  "nodes", "ntasks", "gpus_per_node", "overlap", "argv"}); a failed one as {"error": ...}.

A job runs in its own session; when its script exits, what is left of it is killed, as Slurm ends
a job's processes with the job.

Time limits, as slurmd enforces them: a job's `-t/--time` (minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM,
D-HH:MM:SS; what the executor plugin passes from the `runtime` resource) ends it at the limit --
SIGTERM to every process of the job, SIGKILL to what is left KillWait (FAKE_SLURM_KILL_WAIT, default 30)
seconds later -- in state TIMEOUT. `--signal=[{R|B}:]SIG[@N]` (SIG a number or a name, USR1 or SIGUSR1;
N seconds, default 60) sends SIG N seconds before the limit: with `B:` to the batch shell only, without
it to the job's steps (srun's tasks), as sbatch(1) says. FAKE_SLURM_SECONDS_PER_MINUTE (default 60)
makes a limit minute shorter, so a test can give a job a limit of "1 minute" that lasts a few seconds;
N stays in real seconds (the time a job has to save). The batch script gets SLURM_JOB_END_TIME, and
`squeue -h -j <id> -o %L` prints the time the job has left, as rtpo.signals reads them. What happened is recorded in the job's file
(jobs/<id>.json: "limit_s", "signals": [{"sig", "at_s", "to"}], "killed"; every job: "start", "end").

Preemption-style kills: with FAKE_SLURM_KILL_MATCH set, the first job whose --comment
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
              "-w", "--nodelist", "--gpus-per-node", "--gpus-per-task", "--ntasks-per-node", "--mem-per-gpu",
              "--cpus-per-gpu", "--ntasks-per-gpu", "--distribution", "-m", "-j", "--jobs"}


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
    try:
        alloc = allocate(opts)
    except SlurmError as e:
        print(f"sbatch: error: Batch job submission failed: {e}", file=sys.stderr)
        return 1
    gpus = opts.get("--gpus", opts.get("-G"))
    if gpus:
        env["SLURM_GPUS"] = gpus
    nodes = alloc["nodes"]
    env.update(SLURM_JOB_NODELIST=",".join(nodes), SLURM_NODELIST=",".join(nodes), SLURM_JOB_NUM_NODES=str(len(nodes)),
               SLURM_NNODES=str(len(nodes)), SLURMD_NODENAME=nodes[0])
    for k in ("--ntasks", "-n"):
        if k in opts:
            env["SLURM_NTASKS"] = env["SLURM_NPROCS"] = opts[k]
    set_gpu_env(env, alloc["gpus_per_node"])  # the batch step holds the first node's GPUs
    try:
        limit = time_limit(opts)
    except SlurmError as e:
        print(f"sbatch: error: {e}", file=sys.stderr)
        return 1
    end_time = time.time() + limit["limit_s"] if limit else None
    if end_time:
        env["SLURM_JOB_END_TIME"] = str(int(end_time))
    started = time.time()
    job_file(job_id).write_text(json.dumps({"name": name, "state": "RUNNING", "opts": opts, "alloc": alloc,
                                            "end_time": end_time, "start": started}))
    kill = kill_plan(opts, workdir)
    with open(log_path, "w") as out:
        proc = subprocess.Popen(["/bin/sh", "-c", script], cwd=workdir, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
        killed = run_job(proc, kill, limit, job_id)
    rc = proc.returncode
    state = killed["state"] if killed else "COMPLETED" if rc == 0 else "FAILED"
    job_file(job_id).write_text(json.dumps({"name": name, "state": state, "rc": rc, "opts": opts, "alloc": alloc,
                                            "start": started, "end": time.time(),
                                            **({"limit_s": limit["limit_s"], "signals": limit["sent"]} if limit else {}),
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


def parse_time(spec: str) -> float:
    """Slurm's time formats -> minutes: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S."""
    try:
        days, _, rest = spec.rpartition("-") if "-" in spec else ("0", "", spec)
        parts = [float(x) for x in rest.split(":")]
        if "-" in spec:  # D-H, D-H:M, D-H:M:S
            h, m, sec = (parts + [0, 0])[:3]
        elif len(parts) == 1:
            h, m, sec = 0, parts[0], 0
        elif len(parts) == 2:
            h, m, sec = 0, parts[0], parts[1]
        else:
            h, m, sec = parts[:3]
        return float(days or 0) * 1440 + h * 60 + m + sec / 60
    except ValueError:
        raise SlurmError(f"Invalid time limit specification (--time={spec})") from None


def parse_signal(spec: str) -> dict:
    """`--signal=[{R|B}:]SIG[@N]` -> {"sig": number, "ahead_s": N, "batch": bool}."""
    flags, _, rest = spec.rpartition(":")
    sig, _, ahead = rest.partition("@")
    try:
        num = int(sig) if sig.isdigit() else int(getattr(signal, sig if sig.startswith("SIG") else f"SIG{sig}"))
        return {"sig": num, "ahead_s": float(ahead or 60), "batch": "B" in flags}
    except (AttributeError, ValueError):
        raise SlurmError(f"Invalid --signal specification: {spec}") from None


def time_limit(opts: dict[str, str]) -> dict | None:
    """The job's time limit in (scaled) seconds and its warning signal, or None without --time."""
    spec = opts.get("--time", opts.get("-t"))
    if spec is None:
        return None
    scale = float(os.environ.get("FAKE_SLURM_SECONDS_PER_MINUTE", "60"))
    warn = parse_signal(opts["--signal"]) if "--signal" in opts else None
    return {"limit_s": parse_time(spec) * scale, "warn": warn, "sent": [],
            "wait": float(os.environ.get("FAKE_SLURM_KILL_WAIT", "30"))}


def _step_pids(job_id: str) -> list[int]:
    """The live processes srun started for this job (its steps' tasks)."""
    f = state_dir() / "steps.jsonl"
    lines = f.read_text().splitlines() if f.exists() else []
    return [e["pid"] for e in map(json.loads, lines) if e.get("job") == job_id and "pid" in e and _alive(e["pid"])]


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


def run_job(proc: subprocess.Popen, kill: dict | None, limit: dict | None = None, job_id: str = "") -> dict | None:
    """Wait for the job; carry out `kill` when its condition holds, and the time limit's warning signal
    and kill. Returns what was done ({"state", "sigterm_at", ...}), or None.

    As slurmd ends a job at its time limit: SIGTERM to every process of the job, then up to KillWait
    for all of them to exit (the batch shell may die at once; the job steps it started get the
    whole grace time), then SIGKILL. A job that ends by itself has what it left behind killed.
    """
    done = None
    start = time.time()
    while proc.poll() is None or (done and _job_alive(proc)):
        elapsed = time.time() - start
        warn = limit and limit["warn"]
        if warn and not limit["sent"] and done is None and elapsed >= limit["limit_s"] - warn["ahead_s"]:
            pids = [proc.pid] if warn["batch"] else _step_pids(job_id)
            for pid in pids:
                try:
                    os.kill(pid, warn["sig"])
                except ProcessLookupError:
                    pass
            limit["sent"].append({"sig": warn["sig"], "at_s": round(elapsed, 2), "to": pids})
        if limit and done is None and elapsed >= limit["limit_s"]:
            _signal_job(proc, signal.SIGTERM)
            done = {"state": "TIMEOUT", "sigterm_at": time.time(), "wait": limit["wait"], "limit_s": limit["limit_s"]}
            kill = done
        if kill and done is None:
            f = kill["file"]
            if f is None or (f.exists() and kill["text"] in f.read_text(errors="replace")):
                _signal_job(proc, signal.SIGTERM)
                done = {"state": kill["state"], "sigterm_at": time.time()}
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


def left(seconds: float) -> str:
    """squeue's %L: [days-]hours:minutes:seconds."""
    s = max(0, int(seconds))
    d, s = divmod(s, 86400)
    return (f"{d}-" if d else "") + f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"


def squeue(argv: list[str]) -> int:
    opts, _ = parse(argv, stop_at_positional=False)
    if "%L" in opts.get("-o", opts.get("--format", "")) and "-j" in opts:  # the time a job has left
        j = json.loads(job_file(opts["-j"]).read_text()) if job_file(opts["-j"]).exists() else {}
        print(left(j["end_time"] - time.time()) if j.get("end_time") else "UNLIMITED")
        return 0
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
    elif "show" in argv and "job" in argv:  # scontrol [-o] show job <id>: the fields a script reads
        job_id = argv[argv.index("job") + 1] if argv.index("job") + 1 < len(argv) else ""
        if not job_id or not job_file(job_id).exists():
            print(f"slurm_load_jobs error: Invalid job id specified ({job_id})", file=sys.stderr)
            return 1
        j = json.loads(job_file(job_id).read_text())
        alloc = j.get("alloc") or {"nodes": [], "gpus_per_node": 0}
        nodes, gpn = alloc["nodes"], alloc["gpus_per_node"]
        fields = [f"JobId={job_id}", f"JobName={j['name']}", f"JobState={j['state']}", "ReqNodeList=(null)",
                  "ExcNodeList=(null)", f"NodeList={','.join(nodes)}", f"BatchHost={nodes[0] if nodes else ''}",
                  f"NumNodes={len(nodes)}", f"TRES=cpu=1,node={len(nodes)}" + (f",gres/gpu={gpn * len(nodes)}" if gpn else "")]
        print(" ".join(fields) if "-o" in argv else "\n   ".join(fields))
    return 0


class SlurmError(Exception):
    """A request Slurm refuses; the message is Slurm's reason."""


NO_CONFIG = "Requested node configuration is not available"


def node_gpus() -> int:
    """GPUs on each fake node (the hardware)."""
    return int(os.environ.get("FAKE_SLURM_GPUS_PER_NODE", "8"))


def gpu_count(spec: str, what: str) -> int:
    """`8`, `a100:8` (--gpus*), `gpu:8`, `gpu:a100:8` (--gres) -> 8; `none` -> 0."""
    if spec == "none":
        return 0
    parts = spec.split(",")
    gpu = [p for p in parts if p.split(":")[0] == "gpu"] if what == "--gres" else parts
    if what == "--gres" and not gpu:
        return 0
    m = re.fullmatch(r"(?:gpu:)?(?:[A-Za-z0-9_.-]+:)?(\d+)" if what == "--gres" else r"(?:[A-Za-z0-9_.-]+:)?(\d+)",
                     gpu[0])
    if not m:
        if what == "--gres" and gpu[0] == "gpu":
            return 1
        raise SlurmError(f"Invalid generic resource (gres) specification ({what}={spec})")
    return int(m.group(1))


def gpus_per_node(opts: dict[str, str], nodes: int, tasks_per_node: int) -> int | None:
    """GPUs per node a job or step asks for (None: no GPU option)."""
    gres = opts.get("--gres")
    gpus = {k: opts[k] for k in ("--gpus", "-G", "--gpus-per-node", "--gpus-per-task") if k in opts}
    if gres is not None and gpu_count(gres, "--gres") and gpus:
        raise SlurmError("Invalid generic resource (gres) specification (--gres=gpu and --gpus* together: "
                         f"--gres={gres} {' '.join(f'{k}={v}' for k, v in gpus.items())})")
    if gres is not None and not gpus:
        return gpu_count(gres, "--gres")
    if "--gpus-per-node" in gpus:
        return gpu_count(gpus["--gpus-per-node"], "--gpus-per-node")
    if "--gpus-per-task" in gpus:
        return gpu_count(gpus["--gpus-per-task"], "--gpus-per-task") * tasks_per_node
    total = gpus.get("--gpus", gpus.get("-G"))
    if total is not None:
        n = gpu_count(total, "--gpus")
        return -(-n // nodes)  # spread over the nodes; the busiest node needs this many
    return None


def set_gpu_env(env: dict[str, str], gpus: int) -> None:
    """What slurmd sets for a batch script or task that holds `gpus` GPUs of its node (none: unset)."""
    for k in ("CUDA_VISIBLE_DEVICES", "SLURM_GPUS_ON_NODE", "SLURM_STEP_GPUS", "GPU_DEVICE_ORDINAL"):
        env.pop(k, None)
    if gpus:
        ids = ",".join(str(i) for i in range(gpus))
        env.update(CUDA_VISIBLE_DEVICES=ids, GPU_DEVICE_ORDINAL=ids, SLURM_STEP_GPUS=ids, SLURM_GPUS_ON_NODE=str(gpus))


def allocate(opts: dict[str, str]) -> dict:
    """The nodes and GPUs per node an sbatch gets (SlurmError when no node can hold them)."""
    n = int(opts.get("--nodes", opts.get("-N", "1")).split("-")[0])
    gpn = gpus_per_node(opts, n, 1) or 0
    if gpn > node_gpus():
        raise SlurmError(f"{NO_CONFIG} ({gpn} GPUs per node asked, the nodes have {node_gpus()})")
    prefix = os.environ.get("FAKE_SLURM_NODE_PREFIX", "fakenode")
    return {"nodes": [f"{prefix}{i:02d}" for i in range(1, n + 1)], "gpus_per_node": gpn}


def job_allocation(job_id: str | None) -> dict:
    """The allocation of the job srun runs in: recorded by sbatch, else SLURM_JOB_NODELIST (a test's)."""
    if job_id and job_file(job_id).exists():
        alloc = json.loads(job_file(job_id).read_text()).get("alloc")
        if alloc:
            return alloc
    nodelist = os.environ.get("SLURM_JOB_NODELIST") or os.environ.get("SLURM_NODELIST")
    if not job_id or not nodelist:
        raise SlurmError("no job allocation: SLURM_JOB_ID is not a job here and SLURM_JOB_NODELIST is unset "
                         "(this fake srun only runs steps inside an allocation)")
    return {"nodes": hostnames(nodelist), "gpus_per_node": node_gpus()}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is gone
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def make_step(argv: list[str], opts: dict[str, str]) -> dict:
    """The step srun would create (SlurmError when Slurm would refuse it)."""
    env = os.environ
    job_id = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
    alloc = job_allocation(job_id)
    # options missing from the command line come from srun's input environment
    from_env = set()
    for opt, var in (("--nodes", "SLURM_NNODES"), ("--ntasks", "SLURM_NTASKS"), ("--ntasks", "SLURM_NPROCS"),
                     ("--ntasks-per-node", "SLURM_NTASKS_PER_NODE"), ("--gpus", "SLURM_GPUS"),
                     ("--gpus-per-node", "SLURM_GPUS_PER_NODE")):
        short = {"--nodes": "-N", "--ntasks": "-n", "--gpus": "-G"}.get(opt)
        if opt not in opts and (short is None or short not in opts) and env.get(var):
            opts[opt] = env[var]
            from_env.add(opt)
    listed = hostnames(opts.get("-w", opts.get("--nodelist", ""))) if ("-w" in opts or "--nodelist" in opts) else []
    unknown = [n for n in listed if n not in alloc["nodes"]]
    if unknown:
        raise SlurmError(f"Requested node configuration is not available (nodes {','.join(unknown)} are not in "
                         f"the allocation {','.join(alloc['nodes'])})")
    n_opt = opts.get("--nodes", opts.get("-N"))
    t_opt = opts.get("--ntasks", opts.get("-n"))
    per_node = opts.get("--ntasks-per-node")
    if n_opt is not None:
        nodes = int(n_opt.split("-")[0])
    elif listed:
        nodes = len(set(listed))
    elif t_opt is not None:
        nodes = min(int(t_opt), len(alloc["nodes"]))
    else:
        nodes = len(alloc["nodes"])
    ntasks = int(t_opt) if t_opt is not None else nodes * int(per_node) if per_node else nodes
    if ntasks < nodes and "--nodes" in from_env:  # a node count inherited from the job gives way to -n
        nodes = ntasks
    if ntasks < nodes:
        raise SlurmError(f"can't run {ntasks} processes on {nodes} nodes: more nodes than tasks (real srun warns "
                         f"and sets nnodes to {ntasks}, so the step does not get the nodes it asked for)")
    if nodes > len(alloc["nodes"]):
        raise SlurmError(f"{NO_CONFIG} ({nodes} nodes asked, the allocation has {len(alloc['nodes'])})")
    if len(set(listed)) > nodes:
        raise SlurmError(f"{NO_CONFIG} (-w names {len(set(listed))} nodes, -N is {nodes})")
    step_nodes = list(dict.fromkeys(listed)) + [n for n in alloc["nodes"] if n not in listed]
    step_nodes = step_nodes[:nodes]
    tasks_on = [ntasks // nodes + (1 if i < ntasks % nodes else 0) for i in range(nodes)]
    gpn = gpus_per_node(opts, nodes, max(tasks_on)) or 0
    if gpn > alloc["gpus_per_node"]:
        raise SlurmError(f"{NO_CONFIG} ({gpn} GPUs per node asked on {nodes} node(s), the allocation has "
                         f"{alloc['gpus_per_node']} per node)")
    overlap = "--overlap" in opts
    if gpn and not overlap:
        for line in (state_dir() / "steps.jsonl").read_text().splitlines() if (state_dir() / "steps.jsonl").exists() else []:
            other = json.loads(line)
            if other.get("job") != job_id or "error" in other or not _alive(other["pid"]):
                continue
            for node in set(other["nodes"]) & set(step_nodes):
                held = other["gpus_per_node"]
                if held + gpn > alloc["gpus_per_node"]:
                    raise SlurmError(f"Requested nodes are busy (step {other['step']} holds {held} of the "
                                     f"{alloc['gpus_per_node']} GPUs of {node}; add --overlap to share them. Real "
                                     "srun waits here: 'Job step creation temporarily disabled, retrying')")
    return {"job": job_id, "nodes": step_nodes, "ntasks": ntasks, "tasks_on": tasks_on, "gpus_per_node": gpn,
            "overlap": overlap, "alloc": alloc}


def next_step_id() -> int:
    counter = state_dir() / "next_step"
    with open(state_dir() / "lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        n = int(counter.read_text()) if counter.exists() else 0
        counter.write_text(str(n + 1))
    return n


def record_step(entry: dict) -> None:
    with open(state_dir() / "steps.jsonl", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.write(json.dumps(entry) + "\n")


def srun(argv: list[str]) -> int:
    opts, rest = parse(argv)
    if not rest:
        sys.exit("fake srun: no command")
    try:
        step = make_step(argv, opts)
    except SlurmError as e:
        record_step({"argv": argv, "error": str(e)})
        job = os.environ.get("SLURM_JOB_ID", "?")
        print(f"srun: error: Unable to create step for job {job}: {e}", file=sys.stderr)
        return 1
    step_id = next_step_id()
    alloc = step["alloc"]
    base = dict(os.environ, SLURM_JOB_NODELIST=",".join(alloc["nodes"]), SLURM_NODELIST=",".join(step["nodes"]),
                SLURM_JOB_NUM_NODES=str(len(alloc["nodes"])), SLURM_STEP_ID=str(step_id),
                SLURM_STEP_NODELIST=",".join(step["nodes"]), SLURM_STEP_NUM_NODES=str(len(step["nodes"])),
                SLURM_NNODES=str(len(step["nodes"])), SLURM_NTASKS=str(step["ntasks"]), SLURM_NPROCS=str(step["ntasks"]))
    if step["job"]:
        base.update(SLURM_JOB_ID=step["job"], SLURM_JOBID=step["job"])
    for k in ("SLURM_GPUS", "SLURM_GPUS_PER_NODE", "SLURM_NTASKS_PER_NODE"):  # inputs, not what a task sees
        base.pop(k, None)
    tasks = []
    for i, node in enumerate(step["nodes"]):
        for _ in range(step["tasks_on"][i]):
            env = dict(base, SLURM_PROCID=str(len(tasks)), SLURM_NODEID=str(i), SLURMD_NODENAME=node)
            set_gpu_env(env, step["gpus_per_node"])
            tasks.append(env)
    entry = {k: step[k] for k in ("job", "nodes", "ntasks", "gpus_per_node", "overlap")}
    if len(tasks) == 1:
        record_step({**entry, "step": step_id, "pid": os.getpid(), "argv": argv})
        os.execvpe(rest[0], rest, tasks[0])
        return 127  # not reached
    procs = [subprocess.Popen(rest, env=env) for env in tasks]
    record_step({**entry, "step": step_id, "pid": os.getpid(), "argv": argv})

    def forward(sig, _frame):
        for p in procs:
            if p.poll() is None:
                p.send_signal(sig)
    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    return max(p.wait() for p in procs)


COMMANDS = {"sbatch": sbatch, "srun": srun, "sacct": sacct, "squeue": squeue, "sacctmgr": sacctmgr,
            "scontrol": scontrol}


def main() -> int:
    cmd, argv = sys.argv[1], sys.argv[2:]
    record(cmd, argv)
    return COMMANDS[cmd](argv)


if __name__ == "__main__":
    sys.exit(main())
