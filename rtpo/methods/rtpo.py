"""RTPO: Reverse-Turn Policy Optimization (paper §3, pseudocode E.1).

One training step on a batch of prompts:

  trunks = T complete trajectories per prompt under the current policy; each realized turn boundary
           S_k keeps its env snapshot and the exact context ids c_k = psi(S_k)          (§3.1)
  for k = K-1 down to 0:                                  reverse order: turns > k are already updated
      sync (per the sync mode)                            on-policy continuation, IS weight = 1 (§3.3)
      for every trunk that reached S_k:
          restore S_k; sample G-1 sibling actions from exactly c_k; continue each to termination
          the trunk's own turn-k action is the G-th member: its continuation from S_{k+1} is
          regenerated under the current policy too
          A_i = R_i - mean_j R_j  over the G members (options: / std, leave-one-out)     (§3.2)
      PPO update on the turn-k sibling tokens only (PPO's old = their logprobs under the training
      weights before the update, which are the ones recorded at sampling: the same c_k ids and weights).
      Trunk tokens, shared prefixes and continuation tokens get no gradient.

The step is written with an engine-agnostic stage-level API: `stages(trunks)` (K-1 .. 0),
`probe(trunks, k)` (what kl:tau measures), `branches(trunks, ks, log)` (the group members of the
boundaries S_k: siblings and the trunk's regenerated continuation) and `stage(trunks, members, k)`
(returns, advantages, rows). On verl the same `step` runs over `rtpo.verl_ext.engine.VerlEngine`.

Synchronisation modes (G.6): per_stage (default), interval:N (sync every N stages), kl:tau (sync
when KL(inference || train) on the stage's trunk actions exceeds tau). When the inference weights
lag, siblings are sampled by stale weights and the measured ratio honestly differs from 1.

Off-policy variant (F.3): the whole reverse tree (siblings and continuations) is sampled once under
theta_0 right after the trunks; stage k reuses it and reweights each member's return by the clamped
trajectory-level importance weight w = min(prod over its continuation tokens of pi_theta/pi_theta0, c).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from rtpo.engine.base import Row
from rtpo.envs.base import Task
from rtpo.instrument import StepLog
from rtpo.methods.advantages import sibling_advantages
from rtpo.methods.base import Method
from rtpo.methods.cards import parse_sync
from rtpo.rollout import Start, Trajectory

# a member of a sibling group at S_k: (trunk index, its trajectory or None, is_sibling)
Member = tuple[int, Trajectory | None, bool]


@dataclass
class Stage:
    """One stage of the reverse sweep, ready to train: the rows (one per sibling of every boundary S_k)
    and their advantages; `groups` = the trunks that reached S_k."""

    k: int
    rows: list[Row]
    advantages: list[float]
    groups: int


class RTPO(Method):
    name = "rtpo"
    rows = "turn"   # rows (c_k, turn k): the rollout bounds c_k + response only (rtpo.rollout.Roller)

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        c = self.cfg   # the config over the card's defaults (rtpo.methods.base.Method)
        self.trunks = int(c["trunks"])
        self.G = int(c["group_size"])
        if self.G < 2:
            raise ValueError(f"rtpo.group_size must be >= 2 (the trunk action plus at least one sibling), got {self.G}")
        self.sync_mode = str(c["sync"])
        self.off_policy = c["continuation"] == "off_policy"
        self.is_clamp = float(c["is_clamp"])
        self.norm_std = bool(c["adv_norm_std"])
        self.loo = bool(c["leave_one_out"])
        self.stage_counter = 0
        parse_sync(self.sync_mode)  # fail early on a bad mode

    def state(self) -> dict[str, Any]:
        return {"stage_counter": self.stage_counter}

    def load_state(self, state: dict[str, Any]) -> None:
        self.stage_counter = int(state.get("stage_counter", 0))

    # -------------------------------------------------------------- sync policy
    def maybe_sync(self, log: StepLog, probe: list[tuple[list[int], list[int], list[float]]]) -> None:
        """Sync before a stage according to the mode. probe: (c_k, action ids, rollout logprobs) of the stage's trunk actions."""
        mode, arg = parse_sync(self.sync_mode)
        self.stage_counter += 1
        if mode == "per_stage":
            self.sync(log)
        elif mode == "interval":
            if (self.stage_counter - 1) % int(arg) == 0:
                self.sync(log)
        elif mode == "kl" and probe:
            ctx, acts = [p[0] for p in probe], [p[1] for p in probe]
            inf = self.engine.logprobs(ctx, acts, self.temperature, weights="inference")
            trn = self.engine.logprobs(ctx, acts, self.temperature)
            num = sum(math.exp(b - a) - 1 - (b - a) for x, y in zip(inf, trn) for a, b in zip(x, y))
            den = sum(len(x) for x in inf)
            if den:
                log.sync_kl.append(num / den)  # the record's sync_kl: what each decision saw
            if den and num / den > float(arg):
                self.sync(log)

    # -------------------------------------------------------------- one step
    def step(self, tasks: list[Task], step: int) -> dict[str, Any]:
        log = StepLog()
        self.maybe_sync(log, [])  # trunks are sampled by the (synced) current policy
        trunks = self.chains(tasks, self.trunks, "trunk", log)
        tree: dict[int, list[Member]] = {}
        if self.off_policy:  # sample every stage's branches now, under theta_0 (in the order k = 0 .. K-1)
            with log.phase("siblings"):
                tree = self.branches(trunks, sorted(self.stages(trunks)), log)
        for k in self.stages(trunks):
            if not self.off_policy:
                self.maybe_sync(log, self.probe(trunks, k))
                with log.phase("siblings"):
                    tree.update(self.branches(trunks, [k], log))
            with log.phase("update"):
                stage = self.stage(trunks, tree.get(k, []), k)
                if stage.rows:
                    stats = self.engine.update(stage.rows, self.update_cfg, self.temperature)
                    log.add_update(stats, stage.advantages, k=k, groups=stage.groups)
        return log.record(trunks, len(tasks))

    # -------------------------------------------------------------- the stages of a step
    @staticmethod
    def stages(trunks: list[Trajectory]) -> list[int]:
        """The turn indices k of a step's stages, in the order they are trained: K-1 down to 0."""
        return list(reversed(range(max((len(t.turns) for t in trunks), default=0))))

    @staticmethod
    def probe(trunks: list[Trajectory], k: int) -> list[tuple[list[int], list[int], list[float]]]:
        """(c_k, action ids, rollout logprobs) of the turn-k actions of the trunks that reached S_k:
        what kl:tau measures the inference-train distance on before stage k."""
        return [(t.turns[k].context_ids, t.turns[k].action_ids, t.turns[k].logprobs) for t in trunks if len(t.turns) > k]

    def branches(self, trunks: list[Trajectory], ks: list[int], log: StepLog) -> dict[int, list[Member]]:
        """Each stage k in ks: its group members (trunk index, trajectory or None, is_sibling), sampled
        in one batch: for each trunk reaching S_k, G-1 siblings (restored from the snapshot, sampled
        from exactly c_k, continued to termination) and the trunk's own member (its continuation
        regenerated from S_{k+1} under the current policy; None if the trunk ended at turn k)."""
        starts, owners = [], []
        for k in ks:
            for ti, t in enumerate(trunks):
                if len(t.turns) <= k:
                    continue
                for _ in range(self.G - 1):
                    starts.append(Start(t.task, source=t, k=k, first_kind="sibling", rest_kind="continuation"))
                    owners.append((k, ti, True))
                if len(t.turns) > k + 1:
                    starts.append(Start(t.task, source=t, k=k + 1, first_kind="continuation", rest_kind="continuation"))
                    owners.append((k, ti, False))
        out: dict[int, list[Member]] = {k: [] for k in ks}
        done = self.roller.run(starts) if starts else []
        log.add_trajectories(done)
        for (k, ti, sib), traj in zip(owners, done):
            out[k].append((ti, traj, sib))
        for k in ks:  # trunks that ended at turn k are their own member, return = their reward
            for ti, t in enumerate(trunks):
                if len(t.turns) == k + 1:
                    out[k].append((ti, None, False))
        return out

    def stage(self, trunks: list[Trajectory], members: list[Member], k: int) -> Stage:
        """Stage k's training rows from its group members (`branches`): each member's return (times its
        clamped IS weight in the off-policy variant), the sibling-relative advantages within each
        boundary S_k, and one Row per sibling (prompt = c_k, response = its turn-k action, mask all
        ones). The trunk's member enters the group mean only."""
        scores, keys, sib_rows = [], [], []
        weights = self._is_weights(members, k) if self.off_policy else [1.0] * len(members)
        for (ti, traj, is_sibling), w in zip(members, weights):
            ret = trunks[ti].reward if traj is None else traj.reward
            scores.append(w * ret)
            keys.append(ti)
            if is_sibling:
                sib_rows.append((len(scores) - 1, traj))
        adv = sibling_advantages(torch.tensor(scores), keys, self.norm_std, self.loo) if scores else torch.zeros(0)
        rows, advs = [], []
        for j, traj in sib_rows:
            turn = traj.turns[k]
            a = float(adv[j])
            rows.append(Row(turn.context_ids, turn.action_ids, turn.logprobs, [a] * len(turn.action_ids),
                            [1] * len(turn.action_ids), group=f"{traj.task.id}/{keys[j]}/{k}",
                            turns=[k] * len(turn.action_ids)))
            advs.append(a)
        return Stage(k, rows, advs, groups=sum(len(t.turns) > k for t in trunks))

    def _is_weights(self, members: list[Member], k: int) -> list[float]:
        """Clamped trajectory-level IS weights of the members' continuations (turns > k) under the current weights."""
        ctx, acts, olds, owner = [], [], [], []
        for m, (_, traj, _) in enumerate(members):
            if traj is None:
                continue
            for turn in traj.turns[k + 1:]:
                ctx.append(turn.context_ids); acts.append(turn.action_ids); olds.append(turn.logprobs); owner.append(m)
        logw = [0.0] * len(members)
        if ctx:
            new = self.engine.logprobs(ctx, acts, self.temperature)
            for m, n, o in zip(owner, new, olds):
                logw[m] += sum(n) - sum(o)
        return [min(math.exp(min(lw, 50.0)), self.is_clamp) for lw in logw]
