"""Figure 3 a reader can use: the KL row from 0 on one scale (float noise drawn as 0, not blown up to
1e-14 full height), and every method visible where curves coincide (GRPO and SeeUPO equal here)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.report_fixture import fixture_config, make_results_tree, write_config


@pytest.fixture(scope="module")
def fig03(tmp_path_factory):
    from rtpo.report import figures
    from rtpo.report.load import load_results

    work = tmp_path_factory.mktemp("fig03")
    cfg = fixture_config(**{"train.steps": 4, "seeds": [0], "ablations.seeds": [0]})
    write_config(cfg, work / "config.yaml")
    make_results_tree(work, cfg)
    runs = work / "results" / "runs"
    for task in cfg["tasks"]:
        g = [json.loads(x) for x in (runs / task / "grpo" / "seed0" / "metrics.jsonl").read_text().splitlines()]
        p = runs / task / "seeupo" / "seed0" / "metrics.jsonl"
        s = [json.loads(x) for x in p.read_text().splitlines()]
        for a, b in zip(g, s):  # SeeUPO's curves equal GRPO's (both recompute under the full history)
            b["ratio_mean"], b["kl_rollout_train"] = a["ratio_mean"], a["kl_rollout_train"]
        p.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in s))
    search = cfg["tasks"][1]
    for m in ("grpo", "seeupo", "rtpo", "tree_grpo", "arpo"):  # this task: KL is float noise for all
        p = runs / search / m / "seed0" / "metrics.jsonl"
        recs = [json.loads(x) for x in p.read_text().splitlines()]
        for i, r in enumerate(recs):
            r["kl_rollout_train"], r["ratio_mean"] = ((i + 1) * 3e-15 if m == "rtpo" else 0.0), 1.0
        p.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in recs))
    caught = {}
    real_save = figures._save

    def keep(fig, outdir, name):
        caught[name] = fig
        return real_save(fig, outdir, name)

    figures._save = keep
    try:
        res = load_results(work / "results", cfg)
        paths = figures.fig03_consistency(res, work / "figures")
    finally:
        figures._save = real_save
    return caught["fig03_consistency"], paths, cfg


def test_kl_row_is_one_scale_from_zero(fig03):
    from rtpo.report.figures import KL_MIN_TOP

    fig, paths, cfg = fig03
    assert paths[0].suffix == ".png" and paths[0].stat().st_size > 10_000
    kl_axes = [ax for ax in fig.axes if ax.get_ylabel().startswith("KL") or ax.get_xlabel() == "training step"]
    assert len(kl_axes) == len(cfg["tasks"])
    lims = {ax.get_ylim() for ax in kl_axes}
    assert len(lims) == 1, lims  # one scale for the row
    lo, hi = lims.pop()
    assert lo <= 0 <= hi and hi >= KL_MIN_TOP  # the noise-only panel is not scaled to 1e-14


def test_every_method_is_visible_where_curves_coincide(fig03):
    fig, _, _ = fig03
    ax = fig.axes[0]  # ratio, first task
    lines = {ln.get_label(): ln for ln in ax.get_lines() if not ln.get_label().startswith("_")}
    assert {"GRPO", "SeeUPO", "RTPO"} <= set(lines)
    g, s = lines["GRPO"], lines["SeeUPO"]
    assert np.allclose(g.get_ydata(), s.get_ydata())  # equal values ...
    assert not np.allclose(g.get_xdata(), s.get_xdata())  # ... drawn side by side
    assert g.get_linestyle() != s.get_linestyle() and g.get_marker() != s.get_marker()
    styles = {(ln.get_linestyle(), ln.get_marker(), ln.get_color()) for ln in lines.values()}
    assert len(styles) == len(lines)
