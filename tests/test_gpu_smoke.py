"""scripts/gpu_smoke.sh without a GPU (fast, no Ray): every GPU case's config composes with verl's Hydra
config, the case runner isolates failures and prints the table, and the command line's checks.
The cases themselves run on vLLM's CPU build in tests/vllm_cpu/test_gpu_smoke_cpu.py."""

from __future__ import annotations

import pytest

pytest.importorskip("verl")

import time  # noqa: E402

from rtpo.verl_ext import gpu_smoke as gs  # noqa: E402


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
    assert c.trainer.total_training_steps == (s.steps if case == "per_stage" else 1)
    want = {
        "per_stage": lambda: c.rtpo.method_cfg.sync == "per_stage" and c.trainer.save_freq == 1,
        "interval": lambda: r.name == "vllm_keep" and c.rtpo.method_cfg.sync == "interval:2" and c.rtpo.env.max_turns == 3,
        "kl": lambda: r.name == "vllm_keep" and c.rtpo.method_cfg.sync == "kl:0.01" and c.actor_rollout_ref.rollout.temperature == 1.0,
        "grpo": lambda: c.trainer.v1.trainer_mode == "rtpo_chain_sync" and r.n == 4,
        "arpo": lambda: c.rtpo.method == "arpo" and c.rtpo.method_cfg.total == 4,
        "tp2": lambda: r.tensor_model_parallel_size == 2 and c.trainer.n_gpus_per_node == 2,
        "remove_padding": lambda: m.use_remove_padding and m.override_config.attn_implementation == gs.paper_attention(),
        "paper_length": lambda: c.trainer.v1.trainer_mode == "rtpo_chain_sync",
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
    from rtpo.verl_ext import vllm_cpu
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
    from rtpo.verl_ext import vllm_cpu

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
