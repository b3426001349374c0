"""Finite-horizon turn-level MDPs with exact values (paper §C.1).

A `TurnMDP` is the tabular idealisation the paper's theorems are stated for:

* K turns, k = 0..K-1. At turn k the agent is in one of ``n_states[k]`` turn-boundary states S_k
  and picks one of ``n_actions[k]`` macro-actions a_k (a whole turn response).
* Stochastic tool transitions: after a_k (k < K-1) the environment moves to S_{k+1} with
  probability ``trans[k][S_k, a_k, S_{k+1}]`` (the tool result is random).
* Sparse terminal reward: no intermediate reward; after the final macro-action the reward is
  R ∈ {0, 1} with P(R = 1) = ``success[S_{K-1}, a_{K-1}]``. γ = 1 (the paper's setting, §E.3).

Because R is binary, the return of any continuation from (S_k, a_k) under a policy π is exactly
Bernoulli(Q^π_k(S_k, a_k)) -- a fact several checks lean on.

Policies are lists of K arrays ``policy[k]`` of shape (n_states[k], n_actions[k]), rows summing to 1.
Value tables are lists of K arrays: ``Q[k]`` (n_states[k], n_actions[k]) and ``V[k]`` (n_states[k],).
Everything here is plain numpy; samplers take an explicit ``np.random.Generator``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

Policy = list[np.ndarray]


@dataclass(frozen=True)
class TurnMDP:
    """A finite-horizon turn-level MDP with binary terminal reward.

    init:    (n_states[0],) distribution of S_0.
    trans:   K-1 arrays; trans[k] has shape (n_states[k], n_actions[k], n_states[k+1]) = P(S_{k+1} | S_k, a_k).
    success: (n_states[K-1], n_actions[K-1]) = P(R = 1 | S_{K-1}, a_{K-1}).
    """

    init: np.ndarray
    trans: tuple[np.ndarray, ...]
    success: np.ndarray

    def __post_init__(self) -> None:
        init = np.asarray(self.init, dtype=float)
        if init.ndim != 1 or not np.isclose(init.sum(), 1.0) or (init < 0).any():
            raise ValueError(f"TurnMDP.init must be a probability vector, got {init!r}")
        n_prev = init.shape[0]
        for k, t in enumerate(self.trans):
            if t.ndim != 3 or t.shape[0] != n_prev:
                raise ValueError(f"TurnMDP.trans[{k}] has shape {t.shape}; expected ({n_prev}, n_actions, n_next)")
            if (t < 0).any() or not np.allclose(t.sum(axis=2), 1.0):
                raise ValueError(f"TurnMDP.trans[{k}] rows must be probability vectors over next states")
            n_prev = t.shape[2]
        if self.success.ndim != 2 or self.success.shape[0] != n_prev:
            raise ValueError(f"TurnMDP.success has shape {self.success.shape}; expected ({n_prev}, n_actions)")
        if (self.success < 0).any() or (self.success > 1).any():
            raise ValueError("TurnMDP.success must lie in [0, 1] (it is P(R = 1))")

    @property
    def n_turns(self) -> int:
        return len(self.trans) + 1

    @property
    def n_states(self) -> tuple[int, ...]:
        return (self.init.shape[0],) + tuple(t.shape[2] for t in self.trans)

    @property
    def n_actions(self) -> tuple[int, ...]:
        return tuple(t.shape[1] for t in self.trans) + (self.success.shape[1],)

    @property
    def n_pairs(self) -> int:
        """Number of (k, s, a) entries in a Q table."""
        return int(sum(s * a for s, a in zip(self.n_states, self.n_actions)))


# ----------------------------------------------------------------------------------------------
# generators
# ----------------------------------------------------------------------------------------------

def random_turn_mdp(
    rng: np.random.Generator,
    n_turns: int = 4,
    n_states: int = 5,
    n_actions: int = 3,
    transition_concentration: float = 0.5,
    success_beta: float = 0.7,
    min_gap: float = 0.0,
    max_tries: int = 2000,
) -> TurnMDP:
    """Sample a random turn-level MDP.

    Transitions: each row trans[k][s, a] ~ Dirichlet(transition_concentration · 1) (small values give
    peaked but still stochastic tool outcomes). Terminal success probabilities ~ Beta(β, β).
    min_gap: resample until every state at every turn has a gap of at least ``min_gap`` between its
    best and second-best optimal action value (so that "the" optimal policy is well defined and
    learnable from finitely many samples); raises RuntimeError after ``max_tries`` draws.
    """
    if n_turns < 1 or n_states < 1 or n_actions < 1:
        raise ValueError(f"random_turn_mdp: n_turns, n_states, n_actions must be >= 1, got {n_turns}, {n_states}, {n_actions}")
    for _ in range(max_tries):
        init = rng.dirichlet(np.ones(n_states))
        trans = tuple(rng.dirichlet(np.full(n_states, transition_concentration), size=(n_states, n_actions))
                      for _ in range(n_turns - 1))
        success = rng.beta(success_beta, success_beta, size=(n_states, n_actions))
        mdp = TurnMDP(init=init, trans=trans, success=success)
        if min_gap <= 0 or n_actions == 1 or min_action_gap(mdp) >= min_gap:
            return mdp
    raise RuntimeError(f"random_turn_mdp: no MDP with min_gap >= {min_gap} in {max_tries} draws; lower min_gap")


def min_action_gap(mdp: TurnMDP) -> float:
    """Smallest gap Q*(s, best) - Q*(s, second best) over all turns and states."""
    Q, _ = optimal_values(mdp)
    gaps = [np.diff(np.sort(q, axis=1)[:, -2:], axis=1).min() for q in Q if q.shape[1] > 1]
    return float(min(gaps)) if gaps else float("inf")


def softmax_policy(rng: np.random.Generator, mdp: TurnMDP, temperature: float = 1.0) -> Policy:
    """A random stochastic policy: softmax of N(0, temperature²) logits per state."""
    out = []
    for s, a in zip(mdp.n_states, mdp.n_actions):
        logits = temperature * rng.standard_normal((s, a))
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        out.append(p / p.sum(axis=1, keepdims=True))
    return out


def greedy_policy(Q: list[np.ndarray]) -> Policy:
    """One-hot policy picking argmax_a Q[k][s, a] (ties -> lowest index)."""
    out = []
    for q in Q:
        p = np.zeros_like(q, dtype=float)
        p[np.arange(q.shape[0]), q.argmax(axis=1)] = 1.0
        out.append(p)
    return out


# ----------------------------------------------------------------------------------------------
# exact values
# ----------------------------------------------------------------------------------------------

def optimal_values(mdp: TurnMDP) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Backward induction (the Bellman optimality recursion over turn boundaries, §C.1).

    Q*_{K-1}(s, a) = success[s, a];  V*_k(s) = max_a Q*_k(s, a);
    Q*_k(s, a) = Σ_{s'} trans[k][s, a, s'] V*_{k+1}(s').
    Returns (Q, V) as lists over turns.
    """
    K = mdp.n_turns
    Q: list[np.ndarray] = [None] * K  # type: ignore[list-item]
    V: list[np.ndarray] = [None] * K  # type: ignore[list-item]
    Q[K - 1] = mdp.success.astype(float).copy()
    V[K - 1] = Q[K - 1].max(axis=1)
    for k in range(K - 2, -1, -1):
        Q[k] = mdp.trans[k] @ V[k + 1]
        V[k] = Q[k].max(axis=1)
    return Q, V


