"""Embedded math tasks: multi-step arithmetic word problems with 3-4 digit numbers, so that a tiny
model gains from the python tool (paper §4, mathematical reasoning with a calculation tool).

Tiers count arithmetic operations in the solution expression: easy = 1, medium = 2, hard = 3-4.
A problem is a start amount followed by steps, e.g. (hard, 4 operations)::

    A shop has 4821 pens. It sells 1375 pens. It buys 24 packs of 136 pens.
    They are shared equally among 7 stores. How many pens does each store get?
    -> (4821 - 1375 + 24 * 136) // 7 = 958

The scripted expert computes the expression with the python tool and boxes the printed result.
"""

from __future__ import annotations

import random

from rtpo.envs.tool_env import ToolEnv
from rtpo.envs.base import Message, Task
from rtpo.tools.parse import format_tool_call

__all__ = ["sample_task", "run_expert", "MISTAKES"]

_PLACES = [("A shop", "pens"), ("A farm", "eggs"), ("A library", "books"), ("A factory", "bolts"),
           ("A school", "pencils"), ("A bakery", "rolls"), ("A warehouse", "boxes"), ("A club", "tickets"),
           ("A garden", "seeds"), ("A port", "crates"), ("A museum", "cards"), ("A mill", "sacks")]

# Steps on the running amount x, and how many arithmetic operations each adds to the expression.
# Middle steps can repeat; a problem ends with at most one "mul" (value in cents) or "div" (shares).
_MIDDLE = ["add", "sub", "add_packs", "sub_packs"]
_COST = {"add": 1, "sub": 1, "add_packs": 2, "sub_packs": 2, "mul": 1, "div": 1}

MISTAKES = ("no_tool", "wrong_arg", "malformed", "stop_early")


def _paren(expr: str) -> str:
    return f"({expr})" if any(op in expr for op in "+-*/") else expr


def _build(rng: random.Random, n_ops: int) -> tuple[str, str, int, list[str]] | None:
    """One attempt: (question, python expression, value, sub-expressions after each step) or None."""
    place, item = rng.choice(_PLACES)
    x = rng.randint(1000, 9999)
    expr = str(x)
    sents = [f"{place} has {x} {item}."]
    partial = [expr]
    final = rng.random() < 0.5  # end with a * or // step
    rest = n_ops - int(final)
    while rest > 0:
        kind = rng.choice([k for k in _MIDDLE if _COST[k] <= rest])
        if kind == "add":
            b = rng.randint(100, 9999)
            x, expr, s = x + b, f"{expr} + {b}", f"It buys {b} more {item}."
        elif kind == "sub":
            if x <= 200:
                return None
            b = rng.randint(100, min(x - 1, 9999))
            x, expr, s = x - b, f"{expr} - {b}", f"It sells {b} {item}."
        elif kind == "add_packs":
            g, m = rng.randint(12, 99), rng.randint(12, 999)
            x, expr, s = x + g * m, f"{expr} + {g} * {m}", f"It buys {g} packs of {m} {item}."
        else:
            g, m = rng.randint(12, 99), rng.randint(12, 999)
            if g * m >= x:
                return None
            x, expr, s = x - g * m, f"{expr} - {g} * {m}", f"It ships {g} crates of {m} {item}."
        sents.append(s)
        partial.append(expr)
        rest -= _COST[kind]
    if final:
        if rng.random() < 0.5:
            p = rng.randint(12, 999)
            x, expr = x * p, f"{_paren(expr)} * {p}"
            sents.append(f"Each one sells for {p} cents. What are they worth in cents?")
        else:
            divs = [d for d in range(3, 100) if x % d == 0]
            if not divs:
                return None
            d = rng.choice(divs)
            x, expr = x // d, f"{_paren(expr)} // {d}"
            sents.append(f"They are shared equally among {d} stores. How many {item} does each store get?")
        partial.append(expr)
    else:
        sents.append(f"How many {item} does it have now?")
    return " ".join(sents), expr, x, partial


def sample_task(rng: random.Random, tier: str, seed: int) -> tuple[str, list[str], dict]:
    """(question, answers, meta) for one problem of `tier`; meta = {"expr", "partial", "ops"}."""
    if tier not in ("easy", "medium", "hard"):
        raise ValueError(f"math: unknown tier {tier!r}")
    n_ops = {"easy": 1, "medium": 2}.get(tier) or rng.choice([3, 4])
    while True:
        built = _build(rng, n_ops)
        if built is not None:
            q, expr, value, partial = built
            assert eval(expr) == value, (expr, value)  # noqa: S307 - our own arithmetic string
            return q, [str(value)], {"expr": expr, "partial": partial, "ops": n_ops}


def _typo(number_text: str, rng: random.Random) -> str:
    """Change one digit (never the leading one to 0)."""
    digits = list(number_text)
    i = rng.randrange(len(digits))
    choices = [d for d in "0123456789" if d != digits[i] and not (i == 0 and d == "0")]
    digits[i] = rng.choice(choices)
    return "".join(digits)


def _wrong_expr(expr: str, rng: random.Random) -> str:
    toks = expr.split(" ")
    nums = [i for i, t in enumerate(toks) if t.strip("()").isdigit()]
    i = rng.choice(nums)
    t = toks[i]
    core = t.strip("()")
    toks[i] = t.replace(core, _typo(core, rng))
    return " ".join(toks)


def run_expert(task: Task, env: ToolEnv, imperfection: float, rng: random.Random
               ) -> tuple[list[Message], float]:
    """Scripted demonstration: compute the expression with python, then box the printed result.

    With probability `imperfection` per decision the expert errs: answers without the tool (a
    mental-arithmetic slip), types a wrong number into the code, writes a malformed call (then
    retries), or stops early (computes only part of the problem). Returns (messages, reward).
    """
    msgs = env.reset(task)
    expr, partial = task.meta["expr"], task.meta["partial"]
    result: str | None = None
    turn = 0
    while True:
        turns_left = env.max_turns - turn
        turn += 1
        mistake = rng.choice(MISTAKES) if rng.random() < imperfection else None
        if mistake == "stop_early" and len(partial) <= 2:
            mistake = "no_tool"
        if result is not None:
            text = f"<think>Python gives {result}.</think>\nThe answer is \\boxed{{{result}}}."
        elif turns_left <= 1 or mistake == "no_tool":
            guess = _typo(task.answers[0], rng)
            text = f"<think>I can do this in my head: about {guess}.</think>\nThe answer is \\boxed{{{guess}}}."
        else:
            code_expr = expr
            if mistake == "wrong_arg":
                code_expr = _wrong_expr(expr, rng)
            elif mistake == "stop_early":
                code_expr = partial[-2]
            call = format_tool_call("python", {"code": f"print({code_expr})"})
            if mistake == "malformed":
                call = call.replace('"}}', '"}', 1)
            text = f"<think>Compute {code_expr}.</think>\n{call}"
        res = env.step(text)
        msgs.append({"role": "assistant", "content": text})
        msgs.extend(res.observations)
        if res.done:
            return msgs, res.reward
        if res.info["tool_errors"] == 0 and res.observations:
            result = res.observations[0]["content"].strip()
