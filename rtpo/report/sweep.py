"""The mechanism sweep's report (`rtpo report sweep`, rule sweep_report; config `sweep`).

The paper's central mechanism (§1, §2.1, §F.1-F.2): a flat method samples turn k under c_k = psi(S_k)
but scores it under the full history, so the rollout-training mismatch grows with the turns a psi
drops and with the horizon; RTPO trains on (c_k, turn k) rows, so it has none. The sweep crosses the
horizon K with a 2 x 2 contrast, psi in {lossy, full} x {RTPO, flat} (rtpo.experiment.sweep_cells), and the
report reads it as a difference of differences: at each K the interaction

    (RTPO − flat)[lossy] − (RTPO − flat)[full]       (pp of pass@1, paired by seed)

is what the mismatch adds to RTPO's lead (the shared difficulty of K and any psi-independent edge cancel),
and its growth from the shortest to the longest K is the mechanism claim. Before any gap is read, each
cell's learning over the no-RL arm (the sweep base model evaluated untrained under the same K and psi) is
shown, and the flat methods' budget against RTPO's realised trajectories per prompt. This module writes:

  <tables>/sweep_horizon.{csv,md}  per (K, psi, method): seeds, pass@1 and hit (mean and 95 % t-interval
                                   over seeds), learning = trained − untrained (paired by seed, with its
                                   verdict), RTPO − method (paired), the mismatch the method trained under,
                                   trajectories per prompt (E.3's count), the budget ratio to RTPO's and its
                                   flag beyond 1.0 ± 10 %, Adam steps per training step
  <tables>/sweep_claims.{csv,md}   ledger rows (rtpo.report.claims.verdicts.evaluate_family: the ledger's rules, one
                                   Benjamini-Hochberg family): the interaction at every K, its growth over K,
                                   and the manipulation check (the flat method's KL under lossy psi against
                                   full: structural); then Control B's rows when its study runs with this
                                   target (`control_rows`: the main ledger's control family)
  <figures>/sweep_horizon.png      pass@1 (the untrained arm too), RTPO − method and the mismatch against K,
                                   one column per psi, and the interaction against K

Optional arms (sweep.optional: e.g. psi truncate:1, GRPO-TIS) are in the table, never in the claim rows.
Every number comes from the runs' own files (eval JSON `overall`, metrics.jsonl step records, run.json); a
file the config's sweep expects and that is absent is an error naming it.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rtpo.atomic import atomic_call, atomic_write_text
from rtpo.experiment import SWEEP, UNTRAINED, Experiment, RunKey, variant_name
from rtpo.methods.cards import card
from rtpo.report.read import check_run, read_eval_json, read_metrics_jsonl
from rtpo.report.paper_reference import PAPER, PaperFigure
from rtpo.report.stats import (INCONCLUSIVE, KIND_EMPIRICAL, KIND_STRUCTURAL, NO_EFFECT,
                               NOT_REPRODUCED, REPRODUCED, SMALLER, effect_verdict, summarize, unscorable)

STEP_METRICS = ("geo_ratio", "kl_rollout_train", "abs_dlogp", "clip_share", "context_overflow",
                "rollouts_per_prompt", "trajectories_per_prompt")
REFERENCE = "rtpo"  # the method every difference is taken against
FULL = "full"       # the contrast's psi without mismatch
PAPER_SWEEP = {
    "horizon_gap": PaperFigure("§1, §F.1", "multi-turn RL degrades as the number of turns increases; long horizons "
                               "amplify the mismatch, which RTPO eliminates (no figure)"),
    "horizon_mismatch": PaperFigure("§2.1, §F.2", "omitted history grows in later turns; baselines' compensation "
                                    "becomes less effective as horizons grow (no figure)"),
    "mismatch_gap": PaperFigure("§2.1, §F.1", "the mismatch biases flat training; RTPO structurally eliminates it "
                                "(no figure)"),
}
# The interaction's size, mapped from the paper as the main ledger's 4.1 rows map it (ledger.paper_effect): the
# paper's relative gain of RTPO over the flat method (§4.1, Table 1: +21.5 % over GRPO) times our flat method's
# pass@1 under the lossy psi at that K, capped at the headroom. The paper puts RTPO's lead over a flat method on the
# mismatch (§2.1, §F.1) and psi = full removes the mismatch, so the whole lead is what the interaction should
# show. A flat method without a paper figure falls back to MIN_GAP_PP.
PAPER_GAIN = {"grpo": "gain_vs_grpo", "seeupo": "gain_vs_seeupo"}   # flat method -> rtpo.report.paper_reference.PAPER
# the paper gives no figure for the growth over K: the smallest it tests against, stated in the row
MIN_GAP_PP = 2.0        # pp of pass@1: the interaction's change from the shortest K to the longest (and any unmapped K)
MIN_LEARNING_PP = 1.0   # pp of pass@1: a cell's learning over the untrained base model (the ledger's minimal pp)
BUDGET_TOLERANCE = 0.10  # a flat cell whose trajectories per prompt are beyond RTPO's ± 10 % is flagged (as table_budget)
# a cell's learning, in words: the ledger's verdict (RULE_EFFECT, unadjusted: one cell is read alone) of
# "trained − untrained > 0, at least MIN_LEARNING_PP"
LEARNING_WORDS = {REPRODUCED: "learned", NOT_REPRODUCED: "worse than untrained",
                  SMALLER: f"learned, < {MIN_LEARNING_PP:g} pp", NO_EFFECT: f"no learning of {MIN_LEARNING_PP:g} pp"}


def _required(path: Path) -> Path:
    if not path.is_file():
        raise FileNotFoundError(f"sweep report: {path} is missing (run `snakemake sweep`)")
    return path


def _step_means(path: Path, key: RunKey) -> dict[str, float]:
    """Mean over a run's step records of each of STEP_METRICS (NaN where no record measured it), read by the
    report's reader (rtpo.report.read.read_metrics_jsonl: a bad or non-finite value names path:line), plus
    `adam_steps_per_step`: the optimizer steps the run took per training step (its last record's
    train_version over its records: RTPO takes one per turn stage, a flat method one).

    `trajectories_per_prompt` is E.3's count, as the main grid's table_budget counts it: complete
    trajectories per prompt, RTPO's trunks plus the siblings forked at every realised boundary, without the
    trunk's own continuation regenerated from S_{k+1} (the `rollouts` kind "continuation")."""
    recs = read_metrics_jsonl(_required(path), key)
    for r in recs:
        if "rollouts_per_prompt" in r:
            cont = r.get("rollouts_continuation", math.nan)
            r["trajectories_per_prompt"] = r["rollouts_per_prompt"] - (0.0 if math.isnan(cont) else cont)
    out = {}
    for k in STEP_METRICS:
        vals = [r[k] for r in recs if k in r and not math.isnan(r[k])]
        out[k] = float(np.mean(vals)) if vals else math.nan
    versions = [r["train_version"] for r in recs if not math.isnan(r.get("train_version", math.nan))]
    out["adam_steps_per_step"] = versions[-1] / len(recs) if versions and recs else math.nan
    return out


