"""Adapters from the real benchmarks of the paper into the shared task schema (`rtpo.envs.base.Task`).

Paper scale only (§4, §D, §F.3): the cluster downloads each benchmark with `datasets` and saves it
as .jsonl / .json / .parquet (or the .csv that xbench ships); `load_benchmark(name, path)` turns
that file into Tasks. Nothing here touches the network.

Column names are those of the Hugging Face datasets (or official releases) named in each spec's
`hf_dataset`; where common mirrors spell a column differently (e.g. AIME 2024 "Problem" vs
"problem"), every accepted spelling is listed, first match wins. FlashRAG-format QA files
(RUC-NLPIR/FlashRAG_datasets, used by Search-R1: id, question, golden_answers) load too.

Task fields:
  id      "<benchmark>-<the row's id column, or its row index when the dataset has none>"
  kind    "math" (GSM8K, MATH500, AIME24/25, AMC23, OlympiadBench) or "search" (the QA benchmarks)
  answers math: [the gold final answer]; QA: [answer, *aliases]
  tier    OUR mapping of benchmarks to the paper's Table 1 difficulty tiers (the paper does not
          list one); see TIERS below
  source  the canonical benchmark name (the key of BENCHMARKS); eval groups by it
  split   the `split` argument (which HF split the file holds)
  meta    benchmark-specific facts (subject, level, GAIA level, HLE category, ...) + `extra_meta`

Errors: anything wrong with the file or a row raises `AdapterError`, whose message names the file,
the row (0-based record index; for .jsonl also the line number) and the field.
"""

from __future__ import annotations

import base64
import csv
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rtpo.envs.base import Task

__all__ = ["AdapterError", "SkipRow", "BenchmarkSpec", "BENCHMARKS", "TRAINING_SETS", "ALIASES", "TIERS", "canonical_name",
           "load_benchmark", "read_records"]

# Our mapping of the benchmarks to the paper's easy / medium / hard tiers (Table 1 names tiers but
# no assignment is given in the text we have). Math: grade-school and MATH-level problems are easy,
# competition problems with short answers medium, AIME hard. QA: HotpotQA and 2Wiki are the 2-hop
# Wikipedia sets search agents train on (easy); MuSiQue (2-4 hops, built against shortcuts) and
# Bamboogle (out-of-distribution 2-hop questions that defeat a single search) are medium; the
# deep-search benchmarks of §F.3 (GAIA, WebWalkerQA, XBench-DeepSearch, HLE) are hard.
TIERS: dict[str, str] = {
    "gsm8k": "easy", "math500": "easy",
    "amc23": "medium", "olympiadbench": "medium",
    "aime24": "hard", "aime25": "hard",
    "hotpotqa": "easy", "2wikimultihopqa": "easy",
    "musique": "medium", "bamboogle": "medium",
    "gaia": "hard", "webwalkerqa": "hard", "xbench-deepsearch": "hard", "hle": "hard",
}


class AdapterError(ValueError):
    """A benchmark file or one of its rows cannot be read; names the file, row and field."""

    def __init__(self, file: str | Path, message: str, row: int | None = None,
                 field: str | None = None, line: int | None = None):
        self.file, self.row, self.field, self.line = str(file), row, field, line
        where = [f"file {self.file}"]
        if row is not None:
            where.append(f"row {row}" + (f" (line {line})" if line is not None else ""))
        if field is not None:
            where.append(f"field {field!r}")
        super().__init__(f"{', '.join(where)}: {message}")


# --------------------------------------------------------------------------------------------
# Reading files
# --------------------------------------------------------------------------------------------

def _plain(v: Any) -> Any:
    """numpy arrays / scalars (from parquet) -> lists / Python scalars, recursively."""
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if hasattr(v, "tolist") and not isinstance(v, (str, bytes)):  # numpy array or scalar
        return _plain(v.tolist())
    return v


def read_records(path: str | Path, split: str = "test") -> list[tuple[dict[str, Any], int | None]]:
    """The rows of a benchmark file as (record, jsonl line number or None).

    .jsonl: one JSON object per line (blank lines skipped). .json: a list of objects, or an object
    holding that list under the key `split` or "data". .parquet: via pandas/pyarrow. .csv: header
    row + rows (xbench's release format).
    """
    p = Path(path)
    if not p.exists():
        raise AdapterError(p, "file does not exist")
    if not p.is_file():
        raise AdapterError(p, "not a regular file")
    suffix = p.suffix.lower()
    try:
        if suffix == ".jsonl":
            out = []
            with p.open(encoding="utf-8") as f:
                for lineno, line in enumerate(f, start=1):
                    if not line.strip():
                        continue
                    try:
                        rec = json.loads(line)
                    except json.JSONDecodeError as e:
                        raise AdapterError(p, f"malformed JSON ({e.msg} at column {e.colno})",
                                           row=len(out), field="<json>", line=lineno) from None
                    out.append((rec, lineno))
            return out
        if suffix == ".json":
            text = p.read_text(encoding="utf-8")
            try:
                data = json.loads(text)
            except json.JSONDecodeError as e:
                # ARPO's evaluation/data/hle/top.json is JSON Lines under a .json name
                rows = _json_lines(text)
                if rows is None:
                    raise AdapterError(p, f"malformed JSON ({e.msg} at line {e.lineno})") from None
                return rows
            if isinstance(data, dict):
                for key in (split, "data"):
                    if isinstance(data.get(key), list):
                        data = data[key]
                        break
                else:
                    raise AdapterError(p, f"expected a list of rows, or an object with a list under "
                                          f"{split!r} or 'data'; got keys {sorted(data)[:10]}")
            if not isinstance(data, list):
                raise AdapterError(p, f"expected a list of rows, got {type(data).__name__}")
            return [(rec, None) for rec in data]
        if suffix == ".parquet":
            import pandas as pd

            try:
                df = pd.read_parquet(p)
            except Exception as e:  # noqa: BLE001 - pyarrow raises many types for a bad file
                raise AdapterError(p, f"unreadable parquet file ({type(e).__name__}: {e})") from None
            return [(_plain(rec), None) for rec in df.to_dict(orient="records")]
        if suffix == ".csv":
            with p.open(encoding="utf-8-sig", newline="") as f:
                return [(dict(rec), None) for rec in csv.DictReader(f)]
    except UnicodeDecodeError as e:
        raise AdapterError(p, f"not UTF-8 text ({e.reason} at byte {e.start})") from None
    except OSError as e:
        raise AdapterError(p, f"cannot read ({e.strerror or e})") from None
    raise AdapterError(p, f"unsupported file type {suffix!r} (use .jsonl, .json, .parquet or .csv)")


def _json_lines(text: str) -> list[tuple[dict[str, Any], int | None]] | None:
    """Rows of `text` read as JSON Lines, or None if some non-blank line is not a JSON object."""
    out = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            return None
        if not isinstance(rec, dict):
            return None
        out.append((rec, lineno))
    return out or None


# --------------------------------------------------------------------------------------------
# Row access with errors that name file, row and field
# --------------------------------------------------------------------------------------------

def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


class _Row:
    """One record plus where it came from; `get` raises AdapterError naming file/row/field."""

    def __init__(self, rec: dict[str, Any], file: Path, index: int, line: int | None):
        self.rec, self.file, self.index, self.line = rec, file, index, line

    def error(self, field: str, message: str) -> AdapterError:
        return AdapterError(self.file, message, row=self.index, field=field, line=self.line)

    def column(self, names: tuple[str, ...], required: bool = True) -> tuple[str, Any]:
        """(column name, value) of the first of `names` present with a value."""
        for n in names:
            if n in self.rec and not _missing(self.rec[n]):
                return n, self.rec[n]
        if required:
            present = [n for n in names if n in self.rec]
            if present:
                raise self.error(present[0], "value is empty (null)")
            alt = f" (or {', '.join(repr(n) for n in names[1:])})" if len(names) > 1 else ""
            raise self.error(names[0], f"missing column{alt}; the row has "
                                       f"{sorted(self.rec)[:12]}")
        return names[0], None

    def text(self, names: tuple[str, ...], required: bool = True) -> str | None:
        """A non-empty string column (ints and integral floats are accepted and formatted)."""
        name, v = self.column(names, required)
        if v is None:
            return None
        s = _scalar_text(v)
        if s is None:
            raise self.error(name, f"expected a string, got {type(v).__name__} {str(v)[:60]!r}")
        if not s.strip():
            if required:
                raise self.error(name, "value is an empty string")
            return None
        return s.strip()

    def text_list(self, names: tuple[str, ...], required: bool = True) -> list[str]:
        """A column holding a string or a list of strings (answer aliases, FlashRAG golden_answers)."""
        name, v = self.column(names, required)
        if v is None:
            return []
        items = v if isinstance(v, list) else [v]
        out = []
        for j, x in enumerate(items):
            s = _scalar_text(x)
            if s is None:
                raise self.error(name, f"item {j}: expected a string, got {type(x).__name__}")
            if s.strip():
                out.append(s.strip())
        if required and not out:
            raise self.error(name, "no non-empty answer")
        return out


