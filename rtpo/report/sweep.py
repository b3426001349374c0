"""The mechanism sweep's report (`rtpo report sweep`, rule sweep_report; config `sweep`).

The paper's central mechanism (§1, §2.1, §F.1-F.2): a flat method samples turn k under c_k = psi(S_k)
but scores it under the full history, so the rollout-training mismatch grows with the turns a psi
drops and with the horizon; RTPO trains on (c_k, turn k) rows, so it has none. The sweep varies both
(search questions of exactly K hops x psi x method, rtpo.experiment.sweep_cells) and this module writes:

  <tables>/sweep_horizon.{csv,md}  per (K, psi, method): seeds, pass@1 and hit (mean and 95 % t-interval
                                   over seeds), the paired difference to RTPO, the mismatch the method
                                   trained under (geometric-mean ratio, KL(rollout || train) per token,
                                   share beyond the clip range), context_overflow, trajectories per prompt
  <tables>/sweep_claims.{csv,md}   ledger rows for the paper's claims the sweep can test (the ledger's
                                   rules and columns: rtpo.report.ledger.evaluate_claim)
  <figures>/sweep_horizon.png      pass@1 difference (RTPO - method) and mismatch against K, one column per psi

Every number comes from the runs' own files (eval JSON `overall`, metrics.jsonl step records); a file
the config's sweep expects and that is absent is an error naming it.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rtpo.atomic import atomic_call, atomic_write_text
from rtpo.experiment import SWEEP, Experiment, RunKey
from rtpo.report.load import check_run, read_eval_json, read_metrics_jsonl
from rtpo.report.paper_reference import PaperFigure
from rtpo.report.stats import KIND_EMPIRICAL, summarize

STEP_METRICS = ("geo_ratio", "kl_rollout_train", "abs_dlogp", "clip_share", "context_overflow",
                "rollouts_per_prompt")
REFERENCE = "rtpo"  # the method every difference is taken against
PAPER_SWEEP = {
    "horizon_gap": PaperFigure("§1, §F.1", "multi-turn RL degrades as the number of turns increases; long horizons "
                               "amplify the mismatch, which RTPO eliminates (no figure)"),
    "horizon_mismatch": PaperFigure("§2.1, §F.2", "omitted history grows in later turns; baselines' compensation "
                                    "becomes less effective as horizons grow (no figure)"),
    "mismatch_gap": PaperFigure("§2.1, §F.1", "the mismatch biases flat training; RTPO structurally eliminates it "
                                "(no figure)"),
}
# the paper gives no figure for these slopes: the smallest effect the rows test against, stated in each row
MIN_SLOPE_PP = 0.5      # pp of pass@1 per hop (2 pp from K = 2 to K = 6)
MIN_SLOPE_KL = 0.002    # nats / token per hop
MIN_GAP_PP = 2.0        # pp of pass@1


def _required(path: Path) -> Path:
    if not path.is_file():
        raise FileNotFoundError(f"sweep report: {path} is missing (run `snakemake sweep`)")
    return path


def _step_means(path: Path, key: RunKey) -> dict[str, float]:
    """Mean over a run's step records of each of STEP_METRICS (NaN where no record measured it), read by
    the report's reader (rtpo.report.load.read_metrics_jsonl: a bad or non-finite value names path:line)."""
    recs = read_metrics_jsonl(_required(path), key)
    out = {}
    for k in STEP_METRICS:
        vals = [r[k] for r in recs if k in r and not math.isnan(r[k])]
        out[k] = float(np.mean(vals)) if vals else math.nan
    return out


