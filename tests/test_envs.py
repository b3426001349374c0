"""Multi-turn envs: turn semantics, rewards, snapshot/restore, make_env.

Most math tests use an in-process stand-in for the sandbox (the real one costs a subprocess per
call); `test_math_env_real_sandbox` runs the real `PythonSandbox` once.
"""

from __future__ import annotations

import contextlib
import copy
import io
import random
from types import SimpleNamespace

import pytest

from rtpo.data import generate_tasks, get_expert
from rtpo.envs import Env, ToolEnv, make_env
from rtpo.envs.airline_env import AirlineEnv
from rtpo.envs.base import Task
from rtpo.envs.math_env import MathEnv
from rtpo.envs.search_env import SearchEnv, extract_answer
from rtpo.tools.parse import format_tool_call

# the real Python sandbox runs subprocesses: a hang there must fail the test, not stall the suite
pytestmark = pytest.mark.timeout(120)


class InProcessSandbox:
    """Same interface as PythonSandbox.run (on failure: output = stdout + the exception line,
    error = "exit:1"), but exec() in-process (tests only: trusted code)."""

    def __init__(self):
        self.calls = 0

    def run(self, code):
        self.calls += 1
        buf = io.StringIO()
        try:
            with contextlib.redirect_stdout(buf):
                exec(code, {})  # noqa: S102
            return SimpleNamespace(ok=True, output=buf.getvalue(), error=None, wall_s=0.0)
        except Exception as e:  # noqa: BLE001
            return SimpleNamespace(ok=False, output=f"{buf.getvalue()}{type(e).__name__}: {e}",
                                   error="exit:1", wall_s=0.0)


def py(code: str) -> str:
    return f"<think>compute</think>\n{format_tool_call('python', {'code': code})}"


MATH = Task(id="m1", kind="math", question="What is 1234 * 5678?", answers=["7006652"])


def math_env(**kw) -> MathEnv:
    return MathEnv(sandbox=InProcessSandbox(), **kw)


# ---------------------------------------------------------------------------------------------
# turn semantics (math)
# ---------------------------------------------------------------------------------------------

def test_reset_messages_and_protocol():
    env = math_env()
    assert isinstance(env, Env)
    msgs = env.reset(MATH)
    assert [m["role"] for m in msgs] == ["system", "user"]
    assert "python(code: string)" in msgs[0]["content"] and "\\boxed" in msgs[0]["content"]
    assert msgs[1]["content"] == MATH.question
    assert env.max_turns == 3


def test_math_tool_then_answer():
    env = math_env()
    env.reset(MATH)
    r = env.step(py("print(1234 * 5678)"))
    assert not r.done and r.reward == 0.0
    assert r.observations == [{"role": "tool", "content": "7006652"}]
    assert r.info["tool_calls"] == 1 and r.info["tool_errors"] == 0 and r.info["tool"] == "python"
    r = env.step("<think>got it</think>\nThe answer is \\boxed{7006652}.")
    assert r.done and r.reward == 1.0 and r.observations == []
    assert r.info["answer"] == "7006652" and not r.info["truncated"]
    assert r.info["metrics"] == {"correct": 1.0, "turns": 2, "tool_calls": 1, "tool_errors": 0}


def test_math_wrong_answer_no_answer_and_boxed_in_think():
    env = math_env()
    env.reset(MATH)
    assert env.step("\\boxed{7006651}").reward == 0.0
    env.reset(MATH)
    r = env.step("I do not know.")
    assert r.done and r.reward == 0.0 and r.info["answer"] is None and not r.info["truncated"]
    env.reset(MATH)
    r = env.step("<think>\\boxed{7006652}</think> no idea")  # a boxed answer only inside <think>
    assert r.done and r.reward == 0.0


