"""This artifact's controls, not claims of the paper (docs/design-controls.md): Control A (matched
optimizer steps), Control B (psi = full) and GRPO trained on its own contexts (turn rows)."""

from __future__ import annotations

from rtpo.experiment import MAIN
from rtpo.report.claims.claim import AIRLINE, CONTROL_NOTE, Claim, PerSeed, headline, mean_level, paper_effect, pp_diff
from rtpo.report.load import Results
from rtpo.report.paper_reference import PAPER
from rtpo.report.stats import KIND_CONTROL, KIND_STRUCTURAL, paired
from rtpo.report.table_base import method_label

MORE_UPDATES = ("if this row is 'no effect of the paper's size' while RTPO − GRPO was ahead, RTPO's lead there is "
                "explained by its extra optimizer steps")
EXTRA_STEPS_HELP = ("'no effect' here means the extra optimizer steps do not help GRPO, so they cannot explain a lead "
                    "of RTPO's; a gain here makes the RTPO − GRPO-K row the test of that lead")
BY_DESIGN_FULL = ("under psi = full GRPO samples and trains on the same context ids with the same fp32 kernels, so its "
                  "KL(rollout‖train) is ~0 (float rounding), and k3 >= 0 per token, so this difference cannot be "
                  "negative: the manipulation check that the mismatch arm removes the mismatch")


def not_run(cid: str, ref, claim: str, quantity: str, why: str, evidence: str = "table_controls") -> Claim:
    """The one row a control gives when its study is not in the run (verdict "not run", saying why)."""
    return Claim(cid, ref, claim, quantity, "pp", {}, kind=KIND_CONTROL, evidence=evidence, absent=why)


def matched_updates(res: Results) -> list[Claim]:
    """Control A (study matched_updates, docs/design-controls.md 1): per task, GRPO with as many optimizer steps
    per training step as RTPO takes (GRPO-K). Does RTPO's lead survive it (RTPO − GRPO-K, against the effect its
    4.1 / G.1 row tests), and does GRPO gain from the extra steps at all (GRPO-K − GRPO)?"""
    mu = res.studies.get("matched_updates")
    ref = PAPER["control_matched_updates"]
    if mu is None:
        return [not_run("C.A-rtpo-grpo_k", ref, "RTPO's lead over GRPO survives matched optimizer steps",
                        "RTPO − GRPO-K: pass@1", "study matched_updates absent from the config")]
    out = []
    for variant, task, m in mu.cells:
        label = f"{method_label(m)}-K"

        def arm(method: str, scope: str = MAIN, v: str = "") -> PerSeed:
            # G.1's quantity on airline (every sample), 4.1's elsewhere (the mean over the task's benchmarks)
            if task == AIRLINE:
                return res.eval_by_seed(task, method, "overall", "pass@1", scope, v)
            return res.eval_macro_by_seed([task], method, "pass@1", scope, v)
        rtpo, base, k_arm = arm("rtpo"), arm(m), arm(m, mu.name, variant)
        effect = ({} if task == AIRLINE   # G.1-pass1: the paper gives no airline gap, the minimal 1 pp
                  else paper_effect(PAPER[f"gain_vs_{m}"], "pp", mean_level(base, 100), method_label(m))
                  if f"gain_vs_{m}" in PAPER else {})
        k = next((v.value for v in mu.variants if v.name == variant), "K")
        out.append(Claim(
            f"C.A-rtpo-{m}_k-{task}", ref, f"RTPO's lead over {method_label(m)} survives matched optimizer steps "
            f"({task})", f"RTPO − {label} ({variant}: {k} optimizer steps per training step): {task} pass@1", "pp",
            pp_diff(rtpo, k_arm), kind=KIND_CONTROL, evidence="table_controls",
            note=f"{CONTROL_NOTE}; tested against the effect {'G.1-pass1' if task == AIRLINE else '4.1'}-{m} uses; "
                 f"{label} and RTPO paired by seed; {MORE_UPDATES}", **effect))
        out.append(Claim(
            f"C.A-{m}_k-{m}-{task}", ref, f"{label} gains on {method_label(m)} from the extra optimizer steps ({task})",
            f"{label} − {method_label(m)}: {task} pass@1", "pp", pp_diff(k_arm, base), kind=KIND_CONTROL,
            evidence="table_controls", note=f"{CONTROL_NOTE}; {EXTRA_STEPS_HELP}"))
    return out


