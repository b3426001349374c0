"""Paper-scale data: download the real benchmarks (on the cluster, with `datasets`) and convert them
to the task schema with rtpo.data.adapters. Used by `rtpo data` when `data.<task>.benchmarks` is set.

Each benchmark entry: {hf_id, config?, split}. The download lands in <out>/raw/<name>.parquet once;
later runs (and machines without network) read that file. For search, `data.search.corpus` names a
local corpus.jsonl ({"id","title","text"} rows, e.g. a Wikipedia dump) that the BM25 tool indexes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rtpo.data.adapters import load_benchmark


def download(entry: dict[str, Any], dest: Path) -> Path:
    if dest.exists():
        return dest
    try:
        import datasets
    except ImportError as e:  # the GPU environment installs it with verl
        raise FileNotFoundError(f"{dest} is missing and the `datasets` package is not installed to download "
                                f"{entry['hf_id']}") from e
    dest.parent.mkdir(parents=True, exist_ok=True)
    ds = datasets.load_dataset(entry["hf_id"], entry.get("config"), split=entry["split"])
    ds.to_parquet(str(dest))
    return dest


def prepare(task: str, dcfg: dict[str, Any], out: str | Path) -> dict[str, str]:
    out = Path(out)
    meta = {"corpus_path": str(Path(dcfg["corpus"]).resolve())} if dcfg.get("corpus") else None
    evals = []
    for name, entry in dcfg["benchmarks"].items():
        path = download(entry, out / "raw" / f"{name}.parquet")
        evals += load_benchmark(name, path, split="eval", drop_multimodal=True, extra_meta=meta,
                                limit=dcfg.get("n_eval") or None)
    tr = dcfg["train"]
    train = load_benchmark(tr["benchmark"], download(tr, out / "raw" / f"train-{tr['benchmark']}.parquet"),
                           split="train", drop_multimodal=True, extra_meta=meta, limit=dcfg.get("n_train"))
    files = {"train": out / "train.jsonl", "eval": out / "eval.jsonl", "experts": out / "experts.jsonl"}
    for key, tasks in (("train", train), ("eval", evals)):
        files[key].write_text("".join(json.dumps(t.to_dict()) + "\n" for t in tasks))
    files["experts"].write_text("")  # no scripted experts at paper scale: the base model is an instruct LM
    return {k: str(v) for k, v in files.items()}
