"""The claims-to-commands map (docs/claims.md): for every claim of the ledger, the runs and DAG target
that produce its evidence, the table or figure file and the quantity (column) it is read from, and
what an embedded run showed (ours, the verdict).

    rtpo report claims-map --tables reference/cpu-default --sweep reference/sweep --out docs/claims.md

`--sweep DIR` adds the mechanism sweep's claim rows (DIR/sweep_claims.csv, `rtpo report sweep`) as a
section of their own: they come from another target (`snakemake sweep`) and another run.

The ledger (rtpo/report/ledger.py) names each claim's evidence by table or figure name
(`evidence` column); `EVIDENCE` says which part of the DAG makes those runs. A ledger evidence name
missing from `EVIDENCE` is an error (so a new claim cannot appear without its command).
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from rtpo.atomic import atomic_write_text

# the runs behind each table / figure: (what they are, the Snakemake targets that make them)
MAIN = ("the main grid: every method x task x seed, trained and evaluated", "train evaluate")
TRAIN = ("the main grid's training records (metrics.jsonl)", "train")
OPTIONAL = " (paper and smoke configs, config/overlays/optional.yaml: not in the CPU default)"
EVIDENCE: dict[str, tuple[str, str]] = {
    **{name: MAIN for name in ("table01_main", "table01_gains", "table01_vs_vanilla", "table07_airline_online",
                               "table08_airline_eval", "table09_airline_tools", "table12_trunk_failures",
                               "table13_failure_dynamics", "tableG5_tool_use", "table21_budget", "table_budget",
                               "table_learning")},
    "table14_training_cost": TRAIN,
    "fig03_consistency": TRAIN,
    "table02_credit_assignment": ("ablation credit_assignment: psi = full on math" + OPTIONAL, "ablations"),
    "table03_continuation": ("ablation continuation: on- vs off-policy continuation on search" + OPTIONAL, "ablations"),
    "table06_continuation_detail": ("ablation continuation: on- vs off-policy continuation on search" + OPTIONAL,
                                    "ablations"),
    "table10_group_size": ("ablation group_size: G in `ablations.group_size.values` on airline (CPU default 3, 4; "
                           "paper 2, 3, 4)", "ablations"),
    "table11_group_size_cost": ("ablation group_size: G in `ablations.group_size.values` on airline (CPU default "
                                "3, 4; paper 2, 3, 4)", "ablations"),
    "tableG6_sync": ("ablation sync: per_stage | interval:2 | kl:0.01 on search (paper and smoke configs, "
                     "config/overlays/optional.yaml: not in the CPU default)", "ablations"),
    "table_controls": ("the controls (not the paper's): matched_updates, GRPO and Tree-GRPO with RTPO's optimizer "
                       "steps per training step on airline; turn_rows, GRPO trained per turn on the contexts it "
                       "sampled on math and search; with the main runs", "train evaluate ablations"),
    "sweep_claims": ("the controls run with the sweep's target: mismatch, RTPO and GRPO under psi = full on search",
                     "sweep"),
    "results/theory/theory_checks.csv": ("the tabular-MDP theorem checks (rtpo theory)", "theory"),
    "results/tables/sweep_horizon.csv": ("the mechanism sweep: search questions of K hops x psi x method "
                                         "(config `sweep`)", "sweep"),
}
REPORT_TARGETS = "tables figures ledger"   # what rebuilds the main report from its runs (the sweep's is in `sweep`)


def evidence_file(name: str) -> str:
    """Where an evidence name lives in a finished run."""
    if "/" in name:
        return name
    if name.startswith("fig"):
        return f"figures/{name}.png"
    return f"results/tables/{name}.csv"


def _ours(r: pd.Series) -> str:
    if pd.isna(r["ours_mean"]) or (int(r["n"]) == 0 and r["rule"] != "theory-check"):
        return "—"
    x = float(r["ours_mean"])
    if pd.isna(r["ci95_lo"]):
        return f"{x:.4g}"
    return f"{x:.4g} [{float(r['ci95_lo']):.4g}, {float(r['ci95_hi']):.4g}]"


def _text(v) -> str:
    return "" if pd.isna(v) else str(v)


def _p(r: pd.Series) -> str:
    """The p-values the verdict used: the test against 0 adjusted in its family, the test against d raw."""
    z, e = r.get("p_zero_bh", math.nan), r.get("p_effect", math.nan)
    if pd.isna(z) or pd.isna(e):
        return "—"
    return f"{float(z):.2g} / {float(e):.2g}"


def claims_map(claims: pd.DataFrame) -> pd.DataFrame:
    """One row per claim: id, claim, paper, runs, command, evidence file, quantity, ours, the effect it was
    tested against (the ledger's `expected`: the paper's sign and its size on our scale, with how it was
    mapped), verdict and the ledger's note (why a row is structural, cannot be scored, ...)."""
    rows = []
    for _, r in claims.iterrows():
        names = [n.strip() for n in str(r["evidence"]).split(",") if n.strip()]
        unknown = [n for n in names if n not in EVIDENCE]
        if unknown:
            raise ValueError(f"claim {r['claim_id']}: evidence {unknown} has no entry in rtpo.report.claims_map.EVIDENCE")
        runs = "; ".join(dict.fromkeys(EVIDENCE[n][0] for n in names))
        targets = " ".join(dict.fromkeys(t for n in names for t in EVIDENCE[n][1].split()))
        rows.append({"id": r["claim_id"], **({"kind": r["kind"]} if "kind" in claims.columns else {}), "claim": r["claim"], "paper (Qwen3-8B)": r["paper (Qwen3-8B)"],
                     "runs": runs, "command": f"snakemake {targets}" + ("" if targets == "sweep" else f" {REPORT_TARGETS}"),
                     "evidence": ", ".join(f"`{evidence_file(n)}`" for n in names),
                     "quantity (column)": f"{r['quantity']}" + (f" [{r['unit']}]" if str(r["unit"]) not in ("", "nan") else ""),
                     "ours": _ours(r), "n seeds": int(r["n"]) if not math.isnan(float(r["n"])) else 0,
                     **({"tested effect": _text(r["expected"])} if "expected" in claims.columns else {}),
                     **({"p ≠ 0 (BH) / < effect": _p(r)} if "p_zero_bh" in claims.columns else {}),
                     "verdict": r["verdict"],
                     **({"note": _text(r["note"])} if "note" in claims.columns else {})})
    return pd.DataFrame(rows)


