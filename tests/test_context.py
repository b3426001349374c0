"""Conditioning maps psi on handmade histories, and the tokenizer's chat rendering."""

from __future__ import annotations

import pytest

from rtpo.context import apply_psi, split_turns, validate_psi
from tests.helpers import tiny

H = [
    {"role": "system", "content": "sys"},
    {"role": "user", "content": "Q?"},
    {"role": "assistant", "content": "<think>plan one</think>first <tool_call>{\"name\": \"search\", \"arguments\": {\"query\": \"a\"}}</tool_call>"},
    {"role": "tool", "content": "result one"},
    {"role": "assistant", "content": "<think>plan two</think><tool_call>{\"name\": \"python\", \"arguments\": {\"code\": \"print(1)\"}}</tool_call>"},
    {"role": "tool", "content": "1"},
    {"role": "assistant", "content": "<think>plan three</think>broken <tool_call>{not json</tool_call>"},
    {"role": "tool", "content": "Error: malformed"},
]


def test_full_is_identity_and_does_not_alias():
    out = apply_psi(H, "full")
    assert out == H and out[2] is not H[2]


def test_qwen3_strips_only_think_blocks_of_earlier_turns():
    out = apply_psi(H, "qwen3")
    assert len(out) == len(H)
    assert [m["role"] for m in out] == [m["role"] for m in H]
    for a, b in zip(out, H):
        if b["role"] == "assistant":
            assert "<think>" not in a["content"] and "<tool_call>" in a["content"]
        else:
            assert a == b  # system, question and tool results untouched
    assert out[2]["content"].startswith("first <tool_call>")
    assert H[2]["content"].startswith("<think>plan one</think>")  # input not mutated


def test_truncate_keeps_head_and_last_n_turns():
    out = apply_psi(H, "truncate:1")
    assert out == H[:2] + H[6:]
    assert apply_psi(H, "truncate:0") == H[:2]
    assert apply_psi(H, "truncate:5") == H


def test_summary_digests_all_but_the_last_turn():
    out = apply_psi(H, "summary")
    assert out[:2] == H[:2] and out[-2:] == H[-2:]
    digest = out[2]["content"]
    assert out[2]["role"] == "user" and len(out) == 5
    assert 'search({"query": "a"}) -> result one' in digest
    assert 'python({"code": "print(1)"}) -> 1' in digest
    assert apply_psi(H, "summary") == apply_psi(H, "summary")  # deterministic
    assert apply_psi(H[:4], "summary") == H[:4]  # one turn: nothing to summarise


def test_split_turns_and_bad_psi():
    head, turns = split_turns(H)
    assert head == H[:2] and [len(t) for t in turns] == [2, 2, 2]
    for bad in ("truncate", "truncate:-1", "truncate:x", "fancy"):
        with pytest.raises(ValueError, match="context map"):
            validate_psi(bad)


def test_chat_template_renders_qwen3_layout_and_special_tokens():
    tok = tiny.tokenizer()
    text = tok.apply_chat_template(H[:4], add_generation_prompt=True, tokenize=False)
    assert text.startswith("<|im_start|>system\nsys<|im_end|>\n<|im_start|>user\nQ?<|im_end|>\n")
    assert "<|im_start|>user\n<tool_response>\nresult one\n</tool_response><|im_end|>\n" in text
    assert text.endswith("<|im_start|>assistant\n")
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids) == text
    for special in ("<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "<|im_end|>"):
        assert special in tok.get_vocab()
        assert len(tok.encode(special, add_special_tokens=False)) == 1
    # numbers are cut into 2-digit chunks, the same ones wherever the number stands, so a copy of
    # a number from the question into code or from a tool result into the answer is a token copy
    assert tok.convert_ids_to_tokens(tok.encode("10063", add_special_tokens=False)) == ["10", "06", "3"]
    chunks = tok.encode("10063", add_special_tokens=False)
    for text in (" 10063", "(10063)", "{10063}", "x10063 "):
        ids = tok.encode(text, add_special_tokens=False)
        assert any(ids[i:i + 3] == chunks for i in range(len(ids))), (text, tok.convert_ids_to_tokens(ids))
