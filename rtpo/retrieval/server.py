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
"""

from __future__ import annotations

import argparse
import json
import os
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


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in two writes: no 40 ms delayed-ACK stall
    server: "_Server"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet: one line per request is too much
        pass

    def _send(self, code: int, obj: Any) -> None:
        body = json.dumps(obj, ensure_ascii=False).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

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
            self._send(404, {"error": f"no such path {self.path}; use POST /retrieve"})
            return
        try:
            n = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            n = -1
        if not 0 < n <= MAX_BODY:
            self._send(400, {"error": f"Content-Length must be 1..{MAX_BODY}"})
            return
        try:
            req = json.loads(self.rfile.read(n))
            queries, topk, scores = _validate(req, self.server.default_topk)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            self._send(400, {"error": f"body is not JSON ({e})"})
            return
        except ValueError as e:
            self._send(400, {"error": str(e)})
            return
        try:
            results = [self.server.backend.search(q, topk) for q in queries]
        except RetrievalError as e:
            self._send(502, {"error": str(e)})
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
        raise ValueError(f"'topk' must be an integer in 1..1000, got {topk!r}")
    return queries, topk, bool(req.get("return_scores", False))


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr, backend, default_topk: int):
        super().__init__(addr, _Handler)
        self.backend, self.default_topk = backend, int(default_topk)
        self.served = 0
        self.last = time.monotonic()

    def touch(self) -> None:
        self.last = time.monotonic()


class RetrievalServer:
    """A `/retrieve` server over `backend` (anything with ``search(query, k) -> [passage]``).

    `start()` serves from a background thread (tests, embedding); `serve_forever()` blocks (CLI)."""

    def __init__(self, backend, host: str = "127.0.0.1", port: int = 0, default_topk: int = 3,
                 idle_exit: float | None = None):
        self._srv = _Server((host, int(port)), backend, default_topk)
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
    ap = argparse.ArgumentParser(prog="python -m rtpo.retrieval.server", description="Search-R1 /retrieve server")
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
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    try:
        backend = load_backend(args.index, args.corpus, args.web, args.key_env)
        srv = RetrievalServer(backend, args.host, args.port, args.topk, args.idle_exit)
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
