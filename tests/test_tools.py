"""Tool-call parser, BM25 search and airline DB tools."""

from __future__ import annotations

import json
import random

import pytest

from rtpo.tools.airline_db import AirlineDB, check_db
from rtpo.tools.parse import ToolCall, ToolError, ToolSpec, format_tool_call, parse_tool_call
from rtpo.retrieval.bm25 import BM25Index, get_index, load_corpus
from rtpo.tools.search_tool import format_hits

SPECS = {"search": ToolSpec("search", "find", {"query": "string"}),
         "add": ToolSpec("add", "add", {"a": "integer", "b": "integer"})}


# ---------------------------------------------------------------------------------------------
# parser
# ---------------------------------------------------------------------------------------------

def test_no_call_is_none():
    assert parse_tool_call("The answer is \\boxed{5}.", SPECS) is None
    assert parse_tool_call("", SPECS) is None


def test_well_formed_call():
    text = '<think>look it up</think>\nLet me search.\n<tool_call>{"name": "search", "arguments": {"query": "Oslo"}}</tool_call>'
    c = parse_tool_call(text, SPECS)
    assert isinstance(c, ToolCall)
    assert c.name == "search" and c.arguments == {"query": "Oslo"}


def test_format_roundtrip_and_text_after_close_ignored():
    text = format_tool_call("add", {"a": 1, "b": 2}) + " trailing <tool_call>{bad"
    c = parse_tool_call(text, SPECS)
    assert isinstance(c, ToolCall) and c.arguments == {"a": 1, "b": 2}


def test_call_inside_think_is_not_a_call():
    text = '<think><tool_call>{"name": "search", "arguments": {"query": "x"}}</tool_call></think> \\boxed{1}'
    assert parse_tool_call(text, SPECS) is None


@pytest.mark.parametrize("text, fragment", [
    ('<tool_call>{"name": "search", "arguments": {"query": "x"}}', "unclosed"),
    ('{"name": "search"}</tool_call>', "without"),
    ('<tool_call>{"name": "search", "arguments": {"query": "x"}</tool_call>', "not valid JSON"),
    ("<tool_call>[1, 2]</tool_call>", "JSON object"),
    ('<tool_call>{"arguments": {}}</tool_call>', '"name"'),
    ('<tool_call>{"name": "search", "arguments": "x"}</tool_call>', '"arguments"'),
    ('<tool_call>{"name": "browse", "arguments": {"url": "x"}}</tool_call>', "unknown tool"),
    ('<tool_call>{"name": "search", "arguments": {}}</tool_call>', "missing argument 'query'"),
    ('<tool_call>{"name": "search"}</tool_call>', "missing argument 'query'"),
    ('<tool_call>{"name": "search", "arguments": {"query": "x", "k": 3}}</tool_call>', "unexpected argument 'k'"),
    ('<tool_call>{"name": "search", "arguments": {"query": 7}}</tool_call>', "must be a string"),
    ('<tool_call>{"name": "add", "arguments": {"a": true, "b": 2}}</tool_call>', "must be an integer"),
])
def test_malformed_calls_become_tool_errors(text, fragment):
    err = parse_tool_call(text, SPECS)
    assert isinstance(err, ToolError), err
    assert err.message.startswith("Error:")
    assert fragment in err.message


def test_without_specs_only_structure_is_checked():
    c = parse_tool_call('<tool_call>{"name": "anything", "arguments": {"z": 1}}</tool_call>')
    assert isinstance(c, ToolCall) and c.name == "anything"


def test_parser_never_raises_on_garbage():
    rng = random.Random(0)
    pieces = ["<tool_call>", "</tool_call>", "<think>", "</think>", "{", "}", '"name"', ":", '"search"',
              '"arguments"', "[", "]", "x", " ", "\\boxed{", "null", ",", '"query"', "1e999", "\x00"]
    for _ in range(2000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 30)))
        out = parse_tool_call(text, SPECS)
        assert out is None or isinstance(out, (ToolCall, ToolError))


def test_toolspec_rejects_unknown_type():
    with pytest.raises(ValueError, match="float"):
        ToolSpec("f", "d", {"x": "float"})


# ---------------------------------------------------------------------------------------------
# BM25 search
# ---------------------------------------------------------------------------------------------

CORPUS = [
    {"id": "p3", "title": "Oslo", "text": "Oslo is the capital of Norway."},
    {"id": "p1", "title": "Bergen", "text": "Bergen is a city in Norway with rain."},
    {"id": "p2", "title": "Stockholm", "text": "Stockholm is the capital of Sweden."},
    {"id": "b", "title": "Twin", "text": "identical twin passage"},
    {"id": "a", "title": "Twin", "text": "identical twin passage"},
]


def test_bm25_ranks_and_top_k():
    idx = BM25Index(CORPUS)
    hits = idx.search("capital of Norway", k=2)
    assert hits[0]["id"] == "p3" and len(hits) == 2
    assert {h["id"] for h in idx.search("capital of Norway", k=10)} == {"p1", "p2", "p3"}
    assert hits[0]["score"] >= hits[1]["score"]


def test_bm25_ties_broken_by_id_and_deterministic():
    idx = BM25Index(CORPUS)
    hits = idx.search("identical twin", k=5)
    assert [h["id"] for h in hits] == ["a", "b"]  # equal scores -> id order
    assert idx.search("identical twin", k=5) == BM25Index(list(reversed(CORPUS))).search("identical twin", k=5)


def test_bm25_no_match_and_stopwords_only():
    idx = BM25Index(CORPUS)
    assert idx.search("zebra") == []
    assert idx.search("the of a") == []
    assert format_hits([]) == "No results."


