"""The shared advantage estimators against the public implementations they reproduce.

GRPO and Tree-GRPO are checked against the real verl 0.9.1 `compute_grpo_outcome_advantage`
(Tree-GRPO's adv_estimator=tree calls it twice: index=uid and index=tree_uid, and sums). SeeUPO's
group advantage and running importance weight are checked against transcriptions of its public
code (github.com/dy-liang/seeupo_v2, beyondagent/module/trainer/ba_ray_trainer.py:
_compute_group_relative_advantages_from_scores with special_norm, and update_ratios), since that
repository is not an installable package.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from rtpo.methods.advantages import (clipped_ratio_product, grpo_outcome_advantages, seeupo_advantages,
                                     seeupo_ratio_update, tree_grpo_advantages)


def _verl_grpo():
    from verl.trainer.ppo import core_algos

    return core_algos.compute_grpo_outcome_advantage


def _random_groups(rng: random.Random, n_groups: int) -> tuple[list[float], list[str]]:
    """Scores and group ids: group sizes 1..6 (singletons included), binary or continuous rewards."""
    scores, ids = [], []
    for g in range(n_groups):
        size = rng.choice([1, 1, 2, 3, 4, 6])
        binary = rng.random() < 0.5
        for _ in range(size):
            scores.append(float(rng.random() < 0.4) if binary else rng.uniform(-2, 3))
            ids.append(f"uid-{g}")
    order = list(range(len(scores)))
    rng.shuffle(order)  # groups need not be contiguous
    return [scores[i] for i in order], [ids[i] for i in order]


def _verl_call(fn, scores: list[float], index: list[str], norm: bool, T: int = 5, seed: int = 0) -> torch.Tensor:
    """verl's advantage of each row (it sums token-level rewards: put the score on one random token)."""
    g = torch.Generator().manual_seed(seed)
    n = len(scores)
    rewards = torch.zeros(n, T)
    pos = torch.randint(0, T, (n,), generator=g)
    rewards[torch.arange(n), pos] = torch.tensor(scores)
    mask = torch.ones(n, T)
    adv, ret = fn(token_level_rewards=rewards, response_mask=mask, index=np.array(index, dtype=object),
                  norm_adv_by_std_in_grpo=norm)
    assert torch.allclose(adv, adv[:, :1].expand_as(adv))  # broadcast to every token
    return adv[:, 0]


@pytest.mark.parametrize("norm", [True, False])
def test_grpo_matches_verl_on_random_groups(norm):
    fn = _verl_grpo()
    rng = random.Random(1)
    for trial in range(20):
        scores, ids = _random_groups(rng, rng.randint(1, 8))
        ours = grpo_outcome_advantages(torch.tensor(scores), ids, norm_by_std=norm)
        ref = _verl_call(fn, scores, ids, norm, seed=trial)
        assert torch.allclose(ours, ref, atol=1e-5, rtol=1e-5), (trial, scores, ids, ours, ref)


def test_grpo_singleton_and_constant_groups():
    adv = grpo_outcome_advantages(torch.tensor([0.7, 1.0, 1.0, 1.0]), ["a", "b", "b", "b"])
    assert adv[0] == pytest.approx(0.7 / (1 + 1e-6))  # singleton: mean 0, std 1 (verl)
    assert torch.equal(adv[1:], torch.zeros(3))  # all equal: exactly 0, never NaN


def test_tree_grpo_matches_public_tree_estimator():
    """adv_estimator=tree in AMAP-ML/Tree-GRPO ray_trainer_ts.py: grpo(index=uid) + grpo(index=tree_uid)."""
    fn = _verl_grpo()
    rng = random.Random(2)
    for trial in range(15):
        scores, prompt_ids, tree_ids = [], [], []
        for p in range(rng.randint(1, 4)):
            for m in range(rng.randint(1, 3)):
                for _ in range(rng.randint(1, 4)):
                    scores.append(float(rng.random() < 0.5) if trial % 2 else rng.uniform(0, 1))
                    prompt_ids.append(f"p{p}")
                    tree_ids.append(f"p{p}-t{m}")
        ours = tree_grpo_advantages(torch.tensor(scores), tree_ids, prompt_ids)
        ref = _verl_call(fn, scores, prompt_ids, True, seed=trial) + _verl_call(fn, scores, tree_ids, True, seed=trial + 99)
        assert torch.allclose(ours, ref, atol=1e-5, rtol=1e-5), (trial, ours, ref)


