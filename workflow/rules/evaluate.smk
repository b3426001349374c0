"""Evaluation: each final checkpoint on every benchmark of its task (`rtpo evaluate`).

One job per (task, method, seed): the eval split holds every benchmark of the task (embedded tiers
at CPU scale, the real benchmarks at paper scale); the eval JSON reports each and the pooled
`overall` (docs/ARCHITECTURE.md). The method selects the context map psi used at evaluation.
"""


rule evaluate_run:
    input:
        model="results/runs/{task}/{method}/seed{seed}/final",
        eval="results/data/{task}/eval.jsonl",
    output:
        result="results/eval/{task}/{method}/seed{seed}.json",
    params:
        settings=lambda wildcards: fingerprint(eval_settings(wildcards.method, wildcards.task)),
        config=config_path,
    log:
        "results/logs/eval/{task}/{method}/seed{seed}.log",
    benchmark:
        "results/benchmarks/eval/{task}/{method}/seed{seed}.tsv"
    threads: THREADS
    conda:
        CONDA_ENV
    shell:
        "rtpo evaluate --config {params.config} --model {input.model} --method {wildcards.method} "
        "--task {wildcards.task} --seed {wildcards.seed} --eval-file {input.eval} --out {output.result} "
        "> {log} 2>&1"
