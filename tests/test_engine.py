"""The engine seam on the real tiny Qwen3 model (what the engine must do, on real weights)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rtpo.engine.base import Row, SamplingParams, UpdateConfig
from tests.helpers import tiny

ROOT = Path(__file__).resolve().parent.parent


def contexts(tok):
    msgs = [{"role": "system", "content": "Answer each turn."}, {"role": "user", "content": "question"}]
    base = tok.encode(tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False))
    # mixed lengths: left padding differs per row
    return [base, base[:7], base + tok.encode("continue yes no maybe"), base[:3]]


def test_sample_logprobs_equal_recomputed_logprobs_fp32():
    e = tiny.engine()
    ctx = contexts(e.tokenizer)
    for temp in (1.0, 0.7):
        comps = e.sample(ctx, SamplingParams(max_new_tokens=24, temperature=temp), seeds=[1, 2, 3, 4])
        assert len({len(c.ids) for c in comps}) >= 1 and all(c.ids for c in comps)
        assert all(len(c.ids) == len(c.logprobs) for c in comps)
        re = e.logprobs(ctx, [c.ids for c in comps], temperature=temp, weights="inference")
        worst = max(abs(a - b) for c, r in zip(comps, re) for a, b in zip(c.logprobs, r))
        assert worst < 1e-5, worst


def test_logprobs_equal_a_plain_full_forward():
    """engine.logprobs (head on response positions only) = log_softmax of the model's own full
    logits at those positions, one sequence at a time (no padding)."""
    from rtpo.engine.local import decoder_and_head

    e = tiny.engine(seed=5)
    ctx = contexts(e.tokenizer)
    g = torch.Generator().manual_seed(0)
    resp = [torch.randint(5, len(e.tokenizer), (n,), generator=g).tolist() for n in (3, 9, 1, 6)]
    got = e.logprobs(ctx, resp, temperature=0.7)
    with torch.no_grad():
        for c, r, lp in zip(ctx, resp, got):
            logits = e.model(input_ids=torch.tensor([c + r])).logits[0, len(c) - 1:-1] / 0.7
            want = torch.log_softmax(logits, -1).gather(-1, torch.tensor(r)[:, None]).squeeze(-1)
            assert torch.allclose(torch.tensor(lp), want, atol=1e-5), (lp, want)
    e.model.config.final_logit_softcapping = 30.0  # a model that post-processes its logits is refused
    with pytest.raises(ValueError, match="final_logit_softcapping"):
        decoder_and_head(e.model)


def test_stop_reasons_and_length_limit():
    e = tiny.engine()
    comps = e.sample(contexts(e.tokenizer), SamplingParams(max_new_tokens=5), seeds=[0, 1, 2, 3])
    for c in comps:
        assert c.stop_reason in {"eos", "tool_call", "length"}
        assert len(c.ids) <= 5
        if c.stop_reason == "length":
            assert len(c.ids) == 5
        if c.stop_reason == "eos":
            assert c.ids[-1] in e.eos_ids
        if c.stop_reason == "tool_call":
            assert c.ids[-1] == e.tool_close_id
        # a row stops at its first stop token: none before the last token, and a row that ran to its
        # budget did not end on one
        assert not set(c.ids[:-1]) & (set(e.eos_ids) | {e.tool_close_id})
        if c.stop_reason == "length":
            assert c.ids[-1] not in set(e.eos_ids) | {e.tool_close_id}


def test_same_seed_same_samples_different_seed_differs():
    e = tiny.engine()
    ctx = contexts(e.tokenizer)
    p = SamplingParams(max_new_tokens=16)
    a = e.sample(ctx, p, seeds=[5, 6, 7, 8])
    b = e.sample(ctx, p, seeds=[5, 6, 7, 8])
    c = e.sample(ctx, p, seeds=[50, 60, 70, 80])
    assert [x.ids for x in a] == [x.ids for x in b]
    assert [x.ids for x in a] != [x.ids for x in c]


def test_masked_tokens_get_exactly_zero_gradient():
    e = tiny.engine()
    ctx = contexts(e.tokenizer)[:2]
    comps = e.sample(ctx, SamplingParams(max_new_tokens=10, stop_at_tool_call=False), seeds=[1, 2])
    rows = []
    for c, comp in zip(ctx, comps):
        n = len(comp.ids)
        mask = [1 if i % 2 == 0 else 0 for i in range(n)]
        rows.append(Row(c, comp.ids, comp.logprobs, [1.0] * n, mask))
    grads = e.token_gradients(rows, UpdateConfig())
    for r, g in zip(rows, grads):
        for m, gi in zip(r.mask, g):
            if m == 0:
                assert gi == 0.0
            else:
                assert gi != 0.0


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_advantage_sign_moves_logprob(sign):
    e = tiny.engine()
    ctx = contexts(e.tokenizer)
    comps = e.sample(ctx, SamplingParams(max_new_tokens=8), seeds=[1, 2, 3, 4])
    rows = [Row(c, x.ids, x.logprobs, [sign] * len(x.ids), [1] * len(x.ids)) for c, x in zip(ctx, comps)]
    before = sum(map(sum, e.logprobs(ctx, [x.ids for x in comps])))
    stats = e.update(rows, UpdateConfig(lr=1e-3))
    after = sum(map(sum, e.logprobs(ctx, [x.ids for x in comps])))
    assert abs(stats.ratio_mean - 1.0) < 1e-5  # sampled and trained on the same weights
    assert (after - before) * sign > 0


def test_sync_and_versions():
    e = tiny.engine()
    ctx = contexts(e.tokenizer)
    comps = e.sample(ctx, SamplingParams(max_new_tokens=8), seeds=[1, 2, 3, 4])
    rows = [Row(c, x.ids, x.logprobs, [1.0] * len(x.ids), [1] * len(x.ids)) for c, x in zip(ctx, comps)]
    e.update(rows, UpdateConfig(lr=1e-3))
    assert e.train_version == 1 and e.weight_version == 0
    inf = e.logprobs(ctx, [x.ids for x in comps], weights="inference")
    assert max(abs(a - b) for c, r in zip(comps, inf) for a, b in zip(c.logprobs, r)) < 1e-5  # inference lags
    # a second update from the lagging samples measures ratio != 1
    stats = e.update(rows, UpdateConfig(lr=1e-3))
    assert abs(stats.ratio_mean - 1.0) > 1e-4
    e.sync()
    assert e.weight_version == 1
    tr = e.logprobs(ctx, [x.ids for x in comps])
    inf = e.logprobs(ctx, [x.ids for x in comps], weights="inference")
    assert tr == inf


def test_kl_and_microbatches_match_single_batch():
    cfg_small = UpdateConfig(lr=1e-3, kl_coef=0.1, micro_batch_tokens=40)
    cfg_big = UpdateConfig(lr=1e-3, kl_coef=0.1, micro_batch_tokens=100000)
    results = []
    for cfg in (cfg_small, cfg_big):
        e = tiny.engine(seed=3)
        ctx = contexts(e.tokenizer)
        comps = e.sample(ctx, SamplingParams(max_new_tokens=8), seeds=[1, 2, 3, 4])
        rows = [Row(c, x.ids, x.logprobs, [0.5] * len(x.ids), [1] * len(x.ids)) for c, x in zip(ctx, comps)]
        e.update(rows, cfg)
        rows2 = [Row(c, x.ids, x.logprobs, [0.5] * len(x.ids), [1] * len(x.ids)) for c, x in zip(ctx, comps)]
        st = e.update(rows2, cfg)
        assert st.kl_ref > 0
        results.append(torch.cat([p.detach().flatten() for p in e.model.parameters()]))
    assert torch.allclose(results[0], results[1], atol=1e-5)  # gradient accumulation == one big batch


def test_bad_inputs_have_clear_errors(tmp_path):
    from rtpo.engine.local import LocalEngine

    e = tiny.engine(max_position=64)
    with pytest.raises(ValueError, match="empty batch"):
        e.sample([], SamplingParams())
    with pytest.raises(ValueError, match="context 1 is empty"):
        e.sample([[1, 2], []], SamplingParams())
    with pytest.raises(ValueError, match="at most 64"):
        e.sample([[5] * 100], SamplingParams())
    with pytest.raises(FileNotFoundError, match="model directory not found"):
        LocalEngine.from_pretrained(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no config.json"):
        LocalEngine.from_pretrained(tmp_path / "empty")
    with pytest.raises(ValueError, match="3 entries, response has 2"):
        Row([1], [2, 3], [0.0, 0.0, 0.0], [1.0, 1.0], [1, 1])


def test_export_and_reload_roundtrip(tmp_path):
    from rtpo.engine.local import LocalEngine

    e = tiny.engine()
    e.export(tmp_path / "m")
    e2 = LocalEngine.from_pretrained(tmp_path / "m")
    ctx = contexts(e.tokenizer)
    comps = e.sample(ctx, SamplingParams(max_new_tokens=6), seeds=[1, 2, 3, 4])
    assert e.logprobs(ctx, [c.ids for c in comps]) == e2.logprobs(ctx, [c.ids for c in comps])


RUN = """
import os, signal, sys, torch
sys.path.insert(0, {root!r})
from tests.helpers import tiny
from rtpo.engine.base import Row, SamplingParams, UpdateConfig
ckpt, steps, kill_at, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
e = tiny.engine(seed=11)
start = 0
if os.path.exists(os.path.join(ckpt, "engine.pt")):
    e.load(ckpt); start = e.train_version
