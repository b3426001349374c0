"""Method names -> classes: what `rtpo train --method M` and the configs refer to.

Each method's facts (its class, row kind, verl trainer mode, sync modes) are its card in
rtpo.methods.cards, which code that must not import torch reads instead of this module.
rtpo_ca is RTPO under a context-aligned rollout: the same class, the config forces psi = full.
"""

from __future__ import annotations

from rtpo.methods.base import Method
from rtpo.methods.cards import CARDS, card

METHODS: dict[str, type[Method]] = {name: c.load() for name, c in CARDS.items()}


def get_method(name: str) -> type[Method]:
    """The class registered under `name`; ValueError listing the valid names otherwise."""
    card(name)  # the error names the valid methods
    return METHODS[name]
