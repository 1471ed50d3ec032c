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
# # 92 · Ledger: attention
#
# Chapter {doc}`03 <03_attention>` keeps the source articles' claims that teach something about
# attention, each as a short box after its idea: the $1/\sqrt{d_k}$ scale (A1), where the softmax
# saturates (A32), bidirectionality (A20), zeroing $W_O$ (A11) and swapping $q$ and $k$ (A12). This
# appendix holds the articles' other claims on the same material: how to read the rows and columns
# of a weight matrix, the one-hot collapse that the chapter's table already shows, a training
# experiment on the softmax's normalisation, the numpy article's mask, softmax and plotting code,
# the BERT article's attention class checked against PyTorch's, the source line Hugging Face uses,
# and attention against a convolution. They are
# settled by the same rules as in the chapters: a label and a heading, the verdict and why, and a
# cell that computes the evidence and ends in `assert`s; the appendix {doc}`90 <90_claims_ledger>`
# says more about the ledger. Each section rebuilds what its claim needs from `tfx`, so the
# notebook runs on its own; nothing here downloads anything. One cell trains six one-layer models
# (claim A69) and takes most of the notebook's time.

# %%
import tfx  # first: importing tfx quiets torchao's import-time log lines (tfx/__init__.py)

# isort: split
import inspect
import math

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import transformers
from transformers.models.bert import modeling_bert

from tfx.core import RUNNING_EXAMPLE, build_vocab, running_example_ids, show
from tfx.inspect import softmax_saturation
from tfx.learn import WEIGHTINGS, train_reverse
from tfx.model import MultiHeadAttention, scaled_dot_product_attention

tokens = RUNNING_EXAMPLE
vocab = build_vocab(tokens)
ids = running_example_ids(vocab)  # (1, 8)
L = ids.size(1)
torch.set_printoptions(precision=3, sci_mode=False)  # as in chapter 03
tfx.banner()

# %% [markdown]
# ## Chapter 03: attention, matrix by matrix
#
# The claims below come in the order chapter {doc}`03 <03_attention>` teaches their material: the
# weight matrix of one head, the softmax, masks, the checks against PyTorch and Hugging Face, and
# attention maps.

# %% [markdown]
# (claim-a42)=
# ### Claim A42: rows of the score matrix are queries, columns are keys, and each row of weights sums to 1
#
# **Holds.** "Row $i$ belongs to query $i$" is checkable: change only query $i$ and only row $i$ of the
# weights may move; change only key $j$ and column $j$ moves in every row (and, through the
# normalisation, the rest of each row with it). The cell does both on chapter 03's small head (rebuilt
# first), checks the row sums of a Hugging Face `BertModel`'s weights (built from a config, eager
# attention so that it returns them), measures how far the *column* sums are from 1, and checks that
# the book's heatmaps label their axes that way (`tfx.book.viz.attention_grid`: rows "query", columns "key").

# %%
# chapter 03's small head, rebuilt: d_model = 8, one head of d_k = 4, the running example's length
tfx.set_seed(0)
x = torch.randn(1, L, 8)  # (1, L, d_model)
W_Q, W_K, W_V = (torch.randn(8, 4) / math.sqrt(8) for _ in range(3))  # (d_model, d_k)
Q, K, V = x @ W_Q, x @ W_K, x @ W_V  # (1, L, d_k)
h = dict(Q=Q, K=K, V=V, weights=scaled_dot_product_attention(Q, K, V)[1])  # weights (1, L, L)

