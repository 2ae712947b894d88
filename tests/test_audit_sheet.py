"""The human audit: `personagen audit-sheet` draws a stratified sample as a rater's form (key hidden), two
planted raters fill it in (one agreeing with the key 95% of the time, one 85%), and `personagen audit-score`
reports rates, kappa and the ceiling that match the planted values within their intervals, recorded as a new
version of the same tables whose card shows them. Bad sheets are refused in one line, nothing published."""

from __future__ import annotations

import csv
import json
import re
import shutil
import subprocess
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import pytest
from markupsafe import escape
from typer.testing import CliRunner

from pipeline.cli.app import app
from pipeline.dataset import load
from pipeline.reporting.audit_sheet import allocate, voicing
from tests.support.raters import fill
from tests.support.smoke import publish_smoke

runner = CliRunner()


@pytest.fixture(scope="module")
def version(tmp_path_factory):
    return publish_smoke(tmp_path_factory.mktemp("audit"), n_personas=24)


@pytest.fixture(scope="module")
def sheet(version, tmp_path_factory):
    out = tmp_path_factory.mktemp("sheet") / "sheet"
    result = runner.invoke(app, ["audit-sheet", str(version), "--n", "100", "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def _rows(path: Path) -> list[dict]:
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


class Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.hrefs, self.items, self._li, self.text = [], [], False, []

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self.hrefs.append(dict(attrs)["href"])
        self._li = tag == "li" or self._li

    def handle_endtag(self, tag):
        if tag == "li":
            self._li = False

    def handle_data(self, data):
        self.text.append(data)
        if self._li and data.strip():
            self.items.append(data.strip())


def test_the_sheet_is_a_stratified_sample_with_the_key_hidden(version, sheet):
    ds = load(version)
    rows = _rows(sheet / "sheet.csv")
    assert len(ds.queries) >= 100 and len(rows) == 100
    assert len({r["query_id"] for r in rows}) == 100 and all(not r["choice"] and not r["key_right"] for r in rows)
    queries = {q.query_id: q for q in ds.queries}
    turns = {(t.session_id, t.turn_index): t for t in ds.turns}
    strata = Counter((q.type, voicing(q, turns)) for q in ds.queries)
    drawn = Counter((queries[r["query_id"]].type, voicing(queries[r["query_id"]], turns)) for r in rows)
    assert set(drawn) == set(strata)  # every stratum is in the sample, in proportion to its size
    assert all(abs(drawn[k] - 100 * n / len(ds.queries)) <= 1.5 for k, n in strata.items())
    budgets = Counter(r["budget"] for r in rows)
    assert len(budgets) == len({c.budget_tokens for c in ds.contexts}) and max(budgets.values()) - min(budgets.values()) <= 2
    orders = [tuple(int(x) for x in r["order"].split()) for r in rows]
    assert len(set(orders)) > 6 and Counter(o.index(queries[r["query_id"]].correct_index)
                                            for o, r in zip(orders, rows, strict=True)).most_common(1)[0][1] < 45
    pages = sorted(p.name for p in sheet.glob("*.html"))
    assert pages == ["index.html", *(f"item-{i:03d}.html" for i in range(1, 101))]
    for name in pages:
        page = Page()
        page.feed((sheet / name).read_text(encoding="utf-8"))
        assert all(h in pages or h == "sheet.csv" for h in page.hrefs), (name, page.hrefs)
    first, query = rows[0], queries[rows[0]["query_id"]]
    page = Page()
    html = (sheet / "item-001.html").read_text(encoding="utf-8")
    page.feed(html)
    shown = [query.options[int(i)].text for i in first["order"].split()]
    assert [t for t in page.items if t in shown] == shown and str(escape(query.question)) in html
    key = "ABCD"[[int(i) for i in first["order"].split()].index(query.correct_index)]
    assert re.search(rf"<details><summary>The marked answer \(open after you have chosen\)</summary><p>{key}(</p>|, "
                     r"resting on turn)", html)
    assert "evidence" not in html.split("<details>")[0]  # which turn is the evidence is folded away with the key
    assert "correct" not in (sheet / "sheet.csv").read_text()
    again = sheet.parent / "again"
    assert runner.invoke(app, ["audit-sheet", str(version), "--n", "100", "--out", str(again)]).exit_code == 0
    assert (again / "sheet.csv").read_bytes() == (sheet / "sheet.csv").read_bytes()  # a seed draws the same items


def test_two_planted_raters_are_scored_within_their_intervals_and_the_card_shows_it(version, sheet, tmp_path):
    root = tmp_path / "out"
    shutil.copytree(version.parent, root / version.parent.name, symlinks=True)
    source = root / version.parent.name / version.name
    ds = load(source)
    alice = fill(sheet / "sheet.csv", tmp_path / "alice.csv", ds, 0.95, seed=1)
    bob = fill(sheet / "sheet.csv", tmp_path / "bob.csv", ds, 0.85, seed=2)
    result = runner.invoke(app, ["audit-score", str(source), str(alice), str(bob)])
    assert result.exit_code == 0, result.output
    audited = root / version.parent.name / "latest"
    manifest = json.loads((audited / "manifest.json").read_text())
    assert manifest["version"] != version.name and manifest["stats"]["audit"]["of"] == version.name
    for name in ("queries.parquet", "turns.parquet", "contexts.parquet"):  # the same tables, byte for byte
        assert (audited / name).read_bytes() == (source / name).read_bytes()
    assert manifest["files"]["queries.parquet"] == json.loads((source / "manifest.json").read_text())["files"]["queries.parquet"]
    audit = manifest["stats"]["audit"]
    assert audit["items"] == 100 and audit["raters"] == 2

    def inside(value, x):
        return x["low"] <= value <= x["high"]

    assert inside(0.95, audit["per_rater"]["alice"]["choice_agrees_with_key"])
    assert inside(0.85, audit["per_rater"]["bob"]["choice_agrees_with_key"])
    assert inside(0.90, audit["questions"]["key_right"])
    choice = audit["questions"]["choice_agrees_with_key"]
    planted = (0.95 * 0.85 + 0.05 * 0.15 / 3 - 0.25) / 0.75  # raters choose alike; the key sits anywhere in A-D
    assert choice["kappa_low"] <= planted <= choice["kappa_high"] and choice["kappa"] > 0.5
    right = audit["questions"]["key_right"]
    assert right["kappa_low"] <= 0.0 <= right["kappa_high"]  # their judgements of the key err independently
    assert inside(0.95 * 0.85 + (0.95 * 0.15 + 0.05 * 0.85) / 2, audit["ceiling"])
    card = (audited / "README.md").read_text()
    assert "## Human audit" in card and f"{choice['kappa']:.2f}" in card and "alice" in card
    assert f"{audit['ceiling']['rate']:.1%}" in card and "## Review checklist" in card
    assert load(audited).manifest.stats["audit"] == audit
    assert "rater bob: 100 items" in result.output


@pytest.mark.parametrize("edit, message", [
    (lambda r: r.update(key_right="maybe"), "line 4: key_right: expected yes or no, found 'maybe'"),
    (lambda r: r.update(choice="E"), "line 4: choice: expected one of A, B, C, D, found 'E'"),
    (lambda r: r.update(query_id="qry_nobody"), "line 4: query_id: 'qry_nobody' is not a query"),
    (lambda r: r.update(order="0 1 2"), "line 4: order: '0 1 2' is not the sheet's order"),
    (lambda r: r.pop("natural"), "line 1: missing column(s) natural"),
])
def test_a_bad_sheet_is_refused_in_one_line_and_nothing_is_published(version, sheet, tmp_path, edit, message):
    ds = load(version)
    filled = fill(sheet / "sheet.csv", tmp_path / "carol.csv", ds, 0.9, seed=3)
    rows = _rows(filled)
    edit(rows[2])
    fields = [f for f in rows[0] if all(f in r for r in rows)]
    with filled.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    before = sorted(p.name for p in version.parent.iterdir())
    result = runner.invoke(app, ["audit-score", str(version), str(filled)])
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and str(filled) in lines[0] and message in lines[0], result.stderr
    assert sorted(p.name for p in version.parent.iterdir()) == before


def test_the_same_rater_twice_and_an_empty_sheet_are_refused(version, sheet, tmp_path):
    ds = load(version)
    (tmp_path / "a").mkdir()
    one = fill(sheet / "sheet.csv", tmp_path / "a" / "dan.csv", ds, 0.9, 4)
    two = fill(sheet / "sheet.csv", tmp_path / "dan.csv", ds, 0.9, 5)
    result = runner.invoke(app, ["audit-score", str(version), str(one), str(two), "--no-record"])
    assert result.exit_code == 2 and "rater name 'dan'" in result.stderr
    empty = tmp_path / "erin.csv"
    shutil.copy(sheet / "sheet.csv", empty)
    result = runner.invoke(app, ["audit-score", str(version), str(empty), "--no-record"])
    assert result.exit_code == 2 and "no item is answered" in result.stderr


def test_allocation_is_proportional_covers_every_stratum_and_never_overdraws():
    sizes = {"a": 50, "b": 30, "c": 15, "d": 4, "e": 1}
    share = allocate(sizes, 20)
    assert sum(share.values()) == 20 and all(1 <= share[k] <= sizes[k] for k in sizes)
    assert share["a"] >= 9 and share["b"] >= 5
    assert allocate(sizes, 500) == sizes
    assert sum(allocate(sizes, 3).values()) == 3


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (apt-get install -y chromium)")
def test_a_headless_chromium_renders_an_item_with_the_key_folded(version, sheet, tmp_path):
    flags = ["--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'p'}"]
    dom = subprocess.run([CHROMIUM, *flags, "--dump-dom", (sheet / "item-001.html").as_uri()], capture_output=True,
                         text=True, timeout=120, check=True).stdout
    query = load(version, tables=["queries"]).queries
    first = _rows(sheet / "sheet.csv")[0]["query_id"]
    assert next(q.question for q in query if q.query_id == first) in dom and "<details>" in dom
