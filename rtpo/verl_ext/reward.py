"""verl's custom reward function hook (`reward.custom_reward_function.path=<this file>`).

Rewards of rtpo tasks come from the environment inside `RTPOAgentLoop` (the agent loop sets
`reward_score`, so verl's reward loop never scores those rows). verl still resolves a reward
function for every data source at start-up; this one refuses to score an rtpo row, so a
misconfiguration (a row that reached the reward function without an env reward) fails loudly
instead of silently scoring 0.
"""

from __future__ import annotations

from typing import Any


def compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None,
                  **kwargs: Any) -> float:
    raise RuntimeError(f"rtpo reward function called for data_source={data_source!r}: rtpo rows are scored by "
                       "their environment in RTPOAgentLoop (agent_name=rtpo_agent); check data.*_files and "
                       "actor_rollout_ref.rollout.agent settings")