def _scalar_text(v: Any) -> str | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, str):
        return v
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float) and math.isfinite(v):
        return str(int(v)) if v.is_integer() else repr(v)
    return None


class SkipRow(Exception):
    """Raised by a parser for a row that cannot be a task (a training row without an answer).
    `load_benchmark` records it in `skipped` when the caller passes a list, else raises the error."""

    def __init__(self, error: AdapterError):
        super().__init__(str(error))
        self.error = error


# --------------------------------------------------------------------------------------------
# Per-benchmark parsers: _Row -> (raw id or None, question, answers, meta)
# --------------------------------------------------------------------------------------------

Parsed = tuple["str | None", str, list[str], dict[str, Any]]

_GSM8K_FINAL = re.compile(r"####\s*(.+?)\s*$", re.DOTALL)


def _parse_gsm8k(r: _Row) -> Parsed:
    q = r.text(("question",))
    sol = r.text(("answer",))
    m = _GSM8K_FINAL.search(sol)
    if not m:
        raise r.error("answer", "no final '#### <number>' line in the GSM8K solution")
    final = m.group(1).strip().replace(",", "").rstrip(".")
    if not final:
        raise r.error("answer", "empty final answer after '####'")
    return None, q, [final], {"solution": sol}


def _strip_dollars(s: str) -> str:
    s = s.strip()
    while len(s) >= 2 and s.startswith("$") and s.endswith("$"):
        s = s[1:-1].strip()
    return s


def _parse_math500(r: _Row) -> Parsed:
    meta = {k: r.rec[k] for k in ("subject", "level") if not _missing(r.rec.get(k))}
    # HuggingFaceH4/MATH-500 names the problem "problem"; ARPO's evaluation/data/math500 "question"
    return (r.text(("unique_id",), required=False), r.text(("problem", "question")),
            [_strip_dollars(r.text(("answer",)))], meta)


def _simple_math(question_cols: tuple[str, ...], answer_cols: tuple[str, ...],
                 id_cols: tuple[str, ...], meta_cols: tuple[str, ...] = ()) -> Callable[[_Row], Parsed]:
    def parse(r: _Row) -> Parsed:
        meta = {k: r.rec[k] for k in meta_cols if not _missing(r.rec.get(k))}
        return (r.text(id_cols, required=False), r.text(question_cols),
                [_strip_dollars(r.text(answer_cols))], meta)
    return parse


def _parse_olympiadbench(r: _Row) -> Parsed:
    # final_answer is a list of strings such as ["$\\frac{1}{2}$"]; several answers are joined
    # with ", " (math_equal then compares them as a multiset).
    name, _ = r.column(("final_answer", "answer"))
    finals = [_strip_dollars(a) for a in r.text_list((name,))]
    q = r.text(("question", "problem"))
    context = r.text(("context",), required=False)
    if context:
        q = f"{context}\n\n{q}"
    meta = {k: r.rec[k] for k in ("unit", "answer_type", "is_multiple_answer", "subfield", "subject",
                                  "difficulty", "language") if not _missing(r.rec.get(k))}
    return r.text(("id",), required=False), q, [", ".join(finals)], meta


def _dedup(xs: list[str]) -> list[str]:
    seen, out = set(), []
    for x in xs:
        if x not in seen:
            seen.add(x)
            out.append(x)
    return out


