"""The committed chapters carry outputs from a CPU run, without absolute paths of the machine that
ran them, without widget state no displayed widget needs, with widget ids and stream chunks made
stable (tools/clean_notebooks.py, run by `make notebooks`), so that executing a chapter twice
changes only the cells marked `# NBVAL_IGNORE_OUTPUT`, the cells that print measured time."""

import ast
import base64
import copy
import re
import struct

import nbformat
import pytest
import yaml

from tools import clean_notebooks, execute
from tools.chapters import ROOT, chapter_notebooks

CHAPTERS = chapter_notebooks()
MAX_BYTES = 2 * 1024 * 1024
IGNORE = "# NBVAL_IGNORE_OUTPUT"
# A cell that calls a clock or a timer prints (or depends on) measured time: it must carry IGNORE.
# Imports do not match (no call), nor does tfx.inspect.timing.machine() (the CPU's name, stable on a
# machine).
TIMING_CALL_RE = re.compile(
    r"\b(?:perf_counter(?:_ns)?|process_time(?:_ns)?|monotonic(?:_ns)?|time\.time(?:_ns)?"
    r"|timeit|Timer|blocked_autorange|adaptive_autorange|tqdm|trange)\s*\("
    r"|^\s*%%?(?:time|timeit)\b",
    re.M,
)
# What a progress bar or a measured rate or duration leaves in an output.
RUN_DEPENDENT_RE = re.compile(
    r"\d\s?(?:it|s|samples|tokens|steps|batches|examples)/s\b|\bs/it\b"
    r"|\d+%\|[^|\n]*\||\[\d+:\d\d<\d+:\d\d"
    r"|\b\d+(?:\.\d+)?\s?(?:ms|µs|us|ns)\b"
)


def _code_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code"]


def _marked(cell) -> bool:
    return cell.source.lstrip().startswith(IGNORE)


def _uncommented(source: str) -> str:
    return "\n".join(line.split("#", 1)[0] for line in source.splitlines())


