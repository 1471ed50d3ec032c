"""The Claims page and its export are generated from the chapters' claim cells (tools/claims.py):
every claim id of the source articles is listed once, a settled claim links to its label, an
unsettled one is open with its planned chapter, a verdict is classified by a controlled vocabulary
(a verdict outside it fails the build), the export agrees with book/claims.yml and with the verdict
lines, and a malformed claim cell is reported rather than silently dropped."""

import csv
import json
import re
from pathlib import Path

import nbformat
import pytest

from tools import claims, prepare_book
from tools.chapters import chapter_notebooks, is_appendix

# A70-A88 and N31-N38: the claims the first list missed (claims audit), settled in the ledger (90);
# A72 and A74 repeated A2 and A38 and were merged into them (issue 42): retired ids
RETIRED = {"A72", "A74"}
IDS = [f"A{i}" for i in range(1, 89) if f"A{i}" not in RETIRED] + [f"N{i}" for i in range(1, 39)]


@pytest.fixture(scope="module")
def plan():
    return claims.load_plan()


def test_plan_lists_every_claim_once(plan):
    assert list(plan["claims"]) == IDS
    for cid, spec in plan["claims"].items():
        assert spec["claim"].strip(), cid
        assert spec["chapter"] in plan["chapters"], (
            f"{cid}: chapter {spec['chapter']} is not in the plan"
        )
    chapters = [f"{i:02d}" for i in range(12)]
    appendices = [n for n in plan["chapters"] if n not in chapters]
    assert list(plan["chapters"]) == chapters + appendices
    assert appendices[0] == "90" and appendices == sorted(appendices)
    assert all(is_appendix(n) for n in appendices)


def test_plan_names_article_sections(plan):
    """Each claim names the section of its article it comes from (A: seed 000, N: seed 002), and
    only headings are taken from the articles: one line each, no sentence."""
    assert set(plan["articles"]) == {"A", "N"}
    assert claims.plan_errors(plan) == []
    for key, article in plan["articles"].items():
        for number, heading in article["sections"].items():
            assert re.fullmatch(r"\d+(\.\d+)?", number), (key, number)
            assert heading.strip() and "\n" not in heading and len(heading) < 60, (key, number)
    used = {(cid[0], spec["section"]) for cid, spec in plan["claims"].items()}
    declared = {(k, s) for k, a in plan["articles"].items() for s in a["sections"]}
    assert declared == used, f"sections no claim comes from: {sorted(declared - used)}"


def test_plan_errors_are_reported(plan):
    broken = {**plan, "claims": {**plan["claims"]}}
    broken["claims"]["A1"] = {**plan["claims"]["A1"], "section": "9.9", "evidence": "guess"}
    errors = claims.plan_errors(broken)
    assert any("A1: section '9.9' is not a section of article A" in e for e in errors), errors
    assert any("A1: evidence 'guess'" in e for e in errors), errors


def test_real_chapters_have_well_formed_claims(plan):
    _, errors = claims.collect(chapter_notebooks(), plan)
    assert not errors, "\n".join(errors)


def _chapter(tmp_path, name, cells):
    nb = nbformat.v4.new_notebook(cells=cells)
    path = tmp_path / f"{name}.ipynb"
    nbformat.write(nb, path)
    return path


def _settle(cid, verdict, executed=True):
    md = nbformat.v4.new_markdown_cell(f"(claim-{cid.lower()})=\n### Claim {cid}: a title\n\nWhy.")
    code = nbformat.v4.new_code_cell(
        f"# CLAIM {cid}: {verdict}\nassert True", execution_count=1 if executed else None
    )
    return [md, code]