def load_sweep(results: str | Path, cfg: dict[str, Any]) -> pd.DataFrame:
    """One row per (K, psi, method, seed) of config `sweep`: pass@1 and hit (eval JSON `overall`) and the
    step-record means of STEP_METRICS. The runs are the experiment's (rtpo.experiment, scope "sweep"), read
    with the main report's readers (rtpo.report.load)."""
    root = str(results)
    rows = []
    for r in Experiment(cfg).select(SWEEP):
        path = Path(r.eval_file(root))
        overall = next(row for row in read_eval_json(_required(path), r.key) if row["benchmark"] == "overall")
        check_run(Path(r.run_dir(root)), r.key)
        rows.append({"hops": int(r.variant.split("/")[0][1:]), "psi": r.value, "method": r.method, "seed": r.seed,
                     "pass1": overall.get("pass@1", math.nan), "hit": overall.get("hit", math.nan),
                     **_step_means(Path(r.run_dir(root)) / "metrics.jsonl", r.key)})
    return pd.DataFrame(rows)


def _per_seed(df: pd.DataFrame, hops: int, psi: str, method: str, col: str) -> dict[int, float]:
    d = df[(df.hops == hops) & (df.psi == psi) & (df.method == method)]
    return {int(r.seed): float(getattr(r, col)) for r in d.itertuples()}


def _diff_pp(df: pd.DataFrame, hops: int, psi: str, a: str, b: str, col: str = "pass1") -> dict[int, float]:
    """{seed: 100 (a - b)} of `col` at (K, psi), over the seeds both methods have."""
    x, y = _per_seed(df, hops, psi, a, col), _per_seed(df, hops, psi, b, col)
    return {s: 100.0 * (x[s] - y[s]) for s in sorted(set(x) & set(y))}


