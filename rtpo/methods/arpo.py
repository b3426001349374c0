"""ARPO: Agentic Reinforced Policy Optimization, entropy-guided branching after tool calls
(Dong et al. 2025), as its public rollout does it (github.com/dongguanting/ARPO:
ARPO/verl_arpo_entropy/verl/workers/rollout/vllm_rollout/vllm_rollout_with_tools.py,
vLLMRolloutWithTools.generate_sequences; scripts/ARPO_*_1node.sh for the settings).

The public rollout advances all of a batch's sequences one generation segment (= one turn here)
at a time. After every step, for each prompt:

  * its *active* sequences are those whose turn just made a tool call and go on (the tool result is
    appended);
  * for each active sequence in order, while the prompt holds fewer than M (`total`) sequences, up
    to beam_size - 1 branch attempts: with u ~ U[0, 1) and
        dH = H(this turn) - H(the sequence's first generated turn)
    branch iff clip(u - beta * dH, 0, 1) <= tau, i.e. with probability clip(tau + beta * dH, 0, 1)
    (tau = branch_probability 0.5, beta = entropy_weight 0.2). A branch copies the sequence so far,
    tool result included, and continues from there (Start(source, k = next turn));
  * a prompt with no active sequence and fewer than M gets one fresh sequence from the prompt.
The step loop ends when no sequence is active: every prompt then holds exactly M trajectories
(N = `initial` first chains, 8 in the paper, M = 16), never more.

H of a turn = the entropy of its first <= 20 generated tokens normalised by log|V|: ARPO sums over
those tokens -sum p log p of the top-10 returned logprobs (vLLM logprobs=10). Our engine reports
the mean full-distribution normalised entropy of the first `entropy_tokens` tokens
(Completion.entropy); entropy_agg = "sum" (default) multiplies it by the number of tokens it
covers, which reproduces ARPO's sum, over the full distribution instead of the top 10.

Emulation of the step loop: each trajectory is rolled out to termination as soon as it starts
(the policy does not change during the rollout, so its turns are the ones the public loop would
sample), and the branching decisions are replayed in the public loop's order: a trajectory born at
step b (its first generated turn is sampled at step b) generates its turn start_k + j at step b + j.

Training: plain GRPO advantage over the prompt's M trajectories (adv_estimator=grpo), flattened
rows as GRPO. A branch's row holds its copied prefix too, trained again (the public code copies
the result mask with the prefix); shared_prefix = "once" masks it instead.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from typing import Any

import torch

from rtpo.envs.base import Task
from rtpo.instrument import StepLog
from rtpo.methods.advantages import grpo_outcome_advantages
from rtpo.methods.base import Method, cfg_float, cfg_int, flatten_row
from rtpo.rollout import Roller, Start, Trajectory, Turn

SHARED_PREFIX_MODES = ("every_row", "once")


def branch_probability(dH: float, tau: float, beta: float) -> float:
    """P(branch) = clip(tau + beta * dH, 0, 1): the probability of ARPO's test clip(u - beta*dH, 0, 1) <= tau."""
    return min(1.0, max(0.0, tau + beta * dH))


def should_branch(u: float, dH: float, tau: float, beta: float) -> bool:
    """ARPO's test, verbatim: prob = clip(u - beta * dH, 0, 1); branch unless prob > tau."""
    return not (min(1.0, max(0.0, u - beta * dH)) > tau)


@dataclass
class _Seq:
    traj: Trajectory
    born: int   # the step at which its first generated turn (turn start_k) is sampled

    def turn_at(self, step: int) -> int | None:
        """Index of the turn generated at `step`, or None."""
        j = step - self.born + self.traj.start_k
        return j if self.traj.start_k <= j < len(self.traj.turns) else None


