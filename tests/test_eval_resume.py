"""Evaluation that resumes, and web search that fails loudly (rtpo.evaluate, rtpo.eval_shards,
rtpo.retrieval.web).

An evaluation writes its trajectories in shards as they finish; a job killed at its time limit (the fake
Slurm's, which SIGTERMs and then SIGKILLs the job as slurmd does) keeps the shards it wrote, and the retry
(the same command) rolls out only the rest and writes the eval JSON one uninterrupted run writes. The CPU
default's eval JSON is byte-identical to commit f1aae5b's (tests/helpers/eval_golden.py). Benchmarks whose
web search is unreachable at the job's start are "not run" with the probe's reason, never scored; web
searches failing above MAX_FAILED_SHARE fail the evaluation.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.eval_golden import StandIn, local_eval_text

ROOT = Path(__file__).resolve().parents[1]
FAKE_SLURM = ROOT / "tests" / "fake_slurm"


def test_the_cpu_defaults_eval_json_is_byte_identical_to_before(tmp_path):
    """The local engine's path (CHUNK trajectories per batched call, now each CHUNK a shard): the same
    batches, the same eval JSON byte for byte and the same trajectories as f1aae5b wrote."""
    want = (ROOT / "tests" / "fixtures" / "eval" / "local_f1aae5b.txt").read_text()
    got = local_eval_text(tmp_path / "run")
    assert got == want
    assert not (tmp_path / "run" / "eval.json.shards").exists()  # removed once the eval JSON is written


def test_an_interrupted_local_evaluation_resumes_from_its_shards(tmp_path):
    """A local evaluation that dies after its first shard (CHUNK = 256 trajectories) resumes: the retry
    samples only the second shard's 44 trajectories and writes the uninterrupted run's numbers."""
    import rtpo.evaluate as E
    from rtpo.config import load_config
    from rtpo.data import generate_tasks

    cfg = load_config(ROOT / "config" / "smoke.yaml", validate=False)
    cfg["eval"] = {"samples": 2, "temperature": 1.0}
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "qwen3", "max_position_embeddings": 4096}))
    tasks = generate_tasks("math", 150, 0, "eval")
    ev = tmp_path / "eval.jsonl"
    ev.write_text("".join(json.dumps(t.to_dict()) + "\n" for t in tasks))
    answers = {t.question: t.answers[0] for t in tasks}

    class Dies(StandIn):
        def sample(self, contexts, params, seeds=None):
            if len(self.batches) == 1:
                raise KeyboardInterrupt("killed")
            return super().sample(contexts, params, seeds)

    def run(eng, out):
        saved = E.build_engine
        E.build_engine = lambda *a, **k: eng
        try:
            return E.evaluate(model, "vanilla", "math", cfg, 3, ev, out, engine="local")
        finally:
            E.build_engine = saved

    whole = run(StandIn(answers), tmp_path / "whole.json")
    with pytest.raises(KeyboardInterrupt):
        run(Dies(answers), tmp_path / "r.json")
    assert sorted(p.name for p in (tmp_path / "r.json.shards").iterdir()) == ["00000.json"]
    again = StandIn(answers)
    got = run(again, tmp_path / "r.json")
    assert again.batches == [44]
    for key in ("benchmarks", "overall", "per_problem"):
        assert got[key] == whole[key], key
    assert got["resumed"] == {"shards": 1, "of": 2, "trajectories": 256} and "resumed" not in whole
    assert got["throughput"]["trajectories"] == 44 and not (tmp_path / "r.json.shards").exists()


# An evaluation on stand-in rollout servers (tests/test_eval_concurrency.py's FakeServers, its engine
# slowed by RTPO_TEST_SAMPLE_S per request), run as `rtpo evaluate --engine verl` would run it.
_SERVER_EVAL = """
import json, os, sys, time
sys.path.insert(0, sys.argv[1])
import rtpo.evaluate as E
import rtpo.verl_ext.eval_servers as S
from tests.test_eval_concurrency import FakeServerEngine, FakeServers, _setup

class Slow(FakeServerEngine):
    def sample(self, contexts, params, seeds=None):
        time.sleep(float(os.environ.get("RTPO_TEST_SAMPLE_S", "0")))
        return super().sample(contexts, params, seeds)

