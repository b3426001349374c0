"""Shared builders for tests: a tokenizer trained on a small chat corpus, a tiny Qwen3 engine, and a
run directory's inputs (airline tasks and a tiny model directory)."""

from __future__ import annotations

import functools

TEXTS = [
    "Answer each turn. question continue yes no maybe",
    "<think>compute the product</think><tool_call>{\"name\": \"python\", \"arguments\": {\"code\": \"print(347*29)\"}}</tool_call>",
    "The answer is \\boxed{10063}. A shop has 347 boxes with 29 items each.",
    "system user assistant tool search result passage film director born",
] * 8


@functools.lru_cache(maxsize=1)
def tokenizer():
    from rtpo.tokenizer import train_tokenizer

    return train_tokenizer(TEXTS, vocab_size=400)


def engine(seed: int = 0, hidden: int = 64, layers: int = 2, max_position: int = 512, **kw):
    import torch

    from rtpo.engine.local import LocalEngine, build_tiny_qwen3

    torch.set_num_threads(1)
    tok = tokenizer()
    model = build_tiny_qwen3(tok, hidden_size=hidden, num_layers=layers, num_heads=2, num_kv_heads=1,
                             intermediate_size=2 * hidden, max_position=max_position, seed=seed)
    return LocalEngine(model, tok, seed=seed, **kw)


def airline_run_inputs(d):
    """Airline tasks under d/data (6 train, 2 eval) and a tiny Qwen3 with this tokenizer under d/model:
    the inputs of a short `rtpo train` / `rtpo evaluate`. Returns d."""
    from rtpo.data import write_task_files
    from rtpo.engine.local import build_tiny_qwen3

    write_task_files("airline", {"seed": 3, "n_train": 6, "n_eval": 2, "n_expert": 0}, d / "data")
    tok = tokenizer()
    m = build_tiny_qwen3(tok, hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1, intermediate_size=128,
                         max_position=1024)
    m.save_pretrained(d / "model")
    tok.save_pretrained(d / "model")
    return d