def horizon_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per (K, psi, method): n seeds, pass@1 / hit (%) with 95 % t-intervals, RTPO - method (pp, paired by
    seed), and the means over seeds of the mismatch metrics and context_overflow."""
    rows = []
    for (k, psi, m), d in df.groupby(["hops", "psi", "method"], sort=False):
        p, h = summarize(100 * d.pass1), summarize(100 * d.hit)
        gap = summarize(_diff_pp(df, k, psi, REFERENCE, m).values()) if m != REFERENCE else None
        rows.append({"K": k, "psi": psi, "method": m, "n": p.n,
                     "pass@1": p.mean, "pass@1_lo": p.lo, "pass@1_hi": p.hi, "hit": h.mean,
                     "rtpo_minus_method_pp": gap.mean if gap else math.nan,
                     "gap_lo": gap.lo if gap else math.nan, "gap_hi": gap.hi if gap else math.nan,
                     "geo_ratio": d.geo_ratio.mean(), "kl_rollout_train": d.kl_rollout_train.mean(),
                     "clip_share": d.clip_share.mean(), "context_overflow": d.context_overflow.mean(),
                     "trajectories_per_prompt": d.rollouts_per_prompt.mean()})
    return pd.DataFrame(rows)


def _slopes(hops: list[int], per_seed: list[dict[int, float]]) -> dict[int, float]:
    """{seed: least-squares slope over K} of one value per K (scipy.stats.linregress), seeds present at every K."""
    from scipy.stats import linregress

    seeds = sorted(set.intersection(*(set(d) for d in per_seed))) if per_seed else []
    out = {}
    for s in seeds:
        ys = [d[s] for d in per_seed]
        if all(math.isfinite(y) for y in ys):
            out[s] = float(linregress(hops, ys).slope)
    return out


def _mean_over(dicts: list[dict[int, float]]) -> dict[int, float]:
    seeds = sorted(set.intersection(*(set(d) for d in dicts))) if dicts else []
    return {s: float(np.mean([d[s] for d in dicts])) for s in seeds}


def sweep_claims(df: pd.DataFrame, cfg: dict[str, Any]) -> list:
    """The paper's claims the sweep tests, as ledger Claims (rtpo.report.ledger): per flat method m of the
    sweep (GRPO; GRPO-TIS is not in the paper, so its rows are labelled as ours), under every psi != full:
    (1) RTPO - m grows with K (slope per seed, pp per hop, mean over those psi); (2) m's KL(rollout || train)
    grows with K; (3) at the largest K, RTPO - m is larger under the psi with the largest mismatch than under
    psi = full."""
    from rtpo.report.ledger import Claim

    sw = cfg["sweep"]
    hops = sorted(int(k) for k in sw["hops"])
    lossy = [p for p in sw["psi"] if p != "full"]
    claims = []
    for m in [x for x in sw["methods"] if x != REFERENCE]:
        ours = "" if m == "grpo" else "; not a comparison the paper makes (verl's rollout correction, ours)"
        gap_slopes = [_slopes(hops, [_diff_pp(df, k, p, REFERENCE, m) for k in hops]) for p in lossy]
        claims.append(Claim(
            id=f"sweep-gap-horizon-{m}", ref=PAPER_SWEEP["horizon_gap"],
            claim=f"RTPO's lead over {m} grows with the horizon K under a lossy psi",
            quantity=f"slope over K = {hops} of RTPO − {m} pass@1, mean over psi ∈ {lossy}", unit="pp/hop",
            values=_mean_over(gap_slopes) if lossy else {}, sign=1, kind=KIND_EMPIRICAL,
            effect=MIN_SLOPE_PP, effect_basis=f"no paper figure: minimal effect {MIN_SLOPE_PP:g} pp per hop",
            evidence="results/tables/sweep_horizon.csv", note=f"seeds {list(sw['seeds'])}{ours}"))
        kl_slopes = [_slopes(hops, [_per_seed(df, k, p, m, "kl_rollout_train") for k in hops]) for p in lossy]
        claims.append(Claim(
            id=f"sweep-mismatch-horizon-{m}", ref=PAPER_SWEEP["horizon_mismatch"],
            claim=f"{m}'s rollout–training mismatch grows with the horizon K under a lossy psi",
            quantity=f"slope over K of {m}'s KL(rollout ‖ train) per token, mean over psi ∈ {lossy}",
            unit="nats/token/hop", values=_mean_over(kl_slopes) if lossy else {}, sign=1, kind=KIND_EMPIRICAL,
            effect=MIN_SLOPE_KL, effect_basis=f"no paper figure: minimal effect {MIN_SLOPE_KL:g} nats/token per hop",
            evidence="results/tables/sweep_horizon.csv", note=f"seeds {list(sw['seeds'])}{ours}"))
        if lossy and "full" in sw["psi"]:
            kmax = hops[-1]
            worst = max(lossy, key=lambda p: np.nanmean(list(_per_seed(df, kmax, p, m, "kl_rollout_train").values())
                                                           or [math.nan]))
            a, b = _diff_pp(df, kmax, worst, REFERENCE, m), _diff_pp(df, kmax, "full", REFERENCE, m)
            claims.append(Claim(
                id=f"sweep-gap-mismatch-{m}", ref=PAPER_SWEEP["mismatch_gap"],
                claim=f"at the longest horizon, RTPO's lead over {m} is larger under the psi with the largest mismatch",
                quantity=f"(RTPO − {m}) under psi = {worst} minus under psi = full, K = {kmax}, pass@1",
                unit="pp", values={s: a[s] - b[s] for s in sorted(set(a) & set(b))}, sign=1, kind=KIND_EMPIRICAL,
                effect=MIN_GAP_PP, effect_basis=f"no paper figure: minimal effect {MIN_GAP_PP:g} pp",
                evidence="results/tables/sweep_horizon.csv", note=f"seeds {list(sw['seeds'])}{ours}"))
    return claims


def plot_sweep(table: pd.DataFrame, path: Path) -> None:
    """Row 1: RTPO − method pass@1 (pp) against K with 95 % intervals, one line per method; row 2: each
    method's KL(rollout ‖ train) per token against K. One column per psi."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    psis = list(dict.fromkeys(table.psi))
    fig, axes = plt.subplots(2, len(psis), figsize=(4.2 * len(psis), 6.4), squeeze=False, sharex=True)
    for j, psi in enumerate(psis):
        d = table[table.psi == psi]
        ax = axes[0][j]
        for m, dm in d[d.method != REFERENCE].groupby("method", sort=False):
            lo, hi = dm.rtpo_minus_method_pp - dm.gap_lo, dm.gap_hi - dm.rtpo_minus_method_pp
            ax.errorbar(dm.K, dm.rtpo_minus_method_pp, yerr=[lo.fillna(0), hi.fillna(0)], marker="o", capsize=3,
                        label=f"RTPO − {m}")
        ax.axhline(0, color="grey", lw=0.8)
        ax.set_title(f"psi = {psi}")
        ax.set_ylabel("pass@1 difference (pp)" if j == 0 else "")
        ax.legend(fontsize=8)
        ax = axes[1][j]
        for m, dm in d.groupby("method", sort=False):
            ax.plot(dm.K, dm.kl_rollout_train, marker="o", label=m)
        ax.set_xlabel("horizon K (hops)")
        ax.set_xticks(sorted(set(int(k) for k in table.K)))
        ax.set_ylabel("KL(rollout ‖ train) per token" if j == 0 else "")
        ax.legend(fontsize=8)
    # one KL scale for the row, from 0: a panel of its own would blow float noise (~1e-14 under
    # psi = full) up to the size of a real mismatch
    top = float(table.kl_rollout_train.max()) if len(table) else 0.0
    for ax in axes[1]:
        ax.set_ylim(-0.04 * max(top, 1e-3), max(top, 1e-3) * 1.1)   # points at 0 drawn whole
    n = int(table.n.max()) if len(table) else 0
    fig.suptitle(f"Mechanism sweep: search, K hops × psi (mean and 95 % t-interval over {n} seeds)", fontsize=11)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_call(path, fig.savefig, dpi=120, format="png")
    plt.close(fig)