def test_math_tool_errors_are_observations():
    env = math_env()
    env.reset(MATH)
    r = env.step('<tool_call>{"name": "python", "arguments": {"code": "print(1)"}</tool_call>')
    assert not r.done and r.info["tool_errors"] == 1 and r.info["tool_calls"] == 1
    assert r.observations[0]["content"].startswith("Error: the tool call is not valid JSON")
    r = env.step(py("print(1/0)"))
    assert not r.done and r.info["tool_errors"] == 1
    assert "ZeroDivisionError" in r.observations[0]["content"]
    r = env.step("\\boxed{7006652}")
    assert r.done and r.reward == 1.0
    assert r.info["metrics"]["tool_calls"] == 2 and r.info["metrics"]["tool_errors"] == 2


def test_math_tool_call_on_last_turn_truncates_without_running():
    sb = InProcessSandbox()
    env = MathEnv(sandbox=sb, max_turns=2)
    env.reset(MATH)
    env.step(py("print(1)"))
    r = env.step(py("print(1234 * 5678)") + " \\boxed{7006652}")
    assert r.done and r.info["truncated"] and r.reward == 0.0 and r.observations == []
    assert r.info["answer"] is None and sb.calls == 1  # the last call is not executed
    with pytest.raises(RuntimeError, match="after the episode ended"):
        env.step("\\boxed{1}")


def test_step_before_reset_and_wrong_kind():
    with pytest.raises(RuntimeError, match="before reset"):
        math_env().step("x")
    with pytest.raises(ValueError, match="kind 'search'"):
        math_env().reset(Task(id="s", kind="search", question="q", answers=["a"]))


def test_long_observations_are_cut():
    env = math_env(max_obs_chars=50)
    env.reset(MATH)
    r = env.step(py("print('x' * 500)"))
    assert len(r.observations[0]["content"]) < 80 and r.observations[0]["content"].endswith("[truncated]")


def test_math_env_real_sandbox():
    env = make_env(MATH)
    env.reset(MATH)
    r = env.step(py("print(1234 * 5678)"))
    assert r.observations[0]["content"] == "7006652" and r.info["tool_errors"] == 0
    r = env.step(py("raise ValueError('boom')"))
    assert r.info["tool_errors"] == 1 and "boom" in r.observations[0]["content"]


# ---------------------------------------------------------------------------------------------
# search
# ---------------------------------------------------------------------------------------------

CORPUS = [{"id": "1", "title": "Silver Harbor", "text": "Silver Harbor is a 1987 film directed by Maren Voss."},
          {"id": "2", "title": "Maren Voss", "text": "Maren Voss is a director born in Tarnwick."}]
SEARCH = Task(id="s1", kind="search", question="Where was the director of Silver Harbor born?",
              answers=["Tarnwick"], meta={})


def test_search_env_answer_scores():
    env = SearchEnv(corpus=CORPUS)
    env.reset(SEARCH)
    r = env.step(format_tool_call("search", {"query": "Silver Harbor"}))
    assert r.observations[0]["content"].startswith("[1] Silver Harbor is a 1987 film")
    r = env.step("<answer>Maren Voss</answer>")  # hop-completion error: the intermediate entity
    assert r.done and r.reward == 0.0 and r.info["metrics"]["em"] == 0.0 and r.info["metrics"]["hit"] == 0.0
    env.reset(SEARCH)
    r = env.step("<think>maybe Tarnwick</think><answer>the Tarnwick city</answer>")
    assert r.done and 0 < r.reward < 1 and r.info["metrics"]["em"] == 0.0 and r.info["metrics"]["hit"] == 1.0
    env.reset(SEARCH)
    assert env.step("<answer>Tarnwick</answer>").info["metrics"] == {
        "em": 1.0, "f1": 1.0, "hit": 1.0, "turns": 1, "tool_calls": 0, "tool_errors": 0}
    env.reset(SEARCH)
    r = env.step("Tarnwick")  # no <answer> tag: reward 0, but output-hit counts the full output
    assert r.reward == 0.0 and r.info["answer"] is None and r.info["metrics"]["hit"] == 1.0


