"""The report's readers: one schema per kind of file the report reads, and the checks a schema cannot say.

    run.json        schemas/run.schema.yaml      + the run its path names; metrics.jsonl holds exactly the
                                                   steps 0..n-1 of its n completed steps, all it planned
                                                   (`check_run`)
    metrics.jsonl   schemas/metrics.schema.yaml  per record (finite; counts >= 0, fractions in [0, 1]);
                                                   steps whole, unique and increasing; the path's run
    eval JSON       schemas/eval.schema.yaml     + pass@1 equal to the mean of its per-problem values and n
                                                   to their count, pass@k non-decreasing in k (`check_eval`)
    theory_checks.csv, not_run.json              their columns / fields

Every file is strict JSON: no NaN or Infinity (the writers put null for a value not measured), no key
given twice. A file that fails any of this is refused with a ValueError naming the file (and line) and
the field: the report never turns a damaged or contradictory input into a table cell. Which files are
read, and a benchmark that one eval JSON of a task lacks, is rtpo.report.load's.
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from rtpo.experiment import RunKey
from rtpo.run_record import RUN_FILE

SCHEMAS = Path(__file__).resolve().parent / "schemas"   # package data (pyproject.toml)
KINDS = ("run", "metrics", "eval")
STEP_NUMERIC_DICTS = ("tokens", "time", "trunks")
STEP_NUMERIC = ("step", "seed", "reward_mean", "success_rate", "heldout_success", "heldout_reward", "context_overflow",
                "ratio_mean", "kl_rollout_train", "zero_adv_frac", "geo_ratio", "abs_dlogp", "clip_share",
                "trained_tokens", "generated_tokens", "rollouts_per_prompt", "tool_calls", "tool_errors", "syncs", "loss",
                "grad_norm", "lr", "weight_version", "train_version")
THEORY_COLUMNS = ("check", "paper_claim", "quantity", "closed_form", "monte_carlo", "tolerance", "holds", "note")
PASS1_TOLERANCE = 1e-9   # pass@1 is the mean of the per-problem values; only float rounding may separate them


# ------------------------------------------------------------------------------------------------
# strict JSON and the schemas
# ------------------------------------------------------------------------------------------------
def _short(v: Any, n: int = 60) -> str:
    r = repr(v)
    return r if len(r) <= n else r[:n] + "..."


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for k, v in pairs:
        if k in seen:
            raise ValueError(f"key {k!r} is given twice")
        seen[k] = v
    return seen


def strict_json(text: str) -> Any:
    """A JSON document, refused (ValueError, no location: callers add it) when it is not valid JSON, gives a
    key twice in one object (json keeps the last silently) or holds a number that is not finite."""
    from rtpo.inputs import nonfinite

    try:
        doc = json.loads(text, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError as e:
        raise ValueError(f"not valid JSON ({e.msg})") from None
    except RecursionError:
        raise ValueError("not valid JSON (nested too deeply)") from None
    bad = nonfinite(doc)
    if bad:
        raise ValueError(f"field {bad[0]!r} is not finite: {bad[1]!r} (the writers put null for a value not measured)")
    return doc


def read_strict(path: Path) -> Any:
    """`strict_json` of a file (strict UTF-8); ValueError naming the file."""
    raw = Path(path).read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise ValueError(f"{path}: not UTF-8: byte 0x{raw[e.start]:02x} at byte offset {e.start} (line {line}) "
                         f"({e.reason})") from None
    try:
        return strict_json(text)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None


@functools.cache
def schema(kind: str) -> dict[str, Any]:
    """The JSON schema of one kind of file (schemas/<kind>.schema.yaml)."""
    import yaml

    return yaml.safe_load((SCHEMAS / f"{kind}.schema.yaml").read_text())


@functools.cache
def validator(kind: str) -> Any:
    """jsonschema's validator of `schema(kind)`: what names the field and the bound of an error."""
    import jsonschema

    return jsonschema.Draft202012Validator(schema(kind))


@functools.cache
def fast_check(kind: str) -> Any:
    """The same schema compiled to Python by fastjsonschema (~10x faster than jsonschema's validator on the
    thousands of records a results tree holds); a document it refuses is then explained by `validator`."""
    import fastjsonschema

    return fastjsonschema.compile(schema(kind))


