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
# We prove the blindness, find the one exact property of the sinusoidal table (a rotation), check
# BERT's learned table and its wall at 512, and put RoPE and ALiBi inside the score.

# %%
import tfx  # first: importing tfx quiets torchao's import-time log lines (tfx/__init__.py)

# isort: split
import math

import torch
import transformers
from torch.testing import assert_close
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

from tfx.book import show_source
from tfx.core import RUNNING_EXAMPLE, running_example_ids, show
from tfx.inspect import diagonal_spread, grad_norms, latest, position_effect
from tfx.model import (
    BertConfig,
    BertModel,
    EncoderLayer,
    MultiHeadAttention,
    alibi_bias,
    alibi_slopes,
    apply_rope,
    from_huggingface,
    sinusoidal_encoding,
    sinusoidal_rotation,
    sinusoidal_wavelengths,
)

tfx.banner()

# %% [markdown]
# ## Attention without positions is blind to order
#
# Let $P$ be a permutation matrix that reorders the $L$ tokens. Every part of an encoder layer commutes with
# it: the projections and the FFN act on each row alone, LayerNorm too, and
# $\operatorname{softmax}(PQ (PK)^{\mathsf T})PV = P\operatorname{softmax}(QK^{\mathsf T})P^{\mathsf T} P V$. So
# $f(PX) = P f(X)$: shuffle the input rows and you get the same output rows, shuffled.

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
# **Holds**, for a whole model too: with its position table zeroed, a Hugging Face `BertModel` gives
# 我喜欢吃苹果 and 苹果吃我喜欢 the same output vectors, permuted; with the table as initialised it
# does not.

# %% tags=["widget-input"]
# CLAIM A33: holds: with its position table zeroed, BERT's outputs are the same vectors, permuted
tfx.set_seed(0)
hf_blind = transformers.BertModel(
    transformers.BertConfig(**BertConfig.tiny().to_hf_kwargs())
).eval()
ids = running_example_ids()  # (1, 8)
order = [0, 5, 6, 4, 1, 2, 3, 7]  # [CLS] 苹 果 吃 我 喜 欢 [SEP]


def reorder_gap(model) -> tuple:  # largest change of a token's output, and of the mean output
    with torch.no_grad():
        h, h_re = (model(input_ids=i).last_hidden_state for i in (ids, ids[:, order]))  # (1, 8, d)
    return (h_re - h[:, order]).abs().max().item(), (h_re.mean(1) - h.mean(1)).abs().max().item()


with_pos = reorder_gap(hf_blind)
with torch.no_grad():
    hf_blind.embeddings.position_embeddings.weight.zero_()
without_pos = reorder_gap(hf_blind)
print(f"token vectors, mean move by: with positions {with_pos[0]:.3f}, {with_pos[1]:.3f}; ", end="")
print(f"without {without_pos[0]:.1e}, {without_pos[1]:.1e}")
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
# Pair $i$ is a point going round a circle as $p$ grows, at its own speed; the first pair turns one
# radian per position (wavelength $2\pi$), the last almost $10000\times$ slower. A position is a set of
# clock hands.

# %% [markdown]
# tfx builds the table in float64 and casts at the end (`tfx.model.position.sinusoidal_encoding`):

# %%
show_source(sinusoidal_encoding)

# %%
# NBVAL_CHECK_OUTPUT
pe = sinusoidal_encoding(512, 768)  # (max_len, d_model): BERT-base's size
show(pe=pe)
print("PE(0) =", pe[0, :6].tolist(), "...")
assert torch.all(pe[0, 0::2] == 0) and torch.all(pe[0, 1::2] == 1)

# %%
# Figure 2.1: Left, the sinusoidal encoding of the first 128 positions (rows) in 128 dimensions
#   (columns), coloured from -1 (red) to 1 (blue), with green lines at position 20 and dimension 10;
#   right, column 10 (pair 5, a sine) against position, with position 20 marked. The low dimensions
#   on the left change fast from one position to the next, the high ones on the right barely move.
fig = tfx.book.viz.plot_pe(sinusoidal_encoding(128, 128), position=20, dim=10)

