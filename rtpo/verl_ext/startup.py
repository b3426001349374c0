"""Start-up arithmetic of the paper-scale verl path: `rtpo check-config`, and the DAG's start.

For every (method, task) cell a config with ``engine: verl`` trains -- the main grid and the
ablation cells the DAG trains (`rtpo.experiment`) -- `check_config` builds the Hydra overrides the launcher
passes to verl on GPUs (``launch.verl_overrides(..., cpu=False)``), parses them, fills in verl
0.9.1's defaults for the keys they leave alone, and checks what verl 0.9.1, vLLM and rtpo's own
trainer enforce at start-up (or mid-run, after hours of rollout), plus a per-GPU memory estimate,
the attention implementation against the GPU environment spec (environment.yml and the `gpu`
extra of pyproject.toml) and, given a Slurm profile, its resources per rule. Each rule below names
the source it mirrors (paths relative to verl's package directory); docs/verl.md, "Start-up
arithmetic (paper scale)", has the table of config/paper.yaml and the memory arithmetic.

Pure functions on dicts: no verl, torch or vLLM import, so the check runs on a CPU box, in CI and
in `snakemake -n` (workflow/rules/common.smk).

Rules of a training cell (`check_cell`), n = trainer.n_gpus_per_node x trainer.nnodes GPUs:
  tokens       P + R <= actor ppo_max_token_len_per_gpu x sp (and the same for the rollout's and
               the ref's log_prob_max_token_len_per_gpu): utils/seqlen_balancing.py
               rearrange_micro_batches (``assert max_token_len >= max_seq_len``) with
               workers/engine/utils.py prepare_micro_batches (max_token_len = per-GPU budget x
               ulysses sp size); rtpo's trainer checks the same at start-up
               (rtpo/verl_ext/trainer.py RTPOEngineTrainer._setup)
  positions    P + R <= the model's max_position_embeddings: the rollout's max_model_len defaults to
               it and may not exceed it (workers/rollout/vllm_rollout/vllm_async_server.py
               _validate_configs), and a request with no room left is refused (generate)
  row cap      P + R <= verl.max_context when set (flat and full-history rows are cut to it by
               `launch.lengths`; a turn row above it is a setting error)
  one turn     flat / full-history rows hold at least one turn: R >= env.<task>.max_new_tokens
  tp           n % rollout TP == 0 (workers/engine_workers.py init_model: rollout world size) and
               attention heads % TP == 0 (vLLM ModelConfig.verify_with_parallel_config)
  sp           n % sp == 0 (workers/engine/fsdp/transformer_impl.py _init_device_mesh: (dp, sp) mesh);
               heads % sp == 0 and (kv heads % sp == 0 or sp % kv heads == 0)
               (models/transformers/monkey_patch.py apply_monkey_patch asserts); sp > 1 needs
               use_remove_padding (workers/config/actor.py FSDPActorConfig.validate,
               transformer_impl.py FSDPEngine.__init__) and a flash attention implementation
               (monkey_patch.py replaces only ``_flash_attention_forward`` for Ulysses: sdpa and
               eager would attend within each rank's slice of the sequence)
  attention    the implementation named (verl's default when unnamed: flash_attention_2,
               workers/config/model.py HFModelConfig.__post_init__) is installed by the GPU
               environment spec: sdpa and eager come with torch; flash_attention_2 needs flash-attn
  fused        use_fused_kernels with FSDP2 and an untied lm_head fails: the fused forward reads
               ``lm_head.weight`` directly (models/transformers/dense_common.py
               forward_with_torch_backend) while FSDP2 wraps an untied lm_head as its own unit
               (utils/fsdp_utils.py _select_fsdp2_wrap_targets), so the weight is a sharded DTensor
               there ("aten.mm.default got mixed torch.Tensor and DTensor", reproduced with verl
               0.9.1 on 2 CPU ranks: tests/test_startup_check.py)
  batch        chain trainer: data.train_batch_size x rollout.n is a multiple of
               lcm(dp, ppo_mini_batch_size x rollout.n), else verl pads the batch with dummy rows
               (trainer/ppo/v1/trainer_base.py _get_required_batch_multiple, _balance_batch)
  memory       the per-GPU estimate (`gpu_memory`) <= verl.gpu_memory_gib, with the rollout servers
               asleep while the actor trains; and awake: gpu_memory_utilization x the GPU plus the
               actor's resident state fits (`vllm_awake`)
Evaluation (`check_eval`): max_model_len <= the model's positions, attention heads % TP == 0, weights
and one max_model_len sequence of KV cache fit eval_gpu_memory_utilization of a GPU.
Slurm profile and sizing (rtpo.verl_ext.sizing, `check_profile`): per rule, the GPUs requested (a job
total, or per node: gres / --gpus-per-node) >= what the job needs (train: n_gpus_per_node x nnodes;
evaluate: TP x eval_replicas), nodes == verl.nnodes, mem_mb >= the host-RAM estimate (`host_memory`:
vLLM sleep level 1 of the `vllm_keep` rollout included), cpus_per_task >= the processes, runtime; every
job sized -- steps per job, jobs per run against 1 + retries, evaluation shards -- from the pilot's
measurements (results/pilot/pilot.json), else E.3's anchor, else stated constants, each figure with its
source, and the DAG's GPU-hours and critical path in one line. Estimates, printed, never failing: per cell
the shared-filesystem disk of a run (`checkpoint_disk`: one checkpoint of the actor's save_contents x
train.checkpoint_keep + final/) and the config's total over its runs; the step time at the caps
(`run_time`: generated tokens per step at the caps / verl.step_tokens_per_gpu_s x GPUs), which warns when
a rule's longest run exceeds the profile's runtime; what the config downloads unpinned (rtpo.data.pins).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rtpo.verl_ext.budget import (  # noqa: F401  (the estimates, re-exported: startup.gpu_memory, ...)
    DTYPE_BYTES, ENTROPY_GRAD_BYTES, FLASH_ATTENTION, TORCH_ATTENTION, GB, GIB, MEMORY, MIB, CHECKPOINT_WRITE_GB_S, E3_SOURCE, STARTUP_MIN, STEP_TOKENS_PER_GPU_S, CheckError, Disk,
    GpuMemory, MemoryModel, ModelShape, RunTime, checkpoint_disk, entropy_grad_kind, entropy_patch_active, gpu_memory,
    host_memory, rollout_tokens, run_time, vllm_awake)
from rtpo.verl_ext.gpu_env import EnvSpec, env_spec
from rtpo.verl_ext.sizing import (  # noqa: F401  (the profile's checks and the sizing, re-exported: startup.load_profile, ...)
    PROFILE_SETTINGS, TRAIN_MIN_RUNTIME, Finding, check_profile, disk_and_time_lines, job_progress, load_profile,
    read_pilot, size_cells, sizing_lines)

# --------------------------------------------------------------------------------------------------
# verl 0.9.1's defaults for the keys the launcher may leave alone (trainer/config/_generated_ppo_trainer.yaml)
# --------------------------------------------------------------------------------------------------
VERL_DEFAULTS: dict[str, Any] = {
    "actor_rollout_ref.actor.use_dynamic_bsz": False,
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": 16384,
    "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu": None,  # oc.select -> the actor's
    "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu": None,  # oc.select -> the actor's
    "actor_rollout_ref.actor.ulysses_sequence_parallel_size": 1,
    "actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size": 1,
    "actor_rollout_ref.actor.strategy": "fsdp",
    "actor_rollout_ref.actor.entropy_from_logits_with_chunking": False,
    "actor_rollout_ref.actor.entropy_from_logits_chunk_size": 2048,
    "actor_rollout_ref.actor.entropy_checkpointing": False,
    "actor_rollout_ref.actor.entropy_coeff": 0.0,
    "actor_rollout_ref.actor.fsdp_config.model_dtype": "fp32",
    "actor_rollout_ref.actor.fsdp_config.param_offload": False,
    "actor_rollout_ref.actor.fsdp_config.optimizer_offload": False,
    "actor_rollout_ref.actor.use_kl_loss": False,
    "actor_rollout_ref.model.use_remove_padding": True,
    "actor_rollout_ref.model.use_fused_kernels": False,
    "actor_rollout_ref.model.enable_gradient_checkpointing": True,
    "actor_rollout_ref.model.override_config.attn_implementation": "flash_attention_2",  # workers/config/model.py
    "actor_rollout_ref.rollout.name": "vllm",
    "actor_rollout_ref.rollout.tensor_model_parallel_size": 2,
    "actor_rollout_ref.rollout.gpu_memory_utilization": 0.5,
    "actor_rollout_ref.rollout.max_model_len": None,
    "actor_rollout_ref.rollout.n": 1,
    "actor_rollout_ref.rollout.enforce_eager": False,
    "actor_rollout_ref.rollout.temperature": 1.0,
    "trainer.n_gpus_per_node": 8,
    "trainer.nnodes": 1,
    "trainer.save_freq": -1,
    "trainer.max_actor_ckpt_to_keep": None,  # every checkpoint kept
    "trainer.total_training_steps": None,
    "actor_rollout_ref.actor.checkpoint.save_contents": ["model", "optimizer", "extra"],
}


# --------------------------------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------------------------------
KNOWN_MODELS = {
    "Qwen/Qwen3-8B": ModelShape("Qwen/Qwen3-8B", layers=36, hidden=4096, intermediate=12288, heads=32, kv_heads=8,
                                head_dim=128, vocab=151936, max_positions=40960, tied=False),
    "Qwen/Qwen3-4B": ModelShape("Qwen/Qwen3-4B", layers=36, hidden=2560, intermediate=9728, heads=32, kv_heads=8,
                                head_dim=128, vocab=151936, max_positions=40960, tied=True),
    "Qwen/Qwen3-0.6B": ModelShape("Qwen/Qwen3-0.6B", layers=28, hidden=1024, intermediate=3072, heads=16, kv_heads=8,
                                  head_dim=128, vocab=151936, max_positions=40960, tied=True),
}


def model_shape(cfg: Mapping[str, Any], root: Path) -> ModelShape:
    """The model of a config: model.path's config.json when it exists, else the table of known hub ids
    (model.hub_id), else the tiny model's section (model.source tiny)."""
    m = cfg.get("model") or {}
    path = m.get("path")
    if path:
        p = Path(path) if Path(path).is_absolute() else root / path
        if (p / "config.json").exists():
            return ModelShape.from_hf(str(p), json.loads((p / "config.json").read_text()))
    if m.get("hub_id") in KNOWN_MODELS:
        return KNOWN_MODELS[m["hub_id"]]
    if m.get("source") == "tiny":
        t = m["tiny"]
        return ModelShape("tiny", int(t["num_layers"]), int(t["hidden_size"]), int(t["intermediate_size"]),
                          int(t["num_heads"]), int(t["num_kv_heads"]), int(t["hidden_size"]) // int(t["num_heads"]),
                          int(m["vocab_size"]), int(t["max_position"]), True, 4)  # saved in fp32
    raise CheckError(f"model.hub_id {m.get('hub_id')!r}: unknown to rtpo.verl_ext.startup.KNOWN_MODELS and "
                     f"model.path {path!r} has no config.json: add the model's shape to the table")


