"""The field's metrics: QA scores, math answer equivalence, unbiased pass@k, trajectory statistics.

These functions are shared by the environments (terminal rewards) and by `rtpo.evaluate`
(the eval JSON of docs/ARCHITECTURE.md). All are pure functions of strings / numbers.

QA (paper §4.1, Table 1; §F.3, Table 6):
  * `exact_match`, `f1_score`: the SQuAD v1.1 definitions (answer normalisation, token-overlap F1),
    maximised over the gold answer and its aliases.
  * `output_hit`: the paper's "output-hit" accuracy for the deep-search benchmarks — a sample counts
    as correct when its *full output* contains the gold answer or an alias (after normalisation).

Math (paper §4.1, Table 1; §4.3, Table 2):
  * `extract_boxed` takes the final answer from the last ``\\boxed{...}``.
  * `math_equal` decides equivalence of two answer strings: string match after normalisation, then
    numeric match (relative tolerance 1e-6; exact when an integer is involved), then a symbolic match through a small LaTeX -> sympy
    converter (sympy's own LaTeX parser needs antlr4 4.11, which we do not depend on).

Pass@k (paper §D: "Pass@1"; §G.1, Table 8: "Pass@4"): the unbiased estimator of Chen et al. (2021).

Tool statistics (paper §G.1, Tables 8-9): tool calls per trajectory, tool execution success rate,
truncation and normal-termination rates, mean response tokens, response tokens per success.
"""

from __future__ import annotations

import cmath
import math
import re
import string
from collections import Counter
from decimal import Decimal
from typing import Any

__all__ = [
    "normalize_answer", "exact_match", "f1_score", "output_hit", "qa_scores",
    "extract_boxed", "math_equal", "pass_at_k", "trajectory_stats", "aggregate_pass_at_k",
]

# --------------------------------------------------------------------------------------------
# QA metrics (SQuAD v1.1 evaluation script, Rajpurkar et al. 2016)
# --------------------------------------------------------------------------------------------

_PUNCT = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(s: str) -> str:
    """SQuAD normalisation: lowercase, drop punctuation, drop articles a/an/the, squash whitespace.

    >>> normalize_answer("The  Eiffel-Tower!")
    'eiffeltower'
    """
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def _check_golds(golds: list[str]) -> None:
    if isinstance(golds, str):
        raise TypeError(f"golds must be a list of strings, got the string {golds!r}")
    if len(golds) == 0:
        raise ValueError("golds is empty: a task needs at least one gold answer")


def exact_match(pred: str, golds: list[str]) -> float:
    """1.0 if the normalised prediction equals any normalised gold answer, else 0.0."""
    _check_golds(golds)
    p = normalize_answer(pred)
    return float(any(p == normalize_answer(g) for g in golds))


def _f1_single(pred: str, gold: str) -> float:
    pred_toks = normalize_answer(pred).split()
    gold_toks = normalize_answer(gold).split()
    if not pred_toks or not gold_toks:
        # SQuAD v2 convention: two empty answers agree, one empty answer scores 0.
        return float(pred_toks == gold_toks)
    common = Counter(pred_toks) & Counter(gold_toks)
    num_same = sum(common.values())
    if num_same == 0:
        return 0.0
    precision = num_same / len(pred_toks)
    recall = num_same / len(gold_toks)
    return 2 * precision * recall / (precision + recall)


def f1_score(pred: str, golds: list[str]) -> float:
    """SQuAD token-level F1 between the prediction and the best-matching gold answer, in [0, 1]."""
    _check_golds(golds)
    return max(_f1_single(pred, g) for g in golds)


def output_hit(output: str, golds: list[str]) -> float:
    """1.0 if some normalised gold answer is a substring of the normalised full output.

    This is the paper's output-hit accuracy (§F.3): the whole generated output (all turns, not
    only the extracted answer) is searched. Golds that normalise to "" (e.g. "the") never hit.
    Note it is a character substring test, as in the paper's definition, so a short numeric gold
    such as "1" also hits an output containing "1990".
    """
    _check_golds(golds)
    out = normalize_answer(output)
    for g in golds:
        ng = normalize_answer(g)
        if ng and ng in out:
            return 1.0
    return 0.0


