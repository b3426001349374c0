"""Tables, figures and the claim ledger (`rtpo report`, rtpo/report/), all local rules.

The report code decides its file names, so the tables and figures rules declare a sentinel file
written after the command succeeds (results/tables/.tables.done, figures/.figures.done); the
ledger's files are fixed: results/tables/claims.{csv,md}; each of the paper's tables is also a target
of its own, named after it (`snakemake table10_group_size`: rtpo.report.table_names.TABLE_NAMES), and takes only the runs it reads; the status rule
writes the README's status section, results/tables/status.md, and timing_status.md. Files named results/tables/timing_* hold
wall-clock numbers; every other file there is byte-identical when the DAG is rerun on one machine.
report_assets copies the PNG figures and CSV tables into results/report/ as directories marked for
`snakemake --report`.
"""


rule tables:
    input:
        PIPELINE.all_results(),
    output:
        touch("results/tables/.tables.done"),
    log:
        "results/logs/report/tables.log",
    conda:
        CONDA_ENV
    params:
        settings=experiment.fingerprint(config),
        config=config_path,
    shell:
        "rtpo report tables --config {params.config} --results results --tables $(dirname {output}) > {log} 2>&1"


# The paper's tables by name (rtpo.report.table_names.TABLE_NAMES): `snakemake table10_group_size` writes
# results/tables/table10_group_size.{csv,md,tex} alone (`rtpo report tables --only`) from the runs that table
# reads (rtpo.report.table_names.TABLE_RUNS: the group-size arms and the main runs they copy), and trains only those.
# `all` does not use these rules: the tables rule above writes the same files together.
for _name in table_names.TABLE_NAMES:

    rule:
        name:
            _name
        input:
            PIPELINE.table_targets(_name),
        output:
            multiext(f"results/tables/{_name}", ".csv", ".md", ".tex"),
        log:
            f"results/logs/report/{_name}.log",
        localrule: True
        conda:
            CONDA_ENV
        params:
            settings=experiment.fingerprint(config),
            config=config_path,
            name=_name,
        shell:
            "rtpo report tables --only {params.name} --config {params.config} --results results "
            "--tables results/tables > {log} 2>&1"


rule figures:
    input:
        PIPELINE.all_results(),
    output:
        touch("figures/.figures.done"),
    log:
        "results/logs/report/figures.log",
    conda:
        CONDA_ENV
    params:
        settings=experiment.fingerprint(config),
        config=config_path,
    shell:
        "rtpo report figures --config {params.config} --results results --figures $(dirname {output}) > {log} 2>&1"


rule ledger:
    input:
        PIPELINE.all_results(),
        tables="results/tables/.tables.done",
        figures="figures/.figures.done",
    output:
        csv="results/tables/claims.csv",
        md="results/tables/claims.md",
    log:
        "results/logs/report/ledger.log",
    conda:
        CONDA_ENV
    params:
        settings=experiment.fingerprint(config),
        config=config_path,
    shell:
        "rtpo report ledger --config {params.config} --results results --tables $(dirname {output.csv}) " "> {log} 2>&1"


rule status:
    # the README's status section (results/tables/status.md) and the run's timings (timing_status.md)
    input:
        PIPELINE.all_results(),
        tables="results/tables/.tables.done",
        ledger="results/tables/claims.csv",
    output:
        status="results/tables/status.md",
        timing="results/tables/timing_status.md",
    log:
        "results/logs/report/status.log",
    conda:
        CONDA_ENV
    params:
        settings=experiment.fingerprint(config),
        config=config_path,
    shell:
        "rtpo report status --config {params.config} --results results --tables $(dirname {output.status}) "
        "> {log} 2>&1"


rule report_assets:
    input:
        tables="results/tables/.tables.done",
        figures="figures/.figures.done",
        ledger="results/tables/claims.csv",
    output:
        figures=report(
            directory("results/report/figures"),
            patterns=["{name}.png"],
            caption="../report/figures.rst",
            category="Figures",
        ),
        tables=report(
            directory("results/report/tables"),
            patterns=["{name}.csv"],
            caption="../report/tables.rst",
            category="Tables",
        ),
    log:
        "results/logs/report/report_assets.log",
    conda:
        CONDA_ENV
    shell:
        """
        mkdir -p {output.figures} {output.tables}
        find $(dirname {input.figures}) -maxdepth 1 -name '*.png' -exec cp {{}} {output.figures}/ \\;
        find $(dirname {input.tables}) -maxdepth 1 -name '*.csv' -exec cp {{}} {output.tables}/ \\;
        ls {output.figures} {output.tables} > {log}
        """
