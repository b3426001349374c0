"""Checkpoints sized for a shared filesystem and the runtime estimate.

verl's periodic checkpoints hold what a resume reads (sharded weights, AdamW, scheduler + RNG), never
a Hugging Face copy; `train.checkpoint_keep` of them are kept; final/ is merged once, after training,
from the last one with verl's FSDP model merger (a real 2-rank FSDP2 checkpoint written by verl's own
checkpoint manager on CPU, loaded back as `rtpo evaluate` loads final/). `rtpo check-config` prints
each cell's checkpoint disk and step time (the arithmetic checked here on constructed configs) and
warns when a rule's estimated run exceeds the Slurm profile's runtime.
"""

from __future__ import annotations

import copy
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rtpo.config import ROOT, ConfigError, load_config
from rtpo.verl_ext import launch
from rtpo.verl_ext import startup as st

PAPER = ROOT / "config" / "paper.yaml"
# the site profile, then the workflow profile over it (what `snakemake --profile slurm` reads)
PROFILES = (ROOT / "slurm", ROOT / "workflow" / "profiles" / "default")
N8B = st.KNOWN_MODELS["Qwen/Qwen3-8B"].params


def paper(*sets: str) -> dict:
    return load_config(PAPER, list(sets))


def overrides(cfg: dict, method: str, task: str, cpu: bool = False) -> dict:
    return st.parse_overrides(launch.verl_overrides(cfg, method, task, 0, "/tmp/run", "/tmp/model", "t.parquet",
                                                    "v.parquet", cpu=cpu))


# ------------------------------------------------------------------ the overrides
@pytest.mark.parametrize("method", ["grpo", "rtpo", "tree_grpo"])
@pytest.mark.parametrize("cpu", [False, True])
def test_periodic_checkpoints_hold_no_hf_model_and_keep_the_configured_count(method, cpu):
    ov = overrides(paper(), method, "math", cpu)
    assert ov["actor_rollout_ref.actor.checkpoint.save_contents"] == ["model", "optimizer", "extra"]
    assert ov["trainer.max_actor_ckpt_to_keep"] == ov["trainer.max_critic_ckpt_to_keep"] == 1  # the default
    assert ov["trainer.save_freq"] == 10 and ov["trainer.resume_mode"] == "auto"  # resume as before
    ov = overrides(paper("train.checkpoint_keep=3"), method, "math", cpu)
    assert ov["trainer.max_actor_ckpt_to_keep"] == 3


def test_checkpoint_keep_is_validated():
    with pytest.raises(ConfigError, match="checkpoint_keep"):
        paper("train.checkpoint_keep=0")
    with pytest.raises(ConfigError, match="checkpoint_keep"):
        paper("method.rtpo.checkpoint_keep=2")  # one count for every run: train.checkpoint_keep only
    raw = paper()
    raw["train"]["checkpoint_keep"] = 0  # past the schema (a dict built in code)
    with pytest.raises(ValueError, match="train.checkpoint_keep must be an integer >= 1"):
        overrides(raw, "grpo", "math")


