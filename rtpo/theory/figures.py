"""The multi-panel theory figure (theory.png / theory.pdf) from the checks' figure data."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

METHOD_STYLE = {
    "reverse-order (frozen downstream)": ("tab:blue", "o", "reverse order, frozen downstream (RTPO)"),
    "simultaneous (start pair)": ("tab:orange", "s", "simultaneous, start pair only"),
    "simultaneous (all turns, trajectory return)": ("tab:red", "^", "simultaneous, all turns ← trajectory return"),
}
MSE_STYLE = {
    "sibling, mean baseline": ("tab:blue", "o", "-"),
    "sibling, leave-one-out": ("tab:cyan", "D", "--"),
    "trajectory, mean baseline": ("tab:red", "s", "-"),
    "trajectory, leave-one-out": ("tab:pink", "v", "--"),
}


def plot_theory(res, out: Path) -> None:
    """Draw the six panels from ``res.data`` (a `checks.TheoryResults`) into out/theory.{png,pdf}."""
    fig, axes = plt.subplots(2, 3, figsize=(17, 10))
    _thm1(axes[0, 0], axes[0, 1], res.data["thm1_curves"], res.notes.get("thm1", ""))
    _bias(axes[0, 2], res.data["c3_bias_factor"])
    _mse(axes[1, 0], res.data["c3_mse"])
    _is(axes[1, 1], res.data["c4_is_variance"])
    _qvar(axes[1, 2], res.data["c4_sibling_q_variance"], res.data.get("c4_dynamic_q"))
    for ax, letter in zip(axes.ravel(), "abcdef"):
        ax.text(-0.12, 1.06, f"({letter})", transform=ax.transAxes, fontsize=13, fontweight="bold")
        ax.grid(alpha=0.3, which="both")
    fig.suptitle("RTPO theory on tabular turn-level MDPs: closed forms (lines) vs Monte Carlo (markers)", fontsize=14)
    # fixed margins: tight_layout measures every text extent and costs seconds on a slow CPU
    fig.subplots_adjust(left=0.06, right=0.985, bottom=0.065, top=0.91, wspace=0.28, hspace=0.3)
    fig.savefig(out / "theory.png", dpi=130)
    fig.savefig(out / "theory.pdf")
    plt.close(fig)


def _thm1(ax_err, ax_gap, df, note: str) -> None:
    for method, (color, marker, label) in METHOD_STYLE.items():
        sub = df[df.method == method].groupby("episodes")
        for ax, col in ((ax_err, "rms_error"), (ax_gap, "value_gap")):
            mean, lo, hi = sub[col].mean(), sub[col].min(), sub[col].max()
            ax.plot(mean.index, mean.values, color=color, marker=marker, ms=4, label=label)
            ax.fill_between(mean.index, lo.values, hi.values, color=color, alpha=0.12)
    eps = np.array(sorted(df.episodes.unique()), dtype=float)
    ref = df[df.method.str.startswith("reverse")].groupby("episodes").rms_error.mean()
    ax_err.plot(eps, ref.iloc[len(ref) // 2] * np.sqrt(ref.index[len(ref) // 2] / eps), "k:", lw=1, label="∝ 1/√B guide")
    ax_err.set(xscale="log", yscale="log", xlabel="budget B (episodes = terminal rewards observed)",
               ylabel="RMS error of Q̂ vs exact Q* (reward units)", title="Thm 1(b): error to Q* vs samples")
    ax_err.legend(fontsize=8, title=f"mean over MDPs, band = min–max", title_fontsize=8)
    ax_gap.set(xscale="log", xlabel="budget B (episodes = terminal rewards observed)",
               ylabel="E[V*(S₀) − V^π̂(S₀)] (success probability)", title="Thm 1(b): suboptimality of greedy π̂")
    ax_gap.axhline(0, color="k", lw=0.8)
    ax_gap.legend(fontsize=8)
    ax_gap.text(0.98, 0.6, note.replace("; ", "\n").replace(" (K=", "\n(K="), transform=ax_gap.transAxes,
                ha="right", va="top", fontsize=7.5, color="0.3", wrap=True)


def _bias(ax, df) -> None:
    G = np.arange(2, int(df.G.max()) + 1)
    ax.plot(G, (G - 1) / G, "-", color="tab:blue", label="mean incl. self: (G−1)/G (exact)")
    ax.plot(G, np.ones_like(G, dtype=float), "-", color="tab:green", label="leave-one-out: 1 (exact)")
    ax.plot(G, (G - 2) / (G - 1), "--", color="0.45", label="paper's statement: (G−2)/(G−1)")
    for b, color, marker in (("mean", "tab:blue", "o"), ("loo", "tab:green", "s")):
        sub = df[df.baseline == b]
        ax.errorbar(sub.G, sub.monte_carlo, yerr=2 * sub.se, fmt=marker, color=color, ms=6, capsize=3,
                    mfc="white", label=f"Monte Carlo ({'mean' if b == 'mean' else 'LOO'}), ±2 SE")
    ax.set(xlabel="sibling group size G", ylabel="E[Â_i | a_i] / A(s, a_i)  (dimensionless)",
           title="§C.3: finite-group factor of the sibling advantage", ylim=(-0.05, 1.12))
    ax.legend(fontsize=8, loc="lower right")


def _mse(ax, df) -> None:
    fam = df[df.family == "cross-state"]
    for est in sorted(fam.estimator.unique()):
        sub = fam[fam.estimator == est].sort_values("var_V")
        color, marker, ls = MSE_STYLE.get(est, ("tab:purple", "P", ":"))
        ax.plot(sub.var_V, sub.closed_form, ls, color=color, label=f"{est} (G=N={int(sub.group.iloc[0])})"
                if "N=" not in est else est.replace("mean baseline, ", "mean, ") + " (budget-matched)")
        ax.errorbar(sub.var_V, sub.monte_carlo, yerr=2 * sub.se, fmt=marker, color=color, ms=5, mfc="white", capsize=2)
    ax.set(xlabel="cross-state value variance σ²_V (reward²)", ylabel="MSE of Â vs true A(S_k, a) (reward²)",
           title="§C.3: sibling vs trajectory-level advantages")
    ax.set_ylim(0, 1.6 * fam[["closed_form", "monte_carlo"]].to_numpy().max())
    ax.legend(fontsize=7.5, loc="upper left", ncol=1)
    ax.text(0.98, 0.03, "binary reward: σ²_V + σ²_A + σ²_ε = μ(1−μ) is fixed,\nso a larger σ²_V leaves less downstream noise σ²_ε;\n"
            "trajectory − sibling = ((G−1)/G)·σ²_V (mean baselines)",
            transform=ax.transAxes, ha="right", va="bottom", fontsize=7.5, color="0.3")


def _is(ax, df) -> None:
    colors = ["tab:green", "tab:orange", "tab:red", "tab:purple", "tab:brown"]
    for color, (d2, sub) in zip(colors, df[df.delta2 > 0].groupby("delta2")):
        ax.plot(sub.horizon, sub.closed_form, "-", color=color, label=f"off-policy, per-turn χ²={d2}: (1+χ²)^H − 1")
        ax.errorbar(sub.horizon, sub.monte_carlo, yerr=2 * sub.se, fmt="o", color=color, ms=4, mfc="white", capsize=2)
    on = df[df.delta2 == 0]
    ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
    ax.set(yscale="log", xlabel="continuation horizon H (turns)", ylabel="Var(w_H) of the trajectory IS weight (dimensionless)",
           title="§C.4: IS-weight variance vs horizon")
    ax.text(0.97, 0.05, f"on-policy continuation (RTPO): w_H ≡ 1,\nVar(w_H) = {on.monte_carlo.max():g} at every H (Monte Carlo)",
            transform=ax.transAxes, ha="right", va="bottom", fontsize=8.5,
            bbox=dict(boxstyle="round", fc="white", ec="tab:blue"))
    ax.plot([], [], "o", color="0.4", mfc="white", label="Monte Carlo, ±2 SE")
    ax.legend(fontsize=8, loc="upper left")


def _qvar(ax, df, dyn) -> None:
    p = np.linspace(0, 1, 201)
    for color, (G, sub) in zip(("tab:blue", "tab:green", "tab:orange"), df.groupby("G")):
        ax.plot(p, p * (1 - p) / G, "-", color=color, label=f"p(1−p)/G, G={G}")
        ax.errorbar(sub.p, sub.monte_carlo, yerr=2 * sub.se, fmt="o", color=color, ms=5, mfc="white", capsize=2)
    ax.axvline(0.5, color="0.5", ls=":", lw=1)
    ax.plot([], [], "o", color="0.4", mfc="white", label="Monte Carlo, ±2 SE")
    if dyn is not None and len(dyn):
        vb = (dyn.q_before * (1 - dyn.q_before)).mean()
        va = (dyn.q_after * (1 - dyn.q_after)).mean()
        up = ((dyn.q_after * (1 - dyn.q_after)) > (dyn.q_before * (1 - dyn.q_before)) + 1e-12).mean()
        ax.text(0.02, 0.98, f"random 4-turn MDPs, turns k<K−1:\nmean Q(1−Q) {vb:.3f} (initial downstream)\n"
                f"→ {va:.3f} (optimal downstream);\nrose for {100 * up:.0f}% of (k,s,a)",
                transform=ax.transAxes, ha="left", va="top", fontsize=7.5, bbox=dict(boxstyle="round", fc="white", ec="0.6"))
    ax.set(xlabel="continuation success probability p = Q^π(s, a)", ylabel="Var(Q̂) of the sibling mean (reward²)",
           title="§C.4: sibling-Q Monte Carlo variance vs p", ylim=(0, 0.36 / min(df.G)))
    ax.legend(fontsize=8, loc="upper right")
