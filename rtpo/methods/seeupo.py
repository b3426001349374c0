"""SeeUPO: sequence-level, sequential (turn by turn) updates with an importance correction, as its
public code does it (github.com/dy-liang/seeupo_v2: beyondagent/module/trainer/ba_ray_trainer.py,
fit() with algorithm.sequential_update=True, update_order=reverse, adv_updator=seeupo,
special_norm=True, norm_adv_by_std_in_grpo=False; launcher/qwen3_appworld/qwen3-seeupo-appworld.yaml).

Each turn k is its own "agent" (HAPPO-style sequential update), trained on per-turn rows with the
full-history prompt. One training step on a batch of prompts:

  sync; chains = `chains` complete trajectories per prompt (one rollout, no re-rollout)
  W_i = 1                                   accumulated importance weight of trajectory i
  for k = K-1 down to 0:                    (update_order = reverse)
      rows: trajectories that reached turn k; prompt = full_ids up to turn k's action, response =
            the turn-k action, mask all ones
      old   = logprobs of the rows under the current training weights, before this update (verl
              recomputes old_log_prob right before every update_actor)
      A_i   = r_i - mean over the prompt's rows at turn k (no std), then whitened over all rows of
              turn k and clamped to [-3, 3] (special_norm) -> seeupo_advantages; times W_i
      one PPO update on the turn-k rows
      new   = logprobs of the rows after the update
      s_i   = exp(mean over tokens of (new - old)), clipped to [0.8, 1.2] (adv_clip_ratio 0.2);
      W_i   = clip(W_i * s_i, 0.8, 1.2)     (update_ratios -> rtpo.methods.advantages.seeupo_ratio_update)
  trajectories without turn k keep W_i (their sequence ratio is 1).

Instrumentation: the rows carry the rollout-time logprobs, as every method's; the engine takes PPO's
`old` from the training weights before the update (UpdateConfig.old = "recompute", the rule of every
method) and measures the mismatch against the rollout-time ones: the psi mismatch (full-history
training contexts vs the rollout's c_k) plus the drift from the later turns already updated in this
step.

Not reproduced: the public config trains with loss_mode=gspo (a sequence-level clipped ratio) and
loss_agg_mode=seq-mean-token-mean; the engine's loss is the token-level clipped surrogate with
token-mean aggregation, the same for every method here.
"""

from __future__ import annotations

from typing import Any

import torch

from rtpo.engine.base import Row
from rtpo.envs.base import Task
from rtpo.instrument import StepLog
from rtpo.methods.advantages import seeupo_advantages, seeupo_ratio_update
from rtpo.methods.base import Method, cfg_float, cfg_int


class SeeUPO(Method):
    """cfg keys: chains (16 in the paper), adv_clamp (3.0), ratio_clip ([0.8, 1.2]: the bounds of
    each sequence ratio and of the running weight; adv_clip_ratio 0.2 in the public config),
    update_order ("reverse" | "sequential").

    After a step, `last_groups[i]` holds the trajectories of prompt i and `last_weights` the final
    importance weight of each trajectory (for inspection and tests).
    """

    name = "seeupo"

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        c, n = self.cfg, self.name
        self.n_chains = cfg_int(c, "chains", n)
        self.clamp = cfg_float(c, "adv_clamp", n)
        bounds = c["ratio_clip"]
        try:
            self.low, self.high = (float(x) for x in bounds)
        except (TypeError, ValueError):
            raise ValueError(f"seeupo.ratio_clip must be two numbers [low, high], got {bounds!r}") from None
        if not 0.0 < self.low <= 1.0 <= self.high:
            raise ValueError(f"seeupo.ratio_clip must satisfy 0 < low <= 1 <= high, got {bounds!r}")
        self.order = str(c["update_order"])
        if self.order not in ("reverse", "sequential"):
            raise ValueError(f"seeupo.update_order must be 'reverse' or 'sequential', got {self.order!r}")

    def step(self, tasks: list[Task], step: int) -> dict[str, Any]:
        log = StepLog()
        self.sync(log)
        trajs = self.chains(tasks, self.n_chains, "chain", log)
        keys = [i for i in range(len(tasks)) for _ in range(self.n_chains)]
        rewards = torch.tensor([t.reward for t in trajs], dtype=torch.float)
        K = max((len(t.turns) for t in trajs), default=0)
        order = list(reversed(range(K))) if self.order == "reverse" else list(range(K))
        weights = torch.ones(len(trajs))
        max_ctx = self.engine.max_context
        self.last_groups = [trajs[i * self.n_chains:(i + 1) * self.n_chains] for i in range(len(tasks))]

        for stage, k in enumerate(order):
            with log.phase("update"):
                at, prompts, actions, rollout_lp = [], [], [], []
                for i, t in enumerate(trajs):
                    if len(t.turns) <= k:
                        continue
                    start = t.action_spans[k][0]
                    keep = max_ctx - start  # the engine accepts prompt + action[:-1] < max_context
                    if keep <= 0:
                        continue  # the full-history prompt alone is over-long: no row (verl filters such prompts)
                    at.append(i)
                    prompts.append(t.full_ids[:start])
                    actions.append(t.turns[k].action_ids[:keep])
                    rollout_lp.append(t.turns[k].logprobs[:keep])
                if not at:
                    continue
                old = self.engine.logprobs(prompts, actions, self.temperature)
                idx = torch.tensor(at)
                adv = seeupo_advantages(rewards[idx], [keys[i] for i in at], clamp=self.clamp) * weights[idx]
                advs = [float(a) for a in adv]
                rows = [Row(p, a, r, [x] * len(a), [1] * len(a), group=f"{trajs[i].task.id}/{keys[i]}/{k}",
                            turns=[k] * len(a))
                        for i, p, a, r, x in zip(at, prompts, actions, rollout_lp, advs)]
                stats = self.engine.update(rows, self.update_cfg, self.temperature)
                log.add_update(stats, advs, k=k, groups=len({keys[i] for i in at}))
                if stage < len(order) - 1:  # the weight is only used by the turns still to come
                    new = self.engine.logprobs(prompts, actions, self.temperature)
                    seq = torch.tensor([sum(b - a for a, b in zip(o, nw)) / max(1, len(o)) for o, nw in zip(old, new)])
                    weights[idx] = seeupo_ratio_update(weights[idx], seq, self.low, self.high)
        self.last_weights = weights
        return log.record(trajs, len(tasks))