# %%
# CLAIM A42: holds: row i is query i, column j is key j, rows sum to 1 and columns do not
Q1, K1, V1 = h["Q"].clone(), h["K"].clone(), h["V"]  # (1, 8, d_k) each
Q1[0, 3] += 1.0  # move query 3 only
w_q = scaled_dot_product_attention(Q1, h["K"], V1)[1][0]  # (8, 8)
K1[0, 5] += 1.0  # move key 5 only
w_k = scaled_dot_product_attention(h["Q"], K1, V1)[1][0]  # (8, 8)
rows_moved = ((w_q - h["weights"][0]).abs().amax(-1) > 0).nonzero().flatten().tolist()
col5_moved = ((w_k - h["weights"][0])[:, 5].abs() > 1e-4).sum().item()
print(
    f"query 3 moved: rows that changed {rows_moved}; key 5 moved: column 5 changed in {col5_moved} rows"
)
assert rows_moved == [3] and col5_moved == L

tfx.set_seed(0)
hf_small = transformers.BertModel(
    transformers.BertConfig(
        **tfx.model.bert.BertConfig.tiny().to_hf_kwargs(), attn_implementation="eager"
    )
).eval()
with torch.no_grad():
    hf_w = torch.stack(hf_small(ids, output_attentions=True).attentions)  # (layers, 1, H, 8, 8)
row_gap = (hf_w.sum(-1) - 1).abs().max().item()
col_gap = (hf_w.sum(-2) - 1).abs().max().item()
print(
    f"Hugging Face BERT: largest |row sum − 1| {row_gap:.1e}, largest |column sum − 1| {col_gap:.3f}"
)
assert row_gap < 1e-5 and col_gap > 0.01
fig = tfx.book.viz.attention_grid(h["weights"], tokens, col_names=["head 0"])
assert fig.axes[0].get_ylabel() == "query" and fig.axes[0].get_xlabel() == "key"
plt.close(fig)

# %% [markdown]
# (claim-n2)=
# ### Claim N2: without $/\sqrt{d_k}$, do the softmax weights collapse towards one-hot?
#
# **Holds, and so does the article's second half: the gradient vanishes.** Chapter {doc}`03 <03_attention>`
# measures the mean largest weight of 2 000 queries against 8 keys for each $d_k$ (section *Why
# divide by $\sqrt{d_k}$*, with {ref}`A1 <claim-a1>`); the first cell repeats that measurement.
# Unscaled, the mean largest weight climbs with $d_k$ towards 1, and the norm of the softmax's
# Jacobian, the factor every gradient through the weights passes, falls with it; scaled, both stay
# moderate at every $d_k$. The second cell prints one row at $d_k = 1024$.

# %%
# chapter 03's measurement, rebuilt: mean largest weight and Jacobian norm, with and without the scale
D_KS = [4, 16, 64, 256, 1024]
sat = {(d, scaled): softmax_saturation(d, scaled) for d in D_KS for scaled in (True, False)}

# %%
# CLAIM N2: holds
tfx.set_seed(0)
q, k = torch.randn(1, 1024), torch.randn(L, 1024)
print("unscaled:", (q @ k.T).softmax(-1)[0])
print("scaled:  ", (q @ k.T / math.sqrt(1024)).softmax(-1)[0])
unscaled_peaks = [sat[d, False].max_weight for d in D_KS]
unscaled_jac = [sat[d, False].jacobian_norm for d in D_KS]
print("Jacobian norm, unscaled:", ", ".join(f"{j:.3f}" for j in unscaled_jac))
print("Jacobian norm, scaled:  ", ", ".join(f"{sat[d, True].jacobian_norm:.3f}" for d in D_KS))
assert all(a < b for a, b in zip(unscaled_peaks, unscaled_peaks[1:]))
assert sat[1024, False].max_weight > 0.95
assert all(a > b for a, b in zip(unscaled_jac, unscaled_jac[1:]))  # the gradient vanishes …
assert unscaled_jac[-1] < 0.5 * min(sat[d, True].jacobian_norm for d in D_KS)  # … unlike scaled
assert all(sat[d, True].max_weight < 0.45 for d in D_KS)

