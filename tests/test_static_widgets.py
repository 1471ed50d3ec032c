"""tools/static_widgets.py: the declared grids match the live controls (label, default, stops the
live control can reach), the steps of tests/widget_checks land on the grid, the frames come from
the widget's own function (texts and pictures stored once, 256-colour PNGs), and the build refuses
drift and broken budgets."""

import json
import math
import re
from html import escape

import nbformat
import pytest
import yaml

import tfx.book.widgets
from tools import static_widgets as sw
from tools.chapters import ROOT, chapter_notebooks

CHECKS = ROOT / "tests" / "widget_checks"
DECLARED = [p for p in chapter_notebooks() if sw.declarations(p.stem)]
NO_ARGS = {  # widgets a test can build without a chapter's state
    "forget_bias_widget": ("00_why_not_rnn", tfx.book.widgets.forget_bias_widget),
    "shapes_widget": ("01_shapes", tfx.book.widgets.shapes_widget),
    "pe_widget": ("02_positional_encoding", tfx.book.widgets.pe_widget),
    "gradient_check_widget": ("09_numpy_from_scratch", tfx.book.widgets.gradient_check_widget),
}


def _shown(nb_path):
    nb = nbformat.read(nb_path, as_version=4)
    return nb, {name: model_id for _, name, model_id, _ in sw.widget_outputs(nb)}


@pytest.mark.parametrize("nb_path", DECLARED, ids=[p.stem for p in DECLARED])
def test_declared_controls_match_the_stored_live_widget(nb_path):
    """Each declared control exists in the widget as the chapter's kernel built it (its saved
    state), its live default is a stop, every stop is reachable, and the grid fits the budget."""
    nb, shown = _shown(nb_path)
    specs = sw.declarations(nb_path.stem)
    assert set(specs) <= set(shown), f"declared but not shown: {set(specs) - set(shown)}"
    for name, spec in specs.items():
        controls = sw.stored_controls(nb, shown[name])
        assert sw.check(spec, controls, name) == []
        assert 1 < len(sw.settings(spec, controls)) <= sw.MAX_SETTINGS


@pytest.mark.parametrize("name", sorted(NO_ARGS))
def test_declared_controls_match_a_freshly_built_widget(name):
    stem, make = NO_ARGS[name]
    spec = sw.declarations(stem).get(name)
    if spec is None:
        pytest.skip(f"{stem} declares no grid for {name}")
    box = make()
    controls = [sw.live_control(w) for w in box.tfx_controls.values()]
    assert sw.check(spec, controls, name) == []
    nb, shown = _shown(ROOT / "notebooks" / f"{stem}.ipynb")
    assert [(c.label, c.default) for c in controls] == [
        (c.label, c.default) for c in sw.stored_controls(nb, shown[name])
    ]


def _walk(controls: dict, steps: list) -> dict:
    """Control values after the steps of a widget check, as the live widget would have them."""
    values = {c.label: c.default for c in controls.values()}
    for step in steps:
        label = step["label"]
        if step["action"] == "click":
            hit = [c for c in controls.values() if c.kind == "bool" and c.label == label]
            if hit:
                values[label] = not values[label]
                continue
            hit = [c for c in controls.values() if c.kind == "choice" and label in c.options]
            assert hit, f"no checkbox or button {label!r}"
            values[hit[0].label] = label
        else:
            c = controls[label]
            moves = int(step.get("times", 1)) * (1 if step["action"] == "right" else -1)
            if c.kind == "log":
                values[label] = c.base ** (math.log(values[label], c.base) + moves * c.step)
            else:
                values[label] = values[label] + moves * c.step
    return values


@pytest.mark.parametrize("nb_path", DECLARED, ids=[p.stem for p in DECLARED])
def test_widget_check_steps_land_on_the_grid(nb_path):
    """Every state the browser test passes through (tests/widget_checks) is a precomputed setting,
    so the static page can follow the same steps as JupyterLab."""
    check = CHECKS / f"{nb_path.stem}.yml"
    if not check.exists():
        pytest.skip("no widget check")
    steps = yaml.safe_load(check.read_text(encoding="utf-8"))["steps"]
    nb, shown = _shown(nb_path)
    specs = sw.declarations(nb_path.stem)
    controls = {}
    for name in specs:
        controls |= {c.label: c for c in sw.stored_controls(nb, shown[name])}
    for n in range(1, len(steps) + 1):
        values = _walk(controls, steps[:n])
        for name, spec in specs.items():
            own = [c.label for c in sw.stored_controls(nb, shown[name])]
            if not any(values[k] != controls[k].default for k in own):
                continue
            declared = spec["controls"]
            setting = []
            for label, stops in declared.items():
                c = controls[label]
                hit = [i for i, s in enumerate(stops) if sw.same(sw.snap(c, s), values[label])]
                assert hit, f"step {n}: {label} = {values[label]} is not a stop {stops}"
                setting.append(hit[0])
            fixed = [k for k in own if k not in declared and values[k] != controls[k].default]
            assert not fixed, f"step {n} moves {fixed}, which the grid keeps fixed"
            assert tuple(setting) in sw.settings(spec, list(controls.values())), f"step {n}"