# ------------------------------------------------------------------ final/ from a real FSDP checkpoint
CKPT_SCRIPT = r'''
import os, sys, torch, torch.distributed as dist, torch.multiprocessing as mp

def run(rank, model_dir, out, contents, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    torch.manual_seed(0)
    from omegaconf import OmegaConf
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager
    from verl.utils.fsdp_utils import apply_fsdp2, get_fsdp_full_state_dict
    m = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    mesh = init_device_mesh("cpu", (2,), mesh_dim_names=("fsdp",))  # verl's FSDP mesh (create_device_mesh)
    apply_fsdp2(m, {"mesh": mesh, "mp_policy": MixedPrecisionPolicy(param_dtype=torch.float32,
                                                                    reduce_dtype=torch.float32),
                    "reshard_after_forward": True}, {})
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    ids = torch.randint(0, 300, (2, 16))
    m(input_ids=ids, labels=ids).loss.backward()
    opt.step()  # trained weights (not the base model's) and AdamW state
    mgr = FSDPCheckpointManager(m, opt, None, processing_class=AutoTokenizer.from_pretrained(model_dir),
                                checkpoint_config=OmegaConf.create({"save_contents": contents.split(",")}))
    ck = os.path.join(out, "checkpoint")
    for step in (1, 2):  # two saves, keep 1: verl deletes global_step_1's actor/ once global_step_2 is complete
        mgr.save_checkpoint(os.path.join(ck, f"global_step_{step}", "actor"), global_step=step, max_ckpt_to_keep=1)
        if rank == 0:
            with open(os.path.join(ck, "latest_checkpointed_iteration.txt"), "w") as f:
                f.write(str(step))
        dist.barrier()
    full = get_fsdp_full_state_dict(m, offload_to_cpu=True, rank0_only=True)
    if rank == 0:
        torch.save(full, os.path.join(out, "reference_state.pt"))
    dist.barrier()
    dist.destroy_process_group()

if __name__ == "__main__":
    model_dir, out, contents = sys.argv[1:4]
    mp.spawn(run, args=(model_dir, out, contents, 29900 + os.getpid() % 90), nprocs=2)
'''


