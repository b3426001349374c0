"""`rtpo evaluate --engine verl` on real vLLM (its CPU build): verl's vLLMReplica / vLLMHttpServer in
standalone mode, driven by the local engine's Roller. At temperature 0, in fp32, every trajectory's
tokens equal `--engine local`'s and the eval JSON's numbers are the same; a divergence is allowed
only at an argmax near-tie (top-2 logit gap < 1e-4) and is reported."""

from __future__ import annotations

import pytest
import yaml

from tests.test_eval_verl import NEAR_TIE, _cfg, _evaluate, _first_divergence, _logit_gap, _warm_model


@pytest.mark.slow
def test_evaluate_on_vllm_equals_local_at_temperature_0(tmp_path):
    from rtpo.data import generate_tasks

    model = _warm_model(tmp_path / "model")
    ev = tmp_path / "eval.jsonl"
    import json

    ev.write_text("".join(json.dumps(t.to_dict()) + "\n" for t in generate_tasks("math", 6, 0, "eval")))
    cfg = _cfg(tmp_path, cpu_rollout="vllm")
    assert yaml.safe_load(cfg.read_text())["verl"] == {"device": "cpu", "cpu_rollout": "vllm"}
    loc, loc_traj = _evaluate(tmp_path, cfg, model, ev, "local")
    ver, ver_traj = _evaluate(tmp_path, cfg, model, ev, "verl")
    assert ver["engine"] == "verl" and loc["engine"] == "local"
    assert ver["servers"] == {"rollout": "vllm", "tensor_parallel_size": 1, "replicas": 1, "max_model_len": 1024,
                              "cpu_harness": True}
    assert len(loc_traj) == len(ver_traj) == 12
    assert sum(len(t["turns"]) >= 2 for t in loc_traj) >= 4 and loc["overall"]["tool_calls_per_traj"] > 0
    report, diverged = [], 0
    for a, b in zip(loc_traj, ver_traj):
        assert (a["id"], a["seed"]) == (b["id"], b["seed"])
        d = _first_divergence(a, b)
        if d is None:
            continue
        diverged += 1
        k, j = d
        gap = _logit_gap(model, cfg, ev, a, k, j)
        report.append(f"{a['id']} seed {a['seed']}: turn {k} token {j}: top-2 logit gap {gap:.2e}")
        assert gap < NEAR_TIE, "diverged away from an argmax near-tie: " + report[-1]
    tokens = sum(len(u["action_ids"]) for t in ver_traj for u in t["turns"])
    print(f"vLLM (CPU) vs local: {len(loc_traj) - diverged}/{len(loc_traj)} trajectories token-identical, "
          f"{tokens} tokens; near-tie divergences: {report or 'none'}; vLLM {ver['throughput']['generated_tokens_per_s']:.0f} "
          f"tok/s after {ver['throughput']['startup_s']:.0f} s start-up")
    if not diverged:
        for key in ("benchmarks", "overall", "per_problem"):
            assert ver[key] == loc[key], key
    assert ver["throughput"]["generated_tokens"] == tokens