# --------------------------------------------------------------------------------------------------
# The overrides
# --------------------------------------------------------------------------------------------------
_INT = re.compile(r"[-+]?[0-9]+")
_FLOAT = re.compile(r"[-+]?([0-9]*\.[0-9]+|[0-9]+\.?[0-9]*)([eE][-+]?[0-9]+)?")
_LITERALS = {"true": True, "false": False, "True": True, "False": False, "null": None, "None": None, "": None}


def _value(val: str) -> Any:
    """A Hydra override value: the scalars by hand (fast), anything else as YAML."""
    if val in _LITERALS:
        return _LITERALS[val]
    if _INT.fullmatch(val):
        return int(val)
    if _FLOAT.fullmatch(val):
        return float(val)
    if val[:1] in "[{'\"":
        try:
            return yaml.safe_load(val)
        except yaml.YAMLError:
            return val
    return val


def parse_overrides(overrides: Iterable[str]) -> dict[str, Any]:
    """Hydra overrides ``[+]key=value`` -> {key: value} (values parsed as YAML; the last one wins)."""
    out: dict[str, Any] = {}
    for o in overrides:
        key, _, val = str(o).lstrip("+~").partition("=")
        out[key] = _value(val)
    return out


class Overrides(dict):
    """Parsed overrides with verl's defaults (VERL_DEFAULTS) behind them."""

    def __missing__(self, key: str) -> Any:
        if key not in VERL_DEFAULTS:
            raise KeyError(key)
        return VERL_DEFAULTS[key]

    def sp(self) -> int:
        # FSDPActorConfig.__post_init__ copies the deprecated actor-level size into fsdp_config when > 1
        return max(int(self["actor_rollout_ref.actor.ulysses_sequence_parallel_size"]),
                   int(self["actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size"]))

    def budget(self, role: str) -> int:
        actor = int(self["actor_rollout_ref.actor.ppo_max_token_len_per_gpu"])
        if role == "actor":
            return actor
        v = self[f"actor_rollout_ref.{role}.log_prob_max_token_len_per_gpu"]
        return actor if v is None else int(v)


