"""Embedded search tasks: 2-4 hop questions over a generated knowledge base of fictional entities
(paper §4, knowledge reasoning with a search tool; §F.1 describes the hop-completion error these
questions make possible: answering with the intermediate entity).

The KB (one per seed, ~600 short passages; `rtpo.envs.search_kb`, the search env's world) has films,
people, studios, cities and countries::

    Silver Harbor is a 1987 film directed by Maren Vosley and produced by Kestrel Pictures.
    Maren Vosley is a director born in Tarnwick who works for Cobalt Media.
    Kestrel Pictures is a studio based in Oldbridge, founded by Ivo Lindholt.
    Tarnwick is a city in Velaria.

Distractors are similar names: sequels ("Silver Harbor II"), studios sharing a word ("Kestrel
Pictures" / "Kestrel Media"), towns "New Tarnwick" next to "Tarnwick", people sharing a first or
last name. A question follows a relation path from a film; each hop is one search for the current
entity's name. Tiers: easy = 2 hops, medium = 3, hard = 4, e.g. (hard)
"In which country is the home city of the employer of the director of the film Silver Harbor?"
"""

from __future__ import annotations

import random
import re

from rtpo.envs.base import Message, Task
from rtpo.envs.search_kb import KB, build_kb
from rtpo.envs.tool_env import ToolEnv
from rtpo.tools.parse import format_tool_call

__all__ = ["sample_task", "run_expert", "read_relation", "tier_of_hops", "PATHS", "RELATIONS", "MISTAKES", "MAX_HOPS"]

MISTAKES = ("no_tool", "wrong_arg", "malformed", "stop_early")

# relation -> (subject type, object type)
RELATIONS = {"director": ("film", "person"), "studio": ("film", "company"),
             "birthplace": ("person", "city"), "employer": ("person", "company"),
             "hq": ("company", "city"), "founder": ("company", "person"), "country": ("city", "country")}
_REL_WORD = {"director": "director", "studio": "studio", "birthplace": "birthplace",
             "employer": "employer", "hq": "home city", "founder": "founder", "country": "country"}
_INNER = {"director": "the director of {}", "studio": "the studio of {}",
          "birthplace": "the birthplace of {}", "employer": "the employer of {}",
          "hq": "the home city of {}", "founder": "the founder of {}"}
_FINAL = {"birthplace": "Where was {} born?", "employer": "Which company does {} work for?",
          "hq": "Where is {} based?", "founder": "Who founded {}?", "country": "In which country is {}?"}
# how each passage type is read back (the expert parses real tool output with these)
_PATTERNS = {
    "film": re.compile(r"^(?P<name>.+) is a \d{4} film directed by (?P<director>.+) and produced by (?P<studio>.+)\.$"),
    "person": re.compile(r"^(?P<name>.+) is an? \w+ born in (?P<birthplace>.+) who works for (?P<employer>.+)\.$"),
    "company": re.compile(r"^(?P<name>.+) is a studio based in (?P<hq>.+), founded by (?P<founder>.+)\.$"),
    "city": re.compile(r"^(?P<name>.+) is a city in (?P<country>.+)\.$"),
}


MAX_HOPS = 8  # the mechanism sweep's longest horizon (config `sweep.hops`); the tiers use 2-4


def _paths(max_len: int = MAX_HOPS) -> dict[int, list[tuple[str, ...]]]:
    """All relation paths from a film, by length (2 .. max_len). Beyond 4 hops a path walks the
    person -> employer -> founder -> ... cycle, e.g. director, employer, founder, employer, hq, country."""
    out: dict[int, list[tuple[str, ...]]] = {}
    frontier = [((), "film")]
    for n in range(1, max_len + 1):
        frontier = [(p + (r,), RELATIONS[r][1]) for p, t in frontier for r in RELATIONS
                    if RELATIONS[r][0] == t]
        if n >= 2:
            out[n] = [p for p, _ in frontier]
    return out


PATHS = _paths()
_HOPS = {"easy": 2, "medium": 3, "hard": 4}


def _question(film: str, path: tuple[str, ...]) -> str:
    np_ = f"the film {film}"
    for r in path[:-1]:
        np_ = _INNER[r].format(np_)
    return _FINAL[path[-1]].format(np_)


