"""scripts/gpu_smoke.sh without a GPU (fast, no Ray): every GPU case's config composes with verl's Hydra
config, the case runner isolates failures and prints the table, and the command line's checks.
The cases themselves run on vLLM's CPU build in tests/vllm_cpu/test_gpu_smoke_cpu.py; the torch-only
paper_memory case (scripts/gpu_memory.py) is rehearsed here at its tiny shape on the CPU, and its
extrapolation arithmetic checked on constructed numbers. Both programs live in scripts/, outside the
package: they are imported from there (scripts/ on sys.path, as gpu_smoke.py finds gpu_memory.py)."""

from __future__ import annotations

import pytest

pytest.importorskip("verl")

import math  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
if str(SCRIPTS) not in sys.path:
    sys.path.append(str(SCRIPTS))

import gpu_memory as gm  # noqa: E402  (scripts/gpu_memory.py)
import gpu_smoke as gs  # noqa: E402  (scripts/gpu_smoke.py)


@pytest.mark.parametrize("case", gs.TRAIN_CASES)
def test_every_gpu_case_config_composes_with_verl(case, tmp_path):
    """What each GPU case passes to verl is valid for verl 0.9.1 (Hydra rejects unknown keys) and sets
    the path the case is about: a typo in a case fails here, not on the first GPU."""
    from rtpo.verl_ext.eval_servers import compose
    from rtpo.verl_ext.launch import lengths, verl_overrides

    s = gs.Smoke(out=tmp_path, gpus=2 if case == "tp2" else 1)
    method, cfg = gs.case_config(case, s)
    ov = verl_overrides(cfg, method, "toy", 0, tmp_path, tmp_path / "model", tmp_path / "t.parquet",
                        tmp_path / "v.parquet", cpu=False)
    c = compose(ov)
    a, r, m = c.actor_rollout_ref.actor, c.actor_rollout_ref.rollout, c.actor_rollout_ref.model
    assert c.trainer.device == "cuda" and r.name in ("vllm", "vllm_keep") and c.rtpo.env.reward == "parity"
    assert c.trainer.total_training_steps == {"per_stage": s.steps, "tree_grpo": 2}.get(case, 1)
    want = {
        "per_stage": lambda: c.rtpo.method_cfg.sync == "per_stage" and c.trainer.save_freq == 1,
        "interval": lambda: r.name == "vllm_keep" and c.rtpo.method_cfg.sync == "interval:2" and c.rtpo.env.max_turns == 3,
        "kl": lambda: r.name == "vllm_keep" and c.rtpo.method_cfg.sync == "kl:0.01" and c.actor_rollout_ref.rollout.temperature == 1.0,
        "grpo": lambda: c.trainer.v1.trainer_mode == "rtpo_chain_sync" and r.n == 4,
        "arpo": lambda: c.rtpo.method == "arpo" and c.rtpo.method_cfg.total == 4,
        "tp2": lambda: r.tensor_model_parallel_size == 2 and c.trainer.n_gpus_per_node == 2,
        "remove_padding": lambda: m.use_remove_padding and m.override_config.attn_implementation == gs.paper_attention(),
        "paper_length": lambda: c.trainer.v1.trainer_mode == "rtpo_chain_sync",
        # paper.yaml's KL (reference model on) and Tree-GRPO's entropy bonus (entropy with gradients)
        "tree_grpo": lambda: c.rtpo.method == "tree_grpo" and a.entropy_coeff == 0.001 and a.use_kl_loss
        and a.kl_loss_coef == 0.02 and a.kl_loss_type == "low_var_kl" and a.entropy_checkpointing,
        "seeupo": lambda: c.rtpo.method == "seeupo" and a.use_kl_loss and a.kl_loss_coef == 0.02
        and c.rtpo.method_cfg.ratio_clip == [0.8, 1.2],
    }
    assert want[case](), case
    if case == "paper_length":  # config/paper.yaml's math cell, read at run time
        z = gs.paper_length_sizes(cpu=False)
        P, R = lengths(cfg, method, cfg["env"]["toy"])
        assert (c.data.max_prompt_length, c.data.max_response_length) == (P, R) == (z["prompt"], R)
        assert c.rtpo.max_new_tokens == z["max_new_tokens"] and c.rtpo.env.max_turns == z["turns"]
        assert a.ppo_max_token_len_per_gpu == z["micro_batch_tokens"] >= P + R
        assert P + R <= gs.MAX_POSITIONS and z["question"] < P


