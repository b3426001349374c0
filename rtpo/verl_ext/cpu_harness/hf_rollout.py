"""An in-process Hugging Face rollout server for verl: the CPU harness's stand-in for vLLM.

verl 0.9.1 registers only vllm / sglang / trtllm rollout servers (`workers/rollout/hf_rollout.py` is
dead code). Three pieces plug a plain transformers model into verl's own extension points:

* `HFGenerateServer`  the server: ``async generate(request_id, *, prompt_ids, sampling_params, ...)
                      -> TokenOutput(token_ids, log_probs, stop_reason)``, the signature of vLLM's
                      server behind ``LLMServerClient``. Sampling is `rtpo.engine.local.LocalEngine`'s
                      (the local engine's sampler: same logprob semantics, temperature-scaled), with
                      concurrent requests gathered into one padded batch. Usable directly, without Ray
                      (the agent-loop unit test does), or as a Ray actor (`HFReplica`).
* `HFReplica`         a `RolloutReplica` that launches one server actor per replica next to its workers.
* `HFServerAdapter`   the `BaseRollout` inside each actor worker: `update_weights` consumes the FSDP2
                      per-tensor parameter generator (on every rank: gathering full tensors is a
                      collective) and rank 0 pushes the tensors to its replica's server; `resume(tags)`
                      / `release()` wake / sleep it, as vLLM's adapter does.

Sleep, as vLLM's (the CPU has no memory to free, but the states are modelled so that the tests
exercise what verl does to GPU servers): `sleep()` puts the weights and the KV cache to sleep;
`wake_up(tags)` wakes "weights" and/or "kv_cache" (all when no tags); `generate` on a sleeping
server raises, and so does `update_weights` while the weights sleep. What sleep does to the weights
is the server's `sleep_level`:
  2  discard (vLLM's level 2, what verl uses for full-weight sync; the default): after a sleep the
     server refuses to generate until `update_weights` has loaded new weights;
  1  keep (vLLM's level 1, which offloads them to CPU memory): woken without a weight push, the
     server samples from exactly the weights it held before sleeping.
`register()` adds the rollout names "hf" (level 2) and "hf_keep" (level 1; the CPU counterpart of
`vllm_keep.py`) (`actor_rollout_ref.rollout.name=hf|hf_keep`). It touches verl internals:
`verl.workers.rollout.base._ROLLOUT_REGISTRY` and `RolloutReplicaRegistry`.

Prompt logprobs, as vLLM's: a request with ``sampling_params["prompt_logprobs"] = 0`` also gets
``extra_fields["prompt_logprobs"]`` (entry i: ``[log p(prompt[i+1] | prompt[:i+1])]`` under the
server's weights, unscaled by temperature as in vLLM; a dummy ``[0.0]`` last) and
``extra_fields["prompt_ids"]``, the layout of verl's `extract_prompt_logprobs`.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
from collections import Counter
from collections.abc import Iterable
from typing import Any

import torch

from rtpo.engine.base import SamplingParams

logger = logging.getLogger(__name__)

ROLLOUT_NAME = "hf"
KEEP_ROLLOUT_NAME = "hf_keep"
SERVER_PREFIX = "hf_server"
SLEEP_LEVELS = {ROLLOUT_NAME: 2, KEEP_ROLLOUT_NAME: 1}  # rollout name -> what sleep does to the weights
TAGS = ("weights", "kv_cache")

# sampling_params keys accepted (vLLM names); anything else is an error, as it would be in vLLM.
_KNOWN_PARAMS = {"temperature", "top_p", "top_k", "max_tokens", "max_new_tokens", "logprobs", "stop_token_ids",
                 "repetition_penalty", "seed", "n", "ignore_eos", "skip_special_tokens", "detokenize",
                 "include_stop_str_in_output", "spaces_between_special_tokens", "prompt_logprobs"}


def _token_output(**kw: Any):
    from verl.workers.rollout.replica import TokenOutput

    return TokenOutput(**kw)


class HFGenerateServer:
    """Token-in/token-out generation on a transformers causal LM (CPU).

    model_path:     a Hugging Face model directory (weights + tokenizer), or
    engine:         an already built `LocalEngine` (tests); its `rollout_model` serves requests.
    max_model_len:  prompt + response tokens a request may reach (default: the model's positions).
    response_length: default `max_tokens` when a request gives none (vLLM server semantics).
    threads:        torch threads of this process (default $RTPO_HF_SERVER_THREADS or 1).
    sleep_level:    2 = sleep discards the weights (vLLM's level 2; default), 1 = sleep keeps them
                    (vLLM's level 1); module docstring.
    free_cache_engine: False = sleep is a no-op (verl's rollout.free_cache_engine, as vLLM's server).
    """

    def __init__(self, model_path: str | None = None, *, engine: Any = None, seed: int = 0,
                 max_model_len: int | None = None, response_length: int | None = None,
                 threads: int | None = None, sleep_level: int = 2, free_cache_engine: bool = True,
                 max_num_seqs: int | None = None) -> None:
        if (model_path is None) == (engine is None):
            raise ValueError("HFGenerateServer needs exactly one of model_path and engine")
        if int(sleep_level) not in (1, 2):
            raise ValueError(f"HFGenerateServer: sleep_level must be 1 (keep weights) or 2 (discard), "
                             f"got {sleep_level}")
        torch.set_num_threads(int(threads or os.environ.get("RTPO_HF_SERVER_THREADS", 1)))
        if engine is None:
            from rtpo.engine.local import LocalEngine

            engine = LocalEngine.from_pretrained(model_path, seed=seed, reference=False)
        self.engine = engine
        self.max_model_len = int(max_model_len or engine.max_context)
        self.response_length = int(response_length or self.max_model_len)
        self.global_steps: int | None = None
        self.seed = int(seed)
        self._seen: Counter[tuple[int, ...]] = Counter()  # requests per prompt at this step (_default_seed)
        self._seen_step = 0
        self._lock = asyncio.Lock()          # one batch or one weight update at a time
        self._pending: list[tuple[tuple, list[int], int, asyncio.Future]] = []
        self._drainer: asyncio.Task | None = None
        self.weight_updates = 0
        self.sleep_level = int(sleep_level)
        self.free_cache_engine = bool(free_cache_engine)
        # at most this many requests per batch (vLLM's rollout.max_num_seqs; None: all pending). The
        # batches are formed by arrival timing, and a row's logits differ in their last bits between 1-3
        # and >= 4 rows (other GEMM kernels), so batch composition is one way two runs of the same config
        # can sample differently; max_num_seqs 1 removes that one (not every one: docs/verl.md)
        self.max_num_seqs = int(max_num_seqs) if max_num_seqs else None
        self._asleep: set[str] = set()      # sleeping tags ("weights", "kv_cache")
        self._discarded = False             # a level-2 sleep dropped the weights; no update_weights since
        self.sleeps = 0

    # ------------------------------------------------------------------ generation
    def _params(self, sp: dict[str, Any], prompt_len: int) -> tuple[SamplingParams, int | None]:
        unknown = sorted(set(sp) - _KNOWN_PARAMS)
        if unknown:
            raise ValueError(f"HFGenerateServer: unsupported sampling_params {unknown}")
        if int(sp.get("n", 1)) != 1:
            raise ValueError("HFGenerateServer: n > 1 is not supported (verl sends one request per sample)")
        if sp.get("top_k") not in (None, -1, 0):
            raise ValueError(f"HFGenerateServer: top_k={sp['top_k']} is not supported (use -1)")
        if float(sp.get("repetition_penalty", 1.0)) != 1.0:
            raise ValueError("HFGenerateServer: repetition_penalty != 1 is not supported")
        if sp.get("ignore_eos"):
            raise ValueError("HFGenerateServer: ignore_eos is not supported")
        tool_close = self.engine.tool_close_id
        stops = set(int(t) for t in sp.get("stop_token_ids") or [])
        extra = stops - set(self.engine.eos_ids) - ({tool_close} if tool_close is not None else set())
        if extra:
            raise ValueError(f"HFGenerateServer: stop_token_ids {sorted(extra)} are not supported "
                             f"(only EOS and </tool_call>)")
        room = self.max_model_len - prompt_len
        if room < 1:
            raise ValueError(f"prompt of {prompt_len} tokens leaves no room within max_model_len={self.max_model_len}")
        max_tokens = sp.get("max_tokens", sp.get("max_new_tokens"))
        if max_tokens is None:
            max_tokens = min(self.response_length, room)
        max_tokens = max(1, min(int(max_tokens), room))
        params = SamplingParams(max_new_tokens=max_tokens, temperature=float(sp.get("temperature", 1.0)),
                                top_p=float(sp.get("top_p", 1.0)),
                                stop_at_tool_call=tool_close is not None and tool_close in stops)
        seed = sp.get("seed")
        return params, (int(seed) if seed is not None else None)

    async def generate(self, request_id: str | None = None, *, prompt_ids: list[int],
                       sampling_params: dict[str, Any], image_data: Any = None, video_data: Any = None,
                       audio_data: Any = None, mm_processor_kwargs: Any = None, priority: int = 0,
                       **kwargs: Any):
        """One completion of `prompt_ids`: token_ids (the stop token included), per-token logprobs
        under the temperature-scaled distribution they were drawn from, stop_reason "completed"."""
        if image_data or video_data or audio_data:
            raise ValueError("HFGenerateServer serves text only")
        self._check_serving()
        prompt = [int(t) for t in prompt_ids]
        sp = dict(sampling_params)
        n_prompt_lp = sp.pop("prompt_logprobs", None)
        if n_prompt_lp not in (None, 0):
            raise ValueError(f"HFGenerateServer: prompt_logprobs={n_prompt_lp} (top-k) is not supported; use 0")
        params, seed = self._params(sp, len(prompt))
        extra: dict[str, Any] = {"global_steps": self.global_steps}
        if n_prompt_lp is not None:
            extra.update(await self._prompt_logprobs(prompt))
        if seed is None:
            seed = self._default_seed(prompt)
        key = (params.max_new_tokens, params.temperature, params.top_p, params.stop_at_tool_call)
        fut = asyncio.get_running_loop().create_future()
        self._pending.append((key, prompt, seed, fut))
        if self._drainer is None or self._drainer.done():
            self._drainer = asyncio.create_task(self._drain())
        comp = await fut
        return _token_output(token_ids=comp.ids, log_probs=comp.logprobs, stop_reason="completed", extra_fields=extra)

    def _default_seed(self, prompt: list[int]) -> int:
        """Seed of a request that brings none: a hash of (server seed, step, prompt, how many requests
        with this prompt came before at this step). verl's agent loops send their requests
        concurrently, so a seed stream drawn in arrival order would make a CPU run depend on thread
        timing; this seed depends only on what is asked, so the same run samples the same multiset
        of completions per context every time."""
        step = self.global_steps or 0
        if step != self._seen_step:  # counts are per step: forget the last step's prompts
            self._seen.clear()
            self._seen_step = step
        key = tuple(prompt)
        n = self._seen[key]
        self._seen[key] += 1
        h = hashlib.blake2b(repr((self.seed, step, n, key)).encode(), digest_size=8).digest()
        return int.from_bytes(h, "little") >> 2  # < 2**62

    async def _prompt_logprobs(self, prompt: list[int]) -> dict[str, list[list[float]] | list[list[int]]]:
        """vLLM's prompt logprobs (num_prompt_logprobs = 0) in the layout of verl's `extract_prompt_logprobs`."""
        lps: list[float] = []
        if len(prompt) > 1:
            async with self._lock:
                lps = await asyncio.get_running_loop().run_in_executor(
                    None, lambda: self.engine.logprobs([prompt[:1]], [prompt[1:]], 1.0, weights="inference")[0])
        return {"prompt_logprobs": [[float(x)] for x in lps] + [[0.0]],
                "prompt_ids": [[int(t)] for t in prompt[1:]] + [[0]]}

    def _check_serving(self) -> None:
        if self._asleep:
            raise RuntimeError(f"HFGenerateServer: asleep ({', '.join(sorted(self._asleep))}); wake_up first")
        if self._discarded:
            raise RuntimeError("HFGenerateServer: its weights were discarded by sleep (level 2, as vLLM's) and no "
                               "update_weights has loaded new ones since; a server that keeps its weights across "
                               "sleep is the rollout 'hf_keep' (sleep_level=1)")

    async def _drain(self) -> None:
        """Serve pending requests in batches of equal sampling settings until none is left."""
        while self._pending:
            await asyncio.sleep(0)  # let concurrent requests of the same wave arrive
            key = self._pending[0][0]
            batch = [r for r in self._pending if r[0] == key][:self.max_num_seqs]
            taken = {id(r) for r in batch}
            self._pending = [r for r in self._pending if id(r) not in taken]
            max_new, temp, top_p, stop_tool = key
            params = SamplingParams(max_new_tokens=max_new, temperature=temp, top_p=top_p, stop_at_tool_call=stop_tool)
            try:
                async with self._lock:
                    comps = await asyncio.get_running_loop().run_in_executor(
                        None, lambda: self.engine.sample([b[1] for b in batch], params, seeds=[b[2] for b in batch]))
            except Exception as e:  # noqa: BLE001 - hand the error to every waiting request
                for b in batch:
                    if not b[3].done():
                        b[3].set_exception(e)
                continue
            for b, c in zip(batch, comps):
                if not b[3].done():
                    b[3].set_result(c)

    # ------------------------------------------------------------------ weights
    async def update_weights(self, named_tensors: dict[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]],
                             global_steps: int | None = None) -> int:
        """Load full parameter tensors (HF names) into the serving model; returns how many were loaded."""
        if "weights" in self._asleep:
            raise RuntimeError("HFGenerateServer.update_weights: the weights are asleep; wake_up(tags=['weights']) "
                               "first (verl's weight sync resumes them before loading)")
        items = dict(named_tensors)
        model = self.engine.rollout_model
        own = model.state_dict()
        unknown = sorted(k for k in items if k not in own)
        if unknown:
            raise KeyError(f"HFGenerateServer.update_weights: {len(unknown)} unknown parameters, e.g. {unknown[:3]}")
        async with self._lock:
            with torch.no_grad():
                for k, v in items.items():
                    own[k].copy_(v.to(own[k].dtype))
            # LocalEngine's decoder samples from fused copies of the inference weights, and its prefix
            # cache holds keys/values of the old ones (what LocalEngine.sync does after its own copy)
            self.engine.inference_weights_changed()
        self._discarded = False
        if global_steps is not None:
            self.global_steps = int(global_steps)
        self.engine.weight_version += 1
        self.weight_updates += 1
        return len(items)

    async def set_global_steps(self, global_steps: int) -> None:
        self.global_steps = int(global_steps)

    # ------------------------------------------------------------------ lifecycle (vLLM's states; no device memory)
    async def ready(self) -> bool:
        return True

    async def wake_up(self, tags: list[str] | None = None) -> None:
        """Wake the given tags (all when None). Weights a level-2 sleep discarded stay discarded."""
        tags = list(tags) if tags else list(TAGS)
        unknown = sorted(set(tags) - set(TAGS))
        if unknown:
            raise ValueError(f"HFGenerateServer.wake_up: unknown tags {unknown} (have {list(TAGS)})")
        self._asleep -= set(tags)

    async def sleep(self) -> None:
        """Sleep weights and KV cache; level 2 discards the weights, level 1 keeps them."""
        if not self.free_cache_engine:
            return
        await self.wait_for_requests_to_drain()
        self._asleep = set(TAGS)
        if self.sleep_level == 2:
            self._discarded = True
        self.sleeps += 1

    async def clear_kv_cache(self) -> None:
        pass

    async def release_kv_cache(self) -> None:
        pass

    async def resume_kv_cache(self) -> None:
        pass

    async def wait_for_requests_to_drain(self) -> None:
        while self._pending or (self._drainer is not None and not self._drainer.done()):
            await asyncio.sleep(0.01)

    async def abort_all_requests(self, reset_prefix_cache: bool = True, reject_request: bool = False) -> dict[str, Any]:
        return {"aborted_count": 0, "request_ids": []}

    async def abort_request(self, request_id: str, reset_prefix_cache: bool = True) -> dict[str, Any]:
        return {"aborted": False, "request_id": request_id}

    async def resume_generation(self) -> None:
        pass

    async def resume_engine_generation(self) -> None:
        pass

    async def open_submission_gate(self) -> None:
        pass

    async def start_profile(self, **kwargs: Any) -> None:
        pass

    async def stop_profile(self) -> None:
        pass

    async def stats(self) -> dict[str, Any]:
        return {"weight_updates": self.weight_updates, "global_steps": self.global_steps,
                "weight_version": self.engine.weight_version, "sleep_level": self.sleep_level,
                "sleeps": self.sleeps, "asleep": sorted(self._asleep), "discarded": self._discarded}


def _replica_base():
    from verl.workers.rollout.replica import RolloutReplica

    return RolloutReplica


def _make_replica_class(sleep_level: int):
    import ray

    RolloutReplica = _replica_base()

    class HFReplica(RolloutReplica):
        """One `HFGenerateServer` actor per replica, on the node of the replica's first worker."""

        SLEEP_LEVEL = sleep_level

        def rollout_worker_use_gpu(self) -> bool:
            return False

        async def launch_servers(self) -> None:
            node_id = None
            if self.workers:
                node_id = await self.workers[0].__ray_call__.remote(
                    lambda w: ray.get_runtime_context().get_node_id())
            opts: dict[str, Any] = {"name": f"{SERVER_PREFIX}_{self.replica_rank}_0{self.name_suffix}",
                                    "max_concurrency": self.max_concurrency, "num_cpus": 0}
            if node_id is not None:
                opts["scheduling_strategy"] = ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(
                    node_id=node_id, soft=False)
            mc = self.model_config  # a DictConfig here (LLMServerManager passes actor_rollout_ref.model)
            get = mc.get if hasattr(mc, "get") else (lambda k, d=None: getattr(mc, k, d))
            path = get("local_path", None) or get("path", None)
            cfg = self.config
            # max_model_len None = the model's positions (vLLM's default too)
            server = ray.remote(HFGenerateServer).options(**opts).remote(
                model_path=str(path), seed=int(getattr(cfg, "seed", 0) or 0),
                max_model_len=int(cfg.max_model_len) if cfg.max_model_len else None,
                response_length=int(cfg.response_length), sleep_level=self.SLEEP_LEVEL,
                free_cache_engine=bool(getattr(cfg, "free_cache_engine", True)),
                max_num_seqs=int(getattr(cfg, "max_num_seqs", 0) or 0) or None)
            await server.ready.remote()
            self.servers = [server]
            self._server_handle = server
            self._server_address = f"{ROLLOUT_NAME}-replica-{self.replica_rank}{self.name_suffix}"

    return HFReplica


_HF_REPLICAS: dict[int, type] = {}


def hf_replica_class(sleep_level: int = 2):
    """The `HFReplica` class of a sleep level (built lazily so importing this module does not import Ray actors)."""
    if sleep_level not in _HF_REPLICAS:
        _HF_REPLICAS[sleep_level] = _make_replica_class(sleep_level)
    return _HF_REPLICAS[sleep_level]


try:  # the adapter must be importable by its dotted name from verl's rollout registry
    from verl.workers.rollout.base import BaseRollout as _BaseRollout
except Exception:  # noqa: BLE001 - keeps HFGenerateServer usable without verl's worker stack
    _BaseRollout = object  # type: ignore[misc,assignment]


class HFServerAdapter(_BaseRollout):  # type: ignore[misc,valid-type]
    """verl's rollout object inside each actor worker: pushes trained weights to the HF server."""

    def __init__(self, config: Any, model_config: Any, device_mesh: Any, replica_rank: int = -1) -> None:
        super().__init__(config, model_config, device_mesh)
        c = self.config
        world = c.tensor_model_parallel_size * c.data_parallel_size * c.pipeline_model_parallel_size
        rank = int(os.environ.get("RANK", 0))
        self.replica_rank = rank // world if replica_rank == -1 else replica_rank
        self._has_server = rank % world == 0
        self._handle = None

    def _server(self):
        if self._handle is None:
            import ray

            self._handle = ray.get_actor(f"{SERVER_PREFIX}_{self.replica_rank}_0")
        return self._handle

    async def resume(self, tags: list[str]) -> None:
        """Wake the server's weights and/or KV cache (verl's weight sync: "weights", load, "kv_cache")."""
        if self.config.free_cache_engine and self._has_server:
            await self._server().wake_up.remote(tags=tags)

    async def release(self) -> None:
        if self.config.free_cache_engine and self._has_server:
            await self._server().sleep.remote()

    async def update_weights(self, weights: Any, global_steps: int | None = None,
                             wire_format: str = "named_tensors", **kwargs: Any) -> None:
        if wire_format != "named_tensors":
            raise NotImplementedError(f"the hf rollout takes wire_format='named_tensors', not {wire_format!r}")
        from verl.workers.rollout.utils import ensure_async_iterator

        tensors: dict[str, torch.Tensor] = {}
        async for name, t in ensure_async_iterator(weights):  # every rank iterates: full_tensor() is collective
            tensors[name] = t.detach().to("cpu").clone()
        if self._has_server:
            await self._server().update_weights.remote(tensors, global_steps)


def register() -> None:
    """Register the rollout names "hf" (sleep discards the weights) and "hf_keep" (sleep keeps them)
    with verl (adapter + replica); idempotent."""
    import functools

    from verl.workers.rollout import base as rollout_base
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    for name, level in SLEEP_LEVELS.items():
        rollout_base._ROLLOUT_REGISTRY[(name, "async")] = f"{__name__}.HFServerAdapter"
        RolloutReplicaRegistry.register(name, functools.partial(hf_replica_class, level))