# %% [markdown]
# (claim-a69)=
# ### Claim A69: without the softmax normalisation, do the gradients explode so the model cannot train?
#
# **Holds only when the optimiser is plain SGD at a learning rate that suits softmax.** Drop the
# division by $\sum_j e^{s_j}$ and each output is $\sum_j e^{s_j} v_j$, a sum of $L$ terms instead of a
# weighted mean: with random values its norm grows like $\sqrt{L}$, and so does the gradient, while the
# normalised output *shrinks* (a mean of more vectors). The first cell measures both at
# $L = 8, 64, 512$ on unit-variance $q, k, v$ with the $1/\sqrt{d_k}$ scale, in float64.
#
# "Cannot train" is a claim about training, so the second cell trains
# (`tfx.learn.unnormalised.train_reverse`): one attention layer with learned positions writes random
# sequences of length 64 backwards, which needs each query to find one key. Three weightings get
# the same model, steps and seed: softmax, the article's case (exp without the sum), and sigmoid
# attention with a $-\log L$ bias, which is also unnormalised but bounded. With plain SGD at a
# learning rate where softmax learns, exp without the sum overflows to nan: the article's
# sentence, as stated. With Adam, which divides each step by the gradient's own running size, the
# same layer trains; and the sigmoid layer trains with either optimiser. So what breaks is the
# *scale* of the unnormalised sum, not the absence of a normalisation.

# %%
# NBVAL_CHECK_OUTPUT
growth = {}
for L_a in (8, 64, 512):
    tfx.set_seed(0)
    q = torch.randn(L_a, 64, dtype=torch.float64, requires_grad=True)  # (L, d_k)
    k, v = torch.randn(2, L_a, 64, dtype=torch.float64)  # (L, d_k) each
    probe = torch.randn(L_a, 64, dtype=torch.float64)  # a fixed random loss direction
    for name, weigh in (("softmax", lambda s: s.softmax(-1)), ("exp, no sum", torch.exp)):
        q.grad = None
        o = weigh(q @ k.T / 8.0) @ v  # (L, d_k)
        (o * probe).sum().backward()
        growth[L_a, name] = (o.norm(dim=-1).mean().item(), q.grad.norm(dim=-1).mean().item())
    print(
        f"L = {L_a:>3}: mean output norm {growth[L_a, 'softmax'][0]:6.2f} (softmax) vs "
        f"{growth[L_a, 'exp, no sum'][0]:6.1f} (unnormalised); gradient at q "
        f"{growth[L_a, 'softmax'][1]:5.2f} vs {growth[L_a, 'exp, no sum'][1]:6.1f}"
    )
slopes = {}  # growth exponent from L = 8 to L = 512: 0.5 means "like sqrt(L)"
for i, what in enumerate(("output", "gradient")):
    for name in ("softmax", "exp, no sum"):
        slopes[what, name] = math.log(growth[512, name][i] / growth[8, name][i]) / math.log(64)
print("growth exponents in L:", {f"{w}, {n}": round(v, 2) for (w, n), v in slopes.items()})
for what in ("output", "gradient"):
    assert 0.4 < slopes[what, "exp, no sum"] < 0.75  # grows like sqrt(L)
    assert slopes[what, "softmax"] < 0  # normalised: it shrinks instead

# %%
# CLAIM A69: holds only when the optimiser is plain SGD at a learning rate that suits softmax: exp without the sum then overflows to nan; with Adam it trains, and unnormalised sigmoid attention trains with either
runs = {
    (opt, w): train_reverse(w, optimizer=opt, lr=1.0 if opt == "sgd" else 3e-3)
    for opt in ("sgd", "adam")
    for w in WEIGHTINGS
}
for (opt, w), r in runs.items():
    last = f"{r.losses[-1]:.3f}" if r.finite else "nan"
    print(
        f"{opt:<4} {w:<16} first gradient norm {r.first_grad_norm:7.3f}   final loss {last:>6}   "
        f"accuracy {r.accuracy:.2f}"
    )
