"""Evaluate a model directory on a task's eval split: `rtpo evaluate` (eval JSON in docs/ARCHITECTURE.md).

k samples per eval task at the configured temperature, rolled out with the method's own context
map psi. Benchmarks are the eval tasks grouped by `source` and `tier` (embedded: "embedded-math-easy", ...;
paper scale: the real benchmark names from the adapters).

Two samplers, one rollout (rtpo.rollout.Roller: envs, tools, psi, metrics): `--engine local`
(LocalEngine in this process, CHUNK trajectories at a time) or `--engine verl` (verl's rollout servers
in standalone mode, vLLM on GPUs: rtpo/verl_ext/eval_servers.py; each trajectory rolled out on its own
by a fixed pool of `eval_workers` threads, about the servers' batch, tool calls bounded by `tool_slots`).
Each trajectory's requests carry their own seeds (from the eval seed, the trajectory and the turn), so a
rerun samples the same, whatever the schedule.

An evaluation resumes (rtpo.eval_shards): its trajectories go in shards, each written as it finishes,
and a retry after a time limit rolls out only the shards not written; the eval JSON is the same as one
uninterrupted run's. Benchmarks that search the web start with a probe query: unreachable, they are
"not run" (the eval JSON's `not_run`, with the reason), never scored; web searches failing above
rtpo.retrieval.web.MAX_FAILED_SHARE fail the evaluation.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any, Callable

from rtpo.progress import progress as tqdm

from rtpo.atomic import atomic_write_text, exclusive
from rtpo.config import method_settings
from rtpo.engine.base import SamplingParams
from rtpo.metrics import aggregate_pass_at_k, trajectory_stats
from rtpo.instrument import dumps, is_success
from rtpo.rollout import Roller, Start, Trajectory
from rtpo.run_record import code_version, file_sha256, model_sha256
from rtpo.assembly import SeedsFailed, build_engine, env_factory
from rtpo.data import load_tasks

CHUNK = 256  # trajectories rolled out together by the local engine (each turn one batched sample call; one progress tick each)


def benchmark_of(task) -> str:
    return f"{task.source}-{task.tier}" if task.source.startswith("embedded") else task.source


def traj_record(t: Trajectory) -> dict[str, Any]:
    m = t.info.get("metrics", {}) or {}
    return {"reward": t.reward, "success": is_success(t), "tool_calls": t.tool_calls, "tool_errors": t.tool_errors,
            "truncated": t.truncated, "terminated": bool(t.done and not t.truncated and t.info.get("answer") is not None),
            "response_tokens": t.response_tokens, "turns": len(t.turns),
            "em": m.get("em"), "f1": m.get("f1"), "hit": m.get("hit")}


def summarize(recs: list[dict[str, Any]], task_ids: list[str], k: int) -> dict[str, Any]:
    by_task: dict[str, list[bool]] = defaultdict(list)
    for r, tid in zip(recs, task_ids):
        by_task[tid].append(r["success"])
    ks = sorted({1, k})
    out = {"n": len(by_task), "samples": len(recs), **aggregate_pass_at_k(dict(by_task), ks),
           "reward": sum(r["reward"] for r in recs) / len(recs), **trajectory_stats(recs)}
    return {key: (None if isinstance(v, float) and math.isnan(v) else v) for key, v in out.items()}


def per_problem(recs: list[dict[str, Any]], starts: list[Start]) -> list[dict[str, Any]]:
    """Successes of each eval problem over its samples, in eval-file order: what the report's standard
    errors and its Vanilla-paired differences (paired by problem and seed) are computed from."""
    out: dict[str, dict[str, Any]] = {}
    for r, st in zip(recs, starts):
        d = out.setdefault(st.task.id, {"id": st.task.id, "benchmark": benchmark_of(st.task), "successes": 0,
                                        "samples": 0})
        d["successes"] += int(bool(r["success"]))
        d["samples"] += 1
    return list(out.values())


def run_chunked(roller: Roller, starts: list[Start], bar: tqdm) -> list[Trajectory]:
    """The local engine: CHUNK trajectories at a time, each turn of a chunk in one batched sample call."""
    trajs: list[Trajectory] = []
    for i in range(0, len(starts), CHUNK):
        trajs += roller.run(starts[i:i + CHUNK])
        bar.update(len(starts[i:i + CHUNK]))
    return trajs


def run_in_flight(roller: Roller, starts: list[Start], bar: tqdm, workers: int,
                  on_done: Callable[[int, Trajectory], None] | None = None) -> list[Trajectory]:
    """Rollout servers (verl): a fixed pool of `workers` threads (`eval_workers`: about the servers'
    batch), each taking the next trajectory in eval-file order as soon as its last one ends and rolling
    it out on its own, so a trajectory's next turn is sent as soon as its tool call returns and the
    servers batch whatever is pending (continuous batching) instead of waiting for the slowest
    trajectory of a turn wave. Never one thread per trajectory (10k threads hit a 4096
    `ulimit -u`). What a trajectory samples depends on its seeds and contexts only, not on the
    schedule; results are in the order of `starts`. A failed trajectory cancels the ones not begun.
    on_done(i, trajectory): called in this thread as trajectory i finishes (the shards are written there)."""
    if not starts:
        return []
    ex = ThreadPoolExecutor(max_workers=max(1, min(int(workers), len(starts))), thread_name_prefix="rtpo-eval")
    try:
        futs = [ex.submit(roller.run, [st]) for st in starts]  # queued work items, not threads
        index = {f: i for i, f in enumerate(futs)}
        for f in as_completed(futs):
            t = f.result()[0]
            bar.update(1)
            if on_done is not None:
                on_done(index[f], t)
    except BaseException:
        ex.shutdown(wait=True, cancel_futures=True)
        raise
    ex.shutdown(wait=True)
    return [f.result()[0] for f in futs]


class BoundedSteps:
    """An env whose `step` (where tool calls run: sandbox subprocesses, retrieval requests) waits for a
    slot of `slots`: with hundreds of trajectories in flight on rollout servers (`eval_workers`), at
    most that many tool calls run at once. Everything else is the wrapped env's."""

    def __init__(self, env: Any, slots: threading.BoundedSemaphore) -> None:
        self._env, self._slots = env, slots

    def step(self, text: str):
        with self._slots:
            return self._env.step(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)