def _field(path: Any) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def schema_error(kind: str, doc: Any) -> str | None:
    """What in `doc` breaks the schema of `kind`, as one line naming the field ('' fields: the top level);
    None when it holds."""
    import fastjsonschema

    try:
        fast_check(kind)(doc)
        return None
    except fastjsonschema.JsonSchemaValueException:
        pass
    errors = list(validator(kind).iter_errors(doc))
    if not errors:   # the two readings of the schema differ on this document: jsonschema's is the reference
        return None
    e = min(errors, key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
    name, val = _field(e.absolute_path), e.instance
    if e.validator in ("minimum", "maximum"):
        lo, hi = e.schema.get("minimum", "-inf"), e.schema.get("maximum")
        what = " (a fraction)" if hi == 1 else " (a count)" if lo == 0 and hi is None else ""
        return f"{name} is {val:g}, outside [{lo}, {'inf)' if hi is None else f'{hi}]'}{what}"
    if e.validator == "type":
        want = e.validator_value if isinstance(e.validator_value, list) else [e.validator_value]
        if "number" in want or "integer" in want:
            whole = "a whole number" if "integer" in want else "a number"
            return f"field {name!r} is not {whole}: {_short(val)}"
        words = {"object": "an object", "array": "a list", "string": "a string", "null": "null", "boolean": "true or false"}
        return f"field {name!r} must be {' or '.join(words.get(w, w) for w in want)}, got {_short(val)}"
    if e.validator == "required":
        missing = [k for k in e.validator_value if k not in val]
        return f"missing field {'.'.join([*filter(None, [name]), missing[0]])!r}"
    if e.validator == "minProperties":
        return f"field {name!r} must be a non-empty object, got {_short(val)}"
    return f"field {name or '(top level)'!r}: {e.message}"


# ------------------------------------------------------------------------------------------------
# metrics.jsonl
# ------------------------------------------------------------------------------------------------
def _num(x: Any, name: str | None = None) -> float:
    """JSON scalar -> float (None -> nan: not measured); bools count as 0/1. A value that is not a
    number raises TypeError; a non-finite one (NaN / Infinity, a number beyond a float's range: the
    writers put null for "not measured") raises ValueError, either naming the field `name`."""
    if x is None:
        return math.nan
    if isinstance(x, (bool, int, float)):
        try:
            v = float(x)
        except OverflowError:
            v = math.inf
        if not math.isfinite(v):
            raise ValueError(f"field {name!r} is not finite: {_short(x)}" if name else f"not finite: {_short(x)}")
        return v
    raise TypeError(f"field {name!r} is not a number: {_short(x)}" if name else f"not a number: {_short(x)}")


def flatten_step(rec: dict[str, Any]) -> dict[str, Any]:
    """One JSONL record -> flat scalars. Nested dicts become `parent_child`; `turns` is kept as
    its count (`turns_n`) because per-turn lists do not fit one row; the per-turn `mismatch` records become
    `mismatch_k<k>_<field>` (e.g. mismatch_k2_geo_ratio); any other list of numbers
    (one value per stage, e.g. RTPO kl:tau's `sync_kl`) as its largest value (`sync_kl_max`, nan
    when empty). A value that should be a number and is not raises TypeError, one that is not finite
    ValueError, naming the field."""
    flat: dict[str, Any] = {}
    for key, val in rec.items():
        if key == "turns":
            if val is not None and not isinstance(val, list):
                raise TypeError(f"field 'turns' is not a list: {_short(val)}")
            flat["turns_n"] = float(len(val or []))
        elif key == "mismatch":   # per turn index k: {"k", "tokens", "geo_ratio", ...} -> mismatch_k<k>_<field>
            if val is not None and not isinstance(val, list):
                raise TypeError(f"field 'mismatch' is not a list of per-turn records: {_short(val)}")
            for d in val or []:
                if not isinstance(d, dict) or not isinstance(d.get("k"), int) or isinstance(d["k"], bool):
                    raise TypeError(f"field 'mismatch' is not a list of per-turn records: {_short(val)}")
                for sub, v in d.items():
                    if sub != "k":
                        flat[f"mismatch_k{d['k']}_{sub}"] = _num(v, f"mismatch[k={d['k']}].{sub}")
        elif key in STEP_NUMERIC_DICTS and val is not None and not isinstance(val, dict):
            raise TypeError(f"field {key!r} is not an object of numbers: {_short(val)}")
        elif isinstance(val, list):
            vals = []
            for i, v in enumerate(val):
                try:
                    vals.append(_num(v, f"{key}[{i}]"))
                except TypeError:
                    raise TypeError(f"field {key!r} is not a list of numbers: {_short(val)}") from None
            flat[f"{key}_max"] = max(vals) if vals else math.nan
        elif isinstance(val, dict):
            for sub, v in val.items():
                if isinstance(v, str) and key not in STEP_NUMERIC_DICTS:
                    flat[f"{key}_{sub}"] = v
                else:
                    flat[f"{key}_{sub}"] = _num(v, f"{key}.{sub}")
        elif isinstance(val, str) and key not in STEP_NUMERIC:
            flat[key] = val
        else:
            flat[key] = _num(val, key)
    tok = rec.get("tokens") or {}
    total = float(sum(_num(v, f"tokens.{k}") for k, v in tok.items() if v is not None))
    if not math.isfinite(total):
        raise ValueError(f"field 'tokens' sums to a non-finite total: {_short(tok)}")
    flat["tokens_total"] = total
    return flat


# a step is a whole number a float holds exactly (the tables cast it to int64)
MAX_STEP = 2 ** 53


def read_metrics_jsonl(path: Path, expect: RunKey | None = None) -> list[dict[str, Any]]:
    """Read one metrics.jsonl into flat rows (`flatten_step`, with `source` "path:line"); a bad line raises
    ValueError naming `path:line` and the field: a line that is not UTF-8, over rtpo.inputs.MAX_ROW_BYTES,
    not a JSON object, with a key given twice or a number that is not finite; a record outside the metrics
    schema (a count below 0, a fraction above 1, a step that is not a whole number >= 0); a record of
    another run than `expect` (its task, method, seed); a step that repeats or goes back (a run's records
    have strictly increasing steps: a resumed run drops the records after its checkpoint before it
    appends)."""
    from rtpo.inputs import jsonl_lines

    path = Path(path)
    rows = []
    first: dict[int, int] = {}   # step -> line
    prev: tuple[int, int] | None = None   # (step, line) of the previous record
    for i, line in jsonl_lines(path):
        where = f"{path}:{i}"
        try:
            rec = strict_json(line)
        except ValueError as e:
            raise ValueError(f"{where}: {e}" + (f" (step {_step_of(line)})" if "finite" in str(e) else "")) from None
        if not isinstance(rec, dict):
            raise ValueError(f"{where}: a record must be a JSON object")
        bad = schema_error("metrics", rec)
        if bad:
            if (bad.startswith("step ") or "'step'" in bad) and "missing" not in bad:
                bad = f"field 'step' must be a whole number >= 0, got {_short(rec['step'])}"
            raise ValueError(f"{where}: {bad}")
        if expect is not None:
            for key in ("task", "method", "seed"):
                if key in rec and rec[key] != getattr(expect, key):
                    raise ValueError(f"{where}: field {key!r} is {_short(rec[key])} but the path says "
                                     f"{getattr(expect, key)!r}")
        step = int(rec["step"])
        if step >= MAX_STEP:
            raise ValueError(f"{where}: field 'step' must be a whole number >= 0, got {_short(rec['step'])}")
        try:
            flat = flatten_step(rec)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{where}: {e}") from None
        if step in first:
            raise ValueError(f"{where}: field 'step': step {step} is duplicated (first at line {first[step]})")
        if prev is not None and step < prev[0]:
            raise ValueError(f"{where}: field 'step': step {step} is out of order (line {prev[1]} has step "
                             f"{prev[0]}; steps must increase)")
        first[step] = i
        prev = (step, i)
        flat["step"] = step
        flat["source"] = where
        rows.append(flat)
    return rows


def _step_of(line: str) -> str:
    try:
        return _short(json.loads(line).get("step"))
    except (ValueError, AttributeError):
        return "?"


# ------------------------------------------------------------------------------------------------
# run.json
# ------------------------------------------------------------------------------------------------
def read_run(run_dir: Path, key: RunKey) -> dict[str, Any] | None:
    """The run record (run.json) of the run `key` in `run_dir`, checked against its schema and against the
    path (the run it names); None when the run has none."""
    path = Path(run_dir) / RUN_FILE
    if not path.is_file():
        return None
    rec = read_strict(path)
    if not isinstance(rec, dict):
        raise ValueError(f"{path}: not a run record (a JSON object with key, settings and steps)")
    bad = schema_error("run", rec)
    if bad:
        raise ValueError(f"{path}: {bad}")
    if rec["key"] != key.as_dict():
        raise ValueError(f"{path}: field 'key' is {_short(rec['key'], 200)}, but the path says {key.as_dict()}")
    return rec


def check_run(run_dir: Path, key: RunKey, records: list[dict[str, Any]] | None = None) -> dict[str, Any] | None:
    """The run record of the run `key` in `run_dir` (`read_run`) with its metrics.jsonl (`records`, its rows;
    read here when None), checked together: the records are exactly the steps 0..n-1 of the n steps run.json
    says were completed (more, fewer or others refused, naming the file), and the run completed every step it
    planned (a short run's summary would hide the missing steps). None when the run has no run.json and no
    metrics.jsonl; a metrics.jsonl without its run.json is refused (nothing says it is the whole run)."""
    path, mpath = Path(run_dir) / RUN_FILE, Path(run_dir) / "metrics.jsonl"
    rec = read_run(run_dir, key)
    if records is None:
        records = read_metrics_jsonl(mpath, key) if mpath.exists() else None
    if rec is None:
        if records is not None:
            raise ValueError(f"{mpath}: {len(records)} step records without the run's record {path}, so nothing says "
                             "whether they are the whole run (a run killed before run.json existed, or files copied "
                             "in by hand); rerun the run")
        return None
    done, planned = rec["steps"]["completed"], rec["steps"]["planned"]
    steps = [r["step"] for r in records or []]
    if steps != list(range(done)):
        if len(steps) < done:
            raise ValueError(f"{mpath}: holds {len(steps)} step records, but {path} says {done} steps were completed: "
                             "records are missing; rerun the run")
        raise ValueError(f"{mpath}: holds {len(steps)} step records (steps {steps[:12]}{'...' if len(steps) > 12 else ''}), "
                         f"but {path} says steps 0..{done - 1} were completed ({done}): these are not the run's "
                         "records; rerun the run")
    if done < planned:
        raise ValueError(f"{path}: the run completed {done} of its {planned} steps (a short run); rerun it")
    return rec


# ------------------------------------------------------------------------------------------------
# eval JSON
# ------------------------------------------------------------------------------------------------
def read_eval_doc(path: Path) -> dict[str, Any]:
    """An eval JSON, strict (`read_strict`), within its schema and consistent with itself (`check_eval`);
    ValueError naming the file and the field."""
    path = Path(path)
    doc = read_strict(path)
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: the top level must be a JSON object (an eval JSON), got "
                         f"{type(doc).__name__} {_short(doc)}")
    bad = schema_error("eval", doc)
    if bad:
        raise ValueError(f"{path}: {bad}")
    check_eval(path, doc)
    return doc


