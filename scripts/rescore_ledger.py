#!/usr/bin/env python
"""Re-score a committed claim ledger (a reference's claims.csv) with today's verdict rules, from its tables alone.

    python scripts/rescore_ledger.py --tables reference/cpu-default [--out rescored.csv]

A reference keeps the tables of a run, not the run itself, so the ledger cannot be rebuilt from it (`rtpo
report ledger` reads the runs' metrics.jsonl and eval files). Its claims.csv does keep every row's per-seed
values, though, and its tables the levels a mapped effect needs: this script takes each empirical row's values
as they are and applies the ledger's rules of today (rtpo.report.ledger: the paper's effect mapped to our scale
by claims.claim.paper_effect, the kinds, rows that cannot be scored, training dynamics of runs that do not learn, the
Benjamini-Hochberg family). Rows whose quantity changed (GRPO's geometric ratio) or that are new (GRPO's KL
recovery, SeeUPO's jitter against GRPO's) need the runs: they are listed, not scored. Prints the counts by
kind and verdict and one line per empirical row that is decided; the numbers of a full run are the ledger's.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import pandas as pd

from rtpo.report import ledger as L
from rtpo.report.claims import claim as C
from rtpo.report.claims import consistency, group_size
from rtpo.report.claims.verdicts import evaluate_family
from rtpo.report.paper_reference import PAPER, PAPER_COL, PaperFigure
from rtpo.report.stats import KIND_EMPIRICAL, KIND_STRUCTURAL, VERDICTS

# rows the ledger now builds as structural (their construction: ledger.BY_DESIGN_*)
NOW_STRUCTURAL = {"F.2-seeupo-jitter": consistency.BY_DESIGN_JITTER, "G.2-G2-degenerate": group_size.BY_DESIGN_G2}
QUANTITY_CHANGED = ("4.2-ratio-grpo-",)          # ratio_mean -> geo_ratio: needs the runs
NEW_ROWS = ("F.2-recovery-grpo-math", "F.2-recovery-grpo-search", "F.2-seeupo-jitter-grpo")
# training dynamics of RTPO's airline runs (ledger: learned = learns(res, airline, rtpo))
DYNAMICS = ("G.1-late-decline", "G.3-no-terminal", "G.3-failed-length", "G.7-")
# the paper figure of each row that maps (ledger's builders), and where its baseline level is in the tables:
# (PAPER key, table, filter, scale); filter = {column: value}
LEVEL = {
    "F.1-hard-seeupo": ("aime24_vs_seeupo", "table01_main", dict(task="math", benchmark="embedded-math-hard",
                                                                  method="seeupo", metric="pass@1"), 100, "SeeUPO"),
    "F.1-hard-grpo": ("aime24_vs_grpo", "table01_main", dict(task="math", benchmark="embedded-math-hard",
                                                              method="grpo", metric="pass@1"), 100, "GRPO"),
    "F.1-math-calls": ("aime24_python_calls", "tableG5_tool_use", dict(task="math", benchmark="embedded-math-hard",
                                                                        method="vanilla", metric="tool_calls_per_traj"),
                       1, "Vanilla"),
    "F.1-search-calls": ("search_calls", "tableG5_tool_use", dict(task="search", benchmark="overall", method="grpo",
                                                                  metric="tool_calls_per_traj"), 1, "GRPO"),
    "G.1-truncation": ("airline_truncation", "table08_airline_eval", dict(method="tree_grpo", metric="truncation_rate"),
                       100, "Tree-GRPO"),
    "G.1-length": ("airline_length", "table08_airline_eval", dict(method="tree_grpo", metric="response_tokens"), 1,
                   "Tree-GRPO"),
    "G.1-exec-success": ("airline_exec_success", "table09_airline_tools", dict(method="grpo", metric="tool_success_rate"),
                         100, "GRPO"),
    "G.1-late-decline": ("airline_late_decline", "table07_airline_online", dict(method="rtpo", step=15), 100,
                         "RTPO's fourth-fifth"),
    "G.2-zero-adv": ("g_zero_adv", "table10_group_size", dict(variant="G3", metric="zero_adv_frac"), 100, "G3"),
    "G.2-pass1": ("g_pass1", "table10_group_size", dict(variant="G3", metric="pass@1"), 100, "G3"),
    "G.2-inference-tokens": ("g_inference_tokens", "table10_group_size", dict(variant="G3", metric="tokens_per_success"),
                             1, "G3"),
}
AS_IS = {"G.1-tps-tree_grpo": "airline_tps_vs_tree_grpo", "G.1-tps-grpo": "airline_tps_vs_grpo",
         "G.4-tokens_total-grpo": "cost_tokens_vs_grpo", "G.4-tokens_total-tree_grpo": "cost_tokens_vs_tree_grpo",
         "4.4-average": "on_policy_gain", "4.4-hardest": "on_policy_longest", "4.4-horizon-trend": "on_policy_trend"}


def level(tables: Path, table: str, where: dict, scale: float) -> float:
    df = pd.read_csv(tables / f"{table}.csv")
    for k, v in where.items():
        df = df[df[k] == v]
    if len(df) != 1:
        raise SystemExit(f"{tables / table}.csv: {len(df)} rows match {where} (want 1)")
    return scale * float(df["mean"].iloc[0])


def errors_level(tables: Path) -> float:
    """GRPO's tool-error calls per trajectory (claims.airline._errors_per_traj): calls per trajectory x (1 - success)."""
    df = pd.read_csv(tables / "table09_airline_tools.csv")
    df = df[df.method == "grpo"].set_index("metric")
    calls = [float(x) for x in str(df.loc["tool_calls_per_traj", "values"]).split(";")]
    rate = [float(x) for x in str(df.loc["tool_success_rate", "values"]).split(";")]
    return sum(c * (1 - r) for c, r in zip(calls, rate)) / len(calls)


