"""Engine throughput, side by side on the same model and batch (not a test; prints figures).

    .venv/bin/python scripts/bench_engine.py [--hidden 128 --layers 2 --batch 16 --new 64 --threads 2] [--breakdown] [--compile]

Prints tokens/s of LocalEngine.sample (rtpo.engine.decoder: batched, preallocated KV cache,
per-token logprobs, per-request counter-based seeds; its prefix cache emptied before each repeat),
of transformers' model.generate on the same contexts (sampling, KV cache, no logprobs), and of
LocalEngine.update (PPO step: forward + backward + AdamW), plus the ratios. --compile also times the
decode steps with `torch.compile(Decoder.step, dynamic=True)` against the eager step (why the engine
does not compile: see the README's performance section).
"""

from __future__ import annotations

import argparse
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--context", type=int, default=120)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--breakdown", action="store_true",
                    help="also time the parts of `sample` (prefill, decode steps) against their floors")
    ap.add_argument("--compile", action="store_true",
                    help="also time the decode steps with torch.compile(Decoder.step) against the eager step")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)

    from rtpo.engine.base import Row, SamplingParams, UpdateConfig
    from rtpo.engine.local import LocalEngine, build_tiny_qwen3
    from rtpo.tokenizer import train_tokenizer

    tok = train_tokenizer(["benchmark text with some words and 0123456789 digits"] * 50, vocab_size=1024)
    model = build_tiny_qwen3(tok, hidden_size=a.hidden, num_layers=a.layers, num_heads=4, num_kv_heads=2,
                             intermediate_size=3 * a.hidden, max_position=1024)
    e = LocalEngine(model, tok, reference=False)
    g = torch.Generator().manual_seed(0)
    ctx = [torch.randint(10, len(tok), (a.context - (i % 7),), generator=g).tolist() for i in range(a.batch)]
    # never stop early, so every path generates exactly batch x new tokens
    e.eos_ids = {-1}
    p = SamplingParams(max_new_tokens=a.new, stop_at_tool_call=False)

    def best(fn):
        ts = []
        for _ in range(a.repeats):
            t0 = time.perf_counter()
            n = fn()
            ts.append(n / (time.perf_counter() - t0))
        return max(ts)

    def ours():
        e.drop_prefix_cache()  # every repeat prefills from scratch, as generate does
        comps = e.sample(ctx, p)
        return sum(len(c.ids) for c in comps)

    def hf():
        L = max(len(c) for c in ctx)
        ids = torch.full((a.batch, L), tok.pad_token_id)
        attn = torch.zeros((a.batch, L), dtype=torch.long)
        for i, c in enumerate(ctx):
            ids[i, L - len(c):] = torch.tensor(c)
            attn[i, L - len(c):] = 1
        with torch.no_grad():
            out = e.rollout_model.generate(input_ids=ids, attention_mask=attn, do_sample=True, max_new_tokens=a.new,
                                           min_new_tokens=a.new, top_k=0, pad_token_id=tok.pad_token_id)
        return (out.shape[1] - L) * a.batch

    comps = e.sample(ctx, p)
    rows = [Row(c, x.ids, x.logprobs, [1.0] * len(x.ids), [1] * len(x.ids)) for c, x in zip(ctx, comps)]

    def upd():
        st = e.update(rows, UpdateConfig(lr=1e-5))
        return st.trained_tokens

    # sample and generate alternate, repeat by repeat, so that load from the rest of the machine
    # falls on both; the ratio is the median of the per-pair ratios
    pairs = []
    for _ in range(a.repeats):
        t0 = time.perf_counter(); n1 = ours(); t1 = time.perf_counter(); n2 = hf(); t2 = time.perf_counter()
        pairs.append((n1 / (t1 - t0), n2 / (t2 - t1)))
    s_ours, s_hf = max(p[0] for p in pairs), max(p[1] for p in pairs)
    ratios = sorted(p[0] / p[1] for p in pairs)
    s_upd = best(upd)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: tiny Qwen3 H{a.hidden} L{a.layers} ({n_params / 1e6:.2f}M params), batch {a.batch}, "
          f"context ~{a.context}, {a.new} new tokens, {a.threads} threads, best of {a.repeats}")
    print(f"LocalEngine.sample   {s_ours:9.0f} tok/s   (with per-token logprobs)")
    print(f"model.generate       {s_hf:9.0f} tok/s   (ratio sample/generate, median of {len(ratios)} alternating "
          f"pairs = {ratios[len(ratios) // 2]:.2f}, range {ratios[0]:.2f}-{ratios[-1]:.2f})")
    print(f"LocalEngine.update   {s_upd:9.0f} trained tok/s (PPO forward+backward+AdamW, plus the pre-update ratio pass)")
    if a.breakdown:
        breakdown(e, tok, ctx, a)
    if a.compile:
        compiled_steps(e, tok, ctx, a)


def decode_steps(dec, ctx, T, pad_id, step, tokens):
    """Prefill ctx into a fresh cache, then time T calls of step(cache, tokens) (the model only, no
    sampling): (seconds, the last step's logits)."""
    from rtpo.engine.decoder import KVStepper

    st = KVStepper(dec)
    st.prefill(ctx, max(len(c) for c in ctx) + T, pad_id)
    t0 = time.perf_counter()
    for _ in range(T):
        logits = step(st.cache, tokens)
    return time.perf_counter() - t0, logits


