"""The search tool (paper §4: "web-search tools"): its spec, how results read to the agent, and which
backend answers it. The CPU default's backend is the in-process BM25 index over a local passage
corpus (`rtpo.retrieval.bm25`); its results are the top passages by score, then passage id.

Paper scale: `make_retriever(spec)` builds the backend a task's ``meta["retriever"]`` names (the data
job writes it from the config's `data.search.retriever` / `web`; rtpo.retrieval has the parts):

  {"kind": "bm25", "corpus": path}           in-process BM25Index over a corpus.jsonl (the CPU default's kind)
  {"kind": "bm25_index", "index": dir}       a saved bm25s index, memory-mapped in this process
  {"kind": "dense_index", "index": dir}      optional e5 + faiss index (rtpo.retrieval.dense; not in the CPU install)
  {"kind": "http", "url": u, "topk": k}      a `/retrieve` server (Search-R1's protocol); url "auto" with
                                             "index": dir starts one server per node on demand
  {"kind": "serpapi", "key_env": VAR}        web search (SerpAPI, Google), key from the environment

plus, for any kind, "cache": dir (persistent results per (backend, query, topk): every method and
seed sees the same passages for the same query), "timeout_s", "retries"; http also
"circuit_failures", "circuit_cooldown_s" (rtpo.retrieval.client). Every backend's `search` returns
passages in the order above; failures raise rtpo.retrieval.core.RetrievalError, which the search
env turns into the observation SEARCH_FAILED and a tool error. That text is fixed: what went wrong
(a URL with the server's random port, a pid, a provider's message) would make the tokens a model
sees, and so the run, differ between two runs against a dead server; it goes to stderr instead.
"""

from __future__ import annotations

import json
import os
import threading

from rtpo.retrieval.bm25 import get_index, load_corpus
from rtpo.tools.parse import ToolSpec

__all__ = ["SEARCH_SPEC", "SEARCH_FAILED", "format_hits", "make_retriever", "retriever_for", "RETRIEVER_KINDS",
           "RETRIEVER_KEYS"]

SEARCH_SPEC = ToolSpec("search", "search the knowledge base; returns the top passages", {"query": "string"})
SEARCH_FAILED = "Error: search failed (the search service is unavailable)."


def format_hits(hits: list[dict]) -> str:
    """Observation text: one line per passage, ``[i] text`` (``[i] title: text`` when the text
    does not already begin with the title)."""
    if not hits:
        return "No results."
    lines = []
    for i, h in enumerate(hits, 1):
        body = h["text"] if h["text"].startswith(h["title"]) else f"{h['title']}: {h['text']}"
        lines.append(f"[{i}] {body}")
    return "\n".join(lines)


RETRIEVER_KINDS = ("bm25", "bm25_index", "dense_index", "http", "serpapi")
RETRIEVER_KEYS = {"kind", "cache", "timeout_s", "retries", "topk", "corpus", "index", "url", "key_env", "endpoint",
                  "engine", "backoff_s", "name", "dense", "model", "workers", "circuit_failures", "circuit_cooldown_s"}
_RETRIEVERS: dict[str, object] = {}
_LOCK = threading.Lock()


def make_retriever(spec: dict):
    """A backend for `spec` (see the module docstring): an object with ``search(query, k)`` and ``name``."""
    from rtpo.retrieval.core import ResultCache

    spec = dict(spec)
    kind = spec.get("kind")
    unknown = sorted(set(spec) - RETRIEVER_KEYS)
    if unknown:
        raise ValueError(f"retriever {spec}: unknown key(s) {unknown}; known: {sorted(RETRIEVER_KEYS)}")
    if kind == "bm25":
        path = os.path.abspath(spec["corpus"])
        backend = get_index(("file", path, os.path.getmtime(path)), lambda: load_corpus(path))
        backend.name = f"bm25-memory:{path}"
    elif kind == "bm25_index":
        from rtpo.retrieval.index import DiskBM25Index
        backend = DiskBM25Index(spec["index"])
    elif kind == "dense_index":  # optional: faiss + an e5 model (rtpo.retrieval.dense)
        from rtpo.retrieval.dense import DenseIndex
        backend = DenseIndex(spec["index"])
    elif kind == "http":
        from rtpo.retrieval.client import HttpRetriever
        if "url" not in spec:
            raise ValueError(f"retriever {spec}: kind http needs 'url' (http://host:port, or 'auto' with 'index')")
        backend = HttpRetriever(spec["url"], index=spec.get("index"), topk=spec.get("topk"),
                                timeout=float(spec.get("timeout_s", 10.0)), retries=int(spec.get("retries", 2)),
                                name=spec.get("name"), workers=int(spec.get("workers", 1)),
                                circuit_failures=int(spec.get("circuit_failures", 2)),
                                circuit_cooldown_s=float(spec.get("circuit_cooldown_s", 30.0)))
    elif kind == "serpapi":
        from rtpo.retrieval.web import make_web_backend
        backend = make_web_backend(spec)
    else:
        raise ValueError(f"retriever {spec}: unknown kind {kind!r}; known: {', '.join(RETRIEVER_KINDS)}")
    if spec.get("cache"):
        from rtpo.retrieval.client import CachedRetriever
        return CachedRetriever(backend, ResultCache(spec["cache"]), name=spec.get("name"), topk=spec.get("topk"))
    return backend


def retriever_for(spec: dict):
    """The process-wide backend of `spec` (one client, index or cache per distinct spec)."""
    key = json.dumps(spec, sort_keys=True)
    with _LOCK:
        r = _RETRIEVERS.get(key)
    if r is None:
        r = make_retriever(spec)
        with _LOCK:
            r = _RETRIEVERS.setdefault(key, r)
    return r
