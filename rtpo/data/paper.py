"""Paper-scale data (`rtpo data` when `data.<task>.benchmarks` is set): the training set, the
evaluation benchmarks from pinned sources, decontamination, and the search backend of every task.

Training sets (our reading of paper E.3: "80k mathematical-reasoning rollouts or 16k
knowledge-reasoning rollouts, 16 rollouts per prompt": 5,000 math and 1,000 knowledge prompts).
E.3 does not name the prompts; we take ARPO's RL mix, whose math half has exactly 5,000 rows:
  math    the `ability == "math"` rows of ARPO's rl_datasets/train_10k.parquet (hub:
          dongguanting/ARPO-RL-Reasoning-10K); one row without an answer is skipped
  search  1,000 prompts, a seeded sample (data.seed) of the same file's `ability == "qa"` half; or,
          with `data.search.train` naming it, of rl_datasets/hard_search_1k.parquet (1,071 rows,
          hub: dongguanting/ARPO-RL-DeepSearch-1K)
A pool larger than n_train is sampled with random.Random(f"rtpo-train-{task}-{seed}") and kept in
file order; a smaller one is taken whole. No evaluation benchmark is a training set.

Sources. An entry is {source, path, sha256} (a file under `data.sources[source]`, e.g. ARPO's
repository at a fixed commit on raw.githubusercontent.com), {url, sha256}, or {hf_id, config?,
split, revision?} (the hub, through `datasets`; for AMC23 and OlympiadBench, which ARPO does not
bundle; pinned to a commit by `python -m rtpo.data.pins` on a login node, a warning until then). URL downloads go through rtpo.retrieval.fetch: HTTPS only, sha256 checked, a mismatch
is an error. Files land once under results/data/raw/ (shared by the tasks) with a
`<file>.source.json` record; `<out>/sources.json` lists what each benchmark was read from.

Decontamination. Every training question is compared with every evaluation question of every
benchmark of the config (all tasks, also those marked "not run"): it is dropped when its
normalised text (NFKC, case-folded, punctuation -> space, whitespace collapsed) equals an
evaluation question's, or when the two share long word n-grams (`decontaminate.ngram`, 13 words as
in GPT-3's contamination study; CJK characters count as words) covering at least
`decontaminate.min_overlap` (0.2) of the shorter question's n-grams, boilerplate n-grams excluded
(Decontaminator). `<out>/decontamination.json`
and `.md` give per benchmark: its questions, the training candidates checked, and how many were
dropped by exact match and by n-gram, with examples.

Search backends. Training and QA tasks carry meta "retriever" = `data.search.retriever` (paths made
absolute): at paper scale the wiki-18 BM25 index behind a per-node `/retrieve` server. The
deep-search benchmarks listed in `data.search.web.benchmarks` carry the web-search backend
instead; without its API key they are left out of eval.jsonl and listed in `<out>/not_run.json`
with the reason, so the tables and the claim ledger say "not run" rather than scoring them
against Wikipedia.
"""

from __future__ import annotations

import json
import random
import re
import sys
import unicodedata
from collections import defaultdict
from pathlib import Path
from typing import Any

from rtpo.data.adapters import canonical_name, load_benchmark
from rtpo.envs.base import Task

__all__ = ["prepare", "fetch", "normalize_question", "Decontaminator", "decontaminate", "write_report",
           "DEFAULT_NGRAM"]

DEFAULT_NGRAM = 13