# --------------------------------------------------------------------------------------------------
# Cells and findings
# --------------------------------------------------------------------------------------------------
@dataclass
class CellReport:
    cell: str
    method: str
    task: str
    values: dict[str, Any]
    memory: GpuMemory | None
    findings: list[Finding] = field(default_factory=list)
    disk: Disk | None = None
    time: RunTime | None = None
    runs: int = 1  # runs of this setting (seeds)
    sizing: dict[str, Any] | None = None  # step, start-up, checkpoint write / read: sizing.Fig (sizing.size_cells)

    @property
    def ok(self) -> bool:
        return not self.findings


@dataclass
class Report:
    engine: str
    cells: list[CellReport] = field(default_factory=list)
    evals: list[CellReport] = field(default_factory=list)
    resources: list[dict[str, Any]] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    warnings: list[Finding] = field(default_factory=list)  # printed, never failing (the runtime estimate)
    note: str = ""
    untrained_final: float = 0.0  # bytes of the untrained runs' final/ (vanilla: a copy of the base model)
    pilot: dict | None = None     # results/pilot/pilot.json when it was measured under this config
    pilot_note: str = ""          # what was read (or why nothing was)
    eval_rows: list[dict[str, Any]] = field(default_factory=list)  # sizing of each evaluation rule and task
    eval_gpus: int = 1
    gpu: bool = True              # False: verl.device cpu (the CPU harness: only the sizing applies)
    pins: str = ""                # what the config downloads from the hub unpinned (rtpo.data.pins)

    @property
    def ok(self) -> bool:
        return not self.all_findings()

    def all_findings(self) -> list[Finding]:
        out = [f for c in self.cells + self.evals for f in c.findings]
        return out + self.findings


