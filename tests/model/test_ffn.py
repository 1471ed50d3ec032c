"""tfx.model.ffn (GELU variants, gated FFN, key–value view, the width probe), the chapter 04 widget
at its extremes, and the plots it adds to tfx.book.viz."""

import itertools
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tfx
from tfx.model.ffn import (
    ACTIVATIONS,
    GatedFeedForward,
    activation,
    article_gelu,
    ffn_param_count,
    ffn_sublayer_without,
    gelu_exact,
    gelu_minimum,
    gelu_sigmoid,
    gelu_tanh,
    key_value_view,
    unit_order,
    width_probe,
)
from tfx.model.layers import EncoderLayer, FeedForward

GRID = torch.linspace(-8, 8, 16001, dtype=torch.float64)


def test_gelu_exact_is_x_times_normal_cdf_and_matches_torch():
    expected = GRID * torch.distributions.Normal(0.0, 1.0).cdf(GRID)  # x·Φ(x)
    torch.testing.assert_close(gelu_exact(GRID), expected)
    torch.testing.assert_close(gelu_exact(GRID), F.gelu(GRID))


def test_approximations_against_torch_and_their_error_bounds():
    torch.testing.assert_close(gelu_tanh(GRID), F.gelu(GRID, approximate="tanh"))
    exact = gelu_exact(GRID)
    assert (gelu_tanh(GRID) - exact).abs().max() < 5e-4
    assert 0.015 < (gelu_sigmoid(GRID) - exact).abs().max() < 0.025
    art = article_gelu(GRID)
    assert (art[GRID < 0] == 0).all()  # the max(0, ·) removes the negative side
    torch.testing.assert_close(art[GRID >= 0], gelu_sigmoid(GRID[GRID >= 0]))
    assert abs((art - exact).abs().max().item() - 0.16997) < 1e-4  # GELU's whole depth


def test_gelu_minimum_matches_a_grid_search():
    x_min, value = gelu_minimum()
    fine = torch.linspace(-1, -0.5, 500001, dtype=torch.float64)
    g = gelu_exact(fine)
    assert abs(fine[g.argmin()].item() - x_min) < 1e-5
    assert abs(g.min().item() - value) < 1e-10
    assert abs(x_min + 0.75179) < 1e-4 and abs(value + 0.16997) < 1e-4


def test_activation_lookup_and_bad_input():
    assert activation("relu") is ACTIVATIONS["relu"]
    with pytest.raises(ValueError, match="activation must be one of .* got 'swish'"):
        activation("swish")
    for fn in ACTIVATIONS.values():
        with pytest.raises(TypeError, match="x must be a torch.Tensor, got numpy.ndarray"):
            fn(np.zeros(3))
        with pytest.raises(ValueError, match="floating-point tensor, got dtype torch.int64"):
            fn(torch.arange(3))


def test_param_count_against_real_modules_and_bad_sizes():
    assert (
        ffn_param_count(768, 3072) == 4_722_432
    )  # BERT-base, as in tfx.inspect.flops.param_counts
    assert ffn_param_count(64, 256) == sum(p.numel() for p in FeedForward(64, 256).parameters())
    g = GatedFeedForward(64, 96)
    assert ffn_param_count(64, 96, bias=False, gated=True) == sum(p.numel() for p in g.parameters())
    assert ffn_param_count(768, 2048, bias=False, gated=True) == ffn_param_count(
        768, 3072, bias=False
    )
    with pytest.raises(ValueError, match="d_ff must be an int >= 1, got 0"):
        ffn_param_count(768, 0)
    with pytest.raises(TypeError, match="d_model must be an int"):
        ffn_param_count(76.8, 3072)


@pytest.mark.parametrize(
    "gate,act", [("swiglu", F.silu), ("geglu", F.gelu), ("glu", torch.sigmoid), ("reglu", F.relu)]
)
def test_gated_ffn_matches_its_formula(gate, act):
    tfx.set_seed(0)
    g = GatedFeedForward(16, 40, gate=gate)
    x = torch.randn(2, 5, 16)
    expected = (act(x @ g.w_gate.weight.T) * (x @ g.w_up.weight.T)) @ g.w_down.weight.T
    torch.testing.assert_close(g(x), expected)