def _fsdp_checkpoint(tmp: Path, out: Path, contents: str) -> Path:
    """A tiny Qwen3 (tests.helpers.tiny) trained one step on 2 CPU ranks (gloo, FSDP2) and saved twice by
    verl's FSDPCheckpointManager with `contents`; returns the base model directory."""
    from tests.helpers import tiny

    model = tmp / "model"
    if not model.exists():
        eng = tiny.engine(seed=0, max_position=512)
        eng.model.save_pretrained(model)
        eng.tokenizer.save_pretrained(model)
    (tmp / "ckpt.py").write_text(CKPT_SCRIPT)
    env = {**os.environ, "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, str(tmp / "ckpt.py"), str(model), str(out), contents], capture_output=True,
                       text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return model


def test_final_is_merged_once_from_the_last_checkpoint_and_loads_as_evaluate_loads_it(tmp_path):
    pytest.importorskip("verl")
    import torch
    from safetensors.torch import load_file

    from rtpo.engine.local import LocalEngine
    from rtpo.inputs import verify_manifest

    out = tmp_path / "run"
    model = _fsdp_checkpoint(tmp_path, out, ",".join(launch.CHECKPOINT_CONTENTS))
    ck = out / "checkpoint"
    actor = ck / "global_step_2" / "actor"
    assert not (ck / "global_step_1" / "actor").exists()  # verl's rotation at keep 1
    hf = actor / "huggingface"
    assert (hf / "config.json").exists() and not list(hf.glob("*.safetensors"))  # config + tokenizer only
    ref = torch.load(out / "reference_state.pt")

    final = launch.export_final(out, model)
    assert final == out / "final" and verify_manifest(final, required=True)
    raw = load_file(final / "model.safetensors")
    assert {v.dtype for v in raw.values()} == {torch.float32}  # the tiny base model's dtype: nothing rounded
    assert json.loads((final / "config.json").read_text())["dtype"] == "float32"
    eng = LocalEngine.from_pretrained(final, reference=False)  # what rtpo evaluate loads
    sd = eng.model.state_dict()
    assert set(ref) <= set(sd) and all(torch.equal(ref[k], sd[k]) for k in ref)
    assert eng.tokenizer.encode("the answer is") == LocalEngine.from_pretrained(model, reference=False).tokenizer.encode(
        "the answer is")

    # a bf16 base model (Qwen3-8B's config.json): final/ in bf16, the dtype evaluation serves
    m16 = tmp_path / "model16"
    m16.mkdir()
    for f in model.iterdir():
        (m16 / f.name).write_bytes(f.read_bytes())
    c = json.loads((m16 / "config.json").read_text())
    c["dtype"] = "bfloat16"
    (m16 / "config.json").write_text(json.dumps(c))
    assert launch.export_dtype(m16) == "bfloat16" and launch.export_dtype(model) == "float32"
    launch.export_final(out, m16)
    raw = load_file(out / "final" / "model.safetensors")
    assert {v.dtype for v in raw.values()} == {torch.bfloat16}
    assert all(torch.equal(ref[k].bfloat16(), raw[k]) for k in raw)
    assert json.loads((out / "final" / "config.json").read_text())["dtype"] == "bfloat16"
    assert verify_manifest(out / "final", required=True)


def test_a_checkpoint_saved_with_hf_model_is_copied(tmp_path):
    """A run checkpointed before periodic saves dropped hf_model: its Hugging Face weights are final/."""
    pytest.importorskip("verl")
    import torch
    from safetensors.torch import load_file

    out = tmp_path / "run"
    model = _fsdp_checkpoint(tmp_path, out, "model,optimizer,extra,hf_model")
    hf = out / "checkpoint" / "global_step_2" / "actor" / "huggingface"
    assert list(hf.glob("*.safetensors"))
    launch.export_final(out, model)
    ref = torch.load(out / "reference_state.pt")
    raw = load_file(out / "final" / "model.safetensors")
    assert sorted(p.name for p in hf.iterdir()) == sorted(p.name for p in (out / "final").iterdir()
                                                          if p.name != "rtpo-manifest.json")
    assert all(torch.equal(ref[k], raw[k].float()) for k in raw)


def _whole_step(ck: Path, step: int, world: int = 2) -> Path:
    """A checkpoint folder as verl's FSDP checkpoint manager leaves it after a whole save: every rank's
    model / optim / extra shards, fsdp_config.json with the world size, data.pt."""
    actor = ck / f"global_step_{step}" / "actor"
    actor.mkdir(parents=True)
    for r in range(world):
        for kind in ("model", "optim", "extra"):
            (actor / f"{kind}_world_size_{world}_rank_{r}.pt").write_bytes(b"shard")
    (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": world}))
    (ck / f"global_step_{step}" / "data.pt").write_text("x")
    return actor.parent


def test_prune_checkpoints_keeps_the_newest_complete_ones(tmp_path):
    out = tmp_path
    ck = out / "checkpoint"
    for s in (10, 20, 30):
        _whole_step(ck, s)
    (ck / "global_step_40" / "actor").mkdir(parents=True)  # a save killed before it completed
    (ck / "global_step_40" / "actor" / "model_world_size_2_rank_0.pt").write_bytes(b"half")
    (ck / "latest_checkpointed_iteration.txt").write_text("30")
    assert launch.prune_checkpoints(out, 2) == [ck / "global_step_40", ck / "global_step_10"]
    assert sorted(p.name for p in ck.iterdir()) == ["global_step_20", "global_step_30",
                                                    "latest_checkpointed_iteration.txt"]
    launch.prune_checkpoints(out, 1)
    assert sorted(p.name for p in ck.iterdir()) == ["global_step_30", "latest_checkpointed_iteration.txt"]
    assert launch.prune_checkpoints(out, 1) == [] and launch.prune_checkpoints(tmp_path / "none", 1) == []


def test_actor_complete_names_what_a_killed_save_lacks(tmp_path):
    actor = _whole_step(tmp_path, 1) / "actor"
    assert launch.actor_complete(actor) is None
    (actor / "optim_world_size_2_rank_1.pt").unlink()
    assert "optim shards of ranks [1] of 2 are missing" in launch.actor_complete(actor)
    (actor / "fsdp_config.json").unlink()
    assert "no fsdp_config.json" in launch.actor_complete(actor)
    assert "is gone" in launch.actor_complete(tmp_path / "nowhere" / "actor")


# verl 0.9.1's save at keep 1 (trainer/ppo/v1/trainer_base.py _save_checkpoint), in its order, with verl's own
# rotation (checkpoint_manager.py BaseCheckpointManager.register_checkpoint): the actor's shards and
# fsdp_config.json, register_checkpoint (which deletes the previous save's actor/), data.pt, then the tracker.
# One process per pause point (forked after verl's import, which is the slow part) saves steps 10 and 20
# into its own run directory, writes its pid to <run>/paused at the pause and waits there to be killed.
_VERL_SAVES = """
import json, os, sys, time
from pathlib import Path
import torch
from verl.utils.checkpoint.checkpoint_manager import BaseCheckpointManager

def save(ck, pause):
    manager = BaseCheckpointManager.__new__(BaseCheckpointManager)  # verl's rotation, without a model to save
    manager.previous_saved_paths = []
    def wait(point):
        if point == pause:
            (ck.parent / "paused").write_text(str(os.getpid()))
            time.sleep(600)
    for step in (10, 20):
        actor = ck / f"global_step_{step}" / "actor"
        actor.mkdir(parents=True)
        for r in range(2):
            torch.save({"w": torch.full((4,), float(step))}, actor / f"model_world_size_2_rank_{r}.pt")
            torch.save({"m": torch.zeros(4)}, actor / f"optim_world_size_2_rank_{r}.pt")
        (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": 2}))
        manager.register_checkpoint(str(actor), 1)
        wait(f"registered {step}")
        torch.save({"batches": step}, actor.parent / "data.pt")
        wait(f"data {step}")
        with open(ck / "latest_checkpointed_iteration.txt", "w") as f:
            f.write(str(step))

for run, pause in zip(sys.argv[1::2], sys.argv[2::2]):
    pid = os.fork()
    if pid == 0:
        save(Path(run) / "checkpoint", pause)
        os._exit(0)
    os.waitpid(pid, 0)
"""
PAUSES = {"registered": "registered 20", "data": "data 20"}  # after the rotation; after data.pt


@pytest.mark.slow  # two imports of verl (~15 s on 2 idle cores)
def test_a_job_killed_between_verls_rotation_and_its_tracker_resumes_from_the_newer_step(tmp_path):
    """verl at keep 1 deletes step 10's actor/ once step 20's is whole, then writes data.pt, then the
    tracker. A job killed in between (verl's real rotation, SIGKILL) leaves the tracker naming step 10,
    whose actor/ is gone: the retry's prune_checkpoints keeps step 20, makes it the latest (verl's own
    find_latest_ckpt_path then finds it) and removes step 10 -- before, it deleted step 20 as "newer than
    latest" and the run could not resume at all."""
    import signal
    import time

    from verl.utils.checkpoint.checkpoint_manager import find_latest_ckpt_path

    runs = {name: tmp_path / name for name in PAUSES}
    for run in runs.values():
        (run / "checkpoint").mkdir(parents=True)
    args = [x for name, run in runs.items() for x in (str(run), PAUSES[name])]
    proc = subprocess.Popen([sys.executable, "-c", _VERL_SAVES, *args])
    t0 = time.time()
    for run in runs.values():  # kill each save at its pause, in turn
        while not (run / "paused").exists() or not (run / "paused").read_text():
            assert proc.poll() is None and time.time() - t0 < 180, "the save stopped before its pause"
            time.sleep(0.05)
        os.kill(int((run / "paused").read_text()), signal.SIGKILL)
    assert proc.wait(timeout=60) == 0
    for name, run in runs.items():
        ck = run / "checkpoint"
        assert (ck / "latest_checkpointed_iteration.txt").read_text() == "10"
        assert not (ck / "global_step_10" / "actor").exists() and (ck / "global_step_20" / "actor").is_dir()
        assert find_latest_ckpt_path(str(ck)) == str(ck / "global_step_10")  # what verl would resume: no actor/
        log = run / "log"
        with open(log, "w") as f:
            assert launch.prune_checkpoints(run, 1, log=f) == [ck / "global_step_10"]
        assert (ck / "latest_checkpointed_iteration.txt").read_text() == "20"
        assert find_latest_ckpt_path(str(ck)) == str(ck / "global_step_20")
        assert launch.actor_complete(ck / "global_step_20" / "actor") is None
        text = log.read_text()
        assert "checkpoint repaired" in text and "names step 10" in text and "step 20 is whole" in text, text
        assert ("data.pt is missing" in text) == (name == "registered"), text


def test_a_tracker_with_nothing_whole_to_turn_to_is_an_error(tmp_path):
    ck = tmp_path / "checkpoint"
    (ck / "global_step_10" / "actor").mkdir(parents=True)
    (ck / "latest_checkpointed_iteration.txt").write_text("")  # cut short while verl wrote it in place
    with pytest.raises(ValueError, match=r"reads ''.*no other step .* holds a whole actor/"):
        launch.prune_checkpoints(tmp_path, 1)
    _whole_step(ck, 5)
    launch.prune_checkpoints(tmp_path, 1)
    assert (ck / "latest_checkpointed_iteration.txt").read_text() == "5"


# ------------------------------------------------------------------ rtpo check-config: disk and step time
def _cells(rep: st.Report) -> dict[str, st.CellReport]:
    return {c.cell: c for c in rep.cells}


def test_disk_and_step_time_columns_with_their_arithmetic():
    cfg = paper("train.checkpoint_keep=2", "train.steps=20", "train.checkpoint_every=5", "train.prompts_per_step=32",
                "method.grpo.chains=8", "method.rtpo.trunks=3", "method.rtpo.group_size=4")
    cfg["verl"]["step_tokens_per_gpu_s"] = 1000.0
    rep = st.check_config(cfg, st.load_profile(*PROFILES))
    cells = _cells(rep)
    ckpt = 12 * N8B  # fp32 weights + AdamW's two fp32 moments, no hf_model
    final = 2 * N8B  # Qwen3-8B's bf16
    for c in rep.cells:
        assert c.values["ckpt GB"] == round(ckpt / 1e9, 1) == 98.3
        assert c.values["ckpt keep"] == 2 and c.values["GB/run"] == round((2 * ckpt + final) / 1e9, 1) == 213.0
    # grpo/math: 32 prompts x 8 chains x K = 3 turns of 4096 (the episode fits its 13312-token response budget)
    g = cells["grpo/math"].values
    tokens = 32 * 8 * 3 * 4096
    assert g["tok/step M"] == round(tokens / 1e6, 2)
    assert g["step min"] == round(tokens / (1000 * 8) / 60, 1)
    assert cells["grpo/math"].time.steps == 78  # E.3's math steps (method.grpo.per_task), not train.steps
    assert g["run h"] == round((15 + 78 * tokens / (1000 * 8) / 60) / 60, 1)
    # grpo/search: K = 6 turns would be 24576 tokens, cut at the row's response budget 16384 (verl.max_context)
    assert cells["grpo/search"].values["tok/step M"] == round(32 * 8 * 16384 / 1e6, 2)
    # rtpo/math: 3 trunks x (K + (G - 1) K (K + 1) / 2 + K (K - 1) / 2) turns = 3 x (3 + 3 x 6 + 3) = 72 turns
    assert cells["rtpo/math"].values["tok/step M"] == round(32 * 72 * 4096 / 1e6, 2)
    # tree_grpo/math: 4 trees x (1 + 1 x 3) leaves, each a whole episode (paper.yaml's tree_grpo section)
    assert cells["tree_grpo/math"].values["tok/step M"] == round(32 * 16 * 3 * 4096 / 1e6, 2)
    # the runs: 3 seeds per main cell and per trained ablation arm, plus the vanilla final/ copies
    assert cells["grpo/math"].runs == 3 and cells["group_size/G2: rtpo/airline"].runs == 3
    runs = sum(c.runs for c in rep.cells)
    assert runs == 72 and rep.untrained_final == 9 * final
    table = st.format_report(rep)
    head = "| " + " | ".join(st.COLUMNS) + " |"
    assert table.splitlines()[2] == head  # after the verdict line
    assert "| ckpt GB | ckpt keep | GB/run | tok/step M | step min | run h | E.3 step min | verdict |" in head
    row = next(x for x in table.splitlines() if x.startswith("| grpo/math |"))
    assert (f"| 98.3 | 2 | 213.0 | {g['tok/step M']} | {g['step min']} | {g['run h']} | {g['E.3 step min']} | ok |"
            in row)
    total = (runs * (2 * ckpt + final) + 9 * final) / 1e12
    assert f"All 72 training runs (cells x seeds) and the untrained runs' final/ (147.4 GB): {total:.2f} TB" in table
    assert "verl.step_tokens_per_gpu_s = 1000 is the config's" in table
    est = next(r for r in rep.resources if r["rule"] == "train_grpo")["est. runtime"]
    slowest = max(c.time.run_min for c in rep.cells if c.method == "grpo" and ":" not in c.cell)
    assert est == math.ceil(slowest) and "| est. runtime |" in table


def test_checkpoint_disk_follows_the_overrides():
    """hf_model planted back through verl.overrides: a checkpoint then holds a full fp32 copy too;
    no keep count (verl's default null) keeps every save."""
    cfg = paper("train.steps=25", "train.checkpoint_every=10")
    cfg["verl"]["overrides"] = ["actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]",
                                "trainer.max_actor_ckpt_to_keep=null"]
    c = _cells(st.check_config(cfg))["grpo/airline"]  # airline's steps are train.steps (math's and search's: E.3's)
    assert c.disk.checkpoint == 16 * N8B and c.disk.saves == 3 and c.disk.keep == 3  # steps 10, 20 and 25
    assert c.disk.run == 3 * 16 * N8B + 2 * N8B
    d = st.Disk(checkpoint=100.0, keep=1, final=10.0, saves=5)
    assert d.run == 110 and d.peak == 200  # keep 1: the old one goes once the new one is complete
    assert st.Disk(100.0, 3, 10.0, 5).peak == 310 and st.Disk(100.0, 1, 10.0, 1).peak == 110


def test_a_run_past_its_jobs_fails_and_the_caps_only_warn(capsys):
    """The E.3-anchored step decides (a failure, rtpo/verl_ext/startup.py job_progress); the step at the
    caps, an upper bound at a stated throughput, only warns."""
    res = st.load_profile(*PROFILES)
    assert res[st.PROFILE_SETTINGS]["retries"] == 3 and res["train_grpo"]["runtime"] == 1440
    fast = paper()
    fast["verl"]["step_tokens_per_gpu_s"] = 1e6  # the caps well inside the profile's 1440 minutes
    rep = st.check_config(fast, res)
    assert rep.ok and rep.warnings == [] and "warnings" not in st.format_report(rep)
    # planted: GRPO with 50,000 steps; grpo/search at E.3's knowledge step (19.2 min) x its tokens at the
    # caps over RTPO's (16.78M / 33.03M) = 9.8 min: 144 steps per 1440-min job, 348 jobs > 1 + 3 retries
    planted = copy.deepcopy(fast)
    planted["method"]["grpo"]["per_task"] = {"math": {"steps": 78}, "search": {"steps": 50000}}
    rep = st.check_config(planted, res)
    assert not rep.ok and rep.warnings == []
    msgs = {str(f) for f in rep.all_findings() if f.cell == "train_grpo"}
    m = next(x for x in msgs if "grpo/search:" in x)
    assert m.startswith("train_grpo: workflow/profiles/default/profile.yaml: set-resources.train_grpo.runtime: grpo/search: "
                        "50000 steps at 144 per job (step 9.8 min (E.3 anchor: E.3 search (rtpo, K 6, 2 trunks) 19.2 min/step x 0.51")
    assert "need 348 jobs > 1 + retries (3); raise the profile's `retries` to 347" in m and m.endswith("[progress]")
    # the CLI on paper.yaml: every job makes progress at the E.3 step; the caps' upper bound warns
    from rtpo.cli import main

    assert main(["check-config", "--config", str(PAPER)]) == 0
    out = capsys.readouterr().out
    assert "every check passes" in out and "WARN train_rtpo: workflow/profiles/default/profile.yaml: set-resources" in out
    assert "[at the caps, an upper bound]" in out
    assert "verl.step_tokens_per_gpu_s = 330 is stated, not measured" in out
