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
# # 09 · The encoder layer in numpy, backward pass included
#
# Every chapter so far leaned on autograd; this one takes it away. **Can we write the whole encoder
# layer, forward and backward, with numpy alone, and get the same numbers as PyTorch, to ten decimal
# places?** We derive and check each op's backward pass, assemble the layer, test it against
# `tfx.model.layers.EncoderLayer` and finite differences, and train a tiny character model on
# Shakespeare without autograd.
#
# The numpy article builds the same layer, but its code does not run. Its claims N11, N7, N21 and N6
# are settled here; the rest in the appendix
# [94 · Ledger: the numpy encoder](94_ledger_numpy.ipynb).

# %%
import tfx  # first: importing tfx quiets torchao's import-time log lines (tfx/__init__.py)

# isort: split
import math
import time

import numpy as np
import torch
import torch.nn.functional as F
from transformers import get_inverse_sqrt_schedule

from tfx.book import plot_curves, show_source
from tfx.core import RUNNING_EXAMPLE, build_vocab, padded_example, running_example_ids, show
from tfx.inspect import blas_threads, machine, threads
from tfx.learn import SHAKESPEARE, char_vocab, load_text
from tfx.model import EncoderLayer, causal_mask, scaled_dot_product_attention, sinusoidal_encoding
from tfx.numpy import numpy_ref as nr
from tfx.numpy import optim_np

tfx.banner()

# %%
# NBVAL_CHECK_OUTPUT
TOL = 1e-10  # float64 agreement we require between the hand-written backward and autograd


def autograd(fn, *arrays, dy):
    """Run fn on float64 torch copies of the numpy arrays, backpropagate dy; return the output and the grads."""
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    out = fn(*ts)
    out.backward(torch.from_numpy(dy))
    return out.detach().numpy(), [t.grad.numpy() for t in ts]


def max_err(ours, theirs):
    return max(float(np.abs(a - b).max()) for a, b in zip(ours, theirs))


vocab = build_vocab(
    RUNNING_EXAMPLE
)  # the book's small vocabulary: 5 special tokens, then 6 characters
print(vocab)


# %% [markdown]
# ## The rule every backward pass follows
#
# For the loss $\ell$ and any array $a$, write $\bar a = \partial \ell / \partial a$, an array **of
# the same shape as $a$**. An op $y = f(x)$ receives $\bar y$ and returns $\bar x$ (and $\bar\theta$
# for its parameters): $\bar x_i = \sum_j \bar y_j \, \partial y_j / \partial x_i$. The Jacobian is
# never built; each op has a cheap formula for this product, and the shapes catch mistakes. In
# `tfx.numpy.numpy_ref` each op is a pair, `op_forward(...) -> (out, cache)` and
# `op_backward(d_out, cache)`.
#
# ## Linear: $y = x W^{\mathsf T} + b$
#
# With $W$ stored as (out, in), as in `torch.nn.Linear`, and all positions stacked in $x$
# $(N, d_\text{in})$:
#
# $$\bar x = \bar y\, W \quad (N, d_\text{in}), \qquad \bar W = \bar y^{\mathsf T} x \quad (d_\text{out}, d_\text{in}),
# \qquad \bar b = \textstyle\sum_n \bar y_n \quad (d_\text{out}).$$
#
# $\bar W$ and $\bar b$ sum over positions because every position shares the weights;
# $\bar y^{\mathsf T} x$ is the only product of the two with $W$'s shape.

# %%
show_source(nr.linear_forward, nr.linear_backward)

# %%
# NBVAL_CHECK_OUTPUT
tfx.set_seed(0)
rng = np.random.default_rng(0)
x, W, b = rng.standard_normal((2, 3, 4)), rng.standard_normal((5, 4)), rng.standard_normal(5)
y, cache = nr.linear_forward(x, W, b)
dy = rng.standard_normal(y.shape)
dx, dW, db = nr.linear_backward(dy, cache)
show(x=x, W=W, y=y, dx=dx, dW=dW, db=db)
ref_y, ref_grads = autograd(F.linear, x, W, b, dy=dy)
err = max_err([y, dx, dW, db], [ref_y, *ref_grads])
print(f"linear: max |ours - autograd| < {TOL}: {err < TOL}")
assert err < TOL

# %% [markdown]
# ## Softmax
#
# For one row, $p_i = e^{s_i} / \sum_j e^{s_j}$ and
# $\partial p_i / \partial s_j = p_i(\delta_{ij} - p_j)$, so the Jacobian is
# $\operatorname{diag}(p) - p p^{\mathsf T}$; its product with $\bar p$ is
#
# $$\bar s = p \odot \bigl(\bar p - \langle \bar p, p \rangle\bigr),$$
#
# one elementwise product and one dot product per row. The forward subtracts the row maximum before
# `exp`: softmax ignores it, and `exp` then never overflows.

# %%
show_source(nr.softmax_forward, nr.softmax_backward)

# %%
# NBVAL_CHECK_OUTPUT
tfx.set_seed(0)
rng = np.random.default_rng(0)
s = rng.standard_normal((2, 3, 6)) * 3
dp = rng.standard_normal(s.shape)
p, cache = nr.softmax_forward(s)
ds = nr.softmax_backward(dp, cache)
ref_p, (ref_ds,) = autograd(lambda t: t.softmax(-1), s, dy=dp)
row = p[0, 0]
jacobian = np.diag(row) - np.outer(
    row, row
)  # (6, 6): only to show the formula, never built in the layer
print(f"softmax vs autograd < {TOL}: {max_err([p, ds], [ref_p, ref_ds]) < TOL}")
print(
    f"p * (dp - <dp, p>) equals the Jacobian product: {np.allclose(jacobian @ dp[0, 0], ds[0, 0], atol=TOL)}"
)
assert max_err([p, ds], [ref_p, ref_ds]) < TOL and np.allclose(
    jacobian @ dp[0, 0], ds[0, 0], atol=TOL
)

# %% [markdown]
# ## Scaled dot-product attention, with a mask
#
# Per batch element and head, with $Q, K, V$ of shape $(L, d_k)$ and a boolean mask $M$ (True = may
# attend, as in `tfx.model.attention`):
#
# | forward | shape | backward | shape |
# |---|---|---|---|
# | $S = Q K^{\mathsf T} / \sqrt{d_k}$, masked entries set to the most negative float | $(L, L)$ | $\bar Q = \bar S K / \sqrt{d_k}$, $\bar K = \bar S^{\mathsf T} Q / \sqrt{d_k}$ | $(L, d_k)$ |
# | $P = \operatorname{softmax}(S)$ by rows | $(L, L)$ | $\bar S = \operatorname{softmax}'(\bar P) \odot M$ | $(L, L)$ |
# | $A = P \odot M$ | $(L, L)$ | $\bar P = \bar A \odot M$ | $(L, L)$ |
# | $O = A V$ | $(L, d_k)$ | $\bar A = \bar O V^{\mathsf T}$, $\bar V = A^{\mathsf T} \bar O$ | |
#
# A masked score is a constant, so its gradient is zero (the $\odot M$ on $\bar S$). $P \odot M$
# changes nothing on a row with an allowed key, but turns a row with **none**, otherwise uniform,
# into zeros: a fully padded sequence gives zeros and zero gradients, never NaN. Below, sequence 1
# has two padding tokens and sequence 2 is all padding.

# %%
show_source(nr.attention_forward, nr.attention_backward)

