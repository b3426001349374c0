"""`rtpo train --engine verl`: one run of the experiment on verl's trainer, beside the local loop
(rtpo/train.py) and shaped like it.

The run is the experiment's (rtpo.experiment: `Experiment(cfg).run_for(key)`): its settings, the config
after its `--set` overrides and its inputs (train file, base model), so the paths come from the run, as
on the local engine. Around verl's own process (rtpo.verl_ext.launch.train_verl: config -> Hydra
overrides -> main_ppo, final/ and summary.json) this module does what rtpo.train does around its loop:

  one writer per run directory   rtpo.atomic.exclusive
  the DAG's job guard            rtpo.checkpoints.job_guard with the run's stamp (`--job-guard`)
  run.json before the first step rtpo.run_record: the run's identity; verl's checkpoint folder carries
                                 it (checkpoint/run.json: verl's trainer writes the global_step_N folders)
  the resume check               rtpo.run_record.check_resume, as the local engine: a checkpoint without
                                 its run.json, or of another run, is refused naming both; a rerun shorter
                                 than the checkpoint too
  the steps completed            the records of metrics.jsonl, which must be the steps 0..N-1 of the run

The verl engine trains one seed per job (rtpo.dag.cross_reference_errors holds seeds_per_job to 1).
"""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

from rtpo.atomic import exclusive
from rtpo.experiment import MAIN, Experiment, Run, RunKey
from rtpo.run_record import RUN_FILE, RunMismatch, check_resume, make_record, read_record, write_record

LATEST = "latest_checkpointed_iteration.txt"   # verl's: the step of its newest complete checkpoint


def train_seeds(method: str, task: str, cfg: dict[str, Any], seeds: list[int], out: str | Path,
                model_dir: str | Path | None = None, train_file: str | Path | None = None, job_guard: bool = False,
                scope: str = MAIN, variant: str = "") -> int:
    """rtpo.train.train_seeds on verl: one seed (`out` a directory); returns verl's exit status."""
    if len(seeds) != 1 or "{seed}" in str(out):
        raise ValueError("the verl engine trains one seed per job: --seed S --out DIR")
    run = Experiment(cfg).run_for(RunKey(scope, variant, task, method, int(seeds[0])))
    return train_run(run, out, model_dir, train_file, job_guard)


def train_run(run: Run, out: str | Path, model_dir: str | Path | None = None, train_file: str | Path | None = None,
              guard: bool = False) -> int:
    """Train one run of the experiment into `out` on verl, from its inputs (its base model and train file
    under results/, unless `model_dir` / `train_file` name others); returns verl's exit status (0: done)."""
    from rtpo.checkpoints import job_complete, job_guard
    from rtpo.inputs import check_model_dir
    from rtpo.verl_ext.launch import train_verl

    model_dir = run.inputs.base_model if model_dir is None else model_dir
    train_file = run.inputs.train_file if train_file is None else train_file
    out = Path(out)
    with exclusive(out, "training into", directory=True):
        check_model_dir(model_dir)  # a truncated / corrupt model file: exit 2 naming it
        if guard:
            job_guard([out], run.stamp)
        record = make_record(run.identity, train_file, model_dir, planned=run.steps)
        done = check_checkpoint(out, record, run.steps)
        write_record(out, {**record, "steps": {"planned": run.steps, "completed": done}})   # before the first step
        args = types.SimpleNamespace(method=run.method, task=run.task, seed=run.seed, out=str(out),
                                     model=str(model_dir), train_file=str(train_file))
        rc = train_verl(args, run.config)
        if rc != 0:
            return rc
        write_record(out, {**record, "steps": {"planned": run.steps, "completed": completed_steps(out, run.steps)}})
        if guard:
            job_complete([out], run.stamp)
        return 0


def checkpoint_step(out: Path) -> int:
    """The steps verl's newest complete checkpoint of `out` holds (its global_step_N; 0 without one)."""
    latest = out / "checkpoint" / LATEST
    return int(latest.read_text().strip()) if latest.is_file() else 0


def check_checkpoint(out: Path, record: dict[str, Any], steps: int) -> int:
    """Before verl resumes `out`'s checkpoint (its trainer.resume_mode is auto): refuse one that is not the
    run `record`'s (rtpo.run_record.check_resume against the run record its folder carries, and run.json),
    or that is past train.steps; without a checkpoint, give its folder this run's record to carry. Returns
    the steps the checkpoint holds (0: none)."""
    folder = out / "checkpoint"
    done = checkpoint_step(out)
    if not done:
        write_record(folder, record)
        return 0
    carried = read_record(folder)
    check_resume(out, folder / f"global_step_{done}", carried, record)
    if done > steps:
        raise RunMismatch(f"{out}: holds a run of {done} steps (checkpoint global_step_{done}), but train.steps is "
                          f"{steps}: a shorter rerun would keep {done} steps' records and weights. Train into "
                          f"another --out, or delete {out} to train {steps} steps from scratch")
    return done


def completed_steps(out: Path, steps: int) -> int:
    """The steps the run completed: its metrics.jsonl records, which must be the steps 0..steps-1 (RunMismatch
    naming the file otherwise)."""
    from rtpo.instrument import JsonlWriter

    path = out / "metrics.jsonl"
    got = [r.get("step") for r in JsonlWriter(path).read()] if path.exists() else []
    if got != list(range(steps)):
        raise RunMismatch(f"{path}: holds the records of steps {got[:12]}, expected 0..{steps - 1}; {out / RUN_FILE} "
                          f"keeps the steps it completed before; delete {out} to train this run from scratch")
    return len(got)