# %% [markdown]
# In Figure 2.1 the left columns flicker and the right ones barely move. The wavelengths,
# $2\pi / \omega_i = 2\pi \cdot \text{base}^{2i/d}$, form a geometric sequence:

# %%
# NBVAL_CHECK_OUTPUT
wl = sinusoidal_wavelengths(768)  # (d/2,)
for i in (0, 1, 10, 100, 200, 383):
    print(f"pair {i:>3} (dims {2 * i}, {2 * i + 1}): wavelength {wl[i].item():>10,.1f} positions")
assert_close(wl[0].item(), 2 * math.pi)
assert wl[-1].item() < 2 * math.pi * 10000
assert torch.all(wl[1:] / wl[:-1] - 10000 ** (2 / 768) < 1e-9)  # a constant ratio between pairs

# %%
# Figure 2.2: Wavelength in positions (log scale) of each of the 384 dimension pairs i of the
#   sinusoidal encoding at d = 768, from 2π for pair 0 to over 60,000 positions for the last. The
#   line is straight because the wavelengths form a geometric sequence; only the pairs left of the
#   dashed line complete a full period within BERT's 512 positions.
fig = tfx.book.viz.plot_curves(
    range(len(wl)),
    {"wavelength 2π·10000^(2i/768)": wl.tolist()},
    xlabel="pair i",
    ylabel="positions",
    logy=True,
    title="sinusoidal PE: wavelength per dimension pair",
    vlines={"wavelength = 512": int((wl < 512).sum())},
)

# %% [markdown]
# Only the pairs left of the dashed line in Figure 2.2 complete a period within 512 positions. So the
# *low* dimensions carry fine position: dimensions 0 and 1 turn one radian per position and tell
# neighbours apart, while 766 and 767 barely move over 512 positions and only say "early" or "late".
# The table is a fixed function of $(p, i)$: a model can learn to *read* it, but not train it.

# %% [markdown]
# (claim-a34)=
# ### Claim A34: which dimensions carry fine position, and which coarse?
#
# **Fails: it is the other way round, and nothing in it is learned** (the paragraph above). The cell
# measures the mean change of each dimension between neighbouring positions.

# %%
# CLAIM A34: fails: the low dimensions carry fine position and the high dimensions coarse position
pe512 = sinusoidal_encoding(512, 768, dtype=torch.float64)  # (512, 768)
step = (pe512[1:] - pe512[:-1]).abs().mean(0)  # (768,): mean change between neighbours, per dim
ratio = (step[:2].mean() / step[-2:].mean()).item()
print(f"mean change per position: dims 0-1 {step[:2].mean():.2e}, 766-767 {step[-2:].mean():.2e}")
assert ratio > 1000  # fine position lives in the LOW dimensions
assert torch.all(step[0:10:2] > step[-10::2])  # and the sine columns agree, pair by pair

# %% [markdown]
# ### The dot product depends on the distance only
#
# Using $\sin a \sin b + \cos a \cos b = \cos(a - b)$ pair by pair,
#
# $$PE(p)\cdot PE(p+k) = \sum_i \cos(k\,\omega_i),$$
#
# a function of $k$ alone, whatever $p$ is (checked for three starting positions; Figure 2.3).

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
# Figure 2.3: The dot product PE(p)·PE(p+k) of two sinusoidal encodings (d = 768) against their
#   offset k from 0 to 399, one curve that holds for every starting position p. It starts at
#   d/2 = 384, falls fast over the first few offsets, then falls slowly with wobbles that make it
#   rise again in places: nearer is only roughly more similar.
fig = tfx.book.viz.plot_curves(
    ks.tolist(),
    {"PE(p)·PE(p+k), any p": formula.tolist()},
    xlabel="offset k",
    ylabel="dot product",
    title="similarity of two positions against their distance",
)

# %% [markdown]
# The similarity falls fast over the first few offsets and then wobbles: "nearer positions are more
# similar" is only roughly true.

