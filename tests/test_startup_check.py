"""The start-up arithmetic of the verl path (rtpo.verl_ext.startup, `rtpo check-config`).

Every cell of config/paper.yaml passes; planted settings fail naming the cell and the key: an
over-long row against the per-GPU token budget, a turn longer than the budget, the issue's original
settings (airline above Qwen3-8B's 40960 positions), flash_attention_2 without flash-attn in the GPU
environment spec, Ulysses with sdpa, fused kernels with an untied lm_head, a profile with too few
GPUs or too little host memory for vLLM's level-1 sleep. The CLI exits 2; `snakemake -n` stops.
"""

from __future__ import annotations

import copy
import json
import os
import sys
from pathlib import Path

import pytest
import yaml

from rtpo.config import ROOT, load_config
from rtpo.verl_ext import startup as st
from tests.conftest import run_snakemake, workflow_copy

PAPER = ROOT / "config" / "paper.yaml"
# the site profile, then the workflow profile over it (what `snakemake --profile slurm` reads)
PROFILES = (ROOT / "slurm", ROOT / "workflow" / "profiles" / "default")
FLAT = ("grpo", "tree_grpo", "arpo", "seeupo")


def paper(*sets: str) -> dict:
    return load_config(PAPER, list(sets))


def failing(rep: st.Report) -> dict[str, set[tuple[str, str]]]:
    """cell -> {(rule, key)} of the failed rules."""
    out: dict[str, set] = {}
    for f in rep.all_findings():
        out.setdefault(f.cell, set()).add((f.rule, f.key))
    return out


def test_every_paper_cell_passes_with_its_arithmetic():
    cfg = paper()
    rep = st.check_config(cfg, st.load_profile(*PROFILES))
    assert rep.ok, st.format_report(rep)
    cells = {c.cell: c for c in rep.cells}
    # the main grid (vanilla trains nothing) and the ablation cells the DAG trains
    for t in cfg["tasks"]:
        for m in ("rtpo", *FLAT):
            assert f"{m}/{t}" in cells
    for label in ("sync/interval-2: rtpo/search", "sync/kl-0.01: rtpo/search", "continuation/off_policy: rtpo/search",
                  "group_size/G2: rtpo/airline", "group_size/G4: rtpo/airline",
                  "credit_assignment/psi-full: rtpo_ca/math"):
        assert label in cells
    assert "group_size/G3: rtpo/airline" not in cells  # a copy of rtpo/airline (reused, not trained)
    v = {k: c.values for k, c in cells.items()}
    assert v["rtpo/search"]["P+R"] == 8192 + 4096  # E.3: 8192-token prompts, 4096-token turns
    assert v["grpo/math"]["P+R"] == 8192 + 3 * 4096 + 2 * 512  # the whole K = 3 episode
    for t in ("search", "airline"):  # capped at verl.max_context
        assert v[f"grpo/{t}"]["P+R"] == cfg["verl"]["max_context"] == 24576
    for c in cells.values():
        assert c.values["attention"] == "sdpa" and c.values["P+R"] <= c.values["tokens/GPU"] <= 24576
        assert c.values["max pos"] == 40960 and c.memory.total < 80
    assert v["sync/interval-2: rtpo/search"]["keep"] and not v["rtpo/search"]["keep"]
    assert rep.evals[0].ok and rep.evals[0].values["GPUs"] == 4
    # each method's context bound, side by side (RTPO's c_k against the baselines' episode)
    assert v["rtpo/math"]["context bound"] == "c_k <= 8192, turn <= 4096"
    # under psi = full c_k is the episode: RTPO-CA gets the flat rows' total context (tests/test_equal_context.py)
    assert v["credit_assignment/psi-full: rtpo_ca/math"]["context bound"].startswith("c_k <= 17408")
    assert v["grpo/math"]["context bound"] == f"episode <= {v['grpo/math']['P+R']}"
    table = st.format_report(rep)
    assert "| context bound |" in table and "| rtpo/search | c_k <= 8192, turn <= 4096 |" in table


