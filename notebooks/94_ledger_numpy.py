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
# # 94 · Ledger: the numpy encoder
#
# [Chapter 09](09_numpy_from_scratch.ipynb) builds the encoder layer in numpy, forward and backward,
# and settles there the second source article's claims that teach something about it: the
# embedding as a row lookup ({ref}`N11 <claim-n11>`), label smoothing ({ref}`N7 <claim-n7>`,
# {ref}`N21 <claim-n21>`) and the warm-up schedule ({ref}`N6 <claim-n6>`). This appendix holds the
# article's other claims on that material: two long digressions whose ideas other chapters teach
# (LayerNorm's $\varepsilon$, chapter 05; the scale of the initial weights, chapter 06), what
# happens when the article's own code is run (it does not train, its attention mixes heads instead
# of tokens, its data is one sentence), and a speed comparison whose numbers depend on the machine.
# They are settled by the same rules as in the chapters: a label and a heading, the verdict and
# why, and a cell that computes the evidence and ends in `assert`s. Nothing here downloads
# anything, and each cell runs in a few seconds.

# %%
import tfx  # first: importing tfx quiets torchao's import-time log lines (tfx/__init__.py)

# isort: split
import math

import numpy as np
import torch
import torch.nn.functional as F
from transformers import BertConfig
from transformers.models.bert.modeling_bert import BertSelfOutput

from tfx.book import plot_curves
from tfx.core import RUNNING_EXAMPLE, build_vocab, running_example_ids
from tfx.inspect import machine, threads, timeit
from tfx.model import sinusoidal_encoding
from tfx.numpy import numpy_ref as nr


def autograd(fn, *arrays, dy):
    """Run fn on float64 torch copies of the numpy arrays, backpropagate dy; return the output and the grads."""
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    out = fn(*ts)
    out.backward(torch.from_numpy(dy))
    return out.detach().numpy(), [t.grad.numpy() for t in ts]


vocab = build_vocab(RUNNING_EXAMPLE)  # the book's small vocabulary: 5 special tokens, 6 characters
tfx.banner()

# %% [markdown]
# ## From chapter 09: the encoder layer in numpy
#
# (claim-n4)=
# ### Claim N4: is LayerNorm $(x - \text{mean}) / (\text{std} + \varepsilon)$?
#
# **Holds: the source's form is BERT's LayerNorm within a factor $\sqrt2$ at every spread.** What it
# shares with every LayerNorm is a floor that $\varepsilon$ sets, below which a row is not brought to
# unit scale; that is a property of LayerNorm, not a fault of the source's form. The source
# normalises by $\text{std} + 10^{-6}$, PyTorch's default by $\sqrt{\text{var} + 10^{-5}}$, and BERT by
# $\sqrt{\text{var} + 10^{-12}}$. Either way the denominator never falls below a floor: $\varepsilon$ when it is
# added to the standard deviation, $\sqrt\varepsilon$ when it is added to the variance. A row whose spread is far
# above the floor is normalised to unit scale by all of them; a row whose spread is below it is left nearly
# flat. So what decides the behaviour on near-constant rows is the **size** of $\varepsilon$, not its place: the
# source's floor is $10^{-6}$, PyTorch's default $\sqrt{10^{-5}} \approx 3.2 \times 10^{-3}$, and BERT's
# $\sqrt{10^{-12}} = 10^{-6}$, the source's. Moving $\varepsilon$ inside or outside the root at a fixed floor
# changes the output by less than a factor $\sqrt2$ (at most where the spread equals the floor); changing the
# floor from $10^{-6}$ to $3.2 \times 10^{-3}$ changes it by orders of magnitude. BERT's own LayerNorm therefore
# blows a row of spread $10^{-4}$ (rounding noise, a nearly constant padding embedding) up to unit scale, exactly
# as the source's does, and its input gradient, which grows like $1 / \text{floor}$, is 30 times PyTorch's
# default there.
#
# We sweep the spread $s$ of one 16-feature row $1 + s z$ and measure, for each form, the output's scale
# $\max |y|$ and the input-gradient norm of $\sum_i w_i y_i$ for a fixed random $w$. The BERT column is
# `transformers`' own module (the `LayerNorm` of a `BertSelfOutput` built from a `BertConfig`, whose default
# `layer_norm_eps` is $10^{-12}$); a fourth form, $\text{std} + \sqrt{10^{-5}}$, puts PyTorch's floor in the
# source's place.

