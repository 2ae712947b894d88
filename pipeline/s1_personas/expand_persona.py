"""expand_persona: the model writes profile prose and per-topic item inventories; code checks them."""

from __future__ import annotations

import math
import re
from dataclasses import replace

from pydantic import BaseModel

from pipeline.catalog import catalog_inventory, item_fit, load_catalog, turnable_items
from pipeline.checks.quality import Origin, count, item_problem, text_problem
from pipeline.checks.verdicts import heard
from pipeline.llm import LLM, LLMError
from pipeline.rng import derive_rng
from pipeline.specs import INVENTORY, PROFILE
from schemas.catalog import InventoryItem
from schemas.config import RunConfig
from schemas.drafts import InventoryContext, ProfileContext, ProfileDraft, inventory_draft
from schemas.persona import Persona, stereotype_match

Inventory = dict[str, list[InventoryItem]]


def expand_persona(persona: Persona, *, config: RunConfig, llm: LLM,
                   origin: dict[str, Origin] | None = None) -> tuple[Persona, Inventory]:
    """The persona (from :func:`~pipeline.s1_personas.sample_personas.persona_from_seed`) with its model-written
    profile, and its per-topic inventory (model items + catalog top-up); ``origin`` counts, per field, the texts
    the model wrote, wrote when asked again, or code wrote."""
    origin = {} if origin is None else origin
    persona = _with_profile(persona, llm=llm, attempts=config.text.attempts, origin=origin)
    inventory = _inventory(persona, config=config, llm=llm)
    model = sum(1 for items in inventory.values() for i in items if i.origin == "model")
    count(origin, "item", model=model, code=sum(map(len, inventory.values())) - model)
    return persona, inventory


def profile_problem(draft: ProfileDraft, persona: Persona) -> str | None:
    """Why a profile draft contradicts the persona's structured seed or is not readable, or None."""
    a = persona.attributes
    if a.age is not None and draft.age != a.age:
        return f"age {draft.age} contradicts the seed's age {a.age}"
    if a.gender_identity is not None and draft.gender_identity != a.gender_identity:
        return f"gender identity {draft.gender_identity} contradicts the seed's {a.gender_identity}"
    allowed = [persona.name, a.location or "", a.occupation or "", draft.occupation, draft.location, persona.seed_text]
    return text_problem(draft.background, "profile", allowed=allowed)


def _with_profile(base: Persona, *, llm: LLM, attempts: int, origin: dict[str, Origin]) -> Persona:
    a = base.attributes
    context = ProfileContext(seed_text=base.seed_text, name=base.name, age=a.age, gender_identity=a.gender_identity,
                             location=a.location, occupation=a.occupation)
    for sample in range(attempts):
        try:
            draft = llm.generate(PROFILE, context, sample_index=sample)
        except LLMError:
            continue
        if heard(draft, profile_problem(draft, base)) is None:
            count(origin, "profile", **{"reasked" if sample else "model": 1})
            return apply_profile(base, draft, llm_name=llm.name, fingerprint=llm.fingerprint(PROFILE))
    count(origin, "profile", code=1)
    return base.model_copy(update={"provenance": {**base.provenance, "profile": "fallback:seed"}})


def apply_profile(base: Persona, draft: ProfileDraft, *, llm_name: str, fingerprint: str) -> Persona:
    """Store a checked draft: code keeps the name and any structured fact; the model adds the prose."""
    return base.model_copy(update={
        "age": base.age if base.age is not None else draft.age,
        "gender_identity": base.gender_identity or draft.gender_identity,
        "occupation": base.occupation or draft.occupation,
        "location": base.location or draft.location,
        "profile": named(base.name, draft.background),
        "provenance": {**base.provenance, "profile": f"{llm_name} {fingerprint[:12]}"},
    })


def named(name: str, background: str) -> str:
    """The stored profile: the model's prose, led by the name where the prose does not begin with it already
    ("Quinn Lopez. A 40-year-old ...", never "Quinn Lopez. Quinn Lopez is 40 ...")."""
    text = background.strip()
    return text if text.startswith(name) else f"{name}. {text}"


_JUNK = re.compile(r"^[\W_]+|[\W_]+$")
_ITEM = re.compile(r"^[^\W\d_][\w '&.,/+-]*$")


def clean_items(raw: list[str], *, taken: set[str], limit: int, topic: str | None = None) -> list[str]:
    """Unique, trimmed items of 2-6 plain words (at most 60 characters) not already used by this persona, each
    readable as an item name (``quality.text_problem``: known words, not a phrase of function words) and, given
    its ``topic``, the name of a thing of that topic (``quality.item_problem``: not "it's called")."""
    out: list[str] = []
    for text in raw:
        if len(out) >= limit:
            break
        item = _JUNK.sub("", " ".join(text.split()))
        key = item.casefold()
        if (len(item) <= 60 and 2 <= len(item.split()) <= 6 and _ITEM.match(item) and "_" not in item and key not in taken
                and (text_problem(item, "item") if topic is None else item_problem(item, topic)) is None):
            taken.add(key)
            out.append(item)
    return out


def _inventory(persona: Persona, *, config: RunConfig, llm: LLM) -> Inventory:
    n = config.text.inventory_size
    catalog = load_catalog()
    spec = replace(INVENTORY, output=inventory_draft(n))
    contexts = [
        InventoryContext(name=persona.name, profile=persona.profile, topic=t,
                         topic_description=catalog.topics[t].description if t in catalog.topics else t,
                         n_items=n, examples=[i.name for i in catalog.topics[t].items[:2]] if t in catalog.topics else [])
        for t in config.topics
    ]
    drafts = llm.generate_each(spec, contexts)
    return merge_inventory(persona, drafts, config=config)


def merge_inventory(persona: Persona, drafts: list[BaseModel | None], *, config: RunConfig) -> Inventory:
    """Model items first (at most ``1 - text.catalog_share`` of the size), topped up from the catalog to the
    configured size, plus demographic stereotypes, of the catalog items the persona fits (an item's ``age``
    range and ``gender``). The top-up takes items some life event names first, so
    events can turn them; a persona whose changeable items were all stereotyped likes would only ever change
    from like to dislike."""
    catalog = catalog_inventory(config.topics)
    turnable = turnable_items()
    fits = item_fit(load_catalog(), persona.attributes)
    tags = persona.attributes.stereotype_tags()
    rng = derive_rng(config.seed, persona.persona_id, "expand_persona")
    taken: set[str] = set()
    inventory: Inventory = {}
    size = config.text.inventory_size
    own = size - math.ceil(config.text.catalog_share * size)  # the model's items at most
    for topic, draft in zip(config.topics, drafts, strict=True):
        names = clean_items(draft.items if draft else [], taken=taken, limit=own, topic=topic)
        if draft is not None:  # the catalog tops the list up: a draft fails only when none of its items is kept
            heard(draft, None if names else f"none of its {len(draft.items)} items kept (unreadable, not of the "
                                            "topic, or a repeat)")
        items = [InventoryItem(name=n, origin="model") for n in names]
        pool = [i for i in catalog[topic] if fits(topic, i.name)]
        rng.shuffle(pool)
        pool.sort(key=lambda i: (topic, i.name) not in turnable)  # stable: still shuffled within each part
        stereo = [i for i in pool if stereotype_match(tags, i.tags)][: config.text.stereotype_items]
        topup = [i for i in pool if i not in stereo][: max(0, size - len(items))]
        for extra in stereo + topup:
            if extra.name.casefold() not in taken:
                taken.add(extra.name.casefold())
                items.append(extra)
        inventory[topic] = items
    return inventory
