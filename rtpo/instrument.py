"""The per-step instrumentation every method logs (schema in docs/ARCHITECTURE.md).

Token-weighted accumulators for the rollout-training ratio and KL, generated tokens by kind,
trunk (first-pass trajectory) statistics, and a JSONL writer.
"""

from __future__ import annotations

import json
import math
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rtpo.engine.base import Mismatch, UpdateStats
from rtpo.rollout import Trajectory

SUCCESS_THRESHOLD = 0.999


def is_success(t: Trajectory) -> bool:
    return t.reward >= SUCCESS_THRESHOLD


class StepLog:
    """Collects one training step's record."""

    def __init__(self) -> None:
        self.tokens: dict[str, int] = defaultdict(int)
        self.time: dict[str, float] = defaultdict(float)
        self.turns: list[dict[str, Any]] = []
        self.tool_calls = self.tool_errors = self.syncs = self.rollouts = self.overflows = 0
        self.rollouts_by_kind: dict[str, int] = defaultdict(int)  # by the kind of the first generated turn
        self.sync_kl: list[float] = []  # RTPO's kl:tau: KL(inference || train) measured before each stage
        self._ratio_num = self._kl_num = self._tok = 0.0
        self._clip_num = self._kl_ref_num = 0.0
        self._rows = self._zero_rows = 0
        self.mismatch: dict[int, Mismatch] = {}  # by turn index k: the rollout-training mismatch of trained tokens
        self.losses: list[float] = []
        self.grad_norms: list[float] = []
        self.t0 = time.perf_counter()

    @contextmanager
    def phase(self, name: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.time[name] += time.perf_counter() - t0

    def add_trajectories(self, trajs: list[Trajectory]) -> None:
        """Count the generated tokens (by each turn's kind), tool calls and complete rollouts."""
        for t in trajs:
            self.rollouts += 1
            self.overflows += bool(t.info.get("context_overflow"))
            gen = t.generated_turns
            self.rollouts_by_kind[gen[0].kind if gen else "none"] += 1
            self.tool_calls += t.tool_calls
            self.tool_errors += t.tool_errors
            for turn in t.generated_turns:
                self.tokens[turn.kind] += len(turn.action_ids)

    def add_update(self, stats: UpdateStats, advantages: list[float], k: int | None = None, groups: int = 0) -> None:
        n = stats.trained_tokens
        if n > 0 and not math.isnan(stats.ratio_mean):
            self._ratio_num += stats.ratio_mean * n
            self._kl_num += stats.kl_rollout_train * n
            self._clip_num += _finite(stats.clip_frac) * n
            self._kl_ref_num += _finite(stats.kl_ref) * n
            self._tok += n
            self.losses.append(stats.loss)
            self.grad_norms.append(stats.grad_norm)
        for turn, m in stats.mismatch.items():
            self.mismatch[turn] = self.mismatch.get(turn, Mismatch()) + m
        self._rows += len(advantages)
        self._zero_rows += sum(1 for a in advantages if a == 0.0)
        if k is not None:
            self.turns.append({"k": k, "ratio_mean": _nan_none(stats.ratio_mean),
                               "kl_rollout_train": _nan_none(stats.kl_rollout_train),
                               "zero_adv_frac": (sum(a == 0.0 for a in advantages) / len(advantages)) if advantages else None,
                               "groups": groups, "trained_tokens": n})

    def record(self, trunks: list[Trajectory], n_prompts: int, **extra: Any) -> dict[str, Any]:
        rec: dict[str, Any] = {
            "reward_mean": _mean([t.reward for t in trunks]),
            "success_rate": _mean([float(is_success(t)) for t in trunks]),
            "ratio_mean": (self._ratio_num / self._tok) if self._tok else None,
            "kl_rollout_train": (self._kl_num / self._tok) if self._tok else None,
            "clip_frac": (self._clip_num / self._tok) if self._tok else None,
            "kl_ref": (self._kl_ref_num / self._tok) if self._tok else None,
            "zero_adv_frac": (self._zero_rows / self._rows) if self._rows else None,
            "tokens": dict(self.tokens),
            # tokens sampled this step (every generated turn once: a prefix shared by branches or siblings
            # is generated, and counted, once)
            "generated_tokens": int(sum(self.tokens.values())),
            "trained_tokens": int(self._tok),
            "rollouts_per_prompt": self.rollouts / max(1, n_prompts),
            # share of the step's rollouts ended by the context bound (rtpo.rollout.Roller `rows`)
            "context_overflow": (self.overflows / self.rollouts) if self.rollouts else None,
            "rollouts": {k: v / max(1, n_prompts) for k, v in sorted(self.rollouts_by_kind.items())},
            "tool_calls": self.tool_calls,
            "tool_errors": self.tool_errors,
            "syncs": self.syncs,
            "time": {**{k: round(v, 4) for k, v in self.time.items()}, "total": round(time.perf_counter() - self.t0, 4)},
            "turns": sorted(self.turns, key=lambda d: -d["k"]),
            "trunks": trunk_stats(trunks),
        }
        if self.mismatch:   # engine.base.Mismatch: ratio_mean (E = 1 for any mismatch), geo_ratio, abs_dlogp, kl, clip_share
            total = sum(self.mismatch.values(), Mismatch()).summary()
            rec.update({k: total[k] for k in ("geo_ratio", "abs_dlogp", "clip_share") if k in total})
            rec["mismatch"] = [{"k": k, **m.summary()} for k, m in sorted(self.mismatch.items())]
        if self.sync_kl:
            rec["sync_kl"] = list(self.sync_kl)
        if self.losses:
            rec["loss"] = _mean(self.losses)
            rec["grad_norm"] = _mean(self.grad_norms)
        rec.update(extra)
        return rec


def trunk_stats(trunks: list[Trajectory]) -> dict[str, Any]:
    """Failure dynamics of the first-pass trajectories (paper G.3, G.7)."""
    n = len(trunks)
    if n == 0:
        return {"n": 0}
    failed = [t for t in trunks if not is_success(t)]
    calls = sum(t.tool_calls for t in trunks)
    errors = sum(t.tool_errors for t in trunks)
    return {
        "n": n,
        "first_turn_fail_frac": sum(1 for t in failed if len(t.turns) <= 1) / n,
        "no_terminal_frac": sum(1 for t in trunks if t.truncated) / n,
        "failed_len_mean": _mean([len(t.turns) for t in failed]),
        "tool_calls_per_trunk": calls / n,
        "tokens_per_trunk": sum(t.response_tokens for t in trunks) / n,
        "tool_success_rate": (1 - errors / calls) if calls else None,
        "turns_mean": _mean([len(t.turns) for t in trunks]),
    }


def _mean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x is not None and not (isinstance(x, float) and math.isnan(x))]
    return sum(xs) / len(xs) if xs else None


