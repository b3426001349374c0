"""A fake `ray` CLI for testing rtpo/verl_ext/slurm_ray.sh without Ray (RAY_BIN=tests/fake_slurm/fake_ray).

Two commands, the two the script runs; every call appends {"argv", "pid", "ray_address"} to
$FAKE_SLURM_DIR/ray_calls.jsonl (ray_address: the caller's RAY_ADDRESS, or null).

  start ... --block   one Ray "node": writes $FAKE_SLURM_DIR/ray_nodes/<pid>.json with its address
                      (`--head`: <--node-ip-address>:<--port>; a worker: its --address), the Slurm node
                      it runs on (SLURMD_NODENAME, as "host"), its --num-gpus and the GPUs it can see
                      (CUDA_VISIBLE_DEVICES, null when unset: what the fake srun gave its step), then sleeps
                      until it is signalled (SIGTERM ends it, as it ends `ray start --block`).
                      FAKE_RAY_FAIL=head|worker: that kind of node exits 1 at once instead;
                      FAKE_RAY_JOIN_DELAY=<s>: a worker joins (writes its file) only after s seconds.
  status --address=A  as `ray status`: exit 1 ("could not connect") unless a live head is at A, else
                      the real output's node section, one " 1 node_<pid>" line under Active: per live
                      node at A (the head and the workers whose --address is A).
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import sys
import time
from pathlib import Path


def state_dir() -> Path:
    d = os.environ.get("FAKE_SLURM_DIR")
    if not d:
        sys.exit("fake ray: set FAKE_SLURM_DIR to a directory for its state")
    p = Path(d)
    (p / "ray_nodes").mkdir(parents=True, exist_ok=True)
    return p


def opts(argv: list[str]) -> dict[str, str]:
    """`--k=v` and bare `--flag` options (the script passes values with `=`, except --num-cpus/--temp-dir)."""
    out: dict[str, str] = {}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a.startswith("--") and "=" in a:
            k, v = a.split("=", 1)
            out[k] = v
        elif a in ("--num-cpus", "--temp-dir", "--address") and i + 1 < len(argv):
            out[a] = argv[i + 1]
            i += 1
        elif a.startswith("--"):
            out[a] = ""
        i += 1
    return out


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def nodes() -> list[dict]:
    out = []
    for p in sorted((state_dir() / "ray_nodes").glob("*.json")):
        n = json.loads(p.read_text())
        if alive(n["pid"]):
            out.append(n)
    return out


def start(argv: list[str]) -> int:
    o = opts(argv)
    head = "--head" in o
    if os.environ.get("FAKE_RAY_FAIL") == ("head" if head else "worker"):
        print("fake ray: failed to start (FAKE_RAY_FAIL)", file=sys.stderr)
        return 1
    address = f"{o.get('--node-ip-address', '127.0.0.1')}:{o.get('--port', '6379')}" if head else o["--address"]
    if not head:
        time.sleep(float(os.environ.get("FAKE_RAY_JOIN_DELAY", "0")))
    node = state_dir() / "ray_nodes" / f"{os.getpid()}.json"
    node.write_text(json.dumps({"pid": os.getpid(), "head": head, "address": address,
                                "host": os.environ.get("SLURMD_NODENAME"), "num_gpus": o.get("--num-gpus"),
                                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}))
    if "--block" not in o:
        return 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        time.sleep(60)


def status(argv: list[str]) -> int:
    address = opts(argv).get("--address", os.environ.get("RAY_ADDRESS", ""))
    at = [n for n in nodes() if n["address"] == address]
    if not any(n["head"] for n in at):
        print(f"ConnectionError: could not connect to a Ray cluster at {address}", file=sys.stderr)
        return 1
    print("======== Autoscaler status: 2025-01-01 00:00:00.000000 ========")
    print("Node status\n" + "-" * 63 + "\nActive:")
    print("\n".join(f" 1 node_{n['pid']:040x}" for n in at))
    print("Idle:\n (no idle nodes)\nPending:\n (no pending nodes)\nRecent failures:\n (no failures)\n")
    print("Resources\n" + "-" * 63 + "\nTotal Usage:\n 0.0/2.0 CPU\n 0.0/1.0 GPU")
    return 0


def main() -> int:
    cmd, argv = sys.argv[1] if len(sys.argv) > 1 else "", sys.argv[2:]
    with open(state_dir() / "ray_calls.jsonl", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.write(json.dumps({"argv": sys.argv[1:], "pid": os.getpid(), "ray_address": os.environ.get("RAY_ADDRESS")})
                + "\n")
    if cmd == "start":
        return start(argv)
    if cmd == "status":
        return status(argv)
    print(f"fake ray: no command {cmd!r}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
