"""The training loop every method shares: `rtpo train --method M --task T --config C --seed S --out DIR`.

Per step: draw `prompts_per_step` training tasks (a deterministic function of seed and step, so a
resumed run draws the same ones), `method.step(...)`, append the record to metrics.jsonl, and
checkpoint every `checkpoint_every` steps. Online success is measured on a fixed held-out batch
(`heldout_prompts` tasks of the training split that are never trained on, rolled out every
`heldout_every` steps and at the last, with the same sampling seeds each time, by the weights the
next step samples with), so that it shows the policy's change rather than each step's prompts. A restarted run resumes from the last checkpoint, so a
killed run, rerun, ends with the same weights and metrics as an uninterrupted one.

The run is the experiment's (rtpo.experiment: `Experiment(cfg).run_for(key)`): its settings, the config
after its `--set` overrides, its inputs (train file, base model) and the identity run.json records.
run.json (rtpo.run_record) says what the run is: its key, effective settings, the sha256 and settings of
its train file and base model, its job stamp, the code version and the steps completed; it is written
before the first step and every checkpoint carries it. summary.json is derived from the records, which
must be the planned steps. A resume is checked against run.json and nothing else
(rtpo.run_record.check_resume): a checkpoint without its run.json, or of another key, settings, train file
or base model, is refused, exit 2 naming the files; so is a rerun with fewer train.steps than the
directory's checkpoint holds (it would keep the longer run's records and weights), and one whose records
so far would differ from an uninterrupted run of its train.steps (a killed 200-step run rerun with the
steps of its checkpoint: its last record lacks the held-out probe the last step takes). Extending a
finished run is a resume.

Checkpoints, their checksums, the job guard (`--job-guard`) and the fault-injection points are
rtpo.checkpoints; what a run is built from (engine, envs, update settings, seeds) is rtpo.assembly, which
evaluation and the benchmark scripts share.

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
"""

from __future__ import annotations

import math
import random
import time
from pathlib import Path
from typing import Any

from rtpo.assembly import (SeedsFailed, build_engine, check_model_fits, env_factory, seed_dirs, seed_everything,
                           update_config)
from rtpo.atomic import atomic_dir, atomic_write_text, exclusive, remove_leftovers
from rtpo.checkpoints import (checkpoint_dirs, checkpoint_record, fault_point, job_complete, job_guard, load_checkpoint,
                              save_checkpoint, verified_checkpoint)
from rtpo.data import load_tasks
from rtpo.experiment import MAIN, Experiment, Run, RunKey
from rtpo.engine.base import SamplingParams
from rtpo.envs.base import Task
from rtpo.inputs import check_model_dir, write_manifest
from rtpo.instrument import JsonlWriter, dumps, is_success, run_summary
from rtpo.progress import progress as tqdm
from rtpo.rollout import Roller, Start
from rtpo.run_record import RunMismatch, check_resume, make_record, write_record
from rtpo.signals import Stopped, StopOnSigterm


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


def probe_steps(steps: int, done: int, every: int) -> list[int]:
    """The steps below `done` whose record has the held-out probe in a run of `steps` steps: every
    `every`-th, and the last."""
    return [s for s in range(done) if (s + 1) % every == 0 or s + 1 == steps]


def train(method: str, task: str, cfg: dict[str, Any], seed: int, out: str | Path,
          model_dir: str | Path | None = None, train_file: str | Path | None = None, progress: bool = True,
          stop: StopOnSigterm | None = None, scope: str = MAIN, variant: str = "") -> dict[str, Any]:
    """Train the run (scope, variant, task, method, seed) of `cfg`'s experiment into `out` (train_run)."""
    run = Experiment(cfg).run_for(RunKey(scope, variant, task, method, int(seed)))
    return train_run(run, out, model_dir, train_file, progress, stop)


def train_run(run: Run, out: str | Path, model_dir: str | Path | None = None, train_file: str | Path | None = None,
              progress: bool = True, stop: StopOnSigterm | None = None) -> dict[str, Any]:
    """Train one run of the experiment (rtpo.experiment.Run) into `out`, from its inputs (its base model
    and train file under results/, unless `model_dir` / `train_file` name others). stop: the caller's
    SIGTERM flag (several seeds in one process share one); by default this call installs its own. One
    writer per run directory: a second process training into `out` (or into another name of it) exits 2
    naming it and the first one's pid, before it reads or removes anything there."""
    model_dir = run.inputs.base_model if model_dir is None else model_dir
    train_file = run.inputs.train_file if train_file is None else train_file
    if stop is None:
        with StopOnSigterm() as own:
            return train_run(run, out, model_dir, train_file, progress, own)
    with exclusive(out, "training into", directory=True):
        return _train(run, Path(out), model_dir, train_file, progress, stop)


