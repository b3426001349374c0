"""The paper's figures from our runs (PNG + PDF under the figures dir); one story per figure.

  fig03_consistency        §4.2 Figure 3: rollout–training ratio and KL over training steps, per task
  fig_training_curves      reward and success over training steps, per task (seed bands)
  fig_main_results         §4.1: pass@1 per benchmark and method (Table 1 as bars)
  fig_group_size           §G.2: what G buys (zero-advantage, pass@1) and what it costs (tokens)
  fig_continuation         §4.4: on- vs off-policy continuation, output-hit per benchmark
  fig_sync                 §G.6: synchronisation frequency, accuracy and wall-clock
  fig_budget               §G.7: per-trunk tool calls and tokens over training

Lines are the mean over seeds; shaded bands and error bars are ±1 std over seeds (none with a
single seed). Colours are fixed per method across every figure.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from rtpo.atomic import atomic_call  # noqa: E402
from rtpo.report.load import MAIN, Results, benchmark_label  # noqa: E402
from rtpo.report.stats import summarize  # noqa: E402
from rtpo.report.table_base import method_label, methods_with, seed_counts_range, tasks_with  # noqa: E402

_PALETTE = sns.color_palette("colorblind", 10)
METHOD_COLORS = {"vanilla": _PALETTE[7], "grpo": _PALETTE[0], "tree_grpo": _PALETTE[2], "arpo": _PALETTE[4],
                 "seeupo": _PALETTE[5], "rtpo": _PALETTE[3], "rtpo_ca": _PALETTE[3]}  # SeeUPO brown: orange was RTPO's vermilion
# distinct markers, so that methods whose curves coincide (common in tiny runs) stay visible
METHOD_MARKERS = {"vanilla": "o", "grpo": "s", "tree_grpo": "^", "arpo": "D", "seeupo": "v", "rtpo": "o",
                  "rtpo_ca": "P"}
# distinct dash patterns too: where two methods' curves coincide (GRPO and SeeUPO both recompute under the
# full history, so their ratio and KL can be equal), the line drawn later lets the earlier one show
METHOD_LINESTYLES = {"vanilla": "-", "grpo": "-", "tree_grpo": "-.", "arpo": (0, (1, 1.5)), "seeupo": (0, (5, 3)),
                     "rtpo": "-", "rtpo_ca": (0, (3, 1, 1, 1))}
DODGE = 0.06       # Figure 3: steps between two methods' points at one step (see _plot_curves)
KL_MIN_TOP = 1e-3  # nats/token: the KL axis's least height, so float round-off (~1e-14) draws as 0
VARIANT_COLORS = [_PALETTE[3], _PALETTE[0], _PALETTE[2], _PALETTE[1], _PALETTE[4]]


def _n_seeds(res: Results, scope: str = MAIN) -> str:
    """How many seeds a scope's cells have: "4", or "3-6" when seed_counts gives cells their own."""
    lo, hi = seed_counts_range(res.cfg, scope)
    return str(lo) if lo == hi else f"{lo}-{hi}"


def band_note(res: Results) -> str:
    n = _n_seeds(res)
    return f"lines: mean over {n} seeds; bands: ±1 std" if n != "1" else "one seed: no bands"


def bar_note(res: Results, scope: str = MAIN) -> str:
    n = _n_seeds(res, scope)
    return f"mean over {n} seeds, error bars ±1 std" if n != "1" else "one seed: no error bars"
DPI = 150


def _color(m: str, i: int = 0):
    return METHOD_COLORS.get(m, _PALETTE[(i + 5) % len(_PALETTE)])


def _style():
    return sns.axes_style("whitegrid")


def _save(fig, outdir: Path, name: str) -> list[Path]:
    outdir.mkdir(parents=True, exist_ok=True)
    paths = [outdir / f"{name}.png", outdir / f"{name}.pdf"]
    atomic_call(paths[0], fig.savefig, dpi=DPI)  # layouts leave room for titles and legends (tight_layout rect)
    atomic_call(paths[1], fig.savefig, metadata={"CreationDate": None})  # no timestamp: a rerun writes the same bytes
    plt.close(fig)
    return paths


