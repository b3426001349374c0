"""The baselines (GRPO, Tree-GRPO, ARPO, SeeUPO) and the method registry, on a tiny random Qwen3.

The model is built in-test (byte-level BPE on a few sentences, hidden 64, 2 layers); envs are a
3-turn toy whose tool observations carry text (so truncate:1 drops real history at turn 2) and,
when present, the embedded math env. Torch runs single-threaded here: the step times of a model
this small are dominated by thread hand-offs on a shared 2-core machine.
"""

from __future__ import annotations

import math

import pytest
import torch

from rtpo.engine.base import SamplingParams, UpdateConfig
from rtpo.engine.local import LocalEngine, build_tiny_qwen3
from rtpo.envs.base import StepResult, Task
from rtpo.methods.advantages import tree_grpo_advantages
from rtpo.methods.arpo import ARPO, branch_probability, should_branch
from rtpo.methods.base import Vanilla, flatten_row
from rtpo.methods.grpo import GRPO
from rtpo.methods.registry import METHODS, get_method
from rtpo.methods.rtpo import RTPO
from rtpo.methods.seeupo import SeeUPO
from rtpo.methods.tree_grpo import TreeGRPO, expandable_nodes
from rtpo.rollout import Roller, Start
from rtpo.tokenizer import train_tokenizer

SCHEMA_KEYS = {"reward_mean", "success_rate", "ratio_mean", "kl_rollout_train", "zero_adv_frac", "tokens",
               "trained_tokens", "rollouts_per_prompt", "tool_calls", "tool_errors", "syncs", "time", "turns",
               "trunks", "loss", "grad_norm"}


class ObsEnv:
    """K-turn toy: every non-final turn gets a text tool result; the final turn is rewarded 1 when
    its text has an even number of characters (a reward a random model hits about half the time)."""

    def __init__(self, max_turns: int = 3) -> None:
        self.max_turns, self.turn = max_turns, 0

    def reset(self, task: Task):
        self.turn = 0
        return [{"role": "system", "content": "Answer each turn."}, {"role": "user", "content": task.question}]

    def step(self, text: str) -> StepResult:
        self.turn += 1
        if self.turn < self.max_turns:
            obs = [{"role": "tool", "content": f"result {self.turn}: the value is {7 * self.turn}"}]
            return StepResult(obs, False, 0.0, {"tool_calls": 1, "tool_errors": 0})
        return StepResult([], True, float(len(text) % 2 == 0), {"tool_calls": 0, "tool_errors": 0, "truncated": False})

    def snapshot(self):
        return {"turn": self.turn}

    def restore(self, state) -> None:
        self.turn = int(state["turn"])


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer(["Answer each turn. What is 3 plus 4? result: the value is 21. yes no continue"] * 20,
                           vocab_size=320)


TASKS = [Task(id=f"toy-{i}", kind="toy", question=f"What is {i} plus 4?", answers=["x"]) for i in range(2)]


def make(tok, method: type, cfg: dict, psi: str = "full", lr: float = 1e-3, max_new: int = 6, env=ObsEnv,
         max_position: int = 512):
    model = build_tiny_qwen3(tok, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
                             intermediate_size=128, max_position=max_position, seed=0)
    eng = LocalEngine(model, tok, seed=0, reference=False)
    roller = Roller(eng, lambda task: env(), psi, SamplingParams(max_new_tokens=max_new))
    # weight_decay 0: a weight change then proves a gradient step, not AdamW's decay
    return method(eng, roller, cfg, UpdateConfig(lr=lr, weight_decay=0.0)), eng


def weights(eng):
    return [p.detach().clone() for p in eng.model.parameters()]


def changed(eng, before) -> float:
    return max(float((p.detach() - q).abs().max()) for p, q in zip(eng.model.parameters(), before))


# ------------------------------------------------------------------ registry

def test_registry_names_and_error():
    assert set(METHODS) == {"vanilla", "rtpo", "rtpo_ca", "grpo", "grpo_tis", "tree_grpo", "arpo", "seeupo"}
    assert get_method("rtpo_ca") is RTPO and get_method("vanilla") is Vanilla and get_method("arpo") is ARPO
    with pytest.raises(ValueError, match="valid methods: vanilla, rtpo, rtpo_ca, grpo"):
        get_method("ppo")


