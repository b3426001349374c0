"""The sampling half of rtpo's engine seam on verl's LLM server client.

`rtpo.rollout.Roller` needs an engine with `tokenizer`, `max_context`, `weight_version` and
`sample(contexts, params, seeds) -> [Completion]`. `ServerEngine` provides exactly that (plus
`score`: logprobs of given tokens under the server's weights, through vLLM's prompt logprobs) on top of
anything with verl's server signature

    await client.generate(request_id, *, prompt_ids, sampling_params) -> TokenOutput(token_ids, log_probs, ...)

(verl's `LLMServerClient` in a trainer; an `HFGenerateServer` in tests; vLLM on a GPU cluster), so
the multi-turn rollout — boundary states S_k, context ids c_k = psi(S_k), env snapshots — is the
local engine's code, not a second implementation. All contexts of one `sample` call are in flight
at once (the server batches them).

`Roller.run` is synchronous; the generate coroutines run on an asyncio loop that must not be the
calling thread's running loop: either a verl agent loop's own loop (the caller is a worker thread,
see `agent_loop.py`) or a private background loop (`ServerEngine(..., loop=None)`).
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from typing import Any

from rtpo.engine.base import Completion, SamplingParams, stop_ids

class _BackgroundLoop:
    """An asyncio loop running forever in a daemon thread (for synchronous callers)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="rtpo-server-engine", daemon=True)
        self.thread.start()