# %% [markdown]
# ### Exactly: a rotation
#
# Behind the dot product is an exact property, the one the Transformer paper pointed to. By the
# angle-addition formulas, each pair $(\sin p\omega_i, \cos p\omega_i)$ at position $p + k$ is the
# pair at $p$ turned by the angle $k\omega_i$, so
#
# $$PE(p+k) = R_k\, PE(p), \qquad R_k = \operatorname{blockdiag}\left(\begin{bmatrix}\cos k\omega_i & \sin k\omega_i\\ -\sin k\omega_i & \cos k\omega_i\end{bmatrix}\right)_i,$$
#
# one orthogonal matrix per offset $k$, the same for every $p$. The cell builds $R_k$ from $k$ alone
# (`tfx.model.position.sinusoidal_rotation`) and checks it, past 512 too. RoPE (below) puts this
# rotation inside attention.
#
# The periods, $2\pi$ to $2\pi \cdot 10000$ positions, share no common multiple, so the whole vector
# never comes back to where it was: the closest two of the first 2,048 encodings are still far apart.
# That is what lets the table name positions; a code with one common period would give two positions
# one vector.

# %%
# NBVAL_CHECK_OUTPUT
for k in (1, 7, 100, 400):
    R = sinusoidal_rotation(k, 768)  # (d, d), built without looking at any position
    assert_close(pe64[: 1024 - k] @ R.T, pe64[k:])  # every p from 0 to 1023 - k, beyond 512 too
    assert_close(R @ R.T, torch.eye(768, dtype=torch.float64))  # orthogonal: a rotation
assert_close(torch.linalg.matrix_power(sinusoidal_rotation(1, 768), 7), sinusoidal_rotation(7, 768))
print(
    "PE(p+k) = R_k PE(p) for k in (1, 7, 100, 400) and every p < 1024 - k; R_k orthogonal; R_7 = R_1^7"
)
pe_long = sinusoidal_encoding(2048, 768, dtype=torch.float64)  # (2048, 768)
closest = torch.cdist(pe_long, pe_long).fill_diagonal_(math.inf).min().item()
print(f"closest two of the first 2,048 positions: {closest:.2f} apart; every vector has norm 19.6")
assert closest > 1  # no position repeats another

# %% [markdown]
# The formula gives a vector for every position, but does a *trained* model use the ones it never
# saw? Appendix 95 trained small models on 32 positions and scored them on longer inputs; its
# recorded run says how much of the sinusoidal model's accuracy above chance survives on the new
# positions:

# %%
# NBVAL_CHECK_OUTPUT
runs = latest("positions")  # appendix 95's recorded run (bench/positions.py)
sin_rows = [r for r in runs["rows"] if r["position"] == "sinusoidal"]
at_train = next(r["accuracy"] for r in sin_rows if r["multiple"] == 1)
kept = {  # share of the above-chance accuracy kept on the positions past the training length
    r["L"]: (r["accuracy_past_train_len"] - runs["chance"]) / (at_train - runs["chance"])
    for r in sin_rows
    if r["multiple"] > 1
}
print(
    f"sinusoidal model trained at L = {runs['config']['train_len']}, kept past it: "
    + ", ".join(f"{k:.2f} (L = {L})" for L, k in kept.items())
)

# %% [markdown]
# (claim-a2)=
# ### Claim A2: does sinusoidal PE extrapolate because sin and cos are periodic, and is it linearly separable?
#
# **Fails as argued.** The article says the encodings extrapolate (train at 512, infer at 1024)
# "*because sin/cos are periodic*" and that positions' vectors are "linearly separable". But the
# whole vector is not periodic; any distinct vectors of equal norm are separable (Cauchy–Schwarz),
# a random table too; and a trained model does not extrapolate with them: it keeps under a tenth of
# its accuracy above chance past 32 ({ref}`N10 <claim-n10>`). (This box also settles A72, an
# earlier list's copy of the periodicity half.)