def test_cpu_rehearsal_configs_use_vllms_cpu_build(tmp_path, monkeypatch):
    from rtpo.verl_ext.cpu_harness import vllm_cpu
    from rtpo.verl_ext.launch import verl_overrides

    monkeypatch.setattr(vllm_cpu, "installed", lambda: True)  # the overrides only; nothing starts

    s = gs.Smoke(out=tmp_path, cpu=True, prompts=2, size="tiny")
    for case in ("per_stage", "interval", "grpo", "paper_length"):
        method, cfg = gs.case_config(case, s)
        assert cfg["verl"]["device"] == "cpu" and cfg["verl"]["cpu_rollout"] == "vllm"
        ov = verl_overrides(cfg, method, "toy", 0, tmp_path, tmp_path / "model", tmp_path / "t.parquet",
                            tmp_path / "v.parquet", cpu=True)
        assert "actor_rollout_ref.rollout.dtype=float32" in ov
    assert gs.paper_length_sizes(cpu=True)["question"] == gs.CPU_PAPER_LENGTH["question"]
    # KL on GPUs only: the CPU harness cannot build verl's reference model (gs.CPU_NO_REFERENCE)
    for case in ("tree_grpo", "seeupo"):
        assert gs.case_config(case, s)[1]["train"]["kl_coef"] == 0.0
        assert gs.case_config(case, gs.Smoke(out=tmp_path))[1]["train"]["kl_coef"] == 0.02


def test_a_failing_case_does_not_stop_the_others(tmp_path, monkeypatch, capsys):
    def ok(s):
        """Passes."""
        return gs.Row("ok", "PASS", "fine", 123.4)

    def bad(s):
        """Fails a check."""
        return gs.verdict("bad", ["ratio 1.3 (want |ratio - 1| < 0.05)"], "measured", 5.0)

    def boom(s):
        """Raises."""
        raise RuntimeError("the servers did not start")

    def skip(s):
        """Skips."""
        raise gs.Skip("needs >= 2 GPUs")

    monkeypatch.setattr(gs, "CASES", {"boom": boom, "bad": bad, "skip": skip, "ok": ok})
    rows = gs.run_cases(["boom", "bad", "skip", "ok"], gs.Smoke(out=tmp_path))
    assert [(r.case, r.result) for r in rows] == [("boom", "FAIL"), ("bad", "FAIL"), ("skip", "SKIP"), ("ok", "PASS")]
    assert "RuntimeError: the servers did not start" in rows[0].detail and "ratio 1.3" in rows[1].detail
    t = gs.table(rows).splitlines()
    assert t[0].split() == ["case", "result", "tok/s", "detail"] and len(t) == 5
    assert t[4].split()[:3] == ["ok", "PASS", "123"] and t[3].split()[:3] == ["skip", "SKIP", "n/a"]
    assert "Traceback" in capsys.readouterr().err


def test_on_policy_checks_catch_a_stale_stage():
    recs = [{"step": 0, "turns": [{"k": 1, "ratio_mean": 1.0, "kl_rollout_train": 0.0},
                                  {"k": 0, "ratio_mean": 0.99, "kl_rollout_train": 3e-3}]}]
    assert gs.on_policy_problems(gs.stage_items(recs, (1,)), 1e-4, 1e-5) == []
    bad = gs.on_policy_problems(gs.stage_items(recs), 1e-4, 1e-5)
    assert len(bad) == 2 and all(b.startswith("step 0 k=0") for b in bad)
    assert gs.on_policy_problems([("step 0", None, None)], 0.05, 2e-3)  # nothing measured is no PASS


def test_verl_step_metrics_parse_the_console_line():
    line = ("(TaskRunnerV1 pid=1) step:1 - actor/pg_loss:np.float64(-0.083) - response_length/max:10.0 - "
            "prompt_length/max:8031.0 - perf/throughput:52.5 - timing_s/step:1.2e+01 - num_turns/min:np.int32(0)")
    (m,) = gs.verl_step_metrics("noise\n" + line)
    assert m["prompt_length/max"] == 8031 and m["response_length/max"] == 10 and m["timing_s/step"] == 12.0
    assert m["actor/pg_loss"] == -0.083 and m["num_turns/min"] == 0


