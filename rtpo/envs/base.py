"""The environment protocol shared by every task (math, search, airline) and every method.

An episode is a sequence of at most K assistant turns. After turn k the env returns observation
messages (tool results), whether the episode is done, and the reward (sparse: non-zero only at the
end). `snapshot()`/`restore()` capture the boundary state S_k so that RTPO can fork sibling turns
from exactly the state the trunk reached.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

Message = dict[str, str]  # {"role": "system"|"user"|"assistant"|"tool", "content": str}


@dataclass
class Task:
    """One problem, in the schema shared by the embedded generators and the benchmark adapters.

    kind:    "math" | "search" | "airline" (selects the environment)
    answers: gold answers (math: one expression; search: the answer and its aliases;
             airline: unused, the goal lives in meta["goal"])
    tier:    "easy" | "medium" | "hard" (the paper's Table 1 difficulty tiers)
    source:  the benchmark or generator name ("embedded-math", "gsm8k", "hotpotqa", ...)
    meta:    env-specific data (search: the corpus name; airline: initial DB and goal)
    """

    id: str
    kind: str
    question: str
    answers: list[str]
    tier: str = "medium"
    split: str = "train"
    source: str = "embedded"
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "kind": self.kind, "question": self.question, "answers": list(self.answers),
            "tier": self.tier, "split": self.split, "source": self.source, "meta": self.meta,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Task":
        return cls(**{k: d[k] for k in ("id", "kind", "question", "answers")},
                   **{k: d[k] for k in ("tier", "split", "source", "meta") if k in d})


@dataclass
class StepResult:
    """What `Env.step` returns after one assistant turn.

    observations: messages appended after the assistant turn (role "tool"); empty when done.
    done:         the episode ended (final answer given, or the turn limit K reached).
    reward:       terminal reward in [0, 1] (0.0 while not done).
    info:         per-turn facts: "tool_calls" (int), "tool_errors" (int), "truncated" (bool, the
                  turn limit ended the episode without an answer), "answer" (str|None), and at the
                  end "metrics" (task-specific, e.g. {"em":..,"f1":..,"hit":..}).
    """

    observations: list[Message]
    done: bool
    reward: float
    info: dict[str, Any]


@runtime_checkable
class Env(Protocol):
    max_turns: int  # K: the episode ends after at most K assistant turns

    def reset(self, task: Task) -> list[Message]:
        """Start an episode; return the initial messages (system prompt with tool specs, user question)."""

    def step(self, assistant_text: str) -> StepResult:
        """Apply one assistant turn. A malformed tool call becomes an error observation, never an exception."""

    def snapshot(self) -> Any:
        """A self-contained copy of the env state at the current turn boundary."""

    def restore(self, state: Any) -> None:
        """Return to a snapshot; the same actions then give the same observations and reward.

        `state` is restored again by every sibling forked from the same boundary: copy what you
        keep, never mutate it (the Roller hands over the recorded snapshot itself)."""
