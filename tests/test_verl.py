"""The verl backend (rtpo.verl_ext) against the real verl 0.9.1 on CPU.

Fast tests: the advantage estimators through verl's registry and its `compute_advantage` dispatch
(equal to the local engine's functions on the same recorded groups); `VerlEngine` (the engine seam
on verl) against a fake trainer with an in-memory TransferQueue; the in-process HF rollout server
against the local engine's sampler; `RTPOAgentLoop` driven without Ray (boundary restore, response
masks); the real `AgentLoopWorker` built in-process; the Hydra overrides composed with verl's own
config; vanilla's files without verl. Slow tests: `train_verl` (what `rtpo train --engine verl`
runs) through verl's real V1 trainer on CPU — RTPO for two steps across a checkpoint/resume, RTPO
with sync interval:2 for one step on keep-weights servers, GRPO and Tree-GRPO for two steps, ARPO
for one, SeeUPO for two across a resume — on a Ray cluster the module starts once.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
import types
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("verl")

from rtpo.config import method_settings  # noqa: E402
from rtpo.engine.base import SamplingParams, UpdateConfig  # noqa: E402
from rtpo.envs.base import Task  # noqa: E402
from rtpo.rollout import Roller, Start  # noqa: E402
from tests.helpers import tiny  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
TOY = [Task(id=f"toy-{i}", kind="toy", question=f"Say yes or no, round {i}.", answers=["yes"]) for i in range(8)]


def run(coro):
    return asyncio.run(coro)


# ------------------------------------------------------------------ VerlEngine (the engine seam on verl), without Ray
class _FakeTQ:
    """TransferQueue's kv API in memory: per-key tensor fields, returned as jagged tensors (as
    TransferQueue returns them)."""

    def __init__(self):
        self.store: dict[str, dict] = {}

    def kv_batch_put(self, keys, partition_id, fields=None, tags=None):
        from transfer_queue import KVBatchMeta

        for k in keys:
            self.store.setdefault(k, {})
        for name in (fields.keys() if fields is not None else []):
            col = fields[name]
            if not isinstance(col, torch.Tensor):
                continue  # non-tensor columns (uid, extra_fields, ...) are not read back here
            for k, v in zip(keys, col.unbind()):
                self.store[k][name] = v
        return KVBatchMeta(keys=list(keys), tags=list(tags or [{} for _ in keys]), partition_id=partition_id)

    def kv_batch_get(self, keys, partition_id, select_fields=None):
        from tensordict import TensorDict

        out = {f: torch.nested.as_nested_tensor([self.store[k][f] for k in keys], layout=torch.jagged)
               for f in select_fields}
        return TensorDict(out, batch_size=len(keys))

    def kv_clear(self, keys, partition_id):
        for k in keys:
            self.store.pop(k, None)


class _FakeVerlTrainer:
    """What VerlEngine uses of a verl trainer: the actor is a LocalEngine's training model (forward:
    `log_probs` over the whole sequence, response part at [-T-1:-1], as verl's workers write it), the
    servers its rollout model (a push = LocalEngine.sync), `_balance_batch` appends one verl-style
    padding row, `_update_actor_whole` records what the actor would train on."""

    from rtpo.verl_ext.trainer import RTPOTrainerMixin as _M

    _measure_rollout_consistency = _M._measure_rollout_consistency
    _score_for_update = _M._score_for_update

    def __init__(self, eng, tq, temperature=1.0):
        from omegaconf import OmegaConf

        self.eng, self.tq = eng, tq
        self.config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"temperature": temperature}}})
        self.global_steps, self.use_reference_policy, self.calls, self.trained = 1, False, [], []
        self.checkpoint_manager = types.SimpleNamespace(sleep_replicas=lambda: self.calls.append("sleep"),
                                                        update_weights=self._push)
        self.actor_rollout_wg = types.SimpleNamespace(compute_log_prob=self._compute_log_prob)

    def _push(self, global_steps):
        self.calls.append("push")
        self.eng.sync()

    def _compute_log_prob(self, batch):
        from tensordict import TensorDict

        t, calc = float(batch.extra_info["temperature"]), bool(batch.extra_info.get("calculate_entropy"))
        lps, ents = [], []
        for k in batch.keys:
            p, r = self.tq.store[k]["prompts"].tolist(), self.tq.store[k]["responses"].tolist()
            lp, _, ent = self.eng._forward_logprobs(self.eng.model, [p], [r], t, with_entropy=True)
            full_lp, full_ent = torch.zeros(len(p) + len(r)), torch.zeros(len(p) + len(r))
            full_lp[len(p) - 1:-1], full_ent[len(p) - 1:-1] = lp[0].detach(), ent[0].detach()
            lps.append(full_lp)
            ents.append(full_ent)
        f = {"log_probs": torch.nested.as_nested_tensor(lps, layout=torch.jagged)}
        if calc:
            f["entropy"] = torch.nested.as_nested_tensor(ents, layout=torch.jagged)
        self.tq.kv_batch_put(keys=batch.keys, partition_id="train", fields=TensorDict(f, batch_size=len(batch)))
        return batch

    def _balance_batch(self, meta, metrics):
        from tensordict import TensorDict
        from transfer_queue import KVBatchMeta

        eos = self.eng.tokenizer.eos_token_id
        pad = {"prompts": torch.full((3,), eos), "responses": torch.full((1,), eos),
               "response_mask": torch.zeros(1, dtype=torch.int64), "rollout_log_probs": torch.zeros(1)}
        self.tq.kv_batch_put(keys=["pad_0_0"], partition_id="train",
                             fields=TensorDict({k: v[None] for k, v in pad.items()}, batch_size=1))
        return KVBatchMeta(keys=meta.keys + ["pad_0_0"], tags=meta.tags + [{"is_padding": True}],
                           partition_id=meta.partition_id, extra_info=meta.extra_info)

    def _compute_old_log_prob(self, batch, metrics):
        from verl.workers.utils.padding import response_from_nested

        batch.extra_info.update(temperature=self.config.actor_rollout_ref.rollout.temperature)
        self._compute_log_prob(batch)
        d = self.tq.kv_batch_get(keys=batch.keys, partition_id="train", select_fields=["log_probs", "response_mask"])
        from tensordict import TensorDict

        self.tq.kv_batch_put(keys=batch.keys, partition_id="train", fields=TensorDict(
            {"old_log_probs": response_from_nested(d["log_probs"], d["response_mask"])}, batch_size=len(batch)))
        return batch

    def _update_actor_whole(self, batch, metrics, temperature=None):
        fields = ["response_mask", "old_log_probs", "rollout_log_probs", "advantages", "returns", "responses"]
        self.trained.append((list(batch.keys), self.tq.kv_batch_get(keys=batch.keys, partition_id="train",
                                                                    select_fields=fields).to_padded_tensor()))
        metrics.update({"actor/pg_loss": 0.25, "actor/pg_clipfrac": 0.125, "actor/kl_loss": 0.0,
                        "actor/grad_norm": 1.5})
        return batch


def test_verl_engine_seam_without_ray(monkeypatch):
    """VerlEngine on a fake verl trainer (in-memory TransferQueue, a LocalEngine as actor and servers):
    Row -> TransferQueue fields (response_mask = Row.mask, rollout_log_probs = Row.old_logprobs,
    per-token advantages = returns, verl's padding row zeros), old_log_probs = the actor's recomputed
    logprobs (UpdateConfig.old = "recompute"; equal to the rollout's here: same weights, psi full), the
    pre-update ratio; logprobs and ARPO's entropy equal the local engine's; the
    server states (sleep before the actor computes, push before sampling, no sampling after an
    update without sync); every TransferQueue key is either cleared or handed to fit()."""
    import transfer_queue

    from rtpo.engine.base import Row, UpdateConfig
    from rtpo.verl_ext.engine import VerlEngine
    from rtpo.verl_ext.cpu_harness.hf_rollout import HFGenerateServer
    from rtpo.verl_ext.server_engine import ServerEngine

    tq = _FakeTQ()
    for name in ("kv_batch_put", "kv_batch_get", "kv_clear"):
        monkeypatch.setattr(transfer_queue, name, getattr(tq, name))
    eng, ref = tiny.engine(seed=4), tiny.engine(seed=4)
    trainer = _FakeVerlTrainer(eng, tq, temperature=0.9)
    server = ServerEngine(HFGenerateServer(engine=eng), eng.tokenizer, eng.max_context)
    ucfg = UpdateConfig(lr=1e-3)
    ve = VerlEngine(trainer, server, ucfg, vocab_size=eng.model.config.vocab_size, max_context=eng.max_context)
    tok = eng.tokenizer
    ctx = [tok.encode("question continue yes"), tok.encode("Answer each turn. question")]
    try:
        ve.sync()
        assert ve.weight_version == 1 and trainer.calls == []  # nothing changed: nothing pushed yet
        params = SamplingParams(max_new_tokens=8, temperature=0.9, stop_at_tool_call=False, entropy_tokens=5)
        comps = ve.sample(ctx, params, seeds=[11, 12])
        assert trainer.calls == ["push", "sleep"]  # servers asleep at start-up; asleep again for the entropy forward
        want = ref.sample(ctx, params, seeds=[11, 12])
        for c, w in zip(comps, want):
            assert c.ids == w.ids and c.logprobs == pytest.approx(w.logprobs, abs=1e-5)
            assert c.entropy == pytest.approx(w.entropy, abs=1e-5) and 0 < c.entropy < 1
            assert c.weight_version == 1
        assert ve.logprobs(ctx, [c.ids for c in comps], 0.9) == \
            [pytest.approx(x, abs=1e-5) for x in ref.logprobs(ctx, [c.ids for c in comps], 0.9)]
        assert tq.store == {}  # scratch rows are cleared

        masks = [[1] * len(comps[0].ids), [0, 0] + [1] * (len(comps[1].ids) - 2)]
        rows = [Row(c, x.ids, x.logprobs, [0.5 * (i + 1)] * len(x.ids), m, group=f"g{i}")
                for i, (c, x, m) in enumerate(zip(ctx, comps, masks))]
        rows.append(Row(ctx[0], comps[0].ids[:2], comps[0].logprobs[:2], [9.0, 9.0], [0, 0]))  # untrained: dropped
        with pytest.raises(ValueError, match="UpdateConfig.lr"):
            ve.update(rows, UpdateConfig(lr=2e-3), 0.9)
        with pytest.raises(ValueError, match="temperature"):
            ve.update(rows, ucfg, 1.0)
        stats = ve.update(rows, ucfg, 0.9)
        assert stats.trained_tokens == sum(map(sum, masks)) and stats.ratio_mean == pytest.approx(1.0, abs=1e-4)
        assert 0 <= stats.kl_rollout_train < 1e-6 and stats.grad_norm == 1.5 and stats.clip_frac == 0.125
        keys, d = trainer.trained[0]
        assert len(keys) == 3 and keys[-1] == "pad_0_0"  # the two trained rows + verl's padding row
        for i, r in enumerate(rows[:2]):
            n = len(r.response_ids)
            assert d["responses"][i, :n].tolist() == r.response_ids
            assert d["response_mask"][i, :n].tolist() == r.mask
            assert d["advantages"][i, :n].tolist() == pytest.approx(r.advantages)
            assert d["returns"][i, :n].tolist() == pytest.approx(r.advantages)
            assert d["rollout_log_probs"][i, :n].tolist() == pytest.approx(r.old_logprobs)
            on = torch.tensor(r.mask).bool()
            assert d["old_log_probs"][i, :n][on].tolist() == pytest.approx(torch.tensor(r.old_logprobs)[on].tolist())
        assert d["advantages"][2].abs().sum() == 0 and d["response_mask"][2].sum() == 0
        assert ve.train_version == 1 and trainer.calls[-1] == "sleep"
        with pytest.raises(RuntimeError, match="sync"):
            ve.sample(ctx, params)  # the servers lag the actor: no stale sampling on verl
        with pytest.raises(NotImplementedError, match="inference"):
            ve.logprobs(ctx, [c.ids for c in comps], 0.9, weights="inference")
        meta = ve.drain()
        assert meta.keys == keys and set(tq.store) == set(keys)  # fit() gets every key left, and clears them
        assert ve.drain().keys == []
        ve.sync()
        assert ve.weight_version == 2 and trainer.calls[-1] == "push"
        with pytest.raises(ValueError, match="row 0: prompt_ids is empty"):
            ve.update([Row([], [1], [0.0], [1.0], [1])], ucfg, 0.9)
        with pytest.raises(ValueError, match="context 0 is empty"):
            ve.logprobs([[]], [[1]])
    finally:
        server.close()


class _ServerBackedTrainer(_FakeVerlTrainer):
    """The fake trainer with real server states: its checkpoint manager drives an `HFGenerateServer`
    through verl's sequences (sleep; weight sync = wake "weights", load the actor's weights, wake
    "kv_cache"; wake_up_replicas = wake all), and its actor update really moves the actor's weights."""

    def __init__(self, eng, tq, srv, on_loop, temperature=1.0, ranks=2):
        super().__init__(eng, tq, temperature)
        self.srv, self.on_loop, self.ranks = srv, on_loop, ranks
        self.checkpoint_manager = types.SimpleNamespace(sleep_replicas=self._sleep, update_weights=self._push,
                                                        wake_up_replicas=self._wake)
        self.actor_rollout_wg.execute_with_func_generator = self._on_every_rank

    def _on_every_rank(self, func):
        """verl's DP_COMPUTE_PROTO_WITH_FUNC dispatch: func(worker) on each rank, DataProtos concatenated."""
        from verl import DataProto

        self.calls.append(f"{func.__name__}")
        return DataProto.concat([func(types.SimpleNamespace(rank=r)) for r in range(self.ranks)])

    def _sleep(self):
        self.calls.append("sleep")
        self.on_loop(self.srv.sleep())

    def _wake(self):
        self.calls.append("wake")
        self.on_loop(self.srv.wake_up())

    def _push(self, global_steps):
        self.calls.append("push")
        self.on_loop(self.srv.wake_up(tags=["weights"]))
        self.on_loop(self.srv.update_weights({k: v.detach().clone() for k, v in self.eng.model.state_dict().items()},
                                             global_steps))
        self.on_loop(self.srv.wake_up(tags=["kv_cache"]))

    def _update_actor_whole(self, batch, metrics, temperature=None):
        super()._update_actor_whole(batch, metrics, temperature)
        g = torch.Generator().manual_seed(len(self.trained))
        with torch.no_grad():
            for p in self.eng.model.parameters():
                p.add_(0.05 * torch.randn(p.shape, generator=g))
        return batch


def _server_backed(monkeypatch, sleep_level: int, keeps_weights: bool):
    """(VerlEngine, fake trainer, ServerEngine, reference engine = the actor before any update) on an
    HF server of the given sleep level; the actor and the servers start equal (LocalEngine seed 4)."""
    import transfer_queue

    from rtpo.verl_ext.engine import VerlEngine
    from rtpo.verl_ext.cpu_harness.hf_rollout import HFGenerateServer
    from rtpo.verl_ext.server_engine import ServerEngine

    tq = _FakeTQ()
    for name in ("kv_batch_put", "kv_batch_get", "kv_clear"):
        monkeypatch.setattr(transfer_queue, name, getattr(tq, name))
    eng, ref = tiny.engine(seed=4), tiny.engine(seed=4)
    hf = HFGenerateServer(engine=eng, sleep_level=sleep_level)
    server = ServerEngine(hf, eng.tokenizer, eng.max_context)
    trainer = _ServerBackedTrainer(eng, tq, hf, lambda c: asyncio.run_coroutine_threadsafe(c, server.loop).result())
    ve = VerlEngine(trainer, server, UpdateConfig(lr=1e-3), vocab_size=eng.model.config.vocab_size,
                    max_context=eng.max_context, keeps_weights=keeps_weights)
    return ve, trainer, server, ref


def _update_on(ve, ctx, comps):
    from rtpo.engine.base import Row

    rows = [Row(c, x.ids, x.logprobs, [1.0 - i] * len(x.ids), [1] * len(x.ids), group=f"g{i}")
            for i, (c, x) in enumerate(zip(ctx, comps))]
    return ve.update(rows, UpdateConfig(lr=1e-3), 1.0)


def test_verl_engine_samples_stale_weights_from_servers_that_keep_them(monkeypatch):
    """RTPO's lagging sync modes on verl: with servers that keep their weights across sleep (vLLM
    level 1; "hf_keep" here), `sample` after an update without sync() wakes the servers without a
    push and samples from the pre-update weights (the samples' logprobs are the pre-update model's,
    the Completions carry the old weight_version); kl:tau's logprobs(weights="inference") are scored
    by the servers with those weights; sync() pushes and the next samples are the new weights'.
    With servers that discard their weights (level 2, verl's default) the same call raises, and a
    keep-weights engine on a discarding server is stopped by the server instead of sampling garbage."""
    import verl.utils.device

    freed = []  # the actor ranks' device-cache releases (verl's get_torch_device() in each worker)
    monkeypatch.setattr(verl.utils.device, "get_torch_device", lambda: types.SimpleNamespace(
        synchronize=lambda: None, empty_cache=lambda: freed.append("empty_cache")))
    tok = tiny.tokenizer()
    ctx = [tok.encode("question continue yes"), tok.encode("Answer each turn. question")]
    params = SamplingParams(max_new_tokens=8, temperature=1.0, stop_at_tool_call=False)

    ve, trainer, server, ref = _server_backed(monkeypatch, sleep_level=1, keeps_weights=True)
    eng = trainer.eng
    try:
        ve.wake()
        ve.sync()  # nothing changed: a version, no push
        c0 = ve.sample(ctx, params, seeds=[1, 2])
        assert trainer.calls == ["push"] and all(c.weight_version == 1 for c in c0)
        stats = _update_on(ve, ctx, c0)
        assert stats.trained_tokens > 0 and trainer.calls[-1] == "sleep"
        c1 = ve.sample(ctx, params, seeds=[3, 4])  # stale: one update behind the actor
        assert trainer.calls.count("push") == 1 and trainer.calls[-1] == "wake" and ve.wakes == 1
        # before the servers wake, every actor rank released its cached device memory (as verl's push does)
        assert trainer.calls[-2:] == ["free_device_cache", "wake"] and ve.freed_ranks == [0, 1]
        assert freed == ["empty_cache", "empty_cache"]
        assert all(c.weight_version == 1 for c in c1)
        ids = [c.ids for c in c1]
        old, new = ref.logprobs(ctx, ids, 1.0), eng.logprobs(ctx, ids, 1.0)
        for c, o, n in zip(c1, old, new):
            assert c.logprobs == pytest.approx(o, abs=1e-5)
            assert max(abs(a - b) for a, b in zip(c.logprobs, n)) > 1e-3  # the actor really moved
        # kl:tau's measurement: inference = the servers' (stale) weights, train = the actor's
        inf = ve.logprobs(ctx, ids, 1.0, weights="inference")
        assert trainer.calls[-1] == "wake"  # the servers score, woken without a push
        trn = ve.logprobs(ctx, ids, 1.0)
        assert inf == [pytest.approx(o, abs=1e-5) for o in old] and trn == [pytest.approx(n, abs=1e-5) for n in new]
        with pytest.raises(NotImplementedError, match="temperature"):
            ve.logprobs(ctx, ids, 0.9, weights="inference")
        with pytest.raises(NotImplementedError, match="entropy"):
            ve.sample(ctx, dataclasses.replace(params, entropy_tokens=3))
        ve.drain()
        ve.sync()
        assert trainer.calls[-1] == "push" and ve.weight_version == 2
        c2 = ve.sample(ctx, params, seeds=[5, 6])
        assert all(c.weight_version == 2 for c in c2) and trainer.calls[-1] == "push"
        for c, n in zip(c2, eng.logprobs(ctx, [c.ids for c in c2], 1.0)):
            assert c.logprobs == pytest.approx(n, abs=1e-5)
        assert ve.logprobs(ctx, [c.ids for c in c2], 1.0, weights="inference") == \
            [pytest.approx(n, abs=1e-5) for n in eng.logprobs(ctx, [c.ids for c in c2], 1.0)]
    finally:
        server.close()

    ve, trainer, server, _ = _server_backed(monkeypatch, sleep_level=2, keeps_weights=False)
    try:
        ve.wake()
        _update_on(ve, ctx, ve.sample(ctx, params, seeds=[1, 2]))
        with pytest.raises(RuntimeError, match="vllm_keep"):
            ve.sample(ctx, params)
        with pytest.raises(NotImplementedError, match="discarded"):
            ve.logprobs(ctx, [[5, 6]], 1.0, weights="inference")
        ve.sync()
        assert len(ve.sample(ctx, params)) == 2 and trainer.calls[-1] == "push"
    finally:
        server.close()

    ve, trainer, server, _ = _server_backed(monkeypatch, sleep_level=2, keeps_weights=True)  # misconfigured
    try:
        ve.wake()
        _update_on(ve, ctx, ve.sample(ctx, params, seeds=[1, 2]))
        with pytest.raises(RuntimeError, match="discarded"):
            ve.sample(ctx, params)
    finally:
        server.close()


def test_verl_engine_helpers():
    """The pure pieces: one row's TransferQueue sample, padded advantages, the entropy normaliser, the
    UpdateConfig the verl actor applies, Hydra values of method settings."""
    from rtpo.engine.base import UpdateConfig
    from rtpo.verl_ext.engine import check_update_config, normalized_entropy, padded_advantages, row_fields
    from rtpo.verl_ext.launch import hydra_value

    f = row_fields([5, 6, 7], [8, 9], [0, 1], [-0.5, -0.25], "u", 3)
    assert f["input_ids"].tolist() == [5, 6, 7, 8, 9] and f["position_ids"].tolist() == [0, 1, 2, 3, 4]
    assert f["response_mask"].tolist() == f["loss_mask"].tolist() == [0, 1]
    assert f["rollout_log_probs"].tolist() == [-0.5, -0.25] and f["rm_scores"].tolist() == [0.0, 0.0]
    with pytest.raises(ValueError, match="mask has 1"):
        row_fields([5], [8, 9], [1], [0.0, 0.0], "u", 3)
    with pytest.raises(ValueError, match="response_ids is empty"):
        row_fields([5], [], [], [], "u", 3)
    a = padded_advantages(["a", "pad", "b"], {"a": [1.0, 2.0], "b": [3.0]}, [2, 1, 1])
    assert a.tolist() == [[1.0, 2.0], [0.0, 0.0], [3.0, 0.0]]
    with pytest.raises(ValueError, match="row b: 1 advantages for 2"):
        padded_advantages(["b"], {"b": [3.0]}, [2])
    assert normalized_entropy(torch.tensor([1.0, 3.0, 100.0]), 2, 8) == pytest.approx(2.0 / np.log(8))
    assert normalized_entropy(torch.zeros(0), 5, 8) is None
    check_update_config(UpdateConfig(lr=1e-3, micro_batch_tokens=5), UpdateConfig(lr=1e-3))
    with pytest.raises(ValueError, match="UpdateConfig.kl_coef"):
        check_update_config(UpdateConfig(kl_coef=0.1), UpdateConfig())
    assert hydra_value([0.8, 1.2]) == "[0.8,1.2]" and hydra_value(True) == "true" and hydra_value("once") == "once"
    assert hydra_value("kl:0.1") == "'kl:0.1'" and hydra_value("it's") == "'it\\'s'"
    with pytest.raises(ValueError, match="seeupo.x"):
        hydra_value({"a": 1}, "seeupo.x")


# ------------------------------------------------------------------ the in-process HF server
def test_hf_server_samples_as_the_local_engine_and_loads_weights():
    from rtpo.verl_ext.cpu_harness.hf_rollout import HFGenerateServer

    eng = tiny.engine(seed=1)
    ref = tiny.engine(seed=1)
    srv = HFGenerateServer(engine=eng)
    tok = eng.tokenizer
    msgs = [{"role": "system", "content": "Answer each turn."}, {"role": "user", "content": "question"}]
    ctx = tok.encode(tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False))
    sp = {"temperature": 0.8, "top_p": 1.0, "top_k": -1, "max_tokens": 12, "logprobs": True, "seed": 123,
          "repetition_penalty": 1.0, "stop_token_ids": [tok.eos_token_id]}

    async def two():  # concurrent requests are batched together
        return await asyncio.gather(srv.generate(request_id="a", prompt_ids=ctx, sampling_params=dict(sp)),
                                    srv.generate(request_id="b", prompt_ids=ctx[:5], sampling_params=dict(sp, seed=7)))

    a, b = run(two())
    want = ref.sample([ctx, ctx[:5]], SamplingParams(max_new_tokens=12, temperature=0.8, stop_at_tool_call=False),
                      seeds=[123, 7])
    assert a.token_ids == want[0].ids and b.token_ids == want[1].ids
    assert a.log_probs == pytest.approx(want[0].logprobs, abs=1e-5)
    # logprobs are those of the temperature-scaled sampling distribution (what verl's old_log_prob recomputes)
    re = ref.logprobs([ctx], [a.token_ids], temperature=0.8)[0]
    assert a.log_probs == pytest.approx(re, abs=1e-4)
    with pytest.raises(ValueError, match="top_k"):
        run(srv.generate(request_id="c", prompt_ids=ctx, sampling_params=dict(sp, top_k=5)))
    # weight update: the server now samples exactly like another model
    other = tiny.engine(seed=2)
    n = run(srv.update_weights({k: v.clone() for k, v in other.model.state_dict().items()}, global_steps=4))
    assert n == len(other.model.state_dict())
    c = run(srv.generate(request_id="d", prompt_ids=ctx, sampling_params=dict(sp)))
    w = other.sample([ctx], SamplingParams(max_new_tokens=12, temperature=0.8, stop_at_tool_call=False), seeds=[123])[0]
    assert c.token_ids == w.ids and c.extra_fields["global_steps"] == 4
    with pytest.raises(KeyError, match="unknown parameters"):
        run(srv.update_weights({"no.such.weight": torch.zeros(1)}))


