"""The recurrent baseline of chapter 00: an LSTM written as an explicit loop over time, the gradient
of the last output with respect to each earlier input (which shows how signal fades with distance),
linear recurrences that do parallelise, and small sequence tasks an LSTM is trained on.
"""

import torch
import torch.nn as nn

from tfx import set_seed
from tfx.core.shapes import check_shape, fmt_shape
from tfx.inspect.timing import threads
from tfx.model.attention import MultiHeadAttention


def cell_from_lstm(lstm: nn.LSTM) -> nn.LSTMCell:
    """An LSTMCell with the weights of a one-layer, one-direction, batch-first nn.LSTM: the same
    maths."""
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

    x: (B, L, d_in). Returns the hidden states (B, L, H) and the final (h, c), each (B, H), like
    nn.LSTM.

    Built in chapter 00.
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
    """‖∂ y_last / ∂ x_{L−1−d}‖ for d = 0..L−1, where y = f(x) and y_last is the output at the last
    position.

    x: (1, L, d_in), f maps (B, L, d_in) to (B, L, d_out) treating batch rows independently (no
    batch norm). The norm is the Frobenius norm of the (d_out, d_in) Jacobian block. One backward
    pass finds all of it: copy x d_out times along the batch and let copy i carry output feature i
    only.

    Built in chapter 00.
    """
    if x.dim() != 3 or x.size(0) != 1:
        raise ValueError(f"x must be (1, L, d_in), got {fmt_shape(x.shape)}")
    xs = x.detach().expand(f(x).size(-1), -1, -1).clone().requires_grad_(True)  # (d_out, L, d_in)
    y_last = f(xs)[:, -1]  # (d_out, d_out): row i is copy i's last output
    y_last.diagonal().sum().backward()  # copy i back-propagates its own feature i
    sq = xs.grad.pow(2).sum(dim=(0, 2))  # (L,): summed over output and input features
    return sq.sqrt().flip(0)  # index d: the input d positions before the last


def lstm_with_forget_bias(d: int, forget_bias: float = 0.0, hidden: int = None) -> nn.LSTM:
    """A fresh one-layer, batch-first LSTM (d → hidden, default d) whose forget gate gets
    forget_bias added: the LSTM's own cure for vanishing gradients, since a forget gate near 1
    carries the cell state through unchanged.
    """
    H = d if hidden is None else hidden
    lstm = nn.LSTM(d, H, batch_first=True)
    with torch.no_grad():
        lstm.bias_ih_l0[H : 2 * H] += forget_bias  # gate order is i, f, g, o: rows H..2H are f
    return lstm


def forget_bias_report(
    forget_bias: float, distances=(1, 8, 32, 64), d: int = 32, n_heads: int = 4
) -> str:
    """The text of chapter 00's widget: gradient norm of the last output against distance, for an
    untrained LSTM with the given forget-gate bias and for one self-attention layer, on seeded
    random input.
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
    """The longest chain of autograd operations from the inputs to t: operations on a chain must run
    one after another, so this is the dependency depth no amount of parallel hardware can shorten.

    Built in chapter 00.
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


def mean_forget_gate(lstm: nn.LSTM, x: torch.Tensor) -> float:
    """The average forget gate f_t over all steps and units of a one-layer LSTM reading x
    (1, L, d_in), recomputed from the LSTM's own weights and hidden states: f_t near 1 carries the
    cell state through a step unchanged, f_t near 1/2 halves it.
    """
    if lstm.num_layers != 1 or lstm.bidirectional or lstm.proj_size or not lstm.batch_first:
        raise ValueError(
            "mean_forget_gate needs a one-layer, one-direction, batch-first LSTM without projection"
        )
    check_shape(x, (1, None, lstm.input_size), name="x")
    H = lstm.hidden_size
    with torch.no_grad():
        h = lstm(x)[0][0]  # (L, H)
        h_prev = torch.cat([h.new_zeros(1, H), h[:-1]])  # (L, H): h_{t-1}, zero before step 0
        f = slice(H, 2 * H)  # gate order i, f, g, o: rows H..2H are the forget gate
        pre = x[0] @ lstm.weight_ih_l0[f].T + h_prev @ lstm.weight_hh_l0[f].T  # (L, H)
        if lstm.bias:
            pre = pre + lstm.bias_ih_l0[f] + lstm.bias_hh_l0[f]  # (L, H)
        return pre.sigmoid().mean().item()


