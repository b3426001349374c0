"""`rtpo evaluate --engine verl` on real vLLM (its CPU build): verl's vLLMReplica / vLLMHttpServer in
standalone mode, driven by the local engine's Roller. At temperature 0, in fp32, every trajectory's
tokens equal `--engine local`'s and the eval JSON's numbers are the same; a divergence is allowed
only at an argmax near-tie (top-2 logit gap < 1e-4) and is reported."""

from __future__ import annotations

import pytest
import yaml

from tests.test_eval_verl import _cfg, _warm_model, assert_engines_agree, math_eval_file


@pytest.mark.slow
def test_evaluate_on_vllm_equals_local_at_temperature_0(tmp_path):
    model = _warm_model(tmp_path / "model")
    cfg = _cfg(tmp_path, cpu_rollout="vllm")
    assert yaml.safe_load(cfg.read_text())["verl"] == {"device": "cpu", "dtype": "float32", "cpu_rollout": "vllm"}
    print("vLLM (CPU build): " + assert_engines_agree(tmp_path, cfg, model, math_eval_file(tmp_path), "vllm"))
