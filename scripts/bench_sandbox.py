"""Per-call cost of the math env's Python sandbox (rtpo.tools.python_sandbox); numbers in docs/security.md.

    nice -n 10 .venv/bin/python scripts/bench_sandbox.py --bench 50 [--vs OLD_CHECKOUT] [--threads 1,4]
    nice -n 10 .venv/bin/python scripts/bench_sandbox.py --phases 50 [--no-fork-server]
    .venv/bin/python scripts/bench_sandbox.py 'print(1+1)'      # run code (or stdin) in the sandbox

--bench times >= N calls of each typical program (wall per call, CPU per call), and with --vs also
the sandbox of another checkout (e.g. a git worktree of an older commit), side by side. --phases
times where one call's time goes, from the bootstrap's `#@phase` marks (it patches this process's
copy of the bootstrap, so run it on its own).
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import resource
import sys
import threading
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rtpo.tools import sandbox_process as sp  # noqa: E402  (after the path set-up)
from rtpo.tools.python_sandbox import PythonSandbox  # noqa: E402

BENCH_PROGRAMS = {"print(1+1)": "print(1+1)", "math tool call": "print((8839 - 4578) * 435)"}


def _load_other(tree: str):
    """The sandbox module as committed in another checkout (e.g. a git worktree of an older commit),
    loaded from that tree's rtpo/tools/ as a package of its own (not running its __init__), so that
    python_sandbox.py finds its sibling sandbox_process.py there (older trees have only the one file)."""
    name = "_rtpo_sandbox_vs"
    pkg = types.ModuleType(name)
    pkg.__path__ = [os.path.join(tree, "rtpo", "tools")]
    sys.modules[name] = pkg
    return importlib.import_module(name + ".python_sandbox")


def _bench_batch(sb, code: str, n: int, threads: int) -> tuple[list[float], float]:
    """n calls of `code` (on `threads` threads): per-call wall seconds, and the CPU seconds per call
    of everything the calls cost: this process (all threads) and the sandbox processes (reaped by
    this process, or by the fork server: its own CPU time and its children's). Not counted: the
    kernel's threads that free network namespaces (~0.3 ms per call, the same for both)."""
    mod = sys.modules[type(sb).__module__]  # the sandbox's own module: this checkout's or a --vs tree's
    proc = sys.modules.get(mod.__name__.rpartition(".")[0] + ".sandbox_process", mod)  # one module before the split
    servers = getattr(proc, "servers", getattr(proc, "_servers", None))
    srv = servers.get(sb.python) if getattr(sb, "fork_server", False) and servers is not None else None

    def cpu() -> float:
        a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime + (srv.cpu() if srv else 0.0)

    walls: list[float] = []
    results: list = []
    lock = threading.Lock()

    def work(k: int) -> None:
        for _ in range(k):
            t = time.monotonic()
            r = sb.run(code)
            dt = time.monotonic() - t
            with lock:
                walls.append(dt)
                results.append(r)

    c0 = cpu()
    if threads == 1:
        work(n)
    else:
        ts = [threading.Thread(target=work, args=(n // threads + (i < n % threads),)) for i in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    c1 = cpu()
    bad = [r for r in results if not r.ok]
    if bad:
        raise SystemExit(f"bench: a call failed: {bad[0]}")
    return walls, (c1 - c0) / n


def _bench(n: int, python: str | None, vs: str | None, threads: list[int], batch: int = 10) -> None:
    """Per-call wall and CPU time of typical calls, this code against `vs` (another checkout), run
    side by side: batches of `batch` calls, alternating old/new (and which goes first)."""
    variants = [("new", PythonSandbox(wall_s=20, cpu_s=5, python=python))]
    if vs:
        variants.append(("old", _load_other(vs).PythonSandbox(wall_s=20, cpu_s=5, python=python)))
    new = variants[0][1]
    print(f"mode: {new.mode}  fork server: {new.fork_server}  interpreter: {new.python}")
    print(f"machine: {os.cpu_count()} CPUs, load average at start {os.getloadavg()[0]:.1f}")
    rounds = -(-n // batch)
    print(f"{rounds} rounds of {batch} calls per variant (>= {rounds * batch} calls each), "
          f"old/new alternating; wall: median per call; CPU: per call (batch total / calls), median over rounds")
    for label, code in BENCH_PROGRAMS.items():
        for T in threads:
            for _, sb in variants:  # warm-up (starts the fork server)
                _bench_batch(sb, code, max(2, T), T)
            walls = {name: [] for name, _ in variants}
            cpus = {name: [] for name, _ in variants}
            for r in range(rounds):
                for name, sb in (variants if r % 2 == 0 else variants[::-1]):
                    w, c = _bench_batch(sb, code, batch, T)
                    walls[name] += w
                    cpus[name].append(c)
            line = f"{label:15s} threads={T}:"
            med = {}
            for name, _ in variants:
                med[name] = (_median(walls[name]), _median(cpus[name]))
                line += f"  {name}: wall {1000 * med[name][0]:6.1f} ms, CPU {1000 * med[name][1]:5.1f} ms |"
            if "old" in med:
                (ow, oc), (nw, nc) = med["old"], med["new"]
                line += f"  old/new: wall {ow / nw:.2f}x, CPU {oc / nc:.2f}x"
            print(line.rstrip(" |"), flush=True)
    print(f"load average at end {os.getloadavg()[0]:.1f}")


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    k = len(xs)
    return (xs[(k - 1) // 2] + xs[k // 2]) / 2


_PHASES = ["sent", "Z_forked", "P_start", "P_read", "P_unshare", "C_start", "C_root", "D_ready", "C_reaped",
           "P_reaped", "returned"]


def _bench_phases(n: int, python: str | None, fork_server: bool) -> None:
    """Where one call's time goes: the bootstrap's `#@phase` marks timed (CLOCK_MONOTONIC, shared by
    all processes) over n calls of print(1+1); medians. Patches the bootstrap (`sp.BOOT`) and
    `sp.start_call` of this process: run it on its own."""
    t = "__import__('time').clock_gettime(1), __import__('time').process_time()"

    def mark(m: re.Match) -> str:
        ind, name = m.group(1), m.group(2)
        if name == "Z_forked":
            return f'{ind}os.write(fds[3], ("warn phase Z_forked %r %r\\n" % ({t})).encode())'
        return f'{ind}say("warn phase {name} %r %r" % ({t}))'

    sp.BOOT = re.sub(r"^( *)#@phase (\w+)$", mark, sp.BOOT, flags=re.M)
    sp._boot_cache.clear()
    sent: list[float] = []
    start_call = sp.start_call

    def timed_start(*a, **k):
        call = start_call(*a, **k)
        sent.append(time.monotonic())
        return call

    sp.start_call = timed_start
    sb = PythonSandbox(wall_s=20, cpu_s=5, python=python, fork_server=fork_server)
    print(f"mode: {sb.mode}  fork server: {sb.fork_server}  load average {os.getloadavg()[0]:.1f}")
    rows = []
    for i in range(n + 3):
        t0 = time.monotonic()
        res, notes = sb._execute("print(1+1)", sb.mode, sb.fork_server)
        t1 = time.monotonic()
        assert res.ok, res
        marks = {"t0": (t0, 0.0), "sent": (sent[-1], 0.0), "returned": (t1, 0.0)}
        for line in notes:
            if line.startswith("phase "):
                _, name, clk, cpu = line.split()
                marks[name] = (float(clk), float(cpu))
        if i >= 3:
            rows.append(marks)
    prev = "t0"
    print("phase (wall, median ms):")
    for name in _PHASES:
        if name not in rows[0]:
            continue
        print(f"  {prev:>9s} -> {name:9s} {1000 * _median([r[name][0] - r[prev][0] for r in rows]):6.2f}")
        prev = name
    print(f"  total              {1000 * _median([r['returned'][0] - r['t0'][0] for r in rows]):6.2f}")
    cpu = {k: 1000 * _median([r[k][1] for r in rows]) for k in ("P_read", "P_reaped", "C_start", "C_root",
                                                                 "C_reaped", "D_ready")}
    print(f"CPU (median ms, each process's own, up to the mark): P {cpu['P_reaped']:.2f} (to P_read "
          f"{cpu['P_read']:.2f}); C {cpu['C_reaped']:.2f} (build_root {cpu['C_root'] - cpu['C_start']:.2f}); "
          f"D before the code {cpu['D_ready']:.2f}; D's total and the exits: see --bench")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python scripts/bench_sandbox.py",
                                 description="Run Python code in the sandbox, or measure its per-call overhead.")
    ap.add_argument("code", nargs="?", help="code to run (default: read stdin)")
    ap.add_argument("--bench", type=int, metavar="N", help="time >= N calls of each typical program and exit")
    ap.add_argument("--vs", metavar="TREE", help="with --bench: also time the sandbox of this checkout "
                                                 "(e.g. a git worktree of an older commit), alternating")
    ap.add_argument("--threads", default="1", help="with --bench: comma-separated thread counts (default 1)")
    ap.add_argument("--phases", type=int, metavar="N", help="time the phases of N calls of print(1+1) and exit")
    ap.add_argument("--no-fork-server", action="store_true", help="one interpreter per call")
    ap.add_argument("--python", help="interpreter for the child (default: this one)")
    ap.add_argument("--wall-s", type=float, default=None)
    args = ap.parse_args(argv)
    if args.phases:
        _bench_phases(args.phases, args.python, not args.no_fork_server)
        return 0
    if args.bench:
        _bench(args.bench, args.python, args.vs, [int(t) for t in args.threads.split(",")])
        return 0
    code = args.code if args.code is not None else sys.stdin.read()
    r = PythonSandbox(wall_s=args.wall_s, python=args.python, fork_server=not args.no_fork_server).run(code)
    sys.stdout.write(r.output)
    print(f"\n[ok={r.ok} error={r.error} wall_s={r.wall_s:.3f}]", file=sys.stderr)
    return 0 if r.ok else 1


if __name__ == "__main__":
    sys.exit(main())