def test_bm25_bad_corpus():
    with pytest.raises(ValueError, match="empty"):
        BM25Index([])
    with pytest.raises(ValueError, match="duplicate passage id 'x'"):
        BM25Index([{"id": "x", "title": "a", "text": "b"}, {"id": "x", "title": "c", "text": "d"}])
    with pytest.raises(ValueError, match="#0 lacks"):
        BM25Index([{"id": "x", "text": "b"}])


def test_format_hits_avoids_repeating_title():
    out = format_hits([{"title": "Oslo", "text": "Oslo is a city."}, {"title": "T", "text": "body"}])
    assert out == "[1] Oslo is a city.\n[2] T: body"


def test_get_index_is_cached():
    calls = []

    def load():
        calls.append(1)
        return CORPUS

    a = get_index(("test-tools", 1), load)
    b = get_index(("test-tools", 1), load)
    assert a is b and len(calls) == 1


def test_load_corpus_names_bad_line(tmp_path):
    p = tmp_path / "corpus.jsonl"
    p.write_text(json.dumps(CORPUS[0]) + "\n{oops\n")
    with pytest.raises(ValueError, match=r"corpus.jsonl:2"):
        load_corpus(p)
    p.write_text(json.dumps({"id": "1", "title": "t"}) + "\n")
    with pytest.raises(ValueError, match=r":1: passage lacks field 'text'"):
        load_corpus(p)


# ---------------------------------------------------------------------------------------------
# airline DB
# ---------------------------------------------------------------------------------------------

def _db() -> dict:
    return {
        "users": {"U1": {"name": "Ana"}, "U2": {"name": "Ben"}},
        "flights": {
            "FL1": {"origin": "ORD", "destination": "SFO", "date": "2024-06-03", "time": "09:00", "price": 200, "seats": 1},
            "FL2": {"origin": "ORD", "destination": "SFO", "date": "2024-06-03", "time": "13:00", "price": 150, "seats": 0},
            "FL3": {"origin": "ORD", "destination": "SFO", "date": "2024-06-05", "time": "08:00", "price": 180, "seats": 2},
            "FL4": {"origin": "JFK", "destination": "SEA", "date": "2024-06-05", "time": "10:00", "price": 300, "seats": 5},
        },
        "reservations": {"R10001": {"user_id": "U1", "flight_id": "FL1", "status": "active"},
                         "R10002": {"user_id": "U2", "flight_id": "FL4", "status": "cancelled"}},
    }


def test_airline_search_and_get():
    db = AirlineDB(_db())
    out, ok = db.search_flights("ORD", "SFO", "2024-06-03")
    assert ok and out.splitlines() == ["FL1 ORD->SFO 2024-06-03 09:00 $200 seats:1",
                                       "FL2 ORD->SFO 2024-06-03 13:00 $150 seats:0"]
    out, ok = db.search_flights("ORD", "SFO", "2024-07-01")
    assert ok and out.startswith("No flights")
    out, ok = db.search_flights("ORD", "SFO", "June 3")
    assert not ok and out.startswith("Error")
    out, ok = db.get_reservation("R10001")
    assert ok and out == "R10001 user U1 flight FL1 ORD->SFO 2024-06-03 status active"
    assert db.get_reservation("R9") == ("Error: no reservation R9.", False)


def test_airline_book_errors_and_seats():
    db = AirlineDB(_db())
    before = db.canonical()
    for args, msg in [(("U9", "FL3"), "no user U9"), (("U2", "FL9"), "no flight FL9"),
                      (("U2", "FL2"), "FL2 is full"), (("U1", "FL1"), "already holds R10001")]:
        out, ok = db.book(*args)
        assert not ok and msg in out
    assert db.canonical() == before  # errors leave the DB unchanged
    out, ok = db.book("U2", "FL3")
    assert ok and out.startswith("Booked R10003")
    assert db.db["flights"]["FL3"]["seats"] == 1
    assert db.db["reservations"]["R10003"] == {"user_id": "U2", "flight_id": "FL3", "status": "active"}


def test_airline_cancel_and_change():
    db = AirlineDB(_db())
    assert db.cancel("R10002") == ("Error: R10002 is already cancelled.", False)
    assert not db.change("R10001", "FL4")[1]   # other route
    assert not db.change("R10001", "FL2")[1]   # full
    assert not db.change("R10001", "FL1")[1]   # same flight
    assert not db.change("R10002", "FL3")[1]   # cancelled
    out, ok = db.change("R10001", "FL3")
    assert ok and "FL3" in out
    assert db.db["flights"]["FL1"]["seats"] == 2 and db.db["flights"]["FL3"]["seats"] == 1
    out, ok = db.cancel("R10001")
    assert ok and db.db["flights"]["FL3"]["seats"] == 2
    assert db.db["reservations"]["R10001"]["status"] == "cancelled"


def test_airline_state_is_a_copy_and_canonical_compares():
    db = AirlineDB(_db())
    snap = db.state()
    db.cancel("R10001")
    assert snap["reservations"]["R10001"]["status"] == "active"
    assert AirlineDB(snap).canonical() != db.canonical()
    assert AirlineDB(_db()).canonical() == AirlineDB(_db()).canonical()


def test_check_db_names_the_field():
    bad = _db()
    del bad["flights"]["FL1"]["seats"]
    with pytest.raises(ValueError, match="flight 'FL1' lacks 'seats'"):
        check_db(bad)
    bad = _db()
    bad["reservations"]["R10001"]["flight_id"] = "FL77"
    with pytest.raises(ValueError, match="unknown flight 'FL77'"):
        check_db(bad)
