"""GRPO on multi-turn trajectories, the way verl trains it (Shao et al. 2024; verl core_algos.py).

One training step on a batch of prompts:

  sync; chains = `chains` independent complete trajectories per prompt under the current policy
  score   s_i = the trajectory's terminal reward (verl sums the token-level rewards; ours are sparse)
  A_i     = (s_i - mean_group) / (std_group + 1e-6), group = the prompt's chains, unbiased std;
            a singleton group has mean 0 and std 1   (verl's compute_grpo_outcome_advantage)
  one Row per trajectory, flattened as verl's multi-turn agent loop does:
      prompt   = the initial context (system + user), response = everything after it: every turn's
                 action, its turn close, the tool results and the next generation prompt
      mask     = 1 on action tokens, 0 on observation / template tokens (verl's response_mask)
      A_i broadcast to every response token; the row carries the rollout-time logprobs
  one PPO update (clip 0.2, dual clip 3, token-mean, KL as a loss term: UpdateConfig / the engine);
      PPO's old = the training weights' logprobs of the row before the update (verl's default,
      UpdateConfig.old = "recompute", the rule of every method)

The flattened row is scored under the *full concatenated history*. When the rollout sampled turn k
from c_k = psi(S_k) with psi != full (qwen3 strips earlier <think> blocks, truncate:N drops old
turns), training scores the same action tokens under a different context than the one they were
sampled from: the rollout-training mismatch of paper §2.1, measured before the update on the trained
tokens (engine.base.Mismatch: the geometric-mean ratio, |delta logp|, KL(rollout || train), the share
beyond the clip range; `ratio_mean` has expectation 1 whatever the mismatch). Under psi = full the two contexts are the same token ids and
the ratio is 1.

The flattened row (`rtpo.methods.base.flatten_row`) is Tree-GRPO's and ARPO's too.

GRPO on its own contexts (`train_rows: turn`, this artifact's control ablations.turn_rows, not a baseline):
the same chains and advantages, but one Row per turn, prompt = c_k (the ids turn k was sampled from),
response = turn k's action, mask all ones, A_i on every token, as RTPO's rows are built. The loss is the same
token mean over the same action tokens, so only the context each action is scored under changes: the
rollout-training mismatch is gone (ratio 1 up to float rounding, as RTPO's) while the information the policy
acted on, the rollouts and the trajectory-level credit stay GRPO's. The rollout still bounds the whole
trajectory (`rows = "flat"`), so a seed's chains are GRPO's chains.

Where this file runs: on the local engine (the CPU default, `engine: local`) and on VerlEngine for the
trainer mode rtpo_engine_sync. At paper scale GRPO does not run through it: the launcher selects
verl's own sync trainer (rtpo_chain_sync) with verl's estimator, algorithm.adv_estimator=grpo
(verl core_algos.compute_grpo_outcome_advantage, the same arithmetic as `advantages` here), on the
flat rows of rtpo's agent loop (rtpo.verl_ext.launch, docs/verl.md).

GRPO-TIS (`grpo_tis`): GRPO with verl's rollout correction in decoupled mode, token level
(algorithm.rollout_correction: rollout_is = token, rollout_is_threshold = 2.0; Liu et al. 2025, "When
Speed Kills Stability"): every token's policy-gradient loss is weighted by
min(pi_old(a|full history) / pi_rollout(a|c_k), threshold), with pi_old the training weights before the
update. It corrects exactly the rollout-training mismatch above, which the paper does not compare with.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from rtpo.engine.base import Row
from rtpo.envs.base import Task
from rtpo.instrument import StepLog
from rtpo.methods.advantages import grpo_outcome_advantages
from rtpo.methods.base import Method, cfg_int, flatten_row
from rtpo.rollout import Trajectory


class GRPO(Method):
    """cfg keys: chains (trajectories per prompt; 16 in the paper), adv_norm_std (divide by the
    group std, verl's norm_adv_by_std_in_grpo; default True), train_rows ("flat": one row per trajectory
    under the full history, verl's; "turn": one row per turn under its sampled context c_k, the control).

    After a step, `last_groups[i]` holds the trajectories of prompt i (for inspection and tests).
    """

    name = "grpo"

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.n_chains = cfg_int(self.cfg, "chains", self.name)
        self.norm_std = bool(self.cfg["adv_norm_std"])
        self.train_rows = str(self.cfg.get("train_rows", "flat"))
        if self.train_rows not in ("flat", "turn"):
            raise ValueError(f"{self.name}.train_rows must be 'flat' or 'turn', got {self.train_rows!r}")

    def step(self, tasks: list[Task], step: int) -> dict[str, Any]:
        log = StepLog()
        self.sync(log)  # verl's sync trainer: every step samples with the latest weights
        chains = self.chains(tasks, self.n_chains, "chain", log)  # grouped task by task
        keys = [i for i in range(len(tasks)) for _ in range(self.n_chains)]
        self.last_groups = [chains[i * self.n_chains:(i + 1) * self.n_chains] for i in range(len(tasks))]
        with log.phase("update"):
            adv = grpo_outcome_advantages(torch.tensor([t.reward for t in chains], dtype=torch.float),
                                          keys, norm_by_std=self.norm_std)
            advs = [float(a) for a in adv]
            if self.train_rows == "turn":
                rows = [r for j, (t, a) in enumerate(zip(chains, advs))
                        for r in turn_rows(t, a, group=f"{t.task.id}/{keys[j]}")]
            else:
                rows = [flatten_row(t, a, self.engine.max_context, group=f"{t.task.id}/{keys[j]}")
                        for j, (t, a) in enumerate(zip(chains, advs))]
            stats = self.engine.update(rows, self.update_cfg, self.temperature)
            log.add_update(stats, advs)
        return log.record(chains, len(tasks))


def turn_rows(traj: Trajectory, advantage: float, group: str = "") -> list[Row]:
    """One Row per generated turn k of a trajectory: prompt = c_k, the exact ids turn k was sampled from,
    response = its action ids, old = their rollout logprobs, mask all ones, `advantage` on every token."""
    return [Row(turn.context_ids, turn.action_ids, turn.logprobs, [float(advantage)] * len(turn.action_ids),
                [1] * len(turn.action_ids), group=group, turns=[turn.k] * len(turn.action_ids))
            for turn in traj.generated_turns if turn.action_ids]


class GRPOTIS(GRPO):
    """GRPO with token-level truncated importance sampling on the rollout-training ratio (module
    docstring); the threshold is train.rollout_is_threshold (verl's default 2.0)."""

    name = "grpo_tis"

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.update_cfg = dataclasses.replace(self.update_cfg, rollout_is="token")
