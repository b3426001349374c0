"""`RTPOAgentLoop`: verl's per-sample agent loop on rtpo's envs, tool parser and context maps psi.

The loop is a thin shell around `rtpo.rollout.Roller` (the local engine's multi-turn rollout), run
with a `ServerEngine` over verl's server client, so both engines roll out with one implementation:
every turn records its boundary S_k (messages, canonical full-history ids, env snapshot) and the
exact context ids c_k = psi(S_k) its action was sampled from.

What `run(sampling_params, **kwargs)` returns depends on the keyword `rtpo_row`:

  "flat" (default; verl's ordinary flow, GRPO & co.)
      one row per trajectory: prompt = the initial context, response = the flattened trajectory
      (actions, tool results, template text), response_mask = 1 on action tokens only,
      response_logprobs = the rollout logprobs on action tokens (0 elsewhere), reward_score = the
      env's terminal reward. Under psi != full the actions were sampled from c_k, not from the
      flattened history: the rollout-training mismatch of the paper's §2.1.
  int k (RTPO's rows)
      one row for turn k: prompt = c_k, response = the turn-k action, response_mask = 1 on exactly
      the turn's tokens, response_logprobs = its rollout logprobs, reward_score = the return of the
      trajectory (the turn's continuation to termination).

Where a rollout starts is the keyword `rtpo_start`: an `rtpo.rollout.Start` (e.g. a recorded
boundary: `Start(task, source=trunk, k=k, first_kind="sibling", rest_kind="continuation")`
restores the trunk's env snapshot and samples from exactly the recorded c_k). Without it the task
comes from the dataset row (`extra_info["task"]`, a JSON Task written by `rtpo.verl_ext.data`).
The finished `Trajectory` is in `output.extra_fields["rtpo_trajectory"]` when `rtpo_keep_trajectory`
is true (in-process callers: the RTPO trainer, tests); verl's own workers leave it out.

Settings come from the trainer config's `rtpo` section (written by `rtpo.verl_ext.launch`):
  rtpo.psi             context map (full | qwen3 | truncate:N | summary)
  rtpo.env             env options for `rtpo.envs.make_env` (max_turns, max_obs_chars, top_k)
  rtpo.max_new_tokens  tokens per turn
  rtpo.env_factory     "module:function" building the env factory from rtpo.env (default
                       "rtpo.train:env_factory", i.e. `rtpo.envs.make_env`; tests use
                       "rtpo.verl_ext.cpu_harness.toy:env_factory")
"""

from __future__ import annotations

import asyncio
import importlib
import json
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput, register

from rtpo.engine.base import SamplingParams
from rtpo.envs.base import Task
from rtpo.rollout import Roller, Start, Trajectory
from rtpo.verl_ext.server_engine import ServerEngine

AGENT_NAME = "rtpo_agent"


def rtpo_settings(config: Any) -> dict[str, Any]:
    """The `rtpo` section of a trainer config as a plain dict (empty if absent)."""
    from omegaconf import OmegaConf

    sec = config.get("rtpo", None) if hasattr(config, "get") else None
    if sec is None:
        return {}
    return OmegaConf.to_container(sec, resolve=True) if OmegaConf.is_config(sec) else dict(sec)


def make_env_factory(settings: dict[str, Any]):
    """The env factory (Task -> Env) named by settings["env_factory"], built from settings["env"]."""
    spec = str(settings.get("env_factory") or "rtpo.train:env_factory")
    mod, _, name = spec.partition(":")
    if not name:
        raise ValueError(f"rtpo.env_factory={spec!r}: expected 'module:function'")
    return getattr(importlib.import_module(mod), name)(dict(settings.get("env", {}) or {}))


def chain_seed(settings: dict[str, Any], kwargs: dict[str, Any]) -> int | None:
    """The sampling seed of one flat chain: the run's seed (rtpo.seed), the training step, the prompt's
    dataset index (extra_info.index) and its repeat among the step's rollout.n (verl's session_id).
    The Roller derives each turn's request seed from it, and a vLLM request with a seed draws from its own
    generator whatever else is in its batch: a rerun, or a run resumed from a checkpoint, samples the
    same chains. Without a seed the server's shared generator is drawn in arrival order, which the async
    agent loops do not fix (two uninterrupted CPU-rehearsal runs differed at step 0: 1,113 against 1,111
    generated tokens). None (unseeded, as before) where a key is missing: verl's non-TransferQueue path
    passes no session_id. Integers only: Python's hash of an int tuple does not depend on PYTHONHASHSEED."""
    info = kwargs.get("extra_info") or {}
    try:
        key = (int(settings.get("seed", 0)), int(kwargs["global_steps"]), int(info["index"]), int(kwargs["session_id"]))
    except (KeyError, TypeError, ValueError):
        return None
    return hash(key) % (2**62)


def task_from_row(kwargs: dict[str, Any]) -> Task:
    """The Task of a dataset row: extra_info["task"] (JSON string or dict)."""
    info = kwargs.get("extra_info") or {}
    raw = info.get("task") if hasattr(info, "get") else None
    if raw is None:
        raise ValueError("RTPOAgentLoop: the dataset row has no extra_info.task; write the parquet files with "
                         "rtpo.verl_ext.data.write_parquet")
    return Task.from_dict(json.loads(raw) if isinstance(raw, str) else dict(raw))