def _log(msg: str) -> None:
    print(f"rtpo data: {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# Sources
# --------------------------------------------------------------------------------------------

def _url_of(entry: dict[str, Any], sources: dict[str, str], name: str) -> str | None:
    if entry.get("url"):
        return str(entry["url"])
    if entry.get("path"):
        src = entry.get("source", "arpo")
        if src not in sources:
            raise ValueError(f"benchmark {name!r}: source {src!r} is not in data.sources "
                             f"(known: {sorted(sources) or 'none'})")
        return f"{sources[src].rstrip('/')}/{entry['path'].lstrip('/')}"
    return None


def _hf_download(entry: dict[str, Any], dest: Path) -> Path:
    if dest.exists():
        return dest
    try:
        import datasets
    except ImportError as e:  # the GPU environment installs it with verl
        raise FileNotFoundError(f"{dest} is missing and the `datasets` package is not installed to download "
                                f"{entry['hf_id']}") from e
    dest.parent.mkdir(parents=True, exist_ok=True)
    ds = datasets.load_dataset(entry["hf_id"], entry.get("config"), split=entry["split"],
                               revision=entry.get("revision"))
    tmp = dest.with_name(f".{dest.name}.tmp")
    ds.to_parquet(str(tmp))
    tmp.replace(dest)
    return dest


def fetch(name: str, entry: dict[str, Any], raw: Path, sources: dict[str, str]) -> tuple[Path, dict[str, Any]]:
    """The local file of one benchmark / training entry (downloaded once) and where it came from."""
    from rtpo.retrieval.fetch import download, sha256_of

    url = _url_of(entry, sources, name)
    if url is not None:
        # results/data/raw/<source>/<path>: one copy of a file several entries read (train_10k)
        rel = Path(entry.get("source", "url")) / (entry.get("path") or Path(url.split("?")[0]).name)
        dest = download(url, raw / rel, entry.get("sha256"), log=_log)
        return dest, {"url": url, "sha256": sha256_of(dest), "pinned": bool(entry.get("sha256"))}
    if entry.get("hf_id"):
        if not entry.get("revision"):  # read at the hub's main: not reproducible until pinned (rtpo.data.pins)
            _log(f"WARNING: {name}: {entry['hf_id']} is not pinned (no revision): reading the hub's main; pin it on "
                 "the login node with `python -m rtpo.data.pins --config <config> --write` (docs/data.md)")
        parts = [entry["hf_id"].replace("/", "__"), entry.get("config") or "default", entry.get("revision") or "main"]
        dest = _hf_download(entry, raw / "hf" / "+".join(parts) / f"{entry['split']}.parquet")
        return dest, {"hf_id": entry["hf_id"], "config": entry.get("config"), "split": entry["split"],
                      "revision": entry.get("revision"), "sha256": sha256_of(dest), "pinned": False}
    raise ValueError(f"benchmark {name!r}: needs 'source' + 'path', 'url', or 'hf_id' + 'split' (got {sorted(entry)})")


# --------------------------------------------------------------------------------------------
# Decontamination
# --------------------------------------------------------------------------------------------

_PUNCT = re.compile(r"[^\w\s]|_", re.UNICODE)
_WORD = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]|[^\W_]+", re.UNICODE)


def normalize_question(q: str) -> str:
    """NFKC, case-folded, punctuation and symbols -> space, whitespace collapsed."""
    q = unicodedata.normalize("NFKC", q).casefold()
    q = "".join(" " if unicodedata.category(c)[0] in "PS" else c for c in q)
    return " ".join(_PUNCT.sub(" ", q).split())


def _words(normalized: str) -> list[str]:
    return _WORD.findall(normalized)


def _grams(words: list[str], n: int) -> set[tuple[str, ...]]:
    return {tuple(words[i:i + n]) for i in range(len(words) - n + 1)}


class Decontaminator:
    """Matches of training questions against benchmark questions (see the module docstring).

    exact:  the normalised texts are equal.
    ngram:  the two share informative word n-grams (n = `ngram`) covering at least `min_overlap` of
            the shorter question's n-grams. An n-gram is informative unless it is boilerplate: in
            two or more distinct evaluation questions, or in `common_train` or more training
            questions ("... where m and n are relatively prime positive integers. Find m+n",
            "Enter your answer in the form (r, theta) ..."). Measured on ARPO's math half against
            MATH-500 / AIME: every pair at >= 0.2 is the same problem (reworded or with other
            numbers), every pair below shares only phrasing.
    """

    def __init__(self, evals: dict[str, list[str]], train: list[str], ngram: int = DEFAULT_NGRAM,
                 min_overlap: float = 0.2, common_train: int = 10):
        self.n, self.min_overlap = int(ngram), float(min_overlap)
        self.sizes = {b: len(qs) for b, qs in evals.items()}
        self.exact: dict[str, set[str]] = defaultdict(set)
        self._eval_benches: list[set[str]] = []    # distinct normalised eval question -> benchmarks
        self._eval_grams: list[int] = []           # its n-gram count
        ids: dict[str, int] = {}
        grams: dict[tuple[str, ...], set[int]] = defaultdict(set)
        for bench, qs in evals.items():
            for q in qs:
                norm = normalize_question(q)
                self.exact[norm].add(bench)
                if norm not in ids:
                    ids[norm] = len(ids)
                    g = _grams(_words(norm), self.n)
                    self._eval_benches.append(set())
                    self._eval_grams.append(len(g))
                    for x in g:
                        grams[x].add(ids[norm])
                self._eval_benches[ids[norm]].add(bench)
        train_count: dict[tuple[str, ...], int] = defaultdict(int)
        for norm in {normalize_question(q) for q in train}:
            for x in _grams(_words(norm), self.n):
                if x in grams:
                    train_count[x] += 1
        self._informative = {x: next(iter(e)) for x, e in grams.items()
                             if len(e) == 1 and train_count[x] < common_train}

    def matches(self, question: str) -> dict[str, str]:
        """{benchmark: "exact" | "ngram"} for every benchmark the question collides with."""
        norm = normalize_question(question)
        out = {b: "exact" for b in self.exact.get(norm, ())}
        g = _grams(_words(norm), self.n)
        shared: dict[int, int] = defaultdict(int)
        for x in g:
            e = self._informative.get(x)
            if e is not None:
                shared[e] += 1
        for e, k in shared.items():
            if k >= self.min_overlap * min(len(g), self._eval_grams[e]):
                for b in self._eval_benches[e]:
                    out.setdefault(b, "ngram")
        return out


