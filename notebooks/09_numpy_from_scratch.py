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
# Every chapter so far leaned on autograd: we wrote the forward pass and PyTorch found the gradients. This
# chapter takes that crutch away. The question: **can we write the whole encoder layer, forward and backward,
# with numpy alone, and get the same numbers as PyTorch, to ten decimal places?**
#
# The plan: derive the backward pass of each small op (linear, softmax, scaled dot-product attention, the head
# split and merge, LayerNorm, the activation, the residual), check each against autograd, compose them into
# `tfx.numpy_ref.encoder_layer_forward` / `encoder_layer_backward`, check the whole layer against
# `tfx.layers.EncoderLayer` in float64 and against finite differences, and then train a tiny character model on
# Shakespeare with a hand-written Adam, a warm-up schedule and label smoothing.
#
# The second source article builds the same layer in numpy, but its code does not run. Along the way we settle
# its claims N1 (0.01-scale initialisation), N4 (its LayerNorm formula), N5 (its training code), N6 (the
# warm-up schedule) and N7 (label smoothing), and the last section lists its bugs with a fix for each.

# %%
import os

os.environ.setdefault(
    "OPENBLAS_NUM_THREADS", "1"
)  # tiny matrices: one BLAS thread beats two that contend

import inspect
import math
import time

import numpy as np
import torch
import torch.nn.functional as F
from transformers import BertConfig, get_inverse_sqrt_schedule

import tfx
from tfx import numpy_ref as nr
from tfx import optim_np
from tfx.attention import causal_mask, scaled_dot_product_attention
from tfx.data import SHAKESPEARE, char_vocab, load_text
from tfx.layers import EncoderLayer
from tfx.shapes import show
from tfx.timing import machine
from tfx.viz import plot_curves

TOL = 1e-10  # float64 agreement we require between the hand-written backward and autograd


def autograd(fn, *arrays, dy):
    """Run fn on float64 torch copies of the numpy arrays, backpropagate dy; return the output and the grads."""
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    out = fn(*ts)
    out.backward(torch.from_numpy(dy))
    return out.detach().numpy(), [t.grad.numpy() for t in ts]


def max_err(ours, theirs):
    return max(float(np.abs(a - b).max()) for a, b in zip(ours, theirs))


