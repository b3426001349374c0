"""The run list and the dry-run job list of every shipped config are kept (tests/snapshots/, written by
scripts/snapshot_runs.py): a refactor of rtpo.experiment, rtpo.dag or workflow/ that changes which runs
exist, what they train with, what they copy, their checkpoint stamps or which jobs the DAG has fails
here, naming the line. A change made on purpose rewrites them: `python scripts/snapshot_runs.py --write`.
"""

from __future__ import annotations

import difflib
import importlib.util
import sys

import pytest

from tests.conftest import ROOT

_spec = importlib.util.spec_from_file_location("snapshot_runs", ROOT / "scripts" / "snapshot_runs.py")
snapshot_runs = importlib.util.module_from_spec(_spec)
sys.modules["snapshot_runs"] = snapshot_runs
_spec.loader.exec_module(snapshot_runs)

CONFIGS = snapshot_runs.configs()
REWRITE = "if the change is on purpose: python scripts/snapshot_runs.py --write"


def _same(fname: str, text: str) -> None:
    kept = (snapshot_runs.SNAPSHOTS / fname).read_text()
    if kept != text:
        diff = "\n".join(list(difflib.unified_diff(kept.splitlines(), text.splitlines(), f"kept {fname}", "now",
                                                   lineterm="", n=0))[:40])
        pytest.fail(f"tests/snapshots/{fname} differs ({REWRITE}):\n{diff}", pytrace=False)


def test_every_shipped_config_has_its_snapshots():
    assert CONFIGS and {f.name for f in snapshot_runs.SNAPSHOTS.iterdir()} == \
        {f"{n}.{kind}.txt" for n in CONFIGS for kind in ("runs", "jobs")}


@pytest.mark.parametrize("name", CONFIGS)
def test_run_list_is_kept(name):
    """Every run of Experiment(cfg).runs: key, sets, seed group, copy_of, settings and eval fingerprints, stamp."""
    _same(f"{name}.runs.txt", snapshot_runs.run_list(name))


@pytest.mark.parametrize("name", CONFIGS)
def test_dry_run_job_list_is_kept(name):
    """`snakemake -n` (all, and sweep where the config has one): every job's rule, inputs, outputs, wildcards."""
    _same(f"{name}.jobs.txt", snapshot_runs.job_list(name))


def test_a_changed_run_is_caught():
    """The comparison can fail: one method's setting changed is a differing line for each of its runs (their
    settings and stamps) and for no other run."""
    text = snapshot_runs.run_list("smoke", ["method.tree_grpo.entropy_coef=0.002"])
    kept = (snapshot_runs.SNAPSHOTS / "smoke.runs.txt").read_text()
    changed = [a for a, b in zip(kept.splitlines(), text.splitlines()) if a != b]
    assert changed and all("/tree_grpo/seed" in line for line in changed)
    assert len(changed) == kept.count("/tree_grpo/seed")
