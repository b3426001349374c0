"""RTPO on the real tiny model and real rollouts."""

from __future__ import annotations

import json
import random

import pytest
import torch

from rtpo.engine.base import SamplingParams, UpdateConfig
from rtpo.envs.base import Task
from rtpo.envs.toy_env import LastTurnEnv
from rtpo.methods.advantages import sibling_advantages
from rtpo.methods.rtpo import RTPO
from rtpo.report.read import flatten_step
from rtpo.rollout import Roller, Start
from tests.helpers import tiny

TASKS = [Task(id=f"t{i}", kind="toy", question="question", answers=["yes"]) for i in range(3)]


class Spy:
    """Wraps engine.update to record the rows of every stage (the engine still trains for real)."""

    def __init__(self, engine):
        self.calls = []
        self._update = engine.update
        engine.update = self

    def __call__(self, rows, cfg, temperature=1.0):
        stats = self._update(rows, cfg, temperature)
        self.calls.append((rows, stats))
        return stats


class ParityEnv(LastTurnEnv):
    """Reward = parity of the last turn's length: a random tiny model gets non-zero advantages."""

    def step(self, assistant_text):
        res = super().step(assistant_text)
        if res.done:
            res.reward = float(len(assistant_text) % 2)
        return res


def make(psi="full", K=3, **cfg):
    e = tiny.engine(seed=1)
    roller = Roller(e, lambda t: ParityEnv(K), psi, SamplingParams(max_new_tokens=6))
    return e, roller, RTPO(e, roller, {"trunks": 2, "group_size": 3, **cfg}, UpdateConfig(lr=1e-3))


@pytest.mark.parametrize("psi", ["full", "qwen3", "truncate:1", "summary"])
def test_per_stage_ratio_is_one_for_every_psi(psi):
    e, roller, m = make(psi)
    spy = Spy(e)
    rec = m.step(TASKS, 0)
    assert len(spy.calls) == 3  # K stages
    for _, stats in spy.calls:
        assert abs(stats.ratio_mean - 1.0) < 1e-5
        assert stats.kl_rollout_train < 1e-6
    assert [t["k"] for t in rec["turns"]] == [2, 1, 0]
    assert rec["syncs"] == 4  # before the trunks and before each of the K stages


def test_stage_k_trains_exactly_the_turn_k_sibling_actions():
    e, roller, m = make("qwen3")
    spy = Spy(e)
    seen = {}
    orig = m.branches

    def record(trunks, ks, log):
        out = orig(trunks, ks, log)
        seen.update(out)
        seen["trunks"] = trunks
        return out

    m.branches = record
    m.step(TASKS, 0)
    trunks = seen["trunks"]
    for (rows, _), k in zip(spy.calls, [2, 1, 0]):
        sibs = [traj for _, traj, is_sib in seen[k] if is_sib]
        assert len(rows) == len(sibs) == len(trunks) * (m.G - 1)
        for row, sib in zip(rows, sibs):
            turn = sib.turns[k]
            assert turn.kind == "sibling"
            assert row.prompt_ids == turn.context_ids and row.response_ids == turn.action_ids
            assert row.mask == [1] * len(turn.action_ids)
            # the continuation and the shared prefix are not in the row
            assert all(t.kind == "continuation" for t in sib.turns[k + 1:])
            assert sib.turns[:k] == [tt for tt in sib.turns[:k]]
        # every sibling context is bit-identical to the recorded c_k of its trunk
        for ti, traj, is_sib in seen[k]:
            if is_sib:
                assert traj.boundaries[k].context_ids == trunks[ti].boundaries[k].context_ids
                assert traj.turns[:k] == trunks[ti].turns[:k]


def test_masked_tokens_of_a_flattened_trajectory_get_zero_gradient():
    """Training the turn-k span of a full trajectory: only the turn-k tokens get gradient."""
    from rtpo.engine.base import Row

    e, roller, _ = make("full")
    traj = roller.run([Start(TASKS[0])])[0]
    p = traj.info["prompt_len"]
    resp = traj.full_ids[p:]
    k = 1
    s, t = traj.action_spans[k]
    mask = [1 if s <= p + i < t else 0 for i in range(len(resp))]
    old = [0.0] * len(resp)
    old[s - p:t - p] = traj.turns[k].logprobs
    g = e.token_gradients([Row(traj.full_ids[:p], resp, old, [1.0] * len(resp), mask)], UpdateConfig())[0]
    assert all((gi != 0.0) == bool(mi) for gi, mi in zip(g, mask))


def test_restored_boundary_reproduces_the_trunk():
    e, roller, _ = make("qwen3")
    trunk = roller.run([Start(TASKS[0], seed=3)])[0]
    for k in range(len(trunk.turns)):
        replay = roller.run([Start(TASKS[0], source=trunk, k=k, forced_action=trunk.turns[k])])[0]
        assert replay.turns[k].observations == trunk.turns[k].observations
        assert replay.boundaries[k].context_ids == trunk.boundaries[k].context_ids
        if k + 1 < len(trunk.turns):
            assert replay.boundaries[k + 1].context_ids == trunk.boundaries[k + 1].context_ids