# --- the checks themselves, on made-up controls -------------------------------------------------

INT = sw.Control("int", "n", 4, min=1, max=16, step=1)
FLOAT = sw.Control("float", "scale", 1.0, min=0.0, max=2.0, step=0.1)
LOG = sw.Control("log", "T", 1.0, min=-1.3, max=1.3, step=0.1, base=10.0)
BOOL = sw.Control("bool", "on", False)
CHOICE = sw.Control("choice", "mode", "a", options=["a", "b", "c"])
TEXT = sw.Control("text", "sentence", "hi")
ALL = [INT, FLOAT, LOG, BOOL, CHOICE, TEXT]


def _errors(controls: dict, **extra) -> list:
    return sw.check({"controls": controls, **extra}, ALL, "w")


def test_check_accepts_reachable_stops():
    good = {
        "n": [1, 4, 16],
        "scale": [0, 0.3, 1, 2],
        "T": [0.0501, 0.501, 1, 20],  # a log slider's stops as its readout shows them
        "on": [False, True],
        "mode": ["a", "c"],
    }
    assert _errors(good) == []
    assert sw.snap(LOG, 0.0501) == pytest.approx(10**-1.3, rel=1e-12)
    assert sw.snap(LOG, 20) == pytest.approx(10**1.3, rel=1e-12)


@pytest.mark.parametrize(
    "controls,message",
    [
        ({"nope": [1]}, "no live control labelled 'nope'"),
        ({"n": [1, 2]}, "the live default 4 is not a stop"),
        ({"n": [4, 17]}, "cannot reach 17"),
        ({"n": [4, 2.5]}, "cannot reach 2.5"),
        ({"scale": [1, 0.25]}, "cannot reach 0.25"),
        ({"T": [1, 0.3]}, "cannot reach 0.3"),
        ({"T": [1, 50]}, "cannot reach 50"),
        ({"on": [False, "yes"]}, "cannot reach 'yes'"),
        ({"mode": ["a", "d"]}, "cannot reach 'd'"),
        ({"sentence": ["hi"]}, "text box"),
        ({"n": [1, 2, 3, 4, 5, 6, 7, 8]}, "8 stops, at most 7"),
        ({"n": [4, 4]}, "listed twice"),
        ({"n": []}, "non-empty list"),
        ({}, "no controls declared"),
    ],
)
def test_check_refuses_what_the_live_widget_cannot_do(controls, message):
    errors = _errors(controls)
    assert any(message in e for e in errors), errors


def test_check_refuses_a_bad_combine_and_too_many_settings():
    assert any("combine must be" in e for e in _errors({"n": [4]}, combine="some"))
    assert any("groups" in e for e in _errors({"n": [4], "on": [False]}, combine=[["n"]]))
    assert _errors({"n": [4], "on": [False]}, combine=[["n", "on"], ["n"]]) == []
    big = {"n": list(range(1, 8)), "scale": [0, 0.5, 1, 1.5, 2], "T": [0.1, 1, 10, 20]}
    big |= {"on": [False, True], "mode": ["a", "b", "c"]}
    assert _errors(big) == []  # 7 * 5 * 4 * 2 * 3 = 840 settings
    over = dict(big, scale=[0, 0.3, 0.5, 1, 1.2, 1.5, 2], T=[0.0501, 0.1, 0.2, 1, 2, 10, 20])
    assert any("2058 settings, at most 2000" in e for e in _errors(over))  # 7 * 7 * 7 * 2 * 3


def test_settings_all_each_and_groups():
    controls = {"n": [1, 4, 16], "on": [False, True], "mode": ["a", "b", "c"]}
    assert len(sw.settings({"controls": controls}, ALL)) == 18
    each = sw.settings({"controls": controls, "combine": "each"}, ALL)
    assert len(each) == 1 + 2 + 1 + 2 and (1, 0, 0) in each and (0, 1, 0) not in each
    groups = sw.settings({"controls": controls, "combine": [["n", "on"], ["mode"]]}, ALL)
    assert len(groups) == 6 + 2 and (2, 1, 0) in groups and (2, 0, 1) not in groups