def rtpo_airline_learns(tables: Path) -> bool | None:
    df = pd.read_csv(tables / "table_learning.csv")
    r = df[(df.task == "airline") & (df.method == "rtpo")]
    return None if r.empty else bool(float(r.ci95_lo.iloc[0]) > 0)


def claim_of(r: pd.Series, tables: Path, learned: bool | None) -> C.Claim | None:
    cid = r["claim_id"]
    if cid.startswith(QUANTITY_CHANGED):
        return None
    values = {int(s): float(v) for s, v in zip(str(r["seeds"]).split(";"), str(r["values"]).split(";"))
              if s != "" and s != "nan"} if r["n"] > 0 else {}
    sign = -1 if str(r["expected"]).startswith("< 0") else 1
    kw: dict = {}
    kind = r["kind"]
    if cid in NOW_STRUCTURAL:
        kind, kw["construction"] = KIND_STRUCTURAL, NOW_STRUCTURAL[cid]
    elif kind == KIND_STRUCTURAL:
        kw["construction"] = str(r["note"]).removeprefix("by construction: ")
    if kind == KIND_EMPIRICAL:
        m = re.search(r"paper's effect [+−-]([\d.]+) \S+ \((the paper's [^)]*relative[^)]*)\)", str(r["expected"]))
        if m:                                                    # the 4.1 rows: mapped then as now
            kw.update(effect=float(m.group(1)), effect_basis=m.group(2))
        elif cid in AS_IS:
            kw.update(C.paper_effect(PAPER[AS_IS[cid]], r["unit"]))
        elif cid in LEVEL:
            key, table, where, scale, label = LEVEL[cid]
            kw.update(C.paper_effect(PAPER[key], r["unit"], level(tables, table, where, scale), label))
        elif cid == "G.1-tool-errors":
            kw.update(C.paper_effect(PAPER["airline_tool_errors"], "calls", errors_level(tables), "GRPO"))
        if cid.startswith(DYNAMICS):
            kw["learned"] = learned
        if cid.startswith("G.1-online-") or cid == "G.1-late-decline":
            # one task of the 16-task probe at one of its readings in the window (steps 3, 7, ..., 19, 21 of 22)
            kw["resolution"] = 100 / (16 * (4 if cid.startswith("G.1-online-") else 2))
    rule = "equivalence" if r["rule"] == "equivalence" else "direction"
    eq = dict(center=1.0, margin=consistency.RATIO_MARGIN) if rule == "equivalence" else {}
    return C.Claim(cid, PaperFigure(r["source"], r[PAPER_COL]), r["claim"], r["quantity"], r["unit"], values,
                   rule=rule, sign=sign, evidence=r["evidence"], kind=kind, **eq, **kw)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tables", type=Path, default=Path("reference/cpu-default"))
    ap.add_argument("--out", type=Path, default=None, help="write the re-scored rows (CSV) here")
    a = ap.parse_args(argv)
    path = a.tables / "claims.csv"
    if not path.is_file():
        print(f"{path}: no claim ledger", file=sys.stderr)
        return 2
    old = pd.read_csv(path, keep_default_na=False, na_values=[""])
    learned = rtpo_airline_learns(a.tables)
    rows, skipped = [], []
    seeded = old[old.rule != "theory-check"]
    claims = [claim_of(r, a.tables, learned) for _, r in seeded.iterrows()]
    skipped = [c for c, cl in zip(seeded.claim_id, claims) if cl is None]
    kept = [cl for cl in claims if cl is not None]
    rows = evaluate_family(kept)
    theory = old[old.rule == "theory-check"].to_dict("records")
    new = pd.DataFrame([*rows, *theory], columns=[*L.LEDGER_COLUMNS, "timing"]).drop(columns="timing")
    before = dict(zip(old.claim_id, old.verdict))
    print(f"re-scored {path} ({len(new)} rows; RTPO airline learns: {learned}):")
    print(f"  before: {L.counts_text(old)}")
    print(f"  after:  {L.counts_text(new)}")
    print(f"  need the runs (quantity changed): {', '.join(skipped)}; new rows: {', '.join(NEW_ROWS)}")
    emp = new[new.kind == KIND_EMPIRICAL]
    for v in VERDICTS:
        part = emp[emp.verdict == v]
        if part.empty:
            continue
        print(f"\n{v} ({len(part)}):")
        for _, r in part.iterrows():
            ci = "" if pd.isna(r.ci95_lo) else f" [{r.ci95_lo:+.3g}, {r.ci95_hi:+.3g}]"
            p = "" if pd.isna(r.p_zero_bh) else f"; p ≠ 0 (BH) {r.p_zero_bh:.2g} / < d (raw) {r.p_effect:.2g}"
            print(f"  {r.claim_id}: {r.ours_mean:+.3g}{ci} {r.unit}, n {r.n}; tested {r.expected}{p}"
                  f" (was: {before.get(r.claim_id, '—')})")
    changed = new[new.kind != KIND_EMPIRICAL]
    moved = [f"{r.claim_id} ({before.get(r.claim_id)} -> {r.verdict})" for _, r in changed.iterrows()
             if old.set_index("claim_id").loc[r.claim_id, "kind"] != r.kind]
    if moved:
        print(f"\nnow structural: {'; '.join(moved)}")
    if a.out:
        new.to_csv(a.out, index=False)
        print(f"\nwrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
