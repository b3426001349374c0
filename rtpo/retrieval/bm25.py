"""The in-process BM25 index over a passage list (the CPU default's search backend), and the corpus
reader every index shares.

A corpus is a list of passages ``{"id": str, "title": str, "text": str}``. Each passage is indexed
as ``title + " " + text`` with bm25s (Lucene BM25, k1=1.5, b=0.75, English stopwords, no stemming).
Retrieval is deterministic: all passages are scored, ordered by score (descending) and then by
passage id, and passages with score 0 (no query term in common) are dropped. The saved index of
paper scale (`rtpo.retrieval.index`) tokenizes and ranks the same way.

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

from rtpo.retrieval.core import bm25_scores, top_k_order

__all__ = ["BM25Index", "get_index", "load_corpus", "tokenize"]


def tokenize(texts: list[str]) -> list[list[str]]:
    """bm25s tokens of each text (lowercased, English stopwords removed, no stemming)."""
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
        self._bm25.index(tokenize([f"{p['title']} {p['text']}" for p in passages]), show_progress=False)

    def __len__(self) -> int:
        return len(self.passages)

    def search(self, query: str, k: int = 3) -> list[dict]:
        """Top-k passages for query, each a copy with an added "score" (float); [] if nothing matches."""
        toks = tokenize([query])[0]
        if not toks:
            return []
        scores = bm25_scores(self._bm25, self._bm25.get_tokens_ids(toks))  # = bm25s get_scores, faster
        # score desc, then id; the same rule as rtpo.retrieval's saved index and server
        return [{**self.passages[i], "score": float(scores[i])} for i in top_k_order(scores, self._id_rank, k)]


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
