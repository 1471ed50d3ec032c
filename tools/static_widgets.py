"""Chapter widgets that stay interactive on the static site, with no kernel.

A chapter declares, in `book/widgets/NN_slug.yml`, a grid of control values for each widget it
shows (see CONTRIBUTING.md, "Widgets"). When the site is built, `tools/prepare_book.py` calls
`build`: it runs the cells the widgets need in a fresh `tfx` kernel, and there calls each widget's
own pure frame function (`tfx_frame`, kept by `tfx.book.widgets._shell`) at every setting of the
grid, so the page shows exactly what the kernel would print and draw. Identical texts and pictures
are stored once; pictures are 256-colour PNGs under `_static/widgets/`, fetched only when a setting
is shown. The results are cached under `.cache/static-widgets/`, keyed by the cells run, the grids
and the library versions, and dropped when a tfx module the kernel imported changes. The pictures
are drawn on the machine that builds the site, so it needs the chapters' CJK font (checked). The
book's copy of the chapter gets, in place of the saved widget, the same controls in HTML
(disabled until `_assets/tfx-static-widgets.js` enables them), the default frame, and a note.

The build fails when a declared control does not match the live one (label, default, a stop the
live control cannot reach), when a budget is exceeded, or when the default frame's text differs
from the widget output stored in the chapter (drift; numbers below NOISE_FLOOR are rounding noise
and may differ). A widget without a declaration keeps its
saved state on the page, and the build says so.

This module is also a Sphinx extension (`local_extensions` in book/_config.yml): after the build
it puts the original chapters back under `_sources/`, so "download notebook" serves the notebook
as written, not the book's copy.
"""

import hashlib
import html
import io
import itertools
import json
import math
import re
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path

import nbformat
import yaml

from tools.chapters import NOTEBOOKS, ROOT

DECLARATIONS = ROOT / "book" / "widgets"
CACHE = ROOT / ".cache" / "static-widgets"
STATIC = ROOT / "book" / "_widgets"  # an html_static_path entry: its widgets/ lands in _static/
URL = "../_static/widgets"  # from a chapter page (chapters/NN_slug.html)
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
SKIP_TAG = "widget-test-skip"
# a cell the widgets read: when a chapter tags any, only its setup cell, these and the widget cells
# run to compute the frames (and in the JupyterLab test), not every cell up to the last widget
INPUT_TAG = "widget-input"
FORMAT = 1  # raise when dump_frames or _png changes what they write: the cache starts over
BOX = "_tfx_static_widget"  # the name the widget gets in the kernel that computes its frames
COMBINE = ("all", "each")
# budgets, enforced by the build
MAX_SETTINGS = 2000
MAX_PICTURES = 50
MAX_PICTURE_BYTES = 1_000_000
MAX_SITE_BYTES = 8_000_000
MAX_SLIDER_STOPS = 7
NOTE = (
    "This page shows precomputed settings: each one is exactly what the chapter's kernel prints"
    " and draws for it. Open the notebook in JupyterLab to compute any value live."
)


@dataclass
class Control:
    """One control of a live widget, as the static page needs it. `kind` is int, float, log
    (FloatLogSlider: value = base ** exponent), bool, choice (options by label) or text."""

    kind: str
    label: str
    default: object
    min: float = None
    max: float = None
    step: float = None
    base: float = None
    options: list = field(default_factory=list)
    fmt: str = None
    buttons: bool = False  # a choice shown as a row of buttons (ToggleButtons)


SLIDERS = {"IntSlider": "int", "FloatSlider": "float", "FloatLogSlider": "log"}
CHOICES = {"Dropdown", "ToggleButtons", "RadioButtons", "Select"}


def _control(name: str, get) -> Control | None:
    """A Control from a widget class name and a getter of its traits (a live widget's or a
    stored state's); None for containers and outputs."""
    name = name.removesuffix("Model")
    label = get("description") or ""
    if name in SLIDERS:
        kind = SLIDERS[name]
        c = Control(kind, label, get("value"), get("min"), get("max"), get("step"))
        c.base, c.fmt = (get("base") if kind == "log" else None), get("readout_format")
        return c
    if name in ("Checkbox", "ToggleButton"):
        return Control("bool", label, bool(get("value")))
    if name in CHOICES:
        labels = list(get("_options_labels"))
        label = label or " / ".join(labels)
        index = get("index")
        default = None if index is None else labels[index]
        return Control("choice", label, default, options=labels, buttons=name == "ToggleButtons")
    if name in ("Text", "Textarea", "BoundedIntText", "IntText", "BoundedFloatText"):
        return Control("text", label, get("value"))
    return None


