"""`rtpo evaluate --engine verl`: evaluation sampled on verl's rollout servers in standalone
mode, driven by the same Roller (envs, tools, psi, metrics) as the local engine.

Fast: the servers' Hydra overrides compose with verl 0.9.1's own config (paper scale: vLLM, bf16,
tensor parallel and max_model_len from the config, real weights); bad input fails at job start
with an error naming the key or the path. Slow (one launch of the CPU harness: real verl code, the
HF rollout server in place of vLLM): at temperature 0, `--engine verl` gives the same tokens for
every trajectory and the same eval JSON numbers as `--engine local`; a divergence would only be
allowed at an argmax near-tie (logit gap < 1e-4), which the test reports.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytest.importorskip("verl")

from tests.helpers import tiny  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
NEAR_TIE = 1e-4


def _cfg(tmp: Path, **verl) -> Path:
    from rtpo.config import load_config

    cfg = load_config(ROOT / "config" / "smoke.yaml", validate=False)
    cfg["eval"] = {"samples": 2, "temperature": 0.0}
    cfg["env"]["math"].update(max_new_tokens=80, max_turns=3)
    cfg["verl"] = {"device": "cpu", "dtype": "float32", **verl}  # fp32: token-identical to the local engine
    p = tmp / "cfg.yaml"
    p.write_text(yaml.safe_dump(cfg))
    return p


def _model_dir(tmp: Path, max_position: int = 40960) -> Path:
    d = tmp / "model"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps({"model_type": "qwen3", "max_position_embeddings": max_position}))
    return d


# ------------------------------------------------------------------ overrides and bad input (no Ray)
def test_paper_eval_server_overrides_compose_with_verl(tmp_path):
    """config/paper.yaml: vLLM servers, tensor_parallel_size 2 x eval_replicas 2 = 4 GPUs, bf16,
    max_model_len 40960, real weights (load_format auto), per-job seed; every key exists in verl's
    config (Hydra rejects unknown ones) and verl's RolloutConfig accepts the values."""
    from rtpo.config import load_config
    from rtpo.verl_ext.eval_servers import compose, eval_overrides
    from verl.utils.config import omega_conf_to_dataclass

    cfg = load_config(ROOT / "config" / "paper.yaml")
    c = compose(eval_overrides(cfg, _model_dir(tmp_path), seed=2, cpu=False, max_new_tokens=4096))
    r = c.actor_rollout_ref.rollout
    assert (r.name, r.tensor_model_parallel_size, r.n_gpus_per_node, r.nnodes) == ("vllm", 2, 4, 1)
    assert r.dtype == "bfloat16" and r.load_format == "auto" and r.seed == 2 and not r.enforce_eager
    assert r.max_model_len == 40960 and r.response_length == 4096 and r.prompt_length + r.response_length == 40960
    assert c.trainer.n_gpus_per_node == 4 and c.actor_rollout_ref.model.path == str((tmp_path / "model").resolve())
    assert omega_conf_to_dataclass(r).tensor_model_parallel_size == 2
    # the number of replicas verl's LLMServerManager starts: GPUs / (tp x dp x pp)
    assert r.n_gpus_per_node * r.nnodes // (r.tensor_model_parallel_size * r.data_parallel_size) == 2
    with pytest.raises(ValueError, match="verl.cpu_rollout hf samples in float32"):  # paper.yaml's bf16
        eval_overrides(cfg, _model_dir(tmp_path), seed=0, cpu=True, max_new_tokens=4096)
    cpu = compose(eval_overrides({**cfg, "verl": {**cfg["verl"], "dtype": "float32"}}, _model_dir(tmp_path), seed=0,
                                 cpu=True, max_new_tokens=4096))
    assert cpu.actor_rollout_ref.rollout.name == "hf" and cpu.actor_rollout_ref.rollout.tensor_model_parallel_size == 1
    assert cpu.trainer.device == "cpu"
    cfg["verl"]["max_model_len"] = 50000
    with pytest.raises(ValueError, match="verl.max_model_len = 50000 exceeds"):
        eval_overrides(cfg, _model_dir(tmp_path), seed=0, cpu=False, max_new_tokens=4096)