def test_hf_server_default_seeds_do_not_depend_on_arrival_order():
    """Requests without a seed (verl's agent loops send none) draw one from what is asked, not from
    when it arrived: the same requests in another order give the same completions per prompt, the
    repeats of one prompt differ, and the next step (global_steps) draws new ones."""
    from rtpo.verl_ext.cpu_harness.hf_rollout import HFGenerateServer

    tok = tiny.tokenizer()
    prompts = [tok.encode(f"question {i}") for i in range(3)]
    sp = {"temperature": 1.0, "top_p": 1.0, "max_tokens": 12, "stop_token_ids": [tok.eos_token_id]}

    def serve(order, steps=None):
        srv = HFGenerateServer(engine=tiny.engine(seed=1))
        if steps is not None:
            run(srv.set_global_steps(steps))

        async def go():
            return await asyncio.gather(*(srv.generate(prompt_ids=prompts[i], sampling_params=dict(sp)) for i in order))

        got: dict[int, list[tuple[int, ...]]] = {}
        for i, out in zip(order, run(go())):
            got.setdefault(i, []).append(tuple(out.token_ids))
        return got

    a = serve([0, 0, 1, 2, 2, 2])
    b = serve([2, 1, 2, 0, 2, 0])
    assert a == b
    assert len(set(a[2])) > 1  # the three requests of prompt 2 are three different draws
    assert serve([0, 0, 1, 2, 2, 2], steps=5) != a


