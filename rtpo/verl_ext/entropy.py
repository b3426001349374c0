"""Entropy with gradients without verl's whole-function recompute (upstream verl issue #2448).

Tree-GRPO's entropy bonus (config/paper.yaml ``entropy_coef: 0.001``) makes rtpo's update ask verl for
the entropy with gradients (rtpo/verl_ext/trainer.py: calculate_entropy; verl workers/utils/losses.py
subtracts entropy_coeff x the aggregated entropy). verl 0.9.1 computes it with
``verl.utils.torch_functional.entropy_from_logits_with_chunking`` (bound at engine construction,
workers/engine/fsdp/transformer_impl.py FSDPEngine.__init__, wrapped in ``torch.compile(dynamic=True)``)
and, with ``entropy_checkpointing`` (rtpo's launcher sets it), wraps the whole chunked function in ONE
reentrant ``torch.utils.checkpoint`` (transformer_impl.py, the ``calculate_entropy`` branch of the
forward). In backward that checkpoint re-runs every chunk with autograd on before any chunk's backward
runs, so it keeps each chunk's fp32 copy and fp32 softmax for all T tokens at once: 8 B x T x V saved
(27.8 GiB at T = 24,576, V = 151,936), plus a full T x V gradient per chunk from ``SliceBackward``.
torch.compile saves only the input until Dynamo's recompile limit (every packed micro-batch has a new
length), then falls back to that eager path.

`patch()` (called by rtpo.verl_ext.plugin, i.e. in every verl process at ``import verl``, before any
engine binds the function) replaces the module attribute with `entropy_from_logits_with_chunking`:

* without gradients (old log-probs, verl's metrics, ARPO's branching signal) it IS verl's function;
* with gradients it is `ChunkedEntropy`, an autograd Function whose forward runs verl's chunk loop
  verbatim (same values, bit for bit) and saves only the logits tensor it was given (a reference:
  the logits are materialised and kept anyway, for the log-probs). Its backward walks the chunks
  again and writes dH/dz = -p (z - E_p[z]) (the gradient of logsumexp(z) - sum(softmax(z) z)) chunk
  by chunk into ONE gradient of the logits' dtype: 0 B x T x V saved beyond the logits, and while
  backward runs, that gradient (2 B x T x V in bf16, summed with the log-prob's gradient by autograd)
  plus ~3 fp32 chunk temporaries (z, p, p z) of ``chunk_size`` rows;
* it is excluded from torch.compile (``torch.compiler.disable``): no recompiles per packed length, no
  eager fallback after the recompile limit, and no Triton/host compiler needed for it.

Under verl's outer reentrant checkpoint the recompute in backward therefore saves nothing new either.
`SAVED_BYTES_PER_TOKEN_VOCAB` and `GRAD_BYTES_PER_TOKEN_VOCAB` are what rtpo.verl_ext.startup's memory
model charges (tests/test_entropy_memory.py measures them with a saved-tensor hook).
"""

from __future__ import annotations

from typing import Callable

import torch

# what the memory model (rtpo.verl_ext.startup.gpu_memory) charges per (token x vocabulary entry), bytes
SAVED_BYTES_PER_TOKEN_VOCAB = {"patched": 0.0, "verl": 8.0}  # beyond the logits, for backward
GRAD_BYTES_PER_TOKEN_VOCAB = {"patched": 2.0, "verl": 4.0}  # bf16 dH/dlogits in flight (verl: + a slice's)

ORIGINAL: Callable[..., torch.Tensor] | None = None  # verl's function, kept by patch()


def _verl_chunked(logits: torch.Tensor, chunk_size: int = 2048) -> torch.Tensor:
    """verl 0.9.1's utils/torch_functional.py entropy_from_logits_with_chunking, verbatim (the forward
    of `ChunkedEntropy`, so that the values are verl's bit for bit)."""
    entropy = torch.zeros(logits.shape[0], device=logits.device)
    for i in range(0, logits.shape[0], chunk_size):
        logits_chunk = logits[i : i + chunk_size].float()
        pd_chunk = torch.nn.functional.softmax(logits_chunk, dim=-1)
        entropy_chunk = torch.logsumexp(logits_chunk, dim=-1) - torch.sum(pd_chunk * logits_chunk, dim=-1)
        entropy[i : i + chunk_size] = entropy_chunk
    return entropy


class ChunkedEntropy(torch.autograd.Function):
    """H(softmax(logits)) per row, fp32, chunked in forward and in backward (module doc)."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, chunk_size: int) -> torch.Tensor:  # type: ignore[override]
        ctx.chunk_size = int(chunk_size)
        ctx.save_for_backward(logits)
        return _verl_chunked(logits, int(chunk_size))

    @staticmethod
    def backward(ctx, grad_entropy: torch.Tensor):  # type: ignore[override]
        (logits,) = ctx.saved_tensors
        c = ctx.chunk_size
        grad = torch.empty_like(logits)
        g = grad_entropy.float()
        for i in range(0, logits.shape[0], c):
            z = logits[i : i + c].to(torch.float32, copy=True)  # a copy: updated in place below
            p = torch.nn.functional.softmax(z, dim=-1)
            mean = torch.sum(p * z, dim=-1, keepdim=True)  # E_p[z]
            # dH/dz_j = -p_j (z_j - E_p[z]) = p_j (E_p[z] - z_j), times the incoming gradient
            z.sub_(mean).neg_().mul_(p).mul_(g[i : i + c].unsqueeze(-1))
            del p, mean
            grad[i : i + c].copy_(z)
        return grad, None


@torch.compiler.disable
def _eager(logits: torch.Tensor, chunk_size: int) -> torch.Tensor:
    if torch.is_grad_enabled() and logits.requires_grad:
        return ChunkedEntropy.apply(logits, chunk_size)
    return _verl_chunked(logits, chunk_size)


def entropy_from_logits_with_chunking(logits: torch.Tensor, chunk_size: int = 2048) -> torch.Tensor:
    """verl's ``entropy_from_logits_with_chunking`` (same signature and values); with gradients, the
    per-chunk `ChunkedEntropy` (module doc). Under verl's ``torch.compile`` the call is a graph break
    into eager code (torch.compile unwraps a disabled function itself, hence the inner `_eager`)."""
    return _eager(logits, chunk_size)


def patch() -> bool:
    """Put `entropy_from_logits_with_chunking` in place of verl's (idempotent). Returns whether it is
    in place. verl's engines read ``verl_F.entropy_from_logits_with_chunking`` when they are built
    (after ``import verl`` has run the plugin), so every engine gets it."""
    global ORIGINAL
    import verl.utils.torch_functional as verl_F

    current = verl_F.entropy_from_logits_with_chunking
    if current is entropy_from_logits_with_chunking:
        return True
    ORIGINAL = current
    verl_F.entropy_from_logits_with_chunking = entropy_from_logits_with_chunking
    return True


def is_patched() -> bool:
    """Whether verl's module attribute is rtpo's function."""
    import verl.utils.torch_functional as verl_F

    return verl_F.entropy_from_logits_with_chunking is entropy_from_logits_with_chunking
