import pytest

from pipeline.catalog import DATA_DIR, catalog_inventory, load_catalog, load_taxonomy
from pipeline.config import DataFileError
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


def test_every_topic_reachable_from_life_event_effects():
    tax = load_taxonomy()
    covered = {e.topic for _, spec in tax.event_specs().values() for e in spec.parsed_effects(tax.topic_aliases)}
    assert set(DEFAULT_TOPICS) <= covered


def test_every_facet_is_carried_by_an_item_and_pushed_by_an_event():
    catalog, tax = load_catalog(), load_taxonomy()
    pushed = {(e.topic, e.facet) for _, spec in tax.event_specs().values() for e in spec.parsed_effects(tax.topic_aliases)}
    for topic, vocabulary in catalog.facets.items():
        carried = {f for i in catalog.topics[topic].items for f in i.facets}
        assert carried == set(vocabulary), topic
        assert {(topic, f) for f in vocabulary} <= pushed, topic
    # an item without a facet is a steady taste no event changes ("Taylor Swift albums": no life event in the
    # taxonomy makes one like or drop it for a stated reason); most items can be changed by some event
    items = [i for t in catalog.topics.values() for i in t.items]
    assert sum(bool(i.facets) for i in items) >= 0.85 * len(items)
    assert all(any(i.facets for i in t.items) for t in catalog.topics.values())


def _taxonomy_copy(tmp_path, old: str, new: str):
    text = (DATA_DIR / "taxonomy.yaml").read_text(encoding="utf-8")
    assert old in text
    path = tmp_path / "taxonomy.yaml"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    line = text[: text.index(old)].count("\n") + 1
    return path, line


@pytest.mark.parametrize(("old", "new", "message"), [
    ('sets: {work: retired}, effects: [finance retirement +', 'sets: {work: pensioner}, effects: [finance retirement +',
     "work has no value 'pensioner'"),
    ('requires: {work: [working]}, sets: {work: retired}', 'requires: {career: [working]}, sets: {work: retired}',
     "unknown life-state dimension 'career'"),
    ('effects: [finance retirement +, travel restful +', 'effects: [finance pension +, travel restful +',
     "has no facet 'pension'"),
    ('gist: "retired", age: [58, 75]', 'gist: "retired", age: [95, 99]', "can never happen: ages 95-99"),
    ('after: ["was diagnosed with coeliac disease"]', 'after: ["was diagnosed with coeliac"]',
     "after names 'was diagnosed with coeliac', which is no event's summary"),
])
def test_taxonomy_errors_name_file_and_line(tmp_path, old, new, message):
    path, line = _taxonomy_copy(tmp_path, old, new)
    with pytest.raises(DataFileError, match=rf"{tmp_path}/taxonomy.yaml:{line}: .*{message}"):
        load_taxonomy(path)


HORSE_ITEMS = 'items: ["horse riding lessons"]'


@pytest.mark.parametrize(("new", "message"), [
    ('items: ["horse riding lessons", "dark chocolate bunnies"]', "item 'dark chocolate bunnies' is not in the catalog"),
    ('items: ["horse riding lessons", "weekly talk therapy"]',
     r"item 'weekly talk therapy' \(therapy\) carries no facet its effects push"),
    ('items: ["horse riding lessons", "horse riding lessons"]', "item 'horse riding lessons' is named twice"),
])
def test_an_events_named_items_are_checked_at_load(tmp_path, new, message):
    """An event turns only the items it names: each must be a catalog item carrying a facet its effects push."""
    path, line = _taxonomy_copy(tmp_path, HORSE_ITEMS, new)
    with pytest.raises(DataFileError, match=rf"{tmp_path}/taxonomy.yaml:{line}: .*{message}"):
        load_taxonomy(path)


def test_an_event_naming_an_item_no_one_its_age_could_hold_is_rejected(tmp_path):
    """An item's catalog age range must meet the ages of every event that names it: a fall from a horse that
    happens only at 72-75 cannot put anyone off horse riding lessons, which no one over 70 holds."""
    old = 'age: [18, 75], effects: [sports costly -], ' + HORSE_ITEMS
    path, line = _taxonomy_copy(tmp_path, old, old.replace("[18, 75]", "[72, 75]"))
    with pytest.raises(DataFileError, match=rf"{tmp_path}/taxonomy.yaml:{line}: .*names item 'horse riding lessons', "
                                            "which fits ages 18-70 only"):
        load_taxonomy(path)


def test_item_age_ranges_are_checked_and_the_merge_keeps_only_fitting_items(tmp_path):
    from pipeline.catalog import fits_age

    text = (DATA_DIR / "catalog.yaml").read_text(encoding="utf-8")
    old = "      - name: indoor climbing gyms\n        age: [18, 60]"
    assert old in text
    bad = tmp_path / "catalog.yaml"
    bad.write_text(text.replace(old, old.replace("[18, 60]", "[60, 18]")), encoding="utf-8")
    with pytest.raises(DataFileError, match=rf"{bad}: .*age.*not \[min, max\]"):
        load_catalog(bad)
    assert fits_age((18, 60), 60) and not fits_age((18, 60), 61) and fits_age(None, 85)
    assert fits_age((25, 85), None) and not fits_age((18, 50), None)  # no age: must fit 30-60


