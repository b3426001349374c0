"""Real searches against a retrieval server while clients hold it up (loopback only).

    nice -n 19 .venv/bin/python scripts/bench_retrieval_hold.py                 # this checkout's server
    nice -n 19 .venv/bin/python scripts/bench_retrieval_hold.py --server f1aae5b  # that commit's server

Writes a synthetic corpus (tests.test_retrieval's, 3,000 passages), starts
`python -m rtpo.retrieval.server --corpus ...` in its own process (the server of this checkout, or
rtpo/retrieval/server.py as it was at --server COMMIT, run against this checkout's package), and then,
from this process:
  1. base      --searches real searches through the project's client (8 threads), nothing held;
  2. hold      --held connections: a third connect and send nothing, a third send half a request and
               then nothing, a third trickle (one byte to each every --trickle-every s);
               --non-readers connections each ask for a large answer (16 queries, topk 500: ~2 MB) and
               never read it; one more asks for it, reads 64 KiB and disconnects;
  3. burst     --clients threads, each with its own client and connection, search at once;
  4. during    --searches real searches again (8 threads), everything of 2 still held.
Every answer is compared with the in-process index's ranking. Prints the latency percentiles of 1, 3
and 4, how many were answered, the server's CPU seconds during 3 (on a loaded machine a one-thread
event loop gets a smaller share of the CPU than a server of 256 threads: compare the CPU as well as the
wall time), how many held connections the server still kept at the end, and the server's resident
memory; --json writes the record. tests/test_retrieval_hold.py runs `hold` smaller.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

HALF = (b"POST /retrieve HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: 200\r\n\r\n{\"queries\": [\"")  # the body's first 14 of 200 bytes
TRICKLE = (b"POST /retrieve HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
           b"Content-Length: 40\r\n\r\n" + b"{\"queries\": [\"x\"]}" + b" " * 22)


def start_server(corpus: Path, workdir: Path, commit: str | None = None) -> tuple[subprocess.Popen, str]:
    """`python -m rtpo.retrieval.server --corpus corpus` (or that file at `commit`) -> (process, URL)."""
    cmd = [sys.executable, "-m", "rtpo.retrieval.server"]
    if commit:
        old = workdir / f"server_{commit}.py"
        old.write_bytes(subprocess.run(["git", "show", f"{commit}:rtpo/retrieval/server.py"], cwd=ROOT,
                                       check=True, capture_output=True).stdout)
        cmd = [sys.executable, str(old)]
    url_file = workdir / "url"
    url_file.unlink(missing_ok=True)
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.Popen([*cmd, "--corpus", str(corpus), "--port", "0", "--url-file", str(url_file)], env=env,
                            stdout=subprocess.DEVNULL, stderr=open(workdir / "server.log", "wb"))
    from rtpo.retrieval.client import health

    t0 = time.monotonic()
    while not (url_file.exists() and health(url_file.read_text().strip())):
        if proc.poll() is not None or time.monotonic() - t0 > 120:
            proc.kill()
            raise RuntimeError(f"the server did not start: {(workdir / 'server.log').read_text()[-2000:]}")
        time.sleep(0.1)
    return proc, url_file.read_text().strip()


def _ms(xs: list[float], p: float) -> float:
    return round(1e3 * float(np.percentile(xs, p)), 1) if xs else float("nan")


def _searches(url: str, want: dict[str, list[str]], queries: list[str], threads: int) -> dict:
    """Each query through the project's client from `threads` threads (one client, a connection per
    thread); latency percentiles and how many answers equal the index's own ranking."""
    from rtpo.retrieval.client import HttpRetriever

    client = HttpRetriever(url, timeout=10)

    def one(q: str) -> tuple[float, bool]:
        t0 = time.monotonic()
        try:
            got = client.search(q, 3)
        except Exception:  # a refused or timed-out search counts as not answered
            return time.monotonic() - t0, False
        return time.monotonic() - t0, [h["id"] for h in got] == want[q]

    with ThreadPoolExecutor(threads) as pool:
        res = list(pool.map(one, queries))
    lat = [t for t, _ in res]
    return {"n": len(res), "answered": sum(ok for _, ok in res), "p50_ms": _ms(lat, 50), "p95_ms": _ms(lat, 95),
            "max_ms": _ms(lat, 100)}


def _burst(url: str, want: dict[str, list[str]], queries: list[str], clients: int) -> dict:
    """`clients` threads, each with its own client (its own connection), search at once."""
    from rtpo.retrieval.client import HttpRetriever

    lat, ok = [0.0] * clients, [False] * clients
    go = threading.Barrier(clients + 1)

    def one(i: int) -> None:
        q = queries[i % len(queries)]
        client = HttpRetriever(url, timeout=30)
        go.wait()
        t0 = time.monotonic()
        try:
            ok[i] = [h["id"] for h in client.search(q, 3)] == want[q]
        except Exception:
            ok[i] = False
        lat[i] = time.monotonic() - t0

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(clients)]
    for t in threads:
        t.start()
    go.wait()
    t0 = time.monotonic()
    for t in threads:
        t.join(timeout=120)
    return {"n": clients, "answered": sum(ok), "wall_s": round(time.monotonic() - t0, 2), "p50_ms": _ms(lat, 50),
            "p95_ms": _ms(lat, 95), "max_ms": _ms(lat, 100)}