def load_sweep(results: str | Path, cfg: dict[str, Any]) -> pd.DataFrame:
    """One row per (K, psi, method, seed) of config `sweep`: its arm (contrast, optional, no-RL), whether it
    trains, pass@1 and hit (eval JSON `overall`) and, for a run that trains, the step-record means of
    STEP_METRICS and its Adam steps per step. The runs are the experiment's (rtpo.experiment, scope "sweep"),
    read with the main report's readers (rtpo.report.read); an untrained run has no step records."""
    root = str(results)
    exp = Experiment(cfg)
    rows = []
    for r in exp.select(SWEEP):
        cell = exp.sweep_cell(r.key)
        path = Path(r.eval_file(root))
        overall = next(row for row in read_eval_json(_required(path), r.key) if row["benchmark"] == "overall")
        check_run(Path(r.run_dir(root)), r.key)
        steps = (_step_means(Path(r.run_dir(root)) / "metrics.jsonl", r.key) if r.trains
                 else dict.fromkeys((*STEP_METRICS, "adam_steps_per_step"), math.nan))
        rows.append({"hops": cell.hops, "psi": cell.psi, "method": r.method, "arm": cell.arm, "seed": r.seed,
                     "trains": r.trains, "pass1": overall.get("pass@1", math.nan), "hit": overall.get("hit", math.nan),
                     **steps})
    return pd.DataFrame(rows)


def _per_seed(df: pd.DataFrame, hops: int, psi: str, method: str, col: str) -> dict[int, float]:
    d = df[(df.hops == hops) & (df.psi == psi) & (df.method == method)]
    return {int(r.seed): float(getattr(r, col)) for r in d.itertuples()}


