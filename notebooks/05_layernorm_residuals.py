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
# # 05 · LayerNorm and residual connections
#
# Attention and the feed-forward block are held together by plumbing: a residual path that adds each
# sub-layer's output to its input, and a LayerNorm that rescales every token's vector. A deep stack of
# maps multiplies scales, so without help the activations (and the gradients coming back) grow or shrink
# geometrically with depth. Normalisation resets the scale at every step (Ba, Kiros and Hinton, 2016); a
# residual path, $x + f(x)$, lets each layer learn a correction to its input and gives the input and the
# gradient a route around every layer (He et al., 2016).
#
# What exactly does LayerNorm compute for `[CLS] 我 喜 欢 吃 苹 果 [SEP]`, and why per token? Does BERT
# put it after the residual sum (post-LN) or before the sub-layer (pre-LN), and what do the two
# placements and the residual path do through 12 or 24 layers?

# %%
import tfx  # first: importing tfx quiets torchao's import-time log lines (tfx/__init__.py)

# isort: split
import inspect
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
import transformers
from transformers.models.bert.modeling_bert import BertOutput, BertSelfOutput
from transformers.models.gpt2.modeling_gpt2 import GPT2Block
from transformers.models.llama.modeling_llama import LlamaRMSNorm

from tfx.core import (
    RUNNING_EXAMPLE,
    SHORT_EXAMPLE,
    below,
    build_vocab,
    padded_example,
    running_example_ids,
    show,
)
from tfx.inspect import (
    Stack,
    StackConfig,
    activation_report,
    build_stack,
    grad_norms,
    n_params,
    param_counts,
    probe_stack,
    stack_loss,
)
from tfx.model import (
    BertConfig,
    BertEmbeddings,
    BertForMaskedLM,
    BertModel,
    EncoderLayer,
    LayerNorm,
    from_huggingface,
)

tfx.banner()

# %% [markdown]
# ## LayerNorm by hand
#
# LayerNorm looks at one token's vector $x \in \mathbb{R}^d$ at a time. It subtracts the vector's own
# mean $\mu$, divides by its own standard deviation, then scales by a learned $\gamma$ and shifts by a
# learned $\beta$ (both in $\mathbb{R}^d$, initialised to ones and zeros):
#
# $$\mu = \frac1d \sum_i x_i, \qquad \sigma^2 = \frac1d \sum_i (x_i - \mu)^2, \qquad
# \text{LN}(x) = \gamma \odot \frac{x - \mu}{\sqrt{\sigma^2 + \varepsilon}} + \beta .$$
#
# The inputs are the running example's token vectors from a small random embedding ($d = 16$), drawn
# off-centre and wide (mean 1, std 3) so the normalisation has something to undo.

# %%
# NBVAL_CHECK_OUTPUT
vocab = build_vocab(RUNNING_EXAMPLE)
ids = running_example_ids(vocab)  # (1, 8)
L = ids.size(1)
D, EPS = 16, 1e-5
tfx.set_seed(0)
emb = nn.Embedding(len(vocab), D)
nn.init.normal_(emb.weight, mean=1.0, std=3.0)
emb.requires_grad_(False)
x = emb(ids)  # (1, 8, D)
mu = x.mean(dim=-1, keepdim=True)  # (1, 8, 1): one mean per token
var = x.var(dim=-1, keepdim=True, unbiased=False)  # (1, 8, 1): population variance, divide by d
x_hat = (x - mu) / torch.sqrt(var + EPS)  # (1, 8, D)
gamma, beta = torch.ones(D), torch.zeros(D)  # (D,), (D,)
y = gamma * x_hat + beta  # (1, 8, D)
show(x=x, mu=mu, var=var, y=y)
print(f"{'token':<6} {'mean in':>8} {'std in':>7} {'mean out':>9} {'std out':>8}")
for t, xi, yi in zip(RUNNING_EXAMPLE, x[0], y[0]):
    print(
        f"{t:<6} {xi.mean():>8.4f} {xi.std(unbiased=False):>7.4f} "
        f"{yi.mean().abs():>9.4f} {yi.std(unbiased=False):>8.4f}"
    )
assert torch.allclose(y.mean(-1), torch.zeros(1, L), atol=1e-6)
assert torch.allclose(y.std(-1, unbiased=False), torch.ones(1, L), atol=1e-5)

# %% [markdown]
# The formula with random $\gamma$ and $\beta$, against tfx's and PyTorch's LayerNorm and that of
# Hugging Face's `BertSelfOutput`, whose $\varepsilon$ is BERT's $10^{-12}$:

# %%
# NBVAL_CHECK_OUTPUT
hf_cfg_small = transformers.BertConfig(
    hidden_size=D, num_attention_heads=2, intermediate_size=4 * D, attn_implementation="eager"
)
hf_ln = BertSelfOutput(hf_cfg_small).LayerNorm  # Hugging Face's own module
print(f"Hugging Face BERT LayerNorm: {hf_ln}")
tfx.set_seed(0)
gamma_r, beta_r = torch.randn(D), torch.randn(D)  # (D,), (D,)
ours = LayerNorm(D, eps=hf_ln.eps)
ref = nn.LayerNorm(D, eps=hf_ln.eps)
with torch.no_grad():
    for m in (ours, ref, hf_ln):
        m.weight.copy_(gamma_r)
        m.bias.copy_(beta_r)
    by_hand = gamma_r * (x - mu) / torch.sqrt(var + hf_ln.eps) + beta_r  # (1, 8, D)
    for name, m in [("tfx LayerNorm", ours), ("nn.LayerNorm", ref), ("HF BertSelfOutput", hf_ln)]:
        err = (m(x) - by_hand).abs().max().item()
        print(f"{name:<18} max |Δ| against the formula: {below(err, 1e-5)}")
        assert err < 1e-5

# %% [markdown]
# tfx's `LayerNorm` keeps the definition written out beside the fused kernel it runs: `formula` is
# the reference its tests hold `forward` to, with the statistics in float32 even for half-precision
# inputs, as PyTorch's kernel computes them.

# %%
tfx.book.source.show_source(LayerNorm.formula, LayerNorm.forward)

# %% [markdown]
# **Population, not unbiased.** $\sigma^2$ divides by $d$, not $d - 1$. Normalising by PyTorch's
# unbiased `x.std()` gives outputs whose standard deviation is $\sqrt{(d-1)/d}$: 3 % short at $d = 16$,
# 0.07 % at $d = 768$. Where $\varepsilon$ sits (inside the root, or added to the standard deviation, as
# one source article writes it) is claim N4, {ref}`claim-n4`. The Annotated Transformer's LayerNorm has
# both differences, `x.std()` and `std + eps`: close to this one, not the same function.

# %%
# NBVAL_CHECK_OUTPUT
y_unbiased = (x - mu) / x.std(dim=-1, keepdim=True)  # torch's default std: divides by d - 1
ratio = (x.std(-1) / x.std(-1, unbiased=False))[0]  # (8,)
out_std = y_unbiased.std(-1, unbiased=False)[0]  # (8,)
print(f"x.std() / population std, every token: {ratio.min():.4f} … {ratio.max():.4f}")
print(f"sqrt(d / (d - 1)) = {math.sqrt(D / (D - 1)):.4f}")
print(f"std of the output when dividing by x.std(): {out_std.mean():.4f}")
print(f"max |Δ| against F.layer_norm: {(y_unbiased - F.layer_norm(x, (D,))).abs().max():.4f}")
assert torch.allclose(ratio, torch.full((L,), math.sqrt(D / (D - 1))))
assert torch.allclose(out_std, torch.full((L,), math.sqrt((D - 1) / D)), atol=1e-5)

# %% [markdown]
# **Per token, not per sentence, not per batch.** `nn.LayerNorm(d)` normalises over the last dimension
# only: each of the 8 tokens gets its own $\mu$ and $\sigma$. `nn.LayerNorm((L, d))` would take one
# $\mu$ and $\sigma$ per sentence, after which no single token has mean 0 and std 1. `nn.BatchNorm1d` on
# a (B, d, L) tensor normalises each *feature* over the batch *and* every position; we give it the book's
# padded batch.

