"""Task files -> the parquet datasets verl's `RLHFDataset` reads.

One row per Task:
  prompt        the env's initial messages (system prompt with tool specs, user question), which
                verl uses for `raw_prompt` and its over-long-prompt filter
  data_source   "rtpo/<kind>" (rewards come from the env inside `RTPOAgentLoop`; the reward
                function `rtpo.verl_ext.reward.compute_score` is only a guard)
  reward_model  {"style": "rule", "ground_truth": first gold answer}
  agent_name    "rtpo_agent" (selects `RTPOAgentLoop`)
  extra_info    {"index": i, "task": the Task as a JSON string (nested env state stays opaque to parquet)}
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rtpo.envs.base import Task
from rtpo.verl_ext.agent_loop import AGENT_NAME, make_env_factory


def task_rows(tasks: list[Task], env_cfg: dict[str, Any] | None = None,
              env_factory: str | None = None) -> list[dict[str, Any]]:
    """verl dataset rows of `tasks`; env_cfg / env_factory as the `rtpo.env` / `rtpo.env_factory` settings."""
    make = make_env_factory({"env": dict(env_cfg or {}), "env_factory": env_factory})
    rows = []
    for i, t in enumerate(tasks):
        messages = make(t).reset(t)
        rows.append({"prompt": messages, "data_source": f"rtpo/{t.kind}",
                     "reward_model": {"style": "rule", "ground_truth": t.answers[0] if t.answers else ""},
                     "agent_name": AGENT_NAME, "extra_info": {"index": i, "task": json.dumps(t.to_dict())}})
    return rows


def write_parquet(tasks: list[Task], path: str | Path, env_cfg: dict[str, Any] | None = None,
                  env_factory: str | None = None) -> Path:
    """Write `tasks` as a verl RL dataset; returns the path."""
    import pandas as pd

    if not tasks:
        raise ValueError(f"write_parquet({path}): no tasks")
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(task_rows(tasks, env_cfg, env_factory)).to_parquet(p)
    return p
