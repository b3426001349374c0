"""Errors a new user meets, each naming the file, key or value and what to do, and creating nothing it
does not need (issue 57, item 4). Each failed at f1aae5b: a traceback from a library, or a message
naming neither the input nor the remedy, sometimes after the run directory existed.

- a full disk while training (torch's "inline_container.cc:672 unexpected pos", two tracebacks) and
  while evaluating ("[Errno 28]" without the file): a real tmpfs of a few hundred KiB, mounted in a
  private mount namespace (`unshare`), under the real `rtpo` command;
- a task row holding an unpaired surrogate (\\ud800): a tokenizer TypeError after run.json was written;
- a final/ without tokenizer.json (and without a manifest): "install sentencepiece or tiktoken";
- --seed -1 / 2**70: numpy's "Seed must be between 0 and 2**32 - 1", naming neither --seed nor the value;
- --set model.threads=10**20: "Overflow when unpacking long long";
- --set method.rtpo.group_size=10**20 (or chains, trunks, ...): accepted, then the process grew past 8.7 GB.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rtpo.cli import main
from tests.helpers import tiny

ROOT = Path(__file__).resolve().parent.parent
RTPO = Path(sys.executable).parent / "rtpo"
ENV = {"PYTHONHASHSEED": "0", "TOKENIZERS_PARALLELISM": "false", "WANDB_MODE": "disabled", "HF_HUB_OFFLINE": "1"}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    return tiny.airline_run_inputs(tmp_path_factory.mktemp("errors"))


def _train_args(d: Path, out: Path, *extra: str) -> list[str]:
    return ["train", "--method", "grpo", "--task", "airline", "--config", str(ROOT / "config" / "smoke.yaml"),
            "--set", "train.steps=2", "--model", str(d / "model"), "--train-file", str(d / "data" / "train.jsonl"),
            "--out", str(out), *extra]


def _rtpo_in_small_disk(kib: int, fill_kib: int, disk: Path, argv: list[str]) -> subprocess.CompletedProcess:
    """`rtpo ARGV` with a tmpfs of `kib` KiB (`fill_kib` of it taken by a file) mounted at `disk`, in a private
    mount namespace; prints the files left on it after the command, then exits with the command's status."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1): a small filesystem cannot be mounted without privileges")
    disk.mkdir(parents=True, exist_ok=True)
    script = (f"mount -t tmpfs -o size={kib}k tmpfs {disk} || exit 97; "
              + (f"head -c {fill_kib * 1024} /dev/zero > {disk}/fill; " if fill_kib else "")
              + " ".join(f"'{a}'" for a in [str(RTPO), *argv]) + "; rc=$?; echo FILES; find " + str(disk)
              + " -type f -size +0 ! -name fill ! -name '.*.lock'; exit $rc")
    r = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, timeout=300,
                       env={**__import__("os").environ, **ENV})
    if r.returncode == 97 or "unshare: " in r.stderr[:200]:
        pytest.skip(f"cannot mount a tmpfs in a user namespace here: {r.stderr.strip()[:200]}")
    return r


@pytest.mark.slow  # a real `rtpo` process (torch's import and a tiny run): 10-40 s
def test_full_disk_while_training_names_the_file_and_what_to_do(inputs, tmp_path):
    """600 KiB: run.json, metrics.jsonl and the events file fit, the first checkpoint (~1.3 MB) does not."""
    disk = tmp_path / "disk"
    r = _rtpo_in_small_disk(600, 0, disk, _train_args(inputs, disk / "run", "--seed", "0"))
    err = r.stderr.strip().splitlines()
    assert r.returncode == 2, r.stderr[-3000:]
    assert "Traceback" not in r.stderr and "unexpected pos" in err[-1]  # the cause kept, in one line
    assert err[-1].startswith(f"rtpo train: error: {disk}/run/checkpoint/step-00000000/engine.pt: no space left "
                              "on the device while writing it"), err[-1]
    assert f"df -h {disk}/run/checkpoint" in err[-1] and "rerun the same command" in err[-1]
    left = r.stdout.split("FILES\n", 1)[1].split()
    assert not any("checkpoint" in f for f in left), left  # no half-written checkpoint kept


@pytest.mark.slow  # a real `rtpo` process (torch's import and a tiny run): 10-40 s
def test_full_disk_while_evaluating_names_the_file_and_what_to_do(inputs, tmp_path):
    disk = tmp_path / "disk"
    argv = ["evaluate", "--method", "grpo", "--task", "airline", "--config", str(ROOT / "config" / "smoke.yaml"),
            "--model", str(inputs / "model"), "--eval-file", str(inputs / "data" / "eval.jsonl"),
            "--out", str(disk / "ev.json"), "--trajectories", str(disk / "traj.jsonl")]
    r = _rtpo_in_small_disk(64, 60, disk, argv)
    last = r.stderr.strip().splitlines()[-1]
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-3000:]
    # the file being written when the disk filled: the trajectories, or (evaluation writes its results in
    # shards, kept for a resume) the shard of ev.json.shards/ under way
    named = last.removeprefix("rtpo evaluate: error: ").split(": no space left on the device while writing it")[0]
    assert named in (f"{disk}/traj.jsonl", f"{disk}/ev.json.shards/00000.json"), last
    assert f"df -h {disk}" in last
    left = r.stdout.split("FILES\n", 1)[1].split()
    assert not [f for f in left if f.endswith(("traj.jsonl", "ev.json")) or ".tmp-" in f], left  # nothing half written
    assert not any(f.endswith(Path(named).name) for f in left), left  # the file being written is removed


def test_a_task_row_with_an_unpaired_surrogate_is_refused_before_the_run_directory(inputs, tmp_path, capsys):
    rows = (inputs / "data" / "train.jsonl").read_text().splitlines()
    row = json.loads(rows[2])
    row["question"] += " \ud800 (half a pair)"
    rows[2] = json.dumps(row)  # json.dumps writes it as the escape \ud800
    bad = tmp_path / "train.jsonl"
    bad.write_text("\n".join(rows) + "\n")
    out = tmp_path / "run"
    argv = _train_args(inputs, out, "--seed", "0")
    argv[argv.index("--train-file") + 1] = str(bad)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"{bad}:3: field 'question': an unpaired UTF-16 surrogate \\ud800 at character" in err, err
    assert "remove it" in err and not out.exists()


def test_a_model_directory_without_its_tokenizer_names_the_file(inputs, tmp_path, capsys):
    final = tmp_path / "run" / "final"
    shutil.copytree(inputs / "model", final)
    (final / "tokenizer.json").unlink()  # and no manifest that would list it
    out = tmp_path / "eval.json"
    assert main(["evaluate", "--method", "grpo", "--task", "airline", "--config", str(ROOT / "config" / "smoke.yaml"),
                 "--model", str(final), "--eval-file", str(inputs / "data" / "eval.jsonl"), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{final}/tokenizer.json: missing" in err and "copy tokenizer.json" in err, err
    assert "sentencepiece" not in err and not out.exists()


@pytest.mark.parametrize("seed", ["-1", str(2**70)])
def test_a_seed_out_of_range_is_named(inputs, tmp_path, capsys, seed):
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as e:
        main(_train_args(inputs, out, "--seed", seed))
    err = capsys.readouterr().err
    assert e.value.code == 2 and f"argument --seed: {seed} is out of range" in err and "0..4294967295" in err, err
    assert not out.exists()


@pytest.mark.parametrize("key,value,bound", [
    ("model.threads", "100000000000000000000", "maximum of 1024"),
    ("model.threads", "1e20", "not of type 'integer'"),
    ("method.rtpo.group_size", "100000000000000000000", "maximum of 256"),
    ("method.grpo.chains", "100000", "maximum of 256"),
    ("method.rtpo.per_task.math.trunks", "100000", "maximum of 256"),
    ("method.arpo.total", "5000", "maximum of 256"),
    ("method.tree_grpo.expansions", "5000", "maximum of 256"),
    ("eval.samples", "100000", "maximum of 1024"),
    ("train.steps", "100000000000000000000", "maximum of 2147483647"),
])
def test_an_override_out_of_bounds_names_the_key_and_creates_nothing(inputs, tmp_path, capsys, key, value, bound):
    """(The model directory does not exist: a config that passed the schema stops there, before any rollout,
    so that this test cannot start a run of 10**20 siblings where the bound is missing.)"""
    out = tmp_path / "run"
    argv = _train_args(inputs, out, "--seed", "0", "--set", f"{key}={value}")
    argv[argv.index("--model") + 1] = str(tmp_path / "no-model")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"--set {key}={value}: invalid config at '{key}'" in err and bound in err, err
    assert not out.exists()


def test_the_shipped_configs_are_inside_the_bounds():
    from rtpo.config import load_config

    for f in ("config.yaml", "smoke.yaml", "paper.yaml", "smollm2.yaml", "rehearsal.yaml"):
        load_config(ROOT / "config" / f)
