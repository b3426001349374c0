"""Policy-gradient losses as pure tensor functions (the conventions of verl's core_algos.py).

Shapes: B = rows in a (micro-)batch, T = response tokens (right-padded). Every function takes a
float `mask` of shape (B, T) with 1 on tokens that are trained and 0 elsewhere (padding, tool and
observation tokens, shared prefixes, continuation tokens).
"""

from __future__ import annotations

import torch


def masked_sum(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum()


def ppo_clip_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip_c: float = 3.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token clipped PPO surrogate with dual clip (Ye et al. 2020), as verl's compute_policy_loss.

    logp, old_logp, advantages: (B, T). Returns (loss (B, T), clipped (B, T) bool: the ratio clip was active) where
      ratio = exp(logp - old_logp)
      l = max(-A * ratio, -A * clip(ratio, 1 - clip_low, 1 + clip_high))
      for A < 0: l = min(l, -A * dual_clip_c)      (bounds the loss of very large ratios)
    """
    neg_kl = (logp - old_logp).clamp(-20.0, 20.0)
    ratio = torch.exp(neg_kl)
    pg1 = -advantages * ratio
    pg2 = -advantages * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    clipped_loss = torch.maximum(pg1, pg2)
    dual = torch.minimum(clipped_loss, -advantages * dual_clip_c)
    loss = torch.where(advantages < 0, dual, clipped_loss)
    return loss, pg2 > pg1


def low_var_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k3 estimator of KL(pi || ref) on tokens sampled from pi, clamped to [-10, 10] (verl's low_var_kl).

    kl = exp(ref - logp) - (ref - logp) - 1  >= 0
    """
    d = (ref_logp - logp).clamp(-20.0, 20.0)
    return (torch.exp(d) - d - 1.0).clamp(-10.0, 10.0)


def kl_rollout_train(rollout_logp: torch.Tensor, train_logp: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(rollout || train) on tokens sampled by the rollout policy.

    With r = p_train / p_rollout: k3 = (r - 1) - log r >= 0, unbiased for KL(rollout || train).
    """
    log_r = (train_logp - rollout_logp).clamp(-20.0, 20.0)
    return torch.exp(log_r) - 1.0 - log_r


def truncated_is_weights(old_logp: torch.Tensor, rollout_logp: torch.Tensor, threshold: float) -> torch.Tensor:
    """Token-level truncated importance weights (verl's decoupled rollout correction, rollout_is="token"):
    min(pi_old / pi_rollout, threshold), detached. old_logp: the training weights' logprobs before the
    update; rollout_logp: the logprobs the tokens were sampled with. (B, T) -> (B, T)."""
    return torch.exp((old_logp - rollout_logp).clamp(-20.0, 20.0)).clamp(max=threshold).detach()
