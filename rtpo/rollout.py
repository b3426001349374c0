"""Multi-turn rollout: engine + env + psi -> Trajectory.

Every trajectory keeps, for each realized turn boundary S_k, what a method needs to come back to
it: the full message history, the canonical full-history token ids, the env snapshot, and the exact
context ids c_k = psi(S_k) the turn-k action was sampled from.

Canonical full-history ids are built by concatenation, as verl's agent loop does:
  full_0 = render(initial messages) ; full_{k+1} = full_k + a_k + between_k
where between_k is the template text after the assistant content (turn close, tool results, next
generation prompt). Under psi = full, c_k *is* full_k, so flattened training on the concatenation
scores exactly the tokens that were sampled; under any other psi, c_k is rendered from psi(S_k) and
the two differ — the rollout-training mismatch the paper measures.

All live trajectories sample their next turn in one batched engine call.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from rtpo.context import apply_psi, validate_psi
from rtpo.engine.base import Completion, Sampler, SamplingParams, stop_ids
from rtpo.envs.base import Env, Message, Task

EnvFactory = Callable[[Task], Env]


@dataclass
class Turn:
    k: int
    context_ids: list[int]      # c_k: the exact ids the action was sampled from
    action_ids: list[int]
    logprobs: list[float]       # rollout-time logprobs of action_ids
    stop_reason: str
    kind: str                   # generated as: "trunk" | "sibling" | "continuation" | "chain" | "eval" ...
    weight_version: int
    observations: list[Message] = field(default_factory=list)
    tool_calls: int = 0
    tool_errors: int = 0
    entropy: float | None = None


@dataclass
class Boundary:
    """The boundary state S_k (before turn k's action)."""

    k: int
    messages: list[Message]     # full history
    full_ids: list[int]         # canonical full-history ids, generation prompt included
    env_state: Any              # env.snapshot()
    context_ids: list[int]      # c_k = psi(S_k)
    text: str | None = None     # the chat-template text of `messages` (so a branch does not render it again)


@dataclass
class Trajectory:
    task: Task
    turns: list[Turn]
    boundaries: list[Boundary]  # boundaries[k] = S_k for every realized turn k
    full_ids: list[int]         # the whole flattened trajectory
    action_spans: list[tuple[int, int]]  # [start, end) of each turn's action in full_ids
    messages: list[Message]
    reward: float = 0.0
    done: bool = False
    truncated: bool = False     # ended by the turn limit K or the context length, without an answer
    info: dict[str, Any] = field(default_factory=dict)
    start_k: int = 0            # turns[:start_k] were copied from the trajectory this one branched from

    @property
    def generated_turns(self) -> list[Turn]:
        return self.turns[self.start_k:]

    @property
    def tool_calls(self) -> int:
        return sum(t.tool_calls for t in self.generated_turns)

    @property
    def tool_errors(self) -> int:
        return sum(t.tool_errors for t in self.generated_turns)

    @property
    def response_tokens(self) -> int:
        return sum(len(t.action_ids) for t in self.generated_turns)


@dataclass
class Start:
    """Where a rollout begins: a fresh episode, or a boundary S_k of an existing trajectory.

    forced_action: replay this turn-k action instead of sampling one (then continue).
    """

    task: Task
    source: Trajectory | None = None
    k: int = 0
    forced_action: Turn | None = None
    first_kind: str = "trunk"
    rest_kind: str = "trunk"
    seed: int | None = None


def _copy_messages(messages: list[Message]) -> list[Message]:
    """A copy of a history that no later turn can change (messages are flat dicts of strings)."""
    return [dict(m) for m in messages]


class _Live:
    """Mutable per-trajectory state while rolling out."""

    def __init__(self, traj: Trajectory, env: Env, start: Start):
        self.traj, self.env, self.start, self.k = traj, env, start, start.k
        self.rendered: str | None = None   # chat-template text of traj.messages (generation prompt included)


def between_text(tokenizer: Any, messages: list[Message], content: str, observations: list[Message],
                  ended_with_eos: bool, eos_text: str, before: str | None = None) -> tuple[str, str]:
    """(between, after): the template text after an assistant turn's content (the turn close, tool
    results, next generation prompt), and the whole rendered history after the turn.

    before: the rendered history before the turn (generation prompt included), when the caller kept
    it from the previous turn (`Roller` does: the template runs once per turn, not twice)."""
    if before is None:
        before = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    after = tokenizer.apply_chat_template(messages + [{"role": "assistant", "content": content}] + observations,
                                          add_generation_prompt=True, tokenize=False)
    if not after.startswith(before + content):  # the template re-rendered the turn (Qwen3's think blocks)
        return between_text_rerendered(tokenizer, messages, observations, ended_with_eos, eos_text), after
    between = after[len(before) + len(content):]
    if ended_with_eos and between.startswith(eos_text):
        between = between[len(eos_text):]
    return between, after


# A plain assistant content that chat templates copy verbatim (no think block, no leading or trailing newline).
_BETWEEN_SENTINEL = "rtpo-between-text-sentinel"


def between_text_rerendered(tokenizer: Any, messages: list[Message], observations: list[Message],
                            ended_with_eos: bool, eos_text: str) -> str:
    """The between text for templates that re-render an assistant turn's content, so that the rendered
    history is no longer a prefix of the next one. Qwen3's official template (tests/test_qwen3_template.py)
    rewrites a turn's think block as "<think>\\n" + reasoning.strip("\\n") + "\\n</think>\\n\\n" +
    answer.lstrip("\\n"), drops an empty think block from every turn but the last and drops text before
    <think>; a sampled "<think>r</think><tool_call>..." then renders differently from what was sampled.

    The canonical ids stay a concatenation of what was sampled (verl's agent loop keeps the sampled
    tokens too, it never re-renders them): full_{k+1} = full_k + a_k + between_k, where between_k is what
    the template writes after an assistant turn it leaves alone (turn close, tool results, generation
    prompt), rendered here with a sentinel as the turn's content: everything after the sentinel."""
    text = tokenizer.apply_chat_template(messages + [{"role": "assistant", "content": _BETWEEN_SENTINEL}]
                                         + observations, add_generation_prompt=True, tokenize=False)
    i = text.rfind(_BETWEEN_SENTINEL)
    if i < 0:
        raise ValueError("the chat template does not render an assistant turn's content; "
                         "canonical full-history ids cannot be built by concatenation")
    between = text[i + len(_BETWEEN_SENTINEL):]
    if ended_with_eos and between.startswith(eos_text):
        between = between[len(eos_text):]
    return between


class Roller:
    """Runs batched multi-turn rollouts for one task family with a fixed psi and sampling params."""

    def __init__(self, engine: Sampler, env_factory: EnvFactory, psi: str, params: SamplingParams,
                 max_context: int | None = None, env_threads: int = 8, rows: str = "flat"):
        self.engine, self.env_factory, self.psi, self.params = engine, env_factory, validate_psi(psi), params
        # what must stay below max_context before a turn is sampled (else the trajectory ends with
        # info["context_overflow"], reward 0): "turn" (rows (c_k, turn k), RTPO): the context c_k only;
        # "flat" (one row per trajectory, the baselines): c_k and the full history the row will hold
        if rows not in ("flat", "turn"):
            raise ValueError(f"Roller rows must be 'flat' or 'turn', not {rows!r}")
        self.rows = rows
        self.env_threads = int(env_threads)  # envs stepped at once (1: one after another)
        self.tok = engine.tokenizer
        self.max_context = max_context or engine.max_context
        self.eos_text = self.tok.eos_token or ""
        self.eos_ids, _ = stop_ids(self.tok)

    # -------------------------------------------------------------- contexts
    def render(self, messages: list[Message]) -> str:
        return self.tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)

    def context_ids(self, messages: list[Message], full_ids: list[int], rendered: str | None = None) -> list[int]:
        """c_k = psi(S_k) as token ids; under psi = full exactly the canonical full-history ids.

        rendered: the template text of `messages`, if the caller has it (reused when psi leaves the
        history unchanged, e.g. qwen3 before any <think> block was written)."""
        if self.psi == "full":
            return list(full_ids)
        view = apply_psi(messages, self.psi)
        text = rendered if (rendered is not None and view == messages) else self.render(view)
        return self.tok.encode(text, add_special_tokens=False)

    # -------------------------------------------------------------- rollout
    def _step_envs(self, calls: list[tuple[Env, str]]) -> list[Any]:
        """env.step(text) for every (env, text), results in input order.

        Envs are independent objects (their own state, their own sandbox calls), so stepping them
        from a thread pool gives the results of stepping them one after another; it overlaps the
        tool calls' subprocess and IO waits (the math sandbox, a retrieval server)."""
        if self.env_threads <= 1 or len(calls) <= 1:
            return [env.step(text) for env, text in calls]
        with ThreadPoolExecutor(max_workers=min(self.env_threads, len(calls))) as pool:
            return list(pool.map(lambda c: c[0].step(c[1]), calls))

    def _begin(self, s: Start) -> _Live:
        env = self.env_factory(s.task)
        if s.source is None:
            messages = env.reset(s.task)
            text = self.render(messages)
            full = self.tok.encode(text, add_special_tokens=False)
            traj = Trajectory(task=s.task, turns=[], boundaries=[], full_ids=full, action_spans=[],
                              messages=messages, info={"prompt_len": len(full)})
            live = _Live(traj, env, s)
            live.rendered = text
            return live
        src, k = s.source, s.k
        if k >= len(src.boundaries):
            raise ValueError(f"trajectory {src.task.id} has no boundary S_{k} (it has {len(src.boundaries)} turns)")
        b = src.boundaries[k]
        env.reset(s.task)
        env.restore(b.env_state)  # the Env contract: restore copies what it keeps (siblings restore it too)
        traj = Trajectory(task=s.task, turns=list(src.turns[:k]), boundaries=list(src.boundaries[:k]),
                          full_ids=list(b.full_ids), action_spans=list(src.action_spans[:k]),
                          messages=_copy_messages(b.messages), start_k=k,
                          info={"prompt_len": src.info.get("prompt_len", 0)})
        live = _Live(traj, env, s)
        live.rendered = b.text
        return live

    def run(self, starts: Sequence[Start]) -> list[Trajectory]:
        live = [self._begin(s) for s in starts]
        active = list(range(len(live)))
        while active:
            # 1. record the boundary S_k and the context c_k of each live trajectory
            ctx: dict[int, list[int]] = {}
            for i in active:
                L = live[i]
                t = L.traj
                if L.rendered is None:
                    L.rendered = self.render(t.messages)
                if L.k == L.start.k and L.start.source is not None:
                    c = list(L.start.source.boundaries[L.k].context_ids)   # psi(S_k) as recorded
                else:
                    c = self.context_ids(t.messages, t.full_ids, L.rendered)
                forced = L.start.forced_action if (L.k == L.start.k and L.start.forced_action) else None
                if forced is not None:
                    c = forced.context_ids  # replaying: keep the recorded c_k bit for bit
                if len(c) + 1 >= self.max_context or (self.rows == "flat" and len(t.full_ids) + 1 >= self.max_context):
                    t.done, t.truncated = True, True
                    t.info["context_overflow"] = True
                    continue
                t.boundaries.append(Boundary(L.k, _copy_messages(t.messages), list(t.full_ids),
                                             L.env.snapshot(), c, L.rendered))
                ctx[i] = c
            active = [i for i in active if i in ctx]
            if not active:
                break
            # 2. sample every live trajectory's turn in one batch (forced actions are replayed)
            to_sample = [i for i in active if not (live[i].k == live[i].start.k and live[i].start.forced_action)]
            comps: dict[int, Completion] = {}
            if to_sample:
                seeds = None
                if all(live[i].start.seed is not None for i in to_sample):
                    seeds = [hash((live[i].start.seed, live[i].k)) % (2**62) for i in to_sample]
                out = self.engine.sample([ctx[i] for i in to_sample], self.params, seeds=seeds)
                comps = dict(zip(to_sample, out))
            # 3. step the envs (concurrently: tool calls are subprocesses / IO; each env is its own object)
            turns: dict[int, Turn] = {}
            for i in active:
                L = live[i]
                if i in comps:
                    c = comps[i]
                    kind = L.start.first_kind if L.k == L.start.k else L.start.rest_kind
                    turns[i] = Turn(L.k, ctx[i], c.ids, c.logprobs, c.stop_reason, kind, c.weight_version,
                                    entropy=c.entropy)
                else:
                    f = L.start.forced_action
                    turns[i] = Turn(L.k, ctx[i], list(f.action_ids), list(f.logprobs), f.stop_reason, f.kind,
                                    f.weight_version, entropy=f.entropy)
            contents = {i: self.tok.decode([x for x in turns[i].action_ids if x not in self.eos_ids],
                                           skip_special_tokens=False) for i in active}
            results = self._step_envs([(live[i].env, contents[i]) for i in active])
            still = []
            for i, res in zip(active, results):
                L, turn, content = live[i], turns[i], contents[i]
                t = L.traj
                turn.observations = res.observations
                turn.tool_calls = int(res.info.get("tool_calls", 0))
                turn.tool_errors = int(res.info.get("tool_errors", 0))
                start = len(t.full_ids)
                t.full_ids.extend(turn.action_ids)
                t.action_spans.append((start, len(t.full_ids)))
                t.turns.append(turn)
                if not res.done:
                    between, L.rendered = between_text(self.tok, t.messages, content, res.observations,
                                                       turn.stop_reason == "eos", self.eos_text, before=L.rendered)
                    t.full_ids.extend(self.tok.encode(between, add_special_tokens=False))
                t.messages = t.messages + [{"role": "assistant", "content": content}] + list(res.observations)
                L.k += 1
                if res.done:
                    t.done, t.reward = True, float(res.reward)
                    t.truncated = bool(res.info.get("truncated", False))
                    t.info.update({k: v for k, v in res.info.items() if k not in ("tool_calls", "tool_errors")})
                else:
                    still.append(i)
            active = still
        return [L.traj for L in live]
