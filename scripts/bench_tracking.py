"""What TensorBoard tracking costs a local-engine run (rtpo.tracking.RunTracker, logging.backends).

    .venv/bin/python scripts/bench_tracking.py [--steps 200]

Prints the one-off cost (importing TensorBoard's event protos and opening the events file, torch
already imported as in `rtpo train`) and the cost per training step of logging a record shaped like the
CPU default's RTPO records (46 scalars: rtpo/..., turns, mismatch, tokens, time) with a flush.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def record(step: int) -> dict:
    x = 0.001 * step
    return {"step": step, "seed": 0, "method": "rtpo", "task": "math", "psi": "qwen3", "lr": 1e-4,
            "reward_mean": 0.2 + x, "success_rate": 0.2, "ratio_mean": 1.0, "kl_rollout_train": 1e-4 + x,
            "clip_frac": 0.01, "kl_ref": 0.0, "zero_adv_frac": 0.5, "generated_tokens": 4000, "trained_tokens": 900,
            "rollouts_per_prompt": 11.0, "context_overflow": 0.0, "tool_calls": 12, "tool_errors": 1, "syncs": 4,
            "loss": 0.1, "grad_norm": 0.5, "geo_ratio": 1.0, "abs_dlogp": 0.001, "clip_share": 0.0,
            "tokens": {"trunk": 1000, "sibling": 2000, "continuation": 1000},
            "rollouts": {"trunk": 1.0, "sibling": 10.0},
            "time": {"rollout": 1.2, "siblings": 3.4, "update": 2.2, "total": 7.0},
            "trunks": {"n": 8, "first_turn_fail_frac": 0.1, "no_terminal_frac": 0.0, "failed_len_mean": 2.0,
                       "tool_calls_per_trunk": 1.5, "tokens_per_trunk": 120.0, "tool_success_rate": 0.9,
                       "turns_mean": 2.5},
            "turns": [{"k": k, "ratio_mean": 1.0, "kl_rollout_train": 1e-4, "zero_adv_frac": 0.5, "groups": 8,
                       "trained_tokens": 300} for k in (2, 1, 0)],
            "mismatch": [{"k": 0, "ratio_mean": 1.0, "geo_ratio": 1.0, "abs_dlogp": 0.001, "kl": 1e-4,
                          "clip_share": 0.0, "tokens": 300}]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=200)
    a = ap.parse_args(argv)
    import torch  # noqa: F401  (rtpo train has it imported already)

    from rtpo.tracking import RunTracker, scalars

    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        tr = RunTracker(d, ["console", "tensorboard"], {"key": {"scope": "main", "variant": "", "task": "math",
                                                                  "method": "rtpo", "seed": 0}})
        t1 = time.perf_counter()
        for s in range(a.steps):
            tr.log(record(s))
        t2 = time.perf_counter()
        tr.close()
        size = sum(p.stat().st_size for p in Path(d).iterdir())
    print(f"tensorboard protos + events file: {t1 - t0:.2f} s once per process")
    print(f"per step ({len(scalars(record(0)))} scalars + flush): {(t2 - t1) / a.steps * 1e3:.2f} ms "
          f"over {a.steps} steps; events file {size / a.steps:.0f} bytes per step")
    return 0


if __name__ == "__main__":
    sys.exit(main())
