r"""§C.3: the sibling (state-matched) advantage estimator -- its finite-group bias and its MSE
against trajectory-level (global-mean) advantages.

Setting and notation
--------------------
A boundary state s at turn k, a policy π for turn k and the turns after it. RTPO samples G
siblings a_1..a_G ~ π(·|s) i.i.d. from the same restored state and continues each to the terminal
return R_j under π (on-policy continuation, §C.4), so E[R_j | a_j] = Q(s, a_j) and the R_j are
independent given the actions. V(s) = E_{a~π} Q(s, a), A(s, a) = Q(s, a) - V(s).

Finite-group bias of the mean baseline (RTPO's default: the mean includes the sample itself)
-------------------------------------------------------------------------------------------
    Â_i = R_i - (1/G) Σ_j R_j = (1 - 1/G) R_i - (1/G) Σ_{j≠i} R_j.

Given all actions, E[Â_i | a_1..a_G] = Q(a_i) - (1/G) Σ_j Q(a_j)
                                    = (1 - 1/G) [Q(a_i) - (1/(G-1)) Σ_{j≠i} Q(a_j)].
Averaging over the other siblings (i.i.d. from π, independent of a_i) gives

    E[Â_i | a_i] = (1 - 1/G) (Q(s, a_i) - V(s)) = ((G-1)/G) · A(s, a_i).

So the finite-group bias is exactly -A(s, a_i)/G: a multiplicative shrinkage towards 0 by
(G-1)/G. It never flips the sign of the advantage, and the policy-gradient estimate
(1/G) Σ_i Â_i ∇log π(a_i|s) has expectation ((G-1)/G) ∇J -- the right direction with the step
size scaled by (G-1)/G.

Leave-one-out (LOO) option: Â^loo_i = R_i - (1/(G-1)) Σ_{j≠i} R_j has E[Â^loo_i | a_i] = A(s, a_i)
(unbiased), and Â_i = ((G-1)/G) Â^loo_i identically, so the two differ only by that constant.

What the paper states: the factor (G-2)/(G-1) (§C.3; it is also why "G = 2 degenerates", §G.2).
That is (G'-1)/G' with G' = G-1, i.e. the factor of a mean-including-self baseline over G-1
returns (for example, a group of G whose mean leaves one member -- the trunk -- out). For the
estimator as RTPO implements it (mean over all G, self included) the exact factor is (G-1)/G; at
G = 2 it is 1/2, not 0. Both are O(1/G). The checks table reports the paper's expression as not
matching the implemented estimator.

Variances (binary returns; used for the Monte Carlo tolerances): given a_i = a with q = Q(s, a),
R_i ~ Bern(q) and every other R_j (random action) ~ Bern(V(s)), so
    Var(Â_i | a_i)     = (1 - 1/G)² q(1-q) + ((G-1)/G²) V(1-V),
    Var(Â^loo_i | a_i) = q(1-q) + V(1-V)/(G-1).

MSE with respect to the true A(S_k, a_k)
---------------------------------------
S_k ~ d_k (the trunk's boundary-state distribution), a ~ π, R the continuation return. Write
R - μ = (V(S_k) - μ) + A(S_k, a) + ε with μ = E[R]: three orthogonal (martingale-difference)
terms with variances
    σ²_V = Var_{S_k}[V(S_k)]            (cross-state value variance),
    σ²_A = E_{S_k} Var_{a~π}[Q(S_k, a)] (action effect),
    σ²_ε = E[Var(R | S_k, a)]           (downstream noise; = E[Q(1-Q)] for binary rewards).
Siblings share S_k; trajectory-level members each have their own trunk (independent S_k).
Expanding the squared error and using orthogonality:
    sibling,    mean (G): MSE = σ²_A/G + ((G-1)/G) σ²_ε
    sibling,    LOO  (G): MSE = σ²_ε + (σ²_A + σ²_ε)/(G-1)
    trajectory, mean (N): MSE = ((N-1)/N)(σ²_V + σ²_ε) + σ²_A/N
    trajectory, LOO  (N): MSE = σ²_V + σ²_ε + (σ²_V + σ²_A + σ²_ε)/(N-1)
With matched group sizes N = G and the same baseline type, trajectory - sibling = ((G-1)/G) σ²_V
(mean) or (G/(G-1)) σ²_V (LOO): strictly positive iff σ²_V > 0, as the paper states. Outside that
condition it can fail: sibling-mean(G) beats trajectory-mean(N) iff
    ((N-1)/N) σ²_V > σ²_A (1/G - 1/N) - σ²_ε ((N-1)/N - (G-1)/G),
e.g. for G = 4, N = 16 iff σ²_V > (σ²_A - σ²_ε)/5, which is violated for small σ²_V when the
returns are nearly deterministic given the action (σ²_A > σ²_ε). Note also that the (biased) mean
baseline has *lower* MSE than the unbiased LOO one: the shrinkage trades bias for variance.

Not covered: the optional std normalisation (A_i / std_j R_j) has no closed-form bias (the ratio of
dependent random variables), so it is not checked here.
"""