# %%
tfx.set_seed(0)
rng = np.random.default_rng(0)
z = rng.standard_normal(16)
z = (z - z.mean()) / z.std()  # exactly mean 0, std 1
w = rng.standard_normal(16)
bert_config = BertConfig(hidden_size=16, num_attention_heads=2, intermediate_size=64)
bert_ln = BertSelfOutput(
    bert_config
).LayerNorm.double()  # BERT's own LayerNorm module, eps from the config
FORMS = {
    "std + 1e-6 (source)": lambda r: (r - r.mean()) / (r.std(unbiased=False) + 1e-6),
    "sqrt(var + 1e-5) (torch)": lambda r: F.layer_norm(r, (16,), eps=1e-5),
    "sqrt(var + 1e-12) (BERT)": bert_ln,
    "std + sqrt(1e-5)": lambda r: (r - r.mean()) / (r.std(unbiased=False) + math.sqrt(1e-5)),
}
print(f"{len(FORMS)} forms; BERT's LayerNorm module has eps {bert_ln.eps:g}")

# %%
spreads = [10.0**e for e in range(-8, 1)]
out_scale = {name: [] for name in FORMS}  # max |y| of the normalised row
grad_norm = {name: [] for name in FORMS}  # |d(w·y)/dx|
for s in spreads:
    row = 1.0 + s * z
    for name, form in FORMS.items():
        y_form, (g,) = autograd(form, row, dy=w)
        out_scale[name].append(np.abs(y_form).max())
        grad_norm[name].append(np.linalg.norm(g))
source_matches_nr = np.allclose(
    autograd(FORMS["std + 1e-6 (source)"], 1.0 + 1e-4 * z, dy=w)[0],
    nr.layer_norm_std_eps(1.0 + 1e-4 * z, np.ones(16), np.zeros(16), eps=1e-6),
    rtol=1e-12,
)
print(f"{'':>10} {'max |y|':^35}  {'|grad|':^35}")
print(
    f"{'std':>10} {'source':>11} {'torch':>11} {'BERT':>11}  {'source':>11} {'torch':>11} {'BERT':>11}"
)
for i, s in enumerate(spreads):
    print(
        f"{s:>10.0e} "
        + " ".join(f"{out_scale[n][i]:>11.2e}" for n in list(FORMS)[:3])
        + "  "
        + " ".join(f"{grad_norm[n][i]:>11.2e}" for n in list(FORMS)[:3])
    )

# %%
# Figure 94.1: Largest absolute output of LayerNorm on one 16-feature row 1 + s z against the row's
#   std s from 1e-8 to 1, both axes log scale, for four forms: std + 1e-6 (the source),
#   sqrt(var + 1e-5) (torch's default), sqrt(var + 1e-12) (BERT) and std + sqrt(1e-5). All four
#   give unit scale at a spread of 0.1 and above; below it they split into two pairs by the size of
#   their floor, not the place of eps: the source and BERT still blow a spread of 1e-5 up to unit
#   scale, while the two with torch's floor leave it nearly flat.
fig = plot_curves(
    spreads,
    out_scale,
    "std of the row",
    "max |y|",
    title="LayerNorm of a near-constant row: the size of eps sets the floor",
    logx=True,
    logy=True,
    marker="o",
)

# %%
at = spreads.index(1e-4)
same_floor = [
    out_scale[a][i] / out_scale[b][i]
    for a, b in [
        ("std + 1e-6 (source)", "sqrt(var + 1e-12) (BERT)"),
        ("std + sqrt(1e-5)", "sqrt(var + 1e-5) (torch)"),
    ]
    for i in range(len(spreads))
]
size_effect = max(
    b / t
    for b, t in zip(out_scale["sqrt(var + 1e-12) (BERT)"], out_scale["sqrt(var + 1e-5) (torch)"])
)
print(
    f"same floor, eps inside or outside the root: max |y| ratio between {min(same_floor):.2f} and {max(same_floor):.2f}"
)
print(f"same place, eps 1e-12 against 1e-5: max |y| up to {size_effect:.0f} times larger")
print(
    f"std 1e-4: BERT's LayerNorm gives max |y| {out_scale['sqrt(var + 1e-12) (BERT)'][at]:.2f} and |grad| {grad_norm['sqrt(var + 1e-12) (BERT)'][at]:.1e}; torch's default {out_scale['sqrt(var + 1e-5) (torch)'][at]:.3f} and {grad_norm['sqrt(var + 1e-5) (torch)'][at]:.1e}"
)

# %%
# CLAIM N4: holds: std + 1e-6 gives BERT's sqrt(var + 1e-12) within a factor of √2 at every spread and torch's LayerNorm at std 1; as in every LayerNorm, eps sets a floor, and its size (not its place) decides what rows of tiny spread become
assert bert_ln.eps == BertConfig().layer_norm_eps == 1e-12 and source_matches_nr
assert (
    max(abs(out_scale[n][-1] - out_scale["sqrt(var + 1e-5) (torch)"][-1]) for n in list(FORMS)[:3])
    < 2e-5
)  # std 1: they agree
assert (
    out_scale["sqrt(var + 1e-12) (BERT)"][at] > 1 and out_scale["std + 1e-6 (source)"][at] > 1
)  # spread 1e-4 blown up to unit scale
assert out_scale["sqrt(var + 1e-5) (torch)"][at] < 0.1
assert grad_norm["sqrt(var + 1e-12) (BERT)"][at] > 25 * grad_norm["sqrt(var + 1e-5) (torch)"][at]
assert (
    1 / math.sqrt(2) - 1e-9 < min(same_floor) and max(same_floor) < 1 + 1e-9
)  # the place: a factor below √2
assert size_effect > 100  # the size: orders of magnitude

# %% [markdown]
# (claim-n1)=
# ### Claim N1: does 0.01-scale initialisation prevent exploding gradients?
#
# **Holds only for weight matrices, against unscaled ones, and by making everything vanish instead;
# for the embedding table it is said of there is no explosion to prevent.** The article says it of
# its embedding table, `randn(vocab, d) * 0.01`. An embedding is a row lookup: it multiplies
# nothing, so its scale cannot make a gradient grow from layer to layer; what it sets is the token's
# size next to the positional encoding, and at 0.01 the position outweighs the token about 70 to 1
# (claim {ref}`N13 <claim-n13>`, appendix 91). The same factor on the weight *matrices* (the article
# uses it for $W_Q$, $W_K$, $W_V$, $W_O$, $W_1$ and $W_2$ too) is where explosion is at stake. In a
# linear layer with $d$ inputs the output variance is about $d\,\sigma_W^2$ times the input variance,
# so with $d = 256$ each ReLU layer multiplies the activations' scale by about
# $\sigma_W\sqrt{256/2}$: about 11 for unscaled `randn` weights ($\sigma_W = 1$), which explodes, and
# about 0.11 for $\sigma_W = 0.01$, which stops the explosion by making activations and gradients
# vanish instead. Xavier initialisation ($\sigma_W^2 = 2 / (d_\text{in} + d_\text{out})$) keeps the
# factor near $1/\sqrt2$ with ReLU, and He initialisation ($\sigma_W^2 = 2 / d_\text{in}$) near 1. We
# run a 10-layer ReLU stack built from `nr.linear_forward` / `nr.relu_forward` and their backwards,
# and then look at one encoder layer, where LayerNorm hides the shrinking activations but the 0.01
# sub-layers barely contribute: the layer is nearly the identity (post-LN: nearly $\mathrm{LN}(x)$).

# %%
tfx.set_seed(0)
DEPTH, WIDTH = 10, 256
INITS = {
    "randn": lambda d: 1.0,
    "0.01": lambda d: 0.01,
    "Xavier": lambda d: math.sqrt(2 / (d + d)),
    "He": lambda d: math.sqrt(2 / d),
}
act_std, first_grad, factor = {}, {}, {}
for init, std in INITS.items():
    rng = np.random.default_rng(0)
    h = rng.standard_normal((64, WIDTH))
    weights = [rng.standard_normal((WIDTH, WIDTH)) * std(WIDTH) for _ in range(DEPTH)]
    caches, act_std[init] = [], []
    for W in weights:
        pre, c_lin = nr.linear_forward(h, W, np.zeros(WIDTH))
        h, c_relu = nr.relu_forward(pre)
        caches.append((c_lin, c_relu))
        act_std[init].append(h.std())
    grad = rng.standard_normal(h.shape)
    for c_lin, c_relu in reversed(caches):
        grad, dW, _ = nr.linear_backward(nr.relu_backward(grad, c_relu), c_lin)
    first_grad[init] = np.linalg.norm(dW)
    factor[init] = (act_std[init][-1] / act_std[init][0]) ** (
        1 / (DEPTH - 1)
    )  # geometric mean per layer
    print(
        f"{init:>6}: activation std after layer 1 {act_std[init][0]:.1e}, after layer {DEPTH} "
        f"{act_std[init][-1]:.1e} (×{factor[init]:.3f} per layer);  |dW| of layer 1 {first_grad[init]:.1e}"
    )

# %%
# Figure 94.2: Activation std (log scale) after each layer of a 10-layer ReLU stack of width 256,
#   for four weight initialisations: unscaled randn, 0.01 times randn, Xavier and He. Each is
#   close to a straight line: randn grows about 11-fold per layer, 0.01 shrinks about 9-fold per
#   layer, Xavier shrinks slowly (about 1/√2 per layer) and He stays flat.
fig = plot_curves(
    range(1, DEPTH + 1),
    act_std,
    "layer",
    "activation std",
    logy=True,
    marker="o",
    title=f"ReLU stack, width {WIDTH}: four initialisations",
)

