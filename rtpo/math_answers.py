"""Math answers (paper §4.1, Table 1; §4.3, Table 2): the final answer of a solution and whether two answers
are equivalent, as the field checks them.

  * `extract_boxed` takes the final answer from the last ``\\boxed{...}``.
  * `math_equal` decides equivalence of two answer strings: string match after normalisation, then
    numeric match (relative tolerance 1e-6; exact when an integer is involved), then a symbolic match through
    a small LaTeX -> sympy converter (sympy's own LaTeX parser needs antlr4 4.11, which we do not depend on).

Pure functions of strings; `math_equal` never raises (it is a reward function). rtpo.metrics re-exports both.
"""

from __future__ import annotations

import cmath
import re
import string
from decimal import Decimal

__all__ = ["extract_boxed", "math_equal"]


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
