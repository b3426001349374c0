"""The retrieval server holds against clients that hold it up (loopback only, bounded in count and time).

`python -m rtpo.retrieval.server` in its own process, over a BM25 index of a synthetic corpus; from
this process (scripts/bench_retrieval_hold.py's `hold`): 300 connections that send nothing, half a
request, or trickle a byte a second; 20 that ask for a 1.3 MB answer and never read it; one that reads
64 KiB of it and goes away; then 1,000 clients search at once, each on its own connection, and 100
searches follow from 8 threads. Every search is answered with the index's own ranking, the server
still answers /health, and it still holds the 300 connections (each costs it a socket, not a thread).
Latency percentiles before and after the move to uvicorn: the same script, `--server COMMIT`.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from rtpo.retrieval.bm25 import BM25Index
from tests.test_retrieval import queries, synthetic_corpus

ROOT = Path(__file__).resolve().parent.parent


def _bench():
    spec = importlib.util.spec_from_file_location("bench_retrieval_hold", ROOT / "scripts" / "bench_retrieval_hold.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.timeout(120)
def test_searches_are_answered_while_300_held_20_unread_1000_at_once_and_one_leaves_mid_answer(tmp_path):
    bench = _bench()
    passages = synthetic_corpus(3000, seed=7)
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps(p) + "\n" for p in passages))
    proc, url = bench.start_server(tmp_path / "corpus.jsonl", tmp_path)
    try:
        r = bench.hold(url, BM25Index(passages), queries(passages, 198, seed=8), held=300, clients=1000,
                       non_readers=20, searches=100, server_pid=proc.pid)
        assert proc.poll() is None, (tmp_path / "server.log").read_text()[-2000:]
    finally:
        proc.kill()
        proc.wait()
    print(f"\n{json.dumps(r)}")
    for phase in ("base", "burst", "during"):
        assert r[phase]["answered"] == r[phase]["n"], (phase, r[phase])
    assert r["large_answer"]["status"] == "HTTP/1.1 200 OK" and r["large_answer"]["bytes"] > 1_000_000, r
    assert r["burst"]["max_ms"] < 20_000, r["burst"]        # within the clients' own timeout
    assert r["during"]["p95_ms"] < 2_000, r["during"]       # real searches are not queued behind the held ones
    assert r["health_after"], r
    assert r["still_open"] == {"silent": 100, "half": 100, "trickle": 100, "non_reader": 20}, r["still_open"]
    assert r["trickled_bytes"] >= 100, r  # the tricklers did trickle while the searches ran
    assert "Traceback" not in (tmp_path / "server.log").read_text()  # the one that left mid-answer included


def test_server_options_are_checked():
    from rtpo.retrieval.server import RetrievalServer

    index = BM25Index(synthetic_corpus(10))
    with pytest.raises(ValueError, match="timeout_keep_alive"):
        RetrievalServer(index, timeout_keep_alive=0)
    with pytest.raises(ValueError, match="backlog"):
        RetrievalServer(index, backlog=0)
    with pytest.raises(ValueError, match="idle_exit"):
        RetrievalServer(index, idle_exit=-1)