def _diff_pp(df: pd.DataFrame, hops: int, psi: str, a: str, b: str, col: str = "pass1") -> dict[int, float]:
    """{seed: 100 (a - b)} of `col` at (K, psi), over the seeds both methods have."""
    x, y = _per_seed(df, hops, psi, a, col), _per_seed(df, hops, psi, b, col)
    return {s: 100.0 * (x[s] - y[s]) for s in sorted(set(x) & set(y))}


def interaction(df: pd.DataFrame, hops: int, lossy: str, method: str) -> dict[int, float]:
    """{seed: (RTPO − method)[lossy] − (RTPO − method)[full]} in pp of pass@1 at horizon K, over the seeds
    all four cells have (each difference paired by seed: same base model, prompts and sampling seeds)."""
    a, b = _diff_pp(df, hops, lossy, REFERENCE, method), _diff_pp(df, hops, FULL, REFERENCE, method)
    return {s: a[s] - b[s] for s in sorted(set(a) & set(b))}


def interaction_growth(df: pd.DataFrame, hops: list[int], lossy: str, method: str) -> dict[int, float]:
    """{seed: the interaction's least-squares slope over K times (K_max − K_min)}: its fitted change from the
    shortest horizon to the longest, in pp (with two horizons, the difference itself), seeds present at every K."""
    from scipy.stats import linregress

    per_k = [interaction(df, k, lossy, method) for k in hops]
    seeds = sorted(set.intersection(*(set(d) for d in per_k))) if per_k else []
    span = max(hops) - min(hops)
    return {s: float(linregress(hops, [d[s] for d in per_k]).slope) * span for s in seeds}


def learning(df: pd.DataFrame, hops: int, psi: str, method: str) -> dict[int, float]:
    """{seed: 100 (trained − untrained pass@1)} of one cell against the no-RL arm at the same (K, psi)."""
    return _diff_pp(df, hops, psi, method, UNTRAINED)


def learning_verdict(values: dict[int, float]) -> str:
    """A cell's learning in words (LEARNING_WORDS), from the ledger's rule; "inconclusive (n = N)" where the
    seeds cannot decide it."""
    s = summarize(values.values())
    if unscorable(s, MIN_LEARNING_PP):
        return f"{INCONCLUSIVE} (n = {s.n})"
    v = effect_verdict(s, 1, MIN_LEARNING_PP)
    return LEARNING_WORDS.get(v, f"{INCONCLUSIVE} (n = {s.n})")


def budget_ratio(df: pd.DataFrame, hops: int, psi: str, method: str) -> float:
    """A flat cell's trajectories per prompt over RTPO's realised ones at the same (K, psi), each the mean over
    its seeds (E.3's count): 1.0 is a matched budget."""
    a = summarize(_per_seed(df, hops, psi, method, "trajectories_per_prompt").values()).mean
    b = summarize(_per_seed(df, hops, psi, REFERENCE, "trajectories_per_prompt").values()).mean
    return a / b if b and not (math.isnan(a) or math.isnan(b)) else math.nan


def budget_flag(ratio: float) -> bool:
    """Whether a budget ratio lies beyond 1.0 ± BUDGET_TOLERANCE (NaN: not flagged, nothing to compare)."""
    return (not math.isnan(ratio)) and abs(ratio - 1.0) > BUDGET_TOLERANCE + 1e-12


def horizon_table(df: pd.DataFrame) -> pd.DataFrame:
    """Per (K, psi, method): arm, n seeds, pass@1 / hit (%) with 95 % t-intervals, learning over the untrained
    arm (pp, paired by seed) with its verdict, RTPO − method (pp, paired by seed), the means over seeds of the
    mismatch metrics and context_overflow, trajectories per prompt (E.3's count, and every rollout kind), the
    flat cells' budget ratio to RTPO and its flag, and the Adam steps per training step."""
    rows = []
    nan = math.nan
    for (k, psi, m), d in df.groupby(["hops", "psi", "method"], sort=False):
        p, h = summarize(100 * d.pass1), summarize(100 * d.hit)
        trained = bool(d.trains.any())
        learn = summarize(learning(df, k, psi, m).values()) if trained and UNTRAINED in set(df.method) else None
        gap = summarize(_diff_pp(df, k, psi, REFERENCE, m).values()) if trained and m != REFERENCE else None
        ratio = budget_ratio(df, k, psi, m) if trained and m != REFERENCE and card(m).budget_key else nan
        rows.append({"K": k, "psi": psi, "method": m, "arm": d.arm.iloc[0], "n": p.n,
                     "pass@1": p.mean, "pass@1_lo": p.lo, "pass@1_hi": p.hi, "hit": h.mean,
                     "learning_pp": learn.mean if learn else nan, "learning_lo": learn.lo if learn else nan,
                     "learning_hi": learn.hi if learn else nan,
                     "learning": learning_verdict(learning(df, k, psi, m)) if learn else "",
                     "rtpo_minus_method_pp": gap.mean if gap else nan,
                     "gap_lo": gap.lo if gap else nan, "gap_hi": gap.hi if gap else nan,
                     "geo_ratio": d.geo_ratio.mean(), "kl_rollout_train": d.kl_rollout_train.mean(),
                     "clip_share": d.clip_share.mean(), "context_overflow": d.context_overflow.mean(),
                     "trajectories_per_prompt": d.trajectories_per_prompt.mean(),
                     "rollouts_per_prompt": d.rollouts_per_prompt.mean(),
                     "budget_ratio": ratio, "budget_flag": budget_flag(ratio),
                     "adam_steps_per_step": d.adam_steps_per_step.mean()})
    return pd.DataFrame(rows)