def test_command_line(capsys):
    assert gs.main(["--list"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert [x.split()[0] for x in listed] == list(gs.CASES)
    with pytest.raises(SystemExit, match="unknown case"):
        gs.main(["--cases", "grpo,nope"])
    assert gs.select(None, skip_train=True) == ["eval"] and gs.select("grpo,eval", False) == ["grpo", "eval"]


def test_cpu_rehearsal_without_vllms_cpu_build_exits_2(capsys):
    from rtpo.verl_ext.cpu_harness import vllm_cpu

    if vllm_cpu.installed():
        pytest.skip("this environment has vLLM's CPU build")
    assert gs.main(["--cpu", "--cases", "grpo"]) == 2
    assert "bash scripts/setup_venv_vllm.sh" in capsys.readouterr().err


def test_the_watchdog_stops_a_hung_main_ppo_child():
    """A verl run that hangs (as after a failed weight push into vLLM, seen on the CPU rehearsal) is
    stopped after --timeout: SIGTERM to this process's main_ppo children, and the case FAILs."""
    import subprocess
    import sys
    from pathlib import Path

    hung = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "-m", "verl.trainer.main_ppo"])
    try:
        assert hung.pid in gs.main_ppo_children()
        timer, fired = gs.stop_after(0.5)
        assert hung.wait(timeout=30) == -15 and fired.is_set()  # SIGTERM
        timer.cancel()
    finally:
        if hung.poll() is None:
            hung.kill()
    t = gs.Trained(-15, Path("/x"), [], "", [], None, timed_out=True)
    assert "stopped by the --timeout watchdog" in gs.failed_run("grpo", t).detail
    assert gs.main_ppo_children() == []


def test_the_watchdog_kills_only_its_own_run():
    """A main_ppo that ignores SIGTERM gets SIGKILL after the grace period; a run started meanwhile (the
    next case's) is left alone."""
    import subprocess
    import sys

    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
    stubborn = subprocess.Popen([sys.executable, "-c", code, "-m", "verl.trainer.main_ppo"])
    later = None
    try:
        time.sleep(1.0)  # the SIGTERM handler is installed
        timer, fired = gs.stop_after(0.1, grace=3.0)
        assert fired.wait(10)
        later = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "-m", "verl.trainer.main_ppo"])
        assert stubborn.wait(timeout=30) == -9
        timer.join()
        assert later.poll() is None and later.pid in gs.main_ppo_children()
    finally:
        for p in (stubborn, later):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()


# ------------------------------------------------------------------ paper_memory (torch only)
# The CPU rehearsal of `python scripts/gpu_memory.py` (what the paper_memory case runs on a GPU):
# the tiny shape, every method, 2 and 4 layers, through the command line with its JSON (~20 s).
@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory):
    import contextlib
    import io
    import json

    js = tmp_path_factory.mktemp("paper_memory") / "pm.json"
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = gm.main(["--tiny", "--device", "cpu", "--layers", "2,4", "--json", str(js)])
    out = buf.getvalue()
    print(out)
    return rc, out, json.loads(js.read_text())


def test_paper_memory_rehearsal_prints_a_verdict_and_numbers_per_method(rehearsal):
    rc, out, res = rehearsal
    assert rc == 0 and res["ok"] and res["tiny"] and res["tokens"] == 256 and res["target_layers"] == 36
    lines = out.splitlines()
    for m in gm.METHODS:
        (line,) = [x for x in lines if x.startswith(f"paper_memory {m}: ")]
        assert line.split()[2] == "PASS", line
        assert "36-layer peak " in line and " vs 80 GiB" in line and "tok/s forward" in line and "KL " in line
        assert ("does not count" in line) == (m in gm.COMPARISON)
        v = res["verdicts"][m]
        assert set(v["per_pass_gib"]) == set(gm.PASSES) and v["peak_gib"] == max(v["per_pass_gib"].values())
        for L in ("2", "4"):
            r = res["results"][m][L]
            assert r["error"] is None and r["kl"] > 0 and math.isfinite(r["loss"]) and r["grad_norm"] > 0
            for p in gm.PASSES:
                x = r["passes"][p]
                assert x["peak"] > x["state"] > 0 and x["excess"] == x["peak"] - x["state"] and x["seconds"] > 0
                assert x["tokens"] == 256
                # the table row of this pass: peak, excess, state (MiB), seconds, tokens/s
                row = [y for y in lines if y.split()[:3] == [m, L, p]]
                assert len(row) == 1 and float(row[0].split()[3]) == pytest.approx(x["peak"] / 2 ** 20, abs=1e-3)
    assert lines[-1].startswith("paper_memory: PASS")
    # the Tree-GRPO line compares with verl's unpatched entropy; the smoke's row of this JSON
    row = gs.paper_memory_row(res)
    assert row.result == "PASS" and row.tok_s > 0 and "tree_grpo_verl PASS" in row.detail
    assert "(CPU --tiny rehearsal: not the paper's memory)" in row.detail


