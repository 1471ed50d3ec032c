"""tfx.learn.rnn, the recurrent baseline of chapter 00: the step loop against nn.LSTM, the gradient
against distance against an explicit Jacobian, the chain depth, the widget's report at its
extremes, linear recurrences, the small training tasks and the timing helper."""

import math
import re

import pytest
import torch
import torch.nn as nn
from torch.testing import assert_close

import tfx
from tfx.learn.rnn import (
    cell_from_lstm,
    forget_bias_report,
    grad_norm_by_distance,
    graph_depth,
    linear_recurrence_loop,
    linear_recurrence_scan,
    lstm_step_loop,
    lstm_with_forget_bias,
    marker_gap_task,
    mean_forget_gate,
    recall_task,
    time_recurrence,
    train_reader,
)
from tfx.model.attention import MultiHeadAttention


@pytest.mark.parametrize("bias", [True, False])
def test_step_loop_equals_nn_lstm_float64(bias):
    tfx.set_seed(0)
    lstm = nn.LSTM(5, 7, batch_first=True, bias=bias).double()
    x = torch.randn(3, 11, 5, dtype=torch.float64)
    h0, c0 = torch.randn(3, 7, dtype=torch.float64), torch.randn(3, 7, dtype=torch.float64)
    ref, (h_ref, c_ref) = lstm(x, (h0[None], c0[None]))
    ours, (h, c) = lstm_step_loop(cell_from_lstm(lstm), x, (h0, c0))
    assert_close(ours, ref)
    assert_close(h, h_ref[0])
    assert_close(c, c_ref[0])
    assert_close(lstm_step_loop(cell_from_lstm(lstm), x)[0], lstm(x)[0])  # zero initial state


@pytest.mark.parametrize(
    "kwargs", [dict(num_layers=2), dict(bidirectional=True), dict(proj_size=2)]
)
def test_cell_from_lstm_refuses_what_a_cell_cannot_be(kwargs):
    with pytest.raises(ValueError, match="one-layer"):
        cell_from_lstm(nn.LSTM(4, 4, batch_first=True, **kwargs))


def test_step_loop_names_the_shapes_on_bad_input():
    with pytest.raises(ValueError, match=r"expected shape \(\*, \*, 4\), got \(2, 3, 5\)"):
        lstm_step_loop(nn.LSTMCell(4, 4), torch.randn(2, 3, 5))


def test_grad_norm_by_distance_equals_the_explicit_jacobian():
    tfx.set_seed(0)
    lstm = nn.LSTM(3, 4, batch_first=True).double()
    x = torch.randn(1, 6, 3, dtype=torch.float64)
    J = torch.autograd.functional.jacobian(lambda t: lstm(t)[0][0, -1], x)  # (4, 1, 6, 3)
    expected = J[:, 0].pow(2).sum(dim=(0, 2)).sqrt().flip(0)  # (6,), index = distance
    assert_close(grad_norm_by_distance(lambda t: lstm(t)[0], x), expected)
    attn = MultiHeadAttention(4, 2).double()
    x = torch.randn(1, 5, 4, dtype=torch.float64)
    J = torch.autograd.functional.jacobian(lambda t: attn(t)[0][0, -1], x)  # (4, 1, 5, 4)
    assert_close(
        grad_norm_by_distance(lambda t: attn(t)[0], x),
        J[:, 0].pow(2).sum(dim=(0, 2)).sqrt().flip(0),
    )


def test_grad_norm_by_distance_refuses_a_batch():
    with pytest.raises(ValueError, match=r"\(1, L, d_in\), got \(2, 3, 4\)"):
        grad_norm_by_distance(lambda t: t, torch.randn(2, 3, 4))


def test_graph_depth_counts_the_longest_chain():
    x = torch.randn(3, requires_grad=True)
    y = x
    for _ in range(5):
        y = y * 2  # five operations, one after another
    assert graph_depth(y) == 5
    assert graph_depth(y + (x * 3)) == 6  # a short side branch does not lengthen the chain
    with pytest.raises(ValueError, match="grad_fn"):
        graph_depth(torch.ones(2))


