"""The typed schema of a task row: one line of a train.jsonl / eval.jsonl (`Task.to_dict()`), as the
embedded generators (rtpo.data) and the paper-scale adapters (rtpo.data.adapters, rtpo.data.paper)
write it. `rtpo.data.read_tasks` checks every row against it when a split is read, before a job does
any work, so a row the envs cannot use fails at once with exit 2 and

    results/data/math/train.jsonl:17: field 'answers': expected a list of non-empty strings, got int

instead of a TypeError some steps into training.

Every row, whatever its kind:

  id        non-empty string, unique in the file
  kind      non-empty string: math | search | airline, or the kind of a custom env factory
            (the verl toy env); the meta rules below apply to the three built-in kinds
  question  non-empty string
  answers   list of non-empty strings; math and search need at least one (math: answers[0] is the
            gold; search: the answer and its aliases); airline's is unused (its goal is in meta)
  tier      easy | medium | hard                      (optional; default medium)
  split     non-empty string                          (optional; the adapters record the HF split)
  source    non-empty string                          (optional)
  meta      object                                    (optional)
  no other field, and no NaN or infinite number anywhere in the row

meta, by kind (what the env reads; the keys only the scripted experts read are not required):

  math      nothing
  search    one of (in the search env's order of precedence): retriever, an object whose kind is
            one of rtpo.tools.search_tool.RETRIEVER_KINDS, keys of RETRIEVER_KEYS only (http: a
            url); corpus_path, an existing corpus file;
            corpus_seed, an integer (the embedded knowledge base)
  airline   db, the airline database of rtpo.tools.airline_db with its value types (free seats an
            integer >= 0, prices numbers >= 0, ids, names, dates and times strings); goal, either
            {"actions": [[tool, {argument: string}], ...]} that succeed in order on db, or {"db": <db>}
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

__all__ = ["FieldError", "check_row", "FIELDS", "TIERS"]

TIERS = ("easy", "medium", "hard")


class FieldError(ValueError):
    """A field of a row that does not fit the schema (`field` is its dotted path, e.g. meta.db.users)."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(message)


def _got(v: Any) -> str:
    """How a wrong value reads in a message: its JSON-ish type (an empty string said as such)."""
    if v is None:
        return "null"
    if isinstance(v, str) and not v.strip():
        return "an empty string"
    return {dict: "object"}.get(type(v), type(v).__name__)


def _is_text(v: Any) -> bool:
    return isinstance(v, str) and bool(v.strip())


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)  # JSON true is not a count


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _need(ok: bool, field: str, expected: str, v: Any) -> None:
    if not ok:
        raise FieldError(field, f"expected {expected}, got {_got(v)}")


def _text(field: str, v: Any) -> None:
    _need(_is_text(v), field, "a non-empty string", v)


def _object(field: str, v: Any) -> dict:
    _need(isinstance(v, dict), field, "an object", v)
    return v


def _texts(field: str, v: Any, at_least_one: bool) -> None:
    expected = "a non-empty list of non-empty strings" if at_least_one else "a list of non-empty strings"
    _need(isinstance(v, list), field, expected, v)
    for i, x in enumerate(v):
        if not _is_text(x):
            raise FieldError(field, f"expected {expected}, got {_got(x)} at index {i}")
    if at_least_one and not v:
        raise FieldError(field, f"expected {expected}, got an empty list")


def _finite(field: str, v: Any) -> None:
    """No NaN / Infinity anywhere (Python's json reads them, and they poison rewards and sorting)."""
    if isinstance(v, float) and not math.isfinite(v):
        raise FieldError(field, f"expected a finite number, got {v}")
    if isinstance(v, dict):
        for k, x in v.items():
            _finite(f"{field}.{k}", x)
    elif isinstance(v, list):
        for i, x in enumerate(v):
            _finite(f"{field}[{i}]", x)


# ---------------------------------------------------------------------------------------------
# meta of the built-in kinds
# ---------------------------------------------------------------------------------------------

def _search_meta(meta: dict, row: dict) -> None:
    from rtpo.tools.search_tool import RETRIEVER_KEYS, RETRIEVER_KINDS

    if "retriever" in meta:
        spec = _object("meta.retriever", meta["retriever"])
        if spec.get("kind") not in RETRIEVER_KINDS:
            raise FieldError("meta.retriever.kind", f"expected one of {', '.join(RETRIEVER_KINDS)}, "
                                                    f"got {spec.get('kind')!r}")
        unknown = sorted(set(spec) - RETRIEVER_KEYS)
        if unknown:
            raise FieldError(f"meta.retriever.{unknown[0]}",
                             f"unknown key (known: {', '.join(sorted(RETRIEVER_KEYS))})")
        if spec["kind"] == "http":
            _text("meta.retriever.url", spec.get("url"))
    elif "corpus_path" in meta:
        _text("meta.corpus_path", meta["corpus_path"])
        path = os.path.abspath(meta["corpus_path"])  # as the search env resolves it
        if not os.path.isfile(path):
            raise FieldError("meta.corpus_path", f"expected an existing corpus file, got {path} (not found)")
    elif "corpus_seed" in meta:
        _need(_is_int(meta["corpus_seed"]), "meta.corpus_seed", "an integer", meta["corpus_seed"])
    else:
        raise FieldError("meta", f"expected one of 'retriever', 'corpus_path', 'corpus_seed' (the search "
                                 f"backend), got keys {sorted(meta)}")


