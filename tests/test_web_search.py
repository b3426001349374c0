"""Web search for the deep-search benchmarks: the SerpAPI backend against a fake provider
on 127.0.0.1 that replays responses in SerpAPI's Google JSON schema (search_metadata,
search_parameters, answer_box, organic_results, related_questions; `error` on failures).

Parsed into passages, cached persistently (a second identical query makes no request), and every
failure (429, 500, malformed JSON, timeout, bad key) becomes an error observation and a tool error
of the search env, never a crash; behind rtpo.retrieval.server it speaks `/retrieve` too.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest

from rtpo.envs import make_env
from rtpo.envs.base import Task
from rtpo.retrieval.client import HttpRetriever
from rtpo.retrieval.core import RetrievalError
from rtpo.retrieval.server import RetrievalServer
from rtpo.retrieval.web import SerpApiBackend, WebSearchUnavailable, make_web_backend, parse_serpapi
from rtpo.tools.search_tool import SEARCH_FAILED, make_retriever, retriever_for

KEY = "test-key-123"


def serp_response(q: str) -> dict:
    """A SerpAPI Google response (fields as the API returns them; values invented)."""
    return {
        "search_metadata": {"id": "6745d3a5f0b8c1e2a3b4c5d6", "status": "Success",
                            "json_endpoint": "https://serpapi.com/searches/0a1b2c3d/6745d3a5f0b8c1e2a3b4c5d6.json",
                            "created_at": "2026-11-26 12:00:00 UTC", "processed_at": "2026-11-26 12:00:00 UTC",
                            "google_url": f"https://www.google.com/search?q={q}&oq={q}&num=3&sourceid=chrome&ie=UTF-8",
                            "raw_html_file": "https://serpapi.com/searches/0a1b2c3d/6745d3a5f0b8c1e2a3b4c5d6.html",
                            "total_time_taken": 1.21},
        "search_parameters": {"engine": "google", "q": q, "google_domain": "google.com", "num": "3", "device": "desktop"},
        "search_information": {"query_displayed": q, "total_results": 1280000, "time_taken_displayed": 0.41,
                               "organic_results_state": "Results for exact spelling"},
        "answer_box": {"type": "organic_result", "title": "Glass Tower - Height", "link": "https://example.org/glass-tower",
                       "snippet": "The Glass Tower in Lumen is 312 m tall.", "displayed_link": "https://example.org › glass-tower"},
        "organic_results": [
            {"position": 2, "title": "Lumen skyline", "link": "https://example.org/lumen", "redirect_link": "https://www.google.com/url?q=x",
             "displayed_link": "https://example.org › lumen", "snippet": "Lumen's skyline is dominated by the Glass Tower.",
             "snippet_highlighted_words": ["Glass Tower"], "source": "Example"},
            {"position": 1, "title": "Glass Tower - Wikipedia", "link": "https://en.wikipedia.org/wiki/Glass_Tower",
             "displayed_link": "https://en.wikipedia.org › wiki › Glass_Tower",
             "snippet": "The Glass Tower is a skyscraper in Lumen, Corvia, completed in 1931.",
             "sitelinks": {"inline": [{"title": "History", "link": "https://en.wikipedia.org/wiki/Glass_Tower#History"}]}},
            {"position": 3, "title": "Corvia travel guide", "link": "https://example.org/corvia",
             "snippet": "Visit the Glass Tower and the Vessel River."},
        ],
        "related_questions": [{"question": "How tall is the Glass Tower?", "snippet": "312 m",
                               "title": "Glass Tower facts", "link": "https://example.org/facts"}],
    }


class FakeSerpApi:
    """GET /search.json?engine=google&q=...&api_key=...; `mode` picks the next behaviour."""

    def __init__(self):
        self.requests: list[dict] = []
        self.mode = "ok"
        fake = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                qs = {k: v[0] for k, v in parse_qs(urlsplit(self.path).query).items()}
                fake.requests.append(qs)
                mode = fake.mode
                if qs.get("api_key") != KEY:
                    return self._send(401, {"error": "Invalid API key. Your API key should be here: "
                                                     "https://serpapi.com/manage-api-key"})
                if mode == "429":
                    return self._send(429, {"error": "Your account has run out of searches."})
                if mode == "500":
                    return self._send(500, {"error": "Internal server error."})
                if mode == "malformed":
                    return self._send(200, b"<html>upstream proxy error</html>")
                if mode == "slow":
                    time.sleep(1.5)
                if mode == "empty":
                    return self._send(200, {"search_metadata": {"status": "Success"},
                                            "error": "Google hasn't returned any results for this query."})
                self._send(200, serp_response(qs["q"]))

            def _send(self, code, body):
                raw = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                try:
                    self.wfile.write(raw)
                except BrokenPipeError:  # the client timed out first
                    pass

        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.srv.daemon_threads = True
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()
        self.endpoint = f"http://127.0.0.1:{self.srv.server_address[1]}/search.json"


@pytest.fixture()
def fake():
    f = FakeSerpApi()
    yield f
    f.srv.shutdown()


def spec(fake, tmp_path, **kw):
    return {"kind": "serpapi", "key_env": "RTPO_TEST_SERP_KEY", "endpoint": fake.endpoint, "timeout_s": 0.5,
            "retries": 1, "backoff_s": 0.01, "cache": str(tmp_path / "cache"), **kw}


def test_parse_serpapi_json():
    hits = parse_serpapi(serp_response("glass tower"), 3)
    assert [h["id"] for h in hits] == ["https://example.org/glass-tower", "https://en.wikipedia.org/wiki/Glass_Tower",
                                       "https://example.org/lumen"]  # answer box, then organic by position
    assert hits[0]["title"] == "Glass Tower - Height" and hits[1]["text"].endswith("completed in 1931.")
    assert parse_serpapi({"error": "Google hasn't returned any results for this query."}, 3) == []
    with pytest.raises(RetrievalError, match="Invalid API key"):
        parse_serpapi({"error": "Invalid API key."}, 3)


def test_results_parsed_and_cached(fake, tmp_path, monkeypatch):
    monkeypatch.setenv("RTPO_TEST_SERP_KEY", KEY)
    r = make_retriever(spec(fake, tmp_path))
    hits = r.search("glass tower height", 3)
    assert [h["title"] for h in hits] == ["Glass Tower - Height", "Glass Tower - Wikipedia", "Lumen skyline"]
    assert fake.requests == [{"engine": "google", "q": "glass tower height", "num": "3", "api_key": KEY}]
    assert r.search("glass tower height", 3) == hits and len(fake.requests) == 1  # cached: no request
    fresh = make_retriever(spec(fake, tmp_path))  # another process: the cache is on disk
    assert fresh.search("glass tower height", 3) == hits and len(fake.requests) == 1
    cache_text = "".join(p.read_text() for p in (tmp_path / "cache").rglob("*.json"))
    assert KEY not in cache_text and "glass tower height" in cache_text  # the key is never stored
    r.search("glass tower height", 2)
    assert len(fake.requests) == 2  # (query, topk) is the key


@pytest.mark.parametrize("mode, message, attempts", [
    ("429", "HTTP 429: Your account has run out of searches.", 2),
    ("500", "HTTP 500: Internal server error.", 2),
    ("malformed", "malformed JSON", 1),
    ("slow", "timed out", 2),
])
def test_provider_errors_become_error_observations(fake, tmp_path, monkeypatch, mode, message, attempts):
    monkeypatch.setenv("RTPO_TEST_SERP_KEY", KEY)
    fake.mode = mode
    task = Task(id="g0", kind="search", question="How tall is the Glass Tower?", answers=["312 m"],
                meta={"retriever": spec(fake, tmp_path / mode)})
    env = make_env(task, max_turns=3)
    env.reset(task)
    res = env.step('<tool_call>{"name": "search", "arguments": {"query": "glass tower"}}</tool_call>')
    obs = res.observations[0]["content"]
    # the agent sees a fixed text (nothing of the provider's answer or the server's address)
    assert not res.done and obs == SEARCH_FAILED, obs
    assert res.info["tool_errors"] == 1
    assert len(fake.requests) == attempts
    with pytest.raises(RetrievalError) as e:  # what failed is in the error (stderr, logs), key-free
        retriever_for(spec(fake, tmp_path / mode)).search("glass tower", 3)
    assert str(e.value).startswith("serpapi") and message in str(e.value) and KEY not in str(e.value)
    fake.mode = "ok"  # failures are not cached: the next search asks again and succeeds
    res = env.step('<tool_call>{"name": "search", "arguments": {"query": "glass tower"}}</tool_call>')
    assert res.observations[0]["content"].startswith("[1] Glass Tower - Height") and res.info["tool_errors"] == 0
    end = env.step("<answer>312 m</answer>")
    assert end.done and end.reward == 1.0 and end.info["metrics"]["tool_errors"] == 1


def test_bad_key_and_missing_key(fake, tmp_path, monkeypatch):
    monkeypatch.setenv("RTPO_TEST_SERP_KEY", "wrong")
    with pytest.raises(RetrievalError, match="HTTP 401: Invalid API key"):
        make_retriever(spec(fake, tmp_path)).search("x", 3)
    assert len(fake.requests) == 1  # not retried
    monkeypatch.delenv("RTPO_TEST_SERP_KEY")
    with pytest.raises(WebSearchUnavailable, match="RTPO_TEST_SERP_KEY is not set"):
        make_web_backend(spec(fake, tmp_path))


def test_web_backend_behind_the_retrieve_protocol(fake, monkeypatch):
    """rtpo.retrieval.server --web serpapi: the same /retrieve protocol as the wiki-18 server."""
    monkeypatch.setenv("RTPO_TEST_SERP_KEY", KEY)
    srv = RetrievalServer(SerpApiBackend(KEY, endpoint=fake.endpoint, retries=0)).start()
    try:
        hits = HttpRetriever(srv.url).search("glass tower", 2)
        assert [h["title"] for h in hits] == ["Glass Tower - Height", "Glass Tower - Wikipedia"]
        assert hits[1]["text"] == "The Glass Tower is a skyscraper in Lumen, Corvia, completed in 1931."
        fake.mode = "429"
        with pytest.raises(RetrievalError, match="HTTP 502"):
            HttpRetriever(srv.url, retries=0).search("glass tower", 2)
    finally:
        srv.stop()
