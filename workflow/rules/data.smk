"""Task data: `rtpo data` per task (docs/ARCHITECTURE.md).

CPU configs: the embedded generators and scripted experts (seeded, disjoint train/eval splits).
Paper scale: the benchmark downloads and adapters of rtpo.data (data.<task>.train / .benchmarks).
Writes results/data/<task>/{train,eval,experts}.jsonl, plus corpus.jsonl for search (read by the
search env at paper scale; the embedded corpus is rebuilt from the seed, so it is not declared).
"""


rule prepare_data:
    output:
        train="results/data/{task}/train.jsonl",
        eval="results/data/{task}/eval.jsonl",
        experts="results/data/{task}/experts.jsonl",
    params:
        settings=lambda wildcards: fingerprint(data_settings(wildcards.task)),
        config=config_path,
    log:
        "results/logs/data/{task}.log",
    threads: 1
    conda:
        CONDA_ENV
    shell:
        "rtpo data --config {params.config} --task {wildcards.task} --out $(dirname {output.train}) > {log} 2>&1"