ctx = [[1, 5, 9, 12], [1, 7], [1, 3, 4, 5, 6, 7]]
for step in range(start, steps):
    comps = e.sample(ctx, SamplingParams(max_new_tokens=6))      # seeds from the engine's stream
    rows = [Row(c, x.ids, x.logprobs, [1.0 if step % 2 else -1.0] * len(x.ids), [1] * len(x.ids)) for c, x in zip(ctx, comps)]
    e.update(rows, UpdateConfig(lr=1e-3))
    e.sync()
    e.save(ckpt)
    if step + 1 == kill_at:
        os.kill(os.getpid(), signal.SIGKILL)
torch.save({{k: v.clone() for k, v in e.model.state_dict().items()}}, out)
"""


def test_resume_after_sigkill_is_bit_identical(tmp_path):
    script = tmp_path / "run.py"
    script.write_text(RUN.format(root=str(ROOT)))
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    ref = subprocess.run([sys.executable, str(script), str(tmp_path / "a"), "5", "-1", str(tmp_path / "a.pt")],
                         env=env, capture_output=True, text=True)
    assert ref.returncode == 0, ref.stderr
    killed = subprocess.run([sys.executable, str(script), str(tmp_path / "b"), "5", "2", str(tmp_path / "b.pt")],
                            env=env, capture_output=True, text=True)
    assert killed.returncode == -signal.SIGKILL
    assert not (tmp_path / "b.pt").exists()
    resumed = subprocess.run([sys.executable, str(script), str(tmp_path / "b"), "5", "-1", str(tmp_path / "b.pt")],
                             env=env, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    a, b = torch.load(tmp_path / "a.pt"), torch.load(tmp_path / "b.pt")
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)


# ---------------------------------------------------------------- the fast sampler and shared-prompt scoring
def test_decoder_logits_equal_the_models_forward():
    """rtpo.engine.decoder's prefill + decode steps give the model's own logits (one sequence at a
    time, no padding) for ragged batches: the arithmetic is transformers' Qwen3, not an approximation."""
    from rtpo.engine import decoder as D

    e = tiny.engine(seed=3)
    ctx = contexts(e.tokenizer)
    dec = D.Decoder(e.rollout_model)
    step = D.KVStepper(dec)
    logits = step.prefill(ctx, capacity=max(map(len, ctx)) + 4, pad_id=e.pad_id)
    nxt = torch.tensor([5, 6, 7, 8])
    logits2 = step.step(nxt)
    with torch.no_grad():
        for i, c in enumerate(ctx):
            full = e.rollout_model(input_ids=torch.tensor([c + [int(nxt[i])]])).logits[0]
            assert torch.allclose(logits[i], full[-2], atol=1e-5)
            assert torch.allclose(logits2[i], full[-1], atol=1e-5)


