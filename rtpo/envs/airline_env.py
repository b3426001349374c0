"""Airline env: stateful booking / change / cancellation over an in-memory DB (paper §G.1,
tau^3-Airline style; K = 5 by default).

A turn without a tool call finishes the episode (the agent's closing reply). Reward: 1.0 if the
final DB (users, flights with free seats, reservations) equals the goal DB, else 0.0; metrics
{"db_match"}. A tool call on turn K is executed and the DB is scored as it then is (truncated=True).

Task.meta: {"db": <initial DB, schema in rtpo.tools.airline_db>,
            "goal": {"actions": [[tool, {args}], ...]}   # applied to the initial DB -> goal DB
                    or {"db": <goal DB>}}
"""

from __future__ import annotations

from rtpo.envs.tool_env import ToolEnv, copy_state
from rtpo.envs.base import Task
from rtpo.tools.airline_db import AIRLINE_SPECS, AirlineDB
from rtpo.tools.parse import ToolCall, strip_think

__all__ = ["AirlineEnv", "goal_db"]


def goal_db(task: Task) -> AirlineDB:
    """The DB the task wants at the end; raises ValueError if the task's goal is malformed."""
    meta = task.meta or {}
    if "db" not in meta or "goal" not in meta:
        raise ValueError(f"airline task {task.id}: meta needs 'db' and 'goal' (got {sorted(meta)})")
    goal = meta["goal"]
    if "db" in goal:
        return AirlineDB(goal["db"])
    db = AirlineDB(meta["db"])
    for i, (name, args) in enumerate(goal.get("actions", [])):
        if name not in AIRLINE_SPECS:
            raise ValueError(f"airline task {task.id}: goal action #{i} has unknown tool {name!r}")
        text, ok = getattr(db, name)(**args)
        if not ok:
            raise ValueError(f"airline task {task.id}: goal action #{i} {name}{args} fails: {text}")
    return db


class AirlineEnv(ToolEnv):
    kind = "airline"
    default_max_turns = 5
    execute_on_last_turn = True
    tools = AIRLINE_SPECS
    instructions = "You are an airline agent. Use the tools to do what the user asks, then reply without a tool call."

    # task id -> (its meta, goal DB canonical string, validated initial DB): every branch of RTPO's
    # reverse stages resets an env before restoring its boundary snapshot, so building the goal DB
    # (validation, deep copies, the goal actions) once per task instead of once per branch matters.
    # A hit needs the very same meta object (tasks are not edited in place after loading).
    _start_cache: dict[str, tuple[dict, str, dict]] = {}

    def _start(self, task: Task) -> None:
        hit = self._start_cache.get(task.id)
        if hit is None or hit[0] is not task.meta:
            if len(self._start_cache) >= 4096:
                self._start_cache.clear()
            hit = self._start_cache[task.id] = (task.meta, goal_db(task).canonical(), AirlineDB(task.meta["db"]).state())
        self._s["goal"] = hit[1]
        self._s["db"] = copy_state(hit[2])   # the tools mutate it
        self._restored()

    def _restored(self) -> None:
        self.db = AirlineDB(self._s["db"], copy=False)  # a view: tools mutate self._s["db"]

    def _execute(self, call: ToolCall) -> tuple[str, bool]:
        return self.db.execute(call)

    def _finish(self, text: str, truncated: bool) -> tuple[float, str | None, dict[str, float]]:
        match = float(self.db.canonical() == self._s["goal"])
        answer = None if truncated else strip_think(text).strip()
        return match, answer, {"db_match": match}