# %% [markdown]
# ## The rule every backward pass follows
#
# Write the loss as $\ell$ and, for any array $a$ in the network, write $\bar a = \partial \ell / \partial a$, an
# array **of the same shape as $a$**. An op $y = f(x)$ receives $\bar y$ from the op after it and must return
# $\bar x$ (and $\bar\theta$ for its parameters). The chain rule says $\bar x_i = \sum_j \bar y_j \,
# \partial y_j / \partial x_i$. We never build the Jacobian $\partial y / \partial x$; each op has a cheap
# formula for this product, and the shapes tell us when we got it wrong. In `tfx.numpy_ref` every op is a pair:
# `op_forward(...) -> (out, cache)` keeps what the backward needs, and `op_backward(d_out, cache)` returns the
# gradients.
#
# ## Linear: $y = x W^\top + b$
#
# `torch.nn.Linear` stores $W$ as (out, in). With $x$ of shape $(N, d_\text{in})$ (all positions of all
# sequences stacked), $y$ is $(N, d_\text{out})$ and
#
# $$\bar x = \bar y\, W \quad (N, d_\text{in}), \qquad \bar W = \bar y^\top x \quad (d_\text{out}, d_\text{in}),
# \qquad \bar b = \textstyle\sum_n \bar y_n \quad (d_\text{out}).$$
#
# $\bar W$ and $\bar b$ are sums over every position because the same weights serve every position. A quick
# shape check catches most mistakes: $\bar y^\top x$ is the only product of the two that has $W$'s shape.

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
# For one row, $p_i = e^{s_i} / \sum_j e^{s_j}$ and $\partial p_i / \partial s_j = p_i(\delta_{ij} - p_j)$. The
# Jacobian is $\operatorname{diag}(p) - p p^\top$, an $L \times L$ matrix per row; multiplying it by $\bar p$
# gives
#
# $$\bar s = p \odot \bigl(\bar p - \langle \bar p, p \rangle\bigr),$$
#
# one elementwise product and one dot product per row, so the backward costs the same as the forward. The
# forward subtracts the row maximum before `exp`: softmax does not change when a constant is added to a row,
# and `exp` then never overflows.

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
# Per batch element and head, with $Q, K, V$ of shape $(L, d_k)$ and a boolean mask $M$ (True = may attend, the
# `tfx.attention` convention):
#
# | forward | shape | backward | shape |
# |---|---|---|---|
# | $S = Q K^\top / \sqrt{d_k}$, masked entries set to the most negative float | $(L, L)$ | $\bar Q = \bar S K / \sqrt{d_k}$, $\bar K = \bar S^\top Q / \sqrt{d_k}$ | $(L, d_k)$ |
# | $P = \operatorname{softmax}(S)$ by rows | $(L, L)$ | $\bar S = \operatorname{softmax}'(\bar P) \odot M$ | $(L, L)$ |
# | $A = P \odot M$ | $(L, L)$ | $\bar P = \bar A \odot M$ | $(L, L)$ |
# | $O = A V$ | $(L, d_k)$ | $\bar A = \bar O V^\top$, $\bar V = A^\top \bar O$ | |
#
# A masked score was replaced by a constant, so its gradient is zero: that is the $\odot M$ on $\bar S$. The
# product $P \odot M$ changes nothing on a row that has at least one allowed key (its masked weights are already
# exactly 0), but a row with **no** allowed key would otherwise be uniform; the mask turns it into zeros, so a
# fully padded sequence gives zeros and zero gradients, never NaN. Below, sequence 1 has two padding tokens and
# sequence 2 is all padding; we compare with `tfx.attention.scaled_dot_product_attention` under autograd.

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
# `split_heads` turns $(B, L, d)$ into $(B, H, L, d_k)$: a reshape to $(B, L, H, d_k)$, then a swap of the $L$
# and $H$ axes, so that head $h$ owns features $h d_k \dots (h+1) d_k - 1$ of every token. Nothing is computed;
# entries only move. The gradient of a permutation is the inverse permutation, so **the backward of split is
# merge, and the backward of merge is split**. The axis swap matters: reshaping $(L, d)$ straight to
# $(L, H, d_k)$ and multiplying the last two axes pairs heads with heads instead of tokens with tokens (the
# source article does this; see the last section).

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
# Per token, with $\mu$ and the biased variance $\sigma^2$ over the $d$ features, $r = 1/\sqrt{\sigma^2 +
# \varepsilon}$, $\hat x = (x - \mu)\, r$ and $y = \gamma \odot \hat x + \beta$:
#
# $$\bar\gamma = \textstyle\sum_n \bar y_n \odot \hat x_n, \qquad \bar\beta = \sum_n \bar y_n, \qquad
# \bar x = r\,\bigl(g - \operatorname{mean}(g) - \hat x \operatorname{mean}(g \odot \hat x)\bigr),
# \quad g = \bar y \odot \gamma.$$
#
# The two subtracted terms are the price of normalising: $x$ reaches $\hat x$ through $x - \mu$, which removes
# the mean of the gradient, and through $r$, which removes the gradient's component along $\hat x$. So $\bar x$
# is exactly orthogonal to the all-ones vector (shifting a token changes nothing) and, up to a relative term of
# size $\varepsilon / (\sigma^2 + \varepsilon)$, to $\hat x$ (rescaling a token changes nothing, except through
# the $\varepsilon$ under the root).

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
# BERT's GELU is $x\,\Phi(x)$ with $\Phi$ the standard normal CDF, $\Phi(x) = \tfrac12(1 + \operatorname{erf}(x /
# \sqrt2))$; its derivative is $\Phi(x) + x\,\varphi(x)$, with $\varphi$ the normal density. numpy has no `erf`.
# The choices were a polynomial approximation, a new dependency (scipy), or Python's `math.erf` applied element by
# element. The cell below measures the classic approximation (Abramowitz and Stegun 7.1.26): its error is of
# order $10^{-7}$, far from float64. `tfx.numpy_ref.erf` therefore takes Python's `math.erf`, the C library's
# `erf`, which agrees with `torch.erf` to the last bit or two; a Python loop is slow per element, but this
# chapter's arrays are small. ReLU's derivative is 1 where $x > 0$ and 0 elsewhere; at exactly $x = 0$ PyTorch
# takes 0, and so do we.