def live_control(widget) -> Control:
    """The Control of a live ipywidget."""
    c = _control(type(widget).__name__, lambda k: getattr(widget, k, None))
    if c is None:
        raise TypeError(f"not a control the static site knows: {type(widget).__name__}")
    return c


def stored_controls(nb, model_id: str) -> list:
    """The Controls of the widget whose view is `model_id`, from the chapter's saved widget state
    (what the kernel had when the chapter was executed), in the order of the layout."""
    state = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    found = []

    def walk(mid):
        model = state.get(mid)
        if model is None:
            return
        s = model["state"]
        c = _control(model["model_name"], s.get)
        if c is not None:
            found.append(c)
        for child in s.get("children", []):
            walk(child.removeprefix("IPY_MODEL_"))

    walk(model_id)
    return found


def stored_text(nb, model_id: str) -> str | None:
    """The text the chapter's stored widget shows: the stdout in its Output, as saved."""
    state = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})

    def walk(mid):
        model = state.get(mid)
        if model is None:
            return None
        if model["model_name"] == "OutputModel":
            outs = model["state"].get("outputs", [])
            return "".join(o.get("text", "") for o in outs if o.get("output_type") == "stream")
        for child in model["state"].get("children", []):
            text = walk(child.removeprefix("IPY_MODEL_"))
            if text is not None:
                return text
        return None

    return walk(model_id)


def reachable(c: Control, value) -> bool:
    """Whether the live control can take `value` (a slider: on its grid of steps)."""
    if c.kind == "bool":
        return isinstance(value, bool)
    if c.kind == "choice":
        return value in c.options
    if c.kind == "text" or isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if c.kind == "log":
        if value <= 0:
            return False
        position = math.log(value, c.base)
    else:
        position = value
    if c.kind == "int" and value != int(value):
        return False
    k = (position - c.min) / c.step
    # a log slider's stop may be written as its readout (3 significant digits); snap() makes it
    # exact
    tolerance = 0.05 if c.kind == "log" else 1e-6
    return (
        c.min - tolerance * c.step <= position <= c.max + tolerance * c.step
        and abs(k - round(k)) < tolerance
    )


def same(a, b) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return a == b


def check(spec: dict, controls: list, where: str) -> list:
    """Errors of one widget's declaration against its live controls: an unknown label, a default
    that is not a stop, a stop the live control cannot reach, a bad `combine`, too many settings."""
    errors = []
    by_label = {c.label: c for c in controls}
    declared = spec.get("controls") or {}
    if not declared:
        errors.append(f"{where}: no controls declared")
    combine = spec.get("combine", "all")
    if isinstance(combine, list):
        listed = {label for group in combine for label in group}
        if listed != set(declared):
            errors.append(
                f"{where}: the groups of combine must name the declared controls, each at least "
                f"once: {combine!r} for {list(declared)}"
            )
    elif combine not in COMBINE:
        errors.append(
            f"{where}: combine must be one of {COMBINE} or a list of groups, got {combine!r}"
        )
    for label, stops in declared.items():
        c = by_label.get(label)
        if c is None:
            errors.append(
                f"{where}: no live control labelled {label!r} (there are {list(by_label)})"
            )
            continue
        if not isinstance(stops, list) or not stops:
            errors.append(f"{where}: {label!r}: stops must be a non-empty list, got {stops!r}")
            continue
        if c.kind == "text":
            errors.append(f"{where}: {label!r} is a text box: it cannot have stops")
            continue
        if c.kind in ("int", "float", "log") and len(stops) > MAX_SLIDER_STOPS:
            errors.append(f"{where}: {label!r}: {len(stops)} stops, at most {MAX_SLIDER_STOPS}")
        if not any(same(s, c.default) for s in stops):
            errors.append(f"{where}: {label!r}: the live default {c.default!r} is not a stop")
        for s in stops:
            if not reachable(c, s):
                errors.append(
                    f"{where}: {label!r}: the live control cannot reach {s!r} ({_range(c)})"
                )
        if len({json.dumps(s) for s in stops}) != len(stops):
            errors.append(f"{where}: {label!r}: a stop is listed twice")
    if not errors:
        n = len(settings(spec, controls))
        if n > MAX_SETTINGS:
            errors.append(f"{where}: {n} settings, at most {MAX_SETTINGS}")
    return errors


