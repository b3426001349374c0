"""The retrieval server under load: concurrent clients on kept-alive connections, held and idle
connections, and requests validated field by field.

Every test runs a real server (rtpo.retrieval.server.RetrievalServer: FastAPI on uvicorn) on loopback
over a real BM25 index of a small synthetic corpus (tests.test_retrieval's), and compares with
searching that index directly. The first stdlib server (listen backlog 5, `"return_scores": "no"` read
as true, deep JSON a RecursionError) failed each of them. tests/test_retrieval_hold.py holds it up harder.
"""

from __future__ import annotations

import http.client
import json
import socket
import threading
import time

import pytest

from rtpo.retrieval.bm25 import BM25Index
from rtpo.retrieval.client import HttpRetriever, health
from rtpo.retrieval.core import RetrievalError
from rtpo.retrieval.server import MAX_BODY, RetrievalServer
from tests.test_retrieval import _ranking, queries, synthetic_corpus

N_CLIENTS = 200


@pytest.fixture(scope="module")
def corpus():
    passages = synthetic_corpus(3000, seed=7)
    index = BM25Index(passages)
    qs = queries(passages, N_CLIENTS - 2, seed=8)  # + a query without hits and a stopwords-only one
    assert len(qs) == N_CLIENTS
    return {"index": index, "queries": qs}


def _serve(index, **kw) -> RetrievalServer:
    return RetrievalServer(index, **kw).start()


def _request(srv: RetrievalServer, body: bytes,
             conn: http.client.HTTPConnection | None = None) -> tuple[int, dict, http.client.HTTPResponse]:
    """POST /retrieve -> (status, the JSON answer, the response)."""
    c = conn or http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
    c.request("POST", "/retrieve", body=body, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    return r.status, json.loads(r.read()), r


def _search_ok(srv: RetrievalServer, corpus: dict, i: int = 0) -> None:
    """A search through the project's client gives the index's own (non-empty) ranking."""
    q = corpus["queries"][i]
    want = _ranking(corpus["index"].search(q, 3))
    assert want and _ranking(HttpRetriever(srv.url, timeout=10).search(q, 3)) == want


def test_200_concurrent_searches_are_all_answered(corpus):
    """200 threads search at once through the project's client (one HttpRetriever, a keep-alive
    connection per thread, like the rollout's env threads), keep their connections, and search
    again; every answer is the index's own ranking. The stdlib server before the backlog fix (5)
    reset connections: 18 to 64 of the first 200 searches failed after their retries."""
    index, qs = corpus["index"], corpus["queries"]
    want = [_ranking(index.search(q, 3)) for q in qs]
    srv = _serve(index)
    try:
        client = HttpRetriever(srv.url)  # the defaults: timeout 10 s a search, 2 retries
        got: list = [[None] * N_CLIENTS for _ in range(2)]
        start = threading.Barrier(N_CLIENTS + 1)
        between = threading.Barrier(N_CLIENTS + 1)

        def search(rnd: int, i: int) -> None:
            q = qs[(i + rnd * 7) % N_CLIENTS]
            try:
                got[rnd][i] = _ranking(client.search(q, 3))
            except RetrievalError as e:
                got[rnd][i] = e

        def work(i: int) -> None:
            start.wait()
            search(0, i)
            between.wait()  # every thread still holds its connection here
            search(1, i)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(N_CLIENTS)]
        for th in threads:
            th.start()
        start.wait()
        t0 = time.monotonic()
        between.wait(timeout=60)
        walls = [time.monotonic() - t0]
        held = srv.connections  # the 200 kept-alive connections, all held by the one event loop
        for th in threads:
            th.join(timeout=60)
        walls.append(time.monotonic() - t0 - walls[0])
        for rnd in range(2):
            failed = [g for g in got[rnd] if not isinstance(g, list)]
            assert not failed, f"round {rnd}: {len(failed)} of {N_CLIENTS} searches failed, e.g. {failed[0]}"
            assert got[rnd] == [want[(i + rnd * 7) % N_CLIENTS] for i in range(N_CLIENTS)]
        assert sum(bool(w) for w in want) >= N_CLIENTS - 10  # the searches find something
        assert sum(walls) < 20, walls
        assert client.requests == 2 * N_CLIENTS and held == N_CLIENTS, (client.requests, held)  # none reconnected
        print(f"\n2 x {N_CLIENTS}/{N_CLIENTS} concurrent searches answered in {walls[0]:.2f} s + {walls[1]:.2f} s "
              f"({held} connections held between the rounds, {client.requests} requests)")
        assert health(srv.url)["passages"] == len(index)  # and the server still answers
        _search_ok(srv, corpus, 1)
    finally:
        srv.stop()