def _simple_qa(id_cols: tuple[str, ...], question_cols: tuple[str, ...],
               answer_cols: tuple[str, ...], alias_cols: tuple[str, ...] = (),
               meta_cols: tuple[str, ...] = ()) -> Callable[[_Row], Parsed]:
    def parse(r: _Row) -> Parsed:
        answers = r.text_list(answer_cols)
        if alias_cols:
            answers += r.text_list(alias_cols, required=False)
        meta = {k: r.rec[k] for k in meta_cols if not _missing(r.rec.get(k))}
        return r.text(id_cols, required=False), r.text(question_cols), _dedup(answers), meta
    return parse


def _parse_gaia(r: _Row) -> Parsed:
    # the GAIA release: "Final answer"; ARPO's evaluation/data/gaia (103 text-only rows): "answer"
    name, _ = r.column(("Final answer", "answer"))
    ans = r.text((name,))
    if ans == "?":
        raise r.error(name, "answer is '?' (GAIA hides test-split answers; "
                            "use the validation split)")
    meta: dict[str, Any] = {}
    if not _missing(r.rec.get("Level")):
        meta["level"] = r.rec["Level"]
    file_name = r.rec.get("file_name")
    meta["file_name"] = file_name if isinstance(file_name, str) else ""
    meta["multimodal"] = bool(meta["file_name"])
    return r.text(("task_id",)), r.text(("Question",)), [ans], meta


def _parse_webwalkerqa(r: _Row) -> Parsed:
    meta: dict[str, Any] = {}
    root = r.text(("root_url", "Root_Url"), required=False)
    if root:
        meta["root_url"] = root
    _, info = r.column(("info", "Info"), required=False)
    if info is not None:
        if isinstance(info, str):
            try:
                info = json.loads(info)
            except json.JSONDecodeError:
                raise r.error("info", "not a JSON object") from None
        if not isinstance(info, dict):
            raise r.error("info", f"expected an object, got {type(info).__name__}")
        meta["info"] = info
    return (r.text(("id",), required=False), r.text(("question", "Question")),
            r.text_list(("answer", "Answer")), meta)


def _xor_decrypt(value: str, key: str) -> str | None:
    """xbench's release encryption: base64 of (utf-8 text XOR the canary key); None if `value`
    is not such a ciphertext (the file was already decrypted)."""
    try:
        data = base64.b64decode(value, validate=True)
        kb = key.encode("utf-8")
        return bytes(b ^ kb[i % len(kb)] for i, b in enumerate(data)).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return None


def _parse_xbench(r: _Row) -> Parsed:
    canary = r.text(("canary",), required=False)
    meta = {k: r.rec[k] for k in ("type",) if not _missing(r.rec.get(k))}
    if not canary:  # plaintext: ARPO's evaluation/data/xbench (question, answer = [str])
        return (r.text(("id",), required=False), r.text(("prompt", "question")),
                _dedup(r.text_list(("answer",))), meta)
    q, a = r.text(("prompt",)), r.text(("answer",))
    q2, a2 = _xor_decrypt(q, canary), _xor_decrypt(a, canary)
    if (q2 is None) != (a2 is None):
        bad = "prompt" if q2 is None else "answer"
        raise r.error(bad, "only one of prompt/answer decrypts with the canary key")
    if q2 is not None:
        q, a = q2.strip(), a2.strip()
    return r.text(("id",), required=False), q, [a], meta


def _parse_hle(r: _Row) -> Parsed:
    image = r.rec.get("image")
    meta = {k: r.rec[k] for k in ("answer_type", "category", "raw_subject")
            if not _missing(r.rec.get(k))}
    # cais/hle carries the image itself; ARPO's text-only hle/top.json a boolean "has_image"
    meta["multimodal"] = (bool(image) and not _missing(image)) or r.rec.get("has_image") is True
    return r.text(("id",)), r.text(("question",)), [r.text(("answer",))], meta