# %%
# NBVAL_CHECK_OUTPUT
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
print(f"max |erf - torch.erf| on [-6, 6]: nr.erf {erf_err:.1e}, A&S 7.1.26 polynomial {as_err:.1e}")
assert erf_err < 1e-15 and 1e-8 < as_err < 1e-6

# %% [markdown]
# ## The residual, and the layer assembled
#
# A residual $h = x + f(x)$ sends $\bar h$ down two paths, unchanged along the identity and through $f$'s
# backward, and the two contributions add: $\bar x = \bar h + \bar x_f$. That `+` is why gradients reach the
# bottom of a deep stack even where $f$'s Jacobian is small. Here is the whole backward pass of the layer, for
# post-LN ($h = \mathrm{LN}_1(x + \mathrm{MHA}(x))$, $y = \mathrm{LN}_2(h + \mathrm{FFN}(h))$, BERT's order) and
# pre-LN ($h = x + \mathrm{MHA}(\mathrm{LN}_1(x))$, $y = h + \mathrm{FFN}(\mathrm{LN}_2(h))$), read bottom-up
# from the forward:

# %%
print(inspect.getsource(nr.encoder_layer_backward))

# %% [markdown]
# `params` is keyed exactly like the `state_dict()` of `tfx.layers.EncoderLayer`, so we can copy a PyTorch
# layer's weights across with one dict comprehension and compare everything: the output, $\bar x$ and all
# twelve parameter gradients, for both LayerNorm placements, both activations and three masks (none, causal, and
# padding with one sequence entirely padded), all in float64 with dropout off.

# %%
D_MODEL, N_HEADS, D_FF, B, L = 16, 4, 32, 3, 6


def torch_vs_numpy(norm_first, activation, mask):
    """Largest |difference| over y, dx and every parameter gradient, between tfx.layers and tfx.numpy_ref."""
    tfx.set_seed(0)
    layer = (
        EncoderLayer(
            D_MODEL, N_HEADS, D_FF, dropout=0.0, norm_first=norm_first, activation=activation
        )
        .double()
        .eval()
    )
    with torch.no_grad():
        for prm in (
            layer.parameters()
        ):  # move LayerNorm and biases off 1 and 0 so their gradients are tested
            prm.add_(0.2 * torch.randn_like(prm))
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
# ## Finite differences: a check that does not trust autograd either
#
# Agreement with autograd could hide a mistake shared by both implementations (a wrong mask convention, say).
# A central difference, $(\ell(\theta + h) - \ell(\theta - h)) / 2h$, depends on nothing but the forward pass.
# Its error is about $h^2$ (truncation) plus $\epsilon_\text{mach} / h$ (rounding), so in float64 with $h =
# 10^{-6}$ we expect six to eight matching digits; in float32 the same check would be hopeless, which is why
# gradient checks run in float64. `nr.gradient_check` perturbs a few coordinates (weights, biases, LayerNorm
# parameters and one input entry) of a random pre-LN layer with a causal mask.

# %%
# NBVAL_CHECK_OUTPUT
tfx.set_seed(0)
worst = 0.0
for name, idx, analytic, numeric in nr.gradient_check(h=1e-6):
    worst = max(worst, abs(numeric - analytic) / max(abs(analytic), 1e-8))
    print(f"{name + str(list(idx)):<24} analytic {analytic:+.6f}  numeric {numeric:+.6f}")
print("worst relative difference below 1e-6:", worst < 1e-6)
assert worst < 1e-6

# %% [markdown]
# Try it: move the step $h$ and switch to float32. The kernel reruns `nr.gradient_check_report`. Large $h$ loses
# to truncation, tiny $h$ to rounding; in float32 no $h$ gets close to six digits.

# %%
from tfx.widgets import gradient_check_widget

gradient_check_widget()

# %% [markdown]
# (claim-n4)=
# ### Claim N4: LayerNorm as $(x - \text{mean}) / (\text{std} + \varepsilon)$
#
# **Holds only when a token's standard deviation is far above $\sqrt\varepsilon$.** The source normalises by
# $\text{std} + 10^{-6}$; PyTorch (and BERT) by $\sqrt{\text{var} + 10^{-5}}$ (BERT uses $10^{-12}$). For rows with
# a standard deviation near 1 the two agree to about $10^{-5}$. On near-constant rows they part ways: with
# $\varepsilon$ outside the root, a row whose spread is $10^{-4}$ is still blown up to unit scale, so tiny noise
# (rounding, a nearly constant padding embedding) becomes an $O(1)$ signal, and the gradient, which scales like
# $1/(\text{std} + \varepsilon)$, grows towards $1/\varepsilon$, while PyTorch's form caps it near
# $\lVert w \rVert / \sqrt\varepsilon$. We sweep
# the spread $s$ of one 16-feature row $1 + s z$ and measure both the output gap and the input-gradient norm of
# $\sum_i w_i y_i$ for a fixed random $w$.

