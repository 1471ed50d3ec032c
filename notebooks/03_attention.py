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
# Chapter 01 followed the shapes through BERT and chapter 02 gave every token its position. This chapter
# opens the one place where tokens talk to each other: self-attention. The question is precise: given the
# eight vectors of `[CLS] 我 喜 欢 吃 苹 果 [SEP]`, what does each of $W_Q$, $W_K$, $W_V$ and $W_O$ do, why are
# the scores divided by $\sqrt{d_k}$, what exactly does a mask change, and which popular statements about
# attention are false?
#
# We compute one head by hand, split and merge heads, check `tfx` against PyTorch's own implementations,
# settle the source articles' claims A1, A11, A12, A20, N2 and N3, and end with a widget that perturbs a
# live attention layer.

# %%
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

import tfx
from tfx.attention import (
    MultiHeadAttention,
    causal_mask,
    padding_mask,
    scaled_dot_product_attention,
)
from tfx.data import RUNNING_EXAMPLE, build_vocab, running_example_ids
from tfx.probes import (
    Perturbation,
    pattern_attention,
    perturbation_effect,
    qk_variance,
    softmax_jacobian,
    softmax_saturation,
)
from tfx.shapes import show

torch.set_num_threads(2)
tokens = RUNNING_EXAMPLE
vocab = build_vocab(tokens)
ids = running_example_ids(vocab)  # (1, 8)
L = ids.size(1)
SIZES = {
    "small": (8, 2),
    "base": (768, 12),
}  # (d_model, n_heads): small prints whole, base is BERT-base

# %% [markdown]
# The running example in the book's small vocabulary. The heatmaps put the tokens themselves on their axes;
# on a machine whose fonts have no Chinese glyphs they fall back to `#i`, and this table gives the token
# behind each index.

# %%
# NBVAL_CHECK_OUTPUT
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
# $$\text{head}(X) = \operatorname{softmax}\!\left(\frac{Q K^\top}{\sqrt{d_k}}\right) V .$$
#
# The inputs below are random stand-ins for the embeddings of chapter 01 (unit variance, as after BERT's
# embedding LayerNorm); the weights are scaled by $1/\sqrt{d_\text{model}}$ so $q$ and $k$ have unit variance too.


# %%
# NBVAL_CHECK_OUTPUT
def one_head(d_model: int, n_heads: int):
    """Q, K, V, scores, weights and context of the first head, written out with plain matmuls."""
    d_k = d_model // n_heads
    tfx.set_seed(0)
    x = torch.randn(1, L, d_model)  # (1, L, d_model)
    W_Q, W_K, W_V = (
        torch.randn(d_model, d_k) / math.sqrt(d_model) for _ in range(3)
    )  # (d_model, d_k)
    Q, K, V = x @ W_Q, x @ W_K, x @ W_V  # (1, L, d_k)
    scores = Q @ K.transpose(-2, -1) / math.sqrt(d_k)  # (1, L, L)
    weights = scores.softmax(dim=-1)  # (1, L, L): each row sums to 1
    context = weights @ V  # (1, L, d_k)
    return dict(
        x=x,
        W_Q=W_Q,
        W_K=W_K,
        W_V=W_V,
        Q=Q,
        K=K,
        V=V,
        scores=scores,
        weights=weights,
        context=context,
    )


heads = {name: one_head(*size) for name, size in SIZES.items()}
for name, h in heads.items():
    print(
        f"--- {name}: d_model={SIZES[name][0]}, H={SIZES[name][1]}, d_k={SIZES[name][0] // SIZES[name][1]}"
    )
    show(**h)

# %% [markdown]
# At the small size the whole $8 \times 8$ weight matrix fits on the screen. Row $i$ says how much token $i$
# takes from each token $j$; the rows sum to 1, the columns need not.

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
# Multi-head attention does not loop over heads. It computes one $d_\text{model} \times d_\text{model}$
# projection for all heads at once, then *splits* the last axis into $H$ blocks of $d_k$ and moves the head
# axis forward, so one batched matmul computes every head's $L \times L$ scores. After attention it *merges*:
# the heads are concatenated back to $d_\text{model}$ and $W_O$ mixes them. Per-head $W_Q$ is just a block of
# columns of the full $W_Q$. (Claim A5, the BERT-base shapes $768 \times 64$, $8 \times 8$ and $768 \times 768$,
# is settled in chapter 01; here we watch the same shapes appear.)


