"""The retrieval server: Search-R1's `/retrieve` protocol over a BM25 index or a web backend.

    POST /retrieve  {"queries": ["..."], "topk": 3, "return_scores": true}
        -> {"result": [[{"document": {"id": "...", "contents": "\\"Title\\"\\ntext"}, "score": 1.23}, ...]]}
           (without return_scores each inner item is the document alone, as in Search-R1)
    GET  /health    -> {"status": "ok", "backend": "...", "passages": N, "pid": the answering process}

Errors: a malformed request is 400 {"error": ...}; a backend failure (e.g. the web provider
refused) is 502 {"error": ...}. The server is the stdlib ThreadingHTTPServer (HTTP/1.1 keep-alive,
one thread per connection), so it adds no dependency to the CPU install.

    python -m rtpo.retrieval.server --index results/retrieval/wiki18/bm25 --port 0 --url-file URL
    python -m rtpo.retrieval.server --web serpapi --port 8000          # SERPAPI_API_KEY in the env

It prints ``rtpo-retrieval: serving <backend> on http://HOST:PORT`` once it accepts requests and,
with --url-file, writes that URL there (atomically): --port 0 takes a free port and reports it.
With --idle-exit S it stops after S seconds without a request (the per-node servers that
`rtpo.retrieval.client` starts on demand use this, so none outlives its jobs for long).

--workers W forks W - 1 more processes after the index is loaded; all accept on the same socket.
A query holds the GIL for most of its time (numpy fancy indexing over the postings), so one
process answers about one query per core at a time; the memory-mapped index is shared by all
workers through the page cache. Workers die with the first process (PR_SET_PDEATHSIG).

Under load: every rollout thread of every process on a node may search at once.
- Listen backlog: --backlog, default 1024 connections (`request_queue_size`; the kernel caps it at
  net.core.somaxconn, 4096 on current kernels). The stdlib default of 5 reset connections from
  about 20 concurrent clients on: 18 to 64 of 200 concurrent searches failed through our retrying
  client (tests/test_retrieval_load.py).
- Handler threads: at most --max-threads (default 256) connections are served at once per process
  (so --workers W serves W times that). A connection beyond them waits in the listen backlog until
  a thread is free (no 503: the client just sees a slower answer, within its own timeout). While
  one waits, every answer is sent with ``Connection: close`` and the longest-idle kept-alive
  connection (between two requests) is closed, so idle keep-alive connections hand their threads
  over instead of holding them (_Server's docstring).
- Read timeout: --read-timeout, default 30 s, on every read and write of a connection (the socket
  timeout): a client that connects and sends nothing, or stops half-way, or keeps an idle
  keep-alive connection, holds its thread at most that long, then the server closes it.
- Request deadline: --request-timeout, default 10 s, for the whole of one request's arrival
  (request line, headers and body; from the connection's start, or a kept-alive connection's first
  byte of the next request). The read timeout restarts on every read, so a client sending a byte
  every 5 s would keep its thread for ever; the deadline closes it. A watchdog thread enforces it.
- Slow readers give way: while a connection waits for a thread, the server closes, one per waiting
  connection, the connection whose request has been arriving longest, once that is over
  --slow-grace (default 1 s; a real client sends its request in milliseconds). So connections held
  half-sent (300 of them against 256 threads, tests/test_retrieval_hold.py) cannot keep real
  searches out: the searches wait at most about the grace, not the deadline.
- Validation: 400 {"error": ...} naming the field for a body that is not a JSON object, nested
  deeper than MAX_DEPTH, 'queries' not a list of at most MAX_QUERIES strings, 'topk' not an integer
  in 1..1000 (null or absent: the server's --topk), 'return_scores' not a JSON boolean (absent:
  false); a missing or bad Content-Length is 400 and one over MAX_BODY bytes (1 MiB) 413, both
  answered without reading the body and then the connection closed.
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
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from rtpo.retrieval.core import RetrievalError, contents_of

__all__ = ["RetrievalServer", "load_backend", "main"]

MAX_BODY = 1 << 20
MAX_QUERIES = 1024
MAX_DEPTH = 32          # a request is 2 deep ({"queries": [...]}); json.loads recurses per level
BACKLOG = 1024          # listen backlog (connections the kernel queues before we accept them)
MAX_THREADS = 256       # connections served at once (one thread each) per process
READ_TIMEOUT = 30.0     # seconds a connection may keep a thread waiting for its next bytes
REQUEST_TIMEOUT = 10.0  # seconds one request may take to arrive (line, headers, body), however it trickles
SLOW_GRACE = 1.0        # seconds after which an arriving request gives way to a connection waiting for a thread


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in two writes: no 40 ms delayed-ACK stall
    server: "_Server"
    _unread = False  # an answer was sent without reading the request's body (see finish)

    def setup(self) -> None:
        self.timeout = self.server.read_timeout  # StreamRequestHandler.setup: the socket's timeout
        super().setup()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet: one line per request is too much
        pass

    def _send(self, code: int, obj: Any, close: bool = False) -> None:
        self.server.arriving(self, False)  # answering: the request is in (or refused unread)
        body = json.dumps(obj, ensure_ascii=False).encode()
        close = close or self.server.waiting  # a connection waits for a thread: hand this one over
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        if close:
            self.send_header("Connection", "close")  # end_headers sees it: close_connection = True
        self.end_headers()
        self.wfile.write(body)

    def _refuse_unread(self, code: int, message: str) -> None:
        """Answer without reading the body; the connection is closed after (its stream is unusable)."""
        self._unread = True
        self._send(code, {"error": message}, close=True)

    def _body_length(self) -> int | None:
        """The request's Content-Length if it is acceptable, else None (and the error is answered)."""
        raw = self.headers.get("Content-Length")
        try:
            n = int(raw) if raw is not None else -1
        except ValueError:
            n = -1
        if n > MAX_BODY:
            self._refuse_unread(413, f"request body too large: Content-Length {n} > {MAX_BODY} bytes")
            return None
        if n <= 0:
            self._refuse_unread(400, f"'Content-Length' must be an integer in 1..{MAX_BODY}, got {raw!r}")
            return None
        return n

    def handle_expect_100(self) -> bool:
        """`Expect: 100-continue` (curl's big bodies): refuse an oversize body before it is sent."""
        if self.command == "POST" and self._body_length() is None:
            return False
        return super().handle_expect_100()

    def handle(self) -> None:
        """BaseHTTPRequestHandler.handle, but between two requests of a kept-alive connection the
        connection is idle and the server may close it for a connection waiting for a thread; while a
        request arrives it is under the request deadline (_Server.arriving)."""
        self.close_connection = True
        self.server.arriving(self, True)
        self.handle_one_request()
        while not self.close_connection and self._next_request_arrives():
            self.handle_one_request()

    def _next_request_arrives(self) -> bool:
        self.server.idle(self, True)
        try:
            more = bool(self.rfile.peek(1))  # blocks until bytes, EOF, the read timeout, or a reap
        except (OSError, ValueError):  # TimeoutError, reset; ValueError: the file was closed
            more = False
        busy = self.server.idle(self, False)
        if busy and more:
            self.server.arriving(self, True)  # the next request's first byte is here: its deadline starts
        return busy and more

    def finish(self) -> None:
        self.server.arriving(self, False)
        super().finish()
        if self._unread:  # lingering close: without it the unread body makes the kernel reset the
            _drain(self.connection)  # connection, and the client may lose the answer we sent

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self.server.touch()
        if self.path.rstrip("/") == "/health":
            b = self.server.backend
            n = len(b) if hasattr(b, "__len__") else None
            self._send(200, {"status": "ok", "backend": getattr(b, "name", type(b).__name__), "passages": n,
                             "pid": os.getpid()})
        else:
            self._send(404, {"error": f"no such path {self.path}; use POST /retrieve or GET /health"})

    def do_POST(self) -> None:  # noqa: N802
        self.server.touch()
        if self.path.rstrip("/") != "/retrieve":
            self._refuse_unread(404, f"no such path {self.path}; use POST /retrieve")
            return
        n = self._body_length()
        if n is None:
            return
        raw = self.rfile.read(n)
        self.server.arriving(self, False)  # the request is in: searching is not under its deadline
        if len(raw) < n:  # the client closed half-way (a stalled one times out: TimeoutError)
            self.close_connection = True
            return
        try:
            depth = _nesting_depth(raw)
            if depth > MAX_DEPTH:
                raise ValueError(f"body is nested {depth} levels deep, at most {MAX_DEPTH} allowed")
            try:
                req = json.loads(raw)
            except RecursionError:  # not reached after the depth check; kept as the last guard
                raise ValueError(f"body is nested more than {MAX_DEPTH} levels deep") from None
            queries, topk, scores = _validate(req, self.server.default_topk)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            self._send(400, {"error": f"body is not JSON ({e})"})
            return
        except ValueError as e:  # _validate's, and json's own limits (e.g. an integer of 5000 digits)
            self._send(400, {"error": str(e)})
            return
        try:
            results = [self.server.backend.search(q, topk) for q in queries]
        except RetrievalError as e:
            self._send(502, {"error": str(e)})
            return
        except Exception as e:  # a backend bug: answer it (the client retries a 5xx) rather than drop the connection
            self._send(500, {"error": f"search failed: {type(e).__name__}: {e}"})
            return
        out = []
        for hits in results:
            docs = [{"id": h["id"], "contents": contents_of(h)} for h in hits]
            out.append([{"document": d, "score": h.get("score", 0.0)} for d, h in zip(docs, hits)] if scores else docs)
        self.server.served += len(queries)
        self._send(200, {"result": out})


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