def test_sibling_advantage_edge_cases():
    a = sibling_advantages(torch.tensor([1.0, 1.0, 1.0, 0.0]), ["g", "g", "g", "solo"])
    assert torch.equal(a, torch.zeros(4))
    a = sibling_advantages(torch.tensor([1.0, 1.0]), ["g", "g"], norm_by_std=True)
    assert torch.equal(a, torch.zeros(2)) and not torch.isnan(a).any()
    a = sibling_advantages(torch.tensor([1.0, 0.0, 0.0]), ["g"] * 3)
    assert torch.allclose(a, torch.tensor([2 / 3, -1 / 3, -1 / 3]))
    a = sibling_advantages(torch.tensor([1.0, 0.0, 0.0]), ["g"] * 3, leave_one_out=True)
    assert torch.allclose(a, torch.tensor([1.0, -0.5, -0.5]))


def test_sync_modes_and_off_policy():
    e, roller, m = make("full", sync="interval:2")
    rec = m.step(TASKS, 0)
    assert rec["syncs"] == 2  # stage counter 1 (trunks) and 3
    ratios = [t["ratio_mean"] for t in rec["turns"]]
    assert abs(ratios[0] - 1.0) < 1e-5          # k=2: synced right before the trunks... no update yet
    assert any(abs(r - 1.0) > 1e-6 for r in ratios[1:])  # a lagging stage measures the staleness honestly

    # kl:tau records what each decision measured, and the report reads that record (one value per stage
    # after the trunks: the trunk stage has no probe; its largest as sync_kl_max)
    e, roller, m = make("full", sync="kl:1e9")
    rec = m.step(TASKS, 0)
    assert rec["syncs"] == 0 and len(rec["sync_kl"]) == 3, rec["sync_kl"]
    assert rec["sync_kl"][0] == pytest.approx(0.0, abs=1e-9) and max(rec["sync_kl"][1:]) > 0  # stale after updates
    flat = flatten_step(json.loads(json.dumps(rec)))
    assert flat["sync_kl_max"] == max(rec["sync_kl"]) and "sync_kl" not in flat

    e, roller, m = make("full", continuation="off_policy", is_clamp=2.0)
    rec = m.step(TASKS, 0)
    assert rec["syncs"] == 1
    assert abs(rec["turns"][0]["ratio_mean"] - 1.0) < 1e-5
    assert abs(rec["turns"][-1]["ratio_mean"] - 1.0) > 1e-6  # theta_0 siblings trained after two updates
    weights = m._is_weights([(0, t, True) for t in roller.run([Start(TASKS[0])])], 0)
    assert all(0.0 < w <= 2.0 for w in weights)

    with pytest.raises(ValueError, match="sync mode"):
        make("full", sync="sometimes")
    with pytest.raises(ValueError, match="group_size"):
        make("full", group_size=1)


@pytest.mark.slow
def test_rtpo_raises_success_when_only_the_last_turn_decides():
    """Warm start to ~10-20 % 'yes' on the last turn, then 6 RTPO steps.

    Improvement seen over seeds 0..3 (this script, 2 cores): +0.25, +0.34, +0.39, +0.53; the
    asserted margin (+0.10) is well below the smallest.
    """
    from rtpo.sft import sft

    e = tiny.engine(seed=0)
    tok = e.tokenizer
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    rng = random.Random(0)
    msgs = [{"role": "system", "content": "Answer each turn."}, {"role": "user", "content": "question"}]
    rows = []
    for _ in range(200):
        c0 = tok.encode(tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False))
        a0 = rng.choice(["maybe", "continue"])
        m1 = msgs + [{"role": "assistant", "content": a0}, {"role": "tool", "content": "continue"}]
        c1 = tok.encode(tok.apply_chat_template(m1, add_generation_prompt=True, tokenize=False))
        a1 = "yes" if rng.random() < 0.3 else "no"
        for c, a in ((c0, tok.encode(a0) + [im_end]), (c1, tok.encode(a1) + [im_end])):
            rows.append((c + a, [-100] * len(c) + a))
    sft(e.model, tok, rows, 2, 3e-3, 32, False, seed=0)
    e.sync()
    roller = Roller(e, lambda t: LastTurnEnv(2), "full", SamplingParams(max_new_tokens=6))
    tasks = [Task(id=f"t{i}", kind="toy", question="question", answers=["yes"]) for i in range(8)]

    def success():
        trajs = roller.run([Start(t, seed=1000 + i) for i, t in enumerate(tasks * 8)])
        return sum(t.reward for t in trajs) / len(trajs)

    before = success()
    m = RTPO(e, roller, {"trunks": 2, "group_size": 3}, UpdateConfig(lr=2e-3))
    for s in range(6):
        m.step(tasks, s)
    after = success()
    assert after - before >= 0.10, (before, after)