class ServerEngine:
    """Roller engine whose `sample` sends one generate request per context to a verl server client.

    client:       has `async generate(request_id, *, prompt_ids, sampling_params, ...)`.
    tokenizer:    the policy's tokenizer (for stop tokens and the Roller's chat template).
    max_context:  prompt + response tokens a request may reach (verl: rollout prompt_length + response_length).
    loop:         the loop the coroutines run on; None = a private background loop.
    weight_version_fn: the current inference-weight version (trainer's global step) for Completions;
                  default: the server's reported `global_steps`, else 0.
    """

    def __init__(self, client: Any, tokenizer: Any, max_context: int, loop: asyncio.AbstractEventLoop | None = None,
                 weight_version_fn: Any = None) -> None:
        self.client, self.tokenizer, self.max_context = client, tokenizer, int(max_context)
        self._bg = None if loop is not None else _BackgroundLoop()
        self.loop = loop if loop is not None else self._bg.loop
        self.eos_ids, self.tool_close_id = stop_ids(tokenizer)
        self.weight_version_fn = weight_version_fn
        self.weight_version = 0
        self.requests = 0
        self.generated_tokens = 0

    # ------------------------------------------------------------------ one request
    def sampling_params(self, params: SamplingParams, prompt_len: int, seed: int | None) -> dict[str, Any]:
        """vLLM-style sampling params of one request (what verl's servers take)."""
        if params.logprob_top_k or params.entropy_tokens:
            raise NotImplementedError("ServerEngine: verl's servers return the sampled tokens' logprobs only (no top-k "
                                      "logprobs, no entropy); VerlEngine computes ARPO's entropy with the actor")
        sp: dict[str, Any] = {
            "temperature": float(params.temperature), "top_p": float(params.top_p), "top_k": -1,
            "repetition_penalty": 1.0, "logprobs": True,
            "max_tokens": max(1, min(int(params.max_new_tokens), self.max_context - prompt_len)),
        }
        stops = sorted(self.eos_ids)
        if params.stop_at_tool_call and self.tool_close_id is not None:
            stops.append(int(self.tool_close_id))
        sp["stop_token_ids"] = stops
        if seed is not None:
            sp["seed"] = int(seed)
        return sp

    def completion(self, out: Any) -> Completion:
        """TokenOutput -> Completion; the stop reason is read off the last token."""
        ids = [int(t) for t in out.token_ids]
        lps = [float(x) for x in (out.log_probs or [])]
        if len(lps) != len(ids):
            raise ValueError(f"server returned {len(lps)} logprobs for {len(ids)} tokens; "
                             "rollout logprobs are required (rollout.calculate_log_probs=True)")
        if ids and ids[-1] in self.eos_ids:
            reason = "eos"
        elif ids and self.tool_close_id is not None and ids[-1] == self.tool_close_id:
            reason = "tool_call"
        else:
            reason = "length"
        version = self.weight_version
        if self.weight_version_fn is not None:
            version = int(self.weight_version_fn())
        elif getattr(out, "extra_fields", None) and out.extra_fields.get("global_steps") is not None:
            version = int(out.extra_fields["global_steps"])
        return Completion(ids=ids, logprobs=lps, stop_reason=reason, weight_version=version)

    async def agenerate(self, context: list[int], params: SamplingParams, seed: int | None = None) -> Completion:
        out = await self.client.generate(request_id=uuid.uuid4().hex, prompt_ids=list(context),
                                         sampling_params=self.sampling_params(params, len(context), seed))
        comp = self.completion(out)
        self.requests += 1
        self.generated_tokens += len(comp.ids)
        return comp

    async def asample(self, contexts: list[list[int]], params: SamplingParams,
                      seeds: list[int] | None = None) -> list[Completion]:
        seeds = seeds if seeds is not None else [None] * len(contexts)
        return list(await asyncio.gather(*[self.agenerate(c, params, s) for c, s in zip(contexts, seeds)]))

    # ------------------------------------------------------------------ scoring given tokens
    SCORE_PARAMS = {"max_tokens": 1, "temperature": 1.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0,
                    "logprobs": False, "prompt_logprobs": 0, "detokenize": False}

    async def ascore(self, context: list[int], completion: list[int]) -> list[float]:
        """log p(completion[j] | context + completion[:j]) under the server's weights, unscaled
        (temperature 1): vLLM's prompt logprobs of the request prompt = context + completion, in the
        layout of verl's `extract_prompt_logprobs` (entry i scores prompt token i + 1)."""
        prompt = list(context) + list(completion)
        out = await self.client.generate(request_id=uuid.uuid4().hex, prompt_ids=prompt,
                                         sampling_params=dict(self.SCORE_PARAMS))
        pl = (getattr(out, "extra_fields", None) or {}).get("prompt_logprobs")
        if pl is None or len(pl) != len(prompt):
            raise ValueError(f"server returned {'no' if pl is None else len(pl)} prompt logprobs for a prompt of "
                             f"{len(prompt)} tokens (prompt_logprobs=0 requests them)")
        self.requests += 1
        n = len(context)
        return [float(pl[n - 1 + j][0]) for j in range(len(completion))]

    def score(self, contexts: list[list[int]], completions: list[list[int]]) -> list[list[float]]:
        """Synchronous `ascore` of every (context, completion), all in flight at once."""
        async def all_():
            return list(await asyncio.gather(*[self.ascore(c, r) for c, r in zip(contexts, completions)]))

        return self._run(all_())

    # ------------------------------------------------------------------ the Roller's engine API
    def sample(self, contexts: list[list[int]], params: SamplingParams,
               seeds: list[int] | None = None) -> list[Completion]:
        """Synchronous batch sampling (Roller's call); must not run on `self.loop`'s own thread."""
        return self._run(self.asample(contexts, params, seeds))

    def _run(self, coro: Any) -> Any:
        """Run a coroutine on `self.loop` from another thread and wait for its result."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            coro.close()
            raise RuntimeError("ServerEngine.sample called from its own event loop; run Roller.run in a worker "
                               "thread (loop.run_in_executor) or give ServerEngine another loop")
        if self.loop.is_closed() or not self.loop.is_running():
            coro.close()
            raise RuntimeError("ServerEngine.sample: its event loop is not running")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def close(self) -> None:
        if self._bg is not None:
            self._bg.loop.call_soon_threadsafe(self._bg.loop.stop)
