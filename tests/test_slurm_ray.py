"""rtpo/verl_ext/slurm_ray.sh, the real script, on a fake allocation: fake srun/scontrol
(tests/fake_slurm/, every "node" is this machine) and a fake `ray` (tests/fake_slurm/fake_ray, as
RAY_BIN) that records what the script starts and answers `ray status` for the nodes it runs.

Checked: the head address (the source address of the route to the second node, RTPO_RAY_IFACE,
RTPO_RAY_HEAD_IP; a loopback head refused on two nodes, accepted on one) and the ports (from the job
id, RTPO_RAY_PORT) that `ray start` gets on the head and the workers, RAY_ADDRESS in the command, the
command's exit status, the wait for every node, and that no Ray process is left when it exits.
tests/test_verl.py::test_slurm_ray_script_starts_a_cluster_and_runs_the_command runs it on real Ray.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "rtpo" / "verl_ext" / "slurm_ray.sh"
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


def run(tmp_path: Path, nodelist: str | None, job: str = "1234", command=COMMAND, bin_: Path | None = None,
        **env_set: str) -> Run:
    cwd = tmp_path / f"run{len(list(tmp_path.glob('run*')))}"
    cwd.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "RTPO_", "RAY_", "FAKE_"))}
    env.update(PATH=os.pathsep.join([*([str(bin_)] if bin_ else []), str(FAKE), os.environ["PATH"]]),
               FAKE_SLURM_DIR=str(cwd / "state"), RAY_BIN=str(FAKE / "fake_ray"), SLURM_JOB_ID=job,
               RTPO_RAY_POLL="0.05", RTPO_RAY_WAIT="20", RTPO_GPUS_PER_NODE="2", **env_set)
    if nodelist is not None:
        env["SLURM_JOB_NODELIST"] = nodelist
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
    assert r.srun_nodes("head_ip_probe") == ["localhost"] and r.srun_nodes("--head") == ["localhost"]
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
    assert r.srun_nodes("head_ip_probe") == ["gpu07"]
    assert r.srun_nodes("--head") == ["gpu07"] and r.srun_nodes(f"--address=10.1.0.7:{port}") == ["gpu08"]

    r = run(tmp_path, "gpu[07-08]", job="5000", bin_=bin_, RTPO_RAY_IFACE="eth9")
    assert r.rc == 7 and r.starts(head=True)[0]["--node-ip-address"] == "172.16.0.7", r
    assert r.seen_address == f"172.16.0.7:{port}" and "interface eth9" in r.stdout


def test_a_ray_node_that_does_not_start_ends_the_script(tmp_path):
    r = run(tmp_path, "localhost", RTPO_RAY_HEAD_IP="127.0.0.1", FAKE_RAY_FAIL="head")
    assert r.rc == 3 and "srun step exited" in r.stderr and r.seen_address is None, r
    r = run(tmp_path, "localhost,localhost", RTPO_RAY_HEAD_IP="127.0.0.1", FAKE_RAY_FAIL="worker")
    assert r.rc == 3 and "srun step exited" in r.stderr and r.seen_address is None, r


def test_outside_an_allocation_or_without_a_command(tmp_path):
    r = run(tmp_path, None)
    assert r.rc == 2 and "not inside a Slurm allocation" in r.stderr and not r.slurm, r
    r = run(tmp_path, "localhost", command=[])
    assert r.rc == 2 and "usage: slurm_ray.sh" in r.stderr and not r.slurm, r
