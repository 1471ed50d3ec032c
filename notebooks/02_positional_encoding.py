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
# # 02 · Positional encoding
#
# **The question.** Attention compares every token with every other token, and nothing in that comparison
# knows which token came first. How much does attention alone ignore order, exactly? What does the
# sinusoidal encoding of the original Transformer add, what does BERT do instead, and what do the newer
# schemes (RoPE, ALiBi) change?
#
# Plan: prove the blindness (permutation equivariance); build the sinusoidal table and find its one exact
# property, a rotation; check against Hugging Face that BERT's positions are learned and that the order of
# the embedding sum does not matter; meet the 512-position wall; implement RoPE and ALiBi and show that
# their scores depend only on the offset between two tokens; then drop, shuffle and reverse the positions
# of a live model and watch its output. Along the way the source articles' claims about positions
# (A2, A4, A33, A34, A35, A61, A62, A63, N12, N13) are settled, each by a cell that can fail.

# %%
import tfx  # first: importing tfx quiets torchao's import-time log lines (tfx/__init__.py)

# isort: split
import inspect
import itertools
import math

import numpy as np
import torch
import transformers
from torch.testing import assert_close
from transformers.models.bloom.modeling_bloom import build_alibi_tensor
from transformers.models.llama.modeling_llama import (
    LlamaAttention,
    LlamaRotaryEmbedding,
    apply_rotary_pos_emb,
)

from tfx.attention import MultiHeadAttention
from tfx.bert import BertConfig, BertModel, from_huggingface
from tfx.data import RUNNING_EXAMPLE, running_example_ids
from tfx.grads import grad_norms
from tfx.layers import EncoderLayer
from tfx.position import (
    alibi_bias,
    alibi_slopes,
    apply_rope,
    sinusoidal_encoding,
    sinusoidal_rotation,
    sinusoidal_wavelengths,
)
from tfx.probes import diagonal_spread, position_effect
from tfx.shapes import show
from tfx.source import show_source

tfx.banner()

# %% [markdown]
# ## Attention without positions is blind to order
#
# Let $P$ be a permutation matrix that reorders the $L$ tokens. Every part of an encoder layer commutes with
# it: the projections and the FFN act on each row alone, LayerNorm too, and
# $\operatorname{softmax}(PQ (PK)^\top)PV = P\operatorname{softmax}(QK^\top)P^\top P V$. So
# $f(PX) = P f(X)$: shuffle the input rows and you get the same output rows, shuffled. The cell checks it on
# a multi-head attention module and on a whole encoder layer, with the running example's 8 tokens.

# %%
# NBVAL_CHECK_OUTPUT
tfx.set_seed(0)
x = torch.randn(1, 8, 64)  # (B, L, d): 8 token vectors, no positions added
perm = torch.randperm(8)
mha = MultiHeadAttention(64, 4).eval()
layer = EncoderLayer(64, 4, 256, dropout=0.0).eval()
with torch.no_grad():
    out, _ = mha(x)
    out_perm, _ = mha(x[:, perm])
    assert_close(out_perm, out[:, perm])  # MHA(P x) = P MHA(x)
    assert_close(layer(x[:, perm]), layer(x)[:, perm], rtol=1e-5, atol=1e-5)
print("permutation:", perm.tolist())
print("shuffled order in, same vectors out, shuffled the same way: equivariant")
show(x=x, out=out)

# %% [markdown]
# (claim-a33)=
# ### Claim A33: without positional information the model sees its input as an unordered set
#
# **Holds**, in the precise form just derived: without position vectors every layer is
# permutation-equivariant, so "我 喜 欢 吃 苹 果" and "苹 果 吃 我 喜 欢" give each character the same output
# vector, and any order-free summary of the outputs (their mean, say) is identical. The cell tests the
# whole model, not one layer: a Hugging Face `BertModel` built from a config, on the running example and
# on a reordering of it, first with its position table as initialised and then with the table zeroed.
# The assert on the first case is what makes the test able to fail: with positions, the same reordering
# must change the vectors.

# %%
# CLAIM A33: holds: with its position table zeroed, BERT's outputs are the same vectors, permuted
tfx.set_seed(0)
hf_blind = transformers.BertModel(
    transformers.BertConfig(**BertConfig.tiny().to_hf_kwargs())
).eval()
ids = running_example_ids()  # (1, 8)
order = [0, 5, 6, 4, 1, 2, 3, 7]  # [CLS] 苹 果 吃 我 喜 欢 [SEP]
print(" ".join(RUNNING_EXAMPLE[i] for i in order))


def reorder_gap(model) -> tuple:
    """Largest change of a token's output vector, and of the mean output, when the tokens move."""
    with torch.no_grad():
        h = model(input_ids=ids).last_hidden_state  # (1, 8, d)
        h_re = model(input_ids=ids[:, order]).last_hidden_state  # (1, 8, d)
    return (h_re - h[:, order]).abs().max().item(), (h_re.mean(1) - h.mean(1)).abs().max().item()


with_pos = reorder_gap(hf_blind)
with torch.no_grad():
    hf_blind.embeddings.position_embeddings.weight.zero_()
without_pos = reorder_gap(hf_blind)
print(f"with positions:    token vectors move by {with_pos[0]:.3f}, the mean by {with_pos[1]:.3f}")
print(
    f"without positions: token vectors move by {without_pos[0]:.1e}, the mean by {without_pos[1]:.1e}"
)
assert with_pos[0] > 0.1 and with_pos[1] > 0.01  # positions make order visible ...
assert without_pos[0] < 1e-5 and without_pos[1] < 1e-5  # ... and without them it is not

# %% [markdown]
# ## The sinusoidal encoding
#
# The original Transformer adds to token $p$ a fixed vector with, for each pair of dimensions
# $(2i, 2i+1)$, an angular frequency $\omega_i = \text{base}^{-2i/d}$ (base $= 10000$):
#
# $$PE(p, 2i) = \sin(p\,\omega_i), \qquad PE(p, 2i+1) = \cos(p\,\omega_i).$$
#
# Pair $i$ is a point going round a circle as $p$ grows, at its own speed; the first pair turns one radian per
# position (wavelength $2\pi$), the last almost $10000\times$ slower. Read along a row, a position is a
# set of clock hands; read down a column, a dimension is a sinusoid in $p$.

# %% [markdown]
# tfx builds the table in float64 and casts at the end (`tfx.position.sinusoidal_encoding`):

# %%
show_source(sinusoidal_encoding)

