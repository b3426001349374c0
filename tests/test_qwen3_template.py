"""Qwen3's official chat template against the rollout's prefix property.

The fixture tests/fixtures/qwen3/chat_template.jinja is the `chat_template` of Qwen/Qwen3-8B's
tokenizer_config.json (https://huggingface.co/Qwen/Qwen3-8B, revision
895c8d171bc03c30e113cd7a28c02494b5e068b7; licence Apache-2.0, Copyright Alibaba Cloud / the Qwen
team). The hub is not reachable here, so the text was taken from stored public copies and checked
three ways: (1) its assistant branch is, line for line, the one SkyRL quotes from that revision
(tyler-griggs/SkyRL, skyrl-train/skyrl_train/utils/templates/README.md); (2) the rest is
llama.cpp's stored copy of the Qwen3 template (models/templates/Qwen-Qwen3-0.6B.jinja, the family's
first revision), which differs from it only in the `is string` guards on message contents;
(3) `test_fixture_renders_as_qwen3_8b` reproduces a rendering recorded from the real Qwen/Qwen3-8B
tokenizer (HarryMayne/qwen_3_chat_templates, usage_example.ipynb: token ids 151644 <|im_start|>,
77091 "assistant", 198 "\\n", 151667 <think>, 271 "\\n\\n", 151668 </think>, 151645 <|im_end|>).
The template file is kept byte for byte; nothing in it is ours.

What is checked: rollout.py builds canonical full-history ids by concatenation (full_{k+1} = full_k +
a_k + between_k, `between_text`), with envs, tools and psi exactly as at paper scale (Qwen3-8B
with thinking on, psi = qwen3), on multi-turn tool histories with <think> blocks, under psi = full
and psi = qwen3. Qwen3's template re-renders an assistant turn's think block ("<think>\\n" +
reasoning.strip("\\n") + "\\n</think>\\n\\n" + answer.lstrip("\\n"); an empty one is dropped from all
but the last turn; text before <think> is dropped), so for outputs not already in that form the
rendered history is not a prefix of the next one; the rollout must still give the same between
text (turn close, tool results, generation prompt) and must not fail.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from rtpo.context import apply_psi
from rtpo.engine.base import Completion, SamplingParams
from rtpo.envs.base import Task
from rtpo.rollout import Roller, Start, between_text
from tests.helpers import tiny

FIXTURE = Path(__file__).parent / "fixtures" / "qwen3" / "chat_template.jinja"
CALL = '<tool_call>{"name": "python", "arguments": {"code": "print(%s)"}}</tool_call>'


@pytest.fixture(scope="module")
def tok():
    t = copy.deepcopy(tiny.tokenizer())  # the cached test tokenizer is shared: never mutate it
    t.chat_template = FIXTURE.read_text()
    return t


def render(tok, messages, **kw):
    return tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, **kw)


def test_fixture_renders_as_qwen3_8b(tok):
    """The conversation and ids recorded from Qwen/Qwen3-8B's tokenizer (module docstring, (3)):
    the earlier assistant turn without a think block, the last one with an empty one; thinking on
    (enable_thinking undefined, as the Roller renders, or True) opens no think block in the generation
    prompt, thinking off closes an empty one."""
    conv = [{"role": "user", "content": "Hello assistant"}, {"role": "assistant", "content": "Hello user"},
            {"role": "user", "content": "How are you?"}, {"role": "assistant", "content": "I'm good"}]
    assert tok.apply_chat_template(conv, tokenize=False) == (
        "<|im_start|>user\nHello assistant<|im_end|>\n<|im_start|>assistant\nHello user<|im_end|>\n"
        "<|im_start|>user\nHow are you?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nI'm good<|im_end|>\n")
    head = [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}]
    on = render(tok, head)
    assert on == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\n"
    assert render(tok, head, enable_thinking=True) == on
    assert render(tok, head, enable_thinking=False) == on + "<think>\n\n</think>\n\n"
    # earlier turns keep their reasoning while the same user query is being answered with tools (the
    # multi-step tool case psi = qwen3 strips), and lose it once a new user query follows
    r = [{"role": "assistant", "content": "<think>\nR\n</think>\n\n" + CALL % 1}, {"role": "tool", "content": "1"}]
    assert "<think>\nR\n</think>" in render(tok, head + r)
    assert "<think>" not in render(tok, head + r + [{"role": "user", "content": "next"}])


# the model's outputs for one turn: Qwen3's canonical form, and forms its template re-renders
CANONICAL = "<think>\nI should compute it.\n</think>\n\n"
FORMS = {
    "canonical": CANONICAL,
    "compact": "<think>I should compute it.</think>",
    "one_newline": "<think>I should compute it.</think>\n",
    "empty_think": "<think>\n\n</think>\n\n",
    "text_before_think": "Let me see. <think>\nI should compute it.\n</think>\n\n",
    "no_think": "",
    "unclosed_think": "<think>still thinking, then a tool call anyway ",
}


def test_between_text_is_the_template_text_after_the_turn_for_every_think_form(tok):
    """between_text on a tool turn: whatever form the turn's think block has, the between text is the
    turn close, the tool result as the template renders it, and the generation prompt; for the
    canonical form the rendered history is a prefix of the next one (the strict path)."""
    head = [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}]
    obs = [{"role": "tool", "content": "42"}]
    want = "<|im_end|>\n<|im_start|>user\n<tool_response>\n42\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    for name, think in FORMS.items():
        content = think + CALL % "6*7"
        between, after = between_text(tok, head, content, obs, False, "<|im_end|>")
        assert between == want, name
        assert after == render(tok, head + [{"role": "assistant", "content": content}] + obs), name
        if name in ("canonical", "no_think", "unclosed_think"):
            assert after == render(tok, head) + content + between, name  # the prefix property itself
        else:
            assert after != render(tok, head) + content + between, name  # the template re-rendered the turn
    # a final answer that ended with <|im_end|>: the sampled stop token is not repeated
    b, _ = between_text(tok, head, CANONICAL + "done", obs, True, "<|im_end|>")
    assert b == want[len("<|im_end|>"):]


class Scripted:
    """An engine that 'samples' scripted turns (with the stop token a real sampler keeps)."""

    def __init__(self, tok, turns: list[str]):
        self.tokenizer, self.max_context, self.weight_version = tok, 1 << 16, 0
        self.turns, self.contexts = list(turns), []
        self.eos = tok.convert_tokens_to_ids("<|im_end|>")

    def sample(self, contexts, params, seeds=None):
        out = []
        for c in contexts:
            self.contexts.append(list(c))
            text = self.turns.pop(0)
            ids = self.tokenizer.encode(text, add_special_tokens=False)
            stop = "tool_call" if text.endswith("</tool_call>") else "eos"
            ids = ids if stop == "tool_call" else ids + [self.eos]
            out.append(Completion(ids=ids, logprobs=[0.0] * len(ids), stop_reason=stop))
        return out


@pytest.mark.parametrize("psi", ["full", "qwen3"])
@pytest.mark.parametrize("form", ["canonical", "compact", "empty_think", "text_before_think"])
def test_multi_turn_tool_rollout_with_think_blocks(tok, psi, form):
    """A three-turn math episode (two real python-sandbox calls, then the boxed answer) through the
    Roller with Qwen3's template and thinking on: every turn's between text is what the template
    writes after it; full_ids is the concatenation of the initial render, the sampled actions and
    the between texts (under psi = full also the ids each turn was sampled from); under psi = qwen3
    each c_k is the template's render of the history with earlier <think> blocks stripped, and for
    canonical outputs the concatenation is the template's render of the whole history."""
    from rtpo.envs import make_env

    think = FORMS[form]
    turns = [think + CALL % "7708 - 265", think + CALL % "7443 + 1", think + "The answer is \\boxed{7443}."]
    eng = Scripted(tok, turns)
    roller = Roller(eng, lambda t: make_env(t, max_turns=3), psi, SamplingParams(max_new_tokens=64))
    task = Task(id="m0", kind="math", question="A farm has 7708 eggs. It sells 265 eggs. How many eggs does it have now?",
                answers=["7443"])
    traj = roller.run([Start(task)])[0]
    assert [t.stop_reason for t in traj.turns] == ["tool_call", "tool_call", "eos"] and traj.done
    assert traj.reward == 1.0 and traj.tool_calls == 2 and traj.turns[0].observations[0]["content"].strip() == "7443"
    text = tok.decode(traj.full_ids, skip_special_tokens=False)
    # the concatenation, piece by piece: initial render, then per turn the action and the between text
    pieces = [render(tok, traj.boundaries[0].messages)]
    for k, turn in enumerate(traj.turns):
        pieces.append(turns[k] + ("" if turn.stop_reason == "tool_call" else "<|im_end|>"))
        if k + 1 < len(traj.turns):
            pieces.append("<|im_end|>\n<|im_start|>user\n<tool_response>\n" + turn.observations[0]["content"]
                          + "\n</tool_response><|im_end|>\n<|im_start|>assistant\n")
    assert text == "".join(pieces)
    for k, b in enumerate(traj.boundaries):
        assert traj.full_ids[:traj.action_spans[k][0]] == b.full_ids
        assert traj.full_ids[slice(*traj.action_spans[k])] == traj.turns[k].action_ids
        sampled_from = eng.contexts[k]
        assert sampled_from == traj.turns[k].context_ids == b.context_ids
        ctx_text = tok.decode(sampled_from, skip_special_tokens=False)
        assert ctx_text.endswith("<|im_start|>assistant\n")  # thinking on: no empty think block is opened
        if psi == "full":
            assert sampled_from == b.full_ids
        else:
            assert sampled_from == tok.encode(render(tok, apply_psi(b.messages, "qwen3")), add_special_tokens=False)
            assert "I should compute it." not in ctx_text  # earlier reasoning is not in c_k
    if form == "canonical":
        # the prefix property: the concatenation is exactly the template's render of the whole history
        assert text + "\n" == tok.apply_chat_template(traj.messages, tokenize=False)