def _gemm_rows_stable() -> bool:
    """Does this CPU's GEMM give a row the same bits whatever the number of rows (>= 32)? MKL's AVX-512
    kernels do; its AVX2 and SSE kernels do not (MKL_ENABLE_INSTRUCTIONS=AVX2 shows it)."""
    g = torch.Generator().manual_seed(0)
    for n, k in ((96, 64), (302, 128)):
        h, w = torch.randn(600, k, generator=g), torch.randn(n, k, generator=g)
        full = h @ w.t()
        if not all(torch.equal(h[i:i + c] @ w.t(), full[i:i + c]) for c in (33, 47, 131, 295) for i in (0, c, 200)):
            return False
    return True


def test_prefill_in_row_chunks_is_bit_for_bit_one_pass():
    """Decoder.forward prefills long batches in row chunks (cache-sized); logits, every K/V written and
    the decode steps after it are those of one pass over all rows, also on top of a cached prefix, and
    the chunked pass did run in several chunks. Bit for bit where the GEMM's rows do not depend on the
    row count (AVX-512 MKL, where the DAG's numbers were measured); within float rounding elsewhere."""
    from rtpo.engine import decoder as D

    same = torch.equal if _gemm_rows_stable() else (lambda a, b: torch.allclose(a, b, rtol=1e-5, atol=1e-5))

    e = tiny.engine(seed=3)
    one, chunked = D.Decoder(e.rollout_model), D.Decoder(e.rollout_model)
    one.PREFILL_CHUNK_TOKENS = 10**9
    chunked.PREFILL_CHUNK_TOKENS = 100            # 2 rows of 40-48 padded tokens per chunk
    calls = []
    orig = chunked._forward_rows
    chunked._forward_rows = lambda *a, **k: calls.append(a[1].shape[0]) or orig(*a, **k)
    g = torch.Generator().manual_seed(0)
    V = e.rollout_model.config.vocab_size
    for pre in (0, 16):
        n_new = torch.randint(33, 49, (7,), generator=g)
        toks = torch.randint(3, V, (7, int(n_new.max())), generator=g)
        out = []
        for dec in (one, chunked):
            c = dec.new_cache(7, pre + toks.shape[1] + 3)
            c.lens = torch.full((7,), pre, dtype=torch.long)
            for t in c.k + c.v:   # a prefix already in the cache
                t[:, :, :pre] = torch.randn(t[:, :, :pre].shape, generator=torch.Generator().manual_seed(1))
            logits = dec.forward(c, toks, n_new)
            steps = [dec.step(c, toks[:, i]) for i in range(3)]
            out.append((logits, c, steps))
        (l1, c1, s1), (l2, c2, s2) = out
        assert same(l1, l2) and torch.equal(c1.lens, c2.lens) and torch.equal(c1.lens, pre + n_new + 3)
        assert all(same(a, b) for a, b in zip(c1.k + c1.v, c2.k + c2.v))
        assert all(same(a, b) for a, b in zip(s1, s2))
    assert calls == [2, 2, 2, 1] * 2


