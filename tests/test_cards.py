"""The methods' cards (rtpo.methods.cards): one place for what code may know about a method
without importing it, agreeing with the classes and with the config schema's sync grammar."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rtpo.methods.cards import CARDS, TURN_ROW_METHODS, card, needs_keep_weights, parse_sync


def test_every_card_loads_its_class_and_agrees_on_rows():
    from rtpo.methods.registry import METHODS, get_method

    assert set(METHODS) == set(CARDS)
    for name, c in CARDS.items():
        cls = c.load()
        assert get_method(name) is cls and cls.rows == c.rows, name
    assert TURN_ROW_METHODS == ("rtpo", "rtpo_ca")
    with pytest.raises(ValueError, match="valid methods: vanilla, rtpo"):
        card("ppo")


def test_verl_trainer_modes_come_from_the_cards():
    from rtpo.verl_ext.launch import VERL_METHODS, trainer_mode

    assert VERL_METHODS == {"vanilla": None, "rtpo": "rtpo_engine_sync", "rtpo_ca": "rtpo_engine_sync",
                            "grpo": "rtpo_chain_sync", "tree_grpo": "rtpo_engine_sync", "arpo": "rtpo_engine_sync",
                            "seeupo": "rtpo_engine_sync"}
    with pytest.raises(ValueError, match="not available on the verl engine"):
        trainer_mode("grpo_tis", {})


@pytest.mark.parametrize("mode,parsed", [("per_stage", ("per_stage", None)), ("interval:2", ("interval", "2")),
                                         ("kl:0.01", ("kl", "0.01")), ("kl:1e-3", ("kl", "1e-3"))])
def test_sync_modes_parse(mode, parsed):
    assert parse_sync(mode) == parsed


@pytest.mark.parametrize("mode", ["interval:0", "interval:x", "kl:-1", "kl:nan", "kl:inf", "every", "", None])
def test_sync_modes_outside_the_schemas_grammar_are_refused(mode):
    """One grammar: what the config schema refuses, the method refuses too (it used to accept kl:-1, kl:nan)."""
    with pytest.raises(ValueError, match="unknown rtpo.sync mode"):
        parse_sync(mode)


def test_stale_weights_only_for_sync_methods_off_per_stage():
    assert needs_keep_weights("rtpo", {"sync": "interval:2"}) and needs_keep_weights("rtpo_ca", {"sync": "kl:0.1"})
    assert not needs_keep_weights("rtpo", {}) and not needs_keep_weights("grpo", {"sync": "interval:2"})


def test_cards_import_no_torch():
    """The start-up check reads the cards in `snakemake -n`: no torch import."""
    code = "import sys, rtpo.methods.cards as c; c.parse_sync('kl:0.1'); assert 'torch' not in sys.modules, 'torch'"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_code_defaults_are_the_cpu_defaults():
    """RTPO's options where a config leaves them out are config/config.yaml's (before: trunks 2, G 3 in the
    method and the budget estimate, trunks 1, G 4 in the sweep's budget: three answers, none the config's)."""
    import yaml

    from rtpo.methods.rtpo import RTPO
    from tests.conftest import ROOT

    cpu = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["method"]
    for name in ("rtpo", "rtpo_ca"):
        d = dict(card(name).defaults)
        assert d and {k: cpu[name].get(k, cpu["rtpo"].get(k)) for k in d} == d, name
    # the method itself: an RTPO built from an empty section runs with these options
    from tests.test_rtpo import make

    e, roller, configured = make()
    m = RTPO(e, roller, {}, configured.update_cfg)
    assert (m.trunks, m.G, m.sync_mode, m.off_policy) == (cpu["rtpo"]["trunks"], cpu["rtpo"]["group_size"],
                                                         "per_stage", False)
    o = card("rtpo").options({"group_size": 6})
    assert (o["trunks"], o["group_size"], o["sync"]) == (cpu["rtpo"]["trunks"], 6, "per_stage")


@pytest.mark.parametrize("method,options,expected", [
    ("grpo", {}, (16 * 600, "16 chains x 600 tokens")),
    ("grpo", {"chains": 8}, (8 * 600, "8 chains x 600 tokens")),
    ("seeupo", {}, (16 * 600, "16 chains x 600 tokens")),
    ("arpo", {}, (16 * 600, "16 trajectories x 600 tokens")),
    ("tree_grpo", {}, (4 * 4 * 600, "4 trees x (1 + 1 x 3) leaves x 600 tokens")),
    ("rtpo", {"trunks": 2, "group_size": 3}, (2 * (3 + 2 * 6 + 3) * 200, "2 trunks x 18 turns of 200")),
])
def test_the_step_time_estimate_counts_rollouts_from_the_card(method, options, expected):
    """What the budget's former name switch gave (its literal defaults were the classes'): each card's count
    of the options and K (K = 3 turns of 200 tokens, a flat row's budget 600)."""
    from rtpo.verl_ext.budget import rollout_tokens

    assert rollout_tokens(method, options, {"max_turns": 3, "max_new_tokens": 200}, 10_000, 0) == expected


def test_a_new_baseline_is_its_class_and_its_card(monkeypatch):
    """A card with defaults and a rollout count is all the budget estimate and the sweep need of a method
    (before, a new baseline made `rtpo check-config` raise "no rollout count")."""
    from rtpo.methods import cards
    from rtpo.verl_ext.budget import rollout_tokens

    new = cards.MethodCard("new_baseline", "rtpo.methods.grpo:GRPO", "flat", None, defaults=(("chains", 5),),
                           rollouts=lambda o, K: (int(o["chains"]), "episodes", f"{o['chains']} chains"),
                           budget_key="chains")
    monkeypatch.setitem(cards.CARDS, "new_baseline", new)
    assert rollout_tokens("new_baseline", {}, {"max_turns": 2, "max_new_tokens": 10}, 100, 0) == (100, "5 chains x 20 tokens")
    import inspect

    from rtpo.verl_ext import budget
    assert '"grpo"' not in inspect.getsource(budget.rollout_tokens)   # no method names in the estimate


def test_every_method_reads_its_defaults_from_its_card():
    """The classes keep no defaults of their own: a method built from an empty section has exactly its
    card's options (rtpo.methods.base.Method overlays the section on the card)."""
    from rtpo.methods.base import Method

    for name, c in CARDS.items():
        cls = c.load()
        m = Method.__new__(cls)
        Method.__init__(m, None, None, {}, None)
        assert m.cfg == dict(c.defaults), name
        if c.trains:
            assert c.rollouts is not None and c.defaults, name
