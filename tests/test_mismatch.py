"""The rollout-training mismatch statistics (rtpo.engine.base.Mismatch) and PPO's `old` rule.

`ratio_mean`, the mean of exp(logp_train - logp_rollout) over tokens the rollout policy sampled, has
expectation exactly 1 for any mismatch (E_q[p/q] = 1): it cannot show one. The geometric-mean ratio
exp(mean(logp_train - logp_rollout)) = exp(-KL(q || p) estimate) can. Planted here: tokens sampled
after a truncated context (psi = truncate at rollout) and scored after the full one (training).
"""

from __future__ import annotations

import math

import pytest
import torch

from rtpo.engine.base import Mismatch, Row, SamplingParams, UpdateConfig
from tests.helpers import tiny

N_ROWS, NEW = 96, 24


@pytest.fixture(scope="module")
def peaked():
    """A tiny engine whose next-token distributions depend on the whole context (a random model's are
    nearly uniform and see little beyond the last token): sharp attention (q, k x 8) that moves the
    residual stream (v, o x 16), and a sharper tied output head (embeddings x 4)."""
    e = tiny.engine(seed=3, reference=False)
    with torch.no_grad():
        e.model.get_input_embeddings().weight.mul_(4.0)
        for layer in e.model.model.layers:
            a = layer.self_attn
            a.q_proj.weight.mul_(8.0), a.k_proj.weight.mul_(8.0), a.v_proj.weight.mul_(16.0), a.o_proj.weight.mul_(16.0)
    e.sync()
    return e


def planted_rows(e, full: bool) -> list[Row]:
    """Rows sampled after the last 6 tokens of a 48-token context (the rollout's c_k) and trained after
    the whole context (full history) -- or after the same 6 tokens (full=False: no mismatch)."""
    g = torch.Generator().manual_seed(11)
    vocab = len(e.tokenizer) - 8
    rows = []
    for i in range(N_ROWS):
        history = torch.randint(1, vocab, (48,), generator=g).tolist()
        c_k = history[-6:]
        (comp,) = e.sample([c_k], SamplingParams(max_new_tokens=NEW, stop_at_tool_call=False), seeds=[1000 + i])
        prompt = history if full else c_k
        rows.append(Row(prompt, comp.ids, comp.logprobs, [0.0] * len(comp.ids), [1] * len(comp.ids),
                        turns=[i % 2] * len(comp.ids)))
    return rows


def token_log_ratios(e, rows: list[Row]) -> torch.Tensor:
    train = e.logprobs([r.prompt_ids for r in rows], [r.response_ids for r in rows])
    return torch.tensor([a - b for r, t in zip(rows, train) for a, b in zip(t, r.old_logprobs)], dtype=torch.float64)


def test_geometric_ratio_moves_with_a_planted_mismatch_while_ratio_mean_does_not(peaked):
    e = peaked
    cfg = UpdateConfig(lr=0.0, weight_decay=0.0)   # measure only: no weight moves
    planted, aligned = planted_rows(e, full=True), planted_rows(e, full=False)
    d = token_log_ratios(e, planted)
    n = d.numel()
    r = torch.exp(d)
    t_log = float(d.mean() / (d.std() / math.sqrt(n)))        # how far the mean log-ratio is from 0, in SEs
    t_ratio = float((r.mean() - 1.0) / (r.std() / math.sqrt(n)))
    assert t_log < -8, t_log                  # the mismatch is there: mean log p/q clearly below 0
    assert abs(t_ratio) < 3, t_ratio          # ... and the mean ratio cannot tell (E_q[p/q] = 1)

    s = e.update(planted, cfg)
    m = sum(s.mismatch.values(), Mismatch()).summary()
    assert m["tokens"] == n == s.trained_tokens
    assert m["geo_ratio"] == pytest.approx(math.exp(float(d.mean())), rel=1e-5) and m["geo_ratio"] < 0.9
    assert m["ratio_mean"] == pytest.approx(float(r.mean()), rel=1e-5) == pytest.approx(s.ratio_mean, rel=1e-9)
    assert m["abs_dlogp"] == pytest.approx(float(d.abs().mean()), rel=1e-5)
    assert m["kl"] == pytest.approx(float((r - 1 - d).mean()), rel=1e-5) and m["kl"] > 0.05
    assert m["clip_share"] == pytest.approx(float(((r < 0.8) | (r > 1.2)).double().mean()), abs=1e-9)
    assert set(s.mismatch) == {0, 1} and sum(x.tokens for x in s.mismatch.values()) == n  # by turn index

    a = sum(e.update(aligned, cfg).mismatch.values(), Mismatch()).summary()
    assert abs(math.log(a["geo_ratio"])) < 1e-5 and a["clip_share"] == 0.0 and a["kl"] < 1e-9  # same context: none


def test_old_is_recomputed_for_every_method_and_tis_weights_by_the_mismatch(peaked):
    """UpdateConfig.old: "recompute" (default, verl's) puts the training weights' logprobs in PPO's
    ratio, so a mismatch is not clipped away: with the mismatch planted, the gradient per token is
    the unclipped -A; with "rollout" the clip zeroes the gradient of tokens outside the range.
    rollout_is="token" (GRPO-TIS) scales each token's gradient by min(pi_old / pi_rollout, 2)."""
    e = peaked
    rows = planted_rows(e, full=True)[:16]
    rows = [Row(r.prompt_ids, r.response_ids, r.old_logprobs, [1.0] * len(r.response_ids), r.mask) for r in rows]
    d = token_log_ratios(e, rows)
    ratio = torch.exp(d)
    n = float(d.numel())
    g_re = torch.tensor([x for g in e.token_gradients(rows, UpdateConfig()) for x in g], dtype=torch.float64)
    assert torch.allclose(g_re, torch.full_like(g_re, -1.0 / n), rtol=1e-5)   # ratio 1: d(-A r)/d logp = -A/n
    g_ro = torch.tensor([x for g in e.token_gradients(rows, UpdateConfig(old="rollout")) for x in g], dtype=torch.float64)
    above = ratio > 1.2   # A > 0: the clip is active above 1 + eps, the gradient there is 0
    assert above.any() and torch.all(g_ro[above] == 0) and torch.allclose(g_ro[~above], -ratio[~above] / n, rtol=1e-4)
    with pytest.raises(ValueError, match="old = recompute"):
        e.update(rows, UpdateConfig(old="rollout", rollout_is="token", lr=0.0))
    w = torch.exp(d).clamp(max=2.0)
    from rtpo import loss as L

    assert torch.allclose(L.truncated_is_weights(d.float(), torch.zeros_like(d).float(), 2.0).double(), w, rtol=1e-6)