ratio = runs["sgd", "exp, no sum"].first_grad_norm / runs["sgd", "softmax"].first_grad_norm
print(f"first gradient, exp without the sum / softmax: {ratio:.0f}x")
assert ratio > 100  # "the gradients explode": at the first step, by orders of magnitude
assert not runs["sgd", "exp, no sum"].finite  # "cannot train", with SGD at softmax's rate
assert runs["sgd", "softmax"].accuracy > 0.5 and runs["sgd", "sigmoid − log L"].accuracy > 0.9
assert runs["adam", "exp, no sum"].finite and runs["adam", "exp, no sum"].accuracy > 0.5
assert min(runs["adam", w].accuracy for w in ("softmax", "sigmoid − log L")) > 0.99

# %% [markdown]
# (claim-n3)=
# ### Claim N3: does a causal mask built by adding −1e9 work?
#
# Chapter 03's masks use `masked_fill` ({doc}`03 <03_attention>`, section *Masks*); the numpy article
# does something else. It builds the mask as
# `np.triu(np.ones((L, L)), k=1)` (1 = forbidden), *subtracts* $10^9$ times it from the scores, and then
# applies a softmax that first subtracts each row's maximum, all in numpy's default float64. As written,
# its $(3, 3)$ mask is subtracted from its $(3, 8, 8)$ multi-head scores, and numpy refuses to broadcast
# the two (a ValueError; the cell shows it). So the technique is tested here on one head's correctly
# split $(8, 8)$ scores: the article's mask and softmax, in float64, float32 and float16, once with the
# causal mask, and once with one row fully masked (as when the causal mask is combined with a padding
# mask that hides a whole row's keys).
#
# **Holds only when the heads are split so that the scores are $(H, L, L)$ (as written, numpy raises:
# {ref}`N14 <claim-n14>`), the dtype is float32 or float64, and no row is fully masked.** The
# article's own code meets the last two (numpy float64, a causal mask alone) and fails the first.
# What the cell measures:
#
# - causal mask, float64 and float32: every forbidden weight is exactly 0 and the allowed weights are the
#   softmax of the allowed scores. It works.
# - fully masked row, float64: all eight scores drop by the same $10^9$, which float64 represents with
#   room to spare ($s - 10^9$ keeps about 7 decimals of $s$), the row maximum is subtracted, and the row
#   comes out as the *unmasked* softmax: the query silently attends to the keys it was told to ignore,
#   with the weights it would have had without the mask.
# - fully masked row, float32: near $10^9$ float32 numbers are 64 apart, so $s - 10^9$ rounds every score
#   to the same number and the row is *uniform*, again over forbidden keys.
# - float16: $10^9$ overflows to $\infty$, and $\infty \cdot 0 = \text{NaN}$ in every *allowed* position,
#   so even the plain causal mask turns every weight into NaN.
#
# Nothing raises in any of these cases. tfx's `scaled_dot_product_attention` (chapter 03) gives a fully masked
# row zero weights in every dtype.


# %%
def article_masked_softmax(scores: np.ndarray, forbidden: np.ndarray) -> np.ndarray:
    """The numpy article's causal attention weights: scores − 1e9·mask, then a max-shifted softmax."""
    s = scores - 1e9 * forbidden  # (L, L), in the dtype of scores and mask
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


try:  # the article's own shapes: a (3, 3) mask against (3, 8, 8) scores
    article_masked_softmax(np.zeros((3, 8, 8)), np.triu(np.ones((3, 3)), k=1))
    raise AssertionError("numpy broadcast a (3, 3) mask over (3, 8, 8) scores")
except ValueError as e:
    print("the article's shapes:", str(e).split("\n")[0])

