"""rtpo/verl_ext/slurm_ray.sh, the real script, on a fake allocation: fake srun/scontrol/sbatch
(tests/fake_slurm/, every "node" is this machine; srun checks its options against the allocation as
real srun does and hands a step the GPUs it asked for as CUDA_VISIBLE_DEVICES) and a fake `ray`
(tests/fake_slurm/fake_ray, as RAY_BIN) that records what the script starts, where and with which
GPUs, and answers `ray status` for the nodes it runs.

Checked: the head address (the source address of the route to the second node, RTPO_RAY_IFACE,
RTPO_RAY_HEAD_IP; a loopback head refused on two nodes, accepted on one) and the ports (from the job
id, RTPO_RAY_PORT) that `ray start` gets on the head and the workers, RAY_ADDRESS in the command, the
command's exit status, the wait for every node, and that no Ray process is left when it exits.
Issue 37: the Slurm profile's training resources, turned into sbatch and job-step lines by the
installed executor plugins, launch on one and on two nodes, with the Ray head and every worker on
its node's 8 GPUs; the fake srun refuses what real srun cannot place.
tests/test_verl.py::test_slurm_ray_script_starts_a_cluster_and_runs_the_command runs it on real Ray.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "rtpo" / "verl_ext" / "slurm_ray.sh"
PROFILE = ROOT / "workflow" / "profiles" / "default" / "profile.yaml"  # the workflow profile: per-rule resources
SITE_PROFILE = ROOT / "slurm" / "profile.yaml"  # executor, account, partitions
FAKE = ROOT / "tests" / "fake_slurm"
# the command the script runs: what it sees, and an exit status the script must hand back
COMMAND = ["sh", "-c", 'echo "$RAY_ADDRESS" > seen_address; grep -l \'"head": false\' "$FAKE_SLURM_DIR"/ray_nodes/*.json '
                       '2>/dev/null | wc -l > seen_workers; exit 7']


class Run:
    def __init__(self, res: subprocess.CompletedProcess, cwd: Path):
        self.rc, self.stdout, self.stderr = res.returncode, res.stdout, res.stderr
        state = cwd / "state"
        self.slurm = _jsonl(state / "calls.jsonl")
        self.ray = [c["argv"] for c in _jsonl(state / "ray_calls.jsonl")]
        self.nodes = [json.loads(p.read_text()) for p in sorted((state / "ray_nodes").glob("*.json"))]
        self.seen_address = (cwd / "seen_address").read_text().strip() if (cwd / "seen_address").exists() else None
        self.seen_workers = int((cwd / "seen_workers").read_text()) if (cwd / "seen_workers").exists() else None

    def starts(self, head: bool) -> list[dict[str, str]]:
        """The `ray start` calls (as {option: value}) for the head or the workers."""
        return [_opts(a[1:]) for a in self.ray if a[0] == "start" and ("--head" in a) == head]

    def sruns(self) -> list[list[str]]:
        return [c["argv"] for c in self.slurm if c["cmd"] == "srun"]

    def srun_nodes(self, what: str) -> list[str]:
        """The -w node of each srun whose command contains `what`."""
        return [c["argv"][c["argv"].index("-w") + 1] for c in self.slurm
                if c["cmd"] == "srun" and any(what in a for a in c["argv"])]

    def __repr__(self) -> str:
        return f"rc={self.rc}\nstdout:\n{self.stdout}\nstderr:\n{self.stderr}"


def _jsonl(p: Path) -> list[dict]:
    return [json.loads(line) for line in p.read_text().splitlines()] if p.exists() else []


def _opts(argv: list[str]) -> dict[str, str]:
    return dict(a.split("=", 1) if "=" in a else (a, "") for a in argv if a.startswith("--"))


def clean_env() -> dict[str, str]:
    """This process's environment without Slurm's, Ray's, the fakes' and the script's variables."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("SLURM_", "SLURMD_", "SRUN_", "SBATCH_", "RTPO_", "RAY_", "FAKE_"))
            and k != "CUDA_VISIBLE_DEVICES"}