def test_hf_server_sleep_discards_or_keeps_weights_and_scores_prompts():
    """The HF server's sleep, as vLLM's: asleep it refuses to generate and to load weights; level 2
    ("hf") discards the weights (no sampling until update_weights), level 1 ("hf_keep") restores them
    on wake_up (the same samples as before the sleep). prompt_logprobs=0 returns vLLM's layout:
    entry i scores prompt token i + 1, unscaled by temperature, a dummy last entry."""
    from rtpo.verl_ext.cpu_harness.hf_rollout import HFGenerateServer

    other = tiny.engine(seed=2)
    tok = other.tokenizer
    ctx = tok.encode("Answer each turn. question continue")
    sp = {"temperature": 0.8, "top_p": 1.0, "top_k": -1, "max_tokens": 6, "logprobs": True, "seed": 5,
          "stop_token_ids": [tok.eos_token_id]}
    for level in (2, 1):
        eng = tiny.engine(seed=1)
        srv = HFGenerateServer(engine=eng, sleep_level=level)
        a = run(srv.generate(request_id="a", prompt_ids=ctx, sampling_params=dict(sp)))
        run(srv.sleep())
        with pytest.raises(RuntimeError, match="asleep"):
            run(srv.generate(request_id="b", prompt_ids=ctx, sampling_params=dict(sp)))
        with pytest.raises(RuntimeError, match="asleep"):
            run(srv.update_weights({}))
        run(srv.wake_up(tags=["weights"]))
        with pytest.raises(RuntimeError, match="asleep"):  # the KV cache still sleeps
            run(srv.generate(request_id="b", prompt_ids=ctx, sampling_params=dict(sp)))
        run(srv.wake_up())
        if level == 2:
            with pytest.raises(RuntimeError, match="discarded"):
                run(srv.generate(request_id="b", prompt_ids=ctx, sampling_params=dict(sp)))
            run(srv.update_weights({k: v.clone() for k, v in other.model.state_dict().items()}))
            c = run(srv.generate(request_id="c", prompt_ids=ctx, sampling_params=dict(sp)))
            w = other.sample([ctx], SamplingParams(max_new_tokens=6, temperature=0.8, stop_at_tool_call=False),
                             seeds=[5])[0]
            assert c.token_ids == w.ids
        else:
            b = run(srv.generate(request_id="b", prompt_ids=ctx, sampling_params=dict(sp)))
            assert b.token_ids == a.token_ids and b.log_probs == pytest.approx(a.log_probs, abs=1e-6)
    with pytest.raises(ValueError, match="sleep_level"):
        HFGenerateServer(engine=other, sleep_level=3)
    d = run(srv.generate(request_id="d", prompt_ids=ctx, sampling_params=dict(sp, prompt_logprobs=0)))
    pl, pid = d.extra_fields["prompt_logprobs"], d.extra_fields["prompt_ids"]
    assert len(pl) == len(pid) == len(ctx) and pl[-1] == [0.0] and [x[0] for x in pid[:-1]] == ctx[1:]
    want = srv.engine.logprobs([ctx[:1]], [ctx[1:]], 1.0, weights="inference")[0]
    assert [x[0] for x in pl[:-1]] == pytest.approx(want, abs=1e-5)
    with pytest.raises(ValueError, match="top-k"):
        run(srv.generate(request_id="e", prompt_ids=ctx, sampling_params=dict(sp, prompt_logprobs=2)))