def test_search_env_empty_query_and_unknown_tool():
    env = SearchEnv(corpus=CORPUS)
    env.reset(SEARCH)
    r = env.step(format_tool_call("search", {"query": "  "}))
    assert r.info["tool_errors"] == 1 and r.observations[0]["content"] == "Error: empty query."
    r = env.step(format_tool_call("python", {"code": "1"}))
    assert r.info["tool_errors"] == 1 and "unknown tool 'python'" in r.observations[0]["content"]


def test_extract_answer_last_outside_think():
    assert extract_answer("<think><answer>a</answer></think><answer> b </answer>") == "b"
    assert extract_answer("<answer>a</answer> then <answer>c</answer>") == "c"
    assert extract_answer("<think><answer>a</answer></think>") is None


def test_search_envs_share_one_index_per_corpus():
    tasks = generate_tasks("search", 2, 0, "train")
    e1, e2 = make_env(tasks[0]), make_env(tasks[1])
    e1.reset(tasks[0])
    e2.reset(tasks[1])
    assert e1._index is e2._index
    with pytest.raises(ValueError, match="corpus_path' or 'corpus_seed"):
        SearchEnv().reset(SEARCH)


def test_search_env_corpus_path(tmp_path):
    import json
    p = tmp_path / "corpus.jsonl"
    p.write_text("".join(json.dumps(c) + "\n" for c in CORPUS))
    task = Task(id="s2", kind="search", question="q", answers=["Tarnwick"], meta={"corpus_path": str(p)})
    env = make_env(task, top_k=1)
    env.reset(task)
    r = env.step(format_tool_call("search", {"query": "Maren Voss born"}))
    assert r.observations[0]["content"] == "[1] Maren Voss is a director born in Tarnwick."


# ---------------------------------------------------------------------------------------------
# airline
# ---------------------------------------------------------------------------------------------

def _airline_task() -> Task:
    return generate_tasks("airline", 3, 0, "eval")[2]  # the hard tier: get, search, change


def test_airline_finish_without_tool_scores_db():
    task = generate_tasks("airline", 1, 0, "train")[0]  # easy: cancel
    env = make_env(task)
    env.reset(task)
    r = env.step("<think>nothing to do</think> Bye.")
    assert r.done and r.reward == 0.0 and r.info["answer"] == "Bye." and r.info["metrics"]["db_match"] == 0.0
    rid = task.meta["goal"]["actions"][0][1]["reservation_id"]
    env.reset(task)
    r = env.step(format_tool_call("cancel", {"reservation_id": rid}))
    assert not r.done and r.observations[0]["content"] == f"Cancelled {rid}."
    r = env.step("Your reservation is cancelled.")
    assert r.done and r.reward == 1.0


def test_airline_extra_action_breaks_the_match():
    task = generate_tasks("airline", 1, 0, "train")[0]
    env = make_env(task)
    env.reset(task)
    rid = task.meta["goal"]["actions"][0][1]["reservation_id"]
    env.step(format_tool_call("cancel", {"reservation_id": rid}))
    other = next(r for r, x in task.meta["db"]["reservations"].items() if r != rid and x["status"] == "active")
    env.step(format_tool_call("cancel", {"reservation_id": other}))
    assert env.step("done").reward == 0.0


def test_airline_last_turn_call_is_executed_and_scored():
    task = generate_tasks("airline", 1, 0, "train")[0]
    env = make_env(task, max_turns=1)
    env.reset(task)
    rid = task.meta["goal"]["actions"][0][1]["reservation_id"]
    r = env.step(format_tool_call("cancel", {"reservation_id": rid}))
    assert r.done and r.info["truncated"] and r.reward == 1.0 and r.observations == []


# ---------------------------------------------------------------------------------------------
# snapshot / restore
# ---------------------------------------------------------------------------------------------

def _expert_actions(task: Task, **env_kw) -> list[str]:
    msgs, reward = get_expert(task.kind)(task, make_env(task, **env_kw), 0.0, random.Random(0))
    assert reward == 1.0
    return [m["content"] for m in msgs if m["role"] == "assistant"]


def _roll(env: ToolEnv, actions: list[str]) -> list[tuple]:
    out = []
    for a in actions:
        r = env.step(a)
        out.append((tuple(o["content"] for o in r.observations), r.done, r.reward, r.info.get("metrics")))
    return out


