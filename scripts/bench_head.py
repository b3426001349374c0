"""Output head on selected positions vs on every position, side by side (not a test; prints figures).

    .venv/bin/python scripts/bench_head.py [--hidden 128 --layers 2 --vocab 2048 --context 400 --response 60]

Scoring (LocalEngine.logprobs, forward only) and an SFT step (rtpo.sft.labelled_loss, forward +
backward) each run both ways on the same batch, alternating, `--repeats` times; prints the median
seconds and the ratio full / selected. The two ways give the same numbers (tests/test_engine.py,
tests/test_train.py); this script measures only what skipping the unused logits saves.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--context", type=int, default=400, help="context tokens per row (multi-turn history)")
    ap.add_argument("--response", type=int, default=60, help="scored / labelled tokens per row (one action)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)

    from rtpo.engine.local import LocalEngine, build_tiny_qwen3
    from rtpo.sft import labelled_loss
    from rtpo.tokenizer import train_tokenizer

    import random

    rng = random.Random(0)  # random words: enough distinct merges for the byte-level BPE to reach --vocab
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 8))) for _ in range(40000)]
    tok = train_tokenizer([" ".join(words[i:i + 50]) for i in range(0, len(words), 50)], vocab_size=a.vocab)
    model = build_tiny_qwen3(tok, hidden_size=a.hidden, num_layers=a.layers, num_heads=4, num_kv_heads=2,
                             intermediate_size=3 * a.hidden, max_position=2048)
    e = LocalEngine(model, tok, reference=False)
    g = torch.Generator().manual_seed(0)
    ctx = [torch.randint(10, len(tok), (a.context,), generator=g).tolist() for _ in range(a.batch)]
    resp = [torch.randint(10, len(tok), (a.response,), generator=g).tolist() for _ in range(a.batch)]

    def score_full():
        with torch.no_grad():
            ids = torch.tensor([c + r for c, r in zip(ctx, resp)])
            logits = model(input_ids=ids).logits[:, a.context - 1:-1].float()
            torch.log_softmax(logits, -1).gather(-1, torch.tensor(resp)[:, :, None])

    def score_selected():
        e.logprobs(ctx, resp, max_tokens=10 ** 9)

    ids = torch.tensor([c + r for c, r in zip(ctx, resp)])
    attn = torch.ones_like(ids)
    labels = ids.clone()
    labels[:, :a.context] = -100

    def sft_full():
        model.zero_grad(set_to_none=True)
        model(input_ids=ids, attention_mask=attn, labels=labels).loss.backward()

    def sft_selected():
        model.zero_grad(set_to_none=True)
        labelled_loss(model, ids, attn, labels).backward()

    print(f"model H{a.hidden} L{a.layers} vocab {len(tok)}; batch {a.batch} x ({a.context} context + "
          f"{a.response} scored) tokens; {a.threads} thread(s); median of {a.repeats}")
    for name, full, sel in (("scoring (logprobs)", score_full, score_selected), ("SFT step (fwd+bwd)", sft_full, sft_selected)):
        full(); sel()  # warm-up
        tf, ts = [], []
        for _ in range(a.repeats):  # alternate, so drift on a shared machine hits both alike
            t0 = time.perf_counter(); full(); tf.append(time.perf_counter() - t0)
            t0 = time.perf_counter(); sel(); ts.append(time.perf_counter() - t0)
        mf, ms = statistics.median(tf), statistics.median(ts)
        print(f"{name:20s} full head {mf * 1e3:8.1f} ms   selected {ms * 1e3:8.1f} ms   ratio {mf / ms:5.2f}x")


if __name__ == "__main__":
    main()
