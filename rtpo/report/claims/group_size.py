"""§G.2, Tables 10-11 and §G.9: the sibling group size G."""

from __future__ import annotations

from rtpo.experiment import Study
from rtpo.report.claims.claim import (
    Claim, FAMILY_LEVEL, PerSeed, main_twin, mean_level, paper_effect, pp_diff, with_main_seeds,
)
from rtpo.report.load import Results
from rtpo.report.paper_reference import PAPER
from rtpo.report.stats import KIND_STRUCTURAL, paired, paired_ratio

BY_DESIGN_TOKENS = "a larger G generates more siblings per trunk, hence more tokens"

BY_DESIGN_G2 = ("a row has zero advantage iff its G siblings' binary returns are all equal, and 'all G + 1 equal' implies "
                "'the first G equal', so for exchangeable siblings the zero-advantage fraction cannot rise with G "
                "(G = 2 above G = 3) except by sampling noise; the paper's reason, the (G − 2)/(G − 1) factor, is "
                "theory-08/09's")


def group_size(res: Results) -> list[Claim]:
    """§G.2, Tables 10-11 and §G.9 (study group_size): a larger sibling group G lowers the zero-advantage
    fraction and raises pass@1 at a higher training cost; G = 2 degenerates."""
    gs = res.studies.get("group_size")
    lo_hi = _group_pair(res, gs) if gs else None
    if gs is None or lo_hi is None:
        return [Claim("G.2-zero-adv", PAPER["g_zero_adv"], "a larger G lowers the zero-advantage fraction",
                      "larger − smaller G: zero_adv_frac", "pp", {}, sign=-1, evidence="table10_group_size",
                      note="fewer than two group sizes in the config")]
    lo, hi = lo_hi
    m = gs.methods[0]

    def ev(v: str, metric: str) -> PerSeed:
        return with_main_seeds(res, gs, v, m, lambda sc, va: res.eval_by_seed(gs.task, m, "overall", metric, sc, va))

    def st(v: str, col: str, red: str = "mean") -> PerSeed:
        return with_main_seeds(res, gs, v, m, lambda sc, va: res.steps_by_seed(gs.task, m, col, red, sc, va))
    pair = f"{hi} vs {lo}"
    level = PAPER["g_zero_adv_level"]
    out = [
        Claim("G.2-zero-adv", PAPER["g_zero_adv"], "a larger G lowers the zero-advantage fraction",
              f"{pair}: zero_adv_frac averaged over training steps", "pp",
              pp_diff(st(hi, "zero_adv_frac"), st(lo, "zero_adv_frac")), sign=-1, evidence="table10_group_size",
              note="its sign holds for exchangeable siblings by set inclusion (G.2-G2-degenerate's note); its size "
                   "is the question",
              **paper_effect(PAPER["g_zero_adv"], "pp", mean_level(st(lo, "zero_adv_frac"), 100), lo)),
        Claim("G.2-pass1", PAPER["g_pass1"], "a larger G raises pass@1", f"{pair}: pass@1", "pp",
              pp_diff(ev(hi, "pass@1"), ev(lo, "pass@1")), evidence="table10_group_size",
              **paper_effect(PAPER["g_pass1"], "pp", mean_level(ev(lo, "pass@1"), 100), lo)),
        Claim("G.2-inference-tokens", PAPER["g_inference_tokens"], "a larger G cuts inference tokens per success",
              f"{pair}: tokens per success at evaluation", "tokens",
              paired(ev(hi, "tokens_per_success"), ev(lo, "tokens_per_success")), sign=-1,
              evidence="table10_group_size",
              **paper_effect(PAPER["g_inference_tokens"], "tokens", mean_level(ev(lo, "tokens_per_success")), lo)),
        Claim("G.2-wallclock", PAPER["g_wallclock"], "a larger G costs more wall-clock",
              f"{pair}: percent change of training wall-clock", "%",
              paired_ratio(st(hi, "time_total", "sum"), st(lo, "time_total", "sum")),
              evidence="timing_table11_group_size_cost", timing=True),
        Claim("G.2-train-tokens", PAPER["g_train_tokens"], "a larger G costs more training-generation tokens",
              f"{pair}: percent change of training-generation tokens", "%",
              paired_ratio(st(hi, "tokens_total", "sum"), st(lo, "tokens_total", "sum")),
              evidence="table11_group_size_cost", kind=KIND_STRUCTURAL, construction=BY_DESIGN_TOKENS),
        Claim("G.9-zero-adv-level", level, "most samples still have zero advantage at the largest G",
              f"{hi}: zero_adv_frac averaged over steps − {level.value:g} %", "pp",
              {s: 100 * v - level.value for s, v in st(hi, "zero_adv_frac").items()}, evidence="table10_group_size",
              family=FAMILY_LEVEL, note="a limitation of sparse binary reward the paper states, not a property of RTPO"
                   + (f"; {hi} is the main grid's configuration: every main seed counts"
                      if main_twin(res, gs, hi, m) else "")),
    ]
    g2, g3 = gs.variant_of(2), gs.variant_of(3)
    if g2 and g3:
        out.append(Claim("G.2-G2-degenerate", PAPER["g2_degenerate"], "G = 2 degenerates (little relative signal)",
                         f"{g2} − {g3}: zero_adv_frac averaged over steps", "pp",
                         pp_diff(st(g2, "zero_adv_frac"), st(g3, "zero_adv_frac")), evidence="table10_group_size",
                         kind=KIND_STRUCTURAL, construction=BY_DESIGN_G2))
    return out


def _group_pair(res: Results, st: Study) -> tuple[str, str] | None:
    """(smaller, larger) G variants to compare: the config's default G and the next larger one if both are
    run (the paper's 3 vs 4), otherwise the two largest."""
    vs = sorted(st.variants, key=lambda v: float(v.value))
    if len(vs) < 2:
        return None
    ref = st.variant_of(res.main_setting(st.methods[0], st.task, "group_size"))
    names = [v.name for v in vs]
    if ref is not None and names.index(ref) + 1 < len(names):
        i = names.index(ref)
        return names[i], names[i + 1]
    return names[-2], names[-1]