def check_checkpoint(out: Path, checkpoint: tuple[int, Path, dict[str, Any]] | None, record: dict[str, Any],
                     steps: int, probes: int, every: int) -> None:
    """Refuse (RunMismatch, exit 2) to resume `out`'s checkpoint (rtpo.checkpoints.verified_checkpoint) as the
    run `record`: a checkpoint that is
    not the run's (rtpo.run_record.check_resume: its run.json missing, or of another run); one past
    train.steps (a finished 4-step run rerun with train.steps=2 would keep 4 records and the 4-step weights
    while saying 2); one whose records would not be an uninterrupted run's of `steps` steps (the held-out
    probe, `probes` tasks every `every` steps and at the last, taken at other steps: a killed 200-step run
    rerun with train.steps equal to its checkpoint's 6 would end without the last step's probe). Nothing is
    read into the run or changed before this check."""
    if checkpoint is None:
        return
    step, ck, state = checkpoint
    carried = checkpoint_record(state)
    check_resume(out, ck, carried, record)
    done = step + 1
    fresh = f"Train into another --out, or delete {out} to train {steps} steps from scratch"
    if done > steps:
        raise RunMismatch(f"{out}: holds a run of {done} steps (checkpoint {ck.name}), but train.steps is "
                          f"{steps}: a shorter rerun would keep {done} steps' records and weights. {fresh}")
    planned = int(carried["steps"]["planned"])
    if probes and probe_steps(planned, done, every) != probe_steps(steps, done, every):
        have, want = probe_steps(planned, done, every), probe_steps(steps, done, every)
        raise RunMismatch(f"{ck}: its {done} records are of a {planned}-step run, with the held-out probe at steps "
                          f"{have}; a {steps}-step run takes it at steps {want}, so resuming would not end as an "
                          f"uninterrupted {steps}-step run. {fresh}")


def _train(run: Run, out: Path, model_dir: str | Path, train_file: str | Path, progress: bool,
           stop: StopOnSigterm) -> dict[str, Any]:
    from rtpo.methods.registry import get_method

    method, task, seed = run.method, run.task, run.seed
    cfg, s = run.config, run.settings
    tr, mcfg, env_cfg, psi = s["train"], s["method"], s["env"], s["psi"]
    steps = int(tr["steps"])
    check_model_dir(model_dir)  # a truncated / corrupt model file: exit 2 naming it
    check_model_fits(model_dir, cfg)
    seed_everything(seed)
    tasks, heldout = heldout_split(load_tasks(train_file, kind=task), int(tr.get("heldout_prompts", 0)))
    engine = build_engine(model_dir, cfg, seed, reference=float(tr["kl_coef"]) > 0)
    params = SamplingParams(max_new_tokens=int(env_cfg["max_new_tokens"]), temperature=float(tr["temperature"]))
    roller = Roller(engine, env_factory(env_cfg), psi, params, rows=get_method(method).rows)
    algo = get_method(method)(engine, roller, mcfg, update_config(tr), float(tr["temperature"]))

    record = make_record(run.identity, train_file, model_dir, planned=steps)
    n = int(tr["prompts_per_step"])
    every, probe_every = int(tr.get("checkpoint_every", 1)), int(tr.get("heldout_every", 1))
    ckpt = out / "checkpoint"
    # after the inputs are read, before anything changes: the checkpoint's files, then whose it is
    checkpoint = verified_checkpoint(ckpt)
    check_checkpoint(out, checkpoint, record, steps, len(heldout), probe_every)
    log = JsonlWriter(out / "metrics.jsonl")  # creates `out`, once every input has been read
    start = load_checkpoint(checkpoint, engine, algo, log)
    remove_leftovers(log.path)
    if start == 0 and log.path.exists():
        log.path.unlink()  # no checkpoint: start over
    write_record(out, {**record, "steps": {"planned": steps, "completed": start}})   # before the first step

    from rtpo.tracking import RunTracker, backends

    tracker = RunTracker(out, backends(cfg), record, start=start)  # logging.backends; named by the run's key
    t0 = time.perf_counter()
    bar = tqdm(range(start, steps), desc=f"train {method}/{task}/seed{seed}", disable=not progress,
               initial=start, total=steps)
    for step in bar:
        if stop.requested:  # before the first step (the last one was saved, or nothing was done)
            raise Stopped(f"stopped by {stop.name} before step {step}; the same command resumes from {ckpt}")
        fault_point("step-begin", step)
        batch = random.Random(f"{seed}:{step}").sample(tasks, min(n, len(tasks)))
        rec = algo.step(batch, step)
        check_finite(rec, engine, step, out, ckpt)
        if heldout and ((step + 1) % probe_every == 0 or step + 1 == steps):
            rec.update(heldout_success(roller, heldout, seed))
        rec.update(step=step, method=method, task=task, seed=seed, lr=float(tr["lr"]),
                   weight_version=engine.weight_version, train_version=engine.train_version, psi=psi)
        log.write(rec)
        tracker.log(rec)
        bar.set_postfix(reward=f"{rec['reward_mean']:.2f}" if rec.get("reward_mean") is not None else "-")
        if (step + 1) % every == 0 or step + 1 == steps or stop.requested:
            now = {**record, "steps": {"planned": steps, "completed": step + 1}}
            saved = save_checkpoint(ckpt, step, engine, algo, log, now)   # the checkpoint carries run.json
            write_record(out, now)
            if stop.requested and step + 1 < steps:
                raise Stopped(f"stopped by {stop.name} after step {step} of {steps}; checkpoint saved: {saved}; "
                              "the same command resumes from it")
    bar.close()
    tracker.close()
    # the summary first: a run that cannot summarise its records fails before it replaces final/. It is
    # derived from the records: its steps are the records', which must be the planned steps 0..steps-1
    recs = log.read()
    if [r.get("step") for r in recs] != list(range(steps)):
        raise RunMismatch(f"{log.path}: holds the records of steps {[r.get('step') for r in recs][:12]}, expected "
                          f"0..{steps - 1}; delete {out} to train this run from scratch")
    summary = run_summary(recs, method=method, task=task, seed=seed, steps=len(recs), psi=psi,
                          wall_s_this_run=time.perf_counter() - t0)
    write_record(out, {**record, "steps": {"planned": steps, "completed": len(recs)}})
    fault_point("final-begin")
    with atomic_dir(out / "final") as tmp:
        engine.export(tmp)
        write_manifest(tmp)                # checked by `rtpo evaluate` (rtpo.inputs.check_model_dir)
        fault_point("final-exported", slow=True)
    fault_point("final-end")
    atomic_write_text(out / "summary.json", dumps(summary, indent=1))
    fault_point("summary-end")
    return summary


