"""Numerical checks of the paper's theory on tabular turn-level MDPs (numpy only).

Where the truth is computable exactly -- finite-horizon turn-level MDPs with finite states per
turn, macro-actions, stochastic tool transitions and a sparse binary terminal reward
(`rtpo.theory.mdp`) -- each guarantee is compared with simulation:

* Theorem 1(b) (§C.2), `rtpo.theory.recursive`: reverse-order tabular updates with frozen
  downstream policies converge to the recursively optimal policy; compared with simultaneous
  updates from trajectory-level (non-stationary) targets, error to the exact Q* vs samples.
* §C.3, `rtpo.theory.credit`: the finite-group bias of the sibling advantage as RTPO implements it.
  With A_i = R_i - mean_j R_j (mean over all G siblings, self included) and siblings drawn from
  the policy,  E[A_i | a_i] = ((G-1)/G) · (Q(s, a_i) - V(s)),  i.e. bias -A(s, a_i)/G; the
  leave-one-out baseline is unbiased, and A_i = ((G-1)/G) A^loo_i exactly. The paper states the
  factor (G-2)/(G-1), which is the factor of a mean over G-1 returns; the table marks it.
  (Derivation in the `credit` module docstring.) Also the MSE of sibling vs trajectory-level
  (global-mean) advantages w.r.t. the true A(S_k, a) as the cross-state value variance σ²_V grows.
* §C.4, `rtpo.theory.drift`: Var of the trajectory-level importance weight = (1+χ²)^H - 1 under a
  fixed per-turn drift χ², vs ≡ 0 under on-policy continuation; Var of sibling Q estimates
  p(1-p)/G as the success probability p moves away from 1/2.

Entry points: ``python -m rtpo.theory --out DIR [--quick] [--seed S]`` and `cli_main(argv)`
(what ``rtpo theory`` calls). Outputs are listed in `rtpo.theory.checks`.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

__all__ = ["cli_main", "main"]


def cli_main(argv: list[str] | None = None) -> int:
    """``rtpo theory --out DIR [--quick] [--seed S]``: run every check and write the outputs.

    Returns 0 when the outputs were written (rows that do not hold are results, not errors).
    """
    parser = argparse.ArgumentParser(prog="rtpo theory", description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path, help="output directory (created if missing)")
    parser.add_argument("--quick", action="store_true", help="reduced sizes for the smoke pipeline (< ~20 s)")
    parser.add_argument("--seed", type=int, default=0, help="master seed (default 0)")
    args = parser.parse_args(argv)

    from rtpo.progress import progress as tqdm

    from rtpo.theory.checks import STAGES, TheoryConfig, run_all, write_outputs

    cfg = TheoryConfig.quick(args.seed) if args.quick else TheoryConfig(seed=args.seed)
    t0 = time.perf_counter()
    with tqdm(total=len(STAGES), desc="theory checks", unit="stage", file=sys.stderr) as bar:
        res = run_all(cfg, progress=lambda name: (bar.set_postfix_str(name), bar.update(1)))
    write_outputs(res, args.out, cfg)
    table = res.table()
    n_fail = int((~table.holds.astype(bool)).sum())
    print(f"rtpo theory: {len(table)} checks, {len(table) - n_fail} hold, {n_fail} do not "
          f"({time.perf_counter() - t0:.1f} s) -> {args.out / 'theory_checks.md'}")
    for rec in table[~table.holds.astype(bool)].itertuples():
        print(f"  does not hold: {rec.check}: closed form {rec.closed_form:.4g}, Monte Carlo {rec.monte_carlo:.4g}")
    return 0


main = cli_main
