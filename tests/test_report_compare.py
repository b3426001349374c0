"""`rtpo report compare | reference | summary` and the end of scripts/pipeline.sh.

The tables are those `rtpo report tables` + `ledger` write for the synthetic results tree of
tests/report_fixture.py (3 seeds in the main grid; the ablations at one seed, as the CPU default);
the reference is made from them with `rtpo report reference`, and a run is a copy with one number
moved. pipeline.sh runs against fakes of setup_venv.sh and snakemake (no DAG).
"""

from __future__ import annotations

import math
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from rtpo.cli import main as rtpo_main
from rtpo.report.compare import (
    BEYOND, IDENTICAL, MISSING, STRUCTURE, WITHIN, chance_allowance, compare_dirs, compare_table,
    compared_files, exit_code, ratio_bound, read_table, verdict,
)
from rtpo.report.summary import config_of, parse_snakemake_log, summary_lines, wants_summary
from tests.report_fixture import fixture_config, make_results_tree, write_config

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    """A tables directory as the DAG writes it (CSV, md, tex, timing_*, report_inputs.csv, claims.*)."""
    work = tmp_path_factory.mktemp("compare")
    cfg = fixture_config(**{"train.steps": 4, "ablations.seeds": [0]})
    config = write_config(cfg, work / "config.yaml")
    make_results_tree(work, cfg)
    for what in ("tables", "ledger"):
        assert rtpo_main(["report", what, "--config", str(config), "--results", str(work / "results"),
                          "--tables", str(work / "results" / "tables"), "--figures", str(work / "figures")]) == 0
    (work / "results" / "tables" / "status.md").write_text("status\n")
    return work / "results" / "tables"


@pytest.fixture()
def ref_run(tables, tmp_path):
    """(reference dir made by `rtpo report reference`, a run dir: a full copy of the tables)."""
    ref, run = tmp_path / "reference", tmp_path / "run"
    assert rtpo_main(["report", "reference", "--tables", str(tables), "--out", str(ref)]) == 0
    shutil.copytree(tables, run)
    return ref, run


def _compare(ref: Path, run: Path, capsys) -> tuple[int, str]:
    capsys.readouterr()
    rc = rtpo_main(["report", "compare", "--reference", str(ref), str(run)])
    return rc, capsys.readouterr().out


def _line(out: str, table: str) -> str:
    return next(ln for ln in out.splitlines() if ln.split()[1:2] == [table] or f" {table}:" in ln)


def _edit(run: Path, table: str, where: dict, column: str, fn) -> tuple[str, str]:
    """Set `column` of the one row of run/<table>.csv matching `where` to fn(row); returns (old, new)."""
    path = run / f"{table}.csv"
    df = read_table(path)
    m = pd.Series(True, index=df.index)
    for k, v in where.items():
        m &= df[k] == v
    assert m.sum() == 1, (table, where)
    i = df.index[m][0]
    old = df.at[i, column]
    new = fn(df.loc[i].to_dict())
    df.at[i, column] = new
    df.to_csv(path, index=False)
    return old, new


def _spread_row(run: Path, table: str = "table01_main") -> dict:
    """A row of `table` with a finite, non-zero CI (3 seeds, values that differ)."""
    df = pd.read_csv(run / f"{table}.csv")
    df = df[(df.ci95_hi - df.ci95_lo) > 1e-6]
    return df.iloc[0].to_dict()


def _half(r: dict) -> float:
    return (float(r["ci95_hi"]) - float(r["ci95_lo"])) / 2


KEY = ("task", "benchmark", "method", "metric")


# ------------------------------------------------------------------------------------------------
# the reference directory
# ------------------------------------------------------------------------------------------------

