"""What every retrieval backend shares: passages, the ranking rule, errors and the result cache.

Passages are ``{"id": str, "title": str, "text": str}`` (+ "score" in results), as in
rtpo.retrieval.bm25. The wiki-18 corpus of Search-R1 (`PeterJinGo/wiki-18-corpus`) stores rows
``{"id", "contents": "\\"Title\\"\\ntext"}``; `passage_from_row` reads both shapes and
`contents_of` writes the Search-R1 one back for the wire protocol.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["RetrievalError", "passage_from_row", "contents_of", "passage_from_document", "top_k_order",
           "bm25_scores", "ResultCache"]


class RetrievalError(RuntimeError):
    """A search that could not be answered (server down or slow, provider error, bad response).

    The search env turns it into an ``Error: ...`` observation and a tool error; it never ends a
    rollout."""


def passage_from_row(row: dict[str, Any], where: str = "") -> dict[str, str]:
    """{"id","title","text"} from a corpus row: ours ({"id","title","text"}) or wiki-18's
    ({"id","contents": '"Title"\\ntext'}, the title line quoted)."""
    if "id" not in row:
        raise ValueError(f"{where}: passage lacks field 'id'")
    if "title" in row and "text" in row:
        return {"id": str(row["id"]), "title": str(row["title"]), "text": str(row["text"])}
    if "contents" in row:
        head, _, rest = str(row["contents"]).partition("\n")
        return {"id": str(row["id"]), "title": head.strip().strip('"'), "text": rest}
    raise ValueError(f"{where}: passage needs 'title' and 'text', or 'contents' (got {sorted(row)})")


def contents_of(p: dict[str, Any]) -> str:
    """Search-R1's document text: the quoted title line, then the passage text."""
    return f"\"{p['title']}\"\n{p['text']}"


def passage_from_document(doc: dict[str, Any], score: float | None = None) -> dict[str, Any]:
    """A `/retrieve` result item's "document" back into a passage (+ "score")."""
    if "title" in doc and "text" in doc:
        p = {"id": str(doc.get("id", "")), "title": str(doc["title"]), "text": str(doc["text"])}
    elif "contents" in doc:
        p = passage_from_row({"id": doc.get("id", ""), "contents": doc["contents"]})
    else:
        raise RetrievalError(f"malformed document in response (keys {sorted(doc)[:8]})")
    if score is not None:
        p["score"] = float(score)
    return p


def top_k_order(scores: np.ndarray, id_rank: np.ndarray, k: int) -> np.ndarray:
    """Indices of the top-k passages: score descending, then passage-id rank ascending; passages
    with score <= 0 (no query term in common) are dropped.

    Exactly the order of a full ``np.lexsort((id_rank, -scores))[:k]`` without sorting all n: one
    scan keeps the passages with a query term (score > 0; BM25's idf is positive, so that is every
    passage with one), a partition finds the k-th largest of their scores, and only those scoring
    at least that much (ties included) are sorted. On 21M passages the scan is the only O(n) step.
    """
    if k <= 0 or len(scores) == 0:
        return np.empty(0, dtype=np.int64)
    cand = np.flatnonzero(scores > 0)
    if len(cand) > k:
        s = scores[cand]
        kth = -np.partition(-s, k - 1)[k - 1]
        cand = cand[s >= kth]
    rank = np.asarray(id_rank[cand])
    return cand[np.lexsort((rank, -scores[cand]))][:k]


def bm25_scores(bm25, token_ids: list[int]) -> np.ndarray:
    """bm25s.BM25.get_scores_from_ids, float for float, without np.add.at (unbuffered, ~20x slower).

    bm25s's index is a CSC matrix with one column per term whose row indices (passages) are
    unique, so ``scores[rows] += data`` adds each term's contribution exactly as np.add.at does,
    term by term in query order (repeated query terms count again, as in bm25s). Lucene BM25 has no
    non-occurrence term (bm25s computes one only for BM25L / BM25+)."""
    if getattr(bm25, "nonoccurrence_array", None) is not None:
        return bm25.get_scores_from_ids(token_ids)
    data, indices, indptr = bm25.scores["data"], bm25.scores["indices"], bm25.scores["indptr"]
    scores = np.zeros(bm25.scores["num_docs"], dtype=np.dtype(bm25.dtype))
    for t in token_ids:
        s, e = int(indptr[t]), int(indptr[t + 1])
        scores[indices[s:e]] += data[s:e]
    return scores


class ResultCache:
    """Persistent search results per (backend, query, topk), one JSON file per key.

    The first result stored for a key wins and is never replaced (`os.link` of a finished temp file
    fails when the key exists), so every method and seed that asks the same query of the same
    backend sees the same passages, also when a web provider's answers drift over time. One file per
    key under two levels of hash directories works on the shared filesystems of a cluster (NFS,
    Lustre), where sqlite's locking does not; writers in many processes and nodes never corrupt it.
    """

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.hits = 0
        self.misses = 0

    @staticmethod
    def key(backend: str, query: str, topk: int) -> str:
        return hashlib.sha256(json.dumps([backend, query, int(topk)]).encode()).hexdigest()

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / key[2:4] / f"{key}.json"

    def get(self, backend: str, query: str, topk: int) -> list[dict] | None:
        p = self._path(self.key(backend, query, topk))
        try:
            rec = json.loads(p.read_text(encoding="utf-8"))
        except FileNotFoundError:
            self.misses += 1
            return None
        except (OSError, json.JSONDecodeError):  # unreadable: treat as absent (it is never half-written)
            self.misses += 1
            return None
        self.hits += 1
        return rec["hits"]

    def put(self, backend: str, query: str, topk: int, hits: list[dict]) -> list[dict]:
        """Store `hits` unless the key is already there; returns what the cache now holds."""
        key = self.key(backend, query, topk)
        p = self._path(key)
        p.parent.mkdir(parents=True, exist_ok=True)
        rec = {"backend": backend, "query": query, "topk": int(topk), "hits": hits}
        fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(rec, f, ensure_ascii=False)
            try:
                os.link(tmp, p)
            except FileExistsError:
                held = self.get(backend, query, topk)
                self.hits -= 1  # that read was bookkeeping, not a lookup
                return held if held is not None else hits
        finally:
            os.unlink(tmp)
        return hits
