"""The Troubleshooting page: one row per bug of chapter 11 (symptom, likely cause, the call that
confirms it, the section that shows it), written by `make site` from the catalogue the chapter
itself runs (tfx.zoo.bugzoo.BUGS) and checked against the chapter's sections.

Why both: the catalogue holds the words, the chapter holds the evidence. A bug in the catalogue
without a labelled section `(bug-<id>)=` in a chapter, or a section whose id the catalogue lacks,
fails the build, so the page cannot list a bug that no cell shows.
"""

import json
import re
import sys
from pathlib import Path

from tools.chapters import ROOT, chapter_notebooks

LABEL = re.compile(r"^\((bug-[a-z0-9-]+)\)=\s*$", re.M)


def sections(nb_path: Path) -> list:
    """The bug labels `(bug-<id>)=` of a chapter's markdown cells, in order."""
    cells = json.loads(Path(nb_path).read_text(encoding="utf-8"))["cells"]
    found = []
    for cell in cells:
        if cell["cell_type"] == "markdown":
            found += LABEL.findall("".join(cell["source"]))
    return found


def _title(text: str) -> str:
    """A link text inside a {ref} role, where `<…>` names the target and entities are not read:
    angle brackets become ‹ ›."""
    return " ".join(text.split()).replace("<", "‹").replace(">", "›").replace("`", "'")


def _link(bug) -> str:
    """The last cell of a row: a {ref} to the bug's section, then to the claims it settles."""
    claims = ", ".join(f"{{ref}}`{c} <claim-{c.lower()}>`" for c in bug.claims)
    return f"{{ref}}`{_title(bug.title)} <bug-{bug.id}>`" + (f" ({claims})" if claims else "")


# The table's box: the whole width of the content area on a desktop, and on a phone one labelled
# card per row, like the Claims page's (book/_assets/tfx-book.css, tfx-phone.js)
CARDS = "tfx-cards"


def render(bugs: dict) -> str:
    """The page's Markdown (MyST): the catalogue `bugs` as tfx.zoo.bugzoo.table writes it (the one
    table the chapter shows too), with `{ref}` links to the chapter's labels, so a strict build
    fails on one that does not resolve; the table sits in a container of class CARDS."""
    from tfx.zoo.bugzoo import table

    lines = [
        "# Troubleshooting",
        "",
        "Every bug of chapter 11, the bug zoo: what you see, what usually causes it, the tfx call "
        "that confirms it on your own model, and the section that shows it happen. Generated from "
        "the chapter's catalogue (`tfx.zoo.bugzoo.BUGS`) by `make site`; each row's section "
        "injects the bug into a working model and asserts that the diagnostic fires on it and "
        "stays quiet on the healthy model.",
        "",
    ]
    table_md = table(link=_link, bugs=bugs)
    return "\n".join(lines) + f"\n:::{{container}} {CARDS}\n{table_md}\n:::\n"


def write_page(path: Path, notebooks: list, bugs: dict = None) -> list:
    """Write the page; return the errors (a bug without a section, a section without a bug).
    `bugs` defaults to tfx.zoo.bugzoo.BUGS."""
    if bugs is None:
        from tfx.zoo.bugzoo import BUGS as bugs
    where, errors = {}, []
    for nb in notebooks:
        for label in sections(nb):
            if label in where:
                errors.append(f"{nb.name}: label ({label})= is also in {where[label]}")
            where[label] = nb.stem
    ids = {f"bug-{b.id}" for b in bugs.values()}
    errors += [f"tfx.zoo.bugzoo.BUGS has {x!r} but no chapter has ({x})=" for x in ids - set(where)]
    errors += [f"{where[x]}: ({x})= is not in tfx.zoo.bugzoo.BUGS" for x in set(where) - ids]
    if not errors:
        Path(path).write_text(render(bugs), encoding="utf-8")
    return sorted(errors)


if __name__ == "__main__":
    problems = write_page(ROOT / "book" / "troubleshooting.md", chapter_notebooks())
    for p in problems:
        print(p, file=sys.stderr)
    sys.exit(1 if problems else 0)
