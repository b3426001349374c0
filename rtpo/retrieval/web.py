"""Web search for the deep-search benchmarks (GAIA, WebWalkerQA, XBench-DeepSearch, HLE): SerpAPI.

ARPO evaluates these benchmarks with a live web search (Bing, top-10 snippets); Search-R1 ships a
SerpAPI proxy speaking its `/retrieve` protocol (search_r1/search/serp_search_server.py). This
backend does the same: ``GET {endpoint}?engine=google&q=...&num=K&api_key=...`` and turns SerpAPI's
JSON into passages:

  answer_box        {"title", "snippet" | "answer", "link"}          -> the first passage, if present
  organic_results   [{"position", "title", "link", "snippet", ...}]  -> the next ones, in position order
  error             "..." (with HTTP 4xx/5xx; or 200 with "Google hasn't returned any results ...")

at most K passages per query (id = the result's link, title, text = the snippet). The API key comes
from an environment variable (`key_env`, default SERPAPI_API_KEY) and never appears in errors,
logs or the cache. Behind `rtpo.retrieval.server --web serpapi` it speaks `/retrieve` too; the
search tool also calls it in-process (retriever kind "serpapi"), with the same persistent cache.

Errors: HTTP 429 and 5xx, timeouts and refused connections are retried with backoff, then raised
as RetrievalError; 401/403 (bad key) and other 4xx are raised at once; a body that is not JSON is
an error. Without a key the backend cannot be built (WebSearchUnavailable): the data job then
marks these benchmarks "not run" instead of scoring them against Wikipedia.

A key is not a connection: compute nodes are often offline. A job that uses web search therefore
starts with a probe query (`web_available(spec, probe=True)`: PROBE_QUERY, one result, through the
network, not the cache). Unreachable, its benchmarks are "not run" in that evaluation, with the
probe's error as the reason, never scored (rtpo.evaluate). Reachable, the searches may still fail
later: an evaluation whose web searches fail above MAX_FAILED_SHARE fails (no result is written for
the shard that crossed it), so its retry searches again instead of scoring the failures as wrong
answers.
"""

from __future__ import annotations

import http.client
import json
import os
import time
from typing import Any
from urllib.parse import urlencode, urlsplit

from rtpo.retrieval.core import RetrievalError

__all__ = ["SerpApiBackend", "WebSearchUnavailable", "make_web_backend", "web_available", "parse_serpapi"]

SERPAPI_ENDPOINT = "https://serpapi.com/search.json"
NO_RESULTS = "hasn't returned any results"
PROBE_QUERY = "Wikipedia"  # a query every web search engine answers
# Above this share of failed web searches (after each search's own retries) an evaluation fails: a few
# transient failures are scored as what the agent saw (SEARCH_FAILED, as a live search would give), a
# broken connection is not.
MAX_FAILED_SHARE = 0.05


class WebSearchUnavailable(RetrievalError):
    """No API key (or no provider) for web search."""


def parse_serpapi(data: Any, k: int) -> list[dict[str, Any]]:
    """SerpAPI Google JSON -> at most k passages (answer box first, then organic results)."""
    if not isinstance(data, dict):
        raise RetrievalError(f"serpapi: expected a JSON object, got {type(data).__name__}")
    if data.get("error"):
        if NO_RESULTS in str(data["error"]):
            return []
        raise RetrievalError(f"serpapi: {data['error']}")
    out: list[dict[str, Any]] = []
    box = data.get("answer_box")
    if isinstance(box, dict):
        text = box.get("snippet") or box.get("answer") or ""
        if isinstance(text, list):
            text = " ".join(map(str, text))
        if text:
            out.append({"id": str(box.get("link") or "answer_box"), "title": str(box.get("title") or ""),
                        "text": str(text), "score": 0.0})
    organic = data.get("organic_results") or []
    if not isinstance(organic, list):
        raise RetrievalError("serpapi: 'organic_results' is not a list")
    for r in sorted((r for r in organic if isinstance(r, dict)), key=lambda r: r.get("position", 1 << 30)):
        out.append({"id": str(r.get("link", "")), "title": str(r.get("title", "")),
                    "text": str(r.get("snippet", "")), "score": 0.0})
    for i, p in enumerate(out):
        p["score"] = float(len(out) - i)  # rank as a score: the protocol carries one
    return out[:k]