# %%
rng = np.random.default_rng(0)
scores64 = rng.standard_normal((L, L))  # (8, 8) float64, numpy's default
n3 = {}
for dtype in (np.float64, np.float32, np.float16):
    sc = scores64.astype(dtype)
    causal_fb = np.triu(np.ones((L, L), dtype=dtype), k=1)  # 1 = forbidden, the article's mask
    full_fb = causal_fb.copy()
    full_fb[3] = 1  # query 3 may see nothing
    with np.errstate(invalid="ignore", over="ignore"):
        w_causal = article_masked_softmax(sc, causal_fb)
        w_full = article_masked_softmax(sc, full_fb)
    allowed = np.tril(np.ones((L, L), dtype=bool))
    expected = np.where(
        allowed, np.exp(sc - np.where(allowed, sc, -np.inf).max(-1, keepdims=True)), 0
    )
    expected = expected / expected.sum(-1, keepdims=True)  # softmax over the allowed keys only
    unmasked = np.exp(sc[3] - sc[3].max()) / np.exp(sc[3] - sc[3].max()).sum()
    n3[dtype.__name__] = dict(
        causal_nan=bool(np.isnan(w_causal).any()),
        causal_gap=float(np.abs(w_causal - expected).max()),
        row=w_full[3],
        to_unmasked=float(np.abs(w_full[3] - unmasked).max()),
        to_uniform=float(np.abs(w_full[3] - 1 / L).max()),
    )
    r = n3[dtype.__name__]
    causal_text = "NaN" if r["causal_nan"] else f"largest gap {r['causal_gap']:.0e}"
    row_text = np.array2string(r["row"].astype(float), precision=3)
    print(f"{dtype.__name__:>7}: causal mask {causal_text}; fully masked row {row_text}")
    print(
        f"{'':>9}fully masked row vs the unmasked softmax {r['to_unmasked']:.1e}, "
        f"vs uniform {r['to_uniform']:.1e}"
    )

# %%
# CLAIM N3: holds only when the scores are split into (H, L, L) (the article's (3, 3) mask against its (3, 8, 8) scores raises, N14), in float32/float64, and no row is fully masked (it silently fails)
for name in ("float64", "float32"):
    assert not n3[name]["causal_nan"] and n3[name]["causal_gap"] < 1e-6  # the causal mask works
assert n3["float64"]["to_unmasked"] < 1e-6  # float64: the forbidden keys, unmasked weights
assert n3["float64"]["to_uniform"] > 0.05
assert n3["float32"]["to_uniform"] < 1e-6  # float32: uniform over the forbidden keys
assert n3["float16"]["causal_nan"] and np.isnan(n3["float16"]["row"]).all()  # float16: NaN

# %% [markdown]
# (claim-n15)=
# ### Claim N15: subtracting the row maximum makes the softmax numerically stable
#
# **Holds.** $e^{1000}$ overflows float64 (whose largest value is about $1.8 \cdot 10^{308} \approx
# e^{709.8}$), so a softmax that exponentiates the raw scores $[1000, 1001, 1002]$ computes
# $\infty / \infty = \text{NaN}$. Subtracting the row maximum first, as the numpy article does, changes
# nothing mathematically (shift invariance again) and keeps every exponent $\le 0$, so nothing
# overflows. In float16 the naive version breaks much earlier, at inputs above $\ln 65504 \approx 11.1$.
# The cell compares the article's shifted softmax with the naive one and with `torch.softmax`.

# %%
# CLAIM N15: holds: the shifted softmax matches torch where the naive one gives NaN


def naive_softmax(s: np.ndarray) -> np.ndarray:
    e = np.exp(s)
    return e / e.sum(axis=-1, keepdims=True)


def shifted_softmax(s: np.ndarray) -> np.ndarray:  # the article's form
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


big = np.array([1000.0, 1001.0, 1002.0])
with np.errstate(over="ignore", invalid="ignore"):
    naive_big, naive_16 = (
        naive_softmax(big),
        naive_softmax(np.array([12.0, 11.0], dtype=np.float16)),
    )
