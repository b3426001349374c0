"""math-verify as a second opinion on the math grader (paper scale, optional).

The field's reported math numbers mostly come from Hugging Face's `math-verify` (the grader behind
open-r1, lighteval and many RL papers); this project grades with its own `rtpo.metrics.math_equal`
(sympy, documented rules, exact integers). With ``eval.math_verify: true`` the evaluation also grades
every math answer with math-verify and records, beside the project's numbers (never instead of
them), how often the two disagree and a few of the disagreements:

    "math_verify": {"version": "0.9.0", "graded": 480, "disagree": 3, "ours_only": 1,
                    "math_verify_only": 2, "examples": [{"pred": ..., "gold": ..., "ours": true}, ...]}

How a pair is given to math-verify: the gold as ``$gold$`` and the prediction as ``\\boxed{pred}``
(what the policy wrote), then ``verify(gold, pred)`` with its defaults (6-digit float rounding,
5 s timeouts). Install: ``pip install 'math-verify[antlr4_9_3]==0.9.0'`` (antlr 4.9.3 is the runtime
verl's hydra pins; the gpu and dev extras carry it).
"""

from __future__ import annotations

from typing import Any, Iterable

PACKAGE = "math-verify[antlr4_9_3]==0.9.0"
MAX_EXAMPLES = 20


def available() -> str | None:
    """math-verify's version if it can be imported, else None."""
    try:
        import importlib.metadata

        import math_verify  # noqa: F401
    except ImportError:
        return None
    return importlib.metadata.version("math-verify")


def require() -> str:
    """The version, or a ValueError saying how to install it (an exit-2 error of `rtpo evaluate`)."""
    v = available()
    if v is None:
        raise ValueError(f"eval.math_verify is true but math-verify is not installed: pip install '{PACKAGE}'")
    return v


def math_verify_equal(pred: str | None, gold: str) -> bool:
    """math-verify's verdict on a prediction (the \\boxed{} content) against the gold answer."""
    if pred is None:
        return False
    from math_verify import parse, verify

    g = parse(f"${gold}$")
    p = parse(f"\\boxed{{{pred}}}")
    return bool(g) and bool(p) and bool(verify(g, p))


def crosscheck(graded: Iterable[tuple[str | None, str, bool]]) -> dict[str, Any]:
    """Count disagreements over (prediction, gold, the project's verdict) triples. A missing
    prediction (no \\boxed{}, or truncated) is wrong for both graders and is not graded."""
    out: dict[str, Any] = {"version": require(), "graded": 0, "disagree": 0, "ours_only": 0, "math_verify_only": 0,
                           "examples": []}
    for pred, gold, ours in graded:
        if pred is None:
            continue
        out["graded"] += 1
        theirs = math_verify_equal(pred, gold)
        if theirs != bool(ours):
            out["disagree"] += 1
            out["ours_only" if ours else "math_verify_only"] += 1
            if len(out["examples"]) < MAX_EXAMPLES:
                out["examples"].append({"pred": pred, "gold": gold, "ours": bool(ours), "math_verify": theirs})
    return out