@pytest.mark.parametrize("nb_path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_committed_outputs_are_clean(nb_path):
    nb = nbformat.read(nb_path, as_version=4)
    assert nb_path.stat().st_size < MAX_BYTES, f"{nb_path.name} is {nb_path.stat().st_size} bytes"
    assert any(c.get("outputs") for c in _code_cells(nb)), (
        f"{nb_path.name} has no stored outputs: run `make notebooks`"
    )
    assert not clean_notebooks.absolute_paths(nb), clean_notebooks.absolute_paths(nb)
    stored = nbformat.writes(nb)
    # a plot whose text needs a glyph no font has draws it as a box (site review F2)
    assert "missing from font" not in stored, (
        f"{nb_path.name} stores a matplotlib 'missing from font' warning: draw that text through "
        "tfx.book.viz (its CJK fallback) and re-execute"
    )
    clean_notebooks.clean(nb)
    assert nbformat.writes(nb) == stored, (
        f"{nb_path.name} is not clean (widget state no view needs, random widget ids, split "
        f"streams or timestamps): run `python -m tools.clean_notebooks notebooks/{nb_path.name}`"
    )


@pytest.mark.parametrize("nb_path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_timing_cells_are_marked(nb_path):
    """Every cell that calls a clock or a timer starts `# NBVAL_IGNORE_OUTPUT`, and no other cell's
    stored output shows a progress bar, a rate or a duration in ms/µs/ns."""
    nb = nbformat.read(nb_path, as_version=4)
    unmarked = [c for c in _code_cells(nb) if not _marked(c)]
    timing = [
        c.source.splitlines()[0] for c in unmarked if TIMING_CALL_RE.search(_uncommented(c.source))
    ]
    assert not timing, (
        f"{nb_path.name}: cells that measure time must start with `{IGNORE}`: {timing}"
    )
    leaks = [
        (c.source.splitlines()[0], m.group(0))
        for c in unmarked
        for o in c.get("outputs", [])
        for text in [o.get("text", "") + str(o.get("data", {}).get("text/plain", ""))]
        for m in [RUN_DEPENDENT_RE.search(text)]
        if m
    ]
    assert not leaks, (
        f"{nb_path.name}: progress bars, rates or durations in cells not marked `{IGNORE}`: {leaks}"
    )


def test_timing_heuristic():
    assert TIMING_CALL_RE.search("t0 = time.perf_counter()\nf()")
    assert TIMING_CALL_RE.search("r = timeit(f, x, label='loop')")
    assert TIMING_CALL_RE.search("benchmark.Timer(stmt='f(x)').blocked_autorange()")
    assert TIMING_CALL_RE.search("%%timeit\nf(x)")
    assert TIMING_CALL_RE.search("for b in tqdm(batches):")
    assert not TIMING_CALL_RE.search(
        "from tfx.inspect.timing import machine, timeit\nprint(machine())"
    )
    assert not TIMING_CALL_RE.search(_uncommented("f(x)  # unlike time.perf_counter() here"))
    for leak in ("100%|██████████| 50/50", "12.3it/s", "3.5 ms per step", "[00:01<00:02"):
        assert RUN_DEPENDENT_RE.search(leak), leak
    for fine in ("d_ms = 4", "loss 0.1234 at step 50", "mask (2, 8) bool", "42 Shakespeare texts"):
        assert not RUN_DEPENDENT_RE.search(fine), fine


CHECK = "# NBVAL_CHECK_OUTPUT"
# A checked cell is compared digit for digit on whatever CPU runs nbval, and PyTorch's kernels round
# differently per instruction set (tfx/core/stable.py). Two shapes of number show rounding, not a
# result:
# - in scientific notation below 1e-4, neither 0 nor a power of ten (a printed bound, `< 1e-05`):
#   almost always a difference of two ways to compute one thing, i.e. rounding noise. A cell whose
#   small numbers are magnitudes (a gradient that vanishes through a product of factors), whose
#   leading digits do not depend on rounding, says so in a comment `# magnitudes: <why>`;
# - a decimal with more than 6 significant digits, more than float32 carries.
SCI_RE = re.compile(r"(?<![\w.])[-+]?(\d+(?:\.\d+)?)e([-+]\d+)\b")
DECIMAL_RE = re.compile(r"(?<![\w.])[-+]?\d*\.\d+(?![\d.e])")
MAGNITUDES_RE = re.compile(r"^# magnitudes: \S.{15,}", re.M)


def float_noise(text: str, magnitudes: bool = False) -> list:
    """The numbers in `text` that a checked cell cannot print the same on every CPU."""
    found = [
        m.group(0)
        for m in SCI_RE.finditer(text)
        if not magnitudes and float(m.group(1)) not in (0.0, 1.0) and abs(float(m.group(0))) < 1e-4
    ]
    found += [
        m.group(0)
        for m in DECIMAL_RE.finditer(text)
        if len(m.group(0).lstrip("+-").replace(".", "").lstrip("0")) > 6
    ]
    return found


@pytest.mark.parametrize("nb_path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_checked_cells_print_no_float_noise(nb_path):
    """What `make nbval-avx2` checks on one pair of CPUs, this checks for any: a cell that nbval
    compares prints bounds (tfx.core.stable.below), rounded values and counts, not rounding
    noise."""
    nb = nbformat.read(nb_path, as_version=4)
    noisy = [
        (c.source.splitlines()[1] if len(c.source.splitlines()) > 1 else "", found)
        for c in _code_cells(nb)
        if c.source.lstrip().startswith(CHECK)
        for text in [
            "".join(
                o.get("text", "") + str(o.get("data", {}).get("text/plain", ""))
                for o in c.get("outputs", [])
            )
        ]
        for found in [float_noise(text, magnitudes=bool(MAGNITUDES_RE.search(c.source)))]
        if found
    ]
    assert not noisy, (
        f"{nb_path.name}: checked cells print numbers whose digits depend on the CPU's rounding; "
        f"print a bound (tfx.core.stable.below) or fewer digits, or, for magnitudes, say why in a "
        f"`# magnitudes: ...` comment: {noisy}"
    )


def test_float_noise_heuristic():
    for noise in ("max |Δ| 4.8e-07", "residual 2.1e-05", "p = 0.017241379246115685", "8.199233"):
        assert float_noise(noise), noise
    for fine in (
        "max |Δ| < 1e-05",
        "0.0e+00",
        "eps 1e-12",
        "loss 0.1637",
        "norm 3.5e+06",
        "1.0e-05",
    ):
        assert not float_noise(fine), fine
    assert not float_noise("std 9.4e-19", magnitudes=True)
    assert float_noise("p = 0.017241379246115685", magnitudes=True)


def _titles_in_readme() -> dict:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    return dict(re.findall(r"^\| (\d\d) \| ([^|]+?) \|", readme, re.M))


@pytest.mark.parametrize("nb_path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_chapter_title_is_the_planned_one(nb_path):
    """The first line is `# NN · Title`, the title as in book/claims.yml and the README's table."""
    planned = yaml.safe_load((ROOT / "book" / "claims.yml").read_text(encoding="utf-8"))
    number = nb_path.stem[:2]
    title = planned["chapters"][number]
    assert _titles_in_readme().get(number) == title, f"README's table: {number} is not {title!r}"
    nb = nbformat.read(nb_path, as_version=4)
    first = nb.cells[0]
    assert first.cell_type == "markdown", f"{nb_path.name}: the first cell is not the title"
    assert first.source.splitlines()[0] == f"# {number} · {title}"


@pytest.mark.parametrize("nb_path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_transposes_are_written_the_books_way(nb_path):
    """CONTRIBUTING, "Transpose": `^{\\mathsf T}`, never `^\\top` (whose crossbar fades at the
    site's resolution, so K^⊤ reads as K^|) and never a bare `^T` in the prose's maths."""
    nb = nbformat.read(nb_path, as_version=4)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown":
            continue
        maths = " ".join(re.findall(r"\$\$.*?\$\$|\$[^$]*\$", cell.source, flags=re.S))
        bad = re.findall(r"\^\s*\{?\\top\b|\^\s*T\b", maths)
        assert not bad, f"{nb_path.name}, cell {i}: {bad} (write ^{{\\mathsf T}})"


@pytest.mark.parametrize("nb_path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_every_picture_has_a_caption(nb_path):
    """CONTRIBUTING, "Figures": a cell that draws pictures has one `# Figure N.n:` caption per
    picture, numbered in turn through the chapter; the site shows the caption under each figure and
    as its alt text (tools/prepare_book.py)."""
    from tools.prepare_book import figure_captions

    nb = nbformat.read(nb_path, as_version=4)
    chapter, n = str(int(nb_path.stem[:2])), 0
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        pictures = sum("image/png" in o.get("data", {}) for o in cell.get("outputs", []))
        captions = figure_captions(cell.source)[1]
        assert len(captions) == pictures, (
            f"{nb_path.name}, cell {i}: {pictures} picture(s), "
            f"{len(captions)} `# Figure {chapter}.n:` caption(s)"
        )
        for number, caption in captions:
            n += 1
            assert number == f"{chapter}.{n}", f"{nb_path.name}: Figure {number} is {chapter}.{n}"
            assert len(caption) >= 40 and caption.endswith("."), (
                f"{nb_path.name}, Figure {number}: a caption says what the figure shows and how to "
                f"read it, in a sentence or two ending with a full stop: {caption!r}"
            )


@pytest.mark.parametrize("nb_path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_pictures_are_sharp_and_readable_on_the_page(nb_path):
    """Site review F6: every stored picture is a retina PNG (twice the pixels of the display size
    in its metadata: tfx.book.figures.book_figures, which tfx.book.viz turns on) no wider than the
    page's column, and no output stores the warning that a figure's text would show too small on
    the page."""
    from tfx.book.figures import COLUMN_PX, TOO_SMALL

    nb = nbformat.read(nb_path, as_version=4)
    assert TOO_SMALL not in nbformat.writes(nb), (
        f"{nb_path.name} stores a '{TOO_SMALL}' warning: enlarge that figure's text or narrow it"
    )
    for i, cell in enumerate(_code_cells(nb)):
        for out in cell.get("outputs", []):
            if "image/png" not in out.get("data", {}):
                continue
            width, _ = struct.unpack(">II", base64.b64decode(out["data"]["image/png"])[16:24])
            shown = out.get("metadata", {}).get("image/png", {}).get("width")
            assert shown is None or shown <= COLUMN_PX, (
                f"{nb_path.name}, code cell {i}: a figure {shown} px wide, wider than the page's "
                f"{COLUMN_PX}-px column, which shrinks it and its text: narrow it"
            )
            assert shown and abs(2 * shown - width) <= 1, (
                f"{nb_path.name}, code cell {i}: a {width}-pixel PNG shown at {shown}: not a "
                "retina figure (the chapter draws before tfx.book.viz or book_figures() ran)"
            )


SOLUTION_RE = re.compile(r"^:::\{admonition\} Solution to exercise (\d+)\n:class: dropdown\n", re.M)


@pytest.mark.parametrize(
    "nb_path",
    [p for p in CHAPTERS if p.stem[:2] < "90"],
    ids=[p.stem for p in CHAPTERS if p.stem[:2] < "90"],
)
def test_every_exercise_has_its_own_solution(nb_path):
    """CONTRIBUTING, "Hidden answers": after the exercise list, each exercise N in turn gets a
    dropdown "Solution to exercise N" with the reasoning in prose, then the hide-cell cell
    `# N. …` that checks it, if there is code; no solution before its exercise is asked."""
    nb = nbformat.read(nb_path, as_version=4)
    heads = [
        i
        for i, c in enumerate(nb.cells)
        if c.cell_type == "markdown" and re.search(r"^## Exercises$", c.source, flags=re.M)
    ]
    assert len(heads) == 1, f"{nb_path.name}: {len(heads)} '## Exercises' headings"
    listed = re.split(r"^## Exercises$", nb.cells[heads[0]].source, flags=re.M)[1]
    listed = re.split(r"^## ", listed, flags=re.M)[0]
    exercises = re.findall(r"^(\d+)\. ", listed, flags=re.M)
    assert exercises == [str(k) for k in range(1, len(exercises) + 1)], exercises
    solved = []
    for cell in nb.cells[: heads[0]]:
        assert not SOLUTION_RE.search(cell.source), f"{nb_path.name}: a solution before the list"
    for cell in nb.cells[heads[0] + 1 :]:
        if cell.cell_type == "markdown":
            solved += SOLUTION_RE.findall(cell.source)
            continue
        first = [ln for ln in cell.source.split("\n") if not ln.startswith("# NBVAL_")][0]
        m = re.match(r"# (\d+)\. ", first)
        assert m and "hide-cell" in cell.metadata.get("tags", []), (
            f"{nb_path.name}: a code cell after the exercises is not a hide-cell `# N. …` answer: "
            f"{first!r}"
        )
        assert solved and m[1] == solved[-1], (
            f"{nb_path.name}: code for {m[1]} not under its dropdown"
        )
    assert solved == exercises, f"{nb_path.name}: solutions {solved} for exercises {exercises}"


# ---- the cleaner itself -------------------------------------------------------------------------


def _widget_nb(tmp_root: str):
    """A notebook as nbconvert leaves it: a displayed slider, an undisplayed one, a path, a
    timestamp."""
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
        "cc": {"model_name": "IntSliderModel", "state": {"layout": "IPY_MODEL_dd"}},
        "dd": {"model_name": "LayoutModel", "state": {}},
        "bb": {"model_name": "LayoutModel", "state": {}},
        "aa": {"model_name": "IntSliderModel", "state": {"layout": "IPY_MODEL_bb"}},
    }
    nb = nbformat.v4.new_notebook(cells=[cell])
    nb.metadata["widgets"] = {
        clean_notebooks.WIDGET_STATE: {"state": state, "version_major": 2, "version_minor": 0}
    }
    return nb


def _state(nb) -> dict:
    return nb.metadata["widgets"][clean_notebooks.WIDGET_STATE]["state"]


def test_clean_keeps_only_displayed_widgets_and_strips_paths():
    nb = _widget_nb(str(ROOT))
    clean_notebooks.clean(nb)
    one, two = f"{1:032x}", f"{2:032x}"  # aa, then the layout it refers to
    assert _state(nb) == {
        one: {"model_name": "IntSliderModel", "state": {"layout": f"IPY_MODEL_{two}"}},
        two: {"model_name": "LayoutModel", "state": {}},
    }
    assert nb.cells[0].outputs[0]["data"][clean_notebooks.WIDGET_VIEW]["model_id"] == one
    assert nb.cells[0].outputs[1]["text"] == "<repo>/x.py:3: UserWarning\n"
    assert "execution" not in nb.cells[0].metadata
    assert clean_notebooks.absolute_paths(nb) == []
    again = copy.deepcopy(nb)
    clean_notebooks.clean(again)
    assert nbformat.writes(again) == nbformat.writes(nb)  # cleaning twice changes nothing


def test_widget_ids_follow_first_appearance_not_the_kernels_ids():
    """Two runs draw different random ids; after cleaning, both notebooks are the same."""
    nb1 = _widget_nb("/x")
    nb2 = copy.deepcopy(nb1)
    swap = {"aa": "9f", "bb": "07", "cc": "aa", "dd": "bb"}  # ids that even collide with run 1's
    nb2.cells[0].outputs[0]["data"][clean_notebooks.WIDGET_VIEW]["model_id"] = "9f"
    nb2.metadata["widgets"][clean_notebooks.WIDGET_STATE]["state"] = {
        swap[k]: {**v, "state": {"layout": f"IPY_MODEL_{swap[v['state']['layout'][10:]]}"}}
        if v["state"]
        else v
        for k, v in _state(nb2).items()
    }
    clean_notebooks.clean(nb1)
    clean_notebooks.clean(nb2)
    assert nbformat.writes(nb1) == nbformat.writes(nb2)


def test_a_widget_shown_inside_an_output_widget_is_kept():
    view = {"model_id": "o1", "version_major": 2, "version_minor": 0}
    inner = {"model_id": "s1", "version_major": 2, "version_minor": 0}
    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell(
                "out",
                outputs=[
                    nbformat.v4.new_output("display_data", data={clean_notebooks.WIDGET_VIEW: view})
                ],
            )
        ]
    )
    saved = [
        {"output_type": "stream", "name": "stdout", "text": "a\n"},
        {"output_type": "stream", "name": "stdout", "text": ["b\n", "c\n"]},
        {"output_type": "display_data", "data": {clean_notebooks.WIDGET_VIEW: inner}},
    ]
    nb.metadata["widgets"] = {
        clean_notebooks.WIDGET_STATE: {
            "state": {
                "s1": {"model_name": "IntSliderModel", "state": {}},
                "o1": {"model_name": "OutputModel", "state": {"outputs": saved}},
                "zz": {"model_name": "LayoutModel", "state": {}},
            }
        }
    }
    clean_notebooks.clean(nb)
    state = _state(nb)
    assert list(state) == [f"{1:032x}", f"{2:032x}"]  # the Output widget, then the slider in it
    outputs = state[f"{1:032x}"]["state"]["outputs"]
    assert outputs[0] == {"output_type": "stream", "name": "stdout", "text": "a\nb\nc\n"}
    assert outputs[1]["data"][clean_notebooks.WIDGET_VIEW]["model_id"] == f"{2:032x}"


def test_merge_streams_merges_only_neighbours_of_one_name():
    def s(name, text):
        return {"output_type": "stream", "name": name, "text": text}

    image = {"output_type": "display_data", "data": {"image/png": "..."}}
    merged = clean_notebooks.merge_streams(
        [s("stdout", "a\n"), s("stdout", "b\n"), s("stderr", "w\n"), s("stdout", "c"), image]
        + [s("stdout", "d\n"), s("stdout", "e\n")]
    )
    assert merged == [s("stdout", "a\nb\n"), s("stderr", "w\n"), s("stdout", "c"), image] + [
        s("stdout", "d\ne\n")
    ]


def test_absolute_paths_are_found():
    nb = _widget_nb("/home/someone/project")
    assert clean_notebooks.absolute_paths(nb) == ["/home/someone/project/x.py"]


# ---- a cell that prints has stored what it printed --------------------------------------------

# Context managers that swallow what their block prints (a block under `with out:`, an ipywidgets
# Output, is not followed either: its context is a name, not a call).
CAPTURING = {"redirect_stdout", "redirect_stderr", "capture_output", "capture", "quiet_stderr"}


def _callee(call: ast.Call) -> str:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def surely_prints(source: str) -> bool:
    """Whether running `source` certainly writes an output: a `print(...)` or `display(...)`
    statement (no `file=`) that runs whenever the cell runs, at the cell's top level or inside
    `with` blocks opened by calls that let output through (`with threads(1):`). Prints inside a
    function, a class, a branch or a loop may legitimately not run, so they do not count: the rule
    misses some empty cells rather than flag a healthy one."""
    lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
    try:
        body = ast.parse("\n".join(lines)).body
    except SyntaxError:
        return False
    while body:
        stmt, body = body[0], body[1:]
        if isinstance(stmt, ast.With | ast.AsyncWith):
            contexts = [item.context_expr for item in stmt.items]
            if all(isinstance(c, ast.Call) and _callee(c) not in CAPTURING for c in contexts):
                body = stmt.body + body
        elif (
            isinstance(stmt, ast.Expr)
            and isinstance(stmt.value, ast.Call)
            and _callee(stmt.value) in ("print", "display")
            and not any(k.arg == "file" for k in stmt.value.keywords)
        ):
            return True
    return False


@pytest.mark.parametrize("nb_path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_printing_cells_have_stored_outputs(nb_path):
    """A cell that certainly prints has outputs: an empty one is a lost execution (chapter 08's live
    layer timing, appendix 94's N30 timing, chapter 10's freeze timing all were) that nbval in lax
    mode does not see, since an ignored or unmarked cell's output is never compared."""
    nb = nbformat.read(nb_path, as_version=4)
    empty = [
        c.source.splitlines()[0]
        for c in _code_cells(nb)
        if not c.get("outputs") and surely_prints(c.source)
    ]
    assert not empty, (
        f"{nb_path.name}: cells that print have no stored output; re-execute the chapter: {empty}"
    )


def test_an_emptied_printing_cell_is_caught():
    nb = nbformat.read(ROOT / "notebooks" / "08_performance.ipynb", as_version=4)
    cell = next(c for c in _code_cells(nb) if "inference, batch 2 × 128" in c.source)
    assert cell.outputs and surely_prints(cell.source)  # the live layer timing, stored
    cell.outputs = []
    assert any(not c.get("outputs") and surely_prints(c.source) for c in _code_cells(nb))
    assert surely_prints("%matplotlib inline\nwith threads(1), torch.no_grad():\n    print(x)")
    assert surely_prints("display(table)")
    quiet = [
        "def f(x):\n    print(x)",  # defined, never called here
        "class A:\n    def show(self):\n        print(1)",
        "if fast.bf16:\n    print('bf16')",  # a branch may not run
        "for row in rows:\n    print(row)",  # nor a loop over an empty list
        "with out:\n    print('into the Output widget')",
        "with contextlib.redirect_stdout(buf):\n    print('captured')",
        "print('to a file', file=f)",
        "x = print",
        "not python at all (",
    ]
    for source in quiet:
        assert not surely_prints(source), source


# ---- two executions of one notebook, cleaned, are the same -------------------------------------

RERUN_CELLS = [
    # a widget whose saved state includes an Output widget with printed text
    "import ipywidgets\n"
    "from IPython.display import display\n"
    "out = ipywidgets.Output()\n"
    'display(ipywidgets.VBox([ipywidgets.IntSlider(3, description="n"), out]))\n'
    "with out:\n"
    '    print("inside", flush=True)\n'
    '    print("the box")',
    # stdout in chunks: each flush sends its own stream message
    'import sys\nprint("a", flush=True)\nprint("b", flush=True)\nprint("c")',
    '# NBVAL_IGNORE_OUTPUT\nimport time\nprint(f"{time.perf_counter_ns()} ns")',
]


def _execute(tmp_path, nb):
    nbclient = pytest.importorskip("nbclient")
    nb = copy.deepcopy(nb)
    client = nbclient.NotebookClient(
        nb,
        kernel_name="python3",
        timeout=60,
        kernel_manager_class=execute.KernelManager,  # as `make notebooks` runs the chapters
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()
    return nb


def _without_ignored_outputs(nb) -> str:
    nb = copy.deepcopy(nb)
    for cell in _code_cells(nb):
        if _marked(cell):
            cell.outputs = []
    return nbformat.writes(nb)


def test_two_executions_are_identical_once_cleaned(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in RERUN_CELLS])
    runs = [_execute(tmp_path, nb), _execute(tmp_path, nb)]
    raw = [nbformat.writes(nb) for nb in runs]
    assert raw[0] != raw[1]  # the kernel drew new widget ids (and the clock moved)
    assert len(runs[0].cells[1].outputs) == 3  # three stream chunks before cleaning
    for nb in runs:
        clean_notebooks.clean(nb)
    assert _without_ignored_outputs(runs[0]) == _without_ignored_outputs(runs[1])
    assert runs[0].cells[1].outputs == [
        nbformat.v4.new_output("stream", name="stdout", text="a\nb\nc\n")
    ]
    assert _state(runs[0]), "the widget state was dropped"
    assert runs[0].cells[2].outputs != runs[1].cells[2].outputs  # only the marked cell differs