# %%
rng = np.random.default_rng(0)
x = rng.standard_normal((2, 8, 64))
ratio = {}
for init, std in [("0.01", 0.01), ("Xavier", None)]:
    p = nr.init_layer_params(64, 256, np.random.default_rng(0), std=std)
    a, _ = nr.mha_forward(x, p, 4)
    f, _ = nr.ffn_forward(x, p)
    ratio[init] = (np.linalg.norm(a) / np.linalg.norm(x), np.linalg.norm(f) / np.linalg.norm(x))
    print(
        f"encoder layer, {init:>6} init: |MHA(x)|/|x| = {ratio[init][0]:.4f}, |FFN(x)|/|x| = {ratio[init][1]:.4f}"
    )

# %%
# CLAIM N1: holds only for weight matrices against unscaled randn (the embedding table it is said of multiplies nothing, so has no explosion to prevent): 0.01 stops their explosion (about x11 per layer) by making activations and gradients vanish (about x0.11 per layer); Xavier and He keep them
assert (
    act_std["0.01"][-1] < 1e-8
)  # about 0.11 per layer: after 10 layers less than 1e-8 of the input's scale
predicted = {
    "randn": math.sqrt(WIDTH / 2),
    "0.01": 0.01 * math.sqrt(WIDTH / 2),
    "Xavier": math.sqrt(0.5),
    "He": 1.0,
}
assert all(
    abs(factor[k] / predicted[k] - 1) < 0.1 for k in INITS
)  # the measured factors match the estimates
assert act_std["He"][-1] > 0.5 and act_std["Xavier"][-1] > 1e-2
assert act_std["randn"][-1] > 1e8  # unscaled: the explosion that 0.01 prevents
assert first_grad["randn"] > 1e5 * first_grad["He"] > 1e10 * first_grad["0.01"]
assert max(ratio["0.01"]) < 0.01 < 0.1 < min(ratio["Xavier"])

# %% [markdown]
# (claim-n5)=
# ### Claim N5: does the source's numpy model train as written?
#
# **Fails.** The article presents its numpy code as a model one can train. Two things about the text as we
# have it are not the author's doing and we set them aside: every code block lost its indentation, and each
# starts with the label of a copy button ("python复制"); both are artefacts of how the page was saved.
# Re-indented, the code still stops at its first causal mask; past that, at the first call of its
# LayerNorm; and fixed line by line, it still computes the wrong attention. The table lists every problem
# we found, with the fix the book uses (the fixed versions are the functions of `tfx.numpy.numpy_ref` and
# `tfx.numpy.optim_np` that [chapter 09](09_numpy_from_scratch.ipynb) builds and trains with):
#
# | # | what the source does | what happens | the fix |
# |---|---|---|---|
# | 1 | reshapes Q, K, V from $(L, d)$ to $(L, H, d_k)$ and multiplies the last two axes | scores of shape $(L, H, H)$: heads attend to heads of the same token, and tokens never see each other; its comment says `(3,8,3)`, the shape is $(3, 8, 8)$ ({ref}`claim N14 <claim-n14>` below), and its encoder layer class does the same ({ref}`claim N19 <claim-n19>`) | swap axes to $(H, L, d_k)$ first (`nr.split_heads`) |
# | 2 | subtracts `1e9 * mask` with an $(L, L)$ causal mask from those $(L, H, H)$ scores | `ValueError`: $(3, 3)$ does not broadcast against $(3, 8, 8)$ (with bug 1 fixed the scores are $(H, L, L)$ and it does) | a boolean mask that broadcasts to $(\dots, L, L)$, as `tfx.model.attention.causal_mask` (appendix 92 tests the $-10^9$ construction itself, {ref}`claim N3 <claim-n3>`) |
# | 3 | defines `layer_norm(x)` with one parameter, then calls it as `layer_norm(out, gamma, beta)` | `TypeError` on the first call | take γ and β as arguments (`nr.layer_norm_forward(x, gamma, beta, eps)`); γ and β created inside the function could never be trained anyway (claim N17, chapter 05) |
# | 4 | divides by `std + 1e-6` | differs from PyTorch's default LayerNorm on near-constant rows; BERT's $\varepsilon = 10^{-12}$ behaves like it ({ref}`claim N4 <claim-n4>`) | `1 / sqrt(var + eps)` with the model's own `eps` |
# | 5 | its §4 adds the FFN output to the input embeddings and calls that the residual connection | one residual spans attention and FFN, with no $W_O$ and no LayerNorm after attention (claim N16, settled in chapter 05) | one residual and one LayerNorm around each sub-layer (`nr.encoder_layer_forward`) |
# | 6 | uses `d_ff` inside the layer class without defining it there | works only because an earlier snippet left a global `d_ff` | pass `d_ff` in, or read it off `ff.fc1.weight` as `nr` does |
# | 7 | sets `self.d_k = d_v = …`, then reads `self.d_v` | `AttributeError`: `d_v` was a local (claim N18, chapter 11) | one `d_k`, stored on the object |
# | 8 | calls `softmax(...)` in its chunked attention | `NameError`: no `softmax` is defined ({ref}`claim N22 <claim-n22>`, appendix 97) | define it (`nr.softmax_forward`) |
# | 9 | trains with `tf.GradientTape`, `model.trainable_variables` and `cross_entropy_loss` | TensorFlow is never imported, numpy arrays have no gradient tape, the loss is undefined, and the model is called with an encoder and a decoder input it does not take | a backward pass written out (`nr.encoder_layer_backward`), a loss with its gradient (`optim_np.cross_entropy`) and an optimiser (`optim_np.Adam`) |
# | 10 | sums the smoothed loss over the batch | the loss and the gradient scale with the batch size ({ref}`claim N7 <claim-n7>`) | average, as PyTorch does |
# | 11 | initialises every weight as `0.01 * randn` | activations and gradients vanish with depth ({ref}`claim N1 <claim-n1>`) | Xavier or He scaling (`nr.init_layer_params`) |
# | 12 | trains on one German sentence whose decoder input is its encoder input | a copy task, not translation ({ref}`claim N25 <claim-n25>`) | real text with a held-out split (chapter 09's Shakespeare model) |
#
# The cell runs the article's attention as it is written up to its first crash (its sizes: 3 tokens,
# $d = 512$, 8 heads), then its layer class's first LayerNorm call, and checks that the same mask broadcasts
# once the heads are split the right way; its last assert runs the book's layer through the central-difference
# check of chapter 09 (`nr.gradient_check`), which trusts only the forward pass. That the book's version
# also matches autograd in twelve settings and trains on *Hamlet* is chapter 09's own evidence.