# %%
# NBVAL_CHECK_OUTPUT
tfx.set_seed(0)
rng = np.random.default_rng(0)
B, H, L, d_k = 3, 2, 5, 4
q, k, v = (rng.standard_normal((B, H, L, d_k)) for _ in range(3))
mask = np.ones(
    (B, 1, 1, L), dtype=bool
)  # (B, 1, 1, L): a key mask, broadcast over heads and queries
mask[1, ..., 3:] = False
mask[2] = False
out, cache = nr.attention_forward(q, k, v, mask)
dout = rng.standard_normal(out.shape)
dq, dk, dv = nr.attention_backward(dout, cache)
ref_out, ref_grads = autograd(
    lambda *t: scaled_dot_product_attention(*t, mask=torch.from_numpy(mask))[0], q, k, v, dy=dout
)
show(q=q, mask=mask, out=out, dq=dq)
print(f"attention vs autograd < {TOL}: {max_err([out, dq, dk, dv], [ref_out, *ref_grads]) < TOL}")
print(
    "all-padding sequence: output all zero:",
    not out[2].any(),
    "| gradients all zero:",
    not dq[2].any(),
)
print("any NaN:", any(np.isnan(a).any() for a in (out, dq, dk, dv)))
assert max_err([out, dq, dk, dv], [ref_out, *ref_grads]) < TOL
assert not out[2].any() and not dq[2].any() and not dk[2].any() and not dv[2].any()

# %% [markdown]
# ## Splitting and merging heads
#
# `split_heads` reshapes $(B, L, d)$ to $(B, L, H, d_k)$ and swaps the $L$ and $H$ axes: head $h$
# owns features $h d_k \dots (h+1) d_k - 1$ of every token. Entries only move, and a permutation's
# gradient is its inverse: **split and merge are each other's backward**. Without the swap the
# scores pair heads with heads instead of tokens with tokens, as in the source article
# ({ref}`claim N14 <claim-n14>`, {ref}`claim N19 <claim-n19>`).

# %%
# NBVAL_CHECK_OUTPUT
t = np.arange(2 * 3 * 8, dtype=float).reshape(2, 3, 8)  # (B=2, L=3, d=8)
heads = nr.split_heads(t, 4)  # (2, 4, 3, 2)
show(t=t, heads=heads)
print("head 1 of token 2 in sequence 0:", heads[0, 1, 2], "= features 2..3:", t[0, 2, 2:4])
tfx.set_seed(0)
rng = np.random.default_rng(0)
dheads = rng.standard_normal(heads.shape)
_, (ref_dt,) = autograd(lambda a: a.view(2, 3, 4, 2).transpose(1, 2), t, dy=dheads)
print(
    "merge(split(t)) == t:",
    np.array_equal(nr.merge_heads(heads), t),
    "| merge is split's backward:",
    np.array_equal(nr.merge_heads(dheads), ref_dt),
)
assert np.array_equal(nr.merge_heads(heads), t) and np.array_equal(nr.merge_heads(dheads), ref_dt)

# %% [markdown]
# ## LayerNorm
#
# Per token, with mean $\mu$ and biased variance $\sigma^2$ over the features,
# $r = 1/\sqrt{\sigma^2 + \varepsilon}$, $\hat x = (x - \mu)\, r$ and
# $y = \gamma \odot \hat x + \beta$:
#
# $$\bar\gamma = \textstyle\sum_n \bar y_n \odot \hat x_n, \qquad \bar\beta = \sum_n \bar y_n, \qquad
# \bar x = r\,\bigl(g - \operatorname{mean}(g) - \hat x \operatorname{mean}(g \odot \hat x)\bigr),
# \quad g = \bar y \odot \gamma.$$
#
# $x$ reaches $\hat x$ through $x - \mu$, which removes the gradient's mean, and through $r$, which
# removes its component along $\hat x$. So $\bar x$ is exactly orthogonal to the all-ones vector
# (shifting a token changes nothing) and, up to a relative term of size
# $\varepsilon / (\sigma^2 + \varepsilon)$, to $\hat x$ (rescaling a token changes nothing either,
# but for the $\varepsilon$).

# %%
show_source(nr.layer_norm_forward, nr.layer_norm_backward)

# %%
# NBVAL_CHECK_OUTPUT
tfx.set_seed(0)
rng = np.random.default_rng(0)
x = rng.standard_normal((2, 3, 8)) * 2 + 1
gamma, beta = rng.standard_normal(8), rng.standard_normal(8)
y, cache = nr.layer_norm_forward(x, gamma, beta)
dy = rng.standard_normal(y.shape)
dx, dgamma, dbeta = nr.layer_norm_backward(dy, cache)
ref_y, ref_grads = autograd(
    lambda a, g, c: F.layer_norm(a, (8,), g, c, 1e-5), x, gamma, beta, dy=dy
)
show(x=x, y=y, dx=dx, dgamma=dgamma)
print(
    f"LayerNorm vs autograd < {TOL}: {max_err([y, dx, dgamma, dbeta], [ref_y, *ref_grads]) < TOL}"
)
xhat = cache[0]
cosine = np.abs((dx * xhat).sum(-1)) / (np.linalg.norm(dx, axis=-1) * np.linalg.norm(xhat, axis=-1))
print(
    "dx orthogonal to 1:",
    np.allclose(dx.sum(-1), 0, atol=TOL),
    "| |cos(dx, x-hat)| below 1e-4 (it is 0 when eps = 0):",
    cosine.max() < 1e-4,
)
assert max_err([y, dx, dgamma, dbeta], [ref_y, *ref_grads]) < TOL
assert np.allclose(dx.sum(-1), 0, atol=TOL) and cosine.max() < 1e-4

# %% [markdown]
# ## The activation: exact GELU and ReLU
#
# BERT's GELU is $x\,\Phi(x)$, with $\Phi(x) = \tfrac12(1 + \operatorname{erf}(x / \sqrt2))$ the
# standard normal CDF, and its derivative is $\Phi(x) + x\,\varphi(x)$. numpy has no `erf`, and the
# classic polynomial (Abramowitz and Stegun 7.1.26) errs by order $10^{-7}$, so
# `tfx.numpy.numpy_ref.erf` applies Python's `math.erf` element by element: slow, but the arrays are
# small. ReLU's derivative is 1 where $x > 0$ and 0 elsewhere, at $x = 0$ too, as in PyTorch.

# %%
show_source(nr.gelu_forward, nr.gelu_backward)

# %%
# NBVAL_CHECK_OUTPUT
# magnitudes: the A&S polynomial's own error (at most 1.5e-7 by its construction), in float64
tfx.set_seed(0)
rng = np.random.default_rng(0)
z = np.concatenate([np.linspace(-6, 6, 49), [0.0]])
dz = rng.standard_normal(z.shape)
for name, torch_fn in [("gelu", F.gelu), ("relu", F.relu)]:
    fwd, bwd = nr.ACTIVATIONS[name]
    a, cache = fwd(z)
    ref_a, (ref_dz,) = autograd(torch_fn, z, dy=dz)
    err = max_err([a, bwd(dz, cache)], [ref_a, ref_dz])
    print(f"{name}: forward and backward vs autograd < 1e-15: {err < 1e-15}")
    assert err < 1e-15
erf_err = np.abs(nr.erf(z) - torch.erf(torch.from_numpy(z)).numpy()).max()
t_as = 1 / (1 + 0.3275911 * np.abs(z))  # Abramowitz & Stegun 7.1.26, for comparison only
poly = t_as * (
    0.254829592
    + t_as * (-0.284496736 + t_as * (1.421413741 + t_as * (-1.453152027 + t_as * 1.061405429)))
)
as_err = np.abs(
    np.sign(z) * (1 - poly * np.exp(-(z**2))) - torch.erf(torch.from_numpy(z)).numpy()
).max()
print(
    f"max |erf - torch.erf| on [-6, 6]: nr.erf {tfx.core.stable.below(erf_err, 1e-15)}, "
    f"A&S 7.1.26 polynomial {as_err:.1e}"
)
assert erf_err < 1e-15 and 1e-8 < as_err < 1e-6

# %% [markdown]
# ## The embedding: a row lookup, and its backward
#
# Row `id` of a table $E$ $(V, d)$ is the one-hot product
# $E[\text{ids}] = \operatorname{onehot}(\text{ids})\,E$, so the backward is the linear map's,
# $\bar E = \operatorname{onehot}^{\mathsf T} \bar y$: row $v$ of $\bar E$ sums $\bar y$ over
# **every** position of token $v$. Done without the one-hot matrix, by adding into the rows, it
# hides a numpy bug: with repeated ids, `dE[ids] += dy` keeps only one of the writes (fancy-index
# assignment does not accumulate); `np.add.at` accumulates.