def test_paper_memory_rehearsal_measures_what_the_arithmetic_assumes(rehearsal):
    """The numbers the extrapolation stands on, at the tiny shape (bf16, T = 256, H = 64, V = 2048): the
    update's excess grows by the checkpointed bf16 layer input, 2 B x T x H per layer; the no-grad
    passes' does not grow; the patched entropy keeps the logits (2 B x T x V) where verl's function keeps
    them and its recompute's fp32 chunks and softmax (+8 B x T x V)."""
    _, _, res = rehearsal
    T, H, V = 256, 64, 2048
    r = res["results"]
    for m in ("grpo", "rtpo", "tree_grpo"):
        for p in ("update_fwd", "backward"):
            d = (r[m]["4"]["passes"][p]["excess"] - r[m]["2"]["passes"][p]["excess"]) / 2
            assert d == pytest.approx(2 * T * H, rel=0.05), (m, p, d)
        for p in ("old_logprob", "ref"):
            assert r[m]["4"]["passes"][p]["excess"] == pytest.approx(r[m]["2"]["passes"][p]["excess"], abs=4096)
    v = res["verdicts"]["grpo"]
    assert v["per_layer"]["update_fwd"] == pytest.approx(2 * T * H, rel=0.05) and v["how"] == "2 vs 4 layers"
    saved = {m: r[m]["4"]["saved"] for m in ("grpo", "tree_grpo", "tree_grpo_verl")}
    assert saved["tree_grpo"] < saved["tree_grpo_verl"]  # the patch saves fewer bytes
    assert (saved["tree_grpo"] - saved["grpo"]) / (T * V) == pytest.approx(2.0, abs=0.05)
    assert (saved["tree_grpo_verl"] - saved["tree_grpo"]) / (T * V) == pytest.approx(8.0, abs=0.05)
    bwd = {m: r[m]["4"]["passes"]["backward"]["excess"] for m in ("tree_grpo", "tree_grpo_verl")}
    assert bwd["tree_grpo"] < bwd["tree_grpo_verl"]


def _constructed(excess: dict[int, dict[str, int]], kl: float = 1e-3):
    """MethodResults with chosen per-pass excess bytes (state 1 GiB) at layer counts."""
    G = 2 ** 30
    return {L: gm.MethodResult("grpo", L, {p: gm.PassResult(G + e[p], G, 1.0, 24576) for p in gm.PASSES}, 0, 0.1, kl,
                               1.0, None) for L, e in excess.items()}