# %%
# NBVAL_CHECK_OUTPUT
per_token = F.layer_norm(x, (D,))  # statistics over d: one (μ, σ) per token
per_sentence = F.layer_norm(x, (L, D))  # statistics over L × d: one (μ, σ) per sentence
pad_ids, attention_mask = padded_example(vocab)  # (2, 8), (2, 8)
x_batch = emb(pad_ids)  # (2, 8, D)
bn = nn.BatchNorm1d(D, affine=False)  # training mode: batch statistics
per_feature = bn(x_batch.transpose(1, 2)).transpose(1, 2)  # (2, D, 8) → (2, 8, D)
mean_bl = x_batch.mean(dim=(0, 1))  # (D,): one mean per feature, over batch and positions
var_bl = x_batch.var(dim=(0, 1), unbiased=False)  # (D,)
bn_by_hand = (x_batch - mean_bl) / torch.sqrt(var_bl + bn.eps)  # (2, 8, D)
show(per_token=per_token, per_sentence=per_sentence, x_batch=x_batch, per_feature=per_feature)
for name, t in [
    ("per token", per_token),
    ("per sentence", per_sentence),
    ("BatchNorm", per_feature),
]:
    m, s = t[0].mean(-1), t[0].std(-1, unbiased=False)  # (8,), (8,): each token's own statistics
    print(
        f"{name:<13} token means {m.abs().max():.4f} at most, token stds {s.min():.4f} … {s.max():.4f}"
    )
torch.testing.assert_close(per_feature, bn_by_hand)

# %% [markdown]
# (claim-a48)=
# ### Claim A48: LayerNorm normalises each position on its own; BatchNorm averages one position over the batch
#
# **Holds only when read per token:** every token leaves with mean 0 and standard deviation 1 (the
# population one, $\varepsilon$ inside the root). The article's other wording, "all dimensions of a
# sentence", is `nn.LayerNorm((L, d))`, whose tokens do not come out normalised; and `nn.BatchNorm1d`
# pools one *feature* over every sentence and position, not one position over the batch.

# %%
# CLAIM A48: holds only when read per token: one (mean, population std) per position, eps inside the root; per sentence fails; BatchNorm1d pools batch and positions
tok_std = per_token[0].std(-1, unbiased=False)  # (8,)
sent_std = per_sentence[0].std(-1, unbiased=False)  # (8,)
big_eps = 1.0  # a large ε makes "inside the root" and "added to the std" visibly different
ln_big = LayerNorm(D, eps=big_eps)(x)  # (1, 8, D)
torch.testing.assert_close(ln_big, (x - mu) / torch.sqrt(var + big_eps))  # ε inside the root
assert (ln_big - (x - mu) / (torch.sqrt(var) + big_eps)).abs().max() > 0.01  # not added to std
assert torch.allclose(tok_std, torch.ones(L), atol=1e-4)  # per token: every token normalised
assert (sent_std - 1).abs().max() > 0.05  # per sentence: the tokens are not
assert per_sentence[0].mean(-1).abs().max() > 0.05
torch.testing.assert_close(per_token, LayerNorm(D)(x))  # tfx's LayerNorm is the per-token one
# one position over the batch (the article's reading; with B = 2 every output is ±1) is not what
# BatchNorm1d computes: it normalises each feature over batch × positions
var_b = x_batch.var(dim=0, unbiased=False)  # (8, D): one variance per position, over the batch
bn_pos_only = (x_batch - x_batch.mean(dim=0)) / torch.sqrt(var_b + bn.eps)  # (2, 8, D)
assert (bn_pos_only - per_feature).abs().max() > 0.1
assert per_feature.mean(dim=(0, 1)).abs().max() < 1e-5  # each feature: mean 0 over B × L

# %% [markdown]
# ### BERT-base's 25 LayerNorms, and the Jacobian of one
#
# **BERT-base has 25 LayerNorms:** one after the embeddings and two in each of the 12 layers, counted in
# Hugging Face's and tfx's `BertModel` on PyTorch's `meta` device (shapes only, no weights):

# %%
# NBVAL_CHECK_OUTPUT
with torch.device("meta"):
    hf_base = transformers.BertModel(transformers.BertConfig())
    tfx_base = tfx.model.bert.BertModel(tfx.model.bert.BertConfig.base())
hf_lns = [n for n, m in hf_base.named_modules() if isinstance(m, nn.LayerNorm)]
tfx_lns = [n for n, m in tfx_base.named_modules() if isinstance(m, LayerNorm)]
print(f"Hugging Face BertModel: {len(hf_lns)} LayerNorms, eps {hf_base.config.layer_norm_eps}")
for n in hf_lns[:3] + ["…", hf_lns[-1]]:
    print("  ", n)
print(f"tfx BertModel: {len(tfx_lns)} LayerNorms")
assert len(hf_lns) == len(tfx_lns) == 1 + 2 * hf_base.config.num_hidden_layers == 25
del hf_base, tfx_base

# %% [markdown]
# **LayerNorm's Jacobian.** With $\gamma = 1$, $\beta = 0$ and $\hat x = (x - \mu)/\sigma$ (taking
# $\varepsilon \to 0$), differentiating gives
#
# $$\frac{\partial\, \text{LN}(x)}{\partial x} = \frac1\sigma\left(I -
# \frac1d \mathbf 1 \mathbf 1^{\mathsf T} - \frac1d \hat x \hat x^{\mathsf T}\right).$$
#
# It is symmetric, and it kills two directions: $\mathbf 1$ (adding a constant to every feature
# changes nothing) and $\hat x$ (scaling the vector changes nothing). So the Jacobian has rank
# $d - 2$, and the gradient that flows back through a LayerNorm has no component along those two
# directions. Against autograd, in float64, for the first token:

# %%
# NBVAL_CHECK_OUTPUT
x0 = x[0, 0].double()  # (D,): the [CLS] vector
sigma = x0.std(unbiased=False)
xh = (x0 - x0.mean()) / sigma  # (D,)
eye, ones_d = torch.eye(D, dtype=torch.float64), torch.ones(D, dtype=torch.float64)
J_formula = (eye - torch.outer(ones_d, ones_d) / D - torch.outer(xh, xh) / D) / sigma  # (D, D)
J_auto = torch.autograd.functional.jacobian(lambda v: F.layer_norm(v, (D,), eps=0.0), x0)  # (D, D)
sv = torch.linalg.svdvals(J_auto)  # (D,)
show(J_auto=J_auto)
jac_err = (J_formula - J_auto).abs().max()
killed = (J_auto @ ones_d).norm(), (J_auto @ xh).norm()  # float64: zero up to rounding
print(f"max |formula − autograd|: {below(jac_err, 1e-12)}")
print(f"‖J·1‖ {below(killed[0], 1e-12)}   ‖J·x̂‖ {below(killed[1], 1e-12)}")
print(f"singular values above 1e-8: {(sv > 1e-8).sum().item()} of {D}")
torch.testing.assert_close(J_formula, J_auto)
assert jac_err < 1e-12 and max(killed) < 1e-12
assert (sv > 1e-8).sum() == D - 2

# %% [markdown]
# (ln-sums-to-zero)=
# ### LayerNorm's output sums to zero over the features when β = 0 and all entries of γ are equal
#
# Every $\hat x$ has mean 0; a $\gamma$ with equal entries (at initialisation all 1) keeps its sum at 0,
# and $\beta$ adds $\sum_i \beta_i$. So with equal $\gamma$ and $\beta = 0$, `LN(x).sum()` is **0
# whatever $x$ is**, with zero gradient ($\mathbf 1^{\mathsf T} J = 0$). A loss such as `out.sum()`
# behind a final LayerNorm sends no gradient into the network: chapter 06's claim A52. With unequal
# $\gamma$ the sum depends on $x$ again.

