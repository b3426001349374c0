"""`rtpo report <tables|figures|ledger|all>`: read the runs the config names, write the report.

    rtpo report all --config config/config.yaml --results results --tables results/tables --figures figures

tables  -> <tables>/<name>.{csv,md,tex} for every table of rtpo.report.tables, plus
           <tables>/report_inputs.csv (every file read, with its record count) and
           <tables>/report_missing.txt (files the config expects that were absent; empty if none)
figures -> <figures>/<name>.{png,pdf} for every figure of rtpo.report.figures
ledger  -> <tables>/claims.{csv,md,tex} (+ timing_claims.{csv,md}: the wall-clock claims)
status  -> <tables>/status.md (the README's status section) and <tables>/timing_status.md
Files named timing_* hold wall-clock numbers; every other file is the same on a rerun of the DAG.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
from rtpo.progress import progress as tqdm

from rtpo.report.load import Results, load_results


def _write_manifest(res: Results, outdir: Path) -> list[Path]:
    outdir.mkdir(parents=True, exist_ok=True)
    inputs = outdir / "report_inputs.csv"
    pd.DataFrame(res.inputs, columns=["kind", "scope", "variant", "task", "method", "seed", "path", "records"]
                 ).to_csv(inputs, index=False)
    missing = outdir / "report_missing.txt"
    missing.write_text("".join(f"{p}\n" for p in res.missing))
    return [inputs, missing]


def run_report(what: str, results: str | Path, cfg: dict, tables_dir: str | Path, figures_dir: str | Path,
               progress: bool = False) -> list[Path]:
    """Write the requested part of the report; returns the paths written."""
    from rtpo.report.figures import FIGURES
    from rtpo.report.ledger import write_ledger
    from rtpo.report.status import write_status
    from rtpo.report.tables import TABLES, mark_not_run, write_table

    if what not in ("tables", "figures", "ledger", "status", "all"):
        raise ValueError(f"report: unknown part {what!r} (tables | figures | ledger | status | all)")
    res = load_results(results, cfg)
    if res.steps.empty and res.evals.empty:
        raise FileNotFoundError(f"report: no metrics.jsonl or eval JSON under {results} for the runs the config "
                                f"names (first expected: {res.missing[0] if res.missing else '-'})")
    if res.missing:
        print(f"rtpo report: {len(res.missing)} expected file(s) absent, e.g. {res.missing[0]} "
              f"(list in {Path(tables_dir) / 'report_missing.txt'})", file=sys.stderr)
    written: list[Path] = []
    tables_dir, figures_dir = Path(tables_dir), Path(figures_dir)
    if what in ("tables", "all"):
        written += _write_manifest(res, tables_dir)
        for fn in tqdm(TABLES, desc="tables", disable=not progress):
            for t in fn(res):
                # benchmarks the data job left out are 'not run' rows, never silently missing
                written += write_table(mark_not_run(res, t) if res.not_run else t, tables_dir)
    if what in ("figures", "all"):
        for fn in tqdm(FIGURES, desc="figures", disable=not progress):
            written += fn(res, figures_dir)
    if what in ("ledger", "all"):
        written += write_ledger(res, tables_dir)
    if what in ("status", "all"):
        written += write_status(res, tables_dir)
    return written


def report_main(args) -> int:
    """Entry point of `rtpo report` (args: what, results, tables, figures, config, set)."""
    from rtpo.config import load_config

    cfg = load_config(args.config, getattr(args, "set", None))
    written = run_report(args.what, args.results, cfg, args.tables, args.figures, progress=True)
    print(f"rtpo report {args.what}: wrote {len(written)} files under {args.tables} and {args.figures}")
    return 0