def test_bad_config_is_named(tok):
    with pytest.raises(ValueError, match=r"grpo\.chains"):
        make(tok, GRPO, {"chains": 0})
    with pytest.raises(ValueError, match=r"arpo\.initial .* arpo\.total"):
        make(tok, ARPO, {"initial": 5, "total": 4})
    with pytest.raises(ValueError, match=r"tree_grpo\.shared_prefix"):
        make(tok, TreeGRPO, {"shared_prefix": "sometimes"})
    with pytest.raises(ValueError, match=r"seeupo\.ratio_clip"):
        make(tok, SeeUPO, {"ratio_clip": [1.2, 0.8]})


# ------------------------------------------------------------------ flattened rows

def test_flatten_row_masks_actions_only(tok):
    m, eng = make(tok, GRPO, {"chains": 1})
    (traj,) = m.roller.run([Start(TASKS[0], first_kind="chain", rest_kind="chain")])
    assert len(traj.turns) == 3
    row = flatten_row(traj, 0.5, eng.max_context)
    p = traj.info["prompt_len"]
    assert row.prompt_ids == traj.full_ids[:p] and row.response_ids == traj.full_ids[p:]
    trained = [row.response_ids[i] for i in range(len(row.mask)) if row.mask[i]]
    assert trained == [x for t in traj.turns for x in t.action_ids]
    assert [lp for lp, mk in zip(row.old_logprobs, row.mask) if mk] == [x for t in traj.turns for x in t.logprobs]
    assert sum(row.mask) < len(row.mask)  # observation / template tokens are masked
    assert set(row.advantages) == {0.5}
    # a branch from S_2: its copied turns 0 and 1 are trained again by default, masked with "once"
    (br,) = m.roller.run([Start(TASKS[0], source=traj, k=2, first_kind="branch", rest_kind="branch")])
    full, once = flatten_row(br, 1.0, eng.max_context), flatten_row(br, 1.0, eng.max_context, train_copied_prefix=False)
    assert sum(full.mask) == sum(len(t.action_ids) for t in br.turns)
    assert sum(once.mask) == len(br.turns[2].action_ids)
    # cut to the engine's context
    short = flatten_row(traj, 0.5, p + 3)
    assert len(short.response_ids) == 3


# ------------------------------------------------------------------ GRPO: the measured mismatch

def test_grpo_ratio_is_one_under_full_and_not_under_truncate(tok):
    m, _ = make(tok, GRPO, {"chains": 3}, psi="full")
    rec = m.step(TASKS, 0)
    assert abs(rec["ratio_mean"] - 1.0) < 1e-5 and rec["kl_rollout_train"] < 1e-6

    m, _ = make(tok, GRPO, {"chains": 3}, psi="truncate:1")
    rec = m.step(TASKS, 0)
    # turn 2 was sampled without turn 0 in its context but is trained under the full history
    t = m.last_groups[0][0]
    assert len(t.turns) == 3 and t.turns[2].context_ids != t.full_ids[:t.action_spans[2][0]]
    assert rec["kl_rollout_train"] > 1e-6
    assert abs(rec["ratio_mean"] - 1.0) > 1e-6


def test_grpo_on_its_own_contexts_has_no_mismatch_and_otherwise_trains_as_grpo(tok):
    """train_rows: turn (the turn_rows control): the same chains and advantages as GRPO, one row per turn under the
    context c_k it was sampled from. Under truncate:1 flat GRPO measures a mismatch on those very chains and the
    turn rows none; under psi = full the turn rows are the flattened row's action tokens under the same prefixes,
    so one update sees the same gradient (token mean over the same action tokens, up to float rounding)."""
    from rtpo.methods.grpo import turn_rows

    flat, _ = make(tok, GRPO, {"chains": 3}, psi="truncate:1")
    turn, _ = make(tok, GRPO, {"chains": 3, "train_rows": "turn"}, psi="truncate:1")
    rf, rt = flat.step(TASKS, 0), turn.step(TASKS, 0)
    assert rf["tokens"] == rt["tokens"] and rf["reward_mean"] == rt["reward_mean"]   # the same chains
    assert rf["kl_rollout_train"] > 1e-6 and rt["kl_rollout_train"] < 1e-9
    assert abs(rt["ratio_mean"] - 1.0) < 1e-6
    t = turn.last_groups[0][0]
    rows = turn_rows(t, 0.25, group="g")
    assert [r.prompt_ids for r in rows] == [x.context_ids for x in t.turns]
    assert [r.response_ids for r in rows] == [x.action_ids for x in t.turns] and rows[2].turns == [2] * len(rows[2].mask)
    assert rows[2].prompt_ids != t.full_ids[:t.action_spans[2][0]]   # turn 2's c_k dropped turn 0

    f2, ef = make(tok, GRPO, {"chains": 3}, psi="full")
    t2, et = make(tok, GRPO, {"chains": 3, "train_rows": "turn"}, psi="full")
    a, b = f2.step(TASKS, 0), t2.step(TASKS, 0)
    # (the loss itself is ~0 at ratio 1: the advantages of a prompt's chains sum to 0; its gradient is not)
    assert a["tokens"] == b["tokens"] and a["grad_norm"] > 1e-3
    assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-4)
    with pytest.raises(ValueError, match=r"grpo\.train_rows"):
        make(tok, GRPO, {"chains": 1, "train_rows": "trajectory"})