@pytest.mark.parametrize("kind", ["math", "search", "airline"])
def test_snapshot_restore_roundtrip(kind):
    """restore(snapshot_k) then the same actions -> the same observations and reward, for every
    boundary k, also on a fresh env instance and after the original env went a different way."""
    task = generate_tasks(kind, 3, 1, "train")[2]  # hard tier
    kw = {"sandbox": InProcessSandbox()} if kind == "math" else {}
    actions = _expert_actions(task, **kw)
    env = make_env(task, **kw)
    env.reset(task)
    snaps, ref = [], []
    for a in actions:
        snaps.append(env.snapshot())
        ref.append(_roll(env, [a])[0])
    assert ref[-1][1] and ref[-1][2] == 1.0
    for k, snap in enumerate(snaps):
        saved = copy.deepcopy(snap["state"])
        # diverge: the original env takes other actions from boundary k
        env.restore(snap)
        _roll(env, ["<answer>x</answer> \\boxed{0} bye"])
        assert snap["state"] == saved  # the snapshot itself was not mutated
        env.restore(snap)
        assert _roll(env, actions[k:]) == ref[k:]
        fresh = make_env(task, **kw)
        fresh.restore(snap)
        assert _roll(fresh, actions[k:]) == ref[k:]


def test_airline_snapshot_isolates_db_mutations():
    task = _airline_task()
    env = make_env(task)
    env.reset(task)
    rid = task.meta["request"]["reservation_id"]
    snap = env.snapshot()
    env.step(format_tool_call("cancel", {"reservation_id": rid}))
    assert env.db.db["reservations"][rid]["status"] == "cancelled"
    env.restore(snap)
    assert env.db.db["reservations"][rid]["status"] == "active"
    r = env.step(format_tool_call("get_reservation", {"reservation_id": rid}))
    assert r.observations[0]["content"].endswith("status active")


def test_airline_envs_of_one_task_start_from_independent_copies():
    """Resets of one task share the built goal (AirlineEnv._start_cache), never the DB: a tool that
    mutates one episode's DB leaves the task, the cache and the next episode untouched."""
    task = _airline_task()
    rid = task.meta["request"]["reservation_id"]
    a, b = make_env(task), make_env(task)
    a.reset(task)
    a.step(format_tool_call("cancel", {"reservation_id": rid}))
    b.reset(task)
    assert b.db.db["reservations"][rid]["status"] == "active"
    assert task.meta["db"]["reservations"][rid]["status"] == "active"
    a.reset(task)
    assert a.db.db["reservations"][rid]["status"] == "active"
    # a task whose meta is a different object (edited, or another task with the same id) is rebuilt
    edited = Task(id=task.id, kind=task.kind, question=task.question, answers=task.answers, tier=task.tier,
                  source=task.source, meta={**task.meta, "goal": {"actions": []}})
    b.reset(edited)
    assert b._s["goal"] == b.db.canonical() and b._s["goal"] != a._s["goal"]


def test_restore_rejects_other_kind():
    env = math_env()
    env.reset(MATH)
    with pytest.raises(ValueError, match="kind 'math'"):
        AirlineEnv().restore(env.snapshot())


# ---------------------------------------------------------------------------------------------
# factory
# ---------------------------------------------------------------------------------------------

def test_make_env_dispatch_and_errors():
    assert isinstance(make_env(MATH), MathEnv)
    assert make_env(SEARCH, max_turns=4).max_turns == 4
    assert make_env(_airline_task()).max_turns == 5
    assert make_env(SEARCH).max_turns == 6
    with pytest.raises(ValueError, match="unknown kind 'chess'"):
        make_env(Task(id="c", kind="chess", question="q", answers=[]))
    with pytest.raises(TypeError, match="bad option"):
        make_env(MATH, top_k=3)
    with pytest.raises(ValueError, match="max_turns must be >= 1"):
        make_env(MATH, max_turns=0)
