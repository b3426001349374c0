"""The rehearsal config (config/rehearsal.yaml, docs/rehearsal.md) is config/paper.yaml with only sizes
changed: every key of either file, walked to its leaves, is equal in the other unless the allow-list
below names it. A rehearsal that quietly changed a method, a study arm, psi, a sync mode or a verl key
would rehearse another experiment."""

from __future__ import annotations

import fnmatch
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]

# Keys (dotted paths, fnmatch patterns; `*` matches one or more levels) whose value may differ between
# the paper and its rehearsal. Each is a size, or where a file comes from.
MAY_DIFFER = [
    "name",
    # sizes: seeds, prompts, steps, tokens, samples
    "seeds", "ablations.seeds",
    "data.*.n_train", "data.*.n_eval",
    "env.*.max_new_tokens", "env.*.max_prompt_tokens",
    "train.steps", "train.prompts_per_step", "train.micro_batch_tokens", "method.*.per_task.*.steps",
    "train.checkpoint_every",          # every step: the rehearsal's 2 steps must write a checkpoint to resume from
    "eval.samples",
    "ablations.theory.quick",          # the tabular theorem checks at their quick size
    "pilot.*",                         # the pilot's steps, and one cell and one task instead of all (~90 min)
    "verl.max_context", "verl.max_model_len",
    "data.search.retriever.workers",
    # the model: a tiny Qwen3 made offline (scripts/rehearse.sh) instead of Qwen3-8B from the hub
    "model.path", "model.vocab_size", "model.threads",
    # where files come from: local fixtures (tests/fixtures/rehearsal) instead of the internet
    "data.sources.*",
    "data.*.train.sha256",
    "data.*.benchmarks.*.*",           # a benchmark's location (source/path/sha256, url, hf_id); not its name
    "data.search.corpus.url", "data.search.corpus.sha256",
    # the one key paper.yaml lacks: vLLM's CPU build where the cluster runs vLLM on a GPU
    "verl.cpu_rollout",
]


def leaves(d, prefix=()):
    """{dotted path: value} of every leaf of a nested dict (lists are leaves: a study's arms compare whole)."""
    out = {}
    for k, v in d.items():
        path = (*prefix, str(k))
        if isinstance(v, dict) and v:
            out.update(leaves(v, path))
        else:
            out[".".join(path)] = v
    return out


def added_or_removed(a: dict, b: dict, prefix=()) -> set[str]:
    """Dotted paths of keys in one dict only (a removed subtree is named by its own key, not only its leaves)."""
    out = {".".join((*prefix, str(k))) for k in a.keys() ^ b.keys()}
    for k in a.keys() & b.keys():
        if isinstance(a[k], dict) and isinstance(b[k], dict):
            out |= added_or_removed(a[k], b[k], (*prefix, str(k)))
    return out


def differing(a: dict, b: dict) -> list[str]:
    la, lb = leaves(a), leaves(b)
    changed = {k for k in la.keys() | lb.keys() if la.get(k, KeyError) != lb.get(k, KeyError)}
    return sorted(changed | added_or_removed(a, b))


def allowed(key: str) -> bool:
    return any(fnmatch.fnmatchcase(key, pattern) for pattern in MAY_DIFFER)


def load(name: str) -> dict:
    return yaml.safe_load((ROOT / "config" / name).read_text())


def test_rehearsal_is_the_paper_with_only_sizes_changed():
    paper, rehearsal = load("paper.yaml"), load("rehearsal.yaml")
    bad = [k for k in differing(paper, rehearsal) if not allowed(k)]
    assert not bad, f"config/rehearsal.yaml differs from config/paper.yaml beyond sizes and sources: {bad}"
    # what the allow-list must never cover: the grid, the studies, psi, sync modes, the verl layout
    for k in ("methods", "tasks", "method", "env", "ablations", "verl", "engine", "sft"):
        assert (k in paper) == (k in rehearsal)
    assert paper["methods"] == rehearsal["methods"] and _no_steps(paper["method"]) == _no_steps(rehearsal["method"])
    for name in ("group_size", "sync", "continuation", "credit_assignment"):
        assert paper["ablations"][name] == rehearsal["ablations"][name]
    assert {t: paper["data"][t].get("benchmarks", {}).keys() for t in paper["tasks"]} == \
        {t: rehearsal["data"][t].get("benchmarks", {}).keys() for t in rehearsal["tasks"]}


def _no_steps(methods: dict) -> dict:
    """The method sections without their per-task step counts (a size: E.3's 78 / 16 at paper scale)."""
    return {m: {k: ({t: {x: y for x, y in o.items() if x != "steps"} for t, o in v.items()} if k == "per_task" else v)
                for k, v in (sec or {}).items()} for m, sec in methods.items()}


@pytest.mark.parametrize("change, key", [
    (lambda c: c["method"]["rtpo"].update(sync="interval:2"), "method.rtpo.sync"),
    (lambda c: c["ablations"]["sync"]["values"].pop(), "ablations.sync.values"),
    (lambda c: c["env"]["math"].update(psi="full"), "env.math.psi"),
    (lambda c: c["verl"].pop("tensor_parallel_size"), "verl.tensor_parallel_size"),
    (lambda c: c["data"]["math"]["benchmarks"].pop("gsm8k"), "data.math.benchmarks.gsm8k"),
    (lambda c: c["train"].update(lr=1e-4), "train.lr"),
])
def test_the_walk_catches_a_changed_key(change, key):
    """The comparison can fail: one non-size change to the rehearsal is named."""
    paper, rehearsal = load("paper.yaml"), load("rehearsal.yaml")
    change(rehearsal)
    bad = [k for k in differing(paper, rehearsal) if not allowed(k)]
    assert any(b == key or b.startswith(key + ".") for b in bad), bad
