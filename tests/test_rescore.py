"""scripts/rescore_ledger.py re-scores a committed ledger by today's rules from its per-seed values and tables;
scripts/seed_power.py turns a ledger's per-seed values into seed counts. Both on the committed reference."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pandas as pd
import pytest

from rtpo.report.stats import (
    INCONCLUSIVE, KIND_EMPIRICAL, KIND_STRUCTURAL, NOT_MEASURABLE, VERDICTS, summarize, t975,
)

ROOT = Path(__file__).resolve().parent.parent
REF = ROOT / "reference" / "cpu-default"


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def rescored(tmp_path_factory):
    out = tmp_path_factory.mktemp("rescore") / "claims.csv"
    assert _script("rescore_ledger").main(["--tables", str(REF), "--out", str(out)]) == 0
    return pd.read_csv(out, keep_default_na=False, na_values=[""]).set_index("claim_id"), \
        pd.read_csv(REF / "claims.csv", keep_default_na=False, na_values=[""]).set_index("claim_id")


def test_rescoring_keeps_the_values_and_applies_todays_rules(rescored):
    new, old = rescored
    assert set(new.verdict) <= set(VERDICTS)
    # the per-seed values and their intervals are the reference's own
    for cid in new.index.intersection(old.index):
        if old.loc[cid, "rule"] != "theory-check":   # theory rows: no per-seed values
            a, b = new.loc[cid, "values"], old.loc[cid, "values"]
            assert a == b or (pd.isna(a) and pd.isna(b)), cid   # both empty: a row of a study not run
    # the rows that hold by construction are structural now; the geometric ratio's rows need the runs
    assert new.loc["F.2-seeupo-jitter", "kind"] == KIND_STRUCTURAL
    if "G.2-G2-degenerate" in new.index:   # only with a G2 arm (the CPU default dropped it)
        assert new.loc["G.2-G2-degenerate", "kind"] == KIND_STRUCTURAL
    assert not any(i.startswith("4.2-ratio-grpo-") for i in new.index)
    # RTPO's airline training dynamics are scored only if its training reward rises in the reference
    learning = pd.read_csv(REF / "table_learning.csv")
    lo = float(learning[(learning.task == "airline") & (learning.method == "rtpo")].ci95_lo.iloc[0])
    for cid in ("G.1-late-decline", "G.3-failed-length", "G.7-tool_calls_per_trunk"):
        assert (new.loc[cid, "verdict"] == NOT_MEASURABLE) == (lo <= 0), cid
    # every empirical row that is scored went through the Benjamini-Hochberg family: adjusted >= raw
    emp = new[new.kind == KIND_EMPIRICAL].dropna(subset=["p_zero"])
    assert len(emp) > 20 and (emp.p_zero_bh >= emp.p_zero - 1e-15).all()
    # a paper figure in the row's unit is the effect tested, stated in `expected`
    assert "paper's effect −56 %" in new.loc["G.1-tps-grpo", "expected"]


def test_a_zero_width_row_of_the_reference_is_not_scored(rescored):
    new, _ = rescored
    vals = [float(v) for v in str(new.loc["G.1-late-decline", "values"]).split(";")]
    if len(set(vals)) == 1:   # every seed the same value: not scored, whatever else holds
        assert new.loc["G.1-late-decline", "verdict"] in (INCONCLUSIVE, NOT_MEASURABLE)
        assert math.isnan(new.loc["G.1-late-decline", "p_zero"])


def test_rescoring_a_missing_ledger_is_bad_input(tmp_path, capsys):
    assert _script("rescore_ledger").main(["--tables", str(tmp_path)]) == 2
    assert "claims.csv: no claim ledger" in capsys.readouterr().err


def test_seed_counts_follow_the_t_interval(rescored, tmp_path, capsys):
    new, _ = rescored
    path = tmp_path / "r.csv"
    new.reset_index().to_csv(path, index=False)
    sp = _script("seed_power")
    assert sp.main(["--claims", str(path)]) == 0
    out = capsys.readouterr().out
    row = next(x.split() for x in out.splitlines() if x.split() and x.split()[0] == "4.1-seeupo")
    n_decide = int(row[4])
    s = summarize(float(v) for v in str(new.loc["4.1-seeupo", "values"]).split(";"))
    d = float(row[3])
    # the first n at which the 95 % half-width is below d / 2, by the t quantile itself
    assert t975(n_decide - 1) * s.std / math.sqrt(n_decide) < d / 2 <= t975(n_decide - 2) * s.std / math.sqrt(n_decide - 1)
    assert sp.main(["--claims", str(tmp_path / "absent.csv")]) == 2
