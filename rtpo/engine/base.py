"""The engine seam: the only way methods reach a model.

A method hands the engine token ids and gets token ids and logprobs back; it builds `Row`s with
advantages and loss masks and asks for an update. The engine never knows which method runs.

The contracts (Protocols): `Sampler` (what the rollout needs), `PolicyEngine` (what the methods need),
`ExportingEngine` (what the local training loop needs). tests/test_engine_seam.py holds every engine
to the signatures here.

Two weight sets exist behind the seam, as in verl (FSDP actor + vLLM rollout): the *training*
weights, changed by `update`, and the *inference* weights that `sample` uses. `sync()` copies
training -> inference and bumps `weight_version`. A method that wants on-policy sampling syncs
before it samples; one that lets the inference weights lag sees it in the measured ratio.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Protocol


TOOL_CLOSE = "</tool_call>"  # a tool call ends here: every engine stops sampling a turn on it


def stop_ids(tokenizer: Any) -> tuple[set[int], int | None]:
    """(EOS ids: eos_token and <|im_end|>; the id of </tool_call> or None) of a tokenizer.

    Shared by every engine (they stop a turn on these) and the Roller (it strips them from the
    action text handed to the environment)."""
    eos = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    vocab = tokenizer.get_vocab()
    if "<|im_end|>" in vocab:
        eos.add(vocab["<|im_end|>"])
    if not eos:
        raise ValueError("tokenizer defines no EOS / <|im_end|> token")
    return eos, vocab.get(TOOL_CLOSE)


@dataclass
class SamplingParams:
    max_new_tokens: int = 128
    temperature: float = 1.0
    top_p: float = 1.0
    stop_at_tool_call: bool = True  # stop after the `</tool_call>` close tag
    logprob_top_k: int = 0          # >0: also return the top-k logprobs of the first tokens (ARPO's entropy)
    entropy_tokens: int = 0         # >0: return the mean normalized entropy of the first N sampled tokens


@dataclass
class Completion:
    ids: list[int]                  # sampled tokens, the stop token included
    logprobs: list[float]           # log pi_inference(token | context, previous tokens) at sampling time (temperature-scaled)
    stop_reason: str                # "eos" | "tool_call" | "length"
    weight_version: int = 0         # inference weights that produced it
    entropy: float | None = None    # mean normalized entropy H/log|V| of the first `entropy_tokens` tokens


@dataclass
class Row:
    """One training row: the response is trained under exactly `prompt_ids`.

    RTPO: prompt = c_k, response = the turn-k sibling action, mask all ones.
    GRPO: prompt = the initial context, response = the flattened trajectory (actions + observations),
          mask = 1 on action tokens, 0 on observation/closing tokens.
    """

    prompt_ids: list[int]
    response_ids: list[int]
    old_logprobs: list[float]       # per response token; the rollout-time logprobs (ignored where mask == 0)
    advantages: list[float]         # per response token
    mask: list[int]                 # 1 = token receives gradient
    group: str = ""                 # the prompt group (a prompt's chains or trees, RTPO's siblings of one S_k):
                                    # its rows stay in one mini-batch (UpdateConfig.mini_batches); verl's uid
    turns: list[int] | None = None  # per response token, the turn index k of its action (None: not known);
                                    # the rollout-training mismatch is reported per k

    def __post_init__(self) -> None:
        n = len(self.response_ids)
        for name in ("old_logprobs", "advantages", "mask") + (("turns",) if self.turns is not None else ()):
            if len(getattr(self, name)) != n:
                raise ValueError(f"Row.{name} has {len(getattr(self, name))} entries, response has {n} tokens")


@dataclass
class UpdateConfig:
    lr: float = 1e-4
    clip_low: float = 0.2
    clip_high: float = 0.2
    dual_clip_c: float = 3.0
    kl_coef: float = 0.0            # low-variance KL to the frozen reference model (0 = off)
    entropy_coef: float = 0.0
    max_grad_norm: float = 1.0
    weight_decay: float = 0.01
    epochs: int = 1                 # passes over the rows
    mini_batches: int = 1           # optimizer steps per pass: the rows cut by prompt group (Row.group),
                                    # verl's train_batch_size / ppo_mini_batch_size
    micro_batch_tokens: int = 8192  # gradient accumulation bound on padded tokens per forward
    # PPO's `old` (the ratio's denominator), one rule for every method: "recompute" = the training
    # weights' logprobs of the training row before the update (verl's default: the actor's
    # compute_log_prob), so the rollout-training mismatch does not enter the clip; "rollout" = the
    # rollout-time logprobs of the row.
    old: str = "recompute"
    # verl's rollout correction (algorithm.rollout_correction, decoupled mode): None, or "token" =
    # truncated importance sampling per token, the PG loss times min(pi_old / pi_rollout, threshold)
    # (detached; pi_old = the recomputed old). The correction the field uses for the mismatch.
    rollout_is: str | None = None
    rollout_is_threshold: float = 2.0

    def __post_init__(self) -> None:
        if self.old not in ("recompute", "rollout"):
            raise ValueError(f"UpdateConfig.old must be 'recompute' or 'rollout', got {self.old!r}")
        if self.rollout_is not in (None, "token"):
            raise ValueError(f"UpdateConfig.rollout_is must be None or 'token', got {self.rollout_is!r}")


@dataclass
class Mismatch:
    """Token sums of the rollout-training mismatch on trained tokens, before any optimizer step, with
    d = logp_train - logp_rollout per token (merge with `+`, read with `summary()`):

      ratio_mean      E[exp d]: over tokens sampled by the rollout policy its expectation is exactly 1
                      for ANY mismatch (E_q[p/q] = 1), so it cannot show one; kept for the paper's Fig. 3
      geo_ratio       exp(E[d]), the geometric-mean ratio: < 1 when training scores the sampled tokens
                      lower than the rollout did (E_q[log p/q] = -KL(q || p) <= 0)
      abs_dlogp       E[|d|]
      kl              k3 estimate of KL(rollout || train) = E[exp d - 1 - d] >= 0
      clip_share      share of tokens whose ratio exp d lies outside PPO's clip range [1 - eps_low, 1 + eps_high]
    """

    tokens: float = 0.0
    ratio: float = 0.0
    d: float = 0.0
    abs_d: float = 0.0
    kl: float = 0.0
    clipped: float = 0.0

    def __add__(self, o: "Mismatch") -> "Mismatch":
        return Mismatch(self.tokens + o.tokens, self.ratio + o.ratio, self.d + o.d, self.abs_d + o.abs_d,
                        self.kl + o.kl, self.clipped + o.clipped)

    def summary(self) -> dict[str, float | int]:
        import math

        n = self.tokens
        if not n:
            return {"tokens": 0}
        return {"tokens": int(n), "ratio_mean": self.ratio / n, "geo_ratio": math.exp(self.d / n),
                "abs_dlogp": self.abs_d / n, "kl": self.kl / n, "clip_share": self.clipped / n}


@dataclass
class UpdateStats:
    loss: float
    ratio_mean: float               # mean exp(logp_train - logp_rollout) over trained tokens, before any step
    kl_rollout_train: float         # k3 KL(rollout || train) over trained tokens, before any step
    clip_frac: float                # share of trained tokens where PPO's clip was active in the update
    kl_ref: float
    grad_norm: float
    trained_tokens: int
    extra: dict[str, Any] = field(default_factory=dict)
    mismatch: dict[int, Mismatch] = field(default_factory=dict)  # by turn index k (-1: rows without turns)


class Sampler(Protocol):
    """What the rollout (`rtpo.rollout.Roller`) and the evaluation need: sampling with the inference
    weights. LocalEngine, VerlEngine and verl's ServerEngine (rollout servers only) are samplers."""

    tokenizer: Any                  # the policy's tokenizer: chat template, stop ids (`stop_ids`)
    max_context: int                # prompt + response tokens the model accepts
    weight_version: int             # version of the inference weights (bumped by sync)

    def sample(self, contexts: list[list[int]], params: SamplingParams,
               seeds: list[int] | None = None) -> list[Completion]:
        """One completion per context, sampled with the inference weights; seeds: one per context
        (a request's sample depends on its seed, context and the weights only), None = the engine's."""
        ...