# %%
# NBVAL_CHECK_OUTPUT
ln = LayerNorm(D)  # γ = 1, β = 0, as initialised
x_req = x.clone().requires_grad_(True)  # (1, 8, D)
out = ln(x_req)  # (1, 8, D)
sums = out.sum(dim=-1)[0]  # (8,): one sum per token
print(
    f"per-token sums of LN(x), γ = 1, β = 0: all {L} of size {below(sums.abs().max().item(), 1e-5)}"
)
out.sum().backward()
print(f"‖∂ out.sum() / ∂x‖ {below(x_req.grad.norm().item(), 1e-5)}")
print(grad_norms(ln))
assert sums.abs().max() < 1e-5
assert x_req.grad.norm() < 1e-5
# β adds to every entry once per token: ∂ out.sum() / ∂β = L in each of D entries, norm L·√D
assert abs(ln.bias.grad.norm().item() - L * math.sqrt(D)) < 1e-4
assert ln.weight.grad.norm() > 1  # γ's gradient, Σ over the tokens of x̂: not zero either
with torch.no_grad():  # equal γ, β ≠ 0: the sum is Σβ for every token, whatever x is
    ln.weight.fill_(2.5)
    ln.bias.copy_(beta_r)
    sums_beta = ln(x).sum(-1)[0]  # (8,)
    print(f"γ = 2.5, random β: every token sums to Σβ = {beta_r.sum():.4f}: ", end="")
    print(f"{sums_beta.min():.4f} … {sums_beta.max():.4f}")
    assert torch.allclose(sums_beta, beta_r.sum().expand(L), atol=1e-4)
    ln.weight.copy_(gamma_r)  # unequal γ: the sum follows x again
    sums_gamma = ln(x).sum(-1)[0]  # (8,)
    print(f"random γ: sums {sums_gamma.min():.4f} … {sums_gamma.max():.4f}")
    assert sums_gamma.max() - sums_gamma.min() > 0.5

# %% [markdown]
# The gradient table says what *does* learn from such a loss: the LayerNorm's own parameters. $\beta$
# is added once per token to every feature, so its gradient is 8 (the tokens) in each of its 16
# entries, norm $8 \cdot \sqrt{16} = 32$; $\gamma$'s is the sum of the eight normalised tokens
# $\hat x$. Only $x$, and everything below it, gets nothing.
#
# **RMSNorm** (Zhang and Sennrich, 2019), used by LLaMA, keeps only the scale: it divides by
# $\sqrt{\frac1d\sum_i x_i^2 + \varepsilon}$ and multiplies by $\gamma$, with no mean subtracted and no
# $\beta$. Its output no longer has mean 0, so the sum-to-zero result above does not apply, and its
# Jacobian removes only the scale direction $x$, not $\mathbf 1$. Against `nn.RMSNorm` and Hugging
# Face's LLaMA:

# %%
# NBVAL_CHECK_OUTPUT
rms = nn.RMSNorm(D, eps=EPS)
rms_by_hand = x / torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + EPS)  # (1, 8, D)
show(rms_by_hand=rms_by_hand)
rms_err = (rms(x) - rms_by_hand).abs().max().item()
print(f"max |Δ| against nn.RMSNorm: {below(rms_err, 1e-5)}")
print(
    f"token means after RMSNorm: {rms_by_hand[0].mean(-1).min():.4f} … "
    f"{rms_by_hand[0].mean(-1).max():.4f};  root mean squares: "
    f"{rms_by_hand[0].pow(2).mean(-1).sqrt().mean():.4f}"
)
assert rms_err < 1e-5
torch.testing.assert_close(rms(x), rms_by_hand)
torch.testing.assert_close(LlamaRMSNorm(D, eps=EPS)(x), rms_by_hand)
rms_sums = rms_by_hand[0].sum(-1)  # (8,): they follow x, unlike LayerNorm's
assert rms_by_hand[0].mean(-1).abs().max() > 0.1  # not centred
assert rms_sums.max() - rms_sums.min() > 1.0

# %% [markdown]
# ## LayerNorm against BatchNorm under padding
#
# Follow 吃 in `[CLS] 我 吃 苹 果 [SEP]` alone, padded to 8, and in the book's padded batch. LayerNorm
# computes 吃's statistics from 吃's vector alone; BatchNorm in training mode pools each feature over
# the whole batch, pads included. Two controls: the article's "all dimensions of a sentence" (A48),
# whose statistics include the pads too, and BatchNorm over the real tokens only (the attention mask
# says which), which is immune to the pads but not to the batch-mates.

# %%
# NBVAL_CHECK_OUTPUT
short_ids = torch.tensor([[vocab[t] for t in SHORT_EXAMPLE]])  # (1, 6)
pos = SHORT_EXAMPLE.index("吃")
inputs = {
    "alone, no padding": (emb(short_ids), 0),  # (1, 6, D), row 0
    "alone, padded to 8": (emb(pad_ids[1:]), 0),  # (1, 8, D), row 0
    "in the padded batch": (x_batch, 1),  # (2, 8, D), row 1
}
show(short_ids=short_ids, pad_ids=pad_ids, attention_mask=attention_mask)
masks = {  # which positions are real tokens, (B, L)
    "alone, no padding": torch.ones_like(short_ids),
    "alone, padded to 8": attention_mask[1:],
    "in the padded batch": attention_mask,
}


