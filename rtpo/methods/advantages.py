"""Advantage estimators as pure functions: one implementation for the local engine and the verl plugin.

Each takes per-sample scalar scores and group keys and returns per-sample advantages. Shapes:
scores (N,) float tensor; keys: length-N sequences of hashables.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence

import torch


def _groups(keys: Sequence[Hashable]) -> dict[Hashable, list[int]]:
    g: dict[Hashable, list[int]] = defaultdict(list)
    for i, k in enumerate(keys):
        g[k].append(i)
    return g


def sibling_advantages(scores: torch.Tensor, keys: Sequence[Hashable], norm_by_std: bool = False,
                       leave_one_out: bool = False, eps: float = 1e-6) -> torch.Tensor:
    """RTPO's state-matched sibling advantage (paper §3.2, Eq. A_i = R_i - mean_j R_j).

    keys: the boundary-state id S_k of each sample; a group is the trunk's turn-k action plus its
    siblings, all forked from the same S_k. The baseline is the group mean including the sample
    (finite-group factor (G-1)/G, §C.3) or, with leave_one_out, the mean of the other siblings
    (unbiased; scaled by G/(G-1) relative to the former). Singleton groups get advantage 0.
    All-equal returns give exactly 0 and never NaN.
    """
    scores = scores.float()
    adv = torch.zeros_like(scores)
    for idx in _groups(keys).values():
        if len(idx) < 2:
            continue
        s = scores[idx]
        if leave_one_out:
            a = (s - (s.sum() - s) / (len(idx) - 1))
        else:
            a = s - s.mean()
        if norm_by_std:
            a = a / (s.std() + eps)
        adv[idx] = a
    return adv


def grpo_outcome_advantages(scores: torch.Tensor, keys: Sequence[Hashable], norm_by_std: bool = True,
                            eps: float = 1e-6) -> torch.Tensor:
    """GRPO outcome advantage exactly as verl's compute_grpo_outcome_advantage.

    Per prompt group: A = (s - mean) / (std + eps) with the unbiased std (torch.std); a singleton
    group uses mean 0 and std 1.
    """
    scores = scores.float()
    adv = torch.empty_like(scores)
    for idx in _groups(keys).values():
        s = scores[idx]
        if len(idx) == 1:
            mean, std = torch.tensor(0.0), torch.tensor(1.0)
        else:
            mean, std = s.mean(), s.std()
        adv[idx] = (s - mean) / (std + eps) if norm_by_std else (s - mean)
    return adv


def tree_grpo_advantages(scores: torch.Tensor, tree_keys: Sequence[Hashable], prompt_keys: Sequence[Hashable],
                         eps: float = 1e-6) -> torch.Tensor:
    """Tree-GRPO: A = A_intra (within a tree) + A_inter (within the prompt's forest), each (r-mean)/(std+eps)."""
    return (grpo_outcome_advantages(scores, tree_keys, eps=eps)
            + grpo_outcome_advantages(scores, prompt_keys, eps=eps))


def seeupo_advantages(scores: torch.Tensor, keys: Sequence[Hashable], clamp: float = 3.0,
                      eps: float = 1e-6) -> torch.Tensor:
    """SeeUPO's per-turn advantage before its importance product: r - group mean, whitened over the
    turn batch (zero mean, unit std), clamped to [-clamp, clamp]."""
    a = grpo_outcome_advantages(scores, keys, norm_by_std=False)
    if a.numel() > 1:
        a = (a - a.mean()) / (a.std() + eps)
    return a.clamp(-clamp, clamp)


def clipped_ratio_product(seq_log_ratios: torch.Tensor, low: float = 0.8, high: float = 1.2) -> torch.Tensor:
    """SeeUPO's importance weight of later turns: prod_j clip(r_j, low, high), clipped to [low, high].

    seq_log_ratios: (N, J) log sequence ratios of the J later turns (0 where absent) -> (N,).
    """
    r = torch.exp(seq_log_ratios.clamp(-20, 20)).clamp(low, high)
    return r.prod(dim=-1).clamp(low, high)


def seeupo_ratio_update(ratios: torch.Tensor, seq_log_ratios: torch.Tensor, low: float = 0.8,
                        high: float = 1.2) -> torch.Tensor:
    """SeeUPO's accumulated importance weight after one more turn's update (its public
    `update_ratios`, github.com/dy-liang/seeupo_v2 beyondagent/module/trainer/ba_ray_trainer.py).

    ratios:         (N,) the weight accumulated over the turns updated so far (ones at the start)
    seq_log_ratios: (N,) per-token mean of log pi_after / pi_before on the just-updated turn's action
                    (GSPO's length-normalised sequence ratio; 0 for a trajectory without that turn)
    returns (N,):   clip(ratios * clip(exp(clamp(seq_log_ratios, -10, 10)), low, high), low, high)

    The running product is clipped after every turn, so it differs from `clipped_ratio_product`
    (one clip of the whole product) once the bounds are hit; both stay in [low, high].
    """
    r = torch.exp(seq_log_ratios.float().clamp(-10.0, 10.0)).clamp(low, high)
    return (ratios.float() * r).clamp(low, high)