def write_sweep(results: str | Path, cfg: dict[str, Any], tables_dir: str | Path, figures_dir: str | Path) -> list[Path]:
    """Write the sweep's table, claim rows and figure; returns the paths written."""
    from rtpo.report.ledger import counts_text, evaluate_family, ledger_display
    from rtpo.report.table_base import to_markdown

    if not cfg.get("sweep"):
        raise ValueError("sweep report: this config has no 'sweep' section")
    tables_dir, figures_dir = Path(tables_dir), Path(figures_dir)
    tables_dir.mkdir(parents=True, exist_ok=True)
    df = load_sweep(results, cfg)
    table = horizon_table(df)
    claims = pd.DataFrame(evaluate_family(sweep_claims(df, cfg))).drop(columns="timing")
    paths = [tables_dir / "sweep_horizon.csv", tables_dir / "sweep_horizon.md", tables_dir / "sweep_claims.csv",
             tables_dir / "sweep_claims.md", figures_dir / "sweep_horizon.png"]
    atomic_call(paths[0], table.round(4).to_csv, index=False)
    sw = cfg["sweep"]
    atomic_write_text(paths[1], "\n".join([
        "# Mechanism sweep: search questions of K hops x rollout context map psi x method", "",
        f"K = {sw['hops']}, psi = {sw['psi']}, methods = {sw['methods']}, seeds = {sw['seeds']}; a flat method's "
        "chains = RTPO's E.3 budget at that K (rtpo.experiment.sweep_budget). pass@1 / hit in %, mean and 95 % t-interval "
        "over seeds; rtpo_minus_method_pp paired by seed; mismatch metrics: means over training steps and seeds.", "",
        to_markdown(table.round(3)), ""]) + "\n")
    atomic_call(paths[2], claims.to_csv, index=False)
    atomic_write_text(paths[3], "\n".join([
        "# Mechanism sweep: the paper's claims it tests", "", f"{len(claims)} claims: {counts_text(claims)}.", "",
        to_markdown(ledger_display(claims, str(cfg.get("name", "ours")))), ""]) + "\n")
    plot_sweep(table, paths[4])
    return paths


__all__ = ["load_sweep", "horizon_table", "sweep_claims", "plot_sweep", "write_sweep"]
