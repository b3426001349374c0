"""Scoring rows that share a prompt: the prompt's forward runs once, its keys and values are shared.

RTPO's stage-k rows are the G-1 siblings forked from one boundary: the same context c_k (hundreds of
tokens) followed by different short actions. The chains of one prompt share its initial context (the
flattened GRPO rows, SeeUPO's turn-0 rows). Scoring every row as its own sequence runs the shared
prompt through the model once per row, forward and backward. Here the rows of one prompt are one
group: the prompt is run once (causal attention over the distinct prompts, right-padded), and every
response of the group attends to the prompt's keys and values plus its own, layer by layer:

    prompt pass    h_p = layer(h_p)                  over the G distinct prompts   (G, P, H)
    response pass  q_s, k_s, v_s from h_s;  keys = [K_p[group(i)] ; k_s]          (N, T, H)
                   response token t of row i sees the prompt of its group and its own tokens <= t

The gradient of a shared prompt position is the sum over the group's rows, exactly what scoring each
row separately accumulates. The arithmetic mirrors transformers' Llama / Qwen3 modules (the same
as rtpo.engine.decoder); tests/test_engine.py checks logprobs and parameter gradients against the
model's own forward. `hidden_for_responses` returns, for every response token, the final hidden
state that predicts it (the prompt's last position for the first one).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    dt = x.dtype
    x = x.float()
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return w * x.to(dt)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    h = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., h:], x[..., :h]), dim=-1) * sin


def group_by_prompt(prompts: list[list[int]]) -> tuple[list[list[int]], list[int]]:
    """(distinct prompts in first-seen order, group index of every row)."""
    uniq: dict[tuple[int, ...], int] = {}
    owner = [uniq.setdefault(tuple(p), len(uniq)) for p in prompts]
    return [list(p) for p in uniq], owner


def saved_fraction(prompts: list[list[int]], responses: list[list[int]]) -> float:
    """Share of the tokens a plain per-row forward would run that prompt sharing does not run again."""
    distinct, _ = group_by_prompt(prompts)
    total = sum(len(p) + len(r) for p, r in zip(prompts, responses))
    shared = sum(len(p) for p in prompts) - sum(len(p) for p in distinct)
    return shared / max(total, 1)


def hidden_for_responses(model: torch.nn.Module, prompts: list[list[int]], responses: list[list[int]],
                         pad_id: int) -> torch.Tensor:
    """Final hidden states (N, Tmax, H), row i position t = the state that predicts responses[i][t].

    Differentiable (autograd through the model's parameters). Every prompt and response non-empty."""
    cfg = model.config
    inner = model.model
    dev = inner.embed_tokens.weight.device
    n_heads = int(cfg.num_attention_heads)
    n_kv = int(getattr(cfg, "num_key_value_heads", None) or n_heads)
    D = int(getattr(cfg, "head_dim", None) or cfg.hidden_size // n_heads)
    eps, scale = float(cfg.rms_norm_eps), D ** -0.5
    gqa = n_kv != n_heads

    distinct, owner = group_by_prompt(prompts)
    G, N = len(distinct), len(responses)
    P = torch.tensor([len(p) for p in distinct], device=dev)
    T = torch.tensor([len(r) for r in responses], device=dev)
    Pmax, Tmax = int(P.max()), int(T.max())
    own = torch.tensor(owner, device=dev)
    ptok = torch.full((G, Pmax), pad_id, dtype=torch.long)
    for g, p in enumerate(distinct):
        ptok[g, :len(p)] = torch.tensor(p)
    stok = torch.full((N, Tmax), pad_id, dtype=torch.long)
    for i, r in enumerate(responses):
        stok[i, :len(r)] = torch.tensor(r)
    ptok, stok = ptok.to(dev), stok.to(dev)

    # rotary tables: prompt positions 0..Pmax-1, response token t of row i at P[group] + t
    s_pos = P[own][:, None] + torch.arange(Tmax, device=dev)[None, :]                   # (N, Tmax)
    n_pos = int(max(Pmax, int(s_pos.max()) + 1))
    cos_t, sin_t = inner.rotary_emb(inner.embed_tokens.weight[:1], torch.arange(n_pos, device=dev)[None, :])
    cos_t, sin_t = cos_t[0], sin_t[0]                                                  # (n_pos, D)
    p_cos, p_sin = cos_t[:Pmax][None, None], sin_t[:Pmax][None, None]                  # (1, 1, Pmax, D)
    s_cos, s_sin = cos_t[s_pos][:, None], sin_t[s_pos][:, None]                        # (N, 1, Tmax, D)
    # response attention: the group's prompt (real positions only), then its own tokens causally
    keys = torch.arange(Pmax + Tmax, device=dev)
    t_idx = torch.arange(Tmax, device=dev)
    see_prompt = keys[None, None, :] < P[own][:, None, None]                            # (N, 1, Pmax+Tmax)
    see_self = (keys[None, :] >= Pmax) & (keys[None, :] - Pmax <= t_idx[:, None])       # (Tmax, Pmax+Tmax)
    s_mask = ((see_prompt & (keys[None, None, :] < Pmax)) | see_self[None])[:, None]   # (N, 1, Tmax, Pmax+Tmax)

    hp = inner.embed_tokens(ptok)                                                      # (G, Pmax, H)
    hs = inner.embed_tokens(stok)                                                      # (N, Tmax, H)
    for layer in inner.layers:
        a, mlp = layer.self_attn, layer.mlp

        def qkv(h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
            B, L, _ = h.shape
            x = _rms(h, layer.input_layernorm.weight, eps)
            q = a.q_proj(x).view(B, L, n_heads, D)
            k = a.k_proj(x).view(B, L, n_kv, D)
            v = a.v_proj(x).view(B, L, n_kv, D)
            if hasattr(a, "q_norm"):
                q, k = _rms(q, a.q_norm.weight, eps), _rms(k, a.k_norm.weight, eps)
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            return _rotate(q, cos, sin), _rotate(k, cos, sin), v

        def finish(h: torch.Tensor, att: torch.Tensor) -> torch.Tensor:
            B, _, L, _ = att.shape
            h = h + a.o_proj(att.transpose(1, 2).reshape(B, L, n_heads * D))
            x = _rms(h, layer.post_attention_layernorm.weight, eps)
            return h + mlp.down_proj(mlp.act_fn(mlp.gate_proj(x)) * mlp.up_proj(x))

        qp, kp, vp = qkv(hp, p_cos, p_sin)
        # right padding: a real prompt position never sees a later (padding) key; fused causal kernel
        att_p = F.scaled_dot_product_attention(qp, kp, vp, is_causal=True, scale=scale, enable_gqa=gqa)
        qs, ks, vs = qkv(hs, s_cos, s_sin)
        K = torch.cat([kp.index_select(0, own), ks], dim=2)
        V = torch.cat([vp.index_select(0, own), vs], dim=2)
        att_s = F.scaled_dot_product_attention(qs, K, V, attn_mask=s_mask, scale=scale, enable_gqa=gqa)
        hp, hs = finish(hp, att_p), finish(hs, att_s)

    last_prompt = hp[own, P[own] - 1]                                                  # (N, H)
    h = torch.cat([last_prompt[:, None], hs[:, :Tmax - 1]], dim=1)                     # (N, Tmax, H)
    return _rms(h, inner.norm.weight, eps)