def _held(srv: RetrievalServer, n: int) -> list[socket.socket]:
    """n connections to the server that send nothing."""
    return [socket.create_connection(("127.0.0.1", srv.port), timeout=10) for _ in range(n)]


def _closed_by_server(s: socket.socket, within: float) -> bool:
    s.settimeout(within)
    try:
        return s.recv(1) == b""
    except TimeoutError:
        return False
    except ConnectionError:
        return True


def test_held_connections_do_not_block_searches_and_idle_keep_alive_ones_are_closed(corpus):
    """50 connections that send nothing and 50 kept alive, idle after one search: a search is answered
    at once; after the keep-alive timeout (1 s here) the server closes the 50 idle ones, and a client
    whose connection it closed reconnects (its retry) without a failure. (A connection that never sent a request
    is not closed: it holds a socket of the event loop, no thread.)"""
    index = corpus["index"]
    srv = _serve(index, timeout_keep_alive=1.0)
    silent = _held(srv, 50)
    idle = [http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10) for _ in range(50)]
    try:
        for c in idle:
            status, _, _ = _request(srv, json.dumps({"queries": [corpus["queries"][0]]}).encode(), conn=c)
            assert status == 200
        t0 = time.monotonic()
        _search_ok(srv, corpus)
        took = time.monotonic() - t0
        assert took < 1.0, took  # answered while the 100 are held
        closed = sum(_closed_by_server(c.sock, 6.0) for c in idle)
        assert closed == 50, f"the server closed {closed} of 50 idle keep-alive connections"
        assert not any(_closed_by_server(s, 0.01) for s in silent)
        client = HttpRetriever(srv.url)  # its retry takes a new connection
        _ = client.search(corpus["queries"][1], 3)
        time.sleep(1.5)  # its connection is closed for idleness; the next search reconnects
        assert _ranking(client.search(corpus["queries"][2], 3)) == _ranking(index.search(corpus["queries"][2], 3))
        print(f"\nsearch with 100 held connections answered in {took * 1000:.0f} ms; the 50 idle closed")
    finally:
        for s in silent:
            s.close()
        for c in idle:
            c.close()
        srv.stop()


