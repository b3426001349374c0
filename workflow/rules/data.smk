"""Task data: `rtpo data` per task (docs/ARCHITECTURE.md).

CPU configs: the embedded generators and scripted experts (seeded, disjoint train/eval splits).
Paper scale: rtpo.data.paper (data.<task>.train / .benchmarks): pinned downloads, the adapters,
decontamination against every benchmark of the config, the search backend of each task.
Writes results/data/<task>/{train,eval,experts}.jsonl; CPU search also corpus.jsonl (the embedded
corpus is rebuilt from the seed, so it is not declared); paper scale also decontamination.{json,md},
sources.json and not_run.json (deep-search benchmarks without a web-search key).
"""


include: "retrieval.smk"


rule prepare_data:
    input:
        unpack(lambda wildcards: PIPELINE.search.inputs(wildcards.task)),
    output:
        train="results/data/{task}/train.jsonl",
        eval="results/data/{task}/eval.jsonl",
        experts="results/data/{task}/experts.jsonl",
    log:
        "results/logs/data/{task}.log",
    conda:
        CONDA_ENV
    threads: 1
    params:
        settings=lambda wildcards: experiment.fingerprint(PIPELINE.prepare_settings(wildcards.task)),
        config=config_path,
    shell:
        "rtpo data --config {params.config} --task {wildcards.task} --out $(dirname {output.train}) > {log} 2>&1"