def _contrast(cfg: dict[str, Any]) -> tuple[list[int], list[str], list[str]]:
    """(horizons, lossy psi of the contrast, flat methods of the contrast)."""
    sw = cfg["sweep"]
    return (sorted(int(k) for k in sw["hops"]), [str(p) for p in sw["psi"] if str(p) != FULL],
            [m for m in sw["methods"] if m != REFERENCE])


def _fmt_interval(mean: float, lo: float, hi: float) -> str:
    if math.isnan(mean):
        return "—"
    if math.isnan(lo):
        return f"{mean:+.1f}"
    return f"{mean:+.1f} [{lo:+.1f}, {hi:+.1f}]"


def _cells_note(table: pd.DataFrame, hops: list[int], psis: list[str], method: str) -> str:
    """The learning of the four cells of each K and the flat method's budget ratio there, for a claim row's
    note, with any budget ratio beyond 1.0 ± 10 % named."""
    parts, flagged = [], []
    for k in hops:
        learn = []
        for psi in psis:
            for m in (REFERENCE, method):
                r = table[(table.K == k) & (table.psi == psi) & (table.method == m)]
                if len(r):
                    r = r.iloc[0]
                    learn.append(f"{m}[{psi}] {_fmt_interval(r.learning_pp, r.learning_lo, r.learning_hi)} "
                                 f"({r.learning or 'no untrained arm'})")
                    if m == method and bool(r.budget_flag):
                        flagged.append(f"K = {k} psi = {psi}: {r.budget_ratio:.2f}")
        ratios = [table[(table.K == k) & (table.psi == psi) & (table.method == method)].budget_ratio for psi in psis]
        ratio = ", ".join(f"{psi} {x.iloc[0]:.2f}" for psi, x in zip(psis, ratios) if len(x))
        parts.append(f"K = {k}: learning over untrained (pp) " + "; ".join(learn) + f"; budget {method} / RTPO {ratio}")
    note = " | ".join(parts)
    if flagged:
        note += (f" | budget ratio beyond 1.0 ± {100 * BUDGET_TOLERANCE:.0f} % (sweep.rtpo_trajectories is off "
                 f"RTPO's realised count): " + "; ".join(flagged))
    return note


def interaction_pooled(df: pd.DataFrame, hops: list[int], lossy: str, method: str) -> dict[int, float]:
    """{seed: the mean over K of the per-K interactions (interaction)}, in pp, over the seeds present at every K:
    one number per seed for "the mismatch adds to RTPO's lead" whatever the horizon (each K weighs the same)."""
    per_k = [interaction(df, k, lossy, method) for k in hops]
    seeds = sorted(set.intersection(*(set(d) for d in per_k))) if per_k else []
    return {s: float(np.mean([d[s] for d in per_k])) for s in seeds}


def _gap_figure(method: str) -> PaperFigure:
    """The paper's words for the interaction rows and, where the paper gives RTPO's relative gain over `method`
    (PAPER_GAIN), that figure as the row's effect (`change`)."""
    base = PAPER_SWEEP["mismatch_gap"]
    if method not in PAPER_GAIN:
        return base
    gain = PAPER[PAPER_GAIN[method]]
    return PaperFigure(f"{base.source}; {gain.source}",
                       f"{base.text.removesuffix(' (no figure)')}; RTPO {gain.text} over {method} ({gain.source})",
                       change=gain.change)