# ------------------------------------------------------------------ Tree-GRPO

def test_tree_grpo_exact_counts_and_legal_expansions(tok):
    m, _ = make(tok, TreeGRPO, {"trees": 2, "expansions": 2, "rounds": 2})
    rec = m.step(TASKS, 0)
    assert m.per_prompt == 2 * (1 + 2 * 2)
    assert [len(g) for g in m.last_groups] == [10, 10]
    assert rec["rollouts_per_prompt"] == 10.0
    assert set(rec["tokens"]) == {"chain", "tree"} and rec["trunks"]["n"] == 2 * len(TASKS)
    for group in m.last_groups:
        assert all(t.task.id == group[0].task.id for t in group)
        for t in group:
            if t.start_k == 0:
                continue
            # expanded from a non-leaf node: a member of the group that generated turn start_k - 1 and went on
            assert any(u is not t and u.turns[:t.start_k] == t.turns[:t.start_k] and len(u.turns) > t.start_k
                       and u.start_k < t.start_k for u in group)
    # candidates: the root once, then each non-leaf node once
    tree = m.last_groups[0][:1]
    assert expandable_nodes(tree) == [(tree[0], 0), (tree[0], 1), (tree[0], 2)]


def test_tree_grpo_advantage_is_intra_plus_inter():
    r = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0])
    a = tree_grpo_advantages(r, ["t0", "t0", "t0", "t1", "t1", "t1"], ["p"] * 6)
    assert a[3] == a[4] == a[5] and float(a[3]) > 0  # constant tree: intra 0, inter > 0
    assert float(a[0]) > float(a[1])


# ------------------------------------------------------------------ ARPO

def test_arpo_branch_rule():
    assert branch_probability(0.0, 0.5, 0.2) == 0.5
    assert branch_probability(10.0, 0.5, 0.2) == 1.0 and branch_probability(-10.0, 0.5, 0.2) == 0.0
    for dH in (-1.0, 0.0, 0.7):
        us = [(i + 0.5) / 10000 for i in range(10000)]
        frac = sum(should_branch(u, dH, 0.5, 0.2) for u in us) / len(us)
        assert frac == pytest.approx(branch_probability(dH, 0.5, 0.2), abs=2e-4)


@pytest.mark.parametrize("tau,expect_branches", [(1.0, True), (0.0, False), (0.5, None)])
def test_arpo_exactly_total_per_prompt(tok, tau, expect_branches):
    m, _ = make(tok, ARPO, {"initial": 2, "total": 5, "tau": tau, "beta": 0.0 if tau == 0.0 else 0.2})
    for step in range(2):
        rec = m.step(TASKS, step)
        assert [len(g) for g in m.last_groups] == [5, 5]
        assert rec["rollouts_per_prompt"] == 5.0 and rec["trunks"]["n"] == 2 * len(TASKS)
        branches = [t for g in m.last_groups for t in g if t.start_k > 0]
        if expect_branches is True:
            assert branches and "branch" in rec["tokens"]
            # the public loop's order: step 0 both first chains branch after turn 0 (4 of 5), step 1
            # the first active chain takes the last slot after its turn 1
            assert all(sorted(t.start_k for t in g if t.start_k) == [1, 1, 2] for g in m.last_groups)
        elif expect_branches is False:
            assert not branches and "branch" not in rec["tokens"]  # filled with fresh chains
        for t in branches:
            assert t.start_k in (1, 2) and all(turn.kind == "branch" for turn in t.generated_turns)
        # the entropy roller really measured the first tokens
        assert all(turn.entropy is not None and 0.0 <= turn.entropy <= 1.0
                   for g in m.last_groups for t in g for turn in t.generated_turns)