def qa_scores(pred: str | None, golds: list[str], full_output: str = "") -> dict[str, float]:
    """{"em", "f1", "hit"} for one QA answer.

    pred:        the extracted final answer, or None when the episode gave none (em = f1 = 0).
    full_output: the whole generated text used for "hit"; when empty, the prediction itself is used.
    """
    _check_golds(golds)
    output = full_output if full_output else (pred or "")
    hit = output_hit(output, golds)
    if pred is None:
        return {"em": 0.0, "f1": 0.0, "hit": hit}
    return {"em": exact_match(pred, golds), "f1": f1_score(pred, golds), "hit": hit}


# --------------------------------------------------------------------------------------------
# Math answers
# --------------------------------------------------------------------------------------------

_BOXED = re.compile(r"\\(?:boxed|fbox)")


def _match_brace(text: str, open_idx: int) -> int | None:
    """Index of the '}' closing the '{' at open_idx, or None if unbalanced."""
    depth = 0
    for i in range(open_idx, len(text)):
        ch = text[i]
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i
    return None


def extract_boxed(text: str) -> str | None:
    """Content of the last complete ``\\boxed{...}`` (or ``\\fbox{...}``) in text, or None.

    Nested braces are handled (``\\boxed{\\frac{1}{2}}`` -> ``\\frac{1}{2}``). The brace-less
    form ``\\boxed 5`` gives "5". A final ``\\boxed{`` left unclosed (a truncated generation) is
    skipped in favour of the last complete one.
    """
    if not text:
        return None
    for m in reversed(list(_BOXED.finditer(text))):
        i = m.end()
        while i < len(text) and text[i] == " ":
            i += 1
        if i < len(text) and text[i] == "{":
            j = _match_brace(text, i)
            if j is not None:
                return text[i + 1:j].strip()
        elif i > m.end() and i < len(text):  # "\boxed 5": up to the next whitespace or '$'
            tok = re.match(r"[^\s$]+", text[i:])
            if tok:
                return tok.group(0)
    return None


_THOUSANDS = re.compile(r"^[+-]?\d{1,3}(,\d{3})+(\.\d+)?$")
_TEXT_CMDS = ("\\text", "\\textbf", "\\textit", "\\mathrm", "\\mathbf", "\\mbox", "\\operatorname")


def _unwrap_text(s: str) -> str:
    """Replace \\text{X}-like groups: by X when nothing precedes them, dropped when they follow
    other content (then they are units, "5\\text{ cm}" -> "5")."""
    out = s
    for _ in range(20):  # bounded: each pass removes one group
        m = re.search(r"\\(?:textbf|textit|text|mathrm|mathbf|mbox|operatorname)\s*\{", out)
        if not m:
            break
        j = _match_brace(out, m.end() - 1)
        if j is None:
            break
        inner = out[m.end():j]
        before = out[:m.start()].strip()
        is_unit = bool(before) and re.fullmatch(r"\s*[A-Za-z][A-Za-z\s./^]*", inner) is not None \
            and re.search(r"[\d}]$", before) is not None
        out = out[:m.start()] + ("" if is_unit else inner) + out[j + 1:]
    return out


def _normalize_math(s: str) -> str:
    """Canonical string form of a math answer (no sympy). Idempotent."""
    s = str(s).strip()
    boxed = extract_boxed(s)
    if boxed is not None:
        s = boxed
    s = s.replace("\n", " ")
    for a, b in (("\\dfrac", "\\frac"), ("\\tfrac", "\\frac"), ("\\left", ""), ("\\right", ""),
                 ("\\displaystyle", ""), ("\\!", ""), ("\\,", ""), ("\\;", ""), ("\\:", ""),
                 ("\\ ", ""), ("~", ""), ("\\$", ""), ("$", ""), ("\\%", ""), ("%", ""),
                 ("^{\\circ}", ""), ("^\\circ", ""), ("\\circ", ""), ("°", ""),
                 ("\\(", ""), ("\\)", ""), ("\\[", ""), ("\\]", "")):
        s = s.replace(a, b)
    s = _unwrap_text(s)
    s = "".join(s.split())  # all whitespace
    s = s.rstrip(".")
    if _THOUSANDS.match(s):
        s = s.replace(",", "")
    # "x=5" / "k=-3": keep the value when the left side is a lone variable.
    m = re.fullmatch(r"[A-Za-z](?:_\{?\w+\}?)?=(.+)", s)
    if m and "=" not in m.group(1):
        s = m.group(1)
    # "\frac12" -> "\frac{1}{2}", "\sqrt2" -> "\sqrt{2}"
    s = re.sub(r"\\frac(\d)(\d)", r"\\frac{\1}{\2}", s)
    s = re.sub(r"\\frac\{([^{}]*)\}(\d)", r"\\frac{\1}{\2}", s)
    s = re.sub(r"\\frac(\d)\{", r"\\frac{\1}{", s)
    s = re.sub(r"\\sqrt(\d+)", r"\\sqrt{\1}", s)
    if s.startswith("+"):
        s = s[1:]
    return s