# %%
def masked_batch_norm(xb: torch.Tensor, mask: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """BatchNorm's training-mode statistics over the real tokens only: one mean and variance per
    feature, pooled over every (sentence, position) whose mask is 1."""
    m = mask.unsqueeze(-1).to(xb.dtype)  # (B, L, 1)
    mean = (xb * m).sum(dim=(0, 1)) / m.sum()  # (D,)
    var = ((xb - mean) ** 2 * m).sum(dim=(0, 1)) / m.sum()  # (D,)
    return (xb - mean) / torch.sqrt(var + eps)  # (B, L, D)


# %%
# NBVAL_CHECK_OUTPUT
bn_pad = nn.BatchNorm1d(D)
ln_pad = LayerNorm(D)
rows = {}
for name, (xb, row) in inputs.items():
    rows[name] = (
        ln_pad(xb)[row, pos],  # (D,) LayerNorm, per token
        F.layer_norm(xb[row], tuple(xb[row].shape))[pos],  # (D,) per sentence, the pads included
        bn_pad(xb.transpose(1, 2)).transpose(1, 2)[row, pos],  # (D,) BatchNorm, training mode
        masked_batch_norm(xb, masks[name])[row, pos],  # (D,) BatchNorm over real tokens only
    )
ref = rows["alone, no padding"]
print("吃 in the short sentence: max |Δ| to the sentence alone, unpadded")
print(
    f"{'':<22} {'LN per token':>12} {'LN per sentence':>15} {'BN train':>9} {'BN, real only':>13}"
)
for name, outs in rows.items():
    gaps = [(o - r).abs().max().item() for o, r in zip(outs, ref)]
    print(f"{name:<22} {gaps[0]:>12.4f} {gaps[1]:>15.4f} {gaps[2]:>9.4f} {gaps[3]:>13.4f}")

# %% [markdown]
# In evaluation mode BatchNorm applies the running statistics from training, a fixed affine map per
# feature, so 吃 comes out the same in all three settings; the padding did its damage to those running
# statistics, which pooled `[PAD]` vectors.

# %%
# NBVAL_CHECK_OUTPUT
bn_pad.eval()
eval_rows = {
    name: bn_pad(xb.transpose(1, 2)).transpose(1, 2)[row, pos] for name, (xb, row) in inputs.items()
}
for name, v in eval_rows.items():
    print(f"BN eval, {name:<22} max |Δ| {(v - eval_rows['alone, no padding']).abs().max():.4f}")
print(f"running mean of feature 0 after the three training batches: {bn_pad.running_mean[0]:.4f}")

# %% [markdown]
# (claim-a9)=
# ### Claim A9: LayerNorm suits text better than BatchNorm, because padding distorts batch statistics
#
# **Holds only when BatchNorm pools the pads; the larger reason is batch dependence.** A token's
# LayerNorm output is the same alone, padded or batched; its BatchNorm output moves with the padding
# and the batch-mates in training mode, and in evaluation mode applies statistics pooled over pads. So
# far the article is right. But the controls take the "because" apart: BatchNorm computed over the
# real tokens only is immune to the pads (0.0000 above) and still moves with its batch-mate, while
# per-sentence LayerNorm moves with the pads too. Padding is one way batch statistics go wrong, and
# a fixable one; the one masking cannot fix is that a token's output depends on the other sentences
# of its batch, whose statistics in text are noisy (Shen et al., 2020, "PowerNorm").

# %%
# CLAIM A9: holds only when BatchNorm pools the pads; masked BatchNorm still moves with its batch-mates
moved = {  # name -> how far each variant moved 吃, against the sentence alone and unpadded
    name: [(o - r).abs().max().item() for o, r in zip(outs, ref)] for name, outs in rows.items()
}
padded, batched = moved["alone, padded to 8"], moved["in the padded batch"]
assert all(m[0] < 1e-5 for m in moved.values())  # LayerNorm per token: unchanged everywhere
assert padded[2] > 0.05 and batched[2] > 0.05  # BatchNorm (training): moved by pads, batch-mates
assert padded[1] > 0.01  # the article's per-sentence LayerNorm: moved by the pads as well
assert padded[3] < 1e-5 and batched[3] > 0.05  # BN on real tokens: immune to pads, not batch-mates
for v in eval_rows.values():  # BatchNorm (eval): a fixed map, the same everywhere
    torch.testing.assert_close(v, eval_rows["alone, no padding"])

# %% [markdown]
# ## Where LayerNorm sits in BERT
#
# Each sub-layer of Hugging Face's `BertLayer` ends in a small module (`BertSelfOutput` after attention,
# `BertOutput` after the FFN) whose `forward` is:

# %%
print(inspect.getsource(BertSelfOutput.forward))

# %% [markdown]
# The LayerNorm takes `hidden_states + input_tensor`, the sub-layer's output plus the residual: post-LN,
# $x \leftarrow \text{LN}(x + f(x))$. To confirm that this is what runs, we copy a one-layer Hugging Face
# BERT into tfx and compare it with tfx's `EncoderLayer` in both placements:

# %%
# NBVAL_CHECK_OUTPUT
tiny = tfx.model.bert.BertConfig.tiny(n_layers=1)
tfx.set_seed(0)
hf_tiny = transformers.BertModel(
    transformers.BertConfig(**tiny.to_hf_kwargs(), attn_implementation="eager")
).eval()
with torch.no_grad():
    for p in hf_tiny.encoder.layer[0].parameters():  # nonzero biases and LayerNorm γ, β everywhere
        p.add_(0.1 * torch.randn_like(p))
hf_layer = hf_tiny.encoder.layer[0]
tfx_layer = tfx.model.bert.from_huggingface(hf_tiny).layers[0].eval()
tfx.set_seed(0)
h = torch.randn(1, L, tiny.d_model)  # (1, 8, 64): stand-in for the embeddings
with torch.no_grad():
    ref_out = hf_layer(h)  # (1, 8, 64)
    gaps = {}
    for norm_first in (False, True):
        tfx_layer.norm_first = norm_first
        gaps[norm_first] = (tfx_layer(h) - ref_out).abs().max().item()
        shown = below(gaps[norm_first], 1e-5) if not norm_first else f"{gaps[norm_first]:.1f}"
        print(f"tfx EncoderLayer, norm_first={norm_first}: max |Δ| to BertLayer {shown}")
    tfx_layer.norm_first = False
show(h=h, ref_out=ref_out)

# %% [markdown]
# (claim-a3)=
# ### Claim A3: BERT places LayerNorm before each sub-layer (pre-LN)
#
# **Fails.** Hugging Face's `BertLayer` is post-LN: a tfx layer wired post-LN reproduces it to float
# precision, the same weights wired pre-LN do not. The article's own formula,
# $x_\text{out} = \text{LayerNorm}(x_\text{in} + \text{Sublayer}(x_\text{in}))$, and its own layer class
# are post-LN too. Pre-LN is what Wang et al. (2019) showed trains deep stacks and GPT-2 made the
# default for language models; Tensor2Tensor, the Transformer authors' own library, already
# normalised before each sub-layer in its default settings of 2018.

# %%
# CLAIM A3: fails: Hugging Face's BertLayer is post-LN, LN(x + f(x)); the article's own formula and code agree
print(f"tfx post-LN vs BertLayer: {below(gaps[False], 1e-5)}; pre-LN: {gaps[True]:.1f}")
assert gaps[False] < 1e-5  # post-LN reproduces BERT's layer
assert gaps[True] > 0.1  # pre-LN with the same weights does not
src = inspect.getsource(BertSelfOutput.forward) + inspect.getsource(BertOutput.forward)
assert src.count("self.LayerNorm(hidden_states + input_tensor)") == 2

# %% [markdown]
# tfx's `EncoderLayer`, on which every later chapter builds, has both placements behind `norm_first`.
# The `else` branch is BERT's post-LN (attention, dropout, add, LayerNorm, then the same for the FFN);
# in the `if` branch, pre-LN, the LayerNorm moves inside each branch and the stream `x` is only added to.

# %%
tfx.book.source.show_source(EncoderLayer.forward)

# %% [markdown]
# ## The two wirings
#
# Figure 5.1 draws both wirings from each layer's own `norm_first` flag. In post-LN everything that
# leaves a layer is normalised. In pre-LN the LayerNorm sits inside each branch: the sub-layers see
# normalised inputs, but the residual stream is never normalised; it only accumulates.

# %%
# Figure 5.1: The two wirings of an encoder layer, drawn from each layer's norm_first flag, input at
#   the bottom and output at the top, blue lines the residual paths. Left, BERT's post-LN: each
#   LayerNorm sits on the main path after its "+", so all that leaves a sub-layer is normalised.
#   Right, pre-LN: each LayerNorm sits inside its branch, before attention or the feed-forward
#   block, and the main path is only ever added to.
pre_layer = build_stack(StackConfig(depth=1, norm="pre")).layers[0]
fig = tfx.book.viz.encoder_wiring(tfx_layer, pre_layer, titles=["BERT (post-LN)", "pre-LN"])
for title, blocks in zip(["post-LN", "pre-LN"], tfx.book.viz.drawn_blocks(fig)):
    print(f"{title}: {' → '.join(map(str, blocks))}")

# %% [markdown]
# ## Post-LN against pre-LN through depth
#
# `tfx.inspect.stack` builds a stack of tfx `EncoderLayer`s ($d = 64$, float64) whose placement,
# residual path, depth and weight scale are switches; `probe_stack` reports statistics of the residual
# stream $x_l$ after each layer $l$. Every weight is drawn from $\mathcal N(0, s^2/\text{fan-in})$ with
# $s = 1$, so each linear map keeps the size of its input: what changes with depth comes from the
# wiring.

# %%
# NBVAL_CHECK_OUTPUT
tfx.book.source.show_source(Stack.layer_forward)

# %% [markdown]
# The mean per-token norm $\lVert x_l \rVert$ through 12 and 24 layers, post-LN and pre-LN:

# %%
# NBVAL_CHECK_OUTPUT
D_STACK = StackConfig().d_model
depth_probes = {
    (n, depth, fn): probe_stack(StackConfig(depth=depth, norm=n, final_norm=fn))
    for depth in (12, 24)
    for n, fn in (("post", False), ("pre", True), ("pre", False))
}
print("‖x_l‖ per token; sqrt(d) =", f"{math.sqrt(D_STACK):.4f}")
print(f"{'layer':>5} {'post-LN 12':>11} {'pre-LN 12':>10} {'post-LN 24':>11} {'pre-LN 24':>10}")
for layer in (0, 1, 2, 4, 8, 12, 16, 20, 24):
    cells = []
    for n, depth in (("post", 12), ("pre", 12), ("post", 24), ("pre", 24)):
        norms = depth_probes[n, depth, n == "pre"].act_norm
        cells.append(f"{norms[layer]:.4f}" if layer <= depth else "")
    print(f"{layer:>5} {cells[0]:>11} {cells[1]:>10} {cells[2]:>11} {cells[3]:>10}")
print("output the head reads (‖·‖ per token):")
for (n, depth, fn), p in depth_probes.items():
    print(f"  {n}-LN, {depth} layers, final LayerNorm {fn!s:<5}: {p.out_norm:.4f}")

# %%
# Figure 5.2: Mean per-token norm of the residual stream x_l after each layer l (0 = the embedding)
#   of a 24-layer stack at initialisation (d = 64), post-LN against pre-LN. Post-LN's LayerNorm
#   resets every token to norm √d = 8 after each layer, a flat line; nothing rescales pre-LN's
#   stream, so its norm keeps growing with depth, roughly like the square root of l.
x_axis = list(range(25))
fig = tfx.book.viz.plot_curves(
    x_axis,
    {
        "post-LN": depth_probes["post", 24, False].act_norm,
        "pre-LN": depth_probes["pre", 24, True].act_norm,
    },
    xlabel="layer l (0 = embedding)",
    ylabel="‖x_l‖ per token",
    title="the residual stream through 24 layers at initialisation",
    marker=".",
)

# %% [markdown]
# Post-LN resets every token to norm $\sqrt d = 8$ after each layer. Pre-LN normalises only what enters
# each branch; each sub-layer then *adds* a vector of roughly fixed size to a stream that nothing
# rescales, so $\lVert x_l \rVert^2$ grows about linearly with depth and $\lVert x_l \rVert$ like
# $\sqrt l$: from 12 to 24 layers by about $\sqrt 2$, not 2. So the later layers' contributions are a
# shrinking fraction of an ever larger stream, and **a pre-LN stack needs a final LayerNorm**: without
# it the head receives a vector whose scale depends on the depth. GPT-2, a pre-LN model, has `ln_1`
# before its attention and a final `ln_f`; `StackConfig` adds one by default for `norm="pre"`.

# %%
# NBVAL_CHECK_OUTPUT
post24, pre24, pre12 = (
    depth_probes["post", 24, False],
    depth_probes["pre", 24, True],
    depth_probes["pre", 12, True],
)
raw12, raw24 = depth_probes["pre", 12, False], depth_probes["pre", 24, False]
growth = pre24.act_norm[24] / pre24.act_norm[12]
print(f"pre-LN ‖x_24‖ / ‖x_12‖ = {growth:.4f} (sqrt 2 = {math.sqrt(2):.4f})")
sqrt_d = math.sqrt(D_STACK)
assert all(abs(v - sqrt_d) < 1e-3 for v in post24.act_norm[1:])  # post: reset at every layer
assert pre24.act_norm[24] > pre24.act_norm[12] > pre24.act_norm[1] > pre24.act_norm[0]
assert 1.2 < growth < 1.6  # like sqrt(l), not like l
assert raw24.out_norm > raw12.out_norm > 2 * sqrt_d  # no final LN: depends on depth
assert abs(pre24.out_norm - sqrt_d) < 1e-3  # final LN: back to sqrt(d)
assert abs(pre12.out_norm - pre24.out_norm) < 1e-3
with torch.device("meta"):  # GPT-2 is pre-LN and ends in a final LayerNorm, ln_f
    gpt2 = transformers.GPT2Model(transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4))