# ------------------------------------------------------------------ the agent loop, without Ray
class ScriptedServer:
    """verl's server signature: replays scripted actions (token ids) while any are left, scoring them
    with the HF model (teacher forcing), then defers to the real HF server."""

    def __init__(self, server, actions: list[list[int]]):
        self.server, self.actions = server, list(actions)
        self.calls: list[list[int]] = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kw):
        from verl.workers.rollout.replica import TokenOutput

        self.calls.append(list(prompt_ids))
        if not self.actions:
            return await self.server.generate(request_id=request_id, prompt_ids=prompt_ids,
                                              sampling_params=sampling_params, **kw)
        ids = self.actions.pop(0)
        lp = self.server.engine.logprobs([list(prompt_ids)], [ids], float(sampling_params.get("temperature", 1.0)))[0]
        return TokenOutput(token_ids=ids, log_probs=lp, stop_reason="completed")


def _agent_loop(server, tokenizer, cfg_extra: dict | None = None):
    from omegaconf import OmegaConf

    from verl.experimental.agent_loop.agent_loop import DictConfigWrap
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from rtpo.verl_ext.agent_loop import RTPOAgentLoop

    cfg = OmegaConf.create({"actor_rollout_ref": {"rollout": {"prompt_length": 900, "response_length": 600}},
                            "data": {}, "rtpo": {"psi": "qwen3", "env": {"max_turns": 3}, "max_new_tokens": 24,
                                                 **(cfg_extra or {})}})
    return RTPOAgentLoop(trainer_config=DictConfigWrap(cfg), server_manager=server, tokenizer=tokenizer,
                         processor=None, dataset_cls=RLHFDataset, data_config=DictConfigWrap(cfg.data))


def _expert_actions(task, tok):
    """The scripted math expert's assistant turns as token ids (tool calls end with </tool_call>)."""
    from rtpo.data import get_expert
    from rtpo.envs import make_env

    msgs, reward = get_expert("math")(task, make_env(task, max_turns=3), 0.0, random.Random(0))
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    acts = []
    for m in msgs:
        if m["role"] == "assistant":
            ids = tok.encode(m["content"], add_special_tokens=False)
            acts.append(ids if m["content"].endswith("</tool_call>") else ids + [eos])
    return acts, reward


def test_a_flat_chain_is_seeded_by_run_step_prompt_and_repeat():
    """GRPO's chains on verl (`rtpo_chain_sync`) carry a sampling seed made of the run's seed, the step,
    the prompt's dataset index and its repeat (verl's session_id), so that a rerun or a resumed run
    samples the same chains; the same seed in a process with another PYTHONHASHSEED (a Ray worker on
    another node); unseeded, as before, where verl passes no session_id."""
    from rtpo.verl_ext.agent_loop import chain_seed

    row = {"extra_info": {"index": 7, "task": "{}"}, "global_steps": 3, "session_id": 2}
    base = chain_seed({"seed": 0}, row)
    assert isinstance(base, int) and 0 <= base < 2**62
    assert chain_seed({"seed": 0}, dict(row)) == base
    others = [chain_seed({"seed": 1}, row), chain_seed({"seed": 0}, {**row, "global_steps": 4}),
              chain_seed({"seed": 0}, {**row, "extra_info": {"index": 8}}),
              chain_seed({"seed": 0}, {**row, "session_id": 3})]
    assert len({base, *others}) == 5
    assert chain_seed({"seed": 0}, {k: v for k, v in row.items() if k != "session_id"}) is None
    code = ("from rtpo.verl_ext.agent_loop import chain_seed; "
            "print(chain_seed({'seed': 0}, {'extra_info': {'index': 7}, 'global_steps': 3, 'session_id': 2}))")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONHASHSEED": "12345"},
                         capture_output=True, text=True, check=True).stdout.split()[-1]
    assert int(out) == base


def test_agent_loop_restores_a_boundary_and_reproduces_the_trunk():
    from rtpo.data import generate_tasks
    from rtpo.verl_ext.cpu_harness.hf_rollout import HFGenerateServer

    eng = tiny.engine(seed=0, max_position=1600)
    task = generate_tasks("math", 1, 0, "train")[0]
    acts, expert_reward = _expert_actions(task, eng.tokenizer)
    assert len(acts) == 2 and expert_reward == 1.0  # python call, then the boxed answer
    server = ScriptedServer(HFGenerateServer(engine=eng), acts)
    loop = _agent_loop(server, eng.tokenizer)

    # 1. the trunk: two turns, a real python tool result in between, reward 1
    out = run(loop.run({"temperature": 1.0}, rtpo_start=Start(task, first_kind="trunk", rest_kind="trunk"),
                       rtpo_keep_trajectory=True))
    trunk = out.extra_fields["rtpo_trajectory"]
    assert [t.action_ids for t in trunk.turns] == acts and trunk.reward == 1.0
    obs = trunk.turns[0].observations
    assert obs and obs[0]["role"] == "tool" and task.answers[0] in obs[0]["content"]
    assert [c for c in server.calls] == [t.context_ids for t in trunk.turns]  # sampled from exactly c_k
    # the flat row: prompt = initial context; the mask covers exactly the action tokens
    p = trunk.info["prompt_len"]
    assert out.prompt_ids == trunk.full_ids[:p] and out.response_ids == trunk.full_ids[p:]
    on = [out.response_ids[i] for i, m in enumerate(out.response_mask) if m]
    assert on == acts[0] + acts[1] and out.reward_score == 1.0
    assert sum(1 for x in out.response_logprobs if x != 0.0) == len(on)

    # 2. restore S_0 and replay the trunk's turn-0 action: the env (python run again) gives the same observation
    server.actions = []
    rep = run(loop.run({"temperature": 1.0}, rtpo_start=Start(task, source=trunk, k=0, forced_action=trunk.turns[0],
                                                                 first_kind="sibling", rest_kind="continuation"),
                       rtpo_keep_trajectory=True, rtpo_row=0)).extra_fields["rtpo_trajectory"]
    assert rep.turns[0].observations == trunk.turns[0].observations
    assert rep.boundaries[1].env_state == trunk.boundaries[1].env_state
    assert rep.boundaries[1].context_ids == trunk.turns[1].context_ids
    # 3. restore S_1 and replay the final answer: the same terminal reward from the restored snapshot
    fin = run(loop.run({"temperature": 1.0}, rtpo_start=Start(task, source=trunk, k=1, forced_action=trunk.turns[1]),
                       rtpo_keep_trajectory=True)).extra_fields["rtpo_trajectory"]
    assert fin.reward == trunk.reward == 1.0 and fin.start_k == 1

    # 4. a sibling at S_1 sampled by the HF server: its row is (c_1, the sibling's turn-1 tokens)
    n_calls = len(server.calls)
    sib = run(loop.run({"temperature": 1.0}, rtpo_start=Start(task, source=trunk, k=1, first_kind="sibling",
                                                                 rest_kind="continuation"),
                       rtpo_keep_trajectory=True, rtpo_row=1))
    st = sib.extra_fields["rtpo_trajectory"]
    assert server.calls[n_calls] == trunk.turns[1].context_ids  # restored: the recorded c_1, bit for bit
    assert sib.prompt_ids == trunk.turns[1].context_ids
    assert sib.response_ids == st.turns[1].action_ids and sib.response_mask == [1] * len(st.turns[1].action_ids)
    assert sib.response_logprobs == pytest.approx(st.turns[1].logprobs)
    assert st.turns[1].kind == "sibling" and st.turns[0].action_ids == acts[0]


