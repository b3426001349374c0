r"""§C.4: on-policy continuation vs trajectory-level importance weights, and the Monte Carlo
variance of sibling Q estimates.

Trajectory-level importance weight under a fixed per-turn drift
---------------------------------------------------------------
Continuations were sampled under a stale policy π_old but the current policy is π_new. The
trajectory-level correction over H turns is w_H = Π_{t<H} ρ_t with ρ_t = π_new(a_t|S_t)/π_old(a_t|S_t),
a_t ~ π_old. We build π_new so that the per-turn drift is the same at every state:
π_new(a|s) = π_old(a|s)(1 + δ h_s(a)) with E_{π_old}[h_s] = 0 and E_{π_old}[h_s²] = 1, so that
E_{π_old}[ρ] = 1 and E_{π_old}[ρ²] = 1 + χ²(π_new ‖ π_old) = 1 + δ² at every state. By the tower
property over turns (transitions do not depend on the weight),

    E[w_H] = 1,   E[w_H²] = (1 + δ²)^H,   Var(w_H) = (1 + δ²)^H - 1,

exponential in the horizon for any fixed drift δ > 0. Under on-policy continuation (RTPO
regenerates sibling continuations after syncing, π_new = π_old) every ρ_t = 1, so w_H ≡ 1 and
Var(w_H) = 0 exactly. Higher moments E[w_H^p] (needed for the standard error of the Monte Carlo
variance) follow from the forward recursion in `is_weight_moment`.

Sibling Q estimates
-------------------
With binary terminal reward the return of a continuation from (s, a) is Bernoulli(p), p = Q^π(s, a),
so the mean of G sibling returns has Var = p(1-p)/G: largest at p = 1/2 and falling as p moves
towards 0 or 1. (For rewards in [0, 1] p(1-p) is the worst case, Bhatia-Davis.) Whether reverse-
order optimisation lowers this variance therefore depends on whether it moves the continuation
success probabilities *away from* 1/2; `dynamic_variance_change` measures that on random MDPs.
"""

from __future__ import annotations

import itertools
from math import comb

import numpy as np

from rtpo.theory.mdp import Policy, TurnMDP, optimal_values, policy_values, rollout_from, sample_rows


def drifted_policy(policy_old: Policy, delta: float) -> Policy:
    """π_new with χ²(π_new(·|s) ‖ π_old(·|s)) = δ² at every state (module docstring).

    h_s is a two-valued contrast: +sqrt((1-m)/m) on an action subset of π_old-mass m (the subset
    with m closest to 1/2), -sqrt(m/(1-m)) elsewhere. Raises ValueError if some π_new(a|s) would
    not be positive (δ too large for that state).
    """
    if delta < 0:
        raise ValueError(f"drifted_policy: delta must be >= 0, got {delta}")
    out = []
    for k, p in enumerate(policy_old):
        new = np.empty_like(p)
        n_a = p.shape[1]
        if n_a < 2:
            raise ValueError(f"drifted_policy: turn {k} has a single action; no drift possible")
        subsets = [np.array(c) for r in range(1, n_a) for c in itertools.combinations(range(n_a), r)]
        for s in range(p.shape[0]):
            best = min(subsets, key=lambda c: abs(p[s, c].sum() - 0.5))
            m = p[s, best].sum()
            h = np.full(n_a, -np.sqrt(m / (1 - m)))
            h[best] = np.sqrt((1 - m) / m)
            new[s] = p[s] * (1 + delta * h)
            if (new[s] <= 0).any():
                raise ValueError(f"drifted_policy: delta={delta} makes π_new non-positive at turn {k}, state {s}")
        out.append(new)
    return out


def chi2_per_state(policy_new: Policy, policy_old: Policy) -> list[np.ndarray]:
    """χ²(π_new(·|s) ‖ π_old(·|s)) for every turn and state."""
    return [((pn - po) ** 2 / po).sum(axis=1) for pn, po in zip(policy_new, policy_old)]


def is_weight_moment(mdp: TurnMDP, policy_old: Policy, policy_new: Policy, power: int) -> np.ndarray:
    """Exact E[w_H^power] for H = 1..K (trajectories from init under π_old).

    Forward recursion on the weighted state measure m_t(s) = E[w_t^p ; S_t = s]:
    E[w_{t+1}^p] = Σ_s m_t(s) Σ_a π_old(a|s) ρ(a|s)^p and
    m_{t+1}(s') = Σ_{s,a} m_t(s) π_old(a|s) ρ(a|s)^p P(s'|s,a). Returns (K,) array.
    """
    m = mdp.init.astype(float)
    out = []
    for t in range(mdp.n_turns):
        kern = policy_old[t] * (policy_new[t] / policy_old[t]) ** power  # (S, A)
        out.append(float(m @ kern.sum(axis=1)))
        if t < mdp.n_turns - 1:
            m = np.einsum("s,sa,sat->t", m, kern, mdp.trans[t])
    return np.array(out)


