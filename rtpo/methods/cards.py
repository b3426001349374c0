"""One card per method: what the rest of the code may know about a method without importing it.

The start-up check (`rtpo check-config`, also run by `snakemake -n`), the verl launcher and the budget
estimates read these cards without torch; `rtpo.methods.registry` imports the classes they name. A new
method is one class file plus one card here.

  rows       "turn": rows (c_k, turn k), so the rollout bounds the context c_k + one response
             (rtpo.rollout.Roller; RTPO); "flat": flattened or full-history rows, so it bounds the
             training row the method will build (every baseline). The class's own `rows` must agree
             (tests/test_startup_check.py).
  verl_mode  the verl V1 trainer mode at paper scale (rtpo.verl_ext.launch): "rtpo_engine_sync" runs
             the local method's `step` on VerlEngine; "rtpo_chain_sync" is verl's own sync trainer with
             verl's GRPO estimator (GRPO never runs rtpo/methods/grpo.py on verl); None: not on verl.
  sync       takes RTPO's weight-sync modes (paper G.6): per_stage | interval:N | kl:tau, the grammar
             of the config schema's $defs.sync (parse_sync reads it from there: one grammar).
  trains     False for vanilla: the base model evaluated as is (no verl run: launch.write_untrained).
  defaults   the method's options where a config leaves them out (the method's class reads its options
             through `options`, so these are its only defaults): RTPO's are the CPU default's values
             (config/config.yaml), the baselines' their public code's (DESIGN.md). Every shipped config
             sets them; these matter for configs written by hand and for tests.
  rollouts   what one prompt generates, for the step-time estimate (rtpo.verl_ext.budget) as a function
             of the options and the turns K: (n, unit, how), `unit` "turns" (n turns, each up to the
             response cap) or "episodes" (n whole episodes of K turns).
  budget_key the option that sets a flat method's trajectories per prompt: the mechanism sweep gives it
             RTPO's budget at each horizon (rtpo.experiment.sweep_cells); None: not matched.
"""

from __future__ import annotations

import functools
import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class MethodCard:
    name: str
    cls: str                 # "module:Class", imported by `load` only
    rows: str                # "turn" | "flat"
    verl_mode: str | None    # the verl V1 trainer mode, or None
    sync: bool = False
    trains: bool = True
    note: str = ""
    defaults: tuple[tuple[str, object], ...] = ()   # (option, value) pairs; `options` as a dict
    rollouts: Callable[[dict, int], tuple[int, str, str]] | None = None   # (options, K) -> (n, unit, how)
    budget_key: str | None = None

    def options(self, cfg: dict | None = None) -> dict:
        """The method's options: these defaults overlaid by `cfg` (a method.<name> section)."""
        return {**dict(self.defaults), **(cfg or {})}

    def trajectories(self, o: dict, turns: int) -> int:
        """Complete trajectories per prompt in E.3's count with `turns` turns per trajectory (RTPO:
        T (1 + (G - 1) L)); the flat methods' episodes."""
        if self.rows == "turn":
            return int(o["trunks"]) * (1 + (int(o["group_size"]) - 1) * turns)
        return self.rollouts(o, turns)[0]

    def load(self) -> type:
        module, _, cls = self.cls.partition(":")
        return getattr(importlib.import_module(module), cls)


# RTPO's options in config/config.yaml (method.rtpo): one trunk, G = 4 (math: 5, a per-task override)
RTPO_DEFAULTS = (("trunks", 1), ("group_size", 4), ("sync", "per_stage"), ("continuation", "on_policy"),
                 ("is_clamp", 2.0), ("adv_norm_std", False), ("leave_one_out", False))



def _rtpo_rollouts(o: dict, K: int) -> tuple[int, str, str]:
    """Per trunk: its K turns, then at each boundary S_k (k = K-1 .. 0) G-1 siblings of K - k turns each and
    the trunk's regenerated continuation of K - k - 1 turns."""
    trunks, G = int(o["trunks"]), int(o["group_size"])
    turns = K + (G - 1) * K * (K + 1) // 2 + K * (K - 1) // 2
    return trunks * turns, "turns", f"{trunks} trunks x {turns} turns"


def _chains(o: dict, K: int) -> tuple[int, str, str]:
    return int(o["chains"]), "episodes", f"{int(o['chains'])} chains"


def _arpo_rollouts(o: dict, K: int) -> tuple[int, str, str]:
    return int(o["total"]), "episodes", f"{int(o['total'])} trajectories"


def _tree_rollouts(o: dict, K: int) -> tuple[int, str, str]:
    """Branches counted as whole episodes (they share a prefix, so this over-counts)."""
    trees, x, rounds = int(o["trees"]), int(o["expansions"]), int(o["rounds"])
    return trees * (1 + rounds * x), "episodes", f"{trees} trees x (1 + {rounds} x {x}) leaves"