def check_eval(path: Path, doc: dict[str, Any]) -> None:
    """What the eval schema cannot say: each benchmark's pass@1 (and overall's, over every problem) is the mean
    of its per-problem successes / samples and its n their count, where the file has per_problem; pass@k does
    not fall as k grows (a problem solved in k samples is solved in more). ValueError naming the field."""
    groups = [(f"benchmarks.{b}", m, b) for b, m in doc["benchmarks"].items()] + [("overall", doc["overall"], None)]
    for name, m, bench in groups:
        ks = sorted(int(k[5:]) for k in m if k.startswith("pass@") and m[k] is not None)
        for a, b in zip(ks, ks[1:]):
            if m[f"pass@{a}"] > m[f"pass@{b}"] + PASS1_TOLERANCE:
                raise ValueError(f"{path}: {name}.pass@{a} is {m[f'pass@{a}']:g}, above {name}.pass@{b} = "
                                 f"{m[f'pass@{b}']:g}: pass@k cannot fall as k grows")
    problems = doc.get("per_problem")
    if problems is None:
        return
    for i, p in enumerate(problems):
        if p["successes"] > p["samples"]:
            raise ValueError(f"{path}: per_problem[{i}]: successes {p['successes']} > samples {p['samples']}")
        if p["benchmark"] not in doc["benchmarks"]:
            raise ValueError(f"{path}: per_problem[{i}] is of benchmark {p['benchmark']!r}, which 'benchmarks' "
                             f"lacks ({', '.join(sorted(doc['benchmarks']))})")
    for name, m, bench in groups:
        ps = [p["successes"] / p["samples"] for p in problems if bench is None or p["benchmark"] == bench]
        if not ps:
            raise ValueError(f"{path}: {name} has no per_problem entries")
        mean = sum(ps) / len(ps)
        if abs(mean - m["pass@1"]) > PASS1_TOLERANCE:
            raise ValueError(f"{path}: {name}.pass@1 is {m['pass@1']:g}, but its {len(ps)} per-problem values "
                             f"({', '.join(f'{v:g}' for v in ps[:6])}{', ...' if len(ps) > 6 else ''}) give {mean:g}")
        if m.get("n") is not None and m["n"] != len(ps):
            raise ValueError(f"{path}: {name}.n is {m['n']:g}, but per_problem lists {len(ps)} problems of it")