def test_reference_keeps_exactly_the_compared_files(tables, ref_run):
    ref, _ = ref_run
    kept = sorted(p.name for p in ref.iterdir())
    assert kept == sorted([*compared_files(tables), "README.md"])
    assert "claims.csv" in kept and "table01_main.csv" in kept
    assert not [n for n in kept if n.startswith("timing_") or n.endswith((".md", ".tex")) and n != "README.md"]
    assert "report_inputs.csv" not in kept and "report_missing.txt" not in kept and "status.md" not in kept
    readme = (ref / "README.md").read_text()
    for needle in ("commit", "avx2", "avx512f", "cpu", "rtpo report reference --tables results/tables --figures figures "
                   "--out reference/cpu-default", "rtpo report compare --reference reference/cpu-default results/tables"):
        assert needle in readme, needle
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert head and head in readme
    # no directory of the machine that made it: the tables' path outside the repository is its last two parts
    assert str(tables.parent) not in readme and "| from | results/tables |" in readme
    assert "which run one seed" not in readme
    # rerun into the same directory: a stale CSV there is removed, the README rewritten
    (ref / "table99_stale.csv").write_text("a,b\n1,2\n")
    assert rtpo_main(["report", "reference", "--tables", str(tables), "--out", str(ref), "--commit", "abc123"]) == 0
    assert not (ref / "table99_stale.csv").exists() and "abc123" in (ref / "README.md").read_text()


