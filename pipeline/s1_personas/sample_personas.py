"""Seed personas: a built-in attribute sampler and a streaming PersonaHub JSONL loader."""

from __future__ import annotations

import heapq
import json
import random
from collections.abc import Iterator
from pathlib import Path

from pipeline.catalog import load_taxonomy
from pipeline.config import DataFileError
from pipeline.rng import derive_rng, derive_seed
from schemas.catalog import Taxonomy, Weighted
from schemas.config import PersonaSettings
from schemas.ids import stable_id
from schemas.persona import Persona, PersonaSeed, SeedAttributes, Style


class SeedFileError(DataFileError):
    """A PersonaHub file is malformed; the message is ``file:line: what is wrong``."""


def sample_personas(n: int, *, run_seed: int, settings: PersonaSettings) -> list[PersonaSeed]:
    """``n`` seeds in a stable order: seed i is the same whatever ``n`` is."""
    if n < 1:
        raise ValueError(f"n_personas must be at least 1, got {n}")
    if settings.source == "personahub":
        return load_personahub(Path(settings.personahub_path or ""), n, run_seed=run_seed)
    taxonomy = load_taxonomy()
    return [sample_builtin_seed(i, run_seed=run_seed, taxonomy=taxonomy) for i in range(n)]


def _pick(rng: random.Random, options: list) -> object:
    return rng.choices(options, weights=[o.weight for o in options], k=1)[0]


def _pick_distinct(rng: random.Random, options: list[Weighted], k: int) -> list[str]:
    pool, out = list(options), []
    while pool and len(out) < k:
        choice = _pick(rng, pool)
        pool.remove(choice)
        out.append(choice.value)
    return out


def sample_builtin_seed(index: int, *, run_seed: int, taxonomy: Taxonomy) -> PersonaSeed:
    """Draw structured attributes from the taxonomy's weights and describe them in one sentence.

    Life stage, occupation and household are drawn consistent with each other and the age (no retiree
    with a job, no student halls at 70), so the initial life state they imply is consistent too."""
    rng = derive_rng(run_seed, "builtin_seed", index)
    band = _pick(rng, taxonomy.age_bands)
    age = rng.randint(band.min, band.max)
    gender = _pick(rng, taxonomy.gender_identities).value
    stages = [s for s in taxonomy.life_stages if s.min_age <= age <= s.max_age] or taxonomy.life_stages
    stage = _pick(rng, stages)
    by_age = [o for o in taxonomy.occupations if o.min_age <= age <= o.max_age] or taxonomy.occupations
    jobs = [o for o in by_age if (not stage.occupation_groups or o.group in stage.occupation_groups)
            and o.group not in stage.excluded_groups] or by_age
    job = _pick(rng, jobs)
    homes = [h for h in taxonomy.households if h.min_age <= age <= h.max_age]
    fitting = [h for h in homes if not stage.households or h.value in stage.households] or homes or taxonomy.households
    if job.group == "home":  # a stay-at-home parent lives with children; where the stage allows none, another job
        with_children = [h for h in fitting if "children" in h.value]
        if with_children:
            fitting = with_children
        else:
            job = _pick(rng, [o for o in jobs if o.group != "home"] or [o for o in by_age if o.group != "home"])
    household = _pick(rng, fitting).value
    attrs = SeedAttributes(
        age=age,
        age_band=band.band,
        gender_identity=gender,
        location=_pick(rng, taxonomy.regions).value,
        occupation=job.value,
        occupation_group=job.group,
        life_stage=stage.value,
        household=household,
        values=_pick_distinct(rng, taxonomy.values, 2),
        hobbies=_pick_distinct(rng, taxonomy.hobbies, 3),
    )
    return PersonaSeed(index=index, source="builtin", text=describe(attrs), attributes=attrs)


def describe(a: SeedAttributes) -> str:
    """A one-sentence seed description of structured attributes."""
    stage = (a.life_stage or "").replace("_", " ")
    hobbies = ", ".join(a.hobbies[:-1]) + f" and {a.hobbies[-1]}" if len(a.hobbies) > 1 else "".join(a.hobbies)
    return (
        f"A {a.age}-year-old {a.gender_identity} working as {_article(a.occupation or 'person')} in {a.location} "
        f"({stage}, {a.household}) who values {' and '.join(a.values)} and enjoys {hobbies}."
    )


def _article(noun: str) -> str:
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"


def normalize(text: str) -> str:
    return " ".join(text.split()).casefold()


MAX_SEED_CHARS = 2000  # PersonaHub's personas are one or two sentences; a longer seed floods every prompt