def read_eval(path: Path, expect: RunKey | None = None
              ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, str]]:
    """(read_eval_json's rows, read_eval_problems' rows, its `not_run`: {benchmark: reason} the evaluation left
    out when its web-search probe failed) of one eval JSON, read and checked once."""
    doc = read_eval_doc(Path(path))
    return eval_rows(Path(path), doc, expect), problem_rows(doc), dict(doc.get("not_run") or {})


def read_eval_json(path: Path, expect: RunKey | None = None) -> list[dict[str, Any]]:
    """Read one eval JSON (`read_eval_doc`) into rows: one per benchmark plus "overall", each with `k`, a
    `pass@k` column (= the JSON's `pass@{k}`) and `source`; null is kept as "not measured" (NaN). A file of
    another run than `expect` (its task, method, seed) is refused."""
    return eval_rows(Path(path), read_eval_doc(Path(path)), expect)


def eval_rows(path: Path, doc: dict[str, Any], expect: RunKey | None = None) -> list[dict[str, Any]]:
    if expect is not None:
        for key in ("task", "method", "seed"):
            if doc[key] != getattr(expect, key):
                raise ValueError(f"{path}: field {key!r} is {_short(doc[key])} but the path says "
                                 f"{getattr(expect, key)!r}")
    k = int(doc["k"])
    rows = []
    for bench, metrics in [*doc["benchmarks"].items(), ("overall", doc["overall"])]:
        row: dict[str, Any] = {"benchmark": bench, "k": k, "source": str(path)}
        row.update({key: math.nan if val is None else float(val) for key, val in metrics.items()})
        row["pass@k"] = row.get(f"pass@{k}", math.nan)
        rows.append(row)
    return rows


