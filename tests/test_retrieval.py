"""Retrieval at paper scale: the saved BM25 index, the `/retrieve` server (Search-R1's
protocol) and its HTTP client, the persistent cache, and failures during a rollout.

The slow tests share one synthetic corpus of 100,000 passages, indexed once per module both in
process (rtpo.retrieval.bm25.BM25Index) and on disk (rtpo.retrieval.index), and one server process.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from rtpo.engine.base import Completion, SamplingParams
from rtpo.envs import make_env
from rtpo.envs.base import Task
from rtpo.retrieval.bm25 import BM25Index, tokenize
from rtpo.retrieval.client import CachedRetriever, HttpRetriever, health
from rtpo.retrieval.core import ResultCache, RetrievalError, bm25_scores, top_k_order
from rtpo.retrieval.index import DiskBM25Index, build_index
from rtpo.retrieval.server import RetrievalServer
from rtpo.rollout import Roller, Start
from rtpo.tools.search_tool import SEARCH_FAILED, retriever_for
from tests.helpers import tiny

N_PASSAGES = 100_000


def synthetic_corpus(n: int, seed: int = 0) -> list[dict]:
    """n passages over a Zipf-distributed vocabulary of 30,000 made-up words (many score ties)."""
    rng = np.random.default_rng(seed)
    syll = ["ka", "lo", "mi", "ne", "su", "ta", "ri", "vo", "ze", "pa", "du", "fe", "go", "hi", "ju"]
    vocab = np.array(["".join(rng.choice(syll, size=rng.integers(2, 5))) + str(i % 7) for i in range(30_000)])
    p = 1.0 / np.arange(1, len(vocab) + 1) ** 1.05
    p /= p.sum()
    words = vocab[rng.choice(len(vocab), size=(n, 24), p=p)]
    return [{"id": f"p{i:07d}", "title": " ".join(words[i, :2]), "text": " ".join(words[i, 2:])} for i in range(n)]


def queries(passages: list[dict], n: int, seed: int = 1) -> list[str]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        words = passages[int(rng.integers(len(passages)))]["text"].split()
        out.append(" ".join(rng.choice(words, size=int(rng.integers(1, 5)), replace=False)))
    return out + ["zzzunknownword", "the of and"]  # no hit; stopwords only


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(index: Path, tmp: Path, port: int = 0, name: str = "srv") -> tuple[subprocess.Popen, str]:
    url_file = tmp / f"{name}.url"
    url_file.unlink(missing_ok=True)
    proc = subprocess.Popen([sys.executable, "-m", "rtpo.retrieval.server", "--index", str(index), "--port", str(port),
                             "--url-file", str(url_file)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 60:
        if url_file.exists() and health(url_file.read_text().strip()):
            return proc, url_file.read_text().strip()
        assert proc.poll() is None, proc.stdout.read()
        time.sleep(0.1)
    proc.kill()
    raise AssertionError("server did not start")


# ------------------------------------------------------------------------------------------------
# fast: the ranking rule, the server on a small corpus, the cache
# ------------------------------------------------------------------------------------------------

def test_top_k_order_is_the_full_sort():
    rng = np.random.default_rng(0)
    for trial in range(200):
        n = int(rng.integers(1, 60))
        scores = rng.integers(0, 4, size=n).astype(np.float32)  # many ties and zeros
        rank = rng.permutation(n)
        k = int(rng.integers(1, n + 3))
        full = [i for i in np.lexsort((rank, -scores)) if scores[i] > 0][:k]
        assert list(top_k_order(scores, rank, k)) == full, trial


SMALL = [{"id": "a", "title": "Glass Tower", "text": "The Glass Tower stands in Lumen."},
         {"id": "b", "title": "Lumen", "text": "Lumen is the capital of Corvia."},
         {"id": "c", "title": "Vessel River", "text": "The Vessel River flows through Lumen."}]


@pytest.fixture()
def small_server():
    srv = RetrievalServer(BM25Index(SMALL), default_topk=2).start()
    yield srv
    srv.stop()


def _post(url: str, body: bytes) -> tuple[int, dict]:
    import http.client
    from urllib.parse import urlsplit
    u = urlsplit(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=5)
    c.request("POST", "/retrieve", body=body, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    return r.status, json.loads(r.read())


def test_server_speaks_search_r1_protocol(small_server):
    status, doc = _post(small_server.url, json.dumps({"queries": ["lumen capital", "river"], "topk": 2,
                                                      "return_scores": True}).encode())
    assert status == 200 and len(doc["result"]) == 2
    first = doc["result"][0][0]
    assert first["document"] == {"id": "b", "contents": "\"Lumen\"\nLumen is the capital of Corvia."}
    assert first["score"] == BM25Index(SMALL).search("lumen capital", 2)[0]["score"]
    status, doc = _post(small_server.url, json.dumps({"queries": ["river"]}).encode())  # default topk, no scores
    assert status == 200 and doc["result"] == [[{"id": "c", "contents": "\"Vessel River\"\nThe Vessel River flows through Lumen."}]]
    for body, msg in [(b"{not json", "not JSON"), (b'{"queries": "x"}', "list of strings"),
                      (b'{"queries": ["x"], "topk": 0}', "topk")]:
        status, doc = _post(small_server.url, body)
        assert status == 400 and msg in doc["error"]
    assert health(small_server.url)["passages"] == 3


def test_cache_answers_repeated_queries_without_a_request(small_server, tmp_path):
    client = HttpRetriever(small_server.url)
    cached = CachedRetriever(client, ResultCache(tmp_path / "cache"), name="bm25-small")
    first = cached.search("vessel river", 3)
    assert [h["id"] for h in first] == ["c", "a", "b"][:len(first)] and client.requests == 1
    assert cached.search("vessel river", 3) == first and client.requests == 1  # from the cache
    again = CachedRetriever(HttpRetriever(small_server.url), ResultCache(tmp_path / "cache"), name="bm25-small")
    assert again.search("vessel river", 3) == first and again.backend.requests == 0  # persistent
    cached.search("vessel river", 2)  # topk is part of the key
    assert client.requests == 2
    # first result wins: a later put of the same key keeps what is stored
    c = ResultCache(tmp_path / "cache")
    assert c.put("bm25-small", "vessel river", 3, [{"id": "zzz"}]) == first


# ------------------------------------------------------------------------------------------------
# slow: 100k passages
# ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def big(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("retrieval100k")
    passages = synthetic_corpus(N_PASSAGES)
    corpus = tmp / "corpus.jsonl"
    with open(corpus, "w") as f:
        for p in passages:  # half in wiki-18's row format {"id", "contents"}
            row = p if int(p["id"][1:]) % 2 else {"id": p["id"], "contents": f"\"{p['title']}\"\n{p['text']}"}
            f.write(json.dumps(row) + "\n")
    memory = BM25Index(passages)
    index = tmp / "bm25"
    build_index(corpus, index, progress=False, log=lambda s: None)
    proc, url = start_server(index, tmp)
    yield {"tmp": tmp, "passages": passages, "memory": memory, "index": index, "url": url,
           "queries": queries(passages, 300)}
    proc.kill()
    proc.wait()


def _ranking(hits):
    return [(h["id"], h["title"], h["text"], h["score"]) for h in hits]


@pytest.mark.slow
def test_server_returns_the_in_process_ranking(big):
    disk = DiskBM25Index(big["index"])
    assert len(disk) == N_PASSAGES
    bm = big["memory"]._bm25
    for q in big["queries"][:40]:  # our scoring loop is bm25s's get_scores, bit for bit
        toks = tokenize([q])[0]
        if toks:
            assert np.array_equal(bm25_scores(bm, bm.get_tokens_ids(toks)), bm.get_scores(toks)), q
    client = HttpRetriever(big["url"])
    nonempty = 0
    for q in big["queries"]:
        want = _ranking(big["memory"].search(q, 5))
        assert _ranking(disk.search(q, 5)) == want, q
        assert _ranking(client.search(q, 5)) == want, q
        nonempty += bool(want)
    assert nonempty >= 290
    batch = client.retrieve(big["queries"][:50], 10)  # one request, many queries
    assert [_ranking(h) for h in batch] == [_ranking(big["memory"].search(q, 10)) for q in big["queries"][:50]]


@pytest.mark.slow
def test_eight_threads_500_queries_each(big):
    client = HttpRetriever(big["url"], timeout=30)
    qs = big["queries"]
    errors: list[str] = []
    done = [0] * 8

    def work(t):
        for i in range(500):
            q = qs[(t * 500 + i) % len(qs)]
            try:
                hits = client.search(q, 3)
                if i % 50 == 0 and _ranking(hits) != _ranking(big["memory"].search(q, 3)):
                    errors.append(f"thread {t}: ranking differs for {q!r}")
                done[t] += 1
            except RetrievalError as e:
                errors.append(f"thread {t}: {e}")

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == [] and done == [500] * 8


class Scripted:
    """An engine whose turns are scripted; `before(i)` runs before turn i is 'sampled'."""

    def __init__(self, tok, turns: list[str], before=None):
        self.tokenizer, self.max_context, self.weight_version = tok, 1 << 16, 0
        self.turns, self.before, self.i = list(turns), before or (lambda i: None), 0
        self.eos = tok.eos_token_id

    def sample(self, contexts, params, seeds=None):
        out = []
        for _ in contexts:
            self.before(self.i)
            text = self.turns[self.i]
            self.i += 1
            ids = self.tokenizer.encode(text, add_special_tokens=False)
            stop = "tool_call" if text.endswith("</tool_call>") else "eos"
            out.append(Completion(ids=ids if stop == "tool_call" else ids + [self.eos],
                                  logprobs=[0.0] * (len(ids) + (stop == "eos")), stop_reason=stop))
        return out


def _call(q: str) -> str:
    return f'<tool_call>{{"name": "search", "arguments": {{"query": "{q}"}}}}</tool_call>'


@pytest.mark.slow
def test_server_killed_during_a_rollout(big, tmp_path):
    """Turn 1 searches (ok); the server is killed; turn 2's search is an error observation and a tool
    error; the episode still ends with its answer. After a restart on the same port queries work."""
    port = free_port()
    proc, url = start_server(big["index"], tmp_path, port=port, name="victim")
    q = big["queries"][0]
    want = big["memory"].search(q, 3)

    def before(i):
        if i == 1:
            proc.send_signal(signal.SIGKILL)
            proc.wait()

    spec = {"kind": "http", "url": url, "timeout_s": 2, "retries": 1}
    task = Task(id="s0", kind="search", question="Which passage?", answers=[want[0]["title"]],
                meta={"retriever": spec})
    eng = Scripted(tiny.tokenizer(), [_call(q), _call(q), f"<answer>{want[0]['title']}</answer>"], before)
    roller = Roller(eng, lambda t: make_env(t, max_turns=4), "full", SamplingParams(max_new_tokens=64))
    t0 = time.monotonic()
    traj = roller.run([Start(task)])[0]
    assert time.monotonic() - t0 < 30
    obs = [t.observations[0]["content"] for t in traj.turns[:2]]
    assert obs[0].startswith("[1] ") and want[0]["text"] in obs[0]
    assert obs[1] == SEARCH_FAILED  # a fixed text: no URL or port of the dead server
    assert traj.done and traj.reward == 1.0 and traj.tool_calls == 2 and traj.tool_errors == 1
    proc2, url2 = start_server(big["index"], tmp_path, port=port, name="victim")
    try:
        assert url2 == url
        assert _ranking(retriever_for(spec).search(q, 3)) == _ranking(want)  # the same client recovers
    finally:
        proc2.kill()
        proc2.wait()


class Lockstep:
    """An engine whose every trajectory writes turns[i] at turn i (all trajectories of a Roller.run
    advance together: one sample call per turn)."""

    def __init__(self, tok, turns: list[str]):
        self.tokenizer, self.max_context, self.weight_version = tok, 1 << 16, 0
        self.turns, self.calls, self.eos = list(turns), 0, tok.eos_token_id

    def sample(self, contexts, params, seeds=None):
        text = self.turns[self.calls]
        self.calls += 1
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        stop = "tool_call" if text.endswith("</tool_call>") else "eos"
        tail = [] if stop == "tool_call" else [self.eos]
        return [Completion(ids=ids + tail, logprobs=[0.0] * (len(ids) + len(tail)), stop_reason=stop)
                for _ in contexts]


def test_stopped_server_costs_one_timeout_per_rollout_with_the_same_observations(tmp_path):
    """Two runs, each against its own retrieval server (another random port), both SIGSTOPped (the
    process hangs: connections are accepted by the kernel, nothing answers). Each run rolls out 8
    trajectories x 3 searches with the default client settings (timeout_s 10 for a whole search,
    retries 2, circuit after 2 failed searches): the first wave of searches times out together,
    the circuit opens and the other 16 fail at once, so a run takes one timeout (bound asserted:
    timeout + 3 s; the old client took 3 x 10 s per search, ~93 s a run). Every observation is the
    fixed SEARCH_FAILED text, so both runs give identical token ids (the old text quoted the URL).
    After SIGCONT a client whose circuit is open recovers with its probe search after the cooldown."""
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(p) + "\n" for p in SMALL))
    build_index(corpus, tmp_path / "bm25", progress=False, log=lambda s: None)
    servers = [start_server(tmp_path / "bm25", tmp_path, name=f"stopped{i}") for i in range(2)]
    try:
        assert servers[0][1] != servers[1][1]
        for proc, _ in servers:
            proc.send_signal(signal.SIGSTOP)
        call = _call("Glass Tower")
        tok = tiny.tokenizer()  # here: transformers' lazy imports are not safe from two threads at once
        results: dict[int, tuple[float, list]] = {}

        def run(i: int) -> None:
            spec = {"kind": "http", "url": servers[i][1]}  # the defaults: timeout_s 10, retries 2
            task = Task(id="s0", kind="search", question="Where is the Glass Tower?", answers=["Lumen"],
                        meta={"retriever": spec})
            eng = Lockstep(tok, [call, call, call, "<answer>Lumen</answer>"])
            roller = Roller(eng, lambda t: make_env(t, max_turns=5), "full", SamplingParams(max_new_tokens=64))
            t0 = time.monotonic()
            trajs = roller.run([Start(task) for _ in range(8)])
            results[i] = (time.monotonic() - t0, trajs)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        for i in range(2):
            wall, trajs = results[i]
            assert wall < 10 + 3, (i, wall)
            assert all(t.done and t.reward == 1.0 and t.tool_calls == 3 and t.tool_errors == 3 for t in trajs)
            assert {t.turns[k].observations[0]["content"] for t in trajs for k in range(3)} == {SEARCH_FAILED}
        tokens = [[[u.context_ids for u in t.turns] for t in results[i][1]] for i in range(2)]
        assert tokens[0] == tokens[1]
        print(f"\nstopped server: 24 searches per run, runs took {results[0][0]:.1f} s and {results[1][0]:.1f} s")

        client = HttpRetriever(servers[0][1], timeout=0.5, retries=0, circuit_failures=1, circuit_cooldown_s=0.5)
        with pytest.raises(RetrievalError, match="failed after 1 attempt in 0.5 s"):
            client.search("Glass Tower", 1)
        with pytest.raises(RetrievalError, match=r"not asked, 1 search in a row failed \(circuit open\)"):
            client.search("Glass Tower", 1)
        servers[0][0].send_signal(signal.SIGCONT)
        time.sleep(0.6)
        assert [h["id"] for h in client.search("Glass Tower", 1)] == ["a"]  # the probe closes the circuit
        assert [h["id"] for h in client.search("Lumen capital", 1)] == ["b"]
    finally:
        for proc, _ in servers:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
            proc.wait()


@pytest.mark.slow
def test_auto_server_per_node_restarts_after_a_crash(big, tmp_path, monkeypatch):
    """url 'auto': the first search starts this node's server (reported in its URL file); two
    clients share it; after it is killed a search fails once, and the next one starts a new server."""
    monkeypatch.setenv("RTPO_RETRIEVAL_RUNDIR", str(tmp_path))
    q = big["queries"][3]
    a = HttpRetriever("auto", index=big["index"], timeout=5, retries=1)
    b = HttpRetriever("auto", index=big["index"], timeout=5, retries=1)
    assert _ranking(a.search(q, 3)) == _ranking(big["memory"].search(q, 3))
    assert b.url() == a.url()
    url_file = next(tmp_path.glob("rtpo-retrieval-*/*/url"))
    pid = int(url_file.parent.joinpath("server.log").read_text().split("(pid ")[1].split(",")[0])
    os.kill(pid, signal.SIGKILL)
    time.sleep(0.2)
    with pytest.raises(RetrievalError, match="failed after 2 attempts"):
        a.search(q, 3)
    assert _ranking(a.search(q, 3)) == _ranking(big["memory"].search(q, 3))  # a new server
    new = a.url()
    assert health(new) and url_file.read_text().strip() == new
    os.kill(int(url_file.parent.joinpath("server.log").read_text().rsplit("(pid ", 1)[1].split(",")[0]), signal.SIGTERM)


# ------------------------------------------------------------------------------------------------
# optional: the e5 + faiss dense index (skipped where faiss is not installed: the CPU install has none)
# ------------------------------------------------------------------------------------------------

def test_dense_index_ranking_and_server(tmp_path):
    """A tiny random BERT as the encoder (real transformers model, e5 pooling), faiss IndexFlatIP:
    the index's ranking is the exact cosine ranking, in process and through the server."""
    pytest.importorskip("faiss")
    import torch
    from transformers import BertConfig, BertModel, BertTokenizerFast

    from rtpo.retrieval.dense import DenseIndex, E5Encoder, build_dense_index

    passages = synthetic_corpus(300, seed=5)
    words = sorted({w for p in passages for w in f"{p['title']} {p['text']}".split()} | {"query", "passage"})
    (tmp_path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ":", *words]) + "\n")
    tok = BertTokenizerFast(vocab_file=str(tmp_path / "vocab.txt"))
    torch.manual_seed(0)
    model = BertModel(BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                 intermediate_size=64, max_position_embeddings=64))
    tok.save_pretrained(tmp_path / "enc")
    model.save_pretrained(tmp_path / "enc")
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(p) + "\n" for p in passages))
    enc = E5Encoder(str(tmp_path / "enc"), device="cpu")
    meta = build_dense_index(corpus, tmp_path / "dense", encoder=enc, chunk=64, progress=False)
    assert meta["passages"] == 300 and meta["kind"] == "dense"
    idx = DenseIndex(tmp_path / "dense", encoder=enc)
    P = enc.encode([f"{p['title']} {p['text']}" for p in passages], "passage: ")
    for q in queries(passages, 20, seed=3)[:20]:
        s = P @ enc.encode([q], "query: ")[0]
        want = [passages[i]["id"] for i in np.lexsort((np.arange(300), -s))[:5]]
        assert [h["id"] for h in idx.search(q, 5)] == want
    srv = RetrievalServer(idx).start()
    try:
        q = queries(passages, 1, seed=9)[0]
        assert [h["id"] for h in HttpRetriever(srv.url).search(q, 3)] == [h["id"] for h in idx.search(q, 3)]
    finally:
        srv.stop()


