"""What every method shares: the engine, a Roller, the update settings, and the step contract;
the option readers of the method sections, and verl's flattened multi-turn row (GRPO, Tree-GRPO, ARPO).

A method's `step(tasks, step)` rolls out, computes advantages, builds `Row`s, calls
`engine.update`, and returns the step's record (rtpo.instrument schema). It never touches the model.
"""

from __future__ import annotations

from typing import Any

from rtpo.engine.base import PolicyEngine, Row, UpdateConfig
from rtpo.envs.base import Task
from rtpo.instrument import StepLog
from rtpo.methods.cards import CARDS
from rtpo.rollout import Roller, Start, Trajectory


def cfg_int(cfg: dict[str, Any], key: str, method: str, minimum: int = 1) -> int:
    """Read a positive integer option (its default is the method's card's), with an error naming the
    method and the key."""
    v = cfg[key]
    try:
        n = int(v)
        whole = not isinstance(v, bool) and float(v) == n
    except (TypeError, ValueError):
        whole = False
    if not whole:
        raise ValueError(f"{method}.{key} must be an integer, got {v!r}")
    if n < minimum:
        raise ValueError(f"{method}.{key} must be >= {minimum}, got {v!r}")
    return n


def cfg_float(cfg: dict[str, Any], key: str, method: str) -> float:
    v = cfg[key]
    try:
        return float(v)
    except (TypeError, ValueError):
        raise ValueError(f"{method}.{key} must be a number, got {v!r}") from None


def flatten_row(traj: Trajectory, advantage: float, max_context: int, train_copied_prefix: bool = True,
                group: str = "") -> Row:
    """One verl-style training row for a whole trajectory.

    prompt = full_ids[:prompt_len]; response = full_ids[prompt_len:] (T tokens);
    mask[t] = 1 where t lies in an action span, else 0; old_logprobs = the rollout logprobs on
    action tokens, 0 elsewhere; advantages = `advantage` on all T tokens (masked ones are ignored).

    train_copied_prefix: for a trajectory branched from another one (traj.start_k > 0), whether its
    copied turns [:start_k] are trained in this row too. Tree-GRPO's and ARPO's public code do
    (each leaf's row holds the whole root-to-leaf path, so a shared prefix receives the advantages
    of every leaf below it); False masks them here, leaving them to the trajectory they came from.

    The response is cut so that prompt + response fits the engine's context (`max_context`), as
    verl cuts responses at max_response_length; this only bites when psi != full let the rollout
    contexts stay shorter than the concatenated history.
    """
    if "prompt_len" not in traj.info:
        raise ValueError(f"trajectory of task {traj.task.id} has no info['prompt_len']; was it built by rtpo.rollout.Roller?")
    p = int(traj.info["prompt_len"])
    full = traj.full_ids
    response = list(full[p:])
    mask = [0] * len(response)
    old = [0.0] * len(response)
    turns = [-1] * len(response)
    first = 0 if train_copied_prefix else traj.start_k
    if len(traj.action_spans) != len(traj.turns):
        raise ValueError(f"trajectory of task {traj.task.id}: {len(traj.action_spans)} action spans for {len(traj.turns)} turns")
    for k in range(first, len(traj.turns)):
        (s, e), turn = traj.action_spans[k], traj.turns[k]
        if e - s != len(turn.action_ids) or s < p:
            raise ValueError(f"trajectory of task {traj.task.id}: action span {k} = [{s}, {e}) does not match "
                             f"its {len(turn.action_ids)} action tokens after the {p}-token prompt")
        for t in range(s, e):
            mask[t - p] = 1
            old[t - p] = float(turn.logprobs[t - s])
            turns[t - p] = k
    keep = max(0, max_context - p)  # the engine accepts prompt + response[:-1] < max_context
    response, mask, old, turns = response[:keep], mask[:keep], old[:keep], turns[:keep]
    return Row(list(full[:p]), response, old, [float(advantage)] * len(response), mask, group=group, turns=turns)


class Method:
    name = "base"
    # The training rows the method builds, which bound its rollout (rtpo.rollout.Roller `rows`):
    # "flat": one row per trajectory holding the whole episode (prompt + every turn), so a trajectory
    # ends when its full history would no longer fit; "turn": rows (c_k, turn k) (RTPO), so only the
    # context c_k = psi(S_k) plus the turn's response must fit, however long the full history grows.
    rows = "flat"

    def __init__(self, engine: PolicyEngine, roller: Roller, cfg: dict[str, Any], update: UpdateConfig,
                 temperature: float = 1.0) -> None:
        # the options: the config's method section over the card's defaults (rtpo.methods.cards), the
        # only place a method's defaults live
        self.cfg = CARDS[self.name].options(cfg) if self.name in CARDS else dict(cfg or {})
        self.engine, self.roller, self.update_cfg = engine, roller, update
        self.temperature = temperature

    def step(self, tasks: list[Task], step: int) -> dict[str, Any]:
        raise NotImplementedError

    def state(self) -> dict[str, Any]:
        """Method state beyond the engine's, saved with checkpoints (e.g. RTPO's stage counter)."""
        return {}

    def load_state(self, state: dict[str, Any]) -> None:
        pass

    # shared helpers ---------------------------------------------------------------
    def sync(self, log: StepLog) -> None:
        self.engine.sync()
        log.syncs += 1

    def chains(self, tasks: list[Task], n: int, kind: str, log: StepLog) -> list[Trajectory]:
        """n independent complete trajectories per task, grouped task by task."""
        with log.phase("rollout"):
            trajs = self.roller.run([Start(task=t, first_kind=kind, rest_kind=kind) for t in tasks for _ in range(n)])
        log.add_trajectories(trajs)
        return trajs


class Vanilla(Method):
    """The base model, not trained: evaluation only. A step rolls out and logs, with no update."""

    name = "vanilla"

    def step(self, tasks: list[Task], step: int) -> dict[str, Any]:
        log = StepLog()
        trajs = self.chains(tasks, int(self.cfg.get("chains", 1)), "chain", log)
        return log.record(trajs, len(tasks))
