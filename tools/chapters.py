"""Where the chapters are: every `notebooks/NN_slug.ipynb`, in order. One place, so no list can
drift.

Notebooks numbered 90 to 99 are appendices (90: the claims ledger). They are chapters for every tool
(executed by `make notebooks`, checked by nbval and the tests, copied into the book, their claim
cells counted on the Claims page); only the table of contents lists them apart, under their own
caption after the chapters (`is_appendix`).
"""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
CHAPTER_RE = re.compile(r"^(\d\d)_[a-z0-9_]+$")
APPENDIX_FROM = 90  # the first number of an appendix


def chapter_notebooks(notebooks: Path = NOTEBOOKS) -> list:
    """The chapter notebooks, sorted by number, appendices last; a stray name (e.g.
    `Untitled.ipynb`) is not a chapter."""
    return sorted(p for p in Path(notebooks).glob("[0-9][0-9]_*.ipynb") if CHAPTER_RE.match(p.stem))


def is_appendix(chapter) -> bool:
    """Whether a notebook (a path, a stem such as "90_claims_ledger", or a number such as "90") is
    an appendix rather than a chapter."""
    number = Path(str(chapter)).name[:2]
    return number.isdigit() and int(number) >= APPENDIX_FROM


if __name__ == "__main__":
    # `python -m tools.chapters` prints the chapter paths for the Makefile, and fails when there are
    # none
    found = chapter_notebooks()
    print(" ".join(str(p.relative_to(ROOT)) for p in found))
    raise SystemExit(0 if found else "no chapter notebooks (notebooks/NN_slug.ipynb) found")