def mapped_gap(df: pd.DataFrame, hops: int, lossy: str, method: str) -> dict[str, Any]:
    """The interaction's effect at horizon K mapped from the paper, as Claim(effect=, effect_basis=) keywords:
    the paper's relative gain of RTPO over `method` (PAPER_GAIN) times `method`'s mean pass@1 (%) under the lossy
    psi at K, capped at the headroom (rtpo.report.claims.claim.paper_effect, as the main ledger's 4.1 rows); without
    a paper figure or a level, the minimal MIN_GAP_PP, said so."""
    from rtpo.report.claims.claim import paper_effect

    level = summarize(_per_seed(df, hops, lossy, method, "pass1").values()).mean * 100
    out = paper_effect(_gap_figure(method), "pp", level, f"{method}[{lossy}] at K = {hops}")
    if not out:
        return {"effect": MIN_GAP_PP, "effect_basis": f"no paper figure for {method}: minimal effect {MIN_GAP_PP:g} pp"}
    return {"effect": out["effect"], "effect_basis": out["effect_basis"] + (
        "; the paper puts RTPO's lead on the mismatch, which psi = full removes")}


def sweep_claims(df: pd.DataFrame, cfg: dict[str, Any], table: pd.DataFrame | None = None) -> list:
    """The claims the sweep tests, as ledger Claims (rtpo.report.claims.claim), per lossy psi p and flat method m of
    the contrast: (1) at each K, the interaction (RTPO − m)[p] − (RTPO − m)[full] > 0, and (2) its per-seed mean
    over K > 0, each tested against the paper's gain mapped to m's level (mapped_gap; the pooled row against the
    mean of the per-K effects); (3) its growth from the shortest K to the longest > 0 (the mechanism: the lead
    the mismatch gives RTPO grows with the horizon; no paper figure: MIN_GAP_PP); (4) the manipulation check, m's
    KL(rollout ‖ train) under p above its KL under full (structural). Each empirical row's note carries the
    learning of the cells it reads and the budget ratios."""
    from rtpo.report.claims.claim import Claim

    sw = cfg["sweep"]
    table = horizon_table(df) if table is None else table
    hops, lossy, flat = _contrast(cfg)
    seeds = f"seeds {list(sw['seeds'])}"
    claims = []
    for m in flat:
        for p in lossy:
            tag = f"{m}-{variant_name(p)}"
            ref = _gap_figure(m)
            mapped = {k: mapped_gap(df, k, p, m) for k in hops}
            for k in hops:
                claims.append(Claim(
                    id=f"sweep-interaction-{tag}-h{k}", ref=ref,
                    claim=f"at K = {k}, RTPO's lead over {m} is larger under psi = {p} than under psi = full",
                    quantity=f"(RTPO − {m}) under psi = {p} minus under psi = full, K = {k}, pass@1, paired by seed",
                    unit="pp", values=interaction(df, k, p, m), sign=1, kind=KIND_EMPIRICAL, **mapped[k],
                    evidence="results/tables/sweep_horizon.csv",
                    note=f"{seeds}; " + _cells_note(table, [k], [p, FULL], m)))
            effects = [mapped[k]["effect"] for k in hops]
            d = float(np.mean(effects))
            basis = (f"the paper's {ref.change:+.3g} % relative × {m}[{p}]'s pass@1 at each K (our mean), capped "
                     f"at the headroom, as the per-K rows ({', '.join(f'{x:.3g}' for x in effects)} pp), averaged over K = "
                     f"{d:.3g} pp" if all(mapped[k]["effect_basis"].startswith("the paper's") for k in hops)
                     else "the mean over K of the per-K rows' effects (" + "; ".join(
                         f"K = {k}: {mapped[k]['effect_basis']}" for k in hops) + f") = {d:.3g} pp")
            claims.append(Claim(
                id=f"sweep-interaction-{tag}-pooled", ref=ref,
                claim=f"over K = {hops}, RTPO's lead over {m} is larger under psi = {p} than under psi = full",
                quantity=f"the per-seed mean over K = {hops} of the interactions (RTPO − {m})[{p}] − "
                         f"(RTPO − {m})[full], pass@1, paired by seed",
                unit="pp", values=interaction_pooled(df, hops, p, m), sign=1, kind=KIND_EMPIRICAL, effect=d,
                effect_basis=basis,
                evidence="results/tables/sweep_horizon.csv",
                note=f"{seeds}; each K weighs the same; the per-K rows' notes carry the cells' learning and budgets"))
            claims.append(Claim(
                id=f"sweep-interaction-growth-{tag}", ref=PAPER_SWEEP["horizon_gap"],
                claim=f"the interaction (RTPO − {m})[{p}] − (RTPO − {m})[full] grows with the horizon K",
                quantity=f"the interaction's least-squares slope over K = {hops} per seed, times {max(hops) - min(hops)} "
                         f"(its fitted change from K = {min(hops)} to K = {max(hops)})",
                unit="pp", values=interaction_growth(df, hops, p, m), sign=1, kind=KIND_EMPIRICAL, effect=MIN_GAP_PP,
                effect_basis=f"no paper figure: minimal effect {MIN_GAP_PP:g} pp from K = {min(hops)} to {max(hops)}",
                evidence="results/tables/sweep_horizon.csv",
                note=f"{seeds}; the mechanism claim: " + _cells_note(table, hops, [p, FULL], m)))
            kl = {}
            for k in hops:
                a, b = _per_seed(df, k, p, m, "kl_rollout_train"), _per_seed(df, k, FULL, m, "kl_rollout_train")
                for s in set(a) & set(b):
                    kl.setdefault(s, []).append(a[s] - b[s])
            claims.append(Claim(
                id=f"sweep-mismatch-{tag}", ref=PAPER_SWEEP["horizon_mismatch"],
                claim=f"{m} trains under a rollout–training mismatch under psi = {p} and none under psi = full",
                quantity=f"{m}'s KL(rollout ‖ train) per token under psi = {p} minus under full, mean over K = {hops}",
                unit="nats/token", values={s: float(np.mean(v)) for s, v in sorted(kl.items()) if len(v) == len(hops)},
                sign=1, kind=KIND_STRUCTURAL, evidence="results/tables/sweep_horizon.csv",
                construction=(f"the manipulation check: under full {m} samples and scores the same ids (KL 0 up to "
                              f"float rounding); under {p} it scores turns under history its rollout did not see, "
                              "and the k3 KL estimator is >= 0 per token"),
                note=seeds))
    return claims


