"""The retrieval server: Search-R1's `/retrieve` protocol over a BM25 index or a web backend,
a FastAPI app served by uvicorn (as Search-R1's own retrieval_server.py is).

    POST /retrieve  {"queries": ["..."], "topk": 3, "return_scores": true}
        -> {"result": [[{"document": {"id": "...", "contents": "\\"Title\\"\\ntext"}, "score": 1.23}, ...]]}
           (without return_scores each inner item is the document alone, as in Search-R1)
    GET  /health    -> {"status": "ok", "backend": "...", "passages": N, "pid": the answering process}

    python -m rtpo.retrieval.server --index results/retrieval/wiki18/bm25 --port 0 --url-file URL
    python -m rtpo.retrieval.server --web serpapi --port 8000          # SERPAPI_API_KEY in the env

It prints ``rtpo-retrieval: serving <backend> on http://HOST:PORT`` once its socket listens and, with
--url-file, writes that URL there (atomically): --port 0 takes a free port and reports it. With
--idle-exit S it stops after S seconds without a request (the per-node servers that
`rtpo.retrieval.client` starts on demand use this, so none outlives its jobs for long).

Errors, as JSON {"error": ...} naming the field: 400 for a body that is not a JSON object, nested
deeper than MAX_DEPTH, 'queries' not a list of at most MAX_QUERIES strings, 'topk' not an integer in
1..1000 (null or absent: the server's --topk), 'return_scores' not a JSON boolean (absent: false), or
a Content-Length of 0 or none; 413 for a body over MAX_BODY (1 MiB), answered before the body is read
and the connection then closed; 404 for another path; 502 when the backend failed (e.g. the web
provider refused), 500 for a backend bug. A Content-Length that is not a number never reaches the
app: uvicorn's HTTP parser answers it 400 itself.

Under load, uvicorn's event loop holds every connection (asyncio: a connection costs a socket, not a
thread) and answers one search after another (`build_app`), so clients that connect and send nothing, send half a
request, trickle a byte at a time, never read a large answer or go away mid-answer do not keep real
searches out (tests/test_retrieval_hold.py; latencies in scripts/bench_retrieval_hold.py). A kept-alive
connection idle for --timeout-keep-alive seconds is closed (our client reconnects); a request still
arriving has no deadline (it holds a socket only). The process raises its open-file limit to the hard
limit at start, so held connections run into that, not the soft 1,024. The HTTP parser is httptools and
the loop uvloop, named (not uvicorn's "auto"), both base dependencies, so every install serves the same
way: a search costs the server about the CPU the stdlib server's did (h11 and asyncio, the pure-Python
pair, cost 1.6 times that: scripts/bench_retrieval_hold.py's burst).

--workers W forks W - 1 more processes after the index is loaded; each runs uvicorn on the same
listening socket. A query holds the GIL for most of its time (numpy fancy indexing over the
postings), so one process answers about one query per core at a time; the index loaded before the
fork is shared by all workers (copy-on-write; a memory-mapped one through the page cache), which
uvicorn's own --workers, spawning fresh interpreters that each load the index, would not do. Workers
die with the first process (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.responses import Response

from rtpo.retrieval.core import RetrievalError, contents_of

__all__ = ["RetrievalServer", "build_app", "load_backend", "main"]

MAX_BODY = 1 << 20
MAX_QUERIES = 1024
MAX_DEPTH = 32            # a request is 2 deep ({"queries": [...]}); json.loads recurses per level
BACKLOG = 2048            # listen backlog (uvicorn's default; the kernel caps it at net.core.somaxconn)
KEEP_ALIVE = 30.0         # seconds a kept-alive connection may stay idle between two requests
DRAIN_LIMIT = 4 * MAX_BODY  # an oversize body sent without `Expect: 100-continue` is read (and dropped) up to this


def _json(code: int, obj: Any, close: bool = False):
    return Response(json.dumps(obj, ensure_ascii=False).encode(), status_code=code, media_type="application/json",
                    headers={"Connection": "close"} if close else None)


def build_app(backend, default_topk: int = 3, stats: dict[str, Any] | None = None):
    """The FastAPI app answering /retrieve and /health over `backend` (``search(query, k) -> [passage]``).
    `stats` (optional) is updated in place: "served" (queries answered), "last" (monotonic time of the
    last request).

    A BM25 search holds the GIL throughout (numpy indexing over the postings), so it runs on the event
    loop itself: a thread would add a hand-off per search and nothing in parallel (1,000 clients at once:
    p50 0.14-0.32 s on the loop, 1.9-3.7 s through the thread pool, scripts/bench_retrieval_hold.py). A
    backend that waits on the network or releases the GIL (web search, faiss + torch) says
    `search_in_thread = True` and is searched on uvicorn's thread pool."""
    threaded = bool(getattr(backend, "search_in_thread", False))
    stats = stats if stats is not None else {}
    stats.setdefault("served", 0)
    stats.setdefault("last", time.monotonic())
    default_topk = int(default_topk)
    app = FastAPI(title="rtpo retrieval", description="Search-R1's /retrieve protocol", docs_url=None,
                  redoc_url=None, openapi_url=None)

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException):  # 404 / 405 in the protocol's shape
        return _json(exc.status_code, {"error": f"no such path {request.method} {request.url.path}; use POST "
                                                "/retrieve or GET /health"})

    @app.get("/health")
    async def health():
        stats["last"] = time.monotonic()
        n = len(backend) if hasattr(backend, "__len__") else None
        return _json(200, {"status": "ok", "backend": getattr(backend, "name", type(backend).__name__),
                           "passages": n, "pid": os.getpid()})

    @app.post("/retrieve")
    async def retrieve(request: Request):
        stats["last"] = time.monotonic()
        raw, refused = await _read_body(request)
        if refused is not None:
            return refused
        try:
            depth = _nesting_depth(raw)
            if depth > MAX_DEPTH:
                raise ValueError(f"body is nested {depth} levels deep, at most {MAX_DEPTH} allowed")
            queries, topk, scores = _validate(json.loads(raw), default_topk)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            return _json(400, {"error": f"body is not JSON ({e})"})
        except ValueError as e:  # _validate's, and json's own limits (e.g. an integer of 5000 digits)
            return _json(400, {"error": str(e)})
        try:
            if threaded:  # waits on the network or releases the GIL: other requests go on meanwhile
                results = await run_in_threadpool(lambda: [backend.search(q, topk) for q in queries])
            else:
                results = [backend.search(q, topk) for q in queries]
        except RetrievalError as e:
            return _json(502, {"error": str(e)})
        except Exception as e:  # a backend bug: answer it (the client retries a 5xx)
            return _json(500, {"error": f"search failed: {type(e).__name__}: {e}"})
        out = []
        for hits in results:
            docs = [{"id": h["id"], "contents": contents_of(h)} for h in hits]
            out.append([{"document": d, "score": h.get("score", 0.0)} for d, h in zip(docs, hits)] if scores else docs)
        stats["served"] += len(queries)
        return _json(200, {"result": out})

    return app


