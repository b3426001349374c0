"""The HTTP backend of the search tool: a client of a `/retrieve` server (rtpo.retrieval.server,
or any Search-R1-compatible one), with timeouts, retries and a server started on demand.

`HttpRetriever(url=...)` talks to a running server. With ``url="auto"`` and an ``index`` directory
the first search of a process makes sure that *one* server per node serves that index: under a
per-node lock (``$RTPO_RETRIEVAL_RUNDIR`` or the node's temp dir, ``rtpo-retrieval-<uid>/<hash of the
index path>/``) it reuses the server whose URL file answers /health, or starts
``python -m rtpo.retrieval.server --index ... --port 0 --url-file ... --idle-exit 1800`` and waits
for the port it reports. So the training and evaluation jobs that need a server start it (once per
node: every process and Ray worker on the node shares it), nobody has to pick a port, and a dead
server is replaced at the next search after a failure. Server log: ``server.log`` beside the URL file.

Failures (refused connection, timeout, HTTP 5xx, malformed JSON) are retried up to `retries` times
with exponential backoff, then raised as RetrievalError; the search env turns that into an error
observation with a fixed text (rtpo.tools.search_tool.SEARCH_FAILED: no URL, port or pid, so the
tokens a model sees do not depend on where the server ran) and a tool error, so the rollout goes on.

What a dead or stopped server costs: `timeout` bounds a whole search -- connect, read,
the retries and their backoff; each attempt gets what is left of it -- where it used to bound each
of three attempts (~31 s a search with the defaults against a SIGSTOPped server). And a circuit
breaker: after `circuit_failures` searches in a row failed (from any thread), every search fails at
once for `circuit_cooldown_s`, then one search is let through to probe the server (the others still
fail at once); its success closes the circuit. So a dead server costs one timeout per rollout wave
(the env threads search together), then nothing until the next probe. Starting a server for
``url="auto"`` is outside that bound (its own `start_timeout`: loading an index takes minutes).
"""

from __future__ import annotations

import fcntl
import hashlib
import http.client
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from rtpo.retrieval.core import ResultCache, RetrievalError, passage_from_document

__all__ = ["HttpRetriever", "CachedRetriever", "ensure_server", "server_dir", "health"]

_CHILDREN: list[subprocess.Popen] = []  # servers this process started (polled, so none stays a zombie)


def _searches(n: int) -> str:
    return f"{n} search{'es' * (n != 1)}"


def health(url: str, timeout: float = 2.0) -> dict | None:
    """The server's /health answer, or None if it does not answer."""
    u = urlsplit(url)
    try:
        conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=timeout)
        conn.request("GET", "/health")
        r = conn.getresponse()
        body = r.read()
        conn.close()
        return json.loads(body) if r.status == 200 else None
    except (OSError, http.client.HTTPException, ValueError):
        return None


def server_dir(index: str | Path) -> Path:
    root = Path(os.environ.get("RTPO_RETRIEVAL_RUNDIR") or tempfile.gettempdir()) / f"rtpo-retrieval-{os.getuid()}"
    return root / hashlib.sha256(str(Path(index).resolve()).encode()).hexdigest()[:16]