def training_cells(cfg: Mapping[str, Any]) -> list[tuple[str, str, str, tuple]]:
    """(label, method, task, sets) of every verl training run of the experiment (rtpo.experiment): the
    main grid's runs that train and each ablation arm that trains (not a copy of a main run), once per
    distinct setting (seeds only change data order)."""
    return [(label, m, t, sets) for label, (m, t, sets, _) in _trained_settings(cfg).items()]


def training_runs(cfg: Mapping[str, Any]) -> dict[str, int]:
    """label (of `training_cells`) -> the runs the DAG trains with that setting."""
    return {label: n for label, (_, _, _, n) in _trained_settings(cfg).items()}


def _trained_settings(cfg: Mapping[str, Any]) -> dict[str, tuple[str, str, tuple, int]]:
    """label -> (method, task, sets, runs) of each distinct training setting, in the experiment's order."""
    from rtpo.experiment import MAIN, SWEEP, Experiment

    out: dict[tuple, list] = {}
    for r in Experiment(cfg).runs:
        if r.scope == SWEEP or r.copy_of is not None or not r.trains:
            continue
        setting = (r.method, r.task, r.sets)
        if setting not in out:
            label = f"{r.method}/{r.task}" if r.scope == MAIN else f"{r.scope}/{r.variant}: {r.method}/{r.task}"
            out[setting] = [label, 0]
        out[setting][1] += 1
    return {label: (m, t, sets, n) for (m, t, sets), (label, n) in out.items()}


def untrained_runs(cfg: Mapping[str, Any]) -> int:
    """Runs of the main grid that train nothing (train.steps 0: vanilla), each a final/ copy of the base model."""
    from rtpo.experiment import MAIN, Experiment

    return sum(1 for r in Experiment(cfg).select(MAIN) if not r.trains)


def _with_sets(cfg: Mapping[str, Any], sets: Iterable[str]) -> dict[str, Any]:
    import copy

    from rtpo.config import set_path

    c = copy.deepcopy(dict(cfg))
    for s in sets:
        set_path(c, s, source="ablation override")
    return c


def _budget_key(cfg: Mapping[str, Any], method: str, task: str) -> str:
    m = (cfg.get("method") or {}).get(method) or {}
    if "micro_batch_tokens" in ((m.get("per_task") or {}).get(task) or {}):
        return f"method.{method}.per_task.{task}.micro_batch_tokens"
    if "micro_batch_tokens" in m:
        return f"method.{method}.micro_batch_tokens"
    return "train.micro_batch_tokens"


def _length_keys(method: str, task: str) -> str:
    from rtpo.methods.cards import TURN_ROW_METHODS

    if method in TURN_ROW_METHODS:
        return f"env.{task}.max_prompt_tokens / env.{task}.max_new_tokens"
    return f"verl.max_context (or env.{task}.max_turns / max_new_tokens, verl.obs_tokens)"


