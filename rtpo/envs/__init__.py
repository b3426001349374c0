"""Multi-turn tool environments (paper §C.1) and the `make_env` factory.

  base.py         the Env protocol every method and the Roller use; Task, StepResult, Message
  tool_env.py     ToolEnv: the turn logic the embedded envs share (tool call -> observation, last turn, scoring)
  math_env.py     python tool, \\boxed{} answer          search_env.py   BM25 search tool, <answer> F1
  airline_env.py  stateful airline DB tools, DB match   search_kb.py    the search env's generated knowledge base
  toy_env.py      LastTurnEnv: only the last turn decides the reward (a credit-assignment test bed)
"""

from __future__ import annotations

from typing import Any

from rtpo.envs.base import Env, Message, StepResult, Task
from rtpo.envs.tool_env import ToolEnv

__all__ = ["Env", "Message", "StepResult", "Task", "ToolEnv", "make_env", "ENV_KINDS"]

ENV_KINDS = ("math", "search", "airline")


def make_env(task: Task, **cfg: Any) -> ToolEnv:
    """The env for `task.kind` ("math" | "search" | "airline"), built with keyword options `cfg`
    (all kinds: max_turns, max_obs_chars; math: sandbox, sandbox_kwargs; search: top_k, corpus).
    The env is not reset: call `env.reset(task)`."""
    if task.kind == "math":
        from rtpo.envs.math_env import MathEnv as cls
    elif task.kind == "search":
        from rtpo.envs.search_env import SearchEnv as cls
    elif task.kind == "airline":
        from rtpo.envs.airline_env import AirlineEnv as cls
    else:
        raise ValueError(f"make_env: task {task.id} has unknown kind {task.kind!r}; "
                         f"known: {', '.join(ENV_KINDS)}")
    try:
        return cls(**cfg)
    except TypeError as e:
        raise TypeError(f"make_env({task.kind}): bad option in {sorted(cfg)}: {e}") from None