def _range(c: Control) -> str:
    if c.kind == "choice":
        return f"options {c.options}"
    if c.kind == "log":
        return f"{c.base} ** ({c.min} .. {c.max} by {c.step})"
    return f"{c.min} .. {c.max} by {c.step}" if c.kind != "bool" else "true or false"


def settings(spec: dict, controls: list) -> list:
    """The grid: tuples of stop indices, one per declared control (in declaration order).
    combine: `all` gives every combination; `each` moves one control at a time from the defaults;
    a list of groups of labels gives every combination within a group, the other controls at their
    defaults."""
    by_label = {c.label: c for c in controls}
    labels = list(spec["controls"])
    stops = list(spec["controls"].values())
    defaults = [
        next(i for i, s in enumerate(v) if same(s, by_label[k].default))
        for k, v in spec["controls"].items()
    ]
    combine = spec.get("combine", "all")
    groups = (
        combine
        if isinstance(combine, list)
        else [labels]
        if combine == "all"
        else [[k] for k in labels]
    )
    grid = {tuple(defaults)}
    for group in groups:
        moving = [labels.index(k) for k in group]
        for choice in itertools.product(*(range(len(stops[j])) for j in moving)):
            setting = list(defaults)
            for j, i in zip(moving, choice):
                setting[j] = i
            grid.add(tuple(setting))
    return sorted(grid)


def snap(c: Control, value):
    """A declared stop as the live control holds it: a log slider's value is base ** (min + k step),
    so a stop written as its readout (0.0501 for 10 ** -1.3) becomes that exact value."""
    if c.kind != "log":
        return value
    k = round((math.log(value, c.base) - c.min) / c.step)
    return c.base ** (c.min + k * c.step)


def readout(c: Control, value) -> str:
    """The value as the live widget's readout shows it."""
    if c.kind == "bool" or c.kind == "choice":
        return str(value)
    fmt = (c.fmt or ("d" if c.kind == "int" else ".2f" if c.kind == "float" else ".3g")).lstrip("~")
    try:
        return format(int(value) if fmt.endswith("d") else value, fmt)
    except (ValueError, TypeError):
        return str(value)


# ---------------------------------------------------------------------------------------------
# In the kernel: every setting of one widget, through the widget's own frame function


def _png(fig) -> bytes:
    """The figure as the notebook shows it (bbox tight), in 256 colours."""
    from PIL import Image

    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight", facecolor="white")
    image = Image.open(io.BytesIO(buf.getvalue())).convert("RGB").quantize(256)
    out = io.BytesIO()
    image.save(out, format="PNG", optimize=True)
    return out.getvalue()


def _require_font() -> None:
    """The site's pictures are drawn here, so this machine needs the CJK font the chapters' figures
    were drawn with (tfx.book.viz.PREFERRED_FONT_FILES), or the tokens would turn into boxes."""
    from tfx.book import viz

    wanted = getattr(viz, "PREFERRED_FONT_FILES", ())
    if wanted and not any(k in Path(f).name for f in viz.font_files() for k in wanted):
        raise RuntimeError(
            f"no {' or '.join(wanted)} font on this machine: the site's figures would lose "
            "their CJK labels (Debian: apt-get install fonts-wqy-microhei, then delete "
            "~/.cache/matplotlib)"
        )


