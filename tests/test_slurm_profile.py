"""The Slurm profiles, split the Snakemake 9 way, and the refusal to submit with a site variable unset.

- slurm/profile.yaml, the *site* profile (`snakemake --profile slurm`): executor, account and
  partitions, jobs, retries; no per-rule key.
- workflow/profiles/default/profile.yaml, the *workflow* profile Snakemake loads by itself on every
  call: per-rule resources only, so a local run (the CPU default, the smoke DAG, the tests' DAG runs)
  is the same with or without it.
- a submission whose profiles name an unset $VARIABLE (RTPO_SLURM_ACCOUNT, ...) stops before the first
  sbatch, naming it; a dry run warns. Run with the real Snakemake and Slurm executor plugin against the
  fake Slurm commands (tests/fake_slurm), which record every call.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rtpo import dag
from rtpo.config import ROOT, load_config
from rtpo.verl_ext import startup as st
from tests.conftest import PIPELINE_ENV, SNAKEMAKE, workflow_copy

SITE = ROOT / "slurm" / "profile.yaml"
WORKFLOW = ROOT / "workflow" / "profiles" / "default" / "profile.yaml"
FAKE_SLURM = ROOT / "tests" / "fake_slurm"
VARIABLES = ("RTPO_SLURM_ACCOUNT", "RTPO_SLURM_PARTITION", "RTPO_SLURM_GPU_PARTITION")
SET = {"RTPO_SLURM_ACCOUNT": "rtpo_test", "RTPO_SLURM_PARTITION": "cpu", "RTPO_SLURM_GPU_PARTITION": "gpu"}
# Snakemake options that hold one entry per rule (a per-rule key must live in the workflow profile)
PER_RULE = {"set-resources", "set-threads", "set-resource-scopes", "set-scatter", "groups", "group-components"}


def snakemake(work: Path, *args: str, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    """`snakemake ARGS` in `work` with the fake Slurm on PATH and exactly the RTPO_SLURM_* of `env`
    (the caller's environment may hold its own)."""
    full = {k: v for k, v in os.environ.items() if k not in VARIABLES}
    full.update(PIPELINE_ENV, PATH=os.pathsep.join([str(FAKE_SLURM), str(Path(sys.executable).parent), os.environ["PATH"]]),
                FAKE_SLURM_DIR=str(work / "slurm-state"), **env)
    (work / "slurm-state").mkdir(exist_ok=True)
    return subprocess.run([str(SNAKEMAKE), *args], cwd=work, env=full, capture_output=True, text=True, timeout=timeout)


def slurm_calls(work: Path) -> list[dict]:
    calls = work / "slurm-state" / "calls.jsonl"
    return [json.loads(line) for line in calls.read_text().splitlines()] if calls.exists() else []


# ---------------------------------------------------------------------------------------------------
# the split
# ---------------------------------------------------------------------------------------------------
def test_site_profile_has_no_per_rule_key_and_workflow_profile_only_per_rule_keys(tmp_path):
    site, wf = yaml.safe_load(SITE.read_text()), yaml.safe_load(WORKFLOW.read_text())
    assert not PER_RULE & set(site), sorted(PER_RULE & set(site))
    assert site["executor"] == "slurm" and {"slurm_account", "slurm_partition"} <= set(site["default-resources"])
    assert "$RTPO_SLURM_ACCOUNT" == site["default-resources"]["slurm_account"]
    # the workflow profile is loaded for local runs too: nothing that would change one (executor,
    # retries, configfile) and no default-resources, which would replace the site's account and partition
    assert set(wf) <= PER_RULE, sorted(set(wf) - PER_RULE)
    # every rule it names is a rule of the workflow, and every GPU rule of the paper config has its GPUs here
    listed = snakemake(workflow_copy(tmp_path / "wf"), "--list-rules", "--configfile", "config/paper.yaml", env={})
    rules = set(listed.stdout.split())
    assert listed.returncode == 0 and {"train_rtpo", "evaluate_run", "theory"} <= rules, listed.stderr[-2000:]
    assert set(wf["set-resources"]) <= rules, sorted(set(wf["set-resources"]) - rules)
    gpu_rules = dag.Dag(load_config(ROOT / "config" / "paper.yaml")).gpu_rules()
    assert gpu_rules and all(wf["set-resources"][r]["gpu"] >= 1 for r in gpu_rules)
    assert all(wf["set-resources"][r]["slurm_partition"] == "$RTPO_SLURM_GPU_PARTITION" for r in gpu_rules)


def test_check_config_merges_the_profiles_as_snakemake_does(tmp_path):
    """Per top-level key, the later profile's section replaces the earlier one's: set-resources from the
    workflow profile over the site's default-resources; a default-resources in the workflow profile
    would drop the site's account (why the workflow profile has none)."""
    res = st.load_profile(ROOT / "slurm", ROOT / "workflow" / "profiles" / "default")
    assert res[st.PROFILE_SETTINGS]["retries"] == yaml.safe_load(SITE.read_text())["retries"] >= 1
    assert res["train_grpo"]["gpu"] == 8 and res["train_grpo"]["slurm_account"] == "$RTPO_SLURM_ACCOUNT"
    assert res["theory"]["slurm_partition"] == "$RTPO_SLURM_PARTITION"
    extra = tmp_path / "wp"
    extra.mkdir()
    (extra / "profile.yaml").write_text(yaml.safe_dump({"default-resources": {"runtime": 5}}))
    assert "slurm_account" not in st.load_profile(SITE, extra)["*"]


def _jobs(output: str) -> list[str]:
    """Each job of a dry run as its rule, output and reason (its resources and jobid left out), sorted."""
    blocks = re.split(r"\n(?=(?:local)?rule \w+:)", output)
    keep = ("rule ", "localrule ", "    output:", "    reason:", "    wildcards:")
    return sorted("\n".join(l for l in b.splitlines() if l.startswith(keep)) for b in blocks if re.match(r"(?:local)?rule ", b))


@pytest.mark.parametrize("configfile", ["config/config.yaml", "config/smoke.yaml"])
def test_local_dry_run_is_the_same_with_and_without_the_workflow_profile(tmp_path, configfile):
    work = workflow_copy(tmp_path / "wf")
    with_wp = snakemake(work, "-n", "--configfile", configfile, env={})
    without = snakemake(work, "-n", "--configfile", configfile, "--workflow-profile", "none", env={})
    assert with_wp.returncode == 0 == without.returncode, (with_wp.stderr + without.stderr)[-3000:]
    assert "workflow specific profile workflow/profiles/default" in with_wp.stderr  # it was loaded
    assert "workflow specific profile" not in without.stderr
    jobs = _jobs(with_wp.stdout)
    assert len(jobs) > 20
    assert jobs == _jobs(without.stdout)
    assert not slurm_calls(work)


@pytest.mark.slow
def test_local_runs_through_pipeline_sh_print_no_cluster_resources(tmp_path):
    """`bash scripts/pipeline.sh` (the README's local command) leaves the workflow profile out: its job headers
    show no cluster sizes (at f1aae5b base_model printed `mem_mb=64000, mem=64 GB, runtime=180`), the DAG is
    the same, and a profile named on its command line comes back."""
    venv = Path(sys.executable).parent.parent
    if not (venv / ".rtpo-installed").exists():
        pytest.skip(f"{venv} was not made by scripts/setup_venv.sh (pipeline.sh would install one)")
    work = workflow_copy(tmp_path / "wf")
    for f in ("scripts/pipeline.sh", "scripts/setup_venv.sh", "pyproject.toml", "constraints/cpu.txt"):
        (work / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / f, work / f)
    (work / ".venv").symlink_to(venv)

    def pipeline(*args: str) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if k not in VARIABLES}
        return subprocess.run(["bash", "scripts/pipeline.sh", *args], cwd=work, env=env, capture_output=True,
                              text=True, timeout=300)

    local = pipeline("-n", "--configfile", "config/smoke.yaml")
    assert local.returncode == 0, (local.stdout + local.stderr)[-3000:]
    heads = re.findall(r"resources: (.*)", local.stdout)
    assert heads and all(h == "tmpdir=/tmp" or "mem" not in h and "runtime" not in h for h in heads), heads[:5]
    assert "workflow specific profile" not in local.stderr
    with_wp = pipeline("-n", "--configfile", "config/smoke.yaml", "--workflow-profile", "workflow/profiles/default")
    assert with_wp.returncode == 0 and "mem_mb=64000" in with_wp.stdout  # base_model's, as a cluster job gets
    assert _jobs(local.stdout) == _jobs(with_wp.stdout)