def test_issue_settings_fail_naming_cell_and_key():
    """config/paper.yaml before the start-up check: 16384-token budget, no row cap."""
    cfg = paper("train.micro_batch_tokens=16384")
    del cfg["verl"]["max_context"]
    fails = failing(st.check_config(cfg))
    assert ("positions", "verl.max_context (or env.airline.max_turns / max_new_tokens, verl.obs_tokens)") in \
        fails["grpo/airline"]  # 44544 > 40960
    for t in ("math", "search", "airline"):
        for m in FLAT:
            assert ("tokens", "train.micro_batch_tokens") in fails[f"{m}/{t}"], (m, t)
        assert f"rtpo/{t}" not in fails  # 12288 fits 16384
    rep = st.check_config(cfg)
    search = next(c for c in rep.cells if c.cell == "grpo/search")
    assert search.values["P+R"] == 35328


def test_planted_budget_fails_naming_cell_and_key():
    rep = st.check_config(paper("train.micro_batch_tokens=8192"))
    fails = failing(rep)
    assert ("tokens", "train.micro_batch_tokens") in fails["rtpo/search"]
    assert ("tokens", "train.micro_batch_tokens") in fails["sync/kl-0.01: rtpo/search"]
    msg = next(str(f) for f in rep.all_findings() if f.cell == "rtpo/search")
    assert msg.startswith("rtpo/search: train.micro_batch_tokens: prompt + response = 8192 + 4096 = 12288 > ")
    assert "seqlen_balancing.py" in msg
    # a per-method budget is named as such
    rep = st.check_config(paper("method.arpo.micro_batch_tokens=16384"))
    assert failing(rep) == {f"arpo/{t}": {("tokens", "method.arpo.micro_batch_tokens")} for t in ("math", "search", "airline")}


def test_planted_turn_length_fails_naming_the_env_key():
    fails = failing(st.check_config(paper("env.search.max_new_tokens=20000")))
    key = "env.search.max_prompt_tokens / env.search.max_new_tokens"
    assert ("tokens", "train.micro_batch_tokens") in fails["rtpo/search"]  # 8192 + 20000 > 24576
    assert ("row cap", key) in fails["rtpo/search"]
    assert not any(c.endswith("/airline") or c.endswith("/math") for c in fails)
    fails = failing(st.check_config(paper("env.airline.max_new_tokens=30000")))
    assert ("one turn", "verl.max_context / env.airline.max_new_tokens") in fails["grpo/airline"]
    fails = failing(st.check_config(paper("env.math.max_new_tokens=40000", "train.micro_batch_tokens=65536")))
    assert ("positions", "env.math.max_prompt_tokens / env.math.max_new_tokens") in fails["rtpo/math"]


def test_memory_rule_fails_on_whole_episode_rows():
    """A budget holding the whole K = 6 episode (35328 tokens) on one GPU: its fp32 logits alone are
    ~20 GiB (the issue's 21 GB), the estimate exceeds an A100 80GB."""
    cfg = paper("train.micro_batch_tokens=35328", "verl.max_context=35328")
    rep = st.check_config(cfg)
    c = next(c for c in rep.cells if c.cell == "grpo/search")
    assert c.values["fp32 logits GiB"] == pytest.approx(35328 * 151936 * 4 / 2 ** 30, abs=0.05)
    assert ("memory", "train.micro_batch_tokens") in {(f.rule, f.key) for f in c.findings}
    assert c.memory.total > 80
    assert ("memory", "train.micro_batch_tokens") in failing(st.check_config(paper("verl.gpu_memory_gib=40")))["rtpo/math"]


def test_flash_attention_needs_flash_attn_in_the_gpu_env_spec(tmp_path):
    cfg = paper("verl.attn_implementation=flash_attention_2")
    fails = failing(st.check_config(cfg))
    assert all(("attention", "verl.attn_implementation") in fails[c.cell] for c in st.check_config(paper()).cells)
    # a GPU environment spec that installs flash-attn through verl's extra passes the rule
    (tmp_path / "environment.yml").write_text(yaml.safe_dump(
        {"name": "x", "dependencies": ["python=3.11", {"pip": ["torch==2.11.0",
                                                                 "verl[vllm,flash-attn-cu130torch211]==0.9.1"]}]}))
    spec = st.env_spec(tmp_path)
    assert spec.installs("flash-attn") and "flash_attention_2" in spec.attention()
    assert st.check_config(cfg, spec=spec).ok
    assert not st.env_spec(ROOT).installs("flash-attn")  # this repository's spec: sdpa only