def dump_frames(box, spec: dict, outdir: str) -> None:
    """Run in the chapter's kernel right after the widget cell (`box` is the widget the cell
    returned): compute every setting of the grid with the widget's own frame function, and write
    frames.json and the distinct pictures to `outdir`."""
    import matplotlib.pyplot as plt

    from tfx.book.widgets import frame_parts

    if not hasattr(box, "tfx_frame"):
        raise TypeError(
            "the widget cell must end with the widget, built by tfx.book.widgets._shell "
            f"(got {type(box).__name__})"
        )
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    names = list(box.tfx_controls)
    controls = [live_control(box.tfx_controls[k]) for k in names]
    errors = check(spec, controls, spec.get("_where", "widget"))
    if errors:
        raise ValueError("\n".join(errors))
    by_label = {c.label: (k, c, box.tfx_controls[k]) for k, c in zip(names, controls)}
    declared = list(spec["controls"].items())
    defaults = {k: w.value for k, w in box.tfx_controls.items()}
    texts, pictures, table = {}, {}, {}
    for setting in settings(spec, controls):
        values = dict(defaults)
        for (label, stops), i in zip(declared, setting):
            k, c, w = by_label[label]
            stop = stops[i]
            if c.kind == "choice":
                stop = w._options_values[w._options_labels.index(stop)]
            values[k] = snap(c, stop)
        text, fig = frame_parts(box.tfx_frame(**values))
        t = texts.setdefault(text, len(texts))
        p = None
        if fig is not None:
            if not pictures:
                _require_font()
            data = _png(fig)
            plt.close(fig)
            digest = hashlib.sha256(data).hexdigest()[:16]
            if digest not in pictures:
                (out / f"{digest}.png").write_bytes(data)
                pictures[digest] = len(pictures)
            p = pictures[digest]
        table[",".join(map(str, setting))] = [t, p]
    frames = {
        "controls": [asdict(c) for c in controls],
        "declared": [label for label, _ in declared],
        "stops": [stops for _, stops in declared],
        "texts": list(texts),
        "pictures": [f"{d}.png" for d in pictures],
        "settings": table,
    }
    (out / "frames.json").write_text(json.dumps(frames, ensure_ascii=False), encoding="utf-8")
    # the tfx code the kernel has run so far: the cache is stale when any of it changes
    sources = out.parent / "sources.json"
    known = json.loads(sources.read_text()) if sources.exists() else {}
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None) or ""
        if module.__name__.split(".")[0] == "tfx" and path.endswith(".py"):
            known[path] = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    sources.write_text(json.dumps(known, indent=0, sort_keys=True))


# ---------------------------------------------------------------------------------------------
# At site-build time: which cells to run, the cache, the checks, the page


def declarations(stem: str) -> dict:
    """The chapter's declared grids, widget function name -> spec ({} when none)."""
    path = DECLARATIONS / f"{stem}.yml"
    if not path.exists():
        return {}
    return yaml.safe_load(path.read_text(encoding="utf-8")) or {}


def widget_outputs(nb) -> list:
    """(cell index, widget function name, model id, called with arguments?) for every cell that
    displays a widget; the name is the tfx.book.widgets function the cell calls."""
    import ast

    import tfx.book.widgets

    found = []
    for i, cell in enumerate(nb.cells):
        views = [
            o["data"][WIDGET_VIEW]["model_id"]
            for o in cell.get("outputs", [])
            if cell.cell_type == "code" and WIDGET_VIEW in o.get("data", {})
        ]
        if not views:
            continue
        name, args = None, False
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:
            tree = ast.Module(body=[], type_ignores=[])
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                f = node.func
                called = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
                if called and called.endswith("_widget") and hasattr(tfx.book.widgets, called):
                    name, args = called, bool(node.args or node.keywords)
        found.append((i, name, views[-1], args))
    return found


def _run_cells(nb, found: list, specs: dict) -> list:
    """The cells the kernel runs to compute the frames: widget_run's cells up to the last declared
    widget, or, when no declared widget takes arguments, only the widget calls themselves."""
    todo = [(i, name) for i, name, _, _ in found if name in specs]
    light = not any(args for i, name, _, args in found if name in specs)
    cells = []
    if light:
        for _, name in todo:
            cells.append(f"import tfx.book.widgets\n{BOX} = tfx.book.widgets.{name}()")
            cells.append(("dump", name))
        return cells
    widget_at = dict(todo)
    for i in widget_run(nb, list(widget_at)):
        source = nb.cells[i].source
        if i in widget_at:
            cells += [_keep_box(source), ("dump", widget_at[i])]
        else:
            cells.append(source)
    return cells


def widget_run(nb, widget_at: list) -> list:
    """The indices of the code cells that run with the widget cells `widget_at` (indices): when
    a cell up to the last widget is tagged widget-input, the setup cell (the chapter's first code
    cell), the tagged cells and the widget cells; otherwise every code cell up to the last widget
    but timing cells (first line `# NBVAL_IGNORE_OUTPUT`: their numbers change on every run, so no
    later cell may depend on them) and cells tagged widget-test-skip. Shared by the static frames
    and the JupyterLab widget test (tests/browser/test_lab_widgets.py), so both run the same."""
    code = [i for i, c in enumerate(nb.cells[: max(widget_at) + 1]) if c.cell_type == "code"]
    tags = {i: nb.cells[i].metadata.get("tags", []) for i in code}
    inputs = [i for i in code if INPUT_TAG in tags[i]]
    if inputs:
        return sorted({code[0], *inputs, *widget_at})
    timing = {i for i in code if nb.cells[i].source.lstrip().startswith("# NBVAL_IGNORE_OUTPUT")}
    return [i for i in code if i in widget_at or not (i in timing or SKIP_TAG in tags[i])]


