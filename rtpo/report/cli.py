"""`rtpo report <tables|figures|ledger|all>`: read the runs the config names, write the report.

    rtpo report all --config config/config.yaml --results results --tables results/tables --figures figures

tables  -> <tables>/<name>.{csv,md,tex} for every table of rtpo.report.tables, plus
           <tables>/report_inputs.csv (every file read, with its record count) and
           <tables>/report_missing.txt (files the config expects that were absent; empty if none)
figures -> <figures>/<name>.{png,pdf} for every figure of rtpo.report.figures
ledger  -> <tables>/claims.{csv,md,tex} (+ timing_claims.{csv,md}: the wall-clock claims)
status  -> <tables>/status.md (the README's status section) and <tables>/timing_status.md
Files named timing_* hold wall-clock numbers; every other file is the same on a rerun of the DAG.

Checks of a finished run (`tools_main`; rtpo.cli hands `rtpo report compare|reference|summary|claims-map` here):

    rtpo report compare --reference reference/cpu-default results/tables   # rtpo.report.compare
    rtpo report reference --tables results/tables --figures figures --out reference/cpu-default
    rtpo report summary --start EPOCH --rc STATUS -- <snakemake args>     # rtpo.report.summary
    rtpo report claims-map --tables reference/cpu-default --sweep reference/sweep --out docs/claims.md

compare   per table identical / within the stated uncertainty / BEYOND / STRUCTURE / MISSING and a
          verdict; exit 0 (identical, within), 1 (otherwise), 2 (bad input)
reference copy the compared tables of a run into a reference directory, with a README (commit, date, CPU)
summary   the one-screen summary scripts/pipeline.sh prints at the end (which ignores its exit status)
claims-map docs/claims.md: per claim, the runs and command behind its evidence and what the run showed
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
               progress: bool = False, only: list[str] | None = None) -> list[Path]:
    """Write the requested part of the report; returns the paths written. only: with `tables`, just the
    named tables (a named Snakemake target: their files and nothing else; ValueError if one writes none)."""
    from rtpo.report.figures import FIGURES
    from rtpo.report.ledger import write_ledger
    from rtpo.report.status import write_status
    from rtpo.report.table_base import write_table
    from rtpo.report.tables import builders, mark_not_run

    if what not in ("tables", "figures", "ledger", "status", "all"):
        raise ValueError(f"report: unknown part {what!r} (tables | figures | ledger | status | all)")
    if only and what != "tables":
        raise ValueError(f"report: --only names tables; it does not apply to {what!r}")
    chosen = builders(only)
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
        if not only:
            written += _write_manifest(res, tables_dir)
        for fn in tqdm(chosen, desc="tables", disable=not progress):
            made = fn(res)
            if only and not any(t.name == fn.__name__ for t in made):
                raise ValueError(f"report: table {fn.__name__} has no runs to show under {results} (config "
                                 f"{cfg.get('name', '?')}: the study or task it needs is not in the config or not run)")
            for t in made:
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
    if args.what == "sweep":  # the mechanism sweep's own table, claims and figure (rules/sweep.smk)
        from rtpo.report.sweep import write_sweep

        written = write_sweep(args.results, cfg, args.tables, args.figures)
        print(f"rtpo report sweep: wrote {len(written)} files under {args.tables} and {args.figures}")
        return 0
    written = run_report(args.what, args.results, cfg, args.tables, args.figures, progress=True,
                         only=getattr(args, "only", None))
    print(f"rtpo report {args.what}: wrote {len(written)} files under {args.tables} and {args.figures}")
    return 0


def tools_parser():
    import argparse

    p = argparse.ArgumentParser(prog="rtpo report", description="checks of a finished run's tables")
    sub = p.add_subparsers(dest="tool", required=True)
    c = sub.add_parser("compare", help="a run's tables against reference tables, within the run's stated uncertainty")
    c.add_argument("--reference", required=True, help="a reference directory (e.g. reference/cpu-default)")
    c.add_argument("tables", nargs="?", default="results/tables", help="the run's tables directory")
    c.add_argument("--details", type=int, default=3, help="out-of-bound numbers listed per table beyond the first")
    r = sub.add_parser("reference", help="copy the compared tables of a run into a reference directory")
    r.add_argument("--tables", default="results/tables")
    r.add_argument("--out", default="reference/cpu-default")
    r.add_argument("--config", default="config/config.yaml", help="recorded (sha256) in the README")
    r.add_argument("--commit", default=None, help="the commit that ran the DAG (default: HEAD of this checkout)")
    r.add_argument("--figures", default=None, help="the run's figures directory (e.g. figures): its PNGs go to <out>/figures")
    m = sub.add_parser("claims-map", help="docs/claims.md: each claim's runs, command, evidence file and our result")
    m.add_argument("--tables", default="reference/cpu-default", help="a directory with claims.csv")
    m.add_argument("--sweep", default=None, help="a directory with sweep_claims.csv (e.g. reference/sweep): adds its section")
    m.add_argument("--out", default="docs/claims.md")
    s = sub.add_parser("summary", help="the summary scripts/pipeline.sh prints after Snakemake")
    s.add_argument("--start", type=float, required=True, help="epoch seconds when Snakemake started")
    s.add_argument("--rc", type=int, required=True, help="Snakemake's exit status")
    s.add_argument("--workdir", default=".")
    s.add_argument("--tables", default="results/tables")
    s.add_argument("--figures", default="figures")
    s.add_argument("--reference", default="reference/cpu-default")
    s.add_argument("--log", default=None, help="the Snakemake log (default: the newest written since --start)")
    s.add_argument("snakemake_args", nargs="*", help="after --: the arguments Snakemake was given")
    return p


def tools_main(argv: list[str]) -> int:
    """`rtpo report compare|reference|summary ...` (argv without 'report')."""
    args = tools_parser().parse_args(argv)
    try:
        if args.tool == "compare":
            from rtpo.report.compare import compare_dirs, exit_code, report_lines

            results = compare_dirs(args.reference, args.tables)
            print("\n".join(report_lines(results, details=args.details)))
            return exit_code(results)
        if args.tool == "claims-map":
            from rtpo.report.claims_map import write_claims_map

            print(f"rtpo report claims-map: {write_claims_map(args.tables, args.out, sweep=args.sweep)}")
            return 0
        if args.tool == "reference":
            from rtpo.report.reference import make_reference

            written = make_reference(args.tables, args.out, config=args.config, commit=args.commit,
                                     figures=args.figures)
            n_fig = sum(1 for w in written if w.suffix == ".png")
            print(f"rtpo report reference: {len(written) - 1 - n_fig} tables, {n_fig} figures and README.md -> {args.out}")
            return 0
        from rtpo.report.summary import summary_lines, wants_summary

        if wants_summary(args.snakemake_args):
            print("\n".join(summary_lines(args.rc, args.start, args.snakemake_args, workdir=args.workdir,
                                          tables=args.tables, figures=args.figures, reference=args.reference,
                                          log_path=args.log)))
        return 0
    except (OSError, ValueError) as e:
        print(f"rtpo report {args.tool}: error: {e}", file=sys.stderr)
        return 2
