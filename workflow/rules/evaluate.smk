"""Evaluation: each final checkpoint on every benchmark of its task (`rtpo evaluate`).

One job per (task, method, seed): the eval split holds every benchmark of the task (embedded tiers
at CPU scale, the real benchmarks at paper scale); the eval JSON reports each and the pooled
`overall` (docs/ARCHITECTURE.md). The method selects the context map psi used at evaluation.
The config's `engine` selects the sampler (`--engine`): local (LocalEngine) or verl (verl's rollout
servers in standalone mode, vLLM on GPUs; rtpo/verl_ext/eval_servers.py), whose jobs need
verl.tensor_parallel_size x verl.eval_replicas GPUs (workflow/profiles/slurm/config.yaml);
`--engine` is common.smk's eval_engine.
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
        engine=eval_engine,
    log:
        "results/logs/eval/{task}/{method}/seed{seed}.log",
    benchmark:
        "results/benchmarks/eval/{task}/{method}/seed{seed}.tsv"
    threads: THREADS
    conda:
        CONDA_ENV
    shell:
        "rtpo evaluate --config {params.config} --model {input.model} --method {wildcards.method} "
        "--task {wildcards.task} --seed {wildcards.seed} --eval-file {input.eval} --engine {params.engine} "
        "--out {output.result} "
        "> {log} 2>&1"
