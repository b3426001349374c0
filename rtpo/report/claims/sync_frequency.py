"""§G.6: weight synchronisation frequency."""

from __future__ import annotations

from rtpo.report.claims.claim import Claim, PerSeed, bench_name, hardest, pp_diff, with_main_seeds
from rtpo.report.load import Results
from rtpo.report.paper_reference import PAPER
from rtpo.report.stats import KIND_STRUCTURAL, paired
from rtpo.report.tables_studies import hit_metric, left_out

BY_DESIGN_SYNCS = "the number of weight syncs per step is set by the sync schedule in the config"


def sync_frequency(res: Results) -> list[Claim]:
    """§G.6 (study sync): per-stage synchronisation (the first variant) beats every cheaper schedule on the
    hardest tier, which in turn synchronise less often."""
    sy = res.studies.get("sync")
    if sy is None:  # a config may leave the study out (the CPU default: its arms need >400 seeds to decide)
        return [Claim("G.6-acc", PAPER["sync_accuracy"], "per-stage synchronisation beats every cheaper schedule on "
                      "the hardest tier", "per_stage − a cheaper schedule: pass@1 on the hardest tier", "pp", {},
                      evidence="tableG6_sync", absent=left_out("sync"))]
    if len(sy.variants) < 2:
        return []
    ref, m = sy.variant_names()[0], sy.methods[0]
    metric = hit_metric(res, sy.task, sy.name)
    hb = hardest(res, sy.task, sy.name, ref)

    def ev(v: str) -> PerSeed:
        return with_main_seeds(res, sy, v, m, lambda sc, va: res.eval_by_seed(sy.task, m, hb, metric, sc, va))

    def syncs(v: str) -> PerSeed:
        return with_main_seeds(res, sy, v, m, lambda sc, va: res.steps_by_seed(sy.task, m, "syncs", "mean", sc, va))
    out = []
    for v in sy.variant_names()[1:]:
        out.append(Claim(f"G.6-acc-{v}", PAPER["sync_accuracy"], f"per-stage synchronisation beats {v} on the "
                         f"hardest tier", f"{ref} − {v}: {metric} on {bench_name(hb)}", "pp",
                         pp_diff(ev(ref), ev(v)) if hb else {}, evidence="tableG6_sync"))
        out.append(Claim(f"G.6-syncs-{v}", PAPER["sync_cost"], f"{v} synchronises less often than per-stage "
                         "(cheaper)", f"{ref} − {v}: weight syncs per training step", "syncs",
                         paired(syncs(ref), syncs(v)), evidence="tableG6_sync", kind=KIND_STRUCTURAL,
                         construction=BY_DESIGN_SYNCS))
    return out