# %%
tfx.set_seed(0)
rng = np.random.default_rng(0)
L_SRC, D_SRC, H_SRC = 3, 512, 8
DK_SRC = D_SRC // H_SRC
x_src = rng.standard_normal((L_SRC, D_SRC))  # stands in for its three embedded tokens
W_Q_src, W_K_src = (rng.standard_normal((D_SRC, D_SRC)) * 0.01 for _ in range(2))
q_src, k_src = (
    (x_src @ W).reshape(-1, H_SRC, DK_SRC) for W in (W_Q_src, W_K_src)
)  # (3, 8, 64) each
scores_src = q_src @ k_src.transpose(0, 2, 1) / math.sqrt(DK_SRC)  # (3, 8, 8)
mask_src = np.triu(np.ones((L_SRC, L_SRC)), k=1)  # (3, 3): its causal mask, 1 = may not attend
q_fix, k_fix = (
    nr.split_heads((x_src @ W)[None], H_SRC)[0] for W in (W_Q_src, W_K_src)
)  # (8, 3, 64)
scores_fix = q_fix @ k_fix.swapaxes(-1, -2) / math.sqrt(DK_SRC)  # (8, 3, 3)
print(
    f"its scores {scores_src.shape}, its mask {mask_src.shape}; heads split first {scores_fix.shape}"
)


# %%
def one_argument_layer_norm(x):
    """The article's signature: γ and β are created inside, so they cannot be passed (or trained)."""
    return nr.layer_norm_std_eps(x, np.ones(x.shape[-1]), np.zeros(x.shape[-1]))


def outcome(run):
    try:
        run()
    except Exception as error:  # whatever the article's code raises
        return f"{type(error).__name__}: {error}"
    return "runs"


# %%
# CLAIM N5: fails: the source's numpy code stops at its causal mask and at its LayerNorm call; the book's version runs and its backward pass agrees with central differences
steps_src = {
    "its mask on its (3, 8, 8) scores": lambda: scores_src - 1e9 * mask_src,
    "its layer_norm(x, gamma, beta)": lambda: one_argument_layer_norm(
        x_src, np.ones(D_SRC), np.zeros(D_SRC)
    ),
    "its mask on (8, 3, 3) scores": lambda: scores_fix - 1e9 * mask_src,
}
outcomes = {name: outcome(run) for name, run in steps_src.items()}
for name, result in outcomes.items():
    print(f"{name:<34} {result}")
assert outcomes["its mask on its (3, 8, 8) scores"].startswith(
    "ValueError: operands could not be broadcast"
)
assert outcomes["its layer_norm(x, gamma, beta)"].startswith("TypeError")
assert outcomes["its mask on (8, 3, 3) scores"] == "runs"
fd_rows = nr.gradient_check()  # (name, layout, analytic, numeric): every array, both layouts
assert all(abs(n - a) <= 1e-6 * max(abs(a), 1e-8) for _, _, a, n in fd_rows)  # the book's backward

