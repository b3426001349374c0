"""Embedded airline tasks: stateful booking, change and cancellation over a small generated DB
(paper §G.1, tau^3-Airline style). Each task carries its own DB (4 users, ~18 flights on 3 routes
x 3 dates, 5 reservations) and a goal; reward = the final DB equals the goal DB.

Tiers (tool calls needed):
  easy   "I am Ana Reyes (user U1234). Please cancel my reservation R10234."          cancel
  medium "... Book me the cheapest flight with free seats from ORD to SFO on 2024-06-03."
                                                                           search_flights, book
  hard   "... Move my reservation R10234 to the cheapest flight with free seats on 2024-06-05."
                                                  get_reservation, search_flights, change
then a closing reply without a tool call ends the episode.
"""

from __future__ import annotations

import random
import re
from datetime import date, timedelta

from rtpo.envs.tool_env import ToolEnv
from rtpo.envs.base import Message, Task
from rtpo.tools.parse import format_tool_call

__all__ = ["sample_task", "run_expert", "MISTAKES", "parse_flights"]

MISTAKES = ("no_tool", "wrong_arg", "malformed", "stop_early")

_AIRPORTS = ["ORD", "SFO", "JFK", "LAX", "SEA", "BOS", "DEN", "ATL", "MIA", "DFW", "PHX", "IAD"]
_FIRST = ["Ana", "Ben", "Chen", "Dina", "Eli", "Fay", "Gus", "Hana", "Ivan", "Jade", "Kofi", "Lena",
          "Mo", "Nia", "Omar", "Pia", "Raj", "Sara", "Tom", "Uma", "Vik", "Wen", "Yusuf", "Zoe"]
_LAST = ["Reyes", "Novak", "Okafor", "Silva", "Tanaka", "Berg", "Costa", "Diaz", "Evans", "Fischer",
         "Garcia", "Haddad", "Ito", "Jensen", "Khan", "Lopez", "Moreau", "Nguyen", "Olsen", "Patel"]
_FLIGHT_LINE = re.compile(r"^(FL\d+) (\w+)->(\w+) (\S+) (\S+) \$(\d+) seats:(\d+)$")
_RES_LINE = re.compile(r"^(R\d+) user (\S+) flight (FL\d+) (\w+)->(\w+) (\S+) status (\w+)$")


def parse_flights(observation: str) -> list[dict]:
    """Flights listed in a search_flights result: [{"id", "price", "seats"}] in listed order."""
    out = []
    for line in observation.splitlines():
        m = _FLIGHT_LINE.match(line.strip())
        if m:
            out.append({"id": m.group(1), "price": int(m.group(6)), "seats": int(m.group(7))})
    return out


def _cheapest_free(flights: list[dict]) -> str | None:
    free = [f for f in flights if f["seats"] > 0]
    return min(free, key=lambda f: (f["price"], f["id"]))["id"] if free else None


def _make_db(rng: random.Random) -> dict:
    airports = rng.sample(_AIRPORTS, 4)
    routes: list[tuple[str, str]] = []
    while len(routes) < 3:
        o, d = rng.sample(airports, 2)
        if (o, d) not in routes:
            routes.append((o, d))
    start = date(2024, 6, 1) + timedelta(days=rng.randint(0, 20))
    dates = sorted(rng.sample([(start + timedelta(days=i)).isoformat() for i in range(10)], 3))
    flights, fids = {}, rng.sample(range(100, 1000), 40)
    for o, d in routes:
        for day in dates:
            n = rng.choice([1, 2, 3])
            times = sorted(rng.sample(range(6 * 4, 22 * 4), n))
            prices = rng.sample(range(90, 600, 5), n)  # distinct: the cheapest flight is unique
            for t, p in zip(times, prices):
                fid = f"FL{fids.pop()}"
                flights[fid] = {"origin": o, "destination": d, "date": day,
                                "time": f"{t // 4:02d}:{(t % 4) * 15:02d}", "price": p,
                                "seats": rng.choice([0, 0, 1, 2, 3, 5, 8])}
    uids = rng.sample(range(1000, 10000), 4)
    users = {f"U{u}": {"name": f"{rng.choice(_FIRST)} {rng.choice(_LAST)}"} for u in uids}
    rids = sorted(rng.sample(range(10001, 99000), 5))
    reservations = {f"R{r}": {"user_id": rng.choice(list(users)), "flight_id": rng.choice(list(flights)),
                              "status": "active"} for r in rids}
    reservations[f"R{rng.choice(rids)}"]["status"] = "cancelled"
    return {"users": users, "flights": flights, "reservations": reservations}


def _active(db: dict) -> list[str]:
    return [r for r, x in db["reservations"].items() if x["status"] == "active"]


