"""The mechanism sweep: K-hop search questions, the sweep's cells (the 2 x 2 contrast, the optional arms,
the no-RL arm) and budgets, its DAG target, an untrained run of the no-RL arm, and its report on
constructed runs (the interaction, learning and budget rows can come out either way)."""

from __future__ import annotations

import json
import math
import random
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from rtpo.config import load_config
from rtpo.experiment import (ARM_CONTRAST, ARM_NO_RL, ARM_OPTIONAL, Experiment, RunKey, sweep_budget, sweep_cells,
                             sweep_data_sets, sweep_errors, sweep_model_sets)
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


def _constructed_sweep(**over) -> dict:
    """config/config.yaml with a constructed sweep: three horizons, the qwen3 / full contrast of RTPO and GRPO,
    truncate:1 and GRPO-TIS as optional arms, budgets that are none of the shipped ones; without Control B
    (`ablations.mismatch`, whose rows the sweep's report also gives: tests/test_controls.py)."""
    cfg = load_config(ROOT / "config" / "config.yaml")
    del cfg["ablations"]["mismatch"]
    cfg["sweep"].update(hops=[2, 3, 4], psi=["qwen3", "full"], methods=["rtpo", "grpo"],
                        optional={"psi": ["truncate:1"], "methods": ["grpo_tis"]},
                        rtpo_trajectories={"h2": 7.4, "h3": 9.5, "h4": 10.6}, seeds=[0, 1, 2, 3, 4, 5], no_rl=True)
    cfg["sweep"].update(over)
    return cfg


def test_sweep_cells_keys_arms_and_budgets():
    """Every (K, psi) of the contrast and the optional arms gets the no-RL arm, the contrast's methods and the
    optional ones; a flat method's chains are round(sweep.rtpo_trajectories.h<K>); the no-RL arm trains 0 steps
    whatever train.* says, so a changed training budget changes the trained cells' stamps and not its."""
    cfg = _constructed_sweep()
    cells = sweep_cells(cfg)
    assert len({c.key for c in cells}) == len(cells) == 3 * 3 * 4
    assert {c.key for c in cells if c.hops == 2} == {f"h2/psi-{p}/{m}" for p in ("qwen3", "full", "truncate-1")
                                                     for m in ("vanilla", "rtpo", "grpo", "grpo_tis")}
    arms = {(c.hops, c.psi, c.method): c.arm for c in cells}
    assert {k for k, a in arms.items() if a == ARM_CONTRAST} == {(k, p, m) for k in (2, 3, 4) for p in ("qwen3", "full")
                                                                 for m in ("rtpo", "grpo")}
    assert {k for k, a in arms.items() if a == ARM_NO_RL} == {(k, p, "vanilla") for k in (2, 3, 4)
                                                              for p in ("qwen3", "full", "truncate:1")}
    assert arms[(3, "truncate:1", "rtpo")] == arms[(3, "qwen3", "grpo_tis")] == ARM_OPTIONAL
    exp = Experiment(cfg)

    def run(e, c):   # the Run of a cell's first seed (its settings, inputs and stamp are every seed's)
        return e.run(RunKey("sweep", c.variant, "search", c.method, c.seeds[0]))

    for c in cells:
        s = run(exp, c).settings
        assert run(exp, c).inputs.train_file == f"results/sweep/data/h{c.hops}/train.jsonl"
        assert s["psi"] == c.psi and s["env"]["max_turns"] == c.hops + cfg["sweep"]["extra_turns"]
        if c.method in ("grpo", "grpo_tis"):
            assert s["method"]["chains"] == {2: 7, 3: 10, 4: 11}[c.hops] == sweep_budget(cfg, c.hops)
        if c.method == "rtpo":   # RTPO keeps the config's options: the flat methods are matched to it
            assert (s["method"]["trunks"], s["method"]["group_size"]) == (1, 4)
        assert s["train"]["steps"] == (0 if c.method == "vanilla" else cfg["sweep"]["train"]["steps"])
    runs = exp.select("sweep")
    assert len(runs) == len(cells) * 6
    assert {r.method for r in runs if not r.trains} == {"vanilla"} and sum(not r.trains for r in runs) == 9 * 6
    # a changed training budget reruns every trained cell and no untrained one; a changed K = 3 budget only
    # the K = 3 flat cells
    other = _constructed_sweep(train={**cfg["sweep"]["train"], "steps": 13})
    third = _constructed_sweep(rtpo_trajectories={"h2": 7.4, "h3": 8.4, "h4": 10.6})
    e2, e3 = Experiment(other), Experiment(third)
    for c in cells:
        assert (run(exp, c).stamp != run(e2, c).stamp) == (c.method != "vanilla")
        assert (run(exp, c).stamp != run(e3, c).stamp) == \
               (c.hops == 3 and c.method in ("grpo", "grpo_tis"))
    # the optional arms change none of the contrast's runs (the sweep base model reads the contrast's psi only)
    bare = Experiment(_constructed_sweep(optional={}))
    assert all(run(bare, c).stamp == run(exp, c).stamp for c in bare.sweep)
    # the data of horizon K: K-hop questions, max_turns K + extra_turns, the sweep's sizes
    d = exp.sweep_data_settings(3)
    assert d["data"]["hops"] == 3 and d["data"]["n_eval"] == cfg["sweep"]["n_eval"] >= 200
    assert "data.search.hops=3" in sweep_data_sets(cfg, 3)
    # the shipped sweep: K in {2, 3, 4}, the qwen3 / full contrast, >= 6 seeds, >= 200 eval questions
    shipped = load_config(ROOT / "config" / "config.yaml")["sweep"]
    assert shipped["hops"] == [2, 3, 4] and sorted(shipped["psi"]) == ["full", "qwen3"] and len(shipped["seeds"]) >= 6
    assert shipped["n_eval"] >= 200 and shipped.get("no_rl", True)