def test_page_links_settled_claims_and_lists_open_ones(tmp_path, plan):
    nb = _chapter(
        tmp_path,
        "03_attention",
        _settle("A11", "holds only when W_O has no bias")
        + _settle("A12", "fails: the softmax runs along rows")
        + _settle("A35", "not reproducible here: no DocRED"),
    )
    by_id, errors = claims.collect([nb], plan)
    assert errors == []
    rows = claims.records(by_id, plan)
    page = claims.render(rows, plan)
    a11 = re.search(r'<tr id="claims-a11" .*?</tr>', page)[0]
    assert 'data-verdict="holds only when"' in a11 and "holds only when W_O has no bias" in a11
    assert 'href="chapters/03_attention.html#claim-a11"' in a11
    assert "§4.1 手写Multi-Head Attention" in a11, "the article's section heading"
    assert 'data-evidence="by reading"' in re.search(r'<tr id="claims-a35" .*?</tr>', page)[0]
    a1 = re.search(r'<tr id="claims-a1" .*?</tr>', page)[0]
    assert 'data-verdict="open"' in a1 and "open: chapter 03 (Attention, matrix by matrix)" in a1, (
        "A1's chapter exists, so no 'not written yet'"
    )
    n9 = re.search(r'<tr id="claims-n9" .*?</tr>', page)[0]
    assert "open: chapter 08 (Performance tuning, not written yet)" in n9
    assert (
        f"{len(IDS)} claims, {len(IDS)} rows: 1 holds only when, 1 fails, 1 not reproducible here, "
        f"{len(IDS) - 3} open." in (page)
    )
    assert len(re.findall(r'<tr id="claims-[an]\d+"', page)) == len(IDS)
    assert "```{raw} html" in page and 'href="claims.json"' in page and 'href="claims.csv"' in page
    # without JavaScript every row shows, and the filters (which need it) stay hidden
    assert not re.search(r"<tr [^>]*\bhidden\b", page)
    assert '<form class="tfx-claims-filters" hidden' in page


@pytest.mark.parametrize(
    "cells,message",
    [
        (_settle("A11", "holds")[1:], "no markdown cell starts with the label"),
        (_settle("A11", "holds")[:1], "no code cell starts with"),
        (_settle("A11", "probably true"), "is outside the vocabulary"),
        (_settle("A11", "holds mostly"), "is outside the vocabulary"),
        (_settle("A11", "holdsfast"), "is outside the vocabulary"),
        (_settle("A11", "holds", executed=False), "has not been executed"),
        (_settle("A99", "holds"), "unknown claim id"),
    ],
)
def test_malformed_claims_are_reported(tmp_path, plan, cells, message):
    _, errors = claims.collect([_chapter(tmp_path, "03_attention", cells)], plan)
    assert any(message in e for e in errors), errors


@pytest.mark.parametrize(
    "verdict,kind",
    [
        ("holds", "holds"),
        ("holds: as expected", "holds"),
        ("holds; GELU is non-monotonic", "holds"),
        ("Holds only when d_k is large", "holds only when"),
        ("holds only for post-LN: pre-LN trains without warm-up", "holds only when"),
        ("holds only in its direction", "holds only when"),
        ("holds on this probe: past the training length …", "holds only when"),
        ("holds for English BERT-base", "holds only when"),
        ("holds for storage only", "holds only when"),
        ("holds exactly when W_qkv = cat(...)", "holds only when"),
        ("fails twice", "fails"),
        ("fails as written (TensorFlow calls)", "fails"),
        ("fails: the table is learned", "fails"),
        ("not reproducible here: BLEU", "not reproducible here"),
        ("holds mostly", ""),
        ("probably holds", ""),
        ("failsafe", ""),
    ],
)
def test_verdict_vocabulary(verdict, kind):
    """A qualifier after "holds" makes the verdict conditional: only a bare "holds" (or "holds:",
    "holds;") counts as holds (claims_audit.md, systemic finding 1)."""
    assert claims.Settlement("A1", "03_x", verdict=verdict).kind == kind


def test_verdict_outside_the_vocabulary_fails_the_build(tmp_path, plan):
    """prepare_book fails the build on any error write_page returns: a verdict line outside the
    vocabulary is one, named with the vocabulary."""
    nb = _chapter(tmp_path, "03_attention", _settle("A11", "mostly holds"))
    errors = claims.write_page(tmp_path / "claims.md", [nb], plan, export_dir=tmp_path / "x")
    assert len(errors) == 1
    assert errors[0].startswith("03_attention.ipynb: claim A11: verdict 'mostly holds' is outside")
    assert "'holds only when …'" in errors[0] and "'not reproducible here …'" in errors[0]