def run(tmp_path: Path, nodelist: str | None, job: str = "1234", command=COMMAND, bin_: Path | None = None,
        gpus_per_node: int = 8, **env_set: str) -> Run:
    """The script in a job step on the first node of an allocation of `nodelist` (made as salloc would:
    the controller knows it by job id), `gpus_per_node` GPUs on each node; Ray told
    RTPO_GPUS_PER_NODE=2 unless env_set says (a value None removes a variable)."""
    cwd = tmp_path / f"run{len(list(tmp_path.glob('run*')))}"
    cwd.mkdir()
    env = clean_env()
    env.update(PATH=os.pathsep.join([*([str(bin_)] if bin_ else []), str(FAKE), os.environ["PATH"]]),
               FAKE_SLURM_DIR=str(cwd / "state"), RAY_BIN=str(FAKE / "fake_ray"), SLURM_JOB_ID=job,
               RTPO_RAY_POLL="0.05", RTPO_RAY_WAIT="20", RTPO_GPUS_PER_NODE="2")
    if nodelist is not None:
        env["SLURM_JOB_NODELIST"] = nodelist
        nodes = subprocess.run([str(FAKE / "scontrol"), "show", "hostnames", nodelist], env=env, capture_output=True,
                               text=True, check=True).stdout.split()
        env["SLURMD_NODENAME"] = nodes[0]  # in a job step on the first node, as `rtpo train` runs it
    env.update(env_set)
    env = {k: v for k, v in env.items() if v is not None}
    if nodelist is not None:
        (cwd / "state" / "jobs").mkdir(parents=True, exist_ok=True)  # the scontrol call made state/
        (cwd / "state" / "jobs" / f"{job}.json").write_text(json.dumps(
            {"name": "", "state": "RUNNING", "alloc": {"nodes": nodes, "gpus_per_node": gpus_per_node}}))
        (cwd / "state" / "calls.jsonl").unlink()
    res = subprocess.run(["bash", str(SCRIPT), *command], env=env, cwd=cwd, capture_output=True, text=True,
                         timeout=60)
    r = Run(res, cwd)
    for n in r.nodes:  # every Ray "node" the script started is gone once it has exited
        assert not Path(f"/proc/{n['pid']}").exists(), f"Ray node {n} left running\n{r}"
    return r


def port_of(job: int) -> int:
    return 20000 + 3 * (job % 4000)


def route_src(dest: str) -> str | None:
    """The source address `ip route get` gives for dest here, or None without a working `ip`."""
    if not shutil.which("ip"):
        return None
    out = subprocess.run(["ip", "-4", "-o", "route", "get", dest], capture_output=True, text=True).stdout
    m = re.search(r"\bsrc (\S+)", out)
    return m.group(1) if m else None


def test_one_node_head_address_ports_command_and_cleanup(tmp_path):
    r = run(tmp_path, "localhost", job="1234")
    assert r.rc == 7, r  # the command's exit status
    [head] = r.starts(head=True)
    assert r.starts(head=False) == []
    ip, port = head["--node-ip-address"], port_of(1234)
    assert re.fullmatch(r"\d+\.\d+\.\d+\.\d+", ip), r
    expected = route_src("192.0.2.1")  # the default route's source address, when this machine has one
    if expected:
        assert ip == expected, r
    assert (head["--port"], head["--ray-client-server-port"], head["--dashboard-agent-listen-port"]) == \
        (str(port), str(port + 1), str(port + 2))
    assert head["--num-gpus"] == "2" and "--block" in head
    assert r.seen_address == f"{ip}:{port}", r  # RAY_ADDRESS in the command
    assert {a[1] for a in r.ray if a[0] == "status"} == {f"--address={ip}:{port}"}
    assert r.sruns() == []  # one node: the probe and the head run here, in the caller's job step
    assert f"head localhost ({ip}:{port}" in r.stdout
    assert len(r.nodes) == 1 and r.nodes[0]["head"]

    ok = run(tmp_path, "localhost", command=["true"])
    assert ok.rc == 0, ok


def test_ports_follow_the_job_id_unless_rtpo_ray_port(tmp_path):
    ports = {}
    for job in (1234, 1235):
        r = run(tmp_path, "localhost", job=str(job), RTPO_RAY_HEAD_IP="127.0.0.1")
        assert r.rc == 7, r
        [head] = r.starts(head=True)
        ports[job] = [int(head[k]) for k in ("--port", "--ray-client-server-port", "--dashboard-agent-listen-port")]
        assert r.seen_address == f"127.0.0.1:{ports[job][0]}"
    assert ports[1234] == [23702, 23703, 23704] and ports[1235] == [23705, 23706, 23707]
    # clear of Ray's defaults (6379, 8265, 10001, 52365), its worker ports and Linux's ephemeral ones
    for job in (0, 3999, 4000, 123456789):
        p = port_of(job)
        assert 20000 <= p and p + 2 < 32768
    r = run(tmp_path, "localhost", job="1234", RTPO_RAY_HEAD_IP="127.0.0.1", RTPO_RAY_PORT="31000")
    [head] = r.starts(head=True)
    assert (head["--port"], head["--ray-client-server-port"], head["--dashboard-agent-listen-port"]) == \
        ("31000", "31001", "31002") and r.seen_address == "127.0.0.1:31000", r
    bad = run(tmp_path, "localhost", RTPO_RAY_PORT="6379x")
    assert bad.rc == 2 and "RTPO_RAY_PORT=6379x" in bad.stderr and not bad.ray, bad