# %%
# CLAIM A2: fails as argued: the vector never repeats (periodicity is not the reason), separability holds for any equal-norm vectors, and a model trained on 32 positions keeps under a tenth of its accuracy above chance past them (appendix 95's recorded run, N10)
def separation_margin(table: torch.Tensor) -> float:  # > 0 iff a hyperplane cuts off each row
    gram = table @ table.T  # (N, N)
    others = gram - torch.diag(torch.full((len(table),), math.inf, dtype=table.dtype))
    return (gram.diagonal() - others.amax(-1)).min().item()


assert_close(pe64.norm(dim=-1), torch.full((1024,), math.sqrt(768 / 2), dtype=torch.float64))
tfx.set_seed(0)
random_table = torch.randn(1024, 768, dtype=torch.float64)  # (1024, 768)
random_table *= math.sqrt(768 / 2) / random_table.norm(dim=-1, keepdim=True)  # the same norms
m_sin, m_rand = separation_margin(pe64), separation_margin(random_table)
print(f"separation margin: sinusoidal {m_sin:.1f}, random table {m_rand:.1f}")
assert m_sin > 0 and m_rand > 0  # both tables are linearly separable, row by row
assert m_rand > m_sin  # and the random one by the wider margin
assert closest > 1  # the code is not periodic on the positions (cell above)
assert all(k < 0.1 for k in kept.values())  # it does not extrapolate

# %% [markdown]
# ### Adding the table to the embeddings
#
# The encoding is *added* to the token embeddings, so the two must be of comparable size, or the sum
# is mostly the larger one. The Transformer paper multiplies its embeddings by $\sqrt{d_\text{model}}$
# first; the numpy article's $0.01\cdot\mathcal{N}(0, 1)$ embeddings plus the unscaled encoding let the
# position outweigh the token about 70 to 1 (the ledger's {ref}`N13 <claim-n13>`).

# %% [markdown]
# ## BERT's positions are learned
#
# BERT does not use the sinusoids: its positions are a table of 512 trained vectors, like the token
# table. In Hugging Face's implementation the position embedding is an `nn.Embedding` whose weight
# gets a gradient and changes after an optimizer step, but only in the rows of positions that
# occurred (0–7 here): a learned table knows nothing about positions it was never trained on.

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
# Row 0 gets by far the largest gradient: the loss reads the `[CLS]` output, at position 0, and the
# residual path carries its gradient straight back to that row; the other rows get only what flows
# back through attention.
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
# ## The 512-position wall
#
# A learned table has one row per position, so BERT-base has no vector for position 512: tfx refuses
# longer inputs with an error that names both numbers.

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
# The additive schemes put position into the token vectors, so the score $q_m \cdot k_n$ mixes content
# and absolute position. Two later schemes act on the score instead, so that it depends on the
# *offset* $n - m$ only.
#
# **RoPE** (rotary position embedding, used by LLaMA) rotates each pair of $q$ and $k$ at position $p$ by the
# angle $p\,\omega_i$, the same angles as the sinusoids: $\tilde q_m = R_m q$, $\tilde k_n = R_n k$, so
#
# $$\tilde q_m \cdot \tilde k_n = q^{\mathsf T} R_m^{\mathsf T} R_n k = q^{\mathsf T} R_{n-m}\, k .$$
#
# **ALiBi** adds no vectors at all: head $h$ adds the bias $-m_h\,|i - j|$ to the score of query $i$ and
# key $j$, with slopes $m_h$ a geometric sequence ($2^{-8/H}, 2^{-16/H}, \dots$). The symmetric form is
# an *encoder adaptation* of the paper's causal bias $-m_h(i - j)$, $j \le i$: where every query sees
# every key, it penalises a distance the same on either side (the ledger's {ref}`A62 <claim-a62>`
# checks both forms against Hugging Face's BLOOM).
#
# Both live in `tfx.model.position`:

# %%
show_source(apply_rope, alibi_bias)