def decontaminate(tasks: list[Task], evals: dict[str, list[str]], ngram: int = DEFAULT_NGRAM,
                  min_overlap: float = 0.2, examples: int = 5) -> tuple[list[Task], dict[str, Any]]:
    """(the tasks that collide with no benchmark, the report)."""
    dec = Decontaminator(evals, [t.question for t in tasks], ngram, min_overlap)
    kept: list[Task] = []
    per = {b: {"eval_questions": n, "candidates": len(tasks), "dropped": 0, "exact": 0, "ngram": 0,
               "examples": []} for b, n in sorted(dec.sizes.items())}
    for t in tasks:
        m = dec.matches(t.question)
        if not m:
            kept.append(t)
            continue
        for b, how in m.items():
            r = per[b]
            r["dropped"] += 1
            r[how] += 1
            if len(r["examples"]) < examples:
                r["examples"].append({"id": t.id, "how": how, "question": t.question[:200]})
    report = {"ngram": dec.n, "min_overlap": dec.min_overlap, "candidates": len(tasks), "kept": len(kept),
              "dropped": len(tasks) - len(kept), "benchmarks": per}
    return kept, report


def write_report(report: dict[str, Any], out: Path) -> None:
    """decontamination.json and a Markdown table decontamination.md under `out`."""
    (out / "decontamination.json").write_text(json.dumps(report, indent=1, ensure_ascii=False))
    lines = [f"# Decontamination of the {report['task']} training set ({report['train']})", "",
             f"A training question is dropped when its normalised text equals an evaluation question's, or "
             f"when their informative {report['ngram']}-word n-grams overlap by >= {report['min_overlap']:.0%} of "
             f"the shorter one's (rtpo/data/paper.py). "
             f"{report['candidates']} candidates, {report['dropped']} dropped, {report['kept']} kept"
             + (f", then {report['sampled']} sampled (seed {report['seed']})" if "sampled" in report else "") + ".",
             "", "| benchmark | eval questions | candidates | dropped | exact | n-gram |", "|---|---|---|---|---|---|"]
    for b, r in report["benchmarks"].items():
        lines.append(f"| {b} | {r['eval_questions']} | {r['candidates']} | {r['dropped']} | {r['exact']} | {r['ngram']} |")
    if report.get("skipped"):
        lines += ["", f"Rows skipped as no task ({len(report['skipped'])}):", ""]
        lines += [f"- {s}" for s in report["skipped"][:20]]
    ex = [(b, e) for b, r in report["benchmarks"].items() for e in r["examples"]]
    if ex:
        lines += ["", "Examples:", ""] + [f"- {b} ({e['how']}): `{e['id']}` {e['question'][:120]!r}" for b, e in ex]
    (out / "decontamination.md").write_text("\n".join(lines) + "\n")


# --------------------------------------------------------------------------------------------
# prepare
# --------------------------------------------------------------------------------------------

def _absolute(spec: dict[str, Any] | None) -> dict[str, Any] | None:
    if not spec:
        return None
    spec = dict(spec)
    for k in ("index", "corpus", "cache"):
        if spec.get(k):
            spec[k] = str(Path(spec[k]).resolve())
    return spec


def _web_spec(web: dict[str, Any]) -> dict[str, Any]:
    return _absolute({k: v for k, v in web.items() if k != "benchmarks"})


def _sample(tasks: list[Task], n: int, task: str, seed: int) -> list[Task]:
    if n <= 0 or len(tasks) <= n:
        return tasks
    idx = sorted(random.Random(f"rtpo-train-{task}-{seed}").sample(range(len(tasks)), n))
    return [tasks[i] for i in idx]


