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
# # 02 · Positional encoding: how a model that cannot see order is told the order
#
# **The question.** Attention compares every token with every other token, and nothing in that comparison
# knows which token came first. How much does attention alone ignore order, exactly? What does the
# sinusoidal encoding of the original Transformer add, what does BERT do instead, and what do the newer
# schemes (RoPE, ALiBi) change?
#
# Plan: prove the blindness (permutation equivariance); build the sinusoidal table and find its one exact
# property, a rotation; check against Hugging Face that BERT's positions are learned and that the order of
# the embedding sum does not matter; meet the 512-position wall; implement RoPE and ALiBi and show that
# their scores depend only on the offset between two tokens.

# %%
import itertools
import math
import platform

import torch
import transformers
from torch.testing import assert_close
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

import tfx
from tfx.attention import MultiHeadAttention
from tfx.bert import BertConfig, BertModel, from_huggingface
from tfx.data import RUNNING_EXAMPLE, running_example_ids
from tfx.layers import EncoderLayer
from tfx.position import (
    alibi_bias,
    alibi_slopes,
    apply_rope,
    sinusoidal_encoding,
    sinusoidal_rotation,
    sinusoidal_wavelengths,
)
from tfx.shapes import show

print(
    platform.python_version(), "torch", torch.__version__, "transformers", transformers.__version__
)

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
# So "我 喜 欢 吃 苹 果" and "苹 果 吃 我 喜 欢" give each character the same output vector. With BERT's
# position embeddings added, they do not: the same tiny BERT, the same tokens, reordered, now gives each
# token a different vector.

# %%
# NBVAL_CHECK_OUTPUT
tfx.set_seed(0)
bert = BertModel(BertConfig.tiny()).eval()
ids = running_example_ids()  # (1, 8)
shuffled = torch.tensor([[0, 5, 6, 4, 1, 2, 3, 7]])  # [CLS] 苹 果 吃 我 喜 欢 [SEP]
print(" ".join(RUNNING_EXAMPLE[i] for i in shuffled[0]))
with torch.no_grad():
    h, h_shuf = bert(ids), bert(ids[:, shuffled[0]])  # (1, 8, 64) each
gap = (h_shuf - h[:, shuffled[0]]).abs().max().item()
print(f"largest change of a token's output vector: {gap:.3f}")
assert gap > 0.1

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

# %%
# NBVAL_CHECK_OUTPUT
pe = sinusoidal_encoding(512, 768)  # (max_len, d_model): BERT-base's size
show(pe=pe)
print("PE(0) =", pe[0, :6].tolist(), "...")
assert torch.all(pe[0, 0::2] == 0) and torch.all(pe[0, 1::2] == 1)

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
# ### Claim A2: sinusoidal PE "extrapolates" and is "linearly separable"; PE(pos+k) relates to PE(pos)
#
# **Holds only when made precise.** The exact statement is a rotation: by the angle-addition formulas,
# each pair $(\sin p\omega_i, \cos p\omega_i)$ at position $p + k$ is the pair at $p$ turned by the angle
# $k\omega_i$, so
#
# $$PE(p+k) = R_k\, PE(p), \qquad R_k = \operatorname{blockdiag}\left(\begin{bmatrix}\cos k\omega_i & \sin k\omega_i\\ -\sin k\omega_i & \cos k\omega_i\end{bmatrix}\right)_i,$$
#
# one orthogonal matrix per offset $k$, the same for every $p$. This is the sense in which the offset is
# "linear": a fixed linear map moves any position by $k$. The cell builds $R_k$ from $k$ alone
# (`tfx.position.sinusoidal_rotation`) and checks it against every position, including positions past
# 512 that BERT never sees, and checks $R_k = R_1^k$. "Extrapolates" is true only in the weak sense that the
# formula gives a vector for any $p$; whether a *trained* model uses those vectors well past its training
# length is a different question (claims A17 and N10), left to a trained model in chapter 07.
# "Linearly separable" is not a property of the table as stated; the checkable fact is that all the
# vectors have the same norm $\sqrt{d/2}$ and differ by rotations.

# %%
# CLAIM A2: holds only when read as PE(p+k) = R_k·PE(p), with R_k a rotation that depends on k alone
for k in (1, 7, 100, 400):
    R = sinusoidal_rotation(k, 768)  # (d, d), built without looking at any position
    assert_close(pe64[: 1024 - k] @ R.T, pe64[k:])  # every p from 0 to 1023 - k, beyond 512 too
    assert_close(R @ R.T, torch.eye(768, dtype=torch.float64))  # orthogonal: a rotation