def _parse_arpo_rl(r: _Row) -> Parsed:
    """ARPO's RL training rows (rl_datasets/train_10k.parquet, hard_search_1k.parquet): data_source,
    prompt ([system, user] messages), ability ("math" | "qa"; null in hard_search_1k),
    reward_model {"ground_truth", "style"}, extra_info {"index", "question", "split", ...}.
    The question is extra_info.question (the user turn without ARPO's system prompt)."""
    info, rm = r.rec.get("extra_info"), r.rec.get("reward_model")
    if not isinstance(info, dict):
        raise r.error("extra_info", f"expected an object with 'question', got {type(info).__name__}")
    if not isinstance(rm, dict):
        raise r.error("reward_model", f"expected an object with 'ground_truth', got {type(rm).__name__}")
    q = info.get("question")
    if not isinstance(q, str) or not q.strip():
        raise r.error("extra_info.question", "missing or empty question")
    gt = rm.get("ground_truth")
    answers = [gt] if isinstance(gt, str) else gt if isinstance(gt, list) else None
    answers = [a.strip() for a in answers or [] if isinstance(a, str) and a.strip()]
    if not answers:  # e.g. train_10k row 5274, a construction problem with ground truth " "
        raise SkipRow(r.error("reward_model.ground_truth", f"no answer string (got {gt!r:.60})"))
    meta = {k: r.rec[k] for k in ("data_source", "ability") if isinstance(r.rec.get(k), str)}
    if r.rec.get("ability") == "math":
        answers = [_strip_dollars(answers[0])]
    return None, q.strip(), _dedup(answers), meta


# --------------------------------------------------------------------------------------------
# The registry
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class BenchmarkSpec:
    """How one benchmark maps into Task.

    columns:    the dataset's columns this adapter reads (documentation; alternatives in the parser)
    hf_dataset: where those column names come from
    parse:      _Row -> (raw id or None, question, answers, meta)
    """

    name: str
    kind: str
    tier: str
    hf_dataset: str
    columns: tuple[str, ...]
    parse: Callable[[_Row], Parsed]
    keep: Callable[[dict[str, Any]], bool] | None = None  # rows to read (None: all)


_QA_ANS = ("answer", "Answer", "golden_answers")  # golden_answers: FlashRAG format

