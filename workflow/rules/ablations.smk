"""Ablations (config `ablations`) and the theory checks.

Studies (rtpo.dag.ablation_cells):
  group_size         RTPO with G in values on ablations.group_size.task       paper G.2, Tables 10-11
  sync               RTPO weight sync per_stage | interval:N | kl:tau          paper G.6
  continuation       RTPO on- versus off-policy continuation                   paper F.3, Tables 3 and 6
  credit_assignment  the listed methods (RTPO-CA and baselines) under psi=full paper §4.3, Table 2
  airline            every method on airline (main-grid runs)                  paper G.1, Tables 7-9
Files: results/ablations/<study>/<variant>/<task>/<method>/seed<seed>/ (as a main run) and
.../<method>/eval_seed<seed>.json. A cell identical to a main run copies it (ablation_reuse_*);
the others train and evaluate with `--set` overrides. The {run} / {evalrun} wildcards are the
cell keys below results/ablations/, constrained to the exact lists computed by rtpo.dag (common.smk).
"""


rule ablation_train:
    input:
        train=lambda wildcards: data_file(cell_of(wildcards).task, "train"),
        model="results/models/base",
    output:
        summary="results/ablations/{run}/summary.json",
        final=directory("results/ablations/{run}/final"),
    wildcard_constraints:
        run=TRAINED_RUNS,
    params:
        method=lambda wildcards: cell_of(wildcards).method,
        task=lambda wildcards: cell_of(wildcards).task,
        seed=lambda wildcards: cell_of(wildcards).seed,
        sets=lambda wildcards: set_args(cell_of(wildcards).sets),
        settings=lambda wildcards: fingerprint(run_settings(cell_of(wildcards).method, cell_of(wildcards).task,
                                                            cell_of(wildcards).sets)),
        stamp=lambda wildcards: stamp(fingerprint(train_settings(cell_of(wildcards).method, cell_of(wildcards).task,
                                                                 cell_of(wildcards).sets))),
        config=config_path,
    log:
        "results/logs/ablations/{run}/train.log",
    benchmark:
        "results/benchmarks/ablations/{run}/train.tsv"
    threads: THREADS
    conda:
        CONDA_ENV
    shell:
        TRAIN_SHELL


rule ablation_evaluate:
    input:
        model=lambda wildcards: f"{cell_of(wildcards).run_dir}/final",
        eval=lambda wildcards: data_file(cell_of(wildcards).task, "eval"),
    output:
        result="results/ablations/{evalrun}.json",
    wildcard_constraints:
        evalrun=TRAINED_EVALS,
    params:
        method=lambda wildcards: cell_of(wildcards).method,
        task=lambda wildcards: cell_of(wildcards).task,
        seed=lambda wildcards: cell_of(wildcards).seed,
        sets=lambda wildcards: set_args(cell_of(wildcards).sets),
        settings=lambda wildcards: fingerprint(eval_settings(cell_of(wildcards).method, cell_of(wildcards).task,
                                                             cell_of(wildcards).sets)),
        config=config_path,
        engine=eval_engine,
    log:
        "results/logs/ablations/{evalrun}.log",
    benchmark:
        "results/benchmarks/ablations/{evalrun}.tsv"
    threads: THREADS
    conda:
        CONDA_ENV
    shell:
        "rtpo evaluate --config {params.config} --model {input.model} --method {params.method} "
        "--task {params.task} --seed {params.seed} --eval-file {input.eval} {params.sets} "
        "--engine {params.engine} --out {output.result} > {log} 2>&1"


rule ablation_reuse_run:
    input:
        summary=lambda wildcards: f"{run_dir(*REUSED[wildcards.run])}/summary.json",
    output:
        summary="results/ablations/{run}/summary.json",
    wildcard_constraints:
        run=REUSED_RUNS,
    log:
        "results/logs/ablations/{run}/reuse.log",
    conda:
        CONDA_ENV
    shell:
        """
        src=$(dirname {input.summary}); out=$(dirname {output.summary})
        mkdir -p "$out"
        if [ -f "$src/metrics.jsonl" ]; then cp "$src/metrics.jsonl" "$out/metrics.jsonl"; fi
        echo "$src" > "$out/reused_from.txt"
        cp {input.summary} {output.summary}
        echo "copied $src (identical settings) to $out" > {log}
        """


rule ablation_reuse_eval:
    input:
        result=lambda wildcards: eval_file(*REUSED[cell_of(wildcards).key]),
    output:
        result="results/ablations/{evalrun}.json",
    wildcard_constraints:
        evalrun=REUSED_EVALS,
    log:
        "results/logs/ablations/{evalrun}.log",
    conda:
        CONDA_ENV
    shell:
        "cp {input.result} {output.result} && echo 'copied {input.result} (identical settings)' > {log}"


rule theory:
    output:
        directory("results/theory"),
    params:
        quick="--quick" if ABLATIONS.get("theory", {}).get("quick", False) else "",
    log:
        "results/logs/theory.log",
    threads: 1
    conda:
        CONDA_ENV
    shell:
        "rtpo theory --out {output} {params.quick} > {log} 2>&1"