# ------------------------------------------------------------------ SeeUPO

def test_seeupo_reverse_stages_and_weight_bounds(tok):
    m, _ = make(tok, SeeUPO, {"chains": 3, "ratio_clip": [0.9, 1.05]}, lr=3e-3)
    rec = m.step(TASKS, 0)
    assert [t["k"] for t in rec["turns"]] == [2, 1, 0]
    assert all(t["groups"] == len(TASKS) for t in rec["turns"])
    w = m.last_weights
    assert float(w.min()) >= 0.9 - 1e-6 and float(w.max()) <= 1.05 + 1e-6
    assert not torch.allclose(w, torch.ones_like(w))  # later turns' updates did reweight
    # stage 2 (first update) ran before any change: its measured consistency is exact under psi=full
    assert abs(rec["turns"][0]["ratio_mean"] - 1.0) < 1e-5


# ------------------------------------------------------------------ every method trains

@pytest.mark.parametrize("name,cfg,kinds", [
    ("grpo", {"chains": 3}, {"chain"}),
    # the key sets of config/config.yaml (keys a method does not read, like entropy_coef, are the trainer's)
    ("tree_grpo", {"trees": 2, "expansions": 1, "rounds": 1, "entropy_coef": 0.001}, {"chain", "tree"}),
    ("arpo", {"initial": 2, "total": 4, "tau": 1.0, "beta": 0.2, "entropy_tokens": 20}, {"chain", "branch"}),
    ("seeupo", {"chains": 3, "adv_clamp": 3.0, "ratio_clip": [0.8, 1.2]}, {"chain"}),
    ("rtpo", {"trunks": 2, "group_size": 2}, {"trunk", "sibling", "continuation"}),
])
def test_method_trains_and_logs_the_schema(tok, name, cfg, kinds):
    m, eng = make(tok, get_method(name), cfg)
    before = weights(eng)
    for step in range(2):
        rec = m.step(TASKS, step)
        missing = SCHEMA_KEYS - set(rec)
        assert not missing, f"{name}: record lacks {missing}"
        assert set(rec["tokens"]) == kinds
        assert rec["syncs"] >= 1 and rec["trained_tokens"] > 0 and math.isfinite(rec["loss"])
        assert 0.0 <= rec["reward_mean"] <= 1.0 and rec["time"]["update"] > 0
    assert changed(eng, before) > 1e-6, f"{name}: weights did not move"
    assert eng.train_version >= 2


def test_vanilla_does_not_train(tok):
    m, eng = make(tok, Vanilla, {"chains": 2})
    before = weights(eng)
    rec = m.step(TASKS, 0)
    assert changed(eng, before) == 0.0 and "loss" not in rec and rec["rollouts_per_prompt"] == 2.0


# ------------------------------------------------------------------ a real env, when present

def test_grpo_and_arpo_on_embedded_math_if_available(tok):
    envs = pytest.importorskip("rtpo.envs")
    data = pytest.importorskip("rtpo.data")
    if not hasattr(envs, "make_env") or not hasattr(data, "generate_tasks"):
        pytest.skip("rtpo.envs.make_env / rtpo.data.generate_tasks not written yet")
    tasks = data.generate_tasks("math", 2, seed=0, split="train")
    env = lambda: envs.make_env(tasks[0], max_turns=3)  # noqa: E731 (the env kind is the task's)
    for method, cfg in ((GRPO, {"chains": 2}), (ARPO, {"initial": 1, "total": 3})):
        m, eng = make(tok, method, cfg, psi="qwen3", env=env, max_position=4096, max_new=8)
        rec = m.step(tasks, 0)
        assert SCHEMA_KEYS - {"loss", "grad_norm"} <= set(rec)
        assert [len(g) for g in m.last_groups] == [cfg.get("chains", cfg.get("total"))] * 2
