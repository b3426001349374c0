"""The mechanism sweep (config `sweep`; target `sweep`, outside `all`; rtpo.experiment.sweep_cells).

The paper's central mechanism: flat training under a rollout context psi != full degrades with the
number of turns and the size of the mismatch; RTPO's turn rows do not. The sweep crosses search questions
of exactly K hops (K in sweep.hops: K searches, then the answer) with the contrast psi in sweep.psi (a lossy
map and full) x sweep.methods (RTPO and GRPO), sweep.seeds each, so that (RTPO - GRPO)[lossy] - (RTPO -
GRPO)[full] can be read per K. Under every (K, psi) the sweep base model is also evaluated untrained (the
no-RL arm: vanilla, steps 0, as in the main grid), so each cell's learning is shown before any gap is read;
sweep.optional's arms (e.g. truncate:1, GRPO-TIS) run beside the contrast. A flat method's chains at K are
round(RTPO's expected trajectories per prompt there), sweep.rtpo_trajectories (rtpo.experiment.sweep_budget).

  sweep_data         results/sweep/data/h<K>/{train,eval,experts}.jsonl  (rtpo data, K-hop questions)
  sweep_base_model   results/sweep/models/base  (rtpo sweep-base: the base model's warm start continued
                     on the experts of every K, positions raised to sweep.max_position)
  sweep_train        results/sweep/h<K>/psi-<psi>/<method>/seed<S>/  (as a main run; {scell} wildcard; the
                     no-RL arm's, method vanilla, trains 0 steps: final/ is the sweep base model)
  sweep_evaluate     results/sweep/h<K>/psi-<psi>/<method>/eval_seed<S>.json
  sweep_report       results/tables/sweep_horizon.{csv,md}, results/tables/sweep_claims.{csv,md},
                     figures/sweep_horizon.png  (rtpo report sweep)
"""

if PIPELINE.sweep:

    localrules:
        sweep,
        sweep_report,

    rule sweep_data:
        output:
            train="results/sweep/data/h{hops}/train.jsonl",
            eval="results/sweep/data/h{hops}/eval.jsonl",
            experts="results/sweep/data/h{hops}/experts.jsonl",
        log:
            "results/logs/sweep/data/h{hops}.log",
        wildcard_constraints:
            hops=dag.keys_regex(str(k) for k in PIPELINE.sweep_hops()),
        conda:
            CONDA_ENV
        threads: 1
        params:
            settings=lambda wildcards: experiment.fingerprint(PIPELINE.sweep_data_settings(int(wildcards.hops))),
            sets=lambda wildcards: dag.set_args(experiment.sweep_data_sets(config, int(wildcards.hops))),
            config=config_path,
        shell:
            "rtpo data --config {params.config} --task search {params.sets} --out $(dirname {output.train}) > {log} 2>&1"

    rule sweep_base_model:
        input:
            model="results/models/base",
            experts=[f"{experiment.sweep_data_dir(k)}/experts.jsonl" for k in PIPELINE.sweep_hops()],
        output:
            directory(experiment.SWEEP_BASE),
        log:
            "results/logs/sweep/base_model.log",
        conda:
            CONDA_ENV
        threads: PIPELINE.base_threads
        params:
            settings=experiment.fingerprint(PIPELINE.sweep_base_settings()),
            sets=dag.set_args(experiment.sweep_model_sets(config)),
            config=config_path,
        shell:
            "rtpo sweep-base --config {params.config} {params.sets} --init {input.model} --demos {input.experts} "
            "--out {output} > {log} 2>&1"

    for _job in PIPELINE.seed_jobs("sweep_train", PIPELINE.sweep_seeds):
        _run = "results/sweep/{scell}/seed{seed}"

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
                    "results/logs/sweep/{scell}/seed{seed}/train.log",
                    "results/logs/sweep/{scell}/{label}.train.job.log",
                ),
            benchmark:
                f"results/benchmarks/sweep/{{scell}}/{_job.label}.train.tsv"
            wildcard_constraints:
                scell=dag.keys_regex(PIPELINE.sweep_by_key),
            conda:
                CONDA_ENV
            threads: PIPELINE.threads
            params:
                **seed_params(_job, _run, "results/logs/sweep/{scell}/seed{seed}/train.log"),
                method=lambda wildcards: run_of(wildcards).method,
                task=lambda wildcards: run_of(wildcards).task,
                key=lambda wildcards: dag.key_args(run_of(wildcards).scope, run_of(wildcards).variant),
                settings=lambda wildcards: experiment.fingerprint(run_of(wildcards).settings),
                config=config_path,
            shell:
                dag.TRAIN_SHELL

    for _job in PIPELINE.seed_jobs("sweep_evaluate", PIPELINE.sweep_seeds):

        rule:
            name:
                _job.rule
            input:
                model=_job.paths("results/sweep/{scell}/seed{seed}/final"),
                eval=lambda wildcards: run_of(wildcards).inputs.eval_data,
            output:
                result=_job.paths("results/sweep/{scell}/eval_seed{seed}.json"),
            log:
                **seed_logs(
                    _job,
                    "results/logs/sweep/{scell}/eval_seed{seed}.log",
                    "results/logs/sweep/{scell}/{label}.eval.job.log",
                ),
            benchmark:
                f"results/benchmarks/sweep/{{scell}}/{_job.label}.eval.tsv"
            wildcard_constraints:
                scell=dag.keys_regex(PIPELINE.sweep_by_key),
            conda:
                CONDA_ENV
            threads: PIPELINE.threads
            params:
                **seed_params(
                    _job,
                    "results/sweep/{scell}/eval_seed{seed}.json",
                    "results/logs/sweep/{scell}/eval_seed{seed}.log",
                ),
                method=lambda wildcards: run_of(wildcards).method,
                sets=lambda wildcards: dag.set_args(run_of(wildcards).sets),
                settings=lambda wildcards: experiment.fingerprint(run_of(wildcards).eval_settings),
                config=config_path,
                engine=eval_engine,
                model=seed_params(_job, "results/sweep/{scell}/seed{seed}/final")["out"],
            shell:
                "exec rtpo evaluate --config {params.config} --model {params.model} --method {params.method} "
                "--task search --seed {params.seeds} --eval-file {input.eval} {params.sets} "
                "--engine {params.engine} --out {params.out} {params.logs} > {log.job} 2>&1"

    rule sweep_report:
        input:
            PIPELINE.sweep_targets(),
        output:
            table="results/tables/sweep_horizon.csv",
            claims="results/tables/sweep_claims.csv",
            figure="figures/sweep_horizon.png",
        log:
            "results/logs/report/sweep.log",
        conda:
            CONDA_ENV
        params:
            settings=experiment.fingerprint(config.get("sweep")),
            config=config_path,
        shell:
            "rtpo report sweep --config {params.config} --results results --tables $(dirname {output.table}) "
            "--figures $(dirname {output.figure}) > {log} 2>&1"

    rule sweep:
        input:
            rules.sweep_report.output,
            PIPELINE.sweep_targets(with_final=True),

else:

    localrules:
        sweep,

    rule sweep:
        log:
            "results/logs/sweep/no_sweep_section.log",
        conda:
            CONDA_ENV
        message:
            "this config has no 'sweep' section (the mechanism sweep: config/config.yaml's)"
        shell:
            "echo 'no sweep section in this config (see config/config.yaml, key sweep)' >&2; exit 1"
