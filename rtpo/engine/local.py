"""LocalEngine: the PolicyEngine on torch + transformers, for a CPU or one GPU.

Holds three copies of the model:
  model          training weights (AdamW updates them)
  rollout_model  inference weights (`sample` uses them; `sync()` copies model -> rollout_model)
  ref_model      frozen initial weights for the low-variance KL penalty (only when kl is wanted)

Sampling is batched over many contexts with a KV cache and left padding; rows that finish are
dropped from the batch (cache rows included). Every sampled token's logprob is recorded from the
same temperature-scaled distribution it was drawn from, so `logprobs()` on the same context and
weights reproduces it (to ~1e-6 in fp32) — the reference point of the rollout-training ratio.
"""

from __future__ import annotations

import copy
import os
import random
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rtpo import loss as L
from rtpo.engine import decoder as D
from rtpo.engine import shared_prefix as SP
from rtpo.engine.base import Completion, Mismatch, Row, SamplingParams, UpdateConfig, UpdateStats, stop_ids


def build_tiny_qwen3(tokenizer: Any, hidden_size: int = 256, num_layers: int = 4, num_heads: int = 4,
                     num_kv_heads: int = 2, intermediate_size: int = 768, max_position: int = 2048,
                     seed: int = 0) -> torch.nn.Module:
    """A randomly initialised Qwen3ForCausalLM sized for a CPU (the embedded default)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    if hidden_size % num_heads:
        raise ValueError(f"hidden_size {hidden_size} is not divisible by num_heads {num_heads}")
    cfg = Qwen3Config(
        vocab_size=len(tokenizer), hidden_size=hidden_size, num_hidden_layers=num_layers,
        num_attention_heads=num_heads, num_key_value_heads=num_kv_heads,
        head_dim=hidden_size // num_heads, intermediate_size=intermediate_size,
        max_position_embeddings=max_position, tie_word_embeddings=True, rope_theta=10000.0,
        bos_token_id=None, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(cfg)
    model.config.use_cache = True
    return model


def resolve_device(device: str = "auto", dtype: str = "auto") -> tuple[torch.device, torch.dtype]:
    """(device, compute dtype) from the config's `model.device` (auto | cpu | cuda | cuda:N) and
    `model.dtype` (auto | float32 | bfloat16). auto: the GPU when there is one, bf16 on a GPU, fp32 on a CPU."""
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"model.device = {device!r}, but torch sees no CUDA device (torch {torch.__version__})")
    if device != "cpu" and not device.startswith("cuda"):
        raise ValueError(f"model.device = {device!r}; expected auto | cpu | cuda | cuda:N")
    dev = torch.device(device)
    names = {"float32": torch.float32, "bfloat16": torch.bfloat16}
    if dtype == "auto":
        return dev, (torch.bfloat16 if dev.type == "cuda" else torch.float32)
    if dtype not in names:
        raise ValueError(f"model.dtype = {dtype!r}; expected auto | float32 | bfloat16")
    return dev, names[dtype]


def load_hf_model(model_dir: str | os.PathLike, dtype: torch.dtype | str = torch.float32) -> tuple[torch.nn.Module, Any]:
    """Load any Hugging Face causal-LM directory (weights + tokenizer), offline. dtype: float32 (the
    default: training keeps fp32 master weights) or "auto", the weights' own dtype (config.json; what
    `rtpo base-model` keeps, so that a bf16 hub model stays bf16 on disk)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(model_dir)
    if not path.is_dir():
        raise FileNotFoundError(f"model directory not found: {path}")
    if not (path / "config.json").exists():
        raise FileNotFoundError(f"{path} is not a Hugging Face model directory (no config.json)")
    if not sys.stderr.isatty():   # rule and Slurm logs: no carriage-return progress bar for the weights
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    return model, tok