def test_reference_keeps_the_runs_figures(tables, tmp_path, capsys):
    """--figures copies the run's PNGs into <out>/figures (a stale PNG there removed) and the README links
    each; a figures directory without PNGs is refused (exit 2) before anything is replaced."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figs = tmp_path / "figures"
    figs.mkdir()
    for name in ("fig03_consistency", "fig_learning", "sweep_horizon"):
        fig, ax = plt.subplots(figsize=(2, 2))
        ax.plot([0, 1], [0, 1])
        fig.savefig(figs / f"{name}.png", dpi=50)
        plt.close(fig)
    (figs / "fig03_consistency.pdf").write_bytes(b"%PDF-1.4 not kept")
    out = tmp_path / "ref"
    (out / "figures").mkdir(parents=True)
    (out / "figures" / "old_figure.png").write_bytes(b"stale")
    assert rtpo_main(["report", "reference", "--tables", str(tables), "--figures", str(figs), "--out", str(out),
                      "--commit", "abc123"]) == 0
    assert "2 figures" in capsys.readouterr().out
    assert sorted(p.name for p in (out / "figures").iterdir()) == ["fig03_consistency.png", "fig_learning.png"]
    from PIL import Image

    with Image.open(out / "figures" / "fig_learning.png") as small, Image.open(figs / "fig_learning.png") as big:
        assert small.size == big.size and small.mode == "P"   # 100 px: under the width, kept; 256 colours
    wide = tmp_path / "wide"
    wide.mkdir()
    fig, ax = plt.subplots(figsize=(16, 8))
    ax.plot([0, 1], [1, 0])
    fig.savefig(wide / "fig_wide.png", dpi=150)
    plt.close(fig)
    from rtpo.report.reference import REFERENCE_PNG_WIDTH, small_png

    small_png(wide / "fig_wide.png", tmp_path / "small.png")
    with Image.open(tmp_path / "small.png") as im:
        assert im.size == (REFERENCE_PNG_WIDTH, REFERENCE_PNG_WIDTH // 2)
    assert (tmp_path / "small.png").stat().st_size < (wide / "fig_wide.png").stat().st_size / 2
    readme = (out / "README.md").read_text()
    assert "[fig03_consistency](figures/fig03_consistency.png)" in readme and "old_figure" not in readme
    empty = tmp_path / "nofigs"
    empty.mkdir()
    assert rtpo_main(["report", "reference", "--tables", str(tables), "--figures", str(empty), "--out", str(out)]) == 2
    assert "holds no PNG figures" in capsys.readouterr().err
    assert (out / "figures" / "fig_learning.png").exists() and "abc123" in (out / "README.md").read_text()
    # tables alone: the earlier run's figures go (they are not this run's), the README lists none
    assert rtpo_main(["report", "reference", "--tables", str(tables), "--out", str(out), "--commit", "def456"]) == 0
    assert not list((out / "figures").glob("*.png")) and "## Figures" not in (out / "README.md").read_text()


def test_repository_reference_is_one_consistent_run(tmp_path, capsys, monkeypatch):
    """The committed reference: its README names the command, the commit and the CPU flags; it is
    comparable (against itself: identical, every file a table compare knows); and docs/claims.md is
    what `rtpo report claims-map` makes from its ledger today (so the map cannot drift from it)."""
    ref = ROOT / "reference" / "cpu-default"
    readme = (ref / "README.md").read_text()
    assert "rtpo report reference --tables results/tables --figures figures --out reference/cpu-default" in readme
    figs = sorted(p.name for p in (ref / "figures").glob("*.png"))
    assert "fig03_consistency.png" in figs and all(f"(figures/{f})" in readme for f in figs)
    assert "rtpo report compare --reference reference/cpu-default results/tables" in readme
    commit = next(x for x in readme.splitlines() if x.startswith("| commit |")).split("|")[2].strip()
    assert len(commit) == 40 and all(c in "0123456789abcdef" for c in commit), commit
    assert any(x.startswith("| avx512f | ") for x in readme.splitlines())
    csvs = sorted(p.name for p in ref.glob("*.csv"))
    assert "claims.csv" in csvs and "table01_main.csv" in csvs and len(csvs) >= 15
    code, out = _compare(ref, ref, capsys)
    assert code == 0 and f"verdict: identical ({len(csvs)} tables)" in out
    made = tmp_path / "claims.md"
    monkeypatch.chdir(ROOT)  # the map names the ledger by the path it was given
    assert rtpo_main(["report", "claims-map", "--tables", "reference/cpu-default", "--sweep", "reference/sweep",
                      "--out", str(made)]) == 0
    assert made.read_text() == (ROOT / "docs" / "claims.md").read_text()
    # the mechanism sweep's reference: its two tables, comparable, and the run's commit named
    sweep = ROOT / "reference" / "sweep"
    assert sorted(p.name for p in sweep.glob("*.csv")) == ["sweep_claims.csv", "sweep_horizon.csv"]
    assert "bash scripts/pipeline.sh sweep" in (sweep / "README.md").read_text()
    code, out = _compare(sweep, sweep, capsys)
    assert code == 0 and "verdict: identical (2 tables)" in out


# ------------------------------------------------------------------------------------------------
# verdicts
# ------------------------------------------------------------------------------------------------

def test_identical_tree_is_identical(ref_run, capsys):
    ref, run = ref_run
    rc, out = _compare(ref, run, capsys)
    n = len(compared_files(ref))
    assert rc == 0 and out.strip().splitlines()[-1] == f"verdict: identical ({n} tables)", out
    assert all(ln.startswith("identical") for ln in out.strip().splitlines()[:-1])


def test_timing_and_path_files_are_ignored(ref_run, capsys):
    ref, run = ref_run
    for p in run.glob("timing_*"):
        p.write_text("completely,different\n1,2\n")
    (run / "report_inputs.csv").write_text("kind,path\neval,/elsewhere/x.json\n")
    (run / "report_missing.txt").write_text("/some/missing/file\n")
    (run / "status.md").write_text("other\n")
    (run / "table01_main.md").write_text("other\n")
    rc, out = _compare(ref, run, capsys)
    assert rc == 0 and "verdict: identical" in out, out
    assert "timing" not in out and "report_inputs" not in out


def test_number_moved_within_its_ci_is_within(ref_run, capsys):
    ref, run = ref_run
    r = _spread_row(run)
    _edit(run, "table01_main", {k: r[k] for k in KEY}, "mean", lambda row: repr(float(row["mean"]) + 0.5 * _half(r)))
    rc, out = _compare(ref, run, capsys)
    assert rc == 0, out
    assert _line(out, "table01_main").startswith("within")
    assert "verdict: within the run's stated uncertainty" in out and "1 within" in out


def test_number_moved_beyond_its_ci_is_flagged(ref_run, capsys):
    ref, run = ref_run
    r = _spread_row(run)
    old, new = _edit(run, "table01_main", {k: r[k] for k in KEY}, "mean",
                     lambda row: repr(float(row["mean"]) + 1.5 * _half(r)))
    rc, out = _compare(ref, run, capsys)
    assert rc == 1, out
    line = _line(out, "table01_main")
    assert line.startswith("BEYOND")
    # names the table, the row key, the column, both values and the bound
    assert f"task={r['task']}" in line and f"method={r['method']}" in line and f"metric={r['metric']}" in line
    assert " mean: " in line and f"reference {old}" in line and f"run {new}" in line
    assert f"> {_half(r):.4g}" in line and "95 % CI half-width" in line
    assert "[at chance level]" in line   # one number at 1.5x its bound among hundreds
    last = out.strip().splitlines()[-1]  # a re-draw's signature: what a correct run on another CPU gives
    assert last.startswith("verdict: DIFFERS as a re-draw does (float drift") and \
        "beyond stated uncertainty in 1 table(s): table01_main" in last, last


def test_gross_change_is_not_at_chance_level(ref_run, capsys):
    ref, run = ref_run
    r = _spread_row(run)
    _edit(run, "table01_main", {k: r[k] for k in KEY}, "mean", lambda row: repr(float(row["mean"]) + 10 * _half(r)))
    rc, out = _compare(ref, run, capsys)
    assert rc == 1 and "[at chance level]" not in _line(out, "table01_main")
    assert out.strip().splitlines()[-1].startswith("verdict: DIFFERS beyond stated uncertainty in 1 table(s)")


def test_per_seed_value_beyond_t_std_names_the_seed(ref_run, capsys):
    ref, run = ref_run
    r = _spread_row(run)
    seeds, vals = r["seeds"].split(";"), r["values"].split(";")
    bound = 4.303 * float(r["std"])   # t(0.975, 2) x std over the 3 seeds
    vals[1] = repr(float(vals[1]) + 1.2 * bound)
    _edit(run, "table01_main", {k: r[k] for k in KEY}, "values", lambda row: ";".join(vals))
    rc, out = _compare(ref, run, capsys)
    assert rc == 1
    assert f"values[seed {seeds[1]}]" in _line(out, "table01_main") and "t x seed std" in out


def test_one_seed_cell_states_no_uncertainty(ref_run, capsys):
    ref, run = ref_run
    df = read_table(run / "table10_group_size.csv")
    row = df.iloc[0].to_dict()
    assert row["n"] == "1" and row["std"] == ""
    where = {k: row[k] for k in ("study", "variant", "task", "method", "metric")}
    _edit(run, "table10_group_size", where, "mean", lambda r: repr(float(r["mean"]) * 1.01 + 0.001))
    rc, out = _compare(ref, run, capsys)
    line = _line(out, "table10_group_size")
    assert rc == 1 and line.startswith("BEYOND") and "no stated uncertainty" in line
    assert "only where the table states no uncertainty" in out.strip().splitlines()[-1]


def test_float_rounding_is_within(ref_run, capsys):
    ref, run = ref_run
    df = read_table(run / "table10_group_size.csv")   # one seed: no stated uncertainty, rounding only
    row = df.iloc[0].to_dict()
    where = {k: row[k] for k in ("study", "variant", "task", "method", "metric")}
    _edit(run, "table10_group_size", where, "mean", lambda r: repr(float(r["mean"]) * (1 + 4e-16) + 1e-17))
    rc, out = _compare(ref, run, capsys)
    assert rc == 0 and "float rounding only" in _line(out, "table10_group_size"), out


def test_changed_claim_verdict_is_beyond(ref_run, capsys):
    ref, run = ref_run
    df = read_table(run / "claims.csv")
    cid = df.claim_id.iloc[0]
    old, new = _edit(run, "claims", {"claim_id": cid}, "verdict",
                     lambda r: "not reproduced" if r["verdict"] != "not reproduced" else "reproduced")
    rc, out = _compare(ref, run, capsys)
    line = _line(out, "claims")
    assert rc == 1 and line.startswith("BEYOND") and f"claim_id={cid}" in line and "verdict" in line
    assert repr(old) in line and repr(new) in line and "at chance level" not in line


def test_gains_bound_comes_from_table01_main(ref_run, capsys):
    """table01_gains states no uncertainty for its baseline's mean: table01_main's CI of that method's
    average over the same tasks is the bound."""
    ref, run = ref_run
    main = pd.read_csv(run / "table01_main.csv")
    for g in read_table(run / "table01_gains.csv").to_dict("records"):
        base = g["comparison"].split(" vs ")[1]
        m = main[(main.task == g["tasks"]) & (main.benchmark == "average") & (main.method == base)].iloc[0]
        h = float(m.ci95_hi - m.ci95_lo) / 2
        if h > 0:
            break
    assert h > 0
    _edit(run, "table01_gains", {"comparison": g["comparison"]}, "baseline_mean",
          lambda r: repr(float(r["baseline_mean"]) + 0.9 * h))
    rc, out = _compare(ref, run, capsys)
    assert rc == 0 and _line(out, "table01_gains").startswith("within"), out
    _edit(run, "table01_gains", {"comparison": g["comparison"]}, "baseline_mean",
          lambda r: repr(float(r["baseline_mean"]) + 0.2 * h))   # now 1.1 h from the reference
    rc, out = _compare(ref, run, capsys)
    assert rc == 1 and "table01_main's 95 % CI half-width" in _line(out, "table01_gains"), out


def test_missing_and_extra_tables(ref_run, capsys):
    ref, run = ref_run
    (run / "table10_group_size.csv").unlink()
    shutil.copy(run / "table03_continuation.csv", run / "table99_new.csv")
    rc, out = _compare(ref, run, capsys)
    assert rc == 1
    assert _line(out, "table10_group_size").startswith("MISSING") and "not in" in _line(out, "table10_group_size")
    assert _line(out, "table99_new").startswith("MISSING")
    assert "missing on one side: table10_group_size, table99_new" in out.strip().splitlines()[-1]


def test_structure_differs_names_rows_and_columns(ref_run, capsys):
    ref, run = ref_run
    df = read_table(run / "table07_airline_online.csv")
    df.iloc[1:].to_csv(run / "table07_airline_online.csv", index=False)
    df2 = read_table(run / "table08_airline_eval.csv")
    df2["extra"] = "1"
    df2.to_csv(run / "table08_airline_eval.csv", index=False)
    rc, out = _compare(ref, run, capsys)
    assert rc == 1
    l7, l8 = _line(out, "table07_airline_online"), _line(out, "table08_airline_eval")
    assert l7.startswith("STRUCTURE") and "1 rows missing in the run" in l7 and f"method={df.method.iloc[0]}" in l7
    assert l8.startswith("STRUCTURE") and "columns only in the run: extra" in l8


def test_bad_input_exits_2_naming_the_directory(ref_run, tmp_path, capsys):
    ref, run = ref_run
    capsys.readouterr()
    assert rtpo_main(["report", "compare", "--reference", str(tmp_path / "nope"), str(run)]) == 2
    assert str(tmp_path / "nope") in capsys.readouterr().err
    assert rtpo_main(["report", "compare", "--reference", str(ref), str(tmp_path / "norun")]) == 2
    assert str(tmp_path / "norun") in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "README.md").write_text("template\n")
    assert rtpo_main(["report", "compare", "--reference", str(empty), str(run)]) == 2
    assert "holds no tables" in capsys.readouterr().err


def test_chance_allowance_and_ratio_bound():
    assert chance_allowance(0) == 0 and chance_allowance(100) == 11 and chance_allowance(1000) == 67
    # 100 (r / b - 1) with r = 2 +- 0.1, b = 1 +- 0.1: the corner r = 2.1, b = 0.9 moves it most
    assert math.isclose(ratio_bound(2.0, 0.1, 1.0, 0.1), 100 * (2.1 / 0.9 - 1) - 100, rel_tol=1e-12)
    assert ratio_bound(1.0, 0.1, 0.05, 0.1) == math.inf  # the baseline's interval holds 0


def test_compare_table_units():
    cols = ["task", "method", "metric", "unit", "mean", "std", "n", "ci95_lo", "ci95_hi", "seeds", "values"]
    ref = pd.DataFrame([["math", "rtpo", "pass@1", "fraction", "0.5", "0.1", "3", "0.25", "0.75", "0;1;2",
                         "0.4;0.5;0.6"]], columns=cols)
    run = ref.copy()
    assert compare_table("t", ref, run).status == IDENTICAL
    run.loc[0, "mean"] = "0.7"   # |diff| 0.2 <= 0.25
    assert compare_table("t", ref, run).status == WITHIN
    run.loc[0, "mean"] = "0.8"   # 0.3 > 0.25
    assert compare_table("t", ref, run).status == BEYOND
    run = ref.copy()
    run.loc[0, "n"] = "2"
    assert compare_table("t", ref, run).status == BEYOND
    run = ref.copy()
    run.loc[0, "std"] = "0.3"   # an uncertainty column moves with its value: not checked on its own
    assert compare_table("t", ref, run).status == WITHIN
    run = ref.iloc[[0, 0]].copy()
    assert compare_table("t", ref, run).status == STRUCTURE
    res = [compare_table("t", ref, ref)]
    assert verdict(res) == "verdict: identical (1 tables)" and exit_code(res) == 0
    from rtpo.report.compare import TableResult
    assert exit_code([TableResult("x", MISSING)]) == 1


# ------------------------------------------------------------------------------------------------
# the pipeline's summary
# ------------------------------------------------------------------------------------------------

SNAKEMAKE_LOG = """Assuming unrestricted shared filesystem usage.
  Snakemake version: 9.27.1
  Command: /repo/.venv/bin/snakemake --cores 2
  Config file(s): {configs}
