"""Theorem 1(b): reverse-order tabular updates converge to the recursively optimal policy (§C.2).

Two learners on the same `TurnMDP`, with the same exploration and the same sample budget
(budget = number of episodes = number of terminal rewards observed):

* ``reverse_order_learning`` (RTPO's schedule, Theorem 1(b)): for k = K-1 down to 0, spend B/K
  episodes on turn k. Each episode starts at a uniformly random turn-k state and macro-action
  ("exploring start": RTPO restores a recorded boundary snapshot and samples a sibling), continues
  under the *frozen* greedy policies already learned for turns > k, and updates the tabular
  Q̂_k(s, a) with the sample average of the terminal returns (step size 1/n(s, a), a
  Robbins-Monro schedule). When turn k's budget is spent its greedy policy is frozen.
  The target of every update at turn k is then stationary: Bernoulli(Q^{π̂_{>k}}_k(s, a)).

* ``simultaneous_learning`` (all turns at once from trajectory-level targets): each episode picks a
  uniformly random turn k0, state and macro-action (same exploring starts, so every turn receives
  B/K starts in expectation), continues under the *current* greedy policies of all later turns,
  and updates with the terminal return either only the start pair (``update="start"``; isolates
  the non-stationary target) or every pair on the trajectory (``update="trajectory"``; the
  flattened "same return for every turn" target, more updates per episode). Policies are refreshed
  after every batch of max(``refresh``, n/``refresh``) episodes, n = episodes seen so far
  (geometric batches: the acting policy is at most ~1/refresh of the data behind). Because downstream policies keep changing, the sample average at
  turn k mixes returns from different continuation policies: the target is non-stationary, which is
  what Theorem 1's proof cannot handle (§C.2, "Interpretation"). This is Monte Carlo control with
  exploring starts; for finite-horizon feed-forward MDPs like these it is known to converge as
  well (Wang, Yuan & Ross 2022), so the comparison is about how fast, not whether.

Errors are measured against the exact Q* of backward induction (`mdp.optimal_values`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rtpo.theory.mdp import TurnMDP, greedy_policy, optimal_values, policy_values, rollout_from


@dataclass
class TabularEstimate:
    """Sample-average tables: sums[k], counts[k] of shape (n_states[k], n_actions[k])."""

    sums: list[np.ndarray]
    counts: list[np.ndarray]

    @classmethod
    def zeros(cls, mdp: TurnMDP) -> "TabularEstimate":
        shapes = list(zip(mdp.n_states, mdp.n_actions))
        return cls([np.zeros(s) for s in shapes], [np.zeros(s) for s in shapes])

    def q(self) -> list[np.ndarray]:
        """Q̂ = sums / counts (0 where a pair was never updated)."""
        return [np.divide(s, c, out=np.zeros_like(s), where=c > 0) for s, c in zip(self.sums, self.counts)]

    def add(self, k: int, states: np.ndarray, actions: np.ndarray, returns: np.ndarray) -> None:
        np.add.at(self.sums[k], (states, actions), returns)
        np.add.at(self.counts[k], (states, actions), 1.0)


def _exploring_starts(mdp: TurnMDP, rng: np.random.Generator, k: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    return rng.integers(mdp.n_states[k], size=n), rng.integers(mdp.n_actions[k], size=n)


def reverse_order_learning(mdp: TurnMDP, rng: np.random.Generator, episodes: int) -> TabularEstimate:
    """RTPO's reverse-order schedule with frozen downstream greedy policies (see module docstring).

    episodes: total budget B, split as evenly as possible over the K turns.
    """
    K = mdp.n_turns
    if episodes < K:
        raise ValueError(f"reverse_order_learning: need at least one episode per turn (K={K}), got {episodes}")
    est = TabularEstimate.zeros(mdp)
    per_turn = np.full(K, episodes // K)
    per_turn[: episodes % K] += 1
    frozen: list[np.ndarray | None] = [None] * K
    for k in range(K - 1, -1, -1):
        s, a = _exploring_starts(mdp, rng, k, int(per_turn[k]))
        returns = rollout_from(mdp, rng, k, s, a, frozen)  # uses frozen[k+1:], all already set
        est.add(k, s, a, returns)
        frozen[k] = greedy_policy([est.q()[k]])[0]
    return est


def simultaneous_learning(
    mdp: TurnMDP,
    rng: np.random.Generator,
    checkpoints: list[int],
    update: str = "start",
    refresh: int = 32,
) -> list[tuple[int, list[np.ndarray]]]:
    """All turns learned at once from trajectory returns under the current policy (module docstring).

    checkpoints: episode counts at which to snapshot Q̂ (a batch never crosses a checkpoint).
    update: "start" (only the exploring-start pair) or "trajectory" (every pair on the path).
    refresh: minimum batch size; batches are max(refresh, seen // refresh) episodes.
    Returns [(episodes_seen, Q̂ list), ...].
    """
    if update not in ("start", "trajectory"):
        raise ValueError(f"simultaneous_learning: update must be 'start' or 'trajectory', got {update!r}")
    K = mdp.n_turns
    est = TabularEstimate.zeros(mdp)
    out: list[tuple[int, list[np.ndarray]]] = []
    pending = sorted(checkpoints)
    seen = 0
    while pending:
        policy = greedy_policy(est.q())
        batch = min(max(refresh, seen // refresh), pending[0] - seen)
        k0 = rng.integers(K, size=batch)
        for k in range(K):
            n = int((k0 == k).sum())
            if n == 0:
                continue
            s, a = _exploring_starts(mdp, rng, k, n)
            returns, path_s, path_a = rollout_from(mdp, rng, k, s, a, policy, return_path=True)
            if update == "start":
                est.add(k, s, a, returns)
            else:
                for t, (ps, pa) in enumerate(zip(path_s, path_a)):
                    est.add(k + t, ps, pa, returns)
        seen += batch
        while pending and seen >= pending[0]:
            out.append((seen, est.q()))
            pending.pop(0)
    return out


def q_errors(Q_hat: list[np.ndarray], Q_star: list[np.ndarray]) -> tuple[float, float]:
    """(RMS, max) of Q̂ - Q* over every (k, s, a) entry."""
    diff = np.concatenate([(qh - qs).ravel() for qh, qs in zip(Q_hat, Q_star)])
    return float(np.sqrt(np.mean(diff**2))), float(np.abs(diff).max())


def suboptimality(mdp: TurnMDP, Q_hat: list[np.ndarray]) -> tuple[float, float]:
    """(E_{S_0}[V*(S_0) - V^π̂(S_0)], fraction of (k, s) whose greedy action is not optimal) for π̂ = greedy(Q̂).

    A state counts as wrong only if its greedy action is strictly worse than the best (ties allowed).
    """
    Q_star, V_star = optimal_values(mdp)
    pi = greedy_policy(Q_hat)
    _, V_pi = policy_values(mdp, pi)
    gap = float(mdp.init @ (V_star[0] - V_pi[0]))
    wrong = sum(int((qs[np.arange(qs.shape[0]), qh.argmax(axis=1)] < qs.max(axis=1) - 1e-12).sum())
                for qh, qs in zip(Q_hat, Q_star))
    return gap, wrong / sum(mdp.n_states)


def theorem1_curves(
    mdps: list[TurnMDP], rng: np.random.Generator, budgets: list[int], refresh: int = 32,
) -> list[dict]:
    """Error-to-Q* learning curves of the three learners on each MDP at each budget.

    Returns rows {method, mdp, episodes, rms_error, max_error, value_gap, wrong_frac}.
    Reverse order is rerun from scratch for every budget (its schedule depends on B); the
    simultaneous learners are anytime, so one run per MDP is snapshotted at every budget.
    """
    rows = []
    for i, mdp in enumerate(mdps):
        Q_star, _ = optimal_values(mdp)

        def record(method: str, episodes: int, Q_hat: list[np.ndarray]) -> None:
            rms, mx = q_errors(Q_hat, Q_star)
            gap, wrong = suboptimality(mdp, Q_hat)
            rows.append({"method": method, "mdp": i, "episodes": episodes, "rms_error": rms,
                         "max_error": mx, "value_gap": gap, "wrong_frac": wrong})

        for b in budgets:
            record("reverse-order (frozen downstream)", b, reverse_order_learning(mdp, rng, b).q())
        for update, name in (("start", "simultaneous (start pair)"), ("trajectory", "simultaneous (all turns, trajectory return)")):
            for seen, Q_hat in simultaneous_learning(mdp, rng, budgets, update=update, refresh=refresh):
                record(name, seen, Q_hat)
    return rows