def read_eval_problems(path: Path) -> list[dict[str, Any]]:
    """The eval JSON's `per_problem` list as rows (benchmark, problem, successes, samples, p = successes /
    samples); [] when the file has none (eval JSONs written before it existed)."""
    return problem_rows(read_eval_doc(Path(path)))


def problem_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"benchmark": str(d["benchmark"]), "problem": str(d["id"]), "successes": d["successes"],
             "samples": d["samples"], "p": d["successes"] / d["samples"]} for d in doc.get("per_problem") or []]


# ------------------------------------------------------------------------------------------------
# the theory checks, the benchmarks not run
# ------------------------------------------------------------------------------------------------
def read_theory(path: Path) -> pd.DataFrame:
    try:
        df = pd.read_csv(path, encoding="utf-8", encoding_errors="strict")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 ({e.reason} at byte offset {e.start})") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        raise ValueError(f"{path}: not a readable CSV ({e})") from None
    missing = [c for c in THEORY_COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"{path}: missing columns {missing}")
    df["holds"] = df["holds"].map(lambda v: str(v).strip().lower() in ("true", "1", "yes"))
    return df


def read_not_run(root: Path, cfg: dict[str, Any]) -> dict[str, dict[str, str]]:
    """{task: {benchmark: reason (the file)}} from results/data/<task>/not_run.json (paper scale only)."""
    out = {}
    for t in cfg.get("tasks", []):
        p = root / "data" / t / "not_run.json"
        if p.exists():
            from rtpo.inputs import read_json

            doc = read_json(p)
            benches = doc.get("benchmarks") or {} if isinstance(doc, dict) else None
            if not isinstance(benches, dict):
                raise ValueError(f"{p}: expected an object whose field 'benchmarks' maps benchmark -> reason")
            if benches:
                out[t] = {str(b): f"{why} ({p})" for b, why in benches.items()}
    return out