def mismatch_control(res: Results, evidence: str = "table_controls") -> list[Claim]:
    """Control B (study mismatch, docs/design-controls.md 2): RTPO and GRPO under psi = full on the study's task.
    The paper's mechanism says RTPO gains most where psi is lossy: (RTPO − GRPO)[qwen3] − (RTPO − GRPO)[full] > 0;
    removing the mismatch should help GRPO; GRPO[full]'s KL is the manipulation check. `evidence`: the table that
    shows the rows (the sweep's report passes sweep_claims when the study runs with its target)."""
    mm = res.studies.get("mismatch")
    ref = PAPER["control_mismatch"]
    if mm is None or not {"rtpo", "grpo"} <= set(mm.methods):
        in_sweep = str(((res.cfg.get("ablations") or {}).get("mismatch") or {}).get("target", "all")) == "sweep"
        why = ("it runs with the mechanism sweep's target (`bash scripts/pipeline.sh sweep`), whose ledger "
               "sweep_claims holds its rows" if in_sweep else "study mismatch (with rtpo and grpo) absent from the config")
        return [not_run("C.B-interaction", ref, "RTPO's gain over GRPO is larger under the lossy psi than under psi = full",
                        "(RTPO − GRPO)[main psi] − (RTPO − GRPO)[full]", why,
                        "sweep_claims" if in_sweep else "table_controls")]
    t, v = mm.task, mm.variants[0].name
    psi = str(((res.cfg.get("env") or {}).get(t) or {}).get("psi", "full"))

    def ev(method: str, scope: str = MAIN, variant: str = "") -> PerSeed:
        return res.eval_macro_by_seed([t], method, "pass@1", scope, variant)
    gap_main, gap_full = paired(ev("rtpo"), ev("grpo")), paired(ev("rtpo", mm.name, v), ev("grpo", mm.name, v))
    kl = lambda scope, variant: res.steps_by_seed(t, "grpo", "kl_rollout_train", "mean", scope, variant)  # noqa: E731
    return [
        Claim("C.B-interaction", ref, f"RTPO's gain over GRPO is larger under psi = {psi} than under psi = full ({t})",
              f"(RTPO − GRPO)[{psi}] − (RTPO − GRPO)[full]: pass@1 averaged over the {t} benchmarks", "pp",
              pp_diff(gap_main, gap_full), kind=KIND_CONTROL, evidence=evidence,
              note=f"{CONTROL_NOTE}; the paper's mechanism (RTPO gains most where psi makes the flat methods' training "
                   f"context differ from their rollout's); the {psi} arms are the main grid's, paired by seed"),
        Claim("C.B-grpo-full", ref, f"removing the rollout–training mismatch helps GRPO ({t})",
              f"GRPO[full] − GRPO[{psi}]: pass@1 averaged over the {t} benchmarks", "pp",
              pp_diff(ev("grpo", mm.name, v), ev("grpo")), kind=KIND_CONTROL, evidence=evidence,
              note=CONTROL_NOTE),
        Claim("C.B-grpo-kl", ref, f"psi = full removes GRPO's rollout–training mismatch ({t})",
              f"GRPO[{psi}] − GRPO[full]: KL(rollout‖train) averaged over training steps", "nats/token",
              paired(kl(MAIN, ""), kl(mm.name, v)), kind=KIND_STRUCTURAL, evidence=evidence,
              construction=BY_DESIGN_FULL, note=f"{CONTROL_NOTE}: its manipulation check"),
    ]

OWN_CONTEXT = ("GRPO trained per turn on the contexts it sampled (train_rows: turn): no rollout–training mismatch, "
               "GRPO's rollouts, information and trajectory-level advantages")


def turn_rows_control(res: Results) -> list[Claim]:
    """The mismatch-isolating control (study turn_rows, docs/design-controls.md): GRPO trained per turn on the
    contexts it sampled, c_k = psi(S_k) (GRPO-turn), paired by seed with the main GRPO runs. It removes the
    rollout–training mismatch and nothing else: does the mismatch cost GRPO the paper's gap, and does RTPO's
    standing against GRPO survive its removal? Both on 4.1's quantity (pass@1 averaged over the study's
    benchmarks) against 4.1-grpo's effect."""
    tr = res.studies.get("turn_rows")
    ref = PAPER["control_turn_rows"]
    if tr is None:
        return [not_run("C.M-grpo_turn-grpo", ref, "removing the rollout–training mismatch helps GRPO",
                        "GRPO-turn − GRPO: pass@1", "study turn_rows absent from the config")]
    tasks = [t for t in headline(res) if t in tr.tasks] or list(tr.tasks)
    v = tr.variants[0].name
    both = "+".join(tasks)
    grpo = res.eval_macro_by_seed(tasks, "grpo", "pass@1")
    turn = res.eval_macro_by_seed(tasks, "grpo", "pass@1", tr.name, v)
    rtpo = res.eval_macro_by_seed(tasks, "rtpo", "pass@1")
    effect = paper_effect(PAPER["gain_vs_grpo"], "pp", mean_level(grpo, 100), method_label("grpo"))
    out = [
        Claim("C.M-grpo_turn-grpo", ref, "removing the rollout–training mismatch helps GRPO by the paper's gap",
              f"GRPO-turn − GRPO: pass@1 averaged over the {both} benchmarks", "pp", pp_diff(turn, grpo),
              kind=KIND_CONTROL, evidence="table_controls",
              note=f"{CONTROL_NOTE}; {OWN_CONTEXT}; tested against 4.1-grpo's effect: if the mismatch were what "
                   "separates GRPO from RTPO, removing it would gain about that much", **effect),
        Claim("C.M-rtpo-grpo_turn", ref, "RTPO beats GRPO without GRPO's rollout–training mismatch",
              f"RTPO − GRPO-turn: pass@1 averaged over the {both} benchmarks", "pp", pp_diff(rtpo, turn),
              kind=KIND_CONTROL, evidence="table_controls",
              note=f"{CONTROL_NOTE}; 4.1-grpo with the mismatch removed from GRPO: what is left of RTPO's standing "
                   "comes from its credit assignment and continuations", **effect),
    ]
    for t in tr.tasks:
        kl = lambda scope, variant: res.steps_by_seed(t, "grpo", "kl_rollout_train", "mean", scope, variant)  # noqa: E731
        out.append(Claim(
            f"C.M-grpo-kl-{t}", ref, f"GRPO-turn has no rollout–training mismatch ({t})",
            "GRPO − GRPO-turn: KL(rollout‖train) averaged over training steps", "nats/token",
            paired(kl(MAIN, ""), kl(tr.name, v)), kind=KIND_STRUCTURAL, evidence="table_controls",
            construction=BY_DESIGN_OWN_CONTEXT, note=f"{CONTROL_NOTE}: its manipulation check"))
    return out

BY_DESIGN_OWN_CONTEXT = ("GRPO-turn scores each action under the exact ids it was sampled from with the same fp32 "
                         "kernels, so its KL(rollout‖train) is ~0 (float rounding) and k3 >= 0 per token: this "
                         "difference cannot be negative")