gpt2_src = inspect.getsource(GPT2Block.forward)
print(
    f"GPT-2: ln_1 before attention: {gpt2_src.index('self.ln_1(') < gpt2_src.index('self.attn(')}; "
    f"final LayerNorm: {gpt2.ln_f}"
)
assert gpt2_src.index("self.ln_1(") < gpt2_src.index("self.attn(")
assert isinstance(gpt2.ln_f, nn.LayerNorm)

# %% [markdown]
# ## Residuals
#
# With the residual path off, each sub-layer's output replaces the stream. Through 24 layers, how
# much of the input survives (the cosine between each token's $x_l$ and its embedding $x_0$), and what
# reaches the first layer in the backward pass? The weights are drawn at half scale ($s = 0.5$), so that
# the residual stack without LayerNorm does not blow up (at $s = 1$ it does; try the widget).

# %%
# NBVAL_CHECK_OUTPUT
# magnitudes: float64; without LayerNorm and residual each layer scales the signal by about
# s = 0.5 forwards and backwards, so the tiny norms are products of 24 factors, not differences
res_probes = {
    (n, r): probe_stack(StackConfig(depth=24, norm=n, residual=r, init_scale=0.5))
    for n in ("post", "pre", "none")
    for r in (True, False)
}
print(
    f"{'wiring':<22} {'‖x_24‖':>10} {'cos(x_24, x_0)':>15} {'‖∇ layer 1‖':>12} {'‖∇ layer 24‖':>13}"
)
for (n, r), p in res_probes.items():
    name = f"{n}-LN" if n != "none" else "no LN"
    print(
        f"{name + (', residual' if r else ', no residual'):<22} {p.act_norm[-1]:>10.4g} "
        f"{p.act_cos[-1]:>15.4f} {p.grad_norm[0]:>12.4g} {p.grad_norm[-1]:>13.4g}"
    )

# %%
# Figure 5.3: Mean cosine between each token's residual stream x_l and its embedding x_0 through 24
#   layers at half-scale initialisation, for post-LN and pre-LN, each with and without the residual
#   path. With the residual the cosine falls slowly and the input is still part of the sum at layer
#   24; without it the cosine drops to about 0 after the first layer and stays there.
fig = tfx.book.viz.plot_curves(
    x_axis,
    {
        f"{n}-LN, {'residual' if r else 'no residual'}": res_probes[n, r].act_cos
        for n in ("post", "pre")
        for r in (True, False)
    },
    xlabel="layer l",
    ylabel="cos(x_l, x_0)",
    title="how much of each token's embedding survives (mean over tokens)",
    marker=".",
)

# %% [markdown]
# Without the residual a token keeps nothing of its embedding after a few layers, with or without
# LayerNorm; with it, the input is still part of the sum 24 layers up. Without LayerNorm, every linear
# map at $s = 0.5$ halves what passes through it, forward and backward, so the first layer's gradient
# vanishes; the residual's identity route keeps it as large as the last layer's. (Even at $s = 1$ the
# plain stack dies away, by the factor printed at the end: attention averages nearly uncorrelated value
# vectors, which shortens them, and GELU passes on only part of its input's second moment.) The first layer's gradient norms, for that pair:

# %%
# NBVAL_CHECK_OUTPUT
# magnitudes: float64; without the residual the first layer's gradient is a product of 24
# layers' shrinking factors, not a difference
for residual in (True, False):
    model = build_stack(StackConfig(depth=24, norm="none", residual=residual, init_scale=0.5))
    with tfx.inspect.timing.threads(
        1
    ):  # (1, 8, 64) tensors: one thread is faster (see probe_stack)
        loss, out, xs = stack_loss(model)
        loss.backward()
    print(f"--- no LN, residual {'on' if residual else 'off'}: loss {loss.item():.4f}; layer 1:")
    print(grad_norms(model.layers[0]))

# %% [markdown]
# With LayerNorm, the first layer's gradient does not vanish at initialisation even without the
# residual (each LayerNorm rescales the backward signal as it rescales the forward one); what is lost is
# the token itself. The placement's effect on gradients through depth is chapter 06's subject.

# %%
# NBVAL_CHECK_OUTPUT
# magnitudes: a ratio of two float64 gradient norms, the smaller one a product of 24 layers'
# shrinking factors, not a difference
for n in ("post", "pre"):
    on, off = res_probes[n, True], res_probes[n, False]
    assert on.act_cos[-1] > 0.3 and abs(off.act_cos[-1]) < 0.1, n  # the input survives only with it
    assert all(math.isfinite(g) and g > 0.1 for g in off.grad_norm), n  # LN alone keeps gradients
plain, skip = res_probes["none", False], res_probes["none", True]
ratio_plain = plain.grad_norm[0] / plain.grad_norm[-1]
ratio_skip = skip.grad_norm[0] / skip.grad_norm[-1]
print(
    f"no LN: ‖∇ layer 1‖ / ‖∇ layer 24‖ = {ratio_plain:.1e} without, {ratio_skip:.4f} with residual"
)
assert ratio_plain < 1e-10  # the plain stack: the first layer's gradient vanishes
assert 0.1 < ratio_skip < 10  # the residual keeps it at the size of the last layer's
assert skip.act_cos[-1] > 0.2 and abs(plain.act_cos[-1]) < 0.1

