"""Training through verl's real trainer with the vLLM rollout (vLLM's CPU build, `rtpo.verl_ext.cpu_harness.vllm_cpu`):
the FSDP2 actor on the CPU platform, verl's vLLMReplica / vLLMHttpServer colocated with it, weight
pushes through verl's bucketed transfer (here over shared memory) into vLLM's `load_weights`.

What each test shows (fp32 on both sides, so rollout and training agree to float rounding):
  * RTPO per_stage, 2 steps across a checkpoint and a resume: ratio 1 and KL(rollout || train) ~ 0 in
    every stage, also in stage 0, which samples after stage 1's update: the per-stage push reached the
    weights vLLM computes with (`vllm_cpu.register` keeps them live; without it the first push fails);
  * GRPO (verl's own sync trainer, flat rows), 2 steps: ratio 1 under the flattened recomputation;
  * RTPO ``sync: interval:2`` on "vllm_keep": the synced stages have ratio 1, the unsynced stage 0
    samples from vLLM weights one update behind the actor, and its KL says so;
  * RTPO ``sync: kl:tau`` on "vllm_keep": the KL(inference || train) that decides whether to sync is
    scored by vLLM itself (prompt logprobs, `ServerEngine.score`) after an update without a sync.
The Ray cluster is the one of tests/test_verl.py (`verl_run`, started once for this module).
"""

from __future__ import annotations

import copy
import json
import types

import pytest

from tests.test_verl import TOY, _assert_trained, _cfg, _records, verl_run  # noqa: F401  (fixture)


def _vllm_cfg(run_, steps: int, method: str, **method_cfg) -> dict:
    cfg = _cfg(run_.tmp, steps, method)
    cfg["verl"]["cpu_rollout"] = "vllm"
    cfg["method"][method].update(method_cfg)
    return cfg


def _train(run_, cfg: dict, method: str, out) -> int:
    from rtpo.verl_ext.launch import train_verl

    args = types.SimpleNamespace(method=method, task="toy", seed=0, out=str(out), model=str(run_.model),
                                 train_file=str(run_.train))
    return train_verl(args, copy.deepcopy(cfg))


def _cmd(out) -> list[str]:
    return json.loads((out / "verl_command.json").read_text())["cmd"]


def _report(name: str, recs: list[dict]) -> None:
    for r in recs:
        stages = " ".join(f"k={t['k']}: ratio {t['ratio_mean']:.6f} KL {t['kl_rollout_train']:.2e}"
                          for t in r.get("turns", []))
        extra = f" sync_kl {[f'{x:.2e}' for x in r['sync_kl']]}" if "sync_kl" in r else ""
        print(f"{name} step {r['step']}: ratio {r['ratio_mean']:.6f} KL {r['kl_rollout_train']:.2e} {stages}{extra}")


def _one_keep_step(run_, sync: str, name: str) -> dict:
    """One RTPO step with `sync` on a K = 3 toy env; launch must pick the keep-weights vLLM rollout."""
    cfg = _vllm_cfg(run_, 1, "rtpo", sync=sync)
    cfg["env"]["toy"]["max_turns"] = 3
    out = run_.tmp / name
    assert _train(run_, cfg, "rtpo", out) == 0
    assert "actor_rollout_ref.rollout.name=vllm_keep" in _cmd(out)
    (r,) = _records(out)
    _report(f"RTPO {sync} on vllm_keep", [r])
    return r