def policy_values(mdp: TurnMDP, policy: Policy) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Exact Q^π and V^π by backward recursion (the 'augmented' turn-level action value, §C.1)."""
    _check_policy(mdp, policy)
    K = mdp.n_turns
    Q: list[np.ndarray] = [None] * K  # type: ignore[list-item]
    V: list[np.ndarray] = [None] * K  # type: ignore[list-item]
    Q[K - 1] = mdp.success.astype(float).copy()
    V[K - 1] = (policy[K - 1] * Q[K - 1]).sum(axis=1)
    for k in range(K - 2, -1, -1):
        Q[k] = mdp.trans[k] @ V[k + 1]
        V[k] = (policy[k] * Q[k]).sum(axis=1)
    return Q, V


def state_distributions(mdp: TurnMDP, policy: Policy) -> list[np.ndarray]:
    """d_k(s) = P(S_k = s) when the whole episode follows ``policy`` from ``init``."""
    _check_policy(mdp, policy)
    d = [mdp.init.astype(float)]
    for k, t in enumerate(mdp.trans):
        d.append(np.einsum("s,sa,sat->t", d[-1], policy[k], t))
    return d


def _check_policy(mdp: TurnMDP, policy: Policy) -> None:
    if len(policy) != mdp.n_turns:
        raise ValueError(f"policy has {len(policy)} turns, MDP has {mdp.n_turns}")
    for k, (p, s, a) in enumerate(zip(policy, mdp.n_states, mdp.n_actions)):
        if p.shape != (s, a):
            raise ValueError(f"policy[{k}] has shape {p.shape}; expected ({s}, {a})")
        if (p < 0).any() or not np.allclose(p.sum(axis=1), 1.0):
            raise ValueError(f"policy[{k}] rows must be probability vectors")


# ----------------------------------------------------------------------------------------------
# sampling
# ----------------------------------------------------------------------------------------------

def sample_rows(rng: np.random.Generator, probs: np.ndarray) -> np.ndarray:
    """One categorical draw per row of ``probs`` (N, n) -> indices (N,), by inverse CDF."""
    cdf = np.cumsum(probs, axis=1)
    u = rng.random(probs.shape[0]) * cdf[:, -1]
    return np.minimum((cdf < u[:, None]).sum(axis=1), probs.shape[1] - 1)


def rollout_from(
    mdp: TurnMDP,
    rng: np.random.Generator,
    k: int,
    states: np.ndarray,
    actions: np.ndarray,
    policy: Policy,
    return_path: bool = False,
):
    """Continue N episodes from turn-k states/actions under ``policy`` to the terminal reward.

    states, actions: (N,) int arrays at turn k. Only policy[k+1:] is used (it may hold None for
    turns <= k). Returns rewards (N,) float in {0, 1}; with return_path=True also
    (path_states, path_actions): lists over turns k..K-1 of (N,) arrays.
    """
    s = np.asarray(states)
    a = np.asarray(actions)
    path_s, path_a = [s], [a]
    for t in range(k, mdp.n_turns - 1):
        s = sample_rows(rng, mdp.trans[t][s, a])
        a = sample_rows(rng, policy[t + 1][s])
        path_s.append(s)
        path_a.append(a)
    rewards = (rng.random(s.shape[0]) < mdp.success[s, a]).astype(float)
    if return_path:
        return rewards, path_s, path_a
    return rewards


def sample_trunks(mdp: TurnMDP, rng: np.random.Generator, n: int, policy: Policy, until: int) -> np.ndarray:
    """Sample n trunk prefixes from init under ``policy`` and return the states S_until (n,)."""
    s = sample_rows(rng, np.broadcast_to(mdp.init, (n, mdp.init.shape[0])))
    for t in range(until):
        a = sample_rows(rng, policy[t][s])
        s = sample_rows(rng, mdp.trans[t][s, a])
    return s
