"""Training: rule train_<method> (`--forcerun train_rtpo`), one job per (task, method) and seed group.

Writes results/runs/<task>/<method>/seed<seed>/: metrics.jsonl, run.json (what the run is: rtpo.run_record),
checkpoint/ (for resuming), final/ (HF model directory) and summary.json (written last). Declared outputs are summary.json and final/;
deleting either reruns that cell's job and what depends on it. `seeds_per_job` (config) seeds train
in one job, one after the other in one process (rtpo train --seed S1 S2 ...; rtpo.dag.SeedJob): one
rule per seed group (train_<method> when one group holds every seed, train_<method>_seeds0to4 ...
otherwise; with `seed_counts`, each such rule's {task} constrained to the cells that have its group:
rtpo.dag.Dag.main_seed_jobs), logs per seed plus the job's own; with 1 (the verl path) a {seed} wildcard rule, one job
per seed. TRAIN_SHELL (rtpo.dag) runs `rtpo train --job-guard`, the checkpoint guard. `threads` is
model.threads (1 on the CPU default: two jobs side by side).

RULE_DEADLINE exports the job's end from the rule's `runtime` (RTPO_RULE_DEADLINE = the shell's start +
runtime): the deadline a Slurm job falls back on when squeue cannot tell it (rtpo.signals); a derived
param (it takes `resources`), so a changed runtime reruns nothing.
"""

from rtpo.verl_ext import pilot as pilots


def rule_deadline(wildcards, resources):
    """`export RTPO_RULE_DEADLINE=...; ` for a job with a `runtime` (minutes), else nothing."""
    runtime = getattr(resources, "runtime", None)
    if not isinstance(runtime, (int, float)) or runtime <= 0:
        return ""
    return f"export RTPO_RULE_DEADLINE=$(( $(date +%s) + {int(runtime) * 60} )); "


RULE_DEADLINE_SHELL = f"{{params.deadline}}{dag.TRAIN_SHELL}"


# The pilot (rules/pilot.smk, rtpo.verl_ext.pilot): the seed-0 run of a piloted cell resumes from the pilot's
# checkpoint, and vanilla's seed-0 evaluation of a piloted task from its first shard; both wait for the pilot.
try:
    PILOT_CELLS = set(pilots.pilot_cells(config))
    PILOT_EVAL_TASKS = set(pilots.pilot_eval_tasks(config))
except ConfigError as e:
    raise WorkflowError(f"invalid config: {e} (config files: {_config_sources()})") from None


def pilot_input(method):
    """The input function of train_<method>'s pilot: its seed-0 job of a piloted cell waits for it."""

    def piloted(wildcards):
        seed = getattr(wildcards, "seed", None)
        piloted = (method, wildcards.task) in PILOT_CELLS and seed == "0"
        return [ancient(pilots.train_file(wildcards.task, method))] if piloted else []  # an order, not content

    return piloted


for _method in PIPELINE.trainable:
    for _job in PIPELINE.main_seed_jobs(f"train_{_method}", _method):
        _run = f"results/runs/{{task}}/{_method}/seed{{seed}}"

        rule:
            name:
                _job.rule
            input:
                train="results/data/{task}/train.jsonl",
                model="results/models/base",
                pilot=pilot_input(_method),
            output:
                summary=_job.paths(f"{_run}/summary.json"),
                final=[directory(p) for p in _job.paths(f"{_run}/final")],
            log:
                **seed_logs(
                    _job,
                    f"results/logs/train/{{task}}/{_method}/seed{{seed}}.log",
                    f"results/logs/train/{{task}}/{_method}/{{label}}.job.log",
                ),
            benchmark:
                f"results/benchmarks/train/{{task}}/{_method}/{_job.label}.tsv"
            wildcard_constraints:
                **_job.wildcard_constraints,  # task: the cells of this seed group (seed_counts)
            priority: _job.priority  # the jobs of most seeds first (rtpo.dag.SeedJob.priority)
            conda:
                CONDA_ENV
            threads: PIPELINE.threads
            params:
                **seed_params(_job, _run, f"results/logs/train/{{task}}/{_method}/seed{{seed}}.log"),
                method=_method,
                task=lambda wildcards: wildcards.task,
                key=dag.key_args("main"),
                settings=main_train_settings(_method),
                config=config_path,
                deadline=rule_deadline,
            shell:
                RULE_DEADLINE_SHELL
