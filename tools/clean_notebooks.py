"""Output hygiene for the committed chapters: no absolute paths of the machine that ran them, no per-cell
timestamps (they change on every run), and only the widget state the displayed widgets need.

`python -m tools.clean_notebooks [NB ...]` rewrites the notebooks in place (all chapters by default);
`--check` only reports, and exits 1 when a notebook needs cleaning.
"""

import json
import os
import re
import sys
import sysconfig
from pathlib import Path

import nbformat

from tools.chapters import ROOT, chapter_notebooks

WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
# what an absolute path of a machine looks like in stored text
ABSOLUTE_PATH_RE = re.compile(
    r"(?<![\w.~])/(?:home|root|Users|work|tmp|opt|usr|private|var)/[^\s'\"<>:]*"
)


def _replacements() -> list:
    """Longest prefix first: site-packages before the repository before the home directory."""
    pairs = {
        sysconfig.get_paths()["purelib"]: "<site-packages>",
        sysconfig.get_paths()["stdlib"]: "<python>",
        str(ROOT): "<repo>",
        os.path.expanduser("~"): "~",
    }
    return sorted(((k, v) for k, v in pairs.items() if k and k != "/"), key=lambda kv: -len(kv[0]))


def _scrub(obj, replacements):
    if isinstance(obj, str):
        for old, new in replacements:
            obj = obj.replace(old, new)
        return obj
    if isinstance(obj, list):
        return [_scrub(x, replacements) for x in obj]
    if isinstance(obj, dict):
        return {k: _scrub(v, replacements) for k, v in obj.items()}
    return obj


def _reachable_widgets(nb, state: dict) -> dict:
    """The models a displayed view needs: the views in the outputs, then every IPY_MODEL_ they refer to."""
    todo = [
        o["data"][WIDGET_VIEW]["model_id"]
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
        if WIDGET_VIEW in o.get("data", {})
    ]
    keep = {}
    while todo:
        mid = todo.pop()
        if mid in keep or mid not in state:
            continue
        keep[mid] = state[mid]
        todo += re.findall(r"IPY_MODEL_([0-9a-f]+)", json.dumps(state[mid]))
    return keep


def clean(nb) -> None:
    """Clean one notebook object in place."""
    replacements = _replacements()
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        if cell.cell_type == "code":
            cell.outputs = nbformat.from_dict(_scrub(cell.outputs, replacements))
    widgets = nb.metadata.get("widgets", {}).get(WIDGET_STATE)
    if widgets is not None:
        widgets["state"] = _scrub(widgets.get("state", {}), replacements)
        widgets["state"] = _reachable_widgets(nb, widgets.get("state", {}))
        if not widgets["state"]:
            del nb.metadata["widgets"]


def absolute_paths(nb) -> list:
    """The absolute paths left in a notebook's outputs and widget state."""
    text = json.dumps([c.get("outputs", []) for c in nb.cells]) + json.dumps(
        nb.metadata.get("widgets", {})
    )
    return sorted(set(ABSOLUTE_PATH_RE.findall(text)))


def main(argv: list) -> int:
    check = "--check" in argv
    paths = [Path(a) for a in argv if a != "--check"] or chapter_notebooks()
    dirty = 0
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        before = nbformat.writes(nb)
        clean(nb)
        after = nbformat.writes(nb)
        if after != before:
            dirty += 1
            if check:
                print(f"{path.name}: needs `python -m tools.clean_notebooks` (or `make notebooks`)")
            else:
                nbformat.write(nb, path)
                print(f"{path.name}: cleaned ({len(before) // 1024} -> {len(after) // 1024} KiB)")
        left = absolute_paths(nb)
        if left:
            print(
                f"{path.name}: absolute paths left in outputs: {', '.join(left[:5])}",
                file=sys.stderr,
            )
            dirty += 1
    return 1 if (check and dirty) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