Building DAG of jobs...
Job stats:
job                    count
-------------------  -------
prepare_data               3
train_rtpo                 2
tables                     1
total                      6

Select jobs to execute...
[Thu Dec  3 12:33:16 2026]
Finished jobid: 4 (Rule: prepare_data)
1 of 6 steps (17%) done
Finished jobid: 5 (Rule: prepare_data)
Finished jobid: 6 (Rule: prepare_data)
Finished jobid: 2 (Rule: train_rtpo)
[Thu Dec  3 12:37:38 2026]
Error in rule train_rtpo:
    message: ...
    jobid: 3
    output: results/runs/airline/rtpo/seed0/summary.json
    log: results/logs/train/airline/rtpo/seed0.log (check log file(s) for error details)
    shell:
        rtpo train ...
Exiting because a job execution failed. Look below for error messages
Complete log(s): /repo/.snakemake/log/x.snakemake.log
"""


def test_parse_snakemake_log():
    info = parse_snakemake_log(SNAKEMAKE_LOG.format(configs="['config/config.yaml']"))
    assert info.planned == {"prepare_data": 3, "train_rtpo": 2, "tables": 1}
    assert info.finished == {"prepare_data": 3, "train_rtpo": 1}
    assert info.failed == [("train_rtpo", "results/logs/train/airline/rtpo/seed0.log")]
    assert info.config_files == ["config/config.yaml"]


def test_config_detection_and_info_flags():
    assert config_of([], None)[1] is True
    assert config_of(["tables"], None)[1] is True
    assert config_of(["--configfile", "config/config.yaml"], None)[1] is True
    assert config_of(["--configfile", "config/smoke.yaml"], None)[1] is False
    assert config_of(["--configfile=config/smoke.yaml", "tables"], None)[1] is False
    assert config_of(["--config", "train.steps=3"], None)[1] is False
    assert config_of(["--profile", "slurm"], None)[1] is False
    assert not wants_summary(["-n"]) and not wants_summary(["-np"]) and not wants_summary(["--dag"])
    assert wants_summary(["tables", "--rerun-incomplete"]) and wants_summary(["--configfile", "config/smoke.yaml"])


def _workdir(tmp: Path, tables: Path, configs: str, with_reference: bool = True) -> tuple[Path, float]:
    wd = tmp / "wd"
    shutil.copytree(tables, wd / "results" / "tables")
    if with_reference:
        assert rtpo_main(["report", "reference", "--tables", str(tables), "--out",
                          str(wd / "reference" / "cpu-default")]) == 0
    start = time.time() - 65
    (wd / ".snakemake" / "log").mkdir(parents=True)
    (wd / ".snakemake" / "log" / "2026-12-03T123238.798294.snakemake.log").write_text(
        SNAKEMAKE_LOG.format(configs=configs))
    return wd, start


def test_summary_of_a_cpu_default_run(tables, tmp_path):
    wd, start = _workdir(tmp_path, tables, "['config/config.yaml']")
    lines = summary_lines(0, start, [], workdir=wd)
    text = "\n".join(lines)
    assert len(lines) <= 24, text   # one screen
    assert "exit status 0 (success)" in text and "(the CPU default)" in text
    assert "4 of 6 run, 1 FAILED" in text and "prepare_data 3, train_rtpo 1" in text
    assert "failed" in text and "results/logs/train/airline/rtpo/seed0.log" in text
    assert "1 min 0" in text or "1 min 05 s" in text
    assert "results/tables/status.md" in text and ".snakemake/log/2026-12-03T123238.798294.snakemake.log" in text
    assert "verdict: identical" in text


def test_summary_shows_a_differing_verdict_and_skips_other_configs(tables, tmp_path):
    wd, start = _workdir(tmp_path, tables, "['config/config.yaml']")
    t = wd / "results" / "tables"
    df = read_table(t / "claims.csv")
    df.loc[0, "verdict"] = "not reproduced" if df.loc[0, "verdict"] != "not reproduced" else "reproduced"
    df.to_csv(t / "claims.csv", index=False)
    text = "\n".join(summary_lines(0, start, [], workdir=wd))
    assert "BEYOND     claims" in text and "verdict: DIFFERS" in text
    assert "not run: snakemake exited 1" in "\n".join(summary_lines(1, start, [], workdir=wd))
    smoke = "\n".join(summary_lines(0, start, ["--configfile", "config/smoke.yaml"], workdir=wd))
    assert "not run: not the CPU default config" in smoke and "verdict" not in smoke
    shutil.rmtree(wd / "reference")
    assert "holds no reference tables yet" in "\n".join(summary_lines(0, start, [], workdir=wd))


# ------------------------------------------------------------------------------------------------
# scripts/pipeline.sh against fakes (no DAG)
# ------------------------------------------------------------------------------------------------

FAKE_SNAKEMAKE = """#!/usr/bin/env bash
printf '%s\\n' "$@" > .fake_args
mkdir -p .snakemake/log
[ -z "${FAKE_LOG:-}" ] || cp "$FAKE_LOG" ".snakemake/log/$(date +%Y-%m-%dT%H%M%S).000000.snakemake.log"
if [ -n "${FAKE_SLEEP:-}" ]; then
  trap 'echo TERM > .got_signal; kill $s 2>/dev/null; exit 143' TERM
  trap 'echo INT > .got_signal; kill $s 2>/dev/null; exit 130' INT
  touch .started
  sleep "$FAKE_SLEEP" & s=$!
  wait $s