# %%
# NBVAL_CHECK_OUTPUT
pe = sinusoidal_encoding(512, 768)  # (max_len, d_model): BERT-base's size
show(pe=pe)
print("PE(0) =", pe[0, :6].tolist(), "...")
assert torch.all(pe[0, 0::2] == 0) and torch.all(pe[0, 1::2] == 1)

# %% [markdown]
# (claim-n12)=
# ### Claim N12: the numpy `positional_encoding` function implements the sinusoidal formula
#
# **Holds only when $d_\text{model}$ is even.** The numpy article computes the frequencies as
# $\exp(2i \cdot (-\ln 10000 / d))$ over `arange(0, d, 2)` and writes sines into the even columns and cosines
# into the odd ones. The cell re-implements that construction in numpy float64 (the article's dtype) and
# compares it entry by entry with the formula $\sin(p / 10000^{2i/d})$, $\cos(p / 10000^{2i/d})$ evaluated
# directly, and with tfx. For an odd $d$ there are $\lceil d/2 \rceil$ frequencies but only
# $\lfloor d/2 \rfloor$ odd columns, and numpy refuses the assignment.


# %%
# CLAIM N12: holds only when d_model is even; for an odd d_model the construction raises
def numpy_article_pe(max_len: int, d_model: int) -> np.ndarray:
    """The numpy article's construction: exp-log frequencies, sin on even and cos on odd columns."""
    table = np.zeros((max_len, d_model))  # (max_len, d_model), float64
    pos = np.arange(max_len)[:, None]  # (max_len, 1)
    freq = np.exp(np.arange(0, d_model, 2) * (-np.log(10000.0) / d_model))  # (ceil(d/2),)
    table[:, 0::2] = np.sin(pos * freq)
    table[:, 1::2] = np.cos(pos * freq)
    return table


p_idx, i_idx = np.meshgrid(np.arange(100), np.arange(256), indexing="ij")  # (100, 256) each
angle = p_idx / 10000 ** (2 * i_idx / 512)  # the formula itself, pos / 10000^(2i/d)
article = numpy_article_pe(100, 512)  # the article's max_len and d_model
gap_formula = max(
    np.abs(article[:, 0::2] - np.sin(angle)).max(), np.abs(article[:, 1::2] - np.cos(angle)).max()
)
gap_tfx = np.abs(article - sinusoidal_encoding(100, 512, dtype=torch.float64).numpy()).max()
print(f"d = 512: largest gap to the formula {gap_formula:.1e}, to tfx {gap_tfx:.1e}")
assert gap_formula < 1e-12 and gap_tfx < 1e-12
try:
    numpy_article_pe(10, 7)
    raise AssertionError("an odd d_model should not go through")
except ValueError as e:
    print("d = 7:", e)
    assert "could not broadcast" in str(e)

# %%
fig = tfx.viz.plot_pe(sinusoidal_encoding(128, 128), position=20, dim=10)

# %% [markdown]
# Left: the table for the first 128 positions and 128 dimensions; the left columns flicker, the right ones
# barely move. Right: column 10 (pair 5, a sine) against position, with position 20 marked.
#
# The wavelengths, $2\pi / \omega_i = 2\pi \cdot \text{base}^{2i/d}$, form a geometric sequence:

# %%
# NBVAL_CHECK_OUTPUT
wl = sinusoidal_wavelengths(768)  # (d/2,)
for i in (0, 1, 10, 100, 200, 383):
    print(f"pair {i:>3} (dims {2 * i}, {2 * i + 1}): wavelength {wl[i].item():>10,.1f} positions")
assert_close(wl[0].item(), 2 * math.pi)
assert wl[-1].item() < 2 * math.pi * 10000
assert torch.all(wl[1:] / wl[:-1] - 10000 ** (2 / 768) < 1e-9)  # a constant ratio between pairs

# %%
fig = tfx.viz.plot_curves(
    range(len(wl)),
    {"wavelength 2π·10000^(2i/768)": wl.tolist()},
    xlabel="pair i",
    ylabel="positions",
    logy=True,
    title="sinusoidal PE: wavelength per dimension pair",
    vlines={"wavelength = 512": int((wl < 512).sum())},
)

# %% [markdown]
# Only the pairs left of the dashed line complete a full period within BERT's 512 positions.
#
# (claim-a34)=
# ### Claim A34: the high dimensions carry fine position, the low dimensions coarse position, and this is learnable
#
# **Fails: it is the other way round, and nothing in it is learned.** Pair $i$ has wavelength
# $2\pi\cdot 10000^{2i/d}$, which *grows* with $i$: dimensions 0 and 1 turn by one radian per position
# and tell neighbours apart, dimensions 766 and 767 barely move over 512 positions and only say "early"
# or "late". The cell measures it from the table: the mean change of each dimension between neighbouring
# positions. As for "learnable": the table is a fixed function of $(p, i)$ with no parameter; a model can
# learn to *read* it, but the encoding itself has nothing to train.

# %%
# CLAIM A34: fails: the low dimensions carry fine position and the high dimensions coarse position
pe512 = sinusoidal_encoding(512, 768, dtype=torch.float64)  # (512, 768)
step = (pe512[1:] - pe512[:-1]).abs().mean(0)  # (768,): mean change between neighbours, per dim
for lo, hi in ((0, 2), (100, 102), (400, 402), (766, 768)):
    print(f"dims {lo}-{hi - 1}: mean change from one position to the next {step[lo:hi].mean():.2e}")
ratio = (step[:2].mean() / step[-2:].mean()).item()
print(f"dims 0-1 change {ratio:,.0f} times more per position than dims 766-767")
assert ratio > 1000  # fine position lives in the LOW dimensions
assert torch.all(step[0:10:2] > step[-10::2])  # and the sine columns agree, pair by pair

# %% [markdown]
# ### The dot product depends on the distance only
#
# Using $\sin a \sin b + \cos a \cos b = \cos(a - b)$ pair by pair,
#
# $$PE(p)\cdot PE(p+k) = \sum_i \cos(k\,\omega_i),$$
#
# a function of $k$ alone, whatever $p$ is. The cell checks it for three starting positions and plots it.

# %%
# NBVAL_CHECK_OUTPUT
pe64 = sinusoidal_encoding(1024, 768, dtype=torch.float64)  # (1024, 768)
ks = torch.arange(0, 400)
omega = 2 * math.pi / sinusoidal_wavelengths(768)  # (d/2,)
formula = torch.cos(ks[:, None] * omega).sum(-1)  # (K,)
for p in (0, 37, 500):
    dots = (pe64[p] * pe64[p + ks]).sum(-1)  # (K,)
    assert_close(dots, formula)