@pytest.mark.parametrize("over, words", [
    ({"psi": ["qwen3", "truncate:1"]}, "needs psi 'full'"),
    ({"methods": ["grpo", "grpo_tis"]}, "needs rtpo"),
    ({"rtpo_trajectories": {"h2": 8.0, "h3": 9.0}}, "no entry h4"),
    ({"optional": {"psi": ["full"]}}, "repeats ['full']"),
    ({"methods": ["rtpo", "grpo", "vanilla"]}, "sweep.no_rl"),
])
def test_a_sweep_without_its_contrast_or_budgets_is_refused(over, words):
    from rtpo.config import ConfigError
    from rtpo.dag import cross_reference_errors

    cfg = _constructed_sweep(**over)
    assert any(words in e for e in sweep_errors(cfg)), sweep_errors(cfg)
    assert any(words in e for e in cross_reference_errors(cfg))
    with pytest.raises(ConfigError, match=re.escape(words)):
        sweep_cells(cfg)
    assert sweep_errors(_constructed_sweep()) == []


def test_sweep_target_dry_run_lists_every_cell(tmp_path):
    wf = workflow_copy(tmp_path / "wf")
    cfg = yaml.safe_load((wf / "config" / "smoke.yaml").read_text())
    r = run_snakemake(wf, "-n", "sweep", "--configfile", "config/smoke.yaml")
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    counts = job_counts(r.stdout)
    sw = cfg["sweep"]
    opt = sw.get("optional") or {}
    assert opt.get("methods")   # the smoke sweep has an optional arm: every kind of cell is in its DAG
    cells = len(sw["hops"]) * (len(sw["psi"]) + len(opt.get("psi", []))) * (1 + len(sw["methods"])
                                                                             + len(opt.get("methods", [])))
    jobs_per_cell = -(-len(sw["seeds"]) // cfg["seeds_per_job"])
    assert counts["sweep_data"] == len(sw["hops"]) and counts["sweep_base_model"] == 1
    assert sum(n for r_, n in counts.items() if r_.startswith("sweep_train")) == cells * jobs_per_cell
    assert sum(n for r_, n in counts.items() if r_.startswith("sweep_evaluate")) == cells * jobs_per_cell
    assert counts["sweep_report"] == 1
    # the only main runs the sweep needs: those Control B (`mismatch`, target sweep) pairs its psi = full arms with
    mm = cfg["ablations"]["mismatch"]
    assert mm["target"] == "sweep"
    main_jobs = {r_: n for r_, n in counts.items() if r_.startswith(("train_", "evaluate_"))}
    per_cell = -(-len(cfg["seeds"]) // cfg["seeds_per_job"])
    assert main_jobs == {**{f"train_{m}": per_cell for m in mm["methods"]},
                         "evaluate_run": per_cell * len(mm["methods"])}, main_jobs
    assert f"output: results/eval/{mm['task']}/grpo/seed0.json" in r.stdout
    # the no-RL arm is evaluated under every (K, psi), from its own (untrained) run directory
    for k in sw["hops"]:
        for psi in sw["psi"]:
            assert f"output: results/sweep/h{k}/psi-{psi}/vanilla/eval_seed0.json" in r.stdout
            assert f"input: results/sweep/h{k}/psi-{psi}/vanilla/seed0/final" in r.stdout
    # ... and the default target does not run the sweep
    r = run_snakemake(wf, "-n", "--configfile", "config/smoke.yaml")
    assert r.returncode == 0 and not any(k.startswith("sweep") for k in job_counts(r.stdout))


def test_the_no_rl_arm_does_not_train_and_is_evaluated(tmp_path):
    """`rtpo train` of a no-RL cell (by its key, as a DAG job: the run brings the cell's sets) takes no step: no step records,
    run.json planned = completed = 0, final/ holds the sweep base model's weights; `rtpo evaluate` then scores
    it on the K-hop questions."""
    import torch
    from safetensors.torch import load_file

    from rtpo.cli import main as rtpo_main
    from rtpo.data import write_task_files
    from rtpo.sft import build_base_model, build_sweep_base_model
    from rtpo.tokenizer import save_tokenizer

    cfg = yaml.safe_load((ROOT / "config" / "smoke.yaml").read_text())
    cfg["model"]["tiny"] = {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "num_kv_heads": 1,
                            "intermediate_size": 64, "max_position": 256}
    cfg["sft"]["epochs"] = 0
    cfg["sweep"].update(max_position=512, sft_epochs=0, hops=[2, 3], n_train=4, n_eval=3, seeds=[0])
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    cfg = load_config(tmp_path / "c.yaml")
    tok_dir = tmp_path / "tok"
    save_tokenizer(tiny.tokenizer(), tok_dir)
    build_base_model(cfg, tmp_path, tok_dir, tmp_path / "base")
    files = write_task_files("search", {"n_train": 4, "n_eval": 3, "hops": 2}, tmp_path / "h2")
    cfg_sweep = Experiment(cfg).config_with(sweep_model_sets(cfg), "test")
    build_sweep_base_model(cfg_sweep, tmp_path / "base", [files["experts"]], tmp_path / "sweep_base")
    cell = next(c for c in sweep_cells(cfg) if c.hops == 2 and c.psi == "qwen3" and c.method == "vanilla")
    run = Experiment(cfg).run(RunKey("sweep", cell.variant, "search", "vanilla", 0))
    assert not run.trains and run.steps == 0
    sets = [a for s in cell.sets for a in ("--set", s)]
    out = tmp_path / "run"
    assert rtpo_main(["train", "--config", str(tmp_path / "c.yaml"), "--method", "vanilla", "--task", "search",
                      "--seed", "0", "--model", str(tmp_path / "sweep_base"), "--train-file", str(files["train"]),
                      "--scope", "sweep", "--variant", cell.variant, "--out", str(out)]) == 0
    record = json.loads((out / "run.json").read_text())
    assert record["steps"] == {"planned": 0, "completed": 0} and record["key"]["variant"] == "h2/psi-qwen3"
    assert record["settings"]["psi"] == "qwen3"
    metrics = out / "metrics.jsonl"
    assert not metrics.exists() or metrics.read_text().strip() == ""
    base, final = load_file(tmp_path / "sweep_base" / "model.safetensors"), load_file(out / "final" / "model.safetensors")
    assert base.keys() == final.keys() and all(torch.equal(base[k], final[k]) for k in base)
    assert rtpo_main(["evaluate", "--config", str(tmp_path / "c.yaml"), "--model", str(out / "final"),
                      "--method", "vanilla", "--task", "search", "--seed", "0", "--eval-file", str(files["eval"]),
                      *sets, "--out", str(tmp_path / "eval_seed0.json")]) == 0
    doc = json.loads((tmp_path / "eval_seed0.json").read_text())
    assert doc["method"] == "vanilla" and 0.0 <= doc["overall"]["pass@1"] <= 1.0


# ------------------------------------------------------------------------------------------------
# the report, on constructed runs
# ------------------------------------------------------------------------------------------------

def _plant(results: Path, cfg: dict, pass1, kl=lambda k, psi, m, s: 0.0, traj=None) -> None:
    """Write each sweep cell's eval JSON (pass@1 = pass1(K, psi, method, seed)) and, for a cell that trains,
    its metrics.jsonl: KL = kl(K, psi, method, seed), E.3 trajectories per prompt = traj(K, psi, method, seed)
    (default: a flat method's chains, RTPO's expected count), RTPO's regenerated trunk continuations (1.5 per
    prompt, counted in rollouts_per_prompt and not in E.3's count) and one Adam step per turn stage (3)."""
    exp = Experiment(cfg)
    for c in sweep_cells(cfg):
        for s in c.seeds:
            if c.method != "vanilla":
                run = results / c.run_dir(s).removeprefix("results/")
                run.mkdir(parents=True, exist_ok=True)
                r = exp.run(RunKey("sweep", c.variant, "search", c.method, s))
                chains = r.settings["method"].get("chains")
                t = traj(c.hops, c.psi, c.method, s) if traj else (
                    chains or cfg["sweep"]["rtpo_trajectories"][f"h{c.hops}"])
                cont = 1.5 if c.method == "rtpo" else 0.0
                adam = 3 if c.method == "rtpo" else 1
                recs = [{"step": i, "geo_ratio": 1.0, "kl_rollout_train": kl(c.hops, c.psi, c.method, s),
                         "abs_dlogp": 0.0, "clip_share": 0.0, "context_overflow": 0.0, "rollouts_per_prompt": t + cont,
                         "rollouts": {"trunk": 1.0, "continuation": cont}, "train_version": adam * (i + 1)}
                        for i in range(3)]
                (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
                (run / "run.json").write_text(json.dumps({"key": r.key.as_dict(), "copy_of": None, "settings": r.settings,
                                                          "steps": {"planned": 3, "completed": 3}}))
            p = pass1(c.hops, c.psi, c.method, s)
            out = results / c.eval_file(s).removeprefix("results/")
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(
                {"task": "search", "method": c.method, "seed": s, "k": 1, "benchmarks": {"b": {"pass@1": p, "hit": p}},
                 "overall": {"pass@1": p, "hit": p}}))


def _claims(tmp_path: Path) -> dict[str, dict]:
    import csv

    return {r["claim_id"]: r for r in csv.DictReader(open(tmp_path / "tables" / "sweep_claims.csv"))}


NOISE = {0: 0.004, 1: -0.003, 2: 0.001, 3: -0.002, 4: 0.0025, 5: -0.0015}


def _planted_pass1(k, psi, m, s):
    """Untrained 30 %; every trained cell +5 pp (+ seed noise); GRPO under qwen3 loses 1 + 2 (K - 2) pp
    more, with a seed noise that grows with K: the interaction is 1 / 3 / 5 pp (+ noise) at K = 2 / 3 / 4."""
    if m == "vanilla":
        return 0.30 + NOISE[s] / 2
    drop = (0.01 + 0.02 * (k - 2)) * (1 + 20 * NOISE[s]) if (m == "grpo" and psi == "qwen3") else 0.0
    return 0.35 + NOISE[s] - drop


def test_sweep_report_reads_the_interaction_learning_and_budgets(tmp_path):
    """On constructed per-seed values: the interaction per K is (RTPO − GRPO)[qwen3] − (RTPO − GRPO)[full]
    paired by seed; its growth K = 2 -> 4 is the mechanism row; each trained cell shows its learning over the
    no-RL arm; the budgets match RTPO's realised count; the optional arms are in the table only."""
    from rtpo.report.sweep import interaction, interaction_growth, load_sweep, write_sweep

    cfg = _constructed_sweep()
    _plant(tmp_path / "results", cfg, _planted_pass1,
           lambda k, psi, m, s: (0.01 * k * (1 + 10 * NOISE[s])) if (m != "rtpo" and psi != "full") else 0.0)
    df = load_sweep(tmp_path / "results", cfg)
    for k in (2, 3, 4):
        want = {s: 100 * (0.01 + 0.02 * (k - 2)) * (1 + 20 * NOISE[s]) for s in range(6)}
        got = interaction(df, k, "qwen3", "grpo")
        assert got.keys() == want.keys() and all(abs(got[s] - want[s]) < 1e-9 for s in got)
    growth = interaction_growth(df, [2, 3, 4], "qwen3", "grpo")
    assert all(abs(growth[s] - 4.0 * (1 + 20 * NOISE[s])) < 1e-9 for s in range(6))   # slope 2 pp/hop x 2 hops
    paths = write_sweep(tmp_path / "results", cfg, tmp_path / "tables", tmp_path / "figures")
    claims = _claims(tmp_path)
    assert list(claims) == ["sweep-interaction-grpo-qwen3-h2", "sweep-interaction-grpo-qwen3-h3",
                            "sweep-interaction-grpo-qwen3-h4", "sweep-interaction-grpo-qwen3-pooled",
                            "sweep-interaction-growth-grpo-qwen3",
                            "sweep-mismatch-grpo-qwen3"]   # the contrast only: no truncate:1, no GRPO-TIS row
    assert claims["sweep-interaction-growth-grpo-qwen3"]["verdict"] == "reproduced"   # 4 pp against a minimal 2
    assert abs(float(claims["sweep-interaction-growth-grpo-qwen3"]["ours_mean"]) - 4.0 * (1 + 20 * np.mean(
        list(NOISE.values())))) < 1e-6
    # the interaction at K = 4 is 5 pp: the paper's +21.5 % of GRPO[qwen3]'s ~30 % there is 6.45 pp, so smaller
    # (against the flat 2 pp it used to be tested against, "reproduced")
    assert claims["sweep-interaction-grpo-qwen3-h4"]["verdict"] == "paper's sign, smaller effect"
    assert "the paper's +21.5 % relative × grpo[qwen3] at K = 4's 30" in claims["sweep-interaction-grpo-qwen3-h4"][
        "expected"]
    assert claims["sweep-interaction-grpo-qwen3-h2"]["verdict"] == "paper's sign, smaller effect"   # 1 pp < 7.3 pp
    pooled = claims["sweep-interaction-grpo-qwen3-pooled"]   # (1 + 3 + 5) / 3 pp, paired by seed
    assert abs(float(pooled["ours_mean"]) - 3.0 * (1 + 20 * np.mean(list(NOISE.values())))) < 1e-6
    assert claims["sweep-mismatch-grpo-qwen3"]["verdict"] == "holds (by construction)"
    assert claims["sweep-interaction-grpo-qwen3-h2"]["n"] == "6"
    assert "rtpo[qwen3] +5.0" in claims["sweep-interaction-grpo-qwen3-h2"]["note"]   # the cells' learning, shown
    assert "budget grpo / RTPO qwen3 1.05, full 1.05" in claims["sweep-interaction-grpo-qwen3-h3"]["note"]   # 10 / 9.5
    assert "beyond" not in claims["sweep-interaction-growth-grpo-qwen3"]["note"]
    table = pd.read_csv(tmp_path / "tables" / "sweep_horizon.csv", keep_default_na=False, na_values=[""])
    row = lambda k, psi, m: table[(table.K == k) & (table.psi == psi) & (table.method == m)].iloc[0]  # noqa: E731
    assert abs(row(3, "full", "rtpo").learning_pp - 5.0 - 100 * np.mean([NOISE[s] / 2 for s in range(6)])) < 1e-3
    assert row(3, "full", "rtpo").learning == "learned" and row(4, "truncate:1", "grpo_tis").learning == "learned"
    assert row(3, "full", "vanilla").arm == "no-RL" and math.isnan(row(3, "full", "vanilla").learning_pp)
    assert row(3, "truncate:1", "grpo_tis").arm == "optional" and row(3, "truncate:1", "grpo_tis").n == 6
    assert abs(row(2, "qwen3", "grpo").budget_ratio - 7 / 7.4) < 1e-3 and not row(2, "qwen3", "grpo").budget_flag
    # E.3's count: RTPO's regenerated continuations are not trajectories; Adam steps per step as recorded
    assert row(4, "qwen3", "rtpo").trajectories_per_prompt == 10.6
    assert row(4, "qwen3", "rtpo").rollouts_per_prompt == 12.1
    assert row(4, "qwen3", "rtpo").adam_steps_per_step == 3 and row(4, "qwen3", "grpo").adam_steps_per_step == 1
    md = (tmp_path / "tables" / "sweep_horizon.md").read_text()
    # GRPO under qwen3 at K = 4 loses its 5 pp of learning to the planted mismatch: named, not hidden
    assert "shown in 26 of 27 trained cells; not shown in K = 4 psi = qwen3 grpo (no learning of 1 pp)" in md
    assert "within 1.0 ± 10 %" in md
    png = tmp_path / "figures" / "sweep_horizon.png"
    assert png in paths and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # docs/claims.md's sweep section: every sweep claim with its command (the sweep target) and evidence
    from rtpo.report.claims_map import write_claims_map

    md = write_claims_map(ROOT / "reference" / "cpu-default", tmp_path / "claims.md", sweep=tmp_path / "tables").read_text()
    section = md.split("## The mechanism sweep", 1)[1]
    rows = [x for x in section.splitlines() if x.startswith("| sweep-")]
    assert [r.split(" | ")[0][2:] for r in rows] == list(claims)
    assert all("snakemake sweep |" in r and "`results/tables/sweep_horizon.csv`" in r for r in rows)


def _frame(cells: dict) -> pd.DataFrame:
    """A load_sweep frame from {(K, psi, method, seed): pass@1}: no step records (the claim rows read pass@1)."""
    from rtpo.report.sweep import STEP_METRICS

    return pd.DataFrame([{"hops": k, "psi": psi, "method": m, "arm": "contrast", "seed": s, "trains": True,
                          "pass1": v, "hit": v, **dict.fromkeys((*STEP_METRICS, "adam_steps_per_step"), math.nan)}
                         for (k, psi, m, s), v in cells.items()])


def test_the_interaction_is_tested_against_the_papers_gain_on_our_level():
    """The interaction's effect at K: the paper's +21.5 % over GRPO (Table 1) times GRPO's pass@1 under the lossy
    psi at K, capped at the headroom, as the ledger's 4.1 rows; a flat method without a paper figure tests the
    minimal MIN_GAP_PP, said so; the pooled row tests the mean of the per-K effects."""
    from rtpo.report.ledger import Claim, evaluate_family
    from rtpo.report.stats import REPRODUCED, SMALLER
    from rtpo.report.sweep import MIN_GAP_PP, mapped_gap, sweep_claims

    level = {2: 0.40, 3: 0.93, 4: 0.20}   # GRPO under qwen3; at K = 3 21.5 % of 93 exceeds the 6.75 pp left
    cells = {}
    for k in level:
        for s in range(6):
            cells[(k, "qwen3", "grpo", s)] = level[k] + 0.001 * s
            cells[(k, "full", "grpo", s)] = level[k] / 2
            cells[(k, "full", "rtpo", s)] = level[k] / 2 + 0.01
            cells[(k, "qwen3", "rtpo", s)] = level[k] + 0.01 + 0.05 + 0.002 * (-1) ** s   # 5 - 0.1 s ± 0.2 pp
    df = _frame(cells)
    got = {k: mapped_gap(df, k, "qwen3", "grpo") for k in level}
    assert abs(got[2]["effect"] - 0.215 * 40.25) < 1e-9                   # the mean over seeds, in %
    assert got[2]["effect_basis"].startswith("the paper's +21.5 % relative × grpo[qwen3] at K = 2's 40.2 %")
    assert got[3]["effect"] == pytest.approx(100 - 93.25)
    assert "capped at the headroom 100 − 93.3 = 6.75 pp" in got[3]["effect_basis"]
    assert abs(got[4]["effect"] - 0.215 * 20.25) < 1e-9
    plain = mapped_gap(df.assign(method=df.method.replace("grpo", "grpo_tis")), 2, "qwen3", "grpo_tis")
    assert plain == {"effect": MIN_GAP_PP,
                     "effect_basis": f"no paper figure for grpo_tis: minimal effect {MIN_GAP_PP:g} pp"}

    claims = sweep_claims(df, _constructed_sweep(optional={}))
    assert all(isinstance(c, Claim) for c in claims)
    rows = {r["claim_id"]: r for r in evaluate_family(claims)}
    # 4.75 pp at every K: above 4.35 pp (K = 4), below 8.65 (K = 2); pooled, below the mean effect 6.58
    assert rows["sweep-interaction-grpo-qwen3-h4"]["verdict"] == REPRODUCED
    assert rows["sweep-interaction-grpo-qwen3-h2"]["verdict"] == SMALLER
    pooled = rows["sweep-interaction-grpo-qwen3-pooled"]
    want = np.mean([got[k]["effect"] for k in level])
    assert f"{want:.3g} pp" in pooled["expected"] and "averaged over K" in pooled["expected"]
    assert pooled["verdict"] == SMALLER and abs(pooled["ours_mean"] - 4.75) < 1e-9
    assert "minimal effect 2 pp from K = 2 to 4" in rows["sweep-interaction-growth-grpo-qwen3"]["expected"]


def test_the_pooled_interaction_decides_where_no_single_horizon_can():
    """Per seed, the pooled row is the mean over K of the per-K interactions, over the seeds every K has: seed
    noise that cancels across K leaves each K inconclusive and the pooled row tight around 0, below the paper's
    mapped effect (no effect of its size)."""
    from rtpo.report.ledger import evaluate_family
    from rtpo.report.stats import INCONCLUSIVE, NO_EFFECT
    from rtpo.report.sweep import interaction_pooled, sweep_claims

    noise = {2: [8, -8, 7, -7, 6, -5], 3: [-8, 8, -7, 7, -6, 5], 4: [0.3, -0.2, 0.1, 0.0, -0.1, 0.2]}   # pp
    cells = {}
    for k, eps in noise.items():
        for s, e in enumerate(eps):
            if (k, s) == (4, 5):
                continue   # seed 5 lacks K = 4: not in the pooled row
            cells.update({(k, "qwen3", "grpo", s): 0.30, (k, "full", "grpo", s): 0.40,
                          (k, "full", "rtpo", s): 0.42, (k, "qwen3", "rtpo", s): 0.32 + e / 100})
    df = _frame(cells)
    pooled = interaction_pooled(df, [2, 3, 4], "qwen3", "grpo")
    assert sorted(pooled) == [0, 1, 2, 3, 4]
    assert all(abs(pooled[s] - np.mean([noise[k][s] for k in noise])) < 1e-9 for s in pooled)
    rows = {r["claim_id"]: r for r in evaluate_family(sweep_claims(df, _constructed_sweep(optional={})))}
    assert [rows[f"sweep-interaction-grpo-qwen3-h{k}"]["verdict"] for k in (2, 3)] == [INCONCLUSIVE] * 2
    assert rows["sweep-interaction-grpo-qwen3-pooled"]["n"] == 5
    assert rows["sweep-interaction-grpo-qwen3-pooled"]["verdict"] == NO_EFFECT   # 6.45 pp mapped, |mean| < 0.2


def test_sweep_report_says_when_its_seeds_cannot_decide(tmp_path):
    """Seed noise only (8 pp per cell, no planted effect, no learning): the interaction rows are inconclusive
    and say so with their n, the cells' learning is inconclusive with n; a deleted eval JSON is an error
    that names it."""
    from rtpo.report.sweep import write_sweep

    cfg = _constructed_sweep(optional={}, seeds=[0, 1, 2])
    rng = random.Random(7)
    draws = {}

    def pass1(k, psi, m, s):
        return draws.setdefault((k, psi, m, s), min(1.0, max(0.0, 0.3 + rng.gauss(0, 0.08))))

    _plant(tmp_path / "results", cfg, pass1, lambda k, psi, m, s: 0.002 if psi != "full" and m != "rtpo" else 0.0)
    write_sweep(tmp_path / "results", cfg, tmp_path / "tables", tmp_path / "figures")
    claims = _claims(tmp_path)
    for k in (2, 3, 4):
        r = claims[f"sweep-interaction-grpo-qwen3-h{k}"]
        assert r["verdict"] == "inconclusive" and "inconclusive at n = 3 seeds" in r["note"], r
    table = pd.read_csv(tmp_path / "tables" / "sweep_horizon.csv", keep_default_na=False, na_values=[""])
    assert (table[table.arm != "no-RL"].learning.str.startswith("inconclusive (n = 3)")).sum() >= 6
    victim = tmp_path / "results" / sweep_cells(cfg)[3].eval_file(1).removeprefix("results/")
    victim.unlink()
    with pytest.raises(FileNotFoundError, match=str(victim.name)):
        write_sweep(tmp_path / "results", cfg, tmp_path / "tables", tmp_path / "figures")


def test_the_budget_ratio_check_flags_a_cell_beyond_ten_percent(tmp_path):
    """RTPO's realised trajectories per prompt at K = 4 under full are 8.5 where the flat chains are 11
    (ratio 1.29): that cell alone is flagged, in the table, its md and the K = 4 interaction row's note."""
    from rtpo.report.sweep import budget_flag, write_sweep

    assert budget_flag(1.11) and budget_flag(0.89) and not budget_flag(1.1) and not budget_flag(0.95)
    assert not budget_flag(math.nan)
    cfg = _constructed_sweep()

    def traj(k, psi, m, s):
        if m == "rtpo":
            return 8.5 if (k, psi) == (4, "full") else cfg["sweep"]["rtpo_trajectories"][f"h{k}"] + NOISE[s]
        return sweep_budget(cfg, k)

    _plant(tmp_path / "results", cfg, _planted_pass1, traj=traj)
    write_sweep(tmp_path / "results", cfg, tmp_path / "tables", tmp_path / "figures")
    table = pd.read_csv(tmp_path / "tables" / "sweep_horizon.csv", keep_default_na=False, na_values=[""])
    flagged = table[table.budget_flag]
    assert sorted(zip(flagged.K, flagged.psi, flagged.method)) == [(4, "full", "grpo"), (4, "full", "grpo_tis")]
    assert abs(flagged.budget_ratio.iloc[0] - 11 / 8.5) < 1e-3
    assert table[(table.K == 2) & (table.method == "grpo")].budget_ratio.between(0.9, 1.1).all()   # 7 / 7.4
    md = (tmp_path / "tables" / "sweep_horizon.md").read_text()
    assert "K = 4 psi = full grpo 1.29" in md
    claims = _claims(tmp_path)
    assert "beyond 1.0 ± 10 %" in claims["sweep-interaction-grpo-qwen3-h4"]["note"]
    assert "K = 4 psi = full: 1.29" in claims["sweep-interaction-grpo-qwen3-h4"]["note"]
    assert "beyond" not in claims["sweep-interaction-grpo-qwen3-h3"]["note"]


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
    '+0.0 [-0.0, 0.0]' / '-0.3' (the first full sweep's sweep_claims.md did). Checked on those two
    values and on the committed sweep reference's own rows, found by unit (its claim ids change
    with the design)."""
    from rtpo.report.ledger import ledger_display
    planted = pd.DataFrame([
        dict(claim_id="kl-slope", unit="nats/token/hop", rule="direction", n=3,
             ours_mean=0.00213, ci95_lo=-0.000412, ci95_hi=0.00467),
        dict(claim_id="gap-slope", unit="pp/hop", rule="direction", n=3,
             ours_mean=-0.2875, ci95_lo=-1.3125, ci95_hi=0.7375)])
    for col in ("kind", "source", "claim", "paper (Qwen3-8B)", "quantity", "expected", "verdict"):
        planted[col] = ""
    shown = dict(zip(planted["claim_id"], ledger_display(planted, "cpu-default").iloc[:, 7]))
    assert shown == {"kl-slope": "+0.00213 [-0.000412, 0.00467]", "gap-slope": "-0.29 [-1.31, 0.74]"}

    df = pd.read_csv(ROOT / "reference" / "sweep" / "sweep_claims.csv")
    shown = dict(zip(df["claim_id"], ledger_display(df, "cpu-default").iloc[:, 7]))
    kl = df[df["unit"].str.startswith("nats/token")]
    assert len(kl) >= 1, "the sweep reference has no KL(rollout || train) claim"
    for _, r in kl.iterrows():   # 3 significant digits, however small
        assert shown[r["claim_id"]] == (
            f"{r['ours_mean']:+#.3g} [{r['ci95_lo']:#.3g}, {r['ci95_hi']:#.3g}]"), r["claim_id"]


def test_a_sweep_without_the_no_rl_arm_says_its_learning_is_not_shown(tmp_path):
    from rtpo.report.sweep import write_sweep

    cfg = _constructed_sweep(no_rl=False, optional={}, seeds=[0, 1, 2])
    assert "vanilla" not in {c.method for c in sweep_cells(cfg)} and len(sweep_cells(cfg)) == 3 * 2 * 2
    _plant(tmp_path / "results", cfg, _planted_pass1)
    write_sweep(tmp_path / "results", cfg, tmp_path / "tables", tmp_path / "figures")
    md = (tmp_path / "tables" / "sweep_horizon.md").read_text()
    assert "no untrained arm (sweep.no_rl is false)" in md and "shown in" not in md
    assert "rtpo[qwen3] — (no untrained arm)" in _claims(tmp_path)["sweep-interaction-grpo-qwen3-h2"]["note"]


def test_a_sweep_run_is_a_run_like_any_other():
    """A sweep run's settings, evaluation settings and stamp came from a family of its own
    (sweep_run_settings, sweep_eval_settings, sweep_train_stamp, beside run_settings) through `scope ==
    SWEEP` branches of Run. Every run carries its inputs now, so one run_settings serves every scope: a sweep
    run's are run_settings of its method, task and sets, its stamp job_stamp of its identity, its inputs its
    horizon's data and the sweep base model."""
    from rtpo.run_record import job_stamp

    cfg = load_config(ROOT / "config" / "smoke.yaml")
    exp = Experiment(cfg)
    assert not any(hasattr(exp, f) for f in ("sweep_run_settings", "sweep_eval_settings", "sweep_train_stamp"))
    for r in exp.select("sweep"):
        assert r.settings == exp.run_settings(r.method, r.task, r.sets)
        assert r.eval_settings == exp.eval_settings(r.method, r.task, r.sets)
        assert r.stamp == job_stamp(r.identity)
        hops = exp.sweep_cell(r.key).hops
        assert (r.inputs.train_file, r.inputs.base_model) == (f"results/sweep/data/h{hops}/train.jsonl",
                                                              "results/sweep/models/base")
        assert r.identity["inputs"]["train_file"]["settings"] == exp.sweep_data_settings(hops)