async def _read_body(request) -> tuple[bytes, Any]:
    """The request's body, or (b"", the error answer) for a missing, empty or oversize one. An oversize
    body is refused before it is read; without `Expect: 100-continue` the client sends it anyway, so up
    to DRAIN_LIMIT of it is read and dropped first (closing on unread bytes makes the kernel reset the
    connection, and the client may lose the answer)."""
    raw = request.headers.get("content-length")
    chunked = "chunked" in request.headers.get("transfer-encoding", "").lower()
    n = int(raw) if raw is not None and raw.isdigit() else None  # h11 has refused any other value
    if n is not None and n > MAX_BODY:
        if "100-continue" not in request.headers.get("expect", "").lower():
            got = 0
            async for chunk in request.stream():
                got += len(chunk)
                if got > DRAIN_LIMIT:
                    break
        return b"", _json(413, {"error": f"request body too large: Content-Length {n} > {MAX_BODY} bytes"},
                          close=True)
    if not chunked and not n:
        return b"", _json(400, {"error": f"'Content-Length' must be an integer in 1..{MAX_BODY}, got {raw!r}"},
                          close=True)
    body = bytearray()
    async for chunk in request.stream():  # a chunked body: read up to the limit
        body += chunk
        if len(body) > MAX_BODY:
            return b"", _json(413, {"error": f"request body too large: over {MAX_BODY} bytes"}, close=True)
    return bytes(body), None