print(
    f"PE(p)·PE(p+k): k=0 → {formula[0]:.1f} (= d/2), k=1 → {formula[1]:.2f}, k=10 → {formula[10]:.2f}, "
    f"k=100 → {formula[100]:.2f}"
)
assert torch.all(formula[1:] < formula[0])
assert (formula[1:] > formula[:-1]).any()  # it rises again in places: not monotone

# %%
fig = tfx.viz.plot_curves(
    ks.tolist(),
    {"PE(p)·PE(p+k), any p": formula.tolist()},
    xlabel="offset k",
    ylabel="dot product",
    title="similarity of two positions against their distance",
)

# %% [markdown]
# The similarity falls fast over the first few offsets and then wobbles; it is not monotone, so "nearer
# positions are more similar" is only roughly true.

# %% [markdown]
# (claim-a2)=
# ### Claim A2: sinusoidal PE extrapolates past the training length because sin and cos are periodic, and its vectors are linearly separable
#
# **Fails as argued.** The article gives sinusoidal encodings two virtues: they reach "far beyond the
# training length (train at 512, infer at 1024) *because sin/cos are periodic*", and the vectors of
# different positions are "linearly separable, which makes positions easy to learn". Each part, checked:
#
# - **The reason is wrong.** Each pair of dimensions is periodic, but with periods from $2\pi$ to
#   $2\pi \cdot 10000$ positions that share no common multiple, so the whole vector never repeats on the
#   integer positions, and that is exactly what lets it name them: a periodic code would give two
#   positions one vector. The cell checks that no two of the first 2,048 positions come closer than a
#   clear margin.
# - **"Linearly separable" is true and says nothing.** It holds for *any* set of distinct vectors of
#   equal norm. If $\lVert v_p \rVert = r$ for all $p$, Cauchy–Schwarz gives $v_p \cdot v_q < r^2$ for
#   every $q \ne p$, so the hyperplane $v_p \cdot x = r^2 - \delta$ (for a small enough margin $\delta$)
#   cuts $v_p$ off from all the others. Every sinusoidal vector has norm $\sqrt{d/2}$; so does a random
#   table (a learned table at initialisation) once its rows are rescaled to that norm. The cell measures
#   the margin $r^2 - \max_{q \ne p} v_p \cdot v_q$ for both: positive for both, and larger for the random
#   one. Separability is no reason to prefer the sinusoids.
# - **The extrapolation itself fails for a trained model.** The formula gives a vector for any $p$, but
#   chapter 07 trained the same small BERT with each kind of position and tested it past its training
#   length: the sinusoidal model keeps under a tenth of its accuracy above chance there (claims N10 and
#   A17), no better than a learned table.
#
# What *is* true of the sinusoids, and what the Transformer paper actually said, is a rotation: by the
# angle-addition formulas, each pair $(\sin p\omega_i, \cos p\omega_i)$ at position $p + k$ is the pair at
# $p$ turned by the angle $k\omega_i$, so
#
# $$PE(p+k) = R_k\, PE(p), \qquad R_k = \operatorname{blockdiag}\left(\begin{bmatrix}\cos k\omega_i & \sin k\omega_i\\ -\sin k\omega_i & \cos k\omega_i\end{bmatrix}\right)_i,$$
#
# one orthogonal matrix per offset $k$, the same for every $p$: a fixed linear map moves any position by
# $k$. The cell builds $R_k$ from $k$ alone (`tfx.position.sinusoidal_rotation`), checks it against every
# position, including positions past 512 that BERT never sees, and checks $R_k = R_1^k$. RoPE (below)
# puts this rotation inside attention.

# %%
# CLAIM A2: fails as argued: the vector never repeats (periodicity is not the reason), separability holds for any equal-norm vectors, and a trained model does not extrapolate (chapter 07, N10)
for k in (1, 7, 100, 400):
    R = sinusoidal_rotation(k, 768)  # (d, d), built without looking at any position
    assert_close(pe64[: 1024 - k] @ R.T, pe64[k:])  # every p from 0 to 1023 - k, beyond 512 too
    assert_close(R @ R.T, torch.eye(768, dtype=torch.float64))  # orthogonal: a rotation
assert_close(torch.linalg.matrix_power(sinusoidal_rotation(1, 768), 7), sinusoidal_rotation(7, 768))
assert_close(pe64.norm(dim=-1), torch.full((1024,), math.sqrt(768 / 2), dtype=torch.float64))
print(
    "PE(p+k) = R_k PE(p) for k in (1, 7, 100, 400) and every p < 1024 - k; R_k orthogonal; R_7 = R_1^7"
)


def separation_margin(table: torch.Tensor) -> float:
    """min over rows p of |v_p|² − max_(q≠p) v_p·v_q: > 0 iff each row is cut off by a hyperplane."""
    gram = table @ table.T  # (N, N)
    others = gram - torch.diag(torch.full((len(table),), math.inf, dtype=table.dtype))
    return (gram.diagonal() - others.amax(-1)).min().item()


tfx.set_seed(0)
random_table = 0.02 * torch.randn(1024, 768, dtype=torch.float64)  # (1024, 768): BERT's init
random_table *= math.sqrt(768 / 2) / random_table.norm(dim=-1, keepdim=True)  # equal norms
m_sin, m_rand = separation_margin(pe64), separation_margin(random_table)
print(
    f"separation margin (|v|² = {768 / 2:.0f}): sinusoidal {m_sin:.1f}, random table {m_rand:.1f}"
)
assert m_sin > 0 and m_rand > 0  # both tables are linearly separable, row by row
assert m_rand > m_sin  # and the random one by the wider margin

pe_long = sinusoidal_encoding(2048, 768, dtype=torch.float64)  # (2048, 768)
sq = (pe_long**2).sum(-1)  # (2048,)
dist2 = sq[:, None] + sq[None, :] - 2 * pe_long @ pe_long.T  # (2048, 2048) squared distances
dist2.fill_diagonal_(math.inf)
closest = dist2.min().clamp_min(0).sqrt().item()
print(
    f"closest two of the first 2,048 positions: distance {closest:.2f} "
    f"(each vector has norm {math.sqrt(768 / 2):.1f})"
)
assert closest > 1  # no position repeats another: the code is not periodic on the positions