class _Unsupported(Exception):
    """The LaTeX uses something the small converter does not handle."""


# LaTeX commands mapped to sympy names (functions take their argument in the usual way).
_LATEX_NAMES = {
    "pi": "pi", "infty": "oo", "ln": "log", "log": "log", "exp": "exp", "sin": "sin",
    "cos": "cos", "tan": "tan", "cot": "cot", "sec": "sec", "csc": "csc",
    "arcsin": "asin", "arccos": "acos", "arctan": "atan",
}
_LATEX_OPS = {"cdot": "*", "times": "*", "div": "/"}
# Identifiers allowed in the converted string: these names and single letters. Anything else (a
# word answer like "Evelyn") is left to string comparison. Also keeps parse_expr's eval() safe.
_KNOWN_CMDS = {"frac", "sqrt"} | set(_LATEX_OPS) | set(_LATEX_NAMES)
_SYMPY_NAMES = {"sqrt", "pi", "oo", "log", "exp", "sin", "cos", "tan", "cot", "sec", "csc",
                "asin", "acos", "atan"}
_SAFE_CHARS = re.compile(r"^[0-9A-Za-z+\-*/().\s]*$")


def _latex_to_sympy(s: str) -> str:
    """Convert the common LaTeX answer forms to a sympy-parsable string; raise _Unsupported otherwise.

    Handles \\frac{a}{b}, \\sqrt{a}, \\sqrt[n]{a}, a^{b}, a^b, \\cdot, \\times, \\pi, \\infty,
    \\ln/\\log/trig names, and {...} grouping.
    """
    out: list[str] = []
    i = 0
    n = len(s)

    def read_arg(j: int) -> tuple[str, int]:
        """One argument starting at j: a {group}, a \\command, or a single character."""
        if j >= n:
            raise _Unsupported("missing argument")
        if s[j] == "{":
            k = _match_brace(s, j)
            if k is None:
                raise _Unsupported("unbalanced braces")
            return "(" + _latex_to_sympy(s[j + 1:k]) + ")", k + 1
        if s[j] == "\\":
            m = re.match(r"\\([A-Za-z]+)", s[j:])
            if not m or m.group(1) not in _LATEX_NAMES:
                raise _Unsupported(s[j:j + 10])
            return _LATEX_NAMES[m.group(1)], j + m.end()
        return s[j], j + 1

    while i < n:
        ch = s[i]
        if ch == "\\":
            m = re.match(r"\\([A-Za-z]+)", s[i:])
            if not m:
                raise _Unsupported(s[i:i + 10])
            cmd = m.group(1)
            if cmd not in _KNOWN_CMDS:
                # Spaces were squashed during normalisation ("\sin x" -> "\sinx"): take the
                # longest known command that prefixes the letters.
                prefixes = [c for c in _KNOWN_CMDS if cmd.startswith(c)]
                if not prefixes:
                    raise _Unsupported("\\" + cmd)
                cmd = max(prefixes, key=len)
            i += 1 + len(cmd)
            if cmd == "frac":
                num, i = read_arg(i)
                den, i = read_arg(i)
                out.append(f"(({num})/({den}))")
            elif cmd == "sqrt":
                if i < n and s[i] == "[":
                    k = s.find("]", i)
                    if k < 0:
                        raise _Unsupported("unclosed \\sqrt[")
                    root = _latex_to_sympy(s[i + 1:k])
                    arg, i = read_arg(k + 1)
                    out.append(f"(({arg})**(1/({root})))")
                else:
                    arg, i = read_arg(i)
                    out.append(f"sqrt({arg})")
            elif cmd in _LATEX_OPS:
                out.append(_LATEX_OPS[cmd])
            elif cmd in _LATEX_NAMES:
                out.append(" " + _LATEX_NAMES[cmd] + " ")
            else:
                raise _Unsupported("\\" + cmd)
        elif ch == "^":
            arg, i = read_arg(i + 1)
            out.append("**(" + arg + ")")
        elif ch == "{":
            k = _match_brace(s, i)
            if k is None:
                raise _Unsupported("unbalanced braces")
            out.append("(" + _latex_to_sympy(s[i + 1:k]) + ")")
            i = k + 1
        elif ch in "}_[]!=<>|&'\"":
            raise _Unsupported(ch)
        else:
            out.append(ch)
            i += 1
    return "".join(out)