def test_two_nodes_on_loopback_are_refused_unless_rtpo_ray_head_ip(tmp_path):
    if not (route_src("127.0.0.1") or "").startswith("127."):
        pytest.skip("no `ip route get` here")
    # both "nodes" are this machine: the head reaches the second one over loopback
    r = run(tmp_path, "localhost,localhost")
    assert r.rc == 2, r
    assert "loopback address 127." in r.stderr and "RTPO_RAY_HEAD_IP" in r.stderr and "RTPO_RAY_IFACE" in r.stderr
    assert r.ray == [] and r.seen_address is None  # nothing started, the command not run

    r = run(tmp_path, "localhost,localhost", job="77", RTPO_RAY_HEAD_IP="127.0.0.1", FAKE_RAY_JOIN_DELAY="0.5")
    assert r.rc == 7, r
    port = port_of(77)
    [head], [worker] = r.starts(head=True), r.starts(head=False)
    assert head["--node-ip-address"] == "127.0.0.1" and head["--port"] == str(port)
    assert worker["--address"] == f"127.0.0.1:{port}" and worker["--dashboard-agent-listen-port"] == str(port + 2)
    assert worker["--num-gpus"] == "2" and "--block" in worker
    assert r.seen_address == f"127.0.0.1:{port}"
    assert r.seen_workers == 1, r  # the command ran only once the (slow) worker had joined
    assert len(r.nodes) == 2


def _fake_network(tmp_path: Path) -> Path:
    """Stub `ip`, `getent`, `hostname` for a head gpu07 on Debian-style /etc/hosts (its name is 127.0.1.1)
    whose route to gpu08 (10.1.0.8) leaves from 10.1.0.7 on ib0, default route from eth0, and an eth9."""
    bin_ = tmp_path / "netbin"
    bin_.mkdir()
    stubs = {
        "getent": 'case "$2" in gpu08) echo "10.1.0.8        STREAM gpu08";; *) exit 2;; esac\n',
        "ip": 'case "$*" in\n'
              '  "-4 -o route get 10.1.0.8") echo "10.1.0.8 dev ib0 src 10.1.0.7 uid 1000 \\    cache";;\n'
              '  "-4 -o route get "*) echo "$5 via 192.168.0.1 dev eth0 src 192.168.0.7 uid 1000 \\    cache";;\n'
              '  "-4 -o addr show dev eth9") echo "3: eth9    inet 172.16.0.7/16 brd 172.16.255.255 scope global eth9";;\n'
              '  *) exit 1;;\nesac\n',
        "hostname": 'case "$1" in --ip-address|-i) echo 127.0.1.1;; -I) echo "192.168.0.7 10.1.0.7";; *) echo gpu07;; esac\n',
    }
    for name, body in stubs.items():
        (bin_ / name).write_text("#!/bin/sh\n" + body)
        (bin_ / name).chmod(0o755)
    return bin_


def test_head_address_is_the_source_of_the_route_to_the_other_node(tmp_path):
    bin_ = _fake_network(tmp_path)
    r = run(tmp_path, "gpu[07-08]", job="5000", bin_=bin_)
    assert r.rc == 7, r
    port = port_of(5000)
    [head], [worker] = r.starts(head=True), r.starts(head=False)
    assert head["--node-ip-address"] == "10.1.0.7", r  # not 127.0.1.1 (hostname), not eth0 (default route)
    assert worker["--address"] == f"10.1.0.7:{port}" and r.seen_address == f"10.1.0.7:{port}"
    assert r.srun_nodes("head_ip_probe") == [] and r.srun_nodes("--head") == []  # both run here, on gpu07
    assert r.srun_nodes(f"--address=10.1.0.7:{port}") == ["gpu08"]

    r = run(tmp_path, "gpu[07-08]", job="5000", bin_=bin_, RTPO_RAY_IFACE="eth9")
    assert r.rc == 7 and r.starts(head=True)[0]["--node-ip-address"] == "172.16.0.7", r
    assert r.seen_address == f"172.16.0.7:{port}" and "interface eth9" in r.stdout