def test_identical_contexts_prefilled_once_and_sample_independent_of_the_batch():
    """G siblings of one context are prefilled once (counted), and a request's sample depends on its
    seed and context only: alone, or among other requests in another order, it is the same."""
    e = tiny.engine(seed=1)
    ctx = contexts(e.tokenizer)
    p = SamplingParams(max_new_tokens=20)
    before = e.prefilled_tokens
    batch = [ctx[0]] * 3 + [ctx[2], ctx[1]]
    comps = e.sample(batch, p, seeds=[11, 12, 13, 14, 15])
    assert e.prefilled_tokens - before == len(ctx[0]) + len(ctx[2]) + len(ctx[1])
    alone = [e.sample([c], p, seeds=[s])[0] for c, s in zip(batch, [11, 12, 13, 14, 15])]
    assert [c.ids for c in comps] == [c.ids for c in alone]
    shuffled = e.sample(batch[::-1], p, seeds=[15, 14, 13, 12, 11])[::-1]
    assert [c.ids for c in comps] == [c.ids for c in shuffled]
    assert len({tuple(c.ids) for c in comps[:3]}) > 1  # siblings of one context differ


def test_hf_fallback_sampler_and_top_p():
    """A model the decoder does not run (forced here) samples through the model's own forward with
    the same per-request streams: same tokens as the decoder; top_p < 1 keeps only nucleus tokens."""
    e = tiny.engine(seed=2)
    ctx = contexts(e.tokenizer)
    p = SamplingParams(max_new_tokens=12, temperature=0.9)
    fast = e.sample(ctx, p, seeds=[1, 2, 3, 4])
    dec, e._decoder = e._decoder, None
    slow = e.sample(ctx, p, seeds=[1, 2, 3, 4])
    e._decoder = dec
    assert [c.ids for c in fast] == [c.ids for c in slow]
    assert max(abs(a - b) for x, y in zip(fast, slow) for a, b in zip(x.logprobs, y.logprobs)) < 1e-5
    # nucleus: with top_p tiny, every token is the argmax of its distribution
    nuc = e.sample(ctx, SamplingParams(max_new_tokens=8, top_p=1e-6), seeds=[7, 8, 9, 10])
    greedy = e.sample(ctx, SamplingParams(max_new_tokens=8, temperature=0.0))
    assert [c.ids for c in nuc] == [c.ids for c in greedy]