def test_real_agent_loop_worker_in_process(tmp_path):
    """verl's own AgentLoopWorker (built in-process, no Ray) runs RTPOAgentLoop on dataset rows:
    padded flat rows whose response_mask is 1 exactly on the sampled tokens, rm_scores = env reward."""
    from hydra import compose, initialize_config_dir

    import verl.trainer.main_ppo as main_ppo
    from verl import DataProto
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

    import rtpo.verl_ext.plugin  # noqa: F401
    from rtpo.verl_ext.data import write_parquet
    from rtpo.verl_ext.cpu_harness.hf_rollout import HFGenerateServer

    eng = tiny.engine(seed=0)
    model = tmp_path / "model"
    eng.model.save_pretrained(model)
    eng.tokenizer.save_pretrained(model)
    pq = write_parquet(TOY[:2], tmp_path / "toy.parquet", {"max_turns": 2}, "rtpo.verl_ext.cpu_harness.toy:env_factory")
    with initialize_config_dir(config_dir=str(Path(main_ppo.__file__).parent / "config"), version_base=None):
        cfg = compose("ppo_trainer", overrides=[
            f"actor_rollout_ref.model.path={model}", f"data.train_files={pq}", f"data.val_files={pq}",
            "data.max_prompt_length=128", "data.max_response_length=96", "actor_rollout_ref.rollout.name=hf",
            "actor_rollout_ref.rollout.agent.default_agent_loop=rtpo_agent",
            "+rtpo.env_factory=rtpo.verl_ext.cpu_harness.toy:env_factory", "+rtpo.env.max_turns=2",
            "+rtpo.max_new_tokens=8", "+rtpo.psi=full"])
    worker = AgentLoopWorker(cfg, llm_client=HFGenerateServer(engine=eng))
    ds = RLHFDataset([str(pq)], worker.tokenizer, cfg.data)
    batch = DataProto.from_single_dict(collate_fn([ds[0], ds[1]]))
    out = run(worker.generate_sequences(batch))
    b = out.batch
    assert b["responses"].shape == (2, 96) and b["prompts"].shape == (2, 128)
    for i in range(2):
        mask, resp = b["response_mask"][i], b["responses"][i]
        n_resp = int(b["attention_mask"][i, 128:].sum())
        assert 2 <= int(mask.sum()) <= 2 * 8 and int(mask.sum()) < n_resp  # actions only, not the tool text
        assert (b["rollout_log_probs"][i][mask == 0] == 0).all()
        assert b["rm_scores"][i].sum() in (0.0, 1.0) and b["rm_scores"][i, n_resp - 1] == b["rm_scores"][i].sum()
        assert out.non_tensor_batch["rtpo"][i]["turns"] == 2


# ------------------------------------------------------------------ overrides and the CPU platform
def _compose(overrides):
    from hydra import compose, initialize_config_dir

    import verl.trainer.main_ppo as main_ppo

    with initialize_config_dir(config_dir=str(Path(main_ppo.__file__).parent / "config"), version_base=None):
        return compose("ppo_trainer", overrides=overrides)


@pytest.mark.parametrize("method", ["rtpo", "grpo"])
def test_paper_config_overrides_compose_with_verl(method, tmp_path):
    from rtpo.config import load_config
    from rtpo.verl_ext.launch import verl_overrides

    cfg = load_config(ROOT / "config" / "paper.yaml")
    ov = verl_overrides(cfg, method, "math", 1, tmp_path, tmp_path / "model", tmp_path / "t.parquet",
                        tmp_path / "v.parquet", cpu=False)
    c = _compose(ov)  # every key exists in verl 0.9.1's config (Hydra rejects unknown ones)
    a, r = c.actor_rollout_ref.actor, c.actor_rollout_ref.rollout
    assert a.optim.lr == 1e-6 and a.optim.weight_decay == 0.01 and a.kl_loss_coef == 0.02 and a.use_kl_loss
    assert a.kl_loss_type == "low_var_kl" and a.clip_ratio_c == 3.0 and a.loss_agg_mode == "token-mean"
    assert c.data.train_batch_size == 64 and c.data.max_prompt_length == 8192
    assert c.trainer.n_gpus_per_node == 8 and r.name == "vllm" and r.tensor_model_parallel_size == 2
    assert r.gpu_memory_utilization == 0.6 and r.agent.default_agent_loop == "rtpo_agent"
    assert c.rtpo.psi == "qwen3" and c.rtpo.env.max_turns == 3 and c.rtpo.max_new_tokens == 4096
    if method == "rtpo":  # the local RTPO on VerlEngine; c_k bounded by the prompt slot (E.3: 8192)
        assert c.trainer.v1.trainer_mode == "rtpo_engine_sync"
        assert r.n == 1 and c.rtpo.method_cfg.trunks == 4 and c.rtpo.method_cfg.group_size == 3
        assert c.data.max_response_length == 4096 and not c.rtpo.method_cfg.adv_norm_std
        assert c.rtpo.rollout_max_context == 8192
    else:
        assert c.trainer.v1.trainer_mode == "rtpo_chain_sync" and c.algorithm.adv_estimator == "grpo"
        assert r.n == 16 and c.data.max_response_length == 3 * 4096 + 2 * 512
    fp32 = {**cfg, "verl": {**cfg["verl"], "dtype": "float32"}}  # the HF rollout samples in fp32
    cpu = _compose(verl_overrides(fp32, method, "math", 1, tmp_path, tmp_path / "model", tmp_path / "t.parquet",
                                  tmp_path / "v.parquet", cpu=True))
    assert cpu.actor_rollout_ref.rollout.name == "hf" and cpu.trainer.device == "cpu"
    with pytest.raises(ValueError, match="vanilla trains nothing"):
        verl_overrides(cfg, "vanilla", "math", 1, tmp_path, tmp_path, tmp_path, tmp_path, cpu=False)


def test_paper_sync_ablation_overrides_select_the_keep_rollout(tmp_path):
    """The G.6 ablation of config/paper.yaml (ablations.sync on search, engine verl): every mode runs the
    local RTPO on VerlEngine (rtpo_engine_sync); per_stage on vLLM, interval:N and kl:tau on the rollout
    whose servers keep their weights across sleep (vllm_keep; hf_keep on the CPU harness), and the
    plugin registers that rollout with verl (verl's own vLLM adapter, no vLLM import)."""
    import rtpo.verl_ext.plugin  # noqa: F401  (registers vllm_keep)
    from omegaconf import OmegaConf
    from verl.workers.rollout import base as rollout_base
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    from rtpo.config import load_config
    from rtpo.verl_ext import rollout_keeps_weights
    from rtpo.verl_ext.launch import verl_overrides

    cfg = load_config(ROOT / "config" / "paper.yaml")
    values = cfg["ablations"]["sync"]["values"]
    assert cfg["ablations"]["sync"]["task"] == "search" and {"interval:2", "kl:0.01"} < set(values)
    for sync in values:
        c0 = copy.deepcopy(cfg)
        c0["method"]["rtpo"]["sync"] = sync  # what the ablation rule's --set does
        ov = verl_overrides(c0, "rtpo", "search", 0, tmp_path, tmp_path / "model", tmp_path / "t.parquet",
                            tmp_path / "v.parquet", cpu=False)
        c = _compose(ov)
        r = c.actor_rollout_ref.rollout
        if sync == "per_stage":
            assert c.trainer.v1.trainer_mode == "rtpo_engine_sync" and r.name == "vllm"
            continue
        assert c.trainer.v1.trainer_mode == "rtpo_engine_sync" and r.name == "vllm_keep" and r.n == 1
        assert rollout_keeps_weights(r.name) and c.rtpo.method == "rtpo" and c.rtpo.method_cfg.sync == sync
        want = method_settings(c0, "rtpo", "search")["method"]   # per-task overrides applied (search: 2 trunks)
        assert OmegaConf.to_container(c.rtpo.method_cfg) == want
        fp32 = {**c0, "verl": {**c0["verl"], "dtype": "float32"}}  # the HF rollout samples in fp32
        cpu = _compose(verl_overrides(fp32, "rtpo", "search", 0, tmp_path, tmp_path / "model", tmp_path / "t.parquet",
                                      tmp_path / "v.parquet", cpu=True))
        assert cpu.actor_rollout_ref.rollout.name == "hf_keep" and cpu.trainer.v1.trainer_mode == "rtpo_engine_sync"
        c0["verl"]["rollout"] = "sglang"  # no keep-weights variant
        with pytest.raises(ValueError, match="keep their weights"):
            verl_overrides(c0, "rtpo", "search", 0, tmp_path, tmp_path, tmp_path, tmp_path, cpu=False)
    c0["method"]["rtpo"]["sync"] = "interval:0"
    with pytest.raises(ValueError, match="unknown rtpo.sync mode"):
        verl_overrides(c0, "rtpo", "search", 0, tmp_path, tmp_path, tmp_path, tmp_path, cpu=False)
    assert rollout_base._ROLLOUT_REGISTRY[("vllm_keep", "async")] == rollout_base._ROLLOUT_REGISTRY[("vllm", "async")]
    assert "vllm_keep" in RolloutReplicaRegistry._registry and not rollout_keeps_weights("vllm")


@pytest.mark.parametrize("method", ["tree_grpo", "arpo", "seeupo", "rtpo_off_policy"])
def test_engine_methods_overrides_compose_with_verl(method, tmp_path):
    """The methods that run on VerlEngine get trainer mode rtpo_engine_sync, rollout.n = 1, their whole
    config section as rtpo.method_cfg, and response_length of a whole episode (flat / full-history rows)."""
    from omegaconf import OmegaConf

    from rtpo.config import load_config
    from rtpo.verl_ext.launch import verl_overrides

    cfg = load_config(ROOT / "config" / "paper.yaml")
    if method == "rtpo_off_policy":
        method = "rtpo"
        cfg["method"]["rtpo"]["continuation"] = "off_policy"
    c = _compose(verl_overrides(cfg, method, "math", 1, tmp_path, tmp_path / "model", tmp_path / "t.parquet",
                                tmp_path / "v.parquet", cpu=False))
    assert c.trainer.v1.trainer_mode == "rtpo_engine_sync" and c.actor_rollout_ref.rollout.n == 1
    assert c.rtpo.method == method
    want = method_settings(cfg, method, "math")["method"]
    assert OmegaConf.to_container(c.rtpo.method_cfg) == want
    R = 4096 if method == "rtpo" else 3 * 4096 + 2 * 512
    assert c.data.max_response_length == R


def test_gpu_smoke_overrides_compose_with_verl(tmp_path):
    """scripts/gpu_smoke.sh cannot run here (no GPU): at least its Hydra overrides are valid for verl."""
    sys.path.append(str(Path(__file__).resolve().parent.parent / "scripts"))  # scripts/gpu_smoke.py, a program
    from gpu_smoke import smoke_config
    from rtpo.verl_ext.launch import verl_overrides

    ov = verl_overrides(smoke_config(2, 8, 1), "rtpo", "toy", 0, tmp_path, tmp_path / "model", tmp_path / "t.parquet",
                        tmp_path / "v.parquet", cpu=False)
    c = _compose(ov)
    r = c.actor_rollout_ref.rollout
    assert r.name == "vllm" and r.enforce_eager and r.n == 1 and c.trainer.n_gpus_per_node == 1
    assert c.actor_rollout_ref.model.override_config.attn_implementation == "sdpa"
    assert c.rtpo.env.reward == "parity" and c.trainer.v1.trainer_mode == "rtpo_engine_sync"