def undecided_note(row: dict[str, Any]) -> str:
    """What an inconclusive empirical row could not decide at its n (appended to its note)."""
    if row["kind"] != KIND_EMPIRICAL or row["verdict"] != INCONCLUSIVE:
        return ""
    n = int(row["n"])
    if n < 2 or math.isnan(row["ci95_lo"]) or "cannot be scored" in str(row["note"]):
        return f"inconclusive at n = {n} seeds"
    return (f"inconclusive at n = {n} seeds: neither 0 nor the minimal effect is excluded once adjusted "
            f"(raw 95 % interval [{row['ci95_lo']:+.2f}, {row['ci95_hi']:+.2f}])")


def plot_sweep(table: pd.DataFrame, claims: pd.DataFrame, path: Path) -> None:
    """One column per psi: pass@1 against K per method, the untrained arm dashed (row 1); RTPO − method
    (row 2); each method's KL(rollout ‖ train) per token (row 3). A last column: the interaction rows' means
    and 95 % intervals against K."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    psis = list(dict.fromkeys(table.psi))
    # one colour per method in every panel
    colour = {m: f"C{i}" for i, m in enumerate(dict.fromkeys([UNTRAINED, REFERENCE, *table.method]))}
    inter = claims[claims.claim_id.str.match(r"sweep-interaction-.*-h\d+$")]   # the per-K rows
    fig, axes = plt.subplots(3, len(psis) + 1, figsize=(4.0 * (len(psis) + 1), 9.0), squeeze=False, sharex=True)
    ks = sorted(set(int(k) for k in table.K))
    for j, psi in enumerate(psis):
        d = table[table.psi == psi]
        ax = axes[0][j]
        for m, dm in d.groupby("method", sort=False):
            lo, hi = dm["pass@1"] - dm["pass@1_lo"], dm["pass@1_hi"] - dm["pass@1"]
            ax.errorbar(dm.K, dm["pass@1"], yerr=[lo.fillna(0), hi.fillna(0)], marker="o", capsize=3, color=colour[m],
                        ls="--" if m == UNTRAINED else "-", label="untrained" if m == UNTRAINED else m)
        ax.set_title(f"psi = {psi}")
        ax.set_ylabel("pass@1 (%)" if j == 0 else "")
        ax.legend(fontsize=8)
        ax = axes[1][j]
        for m, dm in d[(d.method != REFERENCE) & (d.method != UNTRAINED)].groupby("method", sort=False):
            lo, hi = dm.rtpo_minus_method_pp - dm.gap_lo, dm.gap_hi - dm.rtpo_minus_method_pp
            ax.errorbar(dm.K, dm.rtpo_minus_method_pp, yerr=[lo.fillna(0), hi.fillna(0)], marker="o", capsize=3,
                        color=colour[m], label=f"RTPO − {m}")
        ax.axhline(0, color="grey", lw=0.8)
        ax.set_ylabel("pass@1 difference (pp)" if j == 0 else "")
        ax.legend(fontsize=8)
        ax = axes[2][j]
        for m, dm in d[d.method != UNTRAINED].groupby("method", sort=False):
            ax.plot(dm.K, dm.kl_rollout_train, marker="o", color=colour[m], label=m)
        ax.set_xlabel("horizon K (hops)")
        ax.set_ylabel("KL(rollout ‖ train) per token" if j == 0 else "")
        ax.legend(fontsize=8)
    ax = axes[0][-1]
    for tag, g in inter.groupby(inter.claim_id.str.replace(r"-h\d+$", "", regex=True), sort=False):
        k = g.claim_id.str.extract(r"-h(\d+)$")[0].astype(int)
        lo, hi = g.ours_mean - g.ci95_lo, g.ci95_hi - g.ours_mean
        ax.errorbar(k, g.ours_mean, yerr=[lo.fillna(0), hi.fillna(0)], marker="o", capsize=3,
                    label=tag.removeprefix("sweep-interaction-"))
    ax.axhline(0, color="grey", lw=0.8)
    ax.set_title("interaction: (RTPO − flat)[lossy] − [full]")
    ax.set_ylabel("pp")
    ax.set_xlabel("horizon K (hops)")
    ax.tick_params(labelbottom=True)
    if len(inter):
        ax.legend(fontsize=8)
    for ax in (axes[1][-1], axes[2][-1]):
        ax.axis("off")
    for ax in axes[-1]:
        ax.set_xticks(ks)
    # one KL scale for the row, from 0: a panel of its own would blow float noise (~1e-14 under
    # psi = full) up to the size of a real mismatch
    top = float(np.nanmax(table.kl_rollout_train)) if table.kl_rollout_train.notna().any() else 0.0
    for ax in axes[2][:-1]:
        ax.set_ylim(-0.04 * max(top, 1e-3), max(top, 1e-3) * 1.1)   # points at 0 drawn whole
    n = int(table.n.max()) if len(table) else 0
    fig.suptitle(f"Mechanism sweep: search, K hops × psi (mean and 95 % t-interval over {n} seeds)", fontsize=11)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_call(path, fig.savefig, dpi=120, format="png")
    plt.close(fig)


def _table_notes(table: pd.DataFrame) -> list[str]:
    """The table's reading notes: cells whose learning is not shown, and budget ratios beyond the tolerance."""
    out = []
    if UNTRAINED not in set(table.method):
        out.append("Learning: no untrained arm (sweep.no_rl is false), so no cell's learning is shown.")
    trained = table[table.learning != ""]
    shown = trained[trained.learning == LEARNING_WORDS[REPRODUCED]]
    rest = trained[trained.learning != LEARNING_WORDS[REPRODUCED]]
    if not trained.empty:
        out.append(f"Learning over the untrained arm (trained − untrained pass@1, paired by seed, the ledger's rule at a "
                   f"minimal {MIN_LEARNING_PP:g} pp, unadjusted): shown in {len(shown)} of {len(trained)} trained cells"
                   + ("." if rest.empty else "; not shown in " + ", ".join(
                       f"K = {r.K} psi = {r.psi} {r.method} ({r.learning})" for r in rest.itertuples()) + "."))
    flat = table[table.budget_ratio.notna()]
    bad = flat[flat.budget_flag]
    if flat.empty:
        out.append("Budget: no flat cell with a matched chain count.")
    elif bad.empty:
        out.append(f"Budget: every flat cell's trajectories per prompt are within 1.0 ± {100 * BUDGET_TOLERANCE:.0f} % "
                   f"of RTPO's realised count (ratios {flat.budget_ratio.min():.2f}-{flat.budget_ratio.max():.2f}).")
    else:
        out.append(f"Budget: beyond 1.0 ± {100 * BUDGET_TOLERANCE:.0f} % of RTPO's realised trajectories per prompt "
                   "(sweep.rtpo_trajectories is off for these K): " + ", ".join(
                       f"K = {r.K} psi = {r.psi} {r.method} {r.budget_ratio:.2f}" for r in bad.itertuples()) + ".")
    return out


