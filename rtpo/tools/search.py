"""BM25 search over a local passage corpus (the search env's tool; paper §4: "web-search tools").

A corpus is a list of passages ``{"id": str, "title": str, "text": str}``. Each passage is indexed
as ``title + " " + text`` with bm25s (Lucene BM25, k1=1.5, b=0.75, English stopwords, no stemming).
Retrieval is deterministic: all passages are scored, ordered by score (descending) and then by
passage id, and passages with score 0 (no query term in common) are dropped.

Indexes are expensive relative to a tool call, so `get_index` caches one per corpus key; every
search env on the same corpus shares it (building ~500 short passages takes a few ms).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import bm25s
import numpy as np

from rtpo.tools.parse import ToolSpec

__all__ = ["SEARCH_SPEC", "BM25Index", "get_index", "load_corpus", "format_hits"]

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
        scores = self._bm25.get_scores(toks)
        order = np.lexsort((self._id_rank, -scores))  # last key is primary: score desc, then id
        out = []
        for i in order[:k]:
            if scores[i] <= 0:
                break
            out.append({**self.passages[i], "score": float(scores[i])})
        return out


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