class ARPO(Method):
    """cfg keys: initial (N, 8 in the paper), total (M, 16), tau (0.5), beta (0.2), beam_size (2),
    entropy_tokens (20), entropy_agg ("sum" | "mean"), shared_prefix ("every_row" | "once"), seed.

    After a step, `last_groups[i]` holds the trajectories of prompt i (for inspection and tests).
    """

    name = "arpo"

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        c, n = self.cfg, self.name
        self.N = cfg_int(c, "initial", n)
        self.M = cfg_int(c, "total", n)
        if self.N > self.M:
            raise ValueError(f"arpo.initial ({self.N}) must not exceed arpo.total ({self.M})")
        self.tau = cfg_float(c, "tau", n)
        self.beta = cfg_float(c, "beta", n)
        self.beam = cfg_int(c, "beam_size", n)
        self.entropy_tokens = cfg_int(c, "entropy_tokens", n)
        self.entropy_agg = str(c["entropy_agg"])
        if self.entropy_agg not in ("sum", "mean"):
            raise ValueError(f"arpo.entropy_agg must be 'sum' or 'mean', got {self.entropy_agg!r}")
        self.shared_prefix = str(c["shared_prefix"])
        if self.shared_prefix not in SHARED_PREFIX_MODES:
            raise ValueError(f"arpo.shared_prefix must be one of {SHARED_PREFIX_MODES}, got {self.shared_prefix!r}")
        self.seed = int(c["seed"])
        r = self.roller  # same engine, env, psi and sampling, plus the first-token entropies
        self.entropy_roller = Roller(r.engine, r.env_factory, r.psi,
                                     dataclasses.replace(r.params, entropy_tokens=self.entropy_tokens),
                                     max_context=r.max_context, rows=r.rows)

    def entropy(self, turn: Turn) -> float:
        """H of a turn as ARPO measures it (0 when the engine gave none, as ARPO does for no tokens)."""
        if turn.entropy is None:
            return 0.0
        if self.entropy_agg == "mean":
            return float(turn.entropy)
        return float(turn.entropy) * min(self.entropy_tokens, len(turn.action_ids))

    def step(self, tasks: list[Task], step: int) -> dict[str, Any]:
        log = StepLog()
        rng = random.Random(f"arpo/{self.seed}/{step}")  # resumable: depends on the step only
        self.sync(log)
        P = len(tasks)
        with log.phase("rollout"):
            first = self.entropy_roller.run([Start(t, first_kind="chain", rest_kind="chain")
                                             for t in tasks for _ in range(self.N)])
            log.add_trajectories(first)
            seqs: list[list[_Seq]] = [[_Seq(tr, 0) for tr in first[p * self.N:(p + 1) * self.N]] for p in range(P)]
            counts = [self.N] * P
            t = 0
            while True:
                starts, owners = [], []
                for p in range(P):
                    active = [(s, j) for s in seqs[p] if (j := s.turn_at(t)) is not None and len(s.traj.turns) > j + 1]
                    if active:
                        remaining, created = self.M - counts[p], 0
                        for s, j in active:
                            tries = min(self.beam - 1, remaining - created)
                            if tries <= 0:
                                break
                            dH = self.entropy(s.traj.turns[j]) - self.entropy(s.traj.turns[s.traj.start_k])
                            for _ in range(tries):
                                if should_branch(rng.random(), dH, self.tau, self.beta):
                                    starts.append(Start(tasks[p], source=s.traj, k=j + 1,
                                                        first_kind="branch", rest_kind="branch"))
                                    owners.append(p)
                                    created += 1
                        counts[p] += created
                    elif counts[p] < self.M:  # nothing left to branch from: one fresh chain per step
                        starts.append(Start(tasks[p], first_kind="chain", rest_kind="chain"))
                        owners.append(p)
                        counts[p] += 1
                if starts:
                    new = self.entropy_roller.run(starts)
                    log.add_trajectories(new)
                    for p, tr in zip(owners, new):
                        seqs[p].append(_Seq(tr, t + 1))
                t += 1
                if not any(s.turn_at(t) is not None for group in seqs for s in group):
                    break

        trajs = [s.traj for group in seqs for s in group]
        keys = [p for p, group in enumerate(seqs) for _ in group]
        self.last_groups = [[s.traj for s in group] for group in seqs]
        with log.phase("update"):
            adv = grpo_outcome_advantages(torch.tensor([tr.reward for tr in trajs], dtype=torch.float), keys)
            advs = [float(a) for a in adv]
            rows = [flatten_row(tr, a, self.engine.max_context, self.shared_prefix == "every_row",
                                group=f"{tr.task.id}/{k}")
                    for tr, a, k in zip(trajs, advs, keys)]
            stats = self.engine.update(rows, self.update_cfg, self.temperature)
            log.add_update(stats, advs)
        return log.record(first, P)
