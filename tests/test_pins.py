"""Pins of what config/paper.yaml downloads from the Hugging Face hub (rtpo.data.pins): the entries
without a revision (AMC23, OlympiadBench) or a sha256 (the wiki-18 corpus) are found and named by
`rtpo check-config`, and the pins a login node resolves are written into the config file's own lines,
comments kept, so that the file still loads with every hub download pinned. Resolving them needs the hub,
which no machine here reaches (docs/data.md: the step is run on the cluster's login node)."""

from __future__ import annotations

import difflib

import pytest
import yaml

from rtpo.config import ROOT, load_config
from rtpo.data import pins

PAPER = ROOT / "config" / "paper.yaml"
SHA = "0123456789abcdef0123456789abcdef01234567"
HEX = "ab" * 32


def test_the_paper_configs_unpinned_downloads_are_found_and_named():
    items = pins.unpinned(load_config(PAPER))
    assert [(i["task"], i["name"]) for i in items] == [("math", "amc23"), ("math", "olympiadbench"), ("search", "corpus")]
    line = pins.describe(items)
    assert line.startswith("not pinned: math.amc23 (math-ai/amc23: hub main)") and "python -m rtpo.data.pins" in line
    assert pins.unpinned(load_config(ROOT / "config" / "rehearsal.yaml")) == []  # local fixtures, all by sha256


def test_pins_are_written_into_the_entries_own_lines(tmp_path):
    text = PAPER.read_text()
    items = pins.unpinned(load_config(PAPER))
    resolved = []
    for i in items:
        if i["kind"] == "hf":
            resolved.append({**i, "revision": SHA})
        else:
            url = i["url"].replace("/resolve/main/", f"/resolve/{SHA}/")
            resolved.append({**i, "url": url, "sha256": HEX})
    new = pins.apply(text, resolved)
    changed = [x for x in difflib.ndiff(text.splitlines(), new.splitlines()) if x.startswith("+ ")]
    assert len(changed) == 3, changed  # the three entries' lines, nothing else (comments included)
    (tmp_path / "paper.yaml").write_text(new)
    cfg = load_config(tmp_path / "paper.yaml")
    assert pins.unpinned(cfg) == []
    m = cfg["data"]["math"]["benchmarks"]
    assert m["amc23"] == {"hf_id": "math-ai/amc23", "split": "test", "revision": SHA}
    assert m["olympiadbench"]["revision"] == SHA and m["olympiadbench"]["config"] == "OE_TO_maths_en_COMP"
    corpus = cfg["data"]["search"]["corpus"]
    assert corpus["sha256"] == HEX and f"/resolve/{SHA}/wiki-18.jsonl.gz" in corpus["url"]
    assert corpus["path"] == "results/retrieval/wiki18/corpus.jsonl"
    assert yaml.safe_load(new)["method"] == yaml.safe_load(text)["method"]


def test_an_entry_not_on_one_line_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"data.math.amc23: 0 one-line entries match"):
        pins.apply("data:\n  math:\n    benchmarks:\n      amc23:\n        hf_id: math-ai/amc23\n",
                   [{"kind": "hf", "task": "math", "name": "amc23", "hf_id": "math-ai/amc23", "revision": SHA}])