def _curve(res: Results, task: str, method: str, column: str, scope: str = MAIN, variant: str = ""
           ) -> pd.DataFrame:
    """step, mean, std, n of one JSONL column across seeds (NaN values dropped)."""
    df = res.step_rows(scope, variant, task, method)
    if df.empty or column not in df.columns:
        return pd.DataFrame(columns=["step", "mean", "std", "n"])
    df = df[["step", column]].dropna()
    g = df.groupby("step")[column]
    out = pd.DataFrame({"mean": g.mean(), "std": g.std(ddof=1), "n": g.count()}).reset_index()
    return out


def _plot_curves(ax, res: Results, task: str, column: str, scale: float = 1.0, dodge: float = 0.0) -> list[str]:
    """One line per method with a ±1 std band; returns the methods drawn. dodge: shift method i's points
    by (i - centre) * dodge steps, so that curves with equal values (every method at ratio 1, KL 0 when
    training sees the rollout's context) stay side by side instead of hiding each other."""
    drawn = []
    methods = methods_with(res, task, "steps")
    for i, m in enumerate(methods):
        c = _curve(res, task, m, column)
        if c.empty:
            continue
        x = c["step"].to_numpy() + (i - (len(methods) - 1) / 2) * dodge
        y = c["mean"].to_numpy() * scale
        ax.plot(x, y, marker=METHOD_MARKERS.get(m, "o"), ms=4 + (i % 3), lw=1.6, alpha=0.9, color=_color(m, i),
                ls=METHOD_LINESTYLES.get(m, "-"), label=method_label(m),
                markerfacecolor="none" if m != "rtpo" else _color(m, i),
                zorder=2.0 if m == "rtpo" else 2.5)  # hollow markers above RTPO's filled ones where they meet
        sd = c["std"].to_numpy() * scale
        ok = ~np.isnan(sd)
        if ok.any():  # every plotted quantity is >= 0: clip the band there
            ax.fill_between(x[ok], np.maximum(y - sd, 0)[ok], (y + sd)[ok], color=_color(m, i), alpha=0.12, lw=0)
        drawn.append(m)
    return drawn


def _curve_max(res: Results, task: str, column: str) -> float:
    """The largest mean (+ std) any method's curve of `column` reaches on `task` (0 when none)."""
    top = 0.0
    for m in methods_with(res, task, "steps"):
        c = _curve(res, task, m, column)
        if not c.empty:
            top = max(top, float(np.nanmax(c["mean"] + c["std"].fillna(0.0))))
    return top


def _int_steps(ax) -> None:
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def _from_zero(ax, min_top: float) -> None:
    """y from (just below) 0 to at least min_top: a line at 0 stays visible above the spine."""
    top = max(min_top, ax.get_ylim()[1])
    ax.set_ylim(-0.03 * top, top)


def _width(ntasks: int) -> float:
    """Figure width for one column per task; never so narrow that the title overflows."""
    return max(4.6 * ntasks, 8.0)


def _legend_below(fig, axes, ncol: int | None = None, order: list[str] | None = None) -> None:
    """One legend under the panels, entries in `order` (method labels, e.g. config order) first."""
    handles: dict[str, object] = {}
    for ax in np.ravel(axes):
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    if order:
        rank = {lab: i for i, lab in enumerate(order)}
        handles = dict(sorted(handles.items(), key=lambda kv: rank.get(kv[0], len(rank))))
    if handles:
        fig.legend(list(handles.values()), list(handles.keys()), loc="lower center",
                   ncol=ncol or min(7, len(handles)), frameon=False, bbox_to_anchor=(0.5, 0.0))


def _empty(ax, text: str = "no data") -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="0.4")


# ------------------------------------------------------------------------------------------------