def test_gpu_smoke_eval_config_composes_with_verl(tmp_path):
    """scripts/gpu_smoke.sh's evaluation (no GPU here to run it): config/paper.yaml fitted to the
    smoke's GPUs and model gives valid vLLM server overrides."""
    from rtpo.verl_ext.eval_servers import compose, eval_overrides
    sys.path.append(str(ROOT / "scripts"))  # scripts/gpu_smoke.py, a program outside rtpo/
    from gpu_smoke import eval_config

    model = _model_dir(tmp_path, max_position=4096)
    cfg = eval_config(1, model)
    r = compose(eval_overrides(cfg, model, seed=0, cpu=False, max_new_tokens=4096)).actor_rollout_ref.rollout
    assert (r.name, r.tensor_model_parallel_size, r.n_gpus_per_node, r.max_model_len) == ("vllm", 1, 1, 4096)
    assert r.response_length == 4095 and r.dtype == "bfloat16"
    cfg8 = eval_config(8, model)["verl"]
    assert (cfg8["tensor_parallel_size"], cfg8["eval_replicas"]) == (2, 4)


def test_eval_servers_need_the_gpus_the_config_asks_for():
    from rtpo.verl_ext.eval_servers import check_gpus

    cfg = {"verl": {"tensor_parallel_size": 2, "eval_replicas": 2}}
    check_gpus(cfg, have=4)
    with pytest.raises(ValueError, match=r"verl.tensor_parallel_size = 2 x verl.eval_replicas = 2 needs 4 GPUs"):
        check_gpus(cfg, have=3)
    with pytest.raises(ValueError, match=r"verl.tensor_parallel_size = 2 needs 2 GPUs per evaluation server"):
        check_gpus(cfg, have=1)


def test_evaluate_bad_input_fails_at_start_naming_key_or_path(tmp_path, capsys):
    """Exit 2 before any server starts: a tensor-parallel size larger than the job's GPUs (this
    machine has none) names verl.tensor_parallel_size; a missing model directory names the path."""
    from rtpo.cli import main
    from rtpo.data import generate_tasks

    ev = tmp_path / "eval.jsonl"
    ev.write_text("".join(json.dumps(t.to_dict()) + "\n" for t in generate_tasks("math", 2, 0, "eval")))
    model = tmp_path / "tiny"
    e = tiny.engine(seed=0)
    e.model.save_pretrained(model)
    e.tokenizer.save_pretrained(model)
    out = tmp_path / "out.json"
    args = ["evaluate", "--method", "vanilla", "--task", "math", "--eval-file", str(ev), "--out", str(out),
            "--engine", "verl"]
    cuda = ["--config", str(_cfg(tmp_path, device="cuda", tensor_parallel_size=2)), "--model", str(model)]
    assert main(args + cuda) == 2  # this machine cannot run CUDA: the device check comes first (no CPU run)
    err = capsys.readouterr().err
    assert "verl.device is cuda, but torch cannot use CUDA here" in err, err
    import rtpo.verl_ext.gpu_env as gpu_env

    with pytest.MonkeyPatch.context() as mp:  # a node where CUDA starts and the job sees no GPU
        mp.setattr(gpu_env, "torch_cuda", lambda: ("2.11.0", "13.0", True, ""))
        assert main(args + cuda) == 2
    err = capsys.readouterr().err
    assert "verl.tensor_parallel_size = 2 needs 2 GPUs" in err and "sees 0 GPUs" in err, err
    missing = tmp_path / "no_such_model"
    for engine in ("verl", "local"):
        a = [x if x != "verl" else engine for x in args]
        assert main(a + ["--config", str(_cfg(tmp_path)), "--model", str(missing)]) == 2
        err = capsys.readouterr().err
        assert f"--model {missing}: model directory not found" in err, err
    assert not out.exists()


