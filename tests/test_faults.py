"""Faults that must not lose work: `rtpo train` killed at random moments (inside
checkpoint writes too) and rerun ends exactly as an uninterrupted run; SIGTERM saves a checkpoint
and exits 143; corrupt inputs fail with exit 2 and a message naming the file; atomic outputs.

The kill trials run the real CLI (`rtpo.cli.main(["train", ...])`) in processes forked from one
server that imported torch and transformers once (tests/test_faults.py::SERVER): ~6 s of imports
per run on 2 cores would otherwise be most of the test. The uninterrupted reference is a plain
`python -m rtpo.cli train` subprocess, so the forked runs are checked against an ordinary one.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, copy_workdir, run_snakemake, workflow_copy
from tests.helpers import tiny

TIME_KEYS = {"time", "wall_s_this_run", "time_total"}
ENV = {"PYTHONHASHSEED": "0", "TOKENIZERS_PARALLELISM": "false", "WANDB_MODE": "disabled", "HF_HUB_OFFLINE": "1"}
STEPS = 3
SETS = [f"train.steps={STEPS}", "train.checkpoint_every=1", "env.airline.max_turns=2", "model.threads=1"]
DELAY = 0.15  # RTPO_FAULT_DELAY: seconds at each point inside a write (4 per checkpoint)
WRITE_POINTS = {"ckpt-begin", "ckpt-engine", "ckpt-files", "ckpt-renamed"}

# Forks one run per command line read from stdin, kills it as the command says, prints the outcome.
SERVER = r"""
import json, os, signal, sys, time, traceback
sys.path.insert(0, {root!r})
import torch, transformers, numpy, tqdm                              # noqa: the imports a run needs,
from transformers import Qwen3ForCausalLM, AutoTokenizer             # noqa: done once, before forking
import rtpo.cli, rtpo.train, rtpo.methods.registry, rtpo.envs, rtpo.data, rtpo.engine.local  # noqa
for m in ("rtpo", "grpo"):
    rtpo.methods.registry.get_method(m)
print("ready", flush=True)

def events(path):
    try:
        with open(path) as f:
            return [line.split(maxsplit=1)[1].strip() for line in f if line.strip()]
    except FileNotFoundError:
        return []

