#!/usr/bin/env python
"""Seeds each empirical ledger row needs, from a ledger's per-seed values (the power analysis behind the
per-cell seed counts of docs/design-controls.md).

    python scripts/seed_power.py --claims rescored.csv      # e.g. scripts/rescore_ledger.py's --out

For every empirical row with at least 2 seeds and a spread: the seed sd of its per-seed effect, the effect d
it is tested against (its `expected`), and
  n_decide   the seeds at which the 95 % t-interval's half-width falls below d / 2: an interval narrower
             than d cannot hold both 0 and d, so the row is decided whatever its mean (before the
             Benjamini-Hochberg adjustment, which asks for somewhat more);
  n_mean     the seeds that would decide it at its observed mean and sd (the interval excludes 0, or d);
  n_power80  the seeds a two-sided one-sample t-test needs for 80 % power against an effect of d
             (statsmodels TTestPower): enough to show the paper's effect if it is there.
The sd comes from 3-4 seeds: its 95 % range is about x0.5 to x3-6, so every n is an order of magnitude.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats
from statsmodels.stats.power import TTestPower

CAP = 1000


def half_width(sd: float, n: int) -> float:
    return float(stats.t.ppf(0.975, n - 1)) * sd / math.sqrt(n)


def seeds_for(sd: float, target: float) -> int:
    """The smallest n >= 2 with a 95 % half-width below `target` (CAP + 1 if none up to CAP)."""
    if not target > 0:
        return CAP + 1
    for n in range(2, CAP + 1):
        if half_width(sd, n) < target:
            return n
    return CAP + 1


def effect_of(expected: str) -> tuple[int, float]:
    m = re.search(r"paper's effect ([+−-])([\d.]+)", str(expected))
    sign = -1 if str(expected).startswith("< 0") else 1
    return sign, float(m.group(2)) if m else math.nan


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--claims", type=Path, required=True)
    a = ap.parse_args(argv)
    if not a.claims.is_file():
        print(f"{a.claims}: no such ledger", file=sys.stderr)
        return 2
    df = pd.read_csv(a.claims, keep_default_na=False, na_values=[""])
    rows = []
    for _, r in df[df.kind == "empirical"].iterrows():
        vals = [float(x) for x in str(r["values"]).split(";") if x not in ("", "nan")]
        sign, d = effect_of(r["expected"])
        if len(vals) < 2 or math.isnan(d):
            continue
        sd = float(np.std(vals, ddof=1))
        if sd <= 1e-9 * max(1.0, abs(np.mean(vals))):
            rows.append((r.claim_id, len(vals), sd, d, "zero width", "", "", r.verdict))
            continue
        m = sign * float(np.mean(vals))                       # the mean on the paper's side
        n_dec = seeds_for(sd, d / 2)
        n_mean = seeds_for(sd, max(abs(m), d - m))
        power = TTestPower()
        n_pow = next((n for n in range(2, CAP + 1)
                      if power.power(effect_size=d / sd, nobs=n, alpha=0.05, alternative="two-sided") >= 0.8), CAP + 1)
        fmt = lambda n: f">{CAP}" if n > CAP else str(int(n))
        rows.append((r.claim_id, len(vals), sd, d, fmt(n_dec), fmt(n_mean), fmt(n_pow), r.verdict))
    out = pd.DataFrame(rows, columns=["id", "n", "sd", "d", "n_decide", "n_mean", "n_power80", "verdict"])
    with pd.option_context("display.width", 200, "display.max_rows", 200, "display.max_colwidth", 40):
        print(out.to_string(index=False, float_format=lambda x: f"{x:.3g}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