def test_graph_depth_of_the_step_loop_grows_8_per_step_and_attention_not_at_all():
    tfx.set_seed(0)
    cell, attn = nn.LSTMCell(4, 4), MultiHeadAttention(4, 2)
    loop = [
        graph_depth(lstm_step_loop(cell, torch.randn(1, L, 4, requires_grad=True))[0])
        for L in (3, 10, 1500)
    ]
    assert (
        loop[1] - loop[0] == 8 * 7 and loop[2] - loop[1] == 8 * 1490
    )  # deep chains need no recursion
    att = {graph_depth(attn(torch.randn(1, L, 4, requires_grad=True))[0]) for L in (3, 10, 100)}
    assert len(att) == 1


def test_lstm_with_forget_bias_moves_only_the_forget_gate():
    tfx.set_seed(0)
    plain = nn.LSTM(3, 3, batch_first=True)
    tfx.set_seed(0)
    opened = lstm_with_forget_bias(3, 2.5)
    delta = opened.bias_ih_l0 - plain.bias_ih_l0  # (12,): gates i, f, g, o
    assert_close(delta, torch.tensor([0.0] * 3 + [2.5] * 3 + [0.0] * 6))
    assert_close(opened.weight_hh_l0, plain.weight_hh_l0)


def _numbers(report: str) -> list:
    return [float(v) for v in re.findall(r"\d\.\d\de[+-]\d\d", report)]


@pytest.mark.parametrize("fb", [0, 10])  # the widget slider's extremes
def test_forget_bias_report_at_the_slider_extremes(fb):
    text = forget_bias_report(fb)
    assert text.splitlines()[0] == f"forget-gate bias {fb}"
    values = _numbers(text)
    assert len(values) == 8 and all(math.isfinite(v) and v >= 0 for v in values)


def test_forget_bias_report_shows_the_vanishing_and_its_cure():
    at64 = {fb: _numbers(forget_bias_report(fb, distances=(1, 64))) for fb in (0, 3)}
    lstm0, attn0 = at64[0][2], at64[0][3]  # row "64": LSTM, attention
    assert lstm0 < 1e-6 * at64[0][0] and attn0 > 1e-3
    assert at64[3][2] > 0.1 * at64[3][0]
    assert forget_bias_report(3) == forget_bias_report(
        3
    )  # seeded: the widget prints the same every time
    with pytest.raises(ValueError, match="distances"):
        forget_bias_report(0, distances=(-1, 4))


def test_forget_bias_widget_reprints_on_change(capsys):
    w = tfx.book.widgets.forget_bias_widget()
    slider, out = w.children
    assert slider.description == "forget-gate bias" and (slider.min, slider.max) == (0, 10)
    slider.value = 3
    printed = capsys.readouterr().out + "".join(o.get("text", "") for o in out.outputs)
    assert "forget-gate bias 3" in printed


def test_mean_forget_gate_is_the_sigmoid_of_the_bias_when_weights_are_zero():
    tfx.set_seed(0)
    lstm = lstm_with_forget_bias(4, 1.5, hidden=3)
    with torch.no_grad():
        lstm.weight_ih_l0.zero_()
        lstm.weight_hh_l0.zero_()
    b = lstm.bias_ih_l0[3:6] + lstm.bias_hh_l0[3:6]  # (3,): the forget rows
    expected = torch.sigmoid(b).mean().item()
    assert math.isclose(mean_forget_gate(lstm, torch.randn(1, 5, 4)), expected, rel_tol=1e-6)


def test_mean_forget_gate_equals_dc_t_by_dc_t_minus_1():
    # c_t = f_t ⊙ c_{t−1} + i_t ⊙ g_t, and no gate reads c_{t−1}: so ∂c_t/∂c_{t−1} = diag(f_t).
    # autograd through nn.LSTM's own step gives f_t without knowing the gate order
    tfx.set_seed(0)
    lstm = lstm_with_forget_bias(3, 0.7, hidden=4).double()
    x = torch.randn(1, 6, 3, dtype=torch.float64)
    h, c, fs = (
        torch.zeros(1, 1, 4, dtype=torch.float64),
        torch.zeros(1, 1, 4, dtype=torch.float64),
        [],
    )
    for t in range(6):
        c_leaf = c.detach().requires_grad_(True)
        _, (h_new, c_new) = lstm(x[:, t : t + 1], (h, c_leaf))
        (f_t,) = torch.autograd.grad(c_new.sum(), c_leaf)  # (1, 1, 4)
        fs.append(f_t)
        h, c = h_new.detach(), c_new.detach()
    assert math.isclose(mean_forget_gate(lstm, x), torch.cat(fs).mean().item(), rel_tol=1e-9)