def iter_personahub(path: Path) -> Iterator[tuple[int, str]]:
    """Yield (line number, persona text) for every non-blank line; malformed lines raise file:line."""
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise SeedFileError(f"{path}: cannot open ({exc.strerror})") from exc
    with handle:
        for lineno, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            yield lineno, _parse_line(path, lineno, raw)


def _parse_line(path: Path, lineno: int, raw: bytes) -> str:
    where = f"{path}:{lineno}"
    try:
        line = raw.decode("utf-8").strip()
    except UnicodeDecodeError as exc:
        raise SeedFileError(f"{where}: not UTF-8 text (byte {exc.start})") from exc
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        # json's own messages may end in "at" ("Unterminated string starting at"): say the column once
        raise SeedFileError(f"{where}: invalid JSON ({exc.msg.removesuffix(' at')} at column {exc.colno})") from exc
    if not isinstance(record, dict) or "persona" not in record:
        raise SeedFileError(f"{where}: missing key \"persona\"")
    text = record["persona"]
    if not isinstance(text, str) or not text.strip():
        raise SeedFileError(f"{where}: \"persona\" must be a non-empty string")
    text = " ".join(text.split())
    if len(text) > MAX_SEED_CHARS:
        raise SeedFileError(f"{where}: \"persona\" is {len(text):,} characters; at most {MAX_SEED_CHARS:,} "
                            "(a persona is a sentence or a short paragraph)")
    return text


def load_personahub(path: Path, n: int, *, run_seed: int) -> list[PersonaSeed]:
    """Seeded sampling without replacement, deduplicated, in one streaming pass (bottom-k by hash).

    Every line gets a priority hashed from (run seed, normalized text); the ``n`` lowest win and are
    returned lowest first, so the first k seeds are the same for any ``n >= k``.
    """
    heap: list[tuple[int, str, int, str]] = []  # (-priority, key, line, text): a max-heap of the n best
    kept: set[str] = set()
    lines = 0
    for lineno, text in iter_personahub(path):
        lines += 1
        key = normalize(text)
        if key in kept:
            continue
        entry = (-derive_seed(run_seed, "personahub", key), key, lineno, text)
        if len(heap) < n:
            heapq.heappush(heap, entry)
            kept.add(key)
        elif entry > heap[0]:
            kept.discard(heapq.heapreplace(heap, entry)[1])
            kept.add(key)
    if lines == 0:
        raise SeedFileError(f"{path}: empty file; expected one {{\"persona\": \"...\"}} object per line")
    if len(heap) < n:
        raise SeedFileError(f"{path}: only {len(heap)} distinct personas, {n} requested")
    ranked = sorted(heap, reverse=True)
    return [
        PersonaSeed(index=i, source="personahub", text=text, origin=f"{path.name}:{lineno}")
        for i, (_, _, lineno, text) in enumerate(ranked)
    ]


def persona_id(seed: PersonaSeed, run_seed: int) -> str:
    return stable_id("per", run_seed, seed.source, seed.text)


def sample_style(rng: random.Random) -> Style:
    """How a persona writes; decided in code so every user-turn prompt gets the same style."""
    return Style(
        verbosity=rng.choices(["terse", "moderate", "verbose"], weights=[3, 5, 2])[0],
        formality=rng.choices(["casual", "neutral", "formal"], weights=[5, 4, 2])[0],
        typo_rate=round(rng.choice([0.0, 0.0, 0.01, 0.02, 0.05]), 3),
        emoji_use=rng.choices(["never", "sometimes", "often"], weights=[6, 3, 1])[0],
        directness=rng.choices(["explicit", "implicit"], weights=[6, 4])[0],
    )


def persona_from_seed(seed: PersonaSeed, *, run_seed: int, split: str = "test") -> Persona:
    """A persona built in code alone (name, style); the text stages later write its profile prose."""
    pid = persona_id(seed, run_seed)
    rng = derive_rng(run_seed, pid, "sample_personas")
    taxonomy = load_taxonomy()
    gender = seed.attributes.gender_identity
    names = [f.value for f in taxonomy.first_names if gender in (None, "nonbinary") or f.gender in (gender, "any")]
    name = f"{rng.choice(names)} {rng.choice(taxonomy.last_names)}"
    a = seed.attributes
    return Persona(
        persona_id=pid,
        seed_source=seed.source,
        seed_text=seed.text,
        name=name,
        age=a.age,
        gender_identity=a.gender_identity,
        location=a.location,
        occupation=a.occupation,
        profile=f"{name}. {seed.text}",
        style=sample_style(rng),
        attributes=a,
        split=split,
        provenance={"seed_origin": seed.origin or f"builtin:{seed.index}"},
    )