# %%
# CLAIM N4: holds only when the row's std is far above sqrt(eps); near-constant rows differ by O(1)
tfx.set_seed(0)
rng = np.random.default_rng(0)
z = rng.standard_normal(16)
z = (z - z.mean()) / z.std()  # exactly mean 0, std 1
w = rng.standard_normal(16)
ones, zeros = np.ones(16), np.zeros(16)
spreads = [10.0**e for e in range(-7, 1)]
gaps, grad_torch, grad_source = [], [], []
for s in spreads:
    row = 1.0 + s * z
    torch_form, cache = nr.layer_norm_forward(row, ones, zeros, eps=1e-5)
    gaps.append(np.abs(nr.layer_norm_std_eps(row, ones, zeros, eps=1e-6) - torch_form).max())
    grad_torch.append(np.linalg.norm(nr.layer_norm_backward(w, cache)[0]))
    _, (g,) = autograd(lambda r: (r - r.mean()) / (r.std(unbiased=False) + 1e-6), row, dy=w)
    grad_source.append(np.linalg.norm(g))
for s, gap, gt, gs in zip(spreads, gaps, grad_torch, grad_source):
    print(
        f"std {s:.0e}: max |output gap| {gap:.1e}   |grad| torch form {gt:.1e}   std+eps form {gs:.1e}"
    )
plot_curves(
    spreads,
    {
        "max |output gap|": gaps,
        "|grad| sqrt(var + 1e-5)": grad_torch,
        "|grad| std + 1e-6": grad_source,
    },
    "std of the row",
    "value",
    title="LayerNorm: eps inside the root or outside",
    logx=True,
    logy=True,
    marker="o",
)
assert gaps[-1] < 2e-5  # std 1: the two forms agree
assert BertConfig().layer_norm_eps == 1e-12  # BERT's own eps, from the transformers config
assert max(gaps) > 1.0  # near-constant rows: they differ by more than the output's own scale
assert max(grad_source) > 1e5 and max(grad_torch) < 2 / math.sqrt(1e-5) * np.linalg.norm(w)

# %% [markdown]
# (claim-n1)=
# ### Claim N1: 0.01-scale initialisation prevents exploding gradients
#
# **Fails.** Multiplying weights by 0.01 does not make a network stable; it trades explosion for vanishing. In a
# linear layer with $d$ inputs, the output variance is about $d\,\sigma_W^2$ times the input variance, so with
# $\sigma_W = 0.01$ and $d = 256$ each ReLU layer multiplies the activations' scale by about
# $0.01 \cdot \sqrt{256 / 2} \approx 0.11$, and the backward pass shrinks gradients by the same factor. Xavier
# initialisation ($\sigma_W^2 = 2 / (d_\text{in} + d_\text{out})$) keeps the factor near $1/\sqrt2$ with ReLU, and
# He initialisation ($\sigma_W^2 = 2 / d_\text{in}$) near 1. We run a 10-layer ReLU stack built from
# `nr.linear_forward` / `nr.relu_forward` and their backwards, and then look at one encoder layer, where LayerNorm
# hides the shrinking activations but the 0.01 sub-layers barely contribute: the layer is nearly the identity
# (post-LN: nearly $\mathrm{LN}(x)$).

