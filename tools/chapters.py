"""Where the chapters are: every `notebooks/NN_slug.ipynb`, in order. One place, so no list can
drift."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
CHAPTER_RE = re.compile(r"^(\d\d)_[a-z0-9_]+$")


def chapter_notebooks(notebooks: Path = NOTEBOOKS) -> list:
    """The chapter notebooks, sorted by number; a stray name (e.g. `Untitled.ipynb`) is not a
    chapter."""
    return sorted(p for p in Path(notebooks).glob("[0-9][0-9]_*.ipynb") if CHAPTER_RE.match(p.stem))


if __name__ == "__main__":
    # `python -m tools.chapters` prints the chapter paths for the Makefile, and fails when there are
    # none
    found = chapter_notebooks()
    print(" ".join(str(p.relative_to(ROOT)) for p in found))
    raise SystemExit(0 if found else "no chapter notebooks (notebooks/NN_slug.ipynb) found")
