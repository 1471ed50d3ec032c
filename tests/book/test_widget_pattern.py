"""The pattern every widget of tfx.book.widgets is built on: one-line control constructors, and
_shell, which lays the controls out by key and wires them to the pure frame function."""

import matplotlib

matplotlib.use("Agg")

import ipywidgets as widgets  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from tfx.book import widgets as W  # noqa: E402

# the widgets built without arguments (the others need a model: their own tests build them)
NO_ARGUMENTS = [
    "forget_bias_widget",
    "shapes_widget",
    "pe_widget",
    "gradient_check_widget",
    "layernorm_residual_widget",
    "gradient_flow_widget",
    "bug_zoo_widget",
]


def test_sliders_and_text_boxes_run_the_frame_on_release():
    controls = [
        W.int_slider("n", 3, 0, 8, step=2),
        W.float_slider("x", 0.5, 0.0, 1.0),
        W.log_slider("s", 1.0, -2, 2, 1, base=2),
        W.text_box("your text", "type here"),
    ]
    assert [type(c) for c in controls] == [
        widgets.IntSlider,
        widgets.FloatSlider,
        widgets.FloatLogSlider,
        widgets.Text,
    ]
    assert all(c.continuous_update is False for c in controls)
    assert [c.description for c in controls] == ["n", "x", "s", "your text"]
    n, x, s, text = controls
    assert (n.value, n.min, n.max, n.step) == (3, 0, 8, 2)
    assert (x.value, x.min, x.max, x.step) == (0.5, 0.0, 1.0, 0.1)
    assert (s.value, s.min, s.max, s.step, s.base) == (1.0, -2, 2, 1, 2)  # range in exponents
    assert (text.value, text.placeholder) == ("", "type here")


def test_choices_keep_their_options_and_value():
    drop = W.dropdown("norm", [("post-LN", "post"), ("pre-LN", "pre")], "pre")
    buttons = W.toggle("bug", ["a", "b"], "b")
    box = W.checkbox("float32", indent=False)
    assert (type(drop), drop.label, drop.value) == (widgets.Dropdown, "pre-LN", "pre")
    assert (type(buttons), buttons.options, buttons.value) == (
        widgets.ToggleButtons,
        ("a", "b"),
        "b",
    )
    assert (type(box), box.value, box.indent) == (widgets.Checkbox, False, False)


def test_wide_labels_or_the_fixed_label_column():
    assert W.int_slider("forget-gate bias", 0, 0, 10).style.description_width == "initial"
    narrow = W.int_slider("L", 8, 1, 4096, wide=False)
    assert narrow.style.description_width == widgets.IntSlider().style.description_width == ""


def _toy(rows=None):
    controls = {"n": W.int_slider("n", 2, 0, 4), "flip": W.checkbox("flip")}
    return W._shell(controls, lambda n, flip: f"n={n} flip={flip}", rows), controls


def test_rows_name_controls_by_key():
    box, controls = _toy([("n", "flip")])
    (row, out) = box.children
    assert isinstance(row, widgets.HBox) and row.children == (controls["n"], controls["flip"])
    assert isinstance(out, widgets.Output)
    box, controls = _toy()  # default: one control per row, in the order of the dict
    assert box.children[:-1] == (controls["n"], controls["flip"])
    assert box.tfx_frame(**{k: c.value for k, c in box.tfx_controls.items()}) == "n=2 flip=False"


def test_an_unknown_row_key_is_named():
    with pytest.raises(ValueError, match="rows: 'depth' is not a key of controls"):
        _toy(["n", "depth"])


@pytest.mark.parametrize("name", NO_ARGUMENTS)
def test_every_widget_is_one_shell_with_distinct_labels(name):
    box = getattr(W, name)()
    controls = box.tfx_controls
    labels = [c.description for c in controls.values() if c.description]
    assert len(labels) == len(set(labels))  # the browser test and the site find controls by label
    # every slider and text box runs the frame on release, not once per pixel of a drag
    assert all(
        c.continuous_update is False for c in controls.values() if "continuous_update" in c.keys
    )
    plt.close("all")


def test_sentiment_widget_restores_body_parts_at_every_extreme():
    """Chapter 10's widget with a body: one checkbox per body part; every part restored, or none,
    or the reader's own empty text, gives a frame and never an error."""
    import torch

    from tfx.core.example import SPECIAL_TOKENS
    from tfx.learn import finetuning as ft
    from tfx.learn.corpus import CharVocab
    from tfx.model.bert import BertConfig, BertForMaskedLM

    vocab = CharVocab(SPECIAL_TOKENS + list("房间很干净服务也周到太失望了"), {})
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=len(vocab), d_model=16, n_layers=2, n_heads=2, d_ff=32, max_len=64)
    body = BertForMaskedLM(cfg)
    model = ft.classifier_from(body).eval()
    check = [("房间很干净", 1), ("太失望了", 0)]
    box = W.sentiment_widget(model, vocab, body=body, check=check)
    boxes = [c for c in box.tfx_controls.values() if c.description.endswith(": pre-trained")]
    assert [c.description for c in boxes] == [
        "embeddings: pre-trained",
        "layer 1: pre-trained",
        "layer 2: pre-trained",
    ]
    keys = [k for k, c in box.tfx_controls.items() if c in boxes]
    everything = box.tfx_frame(example="praise", text="", **{k: True for k in keys})
    assert "embeddings   " in everything and "pre-trained (restored)" in everything
    none = box.tfx_frame(example="your text", text="", **{k: False for k in keys})
    assert "Type a review" in none
    plain = W.sentiment_widget(model, vocab)  # no body: the review alone, no checkboxes
    assert not any(c.description.endswith("pre-trained") for c in plain.tfx_controls.values())