def flat_row(traj: Trajectory) -> dict[str, Any]:
    """The flattened trajectory as verl's multi-turn row (see the module docstring, "flat")."""
    p = int(traj.info.get("prompt_len", 0))
    if p <= 0 and traj.start_k == 0:
        raise ValueError("trajectory has no prompt_len")
    ids = traj.full_ids
    mask = [0] * (len(ids) - p)
    lps = [0.0] * (len(ids) - p)
    for turn, (s, e) in zip(traj.turns, traj.action_spans):
        for j, lp in zip(range(s, e), turn.logprobs):
            mask[j - p] = 1
            lps[j - p] = float(lp)
    return {"prompt_ids": list(ids[:p]), "response_ids": list(ids[p:]), "response_mask": mask,
            "response_logprobs": lps}


def turn_row(traj: Trajectory, k: int) -> dict[str, Any]:
    """Turn k of a trajectory as one row trained under exactly c_k (module docstring, "int k")."""
    if not 0 <= k < len(traj.turns):
        raise ValueError(f"trajectory of task {traj.task.id} has no turn {k} ({len(traj.turns)} turns)")
    t = traj.turns[k]
    return {"prompt_ids": list(t.context_ids), "response_ids": list(t.action_ids),
            "response_mask": [1] * len(t.action_ids), "response_logprobs": [float(x) for x in t.logprobs]}


def trajectory_summary(traj: Trajectory) -> dict[str, Any]:
    """Small JSON-able facts verl may carry in extra_fields (metrics, dumps)."""
    return {"task_id": traj.task.id, "reward": float(traj.reward), "turns": len(traj.turns),
            "start_k": traj.start_k, "truncated": bool(traj.truncated), "tool_calls": traj.tool_calls,
            "tool_errors": traj.tool_errors, "kinds": [t.kind for t in traj.generated_turns],
            "response_tokens": traj.response_tokens}


@register(AGENT_NAME)
class RTPOAgentLoop(AgentLoopBase):
    """verl agent loop over an rtpo env (math | search | airline), one trajectory per call."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.pop("tools", None)  # verl's tool registry is not used: rtpo envs run their own tools
        super().__init__(*args, **kwargs)
        s = rtpo_settings(self.config)
        self.psi = str(s.get("psi", "full"))
        self.settings = s
        self.max_new_tokens = int(s.get("max_new_tokens", self.rollout_config.response_length))
        self.max_context = int(self.rollout_config.prompt_length + self.rollout_config.response_length)
        max_model_len = self.rollout_config.get("max_model_len", None)
        if max_model_len:
            self.max_context = min(self.max_context, int(max_model_len))

    def roller(self, sampling_params: dict[str, Any], loop: asyncio.AbstractEventLoop) -> Roller:
        """A Roller whose engine sends its requests to `loop` (the loop `run` is awaited on)."""
        engine = ServerEngine(self.server_manager, self.tokenizer, self.max_context, loop=loop)
        params = SamplingParams(max_new_tokens=self.max_new_tokens,
                                temperature=float(sampling_params.get("temperature", 1.0)),
                                top_p=float(sampling_params.get("top_p", 1.0)))
        return Roller(engine, make_env_factory(self.settings), self.psi, params, max_context=self.max_context)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        start: Start | None = kwargs.get("rtpo_start")
        row = kwargs.get("rtpo_row", "flat")
        if start is None:
            start = Start(task=task_from_row(kwargs), first_kind="chain", rest_kind="chain",
                          seed=chain_seed(self.settings, kwargs))
        loop = asyncio.get_running_loop()
        roller = self.roller(sampling_params, loop)
        # Roller.run is synchronous and sends its requests back to this loop: run it in a worker thread.
        traj = (await loop.run_in_executor(None, roller.run, [start]))[0]
        return self.output(traj, row, keep=bool(kwargs.get("rtpo_keep_trajectory", False)))

    def output(self, traj: Trajectory, row: Any = "flat", keep: bool = False) -> AgentLoopOutput:
        return build_output(traj, row, int(self.rollout_config.prompt_length),
                            int(self.rollout_config.response_length), keep=keep)


def build_output(traj: Trajectory, row: Any, prompt_length: int, response_length: int,
                 keep: bool = False) -> AgentLoopOutput:
    """verl's `AgentLoopOutput` of a trajectory: the flat row (row="flat") or turn k's row (row=k).

    A response longer than `response_length` is cut (recorded in extra_fields["rtpo"]["response_cut"]);
    a prompt longer than `prompt_length` is an error.
    """
    r = flat_row(traj) if row == "flat" else turn_row(traj, int(row))
    P, R = int(prompt_length), int(response_length)
    if len(r["prompt_ids"]) > P:
        raise ValueError(f"task {traj.task.id}: a row prompt of {len(r['prompt_ids'])} tokens exceeds "
                         f"rollout.prompt_length={P}")
    extra = {"turn_scores": [], "tool_rewards": [], "rtpo": trajectory_summary(traj),
             "min_global_steps": min((t.weight_version for t in traj.generated_turns), default=0),
             "max_global_steps": max((t.weight_version for t in traj.generated_turns), default=0)}
    if len(r["response_ids"]) > R:
        extra["rtpo"]["response_cut"] = len(r["response_ids"]) - R
    if keep:
        extra["rtpo_trajectory"] = traj
    return AgentLoopOutput(prompt_ids=r["prompt_ids"], response_ids=r["response_ids"][:R],
                           response_mask=r["response_mask"][:R],
                           response_logprobs=r["response_logprobs"][:R], reward_score=float(traj.reward),
                           num_turns=len(traj.messages), metrics=AgentLoopMetrics(), extra_fields=extra)