# %%
show_source(nr.embedding_forward, nr.embedding_backward)

# %% [markdown]
# (claim-n11)=
# ### Claim N11: indexing rows of the embedding matrix is the embedding layer
#
# **Holds**, with care in the backward. The article's `table[ids]` in a $10000 \times 512$ table
# equals the one-hot product bit for bit, and its three-token sentence repeats no id. The book's
# padded batch (`tfx.core.example.padded_example()`) repeats seven tokens: there `dE[ids] += dy`
# gets exactly those rows wrong, and `np.add.at` matches PyTorch's `nn.Embedding`.

# %%
# NBVAL_CHECK_OUTPUT
tfx.set_seed(0)
rng = np.random.default_rng(0)
article_table = rng.standard_normal((10000, 512)) * 0.01  # the article's table: V 10000, d 512
article_ids = np.array([10, 23, 45])  # its "I love NLP"
article_one_hot = np.zeros((3, 10000))  # (3, V)
article_one_hot[np.arange(3), article_ids] = 1.0
ids = padded_example(vocab)[0].numpy()  # (2, 8)
E = rng.standard_normal((len(vocab), 4))  # (V, d)
one_hot = np.eye(len(vocab))[ids]  # (2, 8, V)
lookup, cache = nr.embedding_forward(ids, E)  # (2, 8, d)
dy = rng.standard_normal(lookup.shape)
show(ids=ids, one_hot=one_hot, lookup=lookup, dy=dy)

# %%
# CLAIM N11: holds: table[ids] equals one_hot(ids) @ table; the backward needs np.add.at for repeated ids
one_hot_grad = one_hot.reshape(-1, len(vocab)).T @ dy.reshape(-1, 4)  # (V, d): onehotᵀ dy
emb = torch.nn.Embedding.from_pretrained(torch.from_numpy(E), freeze=False)
emb(torch.from_numpy(ids)).backward(torch.from_numpy(dy))
naive = np.zeros_like(E)
naive[ids] += dy  # fancy-index +=: a repeated id keeps one of its writes
dE = nr.embedding_backward(dy, cache)  # np.add.at: every occurrence adds
id_to_token = {i: t for t, i in vocab.items()}
repeated = [id_to_token[i] for i in np.flatnonzero(np.bincount(ids.ravel()) > 1)]
naive_wrong = [
    id_to_token[i] for i in np.flatnonzero(np.abs(naive - one_hot_grad).max(axis=1) > 1e-12)
]
print("tokens that occur more than once:", " ".join(repeated))
print("rows that dE[ids] += dy gets wrong:", " ".join(naive_wrong))
assert np.array_equal(article_table[article_ids], article_one_hot @ article_table)
assert np.array_equal(lookup, one_hot @ E)
assert (
    naive_wrong == repeated and len(repeated) == 7
)  # the naive update fails exactly on the repeats
assert max_err([dE, dE], [emb.weight.grad.numpy(), one_hot_grad]) < 1e-15

# %% [markdown]
# ## The two sub-layers: where the pieces meet
#
# Each piece above is checked on its own; the slips that survive such checks sit where the pieces
# are glued together. `mha_forward` projects every token once with the fused weight, whose rows are
# $[W_Q; W_K; W_V]$ (as in `tfx.model.attention`), so `np.split` must cut $q$, $k$ and $v$ in that
# order; then heads are split, attended over and merged, and $W_O$ mixes them. `mha_backward` reads
# it bottom-up: $W_O$'s backward, `split_heads` as merge's backward, the attention backward,
# `merge_heads` as split's backward, and a concatenate, in the same $q, k, v$ order, as
# `np.split`'s backward, so a single linear backward gives the fused weight's and bias's gradients.
# `ffn_backward` is fc2's backward, then the activation's, then fc1's. The lines that test `bug`
# do nothing unless one is asked for: they inject the slips of the widget at the end of the
# finite-difference section.

# %%
show_source(nr.mha_forward, nr.mha_backward, nr.ffn_forward, nr.ffn_backward)

# %% [markdown]
# ## The residual, and the layer assembled
#
# A residual $h = x + f(x)$ sends $\bar h$ along the identity and through $f$'s backward, and the
# two add, $\bar x = \bar h + \bar x_f$: that is why gradients reach the bottom of a deep stack even
# where $f$'s Jacobian is small. The layer, for post-LN
# ($h = \mathrm{LN}_1(x + \mathrm{MHA}(x))$, $y = \mathrm{LN}_2(h + \mathrm{FFN}(h))$, BERT's order)
# and pre-LN ($h = x + \mathrm{MHA}(\mathrm{LN}_1(x))$, $y = h + \mathrm{FFN}(\mathrm{LN}_2(h))$),
# and its backward, the forward read bottom-up, with each residual's two branches added:

# %%
show_source(nr.encoder_layer_forward, nr.encoder_layer_backward)

# %% [markdown]
# `params` is keyed like the `state_dict()` of `tfx.model.layers.EncoderLayer`, so one dict
# comprehension copies a PyTorch layer's weights across. We compare the output, $\bar x$ and all
# twelve parameter gradients for both LayerNorm placements, both activations and three masks (none,
# causal, padding with one sequence all padding), in float64 with dropout off.

# %%
# NBVAL_CHECK_OUTPUT
D_MODEL, N_HEADS, D_FF, B, L = 16, 4, 32, 3, 6


def torch_layer(norm_first, activation):
    """tfx.model.layers.EncoderLayer in float64, dropout off, every parameter moved off its initial value."""
    tfx.set_seed(0)
    layer = (
        EncoderLayer(
            D_MODEL, N_HEADS, D_FF, dropout=0.0, norm_first=norm_first, activation=activation
        )
        .double()
        .eval()
    )
    with torch.no_grad():
        # move LayerNorm and biases off 1 and 0 so their gradients are tested
        for prm in layer.parameters():
            prm.add_(0.2 * torch.randn_like(prm))
    return layer


show(**torch_layer(norm_first=False, activation="gelu").state_dict())


# %%
def torch_vs_numpy(norm_first, activation, mask):
    """Largest |difference| over y, dx and every parameter gradient, between tfx.model.layers and tfx.numpy.numpy_ref."""
    layer = torch_layer(norm_first, activation)
    x = torch.randn(B, L, D_MODEL, dtype=torch.float64, requires_grad=True)
    y = layer(x, mask)
    dy = torch.randn_like(y)
    y.backward(dy)

    params = {name: value.numpy() for name, value in layer.state_dict().items()}
    y_np, cache = nr.encoder_layer_forward(
        x.detach().numpy(),
        params,
        N_HEADS,
        None if mask is None else mask.numpy(),
        norm_first,
        activation,
    )
    dx_np, grads = nr.encoder_layer_backward(dy.numpy(), cache)
    errors = {"y": y_np - y.detach().numpy(), "dx": dx_np - x.grad.numpy()}
    errors.update({name: grads[name] - prm.grad.numpy() for name, prm in layer.named_parameters()})
    return {name: float(np.abs(e).max()) for name, e in errors.items()}, grads


# %%
padding = torch.ones(B, 1, 1, L, dtype=torch.bool)  # (B, 1, 1, L)
padding[1, ..., 4:] = False
padding[2] = False
MASKS = {"none": None, "causal": causal_mask(L), "padding": padding}
results = {}
for norm_first in (False, True):
    for activation in ("gelu", "relu"):
        for mask_name, mask in MASKS.items():
            setting = ("pre-LN" if norm_first else "post-LN", activation, mask_name)
            results[setting], grads = torch_vs_numpy(norm_first, activation, mask)
            print(
                f"{' '.join(setting):<22} worst |ours - autograd| = {max(results[setting].values()):.1e}"
            )

# %%
# NBVAL_CHECK_OUTPUT
print(
    f"{len(results)} settings × {len(next(iter(results.values())))} compared arrays (y, dx, 12 gradients)"
)
print(f"every difference < {TOL}: {all(max(r.values()) < TOL for r in results.values())}")
show(**grads)
print(
    "their norms (pre-LN, ReLU, padding):",
    ", ".join(f"{name} {np.linalg.norm(g):.4f}" for name, g in grads.items()),
)
assert all(max(r.values()) < TOL for r in results.values())
assert set(grads) == set(nr.LAYER_KEYS) == set(EncoderLayer(8, 2, 16).state_dict())

