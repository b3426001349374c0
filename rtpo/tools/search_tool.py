"""BM25 search over a local passage corpus (the search env's tool; paper §4: "web-search tools").

A corpus is a list of passages ``{"id": str, "title": str, "text": str}``. Each passage is indexed
as ``title + " " + text`` with bm25s (Lucene BM25, k1=1.5, b=0.75, English stopwords, no stemming).
Retrieval is deterministic: all passages are scored, ordered by score (descending) and then by
passage id, and passages with score 0 (no query term in common) are dropped.

Indexes are expensive relative to a tool call, so `get_index` caches one per corpus key; every
search env on the same corpus shares it (building ~500 short passages takes a few ms).

Paper scale: `make_retriever(spec)` builds the backend a task's ``meta["retriever"]`` names (the data
job writes it from the config's `data.search.retriever` / `web`; rtpo.retrieval has the parts):

  {"kind": "bm25", "corpus": path}           in-process BM25Index over a corpus.jsonl (the CPU default's kind)
  {"kind": "bm25_index", "index": dir}       a saved bm25s index, memory-mapped in this process
  {"kind": "dense_index", "index": dir}      optional e5 + faiss index (rtpo.retrieval.dense; not in the CPU install)
  {"kind": "http", "url": u, "topk": k}      a `/retrieve` server (Search-R1's protocol); url "auto" with
                                             "index": dir starts one server per node on demand
  {"kind": "serpapi", "key_env": VAR}        web search (SerpAPI, Google), key from the environment

plus, for any kind, "cache": dir (persistent results per (backend, query, topk): every method and
seed sees the same passages for the same query), "timeout_s", "retries". Every backend's `search`
returns passages in the order above; failures raise rtpo.retrieval.core.RetrievalError, which the
search env turns into an error observation and a tool error.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import bm25s
import numpy as np

from rtpo.tools.parse import ToolSpec

__all__ = ["SEARCH_SPEC", "BM25Index", "get_index", "load_corpus", "format_hits", "make_retriever",
           "retriever_for"]

SEARCH_SPEC = ToolSpec("search", "search the knowledge base; returns the top passages", {"query": "string"})


def _tokenize(texts: list[str]) -> list[list[str]]:
    return bm25s.tokenize(texts, lower=True, stopwords="english", return_ids=False, show_progress=False)


class BM25Index:
    """BM25 over a fixed passage list.

    passages: [{"id", "title", "text"}]; ids must be unique strings.
    """

    def __init__(self, passages: Sequence[dict], k1: float = 1.5, b: float = 0.75):
        if not passages:
            raise ValueError("BM25Index: the corpus is empty")
        for i, p in enumerate(passages):
            missing = [k for k in ("id", "title", "text") if k not in p]
            if missing:
                raise ValueError(f"BM25Index: passage #{i} lacks field(s) {missing}: {p!r:.120}")
        ids = [str(p["id"]) for p in passages]
        if len(set(ids)) != len(ids):
            dup = next(x for x in ids if ids.count(x) > 1)
            raise ValueError(f"BM25Index: duplicate passage id {dup!r}")
        self.passages = [dict(p) for p in passages]
        # rank of each passage id in sorted order: the tie-breaker
        rank = {x: r for r, x in enumerate(sorted(ids))}
        self._id_rank = np.array([rank[x] for x in ids])
        self._bm25 = bm25s.BM25(k1=k1, b=b)
        self._bm25.index(_tokenize([f"{p['title']} {p['text']}" for p in passages]), show_progress=False)

    def __len__(self) -> int:
        return len(self.passages)

    def search(self, query: str, k: int = 3) -> list[dict]:
        """Top-k passages for query, each a copy with an added "score" (float); [] if nothing matches."""
        toks = _tokenize([query])[0]
        if not toks:
            return []
        from rtpo.retrieval.core import bm25_scores, top_k_order

        scores = bm25_scores(self._bm25, self._bm25.get_tokens_ids(toks))  # = bm25s get_scores, faster
        # score desc, then id; the same rule as rtpo.retrieval's saved index and server
        return [{**self.passages[i], "score": float(scores[i])} for i in top_k_order(scores, self._id_rank, k)]


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


def load_corpus(path: str | Path) -> list[dict]:
    """Read a corpus.jsonl (one passage per line); bad lines raise naming the file and line."""
    out = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                p = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: invalid JSON ({e.msg})") from None
            for k in ("id", "title", "text"):
                if k not in p:
                    raise ValueError(f"{path}:{n}: passage lacks field {k!r}")
            out.append(p)
    return out


_CACHE: dict[tuple, BM25Index] = {}
_LOCK = threading.Lock()


def get_index(key: tuple, load: Callable[[], Sequence[dict]]) -> BM25Index:
    """The shared index for corpus `key` (hashable, e.g. ("embedded", seed) or ("file", path, mtime));
    `load()` gives the passages the first time."""
    with _LOCK:
        idx = _CACHE.get(key)
        if idx is None:
            idx = _CACHE[key] = BM25Index(load())
        return idx


RETRIEVER_KINDS = ("bm25", "bm25_index", "dense_index", "http", "serpapi")
_RETRIEVERS: dict[str, object] = {}


def make_retriever(spec: dict):
    """A backend for `spec` (see the module docstring): an object with ``search(query, k)`` and ``name``."""
    from rtpo.retrieval.core import ResultCache

    spec = dict(spec)
    kind = spec.get("kind")
    known = {"kind", "cache", "timeout_s", "retries", "topk", "corpus", "index", "url", "key_env", "endpoint",
             "engine", "backoff_s", "name", "dense", "model", "workers"}
    unknown = sorted(set(spec) - known)
    if unknown:
        raise ValueError(f"retriever {spec}: unknown key(s) {unknown}; known: {sorted(known)}")
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
                                name=spec.get("name"), workers=int(spec.get("workers", 1)))
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