fi
exit "${FAKE_RC:-0}"
"""


@pytest.fixture()
def fake_repo(tables, tmp_path):
    """A checkout whose setup_venv.sh does nothing and whose .venv/bin/snakemake is FAKE_SNAKEMAKE."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "pipeline.sh", repo / "scripts" / "pipeline.sh")
    (repo / "scripts" / "setup_venv.sh").write_text("#!/usr/bin/env bash\ntrue\n")
    bin_ = repo / ".venv" / "bin"
    bin_.mkdir(parents=True)
    os.symlink(sys.executable, bin_ / "python")
    (bin_ / "snakemake").write_text(FAKE_SNAKEMAKE)
    (bin_ / "rtpo").write_text(f"#!/bin/sh\nexec {sys.executable} -m rtpo.cli \"$@\"\n")
    for f in ("snakemake", "rtpo"):
        (bin_ / f).chmod((bin_ / f).stat().st_mode | stat.S_IXUSR)
    shutil.copytree(tables, repo / "results" / "tables")
    assert rtpo_main(["report", "reference", "--tables", str(tables), "--out",
                      str(repo / "reference" / "cpu-default")]) == 0
    log = tmp_path / "smk.log"
    log.write_text(SNAKEMAKE_LOG.format(configs="['config/config.yaml']"))
    env = {**os.environ, "FAKE_LOG": str(log), "PYTHONPATH": str(ROOT)}
    return repo, env


