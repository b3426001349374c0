"""Paper-scale data: ARPO-format adapters, pinned HTTPS downloads with sha256 (against a
local HTTP server on 127.0.0.1 serving fixture files), decontamination, the training-set sampling,
and "not run" for the deep-search benchmarks without a web-search key.

Fixtures: tests/fixtures/arpo/ (ARPO's real columns and layout at commit e257337, synthetic rows).
"""

from __future__ import annotations

import functools
import hashlib
import json
import shutil
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pandas as pd
import pytest

from rtpo.data import read_tasks
from rtpo.data.adapters import AdapterError, load_benchmark
from rtpo.data.paper import decontaminate, normalize_question, prepare
from rtpo.envs.base import Task
from rtpo.retrieval.fetch import DownloadError, download

FIX = Path(__file__).parent / "fixtures" / "arpo"
EVAL = {  # config key -> (adapter, path under the ARPO repository)
    "gsm8k": "evaluation/data/gsm8k/test.jsonl", "math500": "evaluation/data/math500/test.jsonl",
    "aime24": "evaluation/data/aime24/test.jsonl", "aime25": "evaluation/data/aime25/test.jsonl",
    "hotpotqa": "evaluation/data/hotpotqa/test.jsonl", "2wiki": "evaluation/data/2wiki/test.jsonl",
    "musique": "evaluation/data/musique/test.jsonl", "bamboogle": "evaluation/data/bamboogle/test.jsonl",
    "gaia": "evaluation/data/gaia/test.jsonl", "webwalkerqa": "evaluation/data/webwalker/test.jsonl",
    "xbench": "evaluation/data/xbench/test.jsonl", "hle": "evaluation/data/hle/top.json",
}
MATH = ("gsm8k", "math500", "aime24", "aime25")


def sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    """A copy of the fixture tree laid out like ARPO's repository (parquet training files)."""
    root = tmp_path_factory.mktemp("arpo-repo")
    shutil.copytree(FIX / "evaluation", root / "evaluation")
    (root / "ARPO" / "rl_datasets").mkdir(parents=True)
    for name in ("train_10k", "hard_search_1k"):
        pd.DataFrame(json.loads((FIX / f"{name}.json").read_text())).to_parquet(
            root / "ARPO" / "rl_datasets" / f"{name}.parquet")
    return root


@pytest.fixture(scope="module")
def server(repo):
    """A plain HTTP server on 127.0.0.1 serving `repo`; yields (base URL, request log)."""
    log: list[str] = []

    class H(SimpleHTTPRequestHandler):
        def log_message(self, *a):
            log.append(self.path)

    srv = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(H, directory=str(repo)))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}", log
    srv.shutdown()


def data_cfg(repo: Path, base: str, **search) -> dict:
    """The paper config's data section, pointed at the local server, sha256s of the fixtures."""
    def entry(path, **kw):
        return {"source": "arpo", "path": path, "sha256": sha(repo / path), **kw}

    train = "ARPO/rl_datasets/train_10k.parquet"
    return {
        "seed": 7, "sources": {"arpo": base},
        "math": {"n_train": 5000, "n_eval": 0, "train": entry(train, benchmark="arpo-rl-math"),
                 "benchmarks": {k: entry(EVAL[k]) for k in MATH}},
        "search": {"n_train": 2, "n_eval": 0, "train": entry(train, benchmark="arpo-rl-qa"),
                   "benchmarks": {k: entry(v) for k, v in EVAL.items() if k not in MATH},
                   "web": {"kind": "serpapi", "key_env": "RTPO_TEST_SERPAPI_KEY",
                           "benchmarks": ["gaia", "webwalkerqa", "xbench", "hle"]}, **search},
    }


# ------------------------------------------------------------------------------------------------
# adapters on ARPO's real columns
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(EVAL))
def test_arpo_eval_files_load_with_their_real_columns(name):
    tasks = load_benchmark(name, FIX / EVAL[name], drop_multimodal=True)
    assert tasks and all(t.question.strip() and t.answers and all(a.strip() for a in t.answers) for t in tasks)
    assert {t.kind for t in tasks} == {"math" if name in MATH else "search"}
    assert len({t.id for t in tasks}) == len(tasks)