def test_cpu_default_search_stays_in_process():
    """The embedded search tasks name no retriever: the env indexes the embedded corpus in process."""
    from rtpo.data import generate_tasks

    task = generate_tasks("search", 1, 0, "eval")[0]
    assert "retriever" not in task.meta
    env = make_env(task)
    env.reset(task)
    assert type(env._index) is BM25Index
    res = env.step(_call(task.question.split()[0]))
    assert res.info["tool_errors"] == 0 and not res.observations[0]["content"].startswith("Error")


def test_server_workers_share_the_socket_and_die_with_it(tmp_path):
    """--workers 2: two processes answer on one port; killing the first takes the other down too."""
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(p) + "\n" for p in SMALL))
    url_file = tmp_path / "url"
    proc = subprocess.Popen([sys.executable, "-m", "rtpo.retrieval.server", "--corpus", str(corpus), "--workers", "2",
                             "--url-file", str(url_file)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        t0 = time.monotonic()
        while not (url_file.exists() and health(url_file.read_text().strip())):
            assert time.monotonic() - t0 < 60 and proc.poll() is None
            time.sleep(0.1)
        url = url_file.read_text().strip()
        pids = set()
        for _ in range(200):
            pids.add(health(url)["pid"])
            if len(pids) == 2:
                break
        assert len(pids) == 2 and proc.pid in pids
        assert [h["id"] for h in HttpRetriever(url).search("vessel river", 1)] == ["c"]
    finally:
        proc.kill()
        proc.wait()
    t0 = time.monotonic()
    while health(url, timeout=0.5) is not None:
        assert time.monotonic() - t0 < 10, "a worker outlived the server"
        time.sleep(0.1)