def _pipeline(repo: Path, env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(repo / "scripts" / "pipeline.sh"), *args], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=120)


def test_pipeline_prints_summary_and_keeps_snakemake_status(fake_repo):
    repo, env = fake_repo
    p = _pipeline(repo, env, "tables")
    assert p.returncode == 0, p.stderr
    assert (repo / ".fake_args").read_text().split() == ["--cores", "2", "--workflow-profile", "none", "tables"]
    assert "rtpo pipeline summary" in p.stderr and "verdict: identical" in p.stderr
    # a differing verdict never changes the exit status; a failed Snakemake's status is kept
    (repo / "results" / "tables" / "table10_group_size.csv").unlink()
    p = _pipeline(repo, env)
    assert p.returncode == 0 and "verdict: DIFFERS" in p.stderr and "MISSING" in p.stderr
    p = _pipeline(repo, {**env, "FAKE_RC": "3"})
    assert p.returncode == 3 and "exit status 3 (FAILED)" in p.stderr and "not run: snakemake exited 3" in p.stderr
    p = _pipeline(repo, env, "--configfile", "config/smoke.yaml")
    assert p.returncode == 0 and "not the CPU default" in p.stderr
    p = _pipeline(repo, env, "-n")
    assert p.returncode == 0 and "rtpo pipeline summary" not in p.stderr


