"""The recurrent baseline of chapter 00: an LSTM written as an explicit loop over time, and the gradient
of the last output with respect to each earlier input, which shows how signal fades with distance.
"""

import torch
import torch.nn as nn

from tfx import set_seed
from tfx.attention import MultiHeadAttention
from tfx.shapes import check_shape, fmt_shape


def cell_from_lstm(lstm: nn.LSTM) -> nn.LSTMCell:
    """An LSTMCell with the weights of a one-layer, one-direction, batch-first nn.LSTM: the same maths."""
    if lstm.num_layers != 1 or lstm.bidirectional or lstm.proj_size:
        raise ValueError("cell_from_lstm needs a one-layer, one-direction LSTM without projection")
    cell = nn.LSTMCell(lstm.input_size, lstm.hidden_size, bias=lstm.bias)
    with torch.no_grad():
        cell.weight_ih.copy_(lstm.weight_ih_l0)  # (4·H, d_in): gates i, f, g, o stacked
        cell.weight_hh.copy_(lstm.weight_hh_l0)  # (4·H, H)
        if lstm.bias:
            cell.bias_ih.copy_(lstm.bias_ih_l0)
            cell.bias_hh.copy_(lstm.bias_hh_l0)
    return cell.to(lstm.weight_ih_l0.device, lstm.weight_ih_l0.dtype)


def lstm_step_loop(cell: nn.LSTMCell, x: torch.Tensor, state=None):
    """Run cell over x one time step at a time: step t cannot start before step t−1 has finished.

    x: (B, L, d_in). Returns the hidden states (B, L, H) and the final (h, c), each (B, H), like nn.LSTM.
    """
    check_shape(x, (None, None, cell.input_size), name="x")
    B, L, _ = x.shape
    if state is None:
        h = x.new_zeros(B, cell.hidden_size)  # (B, H)
        state = (h, h)
    outputs = []
    for t in range(L):
        state = cell(x[:, t], state)  # (B, d_in) and (B, H) → (B, H), (B, H)
        outputs.append(state[0])
    return torch.stack(outputs, dim=1), state  # (B, L, H)


def grad_norm_by_distance(f, x: torch.Tensor) -> torch.Tensor:
    """‖∂ y_last / ∂ x_{L−1−d}‖ for d = 0..L−1, where y = f(x) and y_last is the output at the last position.

    x: (1, L, d_in), f maps (B, L, d_in) to (B, L, d_out) treating batch rows independently (no batch
    norm). The norm is the Frobenius norm of the (d_out, d_in) Jacobian block. One backward pass finds all
    of it: copy x d_out times along the batch and let copy i carry output feature i only.
    """
    if x.dim() != 3 or x.size(0) != 1:
        raise ValueError(f"x must be (1, L, d_in), got {fmt_shape(x.shape)}")
    xs = x.detach().expand(f(x).size(-1), -1, -1).clone().requires_grad_(True)  # (d_out, L, d_in)
    y_last = f(xs)[:, -1]  # (d_out, d_out): row i is copy i's last output
    y_last.diagonal().sum().backward()  # copy i back-propagates its own feature i
    sq = xs.grad.pow(2).sum(dim=(0, 2))  # (L,): summed over output and input features
    return sq.sqrt().flip(0)  # index d: the input d positions before the last


def lstm_with_forget_bias(d: int, forget_bias: float = 0.0) -> nn.LSTM:
    """A fresh one-layer LSTM (d → d) whose forget gate gets forget_bias added: the LSTM's own cure for
    vanishing gradients, since a forget gate near 1 carries the cell state through unchanged.
    """
    lstm = nn.LSTM(d, d, batch_first=True)
    with torch.no_grad():
        lstm.bias_ih_l0[d : 2 * d] += forget_bias  # gate order is i, f, g, o: rows d..2d are f
    return lstm


def forget_bias_report(
    forget_bias: float, distances=(1, 8, 32, 64), d: int = 32, n_heads: int = 4
) -> str:
    """The text of chapter 00's widget: gradient norm of the last output against distance, for an untrained
    LSTM with the given forget-gate bias and for one self-attention layer, on seeded random input.
    """
    if min(distances) < 0:
        raise ValueError(f"distances must be >= 0, got {distances}")
    set_seed(0)
    lstm = lstm_with_forget_bias(d, forget_bias)
    attn = MultiHeadAttention(d, n_heads)
    x = torch.randn(1, max(distances) + 1, d)  # (1, L, d)
    g_lstm = grad_norm_by_distance(lambda t: lstm(t)[0], x)  # (L,)
    g_attn = grad_norm_by_distance(lambda t: attn(t)[0], x)  # (L,)
    lines = [f"forget-gate bias {forget_bias:g}", f"{'distance':>8}  {'LSTM':>9}  {'attention':>9}"]
    lines += [f"{k:>8}  {g_lstm[k]:9.2e}  {g_attn[k]:9.2e}" for k in distances]
    return "\n".join(lines)


def graph_depth(t: torch.Tensor) -> int:
    """The longest chain of autograd operations from the inputs to t: operations on a chain must run one
    after another, so this is the dependency depth no amount of parallel hardware can shorten.
    """
    if t.grad_fn is None:
        raise ValueError("graph_depth needs a tensor computed with autograd on (t.grad_fn is None)")
    depth, stack = {}, [(t.grad_fn, False)]
    while (
        stack
    ):  # iterative post-order walk: an LSTM over 1000 steps is deeper than Python's recursion
        node, children_done = stack.pop()
        if node in depth:
            continue
        children = [n for n, _ in node.next_functions if n is not None]
        if children_done:
            own = (
                0 if type(node).__name__ == "AccumulateGrad" else 1
            )  # a leaf's gradient sink, no op
            depth[node] = own + max((depth[c] for c in children), default=0)
        else:
            stack.append((node, True))
            stack.extend((c, False) for c in children if c not in depth)
    return depth[t.grad_fn]
