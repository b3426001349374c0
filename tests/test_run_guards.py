"""No run ends "fine" with wrong results: one writer per run directory or eval output,
finite numbers only, resumes that match the run they continue."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from rtpo.config import ConfigError, load_config
from tests.helpers import tiny

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tiny.airline_run_inputs(tmp_path_factory.mktemp("guards"))
    cfg = load_config(ROOT / "config" / "smoke.yaml",
                      ["train.steps=3", "train.checkpoint_every=1", "env.airline.max_turns=2"])
    (d / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    return d, cfg


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONHASHSEED": "0", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1", **extra}


def _train_cmd(d: Path, out: Path, *sets: str) -> list[str]:
    cmd = [sys.executable, "-m", "rtpo.cli", "train", "--config", str(d / "config.yaml"), "--method", "rtpo",
           "--task", "airline", "--seed", "0", "--model", str(d / "model"), "--train-file",
           str(d / "data" / "train.jsonl"), "--out", str(out)]
    for s in sets:
        cmd += ["--set", s]
    return cmd


def _records(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def _holder(target: Path) -> subprocess.Popen:
    """A second process that takes `exclusive(target)` and holds it until killed."""
    code = ("import sys, time; from rtpo.atomic import exclusive\n"
            f"with exclusive({str(target)!r}):\n"
            "    print('locked', flush=True); time.sleep(120)\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=ROOT, env=_env())
    assert p.stdout.readline().strip() == "locked"
    return p


# ------------------------------------------------------------------------------ one writer per run
def test_two_trainers_on_one_out_the_second_is_refused_and_the_first_finishes(setup):
    """The README's command twice on one --out: before the lock, the two interleaved their records
    (two learning rates, steps repeated) or the second resumed the first's checkpoint."""
    d, _ = setup
    out, trace = d / "race", d / "race.trace"
    first = subprocess.Popen(_train_cmd(d, out), cwd=ROOT, env=_env(RTPO_FAULT_TRACE=str(trace), RTPO_FAULT_DELAY="2"),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not (trace.exists() and "step-begin 0" in trace.read_text()):  # the first one holds the lock now
        assert first.poll() is None and time.time() < deadline, first.communicate()
        time.sleep(0.2)
    second = subprocess.run(_train_cmd(d, out, "train.lr=0.00002"), cwd=ROOT, env=_env(), capture_output=True,
                            text=True, timeout=120)
    assert second.returncode == 2, second.stderr
    assert str(out) in second.stderr and f"pid {first.pid}" in second.stderr
    assert "delete" not in second.stderr  # no advice to delete what the live run owns
    _, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    recs = _records(out / "metrics.jsonl")
    assert [r["step"] for r in recs] == [0, 1, 2]
    assert {r["lr"] for r in recs} == {yaml.safe_load(Path(d / "config.yaml").read_text())["train"]["lr"]}
    assert (out / "final" / "config.json").exists()


def test_a_killed_holder_does_not_block_the_rerun(tmp_path):
    from rtpo.atomic import Busy, exclusive, lock_holder

    run = tmp_path / "run"
    holder = _holder(run)
    with pytest.raises(Busy, match=rf"pid {holder.pid}"), exclusive(run):
        pass
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=30)
    with exclusive(run) as locked:  # the kernel released it with the process
        assert lock_holder(locked) == os.getpid()
        with exclusive(run):  # re-entrant within one process (train_seeds, then train of one seed)
            pass
    with exclusive(run):  # and released after the outermost block
        pass


def test_second_evaluator_into_one_eval_json_is_refused(setup):
    from rtpo.atomic import Busy
    from rtpo.evaluate import evaluate

    d, cfg = setup
    out = d / "eval" / "seed0.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text('{"kept": true}')
    holder = _holder(out)
    try:
        with pytest.raises(Busy, match=rf"{out}.*pid {holder.pid}"):
            evaluate(d / "model", "rtpo", "airline", cfg, 0, d / "data" / "eval.jsonl", out)
        assert json.loads(out.read_text()) == {"kept": True}
    finally:
        holder.kill()
        holder.wait()


