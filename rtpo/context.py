"""Conditioning maps psi: the context c_k = psi(S_k) a turn-k action is sampled from (paper §2.1, C.1).

S_k is the full message history at the turn-k boundary. psi chooses what the model sees:
  full        the whole history
  qwen3       earlier assistant turns lose their <think>...</think> blocks; commentary, tool call
              and tool result stay (the paper's E.4, Qwen3's chat template)
  truncate:N  the system and first user message, then only the last N turns (assistant + its tool results)
  summary     earlier turns, all but the last, replaced by one deterministic digest of their tool
              calls and results; the last turn stays verbatim

Flattened methods (GRPO & co.) train every turn under the *full* history even when the rollout
used another psi: the rollout-training mismatch of §2.1. RTPO trains turn k under exactly the
recorded c_k ids.
"""

from __future__ import annotations

import json
import re

Message = dict[str, str]

THINK_RE = re.compile(r"<think>.*?</think>\s*", re.DOTALL)
TOOL_CALL_RE = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


def validate_psi(psi: str) -> str:
    if psi in ("full", "qwen3", "summary"):
        return psi
    if psi.startswith("truncate:"):
        n = psi.split(":", 1)[1]
        if n.isdigit() and int(n) >= 0:
            return psi
    raise ValueError(f"unknown context map psi={psi!r}; expected full | qwen3 | truncate:N | summary")


def split_turns(messages: list[Message]) -> tuple[list[Message], list[list[Message]]]:
    """Split a history into its head (messages before the first assistant turn) and its turns.

    A turn is one assistant message followed by the tool messages answering it.
    """
    head: list[Message] = []
    turns: list[list[Message]] = []
    for m in messages:
        if m["role"] == "assistant":
            turns.append([m])
        elif turns:
            turns[-1].append(m)
        else:
            head.append(m)
    return head, turns


def _digest(turns: list[list[Message]], max_chars: int = 80) -> str:
    """A compact, deterministic digest of earlier turns: one line per tool call and its result."""
    lines = []
    for i, turn in enumerate(turns):
        call = TOOL_CALL_RE.search(turn[0]["content"])
        if call:
            try:
                obj = json.loads(call.group(1))
                what = f"{obj.get('name')}({json.dumps(obj.get('arguments', {}), sort_keys=True)})"
            except (json.JSONDecodeError, AttributeError):
                what = "malformed tool call"
        else:
            what = "no tool call"
        result = " ".join(m["content"] for m in turn[1:]).replace("\n", " ")
        if len(result) > max_chars:
            result = result[:max_chars] + "..."
        lines.append(f"{i + 1}. {what} -> {result}" if result else f"{i + 1}. {what}")
    return "Summary of earlier steps:\n" + "\n".join(lines)


def apply_psi(messages: list[Message], psi: str) -> list[Message]:
    """Map the full history S_k to the messages c_k is rendered from. Never mutates its input."""
    validate_psi(psi)
    if psi == "full":
        return [dict(m) for m in messages]
    head, turns = split_turns(messages)
    if psi == "qwen3":
        out = [dict(m) for m in head]
        for turn in turns:
            a = dict(turn[0])
            a["content"] = THINK_RE.sub("", a["content"])
            out.append(a)
            out.extend(dict(m) for m in turn[1:])
        return out
    if psi.startswith("truncate:"):
        n = int(psi.split(":", 1)[1])
        kept = turns[max(0, len(turns) - n):] if n > 0 else []
        return [dict(m) for m in head] + [dict(m) for t in kept for m in t]
    # summary
    if len(turns) <= 1:
        return [dict(m) for m in messages]
    return ([dict(m) for m in head] + [{"role": "user", "content": _digest(turns[:-1])}]
            + [dict(m) for m in turns[-1]])