# %%
# CLAIM N1: fails: with 0.01-scale weights activations and gradients shrink layer by layer; Xavier/He do not
tfx.set_seed(0)
DEPTH, WIDTH = 10, 256
INITS = {
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
plot_curves(
    range(1, DEPTH + 1),
    act_std,
    "layer",
    "activation std",
    logy=True,
    marker="o",
    title=f"ReLU stack, width {WIDTH}: three initialisations",
)

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
assert (
    act_std["0.01"][-1] < 1e-8
)  # about 0.11 per layer: after 10 layers less than 1e-8 of the input's scale
predicted = {"0.01": 0.01 * math.sqrt(WIDTH / 2), "Xavier": math.sqrt(0.5), "He": 1.0}
assert all(
    abs(factor[k] / predicted[k] - 1) < 0.1 for k in INITS
)  # the measured factors match the estimates
assert act_std["He"][-1] > 0.5 and act_std["Xavier"][-1] > 1e-2
assert first_grad["0.01"] < 1e-5 * first_grad["He"]
assert max(ratio["0.01"]) < 0.01 < 0.1 < min(ratio["Xavier"])

# %% [markdown]
# ## Training in numpy
#
# Now the layer earns its keep. The task is next-character prediction on real text: Shakespeare's *Hamlet*, from
# the public-domain texts that `make setup` fetches (`python -m tfx.data --fetch`; nothing is downloaded while
# the book runs). The model is `tfx.numpy_ref.char_lm_forward`: a character embedding plus a learned position
# embedding, two post-LN encoder layers with a causal mask, and a linear head to the character logits. Three
# training pieces are written by hand in `tfx.optim_np` and first checked against their PyTorch versions:
# cross-entropy with label smoothing, the Noam warm-up schedule and Adam.

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
# (claim-n7)=
# ### Claim N7: label smoothing is $y_\text{smooth} = (1 - \varepsilon)\,y + \varepsilon / K$
#
# **Holds.** That target, with $y$ one-hot over $K$ classes, is exactly what
# `torch.nn.CrossEntropyLoss(label_smoothing=ε)` uses: its loss equals $-\sum_k y_{\text{smooth},k} \log p_k$
# averaged over examples. Two details of the source's function differ from PyTorch, and neither changes the
# formula: it **sums** over the batch instead of averaging (so the loss, and the gradient, grow with the batch
# size), and it takes $\log(p + 10^{-10})$ of probabilities instead of a log-softmax of logits, which is slightly
# off and unstable when $p$ underflows. Our `optim_np.cross_entropy` works from logits and returns the gradient
# $(\operatorname{softmax}(z) - y_\text{smooth}) / N$.

# %%
# CLAIM N7: holds: (1 - eps)·y + eps/K is the target torch's CrossEntropyLoss(label_smoothing=eps) uses
tfx.set_seed(0)
logits = torch.randn(32, len(chars), dtype=torch.float64, requires_grad=True)
targets = torch.randint(0, len(chars), (32,))
for eps in (0.0, 0.1, 0.3):
    ref = torch.nn.CrossEntropyLoss(label_smoothing=eps)(logits, targets)
    logits.grad = None
    ref.backward()
    ours, dlogits = optim_np.cross_entropy(logits.detach().numpy(), targets.numpy(), eps)
    y_smooth = (1 - eps) * np.eye(len(chars))[targets.numpy()] + eps / len(
        chars
    )  # the source's formula
    probs = logits.detach().softmax(-1).numpy()
    source_sum = -np.sum(y_smooth * np.log(probs + 1e-10))  # its reduction: a sum over the batch
    print(
        f"eps {eps}: torch {ref.item():.6f}  ours {ours:.6f}  source formula / N {source_sum / 32:.6f}  "
        f"source as written {source_sum:.3f}"
    )
    assert math.isclose(ours, ref.item(), rel_tol=1e-12)
    assert np.allclose(dlogits, logits.grad.numpy(), atol=1e-14)
    assert math.isclose(source_sum / 32, ref.item(), rel_tol=1e-6)  # same formula, up to the 1e-10
    assert source_sum > 30 * ref.item()  # but a sum: 32 times the mean

# %% [markdown]
# (claim-n6)=
# ### Claim N6: the Noam schedule warms the learning rate up, then decays it
#
# **Holds, and the peak sits exactly at `warmup_steps`.** The schedule of "Attention Is All You Need" is
# $\text{lr}(t) = d^{-1/2} \min(t^{-1/2},\; t \cdot w^{-3/2})$ for steps $t \ge 1$. The two terms are equal exactly
# at $t = w$; before it the linear term is smaller, after it the $t^{-1/2}$ term is. So it rises linearly for $w$
# steps, peaks at $d^{-1/2} w^{-1/2}$, then decays like $1/\sqrt t$. We plot it for the paper's $d = 512$,
# $w = 4000$ and check it, step by step, against an implementation we did not write: Hugging Face's
# `get_inverse_sqrt_schedule`, a `LambdaLR` that rises linearly to the base learning rate over $w$ steps and then
# multiplies it by $\sqrt{w / t}$. With the base rate set to the peak $d^{-1/2} w^{-1/2}$ it is the same curve;
# it counts steps from 0, where it starts at 0, so its step $t$ is our step $t$.

# %%
# CLAIM N6: holds: the Noam learning rate rises linearly and peaks exactly at warmup_steps
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
    f"peak at step {steps[np.argmax(lr)]}, lr {lr.max():.3e} = d^-0.5 · w^-0.5 = {d_paper**-0.5 * warmup**-0.5:.3e}"
)
assert np.allclose(lr, hf_lr, rtol=1e-12, atol=0)
assert steps[np.argmax(lr)] == warmup
assert np.all(np.diff(lr[:warmup]) > 0) and np.all(np.diff(lr[warmup - 1 :]) < 0)