def test_export_agrees_with_plan_and_verdict_lines(tmp_path, plan):
    """claims.json and claims.csv hold one row per settlement or open claim, with the plan's
    paraphrase, section and chapter, each verdict line as written, and counts that agree with a
    count made straight from the chapters' `# CLAIM` lines."""
    notebooks = chapter_notebooks()
    page = tmp_path / "claims.md"
    assert claims.write_page(page, notebooks, plan, export_dir=tmp_path) == []
    data = json.loads((tmp_path / "claims.json").read_text(encoding="utf-8"))
    rows = data["claims"]
    with open(tmp_path / "claims.csv", encoding="utf-8", newline="") as f:
        assert list(csv.DictReader(f)) == rows
    assert data["fields"] == list(claims.FIELDS) and all(list(r) == data["fields"] for r in rows)

    lines = {}  # claim id -> [(chapter stem, verdict)], read here without tools.claims
    for nb_path in notebooks:
        for cell in nbformat.read(nb_path, as_version=4).cells:
            m = (
                re.match(r"# CLAIM ([AN]\d+): (.*\S)", cell.source)
                if cell.cell_type == "code"
                else None
            )
            if m:
                lines.setdefault(m[1], []).append((nb_path.stem, m[2].strip()))
    assert [r["id"] for r in rows] == [
        cid for cid in plan["claims"] for _ in range(max(1, len(lines.get(cid, []))))
    ]
    sections = {k: a["sections"] for k, a in plan["articles"].items()}
    for r in rows:
        spec = plan["claims"][r["id"]]
        assert r["paraphrase"] == spec["claim"] and r["article"] == r["id"][0]
        assert r["section"] == spec["section"]
        assert r["section_heading"] == sections[r["article"]][r["section"]]
        if r["id"] in lines:
            assert (Path(r["notebook"]).stem, r["verdict"]) in lines[r["id"]]
            assert r["chapter"] == Path(r["notebook"]).stem[:2]
            assert r["link"] == f"chapters/{Path(r['notebook']).stem}.html#claim-{r['id'].lower()}"
            assert r["verdict_class"] == claims.classify(r["verdict"]) != "open"
            want = "by reading" if spec.get("evidence") == "reading" else "measured here"
            assert r["evidence"] == want
        else:
            assert r["chapter"] == spec["chapter"] and r["verdict_class"] == "open"
            assert r["verdict"] == r["link"] == r["evidence"] == ""
    # the counts on the page are the export's, and the export's are the chapters'
    n_lines = sum(len(v) for v in lines.values())
    assert sum(r["verdict_class"] != "open" for r in rows) == n_lines
    text = page.read_text(encoding="utf-8")
    for cls in claims.CLASSES:
        n = sum(r["verdict_class"] == cls for r in rows)
        if n:
            assert f" {n} {cls}" in text.split("## Summary", 1)[1].split("\n\n")[1], cls
        assert text.count(f'data-verdict="{cls}"') == n, cls
    plain = [v for vs in lines.values() for _, v in vs if re.fullmatch(r"holds\s*([:;].*)?", v)]
    assert sum(r["verdict_class"] == "holds" for r in rows) == len(plain)


def test_chapter_copies_link_back(tmp_path, plan):
    """The book's copy of a chapter gets, under each claim heading, its verdict badge and a link to
    the claim's row on the Claims page; the notebooks themselves are not touched."""
    nb = _chapter(tmp_path, "03_attention", _settle("A11", "holds only for post-LN"))
    rows = claims.records(claims.collect([nb], plan)[0], plan)
    assert claims.annotate_chapter(nb, rows) == 1
    md = nbformat.read(nb, as_version=4).cells[0].source
    assert md.startswith("(claim-a11)=\n### Claim A11: a title\n\n<p class=")
    assert 'href="../claims.html#claims-a11"' in md and "◐ holds only when" in md
    assert md.endswith("</p>\n\n\nWhy.") or md.endswith("</p>\n\nWhy."), md


# ---- the claims ledger: an appendix, numbered 90 -------------------------------------------------


def test_appendix_is_told_apart_by_its_number():
    assert (
        is_appendix("90") and is_appendix("90_claims_ledger") and is_appendix(Path("x/99_y.ipynb"))
    )
    assert not any(is_appendix(c) for c in ("00", "11", "11_bug_zoo", Path("n/89_x.ipynb")))
    assert claims.place("90") == "appendix 90" and claims.place("07") == "chapter 07"


