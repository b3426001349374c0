"""Whole-pipeline overrides: a user's YAML layered on a shipped config, and typed `--config` values.

Real `snakemake -n` in a working copy (tests/conftest.py); the job lists are compared."""

from __future__ import annotations

import pytest

from tests.conftest import run_snakemake, workflow_copy
from tests.test_workflow import dry_run_jobs


@pytest.fixture(scope="module")
def wf(tmp_path_factory):
    return workflow_copy(tmp_path_factory.mktemp("overrides"))


def _outputs(r) -> set[str]:
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    return {j["output"] for j in dry_run_jobs(r.stdout)}


def test_layered_configfile_and_typed_config_change_the_dry_run(wf):
    """`--configfile config/smoke.yaml my.yaml`: my.yaml's keys replace the shipped ones, the rest stays
    (Snakemake merges the files in order); `--config 'seeds=[0, 1]'` (brackets: Snakemake reads the
    numbers as strings, rtpo.config.retype_command_line makes them integers) gives the same job list."""
    base = _outputs(run_snakemake(wf, "-n", "--configfile", "config/smoke.yaml"))
    (wf / "my.yaml").write_text("seeds: [0, 1]\nseeds_per_job: 1\n")
    layered = _outputs(run_snakemake(wf, "-n", "--configfile", "config/smoke.yaml", "my.yaml"))
    assert layered != base
    seed1 = {o for o in layered if "seed1" in o}
    assert any(o.startswith("results/runs/math/rtpo/seed1") for o in seed1), sorted(layered)[:20]
    assert not any("seed1" in o for o in base)
    typed = _outputs(run_snakemake(wf, "-n", "--configfile", "config/smoke.yaml",
                                   "--config", "seeds=[0, 1]", "seeds_per_job=1"))
    assert typed == layered
    # a nested mapping on the command line: typed too, and merged into the shipped section
    r = run_snakemake(wf, "-n", "--configfile", "config/smoke.yaml", "--config", "train={steps: 3, lr: 1e-3}")
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]


def test_a_typed_value_the_schema_refuses_still_names_the_key(wf):
    r = run_snakemake(wf, "-n", "--configfile", "config/smoke.yaml", "--config", "seeds=[-1]")
    assert r.returncode != 0
    assert "invalid config at 'seeds.0'" in r.stdout + r.stderr, (r.stdout + r.stderr)[-2000:]


def test_retype_command_line_unit():
    from rtpo.config import retype_command_line

    cfg = {"seeds": ["0"], "train": {"steps": 2, "lr": 0.1}, "name": "x"}
    changed = retype_command_line(cfg, {"seeds": ["0", "2"], "train": {"lr": "1e-6"}, "name": "smoke"})
    assert cfg == {"seeds": [0, 2], "train": {"steps": 2, "lr": 1e-6}, "name": "smoke"}
    assert changed == ["seeds[0]", "seeds[1]", "train.lr"]
    keep = {"method": {"rtpo": {"sync": "interval:2"}}}
    retype_command_line(keep, {"method": {"rtpo": {"sync": "interval:2"}}})
    assert keep["method"]["rtpo"]["sync"] == "interval:2"


@pytest.mark.parametrize("name", ["config", "smoke", "paper", "smollm2"])
def test_lint_is_clean_for_every_config(wf, name):
    """`snakemake --lint` has no lint for any shipped config (the no-sweep stub rule included)."""
    r = run_snakemake(wf, "--lint", "--configfile", f"config/{name}.yaml")
    assert r.returncode == 0 and "Congratulations, your workflow is in a good condition!" in r.stdout + r.stderr, \
        (r.stdout + r.stderr)[-3000:]