def train_seeds(method: str, task: str, cfg: dict[str, Any], seeds: list[int], out: str | Path,
                model_dir: str | Path | None = None, train_file: str | Path | None = None, job_guard: bool = False,
                progress: bool = True, log: str | None = None, scope: str = MAIN,
                variant: str = "") -> dict[int, dict[str, Any]]:
    """Train `seeds` of one (method, task) cell of `cfg`'s experiment (scope, variant) one after the other in
    this process (run directories: `seed_dirs(out, seeds)`); returns {seed: summary}. A seed that fails on
    its own inputs (exit-2 errors: a damaged checkpoint, a file that cannot be read) is reported on stderr
    and skipped, the others train; then SeedsFailed names every failed seed and its error. SIGTERM
    (`Stopped`) ends the command at once (the seed in progress saved its checkpoint; the rest resume on the
    rerun). job_guard: the DAG's (rtpo.checkpoints.job_guard, with each run's stamp). log: a path pattern
    with {seed}: each seed's output is also written to its own log."""
    import contextlib

    exp = Experiment(cfg)
    runs = [exp.run_for(RunKey(scope, variant, task, method, int(s))) for s in seeds]
    dirs = seed_dirs(out, seeds)
    with contextlib.ExitStack() as locks:
        for d in dirs:  # every seed's directory before the job guard clears any of them
            locks.enter_context(exclusive(d, "training into", directory=True))
        return _train_seeds(runs, dirs, model_dir, train_file, job_guard, progress, log)


def _train_seeds(runs: list[Run], dirs: list[Path], model_dir: str | Path | None, train_file: str | Path | None,
                 guard: bool, progress: bool, log: str | None) -> dict[int, dict[str, Any]]:
    import sys

    from rtpo.progress import copy_output

    if guard:
        for r, d in zip(runs, dirs):
            job_guard([d], r.stamp)
    summaries: dict[int, dict[str, Any]] = {}
    failed: dict[int, str] = {}
    name = f"{runs[0].method}/{runs[0].task}"
    with StopOnSigterm() as stop:
        for i, (run, d) in enumerate(zip(runs, dirs)):
            seed = run.seed
            if stop.requested:
                raise Stopped(f"stopped by {stop.name} before seed {seed}; the same command resumes")
            if len(runs) > 1:
                print(f"[{name}] seed {seed} ({i + 1} of {len(runs)}) -> {d}", file=sys.stderr, flush=True)
            with copy_output(None if log is None else log.replace("{seed}", str(seed))):
                try:
                    summaries[seed] = train_run(run, d, model_dir, train_file, progress, stop)
                except (OSError, ValueError) as e:  # this seed's inputs: named in the message, exit 2
                    if len(runs) == 1:
                        raise
                    failed[seed] = str(e)
                    print(f"[{name}] seed {seed} failed: {e}", file=sys.stderr, flush=True)
    if failed:
        done = ", ".join(str(s) for s in summaries) or "none"
        raise SeedsFailed(f"{len(failed)} of {len(runs)} seeds failed ({'; '.join(f'seed {s}: {m}' for s, m in failed.items())}); "
                          f"seeds that finished: {done}")
    if guard:
        for r, d in zip(runs, dirs):
            job_complete([d], r.stamp)
    return summaries
