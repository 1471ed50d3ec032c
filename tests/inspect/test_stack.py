"""tfx.inspect.stack: the switchable stack behind the widgets of chapters 05 and 06, at every
control's extremes, against the EncoderLayer it is built from, and its clear errors."""

import itertools
import math

import pytest
import torch

import tfx
from tfx.inspect.stack import (
    INIT_SCALE_RANGE,
    MAX_DEPTH,
    NORMS,
    StackConfig,
    activation_report,
    build_stack,
    fmt,
    gradient_report,
    probe_stack,
    stack_loss,
)
from tfx.model.layers import EncoderLayer, LayerNorm


@pytest.mark.parametrize(
    "depth,norm,residual,scale",
    list(itertools.product((1, MAX_DEPTH), NORMS, (True, False), INIT_SCALE_RANGE)),
)
def test_probe_at_the_extremes_never_raises(depth, norm, residual, scale):
    p = probe_stack(StackConfig(depth=depth, norm=norm, residual=residual, init_scale=scale))
    assert len(p.act_mean) == len(p.act_std) == len(p.act_norm) == len(p.act_cos) == depth + 1
    assert len(p.grad_norm) == len(p.input_grad_norm) == depth
    for text in (activation_report(p), gradient_report(p)):
        assert text.startswith(f"{depth} layer" + ("s" if depth > 1 else "") + " · ")
        assert "nan" not in text  # overflow prints as "n/a"
        assert ("overflow" in text) == (not p.finite)


def test_overflow_is_reported_as_text_not_raised():
    p = probe_stack(StackConfig(depth=MAX_DEPTH, norm="none", init_scale=INIT_SCALE_RANGE[1]))
    assert not p.finite
    assert "n/a" in activation_report(p) or "inf" in activation_report(p)
    assert fmt(float("nan")) == "n/a" and fmt(float("inf")) == "inf" and fmt(-math.inf) == "-inf"
    assert fmt(1.23456) == "1.235"
    assert fmt(-1e-9, "+.4f") == "+0.0000" and fmt(-0.5, "+.4f") == "-0.5000"
    # fixed point turns to powers of ten from a million on, so no value prints 100 digits
    assert fmt(1.5e108, "+.4f") == "+1.5000e+108" and fmt(2e6, ".4f") == "2.0000e+06"


def test_probe_is_pure_and_leaves_the_global_rng_alone():
    tfx.set_seed(0)
    before, n_threads = torch.get_rng_state(), torch.get_num_threads()
    a = probe_stack(StackConfig(depth=3, norm="pre"))
    assert torch.equal(torch.get_rng_state(), before)
    assert torch.get_num_threads() == n_threads  # its one-thread run is restored
    b = probe_stack(StackConfig(depth=3, norm="pre"))
    assert a.act_std == b.act_std and a.grad_norm == b.grad_norm
    c = probe_stack(StackConfig(depth=3, norm="pre", seed=1))
    assert c.act_std != a.act_std


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_residual_on_is_the_encoder_layers_own_forward(norm):
    """With the residual on, the stack is a chain of EncoderLayer.forward calls, nothing else."""
    model = build_stack(StackConfig(depth=4, norm=norm))
    ids = tfx.core.example.running_example_ids(model.vocab)
    out, xs = model(ids)
    x = model.embed(ids)
    for layer in model.layers:
        assert isinstance(layer, EncoderLayer) and layer.norm_first == (norm == "pre")
        x = layer(x)
    torch.testing.assert_close(xs[-1], x, rtol=0, atol=0)
    if norm == "pre":
        assert isinstance(model.final_norm, LayerNorm)
        torch.testing.assert_close(out, model.final_norm(x))
    else:
        torch.testing.assert_close(out, x, rtol=0, atol=0)


def test_residual_off_drops_the_skip_path():
    model = build_stack(StackConfig(depth=1, norm="post", residual=False))
    layer, ids = model.layers[0], tfx.core.example.running_example_ids(model.vocab)
    x = model.embed(ids)
    h = layer.norm1(layer.attn(x)[0])
    expected = layer.norm2(layer.ff(h))
    torch.testing.assert_close(model(ids)[0], expected)
    with_res = build_stack(StackConfig(depth=1, norm="post", residual=True))
    assert not torch.allclose(with_res(ids)[0], expected)


def test_measured_readouts_have_the_expected_behaviour():
    post = probe_stack(StackConfig(depth=12, norm="post"))
    pre = probe_stack(StackConfig(depth=12, norm="pre"))
    none = probe_stack(StackConfig(depth=12, norm="none"))
    d = post.config.d_model
    # post-LN: every layer ends in a LayerNorm, so each token has norm sqrt(d)
    assert all(abs(n - math.sqrt(d)) < 1e-3 for n in post.act_norm[1:])
    # pre-LN: the residual stream grows with depth; the final LayerNorm brings it back to sqrt(d)
    assert pre.act_norm[-1] > 2 * pre.act_norm[0]
    assert abs(pre.out_norm - math.sqrt(d)) < 1e-3 and abs(pre.out_std - 1) < 1e-3
    # no LayerNorm at all: the stream blows up by orders of magnitude
    assert none.act_norm[-1] > 100 * none.act_norm[0]
    # gradient shapes of Xiong et al.: post-LN larger near the output, pre-LN larger near the input
    assert post.grad_norm[-1] > post.grad_norm[0]
    assert pre.grad_norm[0] > pre.grad_norm[-1]
    assert all(math.isfinite(v) and v > 0 for v in post.grad_norm + pre.grad_norm)
    no_res = probe_stack(StackConfig(depth=12, norm="post", residual=False))
    assert no_res.act_cos[-1] < post.act_cos[-1]


