"""What every method shares: the engine, a Roller, the update settings, and the step contract.

A method's `step(tasks, step)` rolls out, computes advantages, builds `Row`s, calls
`engine.update`, and returns the step's record (rtpo.instrument schema). It never touches the model.
"""

from __future__ import annotations

from typing import Any

from rtpo.engine.base import PolicyEngine, UpdateConfig
from rtpo.envs.base import Task
from rtpo.instrument import StepLog
from rtpo.rollout import Roller, Start, Trajectory


class Method:
    name = "base"

    def __init__(self, engine: PolicyEngine, roller: Roller, cfg: dict[str, Any], update: UpdateConfig,
                 temperature: float = 1.0) -> None:
        self.engine, self.roller, self.cfg, self.update_cfg = engine, roller, cfg, update
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