def _post(body: bytes) -> bytes:
    return (b"POST /retrieve HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body)) + body


def _still_open(s: socket.socket) -> bool:
    """The server has not closed this connection (no EOF, no reset waiting)."""
    s.setblocking(False)
    try:
        return s.recv(1, socket.MSG_PEEK) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        s.setblocking(True)


def _cpu_s(pid: int | None) -> float | None:
    """CPU seconds (user + system) the process has used so far, all its threads."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError, TypeError):
        return None


def _rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return None


def hold(url: str, index, queries: list[str], held: int = 300, clients: int = 1000, non_readers: int = 20,
         searches: int | None = None, trickle_every: float = 1.0, server_pid: int | None = None) -> dict:
    """The four phases of the module docstring against the server at `url` serving `index`'s corpus."""
    port = int(url.rsplit(":", 1)[1])
    want = {q: [h["id"] for h in index.search(q, 3)] for q in queries}
    n_search = searches or len(queries)
    rec: dict = {"held": held, "clients": clients, "non_readers": non_readers}
    _searches(url, want, queries[:16], 8)  # warm-up (first requests, the server's thread pool), not counted
    rec["base"] = _searches(url, want, queries[:n_search], 8)
    rss0 = _rss_mb(server_pid) if server_pid else None

    socks: dict[str, list[socket.socket]] = {"silent": [], "half": [], "trickle": [], "non_reader": []}
    stop = threading.Event()
    try:
        for i in range(held):
            kind = ("silent", "half", "trickle")[i % 3]
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            if kind == "half":
                s.sendall(HALF)
            socks[kind].append(s)
        trickled = {"bytes": 0}

        def trickle() -> None:  # one byte to each trickler every `trickle_every` s, until stopped
            pos = 0
            while not stop.wait(trickle_every) and pos < len(TRICKLE):
                for s in socks["trickle"]:
                    try:
                        s.sendall(TRICKLE[pos:pos + 1])
                        trickled["bytes"] += 1
                    except OSError:
                        pass
                pos += 1

        threading.Thread(target=trickle, daemon=True).start()
        big = json.dumps({"queries": [" ".join(queries[i % len(queries)].split()[:1]) or "x" for i in range(16)],
                          "topk": 500, "return_scores": True}).encode()
        for _ in range(non_readers):  # ask for a large answer, never read it
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.sendall(_post(big))
            socks["non_reader"].append(s)
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:  # read a part, then go away
            s.sendall(_post(big))
            got = b""
            while len(got) < 65536:
                chunk = s.recv(65536)
                if not chunk:
                    break
                got += chunk
            head = got.split(b"\r\n", 1)[0].decode(errors="replace")
            length = [int(h.split(b":")[1]) for h in got.split(b"\r\n\r\n")[0].split(b"\r\n")
                      if h.lower().startswith(b"content-length:")]
        rec["large_answer"] = {"status": head, "bytes": length[0] if length else None, "read_before_leaving": len(got)}
        time.sleep(0.5)  # the server has taken what it will of all that
        cpu0 = _cpu_s(server_pid)
        rec["burst"] = _burst(url, want, queries, clients)
        if cpu0 is not None:  # on a shared machine the wall time depends on the CPU share the server gets
            rec["burst"]["server_cpu_s"] = round(_cpu_s(server_pid) - cpu0, 2)
        rec["during"] = _searches(url, want, queries[:n_search], 8)
        from rtpo.retrieval.client import health

        rec["health_after"] = bool(health(url, timeout=10))
        rec["still_open"] = {k: sum(_still_open(s) for s in v) for k, v in socks.items()}
        rec["trickled_bytes"] = trickled["bytes"]
        if server_pid:
            rec["server_rss_mb"] = {"before_hold": rss0, "end": _rss_mb(server_pid)}
        return rec
    finally:
        stop.set()
        for v in socks.values():
            for s in v:
                s.close()


def main(argv: list[str] | None = None) -> int:
    from rtpo.retrieval.bm25 import BM25Index
    from tests.test_retrieval import queries, synthetic_corpus

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server", default=None, metavar="COMMIT", help="run rtpo/retrieval/server.py as of this commit")
    ap.add_argument("--held", type=int, default=300)
    ap.add_argument("--clients", type=int, default=1000)
    ap.add_argument("--non-readers", type=int, default=20)
    ap.add_argument("--searches", type=int, default=200)
    ap.add_argument("--trickle-every", type=float, default=1.0)
    ap.add_argument("--json", default=None, help="write the record here")
    a = ap.parse_args(argv)
    passages = synthetic_corpus(3000, seed=7)
    index = BM25Index(passages)
    qs = queries(passages, max(a.searches, 200), seed=8)
    with tempfile.TemporaryDirectory(prefix="rtpo-hold-") as tmp:
        tmp = Path(tmp)
        (tmp / "corpus.jsonl").write_text("".join(json.dumps(p) + "\n" for p in passages))
        proc, url = start_server(tmp / "corpus.jsonl", tmp, a.server)
        try:
            r = hold(url, index, qs, held=a.held, clients=a.clients, non_readers=a.non_readers,
                     searches=a.searches, trickle_every=a.trickle_every, server_pid=proc.pid)
        finally:
            proc.kill()
            proc.wait()
    r["server"] = a.server or "this checkout"
    print(json.dumps(r, indent=1))
    if a.json:
        Path(a.json).write_text(json.dumps(r, indent=1) + "\n")
    ok = all(r[k]["answered"] == r[k]["n"] for k in ("base", "burst", "during")) and r["health_after"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