def test_cleanup_removes_only_dead_writers_temporaries(tmp_path):
    from rtpo.atomic import remove_leftovers

    target = tmp_path / "summary.json"
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    try:
        mine = tmp_path / f".summary.json.tmp-{os.getpid()}-aaaa"
        theirs = tmp_path / f".summary.json.tmp-{live.pid}-bbbb"
        gone = tmp_path / f".summary.json.tmp-{dead.pid}-cccc"
        for p in (mine, theirs, gone):
            p.write_text("x")
        assert sorted(remove_leftovers(target)) == sorted([mine, gone])
        assert theirs.exists()
    finally:
        live.kill()
        live.wait()


# ------------------------------------------------------------------------------ finite numbers only
@pytest.mark.parametrize("override", ["train.lr=.nan", "train.temperature=.inf", "eval.temperature=-.inf",
                                      "method.rtpo.is_clamp=.nan"])
def test_non_finite_config_values_are_refused_naming_the_key(override):
    with pytest.raises(ConfigError, match=rf"'{override.split('=')[0]}'.*not a finite number"):
        load_config(ROOT / "config" / "config.yaml", [override])


def test_cli_refuses_nan_lr_with_exit_2(setup, tmp_path):
    d, _ = setup
    r = subprocess.run(_train_cmd(d, tmp_path / "nan", "train.lr=.nan"), cwd=ROOT, env=_env(), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and "train.lr" in r.stderr and "finite" in r.stderr
    assert not (tmp_path / "nan" / "final").exists()


def test_training_stops_at_the_first_non_finite_step(setup):
    """A NaN that reaches training (here a NaN learning rate past the config check, as an overflow would):
    before the run guards the run exited 0 with every weight of final/ NaN and a bare NaN in metrics.jsonl."""
    from rtpo.train import NonFiniteError, train

    d, cfg = setup
    bad = json.loads(json.dumps(cfg))
    bad["train"]["lr"] = math.nan
    out = d / "nan-run"
    with pytest.raises(NonFiniteError, match=r"step 0: a training weight is NaN"):
        train("grpo", "airline", bad, 0, out, d / "model", d / "data" / "train.jsonl", progress=False)
    assert not (out / "final").exists() and not (out / "summary.json").exists()
    assert not (out / "checkpoint").exists() or not any((out / "checkpoint").iterdir())
    assert not (out / "metrics.jsonl").exists() or (out / "metrics.jsonl").read_text() == ""


def test_jsonl_is_strict_json(tmp_path):
    from rtpo.instrument import JsonlWriter, dumps

    w = JsonlWriter(tmp_path / "m.jsonl")
    w.write({"step": 0, "clip_share": math.nan, "tokens": {"trunk": math.inf}, "mismatch": [{"k": 1, "kl": -math.inf}]})
    line = (tmp_path / "m.jsonl").read_text()
    assert "NaN" not in line and "Infinity" not in line
    assert json.loads(line) == {"step": 0, "clip_share": None, "tokens": {"trunk": None}, "mismatch": [{"k": 1, "kl": None}]}
    assert dumps({"x": [1.0, math.nan]}) == '{"x": [1.0, null]}'


# ------------------------------------------------------------------------------ resumes that match
@pytest.mark.parametrize("change", [("method", "grpo"), ("set", "method.rtpo.group_size=3")])
def test_resume_of_another_run_is_refused_saying_what_differs(setup, change):
    """Before the run guards, `rtpo train --method grpo` on an rtpo run's --out resumed its checkpoint: step 0
    rtpo, steps 1-2 grpo, and the summary said grpo."""
    from rtpo.run_record import RunMismatch
    from rtpo.train import train

    d, cfg = setup
    out = d / f"resume-{change[0]}"
    short = json.loads(json.dumps(cfg))
    short["train"]["steps"] = 1
    train("rtpo", "airline", short, 0, out, d / "model", d / "data" / "train.jsonl", progress=False)
    before = (out / "metrics.jsonl").read_text()
    method, other = "rtpo", json.loads(json.dumps(cfg))
    if change[0] == "method":  # run.json names the run the directory holds
        method = "grpo"
        want = r"run\.json: the run directory holds run \{.*'method': 'rtpo'.*\}, not \{.*'method': 'grpo'"
    else:
        other["method"]["rtpo"]["group_size"] = 3
        want = r"run\.json: the run was trained with other settings \(differ in: method\)"
    with pytest.raises(RunMismatch, match=want):
        train(method, "airline", other, 0, out, d / "model", d / "data" / "train.jsonl", progress=False)
    assert (out / "metrics.jsonl").read_text() == before  # nothing changed
    # the same run with more steps resumes (extending a finished run is allowed)
    train("rtpo", "airline", cfg, 0, out, d / "model", d / "data" / "train.jsonl", progress=False)
    assert [r["step"] for r in _records(out / "metrics.jsonl")] == [0, 1, 2]


def test_resume_with_other_data_is_refused_naming_the_file(setup):
    """Before run.json, resuming with another train file of the same task mixed two data sets: the
    checkpoint's identity held no data hash. Now the resume names both files and changes nothing."""
    from rtpo.train import RunMismatch, train

    d, cfg = setup
    out = d / "resume-data"
    short = json.loads(json.dumps(cfg))
    short["train"]["steps"] = 1
    train("rtpo", "airline", short, 0, out, d / "model", d / "data" / "train.jsonl", progress=False)
    other = d / "other-train.jsonl"
    lines = (d / "data" / "train.jsonl").read_text().splitlines(keepends=True)
    other.write_text("".join(lines[1:] + lines[:1]))   # the same tasks in another order: another data set
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    with pytest.raises(RunMismatch, match=rf"trained on train_file {d / 'data' / 'train.jsonl'} .*not {other}"):
        train("rtpo", "airline", cfg, 0, out, d / "model", other, progress=False)
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    cmd = _train_cmd(d, out)
    cmd[cmd.index("--train-file") + 1] = str(other)
    r = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and str(other) in r.stderr and "run.json" in r.stderr, r.stderr


def test_shorter_rerun_of_a_finished_run_is_refused(setup):
    """A finished 2-step run rerun with train.steps=1 exited 0 with a summary of "1 step" over 2 records and
    the 2-step weights; now it is refused (the summary and run.json say what the run did)."""
    from rtpo.run_record import read_record
    from rtpo.train import RunMismatch, train

    d, cfg = setup
    out = d / "shorter"
    two = json.loads(json.dumps(cfg))
    two["train"]["steps"] = 2
    summary = train("rtpo", "airline", two, 0, out, d / "model", d / "data" / "train.jsonl", progress=False)
    assert summary["steps"] == 2 == len(_records(out / "metrics.jsonl"))
    rec = read_record(out)
    assert rec["steps"] == {"planned": 2, "completed": 2} and rec["key"]["scope"] == "main"
    assert rec["inputs"]["train_file"]["sha256"] and rec["inputs"]["base_model"]["sha256"] and rec["code"]["tree"]
    one = json.loads(json.dumps(cfg))
    one["train"]["steps"] = 1
    before = (out / "summary.json").read_text()
    with pytest.raises(RunMismatch, match=r"holds a run of 2 steps .* train\.steps is 1"):
        train("rtpo", "airline", one, 0, out, d / "model", d / "data" / "train.jsonl", progress=False)
    assert (out / "summary.json").read_text() == before and read_record(out)["steps"]["completed"] == 2


def _tree(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("damage", ["run.json deleted", "run.json without inputs"])
def test_a_checkpoint_without_its_run_json_is_refused_naming_both(setup, damage):
    """A run whose run.json was deleted (or lost its `inputs`) after it stopped resumed on another train file
    at exit 0, mixing two data sets: the checkpoint's own identity held no data hash, and run.json was
    compared only where it had one. The checkpoint carries run.json now, and a resume without a matching one
    is refused, naming the checkpoint and the run.json; nothing changes."""
    from rtpo.train import train

    d, cfg = setup
    out = d / f"no-record-{damage.split()[-1]}"
    short = json.loads(json.dumps(cfg))
    short["train"]["steps"] = 1
    train("rtpo", "airline", short, 0, out, d / "model", d / "data" / "train.jsonl", progress=False)
    if damage == "run.json deleted":
        (out / "run.json").unlink()
    else:
        rec = json.loads((out / "run.json").read_text())
        rec.pop("inputs")
        (out / "run.json").write_text(json.dumps(rec))
    other = d / "other-train-2.jsonl"
    lines = (d / "data" / "train.jsonl").read_text().splitlines(keepends=True)
    other.write_text("".join(lines[2:] + lines[:2]))   # another data set of the same task
    before = _tree(out)
    ck = out / "checkpoint" / "step-00000000"
    with pytest.raises(ValueError, match=rf"{ck}.*{out / 'run.json'}") as e:
        train("rtpo", "airline", cfg, 0, out, d / "model", other, progress=False)
    assert "train_file" in str(e.value) or "without its run record" in str(e.value)
    assert _tree(out) == before


def test_a_rerun_with_the_steps_of_a_killed_runs_checkpoint_is_refused(setup, monkeypatch):
    """A 4-step run with a held-out probe every 2 steps, stopped by SIGTERM after step 2 (checkpoint: steps
    0-2, the probe at step 1 only), rerun with train.steps=3: before, it resumed at its last step, ran
    nothing and ended as "3 of 3" without the last step's probe (the report then took step 1's probe as the
    last). It is refused now, changing nothing; the same 4-step run resumes and ends with the probes an
    uninterrupted run takes (steps 1 and 3)."""
    import rtpo.train as train_mod
    from rtpo.signals import Stopped, StopOnSigterm
    from rtpo.train import train

    d, cfg = setup
    four = json.loads(json.dumps(cfg))
    four["train"].update(steps=4, heldout_prompts=1, heldout_every=2)
    out = d / "killed"
    stop = StopOnSigterm()   # the flag a SIGTERM sets (not installed: set by hand in step 2)
    real = train_mod.check_finite

    def sigterm_during_step_2(rec, engine, step, *a):
        real(rec, engine, step, *a)
        stop.requested = stop.requested or step == 2

    monkeypatch.setattr(train_mod, "check_finite", sigterm_during_step_2)
    with pytest.raises(Stopped):
        train("rtpo", "airline", four, 0, out, d / "model", d / "data" / "train.jsonl", progress=False, stop=stop)
    monkeypatch.undo()
    recs = _records(out / "metrics.jsonl")
    assert [r["step"] for r in recs] == [0, 1, 2] and [r["step"] for r in recs if "heldout_success" in r] == [1]
    three = json.loads(json.dumps(four))
    three["train"]["steps"] = 3
    before = _tree(out)
    with pytest.raises(ValueError, match=r"held-out probe at steps \[1\]; a 3-step run takes it at steps \[1, 2\]"):
        train("rtpo", "airline", three, 0, out, d / "model", d / "data" / "train.jsonl", progress=False)
    assert _tree(out) == before and not (out / "summary.json").exists()
    train("rtpo", "airline", four, 0, out, d / "model", d / "data" / "train.jsonl", progress=False)
    recs = _records(out / "metrics.jsonl")
    assert [r["step"] for r in recs if "heldout_success" in r] == [1, 3]


def test_a_symlinked_out_takes_its_targets_lock(tmp_path):
    """Two writers of one run directory by two names (the directory and a link to it) both ran before: one
    exited 0 with steps [0, 0, 1, 1, 2, 3, 4, 5]. The lock is the resolved path's."""
    from rtpo.atomic import Busy, exclusive

    real = tmp_path / "runs" / "seed0"
    real.mkdir(parents=True)
    link = tmp_path / "link"
    link.symlink_to(real)
    holder = _holder(real)
    try:
        with pytest.raises(Busy, match=rf"pid {holder.pid}"), exclusive(link, "training into"):
            pass
        with pytest.raises(Busy, match=rf"pid {holder.pid}"), exclusive(tmp_path / "runs" / ".." / "link"):
            pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    with exclusive(link):   # released with the holder
        pass


BIND = """
import subprocess, sys
from rtpo.atomic import Busy, exclusive
src, mnt, path = sys.argv[1:4]
r = subprocess.run(["mount", "--bind", src, mnt], capture_output=True, text=True)
if r.returncode:
    print("NO-MOUNT", r.stderr.strip()); sys.exit(0)
try:
    with exclusive(path, "training into"):
        print("LOCKED")
except Busy as e:
    print("BUSY", e)
"""


@pytest.mark.parametrize("mount", ["the run directory", "its parent"])
def test_a_bind_mounted_run_directory_meets_the_same_lock(tmp_path, mount):
    """A bind mount of the run directory used as --out got around the writer lock: the lock file beside each
    path was another file, so two writers trained into one directory (duplicated records). The lock is the
    directory's own now (the kernel keys it by device and inode), so every path to it meets the same one."""
    real = tmp_path / "runs" / "seed0"
    real.mkdir(parents=True)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    src, path = (real, mnt) if mount == "the run directory" else (real.parent, mnt / "seed0")
    holder = _holder(real)
    try:
        # a mount namespace of its own (unshare -rm: no privilege needed), so nothing stays mounted
        r = subprocess.run(["unshare", "-rm", sys.executable, "-c", BIND, str(src), str(mnt), str(path)], cwd=ROOT,
                           env=_env(), capture_output=True, text=True, timeout=120)
    except FileNotFoundError:
        pytest.skip("no unshare(1) here: cannot make a bind mount without privileges")
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    if r.returncode != 0 or r.stdout.startswith("NO-MOUNT"):
        pytest.skip(f"this machine refuses an unprivileged bind mount: {r.stdout.strip()} {r.stderr.strip()[-300:]}")
    assert r.stdout.startswith("BUSY") and f"pid {holder.pid}" in r.stdout, r.stdout + r.stderr


# ------------------------------------------------------------------------------ a model that fits the config
def _model_copy(d: Path, name: str) -> Path:
    import shutil

    dst = d / name
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(d / "model", dst)
    return dst


def test_base_model_made_under_other_model_settings_is_refused(setup):
    from rtpo.sft import model_settings
    from rtpo.train import train

    d, cfg = setup
    md = _model_copy(d, "model-other")
    other = json.loads(json.dumps(cfg))
    other["model"]["tiny"]["num_layers"] += 1
    other["model"]["vocab_size"] *= 2
    (md / "sft_summary.json").write_text(json.dumps({"model_settings": model_settings(other)}))
    out = d / "other-model-run"
    with pytest.raises(ValueError, match=r"model.tiny: base model .*'num_layers'.*model.vocab_size: base model"):
        train("rtpo", "airline", cfg, 0, out, md, d / "data" / "train.jsonl", progress=False)
    assert not out.exists()
    # the settings it was made under pass
    (md / "sft_summary.json").write_text(json.dumps({"model_settings": model_settings(cfg)}))
    from rtpo.assembly import check_model_fits
    check_model_fits(md, cfg)


def test_swapped_or_truncated_tokenizer_is_refused_naming_it(setup):
    from transformers import AutoTokenizer

    from rtpo.assembly import check_model_fits

    d, cfg = setup
    md = _model_copy(d, "model-swapped")
    tok = AutoTokenizer.from_pretrained(str(md))
    tok.add_tokens([f"<extra_{i}>" for i in range(50)])  # a tokenizer of a larger vocabulary
    tok.save_pretrained(md)
    with pytest.raises(ValueError, match=rf"{md}: the tokenizer has {len(tok)} tokens but the model embeds only"):
        check_model_fits(md, cfg)
    md = _model_copy(d, "model-truncated")
    tj = md / "tokenizer.json"
    tj.write_bytes(tj.read_bytes()[: tj.stat().st_size // 2])
    with pytest.raises(ValueError, match=r"the tokenizer cannot be loaded .*tokenizer.json"):
        check_model_fits(md, cfg)


def test_base_model_with_a_truncated_tokenizer_names_the_file(tmp_path):
    from rtpo.tokenizer import load_tokenizer

    tok = tiny.tokenizer()
    tok.save_pretrained(tmp_path / "tok")
    tj = tmp_path / "tok" / "tokenizer.json"
    tj.write_bytes(tj.read_bytes()[:100])
    with pytest.raises(ValueError, match=r"tok: the tokenizer cannot be loaded .*tokenizer.json"):
        load_tokenizer(tmp_path / "tok")