def decoder_and_head(model: torch.nn.Module) -> tuple[torch.nn.Module, torch.nn.Module]:
    """(decoder, output head) of a causal LM whose logits are exactly head(decoder(...).last_hidden_state).

    Scoring and SFT run the head only on the positions they need (response / labelled tokens), not
    on the whole context: for short actions after long multi-turn contexts that is most of the
    vocab-sized matmul. Models that post-process logits (soft-capping, logit scales) are refused
    rather than scored wrongly.
    """
    for key in ("final_logit_softcapping", "logit_scale"):
        if getattr(model.config, key, None) not in (None, 1.0):
            raise ValueError(f"{type(model).__name__}: config.{key} = {getattr(model.config, key)} post-processes "
                             "the logits; the head-on-selected-positions path does not support it")
    return model.get_decoder(), model.get_output_embeddings()


class LocalEngine:
    def __init__(self, model: torch.nn.Module, tokenizer: Any, *, seed: int = 0,
                 reference: bool = True, autocast_bf16: bool = False, device: str = "cpu", dtype: str = "auto",
                 sample_batch: int = 256, sample_cache_mb: int = 1024, prefix_cache_mb: int = 256,
                 max_context: int | None = None) -> None:
        """device / dtype: see `resolve_device`. The training weights stay fp32 (AdamW's master copy);
        with a bf16 compute dtype, forwards run under bf16 autocast and the inference and reference
        copies are held in bf16 (then sampled and recomputed logprobs agree to bf16 precision only:
        the exact fp32 equality the CPU tests check needs dtype float32)."""
        if tokenizer.pad_token_id is None:
            raise ValueError("tokenizer has no pad token")
        self.device, self.dtype = resolve_device(device, dtype)
        self.tokenizer = tokenizer
        self.model = model.float().to(self.device)
        self.model.config.use_cache = True
        self.rollout_model = copy.deepcopy(self.model).to(self.dtype).eval()
        self.ref_model = copy.deepcopy(self.model).to(self.dtype).eval() if reference else None
        for m in (self.rollout_model, self.ref_model):
            if m is not None:
                m.requires_grad_(False)
        self.max_context = int(max_context or model.config.max_position_embeddings)
        self.autocast_bf16 = autocast_bf16 or self.dtype == torch.bfloat16
        self.sample_batch = sample_batch          # rows decoded together at most
        self.sample_cache_mb = sample_cache_mb    # and their KV cache at most this size
        self.share_min_saving = 0.15              # score shared prompts once when that saves >= 15 % of tokens
        self.pad_id = int(tokenizer.pad_token_id)
        self.eos_ids, self.tool_close_id = stop_ids(tokenizer)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-4, weight_decay=0.01)
        self.weight_version = 0
        self.train_version = 0
        self.sampled_tokens = 0                   # counters for benchmarks: generated / prefilled tokens
        self.prefilled_tokens = 0
        self.seed_gen = random.Random(seed)  # draws per-request seeds when the caller gives none
        # the batched KV-cache decoder on the inference weights; None: the model's own forward
        self._decoder = D.Decoder(self.rollout_model) if D.supports(self.rollout_model) is None else None
        # KV blocks of recent contexts for the next turn's prefill (cleared whenever the weights change)
        self._prefix_cache = (D.PrefixCache(self._decoder, prefix_cache_mb * 2**20 // self._kv_bytes_per_token())
                              if self._decoder is not None and prefix_cache_mb > 0 else None)
        torch.manual_seed(seed)

    # ------------------------------------------------------------------ construction helpers
    @classmethod
    def from_pretrained(cls, model_dir: str | os.PathLike, **kw: Any) -> "LocalEngine":
        model, tok = load_hf_model(model_dir)
        return cls(model, tok, **kw)

    def _autocast(self):
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.autocast_bf16)

    def _check_contexts(self, contexts: list[list[int]]) -> None:
        if not contexts:
            raise ValueError("empty batch: no contexts given")
        for i, c in enumerate(contexts):
            if len(c) == 0:
                raise ValueError(f"context {i} is empty")
            if len(c) >= self.max_context:
                raise ValueError(f"context {i} has {len(c)} tokens; the model accepts at most "
                                 f"{self.max_context} (prompt + response)")

    # ------------------------------------------------------------------ sampling
    @torch.no_grad()
    def sample(self, contexts: list[list[int]], params: SamplingParams,
               seeds: list[int] | None = None) -> list[Completion]:
        """Sample one completion per context with the *inference* weights.

        seeds: one per context; a request's sample is a function of its seed, its context and the
        weights only (counter-based random stream, rtpo.engine.decoder), not of the batch it shares.
        Drawn from the engine's seed stream when None.
        """
        self._check_contexts(contexts)
        if seeds is None:
            seeds = [self.seed_gen.randrange(2**62) for _ in contexts]
        if len(seeds) != len(contexts):
            raise ValueError(f"{len(seeds)} seeds for {len(contexts)} contexts")
        # longest first, identical contexts adjacent (they are prefilled once: decoder.prefill)
        order = sorted(range(len(contexts)), key=lambda i: (-len(contexts[i]), contexts[i]))
        out: list[Completion | None] = [None] * len(contexts)
        budget = [min(params.max_new_tokens, self.max_context - len(c)) for c in contexts]
        for idx in self._sample_chunks(order, contexts, budget):
            res = self._decode([contexts[i] for i in idx], params, [seeds[i] for i in idx], [budget[i] for i in idx])
            for i, r in zip(idx, res):
                out[i] = Completion(ids=r["ids"], logprobs=r["logprobs"], stop_reason=r["stop_reason"],
                                    weight_version=self.weight_version, entropy=r["entropy"])
        self.sampled_tokens += sum(len(c.ids) for c in out)  # type: ignore[union-attr]
        return out  # type: ignore[return-value]

    def _sample_chunks(self, order: list[int], contexts: list[list[int]], budget: list[int]) -> list[list[int]]:
        """Split `order` into chunks whose KV cache (rows x (longest context + budget)) fits
        `sample_cache_mb` and that hold at most `sample_batch` rows."""
        per_tok = self._kv_bytes_per_token()
        chunks, cur, cap = [], [], 0
        for i in order:
            need = len(contexts[i]) + budget[i]
            new_cap = max(cap, need)
            if cur and (len(cur) >= self.sample_batch or (len(cur) + 1) * new_cap * per_tok > self.sample_cache_mb * 2**20):
                chunks.append(cur)
                cur, new_cap = [], need
            cur.append(i)
            cap = new_cap
        if cur:
            chunks.append(cur)
        return chunks

    def _kv_bytes_per_token(self) -> int:
        c = self.rollout_model.config
        heads = int(c.num_attention_heads)
        kv = int(getattr(c, "num_key_value_heads", None) or heads)
        hd = int(getattr(c, "head_dim", None) or c.hidden_size // heads)
        return 2 * int(c.num_hidden_layers) * kv * hd * self.rollout_model.dtype.itemsize

    def _decode(self, contexts: list[list[int]], p: SamplingParams, seeds: list[int], budget: list[int]) -> list[dict]:
        kw = dict(max_new=budget, seeds=seeds, temperature=p.temperature, top_p=p.top_p,
                  stop_ids=set(self.eos_ids), tool_close_id=self.tool_close_id if p.stop_at_tool_call else None,
                  entropy_tokens=p.entropy_tokens, pad_id=self.pad_id)
        if self._decoder is not None:
            stepper: D.KVStepper | D.HFStepper = D.KVStepper(self._decoder, self._prefix_cache)
        else:
            stepper = D.HFStepper(self.rollout_model)
        out = D.decode(stepper, contexts, **kw)
        self.prefilled_tokens += stepper.computed
        return out

    # ------------------------------------------------------------------ scoring
    def _micro_batches(self, prompts: list[list[int]], responses: list[list[int]], max_tokens: int) -> list[list[int]]:
        """Group row indices so that each micro-batch's padded tokens stay within max_tokens.

        A micro-batch is scored as (distinct prompts, right-padded) + (responses, right-padded)
        (rtpo.engine.shared_prefix), so its cost is distinct prompts x longest prompt + rows x longest
        response. Rows are taken in order of response length, then prompt length (rows of one prompt
        with similar responses, e.g. RTPO's siblings, fall together), so padding stays small: the
        chains of one prompt, whose lengths differ by whole turns, are not forced into one batch.
        Without shared prompts each row is one sequence: rows sorted by length, cost = rows x longest."""
        if len({tuple(p) for p in prompts}) == len(prompts):   # nothing shared: rows x longest row
            lengths = [len(p) + len(r) for p, r in zip(prompts, responses)]
            order = sorted(range(len(lengths)), key=lambda i: lengths[i])
            batches, cur, longest = [], [], 0
            for i in order:
                if cur and max(longest, lengths[i]) * (len(cur) + 1) > max_tokens:
                    batches.append(cur)
                    cur, longest = [], 0
                cur.append(i)
                longest = max(longest, lengths[i])
            return batches + ([cur] if cur else [])
        order = sorted(range(len(prompts)), key=lambda i: (len(responses[i]), len(prompts[i]), prompts[i]))
        batches: list[list[int]] = []
        cur: list[int] = []
        seen: set[tuple[int, ...]] = set()
        longest_p = longest_r = 0
        for i in order:
            key = tuple(prompts[i])
            n_groups = len(seen) + (key not in seen)
            lp, lr = max(longest_p, len(prompts[i])), max(longest_r, len(responses[i]))
            if cur and n_groups * lp + (len(cur) + 1) * lr > max_tokens:
                batches.append(cur)
                cur, seen, lp, lr = [], set(), len(prompts[i]), len(responses[i])
            cur.append(i)
            seen.add(key)
            longest_p, longest_r = lp, lr
        if cur:
            batches.append(cur)
        return batches

    def _forward_logprobs(self, model: torch.nn.Module, prompts: list[list[int]], responses: list[list[int]],
                          temperature: float, with_entropy: bool = False, need: list[list[int]] | None = None):
        """Returns (logp (B, T), mask (B, T), entropy (B, T)|None) over response tokens.

        Rows that share a prompt (RTPO's siblings of one c_k, the chains of one prompt) run it once
        (rtpo.engine.shared_prefix) when that saves at least `share_min_saving` of the tokens;
        otherwise every row is one right-padded sequence through the model's own forward.

        need: per row, 1 where the logprob is used (the update's loss mask); the output head and
        log-softmax then run on those positions only (a flattened trajectory's observation tokens
        are never scored), and logp / entropy are 0 elsewhere."""
        B = len(prompts)
        Tmax = max(len(r) for r in responses)
        tgt = torch.full((B, Tmax), self.pad_id, dtype=torch.long)
        mask = torch.zeros((B, Tmax))
        for i, r in enumerate(responses):
            tgt[i, :len(r)] = torch.tensor(r)
            mask[i, :len(r)] = 1.0
        decoder, head = decoder_and_head(model)
        with self._autocast():
            if D.supports(model) is None and SP.saved_fraction(prompts, responses) >= self.share_min_saving:
                hidden = SP.hidden_for_responses(model, prompts, responses, self.pad_id)       # (B, T, H)
            else:
                lens = [len(p) + len(r) for p, r in zip(prompts, responses)]
                ids = torch.full((B, max(lens)), self.pad_id, dtype=torch.long)
                gather_pos = torch.zeros((B, Tmax), dtype=torch.long)
                for i, (p, r) in enumerate(zip(prompts, responses)):
                    ids[i, :lens[i]] = torch.tensor(p + r)
                    gather_pos[i, :len(r)] = torch.arange(len(p) - 1, len(p) - 1 + len(r))
                # Right padding under causal attention: a real position never sees a later (padding)
                # key, so no padding mask is needed and SDPA takes its fused causal kernel.
                hidden = decoder(input_ids=ids.to(self.device)).last_hidden_state              # (B, L, H)
                gather_pos = gather_pos.to(self.device)
                hidden = hidden.gather(1, gather_pos[:, :, None].expand(-1, -1, hidden.shape[-1]))  # (B, T, H)
            sel = None
            if need is not None:
                nm = torch.zeros((B, Tmax), dtype=torch.bool)
                for i, n in enumerate(need):
                    nm[i, :len(n)] = torch.tensor(n, dtype=torch.bool)
                sel = nm.to(self.device)
                hidden = hidden[sel]                                                           # (n, H)
            logits = head(hidden).float()                                                      # (B, T, V) | (n, V)
        if temperature > 0:
            logits = logits / temperature
        logp_all = torch.log_softmax(logits, dim=-1)
        tgt = tgt.to(self.device)
        if sel is None:
            logp = logp_all.gather(-1, tgt[:, :, None]).squeeze(-1)
            ent = -(logp_all.exp() * logp_all).sum(-1) if with_entropy else None
            return logp, mask.to(self.device), ent
        logp = torch.zeros((B, Tmax), device=self.device).masked_scatter(
            sel, logp_all.gather(-1, tgt[sel][:, None]).squeeze(-1))
        ent = None
        if with_entropy:
            ent = torch.zeros((B, Tmax), device=self.device).masked_scatter(sel, -(logp_all.exp() * logp_all).sum(-1))
        return logp, mask.to(self.device), ent

    @torch.no_grad()
    def logprobs(self, contexts: list[list[int]], completions: list[list[int]], temperature: float = 1.0,
                 weights: str = "train", max_tokens: int = 8192) -> list[list[float]]:
        """Recompute per-token logprobs of `completions` given `contexts` (weights: "train" | "inference")."""
        self._check_contexts(contexts)
        if len(completions) != len(contexts):
            raise ValueError(f"{len(completions)} completions for {len(contexts)} contexts")
        model = self.model if weights == "train" else self.rollout_model
        was_training = model.training
        model.eval()
        out: list[list[float]] = [[] for _ in contexts]
        for mb in self._micro_batches(contexts, completions, max_tokens):
            mb = [i for i in mb if completions[i]]
            if not mb:
                continue
            logp, _, _ = self._forward_logprobs(model, [contexts[i] for i in mb], [completions[i] for i in mb], temperature)
            logp = logp.cpu()
            for j, i in enumerate(mb):
                out[i] = logp[j, :len(completions[i])].tolist()
        model.train(was_training)
        return out

    # ------------------------------------------------------------------ training
    def update(self, rows: list[Row], cfg: UpdateConfig, temperature: float = 1.0) -> UpdateStats:
        """PPO update of the training weights on the masked tokens of `rows`.

        Loss per mini-batch (verl conventions): token-mean over all trained tokens of the
        mini-batch of the dual-clipped surrogate, + kl_coef * token-mean low_var_kl(pi, ref),
        - entropy_coef * token-mean entropy. Micro-batches accumulate gradients so that memory
        stays bounded by cfg.micro_batch_tokens.

        PPO's old logprobs follow cfg.old ("recompute": the training weights' logprobs of each row
        before the update, verl's default; "rollout": the rows' rollout logprobs); cfg.rollout_is
        "token" weights each token's loss by min(pi_old / pi_rollout, cfg.rollout_is_threshold) (verl's
        decoupled token-level TIS). The rollout-training mismatch of the trained tokens (`Mismatch`,
        by turn when rows carry `turns`) is measured on the pre-update weights in either case.
        """
        rows = [r for r in rows if sum(r.mask) > 0]
        if not rows:
            return UpdateStats(0.0, float("nan"), float("nan"), 0.0, 0.0, 0.0, 0)
        for g in self.optimizer.param_groups:
            g["lr"], g["weight_decay"] = cfg.lr, cfg.weight_decay
        if cfg.kl_coef > 0 and self.ref_model is None:
            raise ValueError("kl_coef > 0 needs the engine built with reference=True")
        if cfg.rollout_is is not None and cfg.old != "recompute":
            raise ValueError("rollout_is (verl's decoupled TIS) weights by pi_old / pi_rollout: it needs old = recompute")
        self._check_contexts([r.prompt_ids + r.response_ids[:-1] or r.prompt_ids for r in rows])

        # The training weights' logprobs of every row before any optimizer step: PPO's old under
        # cfg.old = "recompute", and what the mismatch is measured on (paper Fig. 3). Rows of the first
        # mini-batch get them from the first pass's forward; rows of later mini-batches are scored
        # first (the first mini-batch's step has moved the weights by then).
        splits = prompt_group_splits(rows, cfg.mini_batches)
        before: dict[int, list[float]] = {}
        mismatch: dict[int, Mismatch] = {}

        def measure(idx: list[int], logps: list[list[float]]) -> None:
            for i, lp in zip(idx, logps):
                before[i] = lp
                for k, m in mismatch_by_turn(rows[i], lp, cfg.clip_low, cfg.clip_high).items():
                    mismatch[k] = mismatch.get(k, Mismatch()) + m

        later = [i for ix in splits[1:] for i in ix]
        if later:
            measure(later, self.logprobs([rows[i].prompt_ids for i in later], [rows[i].response_ids for i in later],
                                         temperature, max_tokens=cfg.micro_batch_tokens))

        self.model.train()
        losses, clips, kls, norms = [], [], [], []
        for epoch in range(cfg.epochs):
            for mi, ix in enumerate(splits):
                n_tok = float(sum(sum(rows[i].mask) for i in ix))
                self.optimizer.zero_grad(set_to_none=True)
                tot_loss = tot_clip = tot_kl = 0.0
                for micro in self._micro_batches([rows[i].prompt_ids for i in ix], [rows[i].response_ids for i in ix],
                                                 cfg.micro_batch_tokens):
                    idx = [ix[j] for j in micro]
                    mr = [rows[i] for i in idx]
                    logp, pad_mask, ent = self._forward_logprobs(
                        self.model, [r.prompt_ids for r in mr], [r.response_ids for r in mr], temperature,
                        with_entropy=cfg.entropy_coef > 0, need=[r.mask for r in mr])
                    if epoch == 0 and mi == 0:
                        det = logp.detach().cpu()
                        measure(idx, [det[j, :len(r.response_ids)].tolist() for j, r in enumerate(mr)])
                    T = logp.shape[1]
                    pad = lambda xs, v=0.0: torch.tensor([x + [v] * (T - len(x)) for x in xs], dtype=torch.float,
                                                         device=self.device)
                    mask = pad([list(map(float, r.mask)) for r in mr]) * pad_mask
                    rollout = pad([r.old_logprobs for r in mr])
                    old = pad([before[i] for i in idx]) if cfg.old == "recompute" else rollout
                    adv = pad([r.advantages for r in mr])
                    pg, clipped = L.ppo_clip_loss(logp, old, adv, cfg.clip_low, cfg.clip_high, cfg.dual_clip_c)
                    if cfg.rollout_is == "token":
                        pg = pg * L.truncated_is_weights(old, rollout, cfg.rollout_is_threshold)
                    loss = L.masked_sum(pg, mask) / n_tok
                    tot_clip += float(L.masked_sum(clipped.float(), mask))
                    if cfg.kl_coef > 0:
                        with torch.no_grad():
                            ref, _, _ = self._forward_logprobs(self.ref_model, [r.prompt_ids for r in mr],
                                                               [r.response_ids for r in mr], temperature,
                                                               need=[r.mask for r in mr])
                        kl = L.low_var_kl(logp, ref)
                        loss = loss + cfg.kl_coef * L.masked_sum(kl, mask) / n_tok
                        tot_kl += float(L.masked_sum(kl.detach(), mask))
                    if cfg.entropy_coef > 0:
                        loss = loss - cfg.entropy_coef * L.masked_sum(ent, mask) / n_tok
                    loss.backward()
                    tot_loss += float(loss.detach())
                gn = torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.max_grad_norm)
                if torch.isfinite(gn):
                    self.optimizer.step()
                self.train_version += 1
                losses.append(tot_loss); clips.append(tot_clip / n_tok); kls.append(tot_kl / n_tok); norms.append(float(gn))
        total = sum(mismatch.values(), Mismatch())
        return UpdateStats(loss=float(np.mean(losses)), ratio_mean=total.ratio / total.tokens,
                           kl_rollout_train=total.kl / total.tokens, clip_frac=float(np.mean(clips)),
                           kl_ref=float(np.mean(kls)), grad_norm=float(np.mean(norms)), trained_tokens=int(total.tokens),
                           mismatch=mismatch)

    def token_gradients(self, rows: list[Row], cfg: UpdateConfig, temperature: float = 1.0) -> list[list[float]]:
        """d loss / d logp(token) for every response token of `rows`, without an optimizer step.

        The loss is the one `update` minimises (one mini-batch); tokens with mask 0 must get exactly 0.
        """
        n_tok = float(sum(sum(r.mask) for r in rows))
        logp, pad_mask, _ = self._forward_logprobs(self.model, [r.prompt_ids for r in rows],
                                                   [r.response_ids for r in rows], temperature)
        logp.retain_grad()
        T = logp.shape[1]
        pad = lambda xs: torch.tensor([x + [0.0] * (T - len(x)) for x in xs], dtype=torch.float, device=self.device)
        mask = pad([list(map(float, r.mask)) for r in rows]) * pad_mask
        old = logp.detach() if cfg.old == "recompute" else pad([r.old_logprobs for r in rows])
        pg, _ = L.ppo_clip_loss(logp, old, pad([r.advantages for r in rows]), cfg.clip_low, cfg.clip_high,
                                cfg.dual_clip_c)
        (L.masked_sum(pg, mask) / max(n_tok, 1.0)).backward()
        grads = [logp.grad[i, :len(r.response_ids)].cpu().tolist() for i, r in enumerate(rows)]
        self.model.zero_grad(set_to_none=True)
        return grads

    def sync(self) -> None:
        """Copy the training weights into the inference model (the weight-sync of verl/vLLM)."""
        self.rollout_model.load_state_dict(self.model.state_dict())
        self.inference_weights_changed()
        self.weight_version += 1

    def drop_prefix_cache(self) -> None:
        """Forget cached context blocks (benchmarks that compare cold prefills call this)."""
        if self._prefix_cache is not None:
            self._prefix_cache.clear()

    def inference_weights_changed(self) -> None:
        """Call after writing into `rollout_model`'s weights in place (sync, load, or a server that
        pushes weights into it): the decoder re-reads them and the prefix cache is emptied."""
        if self._decoder is not None:
            self._decoder.refresh()  # its fused projections are copies of the inference weights
        if self._prefix_cache is not None:
            self._prefix_cache.clear()

    # ------------------------------------------------------------------ persistence
    def state(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "rollout_model": self.rollout_model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "weight_version": self.weight_version,
            "train_version": self.train_version,
            "rng": {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state(),
                    "seed_gen": self.seed_gen.getstate()},
        }

    def save(self, path: str | os.PathLike) -> None:
        """Atomically write weights (train + inference), optimizer, RNG states and counters.

        The prefix cache is not saved but cleared, so that the state an uninterrupted run goes on
        from equals the state a run resumed from this checkpoint starts from."""
        if self._prefix_cache is not None:
            self._prefix_cache.clear()
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        tmp = path / "engine.pt.tmp"
        torch.save(self.state(), tmp)
        os.replace(tmp, path / "engine.pt")

    def load(self, path: str | os.PathLike) -> None:
        f = Path(path) / "engine.pt"
        if not f.exists():
            raise FileNotFoundError(f"no engine checkpoint at {f}")
        st = torch.load(f, weights_only=False, map_location=self.device)
        self.model.load_state_dict(st["model"])
        self.rollout_model.load_state_dict(st["rollout_model"])
        self.inference_weights_changed()
        self.optimizer.load_state_dict(st["optimizer"])
        self.weight_version, self.train_version = st["weight_version"], st["train_version"]
        torch.set_rng_state(st["rng"]["torch"].cpu())
        random.setstate(st["rng"]["python"])
        np.random.set_state(st["rng"]["numpy"])
        self.seed_gen.setstate(st["rng"]["seed_gen"])

    def weights_finite(self) -> bool:
        with torch.no_grad():
            return all(bool(torch.isfinite(p).all()) for p in self.model.parameters())

    def export(self, path: str | os.PathLike) -> None:
        """Write the training weights as a Hugging Face model directory (with the tokenizer)."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(path)
        self.tokenizer.save_pretrained(path)


def prompt_group_splits(rows: list[Row], mini_batches: int) -> list[list[int]]:
    """Row indices of each mini-batch: the rows' prompt groups (`Row.group`: a prompt's chains, the leaves of a
    prompt's trees, RTPO's siblings of one boundary state S_k) in order of first appearance, cut into
    `mini_batches` runs of consecutive groups of near-equal count, so a group never straddles two
    optimizer steps. This is verl's actor.ppo_mini_batch_size: train_batch_size prompts (x rollout.n
    responses, kept together) cut into train_batch_size / ppo_mini_batch_size mini-batches. Rows without
    a group ("") are each their own group. Fewer groups than mini-batches: one mini-batch per group.
    With one mini-batch the rows keep their order (the update is the same as with no split)."""
    if mini_batches <= 1:
        return [list(range(len(rows)))]
    order: dict[str | int, list[int]] = {}
    for i, r in enumerate(rows):
        order.setdefault(r.group or i, []).append(i)
    groups = list(order.values())
    n_mb = min(mini_batches, len(groups))
    return [[i for g in part for i in groups[g]] for part in np.array_split(np.arange(len(groups)), n_mb)]


def mismatch_by_turn(row: Row, train_logprobs: list[float], clip_low: float, clip_high: float) -> dict[int, Mismatch]:
    """The rollout-training mismatch (`Mismatch` token sums) of one row's trained tokens, by the turn
    index of each token (row.turns; -1 for all when the row has none)."""
    m = torch.tensor(row.mask, dtype=torch.bool)
    d = (torch.tensor(train_logprobs, dtype=torch.float64) - torch.tensor(row.old_logprobs, dtype=torch.float64))[m]
    d = d.clamp(-20.0, 20.0)
    turns = (torch.tensor(row.turns, dtype=torch.long)[m] if row.turns is not None
             else torch.full((int(m.sum()),), -1, dtype=torch.long))
    ratio = torch.exp(d)
    kl = ratio - 1.0 - d
    clipped = ((ratio < 1.0 - clip_low) | (ratio > 1.0 + clip_high)).double()
    out = {}
    for k in torch.unique(turns).tolist():
        sel = turns == k
        out[int(k)] = Mismatch(float(sel.sum()), float(ratio[sel].sum()), float(d[sel].sum()),
                               float(d[sel].abs().sum()), float(kl[sel].sum()), float(clipped[sel].sum()))
    return out