_MAX_EXPR_CHARS = 300
_REL_TOL = 1e-6
# Fixed, "generic" points for the numerical identity test of expressions with free symbols.
_PROBES = (0.5377, 1.8339, -2.2588, 0.8622, 3.1416 / 7)


def _to_sympy(s: str):
    """Parse a normalised answer into an unevaluated sympy expression; None if not possible."""
    if len(s) > _MAX_EXPR_CHARS:
        return None
    try:
        expr_str = _latex_to_sympy(s)
    except (_Unsupported, RecursionError):
        return None
    if not expr_str.strip() or not _SAFE_CHARS.match(expr_str):
        return None
    for name in re.findall(r"[A-Za-z]+", expr_str):
        if len(name) > 1 and name not in _SYMPY_NAMES:
            return None
    if re.search(r"\d{40,}", expr_str):  # absurdly long literals
        return None
    try:
        import sympy
        from sympy.parsing.sympy_parser import (
            convert_xor, implicit_multiplication_application, parse_expr, standard_transformations,
        )

        global_dict = {"__builtins__": {}}
        for name in ("Integer", "Float", "Rational", "Symbol", "Function", "sqrt", "pi", "oo",
                     "log", "exp", "sin", "cos", "tan", "cot", "sec", "csc", "asin", "acos",
                     "atan", "Mul", "Add", "Pow", "E", "I"):
            global_dict[name] = getattr(sympy, name)
        # Single letters are symbols (so "E"/"I" typed in an answer are plain symbols too, except
        # via \exp / the names above); "e" stays a symbol — both sides are parsed the same way.
        local_dict = {c: sympy.Symbol(c) for c in string.ascii_letters}
        expr = parse_expr(expr_str, local_dict=local_dict, global_dict=global_dict,
                          transformations=standard_transformations
                          + (implicit_multiplication_application, convert_xor),
                          evaluate=False)
    except Exception:  # noqa: BLE001 - any parse failure means "not a sympy expression"
        return None
    return expr if _bounded_powers(expr) else None


_MAX_EXPONENT = 1e4


def _bounded_powers(expr) -> bool:
    """False if some constant exponent exceeds 1e4 in magnitude (power towers like 9^9^9^9 would
    make evalf run for minutes). Inner powers are checked before the powers that contain them, so
    no dangerous value is ever evaluated."""
    import sympy

    for node in sympy.postorder_traversal(expr):
        if isinstance(node, sympy.Pow) and not node.exp.free_symbols:
            v = _eval_complex(node.exp)
            if v is None or cmath.isnan(v) or abs(v) > _MAX_EXPONENT:
                return False
    return True


def _num_close(a: complex, b: complex) -> bool:
    if cmath.isnan(a) or cmath.isnan(b):
        return False
    if cmath.isinf(a) or cmath.isinf(b):
        return a == b
    return abs(a - b) <= _REL_TOL * max(abs(a), abs(b)) + 1e-12


def _eval_complex(expr, subs: dict | None = None) -> complex | None:
    try:
        v = expr.evalf(20, subs=subs) if subs else expr.evalf(20)
        return complex(v)
    except Exception:  # noqa: BLE001 - zoo, undefined, overflow, symbols left over, ...
        return None


