"""What a CPU forces on a verl job: the one place the CPU harness changes a setting of the paper's job.

`launch.job_settings` builds a training job's layout, precision, kernels and rollout-server settings at
the config's values, whatever the device. On the CPU harness (verl.device: cpu: the rehearsal, the tests)
`cpu_forced` then replaces the settings a CPU cannot run, and caps the job's process counts, which a CPU
runs at the paper's 8 but at a measured cost; nothing else. `eval_forced` and `eval_layout` do the same
for the evaluation servers (`eval_servers.eval_overrides`). Each replacement says why.
tests/test_verl_parity.py composes every training job and evaluation job of config/paper.yaml and of its
rehearsal through verl's Hydra config and fails on any other difference; docs/rehearsal.md, "The GPU
settings on a CPU", records what was tried and what broke.
"""

from __future__ import annotations

from typing import Any

from rtpo.verl_ext.cpu_harness.vllm_cpu import ROLLOUTS as VLLM_ROLLOUTS

HF_ROLLOUTS = ("hf", "hf_keep")
# Every count of processes of a job is capped at 2 on a CPU: more than one, so that each multi-process path
# runs as on the cluster (FSDP2 shards, gathers and reduces across ranks; vLLM runs tensor parallel 2;
# requests spread over agent-loop workers; TransferQueue partitions its data over storage units; the
# dataloader forks workers), not 8, because each is a process importing torch (and verl, vLLM or the
# tokenizer) on a 2-core, 23 GB machine. Measured there (a rehearsal training job, the paper's 8 vs 1-2,
# docs/rehearsal.md "The GPU settings on a CPU"): 8 agent-loop workers +66 CPU-s and +3.5 GB a job (GRPO),
# 8 storage units +35 CPU-s and +2.8 GB, 8 dataloader workers +30 CPU-s and +1.8 GB; 8 ranks with 4 vLLM
# replicas of TP 2 would hold ~20 GB more than 2 ranks.
CPU_RANKS = 2           # trainer.n_gpus_per_node of a training job (logical GPUs; evaluation: eval_layout)
CPU_AGENT_WORKERS = 2   # actor_rollout_ref.rollout.agent.num_workers (paper: verl.agent_workers, 8)
CPU_STORAGE_UNITS = 2   # transfer_queue.backend.SimpleStorage.num_data_storage_units (paper: verl's 8)
CPU_DATALOADER_WORKERS = 2  # data.dataloader_num_workers (paper: verl's 8)
# Ray's logical resources when main_ppo starts Ray itself (a Slurm job joins slurm_ray.sh's head, started
# with the same): verl's resource pools ask for a "GPU" per rank (single_controller/ray/base.py
# use_gpu=True); 32 CPUs leave room for TransferQueue's storage units and the agent-loop workers.
RAY_CPUS = 32
A = "actor_rollout_ref"


def ranks(settings: dict[str, Any]) -> int:
    """Logical GPUs per node of a CPU job: the config's, at most CPU_RANKS."""
    return min(int(settings["trainer.n_gpus_per_node"]), CPU_RANKS)


def cpu_forced(settings: dict[str, Any], external_ray: bool | None = None) -> dict[str, Any]:
    """`settings` (launch.job_settings) with what a CPU forces replaced. external_ray: a Ray cluster is
    already running (RAY_ADDRESS; default: read the environment), started with `RAY_CPUS` CPUs and
    `ranks` GPUs (logical) and the environment of `launch.verl_env(cpu=True)`; otherwise main_ppo
    starts one with those resources."""
    import os

    s = dict(settings)
    rollout = str(s[f"{A}.rollout.name"])
    if rollout not in (*HF_ROLLOUTS, *VLLM_ROLLOUTS):
        raise ValueError(f"the CPU harness serves the rollouts hf, hf_keep, vllm and vllm_keep, not {rollout!r}")
    if external_ray is None:
        external_ray = bool(os.environ.get("RAY_ADDRESS"))
    n = ranks(s)
    # no CUDA device: verl's CPU platform (cpu_platform.py), gloo collectives
    s["trainer.device"] = "cpu"
    # one machine, CPU_RANKS processes (above)
    s["trainer.n_gpus_per_node"], s["trainer.nnodes"] = n, 1
    if not external_ray:  # main_ppo starts a Ray of its own ("local": never another job's, whose record
        # /tmp/ray keeps: ray.init would join it and refuse num_cpus / num_gpus)
        s["ray_kwargs.ray_init.num_cpus"], s["+ray_kwargs.ray_init.num_gpus"] = RAY_CPUS, n
        s["+ray_kwargs.ray_init.address"] = "local"
    s[f"{A}.rollout.tensor_model_parallel_size"] = min(int(s[f"{A}.rollout.tensor_model_parallel_size"]), n)
    # process counts capped (above); verl's defaults (8) where the paper's job sets none
    s[f"{A}.rollout.agent.num_workers"] = min(int(s[f"{A}.rollout.agent.num_workers"]), CPU_AGENT_WORKERS)
    s["transfer_queue.backend.SimpleStorage.num_data_storage_units"] = CPU_STORAGE_UNITS
    s["data.dataloader_num_workers"] = CPU_DATALOADER_WORKERS
    if rollout in VLLM_ROLLOUTS:
        # vLLM refuses sleep mode on a CPU (vllm/config/model.py) and its CPU worker's sleep / wake_up do
        # nothing (vllm/v1/worker/cpu_worker.py): verl must never call them, so the servers keep their
        # weights across the trainer's sleeps (what vllm_keep asks for; vllm's re-push loads the same weights)
        s[f"+{A}.rollout.enable_sleep_mode"] = False
        s[f"{A}.rollout.free_cache_engine"] = False
    else:
        # the HF server (hf_rollout.py) is one process with no tensor parallelism (its fp32 sampling:
        # launch.compute_dtype)
        s[f"{A}.rollout.tensor_model_parallel_size"] = 1
    return s


def eval_layout(tp: int, replicas: int, rollout: str) -> tuple[int, int]:
    """(tensor_parallel_size, replicas) of the evaluation servers on a CPU: one server of one rank. Tensor
    parallel 2 in standalone mode runs on vLLM's CPU build (tried: the rehearsal's math evaluation), but
    costs +37 CPU-s a job (a second vLLM worker and its checkpoint-engine worker: 122 against 85 CPU-s),
    i.e. ~17 min over the rehearsal's 27 evaluation jobs on 2 cores; every training job's rollout servers
    run vLLM at tensor parallel 2 (`cpu_forced`). The HF server has no tensor parallelism."""
    return 1, 1


def eval_forced(settings: dict[str, Any]) -> dict[str, Any]:
    """The evaluation servers' settings (eval_servers.eval_overrides, the layout already from `eval_layout`)
    with what a CPU forces replaced."""
    s = dict(settings)
    rollout = str(s[f"{A}.rollout.name"])
    s["trainer.device"] = "cpu"  # no CUDA device: verl's CPU platform
    if rollout in VLLM_ROLLOUTS:
        s[f"+{A}.rollout.enable_sleep_mode"] = False  # vLLM refuses sleep mode on a CPU (above)
    return s
