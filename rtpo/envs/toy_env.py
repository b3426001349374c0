"""A minimal env where only the last turn decides the reward (a test bed for credit assignment).

Turns 0..K-2 get the observation "continue"; the episode ends after turn K-1 with reward 1 if that
turn's text contains the target word, else 0. Earlier turns cannot change the outcome, so any
credit a method gives them is noise — the situation of the paper's §2.2.
"""

from __future__ import annotations

from typing import Any

from rtpo.envs.base import Message, StepResult, Task


class LastTurnEnv:
    def __init__(self, max_turns: int = 2, target: str = "yes") -> None:
        self.max_turns, self.target = max_turns, target
        self.turn = 0

    def reset(self, task: Task) -> list[Message]:
        self.turn = 0
        return [{"role": "system", "content": "Answer each turn."}, {"role": "user", "content": task.question}]

    def step(self, assistant_text: str) -> StepResult:
        self.turn += 1
        if self.turn < self.max_turns:
            return StepResult([{"role": "tool", "content": "continue"}], False, 0.0, {"tool_calls": 0, "tool_errors": 0})
        r = 1.0 if self.target in assistant_text else 0.0
        return StepResult([], True, r, {"tool_calls": 0, "tool_errors": 0, "truncated": False, "answer": assistant_text})

    def snapshot(self) -> Any:
        return {"turn": self.turn}

    def restore(self, state: Any) -> None:
        self.turn = int(state["turn"])