cfg, model, ev = _setup(__import__("pathlib").Path(sys.argv[2]))
cfg["verl"]["eval_concurrency"] = 2
FakeServers.engine = eng = Slow()
S.EvalServers = FakeServers
res = E.evaluate(model, "vanilla", "math", cfg, 3, ev, sys.argv[3], engine="verl", trajectories=sys.argv[3] + ".traj")
print(json.dumps({"calls": eng.calls, "resumed": res.get("resumed")}))
"""


@pytest.mark.slow  # a job timed out by the fake Slurm, then its retry (~40 s)
def test_an_evaluation_killed_at_its_time_limit_resumes_where_it_stopped(tmp_path):
    """The job: 2,000 trajectories (500 tasks x 4) in shards of 100 (RTPO_EVAL_SHARD, as the profile's
    eval_shard resource sets it), under the fake sbatch with a one-"minute" limit of 25 s: Slurm's SIGTERM
    ends it mid-evaluation (state TIMEOUT), no eval JSON. Its retry resumes from the shards written, samples
    only the others, and writes the eval JSON and trajectories of an uninterrupted run."""
    out = tmp_path / "job" / "seed3.json"
    env = dict(os.environ, PATH=os.pathsep.join([str(FAKE_SLURM), os.environ["PATH"]]),
               FAKE_SLURM_DIR=str(tmp_path / "slurm"), FAKE_SLURM_SECONDS_PER_MINUTE="25", FAKE_SLURM_KILL_WAIT="2",
               RTPO_EVAL_SHARD="100", RTPO_TEST_SAMPLE_S="0.05")
    (tmp_path / "slurm").mkdir()
    cmd = f"{sys.executable} -c '{_SERVER_EVAL}' {ROOT} {tmp_path / 'job'} {out}"
    t0 = time.time()
    r = subprocess.run(["sbatch", "--parsable", "-D", str(tmp_path), "-o", "job.out", "--time=1", f"--wrap={cmd}"],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    job = json.loads((tmp_path / "slurm" / "jobs" / f"{r.stdout.strip()}.json").read_text())
    log = (tmp_path / "job.out").read_text()
    assert job["state"] == "TIMEOUT" and 24 < time.time() - t0 < 120, (job, log[-2000:])
    assert not out.exists()
    shards = sorted(p.name for p in (tmp_path / "job" / "seed3.json.shards").glob("0*.json"))
    assert 0 < len(shards) < 20, (shards, log[-2000:])

    env.update(RTPO_TEST_SAMPLE_S="0")  # the retry: the same command, no limit
    r = subprocess.run([sys.executable, "-c", _SERVER_EVAL, str(ROOT), str(tmp_path / "job"), str(out)], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.splitlines()[-1])
    done = 100 * len(shards)
    assert got["resumed"] == {"shards": len(shards), "of": 20, "trajectories": done}
    assert got["calls"] == 2000 - done  # only the shards not written were sampled
    assert f"{len(shards)} of 20 shards done by an earlier attempt, resumed" in r.stdout

    r = subprocess.run([sys.executable, "-c", _SERVER_EVAL, str(ROOT), str(tmp_path / "whole"), str(tmp_path / "w.json")],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    whole, resumed = json.loads((tmp_path / "w.json").read_text()), json.loads(out.read_text())
    for key in ("benchmarks", "overall", "per_problem"):
        assert resumed[key] == whole[key], key
    assert Path(f"{out}.traj").read_text() == (tmp_path / "w.json.traj").read_text()


# ------------------------------------------------------------------------------------------------
# web search: a probe at the start, a failure share at the end
# ------------------------------------------------------------------------------------------------
class Searcher(StandIn):
    """Turn 1: a search call; later turns: an answer."""

    def sample(self, contexts, params, seeds=None):
        from rtpo.engine.base import Completion

        self.batches.append(len(contexts))
        out = []
        for c in contexts:
            text = self.tokenizer.decode(c)
            reply = ('<tool_call>{"name": "search", "arguments": {"query": "glass tower"}}</tool_call>'
                     if "<tool_response>" not in text else "<answer>312 m</answer>")
            ids = self.tokenizer.encode(reply, add_special_tokens=False) + [self.eos]
            out.append(Completion(ids=ids, logprobs=[-0.5] * len(ids), stop_reason="eos"))
        return out


def _web_eval(tmp_path: Path, endpoint: str, monkeypatch, n_web: int = 6):
    """Search tasks: 4 on the embedded corpus, `n_web` of "gaia" on the SerpAPI spec at `endpoint`."""
    import rtpo.evaluate as E
    from rtpo.config import load_config
    from rtpo.data import generate_tasks
    from tests.test_web_search import KEY

    monkeypatch.setenv("RTPO_TEST_SERP_KEY", KEY)
    cfg = load_config(ROOT / "config" / "smoke.yaml", validate=False)
    cfg["eval"] = {"samples": 1, "temperature": 1.0}
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps({"model_type": "qwen3", "max_position_embeddings": 4096}))
    web = {"kind": "serpapi", "key_env": "RTPO_TEST_SERP_KEY", "endpoint": endpoint, "timeout_s": 0.5, "retries": 0,
           "backoff_s": 0.01}
    rows = []
    for i, t in enumerate(generate_tasks("search", 4 + n_web, 0, "eval")):
        d = t.to_dict()
        if i >= 4:
            d.update(source="gaia", meta={"retriever": web}, answers=["312 m"])
        rows.append(d)
    ev = tmp_path / "eval.jsonl"
    ev.write_text("".join(json.dumps(d) + "\n" for d in rows))
    eng = Searcher({})
    monkeypatch.setattr(E, "build_engine", lambda *a, **k: eng)
    return lambda out: E.evaluate(model, "vanilla", "search", cfg, 0, ev, tmp_path / out, engine="local")


def test_unreachable_web_search_makes_its_benchmarks_not_run(tmp_path, monkeypatch, capsys):
    """The key is set but the provider does not answer (a closed port, as an offline compute node sees
    it): the probe at the job's start fails, gaia is "not run" with the probe's error, and only the
    benchmarks on the corpus are scored."""
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    res = _web_eval(tmp_path, f"http://127.0.0.1:{port}/search.json", monkeypatch)("eval.json")
    assert "gaia" not in res["benchmarks"] and res["benchmarks"], res["benchmarks"]
    assert list(res["not_run"]) == ["gaia"]
    why = res["not_run"]["gaia"]
    assert why.startswith("web search unreachable from ") and "probe query 'Wikipedia'" in why and str(port) in why
    assert "Connection refused" in why or "ConnectionRefusedError" in why, why
    assert res["overall"]["samples"] == 4 and "web_search" not in res
    err = capsys.readouterr().out
    assert "[eval] gaia: web search unreachable" in err and "not run, not scored" in err


def test_web_search_that_fails_after_the_probe_fails_the_evaluation(tmp_path, monkeypatch, capsys):
    """The probe is answered, then every search fails (HTTP 500): above MAX_FAILED_SHARE the evaluation
    fails and writes nothing; answered, the same evaluation is scored and says how many searches it made."""
    from tests.test_web_search import FakeSerpApi

    class FailsAfterTheProbe(FakeSerpApi):  # "fail": the first request (the probe) answers, the rest get 500
        mode = property(lambda self: ("ok" if len(self.requests) <= 1 else "500") if self._mode == "fail" else self._mode,
                        lambda self, v: setattr(self, "_mode", v))

    fake = FailsAfterTheProbe()
    try:
        evaluate = _web_eval(tmp_path, fake.endpoint, monkeypatch)
        fake.mode = "fail"
        with pytest.raises(RuntimeError, match=r"web search failed 6 of 6 times \(100.0% > 5%.*by the evaluation"):
            evaluate("failed.json")
        assert not (tmp_path / "failed.json").exists()
        assert "web search reachable: the probe query 'Wikipedia'" in capsys.readouterr().out
        fake.mode = "ok"
        res = evaluate("ok.json")
        assert res["web_search"] == {"searches": 6, "failed": 0, "max_failed_share": 0.05}
        assert "gaia" in res["benchmarks"] and res["benchmarks"]["gaia"]["pass@1"] == 1.0 and "not_run" not in res
    finally:
        fake.srv.shutdown()