def _vanilla_rollouts(o: dict, K: int) -> tuple[int, str, str]:
    return 0, "episodes", "nothing (not trained)"


# the baselines' options as their public code sets them (DESIGN.md, "Baselines as their public code does them")
GRPO_DEFAULTS = (("chains", 16), ("adv_norm_std", True), ("train_rows", "flat"))
SEEUPO_DEFAULTS = (("chains", 16), ("adv_clamp", 3.0), ("ratio_clip", (0.8, 1.2)), ("update_order", "reverse"))
ARPO_DEFAULTS = (("initial", 8), ("total", 16), ("tau", 0.5), ("beta", 0.2), ("beam_size", 2), ("entropy_tokens", 20),
                 ("entropy_agg", "sum"), ("shared_prefix", "every_row"), ("seed", 0))
TREE_GRPO_DEFAULTS = (("trees", 4), ("expansions", 3), ("rounds", 1), ("shared_prefix", "every_leaf"), ("seed", 0))

CARDS: dict[str, MethodCard] = {c.name: c for c in (
    MethodCard("vanilla", "rtpo.methods.base:Vanilla", "flat", None, trains=False,
               note="the base model, not trained", rollouts=_vanilla_rollouts),
    MethodCard("rtpo", "rtpo.methods.rtpo:RTPO", "turn", "rtpo_engine_sync", sync=True, defaults=RTPO_DEFAULTS,
               rollouts=_rtpo_rollouts),
    MethodCard("rtpo_ca", "rtpo.methods.rtpo:RTPO", "turn", "rtpo_engine_sync", sync=True, defaults=RTPO_DEFAULTS,
               note="RTPO under a context-aligned rollout: the config sets its psi to full", rollouts=_rtpo_rollouts),
    MethodCard("grpo", "rtpo.methods.grpo:GRPO", "flat", "rtpo_chain_sync", defaults=GRPO_DEFAULTS,
               note="on verl: verl's own trainer and GRPO estimator", rollouts=_chains, budget_key="chains"),
    MethodCard("grpo_tis", "rtpo.methods.grpo:GRPOTIS", "flat", None, defaults=GRPO_DEFAULTS,
               note="GRPO with verl's token-level truncated IS; local engine only", rollouts=_chains,
               budget_key="chains"),
    MethodCard("tree_grpo", "rtpo.methods.tree_grpo:TreeGRPO", "flat", "rtpo_engine_sync", defaults=TREE_GRPO_DEFAULTS,
               rollouts=_tree_rollouts),
    MethodCard("arpo", "rtpo.methods.arpo:ARPO", "flat", "rtpo_engine_sync", defaults=ARPO_DEFAULTS,
               rollouts=_arpo_rollouts),
    MethodCard("seeupo", "rtpo.methods.seeupo:SeeUPO", "flat", "rtpo_engine_sync", defaults=SEEUPO_DEFAULTS,
               rollouts=_chains, budget_key="chains"),
)}


def card(name: str) -> MethodCard:
    """The card of method `name`; ValueError listing the valid names otherwise."""
    try:
        return CARDS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown method {name!r}; valid methods: {', '.join(CARDS)}") from None


TURN_ROW_METHODS = tuple(n for n, c in CARDS.items() if c.rows == "turn")


@functools.lru_cache(maxsize=1)
def sync_pattern() -> re.Pattern:
    """The config schema's pattern of an rtpo.sync mode ($defs.sync in rtpo/config.schema.yaml)."""
    import yaml

    from rtpo.config import SCHEMA

    return re.compile(yaml.safe_load(SCHEMA.read_text())["$defs"]["sync"]["pattern"])


def parse_sync(mode: str) -> tuple[str, str | None]:
    """(name, argument) of an rtpo.sync mode: per_stage | interval:N | kl:tau; ValueError otherwise."""
    if not isinstance(mode, str) or not sync_pattern().fullmatch(mode):
        raise ValueError(f"unknown rtpo.sync mode {mode!r}; expected per_stage | interval:N | kl:tau")
    if mode == "per_stage":
        return mode, None
    name, _, arg = mode.partition(":")
    return name, arg


def needs_keep_weights(method: str, m: dict) -> bool:
    """Whether a run samples from stale inference weights: a sync method under interval:N / kl:tau
    (validated here), which needs rollout servers that keep their weights across sleep."""
    if not card(method).sync:
        return False
    return parse_sync(str(card(method).options(m)["sync"]))[0] != "per_stage"


__all__ = ["MethodCard", "CARDS", "RTPO_DEFAULTS", "card", "TURN_ROW_METHODS", "sync_pattern", "parse_sync", "needs_keep_weights"]
