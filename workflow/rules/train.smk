"""Training: one job per (task, method, seed), rule train_<method> (`--forcerun train_rtpo`).

Writes results/runs/<task>/<method>/seed<seed>/: metrics.jsonl, checkpoint/ (for resuming), final/
(HF model directory) and summary.json (written last). Declared outputs are summary.json and final/;
deleting either reruns that cell and what depends on it. TRAIN_SHELL (rtpo.dag) holds the
checkpoint guard. `threads` is model.threads (1 on the CPU default: two jobs side by side).
"""

for _method in TRAINABLE:
    _settings, _stamp = main_train_params(_method)

    rule:
        name:
            f"train_{_method}"
        input:
            train="results/data/{task}/train.jsonl",
            model="results/models/base",
        output:
            summary=f"results/runs/{{task}}/{_method}/seed{{seed}}/summary.json",
            final=directory(f"results/runs/{{task}}/{_method}/seed{{seed}}/final"),
        params:
            method=_method,
            task=lambda wildcards: wildcards.task,
            seed=lambda wildcards: wildcards.seed,
            sets="",
            settings=_settings,
            stamp=_stamp,
            config=config_path,
        log:
            f"results/logs/train/{{task}}/{_method}/seed{{seed}}.log",
        benchmark:
            f"results/benchmarks/train/{{task}}/{_method}/seed{{seed}}.tsv"
        threads: THREADS
        conda:
            CONDA_ENV
        shell:
            TRAIN_SHELL