# %% [markdown]
# ### Adam, by hand
#
# Adam keeps running means of the gradient, $m_t = \beta_1 m_{t-1} + (1 - \beta_1) g_t$, and of its square,
# $v_t = \beta_2 v_{t-1} + (1 - \beta_2) g_t^2$. Both start at zero, so early on they are biased towards zero;
# dividing by $1 - \beta^t$ removes that bias. The step is $\theta \leftarrow \theta - \text{lr} \cdot \hat m_t /
# (\sqrt{\hat v_t} + \epsilon)$. Five steps on the same random gradients as `torch.optim.Adam`:

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
# Batches of 16 random windows of 32 characters; the target of each position is the next character. The loss is
# cross-entropy with label smoothing 0.1, the learning rate follows the Noam schedule with 50 warm-up steps
# (multiplied by 2, a choice made for this short run), and Adam applies the gradients from `char_lm_backward`.
# To judge the result we measure, every 25 steps, the **held-out** loss without smoothing, against two baselines:
# the untrained model, and the best a model can do with no context at all, the entropy of the character
# frequencies (a model that has learnt only which letters are common gets exactly this). The training loss is not
# on the same scale: it is measured against smoothed targets, and a smoothed target has an entropy of its own
# (printed below), which no model can go below. At four steps the cell prints the gradient norm of each part of the
# model (embeddings, each layer, head), computed by `optim_np.grad_norms_by_part` from `char_lm_backward`'s output.

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

tfx.set_seed(0)
rng = np.random.default_rng(0)
model = nr.init_char_lm(len(chars), CTX, D, HEADS, FF, LAYERS, rng)
print(f"{sum(v.size for v in model.values()):,} parameters")
loss_before = held_out_loss(model)
adam = optim_np.Adam(model)
losses, checkpoints, held_out = [], [], []
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
    f"numpy BLAS threads: {os.environ['OPENBLAS_NUM_THREADS']}"
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
# The held-out loss falls well below the character-frequency entropy, so the model is using the preceding
# characters, not only the letter counts. Sampling a continuation of a prompt, one character at a time from the
# model's softmax (at temperature 0.8), shows what 300 numpy steps buy: word-like chunks, spaces and line breaks
# in a plausible rhythm, no meaning.

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
# ## What the source got wrong
#
# The article presents its numpy code as a model one can train. Run as written, it stops at the first call of
# its LayerNorm; fixed line by line, it still computes the wrong attention. The claim cell below lists every
# problem we found with the fix the book uses, and demonstrates the one that fails silently.