# %% [markdown]
# ### The running example, forward and back
#
# `[CLS] 我 喜 欢 吃 苹 果 [SEP]` goes through a random embedding table over the book's 11-token
# vocabulary, sinusoidal positions and one post-LN layer, and a random $\bar y$ comes back through
# the layer and the embedding: only the rows of the eight tokens used get a gradient.

# %%
# NBVAL_CHECK_OUTPUT
tfx.set_seed(0)
rng = np.random.default_rng(0)
ids = running_example_ids(vocab).numpy()  # (1, 8)
table = rng.standard_normal((len(vocab), D_MODEL))  # (V, d)
tokens, c_emb = nr.embedding_forward(ids, table)  # (1, 8, d)
x = tokens + sinusoidal_encoding(ids.shape[1], D_MODEL, dtype=torch.float64).numpy()  # (1, 8, d)
params = nr.init_layer_params(D_MODEL, D_FF, rng)
y, cache = nr.encoder_layer_forward(x, params, N_HEADS)  # (1, 8, d)
dy = rng.standard_normal(y.shape)
dx, grads = nr.encoder_layer_backward(dy, cache)  # (1, 8, d) and one array per parameter
dtable = nr.embedding_backward(dx, c_emb)  # (V, d)
show(ids=ids, x=x, y=y, dx=dx, dtable=dtable)
print(f"{'parameter':<16} {'shape':<9} grad norm")
for name, g in grads.items():
    print(f"{name:<16} {str(g.shape):<9} {np.linalg.norm(g):.4f}")
rows = [t for t, i in vocab.items() if np.abs(dtable[i]).max() > 0]
print("table rows with a gradient:", " ".join(rows))
assert rows == [t for t in vocab if t in RUNNING_EXAMPLE] and len(rows) == 8
assert all(g.shape == params[name].shape for name, g in grads.items())

# %% [markdown]
# ## Finite differences: a check that does not trust autograd either
#
# Agreement with autograd could hide a mistake both share (a wrong mask convention, say). A central
# difference, $(\ell(\theta + h) - \ell(\theta - h)) / 2h$, needs only the forward pass. Its error,
# about $h^2$ (truncation) plus $\epsilon_\text{mach} / h$ (rounding), allows six to eight matching
# digits in float64 with $h = 10^{-6}$; float32's far larger $\epsilon_\text{mach}$ leaves far
# fewer.
#
# One coordinate at a time costs two forward passes per parameter, thousands even for this small
# layer (printed below). A random direction checks a whole tensor with two: for a unit vector $u$
# of $\theta$'s shape,
# $(\ell(\theta + h u) - \ell(\theta - h u)) / 2h \approx \langle \bar\theta, u \rangle$, a
# number every entry of $\bar\theta$ feeds into, so a wrong gradient passes only if its error
# happens to be orthogonal to $u$. `nr.gradient_check` does this for all twelve parameter tensors
# and the input $x$, in both LayerNorm placements, under a padding mask (sequence 1 ends in two
# pads, sequence 2 is all padding), with every parameter moved off its initial value:

# %%
show_source(nr.gradient_check, nr.layer_directional_checks, nr.directional_checks)

# %%
# NBVAL_CHECK_OUTPUT
tfx.set_seed(0)
rows = nr.gradient_check(h=1e-6)  # (name, layout, <grad, u>, central difference): 13 × 2
fd_rel = nr.relative_errors(rows)
print(f"{'layout':<8} {'tensor':<16} {'<grad, u>':>10}  relative error of the difference")
for name, layout, analytic, _ in rows:
    below = tfx.core.stable.below(fd_rel[name, layout], nr.FD_TOL)
    print(f"{layout:<8} {name:<16} {analytic:+10.4f}  {below}")
n_params = sum(v.size for v in nr.init_layer_params(16, 32, np.random.default_rng(0)).values())
print(
    f"forward passes: {2 * len(rows)} by direction, {2 * 2 * n_params:,} coordinate by coordinate "
    f"({n_params:,} parameters, 2 layouts)"
)
print(
    f"{len({name for name, *_ in rows})} arrays (12 parameters and x) × "
    f"{len({layout for _, layout, *_ in rows})} layouts, each below {nr.FD_TOL:.0e}: "
    f"{max(fd_rel.values()) < nr.FD_TOL}"
)
assert {name for name, *_ in rows} == set(nr.LAYER_KEYS) | {"x"}
assert {layout for _, layout, *_ in rows} == {"post-LN", "pre-LN"}
assert max(fd_rel.values()) < nr.FD_TOL

# %% [markdown]
# ### Break the backward
#
# The check earns its keep on a wrong backward. `nr.BACKWARD_BUGS` lists five slips that keep every
# shape right, so nothing crashes: the $q$ and $k$ thirds of the fused gradient swapped, $W_O$'s
# gradient returned transposed (it is square), the activation's derivative skipped, the FFN
# residual's identity branch dropped, and LayerNorm's $-\operatorname{mean}(g)$ term forgotten. The
# `bug=` argument of `encoder_layer_backward` injects one (the lines that test it are in the
# listings above). Read the flags against the order of the backward pass: a bug spoils the
# gradient it computes and, when that gradient is passed down, everything computed after it
# (everything below it in the layer), never what was computed before. So "W_O transposed", a
# wrong weight gradient that is passed to no one, flags `attn.out.weight` alone;
# "residual dropped" leaves the FFN and the second LayerNorm clean and flags everything below them;
# "LN mean term dropped" spares the FFN in pre-LN, where the second LayerNorm sits below the FFN
# inside its branch, but not in post-LN, where it sits above. Each ■ below is a tensor whose
# directional derivative misses by $10^{-6}$ relative or more.

# %%
# NBVAL_CHECK_OUTPUT
columns = "qkvW qkvb outW outb fc1W fc1b fc2W fc2b ln1γ ln1β ln2γ ln2β x".split()
short = dict(zip((*nr.LAYER_KEYS, "x"), columns))  # tensor -> its column head
print(f"{'bug, layout':<30}" + "".join(f"{v:>5}" for v in columns))
flags = {}
for bug in [None, *nr.BACKWARD_BUGS]:
    rel = nr.relative_errors(nr.gradient_check(bug=bug))
    for layout in nr.FD_LAYOUTS:
        flags[bug, layout] = {name for name in short if not rel[name, layout] < nr.FD_TOL}
        label = f"{bug or 'none'}, {layout}"
        print(
            f"{label:<30}" + "".join(f"{'■' if n in flags[bug, layout] else '·':>5}" for n in short)
        )
ffn = {"ff.fc1.weight", "ff.fc1.bias", "ff.fc2.weight", "ff.fc2.bias"}
norm2 = {"norm2.weight", "norm2.bias"}
assert not flags[None, "post-LN"] and not flags[None, "pre-LN"]  # the real backward: no flag
assert all(flags[bug, layout] for bug in nr.BACKWARD_BUGS for layout in nr.FD_LAYOUTS)
for layout in nr.FD_LAYOUTS:
    assert flags["W_O transposed", layout] == {"attn.out.weight"}
    assert flags["residual dropped", layout] == set(short) - ffn - norm2  # all below the FFN
assert ffn <= flags["LN mean term dropped", "post-LN"]
assert not flags["LN mean term dropped", "pre-LN"] & ffn

# %% [markdown]
# Try it: pick a bug, move the step $h$ and switch to float32 (the kernel reruns
# `nr.gradient_check_report`). Large $h$ loses to truncation and tiny $h$ to rounding, so the clean
# backward gets flagged too; in float32 no $h$ gets close to six digits, and the check can no longer
# tell a bug from rounding at that tolerance.

# %%
from tfx.book import gradient_check_widget

gradient_check_widget()