def test_a_ray_node_that_does_not_start_ends_the_script(tmp_path):
    r = run(tmp_path, "localhost", RTPO_RAY_HEAD_IP="127.0.0.1", FAKE_RAY_FAIL="head")
    assert r.rc == 3 and "exited before the cluster was up" in r.stderr and r.seen_address is None, r
    r = run(tmp_path, "localhost,localhost", RTPO_RAY_HEAD_IP="127.0.0.1", FAKE_RAY_FAIL="worker")
    assert r.rc == 3 and "exited before the cluster was up" in r.stderr and r.seen_address is None, r


def test_outside_an_allocation_or_without_a_command(tmp_path):
    r = run(tmp_path, None, SLURM_JOB_ID=None)
    assert r.rc == 2 and "not inside a Slurm allocation" in r.stderr and not r.slurm, r
    r = run(tmp_path, None)  # a job id the controller does not know, and no node list
    assert r.rc == 2 and "not inside a Slurm allocation" in r.stderr and not r.sruns() and not r.ray, r
    r = run(tmp_path, "localhost", command=[])
    assert r.rc == 2 and "usage: slurm_ray.sh" in r.stderr and not r.slurm, r


def test_from_a_shell_outside_the_nodes_the_head_runs_in_a_step_with_the_gpus(tmp_path):
    """salloc's shell (on the login node: no SLURMD_NODENAME): the address probe and the Ray head run in
    steps on the first node, the head's asking for the node's GPUs as a worker's does; with SLURM_GPUS
    and SLURM_NNODES of the allocation in the environment, which the steps must not inherit."""
    r = run(tmp_path, "gpu[07-08]", job="77", SLURMD_NODENAME=None, RTPO_RAY_HEAD_IP="10.1.0.7",
            RTPO_GPUS_PER_NODE=None, SLURM_GPUS_ON_NODE=None, SLURM_GPUS="16", SLURM_NNODES="2",
            SLURM_JOB_CPUS_PER_NODE="64(x2)")
    assert r.rc == 7, r
    [head], [worker] = r.starts(head=True), r.starts(head=False)
    assert head["--num-gpus"] == "8" and worker["--num-gpus"] == "8", r.ray
    assert all(a[a.index("--num-cpus") + 1] == "64" for a in r.ray if a[0] == "start"), r.ray
    assert sorted((n["head"], n["host"], n["cuda_visible_devices"]) for n in r.nodes) == \
        [(False, "gpu08", "0,1,2,3,4,5,6,7"), (True, "gpu07", "0,1,2,3,4,5,6,7")], r.nodes
    assert r.srun_nodes("--head") == ["gpu07"] and r.srun_nodes("--address=") == ["gpu08"]
    for argv in r.sruns():
        assert argv[:6] == ["--overlap", "--nodes=1", "--ntasks=1", "--gres=gpu:8", "--cpus-per-task=64",
                            "--mem=0"], argv


def test_a_step_without_the_gpus_is_refused_before_ray_starts(tmp_path):
    """In a job step that holds fewer GPUs than Ray would be told, the script stops (exit 2) and names
    CUDA_VISIBLE_DEVICES, instead of a Ray head whose GPU workers find no device."""
    r = run(tmp_path, "localhost", RTPO_GPUS_PER_NODE=None, SLURM_GPUS_ON_NODE="8", CUDA_VISIBLE_DEVICES="0,1")
    assert r.rc == 2 and "sees 2 GPU(s) (CUDA_VISIBLE_DEVICES=0,1)" in r.stderr and not r.ray, r
    r = run(tmp_path, "localhost", RTPO_GPUS_PER_NODE=None, CUDA_VISIBLE_DEVICES="0,1,2,3")
    assert r.rc == 7 and r.starts(head=True)[0]["--num-gpus"] == "4", r  # the default: the GPUs it sees


# ------------------------------------------------------------------------------------------------
# the profile's training jobs on one and two nodes, through the executor plugins' lines
# ------------------------------------------------------------------------------------------------