def test_tool_calls_of_in_flight_trajectories_are_bounded():
    """With every trajectory on its own thread, at most `slots` env steps (tool calls) run at once;
    the wrapped env is otherwise the env itself."""
    import threading
    import time

    from rtpo.evaluate import BoundedSteps

    state = {"now": 0, "max": 0}
    lock = threading.Lock()

    class Slow:
        max_turns = 3

        def step(self, text):
            with lock:
                state["now"] += 1
                state["max"] = max(state["max"], state["now"])
            time.sleep(0.02)
            with lock:
                state["now"] -= 1
            return text

    slots = threading.BoundedSemaphore(2)
    envs = [BoundedSteps(Slow(), slots) for _ in range(8)]
    threads = [threading.Thread(target=e.step, args=("x",)) for e in envs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert state["max"] == 2 and envs[0].max_turns == 3 and envs[0].step("y") == "y"


# ------------------------------------------------------------------ one launch of the CPU harness
def _warm_model(out: Path) -> Path:
    """A tiny Qwen3 warm-started on 60 scripted math demonstrations (25 s): greedy decoding then
    calls the python tool and answers over several turns, so the comparison covers multi-turn tool
    histories, not a single turn of noise."""
    from rtpo.data import generate_tasks, get_expert
    from rtpo.envs import make_env
    from rtpo.sft import sft, turn_examples

    eng = tiny.engine(seed=0, hidden=64, max_position=1024)
    rows = []
    for t in generate_tasks("math", 60, 1, "train"):
        msgs, _ = get_expert("math")(t, make_env(t, max_turns=3), 0.0, random.Random(0))
        rows += turn_examples(msgs, eng.tokenizer, "qwen3")
    sft(eng.model, eng.tokenizer, rows, 15, 5e-3, 16, False, seed=0)
    eng.model.save_pretrained(out)
    eng.tokenizer.save_pretrained(out)
    return out


def _evaluate(tmp: Path, cfg: Path, model: Path, ev: Path, engine: str) -> tuple[dict, list[dict]]:
    env = {**os.environ, "PYTHONHASHSEED": "0", "TOKENIZERS_PARALLELISM": "false", "WANDB_MODE": "disabled",
           "HF_HUB_OFFLINE": "1", "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)  # the job starts its own (local) Ray cluster, as on a Slurm node
    out, traj = tmp / f"{engine}.json", tmp / f"{engine}.traj.jsonl"
    cmd = [str(Path(sys.executable).with_name("rtpo")), "evaluate", "--config", str(cfg), "--model", str(model),
           "--method", "vanilla", "--task", "math", "--seed", "3", "--eval-file", str(ev), "--engine", engine,
           "--trajectories", str(traj), "--out", str(out)]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, cwd=tmp)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-6000:]
    return json.loads(out.read_text()), [json.loads(x) for x in traj.read_text().splitlines()]


def _first_divergence(a: dict, b: dict) -> tuple[int, int] | None:
    """(turn, token position) of the first differing sampled token of two trajectories, else None."""
    for k, (ta, tb) in enumerate(zip(a["turns"], b["turns"])):
        for j, (x, y) in enumerate(zip(ta["action_ids"], tb["action_ids"])):
            if x != y:
                return k, j
        if len(ta["action_ids"]) != len(tb["action_ids"]):
            return k, min(len(ta["action_ids"]), len(tb["action_ids"]))
    if len(a["turns"]) != len(b["turns"]):
        return min(len(a["turns"]), len(b["turns"])), 0
    return None


def assert_engines_agree(tmp: Path, cfg: Path, model: Path, ev: Path, rollout: str) -> str:
    """`--engine verl` (servers of `rollout`) against `--engine local` at temperature 0: the same tokens for
    every trajectory (a divergence allowed only at an argmax near-tie, logit gap < NEAR_TIE) and, without
    one, the same eval JSON numbers. Returns a one-line report (tokens, near-ties, throughput)."""
    loc, loc_traj = _evaluate(tmp, cfg, model, ev, "local")
    ver, ver_traj = _evaluate(tmp, cfg, model, ev, "verl")
    assert ver["engine"] == "verl" and loc["engine"] == "local"
    assert ver["servers"] == {"rollout": rollout, "tensor_parallel_size": 1, "replicas": 1, "max_model_len": 1024,
                              "cpu_harness": True}
    assert len(loc_traj) == len(ver_traj) == 12
    # the comparison covers multi-turn tool histories
    assert sum(len(t["turns"]) >= 2 for t in loc_traj) >= 4 and loc["overall"]["tool_calls_per_traj"] > 0
    report, diverged = [], 0
    for a, b in zip(loc_traj, ver_traj):
        assert (a["id"], a["seed"]) == (b["id"], b["seed"])
        d = _first_divergence(a, b)
        if d is None:
            continue
        diverged += 1
        k, j = d
        gap = _logit_gap(model, cfg, ev, a, k, j)
        report.append(f"{a['id']} seed {a['seed']}: turn {k} token {j}: top-2 logit gap {gap:.2e}")
        assert gap < NEAR_TIE, "diverged away from an argmax near-tie: " + report[-1]
    if not diverged:
        for key in ("benchmarks", "overall", "per_problem"):
            assert ver[key] == loc[key], key
    tokens = sum(len(u["action_ids"]) for t in ver_traj for u in t["turns"])
    assert ver["throughput"]["generated_tokens"] == tokens
    th = ver["throughput"]
    return (f"{rollout} vs local: {len(loc_traj) - diverged}/{len(loc_traj)} trajectories token-identical, "
            f"{tokens} tokens; near-tie divergences: {report or 'none'}; {rollout} "
            f"{th['generated_tokens_per_s']:.0f} tok/s after {th['startup_s']:.0f} s start-up")


