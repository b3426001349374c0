"""The paper-scale estimates behind `rtpo check-config` (rtpo.verl_ext.startup): per-GPU memory of the
actor's passes and of the rollout servers, host memory, checkpoint disk and run time.

Pure arithmetic on a model shape (startup.ModelShape) and the parsed Hydra overrides: no verl, torch or
vLLM import. The memory terms and what each stands for are in docs/verl.md, "Start-up arithmetic"; the
GPU measurement that checks them (scripts/gpu_memory.py, the smoke's paper_memory case) in "paper_memory".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

GIB = 2 ** 30
MIB = 2 ** 20
# bytes per element of verl's dtype names (fsdp_config.model_dtype) and Hugging Face's (config.json dtype)
DTYPE_BYTES = {"fp32": 4, "float32": 4, "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2}
FLASH_ATTENTION = ("flash_attention_2", "flash_attention_3")
TORCH_ATTENTION = ("sdpa", "eager")  # shipped with torch, a dependency of rtpo itself


@dataclass(frozen=True)
class ModelShape:
    """What the arithmetic needs of a decoder-only model (a Hugging Face config.json's fields)."""

    name: str
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    max_positions: int
    tied: bool
    weight_bytes: int = 2  # bytes per parameter of the model directory's weights (config.json dtype; final/)

    @property
    def layer_params(self) -> int:
        attn = self.hidden * self.heads * self.head_dim * 2 + self.hidden * self.kv_heads * self.head_dim * 2
        return attn + 3 * self.hidden * self.intermediate + 2 * self.hidden + 2 * self.head_dim  # + norms

    @property
    def params(self) -> int:
        emb = self.vocab * self.hidden
        return emb * (1 if self.tied else 2) + self.layers * self.layer_params + self.hidden

    @classmethod
    def from_hf(cls, name: str, c: Mapping[str, Any]) -> "ModelShape":
        c = c.get("text_config", c)
        heads = int(c["num_attention_heads"])
        dtype = str(c.get("dtype") or c.get("torch_dtype") or "bfloat16")
        return cls(name, int(c["num_hidden_layers"]), int(c["hidden_size"]), int(c["intermediate_size"]), heads,
                   int(c.get("num_key_value_heads") or heads), int(c.get("head_dim") or c["hidden_size"] // heads),
                   int(c["vocab_size"]), int(c["max_position_embeddings"]), bool(c.get("tie_word_embeddings", False)),
                   DTYPE_BYTES.get(dtype, 2))


# config.json of the models the configs name (hub ids), so that the check needs no download


class CheckError(ValueError):
    """A setting the check cannot evaluate (e.g. an unknown model); names the key."""


# --------------------------------------------------------------------------------------------------
# Memory
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MemoryModel:
    """The constants of the per-GPU and host-RAM estimates (docs/verl.md, "Start-up arithmetic").

    GPU, training (rollout servers asleep):
      state       16 B/param over the n GPUs: fp32 master weights (engine/fsdp.yaml model_dtype fp32),
                  fp32 gradients (FSDP2 reduce_dtype fp32), AdamW's two fp32 moments. The reference
                  model (KL loss) holds nothing: forward-only FSDP2 units get CPUOffloadPolicy
                  (workers/engine/fsdp/transformer_impl.py _build_fsdp_module).
      transient   FSDP2 unshards one unit at a time: lm_head in bf16 plus its fp32 gradient before the
                  reduce-scatter, and two decoder layers in bf16 (prefetch).
      activations gradient checkpointing (hf_model.yaml enable_gradient_checkpointing: True): each
                  layer's bf16 input kept (2 L H B per token), one layer recomputed with its
                  gradients in flight, ~4 (14 H + 4 I) B per token (q/k/v/o, norms in fp32, the
                  attention output, the three MLP projections and the SiLU product).
      attention   sdpa with remove-padding packs a micro-batch into one row; transformers builds the
                  block-diagonal mask from position_ids (masking_utils find_packed_sequence_indices):
                  T^2 bool plus T^2 bf16 when SDPA turns it into an additive bias. Flash attention: 0.
      logits      lm_head's bf16 logits, T V 2 B; without flash-attn's Triton cross entropy
                  (utils/torch_functional.py logprobs_from_logits -> logprobs_from_logits_v2) the
                  per-row log-softmax is kept for backward and the gradient allocated: +4 B.
                  use_fused_kernels: 512-token chunks only (utils/experimental/torch_functional.py).
      entropy     chunked (entropy_from_logits_with_chunking) and checkpointed: fp32 chunks of
                  entropy_from_logits_chunk_size tokens, ~3 copies; unchunked: +4 B T V. With
                  gradients (actor entropy_coeff != 0: Tree-GRPO's bonus; rtpo/verl_ext/trainer.py
                  calculate_entropy) add, per token x vocabulary entry (rtpo/verl_ext/entropy.py,
                  measured by tests/test_entropy_memory.py): rtpo's patch (the plugin's
                  entropy.patch(): per-chunk backward) saves 0 B beyond the logits and allocates the
                  bf16 dH/dlogits, 2 B, alive next to the log-prob's until autograd sums them;
                  verl 0.9.1's own function (one reentrant checkpoint around the whole chunk loop,
                  workers/engine/fsdp/transformer_impl.py; torch.compile falls back to it after the
                  recompile limit) keeps every chunk's fp32 copy and fp32 softmax, 8 B, plus a full
                  T x V bf16 gradient per chunk (SliceBackward) next to the one accumulating, 4 B;
                  unchunked (verl_F.entropy_from_logits, no patch): its bf16 softmax and gradient, 4 B.
      fixed       CUDA context and NCCL buffers of the actor process, the sleeping vLLM worker on the
                  same GPU (its context and CUDA graphs; sleep frees weights and KV cache), allocator
                  fragmentation as a share of the GPU.
    Host RAM per node: the GPU worker and server processes, the reference model's fp32 weights
    (CPU-offloaded, pinned), one full fp32 state dict on rank 0 (model load; periodic checkpoints
    hold no hf_model, final/ is merged after verl exits), and with `vllm_keep` (vLLM sleep level 1)
    each replica's bf16 weights, pinned while it sleeps; the driver, TaskRunner, TransferQueue and
    agent workers.
    """

    actor_context_gib: float = 2.0
    vllm_asleep_gib: float = 3.0
    fragmentation: float = 0.05
    worker_rss_gib: float = 6.0  # one per GPU: the FSDP worker with its colocated vLLM worker
    server_rss_gib: float = 3.0  # one per rollout replica: vLLM's HTTP server / engine core
    driver_gib: float = 16.0
    eval_activation_gib: float = 2.0


MEMORY = MemoryModel()


@dataclass
class GpuMemory:
    state: float
    transient: float
    activations: float
    attention: float
    logits: float
    entropy: float
    fixed: float
    total: float
    tokens: int

    def terms(self) -> dict[str, float]:
        return {k: getattr(self, k) for k in ("state", "transient", "activations", "attention", "logits", "entropy",
                                              "fixed", "total")}


# bytes per (token x vocabulary entry) of entropy with gradients, beyond the logits (MemoryModel, entropy);
# rtpo/verl_ext/entropy.py SAVED_ + GRAD_BYTES_PER_TOKEN_VOCAB (tests/test_entropy_memory.py checks they agree)
ENTROPY_GRAD_BYTES = {"patched": 0.0 + 2.0, "verl": 8.0 + 4.0, "unchunked": 2.0 + 2.0}


def entropy_patch_active() -> bool:
    """Whether verl's chunked entropy is rtpo's on the GPU path: the launcher loads rtpo.verl_ext.plugin
    in every verl process (launch.verl_env: VERL_USE_EXTERNAL_MODULES), whose import calls
    rtpo.verl_ext.entropy.patch()."""
    from rtpo.verl_ext import PLUGIN_MODULES

    return "rtpo.verl_ext.plugin" in PLUGIN_MODULES.split(",")


def entropy_grad_kind(entropy_grad: bool, chunked: bool, fused: bool, patched: bool) -> str | None:
    """Which ENTROPY_GRAD_BYTES row an actor update pays (None: no entropy gradient over the logits)."""
    if not entropy_grad or fused:  # fused kernels: entropy and its gradient inside 512-token chunks
        return None
    if not chunked:
        return "unchunked"
    return "patched" if patched else "verl"


def gpu_memory(shape: ModelShape, tokens: int, n_gpus: int, sp: int, attention: str, flash_ce: bool,
               fused: bool, entropy_chunked: bool, entropy_chunk: int, gpu_gib: float,
               mm: MemoryModel = MEMORY, entropy_grad: bool = False, entropy_patched: bool = True) -> GpuMemory:
    """Per-GPU memory (GiB) of one actor micro-batch of `tokens` tokens per GPU (MemoryModel).
    entropy_grad: the update differentiates the entropy (entropy_coeff != 0); entropy_patched: verl's
    chunked entropy is rtpo's (`entropy_patch_active`)."""
    N, H, L, I, V = shape.params, shape.hidden, shape.layers, shape.intermediate, shape.vocab
    T = int(tokens)
    state = 16 * N / n_gpus
    lm_head = V * H
    transient = lm_head * (2 + 4) + 2 * 2 * shape.layer_params
    activations = T * (2 * L * H + 4 * (14 * H + 4 * I))
    attn = 0 if attention in FLASH_ATTENTION else 3 * T * T
    if fused:
        logits = 5 * 512 * V * 4
    else:
        logits = T * V * (2 if flash_ce else 6)
    entropy = 3 * entropy_chunk * V * 4 if (entropy_chunked or fused) else 4 * T * V
    kind = entropy_grad_kind(entropy_grad, entropy_chunked, fused, entropy_patched)
    if kind:
        entropy += ENTROPY_GRAD_BYTES[kind] * T * V
    fixed = (mm.actor_context_gib + mm.vllm_asleep_gib) * GIB + mm.fragmentation * gpu_gib * GIB
    parts = [x / GIB for x in (state, transient, activations, attn, logits, entropy, fixed)]
    return GpuMemory(*parts, total=sum(parts), tokens=T)


def vllm_awake(shape: ModelShape, n_gpus: int, util: float, gpu_gib: float, mm: MemoryModel = MEMORY) -> float:
    """GiB on a GPU while the colocated servers are awake: their share (gpu_memory_utilization of the
    GPU) plus the actor's resident fp32 weights and AdamW moments (gradients freed by zero_grad)."""
    return util * gpu_gib + 12 * shape.params / n_gpus / GIB + mm.actor_context_gib


def host_memory(shape: ModelShape, gpus_per_node: int, n_gpus: int, tp: int, keep: bool, ref: bool,
                mm: MemoryModel = MEMORY) -> dict[str, float]:
    """Host RAM (GiB) of one training node (MemoryModel)."""
    N = shape.params
    replicas = max(gpus_per_node // max(tp, 1), 1)
    t = {
        "processes": gpus_per_node * mm.worker_rss_gib + replicas * mm.server_rss_gib + mm.driver_gib,
        "ref_offload": (4 * N * gpus_per_node / n_gpus) / GIB if ref else 0.0,
        "full_state": 4 * N / GIB,
        "vllm_sleep_level1": replicas * 2 * N / GIB if keep else 0.0,
    }
    t["total"] = sum(t.values())
    return t


# --------------------------------------------------------------------------------------------------
# Disk and run time
# --------------------------------------------------------------------------------------------------
GB = 10 ** 9  # disk sizes in decimal GB / TB, as filesystems and quotas count them
# Generated tokens per second per GPU over a whole training step (rollout, old and reference
# log-probs, update): verl.step_tokens_per_gpu_s. Stated, not measured (no GPU has run this): the
# rollout at 1,000 tok/s per A100 (half the 2,000 the Slurm profile's README sizes evaluation with:
# the colocated servers get gpu_memory_utilization 0.6, not 0.85, so fewer long sequences share the
# KV cache) and training at 500 tok/s per A100 (12 N FLOPs per token, forward + backward + the
# gradient-checkpointing recompute 8 N, old and reference log-probs 2 N each: 98 GFLOP for Qwen3-8B,
# plus ~87 GFLOP of dense packed sdpa attention at 24576 tokens per micro-batch; at 30% of the
# A100's 312 bf16 TFLOP/s), each generated token trained about once: 1 / (1/1000 + 1/500) = 333.
# Replace it with a measured figure (scripts/gpu_smoke.sh paper_length prints verl's tok/s/GPU).
STEP_TOKENS_PER_GPU_S = 330.0
STARTUP_MIN = 15.0  # per job: Ray, model load, vLLM servers and CUDA graphs, the final export


@dataclass
class Disk:
    """Shared-filesystem bytes of one run (`checkpoint_disk`)."""

    checkpoint: float  # one of verl's checkpoints (the actor's save_contents)
    keep: int          # checkpoints kept at once (trainer.max_actor_ckpt_to_keep, at most the saves)
    final: float       # final/, written once after training (the base model's dtype)
    saves: int         # checkpoints a run writes

    @property
    def run(self) -> float:
        """What a finished run leaves: its kept checkpoints and final/."""
        return self.keep * self.checkpoint + self.final

    @property
    def peak(self) -> float:
        """While a save is written: with keep 1 verl deletes the old checkpoint only once the new one is
        complete (checkpoint_manager.py register_checkpoint); with keep >= 2 it first deletes down to
        keep - 1 (ensure_checkpoint_capacity)."""
        during = min(self.saves, self.keep + 1 if self.keep == 1 else self.keep) * self.checkpoint
        return max(during, self.run)


def checkpoint_disk(shape: ModelShape, ov: Mapping[str, Any]) -> Disk:
    """One run's checkpoints from its overrides: verl's FSDP checkpoint manager writes, per rank, its
    shard of the model in the actor's param dtype (fsdp_config.model_dtype, fp32 by default) for
    'model', AdamW's two moments in the same dtype for 'optimizer', the scheduler and RNG state for
    'extra' (bytes), and for 'hf_model' a full copy of the weights in that dtype on rank 0
    (utils/checkpoint/fsdp_checkpoint_manager.py save_checkpoint). final/: the base model's dtype
    (launch.export_final)."""
    N = shape.params
    dtype = str(ov["actor_rollout_ref.actor.fsdp_config.model_dtype"])
    if dtype not in DTYPE_BYTES:
        raise CheckError(f"actor_rollout_ref.actor.fsdp_config.model_dtype {dtype!r}: not one of {sorted(DTYPE_BYTES)}")
    pb = DTYPE_BYTES[dtype]
    contents = set(ov["actor_rollout_ref.actor.checkpoint.save_contents"] or [])
    one = N * pb * (("model" in contents) + 2 * ("optimizer" in contents) + ("hf_model" in contents))
    steps, freq = int(ov["trainer.total_training_steps"] or 0), int(ov["trainer.save_freq"])
    saves = 0 if freq <= 0 or steps <= 0 else steps // freq + (1 if steps % freq else 0)  # + the last step's
    k = ov["trainer.max_actor_ckpt_to_keep"]
    keep = saves if not isinstance(k, int) or k <= 0 else min(k, saves)  # verl: None / 0 keeps every one
    return Disk(float(one), keep, float(N * shape.weight_bytes), saves)


def rollout_tokens(method: str, m: Mapping[str, Any], env: Mapping[str, Any], R: int, chains: int) -> tuple[int, str]:
    """(generated tokens per prompt at the caps, how they are counted): every turn runs its
    max_new_tokens T, over the rollouts its card counts (rtpo.methods.cards `rollouts`, of the config's
    options and the card's defaults; `chains`, verl's rollout.n, is what the card's count gives GRPO).
    A flat method's episode is K turns cut at its row's response budget R; Tree-GRPO's and ARPO's
    branches are counted as whole episodes (they share a prefix, so this over-counts).
    RTPO per trunk: the trunk's K turns, then at each boundary S_k (k = K-1 .. 0) G-1 siblings of
    K - k turns each and the trunk's regenerated continuation of K - k - 1 turns."""
    from rtpo.methods.cards import card

    K, T = int(env.get("max_turns", 3)), int(env["max_new_tokens"])
    c = card(method)
    if c.rollouts is None:
        raise CheckError(f"method {method!r}: its card (rtpo.methods.cards) has no rollout count for the step-time estimate")
    n, unit, how = c.rollouts(c.options(m), K)
    if unit == "turns":
        return n * T, f"{how} of {T}"
    episode = min(K * T, R)
    return n * episode, f"{how} x {episode} tokens"


@dataclass
class RunTime:
    """The step-time estimate of one cell (`run_time`)."""

    step_tokens: int     # generated tokens per step at the caps
    how: str             # the count per prompt
    rate: float          # generated tokens / s per GPU (verl.step_tokens_per_gpu_s)
    gpus: int
    steps: int
    checkpoint_every: int

    @property
    def step_s(self) -> float:
        return self.step_tokens / (self.rate * self.gpus)

    @property
    def run_min(self) -> float:
        """The whole run in one job: start-up, every step, the final export (STARTUP_MIN)."""
        return STARTUP_MIN + self.steps * self.step_s / 60

    @property
    def first_checkpoint_min(self) -> float:
        """A job's start-up and the steps to its first checkpoint: a time limit below it means a job
        never saves one, so no resume makes progress."""
        return STARTUP_MIN + min(self.checkpoint_every, self.steps) * self.step_s / 60


def run_time(cfg: Mapping[str, Any], method: str, task: str, ov: Mapping[str, Any], R: int, n_gpus: int) -> RunTime:
    """Step time = generated tokens per step at the caps (prompts_per_step x `rollout_tokens`) /
    (verl.step_tokens_per_gpu_s x GPUs); an upper bound on the tokens, at a stated throughput."""
    from rtpo.config import method_settings

    s = method_settings(dict(cfg), method, task)
    per_prompt, how = rollout_tokens(method, s["method"], s["env"], R, int(ov["actor_rollout_ref.rollout.n"]))
    rate = float((cfg.get("verl") or {}).get("step_tokens_per_gpu_s", STEP_TOKENS_PER_GPU_S))
    steps = int(s["train"]["steps"])
    return RunTime(int(s["train"]["prompts_per_step"]) * per_prompt, how, rate, n_gpus, steps,
                   int(s["train"].get("checkpoint_every", 1)))