# %% [markdown]
# ### Adding the table to the embeddings
#
# The encoding is *added* to the token embeddings, so the two have to be of comparable size: if one is
# much larger, the sum is mostly that one.
#
# (claim-n13)=
# ### Claim N13: adding position encodings to 0.01-scaled embeddings keeps both the position and the token
#
# **Fails in effect.** The numpy article draws its embedding table as $0.01\cdot\mathcal{N}(0, 1)$ with
# $d = 512$, so a token vector has norm about $0.01\sqrt{512} \approx 0.23$, while every sinusoidal vector
# has norm $\sqrt{256} = 16$: the position outweighs the token about 70 to 1. The token is not erased
# (the sum is still a different vector for every token), but it is a small perturbation of the position:
# swapping the token moves the input much less than moving it by one position, and the cosine of two
# *different* tokens at the same position is almost 1. The Transformer paper multiplies the embeddings by
# $\sqrt{d_\text{model}}$ before adding the encoding; with the article's 0.01 table that would still leave
# the position about 3 times larger. The cell rebuilds the article's construction in numpy float64, for
# its tokens `[10, 23, 45]` and its table of 10 000 rows.

# %%
# CLAIM N13: fails in effect: the position outweighs a 0.01-scaled token about 70 to 1
rng = np.random.default_rng(0)
emb_table = 0.01 * rng.standard_normal((10000, 512))  # (vocab, d_model): the article's table
pe_np = numpy_article_pe(100, 512)  # (100, 512)
tok_ids = np.array([10, 23, 45])
x_in = emb_table[tok_ids] + pe_np[:3]  # (3, 512): the article's input
ratio_np = np.linalg.norm(pe_np[:3], axis=-1) / np.linalg.norm(emb_table[tok_ids], axis=-1)  # (3,)
token_swap = np.linalg.norm(emb_table[10] - emb_table[23])  # same position, another token
one_step = np.linalg.norm(pe_np[1:] - pe_np[:-1], axis=-1).min()  # same token, next position


def cosine(a, b) -> float:
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


cos_tokens = cosine(x_in[0], emb_table[23] + pe_np[0])  # token 10 vs token 23, both at position 0
ratio_paper = np.linalg.norm(pe_np[:3], axis=-1) / np.linalg.norm(
    math.sqrt(512) * emb_table[tok_ids], axis=-1
)
print("|PE| / |token embedding| per token:", np.round(ratio_np, 1).tolist())
print(
    f"swapping the token moves the input by {token_swap:.3f}; one position step by >= {one_step:.3f}"
)
print(f"cosine of two different tokens at position 0: {cos_tokens:.5f}")
print("with the paper's sqrt(d_model) scale on the embeddings:", np.round(ratio_paper, 1).tolist())
assert ratio_np.min() > 50  # the position dominates the sum
assert one_step > 10 * token_swap and cos_tokens > 0.999  # the token barely moves the input
assert ratio_paper.max() < 5  # the paper's scale brings the two to comparable size

# %% [markdown]
# ## BERT's positions are learned
#
# BERT does not use the sinusoids. Its position "encoding" is a table of 512 trained vectors, exactly like
# the token table. We check that in Hugging Face's implementation (a model built from a config, so no
# download): the position embedding is an `nn.Embedding` whose weight requires a gradient, gets one, and
# changes after an optimizer step. Only the rows of positions that occurred (0–7 here) get a gradient; the
# other rows stay as they were, which is the whole story of why a learned table knows nothing about
# positions it was never trained on.

# %%
# NBVAL_CHECK_OUTPUT
tfx.set_seed(0)
hf_cfg = transformers.BertConfig(**BertConfig.tiny().to_hf_kwargs())
hf = transformers.BertModel(hf_cfg).eval()  # eval: no dropout, so the run is deterministic
table = hf.embeddings.position_embeddings
print(
    type(table).__name__, tuple(table.weight.shape), "requires_grad =", table.weight.requires_grad
)
before = table.weight.detach().clone()
opt = torch.optim.SGD(hf.parameters(), lr=0.1)
direction = torch.randn(
    hf_cfg.hidden_size
)  # (d,): a loss that is not constant under the final LayerNorm
cls = hf(input_ids=ids).last_hidden_state[:, 0]  # (1, d): the [CLS] output vector
loss = cls @ direction  # (1,): the [CLS] vector along one direction
loss.sum().backward()
row_norms = table.weight.grad.norm(dim=-1)  # (max_len,)
show(cls=cls, position_table=table.weight)  # the table's gradient norm, all 128 rows
print("grad norm of position rows 0..9:", [f"{n:.4g}" for n in row_norms[:10].tolist()])
print(grad_norms(hf.embeddings))  # every embedding parameter: all three tables get a gradient
opt.step()
moved = (table.weight.detach() - before).abs().amax(dim=-1) > 0  # (max_len,)
print(f"rows changed by one SGD step: {moved.nonzero().flatten().tolist()}")
assert isinstance(table, torch.nn.Embedding) and table.weight.requires_grad
assert moved[:8].all() and not moved[8:].any()
assert torch.all(row_norms[:8] > 0) and torch.all(row_norms[8:] == 0)
assert row_norms[0] > 100 * row_norms[1:8].max()  # the [CLS] row, read by the loss (next paragraph)

# %% [markdown]
# Row 0 gets by far the largest gradient (more than 100 times any other row, asserted above) because
# this loss reads the `[CLS]` output, which sits at position 0, and the residual path carries its gradient
# straight back to that row; the other rows only get what flows back through attention.
#
# tfx's BERT has the same table (`LearnedPositionalEmbedding`), and with the weights copied across its
# embeddings equal Hugging Face's:

# %%
# NBVAL_CHECK_OUTPUT
ours = from_huggingface(hf)
with torch.no_grad():
    e_hf = hf.embeddings(input_ids=ids)  # (1, 8, 64)
    e_ours = ours.embeddings(ids, torch.zeros_like(ids))  # (1, 8, 64)
assert_close(e_ours, e_hf, rtol=1e-5, atol=1e-5)
show(e_hf=e_hf, e_ours=e_ours, position_table=ours.embeddings.pos.weight)