# ---- linear recurrences: the kind that does parallelise ----------------------------------------


def _check_recurrence(a: torch.Tensor, b: torch.Tensor):
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        raise TypeError(f"a and b must be tensors, got {type(a).__name__} and {type(b).__name__}")
    if a.shape != b.shape or a.dim() < 2:
        raise ValueError(
            f"a and b must have the same shape (B, L, ...), got {fmt_shape(a.shape)} and "
            f"{fmt_shape(b.shape)}"
        )


def linear_recurrence_loop(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """h_t = a_t ⊙ h_{t−1} + b_t with h_{−1} = 0, one step after another (L dependent steps).

    a, b: (B, L, ...). Returns h: (B, L, ...). This is the recurrence of linear RNNs and (diagonal)
    state-space models: no non-linearity between h_{t−1} and h_t.
    """
    _check_recurrence(a, b)
    h, out = torch.zeros_like(b[:, 0]), []  # (B, ...)
    for t in range(a.size(1)):
        h = a[:, t] * h + b[:, t]  # (B, ...)
        out.append(h)
    return torch.stack(out, dim=1)  # (B, L, ...)


def linear_recurrence_scan(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The same h as linear_recurrence_loop, by a parallel prefix scan in ⌈log2 L⌉ rounds.

    Each step is the affine map h ↦ a_t h + b_t, and composing two affine maps gives another:
    (a1, b1) then (a2, b2) is (a2·a1, a2·b1 + b2). Composition is associative, so the prefixes can
    be combined in any grouping: in round r every position t ≥ 2^r composes its map with the one
    2^r positions earlier (Hillis and Steele's scan). Every round works on all positions at once, so
    the chain of dependent operations is O(log L) long, not O(L). A non-linear RNN has no such
    shortcut: tanh(W h + U x) composed twice is not of the same form.

    Built in chapter 00.
    """
    _check_recurrence(a, b)
    L, step = a.size(1), 1
    while step < L:
        a_prev, b_prev = a[:, :-step], b[:, :-step]  # (B, L − step, ...): the maps `step` earlier
        b = torch.cat([b[:, :step], a[:, step:] * b_prev + b[:, step:]], dim=1)  # (B, L, ...)
        a = torch.cat([a[:, :step], a[:, step:] * a_prev], dim=1)  # (B, L, ...)
        step *= 2
    return b  # with h_{−1} = 0, the composed map's offset is h_t


# ---- small sequence tasks: what a trained LSTM can and cannot learn ----------------------------


def _check_task(batch: int, n_symbols: int):
    if not isinstance(batch, int) or batch < 1:
        raise ValueError(f"batch must be an int >= 1, got {batch!r}")
    if not isinstance(n_symbols, int) or n_symbols < 2:
        raise ValueError(f"n_symbols must be an int >= 2, got {n_symbols!r}")


def recall_task(batch: int, distance: int, n_symbols: int = 8, generator=None):
    """Recall at a distance: x is (batch, distance + 1) random symbols, y (batch,) is x's first one.

    The reader sees the symbol to remember, then `distance` distractors, and must answer at the last
    step: the dependency it has to carry is exactly `distance` steps long. Chance is 1 / n_symbols.
    """
    _check_task(batch, n_symbols)
    if not isinstance(distance, int) or distance < 1:
        raise ValueError(f"distance must be an int >= 1, got {distance!r}")
    x = torch.randint(0, n_symbols, (batch, distance + 1), generator=generator)  # (B, distance+1)
    return x, x[:, 0]


def marker_gap_task(batch: int, length: int = 20, n_symbols: int = 8, generator=None):
    """The gap between two markers: x is (batch, length) symbols from 2..n_symbols−1 with the marker
    1 at two positions i < j; y (batch,) is the distance j − i, uniform over 1 .. length − 1.

    To answer at the last step a reader has to count the steps between the markers.
    """
    _check_task(batch, n_symbols)
    if n_symbols < 3:
        raise ValueError(f"n_symbols must be >= 3 (marker and fillers), got {n_symbols}")
    if not isinstance(length, int) or length < 2:
        raise ValueError(f"length must be an int >= 2, got {length!r}")
    x = torch.randint(2, n_symbols, (batch, length), generator=generator)  # (B, length)
    gap = torch.randint(1, length, (batch,), generator=generator)  # uniform over 1 .. length − 1
    u = torch.rand(batch, generator=generator)
    i = (u * (length - gap)).long()  # first marker, uniform over 0 .. length − 1 − gap
    rows = torch.arange(batch)
    x[rows, i] = 1
    x[rows, i + gap] = 1
    return x, gap


class SequenceReader(nn.Module):
    """Embedding → one-layer LSTM (forget-gate bias added) → a linear classifier on the last
    hidden state."""

    def __init__(
        self,
        n_symbols: int,
        n_classes: int,
        hidden: int = 32,
        d_embed: int = 16,
        forget_bias: float = 0.0,
    ):
        super().__init__()
        self.embed = nn.Embedding(n_symbols, d_embed)
        self.lstm = lstm_with_forget_bias(d_embed, forget_bias, hidden=hidden)
        self.out = nn.Linear(hidden, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lstm(self.embed(x))[0]  # (B, L, hidden)
        return self.out(h[:, -1])  # (B, n_classes)


def train_reader(
    task,
    n_symbols: int,
    n_classes: int,  # recall_task: n_symbols; marker_gap_task: its length (gaps 1 .. length − 1)
    steps: int = 300,
    forget_bias: float = 0.0,
    batch: int = 64,
    lr: float = 1e-2,
    n_test: int = 1000,
    seed: int = 0,
):
    """Train a fresh SequenceReader with Adam on task(batch, generator) → (x, y), then return it and
    its accuracy on n_test new examples (drawn from another seed, so none was seen in training).

    Everything is seeded: the same call gives the same model and the same accuracy. It trains on one
    thread: a small LSTM gains nothing from a second one, a busy machine makes two threads wait for
    each other, and the result then does not depend on the machine's core count.
    """
    if not callable(task):
        raise TypeError(f"task must be a callable (batch, generator) -> (x, y), got {task!r}")
    if not isinstance(steps, int) or steps < 0:
        raise ValueError(f"steps must be an int >= 0, got {steps!r}")
    set_seed(seed)
    model = SequenceReader(n_symbols, n_classes, forget_bias=forget_bias)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    g = torch.Generator().manual_seed(seed)
    with threads(1):
        for _ in range(steps):
            x, y = task(batch, g)  # (batch, L), (batch,)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        x, y = task(n_test, torch.Generator().manual_seed(seed + 1))  # (n_test, L), (n_test,)
        with torch.no_grad():
            accuracy = (model(x).argmax(dim=-1) == y).float().mean().item()
    return model, accuracy


def time_recurrence(
    lengths,
    d: int = 64,
    batch: int = 8,
    n_heads: int = 4,
    device="cpu",
    repeats: int = 5,
) -> dict:
    """Best-of-`repeats` seconds of one forward pass, for each L in lengths, of three ways to read a
    (batch, L, d) sequence: the LSTMCell step loop, nn.LSTM (the same loop in one fused kernel) and
    one tfx self-attention layer. Returns {label: [seconds per length]}.

    Inference only; on a CUDA device tfx.inspect.timing.timeit synchronises around every call.
    Chapter 00 runs it on the CPU, and on a GPU when the reader has one.
    """
    from tfx.inspect.timing import timeit

    if not lengths or any(not isinstance(L, int) or L < 1 for L in lengths):
        raise ValueError(f"lengths must be a non-empty list of ints >= 1, got {lengths!r}")
    device = torch.device(device)
    set_seed(0)
    lstm = nn.LSTM(d, d, batch_first=True).to(device).eval()
    cell = cell_from_lstm(lstm)
    attn = MultiHeadAttention(d, n_heads).to(device).eval()
    best = {"LSTMCell step loop": [], "nn.LSTM": [], "self-attention (tfx)": []}
    with torch.inference_mode():
        for L in lengths:
            x = torch.randn(batch, L, d, device=device)  # (B, L, d)
            fns = [lambda t: lstm_step_loop(cell, t), lstm, attn]
            for key, fn in zip(best, fns):
                best[key].append(timeit(fn, x, repeats=repeats, device=device, label=key).best)
    return best