from __future__ import annotations

import numpy as np

from rtpo.theory.mdp import Policy, TurnMDP, policy_values, rollout_from, sample_rows, sample_trunks, state_distributions

BASELINES = ("mean", "loo")


def _check_baseline(baseline: str) -> None:
    if baseline not in BASELINES:
        raise ValueError(f"baseline must be one of {BASELINES}, got {baseline!r}")


# ----------------------------------------------------------------------------------------------
# the estimator
# ----------------------------------------------------------------------------------------------

def group_advantages(returns: np.ndarray, baseline: str = "mean") -> np.ndarray:
    """Group-relative advantages along the last axis.

    returns: (..., G). "mean": R_i - mean_j R_j (self included, RTPO's default);
    "loo": R_i - mean_{j≠i} R_j. No std normalisation.
    """
    _check_baseline(baseline)
    G = returns.shape[-1]
    if baseline == "mean":
        return returns - returns.mean(axis=-1, keepdims=True)
    if G < 2:
        raise ValueError("leave-one-out needs a group of at least 2")
    return returns - (returns.sum(axis=-1, keepdims=True) - returns) / (G - 1)


# ----------------------------------------------------------------------------------------------
# closed forms
# ----------------------------------------------------------------------------------------------

def bias_factor(G: int, baseline: str = "mean") -> float:
    """E[Â_i | a_i] / A(s, a_i): (G-1)/G for the mean baseline, 1 for leave-one-out."""
    _check_baseline(baseline)
    if G < 2:
        raise ValueError(f"group size must be >= 2, got {G}")
    return (G - 1) / G if baseline == "mean" else 1.0


def paper_bias_factor(G: int) -> float:
    """The finite-group factor as stated in the paper (§C.3): (G-2)/(G-1)."""
    return (G - 2) / (G - 1)


def sibling_advantage_var(G: int, q: float, v: float, baseline: str = "mean") -> float:
    """Var(Â_i | a_i) for binary returns: q = Q(s, a_i), v = V(s) (module docstring)."""
    _check_baseline(baseline)
    if baseline == "mean":
        return (1 - 1 / G) ** 2 * q * (1 - q) + (G - 1) / G**2 * v * (1 - v)
    return q * (1 - q) + v * (1 - v) / (G - 1)


def mse_sibling(G: int, var_A: float, var_eps: float, baseline: str = "mean") -> float:
    _check_baseline(baseline)
    if baseline == "mean":
        return var_A / G + (G - 1) / G * var_eps
    return var_eps + (var_A + var_eps) / (G - 1)


def mse_trajectory(N: int, var_V: float, var_A: float, var_eps: float, baseline: str = "mean") -> float:
    _check_baseline(baseline)
    if baseline == "mean":
        return (N - 1) / N * (var_V + var_eps) + var_A / N
    return var_V + var_eps + (var_V + var_A + var_eps) / (N - 1)


def crossover_var_V(G: int, N: int, var_A: float, var_eps: float) -> float:
    """The σ²_V above which sibling-mean(G) has lower MSE than trajectory-mean(N) (may be < 0)."""
    return (var_A * (1 / G - 1 / N) - var_eps * ((N - 1) / N - (G - 1) / G)) * N / (N - 1)


def variance_components(mdp: TurnMDP, policy: Policy, k: int) -> dict[str, float]:
    """Exact σ²_V, σ²_A, σ²_ε at turn k when trunks and continuations follow ``policy``."""
    Q, V = policy_values(mdp, policy)
    d = state_distributions(mdp, policy)[k]
    q, v, p = Q[k], V[k], policy[k]
    mu = float(d @ v)
    var_V = float(d @ (v - mu) ** 2)
    var_A = float(d @ (p * (q - v[:, None]) ** 2).sum(axis=1))
    var_eps = float(d @ (p * q * (1 - q)).sum(axis=1))
    return {"var_V": var_V, "var_A": var_A, "var_eps": var_eps, "mean_return": mu}


# ----------------------------------------------------------------------------------------------
# Monte Carlo
# ----------------------------------------------------------------------------------------------