def _try(rng: random.Random, tier: str) -> tuple[str, list[str], dict] | None:
    db = _make_db(rng)
    flights = db["flights"]

    def listing(o: str, d: str, day: str) -> list[dict]:
        return [{"id": f, **x} for f, x in flights.items()
                if (x["origin"], x["destination"], x["date"]) == (o, d, day)]

    if tier == "easy":
        rid = rng.choice(_active(db))
        uid = db["reservations"][rid]["user_id"]
        q = f"Please cancel my reservation {rid}."
        req = {"type": "cancel", "reservation_id": rid}
        goal = [["cancel", {"reservation_id": rid}]]
    elif tier == "medium":
        uid = rng.choice(list(db["users"]))
        f0 = flights[rng.choice(list(flights))]
        o, d, day = f0["origin"], f0["destination"], f0["date"]
        fid = _cheapest_free(listing(o, d, day))
        if fid is None or any(r["user_id"] == uid and r["flight_id"] == fid and r["status"] == "active"
                              for r in db["reservations"].values()):
            return None
        q = f"Book me the cheapest flight with free seats from {o} to {d} on {day}."
        req = {"type": "book", "user_id": uid, "origin": o, "destination": d, "date": day}
        goal = [["book", {"user_id": uid, "flight_id": fid}]]
    elif tier == "hard":
        rid = rng.choice(_active(db))
        r = db["reservations"][rid]
        uid, old = r["user_id"], flights[r["flight_id"]]
        days = sorted({x["date"] for x in flights.values()} - {old["date"]})
        day = rng.choice(days)
        fid = _cheapest_free(listing(old["origin"], old["destination"], day))
        if fid is None:
            return None
        q = f"Move my reservation {rid} to the cheapest flight with free seats on {day}."
        req = {"type": "change", "reservation_id": rid, "date": day}
        goal = [["change", {"reservation_id": rid, "new_flight_id": fid}]]
    else:
        raise ValueError(f"airline: unknown tier {tier!r}")
    name = db["users"][uid]["name"]
    return f"I am {name} (user {uid}). {q}", [], {"db": db, "goal": {"actions": goal}, "request": {**req, "user_id": uid}}


def sample_task(rng: random.Random, tier: str, seed: int) -> tuple[str, list[str], dict]:
    """(question, answers (empty: the goal is in meta), meta = {"db", "goal", "request"})."""
    while True:
        t = _try(rng, tier)
        if t is not None:
            return t


def run_expert(task: Task, env: ToolEnv, imperfection: float, rng: random.Random
               ) -> tuple[list[Message], float]:
    """Scripted demonstration that reads the real tool outputs (reservation route, flight list)
    and picks the cheapest flight with free seats, then closes with a short reply.

    With probability `imperfection` per decision the expert errs: replies without acting, acts on
    the wrong reservation or flight, writes a malformed call (then retries), or stops before the
    final action. Returns (messages, reward).
    """
    req = task.meta["request"]
    db0 = task.meta["db"]
    msgs = env.reset(task)
    # what the expert has learned from tool outputs so far decides the next action
    kind = req["type"]
    route: tuple[str, str] | None = None
    target: str | None = None
    listed: list[dict] = []
    finished = False
    turn = 0
    while True:
        turn += 1
        mistake = rng.choice(MISTAKES) if rng.random() < imperfection else None
        # next action from what is known so far
        if finished or env.max_turns - turn <= 0:
            call, think = None, "Done."
        elif kind == "cancel":
            rid = req["reservation_id"]
            if mistake == "wrong_arg":
                rid = rng.choice([r for r in db0["reservations"] if r != rid])
            call, think = ("cancel", {"reservation_id": rid}), f"Cancel {rid}."
        elif kind == "book" and target is None:
            call = ("search_flights", {"origin": req["origin"], "destination": req["destination"], "date": req["date"]})
            think = f"Find flights {req['origin']} to {req['destination']} on {req['date']}."
        elif kind == "change" and route is None:
            call, think = ("get_reservation", {"reservation_id": req["reservation_id"]}), "Look up the reservation."
        elif kind == "change" and target is None:
            call = ("search_flights", {"origin": route[0], "destination": route[1], "date": req["date"]})
            think = f"It is {route[0]} to {route[1]}. Find flights on {req['date']}."
        else:
            fid = target
            if mistake == "wrong_arg":
                others = [f["id"] for f in listed if f["id"] != target]
                fid = rng.choice(others or [f for f in db0["flights"] if f != target])
            if kind == "book":
                call = ("book", {"user_id": req["user_id"], "flight_id": fid})
            else:
                call = ("change", {"reservation_id": req["reservation_id"], "new_flight_id": fid})
            think = f"Cheapest with free seats: {target}." if fid == target else f"Take {fid}."
        if call is not None and mistake in ("no_tool", "stop_early"):
            call, think = None, "Done."
        if call is None:
            text = f"<think>{think}</think>\nAll done."
        else:
            c = format_tool_call(*call)
            if mistake == "malformed":
                c = c.replace('"}}', '"}', 1)
            text = f"<think>{think}</think>\n{c}"
        res = env.step(text)
        msgs.append({"role": "assistant", "content": text})
        msgs.extend(res.observations)
        if res.done:
            return msgs, res.reward
        if res.info["tool_errors"]:
            continue
        obs = res.observations[0]["content"]
        name = call[0]
        if name == "get_reservation":
            m = _RES_LINE.match(obs.strip())
            if m:
                route = (m.group(4), m.group(5))
        elif name == "search_flights":
            listed = parse_flights(obs)
            target = _cheapest_free(listed)
            if target is None:
                finished = True  # nothing bookable: give up (does not happen with generated tasks)
        elif name in ("cancel", "book", "change"):
            finished = True
