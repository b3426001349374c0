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
      PPO update on the turn-k sibling tokens only, old logprobs = those recorded at sampling.
      Trunk tokens, shared prefixes and continuation tokens get no gradient.

Synchronisation modes (G.6): per_stage (default), interval:N (sync every N stages), kl:tau (sync
when KL(inference || train) on the stage's trunk actions exceeds tau). When the inference weights
lag, siblings are sampled by stale weights and the measured ratio honestly differs from 1.

Off-policy variant (F.3): the whole reverse tree (siblings and continuations) is sampled once under
theta_0 right after the trunks; stage k reuses it and reweights each member's return by the clamped
trajectory-level importance weight w = min(prod over its continuation tokens of pi_theta/pi_theta0, c).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from rtpo.engine.base import Row
from rtpo.envs.base import Task
from rtpo.instrument import StepLog
from rtpo.methods.advantages import sibling_advantages
from rtpo.methods.base import Method
from rtpo.rollout import Start, Trajectory


class RTPO(Method):
    name = "rtpo"

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        c = self.cfg
        self.trunks = int(c.get("trunks", 2))
        self.G = int(c.get("group_size", 3))
        if self.G < 2:
            raise ValueError(f"rtpo.group_size must be >= 2 (the trunk action plus at least one sibling), got {self.G}")
        self.sync_mode = str(c.get("sync", "per_stage"))
        self.off_policy = c.get("continuation", "on_policy") == "off_policy"
        self.is_clamp = float(c.get("is_clamp", 2.0))
        self.norm_std = bool(c.get("adv_norm_std", False))
        self.loo = bool(c.get("leave_one_out", False))
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
            if den and num / den > float(arg):
                self.sync(log)

    # -------------------------------------------------------------- one step
    def step(self, tasks: list[Task], step: int) -> dict[str, Any]:
        log = StepLog()
        self.maybe_sync(log, [])  # trunks are sampled by the (synced) current policy
        trunks = self.chains(tasks, self.trunks, "trunk", log)
        K = max((len(t.turns) for t in trunks), default=0)

        tree: dict[int, list[tuple[int, Trajectory | None, bool]]] = {}
        if self.off_policy:  # sample every stage's branches now, under theta_0
            with log.phase("siblings"):
                tree = self._branches(trunks, list(range(K)), log)

        for k in reversed(range(K)):
            at_k = [i for i, t in enumerate(trunks) if len(t.turns) > k]
            if not self.off_policy:
                self.maybe_sync(log, [(trunks[i].turns[k].context_ids, trunks[i].turns[k].action_ids,
                                       trunks[i].turns[k].logprobs) for i in at_k])
                with log.phase("siblings"):
                    tree.update(self._branches(trunks, [k], log))
            members = tree.get(k, [])
            with log.phase("update"):
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
                                    [1] * len(turn.action_ids), group=f"{traj.task.id}/{keys[j]}/{k}"))
                    advs.append(a)
                if rows:
                    stats = self.engine.update(rows, self.update_cfg, self.temperature)
                    log.add_update(stats, advs, k=k, groups=len(at_k))
        return log.record(trunks, len(tasks))

    # -------------------------------------------------------------- tree construction
    def _branches(self, trunks: list[Trajectory], ks: list[int], log: StepLog
                  ) -> dict[int, list[tuple[int, Trajectory | None, bool]]]:
        """For each stage k in ks and each trunk reaching S_k: G-1 siblings (is_sibling=True) and the
        trunk's own member (its continuation regenerated from S_{k+1}; None if the trunk ended at k)."""
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
        out: dict[int, list[tuple[int, Trajectory | None, bool]]] = {k: [] for k in ks}
        done = self.roller.run(starts) if starts else []
        log.add_trajectories(done)
        for (k, ti, sib), traj in zip(owners, done):
            out[k].append((ti, traj, sib))
        for k in ks:  # trunks that ended at turn k are their own member, return = their reward
            for ti, t in enumerate(trunks):
                if len(t.turns) == k + 1:
                    out[k].append((ti, None, False))
        return out

    def _is_weights(self, members: list[tuple[int, Trajectory | None, bool]], k: int) -> list[float]:
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


def parse_sync(mode: str) -> tuple[str, str | None]:
    """(name, argument) of an rtpo.sync mode: per_stage | interval:N | kl:tau; ValueError otherwise."""
    if mode == "per_stage":
        return mode, None
    name, _, arg = mode.partition(":")
    if name == "interval" and arg.isdigit() and int(arg) >= 1:
        return name, arg
    if name == "kl":
        try:
            float(arg)
            return name, arg
        except ValueError:
            pass
    raise ValueError(f"unknown rtpo.sync mode {mode!r}; expected per_stage | interval:N | kl:tau")