def _drain(sock: socket.socket, limit: int = 4 * MAX_BODY, seconds: float = 2.0) -> None:
    """Half-close and read what the client still sends (at most `limit` bytes, `seconds`)."""
    try:
        sock.shutdown(socket.SHUT_WR)
        end, got = time.monotonic() + seconds, 0
        while got < limit and (left := end - time.monotonic()) > 0:
            sock.settimeout(min(left, 0.5))
            chunk = sock.recv(65536)
            if not chunk:
                return
            got += len(chunk)
    except OSError:  # reset, timed out: nothing more to save
        pass


class _Server(ThreadingHTTPServer):
    """ThreadingHTTPServer with a sized backlog, at most `max_threads` handler threads and a read
    timeout per connection (module docstring).

    Bounding the threads: process_request (the accept loop's thread) takes a slot of a semaphore
    before it starts a connection's thread, and the thread gives it back when the connection ends.
    While no slot is free the accept loop waits, so further connections queue in the kernel's listen
    backlog (sized for that) rather than being refused or answered 503: the simplest rule that
    never fails a request a moment of patience would answer. `waiting` is set meanwhile, and every
    answer then says ``Connection: close`` so kept-alive connections free their threads, and a
    kept-alive connection idle between two requests is closed (`_reap`, one per waiting connection:
    HTTP lets a server close an idle connection at any time; our client reconnects). Otherwise an
    idle connection frees its thread after `read_timeout`. The wait polls for shutdown()."""
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr, backend, default_topk: int, backlog: int = BACKLOG, max_threads: int = MAX_THREADS,
                 read_timeout: float | None = READ_TIMEOUT, request_timeout: float | None = REQUEST_TIMEOUT,
                 slow_grace: float = SLOW_GRACE):
        if int(backlog) < 1 or int(max_threads) < 1:
            raise ValueError(f"backlog and max_threads must be >= 1, got {backlog} and {max_threads}")
        for name, v in (("read_timeout", read_timeout), ("request_timeout", request_timeout)):
            if v is not None and not v > 0:
                raise ValueError(f"{name} must be > 0 seconds (or None), got {v}")
        if not slow_grace >= 0:
            raise ValueError(f"slow_grace must be >= 0 seconds, got {slow_grace}")
        self.request_timeout, self.slow_grace = request_timeout, float(slow_grace)
        self._arriving: dict[_Handler, float] = {}  # connections whose request is arriving -> since when
        self.evicted = self.expired = 0  # slow requests closed for a waiting connection / at their deadline
        self.request_queue_size = int(backlog)  # read by server_activate, inside super().__init__
        self.max_threads, self.read_timeout = int(max_threads), read_timeout
        self._slots = threading.BoundedSemaphore(self.max_threads)
        self._stopping = False
        self.waiting = False   # an accepted connection waits for a free thread
        self.active = 0        # connections being served now
        self.peak = 0          # the most served at once
        self._count = threading.Lock()
        self._idle: dict[_Handler, None] = {}  # kept-alive connections between requests, oldest first
        super().__init__(addr, _Handler)
        self.backend, self.default_topk = backend, int(default_topk)
        self.served = 0
        self.last = time.monotonic()

    def arriving(self, handler: _Handler, on: bool) -> None:
        """Mark `handler`'s request as arriving (the deadline and the grace count from now) or arrived."""
        with self._count:
            if on:
                self._arriving[handler] = time.monotonic()
            else:
                self._arriving.pop(handler, None)

    def _close(self, handler: _Handler) -> None:
        try:
            handler.connection.shutdown(socket.SHUT_RDWR)  # its blocked read returns: the thread ends
        except OSError:
            pass

    def _watch_deadlines(self) -> None:
        """Close each connection whose request is still arriving request_timeout after it began."""
        tick = min(0.25, self.request_timeout / 4)
        while not self._stopping:
            time.sleep(tick)
            now = time.monotonic()
            with self._count:
                late = [h for h, t0 in self._arriving.items() if now - t0 > self.request_timeout]
                for h in late:
                    del self._arriving[h]
                self.expired += len(late)
            for h in late:
                self._close(h)

    def _evict_slow(self) -> bool:
        """Close the connection whose request has been arriving longest, if longer than slow_grace."""
        now = time.monotonic()
        with self._count:
            if not self._arriving:
                return False
            handler, t0 = min(self._arriving.items(), key=lambda kv: kv[1])
            if now - t0 <= self.slow_grace:
                return False
            del self._arriving[handler]
            self.evicted += 1
        self._close(handler)
        return True

    def touch(self) -> None:
        self.last = time.monotonic()

    def process_request(self, request, client_address) -> None:
        if not self._slots.acquire(blocking=False):
            self.waiting = True
            try:
                self._reap()
                while not self._slots.acquire(timeout=0.1):
                    if self._stopping:
                        self.shutdown_request(request)
                        return
                    self._reap()
            finally:
                self.waiting = False
        with self._count:
            self.active += 1
            self.peak = max(self.peak, self.active)
        try:
            super().process_request(request, client_address)
        except BaseException:  # the thread did not start (RuntimeError: can't start new thread)
            self._release()
            self.shutdown_request(request)
            raise

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._release()

    def idle(self, handler: _Handler, idle: bool) -> bool:
        """Mark `handler`'s connection idle (waiting for its next request) or busy again; the
        latter returns False if it was reaped meanwhile (then it must close)."""
        with self._count:
            if idle:
                self._idle[handler] = None
                return True
            return self._idle.pop(handler, False) is None

    def _reap(self) -> None:
        """Close the longest-idle kept-alive connection, if any (its thread sees EOF and ends); if none,
        the slowest arriving request past the grace (_evict_slow)."""
        with self._count:
            handler = next(iter(self._idle), None)
            if handler is not None:
                del self._idle[handler]
        if handler is None:
            self._evict_slow()
            return
        self._close(handler)

    def _release(self) -> None:
        with self._count:
            self.active -= 1
        self._slots.release()

    def handle_error(self, request, client_address) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError)):  # the client went away: no traceback
            return
        super().handle_error(request, client_address)

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        if self.request_timeout is not None:  # here, not in __init__: a forked worker has only the forking thread
            threading.Thread(target=self._watch_deadlines, name="rtpo-retrieval-deadlines", daemon=True).start()
        super().serve_forever(poll_interval)

    def shutdown(self) -> None:
        self._stopping = True
        super().shutdown()