# %% [markdown]
# ## Training in numpy
#
# Now the layer earns its keep: next-character prediction on Shakespeare's *Hamlet*.
# `tfx.numpy.numpy_ref.char_lm_forward` is a character embedding plus a learned position embedding,
# two post-LN encoder layers with a causal mask, and a linear head. Its backward runs the head's,
# the layers' from the top down, and the two embeddings': a token's row gathers its gradient with
# `np.add.at`, and a position's row is shared by every sequence of the batch, so its gradient is
# summed over the batch axis. Three hand-written pieces of `tfx.numpy.optim_np` are then checked
# against PyTorch: cross-entropy with label smoothing, the Noam warm-up schedule and Adam.

# %%
show_source(nr.char_lm_forward, nr.char_lm_backward)

# %% [markdown]
# This is the backward the run trains with, so it gets the same check: one random direction for
# each of the 28 arrays of a small two-layer character model (`nr.char_lm_gradient_check`, built on
# `nr.directional_checks` above), the embeddings and the head included.

# %%
# NBVAL_CHECK_OUTPUT
tfx.set_seed(0)
lm_rows = nr.char_lm_gradient_check(h=1e-6)  # (name, "char LM", <grad, u>, central difference)
lm_rel = nr.relative_errors(lm_rows)
lm_params = nr.init_char_lm(7, 6, 8, 2, 16, 2, np.random.default_rng(0))  # the same shapes
print(
    f"{len(lm_rows)} arrays (tok_emb, pos_emb, 2 × 12 layer tensors, head): worst relative error "
    f"{tfx.core.stable.below(max(lm_rel.values()), nr.FD_TOL)}"
)
assert [name for name, *_ in lm_rows] == list(lm_params)
assert max(lm_rel.values()) < nr.FD_TOL

# %%
# NBVAL_CHECK_OUTPUT
print(SHAKESPEARE.credit)
text = load_text("hamlet")
ids, chars = char_vocab(text)
split = int(0.9 * len(ids))
train_ids, val_ids = ids[:split], ids[split:]
print(
    f"{len(text):,} characters, {len(chars)} distinct; {len(train_ids):,} to train on, {len(val_ids):,} held out"
)
print(repr(text[text.index("To be, or not") :][:80]))

# %% [markdown]
# ### Cross-entropy with label smoothing
#
# With $y$ one-hot over $K$ classes, label smoothing trains against
# $y_\text{smooth} = (1 - \varepsilon)\,y + \varepsilon / K$, with loss
# $-\sum_k y_{\text{smooth},k} \log p_k$ averaged over the examples. `optim_np.cross_entropy` works
# from the logits (a log-softmax stays finite where $p$ underflows) and also returns the gradient
# $(\operatorname{softmax}(z) - y_\text{smooth}) / N$.
#
# Smoothing moves the optimum to $p = y_\text{smooth}$:
# $p_\text{true} = 1 - \varepsilon + \varepsilon/K$ and $\varepsilon/K$ elsewhere, a **finite**
# logit gap of $\log\bigl(p_\text{true} / (\varepsilon/K)\bigr)$. Without smoothing the loss keeps
# falling as the gap grows, and training pushes the logits apart for ever.

# %%
show_source(optim_np.log_softmax, optim_np.cross_entropy)

# %%
# NBVAL_CHECK_OUTPUT
tfx.set_seed(0)
logits = torch.randn(32, len(chars), dtype=torch.float64, requires_grad=True)
targets = torch.randint(0, len(chars), (32,))
torch_loss = {}
for eps in (0.0, 0.1, 0.3):
    ref = torch.nn.CrossEntropyLoss(label_smoothing=eps)(logits, targets)
    logits.grad = None
    ref.backward()
    torch_loss[eps] = ref.item()
    ours, dlogits = optim_np.cross_entropy(logits.detach().numpy(), targets.numpy(), eps)
    same = math.isclose(ours, ref.item(), rel_tol=1e-12)
    same = same and np.allclose(dlogits, logits.grad.numpy(), atol=1e-14)
    print(f"eps {eps}: loss and gradient equal torch's: {same}")
    assert same

# %% [markdown]
# (claim-n7)=
# ### Claim N7: label smoothing is $y_\text{smooth} = (1 - \varepsilon)\,y + \varepsilon / K$
#
# **Holds**: the article's formula, even with its $\log(p + 10^{-10})$, gives PyTorch's loss. Its
# function **sums** over the batch instead of averaging: that changes the scale, not the formula.

# %%
# CLAIM N7: holds: (1 - eps)·y + eps/K is the target torch's CrossEntropyLoss(label_smoothing=eps) uses
probs = logits.detach().softmax(-1).numpy()
for eps in (0.0, 0.1, 0.3):
    y_smooth = (1 - eps) * np.eye(len(chars))[targets.numpy()] + eps / len(chars)  # its formula
    source_sum = -np.sum(y_smooth * np.log(probs + 1e-10))  # its reduction: a sum over the batch
    print(f"eps {eps}: torch {torch_loss[eps]:.6f}, source / N {source_sum / 32:.6f}")
    assert math.isclose(source_sum / 32, torch_loss[eps], rel_tol=1e-6)  # same, up to the 1e-10
    assert source_sum > 30 * torch_loss[eps]  # but a sum: 32 times the mean

# %% [markdown]
# (claim-n21)=
# ### Claim N21: label smoothing prevents over-confidence
#
# **Holds**, in that the smoothed loss has a finite optimum. Under gradient descent on the article's
# own loss over free logits (its 9-token vocabulary), the logit gap settles at the predicted value
# with $\varepsilon = 0.1$ and is still growing after 2000 steps with $\varepsilon = 0$.

# %%
# CLAIM N21: holds: with smoothing the loss has a finite optimum, p_true = 1 - eps + eps/K and a finite logit gap; without it the gap grows for ever
K_SRC, TRUE = 9, 3  # the article's tokenizer has 9 entries; any class can be the true one
gap, p_true = {}, {}
for eps in (0.1, 0.0):
    y_smooth = (1 - eps) * np.eye(K_SRC)[TRUE] + eps / K_SRC  # (K,)
    z = np.zeros(K_SRC)  # free logits; the loss is the article's -Σ y_smooth · log(p + 1e-10)
    for step in range(1, 2001):
        p, cache = nr.softmax_forward(z)
        z -= nr.softmax_backward(-y_smooth / (p + 1e-10), cache)  # a step of plain gradient descent
        if step in (500, 1000, 2000):
            gap[eps, step] = z[TRUE] - np.delete(z, TRUE).max()
    p_true[eps] = nr.softmax_forward(z)[0][TRUE]
    gaps = " / ".join(f"{gap[eps, t]:.4f}" for t in (500, 1000, 2000))
    print(f"eps {eps}: logit gap after 500 / 1000 / 2000 steps {gaps}")
p_opt = 1 - 0.1 + 0.1 / K_SRC
gap_opt = math.log(p_opt / (0.1 / K_SRC))
print(f"predicted for eps 0.1: gap {gap_opt:.4f}")
assert abs(p_true[0.1] - p_opt) < 1e-6 and abs(gap[0.1, 2000] - gap_opt) < 1e-4
assert abs(gap[0.1, 2000] - gap[0.1, 1000]) < 1e-6  # converged: a finite optimum
assert gap[0.0, 2000] > gap[0.0, 1000] + 0.5 > gap[0.0, 500] + 1.0  # no smoothing: still growing
assert p_true[0.0] > 0.999 > p_opt

# %% [markdown]
# ### The warm-up schedule
#
# "Attention Is All You Need" sets $\text{lr}(t) = d^{-1/2} \min(t^{-1/2},\; t \cdot w^{-3/2})$ for
# $t \ge 1$. The terms meet at $t = w$: the rate rises linearly for $w$ steps, peaks at
# $d^{-1/2} w^{-1/2}$, then decays like $1/\sqrt t$. Figure 9.1 checks `optim_np.noam_lr`
# ($d = 512$, $w = 4000$) against Hugging Face's `get_inverse_sqrt_schedule`, a linear rise to the
# base rate over $w$ steps followed by a factor $\sqrt{w / t}$: with the peak as its base rate, the
# same curve.

# %%
show_source(optim_np.noam_lr)

