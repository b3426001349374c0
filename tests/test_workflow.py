"""The Snakemake workflow: config validation, the DAG of every config, lint, the smoke DAG
end to end, reruns (params change, deleted seed) and submission through the real Slurm executor
plugin with fake Slurm commands (tests/fake_slurm/).

Every test runs the real `snakemake` of this environment in a subprocess, in a temporary working
copy of workflow/ and config/ (tests/conftest.py).
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, copy_workdir, run_snakemake, workflow_copy
from tests.report_fixture import cell_seeds, study_seeds

CONFIGS = ["config", "smoke", "paper", "smollm2"]
FAKE_SLURM = ROOT / "tests" / "fake_slurm"
REPORT_RULES = {"tables", "figures", "ledger", "status", "report_assets"}


def load(name: str, root: Path = ROOT) -> dict:
    """config/<name>.yaml of the repository, or of a working copy (the smoke fixture's snapshot)."""
    return yaml.safe_load((root / "config" / f"{name}.yaml").read_text())


def job_counts(output: str) -> dict[str, int]:
    """The 'Job stats' table of a dry run: rule -> number of jobs."""
    m = re.search(r"Job stats:\n.*?\n-+\s+-+\n(.*?)\ntotal\s+(\d+)", output, re.S)
    assert m, f"no job stats in:\n{output[-2000:]}"
    counts = {}
    for line in m.group(1).splitlines():
        name, n = line.split()
        counts[name] = int(n)
    assert sum(counts.values()) == int(m.group(2))
    return counts


def dry_run_jobs(output: str) -> list[dict[str, str]]:
    """The jobs a dry run lists: [{"rule", "output", "reason", "wildcards"}]."""
    jobs = []
    for block in re.split(r"\n(?=(?:local)?rule \w+:\n)", output):
        m = re.match(r"(?:local)?rule (\w+):\n", block)
        if not m:
            continue
        job = {"rule": m.group(1)}
        for key in ("output", "reason", "wildcards"):
            km = re.search(rf"^    {key}: (.*)$", block, re.M)
            job[key] = km.group(1) if km else ""
        jobs.append(job)
    return jobs


def ablation_arm_count(cfg: dict) -> int:
    """Ablation (variant, method) arms, counted from the config independently of the workflow."""
    return len(ablation_arms(cfg))


def ablation_arms(cfg: dict) -> list[tuple[str, str, list[int]]]:
    """(study, "<variant dir>/<task>/<method>" prefix, seeds) of every arm `all` runs, from the config alone: the
    RTPO studies one arm per value, the psi studies (credit_assignment, mismatch) one per method (seeds 0..n-1
    where the study's seed_counts names the method), matched_updates one per task and method, turn_rows one per
    task; a study with `target: sweep` runs with the sweep's target instead."""
    a, out = cfg["ablations"], []
    names = {"group_size": lambda v: f"G{v}", "sync": lambda v: str(v).replace(":", "-"), "continuation": str}
    in_all = {s for s, v in a.items() if isinstance(v, dict) and v.get("target", "all") == "all"}

    def seeds(s, m):
        n = (a[s].get("seed_counts") or {}).get(m)
        return list(range(int(n))) if n is not None else study_seeds(cfg, s)
    for s in ("group_size", "sync", "continuation"):
        if s in in_all:
            out += [(s, f"{names[s](v)}/{a[s]['task']}/rtpo", study_seeds(cfg, s)) for v in a[s]["values"]]
    for s in ("credit_assignment", "mismatch"):
        if s in in_all:
            psi = str(a[s]["psi"]).replace(":", "-")
            out += [(s, f"psi-{psi}/{a[s]['task']}/{m}", seeds(s, m)) for m in a[s]["methods"]]
    if "matched_updates" in in_all:
        mu = a["matched_updates"]
        out += [("matched_updates", f"mb-{k}/{t}/{m}", study_seeds(cfg, "matched_updates"))
                for t, k in mu["mini_batches"].items() for m in (mu.get("methods") or [mu["method"]])]
    if "turn_rows" in in_all:
        out += [("turn_rows", f"rows-turn/{t}/grpo", study_seeds(cfg, "turn_rows")) for t in a["turn_rows"]["tasks"]]
    return out


def seed_jobs(cfg: dict, seeds: list) -> int:
    """Jobs that train (or evaluate) `seeds` of one cell: ceil(len(seeds) / seeds_per_job)."""
    per = int(cfg.get("seeds_per_job", 1))
    return -(-len(seeds) // per)


def count_by_family(counts: dict[str, int], family: str) -> int:
    """Jobs of a rule family: `family` itself plus its seed-group rules (family_seeds0-4, ...)."""
    return sum(n for rule, n in counts.items() if rule == family or rule.startswith(f"{family}_seed"))


@pytest.fixture(scope="module")
def wf(tmp_path_factory) -> Path:
    """A fresh working copy for dry runs (they write nothing under results/)."""
    return workflow_copy(tmp_path_factory.mktemp("wf"))


# ------------------------------------------------------------------------------------------------
# dry runs, lint, config validation
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", CONFIGS)
def test_dry_run_of_every_config(wf, name):
    """Each config parses, validates and gives the full DAG: main grid, ablations, theory, report."""
    r = run_snakemake(wf, "-n", "--configfile", f"config/{name}.yaml")
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    counts = job_counts(r.stdout)
    cfg = load(name)
    # one job per seed group of each (task, method) cell, at the cell's own seeds (seed_counts)
    for m in cfg["methods"]:
        want = sum(seed_jobs(cfg, cell_seeds(cfg, t, m)) for t in cfg["tasks"])
        assert count_by_family(counts, f"train_{m}") == want, (m, counts)
    assert count_by_family(counts, "evaluate_run") == sum(seed_jobs(cfg, cell_seeds(cfg, t, m))
                                                          for t in cfg["tasks"] for m in cfg["methods"])
    # copied arms: one job per seed of their study; trained arms: their seed groups over the study's seeds
    copied, trained = counts.get("ablation_reuse_run", 0), count_by_family(counts, "ablation_train")
    assert copied == counts.get("ablation_reuse_eval", 0) and trained == count_by_family(counts, "ablation_evaluate")
    reused = {j["output"].split("/seed")[0] for j in dry_run_jobs(r.stdout) if j["rule"] == "ablation_reuse_run"}
    arms = ablation_arms(cfg)
    is_copy = [f"results/ablations/{s}/{key}" in reused for s, key, _ in arms]
    assert copied == sum(len(seeds) for (_, _, seeds), c in zip(arms, is_copy) if c)
    assert trained == sum(seed_jobs(cfg, seeds) for (_, _, seeds), c in zip(arms, is_copy) if not c)
    assert counts["prepare_data"] == 3 and counts["base_model"] == 1 and counts["theory"] == 1
    assert counts.get("tokenizer", 0) == (1 if cfg["model"]["source"] == "tiny" else 0)
    for rule in REPORT_RULES | {"all"}:
        assert counts[rule] == 1
    # a dry run writes nothing (tests/test_faults.py); the effective config the rtpo commands read is
    # written when jobs run (onstart): --touch runs none, in a copy of its own. It is this config, validated
    from rtpo.config import load_config

    assert not (wf / "results").exists()
    touched = workflow_copy(wf.parent / f"touch-{name}")
    r = run_snakemake(touched, "--cores", "1", "--touch", "--configfile", f"config/{name}.yaml")
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    written = sorted((touched / "results" / "config").glob(f"{cfg['name']}-*.yaml"))
    assert len(written) == 1, "no effective config written"
    eff = load_config(written[-1])
    # ... with the schema's defaults filled in, as Snakemake's validate() does for the keys a config omits
    from snakemake.utils import validate

    expected = copy.deepcopy(cfg)
    validate(expected, schema=str(ROOT / "rtpo" / "config.schema.yaml"))
    assert {k: v for k, v in eff.items() if k != "ablations"} == {k: v for k, v in expected.items() if k != "ablations"}
    assert "seeds_per_job" in cfg  # every shipped config says how its seeds are grouped into jobs


def test_each_paper_table_is_a_target_of_its_own(wf):
    """`snakemake table10_group_size` runs that table's rule (and what it needs), not the report; `all`
    does not run the named rules (the tables rule writes the same files)."""
    from rtpo.report.table_names import TABLE_NAMES

    r = run_snakemake(wf, "-n", "table10_group_size", "--configfile", "config/smoke.yaml")
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    counts = job_counts(r.stdout)
    assert counts.get("table10_group_size") == 1 and not REPORT_RULES & set(counts), counts
    assert "results/tables/table10_group_size.csv" in r.stdout
    # the table's inputs are its runs: the group-size arms and the main runs they copy (airline RTPO), and
    # what those need -- no other method, task or study is trained (the CPU default: 79 jobs before, 18)
    r = run_snakemake(wf, "-n", "table10_group_size", "--configfile", "config/config.yaml")
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    counts = job_counts(r.stdout)
    trains = {k.split("_seed")[0] for k in counts if k.startswith("train_")}  # a family: train_rtpo_seeds0to3, ...
    assert trains == {"train_rtpo"} and "theory" not in counts, counts
    outputs = re.findall(r"results/(?:runs|eval|ablations)/\S+?(?=[,\s])", r.stdout)
    assert outputs and all(o.startswith(("results/runs/airline/rtpo/", "results/eval/airline/rtpo/",
                                         "results/ablations/group_size/")) for o in outputs), outputs[:5]
    r = run_snakemake(wf, "-n", "--configfile", "config/smoke.yaml")
    assert r.returncode == 0 and not set(TABLE_NAMES) & set(job_counts(r.stdout))


def test_cpu_default_reuses_identical_ablation_variants(wf):
    """The main run's G, sync per_stage and on-policy continuation equal the main RTPO runs of
    config.yaml (with config/overlays/optional.yaml, which adds the sync and continuation studies): copied for
    the ablation seeds, not retrained (the main seeds beyond them are not copied: the ledger reads them from the
    main runs); everything else trains on the ablation seeds, in seed-group jobs."""
    from snakemake.utils import update_config

    r = run_snakemake(wf, "--summary", "--configfile", "config/config.yaml", "config/overlays/optional.yaml")
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    rules = {line.split("\t")[0]: line.split("\t")[2] for line in r.stdout.splitlines()[1:] if "\t" in line}
    cfg = load("config")
    update_config(cfg, load("overlays/optional"))
    G = cfg["method"]["rtpo"]["group_size"]
    assert G in cfg["ablations"]["group_size"]["values"] and 2 != G
    twins = {"group_size": (f"G{G}", "airline"), "sync": ("per_stage", "search"), "continuation": ("on_policy", "search")}
    for study, (variant, task) in twins.items():
        if study not in cfg["ablations"]:
            continue
        seeds, main_seeds = study_seeds(cfg, study), cell_seeds(cfg, task, "rtpo")
        assert set(seeds) <= set(main_seeds)
        for s in sorted(set(seeds) | set(main_seeds) | {max(main_seeds) + 1}):
            key = f"{study}/{variant}/{task}/rtpo/seed{s}"
            if s in seeds:
                assert rules[f"results/ablations/{key}/summary.json"] == "ablation_reuse_run", key
            else:
                assert f"results/ablations/{key}/summary.json" not in rules, key
    trained = [(s, key, seeds) for s, key, seeds in ablation_arms(cfg)
               if not (s in twins and key.startswith(f"{twins[s][0]}/"))]
    assert {s for s, _, _ in trained} >= {"group_size", "continuation", "credit_assignment"}
    for study, key, seeds in trained:
        key = f"{study}/{key}"
        got = {int(m) for f in rules if f.startswith(f"results/ablations/{key}/") for m in re.findall(r"seed(\d+)", f)}
        assert got == set(seeds), (key, got)
        for s in seeds:
            assert rules[f"results/ablations/{key}/seed{s}/summary.json"].startswith("ablation_train"), key
    # with reuse switched off every arm trains, on the ablation seeds
    cfg["ablations"]["reuse_main_runs"] = False
    (wf / "config" / "noreuse.yaml").write_text(yaml.safe_dump(cfg))
    r = run_snakemake(wf, "-n", "--configfile", "config/noreuse.yaml")
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    counts = job_counts(r.stdout)
    assert count_by_family(counts, "ablation_train") == sum(seed_jobs(cfg, seeds) for _, _, seeds in ablation_arms(cfg))
    assert "ablation_reuse_run" not in counts


def test_seed_group_jobs_train_and_evaluate_several_seeds(wf):
    """seeds_per_job > 1: one job per (task, method) and seed group, outputs and logs per seed, the
    rule named after the group when a cell's seeds take several jobs."""
    cfg = load("config")
    cfg.pop("seed_counts", None)  # one seed list for every cell (per-cell counts: tests/test_seed_counts.py)
    cfg["seeds"], cfg["seeds_per_job"] = [0, 1, 2, 3, 4], 3
    (wf / "config" / "groups.yaml").write_text(yaml.safe_dump(cfg))
    r = run_snakemake(wf, "-n", "-p", "--configfile", "config/groups.yaml")
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    counts = job_counts(r.stdout)
    assert counts["train_rtpo_seeds0to2"] == counts["train_rtpo_seeds3to4"] == len(cfg["tasks"])
    assert counts["evaluate_run_seeds0to2"] == len(cfg["tasks"]) * len(cfg["methods"])
    job = next(j for j in dry_run_jobs(r.stdout) if j["rule"] == "train_rtpo_seeds3to4" and "math" in j["wildcards"])
    assert job["output"].split(", ")[:2] == ["results/runs/math/rtpo/seed3/summary.json",
                                             "results/runs/math/rtpo/seed4/summary.json"]
    shell = re.search(r"exec rtpo train .*--method rtpo --task math --seed 3 4 .*", r.stdout).group(0)
    assert "--out 'results/runs/math/rtpo/seed{seed}'" in shell and "--job-guard" in shell
    assert "--log 'results/logs/train/math/rtpo/seed{seed}.log' > results/logs/train/math/rtpo/seeds3-4.job.log" in shell


def test_paper_dag_lists_every_cell(wf):
    """config/paper.yaml: every method x task x 3 seeds is trained and evaluated, every ablation
    cell has its run and eval file, and the theory, tables, figures and ledger are built."""
    cfg = load("paper")
    assert cfg["seeds"] == [0, 1, 2] and cfg["ablations"]["seeds"] == [0, 1, 2]
    r = run_snakemake(wf, "--summary", "--configfile", "config/paper.yaml")
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    rows = [line.split("\t") for line in r.stdout.splitlines()[1:] if "\t" in line]
    rule_of = {row[0]: row[2] for row in rows}
    for t in cfg["tasks"]:
        for m in cfg["methods"]:
            for s in cfg["seeds"]:
                assert rule_of[f"results/runs/{t}/{m}/seed{s}/summary.json"] == f"train_{m}"
                assert rule_of[f"results/runs/{t}/{m}/seed{s}/final"] == f"train_{m}"
                assert rule_of[f"results/eval/{t}/{m}/seed{s}.json"] == "evaluate_run"
    a = cfg["ablations"]
    expected = []
    for g in a["group_size"]["values"]:
        expected.append(("group_size", f"G{g}", a["group_size"]["task"], "rtpo"))
    for v in a["sync"]["values"]:
        expected.append(("sync", v.replace(":", "-"), a["sync"]["task"], "rtpo"))
    for v in a["continuation"]["values"]:
        expected.append(("continuation", v, a["continuation"]["task"], "rtpo"))
    for m in a["credit_assignment"]["methods"]:
        expected.append(("credit_assignment", f"psi-{a['credit_assignment']['psi']}", a["credit_assignment"]["task"], m))
    assert len(expected) == ablation_arm_count(cfg) == 12
    for study, variant, task, method in expected:
        for s in a["seeds"]:
            base = f"results/ablations/{study}/{variant}/{task}/{method}"
            assert rule_of[f"{base}/seed{s}/summary.json"] in ("ablation_train", "ablation_reuse_run")
            assert rule_of[f"{base}/eval_seed{s}.json"] in ("ablation_evaluate", "ablation_reuse_eval")
    assert {"kl-0.01", "interval-2", "per_stage"} <= {v for st, v, _, _ in expected if st == "sync"}
    # paper scale: no tokenizer (Qwen3-8B brings its own), the base model is fetched
    assert "results/models/tokenizer" not in rule_of and rule_of["results/models/base"] == "base_model"
    for f, rule in [("results/theory", "theory"), ("results/tables/.tables.done", "tables"),
                    ("figures/.figures.done", "figures"), ("results/tables/claims.csv", "ledger"),
                    ("results/tables/claims.md", "ledger"), ("results/tables/status.md", "status")]:
        assert rule_of[f] == rule


def test_lint(wf):
    r = run_snakemake(wf, "--lint")
    assert r.returncode == 0, r.stdout[-3000:] + (r.stdout + r.stderr)[-3000:]


@pytest.mark.parametrize("edit, message", [
    (lambda c: c["train"].update(lrr=1e-4), "invalid config at 'train': Additional properties are not allowed ('lrr' was unexpected)"),
    (lambda c: c["method"]["grpo"].update(chainz=4), "invalid config at 'method.grpo': Additional properties are not allowed ('chainz' was unexpected)"),
    (lambda c: c["env"]["math"].update(psi="qwen4"), "invalid config at 'env.math.psi'"),
    (lambda c: c["method"].pop("arpo"), "'method.arpo' is missing"),
])
def test_bad_config_names_the_key(wf, edit, message):
    cfg = load("smoke")
    edit(cfg)
    (wf / "config" / "bad.yaml").write_text(yaml.safe_dump(cfg))
    r = run_snakemake(wf, "-n", "--configfile", "config/bad.yaml")
    out = r.stdout + r.stderr
    assert r.returncode != 0
    assert message in out, out[-2000:]
    assert "config/bad.yaml" in out  # the error names the file too


def test_targets_select_their_part_of_the_dag(wf):
    """Targets data / train / evaluate / ablations and `--until` stop where they should."""
    def rules(*args):
        r = run_snakemake(wf, "-n", *args, "--configfile", "config/smoke.yaml")
        assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
        return set(job_counts(r.stdout))

    assert rules("data") == {"prepare_data", "data"}
    train = rules("train")
    assert {"train_rtpo", "base_model", "tokenizer"} <= train and not train & {"evaluate_run", "ablation_train"}
    until = rules("--until", "evaluate")
    assert "evaluate_run" in until and not until & (REPORT_RULES | {"ablation_train", "theory"})
    abl = rules("ablations")
    assert {"ablation_train", "ablation_reuse_eval", "theory"} <= abl and not abl & REPORT_RULES


def test_slurm_profile_selects_paper_and_gpus(wf):
    """`--profile slurm` from the repository root: ./slurm is the site profile, which selects
    config/paper.yaml and the slurm executor; the workflow profile Snakemake loads by itself
    (workflow/profiles/default) gives the training rules their GPUs; neither selects Slurm for a
    plain `snakemake` (no executor in the workflow profile)."""
    site = yaml.safe_load((ROOT / "slurm" / "profile.yaml").read_text())
    assert site["executor"] == "slurm" and site["configfile"] == "config/paper.yaml"
    workflow_profile = yaml.safe_load((ROOT / "workflow" / "profiles" / "default" / "profile.yaml").read_text())
    assert "executor" not in workflow_profile
    for rule in [f"train_{m}" for m in load("paper")["method"] if m != "vanilla"] + ["ablation_train"]:
        res = workflow_profile["set-resources"][rule]
        assert res["gpu"] >= 1 and {"runtime", "mem_mb", "cpus_per_task", "slurm_partition"} <= set(res), rule
    assert "gpu" not in workflow_profile["set-resources"]["train_vanilla"]  # vanilla trains nothing
    env = {"RTPO_SLURM_ACCOUNT": "acct", "RTPO_SLURM_PARTITION": "cpu", "RTPO_SLURM_GPU_PARTITION": "gpu"}
    r = run_snakemake(wf, "--profile", "slurm", "-n", env=env)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    counts = job_counts(r.stdout)
    assert counts["train_rtpo"] == 9 and "tokenizer" not in counts  # paper.yaml: hf model, 3 tasks x 3 seeds
    train_job = next(j for j in r.stdout.split("\nrule ") if j.startswith("train_grpo:"))
    assert "gpu=8" in train_job and "slurm_partition=gpu" in train_job


def _job_blocks(output: str) -> list[str]:
    return [b for b in re.split(r"\n(?=\[[^\]]+\]\n(?:local)?rule )", output) if re.search(r"^(?:local)?rule \w+:", b, re.M)]


def test_slurm_dry_run_sizes_paper_jobs_to_their_work(wf, tmp_path):
    """`snakemake --profile slurm -n` (config/paper.yaml, the fake Slurm commands on PATH): every
    evaluation job runs `rtpo evaluate --engine verl` and asks for at least
    verl.tensor_parallel_size x verl.eval_replicas GPUs (what rtpo evaluate checks at start); the
    vanilla "training" jobs (train.steps 0: a copy of the base model) ask for no GPU and go to the
    CPU partition."""
    env = {"PATH": f"{FAKE_SLURM}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "FAKE_SLURM_DIR": str(tmp_path), "RTPO_SLURM_ACCOUNT": "acct", "RTPO_SLURM_PARTITION": "cpu",
           "RTPO_SLURM_GPU_PARTITION": "gpu"}
    r = run_snakemake(wf, "--profile", "slurm", "-n", env=env)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    v = load("paper")["verl"]
    need = int(v["tensor_parallel_size"]) * int(v.get("eval_replicas", 1))
    assert need >= 2
    seen = {"evaluate_run": 0, "ablation_evaluate": 0, "train_vanilla": 0}
    for block in _job_blocks(r.stdout):
        rule = re.search(r"^(?:local)?rule (\w+):", block, re.M).group(1)
        if rule not in seen:
            continue
        seen[rule] += 1
        res = dict(kv.split("=", 1) for kv in re.search(r"^    resources: (.*)$", block, re.M).group(1).split(", "))
        if rule == "train_vanilla":
            assert "gpu" not in res and res["slurm_partition"] == "cpu", block
        else:
            assert int(res["gpu"]) >= need and res["slurm_partition"] == "gpu", block
            # the shard size from the profile's eval_shard resource (rtpo.eval_shards), then rtpo evaluate
            assert re.search(r"^Shell command: export RTPO_EVAL_SHARD=512; exec rtpo evaluate .* --engine verl ",
                             block, re.M), block
    cfg = load("paper")
    assert seen["train_vanilla"] == len(cfg["tasks"]) * len(cfg["seeds"])
    assert seen["evaluate_run"] == len(cfg["tasks"]) * len(cfg["seeds"]) * len(cfg["methods"])
    assert seen["ablation_evaluate"] > 0


# ------------------------------------------------------------------------------------------------
# the smoke DAG end to end, and reruns on top of it
# ------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_smoke_dag_end_to_end(smoke_results, tmp_path):
    """Every run, eval, ablation, theory, table and figure file exists; the DAG is then complete."""
    work = smoke_results
    cfg = load("smoke", work)
    for t in cfg["tasks"]:
        for m in cfg["methods"]:
            for s in cfg["seeds"]:
                run = work / "results" / "runs" / t / m / f"seed{s}"
                summary = json.loads((run / "summary.json").read_text())
                assert summary["method"] == m and summary["task"] == t and summary["seed"] == s
                steps = cfg["method"][m].get("steps", cfg["train"]["steps"])  # vanilla: 0, the base model
                if steps:
                    assert len((run / "metrics.jsonl").read_text().splitlines()) == steps
                assert (run / "final" / "config.json").exists()
                assert (run / ".rtpo-job").read_text().split()[1] == "complete"
                ev = json.loads((work / "results" / "eval" / t / m / f"seed{s}.json").read_text())
                assert ev["method"] == m and ev["benchmarks"] and "pass@1" in ev["overall"]
                assert (work / "results" / "benchmarks" / "train" / t / m / f"seed{s}.tsv").exists()
    abl = sorted((work / "results" / "ablations").glob("*/*/*/*/eval_seed*.json"))
    assert cfg["seeds"] == cfg["ablations"]["seeds"]  # copied and trained arms: one eval file per seed each
    assert len(abl) == ablation_arm_count(cfg) * len(cfg["seeds"])
    # a copied arm says so in its run.json (copy_of: the main run), under its own key
    records = [json.loads(p.read_text()) for p in (work / "results" / "ablations").glob("*/*/*/*/seed*/run.json")]
    reused = [r for r in records if r["copy_of"] is not None]
    assert reused, "smoke.yaml has variants identical to main runs (G2, per_stage, on_policy)"
    for rec in reused:
        src = work / "results" / "runs" / rec["copy_of"]["task"] / rec["copy_of"]["method"] / f"seed{rec['copy_of']['seed']}"
        arm = (work / "results" / "ablations" / rec["key"]["scope"] / rec["key"]["variant"] / rec["key"]["task"]
               / rec["key"]["method"] / f"seed{rec['key']['seed']}")
        assert (arm / "metrics.jsonl").read_text() == (src / "metrics.jsonl").read_text()
        assert json.loads((src / "run.json").read_text())["settings"] == rec["settings"]
    assert all(r["steps"]["completed"] == r["steps"]["planned"] for r in records)
    assert any((work / "results" / "theory").iterdir())
    tables = work / "results" / "tables"
    for ext in ("csv", "md", "tex"):
        assert [p for p in tables.glob(f"*.{ext}") if not p.name.startswith("claims")], ext
    assert (tables / "claims.csv").stat().st_size > 0 and (tables / "claims.md").stat().st_size > 0
    assert list((work / "figures").glob("*.png")) and list((work / "figures").glob("*.pdf"))
    assert list((work / "results" / "report" / "figures").glob("*.png"))
    r = run_snakemake(work, "-n", "--configfile", "config/smoke.yaml")
    assert r.returncode == 0 and "Nothing to be done" in r.stdout + r.stderr, r.stdout[-3000:]
    # `snakemake --report`: the figures and tables marked for it are in the HTML report
    r = run_snakemake(work, "--report", str(tmp_path / "report.zip"), "--configfile", "config/smoke.yaml")
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    with zipfile.ZipFile(tmp_path / "report.zip") as z:
        names = z.namelist()
    assert any(n.endswith("report.html") for n in names)
    for fig in (work / "figures").glob("*.png"):
        assert any(n.endswith("/" + fig.name) for n in names), fig.name


@pytest.mark.slow
def test_changing_one_methods_lr_reruns_only_its_jobs(smoke_results, tmp_path):
    """method.grpo.lr changed: the dry run (all rerun triggers) reruns grpo's training jobs, because
    their params changed, then what depends on them; nothing else."""
    work = smoke_results
    cfg = load("smoke", work)
    cfg["method"]["grpo"]["lr"] = cfg["train"]["lr"] / 2
    (tmp_path / "lr.yaml").write_text(yaml.safe_dump(cfg))
    r = run_snakemake(work, "-n", "--configfile", str(tmp_path / "lr.yaml"))
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    jobs = dry_run_jobs(r.stdout)
    trains = [j for j in jobs if j["rule"].startswith("train_") or j["rule"] == "ablation_train"]
    assert {j["rule"] for j in trains} == {"train_grpo", "ablation_train"}
    assert sorted(re.findall(r"task=(\w+)", j["wildcards"])[0] for j in trains
                  if j["rule"] == "train_grpo") == sorted(cfg["tasks"] * seed_jobs(cfg, cfg["seeds"]))
    # the arms of `all` that train grpo rerun (credit assignment under psi=full, the matched-updates control's
    # GRPO-K on each of its tasks, GRPO on its own contexts; the mismatch control runs with `sweep`), rtpo_ca's
    # and rtpo's do not
    a = cfg["ablations"]
    grpo_arms = len([arm for arm in ablation_arms(cfg) if arm[1].endswith("/grpo")])
    assert grpo_arms == 3 and a["mismatch"]["target"] == "sweep"  # the smoke config has all three kinds
    assert all("/grpo/" in j["output"] for j in trains if j["rule"] == "ablation_train")
    assert len([j for j in trains if j["rule"] == "ablation_train"]) == grpo_arms * seed_jobs(cfg, a["seeds"])
    for j in trains:
        assert j["reason"].startswith("Params have changed since last execution"), j
    evals = [j for j in jobs if j["rule"] in ("evaluate_run", "ablation_evaluate")]
    assert evals and all("/grpo/" in j["output"] for j in evals)
    assert all("Input files updated by another job" in j["reason"] for j in evals)
    others = {j["rule"] for j in jobs} - {"train_grpo", "ablation_train", "evaluate_run", "ablation_evaluate"}
    assert others == REPORT_RULES | {"all"}
    # and the untouched config changes nothing
    r = run_snakemake(work, "-n", "--configfile", "config/smoke.yaml")
    assert "Nothing to be done" in r.stdout + r.stderr


@pytest.mark.slow
@pytest.mark.parametrize("victim", ["summary.json", "final"])
def test_deleting_one_seed_reruns_only_that_cell(smoke_results, tmp_path, victim):
    work = copy_workdir(smoke_results, tmp_path / "work")
    target = work / "results" / "runs" / "math" / "grpo" / "seed0" / victim
    shutil.rmtree(target) if target.is_dir() else target.unlink()
    r = run_snakemake(work, "-n", "--configfile", "config/smoke.yaml")
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    jobs = dry_run_jobs(r.stdout)
    by_rule = {}
    for j in jobs:
        by_rule.setdefault(j["rule"], []).append(j)
    assert set(by_rule) == {"train_grpo", "evaluate_run"} | REPORT_RULES | {"all"}
    assert [j["wildcards"] for j in by_rule["train_grpo"]] == ["task=math"]  # the seed group of seed 0
    assert "Missing output files" in by_rule["train_grpo"][0]["reason"]
    assert [j["output"] for j in by_rule["evaluate_run"]] == ["results/eval/math/grpo/seed0.json"]


@pytest.mark.slow
def test_forcerun_one_method_reruns_its_cells(smoke_results):
    r = run_snakemake(smoke_results, "-n", "--configfile", "config/smoke.yaml", "--forcerun", "train_rtpo")
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    counts = job_counts(r.stdout)
    cfg = load("smoke", smoke_results)
    assert counts["train_rtpo"] == len(cfg["tasks"]) * seed_jobs(cfg, cfg["seeds"])
    assert not [k for k in counts if k.startswith("train_") and k != "train_rtpo"] and "ablation_train" not in counts
    # the ablation variants identical to the main rtpo runs are copies of them: refreshed too
    assert counts["ablation_reuse_run"] == counts["ablation_reuse_eval"] > 0


@pytest.mark.slow
def test_slurm_executor_submits_with_fake_slurm(smoke_results, tmp_path):
    """The real slurm executor plugin with fake sbatch/srun/sacct/squeue/sacctmgr/scontrol on PATH:
    retraining one cell submits its training job with a GPU request and its evaluation; the
    tables, figures and ledger run locally (never through sbatch)."""
    work = copy_workdir(smoke_results, tmp_path / "work")
    state = tmp_path / "slurm_state"
    state.mkdir()
    env = {"PATH": f"{FAKE_SLURM}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "FAKE_SLURM_DIR": str(state), "RTPO_SLURM_ACCOUNT": "rtpo_test", "RTPO_SLURM_PARTITION": "cpu",
           "RTPO_SLURM_GPU_PARTITION": "gpu"}
    tables_before = (work / "results" / "tables" / ".tables.done").stat().st_mtime
    cell = "results/runs/math/grpo/seed0/summary.json"
    # the training job asks for two nodes (16 GPUs), as a two-node verl run does (docs/verl.md): edited
    # in the workflow profile, since a command-line --set-resources replaces its whole set-resources
    prof_path = work / "workflow" / "profiles" / "default" / "profile.yaml"
    prof = yaml.safe_load(prof_path.read_text())
    prof["set-resources"]["train_grpo"] = {**prof["set-resources"]["train_grpo"], "nodes": 2, "gpu": 16}
    prof_path.write_text(yaml.safe_dump(prof))
    r = run_snakemake(work, "--profile", "slurm", "--configfile", "config/smoke.yaml", "--forcerun", cell,
                      "--slurm-init-seconds-before-status-checks", "1", "--slurm-keep-successful-logs",
                      env=env, timeout=600)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    calls = [json.loads(line) for line in (state / "calls.jsonl").read_text().splitlines()]
    sbatch = [c["argv"] for c in calls if c["cmd"] == "sbatch"]
    # the plugin's --comment is rule_<rule>_wildcards_<values joined by _>
    submitted = {a[a.index("--comment") + 1].removeprefix("rule_").split("_wildcards_")[0]: a for a in sbatch}
    assert sorted(submitted) == ["evaluate_run", "train_grpo"] and len(sbatch) == 2, sbatch
    train = submitted["train_grpo"]
    assert "--nodes=2" in train and "--gpus=a100:16" in train, train
    assert not any(a.startswith("--nodes") for a in submitted["evaluate_run"])  # one-GPU jobs: Slurm's default
    assert train[train.index("-A") + 1] == "rtpo_test" and train[train.index("-p") + 1] == "gpu"
    assert any(a.startswith("--gpus=") for a in submitted["evaluate_run"])  # paper-scale evaluation runs on a GPU
    assert any(c["cmd"] == "srun" for c in calls) and any(c["cmd"] in ("sacct", "squeue") for c in calls)
    # the local rules did run, after the retrained cell
    assert (work / "results" / "tables" / ".tables.done").stat().st_mtime > tables_before
    assert (work / "results" / "runs" / "math" / "grpo" / "seed0" / "summary.json").exists()
