"""Evaluation on rollout servers (`rtpo evaluate --engine verl`) runs a bounded pool of threads:
about the servers' batch (max_num_seqs x replicas) + the tool-call slots, never one thread per
trajectory (10,372 for math at paper scale, past a cluster's soft `ulimit -u` of 4096).

The servers are faked (`FakeServers`, what `EvalServers` gives `_evaluate`: an engine, a manager with
verl's rollout config, a replica count); the engine is a fake server whose tokens are a function of the
request's context and seed only, and which, like a continuously batching server, holds the first
requests until every trajectory has sent one or a warm-up passes (so an unbounded schedule really has
every trajectory's thread alive at once). Checked: the peak thread count stays at the bound while 2,000
trajectories are evaluated, the eval JSON and every trajectory's tokens equal the chunked local path's,
a real (tiny) engine samples the same tokens under the pool as under the chunked path, and the whole
evaluation runs in a process whose `ulimit -u` (RLIMIT_NPROC) leaves 512 threads.
"""

from __future__ import annotations

import json
import os
import random
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parent.parent
N_TASKS, K = 500, 4          # 2,000 trajectories
MAX_NUM_SEQS, SLOTS = 8, 4   # the fake servers' batch and the tool-call slots: a bound of 12 threads
BOUND = MAX_NUM_SEQS + SLOTS
WARMUP_S = 1.5               # the fake server holds first requests until all arrived or this passed


class _Bar:
    def update(self, n: int) -> None:
        pass


class FakeServerEngine:
    """A Roller engine like `ServerEngine` on a server: each context's completion is a function of its
    seed and its tokens only ("The answer is \\boxed{n}." + EOS, n drawn from them). Counts the
    threads inside `sample` at once and the process's peak thread count. gate: hold the first
    requests until `gate` of them wait or WARMUP_S passed since the first (then never again)."""

    def __init__(self, gate: int | None = None) -> None:
        from tests.helpers import tiny

        self.tokenizer = tiny.tokenizer()
        self.max_context = 4096
        self.weight_version = 0
        self.eos = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.lock = threading.Condition()
        self.inside = self.max_inside = 0
        self.peak_threads = threading.active_count()
        self.gate, self.opened, self.first = gate, gate is None, None
        self.calls = 0

    def _hold(self) -> None:
        with self.lock:
            if self.opened:
                return
            self.first = self.first or time.monotonic()
            if self.inside >= self.gate:
                self.opened = True
                self.lock.notify_all()
                return
            deadline = self.first + WARMUP_S
            while not self.opened and time.monotonic() < deadline:
                self.lock.wait(max(0.0, deadline - time.monotonic()))
            self.opened = True
            self.lock.notify_all()

    def sample(self, contexts, params, seeds=None):
        from rtpo.engine.base import Completion

        assert seeds is not None and len(seeds) == len(contexts)
        with self.lock:
            self.inside += 1
            self.calls += 1
            self.max_inside = max(self.max_inside, self.inside)
            self.peak_threads = max(self.peak_threads, threading.active_count())
        try:
            self._hold()
            out = []
            for c, s in zip(contexts, seeds):
                n = random.Random(f"{s}:{len(c)}:{sum(c)}:{c[-8:]}").randrange(1000)
                ids = self.tokenizer.encode(f"The answer is \\boxed{{{n}}}.", add_special_tokens=False) + [self.eos]
                out.append(Completion(ids=ids, logprobs=[-0.5] * len(ids), stop_reason="eos"))
            return out
        finally:
            with self.lock:
                self.inside -= 1


class FakeServers:
    """What `_evaluate` uses of `EvalServers`: start() -> engine, close(), the layout fields, and a
    manager with verl's composed rollout config (max_num_seqs) and its replicas."""

    engine: FakeServerEngine | None = None

    def __init__(self, cfg, model_dir, seed, max_new_tokens) -> None:
        self.rollout, self.tp, self.replicas, self.max_context, self.cpu = "fake", 1, 1, 4096, True
        self.manager = SimpleNamespace(rollout_config=SimpleNamespace(max_num_seqs=MAX_NUM_SEQS, data_parallel_size=1),
                                       get_replicas=lambda: ["replica0"])

    def start(self) -> FakeServerEngine:
        return FakeServers.engine

    def close(self) -> None:
        pass