def _validate(req: Any, default_topk: int) -> tuple[list[str], int, bool]:
    if not isinstance(req, dict):
        raise ValueError("body must be a JSON object {\"queries\": [...], \"topk\": N, \"return_scores\": bool}")
    queries = req.get("queries")
    if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
        raise ValueError("'queries' must be a list of strings")
    if len(queries) > MAX_QUERIES:
        raise ValueError(f"at most {MAX_QUERIES} queries per request, got {len(queries)}")
    topk = req.get("topk")
    topk = default_topk if topk is None else topk
    if not isinstance(topk, int) or isinstance(topk, bool) or not 1 <= topk <= 1000:
        raise ValueError(f"'topk' must be an integer in 1..1000, got {_short(topk)}")
    scores = req.get("return_scores", False)
    if not isinstance(scores, bool):  # "no" used to be read as true
        raise ValueError(f"'return_scores' must be a JSON boolean (true or false), got {_short(scores)}")
    return queries, topk, scores


def _short(v: Any) -> str:
    r = repr(v)
    return r if len(r) <= 80 else r[:77] + "..."


_ESCAPE = re.compile(rb"\\.", re.S)     # \" \\ \n ... inside strings
_STRING = re.compile(rb'"[^"]*"')        # after the escapes are gone a string has no '"' inside
_NOT_BRACKET = bytes(c for c in range(256) if c not in b"[]{}")


def _nesting_depth(body: bytes) -> int:
    """How deep the arrays and objects of a JSON text nest (brackets inside strings not counted).

    Linear time: escapes, then strings are cut out by two regexes that cannot backtrack, and the
    brackets left are counted. Malformed text gives some number; json.loads rejects it after."""
    brackets = _STRING.sub(b"", _ESCAPE.sub(b"", body)).translate(None, _NOT_BRACKET)
    return max(itertools.accumulate(1 if c in b"[{" else -1 for c in brackets), default=0)


