"""The paper DAG: `snakemake --profile slurm -n` lists the corpus and index rules upstream
of every search training and evaluation job; no other config has them.
"""

from __future__ import annotations

import re

from tests.conftest import run_snakemake, workflow_copy

SLURM_ENV = {"RTPO_SLURM_ACCOUNT": "acct", "RTPO_SLURM_PARTITION": "cpu", "RTPO_SLURM_GPU_PARTITION": "gpu"}
SEARCH_JOBS = re.compile(r"^(train_\w+|evaluate_run|ablation_train|ablation_evaluate)$")


def dry_run_graph(output: str) -> list[dict]:
    """Every job of a dry run: {"rule", "inputs", "outputs"} (file lists)."""
    jobs = []
    for block in re.split(r"\n(?=(?:local)?rule \w+:\n)", output):
        m = re.match(r"(?:local)?rule (\w+):\n", block)
        if not m:
            continue
        files = {}
        for key in ("input", "output"):
            km = re.search(rf"^    {key}: (.*)$", block, re.M)
            files[key] = [f.strip() for f in km.group(1).split(",")] if km else []
        jobs.append({"rule": m.group(1), "inputs": files["input"], "outputs": files["output"]})
    return jobs


def upstream_rules(job: dict, producer: dict[str, dict]) -> set[str]:
    seen, todo, rules = set(), list(job["inputs"]), set()
    while todo:
        f = todo.pop()
        if f in seen or f not in producer:
            continue
        seen.add(f)
        up = producer[f]
        rules.add(up["rule"])
        todo += up["inputs"]
    return rules


def test_corpus_and_index_upstream_of_every_search_job(tmp_path):
    wf = workflow_copy(tmp_path / "wf")
    r = run_snakemake(wf, "--profile", "slurm", "-n", env=SLURM_ENV)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    jobs = dry_run_graph(r.stdout)
    producer = {f: j for j in jobs for f in j["outputs"]}
    by_rule = {j["rule"]: j for j in jobs}
    assert by_rule["fetch_corpus"]["outputs"] == ["results/retrieval/wiki18/corpus.jsonl"]
    assert by_rule["build_index"]["inputs"] == ["results/retrieval/wiki18/corpus.jsonl"]
    assert by_rule["build_index"]["outputs"] == ["results/retrieval/wiki18/bm25"]
    search = [j for j in jobs if SEARCH_JOBS.match(j["rule"]) and any("/search/" in f for f in j["outputs"])]
    others = [j for j in jobs if SEARCH_JOBS.match(j["rule"]) and not any("/search/" in f for f in j["outputs"])]
    # main grid: 6 methods x 3 seeds trained and evaluated; ablations: sync and continuation studies on search
    assert sum(j["rule"] == "evaluate_run" for j in search) == 18 and len(search) > 36
    for j in search:
        assert {"fetch_corpus", "build_index", "prepare_data"} <= upstream_rules(j, producer), j
    assert others and all("build_index" not in upstream_rules(j, producer) for j in others)  # math, airline


def test_cpu_configs_have_no_retrieval_rules(tmp_path):
    wf = workflow_copy(tmp_path / "wf")
    r = run_snakemake(wf, "-n", "--configfile", "config/smoke.yaml")
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    rules = {j["rule"] for j in dry_run_graph(r.stdout)}
    assert "prepare_data" in rules and not rules & {"fetch_corpus", "build_index"}
