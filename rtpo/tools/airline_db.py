"""Airline tools over an in-memory database (the stateful env of paper §G.1, tau^3-Airline style).

Database (a plain JSON-able dict, so it can live in Task.meta and be snapshotted by deep copy)::

    {"users":        {"U1234": {"name": "Ana Reyes"}},
     "flights":      {"FL123": {"origin": "ORD", "destination": "SFO", "date": "2024-06-03",
                                "time": "09:15", "price": 240, "seats": 3}},   # seats = free seats
     "reservations": {"R10234": {"user_id": "U1234", "flight_id": "FL123", "status": "active"}}}

Every tool returns ``(text, ok)``: the observation shown to the model and whether the call
succeeded (``ok=False`` counts as a tool error). Invalid ids, full flights, cancelled
reservations, route mismatches, ... give an ``Error: ...`` text and leave the DB unchanged.
"""

from __future__ import annotations

import copy as _copy
import json
import re
from typing import Any

from rtpo.tools.parse import ToolCall, ToolSpec

__all__ = ["AIRLINE_SPECS", "AirlineDB", "check_db"]

AIRLINE_SPECS: dict[str, ToolSpec] = {s.name: s for s in [
    ToolSpec("search_flights", "list flights on a route and date", {
        "origin": "string", "destination": "string", "date": "string"}),
    ToolSpec("get_reservation", "show a reservation", {"reservation_id": "string"}),
    ToolSpec("book", "book a seat for a user", {"user_id": "string", "flight_id": "string"}),
    ToolSpec("cancel", "cancel a reservation", {"reservation_id": "string"}),
    ToolSpec("change", "move a reservation to another flight on the same route", {
        "reservation_id": "string", "new_flight_id": "string"}),
]}

_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def check_db(db: dict[str, Any]) -> None:
    """Raise ValueError naming the field when `db` does not follow the schema above."""
    for key in ("users", "flights", "reservations"):
        if not isinstance(db.get(key), dict):
            raise ValueError(f"airline DB: {key!r} must be a dict, got {type(db.get(key)).__name__}")
    for fid, f in db["flights"].items():
        for k in ("origin", "destination", "date", "time", "price", "seats"):
            if k not in f:
                raise ValueError(f"airline DB: flight {fid!r} lacks {k!r}")
    for rid, r in db["reservations"].items():
        for k in ("user_id", "flight_id", "status"):
            if k not in r:
                raise ValueError(f"airline DB: reservation {rid!r} lacks {k!r}")
        if r["flight_id"] not in db["flights"]:
            raise ValueError(f"airline DB: reservation {rid!r} refers to unknown flight {r['flight_id']!r}")


class AirlineDB:
    """Mutable airline state plus the five tools. `state()` is a deep copy (for snapshots).

    db:   the database dict (schema above); validated.
    copy: work on a deep copy (default) or, with False, mutate the given dict in place.
    """

    def __init__(self, db: dict[str, Any], copy: bool = True):
        check_db(db)
        self.db = _copy.deepcopy(db) if copy else db

    # ---- state ----------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        return _copy.deepcopy(self.db)

    def canonical(self) -> str:
        """A string that is equal for two DBs iff their users, flights and reservations are equal."""
        return json.dumps(self.db, sort_keys=True)

    def _route(self, fid: str) -> str:
        f = self.db["flights"][fid]
        return f"{f['origin']}->{f['destination']} {f['date']}"

    def _flight_line(self, fid: str) -> str:
        f = self.db["flights"][fid]
        return f"{fid} {self._route(fid)} {f['time']} ${f['price']} seats:{f['seats']}"

    def _new_reservation_id(self) -> str:
        nums = [int(r[1:]) for r in self.db["reservations"] if r[1:].isdigit()]
        return f"R{max(nums, default=10000) + 1}"

    # ---- tools ----------------------------------------------------------------------------
    def search_flights(self, origin: str, destination: str, date: str) -> tuple[str, bool]:
        if not _DATE.match(date):
            return f"Error: date {date!r} must look like 2024-06-03.", False
        o, d = origin.strip().upper(), destination.strip().upper()
        hits = sorted((f["time"], fid) for fid, f in self.db["flights"].items()
                      if f["origin"] == o and f["destination"] == d and f["date"] == date)
        if not hits:
            return f"No flights from {o} to {d} on {date}.", True
        return "\n".join(self._flight_line(fid) for _, fid in hits), True

    def get_reservation(self, reservation_id: str) -> tuple[str, bool]:
        r = self.db["reservations"].get(reservation_id)
        if r is None:
            return f"Error: no reservation {reservation_id}.", False
        return (f"{reservation_id} user {r['user_id']} flight {r['flight_id']} "
                f"{self._route(r['flight_id'])} status {r['status']}"), True

    def book(self, user_id: str, flight_id: str) -> tuple[str, bool]:
        if user_id not in self.db["users"]:
            return f"Error: no user {user_id}.", False
        f = self.db["flights"].get(flight_id)
        if f is None:
            return f"Error: no flight {flight_id}.", False
        for rid, r in self.db["reservations"].items():
            if r["user_id"] == user_id and r["flight_id"] == flight_id and r["status"] == "active":
                return f"Error: {user_id} already holds {rid} on {flight_id}.", False
        if f["seats"] <= 0:
            return f"Error: flight {flight_id} is full.", False
        rid = self._new_reservation_id()
        f["seats"] -= 1
        self.db["reservations"][rid] = {"user_id": user_id, "flight_id": flight_id, "status": "active"}
        return f"Booked {rid}: {user_id} on {flight_id} {self._route(flight_id)}.", True

    def cancel(self, reservation_id: str) -> tuple[str, bool]:
        r = self.db["reservations"].get(reservation_id)
        if r is None:
            return f"Error: no reservation {reservation_id}.", False
        if r["status"] != "active":
            return f"Error: {reservation_id} is already cancelled.", False
        r["status"] = "cancelled"
        self.db["flights"][r["flight_id"]]["seats"] += 1
        return f"Cancelled {reservation_id}.", True

    def change(self, reservation_id: str, new_flight_id: str) -> tuple[str, bool]:
        r = self.db["reservations"].get(reservation_id)
        if r is None:
            return f"Error: no reservation {reservation_id}.", False
        if r["status"] != "active":
            return f"Error: {reservation_id} is cancelled.", False
        new = self.db["flights"].get(new_flight_id)
        if new is None:
            return f"Error: no flight {new_flight_id}.", False
        if new_flight_id == r["flight_id"]:
            return f"Error: {reservation_id} is already on {new_flight_id}.", False
        old = self.db["flights"][r["flight_id"]]
        if (new["origin"], new["destination"]) != (old["origin"], old["destination"]):
            return (f"Error: {new_flight_id} flies {new['origin']}->{new['destination']}, not "
                    f"{old['origin']}->{old['destination']}.", False)
        if new["seats"] <= 0:
            return f"Error: flight {new_flight_id} is full.", False
        old["seats"] += 1
        new["seats"] -= 1
        r["flight_id"] = new_flight_id
        return f"Changed {reservation_id} to {new_flight_id} {self._route(new_flight_id)}.", True

    def execute(self, call: ToolCall) -> tuple[str, bool]:
        """Run a parsed call (its name and arguments already checked against AIRLINE_SPECS)."""
        if call.name not in AIRLINE_SPECS:
            return f"Error: unknown tool {call.name!r}.", False
        return getattr(self, call.name)(**call.arguments)