def test_readout_like_the_live_widget():
    assert sw.readout(INT, 4) == "4"
    assert sw.readout(FLOAT, 0.3) == "0.30"
    assert sw.readout(LOG, 10**-1.3) == "0.0501"
    assert sw.readout(CHOICE, "b") == "b"


# --- frames: computed by the widget's own function, stored once ---------------------------------


def _toy_widget():
    """A widget with a text that repeats and a picture that depends on one control only."""
    import ipywidgets as widgets
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = widgets.IntSlider(2, min=0, max=4, description="n")
    flip = widgets.Checkbox(False, description="flip")

    def frame(n, flip):
        fig, ax = plt.subplots(figsize=(2, 2))
        ax.plot([0, 1], [0, -1 if flip else 1])
        return f"n // 2 = {n // 2}", fig

    return tfx.book.widgets._shell({"n": n, "flip": flip}, frame, [n, flip]), frame


def test_dump_frames_uses_the_widget_function_and_deduplicates(tmp_path):
    from PIL import Image

    box, frame = _toy_widget()
    spec = {"controls": {"n": [0, 1, 2, 3, 4], "flip": [False, True]}}
    sw.dump_frames(box, spec, str(tmp_path / "toy"))
    frames = json.loads((tmp_path / "toy" / "frames.json").read_text())
    assert len(frames["settings"]) == 10
    assert sorted(frames["texts"]) == ["n // 2 = 0", "n // 2 = 1", "n // 2 = 2"]
    assert len(frames["pictures"]) == 2  # two distinct pictures for ten settings
    picture_of_flip = {}
    for key, (t, p) in frames["settings"].items():
        i, j = map(int, key.split(","))
        text, _ = tfx.book.widgets.frame_parts(frame(i, bool(j)))
        assert frames["texts"][t] == text
        assert picture_of_flip.setdefault(j, p) == p  # the picture depends on flip only
    assert picture_of_flip[0] != picture_of_flip[1]
    image = Image.open(tmp_path / "toy" / frames["pictures"][0])
    assert image.mode == "P" and len(image.getcolors(256)) <= 256  # a 256-colour PNG
    assert sw.default_key(frames) == "2,0"
    html = sw.page_html("toy/w", frames)
    assert "n // 2 = 1" in html and "disabled" in html and escape(sw.NOTE) in html
    assert html.count('data-control="') == 2 and "frames.js" in html
    assert escape(sw.offer(frames)) in html and 'class="tfx-sw-moved"' in html
    assert sw.offer(frames) == "Here “n” and “flip” move."  # all 10 combinations are there


def test_fixed_controls_are_hidden():
    """A control the page keeps at its default (a text box, a slider with one stop) is hidden,
    not greyed out: it would look live and do nothing (issue 46); the note names it."""
    frames = {
        "controls": [
            {"kind": "int", "label": "n", "default": 1, "min": 0, "max": 2, "step": 1},
            {"kind": "text", "label": "your text", "default": "我喜欢"},
            {"kind": "int", "label": "k", "default": 3, "min": 0, "max": 5, "step": 1},
        ],
        "declared": ["n"],
        "stops": [[0, 1, 2]],
        "settings": {"0": [0, None], "1": [0, None], "2": [0, None]},
        "texts": ["t"],
        "pictures": [],
    }
    page = sw.page_html("toy/w", frames)
    shown = re.findall(r'<label class="tfx-sw-control [^"]*"( hidden)?>', page)
    assert shown == ["", " hidden", " hidden"], shown
    assert "“your text” and “k” stay at the default" in page


def test_offer_says_what_the_page_holds():
    """The line under a static widget names the controls that move and those fixed at their
    defaults, and says when only part of the grid was precomputed."""
    controls = [{"label": lab} for lab in ("a", "b", "text", "c")]
    frames = {
        "controls": controls,
        "declared": ["a", "b", "c"],
        "stops": [[0, 1, 2], [False, True], [5]],
        "settings": {
            "0,0,0": [0, None],
            "1,0,0": [0, None],
            "2,0,0": [0, None],
            "0,1,0": [0, None],
        },
    }
    assert sw.offer(frames) == (
        "Here “a” and “b” move; “text” and “c” stay at the default. 4 of the 6 combinations are"
        " precomputed: a move that leaves them shows the nearest one, and a line above this note"
        " says which controls it moved."
    )
    frames["stops"] = [[0], [False], [5]]
    frames["settings"] = {"0,0,0": [0, None]}
    assert sw.offer(frames) == "Here every control (“a”, “b”, “text” and “c”) stays at the default."