def test_toc_lists_the_ledger_under_its_own_caption_after_the_chapters():
    """The chapters under their parts (by number, so a new chapter needs no edit), the epilogue at
    the end of the last part, then the ledger as the appendix, then the reference pages."""
    stems = ("00_a", "01_b", "03_c", "07_d", "11_e", "90_claims_ledger")
    notebooks = [Path(f"notebooks/{s}.ipynb") for s in stems]
    toc = prepare_book.toc(notebooks)
    parts = [p.split("\n", 1) for p in toc.split("  - caption: ")[1:]]
    captions = [head for head, _ in parts]
    names = [caption for _, caption in prepare_book.PARTS]
    assert captions == [names[0], names[1], names[2], names[4], "Appendix", "Reference"]
    files = {head: re.findall(r"- file: (\S+)", body) for head, body in parts}
    assert files[names[0]] == ["chapters/00_a", "chapters/01_b"]
    assert files[names[1]] == ["chapters/03_c"] and files[names[2]] == ["chapters/07_d"]
    assert files[names[4]] == ["chapters/11_e", "epilogue"]
    assert files["Appendix"] == ["chapters/90_claims_ledger"]
    assert files["Reference"] == ["claims", "troubleshooting", "references"]
    # without an appendix the toc is the parts and the reference pages
    assert "Appendix" not in prepare_book.toc(notebooks[:2])


def test_every_real_chapter_is_in_a_part_and_every_part_holds_one():
    chapters = [p for p in chapter_notebooks() if not is_appendix(p)]
    held = {prepare_book.part_of(p) for p in chapters}
    assert held == {caption for _, caption in prepare_book.PARTS}


def test_the_real_ledger_is_a_chapter_for_every_tool():
    """nbval, `make notebooks`, the pairing and hygiene tests and the book all take their list from
    chapter_notebooks(): the ledger is in it, last, and settles its claims there."""
    notebooks = chapter_notebooks()
    ledger = [p for p in notebooks if is_appendix(p)]
    assert ledger[0].stem == "90_claims_ledger" and notebooks[-len(ledger) :] == ledger
    settled = {s.claim_id for s in claims.scan(ledger[0])}
    assert settled == {f"A{i}" for i in range(70, 89)} - RETIRED | {f"N{i}" for i in range(31, 39)}
    for appendix in ledger[1:]:  # the ledgers that hold the audit claims moved out of chapters
        assert claims.scan(appendix), f"{appendix.name} settles no claim"


def test_chapters_spend_little_of_their_reading_on_claims():
    """Issue 22: a chapter keeps the claims that teach, as short boxes; the rest live in the
    ledger appendices, so claims take at most about 15% of a chapter's reading."""
    over = {
        p.stem: f"{claims.claim_share(p):.0%}"
        for p in chapter_notebooks()
        if not is_appendix(p)
        and p.stem not in claims.SHARE_EXEMPT
        and claims.claim_share(p) > claims.CHAPTER_CLAIM_SHARE
    }
    assert set(claims.SHARE_EXEMPT) <= {p.stem for p in chapter_notebooks()}
    assert not over, f"claims take more than {claims.CHAPTER_CLAIM_SHARE:.0%} of: {over}"


def test_ledger_claims_link_and_get_their_badge(tmp_path, plan):
    """A claim settled in the ledger is counted, linked from the Claims page as the appendix, and
    its heading in the book's copy gets its badge and a link back, like a chapter's."""
    nb = _chapter(
        tmp_path,
        "90_claims_ledger",
        _settle("A70", "fails: the rate is a choice") + _settle("N31", "fails"),
    )
    by_id, errors = claims.collect([nb], plan)
    assert errors == []
    rows = claims.records(by_id, plan)
    page = claims.render(rows, plan)
    a70 = re.search(r'<tr id="claims-a70" .*?</tr>', page)[0]
    assert 'href="chapters/90_claims_ledger.html#claim-a70"' in a70
    assert "appendix 90: The claims ledger ›" in a70 and 'data-chapter="90"' in a70
    assert f"{len(IDS)} claims, {len(IDS)} rows: 2 fails, {len(IDS) - 2} open." in page
    assert claims.annotate_chapter(nb, rows) == 2
    md = nbformat.read(nb, as_version=4).cells[0].source
    assert 'href="../claims.html#claims-a70"' in md and "✗ fails" in md
