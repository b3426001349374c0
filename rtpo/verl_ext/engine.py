"""VerlEngine: rtpo's engine seam (`rtpo.engine.base.PolicyEngine`) inside a verl V1 trainer process.

The local methods (`rtpo.methods.*`) only talk to a `PolicyEngine`. `VerlEngine` gives them one whose
two weight sets are verl's: the *training* weights are the FSDP actor (`actor_rollout_wg`), the
*inference* weights are those loaded in the rollout servers (vLLM; "hf" on the CPU harness). So every
method runs on verl unchanged, and verl never learns which method runs (docs/verl.md).

    sample     `ServerEngine` over verl's `LLMServerClient` (one generate request per context). For
               `SamplingParams.entropy_tokens = N > 0` (ARPO), verl's servers return only the sampled
               tokens' logprobs, so `Completion.entropy` (the mean over the first N sampled tokens of
               H_t / log|V|, H_t the entropy of the temperature-scaled next-token distribution, as
               `LocalEngine` computes it) comes from the actor's forward on (context, ids[:N]) with
               verl's `calculate_entropy=True`. It is the sampling policy's entropy only while the
               servers hold the actor's weights, so it is refused after an update without sync()
               (see below). Cost on GPUs: the servers sleep for that forward and are woken (with a
               weight push when they discard weights at sleep) before the next `sample`.
    logprobs   rows (prompt = context, response = completion) written to TransferQueue, verl's
               actor `compute_log_prob`, read back and cleared. weights="inference": while the
               servers hold the actor's weights, the actor (the same weights; what LocalEngine
               computes); after an update without sync(), the servers themselves score the tokens
               (one request per row, prompt = context + completion, vLLM's ``prompt_logprobs=0``,
               max_tokens 1) when they keep their weights (below) and temperature == 1 (vLLM's
               prompt logprobs are those of the unscaled distribution); otherwise it raises.
    update     the rows (prompt_ids, response_ids, response_mask = Row.mask, rollout_log_probs =
               Row.old_logprobs, advantages = returns = Row.advantages, per token) go to
               TransferQueue, then verl's pipeline as the RTPO trainer runs it: the trainer's
               `_compute_old_log_prob` (actor forward; the pre-update ratio exp(train - rollout)
               and k3 KL(rollout || train) are measured here on mask == 1 tokens; its logprobs are
               PPO's old, UpdateConfig.old = "recompute" as in the local engine), ref logprobs
               when the KL loss is on, and one `update_actor` on the whole batch (one mini-batch,
               `UpdateConfig.epochs` passes). No verl advantage estimator runs: the methods computed
               the advantages with the shared functions of `rtpo.methods.advantages`.
    sync       pushes the actor's weights to the servers (`checkpoint_manager.update_weights`) when
               an update changed them and bumps `weight_version` (every call, as `LocalEngine`).

Server states. Colocated verl puts the servers to sleep before the actor computes (vLLM frees the
GPU memory) and loads weights into sleeping servers only. What sleep does to the servers' weights
depends on the rollout (`keeps_weights`, which the trainer derives from the rollout name):
  * "vllm" / "hf" (verl's default, vLLM sleep level 2): sleep *discards* the weights. `sample` with
    sleeping servers and an unchanged actor re-pushes the same weights (no version bump); `sample`
    after an `update` without `sync()` raises: the stale inference weights a lagging method would
    sample from no longer exist.
  * "vllm_keep" / "hf_keep" (vLLM sleep level 1: weights offloaded to CPU memory and restored on
    wake-up; `vllm_keep.py`): sleeping servers are woken *without* a push
    (`checkpoint_manager.wake_up_replicas`), so `sample` after an `update` without `sync()` samples
    from the stale inference weights of the last sync, and its Completions carry that sync's
    `weight_version` (RTPO's sync modes interval:N / kl:tau; paper G.6). Only `sync()` pushes.
Every actor forward sleeps the servers first, in both cases.

Every TransferQueue key an `update` writes (verl's padding rows included) is kept until the
trainer collects them with `drain()` and returns them to verl's `fit()`, which computes its metrics
on them and clears them; keys of `logprobs` / entropy forwards are cleared at once.

Persistence: verl's checkpoint holds the weights (`actor/`); `save`/`load` write and read the
engine's counters (`engine.json`) next to it, the trainer the method state (`state.json`). Unlike
LocalEngine's checkpoint, verl's holds no separate inference weights: a run resumed from a
checkpoint saved with an update pending (possible only with keep-weights servers) restarts its
servers on the actor's weights, not on the stale ones it had; `load` warns when that happens.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
from pathlib import Path
from typing import Any

import torch

from rtpo.engine.base import Completion, Row, SamplingParams, UpdateConfig, UpdateStats

logger = logging.getLogger(__name__)
PARTITION = "train"
CHECKED_UPDATE_FIELDS = ("lr", "clip_low", "clip_high", "dual_clip_c", "kl_coef", "entropy_coef", "max_grad_norm",
                         "weight_decay", "epochs", "mini_batches")


# ---------------------------------------------------------------------- pure helpers
def row_fields(prompt_ids: list[int], response_ids: list[int], mask: list[int], rollout_logprobs: list[float],
               uid: str, global_steps: int, data_source: str = "rtpo/engine") -> dict[str, Any]:
    """One TransferQueue sample in the layout of verl's AgentLoopWorkerTQ (`trainer.tq_fields`).

    Tensors (P = len(prompt_ids), T = len(response_ids)):
      prompts (P,) int64, responses (T,) int64, input_ids (P+T,) int64, position_ids (P+T,) int64,
      response_mask = loss_mask (T,) int64 (1 = token trained), rollout_log_probs (T,) float32,
      rm_scores (T,) float32 zeros (rewards live in the method, not in the engine).
    """
    T = len(response_ids)
    if not prompt_ids:
        raise ValueError("prompt_ids is empty")
    if T == 0:
        raise ValueError("response_ids is empty")
    if len(mask) != T or len(rollout_logprobs) != T:
        raise ValueError(f"mask has {len(mask)} and rollout_logprobs {len(rollout_logprobs)} entries, "
                         f"response_ids has {T} tokens")
    prompts = torch.tensor(prompt_ids, dtype=torch.int64)
    responses = torch.tensor(response_ids, dtype=torch.int64)
    m = torch.tensor([int(x) for x in mask], dtype=torch.int64)
    ids = torch.cat([prompts, responses])
    return {"prompts": prompts, "responses": responses, "response_mask": m, "loss_mask": m.clone(),
            "input_ids": ids, "position_ids": torch.arange(ids.shape[0], dtype=torch.int64),
            "rollout_log_probs": torch.tensor(rollout_logprobs, dtype=torch.float32),
            "rm_scores": torch.zeros(T, dtype=torch.float32), "num_turns": 0, "uid": uid,
            "global_steps": int(global_steps), "session_id": 0, "data_source": data_source,
            "multi_modal_inputs": {}, "extra_fields": {}}


def row_tag(prompt_len: int, response_len: int, global_steps: int) -> dict[str, Any]:
    """The TransferQueue tag of a row (what `_balance_batch` and verl's metrics read)."""
    v = max(0, int(global_steps) - 1)  # rows carry no weight version; verl's staleness metric reads 0
    return {"status": "success", "prompt_len": int(prompt_len), "response_len": int(response_len),
            "seq_len": int(prompt_len) + int(response_len), "global_steps": int(global_steps),
            "min_global_steps": v, "max_global_steps": v}


def update_rows_fields(rows: list[Row], global_steps: int, prefix: str) -> tuple[list[str], list[dict], list[dict]]:
    """(keys, samples, tags) of the rows `VerlEngine.update` writes to TransferQueue.

    Row.mask -> response_mask, Row.old_logprobs -> rollout_log_probs; the key of row j is
    "<prefix>r<j>_0_0" and its uid Row.group (or the key). Advantages are written after verl's
    batch balancing (its padding rows need their own zeros): see `padded_advantages`.
    """
    keys, fields, tags = [], [], []
    for j, r in enumerate(rows):
        key = f"{prefix}r{j}_0_0"
        try:
            f = row_fields(r.prompt_ids, r.response_ids, r.mask, r.old_logprobs, r.group or key, global_steps)
        except ValueError as e:
            raise ValueError(f"VerlEngine.update: row {j}: {e}") from None
        keys.append(key)
        fields.append(f)
        tags.append(row_tag(len(r.prompt_ids), len(r.response_ids), global_steps))
    return keys, fields, tags


def padded_advantages(keys: list[str], advantages: dict[str, list[float]], response_lens: list[int]) -> torch.Tensor:
    """(B, T_max) float32: row i holds advantages[keys[i]] (zeros for keys not in it: verl's padding
    rows), zero-padded on the right to T_max = max(response_lens)."""
    out = torch.zeros(len(keys), max(response_lens, default=0), dtype=torch.float32)
    for i, (k, n) in enumerate(zip(keys, response_lens)):
        a = advantages.get(k)
        if a is not None:
            if len(a) != n:
                raise ValueError(f"row {k}: {len(a)} advantages for {n} response tokens")
            out[i, :n] = torch.tensor(a, dtype=torch.float32)
    return out


def normalized_entropy(entropy: torch.Tensor, n_tokens: int, vocab_size: int) -> float | None:
    """Mean of entropy[:n_tokens] / log(vocab_size): `Completion.entropy` (None for no tokens).

    entropy: (T,) per-token entropies (nats) of the sampled tokens' next-token distributions.
    """
    e = entropy[:n_tokens]
    if e.numel() == 0:
        return None
    return float(e.float().mean()) / math.log(vocab_size)


def update_stats(metrics: dict[str, Any], ratio: float, kl: float, n: int) -> UpdateStats:
    """UpdateStats from verl's reduced actor metrics and the pre-update ratio / KL measurement."""
    def g(key: str) -> float:
        v = metrics.get(key, 0.0)
        return float(sum(v) / len(v)) if isinstance(v, (list, tuple)) and v else float(v or 0.0)

    return UpdateStats(loss=g("actor/pg_loss"), ratio_mean=ratio, kl_rollout_train=kl, clip_frac=g("actor/pg_clipfrac"),
                       kl_ref=g("actor/kl_loss"), grad_norm=g("actor/grad_norm"), trained_tokens=int(n))


def free_device_cache(worker: Any) -> Any:
    """On one actor rank (verl's `Worker.execute_with_func_generator`): release the allocator's cached
    device memory, as verl's own weight push does before it wakes the servers
    (workers/engine_workers.py `update_weights`: synchronize + empty_cache on every rank). Returns a
    one-row DataProto with the rank, so that verl's collect can concatenate the ranks' answers."""
    from verl import DataProto
    from verl.utils.device import get_torch_device

    dev = get_torch_device()
    dev.synchronize()
    dev.empty_cache()
    return DataProto.from_dict(tensors={"rank": torch.tensor([int(worker.rank)])})


def update_config_from_verl(config: Any) -> UpdateConfig:
    """The UpdateConfig the verl actor applies (launch.verl_overrides writes it from train.*)."""
    a = config.actor_rollout_ref.actor
    return UpdateConfig(lr=float(a.optim.lr), clip_low=float(a.clip_ratio_low), clip_high=float(a.clip_ratio_high),
                        dual_clip_c=float(a.clip_ratio_c), kl_coef=float(a.kl_loss_coef) if a.use_kl_loss else 0.0,
                        entropy_coef=float(a.entropy_coeff), max_grad_norm=float(a.grad_clip),
                        weight_decay=float(a.optim.weight_decay), epochs=int(a.ppo_epochs), mini_batches=1,
                        micro_batch_tokens=int(a.ppo_max_token_len_per_gpu or 0))


def check_update_config(got: UpdateConfig, want: UpdateConfig) -> None:
    """The verl actor's optimizer settings are fixed at start-up: a method asking for others is an error."""
    for name in CHECKED_UPDATE_FIELDS:
        a, b = getattr(got, name), getattr(want, name)
        if not math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12):
            raise ValueError(f"VerlEngine.update: UpdateConfig.{name}={a!r}, but the verl actor was started with "
                             f"{b!r} (set it through the run config, which launch.verl_overrides passes to verl)")