def test_gpu_environment_installs_the_attention_the_overrides_name(tmp_path):
    """Deliverable 2: the GPU overrides name the attention explicitly, and environment.yml / the `gpu`
    extra install it (sdpa: torch); both pin the same GPU stack."""
    import tomllib

    from rtpo.verl_ext.launch import verl_overrides

    for method in ("rtpo", "grpo"):
        ov = st.parse_overrides(verl_overrides(paper(), method, "search", 0, tmp_path, tmp_path, "t", "v", cpu=False))
        attn = ov["actor_rollout_ref.model.override_config.attn_implementation"]
        assert attn == "sdpa" and attn in st.env_spec(ROOT).attention()
        assert ov["actor_rollout_ref.actor.entropy_from_logits_with_chunking"] is True
    cfg = paper()
    del cfg["verl"]["attn_implementation"]  # unnamed: still sdpa, never verl's flash_attention_2 default
    ov = st.parse_overrides(verl_overrides(cfg, "rtpo", "math", 0, tmp_path, tmp_path, "t", "v", cpu=False))
    assert ov["actor_rollout_ref.model.override_config.attn_implementation"] == "sdpa"
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pins = {r for d in env["dependencies"] if isinstance(d, dict) for r in d["pip"] if "==" in r}
    gpu = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["gpu"])
    assert gpu <= pins


def test_ulysses_needs_flash_attention_and_a_divisible_layout():
    fails = failing(st.check_config(paper("verl.ulysses_sequence_parallel_size=2")))
    assert ("sp", "verl.attn_implementation") in fails["grpo/search"]
    fails = failing(st.check_config(paper("verl.ulysses_sequence_parallel_size=3")))
    assert ("sp", "verl.ulysses_sequence_parallel_size") in fails["rtpo/math"]  # 8 GPUs, 32 heads, 8 kv heads


def test_fused_kernels_with_an_untied_lm_head_fail():
    fails = failing(st.check_config(paper("verl.use_fused_kernels=true")))
    assert ("fused", "verl.use_fused_kernels") in fails["rtpo/math"]
    assert st.KNOWN_MODELS["Qwen/Qwen3-8B"].params == pytest.approx(8.19e9, rel=1e-3)


def test_tensor_parallel_layout():
    fails = failing(st.check_config(paper("verl.tensor_parallel_size=3")))
    assert ("tp", "verl.tensor_parallel_size") in fails["grpo/math"]  # 8 GPUs, 32 heads
    assert ("tp", "verl.tensor_parallel_size") in fails["evaluate"]


def test_profile_resources_fail_naming_rule_and_key():
    res = st.load_profile(*PROFILES)
    small = copy.deepcopy(res)
    small["train_grpo"]["gpu"] = 4
    fails = failing(st.check_config(paper(), small))
    assert fails == {"train_grpo": {("gpu", "workflow/profiles/default/profile.yaml: set-resources.train_grpo.gpu")}}
    # vLLM sleep level 1 (vllm_keep: the sync interval:2 / kl:0.01 ablations) pins one bf16 copy of the
    # weights per replica in host RAM: 150 GB covers a training job without it, not ablation_train
    for rule in ("train_grpo", "ablation_train"):
        small = copy.deepcopy(res)
        small[rule]["mem_mb"] = 150000
        got = failing(st.check_config(paper(), small))
        assert got == ({} if rule == "train_grpo" else {rule: {("host memory", f"workflow/profiles/default/profile.yaml: "
                                                                                f"set-resources.{rule}.mem_mb")}})
    rep = st.check_config(paper(), res)
    row = next(r for r in rep.resources if r["rule"] == "ablation_train")
    assert row["host GiB"]["vllm_sleep_level1"] == pytest.approx(4 * 2 * 8.19e9 / 2 ** 30, rel=1e-2)
    small = copy.deepcopy(res)
    small["evaluate_run"]["gpu"] = 2
    assert ("gpu", "workflow/profiles/default/profile.yaml: set-resources.evaluate_run.gpu") in \
        failing(st.check_config(paper(), small))["evaluate_run"]