# %% [markdown]
# (claim-n14)=
# ### Claim N14: what shape the scores have (commented (3, 8, 3))
#
# **Fails: they have shape $(3, 8, 8)$, and they are the wrong scores.** The article embeds its three token
# ids in a $10000 \times 512$ table at $0.01$ scale, adds the sinusoidal positions, projects with $0.01$-scale
# $W_Q$ and $W_K$, reshapes each to $(L, H, d_k) = (3, 8, 64)$ and multiplies `Q @ K.transpose(0, 2, 1)`. That
# product pairs the last two axes of each token's block: for every token, an $8 \times 8$ table of head-against-
# head scores. Its comment `(3,8,3)` reads like the intended token-against-token scores with the heads in the
# middle; those have shape $(H, L, L) = (8, 3, 3)$, after the heads are moved in front of the tokens. The test
# that tells the two apart: change token 1 and see which scores move. In the article's scores only token 1's
# block moves; in real attention every query's scores against token 1 move.

# %%
tfx.set_seed(0)
rng = np.random.default_rng(0)
article_table = rng.standard_normal((10000, D_SRC)) * 0.01  # its embedding table
positions = sinusoidal_encoding(100, D_SRC, dtype=torch.float64).numpy()  # (100, 512): its PE table
W_Q_src, W_K_src = (rng.standard_normal((D_SRC, D_SRC)) * 0.01 for _ in range(2))


def article_scores(token_ids):
    x = article_table[token_ids] + positions[: len(token_ids)]  # (3, 512)
    q, k = ((x @ W).reshape(-1, H_SRC, DK_SRC) for W in (W_Q_src, W_K_src))  # (3, 8, 64)
    return q @ k.transpose(0, 2, 1) / math.sqrt(DK_SRC)  # (3, 8, 8)


def split_scores(token_ids):
    x = article_table[token_ids] + positions[: len(token_ids)]  # (3, 512)
    q, k = (nr.split_heads((x @ W)[None], H_SRC)[0] for W in (W_Q_src, W_K_src))  # (8, 3, 64)
    return q @ k.swapaxes(-1, -2) / math.sqrt(DK_SRC)  # (8, 3, 3)


# %%
# CLAIM N14: fails: the article's scores are (3, 8, 8), each token's heads scored against its own heads
ids_src, ids_changed = np.array([10, 23, 45]), np.array([10, 99, 45])  # token 1 replaced
moved_src = np.abs(article_scores(ids_changed) - article_scores(ids_src)).max(
    axis=(1, 2)
)  # per token
moved_fix = np.abs(split_scores(ids_changed) - split_scores(ids_src))  # (8, 3, 3)
print(
    "the article's scores:",
    article_scores(ids_src).shape,
    "| heads split first:",
    split_scores(ids_src).shape,
)
print(
    "token 1 replaced: largest change in each token's (8, 8) block:",
    " ".join(f"{m:.1e}" for m in moved_src),
)
print(
    "heads split first: every query's score against token 1 moves:",
    bool((moved_fix[:, :, 1] > 0).all()),
)
assert article_scores(ids_src).shape == (3, 8, 8) != (3, 8, 3)
assert moved_src[1] > 1e-4 and moved_src[0] == 0 and moved_src[2] == 0  # only token 1's own block
assert (moved_fix[:, :, 1] > 1e-6).all()

# %% [markdown]
# (claim-n19)=
# ### Claim N19: does the article's encoder layer attend across tokens?
#
# **Fails: each output row depends on its own token only.** The article's `TransformerEncoderLayer` repeats the
# reshape of claim N14 inside its `__call__`, and everything else in it (the projections, $W_O$, the FFN, the
# LayerNorms) acts on each token separately. So the "layer" is a per-token function: nothing moves between
# tokens. To run it at all we must repair the crashes of claim N5 (we pass γ and β to a LayerNorm that takes
# them, and give it `d_ff = 2048`), and nothing else; then we feed it the running example
# `[CLS] 我 喜 欢 吃 苹 果 [SEP]` at the article's sizes, replace token 0 (`[CLS]`) by `[MASK]`, and measure how
# much each output row moves. The same weights in the book's layer (`nr.encoder_layer_forward`, heads split
# before the scores) are the control.

# %%
tfx.set_seed(0)
rng = np.random.default_rng(0)
D_FF_SRC = 2048
src = {name: rng.standard_normal((D_SRC, D_SRC)) * 0.01 for name in ("W_Q", "W_K", "W_V", "W_O")}
src["W1"], src["W2"] = (
    rng.standard_normal((D_SRC, D_FF_SRC)) * 0.01,
    rng.standard_normal((D_FF_SRC, D_SRC)) * 0.01,
)
ones_src, zeros_src = np.ones(D_SRC), np.zeros(D_SRC)


