"""The Troubleshooting page (tools/troubleshooting.py): one row per bug of tfx.zoo.bugzoo's
catalogue, each linked to its labelled section in a chapter; a bug without a section, or a section
without a bug, fails the build."""

import json
import re

from tfx.zoo.bugzoo import Bug
from tools import troubleshooting
from tools.chapters import chapter_notebooks

BUGS = {
    "nan-row": Bug("nan-row", "A fully masked row", "nan | everywhere", "−inf mask", "f(m)", "g"),
    "view": Bug("view", "view on <pad>", "wrong <pad> values", "view", "p(m)", "h", ("A50",)),
}


def _notebook(tmp_path, labels: list, name: str = "11_bug_zoo.ipynb"):
    cells = [
        {"cell_type": "markdown", "metadata": {}, "source": [f"({x})=\n", "### A bug\n"]}
        for x in labels
    ]
    cells.append(
        {
            "cell_type": "code",
            "metadata": {},
            "source": ["(bug-not-a-label)=\n"],
            "outputs": [],
            "execution_count": None,
        }
    )
    path = tmp_path / name
    path.write_text(
        json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}),
        encoding="utf-8",
    )
    return path


def test_page_has_a_row_per_bug_linked_to_its_section(tmp_path):
    nb = _notebook(tmp_path, ["bug-nan-row", "bug-view"])
    assert troubleshooting.sections(nb) == ["bug-nan-row", "bug-view"]  # code cells ignored
    errors = troubleshooting.write_page(tmp_path / "t.md", [nb], BUGS)
    assert errors == []
    page = (tmp_path / "t.md").read_text(encoding="utf-8")
    rows = [line for line in page.splitlines() if line.startswith("| ") and "`" in line]
    assert len(rows) == 2
    # in a container that lays it out as cards on a phone (book/_assets/tfx-book.css)
    assert re.search(r"\n:::\{container\} tfx-cards\n\| symptom .*\n:::\n$", page, re.S)
    assert "{ref}`A fully masked row <bug-nan-row>`" in rows[0]
    assert "nan \\| everywhere" in rows[0]  # a | in the text does not split the cell
    assert "{ref}`A50 <claim-a50>`" in rows[1]
    # angle brackets: entities in prose (else an HTML tag), ‹ › in a {ref} title (else a target)
    assert "wrong &lt;pad&gt; values" in rows[1] and "{ref}`view on ‹pad› <bug-view>`" in rows[1]


def test_a_bug_without_a_section_and_a_stray_section_fail(tmp_path):
    nb = _notebook(tmp_path, ["bug-nan-row", "bug-typo"])
    errors = troubleshooting.write_page(tmp_path / "t.md", [nb], BUGS)
    assert any("'bug-view' but no chapter" in e for e in errors)
    assert any("(bug-typo)= is not in tfx.zoo.bugzoo.BUGS" in e for e in errors)
    assert not (tmp_path / "t.md").exists()


def test_the_real_catalogue_matches_the_chapters(tmp_path):
    assert troubleshooting.write_page(tmp_path / "t.md", chapter_notebooks()) == []
