"""`rtpo train`: metrics JSONL, checkpoints, and a resumed run equal to an uninterrupted one."""

from __future__ import annotations

import json

import pytest

from rtpo.config import load_config
from tests.helpers import tiny

TIME_KEYS = {"time", "wall_s_this_run", "time_total"}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tiny.airline_run_inputs(tmp_path_factory.mktemp("train"))
    cfg = load_config("config/smoke.yaml", ["train.steps=3", "train.checkpoint_every=1", "env.airline.max_turns=2"])
    return d, cfg


def strip(rec):
    return {k: v for k, v in rec.items() if k not in TIME_KEYS}


@pytest.mark.parametrize("method", ["rtpo", "grpo"])
def test_resume_matches_uninterrupted_run(setup, method):
    from rtpo.train import train

    d, cfg = setup
    full = train(method, "airline", cfg, 0, d / f"{method}-full", d / "model", d / "data/train.jsonl", progress=False)
    # interrupted after step 1: run 2 steps, then the same command with 3 steps resumes at step 2
    short = json.loads(json.dumps(cfg))
    short["train"]["steps"] = 2
    train(method, "airline", short, 0, d / f"{method}-resumed", d / "model", d / "data/train.jsonl", progress=False)
    resumed = train(method, "airline", cfg, 0, d / f"{method}-resumed", d / "model", d / "data/train.jsonl", progress=False)
    a = [json.loads(x) for x in (d / f"{method}-full/metrics.jsonl").read_text().splitlines()]
    b = [json.loads(x) for x in (d / f"{method}-resumed/metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in a] == [0, 1, 2] == [r["step"] for r in b]
    assert [strip(r) for r in a] == [strip(r) for r in b]
    assert strip(full) == strip(resumed)
    assert (d / f"{method}-resumed/final/config.json").exists()
    for key in ("ratio_mean", "tokens", "rollouts_per_prompt", "trunks", "syncs"):
        assert key in a[0]


def test_sft_labelled_loss_equals_the_models_own_loss():
    """rtpo.sft.labelled_loss (output head on labelled positions only) gives the loss and the
    gradients of `model(..., labels=...)` on a padded batch with unlabelled context tokens."""
    import torch

    from rtpo.sft import labelled_loss

    e = tiny.engine(seed=3)
    model = e.model
    model.train()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, len(e.tokenizer), (3, 17), generator=g)
    attn = torch.ones_like(ids)
    attn[1, 12:] = 0                       # a padded row
    labels = ids.clone()
    labels[:, :6] = -100                   # context only
    labels[1, 12:] = -100
    labels[2, 9:11] = -100                 # a hole inside the action
    grads = []
    for fn in (lambda: model(input_ids=ids, attention_mask=attn, labels=labels).loss,
               lambda: labelled_loss(model, ids, attn, labels)):
        model.zero_grad(set_to_none=True)
        loss = fn()
        loss.backward()
        grads.append((loss.item(), [p.grad.clone() for p in model.parameters() if p.grad is not None]))
    (l_ref, g_ref), (l_new, g_new) = grads
    assert abs(l_ref - l_new) < 1e-5, (l_ref, l_new)
    assert len(g_ref) == len(g_new)
    assert all(torch.allclose(a, b, atol=1e-6, rtol=1e-4) for a, b in zip(g_ref, g_new))


def test_copy_batch_labels_exactly_the_repeats():
    """rtpo.sft.copy_batch: segments of random tokens, each followed by 1-2 copies of itself; only
    the copies are labelled, with the token they repeat; same seed, same batch."""
    import random

    import torch

    from rtpo.sft import copy_batch

    pool = list(range(10, 60))
    ids, labels = copy_batch(random.Random(0), pool, batch_size=4, seq_len=200)
    again, _ = copy_batch(random.Random(0), pool, batch_size=4, seq_len=200)
    other, _ = copy_batch(random.Random(1), pool, batch_size=4, seq_len=200)
    assert ids.shape == labels.shape == (4, 200)
    assert torch.equal(ids, again) and not torch.equal(ids, other)
    assert set(ids.unique().tolist()) <= set(pool)
    keep = labels != -100
    assert torch.equal(labels[keep], ids[keep])
    assert 0.3 < keep.float().mean().item() < 0.75
    for row, lab in zip(ids.tolist(), labels.tolist()):
        i = 0
        while i < len(row):          # walk the segments: an unlabelled run, then its labelled copies
            j = i
            while j < len(row) and lab[j] == -100:
                j += 1
            seg = row[i:j]
            assert 4 <= len(seg) <= 24 or j == len(row)
            k = j
            while k < len(row) and lab[k] != -100:
                assert row[k] == seg[(k - j) % len(seg)]
                k += 1
            copies = (k - j) / len(seg)
            assert k == len(row) or copies in (1, 2), (seg, copies)
            i = k


@pytest.mark.slow
def test_copy_pretrain_teaches_the_model_to_copy():
    """Copy pre-training forms induction heads: after it the model predicts the repeated half of a
    fresh random sequence it has never seen; a model without it stays at chance (~22 s)."""
    import random

    import torch

    from rtpo.sft import copy_batch, copy_pretrain, labelled_loss

    e = tiny.engine(seed=0)
    tok = e.tokenizer
    pool = [i for i in range(len(tok)) if i not in set(tok.all_special_ids)]
    ids, labels = copy_batch(random.Random(99), pool, batch_size=8, seq_len=128)

    def copy_accuracy():
        with torch.no_grad():
            logits = e.model(input_ids=ids).logits[:, :-1]
        keep = labels[:, 1:] != -100
        return (logits.argmax(-1)[keep] == labels[:, 1:][keep]).float().mean().item()

    before = copy_accuracy()
    losses = copy_pretrain(e.model, tok, steps=600, lr=6e-3, batch_size=16, seq_len=128, seed=0)
    after = copy_accuracy()
    assert len(losses) == 600
    assert before < 0.05, before
    assert after > 0.5, (after, losses[::50])
    with torch.no_grad():
        assert labelled_loss(e.model, ids, torch.ones_like(ids), labels).item() < 0.5 * losses[0]


def test_base_model_runs_copy_pretraining_when_configured(tmp_path, capsys):
    """`sft.copy_pretrain_steps` reaches rtpo.sft.build_base_model: the summary holds the copy loss
    curve and, since 10 steps cannot form induction heads, the log says so and names the keys."""
    from rtpo.sft import build_base_model
    from rtpo.tokenizer import save_tokenizer

    tok_dir = tmp_path / "tok"
    save_tokenizer(tiny.tokenizer(), tok_dir)
    cfg = {"tasks": [], "model": {"source": "tiny", "threads": 1,
                                  "tiny": {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "num_kv_heads": 1,
                                           "intermediate_size": 64, "max_position": 256}},
           "sft": {"epochs": 0, "lr": 1e-3, "copy_pretrain_steps": 10, "copy_pretrain_lr": 6e-3}}
    summary = build_base_model(cfg, tmp_path, tok_dir, tmp_path / "base")
    assert len(summary["copy_pretrain_loss"]) == 10
    assert all(x > 0 for x in summary["copy_pretrain_loss"])
    assert "did not form induction heads" in capsys.readouterr().err
    assert json.loads((tmp_path / "base" / "sft_summary.json").read_text())["copy_pretrain_loss"] == summary["copy_pretrain_loss"]
    cfg["sft"]["copy_pretrain_steps"] = 0
    assert "copy_pretrain_loss" not in build_base_model(cfg, tmp_path, tok_dir, tmp_path / "base0")