def test_counter_uniforms_are_a_pure_function_of_seed_and_index():
    import numpy as np

    from rtpo.engine.decoder import counter_uniforms

    seeds = np.array([0, 1, 2**62, 12345], dtype=np.uint64)
    a = counter_uniforms(seeds, 3)
    assert np.array_equal(a, counter_uniforms(seeds, 3))
    assert np.array_equal(a[2:], counter_uniforms(seeds[2:], 3))
    assert not np.array_equal(a, counter_uniforms(seeds, 4))
    big = counter_uniforms(np.arange(20000, dtype=np.uint64), 0)
    assert 0.0 <= big.min() and big.max() < 1.0 and abs(big.mean() - 0.5) < 0.01


def test_shared_prompt_scoring_equals_per_row_scoring_values_and_gradients():
    """Rows that share a prompt (RTPO's siblings) score it once; logprobs and every parameter
    gradient equal those of scoring each row as its own sequence through the model's forward."""
    e = tiny.engine(seed=4)
    ctx = contexts(e.tokenizer)
    g = torch.Generator().manual_seed(1)
    prompts = [ctx[0], ctx[0], ctx[2], ctx[0], ctx[1], ctx[2]]
    resp = [torch.randint(5, len(e.tokenizer), (n,), generator=g).tolist() for n in (4, 9, 2, 1, 7, 5)]

    def grads(share: float):
        e.share_min_saving = share
        e.model.zero_grad(set_to_none=True)
        logp, mask, _ = e._forward_logprobs(e.model, prompts, resp, 0.8)
        (logp * mask * torch.linspace(0.5, 1.5, logp.shape[1])).sum().backward()
        return logp.detach() * mask, {n: p.grad.clone() for n, p in e.model.named_parameters() if p.grad is not None}

    lp_shared, g_shared = grads(0.0)     # always share
    lp_plain, g_plain = grads(2.0)       # never share
    assert torch.allclose(lp_shared, lp_plain, atol=1e-5)
    assert g_shared.keys() == g_plain.keys()
    for n in g_plain:
        assert torch.allclose(g_shared[n], g_plain[n], atol=1e-5, rtol=1e-4), n


def test_update_reports_the_same_consistency_as_a_separate_pre_update_pass():
    """The pre-update ratio / KL come from the first pass's forward (no second scoring pass): the
    same numbers a separate logprobs() call before the update gives."""
    e = tiny.engine(seed=6)
    ctx = contexts(e.tokenizer)
    comps = e.sample(ctx + ctx, SamplingParams(max_new_tokens=10), seeds=list(range(8)))
    rows = [Row(c, x.ids, [lp - 0.05 for lp in x.logprobs], [1.0] * len(x.ids), [1] * len(x.ids))
            for c, x in zip(ctx + ctx, comps)]
    pre = e.logprobs([r.prompt_ids for r in rows], [r.response_ids for r in rows])
    num = sum(float(torch.exp(torch.tensor(lp) - torch.tensor(r.old_logprobs)).sum()) for r, lp in zip(rows, pre))
    den = sum(len(r.response_ids) for r in rows)
    for mb in (1, 3):
        e2 = tiny.engine(seed=6)
        st = e2.update(rows, UpdateConfig(lr=1e-3, mini_batches=mb))
        assert abs(st.ratio_mean - num / den) < 1e-5, (mb, st.ratio_mean, num / den)