# %% [markdown]
# ## Two notes on depth
#
# **Why pre-LN keeps an identity path for the gradient, and post-LN does not.** In pre-LN,
# $x_L = x_l + \sum_{k > l} f_k(\mathrm{LN}(x_{k-1}))$, so $\partial x_L / \partial x_l = I + \dots$:
# the gradient at the top comes down to every layer through the $I$, un-normalised, and each branch
# adds its part on the way. In post-LN, $x_k = \mathrm{LN}(x_{k-1} + f_k(x_{k-1}))$: the way down from
# layer $L$ to layer $l$ passes through $L - l$ LayerNorm Jacobians, each dividing by that layer's
# $\sigma$ and removing $\mathbf 1$ and $\hat x$; there is no un-normalised route. The gradient arriving
# at each layer's input, $\lVert \partial \text{loss} / \partial x_{l-1} \rVert$, at 24 layers
# ($s = 1$):

# %%
# NBVAL_CHECK_OUTPUT
arriving = {}
for n, fn in (("post", False), ("pre", True)):
    g = depth_probes[n, 24, fn].input_grad_norm  # 24 values: the gradient at each layer's input
    arriving[n] = g[0] / g[-1]
    print(f"{n}-LN: ‖∂loss/∂x_in‖ at layer 1 {g[0]:.3f}, at layer 24 {g[-1]:.3f}, ", end="")
    print(f"ratio {arriving[n]:.2f}")
assert arriving["pre"] > 2  # pre-LN: every layer's branch adds to what the identity path carries
assert arriving["post"] < 1.5  # post-LN: each LayerNorm rescales it on the way down

# %% [markdown]
# At this initialisation (fan-in, $s = 1$), pre-LN's gradient grows on its way down, as every branch
# adds to it, while post-LN's stays at one size. How much it grows depends on how large the branches
# are next to the stream, so on the initialisation: chapter 06 measures gradients through depth at
# other scales.
#
# **Keeping the pre-LN stream in check.** GPT-2 scales each branch's output projection ($W_O$, $W_2$)
# by $1/\sqrt{2N}$ for $N$ layers, so that the $2N$ added vectors together have the size of one; ReZero
# (Bachlechner et al., 2020) multiplies each branch by a learned scalar that starts at 0. For post-LN,
# DeepNorm (Wang et al., 2022) computes $\mathrm{LN}(\alpha x + f(x))$ with $\alpha > 1$, and Admin
# (Liu et al., 2020) sets a residual weight per layer from a first forward pass; both train post-LN
# stacks far deeper than BERT's 24 layers. GPT-2's rule on the 24-layer pre-LN stack:

# %%
# NBVAL_CHECK_OUTPUT
scaled_stack = build_stack(StackConfig(depth=24, norm="pre"))
with torch.no_grad():
    for layer in scaled_stack.layers:  # GPT-2: the branches' output projections × 1/sqrt(2N)
        layer.attn.out.weight.mul_(1 / math.sqrt(2 * 24))
        layer.ff.fc2.weight.mul_(1 / math.sqrt(2 * 24))
with tfx.inspect.timing.threads(1), torch.no_grad():
    _, _, xs_scaled = stack_loss(scaled_stack)  # [x_0, …, x_24], each (1, 8, 64)
scaled_norms = [xl.norm(dim=-1).mean().item() for xl in xs_scaled]  # mean per-token norm
plain_norms = depth_probes["pre", 24, True].act_norm
print(f"{'layer':>5} {'pre-LN':>7} {'× 1/sqrt(2N)':>13}")
for layer in (0, 6, 12, 18, 24):
    print(f"{layer:>5} {plain_norms[layer]:>7.2f} {scaled_norms[layer]:>13.2f}")
assert plain_norms[24] / plain_norms[0] > 3  # the plain pre-LN stream grows like sqrt(l)
assert scaled_norms[24] / scaled_norms[0] < 1.3  # scaled branches: nearly flat

# %% [markdown]
# ## Widget: residual and LayerNorm, live
#
# The controls rebuild the stack and rerun the running example:
#
# - **residual**: the "x +" of both sub-layers on or off;
# - **LayerNorm**: off removes every LayerNorm (and disables the placement buttons);
# - **post-LN / pre-LN**: where it sits (pre-LN gets its final LayerNorm);
# - **depth**: 1 to 48 layers;
# - **init scale**: $s$, from $1/4$ to 4, to see how much depends on the size of the weights.
#
# It prints, per layer, the mean and standard deviation of $x_l$, the per-token norm and the cosine to
# the embedding; values that overflow even float64 print as `inf` or `n/a`. Chapter 06's widget shows
# the same stack's gradients.

# %%
tfx.book.widgets.layernorm_residual_widget()

# %% [markdown]
# What the widget prints at three settings:

# %%
# NBVAL_CHECK_OUTPUT
widget_probes = [
    probe_stack(StackConfig(depth=6, norm="pre")),
    probe_stack(StackConfig(depth=6, norm="none", residual=True)),
    probe_stack(StackConfig(depth=6, norm="none", residual=False)),
]
for p in widget_probes:
    print(activation_report(p), end="\n\n")
grows, dies = widget_probes[1].act_norm, widget_probes[2].act_norm
per_layer = (dies[-1] / dies[0]) ** (1 / 6)  # the geometric mean factor over the 6 layers
print(f"no LN, no residual, s = 1: ‖x‖ shrinks by about ×{per_layer:.2f} per layer")
assert all(b > a for a, b in zip(grows, grows[1:]))  # no LN, residual: grows at every layer
assert dies[-1] < 0.1 * dies[0] and per_layer < 0.7  # no LN, no residual: dies away, even at s = 1

# %% [markdown]
# ## Putting it together: BERT from its pieces
#
# Every block of the encoder is now built: the embeddings (chapter 01, Figure 1.1), attention (03),
# the feed-forward block (04), and LayerNorm with the residual wiring, `EncoderLayer.forward` above.
# Three classes assemble them.
# `BertEmbeddings` sums the token, segment and position rows and normalises them. `BertModel` turns
# the (B, L) padding mask into a (B, 1, 1, L) key mask once, then runs `n_layers` post-LN
# `EncoderLayer`s.
# `BertForMaskedLM` puts chapter 07's masked-LM head on top, whose decoder is the token-embedding
# matrix itself. `BertModel` also carries options that other chapters switch on and BERT leaves off:
# rotary and ALiBi positions (`cfg.position`, chapter 02), `head_scale` (chapter 07's head
# ablations) and `attn_impl`, the attention kernel (chapter 08). With BERT's configuration none of
# those branches is taken.

# %%
tfx.book.source.show_source(BertEmbeddings, BertModel, BertForMaskedLM)

# %% [markdown]
# Chapter 01 counted BERT's parameters from the configuration alone (`param_counts`). Built from
# these classes on the `meta` device (shapes, no memory), BERT-base with its masked-LM head has
# exactly that many, piece by piece; the head's decoder weight is the embedding table, counted once.

# %%
# NBVAL_CHECK_OUTPUT
with torch.device("meta"):
    bert = BertForMaskedLM(BertConfig.base())
formula = param_counts(BertConfig.base(), pooler=False, mlm_head=True)
built = {
    "embeddings": n_params(bert.bert.embeddings),
    "12 encoder layers": n_params(bert.bert.layers),
    "masked-LM head (own)": n_params(bert) - n_params(bert.bert),
}
from_formula = {
    "embeddings": sum(v for k, v in formula.items() if "embedding" in k),
    "12 encoder layers": sum(v for k, v in formula.items() if k.startswith(("attention", "FFN"))),
    "masked-LM head (own)": formula["MLM head"],
}
print(f"{'BERT-base, masked LM':<22} {'built':>12} {'chapter 01':>12}")
for name, n in built.items():
    print(f"{name:<22} {n:>12,} {from_formula[name]:>12,}")
print(f"{'total':<22} {n_params(bert):>12,} {sum(formula.values()):>12,}")
assert built == from_formula and n_params(bert) == sum(formula.values())

