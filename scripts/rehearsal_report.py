"""Where the rehearsal's time goes and what each method's training step costs (scripts/rehearse.sh,
docs/rehearsal.md), from the rehearsal's own records only:

  - per rule: jobs, states, mean and total wall, from the fake Slurm's job records (<slurm>/jobs/*.json:
    each job's --comment names its rule; start and end are when the batch script ran);
  - per training job: its fixed start-up (job wall minus the time its steps took, from metrics.jsonl's
    `time.total`): Snakemake on the node, Ray, vLLM, the verl workers, the final export;
  - per method (main grid, one task at a time): per training step the generated tokens (by kind:
    chain, trunk, sibling, continuation, branch), rollouts per prompt, weight pushes (`syncs`), update
    passes (`turns`: RTPO's stages, SeeUPO's turns; one for the flat methods), phase times; beside it
    RTPO over GRPO against the paper's G.4 (+40 % training-generation tokens, +41.3 % wall-clock).

    python scripts/rehearsal_report.py --slurm results/rehearsal/slurm --out results/rehearsal

Writes <out>/rules.csv, <out>/cost_per_method.csv and <out>/rehearsal_report.md; prints the markdown.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

PAPER_G4 = {"generated_tokens": 0.40, "wall_clock": 0.413}  # RTPO over GRPO, paper G.4


def rule_of(job: dict) -> str:
    m = re.match(r"rule_(.+?)_wildcards_", job.get("opts", {}).get("--comment", "") + "_wildcards_")
    return m.group(1) if m else "?"


def jobs(slurm: Path) -> list[dict]:
    out = []
    for p in sorted((slurm / "jobs").glob("*.json"), key=lambda p: int(p.stem) if p.stem.isdigit() else 0):
        j = json.loads(p.read_text())
        if "start" in j and "end" in j:
            out.append({**j, "id": p.stem, "rule": rule_of(j), "wall_s": j["end"] - j["start"]})
    return out


def rules_table(js: list[dict]) -> list[dict]:
    by = defaultdict(list)
    for j in js:
        by[j["rule"]].append(j)
    rows = []
    for rule, group in sorted(by.items(), key=lambda kv: -sum(j["wall_s"] for j in kv[1])):
        walls = [j["wall_s"] for j in group]
        states = defaultdict(int)
        for j in group:
            states[j["state"]] += 1
        rows.append({"rule": rule, "jobs": len(group), "mean_s": round(statistics.mean(walls), 1),
                     "total_min": round(sum(walls) / 60, 1), "states": " ".join(f"{k} {v}" for k, v in sorted(states.items()))})
    return rows


def failed_for_good(js: list[dict], attempts: int) -> list[str]:
    """The jobs (rule and wildcards, the plugin's --comment) whose every attempt so far failed and that had all
    `attempts` (1 + the profile's retries): failures no retry will mend."""
    by = defaultdict(list)
    for j in js:
        by[j.get("opts", {}).get("--comment", j["id"])].append(j)
    return sorted(name for name, g in by.items()
                  if len(g) >= attempts and max(g, key=lambda j: j["start"])["state"] != "COMPLETED")


def stuck(slurm: Path, minutes: float, now: float) -> list[str]:
    """The jobs still RUNNING (rule and wildcards) that started more than `minutes` before `now`: a rehearsal job
    takes 1-5 min, so one running for half an hour is hung, not slow (a vLLM queue reader waiting for ever on a
    lost notification did exactly that at f09a27d, and CI's time limit then cut the slice with no job failed)."""
    out = []
    for p in sorted((slurm / "jobs").glob("*.json")):
        j = json.loads(p.read_text())
        if j.get("state") == "RUNNING" and "start" in j and now - j["start"] > minutes * 60:
            out.append(f"{j.get('opts', {}).get('--comment', p.stem)} (job {p.stem}, running "
                       f"{(now - j['start']) / 60:.0f} min)")
    return out


def step_costs(metrics: Path) -> dict | None:
    recs = [json.loads(x) for x in metrics.read_text().splitlines() if x.strip()] if metrics.exists() else []
    if not recs:
        return None
    n = len(recs)
    kinds = defaultdict(float)
    phases = defaultdict(float)
    for r in recs:
        for k, v in (r.get("tokens") or {}).items():
            kinds[k] += v / n
        for k, v in (r.get("time") or {}).items():
            phases[k] += float(v) / n
    return {
        "steps": n,
        "generated_tokens": sum(r.get("generated_tokens", 0) for r in recs) / n,
        "tokens_by_kind": {k: round(v, 1) for k, v in sorted(kinds.items())},
        "rollouts_per_prompt": sum(sum((r.get("rollouts") or {}).values()) or r.get("rollouts_per_prompt", 0)
                                   for r in recs) / n,
        "weight_pushes": sum(r.get("syncs", 0) for r in recs) / n,
        "update_passes": sum(max(1, len(r.get("turns") or [])) for r in recs) / n,
        "trained_tokens": sum(r.get("trained_tokens", 0) for r in recs) / n,
        "tool_calls": sum(r.get("tool_calls", 0) for r in recs) / n,
        "step_s": phases.get("total", 0.0),
        "phases_s": {k: round(v, 2) for k, v in sorted(phases.items()) if k != "total"},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--slurm", type=Path, default=Path("results/rehearsal/slurm"))
    ap.add_argument("--results", type=Path, default=Path("results"))
    ap.add_argument("--out", type=Path, default=Path("results/rehearsal"))
    ap.add_argument("--since", type=float, default=0.0, help="only jobs started after this time (seconds since the "
                    "epoch; rehearse.sh passes its own start, so an earlier run's jobs are left out)")
    ap.add_argument("--check-failed", action="store_true", help="print nothing else; exit 1 if a job failed on "
                    "every attempt it was given (.ci/run, after its time limit cut a slice)")
    ap.add_argument("--attempts", type=int, default=4, help="attempts per job: 1 + slurm/profile.yaml's retries")
    ap.add_argument("--stuck-min", type=float, default=30.0, help="with --check-failed: a job still running after "
                    "this many minutes counts as hung (a rehearsal job takes 1-5 min)")
    args = ap.parse_args(argv)
    js = [j for j in jobs(args.slurm) if j["start"] >= args.since]
    if args.check_failed:
        bad = failed_for_good(js, args.attempts)
        for name in bad:
            print(f"failed on all {args.attempts} attempts: {name}")
        hung = stuck(args.slurm, args.stuck_min, time.time())
        for name in hung:
            print(f"still running after {args.stuck_min:g} min, hung: {name}")
        return 1 if bad or hung else 0
    lines = ["# The rehearsal: where its time went", ""]
    if js:
        span = (max(j["end"] for j in js) - min(j["start"] for j in js)) / 60
        lines += [f"{len(js)} Slurm jobs, {sum(j['state'] == 'COMPLETED' for j in js)} COMPLETED; "
                  f"{sum(j['wall_s'] for j in js) / 60:.1f} min of job wall over {span:.1f} min (first start to last end).", "",
                  "| rule | jobs | mean wall (s) | total (min) | states |", "|---|---:|---:|---:|---|"]
        rows = rules_table(js)
        lines += [f"| {r['rule']} | {r['jobs']} | {r['mean_s']} | {r['total_min']} | {r['states']} |" for r in rows]
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "rules.csv").write_text("rule,jobs,mean_s,total_min,states\n" + "".join(
            f"{r['rule']},{r['jobs']},{r['mean_s']},{r['total_min']},{r['states']}\n" for r in rows))
    # per method: the main grid's runs
    cost_rows = []
    runs = [(m, m.parts[-4], m.parts[-3]) for m in sorted(args.results.glob("runs/*/*/seed*/metrics.jsonl"))]
    # ablation arms: results/ablations/<study>/<arm>/<task>/<method>/seed<S>/metrics.jsonl
    runs += [(m, m.parts[-4], f"{m.parts[-3]} ({m.parts[-6]} {m.parts[-5]})")
             for m in sorted(args.results.glob("ablations/*/*/*/*/seed*/metrics.jsonl"))]
    for metrics, task, method in runs:
        c = step_costs(metrics)
        summary = metrics.parent / "summary.json"
        wall = json.loads(summary.read_text()).get("wall_s_this_run") if summary.exists() else None
        if c:
            startup = (wall - c["step_s"] * c["steps"]) if wall else None
            cost_rows.append({"task": task, "method": method, **c, "run_wall_s": wall, "startup_s": startup})
    if cost_rows:
        lines += ["", "# Cost of a training step, per method (means over the run's steps)", "",
                  "| task | method | steps | generated tokens | by kind | rollouts/prompt | weight pushes | update passes "
                  "| trained tokens | tool calls | step (s) | phases (s) | run wall (s) | start-up (s) |",
                  "|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---|---:|---:|"]
        for r in cost_rows:
            lines.append(f"| {r['task']} | {r['method']} | {r['steps']} | {r['generated_tokens']:.0f} | "
                         f"{', '.join(f'{k} {v:.0f}' for k, v in r['tokens_by_kind'].items())} | {r['rollouts_per_prompt']:.1f} | "
                         f"{r['weight_pushes']:.1f} | {r['update_passes']:.1f} | {r['trained_tokens']:.0f} | {r['tool_calls']:.1f} | "
                         f"{r['step_s']:.1f} | {', '.join(f'{k} {v}' for k, v in r['phases_s'].items())} | "
                         f"{r['run_wall_s'] or float('nan'):.0f} | {r['startup_s'] or float('nan'):.0f} |")
        lines += ["", "RTPO over GRPO, per task (paper G.4: +40 % training-generation tokens, +41.3 % wall-clock):", ""]
        by = {(r["task"], r["method"]): r for r in cost_rows}
        for task in sorted({r["task"] for r in cost_rows}):
            a, b = by.get((task, "rtpo")), by.get((task, "grpo"))
            if a and b and b["generated_tokens"] and b["step_s"]:
                lines.append(f"- {task}: generated tokens per step {a['generated_tokens'] / b['generated_tokens'] - 1:+.0%}, "
                             f"step wall {a['step_s'] / b['step_s'] - 1:+.0%}, weight pushes {a['weight_pushes']:.3g} vs "
                             f"{b['weight_pushes']:.3g}, update passes {a['update_passes']:.3g} vs {b['update_passes']:.3g}")
        args.out.mkdir(parents=True, exist_ok=True)
        keys = ["task", "method", "steps", "generated_tokens", "rollouts_per_prompt", "weight_pushes", "update_passes",
                "trained_tokens", "tool_calls", "step_s", "run_wall_s", "startup_s"]
        (args.out / "cost_per_method.csv").write_text(",".join(keys + ["tokens_by_kind", "phases_s"]) + "\n" + "".join(
            ",".join(str(r[k]) for k in keys) + f",\"{json.dumps(r['tokens_by_kind'])}\",\"{json.dumps(r['phases_s'])}\"\n"
            for r in cost_rows).replace('""', '"'))
    text = "\n".join(lines) + "\n"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "rehearsal_report.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