def test_model_shape_from_config_json(tmp_path):
    c = {"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
         "num_key_value_heads": 2, "vocab_size": 512, "max_position_embeddings": 1024, "tie_word_embeddings": True}
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps(c))
    s = st.model_shape({"model": {"path": str(tmp_path / "m"), "hub_id": "Qwen/Qwen3-8B"}}, tmp_path)
    assert (s.max_positions, s.head_dim, s.tied) == (1024, 16, True)
    with pytest.raises(st.CheckError, match="model.hub_id"):
        st.model_shape({"model": {"hub_id": "nobody/unknown", "path": None}}, tmp_path)


def test_cli_exit_codes_and_table(capsys):
    from rtpo.cli import main

    assert main(["check-config", "--config", str(PAPER)]) == 0
    out = capsys.readouterr().out
    # the verdict first, then the table
    assert out.startswith("check-config: PASS: 24 training cells, every check passes")
    assert out.splitlines()[2] == "| " + " | ".join(st.COLUMNS) + " |" and "every check passes" in out
    assert "| train_rtpo | 8 | 8 |" in out
    assert main(["check-config", "--config", str(PAPER), "--set", "train.micro_batch_tokens=8192"]) == 2
    r = capsys.readouterr()
    assert "FAIL: tokens" in r.out
    assert "start-up check failed: grpo/math: train.micro_batch_tokens: prompt + response" in r.err
    assert main(["check-config", "--config", str(ROOT / "config" / "config.yaml")]) == 0
    assert "nothing to check" in capsys.readouterr().out


def test_snakemake_dry_run_stops_naming_cell_and_key(tmp_path):
    wf = workflow_copy(tmp_path / "wf")
    cfg = yaml.safe_load((wf / "config" / "paper.yaml").read_text())
    cfg["train"]["micro_batch_tokens"] = 16384  # the value before the start-up check
    (wf / "config" / "planted.yaml").write_text(yaml.safe_dump(cfg))
    r = run_snakemake(wf, "-n", "--configfile", "config/planted.yaml")
    assert r.returncode != 0
    err = r.stdout + r.stderr
    assert ("start-up check failed: grpo/math: train.micro_batch_tokens: prompt + response = 8192 + 13312 = 21504 > "
            "actor.ppo_max_token_len_per_gpu x ulysses sp = 16384 x 1") in err, err[-2000:]
    assert "config/planted.yaml" in err


@pytest.mark.slow
def test_verl_fused_kernels_break_on_fsdp2_with_an_untied_lm_head(tmp_path):
    """Why the `fused` rule exists: verl 0.9.1's fused forward on an FSDP2 model whose untied lm_head is
    its own unit (2 CPU ranks, gloo) fails in the forward; a tied one works."""
    pytest.importorskip("verl")
    script = tmp_path / "fused.py"
    script.write_text(FUSED_SCRIPT)
    import subprocess

    env = {**os.environ, "PYTHONHASHSEED": "0"}
    for tied, ok in (("0", False), ("1", True)):
        r = subprocess.run([sys.executable, str(script), tied], capture_output=True, text=True, timeout=600, env=env)
        assert (r.returncode == 0) == ok, r.stderr[-3000:]
        if not ok:
            assert "mixed torch.Tensor and DTensor" in r.stderr


FUSED_SCRIPT = r'''
import os, sys, torch, torch.distributed as dist, torch.multiprocessing as mp

def run(rank, tied, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.manual_seed(0)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy
    from transformers import Qwen3Config, Qwen3ForCausalLM
    from verl.models.transformers.monkey_patch import apply_monkey_patch
    from verl.utils.fsdp_utils import apply_fsdp2
    m = Qwen3ForCausalLM(Qwen3Config(vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                     num_key_value_heads=2, intermediate_size=128, max_position_embeddings=256,
                                     tie_word_embeddings=tied, attn_implementation="sdpa"))
    apply_monkey_patch(model=m, use_remove_padding=True, ulysses_sp_size=1, use_fused_kernels=True,
                       fused_kernels_backend="torch")
    mesh = init_device_mesh("cpu", (2,), mesh_dim_names=("fsdp",))
    apply_fsdp2(m, {"mesh": mesh, "mp_policy": MixedPrecisionPolicy(param_dtype=torch.float32,
                                                                    reduce_dtype=torch.float32),
                    "reshard_after_forward": True}, {})
    ids = torch.randint(0, 512, (1, 40))
    pos = torch.cat([torch.arange(25), torch.arange(15)]).unsqueeze(0)
    out = m(input_ids=ids, position_ids=pos, attention_mask=None, use_cache=False, temperature=1.0,
            return_dict=True, shift_labels=torch.roll(ids, -1, -1))
    (-out.log_probs.mean()).backward()
    dist.destroy_process_group()

if __name__ == "__main__":
    tied = sys.argv[1] == "1"
    mp.spawn(run, args=(tied, 29600 + os.getpid() % 300 + (7 if tied else 0)), nprocs=2)
'''