def tool_slots() -> int:
    """Concurrent tool calls of an evaluation on rollout servers: two per CPU this job may use."""
    try:
        return 2 * len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return 2 * (os.cpu_count() or 1)


# The servers' batch when their config does not say: verl 0.9.1's rollout.max_num_seqs (trainer/config/
# rollout/rollout.yaml), the sequences one vLLM engine runs at once; later requests wait in its queue.
DEFAULT_MAX_NUM_SEQS = 256
# Hard cap on evaluation threads, whatever the servers' batch: far below the soft `ulimit -u` of 4096 that
# clusters set (and Slurm passes on), which counts every thread and process of the user on the node (Ray's
# workers, vLLM's, the sandboxes'), not just these.
MAX_EVAL_WORKERS = 1024


def server_batch(servers: Any) -> int:
    """Sequences the evaluation servers run at once: max_num_seqs per vLLM engine (the composed
    actor_rollout_ref.rollout config of `servers.manager`, eval_overrides included; else verl's
    default 256) x data_parallel_size x replicas (those verl's LLMServerManager started; else
    `servers.replicas`, verl.eval_replicas)."""
    manager = getattr(servers, "manager", None)
    rc = getattr(manager, "rollout_config", None)
    seqs = int(getattr(rc, "max_num_seqs", None) or DEFAULT_MAX_NUM_SEQS)
    dp = int(getattr(rc, "data_parallel_size", None) or 1)
    replicas = None
    if manager is not None and hasattr(manager, "get_replicas"):
        try:
            replicas = len(manager.get_replicas())
        except Exception:  # noqa: BLE001 - fall back to the configured count
            replicas = None
    replicas = replicas or int(getattr(servers, "replicas", 1) or 1)
    return max(1, seqs * dp * replicas)