class _Resources(dict):
    """job.resources as the plugins read it: .get() and attribute access."""

    def __getattr__(self, key):
        try:
            return self[key]
        except KeyError:
            raise AttributeError(key) from None


class _Job:
    def __init__(self, resources: dict):
        self.resources = _Resources(resources)
        self.threads = 1

    def is_group(self) -> bool:
        return False


# SLURM_* the jobstep executor keeps for the job it runs (its run_job: every other SLURM_*, SRUN_*
# and SBATCH_* variable is removed, in the batch script and in its srun step alike)
JOBSTEP_KEEP = ["SLURM_JOB_ID", "SLURM_JOBID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_MIN",
                "SLURM_ARRAY_TASK_MAX", "SLURM_ARRAY_TASK_STEP", "SLURM_CLUSTER_NAME", "SLURM_SUBMIT_DIR",
                "SLURM_SUBMIT_HOST"]


def plugin_lines(resources: dict) -> tuple[list[str], str | None]:
    """What the installed plugins make of a rule's resources: the sbatch options (submit plugin 2.8:
    get_submit_command + set_gres_string, as its run_job joins them) and the job-step prefix the
    jobstep plugin (0.6.x) runs the job with inside the batch script (its run_job: no srun when the
    job has an `mpi` resource, else `srun -n1 --cpu-bind=q <cpus> <gpus> <nodes>`)."""
    import shlex

    from snakemake_executor_plugin_slurm.submit_string import get_submit_command
    from snakemake_executor_plugin_slurm.utils import set_gres_string
    from snakemake_executor_plugin_slurm_jobstep import get_cpu_setting, get_gpu_setting, get_node_setting

    job = _Job(resources)
    params = {"run_uuid": "uuid", "slurm_logfile": "slurm-%j.out", "comment_str": "rule_train_grpo",
              "account": "-A acct", "partition": "-p gpu", "workdir": None}
    sbatch = get_submit_command(job, params) + set_gres_string(job)
    srun = None
    if "mpi" not in job.resources:
        srun = " ".join(["srun -n1 --cpu-bind=q", get_cpu_setting(job, True), get_gpu_setting(job), get_node_setting(job)])
    return shlex.split(sbatch)[1:], srun


def profile_train(nodes: int, profile: Path = PROFILE) -> dict:
    """train_grpo's resources in the Slurm profile, on `nodes` nodes (gpu: 8 per node, as the
    profile's comments say to edit it), with the values a real run gives its environment variables."""
    res = dict(yaml.safe_load(profile.read_text())["set-resources"]["train_grpo"])
    res.update(nodes=nodes, gpu=8 * nodes, slurm_partition="gpu")
    return res


def run_job(tmp_path: Path, resources: dict, script: Path = SCRIPT, **env_set: str) -> tuple[Run, list[str], str | None]:
    """sbatch with the plugins' options; in the batch script, what the jobstep plugin does (remove
    SLURM_*, then its srun line, if any) around `bash slurm_ray.sh COMMAND`, as `rtpo train` runs it."""
    import shlex

    sbatch, srun = plugin_lines(resources)
    cwd = tmp_path / f"run{len(list(tmp_path.glob('run*')))}"
    cwd.mkdir()
    keep = "|".join(JOBSTEP_KEEP)
    wrap = (f'for v in $(compgen -e); do case "$v" in {keep}) ;; SLURM_*|SRUN_*|SBATCH_*) unset "$v";; esac; done; '
            f'{srun or ""} bash {shlex.quote(str(script))} {shlex.join(COMMAND)}; echo "rc=$?" > job_rc')
    env = clean_env()
    env.update(PATH=os.pathsep.join([str(FAKE), os.environ["PATH"]]), FAKE_SLURM_DIR=str(cwd / "state"),
               RAY_BIN=str(FAKE / "fake_ray"), RTPO_RAY_POLL="0.05", RTPO_RAY_WAIT="20",
               RTPO_RAY_HEAD_IP="127.0.0.1", FAKE_SLURM_GPUS_PER_NODE="8", **env_set)
    res = subprocess.run([str(FAKE / "sbatch"), "--parsable", *sbatch, "-D", str(cwd), "--output", "job.log",
                          "--wrap=" + f"bash -c {shlex.quote(wrap)}"], env=env, cwd=cwd, capture_output=True,
                         text=True, timeout=120)
    log = (cwd / "job.log").read_text() if (cwd / "job.log").exists() else ""
    job_rc = (cwd / "job_rc").read_text().strip() if (cwd / "job_rc").exists() else "no job_rc"
    r = Run(subprocess.CompletedProcess(res.args, res.returncode, res.stdout + log, res.stderr + f"\n{job_rc}"), cwd)
    r.rc = int(job_rc.removeprefix("rc=")) if job_rc.startswith("rc=") else None
    r.steps = _jsonl(cwd / "state" / "steps.jsonl")
    for n in r.nodes:
        assert not Path(f"/proc/{n['pid']}").exists(), f"Ray node {n} left running\n{r}"
    return r, sbatch, srun