def test_arpo_eval_fields():
    gsm = load_benchmark("gsm8k", FIX / EVAL["gsm8k"])
    assert [t.answers for t in gsm] == [["12"], ["2000"], ["7.5"]]  # the "#### " line, commas dropped
    gaia = load_benchmark("gaia", FIX / EVAL["gaia"])
    assert gaia[1].answers == ["Moor"] and gaia[1].meta["level"] == 2 and not gaia[1].meta["multimodal"]
    assert gaia[0].id == "gaia-c61d22de-5f6c-4958-a7f6-5e9707bd3466"
    hle = load_benchmark("hle", FIX / EVAL["hle"], drop_multimodal=True)  # JSON Lines under .json
    assert [t.answers[0] for t in hle] == ["7", "B"] and hle[0].meta["category"] == "Math"
    assert len(load_benchmark("hle", FIX / EVAL["hle"])) == 3  # has_image rows only go with drop_multimodal
    assert load_benchmark("xbench", FIX / EVAL["xbench"])[1].answers == ["卢门", "Lumen"]
    assert load_benchmark("2wiki", FIX / EVAL["2wiki"])[2].answers == ["Corvia", "Republic of Corvia"]
    assert load_benchmark("aime25", FIX / EVAL["aime25"])[0].answers == ["24"]  # an int answer
    assert load_benchmark("math500", FIX / EVAL["math500"])[0].answers == ["\\frac{5}{6}"]


def test_arpo_training_rows(repo):
    path = repo / "ARPO" / "rl_datasets" / "train_10k.parquet"
    skipped: list[str] = []
    math = load_benchmark("arpo-rl-math", path, split="train", skipped=skipped)
    qa = load_benchmark("arpo-rl-qa", path, split="train")
    assert [t.kind for t in math] == ["math"] * 5 and [t.kind for t in qa] == ["search"] * 4
    assert math[0].question == "Compute $3 + 4 \\cdot 5$." and math[0].answers == ["23"]
    assert [t.answers for t in math if t.meta["row"] == 4] == [["32"]]  # $...$ stripped
    assert len(skipped) == 1 and "row 5" in skipped[0] and "reward_model.ground_truth" in skipped[0]
    with pytest.raises(AdapterError, match=r"row 5.*reward_model.ground_truth"):
        load_benchmark("arpo-rl-math", path)  # without a `skipped` list the row is an error
    hard = load_benchmark("arpo-deepsearch", repo / "ARPO" / "rl_datasets" / "hard_search_1k.parquet")
    assert len(hard) == 3 and hard[2].answers == ["Vessel River"]


# ------------------------------------------------------------------------------------------------
# pinned downloads
# ------------------------------------------------------------------------------------------------

def test_download_checks_sha256(repo, server, tmp_path):
    base, _ = server
    src = repo / EVAL["gaia"]
    dest = download(f"{base}/{EVAL['gaia']}", tmp_path / "gaia.jsonl", sha(src))
    assert dest.read_bytes() == src.read_bytes()
    rec = json.loads((tmp_path / "gaia.jsonl.source.json").read_text())
    assert rec["sha256"] == sha(src) and rec["url"].endswith(EVAL["gaia"])
    with pytest.raises(DownloadError, match=r"sha256 mismatch: expected 0{64}, got " + sha(src)):
        download(f"{base}/{EVAL['gaia']}", tmp_path / "bad.jsonl", "0" * 64)
    assert not (tmp_path / "bad.jsonl").exists() and not list(tmp_path.glob(".bad*"))  # nothing kept
    with pytest.raises(DownloadError, match="HTTP 404"):
        download(f"{base}/evaluation/data/nope.jsonl", tmp_path / "x.jsonl", "0" * 64, retries=0)
    with pytest.raises(DownloadError, match="only https"):
        download("http://example.org/x.jsonl", tmp_path / "y.jsonl")