def check_cell(cfg: Mapping[str, Any], label: str, method: str, task: str, sets: tuple, shape: ModelShape,
               spec: EnvSpec, root: Path) -> CellReport:
    """Build the cell's GPU overrides (launch.verl_overrides, cpu=False) and check them (module doc)."""
    from rtpo.config import method_settings
    from rtpo.methods.cards import TURN_ROW_METHODS
    from rtpo.verl_ext.launch import mini_batch_problem, trainer_mode, verl_overrides

    c = _with_sets(cfg, sets)
    problem = mini_batch_problem(c, method, task)
    if problem:   # verl_overrides refuses it too: nothing else of the cell can be built
        from rtpo.verl_ext.launch import train_key

        return CellReport(label, method, task, {}, None,
                          [Finding(label, train_key(c, method, task, "mini_batches"), "mini-batches", problem)])
    v = dict(c.get("verl") or {})
    model_dir = (c.get("model") or {}).get("path") or "results/models/base"
    ov = Overrides(parse_overrides(verl_overrides(c, method, task, 0, root / "results" / "check", root / model_dir,
                                                  "train.parquet", "val.parquet", cpu=False)))
    s = method_settings(c, method, task)
    P, R = int(ov["data.max_prompt_length"]), int(ov["data.max_response_length"])
    n = int(ov["trainer.n_gpus_per_node"]) * int(ov["trainer.nnodes"])
    tp = int(ov["actor_rollout_ref.rollout.tensor_model_parallel_size"])
    sp = ov.sp()
    attn = str(ov["actor_rollout_ref.model.override_config.attn_implementation"])
    tok = ov.budget("actor")
    fused = bool(ov["actor_rollout_ref.model.use_fused_kernels"])
    strategy = str(ov["actor_rollout_ref.actor.strategy"])
    rollout = str(ov["actor_rollout_ref.rollout.name"])
    gpu_gib = float(v.get("gpu_memory_gib", 80))
    max_model_len = ov["actor_rollout_ref.rollout.max_model_len"]
    positions = int(max_model_len) if max_model_len else shape.max_positions
    mode = trainer_mode(method, s["method"])
    cell = CellReport(label, method, task, {}, None)
    bad = cell.findings.append
    budget_key, len_keys = _budget_key(c, method, task), _length_keys(method, task)

    # tokens: verl's micro-batching and rtpo's trainer
    for role in ("actor", "rollout", "ref"):
        b = ov.budget(role)
        if P + R > b * sp:
            key = "actor.ppo_max_token_len_per_gpu" if role == "actor" else f"{role}.log_prob_max_token_len_per_gpu"
            bad(Finding(label, budget_key, "tokens",
                        f"prompt + response = {P} + {R} = {P + R} > {key} x ulysses sp = {b} x {sp} = {b * sp}; "
                        f"raise {budget_key} to >= {math.ceil((P + R) / sp)} or shorten the rows ({len_keys}) "
                        "(verl utils/seqlen_balancing.py rearrange_micro_batches: assert max_token_len >= "
                        "max_seq_len)"))
            break
    # positions and the row cap
    if max_model_len and int(max_model_len) > shape.max_positions:
        bad(Finding(label, "verl.overrides (actor_rollout_ref.rollout.max_model_len)", "positions",
                    f"rollout max_model_len {max_model_len} > {shape.name}'s max_position_embeddings "
                    f"{shape.max_positions} (verl vllm_async_server.py _validate_configs)"))
    if P + R > positions:
        bad(Finding(label, len_keys, "positions",
                    f"prompt + response = {P + R} > {positions}, {shape.name}'s max_position_embeddings (the "
                    "rollout's max_model_len: verl workers/rollout/vllm_rollout/vllm_async_server.py "
                    "_validate_configs; requests beyond it are refused)"))
    cap = v.get("max_context")
    if cap and P + R > int(cap):
        bad(Finding(label, len_keys, "row cap", f"prompt + response = {P + R} > verl.max_context = {cap}"))
    if method not in TURN_ROW_METHODS and R < int(s["env"]["max_new_tokens"]):
        bad(Finding(label, f"verl.max_context / env.{task}.max_new_tokens", "one turn",
                    f"flat rows' response_length {R} < one turn (env.{task}.max_new_tokens = "
                    f"{s['env']['max_new_tokens']}): verl.max_context - prompt_length leaves no room"))
    # parallel layout
    if n % tp:
        bad(Finding(label, "verl.tensor_parallel_size", "tp",
                    f"{n} GPUs not divisible by rollout tensor parallel size {tp} (verl workers/engine_workers.py "
                    "init_model: rollout world_size % infer_world_size)"))
    if shape.heads % tp:
        bad(Finding(label, "verl.tensor_parallel_size", "tp",
                    f"{shape.name}'s {shape.heads} attention heads not divisible by tensor parallel size {tp} "
                    "(vLLM ModelConfig.verify_with_parallel_config)"))
    if sp > 1:
        if n % sp:
            bad(Finding(label, "verl.ulysses_sequence_parallel_size", "sp",
                        f"{n} GPUs not divisible by ulysses sp {sp} (transformer_impl.py _init_device_mesh)"))
        if shape.heads % sp or (shape.kv_heads % sp and sp % shape.kv_heads):
            bad(Finding(label, "verl.ulysses_sequence_parallel_size", "sp",
                        f"heads {shape.heads} / kv heads {shape.kv_heads} vs ulysses sp {sp} (verl "
                        "models/transformers/monkey_patch.py apply_monkey_patch asserts)"))
        if not ov["actor_rollout_ref.model.use_remove_padding"]:
            bad(Finding(label, "verl.remove_padding", "sp",
                        "ulysses sp > 1 needs use_remove_padding (verl workers/config/actor.py "
                        "FSDPActorConfig.validate)"))
        if attn not in FLASH_ATTENTION:
            bad(Finding(label, "verl.attn_implementation", "sp",
                        f"ulysses sp {sp} with attention {attn!r}: verl's Ulysses replaces only "
                        "_flash_attention_forward (models/transformers/monkey_patch.py), so every rank would "
                        "attend within its own slice of the sequence; use flash_attention_2"))
    # attention installed by the GPU environment spec
    have = spec.attention()
    if attn not in have:
        bad(Finding(label, "verl.attn_implementation", "attention",
                    f"attention {attn!r} (verl's default when unnamed: flash_attention_2, workers/config/model.py) "
                    f"is not installed by the GPU environment spec ({', '.join(spec.sources) or 'none found'}: "
                    f"it provides {sorted(have)}); flash_attention_2 needs flash-attn"))
    # fused kernels on FSDP2 with an untied lm_head
    if fused and strategy == "fsdp2" and not shape.tied and n > 1:
        bad(Finding(label, "verl.use_fused_kernels", "fused",
                    f"use_fused_kernels with FSDP2 and {shape.name}'s untied lm_head: the fused forward reads "
                    "lm_head.weight outside the lm_head unit's forward, a sharded DTensor there "
                    "(dense_common.py forward_with_torch_backend, fsdp_utils.py _select_fsdp2_wrap_targets)"))
    # the chain trainer's batch padding
    rollout_n = int(ov["actor_rollout_ref.rollout.n"])
    if mode == "rtpo_chain_sync":
        rows = int(ov["data.train_batch_size"]) * rollout_n
        multiple = math.lcm(n // sp, int(ov["actor_rollout_ref.actor.ppo_mini_batch_size"]) * rollout_n)
        if rows % multiple:
            bad(Finding(label, "train.prompts_per_step", "batch",
                        f"train_batch_size x rollout.n = {rows} is not a multiple of lcm(dp, ppo_mini_batch_size x "
                        f"n) = {multiple}: verl pads the batch with dummy rows (trainer_base.py _balance_batch)"))
    # memory
    chunked = bool(ov["actor_rollout_ref.actor.entropy_from_logits_with_chunking"])
    entropy_grad = float(ov["actor_rollout_ref.actor.entropy_coeff"]) != 0.0
    patched = entropy_patch_active()
    mem = gpu_memory(shape, tok, n, sp, attn, spec.installs("flash-attn"), fused, chunked,
                     int(ov["actor_rollout_ref.actor.entropy_from_logits_chunk_size"]), gpu_gib,
                     entropy_grad=entropy_grad, entropy_patched=patched)
    kind = entropy_grad_kind(entropy_grad, chunked, fused, patched)
    if mem.total > gpu_gib:
        t = mem.terms()
        why = ("; the entropy term is verl's whole-function entropy recompute for the entropy bonus (8 B x T x V "
               "saved): load rtpo.verl_ext.plugin, which patches it (rtpo/verl_ext/entropy.py)"
               if kind == "verl" else "")
        bad(Finding(label, budget_key, "memory",
                    f"estimated {mem.total:.1f} GiB per GPU > verl.gpu_memory_gib {gpu_gib:g} at {tok} tokens per GPU "
                    f"({', '.join(f'{k} {x:.1f}' for k, x in t.items() if k != 'total')}); lower the per-GPU "
                    "budget (and the rows with it), or use ulysses sp / flash-attn" + why))
    util = float(ov["actor_rollout_ref.rollout.gpu_memory_utilization"])
    awake = vllm_awake(shape, n, util, gpu_gib)
    if awake > gpu_gib:
        bad(Finding(label, "verl.gpu_memory_utilization", "memory",
                    f"servers awake: {util} x {gpu_gib:g} GiB + the actor's resident state = {awake:.1f} GiB > "
                    f"{gpu_gib:g} GiB"))
    logits_gib = tok * shape.vocab * 4 / GIB  # fp32 logits of a full micro-batch (the table's column)
    cell.memory = mem
    cell.values = {"P": P, "R": R, "P+R": P + R, "tokens/GPU": tok, "max pos": positions, "sp": sp, "TP": tp,
                   "GPUs": n, "attention": attn, "fp32 logits GiB": round(logits_gib, 1),
                   "est. GiB/GPU": round(mem.total, 1), "rollout": rollout, "mode": mode,
                   "keep": rollout.endswith("_keep"), "ref": bool(ov["actor_rollout_ref.actor.use_kl_loss"]),
                   "entropy grad": kind, "context bound": context_bound(method, P, R, s["psi"])}
    # shared-filesystem disk and the step time
    cell.disk, cell.time = checkpoint_disk(shape, ov), run_time(c, method, task, ov, R, n)
    gb_s = float(v.get("checkpoint_write_gb_s", CHECKPOINT_WRITE_GB_S))
    cell.time.checkpoint_s = cell.disk.checkpoint / GB / gb_s
    cell.values.update({"ckpt GB": round(cell.disk.checkpoint / GB, 1), "ckpt keep": cell.disk.keep,
                        "GB/run": round(cell.disk.run / GB, 1), "tok/step M": round(cell.time.step_tokens / 1e6, 2),
                        "step min": round(cell.time.step_s / 60, 1), "run h": round(cell.time.run_min / 60, 1),
                        "E.3 step min": round(cell.time.anchor_step_s / 60, 1)})
    return cell


def context_bound(method: str, P: int, R: int, psi: str | None = None) -> str:
    """What ends a trajectory of `method` for its context length, as the rollout applies it: turn rows
    (RTPO: (c_k, turn k)) bound the context c_k by the prompt slot P and each turn by R, the full history
    is never a row; flat rows (the baselines) hold the whole episode, bounded by P + R. Under psi = full
    c_k is the episode so far, so the two bounds are one quantity, and the text says so.
    (the methods' cards, rtpo.methods.cards, not the registry: the check runs in `snakemake -n`, without torch.)"""
    from rtpo.methods.cards import TURN_ROW_METHODS

    if method not in TURN_ROW_METHODS:
        return f"episode <= {P + R}"
    if psi == "full":
        return f"c_k <= {P}, turn <= {R} (psi = full: c_k is the episode so far, so episode <= {P + R})"
    return f"c_k <= {P}, turn <= {R}"


def check_eval(cfg: Mapping[str, Any], shape: ModelShape) -> CellReport:
    """The evaluation servers of a config (one layout for every task: rtpo/verl_ext/eval_servers.py)."""
    from rtpo.verl_ext.eval_servers import DEFAULT_GPU_MEMORY_UTILIZATION, server_layout

    v = dict(cfg.get("verl") or {})
    tp, replicas = server_layout(dict(cfg), cpu=False)
    L = int(v.get("max_model_len") or shape.max_positions)
    util = float(v.get("eval_gpu_memory_utilization", DEFAULT_GPU_MEMORY_UTILIZATION))
    gpu_gib = float(v.get("gpu_memory_gib", 80))
    cell = CellReport("evaluate", "*", "*", {}, None)
    bad = cell.findings.append
    if L > shape.max_positions:
        bad(Finding("evaluate", "verl.max_model_len", "positions",
                    f"max_model_len {L} > {shape.name}'s max_position_embeddings {shape.max_positions} "
                    "(verl vllm_async_server.py _validate_configs)"))
    if shape.heads % tp:
        bad(Finding("evaluate", "verl.tensor_parallel_size", "tp",
                    f"{shape.heads} attention heads not divisible by tensor parallel size {tp}"))
    weights = 2 * shape.params / tp / GIB
    kv_heads = max(shape.kv_heads // tp, 1)
    kv = L * 2 * shape.layers * kv_heads * shape.head_dim * 2 / GIB
    need = weights + kv + MEMORY.eval_activation_gib
    if need > util * gpu_gib:
        bad(Finding("evaluate", "verl.eval_gpu_memory_utilization", "memory",
                    f"bf16 weights / TP {weights:.1f} + KV cache of one {L}-token sequence {kv:.1f} + activations "
                    f"{MEMORY.eval_activation_gib} GiB > {util} x {gpu_gib:g} GiB"))
    cell.values = {"TP": tp, "replicas": replicas, "GPUs": tp * replicas, "max_model_len": L,
                   "weights GiB/GPU": round(weights, 1), "KV GiB/seq": round(kv, 1), "util": util}
    return cell


# --------------------------------------------------------------------------------------------------
# The whole check
# --------------------------------------------------------------------------------------------------
def check_config(cfg: Mapping[str, Any], resources: Mapping[str, Mapping[str, Any]] | None = None,
                 root: Path | None = None, spec: EnvSpec | None = None,
                 profile_name: str = "workflow/profiles/default/profile.yaml", pilot: str | Path | None = None) -> Report:
    """Every training cell, the evaluation servers and (given `resources`: rule -> resources) the
    Slurm profile of a validated config, each job sized from the pilot file when it was measured under this
    config (rtpo.verl_ext.sizing; `pilot`: its path, default results/pilot/pilot.json or $RTPO_PILOT).
    `root`: the repository (environment spec, model paths). verl.device cpu (the CPU harness): the GPU checks
    do not apply, only the sizing, from the pilot alone."""
    from rtpo.config import ROOT

    root = Path(root or ROOT)
    engine = str(cfg.get("engine", "local"))
    rep = Report(engine)
    if engine != "verl":
        rep.note = f"engine: {engine}: no verl run, nothing to check"
        return rep
    rep.pilot, rep.pilot_note = read_pilot(cfg, pilot)
    from rtpo.data.pins import describe, unpinned

    rep.pins = describe(unpinned(cfg))  # hub downloads without a revision / sha256 (rtpo.data.pins)
    rep.gpu = str((cfg.get("verl") or {}).get("device", "cuda")) != "cpu"
    runs = training_runs(cfg)
    if not rep.gpu:
        rep.note = "verl.device: cpu: the CPU harness runs it; the GPU start-up checks do not apply"
        rep.cells = [cpu_cell(cfg, label, m, t, sets, runs.get(label, 1)) for label, m, t, sets in training_cells(cfg)]
        rep.pilot_note += "".join(f"; {n}" for n in size_cells(rep.cells, rep.pilot, cfg, gpu=False))
        if rep.pilot is not None and resources is not None:
            rep.resources, rep.findings, rep.warnings, rep.eval_rows = check_profile(
                cfg, resources, rep.cells, None, profile_name, rep.pilot, gpu=False)
        return rep
    shape = model_shape(cfg, root)
    spec = spec or env_spec(root)
    for label, method, task, sets in training_cells(cfg):
        rep.cells.append(check_cell(cfg, label, method, task, sets, shape, spec, root))
        rep.cells[-1].runs = runs.get(label, 1)
    rep.untrained_final = untrained_runs(cfg) * shape.params * shape.weight_bytes
    rep.evals.append(check_eval(cfg, shape))
    rep.eval_gpus = int(rep.evals[0].values.get("GPUs", 1))
    notes = size_cells([c for c in rep.cells if c.time is not None], rep.pilot, cfg, gpu=True)
    rep.pilot_note += "".join(f"; {n}" for n in notes)
    if resources is not None:
        rep.resources, rep.findings, rep.warnings, rep.eval_rows = check_profile(
            cfg, resources, [c for c in rep.cells if c.sizing], shape, profile_name, rep.pilot)
    return rep


def cpu_cell(cfg: Mapping[str, Any], label: str, method: str, task: str, sets: tuple, runs: int) -> CellReport:
    """A training cell of the CPU harness for the sizing alone: its steps, checkpoints and generated tokens at
    the caps (to scale a piloted cell's step to it), on the harness's one logical GPU."""
    from rtpo.config import method_settings

    s = method_settings(_with_sets(cfg, sets), method, task)
    K, T = int(s["env"].get("max_turns", 3)), int(s["env"]["max_new_tokens"])
    per_prompt, how = rollout_tokens(method, s["method"], s["env"], K * T, 0)
    t = RunTime(int(s["train"]["prompts_per_step"]) * per_prompt, how, 0.0, 1, int(s["train"]["steps"]),
                int(s["train"].get("checkpoint_every", 1)))
    return CellReport(label, method, task, {}, None, time=t, runs=runs)


COLUMNS = ["cell", "context bound", "P", "R", "P+R", "tokens/GPU", "max pos", "sp", "TP", "GPUs", "attention", "fp32 logits GiB",
           "est. GiB/GPU", "ckpt GB", "ckpt keep", "GB/run", "tok/step M", "step min", "run h", "E.3 step min", "verdict"]


def format_report(rep: Report) -> str:
    """The per-cell table (Markdown), the evaluation and profile rows, the sizing of every job (sizing.py: each
    figure's source, the DAG's GPU-hours and critical path), then every finding."""
    if rep.note and not rep.cells:
        return rep.note
    if rep.note:  # the CPU harness: the sizing from the pilot alone
        fs = rep.all_findings()
        return "\n".join([rep.note] + (sizing_lines(rep) if rep.pilot else ["", f"sizing: {rep.pilot_note}"])
                          + [f"  {f}" for f in fs] + [f"  WARN {w}" for w in rep.warnings])
    fs = rep.all_findings()
    lines = [verdict(rep), ""]
    lines += ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for c in rep.cells:
        vals = [c.cell] + [str(c.values.get(k, "")) for k in COLUMNS[1:-1]]
        vals.append("ok" if c.ok else "FAIL: " + ", ".join(sorted({f.rule for f in c.findings})))
        lines.append("| " + " | ".join(vals) + " |")
    for e in rep.evals:
        ev = e.values
        lines += ["", f"evaluation servers: TP {ev['TP']} x {ev['replicas']} replicas = {ev['GPUs']} GPUs, max_model_len "
                      f"{ev['max_model_len']}, bf16 weights {ev['weights GiB/GPU']} GiB/GPU, KV cache of one sequence "
                      f"{ev['KV GiB/seq']} GiB/GPU, gpu_memory_utilization {ev['util']}: "
                      + ("ok" if e.ok else "FAIL")]
    if rep.resources:
        cols = ["rule", "gpu", "need gpu", "nodes", "need nodes", "mem_mb", "need mem_mb", "cpus", "need cpus",
                "runtime", "need runtime", "est. runtime"]
        lines += ["", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        for r in rep.resources:
            lines.append("| " + " | ".join("-" if r.get(k) is None else str(r.get(k)) for k in cols) + " |")
    lines += disk_and_time_lines(rep)
    lines += sizing_lines(rep)
    lines += [f"NOTE {rep.pins}"] if rep.pins else []
    lines += ["", f"{len(rep.cells)} training cells, {len(fs)} failed rules" + (":" if fs else ": every check passes")]
    lines += [f"  {f}" for f in fs]
    if rep.warnings:
        lines += [f"{len(rep.warnings)} warnings (estimates, not failures):"] + [f"  WARN {w}" for w in rep.warnings]
    return "\n".join(lines)


def verdict(rep: Report) -> str:
    """The report's first line: pass or fail, and what failed."""
    fs = rep.all_findings()
    if not fs:
        return (f"check-config: PASS: {len(rep.cells)} training cells, every check passes"
                + (f" ({len(rep.warnings)} warnings below)" if rep.warnings else ""))
    kinds = sorted({f.rule for f in fs})
    return f"check-config: FAIL: {len(fs)} failed rules ({', '.join(kinds)}); first: {fs[0]}"


def first_error(rep: Report) -> str | None:
    """One line naming the first failed cell, key and rule (what `snakemake -n` prints)."""
    fs = rep.all_findings()
    if not fs:
        return None
    more = f" (and {len(fs) - 1} more: rtpo check-config --config <file>)" if len(fs) > 1 else ""
    return f"start-up check failed: {fs[0]}{more}"
