"""Optional dense retrieval: an e5 encoder + a faiss inner-product index (Search-R1's e5 Flat setting).

Not part of the CPU install: it needs `faiss-cpu` (or `faiss-gpu`) from PyPI and an e5 model
(default intfloat/e5-base-v2, downloaded on the cluster). Search-R1 (search_r1/search/
retrieval_server.py, Encoder): "passage: " / "query: " prefixes, mean pooling over the attention
mask, L2-normalised embeddings, exact inner-product search (IndexFlatIP). Ranking here: score
descending, ties by passage id, as every backend.

    python -m rtpo.retrieval.dense build --corpus corpus.jsonl --out DIR [--model intfloat/e5-base-v2]
    python -m rtpo.retrieval.server --index DIR        (a dense index dir is recognised by its meta.json)

On disk: index.faiss, offsets.npy, id_rank.npy (as the BM25 index), meta.json {"kind": "dense", ...}.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from rtpo.retrieval.core import passage_from_row, top_k_order
from rtpo.retrieval.index import Progress, read_passages

__all__ = ["E5Encoder", "build_dense_index", "DenseIndex", "require_faiss"]


def require_faiss():
    try:
        import faiss
    except ImportError as e:
        raise ImportError("the dense retriever needs faiss: `pip install faiss-cpu` (CPU) or faiss-gpu; it is not "
                          "part of the CPU install") from e
    return faiss


class E5Encoder:
    """Mean-pooled, L2-normalised sentence embeddings with e5's prefixes (Search-R1's Encoder)."""

    def __init__(self, model: str = "intfloat/e5-base-v2", device: str | None = None, max_length: int = 256,
                 batch_size: int = 64):
        import torch
        from transformers import AutoModel, AutoTokenizer

        self.torch = torch
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.tok = AutoTokenizer.from_pretrained(model)
        self.model = AutoModel.from_pretrained(model).to(self.device).eval()
        self.max_length, self.batch_size, self.name = max_length, batch_size, model

    def encode(self, texts: list[str], prefix: str) -> np.ndarray:
        out = []
        with self.torch.no_grad():
            for i in range(0, len(texts), self.batch_size):
                batch = [f"{prefix}{t}" for t in texts[i:i + self.batch_size]]
                enc = self.tok(batch, max_length=self.max_length, padding=True, truncation=True,
                               return_tensors="pt").to(self.device)
                h = self.model(**enc).last_hidden_state
                mask = enc["attention_mask"].unsqueeze(-1).to(h.dtype)
                e = (h * mask).sum(1) / mask.sum(1)
                out.append(self.torch.nn.functional.normalize(e, dim=-1).float().cpu().numpy())
        return np.concatenate(out) if out else np.zeros((0, self.model.config.hidden_size), np.float32)


def build_dense_index(corpus: str | Path, out_dir: str | Path, model: str = "intfloat/e5-base-v2",
                      encoder: E5Encoder | None = None, chunk: int = 4096, progress: bool = True) -> dict[str, Any]:
    faiss = require_faiss()
    enc = encoder or E5Encoder(model)
    corpus, out = Path(corpus).resolve(), Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    index = None
    offsets: list[int] = []
    ids: list[str] = []
    batch: list[str] = []
    bar = Progress(corpus.stat().st_size, f"encode {corpus.name}") if progress else None

    def flush():
        nonlocal index
        vec = enc.encode(batch, "passage: ")
        if index is None:
            index = faiss.IndexFlatIP(vec.shape[1])
        index.add(vec)
        batch.clear()

    with open(corpus, "rb") as f:
        pos = 0
        for lineno, raw in enumerate(f, 1):
            start, pos = pos, pos + len(raw)
            if bar:
                bar.update(len(raw))
            if not raw.strip():
                continue
            p = passage_from_row(json.loads(raw), where=f"{corpus}:{lineno}")
            offsets.append(start)
            ids.append(p["id"])
            batch.append(f"{p['title']} {p['text']}")
            if len(batch) >= chunk:
                flush()
        offsets.append(pos)
    if batch:
        flush()
    if index is None:
        raise ValueError(f"{corpus}: the corpus is empty")
    faiss.write_index(index, str(out / "index.faiss"))
    id_arr = np.array(ids)
    rank = np.empty(len(ids), dtype=np.int64)
    rank[np.argsort(id_arr, kind="stable")] = np.arange(len(ids))
    np.save(out / "offsets.npy", np.asarray(offsets, dtype=np.int64))
    np.save(out / "id_rank.npy", rank)
    meta = {"kind": "dense", "model": enc.name, "corpus": str(corpus), "corpus_bytes": corpus.stat().st_size,
            "passages": len(ids), "dim": int(index.d), "build_s": round(time.perf_counter() - t0, 2),
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
    (out / "meta.json").write_text(json.dumps(meta, indent=1))
    return meta


class DenseIndex:
    """A built dense index; `search(query, k)` as every backend (scores are cosine similarities)."""

    search_in_thread = True  # torch and faiss release the GIL: the retrieval server searches on its thread pool

    def __init__(self, index_dir: str | Path, encoder: E5Encoder | None = None, nprobe_k: int = 64):
        faiss = require_faiss()
        self.dir = Path(index_dir)
        self.meta = json.loads((self.dir / "meta.json").read_text())
        if self.meta.get("kind") != "dense":
            raise ValueError(f"{self.dir}: not a dense index")
        self.index = faiss.read_index(str(self.dir / "index.faiss"))
        self.encoder = encoder or E5Encoder(self.meta["model"])
        self._offsets = np.load(self.dir / "offsets.npy", mmap_mode="r")
        self._id_rank = np.load(self.dir / "id_rank.npy", mmap_mode="r")
        self._fd = os.open(self.meta["corpus"], os.O_RDONLY)
        self.nprobe_k = nprobe_k
        self.name = f"dense:{self.meta['model']}:{self.meta['passages']}:{self.meta['built_at']}"

    def __len__(self) -> int:
        return int(self.meta["passages"])

    def search(self, query: str, k: int = 3) -> list[dict]:
        q = self.encoder.encode([query], "query: ")
        # ask for more than k so that ties at the k-th score are ordered by id like everywhere else
        scores, idx = self.index.search(q, min(len(self), max(k, self.nprobe_k)))
        scores, idx = scores[0], idx[0]
        keep = idx >= 0
        scores, idx = scores[keep], idx[keep]
        order = idx[top_k_order(scores + 2.0, self._id_rank[idx], k)]  # cosine in [-1, 1]: shift > 0
        by = dict(zip(idx.tolist(), scores.tolist()))
        hits = read_passages(self._fd, self._offsets, order, where=self.meta["corpus"])
        return [{**h, "score": float(by[int(i)])} for h, i in zip(hits, order)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rtpo.retrieval.dense")
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--corpus", required=True)
    b.add_argument("--out", required=True)
    b.add_argument("--model", default="intfloat/e5-base-v2")
    args = ap.parse_args(argv)
    try:
        build_dense_index(args.corpus, args.out, args.model)
    except (ImportError, ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