# %% [markdown]
# The test: put the *same* $q$ and $k$ at every position. If the score $S_{mn}$ depends only on
# $n - m$, every diagonal of $S$ is constant (a Toeplitz matrix), and
# `tfx.inspect.probes.diagonal_spread`, the largest spread along any diagonal, is 0.

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
    f"spread along diagonals: RoPE {tfx.core.stable.below(diagonal_spread(S_rope), 1e-12)}, "
    f"ALiBi {tfx.core.stable.below(diagonal_spread(S_alibi), 1e-12)}, "
    f"additive sinusoidal {diagonal_spread(S_add):.2f}"
)
assert diagonal_spread(S_rope) < 1e-12 and diagonal_spread(S_alibi) < 1e-12
assert diagonal_spread(S_add) > 1.0
print("ALiBi slopes for 12 heads:", [f"{m:.4f}" for m in alibi_slopes(12).tolist()])

# %% [markdown]
# ### Past the training length
#
# Beyond 512 positions learned PE defines nothing (there is no row); the sinusoids define a vector for
# every position, with the same rotation rule; RoPE's and ALiBi's scores follow the same offset-only
# rule at offsets never seen in training (checked next, up to 1023). A defined rule does not mean a
# model trained at length 512 handles length 1024 well; the trained comparison (claims A17 and N10) is
# in appendix {doc}`95 <95_positions_past_training>`, after chapter 07's masked-LM training.

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
# ### Which dimensions form a pair?
#
# `apply_rope` turns neighbours, $(x_{2i}, x_{2i+1})$, as the RoFormer paper and Meta's LLaMA code do.
# Hugging Face's LLaMA (`apply_rotary_pos_emb` with `rotate_half`) pairs dimension $i$ with $i + d/2$:
# it splits the head into two halves and turns the first half against the second, with a cos and sin
# table that repeats the $d/2$ angles twice. Both turn pair $i$ by $p\,\omega_i$, so they are the same
# rotation once the dimensions are reordered: send $2i \to i$ and $2i + 1 \to i + d/2$. The next cell
# permutes $q$ and $k$ that way, applies Hugging Face's own function, permutes back, and compares with
# `apply_rope`; the scores need no permuting back at all, since permuting both vectors the same way
# leaves every dot product $q \cdot k$ unchanged. That is why converting a checkpoint from one
# convention to the other reorders the rows of $W_Q$ and $W_K$ within each head and nothing else. Without
# the reordering, nothing fails loudly: each convention is still a valid RoPE, only not the one the
# weights were trained with, and the scores come out different (the cell's last line). RoPE acts on each
# head's $q$ and $k$ after the projection, so the pairing is counted within a head, $d = d_k$.

# %%
# NBVAL_CHECK_OUTPUT
tfx.set_seed(0)
L, d = 16, 64
# a different q and k at every position, and the reordering: tfx's 2i -> i, 2i + 1 -> i + d/2
q_seq, k_seq = torch.randn(2, L, d, dtype=torch.float64)  # (L, d) each
perm = torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])  # (d,)
positions = torch.arange(L)[None]  # (1, L)
# Hugging Face's table: the d/2 angles p·ω_i written twice; its own module computes it in float32
llama = transformers.LlamaConfig(hidden_size=d, num_attention_heads=1)
cos32, sin32 = LlamaRotaryEmbedding(llama)(q_seq.float(), positions)  # (1, L, d) each
inv_freq = 1.0 / 10000 ** (torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d/2,): ω_i
angle = positions[..., None] * inv_freq  # (1, L, d/2)
angle = torch.cat([angle, angle], dim=-1)  # (1, L, d): Hugging Face's layout
cos, sin = angle.cos(), angle.sin()  # (1, L, d) each
assert_close(cos.float(), cos32)  # the same table, in float64
assert_close(sin.float(), sin32)
q_hf, k_hf = apply_rotary_pos_emb(q_seq[:, perm][None, None], k_seq[:, perm][None, None], cos, sin)
q_hf, k_hf = q_hf[0, 0], k_hf[0, 0]  # (L, d) each, in Hugging Face's order of dimensions
back = torch.argsort(perm)  # (d,): the inverse permutation
rot_err = max(
    (q_hf[:, back] - apply_rope(q_seq)).abs().max().item(),
    (k_hf[:, back] - apply_rope(k_seq)).abs().max().item(),
)
S_tfx = apply_rope(q_seq) @ apply_rope(k_seq).T  # (L, L)
score_err = (q_hf @ k_hf.T - S_tfx).abs().max().item()  # no permuting back: q·k ignores the order
q_raw, k_raw = apply_rotary_pos_emb(q_seq[None, None], k_seq[None, None], cos, sin)  # not permuted
raw_gap = (q_raw[0, 0] @ k_raw[0, 0].T - S_tfx).abs().max().item()
for i in range(3):
    print(f"tfx pair ({2 * i}, {2 * i + 1}) is HF's pair {tuple(back[2 * i : 2 * i + 2].tolist())}")