def article_layer(x):
    """The article's __call__, step by step, with its (L, H, d_k) reshape and std + 1e-6 LayerNorm."""
    q, k, v = (
        (x @ src[n]).reshape(-1, H_SRC, DK_SRC) for n in ("W_Q", "W_K", "W_V")
    )  # (L, H, d_k)
    weights = nr.softmax_forward(q @ k.transpose(0, 2, 1) / math.sqrt(DK_SRC))[0]  # (L, H, H)
    out = (weights @ v).reshape(-1, D_SRC) @ src["W_O"]  # (L, d)
    out = nr.layer_norm_std_eps(out + x, ones_src, zeros_src)
    ffn = np.maximum(out @ src["W1"], 0) @ src["W2"]  # (L, d): its biases are zeros
    return nr.layer_norm_std_eps(ffn + out, ones_src, zeros_src)


# %%
book_params = {  # the same weights in torch's (out, in) layout, fused Q, K, V, zero biases
    "attn.qkv.weight": np.concatenate([src["W_Q"].T, src["W_K"].T, src["W_V"].T]),
    "attn.qkv.bias": np.zeros(3 * D_SRC),
    "attn.out.weight": src["W_O"].T,
    "attn.out.bias": np.zeros(D_SRC),
    "ff.fc1.weight": src["W1"].T,
    "ff.fc1.bias": np.zeros(D_FF_SRC),
    "ff.fc2.weight": src["W2"].T,
    "ff.fc2.bias": np.zeros(D_SRC),
    "norm1.weight": ones_src,
    "norm1.bias": zeros_src,
    "norm2.weight": ones_src,
    "norm2.bias": zeros_src,
}
rng = np.random.default_rng(1)  # this cell's one draw: the embedding table
example_table = (
    rng.standard_normal((len(vocab), D_SRC)) * 0.01
)  # the article's 0.01-scale embedding
example_ids = running_example_ids(vocab).numpy()[0]  # (8,)
masked_ids = example_ids.copy()
masked_ids[0] = vocab["[MASK]"]  # token 0, [CLS], replaced
print("ids:", example_ids, "| token 0 replaced:", masked_ids)

# %%
# CLAIM N19: fails: in the article's encoder layer changing token 0 changes output row 0 and no other row
moved = {}
for name, layer_fn in [
    ("article's layer", article_layer),
    (
        "book's layer",
        lambda x: nr.encoder_layer_forward(x[None], book_params, H_SRC, activation="relu")[0][0],
    ),
]:
    outputs = [
        layer_fn(example_table[i] + positions[: len(i)]) for i in (example_ids, masked_ids)
    ]  # (8, 512)
    moved[name] = np.abs(outputs[1] - outputs[0]).max(axis=1)  # (8,): change of each output row
    print(f"{name:<16} change of each output row:", " ".join(f"{m:.0e}" for m in moved[name]))
assert moved["article's layer"][0] > 1e-2 and not moved["article's layer"][1:].any()  # row 0 only
assert (moved["book's layer"][1:] > 1e-9).all()  # real attention: every row feels token 0

# %% [markdown]
# (claim-n25)=
# ### Claim N25: is the data a small IWSLT German–English set?
#
# **Fails.** The article's `load_data` lists two German sentences, encodes only the first ("Ich liebe NLP"),
# and returns that one sentence three times: as the encoder input, as the decoder input, and, shifted by one
# position, as the target. Its vocabulary has no English word at all, so there is nothing to translate into:
# the task is to copy the input, and a decoder that can see its input only needs to copy each next token. We
# check the arrays it returns.

# %%
# CLAIM N25: fails: one German sentence, and the encoder input equals the decoder input: a copy task
article_vocab = ["<pad>", "<s>", "</s>", "ich", "liebe", "nlp", "transformers", "sind", "toll"]
encoder_input = np.array([[1, 3, 4, 5, 2]])  # the three arrays its load_data returns
decoder_input = np.array([[1, 3, 4, 5, 2]])
target = np.array([[3, 4, 5, 2, 0]])
print(
    "sentences:", encoder_input.shape[0], "|", " ".join(article_vocab[i] for i in encoder_input[0])
)
print("encoder input == decoder input:", np.array_equal(encoder_input, decoder_input))
print(
    "target == decoder input shifted left by one, padded:",
    np.array_equal(target[:, :-1], decoder_input[:, 1:])
    and target[0, -1] == article_vocab.index("<pad>"),
)
unused = [article_vocab[i] for i in range(len(article_vocab)) if i not in encoder_input]
print("vocabulary entries never used:", " ".join(unused))
assert encoder_input.shape[0] == 1  # one sentence, not a data set
assert np.array_equal(encoder_input, decoder_input)  # source = target side: nothing to translate
assert np.array_equal(
    target[:, :-1], decoder_input[:, 1:]
)  # the next-token targets are the input itself
assert set(unused) == {
    "<pad>",
    "transformers",
    "sind",
    "toll",
}  # the second sentence is never encoded

