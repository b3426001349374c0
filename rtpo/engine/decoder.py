"""The sampler behind LocalEngine.sample: batched decoding with a preallocated KV cache.

Why not `model.generate` or the model's own forward with a DynamicCache: on a CPU, for the small
models of the embedded default, a decode step is a few hundred microseconds of arithmetic and
milliseconds of Python around it (cache concatenation, mask construction, one sampling call per row).
This module does the arithmetic of a Llama-family decoder (Qwen3, Qwen2, Llama / SmolLM2) directly on
the Hugging Face model's own weights, with everything else vectorised over the batch:

* KV cache: one preallocated tensor per layer, (rows, kv_heads, capacity, head_dim), each row's
  tokens left-aligned at positions [0, len_i). A decode step writes one column per row in place;
  nothing is concatenated. Rows that finish stay in the cache (masked) until fewer than half the rows
  are live, then the live rows are compacted once (amortised: each row is copied O(1) times).
* Prefix sharing: identical contexts in one call (the G siblings forked from one c_k, the chains or
  eval samples of one prompt) are prefilled once and their cache rows forked (`KVCache.fork`).
* Sampling: one uniform per (request, token index) from a counter-based stream
  (`counter_uniforms`: SplitMix64 of seed and index), then the inverse CDF of the row's
  temperature-scaled distribution, all rows at once. A request's sample depends on its seed and its
  own logits only, not on which other requests share the batch or in which order they arrived.
  The recorded logprob of a token is log_softmax(logits / T)[token] of the very distribution it was
  drawn from, so `LocalEngine.logprobs` on the same context and weights reproduces it (fp32: ~1e-6).

The math mirrors transformers' modeling_llama / modeling_qwen3 line by line (RMSNorm in fp32,
q_norm / k_norm before rotary for Qwen3, rotary tables from the model's own rotary module, GQA,
SiLU-gated MLP, tied or untied head); tests/test_engine.py checks it against the model's forward.
Models outside that family (no `self_attn.q_proj` layout, sliding windows, logit soft-capping) are
refused by `supports(model)`, and LocalEngine falls back to the model's forward.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

MASK64 = (1 << 64) - 1


def counter_uniforms(seeds: np.ndarray, index: int | np.ndarray) -> np.ndarray:
    """Uniforms in [0, 1), one per (seed, index): SplitMix64 of seed * golden + index, 53 bits.

    seeds: (B,) uint64. A pure function of its arguments: the t-th token of a request always sees
    the same uniform, whatever else is in the batch.
    """
    with np.errstate(over="ignore"):
        x = seeds.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) + np.asarray(index, dtype=np.uint64)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    return (x >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def sample_from_logp(logp: torch.Tensor, u: torch.Tensor, top_p: float = 1.0) -> torch.Tensor:
    """Inverse-CDF draw of one token per row. logp: (B, V) log-probabilities; u: (B,) float64 in [0, 1).

    top_p < 1: nucleus sampling over the smallest set of most likely tokens whose mass reaches top_p
    (the mass is renormalised; the recorded logprob stays that of the unfiltered distribution, as
    the old per-row sampler and vLLM's logprobs do).
    """
    probs = logp.double().exp()
    if top_p < 1.0:
        sp, si = probs.sort(dim=-1, descending=True)
        keep = (sp.cumsum(-1) - sp) < top_p
        sp = sp * keep
        cdf = sp.cumsum(-1)
        j = torch.searchsorted(cdf, (u * cdf[:, -1]).unsqueeze(-1)).clamp(max=sp.shape[-1] - 1)
        return si.gather(-1, j).squeeze(-1)
    cdf = probs.cumsum(-1)
    j = torch.searchsorted(cdf, (u * cdf[:, -1]).unsqueeze(-1)).squeeze(-1)
    # guard against rounding at the top end and zero-probability tokens at a boundary
    j = j.clamp(max=probs.shape[-1] - 1)
    zero = probs.gather(-1, j.unsqueeze(-1)).squeeze(-1) <= 0
    if bool(zero.any()):
        j = torch.where(zero, probs.argmax(-1), j)
    return j


def supports(model: torch.nn.Module) -> str | None:
    """None if `Decoder` can run this model; otherwise the reason it cannot."""
    cfg = model.config
    if getattr(cfg, "model_type", None) not in ("qwen3", "qwen2", "llama"):
        return f"model_type {getattr(cfg, 'model_type', None)!r} (supported: qwen3, qwen2, llama)"
    if getattr(cfg, "use_sliding_window", False):
        return "sliding-window attention"
    for key in ("final_logit_softcapping", "attn_logit_softcapping"):
        if getattr(cfg, key, None) not in (None, 0, 1.0):
            return f"config.{key}"
    if getattr(cfg, "mlp_bias", False):
        return "MLP biases"
    inner = getattr(model, "model", None)
    if inner is None or not hasattr(inner, "layers") or not hasattr(inner, "rotary_emb"):
        return "no model.layers / model.rotary_emb"
    return None


@dataclass
class _Layer:
    qkv_w: torch.Tensor            # (q + 2 kv, H) fused projection
    qkv_b: torch.Tensor | None
    o_w: torch.Tensor
    o_b: torch.Tensor | None
    ln1: torch.Tensor
    ln2: torch.Tensor
    qk_norm: torch.Tensor | None   # Qwen3: RMSNorm over head_dim; (h_q + h_kv, D): q_norm rows, then k_norm rows
    gate_up_w: torch.Tensor        # (2 I, H) fused
    down_w: torch.Tensor

    def __post_init__(self) -> None:
        # for Decoder.step: the (in, out) views torch.mm takes (`.t()` once here, not per call: same
        # memory and strides, so the same kernel and bits), and the per-head norm weights as (heads, 1, D)
        self.qkv_t, self.o_t = self.qkv_w.t(), self.o_w.t()
        self.gate_up_t, self.down_t = self.gate_up_w.t(), self.down_w.t()
        self.qk_norm_col = self.qk_norm[:, None] if self.qk_norm is not None else None


class KVCache:
    """Per-layer K and V of shape (rows, kv_heads, capacity, head_dim); `lens[i]` tokens in row i."""

    def __init__(self, n_layers: int, rows: int, kv_heads: int, capacity: int, head_dim: int,
                 dtype: torch.dtype, device: torch.device) -> None:
        shape = (rows, kv_heads, capacity, head_dim)
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers)]
        self.lens = torch.zeros(rows, dtype=torch.long, device=device)

    @property
    def rows(self) -> int:
        return int(self.lens.shape[0])

    def select(self, idx: torch.Tensor) -> None:
        """Keep (or repeat) rows `idx`, in that order: forks identical prefixes, compacts live rows."""
        self.k = [k.index_select(0, idx) for k in self.k]
        self.v = [v.index_select(0, idx) for v in self.v]
        self.lens = self.lens.index_select(0, idx)


class _RowSlice:
    """Rows [b0, b1) of a KVCache, as views (writes land in the cache): what `Decoder._forward_rows` needs."""

    def __init__(self, cache: KVCache, b0: int, b1: int) -> None:
        self.k = [k[b0:b1] for k in cache.k]
        self.v = [v[b0:b1] for v in cache.v]
        self.lens = cache.lens[b0:b1]


class Decoder:
    """Incremental forward of a Llama-family causal LM on its own weights (see the module docstring).

    Built from a model once; `refresh()` re-reads the weights (after a sync changed them).
    """

    PREFILL_CHUNK_TOKENS = 1024   # padded tokens per row chunk of a prefill (`forward`)

    def __init__(self, model: torch.nn.Module) -> None:
        why = supports(model)
        if why is not None:
            raise ValueError(f"rtpo.engine.decoder cannot run this model: {why}")
        self.model = model
        cfg = model.config
        self.n_heads = int(cfg.num_attention_heads)
        self.n_kv = int(getattr(cfg, "num_key_value_heads", None) or self.n_heads)
        self.head_dim = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // self.n_heads)
        self.eps = float(cfg.rms_norm_eps)
        self.scale = self.head_dim ** -0.5
        self.act = model.model.layers[0].mlp.act_fn
        self.refresh()

    def refresh(self) -> None:
        m = self.model.model
        self.embed = m.embed_tokens.weight
        self.norm = m.norm.weight
        head = self.model.get_output_embeddings()
        self.head_w, self.head_b = head.weight, getattr(head, "bias", None)
        self.head_t = self.head_w.t()
        self.dtype, self.device = self.embed.dtype, self.embed.device
        self._step_base: dict[tuple[int, int], torch.Tensor] = {}   # (rows, capacity) -> flat KV index of position 0
        self._keys = torch.arange(0, device=self.device)            # key positions 0, 1, ... (grown by `step`)
        self.layers = []
        for lyr in m.layers:
            a, mlp = lyr.self_attn, lyr.mlp
            bias = [p.bias for p in (a.q_proj, a.k_proj, a.v_proj)]
            self.layers.append(_Layer(
                qkv_w=torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight], 0).detach(),
                qkv_b=torch.cat(bias, 0).detach() if bias[0] is not None else None,
                o_w=a.o_proj.weight, o_b=a.o_proj.bias,
                ln1=lyr.input_layernorm.weight, ln2=lyr.post_attention_layernorm.weight,
                qk_norm=(torch.cat([a.q_norm.weight.expand(self.n_heads, -1), a.k_norm.weight.expand(self.n_kv, -1)])
                         .detach() if hasattr(a, "q_norm") else None),
                gate_up_w=torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight], 0).detach(),
                down_w=mlp.down_proj.weight,
            ))
        self.inter = self.layers[0].gate_up_w.shape[0] // 2
        self._rope: tuple[torch.Tensor, torch.Tensor] | None = None

    # ---------------------------------------------------------------- pieces
    def _rms(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """transformers' RMSNorm: w * (x * rsqrt(mean(x^2) + eps)), computed in fp32. w: (H,), or
        per-head (heads, D) / (heads, 1, D) for Qwen3's q_norm / k_norm rows."""
        if x.dtype == torch.float32:
            # F.rms_norm is that composite (bit for bit on the CPU) in one call: a decode step is op-count bound
            if w.dim() == 1:
                return F.rms_norm(x, (x.shape[-1],), w, self.eps)
            return F.rms_norm(x, (x.shape[-1],), None, self.eps) * w
        dt = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return w * x.to(dt)

    def _rope_table(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and signed sin of positions [0, n) from the model's rotary module (its scaling included).
        signed sin = cat(-sin[:D/2], sin[D/2:]): the sign of transformers' rotate_half, for `_rotate`."""
        if self._rope is None or self._rope[0].shape[0] < n:
            size = max(n, 256 if self._rope is None else 2 * self._rope[0].shape[0])
            pos = torch.arange(size, device=self.device)[None, :]
            dummy = torch.zeros(1, dtype=self.dtype, device=self.device)
            cos, sin = self.model.model.rotary_emb(dummy, pos)
            h = sin.shape[-1] // 2
            self._rope = (cos[0], torch.cat((-sin[0, :, :h], sin[0, :, h:]), dim=-1))
        return self._rope

    @staticmethod
    def _rotate(x: torch.Tensor, cos: torch.Tensor, sin_signed: torch.Tensor) -> torch.Tensor:
        """transformers' x * cos + rotate_half(x) * sin, rotate_half(x) = cat(-x2, x1), with the sign moved
        into the table: bit for bit the same, since (-a) * s == a * (-s) exactly in IEEE arithmetic."""
        h = x.shape[-1] // 2
        return x * cos + torch.cat((x[..., h:], x[..., :h]), dim=-1) * sin_signed

    # ---------------------------------------------------------------- forward
    def _kv_index(self, cache: KVCache, b: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        """Rows of the flattened (rows * kv_heads * capacity, head_dim) cache tensors that hold
        position p[n] of cache row b[n], for every kv head: (N * kv_heads,), row-major in (n, head)."""
        cap = cache.k[0].shape[2]
        heads = torch.arange(self.n_kv, device=self.device)
        return ((b[:, None] * self.n_kv + heads[None, :]) * cap + p[:, None]).reshape(-1)

    def _float_mask(self, allowed: torch.Tensor) -> torch.Tensor:
        """Additive attention mask in the compute dtype (0 where allowed, -inf elsewhere): the conversion
        SDPA makes of a bool mask in every call, done once per forward for all layers (same values, same
        result)."""
        m = torch.where(allowed, 0.0, float("-inf"))
        return m if self.dtype == torch.float32 else m.to(self.dtype)

    @torch.no_grad()
    def step(self, cache: KVCache, tokens: torch.Tensor) -> torch.Tensor:
        """One decode step: append tokens (rows,) at position lens[i] of every row; logits (rows, V), fp32.

        `forward` with M = 1, written for the per-step op count (a decode step of a small model is a few
        hundred small ops, not arithmetic): 2-D activations, one rotation table lookup, one additive mask
        and one flat KV index per step shared by all layers, `index_copy_` for the KV writes."""
        B = tokens.shape[0]
        start = cache.lens
        total = start + 1
        L = int(total.max())
        cos_t, sin_t = self._rope_table(L)
        cos, sin = cos_t[start][:, None, None], sin_t[start][:, None, None]          # (B, 1, 1, D)
        cap = cache.k[0].shape[2]
        base = self._step_base.get((B, cap))
        if base is None:   # flat KV index of (row b, head h, position 0), (B, kv)
            if len(self._step_base) > 64:
                self._step_base.clear()
            base = self._step_base[(B, cap)] = self._kv_index(
                cache, torch.arange(B, device=self.device),
                torch.zeros(B, dtype=torch.long, device=self.device)).view(B, self.n_kv)
            if self._keys.shape[0] < cap:
                self._keys = torch.arange(cap, device=self.device)
        widx = (base + start[:, None]).view(-1)                                       # (B * kv,)
        mask = self._float_mask(self._keys[None, :L] < total[:, None])[:, None, None, :]  # (B, 1, 1, L)
        x = self.embed[tokens]                                                        # (B, H)
        nq, nk, D, g = self.n_heads * self.head_dim, self.n_kv * self.head_dim, self.head_dim, self.n_heads // self.n_kv
        for li, ly in enumerate(self.layers):
            h = self._rms(x, ly.ln1)
            qkv = torch.mm(h, ly.qkv_t) if ly.qkv_b is None else torch.addmm(ly.qkv_b, h, ly.qkv_t)
            qk = qkv[:, :nq + nk].view(B, self.n_heads + self.n_kv, 1, D)
            if ly.qk_norm is not None:
                qk = self._rms(qk, ly.qk_norm_col)
            qk = self._rotate(qk, cos, sin)                                     # (B, h_q + h_kv, 1, D)
            K, V = cache.k[li], cache.v[li]
            K.view(-1, D).index_copy_(0, widx, qk[:, self.n_heads:].reshape(-1, D))
            V.view(-1, D).index_copy_(0, widx, qkv[:, nq + nk:].reshape(-1, D))
            # one query per row: the query heads of a kv head side by side (no repeated K/V)
            att = F.scaled_dot_product_attention(qk[:, :self.n_heads].reshape(B, self.n_kv, g, D),
                                                 K[:, :, :L], V[:, :, :L], attn_mask=mask, scale=self.scale)
            att = att.reshape(B, nq)
            x = x + (torch.mm(att, ly.o_t) if ly.o_b is None else torch.addmm(ly.o_b, att, ly.o_t))
            h = self._rms(x, ly.ln2)
            gu = torch.mm(h, ly.gate_up_t)
            x = x + torch.mm(self.act(gu[:, :self.inter]) * gu[:, self.inter:], ly.down_t)
        cache.lens = total
        h = self._rms(x, self.norm)
        logits = torch.mm(h, self.head_t) if self.head_b is None else torch.addmm(self.head_b, h, self.head_t)
        return logits if logits.dtype == torch.float32 else logits.float()

    @torch.no_grad()
    def forward(self, cache: KVCache, tokens: torch.Tensor, n_new: torch.Tensor) -> torch.Tensor:
        """Append `tokens` (rows, M; row i's first n_new[i] are real, the rest padding) to every row of
        `cache` and return the logits at each row's last real new token: (rows, V), fp32.

        Row i's new tokens take positions lens[i] .. lens[i] + n_new[i] - 1 (positions = cache slots)."""
        B, M = tokens.shape
        if M == 1:   # every row has exactly one new token (contexts are never empty)
            return self.step(cache, tokens[:, 0])
        total = cache.lens + n_new
        L = int(total.max())
        # Rows in chunks of about PREFILL_CHUNK_TOKENS padded tokens, so that a layer's activations stay in
        # the core's cache (B = 64 contexts of 120 tokens: 1.8x faster than all rows at once). Every row of
        # a chunk attends over the same L keys and M queries as without chunks (SDPA's bits depend on the key
        # length), the matmuls see >= M >= 32 rows, and the output head runs once over all rows: bit for bit
        # one pass where the GEMM gives a row the same bits whatever the row count (MKL's AVX-512 kernels
        # from 16 rows up); MKL's AVX2 kernels do not, and there chunking moves the logits by float
        # rounding, as a different batch size does (deterministic either way).
        rows = B if M < 32 else max(1, self.PREFILL_CHUNK_TOKENS // M)
        last = [self._forward_rows(cache if rows >= B else _RowSlice(cache, b0, min(B, b0 + rows)),
                                   tokens[b0:b0 + rows], n_new[b0:b0 + rows], L) for b0 in range(0, B, rows)]
        cache.lens = total
        last_h = last[0] if len(last) == 1 else torch.cat(last)                       # (B, H)
        return F.linear(self._rms(last_h, self.norm), self.head_w, self.head_b).float()

    def _forward_rows(self, cache: "KVCache | _RowSlice", tokens: torch.Tensor, n_new: torch.Tensor,
                      L: int) -> torch.Tensor:
        """`forward` on some rows of the cache, attending over key positions [0, L); returns the hidden
        state (before the final norm) at each row's last real new token, (rows, H). Leaves lens alone."""
        B, M = tokens.shape
        start = cache.lens
        cos_t, sin_t = self._rope_table(L)
        q_pos = start[:, None] + torch.arange(M, device=self.device)[None, :]        # (B, M)
        q_pos_c = q_pos.clamp(max=L - 1)
        cos, sin = cos_t[q_pos_c][:, None], sin_t[q_pos_c][:, None]                   # (B, 1, M, D)
        keys = torch.arange(L, device=self.device)
        valid = torch.arange(M, device=self.device)[None, :] < n_new[:, None]         # (B, M)
        mask = keys[None, None, :] <= q_pos[:, :, None]                               # causal
        mask = (mask & valid[:, :, None]) | (~valid[:, :, None] & (keys[None, None, :] == 0))
        mask = self._float_mask(mask)[:, None]                                        # (B, 1, M, L)
        write_b, write_q = valid.nonzero(as_tuple=True)
        widx = self._kv_index(cache, write_b, q_pos[write_b, write_q])                # (N * kv,)
        x = self.embed[tokens]                                                        # (B, M, H)
        nq, nk, D = self.n_heads * self.head_dim, self.n_kv * self.head_dim, self.head_dim
        for li, ly in enumerate(self.layers):
            h = self._rms(x, ly.ln1)
            qkv = F.linear(h, ly.qkv_w, ly.qkv_b)
            # q and k heads side by side: one norm (Qwen3's q_norm / k_norm, per-head weights) and
            # one rotation for both
            qk = qkv[..., :nq + nk].view(B, M, self.n_heads + self.n_kv, D)
            if ly.qk_norm is not None:
                qk = self._rms(qk, ly.qk_norm)
            qk = self._rotate(qk.transpose(1, 2), cos, sin)                            # (B, h_q + h_kv, M, D)
            q, k = qk[:, :self.n_heads], qk[:, self.n_heads:]
            v = qkv[..., nq + nk:].view(B, M, self.n_kv, D)
            K, V = cache.k[li], cache.v[li]
            K.view(-1, D).index_copy_(0, widx, k.transpose(1, 2)[write_b, write_q].reshape(-1, D))
            V.view(-1, D).index_copy_(0, widx, v[write_b, write_q].reshape(-1, D))
            att = F.scaled_dot_product_attention(q, K[:, :, :L], V[:, :, :L], attn_mask=mask,
                                                 scale=self.scale, enable_gqa=self.n_kv != self.n_heads)
            att = att.transpose(1, 2).reshape(B, M, nq)
            x = x + F.linear(att, ly.o_w, ly.o_b)
            h = self._rms(x, ly.ln2)
            gu = F.linear(h, ly.gate_up_w)
            x = x + F.linear(self.act(gu[..., :self.inter]) * gu[..., self.inter:], ly.down_w)
        return x[torch.arange(B, device=self.device), (n_new - 1).clamp(min=0)]      # (B, H)

    def new_cache(self, rows: int, capacity: int) -> KVCache:
        return KVCache(len(self.layers), rows, self.n_kv, capacity, self.head_dim, self.dtype, self.device)


class PrefixCache:
    """Keys and values of recently prefilled contexts, in blocks of `block` tokens (vLLM's automatic
    prefix caching, without paging). A context whose first j blocks were prefilled before (the turn-k
    context is a prefix of the turn-(k+1) context; every task of a kind starts with the same system
    prompt) gets those blocks copied instead of recomputed.

    Block j of a context is keyed by (slot of block j-1, its tokens): exact, no hash collisions.
    Valid for one set of inference weights: the engine clears it when they change (sync, load) and
    at every checkpoint save, so a resumed run and an uninterrupted one see the same cache state.
    When full it is cleared (the next prefills fill it again)."""

    def __init__(self, dec: Decoder, max_tokens: int, block: int = 32) -> None:
        self.dec, self.block = dec, int(block)
        self.max_blocks = max(1, int(max_tokens) // self.block)
        self.k: list[torch.Tensor] | None = None     # per layer (max_blocks, kv_heads, block, head_dim)
        self.v: list[torch.Tensor] | None = None
        self.slots: dict[tuple[int, tuple[int, ...]], int] = {}
        self.hits = self.lookups = 0                  # blocks reused / blocks asked for (statistics)

    def clear(self) -> None:
        self.slots.clear()

    def _alloc(self) -> None:
        d = self.dec
        shape = (self.max_blocks, d.n_kv, self.block, d.head_dim)
        self.k = [torch.zeros(shape, dtype=d.dtype, device=d.device) for _ in d.layers]
        self.v = [torch.zeros(shape, dtype=d.dtype, device=d.device) for _ in d.layers]

    def match(self, ctx: list[int]) -> list[int]:
        """Slots of the longest cached block prefix of ctx (at least one token is left to compute)."""
        out, parent, b = [], -1, self.block
        for j in range((len(ctx) - 1) // b):
            slot = self.slots.get((parent, tuple(ctx[j * b:(j + 1) * b])))
            if slot is None:
                break
            out.append(slot)
            parent = slot
        self.lookups += (len(ctx) - 1) // b
        self.hits += len(out)
        return out

    def load_into(self, cache: KVCache, matched: list[list[int]]) -> None:
        """Copy each row's matched blocks into positions [0, len(matched[i]) * block) of its cache row."""
        m = max(len(x) for x in matched)
        if m == 0:
            return
        idx = torch.tensor([x + [0] * (m - len(x)) for x in matched], dtype=torch.long, device=self.dec.device)
        R, b = len(matched), self.block
        for li in range(len(cache.k)):
            for src, dst in ((self.k[li], cache.k[li]), (self.v[li], cache.v[li])):   # type: ignore[index]
                blocks = src[idx]                                                     # (R, m, kv, b, D)
                dst[:, :, :m * b] = blocks.permute(0, 2, 1, 3, 4).reshape(R, src.shape[1], m * b, src.shape[3])
        cache.lens = torch.tensor([len(x) * b for x in matched], dtype=torch.long, device=self.dec.device)

    def store(self, cache: KVCache, contexts: list[list[int]], matched: list[list[int]]) -> None:
        """Add the full blocks of every row's context that were not cached yet."""
        if self.k is None:
            self._alloc()
        b = self.block
        rows, blocks, slots = [], [], []
        for i, ctx in enumerate(contexts):
            parent = matched[i][-1] if matched[i] else -1
            for j in range(len(matched[i]), len(ctx) // b):
                key = (parent, tuple(ctx[j * b:(j + 1) * b]))
                slot = self.slots.get(key)
                if slot is None:
                    if len(self.slots) >= self.max_blocks:
                        return  # full: keep what is stored (cleared at the next weight change)
                    slot = self.slots[key] = len(self.slots)
                    rows.append(i); blocks.append(j); slots.append(slot)
                parent = slot
        if not slots:
            return
        dev = self.dec.device
        r, j, sl = (torch.tensor(x, dtype=torch.long, device=dev) for x in (rows, blocks, slots))
        nb = int(j.max()) + 1
        for li in range(len(cache.k)):
            for src, dst in ((cache.k[li], self.k[li]), (cache.v[li], self.v[li])):   # type: ignore[index]
                R, H, _, D = src.shape
                view = src[:, :, :nb * b].reshape(R, H, nb, b, D).permute(0, 2, 1, 3, 4)  # (R, nb, H, b, D)
                dst[sl] = view[r, j]


class KVStepper:
    """Decoding through `Decoder` + `KVCache`: identical contexts prefilled once, then forked;
    with a `PrefixCache`, cached leading blocks of a context are copied instead of recomputed."""

    def __init__(self, dec: Decoder, prefix_cache: PrefixCache | None = None) -> None:
        self.dec, self.device, self.pc = dec, dec.device, prefix_cache
        self.computed = 0   # context tokens run through the model by the last prefill

    def prefill(self, contexts: list[list[int]], capacity: int, pad_id: int) -> torch.Tensor:
        uniq: dict[tuple[int, ...], int] = {}
        owner = [uniq.setdefault(tuple(c), len(uniq)) for c in contexts]
        distinct = [list(c) for c in uniq]
        matched = [self.pc.match(c) for c in distinct] if self.pc is not None else [[] for _ in distinct]
        start = [len(m) * (self.pc.block if self.pc else 0) for m in matched]
        M = max(len(c) - s for c, s in zip(distinct, start))
        toks = torch.full((len(distinct), M), pad_id, dtype=torch.long)
        for i, (c, s) in enumerate(zip(distinct, start)):
            toks[i, :len(c) - s] = torch.tensor(c[s:], dtype=torch.long)
        n_new = torch.tensor([len(c) - s for c, s in zip(distinct, start)], dtype=torch.long)
        self.computed = int(n_new.sum())
        self.cache = self.dec.new_cache(len(distinct), capacity)
        if self.pc is not None:
            self.pc.load_into(self.cache, matched)
        logits = self.dec.forward(self.cache, toks.to(self.device), n_new.to(self.device))
        if self.pc is not None:
            self.pc.store(self.cache, distinct, matched)
        if len(distinct) < len(contexts):   # fork the shared prefixes
            idx = torch.tensor(owner, dtype=torch.long, device=self.device)
            self.cache.select(idx)
            logits = logits.index_select(0, idx)
        return logits

    def select(self, idx: torch.Tensor) -> None:
        self.cache.select(idx.to(self.device))

    def step(self, tok: torch.Tensor) -> torch.Tensor:
        return self.dec.step(self.cache, tok.to(self.device))


class HFStepper:
    """Fallback for models `Decoder` does not support: the model's own forward, left padding and
    its DynamicCache (slower: the cache is concatenated every step)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.device = next(model.parameters()).device
        self.computed = 0

    def prefill(self, contexts: list[list[int]], capacity: int, pad_id: int) -> torch.Tensor:
        self.computed = sum(len(c) for c in contexts)
        B, Lmax = len(contexts), max(len(c) for c in contexts)
        ids = torch.full((B, Lmax), pad_id, dtype=torch.long)
        attn = torch.zeros((B, Lmax), dtype=torch.long)
        for i, c in enumerate(contexts):
            ids[i, Lmax - len(c):] = torch.tensor(c)
            attn[i, Lmax - len(c):] = 1
        pos = (attn.cumsum(-1) - 1).clamp(min=0)
        self.attn, self.pos = attn.to(self.device), pos[:, -1].to(self.device)
        out = self.model(input_ids=ids.to(self.device), attention_mask=self.attn, position_ids=pos.to(self.device),
                         use_cache=True, logits_to_keep=1)
        self.cache = out.past_key_values
        return out.logits[:, -1, :].float()

    def select(self, idx: torch.Tensor) -> None:
        idx = idx.to(self.device)
        self.cache.batch_select_indices(idx)
        self.attn, self.pos = self.attn[idx], self.pos[idx]

    def step(self, tok: torch.Tensor) -> torch.Tensor:
        B = tok.shape[0]
        self.attn = torch.cat([self.attn, torch.ones((B, 1), dtype=torch.long, device=self.device)], dim=1)
        self.pos = self.pos + 1
        out = self.model(input_ids=tok[:, None].to(self.device), attention_mask=self.attn,
                         position_ids=self.pos[:, None], past_key_values=self.cache, use_cache=True)
        self.cache = out.past_key_values
        return out.logits[:, -1, :].float()


def decode(stepper: KVStepper | HFStepper, contexts: list[list[int]], *, max_new: list[int], seeds: list[int],
           temperature: float, top_p: float, stop_ids: set[int], tool_close_id: int | None,
           entropy_tokens: int, pad_id: int) -> list[dict[str, Any]]:
    """Sample one completion per context, all rows in lockstep; returns dicts {ids, logprobs,
    stop_reason ("eos" | "tool_call" | "length"), entropy (mean normalised entropy of the first
    `entropy_tokens` tokens, or None)}."""
    B = len(contexts)
    T = max(max_new)
    logits = stepper.prefill(contexts, max(len(c) for c in contexts) + T, pad_id)
    seeds_np = np.array([s & MASK64 for s in seeds], dtype=np.uint64)
    out_tok = torch.zeros((B, T), dtype=torch.long)
    out_lp = torch.zeros((B, T), dtype=torch.float32)
    n_out = torch.zeros(B, dtype=torch.long)
    ent_sum = torch.zeros(B, dtype=torch.float64)
    ent_n = torch.zeros(B, dtype=torch.long)
    # a row stops at its first stop token, so its stop reason is read off its last token at the end
    stop_t = torch.tensor(sorted(stop_ids | ({tool_close_id} if tool_close_id is not None else set())),
                          dtype=torch.long)
    log_v = float(np.log(logits.shape[-1]))
    greedy = temperature <= 0

    rows = torch.arange(B)                      # request of each cache row
    rows_np = rows.numpy()
    budget = torch.tensor(max_new, dtype=torch.long)   # of each cache row (compacted with `rows`)
    live = torch.ones(B, dtype=torch.bool)      # cache rows still generating
    all_live = True                             # live.all(): no masking needed for the bookkeeping
    for t in range(T):
        # (logits / 1.0 is logits exactly: skip the division at the default temperature)
        logp = torch.log_softmax(logits if greedy or temperature == 1.0 else logits / temperature, dim=-1).cpu()
        if greedy:
            tok = logp.argmax(-1)
        else:
            tok = sample_from_logp(logp, torch.from_numpy(counter_uniforms(seeds_np[rows_np], t)), top_p)
        lp = logp.gather(-1, tok[:, None]).squeeze(-1)
        if all_live:
            out_tok[rows, t] = tok
            out_lp[rows, t] = lp
            n_out[rows] = t + 1
        else:
            r_live = rows[live]
            out_tok[r_live, t] = tok[live]
            out_lp[r_live, t] = lp[live]
            n_out[r_live] = t + 1
        if entropy_tokens and t < entropy_tokens:
            ent = -(logp.exp() * logp).sum(-1).double() / log_v
            r_live = rows[live]
            ent_sum[r_live] += ent[live]
            ent_n[r_live] += 1
        live = live & ~torch.isin(tok, stop_t) & (budget > t + 1)
        n_live = int(live.sum())
        if n_live == 0:
            break
        all_live = n_live == live.shape[0]
        if n_live <= live.shape[0] // 2:        # compact: copy the live rows, at most log2(B) times
            keep = live.nonzero(as_tuple=True)[0]
            stepper.select(keep)
            rows, tok, live, budget = rows[keep], tok[keep], live[keep], budget[keep]
            rows_np, all_live = rows.numpy(), True
        logits = stepper.step(tok)
    out = []
    for i in range(B):
        n = int(n_out[i])
        ids = out_tok[i, :n].tolist()
        reason = "length"
        if ids and ids[-1] in stop_ids:
            reason = "eos"
        elif ids and tool_close_id is not None and ids[-1] == tool_close_id:
            reason = "tool_call"
        out.append({"ids": ids, "logprobs": out_lp[i, :n].tolist(), "stop_reason": reason,
                    "entropy": float(ent_sum[i] / ent_n[i]) if int(ent_n[i]) else None})
    return out