# %%
# NBVAL_CHECK_OUTPUT
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
    # head h by itself uses the columns h·d_k … (h+1)·d_k of W_Q, W_K, W_V
    for hd in range(n_heads):
        cols = slice(hd * d_k, (hd + 1) * d_k)
        q, k, v = x @ W_Q[:, cols], x @ W_K[:, cols], x @ W_V[:, cols]  # (1, L, d_k)
        torch.testing.assert_close(concat[..., cols], (q @ k.mT / math.sqrt(d_k)).softmax(-1) @ v)
    # tfx stores nn.Linear weights (out, in), i.e. Wᵀ, with [W_Q; W_K; W_V] stacked in one fused qkv
    mha = MultiHeadAttention(d_model, n_heads, bias=False).eval()
    with torch.no_grad():
        mha.qkv.weight.copy_(torch.cat([W_Q.T, W_K.T, W_V.T]))  # (3·d_model, d_model)
        mha.out.weight.copy_(W_O.T)  # (d_model, d_model)
    ours, weights = mha(x)
    torch.testing.assert_close(ours, out)
    torch.testing.assert_close(weights, scores.softmax(-1))


for name, (d, H) in SIZES.items():
    print(f"--- {name}: d_model={d}, H={H}")
    split_merge(d, H)
print("per-head loop == batched heads == tfx.attention.MultiHeadAttention at both sizes")

# %% [markdown]
# ## Why divide by $\sqrt{d_k}$
#
# If the entries of $q$ and $k$ are independent with mean 0 and variance 1, then $q \cdot k = \sum_{m=1}^{d_k}
# q_m k_m$ is a sum of $d_k$ terms of variance 1, so $\operatorname{Var}(q \cdot k) = d_k$: the scores' spread
# grows like $\sqrt{d_k}$. Dividing by $\sqrt{d_k}$ brings the variance back to 1 whatever the head size. We
# measure it on 20 000 random pairs per $d_k$.

# %%
# NBVAL_CHECK_OUTPUT
D_KS = [4, 16, 64, 256, 1024]
variances = {d: qk_variance(d) for d in D_KS}
print(f"{'d_k':>5}  {'Var(q·k)':>9}  {'Var(q·k/√d_k) = Var/d_k':>23}")
for d, var in variances.items():
    print(f"{d:>5}  {var:>9.1f}  {var / d:>23.3f}")

# %% [markdown]
# Why does the spread matter? The softmax $p = \operatorname{softmax}(s)$ has the Jacobian
# $\partial p / \partial s = \operatorname{diag}(p) - p p^\top$. When one score is far above the others, $p$ is
# nearly one-hot, and both terms nearly cancel: the Jacobian goes to zero and the scores, and so $W_Q$ and
# $W_K$, receive almost no gradient. First we check the formula against autograd in float64.

# %%
# NBVAL_CHECK_OUTPUT
tfx.set_seed(0)
s = torch.randn(L, dtype=torch.float64)
J_auto = torch.autograd.functional.jacobian(lambda z: z.softmax(-1), s)  # (L, L)
J = softmax_jacobian(s.softmax(-1))  # (L, L)
torch.testing.assert_close(J, J_auto)
show(scores=s, jacobian=J)
print(
    f"rows of J sum to {J.sum(-1).abs().max().item():.1e}: adding a constant to every score changes nothing"
)

# %% [markdown]
# Now the measurement: for each $d_k$, 2 000 queries against $L = 8$ random keys, with and without the scale.
# We record the mean largest weight (uniform is $1/8 = 0.125$, one-hot is 1) and the mean Frobenius norm
# of the softmax Jacobian.

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
for what, key in (
    ("mean largest weight", "max_weight"),
    ("mean ‖softmax Jacobian‖", "jacobian_norm"),
):
    fig = tfx.viz.plot_curves(
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
# The gradient itself tells the same story. One query against the eight keys at $d_k = 512$, a loss that
# depends on the weights, and the gradient norm that reaches the query, with and without the scale:


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
# (claim-a1)=
# ### Claim A1: dividing by $\sqrt{d_k}$ matters
#
# **Holds.** The measured variance of $q \cdot k$ is $d_k$ within a few percent for every $d_k$ from 4 to 1024,
# and after the scale it is about 1. Without the scale the softmax Jacobian shrinks as $d_k$ grows (at
# $d_k = 1024$ it is a small fraction of its scaled value), so the gradient that reaches $W_Q$ and $W_K$
# vanishes; with the scale the Jacobian norm stays the same at every $d_k$. The argument assumes unit-variance
# $q$ and $k$, which holds at initialisation; training is free to grow the scores, so a trained head can still
# be sharp.

# %%
# CLAIM A1: holds
for d, var in variances.items():
    assert abs(var / d - 1) < 0.05, (d, var)  # Var(q·k) ≈ d_k
scaled_norms = [sat[d, True].jacobian_norm for d in D_KS]
unscaled_norms = [sat[d, False].jacobian_norm for d in D_KS]
assert (
    max(scaled_norms) / min(scaled_norms) < 1.1
)  # the scale keeps the softmax gradient constant in d_k
assert all(
    a > b for a, b in zip(unscaled_norms, unscaled_norms[1:])
)  # without it, it falls with d_k
assert sat[1024, False].jacobian_norm < 0.15 * sat[1024, True].jacobian_norm
assert grad_unscaled < 0.1 * grad_scaled

# %% [markdown]
# (claim-n2)=
# ### Claim N2: without $/\sqrt{d_k}$ the softmax weights collapse towards one-hot
#
# **Holds.** Unscaled, the mean largest weight climbs with $d_k$ towards 1 (one-hot), while the scaled weights
# keep the same, moderate peak at every $d_k$. One unscaled row at $d_k = 1024$:

# %%
# CLAIM N2: holds
tfx.set_seed(0)
q, k = torch.randn(1, 1024), torch.randn(L, 1024)
print("unscaled:", (q @ k.T).softmax(-1)[0])
print("scaled:  ", (q @ k.T / math.sqrt(1024)).softmax(-1)[0])
unscaled_peaks = [sat[d, False].max_weight for d in D_KS]
assert all(a < b for a, b in zip(unscaled_peaks, unscaled_peaks[1:]))
assert sat[1024, False].max_weight > 0.95
assert all(sat[d, True].max_weight < 0.45 for d in D_KS)

# %% [markdown]
# ## Masks
#
# A mask says which keys a query may look at. tfx's convention is a boolean tensor, **True = may attend**,
# broadcast to the $(B, H, L_q, L_k)$ scores; masked scores are set to a very negative number before the
# softmax. Two masks matter for BERT and GPT:
#
# - a **padding mask** hides the `[PAD]` keys of a short sentence in a batch;
# - a **causal mask** hides the future: query $i$ sees keys $0 \ldots i$.
#
# ### Padding
# A batch of the running example and the shorter `[CLS] 我 吃 [SEP]`, padded to $L = 8$ with `[PAD]` (id 0).
# The padding mask makes the real tokens' outputs identical to running the short sentence alone.

# %%
# NBVAL_CHECK_OUTPUT
short = ["[CLS]", "我", "吃", "[SEP]"]
batch_ids = torch.tensor(
    [[vocab[t] for t in tokens], [vocab[t] for t in short] + [0] * (L - len(short))]
)
attention_mask = (batch_ids != vocab["[PAD]"]).long()  # (2, 8): Hugging Face style, 1 = token
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
# The padded *query* rows (the last four rows above) still attend to the real tokens and produce vectors;
# they are not zero, but nothing downstream reads them: the MLM loss and the pooler skip them.
#
# ### Causal
# The causal mask is lower-triangular. Every weight above the diagonal is exactly zero.

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
# **Holds**, in the sense that matters: with no causal mask, every query attends to every non-padding key, so
# the output at a position depends on tokens both before and after it. We change 苹 (position 5) into
# `[MASK]` and see which outputs move. Without a mask, position 2 (喜) changes; with the causal mask it
# cannot, and only positions 5 to 7 change. This is why BERT can use the right context for a masked word and a
# causal language model cannot.

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
# The source article builds its causal mask by adding $-10^9$ to the forbidden scores; another common choice
# is $-\infty$. For a causal mask they agree exactly, since every row keeps at least its own key and
# $e^{-10^9 - s} = 0$ in float32. They differ on a row where *every* key is masked (a query that may see
# nothing, which happens with padding on both sides, or in cross-attention to an empty memory):
#
# - with $-\infty$ the softmax is $0/0$: NaN, which then spreads through every later layer and the loss;
# - with $-10^9$ the row becomes uniform: the query silently attends to keys it was told to ignore;
# - tfx fills with the dtype's most negative finite number and then multiplies the weights by the mask, so
#   such a row gets zero weights and a zero output.

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
    raise AssertionError("float16 accepted -1e9")  # the claim below relies on the refusal
except RuntimeError as e:
    print(f"float16 (largest finite value {torch.finfo(torch.float16).max:.0f}) with -1e9:", e)
ctx16, w16 = scaled_dot_product_attention(*qkv.half(), mask=empty)
print("tfx in float16, any NaN:", bool(ctx16.isnan().any() or w16.isnan().any()))

# %% [markdown]
# (claim-n3)=
# ### Claim N3: a causal mask built with −1e9 works
#
# **Holds only when the scores are float32 (or bfloat16) and no row is fully masked.** For a causal mask in
# float32, $-10^9$ gives exactly the same weights as $-\infty$. On a fully masked row $-\infty$ gives NaN and
# $-10^9$ gives uniform weights over forbidden keys; and in float16, whose largest magnitude is 65 504,
# `masked_fill(..., -1e9)` refuses the value outright. tfx avoids all three problems: it fills with
# `torch.finfo(dtype).min` and zeroes fully masked rows, with no NaN in float32 or float16.

# %%
# CLAIM N3: holds only when the scores are float32 or bfloat16 and no row is fully masked
assert torch.equal(causal_inf, causal_1e9) and torch.equal(bf16_inf, bf16_1e9)
assert row_inf.isnan().all()  # -inf: NaN
torch.testing.assert_close(row_1e9, torch.full((L,), 1 / L))  # -1e9: uniform over forbidden keys
assert (w_tfx[0, 3] == 0).all() and (ctx_tfx[0, 3] == 0).all()  # tfx: zeros, no NaN
assert not ctx16.isnan().any() and not w16.isnan().any()
assert torch.finfo(torch.float16).max < 1e9 < torch.finfo(torch.bfloat16).max

# %% [markdown]
# ## Checking tfx against PyTorch
#
# ### `nn.MultiheadAttention`
# `MultiHeadAttention.from_torch` copies the weights of a torch module; torch's `in_proj_weight` is exactly
# tfx's fused `qkv`. Beware the opposite mask conventions: torch's boolean `attn_mask` and `key_padding_mask`
# mean **True = not allowed**, tfx's mean True = may attend. So tfx's mask `m` becomes torch's `~m`.

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
# PyTorch's fused kernel never materialises the weights, so we compare the outputs. Its boolean `attn_mask`
# follows tfx's convention (True = take part). `is_causal=True` is the same as passing the causal mask, and
# tfx's `attn_impl="sdpa"` (which calls this kernel) matches the explicit version.

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
# tfx computes Q, K and V with one $(d, 3d)$ matmul and splits the result; the textbook form uses three
# separate $(d, d)$ projections. They are the same linear map: stacking the three weight matrices (and
# biases) gives the fused one. Fusing is meant to be faster (one large matmul instead of three small ones);
# chapter 08 (performance tuning) measures whether it is on this machine.

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
# **Holds only when the output projection has no bias.** $W_O$ acts *after* the softmax, so setting it to
# zero leaves every attention weight exactly as it was (and non-zero); what changes is the output:
#
# - without a bias the MHA output is exactly zero;
# - with a bias $b_O$ (BERT has one) the output is $b_O$ at every position;
# - in a full post-LN encoder layer, $h = \mathrm{LN}_1(x + \mathrm{MHA}(x))$ becomes $\mathrm{LN}_1(x)$ (or
#   $\mathrm{LN}_1(x + b_O)$ with the bias). The layer's output is **not** $\mathrm{LN}(x)$: the FFN
#   sublayer still runs, giving $\mathrm{LN}_2(h + \mathrm{FFN}(h))$. With attention silenced, the layer
#   treats every token on its own: changing one token changes no other token's output.

# %%
# CLAIM A11: holds only when the projection has no bias
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
    assert torch.equal(w_before, w_after) and (w_after > 0).all()  # weights unchanged, all non-zero
    if bias:
        assert m.out.bias.abs().max() > 0
        torch.testing.assert_close(out0, m.out.bias.expand_as(out0))  # the output is the bias
    else:
        assert (out0 == 0).all()  # exactly zero
    print(
        f"bias={bias}: output norm {out0.norm().item():.4f}, weights unchanged, min weight "
        f"{w_after.min().item():.4f}"
    )

tfx.set_seed(0)
layer = tfx.layers.EncoderLayer(d, H, d_ff=4 * d, dropout=0.0).eval()  # post-LN, as in BERT
captured = {}
layer.norm1.register_forward_hook(lambda mod, inp, out: captured.update(h=out))
with torch.no_grad():
    layer.attn.out.weight.zero_()
    b_O = layer.attn.out.bias.clone()
    y = layer(xs)
    torch.testing.assert_close(
        captured["h"], layer.norm1(xs + b_O)
    )  # the attention sublayer gives LN(x + b_O)
    layer.attn.out.bias.zero_()
    y = layer(xs)
    h = layer.norm1(xs)
    torch.testing.assert_close(captured["h"], h)  # ... and LN(x) without the bias
    torch.testing.assert_close(y, layer.norm2(h + layer.ff(h)))  # the full layer: LN2(h + FFN(h))
    assert (y - h).abs().max() > 0.1  # so the layer's output is not LN(x)
    xs2 = xs.clone()
    xs2[0, 5] = torch.randn(
        d
    )  # replace token 5 only (adding a constant would be undone by LayerNorm)
    moved = (layer(xs2) - y).norm(dim=-1)[0]  # (8,)
print("full layer, change per position after editing token 5:", moved)
assert (moved[torch.arange(L) != 5] == 0).all() and moved[5] > 0.1  # no token mixing left

# %% [markdown]
# (claim-a12)=
# ### Claim A12: swapping q and k transposes the attention weights
#
# **Fails.** Swapping the roles of $q$ and $k$ does transpose the *scores*: $K Q^\top = (Q K^\top)^\top$. But
# the softmax normalises each row, and the rows of $S^\top$ are the columns of $S$, so
# $\operatorname{softmax}(S^\top) \neq \operatorname{softmax}(S)^\top$: the rows of the first sum to 1, the rows of
# the second do not. Attention is not symmetric, even in self-attention, because $W_Q \ne W_K$ and because
# of the row-wise normalisation.

# %%
# CLAIM A12: fails
h = heads["small"]
Q, K = h["Q"][0], h["K"][0]  # (8, 4) each
S, S_swapped = Q @ K.T, K @ Q.T  # (8, 8)
A, A_swapped = S.softmax(-1), S_swapped.softmax(-1)
torch.testing.assert_close(S_swapped, S.T)  # the scores do transpose
print("max |softmax(Sᵀ) − softmax(S)ᵀ| =", f"{(A_swapped - A.T).abs().max().item():.4f}")
print("row sums of softmax(S)ᵀ:", A.T.sum(-1))
assert not torch.allclose(A_swapped, A.T, atol=1e-3)  # the weights do not
torch.testing.assert_close(A_swapped.sum(-1), torch.ones(L))
assert not torch.allclose(A.T.sum(-1), torch.ones(L), atol=1e-3)

# %% [markdown]
# ## Attention heatmaps
#
# What do the heads of BERT look at? The honest answer for a model that has not been trained: nothing in
# particular. Below are the weights of a tiny BERT (2 layers × 4 heads, $d_\text{model} = 64$) straight from
# BERT's initialisation, $\mathcal{N}(0, 0.02^2)$: with such small weights all scores are near zero and every
# row is close to uniform, $1/8 = 0.125$. Structure in attention maps is learned; the later chapters train a
# model and look again (claim A15, about reading attention maps, is settled there).
#
# The model is a Hugging Face `BertModel` built from a config (no download) with its weights copied into
# `tfx.bert.BertModel` by `tfx.bert.from_huggingface`; `output_attentions=True` returns one $(B, H, L, L)$
# weight tensor per layer from both, and we assert they agree.

# %%
# NBVAL_CHECK_OUTPUT
import transformers

cfg = tfx.bert.BertConfig.tiny(dropout=0.0, attn_dropout=0.0)
tfx.set_seed(0)
hf_bert = transformers.BertModel(
    transformers.BertConfig(**cfg.to_hf_kwargs(), attn_implementation="eager")
)
bert = tfx.bert.from_huggingface(hf_bert.eval())
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
fig = tfx.viz.attention_grid(
    grid,
    tokens,
    row_names=[f"layer {i}" for i in range(cfg.n_layers)],
    title="untrained tiny BERT: every head is close to uniform",
)

# %% [markdown]
# To see what structure looks like, and to give the widget below something to destroy, we build a layer by
# hand (`tfx.probes.pattern_attention`). Each token vector carries a one-hot of its position; head $h$ reads
# it with $W_Q = \beta I$ and $W_K = M_h$, where $M_h[i, j] = 1$ if query $i$ should look at key $j$, so the
# score is $\beta M_h[i, j] / \sqrt{d_k}$. The four heads look at the previous token, the next token, the
# token itself, and `[CLS]`: patterns that Clark et al. (2019, "What Does BERT Look At?") report in heads of
# trained BERT. With $\beta = 12$ and $d_k = 8$ the target key scores $12/\sqrt{8}$ and the
# other seven score 0, so the target gets weight $e^{12/\sqrt{8}} / (e^{12/\sqrt{8}} + 7)$; the cell prints the
# formula's value next to the measured weight.

# %%
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
fig = tfx.viz.attention_grid(
    w_built[0], tokens, col_names=list(patterns), row_names=["built"], title="heads set by hand"
)

# %% [markdown]
# ## Widget: perturb a live attention layer
#
# The controls perturb the hand-built layer above, and the kernel recomputes everything on each change:
#
# - **zero W_O**: $W_O = 0$. The layer has no bias, so the printed output norm drops to exactly 0, while the
#   heatmaps do not move at all (claim A11);
# - **scaled head / head scale**: multiply one head's context by a factor (0 ablates it). The weights stay,
#   the output loses that head's block of features;
# - **temperature** $T$: $\operatorname{softmax}(S / T)$. Small $T$ sharpens towards one-hot, large $T$
#   flattens to uniform, and the cosine to the unperturbed output falls;
# - **W_Q noise**: Gaussian noise on $W_Q$, relative to its RMS. The patterns blur and eventually break.
#
# Each line prints the output norm, the mean cosine similarity to the unperturbed output, and the largest
# change of any attention weight. The same function, `tfx.probes.perturbation_effect`, is what the tests push
# to the extremes of every control.

# %%
tfx.widgets.attention_perturbation_widget(built, x_built, tokens, head_names=list(patterns))

# %% [markdown]
# What the widget prints at a few settings, computed by the same pure function:

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
# ## Summary
#
# - One head is $\operatorname{softmax}(QK^\top/\sqrt{d_k})V$: $W_Q$ and $W_K$ decide *where* a token looks,
#   $W_V$ decides *what* it takes, and $W_O$ mixes the heads' results back into $d_\text{model}$.
# - Multi-head attention is one projection, a `view` and a `transpose` into $(B, H, L, d_k)$, one batched
#   matmul, and the reverse; tfx matches a per-head loop, `nn.MultiheadAttention` and
#   `F.scaled_dot_product_attention`.
# - $\operatorname{Var}(q\cdot k) = d_k$; without $1/\sqrt{d_k}$ the softmax saturates and its Jacobian, hence
#   the gradient to $W_Q$ and $W_K$, vanishes as $d_k$ grows (A1, N2 hold).
# - Masks are booleans (tfx: True = may attend; torch's `nn.MultiheadAttention`: True = blocked). $-10^9$ works
#   for a causal mask in float32, but a fully masked row gives NaN with $-\infty$, uniform weights with
#   $-10^9$, and float16 rejects $-10^9$ (N3 holds only when…); tfx returns zeros.
# - Zeroing $W_O$ silences the attention output but leaves the weights; a post-LN layer then acts on each
#   token alone (A11 holds only without a bias). Swapping $q$ and $k$ does not transpose the weights (A12 fails).
# - Untrained attention is nearly uniform; structure has to be learned.
#
# ## Exercises
#
# 1. **Temperature is a scale on $W_Q$.** Show that `Perturbation(temperature=T)` gives the same weights
#    as multiplying every score by $1/T$ by hand, for $T = 0.5$ on the hand-built layer.
# 2. **Shift invariance.** Show that adding the same constant to every score of a row leaves the softmax
#    unchanged, and connect it to the rows of the softmax Jacobian summing to zero.
# 3. **Where does unscaled attention become one-hot?** Find the smallest $d_k$ among powers of two for which
#    the mean largest unscaled weight over 8 keys exceeds 0.9.
# 4. **Padded queries.** In the padding example, are the outputs at the `[PAD]` query positions zero? Why
#    does it not matter for BERT? (Hint: what reads them?)
# 5. **Open question.** In the hand-built layer, which perturbation do you need to make the "previous" head
#    point at a different token for most queries: temperature or noise on $W_Q$? Try the widget, then
#    explain with the formula for the scores.

# %% tags=["hide-input"]
# Solutions to exercises 1-4
# 1. temperature T divides every score by T: the same weights as scaling the scores by hand
with torch.no_grad():
    q_b, k_b, _ = built.qkv(x_built).split(built.d_model, dim=-1)  # 3 × (1, 8, d_model)
    q_b, k_b = built.split_heads(q_b), built.split_heads(k_b)  # (1, H, 8, d_k)
    w_by_hand = (q_b @ k_b.mT / math.sqrt(built.d_k) / 0.5).softmax(-1)  # (1, H, 8, 8)
torch.testing.assert_close(
    perturbation_effect(built, x_built, Perturbation(temperature=0.5)).weights, w_by_hand
)

# 2. softmax(s + c) = e^c e^s / (e^c Σ e^s) = softmax(s); so moving along (1, …, 1) changes nothing: J·1 = 0
tfx.set_seed(0)
s = torch.randn(L)
torch.testing.assert_close((s + 3.7).softmax(-1), s.softmax(-1))
torch.testing.assert_close(
    softmax_jacobian(s.softmax(-1)).sum(-1), torch.zeros(L), atol=1e-6, rtol=0
)

# 3. the first power of two whose unscaled mean largest weight passes 0.9
first_d_k = next(
    d for d in (2**i for i in range(1, 12)) if softmax_saturation(d, scaled=False).max_weight > 0.9
)
print("exercise 3: smallest d_k with unscaled max weight > 0.9:", first_d_k)
assert (
    sat[64, False].max_weight < 0.9 < sat[256, False].max_weight and 64 < first_d_k <= 256
)  # the table agrees

# 4. padded queries attend to the real keys, so their outputs are not zero; no loss or pooler reads them
pad_norms = out_pad[1, len(short) :].norm(dim=-1)  # (4,)
print("exercise 4: norms of the padded query outputs:", pad_norms)
assert (pad_norms > 0).all()
