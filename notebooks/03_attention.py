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
# # 03 · Attention, matrix by matrix
#
# Self-attention is where tokens talk to each other. Given the eight vectors of
# `[CLS] 我 喜 欢 吃 苹 果 [SEP]`, what does each of $W_Q$, $W_K$, $W_V$ and $W_O$ do, why are the scores
# divided by $\sqrt{d_k}$, what exactly does a mask change, and which popular statements about attention
# are false?
#
# We build one head by hand, then many, check them against PyTorch and Hugging Face, and end with a
# widget that perturbs a live layer. The articles' other claims on attention are in appendix
# {doc}`92 <92_ledger_attention>`.

# %%
import tfx  # first: importing tfx quiets torchao's import-time log lines (tfx/__init__.py)

# isort: split
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import transformers
from transformers.masking_utils import create_bidirectional_mask

from tfx.book import show_source
from tfx.core import (
    RUNNING_EXAMPLE,
    SHORT_EXAMPLE,
    build_vocab,
    padded_example,
    running_example_ids,
    show,
)
from tfx.inspect import (
    Perturbation,
    grad_norms,
    pattern_attention,
    perturb,
    perturbation_effect,
    qk_variance,
    softmax_jacobian,
    softmax_saturation,
)
from tfx.model import MultiHeadAttention, causal_mask, padding_mask, scaled_dot_product_attention

tfx.banner()

# %% [markdown]
# The running example in the book's small vocabulary. Heatmaps label tokens `#i` where the fonts lack
# Chinese glyphs; this table gives the token behind each index.

# %% tags=["widget-input"]
# NBVAL_CHECK_OUTPUT
tokens = RUNNING_EXAMPLE
vocab = build_vocab(tokens)
ids = running_example_ids(vocab)  # (1, 8)
L = ids.size(1)
show(ids=ids)
for i, t in enumerate(tokens):
    print(f"#{i}  {t:<5}  id {vocab[t]}")

# %% [markdown]
# ## One head by hand
#
# A head maps each token vector $x_i \in \mathbb{R}^{d_\text{model}}$ to a query $q_i = x_i W_Q$, a key
# $k_i = x_i W_K$ and a value $v_i = x_i W_V$, each in $\mathbb{R}^{d_k}$ with $d_k = d_\text{model}/H$. The
# score of query $i$ for key $j$ is $q_i \cdot k_j / \sqrt{d_k}$; a softmax along each row turns the scores
# into weights that sum to 1; the head's output for token $i$ is the weighted mean of the values:
#
# $$\text{head}(X) = \operatorname{softmax}\!\left(\frac{Q K^{\mathsf T}}{\sqrt{d_k}}\right) V .$$
#
# The inputs are random unit-variance stand-ins for the embeddings; the weights are scaled by
# $1/\sqrt{d_\text{model}}$ so $q$ and $k$ have unit variance too.


# %%
def one_head(d_model: int, n_heads: int):
    """Q, K, V, scores, weights and context of the first head, written out with plain matmuls."""
    d_k = d_model // n_heads
    tfx.set_seed(0)
    x = torch.randn(1, L, d_model)  # (1, L, d_model)
    # (d_model, d_k) each
    W_Q, W_K, W_V = (torch.randn(d_model, d_k) / math.sqrt(d_model) for _ in range(3))
    Q, K, V = x @ W_Q, x @ W_K, x @ W_V  # (1, L, d_k)
    scores = Q @ K.transpose(-2, -1) / math.sqrt(d_k)  # (1, L, L)
    weights = scores.softmax(dim=-1)  # (1, L, L): each row sums to 1
    context = weights @ V  # (1, L, d_k)
    projections = dict(x=x, W_Q=W_Q, W_K=W_K, W_V=W_V, Q=Q, K=K, V=V)
    return projections | dict(scores=scores, weights=weights, context=context)


# %% [markdown]
# Two sizes: a small one that prints whole, and BERT-base's.

# %%
# NBVAL_CHECK_OUTPUT
SIZES = {"small": (8, 2), "base": (768, 12)}  # (d_model, n_heads)
heads = {name: one_head(*size) for name, size in SIZES.items()}
for name, h in heads.items():
    print(
        f"--- {name}: d_model={SIZES[name][0]}, H={SIZES[name][1]}, d_k={SIZES[name][0] // SIZES[name][1]}"
    )
    show(**h)

# %% [markdown]
# Row $i$ of the small head's $8 \times 8$ weights says how much token $i$ takes from each token $j$; the
# rows sum to 1, the columns need not.

# %%
# NBVAL_CHECK_OUTPUT
h = heads["small"]
torch.set_printoptions(precision=3, sci_mode=False)
print(h["weights"][0])
print("row sums   ", h["weights"][0].sum(-1))
print("column sums", h["weights"][0].sum(-2))
ctx, w = scaled_dot_product_attention(h["Q"], h["K"], h["V"])  # tfx's function on the same Q, K, V
torch.testing.assert_close(w, h["weights"])
torch.testing.assert_close(ctx, h["context"])

# %% [markdown]
# ## Many heads: split, attend, merge
#
# Multi-head attention does not loop over heads. One $d_\text{model} \times d_\text{model}$ projection
# serves all of them; its last axis is *split* into $H$ blocks of $d_k$ and the head axis moved forward,
# so one batched matmul computes every head's $L \times L$ scores. The heads are then *merged* back to
# $d_\text{model}$ and $W_O$ mixes them. Per-head $W_Q$ is a block of columns of the full $W_Q$.
#
# The merge lays the heads side by side, so the $d_k$ columns of head $h$ meet only the $d_k$ rows
# $W_O^{(h)}$ of $W_O$ with the same indices, and the product splits into one term per head:
#
# $$\operatorname{concat}(\text{head}_1, \dots, \text{head}_H)\, W_O = \sum_{h=1}^{H} \text{head}_h\, W_O^{(h)} .$$
#
# Each head writes its own $d_\text{model}$-wide contribution and the layer adds them up. Ablating or
# pruning a head removes one term of this sum (the widget's *scaled head* below scales one), and it is
# the view in which single heads are studied. The function below checks it term by term.


# %%
def split_merge(d_model: int, n_heads: int):
    """Multi-head attention with explicit views and transposes, checked against tfx's MultiHeadAttention."""
    d_k = d_model // n_heads
    tfx.set_seed(0)
    x = torch.randn(1, L, d_model)  # (1, L, d_model)
    W_Q, W_K, W_V, W_O = (torch.randn(d_model, d_model) / math.sqrt(d_model) for _ in range(4))
    Q = x @ W_Q  # (1, L, d_model): all heads' queries side by side
    Qh = Q.view(1, L, n_heads, d_k).transpose(1, 2)  # (1, H, L, d_k)
    Kh = (x @ W_K).view(1, L, n_heads, d_k).transpose(1, 2)  # (1, H, L, d_k)
    Vh = (x @ W_V).view(1, L, n_heads, d_k).transpose(1, 2)  # (1, H, L, d_k)
    scores = Qh @ Kh.transpose(-2, -1) / math.sqrt(d_k)  # (1, H, L, L)
    ctx = scores.softmax(-1) @ Vh  # (1, H, L, d_k)
    concat = ctx.transpose(1, 2).reshape(1, L, d_model)  # (1, L, H·d_k) = (1, L, d_model)
    out = concat @ W_O  # (1, L, d_model)
    show(x=x, Q=Q, Q_heads=Qh, scores=scores, context=ctx, concat=concat, W_O=W_O, out=out)
    # head h by itself uses the columns h·d_k … (h+1)·d_k of W_Q, W_K, W_V, and the same rows of W_O
    by_head = torch.zeros_like(out)  # (1, L, d_model): the output rebuilt one head at a time
    for hd in range(n_heads):
        cols = slice(hd * d_k, (hd + 1) * d_k)
        q, k, v = x @ W_Q[:, cols], x @ W_K[:, cols], x @ W_V[:, cols]  # (1, L, d_k)
        torch.testing.assert_close(concat[..., cols], (q @ k.mT / math.sqrt(d_k)).softmax(-1) @ v)
        by_head += ctx[:, hd] @ W_O[cols, :]  # (1, L, d_k) @ (d_k, d_model)
    torch.testing.assert_close(by_head, out)
    # tfx stores nn.Linear weights (out, in), i.e. Wᵀ, with [W_Q; W_K; W_V] stacked in one fused qkv
    mha = MultiHeadAttention(d_model, n_heads, bias=False).eval()
    with torch.no_grad():
        mha.qkv.weight.copy_(torch.cat([W_Q.T, W_K.T, W_V.T]))  # (3·d_model, d_model)
        mha.out.weight.copy_(W_O.T)  # (d_model, d_model)
    ours, weights = mha(x)
    torch.testing.assert_close(ours, out)
    torch.testing.assert_close(weights, scores.softmax(-1))


# %%
# NBVAL_CHECK_OUTPUT
for name, (d, H) in SIZES.items():
    print(f"--- {name}: d_model={d}, H={H}")
    split_merge(d, H)
print("per-head loop == batched heads == tfx.model.attention.MultiHeadAttention at both sizes")
print("concat @ W_O == sum over heads of head_h @ W_O[rows of head h] at both sizes")

# %% [markdown]
# The module the rest of the book uses: `split_heads` and `merge_heads` are the `view` and `transpose`
# above; `forward` adds the masks and a `head_scale` for ablating heads.

# %%
show_source(MultiHeadAttention)

# %% [markdown]
# Figure 3.1 draws the split and merge from the shapes a BERT-base-sized module's own `split_heads` and
# `merge_heads` return, so it cannot drift from the code.

# %%
# Figure 3.1: The head split and merge of a BERT-base-sized MultiHeadAttention (d_model = 768, 12
#   heads of d_k = 64) for L = 8, B = 1, in eight numbered stages read like text, top row then
#   bottom row: x, q = x W_Q, the view to (1, 8, 12, 64), the transpose to (1, 12, 8, 64), the (1,
#   12, 8, 8) weights, weights times v, and the merge back to (1, 8, 768) before W_O. Each colour is
#   one head: its 64 columns of q become its own stacked panel, and the merge lays the 12 panels
#   side by side again.
fig = tfx.book.viz.plot_head_split(MultiHeadAttention(*SIZES["base"]), L=L)

# %% [markdown]
# ## Why divide by $\sqrt{d_k}$
#
# If the entries of $q$ and $k$ are independent with mean 0 and variance 1, then $q \cdot k = \sum_{m=1}^{d_k}
# q_m k_m$ is a sum of $d_k$ terms of variance 1, so $\operatorname{Var}(q \cdot k) = d_k$: the scores' spread
# grows like $\sqrt{d_k}$. Dividing by $\sqrt{d_k}$ brings the variance back to 1 whatever the head size.
# Three probes measure it on 20 000 random pairs per $d_k$, and what it does to the softmax:

# %%
show_source(qk_variance, softmax_jacobian, softmax_saturation)

# %%
# NBVAL_CHECK_OUTPUT
D_KS = [4, 16, 64, 256, 1024]
variances = {d: qk_variance(d) for d in D_KS}
print(f"{'d_k':>5}  {'Var(q·k)':>9}  {'Var(q·k/√d_k) = Var/d_k':>23}")
for d, var in variances.items():
    print(f"{d:>5}  {var:>9.1f}  {var / d:>23.3f}")

# %% [markdown]
# Why does the spread matter? The softmax $p = \operatorname{softmax}(s)$ has the Jacobian
# $\partial p / \partial s = \operatorname{diag}(p) - p p^{\mathsf T}$. When one score is far above the others, $p$ is
# nearly one-hot and both terms nearly cancel: the scores, and so $W_Q$ and $W_K$, receive almost no
# gradient. First, the formula against autograd in float64.

# %%
# NBVAL_CHECK_OUTPUT
tfx.set_seed(0)
s = torch.randn(L, dtype=torch.float64)
J_auto = torch.autograd.functional.jacobian(lambda z: z.softmax(-1), s)  # (L, L)
J = softmax_jacobian(s.softmax(-1))  # (L, L)
torch.testing.assert_close(J, J_auto)
show(scores=s, jacobian=J)
print(
    f"rows of J sum to {tfx.core.stable.below(J.sum(-1).abs().max(), 1e-12)}: adding a constant to "
    "every score changes nothing"
)
assert J.sum(-1).abs().max() < 1e-12

# %% [markdown]
# For each $d_k$, 2 000 queries against $L = 8$ random keys, with and without the scale: the mean largest
# weight (uniform is $1/8 = 0.125$, one-hot is 1) and the mean Frobenius norm of the softmax Jacobian.

# %%
# NBVAL_CHECK_OUTPUT
sat = {(d, scaled): softmax_saturation(d, scaled) for d in D_KS for scaled in (True, False)}
print(
    f"{'d_k':>5}  {'max weight (scaled)':>19}  {'(unscaled)':>10}  {'‖J‖ (scaled)':>12}  {'(unscaled)':>10}"
)
for d in D_KS:
    a, b = sat[d, True], sat[d, False]
    print(
        f"{d:>5}  {a.max_weight:>19.4f}  {b.max_weight:>10.4f}  {a.jacobian_norm:>12.4f}  {b.jacobian_norm:>10.4f}"
    )

# %%
# Figure 3.2: Mean largest softmax weight over 2,000 random queries against L = 8 random keys, for
#   head sizes d_k from 4 to 1024 (log scale), with scores q·k/√d_k and unscaled q·k. With the
#   scale it stays flat, well above uniform (0.125) and far below one-hot (1); unscaled it climbs
#   towards 1 as d_k grows: the softmax saturates.
# Figure 3.3: Mean Frobenius norm of the softmax Jacobian for the same queries and head sizes. With
#   the scale it stays flat; unscaled it shrinks steadily as d_k grows, so the scores, and W_Q and
#   W_K behind them, get less and less gradient.
for what, key in (
    ("mean largest weight", "max_weight"),
    ("mean ‖softmax Jacobian‖", "jacobian_norm"),
):
    fig = tfx.book.viz.plot_curves(
        D_KS,
        {
            "q·k/√d_k": [getattr(sat[d, True], key) for d in D_KS],
            "q·k (unscaled)": [getattr(sat[d, False], key) for d in D_KS],
        },
        xlabel="d_k",
        ylabel=what,
        logx=True,
        marker="o",
        title=f"{what} over 2000 queries, L = 8",
        figsize=(5, 2.8),
    )

# %% [markdown]
# The gradient that reaches one query ($d_k = 512$, eight keys, a loss that depends on the weights), with
# and without the scale:


# %%
# NBVAL_CHECK_OUTPUT
def query_grad_norm(d_k: int, scaled: bool) -> float:
    tfx.set_seed(0)
    q = torch.randn(1, d_k, dtype=torch.float64, requires_grad=True)  # (1, d_k)
    k, v = (
        torch.randn(L, d_k, dtype=torch.float64),
        torch.randn(L, d_k, dtype=torch.float64),
    )  # (L, d_k)
    scores = q @ k.T / (math.sqrt(d_k) if scaled else 1.0)  # (1, L)
    loss = (scores.softmax(-1) @ v).sum()
    loss.backward()
    return q.grad.norm().item()


grad_scaled, grad_unscaled = query_grad_norm(512, True), query_grad_norm(512, False)
print(f"d_k=512  grad norm at q, scaled: {grad_scaled:.4f}   unscaled: {grad_unscaled:.2e}")

# %% [markdown]
# In a real layer the gradient lands on parameters: one backward pass through a BERT-base-sized
# `MultiHeadAttention` at BERT's initialisation (weights $\mathcal{N}(0, 0.02^2)$, zero biases), with a
# squared-error loss against a random target. The cell splits the fused `qkv` weight into its $W_Q$,
# $W_K$, $W_V$ blocks:

# %%
# NBVAL_CHECK_OUTPUT
d, H = SIZES["base"]
tfx.set_seed(0)
mha_g = MultiHeadAttention(d, H)
with torch.no_grad():
    for lin in (mha_g.qkv, mha_g.out):
        lin.weight.normal_(0.0, 0.02)  # BERT's initialisation
        lin.bias.zero_()
x_g = torch.randn(1, L, d)  # (1, 8, 768)
out_g, w_g = mha_g(x_g)  # (1, 8, 768), (1, 12, 8, 8)
w_g.retain_grad()  # keep the gradient that reaches the weights, read further down
loss_g = (out_g - torch.randn_like(out_g)).pow(2).mean()
loss_g.backward()
print(grad_norms(mha_g))
blocks = dict(
    zip(("W_Q", "W_K", "W_V"), mha_g.qkv.weight.grad.split(d)),  # 3 × (768, 768)
    W_O=mha_g.out.weight.grad,
    **dict(zip(("b_Q", "b_K", "b_V"), mha_g.qkv.bias.grad.split(d))),  # 3 × (768,)
)
norms_g = {name: g.norm().item() for name, g in blocks.items()}
print()
for name, n in norms_g.items():
    print(f"{name}  {n:.4f}" if name != "b_K" else f"{name}  below 1e-6 × b_Q's: rounding noise")