print(f"HF's rotation, permuted back, vs apply_rope: {tfx.core.stable.below(rot_err, 1e-12)}")
print(f"scores q·k, HF on permuted q and k vs tfx: {tfx.core.stable.below(score_err, 1e-12)}")
print(f"scores without the permutation differ by up to {raw_gap:.1f}")
assert rot_err < 1e-12 and score_err < 1e-12
assert raw_gap > 1.0

# %% [markdown]
# ## Try it: the sinusoid at any position and dimension
#
# Pick a position and a dimension: the widget prints that entry, its formula and its pair's
# wavelength, and marks it on the table ($d_{model} = 128$, 64 positions). The base stretches or
# shrinks the wavelengths.

# %%
tfx.book.widgets.pe_widget()

# %% [markdown]
# ## Try it: drop, shuffle or reverse the positions
#
# The second widget perturbs the position vectors of a fresh tiny BERT (tfx's, 2 layers, $d = 64$) on
# the running example: token $i$ keeps position $i$'s vector (**kept**), gets the zero vector
# (**dropped**), a random other position's (**shuffled**) or position $L-1-i$'s (**reversed**), times
# a **position scale**. `tfx.inspect.probes.position_effect` prints how far each output moves, the mean cosine to
# the unmodified output, and whether the sentence read backwards gives the same vectors backwards
# ("yes": the model has lost the order):

# %%
show_source(position_effect)

# %%
tfx.set_seed(0)
pos_model = BertModel(BertConfig.tiny()).eval()
tfx.book.widgets.position_widget(pos_model, ids, RUNNING_EXAMPLE)

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
# ## The article's other claims on this material
#
# The articles' other claims about positions are settled in the [ledger](91_ledger_foundations.ipynb):
# that the numpy article's `positional_encoding` implements the formula ({ref}`N12 <claim-n12>`, for
# even $d_{model}$ only) and that adding it to 0.01-scaled embeddings keeps the token ({ref}`N13 <claim-n13>`, fails); that BERT adds *sinusoidal* encodings
# ({ref}`A4 <claim-a4>`, fails); that extending BERT's positions beyond 512 fails
# ({ref}`A61 <claim-a61>`); a 1.2 F1 gap on DocRED ({ref}`A35 <claim-a35>`, not reproducible here);
# that LLaMA uses RoPE ({ref}`A63 <claim-a63>`); and that ALiBi works at any length
# ({ref}`A62 <claim-a62>`, measured to 8× the training length).