def _setup(d: Path) -> tuple[dict, Path, Path]:
    from rtpo.config import load_config
    from rtpo.data import generate_tasks

    cfg = load_config(ROOT / "config" / "smoke.yaml", validate=False)
    cfg["eval"] = {"samples": K, "temperature": 1.0}
    cfg["verl"] = {"device": "cpu", "dtype": "float32"}  # no eval_concurrency: the bound comes from the servers
    model = d / "model"
    model.mkdir(parents=True, exist_ok=True)
    (model / "config.json").write_text(json.dumps({"model_type": "qwen3", "max_position_embeddings": 4096}))
    ev = d / "eval.jsonl"
    ev.write_text("".join(json.dumps(t.to_dict()) + "\n" for t in generate_tasks("math", N_TASKS, 0, "eval")))
    return cfg, model, ev


def evaluate_on_fake_servers(d: Path) -> dict:
    """`rtpo evaluate --engine verl` of N_TASKS x K trajectories on FakeServers (tool slots: SLOTS);
    returns the engine's counts, the eval JSON and the trajectories' tokens."""
    import rtpo.evaluate as E
    import rtpo.verl_ext.eval_servers as S

    cfg, model, ev = _setup(d)
    FakeServers.engine = eng = FakeServerEngine(gate=N_TASKS * K)
    saved = S.EvalServers, E.tool_slots
    S.EvalServers, E.tool_slots = FakeServers, (lambda: SLOTS)
    base = threading.active_count()
    try:
        res = E.evaluate(model, "vanilla", "math", cfg, 3, ev, d / "verl.json", engine="verl",
                         trajectories=d / "verl.traj.jsonl")
    finally:
        S.EvalServers, E.tool_slots = saved
    return {"base": base, "peak": eng.peak_threads, "max_inside": eng.max_inside, "calls": eng.calls,
            "result": res, "traj": (d / "verl.traj.jsonl").read_text()}


def test_eval_workers_bound_is_the_servers_batch_plus_tool_slots():
    """max_num_seqs x data_parallel_size x replicas (+ tool slots), lowered by verl.eval_concurrency,
    never above MAX_EVAL_WORKERS; verl's default max_num_seqs (256) when the config has none."""
    from rtpo.evaluate import DEFAULT_MAX_NUM_SEQS, MAX_EVAL_WORKERS, eval_workers, server_batch

    servers = FakeServers(None, None, 0, 0)
    assert server_batch(servers) == MAX_NUM_SEQS
    assert eval_workers({"verl": {}}, servers, SLOTS) == BOUND
    assert eval_workers({"verl": {"eval_concurrency": 5}}, servers, SLOTS) == 5
    assert eval_workers({"verl": {"eval_concurrency": 16384}}, servers, SLOTS) == BOUND  # the old default
    paper = SimpleNamespace(manager=SimpleNamespace(rollout_config=SimpleNamespace(max_num_seqs=256),
                                                    get_replicas=lambda: [0, 1]), replicas=2)
    assert server_batch(paper) == 512 and eval_workers({}, paper, 64) == 576
    bare = SimpleNamespace(manager=None, replicas=3)   # no composed config: verl's default, configured replicas
    assert DEFAULT_MAX_NUM_SEQS == 256 and server_batch(bare) == 768
    many = SimpleNamespace(manager=SimpleNamespace(rollout_config=SimpleNamespace(max_num_seqs=1024, data_parallel_size=2),
                                                   get_replicas=lambda: list(range(8))), replicas=8)
    assert server_batch(many) == 16384 and eval_workers({"verl": None}, many, 32) == MAX_EVAL_WORKERS <= 1024