def _finite(x: float | None) -> float:
    return 0.0 if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def _nan_none(x: float) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


def run_summary(recs: list[dict[str, Any]], **head: Any) -> dict[str, Any]:
    """summary.json of a training run: `head` (method, task, seed, ...) plus totals over its step records."""
    return {**head,
            "reward_first": recs[0].get("reward_mean") if recs else None,
            "reward_last": recs[-1].get("reward_mean") if recs else None,
            "tokens_total": sum(sum(r.get("tokens", {}).values()) for r in recs),
            "time_total": sum(r.get("time", {}).get("total", 0.0) for r in recs)}


def strict(obj: Any) -> Any:
    """`obj` with every non-finite float (NaN, +-inf) replaced by None: what the project writes is strict
    JSON (json.dumps would write a bare NaN, which other readers refuse). A training quantity that is
    not finite stops the run before it is written (rtpo.train.check_finite); this is for the rest
    (a mean over nothing)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: strict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [strict(v) for v in obj]
    return obj


def dumps(obj: Any, **kw: Any) -> str:
    """json.dumps of `strict(obj)`, refusing anything else non-finite (allow_nan=False)."""
    return json.dumps(strict(obj), allow_nan=False, **kw)


class JsonlWriter:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, rec: dict[str, Any]) -> None:
        from rtpo.atomic import disk_full

        with disk_full(self.path), self.path.open("a") as f:  # a full disk: DiskFull naming the file
            f.write(dumps(rec, sort_keys=True) + "\n")
            f.flush()

    def read(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]

    def truncate_after(self, step: int) -> None:
        """Drop records of steps > step (a resumed run rewrites them)."""
        recs = [r for r in self.read() if r.get("step", -1) <= step]
        self.path.write_text("".join(dumps(r, sort_keys=True) + "\n" for r in recs))
