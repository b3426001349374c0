"""Retrieval benchmark: BM25 index build time, peak memory, index size and query latency on
synthetic wiki-18-like corpora (the README extrapolates the figures to wiki-18's 21M
passages and sizes the build_index rule's Slurm resources from them).

    nice -n 10 .venv/bin/python scripts/bench_retrieval.py --passages 100000 1000000

Each size runs in three fresh processes so that each peak RSS is that step's own:
  1. generate  N passages of `--words` words (Zipf over a vocabulary that grows as Heaps' law,
               ~ 40 * N^0.6 terms, like Wikipedia's), written as wiki-18 rows {"id", "contents"}
  2. build     rtpo.retrieval.index.build_index (bm25s, the same settings as the search tool)
  3. query     DiskBM25Index loaded memory-mapped; 300 queries of 1-4 words drawn from passages,
               in process and through the /retrieve server (rtpo.retrieval.server, one client)
Prints one JSON line per size and a summary table; --out writes the records as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def generate(n: int, words: int, path: Path, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    v = int(40 * n ** 0.6)
    syll = np.array(["ka", "lo", "mi", "ne", "su", "ta", "ri", "vo", "ze", "pa", "du", "fe", "go", "hi", "ju", "bo"])
    vocab = np.array(["".join(syll[rng.integers(0, 16, size=3)]) + format(i, "x") for i in range(v)])
    p = 1.0 / np.arange(1, v + 1) ** 1.07
    p /= p.sum()
    t0 = time.perf_counter()
    with open(path, "w") as f:
        for start in range(0, n, 20_000):
            m = min(20_000, n - start)
            ids = rng.choice(v, size=(m, words + 2), p=p)
            for j in range(m):
                w = vocab[ids[j]]
                f.write(json.dumps({"id": str(start + j),
                                    "contents": f"\"{w[0]} {w[1]}\"\n" + " ".join(w[2:])}) + "\n")
    return {"vocab": v, "generate_s": round(time.perf_counter() - t0, 1), "corpus_mb": round(path.stat().st_size / 2**20, 1)}


def build(corpus: Path, out: Path) -> dict:
    sys.path.insert(0, str(ROOT))
    from rtpo.retrieval.index import build_index

    t0 = time.perf_counter()
    meta = build_index(corpus, out, progress=False, log=lambda s: print(s, file=sys.stderr, flush=True))
    size = sum(f.stat().st_size for f in out.iterdir())
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return {"build_s": round(time.perf_counter() - t0, 1), "build_cpu_s": round(ru.ru_utime + ru.ru_stime, 1),
            "build_peak_rss_mb": round(peak_rss_mb()),
            "index_mb": round(size / 2**20, 1), "terms": meta["terms"]}


def query(index: Path, corpus: Path, n_queries: int = 300) -> dict:
    sys.path.insert(0, str(ROOT))
    from rtpo.retrieval.client import HttpRetriever
    from rtpo.retrieval.index import DiskBM25Index
    from rtpo.retrieval.server import RetrievalServer

    rss0 = peak_rss_mb()
    t0 = time.perf_counter()
    idx = DiskBM25Index(index)
    load_s = time.perf_counter() - t0
    rng = np.random.default_rng(1)
    offsets = np.load(index / "offsets.npy", mmap_mode="r")
    qs = []
    with open(corpus, "rb") as f:
        for i in rng.integers(0, len(idx), size=n_queries):
            f.seek(int(offsets[i]))
            words = json.loads(f.readline())["contents"].split("\n", 1)[1].split()
            qs.append(" ".join(rng.choice(words, size=int(rng.integers(1, 5)), replace=False)))
    lat, cpu = [], []
    for q in qs:
        t, c = time.perf_counter(), time.process_time()
        idx.search(q, 3)
        lat.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    srv = RetrievalServer(idx).start()
    client = HttpRetriever(srv.url, timeout=60)
    http = []
    for q in qs[:100]:
        t = time.perf_counter()
        client.search(q, 3)
        http.append(time.perf_counter() - t)
    srv.stop()
    ms = lambda xs, p: round(1000 * float(np.percentile(xs, p)), 2)  # noqa: E731
    return {"load_s": round(load_s, 2), "query_peak_rss_mb": round(peak_rss_mb()), "rss_before_load_mb": round(rss0),
            "query_p50_ms": ms(lat, 50), "query_p95_ms": ms(lat, 95), "query_cpu_p50_ms": ms(cpu, 50),
            "query_cpu_p95_ms": ms(cpu, 95), "http_p50_ms": ms(http, 50),
            "http_p95_ms": ms(http, 95)}


def run_step(step: str, *args: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--step", step, *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"{step} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--passages", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--words", type=int, default=70, help="index terms per passage (wiki-18: ~100 words, ~60 "
                                                          "left after English stopwords)")
    ap.add_argument("--dir", default=None, help="scratch directory (default: a temp dir, removed)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--step", choices=["generate", "build", "query"], help=argparse.SUPPRESS)
    ap.add_argument("args", nargs="*", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.step == "generate":
        print(json.dumps(generate(int(a.args[0]), a.words, Path(a.args[1]))))
        return 0
    if a.step == "build":
        print(json.dumps(build(Path(a.args[0]), Path(a.args[1]))))
        return 0
    if a.step == "query":
        print(json.dumps(query(Path(a.args[0]), Path(a.args[1]))))
        return 0
    scratch = Path(a.dir or tempfile.mkdtemp(prefix="rtpo-bench-retrieval-"))
    scratch.mkdir(parents=True, exist_ok=True)
    records = []
    try:
        for n in a.passages:
            d = scratch / f"n{n}"
            d.mkdir(exist_ok=True)
            rec = {"passages": n, "words": a.words, "cores": os.cpu_count()}
            rec |= run_step("generate", str(n), str(d / "corpus.jsonl"), "--words", str(a.words))
            rec |= run_step("build", str(d / "corpus.jsonl"), str(d / "bm25"))
            rec |= run_step("query", str(d / "bm25"), str(d / "corpus.jsonl"))
            print(json.dumps(rec), flush=True)
            records.append(rec)
            shutil.rmtree(d)
    finally:
        if a.dir is None:
            shutil.rmtree(scratch, ignore_errors=True)
    cols = ["passages", "terms", "corpus_mb", "build_s", "build_cpu_s", "build_peak_rss_mb", "index_mb", "load_s",
            "query_p50_ms", "query_p95_ms", "query_cpu_p50_ms", "query_cpu_p95_ms", "http_p50_ms"]
    print(" | ".join(cols))
    for r in records:
        print(" | ".join(str(r[c]) for c in cols))
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(records, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