# %% [markdown]
# (claim-a4)=
# ### Claim A4: BERT adds sinusoidal PE to the token and segment embeddings, and the order of the three terms matters because LayerNorm follows
#
# **Fails on its premise; of the order, only "add before LayerNorm" holds.** First, BERT's position
# embeddings are learned, not sinusoidal (the article contradicts itself here: its section 2.2 names
# BERT's positions `torch.nn.Embedding(512, 768)`, a learned table, and section 3.1 says they are
# computed by the sin/cos formula and not learned). Second, "the order cannot be reversed, because
# LayerNorm acts on the fused vector" has two readings. Read as the order of the three *addends*, it
# fails: addition is commutative, and LayerNorm only sees the finished sum; the one real effect is
# float rounding, where $(a+b)+c$ and $a+(b+c)$ can differ in the last bit. Read as the order of the
# two *steps*, add and then normalise, it holds: normalising each term and then adding is a different
# function, since $\mathrm{LN}(a+b+c) \ne \mathrm{LN}(a)+\mathrm{LN}(b)+\mathrm{LN}(c)$.
#
# The cell settles all of it on a *fresh* model (the one above was moved by the SGD step). It builds a
# Hugging Face `BertModel` from a config and asserts that its position table is an `nn.Embedding`, that
# the table receives a gradient, and that it is not the sinusoidal table. Then it copies the weights into
# tfx, adds the three embeddings of the running example in all six orders, and measures the largest
# difference in *ulps* (units in the last place: the spacing of float32 numbers at that magnitude). An
# ulp of $|a+b+c|$ can be tiny where the three terms nearly cancel, so the gap is also given in ulps of
# the largest intermediate sum, which is what rounding error is proportional to. Last, it swaps the two
# steps.

# %%
# CLAIM A4: fails: BERT's positions are a learned table, and the three terms add in any order up to rounding; only "sum before LayerNorm" holds
tfx.set_seed(0)
fresh = transformers.BertModel(transformers.BertConfig(**BertConfig.tiny().to_hf_kwargs())).eval()
table = fresh.embeddings.position_embeddings
sin_table = sinusoidal_encoding(*table.weight.shape)  # (max_len, d): what the claim says it is
direction = torch.randn(fresh.config.hidden_size)  # (d,): a loss LayerNorm does not make constant
(fresh.embeddings(input_ids=ids) @ direction).sum().backward()
used_rows = table.weight.grad.norm(dim=-1)[:8]  # (8,): the rows of positions 0..7
print(f"{type(table).__name__} {tuple(table.weight.shape)}, grad norms of rows 0..7:")
print("  ", [f"{g:.2e}" for g in used_rows.tolist()])
print(f"largest |learned − sinusoidal| entry: {(table.weight - sin_table).abs().max().item():.3f}")
assert isinstance(table, torch.nn.Embedding) and table.weight.requires_grad
assert torch.all(used_rows > 0)  # the table is trained by backprop
assert not torch.allclose(table.weight, sin_table, atol=0.1)  # and it is not the sinusoidal table

emb = from_huggingface(fresh).embeddings
with torch.no_grad():
    terms = {  # each (1, 8, d)
        "token": emb.tok(ids),
        "segment": emb.seg(torch.zeros_like(ids)),
        "position": emb.pos(8).expand(1, 8, -1),
    }
    orders = list(itertools.permutations(terms))
    sums = {o: terms[o[0]] + terms[o[1]] + terms[o[2]] for o in orders}  # (a + b) + c
    normed = {o: emb.norm(s) for o, s in sums.items()}
    partial = torch.stack([(terms[o[0]] + terms[o[1]]).abs() for o in orders]).amax(0)  # (1, 8, d)
ref, ref_norm = sums[orders[0]], normed[orders[0]]
ulp_sum = torch.from_numpy(np.spacing(ref.abs().numpy()))  # (1, 8, d)
ulp_partial = torch.from_numpy(np.spacing(torch.maximum(partial, ref.abs()).numpy()))
gap = torch.stack([(s - ref).abs() for s in sums.values()]).amax(0)  # (1, 8, d)
gap_norm = max((n - ref_norm).abs().max().item() for n in normed.values())
print(
    f"6 orders: largest gap {(gap / ulp_sum).max():.0f} ulps of |sum| (where terms cancel), "
    f"{(gap / ulp_partial).max():.0f} ulp of the largest intermediate sum; "
    f"{(gap > 0).float().mean():.0%} of the entries differ at all"
)
print(f"after LayerNorm: largest gap {gap_norm:.1e}")
assert (gap / ulp_partial).max() <= 2  # rounding, and nothing more
assert gap_norm < 1e-5
with torch.no_grad():  # in float64 the rounding all but vanishes
    t64 = {k: v.double() for k, v in terms.items()}
    assert_close(
        t64["position"] + t64["segment"] + t64["token"],
        t64["token"] + t64["segment"] + t64["position"],
        rtol=0,
        atol=1e-15,
    )
    ln_each = sum(emb.norm(t) for t in terms.values())  # normalise first, then add: (1, 8, d)
steps_gap = (ln_each - ref_norm).abs().max().item()
print(
    f"LN(token + segment + position) against LN(token) + LN(segment) + LN(position): {steps_gap:.2f}"
)
assert steps_gap > 0.1  # the two steps cannot be swapped

# %% [markdown]
# ## The 512-position wall
#
# A learned table has one row per position, so there is no vector for position 512 in BERT-base:
# tfx refuses longer inputs with an error that names both numbers (the sinusoidal formula, in contrast,
# gives a vector for any position, as the rotation check above used up to position 1023).

# %%
# NBVAL_CHECK_OUTPUT
with torch.device("meta"):
    print(
        "BERT-base position table:",
        tuple(
            transformers.BertModel(
                transformers.BertConfig()
            ).embeddings.position_embeddings.weight.shape
        ),
    )
tfx.set_seed(0)
short = BertModel(BertConfig.tiny(max_len=512)).eval()
too_long = torch.full((1, 513), 5)  # (1, 513)
try:
    short(too_long)
    raise AssertionError("a 513-token input should have been refused")
except ValueError as e:
    print("ValueError:", e)
    assert "513 exceeds the 512 learned positions" in str(e)

# %% [markdown]
# (claim-a61)=
# ### Claim A61: extending BERT's positions beyond 512 fails
#
# **Holds only when nothing is trained.** A 512-row table has no row 512: Hugging Face's `BertModel`
# refuses 513 tokens too (its buffers of 512 position and segment ids do not broadcast; with explicit
# `position_ids` the table lookup itself fails), so "extending" means adding rows. Added rows are just
# new parameters: they get a gradient only from inputs long enough to use them, so they stay at their
# random initialisation until the model is trained on longer inputs (long-document models do exactly
# that, starting the new rows as copies of the old ones). The cell shows both halves: the refusals, and
# which rows of a 1024-row table a 512-token and a 600-token input reach.

