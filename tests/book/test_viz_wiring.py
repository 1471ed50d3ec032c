"""tfx.book.viz.encoder_wiring draws the encoder layer from its own norm_first flag, and the stack
plots survive overflowed values."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch.nn as nn  # noqa: E402

from tfx.book.viz import (  # noqa: E402
    drawn_blocks,
    encoder_wiring,
    plot_stack_activations,
    plot_stack_grads,
    wiring_blocks,
)
from tfx.inspect.stack import StackConfig, probe_stack  # noqa: E402
from tfx.model.layers import EncoderLayer  # noqa: E402

POST = ["multi-head attention", "+", "LayerNorm", "feed-forward", "+", "LayerNorm"]
PRE = ["LayerNorm", "multi-head attention", "+", "LayerNorm", "feed-forward", "+"]


def test_the_drawn_blocks_follow_the_flag_of_each_layer():
    layers = [EncoderLayer(8, 2, 16, norm_first=nf) for nf in (False, True)]
    fig = encoder_wiring(*layers)
    assert drawn_blocks(fig) == [POST, PRE]
    assert [ax.get_title() for ax in fig.axes] == [
        "post-LN (norm_first=False)",
        "pre-LN (norm_first=True)",
    ]
    plt.close(fig)


def test_flipping_the_flag_redraws_the_figure():
    layer = EncoderLayer(8, 2, 16, norm_first=False)
    layer.norm_first = True
    fig = encoder_wiring(layer)
    assert drawn_blocks(fig) == [PRE]
    plt.close(fig)


def test_torch_layer_is_drawn_from_its_own_flag():
    ref = nn.TransformerEncoderLayer(8, 2, 16, batch_first=True, norm_first=True)
    fig = encoder_wiring(ref, titles=["torch"])
    assert drawn_blocks(fig) == [PRE] and fig.axes[0].get_title() == "torch (norm_first=True)"
    plt.close(fig)


def test_each_sum_has_one_residual_path():
    fig = encoder_wiring(EncoderLayer(8, 2, 16))
    ax = fig.axes[0]
    residual_lines = [ln for ln in ax.lines if ln.get_color() == "tab:blue"]
    assert len(residual_lines) == wiring_blocks(False).count("+") == 2
    plt.close(fig)


def test_wiring_errors_are_clear():
    with pytest.raises(TypeError, match="norm_first must be a bool, got int"):
        wiring_blocks(1)
    with pytest.raises(ValueError, match="at least one layer"):
        encoder_wiring()
    with pytest.raises(TypeError, match="bool norm_first attribute, got Linear"):
        encoder_wiring(nn.Linear(2, 2))
    with pytest.raises(ValueError, match="titles must name each of the 1 layers, got 2"):
        encoder_wiring(EncoderLayer(8, 2, 16), titles=["a", "b"])


@pytest.mark.parametrize(
    "cfg",
    [
        StackConfig(depth=48, norm="none", init_scale=100.0),  # overflows to inf / nan
        StackConfig(depth=1, norm="post"),
        StackConfig(depth=48, norm="none", residual=False, init_scale=0.01),  # underflows to 0
    ],
)
def test_stack_plots_draw_any_probe(cfg):
    p = probe_stack(cfg)
    for fig in (plot_stack_activations(p), plot_stack_grads(p)):
        title = fig._suptitle.get_text() if fig._suptitle else fig.axes[0].get_title()
        assert title.startswith(f"{cfg.depth} layer")
        assert ("overflow" in title) == (not p.finite)
        plt.close(fig)
