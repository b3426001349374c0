"""Long learning-curve runs outside the DAG, and their plot (where does each method saturate?).

    # run (one seed, every trained method x task, `--steps` steps; two at a time on 2 cores)
    .venv/bin/python scripts/learning_curves.py run --out /tmp/lc --steps 120 --prompts 8 --jobs 2
    # plot + summary table of what is there (runs may still be going)
    .venv/bin/python scripts/learning_curves.py plot --out /tmp/lc

`run` calls `rtpo train` for each cell with the CPU default config and the per-prompt budgets of
`--budget` (default: config/config.yaml's, per-task overrides included), writing
<out>/runs/<task>/<method>/metrics.jsonl. `plot` draws training reward (moving average over
`--window` steps) per task, one line per method, to <out>/learning_curves.png, and prints per cell:
mean reward over the first and the last fifth of the steps, their difference, and the first step
after which the moving average stays within 0.02 of its final value (a crude saturation point).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TASKS = ["math", "search", "airline"]
METHODS = ["rtpo", "grpo", "tree_grpo", "arpo", "seeupo"]


def read(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def moving(xs: list[float], w: int) -> list[float]:
    out, s = [], 0.0
    for i, x in enumerate(xs):
        s += x
        if i >= w:
            s -= xs[i - w]
        out.append(s / min(i + 1, w))
    return out


def cmd_run(a: argparse.Namespace) -> None:
    out = Path(a.out)
    cells = [(t, m) for t in a.tasks for m in a.methods]

    def one(cell):
        t, m = cell
        d = out / "runs" / t / m
        d.mkdir(parents=True, exist_ok=True)
        cmd = [str(ROOT / ".venv/bin/rtpo"), "train", "--method", m, "--task", t, "--config", a.config,
               "--seed", str(a.seed), "--out", str(d), "--model", a.model,
               "--train-file", str(Path(a.data) / t / "train.jsonl"),
               "--set", f"train.steps={a.steps}", "--set", f"train.prompts_per_step={a.prompts}",
               "--set", f"train.checkpoint_every={max(1, a.steps // 4)}"] + sum((["--set", s] for s in a.set), [])
        env = dict(os.environ, PYTHONHASHSEED="0", TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1",
                   RTPO_PROGRESS="lines")
        with open(d / "log.txt", "w") as log:
            rc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
        print(f"{t}/{m}: exit {rc}", flush=True)

    with ThreadPoolExecutor(a.jobs) as pool:
        list(pool.map(one, cells))


def cmd_plot(a: argparse.Namespace) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(a.out)
    fig, axes = plt.subplots(1, len(a.tasks), figsize=(5 * len(a.tasks), 3.6), squeeze=False)
    print(f"{'task':8} {'method':10} {'steps':>5} {'first 1/5':>9} {'last 1/5':>9} {'delta':>7} {'saturates':>9} "
          f"{'zero-adv':>8} {'rollouts/prompt':>15}")
    for ax, t in zip(axes[0], a.tasks):
        for m in a.methods:
            recs = read(out / "runs" / t / m / "metrics.jsonl")
            if not recs:
                continue
            r = [float(x.get("reward_mean") or 0.0) for x in recs]
            sm = moving(r, a.window)
            ax.plot(range(len(sm)), sm, label=m, lw=1.6 if m == "rtpo" else 1.0)
            n = max(1, len(r) // 5)
            first, last = sum(r[:n]) / n, sum(r[-n:]) / n
            sat = next((i for i in range(len(sm)) if all(abs(v - sm[-1]) <= 0.02 for v in sm[i:])), len(sm))
            za = [x.get("zero_adv_frac") for x in recs if x.get("zero_adv_frac") is not None]
            rpp = [x.get("rollouts_per_prompt") for x in recs if x.get("rollouts_per_prompt") is not None]
            print(f"{t:8} {m:10} {len(r):5d} {first:9.3f} {last:9.3f} {last - first:+7.3f} {sat:9d} "
                  f"{(sum(za) / len(za)) if za else float('nan'):8.2f} {(sum(rpp) / len(rpp)) if rpp else float('nan'):15.1f}")
        ax.set_title(f"{t}: training reward (moving average, {a.window} steps)")
        ax.set_xlabel("step")
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "learning_curves.png", dpi=120)
    print(f"figure: {out / 'learning_curves.png'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("run", "plot"):
        sp = sub.add_parser(name)
        sp.add_argument("--out", required=True)
        sp.add_argument("--tasks", nargs="+", default=TASKS)
        sp.add_argument("--methods", nargs="+", default=METHODS)
    r = sub.choices["run"]
    r.add_argument("--steps", type=int, default=120)
    r.add_argument("--prompts", type=int, default=8)
    r.add_argument("--jobs", type=int, default=2)
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--config", default="config/config.yaml")
    r.add_argument("--model", default="results/models/base")
    r.add_argument("--data", default="results/data")
    r.add_argument("--set", action="append", default=[], help="extra --set KEY=VALUE for every run")
    sub.choices["plot"].add_argument("--window", type=int, default=10)
    a = ap.parse_args()
    {"run": cmd_run, "plot": cmd_plot}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
