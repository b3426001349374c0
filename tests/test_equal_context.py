"""Equal context for equal psi: under psi = full RTPO's c_k is the episode so far, the quantity a
flat baseline's row bounds, so RTPO-CA (the credit-assignment study's psi = full arm) and RTPO under
psi = full get the flat baselines' total context (P + R), not E.3's 8,192-token prompt slot.

The probe: a long-thinking math episode (K = 3, ~4,000 tokens of <think> a turn, Qwen3's chat
template from tests/fixtures/qwen3, real python-sandbox tool calls) through the real Roller with the
bounds the launcher gives each method of config/paper.yaml's credit-assignment study."""

from __future__ import annotations

import copy

import pytest

from rtpo.config import ROOT, load_config
from rtpo.engine.base import SamplingParams
from rtpo.envs.base import Task
from rtpo.rollout import Roller, Start
from tests.helpers import tiny
from tests.test_qwen3_template import CALL, FIXTURE, Scripted

# a turn near its 4,096-token cap: with this tokenizer's short tool calls and results, two such turns put
# the history past 8,192 tokens at turn 3 (the issue's probe: ~3,800 thinking tokens with Qwen3's tokenizer)
THINK_TOKENS = 4000


@pytest.fixture(scope="module")
def tok():
    t = copy.deepcopy(tiny.tokenizer())
    t.chat_template = FIXTURE.read_text()
    return t


def _override(ov: list[str], key: str) -> int:
    return int(next(o.split("=", 1)[1] for o in ov if o.startswith(key + "=")))


def _bounds(method: str) -> tuple[int, str, int, int]:
    """(the rollout's context bound, its rows, P, R) of `method` on math in the paper's credit-assignment
    study, from the launcher's own overrides (what the verl trainer's Roller receives)."""
    from rtpo.methods.cards import TURN_ROW_METHODS
    from rtpo.verl_ext.launch import verl_overrides

    cfg = load_config(ROOT / "config" / "paper.yaml", ["env.math.psi=full"])  # the study's psi = full arm
    ov = verl_overrides(cfg, method, "math", 0, "/tmp/out", "/tmp/model", "t.parquet", "v.parquet", cpu=False)
    P, R = _override(ov, "data.max_prompt_length"), _override(ov, "data.max_response_length")
    if method in TURN_ROW_METHODS:
        return _override(ov, "+rtpo.rollout_max_context"), "turn", P, R
    return P + R, "flat", P, R


def test_psi_full_turn_rows_get_the_flat_baselines_total_context():
    from rtpo.verl_ext.launch import lengths

    cfg = load_config(ROOT / "config" / "paper.yaml")
    env = cfg["env"]["math"]
    flat = lengths(cfg, "grpo", env)
    assert flat == (8192, 3 * 4096 + 2 * 512)
    assert lengths(cfg, "rtpo", env, "qwen3") == (8192, 4096)               # E.3's prompt slot: c_k compressed
    assert lengths(cfg, "rtpo", env, "full") == (sum(flat) - 4096, 4096)    # c_k is the history
    assert lengths(cfg, "rtpo_ca", env, "full") == (sum(flat) - 4096, 4096)
    assert sum(lengths(cfg, "rtpo_ca", env, "full")) == sum(flat) == 21504
    assert _bounds("rtpo_ca")[0] == 17408 and _bounds("grpo")[0] == 21504
    # check-config says the two bounds are one quantity
    from rtpo.verl_ext.startup import check_config, load_profile

    rep = check_config(cfg, load_profile(ROOT / "slurm", ROOT / "workflow" / "profiles" / "default"))
    cells = {c.cell: c.values for c in rep.cells}
    assert cells["credit_assignment/psi-full: rtpo_ca/math"]["context bound"] == (
        "c_k <= 17408, turn <= 4096 (psi = full: c_k is the episode so far, so episode <= 21504)")
    assert cells["credit_assignment/psi-full: grpo/math"]["context bound"] == "episode <= 21504"
    assert cells["rtpo/math"]["context bound"] == "c_k <= 8192, turn <= 4096"  # psi = qwen3


def test_long_thinking_rtpo_ca_reaches_turn_k_like_the_flat_baselines(tok):
    from rtpo.envs import make_env

    unit = "Let me think about this carefully and check each step. "
    per = len(tok.encode(unit, add_special_tokens=False))
    think = "<think>\n" + unit * (THINK_TOKENS // per) + "\n</think>\n\n"
    n = len(tok.encode(think, add_special_tokens=False))
    assert 3950 <= n <= 4050, n
    turns = [think + CALL % "7708 - 265", think + CALL % "7443 + 1", think + "The answer is \\boxed{7443}."]
    task = Task(id="m0", kind="math", question="A farm has 7708 eggs. It sells 265 eggs. How many eggs does it have now?",
                answers=["7443"])

    def roll(bound: int, rows: str):
        roller = Roller(Scripted(tok, turns), lambda t: make_env(t, max_turns=3), "full",
                        SamplingParams(max_new_tokens=4096), max_context=bound, rows=rows)
        return roller.run([Start(task)])[0]

    got = {}
    for method in ("rtpo_ca", "grpo", "tree_grpo", "seeupo"):
        bound, rows, _, _ = _bounds(method)
        t = roll(bound, rows)
        got[method] = (len(t.turns), t.reward, bool(t.info.get("context_overflow")))
    assert got == {m: (3, 1.0, False) for m in got}, got
    # the old bound (E.3's 8,192-token prompt slot for c_k = the whole history) cut RTPO-CA at turn 2
    t = roll(8192, "turn")
    assert (len(t.turns), t.reward, t.info.get("context_overflow")) == (2, 0.0, True)