def eval_workers(cfg: dict[str, Any], servers: Any, slots: int) -> int:
    """Threads that roll out trajectories on the evaluation servers (`run_in_flight`).

    The bound: servers' batch (`server_batch`: max_num_seqs x replicas) + `slots` (tool calls at once,
    `tool_slots`). A trajectory's thread is either waiting on one request or running one tool call,
    the servers run at most `server_batch` requests at once and at most `slots` tool calls run at
    once, so more threads would only wait in vLLM's queue or on the tool semaphore: no more
    throughput, only threads. Capped by MAX_EVAL_WORKERS (a `ulimit -u` of 4096) and, if set, by
    verl.eval_concurrency (which can lower the bound, never raise it). Paper scale (2 replicas,
    max_num_seqs 256, 32 CPUs): 512 + 64 = 576 threads, not one per trajectory (10,372 for math)."""
    bound = min(server_batch(servers) + max(0, int(slots)), MAX_EVAL_WORKERS)
    want = (cfg.get("verl") or {}).get("eval_concurrency")
    return max(1, bound if want is None else min(int(want), bound))


def traj_dump(t: Trajectory, st: Start) -> dict[str, Any]:
    """One trajectory's sampled tokens (rtpo evaluate --trajectories): what two engines are compared on."""
    return {"id": st.task.id, "seed": st.seed, "reward": t.reward, "done": t.done, "truncated": t.truncated,
            "turns": [{"k": u.k, "context_len": len(u.context_ids), "action_ids": u.action_ids,
                       "stop_reason": u.stop_reason} for u in t.turns]}


def evaluate(model_dir: str | Path, method: str, task: str, cfg: dict[str, Any], seed: int,
             eval_file: str | Path, out: str | Path, engine: str | None = None,
             trajectories: str | Path | None = None) -> dict[str, Any]:
    """engine: "local" (LocalEngine) or "verl" (verl's rollout servers in standalone mode, vLLM on GPUs;
    rtpo.verl_ext.eval_servers); default: the config's `engine`. trajectories: also write every
    trajectory's sampled tokens to this JSONL file. One writer per `out`: a second process evaluating into
    the same file (or a link to it) exits 2 naming it and the first one's pid."""
    with exclusive(out, "evaluating into"):
        return _evaluate(model_dir, method, task, cfg, seed, eval_file, out, engine, trajectories)