def _seeupo_reference(scores: torch.Tensor, index: list[str], eps: float = 1e-6) -> torch.Tensor:
    """SeeUPO's _compute_group_relative_advantages_from_scores(norm_adv_by_std_in_grpo=False,
    special_norm=True), every row active: r - group mean (singleton: mean 0), then whitened over
    the batch (divide only when std > 1e-6) and clamped to [-3, 3]."""
    scores = scores.clone().float()
    groups: dict[str, list[int]] = {}
    for i, k in enumerate(index):
        groups.setdefault(k, []).append(i)
    out = scores.clone()
    for idx in groups.values():
        mean = torch.tensor(0.0) if len(idx) == 1 else scores[idx].mean()
        out[idx] = scores[idx] - mean
    if torch.std(out) > 1e-6:
        out = (out - out.mean()) / torch.std(out)
    else:
        out = out - out.mean()
    return out.clamp(-3, 3)


def test_seeupo_advantages_match_public_special_norm():
    rng = random.Random(3)
    for trial in range(20):
        scores, ids = _random_groups(rng, rng.randint(2, 8))
        if len(scores) < 2:
            continue
        ours = seeupo_advantages(torch.tensor(scores), ids)
        ref = _seeupo_reference(torch.tensor(scores), ids)
        assert torch.allclose(ours, ref, atol=1e-4), (trial, ours, ref)
        assert float(ours.abs().max()) <= 3.0
    # an outlier is clamped at 3
    a = seeupo_advantages(torch.tensor([0.0] * 20 + [50.0]), ["g"] * 21)
    assert float(a.max()) == pytest.approx(3.0)
    # all-equal returns: exactly zero
    assert torch.equal(seeupo_advantages(torch.ones(6), ["a"] * 3 + ["b"] * 3), torch.zeros(6))


def _update_ratios_reference(ratios, last_lp, now_lp, mask, low=0.2, high=0.2):
    """SeeUPO's update_ratios, transcribed (token tensors (N, T) with a response mask)."""
    nkl = now_lp - last_lp
    seq_len = mask.sum(-1).clamp(min=1)
    log_seq = (torch.sum(nkl * mask, dim=-1) / seq_len).clamp(-10.0, 10.0)
    s = torch.exp(log_seq).clamp(1 - low, 1 + high)
    upd = ratios * s if ratios is not None else s
    return upd.clamp(1 - low, 1 + high)


def test_seeupo_ratio_update_matches_public_update_ratios():
    g = torch.Generator().manual_seed(0)
    N, T = 12, 7
    w_ours, w_ref = torch.ones(N), None
    for turn in range(5):
        last = -torch.rand(N, T, generator=g) * 3
        now = last + torch.randn(N, T, generator=g) * 0.3
        mask = (torch.rand(N, T, generator=g) < 0.8).float()
        mask[0] = 0.0  # a trajectory without this turn: ratio 1
        seq = (torch.sum((now - last) * mask, -1) / mask.sum(-1).clamp(min=1))
        w_ours = seeupo_ratio_update(w_ours, seq)
        w_ref = _update_ratios_reference(w_ref, last, now, mask)
        assert torch.allclose(w_ours, w_ref, atol=1e-6)
        assert float(w_ours.min()) >= 0.8 - 1e-7 and float(w_ours.max()) <= 1.2 + 1e-7
    assert not torch.allclose(w_ours, torch.ones(N))  # the test data did move the weights


def test_running_clip_differs_from_one_clip_of_the_product():
    """Documented difference: clip after every turn (SeeUPO's code) vs one clip of the product."""
    logs = torch.log(torch.tensor([[1.2, 1.2, 0.8]]))
    w = torch.ones(1)
    for j in range(3):
        w = seeupo_ratio_update(w, logs[:, j])
    assert float(w) == pytest.approx(0.96)  # 1.2 -> clip(1.44) = 1.2 -> 0.96
    assert float(clipped_ratio_product(logs)) == pytest.approx(1.152)
    big = clipped_ratio_product(torch.randn(50, 6) * 3)
    assert float(big.min()) >= 0.8 - 1e-7 and float(big.max()) <= 1.2 + 1e-7