# %%
# CLAIM A61: holds only when nothing is trained: no row 512, and added rows learn only from long inputs
tfx.set_seed(0)
hf512 = transformers.BertModel(
    transformers.BertConfig(**BertConfig.tiny(max_len=512).to_hf_kwargs())
).eval()
x513 = torch.full((1, 513), 5)  # (1, 513)
failures = []
for extra in ({}, {"position_ids": torch.arange(513)[None]}):
    try:
        hf512(input_ids=x513, token_type_ids=torch.zeros_like(x513), **extra)
    except (RuntimeError, IndexError) as e:
        failures.append(f"{type(e).__name__}: {str(e)[:70]}")
print("Hugging Face, 513 tokens:", *failures, sep="\n  ")
assert len(failures) == 2  # both ways of asking for position 512 fail

tfx.set_seed(0)
extended = BertModel(BertConfig.tiny(max_len=1024))  # a table with 512 rows added
reached = {}
for L_in in (512, 600):
    extended.zero_grad()
    extended(torch.full((1, L_in), 5)).sum().backward()
    rows = extended.embeddings.pos.weight.grad.norm(dim=-1)  # (1024,)
    reached[L_in] = int((rows[512:] > 0).sum())
    print(f"input of {L_in} tokens: {reached[L_in]} of the 512 added rows get a gradient")
assert reached[512] == 0 and reached[600] == 88

# %% [markdown]
# (claim-a35)=
# ### Claim A35: learned positions score 1.2 F1 below fixed ones on DocRED, so fixed encodings generalise better
#
# **Not reproducible here.** The number needs the DocRED data set and fine-tuning runs, neither of which
# is on this machine (there is no network), so no F1 is given. Two things can be said without it. The
# Transformer paper compared the two schemes on translation and found them nearly identical (its
# Table 3, row E). And even a measured 1.2-point gap on one task would show a difference on that task,
# not that fixed encodings "generalise better". What the cell measures is the one structural difference
# within 512 positions: the learned table is 393 216 extra parameters in BERT-base (counted on a model
# built on the `meta` device, so no memory is used), the sinusoidal table none, and a learned table
# *initialised* with the sinusoids is the sinusoidal encoding until training moves it.

# %%
# CLAIM A35: not reproducible here: DocRED and the fine-tuning runs are not on this machine
with torch.device("meta"):
    base_table = transformers.BertModel(transformers.BertConfig()).embeddings.position_embeddings
n_learned = base_table.weight.numel()
print(f"learned position table of BERT-base: {n_learned:,} parameters; sinusoidal: 0")
as_learned = torch.nn.Embedding.from_pretrained(sinusoidal_encoding(512, 768), freeze=False)
assert n_learned == 512 * 768 == 393_216
assert torch.equal(as_learned(torch.arange(512)), sinusoidal_encoding(512, 768))

# %% [markdown]
# ## RoPE and ALiBi: positions inside the score
#
# The additive schemes put position into the token vectors, and the score $q_m \cdot k_n$ then mixes
# content and absolute position. Two later schemes act on the score instead, so that it depends on the
# *offset* $n - m$ only.
#
# **RoPE** (rotary position embedding, used by LLaMA) rotates each pair of $q$ and $k$ at position $p$ by the
# angle $p\,\omega_i$, the same angles as the sinusoids: $\tilde q_m = R_m q$, $\tilde k_n = R_n k$, so
#
# $$\tilde q_m \cdot \tilde k_n = q^\top R_m^\top R_n k = q^\top R_{n-m}\, k .$$
#
# **ALiBi** adds no vectors at all: head $h$ adds the bias $-m_h\,|i - j|$ to the score of query $i$ and
# key $j$, with slopes $m_h$ a geometric sequence ($2^{-8/H}, 2^{-16/H}, \dots$). The symmetric form
# $-m_h|i-j|$ is an *encoder adaptation*: the ALiBi paper is about causal language models, where query
# $i$ only sees keys $j \le i$ and the bias is $-m_h(i - j)$. Here, where every query sees every key,
# tfx uses $|i - j|$ so that a key at distance 3 is penalised the same on either side (claim A62 below
# checks both forms against Hugging Face's BLOOM).
#
# Both live in `tfx.position`:

# %%
show_source(apply_rope, alibi_bias)

# %% [markdown]
# The test: put the *same* $q$ at every position and the same $k$ at every position, and compute the
# score matrix $S_{mn}$. If the score depends only on $n - m$, every diagonal of $S$ is constant (a
# Toeplitz matrix), and `tfx.probes.diagonal_spread`, the largest spread along any diagonal, is 0. For
# the additive sinusoidal scheme it is not.

# %%
show_source(diagonal_spread)

# %%
# NBVAL_CHECK_OUTPUT
tfx.set_seed(0)
L, d = 16, 64
q, k = torch.randn(d, dtype=torch.float64), torch.randn(d, dtype=torch.float64)
Q, K = q.expand(L, d), k.expand(L, d)  # (L, d): the same vector at every position
S_rope = apply_rope(Q) @ apply_rope(K).T  # (L, L)
pe_small = sinusoidal_encoding(L, d, dtype=torch.float64)  # (L, d)
S_add = (Q + pe_small) @ (K + pe_small).T  # (L, L): additive sinusoidal PE
S_alibi = (Q @ K.T) + alibi_bias(12, L)  # (H, L, L): BERT-base's 12 heads
show(q_rope=apply_rope(Q), S_rope=S_rope, S_alibi=S_alibi)
print(
    f"spread along diagonals: RoPE {tfx.stable.below(diagonal_spread(S_rope), 1e-12)}, "
    f"ALiBi {tfx.stable.below(diagonal_spread(S_alibi), 1e-12)}, "
    f"additive sinusoidal {diagonal_spread(S_add):.2f}"
)
assert diagonal_spread(S_rope) < 1e-12 and diagonal_spread(S_alibi) < 1e-12
assert diagonal_spread(S_add) > 1.0
print("ALiBi slopes for 12 heads:", [f"{m:.4f}" for m in alibi_slopes(12).tolist()])

# %% [markdown]
# (claim-a63)=
# ### Claim A63: RoPE encodes position as a rotation, and LLaMA uses it
#
# **Holds.** RoPE works on a whole batch of heads at once, `(B, H, L, d_k)`, never changes a vector's
# length (a rotation), leaves position 0 alone, and makes the score depend on the offset alone (the
# diagonal test above). For the second half we check Hugging Face's Llama code: `LlamaAttention.forward`
# calls `apply_rotary_pos_emb` on its queries and keys, and that function, fed Llama's own cos/sin
# tables, must agree with tfx's `apply_rope`. Llama pairs dimension $i$ with $i + d_k/2$ instead of $2i$
# with $2i+1$, so the dimensions are reordered before comparing.