def _evaluate(model_dir: str | Path, method: str, task: str, cfg: dict[str, Any], seed: int,
              eval_file: str | Path, out: str | Path, engine: str | None,
              trajectories: str | Path | None) -> dict[str, Any]:
    from rtpo.eval_shards import MAX_SHARDS_ENV, SERVER_SHARD, SHARD_ENV, EvalShards, env_int

    name = str(engine or cfg.get("engine", "local"))
    if name not in ("local", "verl"):
        raise ValueError(f"engine must be local or verl, got {name!r}")
    if not (Path(model_dir) / "config.json").exists():  # at job start, before any server or model loads
        raise FileNotFoundError(f"--model {model_dir}: not a Hugging Face model directory (no config.json)"
                                if Path(model_dir).is_dir() else f"--model {model_dir}: model directory not found")
    s = method_settings(cfg, method, task)
    ev = cfg["eval"]
    k = int(ev["samples"])
    crosscheck = bool(ev.get("math_verify")) and task == "math"
    if crosscheck:  # before the rollouts: a missing package fails at once, naming what to install
        from rtpo.metrics_crosscheck import require

        require()
    tasks = load_tasks(eval_file)
    params = SamplingParams(max_new_tokens=int(s["env"]["max_new_tokens"]), temperature=float(ev["temperature"]))
    starts = [Start(t, first_kind="eval", rest_kind="eval", seed=seed * 1_000_003 + i * k + j)
              for i, t in enumerate(tasks) for j in range(k)]
    not_run, web_tasks = web_benchmarks(tasks)  # a probe query per web backend; seeds stay the full list's
    if not_run:
        starts = [st for st in starts if benchmark_of(st.task) not in not_run]
        if not starts:
            raise ValueError(f"{eval_file}: nothing to evaluate, every benchmark is not run: {not_run}")
    # the local engine's shards are its CHUNKs (the same batched calls as ever); servers: RTPO_EVAL_SHARD
    size = CHUNK if name == "local" else (env_int(SHARD_ENV) or SERVER_SHARD)
    key = {"task": task, "method": method, "seed": seed, "k": k, "engine": name, "settings": {"eval": ev, **s},
           "eval_file": file_sha256(eval_file), "model": model_sha256(model_dir), "not_run": sorted(not_run),
           "dumps": trajectories is not None}
    store = EvalShards(out, key, size, len(starts))
    done = store.load()
    pending = [i for i in range(store.count) if i not in done]
    limit = env_int(MAX_SHARDS_ENV)  # the pilot: this many new shards, then stop
    if limit is not None:
        pending = pending[:limit]
    web = WebFailures(web_tasks, [p.get("web") for p in done.values()])
    fresh: dict[int, dict[str, Any]] = {}

    def finish_shard(i: int, trajs: list[Trajectory]) -> None:
        lo, _ = store.bounds(i)
        payload = shard_payload(trajs, starts[lo:lo + len(trajs)], crosscheck, trajectories is not None, web_tasks)
        web.check(payload["web"], f"shard {i} of {store.count}")  # raises above MAX_FAILED_SHARE: not written
        store.write(i, payload)
        fresh[i] = payload

    t_start = time.perf_counter()
    startup_s = rollout_s = 0.0
    todo = [st for i in pending for st in starts[slice(*store.bounds(i))]]
    servers = None
    if todo:
        if name == "verl":
            from rtpo.verl_ext.eval_servers import EvalServers

            servers = EvalServers(cfg, model_dir, seed, params.max_new_tokens)
            eng = servers.start()
        else:
            eng = build_engine(model_dir, cfg, seed, reference=False)
        try:
            make_env = env_factory(s["env"])
            if servers is not None:
                n_slots = tool_slots()
                slots = threading.BoundedSemaphore(n_slots)
                make_env = (lambda f: lambda task: BoundedSteps(f(task), slots))(make_env)
            roller = Roller(eng, make_env, s["psi"], params)
            startup_s = time.perf_counter() - t_start
            t0 = time.perf_counter()
            with tqdm(total=len(todo), desc=f"eval {method}/{task}/seed{seed}", unit="traj", mininterval=5) as bar:
                if servers is not None:
                    run_in_flight(roller, todo, bar, eval_workers(cfg, servers, n_slots),
                                  on_done=ShardCollector(store, pending, finish_shard))
                else:
                    for i in pending:  # CHUNK trajectories per shard, each turn in one batched call
                        trajs = run_chunked(roller, starts[slice(*store.bounds(i))], bar)
                        finish_shard(i, trajs)
            rollout_s = time.perf_counter() - t0
        finally:
            if servers is not None:
                servers.close()
    payloads = {**done, **fresh}
    new = [r for i in sorted(fresh) for r in fresh[i]["records"]]
    gen = sum(r["response_tokens"] for r in new)
    store.attempt(startup_s=round(startup_s, 3), rollout_s=round(rollout_s, 3), trajectories=len(new), total=store.n,
                  generated_tokens=gen, shards=len(fresh), shards_done=len(payloads), of=store.count,
                  engine=name, servers=None if servers is None else {"tp": servers.tp, "replicas": servers.replicas})
    if limit is not None:  # RTPO_EVAL_MAX_SHARDS (the pilot): its shards stay for the evaluation job, which resumes
        from rtpo.signals import Stopped

        raise Stopped(f"evaluation stopped after {len(fresh)} new shard(s) ({MAX_SHARDS_ENV}={limit}): "
                      f"{len(payloads)} of {store.count} shards of {store.size} trajectories done in {store.dir}; "
                      "the same command resumes")
    web.check(None, "the evaluation")
    recs = [r for i in range(store.count) for r in payloads[i]["records"]]
    groups: dict[str, list[int]] = defaultdict(list)
    for i, st in enumerate(starts):
        groups[benchmark_of(st.task)].append(i)
    result = {
        "task": task, "method": method, "seed": seed, "model": str(model_dir), "k": k, "psi": s["psi"],
        "wall_s": time.perf_counter() - t_start, "engine": name,
        "throughput": {"startup_s": startup_s, "rollout_s": rollout_s, "trajectories": len(new),
                       "generated_tokens": gen, "trajectories_per_s": len(new) / max(rollout_s, 1e-9),
                       "generated_tokens_per_s": gen / max(rollout_s, 1e-9)},
        "benchmarks": {b: summarize([recs[i] for i in idx], [starts[i].task.id for i in idx], k)
                       for b, idx in sorted(groups.items())},
        "overall": summarize(recs, [st.task.id for st in starts], k),
        "per_problem": per_problem(recs, starts),
        # what was evaluated, with what (rtpo.run_record): the settings, the hashes of the eval data and the
        # model read, the code version
        "record": {"settings": {"eval": ev, "engine": name, **s}, "code": code_version(),
                   "inputs": {"eval_file": {"path": str(eval_file), "sha256": key["eval_file"]},
                              "model": {"path": str(model_dir), "sha256": key["model"]}}},
    }
    if done:  # shards an earlier attempt finished (throughput is this attempt's)
        result["resumed"] = {"shards": len(done), "of": store.count,
                             "trajectories": sum(len(p["records"]) for p in done.values())}
    if not_run:  # unreachable web search: these benchmarks are not scored (the report says "not run")
        result["not_run"] = not_run
    if web.searches:
        result["web_search"] = {"searches": web.searches, "failed": web.failed, "max_failed_share": web.max_share}
    if crosscheck:  # a second opinion beside the project's grader, never instead of it
        from rtpo.metrics_crosscheck import crosscheck as math_verify_crosscheck

        graded = [g for i in range(store.count) for g in payloads[i]["graded"]]
        result["math_verify"] = math_verify_crosscheck(
            (answer, st.task.answers[0], correct) for (answer, correct), st in zip(graded, starts))
    if servers is not None:
        result["servers"] = {"rollout": servers.rollout,
                             "tensor_parallel_size": servers.tp, "replicas": servers.replicas,
                             "max_model_len": servers.max_context, "cpu_harness": servers.cpu}
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    if trajectories is not None:
        Path(trajectories).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(trajectories, "".join(json.dumps(d) + "\n" for i in range(store.count)
                                                for d in payloads[i]["dumps"]))
    atomic_write_text(out, dumps(result, indent=1, sort_keys=True))  # renamed into place: never half a file
    store.clear()
    return result


