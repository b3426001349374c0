"""Parsing the assistant's tool call: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``.

The format is Qwen3's (the tokenizer has ``<tool_call>``/``</tool_call>`` as special tokens and
generation stops at ``</tool_call>``, so the stop token must be kept in the text handed to the
env). Rules, in order:

1. ``<think>...</think>`` blocks are removed first: a call written inside the reasoning is not a call.
2. No ``<tool_call>`` (and no stray ``</tool_call>``) -> ``None``: the turn has no tool call.
3. Anything wrong with the call -> a `ToolError` whose ``message`` is shown to the model as the
   tool observation and counts as a tool error: an unclosed tag, a closing tag without an opening
   one, invalid JSON, a payload that is not ``{"name": str, "arguments": {...}}``, and, when the
   tool specs are given, an unknown tool name, a missing or unexpected argument, or an argument of
   the wrong JSON type. Parsing never raises on model text.
4. Only the first call of a turn is used; text after its ``</tool_call>`` is ignored (generation
   stops there anyway).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ToolSpec", "ToolCall", "ToolError", "parse_tool_call", "format_tool_call",
           "strip_think", "tools_prompt"]

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)
_JSON_TYPES = {"string": str, "integer": int}


@dataclass(frozen=True)
class ToolSpec:
    """A tool as the model sees it. Every parameter is required.

    params: argument name -> JSON type ("string" or "integer"), in the order shown to the model.
    """

    name: str
    description: str
    params: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for p, t in self.params.items():
            if t not in _JSON_TYPES:
                raise ValueError(f"tool {self.name!r}: parameter {p!r} has type {t!r}; "
                                 f"use one of {sorted(_JSON_TYPES)}")

    def signature(self) -> str:
        """Compact one-line form for the system prompt, e.g. ``search(query: string)``."""
        return f"{self.name}({', '.join(f'{p}: {t}' for p, t in self.params.items())})"


@dataclass(frozen=True)
class ToolCall:
    """A well-formed call. raw: the text between the tags."""

    name: str
    arguments: dict[str, Any]
    raw: str = ""


@dataclass(frozen=True)
class ToolError:
    """A malformed call. message: the observation shown to the model (starts with "Error:")."""

    message: str
    raw: str = ""


def strip_think(text: str) -> str:
    """Remove every closed ``<think>...</think>`` block (an unclosed one is left as is)."""
    return _THINK.sub("", text)


def format_tool_call(name: str, arguments: Mapping[str, Any]) -> str:
    """The canonical call text the scripted experts write (and the parser accepts)."""
    return OPEN + json.dumps({"name": name, "arguments": dict(arguments)}, ensure_ascii=False) + CLOSE


def tools_prompt(specs: Mapping[str, ToolSpec]) -> str:
    """Compact tool list + call syntax for a system prompt (a few lines, kept short for tiny models)."""
    lines = ["Tools:"] + [f"- {s.signature()}: {s.description}" for s in specs.values()]
    lines.append('Call one tool per turn: <tool_call>{"name": ..., "arguments": {...}}</tool_call>')
    return "\n".join(lines)


def parse_tool_call(text: str, specs: Mapping[str, ToolSpec] | None = None
                    ) -> ToolCall | ToolError | None:
    """Find and validate the tool call in one assistant turn.

    text:  the assistant's turn, including ``</tool_call>`` if it stopped there.
    specs: tool name -> ToolSpec; when given, the name and arguments are checked against it.
    Returns None (no call), a ToolCall, or a ToolError (see the module docstring).
    """
    visible = strip_think(text)
    start = visible.find(OPEN)
    if start < 0:
        if CLOSE in visible:
            return ToolError(f"Error: found {CLOSE} without {OPEN}. Write {OPEN}{{...}}{CLOSE}.")
        return None
    end = visible.find(CLOSE, start + len(OPEN))
    if end < 0:
        raw = visible[start + len(OPEN):]
        return ToolError(f"Error: unclosed {OPEN}; end the call with {CLOSE}.", raw)
    raw = visible[start + len(OPEN):end]
    try:
        obj = json.loads(raw.strip())
    except json.JSONDecodeError as e:
        return ToolError(f"Error: the tool call is not valid JSON ({e.msg} at char {e.pos}).", raw)
    except (ValueError, RecursionError) as e:  # an integer beyond int()'s digit limit; nesting too deep
        what = "nested too deeply" if isinstance(e, RecursionError) else "a number too long"
        return ToolError(f"Error: the tool call is not valid JSON ({what}).", raw)
    if not isinstance(obj, dict):
        return ToolError('Error: the tool call must be a JSON object {"name": ..., "arguments": {...}}.', raw)
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return ToolError('Error: the tool call needs a "name" string.', raw)
    args = obj.get("arguments", {})
    if not isinstance(args, dict):
        return ToolError('Error: "arguments" must be a JSON object.', raw)
    if specs is not None:
        spec = specs.get(name)
        if spec is None:
            return ToolError(f"Error: unknown tool {name!r}; available: {', '.join(specs)}.", raw)
        for p, t in spec.params.items():
            if p not in args:
                return ToolError(f"Error: {name} is missing argument {p!r}.", raw)
            v = args[p]
            # bool is an int subclass in Python; JSON true/false is never a valid integer here.
            if not isinstance(v, _JSON_TYPES[t]) or isinstance(v, bool):
                art = "an" if t[0] in "aeiou" else "a"
                return ToolError(f"Error: argument {p!r} of {name} must be {art} {t}.", raw)
        extra = [a for a in args if a not in spec.params]
        if extra:
            return ToolError(f"Error: {name} got unexpected argument {extra[0]!r}; "
                             f"it takes {', '.join(spec.params) or 'no arguments'}.", raw)
    return ToolCall(name, dict(args), raw)