@pytest.mark.slow
def test_rtpo_per_stage_on_vllm_with_checkpoint_and_resume(verl_run):
    out = verl_run.tmp / "vllm_rtpo"
    cfg1 = _vllm_cfg(verl_run, 1, "rtpo")
    assert _train(verl_run, cfg1, "rtpo", out) == 0
    cmd = _cmd(out)
    assert "actor_rollout_ref.rollout.name=vllm" in cmd and "actor_rollout_ref.rollout.dtype=float32" in cmd
    assert "vLLMHttpServer" in (out / "verl.log").read_text()  # the real vLLM servers, not the HF harness
    assert _train(verl_run, _vllm_cfg(verl_run, 2, "rtpo"), "rtpo", out) == 0  # resumes from global_step_1
    assert "Resuming from" in (out / "verl.log").read_text()
    recs = _records(out)
    _report("RTPO per_stage on vLLM", recs)
    assert [r["step"] for r in recs] == [0, 1]
    for r in recs:
        assert [t["k"] for t in r["turns"]] == [1, 0]
        for t in r["turns"]:
            assert t["ratio_mean"] == pytest.approx(1.0, abs=1e-4)  # on-policy siblings sampled by vLLM
            assert 0 <= t["kl_rollout_train"] < 1e-5
            assert t["groups"] == 4 and t["trained_tokens"] > 0
        assert r["syncs"] == 3
    _assert_trained(recs)
    assert (out / "final" / "config.json").exists() and json.loads((out / "summary.json").read_text())["steps"] == 2


@pytest.mark.slow
def test_grpo_on_vllm(verl_run):
    out = verl_run.tmp / "vllm_grpo"
    assert _train(verl_run, _vllm_cfg(verl_run, 2, "grpo"), "grpo", out) == 0
    assert "actor_rollout_ref.rollout.name=vllm" in _cmd(out)
    recs = _records(out)
    _report("GRPO on vLLM", recs)
    assert [r["step"] for r in recs] == [0, 1]
    for r in recs:
        assert r["trunks"]["n"] == 4 and r["trunks"]["turns_mean"] == 2.0
        assert r["ratio_mean"] == pytest.approx(1.0, abs=1e-4) and 0 <= r["kl_rollout_train"] < 1e-5
    assert (out / "checkpoint" / "global_step_2").is_dir()


@pytest.mark.slow
def test_rtpo_interval_sync_on_vllm_keep_samples_stale_weights(verl_run):
    """K = 3, ``sync: interval:2``: syncs before the trunks and before stage 1, none before stages 2
    and 0. Stage 0's siblings come from vLLM's weights of the last push, one update behind the actor
    (the "vllm_keep" servers are woken without a push, after every actor rank freed its cache)."""
    r = _one_keep_step(verl_run, "interval:2", "vllm_rtpo_interval")
    assert r["syncs"] == 2 and [t["k"] for t in r["turns"]] == [2, 1, 0]
    ratio = {t["k"]: t["ratio_mean"] for t in r["turns"]}
    kl = {t["k"]: t["kl_rollout_train"] for t in r["turns"]}
    assert ratio[2] == pytest.approx(1.0, abs=1e-4) and ratio[1] == pytest.approx(1.0, abs=1e-4)
    assert kl[0] > 10 * max(kl[2], kl[1], 1e-7)


@pytest.mark.slow
def test_rtpo_kl_sync_scores_through_vllm_prompt_logprobs(verl_run):
    """``sync: kl:tau``: before each stage, RTPO measures KL(inference || train) on the stage's trunk
    actions; after an update without a sync, vLLM (the stale inference weights) scores them through its
    prompt logprobs (`ServerEngine.score`). tau = 1e9: never sync, so stages 1 and 0 are scored by vLLM
    and train on stale samples; the record's sync_kl has what each decision saw."""
    r = _one_keep_step(verl_run, "kl:1e9", "vllm_rtpo_kl")
    # one measurement before each stage (the trunks' call has nothing to probe): before stage 2 the
    # servers hold the actor's weights (KL 0, scored by the actor); before stages 1 and 0, after updates
    # without a sync, vLLM scores the stale weights' logprobs against the updated actor's: KL > 0, finite
    assert len(r["sync_kl"]) == 3, r["sync_kl"]
    assert abs(r["sync_kl"][0]) < 1e-7 and all(0 < m < 10 for m in r["sync_kl"][1:]), r["sync_kl"]
    assert r["syncs"] == 0
    kl = {t["k"]: t["kl_rollout_train"] for t in r["turns"]}
    assert kl[0] > 10 * max(kl[2], 1e-7) and kl[1] > 10 * max(kl[2], 1e-7)
