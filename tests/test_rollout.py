"""The Roller's batched env stepping: tool calls of one batch run concurrently, results as serial."""

from __future__ import annotations

from rtpo.engine.base import SamplingParams
from rtpo.envs import make_env
from rtpo.envs.base import Task
from rtpo.rollout import Roller, Start
from rtpo.tools.parse import format_tool_call
from tests.helpers import tiny


def math_tasks(n: int) -> list[Task]:
    return [Task(id=f"m{i}", kind="math", question=f"What is {100 + i} * {7 + i}?", answers=[str((100 + i) * (7 + i))])
            for i in range(n)]


def test_threaded_env_steps_equal_serial_ones_with_real_sandbox_calls():
    """Eight math envs, each stepped with a real python tool call (sandboxed subprocess): stepping
    them from the thread pool gives exactly the serial observations, rewards and infos."""
    tasks = math_tasks(8)
    codes = [f"print({100 + i} * {7 + i})" if i % 3 else "print(1/0)" for i in range(8)]

    def step_all(threads: int):
        envs = [make_env(t) for t in tasks]
        for e, t in zip(envs, tasks):
            e.reset(t)
        roller = Roller(tiny.engine(), make_env, "full", SamplingParams(), env_threads=threads)
        texts = [format_tool_call("python", {"code": c}) for c in codes]
        return [(r.observations, r.done, r.reward, r.info) for r in roller._step_envs(list(zip(envs, texts)))]

    serial, threaded = step_all(1), step_all(8)
    assert serial == threaded
    assert str((101) * (8)) in serial[1][0][0]["content"]
    assert "ZeroDivisionError" in serial[0][0][0]["content"]


def test_rollouts_with_threaded_env_steps_equal_serial_rollouts():
    """Whole rollouts (the tiny model's samples, seeded per request) are the same token for token
    whether the envs are stepped one after another or concurrently."""
    e = tiny.engine(seed=3)
    tasks = math_tasks(4)
    p = SamplingParams(max_new_tokens=12)

    def run(threads: int):
        roller = Roller(e, make_env, "qwen3", p, env_threads=threads)
        return roller.run([Start(t, seed=10 * i + j) for i, t in enumerate(tasks) for j in range(2)])

    a, b = run(1), run(8)
    assert [t.full_ids for t in a] == [t.full_ids for t in b]
    assert [t.reward for t in a] == [t.reward for t in b]
    assert [[tu.context_ids for tu in t.turns] for t in a] == [[tu.context_ids for tu in t.turns] for t in b]
