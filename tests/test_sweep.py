"""The mechanism sweep: K-hop search questions, the sweep's cells and budgets, its DAG
target, and its report on constructed runs (the claim rows can come out either way)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import yaml

from rtpo.config import load_config
from rtpo.dag import Dag
from rtpo.experiment import sweep_budget, sweep_cells, sweep_data_sets
from rtpo.data import generate_tasks
from rtpo.data.search_tasks import MAX_HOPS, run_expert, sample_task
from rtpo.envs import make_env
from tests.conftest import ROOT, run_snakemake, workflow_copy
from tests.helpers import tiny
from tests.test_workflow import job_counts


@pytest.mark.parametrize("hops", [2, 5, MAX_HOPS])
def test_k_hop_questions_follow_k_relations_and_the_expert_solves_them(hops):
    """A K-hop question names K relations; a faultless expert answers it in K searches + the answer."""
    tasks = generate_tasks("search", 4, 1234, "train", hops=hops)
    for t in tasks:
        assert t.meta["hops"] == hops and len(t.meta["path"]) == hops and len(t.meta["chain"]) == hops + 1
        assert len(set(t.meta["chain"])) == hops + 1   # no entity twice on the chain
        env = make_env(t, max_turns=hops + 2)
        msgs, reward = run_expert(t, env, 0.0, random.Random(0))
        assert reward == 1.0, msgs[-3:]
        assert sum(m["role"] == "assistant" for m in msgs) == hops + 1
    # the tiers' draws are unchanged by the new parameter (the main grid's data stays byte-identical)
    assert [t.question for t in generate_tasks("search", 6, 1234, "train")] == \
           [t.question for t in generate_tasks("search", 6, 1234, "train", hops=None)]


def test_hops_are_refused_outside_search_and_beyond_the_paths():
    with pytest.raises(ValueError, match="only search"):
        generate_tasks("math", 2, 0, "train", hops=3)
    with pytest.raises(ValueError, match="hops must be 2"):
        sample_task(random.Random(0), "hard", 1234, hops=MAX_HOPS + 1)


def test_sweep_cells_match_budgets_and_set_psi_and_turns():
    cfg = load_config(ROOT / "config" / "config.yaml")
    sw = cfg["sweep"]
    cells = sweep_cells(cfg)
    assert len(cells) == len(sw["hops"]) * len(sw["psi"]) * len(sw["methods"])
    assert len({c.key for c in cells}) == len(cells)
    dag = Dag(cfg)
    for c in cells:
        s = dag.sweep_run_settings(c)
        assert s["psi"] == c.psi and s["env"]["max_turns"] == c.hops + sw["extra_turns"]
        assert s["train"]["steps"] == sw["train"]["steps"]
        if c.method in ("grpo", "grpo_tis"):
            # E.3: RTPO's complete trajectories at L = K + 1 trunk turns, T (1 + (G - 1) L)
            rtpo = dag.sweep_run_settings(next(x for x in cells if x.hops == c.hops and x.method == "rtpo"))["method"]
            assert s["method"]["chains"] == rtpo["trunks"] * (1 + (rtpo["group_size"] - 1) * (c.hops + 1))
            assert s["method"]["chains"] == sweep_budget(cfg, c.hops)
    assert [sweep_budget(cfg, k) for k in (2, 8)] == [10, 28]
    # the data of horizon K: K-hop questions, max_turns K + extra_turns, the sweep's sizes
    d = dag.sweep_data_settings(6)
    assert d["data"]["hops"] == 6 and d["env"]["max_turns"] == 6 + sw["extra_turns"]
    assert d["data"]["n_train"] == sw["n_train"] and "data.search.hops=6" in sweep_data_sets(cfg, 6)
    # a changed sweep setting changes the stamps of exactly the runs it reaches
    other = load_config(ROOT / "config" / "config.yaml")
    other["sweep"]["train"]["steps"] += 1
    dag2 = Dag(other)
    assert all(dag.sweep_train_stamp(a) != dag2.sweep_train_stamp(b) for a, b in zip(dag.sweep, dag2.sweep))


def test_sweep_target_dry_run_lists_every_cell(tmp_path):
    wf = workflow_copy(tmp_path / "wf")
    cfg = yaml.safe_load((wf / "config" / "smoke.yaml").read_text())
    r = run_snakemake(wf, "-n", "sweep", "--configfile", "config/smoke.yaml")
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    counts = job_counts(r.stdout)
    sw = cfg["sweep"]
    cells = len(sw["hops"]) * len(sw["psi"]) * len(sw["methods"])
    jobs_per_cell = -(-len(sw["seeds"]) // cfg["seeds_per_job"])
    assert counts["sweep_data"] == len(sw["hops"]) and counts["sweep_base_model"] == 1
    assert sum(n for r_, n in counts.items() if r_.startswith("sweep_train")) == cells * jobs_per_cell
    assert sum(n for r_, n in counts.items() if r_.startswith("sweep_evaluate")) == cells * jobs_per_cell
    assert counts["sweep_report"] == 1 and "train_rtpo" not in counts   # the sweep needs no main run
    # ... and the default target does not run the sweep
    r = run_snakemake(wf, "-n", "--configfile", "config/smoke.yaml")
    assert r.returncode == 0 and not any(k.startswith("sweep") for k in job_counts(r.stdout))


# ------------------------------------------------------------------------------------------------
# the report, on constructed runs
# ------------------------------------------------------------------------------------------------

def _plant(results: Path, cfg: dict, pass1, kl) -> None:
    """Write each sweep cell's eval JSON and metrics.jsonl: pass@1 = pass1(K, psi, method, seed), the
    step records' KL = kl(K, psi, method, seed)."""
    for c in sweep_cells(cfg):
        for s in c.seeds:
            run = results / c.run_dir(s).removeprefix("results/")
            run.mkdir(parents=True, exist_ok=True)
            recs = [{"step": i, "geo_ratio": 1.0, "kl_rollout_train": kl(c.hops, c.psi, c.method, s), "abs_dlogp": 0.0,
                     "clip_share": 0.0, "context_overflow": 0.0, "rollouts_per_prompt": 10.0} for i in range(3)]
            (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
            p = pass1(c.hops, c.psi, c.method, s)
            (results / c.eval_file(s).removeprefix("results/")).write_text(json.dumps(
                {"task": "search", "method": c.method, "seed": s, "k": 1, "benchmarks": {"b": {"pass@1": p, "hit": p}},
                 "overall": {"pass@1": p, "hit": p}}))


def _sweep_cfg() -> dict:
    cfg = load_config(ROOT / "config" / "config.yaml")
    cfg["sweep"].update(hops=[2, 4, 6, 8], psi=["full", "truncate:1"], methods=["rtpo", "grpo"], seeds=[0, 1, 2, 3])
    return cfg


def test_sweep_report_finds_a_planted_mechanism(tmp_path):
    """GRPO loses 2 pp per hop under truncate:1 (and nothing under full) and its KL grows with K: the
    gap-horizon, mismatch-horizon and gap-mismatch rows are reproduced; the figure and table are written."""
    from rtpo.report.sweep import write_sweep

    cfg = _sweep_cfg()
    noise = {0: 0.004, 1: -0.003, 2: 0.001, 3: -0.002}

    def pass1(k, psi, m, s):   # GRPO's seed noise grows with K, so its per-seed slopes differ (an interval)
        drop = 0.02 * k if (m == "grpo" and psi != "full") else 0.0
        return 0.5 - drop + noise[s] + (noise[s] * k / 4 if (m == "grpo" and psi != "full") else 0.0)

    _plant(tmp_path / "results", cfg, pass1,
           lambda k, psi, m, s: 0.01 * k * (1 + 10 * noise[s]) if (m == "grpo" and psi != "full") else 0.0)
    paths = write_sweep(tmp_path / "results", cfg, tmp_path / "tables", tmp_path / "figures")
    claims = {r["claim_id"]: r for r in __import__("csv").DictReader(open(tmp_path / "tables" / "sweep_claims.csv"))}
    assert claims["sweep-gap-horizon-grpo"]["verdict"] == "reproduced"
    assert abs(float(claims["sweep-gap-horizon-grpo"]["ours_mean"]) - 2.0) < 0.05   # pp per hop
    assert claims["sweep-mismatch-horizon-grpo"]["verdict"] == "reproduced"
    assert claims["sweep-gap-mismatch-grpo"]["verdict"] == "reproduced"
    table = __import__("pandas").read_csv(tmp_path / "tables" / "sweep_horizon.csv")
    row = table[(table.K == 8) & (table.psi == "truncate:1") & (table.method == "grpo")].iloc[0]
    assert abs(row.rtpo_minus_method_pp - 16.0) < 0.5 and row.n == 4
    png = tmp_path / "figures" / "sweep_horizon.png"
    assert png in paths and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # docs/claims.md's sweep section: every sweep claim with its command (the sweep target) and evidence
    from rtpo.report.claims_map import write_claims_map

    md = write_claims_map(ROOT / "reference" / "cpu-default", tmp_path / "claims.md", sweep=tmp_path / "tables").read_text()
    section = md.split("## The mechanism sweep", 1)[1]
    rows = [x for x in section.splitlines() if x.startswith("| sweep-")]
    assert [r.split(" | ")[0][2:] for r in rows] == list(claims)
    assert all("snakemake sweep |" in r and "`results/tables/sweep_horizon.csv`" in r for r in rows)
    assert "| sweep-gap-horizon-grpo |" in section and "reproduced" in rows[0]


def test_sweep_report_excludes_an_absent_mechanism_and_names_a_missing_file(tmp_path):
    """No gap at any K (seed noise only): the gap-horizon row excludes the minimal effect; a deleted eval
    JSON is an error that names it."""
    from rtpo.report.sweep import write_sweep

    cfg = _sweep_cfg()
    noise = {0: 0.001, 1: -0.001, 2: 0.0005, 3: -0.0005}
    _plant(tmp_path / "results", cfg, lambda k, psi, m, s: 0.3 + noise[s] * (1 if m == "grpo" else -1) * (k % 3),
           lambda k, psi, m, s: 0.001)
    write_sweep(tmp_path / "results", cfg, tmp_path / "tables", tmp_path / "figures")
    claims = {r["claim_id"]: r for r in __import__("csv").DictReader(open(tmp_path / "tables" / "sweep_claims.csv"))}
    assert claims["sweep-gap-horizon-grpo"]["verdict"] == "no effect of the paper's size"
    assert claims["sweep-mismatch-horizon-grpo"]["verdict"] != "reproduced"
    victim = tmp_path / "results" / sweep_cells(cfg)[3].eval_file(1).removeprefix("results/")
    victim.unlink()
    with pytest.raises(FileNotFoundError, match=str(victim.name)):
        write_sweep(tmp_path / "results", cfg, tmp_path / "tables", tmp_path / "figures")


def test_sweep_base_model_raises_positions_and_trains_on_every_psi(tmp_path):
    """`rtpo sweep-base` (rtpo.sft.build_sweep_base_model): the base model continued on K-hop experts,
    its position limit raised to sweep.max_position, a share of the demos added per turn under each
    non-full psi, written as a checked model directory (the same files as the base model's)."""
    from rtpo.data import write_task_files
    from rtpo.engine.local import load_hf_model
    from rtpo.inputs import check_model_dir
    from rtpo.sft import build_base_model, build_sweep_base_model
    from rtpo.tokenizer import save_tokenizer

    tok_dir = tmp_path / "tok"
    save_tokenizer(tiny.tokenizer(), tok_dir)
    cfg = {"tasks": [], "model": {"source": "tiny", "threads": 1,
                                  "tiny": {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "num_kv_heads": 1,
                                           "intermediate_size": 64, "max_position": 256}},
           "sft": {"epochs": 0, "lr": 3e-3, "batch_size": 4, "turn_fraction": 1.0}}
    build_base_model(cfg, tmp_path, tok_dir, tmp_path / "base")
    demos = [write_task_files("search", {"n_train": 3, "n_eval": 1, "hops": k}, tmp_path / f"h{k}")["experts"]
             for k in (2, 3)]
    cfg["sweep"] = {"psi": ["full", "truncate:1"], "max_position": 512, "sft_epochs": 1}
    summary = build_sweep_base_model(cfg, tmp_path / "base", demos, tmp_path / "sweep_base")
    check_model_dir(tmp_path / "sweep_base")   # the manifest matches the files written
    model, _ = load_hf_model(tmp_path / "sweep_base")
    assert model.config.max_position_embeddings == 512
    saved = json.loads((tmp_path / "sweep_base" / "sft_summary.json").read_text())
    assert saved["demos"] == summary["demos"] == 6 and saved["source"] == "sweep"
    # turn_fraction 1: every demo is added once whole and once per assistant turn under truncate:1
    assert summary["sft_examples"] > 2 * summary["demos"]
    assert all(x == x for x in summary["sft_loss"])   # finite, not NaN


def test_small_sweep_effects_keep_their_digits_in_the_ledger_grid():
    """A KL slope of ~0.002 nats/token/hop and a gap slope of ~0.3 pp/hop must not print as
    '+0.0 [-0.0, 0.0]' / '-0.3' (the first full sweep's sweep_claims.md did)."""
    import pandas as pd

    from rtpo.report.ledger import ledger_display
    df = pd.read_csv(ROOT / "reference" / "sweep" / "sweep_claims.csv")
    shown = dict(zip(df["claim_id"], ledger_display(df, "cpu-default").iloc[:, 7]))
    kl = df.set_index("claim_id").loc["sweep-mismatch-horizon-grpo"]
    assert shown["sweep-mismatch-horizon-grpo"] == (
        f"{kl['ours_mean']:+#.3g} [{kl['ci95_lo']:#.3g}, {kl['ci95_hi']:#.3g}]")
    assert shown["sweep-mismatch-horizon-grpo"].startswith("+0.00")
    gap = df.set_index("claim_id").loc["sweep-gap-horizon-grpo_tis"]
    assert shown["sweep-gap-horizon-grpo_tis"].startswith(f"{gap['ours_mean']:+.2f} [")