# %% [markdown]
# (claim-n5)=
# ### Claim N5: the source's numpy model trains as written
#
# **Fails.** The article's code cannot run, and one of its errors would make the layer wrong even after the
# crashes are fixed. Its bugs, and the fix for each (the fixed versions are the functions of `tfx.numpy_ref` and
# `tfx.optim_np` used above):
#
# | # | what the source does | what happens | the fix |
# |---|---|---|---|
# | 1 | defines `layer_norm(x)` with one parameter, then calls it as `layer_norm(out, gamma, beta)` | `TypeError` on the first call | take γ and β as arguments (`nr.layer_norm_forward(x, gamma, beta, eps)`); γ and β created inside the function could never be trained anyway |
# | 2 | divides by `std + 1e-6` | differs from LayerNorm on near-constant rows (claim N4 above) | `1 / sqrt(var + eps)` |
# | 3 | uses `d_ff` inside the layer class without defining it there | `NameError` unless an earlier snippet happened to leave a global | pass `d_ff` in, or read it off `ff.fc1.weight` as `nr` does |
# | 4 | sets `self.d_k = d_v = …`, then reads `self.d_v` | `AttributeError`: `d_v` was a local | one `d_k`, stored on the object |
# | 5 | reshapes Q, K, V from $(L, d)$ to $(L, H, d_k)$ and multiplies the last two axes | scores of shape $(L, H, H)$: heads attend to heads of the same token, and tokens never see each other | swap axes to $(H, L, d_k)$ first (`nr.split_heads`) |
# | 6 | calls `softmax(...)` in its chunked attention | `NameError`: no `softmax` is defined | define it (`nr.softmax_forward`) |
# | 7 | trains with `tf.GradientTape`, `model.trainable_variables` and `cross_entropy_loss` | TensorFlow is never imported, numpy arrays have no gradient tape, the loss is undefined, and the model is called with an encoder and a decoder input it does not take | a backward pass written out (`nr.encoder_layer_backward`), a loss with its gradient (`optim_np.cross_entropy`) and an optimiser (`optim_np.Adam`) |
# | 8 | sums the smoothed loss over the batch | the loss and the gradient scale with the batch size (claim N7 above) | average, as PyTorch does |
# | 9 | initialises every weight as `0.01 * randn` | activations and gradients vanish with depth (claim N1 above) | Xavier or He scaling (`nr.init_layer_params`) |
#
# Bug 5 is the dangerous one: after reshaping it raises no error and returns an output of the right shape. The
# cell below rebuilds only that reshape step in a few lines of our own and shows that, with it, changing token 1
# leaves token 0's output untouched, which real attention never does.

# %%
# CLAIM N5: fails: the source's numpy code does not run; the book's version runs, matches autograd and trains
L_src, H_src, dk_src = 3, 8, 64
tfx.set_seed(0)
rng = np.random.default_rng(0)
Wq, Wk, Wv = (rng.standard_normal((H_src * dk_src, H_src * dk_src)) * 0.05 for _ in range(3))


def heads_without_swap(x):
    """The source's order: (L, d) → (L, H, d_k), then attention over the last two axes. Returns token 0's
    output and the shape of the scores."""
    q, k, v = ((x @ W).reshape(L_src, H_src, dk_src) for W in (Wq, Wk, Wv))  # (L, H, d_k)
    scores = q @ k.transpose(0, 2, 1) / math.sqrt(dk_src)  # (L, H, H): heads against heads
    return (nr.softmax_forward(scores)[0] @ v)[0], scores.shape  # token 0: (H, d_k)


def heads_with_swap(x):
    """The fixed order: split_heads gives (H, L, d_k), so the (L, L) scores pair tokens with tokens."""
    q, k, v = (nr.split_heads((x @ W)[None], H_src)[0] for W in (Wq, Wk, Wv))  # (H, L, d_k)
    scores = q @ k.transpose(0, 2, 1) / math.sqrt(dk_src)  # (H, L, L)
    return (nr.softmax_forward(scores)[0] @ v)[:, 0], scores.shape  # token 0: (H, d_k)


x = rng.standard_normal((L_src, H_src * dk_src))
x_changed = x.copy()
x_changed[1] += 1.0  # change token 1 only
changes = {}
for name, attend in [
    ("without the swap (source)", heads_without_swap),
    ("with split_heads (fix)", heads_with_swap),
]:
    (token0, shape), (token0_changed, _) = attend(x), attend(x_changed)
    changes[name] = not np.array_equal(token0, token0_changed)
    print(f"{name:<26} scores {shape}; token 0's output changes when token 1 does: {changes[name]}")
assert heads_without_swap(x)[1] == (L_src, H_src, H_src) and heads_with_swap(x)[1] == (
    H_src,
    L_src,
    L_src,
)
assert not changes["without the swap (source)"]  # tokens never interact
assert changes["with split_heads (fix)"]
assert all(max(r.values()) < TOL for r in results.values())  # the book's layer matches autograd …
assert loss_after < unigram - 0.3  # … and trains

