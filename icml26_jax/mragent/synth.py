"""SynthMem [R]: a generated long-conversation memory benchmark in the LoCoMo schema (spec §Data).

Each conversation is between two speakers who talk, over 20-30 dated sessions, about a world
of ~30 other people: their pets (given away and adopted), moves between cities, jobs,
purchases, languages, siblings and dated events. Values change over time (people move and
change jobs twice). Most turns are filler, including distractors that share a person, a
place or a relation word with the facts. Every fact is said with one of >= 5 paraphrase
templates, usually with a relative time ("last Friday", "three weeks ago") that only
resolves against the session date.

Questions follow LoCoMo's categories (1 multi-hop, 2 temporal, 4 single-hop, 5 adversarial;
3 = knowledge-update [R]) with a finer ``qtype``. A multi-hop question names the *start* of a
chain ("the person who adopted Nadia's cat", "Omar's sibling") and asks for a value of the
hidden bridge person ("... live in now?"). The bridge's fact shares only a relation word with
the question, so similarity from the question cannot find it; only reading the first hop
reveals the bridge's name. For multi-hop items ``QA.evidence`` lists the hop turns in chain
order; ``evidence[1]`` is the bridge turn (used by :func:`bridge_hard_mask` and the evaluator
only; no reasoner, extractor or embedder ever reads gold evidence or answers).

Conversations ``0 .. n_dev-1`` are the dev split (calibration only); the rest are test.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from typing import NamedTuple

import numpy as np

from icml26_jax.mragent.schema import (NOT_MENTIONED, QA, Conversation, Session, Turn,
                                       dump_locomo, format_date, load_locomo)

NAMES = """Aaliyah Abel Ada Adrian Aisha Alba Alec Alma Amara Amir Anders Anika Anton Arlo Asha
Astrid Aurora Axel Beatriz Bianca Boris Bruno Calla Camila Carmen Cassius Celia Cyrus Dalia
Damon Dario Delphine Dmitri Edgar Elif Elio Elsa Emeka Enzo Esme Ezra Farah Felix Fiona Flora
Gideon Greta Hana Hugo Idris Ilse Imani Ines Ingrid Isla Ivan Jasper Jonah Jude Kaia Kasper
Keanu Kenji Kiara Lars Leila Lena Levi Lila Linus Lorenzo Lucia Magnus Maia Malik Marco Mateo
Maya Mila Milan Mira Nadia Nico Nika Noor Odette Olga Omar Orla Oscar Otto Paloma Pavel Petra
Priya Quinn Rafael Rania Remy Rhea Rosa Rufus Saanvi Sable Samir Selma Silas Sofia Soren
Stellan Tala Tariq Tessa Theo Tomas Uma Valentin Vera Viggo Wanda Xavi Yara Yusuf Zara Zeno
Zoltan""".split()
CITIES = """Porto Lisbon Madrid Seville Valencia Lyon Marseille Bordeaux Nantes Ghent Antwerp
Utrecht Leiden Bremen Leipzig Dresden Munich Zurich Geneva Basel Vienna Graz Prague Brno
Krakow Gdansk Vilnius Riga Tallinn Helsinki Tampere Bergen Oslo Uppsala Malmo Aarhus Dublin
Galway Cardiff Bristol Leeds York Glasgow Dundee Turin Bologna Verona Naples Palermo Zagreb
Split Ljubljana Athens Thessaloniki Varna Plovdiv Bucharest Cluj Budapest Debrecen""".split()
EMPLOYERS = """Acme Globex Initech Hooli Umbrella Cyberdyne Soylent Wayne Stark Tyrell Aperture
Vandelay Wonka Gringotts Monarch Oscorp Dunder Pied Prestige Vortex Zenith Nimbus Quasar
Halcyon Lumen Arcadia Boreal Cobalt Helix Kestrel Meridian Novacorp Orion Pinnacle Redwood
Sterling Tidewater Uplink Vertex Willowby""".split()
OBJECTS = """Kindle Vespa Polaroid Roomba Fitbit Peloton Nikon Gibson Segway Stratocaster Xbox
Walkman Instax Nespresso Vitamix Dyson Bose Sonos Garmin Leica Moleskine Tamagotchi Brompton
Kayak Theremin Ukulele Telescope Synthesizer Harp Drone Projector Typewriter Gramophone
Metronome Hammock Espresso Bonsai Aquarium Trampoline""".split()
PET_NAMES = """Milo Luna Biscuit Pepper Mochi Ziggy Nugget Pickle Waffles Clover Bean Olive
Pumpkin Sprout Tofu Maple Peanut Noodle Pixel Dumpling Juniper Whiskers Basil Cocoa Button
Sushi Tinker Hazel Marbles Fig""".split()
SPECIES = ("cat", "dog", "parrot", "rabbit", "hamster", "turtle")
EVENTS = """Riverside Marathon|Jazz Festival|Harvest Fair|Lantern Parade|Film Gala|Chess Open|
Poetry Slam|Robotics Expo|Pottery Fair|Salsa Night|Comic Convention|Wine Tasting|Book Fair|
Tango Festival|Kite Festival|Craft Beer Festival|Science Fair|Food Truck Rally|Rowing Regatta|
Opera Premiere|Trivia Championship|Cycling Tour|Photo Exhibition|Startup Pitch|Folk Concert|
Charity Gala|Dance Marathon|Art Biennale|Chili Cookoff|Garden Show""".replace("\n", "").split("|")
LANGUAGES = """Portuguese Italian Mandarin Japanese Swahili Korean Arabic Greek Turkish Polish
Dutch Finnish Hindi Icelandic Welsh""".split()
HOBBIES = ("hiking", "baking", "knitting", "gardening", "painting", "running", "climbing",
           "birdwatching", "yoga", "cooking", "cycling", "swimming", "reading", "surfing")

# Paraphrase templates (>= 5 per relation); {t} is a relative time (with a leading space) or "".
T_MOVE = ("{A} moved to {C}{t}.", "{A} relocated to {C}{t}.",
          "{A} packed up and settled in {C}{t}.", "{A} found a flat in {C} and moved there{t}.",
          "Have you heard about {A}? They moved to {C}{t}.",
          "{A} started a new life in {C}{t}.", "{A} now lives in {C} after moving{t}.")
T_JOB = ("{A} started working at {E}{t}.", "{A} joined {E}{t}.", "{A} got hired by {E}{t}.",
         "{A} accepted a job offer from {E}{t}.",
         "Guess what, {A} has a new job! They took a position at {E}{t}.")
T_BUY = ("{A} bought a {O}{t}.", "{A} finally got a {O}{t}.", "{A} picked up a new {O}{t}.",
         "{A} splurged on a {O}{t}.", "{A} ordered a {O} online{t}.")
T_PET = ("{O} has a {sp} named {P}.", "{O} got a {sp} called {P}{t}.",
         "{O} keeps posting photos of their {sp} {P}.", "{O}'s {sp} {P} is adorable.",
         "{O} spends every evening with their {sp} {P}.")
T_GIVE = ("{A} adopted {O}'s {sp} {P}{t}.", "{O} gave their {sp} {P} to {A}{t}.",
          "{O} could not keep {P} the {sp} anymore, so {A} took {P} in{t}.",
          "{P}, the {sp} that belonged to {O}, went home with {A}{t}.",
          "{A} welcomed {O}'s {sp} {P} home{t}.")
T_SIB = ("{A} and {B} are siblings.", "{B} is {A}'s younger sibling.",
         "{A}'s sibling {B} came to visit{t}.", "{A} grew up with their sibling {B}.",
         "{A} has a sibling named {B}.")
T_ATTEND = ("{A} went to the {V}{t}.", "{A} attended the {V}{t}.", "{A} was at the {V}{t}.",
            "{A} took part in the {V}{t}.", "{A} showed up at the {V}{t}.")
T_LEARN = ("{A} started learning {L}{t}.", "{A} is taking {L} lessons.",
           "{A} enrolled in a {L} course{t}.", "{A} has been practicing {L} every day.",
           "{A} can now order food in {L}.")
OPENERS = ("", "", "", "Oh, by the way, ", "Funny story: ", "You will never believe it. ",
           "Quick update: ")
# Filler [R]: small talk, and distractors that share a person, a place or a relation word.
F_SMALL = ("How was your weekend?", "Pretty good, thanks for asking!", "That sounds fun.",
           "I have been so busy with work lately.", "The weather has been awful this week.",
           "Did you watch the game last night?", "I tried a new recipe yesterday.",
           "Haha, that is so typical.", "I need a vacation soon.", "Same here, honestly.",
           "I love {h}, it clears my head.", "I have been getting into {h} again.",
           "We should go {h} together sometime.", "Do you still do {h}?",
           "That reminds me of our trip last year.", "Wow, I did not expect that!",
           "Let me know how it goes.", "I slept terribly last night.",
           "Coffee first, then we talk.", "Work has been crazy lately.")
F_DISTRACT = ("{A} says hi, by the way.", "I had lunch with {A}{t}.",
              "{A} recommended a great book to me.", "{A} keeps talking about moving somewhere "
              "warmer.", "{A} wants to buy something fancy.", "I ran into {A} at the market.",
              "{C} is beautiful in spring, I heard.", "I would love to visit {C} someday.",
              "Moving is so stressful.", "I want to buy a new phone.",
              "{A} was complaining about their job.", "Pets are so much work.",
              "{A} called me{t}.", "We should take a trip to {C}.",
              "{A} is always late to everything.")


VERSION = 1  # bump when the generator changes: cached benchmarks are keyed by it


class Fact(NamedTuple):
    kind: str
    args: dict
    session: int  # 0-based session index where it is said
    day: dt.date  # when it happened (resolved date)
    turn: str = ""  # dia_id once placed


def _rel_time(rng, session_date: dt.date, allow_none: bool = True):
    """A relative time phrase and the date it resolves to against the session date."""
    kind = rng.integers(0, 9 if allow_none else 8)
    if kind == 0:
        return " yesterday", session_date - dt.timedelta(days=1)
    if kind == 1:
        n = int(rng.integers(2, 6))
        words = {2: "two", 3: "three", 4: "four", 5: "five"}
        return f" {words[n]} days ago", session_date - dt.timedelta(days=n)
    if kind == 2:
        return " last week", session_date - dt.timedelta(weeks=1)
    if kind == 3:
        n = int(rng.integers(2, 4))
        return f" {'two' if n == 2 else 'three'} weeks ago", session_date - dt.timedelta(weeks=n)
    if kind in (4, 5):
        target = int(rng.integers(0, 7))
        back = (session_date.weekday() - target) % 7 or 7
        name = dt.date(2024, 1, 1 + target).strftime("%A")  # 2024-01-01 is a Monday
        return f" last {name}", session_date - dt.timedelta(days=back)
    if kind == 6:
        d = session_date - dt.timedelta(days=int(rng.integers(8, 40)))
        return f" on {d.day} {d.strftime('%B')}", d
    if kind == 7:
        return " today", session_date
    return "", session_date


def _pick(rng, seq):
    return seq[int(rng.integers(0, len(seq)))]


def _world(rng, cfg, dates):
    """The facts of one conversation (who did what in which session), unplaced."""
    n_s = len(dates)
    perm = lambda seq: [str(x) for x in rng.permutation(seq)]  # noqa: E731
    names = perm(NAMES)
    speakers, people = tuple(names[:2]), names[2:2 + int(cfg.persons)]
    cities, employers, objects = perm(CITIES), perm(EMPLOYERS), perm(OBJECTS)
    pets, events, langs = perm(PET_NAMES), perm(EVENTS), perm(LANGUAGES)
    facts: list[Fact] = []

    def fact(kind, args, lo=0, hi=n_s, timed=True, need_time=False):
        s = int(rng.integers(lo, max(lo + 1, hi)))
        s = min(s, n_s - 1)
        if timed:
            t, d = _rel_time(rng, dates[s], allow_none=not need_time)
        else:
            t, d = "", dates[s]
        args = dict(args, t=t)
        facts.append(Fact(kind, args, s, d))
        return facts[-1]

    for p in people:
        n_moves = int(rng.choice([0, 1, 1, 2, 2]))
        slots = sorted(rng.choice(n_s, size=n_moves, replace=False)) if n_moves else []
        for s in slots:
            fact("move", {"A": p, "C": cities.pop()}, s, s + 1)
        n_jobs = int(rng.choice([0, 1, 1, 2]))
        slots = sorted(rng.choice(n_s, size=n_jobs, replace=False)) if n_jobs else []
        for s in slots:
            fact("job", {"A": p, "E": employers.pop() if employers else _pick(rng, EMPLOYERS)},
                 s, s + 1)
        for _ in range(int(rng.choice([0, 1, 1, 2]))):
            if objects:
                fact("buy", {"A": p, "O": objects.pop()})
        if rng.random() < 0.4 and events:
            fact("attend", {"A": p, "V": events.pop()}, need_time=True)
        if rng.random() < 0.3 and langs:
            fact("learn", {"A": p, "L": langs.pop()})
    for sp in speakers:  # the speakers' own news, told in the first person
        for _ in range(int(cfg.speaker_facts)):
            kind = ("buy", "attend", "learn", "move", "move")[int(rng.integers(0, 5))]
            if kind == "move":
                fact("move", {"A": sp, "C": cities.pop()})
            elif kind == "buy" and objects:
                fact("buy", {"A": sp, "O": objects.pop()})
            elif kind == "attend" and events:
                fact("attend", {"A": sp, "V": events.pop()}, need_time=True)
            elif kind == "learn" and langs:
                fact("learn", {"A": sp, "L": langs.pop()})
    order = [str(x) for x in rng.permutation(people)]
    for i in range(int(cfg.sibling_pairs)):
        a, b = order[2 * i], order[2 * i + 1]
        fact("sibling", {"A": a, "B": b}, timed=True)
    owners = order[2 * int(cfg.sibling_pairs):]
    for i in range(int(cfg.pets)):
        o = owners[i % len(owners)]
        adopter = _pick(rng, [p for p in people if p != o])
        sp, name = SPECIES[int(rng.integers(0, len(SPECIES)))], pets.pop()
        intro = fact("pet", {"O": o, "sp": sp, "P": name}, 0, max(1, n_s // 2), timed=False)
        fact("give", {"O": o, "sp": sp, "P": name, "A": adopter}, intro.session + 1, n_s,
             need_time=True)
    return speakers, people, cities, facts


_TEMPLATES = {"move": T_MOVE, "job": T_JOB, "buy": T_BUY, "pet": T_PET, "give": T_GIVE,
              "sibling": T_SIB, "attend": T_ATTEND, "learn": T_LEARN}


def _say(rng, f: Fact, speaker: str, speakers) -> str:
    """The fact as a turn of ``speaker``: a paraphrase template, the relative time, an opener.
    A fact about one of the speakers is said in the first person ("I bought ...") by that
    speaker and in the second person ("you bought ...") by the other one."""
    tpls = _TEMPLATES[f.kind]
    who = f.args.get("A")
    own = who in speakers
    if own:  # "I is taking ..." does not parse: only past-tense / modal templates
        tpls = [x for x in tpls if not any(f"{{A}} {v} " in x for v in ("is", "was", "has"))]
    tpl = _pick(rng, tpls)
    if "{t}" not in tpl and f.args["t"]:  # a template without a time slot: keep the day exact
        tpl = _pick(rng, [x for x in tpls if "{t}" in x])
    args = dict(f.args)
    if own:
        args["A"] = "I" if who == speaker else "you"
    text = tpl.format(**args)
    text = text[0].upper() + text[1:]
    opener = _pick(rng, OPENERS)
    starts_with_name = text.startswith("I ") or any(
        text.startswith(str(v)) for k, v in args.items() if v and k != "t")
    if opener.endswith(", ") and not starts_with_name:
        text = text[0].lower() + text[1:]  # "Oh, by the way, have you heard ..."
    return opener + text


def _filler(rng, people, cities, date) -> str:
    if rng.random() < 0.45:
        t, _ = _rel_time(rng, date)
        return _pick(rng, F_DISTRACT).format(A=_pick(rng, people), C=_pick(rng, cities), t=t)
    return _pick(rng, F_SMALL).format(h=_pick(rng, HOBBIES))


def _current(facts, kind, person, key):
    """The latest value of a changing relation (by resolved day, then session)."""
    fs = [f for f in facts if f.kind == kind and f.args["A"] == person]
    if not fs:
        return None
    return max(fs, key=lambda f: (f.day, f.session))


def _questions(rng, cfg, facts, people, speakers) -> list[QA]:
    by = lambda kind: [f for f in facts if f.kind == kind]  # noqa: E731
    sib = {}
    for f in by("sibling"):
        sib[f.args["A"]], sib[f.args["B"]] = (f.args["B"], f), (f.args["A"], f)
    buys = {}
    for f in by("buy"):
        buys.setdefault(f.args["A"], []).append(f)
    qa: list[QA] = []

    def has(kind, p):
        return any(f.kind == kind and f.args["A"] == p for f in facts)

    def tail(person, intro, chain):
        """Questions about a hidden person: (question, answer, fact). A relation is asked
        only when no earlier person of the chain has it, so the only value that answers
        the question is the bridge's (never the named anchor's own). Only relations with a
        typed answer (a city, a company) are chained: a "thing" answer would collide with
        the pet named in the first hop."""
        out = []
        mv = _current(facts, "move", person, "C")
        if mv is not None and not any(has("move", p) for p in chain):
            out.append((f"Which city does {intro} live in now?", mv.args["C"], mv))
        jb = _current(facts, "job", person, "E")
        if jb is not None and not any(has("job", p) for p in chain):
            out.append((f"Which company does {intro} work for now?", jb.args["E"], jb))
        return out

    # Multi-hop (1): adopter chains, sibling chains and adopter -> sibling chains.
    multi = []
    for g in by("give"):
        intro = f"the person who adopted {g.args['O']}'s {g.args['sp']}"
        a = g.args["A"]
        for q, ans, f in tail(a, intro, [g.args["O"]]):
            multi.append(QA(q, ans, (g.turn, f.turn), 1, "multi_hop_2"))
        if a in sib:
            b, sf = sib[a]
            for q, ans, f in tail(b, f"the sibling of {intro}", [g.args["O"], a]):
                multi.append(QA(q, ans, (g.turn, sf.turn, f.turn), 1, "multi_hop_3"))
    for a, (b, sf) in sorted(sib.items()):
        for q, ans, f in tail(b, f"{a}'s sibling", [a]):
            multi.append(QA(q, ans, (sf.turn, f.turn), 1, "multi_hop_2"))
    qa += multi  # every chain: the hardness filter picks the bridge-hard ones
    # Single-hop (4).
    single = []
    for g in by("give"):
        single.append(QA(f"Who adopted {g.args['O']}'s {g.args['sp']}?", g.args["A"], (g.turn,),
                         4, "single_hop"))
    for f in by("pet"):
        single.append(QA(f"What is the name of {f.args['O']}'s {f.args['sp']}?", f.args["P"],
                         (f.turn,), 4, "single_hop"))
    for p, fs in sorted(buys.items()):
        if len(fs) == 1 and p not in speakers:
            single.append(QA(f"What did {p} buy?", fs[0].args["O"], (fs[0].turn,), 4,
                             "single_hop"))
    for f in by("learn"):
        if f.args["A"] in speakers:
            continue
        single.append(QA(f"Which language is {f.args['A']} learning?", f.args["L"], (f.turn,),
                         4, "single_hop"))
    for f in by("sibling"):
        single.append(QA(f"Who is {f.args['A']}'s sibling?", f.args["B"], (f.turn,), 4,
                         "single_hop"))
    idx = rng.permutation(len(single))[: int(cfg.max_single_hop)]
    qa += [single[i] for i in sorted(idx)]
    # Temporal (2): dated events and adoptions, answered "7 May 2023".
    temporal = []
    for f in by("attend"):
        if f.args["A"] in speakers:
            continue
        temporal.append(QA(f"When did {f.args['A']} attend the {f.args['V']}?", format_date(f.day),
                     (f.turn,), 2, "temporal"))
    for g in by("give"):
        temporal.append(QA(f"When did {g.args['A']} adopt {g.args['O']}'s {g.args['sp']}?",
                     format_date(g.day), (g.turn,), 2, "temporal"))
    idx = rng.permutation(len(temporal))[: int(cfg.max_temporal)]
    qa += [temporal[i] for i in sorted(idx)]
    # Knowledge update (3): values that changed.
    update = []
    for p in people:
        for kind, key, q in (("move", "C", f"Where does {p} live now?"),
                             ("job", "E", f"Which company does {p} work for now?")):
            fs = [f for f in facts if f.kind == kind and f.args["A"] == p]
            if len(fs) >= 2:
                cur = _current(facts, kind, p, key)
                update.append(QA(q, cur.args[key], tuple(f.turn for f in fs), 3,
                                 "knowledge_update"))
    idx = rng.permutation(len(update))[: int(cfg.max_update)]
    qa += [update[i] for i in sorted(idx)]
    # About the speakers themselves (LoCoMo asks mostly these): every one is asked. Their cues
    # own every first-person sentence, hundreds of contents.
    for sp in speakers:
        if len(buys.get(sp, [])) == 1:
            qa.append(QA(f"What did {sp} buy?", buys[sp][0].args["O"], (buys[sp][0].turn,), 4,
                         "single_hop_speaker"))
        learns = [f for f in by("learn") if f.args["A"] == sp]
        if len(learns) == 1:
            qa.append(QA(f"Which language is {sp} learning?", learns[0].args["L"],
                         (learns[0].turn,), 4, "single_hop_speaker"))
        for f in by("attend"):
            if f.args["A"] == sp:
                qa.append(QA(f"When did {sp} attend the {f.args['V']}?", format_date(f.day),
                             (f.turn,), 2, "temporal_speaker"))
        moves = [f for f in facts if f.kind == "move" and f.args["A"] == sp]
        if moves:
            cur = _current(facts, "move", sp, "C")
            qa.append(QA(f"Where does {sp} live now?", cur.args["C"],
                         tuple(f.turn for f in moves), 3, "knowledge_update_speaker"))
    # Adversarial (5): plausible questions about things never said.
    adv = []
    owned = {(f.args["O"], f.args["sp"]) for f in by("pet")}
    attended = {(f.args["A"], f.args["V"]) for f in by("attend")}
    for p in people:
        if p not in buys:
            adv.append(QA(f"What did {p} buy?", NOT_MENTIONED, (), 5, "adversarial"))
        if p not in sib:
            adv.append(QA(f"Which city does {p}'s sibling live in now?", NOT_MENTIONED, (), 5,
                          "adversarial"))
        sp = SPECIES[int(rng.integers(0, len(SPECIES)))]
        if (p, sp) not in owned:
            adv.append(QA(f"Who adopted {p}'s {sp}?", NOT_MENTIONED, (), 5, "adversarial"))
    for f in by("attend"):
        other = _pick(rng, [p for p in people if (p, f.args["V"]) not in attended])
        adv.append(QA(f"When did {other} attend the {f.args['V']}?", NOT_MENTIONED, (), 5,
                      "adversarial"))
    idx = rng.permutation(len(adv))[: int(cfg.adversarial)]
    qa += [adv[i] for i in sorted(idx)]
    return qa


def _conversation(cfg, seed: int, i: int) -> Conversation:
    rng = np.random.default_rng([int(seed), 7919, i])
    n_s = int(rng.integers(cfg.sessions[0], cfg.sessions[1] + 1))
    start = dt.date(2022, 1, 3) + dt.timedelta(days=int(rng.integers(0, 365)))
    dates, d = [], start
    for _ in range(n_s):
        dates.append(d)
        d = d + dt.timedelta(days=int(rng.integers(5, 15)))
    speakers, people, cities, facts = _world(rng, cfg, dates)
    # Place facts in their sessions (a fact turn per fact), fill the rest, assign dia_ids.
    by_session = [[] for _ in range(n_s)]
    for j, f in enumerate(facts):
        by_session[f.session].append(j)
    sessions, placed = [], list(facts)
    for s in range(n_s):
        n_t = max(int(rng.integers(cfg.turns[0], cfg.turns[1] + 1)), len(by_session[s]) + 2)
        slots = sorted(rng.choice(np.arange(1, n_t), size=len(by_session[s]), replace=False))
        order = list(rng.permutation(by_session[s]))
        turns = []
        for t in range(n_t):
            dia = f"D{s + 1}:{t + 1}"
            if t in slots:
                j = order[slots.index(t)]
                text = _say(rng, facts[j], speakers[t % 2], speakers)
                placed[j] = facts[j]._replace(turn=dia)
            else:
                text = _filler(rng, people, cities, dates[s])
            turns.append(Turn(dia, speakers[t % 2], text))
        sessions.append(Session(s + 1, dates[s], tuple(turns)))
    qa = _questions(rng, cfg, placed, people, speakers)
    return Conversation(f"synthmem-{seed}-{i:02d}", speakers, tuple(sessions), tuple(qa))


def generate(cfg, seed: int) -> list[Conversation]:
    """``cfg.n_conversations`` SynthMem conversations, deterministic from ``seed``.

    ``cfg`` fields: ``n_conversations``, ``sessions`` (min, max), ``turns`` (min, max),
    ``persons``, ``pets``, ``sibling_pairs``, ``speaker_facts`` (news about each speaker,
    told in the first person) and the per-conversation question caps
    ``max_single_hop``, ``max_temporal``, ``max_update``, ``adversarial`` (every multi-hop
    chain of the world is asked).
    """
    for name in ("n_conversations", "persons", "pets", "sibling_pairs"):
        if int(cfg[name]) < 1:
            raise ValueError(f"synth.{name} must be >= 1, got {cfg[name]}")
    if int(cfg.persons) < 2 * int(cfg.sibling_pairs) + 2:
        raise ValueError(f"synth.persons ({cfg.persons}) must be >= 2 * synth.sibling_pairs + 2")
    if int(cfg.persons) > len(NAMES) - 2:
        raise ValueError(f"synth.persons must be <= {len(NAMES) - 2}, got {cfg.persons}")
    for name in ("sessions", "turns"):
        lo, hi = (int(v) for v in cfg[name])
        if not 1 <= lo <= hi:
            raise ValueError(f"synth.{name} must be (min, max) with 1 <= min <= max, got "
                             f"{tuple(cfg[name])}")
    return [_conversation(cfg, seed, i) for i in range(int(cfg.n_conversations))]


def load_or_generate(cfg, seed: int, workdir: str | os.PathLike) -> list[Conversation]:
    """:func:`generate`, cached as LoCoMo JSON in ``workdir`` (keyed by the config and seed)."""
    import hashlib
    key = hashlib.sha1(json.dumps({k: (list(v) if isinstance(v, tuple) else v)
                                   for k, v in sorted(cfg.items())} |
                                  {"seed": int(seed), "version": VERSION},
                                  sort_keys=True).encode()).hexdigest()[:12]
    path = os.path.join(os.fspath(workdir), f"synthmem_{key}.json")
    if os.path.exists(path):
        return load_locomo(path)
    convs = generate(cfg, seed)
    os.makedirs(os.fspath(workdir), exist_ok=True)
    tmp = path + ".tmp"
    dump_locomo(convs, tmp)
    os.replace(tmp, path)
    return load_locomo(path)  # the same objects a user's file would give


def _template_regex(tpl: str) -> re.Pattern:
    parts = re.split(r"(\{[a-zA-Z]+\})", tpl)
    return re.compile("".join(".*?" if p.startswith("{") else re.escape(p) for p in parts))


_FILLER_RES = [_template_regex(t) for t in F_SMALL + F_DISTRACT]


def filler_share(convs) -> float:
    """Share of turns that are small talk or distractors (no fact): spec target 60-70 %."""
    turns = [t.text for c in convs for t in c.turns()]
    filler = sum(any(r.fullmatch(x) for r in _FILLER_RES) for x in turns)
    return filler / max(len(turns), 1)


def bridge_hard_mask(convs, graphs, embedder, k: int = 20) -> list[np.ndarray]:
    """Per conversation, a bool per QA: a multi-hop question whose bridge turn
    (``evidence[1]``) is outside both the dense top-``k`` and the BM25 top-``k`` contents
    under the run's embedder (spec §Data "Bridge-hard"). Reads gold evidence: for the
    evaluator and the hardness filter only."""
    from icml26_jax.mragent import baselines
    from icml26_jax.mragent.types import QueryPlan

    out = []
    for conv, g in zip(convs, graphs):
        qs = [q.question for q in conv.qa]
        embs = embedder.encode(qs) if qs else np.zeros((0, g.content_emb.shape[1]))
        mask = np.zeros(len(conv.qa), bool)
        for i, (q, e) in enumerate(zip(conv.qa, embs)):
            if q.category != 1 or len(q.evidence) < 2:
                continue
            plan = QueryPlan(q.question, e, ())
            got = set(baselines.dense_topk(g, plan, k).ids) | set(baselines.bm25_topk(g, plan,
                                                                                      k).ids)
            turns = {g.content_id[j].split("-")[0] for j in got}
            mask[i] = q.evidence[1] not in turns
        out.append(mask)
    return out
