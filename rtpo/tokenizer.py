"""Tokenizer of the embedded model: byte-level BPE trained on the task corpus, Qwen3-style chat.

One rendering path serves every model: `tokenizer.apply_chat_template(messages, ...)`. The template
below reproduces Qwen3's ChatML layout for system/user/assistant turns and wraps tool results in
`<tool_response>` inside a user turn, as Qwen3 does.

Numbers are cut into chunks of at most two digits, left to right, never merged with a neighbouring
space or symbol ("5166" -> "51" "66" wherever it appears: in the question, in code, in a tool
result). Copying a number between question, code, tool output and answer is then a copy of a few
tokens from a 100-symbol alphabet, which a small model learns with the induction heads its copy
pre-training forms (rtpo.sft.copy_pretrain). Qwen splits digits one per token; with 10 symbols a
copy has to track its position inside the number ("5166" -> "51666..."), and the 0.6M-parameter
embedded model never learned that within the CPU budget (loss on digit tokens stayed at log 10).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

SPECIAL_TOKENS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>",
    "<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>",
]

CHAT_TEMPLATE = (
    "{%- for m in messages -%}"
    "{%- if m['role'] == 'tool' -%}"
    "{{ '<|im_start|>user\n<tool_response>\n' + m['content'] + '\n</tool_response><|im_end|>\n' }}"
    "{%- else -%}"
    "{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\n' }}{%- endif -%}"
)


def train_tokenizer(texts: Iterable[str], vocab_size: int = 2048):
    """Train a byte-level BPE on `texts`; return a transformers PreTrainedTokenizerFast."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\p{N}{1,2}"), behavior="isolated"),  # numbers: 2-digit chunks
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        additional_special_tokens=SPECIAL_TOKENS[3:],
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.model_max_length = 1 << 20
    return fast


def save_tokenizer(tok, out_dir: str | Path) -> None:
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(out_dir)


def load_tokenizer(path: str | Path):
    from transformers import AutoTokenizer

    p = Path(path)
    if not p.is_dir():
        raise FileNotFoundError(f"tokenizer directory not found: {p}")
    try:
        return AutoTokenizer.from_pretrained(p)
    except Exception as e:  # noqa: BLE001 - tokenizers' own error types for a truncated or damaged file
        files = ", ".join(str(f) for f in sorted(p.glob("*")) if f.is_file()) or "(no files)"
        raise ValueError(f"{p}: the tokenizer cannot be loaded ({type(e).__name__}: {e}); its files: {files}") from None


def render(tokenizer, messages: list[dict], add_generation_prompt: bool = True) -> str:
    return tokenizer.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, tokenize=False)


def encode(tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False)
