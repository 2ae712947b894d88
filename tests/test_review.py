"""`personagen review`: a page per persona and an index that open from disk, every internal link resolving,
every dataset text escaped; a headless chromium renders them where Debian's chromium is installed."""

from __future__ import annotations

import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipeline.cli.app import app
from pipeline.dataset import load
from pipeline.reporting.review import page_name, render_review
from tests.support.eval_data import publish_tiny


class Links(HTMLParser):
    """Every href and every id of one page."""

    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        found = dict(attrs)
        if "href" in found:
            self.hrefs.append(found["href"])
        if "id" in found:
            self.ids.add(found["id"])


@pytest.fixture(scope="module")
def version(tmp_path_factory):
    return publish_tiny(tmp_path_factory.mktemp("review") / "out", n_personas=3)


@pytest.fixture(scope="module")
def pages(version, tmp_path_factory):
    out = tmp_path_factory.mktemp("pages") / "review"
    result = CliRunner().invoke(app, ["review", str(version), "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def _parsed(folder: Path) -> dict[str, Links]:
    parsed = {}
    for page in folder.glob("*.html"):
        links = Links()
        links.feed(page.read_text(encoding="utf-8"))
        parsed[page.name] = links
    return parsed


def test_an_index_and_a_page_per_persona_every_internal_link_resolving(version, pages):
    ds = load(version)
    parsed = _parsed(pages)
    assert set(parsed) == {"index.html", *(page_name(p.persona_id) for p in ds.personas)}
    checked = 0
    for name, links in parsed.items():
        for href in links.hrefs:
            target, _, anchor = href.partition("#")
            target = target or name
            assert target in parsed, (name, href)
            assert not anchor or anchor in parsed[target].ids, (name, href)
            checked += 1
    assert checked > 50
    persona = ds.personas[0]
    page = (pages / page_name(persona.persona_id)).read_text(encoding="utf-8")
    queries = [q for q in ds.queries if q.persona_id == persona.persona_id]
    evidence = [e for q in queries for e in q.evidence]
    assert queries and evidence
    assert all(f'id="q-{q.query_id}"' in page for q in queries)
    assert all(f'href="#t-{e.session_id}-{e.turn_index}"' in page for e in evidence)


def test_every_text_from_the_dataset_is_escaped(version):
    ds = load(version)
    hostile = "<script>alert(1)</script><a href='http://x'>"
    first = ds.queries[0]
    ds.queries[0] = first.model_copy(update={"question": hostile})
    ds.personas[0] = ds.personas[0].model_copy(update={"profile": hostile})
    html = b"".join(render_review(ds).values()).decode()
    assert "<script>" not in html and "href='http://x'" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_one_persona_an_unknown_one_and_a_foreign_out_folder(version, tmp_path):
    ds = load(version)
    one = ds.personas[1].persona_id
    runner = CliRunner()
    result = runner.invoke(app, ["review", str(version), "--persona", one, "--out", str(tmp_path / "one")])
    assert result.exit_code == 0 and sorted(p.name for p in (tmp_path / "one").glob("*.html")) == \
        ["index.html", page_name(one)]
    result = runner.invoke(app, ["review", str(version), "--persona", "per_nobody", "--out", str(tmp_path / "x")])
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and "--persona per_nobody" in lines[0]
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    result = runner.invoke(app, ["review", str(version), "--out", str(mine)])
    assert result.exit_code == 2 and "notes.txt" in result.stderr and (mine / "notes.txt").read_text() == "keep"
    assert runner.invoke(app, ["review", str(version), "--out", str(tmp_path / "one")]).exit_code == 0  # ours: redone


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (apt-get install -y chromium)")
def test_a_headless_chromium_renders_the_pages(version, pages, tmp_path):
    from PIL import Image

    persona = load(version).personas[0]
    page = pages / page_name(persona.persona_id)
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", f"--user-data-dir={tmp_path / 'p'}"]
    dom = subprocess.run([CHROMIUM, *flags, "--dump-dom", page.as_uri()], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert persona.name.split()[0] in dom and 'id="queries"' in dom
    shot = tmp_path / "page.png"
    subprocess.run([CHROMIUM, *flags, "--window-size=1200,1600", f"--screenshot={shot}", page.as_uri()],
                   capture_output=True, timeout=120, check=True)
    image = Image.open(shot).convert("L")
    low, high = image.getextrema()
    assert image.size == (1200, 1600) and high - low > 100  # text on a page, not a blank or error screen


def test_show_prints_narratives_sessions_and_one_sessions_turns(version):
    from rich.console import Console

    from pipeline.reporting.show import load_persona_timeline, timeline_tree

    ds = load(version)
    persona = ds.personas[0].persona_id
    who, timeline = load_persona_timeline(version, persona)
    life = next(e for e in timeline.events if e.kind == "life_event")
    told = timeline.model_copy(update={"events": [e.model_copy(update={"narrative": "On that day I wrote it down."})
                                                  if e is life else e for e in timeline.events]})
    console = Console(record=True, width=400)
    console.print(timeline_tree(who, told))
    assert "narrative: On that day I wrote it down." in console.export_text()
    runner = CliRunner()
    shown = runner.invoke(app, ["show", persona, "--plan", str(version)], env={"COLUMNS": "400"})
    assert shown.exit_code == 0, shown.output
    assert "sessions (" in shown.output
    session = next(s for s in ds.sessions if s.persona_id == persona)
    assert session.session_id in shown.output
    turns = runner.invoke(app, ["show", persona, "--plan", str(version), "--session", session.session_id],
                          env={"COLUMNS": "400"})
    assert turns.exit_code == 0, turns.output
    first = min((t for t in ds.turns if t.session_id == session.session_id), key=lambda t: t.turn_index)
    assert f"{first.role}" in turns.output and first.content[:40] in turns.output, turns.output
    missing = runner.invoke(app, ["show", persona, "--plan", str(version), "--session", "ses_nope"])
    assert missing.exit_code == 2 and "has no session 'ses_nope'" in missing.output
