"""The embedded search env's world: a generated knowledge base of fictional films, people,
studios, cities and countries, one per seed (~600 short passages), e.g.::

    Silver Harbor is a 1987 film directed by Maren Vosley and produced by Kestrel Pictures.
    Maren Vosley is a director born in Tarnwick who works for Cobalt Media.

Its passages are the corpus the search tool indexes for an embedded task (task meta "corpus_seed",
`rtpo.envs.search_env.index_for_task`); `rtpo.data.search_tasks` asks 2-4 hop questions about it
and its scripted expert answers them. Distractors are similar names: sequels ("Silver Harbor II"),
studios sharing a word, towns "New Tarnwick" next to "Tarnwick", people sharing a first or last name.
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass, field

__all__ = ["KB", "build_kb", "build_corpus"]

_COUNTRIES = ["Velaria", "Ostrenia", "Kaldor", "Mirevia", "Brunmark", "Sorvania", "Eldmoor",
              "Tavaria", "Quessia", "Norvale", "Calmora", "Drevonia", "Ilvaria", "Zantor", "Pellan",
              "Rusvik"]
_CITY_A = ["Tarn", "Old", "Ash", "Bel", "Crest", "Dor", "Elm", "Fair", "Glen", "Hart", "Kings",
           "Lake", "Marl", "Pen", "Red", "Stone", "West", "Wynd", "Brae", "Cold"]
_CITY_B = ["wick", "bridge", "ford", "haven", "mouth", "field", "stead", "port", "dale", "borough"]
_CO_A = ["Kestrel", "Falcon", "Beacon", "Cobalt", "Juniper", "Meridian", "Northstar", "Oakline",
         "Pinnacle", "Quarry", "Redwood", "Saffron", "Tandem", "Umber", "Vantage", "Willow",
         "Zephyr", "Atlas", "Bluefin", "Harrow"]
_CO_B = ["Pictures", "Studios", "Media", "Films", "Entertainment"]
_FIRST = ["Maren", "Ivo", "Tessa", "Oren", "Lida", "Caspar", "Nila", "Edda", "Rolf", "Sanne",
          "Bram", "Yara", "Tobin", "Elsa", "Milo", "Runa", "Anselm", "Greta", "Jonas", "Liv",
          "Petra", "Emil", "Hanna", "Viggo", "Ilse", "Otto", "Freya", "Lukas", "Mira", "Sven"]
_LAST_A = ["Vos", "Hal", "Mer", "Tor", "Bren", "Kal", "Dun", "Fen", "Gar", "Lind", "Ost", "Rav",
           "Sel", "Thal", "Wen", "Ald", "Cor", "Hed", "Mar", "Ber"]
_LAST_B = ["ley", "den", "rick", "mond", "holt", "berg", "ton", "ford", "mere", "lund", "gard",
           "vik", "by", "well", "strom"]
_ADJ = ["Silver", "Hidden", "Broken", "Golden", "Silent", "Crimson", "Distant", "Frozen", "Burning",
        "Quiet", "Hollow", "Bitter", "Gentle", "Wild", "Last", "Lost", "Northern", "Empty", "Bright",
        "Falling", "Paper", "Iron", "Glass", "Velvet", "Scarlet", "Lonely", "Secret", "Endless",
        "Sleeping", "Painted"]
_NOUN = ["Harbor", "River", "Garden", "Winter", "Mirror", "Lantern", "Horizon", "Orchard", "Valley",
         "Tide", "Signal", "Promise", "Kingdom", "Letter", "Shadow", "Bridge", "Island", "Season",
         "Compass", "Meadow", "Canyon", "Echo", "Station", "Voyage", "Portrait", "Storm", "Citadel",
         "Ember", "Anthem", "Summer"]
_JOBS = ["director", "producer", "writer", "actor", "editor"]



@dataclass
class KB:
    """The generated knowledge base. entities: name -> {"type", relation: object name, ...}."""

    seed: int
    entities: dict[str, dict] = field(default_factory=dict)
    passages: list[dict] = field(default_factory=list)

    def of_type(self, t: str) -> list[str]:
        return [n for n, e in self.entities.items() if e["type"] == t]


def _unique(rng: random.Random, make, n: int, taken: set[str]) -> list[str]:
    out = []
    while len(out) < n:
        name = make()
        if name not in taken:
            taken.add(name)
            out.append(name)
    return out


@functools.lru_cache(maxsize=8)
def build_kb(seed: int, n_films: int = 300, n_people: int = 150, n_companies: int = 40,
             n_cities: int = 40, n_countries: int = 10) -> KB:
    """Deterministic KB for `seed` (cached; treat the result as read-only)."""
    rng = random.Random(f"rtpo-search-kb-{seed}")
    taken: set[str] = set()
    countries = rng.sample(_COUNTRIES, n_countries)
    taken.update(countries)
    n_new = n_cities // 7  # "New X" towns next to X: similar-name distractors
    cities = _unique(rng, lambda: rng.choice(_CITY_A) + rng.choice(_CITY_B), n_cities - n_new, taken)
    cities += [f"New {c}" for c in rng.sample(cities, n_new)]
    companies = _unique(rng, lambda: f"{rng.choice(_CO_A)} {rng.choice(_CO_B)}", n_companies, taken)
    people = _unique(rng, lambda: f"{rng.choice(_FIRST)} {rng.choice(_LAST_A)}{rng.choice(_LAST_B)}",
                     n_people, taken)
    n_seq = n_films // 8  # sequels "X II": near-duplicate titles
    films = _unique(rng, lambda: f"{rng.choice(_ADJ)} {rng.choice(_NOUN)}", n_films - n_seq, taken)
    films += [f"{f} II" for f in rng.sample(films, n_seq)]

    kb = KB(seed)
    texts = []
    for c in countries:
        kb.entities[c] = {"type": "country"}
    for c in cities:
        kb.entities[c] = {"type": "city", "country": rng.choice(countries)}
        texts.append((c, f"{c} is a city in {kb.entities[c]['country']}."))
    for c in companies:
        kb.entities[c] = {"type": "company", "hq": rng.choice(cities), "founder": rng.choice(people)}
        texts.append((c, f"{c} is a studio based in {kb.entities[c]['hq']}, founded by {kb.entities[c]['founder']}."))
    for p in people:
        job = rng.choice(_JOBS)
        kb.entities[p] = {"type": "person", "birthplace": rng.choice(cities), "employer": rng.choice(companies)}
        art = "an" if job[0] in "aeiou" else "a"
        texts.append((p, f"{p} is {art} {job} born in {kb.entities[p]['birthplace']} who works for "
                         f"{kb.entities[p]['employer']}."))
    directors = people[: max(1, (2 * n_people) // 3)]
    for f in films:
        kb.entities[f] = {"type": "film", "director": rng.choice(directors), "studio": rng.choice(companies)}
        year = rng.randint(1950, 2020)
        texts.append((f, f"{f} is a {year} film directed by {kb.entities[f]['director']} and produced by "
                         f"{kb.entities[f]['studio']}."))
    rng.shuffle(texts)  # ids carry no type information (ids break BM25 ties)
    kb.passages = [{"id": f"kb{seed}-{i:05d}", "title": t, "text": x} for i, (t, x) in enumerate(texts)]
    return kb


def build_corpus(seed: int) -> list[dict]:
    """The KB's passages [{"id", "title", "text"}] (a fresh list of fresh dicts)."""
    return [dict(p) for p in build_kb(seed).passages]