def test_two_node_rule_without_mpi_fails_naming_the_key():
    """Issue 37.3: without `mpi`, the jobstep plugin runs a two-node job in `srun -n1 --nodes=2`."""
    import copy

    res = st.load_profile(*PROFILES)
    cfg = paper("verl.nnodes=2")
    two = copy.deepcopy(res)
    for rule in ("train_rtpo", "train_grpo"):
        two.setdefault(rule, {}).update(nodes=2, gpu=16)
    assert not [f for f in st.check_config(cfg, two).all_findings() if f.key.endswith(".mpi")]
    for r in two.values():  # the profile without `mpi` (per rule or in its defaults)
        r.pop("mpi", None)
    fs = [f for f in st.check_config(cfg, two).all_findings() if f.key.endswith(".mpi")]
    assert fs and all("srun -n1 --nodes=2" in f.message for f in fs)
    rules = {f.cell for f in fs}
    assert "train_rtpo" in rules and "train_grpo" in rules


TRAIN_RULES = ("train_rtpo", "train_grpo", "train_tree_grpo", "train_arpo", "train_seeupo", "ablation_train")


def test_a_per_node_gpu_request_is_read_and_a_job_total_over_nodes_refused():
    """Two nodes of 8 GPUs: `gres: gpu:a100:8` (sbatch --gres counts per node) and slurm_extra
    --gpus-per-node=8 are 16 GPUs and pass; `gpu: 16`, the job's total, is refused over two nodes (Slurm may
    split it unevenly) naming the fix; a per-node count other than verl.n_gpus_per_node is refused."""
    import copy

    res = st.load_profile(*PROFILES)
    cfg = paper("verl.nnodes=2")

    def two(**kw):
        r = copy.deepcopy(res)
        for rule in TRAIN_RULES:
            for k in ("gpu", "gpu_model"):
                r[rule].pop(k, None)
            r[rule].update(nodes=2, **kw)
        return st.check_config(cfg, r)

    def gpu_findings(rep):
        return [f for f in rep.all_findings() if f.rule in ("gpu", "gpu split") and f.cell in TRAIN_RULES]

    for kw in ({"gres": "gpu:a100:8"}, {"gres": "gpu:8"}, {"slurm_extra": "--gpus-per-node=a100:8"}):
        rep = two(**kw)
        assert gpu_findings(rep) == [], kw
        assert next(r for r in rep.resources if r["rule"] == "train_grpo")["gpu"] == 16
    bad = gpu_findings(two(gpu=16, gpu_model="a100"))
    assert {f.cell for f in bad} == set(TRAIN_RULES) and all(f.rule == "gpu split" for f in bad)
    assert "gpu 16 (the job's total) over 2 nodes: a job total may be split unevenly" in bad[0].message
    assert "gres: gpu:<type>:8" in bad[0].message and bad[0].key.endswith("set-resources.ablation_train.gpu")
    uneven = gpu_findings(two(gres="gpu:a100:4"))
    assert any("4 GPUs per node, but each node runs 8 (verl.n_gpus_per_node)" in f.message for f in uneven)
    assert any("gres gpu:a100:4 (per node): 8 GPUs < verl.n_gpus_per_node x verl.nnodes = 8 x 2 = 16" in f.message
               for f in uneven)
    both = gpu_findings(two(gres="gpu:a100:8", gpu_model="a100"))
    assert any("next to gpu / gpu_model" in f.message for f in both)


def test_turn_row_methods_of_the_launcher_are_the_registrys():
    """launch.TURN_ROW_METHODS (read without torch by the start-up check) and Method.rows (what the
    rollout bounds) name the same methods."""
    from rtpo.methods.registry import METHODS, get_method
    from rtpo.verl_ext.launch import TURN_ROW_METHODS

    assert set(TURN_ROW_METHODS) == {m for m in METHODS if get_method(m).rows == "turn"}