def test_prepare_end_to_end(repo, server, tmp_path, monkeypatch):
    """Both tasks from the local server: sha256-checked downloads, decontamination report, the
    seeded qa sample, and the deep-search benchmarks "not run" without a key."""
    base, log = server
    monkeypatch.delenv("RTPO_TEST_SERPAPI_KEY", raising=False)
    d = data_cfg(repo, base)
    out = tmp_path / "results" / "data"
    prepare("math", d["math"], out / "math", data=d)
    train = [json.loads(x) for x in (out / "math" / "train.jsonl").read_text().splitlines()]
    # rows 0, 4, 9 (row 2 = aime24 verbatim, row 7 = math500 n-gram, row 5 has no answer)
    assert [t["meta"]["row"] for t in train] == [0, 4, 9]
    rep = json.loads((out / "math" / "decontamination.json").read_text())
    assert rep["candidates"] == 5 and rep["dropped"] == 2 and rep["kept"] == 3
    assert rep["benchmarks"]["aime24"] | {"examples": None} == {
        "eval_questions": 3, "candidates": 5, "dropped": 1, "exact": 1, "ngram": 0, "examples": None}
    assert rep["benchmarks"]["math500"]["ngram"] == 1 and rep["benchmarks"]["hotpotqa"]["dropped"] == 0
    assert "math500" in (out / "math" / "decontamination.md").read_text()
    evals = [json.loads(x) for x in (out / "math" / "eval.jsonl").read_text().splitlines()]
    assert sorted({t["source"] for t in evals}) == ["aime24", "aime25", "gsm8k", "math500"] and len(evals) == 12
    src = json.loads((out / "math" / "sources.json").read_text())
    assert src["aime24"] == {"url": f"{base}/{EVAL['aime24']}", "sha256": sha(repo / EVAL["aime24"]),
                             "pinned": True, "tasks": 3}

    fetched = len(log)
    prepare("search", d["search"], out / "search", data=d)
    assert len(log) == fetched  # every file was already under results/data/raw (sha256 matched)
    rep = json.loads((out / "search" / "decontamination.json").read_text())
    assert rep["benchmarks"]["hotpotqa"]["exact"] == 1  # row 3: case, spacing and punctuation only
    train = [json.loads(x) for x in (out / "search" / "train.jsonl").read_text().splitlines()]
    assert len(train) == 2 and rep["kept"] == 3 and all(t["kind"] == "search" for t in train)
    again = tmp_path / "again"
    prepare("search", d["search"], again, data=d)
    assert (again / "train.jsonl").read_text() == (out / "search" / "train.jsonl").read_text()  # seeded
    not_run = json.loads((out / "search" / "not_run.json").read_text())["benchmarks"]
    assert sorted(not_run) == ["gaia", "hle", "webwalkerqa", "xbench-deepsearch"]
    assert all("RTPO_TEST_SERPAPI_KEY is not set" in why for why in not_run.values())
    evals = [json.loads(x) for x in (out / "search" / "eval.jsonl").read_text().splitlines()]
    assert sorted({t["source"] for t in evals}) == ["2wikimultihopqa", "bamboogle", "hotpotqa", "musique"]

    monkeypatch.setenv("RTPO_TEST_SERPAPI_KEY", "k")
    prepare("search", d["search"], tmp_path / "keyed", data=d)
    assert json.loads((tmp_path / "keyed" / "not_run.json").read_text())["benchmarks"] == {}
    evals = [json.loads(x) for x in (tmp_path / "keyed" / "eval.jsonl").read_text().splitlines()]
    web = [t for t in evals if t["source"] in ("gaia", "hle", "webwalkerqa", "xbench-deepsearch")]
    assert len(web) == 11 and all(t["meta"]["retriever"]["kind"] == "serpapi" for t in web)  # HLE: 2 text-only
    # every row the adapters wrote passes the typed row schema the jobs check at load;
    # search rows need their backend (data.search.retriever, which this data section leaves out)
    for split in ("train", "eval"):
        assert read_tasks(out / "math" / f"{split}.jsonl", "math")
    with pytest.raises(ValueError, match=r"train.jsonl:1: field 'meta': expected one of 'retriever', 'corpus_path'"):
        read_tasks(out / "search" / "train.jsonl", "search")
    d = data_cfg(repo, base, retriever={"kind": "http", "url": "http://127.0.0.1:9", "timeout_s": 5})
    prepare("search", d["search"], tmp_path / "served", data=d)
    for split in ("train", "eval"):
        assert read_tasks(tmp_path / "served" / f"{split}.jsonl", "search")


def test_prepare_rejects_a_changed_source(repo, server, tmp_path):
    base, _ = server
    d = data_cfg(repo, base)
    d["math"]["benchmarks"]["aime24"]["sha256"] = "f" * 64
    with pytest.raises(DownloadError, match=r"aime24/test.jsonl: sha256 mismatch: expected f{64}"):
        prepare("math", d["math"], tmp_path / "math", data=d)


# ------------------------------------------------------------------------------------------------
# decontamination
# ------------------------------------------------------------------------------------------------

def _task(i, q):
    return Task(id=f"t{i}", kind="search", question=q, answers=["x"])


def test_normalisation():
    assert normalize_question("  Which RIVER, flows…  through\tLumen?! ") == "which river flows through lumen"
    assert normalize_question("Ｆｕｌｌ－width") == "full width"  # NFKC


def test_planted_duplicates_are_dropped_and_counted():
    evals = {"hotpotqa": ["Which river flows through the capital of Corvia?", "Who built the Glass Tower?"],
             "bamboogle": ["Who wrote The Quiet Orchard?"]}
    long_eval = ("the lanterns of lumen are hung in rows of seven and every row holds two more lanterns "
                 "than the one before it so how many lanterns hang in the tenth row")
    evals["math500"] = [long_eval]
    tasks = [_task(0, "Which river flows through the capital of Corvia?"),         # verbatim
             _task(1, "which   RIVER flows through the capital of corvia"),        # case, spacing, punctuation
             _task(2, "Who painted the Glass Tower?"),                             # different question
             _task(3, "Note: " + long_eval.upper() + " Answer in words."),         # long n-gram overlap
             _task(4, "How many lanterns hang in the tenth row?")]                 # short shared phrase only
    kept, rep = decontaminate(tasks, evals, ngram=13)
    assert [t.id for t in kept] == ["t2", "t4"]
    assert rep["benchmarks"]["hotpotqa"] == {
        "eval_questions": 2, "candidates": 5, "dropped": 2, "exact": 2, "ngram": 0,
        "examples": [{"id": "t0", "how": "exact", "question": tasks[0].question},
                     {"id": "t1", "how": "exact", "question": tasks[1].question}]}
    assert rep["benchmarks"]["math500"]["ngram"] == 1 and rep["benchmarks"]["bamboogle"]["dropped"] == 0
    assert (rep["candidates"], rep["dropped"], rep["kept"]) == (5, 3, 2)