def test_gated_ffn_bad_input():
    with pytest.raises(ValueError, match="gate must be one of .* got 'tanh'"):
        GatedFeedForward(16, 40, gate="tanh")
    with pytest.raises(ValueError, match="d_ff must be an int >= 1, got -1"):
        GatedFeedForward(16, -1)
    g = GatedFeedForward(16, 40)
    with pytest.raises(ValueError, match="expected last dim 16, got shape \\(2, 15\\)"):
        g(torch.randn(2, 15))
    with pytest.raises(TypeError, match="must be a torch.Tensor"):
        g([[0.0] * 16])


@pytest.mark.parametrize("act", ["gelu", "gelu_tanh", "relu"])
def test_key_value_view_reconstructs_the_ffn(act):
    tfx.set_seed(0)
    ff = FeedForward(12, 48, activation=act).eval()
    x = torch.randn(3, 7, 12)
    coeffs, values = key_value_view(ff, x)
    assert coeffs.shape == (3, 7, 48) and values.shape == (48, 12)
    torch.testing.assert_close(coeffs @ values + ff.fc2.bias, ff(x))


def test_key_value_view_bad_input():
    ff = FeedForward(12, 48)
    with pytest.raises(TypeError, match="ff must be a tfx.model.layers.FeedForward, got Linear"):
        key_value_view(torch.nn.Linear(12, 48), torch.randn(12))
    with pytest.raises(ValueError, match="expected last dim 12, got shape \\(3, 13\\)"):
        key_value_view(ff, torch.randn(3, 13))


