"""The pilot: `snakemake --profile slurm pilot`, the first cluster command after `download` (rtpo.verl_ext.pilot;
docs/cluster.md). Engine verl only (config `pilot`; the CPU default pilots nothing).

pilot_train: the first pilot.steps steps of a cell's seed-0 run, in that run's own directory under its own
job guard (RTPO_STOP_AFTER_STEP: the trainer saves and stops there, exit 143), then what it measured
(results/pilot/<task>/<method>.json). train_<method>'s seed-0 job of the cell waits for it and resumes from
its checkpoint (rules/train.smk: pilot_input). pilot_eval: the first shard of vanilla's seed-0 evaluation
(RTPO_EVAL_MAX_SHARDS=1: the base model), then what it measured (results/pilot/<task>/eval.json);
evaluate_run's vanilla seed-0 job resumes from the shard. Resources: the workflow profile's pilot_train
(= train) and pilot_eval (= evaluate_run, the same eval_shard: another shard size would not resume).
pilot: gathers them into results/pilot/pilot.json, which `rtpo check-config` reads (rtpo.verl_ext.sizing).
The later jobs take the pilot files as ancient() inputs (an order, not content): a pilot rerun after them
reruns nothing; and a pilot of a run or an evaluation already complete measures it instead of redoing it.
"""


rule pilot_train:
    input:
        train=lambda wildcards: pilot_run(wildcards).inputs.train_file,
        model=lambda wildcards: pilot_run(wildcards).inputs.base_model,
    output:
        "results/pilot/{task}/{method}.json",
    log:
        "results/logs/pilot/{task}/{method}.log",
    wildcard_constraints:
        method=dag.keys_regex({m for m, _ in PILOT_CELLS}),
        task=dag.keys_regex({t for _, t in PILOT_CELLS}),
    conda:
        CONDA_ENV
    threads: PIPELINE.threads
    params:
        settings=lambda wildcards: experiment.fingerprint(pilot_run(wildcards).settings),
        stamp=lambda wildcards: pilot_run(wildcards).stamp,
        steps=pilots.pilot_steps(config),
        run="results/runs/{task}/{method}/seed0",
        key=dag.key_args("main"),
        config=config_path,
        deadline=rule_deadline,
    shell:
        "if [ -f {params.run}/summary.json ]; then echo 'the run is complete: measured from it' > {log}; else "
        "{params.deadline}export RTPO_STOP_AFTER_STEP={params.steps}; "
        "rtpo train --config {params.config} --method {wildcards.method} --task {wildcards.task} --seed 0 "
        "--model {input.model} --train-file {input.train} {params.key} --out {params.run} --job-guard "
        "> {log} 2>&1 || [ $? -eq 143 ]; fi; "
        "python -m rtpo.verl_ext.pilot train --run {params.run} --cell {wildcards.method}/{wildcards.task} "
        "--stamp {params.stamp} --out {output} >> {log} 2>&1"


rule pilot_eval:
    input:
        model="results/runs/{task}/vanilla/seed0/final",
        eval="results/data/{task}/eval.jsonl",
    output:
        "results/pilot/{task}/eval.json",
    log:
        "results/logs/pilot/{task}/eval.log",
    wildcard_constraints:
        task=dag.keys_regex(PILOT_EVAL_TASKS),
    conda:
        CONDA_ENV
    threads: PIPELINE.threads
    params:
        settings=lambda wildcards: experiment.fingerprint(PIPELINE.eval_settings("vanilla", wildcards.task)),
        out="results/eval/{task}/vanilla/seed0.json",
        config=config_path,
        engine=eval_engine,
        shard=eval_shard,
    shell:
        "if [ -f {params.out} ]; then echo 'the evaluation is complete: measured from it' > {log}; else "
        "{params.shard}export RTPO_EVAL_MAX_SHARDS=1; "
        "rtpo evaluate --config {params.config} --model {input.model} --method vanilla --task {wildcards.task} "
        "--seed 0 --eval-file {input.eval} --engine {params.engine} --out {params.out} > {log} 2>&1 || [ $? -eq 143 ]; "
        "fi; python -m rtpo.verl_ext.pilot eval --shards {params.out}.shards --task {wildcards.task} --out {output} "
        ">> {log} 2>&1"


rule pilot:
    input:
        pilots.targets(config),
    output:
        pilots.PILOT_FILE,
    log:
        "results/logs/pilot/pilot.log",
    conda:
        CONDA_ENV
    params:
        name=config["name"],
    shell:
        "python -m rtpo.verl_ext.pilot gather --config {params.name} --out {output} {input} > {log} 2>&1"