def test_mean_forget_gate_bad_input():
    with pytest.raises(ValueError, match="one-layer, one-direction"):
        mean_forget_gate(nn.LSTM(3, 3, batch_first=True, bidirectional=True), torch.randn(1, 4, 3))
    with pytest.raises(ValueError, match="x"):
        mean_forget_gate(nn.LSTM(3, 3, batch_first=True), torch.randn(2, 4, 3))


@pytest.mark.parametrize("L", [1, 2, 7, 64, 100])
def test_scan_equals_loop_float64(L):
    tfx.set_seed(0)
    a = torch.rand(3, L, 5, dtype=torch.float64) * 1.5  # some maps expand, some contract
    b = torch.randn(3, L, 5, dtype=torch.float64)
    assert_close(linear_recurrence_scan(a, b), linear_recurrence_loop(a, b))


def test_scan_depth_grows_with_log_L_and_loop_depth_with_L():
    depths = {}
    for L in (16, 256):
        a = torch.rand(1, L, 2, requires_grad=True)
        b = torch.randn(1, L, 2)
        depths[L] = (
            graph_depth(linear_recurrence_loop(a, b)),
            graph_depth(linear_recurrence_scan(a, b)),
        )
    assert depths[256][0] - depths[16][0] == 2 * (256 - 16)
    assert depths[256][1] == 2 * depths[16][1]  # log2 256 = 2 × log2 16


def test_recurrence_bad_input():
    with pytest.raises(ValueError, match=r"same shape.*\(2, 3\) and \(2, 4\)"):
        linear_recurrence_scan(torch.ones(2, 3), torch.ones(2, 4))
    with pytest.raises(TypeError, match="tensors"):
        linear_recurrence_loop([1.0], torch.ones(1, 1))


def test_recall_task_asks_for_the_first_symbol():
    x, y = recall_task(50, 7, n_symbols=5, generator=torch.Generator().manual_seed(0))
    assert x.shape == (50, 8) and torch.equal(y, x[:, 0]) and x.max() < 5
    with pytest.raises(ValueError, match="distance"):
        recall_task(4, 0)
    with pytest.raises(ValueError, match="batch"):
        recall_task(0, 3)


def test_marker_gap_task_has_two_markers_the_answer_apart():
    x, y = marker_gap_task(500, 12, generator=torch.Generator().manual_seed(0))
    assert x.shape == (500, 12)
    assert ((x == 1).sum(dim=1) == 2).all()
    pos = (x == 1).nonzero()[:, 1].view(500, 2)  # (500, 2): the two marker positions per row
    assert torch.equal(pos[:, 1] - pos[:, 0], y)
    assert y.min() == 1 and y.max() == 11  # every gap 1 .. length − 1 occurs
    with pytest.raises(ValueError, match="length"):
        marker_gap_task(4, 1)
    with pytest.raises(ValueError, match="n_symbols"):
        marker_gap_task(4, 10, n_symbols=2)


def test_train_reader_learns_a_short_recall_and_is_seeded():
    task = lambda n, g: recall_task(n, 2, n_symbols=4, generator=g)
    _, acc = train_reader(task, 4, 4, steps=150, n_test=200)
    assert acc > 0.9  # chance is 0.25
    _, acc_again = train_reader(task, 4, 4, steps=150, n_test=200)
    assert acc_again == acc
    _, untrained = train_reader(task, 4, 4, steps=0, n_test=200)
    assert untrained < 0.5
    with pytest.raises(TypeError, match="task"):
        train_reader("recall", 4, 4)


def test_time_recurrence_times_three_ways_at_each_length():
    best = time_recurrence([4, 8], d=8, batch=2, n_heads=2, repeats=1)
    assert list(best) == ["LSTMCell step loop", "nn.LSTM", "self-attention (tfx)"]
    assert all(len(ts) == 2 and all(t > 0 for t in ts) for ts in best.values())
    with pytest.raises(ValueError, match="lengths"):
        time_recurrence([0])