@pytest.mark.parametrize("nodes", [1, 2])
def test_profile_training_job_launches_ray_on_every_gpu(tmp_path, nodes):
    """The profile's training resources on one and on two nodes: the submit plugin's sbatch line and
    the jobstep plugin's srun line (none: `mpi` in the profile) are accepted by the fake Slurm as
    real Slurm would accept them, and slurm_ray.sh starts the Ray head on the first node and one
    worker on each other node, every one of them told 8 GPUs and seeing the 8 its step holds."""
    resources = profile_train(nodes)
    r, sbatch, srun = run_job(tmp_path, resources)
    assert f"--nodes={nodes}" in sbatch and any(a.startswith("--gpus=") and a.endswith(f":{8 * nodes}") for a in sbatch)
    assert not any(a.startswith(("--ntasks", "-n")) for a in sbatch), sbatch  # one task per node (Slurm's default)
    assert [s for s in r.steps if "error" in s] == [], r.steps
    assert r.rc == 7 and r.seen_address == f"127.0.0.1:{port_of(1000)}", r  # the command ran against the cluster
    [head] = [n for n in r.nodes if n["head"]]
    workers = [n for n in r.nodes if not n["head"]]
    assert head["host"] == "fakenode01" and head["num_gpus"] == "8", r.nodes
    assert head["cuda_visible_devices"] == "0,1,2,3,4,5,6,7", r.nodes  # the head sees the node's GPUs
    assert sorted(w["host"] for w in workers) == [f"fakenode{i:02d}" for i in range(2, nodes + 1)], r.nodes
    for w in workers:
        assert w["num_gpus"] == "8" and w["cuda_visible_devices"] == "0,1,2,3,4,5,6,7", r.nodes
    assert r.seen_workers == nodes - 1
    worker_steps = [s for s in r.steps if any("--address=" in a for a in s["argv"])]
    assert [(s["nodes"], s["ntasks"], s["gpus_per_node"], s["overlap"]) for s in worker_steps] == \
        [([f"fakenode{i:02d}"], 1, 8, True) for i in range(2, nodes + 1)]


def test_profile_selects_the_80gb_card_when_told():
    """gpu_model reaches sbatch as --gpus=<model>:<n>; a `constraint` as -C (the 80 GB A100 on
    clusters that name both A100s "a100": the profile's comment)."""
    text = PROFILE.read_text()
    assert re.search(r"^\s*# constraint: a100_80gb", text, re.M) and "80 GB" in text
    res = profile_train(1)
    sbatch, _ = plugin_lines({**res, "constraint": "a100_80gb"})
    assert sbatch[sbatch.index("-C") + 1] == "a100_80gb" and "--gpus=a100:8" in sbatch
    sbatch, _ = plugin_lines({**res, "gpu_model": "a100_80gb"})
    assert "--gpus=a100_80gb:8" in sbatch and "-C" not in sbatch