def _keep_box(source: str) -> str:
    """The widget cell with its last expression (the widget) assigned to BOX."""
    import ast

    tree = ast.parse(source)
    last = tree.body[-1] if tree.body else None
    if not isinstance(last, ast.Expr):
        raise ValueError(f"a widget cell must end with the widget it shows:\n{source}")
    lines = source.splitlines()
    head = lines[: last.lineno - 1] + [lines[last.lineno - 1][: last.col_offset]]
    return "\n".join(head) + f"{BOX} = " + ast.get_source_segment(source, last)


def _fingerprint(cells: list, specs: dict) -> str:
    """The cache key of a chapter's frames: the cells run, the grids, the frame format, the
    versions of the libraries that compute and draw, and the CPU's instruction set (kernels round
    differently on each, so frames from another CPU are not this machine's). The tfx modules the
    kernel imported are checked separately (sources.json), so an edit elsewhere in tfx keeps the
    cache."""
    from tfx.inspect.timing import cpu_capability

    h = hashlib.sha256(json.dumps([cells, specs, FORMAT], sort_keys=True, default=str).encode())
    h.update(str(cpu_capability()).encode())
    for package in ("torch", "numpy", "matplotlib", "pillow", "ipywidgets"):
        try:
            h.update(f"{package}={metadata.version(package)}".encode())
        except metadata.PackageNotFoundError:
            pass
    return h.hexdigest()[:20]


def _sources_unchanged(folder: Path) -> bool:
    """Whether every tfx file the kernel used for these frames is as it was then."""
    sources = folder / "sources.json"
    if not sources.exists():
        return False
    for path, digest in json.loads(sources.read_text()).items():
        p = Path(path)
        if not p.exists() or hashlib.sha256(p.read_bytes()).hexdigest() != digest:
            return False
    return True


def _compute(stem: str, cells: list, specs: dict, out: Path) -> None:
    """Run the cells in a fresh tfx kernel; after each widget, dump its frames into out/<name>."""
    from tools.execute import KernelManager, NotebookClient

    code = []
    for cell in cells:
        if isinstance(cell, tuple):
            name = cell[1]
            spec = dict(specs[name], _where=f"book/widgets/{stem}.yml: {name}")
            cell = (
                f"import sys\nsys.path.insert(0, {str(ROOT)!r})\n"
                "import json\nfrom tools.static_widgets import dump_frames\n"
                f"dump_frames({BOX}, json.loads({json.dumps(spec)!r}), {str(out / name)!r})"
            )
        code.append(nbformat.v4.new_code_cell(cell))
    nb = nbformat.v4.new_notebook(cells=code)
    NotebookClient(
        nb,
        kernel_name="tfx",
        timeout=600,
        kernel_manager_class=KernelManager,
        resources={"metadata": {"path": str(NOTEBOOKS)}},
    ).execute()


def frames_for(stem: str, nb, found: list, specs: dict) -> Path:
    """The folder of the chapter's frames, from the cache or computed now."""
    cells = _run_cells(nb, found, specs)
    key = _fingerprint(cells, specs)
    folder = CACHE / stem / key
    if all((folder / name / "frames.json").exists() for name in specs) and _sources_unchanged(
        folder
    ):
        return folder
    shutil.rmtree(CACHE / stem, ignore_errors=True)  # older fingerprints of the chapter
    tmp = CACHE / stem / f"{key}.tmp"
    _compute(stem, cells, specs, tmp)
    tmp.rename(folder)
    return folder