def _sympy_equal(a, b) -> bool:
    """Numeric equality of two sympy expressions: constants by value (rel 1e-6); expressions with
    free symbols by a deterministic identity test at fixed generic points (equivalent in practice
    to simplify(a-b)==0, but bounded in time — simplify can run for minutes on adversarial input)."""
    syms = sorted(a.free_symbols | b.free_symbols, key=lambda x: x.name)
    if not syms:
        try:  # exact when both sides are rational numbers (2^{30} vs 1073741825 must differ)
            ra, rb = a.doit(), b.doit()
            if ra.is_Rational and rb.is_Rational:
                return bool(ra == rb)
        except Exception:  # noqa: BLE001 - fall back to the numeric comparison
            pass
        va, vb = _eval_complex(a), _eval_complex(b)
        return va is not None and vb is not None and _num_close(va, vb)
    agree = 0
    for shift in range(len(_PROBES)):
        subs = {x: _PROBES[(i + shift) % len(_PROBES)] + 0.1 * i for i, x in enumerate(syms)}
        va, vb = _eval_complex(a, subs), _eval_complex(b, subs)
        if va is None or vb is None or cmath.isnan(va) or cmath.isnan(vb):
            continue  # a pole of one of the expressions; try the next point
        if not _num_close(va, vb):
            return False
        agree += 1
    return agree >= 2


def _split_top_level(s: str) -> list[str]:
    """Split on commas that are not inside (), [], {}."""
    parts, depth, cur = [], 0, []
    for ch in s:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts


_INTEGER = re.compile(r"^[+-]?\d+$")
_PLAIN_NUMBER = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)$")


def _to_float(s: str) -> float | None:
    try:
        return float(s)
    except ValueError:
        return None


def _equal_normalized(p: str, g: str, depth: int = 0) -> bool:
    if p == g:
        return True
    if not p or not g or depth > 3:
        return False
    # Tuples / intervals: same brackets, equal element by element.
    if len(p) >= 2 and len(g) >= 2 and p[0] in "([" and g[0] in "([" and p[-1] in ")]" \
            and g[-1] in ")]":
        pp, gp = _split_top_level(p[1:-1]), _split_top_level(g[1:-1])
        if len(pp) > 1 or len(gp) > 1:
            return (p[0], p[-1]) == (g[0], g[-1]) and len(pp) == len(gp) and all(
                _equal_normalized(x, y, depth + 1) for x, y in zip(pp, gp))
    # Bare lists "2,3" vs "3,2": equal as multisets.
    pp, gp = _split_top_level(p), _split_top_level(g)
    if len(pp) > 1 or len(gp) > 1:
        if len(pp) != len(gp):
            return False
        unused = list(gp)
        for x in pp:
            for j, y in enumerate(unused):
                if _equal_normalized(x, y, depth + 1):
                    del unused[j]
                    break
            else:
                return False
        return True
    if _PLAIN_NUMBER.match(p) and _PLAIN_NUMBER.match(g):
        if _INTEGER.match(p) or _INTEGER.match(g):
            # Exact when an integer is involved: the relative tolerance would accept 7006651
            # for 7006652 (AIME-style integer answers, large embedded answers).
            return Decimal(p) == Decimal(g)
        return _num_close(float(p), float(g))
    fp, fg = _to_float(p), _to_float(g)
    if fp is not None and fg is not None:
        return _num_close(fp, fg)
    ep, eg = _to_sympy(p), _to_sympy(g)
    if ep is None or eg is None:
        return False
    return _sympy_equal(ep, eg)


def math_equal(pred: str | None, gold: str) -> bool:
    """Whether a predicted math answer is equivalent to the gold answer. Never raises.

    Both sides are normalised (``\\boxed{}`` unwrapped; $, spaces, \\left/\\right, \\text{}
    wrappers and trailing units, degree/percent signs, a trailing '.', thousands separators and a
    leading "x=" removed; \\dfrac -> \\frac). Then they are equal if the strings match, or both
    parse as numbers within relative tolerance 1e-6, or both convert to sympy expressions that
    agree numerically (constants by value; expressions with symbols at fixed generic points).
    Integers are never matched approximately: "7006651" != "7006652", "2^{30}" != "1073741825";
    a plain decimal against an integer must equal it exactly ("12.0" == "12", "12.0000001" != "12").
    Tuples/intervals compare element-wise with matching brackets; bare comma lists as multisets.

    Known limits: mixed numbers ("2\\frac{1}{2}") are read as products; multi-letter products
    ("2xy"), subscripts, "\\pm", matrices and inequalities are compared as strings only (a word
    answer must not become a product of letter symbols: "Evelyn" vs "Evenly").
    """
    if pred is None or gold is None:
        return False
    try:
        return _equal_normalized(_normalize_math(pred), _normalize_math(gold))
    except Exception:  # noqa: BLE001 - contract: a reward function must never raise
        return False


