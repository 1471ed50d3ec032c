"""Every chapter is a jupytext pair, notebooks/NN_slug.ipynb + NN_slug.py (py:percent), and the two
hold the same cells. Fix a failure with `jupytext --sync notebooks/NN_slug.ipynb` (the newer file
wins)."""

import jupytext
import pytest

from tools.chapters import NOTEBOOKS, chapter_notebooks

CHAPTERS = chapter_notebooks()


def _cells(nb):
    return [(c.cell_type, c.source.strip()) for c in nb.cells]


def test_there_are_chapters():
    assert CHAPTERS, "no notebooks/NN_slug.ipynb found"


def test_every_text_twin_has_a_notebook():
    stems = {p.stem for p in CHAPTERS}
    orphans = [p.name for p in sorted(NOTEBOOKS.glob("[0-9][0-9]_*.py")) if p.stem not in stems]
    assert not orphans, f"text twins without a notebook (run `jupytext --to ipynb`): {orphans}"


@pytest.mark.parametrize("nb_path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_pair_in_sync(nb_path):
    twin = nb_path.with_suffix(".py")
    assert twin.exists(), (
        f"{nb_path.name} has no py:percent twin: run `jupytext --set-formats ipynb,py:percent`"
    )
    nb, py = jupytext.read(nb_path), jupytext.read(twin)
    assert "py:percent" in nb.metadata.get("jupytext", {}).get("formats", ""), (
        f"{nb_path.name}: jupytext formats should be 'ipynb,py:percent'"
    )
    assert _cells(nb) == _cells(py), (
        f"{nb_path.name} and {twin.name} differ: run `jupytext --sync {nb_path}`"
    )
    assert nb.metadata.get("kernelspec", {}).get("name") == "tfx", (
        f"{nb_path.name}: kernel should be 'tfx'"
    )


def test_readme_lists_every_chapter():
    readme = (NOTEBOOKS.parent / "README.md").read_text(encoding="utf-8")
    missing = [p.name for p in CHAPTERS if f"notebooks/{p.name}" not in readme]
    assert not missing, f"README.md's chapter table does not list {missing}"