# %% [markdown]
# ## Summary
#
# - Without positions, attention, an encoder layer and a whole BERT are blind to word order (A33
#   holds).
# - Sinusoidal PE gives pair $i$ the frequency $\text{base}^{-2i/d}$, so the *low* dimensions carry
#   fine position (A34 fails). Exactly, $PE(p+k) = R_k PE(p)$ with $R_k$ a rotation independent of
#   $p$; the vector never repeats, so periodicity is not why it extends (A2 fails).
# - BERT's positions are a learned table (only the used rows get gradients), with a hard limit of 512.
# - RoPE and ALiBi make the score a function of the offset alone, defined at any offset. tfx turns
#   neighbouring dimensions, Hugging Face's LLaMA turns $i$ with $i + d/2$: the same rotation up to a
#   fixed reordering of each head's dimensions, which leaves the scores unchanged.
# - Dropping the positions of a live model makes it read a sentence backwards as the same sentence.
#
# ## What you can now do
#
# - Show that attention without positions is permutation-equivariant.
# - Build the sinusoidal table and prove with $R_k$ that two positions' dot product depends on their
#   offset alone.
# - Apply RoPE and ALiBi inside the score, and check that it sees only the offset.
# - Map RoPE's interleaved pairing onto Hugging Face's `rotate_half` and back.
# - Say what each scheme defines past the training length.
#
# Next, chapter 03 asks what each of $W_Q$, $W_K$, $W_V$ and $W_O$ does, why the scores are divided
# by $\sqrt{d_k}$, and what a mask changes.
#
# ## Exercises
#
# Tiers: *warm-up* checks what the chapter showed, *core* applies it to a new case, *build it*
# has you write the code, *open* has no single answer.
#
# 1. *(warm-up)* Show that $R_j R_k = R_{j+k}$, and say why it follows from the angle-addition
#    formulas.
# 2. *(warm-up)* With $d = 768$, which base makes the *longest* wavelength exactly $2\pi \cdot 512$?
# 3. *(core)* ALiBi for BERT-base's 12 heads (not a power of two): which slopes does the paper's
#    recipe give, and how do they relate to those of 8 and 16 heads?
# 4. *(core)* Apply RoPE to $q$ and $k$ and *also* add sinusoidal PE to the input. Is the score
#    still a function of the offset only? Predict, then check with `diagonal_spread`.
# 5. *(build it)* **RoPE as complex numbers.** Read each pair $(x_{2i}, x_{2i+1})$ as one complex
#    number and rotate it by multiplying with $e^{\mathrm i p \omega_i}$. Write that function with
#    `torch.view_as_complex` and check it against `apply_rope`.

# %% [markdown]
# :::{admonition} Solution to exercise 1
# :class: dropdown
# Block-diagonal matrices multiply block by block: block $i$ of $R_j R_k$ is the rotation by
# $j\omega_i$ times the rotation by $k\omega_i$, whose entries
# $\cos j\omega_i \cos k\omega_i - \sin j\omega_i \sin k\omega_i$ and
# $\sin j\omega_i \cos k\omega_i + \cos j\omega_i \sin k\omega_i$ are, by the angle-addition
# formulas, $\cos (j+k)\omega_i$ and $\sin (j+k)\omega_i$. Moving by $k$, then by $j$, is moving by
# $j + k$.
# :::

# %% tags=["hide-cell"]
# NBVAL_CHECK_OUTPUT
# 1. R_j R_k = R_(j+k) for two pairs of offsets
for j, k_ in ((3, 4), (10, 250)):
    assert_close(
        sinusoidal_rotation(j, 768) @ sinusoidal_rotation(k_, 768), sinusoidal_rotation(j + k_, 768)
    )
print("exercise 1: R_j R_k = R_(j+k), since each 2×2 block turns by jω then kω")

# %% [markdown]
# :::{admonition} Solution to exercise 2
# :class: dropdown
# The longest wavelength is the last pair's, $2\pi \cdot \text{base}^{(d-2)/d}$. Setting it to
# $2\pi \cdot 512$ gives $\text{base} = 512^{768/766} \approx 520.41$, a little more than 512 because
# the last pair's exponent is just below 1.
# :::

# %% tags=["hide-cell"]
# NBVAL_CHECK_OUTPUT
# 2. The base whose longest wavelength is 2π·512 at d = 768
base512 = 512 ** (768 / 766)
assert_close(sinusoidal_wavelengths(768, base512)[-1].item(), 2 * math.pi * 512)
print(f"exercise 2: base = 512^(768/766) = {base512:.2f}")

