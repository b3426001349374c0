"""The two controls of the CPU default (docs/design-controls.md 1-2): GRPO with RTPO's optimizer steps
(study matched_updates) and RTPO / GRPO under psi = full on search (study mismatch): their runs, and every
other run unchanged by them."""

from __future__ import annotations

import copy

import pytest

from rtpo.config import ConfigError, load_config, validate_config
from rtpo.experiment import MAIN, Experiment, RunKey


def runs_view(exp: Experiment) -> dict:
    return {r.key: (r.sets, r.seed_group, r.copy_of, r.stamp, r.run_dir(), r.eval_file()) for r in exp.runs}


@pytest.mark.parametrize("name", ["config", "smoke"])
def test_controls_leave_every_other_run_as_it_was(name):
    cfg = load_config(f"config/{name}.yaml")
    without = copy.deepcopy(cfg)
    for study in ("matched_updates", "mismatch"):
        del without["ablations"][study]
    new, old = runs_view(Experiment(cfg)), runs_view(Experiment(without))
    assert {k: new[k] for k in old} == old
    assert {k.scope for k in set(new) - set(old)} == {"matched_updates", "mismatch"}


def test_the_controls_runs_in_the_cpu_default():
    cfg = load_config("config/config.yaml")
    exp = Experiment(cfg)
    seeds = cfg["ablations"]["seeds"]
    mu = {r.key: r for r in exp.select("matched_updates")}
    assert set(mu) == {RunKey("matched_updates", f"mb-{k}", t, "grpo", s)
                       for t, k in (("math", 3), ("airline", 4)) for s in seeds}
    for r in mu.values():
        k = int(r.variant[3:])
        assert r.sets == (f"method.grpo.mini_batches={k}",) and r.copy_of is None and r.trains
        st = r.settings
        assert st["train"]["mini_batches"] == k
        main = exp.run(RunKey(MAIN, "", r.task, "grpo", r.seed)).settings   # otherwise GRPO's main run
        assert "mini_batches" not in main["train"]
        st["train"].pop("mini_batches")
        assert st == main and r.run_dir() == f"results/ablations/matched_updates/mb-{k}/{r.task}/grpo/seed{r.seed}"
    mm = {r.key: r for r in exp.select("mismatch")}
    assert set(mm) == {RunKey("mismatch", "psi-full", "search", m, s) for m in ("rtpo", "grpo") for s in seeds}
    for r in mm.values():
        assert r.sets == (f"method.{r.method}.psi=full",) and r.copy_of is None and r.settings["psi"] == "full"
        assert exp.run(RunKey(MAIN, "", "search", r.method, r.seed)).settings["psi"] == "qwen3"
    st = exp.studies
    assert st["matched_updates"].tasks == ("math", "airline") and st["matched_updates"].methods == ("grpo",)
    assert st["matched_updates"].cells == (("mb-3", "math", "grpo"), ("mb-4", "airline", "grpo"))
    assert st["mismatch"].task == "search" and st["mismatch"].methods == ("rtpo", "grpo")
    assert st["credit_assignment"].tasks == ("math",)


def test_control_config_errors_name_the_key():
    cfg = load_config("config/config.yaml")
    bad = copy.deepcopy(cfg)
    bad["ablations"]["matched_updates"]["mini_batches"]["chess"] = 2
    with pytest.raises(ConfigError, match="ablations.*matched_updates.*mini_batches"):
        validate_config(bad)
    bad = copy.deepcopy(cfg)
    bad["ablations"]["matched_updates"]["mini_batches"]["math"] = 0
    with pytest.raises(ConfigError, match="matched_updates"):
        validate_config(bad)
