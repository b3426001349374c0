"""The toy env as a verl env factory (``+rtpo.env_factory=rtpo.verl_ext.cpu_harness.toy:env_factory``): tests only.

`rtpo.envs.toy_env.LastTurnEnv` always runs exactly K turns and rewards the last one, so a random tiny
model yields multi-turn trunks and every stage of RTPO's reverse sweep is exercised on CPU without a
trained model. env options: max_turns (K, default 2), target (default "yes"), reward: "target" (1 if
the last turn contains the target word) or "parity" (1 if the last turn's text has odd length: a
random model gets reward spread, hence non-zero advantages).
"""

from __future__ import annotations

from typing import Any

from rtpo.envs.toy_env import LastTurnEnv


class ParityEnv(LastTurnEnv):
    """LastTurnEnv rewarded by the parity of the last turn's text length."""

    def step(self, assistant_text: str):
        res = super().step(assistant_text)
        if res.done:
            res.reward = float(len(assistant_text) % 2)
        return res


def env_factory(env_cfg: dict[str, Any]):
    K = int(env_cfg.get("max_turns", 2))
    target = str(env_cfg.get("target", "yes"))
    kind = str(env_cfg.get("reward", "target"))
    if kind not in ("target", "parity"):
        raise ValueError(f"toy env: reward must be 'target' or 'parity', not {kind!r}")
    cls = ParityEnv if kind == "parity" else LastTurnEnv
    return lambda task: cls(max_turns=K, target=target)
