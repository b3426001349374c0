"""Pinning what a paper-scale config downloads from the Hugging Face hub, on a login node (the one place
that reaches the hub; no machine of this project does):

    python -m rtpo.data.pins --config config/paper.yaml            # what is not pinned, and its pins
    python -m rtpo.data.pins --config config/paper.yaml --write    # the same, written into the config file

  data.<task>.benchmarks.<name>: {hf_id, ...} without `revision`  -> revision: the dataset's commit now
      (huggingface_hub HfApi.dataset_info(hf_id).sha): `datasets.load_dataset(..., revision=...)` reads
      that commit from then on (rtpo/data/paper.py; AMC23 and OlympiadBench, which ARPO does not bundle)
  data.search.corpus: {url: https://huggingface.co/datasets/<repo>/resolve/<rev>/<file>} without `sha256`
      -> the url at the dataset's commit and sha256: the file's LFS sha256 (HfApi.get_paths_info), which
      the corpus download checks (rtpo.retrieval.fetch; wiki-18)

--write edits only those entries' lines (comments and everything else kept) and prints the diff. Until
then the downloads read the hub's `main` and record what they got (results/data/<task>/sources.json,
<corpus>.source.json), and `rtpo check-config` lists what is not pinned.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

_HF_URL = re.compile(r"https://huggingface\.co/datasets/([^/]+/[^/]+)/resolve/([^/]+)/(.+)")


def unpinned(cfg: Mapping[str, Any]) -> list[dict[str, Any]]:
    """What the config downloads from the hub without a pin: [{kind: "hf" | "corpus", task, name, ...}]."""
    out = []
    data = cfg.get("data") or {}
    for task, d in data.items():
        if not isinstance(d, dict):
            continue
        for name, e in (d.get("benchmarks") or {}).items():
            if isinstance(e, dict) and e.get("hf_id") and not e.get("revision"):
                out.append({"kind": "hf", "task": task, "name": name, "hf_id": e["hf_id"]})
        corpus = d.get("corpus")
        if isinstance(corpus, dict) and corpus.get("url") and not corpus.get("sha256"):
            out.append({"kind": "corpus", "task": task, "name": "corpus", "url": corpus["url"]})
    return out


def describe(items: list[dict[str, Any]]) -> str:
    """One line naming what is not pinned and the command that pins it ("" when everything is)."""
    if not items:
        return ""
    what = ", ".join(f"{i['task']}.{i['name']} ({i.get('hf_id') or i['url'].rsplit('/', 1)[-1]}: hub "
                     f"{'main' if i['kind'] == 'hf' else 'file, no sha256'})" for i in items)
    return (f"not pinned: {what}; on the login node: python -m rtpo.data.pins --config <config> --write "
            "(docs/data.md)")


def resolve(items: list[dict[str, Any]], api: Any = None) -> list[dict[str, Any]]:
    """Each item with its pin from the hub (`api`: a huggingface_hub.HfApi): `revision` for a dataset;
    for the corpus the dataset's commit, the url at that commit and the file's LFS sha256."""
    if api is None:
        from huggingface_hub import HfApi

        api = HfApi()
    out = []
    for i in items:
        i = dict(i)
        if i["kind"] == "hf":
            i["revision"] = api.dataset_info(i["hf_id"]).sha
        else:
            m = _HF_URL.fullmatch(i["url"])
            if not m:
                raise ValueError(f"data.{i['task']}.corpus.url {i['url']!r}: not a hub dataset file "
                                 "(https://huggingface.co/datasets/<repo>/resolve/<rev>/<file>); pin its sha256 by hand")
            repo, rev, path = m.groups()
            commit = api.dataset_info(repo, revision=rev).sha
            [f] = api.get_paths_info(repo, [path], repo_type="dataset", revision=commit)
            if getattr(f, "lfs", None) is None:
                raise ValueError(f"{i['url']}: the hub stores no LFS sha256 for it; download it and pin "
                                 "python -m rtpo.retrieval.fetch's recorded sha256 by hand")
            i.update(url=f"https://huggingface.co/datasets/{repo}/resolve/{commit}/{path}", sha256=f.lfs.sha256)
        out.append(i)
    return out


def apply(text: str, pins: list[dict[str, Any]]) -> str:
    """The config file's text with each pin written into its entry's one-line mapping: `revision: <sha>`
    after a benchmark's hf_id entry, the corpus url at its commit with `sha256: <hex>`. An entry that is not
    one line of the form `name: {...}` is an error naming it (pin it by hand)."""
    lines = text.splitlines(keepends=True)
    for pin in pins:
        if pin["kind"] == "hf":
            pat = re.compile(rf"^(\s+{re.escape(pin['name'])}:\s*\{{)([^}}]*hf_id:\s*{re.escape(pin['hf_id'])}[^}}]*)(\}}.*)$",
                             re.S)
            repl = lambda m: f"{m.group(1)}{m.group(2)}, revision: {pin['revision']}{m.group(3)}"  # noqa: E731
        else:
            pat = re.compile(r"^(\s+corpus:\s*\{)([^}]*)(\}.*)$", re.S)

            def repl(m, pin=pin):
                body = re.sub(r'url:\s*"?[^",}]+"?', f'url: "{pin["url"]}", sha256: {pin["sha256"]}', m.group(2), count=1)
                return f"{m.group(1)}{body}{m.group(3)}"
        hits = [n for n, line in enumerate(lines) if pat.match(line)]
        if len(hits) != 1:
            raise ValueError(f"data.{pin['task']}.{pin['name']}: {len(hits)} one-line entries match in the config "
                             f"file, expected 1; write its pin by hand: {pin}")
        lines[hits[0]] = pat.sub(repl, lines[hits[0]])
    return "".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rtpo.data.pins", description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--write", action="store_true", help="write the pins into the config file")
    a = ap.parse_args(argv)
    from rtpo.config import load_config

    path = Path(a.config)
    items = unpinned(load_config(path))
    if not items:
        print(f"{path}: every hub download is pinned")
        return 0
    try:
        pins = resolve(items)
    except Exception as e:  # noqa: BLE001 - no hub (compute node, offline), a renamed dataset: say which
        print(f"rtpo pins: {describe(items)}\ncould not reach the hub to pin them ({type(e).__name__}: {e}): run "
              "this on a login node with internet", file=sys.stderr)
        return 2
    text = path.read_text()
    new = apply(text, pins)
    sys.stdout.writelines(difflib.unified_diff(text.splitlines(True), new.splitlines(True), str(path), str(path)))
    if a.write:
        load_config(path)  # the original parses; the new one must too, with the pins in it
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(new)
        pinned = unpinned(load_config(tmp))
        if pinned:
            tmp.unlink()
            raise ValueError(f"{path}: still not pinned after writing: {describe(pinned)}")
        tmp.replace(path)
        print(f"{path}: {len(pins)} pins written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