assert_close(torch.linalg.matrix_power(sinusoidal_rotation(1, 768), 7), sinusoidal_rotation(7, 768))
assert_close(pe64.norm(dim=-1), torch.full((1024,), math.sqrt(768 / 2), dtype=torch.float64))
print(
    "PE(p+k) = R_k PE(p) for k in (1, 7, 100, 400) and every p < 1024 - k; R_k orthogonal; R_7 = R_1^7"
)

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
print("grad norm of position rows 0..9:", [f"{n:.4f}" for n in row_norms[:10].tolist()])
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
# **Fails, twice.** First, BERT's position embeddings are learned, not sinusoidal: the cell above showed the
# table is a trained `nn.Embedding`. Second, addition is commutative; LayerNorm only sees the finished sum,
# so it cannot know in which order the terms were added. The one real effect is float rounding: in float32,
# $(a+b)+c$ and $a+(b+c)$ can differ in the last bit. The cell adds the three embeddings of the running
# example in all six orders, before and after the LayerNorm, and measures the largest difference.

# %%
# CLAIM A4: fails: BERT's positions are learned, and the sum is order-free up to float rounding
emb = ours.embeddings
terms = {"token": emb.tok(ids), "segment": emb.seg(torch.zeros_like(ids)), "position": emb.pos(8)}
show(**terms)  # the (8, d) position rows broadcast over the batch
with torch.no_grad():
    sums = {
        order: terms[order[0]] + terms[order[1]] + terms[order[2]]
        for order in itertools.permutations(terms)
    }
    normed = {order: emb.norm(s) for order, s in sums.items()}
ref = sums[("token", "segment", "position")]
gap_sum = max((s - ref).abs().max().item() for s in sums.values())
gap_norm = max(
    (n - normed[("token", "segment", "position")]).abs().max().item() for n in normed.values()
)
eps = torch.finfo(torch.float32).eps
print(
    f"6 orders; largest difference of the sum: {gap_sum / eps:.1f} float32 eps, after LayerNorm: {gap_norm / eps:.1f} eps"
)
assert gap_sum <= 4 * eps * ref.abs().max().item()
assert gap_norm < 1e-5
with torch.no_grad():  # in float64 the rounding all but vanishes
    t64 = {k: v.double() for k, v in terms.items()}
    assert_close(
        t64["position"] + t64["segment"] + t64["token"],
        t64["token"] + t64["segment"] + t64["position"],
        rtol=0,
        atol=1e-15,
    )

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
# key $j$, with slopes $m_h$ a geometric sequence ($2^{-8/H}, 2^{-16/H}, \dots$).
#
# Both live in `tfx.position` (`apply_rope`, `alibi_slopes`, `alibi_bias`). The test: put the *same* $q$ at
# every position and the same $k$ at every position, and compute the score matrix $S_{mn}$. If the score
# depends only on $n - m$, every diagonal of $S$ is constant (a Toeplitz matrix). For the additive
# sinusoidal scheme it is not.


# %%
# NBVAL_CHECK_OUTPUT
def diagonal_spread(S: torch.Tensor) -> float:
    """Largest spread along any diagonal of S: 0 when S[m, n] depends on n - m only."""
    L = S.size(-1)
    return max(
        (torch.diagonal(S, o, -2, -1).amax(-1) - torch.diagonal(S, o, -2, -1).amin(-1)).max().item()
        for o in range(-L + 1, L)
    )


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
    f"spread along diagonals: RoPE {diagonal_spread(S_rope):.1e}, ALiBi {diagonal_spread(S_alibi):.1e}, "
    f"additive sinusoidal {diagonal_spread(S_add):.2f}"
)
assert diagonal_spread(S_rope) < 1e-12 and diagonal_spread(S_alibi) < 1e-12
assert diagonal_spread(S_add) > 1.0
print("ALiBi slopes for 12 heads:", [f"{m:.4f}" for m in alibi_slopes(12).tolist()])

# %% [markdown]
# RoPE also works on a whole batch of heads at once, `(B, H, L, d_k)`, and never changes a vector's length
# (a rotation). As a reference we use Hugging Face's Llama code, which pairs dimension $i$ with $i + d_k/2$
# instead of $2i$ with $2i+1$: after reordering the dimensions, the two rotations must agree.

# %%
# NBVAL_CHECK_OUTPUT
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
print("tfx apply_rope = Hugging Face Llama's apply_rotary_pos_emb, dims reordered")

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
# ## Summary
#
# - Attention and the whole encoder layer are permutation-equivariant: without positions, word order is
#   invisible (asserted).
# - Sinusoidal PE gives pair $i$ the frequency $\text{base}^{-2i/d}$; wavelengths run from $2\pi$ to almost
#   $2\pi\cdot 10^4$; $PE(p)\cdot PE(p+k) = \sum_i\cos k\omega_i$ depends on $k$ only.
# - Exactly: $PE(p+k) = R_k PE(p)$ with $R_k$ a rotation independent of $p$ (claim A2, holds in this form).
# - BERT's positions are learned (checked in Hugging Face, only the used rows get gradients), the
#   embedding sum is order-free up to float rounding (claim A4 fails), and there is a hard limit of 512.
# - RoPE and ALiBi make the score a function of the offset alone (asserted), and both are defined at any
#   offset. Whether that helps a trained model at unseen lengths is left to chapter 07.
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

# %% tags=["hide-input"]
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