# %% [markdown]
# Counting parameters shows the pieces are all there, not that they are wired as BERT wires them. So
# run the assembled model: a tiny Hugging Face `BertModel` (2 layers, $d = 64$) with every weight
# nudged off its initialisation (so that no bias is zero and no $\gamma$ is one), copied into tfx
# with `from_huggingface`, both fed the padded batch and its padding mask. The shapes on the way, and
# the largest difference of the final hidden states:

# %%
# NBVAL_CHECK_OUTPUT
tiny2 = BertConfig.tiny(n_layers=2)
tfx.set_seed(0)
hf_bert = transformers.BertModel(
    transformers.BertConfig(**tiny2.to_hf_kwargs()), add_pooling_layer=False
).eval()
with torch.no_grad():
    for p in hf_bert.parameters():  # nonzero biases, γ ≠ 1, β ≠ 0: every weight matters
        p.add_(0.1 * torch.randn_like(p))
ours_bert = from_huggingface(hf_bert).eval()
ids_pad, mask_pad = padded_example()  # (2, 8) each: the second row ends in two [PAD]
with torch.no_grad():
    emb = ours_bert.embeddings(ids_pad, torch.zeros_like(ids_pad))  # (2, 8, 64), segment 0
    hidden_ours = ours_bert(ids_pad, attention_mask=mask_pad)  # (2, 8, 64)
    hidden_hf = hf_bert(input_ids=ids_pad, attention_mask=mask_pad).last_hidden_state  # (2, 8, 64)
show(ids=ids_pad, attention_mask=mask_pad, embeddings=emb, hidden=hidden_ours, hf=hidden_hf)
bert_gap = (hidden_ours - hidden_hf).abs().max().item()
print(
    f"tfx BertModel vs Hugging Face BertModel, 2 layers, padded batch: max |Δ| {below(bert_gap, 1e-5)}"
)
assert bert_gap < 1e-5
assert (hidden_hf - hf_bert.embeddings(ids_pad)).abs().max() > 0.1  # the layers did something

# %% [markdown]
# The two agree to float rounding, padding mask included. {doc}`Chapter 07 <07_masked_lm>` repeats the
# check with the masked-LM head on top, logits and loss, in its section "The model and its head".

# %% [markdown]
# ## Summary
#
# - LayerNorm normalises each token over its own $d$ features (population standard deviation,
#   $\varepsilon$ inside the root); per sentence is another operation, and BatchNorm pools each feature
#   over batch and positions (A48 holds only per token). BERT-base has 25.
# - Its Jacobian removes the constant and the scale directions, so `out.sum()` behind a LayerNorm with
#   equal $\gamma$ and $\beta = 0$ has no gradient (chapter 06, A52).
# - LayerNorm ignores padding and batch-mates; BatchNorm in training mode does not. Masking the pads
#   out of BatchNorm fixes the padding but not the batch-mates (A9 holds only when BatchNorm pools the
#   pads).
# - BERT is post-LN, LN(x + f(x)) (A3 fails). Post-LN resets every token to norm $\sqrt d$; pre-LN's
#   stream grows like $\sqrt{\text{depth}}$ and needs a final LayerNorm.
# - The residual keeps the input in the stream and, without LayerNorm, the first layer's gradient from
#   vanishing.
#
# **The article's other claims on this chapter's material**, on the articles' own layer code, are
# settled in appendix {doc}`93 <93_ledger_layers>`: the first article's encoder-layer class
# lacks the attention mask, the query and output biases, the attention dropout and BERT's
# $\varepsilon$ ({ref}`A51 <claim-a51>`, fails as a copy); `nn.TransformerEncoderLayer` is a BERT layer
# only with BERT's settings and in evaluation mode ({ref}`A23 <claim-a23>`); the numpy article's
# residual spans attention and FFN together ({ref}`N16 <claim-n16>`, fails) and its LayerNorm's
# $\gamma$, $\beta$ cannot be trained ({ref}`N17 <claim-n17>`, fails).
#
# ## What you can now do
#
# - Write LayerNorm by hand, derive its Jacobian, and say why `out.sum()` behind it gets no gradient.
# - Tell LayerNorm from BatchNorm on a padded batch, and find BERT's LayerNorms in Hugging Face's source.
# - Wire a stack post-LN or pre-LN, with or without residuals, and predict how the residual stream and
#   the first layer's gradient behave over 12, 24 or 48 layers.
# - Read BERT whole: the three classes that assemble embeddings and encoder layers into
#   `BertForMaskedLM`, chapter 01's parameter count found again in them, and the assembled model run
#   against Hugging Face's on a padded batch.
#
# Next, chapter 06 asks how large a gradient reaches each parameter, and what makes it shrink, blow
# up or vanish.
#
# ## Exercises
#
# Tiers: *warm-up* checks what the chapter showed, *core* applies it to a new case, *build it*
# has you write the code, *open* has no single answer.
#
# 1. *(warm-up)* **Invariances.** Show that LayerNorm (γ = 1, β = 0) gives the same output for the
#    running example's $x$ and for $3x - 2$. Which two directions of the Jacobian explain it?
# 2. *(warm-up)* **BERT-large.** How many LayerNorms does BERT-large (24 layers) have? Count them in
#    a Hugging Face model built on the meta device.
# 3. *(core)* **Unequal γ.** Predict before you measure. With $\beta = 0$ and a random $\gamma$,
#    does `LN(x).sum()` still have zero gradient with respect to $x$? Measure it.
# 4. *(core)* **Pre-LN growth.** In a 48-layer pre-LN stack, at which layers does the per-token norm
#    of the residual stream first exceed twice, and four times, the embedding's? Predict both first
#    from the $\sqrt l$ law, $\lVert x_l \rVert^2 \approx \lVert x_0 \rVert^2 + c\,l$, with $c$ fitted
#    on layers 1 to 3 only, so that both answers lie outside the fit.
# 5. *(open)* **Open question.** In the widget, switch LayerNorm off and keep the residual. Why does
#    the stream explode at $s = 1$ but not at $s = 0.5$? Estimate the growth factor per layer from
#    the printed norms.
# 6. *(build it)* **A pre-LN layer from torch's parts.** Write the forward pass of a pre-LN encoder
#    layer with `F.layer_norm`, `F.linear`, `F.scaled_dot_product_attention` and `F.gelu`, reading
#    the weights of a tfx `EncoderLayer(norm_first=True)`, and check it against that layer in eval
#    mode.

# %% [markdown]
# :::{admonition} Solution to exercise 1
# :class: dropdown
# For $y = a x + b$ the mean becomes $a\mu + b$ and the standard deviation $|a|\sigma$, so
# $\hat y = \operatorname{sign}(a)\,\hat x$: for $a = 3$ the output is the same (exactly with
# $\varepsilon = 0$; only nearly otherwise, since $\varepsilon$ does not scale with $a$). Adding $b$ moves $x$ along
# $\mathbf 1$, and since $x = \mu \mathbf 1 + \sigma \hat x$, scaling moves it within the span of
# $\mathbf 1$ and $\hat x$: the two directions the Jacobian sends to zero.
# :::

# %% tags=["hide-cell"]
# 1. LN(3x - 2) = LN(x) with γ = 1, β = 0
torch.testing.assert_close(
    F.layer_norm(3.0 * x - 2.0, (D,), eps=0.0), F.layer_norm(x, (D,), eps=0.0)
)

# %% [markdown]
# :::{admonition} Solution to exercise 2
# :class: dropdown
# One LayerNorm after the embeddings and two in each of the 24 layers, after attention and after the
# FFN: $1 + 2 \cdot 24 = 49$.
# :::

# %% tags=["hide-cell"]
# 2. The LayerNorms of BERT-large, counted on the meta device
with torch.device("meta"):
    large = transformers.BertModel(transformers.BertConfig(num_hidden_layers=24))
n_large = sum(isinstance(m, nn.LayerNorm) for m in large.modules())
print("exercise 2: BERT-large LayerNorms:", n_large)
assert n_large == 49