def prepare(task: str, dcfg: dict[str, Any], out: str | Path, data: dict[str, Any] | None = None) -> dict[str, str]:
    """Write train.jsonl, eval.jsonl, experts.jsonl (empty: the base model is an instruct LM),
    decontamination.{json,md}, sources.json and not_run.json under `out`; returns {name: path}.

    dcfg: data.<task> of the config; data: the whole `data` section (sources, seed, and the other
    tasks' benchmarks for decontamination; default: this task alone)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    data = data or {task: dcfg}
    sources = dict(data.get("sources") or {})
    seed = int(data.get("seed", 0))
    raw = out.parent / "raw"
    provenance: dict[str, Any] = {}

    def get(name: str, entry: dict[str, Any]) -> Path:
        path, prov = fetch(name, entry, raw, sources)
        provenance[name] = prov
        return path

    # the search backend of each task (None: the env's default, a corpus_path / embedded corpus)
    retriever = _absolute(dcfg.get("retriever"))
    corpus = dcfg.get("corpus")
    if retriever is None and corpus:
        retriever = {"kind": "bm25", "corpus": str(Path(corpus["path"] if isinstance(corpus, dict) else corpus).resolve())}
    base_meta = {"retriever": retriever} if retriever else None
    web = dcfg.get("web")
    web_benches = {canonical_name(b) for b in (web or {}).get("benchmarks", [])}
    web_ok, web_why = (False, "")
    if web:
        from rtpo.retrieval.web import web_available
        web_ok, web_why = web_available(web)

    evals: list[Task] = []
    not_run: dict[str, str] = {}
    for name, entry in dcfg["benchmarks"].items():
        bench = canonical_name(entry.get("benchmark", name))
        path = get(name, entry)
        meta = base_meta
        if bench in web_benches:
            if not web_ok:
                not_run[bench] = web_why
                _log(f"{bench}: not run ({web_why})")
                continue
            meta = {"retriever": _web_spec(web)}
        got = load_benchmark(entry.get("benchmark", name), path, split="eval", drop_multimodal=True,
                             extra_meta=meta, limit=dcfg.get("n_eval") or None)
        provenance[name]["tasks"] = len(got)
        evals += got

    # every evaluation question of the config (all tasks, not-run benchmarks included)
    eval_questions: dict[str, list[str]] = {}
    for t, tcfg in data.items():
        if not isinstance(tcfg, dict) or "benchmarks" not in tcfg:
            continue
        for name, entry in tcfg["benchmarks"].items():
            bench = canonical_name(entry.get("benchmark", name))
            path = fetch(name, entry, raw, sources)[0]
            eval_questions[bench] = [x.question for x in load_benchmark(entry.get("benchmark", name), path)]

    tr = dcfg["train"]
    skipped: list[str] = []
    pool = load_benchmark(tr["benchmark"], get(f"train:{tr['benchmark']}", tr), split="train",
                          drop_multimodal=True, extra_meta=base_meta, skipped=skipped)
    dc = dcfg.get("decontaminate") or {}
    kept, report = decontaminate(pool, eval_questions, int(dc.get("ngram", DEFAULT_NGRAM)),
                                 float(dc.get("min_overlap", 0.2)))
    train = _sample(kept, int(dcfg.get("n_train") or 0), task, seed)
    report.update(task=task, train=tr["benchmark"], skipped=skipped, seed=seed)
    if len(train) < len(kept):
        report["sampled"] = len(train)
    _log(f"{task}: {len(pool)} training candidates, {report['dropped']} dropped as contaminated, "
         f"{len(train)} kept; {len(evals)} eval tasks; not run: {sorted(not_run) or 'none'}")

    files = {"train": out / "train.jsonl", "eval": out / "eval.jsonl", "experts": out / "experts.jsonl"}
    for key, tasks in (("train", train), ("eval", evals)):
        files[key].write_text("".join(json.dumps(t.to_dict(), ensure_ascii=False) + "\n" for t in tasks))
    files["experts"].write_text("")  # no scripted experts at paper scale: the base model is an instruct LM
    write_report(report, out)
    files["decontamination"] = out / "decontamination.json"
    files["sources"] = out / "sources.json"
    files["sources"].write_text(json.dumps(provenance, indent=1, sort_keys=True))
    files["not_run"] = out / "not_run.json"
    files["not_run"].write_text(json.dumps({"task": task, "benchmarks": not_run}, indent=1, sort_keys=True))
    return {k: str(v) for k, v in files.items()}
