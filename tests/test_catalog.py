import pytest

from pipeline.timeline.catalog import catalog_inventory, load_catalog, load_taxonomy
from schemas.config import DEFAULT_TOPICS


def test_catalog_covers_every_default_topic_with_40_items():
    catalog = load_catalog()
    for topic in DEFAULT_TOPICS:
        assert len(catalog.topics[topic].items) >= 40, topic


def test_catalog_tags_match_taxonomy_values():
    tax = load_taxonomy()
    known = (
        {f"age_band:{b.band}" for b in tax.age_bands}
        | {f"gender:{g.value}" for g in tax.gender_identities}
        | {f"life_stage:{s.value}" for s in tax.life_stages}
    )
    used = {tag for t in load_catalog().topics.values() for i in t.items for tag in i.tags}
    assert used <= known
    assert used == known  # every demographic has some stereotype items


def test_every_topic_reachable_from_a_life_event_category():
    tax = load_taxonomy()
    covered = {t for c in tax.life_event_categories.values() for t in c.topics}
    assert set(DEFAULT_TOPICS) <= covered


def test_unknown_topic_is_named():
    with pytest.raises(ValueError, match="unknown topic.*cooking"):
        catalog_inventory(["foodRecommendation", "cooking"])