def shard_payload(trajs: list[Trajectory], starts: list[Start], crosscheck: bool, dump: bool,
                  web_tasks: set[str]) -> dict[str, Any]:
    """What a shard keeps of its trajectories: their records (the eval JSON's input), the math-verify
    triples' answers, the trajectories' tokens when dumped, and its web searches (made and failed)."""
    from rtpo.tools.search_tool import SEARCH_FAILED

    searches = failed = 0
    for t, st in zip(trajs, starts):
        if st.task.id in web_tasks:
            searches += t.tool_calls
            failed += sum(1 for u in t.generated_turns for m in u.observations
                          if m.get("role") == "tool" and m.get("content") == SEARCH_FAILED)
    return {"records": [traj_record(t) for t in trajs],
            "graded": [[t.info.get("answer"), bool((t.info.get("metrics") or {}).get("correct"))] for t in trajs]
            if crosscheck else [],
            "dumps": [traj_dump(t, st) for t, st in zip(trajs, starts)] if dump else [],
            "web": {"searches": searches, "failed": failed}}


class ShardCollector:
    """run_in_flight's on_done: gathers finished trajectories (indices into the pending shards' starts)
    and hands each shard to `finish(i, trajectories)` once all of its trajectories are in."""

    def __init__(self, store: Any, pending: list[int], finish: Callable[[int, list[Trajectory]], None]) -> None:
        self.finish, self.where, self.got = finish, [], {}
        for i in pending:
            lo, hi = store.bounds(i)
            self.where += [(i, j) for j in range(hi - lo)]
            self.got[i] = [None] * (hi - lo)

    def __call__(self, n: int, t: Trajectory) -> None:
        i, j = self.where[n]
        self.got[i][j] = t
        if all(x is not None for x in self.got[i]):
            self.finish(i, self.got.pop(i))


def web_benchmarks(tasks: list[Any]) -> tuple[dict[str, str], set[str]]:
    """({benchmark: why it is not run}, the ids of the tasks that search the web): one probe query per
    web backend the tasks name (meta.retriever of kind serpapi; rtpo.retrieval.web.web_available)."""
    from rtpo.retrieval.web import web_available

    specs: dict[str, dict] = {}
    by_spec: dict[str, list[Any]] = defaultdict(list)
    for t in tasks:
        spec = (t.meta or {}).get("retriever") or {}
        if spec.get("kind") == "serpapi":
            key = json.dumps(spec, sort_keys=True)
            specs[key] = spec
            by_spec[key].append(t)
    not_run: dict[str, str] = {}
    ids: set[str] = set()
    for key, spec in specs.items():
        benches = sorted({benchmark_of(t) for t in by_spec[key]})
        ok, why = web_available(spec, probe=True)
        print(f"[eval] {', '.join(benches)}: {why}" + ("" if ok else ": not run, not scored"), flush=True)
        if ok:
            ids.update(t.id for t in by_spec[key])
        else:
            not_run.update({b: why for b in benches})
    return not_run, ids