print("naive   [1000, 1001, 1002]:", naive_big)
print("shifted [1000, 1001, 1002]:", shifted_softmax(big))
print("naive float16 [12, 11]:    ", naive_16)
small = np.random.default_rng(0).standard_normal((4, 8))  # (4, 8): inputs where both work
assert np.isnan(naive_big).all() and np.isnan(naive_16).any()  # NaN where exp overflowed
np.testing.assert_allclose(shifted_softmax(big), torch.tensor(big).softmax(-1).numpy(), rtol=1e-12)
np.testing.assert_allclose(shifted_softmax(small), naive_softmax(small), rtol=1e-12)
assert not np.isnan(shifted_softmax(np.array([12.0, 11.0], dtype=np.float16))).any()

# %% [markdown]
# (claim-a31)=
# ### Claim A31: attention is softmax(QKᵀ/√d_k)V, and the article's class is exactly multi-head attention
#
# **Holds.** The BERT article's class has one bias-free $(d, 3d)$ projection split into three with
# `chunk`, a `view` + `transpose` into $(B, H, L, d_k)$, the scaled softmax, a `transpose` +
# `contiguous` + `view` back, and a bias-free $W_O$. The cell rebuilds that forward pass at BERT-base size
# on the running example's length, copies the same two weight matrices into PyTorch's
# `nn.MultiheadAttention(bias=False)` (whose `in_proj_weight` is also the stacked $[W_Q; W_K; W_V]$), and
# also computes the heads with `F.scaled_dot_product_attention`. All three must agree, and the article's
# weights must come out as $(1, 12, 8, 8)$.

# %%
# CLAIM A31: holds: the article's class equals nn.MultiheadAttention(bias=False) and SDPA
d, H = 768, 12  # BERT-base: d_model, heads
d_k = d // H
tfx.set_seed(0)
W_qkv, W_o = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d, bias=False)
x_a = torch.randn(1, L, d)  # (1, 8, 768)
with torch.no_grad():
    q, k, v = W_qkv(x_a).chunk(3, dim=-1)  # 3 × (1, 8, 768)
    q, k, v = (t.view(1, L, H, d_k).transpose(1, 2) for t in (q, k, v))  # (1, 12, 8, 64)
    art_w = (q @ k.transpose(-2, -1) / d_k**0.5).softmax(-1)  # (1, 12, 8, 8)
    art_ctx = art_w @ v  # (1, 12, 8, 64)
    art_out = W_o(art_ctx.transpose(1, 2).contiguous().view(1, L, d))  # (1, 8, 768)
    ref = nn.MultiheadAttention(d, H, bias=False, batch_first=True).eval()
    ref.in_proj_weight.copy_(W_qkv.weight)  # (2304, 768)
    ref.out_proj.weight.copy_(W_o.weight)  # (768, 768)
    ref_out, ref_w = ref(x_a, x_a, x_a, average_attn_weights=False)
    sdpa_ctx = F.scaled_dot_product_attention(q, k, v)  # (1, 12, 8, 64)
show(article_weights=art_w, article_out=art_out, torch_out=ref_out)
gaps = {
    "output vs nn.MultiheadAttention": (art_out - ref_out).abs().max().item(),
    "weights vs nn.MultiheadAttention": (art_w - ref_w).abs().max().item(),
    "heads vs F.scaled_dot_product_attention": (art_ctx - sdpa_ctx).abs().max().item(),
}
for what, g in gaps.items():
    print(f"largest gap, {what}: {g:.1e}")
assert tuple(art_w.shape) == (1, H, L, L)
assert max(gaps.values()) < 1e-5

# %% [markdown]
# (claim-a68)=
# ### Claim A68: Hugging Face's `BertSelfAttention` computes `q @ k.transpose(-2, -1)`
#
# **Holds only for the article's library version or the eager path.** In transformers 4.x, the version
# of the article's era, `BertSelfAttention.forward` itself computed
# `torch.matmul(query_layer, key_layer.transpose(-1, -2))`. In the installed 5.x,
# `BertSelfAttention.forward` projects and reshapes $Q$, $K$, $V$ and then hands them to
# an attention function chosen by `config._attn_implementation`. The default for a model built from a
# config is `"sdpa"` (PyTorch's fused kernel, which never forms the weights); only `"eager"` runs
# `eager_attention_forward`, whose score line is a `torch.matmul` of the query with the key transposed
# on its last two axes. The cell reads the sources, checks the default, and checks numerically that the
# eager weights equal `softmax(q @ k.transpose(-2, -1) / 8)` computed by hand from the layer's own
# `query` and `key` projections, and that the sdpa path gives the same output.

