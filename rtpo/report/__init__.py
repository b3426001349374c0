"""The report: the paper's tables, figures and a claim-by-claim ledger, recomputed from our runs.

`rtpo report <tables|figures|ledger|all>` (rtpo.report.cli.report_main) reads what the config
names (load.py), and writes
  tables.py   <tables>/<name>.{csv,md,tex}: CSV = tidy numbers with per-seed values; md/tex = mean ± std
              (the registry; builders in tables_main.py and tables_studies.py, shared parts in table_base.py)
  figures.py  <figures>/<name>.{png,pdf}
  ledger.py   <tables>/claims.{csv,md,tex}: paper's figure, ours with a 95 % CI over seeds, verdict
After a run: compare.py (`rtpo report compare --reference reference/cpu-default results/tables`: each
table identical / within its stated uncertainty / beyond it, and a verdict; `rtpo report reference`
makes such a directory) and summary.py (`rtpo report summary`: what scripts/pipeline.sh prints at the end).
stats.py holds the seed statistics and the verdict rules the ledger quotes; paper_reference.py every
figure of the paper the tables and the ledger show, with its section / table.
"""