def test_extrapolation_arithmetic_on_constructed_numbers():
    import dataclasses

    assert gm.extrapolate({2: 10.0, 4: 14.0}, 36, 99.0) == (78.0, 2.0, "2 vs 4 layers")  # 14 + 32 x 2
    assert gm.extrapolate({2: 10.0, 3: 11.0, 4: 14.0}, 6, 0.0)[:2] == (18.0, 2.0)  # smallest and largest L
    assert gm.extrapolate({2: 10.0, 4: 9.0}, 36, 5.0)[:2] == (9.0, 0.0)  # noise: no negative increment
    assert gm.extrapolate({4: 14.0}, 36, 5.0) == (174.0, 5.0, "layer-count model from 4 layers")
    assert gm.paper_peak(3 * 2 ** 30, 15.25, 4.25, 9.0) == 31.5
    s = gm.paper_setup()  # config/paper.yaml: Qwen3-8B, 24576 tokens, 8 GPUs, 80 GiB
    t = s.startup_terms
    assert (s.shape.layers, s.tokens, s.n_gpus, s.budget_gib) == (36, 24576, 8, 80.0)
    assert t["state"] == pytest.approx(16 * s.shape.params / 8 / 2 ** 30) and t["state"] == pytest.approx(15.26, abs=0.01)
    G, M = 2 ** 30, 2 ** 20
    base = {"old_logprob": 8 * G, "ref": 8 * G, "update_fwd": 20 * G, "backward": 30 * G, "optimizer": 2 * G}
    four = {**base, "update_fwd": 20 * G + 384 * M, "backward": 30 * G + 384 * M}  # +192 MiB per layer
    params = {2: 10 ** 9, 4: 2 * 10 ** 9}
    v = gm.judge(s, "grpo", _constructed({2: base, 4: four}), params, 2)
    fixed = t["state"] + t["transient"] + t["fixed"]
    assert v.per_layer["backward"] == 192 * M and v.per_layer["old_logprob"] == 0
    assert v.per_pass_gib["backward"] == pytest.approx(fixed + 30 + (384 + 32 * 192) / 1024)  # 30 GiB + 36 x 192 MiB
    assert v.per_pass_gib["ref"] == pytest.approx(fixed + 8)
    # the optimizer's excess scales with the fp32 parameters one GPU steps: N / 8 x 4 B over 2e9 x 2 B
    assert v.per_pass_gib["optimizer"] == pytest.approx(fixed + 2 * (s.shape.params / 8 * 4) / (2 * 10 ** 9 * 2))
    assert v.peak_pass == "backward" and v.result == "PASS"
    assert v.peak_gib == pytest.approx(64.83, abs=0.01)  # 15.26 + 4.20 + 9.0 + 36.38
    # planted: 4 GiB more in backward at 4 layers -> +2 GiB per layer -> far above 80 GiB
    worse = {**four, "backward": 34 * G + 384 * M}
    v = gm.judge(s, "grpo", _constructed({2: base, 4: worse}), params, 2)
    assert v.result == "FAIL" and v.peak_pass == "backward" and "> 80 GiB" in v.problems[0]
    # one layer count: the layer-count model, 2 B x T x H per layer for the passes with gradients
    v = gm.judge(s, "grpo", _constructed({4: four}), params, 2)
    assert v.per_layer["backward"] == 2 * 24576 * 4096 and v.how == "layer-count model from 4 layers"
    # KL 0 (the reference model did not score) fails; a smaller budget fails
    assert gm.judge(s, "grpo", _constructed({2: base, 4: four}, kl=0.0), params, 2).result == "FAIL"
    small = dataclasses.replace(s, budget_gib=60.0)
    assert gm.judge(small, "grpo", _constructed({2: base, 4: four}), params, 2).result == "FAIL"
    # Tree-GRPO fails when the patched entropy path is not below verl's
    a, b = _constructed({4: four})[4], _constructed({4: four})[4]
    a.saved, b.saved = 10, 5
    v = gm.judge(s, "tree_grpo", {4: a}, params, 2, patched_vs_verl=(a, b))
    assert v.result == "FAIL" and any("not fewer than verl's" in p for p in v.problems)
    oom = gm.MethodResult("grpo", 4, {}, 0, math.nan, math.nan, math.nan, None, error="CUDA out of memory")
    v = gm.judge(s, "grpo", {4: oom}, params, 2)
    assert v.result == "FAIL" and "CUDA out of memory" in v.problems[0] and math.isnan(v.peak_gib)


def test_paper_memory_setup_reads_the_paper_cell():
    s = gm.paper_setup()
    assert (s.shape.hidden, s.shape.intermediate, s.shape.heads, s.shape.kv_heads, s.shape.head_dim, s.shape.vocab) == \
        (4096, 12288, 32, 8, 128, 151936)
    assert s.rows["grpo"] == s.rows["seeupo"] == [(21504, 8192), (3072, 1536)]  # math: 8192 + 3 x 4096 + 2 x 512
    assert s.rows["rtpo"] == [(12288, 8192), (12288, 8192)]  # c_k + one turn
    assert all(sum(n for n, _ in r) == 24576 for r in s.rows.values())
    assert s.loss["tree_grpo"].entropy_coef == 0.001 and s.loss["grpo"].entropy_coef == 0.0
    assert all(x.kl_coef == 0.02 for x in s.loss.values())
    assert s.loss["seeupo"].adv_clamp == 3.0 and s.loss["seeupo"].clip_low == pytest.approx(0.2)
    assert s.attn == gs.paper_attention() and s.chunk == 2048
    assert gm.pack(24576, 8192, 24576) == [(24576, 8192)]
    assert gm.attention("flash_attention_2")[0] in ("flash_attention_2", "sdpa")