def fig03_consistency(res: Results, outdir: Path) -> list[Path]:
    tasks = tasks_with(res, "steps")
    if not tasks:
        return []
    with _style():
        fig, axes = plt.subplots(2, len(tasks), figsize=(_width(len(tasks)), 7.0), squeeze=False, sharex="col")
        for j, t in enumerate(tasks):
            ax = axes[0, j]
            if not _plot_curves(ax, res, t, "ratio_mean", dodge=DODGE):
                _empty(ax)
            ax.axhline(1.0, color="0.55", ls="--", lw=1, zorder=0)
            lo, hi = ax.get_ylim()  # at least 1 ± 0.02 so that numerical noise does not look like drift
            ax.set_ylim(min(lo, 0.98), max(hi, 1.02))
            ax.ticklabel_format(axis="y", useOffset=False)
            ax.set_title(f"{t}", fontsize=12)
            ax.set_ylabel("ratio exp(logp_train − logp_rollout)" if j == 0 else "")
            ax = axes[1, j]
            if not _plot_curves(ax, res, t, "kl_rollout_train", dodge=DODGE):
                _empty(ax)
            ax.axhline(0.0, color="0.55", ls="--", lw=1, zorder=0)
            ax.set_ylabel("KL(rollout ‖ train) (nats / token)" if j == 0 else "")
            ax.set_xlabel("training step")
            _int_steps(ax)
        # one KL scale for the row, from 0 and at least KL_MIN_TOP high: a panel scaled on its own would
        # blow float noise (~1e-14 when training sees the rollout's context) up to the size of a real mismatch
        top = max([KL_MIN_TOP] + [_curve_max(res, t, "kl_rollout_train") for t in tasks])
        for ax in axes[1]:
            ax.set_ylim(-0.04 * top, 1.1 * top)
            ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3), useOffset=False)
        fig.suptitle("Figure 3: rollout–training consistency on trained tokens (before each update)\n"
                     f"1.0 / 0 = training sees exactly the rollout's context; {band_note(res)}; Vanilla (no update) has none; "
                     "methods' points side by side around each step", fontsize=12)
        _legend_below(fig, axes, order=[method_label(m) for m in res.cfg.get("methods", [])])
        fig.tight_layout(rect=(0, 0.05, 1, 1))
        return _save(fig, outdir, "fig03_consistency")


def fig_training_curves(res: Results, outdir: Path) -> list[Path]:
    tasks = tasks_with(res, "steps")
    if not tasks:
        return []
    with _style():
        fig, axes = plt.subplots(2, len(tasks), figsize=(_width(len(tasks)), 7.0), squeeze=False, sharex="col")
        for j, t in enumerate(tasks):
            if not _plot_curves(axes[0, j], res, t, "reward_mean", dodge=DODGE):
                _empty(axes[0, j])
            axes[0, j].set_title(t, fontsize=12)
            axes[0, j].set_ylabel("mean terminal reward" if j == 0 else "")
            rew = res.step_rows(MAIN, "", t)["reward_mean"].dropna()
            if len(rew) and rew.min() >= 0:  # non-negative rewards: start the axis at 0
                _from_zero(axes[0, j], 0.1)
            col = res.online_column(t)
            if not _plot_curves(axes[1, j], res, t, col, 100, dodge=DODGE):  # success: few values, often equal
                _empty(axes[1, j])
            _from_zero(axes[1, j], 10.0)
            axes[1, j].set_ylabel(("held-out success (%)" if col == "heldout_success" else
                                   "online success (% of trajectories)") if j == 0 else "")
            axes[1, j].set_xlabel("training step")
            _int_steps(axes[1, j])
        fig.suptitle(f"Training curves: mean reward of each step's trajectories; success on a fixed held-out batch "
                     f"where recorded\n{band_note(res)}; methods' points side by side around each step", fontsize=12)
        _legend_below(fig, axes, order=[method_label(m) for m in res.cfg.get("methods", [])])
        fig.tight_layout(rect=(0, 0.05, 1, 1))
        return _save(fig, outdir, "fig_training_curves")


def _grouped_bars(ax, groups: list[str], series: list[tuple[str, object, Callable[[str], dict]]],
                  scale: float = 100.0) -> None:
    """Bars: one group per x label, one bar per series (label, colour, getter(group) -> {seed: v})."""
    n = max(1, len(series))
    width = 0.8 / n
    x = np.arange(len(groups))
    for i, (label, color, get) in enumerate(series):
        means, stds = [], []
        for g in groups:
            s = summarize(get(g).values())
            means.append(s.mean * scale if s.n else np.nan)
            stds.append(s.std * scale if s.n > 1 else np.nan)  # no bar without a spread
        xpos = x - 0.4 + width * (i + 0.5)
        ax.bar(xpos, means, width, yerr=stds, color=color, label=label,
               capsize=2, error_kw={"lw": 1, "ecolor": "0.25"})
        for xp, mv in zip(xpos, means):  # a zero bar is invisible and a missing one too: say which
            if np.isnan(mv) or mv == 0:
                ax.text(xp, 0, "n/a" if np.isnan(mv) else "0", ha="center", va="bottom", fontsize=7,
                        color=color, rotation=90 if n > 3 else 0)
    ax.set_xticks(x)
    ax.set_xticklabels(groups, rotation=0)
    if scale == 100.0:  # a percent axis: all-zero bars still show a readable 0-10 % scale
        ax.set_ylim(0, max(10.0, ax.get_ylim()[1]))