def test_a_rules_resources_come_from_the_workflow_profile(tmp_path):
    """An edit to the workflow profile reaches the job (with the site's account and partition), as a
    copy given with --workflow-profile does (slurm/README.md)."""
    work = workflow_copy(tmp_path / "wf")
    prof = work / "workflow" / "profiles" / "default" / "profile.yaml"
    text = prof.read_text()
    assert text.count("runtime: 180") == 1  # base_model
    prof.write_text(text.replace("runtime: 180", "runtime: 181"))
    r = snakemake(work, "--profile", "slurm", "-n", env=SET)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    block = next(b for b in r.stdout.split("\nrule ") if b.startswith("base_model:"))
    res = re.search(r"resources: (.*)", block).group(1)
    assert "runtime=181" in res and "slurm_account=rtpo_test" in res and "slurm_partition=cpu" in res, res
    assert "WARNING" not in r.stdout + r.stderr


# ---------------------------------------------------------------------------------------------------
# the refusal
# ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("unset", [("RTPO_SLURM_ACCOUNT",), VARIABLES])
def test_submission_with_a_site_variable_unset_stops_before_sbatch(tmp_path, unset):
    work = workflow_copy(tmp_path / "wf")
    env = {k: v for k, v in SET.items() if k not in unset}
    # the dry run passes, with a warning naming each variable
    r = snakemake(work, "--profile", "slurm", "-n", env=env)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    warning = next(line for line in (r.stdout + r.stderr).splitlines() if line.startswith("WARNING:"))
    assert all(v in warning for v in unset) and not any(v in warning for v in set(VARIABLES) - set(unset))
    # the real submission (the real Slurm executor plugin) stops before submitting anything
    r = snakemake(work, "--profile", "slurm", "--slurm-init-seconds-before-status-checks", "1", env=env)
    assert r.returncode != 0
    out = r.stdout + r.stderr
    err = out[out.index("refusing to submit"):]
    assert all(v in err for v in unset), err
    assert "slurm/profile.yaml" in err and "Export" in err
    if "RTPO_SLURM_GPU_PARTITION" in unset:
        assert "set-resources.train_rtpo.slurm_partition" in err and "workflow/profiles/default/profile.yaml" in err
    calls = slurm_calls(work)
    assert calls and not [c for c in calls if c["cmd"] in ("sbatch", "srun")], calls  # the plugin started; no job
    assert not (work / "results").exists()  # not even a local rule ran


def test_an_empty_variable_counts_as_unset(tmp_path):
    work = workflow_copy(tmp_path / "wf")
    r = snakemake(work, "--profile", "slurm", "--slurm-init-seconds-before-status-checks", "1",
                  env={**SET, "RTPO_SLURM_PARTITION": ""})
    assert r.returncode != 0
    assert "refusing to submit: RTPO_SLURM_PARTITION (default-resources.slurm_partition)" in r.stdout + r.stderr
    assert not [c for c in slurm_calls(work) if c["cmd"] == "sbatch"]


def test_local_run_with_the_variables_unset_is_not_refused(tmp_path):
    """The workflow profile names $RTPO_SLURM_GPU_PARTITION for local runs too: only a remote executor
    is refused. A local run of one cheap target goes ahead."""
    work = workflow_copy(tmp_path / "wf")
    shutil.rmtree(work / "slurm")
    r = snakemake(work, "theory", "--cores", "1", "--configfile", "config/smoke.yaml", env={}, timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert "refusing" not in r.stdout + r.stderr and "WARNING" not in r.stdout + r.stderr
