"""Real searches against a retrieval server while connections hold it up (loopback only).

    .venv/bin/python scripts/bench_retrieval_hold.py [--held 300] [--trickle-every 5] [--searches 200]

Starts rtpo.retrieval.server.RetrievalServer on 127.0.0.1 over a BM25 index of a synthetic corpus,
opens --held connections that each send half a request and then nothing, one more that sends a byte
every --trickle-every seconds, and then runs --searches real searches through the project's client
(8 threads); prints the searches' latency percentiles (p50/p95/max) with and without the held
connections, how many searches were answered, how many held connections were still open at the end,
and when the server closed the trickling one. tests/test_retrieval_hold.py runs `hold` with fewer
searches. Everything stops by itself: sockets are closed and the server stopped on exit.
"""

from __future__ import annotations

import argparse
import socket
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

HALF = (b"POST /retrieve HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: 200\r\n\r\n{\"queries\": [\"")  # the body's first 14 of 200 bytes
TRICKLE = b"POST /retrieve HTTP/1.1\r\nHost: 127.0.0.1\r\n"


def _trickle(port: int, every: float, stop: threading.Event, out: dict) -> None:
    """Send TRICKLE one byte every `every` s until the server closes the connection (or `stop`)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    t0 = time.monotonic()
    try:
        for i in range(len(TRICKLE)):
            if stop.is_set():
                return
            s.sendall(TRICKLE[i:i + 1])
            out["sent"] = i + 1
            s.settimeout(every)
            try:
                if s.recv(1) == b"":  # closed by the server
                    break
            except TimeoutError:  # still open: the next byte
                continue
    except OSError:  # reset / broken pipe: closed by the server
        pass
    finally:
        out["closed_after_s"] = time.monotonic() - t0
        s.close()


def _searches(url: str, index, queries: list[str], threads: int = 8) -> tuple[list[float], int]:
    from rtpo.retrieval.client import HttpRetriever

    client = HttpRetriever(url, timeout=10)

    def one(q: str) -> tuple[float, bool]:
        t0 = time.monotonic()
        try:
            got = client.search(q, 3)
        except Exception:  # a refused or timed-out search counts as not answered
            return time.monotonic() - t0, False
        want = index.search(q, 3)
        return time.monotonic() - t0, [h["id"] for h in got] == [h["id"] for h in want]

    with ThreadPoolExecutor(threads) as pool:
        res = list(pool.map(one, queries))
    return [t for t, _ in res], sum(ok for _, ok in res)


def hold(index, queries: list[str], held: int = 300, trickle_every: float = 5.0, request_timeout: float = 10.0,
         settle: float = 0.5, **server_kw) -> dict:
    """Hold the server with `held` half-sent connections and one trickling, run `queries`; a report."""
    from rtpo.retrieval.server import RetrievalServer

    import inspect

    if "request_timeout" in inspect.signature(RetrievalServer).parameters:  # (an older server has none)
        server_kw["request_timeout"] = request_timeout
    srv = RetrievalServer(index, **server_kw).start()
    socks: list[socket.socket] = []
    stop, trickled = threading.Event(), {}
    try:
        base, _ = _searches(srv.url, index, queries[: max(10, len(queries) // 4)])
        for _ in range(held):
            s = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
            s.sendall(HALF)
            socks.append(s)
        t = threading.Thread(target=_trickle, args=(srv.port, trickle_every, stop, trickled), daemon=True)
        t.start()
        time.sleep(settle)  # the server has taken what threads it will give them
        t0 = time.monotonic()
        lat, ok = _searches(srv.url, index, queries)
        wall = time.monotonic() - t0
        still_open = getattr(srv, "arriving", None)  # held requests the server still waits on at the end
        t.join(timeout=max(0.0, request_timeout + 2 * trickle_every - (time.monotonic() - t0)))
        return {"held": held, "searches": len(queries), "answered": ok, "wall_s": wall,
                "p50_ms": 1e3 * float(np.percentile(lat, 50)), "p95_ms": 1e3 * float(np.percentile(lat, 95)),
                "max_ms": 1e3 * max(lat), "base_p50_ms": 1e3 * float(np.percentile(base, 50)),
                "base_p95_ms": 1e3 * float(np.percentile(base, 95)), "base_max_ms": 1e3 * max(base),
                "held_still_arriving": still_open, "closed_slow": getattr(srv, "closed_slow", None),
                "trickle_bytes": trickled.get("sent"), "trickle_closed_after_s": trickled.get("closed_after_s")}
    finally:
        stop.set()
        for s in socks:
            s.close()
        srv.stop()


def main(argv: list[str] | None = None) -> int:
    from rtpo.retrieval.bm25 import BM25Index
    from tests.test_retrieval import queries, synthetic_corpus

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--held", type=int, default=300)
    ap.add_argument("--trickle-every", type=float, default=5.0)
    ap.add_argument("--searches", type=int, default=200)
    ap.add_argument("--request-timeout", type=float, default=10.0)
    a = ap.parse_args(argv)
    passages = synthetic_corpus(3000, seed=7)
    index = BM25Index(passages)
    r = hold(index, queries(passages, a.searches, seed=8), held=a.held, trickle_every=a.trickle_every,
             request_timeout=a.request_timeout)
    print(f"searches answered: {r['answered']} of {r['searches']} in {r['wall_s']:.2f} s, with {r['held']} "
          f"half-sent connections and one trickling a byte every {a.trickle_every:g} s")
    print(f"latency p50 {r['p50_ms']:.1f} ms  p95 {r['p95_ms']:.1f} ms  max {r['max_ms']:.1f} ms "
          f"(no held connections: p50 {r['base_p50_ms']:.1f}  p95 {r['base_p95_ms']:.1f}  max {r['base_max_ms']:.1f} ms)")
    print(f"held requests still arriving at the end: {r['held_still_arriving']}; closed by the server: "
          f"{r['closed_slow']}; trickler: {r['trickle_bytes']} bytes sent, closed after "
          f"{r['trickle_closed_after_s'] or float('nan'):.1f} s (request timeout {a.request_timeout:g} s)")
    return 0 if r["answered"] == r["searches"] else 1


if __name__ == "__main__":
    sys.exit(main())
