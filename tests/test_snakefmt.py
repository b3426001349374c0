"""The workflow files are as snakefmt writes them (the snakemake-workflow-template's convention), with the
project's settings ([tool.snakefmt] in pyproject.toml: lines of 120, shell blocks left as written)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _snakefmt() -> str:
    exe = Path(sys.executable).with_name("snakefmt")
    if exe.exists():
        return str(exe)
    found = shutil.which("snakefmt")
    if not found:
        pytest.fail("snakefmt is not installed: it is in the dev extra (bash scripts/setup_venv.sh installs it)")
    return found


def test_workflow_files_are_snakefmt_formatted():
    r = subprocess.run([_snakefmt(), "--check", "--compact-diff", "workflow/"], cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, ("snakefmt would reformat the workflow (run `.venv/bin/snakefmt workflow/`):\n"
                               + r.stdout[-4000:] + r.stderr[-2000:])


def test_the_check_fails_on_an_unformatted_rule(tmp_path):
    """The check above can fail: a rule with its directives out of snakefmt's order is reported."""
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    smk = tmp_path / "workflow" / "rules" / "bad.smk"
    smk.parent.mkdir(parents=True)
    smk.write_text('rule bad:\n    output: "x"\n    input: "y"\n    shell: "touch {output}"\n')
    r = subprocess.run([_snakefmt(), "--check", "workflow/"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr
