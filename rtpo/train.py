"""The training loop every method shares: `rtpo train --method M --task T --config C --seed S --out DIR`.

Per step: draw `prompts_per_step` training tasks (a deterministic function of seed and step, so a
resumed run draws the same ones), `method.step(...)`, append the record to metrics.jsonl, and
checkpoint every `checkpoint_every` steps. Online success is measured on a fixed held-out batch
(`heldout_prompts` tasks of the training split that are never trained on, rolled out every
`heldout_every` steps and at the last, with the same sampling seeds each time, by the weights the
next step samples with), so that it shows the policy's change rather than each step's prompts. A restarted run resumes from the last checkpoint, so a
killed run, rerun, ends with the same weights and metrics as an uninterrupted one.

The checkpoint is one atomic unit (issue 20): `checkpoint/step-<N>/` holds the engine state
(`engine.save`: weights, optimizer, RNG, counters), `state.json` (step, method state) and
`metrics.jsonl` as of step N. It is written under a temporary name and renamed into place
(rtpo.atomic), and older ones are removed only after that, so at every instant the newest complete
`step-*` is the checkpoint; what a killed write leaves behind is removed by the next run. Resuming
restores metrics.jsonl from the checkpoint (the records of later steps are recomputed); final/ and
summary.json are renamed into place too.

Checksums (issue 31): a checkpoint and final/ carry rtpo.inputs.MANIFEST (size and sha256 of every
file, written last). Resuming verifies it and the checkpoint's metrics.jsonl (one record per step
0..N) before anything is changed: a damaged file fails with exit 2 naming it, never a silent resume
from other weights (which, on a completed run, would also re-export final/ from them). A checkpoint
without a manifest (written before manifests existed) is refused the same way: it cannot be told
from a damaged one. The summary is computed before final/ is replaced, so a run whose records
cannot be summarised leaves an existing final/ as it was.

SIGTERM (a Slurm time limit or preemption; Slurm sends SIGKILL after its grace time): the step in
progress is finished, a checkpoint is saved, and `rtpo train` exits with 143 (128 + SIGTERM), so
Slurm and Snakemake see the job fail and the rerun resumes. If the grace time is shorter than a
step, the previous checkpoint is used.

Several seeds of one cell (`rtpo train --seed 0 1 2 --out results/runs/math/rtpo/seed{seed}`,
`train_seeds`): the seeds train one after the other in this process, each exactly as it trains
alone (its own engine, RNG streams, envs, run directory, checkpoints and outputs; tests/test_train.py
checks the bits), so a DAG job pays the imports and start-up once for all of them. A seed whose
inputs are bad (a damaged checkpoint, exit 2 naming its file) is reported and the others go on; the
command then exits 2 naming every failed seed. SIGTERM stops after the current seed's checkpoint.

The job guard (`--stamp`, what the DAG's training rules pass; `job_guard`): each run directory's
`.rtpo-job` holds "<stamp> running|complete". At the start of a job, a run directory whose file does
not say "<stamp> running" (another job's settings, or a job that finished: a rerun because settings
changed, an input was rebuilt, --forcerun or a deleted output) is cleared of its checkpoint and
records, so it trains from scratch; one that says so is resumed (the same job, killed or failed:
Slurm's time limit, preemption, a seed that failed). Only when every seed of the job has finished
do their files say "complete".

Fault injection (tests/test_faults.py): RTPO_FAULT_TRACE=<file> appends one line per point of the
run (`<unix time> <point> <step>`: step-begin, ckpt-begin, ckpt-engine, ckpt-files, ckpt-renamed,
ckpt-end, final-begin, final-exported, final-end, summary-end); RTPO_FAULT_DELAY=<seconds> sleeps
at each point inside a write (ckpt-begin .. ckpt-renamed, final-exported) to widen it.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import random
import re
import shutil
import time
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rtpo.progress import progress as tqdm

from rtpo.atomic import atomic_dir, atomic_write_text, exclusive, remove_leftovers
from rtpo.config import env_options, method_settings
from rtpo.engine.base import SamplingParams, UpdateConfig
from rtpo.inputs import MANIFEST, CorruptFileError, RowError, check_safetensors, verify_manifest, write_manifest
from rtpo.data import load_tasks  # noqa: F401  (re-exported: evaluate and scripts import it from here)
from rtpo.envs.base import Task
from rtpo.instrument import JsonlWriter, dumps, run_summary
from rtpo.instrument import is_success
from rtpo.rollout import Roller, Start
from rtpo.signals import Stopped, StopOnSigterm


def env_factory(env_cfg: dict[str, Any]):
    """Task -> env, built with the env options of an env.<task> section (rtpo.config.env_options)."""
    from rtpo.envs import make_env

    opts = env_options(env_cfg)
    return lambda task: make_env(task, **opts)


def update_config(train: dict[str, Any]) -> UpdateConfig:
    return UpdateConfig(lr=float(train["lr"]), clip_low=float(train["clip"]), clip_high=float(train["clip"]),
                        dual_clip_c=float(train["dual_clip_c"]), kl_coef=float(train["kl_coef"]),
                        entropy_coef=float(train.get("entropy_coef", 0.0)),
                        max_grad_norm=float(train["max_grad_norm"]), weight_decay=float(train["weight_decay"]),
                        epochs=int(train.get("epochs", 1)), micro_batch_tokens=int(train["micro_batch_tokens"]),
                        old=str(train.get("old", "recompute")),
                        rollout_is_threshold=float(train.get("rollout_is_threshold", 2.0)))


def build_engine(model_dir: str | Path, cfg: dict[str, Any], seed: int, reference: bool):
    from rtpo.engine.local import LocalEngine

    m = cfg.get("model", {})
    torch.set_num_threads(int(m.get("threads", 1) or 1))
    return LocalEngine.from_pretrained(model_dir, seed=seed, reference=reference,
                                       device=str(m.get("device", "auto")), dtype=str(m.get("dtype", "auto")))


def check_model_fits(model_dir: str | Path, cfg: dict[str, Any]) -> None:
    """Refuse, before any work, a model directory that does not fit this config (issue 39): a base model
    `rtpo base-model` made under other model settings (its sft_summary.json records them: vocabulary,
    layers, widths, positions, source), a tokenizer that cannot be read (named), or a tokenizer with
    more tokens than the model has embedding rows (a swapped tokenizer)."""
    from rtpo.sft import model_settings

    md = Path(model_dir)
    try:
        arch = json.loads((md / "config.json").read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CorruptFileError(md / "config.json", f"cannot be read as the model's config ({e})") from None
    made = md / "sft_summary.json"
    if made.is_file():
        try:
            then = json.loads(made.read_text()).get("model_settings")
        except (UnicodeDecodeError, json.JSONDecodeError, AttributeError) as e:
            raise CorruptFileError(made, f"corrupt JSON ({e})") from None
        now = model_settings(cfg)
        if then is not None and then != now:
            differ = "; ".join(f"model.{k}: base model {then.get(k)!r}, this config {now.get(k)!r}"
                               for k in sorted(set(then) | set(now)) if then.get(k) != now.get(k))
            raise ValueError(f"{md}: this base model was made under other model settings ({differ}); rebuild it "
                             "with `rtpo base-model` under this config, or use the config it was made with")
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(str(md))
    except Exception as e:  # noqa: BLE001 - tokenizers raises its own exception types for a damaged file
        files = ", ".join(str(f) for f in sorted(md.glob("tokenizer*"))) or f"no tokenizer files in {md}"
        raise ValueError(f"{md}: the tokenizer cannot be loaded ({type(e).__name__}: {e}); its files: {files}") from None
    if len(tok) > int(arch.get("vocab_size", 0)):
        raise ValueError(f"{md}: the tokenizer has {len(tok)} tokens but the model embeds only "
                         f"{arch.get('vocab_size')} (config.json vocab_size): a tokenizer of another model?")


def heldout_split(tasks: list[Task], n: int) -> tuple[list[Task], list[Task]]:
    """(training tasks, held-out batch): the held-out batch is the first `n` tasks of the split, which
    the training draws never use (n = 0: none)."""
    if n >= len(tasks):
        raise ValueError(f"train.heldout_prompts = {n}, but the training split has only {len(tasks)} tasks")
    return tasks[n:], tasks[:n]


def heldout_success(roller: Roller, batch: list[Task], seed: int) -> dict[str, float]:
    """Online success of the current inference weights on the held-out batch: one rollout per task,
    with seeds fixed per (run seed, task) so every measurement of a run samples with the same random
    numbers (the change between two is the policy's)."""
    trajs = roller.run([Start(t, first_kind="heldout", rest_kind="heldout", seed=seed * 7_919 + i)
                        for i, t in enumerate(batch)])
    return {"heldout_success": sum(is_success(t) for t in trajs) / len(trajs),
            "heldout_reward": sum(t.reward for t in trajs) / len(trajs)}


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


# ------------------------------------------------------------------------------ fault injection
def fault_point(point: str, step: int | None = None, slow: bool = False) -> None:
    """Trace `point` to $RTPO_FAULT_TRACE; sleep $RTPO_FAULT_DELAY seconds there if `slow`."""
    trace = os.environ.get("RTPO_FAULT_TRACE")
    if trace:
        with open(trace, "a") as f:
            f.write(f"{time.time():.6f} {point} {'' if step is None else step}\n")
    if slow and os.environ.get("RTPO_FAULT_DELAY"):
        time.sleep(float(os.environ["RTPO_FAULT_DELAY"]))


# ------------------------------------------------------------------------------ checkpoints
CKPT_RE = re.compile(r"step-(\d+)$")


class CheckpointError(ValueError):
    """A checkpoint that cannot be resumed from (names the directory and what is wrong)."""


def checkpoint_dirs(root: Path) -> list[tuple[int, Path]]:
    """The complete checkpoints under `root` as (step, dir), oldest first (temporaries are not complete)."""
    if not root.is_dir():
        return []
    out = [(int(m.group(1)), p) for p in root.iterdir() if p.is_dir() and (m := CKPT_RE.match(p.name))]
    return sorted(out)


def prune_checkpoints(root: Path, keep: Path) -> None:
    """Remove everything in `root` except the checkpoint `keep`: older checkpoints, temporaries of
    killed writes, files of the old single-directory layout (checkpoint/engine.pt + state.json)."""
    for p in root.iterdir():
        if p != keep:
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() and not p.is_symlink() else p.unlink(missing_ok=True)


def save_checkpoint(root: Path, step: int, engine: Any, algo: Any, log: JsonlWriter,
                    identity: dict[str, Any] | None = None) -> Path:
    """Write checkpoint/step-<step>/ atomically (temporary directory, renamed into place), then
    remove older ones. identity: the run's identity (`run_identity`), checked on resume."""
    final = root / f"step-{step:08d}"
    fault_point("ckpt-begin", step, slow=True)
    with atomic_dir(final) as tmp:
        engine.save(tmp)                       # LocalEngine: tmp/engine.pt
        fault_point("ckpt-engine", step, slow=True)
        (tmp / "state.json").write_text(json.dumps({"step": step, "method": algo.state(), "identity": identity}))
        shutil.copyfile(log.path, tmp / "metrics.jsonl")
        write_manifest(tmp)                    # last: it covers every file above
        fault_point("ckpt-files", step, slow=True)
    fault_point("ckpt-renamed", step, slow=True)
    prune_checkpoints(root, keep=final)
    fault_point("ckpt-end", step)
    return final


def check_metrics(path: Path, step: int) -> None:
    """A checkpoint's metrics.jsonl holds one JSON record per step 0..step, in order: what the
    resumed run appends to and summarises at the end. Raises RowError naming the line."""
    n = -1
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise RowError(path, n + 1, f"corrupt JSON ({e})") from None
        got = rec.get("step") if isinstance(rec, dict) else None
        if got != n:
            raise RowError(path, n + 1, f"expected the record of step {n}, got {got!r}", field="step")
    if n != step:
        raise CorruptFileError(path, f"holds the records of {n + 1} steps, but the checkpoint is of step {step} "
                                     f"(expected {step + 1})")


def check_checkpoint_files(ck: Path, step: int) -> None:
    """Name a damaged file of a checkpoint before a loader fails on it without naming it: a torch
    file (a zip archive) cut short, a safetensors file whose header does not match its size, JSON
    that does not parse, metrics records that are not one per step; then every file against the
    manifest's sha256 (a flipped bit anywhere). (A kill cannot leave these: checkpoints are renamed
    into place whole.)"""
    for f in sorted(ck.iterdir()):
        if f.suffix == ".json":
            try:
                json.loads(f.read_text())
            except (UnicodeDecodeError, json.JSONDecodeError) as e:
                raise CorruptFileError(f, f"corrupt JSON ({e})") from None
        elif f.suffix == ".safetensors":
            check_safetensors(f)
        elif f.is_file():
            with f.open("rb") as fh:
                zipped = fh.read(2) == b"PK"
            if zipped and not zipfile.is_zipfile(f):
                raise CorruptFileError(f, "truncated or corrupt torch file (not a complete zip archive)")
    check_metrics(ck / "metrics.jsonl", step)  # before the checksums: it names the line
    verify_manifest(ck, required=True)


def load_checkpoint(root: Path, engine: Any, algo: Any, log: JsonlWriter,
                    identity: dict[str, Any] | None = None) -> int:
    """Resume from the newest checkpoint under `root`: returns the next step (0 without one).

    Raises CheckpointError (naming the directory) when it cannot be read, or when it is of another run
    than `identity` (a checkpoint without one, written before issue 39, is not compared); nothing is
    changed then.
    """
    found = checkpoint_dirs(root)
    if not found:
        return 0
    step, ck = found[-1]
    try:
        check_checkpoint_files(ck, step)
        state = json.loads((ck / "state.json").read_text())
        metrics = (ck / "metrics.jsonl").read_text()
        if int(state["step"]) != step:
            raise ValueError(f"state.json says step {state['step']}")
        if identity is not None and state.get("identity") is not None:
            differ = identity_diff(state["identity"], identity)
            if differ:
                raise CheckpointError(f"{ck}: this checkpoint is of another run ({differ}); resuming would mix two "
                                      f"runs' weights and records. Train into another --out, or delete {root} to "
                                      "train this run from scratch")
        engine.load(ck)
        algo.load_state(state.get("method", {}))
    except CheckpointError:
        raise
    except CorruptFileError as e:
        raise CheckpointError(f"{e}; cannot resume from the checkpoint {ck}: delete {root} to train this "
                              "run from scratch") from None
    except Exception as e:  # noqa: BLE001 - torch, pickle, zip and JSON errors of a damaged file
        raise CheckpointError(f"{ck}: cannot resume from this checkpoint ({type(e).__name__}: {e}); it is "
                              f"damaged or incomplete: delete {root} to train this run from scratch") from None
    atomic_write_text(log.path, metrics)
    prune_checkpoints(root, keep=ck)
    return step + 1


# ------------------------------------------------------------------------------ run identity, finite numbers
def _sha256_files(files: list[Path]) -> str | None:
    h, seen = hashlib.sha256(), False
    for f in files:
        if f.is_file():
            h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
            seen = True
    return h.hexdigest()[:16] if seen else None


def run_identity(method: str, task: str, seed: int, settings: dict[str, Any], model_dir: str | Path) -> dict[str, Any]:
    """What a checkpoint must match to be resumed (issue 39): method, task, seed, a hash of the effective
    settings (`method_settings`, all but train.steps, so that a finished run can be extended), and the
    base model's and tokenizer's hashes (the model directory's checksum manifest when it has one, else
    its config.json; its tokenizer files)."""
    settings = copy.deepcopy(settings)
    settings.get("train", {}).pop("steps", None)
    md = Path(model_dir)
    return {"method": method, "task": task, "seed": int(seed),
            "settings": hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:16],
            "model": _sha256_files([md / MANIFEST] if (md / MANIFEST).is_file() else [md / "config.json"]),
            "tokenizer": _sha256_files([md / n for n in ("tokenizer.json", "tokenizer_config.json", "vocab.json",
                                                         "merges.txt", "special_tokens_map.json")])}


def identity_diff(saved: dict[str, Any], now: dict[str, Any]) -> str:
    """'key: saved -> now' for every key that differs, '' when they match."""
    return "; ".join(f"{k}: checkpoint {saved.get(k)!r}, this run {now.get(k)!r}"
                     for k in now if saved.get(k) != now.get(k))


class NonFiniteError(ValueError):
    """A training quantity or weight that is not finite: the run stops (exit 2) before it is recorded."""


TRAINING_QUANTITIES = ("loss", "grad_norm", "reward_mean")


def check_finite(rec: dict[str, Any], engine: Any, step: int, out: Path, ckpt: Path) -> None:
    """Stop at the first step whose loss, gradient norm or reward, or any training weight, is not finite
    (a NaN learning rate or temperature, an overflow): nothing of that step is written, the last good
    checkpoint stays, no final/ is made."""
    bad = [f"{k} = {rec[k]}" for k in TRAINING_QUANTITIES
           if isinstance(rec.get(k), (int, float)) and not math.isfinite(rec[k])]
    if not engine.weights_finite():  # ExportingEngine: what this local loop needs beyond the seam
        bad.append("a training weight is NaN or infinite")
    if bad:
        last = checkpoint_dirs(ckpt)
        kept = f"the last good checkpoint is {last[-1][1]}" if last else "no checkpoint was saved"
        raise NonFiniteError(f"{out}: step {step}: {', '.join(bad)}; training stopped ({kept}; no final/ was "
                             "written). Check the learning rate, temperature and other numeric settings")


def train(method: str, task: str, cfg: dict[str, Any], seed: int, out: str | Path, model_dir: str | Path,
          train_file: str | Path, progress: bool = True, stop: StopOnSigterm | None = None) -> dict[str, Any]:
    """Train one (method, task, seed) into `out`. stop: the caller's SIGTERM flag (several seeds in one
    process share one); by default this call installs its own. One writer per run directory (issue 39):
    a second process training into `out` exits 2 naming it and the first one's pid, before it reads or
    removes anything there."""
    if stop is None:
        with StopOnSigterm() as own:
            return train(method, task, cfg, seed, out, model_dir, train_file, progress, own)
    with exclusive(out, "training into"):
        return _train(method, task, cfg, seed, Path(out), model_dir, train_file, progress, stop)


def _train(method: str, task: str, cfg: dict[str, Any], seed: int, out: Path, model_dir: str | Path,
           train_file: str | Path, progress: bool, stop: StopOnSigterm) -> dict[str, Any]:
    from rtpo.methods.registry import get_method

    out = Path(out)
    s = method_settings(cfg, method, task)
    tr, mcfg, env_cfg, psi = s["train"], s["method"], s["env"], s["psi"]
    check_model_fits(model_dir, cfg)
    seed_everything(seed)
    tasks, heldout = heldout_split(load_tasks(train_file, kind=task), int(tr.get("heldout_prompts", 0)))
    engine = build_engine(model_dir, cfg, seed, reference=float(tr["kl_coef"]) > 0)
    params = SamplingParams(max_new_tokens=int(env_cfg["max_new_tokens"]), temperature=float(tr["temperature"]))
    roller = Roller(engine, env_factory(env_cfg), psi, params, rows=get_method(method).rows)
    algo = get_method(method)(engine, roller, mcfg, update_config(tr), float(tr["temperature"]))

    log = JsonlWriter(out / "metrics.jsonl")  # creates `out`, once every input has been read
    ckpt = out / "checkpoint"
    identity = run_identity(method, task, seed, s, model_dir)
    start = load_checkpoint(ckpt, engine, algo, log, identity)   # every input is read before anything is changed
    remove_leftovers(log.path)
    if start == 0 and log.path.exists():
        log.path.unlink()  # no checkpoint: start over

    steps, n = int(tr["steps"]), int(tr["prompts_per_step"])
    every, probe_every = int(tr.get("checkpoint_every", 1)), int(tr.get("heldout_every", 1))
    t0 = time.perf_counter()
    bar = tqdm(range(start, steps), desc=f"train {method}/{task}/seed{seed}", disable=not progress,
               initial=start, total=steps)
    for step in bar:
        if stop.requested:  # before the first step (the last one was saved, or nothing was done)
            raise Stopped(f"stopped by SIGTERM before step {step}; the same command resumes from {ckpt}")
        fault_point("step-begin", step)
        batch = random.Random(f"{seed}:{step}").sample(tasks, min(n, len(tasks)))
        rec = algo.step(batch, step)
        check_finite(rec, engine, step, out, ckpt)
        if heldout and ((step + 1) % probe_every == 0 or step + 1 == steps):
            rec.update(heldout_success(roller, heldout, seed))
        rec.update(step=step, method=method, task=task, seed=seed, lr=float(tr["lr"]),
                   weight_version=engine.weight_version, train_version=engine.train_version, psi=psi)
        log.write(rec)
        bar.set_postfix(reward=f"{rec['reward_mean']:.2f}" if rec.get("reward_mean") is not None else "-")
        if (step + 1) % every == 0 or step + 1 == steps or stop.requested:
            saved = save_checkpoint(ckpt, step, engine, algo, log, identity)
            if stop.requested and step + 1 < steps:
                raise Stopped(f"stopped by SIGTERM after step {step} of {steps}; checkpoint saved: {saved}; "
                              "the same command resumes from it")
    bar.close()
    # the summary first: a run that cannot summarise its records fails before it replaces final/
    summary = run_summary(log.read(), method=method, task=task, seed=seed, steps=steps, psi=psi,
                          wall_s_this_run=time.perf_counter() - t0)
    fault_point("final-begin")
    with atomic_dir(out / "final") as tmp:
        engine.export(tmp)
        write_manifest(tmp)                # checked by `rtpo evaluate` (rtpo.inputs.check_model_dir)
        fault_point("final-exported", slow=True)
    fault_point("final-end")
    atomic_write_text(out / "summary.json", dumps(summary, indent=1))
    fault_point("summary-end")
    return summary


# ------------------------------------------------------------------------------ several seeds of one cell
JOB_FILE = ".rtpo-job"


class SeedsFailed(ValueError):
    """Some seeds of a multi-seed command failed on their own inputs; the others finished (exit 2)."""


def seed_dirs(out: str | Path, seeds: list[int]) -> list[Path]:
    """The run directory of each seed: `out` with "{seed}" filled in (required for several seeds)."""
    out = str(out)
    if len(seeds) != len(set(seeds)):
        raise ValueError(f"--seed: a seed is given twice ({seeds})")
    if "{seed}" not in out:
        if len(seeds) > 1:
            raise ValueError(f"--out {out}: several seeds need a '{{seed}}' placeholder in --out "
                             "(e.g. results/runs/math/rtpo/seed{seed})")
        return [Path(out)]
    return [Path(out.replace("{seed}", str(s))) for s in seeds]


def job_guard(dirs: list[Path], stamp: str) -> None:
    """At the start of a DAG job: clear the run directories this job did not leave running (see the
    module docstring), then mark every one "<stamp> running"."""
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)
        f = d / JOB_FILE
        state = f.read_text().strip() if f.exists() else ""
        if state != f"{stamp} running":
            shutil.rmtree(d / "checkpoint", ignore_errors=True)
            (d / "metrics.jsonl").unlink(missing_ok=True)
        atomic_write_text(f, f"{stamp} running\n")


def job_complete(dirs: list[Path], stamp: str) -> None:
    for d in dirs:
        atomic_write_text(d / JOB_FILE, f"{stamp} complete\n")


def train_seeds(method: str, task: str, cfg: dict[str, Any], seeds: list[int], out: str | Path,
                model_dir: str | Path, train_file: str | Path, stamp: str | None = None,
                progress: bool = True, log: str | None = None) -> dict[int, dict[str, Any]]:
    """Train `seeds` of one (method, task) cell one after the other in this process (run directories:
    `seed_dirs(out, seeds)`); returns {seed: summary}. A seed that fails on its own inputs (exit-2
    errors: a damaged checkpoint, a file that cannot be read) is reported on stderr and skipped, the
    others train; then SeedsFailed names every failed seed and its error. SIGTERM (`Stopped`) ends the
    command at once (the seed in progress saved its checkpoint; the rest resume on the rerun).
    log: a path pattern with {seed}: each seed's output is also written to its own log."""
    import contextlib

    dirs = seed_dirs(out, seeds)
    with contextlib.ExitStack() as locks:
        for d in dirs:  # every seed's directory before the job guard clears any of them
            locks.enter_context(exclusive(d, "training into"))
        return _train_seeds(method, task, cfg, seeds, dirs, model_dir, train_file, stamp, progress, log)


def _train_seeds(method: str, task: str, cfg: dict[str, Any], seeds: list[int], dirs: list[Path],
                 model_dir: str | Path, train_file: str | Path, stamp: str | None, progress: bool,
                 log: str | None) -> dict[int, dict[str, Any]]:
    import sys

    from rtpo.progress import copy_output

    if stamp is not None:
        job_guard(dirs, stamp)
    summaries: dict[int, dict[str, Any]] = {}
    failed: dict[int, str] = {}
    with StopOnSigterm() as stop:
        for i, (seed, d) in enumerate(zip(seeds, dirs)):
            if stop.requested:
                raise Stopped(f"stopped by SIGTERM before seed {seed}; the same command resumes")
            if len(seeds) > 1:
                print(f"[{method}/{task}] seed {seed} ({i + 1} of {len(seeds)}) -> {d}", file=sys.stderr, flush=True)
            with copy_output(None if log is None else log.replace("{seed}", str(seed))):
                try:
                    summaries[seed] = train(method, task, cfg, seed, d, model_dir, train_file, progress, stop)
                except (OSError, ValueError) as e:  # this seed's inputs: named in the message, exit 2
                    if len(seeds) == 1:
                        raise
                    failed[seed] = str(e)
                    print(f"[{method}/{task}] seed {seed} failed: {e}", file=sys.stderr, flush=True)
    if failed:
        done = ", ".join(str(s) for s in summaries) or "none"
        raise SeedsFailed(f"{len(failed)} of {len(seeds)} seeds failed ({'; '.join(f'seed {s}: {m}' for s, m in failed.items())}); "
                          f"seeds that finished: {done}")
    if stamp is not None:
        job_complete(dirs, stamp)
    return summaries