def breakdown(e, tok, ctx, a) -> None:
    """Where `sample`'s time goes, and the floor of any decoder built from torch's eager CPU kernels:
    the prefill (the same matmuls as generate's) plus the decode steps' matmuls alone."""
    import statistics

    import torch.nn.functional as F

    from rtpo.engine.base import SamplingParams
    from rtpo.engine.decoder import KVStepper

    dec, B, T = e._decoder, len(ctx), a.new
    L = max(len(c) for c in ctx)
    ids = torch.full((B, L), tok.pad_token_id)
    attn = torch.zeros((B, L), dtype=torch.long)
    for i, c in enumerate(ctx):
        ids[i, L - len(c):] = torch.tensor(c)
        attn[i, L - len(c):] = 1

    def med(fn, n=7):
        ts = []
        for _ in range(n):
            t0 = time.perf_counter()
            r = fn()
            ts.append(r if isinstance(r, float) else time.perf_counter() - t0)
        return statistics.median(ts) * 1e3

    def sample():
        e.drop_prefix_cache()
        e.sample(ctx, SamplingParams(max_new_tokens=T, stop_at_tool_call=False))

    def prefill():
        KVStepper(dec).prefill(ctx, L + T, tok.pad_token_id)

    def hf_prefill():
        with torch.no_grad():
            e.rollout_model(input_ids=ids, attention_mask=attn, position_ids=(attn.cumsum(-1) - 1).clamp(min=0),
                            use_cache=True, logits_to_keep=1)

    def steps():   # T decode steps, the model only (no sampling)
        return decode_steps(dec, ctx, T, tok.pad_token_id, dec.step, torch.zeros(B, dtype=torch.long))[0]

    H = e.rollout_model.config.hidden_size
    h, m = torch.randn(B, H), torch.randn(B, dec.inter)
    att = torch.randn(B, dec.n_heads * dec.head_dim)

    def matmuls():   # the matmuls of T decode steps, nothing else
        for _ in range(T):
            for ly in dec.layers:
                torch.mm(h, ly.qkv_t); torch.mm(att, ly.o_t); torch.mm(h, ly.gate_up_t); torch.mm(m, ly.down_t)
            torch.mm(h, dec.head_t)

    st = KVStepper(dec)
    st.prefill(ctx, L + T, tok.pad_token_id)
    q = torch.randn(B, dec.n_kv, dec.n_heads // dec.n_kv, dec.head_dim)
    K, V = st.cache.k[0][:, :, :L + T // 2], st.cache.v[0][:, :, :L + T // 2]
    mask = torch.zeros(B, 1, 1, K.shape[2])

    def attention():   # the attention calls of T decode steps at the mean key length
        for _ in range(T):
            for _ in dec.layers:
                F.scaled_dot_product_attention(q, K, V, attn_mask=mask, scale=dec.scale)

    r = {k: med(fn) for k, fn in [("sample", sample), ("prefill", prefill), ("generate's prefill", hf_prefill),
                                  ("decode steps (model only)", steps), ("their matmuls alone", matmuls),
                                  ("their attention alone", attention)]}
    print(f"\nbreakdown, median of 7 (ms): " + ", ".join(f"{k} {v:.1f}" for k, v in r.items()))
    rest = r["sample"] - r["prefill"] - r["decode steps (model only)"]
    other = r["decode steps (model only)"] - r["their matmuls alone"] - r["their attention alone"]
    floor = r["prefill"] + r["their matmuls alone"]
    print(f"  differences of medians (noisy): sampling and bookkeeping {rest:.1f} ms; the decode steps' ops other than "
          f"matmuls and attention {other:.1f} ms; prefill + decode matmuls = {floor:.1f} ms")


def compiled_steps(e, tok, ctx, a) -> None:
    """T decode steps of the model (no sampling) with the eager `Decoder.step` and with
    torch.compile(Decoder.step, dynamic=True) (inductor's C++ kernels; one graph break at the step's
    host-side max length), alternating; the compile time of the first call; the largest logit difference."""
    import logging
    import statistics

    torch._logging.set_logs(dynamo=logging.ERROR)   # the graph break is expected; no warning per call site
    dec, B, T = e._decoder, len(ctx), a.new
    t = torch.randint(10, len(tok), (B,), generator=torch.Generator().manual_seed(0))
    eager, compiled = dec.step, torch.compile(dec.step, dynamic=True)

    def steps(fn):
        return decode_steps(dec, ctx, T, tok.pad_token_id, fn, t)

    t0 = time.perf_counter()
    steps(compiled)
    first = time.perf_counter() - t0
    te, tc = [], []
    for r in range(2 * a.repeats):
        order = (eager, compiled) if r % 2 else (compiled, eager)
        res = {fn: steps(fn) for fn in order}
        te.append(res[eager][0]); tc.append(res[compiled][0])
    diff = float((res[eager][1] - res[compiled][1]).abs().max())
    me, mc = statistics.median(te) * 1e3, statistics.median(tc) * 1e3
    print(f"\n{T} decode steps, median of {len(te)} alternating: eager {me:.1f} ms, torch.compile {mc:.1f} ms "
          f"(eager / compiled {me / mc:.2f}); first compiled call {first:.1f} s (compile included); "
          f"last logits max |diff| {diff:.1e}")


if __name__ == "__main__":
    main()
