"""The training loop every method shares: `rtpo train --method M --task T --config C --seed S --out DIR`.

Per step: draw `prompts_per_step` training tasks (a deterministic function of seed and step, so a
resumed run draws the same ones), `method.step(...)`, append the record to metrics.jsonl, and
checkpoint every `checkpoint_every` steps. A restarted run resumes from the last checkpoint:
metrics of steps after it are dropped and recomputed, so the log matches an uninterrupted run.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rtpo.progress import progress as tqdm

from rtpo.config import method_settings
from rtpo.engine.base import SamplingParams, UpdateConfig
from rtpo.envs.base import Task
from rtpo.instrument import JsonlWriter, run_summary
from rtpo.rollout import Roller

ENV_OPTION_KEYS = ("max_turns", "max_obs_chars", "top_k")


def load_tasks(path: str | Path) -> list[Task]:
    """The task file of a split (rtpo.data.read_tasks), which must exist and hold at least one task."""
    from rtpo.data import read_tasks

    if not Path(path).exists():
        raise FileNotFoundError(f"task file not found: {path}")
    tasks = read_tasks(path)
    if not tasks:
        raise ValueError(f"{path}: no tasks")
    return tasks


def env_factory(env_cfg: dict[str, Any]):
    from rtpo.envs import make_env

    opts = {k: v for k, v in env_cfg.items() if k in ENV_OPTION_KEYS}
    return lambda task: make_env(task, **opts)


def update_config(train: dict[str, Any]) -> UpdateConfig:
    return UpdateConfig(lr=float(train["lr"]), clip_low=float(train["clip"]), clip_high=float(train["clip"]),
                        dual_clip_c=float(train["dual_clip_c"]), kl_coef=float(train["kl_coef"]),
                        entropy_coef=float(train.get("entropy_coef", 0.0)),
                        max_grad_norm=float(train["max_grad_norm"]), weight_decay=float(train["weight_decay"]),
                        epochs=int(train.get("epochs", 1)), micro_batch_tokens=int(train["micro_batch_tokens"]))


def build_engine(model_dir: str | Path, cfg: dict[str, Any], seed: int, reference: bool):
    from rtpo.engine.local import LocalEngine

    m = cfg.get("model", {})
    torch.set_num_threads(int(m.get("threads", 1) or 1))
    return LocalEngine.from_pretrained(model_dir, seed=seed, reference=reference,
                                       device=str(m.get("device", "auto")), dtype=str(m.get("dtype", "auto")))


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def train(method: str, task: str, cfg: dict[str, Any], seed: int, out: str | Path, model_dir: str | Path,
          train_file: str | Path, progress: bool = True) -> dict[str, Any]:
    from rtpo.methods.registry import get_method

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    s = method_settings(cfg, method, task)
    tr, mcfg, env_cfg, psi = s["train"], s["method"], s["env"], s["psi"]
    seed_everything(seed)
    tasks = load_tasks(train_file)
    engine = build_engine(model_dir, cfg, seed, reference=float(tr["kl_coef"]) > 0)
    params = SamplingParams(max_new_tokens=int(env_cfg["max_new_tokens"]), temperature=float(tr["temperature"]))
    roller = Roller(engine, env_factory(env_cfg), psi, params)
    algo = get_method(method)(engine, roller, mcfg, update_config(tr), float(tr["temperature"]))

    log = JsonlWriter(out / "metrics.jsonl")
    ckpt = out / "checkpoint"
    start = 0
    if (ckpt / "engine.pt").exists():
        engine.load(ckpt)
        state = json.loads((ckpt / "state.json").read_text())
        start = int(state["step"]) + 1
        algo.load_state(state.get("method", {}))
        log.truncate_after(state["step"])
    elif log.path.exists():
        log.path.unlink()  # no checkpoint: start over

    steps, n = int(tr["steps"]), int(tr["prompts_per_step"])
    every = int(tr.get("checkpoint_every", 1))
    t0 = time.perf_counter()
    bar = tqdm(range(start, steps), desc=f"train {method}/{task}/seed{seed}", disable=not progress,
               initial=start, total=steps)
    for step in bar:
        batch = random.Random(f"{seed}:{step}").sample(tasks, min(n, len(tasks)))
        rec = algo.step(batch, step)
        rec.update(step=step, method=method, task=task, seed=seed, lr=float(tr["lr"]),
                   weight_version=engine.weight_version, train_version=engine.train_version, psi=psi)
        log.write(rec)
        bar.set_postfix(reward=f"{rec['reward_mean']:.2f}" if rec.get("reward_mean") is not None else "-")
        if (step + 1) % every == 0 or step + 1 == steps:
            engine.save(ckpt)
            (ckpt / "state.json").write_text(json.dumps({"step": step, "method": algo.state()}))
    engine.export(out / "final")
    summary = run_summary(log.read(), method=method, task=task, seed=seed, steps=steps, psi=psi,
                          wall_s_this_run=time.perf_counter() - t0)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary
