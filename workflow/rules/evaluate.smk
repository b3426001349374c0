"""Evaluation: each final checkpoint on every benchmark of its task (`rtpo evaluate`).

One job per (task, method) and seed group (`seeds_per_job`, as training: rule evaluate_run, or
evaluate_run_seeds0to4 ... when the seeds take several groups; with `seed_counts`, evaluate_run_<group>[_<methods>]
with {task} and {method} constrained to the cells that have that group; one {seed} wildcard job per seed when
1). The eval split holds every benchmark of the task (embedded tiers at CPU scale, the real
benchmarks at paper scale); the eval JSON reports each and the pooled `overall`
(docs/ARCHITECTURE.md). The method selects the context map psi used at evaluation. The config's
`engine` selects the sampler (`--engine`): local (LocalEngine) or verl (verl's rollout servers in
standalone mode, vLLM on GPUs; rtpo/verl_ext/eval_servers.py), whose jobs need
verl.tensor_parallel_size x verl.eval_replicas GPUs (workflow/profiles/default/profile.yaml);
`--engine` is common.smk's eval_engine.

An evaluation resumes (rtpo.eval_shards): it writes its trajectories in shards as they finish, and a job
killed at its time limit is retried from the shards it wrote. On rollout servers a shard holds the
profile's `eval_shard` trajectories (a resource of evaluate_run / ablation_evaluate, exported as
RTPO_EVAL_SHARD; `rtpo check-config` sizes it from the pilot); a derived param, so resizing reruns nothing.
"""


def pilot_eval_input(wildcards):
    """vanilla's seed-0 evaluation of a piloted task resumes from the pilot's shard (rules/pilot.smk)."""
    piloted = wildcards.method == "vanilla" and getattr(wildcards, "seed", None) == "0"
    return [ancient(pilots.eval_file(wildcards.task))] if piloted and wildcards.task in PILOT_EVAL_TASKS else []


def eval_shard(wildcards, resources):
    """`export RTPO_EVAL_SHARD=N; ` from the job's `eval_shard` resource, else nothing."""
    n = getattr(resources, "eval_shard", None)
    return f"export RTPO_EVAL_SHARD={int(n)}; " if isinstance(n, int) and n > 0 else ""


for _job in PIPELINE.main_seed_jobs("evaluate_run"):

    rule:
        name:
            _job.rule
        input:
            model=_job.paths("results/runs/{task}/{method}/seed{seed}/final"),
            eval="results/data/{task}/eval.jsonl",
            pilot=pilot_eval_input,
        output:
            result=_job.paths("results/eval/{task}/{method}/seed{seed}.json"),
        log:
            **seed_logs(
                _job,
                "results/logs/eval/{task}/{method}/seed{seed}.log",
                "results/logs/eval/{task}/{method}/{label}.job.log",
            ),
        benchmark:
            f"results/benchmarks/eval/{{task}}/{{method}}/{_job.label}.tsv"
        wildcard_constraints:
            **_job.wildcard_constraints,  # task, method: the cells of this seed group (seed_counts)
        conda:
            CONDA_ENV
        threads: PIPELINE.threads
        params:
            **seed_params(
                _job,
                "results/eval/{task}/{method}/seed{seed}.json",
                "results/logs/eval/{task}/{method}/seed{seed}.log",
            ),
            settings=lambda wildcards: experiment.fingerprint(PIPELINE.eval_settings(wildcards.method, wildcards.task)),
            config=config_path,
            engine=eval_engine,
            model=seed_params(_job, "results/runs/{task}/{method}/seed{seed}/final")["out"],
            shard=eval_shard,
        shell:
            "{params.shard}exec rtpo evaluate --config {params.config} --model {params.model} --method {wildcards.method} "
            "--task {wildcards.task} --seed {params.seeds} --eval-file {input.eval} --engine {params.engine} "
            "--out {params.out} {params.logs} > {log.job} 2>&1"
