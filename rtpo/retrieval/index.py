"""A saved BM25 index over a corpus.jsonl, loaded memory-mapped (paper scale: wiki-18, 21M passages).

Built with bm25s exactly as the in-process `rtpo.retrieval.bm25.BM25Index` (Lucene BM25, k1=1.5,
b=0.75, English stopwords, no stemming, each passage indexed as ``title + " " + text``), so a
query ranks the same passages in the same order with the same scores in both, ties broken by
passage id (`rtpo.retrieval.core.top_k_order`).

On disk (`out_dir/`):
  bm25s files        data/indices/indptr .csc.index.npy, vocab.index.json, params.index.json
  offsets.npy        int64 byte offsets of each passage's line in the corpus file (n + 1 entries)
  id_rank.npy        int64 rank of each passage id in sorted order (the tie-breaker)
  meta.json          corpus path and size, passage count, parameters, build time, bm25s version

The passages themselves stay in the corpus file and are read by offset (`os.pread`), so a loaded
index holds only the memory-mapped arrays and the vocabulary in RAM.

    python -m rtpo.retrieval.index build --corpus results/retrieval/wiki18/corpus.jsonl --out DIR
    python -m rtpo.retrieval.index search --index DIR "who wrote the quiet orchard"
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from rtpo.retrieval.bm25 import tokenize  # the in-process index's tokenizer: one definition
from rtpo.retrieval.core import bm25_scores, passage_from_row, top_k_order

__all__ = ["build_index", "DiskBM25Index", "Progress", "read_passages"]

FORMAT = 1


class Progress:
    """tqdm on a terminal, else a plain line every `every` percent (for Slurm logs)."""

    def __init__(self, total: int, desc: str, every: float = 5.0, stream=None):
        self.total, self.desc, self.every = max(int(total), 1), desc, every
        self.stream = stream or sys.stderr
        self.done, self._next = 0, every
        self._bar = None
        if getattr(self.stream, "isatty", lambda: False)():
            from tqdm import tqdm
            self._bar = tqdm(total=self.total, desc=desc, unit="B", unit_scale=True, file=self.stream)
        self.t0 = time.perf_counter()

    def update(self, n: int) -> None:
        self.done += n
        if self._bar is not None:
            self._bar.update(n)
            return
        pct = 100.0 * self.done / self.total
        if pct >= self._next:
            self._next = (int(pct // self.every) + 1) * self.every
            print(f"{self.desc}: {pct:5.1f} % ({time.perf_counter() - self.t0:.0f} s)", file=self.stream,
                  flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def build_index(corpus: str | Path, out_dir: str | Path, k1: float = 1.5, b: float = 0.75,
                chunk: int = 50_000, log: Callable[[str], None] | None = None,
                progress: bool = True) -> dict[str, Any]:
    """Index every passage of `corpus` (jsonl of {"id","title","text"} or wiki-18 {"id","contents"})
    into `out_dir`; returns meta.json's content. Bad lines raise naming the file and line."""
    import bm25s

    log = log or (lambda s: print(s, file=sys.stderr, flush=True))
    corpus = Path(corpus).resolve()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    size = corpus.stat().st_size
    bar = Progress(size, f"tokenize {corpus.name}") if progress else None
    offsets: list[int] = []
    ids: list[str] = []
    vocab: dict[str, int] = {}
    doc_ids: list[list[int]] = []
    batch: list[str] = []

    def flush() -> None:
        for toks in tokenize(batch):
            # the same int object per token id: a document's list costs 8 bytes per token
            doc_ids.append([vocab.setdefault(t, len(vocab)) for t in toks])
        batch.clear()

    with open(corpus, "rb") as f:
        pos, lineno = 0, 0
        for raw in f:
            lineno += 1
            start, pos = pos, pos + len(raw)
            if bar:
                bar.update(len(raw))
            if not raw.strip():
                continue
            try:
                row = json.loads(raw)
            except json.JSONDecodeError as e:
                raise ValueError(f"{corpus}:{lineno}: invalid JSON ({e.msg})") from None
            p = passage_from_row(row, where=f"{corpus}:{lineno}")
            offsets.append(start)
            ids.append(p["id"])
            batch.append(f"{p['title']} {p['text']}")
            if len(batch) >= chunk:
                flush()
        offsets.append(pos)
    flush()
    if bar:
        bar.close()
    n = len(ids)
    if n == 0:
        raise ValueError(f"{corpus}: the corpus is empty")
    t_tok = time.perf_counter() - t0
    log(f"index: {n} passages, {len(vocab)} terms tokenized in {t_tok:.1f} s")

    id_arr = np.array(ids)
    order = np.argsort(id_arr, kind="stable")
    sorted_ids = id_arr[order]
    dup = np.flatnonzero(sorted_ids[1:] == sorted_ids[:-1])
    if len(dup):
        raise ValueError(f"{corpus}: duplicate passage id {sorted_ids[dup[0]]!r}")
    id_rank = np.empty(n, dtype=np.int64)
    id_rank[order] = np.arange(n)
    del id_arr, order, sorted_ids, ids

    bm25 = bm25s.BM25(k1=k1, b=b)
    bm25.index((doc_ids, vocab), show_progress=progress and sys.stderr.isatty())
    del doc_ids
    t_idx = time.perf_counter() - t0 - t_tok
    log(f"index: BM25 scores of {len(bm25.scores['data'])} (passage, term) pairs in {t_idx:.1f} s")
    bm25.save(str(out), show_progress=False)
    np.save(out / "offsets.npy", np.asarray(offsets, dtype=np.int64))
    np.save(out / "id_rank.npy", id_rank)
    meta = {"format": FORMAT, "corpus": str(corpus), "corpus_bytes": size, "passages": n, "terms": len(vocab),
            "k1": k1, "b": b, "tokenizer": "bm25s.tokenize(lower=True, stopwords='english'), no stemming",
            "indexed_text": "title + ' ' + text", "bm25s": bm25s.__version__,
            "build_s": round(time.perf_counter() - t0, 2), "built_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
    tmp = out / ".meta.json.tmp"
    tmp.write_text(json.dumps(meta, indent=1))
    os.replace(tmp, out / "meta.json")  # written last: its presence means the index is complete
    log(f"index: written to {out} in {meta['build_s']} s")
    return meta


def read_passages(fd: int, offsets: np.ndarray, rows: np.ndarray, where: str = "") -> list[dict[str, str]]:
    out = []
    for i in rows:
        start, end = int(offsets[i]), int(offsets[i + 1])
        out.append(passage_from_row(json.loads(os.pread(fd, end - start, start)), where=where))
    return out


class DiskBM25Index:
    """A saved index (see the module docstring), memory-mapped; `search` as BM25Index.search."""

    def __init__(self, index_dir: str | Path, corpus: str | Path | None = None):
        import bm25s

        self.dir = Path(index_dir)
        meta_path = self.dir / "meta.json"
        if not meta_path.exists():
            raise FileNotFoundError(f"{self.dir}: not a built index (no meta.json; build it with "
                                    f"`python -m rtpo.retrieval.index build`)")
        self.meta = json.loads(meta_path.read_text())
        self.corpus = Path(corpus or self.meta["corpus"])
        if not self.corpus.exists():
            raise FileNotFoundError(f"{self.dir}: its corpus {self.corpus} does not exist")
        if self.corpus.stat().st_size != self.meta["corpus_bytes"]:
            raise ValueError(f"{self.dir}: corpus {self.corpus} has {self.corpus.stat().st_size} bytes, the "
                             f"index was built from {self.meta['corpus_bytes']}: rebuild the index")
        self._bm25 = bm25s.BM25.load(str(self.dir), mmap=True, show_progress=False)
        self._offsets = np.load(self.dir / "offsets.npy", mmap_mode="r")
        self._id_rank = np.load(self.dir / "id_rank.npy", mmap_mode="r")
        self._fd = os.open(self.corpus, os.O_RDONLY)
        self.name = f"bm25:{self.meta['passages']}:{self.meta['corpus_bytes']}:{self.meta['built_at']}"

    def __len__(self) -> int:
        return int(self.meta["passages"])

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def search(self, query: str, k: int = 3) -> list[dict]:
        toks = tokenize([query])[0]
        ids = self._bm25.get_tokens_ids(toks) if toks else []
        if not ids:
            return []
        scores = bm25_scores(self._bm25, ids)
        order = top_k_order(scores, self._id_rank, k)
        hits = read_passages(self._fd, self._offsets, order, where=str(self.corpus))
        return [{**h, "score": float(scores[i])} for h, i in zip(hits, order)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rtpo.retrieval.index", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build a BM25 index from a corpus.jsonl")
    b.add_argument("--corpus", required=True)
    b.add_argument("--out", required=True)
    b.add_argument("--k1", type=float, default=1.5)
    b.add_argument("--b", type=float, default=0.75)
    s = sub.add_parser("search", help="query a built index")
    s.add_argument("--index", required=True)
    s.add_argument("--k", type=int, default=3)
    s.add_argument("query")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "build":
            build_index(args.corpus, args.out, k1=args.k1, b=args.b)
        else:
            for h in DiskBM25Index(args.index).search(args.query, args.k):
                print(f"{h['score']:.3f}\t{h['id']}\t{h['title']}: {h['text'][:100]}")
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