# %%
# CLAIM A63: holds: tfx's rotation equals Llama's apply_rotary_pos_emb, which LlamaAttention calls
tfx.set_seed(0)
qh = torch.randn(1, 12, 8, 64)  # (B, H, L, d_k): BERT-base's heads on the running example
qh_rot = apply_rope(qh)  # (B, H, L, d_k)
show(qh=qh, qh_rot=qh_rot)
assert_close(qh_rot.norm(dim=-1), qh.norm(dim=-1))
assert_close(qh_rot[..., 0, :], qh[..., 0, :])  # position 0 is not rotated
llama_cfg = transformers.LlamaConfig(hidden_size=768, num_attention_heads=12, head_dim=64)
cos, sin = LlamaRotaryEmbedding(llama_cfg)(qh, torch.arange(8)[None])  # (1, L, d_k) each
half = torch.cat(
    [torch.arange(0, 64, 2), torch.arange(1, 64, 2)]
)  # (d_k,): pair (2i, 2i+1) → (i, i + 32)
qh_llama, _ = apply_rotary_pos_emb(qh[..., half], qh[..., half], cos, sin)  # (B, H, L, d_k)
assert_close(qh_rot[..., half], qh_llama)
assert "apply_rotary_pos_emb(" in inspect.getsource(LlamaAttention.forward)
assert diagonal_spread(S_rope) < 1e-12  # the score sees the offset only (cell above)
print("tfx apply_rope = Hugging Face Llama's apply_rotary_pos_emb, dims reordered")
print("LlamaAttention.forward calls apply_rotary_pos_emb on its queries and keys")

# %% [markdown]
# (claim-a62)=
# ### Claim A62: ALiBi adds a bias proportional to distance, needs no position encoding and works at any length
#
# **Holds only up to what was measured: 8× the training length, with the symmetric bias an encoder
# needs.** The bias is $-m_h$ times the distance, the model has no position vectors, and the bias is
# defined for any length (the next section computes it at offset 1000). Whether a model trained on short
# inputs *works* on long ones chapter 07 measured (claim A17): trained at 32 tokens, the ALiBi model kept
# all of its accuracy above chance on positions up to 256, where learned and sinusoidal positions fell
# to chance. "Any length" is untested beyond 8×, and ALiBi's accuracy at the training length was the
# lowest of the four kinds there. The reference is Hugging Face's BLOOM, a causal model that uses
# ALiBi: its `build_alibi_tensor` adds $m_h \cdot j$ (the key's position) to every row. Under a causal
# mask that differs from the paper's $-m_h(i - j)$ by $m_h i$, a constant per row, which the softmax
# ignores, so the weights agree exactly. Without the causal mask (an encoder) they do not: BLOOM's form
# would *reward* distant keys to the right. That is why an encoder needs the symmetric form.

# %%
# CLAIM A62: holds only when the length stays within 8x the training length (chapter 07's A17 probe, symmetric bias): a distance bias with no position vectors, defined at any length
tfx.set_seed(0)
H_a, L_a = 12, 8
scores_a = torch.randn(H_a, L_a, L_a)  # (H, L, L): content scores of 12 heads
bloom = build_alibi_tensor(torch.ones(1, L_a), H_a, torch.float32).view(H_a, 1, L_a)  # (H, 1, L)
ours_bias = alibi_bias(H_a, L_a)  # (H, L, L): −m_h |i − j|
causal = torch.ones(L_a, L_a, dtype=torch.bool).tril()  # (L, L)
w_bloom = (scores_a + bloom).masked_fill(~causal, -math.inf).softmax(-1)  # (H, L, L)
w_ours = (scores_a + ours_bias).masked_fill(~causal, -math.inf).softmax(-1)  # (H, L, L)
gap_causal = (w_bloom - w_ours).abs().max().item()
gap_encoder = (
    ((scores_a + bloom).softmax(-1) - (scores_a + ours_bias).softmax(-1)).abs().max().item()
)
print(f"slopes: BLOOM's = tfx's: {torch.allclose(bloom[:, 0, 1], alibi_slopes(H_a))}")
print(f"weights, causal mask: largest gap {gap_causal:.1e}; no mask (encoder): {gap_encoder:.3f}")
distance = (torch.arange(L_a)[None] - torch.arange(L_a)[:, None]).abs()  # (L, L)
assert_close(bloom[:, 0, 1], alibi_slopes(H_a))  # the same slopes as BLOOM
assert_close(ours_bias, -alibi_slopes(H_a)[:, None, None] * distance)  # proportional to distance
assert gap_causal < 1e-6  # the symmetric form is the causal one where a causal model looks
assert gap_encoder > 0.05  # and the causal form is not an encoder's

# %% [markdown]
# ### Past the training length
#
# What can be shown without training a model is what each scheme *defines* beyond 512 positions:
#
# - learned PE: nothing; there is no row, and the model refuses the input (above);
# - sinusoidal: a vector for every position, with the same rotation rule (checked above up to 1023);
# - RoPE and ALiBi: scores at offsets never seen in training follow the same offset-only rule.
#
# The cell checks the last point at offsets up to 1023. That the rule is *defined* does not mean a model
# trained at length 512 handles length 1024 well; the trained comparison of the four schemes (claims A17 and
# N10) needs training runs and is left to chapter 07. No number about it is given here.

# %%
# NBVAL_CHECK_OUTPUT
L_long = 1024
Q, K = q.expand(L_long, d), k.expand(L_long, d)  # (L_long, d)
S_long = apply_rope(Q) @ apply_rope(K).T  # (L_long, L_long)
far = torch.diagonal(S_long, 1000)  # every pair (m, m + 1000)
assert_close(far, far[0].expand_as(far))
bias = alibi_bias(12, L_long)  # (H, L_long, L_long)
assert_close(bias[:, 0, 1000], -alibi_slopes(12) * 1000)
print(f"RoPE score at offset 1000: {far[0].item():.4f} for all {far.numel()} pairs")
print(
    f"ALiBi bias at offset 1000, head 0: {bias[0, 0, 1000].item():.1f}, head 11: {bias[11, 0, 1000].item():.2f}"
)

# %% [markdown]
# ## Try it: the sinusoid at any position and dimension
#
# Pick a position and a dimension; the kernel prints that entry of the table, the formula that made it and
# the wavelength of its pair, and redraws the table with the entry marked. Move the base to see the
# wavelengths stretch or shrink ($d_{model} = 128$, 64 positions, so the picture stays readable).

# %%
tfx.widgets.pe_widget()

