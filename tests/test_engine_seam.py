"""The engine seam is the contract the engines keep: rtpo.engine.base declares everything
the methods, the rollout and the local training loop call on an engine, and every engine has each
declared member with the declared signature.

  Sampler         the rollout's needs          LocalEngine, VerlEngine, ServerEngine (verl's servers)
  PolicyEngine    the methods' needs           LocalEngine, VerlEngine
  ExportingEngine the local training loop's    LocalEngine

Signatures are compared with `inspect`: the implementation takes the declared parameters in the
declared order, kinds and defaults; it may add parameters of its own after them, with defaults.
(A static type checker over rtpo/ was measured instead: mypy took over 6 minutes cold on 2 loaded
cores and reported 126 errors elsewhere, too slow for the test command.)
"""

from __future__ import annotations

import ast
import inspect
import types
from pathlib import Path

import pytest

from rtpo.engine import base
from rtpo.engine.local import LocalEngine
from tests.helpers import tiny

ROOT = Path(__file__).resolve().parent.parent


def members(protocol: type) -> tuple[set[str], dict[str, object]]:
    """(attribute names, {method name: function}) a Protocol declares, its bases' included."""
    attrs: set[str] = set()
    funcs: dict[str, object] = {}
    for klass in reversed(protocol.__mro__):
        if klass in (object,) or not getattr(klass, "_is_protocol", False) or klass.__name__ in ("Protocol", "Generic"):
            continue
        attrs |= set(klass.__dict__.get("__annotations__", {}))
        funcs.update({k: v for k, v in klass.__dict__.items() if inspect.isfunction(v) and not k.startswith("_")})
    return attrs, funcs


def signature_problems(protocol: type, impl: type) -> list[str]:
    problems = []
    for name, declared in members(protocol)[1].items():
        got = getattr(impl, name, None)
        if got is None or not callable(got):
            problems.append(f"{impl.__name__}.{name} is missing")
            continue
        want = list(inspect.signature(declared).parameters.values())
        have = list(inspect.signature(got).parameters.values())
        for i, p in enumerate(want):
            if i >= len(have):
                problems.append(f"{impl.__name__}.{name} lacks parameter {p.name!r}")
                break
            q = have[i]
            if (q.name, q.kind, q.default) != (p.name, p.kind, p.default):
                problems.append(f"{impl.__name__}.{name}: parameter {i} is {q} where the seam declares {p}")
        for q in have[len(want):]:
            if q.default is inspect.Parameter.empty and q.kind not in (q.VAR_POSITIONAL, q.VAR_KEYWORD):
                problems.append(f"{impl.__name__}.{name} needs extra parameter {q.name!r} (give it a default)")
    return problems


def attribute_problems(protocol: type, obj: object) -> list[str]:
    return [f"{type(obj).__name__} has no attribute {a!r}" for a in sorted(members(protocol)[0]) if not hasattr(obj, a)]


def engines():
    """One instance of each engine (VerlEngine on a stand-in trainer: it only reads the rollout temperature)."""
    from rtpo.verl_ext.engine import VerlEngine
    from rtpo.verl_ext.server_engine import ServerEngine

    local = tiny.engine(seed=0)
    server = ServerEngine(client=None, tokenizer=local.tokenizer, max_context=local.max_context)
    trainer = types.SimpleNamespace(config=types.SimpleNamespace(actor_rollout_ref=types.SimpleNamespace(
        rollout=types.SimpleNamespace(temperature=1.0))))
    verl = VerlEngine(trainer, server, base.UpdateConfig(), vocab_size=len(local.tokenizer),
                      max_context=local.max_context)
    return local, verl, server


def test_checker_sees_a_wrong_signature():
    class Bad:
        tokenizer = None
        max_context = 1

        def sample(self, contexts, params):  # no seeds
            return []

        def logprobs(self, contexts, completions, temperature=1.0, weights="inference"):  # other default
            return []

        def update(self, rows, cfg, temperature=1.0, extra=None):
            return None

    assert signature_problems(base.Sampler, Bad) == ["Bad.sample lacks parameter 'seeds'"]
    got = signature_problems(base.PolicyEngine, Bad)
    assert any("Bad.logprobs: parameter 4" in p for p in got) and "Bad.sync is missing" in got
    assert not any("update" in p for p in got)  # an added parameter with a default is allowed
    assert attribute_problems(base.Sampler, Bad()) == ["Bad has no attribute 'weight_version'"]


def test_every_engine_keeps_the_seam():
    pytest.importorskip("verl")
    from rtpo.verl_ext.engine import VerlEngine
    from rtpo.verl_ext.server_engine import ServerEngine

    local, verl, server = engines()
    try:
        for protocol, impls in ((base.Sampler, [local, verl, server]), (base.PolicyEngine, [local, verl]),
                                (base.ExportingEngine, [local])):
            for obj in impls:
                problems = signature_problems(protocol, type(obj)) + attribute_problems(protocol, obj)
                assert not problems, f"{protocol.__name__}: {problems}"
        assert isinstance(local, LocalEngine) and isinstance(verl, VerlEngine) and isinstance(server, ServerEngine)
    finally:
        server.close()


def engine_uses(path: Path) -> set[str]:
    """Attribute names read on `engine` / `self.engine` in a module (self.engine.sample -> "sample")."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute):
            v = node.value
            if (isinstance(v, ast.Name) and v.id == "engine") or \
                    (isinstance(v, ast.Attribute) and v.attr == "engine" and isinstance(v.value, ast.Name)
                     and v.value.id == "self"):
                names.add(node.attr)
    return names


@pytest.mark.parametrize("files,protocol", [
    (sorted((ROOT / "rtpo" / "methods").glob("*.py")), base.PolicyEngine),
    ([ROOT / "rtpo" / "rollout.py"], base.Sampler),
    ([ROOT / "rtpo" / "train.py"], base.ExportingEngine),
], ids=["methods", "rollout", "train"])
def test_callers_use_only_what_the_seam_declares(files, protocol):
    """What the methods, the Roller and the local training loop call on their engine is declared."""
    attrs, funcs = members(protocol)
    used = set().union(*(engine_uses(f) for f in files))
    assert used, "no engine use found: the scan is broken"
    assert used <= attrs | set(funcs), f"used but not declared in {protocol.__name__}: {sorted(used - attrs - set(funcs))}"