# %%
# CLAIM A68: holds only when the library is transformers 4.x or attention runs eager: in 5.x BertSelfAttention delegates, and sdpa is the default
forward_src = inspect.getsource(modeling_bert.BertSelfAttention.forward)
eager_src = inspect.getsource(modeling_bert.eager_attention_forward)
default_impl = transformers.BertModel(
    transformers.BertConfig(**tfx.model.bert.BertConfig.tiny().to_hf_kwargs())
).config._attn_implementation
score_lines = [ln.strip() for ln in eager_src.splitlines() if "key.transpose(" in ln]
print(f"transformers {transformers.__version__}: default attention implementation {default_impl}")
print("eager score line:", *score_lines)
print("matmul in BertSelfAttention.forward:", "matmul" in forward_src or " @ " in forward_src)
assert default_impl == "sdpa"
assert not ("matmul" in forward_src or " @ " in forward_src)
assert score_lines and "torch.matmul(query, key.transpose(" in score_lines[0]

layer0 = hf_small.encoder.layer[0].attention  # the eager tiny BERT of claim A42
with torch.no_grad():
    x0 = hf_small.embeddings(ids)  # (1, 8, 64): what layer 0 reads
    sa = layer0.self
    split = (1, L, sa.num_attention_heads, sa.attention_head_size)
    qh = sa.query(x0).view(split).transpose(1, 2)  # (1, H, 8, d_k)
    kh = sa.key(x0).view(split).transpose(1, 2)  # (1, H, 8, d_k)
    by_hand = (qh @ kh.transpose(-2, -1) / sa.attention_head_size**0.5).softmax(-1)
    eager_w = hf_small(ids, output_attentions=True).attentions[0]  # (1, H, 8, 8)
    eager_out = hf_small(ids).last_hidden_state
    hf_small.set_attn_implementation("sdpa")
    sdpa_out = hf_small(ids).last_hidden_state
    hf_small.set_attn_implementation("eager")
torch.testing.assert_close(eager_w, by_hand)
torch.testing.assert_close(sdpa_out, eager_out, rtol=1e-5, atol=1e-5)
print("eager weights == softmax(q @ k.transpose(-2, -1) / sqrt(d_k)); sdpa output == eager output")

# %% [markdown]
# (claim-a43)=
# ### Claim A43: an attention map changes with the input while the parameters stay fixed, unlike a convolution kernel
#
# **Holds.** Both layers mix tokens linearly *for a given input*: output $i$ is a weighted sum over
# positions. For a convolution the mixing weights are the kernel, the same for every input; for attention
# they are the softmax of the input's own scores. The cell measures the mixing matrix (the Jacobian of the
# output with respect to the input) of a `Conv1d` for two different inputs, and the attention weights of
# one `MultiHeadAttention` for the same two inputs, with the parameters of both untouched in between.

# %%
# CLAIM A43: holds: the same attention parameters give different maps for different inputs
d, H = 8, 2  # chapter 03's small size: d_model, heads
tfx.set_seed(0)
attn_a43 = MultiHeadAttention(d, H).eval()
conv = nn.Conv1d(d, d, kernel_size=3, padding=1).eval()
x_one, x_two = torch.randn(2, 1, L, d)  # two inputs, (1, 8, d) each
with torch.no_grad():
    w_one, w_two = attn_a43(x_one)[1], attn_a43(x_two)[1]  # (1, H, 8, 8) each