# ---------------------------------------------------------------------- the engine
class VerlEngine:
    """`PolicyEngine` on a running verl V1 trainer (module docstring).

    trainer:    the trainer object (`rtpo.verl_ext.trainer.RTPOEngineTrainer`): its actor worker group,
                checkpoint manager, `_balance_batch`, `_compute_old_log_prob`, `_compute_ref_log_prob`,
                `_score_for_update` (the mixin's), `_update_actor_whole`, config.
    server:     the `ServerEngine` that samples from verl's rollout servers.
    update_cfg: the actor's settings (`update_config_from_verl`); `update` checks a method's against it.
    vocab_size: |V| of the model's logits (the normaliser of ARPO's entropy).
    max_context: prompt + response tokens a row or a request may reach.
    keeps_weights: the servers keep their weights across sleep (rollout "vllm_keep" / "hf_keep"):
                sampling and scoring from stale inference weights are possible (module docstring).
    server_max_len: the servers' max_model_len when known (a scoring request needs
                len(context) + len(completion) < it); None = not checked here (the server checks).
    """

    def __init__(self, trainer: Any, server: Any, update_cfg: UpdateConfig, vocab_size: int, max_context: int,
                 keeps_weights: bool = False, server_max_len: int | None = None) -> None:
        self.trainer, self.server = trainer, server
        self.keeps_weights = bool(keeps_weights)
        self.server_max_len = int(server_max_len) if server_max_len else None
        self.tokenizer = server.tokenizer
        self.update_cfg = update_cfg
        self.vocab_size = int(vocab_size)
        self.max_context = int(max_context)
        self.temperature = float(trainer.config.actor_rollout_ref.rollout.temperature)
        self.weight_version = 0
        self.train_version = 0
        self.pushes = 0               # weight pushes to the servers (syncs + re-pushes after a sleep)
        self.wakes = 0                # wake-ups without a push (servers that keep their weights)
        self.freed_ranks: list[int] = []  # actor ranks that freed their cached memory before the last wake-up
        self.metrics: dict[str, Any] = {}   # verl's metrics of the last update (for verl's logger)
        self._awake = False           # servers hold weights (verl's _setup leaves them asleep)
        self._dirty = False           # the actor changed since the servers last got its weights
        self._calls = 0
        self._keys: list[str] = []    # TransferQueue keys of this step's updates, for fit() to clear
        self._tags: list[dict] = []

    # ------------------------------------------------------------------ server states
    def _timing(self) -> dict[str, float]:
        """The trainer's timing dict of the current step (verl's fit() resets it every step)."""
        t = getattr(self.trainer, "timing_raw", None)
        return t if t is not None else {}

    def _push(self, global_steps: int | None = None) -> None:
        """Load the actor's weights into the (sleeping) servers; verl wakes them up. global_steps: the
        step the servers are told (default the trainer's: the step in progress)."""
        from verl.utils.debug import marked_timer

        if self._awake:
            self.trainer.checkpoint_manager.sleep_replicas()
        with marked_timer("update_weights", self._timing(), color="red"):
            self.trainer.checkpoint_manager.update_weights(
                int(self.trainer.global_steps if global_steps is None else global_steps))
        self._awake, self._dirty = True, False
        self.pushes += 1

    def _sleep(self) -> None:
        """Release the servers before the actor computes (colocated GPUs; vLLM level 2 drops its
        weights, level 1 offloads them)."""
        if self._awake:
            self.trainer.checkpoint_manager.sleep_replicas()
            self._awake = False

    def _wake(self) -> None:
        """Make the servers serve their inference weights: those of the last push. Servers that keep
        their weights are woken as they are (stale or not); the others get the actor's weights pushed
        again, which are theirs only while no update is pending (callers check `_dirty`)."""
        if self._awake:
            return
        if self.keeps_weights:
            from verl.utils.debug import marked_timer

            with marked_timer("wake_up", self._timing(), color="red"):
                # every actor rank frees its cached memory first (what verl's push does before it wakes
                # them): the waking servers reclaim their weights' and KV cache's GPU memory
                ranks = self.trainer.actor_rollout_wg.execute_with_func_generator(free_device_cache)
                self.freed_ranks = sorted(int(r) for r in ranks.batch["rank"])
                self.trainer.checkpoint_manager.wake_up_replicas()
            self._awake = True
            self.wakes += 1
        else:
            if self._dirty:
                raise RuntimeError("VerlEngine: the servers discarded their weights at sleep and the actor was "
                                   "updated since the last sync(): the inference weights no longer exist")
            self._push()  # same weights as before the sleep: no new version

    def wake(self) -> None:
        """Push the current actor weights (start-up, after verl loaded a checkpoint). The servers are told
        the step about to run (verl's fit() counts it up after this): a sync() that finds no update since
        pushes nothing, and a server that derives its default seeds from the step (the CPU harness's) must
        see the same step in a resumed run as in an uninterrupted one, whose last push came mid-step."""
        self._push(int(self.trainer.global_steps) + 1)

    def sync(self) -> None:
        """Training -> inference weights (a push when an update changed the actor); bumps weight_version."""
        if self._dirty:
            self._push()
        self.weight_version += 1

    # ------------------------------------------------------------------ sampling
    def sample(self, contexts: list[list[int]], params: SamplingParams,
               seeds: list[int] | None = None) -> list[Completion]:
        """One completion per context from the servers (inference weights); see the module docstring
        for `params.entropy_tokens`."""
        if params.logprob_top_k:
            raise NotImplementedError("VerlEngine.sample: SamplingParams.logprob_top_k is not available from verl's "
                                      "servers (they return the sampled tokens' logprobs only)")
        if self._dirty and not self.keeps_weights:
            raise RuntimeError("VerlEngine.sample: the actor was updated since the last sync(); the servers no "
                               "longer hold the previous inference weights (vLLM sleep level 2 discards them), "
                               "so sampling from stale weights needs a rollout whose servers keep their weights "
                               "across sleep (actor_rollout_ref.rollout.name=vllm_keep | hf_keep); or call sync() "
                               "first")
        if self._dirty and params.entropy_tokens > 0:
            raise NotImplementedError("VerlEngine.sample: SamplingParams.entropy_tokens after an update without "
                                      "sync(): the entropy comes from the actor's forward, which no longer holds the "
                                      "stale inference weights the servers sample from; call sync() first")
        self._wake()
        comps = self.server.sample(contexts, dataclasses.replace(params, entropy_tokens=0), seeds)
        for c in comps:
            c.weight_version = self.weight_version
        if params.entropy_tokens > 0:
            n = int(params.entropy_tokens)
            # greedy sampling: the entropy of the raw distribution (as LocalEngine)
            temp = params.temperature if params.temperature > 0 else 1.0
            idx = [i for i, c in enumerate(comps) if c.ids]
            if idx:
                _, ents = self._forward([contexts[i] for i in idx], [comps[i].ids[:n] for i in idx], temp, entropy=True)
                for i, e in zip(idx, ents):
                    comps[i].entropy = normalized_entropy(e, n, self.vocab_size)
        return comps

    # ------------------------------------------------------------------ scoring
    def _check(self, contexts: list[list[int]], completions: list[list[int]], rows: bool = False) -> None:
        """Non-empty contexts that fit with their completions (as LocalEngine: prompt + response[:-1] <
        max_context); errors name "context i" (logprobs) or "row i: prompt_ids" (update)."""
        if not contexts:
            raise ValueError("empty batch: no contexts given")
        if len(completions) != len(contexts):
            raise ValueError(f"{len(completions)} completions for {len(contexts)} contexts")
        for i, (c, r) in enumerate(zip(contexts, completions)):
            name = f"row {i}: prompt_ids" if rows else f"context {i}"
            if not c:
                raise ValueError(f"{name} is empty")
            if len(c) + max(len(r) - 1, 0) >= self.max_context:
                raise ValueError(f"{name} + {'response_ids' if rows else 'completion'} has {len(c) + len(r)} tokens; "
                                 f"verl's rows accept at most {self.max_context} "
                                 "(rollout prompt_length + response_length)")

    def _forward(self, contexts: list[list[int]], completions: list[list[int]], temperature: float,
                 entropy: bool = False) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Actor forward on (context, completion) rows: per-row (T_i,) logprobs and (if asked) entropies.

        The rows go through TransferQueue under scratch keys (verl's padding rows included) that are
        cleared before returning.
        """
        import transfer_queue as tq
        from verl.utils.tensordict_utils import list_of_dict_to_tensordict
        from verl.workers.utils.padding import response_from_nested

        tr = self.trainer
        self._sleep()
        self._calls += 1
        gs = int(tr.global_steps)
        keys = [f"rtpofwd{gs}c{self._calls}r{j}_0_0" for j in range(len(contexts))]
        fields = [row_fields(c, r, [1] * len(r), [0.0] * len(r), k, gs, "rtpo/forward")
                  for k, c, r in zip(keys, contexts, completions)]
        tags = [row_tag(len(c), len(r), gs) for c, r in zip(contexts, completions)]
        meta = tq.kv_batch_put(keys=keys, partition_id=PARTITION, fields=list_of_dict_to_tensordict(fields), tags=tags)
        batch = meta
        try:
            batch = tr._balance_batch(meta, metrics={})
            batch.extra_info.update({"calculate_entropy": bool(entropy), "compute_loss": False,
                                     "temperature": float(temperature)})
            tr.actor_rollout_wg.compute_log_prob(batch)
            sel = ["log_probs", "response_mask"] + (["entropy"] if entropy else [])
            data = tq.kv_batch_get(keys=keys, partition_id=PARTITION, select_fields=sel)
            lps = list(response_from_nested(data["log_probs"], data["response_mask"]).unbind())
            ents = list(response_from_nested(data["entropy"], data["response_mask"]).unbind()) if entropy else []
        finally:
            tq.kv_clear(keys=list(batch.keys), partition_id=PARTITION)
        return [x.float().cpu() for x in lps], [x.float().cpu() for x in ents]

    def logprobs(self, contexts: list[list[int]], completions: list[list[int]], temperature: float = 1.0,
                 weights: str = "train", max_tokens: int | None = None) -> list[list[float]]:
        """Per-token logprobs of `completions` given `contexts` under the actor (weights="train"), or
        under the servers' weights (weights="inference": the actor's as long as no update is pending;
        after an update without sync(), scored by servers that keep their weights, at temperature 1;
        module docstring). max_tokens is accepted for LocalEngine's signature; verl micro-batches by
        rollout.log_prob_max_token_len_per_gpu."""
        if weights not in ("train", "inference"):
            raise ValueError(f"weights must be 'train' or 'inference', got {weights!r}")
        if weights == "inference" and self._dirty:
            if not self.keeps_weights:
                raise NotImplementedError("VerlEngine.logprobs(weights='inference') after an update without sync(): "
                                          "the servers discarded the old inference weights at sleep (vLLM level 2); a "
                                          "rollout that keeps them (vllm_keep | hf_keep) can score with them")
            if not math.isclose(float(temperature), 1.0):
                raise NotImplementedError(f"VerlEngine.logprobs(weights='inference', temperature={temperature!r}) "
                                          "after an update without sync(): only the servers hold the stale weights, "
                                          "and vLLM's prompt logprobs are those of the unscaled distribution "
                                          "(temperature 1)")
            self._check(contexts, completions)
            return self._score_on_servers(contexts, completions)
        self._check(contexts, completions)
        out: list[list[float]] = [[] for _ in contexts]
        idx = [i for i, r in enumerate(completions) if r]
        if idx:
            lps, _ = self._forward([contexts[i] for i in idx], [completions[i] for i in idx], temperature)
            for i, lp in zip(idx, lps):
                out[i] = lp.tolist()
        return out

    def _score_on_servers(self, contexts: list[list[int]], completions: list[list[int]]) -> list[list[float]]:
        """Per-token logprobs (temperature 1) of completions under the servers' current weights."""
        idx = [i for i, r in enumerate(completions) if r]
        if self.server_max_len is not None:
            for i in idx:
                n = len(contexts[i]) + len(completions[i])
                if n >= self.server_max_len:
                    raise ValueError(f"VerlEngine.logprobs(weights='inference'): context {i} + completion has {n} "
                                     f"tokens; the servers score them as a prompt, which needs < max_model_len = "
                                     f"{self.server_max_len} (actor_rollout_ref.rollout.max_model_len)")
        out: list[list[float]] = [[] for _ in contexts]
        if idx:
            self._wake()
            got = self.server.score([contexts[i] for i in idx], [completions[i] for i in idx])
            for i, lp in zip(idx, got):
                out[i] = lp
        return out

    # ------------------------------------------------------------------ training
    def update(self, rows: list[Row], cfg: UpdateConfig, temperature: float = 1.0) -> UpdateStats:
        """One verl actor update on the mask == 1 tokens of `rows` (module docstring); UpdateStats as
        `LocalEngine.update`: ratio_mean / kl_rollout_train measured before the step on trained tokens."""
        import transfer_queue as tq
        from verl.utils.debug import marked_timer
        from verl.utils.tensordict_utils import list_of_dict_to_tensordict
        from verl.workers.utils.padding import response_to_nested

        check_update_config(cfg, self.update_cfg)
        if not math.isclose(float(temperature), self.temperature):
            raise ValueError(f"VerlEngine.update: temperature={temperature!r}, but verl's actor scores with "
                             f"actor_rollout_ref.rollout.temperature={self.temperature!r}")
        rows = [r for r in rows if sum(r.mask) > 0]
        if not rows:
            return UpdateStats(0.0, float("nan"), float("nan"), 0.0, 0.0, 0.0, 0)
        self._check([r.prompt_ids for r in rows], [r.response_ids for r in rows], rows=True)
        tr = self.trainer
        timing = self._timing()
        self._sleep()
        self._calls += 1
        gs = int(tr.global_steps)
        keys, fields, tags = update_rows_fields(rows, gs, f"rtpoupd{gs}c{self._calls}")
        meta = tq.kv_batch_put(keys=keys, partition_id=PARTITION, fields=list_of_dict_to_tensordict(fields), tags=tags)
        metrics: dict[str, Any] = {}
        batch = tr._balance_batch(meta, metrics=metrics)  # may append verl's padding rows (response_mask 0)
        self._keys += list(batch.keys)                    # from here on fit() clears them
        self._tags += list(batch.tags)
        data = tq.kv_batch_get(keys=batch.keys, partition_id=PARTITION, select_fields=["response_mask"])
        mask = data["response_mask"]
        adv = padded_advantages(list(batch.keys), {k: r.advantages for k, r in zip(keys, rows)},
                                mask.offsets().diff().tolist())
        nested = response_to_nested(adv, mask)
        from tensordict import TensorDict

        tq.kv_batch_put(keys=batch.keys, partition_id=PARTITION,
                        fields=TensorDict({"advantages": nested, "returns": nested.clone()}, batch_size=len(batch)))
        batch, ratio, kl, n = tr._score_for_update(batch, metrics, timing)
        with marked_timer("update_actor", timing, color="red"):
            tr._update_actor_whole(batch, metrics=metrics, temperature=float(temperature))
        self._dirty = True
        self.train_version += int(self.update_cfg.epochs)
        self.metrics = metrics
        return update_stats(metrics, ratio, kl, n)

    def drain(self) -> Any:
        """The KVBatchMeta of every key this step's updates wrote (for verl's fit(): metrics, then clear)."""
        from transfer_queue import KVBatchMeta

        meta = KVBatchMeta(partition_id=PARTITION, keys=self._keys, tags=self._tags)
        self._keys, self._tags = [], []
        return meta

    # ------------------------------------------------------------------ persistence
    def save(self, path: str | os.PathLike) -> None:
        """Write the counters next to verl's checkpoint of the weights (`<path>/engine.json`)."""
        p = Path(path)
        p.mkdir(parents=True, exist_ok=True)
        tmp = p / "engine.json.tmp"
        tmp.write_text(json.dumps({"weight_version": self.weight_version, "train_version": self.train_version,
                                   "pending_update": self._dirty}))
        os.replace(tmp, p / "engine.json")

    def load(self, path: str | os.PathLike) -> None:
        """Read the counters (verl restores the weights and the optimizer itself)."""
        f = Path(path) / "engine.json"
        if not f.exists():
            raise FileNotFoundError(f"no engine state at {f}")
        st = json.loads(f.read_text())
        self.weight_version, self.train_version = int(st["weight_version"]), int(st["train_version"])
        if st.get("pending_update") and self.keeps_weights:  # discarding servers never sample stale weights
            logger.warning("VerlEngine.load: %s was saved with an update not yet synced to the servers; verl's "
                           "checkpoint holds only the actor's weights, so the resumed servers start from those, not "
                           "from the stale inference weights of weight_version %d", f, self.weight_version)