# --------------------------------------------------------------------------------------------
# pass@k and trajectory statistics
# --------------------------------------------------------------------------------------------

def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k (Chen et al., 2021): 1 - C(n-c, k) / C(n, k).

    n: samples drawn for the task, c: how many were correct, k: the budget (1 <= k <= n).
    """
    for name, v in (("n", n), ("c", c), ("k", k)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"pass_at_k: {name} must be an int, got {v!r}")
    if n < 1 or not 0 <= c <= n:
        raise ValueError(f"pass_at_k: need n >= 1 and 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"pass_at_k: need 1 <= k <= n, got k={k}, n={n} (draw more samples)")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def aggregate_pass_at_k(successes_by_task: dict[str, list[bool]], ks: list[int]) -> dict[str, float]:
    """Mean unbiased pass@k over tasks: {"pass@1": .., "pass@4": ..}.

    successes_by_task: task id -> one bool per sampled trajectory (n = len of the list).
    """
    if not successes_by_task:
        raise ValueError("aggregate_pass_at_k: no tasks")
    result: dict[str, float] = {}
    for k in ks:
        vals = []
        for tid, succ in successes_by_task.items():
            if len(succ) < k:
                raise ValueError(f"aggregate_pass_at_k: task {tid!r} has {len(succ)} samples, "
                                 f"fewer than k={k}")
            vals.append(pass_at_k(len(succ), sum(bool(x) for x in succ), k))
        result[f"pass@{k}"] = sum(vals) / len(vals)
    return result


_REQUIRED_TRAJ_KEYS = ("reward", "success", "tool_calls", "tool_errors", "truncated", "terminated",
                       "response_tokens")


def trajectory_stats(trajs: list[dict[str, Any]]) -> dict[str, float]:
    """Behaviour statistics over a list of finished trajectories (paper §G.1, Tables 8-9).

    Each trajectory dict has: reward (float), success (bool), tool_calls (int), tool_errors (int),
    truncated (bool, the turn limit ended it), terminated (bool, it ended with an answer),
    response_tokens (int, all assistant tokens), and optionally em / f1 / hit (floats).

    Returns:
      tool_calls_per_traj      mean tool calls per trajectory
      tool_success_rate        1 - total errors / total calls (nan when no calls were made)
      truncation_rate          fraction truncated
      normal_termination_rate  fraction that ended with an answer
      response_tokens          mean response tokens per trajectory
      tokens_per_success       total response tokens of successful trajectories / #successes
                               (nan when none succeeded)
      em, f1, hit              means over the trajectories that carry them (only when present)
    """
    if not trajs:
        raise ValueError("trajectory_stats: empty list of trajectories")
    for i, t in enumerate(trajs):
        for key in _REQUIRED_TRAJ_KEYS:
            if key not in t:
                raise ValueError(f"trajectory_stats: trajectory {i} lacks field {key!r}")
        if t["tool_errors"] > t["tool_calls"] or t["tool_errors"] < 0:
            raise ValueError(f"trajectory_stats: trajectory {i} field 'tool_errors' "
                             f"({t['tool_errors']}) not in [0, tool_calls={t['tool_calls']}]")
    n = len(trajs)
    calls = sum(t["tool_calls"] for t in trajs)
    errors = sum(t["tool_errors"] for t in trajs)
    succ = [t for t in trajs if t["success"]]
    stats = {
        "tool_calls_per_traj": calls / n,
        "tool_success_rate": (1.0 - errors / calls) if calls > 0 else float("nan"),
        "truncation_rate": sum(bool(t["truncated"]) for t in trajs) / n,
        "normal_termination_rate": sum(bool(t["terminated"]) for t in trajs) / n,
        "response_tokens": sum(t["response_tokens"] for t in trajs) / n,
        "tokens_per_success": (sum(t["response_tokens"] for t in succ) / len(succ)) if succ
        else float("nan"),
    }
    for key in ("em", "f1", "hit"):
        vals = [float(t[key]) for t in trajs if t.get(key) is not None]
        if vals:
            stats[key] = sum(vals) / len(vals)
    return stats
