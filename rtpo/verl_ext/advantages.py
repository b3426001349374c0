"""RTPO's advantage estimators registered in verl's registry (`core_algos.register_adv_est`).

Every estimator here calls the pure function in `rtpo.methods.advantages` that the local engine's
methods call, so the two engines share one implementation. verl calls a registered estimator as

    advantages, returns = fn(token_level_rewards=(bs, L) float, response_mask=(bs, L) 0/1,
                             config=<algorithm config>, index=uid (bs,) object array, ...)

(`verl.trainer.ppo.ray_trainer.compute_advantage`, the V1 trainer's `_compute_advantage`). The
per-row score is the summed token-level reward (the terminal reward sits on the last response
token); the advantage is broadcast over the row's response tokens and is 0 where the mask is 0.

rtpo's own trainers call none of them (on `VerlEngine` the methods compute their advantages with the
same functions): they serve verl-native pipelines that train rtpo's rows with verl's own trainer.

Names and what `uid` must carry:
  rtpo_sibling      uid = the boundary-state id S_k: the trunk's turn-k action and its siblings share
                    it (paper §3.2). A = R - mean(group); / (std + eps) when
                    algorithm.norm_adv_by_std_in_grpo is true (RTPO's `adv_norm_std`).
  rtpo_sibling_loo  the same with the leave-one-out baseline (RTPO's `leave_one_out`).
  tree_grpo         uid = "<prompt key>|<tree key>": A = A_intra(tree = the whole uid) + A_inter(prompt =
                    the part before the last "|").
  seeupo            uid = the prompt group of the turn being updated: r - group mean, whitened over
                    the batch, clamped to ±3. SeeUPO's importance product of later turns' ratios is
                    applied by the trainer that updates turns last-to-first, not here.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rtpo.methods.advantages import seeupo_advantages, sibling_advantages, tree_grpo_advantages

TREE_SEP = "|"
ESTIMATORS = ("rtpo_sibling", "rtpo_sibling_loo", "tree_grpo", "seeupo")


def _opt(config: Any, name: str, default: Any) -> Any:
    """Read `name` from verl's algorithm config (a DictConfig, an AlgoConfig dataclass, a dict or None)."""
    if config is None:
        return default
    if hasattr(config, "get"):
        try:
            v = config.get(name, default)
            return default if v is None else v
        except Exception:  # noqa: BLE001 - dataclass configs without a permissive get
            pass
    return getattr(config, name, default)


def _keys(index: Any, n: int, name: str) -> list:
    if index is None:
        raise ValueError(f"adv estimator {name!r} needs the `uid` column (index): none was given")
    keys = list(index.tolist() if isinstance(index, np.ndarray) else index)
    if len(keys) != n:
        raise ValueError(f"adv estimator {name!r}: {len(keys)} uids for {n} rows")
    return keys


def _broadcast(adv: torch.Tensor, response_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(bs,) row advantages -> (bs, L) token advantages (0 outside the mask); returns = advantages."""
    out = adv.to(response_mask.device, torch.float32).unsqueeze(-1) * response_mask.to(torch.float32)
    return out, out


def _scores(token_level_rewards: torch.Tensor) -> torch.Tensor:
    return token_level_rewards.detach().float().sum(dim=-1).cpu()


def rtpo_sibling(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, config: Any = None,
                 index: Any = None, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """RTPO's state-matched sibling advantage over groups keyed by the boundary-state uid."""
    keys = _keys(index, token_level_rewards.shape[0], "rtpo_sibling")
    adv = sibling_advantages(_scores(token_level_rewards), keys,
                             norm_by_std=bool(_opt(config, "norm_adv_by_std_in_grpo", False)))
    return _broadcast(adv, response_mask)


def rtpo_sibling_loo(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, config: Any = None,
                     index: Any = None, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """`rtpo_sibling` with the leave-one-out baseline (mean of the other siblings)."""
    keys = _keys(index, token_level_rewards.shape[0], "rtpo_sibling_loo")
    adv = sibling_advantages(_scores(token_level_rewards), keys, leave_one_out=True,
                             norm_by_std=bool(_opt(config, "norm_adv_by_std_in_grpo", False)))
    return _broadcast(adv, response_mask)


def split_tree_uid(uid: str) -> tuple[str, str]:
    """"<prompt>|<tree>" -> (prompt key, tree key = the whole uid). A uid without "|" (verl's
    padding rows) is its own prompt and tree."""
    s = str(uid)
    if TREE_SEP not in s:
        return s, s
    return s.rsplit(TREE_SEP, 1)[0], s


def tree_grpo(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, config: Any = None,
              index: Any = None, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Tree-GRPO: A_intra over the tree + A_inter over the prompt's forest, both (r - mean) / (std + eps)."""
    keys = _keys(index, token_level_rewards.shape[0], "tree_grpo")
    prompts, trees = zip(*(split_tree_uid(k) for k in keys)) if keys else ((), ())
    adv = tree_grpo_advantages(_scores(token_level_rewards), list(trees), list(prompts))
    return _broadcast(adv, response_mask)


def seeupo(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, config: Any = None,
           index: Any = None, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """SeeUPO's per-turn advantage before its importance product (clamp: 3.0, SeeUPO's default)."""
    keys = _keys(index, token_level_rewards.shape[0], "seeupo")
    adv = seeupo_advantages(_scores(token_level_rewards), keys)
    return _broadcast(adv, response_mask)


def register() -> None:
    """Register the estimators in verl's ADV_ESTIMATOR_REGISTRY (idempotent)."""
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, register_adv_est

    for name, fn in (("rtpo_sibling", rtpo_sibling), ("rtpo_sibling_loo", rtpo_sibling_loo),
                     ("tree_grpo", tree_grpo), ("seeupo", seeupo)):
        if ADV_ESTIMATOR_REGISTRY.get(name) is not fn:
            register_adv_est(name)(fn)