def _control_html(i: int, c: Control, stops: list | None) -> str:
    """One control as HTML, disabled until the script enables it; `stops` None: fixed at its
    default, and hidden (a greyed field that does nothing reads as broken; the note under the
    widget names it). Every control carries its stops (data-values) and its position in the
    layout."""
    label = html.escape(c.label)
    hide = " hidden" if stops is None else ""
    stops = stops if stops is not None else [c.default]
    at = next(j for j, s in enumerate(stops) if same(s, c.default))
    values = html.escape(json.dumps(stops, ensure_ascii=False))
    attrs = f'data-control="{i}" data-label="{label}" data-values=\'{values}\' disabled'
    if c.kind == "bool":
        checked = " checked" if c.default else ""
        return (
            f'<label class="tfx-sw-control tfx-sw-bool"{hide}>'
            f'<input type="checkbox" {attrs}{checked}> {label}</label>'
        )
    if c.kind == "choice" and c.buttons:
        buttons = "".join(
            f'<button type="button" data-index="{j}" aria-pressed="{str(j == at).lower()}"'
            f" disabled>{html.escape(str(s))}</button>"
            for j, s in enumerate(stops)
        )
        name = "" if " / " in c.label else f"<span>{label}</span> "
        return (
            f'<span class="tfx-sw-control tfx-sw-buttons"{hide}>{name}<span role="group" '
            f'aria-label="{label}" {attrs}>{buttons}</span></span>'
        )
    if c.kind == "choice":
        options = "".join(
            f'<option value="{j}"{" selected" if j == at else ""}>{html.escape(str(s))}</option>'
            for j, s in enumerate(stops)
        )
        return (
            f'<label class="tfx-sw-control tfx-sw-choice"{hide}><span>{label}</span>'
            f" <select {attrs}>{options}</select></label>"
        )
    if c.kind == "text":
        return (
            f'<label class="tfx-sw-control tfx-sw-text-input"{hide}><span>{label}</span>'
            f' <input type="text" value="{html.escape(str(c.default))}" {attrs}></label>'
        )
    shown = html.escape(json.dumps([readout(c, s) for s in stops]))
    now = html.escape(readout(c, c.default))
    return (
        f'<label class="tfx-sw-control tfx-sw-slider"{hide}><span>{label}</span>'
        f' <input type="range" min="0" max="{len(stops) - 1}" step="1" value="{at}"'
        f' data-readouts=\'{shown}\' aria-label="{label}" aria-valuetext="{now}" {attrs}>'
        f" <output>{now}</output></label>"
    )


def default_key(frames: dict) -> str:
    """The key of the setting where every control is at its live default."""
    controls = {c["label"]: c for c in frames["controls"]}
    return ",".join(
        str(next(j for j, s in enumerate(stops) if same(s, controls[label]["default"])))
        for label, stops in zip(frames["declared"], frames["stops"])
    )


def offer(frames: dict) -> str:
    """What this page's copy of the widget offers, in words: which controls move, which stay at
    their defaults (the live widget's prose may ask for more), and how much of the grid is there."""
    declared = dict(zip(frames["declared"], frames["stops"]))
    labels = [c["label"] for c in frames["controls"]]
    moving = [lab for lab in labels if len(declared.get(lab, [])) > 1]
    fixed = [lab for lab in labels if lab not in moving]
    if not moving:
        return f"Here every control ({_listed(fixed)}) stays at the default."
    words = f"Here {_listed(moving)} {'moves' if len(moving) == 1 else 'move'}"
    if fixed:
        words += f"; {_listed(fixed)} {'stays' if len(fixed) == 1 else 'stay'} at the default"
    every = math.prod(len(declared[lab]) for lab in moving)
    n = len(frames["settings"])
    if n < every:
        words += (
            f". {n} of the {every} combinations are precomputed: a move that leaves them shows the"
            " nearest one, and a line above this note says which controls it moved"
        )
    return words + "."


def _listed(labels: list) -> str:
    quoted = [f"“{lab}”" for lab in labels]
    if len(quoted) <= 2:
        return " and ".join(quoted)
    return ", ".join(quoted[:-1]) + " and " + quoted[-1]


def page_html(key: str, frames: dict) -> str:
    """The static widget as it goes into the book's copy of the chapter."""
    controls = [Control(**c) for c in frames["controls"]]
    declared = dict(zip(frames["declared"], frames["stops"]))
    parts = [_control_html(i, c, declared.get(c.label)) for i, c in enumerate(controls)]
    t, p = frames["settings"][default_key(frames)]
    # one <img> whenever any setting has a picture, hidden while the shown setting has none, so a
    # picture always belongs to the setting on screen
    src = f' src="{URL}/{key}/{frames["pictures"][p]}"' if p is not None else " hidden"
    picture = (
        f'<img class="tfx-sw-picture" alt="figure for this setting"{src}>'
        if frames["pictures"]
        else ""
    )
    return (
        f'<div class="tfx-sw" data-key="{html.escape(key)}">'
        f'<div class="tfx-sw-controls">{"".join(parts)}</div>'
        f'<pre class="tfx-sw-text">{html.escape(frames["texts"][t])}</pre>{picture}'
        '<p class="tfx-sw-moved" aria-live="polite" hidden></p>'
        f'<p class="tfx-sw-note">{html.escape(NOTE)} {html.escape(offer(frames))}</p>'
        f'<script src="{URL}/{key}/frames.js"></script></div>'
    )