BENCHMARKS: dict[str, BenchmarkSpec] = {spec.name: spec for spec in (
    # openai/gsm8k (config "main"): question, answer = worked solution ending "#### <number>".
    BenchmarkSpec("gsm8k", "math", TIERS["gsm8k"], "openai/gsm8k", ("question", "answer"),
                  _parse_gsm8k),
    # HuggingFaceH4/MATH-500: problem, solution, answer, subject, level, unique_id.
    BenchmarkSpec("math500", "math", TIERS["math500"], "HuggingFaceH4/MATH-500",
                  ("problem", "answer", "unique_id", "subject", "level"), _parse_math500),
    # Maxwell-Jia/AIME_2024: ID, Problem, Solution, Answer; HuggingFaceH4/aime_2024: id, problem,
    # solution, answer, url, year.
    BenchmarkSpec("aime24", "math", TIERS["aime24"], "Maxwell-Jia/AIME_2024",
                  ("ID", "Problem", "Answer"),
                  _simple_math(("Problem", "problem"), ("Answer", "answer"), ("ID", "id"))),
    # opencompass/AIME2025 (configs AIME2025-I / -II): question, answer; math-ai/aime25 and
    # yentinglin/aime_2025: id, problem, answer.
    BenchmarkSpec("aime25", "math", TIERS["aime25"], "opencompass/AIME2025", ("question", "answer"),
                  _simple_math(("question", "problem"), ("answer",), ("id", "ID"))),
    # math-ai/amc23: id, question, answer (answer a float such as 27.0 in some mirrors, e.g.
    # FlippyDora/amc23: id, problem, answer, url, question).
    BenchmarkSpec("amc23", "math", TIERS["amc23"], "math-ai/amc23", ("id", "question", "answer"),
                  _simple_math(("question", "problem"), ("answer",), ("id",), ("url",))),
    # Hothan/OlympiadBench, config OE_TO_maths_en_COMP (the paper's "OE-Math"): id, question,
    # solution, final_answer (list), context, is_multiple_answer, unit, answer_type, subfield, ...
    BenchmarkSpec("olympiadbench", "math", TIERS["olympiadbench"],
                  "Hothan/OlympiadBench (OE_TO_maths_en_COMP)", ("id", "question", "final_answer"),
                  _parse_olympiadbench),
    # hotpot_qa (distractor / fullwiki): id, question, answer, type, level, supporting_facts,
    # context (the original release names the id "_id").
    BenchmarkSpec("hotpotqa", "search", TIERS["hotpotqa"], "hotpotqa/hotpot_qa",
                  ("id", "question", "answer", "type", "level"),
                  _simple_qa(("id", "_id"), ("question",), _QA_ANS, (), ("type", "level"))),
    # 2WikiMultihopQA release (and HF mirrors such as framolfese/2WikiMultihopQA): _id, type,
    # question, context, supporting_facts, evidences, answer.
    BenchmarkSpec("2wikimultihopqa", "search", TIERS["2wikimultihopqa"], "2WikiMultihopQA (Ho et al. 2020)",
                  ("_id", "question", "answer", "type"),
                  _simple_qa(("_id", "id"), ("question",), _QA_ANS, (), ("type",))),
    # MuSiQue release (musique_ans_v1.0_dev.jsonl; dgslibisey/MuSiQue): id, paragraphs, question,
    # question_decomposition, answer, answer_aliases, answerable.
    BenchmarkSpec("musique", "search", TIERS["musique"], "MuSiQue (Trivedi et al. 2022)",
                  ("id", "question", "answer", "answer_aliases"),
                  _simple_qa(("id",), ("question",), _QA_ANS, ("answer_aliases",), ("answerable",))),
    # chiayewken/bamboogle: Question, Answer (no id column).
    BenchmarkSpec("bamboogle", "search", TIERS["bamboogle"], "chiayewken/bamboogle",
                  ("Question", "Answer"),
                  _simple_qa(("id",), ("Question", "question"), _QA_ANS)),
    # gaia-benchmark/GAIA (2023_all, validation metadata.jsonl): task_id, Question, Level,
    # Final answer, file_name, file_path, Annotator Metadata.
    BenchmarkSpec("gaia", "search", TIERS["gaia"], "gaia-benchmark/GAIA",
                  ("task_id", "Question", "Level", "Final answer", "file_name"), _parse_gaia),
    # callanwu/WebWalkerQA (split "main"): question, answer, root_url, info {difficulty_level,
    # domain, lang, source_website, golden_path, type}; its README spells them Question, Answer,
    # Root_Url, Info.
    BenchmarkSpec("webwalkerqa", "search", TIERS["webwalkerqa"], "callanwu/WebWalkerQA",
                  ("question", "answer", "root_url", "info"), _parse_webwalkerqa),
    # xbench/DeepSearch (xbench-evals release): id, prompt, type, answer, canary — prompt and
    # answer are base64(XOR with the canary), decrypted here; plaintext files load as they are.
    BenchmarkSpec("xbench-deepsearch", "search", TIERS["xbench-deepsearch"], "xbench/DeepSearch",
                  ("id", "prompt", "answer", "canary"), _parse_xbench),
    # cais/hle: id, question, image, image_preview, answer, answer_type, author_name, rationale,
    # rationale_image, raw_subject, category, canary.
    BenchmarkSpec("hle", "search", TIERS["hle"], "cais/hle",
                  ("id", "question", "answer", "answer_type", "category", "image"), _parse_hle),
)}

# Training sets (paper scale; our reading of E.3: 5k math prompts, 1k knowledge prompts), read by
# the same load_benchmark; never evaluation benchmarks.
TRAINING_SETS: dict[str, BenchmarkSpec] = {spec.name: spec for spec in (
    # dongguanting/ARPO-RL-Reasoning-10K = ARPO rl_datasets/train_10k.parquet: 5,000 "math" + 5,000 "qa" rows.
    BenchmarkSpec("arpo-rl-math", "math", "medium", "dongguanting/ARPO-RL-Reasoning-10K (ability == 'math')",
                  ("ability", "reward_model", "extra_info"), _parse_arpo_rl,
                  keep=lambda rec: rec.get("ability") == "math"),
    BenchmarkSpec("arpo-rl-qa", "search", "medium", "dongguanting/ARPO-RL-Reasoning-10K (ability == 'qa')",
                  ("ability", "reward_model", "extra_info"), _parse_arpo_rl,
                  keep=lambda rec: rec.get("ability") == "qa"),
    # dongguanting/ARPO-RL-DeepSearch-1K = ARPO rl_datasets/hard_search_1k.parquet: 1,071 rows.
    BenchmarkSpec("arpo-deepsearch", "search", "hard", "dongguanting/ARPO-RL-DeepSearch-1K",
                  ("reward_model", "extra_info"), _parse_arpo_rl),
)}