def control_rows(results: str | Path, cfg: dict[str, Any]) -> list[dict[str, Any]]:
    """The ledger rows of the controls that run with the sweep's target (a study with `target: sweep`: Control B,
    `ablations.mismatch`, docs/design-controls.md §2), read with the main runs they pair with by seed and
    adjusted in a family of their own (the main ledger's control family); [] when no such study is configured."""
    from rtpo.experiment import Experiment
    from rtpo.report.claims.controls import mismatch_control
    from rtpo.report.claims.verdicts import evaluate_family
    from rtpo.report.load import load_results

    exp = Experiment(cfg)
    if "mismatch" not in exp.sweep_studies:
        return []
    res = load_results(results, cfg, keys=[r.key for r in exp.sweep_study_runs()], studies=exp.sweep_studies)
    if res.missing:
        raise FileNotFoundError(f"sweep report: {len(res.missing)} file(s) of the controls run with the sweep's "
                                f"target are absent, e.g. {res.missing[0]} (rule sweep makes them)")
    return evaluate_family(mismatch_control(res, evidence="sweep_claims"), res.not_run)


def write_sweep(results: str | Path, cfg: dict[str, Any], tables_dir: str | Path, figures_dir: str | Path) -> list[Path]:
    """Write the sweep's table, claim rows and figure; returns the paths written."""
    from rtpo.report.claims.verdicts import evaluate_family
    from rtpo.report.ledger import counts_text, ledger_display
    from rtpo.report.table_base import to_markdown

    if not cfg.get("sweep"):
        raise ValueError("sweep report: this config has no 'sweep' section")
    tables_dir, figures_dir = Path(tables_dir), Path(figures_dir)
    tables_dir.mkdir(parents=True, exist_ok=True)
    df = load_sweep(results, cfg)
    table = horizon_table(df)
    rows = evaluate_family(sweep_claims(df, cfg, table)) + control_rows(results, cfg)
    for r in rows:
        extra = undecided_note(r)
        if extra:
            r["note"] = f"{r['note']}; {extra}" if r["note"] else extra
    claims = pd.DataFrame(rows).drop(columns="timing")
    paths = [tables_dir / "sweep_horizon.csv", tables_dir / "sweep_horizon.md", tables_dir / "sweep_claims.csv",
             tables_dir / "sweep_claims.md", figures_dir / "sweep_horizon.png"]
    atomic_call(paths[0], table.round(4).to_csv, index=False)
    sw = cfg["sweep"]
    opt = sw.get("optional") or {}
    atomic_write_text(paths[1], "\n".join([
        "# Mechanism sweep: search questions of K hops x rollout context map psi x method", "",
        f"K = {sw['hops']}, the contrast psi = {sw['psi']} x methods = {sw['methods']}, optional arms psi = "
        f"{opt.get('psi') or []}, methods = {opt.get('methods') or []}; the no-RL arm ({UNTRAINED}: the sweep base "
        f"model untrained) under every psi; seeds = {sw['seeds']}. A flat method's chains = "
        "round(sweep.rtpo_trajectories.h<K>) (rtpo.experiment.sweep_budget); budget_ratio = its trajectories per "
        "prompt over RTPO's realised ones (E.3's count), flagged beyond 1.0 ± 10 %. pass@1 / hit in %, mean and 95 % "
        "t-interval over seeds; learning_pp = trained − untrained and rtpo_minus_method_pp paired by seed; mismatch "
        "metrics: means over training steps and seeds.", "", *[x for n in _table_notes(table) for x in (n, "")],
        to_markdown(table.round(3)), ""]) + "\n")
    atomic_call(paths[2], claims.to_csv, index=False)
    atomic_write_text(paths[3], "\n".join([
        "# Mechanism sweep: the claims it tests", "", f"{len(claims)} claims: {counts_text(claims)}.", "",
        to_markdown(ledger_display(claims, str(cfg.get("name", "ours")))), ""]) + "\n")
    plot_sweep(table, claims, paths[4])
    return paths


__all__ = ["load_sweep", "horizon_table", "control_rows", "interaction", "interaction_growth", "interaction_pooled", "mapped_gap",
           "learning", "learning_verdict",
           "budget_ratio", "budget_flag", "sweep_claims", "undecided_note", "plot_sweep", "write_sweep",
           "BUDGET_TOLERANCE", "MIN_GAP_PP", "MIN_LEARNING_PP", "PAPER_GAIN"]