# ------------------------------------------------------------------------------------------------
# "not run" in the tables and the claim ledger
# ------------------------------------------------------------------------------------------------

def test_not_run_benchmarks_are_marked_in_tables_and_ledger(tmp_path):
    """results/data/search/not_run.json (what prepare writes without a web-search key) -> a 'not run'
    row in every table with benchmark rows for search, a note why, and the ledger says so."""
    from rtpo.report.ledger import write_ledger
    from rtpo.report.load import load_results
    from rtpo.report.tables import build_tables
    from tests.report_fixture import fixture_config, make_results_tree

    cfg = fixture_config(seeds=[0, 1], **{"ablations.seeds": [0, 1]})
    make_results_tree(tmp_path, cfg, theory=False)
    why = "no web-search API key: environment variable SERPAPI_API_KEY is not set"
    (tmp_path / "results" / "data" / "search").mkdir(parents=True, exist_ok=True)
    src = tmp_path / "results" / "data" / "search" / "not_run.json"
    src.write_text(json.dumps({"task": "search", "benchmarks": {"gaia": why, "hle": why}}))
    res = load_results(tmp_path / "results", cfg)
    assert res.not_run == {"search": {"gaia": f"{why} ({src})", "hle": f"{why} ({src})"}}  # the reason names its file
    t1 = next(t for t in build_tables(res) if t.name == "table01_main")
    marked = t1.display[t1.display["benchmark"].isin(["gaia", "hle"])]
    assert len(marked) == 2 and set(marked["task"]) == {"search"}
    assert all(v == "not run" for col in marked.columns if col not in ("task", "benchmark") for v in marked[col])
    assert any("not run on search: gaia, hle" in n and why in n for n in t1.notes)
    assert not t1.data["benchmark"].isin(["gaia", "hle"]).any()  # no numbers for them
    md = (write_ledger(res, tmp_path / "tables")[1]).read_text()
    assert f"Not run, so no claim is scored on them: gaia (search: {why} ({src})); hle (search: {why} ({src}))." in md
    from rtpo.report.cli import run_report   # what `rtpo report tables` writes carries the rows too

    run_report("tables", tmp_path / "results", cfg, tmp_path / "cli_tables", tmp_path / "figs")
    written = (tmp_path / "cli_tables" / "table01_main.md").read_text()
    assert "not run" in written and "gaia" in written
    clean = load_results(tmp_path / "results", cfg)
    (tmp_path / "results" / "data" / "search" / "not_run.json").unlink()
    assert load_results(tmp_path / "results", cfg).not_run == {} and clean.not_run


def test_benchmarks_an_evaluation_left_out_are_marked_not_run(tmp_path):
    """An eval JSON's own `not_run` (its web-search probe failed at evaluation time: rtpo.evaluate) reaches
    the report as the data job's not_run.json does: a 'not run' row and a note naming the reason and the
    eval JSON, never a number."""
    from rtpo.report.load import load_results
    from rtpo.report.tables import build_tables
    from tests.report_fixture import fixture_config, make_results_tree

    cfg = fixture_config(seeds=[0, 1], **{"ablations.seeds": [0, 1]})
    make_results_tree(tmp_path, cfg, theory=False)
    why = "web search unreachable from node7: the probe query 'Wikipedia' failed"
    from rtpo.report.load import report_keys

    evals = sorted({Path(k.eval_file(str(tmp_path / "results"))) for k in report_keys(cfg) if k.task == "search"})
    assert evals and all(p.exists() for p in evals)
    for p in evals:
        d = json.loads(p.read_text())
        d["not_run"] = {"gaia": why}
        p.write_text(json.dumps(d))
    res = load_results(tmp_path / "results", cfg)
    assert set(res.not_run) == {"search"} and res.not_run["search"]["gaia"].startswith(f"{why} (")
    assert res.not_run["search"]["gaia"].endswith(".json)")  # the eval JSON that said so
    t1 = next(t for t in build_tables(res) if t.name == "table01_main")
    marked = t1.display[t1.display["benchmark"].isin(["gaia"])]
    assert len(marked) == 1 and set(marked["task"]) == {"search"}
    assert any("not run on search: gaia" in n and why in n for n in t1.notes)