def test_reports_show_the_numbers_of_the_probe():
    p = probe_stack(StackConfig(depth=2, norm="pre"))
    text = activation_report(p)
    assert "2 layers · pre-LN + final LN · residual on · init ×1" in text
    assert f"{p.act_std[2]:.4f}" in text and "output (after final LN)" in text
    g = gradient_report(p)
    assert f"{p.grad_norm[0]:.4g}" in g and f"{p.loss:.4f}" in g


@pytest.mark.parametrize(
    "kwargs,exc,words",
    [
        ({"depth": 0}, ValueError, "depth must be in 1..48, got 0"),
        ({"depth": MAX_DEPTH + 1}, ValueError, "depth must be in 1..48"),
        ({"depth": 2.0}, TypeError, "depth must be an int"),
        ({"depth": True}, TypeError, "depth must be an int"),
        ({"norm": "sandwich"}, ValueError, "norm must be one of"),
        ({"residual": 1}, TypeError, "residual must be a bool"),
        ({"init_scale": 0.0}, ValueError, "init_scale must be a number in"),
        ({"init_scale": float("nan")}, ValueError, "init_scale must be a number in"),
        ({"init_scale": 1e3}, ValueError, "init_scale must be a number in"),
        ({"norm": "none", "final_norm": True}, ValueError, "final_norm=True needs"),
        ({"final_norm": "yes"}, TypeError, "final_norm must be a bool or None"),
        ({"d_model": 0}, ValueError, "d_model must be a positive int"),
        ({"d_model": 30, "n_heads": 4}, ValueError, "must be divisible by n_heads"),
    ],
)
def test_bad_config_gets_a_clear_error(kwargs, exc, words):
    with pytest.raises(exc, match=words.replace("(", r"\(").replace(".", r"\.")):
        StackConfig(**kwargs)


def test_final_norm_defaults_follow_the_placement():
    assert StackConfig(norm="pre").final_norm is True
    assert StackConfig(norm="post").final_norm is False
    assert StackConfig(norm="none").final_norm is False
    assert StackConfig(norm="pre", final_norm=False).final_norm is False
    with pytest.raises(TypeError, match="cfg must be a StackConfig"):
        build_stack({"depth": 2})
    with pytest.raises(TypeError, match="cfg must be a StackConfig"):
        probe_stack(None)
    with pytest.raises(TypeError, match="model must be a tfx.inspect.stack.Stack, got Linear"):
        stack_loss(torch.nn.Linear(2, 2))


def test_stack_loss_is_what_the_probe_backpropagates():
    cfg = StackConfig(depth=2, norm="post")
    model = build_stack(cfg)
    loss, out, xs = stack_loss(model)
    assert len(xs) == 3 and out.shape == (1, 8, cfg.d_model)
    assert loss.item() == probe_stack(cfg).loss
    loss.backward()
    g = sum(p.grad.pow(2).sum() for p in model.layers[0].parameters()).sqrt().item()
    assert g == pytest.approx(probe_stack(cfg).grad_norm[0], rel=1e-12)


def test_chapter_05_widget_reprints_on_every_control(capsys):
    import matplotlib

    matplotlib.use("Agg")
    w = tfx.book.widgets.layernorm_residual_widget()
    residual, norm_on, placement = w.children[0].children
    (depth, scale), out = w.children[1].children, w.children[2]
    assert (residual.description, norm_on.description, depth.description, scale.description) == (
        "residual",
        "LayerNorm",
        "depth",
        "init scale",
    )

    def printed():
        return capsys.readouterr().out + "".join(o.get("text", "") for o in out.outputs)

    assert "12 layers · post-LN · residual on" in printed()
    placement.value = "pre"
    assert "12 layers · pre-LN + final LN · residual on" in printed()
    residual.value = False
    assert "residual off" in printed()
    norm_on.value = False
    assert "no LN" in printed() and placement.disabled
    depth.value = depth.max
    assert f"{MAX_DEPTH} layers · no LN · residual off" in printed()
    depth.value = depth.min
    assert "1 layer · no LN" in printed()
    scale.value = 2.0**scale.max  # the weight perturbation, at both ends of its slider
    assert "1 layer · no LN · residual off · init ×4/√fan_in" in printed()
    depth.value = depth.max
    # no LN, 4× weights, 48 layers: it blows up (to inf, or to e+ numbers where it stays finite)
    blown = printed()
    assert "inf" in blown or "e+" in blown
    scale.value = 2.0**scale.min
    assert f"{MAX_DEPTH} layers · no LN · residual off · init ×0.25/√fan_in" in printed()