def _raise_open_files_limit() -> None:
    """Soft RLIMIT_NOFILE up to the hard limit: every connection the loop holds is a file descriptor."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else 1 << 20, hard))
        except (ValueError, OSError):
            pass


class RetrievalServer:
    """A `/retrieve` server over `backend` (anything with ``search(query, k) -> [passage]``) on a socket
    bound here (so `port` is known at once, --port 0 included).

    `start()` serves from a background thread (tests, embedding); `serve_forever()` blocks (CLI)."""

    def __init__(self, backend, host: str = "127.0.0.1", port: int = 0, default_topk: int = 3,
                 idle_exit: float | None = None, backlog: int = BACKLOG, timeout_keep_alive: float = KEEP_ALIVE):
        import uvicorn

        if int(backlog) < 1:
            raise ValueError(f"backlog must be >= 1, got {backlog}")
        if not timeout_keep_alive > 0:
            raise ValueError(f"timeout_keep_alive must be > 0 seconds, got {timeout_keep_alive}")
        if idle_exit is not None and not idle_exit > 0:
            raise ValueError(f"idle_exit must be > 0 seconds (or None), got {idle_exit}")
        self.backend, self.idle_exit, self.stats = backend, idle_exit, {"served": 0, "last": time.monotonic()}
        _raise_open_files_limit()
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that say so (base_events._set_nodelay),
        # and without it an answer's body waits for the client's delayed ACK of its headers (~40 ms)
        self._sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, int(port)))
        self._sock.listen(int(backlog))
        self._sock.set_inheritable(True)
        self.config = uvicorn.Config(build_app(backend, default_topk, self.stats), http="httptools", loop="uvloop",
                                     lifespan="off", log_level="warning", access_log=False, backlog=int(backlog),
                                     timeout_keep_alive=timeout_keep_alive, timeout_graceful_shutdown=2)
        self._server = uvicorn.Server(self.config)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self._sock.getsockname()[1]

    @property
    def url(self) -> str:
        host = self._sock.getsockname()[0]
        if host in ("0.0.0.0", "::"):
            host = socket.gethostname()
        return f"http://{host}:{self.port}"

    @property
    def served(self) -> int:
        """Queries answered by this process."""
        return self.stats["served"]

    @property
    def connections(self) -> int:
        """Connections this process holds now (held, trickling and idle ones included)."""
        return len(self._server.server_state.connections)

    def _watch_idle(self) -> None:
        while not self._server.should_exit:
            time.sleep(min(5.0, self.idle_exit / 4))
            if time.monotonic() - self.stats["last"] > self.idle_exit:
                print(f"rtpo-retrieval: idle for {self.idle_exit:.0f} s, stopping", flush=True)
                self._server.should_exit = True
                return

    def start(self) -> "RetrievalServer":
        self._thread = threading.Thread(target=self.serve_forever, name="rtpo-retrieval", daemon=True)
        self._thread.start()
        t0 = time.monotonic()
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() - t0 > 30:
                raise RuntimeError("the retrieval server did not start")
            time.sleep(0.01)
        return self

    def fork_workers(self, workers: int) -> None:
        """Fork workers - 1 processes serving the same listening socket (call before serve_forever)."""
        for _ in range(max(int(workers), 1) - 1):
            if os.fork() == 0:
                try:
                    import ctypes
                    import signal
                    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
                except (OSError, AttributeError):
                    pass
                return  # the child serves too

    def serve_forever(self) -> None:
        if self.idle_exit:
            threading.Thread(target=self._watch_idle, daemon=True).start()
        self._server.run(sockets=[self._sock])

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._sock.close()


def load_backend(index: str | None = None, corpus: str | None = None, web: str | None = None,
                 key_env: str = "SERPAPI_API_KEY") -> Any:
    """The backend a server serves: a saved index dir, a corpus.jsonl indexed in memory, or a web API."""
    if sum(x is not None for x in (index, corpus, web)) != 1:
        raise ValueError("give exactly one of --index, --corpus, --web")
    if index is not None:
        meta = Path(index) / "meta.json"
        if meta.exists() and json.loads(meta.read_text()).get("kind") == "dense":
            from rtpo.retrieval.dense import DenseIndex
            return DenseIndex(index)
        from rtpo.retrieval.index import DiskBM25Index
        return DiskBM25Index(index)
    if corpus is not None:
        from rtpo.retrieval.bm25 import BM25Index, load_corpus
        idx = BM25Index(load_corpus(corpus))
        idx.name = f"bm25-memory:{Path(corpus).resolve()}"
        return idx
    from rtpo.retrieval.web import make_web_backend
    return make_web_backend({"kind": web, "key_env": key_env})


def _write_url(path: str, url: str) -> None:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    tmp.write_text(url + "\n")
    os.replace(tmp, p)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rtpo.retrieval.server", description="Search-R1 /retrieve server",
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--index", help="a directory written by `python -m rtpo.retrieval.index build`")
    src.add_argument("--corpus", help="a corpus.jsonl, indexed in memory (small corpora)")
    src.add_argument("--web", choices=["serpapi"], help="a web-search API (key from --key-env)")
    ap.add_argument("--key-env", default="SERPAPI_API_KEY")
    ap.add_argument("--host", default="127.0.0.1", help="0.0.0.0 to serve other nodes")
    ap.add_argument("--port", type=int, default=0, help="0 = any free port (reported)")
    ap.add_argument("--topk", type=int, default=3, help="passages per query when a request gives none")
    ap.add_argument("--url-file", help="write the server's URL here once it accepts requests")
    ap.add_argument("--idle-exit", type=float, default=None, help="stop after this many idle seconds")
    ap.add_argument("--workers", type=int, default=1, help="processes accepting on the socket (one query per core)")
    ap.add_argument("--backlog", type=int, default=BACKLOG,
                    help="listen backlog: connections queued before they are accepted (capped by somaxconn)")
    ap.add_argument("--timeout-keep-alive", type=float, default=KEEP_ALIVE,
                    help="seconds a kept-alive connection may stay idle between two requests (uvicorn's option)")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    try:
        backend = load_backend(args.index, args.corpus, args.web, args.key_env)
        srv = RetrievalServer(backend, args.host, args.port, args.topk, args.idle_exit, backlog=args.backlog,
                              timeout_keep_alive=args.timeout_keep_alive)
    except (ValueError, FileNotFoundError, OSError, ImportError, RetrievalError) as e:
        print(f"rtpo-retrieval: error: {e}", file=sys.stderr, flush=True)
        return 2
    name = getattr(backend, "name", type(backend).__name__)
    print(f"rtpo-retrieval: serving {name} on {srv.url} (pid {os.getpid()}, loaded in "
          f"{time.perf_counter() - t0:.1f} s)", flush=True)
    if args.url_file:
        _write_url(args.url_file, srv.url)
    srv.fork_workers(args.workers)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
