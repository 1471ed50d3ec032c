"""tfx.book.figures: every figure of tfx.book.viz is readable at the size the site shows it, and a
kernel stores figures as retina PNGs checked for text too small on the page (site review F6)."""

import base64
import struct
import warnings

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from tfx.book import figures, viz  # noqa: E402
from tfx.core.example import RUNNING_EXAMPLE  # noqa: E402
from tfx.inspect.stack import StackConfig, probe_stack  # noqa: E402
from tfx.model.attention import MultiHeadAttention  # noqa: E402
from tfx.model.bert import BertConfig  # noqa: E402
from tfx.model.layers import EncoderLayer  # noqa: E402
from tfx.model.position import sinusoidal_encoding  # noqa: E402

L = len(RUNNING_EXAMPLE)
PROBE = probe_stack(StackConfig(depth=6))
CURVES = {"naive": [1, 2, 4, 8], "sdpa": [1, 1.5, 3, 5], "a third": [2, 2, 2, 2]}

# every figure of tfx.book.viz as the chapters and widgets call it
DRAWN = {
    "attention_grid, 4 heads": lambda: viz.attention_grid(
        np.full((4, L, L), 1 / L), RUNNING_EXAMPLE
    ),
    "attention_grid, 3 layers x 12 heads": lambda: viz.attention_grid(
        np.full((3, 12, L, L), 1 / L), RUNNING_EXAMPLE, row_names=["a", "b", "c"]
    ),
    "plot_curves": lambda: viz.plot_curves(
        [128, 256, 512, 1024], CURVES, "length", "time (ms)", "t", logx=True, vlines={"x": 300}
    ),
    "plot_pe": lambda: viz.plot_pe(sinusoidal_encoding(128, 128), position=20, dim=10),
    "plot_head_split": lambda: viz.plot_head_split(MultiHeadAttention(768, 12), L=L),
    "encoder_wiring, two": lambda: viz.encoder_wiring(
        EncoderLayer(8, 2, 16), EncoderLayer(8, 2, 16, norm_first=True), titles=["a", "b"]
    ),
    "encoder_wiring, three": lambda: viz.encoder_wiring(*[EncoderLayer(8, 2, 16)] * 3),
    "plot_stack_activations": lambda: viz.plot_stack_activations(PROBE),
    "plot_stack_grads": lambda: viz.plot_stack_grads(PROBE),
    "ffn_diagram": lambda: viz.ffn_diagram(768, 3072),
    "plot_histograms": lambda: viz.plot_histograms(
        {"GELU": np.linspace(-1, 3, 500), "ReLU": np.linspace(0, 3, 500)}, "activation", title="t"
    ),
    "embedding_diagram": lambda: viz.embedding_diagram(BertConfig(), L=L, B=2),
}


@pytest.mark.parametrize("name", DRAWN)
def test_every_viz_figure_is_readable_on_the_page(name):
    fig = DRAWN[name]()
    px, text = figures.smallest_text_px(fig)
    plt.close(fig)
    assert px >= figures.MIN_TEXT_PX, f"{name}: {text!r} shows {px:.1f} px high"


def test_smallest_text_counts_the_scaling_to_the_column():
    fig, ax = plt.subplots(figsize=(4, 3), dpi=100)
    ax.set_title("nine points", fontsize=9)
    ax.set_xticks([])
    ax.set_yticks([])
    px, text = figures.smallest_text_px(fig)
    assert (round(px, 2), text) == (12.5, "nine points")  # 9 pt at 100 dpi, not scaled
    fig.set_size_inches(20, 3)  # wider than the column: the page scales it down, text and all
    stored = fig.get_tightbbox(fig.canvas.get_renderer()).width * 100  # what the PNG holds
    px, _ = figures.smallest_text_px(fig)
    assert stored > 1.5 * figures.COLUMN_PX and px == pytest.approx(
        12.5 * figures.COLUMN_PX / stored
    )
    plt.close(fig)
    empty = plt.figure()
    assert figures.smallest_text_px(empty) == (float("inf"), "")
    plt.close(empty)


def test_check_legible_warns_with_the_words_the_hygiene_test_looks_for():
    fig, ax = plt.subplots(figsize=(4, 3), dpi=100)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.text(0.5, 0.5, "tiny", fontsize=6)
    with pytest.warns(UserWarning, match=f"{figures.TOO_SMALL}: 'tiny' would show 8.3 px"):
        figures.check_legible(fig)
    ax.texts[0].set_fontsize(10)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        figures.check_legible(fig)
    plt.close(fig)


def test_outside_ipython_nothing_changes():
    assert figures.book_figures() is False


def _png_size(data: str) -> tuple:
    return struct.unpack(">II", base64.b64decode(data)[16:24])


def test_in_a_kernel_figures_are_retina_and_checked():
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    try:
        assert figures.book_figures() is True
        assert figures.book_figures() is True  # idempotent: one check, not one per call
        fig, ax = plt.subplots(figsize=(4, 3), dpi=100)
        ax.plot([0, 1], [0, 1])
        data, meta = shell.display_formatter.format(fig)
        w, h = _png_size(data["image/png"])
        assert (meta["image/png"]["width"], meta["image/png"]["height"]) == (w // 2, h // 2)
        ax.set_title("tiny", fontsize=5)
        with pytest.warns(UserWarning, match=figures.TOO_SMALL):
            shell.display_formatter.format(fig)
        plt.close(fig)
    finally:
        InteractiveShell.clear_instance()


def test_the_module_imports_no_plotting_on_its_own():
    """figures is imported by viz; it must not import pyplot itself (tools read its constants)."""
    import subprocess
    import sys

    code = "import sys, tfx.book.figures; print('matplotlib.pyplot' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_bad_input_is_named():
    with pytest.raises(TypeError, match="fig must be a matplotlib Figure, got str"):
        figures.smallest_text_px("figure.png")
    with pytest.raises(TypeError, match="fig must be a matplotlib Figure, got Axes"):
        fig, ax = plt.subplots()
        try:
            figures.check_legible(ax)
        finally:
            plt.close(fig)
    for height in (0, -1.5, "5", True, float("nan")):
        with pytest.raises(ValueError, match="height must be a positive number of inches"):
            viz.two_over_one(height)


def test_two_over_one_fits_the_column_with_three_panels():
    fig, axes = viz.two_over_one()
    assert len(axes) == 3 and fig.get_size_inches()[0] * fig.dpi <= figures.COLUMN_PX
    top_left, top_right, bottom = (ax.get_position() for ax in axes)
    assert top_left.y0 > bottom.y1 and top_right.y0 > bottom.y1  # two panels over the third
    assert bottom.width > 1.8 * top_left.width  # the bottom one spans both
    plt.close(fig)
