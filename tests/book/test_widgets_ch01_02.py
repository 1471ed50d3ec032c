"""The pure functions behind the chapter 01 and 02 widgets, at every slider's extremes, and the
widgets themselves driven from Python (a value change reprints the kernel's output)."""

import itertools
import re

import pytest

import tfx
from tfx.inspect.flops import shapes_report
from tfx.model.position import pe_report

# the slider ranges of tfx.book.widgets.shapes_widget
L_RANGE, D_RANGE, H_RANGE, FF_RANGE = (1, 4096), (64, 1024), (1, 16), (256, 8192)


@pytest.mark.parametrize("L,d,h,ff", list(itertools.product(L_RANGE, D_RANGE, H_RANGE, FF_RANGE)))
def test_shapes_report_extremes_never_raise(L, d, h, ff):
    text = shapes_report(L, d, h, ff)
    assert text.startswith("token ids") or text.startswith("impossible setting")


def test_shapes_report_refuses_indivisible_heads_with_a_message():
    assert shapes_report(8, 768, 13, 3072) == (
        "impossible setting: d_model (768) must be divisible by n_heads (13)"
    )
    assert shapes_report(0, 768, 12, 3072).startswith("impossible setting: L must be at least 1")


def test_shapes_report_base_numbers():
    text = shapes_report(8, 768, 12, 3072)
    assert re.search(r"scores Q Kᵀ / √d_k\s+\(1, 12, 8, 8\)", text)
    assert "parameters: 109,482,240" in text
    assert "crosses 1 at L = 3072" in text
    assert "note: L = 600 > 512" in shapes_report(600, 768, 12, 3072)


@pytest.mark.parametrize(
    "position,dim,base", list(itertools.product((0, 63), (0, 1, 127), (10.0, 1e6)))
)
def test_pe_report_extremes(position, dim, base):
    text = pe_report(position, dim, base, d_model=128)
    value = float(re.search(r"= (-?\d\.\d{4})\n", text).group(1))
    assert -1 <= value <= 1


def test_pe_report_values_and_refusals():
    assert pe_report(1, 0).startswith("PE[1, 0] = sin(1 · 10000^(-0/128)) = 0.8415")
    assert pe_report(0, 1).startswith("PE[0, 1] = cos(0 · 10000^(-0/128)) = 1.0000")
    assert pe_report(3, 128) == "dim must be in 0..127, got 128"
    assert pe_report(-1, 0) == "position must be >= 0, got -1"
    assert pe_report(3, 2, base=1.0).startswith("impossible setting: base must be > 1")


def _printed(out) -> str:
    return "".join(o.get("text", "") for o in out.outputs)


@pytest.mark.parametrize(
    "make,path,label,value,expect",
    [
        ("shapes_widget", (1, 0), "heads", 13, "must be divisible by n_heads (13)"),
        ("pe_widget", (0, 0), "position", 1, "PE[1, 0] = sin(1 · 10000^(-0/128)) = 0.8415"),
    ],
)
def test_widget_reprints_on_change(make, path, label, value, expect, capsys):
    w = getattr(tfx.book.widgets, make)()
    control = w.children[path[0]].children[path[1]]
    assert control.description == label
    control.value = value
    assert expect in capsys.readouterr().out + _printed(w.children[-1])


def test_plots_behind_the_chapters_draw_headless():
    import matplotlib.pyplot as plt

    from tfx.book.viz import plot_curves, plot_pe
    from tfx.model.position import sinusoidal_encoding

    fig = plot_pe(sinusoidal_encoding(16, 8), position=15, dim=7)
    assert len(fig.axes) == 3  # heatmap, its colorbar, the picked column
    assert len(plot_pe(sinusoidal_encoding(16, 8)).axes) == 2
    fig2 = plot_curves(
        [1, 2, 4], {"a": [1, 2, 3], "b": [3, 2, 1]}, "L", "FLOPs", logx=True, vlines={"x": 2}
    )
    assert len(fig2.axes[0].get_lines()) == 3  # two curves and one marker line
    plt.close("all")


def test_position_widget_reprints_on_mode_and_scale(capsys):
    from tfx.core.example import RUNNING_EXAMPLE, running_example_ids
    from tfx.inspect.probes import position_effect
    from tfx.model.bert import BertConfig, BertModel

    tfx.set_seed(0)
    model, ids = BertModel(BertConfig.tiny()).eval(), running_example_ids()
    w = tfx.book.widgets.position_widget(model, ids, RUNNING_EXAMPLE)
    mode, scale, out = w.children
    assert mode.description == "positions" and scale.description == "position scale"
    first = capsys.readouterr().out + _printed(out)
    assert "positions kept, scale 1" in first and "backwards: no" in first
    mode.value = "dropped"
    after = capsys.readouterr().out + _printed(out)
    assert "backwards: yes (largest gap below 1e-05)" in after
    mode.value = "shuffled"
    scale.value = scale.max
    expected = position_effect(model, ids, "shuffled", scale.max, RUNNING_EXAMPLE).report()
    assert expected in capsys.readouterr().out + _printed(out)