def mc_sibling_mean_advantage(
    mdp: TurnMDP, policy: Policy, k: int, s: int, a: int, G: int, n: int, rng: np.random.Generator,
) -> dict[str, float]:
    """Monte Carlo E[Â_1 | a_1 = a] for n sibling groups at state s of turn k.

    Member 1 takes action a; members 2..G are drawn from policy[k][s]; all G are continued under
    ``policy`` to their terminal returns. Returns {"mean": ..., "loo": ..., "mean_se": ..., "loo_se": ...}
    (the SEs are sample standard errors).
    """
    acts = np.empty((n, G), dtype=int)
    acts[:, 0] = a
    acts[:, 1:] = sample_rows(rng, np.broadcast_to(policy[k][s], (n * (G - 1), policy[k].shape[1]))).reshape(n, G - 1)
    states = np.full(n * G, s)
    R = rollout_from(mdp, rng, k, states, acts.ravel(), policy).reshape(n, G)
    out = {}
    for b in BASELINES:
        adv = group_advantages(R, b)[:, 0]
        out[b] = float(adv.mean())
        out[b + "_se"] = float(adv.std(ddof=1) / np.sqrt(n))
    return out


def mc_advantage_mse(
    mdp: TurnMDP, policy: Policy, k: int, group: int, n_groups: int, rng: np.random.Generator,
    grouping: str = "sibling", baseline: str = "mean",
) -> tuple[float, float]:
    """Monte Carlo MSE of group advantages at turn k against the true A^π(S_k, a_k).

    grouping "sibling": each group is one trunk to S_k plus ``group`` siblings from that state;
    "trajectory": each group is ``group`` independent trajectories from init (their own S_k),
    centred on the group mean -- the flattened, global-mean advantage given to the turn-k action.
    Returns (mse, standard error over groups).
    """
    _check_baseline(baseline)
    if grouping not in ("sibling", "trajectory"):
        raise ValueError(f"grouping must be 'sibling' or 'trajectory', got {grouping!r}")
    Q, V = policy_values(mdp, policy)
    if grouping == "sibling":
        s = np.repeat(sample_trunks(mdp, rng, n_groups, policy, until=k), group)
    else:
        s = sample_trunks(mdp, rng, n_groups * group, policy, until=k)
    a = sample_rows(rng, policy[k][s])
    R = rollout_from(mdp, rng, k, s, a, policy).reshape(n_groups, group)
    err = group_advantages(R, baseline) - (Q[k][s, a] - V[k][s]).reshape(n_groups, group)
    per_group = (err**2).mean(axis=1)
    return float(per_group.mean()), float(per_group.std(ddof=1) / np.sqrt(n_groups))


# ----------------------------------------------------------------------------------------------
# the cross-state family used for the σ²_V sweep
# ----------------------------------------------------------------------------------------------

def cross_state_mdp(
    spread: float, rng: np.random.Generator, n_states: int = 6, n_actions: int = 3, action_scale: float = 0.12,
) -> tuple[TurnMDP, Policy]:
    """A two-turn MDP whose credited turn (k = 1) has cross-state value variance σ²_V = spread².

    Turn 0 has one state and one action (the shared upstream prefix); its tool call lands in one
    of ``n_states`` boundary states uniformly at random. Half of them are "good" (value 0.5 + spread)
    and half "bad" (0.5 - spread), e.g. the search found the evidence or not. At turn 1 the terminal
    success probability is 0.5 ± spread + action_scale·u_s(a), with u_s centred under the uniform
    turn-1 policy and max |u_s| = 1, so V(s) = 0.5 ± spread exactly. Returns (mdp, policy).
    """
    if n_states % 2:
        raise ValueError(f"cross_state_mdp: n_states must be even, got {n_states}")
    if spread < 0 or spread + action_scale >= 0.5:
        raise ValueError(f"cross_state_mdp: need 0 <= spread and spread + action_scale < 0.5, got {spread}, {action_scale}")
    v = np.where(np.arange(n_states) < n_states // 2, 1.0, -1.0)
    u = rng.standard_normal((n_states, n_actions))
    u -= u.mean(axis=1, keepdims=True)
    u /= np.abs(u).max(axis=1, keepdims=True)
    success = 0.5 + spread * v[:, None] + action_scale * u
    mdp = TurnMDP(init=np.ones(1), trans=(np.full((1, 1, n_states), 1.0 / n_states),), success=success)
    policy = [np.ones((1, 1)), np.full((n_states, n_actions), 1.0 / n_actions)]
    return mdp, policy