def sample_task(rng: random.Random, tier: str, seed: int, hops: int | None = None) -> tuple[str, list[str], dict]:
    """(question, answers, meta) for one question of `tier` on the KB of `seed`; `hops` (2 .. MAX_HOPS)
    fixes the path length instead of the tier's (the mechanism sweep's horizon K; config `sweep`).
    meta = {"corpus_seed", "hops", "path" (relations), "chain" (entity names, film first)}."""
    if tier not in _HOPS:
        raise ValueError(f"search: unknown tier {tier!r}")
    n = _HOPS[tier] if hops is None else int(hops)
    if n not in PATHS:
        raise ValueError(f"search: hops must be 2 .. {MAX_HOPS}, got {hops!r}")
    kb = build_kb(seed)
    films = kb.of_type("film")
    while True:
        film = rng.choice(films)
        path = rng.choice(PATHS[n])
        chain = [film]
        for r in path:
            chain.append(kb.entities[chain[-1]][r])
        if len(set(chain)) < len(chain):  # a loop (e.g. a founder working for their own studio)
            continue
        meta = {"corpus_seed": seed, "hops": len(path), "path": list(path), "chain": chain}
        return _question(film, path), [chain[-1]], meta


def tier_of_hops(hops: int) -> str:
    """The difficulty label of a K-hop question: the tiers' own lengths (2 easy, 3 medium), hard beyond."""
    return "easy" if hops <= 2 else "medium" if hops == 3 else "hard"


def read_relation(observation: str, name: str, relation: str) -> str | None:
    """The object of `relation` for entity `name` if its passage is in the search result, else None."""
    subject_type = RELATIONS[relation][0]
    for line in observation.splitlines():
        m = re.match(r"^\[\d+\] (.*)$", line)
        if not m:
            continue
        pm = _PATTERNS[subject_type].match(m.group(1))
        if pm and pm.group("name") == name:
            return pm.group(relation)
    return None


def _similar(kb: KB, name: str, rng: random.Random) -> str:
    """An entity of the same type whose name shares a word with `name` (else any other one)."""
    t = kb.entities[name]["type"]
    words = set(name.split())
    same = [n for n in kb.of_type(t) if n != name]
    close = [n for n in same if words & set(n.split())]
    return rng.choice(close or same)


def run_expert(task: Task, env: ToolEnv, imperfection: float, rng: random.Random
               ) -> tuple[list[Message], float]:
    """Scripted demonstration: search each entity on the path by name, read the relation from the
    real search result, answer the last entity in <answer>.

    With probability `imperfection` per decision the expert errs: answers a guess without
    searching, searches a similar-named wrong entity and follows it, writes a malformed call (then
    retries), or stops a hop early (answers the intermediate entity). Returns (messages, reward).
    """
    kb = build_kb(int(task.meta["corpus_seed"]))
    path = task.meta["path"]
    answer_type = RELATIONS[path[-1]][1]
    msgs = env.reset(task)
    current = task.meta["chain"][0]  # the film is named in the question
    hop, turn, note = 0, 0, ""
    while True:
        turn += 1
        mistake = rng.choice(MISTAKES) if rng.random() < imperfection else None
        if mistake == "stop_early" and hop == 0:
            mistake = "no_tool"
        if hop == len(path) or env.max_turns - turn <= 0 or mistake == "stop_early":
            text = f"<think>{note.strip()}</think>\n<answer>{current}</answer>"
        elif mistake == "no_tool":
            guess = rng.choice(kb.of_type(answer_type))
            text = f"<think>{note}I think it is {guess}.</think>\n<answer>{guess}</answer>"
        else:
            target = _similar(kb, current, rng) if mistake == "wrong_arg" else current
            call = format_tool_call("search", {"query": target})
            if mistake == "malformed":
                call = call.replace('"}}', '"}', 1)
            goal = (f"Find its {_REL_WORD[path[hop]]}." if note and target == current
                    else f"Find the {_REL_WORD[path[hop]]} of {target}.")
            text = f"<think>{note}{goal}</think>\n{call}"
        res = env.step(text)
        msgs.append({"role": "assistant", "content": text})
        msgs.extend(res.observations)
        if res.done:
            return msgs, res.reward
        note = ""
        if res.info["tool_errors"] == 0 and res.observations:
            value = read_relation(res.observations[0]["content"], target, path[hop])
            if value is not None:
                note = f"The {_REL_WORD[path[hop]]} is {value}. "
                current, hop = value, hop + 1