# %% [markdown]
# :::{admonition} Solution to exercise 3
# :class: dropdown
# No. With $\beta = 0$ the sum is $\gamma \cdot \hat x$, with gradient $J \gamma$ ($J$ the
# normalisation's Jacobian, symmetric). $J$ sends only $\mathbf 1$ and $\hat x$ to zero, so the gradient
# vanishes only when $\gamma$ lies in their span, as $\gamma = c \mathbf 1$ does and a random $\gamma$
# does not. The mean of $\gamma$ still contributes nothing: the gradient is
# $J(\gamma - \bar\gamma \mathbf 1)$. The table shows $\gamma$ and $\beta$ with the gradients they had
# at $\gamma = 1$: the derivative of the sum with respect to them does not involve $\gamma$.
# :::

# %% tags=["hide-cell"]
# 3. The gradient of LN(x).sum() with respect to x, for a random γ and β = 0
ln3 = LayerNorm(D)
with torch.no_grad():
    ln3.weight.copy_(gamma_r)
x3 = x.clone().requires_grad_(True)
ln3(x3).sum().backward()
print(f"exercise 3: ‖∂ LN(x).sum() / ∂x‖ with random γ = {x3.grad.norm():.4f}")
print(grad_norms(ln3))
assert x3.grad.norm() > 0.1
torch.testing.assert_close(ln3.weight.grad, ln.weight.grad)  # as with γ = 1
torch.testing.assert_close(ln3.bias.grad, ln.bias.grad)

# %% [markdown]
# :::{admonition} Solution to exercise 4
# :class: dropdown
# If every layer adds a vector of about the same size, roughly independent of the stream,
# $\lVert x_l \rVert^2 \approx \lVert x_0 \rVert^2 + c\,l$, and $\lVert x_l \rVert = m \lVert x_0 \rVert$
# when $c\,l = (m^2 - 1) \lVert x_0 \rVert^2$. The code fits $c$ as the mean of
# $(\lVert x_l \rVert^2 - \lVert x_0 \rVert^2)/l$ over layers 1 to 3. The doubling comes within a layer
# of the prediction; the quadrupling comes several layers early. One stack's increments of
# $\lVert x_l \rVert^2$ are far from constant (the code prints their range; one is even negative): the
# law describes the average growth, and a fit on three layers of one stack extrapolates its noise.
# :::

# %% tags=["hide-cell"]
# 4. The first layers whose per-token norm passes 2× and 4× the embedding's, against the sqrt(l) law
p48 = probe_stack(StackConfig(depth=48, norm="pre"))
n48 = p48.act_norm
c_fit = sum((n48[k] ** 2 - n48[0] ** 2) / k for k in range(1, 4)) / 3  # growth of ‖x_l‖² per layer
for m in (2, 4):
    predicted = (m * m - 1) * n48[0] ** 2 / c_fit  # ‖x_l‖ = m‖x_0‖  ⇔  c·l = (m² − 1)‖x_0‖²
    first = next(i for i, v in enumerate(n48) if v > m * n48[0])
    print(
        f"exercise 4: {m} × ‖x_0‖ passed at layer {first}; the law fitted on 1-3: {predicted:.1f}"
    )
    if m == 2:
        assert abs(first - predicted) < 1  # in the fit's reach: within a layer
    else:
        assert predicted - first > 2  # farther out: several layers off
increments = [n48[k] ** 2 - n48[k - 1] ** 2 for k in range(1, 49)]  # ‖x_l‖² − ‖x_(l−1)‖²
print(f"   increments of ‖x_l‖² over the 48 layers: {min(increments):.0f} to {max(increments):.0f}")
assert min(increments) < 0 < 3 * c_fit < max(increments)

# %% [markdown]
# :::{admonition} Solution to exercise 5
# :class: dropdown
# Without LayerNorm each branch's output grows with the stream. If a branch's output
# is a fraction $g$ of its input's size and roughly unrelated to it, each sub-layer multiplies
# $\lVert x \rVert^2$ by about $1 + g^2$: geometric growth. At $s = 1$ the widget's norms give about
# 1.35 for layer 1 and a mean of $(168.1 / 8.354)^{1/6} \approx 1.65$ per layer, about $10^{10}$ over 48
# layers; the factor rises with depth because larger vectors give larger scores, so sharper attention
# that averages the values less, and push GELU towards ReLU, which passes more of its input. Each $g$
# carries two weight matrices, so $s = 0.5$ divides $g^2$ by about 16: layer 1's
# $1.35^2 \approx 1 + 0.8$ becomes $\sqrt{1 + 0.8/16} \approx 1.025$ per layer, the mean factor of the
# residual table's 24 layers (8.354 to 14.91).
# :::

# %% tags=["hide-cell"]
# 5. Growth per layer without LayerNorm, residual on: s = 1 (6 layers) against s = 0.5 (24 layers)
grow_1, grow_half = widget_probes[1].act_norm, res_probes["none", True].act_norm
steps_1 = [b / a for a, b in zip(grow_1, grow_1[1:])]  # ‖x_l‖ / ‖x_(l-1)‖ at s = 1
factor = {
    1.0: (grow_1[-1] / grow_1[0]) ** (1 / 6),  # geometric mean over the 6 layers
    0.5: (grow_half[-1] / grow_half[0]) ** (1 / 24),  # and over the 24 layers
}
predicted_half = math.sqrt(1 + (steps_1[0] ** 2 - 1) / 16)  # g² / 16 from layer 1 at s = 1
print("exercise 5: ‖x_l‖ / ‖x_(l-1)‖ at s = 1:", " ".join(f"{r:.2f}" for r in steps_1))
print(
    f"   mean factor per layer: s = 1 {factor[1.0]:.3f}, s = 0.5 {factor[0.5]:.3f} "
    f"(predicted from layer 1 at s = 1: {predicted_half:.3f}); over 48 layers "
    f"×{factor[1.0] ** 48:.1e} and ×{factor[0.5] ** 48:.1f}"
)
assert factor[1.0] > 1.4 and 1 < factor[0.5] < 1.1  # explodes at s = 1, barely grows at s = 0.5
assert abs(predicted_half - factor[0.5]) < 0.02

# %% [markdown]
# :::{admonition} Solution to exercise 6
# :class: dropdown
# Pre-LN normalises what enters each sub-layer and adds the sub-layer's output to the raw stream:
# $x \leftarrow x + \mathrm{Attn}(\mathrm{LN}_1(x))$, then $x \leftarrow x + \mathrm{FFN}(\mathrm{LN}_2(x))$.
# The attention is the fused $[W_Q; W_K; W_V]$ projection split into three, each cut into heads,
# PyTorch's kernel, the heads merged and $W_O$. In eval mode dropout is the identity, so the two
# agree to rounding. Moving the two `F.layer_norm` calls after the sums gives the post-LN layer.
# :::


# %% tags=["hide-cell"]
# 6. A pre-LN encoder layer written with torch.nn.functional, against tfx's
def pre_ln_forward(layer, x):  # x: (B, L, d); eval mode, no mask
    B, L, d = x.shape
    H = layer.attn.n_heads
    h = F.layer_norm(x, (d,), layer.norm1.weight, layer.norm1.bias, layer.norm1.eps)
    qkv = F.linear(h, layer.attn.qkv.weight, layer.attn.qkv.bias)  # (B, L, 3d)
    q, k, v = (
        t.view(B, L, H, d // H).transpose(1, 2) for t in qkv.split(d, dim=-1)
    )  # (B, H, L, d_k)
    ctx = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(B, L, d)  # (B, L, d)
    x = x + F.linear(ctx, layer.attn.out.weight, layer.attn.out.bias)
    h = F.layer_norm(x, (d,), layer.norm2.weight, layer.norm2.bias, layer.norm2.eps)
    return x + F.linear(
        F.gelu(F.linear(h, layer.ff.fc1.weight, layer.ff.fc1.bias)),
        layer.ff.fc2.weight,
        layer.ff.fc2.bias,
    )


tfx.set_seed(0)
pre6 = EncoderLayer(64, 4, 256, norm_first=True).eval()
x6 = torch.randn(2, 8, 64)  # (B, L, d)
with torch.no_grad():
    torch.testing.assert_close(pre_ln_forward(pre6, x6), pre6(x6))
print("exercise 6: the functional pre-LN layer equals EncoderLayer(norm_first=True)")