def fig_main_results(res: Results, outdir: Path) -> list[Path]:
    tasks = tasks_with(res)
    if not tasks:
        return []
    with _style():
        fig, axes = plt.subplots(1, len(tasks), figsize=(max(4.8 * len(tasks), 8.0), 4.2), squeeze=False)
        for j, t in enumerate(tasks):
            ax = axes[0, j]
            benches = res.benchmarks(t)
            labels = [benchmark_label(b).replace(f"{t}-", "") for b in benches] + ["average"]
            series = []
            for m in methods_with(res, t):
                def get(lbl, m=m, t=t):
                    if lbl == "average":
                        return res.eval_macro_by_seed([t], m, "pass@1")
                    return res.eval_by_seed(t, m, benches[labels.index(lbl)], "pass@1")
                series.append((method_label(m), _color(m), get))
            _grouped_bars(ax, labels, series)
            ax.set_title(t, fontsize=12)
            ax.set_ylabel("pass@1 (%)" if j == 0 else "")
            ax.set_xlabel("benchmark (difficulty tier)")
        fig.suptitle(f"Main results: pass@1 by task and difficulty tier ({bar_note(res)})",
                     fontsize=12)
        _legend_below(fig, axes, order=[method_label(m) for m in res.cfg.get("methods", [])])
        fig.tight_layout(rect=(0, 0.09, 1, 1))
        return _save(fig, outdir, "fig_main_results")


def fig_group_size(res: Results, outdir: Path) -> list[Path]:
    st = res.studies.get("group_size")
    if st is None:
        return []
    m = st.methods[0]
    gs = [float(v.value) for v in st.variants]
    tokens = {v.name: res.steps_by_seed(st.task, m, "tokens_total", "sum", st.name, v.name) for v in st.variants}
    big = max([x for d in tokens.values() for x in d.values()] or [0]) > 10_000
    panels = (("zero-advantage rows (%)", lambda v: res.steps_by_seed(st.task, m, "zero_adv_frac", "mean", st.name, v), 100),
              ("pass@1 (%)", lambda v: res.eval_by_seed(st.task, m, "overall", "pass@1", st.name, v), 100),
              ("training-generation tokens" + (" (thousands)" if big else ""), lambda v: tokens[v],
               1e-3 if big else 1.0))
    with _style():
        fig, axes = plt.subplots(1, 3, figsize=(12.5, 4.2), squeeze=False)
        for ax, (ylabel, get, scale) in zip(axes[0], panels):
            xs, ys, es = [], [], []
            for v in st.variants:
                s = summarize(get(v.name).values())
                if s.n == 0:
                    continue
                xs.append(float(v.value))
                ys.append(s.mean * scale)
                es.append(s.std * scale if s.n > 1 else np.nan)
            if xs:
                ax.errorbar(xs, ys, yerr=es, marker="o", color=_color(m), capsize=3, lw=1.8)
            else:
                _empty(ax)
            ax.set_xticks(gs)  # every configured G on every panel, data or not
            ax.set_xlim(min(gs) - 0.5, max(gs) + 0.5)
            ax.set_xlabel("sibling group size G")
            ax.set_ylabel(ylabel)
            ax.set_ylim(bottom=0)
        fig.suptitle(f"Sibling group size G ({method_label(m)} on {st.task}): signal density and accuracy vs "
                     f"training cost\n({bar_note(res, st.name)})", fontsize=12)
        fig.tight_layout()
        return _save(fig, outdir, "fig_group_size")