assert norms_g["W_V"] > 2 * max(norms_g["W_Q"], norms_g["W_K"])
assert norms_g["b_K"] < 1e-6 * norms_g["b_Q"]

# %% [markdown]
# $W_Q$ and $W_K$ get several times less gradient than $W_V$ and $W_O$. Saturation is not the reason:
# at initialisation the scores are small and the softmax's Jacobian is not (the scaled ‖J‖ column
# above). The gradient to $W_Q$ passes through $K$, and that to $W_K$ through $Q$, both small at BERT's
# initialisation, while $W_V$ and $W_O$ sit on the direct path. The gap depends on the set-up: chapter
# 06 finds it more than doubled on the running example's embeddings, which share a component, and
# wider again in BERT-base's upper layers. $b_K$ adds $q_i \cdot b_K$ to every score of row $i$, a
# constant the softmax ignores, so its gradient is zero in exact arithmetic; the printed value is
# float32 rounding.
#
# The same fact, that the softmax ignores what a whole row shares, does take a share of the
# gradient. With $\bar P$ the gradient that reaches a row of weights $p$, the Jacobian
# $\operatorname{diag}(p) - pp^{\mathsf T}$ (symmetric) passes on to the scores
#
# $$\bar S = p \odot \bar P - p\,\langle p, \bar P \rangle = p \odot \left(\bar P - \langle p, \bar P \rangle\right):$$
#
# the diagonal part $p \odot \bar P$, minus its centring, which takes away the $p$-weighted mean of
# $\bar P$, the part every key shares. The more alike the keys' gradients, the more it removes (chapter
# {doc}`06 <06_gradient_flow>`: $W_Q$ and $W_K$ learn only from what differs between tokens). The next
# cell rebuilds $W_Q$'s gradient from $\bar S$ to check the formula against autograd, then measures
# the share in the layer above.

# %%
# NBVAL_CHECK_OUTPUT
p_g, P_bar = w_g.detach(), w_g.grad  # (1, 12, 8, 8) each: the weights and their gradient
S_bar = p_g * (P_bar - (p_g * P_bar).sum(-1, keepdim=True))  # (1, 12, 8, 8): reaching the scores
diagonal = p_g * P_bar  # (1, 12, 8, 8): the Jacobian's diagonal part alone
K_heads = mha_g.split_heads(mha_g.qkv(x_g).split(d, dim=-1)[1]).detach()  # (1, 12, 8, 64)


