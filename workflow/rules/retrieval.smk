"""Paper-scale retrieval (included by data.smk): fetch the search corpus, build its BM25 index.

Only configs whose `data.search` names a corpus ({path, url, sha256?}) and a retriever with an
`index` get these rules (config/paper.yaml: Search-R1's wiki-18, 21M passages, behind one
`/retrieve` server per node that the search jobs start on demand, rtpo/retrieval/client.py). The
CPU default has none: its search env keeps the in-process index over the embedded corpus.

    fetch_corpus   python -m rtpo.retrieval.fetch URL corpus.jsonl [--sha256 H] [--gunzip]
    build_index    python -m rtpo.retrieval.index build --corpus corpus.jsonl --out <index dir>

prepare_data of the search task takes the index (or the corpus, for an in-memory index) as input,
so every search training and evaluation job is downstream of both. Resources: the workflow profile
(sized from scripts/bench_retrieval.py; README "Retrieval at paper scale").
"""

if PIPELINE.search.corpus and PIPELINE.search.corpus.get("url"):

    rule fetch_corpus:
        output:
            corpus=PIPELINE.search.corpus["path"],
        log:
            "results/logs/retrieval/fetch_corpus.log",
        conda:
            CONDA_ENV
        threads: 1
        params:
            url=PIPELINE.search.corpus["url"],
            options=" ".join(
                ([f"--sha256 {PIPELINE.search.corpus['sha256']}"] if PIPELINE.search.corpus.get("sha256") else [])
                + (["--gunzip"] if PIPELINE.search.corpus["url"].split("?")[0].endswith(".gz") else [])
            ),
        shell:
            "python -m rtpo.retrieval.fetch {params.url:q} {output.corpus} {params.options} > {log} 2>&1"


if PIPELINE.search.index:

    rule build_index:
        input:
            corpus=PIPELINE.search.corpus["path"],
        output:
            index=directory(PIPELINE.search.index),
        log:
            "results/logs/retrieval/build_index.log",
        benchmark:
            "results/benchmarks/retrieval/build_index.tsv"
        conda:
            CONDA_ENV
        threads: 1
        params:
            command=PIPELINE.search.build_index_command,
        shell:
            "{params.command} --corpus {input.corpus} --out {output.index} > {log} 2>&1"