def test_bad_requests_are_answered_400_naming_the_field(corpus):
    """Each field of a bad request is named in a 400 (the old server read `"return_scores": "no"`
    as true); JSON nested 10,000 deep is a 400 (the old server's handler died of a RecursionError
    and the client got no answer); a body over MAX_BODY is a 413 answered before it is read."""
    index = corpus["index"]
    srv = _serve(index)
    try:
        q = corpus["queries"][0]
        c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)  # one keep-alive connection
        for req, field in [({"queries": [q], "return_scores": "no"}, "'return_scores'"),
                           ({"queries": [q], "return_scores": 0}, "'return_scores'"),
                           ({"queries": [q], "return_scores": None}, "'return_scores'"),
                           ({"queries": [q], "topk": "3"}, "'topk'"),
                           ({"queries": [q], "topk": 2.0}, "'topk'"),
                           ({"queries": [q], "topk": True}, "'topk'"),
                           ({"queries": [q], "topk": 1001}, "'topk'"),
                           ({"queries": q}, "'queries'"),
                           ({"queries": [q, 3]}, "'queries'"),
                           ({"topk": 3}, "'queries'"),
                           ([q], "JSON object")]:
            status, doc, r = _request(srv, json.dumps(req).encode(), conn=c)
            assert status == 400 and field in doc["error"], (req, status, doc)
        status, doc, _ = _request(srv, json.dumps({"queries": [q], "return_scores": False}).encode(), conn=c)
        assert status == 200 and doc["result"][0] and "score" not in doc["result"][0][0]  # the connection lives on

        deep = b"[" * 10_000 + b"]" * 10_000  # the old server: RecursionError, the connection dropped
        for body in [deep, b'{"queries": ["x"], "x": ' + deep + b"}"]:
            status, doc, _ = _request(srv, body)
            assert status == 400 and "nested" in doc["error"], doc
        in_string = json.dumps({"queries": ["[" * 10_000 + " " + q], "topk": 2, "return_scores": True}).encode()
        status, doc, _ = _request(srv, in_string)  # brackets inside a string are no nesting
        assert status == 200 and [d["document"]["id"] for d in doc["result"][0]] == \
            [h["id"] for h in index.search("[" * 10_000 + " " + q, 2)]

        big = json.dumps({"queries": ["word " * (MAX_BODY // 5)]}).encode()
        assert len(big) > MAX_BODY
        status, doc, r = _request(srv, big)  # refused unread, yet the client gets the answer
        assert status == 413 and "too large" in doc["error"] and r.getheader("Connection") == "close"
        with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:  # curl's way: nothing sent
            s.sendall(b"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % (8 * MAX_BODY))
            head = s.recv(65536).split(b"\r\n", 1)[0]
            assert head.startswith(b"HTTP/1.1 413"), head
        for length in ["abc", "-5", "0", None]:  # not a number: h11 answers 400 itself, before the app
            c2 = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
            c2.putrequest("POST", "/retrieve")
            if length is not None:
                c2.putheader("Content-Length", length)
            c2.endheaders()
            r = c2.getresponse()
            raw = r.read()
            assert r.status == 400, (length, r.status, raw)
            if length in ("0", None):
                assert "'Content-Length'" in json.loads(raw)["error"], raw
        c3 = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)  # a chunked body is read too
        c3.request("POST", "/retrieve", body=iter([json.dumps({"queries": [q], "topk": 2}).encode()]),
                   headers={"Content-Type": "application/json"}, encode_chunked=True)
        r = c3.getresponse()
        assert r.status == 200 and len(json.loads(r.read())["result"][0]) == 2
        c4 = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
        c4.request("GET", "/retrieve")
        r = c4.getresponse()
        assert r.status == 405 and "POST /retrieve" in json.loads(r.read())["error"]
        c4.request("POST", "/search", body=b"{}")
        r = c4.getresponse()
        assert r.status == 404 and "no such path" in json.loads(r.read())["error"]
        _search_ok(srv, corpus)  # and the server still answers
    finally:
        srv.stop()


def test_a_backend_that_waits_is_searched_on_threads(corpus):
    """A backend that waits on the network (web search; `search_in_thread`) is searched on uvicorn's thread
    pool: 8 searches of 0.5 s each at once take about 0.5 s, not 4 s, and /health answers meanwhile; a BM25
    index (which holds the GIL) is searched on the event loop."""
    class Waiting:
        search_in_thread = True
        name = "waiting"

        def search(self, query, k):
            time.sleep(0.5)
            return corpus["index"].search(query, k)

    srv = _serve(Waiting())
    try:
        client = HttpRetriever(srv.url, timeout=10)
        qs = corpus["queries"][:8]
        got: dict = {}
        threads = [threading.Thread(target=lambda q=q: got.__setitem__(q, client.search(q, 3))) for q in qs]
        t0 = time.monotonic()
        for th in threads:
            th.start()
        time.sleep(0.1)
        assert health(srv.url, timeout=1.0)["backend"] == "waiting"  # answered while 8 searches wait
        for th in threads:
            th.join(timeout=10)
        took = time.monotonic() - t0
        assert took < 2.0, took
        assert [_ranking(got[q]) for q in qs] == [_ranking(corpus["index"].search(q, 3)) for q in qs]
    finally:
        srv.stop()
