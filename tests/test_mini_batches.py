"""train.mini_batches: a step's rows cut by prompt group into K optimizer steps (verl's
ppo_mini_batch_size meaning), on the real tiny Qwen3; the config key that reaches the update."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from rtpo.engine.base import Row, SamplingParams, UpdateConfig
from rtpo.engine.local import prompt_group_splits
from tests.helpers import tiny
from tests.test_engine import contexts

# four prompt groups whose rows are interleaved, as a method may hand them over (two rows each)
GROUPS = ["a", "b", "a", "c", "b", "d", "c", "d"]


def grouped_rows(e, groups=GROUPS, seed0=0):
    ctx = contexts(e.tokenizer)
    prompts = [ctx["abcd".index(g)] for g in groups]
    comps = e.sample(prompts, SamplingParams(max_new_tokens=8), seeds=list(range(seed0, seed0 + len(groups))))
    return [Row(p, c.ids, c.logprobs, [(-1.0) ** i * 0.5 + 0.1] * len(c.ids), [1] * len(c.ids), group=g)
            for i, (p, c, g) in enumerate(zip(prompts, comps, groups))]


def weights(e):
    return torch.cat([p.detach().flatten().clone() for p in e.model.parameters()])


def test_split_keeps_a_prompts_rows_in_one_mini_batch():
    rows = [Row([1], [2], [0.0], [0.0], [1], group=g) for g in GROUPS]
    for k in (2, 3, 4):
        splits = prompt_group_splits(rows, k)
        assert len(splits) == k and sorted(i for s in splits for i in s) == list(range(len(rows)))
        owner = {}
        for mi, s in enumerate(splits):
            for i in s:
                assert owner.setdefault(rows[i].group, mi) == mi, (k, splits)   # a group never straddles
    # near-equal prompt counts, in order of first appearance (verl cuts its prompt-ordered batch)
    assert [sorted({rows[i].group for i in s}) for s in prompt_group_splits(rows, 2)] == [["a", "b"], ["c", "d"]]
    assert len(prompt_group_splits(rows, 9)) == 4          # more mini-batches than prompts: one per prompt
    assert prompt_group_splits(rows, 1) == [list(range(8))]   # one: the rows in their order
    ungrouped = [dataclasses.replace(r, group="") for r in rows]   # no group: every row is its own
    assert prompt_group_splits(ungrouped, 3) == [[0, 1, 2], [3, 4, 5], [6, 7]]


@pytest.mark.parametrize("k", [2, 4])
def test_k_mini_batches_take_k_optimizer_steps(k):
    e = tiny.engine(seed=2)
    rows = grouped_rows(e)
    calls = []
    step = e.optimizer.step
    e.optimizer.step = lambda *a, **kw: (calls.append(1), step(*a, **kw))[1]
    before = e.train_version
    e.update(rows, UpdateConfig(lr=1e-3, mini_batches=k))
    assert len(calls) == k and e.train_version - before == k
    assert all(int(s["step"]) == k for s in e.optimizer.state.values())   # AdamW's own count


def test_grouped_update_equals_k_sequential_updates_with_old_from_before_the_first():
    """PPO's old of every mini-batch is the weights' logprobs before the first step (recomputed once, as
    verl's compute_log_prob), so later mini-batches see ratio != 1: the same weights as K one-batch updates
    of the groups in order, each with old = those pre-update logprobs. A row-order split (the old
    np.array_split) gives other weights on these interleaved groups."""
    k = 2
    e = tiny.engine(seed=4)
    w0 = weights(e)
    rows = grouped_rows(e)
    before = e.logprobs([r.prompt_ids for r in rows], [r.response_ids for r in rows])
    ref_rows = [dataclasses.replace(r, old_logprobs=lp) for r, lp in zip(rows, before)]
    cfg = UpdateConfig(lr=3e-3, mini_batches=k)

    got = tiny.engine(seed=4)
    st = got.update(rows, cfg)

    def sequential(splits, old="rollout"):
        ref = tiny.engine(seed=4)
        ratios = []
        for s in splits:
            stats = ref.update([ref_rows[i] for i in s], dataclasses.replace(cfg, mini_batches=1, old=old))
            ratios.append(stats.ratio_mean)   # old = rollout: exp(logp_now - logp_before) of this mini-batch
        return weights(ref), ratios

    def off(w):   # the distance of the updates relative to the reference's: AdamW divides by sqrt(v) + eps,
        return float((weights(got) - w).norm() / (w - w0).norm())   # so float noise of ~1e-7 in near-zero
                                                                    # gradients moves a few weights by ~1e-4
    want, ratios = sequential(prompt_group_splits(rows, k))
    assert abs(ratios[0] - 1.0) < 1e-6 and abs(ratios[1] - 1.0) > 1e-4   # the later mini-batch is off-policy
    assert off(want) < 1e-3, off(want)                                # measured 5.8e-5
    assert off(sequential([[0, 1, 2, 3], [4, 5, 6, 7]])[0]) > 0.05     # by row: 0.81
    assert off(sequential(prompt_group_splits(rows, k), old="recompute")[0]) > 0.05   # old per mini-batch: 0.15
    assert abs(st.ratio_mean - 1.0) < 1e-5   # the mismatch is measured before any step, as with one batch


def test_one_mini_batch_is_the_unsplit_update_bit_for_bit():
    """mini_batches = 1 (the default) with grouped rows = the same rows without groups, bit for bit: the
    grouping never reorders rows of a single mini-batch."""
    out = []
    for keep_groups in (True, False):
        e = tiny.engine(seed=7)
        rows = grouped_rows(e)
        if not keep_groups:
            rows = [dataclasses.replace(r, group="") for r in rows]
        st = e.update(rows, UpdateConfig(lr=1e-3, micro_batch_tokens=60))
        out.append((weights(e), st.loss, st.grad_norm, e.train_version))
    assert torch.equal(out[0][0], out[1][0]) and out[0][1:] == out[1][1:] and out[0][3] == 1


def test_config_key_reaches_the_update_per_method_and_task():
    from rtpo.assembly import update_config
    from rtpo.config import load_config, method_settings, set_path

    cfg = load_config("config/config.yaml")
    assert "mini_batches" not in cfg["train"]                       # absent: the settings are as before
    assert update_config(method_settings(cfg, "grpo", "math")["train"]).mini_batches == 1
    set_path(cfg, "method.grpo.per_task.airline.mini_batches=4")
    assert update_config(method_settings(cfg, "grpo", "airline")["train"]).mini_batches == 4
    assert update_config(method_settings(cfg, "grpo", "math")["train"]).mini_batches == 1
    s = method_settings(cfg, "grpo", "airline")
    assert "mini_batches" not in s["method"]                        # a train key, not a method option
    set_path(cfg, "train.mini_batches=2")
    assert update_config(method_settings(cfg, "rtpo", "math")["train"]).mini_batches == 2


def test_verl_mini_batch_size_is_prompts_per_step_over_mini_batches():
    from rtpo.config import load_config
    from rtpo.verl_ext import startup as st
    from rtpo.verl_ext.launch import verl_overrides

    def ov(*sets):
        cfg = load_config("config/paper.yaml", list(sets))
        return st.parse_overrides(verl_overrides(cfg, "grpo", "airline", 0, "/tmp/run", "/tmp/model", "t", "v",
                                                 cpu=False))

    n = load_config("config/paper.yaml")["train"]["prompts_per_step"]
    assert ov()["actor_rollout_ref.actor.ppo_mini_batch_size"] == n        # one optimizer step per training step
    assert ov()["data.train_batch_size"] == n
    got = ov("method.grpo.per_task.airline.mini_batches=4")
    assert got["actor_rollout_ref.actor.ppo_mini_batch_size"] == n // 4 and got["data.train_batch_size"] == n
    assert ov("method.grpo.per_task.math.mini_batches=4")["actor_rollout_ref.actor.ppo_mini_batch_size"] == n
    with pytest.raises(ValueError, match=r"method\.grpo\.per_task\.airline\.mini_batches = 3 does not divide "
                                         rf"train\.prompts_per_step = {n}"):
        ov("method.grpo.per_task.airline.mini_batches=3")


def test_check_config_refuses_a_mini_batch_count_that_does_not_divide(capsys):
    from rtpo.cli import main
    from rtpo.config import load_config
    from rtpo.verl_ext import startup as st

    cfg = load_config("config/paper.yaml", ["method.grpo.mini_batches=3"])
    rep = st.check_config(cfg)
    bad = [f for f in rep.all_findings() if f.rule == "mini-batches"]
    assert {f.cell for f in bad} == {f"grpo/{t}" for t in cfg["tasks"]} | {"credit_assignment/psi-full: grpo/math"}
    assert not [f for f in rep.all_findings() if f.rule != "mini-batches"]
    assert {f.key for f in bad} == {"method.grpo.mini_batches"}
    assert main(["check-config", "--config", "config/paper.yaml", "--set", "method.grpo.mini_batches=3"]) == 2
    err = capsys.readouterr().err
    assert "method.grpo.mini_batches = 3 does not divide" in err
    assert main(["check-config", "--config", "config/paper.yaml", "--set", "method.grpo.mini_batches=2"]) == 0