def test_dump_frames_refuses_a_grid_the_widget_cannot_show(tmp_path):
    box, _ = _toy_widget()
    with pytest.raises(ValueError, match="cannot reach 5"):
        sw.dump_frames(box, {"controls": {"n": [2, 5]}}, str(tmp_path / "toy"))
    with pytest.raises(TypeError, match="tfx.book.widgets._shell"):
        sw.dump_frames(object(), {"controls": {"n": [2]}}, str(tmp_path / "toy"))


def test_publish_refuses_drift_and_broken_budgets(tmp_path, monkeypatch):
    monkeypatch.setattr(sw, "STATIC", tmp_path / "static")
    box, _ = _toy_widget()
    src = tmp_path / "toy"
    sw.dump_frames(box, {"controls": {"n": [0, 1, 2, 3, 4], "flip": [False, True]}}, str(src))
    frames = json.loads((src / "frames.json").read_text())
    errors, size = sw._publish("00_x", "toy", frames, src, "n // 2 = 1\n")
    assert errors == [] and size > 0
    assert (tmp_path / "static" / "widgets" / "00_x" / "toy" / "frames.js").exists()
    errors, _ = sw._publish("00_x", "toy", frames, src, "n // 2 = 7\n")
    assert any("drift" in e for e in errors)
    monkeypatch.setattr(sw, "MAX_PICTURES", 1)
    monkeypatch.setattr(sw, "MAX_PICTURE_BYTES", 10)
    monkeypatch.setattr(sw, "MAX_SETTINGS", 5)
    errors, _ = sw._publish("00_x", "toy", frames, src, "n // 2 = 1")
    assert len(errors) == 3, errors


def test_drift_ignores_rounding_noise_and_nothing_else():
    """Chapter 09's gradient check prints `rel 1.4e-09` on one CPU and `rel 1.9e-10` on another."""
    stored = "h = 1e-6, float64\nW[0, 1]  analytic +0.322112  rel 1.4e-09\nagrees: yes\n"
    assert sw.same_text(stored, stored.replace("1.4e-09", "1.9e-10"))
    assert sw.same_text(stored, stored.rstrip("\n"))
    assert not sw.same_text(stored, stored.replace("1.4e-09", "2.0e-05"))  # above the floor
    assert not sw.same_text(stored, stored.replace("+0.322112", "+0.322113"))
    assert not sw.same_text(stored, stored.replace("yes", "no"))
    assert not sw.same_text(stored, stored.replace("rel 1.4e-09", "rel 1.4e-09 1e-9"))


def test_the_widget_cell_keeps_its_widget():
    source = "tfx.set_seed(0)\nm = make()\ntfx.book.widgets.position_widget(m,\n    ids)"
    kept = sw._keep_box(source)
    assert kept.splitlines()[:2] == source.splitlines()[:2]
    assert kept.endswith(f"{sw.BOX} = tfx.book.widgets.position_widget(m,\n    ids)")
    with pytest.raises(ValueError, match="must end with the widget"):
        sw._keep_box("w = tfx.book.widgets.pe_widget()")


def test_pictures_need_the_chapters_cjk_font(monkeypatch, tmp_path):
    """Without the font the chapters' figures were drawn with, the tokens in the site's pictures
    would be boxes: the build refuses to draw them."""
    from tfx.book import viz

    monkeypatch.setattr(viz, "font_files", lambda: ["/usr/share/fonts/DejaVuSans.ttf"])
    box, _ = _toy_widget()
    with pytest.raises(RuntimeError, match="fonts-wqy-microhei"):
        sw.dump_frames(box, {"controls": {"n": [2]}}, str(tmp_path / "toy"))


def test_frames_cached_on_another_instruction_set_are_computed_anew(monkeypatch):
    """Frames drawn where the kernels round differently are not this machine's frames."""
    import tfx.inspect.timing

    here = sw._fingerprint(["x = 1"], {"w": {}})
    other = tfx.inspect.timing.CpuCapability(aten="AVX2", fast_bf16=False)
    if str(other) == str(tfx.inspect.timing.cpu_capability()):
        other = tfx.inspect.timing.CpuCapability(aten="AVX512", fast_bf16=True)
    monkeypatch.setattr(tfx.inspect.timing, "cpu_capability", lambda: other)
    assert sw._fingerprint(["x = 1"], {"w": {}}) != here
