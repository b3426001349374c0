"""§4.4, Table 3 and §F.3: policy drift (on- against off-policy continuation)."""

from __future__ import annotations

from rtpo.report.claims.claim import (
    Claim, PerSeed, bench_name, easiest, hardest, paper_effect, pp_diff, scaled, with_main_seeds,
)
from rtpo.report.load import Results, benchmark_label
from rtpo.report.paper_reference import PAPER
from rtpo.report.stats import paired
from rtpo.report.tables_studies import hit_metric, left_out


def policy_drift(res: Results) -> list[Claim]:
    """§4.4, Table 3 (§F.3): on-policy continuation beats off-policy continuation (study continuation),
    most on the longest horizons."""
    co = res.studies.get("continuation")
    if co is None or len(co.variants) < 2:  # every row of the study, each saying why it did not run
        why = (left_out("continuation") if co is None
               else "the continuation study has one variant: nothing to compare")
        return [Claim(cid, PAPER[ref], claim, quantity, "pp", {}, evidence="table03_continuation", absent=why)
                for cid, ref, claim, quantity in (
                    ("4.4-average", "on_policy_gain", "on-policy continuation beats off-policy continuation",
                     "on − off output-hit averaged over the benchmarks"),
                    ("4.4-hardest", "on_policy_longest", "on-policy continuation helps most on the longest horizons",
                     "on − off output-hit on the hardest benchmark"),
                    ("4.4-horizon-trend", "on_policy_trend", "the on-policy gain grows with the horizon",
                     "gain on the hardest − gain on the easiest benchmark"))]
    on, off = co.variant_names()[0], co.variant_names()[1]
    metric, m = hit_metric(res, co.task, co.name), co.methods[0]

    def on_minus_off(b: str | None) -> PerSeed:
        """{seed: on − off} of `metric` on benchmark b ("average": the macro average over the benchmarks)."""
        if b is None:
            return {}

        def arm(v: str) -> PerSeed:
            if b == "average":
                return with_main_seeds(res, co, v, m, lambda sc, va: res.eval_macro_by_seed([co.task], m, metric, sc, va))
            return with_main_seeds(res, co, v, m, lambda sc, va: res.eval_by_seed(co.task, m, b, metric, sc, va))
        return paired(arm(on), arm(off))
    hb, eb = hardest(res, co.task, co.name, on), easiest(res, co.task, co.name, on)
    out = [
        Claim("4.4-average", PAPER["on_policy_gain"], "on-policy continuation beats off-policy continuation",
              f"{on} − {off}: {metric} averaged over the {co.task} benchmarks", "pp",
              scaled(on_minus_off("average"), 100), evidence="table03_continuation",
              **paper_effect(PAPER["on_policy_gain"], "pp")),
        Claim("4.4-hardest", PAPER["on_policy_longest"], "on-policy continuation helps most on the longest horizons",
              f"{on} − {off}: {metric} on {bench_name(hb)}", "pp", scaled(on_minus_off(hb), 100),
              evidence="table03_continuation", **paper_effect(PAPER["on_policy_longest"], "pp")),
    ]
    if hb and eb:
        out.append(Claim(
            "4.4-horizon-trend", PAPER["on_policy_trend"], "the on-policy gain grows with the horizon",
            f"gain on {benchmark_label(hb)} − gain on {benchmark_label(eb)} ({metric})", "pp",
            pp_diff(on_minus_off(hb), on_minus_off(eb)), evidence="table03_continuation",
            **paper_effect(PAPER["on_policy_trend"], "pp")))
    return out