def test_paper_memory_uses_verls_functions():
    """The copies of verl's log-prob and KL functions in the torch-only script are verl's."""
    import torch
    from verl.trainer.ppo.core_algos import kl_penalty_forward
    from verl.utils.torch_functional import logprobs_from_logits_v2

    g = torch.Generator().manual_seed(0)
    for dt in (torch.float32, torch.bfloat16):
        logits = (3 * torch.randn(40, 300, generator=g)).to(dt)
        labels = torch.randint(0, 300, (40,), generator=g)
        assert torch.equal(gm.logprobs_from_logits_v2(logits, labels), logprobs_from_logits_v2(logits, labels))
    a, b = torch.randn(50, generator=g), torch.randn(50, generator=g)
    assert torch.equal(gm.low_var_kl(a, b), kl_penalty_forward(a, b, "low_var_kl"))


def test_packed_row_keeps_its_sequences_apart():
    """Remove-padding as the measurement runs it: a sequence in the packed row (position ids restarting)
    gets the logits it gets alone, so the packed sdpa mask is block-diagonal."""
    import torch

    s = gm.paper_setup(tiny=True)
    policy, _ = gm.build_models(s, 2, torch.device("cpu"), torch.float32)
    policy.eval()
    b = gm.packed_batch([(40, 10), (24, 8)], s.shape.vocab, torch.device("cpu"))
    with torch.no_grad():
        packed = policy(input_ids=b["input_ids"], position_ids=b["position_ids"]).logits[0]
        alone = policy(input_ids=b["input_ids"][:, 40:], position_ids=b["position_ids"][:, 40:]).logits[0]
    torch.testing.assert_close(packed[40:], alone, rtol=1e-4, atol=1e-4)
    assert b["position_ids"][0, 40] == 0 and b["mask"][:10].sum() == 0 and b["mask"][10:40].sum() == 30


def test_torch_only_cases_need_no_vllm(tmp_path, monkeypatch):
    """paper_memory alone needs no vLLM (GPU) and no vLLM CPU build (--cpu); without CUDA it SKIPs."""
    import torch

    from rtpo.verl_ext.cpu_harness import vllm_cpu

    monkeypatch.setattr(vllm_cpu, "installed", lambda: False)
    assert gs.environment_problem(True, ["paper_memory"]) is None
    assert gs.environment_problem(False, ["paper_memory"]) is None
    assert "vLLM's CPU build" in gs.environment_problem(True, ["paper_memory", "grpo"])
    assert "paper_memory" in gs.TORCH_ONLY_CASES and "paper_memory" not in gs.TRAIN_CASES
    if not torch.cuda.is_available():
        (row,) = gs.run_cases(["paper_memory"], gs.Smoke(out=tmp_path))
        assert row.result == "SKIP" and "no CUDA device" in row.detail


def test_the_programs_run_from_scripts(tmp_path):
    """Both programs run by path from any directory with nothing on PYTHONPATH (each puts its checkout
    on sys.path), gpu_smoke.sh calls scripts/gpu_smoke.py, and gpu_memory.py needs no verl, vLLM or Ray:
    here they are made unimportable and its tiny rehearsal of one method still runs."""
    import json
    import os
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    listed = subprocess.run([sys.executable, str(SCRIPTS / "gpu_smoke.py"), "--list"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr
    assert [x.split()[0] for x in listed.stdout.splitlines()] == list(gs.CASES)
    sh = subprocess.run(["bash", str(SCRIPTS / "gpu_smoke.sh"), "--list"], cwd=tmp_path,
                        env={**env, "PYTHON": sys.executable}, capture_output=True, text=True, timeout=120)
    assert sh.returncode == 0 and sh.stdout == listed.stdout, sh.stderr
    block = ("import runpy, sys\n"
             "class NoGpuStack:\n"
             "    def find_spec(self, name, path=None, target=None):\n"
             "        if name.split('.')[0] in ('verl', 'vllm', 'ray'):\n"
             "            raise ImportError(f'{name} is blocked: gpu_memory.py must run with torch alone')\n"
             "sys.meta_path.insert(0, NoGpuStack())\n"
             "sys.argv = sys.argv[1:]\n"
             "runpy.run_path(sys.argv[0], run_name='__main__')\n")
    js = tmp_path / "pm.json"
    res = subprocess.run([sys.executable, "-c", block, str(SCRIPTS / "gpu_memory.py"), "--tiny", "--device", "cpu",
                          "--layers", "2", "--methods", "grpo", "--json", str(js)], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode in (0, 1) and js.exists(), res.stdout[-2000:] + res.stderr[-2000:]
    assert "paper_memory grpo: " in res.stdout and list(json.loads(js.read_text())["verdicts"]) == ["grpo"]