ALIASES: dict[str, str] = {
    "math-500": "math500", "aime2024": "aime24", "aime_2024": "aime24", "aime2025": "aime25",
    "aime_2025": "aime25", "amc2023": "amc23", "oe-math": "olympiadbench", "oe_math": "olympiadbench",
    "olympiad": "olympiadbench", "hotpot_qa": "hotpotqa", "2wiki": "2wikimultihopqa",
    "2wikimqa": "2wikimultihopqa", "xbench": "xbench-deepsearch", "xbench_deepsearch": "xbench-deepsearch",
    "webwalker": "webwalkerqa", "humanitys-last-exam": "hle",
}


def canonical_name(name: str) -> str:
    """The BENCHMARKS / TRAINING_SETS key of a benchmark name or alias ("2wiki" -> "2wikimultihopqa")."""
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    if key not in BENCHMARKS and key not in TRAINING_SETS:
        raise AdapterError("-", f"unknown benchmark {name!r}; known: {', '.join([*BENCHMARKS, *TRAINING_SETS])} "
                                f"(aliases: {', '.join(sorted(ALIASES))})")
    return key


def load_benchmark(name: str, path: str | Path, split: str = "test", limit: int | None = None, *,
                   drop_multimodal: bool = False,
                   extra_meta: Mapping[str, Any] | None = None,
                   skipped: list[str] | None = None) -> list[Task]:
    """Tasks from a local benchmark file (.jsonl / .json / .parquet / .csv) in file order.

    name:            a key of BENCHMARKS or an alias ("oe-math", "2wiki", "xbench", ...)
    split:           recorded as Task.split (and used to pick the list inside a .json object)
    limit:           keep at most this many tasks (after any filtering), None = all
    drop_multimodal: skip rows that need an image or an attached file (HLE `image`, GAIA
                     `file_name`), which a text-only agent cannot use
    extra_meta:      merged into every task's meta, e.g. {"corpus_path": ".../corpus.jsonl"} for the
                     search env
    skipped:         if a list, rows a parser rejects as no task (SkipRow: a training row without
                     an answer) are skipped and their errors appended; else such a row raises

    Raises AdapterError naming file, row and field for a missing column, an empty or mistyped
    value, a malformed row, a duplicate id; also for an unknown benchmark or unreadable file.
    """
    key = canonical_name(name)
    spec = BENCHMARKS.get(key) or TRAINING_SETS[key]
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0 or None, got {limit}")
    p = Path(path)
    tasks: list[Task] = []
    seen: dict[str, int] = {}
    for index, (rec, line) in enumerate(read_records(p, split)):
        if limit is not None and len(tasks) >= limit:
            break
        if not isinstance(rec, dict):
            raise AdapterError(p, f"expected an object, got {type(rec).__name__}", row=index,
                               field="<row>", line=line)
        if spec.keep is not None and not spec.keep(rec):
            continue
        row = _Row(rec, p, index, line)
        try:
            raw_id, question, answers, meta = spec.parse(row)
        except SkipRow as e:
            if skipped is None:
                raise e.error from None
            skipped.append(str(e.error))
            continue
        if drop_multimodal and meta.get("multimodal"):
            continue
        tid = f"{key}-{raw_id if raw_id is not None else index}"
        if tid in seen:
            raise row.error("id", f"duplicate id {tid!r} (first at row {seen[tid]})")
        seen[tid] = index
        meta = {**meta, "row": index, **(dict(extra_meta) if extra_meta else {})}
        tasks.append(Task(id=tid, kind=spec.kind, question=question, answers=answers,
                          tier=spec.tier, split=split, source=key, meta=meta))
    return tasks