def mc_is_weights(
    mdp: TurnMDP, rng: np.random.Generator, policy_old: Policy, policy_new: Policy, n: int,
) -> np.ndarray:
    """n trajectories from init under π_old; returns prefix weights w (n, K), w[:, H-1] = w_H."""
    s = sample_rows(rng, np.broadcast_to(mdp.init, (n, mdp.init.shape[0])))
    w = np.ones(n)
    out = np.empty((n, mdp.n_turns))
    for t in range(mdp.n_turns):
        a = sample_rows(rng, policy_old[t][s])
        w = w * policy_new[t][s, a] / policy_old[t][s, a]
        out[:, t] = w
        if t < mdp.n_turns - 1:
            s = sample_rows(rng, mdp.trans[t][s, a])
    return out


def sample_variance_se(second: float, fourth: float, mean: float, n: int) -> float:
    """Approximate standard error of a sample variance of n draws of w with E[w] = mean:
    sqrt((E[w⁴] - E[w²]²)/n), the error of the second-moment term that dominates it."""
    return float(np.sqrt(max(fourth - second**2, 0.0) / n))


# ----------------------------------------------------------------------------------------------
# sibling Q estimates
# ----------------------------------------------------------------------------------------------

def sibling_q_var(p: float | np.ndarray, G: int) -> float | np.ndarray:
    """Var of the mean of G Bernoulli(p) sibling returns: p(1-p)/G."""
    return np.asarray(p) * (1 - np.asarray(p)) / G


def sibling_q_var_se(p: float, G: int, n: int) -> float:
    """Standard error of the sample variance of n independent Q̂ = Binomial(G, p)/G draws,
    sqrt((μ4 - σ⁴)/n), with the fourth central moment μ4 of Q̂ computed exactly by enumeration."""
    b = np.arange(G + 1)
    pmf = np.array([comb(G, int(j)) * p**j * (1 - p) ** (G - j) for j in b])
    x = b / G
    mu = pmf @ x
    var = pmf @ (x - mu) ** 2
    mu4 = pmf @ (x - mu) ** 4
    return float(np.sqrt(max(mu4 - var**2, 0.0) / n))


def mc_sibling_q_var(p: float, G: int, n: int, rng: np.random.Generator) -> float:
    """Sample variance over n groups of the mean of G Bernoulli(p) sibling returns."""
    q_hat = (rng.random((n, G)) < p).mean(axis=1)
    return float(q_hat.var(ddof=1))


def dynamic_variance_change(mdp: TurnMDP, policy_before: Policy) -> dict:
    """How the Bernoulli variance Q(1-Q) of sibling returns at turns k < K-1 changes when the
    downstream policy goes from ``policy_before`` to the recursively optimal one (reverse-order
    RTPO at convergence). Averages are uniform over (k, s, a) with k < K-1 (the last turn has no
    downstream policy). Returns floats "before", "after" (mean Q(1-Q)), "frac_increased", int
    "n_pairs", and the flattened Q values "q_before", "q_after" (arrays of length n_pairs).
    """
    Q_before, _ = policy_values(mdp, policy_before)
    Q_after, _ = optimal_values(mdp)
    K = mdp.n_turns
    if K < 2:
        raise ValueError("dynamic_variance_change needs at least two turns")
    vb = np.concatenate([(q * (1 - q)).ravel() for q in Q_before[: K - 1]])
    va = np.concatenate([(q * (1 - q)).ravel() for q in Q_after[: K - 1]])
    return {"before": float(vb.mean()), "after": float(va.mean()),
            "frac_increased": float((va > vb + 1e-12).mean()), "n_pairs": int(vb.size),
            "q_before": np.concatenate([q.ravel() for q in Q_before[: K - 1]]),
            "q_after": np.concatenate([q.ravel() for q in Q_after[: K - 1]])}


def mc_continuation_mean(
    mdp: TurnMDP, rng: np.random.Generator, policy_sample: Policy, k: int, s: int, a: int, n: int,
    policy_target: Policy | None = None,
) -> tuple[float, float]:
    """Mean (and SE) of n continuation returns from (s, a) at turn k sampled under ``policy_sample``.

    With ``policy_target`` the returns are reweighted by the trajectory-level importance weight
    Π_{t>k} π_target/π_sample over the continuation (the stale-continuation correction of the
    off-policy variant, §F.3); without it they are used as they are.
    """
    states = np.full(n, s)
    actions = np.full(n, a)
    R, ps, pa = rollout_from(mdp, rng, k, states, actions, policy_sample, return_path=True)
    if policy_target is not None:
        w = np.ones(n)
        for t in range(1, len(ps)):
            w *= policy_target[k + t][ps[t], pa[t]] / policy_sample[k + t][ps[t], pa[t]]
        R = R * w
    return float(R.mean()), float(R.std(ddof=1) / np.sqrt(n))