def _data_js(key: str, frames: dict) -> str:
    """The texts and the table of one widget, as a script (works on file:// too)."""
    controls = [Control(**c) for c in frames["controls"]]
    order = [
        next(i for i, c in enumerate(controls) if c.label == lab) for lab in frames["declared"]
    ]
    data = {
        "controls": order,  # the page control behind each position of a setting's key
        "defaults": [
            next(j for j, s in enumerate(stops) if same(s, controls[i].default))
            for i, stops in zip(order, frames["stops"])
        ],
        "texts": frames["texts"],
        "pictures": [f"{URL}/{key}/{p}" for p in frames["pictures"]],
        "settings": frames["settings"],
    }
    return (
        "(window.tfxStaticWidgets = window.tfxStaticWidgets || {})"
        f"[{json.dumps(key)}] = {json.dumps(data, ensure_ascii=False)};\n"
    )


# Chapters whose frames are computed at once, each in its own kernel: most of the work (drawing
# PNGs, small tensors) runs on one core, so two kernels keep a 2-core machine busy.
PARALLEL_KERNELS = 2


def build(chapters: list) -> list:
    """Give every declared widget in the book's copies of the chapters (`chapters`: paths under
    book/chapters) its static frames; return the errors (an empty list: all fine)."""
    shutil.rmtree(STATIC, ignore_errors=True)
    (STATIC / "widgets").mkdir(parents=True)
    # Sphinx never deletes old files under _static: clear the frames of earlier builds
    shutil.rmtree(ROOT / "book" / "_build" / "html" / "_static" / "widgets", ignore_errors=True)
    errors, total, undeclared, todo = [], 0, [], []
    for path in chapters:
        stem = path.stem
        specs = declarations(stem)
        nb = nbformat.read(path, as_version=4)
        found = widget_outputs(nb)
        names = [name for _, name, _, _ in found]
        undeclared += [f"{stem}: {n}" for n in names if n not in specs]
        unknown = [n for n in specs if n not in names]
        if unknown:
            errors.append(f"book/widgets/{stem}.yml: no cell of the chapter shows {unknown}")
        specs = {n: s for n, s in specs.items() if n in names}
        if not specs:
            continue
        bad = []
        for _, name, model_id, _ in found:
            if name in specs:
                where = f"book/widgets/{stem}.yml: {name}"
                bad += check(specs[name], stored_controls(nb, model_id), where)
        if bad:
            errors += bad
            continue
        todo.append((path, nb, found, specs))
    with ThreadPoolExecutor(PARALLEL_KERNELS) as pool:  # threads wait; the kernels compute
        folders = list(pool.map(lambda t: _frames_or_error(t[0].stem, *t[1:]), todo))
    for (path, nb, found, specs), folder in zip(todo, folders):
        if isinstance(folder, str):
            errors.append(folder)
            continue
        err, size = _replace_widgets(path, nb, found, specs, folder)
        errors += err
        total += size
    if total > MAX_SITE_BYTES:
        errors.append(f"static widgets: {total:,} bytes in all, at most {MAX_SITE_BYTES:,}")
    for u in undeclared:
        print(f"static widgets: no grid for {u} (book/widgets/): its page shows the saved state")
    return errors


def _frames_or_error(stem: str, nb, found: list, specs: dict):
    """frames_for's folder, or the error message when a cell or a check failed in the kernel."""
    try:
        return frames_for(stem, nb, found, specs)
    except Exception as e:
        plain = re.sub(r"\x1b\[[0-9;]*m", "", str(e))  # no terminal colours
        return f"{stem}: computing the static frames failed: {plain[-3000:]}"


def _replace_widgets(path: Path, nb, found: list, specs: dict, folder: Path) -> tuple:
    """Publish the frames of the chapter's declared widgets and put their static HTML in place of
    the saved widgets in the book's copy at `path`; (errors, bytes published)."""
    errors, total, replaced = [], 0, set()
    stem = path.stem
    for i, name, model_id, _ in found:
        if name not in specs:
            continue
        frames = json.loads((folder / name / "frames.json").read_text(encoding="utf-8"))
        err, size = _publish(stem, name, frames, folder / name, stored_text(nb, model_id))
        errors += err
        total += size
        cell = nb.cells[i]
        cell.outputs = [
            nbformat.v4.new_output(
                "display_data", data={"text/html": page_html(f"{stem}/{name}", frames)}
            )
            if WIDGET_VIEW in o.get("data", {})
            else o
            for o in cell.outputs
        ]
        replaced.add(model_id)
    if all(model_id in replaced for _, _, model_id, _ in found):
        nb.metadata.pop("widgets", None)  # no saved widget left to render
    nbformat.write(nb, path)
    return errors, total


