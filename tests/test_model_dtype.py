"""The paper's base model and final/ in the model's own dtype: `rtpo base-model` keeps a bf16 hub
model (Qwen3-8B) in bf16, final/ inherits it (launch.export_dtype), and check-config's disk estimate
of final/ equals the bytes written. The CPU default (model.source tiny) stays fp32."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open

from rtpo.config import ROOT, load_config
from tests.helpers import tiny


def _tensors(d: Path) -> dict[str, torch.Tensor]:
    out = {}
    for f in sorted(d.glob("*.safetensors")):
        with safe_open(f, "pt") as s:
            out.update({k: s.get_tensor(k) for k in s.keys()})
    return out


def _hub_copy(d: Path) -> Path:
    """A tiny Qwen3 saved in bf16, as the hub ships Qwen3-8B (config.json dtype bfloat16)."""
    eng = tiny.engine(seed=0, max_position=512)
    model = eng.model.to(torch.bfloat16)
    model.config.dtype = torch.bfloat16
    model.save_pretrained(d)
    eng.tokenizer.save_pretrained(d)
    assert json.loads((d / "config.json").read_text())["dtype"] == "bfloat16"
    return d


def test_base_model_keeps_bf16_and_the_disk_estimate_is_what_is_written(tmp_path):
    from rtpo.sft import build_base_model
    from rtpo.verl_ext.budget import ModelShape
    from rtpo.verl_ext.launch import export_dtype

    hub = _hub_copy(tmp_path / "hub")
    cfg = load_config(ROOT / "config" / "config.yaml", validate=False)
    cfg["model"] = {"source": "hf", "path": str(hub), "hub_id": None, "threads": 1}
    cfg["sft"] = {"epochs": 0, "copy_pretrain_steps": 0}
    summary = build_base_model(cfg, tmp_path / "data", tmp_path / "tok", tmp_path / "base")
    base = tmp_path / "base"
    c = json.loads((base / "config.json").read_text())
    assert c["dtype"] == "bfloat16" and summary["dtype"] == "bfloat16"
    w = _tensors(base)
    assert {t.dtype for t in w.values()} == {torch.bfloat16}
    ref = _tensors(hub)
    assert w.keys() == ref.keys() and all(torch.equal(w[k], ref[k]) for k in w)  # the hub's weights, unchanged
    assert export_dtype(base) == "bfloat16"  # what final/ is merged into
    # check-config's final/ bytes: parameters x bytes per parameter of the model's dtype
    shape = ModelShape.from_hf("tiny", c)
    written = sum(t.numel() * t.element_size() for t in w.values())
    assert shape.weight_bytes == 2 and shape.params * shape.weight_bytes == written


def test_base_model_warm_start_trains_in_fp32_and_saves_the_own_dtype(tmp_path):
    """A warm start (copy pre-training) on a bf16 model runs its optimizer on fp32 weights, then the
    base model is saved in bf16 again."""
    from rtpo.sft import build_base_model

    hub = _hub_copy(tmp_path / "hub")
    cfg = load_config(ROOT / "config" / "config.yaml", validate=False)
    cfg["model"] = {"source": "hf", "path": str(hub), "hub_id": None, "threads": 1}
    cfg["sft"] = {"epochs": 0, "copy_pretrain_steps": 2, "copy_pretrain_lr": 1e-2}
    build_base_model(cfg, tmp_path / "data", tmp_path / "tok", tmp_path / "base")
    w, ref = _tensors(tmp_path / "base"), _tensors(hub)
    assert {t.dtype for t in w.values()} == {torch.bfloat16}
    assert any(not torch.equal(w[k], ref[k]) for k in w)  # trained


def test_local_loads_stay_fp32(tmp_path):
    """Training on the local engine loads fp32 master weights whatever the directory's dtype."""
    from rtpo.engine.local import load_hf_model

    hub = _hub_copy(tmp_path / "hub")
    model, _ = load_hf_model(hub)
    assert next(model.parameters()).dtype == torch.float32
    model, _ = load_hf_model(hub, dtype="auto")
    assert next(model.parameters()).dtype == torch.bfloat16