def _table(df: pd.DataFrame) -> list[str]:
    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for rec in df.itertuples(index=False):
        lines.append("| " + " | ".join(str(v).replace("|", "\\|").replace("\n", " ") for v in rec) + " |")
    return lines


def write_claims_map(tables: str | Path, out: str | Path, source: str | None = None,
                     sweep: str | Path | None = None) -> Path:
    """docs/claims.md from a tables directory holding claims.csv (a run's results/tables or a reference),
    and with `sweep` a directory holding the mechanism sweep's sweep_claims.csv."""
    tables = Path(tables)
    path = tables / "claims.csv"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no claim ledger (run `snakemake ledger`, or point --tables at a reference)")
    from rtpo.report.ledger import counts_text

    ledger = pd.read_csv(path, keep_default_na=False, na_values=[""])
    df = claims_map(ledger)
    if "kind" in ledger.columns:   # kinds apart (ledger.counts_text): a structural claim is no evidence
        summary = counts_text(ledger)
    else:                          # an older ledger without kinds
        summary = ", ".join(f"{int(v)} {k}" for k, v in df["verdict"].value_counts().items())
    head = [
        "# Claims to commands",
        "",
        "Generated by `rtpo report claims-map` from " + (source or f"`{path}`") + ". For every claim of the "
        "paper the ledger checks: the runs that produce its evidence, the command that makes them (Snakemake "
        "targets, run with `bash scripts/pipeline.sh <targets>`; `tables figures ledger` rebuild the report "
        "from them), the file and quantity read, and what the embedded run showed: our per-seed effect's "
        "mean with its 95 % interval over seeds, the effect it was tested against (the paper's, mapped to "
        "this scale as the column says, or a stated minimal effect), the two p-values the verdict used (the test "
        "against 0 Benjamini-Hochberg adjusted within the row's family, the test against the effect never "
        "adjusted) and the verdict by the ledger's stated rule (`results/tables/claims.md` quotes the rules), with "
        "the ledger's note (an inconclusive row: the paired seeds that would decide it).",
        "",
        f"{len(df)} claims: {summary}. Wall-clock claims "
        "are in `results/tables/timing_claims.md` (machine-dependent, not listed here).",
        "",
    ]
    if "p_zero_bh" not in ledger.columns:
        head += ["This ledger was written by the verdict rules of the run that made it, before the "
                 "Benjamini-Hochberg adjustment, the split of 'effect excluded' and the rows that cannot be scored: "
                 "`python scripts/rescore_ledger.py --tables " + str(tables) + "` re-scores its rows by today's "
                 "rules; a new run of the DAG writes a ledger by them.", ""]
    lines = _table(df)
    if sweep is not None:
        spath = Path(sweep) / "sweep_claims.csv"
        if not spath.is_file():
            raise FileNotFoundError(f"{spath}: no sweep claims (run `snakemake sweep`, or point --sweep at a reference)")
        sw = pd.read_csv(spath, keep_default_na=False, na_values=[""])
        lines += ["", "## The mechanism sweep", "",
                  f"From `{spath}` (`snakemake sweep`: K hops x psi x method, docs/reproducibility.md \"The mechanism "
                  f"sweep\"). {len(sw)} claims: {counts_text(sw)}. Each empirical row tests the effect its "
                  "\"tested effect\" column states (the paper's gain over the flat method mapped to our level, as "
                  "the 4.1 rows, where the paper gives one; else a stated minimal effect), a structural row what "
                  "holds by construction.", ""]
        lines += _table(claims_map(sw))
    atomic_write_text(out, "\n".join(head + lines) + "\n")
    return Path(out)