# Below this, a printed number is rounding noise: it differs between CPUs (PyTorch's and numpy's
# kernels round differently per instruction set), so the drift check takes any two such numbers
# as equal. Everything else in the text, including every larger number, must match exactly.
NOISE_FLOOR = 1e-6
NUMBER_RE = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?")


def same_text(stored: str, frame: str) -> bool:
    """stored == frame, but for numbers that are both below NOISE_FLOOR in magnitude."""
    a, b = stored.rstrip("\n"), frame.rstrip("\n")
    if NUMBER_RE.split(a) != NUMBER_RE.split(b):
        return False
    pairs = zip(NUMBER_RE.findall(a), NUMBER_RE.findall(b))
    return all(x == y or max(abs(float(x)), abs(float(y))) < NOISE_FLOOR for x, y in pairs)


def _publish(stem: str, name: str, frames: dict, src: Path, stored: str | None) -> tuple:
    """Check one widget's frames (drift, budgets) and copy them under the site's static files."""
    where = f"{stem}: {name}"
    errors = []
    text = frames["texts"][frames["settings"][default_key(frames)][0]]
    if stored is None or not same_text(stored, text):
        errors.append(
            f"{where}: drift: the default frame's text differs from the chapter's stored widget "
            "output (re-execute the chapter, or the frame function changed):\n"
            f"--- stored\n{stored}\n--- frame\n{text}"
        )
    n = len(frames["settings"])
    if n > MAX_SETTINGS:
        errors.append(f"{where}: {n} settings, at most {MAX_SETTINGS}")
    if len(frames["pictures"]) > MAX_PICTURES:
        errors.append(
            f"{where}: {len(frames['pictures'])} distinct pictures, at most {MAX_PICTURES}"
        )
    picture_bytes = sum((src / p).stat().st_size for p in frames["pictures"])
    if picture_bytes > MAX_PICTURE_BYTES:
        errors.append(
            f"{where}: {picture_bytes:,} bytes of pictures, at most {MAX_PICTURE_BYTES:,}"
        )
    dst = STATIC / "widgets" / stem / name
    dst.mkdir(parents=True, exist_ok=True)
    for p in frames["pictures"]:
        shutil.copy2(src / p, dst / p)
    data = _data_js(f"{stem}/{name}", frames)
    (dst / "frames.js").write_text(data, encoding="utf-8")
    size = picture_bytes + len(data.encode())
    print(
        f"static widget {where}: {n} settings, {len(frames['texts'])} texts, "
        f"{len(frames['pictures'])} pictures, {size / 1e3:.0f} kB"
    )
    return errors, size


# ---------------------------------------------------------------------------------------------
# Sphinx extension: "download notebook" serves the chapter as written


def _restore_sources(app, exception) -> None:
    if exception is not None or app.builder.format != "html":
        return
    sources = Path(app.outdir) / "_sources" / "chapters"
    for nb in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"):
        if (sources / nb.name).exists():
            shutil.copy2(nb, sources / nb.name)


# The ipywidgets HTML manager (3.6 MB) and what it needs, served from _static by
# tools/prepare_book.py: only a page that still holds a saved widget (one without a declaration,
# or a view in an output) loads them; the static widgets need none of it.
MANAGER_JS = ("require.min.js", "tfx-offline.js", "embed-amd.js")


def _needs_manager(app, pagename: str, body: str) -> bool:
    if WIDGET_VIEW in body or WIDGET_STATE in body:
        return True
    try:  # the saved state, which myst-nb adds to the page's head
        from myst_nb.sphinx_ import NbMetadataCollector

        return "ipywidgets_state" in NbMetadataCollector.get_js_files(app.env, pagename)
    except (ImportError, AttributeError, KeyError):
        return False


def _widget_manager(app, pagename, templatename, context, doctree) -> None:
    if _needs_manager(app, pagename, context.get("body", "")):
        for name in MANAGER_JS:  # before myst-nb's state script, in this order
            app.add_js_file(name, priority=499)


def setup(app):
    app.connect("build-finished", _restore_sources)
    app.connect("html-page-context", _widget_manager)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


if __name__ == "__main__":  # `python -m tools.static_widgets`: rebuild the frames of book/chapters
    problems = build(sorted((ROOT / "book" / "chapters").glob("*.ipynb")))
    print("\n".join(problems), file=sys.stderr)
    sys.exit(1 if problems else 0)