for line in sys.stdin:
    cmd = json.loads(line)
    t0 = time.time()
    pid = os.fork()
    if pid == 0:                                                      # the run
        rc = 1
        try:
            os.chdir(cmd["cwd"])
            os.environ.update(cmd["env"])
            fd = os.open(cmd["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            rc = rtpo.cli.main(cmd["argv"])
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(rc)
    kill, sent = cmd.get("kill"), None
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if kill and sent is None:
            at = kill.get("at")
            if at is not None:
                due = time.time() - t0 >= at
            else:
                ev = events(cmd["env"]["RTPO_FAULT_TRACE"])
                due = kill["after"] in ev and time.time() - kill.setdefault("seen", time.time()) >= kill["delay"]
            if due:
                os.kill(pid, getattr(signal, "SIG" + kill["signal"]))
                sent = time.time() - t0
        time.sleep(0.002)
    rc = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    print(json.dumps({{"rc": rc, "sent_at": sent, "wall": time.time() - t0}}), flush=True)
"""


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """Airline tasks, a tiny Qwen3 (tests/helpers/tiny.py's tokenizer) and the CLI arguments of a run."""
    d = tiny.airline_run_inputs(tmp_path_factory.mktemp("faults"))
    return d


def train_argv(d: Path, out: Path, method: str = "rtpo") -> list[str]:
    argv = ["train", "--method", method, "--task", "airline", "--config", str(ROOT / "config" / "smoke.yaml"),
            "--seed", "0", "--model", str(d / "model"), "--train-file", str(d / "data" / "train.jsonl"),
            "--out", str(out)]
    for s in SETS:
        argv += ["--set", s]
    return argv


class Server:
    """The fork server (SERVER) in a subprocess; `run` forks one `rtpo` run and returns its outcome."""

    def __init__(self, tmp: Path):
        script = tmp / "server.py"
        script.write_text(SERVER.format(root=str(ROOT)))
        self.proc = subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env={**os.environ, **ENV}, cwd=tmp)
        assert self.proc.stdout.readline().strip() == "ready"
        self.tmp = tmp

    def run(self, argv: list[str], trace: Path, log: Path, kill: dict | None = None,
            delay: float = DELAY) -> dict:
        env = {"RTPO_FAULT_TRACE": str(trace), "RTPO_FAULT_DELAY": str(delay)}
        log.parent.mkdir(parents=True, exist_ok=True)
        self.proc.stdin.write(json.dumps({"argv": argv, "env": env, "log": str(log), "cwd": str(self.tmp),
                                          "kill": kill}) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("server"))
    yield s
    s.close()


@pytest.fixture(scope="module")
def reference(setup, tmp_path_factory):
    """An uninterrupted run: a plain `python -m rtpo.cli train` subprocess."""
    d = setup
    out = tmp_path_factory.mktemp("ref") / "run"
    trace = out.parent / "trace"
    r = subprocess.run([sys.executable, "-m", "rtpo.cli", *train_argv(d, out)], cwd=ROOT, capture_output=True,
                       text=True, env={**os.environ, **ENV, "RTPO_FAULT_TRACE": str(trace)}, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return out, read_trace(trace)


def read_trace(path: Path) -> list[tuple[float, str]]:
    if not path.exists():
        return []
    return [(float(t), rest.strip()) for t, rest in (line.split(maxsplit=1) for line in path.read_text().splitlines())]


def strip_times(rec: dict) -> dict:
    return {k: v for k, v in rec.items() if k not in TIME_KEYS}


def snapshot(run: Path) -> dict:
    """What a run leaves: every file's path, the bytes of final/ (weights, config, tokenizer) and
    checkpoint/, metrics and summary without their wall-clock fields."""
    files = sorted(str(p.relative_to(run)) for p in run.rglob("*") if p.is_file() and p.name != ".rtpo-job")
    blobs = {f: (run / f).read_bytes() for f in files if f.startswith("final/")}
    ckpt = [f for f in files if f.startswith("checkpoint/")]
    metrics = [strip_times(json.loads(x)) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return {"files": files, "final": blobs, "checkpoint": ckpt, "metrics": metrics,
            "summary": strip_times(json.loads((run / "summary.json").read_text()))}


def assert_same_result(run: Path, ref: dict, what: str) -> None:
    got = snapshot(run)
    assert got["files"] == ref["files"], (what, sorted(set(got["files"]) ^ set(ref["files"])))
    for f, b in ref["final"].items():
        assert got["final"][f] == b, (what, f"{f} differs from the uninterrupted run")
    assert got["metrics"] == ref["metrics"], what
    assert got["summary"] == ref["summary"], what


def phase_at_kill(trace: list[tuple[float, str]]) -> str:
    """Where a killed run was: inside a checkpoint write, inside final/, or elsewhere."""
    if not trace:
        return "start-up"
    last = trace[-1][1].split()[0]
    if last in WRITE_POINTS:
        return "checkpoint write"
    return {"step-begin": "training step", "final-begin": "final/ write", "final-exported": "final/ write",
            "final-end": "summary.json write"}.get(last, "between writes")


@pytest.mark.slow
def test_sigkill_at_random_moments_then_rerun_matches_uninterrupted_run(setup, server, reference, tmp_path):
    """SIGKILL `rtpo train` at 28 moments (half at uniformly random times over the whole run, a
    third at random offsets inside a checkpoint write, a sixth inside the final/ write, both
    widened by RTPO_FAULT_DELAY), rerun the same command each time without touching anything: the
    result is the uninterrupted run's -- the same files (no stray temporaries), final/ byte for
    byte, metrics and summary but for wall-clock fields. (~2 min on 2 busy cores)"""
    d = setup
    ref = snapshot(reference[0])
    assert ref["checkpoint"] == [f"checkpoint/step-{STEPS - 1:08d}/{f}"
                                 for f in ("engine.pt", "metrics.jsonl", "rtpo-manifest.json", "state.json")]
    # a forked run without write delays: the same result as the plain subprocess; its wall time
    # is the span of the uniformly random kill times
    out = tmp_path / "forked" / "run"
    r = server.run(train_argv(d, out), out.parent / "trace", out.parent / "log", delay=0.0)
    assert r["rc"] == 0, (out.parent / "log").read_text()[-3000:]
    assert_same_result(out, ref, "forked, uninterrupted")
    wall = r["wall"]
    rng = random.Random(20)
    kills, outcomes = 0, {}
    trial = 0
    while kills < 28 and trial < 40:
        out = tmp_path / f"t{trial}" / "run"
        trace = out.parent / "trace"
        if trial % 2 == 0:  # a random time over the whole run (start-up, steps, writes as they are)
            kill, delay = {"signal": "KILL", "at": rng.uniform(0.0, wall)}, 0.0
        elif (trial // 2) % 3 < 2:  # a random moment inside the (widened) checkpoint write of a random step
            kill = {"signal": "KILL", "after": f"ckpt-begin {rng.randrange(STEPS)}", "delay": rng.uniform(0, 4 * DELAY)}
            delay = DELAY
        else:                 # final/ exported, not yet renamed into place
            kill, delay = {"signal": "KILL", "after": "final-exported", "delay": rng.uniform(0, DELAY)}, DELAY
        r = server.run(train_argv(d, out), trace, out.parent / "killed.log", kill=kill, delay=delay)
        trial += 1
        if r["rc"] != -signal.SIGKILL:  # it finished before the kill: not a kill point
            assert r["rc"] == 0, (out.parent / "killed.log").read_text()[-3000:]
            continue
        kills += 1
        phase = phase_at_kill(read_trace(trace))
        outcomes[phase] = outcomes.get(phase, 0) + 1
        rerun_trace = out.parent / "trace-rerun"
        r2 = server.run(train_argv(d, out), rerun_trace, out.parent / "rerun.log", delay=0.0)
        assert r2["rc"] == 0, (kill, phase, (out.parent / "rerun.log").read_text()[-3000:])
        assert_same_result(out, ref, f"trial {trial - 1}: killed at {kill} ({phase})")
        # the rerun resumed where the newest complete checkpoint was (not from scratch, unless none)
        begun = [e for _, e in read_trace(rerun_trace) if e.startswith("step-begin")]
        killed_trace = [e for _, e in read_trace(trace)]
        saved = [int(e.split()[1]) for e in killed_trace if e.startswith("ckpt-renamed")]
        expect = {max(saved) + 1 if saved else 0}
        if killed_trace and killed_trace[-1].startswith("ckpt-files"):  # killed around the rename itself
            expect.add(int(killed_trace[-1].split()[1]) + 1)
        first = int(begun[0].split()[1]) if begun else STEPS
        assert first in expect, (kill, phase, begun, killed_trace)
    print(f"\nfault injection: {kills} SIGKILLs in {trial} trials (run: {wall:.1f} s forked); where: {outcomes}")
    assert kills >= 20, (kills, trial)
    assert outcomes.get("checkpoint write", 0) >= 9 and outcomes.get("final/ write", 0) >= 4, outcomes


@pytest.mark.parametrize("sig", ["TERM", "USR1"])
def test_sigterm_saves_a_checkpoint_and_exits_143(setup, server, reference, tmp_path, sig):
    """SIGTERM during step 1 (Slurm's time limit, preemption), or SIGUSR1 (a warning signal ahead of
    it, `sbatch --signal=USR1@N`): the step is finished, checkpointed, the run exits 143 naming the
    checkpoint; the same command resumes at step 2 and ends as the uninterrupted run."""
    d = setup
    ref = snapshot(reference[0])
    out = tmp_path / "run"
    trace = tmp_path / "trace"
    r = server.run(train_argv(d, out), trace, tmp_path / "term.log",
                   kill={"signal": sig, "after": "step-begin 1", "delay": 0.0}, delay=0.0)
    log = (tmp_path / "term.log").read_text()
    assert r["rc"] == 143, log[-3000:]
    assert f"stopped by SIG{sig} after step 1 of 3; checkpoint saved: " in log and "step-00000001" in log, log[-2000:]
    assert sorted(p.name for p in (out / "checkpoint").iterdir()) == ["step-00000001"]
    assert not (out / "summary.json").exists() and not (out / "final").exists()
    r = server.run(train_argv(d, out), tmp_path / "trace2", tmp_path / "rerun.log", delay=0.0)
    assert r["rc"] == 0, (tmp_path / "rerun.log").read_text()[-3000:]
    assert [e for _, e in read_trace(tmp_path / "trace2") if e.startswith("step-begin")] == ["step-begin 2"]
    assert_same_result(out, ref, f"SIG{sig} at step 1")


# ------------------------------------------------------------------------------------------------
# corrupt inputs: exit 2, a message naming the file and what is wrong, nothing else changed
# ------------------------------------------------------------------------------------------------

# ------------------------------------------------------------------------------------------------
# several seeds of one cell in one process (rtpo train --seed 0 1 --out .../seed{seed})
# ------------------------------------------------------------------------------------------------

def seeds_argv(d: Path, pattern: str, seeds=(0, 1), guard: bool = False, *sets: str) -> list[str]:
    """`rtpo train` of `seeds` into `pattern`; guard: as a DAG job (`--job-guard`: the runs' stamps, from their
    run.json); sets: `--set` overrides."""
    argv = train_argv(d, Path(pattern))
    i = argv.index("--seed")
    argv[i + 1:i + 2] = [str(s) for s in seeds]
    return argv + (["--job-guard"] if guard else []) + [x for s in sets for x in ("--set", s)]


@pytest.fixture(scope="module")
def seed1_alone(setup, tmp_path_factory):
    """Seed 1 trained alone, a plain subprocess (seed 0 alone is `reference`)."""
    out = tmp_path_factory.mktemp("seed1") / "run"
    argv = train_argv(setup, out)
    argv[argv.index("--seed") + 1] = "1"
    r = subprocess.run([sys.executable, "-m", "rtpo.cli", *argv], cwd=ROOT, capture_output=True, text=True,
                       env={**os.environ, **ENV}, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def two_seeds(setup, server, tmp_path_factory):
    """Seeds 0 and 1 of the cell in one process, as a DAG job runs them (--job-guard, per-seed logs)."""
    root = tmp_path_factory.mktemp("two_seeds")
    argv = seeds_argv(setup, str(root / "seed{seed}"), guard=True) + ["--log", str(root / "logs" / "seed{seed}.log")]
    r = server.run(argv, root / "trace", root / "job.log", delay=0.0)
    assert r["rc"] == 0, (root / "job.log").read_text()[-3000:]
    return root


def test_seeds_in_one_process_equal_each_seed_alone(two_seeds, reference, seed1_alone):
    """Each seed of a multi-seed job is bit for bit the run that seed gives alone: final/ byte for byte,
    metrics and summary but for wall-clock fields (its own engine, RNG streams, envs and files)."""
    assert_same_result(two_seeds / "seed0", snapshot(reference[0]), "seed 0 of a two-seed job")
    assert_same_result(two_seeds / "seed1", snapshot(seed1_alone), "seed 1 of a two-seed job")
    for s in (0, 1):   # each seed's own log names it; the job's log holds both
        log = (two_seeds / "logs" / f"seed{s}.log").read_text()
        assert f"seed{s}" in log and f"seed{1 - s}:" not in log and f"train rtpo/airline/seed{1 - s}" not in log
        stamp = json.loads((two_seeds / f"seed{s}" / "run.json").read_text())["stamp"]   # the job stamp: run.json's
        assert (two_seeds / f"seed{s}" / ".rtpo-job").read_text().split() == [stamp, "complete"]
    assert "seed 1 (2 of 2)" in (two_seeds / "job.log").read_text()


@pytest.mark.slow
def test_sigkill_in_a_multi_seed_job_then_rerun_resumes_every_seed(setup, server, two_seeds, tmp_path):
    """A two-seed job SIGKILLed in seed 1's first step, rerun as the same job (Snakemake's rerun of the failed
    job: the same runs, the same stamps): seed 0 resumes from its last checkpoint (no step is trained again)
    and seed 1 from scratch; both end as the uninterrupted job's. A rerun whose stamp differs (an input made
    under other settings: the base model's SFT) trains every seed from scratch."""
    ref = {s: snapshot(two_seeds / f"seed{s}") for s in (0, 1)}
    root = tmp_path / "job"
    trace = tmp_path / "trace"
    kill = {"signal": "KILL", "after": "summary-end", "delay": 0.3}   # seed 0 done: seed 1 has begun
    r = server.run(seeds_argv(setup, str(root / "seed{seed}"), guard=True), trace, tmp_path / "killed.log",
                   kill=kill, delay=0.0)
    assert r["rc"] == -signal.SIGKILL, (tmp_path / "killed.log").read_text()[-3000:]
    stamp = json.loads((root / "seed0" / "run.json").read_text())["stamp"]
    assert (root / "seed0" / ".rtpo-job").read_text().split() == [stamp, "running"]  # the job did not finish
    rerun = tmp_path / "trace-rerun"
    r = server.run(seeds_argv(setup, str(root / "seed{seed}"), guard=True), rerun, tmp_path / "rerun.log", delay=0.0)
    assert r["rc"] == 0, (tmp_path / "rerun.log").read_text()[-3000:]
    for s in (0, 1):
        assert_same_result(root / f"seed{s}", ref[s], f"seed {s} after a killed two-seed job")
    begun = [e for _, e in read_trace(rerun) if e.startswith("step-begin")]
    assert len(begun) <= STEPS, begun   # seed 0 was not trained again
    fresh = tmp_path / "trace-fresh"
    r = server.run(seeds_argv(setup, str(root / "seed{seed}"), (0, 1), True, "sft.imperfection=0.5"), fresh,
                   tmp_path / "fresh.log", delay=0.0)
    assert r["rc"] == 0
    assert [e for _, e in read_trace(fresh) if e.startswith("step-begin")] == [f"step-begin {i}" for i in range(STEPS)] * 2


def test_corrupt_checkpoint_of_one_seed_fails_that_seed_only(setup, one_step_run, tmp_path, capsys):
    """Seed 0's checkpoint damaged, seed 1 untouched: the job trains seed 1 to the end, then exits 2
    naming seed 0's file; seed 0's checkpoint and records stay as they were."""
    root = tmp_path / "job"
    out0 = Path(shutil.copytree(one_step_run, root / "seed0"))
    (out0 / "summary.json").unlink()
    ck = out0 / "checkpoint" / "step-00000000"
    flip_tensor_byte(ck / "engine.pt")
    before = tree(out0)
    argv = seeds_argv(setup, str(root / "seed{seed}"))
    argv[argv.index("--method") + 1] = "grpo"
    rc, err = run_cli(argv, capsys)
    assert rc == 2, err
    assert "1 of 2 seeds failed (seed 0: " in err and str(ck) in err and "seeds that finished: 1" in err, err
    assert tree(out0) == before
    assert json.loads((root / "seed1" / "summary.json").read_text())["seed"] == 1
    assert (root / "seed1" / "final" / "config.json").exists()
    got = [json.loads(x) for x in (root / "seed1" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in got] == list(range(STEPS)) and {r["seed"] for r in got} == {1}


def run_cli(argv: list[str], capsys) -> tuple[int, str]:
    from rtpo.cli import main

    rc = main(argv)
    return rc, capsys.readouterr().err


def tree(p: Path) -> dict[str, bytes]:
    return {str(f.relative_to(p)): f.read_bytes() for f in sorted(p.rglob("*")) if f.is_file()}


@pytest.fixture()
def model_copy(setup, tmp_path):
    return Path(shutil.copytree(setup / "model", tmp_path / "model"))


def test_truncated_model_file_names_it(setup, model_copy, tmp_path, capsys):
    """`rtpo train --model DIR` with a truncated model.safetensors (an interrupted copy): exit 2,
    the file and its sizes named; an existing run directory is left as it was."""
    w = model_copy / "model.safetensors"
    size = w.stat().st_size
    w.write_bytes(w.read_bytes()[: size // 2])
    out = tmp_path / "run"
    (out / "checkpoint" / "step-00000000").mkdir(parents=True)
    (out / "checkpoint" / "step-00000000" / "state.json").write_text('{"step": 0}')
    (out / "metrics.jsonl").write_text('{"step": 0}\n')
    before = tree(out)
    argv = train_argv(setup, out)
    argv[argv.index("--model") + 1] = str(model_copy)
    rc, err = run_cli(argv, capsys)
    assert rc == 2
    assert f"rtpo train: error: {w}: truncated safetensors file: {size // 2} bytes, but its header describes {size}" in err, err
    assert tree(out) == before


def test_corrupt_model_header_names_it(setup, model_copy, tmp_path, capsys):
    """`rtpo evaluate --model DIR` with garbage at the start of model.safetensors, or a config.json
    cut short: exit 2 naming the file; the existing eval JSON is not overwritten."""
    out = tmp_path / "eval.json"
    out.write_text('{"old": true}')
    argv = ["evaluate", "--model", str(model_copy), "--method", "rtpo", "--task", "airline", "--config",
            str(ROOT / "config" / "smoke.yaml"), "--eval-file", str(setup / "data" / "eval.jsonl"), "--out", str(out)]
    w = model_copy / "model.safetensors"
    data = w.read_bytes()
    w.write_bytes(struct.pack("<Q", 40) + b"{not json at all, a damaged header}....." + data[48:])
    rc, err = run_cli(argv, capsys)
    assert rc == 2 and f"rtpo evaluate: error: {w}: corrupt safetensors file: its header is not JSON" in err, err
    w.write_bytes(data)
    cfg = model_copy / "config.json"
    cfg.write_text(cfg.read_text()[:40])
    rc, err = run_cli(argv, capsys)
    assert rc == 2 and f"rtpo evaluate: error: {cfg}: corrupt JSON (" in err, err
    assert out.read_text() == '{"old": true}'


@pytest.fixture(scope="module")
def one_step_run(setup, tmp_path_factory):
    """A complete one-step grpo run (final/, summary.json, checkpoint/step-00000000): rerun with
    train_argv's 3 steps, it resumes from that checkpoint."""
    from rtpo.config import load_config
    from rtpo.train import train

    out = tmp_path_factory.mktemp("one_step") / "run"
    cfg = load_config(ROOT / "config" / "smoke.yaml", SETS[1:] + ["train.steps=1"])
    train("grpo", "airline", cfg, 0, out, setup / "model", setup / "data" / "train.jsonl", progress=False)
    return out


def test_corrupt_checkpoint_names_it_and_changes_nothing(setup, one_step_run, tmp_path, capsys):
    """A damaged engine.pt in the newest checkpoint (a disk fault; a kill cannot do it): the rerun
    exits 2 naming the checkpoint and how to start over; metrics.jsonl and the checkpoint stay."""
    out = Path(shutil.copytree(one_step_run, tmp_path / "run"))
    (out / "summary.json").unlink()
    ck = out / "checkpoint" / "step-00000000"
    (ck / "engine.pt").write_bytes((ck / "engine.pt").read_bytes()[:5000])
    before = tree(out)
    argv = train_argv(setup, out, method="grpo")
    rc, err = run_cli(argv, capsys)
    assert rc == 2, err
    assert (f"rtpo train: error: {ck / 'engine.pt'}: truncated or corrupt torch file (not a complete zip "
            f"archive); cannot resume from the checkpoint {ck}: delete {out / 'checkpoint'} to train this run "
            "from scratch") in err, err
    assert tree(out) == before


def test_corrupt_task_jsonl_names_file_and_line(setup, tmp_path, capsys):
    """A train.jsonl cut in the middle of a line: exit 2 naming file and line; no run files written."""
    src = (setup / "data" / "train.jsonl").read_text().splitlines()
    bad = tmp_path / "train.jsonl"
    bad.write_text("\n".join(src[:2]) + "\n" + src[2][: len(src[2]) // 2])
    out = tmp_path / "run"
    argv = train_argv(setup, out)
    argv[argv.index("--train-file") + 1] = str(bad)
    rc, err = run_cli(argv, capsys)
    assert rc == 2
    assert f"rtpo train: error: {bad}:3: not a task (JSONDecodeError: " in err, err
    assert not out.exists() or not any(out.iterdir())


# ------------------------------------------------------------------------------------------------
# nothing wrong is read silently -- typed task rows, checksummed checkpoints and models
# ------------------------------------------------------------------------------------------------

def flip_tensor_byte(path: Path) -> None:
    """Flip one bit in the middle of the largest member of a torch zip file (engine.pt's biggest
    tensor): the archive still reads, only that member's CRC and the file's sha256 change."""
    import zipfile

    with zipfile.ZipFile(path) as z:
        info = max(z.infolist(), key=lambda i: i.file_size)
    assert info.compress_type == zipfile.ZIP_STORED
    data = bytearray(path.read_bytes())
    name_len, extra_len = struct.unpack("<HH", data[info.header_offset + 26:info.header_offset + 30])
    data[info.header_offset + 30 + name_len + extra_len + info.file_size // 2] ^= 0x10
    path.write_bytes(bytes(data))


def flip_safetensors_byte(path: Path) -> None:
    """Flip one bit in the middle of a safetensors file's tensor data (its header stays valid)."""
    data = bytearray(path.read_bytes())
    (n,) = struct.unpack("<Q", data[:8])
    data[8 + n + (len(data) - 8 - n) // 2] ^= 0x10
    path.write_bytes(bytes(data))


def _rows(kind: str) -> list[dict]:
    from rtpo.data import generate_tasks

    return [t.to_dict() for t in generate_tasks(kind, 3, 0, "train")]


def _first_flight(row: dict) -> str:
    return sorted(row["meta"]["db"]["flights"])[0]


def _set(path: str, value):
    """A row edit: set the dotted `path` ("meta.corpus_seed", "answers") to `value`."""
    def edit(row: dict) -> None:
        *parents, last = path.split(".")
        for p in parents:
            row = row[p]
        row[last] = value
    return edit


def _paper_row(**meta) -> dict:
    """A row as rtpo.data.paper writes a QA benchmark's (adapters' Task, meta retriever + row)."""
    return {"id": "hotpotqa-5a8b57f25542995d1e6f1371", "kind": "search", "question": "Which city is the capital?",
            "answers": ["Lumen", "lumen city"], "tier": "easy", "split": "test", "source": "hotpotqa",
            "meta": {"retriever": {"kind": "http", "url": "auto", "index": "/x/bm25"}, "row": 0, **meta}}


# (task, 1-based line of the bad row, edit of that row, what the error says after `<file>:<line>: `)
ROW_CASES = {
    "answers int": ("math", 2, _set("answers", 1818),
                    "field 'answers': expected a non-empty list of non-empty strings, got int"),
    "question list": ("math", 1, _set("question", ["a"]), "field 'question': expected a non-empty string, got list"),
    "question empty": ("math", 3, _set("question", "  "),
                       "field 'question': expected a non-empty string, got an empty string"),
    "answer empty": ("search", 3, _set("answers", ["Tarnwick", ""]),
                     "field 'answers': expected a non-empty list of non-empty strings, got an empty string at index 1"),
    "no answers": ("math", 2, _set("answers", []),
                   "field 'answers': expected a non-empty list of non-empty strings, got an empty list"),
    "corpus seed str": ("search", 1, _set("meta.corpus_seed", "0"), "field 'meta.corpus_seed': expected an integer, got str"),
    "price nan": ("airline", 2, lambda r: _set(f"meta.db.flights.{_first_flight(r)}.price", float("nan"))(r),
                  "field 'meta.db.flights.{flight}.price': expected a finite number, got nan"),
    "seats str": ("airline", 1, lambda r: _set(f"meta.db.flights.{_first_flight(r)}.seats", "3")(r),
                  "field 'meta.db.flights.{flight}.seats': expected an integer >= 0, got str"),
    "goal fails": ("airline", 3, lambda r: _set("meta.goal.actions", [["cancel", {"reservation_id": "R1"}]])(r),
                   "field 'meta.goal': airline task {id}: goal action #0 cancel{{'reservation_id': 'R1'}} fails: "
                   "Error: no reservation R1."),
    "tier": ("math", 1, _set("tier", "extreme"), "field 'tier': expected one of easy, medium, hard, got 'extreme'"),
    "unknown field": ("math", 2, _set("answer", "3"), "field 'answer': unknown field (a task row has id, kind, "),
    "missing field": ("math", 2, lambda r: r.pop("question"), "field 'question': missing (a task row needs id, "
                                                               "kind, question, answers)"),
    "other kind": ("math", 3, _set("kind", "search"),
                   "field 'kind': expected 'math' (the task this job runs), got 'search'"),
    "duplicate id": ("math", 3, lambda r: r.update(id="math-train-s0-00000"),
                     "field 'id': duplicate id 'math-train-s0-00000' (first at line 1)"),
    "paper retriever kind": ("search", 2, lambda r: r.update(_paper_row(retriever={"kind": "htp"})),
                             "field 'meta.retriever.kind': expected one of bm25, bm25_index, dense_index, http, "
                             "serpapi, got 'htp'"),
    "paper retriever key": ("search", 3, lambda r: r.update(_paper_row(retriever={"kind": "http", "urll": "auto"})),
                            "field 'meta.retriever.urll': unknown key (known: backoff_s, cache, "),
    "paper meta not object": ("search", 1, lambda r: r.update(_paper_row(), meta=[1]),
                              "field 'meta': expected an object, got list"),
}


@pytest.mark.parametrize("case", sorted(ROW_CASES))
def test_bad_task_row_names_file_line_field_and_changes_nothing(case, setup, reference, tmp_path, capsys):
    """A mistyped row (an int `answers`, a list `question`, an empty string, NaN, a goal that cannot
    be applied, a paper-adapter row with a bad backend, ...) fails `rtpo train` at load with exit 2
    and `<file>:<line>: field '<field>': expected <type>, got <type>`; a complete run in --out is left
    byte for byte as it was (before: a TypeError steps into training, or a silent run)."""
    task, line, edit, message = ROW_CASES[case]
    rows = _rows(task)
    row = rows[line - 1]
    flight = _first_flight(row) if task == "airline" else ""
    edit(row)
    bad = tmp_path / "train.jsonl"
    bad.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = Path(shutil.copytree(reference[0], tmp_path / "run"))
    before = tree(out)
    argv = train_argv(setup, out)
    argv[argv.index("--train-file") + 1] = str(bad)
    argv[argv.index("--task") + 1] = task
    rc, err = run_cli(argv, capsys)
    assert rc == 2, err
    assert f"rtpo train: error: {bad}:{line}: {message.format(flight=flight, id=row['id'])}" in err, err
    assert tree(out) == before


def test_bad_eval_row_fails_evaluate_and_keeps_the_eval_json(setup, model_copy, tmp_path, capsys):
    """`rtpo evaluate` reads its eval split through the same schema: a non-finite number in a row
    is exit 2 naming file, line and field; the existing eval JSON is not overwritten."""
    rows = _rows("airline")
    rows[1]["meta"]["db"]["flights"][_first_flight(rows[1])]["price"] = float("inf")
    bad = tmp_path / "eval.jsonl"
    bad.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "eval.json"
    out.write_text('{"old": true}')
    rc, err = run_cli(["evaluate", "--model", str(model_copy), "--method", "rtpo", "--task", "airline", "--config",
                       str(ROOT / "config" / "smoke.yaml"), "--eval-file", str(bad), "--out", str(out)], capsys)
    assert rc == 2, err
    assert (f"rtpo evaluate: error: {bad}:2: field 'meta.db.flights.{_first_flight(rows[1])}.price': expected a "
            "finite number, got inf") in err, err
    assert out.read_text() == '{"old": true}'


def test_bit_flip_in_checkpoint_tensor_data_fails_and_keeps_final(setup, reference, tmp_path, capsys):
    """One bit flipped inside a tensor of a completed run's engine.pt (the zip archive still reads):
    the rerun exits 2 naming engine.pt and the sha256 mismatch; final/, summary.json, metrics and
    the checkpoint are unchanged (before: exit 0, final/ replaced by weights that were never trained)."""
    out = Path(shutil.copytree(reference[0], tmp_path / "run"))
    ck = out / "checkpoint" / f"step-{STEPS - 1:08d}"
    flip_tensor_byte(ck / "engine.pt")
    before = tree(out)
    rc, err = run_cli(train_argv(setup, out), capsys)
    assert rc == 2, err
    assert f"rtpo train: error: {ck / 'engine.pt'}: sha256 " in err and "that rtpo-manifest.json records: the file " \
        "changed after it was written (a disk or copy fault)" in err, err
    assert f"cannot resume from the checkpoint {ck}: delete {out / 'checkpoint'} to train this run from scratch" in err
    assert tree(out) == before


def _truncate_metrics(ck: Path) -> None:
    m = ck / "metrics.jsonl"
    m.write_text(m.read_text()[: len(m.read_text()) // 2])  # inside its one record


def _restep_metrics(ck: Path) -> None:
    m = ck / "metrics.jsonl"
    m.write_text(m.read_text().replace('"step": 0', '"step": 5'))


# damage of a checkpoint -> what the error names after "rtpo train: error: "
CKPT_CASES = {
    "metrics truncated": (_truncate_metrics, "{ck}/metrics.jsonl:1: corrupt JSON ("),
    "metrics step": (_restep_metrics, "{ck}/metrics.jsonl:1: field 'step': expected the record of step 0, got 5"),
    "no manifest (old format)": (lambda ck: (ck / "rtpo-manifest.json").unlink(),
                                 "{ck}/rtpo-manifest.json: missing: the directory carries no checksums (written "
                                 "before manifests existed, or damaged), so it cannot be verified"),
    "state changed": (lambda ck: (ck / "state.json").write_text((ck / "state.json").read_text() + " "),
                      "{ck}/state.json: "),
    "file added": (lambda ck: (ck / "extra.pt").write_bytes(b"x"),
                   "{ck}/extra.pt: not listed in {ck}/rtpo-manifest.json"),
}


@pytest.mark.parametrize("case", sorted(CKPT_CASES))
def test_damaged_checkpoint_fails_before_training(case, setup, one_step_run, tmp_path, capsys):
    """The checkpoint's metrics.jsonl cut inside its record (the issue's case: before, every
    remaining step trained, final/ was replaced, then exit 2 without a file name and no summary),
    records of the wrong step, a checkpoint without checksums (the format before checksums: refused,
    it cannot be told from a damaged one), a changed or an added file: exit 2 naming the file before
    any step; final/ and summary.json of the complete one-step run stay as they were."""
    damage, message = CKPT_CASES[case]
    out = Path(shutil.copytree(one_step_run, tmp_path / "run"))
    ck = out / "checkpoint" / "step-00000000"
    damage(ck)
    before = tree(out)
    rc, err = run_cli(train_argv(setup, out, method="grpo"), capsys)
    assert rc == 2, err
    assert f"rtpo train: error: {message.format(ck=ck)}" in err, err
    assert f"cannot resume from the checkpoint {ck}" in err
    assert tree(out) == before


def test_final_dir_is_verified_before_evaluation(setup, reference, tmp_path, capsys):
    """final/ carries the checksums of its files: a flipped bit in model.safetensors' tensor data
    (its header still valid) fails `rtpo evaluate` with exit 2 naming the file; the existing eval
    JSON stays. An intact copy evaluates."""
    final = Path(shutil.copytree(reference[0] / "final", tmp_path / "final"))
    assert (final / "rtpo-manifest.json").exists()
    out = tmp_path / "eval.json"
    out.write_text('{"old": true}')
    argv = ["evaluate", "--model", str(final), "--method", "rtpo", "--task", "airline", "--config",
            str(ROOT / "config" / "smoke.yaml"), "--eval-file", str(setup / "data" / "eval.jsonl"), "--out", str(out),
            "--set", "eval.samples=1", "--set", "env.airline.max_turns=2"]
    flip_safetensors_byte(final / "model.safetensors")
    rc, err = run_cli(argv, capsys)
    assert rc == 2, err
    assert f"rtpo evaluate: error: {final / 'model.safetensors'}: sha256 " in err, err
    assert out.read_text() == '{"old": true}'
    shutil.copy2(reference[0] / "final" / "model.safetensors", final / "model.safetensors")
    rc, err = run_cli(argv, capsys)
    assert rc == 0, err
    assert json.loads(out.read_text())["overall"]["samples"] == 2


def test_base_model_carries_checksums_that_train_verifies(setup, tmp_path, capsys):
    """`rtpo base-model` (rtpo.sft.build_base_model) writes the directory whole with its manifest;
    a flipped bit in its weights fails `rtpo train --model` with exit 2 naming the file, before
    anything is written."""
    from rtpo.inputs import verify_manifest
    from rtpo.sft import build_base_model
    from rtpo.tokenizer import save_tokenizer

    save_tokenizer(tiny.tokenizer(), tmp_path / "tok")
    cfg = {"tasks": [], "model": {"source": "tiny", "threads": 1,
                                  "tiny": {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "num_kv_heads": 1,
                                           "intermediate_size": 64, "max_position": 256}},
           "sft": {"epochs": 0, "lr": 1e-3}}
    base = tmp_path / "base"
    build_base_model(cfg, tmp_path, tmp_path / "tok", base)
    assert verify_manifest(base, required=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base", "tok"]  # no temporary left
    flip_safetensors_byte(base / "model.safetensors")
    out = tmp_path / "run"
    argv = train_argv(setup, out)
    argv[argv.index("--model") + 1] = str(base)
    rc, err = run_cli(argv, capsys)
    assert rc == 2, err
    assert f"rtpo train: error: {base / 'model.safetensors'}: sha256 " in err, err
    assert not out.exists()


def test_corrupt_parquet_names_the_file(tmp_path):
    """A parquet benchmark file cut short (rtpo.data.adapters, which `rtpo data` reads every
    benchmark and training set through): a ValueError (exit 2 in `rtpo`) naming the file."""
    import pandas as pd

    from rtpo.data.adapters import AdapterError, load_benchmark

    p = tmp_path / "test.parquet"
    pd.DataFrame({"problem": ["1+1?", "2+2?"], "answer": ["2", "4"]}).to_parquet(p)
    p.write_bytes(p.read_bytes()[:-30])
    with pytest.raises(AdapterError) as e:
        load_benchmark("math500", p)
    assert isinstance(e.value, ValueError)
    assert str(e.value).startswith(f"file {p}: unreadable parquet file (ArrowInvalid: "), str(e.value)


def test_set_errors_name_the_set_argument(tmp_path):
    """An invalid `--set` is reported against the --set argument, not the (valid) config file; an
    invalid file is still reported against the file."""
    from rtpo.config import ConfigError, load_config

    smoke = ROOT / "config" / "smoke.yaml"
    cases = [(["method.rtpo.group_size=3", "train.lrr=1"],
              "--set train.lrr=1: invalid config at 'train': Additional properties are not allowed ('lrr' was unexpected)"),
             (["env.math.psi=qwen4"], "--set env.math.psi=qwen4: invalid config at 'env.math.psi': 'qwen4' does not match"),
             (["train.lr=[1,"], "--set train.lr=[1,: the value '[1,' is not valid YAML ("),
             (["train.lr.x=1"], "--set train.lr.x=1: override 'train.lr.x': 'lr' is not a mapping")]
    for sets, message in cases:
        with pytest.raises(ConfigError) as e:
            load_config(smoke, sets)
        assert str(e.value).startswith(message), str(e.value)
        assert "group_size" not in str(e.value)  # the valid --set is not blamed
    bad = tmp_path / "bad.yaml"
    bad.write_text(smoke.read_text().replace("  lr: 2.0e-4\n", "  lr: fast\n", 1))
    with pytest.raises(ConfigError, match=rf"^{bad}: invalid config at 'train.lr'"):
        load_config(bad, ["train.steps=3"])


# ------------------------------------------------------------------------------------------------
# the atomic helpers
# ------------------------------------------------------------------------------------------------

def test_atomic_dir_replaces_whole_or_not_at_all(tmp_path):
    from rtpo.atomic import atomic_dir, atomic_path, atomic_write_text

    final = tmp_path / "final"
    with atomic_dir(final) as t:
        (t / "a").write_text("1")
    with pytest.raises(RuntimeError):
        with atomic_dir(final) as t:
            (t / "a").write_text("2")
            raise RuntimeError("killed half way")
    assert (final / "a").read_text() == "1" and sorted(p.name for p in tmp_path.iterdir()) == ["final"]
    # what a SIGKILLed write leaves; its pid is above Linux's pid_max limit (2**22), so no process holds it
    # (a small pid such as 99 may be alive on the machine running the test, and its temporary is then kept)
    dead = 2**22 + 1
    stray = tmp_path / f".final.tmp-{dead}-deadbeef"
    stray.mkdir()
    with atomic_dir(final) as t:
        (t / "b").write_text("3")
    assert sorted(p.name for p in final.iterdir()) == ["b"] and not stray.exists()
    f = tmp_path / "summary.json"
    (tmp_path / f".summary.json.tmp-{dead}-0").write_text("{")
    atomic_write_text(f, "{}")
    with atomic_path(tmp_path / "fig.png") as t:
        assert t.suffix == ".png" and t.parent == tmp_path
        t.write_bytes(b"png")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fig.png", "final", "summary.json"]


# ------------------------------------------------------------------------------------------------
# the workflow: dry runs write nothing; resources cannot misroute; Slurm time limits resume
# ------------------------------------------------------------------------------------------------

FAKE_SLURM = ROOT / "tests" / "fake_slurm"
SLURM_ENV = {"RTPO_SLURM_ACCOUNT": "rtpo_test", "RTPO_SLURM_PARTITION": "cpu", "RTPO_SLURM_GPU_PARTITION": "gpu"}


def git_status(repo: Path) -> str:
    return subprocess.run(["git", "status", "--porcelain", "--ignored", "--untracked-files=all"], cwd=repo,
                          capture_output=True, text=True, check=True).stdout


def test_dry_run_leaves_git_status_unchanged(tmp_path):
    """`snakemake -n` (CPU default, smoke, one target) writes nothing: `git status --ignored` of a
    repository holding the workflow, configs and .gitignore is the same before and after -- but for
    Snakemake's own IO cache, .snakemake/iocache/latest.pkl, which Snakemake writes in every dry run
    (snakemake/dag.py) and the first one creates."""
    repo = workflow_copy(tmp_path / "repo")
    shutil.copy2(ROOT / ".gitignore", repo / ".gitignore")
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    before = git_status(repo)
    assert "A  config/smoke.yaml" in before and "!!" not in before
    for i, args in enumerate((["-n"], ["-n", "--configfile", "config/smoke.yaml"],
                              ["-n", "tables", "--configfile", "config/smoke.yaml"])):
        r = run_snakemake(repo, *args)
        assert r.returncode == 0 and "This was a dry-run" in r.stdout, (args, (r.stdout + r.stderr)[-2000:])
        after = git_status(repo)
        if i == 0:
            assert after == before + "!! .snakemake/iocache/latest.pkl\n", after
            before = after
        assert after == before, (args, after)
    assert not (repo / "results").exists()


def test_command_line_set_resources_cannot_send_gpu_jobs_to_the_cpu_partition(tmp_path):
    """A one-rule --set-resources on the command line replaces the profile's whole set-resources
    (Snakemake, not merged): the workflow refuses to start, naming the rules left without a GPU.
    The README's way -- a copy of the workflow profile, edited, given with --workflow-profile -- changes
    the runtime and keeps the GPUs (and the site profile's account and partitions)."""
    work = workflow_copy(tmp_path / "wf")
    r = run_snakemake(work, "--profile", "slurm", "-n", "--set-resources", "train_rtpo:runtime=2880", env=SLURM_ENV)
    out = r.stdout + r.stderr
    assert r.returncode != 0
    assert ("no GPU requested for train_arpo, train_grpo, train_rtpo, train_rtpo_ca, train_seeupo, train_tree_grpo, "
            "evaluate_run, ablation_train, ablation_evaluate under a Slurm profile with engine: verl") in out, out[-2000:]
    assert "replaces the profile's whole set-resources section" in out
    assert not (work / "results").exists()
    # cp -r workflow/profiles/default long-jobs
    shutil.copytree(work / "workflow" / "profiles" / "default", work / "long-jobs")
    prof = work / "long-jobs" / "profile.yaml"
    assert prof.read_text().count("runtime: 1440") == 1
    prof.write_text(prof.read_text().replace("runtime: 1440", "runtime: 2880"))
    r = run_snakemake(work, "--profile", "slurm", "--workflow-profile", "long-jobs", "-n", env=SLURM_ENV)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    jobs = {}
    for block in r.stdout.split("\nrule ")[1:]:
        jobs.setdefault(block.split(":", 1)[0], block)
    for rule in ("train_rtpo", "train_grpo", "ablation_train"):
        res = re.search(r"resources: (.*)", jobs[rule]).group(1)
        assert "runtime=2880" in res and "gpu=8" in res and "slurm_partition=gpu" in res, (rule, res)
    ev = re.search(r"resources: (.*)", jobs["evaluate_run"]).group(1)
    assert re.search(r"\bgpu=[1-9]", ev) and "slurm_partition=gpu" in ev, ev


@pytest.mark.slow
def test_slurm_time_limit_then_retry_resumes_with_the_same_result(smoke_results, tmp_path):
    """The real Slurm executor plugin against the fake Slurm: the first attempt of a training job is
    killed as at its time limit (SIGTERM to every process of the job during step 0, SIGKILL after
    the grace time), Snakemake's retry (profile `retries`) resumes from the checkpoint the
    SIGTERM saved, and the run ends as the smoke DAG's uninterrupted one. (~1-2 min)"""
    work = copy_workdir(smoke_results, tmp_path / "work")
    state, trace = tmp_path / "slurm_state", tmp_path / "trace"
    state.mkdir()
    cell = "results/runs/airline/rtpo/seed0"
    ref = snapshot(smoke_results / cell)
    env = {"PATH": f"{FAKE_SLURM}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "FAKE_SLURM_DIR": str(state), **SLURM_ENV, "RTPO_FAULT_TRACE": str(trace),
           "FAKE_SLURM_KILL_MATCH": "rule_train_rtpo_", "FAKE_SLURM_KILL_WHEN": f"{trace}:step-begin 0",
           "FAKE_SLURM_KILL_WAIT": "60", "FAKE_SLURM_KILL_STATE": "TIMEOUT"}
    r = run_snakemake(work, f"{cell}/summary.json", "--profile", "slurm", "--configfile", "config/smoke.yaml",
                      "--forcerun", f"{cell}/summary.json", "--slurm-init-seconds-before-status-checks", "1",
                      env=env, timeout=900)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    jobs = [json.loads(p.read_text()) for p in sorted((state / "jobs").glob("*.json"))]
    assert [j["state"] for j in jobs] == ["TIMEOUT", "COMPLETED"], jobs
    assert all("rule_train_rtpo_" in j["opts"]["--comment"] for j in jobs)
    first = jobs[0]
    assert first["rc"] != 0 and "sigkill_at" not in first["killed"], first  # saved and exited within the grace time
    events = [e for _, e in read_trace(trace)]
    # attempt 1: step 0, its checkpoint, stop; attempt 2 resumes at step 1 -- each step ran once
    assert [e for e in events if e.startswith("step-begin")] == ["step-begin 0", "step-begin 1"], events
    assert events.index("ckpt-end 0") < events.index("step-begin 1")
    assert_same_result(work / cell, ref, "killed at the time limit, retried")
    assert (work / cell / ".rtpo-job").read_text().split()[1] == "complete"
