"""Torch-only measurement of the actor's memory at paper scale (GPU smoke case ``paper_memory``).

    python scripts/gpu_memory.py [--layers 2,4] [--methods grpo,...] [--json OUT]   # one CUDA GPU
    python scripts/gpu_memory.py --tiny                                             # CPU rehearsal, seconds
    bash scripts/gpu_smoke.sh --cases paper_memory                                  # the same, as a smoke case

Needs only torch and transformers (and this repository's light modules: rtpo.config, rtpo.verl_ext.startup,
rtpo.verl_ext.entropy, rtpo.verl_ext.launch, imported from the checkout this script is in; no verl, vLLM,
Ray, network or download), so one GPU with just torch measures what config/paper.yaml's actor update holds
on a GPU:

* the model: config/paper.yaml's model shape (rtpo.verl_ext.startup.KNOWN_MODELS: Qwen3-8B, hidden 4096,
  intermediate 12288, 32/8 heads of 128, the full 151,936-token vocabulary), random init, cut to
  ``--layers`` decoder layers (2 and 4 by default); bf16 parameters on CUDA (FSDP2's param_dtype; verl's
  fp32 masters are in the arithmetic below), autocast bf16 as verl's forward, gradient checkpointing
  on (verl's default, non-reentrant), config/paper.yaml's attention (``verl.attn_implementation``; sdpa,
  or flash_attention_2 when flash-attn is installed, else sdpa with a printed note);
* remove-padding: one packed row of ``train.micro_batch_tokens`` (24,576) tokens per micro-batch, the
  position ids restarting per sequence (transformers builds the block-diagonal mask from them). The
  sequences are the paper cell's rows (rtpo.verl_ext.launch.lengths of the ``--task`` cell, math by
  default): flat / full-history rows of GRPO, Tree-GRPO, SeeUPO (math: 21,504 tokens + a 3,072-token
  row filling the budget, so the packed-mask path runs; a lone 24,576-token search row would take
  sdpa's mask-free causal path) and RTPO's turn rows c_k + turn (12,288: two per micro-batch);
* KL on: a reference model (the policy before a small perturbation, so KL > 0) scores the row under
  no_grad; the loss is verl's: vanilla PPO with dual clip (train.clip, train.dual_clip_c; SeeUPO's
  ratio_clip and adv_clamp), token-mean, + kl_coef x low_var_kl, - entropy_coef x entropy (Tree-GRPO);
  log-probs through verl's ``logprobs_from_logits_v2`` (the path without flash-attn's cross entropy:
  a per-row log-softmax, fp32 under autocast), copied below;
* Tree-GRPO's entropy with gradients through rtpo's patch (rtpo.verl_ext.entropy, what the plugin puts
  in verl) under verl's reentrant checkpoint, and, as ``tree_grpo_verl``, verl 0.9.1's unpatched
  chunked function (eager: what torch.compile falls back to after its recompile limit) for comparison.

Each method runs five passes, one micro-batch each: old-logprob (no_grad forward, log-probs + chunked
entropy), ref (the reference model, no_grad), update forward, backward, optimizer (grad clipping +
AdamW, lr / weight decay from paper.yaml, a fresh optimizer per method so its state is allocated in
that pass). Per pass it prints the peak (``torch.cuda.max_memory_allocated``, reset between passes; on
CPU the peak of tensor storages allocated during the pass, tracked by a TorchDispatchMode), the
*excess* = peak - the measured models' state (parameters, gradients, optimizer state), seconds and
tokens/s, and for the update the bytes saved for backward (a saved-tensor hook; distinct storages).

Extrapolation to the full depth (`extrapolate`, `paper_peak`): per pass, excess(L_full) = excess(L2) +
(L_full - L2) x the per-layer increment (excess(L2) - excess(L1)) / (L2 - L1) (>= 0) when two layer
counts were measured, else the layer-count model (2 B x T x H per layer: the checkpointed bf16 layer
input) for the passes with gradients; the optimizer pass's excess scales with the parameters one GPU
steps (N / n_gpus, fp32) instead. The peak at paper scale is then rtpo.verl_ext.startup's state (fp32
weights + grads + AdamW, 16 B x N / n_gpus), its FSDP transient (unsharded units) and fixed terms
(CUDA context, sleeping vLLM, fragmentation) + the extrapolated excess, compared with the budget
(config/paper.yaml ``verl.gpu_memory_gib``; the measuring card's memory is printed beside it).
PASS per method: every pass ran, loss / KL / grad norm finite, KL > 0, the extrapolated peak within the
budget, and for Tree-GRPO the patched entropy path's backward excess and saved bytes below the
unpatched one's. ``tree_grpo_verl`` is a comparison row (it may FAIL; it does not fail the case).

Not measured here: FSDP2 itself (sharding, all-gathers, reduce-scatter buffers: startup's transient
term), fp32 master weights (the arithmetic's state term), torch.compile, vLLM and NCCL (fixed term).
``--tiny``: the same code path on CPU (or a GPU) at a tiny shape (hidden 64, vocabulary 2048, lengths
/ 96: 256-token micro-batches), bf16; its verdicts rehearse the code, not the paper's memory.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import math
import sys
import time
import warnings
import weakref
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parent.parent  # this checkout: its rtpo package, installed or not
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

PASSES = ("old_logprob", "ref", "update_fwd", "backward", "optimizer")
METHODS = ("grpo", "tree_grpo", "tree_grpo_verl", "rtpo", "seeupo")
COMPARISON = ("tree_grpo_verl",)  # verl's unpatched entropy: reported, never fails the case
GRAD_PASSES = ("update_fwd", "backward")  # their excess grows by the checkpointed layer inputs
GIB = 2 ** 30
TINY = dict(hidden=64, intermediate=192, heads=4, kv_heads=2, head_dim=16, vocab=2048, scale=96, chunk=32)
ENTROPY_CHUNK = 2048  # verl's entropy_from_logits_chunk_size (its checkpointed call passes no chunk size)
PERTURB = 1e-3        # the policy = reference + this x each tensor's std x N(0, 1): KL > 0
OOM = getattr(torch, "OutOfMemoryError", getattr(torch.cuda, "OutOfMemoryError", MemoryError))


# ------------------------------------------------------------------ verl 0.9.1's functions, verbatim
def logprobs_from_logits_v2(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """verl/utils/torch_functional.py logprobs_from_logits_v2 (what logprobs_from_logits runs without
    flash-attn's cross entropy), verbatim."""
    if logits.dtype in [torch.float32, torch.float64]:
        logits_labels = torch.gather(logits, dim=-1, index=labels.unsqueeze(-1)).squeeze(-1)
        logsumexp_values = torch.stack([torch.logsumexp(logit, dim=-1) for logit in logits])
        logprobs_labels = logits_labels - logsumexp_values
    else:
        logprobs_labels = []
        for row_logits, row_labels in zip(logits, labels, strict=True):
            row_logprobs = torch.nn.functional.log_softmax(row_logits, dim=-1)
            row_logprobs_labels = row_logprobs.gather(dim=-1, index=row_labels.unsqueeze(-1)).squeeze(-1)
            logprobs_labels.append(row_logprobs_labels)
        logprobs_labels = torch.stack(logprobs_labels)
    return logprobs_labels


def low_var_kl(logprob: torch.Tensor, ref_logprob: torch.Tensor) -> torch.Tensor:
    """verl/trainer/ppo/core_algos.py kl_penalty_forward(..., "low_var_kl"), verbatim."""
    kl = ref_logprob - logprob
    kl = torch.clamp(kl, min=-20, max=20)
    ratio = torch.exp(kl)
    kld = (ratio - kl - 1).contiguous()
    return torch.clamp(kld, min=-10, max=10)


def token_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp(min=1)


def ppo_loss(logp: torch.Tensor, old: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor, clip_low: float,
             clip_high: float, clip_c: float) -> torch.Tensor:
    """verl's compute_policy_loss_vanilla (dual clip), token-mean."""
    ratio = torch.exp(torch.clamp(logp - old, min=-20.0, max=20.0))
    pg1 = -adv * ratio
    pg2 = -adv * torch.clamp(ratio, 1 - clip_low, 1 + clip_high)
    clipped1 = torch.maximum(pg1, pg2)
    clipped2 = torch.minimum(-adv * clip_c, clipped1)
    return token_mean(torch.where(adv < 0, clipped2, clipped1), mask)


# ------------------------------------------------------------------ the paper cell
@dataclasses.dataclass
class Loss:
    """One method's loss and optimizer settings (train.* overlaid by method.<name>.*)."""
    kl_coef: float
    entropy_coef: float
    clip_low: float
    clip_high: float
    clip_c: float
    adv_clamp: float            # SeeUPO's (0: none)
    lr: float
    weight_decay: float
    max_grad_norm: float


@dataclasses.dataclass
class Setup:
    """What the measurement runs (read from config/paper.yaml; `tiny`: scaled down)."""
    shape: Any                    # rtpo.verl_ext.startup.ModelShape of the full model (layers: the target depth)
    tokens: int                   # the micro-batch token budget (train.micro_batch_tokens)
    rows: dict[str, list[tuple[int, int]]]  # method -> the packed row's sequences (length, prompt length)
    loss: dict[str, "Loss"]       # method -> its loss settings (the cell's, as launch.verl_overrides passes them)
    chunk: int                    # entropy chunk size
    attn: str                     # the attention implementation the model runs with
    attn_note: str                # why, when it is not paper.yaml's
    n_gpus: int
    budget_gib: float
    task: str
    tiny: bool

    @property
    def startup_terms(self) -> dict[str, float]:
        """rtpo.verl_ext.startup.gpu_memory's state / transient / fixed terms (GiB) of the full model."""
        from rtpo.verl_ext import startup as st

        m = st.gpu_memory(self.shape, self.tokens, self.n_gpus, 1, self.attn, False, False, True, self.chunk,
                          self.budget_gib)
        return {"state": m.state, "transient": m.transient, "fixed": m.fixed}

    def startup_total(self, method: str) -> float:
        """The start-up check's whole estimate (GiB) of this cell, for comparison."""
        from rtpo.verl_ext import startup as st

        grad = method.startswith("tree_grpo")
        return st.gpu_memory(self.shape, self.tokens, self.n_gpus, 1, self.attn, False, False, True, self.chunk,
                             self.budget_gib, entropy_grad=grad, entropy_patched=method != "tree_grpo_verl").total


def pack(row: int, prompt: int, budget: int) -> list[tuple[int, int]]:
    """Sequences of `row` tokens (prompt `prompt`) filling `budget` tokens, the rest one shorter sequence
    (its prompt: min(prompt, half of it))."""
    seqs = [(row, prompt)] * max(1, budget // row)
    rest = budget - sum(n for n, _ in seqs)
    if rest > 0:
        seqs.append((rest, min(prompt, rest // 2)))
    return seqs


def attention(name: str) -> tuple[str, str]:
    """(what runs, a note when it is not `name`): flash attention needs flash-attn installed."""
    import importlib.util

    if name.startswith("flash_attention") and importlib.util.find_spec("flash_attn") is None:
        return "sdpa", f"config/paper.yaml names {name}, but flash-attn is not installed: sdpa instead"
    return name, ""


def paper_setup(tiny: bool = False, task: str = "math", budget_gib: float | None = None,
                target_layers: int | None = None) -> Setup:
    from rtpo.config import ROOT, load_config, method_settings
    from rtpo.verl_ext import startup as st
    from rtpo.verl_ext.launch import lengths

    paper = load_config(ROOT / "config" / "paper.yaml", validate=False)
    v, tr = paper["verl"], paper["train"]
    shape = st.KNOWN_MODELS[paper["model"]["hub_id"]]
    shape = dataclasses.replace(shape, vocab=int(paper["model"].get("vocab_size") or shape.vocab))
    scale = TINY["scale"] if tiny else 1
    if tiny:
        shape = dataclasses.replace(shape, name="tiny", hidden=TINY["hidden"], intermediate=TINY["intermediate"],
                                    heads=TINY["heads"], kv_heads=TINY["kv_heads"], head_dim=TINY["head_dim"],
                                    vocab=TINY["vocab"])
    if target_layers:
        shape = dataclasses.replace(shape, layers=int(target_layers))
    budget = int(tr["micro_batch_tokens"]) // scale
    rows, loss = {}, {}
    for m in METHODS:
        method = "tree_grpo" if m == "tree_grpo_verl" else m
        ms = method_settings(paper, method, task)
        t, mm = ms["train"], ms["method"]
        P, R = lengths(paper, method, ms["env"])
        rows[m] = pack((P + R) // scale, P // scale, budget)
        lo, hi = (float(x) for x in mm.get("ratio_clip", (1 - float(t["clip"]), 1 + float(t["clip"]))))
        ent = float(mm.get("entropy_coef", t.get("entropy_coef", 0.0)))  # as launch.verl_overrides reads it
        loss[m] = Loss(kl_coef=float(t["kl_coef"]), entropy_coef=ent,
                       clip_low=1 - lo, clip_high=hi - 1, clip_c=float(t["dual_clip_c"]),
                       adv_clamp=float(mm.get("adv_clamp", 0.0) or 0.0), lr=float(t["lr"]),
                       weight_decay=float(t["weight_decay"]), max_grad_norm=float(t["max_grad_norm"]))
    attn, note = attention(str(v.get("attn_implementation") or "flash_attention_2"))
    return Setup(shape=shape, tokens=budget, rows=rows, loss=loss,
                 chunk=TINY["chunk"] if tiny else ENTROPY_CHUNK, attn=attn, attn_note=note,
                 n_gpus=int(v["n_gpus_per_node"]) * int(v.get("nnodes", 1)),
                 budget_gib=float(budget_gib if budget_gib is not None else v.get("gpu_memory_gib", 80)),
                 task=task, tiny=tiny)


# ------------------------------------------------------------------ models and the packed row
def build_models(s: Setup, layers: int, device: torch.device, dtype: torch.dtype, seed: int = 0):
    """(policy, reference): a random Qwen3 of the setup's shape cut to `layers` layers; the policy is
    the reference perturbed by PERTURB (so KL > 0), in training mode with gradient checkpointing."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    sh = s.shape
    cfg = Qwen3Config(vocab_size=sh.vocab, hidden_size=sh.hidden, intermediate_size=sh.intermediate,
                      num_hidden_layers=layers, num_attention_heads=sh.heads, num_key_value_heads=sh.kv_heads,
                      head_dim=sh.head_dim, max_position_embeddings=max(sh.max_positions, s.tokens),
                      tie_word_embeddings=sh.tied, rope_theta=1_000_000.0, use_cache=False)
    torch.manual_seed(seed)
    with torch.device(device):
        try:
            ref = Qwen3ForCausalLM._from_config(cfg, attn_implementation=s.attn, dtype=dtype)
        except TypeError:  # transformers < 4.56
            ref = Qwen3ForCausalLM._from_config(cfg, attn_implementation=s.attn, torch_dtype=dtype)
    ref.eval().requires_grad_(False)
    policy = copy.deepcopy(ref).requires_grad_(True)
    g = torch.Generator(device=device).manual_seed(seed + 1)
    with torch.no_grad():
        for p in policy.parameters():
            if p.numel() > 1:
                p.add_(torch.randn(p.shape, generator=g, device=device, dtype=torch.float32).to(p.dtype)
                       * (PERTURB * float(p.float().std())))
    policy.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})  # verl's call
    policy.train()
    for p in policy.parameters():  # gradients allocated up front: the state, not a pass's excess
        p.grad = torch.zeros_like(p)
    return policy, ref


def packed_batch(rows: list[tuple[int, int]], vocab: int, device: torch.device, seed: int = 0) -> dict[str, torch.Tensor]:
    """One remove-padding row: the sequences' tokens back to back, position ids restarting per sequence,
    labels = the next token (verl's input_ids_rmpad_rolled), loss mask on each sequence's response,
    advantages +1 / -0.5 alternating per sequence."""
    g = torch.Generator().manual_seed(seed)
    T = sum(n for n, _ in rows)
    ids = torch.randint(0, vocab, (T,), generator=g)
    pos = torch.cat([torch.arange(n) for n, _ in rows])
    mask = torch.cat([(torch.arange(n) >= p).float() for n, p in rows])
    adv = torch.cat([torch.full((n,), 1.0 if i % 2 == 0 else -0.5) for i, (n, _) in enumerate(rows)])
    return {"input_ids": ids[None].to(device), "position_ids": pos[None].to(device),
            "labels": torch.roll(ids, -1).to(device), "mask": mask.to(device), "adv": adv.to(device)}


# ------------------------------------------------------------------ memory meters
class CudaMeter:
    """torch.cuda's allocator statistics."""
    kind = "torch.cuda.max_memory_allocated"

    def __init__(self, device: torch.device):
        self.device = device

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def sync(self) -> None:
        torch.cuda.synchronize(self.device)

    def reset_peak(self) -> None:
        self.sync()
        torch.cuda.reset_peak_memory_stats(self.device)

    def peak(self) -> int:
        self.sync()
        return int(torch.cuda.max_memory_allocated(self.device))

    def allocated(self) -> int:
        return int(torch.cuda.memory_allocated(self.device))


class CpuMeter:
    """The peak of tensor storages on CPU: `base` bytes (the state when it starts) + every storage an op
    allocates while it is active (a TorchDispatchMode: an output whose storage is none of the inputs'),
    less those freed since (weakref finalizers on the storages). Frees of storages that existed before
    it started are not seen (a conservative peak)."""
    kind = "CPU tensor storages (TorchDispatchMode)"

    def __init__(self, base: int):
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils._pytree import tree_flatten

        meter = self

        class Track(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                ins = {t.untyped_storage().data_ptr() for t in tree_flatten((args, kwargs))[0]
                       if isinstance(t, torch.Tensor)}
                out = func(*args, **(kwargs or {}))
                for t in tree_flatten(out)[0]:  # a view or in-place result of an input allocates nothing
                    if isinstance(t, torch.Tensor) and t.device.type == "cpu":
                        st = t.untyped_storage()
                        if st.nbytes() and st.data_ptr() not in ins:
                            meter._add(st)
                return out

        self.base, self.cur, self._peak, self.live = int(base), 0, 0, {}
        self._mode = Track()

    def _add(self, st: Any) -> None:
        k = id(st)
        if k not in self.live:
            n = int(st.nbytes())
            self.live[k] = n
            self.cur += n
            self._peak = max(self._peak, self.cur)
            weakref.finalize(st, self._free, k)

    def _free(self, k: int) -> None:
        self.cur -= self.live.pop(k, 0)

    def __enter__(self):
        self._mode.__enter__()
        return self

    def __exit__(self, *exc):
        return self._mode.__exit__(*exc)

    def sync(self) -> None:
        pass

    def reset_peak(self) -> None:
        self._peak = self.cur

    def peak(self) -> int:
        return self.base + self._peak

    def allocated(self) -> int:
        return self.base + self.cur


class SavedBytes:
    """Bytes saved for backward while active (saved_tensors_hooks; distinct storages counted once).
    Saves inside the model's checkpointed layers go to torch.utils.checkpoint's own hooks and are not
    seen (they are recomputed in backward); verl's reentrant entropy checkpoint's recompute is."""

    def __init__(self) -> None:
        self.storages: dict[int, int] = {}

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        s = t.untyped_storage()
        self.storages[s.data_ptr()] = s.nbytes()
        return t

    def hooks(self):
        return torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)

    @property
    def total(self) -> int:
        return sum(self.storages.values())


def tensor_bytes(*tensors_or_modules: Any) -> int:
    """Bytes of the distinct storages of modules' parameters and gradients, optimizers' state, tensors."""
    seen: dict[int, int] = {}

    def add(t: Any) -> None:
        if isinstance(t, torch.Tensor):
            s = t.untyped_storage()
            seen[s.data_ptr()] = s.nbytes()

    for x in tensors_or_modules:
        if isinstance(x, torch.nn.Module):
            for p in x.parameters():
                add(p)
                add(p.grad)
        elif isinstance(x, torch.optim.Optimizer):
            for st in x.state.values():
                for t in st.values():
                    add(t)
        else:
            add(x)
    return sum(seen.values())


# ------------------------------------------------------------------ one method's update
@dataclasses.dataclass
class PassResult:
    peak: int | None       # bytes (None: not measured)
    state: int             # bytes of the measured models' parameters, gradients, optimizer state
    seconds: float
    tokens: int

    @property
    def excess(self) -> int | None:
        return None if self.peak is None else max(self.peak - self.state, 0)

    @property
    def tok_s(self) -> float:
        return self.tokens / max(self.seconds, 1e-9)


@dataclasses.dataclass
class MethodResult:
    method: str
    layers: int
    passes: dict[str, PassResult]
    saved: int              # bytes saved for backward by the update (forward + backward)
    loss: float
    kl: float
    grad_norm: float
    entropy: float | None
    error: str | None = None


def forward_logprobs(model: torch.nn.Module, b: dict[str, torch.Tensor], autocast: Any, entropy: str | None,
                     chunk: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """verl's actor forward on a packed row (transformer_impl.py, remove-padding branch): the logits
    (1, T, V) -> (T, V); entropy (`entropy`: "verl" / "patched": with gradients under verl's reentrant
    checkpoint; "nograd": verl's chunked function under no_grad); log-probs of the labels."""
    from rtpo.verl_ext import entropy as E

    with autocast():
        logits = model(input_ids=b["input_ids"], position_ids=b["position_ids"], use_cache=False).logits.squeeze(0)
        ent = None
        if entropy == "nograd":
            ent = E._verl_chunked(logits, chunk)
        elif entropy in ("verl", "patched"):
            fn = E._verl_chunked if entropy == "verl" else E.entropy_from_logits_with_chunking
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ent = torch.utils.checkpoint.checkpoint(fn, logits, chunk, use_reentrant=True)  # verl's default
        logp = logprobs_from_logits_v2(logits, b["labels"])
    return logp, ent


def run_method(s: Setup, method: str, layers: int, policy: torch.nn.Module, ref: torch.nn.Module,
               device: torch.device, meter_factory: Any, autocast: Any) -> MethodResult:
    """One micro-batch through the five passes of `method` (module doc)."""
    b = packed_batch(s.rows[method], s.shape.vocab, device)
    T = b["input_ids"].shape[1]
    c = s.loss[method]
    grad_entropy = {"tree_grpo": "patched", "tree_grpo_verl": "verl"}.get(method) if c.entropy_coef else None
    adv = b["adv"].clamp(-c.adv_clamp, c.adv_clamp) if c.adv_clamp else b["adv"]
    for p in policy.parameters():
        p.grad.zero_()
    opt = torch.optim.AdamW(policy.parameters(), lr=c.lr, weight_decay=c.weight_decay)
    passes: dict[str, PassResult] = {}
    saved = SavedBytes()
    with meter_factory(tensor_bytes(policy, ref)) as meter:
        def timed(name: str, fn: Any) -> Any:
            meter.reset_peak()
            t0 = time.perf_counter()
            out = fn()
            meter.sync()
            dt = time.perf_counter() - t0
            passes[name] = PassResult(meter.peak(), tensor_bytes(policy, ref, opt), dt, T)
            return out

        def old_logprob():
            with torch.no_grad():
                return forward_logprobs(policy, b, autocast, "nograd", s.chunk)

        old, _ = timed("old_logprob", old_logprob)

        def ref_logprob():
            with torch.no_grad():
                return forward_logprobs(ref, b, autocast, None, s.chunk)[0]

        ref_lp = timed("ref", ref_logprob)

        def update_fwd():
            with saved.hooks():
                logp, ent = forward_logprobs(policy, b, autocast, grad_entropy, s.chunk)
                pg = ppo_loss(logp, old.float(), adv, b["mask"], c.clip_low, c.clip_high, c.clip_c)
                kl = token_mean(low_var_kl(logp.float(), ref_lp.float()), b["mask"])
                loss = pg + c.kl_coef * kl
                if ent is not None:
                    loss = loss - c.entropy_coef * token_mean(ent, b["mask"])
            return loss, kl, ent

        loss, kl, ent = timed("update_fwd", update_fwd)

        def backward():
            with saved.hooks():
                loss.backward()

        timed("backward", backward)
        ent_val = None if ent is None else float(token_mean(ent.detach(), b["mask"]))
        loss_val, kl_val = float(loss.detach()), float(kl.detach())
        del loss, kl, ent

        def optimizer():
            gn = torch.nn.utils.clip_grad_norm_(policy.parameters(), c.max_grad_norm)
            opt.step()
            return float(gn)

        gn = timed("optimizer", optimizer)
    del opt
    return MethodResult(method, layers, passes, saved.total, loss_val, kl_val, gn, ent_val)


# ------------------------------------------------------------------ extrapolation
def extrapolate(excess: dict[int, float], target: int, model_per_layer: float) -> tuple[float, float, str]:
    """One pass's excess measured at layer counts {L: bytes} -> (excess at `target` layers, the per-layer
    increment, how it was obtained): from the smallest and largest L measured, (e(L2) - e(L1)) / (L2 - L1),
    at least 0; with one L, `model_per_layer`."""
    Ls = sorted(excess)
    if not Ls:
        raise ValueError("nothing measured")
    top = Ls[-1]
    if len(Ls) >= 2:
        d = max((excess[top] - excess[Ls[0]]) / (top - Ls[0]), 0.0)
        how = f"{Ls[0]} vs {top} layers"
    else:
        d = float(model_per_layer)
        how = f"layer-count model from {top} layers"
    return excess[top] + (target - top) * d, d, how


def paper_peak(excess_target: float, state_gib: float, transient_gib: float, fixed_gib: float) -> float:
    """GiB on one GPU at paper scale: the start-up model's state, FSDP transient and fixed terms + the
    extrapolated excess (bytes)."""
    return state_gib + transient_gib + fixed_gib + excess_target / GIB


def optimizer_scale(s: Setup, measured_params: int, measured_elem: int) -> float:
    """The optimizer pass's excess at paper scale / measured: its temporaries follow the parameters one
    GPU steps (N / n_gpus, fp32 under FSDP) over the measured model's (its dtype)."""
    return (s.shape.params / s.n_gpus * 4) / max(measured_params * measured_elem, 1)


@dataclasses.dataclass
class Verdict:
    method: str
    result: str                        # PASS | FAIL
    peak_gib: float                    # the extrapolated paper-scale peak (nan: not measured)
    peak_pass: str
    per_pass_gib: dict[str, float]     # pass -> the paper-scale peak of that pass
    excess_target: dict[str, float]    # pass -> its extrapolated excess, bytes
    per_layer: dict[str, float]        # pass -> the per-layer increment used, bytes
    problems: list[str]
    how: str


def judge(s: Setup, method: str, results: dict[int, MethodResult], params: dict[int, int], elem: int,
          patched_vs_verl: tuple[MethodResult, MethodResult] | None = None) -> Verdict:
    """A method's verdict from its results per layer count ({L: MethodResult}; module doc)."""
    terms = s.startup_terms
    problems: list[str] = [f"{L} layers: {r.error}" for L, r in sorted(results.items()) if r.error]
    ok = {L: r for L, r in results.items() if not r.error}
    for L, r in sorted(ok.items()):
        bad = [k for k, x in (("loss", r.loss), ("KL", r.kl), ("grad norm", r.grad_norm)) if not math.isfinite(x)]
        problems += [f"{L} layers: {k} not finite" for k in bad]
        if not r.kl > 0:
            problems.append(f"{L} layers: KL {r.kl:.2e}, want > 0 (the reference model did not score)")
    per_pass: dict[str, float] = {}
    excess: dict[str, float] = {}
    per_layer: dict[str, float] = {}
    how = ""
    if not ok:
        problems.append("nothing measured")
    elif all(r.passes[p].peak is not None for r in ok.values() for p in PASSES):
        top = max(ok)
        for p in PASSES:
            ex = {L: float(r.passes[p].excess) for L, r in ok.items()}
            if p == "optimizer":
                excess[p], per_layer[p] = ex[top] * optimizer_scale(s, params[top], elem), 0.0
            else:
                model = 2.0 * s.tokens * s.shape.hidden if p in GRAD_PASSES else 0.0
                excess[p], per_layer[p], h = extrapolate(ex, s.shape.layers, model)
                how = how or h
            per_pass[p] = paper_peak(excess[p], terms["state"], terms["transient"], terms["fixed"])
    if per_pass:
        peak_pass = max(per_pass, key=per_pass.get)
        peak = per_pass[peak_pass]
        if peak > s.budget_gib:
            problems.append(f"{s.shape.layers}-layer peak {peak:.1f} GiB ({peak_pass}) > {s.budget_gib:g} GiB")
    else:
        peak_pass, peak = "", float("nan")
    if patched_vs_verl is not None:
        new, old = patched_vs_verl
        if not (new.error or old.error):
            if not new.saved < old.saved:
                problems.append(f"patched entropy saves {new.saved} B for backward, not fewer than verl's {old.saved} B")
            a, b = new.passes["backward"].excess, old.passes["backward"].excess
            if a is not None and b is not None and not a < b:
                problems.append(f"patched entropy backward excess {a} B not below verl's {b} B")
    return Verdict(method, "FAIL" if problems else "PASS", peak, peak_pass, per_pass, excess, per_layer, problems, how)


# ------------------------------------------------------------------ the whole measurement
@dataclasses.dataclass
class Report:
    setup: Setup
    device: str
    meter: str
    card_gib: float | None
    results: dict[str, dict[int, MethodResult]]
    verdicts: dict[str, Verdict]

    @property
    def ok(self) -> bool:
        return all(v.result == "PASS" for m, v in self.verdicts.items() if m not in COMPARISON)

    def update_tok_s(self) -> float | None:
        """Tokens/s of the update (forward + backward) at the largest layer count, over the paper methods."""
        rs = [d[max(d)] for m, d in self.results.items() if m not in COMPARISON and d]
        rs = [r for r in rs if not r.error]
        if not rs:
            return None
        toks = sum(r.passes["update_fwd"].tokens for r in rs)
        secs = sum(r.passes["update_fwd"].seconds + r.passes["backward"].seconds for r in rs)
        return toks / max(secs, 1e-9)


def unit(s: Setup) -> tuple[str, int]:
    """The unit the tables print bytes in: GiB at the paper shape, MiB for --tiny."""
    return ("MiB", 2 ** 20) if s.tiny else ("GiB", GIB)


def run(s: Setup, layers: list[int], methods: list[str], device: str | None = None, dtype: str = "bfloat16",
        echo: Any = print) -> Report:
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dt = getattr(torch, dtype)
    if dev.type == "cuda":
        def meter_factory(base):
            return CudaMeter(dev)
        card = torch.cuda.get_device_properties(dev).total_memory / GIB
    else:
        meter_factory, card = CpuMeter, None

    def autocast():
        return torch.autocast(device_type=dev.type, dtype=dt, enabled=dt != torch.float32)

    u, div = unit(s)

    def fmt(x: int | float | None) -> str:
        return "n/a" if x is None else f"{x / div:.3f}"

    meter_kind = meter_factory(0).kind
    g = s.loss["tree_grpo"]
    echo(f"paper_memory: {'tiny rehearsal' if s.tiny else 'paper shape'} {s.shape.name} (hidden {s.shape.hidden}, "
         f"intermediate {s.shape.intermediate}, heads {s.shape.heads}/{s.shape.kv_heads} x {s.shape.head_dim}, vocab "
         f"{s.shape.vocab}) cut to {','.join(map(str, layers))} layers, {dtype} on {dev}, attention {s.attn}, "
         f"gradient checkpointing, packed {s.tokens}-token rows ({s.task} cell), KL coef {g.kl_coef} (low_var_kl), "
         f"Tree-GRPO entropy coef {g.entropy_coef}, entropy chunk {s.chunk}; peak: {meter_kind}")
    if s.attn_note:
        echo(f"paper_memory: note: {s.attn_note}")
    for m in methods:
        echo(f"paper_memory: {m} row: {' + '.join(str(n) for n, _ in s.rows[m])} tokens")
    results: dict[str, dict[int, MethodResult]] = {m: {} for m in methods}
    params: dict[int, int] = {}
    elem = torch.tensor([], dtype=dt).element_size()
    echo(f"{'method':<15} {'L':>2} {'pass':<12} {'peak ' + u:>10} {'excess ' + u:>11} {'state ' + u:>10} {'s':>7} "
         f"{'tok/s':>9}")
    for L in layers:
        policy, ref = build_models(s, L, dev, dt)
        params[L] = sum(p.numel() for p in policy.parameters())
        for m in methods:
            try:
                r = run_method(s, m, L, policy, ref, dev, meter_factory, autocast)
            except OOM as e:  # a measurement too: report it, go on
                r = MethodResult(m, L, {}, 0, math.nan, math.nan, math.nan, None,
                                 error=f"CUDA out of memory: {str(e).splitlines()[0][:160]}")
            results[m][L] = r
            if dev.type == "cuda":
                torch.cuda.empty_cache()
            if r.error:
                echo(f"{m:<15} {L:>2} {r.error}")
                continue
            for p in PASSES:
                x = r.passes[p]
                echo(f"{m:<15} {L:>2} {p:<12} {fmt(x.peak):>10} {fmt(x.excess):>11} {fmt(x.state):>10} "
                     f"{x.seconds:>7.2f} {x.tok_s:>9.0f}")
            tv = r.passes["update_fwd"].tokens * s.shape.vocab
            echo(f"{m:<15} {L:>2} update saved for backward {fmt(r.saved)} {u} ({r.saved / tv:.2f} B per token x "
                 f"vocabulary entry); loss {r.loss:.4f}, KL {r.kl:.2e}, grad norm {r.grad_norm:.3e}"
                 + ("" if r.entropy is None else f", entropy {r.entropy:.3f}"))
        del policy, ref
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    verdicts = {}
    top = max(layers)
    for m in methods:
        pair = None
        if m == "tree_grpo" and "tree_grpo_verl" in results:
            pair = (results["tree_grpo"][top], results["tree_grpo_verl"][top])
        verdicts[m] = judge(s, m, results[m], params, elem, pair)
    return Report(s, str(dev), meter_kind, card, results, verdicts)


def verdict_lines(rep: Report) -> list[str]:
    """The arithmetic's terms, then one PASS / FAIL line per method."""
    s, t = rep.setup, rep.setup.startup_terms
    u, div = unit(s)
    card = f"; this card: {rep.card_gib:.1f} GiB" if rep.card_gib else ""
    lines = [f"paper_memory: {s.shape.layers}-layer peak per pass = start-up model's state {t['state']:.1f} (fp32 weights, "
             f"grads, AdamW / {s.n_gpus} GPUs) + FSDP transient {t['transient']:.1f} + fixed {t['fixed']:.1f} GiB + the "
             f"pass's excess extrapolated to {s.shape.layers} layers; budget {s.budget_gib:g} GiB "
             f"(verl.gpu_memory_gib){card}"]
    for m, v in rep.verdicts.items():
        d = rep.results[m]
        r = d[max(d)] if d else None
        tag = " (comparison: verl's unpatched entropy, does not count)" if m in COMPARISON else ""
        if v.per_pass_gib:
            p = v.peak_pass
            head = (f"{s.shape.layers}-layer peak {v.peak_gib:.1f} GiB at {p} (excess {v.excess_target[p] / div:.3f} {u}, "
                    f"+{v.per_layer[p] / div:.4f} {u}/layer: {v.how}) vs {s.budget_gib:g} GiB; per pass GiB: "
                    + ", ".join(f"{k} {g:.1f}" for k, g in v.per_pass_gib.items())
                    + f"; start-up model {s.startup_total(m):.1f} GiB")
        else:
            head = "not measured"
        if r is not None and not r.error:
            head += (f"; at {r.layers} layers: update {r.passes['update_fwd'].tok_s:.0f} tok/s forward, "
                     f"{r.passes['backward'].tok_s:.0f} tok/s backward, saved {r.saved / div:.3f} {u}, KL {r.kl:.2e}")
        lines.append(f"paper_memory {m}: {v.result}{tag} {head}" + ("" if not v.problems else "; " + "; ".join(v.problems)))
    if s.tiny:
        lines.append("paper_memory: (--tiny: the code path rehearsed at a tiny shape; its GiB are not the paper's memory)")
    return lines


def to_json(rep: Report) -> dict:
    return {
        "device": rep.device, "meter": rep.meter, "card_gib": rep.card_gib, "tiny": rep.setup.tiny,
        "budget_gib": rep.setup.budget_gib, "target_layers": rep.setup.shape.layers, "tokens": rep.setup.tokens,
        "attn": rep.setup.attn, "attn_note": rep.setup.attn_note, "ok": rep.ok, "update_tok_s": rep.update_tok_s(),
        "verdicts": {m: dataclasses.asdict(v) for m, v in rep.verdicts.items()},
        "results": {m: {str(L): {**{k: getattr(r, k) for k in ("saved", "loss", "kl", "grad_norm", "entropy", "error")},
                                 "passes": {p: {**dataclasses.asdict(x), "excess": x.excess}
                                            for p, x in r.passes.items()}}
                        for L, r in d.items()} for m, d in rep.results.items()},
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tiny", action="store_true", help="the CPU rehearsal's tiny shape (any device)")
    p.add_argument("--layers", default="2,4", help="decoder layer counts to measure (default 2,4)")
    p.add_argument("--methods", default=",".join(METHODS), help=f"subset of {','.join(METHODS)}")
    p.add_argument("--task", default="math", help="the paper cell whose row lengths are packed (default math)")
    p.add_argument("--target-layers", type=int, default=None, help="extrapolate to (default: the model's, 36)")
    p.add_argument("--budget-gib", type=float, default=None, help="default config/paper.yaml verl.gpu_memory_gib")
    p.add_argument("--device", default=None, help="default cuda when available (cpu needs --tiny)")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    p.add_argument("--json", default=None, help="write the measurements and verdicts here")
    a = p.parse_args(argv)
    methods = [m.strip() for m in a.methods.split(",") if m.strip()]
    if any(m not in METHODS for m in methods):
        raise SystemExit(f"gpu_memory: unknown method(s) in {methods}; have {', '.join(METHODS)}")
    layers = sorted({int(x) for x in a.layers.split(",") if x.strip()})
    device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cpu") and not a.tiny:
        print("paper_memory: SKIP no CUDA device (the paper shape needs a GPU; --tiny rehearses the code on CPU)")
        return 2
    s = paper_setup(tiny=a.tiny, task=a.task, budget_gib=a.budget_gib, target_layers=a.target_layers)
    if s.attn == "sdpa" and not s.attn_note and any(len(s.rows[m]) == 1 for m in methods):
        print("paper_memory: note: a row of one sequence takes sdpa's mask-free causal path (no packed mask)")
    t0 = time.perf_counter()
    rep = run(s, layers, methods, device=device, dtype=a.dtype)
    lines = verdict_lines(rep)
    print("\n".join(lines))
    print(f"paper_memory: {'PASS' if rep.ok else 'FAIL'} ({time.perf_counter() - t0:.0f} s)", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(to_json(rep), indent=1))
    return 0 if rep.ok else 1


if __name__ == "__main__":
    sys.exit(main())