def test_cpu_platform_and_gloo_backend():
    from rtpo.verl_ext.cpu_harness.cpu_platform import PlatformCPU

    p = PlatformCPU()
    assert (p.device_name, p.communication_backend_name(), p.current_device(), p.ray_resource_name()) == \
        ("cpu", "gloo", "cpu", "GPU")
    m = p.device_module
    assert m.max_memory_allocated() == 0 and m.is_available() and m.device_count() == 1
    with m.stream(m.current_stream()):
        pass
    st = m.get_rng_state()
    a = torch.rand(1)
    m.set_rng_state(st)
    assert torch.equal(a, torch.rand(1))
    env = os.environ.copy()
    env.update(VERL_PLATFORM="cpu", VERL_USE_EXTERNAL_MODULES="rtpo.verl_ext.cpu,rtpo.verl_ext.plugin",
               PYTHONPATH=str(ROOT))
    code = ("import verl, torch.distributed as d, verl.utils.distributed as u, os;"
            "os.environ.update(RANK='0', WORLD_SIZE='1', MASTER_ADDR='127.0.0.1', MASTER_PORT='29533');"
            "from verl.utils.device import get_device_name, get_nccl_backend;"
            "u.initialize_global_process_group_ray();"
            "print(get_device_name(), get_nccl_backend(), d.get_backend())")
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.split()[-3:] == ["cpu", "gloo", "gloo"]


# ------------------------------------------------------------------ end to end through verl's trainer
def _cfg(tmp: Path, steps: int, method: str) -> dict:
    from rtpo.config import load_config

    cfg = load_config(ROOT / "config" / "smoke.yaml", validate=False)
    cfg["engine"] = "verl"
    cfg["env"]["toy"] = {"max_turns": 2, "psi": "full", "max_new_tokens": 10, "max_prompt_tokens": 192,
                         "reward": "parity"}
    cfg["train"].update(steps=steps, prompts_per_step=2, lr=1e-3, checkpoint_every=1, micro_batch_tokens=4096)
    cfg["method"]["rtpo"] = {"trunks": 2, "group_size": 3, "sync": "per_stage", "continuation": "on_policy",
                             "adv_norm_std": False, "leave_one_out": False}
    cfg["method"]["grpo"] = {"chains": 2}
    # the methods on VerlEngine: enough rollouts per prompt for the parity rewards to differ
    cfg["method"]["tree_grpo"] = {"trees": 2, "expansions": 1, "rounds": 1, "entropy_coef": 0.001}
    cfg["method"]["arpo"] = {"initial": 2, "total": 4, "tau": 0.5, "beta": 0.2, "entropy_tokens": 5}
    cfg["method"]["seeupo"] = {"chains": 4, "adv_clamp": 3.0, "ratio_clip": [0.8, 1.2]}
    # the harness at its test size: one rank, one agent worker, fp32 (rollout and training agree to ~1e-6:
    # the ratio-1 checks); the rehearsal runs the paper's bf16 and layout (tests/test_verl_parity.py)
    cfg["verl"] = {"device": "cpu", "env_factory": "rtpo.verl_ext.cpu_harness.toy:env_factory", "agent_workers": 1,
                   "obs_tokens": 32, "dtype": "float32", "n_gpus_per_node": 1,
                   # one TransferQueue storage unit, no dataloader workers: ~12 CPU-s less a launch
                   "overrides": ["transfer_queue.backend.SimpleStorage.num_data_storage_units=1",
                                 "data.dataloader_num_workers=0"]}
    return cfg


@pytest.fixture
def verl_run_light(tmp_path):
    """(model directory, toy task file) for runs that start no verl trainer."""
    eng = tiny.engine(seed=0, max_position=512)
    eng.model.save_pretrained(tmp_path / "model")
    eng.tokenizer.save_pretrained(tmp_path / "model")
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(t.to_dict()) + "\n" for t in TOY))
    return tmp_path / "model", tmp_path / "train.jsonl"


@pytest.fixture(scope="module")
def verl_run(tmp_path_factory):
    """A Ray cluster for the module (started once, as main_ppo would: 32 logical CPUs, 1 logical GPU,
    the harness environment), a tiny model directory and the toy task file."""
    from rtpo.verl_ext.launch import verl_env

    tmp = tmp_path_factory.mktemp("verl")
    eng = tiny.engine(seed=0, max_position=512)
    eng.model.save_pretrained(tmp / "model")
    eng.tokenizer.save_pretrained(tmp / "model")
    (tmp / "data").mkdir()
    (tmp / "data" / "train.jsonl").write_text("".join(json.dumps(t.to_dict()) + "\n" for t in TOY))
    ray_tmp = Path(f"/tmp/rtpo-ray-{os.getpid()}")
    env = verl_env(cpu=True)
    env["RAY_AUTH_MODE"] = "disabled"  # a throwaway local cluster; the drivers below connect without a token
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    address = f"127.0.0.1:{port}"
    log = open(tmp / "ray_head.log", "w")
    head = subprocess.Popen([str(Path(sys.executable).with_name("ray")), "start", "--head", "--block",
                             "--node-ip-address=127.0.0.1", f"--port={port}", "--num-cpus=32", "--num-gpus=1",
                             "--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={ray_tmp}"],
                            env=env, stdout=log, stderr=subprocess.STDOUT)
    t0 = time.time()
    while "Ray runtime started" not in (tmp / "ray_head.log").read_text():
        if head.poll() is not None or time.time() - t0 > 180:
            head.kill()
            pytest.fail("could not start a Ray head for the verl tests:\n" + (tmp / "ray_head.log").read_text()[-2000:])
        time.sleep(0.5)
    old = {k: os.environ.get(k) for k in ("RAY_ADDRESS", "RAY_AUTH_MODE")}
    os.environ.update(RAY_ADDRESS=address, RAY_AUTH_MODE="disabled")
    try:
        yield types.SimpleNamespace(tmp=tmp, model=tmp / "model", train=tmp / "data" / "train.jsonl")
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        head.terminate()  # `ray start --block` stops the processes it started
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            head.kill()
        log.close()
        shutil.rmtree(ray_tmp, ignore_errors=True)


def _train(run_, method: str, steps: int, out: Path) -> int:
    from rtpo.verl_ext.launch import train_verl

    args = types.SimpleNamespace(method=method, task="toy", seed=0, out=str(out), model=str(run_.model),
                                 train_file=str(run_.train))
    return train_verl(args, _cfg(run_.tmp, steps, method))


def _check_rtpo_run(out: Path) -> None:
    """RTPO's two uninterrupted steps on verl (the engine trainer): the reverse sweep, on-policy siblings,
    the rollout and sync counts, a checksummed final/."""
    recs = _records(out)
    assert [r["step"] for r in recs] == [0, 1] and all(r["engine"] == "verl" for r in recs)
    for r in recs:
        assert [t["k"] for t in r["turns"]] == [1, 0]  # the reverse sweep: K-1 first
        for t in r["turns"]:
            assert t["ratio_mean"] == pytest.approx(1.0, abs=2e-3)  # on-policy siblings: ratio 1
            assert 0 <= t["kl_rollout_train"] < 1e-3
            assert t["groups"] == 4 and t["trained_tokens"] > 0
        assert r["tokens"]["sibling"] > 0 and r["tokens"]["continuation"] > 0 and r["tokens"]["trunk"] > 0
        assert r["rollouts_per_prompt"] == 2 * (1 + 2 * 2 + 1)  # trunks + (stage 1: 2 sibs) + (stage 0: 2 sibs + 1 cont)
        assert r["syncs"] == 3  # the local count: before the trunks and before each of the K = 2 stages
    _assert_trained(recs)
    assert (out / "final" / "config.json").exists() and (out / "summary.json").exists()
    assert json.loads((out / "summary.json").read_text())["steps"] == 2
    from rtpo.inputs import verify_manifest

    assert verify_manifest(out / "final", required=True)  # checksummed, as the local engine's final/


def _check_grpo_run(out: Path) -> None:
    """GRPO's two uninterrupted steps on verl's chain trainer: chains, psi = full's ratio 1, the
    checkpoint, and verl's tracker carrying the names every method and the local engine use."""
    recs = _records(out)
    assert [r["step"] for r in recs] == [0, 1]
    for r in recs:
        assert r["trunks"]["n"] == 4 and r["trunks"]["turns_mean"] == 2.0  # 2 prompts x 2 chains, K = 2
        # psi = full: the flattened recomputation scores the sampled tokens under their own context
        assert r["ratio_mean"] == pytest.approx(1.0, abs=2e-3) and r["tokens"]["chain"] > 0
        assert r["tool_calls"] == 0 and r["rollouts_per_prompt"] == 2.0
        assert 0 <= r["zero_adv_frac"] <= 1  # one GRPO advantage per chain
    assert (out / "checkpoint" / "global_step_2").is_dir() and (out / "final" / "config.json").exists()
    # verl's tracker (trainer.logger from logging.backends, default console + tensorboard; TENSORBOARD_DIR =
    # the run directory) got GRPO's ratio and KL under the names the other methods and the local engine use
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(out), size_guidance={"scalars": 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"consistency/ratio_mean", "consistency/kl_rollout_train", "reward/reward_mean", "actor/pg_loss"} <= tags, \
        sorted(tags)
    for name in ("ratio_mean", "kl_rollout_train"):
        ev = acc.Scalars(f"consistency/{name}")
        assert [e.step for e in ev] == [1, 2]  # verl's global steps
        assert [e.value for e in ev] == pytest.approx([r[name] for r in recs], rel=1e-5, abs=1e-7)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["rtpo", "grpo"])
