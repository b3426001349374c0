"""What a run is built from, given a config: its engine, its envs, its update settings, its seeds, and the
run directories of several seeds in one process. Shared by training (rtpo.train), evaluation
(rtpo.evaluate) and the benchmark scripts, so that they build a run the same way."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rtpo.config import env_options
from rtpo.engine.base import UpdateConfig
from rtpo.inputs import CorruptFileError


def env_factory(env_cfg: dict[str, Any]):
    """Task -> env, built with the env options of an env.<task> section (rtpo.config.env_options)."""
    from rtpo.envs import make_env

    opts = env_options(env_cfg)
    return lambda task: make_env(task, **opts)


def update_config(train: dict[str, Any]) -> UpdateConfig:
    return UpdateConfig(lr=float(train["lr"]), clip_low=float(train["clip"]), clip_high=float(train["clip"]),
                        dual_clip_c=float(train["dual_clip_c"]), kl_coef=float(train["kl_coef"]),
                        entropy_coef=float(train.get("entropy_coef", 0.0)),
                        max_grad_norm=float(train["max_grad_norm"]), weight_decay=float(train["weight_decay"]),
                        epochs=int(train.get("epochs", 1)), mini_batches=int(train.get("mini_batches", 1)),
                        micro_batch_tokens=int(train["micro_batch_tokens"]),
                        old=str(train.get("old", "recompute")),
                        rollout_is_threshold=float(train.get("rollout_is_threshold", 2.0)))


def build_engine(model_dir: str | Path, cfg: dict[str, Any], seed: int, reference: bool):
    from rtpo.engine.local import LocalEngine

    m = cfg.get("model", {})
    torch.set_num_threads(int(m.get("threads", 1) or 1))
    return LocalEngine.from_pretrained(model_dir, seed=seed, reference=reference,
                                       device=str(m.get("device", "auto")), dtype=str(m.get("dtype", "auto")))


def check_model_fits(model_dir: str | Path, cfg: dict[str, Any]) -> None:
    """Refuse, before any work, a model directory that does not fit this config: a base model
    `rtpo base-model` made under other model settings (its sft_summary.json records them: vocabulary,
    layers, widths, positions, source), a tokenizer that cannot be read (named), or a tokenizer with
    more tokens than the model has embedding rows (a swapped tokenizer)."""
    from rtpo.sft import model_settings

    md = Path(model_dir)
    try:
        arch = json.loads((md / "config.json").read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CorruptFileError(md / "config.json", f"cannot be read as the model's config ({e})") from None
    made = md / "sft_summary.json"
    if made.is_file():
        try:
            then = json.loads(made.read_text()).get("model_settings")
        except (UnicodeDecodeError, json.JSONDecodeError, AttributeError) as e:
            raise CorruptFileError(made, f"corrupt JSON ({e})") from None
        now = model_settings(cfg)
        if then is not None and then != now:
            differ = "; ".join(f"model.{k}: base model {then.get(k)!r}, this config {now.get(k)!r}"
                               for k in sorted(set(then) | set(now)) if then.get(k) != now.get(k))
            raise ValueError(f"{md}: this base model was made under other model settings ({differ}); rebuild it "
                             "with `rtpo base-model` under this config, or use the config it was made with")
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(str(md))
    except Exception as e:  # noqa: BLE001 - tokenizers raises its own exception types for a damaged file
        files = ", ".join(str(f) for f in sorted(md.glob("tokenizer*"))) or f"no tokenizer files in {md}"
        raise ValueError(f"{md}: the tokenizer cannot be loaded ({type(e).__name__}: {e}); its files: {files}") from None
    if len(tok) > int(arch.get("vocab_size", 0)):
        raise ValueError(f"{md}: the tokenizer has {len(tok)} tokens but the model embeds only "
                         f"{arch.get('vocab_size')} (config.json vocab_size): a tokenizer of another model?")


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


# ------------------------------------------------------------------------------ several seeds of one cell
class SeedsFailed(ValueError):
    """Some seeds of a multi-seed command failed on their own inputs; the others finished (exit 2)."""


def seed_dirs(out: str | Path, seeds: list[int]) -> list[Path]:
    """The run directory of each seed: `out` with "{seed}" filled in (required for several seeds)."""
    out = str(out)
    if len(seeds) != len(set(seeds)):
        raise ValueError(f"--seed: a seed is given twice ({seeds})")
    if "{seed}" not in out:
        if len(seeds) > 1:
            raise ValueError(f"--out {out}: several seeds need a '{{seed}}' placeholder in --out "
                             "(e.g. results/runs/math/rtpo/seed{seed})")
        return [Path(out)]
    return [Path(out.replace("{seed}", str(s))) for s in seeds]