def grad_W_Q(score_grad):
    """W_Q's gradient from the scores' gradient, by hand: S = q kᵀ / √d_k with q = x W_Qᵀ + b_Q."""
    Q_bar = mha_g.merge_heads(score_grad @ K_heads / math.sqrt(d // H))  # (1, 8, 768)
    return Q_bar[0].T @ x_g[0]  # (768, 768): nn.Linear's (out, in) layout


torch.testing.assert_close(grad_W_Q(S_bar), blocks["W_Q"])  # the formula is autograd's
removed = 1 - (S_bar.norm() / diagonal.norm()).item()
without = grad_W_Q(diagonal).norm().item()
print(f"the centring removes {removed:.0%} of the gradient reaching the scores")
print(f"‖∇W_Q‖: {norms_g['W_Q']:.4f}; without the centring it would be {without:.4f}")
print(f"‖∇W_V‖ / ‖∇W_Q‖ = {norms_g['W_V'] / norms_g['W_Q']:.1f}")
assert 0.05 < removed < 0.5  # a share, not all of the gap
assert without / norms_g["W_Q"] < norms_g["W_V"] / norms_g["W_Q"] / 2

# %% [markdown]
# Here the centring removes 12%: $W_Q$'s gradient would be 0.0498 without it instead of 0.0440,
# against a gap of 3.5× to $W_V$. In chapter 01's masked-LM step it removes 14% to 47% per layer of
# BERT-base, most in the top layer, where the gap is widest. So the softmax is not saturated, and yet
# not neutral: its centring takes a share that grows as the keys' gradients grow alike, while most of
# the gap comes from the path.

# %% [markdown]
# Those variances assume $q$ and $k$ with unit-variance entries. BERT's are not: at its
# initialisation, weights $\mathcal N(0, 0.02^2)$ on LayerNorm's unit-variance output give entries of
# variance $768 \cdot 0.02^2 \approx 0.31$, and a trained head puts its scores wherever training
# takes them.

# %%
tfx.set_seed(0)
x_ln = torch.randn(4000, 768)  # LayerNorm's output: unit variance per feature
W_Q0, W_K0 = (0.02 * torch.randn(768, 64) for _ in range(2))  # one head at BERT's init
var_bert = ((x_ln[:2000] @ W_Q0) * (x_ln[2000:] @ W_K0)).sum(-1).var().item()
print(f"BERT's init, d_k = 64: Var(q·k) = {var_bert:.1f}")

# %% [markdown]
# (claim-a1)=
# ### Claim A1: does dividing by $\sqrt{d_k}$ matter?
#
# **Holds only when $q$ and $k$ have independent unit-variance entries**, the assumption of the
# Transformer paper (its footnote 4) that the article leaves out. Then $\operatorname{Var}(q \cdot k)
# = d_k$ within a few percent, and about 1 after the scale. Without it the softmax Jacobian, and the
# gradient to $W_Q$ and $W_K$, shrinks as $d_k$ grows; with it the Jacobian is the same at every
# $d_k$. The article's 64 is the assumption's, not BERT's: about 6 at BERT's initialisation.

# %%
# CLAIM A1: holds only when q and k have independent unit-variance entries (the paper's assumption): then Var(q·k) = d_k and the scale keeps the softmax gradient constant in d_k; at BERT's 0.02 init Var(q·k) is about 6 at d_k = 64, not 64
assert var_bert < 64 / 4  # the article's 64 needs unit-variance q and k
for d, var in variances.items():
    assert abs(var / d - 1) < 0.05, (d, var)  # Var(q·k) ≈ d_k
scaled, unscaled = ([sat[d, sc].jacobian_norm for d in D_KS] for sc in (True, False))
assert max(scaled) / min(scaled) < 1.1  # the scale keeps the softmax gradient constant in d_k
assert all(a > b for a, b in zip(unscaled, unscaled[1:]))  # without it, it falls with d_k
assert sat[1024, False].jacobian_norm < 0.15 * sat[1024, True].jacobian_norm
assert grad_unscaled < 0.1 * grad_scaled

# %% [markdown]
# (claim-a32)=
# ### Claim A32: is the softmax's gradient close to zero once its inputs exceed about 10?
#
# **Holds only when "the input" is the lead of the largest score over the others:** then the winner's
# derivative is $p(1 - p) \approx e^{-10}$. Shifting every input above 10 changes nothing, since the
# softmax is shift-invariant: what saturates is the *gap*, whatever the level.

# %%
# CLAIM A32: holds only when x is the lead of the largest score over the rest: a lead of 10 saturates at any level, and shifting every input above 10 changes nothing
tfx.set_seed(0)
s = torch.randn(L, dtype=torch.float64)  # (8,)
J_low, J_high = (softmax_jacobian((s + c).softmax(-1)) for c in (0.0, 15.0))
J_10, J_gap = (  # one input leads the seven others by 10, by 20; every input is below 10
    softmax_jacobian(torch.tensor([0.0] + [-gap] * (L - 1), dtype=torch.float64).softmax(-1))
    for gap in (10.0, 20.0)
)
print(f"all inputs above 10: ‖J‖ = {J_high.norm():.4f}; the same minus 15: {J_low.norm():.4f}")
print(f"a lead of 10: ‖J‖ = {J_10.norm():.1e}; a lead of 20, all below 10: {J_gap.norm():.1e}")
assert (s + 15).min() > 10
torch.testing.assert_close(J_high, J_low)  # identical: the level does not matter
assert J_high.norm() > 0.1  # and the gradient is far from zero above 10
assert J_gap.norm() < 1e-7  # while a gap of 20 saturates below 10
assert J_10.norm() < 1e-3 < 0.1 < J_low.norm()  # and a lead of 10 has all but vanished

# %% [markdown]
# ## Masks
#
# A mask says which keys a query may look at: in tfx a boolean tensor, **True = may attend**, broadcast
# to the $(B, H, L_q, L_k)$ scores; masked scores become a very negative number before the softmax. A
# **padding mask** hides the `[PAD]` keys of a short sentence in a batch; a **causal mask** hides the
# future, so query $i$ sees keys $0 \ldots i$.
#
# ### Padding
# The padded batch pads `[CLS] 我 吃 苹 果 [SEP]` to $L = 8$ with two `[PAD]` (id 0); with the padding mask
# its outputs are those of the short sentence run alone.

# %%
# NBVAL_CHECK_OUTPUT
short = SHORT_EXAMPLE
batch_ids, attention_mask = padded_example(vocab)  # (2, 8) each; Hugging Face style, 1 = token
d, H = SIZES["small"]
tfx.set_seed(0)
emb = nn.Embedding(len(vocab), d)
mha = MultiHeadAttention(d, H).eval()
with torch.no_grad():
    x = emb(batch_ids)  # (2, 8, d)
    mask = padding_mask(attention_mask)  # (2, 1, 1, 8)
    out_pad, w = mha(x, mask)  # (2, 8, d), (2, H, 8, 8)
    alone, _ = mha(x[1:, : len(short)])  # (1, 4, d): the short sentence with no padding at all
show(batch_ids=batch_ids, attention_mask=attention_mask, mask=mask, out=out_pad, weights=w)
print(w[1, 0])
assert (w[1, :, :, len(short) :] == 0).all()  # no query looks at a [PAD] key
torch.testing.assert_close(out_pad[1, : len(short)], alone[0])

# %% [markdown]
# The padded *query* rows (the last two) still attend to the real tokens and produce vectors, but nothing
# downstream reads them.
#
# ### Causal
# The causal mask is lower-triangular: every weight above the diagonal is exactly zero.

# %%
# NBVAL_CHECK_OUTPUT
cm = causal_mask(L)  # (8, 8)
print(cm.int())
with torch.no_grad():
    out_c, w_c = mha(x[:1], cm)  # (1, 8, d), (1, H, 8, 8)
show(causal_mask=cm, out=out_c, weights=w_c)
print(w_c[0, 0])
assert (w_c[0].triu(diagonal=1) == 0).all()
torch.testing.assert_close(w_c.sum(-1), torch.ones(1, H, L))

# %% [markdown]
# (claim-a20)=
# ### Claim A20: self-attention is "bidirectional"
#
# **Holds**: with no causal mask every output depends on tokens on both sides. Turning 苹 (position 5)
# into `[MASK]` moves every output without a mask, only positions 5 to 7 with the causal mask. So BERT can
# use a masked word's right context; a causal language model cannot.

# %%
# CLAIM A20: holds
edited = ids.clone()
edited[0, 5] = vocab["[MASK]"]
with torch.no_grad():
    xa, xb = emb(ids), emb(edited)  # (1, 8, d) each
    moved_bi = (mha(xa)[0] - mha(xb)[0]).norm(dim=-1)[0]  # (8,): change per position, no mask
    moved_causal = (mha(xa, cm)[0] - mha(xb, cm)[0]).norm(dim=-1)[0]  # (8,): with the causal mask
print("change per position, bidirectional:", moved_bi)
print("change per position, causal:       ", moved_causal)
assert (moved_bi > 1e-4).all()  # every position sees the edit, including those before it
assert (moved_causal[:5] == 0).all() and (moved_causal[5:] > 1e-4).all()

# %% [markdown]
# ### −1e9, −inf, and the fully masked row
#
# The source article adds $-10^9$ to forbidden scores; others use $-\infty$. With a causal mask they agree
# exactly: every row keeps its own key, and $e^{-10^9 - s} = 0$ in float32. They differ on a row where
# *every* key is masked (padding on both sides, cross-attention to an empty memory): $-\infty$ gives $0/0$,
# a NaN that spreads to every later layer and the loss; $-10^9$ gives a uniform row, silently attending to
# keys it was told to ignore. tfx fills with the dtype's most negative finite number, then multiplies the
# weights by the mask: zero weights, zero output.

# %%
# NBVAL_CHECK_OUTPUT
tfx.set_seed(0)
scores = torch.randn(L, L)  # (8, 8)
causal_inf = scores.masked_fill(~cm, float("-inf")).softmax(-1)
causal_1e9 = scores.masked_fill(~cm, -1e9).softmax(-1)
print("causal mask, -1e9 == -inf exactly:", torch.equal(causal_inf, causal_1e9))
bf16_inf, bf16_1e9 = (
    scores.bfloat16().masked_fill(~cm, fill).softmax(-1) for fill in (float("-inf"), -1e9)
)
print("causal mask in bfloat16, -1e9 == -inf exactly:", torch.equal(bf16_inf, bf16_1e9))
empty = cm.clone()
empty[3] = False  # query 3 may attend to nothing
row_inf = scores.masked_fill(~empty, float("-inf")).softmax(-1)[3]
row_1e9 = scores.masked_fill(~empty, -1e9).softmax(-1)[3]
qkv = torch.randn(3, 1, L, 4)  # q, k, v of one head, (1, L, 4) each
ctx_tfx, w_tfx = scaled_dot_product_attention(*qkv, mask=empty)
show(scores=scores, mask=empty, q=qkv[0], tfx_context=ctx_tfx, tfx_weights=w_tfx)
print("fully masked row, -inf:", row_inf)
print("fully masked row, -1e9:", row_1e9)
print("fully masked row, tfx: ", w_tfx[0, 3], " context:", ctx_tfx[0, 3])
try:
    scores.half().masked_fill(~cm, -1e9)
    raise AssertionError("float16 accepted -1e9")  # the ledger's claim N3 relies on the refusal
except RuntimeError as e:
    print(f"float16 (largest finite value {torch.finfo(torch.float16).max:.0f}) with -1e9:", e)
ctx16, w16 = scaled_dot_product_attention(*qkv.half(), mask=empty)
print("tfx in float16, any NaN:", bool(ctx16.isnan().any() or w16.isnan().any()))

# %% [markdown]
# ### Hugging Face's additive mask
#
# Hugging Face takes the same $(B, L)$ `attention_mask` (1 = token, 0 = padding), but its eager
# attention turns it into an *additive* float mask: 0 where a query may look, the dtype's most
# negative finite number where it may not, added to the scores before the softmax. In transformers
# 5.24 (`masking_utils.create_bidirectional_mask`) it has shape $(B, 1, L, L)$, one row per query;
# transformers 4.x built it as $(B, 1, 1, L)$, `(1 - m) * finfo.min` ($-10\,000$ in early versions),
# broadcast over the queries (and over the heads in both). For `F.scaled_dot_product_attention` it
# builds the boolean form instead, True = may attend, which is tfx's convention. Nothing multiplies
# the weights afterwards, so a query whose every key is masked gets a *uniform* row: each score plus
# $-3.4 \cdot 10^{38}$ rounds to the same number, and the softmax of a constant row is $1/L$, the
# $-10^9$ behaviour above, not tfx's zero row. The cell builds both of Hugging Face's masks for the
# padded batch, then hides every key of the second sentence from a tiny Hugging Face BERT and from its
# tfx copy.

# %%
# NBVAL_CHECK_OUTPUT
cfg_small = tfx.model.bert.BertConfig.tiny(dropout=0.0)  # attention dropout at BERT's 0.1 (below)
tfx.set_seed(0)
hf_small = transformers.BertModel(
    transformers.BertConfig(**cfg_small.to_hf_kwargs(), attn_implementation="eager")
).eval()
tfx_small = tfx.model.bert.from_huggingface(hf_small).eval()
embedded = hf_small.embeddings(batch_ids)  # (2, 8, 64): the mask builder reads its shape and dtype
hf_additive = create_bidirectional_mask(hf_small.config, embedded, attention_mask)  # (2, 1, 8, 8)
sdpa_config = transformers.BertConfig(**cfg_small.to_hf_kwargs(), attn_implementation="sdpa")
hf_boolean = create_bidirectional_mask(sdpa_config, embedded, attention_mask)  # (2, 1, 8, 8)
ours_mask = padding_mask(attention_mask)  # (2, 1, 1, 8)
show(
    attention_mask=attention_mask,
    hf_additive=hf_additive,
    hf_boolean=hf_boolean,
    tfx_mask=ours_mask,
)
lowest = torch.finfo(torch.float32).min
print("HF additive, sentence 2, query 0:", ["0" if v == 0 else "min" for v in hf_additive[1, 0, 0]])
print(f"  where min = torch.finfo(torch.float32).min = {lowest:.4g}")
assert torch.equal(hf_additive, torch.where(ours_mask, 0.0, lowest).expand(2, 1, L, L))
assert torch.equal(hf_boolean, ours_mask.expand(2, 1, L, L))  # the sdpa form is tfx's mask
no_keys = attention_mask.clone()
no_keys[1] = 0  # the second sentence: every key is padding
with torch.no_grad():
    w_hf_empty = hf_small(batch_ids, attention_mask=no_keys, output_attentions=True).attentions[0]
    w_tfx_empty = tfx_small(batch_ids, attention_mask=no_keys, output_attentions=True)[1][0]
print("every key masked, HF row: ", w_hf_empty[1, 0, 0])
print("every key masked, tfx row:", w_tfx_empty[1, 0, 0])
assert torch.equal(w_hf_empty[1], torch.full_like(w_hf_empty[1], 1 / L))  # uniform, exactly
assert (w_tfx_empty[1] == 0).all()  # zero
torch.testing.assert_close(w_tfx_empty[0], w_hf_empty[0])  # the unmasked sentence agrees

# %% [markdown]
# ## Attention dropout
#
# BERT trains with dropout $p = 0.1$ in two kinds of place: on each sublayer's output before the
# residual add (chapter 05), and inside attention, on the weights themselves
# (`attention_probs_dropout_prob` in Hugging Face, `attn_dropout` in tfx). *After* the softmax, each
# weight is set to zero with probability $p$, independently for every batch, head, query and key,
# and the survivors are divided by $1 - p$, so each weight keeps its expected value. On a training step
# a query ignores a random tenth of its keys and its row no longer sums to 1; the weighted sum of
# values then uses this thinned row. In `eval()` mode nothing is dropped, and the rows sum to 1 again.
# The cell runs the tiny BERT above in training mode on a batch of a thousand copies of the running
# example, each drawing its own dropout, then checks that Hugging Face drops exactly the same weights
# under the same seed (the weights both return are the dropped ones).

# %%
p_drop = cfg_small.attn_dropout  # 0.1, BERT-base's attention_probs_dropout_prob
with torch.no_grad():
    w_eval = tfx_small(ids, output_attentions=True)[1][0]  # (1, 4, 8, 8): layer 0, eval mode
    tfx_small.train()
    hf_small.train()
    tfx.set_seed(0)
    draws = tfx_small(ids.expand(1000, L), output_attentions=True)[1][0]  # (1000, 4, 8, 8)
    tfx.set_seed(1)
    w_ours = tfx_small(ids, output_attentions=True)[1]  # n_layers × (1, 4, 8, 8)
    tfx.set_seed(1)
    w_theirs = hf_small(ids, output_attentions=True).attentions
    tfx_small.eval()
    hf_small.eval()
kept = draws != 0  # (1000, 4, 8, 8): every copy draws its own dropout
ratio = draws[kept] / w_eval.expand_as(draws)[kept]  # each survivor against its eval weight
sums = draws.sum(-1)  # (1000, 4, 8): row sums in training
row = (draws[0, 0] == 0).any(-1).nonzero()[0].item()  # the first row of head 0 with a drop
print(f"{f'query {row} of head 0, eval:':<32}", w_eval[0, 0, row])
print(f"{'the same row, one training step:':<32}", draws[0, 0, row])
print(f"dropped: {1 - kept.float().mean().item():.3f} of {kept.numel():,} weights, p = {p_drop}")
print(
    f"survivor / eval weight: {ratio.min().item():.4f} to {ratio.max().item():.4f}; "
    f"1 / (1 - p) = {1 / (1 - p_drop):.4f}"
)
print(f"row sums in training: {sums.min().item():.3f} to {sums.max().item():.3f}; in eval: 1")
mean_gap = (draws.mean(0) - w_eval[0]).abs().max().item()
print(f"mean of the 1000 training copies against eval: differ by at most {mean_gap:.4f}")
same = all(torch.equal(a == 0, b == 0) for a, b in zip(w_ours, w_theirs, strict=True))
print("Hugging Face drops the same weights under the same seed:", same)
assert abs(1 - kept.float().mean().item() - p_drop) < 0.01
torch.testing.assert_close(ratio, torch.full_like(ratio, 1 / (1 - p_drop)))
assert (sums - 1).abs().max() > 0.05  # training rows do not sum to 1
torch.testing.assert_close(w_eval.sum(-1), torch.ones(1, 4, L))  # eval rows do
assert mean_gap < 0.01  # unbiased: the expected weight is the eval weight
assert same and all((a == 0).any() for a in w_ours)
for a, b in zip(w_ours, w_theirs, strict=True):
    torch.testing.assert_close(a, b)

# %% [markdown]
# ## Checking tfx against PyTorch
#
# ### `nn.MultiheadAttention`
# `MultiHeadAttention.from_torch` copies a torch module's weights; torch's `in_proj_weight` is tfx's fused
# `qkv`. The mask conventions are opposite: its boolean `attn_mask` and `key_padding_mask` mean
# **True = not allowed**, so tfx's mask `m` becomes torch's `~m`.

# %%
# NBVAL_CHECK_OUTPUT
for name, (d, H) in SIZES.items():
    tfx.set_seed(0)
    ref = nn.MultiheadAttention(d, H, batch_first=True).eval()
    ours = MultiHeadAttention.from_torch(ref).eval()
    xb = torch.randn(2, L, d)  # (2, 8, d)
    with torch.no_grad():
        r_out, r_w = ref(
            xb, xb, xb, key_padding_mask=attention_mask == 0, average_attn_weights=False
        )
        o_out, o_w = ours(xb, padding_mask(attention_mask))
        rc_out, rc_w = ref(xb, xb, xb, attn_mask=~cm, average_attn_weights=False)
        oc_out, oc_w = ours(xb, cm)
    for a, b in ((o_out, r_out), (o_w, r_w), (oc_out, rc_out), (oc_w, rc_w)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    print(
        f"{name}: tfx == nn.MultiheadAttention (padding and causal masks), weights {tuple(o_w.shape)}"
    )

# %% [markdown]
# ### `F.scaled_dot_product_attention`
# The fused kernel never materialises the weights, so we compare outputs. Its boolean `attn_mask` follows
# tfx's convention, and tfx's `attn_impl="sdpa"` calls this kernel.

# %%
# NBVAL_CHECK_OUTPUT
d, H = SIZES["base"]
tfx.set_seed(0)
q, k, v = torch.randn(3, 2, H, L, d // H)  # (2, H, 8, 64) each
for m in (None, padding_mask(attention_mask), cm):
    ours_ctx, _ = scaled_dot_product_attention(q, k, v, mask=m)
    torch.testing.assert_close(ours_ctx, F.scaled_dot_product_attention(q, k, v, attn_mask=m))
torch.testing.assert_close(
    scaled_dot_product_attention(q, k, v, mask=cm)[0],
    F.scaled_dot_product_attention(q, k, v, is_causal=True),
)
naive = MultiHeadAttention(d, H).eval()
fused = MultiHeadAttention(d, H, attn_impl="sdpa").eval()
fused.load_state_dict(naive.state_dict())
xb = torch.randn(2, L, d)
with torch.no_grad():
    torch.testing.assert_close(naive(xb, cm)[0], fused(xb, cm)[0])
show(q=q, context=ours_ctx)
print(
    "tfx == F.scaled_dot_product_attention with no mask, a padding mask, a causal mask and is_causal"
)

# %% [markdown]
# ### Fused QKV = three projections
# tfx computes Q, K and V with one $(d, 3d)$ matmul; the textbook uses three $(d, d)$ projections. They are
# the same linear map: stacking the three weights (and biases) gives the fused one. Chapter 08 measures
# whether fusing is faster on this machine.

# %%
# NBVAL_CHECK_OUTPUT
with torch.no_grad():
    W_q, W_k, W_v = naive.qkv.weight.split(d)  # 3 × (d, d)
    b_q, b_k, b_v = naive.qkv.bias.split(d)  # 3 × (d,)
    separate = [
        F.linear(xb, W, b) for W, b in ((W_q, b_q), (W_k, b_k), (W_v, b_v))
    ]  # 3 × (2, 8, d)
    fused_out = naive.qkv(xb)  # (2, 8, 3d)
    torch.testing.assert_close(torch.cat(separate, dim=-1), fused_out)
show(qkv_weight=naive.qkv.weight, W_q=W_q, fused_out=fused_out, q=separate[0])

# %% [markdown]
# (claim-a11)=
# ### Claim A11: zeroing W_O zeroes the attention output
#
# **Holds for the article's layer,** whose `W_o` has no bias: the output is exactly zero (with BERT's bias
# $b_O$ it is $b_O$), and the weights, computed before $W_O$, do not move. In a post-LN layer
# $\mathrm{LN}_1(x + \mathrm{MHA}(x))$ becomes $\mathrm{LN}_1(x)$, but the FFN still runs: the output is not
# $\mathrm{LN}(x)$, and each token is now treated on its own.

# %%
# CLAIM A11: holds: the article's bias-free W_o gives an output of exactly 0 (with BERT's bias b_O it would be b_O)
d, H = SIZES["small"]
tfx.set_seed(0)
xs = torch.randn(1, L, d)  # (1, 8, d)
for bias in (False, True):
    tfx.set_seed(0)
    m = MultiHeadAttention(d, H, bias=bias).eval()
    with torch.no_grad():
        _, w_before = m(xs)
        m.out.weight.zero_()
        out0, w_after = m(xs)
    assert torch.equal(w_before, w_after) and (w_after > 0).all()  # unchanged, and non-zero
    if bias:  # the output is the bias
        assert m.out.bias.abs().max() > 0
        torch.testing.assert_close(out0, m.out.bias.expand_as(out0))
    else:
        assert (out0 == 0).all()  # exactly zero

# %%
tfx.set_seed(0)
layer = tfx.model.layers.EncoderLayer(d, H, d_ff=4 * d, dropout=0.0).eval()  # post-LN, as in BERT
with torch.no_grad():
    layer.attn.out.weight.zero_()
    for b_O in (layer.attn.out.bias.clone(), torch.zeros(d)):  # BERT's bias, then none
        layer.attn.out.bias.copy_(b_O)
        h = layer.norm1(xs + b_O)  # what the attention sublayer should give: LN(x + b_O)
        y = layer(xs)
        torch.testing.assert_close(y, layer.norm2(h + layer.ff(h)))  # the layer: LN2(h + FFN(h))
    assert (y - h).abs().max() > 0.1  # so the layer's output is not LN(x)
    xs2 = xs.clone()
    xs2[0, 5] = torch.randn(d)  # replace token 5 only
    moved = (layer(xs2) - y).norm(dim=-1)[0]  # (8,)
print("full layer, change per position after editing token 5:", moved)
assert (moved[torch.arange(L) != 5] == 0).all() and moved[5] > 0.1  # no token mixing left

# %% [markdown]
# (claim-a12)=
# ### Claim A12: does swapping q and k transpose the attention weights?
#
# **Fails.** It transposes the *scores*, $K Q^{\mathsf T} = (Q K^{\mathsf T})^{\mathsf T}$, but the softmax
# normalises rows, and the rows of $S^{\mathsf T}$ are the columns of $S$:
# $\operatorname{softmax}(S^{\mathsf T}) \neq \operatorname{softmax}(S)^{\mathsf T}$, whose rows do not sum
# to 1. Attention is not symmetric.

# %%
# CLAIM A12: fails
h = heads["small"]
Q, K = h["Q"][0], h["K"][0]  # (8, 4) each
S, S_swapped = Q @ K.T, K @ Q.T  # (8, 8)
A, A_swapped = S.softmax(-1), S_swapped.softmax(-1)
torch.testing.assert_close(S_swapped, S.T)  # the scores do transpose
print("max |softmax(Sᵀ) − softmax(S)ᵀ| =", f"{(A_swapped - A.T).abs().max().item():.4f}")
assert not torch.allclose(A_swapped, A.T, atol=1e-3)  # the weights do not
torch.testing.assert_close(A_swapped.sum(-1), torch.ones(L))
assert not torch.allclose(A.T.sum(-1), torch.ones(L), atol=1e-3)

# %% [markdown]
# ## Attention heatmaps
#
# What do BERT's heads look at? Untrained, nothing in particular. Figure 3.4 shows a tiny BERT (2 layers ×
# 4 heads, $d_\text{model} = 64$) at BERT's initialisation, $\mathcal{N}(0, 0.02^2)$, copied from Hugging
# Face's `BertModel`: with weights and width this small all scores are near zero and every row is close
# to uniform, $1/8 = 0.125$. Structure is learned; later chapters train a model and look again (claim A15
# is settled there).

# %%
# NBVAL_CHECK_OUTPUT
cfg = tfx.model.bert.BertConfig.tiny(dropout=0.0, attn_dropout=0.0)
tfx.set_seed(0)
hf_bert = transformers.BertModel(
    transformers.BertConfig(**cfg.to_hf_kwargs(), attn_implementation="eager")
)
bert = tfx.model.bert.from_huggingface(hf_bert.eval())
with torch.no_grad():
    hidden, attentions = bert(ids, output_attentions=True)  # (1, 8, 64), n_layers × (1, 4, 8, 8)
    hf_out = hf_bert(ids, output_attentions=True)
for ours_w, theirs_w in zip(attentions, hf_out.attentions, strict=True):
    torch.testing.assert_close(ours_w, theirs_w)
torch.testing.assert_close(hidden, hf_out.last_hidden_state)
grid = torch.stack(attentions)[:, 0]  # (n_layers, H, 8, 8)
show(hidden=hidden, **{f"layer{i}_weights": a for i, a in enumerate(attentions)}, grid=grid)
print(
    f"weights range over [{grid.min().item():.4f}, {grid.max().item():.4f}]; uniform is {1 / L:.4f}"
)
assert (grid - 1 / L).abs().max() < 0.02

# %%
# Figure 3.4: Attention weights of an untrained tiny BERT (2 layers of 4 heads, d_model = 64) on the
#   running example, one panel per head with queries as rows and keys as columns, coloured from 0 to
#   1. Every panel is one flat colour: at this small width BERT's initialisation leaves all scores
#   near zero, so every weight is close to the uniform 1/8.
fig = tfx.book.viz.attention_grid(
    grid,
    tokens,
    row_names=[f"layer {i}" for i in range(cfg.n_layers)],
    title="untrained tiny BERT: every head is close to uniform",
)

# %% [markdown]
# At BERT-base width ($d = 768$, 12 heads; one layer, initialised exactly as in BERT-base, and the small
# vocabulary so that it builds fast) the scores sum over 768 dimensions and the untrained weights are far
# from uniform: "close to uniform at initialisation" holds for the tiny config only.

# %%
# NBVAL_CHECK_OUTPUT
tfx.set_seed(0)
hf_base1 = transformers.BertModel(
    transformers.BertConfig(
        num_hidden_layers=1, vocab_size=len(vocab), attn_implementation="eager"
    )  # BERT-base widths
).eval()
with torch.no_grad():
    w_base = hf_base1(ids, output_attentions=True).attentions[0]  # (1, 12, 8, 8)
show(weights=w_base)
print(
    f"BERT-base width, layer 0 at init: weights from {w_base.min().item():.3f} to "
    f"{w_base.max().item():.3f}; uniform is {1 / L:.3f}"
)
assert (w_base - 1 / L).abs().max() > 0.05  # not close to uniform
assert (grid - 1 / L).abs().max() < 0.02  # while the tiny config is

# %% [markdown]
# To see what structure looks like, and to give the widget something to destroy, `pattern_attention`
# builds a layer by hand. Each token carries a one-hot of its position; head $h$ reads it with
# $W_Q = \beta I$ and $W_K = M_h$, where $M_h[i, j] = 1$ if query $i$ should look at key $j$, so the score
# is $\beta M_h[i, j] / \sqrt{d_k}$. The heads look at the previous token, the next, the token itself and
# `[CLS]`, as heads of trained BERT do (Clark et al., 2019). With $\beta = 12$ and $d_k = 8$ the target
# scores $12/\sqrt{8}$ and the other seven 0, so its weight is $e^{12/\sqrt{8}} / (e^{12/\sqrt{8}} + 7)$.

# %%
show_source(pattern_attention)

# %% tags=["widget-input"]
# NBVAL_CHECK_OUTPUT
patterns = ("previous", "next", "self", "first")
built, x_built = pattern_attention(L, patterns, sharpness=12.0, d_content=8)
with torch.no_grad():
    _, w_built = built(x_built)  # (1, 4, 8, 8)
show(x=x_built, qkv_weight=built.qkv.weight, weights=w_built)
print("argmax key per query:")
for name, row in zip(patterns, w_built[0].argmax(-1)):
    print(f"  {name:<8} {row.tolist()}")
expected = torch.tensor(
    [
        [max(i - 1, 0) for i in range(L)],
        [min(i + 1, L - 1) for i in range(L)],
        list(range(L)),
        [0] * L,
    ]
)
assert torch.equal(w_built[0].argmax(-1), expected)
beta_score = 12.0 / math.sqrt(built.d_k)
target_weight = math.exp(beta_score) / (math.exp(beta_score) + L - 1)
print(
    f"target score 12/√{built.d_k} = {beta_score:.4f}; weight on each target: formula {target_weight:.4f}, "
    f"measured min {w_built[0].max(-1).values.min().item():.4f}"
)
torch.testing.assert_close(w_built[0].max(-1).values, torch.full((4, L), target_weight))

# %%
# Figure 3.5: Attention weights of the four heads built by hand, on the running example, queries as
#   rows and keys as columns, coloured from 0 to 1: previous token, next token, the token itself and
#   the first token, [CLS]. Each query puts about 0.91 of its weight on its one target key, so each
#   head is a bright line one step below, one step above or on the diagonal, or the [CLS] column.
fig = tfx.book.viz.attention_grid(
    w_built[0], tokens, col_names=list(patterns), row_names=["built"], title="heads set by hand"
)

# %% [markdown]
# ## The decoder's two attentions, briefly
#
# A decoder layer, which the numpy article sketches, has two attentions: **causal self-attention** over
# the target so far, with lower-triangular $(B, H, L_t, L_t)$ weights, and **cross-attention**, with
# queries from the decoder and keys and values from the encoder's output (the "memory"). Its
# $(B, H, L_t, L_s)$ weights give each target token a row over all $L_s$ source tokens, with a padding
# mask on the source keys but no causal mask: the whole source is known. Here the running example
# ($L_s = 8$) is the source for a 5-token target.

# %%
# NBVAL_CHECK_OUTPUT
d, H = SIZES["base"]
d_k, L_t = d // H, 5
tfx.set_seed(0)
memory = torch.randn(1, L, d)  # (B, L_s, d): the encoder's output for the running example
target = torch.randn(1, L_t, d)  # (B, L_t, d): the decoder's input so far
self_attn = MultiHeadAttention(d, H).eval()
# cross-attention: q from target, k, v from memory
W_q_x, W_kv_x = nn.Linear(d, d), nn.Linear(d, 2 * d)
with torch.no_grad():
    t_out, t_w = self_attn(target, causal_mask(L_t))  # (1, 5, d), (1, H, 5, 5)
show(memory=memory, target=target, self_out=t_out, self_weights=t_w)
assert (t_w[0].triu(diagonal=1) == 0).all()  # causal: no target sees a later target

# %%
# NBVAL_CHECK_OUTPUT
with torch.no_grad():
    q_x = self_attn.split_heads(W_q_x(t_out))  # (1, H, 5, d_k)
    k_x, v_x = (self_attn.split_heads(t) for t in W_kv_x(memory).split(d, dim=-1))  # (1, H, 8, d_k)
    x_ctx, x_w = scaled_dot_product_attention(q_x, k_x, v_x)  # (1, H, 5, d_k), (1, H, 5, 8)
    x_out = self_attn.merge_heads(x_ctx)  # (1, 5, d)
show(cross_q=q_x, cross_k=k_x, cross_weights=x_w, cross_out=x_out)
assert tuple(x_w.shape) == (1, H, L_t, L)  # every target row spans the whole source
torch.testing.assert_close(x_w.sum(-1), torch.ones(1, H, L_t))

# %% [markdown]
# A decoder generates one token at a time, rerunning on everything so far. Its self-attention is causal,
# so earlier positions' keys and values never change and can be kept instead of recomputed: the KV cache
# of chapter 08.

# %% [markdown]
# ## Widget: perturb a live attention layer
#
# The controls perturb the hand-built layer:
#
# - **zero W_O**: the output norm drops to exactly 0 (no bias); the heatmaps do not move (claim A11);
# - **scaled head / head scale**: scale one head's context; 0 ablates it, removing its block of features;
# - **temperature** $T$: $\operatorname{softmax}(S / T)$ sharpens towards one-hot for small $T$ and
#   flattens towards uniform for large $T$;
# - **W_Q noise**: Gaussian noise on $W_Q$, relative to its RMS; the patterns blur and eventually break.
#
# `perturb` makes the perturbed copy and `perturbation_effect` compares it with the original:

# %%
show_source(perturb, perturbation_effect)

# %% [markdown]
# Each line gives the output norm, the mean cosine similarity to the unperturbed output ("n/a" when an
# output vector is zero) and the largest change of any attention weight.

# %%
tfx.book.widgets.attention_perturbation_widget(built, x_built, tokens, head_names=list(patterns))

# %% [markdown]
# What the widget prints at a few settings:

# %%
# NBVAL_CHECK_OUTPUT
settings = {
    "unperturbed": Perturbation(),
    "zero W_O": Perturbation(zero_wo=True),
    "ablate 'self'": Perturbation(head=2, head_scale=0.0),
    "temperature 0.1": Perturbation(temperature=0.1),
    "temperature 20": Perturbation(temperature=20.0),
    "W_Q noise 1.0": Perturbation(wq_noise=1.0),
}
effects = {name: perturbation_effect(built, x_built, p) for name, p in settings.items()}
for name, r in effects.items():
    print(f"{name:<16} {r.report()}")
assert effects["zero W_O"].output_norm == 0 and effects["zero W_O"].max_weight_change == 0
assert (
    effects["zero W_O"].cosine is None
    and "cosine to unperturbed: n/a" in effects["zero W_O"].report()
)
assert effects["ablate 'self'"].max_weight_change == 0 and effects["ablate 'self'"].cosine < 1
assert effects["temperature 0.1"].weights.max(-1).values.min() > 0.99  # one-hot
assert (effects["temperature 20"].weights - 1 / L).abs().max() < 0.05  # nearly uniform
assert (
    effects["temperature 20"].cosine < 0.9
)  # flattened weights: the output turns away from the original
blocks = (
    effects["ablate 'self'"].out[0].view(L, len(patterns), L)
)  # (L, H, d_k): W_O is the identity
assert (blocks[:, 2] == 0).all() and (
    blocks[:, [0, 1, 3]] != 0
).any()  # only the 'self' block is gone
assert effects["W_Q noise 1.0"].max_weight_change > 0.5  # the hand-set patterns break

# %% [markdown]
# ## The articles' other claims on this chapter's material
#
# Appendix {doc}`92 <92_ledger_attention>` settles the rest. Rows of the weights are queries, columns keys
# ({ref}`A42 <claim-a42>`, holds). Unscaled weights collapse towards one-hot ({ref}`N2 <claim-n2>`,
# holds). Without the softmax's sum, training breaks only with plain SGD ({ref}`A69 <claim-a69>`). The
# numpy article's $-10^9$ mask fails silently on a fully masked row and in float16
# ({ref}`N3 <claim-n3>`); its max-shifted softmax is stable ({ref}`N15 <claim-n15>`). The BERT article's
# class is exactly multi-head attention ({ref}`A31 <claim-a31>`); Hugging Face's `q @ kᵀ` line is where
# the article says only in transformers 4.x or on the eager path ({ref}`A68 <claim-a68>`). An attention
# map changes with the input, a convolution's mixing does not ({ref}`A43 <claim-a43>`), and
# `plot_attention` draws only 2-D weights faithfully ({ref}`N27 <claim-n27>`).
#
# ## Summary
#
# - One head is $\operatorname{softmax}(QK^{\mathsf T}/\sqrt{d_k})V$: $W_Q$ and $W_K$ decide *where* a token
#   looks, $W_V$ *what* it takes; $W_O$ mixes the heads back into $d_\text{model}$, as a sum of one
#   term per head.
# - Without $1/\sqrt{d_k}$ the softmax saturates and the gradient to $W_Q$ and $W_K$ vanishes as $d_k$
#   grows (N2 holds; A1 holds for unit-variance q and k, the paper's assumption, not BERT's init);
#   what saturates is the gap between scores (A32).
# - Masks are booleans (tfx: True = may attend; `nn.MultiheadAttention`: True = blocked). A fully
#   masked row is NaN with $-\infty$, uniform with $-10^9$ and in Hugging Face's additive mask, zero in
#   tfx. Without a causal mask every position sees both sides (A20).
# - Attention dropout zeroes weights after the softmax, in training only, and rescales the rest by
#   $1/(1-p)$: rows no longer sum to 1, but each weight keeps its expected value.
# - At initialisation $W_Q$ and $W_K$ get several times less gradient than $W_V$ and $W_O$, and $b_K$ none.
#   The softmax is not saturated, but its centring removes a share of what reaches the scores.
# - Zeroing $W_O$ silences the output, not the weights (A11); swapping $q$ and $k$ does not transpose the
#   weights (A12 fails). Untrained attention is nearly uniform only in the tiny config.
#
# ## What you can now do
#
# - Write a head by hand, split and merge many, and check them against PyTorch.
# - Derive why the scores are divided by $\sqrt{d_k}$, and measure what leaving the scale out does.
# - Build padding and causal masks, in tfx's, torch's and Hugging Face's conventions, with no NaN on a
#   fully masked row.
# - Read an attention map by its rows, tell an untrained map from learned structure, and perturb a live
#   layer to see what each matrix does.
#
# Next, chapter 04 asks what the feed-forward block does that attention does not, what it costs, and
# what happens in its $d_{ff}$ hidden units.
#
# ## Exercises
#
# Tiers: *warm-up* checks what the chapter showed, *core* applies it to a new case, *build it*
# has you write the code, *open* has no single answer.
#
# 1. *(warm-up)* **Temperature divides the scores.** On the hand-built layer, show that
#    `Perturbation(temperature=T)` with $T = 0.5$ gives the same weights as dividing every score by
#    $T$ by hand. tfx divides $W_Q$ and $b_Q$ by $T$: why is that the same thing?
# 2. *(warm-up)* **Shift invariance.** Show that adding a constant to every score of a row leaves
#    the softmax unchanged, and connect it to the rows of the softmax Jacobian summing to zero.
# 3. *(core)* **Where does unscaled attention become one-hot?** Predict first: roughly how large
#    must $d_k$ be? Find the smallest power of two $d_k$ for which the mean largest unscaled weight
#    over 8 keys exceeds 0.9.
# 4. *(warm-up)* **Padded queries.** In the padding example, are the outputs at the `[PAD]` query
#    positions zero? Why does it not matter for BERT?
# 5. *(core)* **Temperature or noise?** Which can change the hand-built "previous" head's
#    most-attended key for at least 5 of its 8 queries: the temperature (anywhere in the widget's
#    range) or noise on $W_Q$? Find the smallest noise level among 1, 2, 4, 8 and 16 that does it
#    (seed 0), and explain with the formula for the scores.
# 6. *(build it)* **Masked attention from scratch.** Write multi-head attention's core for
#    $(B, H, L, d_k)$ tensors with a boolean key-padding mask (`True` = attend), using nothing but
#    matmul, `masked_fill` and softmax, and check it against `F.scaled_dot_product_attention` on a
#    batch whose second sentence ends in two `[PAD]`.

# %% [markdown]
# :::{admonition} Solution to exercise 1
# :class: dropdown
# A score is linear in its query, $(q/T) \cdot k = (q \cdot k)/T$, and $q = x W_Q + b_Q$, so dividing
# $W_Q$ and $b_Q$ by $T$ divides every score by $T$ and leaves keys and values alone; the module's own
# `forward` runs unchanged. The code compares hand-divided scores with `perturbation_effect`.
# :::

# %% tags=["hide-cell"]
# 1. Temperature T = 0.5 equals dividing the scores by T by hand
with torch.no_grad():
    q_b, k_b, _ = built.qkv(x_built).split(built.d_model, dim=-1)  # 3 × (1, 8, d_model)
    q_b, k_b = built.split_heads(q_b), built.split_heads(k_b)  # (1, H, 8, d_k)
    w_by_hand = (q_b @ k_b.mT / math.sqrt(built.d_k) / 0.5).softmax(-1)  # (1, H, 8, 8)
torch.testing.assert_close(
    perturbation_effect(built, x_built, Perturbation(temperature=0.5)).weights, w_by_hand
)

# %% [markdown]
# :::{admonition} Solution to exercise 2
# :class: dropdown
# Adding $c$ to every score multiplies every exponential by $e^c$, which cancels:
# $e^{s_i + c} / \sum_j e^{s_j + c} = e^{s_i} / \sum_j e^{s_j}$. So the derivative along
# $\mathbf 1 = (1, \dots, 1)$ is zero, $J \mathbf 1 = 0$: with $J = \operatorname{diag}(p) - p p^{\mathsf T}$,
# row $i$ sums to $p_i - p_i \sum_j p_j = 0$.
# :::

# %% tags=["hide-cell"]
# 2. A constant shift leaves the softmax unchanged; the Jacobian's rows sum to zero
tfx.set_seed(0)
s = torch.randn(L)
torch.testing.assert_close((s + 3.7).softmax(-1), s.softmax(-1))
torch.testing.assert_close(
    softmax_jacobian(s.softmax(-1)).sum(-1), torch.zeros(L), atol=1e-6, rtol=0
)

# %% [markdown]
# :::{admonition} Solution to exercise 3
# :class: dropdown
# Without the scale the scores have standard deviation $\sqrt{d_k}$, so the gaps between a row's eight
# scores grow like $\sqrt{d_k}$ and the largest weight climbs towards 1. The saturation table brackets the
# answer (below 0.9 at $d_k = 64$, above at 256); trying each power of two gives 128.
# :::

# %% tags=["hide-cell"]
# 3. The first power of two whose unscaled mean largest weight passes 0.9
first_d_k = next(
    d for d in (2**i for i in range(1, 12)) if softmax_saturation(d, scaled=False).max_weight > 0.9
)
print("exercise 3: smallest d_k with unscaled max weight > 0.9:", first_d_k)
assert (
    sat[64, False].max_weight < 0.9 < sat[256, False].max_weight and 64 < first_d_k <= 256
)  # the table agrees

# %% [markdown]
# :::{admonition} Solution to exercise 4
# :class: dropdown
# No. The padding mask hides `[PAD]` *keys* only; a `[PAD]` *query* still takes a softmax over the six
# real keys and returns a weighted mean of their values. (The two padded rows are equal: same `[PAD]`
# embedding, same query.) Nothing reads them: the masked-LM loss uses real tokens only, the pooler reads
# `[CLS]`, and in the next layer the mask hides the padded positions again as keys.
# :::

# %% tags=["hide-cell"]
# 4. The outputs at the padded query positions are not zero
pad_norms = out_pad[1, len(short) :].norm(dim=-1)  # (2,)
print("exercise 4: norms of the padded query outputs:", pad_norms)
assert (pad_norms > 0).all()

# %% [markdown]
# :::{admonition} Solution to exercise 5
# :class: dropdown
# Only noise on $W_Q$. Temperature divides every score of a row by the same $T > 0$, which keeps their
# order, so the winner never changes. Noise $N$ changes the queries, $q_i = x_i (W_Q + N)$, and so the
# scores: $\big(\beta M_h[i, j] + (x_i N) \cdot k_j\big) / \sqrt{d_k}$. The target's lead,
# $12/\sqrt 8 \approx 4.2$, competes with a random term whose spread grows with the noise; once that
# spread is several times the lead, the winner is close to a random key. The code finds level 8.
# :::

# %% tags=["hide-cell"]
# 5. Temperature never changes the winner; noise on W_Q does from level 8 on
winner = perturbation_effect(built, x_built, Perturbation()).weights[0, 0].argmax(-1)  # (8,)


def changed(p: Perturbation) -> int:
    """How many of the 8 queries of the "previous" head have another most-attended key under p."""
    return int((perturbation_effect(built, x_built, p).weights[0, 0].argmax(-1) != winner).sum())


by_temperature = [changed(Perturbation(temperature=10**e)) for e in np.arange(-1.3, 1.31, 0.1)]
by_noise = {n: changed(Perturbation(wq_noise=float(n))) for n in (1, 2, 4, 8, 16)}
first_noise = next(n for n, c in by_noise.items() if c >= 5)
print(f"exercise 5: temperature changes {max(by_temperature)} winners anywhere in 0.05..20;")
print(
    f"   noise on W_Q (queries changed): {by_noise}; the smallest level that moves 5: {first_noise}"
)
assert max(by_temperature) == 0 and first_noise == 8

# %% [markdown]
# :::{admonition} Solution to exercise 6
# :class: dropdown
# Scores $QK^{\mathsf T}/\sqrt{d_k}$, then $-\infty$ wherever the key is padding, so the softmax
# gives those keys exactly zero weight, then the weighted sum of the values. The mask has shape
# $(B, 1, 1, L)$: it broadcasts over the heads and over the query rows, since it describes keys.
# Every row keeps at least one real key here; a row with none would be all $-\infty$ and give NaN,
# which is why tfx's own kernel uses a large finite negative number instead.
# :::


# %% tags=["hide-cell"]
# 6. Masked attention from matmul, masked_fill and softmax, against PyTorch's kernel
def masked_attention(q, k, v, keep):  # (B, H, L, d_k) each; keep: (B, 1, 1, L) bool
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (B, H, L, L)
    scores = scores.masked_fill(~keep, float("-inf"))  # padding keys get no weight
    return scores.softmax(dim=-1) @ v  # (B, H, L, d_k)


tfx.set_seed(0)
q6, k6, v6 = torch.randn(3, 2, 4, 8, 16).unbind(0)  # (B, H, L, d_k) each
keep = torch.tensor([[True] * 8, [True] * 6 + [False] * 2])[:, None, None, :]  # (2, 1, 1, 8)
ours6 = masked_attention(q6, k6, v6, keep)
torch.testing.assert_close(ours6, F.scaled_dot_product_attention(q6, k6, v6, attn_mask=keep))
print("exercise 6: equal to F.scaled_dot_product_attention; output", tuple(ours6.shape))
