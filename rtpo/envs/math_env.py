"""Math env: one `python` tool, final answer in ``\\boxed{}`` (paper §4: mathematical reasoning with
an external calculation tool; K = 3, §E.3).

Reward: 1.0 if the last ``\\boxed{}`` outside ``<think>`` blocks of the final turn equals the gold
answer under `rtpo.metrics.math_equal`, else 0.0. Metrics: {"correct"}. When the gold is an
integer and the prediction a plain number, they must be exactly equal: math_equal's relative
tolerance (1e-6) would accept 7006651 for 7006652, and embedded answers reach ~1e8.
A sandbox failure (exception, timeout) is an ``Error: ...`` observation and a tool error.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any

from rtpo.envs.tool_env import ToolEnv
from rtpo.metrics import extract_boxed, math_equal
from rtpo.tools.parse import ToolCall, ToolSpec, strip_think

__all__ = ["MathEnv", "PYTHON_SPEC", "answer_correct"]

PYTHON_SPEC = ToolSpec("python", "run Python code; returns what it prints", {"code": "string"})


_INT = re.compile(r"^-?\d+$")
_PLAIN_NUMBER = re.compile(r"^-?\d+(\.\d*)?$")


def answer_correct(pred: str | None, gold: str) -> bool:
    """math_equal, but exact for an integer gold against a plain-number prediction."""
    if pred is None or not math_equal(pred, gold):
        return False
    g = gold.strip()
    p = re.sub(r"[\s,$]", "", pred).rstrip(".")
    if _INT.match(g) and _PLAIN_NUMBER.match(p):
        try:
            return Decimal(p) == Decimal(g)
        except InvalidOperation:
            return False
    return True


class MathEnv(ToolEnv):
    """sandbox: an object with ``run(code) -> result`` (result.ok; result.output = stdout, or on
    failure stdout + error text; result.error = short code), by default a
    `rtpo.tools.python_sandbox.PythonSandbox(**sandbox_kwargs)` created on first use."""

    kind = "math"
    default_max_turns = 3
    tools = {"python": PYTHON_SPEC}
    instructions = "Solve the problem. Put the final answer in \\boxed{}."

    def __init__(self, max_turns: int | None = None, max_obs_chars: int = 1500,
                 sandbox: Any = None, sandbox_kwargs: dict[str, Any] | None = None):
        super().__init__(max_turns, max_obs_chars)
        self._sandbox = sandbox
        self._sandbox_kwargs = dict(sandbox_kwargs or {})

    @property
    def sandbox(self) -> Any:
        if self._sandbox is None:
            from rtpo.tools.python_sandbox import PythonSandbox
            self._sandbox = PythonSandbox(**self._sandbox_kwargs)
        return self._sandbox

    def _execute(self, call: ToolCall) -> tuple[str, bool]:
        res = self.sandbox.run(call.arguments["code"])
        out = res.output.strip()
        if res.ok:
            return (out if out else "(no output; use print)"), True
        # on failure the sandbox's output is the stdout so far + the error text (traceback tail):
        # keep its end, where the exception line is
        out = out or f"Error: {res.error}"
        if len(out) > self.max_obs_chars:
            out = "..." + out[-(self.max_obs_chars - 3):]
        return out, False

    def _finish(self, text: str, truncated: bool) -> tuple[float, str | None, dict[str, float]]:
        answer = None if truncated else extract_boxed(strip_think(text))
        gold = self.task.answers[0]
        correct = answer_correct(answer, gold)
        return float(correct), answer, {"correct": float(correct)}