# ------------------------------------------------------------------ jobs that always make progress
def test_step_time_is_anchored_to_the_papers_e3_hours():
    """E.3: ~15 h math / ~5 h knowledge on 8 A100s at batch 64 over 5k / 1k prompts: RTPO at E.3's own
    settings gets exactly that per step; other cells scale with their generated tokens at the caps."""
    rep = st.check_config(paper(), st.load_profile(*PROFILES))
    cells = {c.cell: c for c in rep.cells}
    assert cells["rtpo/math"].time.anchor_step_s == pytest.approx(15 * 3600 / (5000 / 64))  # 11.5 min
    assert cells["rtpo/search"].time.anchor_step_s == pytest.approx(5 * 3600 / (1000 / 64))  # 19.2 min
    # GRPO's 16 chains of 3 x 4096 tokens against RTPO's 4 trunks x 18 turns: 2/3 of RTPO's step
    # (the paper's G.4 measures 1 / 1.413 = 0.71)
    assert cells["grpo/math"].time.anchor_step_s / cells["rtpo/math"].time.anchor_step_s == pytest.approx(2 / 3)
    g4 = cells["group_size/G4: rtpo/airline"].time
    # RTPO on airline: 2 trunks (E.3's rule for the longer horizon), K 8, G 4
    assert g4.anchor_step_s / 60 == pytest.approx(43.9, abs=0.1) and g4.step_s / 60 == pytest.approx(476.6, abs=0.1)
    assert cells["rtpo/math"].time.checkpoint_s == pytest.approx(98.3 / 0.5, rel=1e-2)
    out = st.format_report(rep)
    assert "paper E.3 (p. 37): ~15 h math / ~5 h knowledge on 8 A100 80GB" in out
    assert "E.3 step min = " in out


def test_a_cell_that_cannot_checkpoint_within_its_limit_fails():
    """A planted cell whose one step plus a checkpoint cannot fit its job's runtime fails (not warns),
    naming the cell, the numbers and the fix, and the verdict line comes first; so do periodic saves
    that never fit a job, and more jobs than 1 + retries."""
    res = st.load_profile(*PROFILES)
    # 20x the prompts per step: E.3's 19.2 min step of RTPO on search x 20 = 384 min, against 300 min
    short = copy.deepcopy(res)
    short["train_rtpo"]["runtime"] = 300
    rep = st.check_config(paper("train.prompts_per_step=1280"), short)
    fs = [f for f in rep.all_findings() if f.rule == "progress" and f.cell == "train_rtpo"]
    msg = next(str(f) for f in fs if "rtpo/search cannot make progress" in str(f))
    assert "set-resources.train_rtpo.runtime" in msg and "> runtime 300 min" in msg
    assert "min checkpoint write (stated: 98.3 GB at 0.5 GB/s)" in msg and "raise the rule's runtime" in msg
    assert "step 384.0 min (E.3 anchor: E.3 search" in msg
    out = st.format_report(rep)
    assert out.startswith("check-config: FAIL: ") and "progress" in out.splitlines()[0]
    # periodic saves: 10 steps of 32.9 min (rtpo/airline) do not fit 300 min
    short = copy.deepcopy(res)
    short["train_rtpo"]["runtime"] = 300
    msgs = [str(f) for f in st.check_config(paper(), short).all_findings() if f.rule == "progress"]
    assert any("rtpo/airline: train.checkpoint_every 10 > the 8 steps" in m and "<= 8" in m for m in msgs), msgs
    # the whole run: 50 steps of rtpo/airline at 42 per job need 2 jobs
    few = copy.deepcopy(res)
    few[st.PROFILE_SETTINGS]["retries"] = 0
    msgs = [str(f) for f in st.check_config(paper(), few).all_findings()]
    assert any("rtpo/airline: 50 steps at 42 per job" in m and "need 2 jobs > 1 + retries (0)" in m for m in msgs)


def test_cli_fails_a_cell_that_cannot_make_progress(capsys):
    from rtpo.cli import main

    assert main(["check-config", "--config", str(PAPER), "--set", "train.prompts_per_step=8192"]) == 2
    r = capsys.readouterr()
    assert r.out.startswith("check-config: FAIL: ") and "cannot make progress" in r.out.splitlines()[0]
    assert "start-up check failed:" in r.err and "cannot make progress" in r.err
