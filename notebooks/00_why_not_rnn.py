# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python (tfx)
#     language: python
#     name: tfx
# ---

# %% [markdown]
# # 00 · Why not an RNN?
#
# Before 2017, a sentence such as `[CLS] 我 喜 欢 吃 苹 果 [SEP]` was read by a recurrent network: one
# token at a time, each step folding the new token into a running summary $h_t$. The Transformer threw
# that loop away. What exactly was wrong with it? This chapter answers with measurements on the
# machine that runs the notebook:
#
# 1. **Order of work.** $h_t$ needs $h_{t-1}$, so an RNN over $L$ tokens is a chain of $L$ dependent
#    steps, unless the recurrence is linear.
# 2. **Path length.** A token $k$ positions back reaches the last output through $k$ steps: how fast
#    does the gradient shrink with $k$, and what can a trained LSTM learn across a distance?
# 3. **The alternative.** Attention relates every token to every other token in one step.

# %%
import tfx  # first: importing tfx quiets torchao's import-time log lines (tfx/__init__.py)

# isort: split
import json
import time
from pathlib import Path

import torch
import torch.nn as nn

from tfx.book import forget_bias_widget, plot_curves, show_source
from tfx.core import RUNNING_EXAMPLE, build_vocab, running_example_ids, show
from tfx.inspect import loglog_slope, machine, threads
from tfx.learn import (
    cell_from_lstm,
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
from tfx.model import MultiHeadAttention, scaled_dot_product_attention

tfx.banner()

# %% [markdown]
# ## An LSTM reads the running example
#
# An LSTM keeps a hidden state $h_t$ and a cell state $c_t$, updated from the input $x_t$ and the
# previous step:
#
# $$
# \begin{aligned}
# i_t, f_t, o_t &= \sigma(W_{\cdot} x_t + U_{\cdot} h_{t-1} + b_{\cdot}) &&\text{input, forget, output gates}\\
# g_t &= \tanh(W_g x_t + U_g h_{t-1} + b_g) &&\text{candidate}\\
# c_t &= f_t \odot c_{t-1} + i_t \odot g_t, \qquad h_t = o_t \odot \tanh(c_t).
# \end{aligned}
# $$
#
# `nn.LSTM` runs this in one call; `tfx.learn.rnn.lstm_step_loop` runs one `nn.LSTMCell` step per
# Python iteration, so the loop over time is in plain sight:

# %%
show_source(lstm_step_loop)

# %% [markdown]
# We embed the running example into $d = 16$ dimensions and compare the loop with `nn.LSTM`.

# %%
# NBVAL_CHECK_OUTPUT
tfx.set_seed(0)
vocab = build_vocab(RUNNING_EXAMPLE)
ids = running_example_ids(vocab)  # (1, 8)
d = 16
embed = nn.Embedding(len(vocab), d)
lstm = nn.LSTM(d, d, batch_first=True)
cell = cell_from_lstm(lstm)  # the same weights, one step at a time
with torch.no_grad():
    x = embed(ids)  # (1, 8, 16)
    h_all, (h_last, c_last) = lstm(x)  # (1, 8, 16), (1, 1, 16) each
    h_loop, (h_loop_last, c_loop_last) = lstm_step_loop(cell, x)  # (1, 8, 16), (1, 16) each
show(ids=ids, x=x, h_all=h_all, h_loop=h_loop, c_last=c_last)
torch.testing.assert_close(h_loop, h_all)
torch.testing.assert_close(c_loop_last, c_last[0])
print("step loop == nn.LSTM: True")

# %% [markdown]
# ### $h_t$ needs $h_{t-1}$
#
# * Change the input at one step, 欢 at $t = 3$: every hidden state from $t = 3$ on changes, and none
#   before it.
# * Compute $h_4$ from a zero state instead of $h_3$: the result is wrong, so step 4 has to wait for
#   step 3, which waits for step 2, and so on.

# %%
# NBVAL_CHECK_OUTPUT
tfx.set_seed(0)
x_changed = x.clone()
x_changed[0, 3] = torch.randn(d)  # a different token at t = 3 (欢)
with torch.no_grad():
    h_changed, _ = lstm_step_loop(cell, x_changed)  # (1, 8, 16)
    h_orig, _ = lstm_step_loop(cell, x)
changed = (h_changed - h_orig).abs().amax(dim=-1)[0] > 1e-6  # (8,)
for t, (tok, c) in enumerate(zip(RUNNING_EXAMPLE, changed.tolist())):
    print(f"t={t} {tok:<5} h_t changed: {c}")
assert changed.tolist() == [False] * 3 + [True] * 5

with torch.no_grad():
    h4_from_zero, _ = cell(x[:, 4])  # start at step 4 with h_3 = c_3 = 0
gap = (h4_from_zero - h_orig[:, 4]).abs().max().item()
print(f"max |h_4 computed without h_3 − true h_4| = {gap:.3f}")
assert gap > 1e-2

# %% [markdown]
# ### The depth of the chain
#
# Operations that feed each other must run one after another. `tfx.learn.rnn.graph_depth` walks the
# autograd graph of an output and returns the longest chain of operations from the input to it: a
# lower bound on the number of steps one after another, however much hardware is available.

# %%
show_source(graph_depth)

# %% [markdown]
# For one self-attention layer (`tfx`'s `MultiHeadAttention`, taken apart in chapter 03) a longer
# sequence only makes the matrices bigger: *wider* work, not *longer* work. `nn.LSTM` shows a small
# constant depth only because its whole recurrence is one fused operation to autograd; inside that
# kernel the loop over time is still there.

# %%
# NBVAL_CHECK_OUTPUT
tfx.set_seed(0)
attn = MultiHeadAttention(d, n_heads=2)
depths = {}
print(f"{'L':>5}  {'step loop':>9}  {'nn.LSTM':>7}  {'attention':>9}")
for L in (8, 32, 128, 512):
    xL = torch.randn(1, L, d, requires_grad=True)  # (1, L, 16)
    depths[L] = (
        graph_depth(lstm_step_loop(cell, xL)[0]),
        graph_depth(lstm(xL)[0]),
        graph_depth(attn(xL)[0]),
    )
    print(f"{L:>5}  {depths[L][0]:>9}  {depths[L][1]:>7}  {depths[L][2]:>9}")
Ls = list(depths)
assert all(
    depths[b][0] - depths[a][0] == 8 * (b - a) for a, b in zip(Ls, Ls[1:])
)  # 8 more per step
assert len({depths[L][2] for L in depths}) == 1  # attention: the same depth at every length

# %% [markdown]
# Each LSTM step adds 8 operations to the longest chain, so the depth is $8L$ plus a constant.
# Attention's outputs are also independent of one another: the next cell computes them one query at a time, last
# position first, and compares with the full layer.

# %%
# NBVAL_CHECK_OUTPUT
tfx.set_seed(0)
with torch.no_grad():
    full, _ = attn(x)  # (1, 8, 16)
    q, k, v = attn.qkv(x).split(d, dim=-1)  # 3 × (1, 8, 16)
    q, k, v = attn.split_heads(q), attn.split_heads(k), attn.split_heads(v)  # (1, 2, 8, 8)
    rows = {}
    for i in reversed(range(x.size(1))):  # any order works: no row waits for another
        ctx_i, _ = scaled_dot_product_attention(q[:, :, i : i + 1], k, v)  # (1, 2, 1, 8)
        rows[i] = attn.out(attn.merge_heads(ctx_i))  # (1, 1, 16)
    one_by_one = torch.cat([rows[i] for i in range(x.size(1))], dim=1)  # (1, 8, 16)
show(full=full, one_by_one=one_by_one)
torch.testing.assert_close(one_by_one, full)
print("position-by-position attention in reverse order == full layer: True")

# %% [markdown]
# ## What does parallelise: linear recurrences
#
# "An RNN cannot be parallelised over time" is true of the LSTM, because $h_{t-1}$ goes through a
# $\tanh$ and a sigmoid before it reaches $h_t$. It is not true of the *linear* recurrence of linear
# RNNs and diagonal state-space models (S4, Mamba's core),
#
# $$h_t = a_t \odot h_{t-1} + b_t .$$
#
# Each step is an affine map $h \mapsto a_t h + b_t$, and two affine maps compose into one more:
# $(a_1, b_1)$ followed by $(a_2, b_2)$ is $(a_2 a_1,\; a_2 b_1 + b_2)$. That composition is
# associative, so a *prefix scan* combines the $L$ prefixes in $\lceil \log_2 L \rceil$ rounds, each
# working on all positions at once.

# %%
show_source(linear_recurrence_scan)

# %% [markdown]
# The loop's chain grows by 2 operations per step (a product and a sum), the scan's by 4 per round,
# so with $\log_2 L$.

# %%
# NBVAL_CHECK_OUTPUT
tfx.set_seed(0)
print(f"{'L':>5}  {'loop depth':>10}  {'scan depth':>10}  {'log2 L':>6}")
scan_depths = {}
for L in (8, 64, 512):
    a = torch.rand(1, L, 4, dtype=torch.float64, requires_grad=True)  # (1, L, 4): decay in [0, 1)
    b = torch.randn(1, L, 4, dtype=torch.float64)  # (1, L, 4): input at each step
    h_loop, h_scan = linear_recurrence_loop(a, b), linear_recurrence_scan(a, b)  # (1, L, 4) each
    torch.testing.assert_close(h_scan, h_loop)
    scan_depths[L] = (graph_depth(h_loop), graph_depth(h_scan))
    print(f"{L:>5}  {scan_depths[L][0]:>10}  {scan_depths[L][1]:>10}  {L.bit_length() - 1:>6}")
assert scan_depths[512][0] - scan_depths[8][0] == 2 * (512 - 8)  # the loop: 2 operations per step
assert all(scan_depths[L][1] == 4 * (L.bit_length() - 1) for L in scan_depths)  # 4 per round
print("scan == loop in float64: True")

# %% [markdown]
# So the honest argument is narrower: a recurrence *non-linear* in $h_{t-1}$, such as the LSTM, must
# be computed step after step. Linear-recurrence models trade some expressiveness inside each step
# for the scan; this book follows BERT and leaves them aside.
#
# ## Wall time against sequence length
#
# Depth is a count; time is what a reader waits for. For batch 8 and $d = 64$ we time the step loop,
# `nn.LSTM` (the same loop inside one optimised kernel) and one self-attention layer, keeping the
# fastest of five runs (`tfx.learn.rnn.time_recurrence`). Torch runs on **one thread**
# (`tfx.inspect.timing.threads(1)`): on a busy machine a multi-threaded operation waits for its
# slowest thread, and small operations take erratic turns.
#
# From the operation counts alone: the LSTM does $O(L\,d^2)$ work in $L$ dependent steps; attention
# does $O(L\,d^2 + L^2 d)$ work in a fixed number of wide steps. On log-log axes $t \propto L^k$ is a
# line of slope $k$, and the cell prints each slope. Times depend on the machine and its load, so
# nothing here is asserted.

# %%
# NBVAL_IGNORE_OUTPUT
# Figure 0.1: Best-of-5 time in ms for one batch (log scale) against sequence length L from 16 to
#   512 (log scale), on one thread: the LSTMCell step loop, nn.LSTM and one self-attention layer. On
#   log-log axes a slope k means time grows as L to the power k; attention's line bends upwards at
#   long L as its L by L scores take over, and where it crosses the LSTM lines depends on the
#   machine.
lengths = [16, 32, 64, 128, 256, 512]
start = time.perf_counter()
with threads(1):
    print(machine())
    best = time_recurrence(lengths, d=64, batch=8, n_heads=4)  # {label: [seconds per L]}
print(f"{'L':>5}  " + "  ".join(f"{k:>20}" for k in best))
for j, L in enumerate(lengths):
    print(f"{L:>5}  " + "  ".join(f"{best[k][j] * 1e3:>17.2f} ms" for k in best))
for k, ts in best.items():
    print(f"log-log slope of {k}: {loglog_slope(lengths, ts):.2f}")
print(f"(timing cell ran in {time.perf_counter() - start:.1f} s)")
fig = plot_curves(
    lengths,
    {k: [t * 1e3 for t in ts] for k, ts in best.items()},
    "sequence length L",
    "best of 5 (ms)",
    title="one batch of 8, d = 64, one thread, machine above",
    logx=True,
    logy=True,
    marker="o",
)

# %% [markdown]
# How to read Figure 0.1. Both LSTMs pay about the same cost for every step, so their slopes sit near
# 1: twice the tokens, twice the time, and no way to use more cores for more tokens. Attention's line
# bends towards slope 2 at long $L$, as the $L \times L$ score matrix starts to dominate.
#
# On a CPU thread, with no spare parallel width, that quadratic cost can make attention *slower* than a
# fused LSTM at long lengths; Figure 0.1 shows where the lines cross on this machine, if they do. The
# Transformer's bet is on hardware with thousands of parallel lanes, where a wide matrix product
# costs little more than a narrow one and $L$ dependent steps are the bottleneck.
#
# ### On a GPU
#
# On a machine with a GPU the next cell repeats the comparison there (batch 32, $d = 256$, $L$ up to
# 4096) and prints any GPU results `make bench` recorded. The machines this book was executed on have
# no GPU, and no GPU results have been recorded yet, so the stored output says so: no GPU number
# appears in this book that was not measured.

# %%
# NBVAL_IGNORE_OUTPUT
if torch.cuda.is_available():
    gpu_lengths = [64, 256, 1024, 4096]
    print(machine("cuda"))
    gpu_best = time_recurrence(gpu_lengths, d=256, batch=32, n_heads=4, device="cuda")
    print(f"{'L':>5}  " + "  ".join(f"{k:>20}" for k in gpu_best))
    for j, L in enumerate(gpu_lengths):
        print(f"{L:>5}  " + "  ".join(f"{gpu_best[k][j] * 1e3:>17.3f} ms" for k in gpu_best))
    for k, ts in gpu_best.items():
        print(f"log-log slope of {k}: {loglog_slope(gpu_lengths, ts):.2f}")
else:
    print("GPU timing skipped: torch.cuda.is_available() is False on this machine")
results_dir = Path(tfx.__file__).resolve().parent.parent / "bench" / "results"
gpu_runs = [
    r
    for r in (json.loads(f.read_text()) for f in sorted(results_dir.glob("*.json")))
    if "skipped" not in r.get("gpu", {"skipped": "absent"})
]
for run in gpu_runs:
    print(f"recorded by make bench on {run['date']}: {run['gpu']['machine']}")
    for row in run["gpu"]["layer"]:
        ratio = row.get("ratio_to_reference", 1.0)
        print(f"  {row['label']:<28} median {row['median_s'] * 1e3:8.3f} ms  ratio {ratio:.2f}")
if not gpu_runs:
    n_files = len(list(results_dir.glob("*.json")))
    print(
        f"no GPU results recorded in bench/results/ yet ({n_files} results files, none from a GPU)"
    )

# %% [markdown]
# ## Path length and vanishing gradients
#
# In the LSTM a token $k$ positions back reaches the last output through $k$ steps, and the gradient
# comes back through $k$ Jacobians; if their norms are below 1, the product shrinks exponentially in
# $k$. In attention, every input reaches every output through one weighted sum.
# `tfx.learn.rnn.grad_norm_by_distance(f, x)` returns $\lVert \partial y_{L} / \partial x_{L-k} \rVert$
# for each $k$; we apply it to an untrained LSTM at PyTorch's default initialisation and one untrained
# attention layer, both $d = 32$, on 65 random input vectors.

# %%
show_source(grad_norm_by_distance)

# %%
# NBVAL_CHECK_OUTPUT
# magnitudes: gradients that shrink through a product of up to 64 step Jacobians; rounding
# moves them by far less than the two printed digits
tfx.set_seed(0)
d_g, L_g = 32, 65
lstm_g = nn.LSTM(d_g, d_g, batch_first=True)
attn_g = MultiHeadAttention(d_g, n_heads=4)
x_g = torch.randn(1, L_g, d_g)  # (1, 65, 32)
g_lstm = grad_norm_by_distance(lambda t: lstm_g(t)[0], x_g)  # (65,)
g_attn = grad_norm_by_distance(lambda t: attn_g(t)[0], x_g)  # (65,)
show(x_g=x_g, g_lstm=g_lstm, g_attn=g_attn)
print(f"{'distance':>8}  {'LSTM':>8}  {'attention':>9}")
for dist in (0, 1, 2, 4, 8, 16, 32, 64):
    print(f"{dist:>8}  {g_lstm[dist]:8.1e}  {g_attn[dist]:9.1e}")
assert all(
    g_lstm[k + 8] < 0.1 * g_lstm[k] for k in range(1, L_g - 8)
)  # LSTM: ÷10 or more per 8 steps
assert g_attn[1:].max() < 10 * g_attn[1:].min()  # attention: one band at every distance
assert g_attn[0] > g_attn[1:].max()  # distance 0: the last token is also the query

# %%
# Figure 0.2: Norm of the gradient of the last output with respect to the input k positions back
#   (log scale) against the distance k from 1 to 64, for an untrained LSTM at PyTorch's default
#   initialisation and one untrained self-attention layer. The LSTM's points fall on a straight line
#   through many orders of magnitude, an exponential decay; attention's stay in one flat band.
dists = list(range(1, L_g))
fig = plot_curves(
    dists,
    {"LSTM (default init)": g_lstm[1:].tolist(), "self-attention": g_attn[1:].tolist()},
    "distance k",
    "‖∂y_last / ∂x_(L−k)‖",
    title="gradient against distance, untrained",
    logy=True,
    marker="o",
)

# %% [markdown]
# The LSTM's gradient falls by more than a factor of ten every 8 steps; at distance 64 it is far too
# small to move a float32 weight. Attention's stays within one band, a factor of 10 wide. (Distance 0
# is larger for attention because the last token is also the query, a second path to the output.)
#
# ### But the LSTM was designed against this
#
# The cell state update $c_t = f_t \odot c_{t-1} + \dots$ is a straight path through time when the
# forget gate $f_t$ is close to 1. PyTorch initialises every bias near 0, so $f_t$ starts near one
# half (`tfx.learn.rnn.mean_forget_gate`) and the cell state shrinks at every step. A positive
# forget-gate bias (`tfx.learn.rnn.lstm_with_forget_bias`) opens the gate at the start of training;
# with a bias of 3 the gradient no longer vanishes over 64 steps.


# %%
# NBVAL_CHECK_OUTPUT
# magnitudes: gradients that shrink through a product of up to 64 step Jacobians; rounding
# moves them by far less than the two printed digits
for fb in (0, 1, 3):
    tfx.set_seed(0)
    lstm_fb = lstm_with_forget_bias(d_g, fb)
    g = grad_norm_by_distance(lambda t, m=lstm_fb: m(t)[0], x_g)  # (65,)
    f_mean = mean_forget_gate(lstm_fb, x_g)
    print(
        f"forget bias {fb}: mean f_t {f_mean:.2f}; gradient at distance 1 {g[1]:.1e}, "
        f"at 64 {g[64]:.1e}, ratio {g[64] / g[1]:.1e}"
    )
    if fb == 0:
        assert 0.4 < f_mean < 0.6
    if fb == 3:
        assert f_mean > 0.9 and g[64] / g[1] > 0.1

# %% [markdown]
# The widget prints the gradient norm at distances 1, 8, 32 and 64 for an LSTM with the chosen
# forget-gate bias, next to one attention layer, which needs no such knob.

# %%
forget_bias_widget()

# %% [markdown]
# (claim-a19)=
# ### Claim A19: can RNNs not parallelise over time, and do their gradients vanish with distance?
#
# **Holds only when the forget gate lets the state leak.** The first half holds on every machine for a
# non-linear recurrence: the LSTM's chain grows by 8 operations per token, attention's does not. The
# second half holds at default initialisation, not with forget-gate bias 3. Attention's lasting
# advantage is the path length of 1.

# %%
# CLAIM A19: holds only when the forget gate lets the state leak: L dependent steps on every machine, and the gradient vanishes at default init but not with forget bias 3
tfx.set_seed(0)
lstm_fb3 = lstm_with_forget_bias(d_g, 3.0)
g_fb3 = grad_norm_by_distance(lambda t: lstm_fb3(t)[0], x_g)  # (65,)
decay_default, decay_fb3 = (g_lstm[64] / g_lstm[1]).item(), (g_fb3[64] / g_fb3[1]).item()
spread_attn = (g_attn[1:].max() / g_attn[1:].min()).item()
print(
    f"chain depth at L = 8 and 512: LSTM step loop {depths[8][0]}, {depths[512][0]}; "
    f"attention {depths[8][2]}, {depths[512][2]}"
)
print(
    f"gradient at distance 64 / distance 1: LSTM default {decay_default:.1e}, LSTM forget bias 3 "
    f"{decay_fb3:.1e}; attention max/min over distances 1..64: {spread_attn:.1f}"
)
assert depths[512][0] - depths[8][0] == 8 * (512 - 8) and depths[512][2] == depths[8][2]
assert decay_default < 1e-6  # vanishes
assert decay_fb3 > 0.1  # does not vanish
assert spread_attn < 10  # attention: no trend with distance

# %% [markdown]
# ## What a trained LSTM can learn
#
# `tfx.learn.rnn.train_reader` trains a fresh `SequenceReader` (embedding → LSTM with 32 units → a
# linear layer on the last state) with Adam, then scores it on 1,000 unseen examples; everything is
# seeded. In the first task (`tfx.learn.rnn.recall_task`) the network sees a symbol (one of 8), then
# `distance` random distractors, and must name the first symbol at the end. We train for 300 steps at
# distance 5 and 40, with default initialisation and with forget-gate bias 3.

# %%
acc_recall = {}
for fb in (0.0, 3.0):
    for dist in (5, 40):
        _, acc_recall[fb, dist] = train_reader(
            lambda n, g, dist=dist: recall_task(n, dist, generator=g),
            8,
            8,
            steps=300,
            forget_bias=fb,
        )
print(f"{'forget bias':>11}  {'distance 5':>10}  {'distance 40':>11}   (chance {1 / 8:.3f})")
for fb in (0.0, 3.0):
    print(f"{fb:>11g}  {acc_recall[fb, 5]:>10.3f}  {acc_recall[fb, 40]:>11.3f}")
assert acc_recall[0.0, 5] > 0.95 and acc_recall[0.0, 40] < 0.25  # learns at 5, chance at 40
assert acc_recall[3.0, 40] > 0.9  # the opened forget gate carries the symbol 40 steps

# %% [markdown]
# The default LSTM fails at distance 40 because the gradient that would teach it to keep the symbol
# has vanished over 40 steps; with the forget gate opened, the same network, trained as long, recalls
# it. The drop is a property of the initialisation and of training, not a law of recurrent networks.

# %% [markdown]
# (claim-a28)=
# ### Claim A28: does LSTM accuracy on Penn Treebank drop by over 60% for dependencies more than 20 apart?
#
# **Not reproducible here**: Penn Treebank is not available offline, and the article names neither
# the model nor its measure. In the recall task above, the default LSTM's drop from distance 5 to 40
# is larger than 60% (to chance); with the forget gate opened there is almost none.

# %%
# CLAIM A28: not reproducible here: no Penn Treebank offline; on a synthetic recall task the same 300 training steps take a default LSTM from 100% at distance 5 to chance at distance 40, while forget bias 3 recalls at 40 as well
drop = 1 - acc_recall[0.0, 40] / acc_recall[0.0, 5]
print(f"default initialisation: accuracy drops by {drop:.0%} from distance 5 to 40")
assert acc_recall[0.0, 5] > 0.95 and acc_recall[0.0, 40] < 0.25  # learns at 5, chance at 40
assert acc_recall[3.0, 40] > 0.9  # the opened forget gate carries the symbol 40 steps

# %% [markdown]
# (claim-a29)=
# ### Claim A29: with position only implicit, can an RNN perceive the distance between tokens?
#
# **Holds only in the architectural sense; "rigid" is overstated.** Nothing in an RNN's input says
# "position 5", but the recurrence can count: with two markers at random positions $i < j$ among 20
# symbols (`marker_gap_task`), a small LSTM trained to output $j - i$ scores far above the best
# constant guess. Position is not *given* to an RNN; the recurrence computes it.

# %%
# CLAIM A29: holds only in the architectural sense (no explicit position input): a small LSTM trained for 300 steps still names the gap between two markers far above the best constant guess
_, acc29 = train_reader(lambda n, g: marker_gap_task(n, 20, generator=g), 8, 20, steps=300)
_, y_test = marker_gap_task(1000, 20, generator=torch.Generator().manual_seed(1))  # the test set
baseline = y_test.bincount().max().item() / len(y_test)  # always answer the most frequent gap
print(
    f"gap between two markers in 20 symbols: LSTM accuracy {acc29:.3f}, best constant guess {baseline:.3f}"
)
assert acc29 > 0.8 and acc29 > 5 * baseline

# %% [markdown]
# ## The idea of attention: relations instead of order
#
# Attention computes how related each token is to every token, and mixes them by those relations.
# Take three tokens with hand-picked 2-d vectors: 苹 and 果 point in similar directions, 我 elsewhere.
#
# 1. **Score** every pair by a dot product: $S = X X^{\mathsf T}$, a $3 \times 3$ table of relations.
# 2. **Normalise** each row with a softmax, so token $i$'s weights sum to 1.
# 3. **Mix**: token $i$'s output is $\sum_j w_{ij} x_j$, that is $W X$.
#
# That is `scaled_dot_product_attention(X, X, X, scale=1)`. The real layer first maps each token to a
# query, a key and a value with learned $W_Q, W_K, W_V$ and divides the scores by $\sqrt{d_k}$:
# chapter 01 follows them through BERT-base shape by shape, and chapter 03 asks why each is there.

# %%
# NBVAL_CHECK_OUTPUT
tokens = ["我", "苹", "果"]
X = torch.tensor([[1.0, 0.0], [0.0, 2.0], [0.5, 1.5]])  # (3, 2)
S = X @ X.T  # (3, 3): relation of every token to every token
out, W = scaled_dot_product_attention(X, X, X, scale=1.0)  # (3, 2), (3, 3)
show(X=X, S=S, W=W, out=out)
torch.testing.assert_close(W, S.softmax(dim=-1))
torch.testing.assert_close(out, W @ X)
assert W[1, 0] < 0.05 and W[0].max() < 0.6  # 苹 ignores 我; 我 spreads its weight
print("scores S = X Xᵀ        weights W = softmax(S)    output W X")
for i, tok in enumerate(tokens):
    print(f"{tok}  {S[i].numpy().round(2)}   {W[i].numpy().round(2)}   {out[i].numpy().round(2)}")
assert torch.allclose(W.sum(dim=-1), torch.ones(3))

# %% [markdown]
# 苹 puts almost all its weight on itself and 果; 我 spreads its weight, because its dot products are
# small. Nothing looked at positions: shuffle the tokens and every output shuffles with them,
# unchanged. So attention alone cannot tell `我吃苹果` from `苹果吃我`, which is why chapter 02 adds
# position information.

# %%
# NBVAL_CHECK_OUTPUT
perm = torch.tensor([2, 0, 1])  # 果 我 苹
out_perm, _ = scaled_dot_product_attention(X[perm], X[perm], X[perm], scale=1.0)  # (3, 2)
torch.testing.assert_close(out_perm, out[perm])
print("order", [tokens[i] for i in perm.tolist()], "→ outputs are the same rows, permuted: True")

# %% [markdown]
# ## The article's other claims on this material
#
# The source article's other claims about recurrent networks are settled in the
# [ledger](91_ledger_foundations.ipynb): its step count for the 我喜欢吃苹果 walk-through
# ({ref}`A26 <claim-a26>`, off by one), an LSTM keeping a V100 below 40% utilisation
# ({ref}`A27 <claim-a27>`, not reproducible here), and contextual vectors that depended only on the
# preceding words before the Transformer ({ref}`A30 <claim-a30>`: not in a bidirectional LSTM).

# %% [markdown]
# ## Summary
#
# * An LSTM's $h_t$ needs $h_{t-1}$: the step loop's chain is $8L$ plus a constant operations deep,
#   while one attention layer's has the same depth at every $L$. Only *non-linear* recurrences are bound to the chain;
#   a linear one is an associative scan of $\lceil \log_2 L \rceil$ rounds.
# * Measured on this CPU, attention's $O(L^2)$ cost can lose to a fused `nn.LSTM` at long lengths;
#   its advantage is parallel width, which needs parallel hardware.
# * At default initialisation an LSTM's gradient vanishes exponentially with distance, and a trained
#   default LSTM recalls a symbol 5 steps back but not 40; a forget-gate bias of 3 largely cures both.
#   The lasting difference is the path length: $k$ steps for a token $k$ positions back, against 1.
# * Attention replaces order by relations, and so ignores order, which chapter 02 repairs.
#
# ## What you can now do
#
# - Count the dependent steps of a computation with `graph_depth`, and tell a non-linear recurrence
#   from a linear one (`linear_recurrence_scan`).
# - Time a step loop, `nn.LSTM` and attention against $L$ on one thread and read their log-log slopes.
# - Measure how the gradient falls with distance (`tfx.learn.rnn.grad_norm_by_distance`), and open an
#   LSTM's forget gate to slow the fall.
# - Compute attention by hand on three tokens (score, softmax, mix) and show that it ignores order.
#
# Next, chapter 01 asks what the shape of every tensor is from eight tokens to eight rows of
# vocabulary scores, which matrix makes each, and where the parameters and the compute go.
#
# ## Exercises
#
# Tiers: *warm-up* checks what the chapter showed, *core* applies it to a new case, *build it*
# has you write the code, *open* has no single answer.
#
# 1. *(core)* **GRU depth.** Predict first: more or fewer operations per step than the LSTM cell?
#    Measure the chain depth of an `nn.GRUCell` step loop at $L = 10$ and $L = 20$. How many
#    operations does one GRU step add?
# 2. *(core)* **Opening the gate.** For `x_g`, with `tfx.set_seed(0)` before building the LSTM, find
#    the smallest integer forget-gate bias that keeps the gradient at distance 64 at least 1% of
#    that at distance 1.
# 3. *(warm-up)* **Causal attention.** Give `attn_g` the mask `tfx.model.attention.causal_mask(65)`.
#    Which inputs get a zero gradient from the *first* output, and why?
# 4. *(core)* **Breaking the symmetry.** Add a different vector (a "position") to each of the three
#    tokens of "The idea of attention" and show that permuting the tokens no longer just permutes
#    the outputs.
# 5. *(build it)* **The loop itself.** Write an Elman RNN, $h_t = \tanh(x_t W_x + h_{t-1} W_h + b)$,
#    as a Python loop over the tokens with the weights of an `nn.RNN`, and check it against
#    `nn.RNN`'s output.

# %% [markdown]
# :::{admonition} Solution to exercise 1
# :class: dropdown
# A GRU is a non-linear recurrence like the LSTM ($h_t$ comes from $h_{t-1}$ through a sigmoid reset
# gate, a $\tanh$ candidate and an update gate), so each step adds the same fixed chain of operations,
# and the depth at $L = 20$ minus the depth at $L = 10$ is ten times that number: 10 per step in the
# stored run, against 8 for the LSTM cell.
# :::

# %% tags=["hide-cell"]
# 1. The chain depth of a GRU step loop at L = 10 and L = 20
tfx.set_seed(0)
gru = nn.GRUCell(d, d)


def gru_loop(x):
    h = x.new_zeros(x.size(0), d)  # (B, d)
    outs = []
    for t in range(x.size(1)):
        h = gru(x[:, t], h)  # (B, d)
        outs.append(h)
    return torch.stack(outs, dim=1)  # (B, L, d)


gru_depths = [graph_depth(gru_loop(torch.randn(1, L, d, requires_grad=True))) for L in (10, 20)]
per_step = (gru_depths[1] - gru_depths[0]) // 10
print(f"GRU chain depth at L=10, 20: {gru_depths}; operations added per step: {per_step}")
assert gru_depths[1] - gru_depths[0] == 10 * per_step and per_step > 0

# %% [markdown]
# :::{admonition} Solution to exercise 2
# :class: dropdown
# A larger bias pushes $f_t = \sigma(\dots + b_f)$ towards 1, and the gradient along the cell state is
# multiplied by $f_t$ at every step. The forget-gate cell above puts the answer between 1 (far below
# 1%) and 3 (more than 10%); trying integer biases from 0 upwards, the first whose ratio
# $\lVert g_{64} \rVert / \lVert g_1 \rVert$ reaches 0.01 is 2.
# :::

# %% tags=["hide-cell"]
# 2. The smallest integer forget-gate bias that keeps 1% of the gradient at distance 64
for fb in range(0, 11):
    tfx.set_seed(0)
    lstm_fb = lstm_with_forget_bias(d_g, fb)
    g = grad_norm_by_distance(lambda t, m=lstm_fb: m(t)[0], x_g)  # (65,)
    if g[64] / g[1] >= 0.01:
        break
print(f"smallest integer forget bias with gradient(64) >= 1% of gradient(1): {fb}")
assert fb == 2

# %% [markdown]
# :::{admonition} Solution to exercise 3
# :class: dropdown
# Every input except input 0 gets exactly zero gradient. Under a causal mask query 0 sees key 0
# alone, with weight 1, so the first output is $v_0 W_O + b_O$, a function of $x_0$ only. The masked
# scores are replaced by the most negative float, their weights are exactly 0, and `masked_fill`
# passes no gradient back to the scores it replaced, so none reaches inputs $1, \dots, 64$.
# :::

# %% tags=["hide-cell"]
# 3. The gradient of the first output under a causal mask, input by input
mask = tfx.model.attention.causal_mask(L_g)  # (65, 65)
x_first = x_g.clone().requires_grad_(True)  # (1, 65, 32)
attn_g(x_first, mask)[0][0, 0].pow(2).sum().backward()
g_first = x_first.grad[0].norm(dim=-1)  # (65,): one norm per input position
print(
    f"gradient norm w.r.t. input 0: {g_first[0]:.2e}; "
    f"largest over inputs 1..64: {g_first[1:].max():.1e}"
)
assert g_first[0] > 0 and torch.all(g_first[1:] == 0)

# %% [markdown]
# :::{admonition} Solution to exercise 4
# :class: dropdown
# Attention satisfies $f(PX) = P f(X)$ for a permutation $P$ because nothing in it looks at
# positions. With a position vector $E_i$ added in slot $i$, permuting the tokens gives the input
# $PX + E$, while a plain permutation of the outputs would need $P(X + E) = PX + PE$. The positions
# stay while the tokens move, so $PE \ne E$; the code finds the outputs more than 0.1 away from the
# old ones reordered.
# :::

# %% tags=["hide-cell"]
# 4. Position vectors stop a permutation of the tokens from permuting the outputs
P = torch.tensor([[0.0, 0.5], [0.5, 0.0], [-0.5, -0.5]])  # (3, 2): one vector per position
with_pos = X + P  # (3, 2)
out_pos, _ = scaled_dot_product_attention(with_pos, with_pos, with_pos, scale=1.0)  # (3, 2)
moved = X[perm] + P  # (3, 2): the tokens permuted, the positions not
out_moved, _ = scaled_dot_product_attention(moved, moved, moved, scale=1.0)  # (3, 2)
gap = (out_moved - out_pos[perm]).abs().max().item()
print(f"largest difference from a plain permutation: {gap:.3f}")
assert gap > 0.1

# %% [markdown]
# :::{admonition} Solution to exercise 5
# :class: dropdown
# PyTorch keeps $W_x$ and $W_h$ as `weight_ih_l0` and `weight_hh_l0` (transposed: $x W^{\mathsf T}$)
# and two biases, `bias_ih_l0` and `bias_hh_l0`, that add up to $b$. Each step needs the previous
# one's $h$: that dependency, not the arithmetic, is the sequential chain whose depth `graph_depth`
# counts and which grows with $L$; attention does without it.
# :::

# %% tags=["hide-cell"]
# 5. An Elman RNN written out as a loop, against nn.RNN
tfx.set_seed(0)
rnn5 = nn.RNN(8, 16, batch_first=True)
x5 = torch.randn(2, 10, 8)  # (B, L, d_in)
h = torch.zeros(2, 16)  # (B, d_h)
steps5 = []
for t in range(x5.size(1)):  # one step per token, each waiting for the last
    h = torch.tanh(
        x5[:, t] @ rnn5.weight_ih_l0.T + rnn5.bias_ih_l0 + h @ rnn5.weight_hh_l0.T + rnn5.bias_hh_l0
    )  # (B, d_h)
    steps5.append(h)
ours5 = torch.stack(steps5, dim=1)  # (B, L, d_h)
torch.testing.assert_close(ours5, rnn5(x5)[0])
print("exercise 5: the written-out loop equals nn.RNN; output", tuple(ours5.shape))