def _study_bars(res: Results, study: str, outdir: Path, name: str, title: str,
                with_cost: bool = False) -> list[Path]:
    st = res.studies.get(study)
    if st is None or res.evals.empty:
        return []
    m = st.methods[0]
    sub = res.evals[res.evals.scope == st.name]
    if sub.empty:
        return []
    metric = "hit" if "hit" in sub.columns and sub["hit"].notna().any() else "pass@1"
    benches = []
    for v in st.variant_names():
        benches += [b for b in res.benchmarks(st.task, st.name, v) if b not in benches]
    labels = [benchmark_label(b).replace(f"{st.task}-", "") for b in benches] + ["average"]
    series = []
    for i, v in enumerate(st.variant_names()):
        def get(lbl, v=v):
            if lbl == "average":
                return res.eval_macro_by_seed([st.task], m, metric, st.name, v)
            return res.eval_by_seed(st.task, m, benches[labels.index(lbl)], metric, st.name, v)
        series.append((v, VARIANT_COLORS[i % len(VARIANT_COLORS)], get))
    ncols = 2 if with_cost else 1
    with _style():
        fig, axes = plt.subplots(1, ncols, figsize=(7.5 + 3.5 * (ncols - 1), 4.4), squeeze=False,
                                 gridspec_kw={"width_ratios": [3, 2][:ncols]})
        ax = axes[0, 0]
        _grouped_bars(ax, labels, series)
        ax.set_ylabel(f"{'output-hit' if metric == 'hit' else metric} (%)")
        ax.set_xlabel(f"{st.task} benchmark (difficulty tier)")
        ax.set_ylim(0, ax.get_ylim()[1] * 1.18)  # headroom for the legend
        ax.legend(title="variant", frameon=False, fontsize=9, loc="upper center", ncol=len(series))
        if with_cost:
            ax = axes[0, 1]
            xs = np.arange(len(st.variants))
            for i, v in enumerate(st.variant_names()):
                s = summarize(res.steps_by_seed(st.task, m, "time_total", "sum", st.name, v).values())
                ax.bar(i, s.mean if s.n else np.nan, 0.6, yerr=s.std if s.n > 1 else np.nan,
                       color=VARIANT_COLORS[i % len(VARIANT_COLORS)], capsize=3)
            ax.set_xticks(xs)
            ax.set_xticklabels(st.variant_names())
            ax.set_ylabel("training wall-clock (s)")
            ax.set_xlabel("synchronisation")
        fig.suptitle(f"{title}\n({method_label(m)} on {st.task}; {bar_note(res, st.name)})", fontsize=12)
        fig.tight_layout()
        return _save(fig, outdir, name)


def fig_continuation(res: Results, outdir: Path) -> list[Path]:
    return _study_bars(res, "continuation", outdir, "fig_continuation",
                       "On-policy vs off-policy sibling continuation")


def fig_sync(res: Results, outdir: Path) -> list[Path]:
    return _study_bars(res, "sync", outdir, "fig_sync", "Synchronisation frequency: accuracy and cost",
                       with_cost=True)


def fig_budget(res: Results, outdir: Path) -> list[Path]:
    tasks = tasks_with(res, "steps")
    if not tasks:
        return []
    with _style():
        fig, axes = plt.subplots(2, len(tasks), figsize=(_width(len(tasks)), 7.0), squeeze=False, sharex="col")
        for j, t in enumerate(tasks):
            if not _plot_curves(axes[0, j], res, t, "trunks_tool_calls_per_trunk"):
                _empty(axes[0, j])
            axes[0, j].set_title(t, fontsize=12)
            axes[0, j].set_ylabel("tool calls per trunk" if j == 0 else "")
            if not _plot_curves(axes[1, j], res, t, "trunks_tokens_per_trunk"):
                _empty(axes[1, j])
            axes[1, j].set_ylabel("generated tokens per trunk" if j == 0 else "")
            for ax in axes[:, j]:  # counts: start at 0
                _from_zero(ax, 1.0)
            axes[1, j].set_xlabel("training step")
            _int_steps(axes[1, j])
        fig.suptitle(f"Budget per first-pass trajectory over training (§G.7)\n{band_note(res)}", fontsize=12)
        _legend_below(fig, axes, order=[method_label(m) for m in res.cfg.get("methods", [])])
        fig.tight_layout(rect=(0, 0.05, 1, 1))
        return _save(fig, outdir, "fig_budget")


FIGURES: tuple[Callable[[Results, Path], list[Path]], ...] = (
    fig03_consistency, fig_training_curves, fig_main_results, fig_group_size, fig_continuation, fig_sync,
    fig_budget,
)