# %%
# Figure 9.1: Learning rate against step for the Noam schedule at d = 512 with 4,000 warm-up steps,
#   over 20,000 steps: numpy's noam_lr and transformers' get_inverse_sqrt_schedule, one on top of
#   the other. It rises linearly to its peak, about 0.0007, exactly at the dashed warmup_steps =
#   4000, then decays like one over the square root of the step.
d_paper, warmup, n_steps = 512, 4000, 20000
steps = np.arange(1, n_steps + 1)
lr = optim_np.noam_lr(steps, d_paper, warmup)

param = torch.zeros(1, requires_grad=True)
sgd = torch.optim.SGD([param], lr=d_paper**-0.5 * warmup**-0.5)
sched = get_inverse_sqrt_schedule(sgd, num_warmup_steps=warmup, timescale=warmup)
hf_lr = []
for _ in range(n_steps + 1):  # steps 0..n_steps
    hf_lr.append(sgd.param_groups[0]["lr"])
    sgd.step()
    sched.step()
hf_lr = hf_lr[1:]  # drop step 0 (lr 0), which the Noam formula leaves undefined
plot_curves(
    steps,
    {"noam_lr (numpy)": lr, "get_inverse_sqrt_schedule (transformers)": hf_lr},
    "step",
    "learning rate",
    title=f"Noam schedule, d = {d_paper}",
    vlines={f"warmup_steps = {warmup}": warmup},
)
print(
    f"noam_lr equals get_inverse_sqrt_schedule at all {n_steps} steps:",
    np.allclose(lr, hf_lr, rtol=1e-12, atol=0),
)
assert np.allclose(lr, hf_lr, rtol=1e-12, atol=0)

# %% [markdown]
# (claim-n6)=
# ### Claim N6: the Noam schedule warms the learning rate up, then decays it
#
# **Holds, and the peak sits exactly at `warmup_steps`**, where the two terms of the minimum meet.

# %%
# CLAIM N6: holds: the Noam learning rate rises linearly and peaks exactly at warmup_steps
print(
    f"peak at step {steps[np.argmax(lr)]}, lr {lr.max():.3e} = d^-0.5 · w^-0.5 = {d_paper**-0.5 * warmup**-0.5:.3e}"
)
assert steps[np.argmax(lr)] == warmup
assert np.all(np.diff(lr[:warmup]) > 0) and np.all(np.diff(lr[warmup - 1 :]) < 0)

# %% [markdown]
# ### Adam, by hand
#
# Adam keeps running means of the gradient, $m_t = \beta_1 m_{t-1} + (1 - \beta_1) g_t$, and of its
# square, $v_t = \beta_2 v_{t-1} + (1 - \beta_2) g_t^2$; both start at zero, and dividing by
# $1 - \beta^t$ removes that bias. The step is
# $\theta \leftarrow \theta - \text{lr} \cdot \hat m_t / (\sqrt{\hat v_t} + \epsilon)$. Five steps
# against `torch.optim.Adam`:

# %%
show_source(optim_np.Adam)

# %%
# NBVAL_CHECK_OUTPUT
tfx.set_seed(0)
rng = np.random.default_rng(0)
w0 = rng.standard_normal((4, 3))
ours = {"w": w0.copy()}
adam = optim_np.Adam(ours, lr=0.01)
ref = torch.tensor(w0, requires_grad=True)
torch_adam = torch.optim.Adam([ref], lr=0.01)
for _ in range(5):
    g = rng.standard_normal(w0.shape)
    adam.step({"w": g})
    ref.grad = torch.from_numpy(g)
    torch_adam.step()
err = np.abs(ours["w"] - ref.detach().numpy()).max()
print(f"after 5 steps: max |ours - torch.optim.Adam| < 1e-14: {err < 1e-14}")
assert err < 1e-14

# %% [markdown]
# ### The training run
#
# The run uses label smoothing 0.1, the Noam schedule with 50 warm-up steps (times 2, for this short
# run) and Adam on the gradients from `char_lm_backward`. Every 25 steps the **held-out** loss,
# without smoothing, is compared with the untrained model's and with the entropy of the character
# frequencies, which a model that knows only which letters are common gets. The training loss cannot
# go below a smoothed target's own entropy (printed below).

# %%
D, HEADS, FF, LAYERS, CTX, BATCH, STEPS = 48, 4, 96, 2, 32, 16, 300


def batch_of(source, rng):
    """BATCH random windows of CTX characters and, for each position, the character that follows."""
    start = rng.integers(0, len(source) - CTX - 1, size=BATCH)
    x = np.stack([source[s : s + CTX] for s in start])  # (BATCH, CTX)
    return x, np.stack([source[s + 1 : s + CTX + 1] for s in start])  # targets: shifted by one


def held_out_loss(params):
    """Mean cross-entropy (no smoothing) over the same 20 held-out batches every time."""
    rng = np.random.default_rng(1)
    total = 0.0
    for _ in range(20):
        x, y = batch_of(val_ids, rng)
        logits, _ = nr.char_lm_forward(x, params, HEADS, LAYERS)
        total += optim_np.cross_entropy(logits.reshape(-1, len(chars)), y.ravel())[0]
    return total / 20


freq = np.bincount(train_ids, minlength=len(chars)) / len(train_ids)
unigram = float(-(freq[freq > 0] * np.log(freq[freq > 0])).sum())


# %% [markdown]
# Does the run give the same numbers every time? On one machine, with one BLAS library and a
# fixed thread count, yes, bit for bit: numpy adds in the same order every time. Across those it
# need not. Another CPU makes the BLAS pick other kernels (AVX2 or AVX-512), and a thread count
# that splits a matrix product differently adds in another order; either moves the last bits of a
# float64 result. The cell below computes one training step's gradients twice with one thread and
# once with two: the repeat is identical, and two threads differ, if at all, by float64 rounding.
# Training is chaotic, though: 300 steps can grow such last-bit differences into different losses
# and a different sample, so the cells after the run print their numbers unchecked and assert
# only margins that hold on any machine.


# %%
# NBVAL_CHECK_OUTPUT
def one_step_gradients(n_threads):
    """Every gradient of one training step (a fixed model and batch) with n BLAS threads, flat."""
    rng = np.random.default_rng(0)
    params = nr.init_char_lm(len(chars), CTX, D, HEADS, FF, LAYERS, rng)
    x, y = batch_of(train_ids, rng)
    with threads(n_threads):
        logits, cache = nr.char_lm_forward(x, params, HEADS, LAYERS)  # (BATCH, CTX, V)
        _, dlogits = optim_np.cross_entropy(logits.reshape(-1, len(chars)), y.ravel(), 0.1)
        grads = nr.char_lm_backward(dlogits.reshape(logits.shape), cache)
    return np.concatenate([g.ravel() for g in grads.values()])  # (number of parameters,)


tfx.set_seed(0)
one, one_again, two = one_step_gradients(1), one_step_gradients(1), one_step_gradients(2)
across = np.abs(two - one).max() / np.abs(one).max()
print(
    f"{one.size:,} gradient entries; one thread, twice: bitwise identical {np.array_equal(one, one_again)}"
)
print(
    "one thread against two: largest difference, relative to the largest entry, "
    + tfx.core.stable.below(across, 1e-12)
)
assert np.array_equal(one, one_again) and across < 1e-12

