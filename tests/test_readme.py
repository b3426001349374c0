"""README.md: starts small, states its platform and the CPU wheel index, and its library example runs
as written (against a tiny model saved where the example looks for the base model)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def _block(heading: str, lang: str) -> str:
    section = README.split(f"## {heading}", 1)[1].split("\n## ", 1)[0]
    m = re.search(rf"```{lang}\n(.*?)```", section, re.S)
    assert m, f"no {lang} block under '{heading}'"
    return m.group(1)


def test_readme_starts_small_and_says_where_it_runs():
    assert len(README.splitlines()) < 200
    assert "Linux only" in README
    index = README.index("export PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu")  # the exact CPU wheel index
    smoke = README.index("bash scripts/pipeline.sh --configfile config/smoke.yaml")
    default = README.index("bash scripts/pipeline.sh      #")
    assert index < smoke < default < README.index("## Watch a run")  # the smoke run is the first command


def test_readme_library_example_runs_as_written(tmp_path, monkeypatch, capsys):
    from tests.helpers import tiny

    eng = tiny.engine(seed=0, max_position=1024)
    base = tmp_path / "results" / "models" / "base"
    eng.model.save_pretrained(base)
    eng.tokenizer.save_pretrained(base)
    monkeypatch.chdir(tmp_path)
    code = _block("Using the library", "python")
    scope: dict = {}
    exec(compile(code, "README.md (Using the library)", "exec"), scope)
    rec = scope["record"]
    assert [t["k"] for t in rec["turns"]] == sorted((t["k"] for t in rec["turns"]), reverse=True)  # K-1 first
    assert rec["rollouts_per_prompt"] > 1 and rec["tokens"]["trunk"] > 0
    assert scope["roller"].rows == "turn"
    out = capsys.readouterr().out.split()
    assert out[0] == str(rec["reward_mean"])
