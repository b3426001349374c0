"""Method names -> classes: what `rtpo train --method M` and the configs refer to.

rtpo_ca is RTPO under a context-aligned rollout: the same class, the config forces psi = full.
"""

from __future__ import annotations

from rtpo.methods.arpo import ARPO
from rtpo.methods.base import Method, Vanilla
from rtpo.methods.grpo import GRPO, GRPOTIS
from rtpo.methods.rtpo import RTPO
from rtpo.methods.seeupo import SeeUPO
from rtpo.methods.tree_grpo import TreeGRPO

METHODS: dict[str, type[Method]] = {
    "vanilla": Vanilla,
    "rtpo": RTPO,
    "rtpo_ca": RTPO,
    "grpo": GRPO,
    "grpo_tis": GRPOTIS,
    "tree_grpo": TreeGRPO,
    "arpo": ARPO,
    "seeupo": SeeUPO,
}


def get_method(name: str) -> type[Method]:
    """The class registered under `name`; ValueError listing the valid names otherwise."""
    try:
        return METHODS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown method {name!r}; valid methods: {', '.join(METHODS)}") from None
