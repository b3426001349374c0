"""Ablations (config `ablations`) and the theory checks.

Studies (rtpo.experiment.ablation_cells):
  group_size         RTPO with G in values on ablations.group_size.task       paper G.2, Tables 10-11
  sync               RTPO weight sync per_stage | interval:N | kl:tau          paper G.6
  continuation       RTPO on- versus off-policy continuation                   paper F.3, Tables 3 and 6
  credit_assignment  the listed methods (RTPO-CA and baselines) under psi=full paper §4.3, Table 2
  airline            every method on airline (main-grid runs)                  paper G.1, Tables 7-9
Files: results/ablations/<study>/<variant>/<task>/<method>/seed<seed>/ (as a main run) and
.../<method>/eval_seed<seed>.json (rtpo.experiment). Every arm runs its study's seeds (`ablations.<study>.seeds`,
default `ablations.seeds`; one rule per seed group when studies differ: rtpo.dag.Dag.ablation_seed_jobs): one identical to the main
grid's configuration copies the main runs of those seeds (ablation_reuse_*; the ledger adds the main
grid's other seeds); the others train and evaluate with `--set` overrides, `seeds_per_job` seeds per job (as the main runs: rtpo.dag.SeedJob). The {cell}
wildcard is a trained arm's key below results/ablations/; {run} / {evalrun} are a copied arm's key
plus /seed<S> or /eval_seed<S>; each is constrained to the exact lists computed by rtpo.experiment (common.smk).
"""

for _job in PIPELINE.ablation_seed_jobs("ablation_train"):
    _run = "results/ablations/{cell}/seed{seed}"

    rule:
        name:
            _job.rule
        input:
            train=lambda wildcards: run_of(wildcards).inputs.train_file,
            model=lambda wildcards: run_of(wildcards).inputs.base_model,
        output:
            summary=_job.paths(f"{_run}/summary.json"),
            final=[directory(p) for p in _job.paths(f"{_run}/final")],
        log:
            **seed_logs(
                _job,
                "results/logs/ablations/{cell}/seed{seed}/train.log",
                "results/logs/ablations/{cell}/{label}.train.job.log",
            ),
        benchmark:
            f"results/benchmarks/ablations/{{cell}}/{_job.label}.train.tsv"
        wildcard_constraints:
            **_job.wildcard_constraints,  # cell: the trained arms of this seed group
        priority: _job.priority  # the jobs of most seeds first (rtpo.dag.SeedJob.priority)
        conda:
            CONDA_ENV
        threads: PIPELINE.threads
        params:
            **seed_params(_job, _run, "results/logs/ablations/{cell}/seed{seed}/train.log"),
            method=lambda wildcards: run_of(wildcards).method,
            task=lambda wildcards: run_of(wildcards).task,
            key=lambda wildcards: dag.key_args(run_of(wildcards).scope, run_of(wildcards).variant),
            settings=lambda wildcards: experiment.fingerprint(run_of(wildcards).settings),
            config=config_path,
            deadline=rule_deadline,
        shell:
            RULE_DEADLINE_SHELL


for _job in PIPELINE.ablation_seed_jobs("ablation_evaluate"):

    rule:
        name:
            _job.rule
        input:
            model=_job.paths("results/ablations/{cell}/seed{seed}/final"),
            eval=lambda wildcards: run_of(wildcards).inputs.eval_data,
        output:
            result=_job.paths("results/ablations/{cell}/eval_seed{seed}.json"),
        log:
            **seed_logs(
                _job,
                "results/logs/ablations/{cell}/eval_seed{seed}.log",
                "results/logs/ablations/{cell}/{label}.eval.job.log",
            ),
        benchmark:
            f"results/benchmarks/ablations/{{cell}}/{_job.label}.eval.tsv"
        wildcard_constraints:
            **_job.wildcard_constraints,  # cell: the trained arms of this seed group
        conda:
            CONDA_ENV
        threads: PIPELINE.threads
        params:
            **seed_params(
                _job,
                "results/ablations/{cell}/eval_seed{seed}.json",
                "results/logs/ablations/{cell}/eval_seed{seed}.log",
            ),
            method=lambda wildcards: run_of(wildcards).method,
            task=lambda wildcards: run_of(wildcards).task,
            sets=lambda wildcards: dag.set_args(run_of(wildcards).sets),
            settings=lambda wildcards: experiment.fingerprint(run_of(wildcards).eval_settings),
            config=config_path,
            engine=eval_engine,
            model=seed_params(_job, "results/ablations/{cell}/seed{seed}/final")["out"],
            shard=eval_shard,
        shell:
            "{params.shard}exec rtpo evaluate --config {params.config} --model {params.model} --method {params.method} "
            "--task {params.task} --seed {params.seeds} --eval-file {input.eval} {params.sets} "
            "--engine {params.engine} --out {params.out} {params.logs} > {log.job} 2>&1"


rule ablation_reuse_run:
    # the main run's records and summary, and its run.json under the arm's key with copy_of the main run's
    # (rtpo.run_record.copy_run): the report reads that the arm is a copy from the run itself
    input:
        summary=lambda wildcards: f"{copied_run(wildcards).copy_of.run_dir()}/summary.json",
    output:
        summary="results/ablations/{run}/summary.json",
    log:
        "results/logs/ablations/{run}/reuse.log",
    wildcard_constraints:
        run=dag.keys_regex(PIPELINE.copied_runs),
    run:
        copy_reused_run(copied_run(wildcards), input.summary, output.summary, log[0])


rule ablation_reuse_eval:
    input:
        result=lambda wildcards: copied_run(wildcards).copy_of.eval_file(),
    output:
        result="results/ablations/{evalrun}.json",
    log:
        "results/logs/ablations/{evalrun}.log",
    wildcard_constraints:
        evalrun=dag.keys_regex(PIPELINE.copied_evals),
    conda:
        CONDA_ENV
    shell:
        "cp {input.result} {output.result} && echo 'copied {input.result} (identical settings)' > {log}"


rule theory:
    output:
        directory("results/theory"),
    log:
        "results/logs/theory.log",
    conda:
        CONDA_ENV
    threads: 1
    params:
        quick="--quick" if PIPELINE.ablations.get("theory", {}).get("quick", False) else "",
    shell:
        "rtpo theory --out {output} {params.quick} > {log} 2>&1"