# the airline DB's value types: field -> (check, expected); rtpo.tools.airline_db.check_db checks
# the structure (tables present, every reservation's flight exists)
_FLIGHT = {"origin": (_is_text, "a non-empty string"), "destination": (_is_text, "a non-empty string"),
           "date": (_is_text, "a non-empty string"), "time": (_is_text, "a non-empty string"),
           "price": (lambda v: _is_number(v) and v >= 0, "a number >= 0"),
           "seats": (lambda v: _is_int(v) and v >= 0, "an integer >= 0")}
_RESERVATION = {"user_id": (_is_text, "a non-empty string"), "flight_id": (_is_text, "a non-empty string"),
                "status": (lambda v: v in ("active", "cancelled"), "'active' or 'cancelled'")}


def _airline_db(field: str, db: Any) -> None:
    from rtpo.tools.airline_db import check_db

    _object(field, db)
    try:
        check_db(db)
    except ValueError as e:
        raise FieldError(field, str(e)) from None
    for uid, u in db["users"].items():
        _object(f"{field}.users.{uid}", u)
        if "name" in u:
            _text(f"{field}.users.{uid}.name", u["name"])
    for table, types in (("flights", _FLIGHT), ("reservations", _RESERVATION)):
        for key, rec in db[table].items():
            _object(f"{field}.{table}.{key}", rec)
            for name, (ok, expected) in types.items():
                _need(ok(rec[name]), f"{field}.{table}.{key}.{name}", expected, rec[name])


def _airline_meta(meta: dict, row: dict) -> None:
    from rtpo.envs.airline_env import goal_db
    from rtpo.envs.base import Task
    from rtpo.tools.airline_db import AIRLINE_SPECS

    for key in ("db", "goal"):
        if key not in meta:
            raise FieldError(f"meta.{key}", "missing (an airline task needs meta.db and meta.goal)")
    _airline_db("meta.db", meta["db"])
    goal = _object("meta.goal", meta["goal"])
    if "db" in goal:
        _airline_db("meta.goal.db", goal["db"])
        return
    actions = goal.get("actions")
    _need(isinstance(actions, list), "meta.goal.actions", "a list of [tool, {arguments}] (or meta.goal.db)", actions)
    for i, a in enumerate(actions):
        f = f"meta.goal.actions[{i}]"
        _need(isinstance(a, list) and len(a) == 2 and isinstance(a[1], dict), f, "[tool, {arguments}]", a)
        name, args = a
        if name not in AIRLINE_SPECS:
            raise FieldError(f, f"expected a tool of {', '.join(AIRLINE_SPECS)}, got {name!r}")
        params = AIRLINE_SPECS[name].params
        if sorted(args) != sorted(params):
            raise FieldError(f, f"expected the arguments {sorted(params)} of {name}, got {sorted(args)}")
        for p, v in args.items():
            _text(f"{f}.{p}", v)
    try:  # the goal actions must succeed on the initial DB, as the env applies them at reset
        goal_db(Task(id=row["id"], kind="airline", question=row["question"], answers=[], meta=meta))
    except ValueError as e:
        raise FieldError("meta.goal", str(e)) from None


_META: dict[str, Callable[[dict, dict], None]] = {"search": _search_meta, "airline": _airline_meta}


# ---------------------------------------------------------------------------------------------
# the row
# ---------------------------------------------------------------------------------------------

def _answers(kind: str) -> Callable[[str, Any], None]:
    return lambda f, v: _texts(f, v, at_least_one=kind in ("math", "search"))


def _tier(field: str, v: Any) -> None:
    if v not in TIERS:
        raise FieldError(field, f"expected one of {', '.join(TIERS)}, got {v!r}")


# field -> (required, check); `answers` depends on the kind
FIELDS: dict[str, tuple[bool, Callable[[str, Any], Any] | None]] = {
    "id": (True, _text), "kind": (True, _text), "question": (True, _text), "answers": (True, None),
    "tier": (False, _tier), "split": (False, _text), "source": (False, _text), "meta": (False, _object),
}


def check_row(row: Any, kind: str | None = None) -> None:
    """Raise FieldError (naming the field and what was expected) if `row` is not a valid task row,
    or, with `kind`, not of that kind (the task a job runs)."""
    if not isinstance(row, dict):
        raise FieldError("<row>", f"expected an object, got {_got(row)}")
    unknown = sorted(set(row) - set(FIELDS))
    if unknown:
        raise FieldError(unknown[0], f"unknown field (a task row has {', '.join(FIELDS)})")
    for name, (required, check) in FIELDS.items():
        if name not in row:
            if required:
                needed = ", ".join(k for k, (r, _) in FIELDS.items() if r)
                raise FieldError(name, f"missing (a task row needs {needed})")
            continue
        (check or _answers(row["kind"]))(name, row[name])
        if name == "kind" and kind is not None and row["kind"] != kind:
            raise FieldError("kind", f"expected {kind!r} (the task this job runs), got {row['kind']!r}")
    _finite("meta", row.get("meta", {}))
    if row["kind"] in _META:
        _META[row["kind"]](row.get("meta", {}), row)