def test_peak_threads_stay_at_the_bound_and_tokens_equal_the_chunked_local_path(tmp_path, monkeypatch):
    """2,000 trajectories on fake servers whose batch is 8 (+ 4 tool slots): at most 12 trajectories
    are in flight and the process never has more than 12 threads beyond its own (old code: one
    thread per trajectory, ~2,000). The eval JSON numbers and every trajectory's tokens, in order,
    equal what the chunked local path (`--engine local`, CHUNK trajectories per batched call) gives
    with the same engine: the schedule does not change what is sampled."""
    import rtpo.evaluate as E

    got = evaluate_on_fake_servers(tmp_path / "verl")
    assert got["max_inside"] == BOUND, got["max_inside"]   # the pool is full (the servers batch 12), never more
    assert got["peak"] - got["base"] <= BOUND, (got["peak"], got["base"])
    assert got["result"]["throughput"]["trajectories"] == N_TASKS * K == got["calls"]

    local = FakeServerEngine()
    monkeypatch.setattr(E, "build_engine", lambda *a, **k: local)
    cfg, model, ev = _setup(tmp_path / "local")
    res = E.evaluate(model, "vanilla", "math", cfg, 3, ev, tmp_path / "local.json", engine="local",
                     trajectories=tmp_path / "local.traj.jsonl")
    assert local.calls == -(-N_TASKS * K // E.CHUNK)  # one batched call per chunk: a different schedule
    assert (tmp_path / "local.traj.jsonl").read_text() == got["traj"]
    for key in ("benchmarks", "overall", "per_problem"):
        assert res[key] == got["result"][key], key
    seeds = [json.loads(x)["seed"] for x in got["traj"].splitlines()]
    assert seeds == [3 * 1_000_003 + i for i in range(N_TASKS * K)]   # results in eval-file order


class _Serial:
    """An engine whose sample calls run one at a time (LocalEngine is not meant for concurrent calls);
    everything else is the wrapped engine's."""

    def __init__(self, eng) -> None:
        self._eng, self._lock = eng, threading.Lock()

    def sample(self, *a, **k):
        with self._lock:
            return self._eng.sample(*a, **k)

    def __getattr__(self, name):
        return getattr(self._eng, name)


def test_bounded_pool_samples_the_chunked_paths_tokens_on_a_real_engine():
    """A tiny Qwen3 (LocalEngine) at temperature 1: the bounded pool (3 workers, each trajectory
    sampled alone, in whatever order the threads reach the engine) gives every trajectory the tokens
    the chunked path (all trajectories in one batch per turn) gives it: per-trajectory seeds."""
    from rtpo.data import generate_tasks
    from rtpo.engine.base import SamplingParams
    from rtpo.envs import make_env
    from rtpo.evaluate import run_chunked, run_in_flight
    from rtpo.rollout import Roller, Start
    from tests.helpers import tiny

    eng = tiny.engine(seed=0)
    params = SamplingParams(max_new_tokens=24, temperature=1.0)
    make = lambda task: make_env(task, max_turns=2)  # noqa: E731
    starts = [Start(t, first_kind="eval", rest_kind="eval", seed=7 * 1_000_003 + i * 3 + j)
              for i, t in enumerate(generate_tasks("math", 4, 0, "eval")) for j in range(3)]
    a = run_chunked(Roller(eng, make, "qwen3", params), starts, _Bar())
    b = run_in_flight(Roller(_Serial(eng), make, "qwen3", params), starts, _Bar(), workers=3)
    assert [t.task.id for t in b] == [st.task.id for st in starts]
    assert sum(len(u.action_ids) for t in a for u in t.turns) > 0
    for x, y in zip(a, b):
        assert [(u.context_ids, u.action_ids, u.stop_reason) for u in x.turns] == \
               [(u.context_ids, u.action_ids, u.stop_reason) for u in y.turns]
        assert (x.reward, x.done, x.truncated) == (y.reward, y.done, y.truncated)


def test_run_in_flight_failure_cancels_the_trajectories_not_begun():
    """A trajectory that raises ends the evaluation with its error; the queued ones never start."""
    from rtpo.evaluate import run_in_flight

    ran, lock = [], threading.Lock()

    class Roller:
        def run(self, starts):
            with lock:
                ran.append(starts[0])
            if starts[0] == 1:
                raise RuntimeError("trajectory 1 failed")
            time.sleep(0.01)
            return [starts[0]]

    with pytest.raises(RuntimeError, match="trajectory 1 failed"):
        run_in_flight(Roller(), list(range(1000)), _Bar(), workers=2)
    assert len(ran) < 100


# ------------------------------------------------------------------ under `ulimit -u 512`
LIMIT = 512
CHILD = r"""
import json, sys, threading
from pathlib import Path
# the limit is enforced: this process cannot start LIMIT threads
ev, ts = threading.Event(), []
try:
    for _ in range({limit} + 64):
        t = threading.Thread(target=ev.wait); t.start(); ts.append(t)
except RuntimeError:
    pass
ev.set()
for t in ts:
    t.join()
probe = len(ts)
from tests.test_eval_concurrency import evaluate_on_fake_servers
got = evaluate_on_fake_servers(Path(sys.argv[1]))
print("RESULT " + json.dumps({{"probe": probe, "peak": got["peak"], "base": got["base"],
                               "n": got["result"]["throughput"]["trajectories"]}}))
"""


def _user_threads(uid: int) -> int:
    """Threads (tasks) of processes whose owner is uid: what RLIMIT_NPROC counts."""
    n = 0
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if p.stat().st_uid == uid:
                    n += len(os.listdir(p / "task"))
            except OSError:
                pass
    return n


def _fresh_uid() -> int:
    """A uid that runs no process here (RLIMIT_NPROC then counts this test's child only)."""
    used = set()
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                used.add(p.stat().st_uid)
            except OSError:
                pass
    return next(u for u in range(61000, 65000) if u not in used)


def _drop_root_exemption(uid: int) -> None:
    """In a forked child of root: make RLIMIT_NPROC apply. The kernel exempts root's own uid and holders
    of CAP_SYS_ADMIN / CAP_SYS_RESOURCE; so drop those two from the bounding set (execve then gives
    the child root's other capabilities only) and make `uid` (running nothing else) the real uid, the
    one the limit counts. The effective uid stays 0: the child still reads the virtual environment
    under /root and writes pytest's (root-only) tmp_path."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (21, 24):  # CAP_SYS_ADMIN, CAP_SYS_RESOURCE
        if libc.prctl(24, cap, 0, 0, 0) != 0 and ctypes.get_errno() != 22:  # PR_CAPBSET_DROP; EINVAL: unknown
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")
    os.setresuid(uid, 0, 0)


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc")
def test_evaluation_runs_under_ulimit_u_512(tmp_path):
    """`rtpo evaluate --engine verl` of 2,000 trajectories (fake servers) in a child whose soft
    RLIMIT_NPROC leaves it 512 threads: as root (exempt from the limit) the child runs with
    `ulimit -u 512`, an otherwise unused real uid and without CAP_SYS_ADMIN / CAP_SYS_RESOURCE;
    otherwise the limit is this user's current thread count + 512. The child first checks that the
    limit bites (it cannot start 512 + 64 threads), then evaluates: the old one-thread-per-trajectory
    schedule dies there with "can't start new thread"."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NPROC)
    root = os.geteuid() == 0
    if root:
        uid, limit = _fresh_uid(), LIMIT
    else:
        uid = os.getuid()
        limit = _user_threads(uid) + LIMIT
        if hard != resource.RLIM_INFINITY and hard < limit:
            pytest.skip(f"hard RLIMIT_NPROC {hard} < {limit}")

    def preexec():
        resource.setrlimit(resource.RLIMIT_NPROC, (limit, limit if root else hard))
        if root:
            _drop_root_exemption(uid)

    env = {**os.environ, "PYTHONHASHSEED": "0", "TOKENIZERS_PARALLELISM": "false", "WANDB_MODE": "disabled",
           "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    try:
        r = subprocess.run([sys.executable, "-c", CHILD.format(limit=LIMIT), str(tmp_path / "eval")], cwd=ROOT,
                           env=env, preexec_fn=preexec, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.SubprocessError) as e:  # e.g. root without CAP_SETPCAP / CAP_SETUID
        pytest.skip(f"cannot start a child under RLIMIT_NPROC {limit} as real uid {uid}: {e}")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    got = json.loads(next(x for x in r.stdout.splitlines() if x.startswith("RESULT "))[7:])
    print(f"limit {limit} (real uid {uid}): {got}")
    assert got["n"] == N_TASKS * K and got["peak"] - got["base"] <= BOUND, got
    if got["probe"] >= LIMIT:  # the limit did not bite here; the thread count above still held the bound
        pytest.skip(f"RLIMIT_NPROC {limit} not enforced for real uid {uid} (started {got['probe']} threads)")