def test_device_and_dtype_are_resolved_and_checked():
    """model.device / model.dtype: auto picks a GPU when torch sees one (bf16 there), else the CPU in
    fp32; asking for CUDA without one, or an unknown name, is an error naming the key."""
    from rtpo.engine.local import resolve_device

    want = "cuda" if torch.cuda.is_available() else "cpu"
    dev, dt = resolve_device("auto", "auto")
    assert dev.type == want and dt == (torch.bfloat16 if want == "cuda" else torch.float32)
    assert resolve_device("cpu", "bfloat16") == (torch.device("cpu"), torch.bfloat16)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="model.device = 'cuda'.*no CUDA"):
            resolve_device("cuda")
    with pytest.raises(ValueError, match="model.device = 'tpu'"):
        resolve_device("tpu")
    with pytest.raises(ValueError, match="model.dtype = 'fp8'"):
        resolve_device("cpu", "fp8")
    e = tiny.engine(device="cpu", dtype="bfloat16")   # bf16 inference copy, fp32 master weights
    assert e.rollout_model.dtype == torch.bfloat16 and e.model.dtype == torch.float32
    comps = e.sample(contexts(e.tokenizer), SamplingParams(max_new_tokens=6), seeds=[1, 2, 3, 4])
    re = e.logprobs(contexts(e.tokenizer), [c.ids for c in comps], weights="inference")
    assert max(abs(a - b) for c, r in zip(comps, re) for a, b in zip(c.logprobs, r)) < 0.1


def test_prefix_cache_reuses_blocks_of_earlier_contexts_exactly():
    """A context that extends an earlier one (the next turn's) has its cached leading blocks copied,
    not recomputed: fewer tokens prefilled, the same samples and logprobs as without the cache; a
    sync (new weights) empties the cache."""
    e = tiny.engine(seed=8)
    base = contexts(e.tokenizer)[2]
    longer = base + e.tokenizer.encode(" continue yes no maybe question continue" * 6)
    p = SamplingParams(max_new_tokens=10)
    e.sample([base * 3], p, seeds=[1])
    n0 = e.prefilled_tokens
    with_cache = e.sample([base * 3 + longer], p, seeds=[2])[0]
    computed = e.prefilled_tokens - n0
    assert computed < len(base) * 3 + len(longer) - 32, computed   # at least one block reused
    pc, e._prefix_cache = e._prefix_cache, None
    without = e.sample([base * 3 + longer], p, seeds=[2])[0]
    e._prefix_cache = pc
    assert with_cache.ids == without.ids
    assert max(abs(a - b) for a, b in zip(with_cache.logprobs, without.logprobs)) < 1e-5
    assert pc.slots
    e.sync()
    assert not pc.slots


def test_head_on_needed_positions_only_gives_the_same_logprobs_and_gradients():
    """The update scores only loss-mask positions (a flattened row's observation tokens are skipped):
    there logprobs and gradients are those of scoring every position; elsewhere logp is 0."""
    e = tiny.engine(seed=9)
    ctx = contexts(e.tokenizer)
    g = torch.Generator().manual_seed(2)
    resp = [torch.randint(5, len(e.tokenizer), (n,), generator=g).tolist() for n in (6, 3, 8, 5)]
    need = [[int(x) for x in torch.randint(0, 2, (len(r),), generator=g)] for r in resp]
    need[1] = [1] * len(resp[1])
    out = []
    for nd in (None, need):
        e.model.zero_grad(set_to_none=True)
        logp, mask, ent = e._forward_logprobs(e.model, ctx, resp, 1.0, with_entropy=True, need=nd)
        w = torch.zeros_like(mask)
        for i, n in enumerate(need):
            w[i, :len(n)] = torch.tensor(n, dtype=torch.float)
        ((logp + 0.1 * ent) * w).sum().backward()
        out.append((logp.detach() * w, ent.detach() * w, [p.grad.clone() for p in e.model.parameters()]))
    assert torch.allclose(out[0][0], out[1][0], atol=1e-6) and torch.allclose(out[0][1], out[1][1], atol=1e-6)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(out[0][2], out[1][2]))
