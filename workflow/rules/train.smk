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
"""

for _method in PIPELINE.trainable:
    for _job in PIPELINE.main_seed_jobs(f"train_{_method}", _method):
        _run = f"results/runs/{{task}}/{_method}/seed{{seed}}"

        rule:
            name:
                _job.rule
            input:
                train="results/data/{task}/train.jsonl",
                model="results/models/base",
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
            shell:
                dag.TRAIN_SHELL