def test_gendered_items_and_events_are_checked_and_held_only_by_those_they_fit(tmp_path):
    """Mammogram reminders are held by women only, and the loader rejects a gender the taxonomy does not
    sample in the catalog, or an event for one gender naming an item held only by another."""
    from pipeline.catalog import check_item_genders, item_fit
    from schemas.persona import SeedAttributes

    catalog, tax = load_catalog(), load_taxonomy()
    fits = {g: item_fit(catalog, SeedAttributes(age=50, gender_identity=g)) for g in ("woman", "man", None)}
    key = ("medicalConsultation", "mammogram reminders")
    assert fits["woman"](*key) and not fits["man"](*key) and not fits[None](*key)
    assert fits["man"]("medicalConsultation", "prostate screening exams")
    text = (DATA_DIR / "catalog.yaml").read_text(encoding="utf-8")
    old = "      - name: mammogram reminders\n"
    line = text[: text.index(old)].count("\n") + 1
    bad = tmp_path / "catalog.yaml"
    bad.write_text(text.replace(old + "        gender: [woman]", old + "        gender: [female]"), encoding="utf-8")
    with pytest.raises(DataFileError, match=rf"{bad}:{line}: item 'mammogram reminders' .*unknown gender 'female'"):
        check_item_genders(tax, load_catalog(bad), bad)
    old = 'requires: {gender: [woman]}, effects: [medical medication +, medical alternative +, therapy sleep +, ' \
          'therapy body +], items: ["menopause hormone therapy"]'
    path, line = _taxonomy_copy(tmp_path, old, old.replace("effects: [", "effects: [medical preventive +, ")
                                .replace('therapy"]', 'therapy", "prostate screening exams"]'))
    with pytest.raises(DataFileError, match=rf"taxonomy.yaml:{line}: .*names item 'prostate screening exams'"):
        load_taxonomy(path)


def test_most_events_name_items_and_both_directions_are_common():
    """The (event -> item) links are written down: most events turn something, and turning an item toward
    dislike is not rare (else a changed chain's first stance would mostly be a dislike)."""
    tax = load_taxonomy()
    facets = load_catalog().item_facets()
    links = [e.direction for _, spec in tax.event_specs().values()
             for e in spec.item_effects(tax.topic_aliases, facets).values()]
    assert sum(bool(spec.items) for _, spec in tax.event_specs().values()) >= 0.6 * len(tax.event_specs())
    assert links.count("-") >= 0.35 * len(links)


def test_an_event_requiring_an_unreachable_state_is_rejected(tmp_path):
    # nothing starts or ends in a retirement community except the one event that moves there: require it
    # for that event itself and no persona can ever live it
    path, _ = _taxonomy_copy(tmp_path, 'requires: {work: [retired]}, sets: {home: retirement_community}',
                             'requires: {home: [retirement_community], work: [student]}, sets: {home: owned}')
    text = path.read_text(encoding="utf-8").replace('"lives in a retirement community"', '"lives in a care flat"')
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DataFileError, match="can never happen: no persona ever has home retirement_community"):
        load_taxonomy(path)


def test_unknown_facet_of_a_catalog_item_names_file_and_line(tmp_path):
    text = (DATA_DIR / "catalog.yaml").read_text(encoding="utf-8")
    path = tmp_path / "catalog.yaml"
    path.write_text(text.replace("facets: [solo, sleep]", "facets: [solo, snoring]", 1), encoding="utf-8")
    line = text[: text.index("- name: journaling before bed")].count("\n") + 1
    with pytest.raises(DataFileError, match=rf"catalog.yaml:{line}: item 'journaling before bed' of therapy: "
                                            "unknown facet 'snoring'"):
        load_catalog(path)


def test_unknown_topic_is_named():
    with pytest.raises(ValueError, match="unknown topic.*cooking"):
        catalog_inventory(["foodRecommendation", "cooking"])


def test_event_summaries_and_code_reasons_carry_no_stance_of_their_own():
    """A reason is voiced in the user turn that states the new stance: nothing in it may read as the opposite."""
    from pipeline.checks.stance import expressed, stance_problem
    from pipeline.life_state import code_reason

    tax, catalog = load_taxonomy(), load_catalog()
    assert [s for s in tax.event_specs() if expressed(s)] == []
    for topic, vocabulary in catalog.facets.items():
        for facet, words in vocabulary.items():
            assert expressed(words) == set(), (topic, facet)
    for spec in tax.event_specs().values():
        for stance in ("like", "dislike"):
            reason = code_reason(spec[1].summary, "dark chocolate truffles", stance)
            assert stance_problem(reason, "dark chocolate truffles", stance) is None, reason
