import json
from pathlib import Path

import pytest

from pipeline.catalog import load_taxonomy
from pipeline.s1_personas.sample_personas import (
    SeedFileError,
    load_personahub,
    persona_from_seed,
    sample_builtin_seed,
    sample_personas,
)
from schemas.config import PersonaSettings


def test_builtin_seed_attributes_are_consistent():
    tax = load_taxonomy()
    bands = {b.band: b for b in tax.age_bands}
    stages = {s.value: s for s in tax.life_stages}
    jobs = {o.value: o for o in tax.occupations}
    for i in range(300):
        a = sample_builtin_seed(i, run_seed=3, taxonomy=tax).attributes
        assert bands[a.age_band].min <= a.age <= bands[a.age_band].max
        assert stages[a.life_stage].min_age <= a.age <= stages[a.life_stage].max_age
        assert jobs[a.occupation].min_age <= a.age <= jobs[a.occupation].max_age
        assert len(set(a.hobbies)) == 3 and len(set(a.values)) == 2
        # occupation and household agree with the life stage (no retiree with a job, no halls at 70)
        stage, group = stages[a.life_stage], jobs[a.occupation].group
        assert not stage.occupation_groups or group in stage.occupation_groups, (a.life_stage, a.occupation)
        assert group not in stage.excluded_groups, (a.life_stage, a.occupation)
        assert (group == "retired") == (a.life_stage == "retired") or a.life_stage == "empty_nester"
        assert not stage.households or a.household in stage.households, (a.life_stage, a.household)
        household = next(h for h in tax.households if h.value == a.household)
        assert household.min_age <= a.age <= household.max_age, (a.household, a.age)


def test_seed_i_does_not_depend_on_n():
    small = sample_personas(5, run_seed=11, settings=PersonaSettings())
    large = sample_personas(60, run_seed=11, settings=PersonaSettings())
    assert small == large[:5]
    assert sample_personas(5, run_seed=12, settings=PersonaSettings()) != small


def test_persona_from_seed_is_deterministic():
    seed = sample_personas(1, run_seed=1, settings=PersonaSettings())[0]
    a, b = persona_from_seed(seed, run_seed=1), persona_from_seed(seed, run_seed=1)
    assert a == b and a.persona_id.startswith("per_")


def test_personahub_reads_all_5000_real_lines(personahub_file):
    seeds = load_personahub(personahub_file, 4000, run_seed=7)
    assert len(seeds) == 4000
    texts = [s.text for s in seeds]
    assert len(set(texts)) == len(texts)
    assert all(s.origin and s.origin.startswith("personas_5000.jsonl:") for s in seeds)
    prefix = load_personahub(personahub_file, 50, run_seed=7)
    assert prefix == seeds[:50]


def test_personahub_sampling_dedups_and_is_seeded(tmp_path: Path):
    path = tmp_path / "p.jsonl"
    lines = [{"persona": f"A person number {i}"} for i in range(30)] + [{"persona": "A person  number 3"}]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    seeds = load_personahub(path, 30, run_seed=1)
    assert len({s.text.casefold() for s in seeds}) == 30
    assert [s.text for s in load_personahub(path, 10, run_seed=2)] != [s.text for s in seeds[:10]]
    with pytest.raises(SeedFileError, match="only 30 distinct personas, 31 requested"):
        load_personahub(path, 31, run_seed=1)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'{"persona": "ok"}\n{"persona": "broken"\n', r"p\.jsonl:2: invalid JSON"),
        (b'{"persona": "ok"}\n{"name": "x"}\n', r"p\.jsonl:2: missing key \"persona\""),
        (b'{"persona": "ok"}\n{"persona": "  "}\n', r"p\.jsonl:2: \"persona\" must be a non-empty string"),
        (b"", r"p\.jsonl: empty file"),
        (b'{"persona": "ok"}\n\xff\xfe\x00garbage\n', r"p\.jsonl:2: not UTF-8"),
        (b'{"persona": "ok"}\n\n{"persona": "' + b"x" * 1_000_000 + b'"}\n',
         r"p\.jsonl:3: \"persona\" is 1,000,000 characters; at most 2,000"),
        (b'{"persona": "ok"}\n{"persona": "open\n', r"p\.jsonl:2: invalid JSON \(Unterminated string starting at column 13\)"),
        (b'["persona"]\n', r"p\.jsonl:1: missing key"),
    ],
)
def test_personahub_malformed_file_names_file_and_line(tmp_path: Path, content: bytes, message: str):
    path = tmp_path / "p.jsonl"
    path.write_bytes(content)
    with pytest.raises(SeedFileError, match=message) as info:
        load_personahub(path, 1, run_seed=1)
    assert "\n" not in str(info.value)


def test_blank_lines_are_skipped_wherever_they_are(tmp_path: Path):
    path = tmp_path / "p.jsonl"
    path.write_bytes(b'\n{"persona": "A baker"}\n  \n{"persona": "A pilot"}\n\n')
    seeds = load_personahub(path, 2, run_seed=1)
    assert sorted(s.text for s in seeds) == ["A baker", "A pilot"]
    assert sorted(s.origin for s in seeds) == ["p.jsonl:2", "p.jsonl:4"]


def test_missing_personahub_file_is_one_line(tmp_path: Path):
    with pytest.raises(SeedFileError, match="cannot open"):
        load_personahub(tmp_path / "nope.jsonl", 1, run_seed=1)