def test_rtpo_rows_bound_the_context_only_so_long_thinking_reaches_turn_k(tok):
    """Issue 37.1: RTPO's rows are (c_k, turn k), so under psi = qwen3 only c_k (earlier <think>
    blocks stripped) must fit; the full history, which keeps every think block, may grow past the
    bound. A long-thinking three-turn episode under a bound that c_k always fits but the full history
    passes at turn 2: the turn-row roller reaches turn K = 3 and the answer; the flat-row roller (the
    baselines, whose rows hold the full history) ends it with context_overflow. With the bound
    applied to the full history for both (the code before the fix), RTPO was cut like the baselines."""
    from rtpo.envs import make_env
    from rtpo.instrument import StepLog

    think = "<think>\n" + "Let me think about this carefully. " * 60 + "\n</think>\n\n"
    turns = [think + CALL % "7708 - 265", think + CALL % "7443 + 1", think + "The answer is \\boxed{7443}."]
    task = Task(id="m0", kind="math", question="A farm has 7708 eggs. It sells 265 eggs. How many eggs does it have now?",
                answers=["7443"])

    def roll(rows: str, bound: int):
        roller = Roller(Scripted(tok, turns), lambda t: make_env(t, max_turns=3), "qwen3",
                        SamplingParams(max_new_tokens=512), max_context=bound, rows=rows)
        return roller.run([Start(task)])[0]

    free = roll("flat", 1 << 16)   # no bound reached: the lengths the bound is set between
    longest_context = max(len(b.context_ids) for b in free.boundaries)
    last_history = len(free.boundaries[-1].full_ids)
    assert longest_context + 200 < last_history  # the think blocks make the full history much longer
    bound = longest_context + 100                # c_k always fits; the full history at turn 2 does not

    rtpo = roll("turn", bound)
    assert len(rtpo.turns) == 3 and rtpo.reward == 1.0 and not rtpo.info.get("context_overflow")
    flat = roll("flat", bound)
    assert len(flat.turns) < 3 and flat.reward == 0.0 and flat.info.get("context_overflow")
    # the step record counts the cut rollouts
    stats = StepLog()
    stats.add_trajectories([rtpo, flat])
    assert stats.record([rtpo, flat], n_prompts=1)["context_overflow"] == 0.5