# %% [markdown]
# :::{admonition} Solution to exercise 3
# :class: dropdown
# For $H$ a power of two the slopes are $2^{-8/H}, 2^{-16/H}, \dots, 2^{-8}$. For 12 heads the recipe
# takes the 8 slopes of 8 heads, $2^{-1}, \dots, 2^{-8}$, then every other slope of 16 heads from the
# first: $2^{-1/2}, 2^{-3/2}, 2^{-5/2}, 2^{-7/2}$. So all 12 are 16-head slopes: the 8 with an
# integer exponent, then the first 4 that 8 heads lack, lying between them on the geometric scale.
# :::

# %% tags=["hide-cell"]
# NBVAL_CHECK_OUTPUT
# 3. ALiBi's 12 slopes, from those of 8 and 16 heads
s12 = alibi_slopes(12)
assert_close(s12[:8], alibi_slopes(8))
assert_close(s12[8:], alibi_slopes(16)[0::2][:4])
print(
    "exercise 3: the 8 slopes of 8 heads, then every other slope of 16 heads:",
    [f"{m:.4f}" for m in s12.tolist()],
)

# %% [markdown]
# :::{admonition} Solution to exercise 4
# :class: dropdown
# No. The score is $(q + PE(m))^{\mathsf T} R_{n-m} (k + PE(n))$: the rotation depends on the offset
# alone, but terms such as $q^{\mathsf T} R_{n-m} PE(n)$ bring back absolute position. On the main
# diagonal ($m = n$) the rotations cancel and the score is the additive-only one, which is why the
# spread, 17.55, equals additive PE's: both have their largest spread there.
# :::

# %% tags=["hide-cell"]
# NBVAL_CHECK_OUTPUT
# 4. RoPE on top of additive sinusoidal PE: the diagonal spread
S_both = (
    apply_rope(Q[:L] + pe_small) @ apply_rope(K[:L] + pe_small).T
)  # (L, L): RoPE on top of additive PE
print(
    "exercise 4: no; the additive PE brings back absolute position: "
    f"diagonal spread {diagonal_spread(S_both):.2f}"
)
assert diagonal_spread(S_both) > 1.0
assert_close(torch.diagonal(S_both), torch.diagonal(S_add))  # the main diagonal: R_m cancels
print("   (on the main diagonal it equals the additive-only score, since R_mᵀ PE(2m) = PE(m))")

# %% [markdown]
# :::{admonition} Solution to exercise 5
# :class: dropdown
# With $z_i = x_{2i} + \mathrm i\, x_{2i+1}$, the product $z_i e^{\mathrm i\theta}$ has real part
# $x_{2i}\cos\theta - x_{2i+1}\sin\theta$ and imaginary part $x_{2i}\sin\theta + x_{2i+1}\cos\theta$:
# the two rows of the $2 \times 2$ rotation, so one complex multiplication per pair is RoPE. It
# also shows the offset property at once: the score is the real part of
# $\sum_i \overline{q_i e^{\mathrm i m\omega_i}}\, k_i e^{\mathrm i n\omega_i}
# = \sum_i \bar q_i k_i e^{\mathrm i (n-m)\omega_i}$, in which only $n - m$ appears.
# :::


# %% tags=["hide-cell"]
# 5. RoPE as a complex multiplication, checked against apply_rope
def rope_complex(x, base=10000.0):
    L, d = x.shape[-2:]
    omega = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d/2,)
    angle = torch.arange(L, dtype=torch.float64)[:, None] * omega  # (L, d/2)
    z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], d // 2, 2))  # (…, L, d/2)
    turned = z * torch.polar(torch.ones_like(angle), angle)  # (…, L, d/2)
    return torch.view_as_real(turned).flatten(-2).to(x.dtype)  # (…, L, d)


tfx.set_seed(0)
x5 = torch.randn(2, 16, 64)  # (B, L, d)
assert_close(rope_complex(x5), apply_rope(x5))
print("exercise 5: the complex rotation equals apply_rope on a (2, 16, 64) input")