def math_eval_file(tmp: Path) -> Path:
    from rtpo.data import generate_tasks

    ev = tmp / "eval.jsonl"
    ev.write_text("".join(json.dumps(t.to_dict()) + "\n" for t in generate_tasks("math", 6, 0, "eval")))
    return ev


@pytest.mark.slow
def test_evaluate_engine_verl_equals_local_at_temperature_0(tmp_path):
    """Same eval split, same warm-started tiny model, greedy decoding: verl's standalone rollout
    servers (CPU harness) and the local engine give the same tokens for every trajectory and the same
    eval JSON numbers; each trajectory's requests carry their own seed."""
    model = _warm_model(tmp_path / "model")
    print(assert_engines_agree(tmp_path, _cfg(tmp_path), model, math_eval_file(tmp_path), "hf"))


def _logit_gap(model: Path, cfg_path: Path, ev: Path, traj: dict, k: int, j: int) -> float:
    """Top-1 minus top-2 logit of the local model where the local trajectory took its turn-k token j
    (its context rebuilt by replaying it: greedy decoding is deterministic)."""
    import torch

    from rtpo.config import load_config, method_settings
    from rtpo.engine.base import SamplingParams
    from rtpo.engine.local import LocalEngine
    from rtpo.rollout import Roller, Start
    from rtpo.assembly import env_factory
    from rtpo.data import load_tasks

    s = method_settings(load_config(cfg_path, validate=False), "vanilla", "math")
    eng = LocalEngine.from_pretrained(model, seed=0, reference=False)
    roller = Roller(eng, env_factory(s["env"]), s["psi"],
                    SamplingParams(max_new_tokens=int(s["env"]["max_new_tokens"]), temperature=0.0))
    task = next(t for t in load_tasks(ev) if t.id == traj["id"])
    t = roller.run([Start(task, first_kind="eval", rest_kind="eval", seed=traj["seed"])])[0]
    assert t.turns[k].action_ids[:j] == traj["turns"][k]["action_ids"][:j]
    ctx = t.turns[k].context_ids + t.turns[k].action_ids[:j]
    with torch.no_grad():
        top = eng.model(input_ids=torch.tensor([ctx])).logits[0, -1].float().topk(2).values
    return float(top[0] - top[1])


def test_servers_that_fail_to_start_leave_no_ray_head(tmp_path, monkeypatch):
    """A failure while the servers start (verl's LLMServerManager, e.g. vLLM's engine core refusing its memory
    settings) closes what start() opened: the job's own Ray head is stopped, not left running after the job."""
    import ray

    import rtpo.verl_ext.eval_servers as es
    from verl.workers.rollout import llm_server

    class Head:
        stopped = False

        def stop(self):
            Head.stopped = True

    from rtpo.config import load_config

    cfg = load_config(_cfg(tmp_path))
    servers = es.EvalServers(cfg, _model_dir(tmp_path, 512), seed=0, max_new_tokens=8)
    monkeypatch.setattr(es, "join_ray", lambda *a, **k: Head())
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "shutdown", lambda: None)

    def refuse(config):
        raise RuntimeError("Engine core initialization failed")

    monkeypatch.setattr(llm_server.LLMServerManager, "create", staticmethod(refuse))
    monkeypatch.setenv("RAY_AUTH_MODE", "token")  # as the job exports it (Ray is imported here already)
    from unittest import mock

    with mock.patch.dict(os.environ), pytest.raises(RuntimeError, match="Engine core initialization failed"):
        servers.start()  # (start() exports the harness's variables: restored after)
    assert Head.stopped and servers._head is None and not servers._started_ray