def conv_mixing(x: torch.Tensor) -> torch.Tensor:
    """d conv(x) / d x, as a (L·d, L·d) matrix: how the convolution mixes its input here."""
    f = lambda z: conv(z.transpose(1, 2)).transpose(1, 2)  # noqa: E731  (1, L, d) → (1, L, d)
    return torch.autograd.functional.jacobian(f, x).reshape(L * d, L * d)


map_change = (w_one - w_two).abs().max().item()
conv_change = (conv_mixing(x_one) - conv_mixing(x_two)).abs().max().item()
print(f"attention: largest change of a weight between the two inputs {map_change:.3f}")
print(f"convolution: largest change of its mixing matrix {conv_change:.1e}")
assert map_change > 0.05 and conv_change == 0.0

# %% [markdown]
# (claim-n27)=
# ### Claim N27: `plot_attention` shows the attention weights
#
# **Holds only when the weights are a 2-D matrix.** The numpy article's `plot_attention` hands its `weights` to
# `plt.imshow`, with one tick label per source token on the x axis and per target token on the y axis.
# That works for one head's $(L_q, L_k)$ matrix. The article's own multi-head code computes its weights
# as `np.matmul(Q, K.transpose(0, 2, 1))` with $Q, K$ of shape $(3, 8, 64)$ (chapter 09's N14): a
# $(3, 8, 8)$ array, which `imshow` refuses with a TypeError. So on its own weights the plot fails loudly.
# The quiet failure comes once the heads are split correctly, $(H, L, L)$, for a sentence of three tokens:
# `imshow` reads any array whose last axis has length 3 as an RGB *image* and draws an $8 \times 3$ colour
# picture with no error; so does any $(\cdot, \cdot, 3)$ array. The cell calls the article's plotting
# code on the four shapes and checks what `imshow` received. The book's own `tfx.book.viz.attention_grid`
# refuses any shape other than (rows, H, L, L) or (H, L, L) with L = the number of tokens.


# %%
def article_plot_attention(weights, src_tokens, tgt_tokens):
    """The numpy article's plot: imshow of the weights, source tokens on x and target tokens on y."""
    fig = plt.figure(figsize=(3, 3))
    try:
        image = plt.imshow(weights, cmap="viridis")
        plt.xticks(range(len(src_tokens)), src_tokens, rotation=90)
        plt.yticks(range(len(tgt_tokens)), tgt_tokens)
        plt.colorbar()
    finally:
        plt.close(fig)  # the claim is about what imshow received; no figure is shown
    return image


# %%
# CLAIM N27: holds only when the weights are 2-D: the article's own (3, 8, 8) weights raise a TypeError, and (H, L, L) with L = 3 silently draws an RGB image
tfx.set_seed(0)
three = ["I", "love", "NLP"]
cases = {
    "(3, 3): one head": torch.rand(3, 3).softmax(-1),
    "(3, 8, 8): the article's own weights": torch.rand(3, 8, 8).softmax(-1),
    "(8, 3, 3): (H, L, L), L = 3": torch.rand(8, 3, 3).softmax(-1),
    "(3, 8, 3): any (·, ·, 3)": torch.rand(3, 8, 3).softmax(-1),
}
drawn = {}
for name, wts in cases.items():
    try:
        drawn[name] = article_plot_attention(wts.numpy(), three, three).get_array().shape
    except TypeError as e:
        drawn[name] = f"TypeError: {e}"
    print(f"{name:<36} → {drawn[name]}")
assert drawn["(3, 3): one head"] == (3, 3)
assert str(drawn["(3, 8, 8): the article's own weights"]).startswith("TypeError")
assert drawn["(8, 3, 3): (H, L, L), L = 3"] == (8, 3, 3)  # an RGB picture, 8 × 3 pixels
assert drawn["(3, 8, 3): any (·, ·, 3)"] == (3, 8, 3)
try:
    tfx.book.viz.attention_grid(cases["(3, 8, 3): any (·, ·, 3)"], three)
    raise AssertionError("attention_grid should refuse (3, 8, 3)")
except ValueError as e:
    print("tfx.book.viz.attention_grid:", e)