def ensure_server(index: str | Path, start_timeout: float = 900.0, idle_exit: float = 1800.0,
                  workers: int = 1) -> str:
    """The URL of this node's server for `index`, starting one if none answers (see module docstring)."""
    for p in list(_CHILDREN):
        if p.poll() is not None:
            _CHILDREN.remove(p)
    d = server_dir(index)
    d.mkdir(parents=True, exist_ok=True)
    url_file = d / "url"
    with open(d / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if url_file.exists():
            url = url_file.read_text().strip()
            if url and health(url):
                return url
            url_file.unlink()
        log_path = d / "server.log"
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "rtpo.retrieval.server", "--index", str(Path(index).resolve()),
                 "--port", "0", "--url-file", str(url_file), "--idle-exit", str(idle_exit),
                 "--workers", str(workers)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        _CHILDREN.append(proc)
        t0 = time.monotonic()
        while time.monotonic() - t0 < start_timeout:
            if url_file.exists():
                url = url_file.read_text().strip()
                if health(url, timeout=5.0):
                    print(f"rtpo-retrieval: started server pid {proc.pid} on {url} for {index} "
                          f"(log {log_path})", file=sys.stderr, flush=True)
                    return url
            if proc.poll() is not None:
                tail = log_path.read_text(errors="replace")[-1500:]
                raise RetrievalError(f"the retrieval server for {index} exited with code {proc.returncode}; "
                                     f"log {log_path}:\n{tail}")
            time.sleep(0.2)
        raise RetrievalError(f"the retrieval server for {index} did not answer within {start_timeout:.0f} s "
                             f"(log {log_path})")


def _index_name(index: str | Path | None) -> str | None:
    """The identity of a built index (the cache key's backend): the same as the in-process index's
    `name`, so a rebuilt index never reuses results cached from the old one."""
    meta = Path(index) / "meta.json" if index else None
    if meta is None or not meta.exists():
        return None
    m = json.loads(meta.read_text())
    if m.get("kind") == "dense":
        return f"dense:{m['model']}:{m['passages']}:{m['built_at']}"
    return f"bm25:{m['passages']}:{m['corpus_bytes']}:{m['built_at']}"


class HttpRetriever:
    """search(query, k) against a `/retrieve` server; one keep-alive connection per thread.

    url:      "http://host:port" of a running server, or "auto" (needs `index`: see ensure_server)
    topk:     passages per query; when set it overrides the k the caller passes
    timeout:  seconds one search may take in all, retries included; retries: extra attempts after a
              failure while time is left
    circuit_failures, circuit_cooldown_s: the circuit breaker (module docstring)
    """

    def __init__(self, url: str, index: str | Path | None = None, topk: int | None = None,
                 timeout: float = 10.0, retries: int = 2, backoff: float = 0.25, name: str | None = None,
                 start_timeout: float = 900.0, workers: int = 1, circuit_failures: int = 2,
                 circuit_cooldown_s: float = 30.0):
        if url == "auto" and index is None:
            raise ValueError("retriever kind http: url 'auto' needs 'index' (the index the server loads)")
        if url != "auto" and urlsplit(url).scheme not in ("http", "https"):
            raise ValueError(f"retriever kind http: url must be http(s)://host:port or 'auto', got {url!r}")
        self.spec_url, self.index = url, index
        self.topk = int(topk) if topk else None
        self.timeout, self.retries, self.backoff = float(timeout), int(retries), float(backoff)
        self.start_timeout, self.workers = start_timeout, int(workers)
        self.name = name or _index_name(index) or f"http:{url}"
        self._url: str | None = None if url == "auto" else url
        self._local = threading.local()
        self._lock = threading.Lock()
        self.requests = 0
        self.circuit_failures, self.circuit_cooldown_s = max(1, int(circuit_failures)), float(circuit_cooldown_s)
        self._circuit = threading.Lock()  # not self._lock: that one is held while a server starts
        self._failed_in_a_row = 0      # the circuit is open while this is >= circuit_failures
        self._open_until = 0.0         # time.monotonic() before which no search is tried
        self._probing = False          # a probe search is in flight (the others fail at once)

    def url(self) -> str:
        with self._lock:
            if self._url is None:
                self._url = ensure_server(self.index, start_timeout=self.start_timeout, workers=self.workers)
            return self._url

    def _conn(self, url: str) -> http.client.HTTPConnection:
        c = getattr(self._local, "conn", None)
        if c is None or getattr(self._local, "url", None) != url:
            if c is not None:
                c.close()
            u = urlsplit(url)
            cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
            c = cls(u.hostname, u.port or (443 if u.scheme == "https" else 80), timeout=self.timeout)
            self._local.conn, self._local.url = c, url
        return c

    def _drop_conn(self) -> None:
        c = getattr(self._local, "conn", None)
        if c is not None:
            c.close()
        self._local.conn = None

    # ------------------------------------------------------------------ the circuit breaker
    def _admit(self) -> str | None:
        """Whether a search may go to the server now: "closed", "probe" (the one search let through
        after the cooldown), or None (open: fail at once)."""
        with self._circuit:
            if self._failed_in_a_row < self.circuit_failures:
                return "closed"
            if self._probing or time.monotonic() < self._open_until:
                return None
            self._probing = True
            return "probe"

    def _settle(self, admitted: str, ok: bool | None, last: str = "") -> None:
        """Count a search's outcome (ok None: interrupted, not counted)."""
        with self._circuit:
            if admitted == "probe":
                self._probing = False
            if ok is None:
                return
            was_open = self._failed_in_a_row >= self.circuit_failures
            if ok:
                if was_open:
                    print(f"rtpo-retrieval: {self._url or self.spec_url} answers again; circuit closed",
                          file=sys.stderr, flush=True)
                self._failed_in_a_row = 0
                return
            self._failed_in_a_row += 1
            if self._failed_in_a_row >= self.circuit_failures:
                self._open_until = time.monotonic() + self.circuit_cooldown_s
                if not was_open:
                    print(f"rtpo-retrieval: {self._url or self.spec_url}: {_searches(self._failed_in_a_row)} in a "
                          f"row failed (last: {last}); searches fail at once for {self.circuit_cooldown_s:g} s, "
                          "then one probes the server", file=sys.stderr, flush=True)

    def retrieve(self, queries: list[str], topk: int) -> list[list[dict[str, Any]]]:
        """One /retrieve request (with retries, within `timeout` in all) -> passages per query."""
        admitted = self._admit()
        if admitted is None:
            raise RetrievalError(f"retrieval server {self._url or self.spec_url}: not asked, "
                                 f"{_searches(self._failed_in_a_row)} in a row failed (circuit open)")
        try:
            result = self._retrieve(queries, topk)
        except RetrievalError as e:
            self._settle(admitted, ok=False, last=str(e))
            raise
        except BaseException:  # KeyboardInterrupt, a bug: says nothing about the server
            self._settle(admitted, ok=None)
            raise
        self._settle(admitted, ok=True)
        return result

    def _retrieve(self, queries: list[str], topk: int) -> list[list[dict[str, Any]]]:
        body = json.dumps({"queries": queries, "topk": int(topk), "return_scores": True}).encode()
        deadline = time.monotonic() + self.timeout
        last, attempts = "no attempt", 0
        for attempt in range(self.retries + 1):
            if attempt:
                pause = self.backoff * 2 ** (attempt - 1)
                if time.monotonic() + pause >= deadline:
                    break
                time.sleep(pause)
            t = time.monotonic()
            try:
                url = self.url()
            except RetrievalError as e:
                last, attempts = str(e), attempts + 1
                continue
            finally:
                deadline += time.monotonic() - t  # starting the node's server is not counted (start_timeout)
            left = deadline - time.monotonic()
            if left <= 0:
                break
            attempts += 1
            try:
                c = self._conn(url)
                c.timeout = left                # for a new connection's connect
                if c.sock is not None:          # a kept-alive one: its reads
                    c.sock.settimeout(left)
                c.request("POST", "/retrieve", body=body, headers={"Content-Type": "application/json"})
                r = c.getresponse()
                raw = r.read()
                self.requests += 1
            except (OSError, http.client.HTTPException) as e:  # refused, reset, timeout
                self._drop_conn()
                last = f"{type(e).__name__}: {e}"
                continue
            if r.status >= 500:
                last = f"HTTP {r.status}: {raw[:200].decode(errors='replace')}"
                continue
            if r.status != 200:
                raise RetrievalError(f"retrieval server {url}: HTTP {r.status}: {raw[:300].decode(errors='replace')}")
            try:
                result = json.loads(raw)["result"]
                if not isinstance(result, list) or len(result) != len(queries):
                    raise ValueError(f"'result' has {len(result) if isinstance(result, list) else 'no'} lists "
                                     f"for {len(queries)} queries")
                return [[passage_from_document(item["document"], item.get("score")) if "document" in item
                         else passage_from_document(item) for item in hits] for hits in result]
            except (ValueError, KeyError, TypeError) as e:
                last = f"malformed response ({type(e).__name__}: {e})"
                continue
        if self.spec_url == "auto":
            with self._lock:
                self._url = None  # look for (or start) a server again at the next search
        raise RetrievalError(f"retrieval server {self._url or self.spec_url} failed after "
                             f"{attempts} attempt{'s' * (attempts != 1)} in {self.timeout:g} s: {last}")

    def search(self, query: str, k: int = 3) -> list[dict[str, Any]]:
        return self.retrieve([query], self.topk or k)[0]


class CachedRetriever:
    """Any backend plus the persistent ResultCache: a cached (backend, query, topk) is never asked
    again; failures are not cached."""

    def __init__(self, backend: Any, cache: ResultCache, name: str | None = None, topk: int | None = None):
        self.backend, self.cache = backend, cache
        self.name = name or getattr(backend, "name", type(backend).__name__)
        self.topk = topk

    def __len__(self) -> int:
        return len(self.backend)

    def search(self, query: str, k: int = 3) -> list[dict[str, Any]]:
        k = self.topk or k
        hits = self.cache.get(self.name, query, k)
        if hits is None:
            hits = self.cache.put(self.name, query, k, self.backend.search(query, k))
        return [dict(h) for h in hits]