# %%
# NBVAL_IGNORE_OUTPUT
# (the last line prints how long training took; on one machine, BLAS and thread count everything
# above it is the same on every run, as the cell above shows for one step; on another CPU the
# losses can differ)
tfx.set_seed(0)
rng = np.random.default_rng(0)
model = nr.init_char_lm(len(chars), CTX, D, HEADS, FF, LAYERS, rng)
print(f"{sum(v.size for v in model.values()):,} parameters")
loss_before = held_out_loss(model)
adam = optim_np.Adam(model)
losses, checkpoints, held_out = [], [], []
with threads(1):  # tiny matrices: one BLAS thread beats two that contend
    n_blas = blas_threads()  # what the BLAS library reports, not what we asked for
    start = time.perf_counter()
    for step in range(1, STEPS + 1):
        x, y = batch_of(train_ids, rng)
        logits, cache = nr.char_lm_forward(x, model, HEADS, LAYERS)  # (BATCH, CTX, V)
        loss_value, dlogits = optim_np.cross_entropy(
            logits.reshape(-1, len(chars)), y.ravel(), label_smoothing=0.1
        )
        grads = nr.char_lm_backward(dlogits.reshape(logits.shape), cache)
        if step in (1, 100, 200, STEPS):
            norms = optim_np.grad_norms_by_part(grads)
            print(
                f"step {step:>3}: loss {loss_value:.3f}; gradient norm by part: "
                + ", ".join(f"{part} {n:.4f}" for part, n in norms.items())
            )
        adam.step(grads, lr=float(optim_np.noam_lr(step, D, warmup_steps=50, factor=2.0)))
        losses.append(loss_value)
        if step % 25 == 0:
            checkpoints.append(step)
            held_out.append(held_out_loss(model))
    elapsed = time.perf_counter() - start
loss_after = held_out[-1]
print(
    f"{STEPS} steps (and {len(checkpoints)} held-out evaluations) in {elapsed:.1f} s on {machine()}, "
    f"numpy BLAS threads: {n_blas}"
)

# %%
K = len(chars)
q_true = (
    1 - 0.1 + 0.1 / K
)  # the smoothed target: weight on the true character, and on each other one
smooth_floor = -(q_true * math.log(q_true) + (K - 1) * (0.1 / K) * math.log(0.1 / K))
print(
    f"held-out loss: untrained {loss_before:.3f}, trained {loss_after:.3f}; "
    f"character-frequency entropy {unigram:.3f}; log V = {math.log(K):.3f}"
)
print(
    f"entropy of a smoothed target (eps 0.1, {K} characters), the floor of the training loss: {smooth_floor:.3f}; "
    f"lowest training loss {min(losses):.3f}"
)

# %%
# Figure 9.2: Cross-entropy in nats against step for the numpy character-level transformer trained
#   on Hamlet for 300 steps: the training loss with label smoothing 0.1 (mean of each 25 steps), the
#   held-out loss without smoothing, measured every 25 steps, and the character-frequency entropy as
#   a flat line. The held-out loss falls well below that line, so the model uses the preceding
#   characters; the training loss stays higher, as smoothed targets have an entropy of their own.
plot_curves(
    checkpoints,
    {
        "training loss (label smoothing 0.1), mean of the last 25 steps": np.reshape(
            losses, (-1, 25)
        ).mean(axis=1),
        "held-out loss (no smoothing)": held_out,
        "character-frequency entropy": [unigram] * len(checkpoints),
    },
    "step",
    "cross-entropy (nats)",
    title="a numpy transformer learns Hamlet's characters",
)
assert loss_after < loss_before - 1.0  # the loss fell
assert (
    loss_after < unigram - 0.3
)  # and below what character frequencies alone give: it uses the context
assert min(losses) > smooth_floor

# %% [markdown]
# A continuation sampled from the model one character at a time (at temperature 0.8) shows what 300
# numpy steps buy: word-like chunks, spaces and line breaks in a plausible rhythm, no meaning.

# %%
tfx.set_seed(0)
rng = np.random.default_rng(0)
prompt = "HAMLET. To be"
index = {c: i for i, c in enumerate(chars)}
context = [index[c] for c in prompt]
for _ in range(120):
    logits, _ = nr.char_lm_forward(np.array([context[-CTX:]]), model, HEADS, LAYERS)  # (1, ≤CTX, V)
    probs, _ = nr.softmax_forward(logits[0, -1] / 0.8)  # (V,)
    context.append(int(rng.choice(len(chars), p=probs)))
print("".join(chars[i] for i in context))

# %% [markdown]
# ## The article's other claims on this chapter's material
#
# The appendix [94 · Ledger: the numpy encoder](94_ledger_numpy.ipynb) settles the rest: its
# LayerNorm with $\varepsilon$ added to the standard deviation ({ref}`N4 <claim-n4>`: holds only for
# rows whose spread is far above the floor $\varepsilon$ sets, and BERT's $10^{-12}$ sets the same
# floor), its 0.01-scale initialisation ({ref}`N1 <claim-n1>`: it stops unscaled weights exploding
# only by making activations and gradients vanish), its code ({ref}`N5 <claim-n5>`: fails at its
# causal mask and its LayerNorm call), its score shape and layer ({ref}`N14 <claim-n14>`,
# {ref}`N19 <claim-n19>`: both fail, tokens never mix), its data ({ref}`N25 <claim-n25>`: fails, one
# sentence to copy) and its speed ({ref}`N30 <claim-n30>`: holds, mostly because its arrays are
# float64).

# %% [markdown]
# ## Summary
#
# - Each op's backward is a short rule that its shapes check: linear, softmax (zero where masked),
#   head split and merge (each other's backward), LayerNorm (which removes the gradient's mean and
#   $\hat x$ component), the residual (which adds its paths) and the embedding (`np.add.at`).
# - Composed, they match PyTorch's output and all twelve parameter gradients to better than
#   $10^{-10}$ in float64, for both LayerNorm placements, both activations and three masks. Central
#   differences along a random direction agree for every tensor, in both placements under a padding
#   mask, and for every array of the character model; they flag each of five injected backward
#   bugs, in the tensors whose gradients the bug feeds.
# - Trained with a hand-written Adam, the Noam schedule and label smoothing, a two-layer numpy
#   transformer beats the character-frequency baseline on held-out *Hamlet*.
# - The article's claims settled here, N6, N7, N11 and N21, hold; its code does not run (appendix
#   94).
#
# ## What you can now do
#
# - Derive the backward rule of any op of the encoder layer and check it by its shapes.
# - Build a numpy encoder layer whose output and gradients match PyTorch's in float64, and check
#   every gradient with finite differences, two forward passes per tensor.
# - Locate a bug in a backward pass from the tensors a finite-difference check flags.
# - Train a small model without autograd, each piece checked against PyTorch.
#
# Next, chapter 10 asks what fine-tuning adds on a pre-trained body, what each freezing scheme
# trains, and what pre-training bought.
#
# ## Exercises
#
# Tiers: *warm-up* checks what the chapter showed, *core* applies it to a new case, *build it*
# has you write the code, *open* has no single answer.
#
# 1. *(core)* **Which biases learn?** Predict first: how close to zero will $b_K$'s gradient come in
#    float64, and in float32? For a layer with all-zero biases, compare the gradient norms of $b_Q$,
#    $b_K$, $b_V$ (the thirds of `attn.qkv.bias`) and $b_O$ (`attn.out.bias`) in float64 and
#    float32. Which get a gradient although they are zero? Why should $b_K$ get none in exact
#    arithmetic ([chapter 03](03_attention.ipynb) derives the softmax Jacobian), and how large is
#    its measured gradient, relative to $b_Q$'s and $b_V$'s?
# 2. *(build it)* **The gradient of the scale.** Add a learnable temperature $\tau$ to
#    `attention_forward` ($S = QK^{\mathsf T} / (\tau\sqrt{d_k})$), derive $\bar\tau$ from $\bar S$,
#    and check it with a finite difference.
# 3. *(core)* **Finite-difference step size.** Repeat the finite-difference check for
#    $h = 10^{-1}, 10^{-1.5}, \dots, 10^{-12}$. Where is the worst absolute error smallest, and
#    which two terms trade off, at what rates? Balancing $h^2 |\ell'''|$ against
#    $\epsilon_\text{mach} |\ell| / h$ predicts
#    $\epsilon_\text{mach}^{1/3} \approx 6 \times 10^{-6}$ for $\ell$ and $\ell'''$ of similar size:
#    does the measurement agree?
# 4. *(warm-up)* **No peeking.** Change the character at position 10 of a batch and show that
#    `char_lm_forward`'s logits change at positions 10 and after, and at none before. Which line
#    guarantees this?