# %% [markdown]
# ## Summary
#
# - Every op of the encoder layer has a short backward rule, and the shapes check it: $\bar x = \bar y W$ and
#   $\bar W = \bar y^\top x$ for a linear map; $p \odot (\bar p - \langle \bar p, p\rangle)$ for softmax; the mask
#   zeroes the gradient of every masked score; split and merge are each other's backward; LayerNorm removes the
#   mean and the $\hat x$ component of the gradient; a residual adds the two paths.
# - Composed, they reproduce PyTorch's output and all twelve parameter gradients of `EncoderLayer` to better than
#   $10^{-10}$ in float64, for post-LN and pre-LN, GELU and ReLU, with no mask, a causal mask and padding
#   (including a fully padded sequence, which gives zeros rather than NaN), and they agree with finite
#   differences, which trust nothing but the forward pass.
# - Trained with a hand-written Adam, the Noam schedule and label smoothing (each equal to its PyTorch
#   counterpart), a two-layer numpy transformer learns to predict Hamlet's next character, beating the
#   character-frequency baseline on held-out text.
# - The source article's claims: N1 fails (0.01 weights make activations and gradients vanish), N4 holds only
#   for rows whose spread is far above $\sqrt\varepsilon$, N5 fails (its code does not run, and its head reshape
#   is wrong), N6 and N7 hold.
#
# ## Exercises
#
# 1. **A bias-free attention.** Remove `attn.qkv.bias` and `attn.out.bias` from `params` (set them to zero) and
#    show that their gradients are still non-zero. What does that say about a zero parameter and its gradient?
# 2. **The gradient of the scale.** Add a learnable temperature $\tau$ to `attention_forward`
#    ($S = QK^\top / (\tau\sqrt{d_k})$) and derive $\bar\tau$ from $\bar S$. Check it with a finite difference.
# 3. **Finite-difference step size.** Repeat the finite-difference check for $h = 10^{-2}, 10^{-4}, \dots,
#    10^{-12}$ (the widget shows one $h$ at a time) and find where the error is smallest. Which two terms trade
#    off, and why does the best $h$ sit near $\epsilon_\text{mach}^{1/3}$?
# 4. **No peeking.** The character model must not see the character it predicts. Change the character at
#    position 10 of a batch and show that `char_lm_forward`'s logits change at positions 10 and after, and at
#    no position before it. Which line of `char_lm_forward` guarantees this?

# %% tags=["hide-input"]
# Solutions to exercises 1-4
tfx.set_seed(0)
rng = np.random.default_rng(0)
p = nr.init_layer_params(8, 16, rng)
x = rng.standard_normal((2, 4, 8))
y, cache = nr.encoder_layer_forward(x, p, 2)
_, g = nr.encoder_layer_backward(rng.standard_normal(y.shape), cache)
print(
    "exercise 1: |grad| of the zero biases:",
    f"{np.linalg.norm(g['attn.qkv.bias']):.4f}",
    f"{np.linalg.norm(g['attn.out.bias']):.4f}",
)
assert np.linalg.norm(g["attn.qkv.bias"]) > 0 and np.linalg.norm(g["attn.out.bias"]) > 0

q, k, v = (rng.standard_normal((1, 1, 4, 2)) for _ in range(3))
dout = rng.standard_normal((1, 1, 4, 2))


def temperature_loss(tau):
    return float(
        (nr.attention_forward(q / tau, k, v)[0] * dout).sum()
    )  # dividing q by τ scales S by 1/τ


_, cache = nr.attention_forward(q, k, v)
dq, _, _ = nr.attention_backward(dout, cache)
dtau = float(-(dq * q).sum())  # S ∝ 1/τ, so dS/dτ = -S at τ = 1, i.e. dτ = -Σ dS ⊙ S = -Σ dq ⊙ q
numeric = (temperature_loss(1 + 1e-6) - temperature_loss(1 - 1e-6)) / 2e-6
print(f"exercise 2: d loss / d tau analytic {dtau:.6f}, numeric {numeric:.6f}")
assert math.isclose(dtau, numeric, rel_tol=1e-6)

fd_errors = {}
for e in range(2, 13, 2):
    rows = nr.gradient_check(h=10.0**-e)
    fd_errors[10.0**-e] = max(abs(num - ana) / max(abs(ana), 1e-8) for _, _, ana, num in rows)
print(
    "exercise 3: worst relative error by h:", {f"{k:.0e}": f"{v:.1e}" for k, v in fd_errors.items()}
)
best = min(fd_errors, key=fd_errors.get)
assert 1e-8 <= best <= 1e-4  # truncation error ~h² wins for large h, rounding ~1e-16/h for small h

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
