"""The CPU harness's vLLM rollout (`verl.cpu_rollout: vllm`, rtpo/verl_ext/cpu_harness/vllm_cpu.py) without vLLM:
its overrides compose with verl 0.9.1's config and reach verl's RolloutConfig, the choice is refused
with a message naming the set-up script where vLLM's CPU build is missing, and the default stays the
HF rollout. (The runs themselves: tests/vllm_cpu/, in .venv-vllm.)"""

from __future__ import annotations

import pytest

pytest.importorskip("verl")

from tests.test_verl import _cfg, _compose  # noqa: E402


def _overrides(tmp_path, method: str, **verl):
    from rtpo.verl_ext.launch import verl_overrides

    cfg = _cfg(tmp_path, 1, method)
    cfg["verl"].update(verl)
    if method == "rtpo":
        cfg["env"]["toy"]["max_turns"] = 3
    return cfg, lambda: verl_overrides(cfg, method, "toy", 0, tmp_path / "out", tmp_path / "model",
                                       tmp_path / "t.parquet", tmp_path / "v.parquet", cpu=True)


def test_cpu_rollout_vllm_overrides_compose_with_verl(tmp_path, monkeypatch):
    from verl.utils.config import omega_conf_to_dataclass

    from rtpo.verl_ext.cpu_harness import vllm_cpu

    monkeypatch.setattr(vllm_cpu, "installed", lambda: True)
    for sync, name in (("per_stage", "vllm"), ("interval:2", "vllm_keep"), ("kl:0.01", "vllm_keep")):
        cfg, ov = _overrides(tmp_path, "rtpo", cpu_rollout="vllm")
        cfg["method"]["rtpo"]["sync"] = sync
        o = ov()
        r = _compose(o).actor_rollout_ref.rollout
        # the config's dtype (the tests' float32) and vLLM's graph mode (enforce_eager False, the paper's);
        # the CPU forces sleep mode off (cpu_harness/forced.py)
        assert (r.name, r.dtype, r.enforce_eager, r.free_cache_engine, r.enable_sleep_mode) == \
            (name, "float32", False, False, False), sync
        rc = omega_conf_to_dataclass(r)  # verl's RolloutConfig accepts them
        assert rc.enable_sleep_mode is False and rc.tensor_model_parallel_size == 1
    cfg, ov = _overrides(tmp_path, "grpo", cpu_rollout="vllm")
    assert _compose(ov()).actor_rollout_ref.rollout.name == "vllm"


def test_cpu_rollout_defaults_to_hf_and_refuses_vllm_where_it_is_missing(tmp_path, monkeypatch):
    from rtpo.verl_ext.cpu_harness import vllm_cpu

    _, ov = _overrides(tmp_path, "rtpo")
    assert "actor_rollout_ref.rollout.name=hf" in ov()
    monkeypatch.setattr(vllm_cpu, "installed", lambda: False)
    _, ov = _overrides(tmp_path, "rtpo", cpu_rollout="vllm")
    with pytest.raises(RuntimeError, match="scripts/setup_venv_vllm.sh"):
        ov()
    _, ov = _overrides(tmp_path, "rtpo", cpu_rollout="sglang")
    with pytest.raises(ValueError, match="verl.cpu_rollout must be hf or vllm"):
        ov()


def test_cpu_harness_environment_sizes_vllm_cpu_kv_cache():
    from rtpo.verl_ext.launch import verl_env

    env = verl_env(cpu=True, base={})
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "1" and env["VLLM_CPU_OMP_THREADS_BIND"] == "nobind"
    assert verl_env(cpu=True, base={"VLLM_CPU_KVCACHE_SPACE": "4"})["VLLM_CPU_KVCACHE_SPACE"] == "4"
    assert "VLLM_CPU_KVCACHE_SPACE" not in verl_env(cpu=False, base={})