class WebFailures:
    """Web searches made and failed in this evaluation so far (shards of earlier attempts included); `check`
    fails it once the failed share passes rtpo.retrieval.web.MAX_FAILED_SHARE (at a shard, once 20
    searches are counted; at the end, whatever the count)."""

    MIN_SEARCHES = 20

    def __init__(self, web_tasks: set[str], earlier: list[dict | None]) -> None:
        from rtpo.retrieval.web import MAX_FAILED_SHARE

        self.max_share = MAX_FAILED_SHARE
        self.active = bool(web_tasks)
        self.searches = sum(int((e or {}).get("searches", 0)) for e in earlier)
        self.failed = sum(int((e or {}).get("failed", 0)) for e in earlier)

    def check(self, shard: dict[str, int] | None, what: str) -> None:
        if not self.active:
            return
        searches = self.searches + (shard or {}).get("searches", 0)
        failed = self.failed + (shard or {}).get("failed", 0)
        if searches and failed / searches > self.max_share and (shard is None or searches >= self.MIN_SEARCHES):
            raise RuntimeError(f"web search failed {failed} of {searches} times ({failed / searches:.1%} > "
                               f"{self.max_share:.0%}, rtpo.retrieval.web.MAX_FAILED_SHARE) by {what}: not scored; "
                               "the shards written before stay, and the same command resumes once the web search "
                               "answers (probe: rtpo.retrieval.web.web_available)")
        self.searches, self.failed = searches, failed


def _per_seed(pattern: str | Path | None, seeds: list[int], flag: str) -> list[str | None]:
    if pattern is None:
        return [None] * len(seeds)
    pattern = str(pattern)
    if "{seed}" not in pattern:
        if len(seeds) > 1:
            raise ValueError(f"{flag} {pattern}: several seeds need a '{{seed}}' placeholder")
        return [pattern]
    return [pattern.replace("{seed}", str(s)) for s in seeds]


def evaluate_seeds(model: str | Path, method: str, task: str, cfg: dict[str, Any], seeds: list[int],
                   eval_file: str | Path, out: str | Path, engine: str | None = None,
                   trajectories: str | Path | None = None, log: str | None = None) -> dict[int, dict[str, Any]]:
    """`evaluate` for each seed in this process, one after the other (`rtpo evaluate --seed 0 1 2
    --model .../seed{seed}/final --out .../seed{seed}.json`): each seed's result is what evaluating it
    alone gives. A seed whose model cannot be read is reported and skipped; then SeedsFailed names it.
    log: a path pattern with {seed}: each seed's output is also written to its own log."""
    import sys

    from rtpo.inputs import check_model_dir
    from rtpo.progress import copy_output

    if len(seeds) != len(set(seeds)):
        raise ValueError(f"--seed: a seed is given twice ({seeds})")
    models, outs = _per_seed(model, seeds, "--model"), _per_seed(out, seeds, "--out")
    dumps = _per_seed(trajectories, seeds, "--trajectories")
    results: dict[int, dict[str, Any]] = {}
    failed: dict[int, str] = {}
    for seed, m, o, d, lg in zip(seeds, models, outs, dumps, _per_seed(log, seeds, "--log")):
        with copy_output(lg):
            try:
                check_model_dir(m)
                results[seed] = evaluate(m, method, task, cfg, seed, eval_file, o, engine=engine, trajectories=d)
            except (OSError, ValueError) as e:
                if len(seeds) == 1:
                    raise
                failed[seed] = str(e)
                print(f"[eval {method}/{task}] seed {seed} failed: {e}", file=sys.stderr, flush=True)
    if failed:
        raise SeedsFailed(f"{len(failed)} of {len(seeds)} seeds failed "
                          f"({'; '.join(f'seed {s}: {msg}' for s, msg in failed.items())})")
    return results