class SerpApiBackend:
    """search(query, k) -> passages from SerpAPI's Google engine (see the module docstring)."""

    search_in_thread = True  # it waits on the network: the retrieval server searches on its thread pool

    def __init__(self, api_key: str, endpoint: str = SERPAPI_ENDPOINT, engine: str = "google",
                 timeout: float = 20.0, retries: int = 2, backoff: float = 1.0,
                 params: dict[str, str] | None = None):
        if not api_key:
            raise WebSearchUnavailable("serpapi: empty API key")
        self._key = api_key
        self.endpoint, self.engine = endpoint, engine
        self.timeout, self.retries, self.backoff = float(timeout), int(retries), float(backoff)
        self.params = dict(params or {})
        self.name = f"serpapi:{engine}"
        self.requests = 0

    def _get(self, query: str, k: int) -> tuple[int, bytes]:
        u = urlsplit(self.endpoint)
        cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
        qs = urlencode({"engine": self.engine, "q": query, "num": max(int(k), 1), **self.params,
                        "api_key": self._key})
        conn = cls(u.hostname, u.port, timeout=self.timeout)
        try:
            conn.request("GET", f"{u.path or '/search.json'}?{qs}", headers={"Accept": "application/json"})
            r = conn.getresponse()
            self.requests += 1
            return r.status, r.read()
        finally:
            conn.close()

    def search(self, query: str, k: int = 3) -> list[dict[str, Any]]:
        last = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1))
            try:
                status, raw = self._get(query, k)
            except (OSError, http.client.HTTPException) as e:  # timeout, refused, reset
                last = f"{type(e).__name__}: {e}"
                continue
            try:
                data = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError):
                data = None
            if status == 429 or status >= 500:
                msg = data.get("error") if isinstance(data, dict) else raw[:200].decode(errors="replace")
                last = f"HTTP {status}: {msg}"
                continue
            if status != 200:
                msg = data.get("error") if isinstance(data, dict) else raw[:200].decode(errors="replace")
                raise RetrievalError(f"serpapi: HTTP {status}: {msg}")
            if data is None:
                raise RetrievalError(f"serpapi: malformed JSON in the response ({raw[:80]!r})")
            return parse_serpapi(data, k)
        raise RetrievalError(f"serpapi: failed after {self.retries + 1} attempts: {last}")


def web_available(spec: dict[str, Any], probe: bool = False) -> tuple[bool, str]:
    """(usable, reason): whether the web backend of `spec` has what it needs (its API key) and, with
    `probe`, answers a probe query (PROBE_QUERY, one result) over the network. The reason says what
    failed (never the key); with a successful probe, how long it took."""
    kind = spec.get("kind", "serpapi")
    if kind != "serpapi":
        return False, f"unknown web-search provider {kind!r} (known: serpapi)"
    env = spec.get("key_env", "SERPAPI_API_KEY")
    if not os.environ.get(env):
        return False, f"no web-search API key: environment variable {env} is not set"
    if not probe:
        return True, ""
    backend = make_web_backend(spec)
    t0 = time.monotonic()
    try:
        hits = backend.search(PROBE_QUERY, 1)
    except RetrievalError as e:
        return False, (f"web search unreachable from {os.uname().nodename}: the probe query {PROBE_QUERY!r} to "
                       f"{backend.endpoint} failed ({e})")
    return True, (f"web search reachable: the probe query {PROBE_QUERY!r} to {backend.endpoint} answered "
                  f"{len(hits)} result(s) in {time.monotonic() - t0:.1f} s")


def make_web_backend(spec: dict[str, Any]) -> SerpApiBackend:
    ok, why = web_available(spec)
    if not ok:
        raise WebSearchUnavailable(why)
    return SerpApiBackend(os.environ[spec.get("key_env", "SERPAPI_API_KEY")],
                          endpoint=spec.get("endpoint", SERPAPI_ENDPOINT), engine=spec.get("engine", "google"),
                          timeout=float(spec.get("timeout_s", 20.0)), retries=int(spec.get("retries", 2)),
                          backoff=float(spec.get("backoff_s", 1.0)))