def test_verl_run_stopped_at_its_deadline_resumes_where_it_stopped(verl_run, method, monkeypatch):
    """A job whose slot ends (RTPO_JOB_DEADLINE, as squeue would tell it) saves at the next step
    boundary although checkpoint_every is 10, exits 143, and its retry (the same command) resumes from
    that checkpoint: the step before the stop is kept as written, the retry trains only the rest, and
    the run has the uninterrupted run's steps, weight versions and syncs. rtpo runs on the engine trainer
    (rtpo_engine_sync), grpo on verl's chain trainer (rtpo_chain_sync). Equal metrics and weights are
    not asserted: two uninterrupted runs of this CPU harness already differ (the HF server's samples
    are not reproducible run to run under load; the local engine's stop and resume is exact,
    tests/test_faults.py). The uninterrupted run is also each trainer's two-step check (_check_rtpo_run,
    _check_grpo_run); extending a finished run by more steps is tests/test_verl.py's SeeUPO test."""
    from rtpo.signals import Stopped
    from rtpo.verl_ext.launch import train_verl

    def run(out: Path) -> int:
        cfg = _cfg(verl_run.tmp, 2, method)
        cfg["train"]["checkpoint_every"] = 10  # no periodic save before the last step
        args = types.SimpleNamespace(method=method, task="toy", seed=0, out=str(out), model=str(verl_run.model),
                                     train_file=str(verl_run.train))
        return train_verl(args, cfg)

    ref, out = verl_run.tmp / f"{method}-whole", verl_run.tmp / f"{method}-stopped"
    assert run(ref) == 0
    {"rtpo": _check_rtpo_run, "grpo": _check_grpo_run}[method](ref)  # the uninterrupted run's content
    monkeypatch.setenv("RTPO_JOB_DEADLINE", str(time.time() + 60))  # passed once step 1 ends (margin 300 s)
    with pytest.raises(Stopped, match=r"stopped after step 1 of 2 \(the job's slot ends in") as e:
        run(out)
    assert e.value.exit_code == 143
    assert sorted(p.name for p in (out / "checkpoint").glob("global_step_*")) == ["global_step_1"]
    assert (out / "checkpoint" / "latest_checkpointed_iteration.txt").read_text().strip() == "1"
    assert not (out / "final").exists() and not (out / "summary.json").exists()
    first = (out / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in first] == [0]
    # what the job measured, kept next to its checkpoints for the retry (rtpo.signals.Timings)
    timings = json.loads((out / "checkpoint" / "rtpo_timings.json").read_text())
    assert [e["step"] for e in timings["save"]] == [1] and timings["save"][0]["s"] > 0
    assert [e["step"] for e in timings["step"]] == [1] and timings["startup"][0]["s"] > 0
    assert timings["memory"]["ranks"] and "kind" in timings["memory"]["ranks"][0]
    monkeypatch.delenv("RTPO_JOB_DEADLINE")
    assert run(out) == 0  # the retry
    log = (out / "verl.log").read_text()
    assert "Resuming from" in log and "global_step_1, setting global step to 1" in log
    # the retry starts knowing the save it will have to write (not 0, as each job did before)
    assert f"longest checkpoint save {timings['save'][0]['s']:.1f} s" in log
    assert [e["step"] for e in json.loads((out / "checkpoint" / "rtpo_timings.json").read_text())["load"]] == [1]
    got, want = _records(out), _records(ref)
    assert (out / "metrics.jsonl").read_text().splitlines()[0] == first[0]  # step 0 as written before the stop
    keys = ("step", "weight_version", "train_version", "syncs", "rollouts_per_prompt")
    assert [{k: r.get(k) for k in keys} for r in got] == [{k: r.get(k) for k in keys} for r in want]
    assert json.loads((out / "summary.json").read_text())["steps"] == 2 and (out / "final" / "config.json").exists()
    assert sorted(p.name for p in (out / "checkpoint").glob("global_step_*")) == ["global_step_2"]


def _records(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]


def _assert_trained(recs: list[dict]) -> None:
    """The actor moved wherever the rewards gave it a signal. The first step samples the tiny random
    model, whose parity rewards spread: some advantage is non-zero and the gradient too. A later step
    may find every group uniform (all rewards 1 after an update; CI met it with SeeUPO), and then its
    advantages are rightly all zero, so only "a non-zero advantage means a gradient" is required."""
    assert recs[0]["zero_adv_frac"] < 1 and recs[0]["grad_norm"] > 0
    for r in recs:
        if r["zero_adv_frac"] < 1:
            assert r["grad_norm"] > 0, r


def _loads(final: Path) -> None:
    from rtpo.engine.local import LocalEngine

    eng = LocalEngine.from_pretrained(final, reference=False)
    assert eng.model.config.vocab_size == len(tiny.tokenizer())


@pytest.mark.slow
def test_tree_grpo_two_steps_on_verl(verl_run):
    """Tree-GRPO, the local method on VerlEngine ("rtpo_engine_sync"): one update per step on flat rows."""
    out = verl_run.tmp / "tree_grpo"
    assert _train(verl_run, "tree_grpo", 2, out) == 0
    recs = _records(out)
    assert [r["step"] for r in recs] == [0, 1] and all(r["engine"] == "verl" for r in recs)
    for i, r in enumerate(recs):
        assert r["trained_tokens"] > 0 and r["tokens"]["chain"] > 0 and r["tokens"]["tree"] > 0
        # psi = full and synced weights: every trained token is scored under its sampling context
        assert r["ratio_mean"] == pytest.approx(1.0, abs=2e-3) and 0 <= r["kl_rollout_train"] < 1e-3
        assert r["rollouts_per_prompt"] == 4.0  # M (1 + L N) = 2 * (1 + 1 * 1) leaves per prompt
        assert r["syncs"] == 1 and r["weight_version"] == i + 1 and r["train_version"] == i + 1
    _assert_trained(recs)
    assert (out / "checkpoint" / "global_step_2" / "state.json").exists()
    _loads(out / "final")
    # the entropy patch, checked inside the actor worker's own process at the trainer's set-up
    log = (out / "verl.log").read_text()
    assert re.search(r"rtpo: entropy patch in force in actor worker pid \d+ \(VERL_USE_EXTERNAL_MODULES=\S*"
                     r"rtpo\.verl_ext\.plugin", log), log[-3000:]


@pytest.mark.slow
def test_arpo_one_step_on_verl(verl_run):
    """ARPO on VerlEngine: the branching entropies come from the actor's forward after sampling."""
    out = verl_run.tmp / "arpo"
    assert _train(verl_run, "arpo", 1, out) == 0
    (r,) = _records(out)
    assert r["step"] == 0 and r["trained_tokens"] > 0 and r["syncs"] == 1 and r["train_version"] == 1
    assert r["ratio_mean"] == pytest.approx(1.0, abs=2e-3) and 0 <= r["kl_rollout_train"] < 1e-3
    assert r["rollouts_per_prompt"] == 4.0  # every prompt ends with exactly `total` trajectories
    assert r["zero_adv_frac"] < 1 and r["grad_norm"] > 0
    _loads(out / "final")


@pytest.mark.slow
def test_seeupo_on_verl_with_resume(verl_run):
    """SeeUPO on VerlEngine (one update per turn, reverse order), then a resumed second step: the
    engine's counters and the method state come back from the engine trainer's checkpoint."""
    out = verl_run.tmp / "seeupo"
    assert _train(verl_run, "seeupo", 1, out) == 0
    st = json.loads((out / "checkpoint" / "global_step_1" / "state.json").read_text())
    assert st == {"step": 0, "method": {}}
    assert _train(verl_run, "seeupo", 2, out) == 0
    assert "Resuming from" in (out / "verl.log").read_text()
    recs = _records(out)
    assert [r["step"] for r in recs] == [0, 1]
    for i, r in enumerate(recs):
        assert [t["k"] for t in r["turns"]] == [1, 0] and all(t["trained_tokens"] > 0 for t in r["turns"])
        # the first update of a step scores the full-history rows (= c_k under psi = full) before any change
        assert r["turns"][0]["ratio_mean"] == pytest.approx(1.0, abs=2e-3)
        # the counters continue across the resume (engine.json): one sync and K = 2 updates per step
        assert r["syncs"] == 1 and r["weight_version"] == i + 1 and r["train_version"] == 2 * (i + 1)
    _assert_trained(recs)
    _loads(out / "final")
    assert json.loads((out / "summary.json").read_text())["steps"] == 2


@pytest.mark.slow
def test_rtpo_interval_sync_on_verl_samples_stale_weights(verl_run):
    """RTPO with ``sync: interval:2`` (paper G.6) on verl: the local RTPO on VerlEngine
    (rtpo_engine_sync) with the CPU harness's keep-weights servers ("hf_keep"). K = 3 stages in one
    step: syncs before the step's trunks and before stage k=1 (the local engine's count, checked by
    running the local RTPO step), none before k=2 and k=0, whose siblings come from weights one update
    behind the actor: stage 0 measures that lag (ratio != 1), the synced stages do not."""
    from rtpo.engine.local import LocalEngine
    from rtpo.methods.rtpo import RTPO
    from rtpo.verl_ext.launch import train_verl
    from rtpo.verl_ext.cpu_harness.toy import env_factory

    cfg = _cfg(verl_run.tmp, 1, "rtpo")
    cfg["env"]["toy"]["max_turns"] = 3
    cfg["method"]["rtpo"]["sync"] = "interval:2"
    out = verl_run.tmp / "rtpo_interval"
    args = types.SimpleNamespace(method="rtpo", task="toy", seed=0, out=str(out), model=str(verl_run.model),
                                 train_file=str(verl_run.train))
    assert train_verl(args, copy.deepcopy(cfg)) == 0
    cmd = json.loads((out / "verl_command.json").read_text())["cmd"]
    assert "trainer.v1.trainer_mode=rtpo_engine_sync" in cmd and "actor_rollout_ref.rollout.name=hf_keep" in cmd
    (r,) = _records(out)

    # the local engine's semantics: the same method step on a LocalEngine
    eng = LocalEngine.from_pretrained(verl_run.model, seed=0, reference=False)
    env = cfg["env"]["toy"]
    roller = Roller(eng, env_factory(env), "full", SamplingParams(max_new_tokens=env["max_new_tokens"]))
    local = RTPO(eng, roller, cfg["method"]["rtpo"], UpdateConfig(lr=1e-3, micro_batch_tokens=4096), 1.0)
    want = local.step(TOY[:2], 0)

    assert r["syncs"] == want["syncs"] == 2 and r["weight_version"] == 2
    assert [t["k"] for t in r["turns"]] == [t["k"] for t in want["turns"]] == [2, 1, 0]
    assert r["trained_tokens"] > 0 and all(t["trained_tokens"] > 0 for t in r["turns"])
    assert r["rollouts_per_prompt"] == want["rollouts_per_prompt"] and r["grad_norm"] > 0
    ratio = {t["k"]: t["ratio_mean"] for t in r["turns"]}
    kl = {t["k"]: t["kl_rollout_train"] for t in r["turns"]}
    assert ratio[2] == pytest.approx(1.0, abs=2e-3) and ratio[1] == pytest.approx(1.0, abs=2e-3)  # synced
    assert kl[0] > 10 * max(kl[2], kl[1], 1e-7)  # stage 0's siblings: stale weights, measured honestly
    assert json.loads((out / "checkpoint" / "global_step_1" / "state.json").read_text())["method"] == \
        {"stage_counter": 4}


