"""Embedded task generators and scripted experts: the registry the `rtpo data` verb uses.

Determinism and splits: `generate_tasks(kind, n, seed, split)` draws candidates from a random
stream named by (kind, seed, split) and keeps those whose question hashes into that split
(`split_of`: sha256 of "<seed>|<question>", 1 in 5 goes to eval). Train and eval are therefore
disjoint by construction for the same seed, whatever n is, and a set is identical across runs
(no dependence on PYTHONHASHSEED). Tiers cycle easy, medium, hard over the task index.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import random
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rtpo.envs import make_env
from rtpo.envs.base import Message, Task
from rtpo.envs.search_kb import build_corpus

__all__ = ["KINDS", "TIERS", "generate_tasks", "get_expert", "corpus_for", "write_task_files",
           "split_of", "read_tasks", "load_tasks"]

KINDS = ("math", "search", "airline")
TIERS = ("easy", "medium", "hard")
EVAL_FRACTION = 5  # 1 in EVAL_FRACTION questions belongs to eval

Expert = Callable[[Task, Any, float, random.Random], tuple[list[Message], float]]


def _module(kind: str):
    if kind not in KINDS:
        raise ValueError(f"unknown task kind {kind!r}; known: {', '.join(KINDS)}")
    return importlib.import_module(f"rtpo.data.{kind}_tasks")


def split_of(question: str, seed: int) -> str:
    """"eval" or "train": the split a question belongs to for `seed`."""
    h = int(hashlib.sha256(f"{seed}|{question}".encode()).hexdigest()[:8], 16)
    return "eval" if h % EVAL_FRACTION == 0 else "train"


def generate_tasks(kind: str, n: int, seed: int, split: str,
                   tiers: tuple[str, ...] = TIERS, hops: int | None = None) -> list[Task]:
    """n tasks of `kind` for `split` ("train" | "eval"), deterministic in (kind, n, seed, split).

    Task ids: "<kind>-<split>-s<seed>-<index>"; source "embedded-<kind>"; tier = tiers[i % len(tiers)].
    `hops` (search only): every question a path of exactly that many hops, tier its label
    (search_tasks.tier_of_hops): the mechanism sweep's horizon K (config `sweep`).
    Raises ValueError if the question space cannot supply n distinct questions.
    """
    if split not in ("train", "eval"):
        raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
    for t in tiers:
        if t not in TIERS:
            raise ValueError(f"unknown tier {t!r}; known: {', '.join(TIERS)}")
    mod = _module(kind)
    if hops is not None:
        if kind != "search":
            raise ValueError(f"hops: only search tasks have a horizon parameter, not {kind!r}")
        tiers = (mod.tier_of_hops(int(hops)),)
    rng = random.Random(f"rtpo-{kind}-{seed}-{split}" + ("" if hops is None else f"-hops{int(hops)}"))
    out: list[Task] = []
    seen: set[str] = set()
    misses = 0
    while len(out) < n:
        tier = tiers[len(out) % len(tiers)]
        q, answers, meta = (mod.sample_task(rng, tier, seed) if hops is None
                            else mod.sample_task(rng, tier, seed, hops=int(hops)))
        if q in seen or split_of(q, seed) != split:
            misses += 1
            if misses > 200 * (n + 10):
                raise ValueError(f"{kind}: only {len(out)} distinct {split} questions of tier {tier} "
                                 f"found for seed {seed} (asked for {n})")
            continue
        seen.add(q)
        out.append(Task(id=f"{kind}-{split}-s{seed}-{len(out):05d}", kind=kind, question=q,
                        answers=list(answers), tier=tier, split=split, source=f"embedded-{kind}",
                        meta=meta))
    return out


def get_expert(kind: str) -> Expert:
    """The scripted expert of `kind`: run_expert(task, env, imperfection, rng) -> (messages, reward)."""
    return _module(kind).run_expert


def corpus_for(kind: str, seed: int) -> list[dict]:
    """The passages the search env indexes for embedded tasks of `seed` ([{"id","title","text"}])."""
    if kind != "search":
        raise ValueError(f"corpus_for: only 'search' tasks have a corpus, not {kind!r}")
    return build_corpus(seed)


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def read_tasks(path: str | Path, kind: str | None = None) -> list[Task]:
    """Read a train.jsonl / eval.jsonl (written by `write_task_files` or rtpo.data.paper), every row
    checked against the typed schema of rtpo.data.schema, ids unique; with `kind`, every row must be
    of that kind (the run's --task). Raises RowError naming file, line and field (exit 2 in `rtpo`)."""
    from rtpo.data.schema import FieldError, check_row
    from rtpo.inputs import RowError, jsonl_lines, unpaired_surrogate

    out = []
    first: dict[str, int] = {}
    for n, line in jsonl_lines(path):  # UTF-8 and the row-size limit checked per line, named
        try:
            row = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as e:
            raise RowError(path, n, f"not a task ({type(e).__name__}: {e})") from None
        try:
            check_row(row, kind)
            bad = unpaired_surrogate(row, line)  # json.loads takes "\ud800"; the tokenizer does not
            if bad:
                raise FieldError(*bad)
            if row["id"] in first:
                raise FieldError("id", f"duplicate id {row['id']!r} (first at line {first[row['id']]})")
        except FieldError as e:
            raise RowError(path, n, str(e), field=e.field) from None
        first[row["id"]] = n
        out.append(Task.from_dict(row))
    return out


def write_task_files(kind: str, cfg: Mapping[str, Any] | None, out_dir: str | Path,
                     progress: bool = False) -> dict[str, Path]:
    """Write train.jsonl, eval.jsonl, experts.jsonl (and corpus.jsonl for search) under out_dir.

    cfg keys (all optional): seed (0), n_train (500), n_eval (150), n_expert (n_train: experts
    demonstrate the first n_expert train tasks), imperfection (0.0), expert_seed (seed),
    env (dict of env options for make_env, e.g. {"max_turns": 6}), hops (search: every question
    exactly that many hops; the mechanism sweep). Unknown keys raise.
    experts.jsonl rows: {"task_id", "messages", "reward"}. Returns {file stem: path}.
    """
    cfg = dict(cfg or {})
    known = {"seed", "n_train", "n_eval", "n_expert", "imperfection", "expert_seed", "env", "hops"}
    unknown = sorted(set(cfg) - known)
    if unknown:
        raise ValueError(f"write_task_files({kind}): unknown config key(s) {unknown}; known: {sorted(known)}")
    seed = int(cfg.get("seed", 0))
    n_train, n_eval = int(cfg.get("n_train", 500)), int(cfg.get("n_eval", 150))
    n_expert = int(cfg.get("n_expert", n_train))
    imperfection = float(cfg.get("imperfection", 0.0))
    env_cfg = dict(cfg.get("env") or {})
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    hops = cfg.get("hops")
    train = generate_tasks(kind, n_train, seed, "train", hops=hops)
    evals = generate_tasks(kind, n_eval, seed, "eval", hops=hops)
    paths = {"train": out / "train.jsonl", "eval": out / "eval.jsonl", "experts": out / "experts.jsonl"}
    _write_jsonl(paths["train"], [t.to_dict() for t in train])
    _write_jsonl(paths["eval"], [t.to_dict() for t in evals])
    if kind == "search":
        paths["corpus"] = out / "corpus.jsonl"
        _write_jsonl(paths["corpus"], corpus_for(kind, seed))

    expert = get_expert(kind)
    rng = random.Random(f"rtpo-expert-{kind}-{cfg.get('expert_seed', seed)}")
    rows = []
    tasks = train[:n_expert]
    if progress:
        from rtpo.progress import progress as tqdm
        tasks = tqdm(tasks, desc=f"{kind} experts")
    for t in tasks:
        env = make_env(t, **env_cfg)
        msgs, reward = expert(t, env, imperfection, rng)
        rows.append({"task_id": t.id, "messages": msgs, "reward": reward})
    _write_jsonl(paths["experts"], rows)
    return paths


def load_tasks(path: str | Path, kind: str | None = None) -> list[Task]:
    """The task file of a split (read_tasks: every row type-checked, of `kind` if given), which must
    exist and hold at least one task."""
    if not Path(path).exists():
        raise FileNotFoundError(f"task file not found: {path}")
    tasks = read_tasks(path, kind)
    if not tasks:
        raise ValueError(f"{path}: no tasks")
    return tasks