def fake(cmd: str, *args: str, cwd: Path, **env_set: str) -> subprocess.CompletedProcess:
    env = clean_env()
    env.update(PATH=os.pathsep.join([str(FAKE), os.environ["PATH"]]), FAKE_SLURM_DIR=str(cwd / "state"), **env_set)
    return subprocess.run([str(FAKE / cmd), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=60)


def test_fake_srun_refuses_steps_real_srun_cannot_place(tmp_path):
    """The fake srun's semantics the tests above rely on, inside a two-node allocation of 8 GPUs each."""
    (tmp_path / "show").write_text('#!/bin/sh\necho "$SLURMD_NODENAME $SLURM_PROCID ${CUDA_VISIBLE_DEVICES-none}"\n')
    (tmp_path / "show").chmod(0o755)
    show = tmp_path / "show"
    steps = [
        # the jobstep plugin's line for nodes: 2, gpu: 16 without `mpi`: one task cannot span two nodes
        "srun -n1 --cpu-bind=q --cpus-per-task=64 --gpus=16 --nodes=2 true || echo REFUSED-1",
        "srun -N1 -n1 --gpus-per-node=16 true || echo REFUSED-2",  # more GPUs than a node has
        "srun -N1 -n1 -w nowhere true || echo REFUSED-3",  # a node outside the allocation
        # sbatch's SLURM_GPUS=a100:16 is read as srun's --gpus: with --gres=gpu:8 on one node, refused
        "srun --overlap -N1 -n1 -w fakenode02 --gres=gpu:8 true || echo REFUSED-4",
        f"env -u SLURM_GPUS srun --overlap -N1 -n1 -w fakenode02 --gres=gpu:8 {show}",
        f"env -u SLURM_GPUS srun --overlap -N1 -n1 -w fakenode01 {show}",  # no GPU asked: none
        f"env -u SLURM_GPUS srun -N2 -n2 --gpus-per-node=4 {show}",  # one task per node
        # a step holding all 8 GPUs of fakenode01; a second one needs --overlap to get them
        "env -u SLURM_GPUS srun -N1 -n1 -w fakenode01 --gpus=8 sh -c "
        "'env -u SLURM_GPUS srun -N1 -n1 -w fakenode01 --gres=gpu:8 true || echo REFUSED-5; "
        f"env -u SLURM_GPUS srun --overlap -N1 -n1 -w fakenode01 --gres=gpu:8 {show}'",
    ]
    r = fake("sbatch", "--parsable", "--nodes=2", "--gpus=a100:16", "--output", "job.log",
             "--wrap=" + "; ".join(steps), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    log = (tmp_path / "job.log").read_text()
    for i in range(1, 6):
        assert f"REFUSED-{i}" in log, log
    assert "can't run 1 processes on 2 nodes: more nodes than tasks" in log
    assert "16 GPUs per node asked on 1 node(s), the allocation has 8 per node" in log
    assert "Invalid generic resource (gres) specification" in log and "Requested nodes are busy" in log
    lines = [ln for ln in log.splitlines() if ln.startswith("fakenode")]
    assert sorted(lines) == sorted(["fakenode02 0 0,1,2,3,4,5,6,7", "fakenode01 0 none", "fakenode01 0 0,1,2,3",
                                    "fakenode02 1 0,1,2,3", "fakenode01 0 0,1,2,3,4,5,6,7"]), log
    assert fake("scontrol", "-o", "show", "job", "1000", cwd=tmp_path).stdout.split()[5] == \
        "NodeList=fakenode01,fakenode02"
    # sbatch refuses more GPUs per node than a node has
    bad = fake("sbatch", "--parsable", "--nodes=1", "--gpus=16", "--wrap=true", cwd=tmp_path)
    assert bad.returncode == 1 and "Requested node configuration is not available" in bad.stderr


@pytest.mark.parametrize("request_, sbatch_gpus", [
    ({"gpu": 16}, "--gpus=a100:16"),                             # the job's total (check-config refuses it: uneven)
    ({"gres": "gpu:a100:8", "gpu": None, "gpu_model": None}, "--gres=gpu:a100:8"),  # per node: what slurm/README.md says
])
def test_snakemake_runs_a_two_node_training_job_on_ray_across_both_nodes(tmp_path, request_, sbatch_gpus):
    """End to end with the real Snakemake and executor plugins (fake Slurm commands on PATH): a rule
    named train_grpo with the profile's resources edited to two nodes (nodes: 2, and 16 GPUs as the job's
    total, or 8 per node through gres) is submitted as `sbatch --nodes=2 --gpus=a100:16` (or
    `--gres=gpu:a100:8`), runs in the batch script (the profile's `mpi`, which Snakemake hands to the job),
    and its `bash slurm_ray.sh ...` gets a Ray head on fakenode01 and a worker on fakenode02, each seeing
    8 GPUs."""
    work = tmp_path / "work"
    (work / "prof").mkdir(parents=True)
    (work / "cmd.sh").write_text("echo \"$RAY_ADDRESS\" > seen_address\n"
                                 "grep -l '\"head\": false' \"$FAKE_SLURM_DIR\"/ray_nodes/*.json | wc -l > seen_workers\n")
    (work / "Snakefile").write_text(f'rule train_grpo:\n    output: "seen_address"\n'
                                    f'    shell: "bash {SCRIPT} sh cmd.sh"\n')
    profile = yaml.safe_load(PROFILE.read_text())
    train = {k: v for k, v in {**profile["set-resources"]["train_grpo"], "nodes": 2, **request_}.items() if v is not None}
    (work / "prof" / "config.yaml").write_text(yaml.safe_dump({
        "executor": "slurm", "jobs": 1, "latency-wait": 1, "default-resources": yaml.safe_load(SITE_PROFILE.read_text())["default-resources"],
        "set-resources": {"train_grpo": train}}))
    state = tmp_path / "state"
    env = clean_env()
    env.update(PATH=os.pathsep.join([str(FAKE), str(Path(sys.executable).parent), os.environ["PATH"]]),
               FAKE_SLURM_DIR=str(state), RAY_BIN=str(FAKE / "fake_ray"), RTPO_RAY_POLL="0.05",
               RTPO_RAY_WAIT="20", RTPO_RAY_HEAD_IP="127.0.0.1", RTPO_SLURM_ACCOUNT="rtpo_test",
               RTPO_SLURM_PARTITION="cpu", RTPO_SLURM_GPU_PARTITION="gpu")
    r = subprocess.run([sys.executable, "-m", "snakemake", "--profile", "prof", "--slurm-init-seconds-before-status-checks",
                        "1", "--slurm-keep-successful-logs", "seen_address"], cwd=work, env=env, capture_output=True,
                       text=True, timeout=300)
    logs = "".join(p.read_text() for p in work.glob(".snakemake/slurm_logs/**/*.log"))
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:] + logs[-3000:]
    calls = _jsonl(state / "calls.jsonl")
    [sbatch] = [c["argv"] for c in calls if c["cmd"] == "sbatch"]
    assert "--nodes=2" in sbatch and sbatch_gpus in sbatch, sbatch
    steps = _jsonl(state / "steps.jsonl")
    assert [s for s in steps if "error" in s] == [] and len(steps) == 1, steps  # only the worker's step
    assert steps[0]["nodes"] == ["fakenode02"] and steps[0]["gpus_per_node"] == 8
    nodes = [json.loads(p.read_text()) for p in (state / "ray_nodes").glob("*.json")]
    assert sorted((n["head"], n["host"], n["cuda_visible_devices"]) for n in nodes) == \
        [(False, "fakenode02", "0,1,2,3,4,5,6,7"), (True, "fakenode01", "0,1,2,3,4,5,6,7")], nodes
    assert (work / "seen_address").read_text().strip() == f"127.0.0.1:{port_of(1000)}"
    assert int((work / "seen_workers").read_text()) == 1


RAY = Path(sys.executable).parent / "ray"


@pytest.mark.skipif(not RAY.exists(), reason="no real `ray` executable beside this python")
@pytest.mark.parametrize("token", [False, True])
def test_a_real_ray_head_is_joined_with_and_without_an_auth_token(tmp_path, token):
    """The real Ray 2.60 (not the fake): once ~/.ray/auth_token exists (any earlier local ray.init() writes
    one), `ray start --head` turns token authentication on by itself, while `ray status` (the script's wait)
    and the driver take the mode only from RAY_AUTH_MODE; the script must give all of them one mode, or the
    wait is refused and the job ends with exit 3 after RTPO_RAY_WAIT. Loopback only, one CPU."""
    home = tmp_path / "home"
    (home / ".ray").mkdir(parents=True)
    if token:
        (home / ".ray" / "auth_token").write_text("0123456789abcdef" * 4)
    probe = [sys.executable, "-c", "import ray; ray.init(address='auto'); print('NODES', len(ray.nodes()))"]
    job = str(3000 + os.getpid() % 900 + (7 if token else 0))  # ports 20000 + 3 x job: apart from the other tests'
    r = run(tmp_path, "n1", job=job, command=probe, RAY_BIN=str(RAY), HOME=str(home), RTPO_RAY_HEAD_IP="127.0.0.1",
            RTPO_GPUS_PER_NODE="0", RTPO_CPUS_PER_NODE="1", RTPO_RAY_WAIT="60", RTPO_RAY_POLL="1",
            RTPO_RAY_TMPDIR=str(Path("/tmp") / f"rtpo-ray-{job}"))
    assert r.rc == 0, r
    assert "NODES 1" in r.stdout, r
    # the head's address record is gone with the cluster: a later local ray.init() must not try to join it
    assert not (Path("/tmp") / f"rtpo-ray-{job}" / "ray_current_cluster").exists(), r