class PolicyEngine(Sampler, Protocol):
    """The seam every method talks to (rtpo.methods): sampling, scoring, the PPO update, the weight
    sync and the engine's checkpoint. LocalEngine and VerlEngine implement it; tests/test_engine_seam.py
    checks both against these signatures."""

    train_version: int              # number of optimizer steps taken on the training weights

    def logprobs(self, contexts: list[list[int]], completions: list[list[int]], temperature: float = 1.0,
                 weights: str = "train") -> list[list[float]]:
        """Per-token logprobs of completions[i] after contexts[i] under the training weights, or the
        inference weights with weights="inference" (RTPO's kl:tau sync measures their distance)."""
        ...

    def update(self, rows: list[Row], cfg: UpdateConfig, temperature: float = 1.0) -> UpdateStats:
        """One PPO update of the training weights on the mask == 1 tokens of rows (temperature: the
        sampling temperature the rows' logprobs were scaled by); ratio and KL measured before the step."""
        ...

    def sync(self) -> None:
        """Training -> inference weights; bumps weight_version."""
        ...

    def save(self, path: str | os.PathLike) -> None:
        """Write the engine's state (weights, optimizer, RNG, counters: what it owns) under `path`."""
        ...

    def load(self, path: str | os.PathLike) -> None:
        """Restore what `save` wrote."""
        ...


class ExportingEngine(PolicyEngine, Protocol):
    """What the local training loop (rtpo.train) needs beyond the seam: the trained model as a Hugging
    Face directory. LocalEngine has it; on verl, verl's checkpoint and model merger write final/
    (rtpo.verl_ext.launch), so VerlEngine has no export."""

    def export(self, path: str | os.PathLike) -> None:
        """Write the training weights and the tokenizer as a Hugging Face model directory."""
        ...

    def weights_finite(self) -> bool:
        """Whether every training weight is finite (rtpo.train stops at the first step where one is not)."""
        ...