class RetrievalServer:
    """A `/retrieve` server over `backend` (anything with ``search(query, k) -> [passage]``).

    `start()` serves from a background thread (tests, embedding); `serve_forever()` blocks (CLI)."""

    def __init__(self, backend, host: str = "127.0.0.1", port: int = 0, default_topk: int = 3,
                 idle_exit: float | None = None, backlog: int = BACKLOG, max_threads: int = MAX_THREADS,
                 read_timeout: float | None = READ_TIMEOUT, request_timeout: float | None = REQUEST_TIMEOUT,
                 slow_grace: float = SLOW_GRACE):
        self._srv = _Server((host, int(port)), backend, default_topk, backlog=backlog, max_threads=max_threads,
                            read_timeout=read_timeout, request_timeout=request_timeout, slow_grace=slow_grace)
        self.idle_exit = idle_exit
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self._srv.server_address[1]

    @property
    def url(self) -> str:
        host = self._srv.server_address[0]
        if host in ("0.0.0.0", "::"):
            import socket
            host = socket.gethostname()
        return f"http://{host}:{self.port}"

    @property
    def served(self) -> int:
        return self._srv.served

    @property
    def active(self) -> int:
        """Connections being served now (each holds a handler thread)."""
        return self._srv.active

    @property
    def arriving(self) -> int:
        """Connections with a thread whose request is still arriving."""
        return len(self._srv._arriving)

    @property
    def closed_slow(self) -> dict[str, int]:
        """Connections closed while their request arrived: at the deadline, and to let a waiting one in."""
        return {"deadline": self._srv.expired, "gave_way": self._srv.evicted}

    @property
    def peak(self) -> int:
        """The most connections served at once so far (never above max_threads)."""
        return self._srv.peak

    def _watch_idle(self) -> None:
        while True:
            time.sleep(min(5.0, self.idle_exit / 4))
            if time.monotonic() - self._srv.last > self.idle_exit:
                print(f"rtpo-retrieval: idle for {self.idle_exit:.0f} s, stopping", flush=True)
                self._srv.shutdown()
                return

    def start(self) -> "RetrievalServer":
        self._thread = threading.Thread(target=self._srv.serve_forever, name="rtpo-retrieval", daemon=True)
        self._thread.start()
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
        self._srv.serve_forever()

    def stop(self) -> None:
        self._srv.shutdown()
        self._srv.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)


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
    ap.add_argument("--max-threads", type=int, default=MAX_THREADS,
                    help="connections served at once per process; more wait in the backlog")
    ap.add_argument("--read-timeout", type=float, default=READ_TIMEOUT,
                    help="seconds a connection may wait for its next bytes (idle keep-alive included)")
    ap.add_argument("--request-timeout", type=float, default=REQUEST_TIMEOUT,
                    help="seconds one request may take to arrive, however it trickles (line, headers, body)")
    ap.add_argument("--slow-grace", type=float, default=SLOW_GRACE,
                    help="seconds after which an arriving request is closed to let a connection waiting for a thread in")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    try:
        backend = load_backend(args.index, args.corpus, args.web, args.key_env)
        srv = RetrievalServer(backend, args.host, args.port, args.topk, args.idle_exit, backlog=args.backlog,
                              max_threads=args.max_threads, read_timeout=args.read_timeout,
                              request_timeout=args.request_timeout, slow_grace=args.slow_grace)
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
