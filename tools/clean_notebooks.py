"""Output hygiene for the committed chapters: no absolute paths of the machine that ran them,
no per-cell timestamps (they change on every run), only the widget state the displayed widgets
need, widget model ids numbered in order of first appearance (the kernel draws new random ids on
every run), and a cell's consecutive stream outputs of one name merged into one (the kernel splits
a stream into chunks at random). Two executions of a chapter then give the same notebook, except in
cells whose first line is `# NBVAL_IGNORE_OUTPUT` (cells that print measured time).

`python -m tools.clean_notebooks [NB ...]` rewrites the notebooks in place (all chapters by
default); `--check` only reports, and exits 1 when a notebook needs cleaning.
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


IPY_MODEL_RE = re.compile(r"IPY_MODEL_([0-9a-f]+)")


def _model_refs(obj) -> list:
    """The widget model ids `obj` refers to, in order of appearance (dict keys sorted): the
    model_id of a widget view (also inside an Output widget's saved outputs), each IPY_MODEL_<id>.
    """
    if isinstance(obj, str):
        return IPY_MODEL_RE.findall(obj)
    if isinstance(obj, list):
        return [r for x in obj for r in _model_refs(x)]
    if isinstance(obj, dict):
        refs = [obj["model_id"]] if isinstance(obj.get("model_id"), str) else []
        return refs + [r for k in sorted(obj) if k != "model_id" for r in _model_refs(obj[k])]
    return []


def _widget_order(nb, state: dict) -> list:
    """The models the displayed views need, in order of first appearance: the views in the outputs,
    then every model they refer to, breadth first."""
    order = []
    for ref in _model_refs([c.get("outputs", []) for c in nb.cells if c.cell_type == "code"]):
        if ref not in order:
            order.append(ref)
    i = 0
    while i < len(order):
        for ref in _model_refs(state.get(order[i], {})):
            if ref not in order:
                order.append(ref)
        i += 1
    return order


def _renumber(obj, ids: dict):
    """obj with every widget model id replaced by ids[id], all at once (old and new cannot mix)."""
    if isinstance(obj, str):
        if obj in ids:
            return ids[obj]
        return IPY_MODEL_RE.sub(lambda m: "IPY_MODEL_" + ids.get(m.group(1), m.group(1)), obj)
    if isinstance(obj, list):
        return [_renumber(x, ids) for x in obj]
    if isinstance(obj, dict):
        return {ids.get(k, k): _renumber(v, ids) for k, v in obj.items()}
    return obj


def _text(text) -> str:
    return "".join(text) if isinstance(text, list) else text


def merge_streams(outputs: list) -> list:
    """Consecutive stream outputs of the same name (stdout, stderr) as one output."""
    merged = []
    for out in outputs:
        prev = merged[-1] if merged else None
        if (
            out.get("output_type") == "stream"
            and prev is not None
            and prev.get("output_type") == "stream"
            and prev.get("name") == out.get("name")
        ):
            prev["text"] = _text(prev["text"]) + _text(out["text"])
        else:
            merged.append(out)
    return merged


def clean(nb) -> None:
    """Clean one notebook object in place."""
    replacements = _replacements()
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        if cell.cell_type == "code":
            cell.outputs = nbformat.from_dict(merge_streams(_scrub(cell.outputs, replacements)))
    widgets = nb.metadata.get("widgets", {}).get(WIDGET_STATE)
    state = _scrub(widgets.get("state", {}), replacements) if widgets else {}
    order = _widget_order(nb, state)
    state = {mid: state[mid] for mid in order if mid in state}
    # number the models 1, 2, ... in order of first appearance, 32 hex digits like the kernel's ids
    ids = {old: f"{n:032x}" for n, old in enumerate(order, start=1)}
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = nbformat.from_dict(_renumber(cell.outputs, ids))
    if widgets is not None:
        widgets["state"] = _renumber(state, ids)
        for model in widgets["state"].values():
            outputs = model.get("state", {}).get("outputs")
            if model.get("model_name") == "OutputModel" and isinstance(outputs, list):
                model["state"]["outputs"] = merge_streams(outputs)
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