# %% [markdown]
# (claim-n30)=
# ### Claim N30: the numpy version is slower than industrial code
#
# **Holds.** The article ends by granting that its numpy Transformer falls short of an industrial
# one; we read "performance" as speed (model quality is a different question). At one layer of its own size ($d = 512$, 8 heads, $d_\text{ff} = 2048$, ReLU; a batch of 4
# sequences of 64 tokens) we time the forward pass of the book's `nr.encoder_layer_forward` (the same
# operations as the article's, with the head split fixed) in float64, the dtype the article's `randn` arrays
# have, and in float32, against PyTorch's `nn.TransformerEncoderLayer` in float32 (in eval mode and without
# gradients it takes PyTorch's fused inference path), all on one thread. Most of the arithmetic is in matrix
# products, which numpy hands to its BLAS library as PyTorch hands them to its own; a float64 product moves
# twice the bytes of a float32 one and fits half as many numbers into each vector instruction, so on
# one thread the dtype, not numpy, makes most of the gap. Industrial code also has what this comparison leaves out:
# every core, fused kernels, a GPU; each widens the gap further. The first cells measure (their times change from run to run); the claim cell asserts
# only margins wide enough not to flip with noise.

# %%
tfx.set_seed(0)
B_T, L_T = 4, 64
torch_layer = torch.nn.TransformerEncoderLayer(
    D_SRC, H_SRC, 2048, dropout=0.0, activation="relu", batch_first=True
).eval()
to_book = {  # nn.TransformerEncoderLayer's parameter names → nr's (the layouts already agree)
    "self_attn.in_proj_weight": "attn.qkv.weight",
    "self_attn.in_proj_bias": "attn.qkv.bias",
    "self_attn.out_proj.weight": "attn.out.weight",
    "self_attn.out_proj.bias": "attn.out.bias",
    "linear1.weight": "ff.fc1.weight",
    "linear1.bias": "ff.fc1.bias",
    "linear2.weight": "ff.fc2.weight",
    "linear2.bias": "ff.fc2.bias",
    "norm1.weight": "norm1.weight",
    "norm1.bias": "norm1.bias",
    "norm2.weight": "norm2.weight",
    "norm2.bias": "norm2.bias",
}
params64 = {to_book[k]: v.double().numpy() for k, v in torch_layer.state_dict().items()}
params32 = {k: v.astype(np.float32) for k, v in params64.items()}
x_t = torch.randn(B_T, L_T, D_SRC)  # (4, 64, 512)
x64, x32 = x_t.double().numpy(), x_t.numpy()
print(f"x {tuple(x_t.shape)}; {len(params64)} parameter arrays in float64 and in float32")

# %%
with torch.no_grad():
    y_torch = torch_layer(x_t).numpy()
same_output = {  # the three compute the same layer (up to float32 rounding)
    dtype: float(
        np.abs(nr.encoder_layer_forward(xx, pp, H_SRC, activation="relu")[0] - y_torch).max()
    )
    for dtype, xx, pp in [("float64", x64, params64), ("float32", x32, params32)]
}
print("largest difference from torch's output:", {k: f"{v:.0e}" for k, v in same_output.items()})

# %%
# NBVAL_IGNORE_OUTPUT
with threads(1), torch.no_grad():
    timings = {
        "nn.TransformerEncoderLayer, float32": timeit(
            torch_layer, x_t, repeats=5, label="torch float32"
        ),
        "numpy, float32": timeit(
            nr.encoder_layer_forward,
            x32,
            params32,
            H_SRC,
            activation="relu",
            repeats=5,
            label="numpy float32",
        ),
        "numpy, float64": timeit(
            nr.encoder_layer_forward,
            x64,
            params64,
            H_SRC,
            activation="relu",
            repeats=5,
            label="numpy float64",
        ),
    }

# %%
# NBVAL_IGNORE_OUTPUT
reference_time = timings["nn.TransformerEncoderLayer, float32"].best
speed = {
    name: t.best / reference_time for name, t in timings.items()
}  # best of 5: the least disturbed run
print(machine(), "| 1 thread")
for name, t in timings.items():
    print(f"{t}  ->  {speed[name]:.2f} × torch's time")

# %%
# CLAIM N30: holds: in the article's float64 numpy takes well over torch's time on one thread; most of that gap is the dtype (numpy float32 stays within a small factor)
print(
    "all three compute the same layer (max |difference| < 1e-5):", max(same_output.values()) < 1e-5
)
print(
    "numpy float64 takes more than 1.4 × numpy float32's time:",
    speed["numpy, float64"] > 1.4 * speed["numpy, float32"],
)
print("numpy float64 takes more than 1.4 × torch's time:", speed["numpy, float64"] > 1.4)
print("numpy float32 takes less than 2.5 × torch's time:", speed["numpy, float32"] < 2.5)
assert max(same_output.values()) < 1e-5
assert speed["numpy, float64"] > 1.4 * speed["numpy, float32"]  # the dtype: about 2 × the work
assert speed["numpy, float64"] > 1.4
assert speed["numpy, float32"] < 2.5