@pytest.mark.parametrize("sig,group,got,rc", [(signal.SIGTERM, False, "TERM", 143), (signal.SIGINT, True, "INT", 130)])
def test_pipeline_passes_signals_to_snakemake(fake_repo, sig, group, got, rc):
    """SIGTERM to the script reaches Snakemake (as exec did); Ctrl-C (SIGINT to the process group) too,
    though a background job of a script starts with SIGINT ignored."""
    repo, env = fake_repo
    proc = subprocess.Popen(["bash", str(repo / "scripts" / "pipeline.sh")], cwd=repo,
                            env={**env, "FAKE_SLEEP": "60"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        deadline = time.time() + 30
        while not (repo / ".started").exists() and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)
        if group:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert (repo / ".got_signal").read_text().strip() == got
    assert proc.returncode == rc and "rtpo pipeline summary" in err


# ------------------------------------------------------------------ the claims-to-commands map
def test_claims_map_gives_every_claim_its_command_evidence_and_result(tables, tmp_path, capsys):
    """docs/claims.md from a ledger: one row per claim of claims.csv, in its order, with the Snakemake
    targets of the runs behind its evidence, the evidence file, the quantity, ours and the verdict; a
    ledger naming evidence the map does not know fails, naming the claim."""
    out = tmp_path / "claims.md"
    assert rtpo_main(["report", "claims-map", "--tables", str(tables), "--out", str(out)]) == 0
    ledger = pd.read_csv(tables / "claims.csv")
    rows = [x for x in out.read_text().splitlines() if x.startswith("| ") and not x.startswith("| id ")]
    assert len(rows) == len(ledger) and len(rows) > 40
    by_id = {r.split(" | ")[0][2:]: r for r in rows}
    assert list(by_id) == list(ledger.claim_id)
    assert "snakemake ablations tables figures ledger" in by_id["G.6-acc-interval-2"]
    assert "`results/tables/tableG6_sync.csv`" in by_id["G.6-acc-interval-2"]
    assert "snakemake train tables figures ledger" in by_id["4.2-ratio-rtpo-math"] and "`figures/fig03_consistency.png`" in by_id["4.2-ratio-rtpo-math"]
    assert "snakemake theory tables" in by_id["theory-01"]
    first = ledger.iloc[0]
    assert first.verdict in by_id[first.claim_id] and f"{first.ours_mean:.4g}" in by_id[first.claim_id]
    bad = tmp_path / "bad"
    bad.mkdir()
    ledger.assign(evidence=["table99_new"] + list(ledger.evidence[1:])).to_csv(bad / "claims.csv", index=False)
    assert rtpo_main(["report", "claims-map", "--tables", str(bad), "--out", str(tmp_path / "x.md")]) == 2
    assert f"claim {first.claim_id}: evidence ['table99_new']" in capsys.readouterr().err