X = torch.randn(1, 8, 16, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize(
    "mult,act,frac,unit",
    list(
        itertools.product(
            (1, 8),
            ["gelu", "gelu_tanh", "gelu_sigmoid", "article", "relu"],
            (0.0, 0.1, 1.0),
            (-1, 0, 15),
        )
    ),
)
def test_width_probe_extremes_never_raise(mult, act, frac, unit):
    r = width_probe(X, mult, act, frac, unit)
    text = r.report()
    assert f"d_ff = {16 * mult} ({mult} × 16)" in text
    assert math.isfinite(r.change) and -1 <= r.cosine <= 1 + 1e-6
    assert r.params == 2 * 16 * 16 * mult + 16 * mult + 16


def test_width_probe_values():
    base = width_probe(X)
    assert base.change == 0 and base.zeroed == 0 and abs(base.cosine - 1) < 1e-6
    assert width_probe(X, activation_name="gelu_tanh").change < 1e-3
    assert width_probe(X, activation_name="relu").change > 0.05
    one = width_probe(X, unit=3)
    assert one.zeroed == 1 and 0 < one.change < 0.5
    half, tenth = width_probe(X, zero_fraction=0.5), width_probe(X, zero_fraction=0.1)
    assert half.zeroed == 32 and tenth.zeroed == 6 and half.change > tenth.change
    allz = width_probe(X, mult=2, zero_fraction=1.0, unit=5)
    assert allz.zeroed == 32 and "the output is b₂ at every token" in allz.report()
    assert (allz.out == allz.out[:, :1]).all()
    state = torch.random.get_rng_state()
    width_probe(X, mult=3, seed=7)
    assert torch.equal(torch.random.get_rng_state(), state)  # the global RNG is left alone


def test_width_probe_bad_input():
    with pytest.raises(ValueError, match="mult must be an int >= 1, got 0"):
        width_probe(X, mult=0)
    with pytest.raises(TypeError, match="mult must be an int"):
        width_probe(X, mult=True)
    with pytest.raises(ValueError, match="activation must be one of"):
        width_probe(X, activation_name="tanh")
    with pytest.raises(ValueError, match="zero_fraction must be a probability"):
        width_probe(X, zero_fraction=1.5)
    with pytest.raises(
        ValueError, match="unit must be an int in \\[-1, 31\\] \\(-1 = none\\), got 32"
    ):
        width_probe(X, mult=2, unit=32)
    with pytest.raises(ValueError, match="unit must be an int >= -1, got -2"):
        width_probe(X, unit=-2)
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        width_probe(X.numpy())
    with pytest.raises(ValueError, match="floating-point"):
        width_probe(torch.ones(8, 16, dtype=torch.long))


def _printed(out) -> str:
    return "".join(o.get("text", "") for o in out.outputs)


def test_ffn_widget_reprints_at_its_extremes(capsys):
    w = tfx.book.widgets.ffn_widget(X)
    (which, mult, act), (frac, order, unit) = w.children[0].children, w.children[1].children
    out = w.children[-1]
    assert [c.description for c in (which, mult, act, frac, order, unit)] == [
        "FFN",
        "width ×",
        "activation",
        "zeroed fraction",
        "zero order",
        "zero unit",
    ]
    assert list(which.options) == ["fresh"] and not mult.disabled
    assert "hidden units zeroed: 0 of 64" in capsys.readouterr().out + _printed(out)
    for control, value, expect in [
        (mult, mult.max, "d_ff = 128 (8 × 16)"),
        (mult, mult.min, "d_ff = 16 (1 × 16)"),
        (act, "article", "activation: article"),
        (unit, unit.max, "hidden units zeroed: 1 of 16"),
        (frac, frac.max, "every hidden unit is zero"),
        (order, "largest first", "largest first order"),
        (unit, unit.min, "hidden units zeroed: 16 of 16"),
        (frac, frac.min, "hidden units zeroed: 0 of 16"),
    ]:
        control.value = value
        assert expect in capsys.readouterr().out + _printed(out), (control.description, value)


def test_ffn_widget_on_a_given_ffn(capsys):
    """With a trained FFN passed in, the widget starts on it, at its width, and the width slider
    is disabled until the reader switches to a fresh FFN."""
    ff = FeedForward(16, 64).eval()
    w = tfx.book.widgets.ffn_widget(X, ff=ff)
    (which, mult, _), (frac, order, _) = w.children[0].children, w.children[1].children
    out = w.children[-1]
    assert which.value == "trained" and mult.disabled
    assert "the given FFN" in capsys.readouterr().out + _printed(out)
    for control, value, expect in [
        (mult, mult.max, "d_ff = 64 (4 × 16)"),  # the trained FFN keeps its width
        (frac, frac.max, "hidden units zeroed: 64 of 64"),
        (order, "largest first", "every hidden unit is zero"),
        (which, "fresh", "d_ff = 128 (8 × 16)"),
    ]:
        control.value = value
        assert expect in capsys.readouterr().out + _printed(out), (control.description, value)
    assert not mult.disabled


def test_ffn_plots_draw_headless_and_refuse_bad_sizes():
    import matplotlib.pyplot as plt

    from tfx.book.viz import ffn_diagram, plot_histograms

    fig = ffn_diagram(768, 3072)
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "W₁ (768×3072)" in texts and any("gelu" in t for t in texts)
    with pytest.raises(ValueError, match="d_ff must be a positive int, got 0"):
        ffn_diagram(768, 0)
    fig2 = plot_histograms({"a": torch.randn(100), "b": np.zeros(50)}, xlabel="x")
    assert len(fig2.axes[0].patches) == 2 * 60
    with pytest.raises(ValueError, match="at least one sample"):
        plot_histograms({}, xlabel="x")
    plt.close("all")


def test_width_probe_given_ffn_and_largest_first():
    """A trained FFN can be passed in; "largest first" removes the units that carry the output."""
    ff = FeedForward(16, 64).eval()
    given = width_probe(X, ff=ff)
    assert given.source == "given" and "the given FFN" in given.report()
    with torch.no_grad():
        assert torch.equal(given.ref, ff.fc2(gelu_exact(ff.fc1(X))))
    top = width_probe(X, zero_fraction=0.1, ff=ff, order="largest first")
    rand = width_probe(X, zero_fraction=0.1, ff=ff)
    assert top.zeroed == rand.zeroed == 6 and top.change > rand.change
    assert "largest first order" in top.report()
    bigger = width_probe(X, zero_fraction=0.2, ff=ff, order="largest first")
    assert bigger.change > top.change  # a superset of units removed
    everything = width_probe(X, zero_fraction=1.0, ff=ff, order="largest first")
    assert everything.zeroed == 64 and "b₂ at every token" in everything.report()


def test_width_probe_given_ffn_bad_input():
    with pytest.raises(
        ValueError, match="ff: expected d_model 16 and d_ff 128 \\(mult 8\\), got 16 and 64"
    ):
        width_probe(X, mult=8, ff=FeedForward(16, 64))
    with pytest.raises(
        TypeError, match="ff must be a tfx.model.layers.FeedForward or None, got Linear"
    ):
        width_probe(X, ff=torch.nn.Linear(16, 64))
    with pytest.raises(
        ValueError, match="order must be one of \\('random', 'largest first'\\), got 'top'"
    ):
        width_probe(X, order="top")


def test_unit_order_is_the_order_width_probe_zeroes():
    """unit_order (chapter 04 zeroes these units inside the whole model): zeroing its first k units
    by hand gives width_probe's output; largest first puts the largest ‖aᵢvᵢ‖ first."""
    tfx.set_seed(0)
    ff = FeedForward(16, 64).eval()
    for order in ("random", "largest first"):
        ranked = unit_order(X, ff, order)
        assert sorted(ranked.tolist()) == list(range(64))
        keep = torch.ones(64)
        keep[ranked[:6]] = 0
        with torch.no_grad():
            by_hand = ff.fc2(gelu_exact(ff.fc1(X)) * keep)
        torch.testing.assert_close(
            by_hand, width_probe(X, zero_fraction=0.1, ff=ff, order=order).out
        )
    with torch.no_grad():
        a = gelu_exact(ff.fc1(X)).reshape(-1, 64).abs().sum(0)
    contrib = a * ff.fc2.weight.norm(dim=0)
    ranked = unit_order(X, ff)
    assert contrib[ranked[0]] == contrib.max() and (contrib[ranked].diff() <= 0).all()
    assert torch.equal(unit_order(X, ff, "random", seed=3), unit_order(X, ff, "random", seed=3))


def test_unit_order_bad_input():
    with pytest.raises(TypeError, match="ff must be a tfx.model.layers.FeedForward, got Linear"):
        unit_order(X, torch.nn.Linear(16, 64))
    with pytest.raises(ValueError, match="x must be \\(…, 8\\), got shape \\(3, 16\\)"):
        unit_order(torch.randn(3, 16), FeedForward(8, 32))
    with pytest.raises(ValueError, match="order must be one of"):
        unit_order(X, FeedForward(16, 64), "top")


def test_ffn_sublayer_without_takes_out_one_branch_and_restores():
    torch.manual_seed(0)
    layer = EncoderLayer(16, 2, 64, dropout=0.1).eval()
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        full = layer(x)
        h = layer.norm1(x + layer.attn(x)[0])  # the FFN sub-layer's input
        with ffn_sublayer_without(layer, "ffn"):
            torch.testing.assert_close(layer(x), layer.norm2(h))
        with ffn_sublayer_without([layer], "skip"):
            torch.testing.assert_close(layer(x), layer.norm2(layer.ff(h)))
        torch.testing.assert_close(layer(x), full, rtol=0, atol=0)  # hooks gone


def test_ffn_sublayer_without_rejects_bad_input():
    post, pre = EncoderLayer(16, 2, 64), EncoderLayer(16, 2, 64, norm_first=True)
    with pytest.raises(ValueError, match="part must be one of"):
        with ffn_sublayer_without(post, "attention"):
            pass
    with pytest.raises(ValueError, match="post-LN"):
        with ffn_sublayer_without(pre, "ffn"):
            pass
    with pytest.raises(TypeError, match="EncoderLayer"):
        with ffn_sublayer_without([FeedForward(16, 64)], "ffn"):
            pass