def test_vanilla_on_verl_writes_the_local_files(verl_run_light, tmp_path):
    """vanilla (train.steps 0) on verl runs no trainer: final/ (the base model) and summary.json, the
    files of the local engine's vanilla run, with the same weights."""
    from rtpo.engine.local import LocalEngine
    from rtpo.train import train
    from rtpo.verl_ext.launch import train_verl

    model, data = verl_run_light
    cfg = _cfg(tmp_path, 0, "vanilla")
    local, verl = tmp_path / "local", tmp_path / "verl"
    train("vanilla", "toy", copy.deepcopy(cfg), 0, local, model, data, progress=False)
    args = types.SimpleNamespace(method="vanilla", task="toy", seed=0, out=str(verl), model=str(model),
                                 train_file=str(data))
    assert train_verl(args, cfg) == 0
    assert sorted(p.name for p in local.iterdir()) == ["final", "run.json", "summary.json"]
    # on verl, run.json is written by `rtpo train` around train_verl (rtpo.verl_ext.train), not by train_verl
    assert sorted(p.name for p in verl.iterdir()) == ["final", "summary.json"]
    a, b = (json.loads((d / "summary.json").read_text()) for d in (local, verl))
    assert b.pop("engine") == "verl"
    a.pop("wall_s_this_run"), b.pop("wall_s_this_run")
    assert a == b and a["steps"] == 0
    wa, wb = (LocalEngine.from_pretrained(d / "final", reference=False).model.state_dict() for d in (local, verl))
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    from rtpo.inputs import verify_manifest

    assert verify_manifest(local / "final", required=True) and verify_manifest(verl / "final", required=True)
    cfg["method"]["vanilla"]["steps"] = 1  # a vanilla run that would log rollouts: not on verl
    with pytest.raises(ValueError, match="vanilla trains nothing"):
        train_verl(args, cfg)


# ------------------------------------------------------------------ the CLI and the Slurm launcher
def test_rtpo_train_engine_verl_dispatches_to_main_ppo(tmp_path, monkeypatch):
    """`rtpo train --engine verl` writes the parquet data, runs verl's main_ppo with the plugin modules
    (faked here: it writes what a real run writes), then final/ and summary.json; under Slurm the
    command goes through slurm_ray.sh."""
    import rtpo.verl_ext.launch as launch
    from rtpo.cli import main

    data = tmp_path / "data" / "math"
    data.mkdir(parents=True)
    from rtpo.data import generate_tasks

    (data / "train.jsonl").write_text("".join(json.dumps(t.to_dict()) + "\n" for t in generate_tasks("math", 4, 0, "train")))
    seen = {}

    def fake_call(cmd, env, stdout, stderr, cwd):
        seen.update(cmd=cmd, env=env)
        out = Path(cwd)
        hf = out / "checkpoint" / "global_step_2" / "actor" / "huggingface"
        hf.mkdir(parents=True, exist_ok=True)
        (hf / "config.json").write_text("{}")
        # a whole FSDP save, as verl's checkpoint manager leaves it (one rank), saved with hf_model (its
        # Hugging Face weights are there, so final/ is their copy; the merge is tests/test_checkpoints.py's)
        for kind in ("model", "optim", "extra"):
            (hf.parent / f"{kind}_world_size_1_rank_0.pt").write_bytes(b"shard")
        (hf.parent / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": 1}))
        (hf / "model.safetensors").write_bytes(b"weights")
        (out / "checkpoint" / "latest_checkpointed_iteration.txt").write_text("2")
        (out / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "reward_mean": 0.5, "tokens": {"trunk": 3},
                                                               "time": {"total": 1.0}, "psi": "qwen3"}) + "\n"
                                                   for s in range(2)))
        return 0

    monkeypatch.setattr(launch, "run_until_stopped",
                        lambda cmd, env, log, cwd, stop_file: fake_call(cmd, env, log, log, cwd))
    out = tmp_path / "run"
    argv = ["train", "--engine", "verl", "--config", str(ROOT / "config" / "smoke.yaml"), "--method", "rtpo",
            "--task", "math", "--seed", "1", "--model", str(tmp_path / "model"), "--train-file",
            str(data / "train.jsonl"), "--out", str(out), "--set", "train.lr=0.0005"]
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    for k in launch.SNAKEMAKE_THREAD_VARS:  # as in a Snakemake job of threads 2 (tests/test_job_threads.py)
        monkeypatch.setenv(k, "2")
    assert main(argv) == 0
    assert not set(launch.SNAKEMAKE_THREAD_VARS) & set(seen["env"])  # Ray's workers get their own counts
    cmd = seen["cmd"]
    assert cmd[1:3] == ["-m", "verl.trainer.main_ppo"]
    assert "actor_rollout_ref.actor.optim.lr=0.0005" in cmd and "trainer.v1.trainer_mode=rtpo_engine_sync" in cmd
    assert f"+rtpo.metrics_path={out / 'metrics.jsonl'}" in cmd and "+rtpo.psi=qwen3" in cmd
    assert seen["env"]["VERL_USE_EXTERNAL_MODULES"].split(",") == ["rtpo.verl_ext.cpu", "rtpo.verl_ext.plugin"]
    assert seen["env"]["VERL_PLATFORM"] == "cpu"  # no GPU here: the CPU harness
    import pandas as pd

    rows = pd.read_parquet(out / "verl_data" / "train.parquet")
    assert len(rows) == 4 and set(rows["agent_name"]) == {"rtpo_agent"}
    assert json.loads(rows["extra_info"][0]["task"])["kind"] == "math"
    assert (out / "final" / "config.json").exists()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["engine"] == "verl" and summary["steps"] == 2 and summary["reward_last"] == 0.5
    # inside a Slurm allocation, on GPUs: Ray through slurm_ray.sh
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    monkeypatch.setattr(launch, "use_cpu_harness", lambda cfg: False)
    assert main(argv) == 0
    assert seen["cmd"][:2] == ["bash", str(launch.SLURM_SCRIPT)] and seen["cmd"][3:5] == ["-m", "verl.trainer.main_ppo"]
    assert seen["env"]["VERL_USE_EXTERNAL_MODULES"] == "rtpo.verl_ext.plugin"
    assert seen["env"].get("VERL_PLATFORM") is None
    assert "actor_rollout_ref.rollout.name=vllm" in seen["cmd"]


@pytest.mark.slow
def test_slurm_ray_script_starts_a_cluster_and_runs_the_command(tmp_path):
    """slurm_ray.sh on a one-node 'allocation' (fake scontrol/srun, real Ray): the command sees the
    cluster's resources through RAY_ADDRESS, and every Ray process is gone afterwards."""
    import socket

    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "scontrol").write_text('#!/bin/sh\n[ "$1 $2" = "show hostnames" ] && echo "$3" | tr , "\\n" && exit 0\n'
                                   "exit 1\n")
    (bin_ / "srun").write_text('#!/bin/sh\nwhile [ $# -gt 0 ]; do case "$1" in -w|--nodes|--ntasks) shift 2;; '
                               '-*) shift;; *) break;; esac; done\nexec "$@"\n')
    for f in bin_.iterdir():
        f.chmod(0o755)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ray_tmp = f"/tmp/rtpo-sr-{os.getpid()}"
    env = dict(os.environ, PATH=f"{bin_}:{Path(sys.executable).parent}:{os.environ['PATH']}",
               SLURM_JOB_NODELIST="localhost", RTPO_GPUS_PER_NODE="1", RTPO_CPUS_PER_NODE="2",
               RTPO_RAY_PORT=str(port), RTPO_RAY_TMPDIR=ray_tmp, RAY_AUTH_MODE="disabled")
    env.pop("RAY_ADDRESS", None)
    code = "import ray; ray.init(); print('RESOURCES', ray.cluster_resources().get('GPU'), len(ray.nodes()))"
    res = subprocess.run(["bash", str(ROOT / "rtpo" / "verl_ext" / "slurm_ray.sh"), "python", "-c", code], env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "RESOURCES 1.0 1" in res.stdout
    left = subprocess.run(["pgrep", "-f", ray_tmp], capture_output=True, text=True).stdout.split()
    assert not left, f"Ray processes left behind: {left}"
    shutil.rmtree(ray_tmp, ignore_errors=True)
    bad = subprocess.run(["bash", str(ROOT / "rtpo" / "verl_ext" / "slurm_ray.sh"), "true"],
                         env={k: v for k, v in env.items() if k != "SLURM_JOB_NODELIST"}, capture_output=True, text=True)
    assert bad.returncode == 2 and "not inside a Slurm allocation" in bad.stderr