# %% [markdown]
# :::{admonition} Solution to exercise 1
# :class: dropdown
# A bias's gradient sums, over positions, the gradient of what it is added to, whatever the bias's
# value: $b_Q$, $b_V$ and $b_O$ get the sums of $\bar Q$, $\bar V$ and the output projection's
# $\bar y$, which are not zero. Adding $b_K$ to every key shifts each row of scores by a constant,
# which softmax ignores: $\sum_j \bar K_j = \tfrac{1}{\sqrt{d_k}} \sum_i q_i \sum_j \bar S_{ij}$ per
# head, and each row of $\bar S = p \odot (\bar p - \langle \bar p, p \rangle)$ sums to
# $\langle p, \bar p \rangle - \langle \bar p, p \rangle \sum_j p_j = 0$. The layer returns that
# zero rounded: relative to $b_Q$'s and $b_V$'s gradients, about $10^{-16}$ in float64 and $10^{-7}$
# in float32, the dtype's machine epsilon.
# :::

# %% tags=["hide-cell"]
# 1. The bias gradients of a layer whose biases are all zero, in float64 and float32
bias_norms = {}
for dtype in (np.float64, np.float32):
    tfx.set_seed(0)
    rng = np.random.default_rng(0)
    p = {k: v.astype(dtype) for k, v in nr.init_layer_params(8, 16, rng).items()}  # all biases zero
    x = rng.standard_normal((2, 4, 8)).astype(dtype)
    y, cache = nr.encoder_layer_forward(x, p, 2)
    _, g = nr.encoder_layer_backward(rng.standard_normal(y.shape).astype(dtype), cache)
    b_q, b_k, b_v = np.split(g["attn.qkv.bias"], 3)  # the fused bias is [b_Q, b_K, b_V]
    bias_norms[dtype.__name__] = {
        name: float(np.linalg.norm(b))
        for name, b in [("b_Q", b_q), ("b_K", b_k), ("b_V", b_v), ("b_O", g["attn.out.bias"])]
    }
    n = bias_norms[dtype.__name__]
    print(
        f"{dtype.__name__}: |grad| "
        + ", ".join(f"{k} {v:.1e}" for k, v in n.items())
        + f"; b_K relative to the smaller of b_Q, b_V: {n['b_K'] / min(n['b_Q'], n['b_V']):.0e}"
    )
for dtype, noise in [("float64", 1e-12), ("float32", 1e-5)]:
    n = bias_norms[dtype]
    assert min(n["b_Q"], n["b_V"], n["b_O"]) > 0.1  # zero biases, non-zero gradients
    assert n["b_K"] < noise * min(n["b_Q"], n["b_V"])  # b_K: rounding noise of the dtype only

# %% [markdown]
# :::{admonition} Solution to exercise 2
# :class: dropdown
# With $S = QK^{\mathsf T} / (\tau\sqrt{d_k})$, $\partial S / \partial \tau = -S / \tau$, so, summed
# over every score, head and batch element,
# $\bar\tau = -\tfrac{1}{\tau} \sum_{ij} \bar S_{ij} S_{ij}$ (masked scores have $\bar S = 0$ and
# drop out). As $S$ is linear in $Q$ and $\bar Q = \bar S K / \sqrt{d_k}$,
# $\sum \bar Q \odot Q = \sum \bar S \odot S$: at $\tau = 1$ the existing backward gives
# $\bar\tau = -\sum \bar Q \odot Q$, which a central difference confirms.
# :::

# %% tags=["hide-cell"]
# 2. The gradient of a temperature, against a central difference
tfx.set_seed(0)
rng = np.random.default_rng(0)
q, k, v = (rng.standard_normal((1, 1, 4, 2)) for _ in range(3))
dout = rng.standard_normal((1, 1, 4, 2))


def temperature_loss(tau):
    return float((nr.attention_forward(q / tau, k, v)[0] * dout).sum())  # q / τ gives S / τ


_, cache = nr.attention_forward(q, k, v)
dq, _, _ = nr.attention_backward(dout, cache)
dtau = float(-(dq * q).sum())  # -Σ dq ⊙ q = -Σ dS ⊙ S at τ = 1
numeric = (temperature_loss(1 + 1e-6) - temperature_loss(1 - 1e-6)) / 2e-6
print(f"exercise 2: d loss / d tau analytic {dtau:.6f}, numeric {numeric:.6f}")
assert math.isclose(dtau, numeric, rel_tol=1e-6)

# %% [markdown]
# :::{admonition} Solution to exercise 3
# :class: dropdown
# By Taylor, the central difference is $\ell' + \tfrac{h^2}{6} \ell''' + O(h^4)$: the truncation
# error falls like $h^2$. Each value of $\ell$ carries a relative rounding error of about
# $\epsilon_\text{mach}$, which dividing by $2h$ turns into an error growing like
# $\epsilon_\text{mach} |\ell| / h$. Their sum is smallest at
# $h = (3 \epsilon_\text{mach} |\ell| / |\ell'''|)^{1/3}$, near
# $\epsilon_\text{mach}^{1/3} \approx 6 \times 10^{-6}$ when $\ell$ and $\ell'''$ are of similar
# size. Measured at 23 steps from $10^{-1}$ to $10^{-12}$, the best $h$ lies within a factor of 10
# of $\epsilon_\text{mach}^{1/3}$, and the log-log slope is about 2 for $h \ge 10^{-3}$ and about
# $-1$ for $h \le 10^{-8}$.
# :::

# %% tags=["hide-cell"]
# 3. The worst finite-difference error against the step h
tfx.set_seed(0)
steps_h = [10.0 ** (-e / 2) for e in range(2, 25)]  # 1e-1, 10^-1.5, …, 1e-12
fd_error = [max(abs(num - ana) for _, _, ana, num in nr.gradient_check(h=h)) for h in steps_h]
best_h = steps_h[int(np.argmin(fd_error))]
eps_third = np.finfo(np.float64).eps ** (1 / 3)
large = [(h, e) for h, e in zip(steps_h, fd_error) if h >= 1e-3]  # truncation's side
small = [(h, e) for h, e in zip(steps_h, fd_error) if h <= 1e-8]  # rounding's side
slope_large = tfx.inspect.timing.loglog_slope(*zip(*large))
slope_small = tfx.inspect.timing.loglog_slope(*zip(*small))
print("worst absolute error by h:")
print("  ".join(f"{h:.0e} {e:.0e}" for h, e in zip(steps_h, fd_error)))
print(
    f"smallest at h = {best_h:.0e}; eps^(1/3) = {eps_third:.1e}; log-log slope {slope_large:.2f} "
    f"for h >= 1e-3 (truncation, h^2) and {slope_small:.2f} for h <= 1e-8 (rounding, 1/h)"
)
assert eps_third / 10 < best_h < eps_third * 10  # the best h sits within a factor 10 of eps^(1/3)
assert 1.8 < slope_large < 2.2 and -1.5 < slope_small < -0.6

# %% [markdown]
# :::{admonition} Solution to exercise 4
# :class: dropdown
# Only attention mixes positions in `char_lm_forward`; everything else acts position by position.
# The line `mask = np.tril(np.ones((L, L), dtype=bool))` lets query $t$ attend only to keys
# $s \le t$, so after the first layer position $t$ depends on characters $0, \dots, t$ alone, and by
# induction so does every later layer and the logits. Changing character 10 can move the logits at
# positions 10 to 31, never those at 0 to 9.
# :::

# %% tags=["hide-cell"]
# 4. Which positions' logits move when character 10 changes
x4, _ = batch_of(val_ids, np.random.default_rng(4))  # (BATCH, CTX)
x4_changed = x4.copy()
x4_changed[:, 10] = (x4[:, 10] + 1) % len(chars)  # a different character at position 10
moved = np.abs(
    nr.char_lm_forward(x4_changed, model, HEADS, LAYERS)[0]
    - nr.char_lm_forward(x4, model, HEADS, LAYERS)[0]
).max(axis=(0, 2))  # (CTX,)
print("exercise 4: positions whose logits changed:", np.flatnonzero(moved > 0).tolist())
assert (
    not moved[:10].any() and (moved[10:] > 0).all()
)  # the causal mask np.tril(...) in char_lm_forward