# %% [markdown]
# ## Try it: drop, shuffle or reverse the positions
#
# The second widget perturbs the position vectors of a fresh tiny BERT (tfx's, 2 layers, $d = 64$) on
# the running example, and the kernel prints `tfx.probes.position_effect`:
#
# - **kept / dropped / shuffled / reversed**: token $i$ gets the vector of position $i$, the zero vector,
#   the vector of a random other position, or that of position $L-1-i$;
# - **position scale**: multiplies the position vectors (0 is the same as dropping them).
#
# It prints how far each token's output vector moves, the mean cosine to the unmodified output, and
# whether reading the sentence backwards gives the same vectors backwards: "yes" means the model has
# lost the order (claim A33 above). The function behind it:

# %%
show_source(position_effect)

# %%
tfx.set_seed(0)
pos_model = BertModel(BertConfig.tiny()).eval()
tfx.widgets.position_widget(pos_model, ids, RUNNING_EXAMPLE)

# %% [markdown]
# What the widget prints at its settings, computed by the same pure function:

# %%
# NBVAL_CHECK_OUTPUT
effects = {
    (mode, s): position_effect(pos_model, ids, mode, s, RUNNING_EXAMPLE)
    for mode in ("kept", "dropped", "shuffled", "reversed")
    for s in (0.0, 1.0, 4.0)
}
for mode, s in (("kept", 1.0), ("dropped", 1.0), ("shuffled", 1.0)):
    print(effects[mode, s].report(), end="\n\n")
for (mode, s), e in effects.items():
    print(
        f"{mode:<9} scale {s:g}: mean cosine {e.cosine:.4f}, order-blind: {e.backwards_gap < 1e-5}"
    )
assert max(effects["kept", 1.0].change) == 0 and effects["kept", 1.0].backwards_gap > 0.1
for mode in ("kept", "dropped", "shuffled", "reversed"):  # scale 0 is dropping, whatever the mode
    assert effects[mode, 0.0].change == effects["dropped", 1.0].change
    assert effects[mode, 0.0].backwards_gap < 1e-5
shuffled = effects["shuffled", 1.0]
kept_own = [i for i, p in enumerate(shuffled.order) if p == i]  # tokens that kept their position
moved = [c for i, c in enumerate(shuffled.change) if i not in kept_own]
assert kept_own and max(shuffled.change[i] for i in kept_own) < 0.1 * min(moved)

# %% [markdown]
# ## Summary
#
# - Attention and the whole encoder layer are permutation-equivariant: without positions, word order is
#   invisible (A33 holds, on a whole Hugging Face BERT with its position table zeroed).
# - Sinusoidal PE gives pair $i$ the frequency $\text{base}^{-2i/d}$; wavelengths run from $2\pi$ to almost
#   $2\pi\cdot 10^4$, so the *low* dimensions carry fine position (A34 fails); the numpy article's
#   function is the formula for even $d$ (N12); $PE(p)\cdot PE(p+k) = \sum_i\cos k\omega_i$ depends on $k$
#   only.
# - Exactly: $PE(p+k) = R_k PE(p)$ with $R_k$ a rotation independent of $p$. The article's own case
#   fails (A2): the vector never repeats, so periodicity is not why it extends; "linearly separable" is
#   true of any equal-norm table; and a trained model does not extrapolate with it (chapter 07).
# - Added to $0.01$-scaled embeddings, the encoding outweighs the token about 70 to 1 (N13 fails).
# - BERT's positions are a learned table (only the used rows get gradients), the embedding sum is
#   order-free up to float rounding though it must come before LayerNorm (A4 fails), and there is a
#   hard limit of 512 (A61); the DocRED
#   comparison is not reproducible here (A35).
# - RoPE and ALiBi make the score a function of the offset alone (A63 holds, checked against Llama), and
#   both are defined at any offset; ALiBi, in the symmetric form an encoder needs, kept its accuracy to
#   8× the training length in chapter 07 (A62 holds that far).
# - Dropping the positions of a live model makes it read a sentence backwards as the same sentence;
#   shuffling them moves every token that lost its position (the widget).
#
# ## Exercises
#
# 1. Show that $R_j R_k = R_{j+k}$, and say why it follows from the angle-addition formulas.
#    (Solution hidden below.)
# 2. With $d = 768$, which base makes the *longest* wavelength exactly $2\pi \cdot 512$? (Solution hidden
#    below.)
# 3. ALiBi for BERT-base's 12 heads: 12 is not a power of two. Which slopes does the paper's recipe give,
#    and how do they relate to those of 8 and 16 heads? (Solution hidden below.)
# 4. Apply RoPE to $q$ and $k$ and *also* add sinusoidal PE to the input. Is the score still a function of
#    the offset only? Predict, then check with `diagonal_spread`. (Solution hidden below.)

# %% tags=["hide-cell"]
# NBVAL_CHECK_OUTPUT
for j, k_ in ((3, 4), (10, 250)):
    assert_close(
        sinusoidal_rotation(j, 768) @ sinusoidal_rotation(k_, 768), sinusoidal_rotation(j + k_, 768)
    )
print("exercise 1: R_j R_k = R_(j+k), since each 2×2 block turns by jω then kω")
# longest wavelength 2π·base^((d-2)/d) = 2π·512  →  base = 512^(d/(d-2))
base512 = 512 ** (768 / 766)
assert_close(sinusoidal_wavelengths(768, base512)[-1].item(), 2 * math.pi * 512)
print(f"exercise 2: base = 512^(768/766) = {base512:.2f}")
s12 = alibi_slopes(12)
assert_close(s12[:8], alibi_slopes(8))
assert_close(s12[8:], alibi_slopes(16)[0::2][:4])
print(
    "exercise 3: the 8 slopes of 8 heads, then every other slope of 16 heads:",
    [f"{m:.4f}" for m in s12.tolist()],
)
S_both = (
    apply_rope(Q[:L] + pe_small) @ apply_rope(K[:L] + pe_small).T
)  # (L, L): RoPE on top of additive PE
print(
    f"exercise 4: no; the additive PE brings back absolute position: diagonal spread {diagonal_spread(S_both):.2f}"
)
assert diagonal_spread(S_both) > 1.0
# the same spread as additive PE alone: on the main diagonal R_m PE(m) = PE(2m) and R_mᵀ PE(2m) = PE(m),
# so there the two score matrices are equal, and that diagonal holds the largest spread of both
assert_close(torch.diagonal(S_both), torch.diagonal(S_add))
print("   (on the main diagonal it equals the additive-only score, since R_mᵀ PE(2m) = PE(m))")
