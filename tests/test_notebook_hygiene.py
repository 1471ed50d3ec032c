"""The committed chapters carry outputs from a CPU run, without absolute paths of the machine that ran them
and without widget state no displayed widget needs (tools/clean_notebooks.py, run by `make notebooks`)."""

import nbformat
import pytest

from tools import clean_notebooks
from tools.chapters import chapter_notebooks

CHAPTERS = chapter_notebooks()
MAX_BYTES = 2 * 1024 * 1024


@pytest.mark.parametrize("nb_path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_committed_outputs_are_clean(nb_path):
    nb = nbformat.read(nb_path, as_version=4)
    assert nb_path.stat().st_size < MAX_BYTES, f"{nb_path.name} is {nb_path.stat().st_size} bytes"
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert any(c.get("outputs") for c in code), (
        f"{nb_path.name} has no stored outputs: run `make notebooks`"
    )
    assert not clean_notebooks.absolute_paths(nb), clean_notebooks.absolute_paths(nb)
    stored = nb.metadata.get("widgets", {}).get(clean_notebooks.WIDGET_STATE, {}).get("state", {})
    clean_notebooks.clean(nb)
    needed = nb.metadata.get("widgets", {}).get(clean_notebooks.WIDGET_STATE, {}).get("state", {})
    assert set(stored) == set(needed), (
        f"{nb_path.name} stores {len(stored)} widget models, its displayed widgets need {len(needed)}: "
        f"run `python -m tools.clean_notebooks notebooks/{nb_path.name}`"
    )


def _widget_nb(tmp_root: str):
    """A notebook as nbconvert leaves it: a displayed slider, an undisplayed one, a path, a timestamp."""
    view = {"model_id": "aa", "version_major": 2, "version_minor": 0}
    cell = nbformat.v4.new_code_cell(
        "w",
        execution_count=1,
        outputs=[
            nbformat.v4.new_output(
                "display_data", data={"application/vnd.jupyter.widget-view+json": view}
            ),
            nbformat.v4.new_output(
                "stream", name="stderr", text=f"{tmp_root}/x.py:3: UserWarning\n"
            ),
        ],
    )
    cell.metadata["execution"] = {"iopub.execute_input": "2026-11-29T10:00:00Z"}
    state = {
        "aa": {"model_name": "IntSliderModel", "state": {"layout": "IPY_MODEL_bb"}},
        "bb": {"model_name": "LayoutModel", "state": {}},
        "cc": {"model_name": "IntSliderModel", "state": {"layout": "IPY_MODEL_dd"}},
        "dd": {"model_name": "LayoutModel", "state": {}},
    }
    nb = nbformat.v4.new_notebook(cells=[cell])
    nb.metadata["widgets"] = {
        clean_notebooks.WIDGET_STATE: {"state": state, "version_major": 2, "version_minor": 0}
    }
    return nb


def test_clean_keeps_only_displayed_widgets_and_strips_paths():
    from tools import chapters

    nb = _widget_nb(str(chapters.ROOT))
    clean_notebooks.clean(nb)
    assert set(nb.metadata["widgets"][clean_notebooks.WIDGET_STATE]["state"]) == {"aa", "bb"}
    assert nb.cells[0].outputs[1]["text"] == "<repo>/x.py:3: UserWarning\n"
    assert "execution" not in nb.cells[0].metadata
    assert clean_notebooks.absolute_paths(nb) == []


def test_absolute_paths_are_found():
    nb = _widget_nb("/home/someone/project")
    assert clean_notebooks.absolute_paths(nb) == ["/home/someone/project/x.py"]
