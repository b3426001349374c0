"""Entropy with gradients: rtpo's patch of verl's chunked entropy and the start-up check's term for it
(rtpo/verl_ext/entropy.py, rtpo/verl_ext/startup.py; upstream verl issue #2448).

Tree-GRPO's entropy bonus makes verl differentiate ``verl_F.entropy_from_logits_with_chunking`` under one
reentrant checkpoint (workers/engine/fsdp/transformer_impl.py). A saved-tensor hook counts the bytes the
backward keeps, per (token x vocabulary entry), at T = 512, V = 4096 in bf16 (the lm_head's dtype):
verl's function saves 8 B beyond the logits; the function verl's engines read after the plugin is
imported saves none (2 B in all: the logits tensor itself, which the log-probs keep anyway).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
import verl.utils.torch_functional as verl_F

import rtpo.verl_ext.plugin  # noqa: F401  (what every verl process imports: patches verl_F)
from rtpo.config import ROOT, load_config
from rtpo.verl_ext import entropy as E
from rtpo.verl_ext import startup as st

T, V, CHUNK = 512, 4096, 128  # 4 chunks
BOUND = 2.5  # bytes saved per token x vocabulary entry, the logits included (2 B in bf16)
PAPER = ROOT / "config" / "paper.yaml"


def _verl_original():
    return E.ORIGINAL or verl_F.entropy_from_logits_with_chunking


def _logits(dtype: torch.dtype, t: int = T, v: int = V, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    leaf = (3 * torch.randn(t, v, generator=g)).to(dtype).requires_grad_()
    return leaf, leaf * 1.0  # non-leaf logits, as the lm_head's output


def saved_bytes(fn, dtype: torch.dtype = torch.bfloat16, checkpoint: bool = True) -> tuple[float, float]:
    """(all, beyond the logits) bytes saved for backward per T x V while verl's forward + backward of the
    entropy run (verl: ``torch.utils.checkpoint.checkpoint(compute_entropy_from_logits, logits_rmpad)``,
    reentrant, so the recompute inside backward is counted too). Distinct storages, each counted once."""
    _, logits = _logits(dtype)
    storages: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        s = t.untyped_storage()
        storages[s.data_ptr()] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if checkpoint:
            h = torch.utils.checkpoint.checkpoint(fn, logits, CHUNK, use_reentrant=True)  # verl's default
        else:
            h = fn(logits, CHUNK)
        (h * torch.linspace(-1, 1, T)).sum().backward()
    own = logits.untyped_storage().data_ptr()
    total = sum(storages.values())
    beyond = sum(n for p, n in storages.items() if p != own)
    return total / (T * V), beyond / (T * V)


def test_plugin_puts_the_patch_where_verl_engines_read_it():
    assert E.is_patched() and verl_F.entropy_from_logits_with_chunking is E.entropy_from_logits_with_chunking
    assert E.ORIGINAL is not None and E.ORIGINAL.__module__ == "verl.utils.torch_functional"
    assert E.patch() and E.ORIGINAL.__module__ == "verl.utils.torch_functional"  # idempotent
    # verl's engines look the function up on the module when they are built (after the plugin ran)
    import verl

    root = Path(verl.__file__).parent
    src = (root / "workers/engine/fsdp/transformer_impl.py").read_text()
    assert "entropy_from_logits = verl_F.entropy_from_logits_with_chunking" in src
    assert "torch.utils.checkpoint.checkpoint(\n                            self.compute_entropy_from_logits" in src
    for p in root.rglob("*.py"):
        for line in p.read_text(errors="ignore").splitlines():
            if line.startswith("from verl.utils.torch_functional import"):
                assert "entropy_from_logits_with_chunking" not in line, p  # would bind before the patch


def test_saved_bytes_per_token_vocab_verl_vs_patched():
    verl_all, verl_beyond = saved_bytes(_verl_original())
    new_all, new_beyond = saved_bytes(verl_F.entropy_from_logits_with_chunking)
    print(f"saved B/(T x V), bf16, under verl's checkpoint: verl {verl_all:.3f} ({verl_beyond:.3f} beyond the logits), "
          f"patched {new_all:.3f} ({new_beyond:.3f} beyond)")
    assert verl_beyond == pytest.approx(E.SAVED_BYTES_PER_TOKEN_VOCAB["verl"], abs=0.01)  # fp32 chunk + fp32 softmax
    assert verl_all > BOUND
    assert new_all <= BOUND
    assert new_beyond == pytest.approx(E.SAVED_BYTES_PER_TOKEN_VOCAB["patched"], abs=0.01)
    # without verl's outer checkpoint as well (entropy_checkpointing False)
    assert saved_bytes(_verl_original(), checkpoint=False)[1] > BOUND
    assert saved_bytes(verl_F.entropy_from_logits_with_chunking, checkpoint=False)[0] <= BOUND
    # the start-up check charges what is measured here (plus the gradient buffer)
    for k in ("patched", "verl"):
        assert st.ENTROPY_GRAD_BYTES[k] == E.SAVED_BYTES_PER_TOKEN_VOCAB[k] + E.GRAD_BYTES_PER_TOKEN_VOCAB[k]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("checkpoint", [True, False])
def test_values_and_gradients_match_verl(dtype, checkpoint):
    def run(fn, t=300, chunk=CHUNK):  # 300 rows: a last, partial chunk
        leaf, logits = _logits(dtype, t=t, v=1000, seed=1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            h = torch.utils.checkpoint.checkpoint(fn, logits, chunk, use_reentrant=True) if checkpoint else fn(logits, chunk)
        w = torch.randn(t, generator=torch.Generator().manual_seed(2))
        (h * w).sum().backward()
        return h.detach(), leaf.grad

    h0, g0 = run(_verl_original())
    h1, g1 = run(verl_F.entropy_from_logits_with_chunking)
    assert h1.dtype == torch.float32 and g1.dtype == dtype
    assert torch.equal(h0, h1)  # verl's forward, bit for bit
    tol = {torch.bfloat16: dict(rtol=1.6e-2, atol=1e-3), torch.float32: dict(rtol=1e-4, atol=1e-4)}[dtype]
    torch.testing.assert_close(g1, g0, **tol)
    # both against float64
    leaf, logits = _logits(dtype, t=300, v=1000, seed=1)
    z = logits.detach().double().requires_grad_()
    ref = torch.logsumexp(z, -1) - (torch.softmax(z, -1) * z).sum(-1)
    (ref * torch.randn(300, generator=torch.Generator().manual_seed(2)).double()).sum().backward()
    torch.testing.assert_close(g1.double(), z.grad.to(dtype).double(), **tol)


def test_without_gradients_it_is_verls_function():
    _, logits = _logits(torch.bfloat16, t=200, v=500)
    with torch.no_grad():
        h = verl_F.entropy_from_logits_with_chunking(logits, 64)
    assert h.grad_fn is None and torch.equal(h, _verl_original()(logits.detach(), 64))
    h = verl_F.entropy_from_logits_with_chunking(logits.detach(), 64)  # no grad required
    assert h.grad_fn is None
    assert verl_F.entropy_from_logits_with_chunking(logits, 64).grad_fn.name().endswith("ChunkedEntropyBackward")


def test_under_torch_compile_no_recompile_per_length():
    """verl wraps it in torch.compile(dynamic=True): the patched call is a graph break into eager code
    (`ChunkedEntropy` whatever Dynamo does), compiled once per grad mode, not once per packed length."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    f = torch.compile(verl_F.entropy_from_logits_with_chunking, dynamic=True)
    leaf = torch.randn(300, 200, requires_grad=True)
    for n in (300, 257, 200, 130, 100, 64, 50, 33, 20, 7):  # more lengths than Dynamo's recompile limit (8)
        logits = leaf[:n] * 1.0
        h = f(logits, 64)
        assert h.grad_fn is not None and h.grad_fn.name().endswith("ChunkedEntropyBackward")
        h.sum().backward()
        with torch.no_grad():
            assert torch.equal(f(logits, 64), _verl_original()(logits.detach(), 64))
    assert counters["frames"]["total"] <= 2, dict(counters["frames"])
    # verl's own call (transformer_impl.py, entropy_checkpointing): the compiled function under one reentrant
    # checkpoint, default chunk size, on the squeezed (1, T, V) lm_head output
    out = (torch.randn(1, 300, 200) * 3).to(torch.bfloat16).requires_grad_()
    logits_rmpad = (out * 1.0).squeeze(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        h = torch.utils.checkpoint.checkpoint(f, logits_rmpad)
    h.sum().backward()
    ref = out.detach().clone().requires_grad_()
    h0 = _verl_original()((ref * 1.0).squeeze(0))
    h0.sum().backward()
    assert torch.equal(h.detach(), h0.detach())
    torch.testing.assert_close(out.grad, ref.grad, rtol=1.6e-2, atol=1e-3)
    torch._dynamo.reset()


# ---------------------------------------------------------------------------------------------------
# The start-up check's memory model
# ---------------------------------------------------------------------------------------------------
def _cells(rep: st.Report) -> dict[str, st.CellReport]:
    return {c.cell: c for c in rep.cells}


def _failing(rep: st.Report) -> dict[str, set[tuple[str, str]]]:
    out: dict[str, set] = {}
    for f in rep.all_findings():
        out.setdefault(f.cell, set()).add((f.rule, f.key))
    return out


def test_paper_entropy_cells_charge_the_patched_term_and_pass():
    rep = st.check_config(load_config(PAPER, []))
    assert rep.ok, st.format_report(rep)
    cells = _cells(rep)
    shape = st.KNOWN_MODELS["Qwen/Qwen3-8B"]
    tree = [c for c in cells.values() if c.method == "tree_grpo"]
    assert len(tree) == 4  # 3 tasks + credit_assignment/psi-full: tree_grpo/math
    for c in tree:
        assert c.values["entropy grad"] == "patched"
        T = c.values["tokens/GPU"]
        base = cells[c.cell.replace("tree_grpo", "grpo")].memory
        assert base.total < c.memory.total < 80
        assert c.memory.entropy - base.entropy == pytest.approx(2.0 * T * shape.vocab / st.GIB)  # 7.0 GiB at 24576
    assert all(c.values["entropy grad"] is None for c in cells.values() if c.method != "tree_grpo")


def test_unpatched_entropy_fails_only_the_entropy_cells(monkeypatch):
    monkeypatch.setattr(st, "entropy_patch_active", lambda: False)
    rep = st.check_config(load_config(PAPER, []))
    fails = _failing(rep)
    tree = {c.cell for c in rep.cells if c.method == "tree_grpo"}
    assert set(fails) == tree
    for cell in tree:
        assert fails[cell] == {("memory", "train.micro_batch_tokens")}
        c = _cells(rep)[cell]
        assert c.values["entropy grad"] == "verl"
        assert c.memory.entropy == pytest.approx((3 * 2048 * 4 + 12 * 24576) * 151936 / st.GIB)  # 3.5 + 41.7 GiB
    msg = next(str(f) for f in rep.all_findings())
    assert "whole-function entropy recompute" in msg and "rtpo.verl_ext.plugin" in msg


def test_planted_larger_budget_fails_the_entropy_cells_only():
    """26624 tokens per GPU: GRPO and the rest still fit an A100 80GB; Tree-GRPO, with the entropy
    gradient's extra 2 B x T x V, does not."""
    rep = st.check_config(load_config(PAPER, ["train.micro_batch_tokens=26624"]))
    fails = _failing(rep)
    assert set(fails) == {c.cell for c in rep.cells if c.method == "tree_grpo"}
    assert all(v == {("memory", "train.micro_batch_tokens")} for v in fails.values())
    cells = _cells(rep)
    assert cells["grpo/math"].memory.total < 80 < cells["tree_grpo/math"].memory.total


def test_cli_passes_on_paper_and_fails_on_the_planted_cell(capsys):
    from rtpo.cli import main

    assert main(["check-config", "--config", str(PAPER)]) == 0
    assert "every check passes" in capsys.readouterr().out
    assert main(["check-config", "--config", str(PAPER), "--set", "train.micro_batch_tokens=26624"]) == 2
    r = capsys.readouterr()
    assert "start-up check failed: tree_grpo/math: train.micro_batch_tokens: estimated" in r.err
    assert "| grpo/math |" in r.out and "| tree_grpo/math |" in r.out and "FAIL: memory" in r.out
