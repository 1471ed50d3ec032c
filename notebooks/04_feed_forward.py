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
# # 04 · The feed-forward block
#
# **The question.** After attention has mixed the eight tokens of `[CLS] 我 喜 欢 吃 苹 果 [SEP]`, every
# encoder layer sends each token through a small two-layer network, the feed-forward block (FFN):
#
# $$\mathrm{FFN}(x) = \mathrm{act}(x W_1 + b_1)\, W_2 + b_2,
# \qquad W_1 \in \mathbb{R}^{d \times d_{ff}},\;
# W_2 \in \mathbb{R}^{d_{ff} \times d}.$$
#
# What does it do that attention does not, what does it cost, which activation does BERT use, does
# it have biases, and what happens inside its $d_{ff} = 3072$ hidden units?
#
# We derive it by hand, count and time it, compare GELU with its two approximations, the article's
# formula and ReLU, look inside two briefly trained models and the book model of chapter 07, and end
# with a widget that perturbs a live FFN. The articles' other claims on the FFN are in appendix
# {doc}`93 <93_ledger_layers>`.

# %%
import tfx  # first: importing tfx quiets torchao's import-time log lines (tfx/__init__.py)

# isort: split
import copy
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
import transformers
from torch.testing import assert_close

from tfx.core import RUNNING_EXAMPLE, build_vocab, running_example_ids, show
from tfx.inspect import grad_norms, layer_flops, machine, param_counts, threads, timeit
from tfx.model import (
    ACTIVATIONS,
    BertConfig,
    BertForMaskedLM,
    EncoderLayer,
    FeedForward,
    GatedFeedForward,
    ffn_param_count,
    ffn_sublayer_without,
    gelu_exact,
    gelu_minimum,
    gelu_tanh,
    key_value_view,
    unit_order,
    width_probe,
)

tfx.banner()

# %%
# NBVAL_CHECK_OUTPUT
tokens = RUNNING_EXAMPLE
L = len(tokens)
CHI, PING = tokens.index("吃"), tokens.index("苹")  # positions 4 and 5
print(f"{' '.join(tokens)}: L = {L}; 吃 is at position {CHI}, 苹 at {PING}")

# %% [markdown]
# ## The block, by hand
#
# $W_1$ expands a token $x \in \mathbb{R}^{d}$ to $d_{ff}$ hidden units, the activation bends each unit
# on its own, $W_2$ projects back to $d$; the same matrices act on every row of a $(B, L, d)$ batch.
# `nn.Linear` stores $W^{\mathsf T}$, $(\text{out}, \text{in})$, hence the transposes.


# %%
# NBVAL_CHECK_OUTPUT
def ffn_by_hand(d_model: int, d_ff: int):
    tfx.set_seed(0)
    x = torch.randn(1, L, d_model)  # (1, L, d): stand-in for the LayerNorm output
    W1 = torch.randn(d_model, d_ff) / math.sqrt(d_model)  # (d, d_ff)
    b1 = 0.1 * torch.randn(d_ff)  # (d_ff,)
    W2 = torch.randn(d_ff, d_model) / math.sqrt(d_ff)  # (d_ff, d)
    b2 = 0.1 * torch.randn(d_model)  # (d,)
    pre = x @ W1 + b1  # (1, L, d_ff)
    hidden = gelu_exact(pre)  # (1, L, d_ff)
    y = hidden @ W2 + b2  # (1, L, d)
    ff = FeedForward(d_model, d_ff, activation="gelu").eval()
    with torch.no_grad():
        for lin, W, b in ((ff.fc1, W1, b1), (ff.fc2, W2, b2)):
            lin.weight.copy_(W.T)  # nn.Linear keeps Wᵀ: (out, in)
            lin.bias.copy_(b)
        assert_close(ff(x), y)  # tfx.model.layers.FeedForward computes the same thing
    show(x=x, W1=W1, b1=b1, pre=pre, hidden=hidden, W2=W2, b2=b2, y=y)
    return ff, x, y


small_ff, x_small, y_small = ffn_by_hand(8, 32)
print("--- BERT-base")
base_ff, x_base, _ = ffn_by_hand(768, 3072)

# %%
# Figure 4.1: One token through BERT-base's feed-forward block, left to right: the 768-wide input
#   x, W1 (768×3072) expanding it to the 3072 hidden units x W1 + b1, GELU applied to each unit on
#   its own (still 3072 wide), and W2 (3072×768) projecting back to 768. The block widens every
#   token fourfold and narrows it again.
fig = tfx.book.viz.ffn_diagram(
    BertConfig.base().d_model, BertConfig.base().d_ff, BertConfig.base().activation
)

# %% [markdown]
# The cell checked the formula against `tfx.model.layers.FeedForward`, the module every later chapter
# uses. Its `forward` is one line; `self.drop` between the activation and $W_2$ is a dropout that
# BERT does not have: tfx builds BERT's layers with $p = 0$ there (`ff_inner_dropout=False`, checked
# against Hugging Face below):

# %%
tfx.book.source.show_source(FeedForward.forward)

# %% [markdown]
# **What each matrix does.** One hidden unit at a time, the same computation is
# $\mathrm{FFN}(x) = \sum_{i=1}^{d_{ff}} \mathrm{act}(x \cdot k_i + b_{1,i})\, v_i + b_2$, with $k_i$
# column $i$ of $W_1$ and $v_i$ row $i$ of $W_2$:
#
# - each column $k_i$ is a **pattern detector** (a key): $x \cdot k_i$ says how much the token matches;
# - $b_1$ holds the detectors' **thresholds**;
# - the activation **gates** each detector (GELU lets a weak negative match through, slightly
#   negative; ReLU cuts it to 0);
# - row $v_i$ is **what detector $i$ writes back**, in proportion to how strongly it fired;
# - $b_2$ is a constant offset added to every token (claim A8 below).

# %% [markdown]
# ## Position-wise: every token alone
#
# Nothing in the formula mixes rows, so the FFN on the whole tensor equals a loop over the tokens, and
# editing one token's input changes that token's output and no other.

# %%
# NBVAL_CHECK_OUTPUT
with torch.no_grad():
    looped = torch.stack([base_ff(x_base[:, i]) for i in range(L)], dim=1)  # L × (1, d) → (1, L, d)
    assert_close(base_ff(x_base), looped)
    x_edit = x_base.clone()
    x_edit[0, CHI] = torch.randn(768)  # a new input for 吃 only
    moved = (base_ff(x_edit) - base_ff(x_base)).norm(dim=-1)[0]  # (L,)
print("FFN on (1, 8, 768) == loop over the 8 tokens one by one")
print("change of each token's FFN output after editing 吃:")
for t, m in zip(tokens, moved):
    print(f"  {t:<6} {m.item():.4f}")
assert (moved[torch.arange(L) != CHI] == 0).all() and moved[CHI] > 1

# %% [markdown]
# ### Crossing features: attention first, then the FFN
#
# Alone, the FFN cannot combine features of two tokens. In an encoder layer, though, its input is
# $h = \mathrm{LN}_1(x + \mathrm{MHA}(x))$, and attention has already copied some of 吃 into 苹's row.
# In a BERT-base-sized post-LN `EncoderLayer` we measure two things:
#
# 1. **吃 reaches 苹's FFN only through attention.** Replacing 吃's input moves 苹's FFN input and
#    output; silencing attention ($W_O = 0$, $b_O = 0$) should make both changes exactly zero.
# 2. **The FFN combines, it does not just pass on.** A linear FFN would also pass 吃's contribution
#    through, added to 苹's own; crossing means its effect depends on 苹's own features. With $a$ the
#    change 吃 brings into 苹's FFN input and $b$ a change of 苹's own input of the same size (a
#    replaced 苹 would move it by a whole token, which any bend of the activation would notice), the
#    second difference
#    $I = \mathrm{FFN}(h + a + b) - \mathrm{FFN}(h + a) - \mathrm{FFN}(h + b) + \mathrm{FFN}(h)$
#    is zero for any affine map. The cell compares $\|I\|$ with the first-order effect
#    $\|\mathrm{FFN}(h + a) - \mathrm{FFN}(h)\|$, with and without the activation (in float64, so the
#    linear map's $I$ is rounding only).


# %%
# NBVAL_CHECK_OUTPUT
def ffn_in_out(layer: EncoderLayer, x: torch.Tensor) -> tuple:
    """The FFN sub-layer's input h and output FFN(h), captured by a hook on layer.ff."""
    seen = {}
    handle = layer.ff.register_forward_hook(lambda m, inp, out: seen.update(h=inp[0], f=out))
    with torch.no_grad():
        layer(x)
    handle.remove()
    return seen["h"], seen["f"]  # (1, L, d), (1, L, d)


tfx.set_seed(0)
layer = EncoderLayer(768, 12, 3072, dropout=0.1, ff_inner_dropout=False).eval()
x_layer = torch.randn(1, L, 768)  # (1, L, d)
x_other = x_layer.clone()
x_other[0, CHI] = torch.randn(768)  # a different 吃
x_self = x_layer.clone()
x_self[0, PING] = torch.randn(768)  # a different 苹, 吃 unchanged
h_shown, f_shown = ffn_in_out(layer, x_layer)
show(x=x_layer, ffn_input=h_shown, ffn_output=f_shown)

# %%
# 1. the path: 吃 reaches 苹's FFN through attention, and only through it
silent = copy.deepcopy(layer)  # a copy: `layer` keeps its attention for the cells below
with torch.no_grad():
    silent.attn.out.weight.zero_()
    silent.attn.out.bias.zero_()
rows = {}
for silenced, lay in ((False, layer), (True, silent)):
    (h0, f0), (h1, f1) = ffn_in_out(lay, x_layer), ffn_in_out(lay, x_other)
    rows[silenced] = ((h1 - h0)[0, PING].norm().item(), (f1 - f0)[0, PING].norm().item())
    print(
        f"attention {'silenced' if silenced else 'on      '}: editing 吃 moves 苹's FFN input by "
        f"{rows[silenced][0]:.2f} and its FFN output by {rows[silenced][1]:.2f}"
    )

# %%
# 2. the second difference at 苹's row, with attention on
h_base = ffn_in_out(layer, x_layer)[0][0, PING].double()  # (d,) 苹's FFN input
a = ffn_in_out(layer, x_other)[0][0, PING].double() - h_base  # (d,) what 吃's change brings
b_dir = ffn_in_out(layer, x_self)[0][0, PING].double() - h_base  # (d,) 苹's own input moved
b = b_dir * a.norm() / b_dir.norm()  # (d,) that change, scaled to the size of a
ff64 = FeedForward(768, 3072).double().eval()
ff64.load_state_dict(layer.ff.state_dict())  # the layer's FFN weights, in float64
crossing = {}
with torch.no_grad():
    for name, f in (
        ("GELU FFN", ff64),
        ("linear FFN", lambda v: ff64.fc2(ff64.fc1(v))),  # the same weights, no activation
    ):
        inter = f(h_base + a + b) - f(h_base + a) - f(h_base + b) + f(h_base)  # (d,)
        first = f(h_base + a) - f(h_base)  # (d,) the effect of 吃's change alone
        crossing[name] = (inter.norm() / first.norm()).item()
print(f"‖a‖ = ‖b‖ = {a.norm():.2f} (‖h‖ = {h_base.norm():.1f})")
print(f"‖I‖ / first-order effect: GELU FFN {crossing['GELU FFN']:.2f}, ", end="")
print(f"linear FFN {tfx.core.stable.below(crossing['linear FFN'], 1e-10)}")

# %% [markdown]
# (claim-a46)=
# ### Claim A46: the FFN crosses 苹果's "fruit" feature with 吃's "action" feature
#
# **Holds only when read as "the FFN mixes, non-additively, what attention has brought together".**
# 吃 reaches 苹's FFN only through attention, and the GELU FFN then combines it with 苹's own input,
# where a linear map would only add the two. For changes of the size 吃 brings, about 6% of the
# input's norm, the cross term is small: 3% of the first-order effect, since it grows with the
# product of the two changes. That the combined features are "fruit" and "action", the article's
# reading, no measurement here can say: nothing in these models is labelled.

# %%
# CLAIM A46: holds only when read as non-additive mixing of what attention brought into 苹's row
assert rows[False][0] > 1e-3 and rows[False][1] > 1e-3  # through attention, 吃 reaches 苹's FFN
assert rows[True] == (0.0, 0.0)  # without attention, not at all
assert 0.01 < crossing["GELU FFN"] < 0.1  # GELU combines them: a real but second-order term
assert 0.04 < (a.norm() / h_base.norm()).item() < 0.08  # 吃's change: about 6% of ‖h‖
assert crossing["linear FFN"] < 1e-10  # a linear FFN only adds them: no crossing

# %% [markdown]
# ## What the FFN costs
#
# Per layer, the FFN has $2 d\, d_{ff} + d_{ff} + d$ parameters, attention $4 d^2 + 4 d$: at BERT-base
# **two thirds of each layer's parameters are the FFN's**. Its FLOPs, $4 L d\, d_{ff}$, are linear in
# $L$; attention's projections cost $8 L d^2$ and its scores and weighted sum $4 L^2 d$. So the FFN does
# most of a layer's matmul work while $L < d_{ff} - 2d = 1536$: for BERT, whose inputs stop at 512
# tokens, always.

# %%
# NBVAL_CHECK_OUTPUT
cfg_base = BertConfig.base()
pc = param_counts(cfg_base)
n = cfg_base.n_layers
per_layer = {
    "attention (Q, K, V, W_O)": (pc["attention Q, K, V"] + pc["attention W_O"]) // n,
    "FFN (W₁, b₁, W₂, b₂)": pc["FFN"] // n,
    "two LayerNorms": (pc["attention LayerNorm"] + pc["FFN LayerNorm"]) // n,
}
total = sum(per_layer.values())
for name, p in per_layer.items():
    print(f"{name:<26} {p:>10,}  {p / total:6.1%}")
ffn_share = per_layer["FFN (W₁, b₁, W₂, b₂)"] / total
assert per_layer["FFN (W₁, b₁, W₂, b₂)"] == sum(p.numel() for p in base_ff.parameters())
assert abs(ffn_share - 2 / 3) < 0.001
print()
print(f"{'L':>5}  {'FFN GFLOPs':>10}  {'attention GFLOPs':>16}  {'FFN share':>9}")
ffn_share_at = {}
for L_ in (8, 128, 512, 1535, 1537):
    fl = layer_flops(768, 3072, L_)
    attn = sum(v for k, v in fl.items() if k != "FFN")
    ffn_share_at[L_] = fl["FFN"] / (fl["FFN"] + attn)
    print(f"{L_:>5}  {fl['FFN'] / 1e9:>10.4f}  {attn / 1e9:>16.4f}  {ffn_share_at[L_]:>9.2%}")
assert ffn_share_at[1535] > 0.5 > ffn_share_at[1537]  # the FFN's majority ends at L = 1536

# %% [markdown]
# Whether 4× is a good trade-off against 2× and 8× is settled in appendix 91, {ref}`claim-a6`: it fails
# on the evidence it cites, the Transformer paper's Table 3 (read there, not reproduced), where 4× beats
# 2× by 0.4 BLEU and 8× beats 4× by as much. Here, the measured time: one FFN forward on a
# $(1, 128, 768)$ input at $d_{ff} = 1\times, 2\times, 4\times, 8\times\, d$ on one thread (the machine
# line names the thread count). Other work on the machine can only slow a run down, so the ratios
# to 1× and the rates, FLOPs per second, use each width's fastest of 7 runs. The numbers change from
# run to run; the cell asserts only margins that noise cannot flip.

# %%
# NBVAL_IGNORE_OUTPUT
x_time = torch.randn(1, 128, 768)
timings = {}
with threads(1), torch.inference_mode():
    for mult in (1, 2, 4, 8):
        tfx.set_seed(0)
        ff = FeedForward(768, mult * 768).eval()
        timings[mult] = timeit(ff, x_time, repeats=7, warmup=2, label=f"{mult}× width")
    print(machine())
rate = {mult: layer_flops(768, mult * 768, 128)["FFN"] / t.best for mult, t in timings.items()}
for mult, t in timings.items():
    print(
        f"{t}   fastest, ratio to 1×: {t.best / timings[1].best:.2f} (FLOPs {mult}×), "
        f"{rate[mult] / 1e9:.1f} GFLOP/s"
    )
assert timings[8].best > 2 * timings[1].best  # 8× the FLOPs cannot cost less than 2× the time
assert max(rate.values()) < 3 * min(rate.values())  # the rate stays within a factor of 3

# %% [markdown]
# The time grows with the FLOPs, but not always in proportion: the rate in the last column is what
# to read. At 8× the weights take eight times the bytes of 1× (38 MB against 4.7 MB in float32), and
# less of them stays in a core's caches between uses, which would show as a falling rate; a small
# matrix at 1× can instead leave the arithmetic units idle, which shows as a low one. Which of the
# two wins, and by how much, depends on the CPU and on what else it runs; the cell asserts only that
# the rates stay within a factor of 3 of each other. The FLOPs hold everywhere.

# %% [markdown]
# ## GELU and its approximations
#
# BERT's activation is $\mathrm{GELU}(x) = x\,\Phi(x)$, with $\Phi$ the standard normal CDF. Hendrycks
# and Gimpel (2016) motivate it as the mean of $x \cdot m$ for a random gate $m$ that keeps $x$ with
# probability $\Phi(x)$, so a unit is kept more often the larger its input. Their paper gives two
# approximations, the tanh form $0.5x\,(1 + \tanh(\sqrt{2/\pi}\,(x + 0.044715 x^3)))$ and
# $x\,\sigma(1.702x)$. The source article adds $\max(0, x)\,\sigma(1.702x)$, which is not an approximation but an error
# ({ref}`A7 <claim-a7>`). The cell measures each one's largest error against the exact form on a fine
# float64 grid over $[-6, 6]$.

# %%
# NBVAL_CHECK_OUTPUT
grid = torch.linspace(-6, 6, 120_001, dtype=torch.float64)  # step 1e-4
exact = gelu_exact(grid)
errors, even = {}, {}
print(f"{'variant':<14} {'max |f − GELU|':>14}  {'at x':>7}")
for name in ("gelu_tanh", "gelu_sigmoid", "article", "relu"):
    err = (ACTIVATIONS[name](grid) - exact).abs()
    errors[name] = (err.max().item(), grid[err.argmax()].item())
    # an error even in x peaks at ±x, and argmax would pick a side by rounding: print both
    even[name] = bool((err - err.flip(0)).abs().max() < 1e-12)
    at = f"±{abs(errors[name][1]):.3f}" if even[name] else f"{errors[name][1]:.3f}"
    print(f"{name:<14} {errors[name][0]:>14.6f}  {at:>7}")
x_min, g_min = gelu_minimum()
print(f"GELU's minimum: GELU({x_min:.4f}) = {g_min:.4f}")
assert abs(exact.min().item() - g_min) < 1e-8  # Newton's minimum is the grid's minimum
assert even == {"gelu_tanh": True, "gelu_sigmoid": True, "article": False, "relu": True}

# %%
# Figure 4.2: The exact GELU, x times Φ(x), its tanh and x·σ(1.702x) approximations, the article's
#   formula max(0, x)·σ(1.702x) and ReLU, for x from -4 to 3. At this scale the three GELUs are one
#   curve with a small negative dip left of 0; the article's formula follows ReLU's flat zero there
#   and GELU's curve for positive x.
# Figure 4.3: Each curve of Figure 4.2 minus the exact GELU, in the same colours. The tanh form
#   stays on the zero line, x·σ(1.702x) within about 0.02, and the article's formula coincides with
#   ReLU for x below 0, both off by GELU's whole depth, 0.17, at its minimum near x = -0.75 (ReLU,
#   whose error |x|·Φ(-|x|) is even, by as much again at x = +0.75).
xs = torch.linspace(-4, 3, 701)
curves = {name: ACTIVATIONS[name](xs) for name in ("gelu", "gelu_tanh", "gelu_sigmoid", "article")}
curves["relu"] = F.relu(xs)
fig = tfx.book.viz.plot_curves(
    xs.tolist(),
    {k: v.tolist() for k, v in curves.items()},
    xlabel="x",
    ylabel="activation",
    title="GELU x·Φ(x), its approximations, the article's formula and ReLU",
    figsize=(6.5, 3.5),
)
fig = tfx.book.viz.plot_curves(
    xs.tolist(),
    {k: (v - curves["gelu"]).tolist() for k, v in curves.items()},  # gelu: 0, same colours
    xlabel="x",
    ylabel="f(x) − GELU(x)",
    title="error against the exact GELU",
    figsize=(6.5, 3),
)

# %% [markdown]
# The article's formula equals $x\,\sigma(1.702x)$ for $x \ge 0$ but is 0 for $x < 0$, where GELU is
# negative: its error is GELU's whole depth, 0.17, at GELU's minimum, as ReLU's is; in Figure 4.3 the
# two curves coincide for $x < 0$. The table prints "±" where an error is even in $x$: ReLU, the
# tanh form and $x\,\sigma(1.702x)$ all satisfy $f(x) - f(-x) = x$, as GELU does, so their errors
# take the same value at $x$ and $-x$ and peak on both sides (ReLU's, $|x|\,\Phi(-|x|)$, at
# $\pm 0.752$); the article's formula breaks that symmetry.
#
# **The erf form and the tanh form in BERT's code.** Google's original BERT release (October 2018),
# whose checkpoints everyone fine-tunes, computed the exact erf form; the tanh form, OpenAI GPT's,
# entered Google's repository in February 2019. Hugging Face's `"gelu"` is the exact form and
# `"gelu_new"` the tanh form; the cell checks both against ours and measures what the swap changes in
# one BERT-base FFN:

# %%
# NBVAL_CHECK_OUTPUT
from transformers.activations import ACT2FN

assert_close(ACT2FN["gelu"](grid), gelu_exact(grid))  # Hugging Face "gelu": exact erf form
assert_close(ACT2FN["gelu_new"](grid), gelu_tanh(grid))  # "gelu_new": the tanh form
with torch.no_grad():
    pre = base_ff.fc1(x_base)  # (1, L, 3072)
    y_erf = base_ff.fc2(gelu_exact(pre))  # (1, L, 768)
    y_tanh = base_ff.fc2(gelu_tanh(pre))  # (1, L, 768)
act_gap = (gelu_exact(pre) - gelu_tanh(pre)).abs().max().item()
out_gap = (y_erf - y_tanh).abs().max().item()
print(f"hidden units: max |erf − tanh| = {act_gap:.1e}")
print(
    f"FFN output:   max |erf − tanh| = {out_gap:.0e} (output RMS {y_erf.pow(2).mean().sqrt():.2f})"
)
assert 1e-6 < out_gap < 1e-2  # real, but small: exercise 3 measures it on a trained model

# %% [markdown]
# ### Smoothness and gradient
#
# GELU's derivative, $\Phi(x) + x\,\varphi(x)$, is continuous: negative left of the minimum at
# $x \approx -0.75$, 0 there, about 0.5 at 0, and largest, slightly above 1, at $x = \sqrt{2}$, where
# $\varphi(x)(2 - x^2)$ vanishes. ReLU's jumps from 0 to 1 at 0 and is 0 for every negative input.

# %%
# NBVAL_CHECK_OUTPUT
xg = grid.clone().requires_grad_(True)
(d_gelu,) = torch.autograd.grad(gelu_exact(xg).sum(), xg)
xr = grid.clone().requires_grad_(True)
(d_relu,) = torch.autograd.grad(F.relu(xr).sum(), xr)
step = (grid[1] - grid[0]).item()
jump = {"gelu": d_gelu.diff().abs().max().item(), "relu": d_relu.diff().abs().max().item()}
for name, d in (("gelu", d_gelu), ("relu", d_relu)):
    neg = d[grid < 0]
    print(
        f"{name}: derivative in [{d.min():.4f}, {d.max():.4f}], largest jump between grid points "
        f"{step:.0e} apart {jump[name]:.4f}, share of x < 0 with zero gradient "
        f"{(neg == 0).double().mean():.2f}"
    )
print(f"GELU′ is largest at x = {grid[d_gelu.argmax()].item():.3f} (√2 = {math.sqrt(2):.3f})")
# the exact derivative, Φ(x) + x·φ(x), against autograd
phi = torch.exp(-0.5 * grid**2) / math.sqrt(2 * math.pi)
assert_close(d_gelu, 0.5 * (1 + torch.erf(grid / math.sqrt(2))) + grid * phi)
x_root = torch.tensor(x_min, dtype=torch.float64, requires_grad=True)
(d_at_min,) = torch.autograd.grad(gelu_exact(x_root), x_root)
assert abs(d_at_min.item()) < 1e-12  # zero exactly at the minimum: the grid steps over it
assert abs(grid[d_gelu.argmax()].item() - math.sqrt(2)) < 1e-3

# %%
# Figure 4.4: The derivatives of GELU and ReLU against x from -6 to 6, with GELU's minimum, near
#   x = -0.75, dashed. ReLU's jumps from 0 to 1 at 0 and is 0 for every negative input; GELU's is
#   continuous, dips below 0 left of the minimum, is 0 only there, and peaks slightly above 1 near
#   x = √2.
fig = tfx.book.viz.plot_curves(
    grid[::100].tolist(),
    {"GELU′(x)": d_gelu[::100].tolist(), "ReLU′(x)": d_relu[::100].tolist()},
    xlabel="x",
    ylabel="derivative",
    vlines={f"min at {x_min:.2f}": x_min},
    title="gradients: GELU's is continuous, and zero for x < 0 only at its minimum",
    figsize=(6.5, 3),
)

# %% [markdown]
# ## Biases
#
# The article says BERT's FFN has no biases ("bias=False"), because the LayerNorm before it has
# already centred the input. Are the biases there, and is the argument right?
#
# After the FFN, $\mathrm{LN}_2(h + \mathrm{FFN}(h))$ subtracts the mean over the features, so adding
# a constant to every entry of $b_2$ changes nothing: only **the mean of $b_2$** is redundant, one
# number out of 768. The other 767 directions of $b_2$ survive, and $b_1$ moves each hidden unit's
# threshold before the activation, which no LayerNorm undoes.
#
# Nor does the LayerNorm *before* the FFN make a bias redundant. It centres $x$ over its 768 features;
# $b_1$ acts on $x W_1$, one number per hidden unit, and a centred $x$ says nothing about the mean of
# $x \cdot k_i$ for any one unit. With a non-zero shift $\beta$ the LayerNorm's output is not even
# centred, and $\beta W_1$ could stand in for $b_1$ only inside a 768-dimensional subspace of its 3072
# dimensions.
#
# The rule "no bias before a norm" comes from convolution followed by BatchNorm, which subtracts a mean
# **per channel** and so removes a per-channel bias completely. LayerNorm subtracts a mean **per
# token**, over the features, removing one direction of a bias vector out of 768: the axis question of
# claim A48 in chapter 05, applied to biases.

# %%
# NBVAL_CHECK_OUTPUT
tfx.set_seed(0)
hf_layer = transformers.models.bert.modeling_bert.BertLayer(transformers.BertConfig()).eval()
# the article's own FFN code: nn.Linear(d_model, d_model * 4), GELU, nn.Linear(d_model * 4, d_model)
article_ffn = nn.Sequential(nn.Linear(768, 768 * 4), nn.GELU(), nn.Linear(768 * 4, 768))
article_layer_biases = {n: tuple(p.shape) for n, p in article_ffn.named_parameters() if "bias" in n}
print("Hugging Face BertIntermediate.dense.bias:", tuple(hf_layer.intermediate.dense.bias.shape))
print("Hugging Face BertOutput.dense.bias:      ", tuple(hf_layer.output.dense.bias.shape))
print(
    "tfx FeedForward biases:                  ",
    tuple(base_ff.fc1.bias.shape),
    tuple(base_ff.fc2.bias.shape),
)
print("the article's own nn.Sequential FFN:     ", article_layer_biases)

# %% [markdown]
# In a tfx encoder layer whose FFN biases are set to $\mathcal N(0, 0.5^2)$ (an illustrative size), we
# shift $b_2$ by a constant, remove its mean, remove it, remove $b_1$, and measure how far the output
# moves. Which changes are zero is the point, not their sizes.

# %%
tfx.set_seed(0)
enc = EncoderLayer(64, 4, 256, dropout=0.0).eval()
with torch.no_grad():
    for lin in (enc.ff.fc1, enc.ff.fc2):
        lin.bias.normal_(0, 0.5)  # illustrative non-zero biases (BERT's init is zero)
    x_enc = torch.randn(1, L, 64)
    y_ref = enc(x_enc)
    b2_saved, b1_saved = enc.ff.fc2.bias.clone(), enc.ff.fc1.bias.clone()
    effect = {}
    for what, b1_new, b2_new in (
        ("b₂ + 3 (a constant)", b1_saved, b2_saved + 3.0),
        ("b₂ − mean(b₂)", b1_saved, b2_saved - b2_saved.mean()),
        ("b₂ = 0", b1_saved, torch.zeros_like(b2_saved)),
        ("b₁ = 0", torch.zeros_like(b1_saved), b2_saved),
    ):
        enc.ff.fc1.bias.copy_(b1_new)
        enc.ff.fc2.bias.copy_(b2_new)
        effect[what] = (enc(x_enc) - y_ref).abs().max().item()
        print(f"{what:<20} max change of the layer output {effect[what]:.2e}")
    enc.ff.fc1.bias.copy_(b1_saved)
    enc.ff.fc2.bias.copy_(b2_saved)

# %% [markdown]
# (claim-a8)=
# ### Claim A8: BERT's FFN has no bias, because LayerNorm already centres
#
# **Fails.** Hugging Face's `BertIntermediate` and `BertOutput` have biases (3072 and 768), as do Google's
# original layers (`tf.layers.dense` defaults to `use_bias=True`) and the article's own `nn.Linear`
# layers. And LayerNorm removes only the mean of $b_2$: a constant shift of $b_2$ leaves the output
# unchanged; removing the rest of $b_2$, or $b_1$, does not.

# %%
# CLAIM A8: fails: the FFN layers have biases, and LayerNorm makes only the mean of b₂ redundant
assert hf_layer.intermediate.dense.bias is not None and hf_layer.output.dense.bias is not None
assert all(shape in ((3072,), (768,)) for shape in article_layer_biases.values())
assert len(article_layer_biases) == 2  # the article's nn.Linear layers have biases
assert effect["b₂ + 3 (a constant)"] < 1e-4 and effect["b₂ − mean(b₂)"] < 1e-4  # LN removes it
assert effect["b₂ = 0"] > 0.1 and effect["b₁ = 0"] > 0.1  # the rest matters

# %% [markdown]
# ## Check against Hugging Face, in eval and in training mode
#
# Hugging Face's `BertOutput` applies dropout to the FFN's output before the LayerNorm, as tfx's
# $\mathrm{LN}_2(h + \mathrm{drop}_2(\mathrm{FFN}(h)))$ does. BERT has no dropout between the activation
# and $W_2$; PyTorch's `nn.TransformerEncoderLayer` has one there. With the same weights and seed,
# `ff_inner_dropout=False`, BERT's layout, equals Hugging Face's in both modes; the torch layout draws a
# different dropout mask in training.

# %%
cfg_t = BertConfig.tiny(dropout=0.1)
tfx.set_seed(0)
hf_tiny = transformers.BertModel(transformers.BertConfig(**cfg_t.to_hf_kwargs()))
hl = hf_tiny.encoder.layer[0]
ours_bert = tfx.model.layers.EncoderLayer(
    64, 4, 256, dropout=0.1, eps=cfg_t.eps, ff_inner_dropout=False
)
ours_torch = tfx.model.layers.EncoderLayer(
    64, 4, 256, dropout=0.1, eps=cfg_t.eps, ff_inner_dropout=True
)
with torch.no_grad():
    for ours in (ours_bert, ours_torch):
        for dst, src in (
            (ours.ff.fc1, hl.intermediate.dense),
            (ours.ff.fc2, hl.output.dense),
            (ours.norm2, hl.output.LayerNorm),
        ):
            dst.weight.copy_(src.weight)
            dst.bias.copy_(src.bias)

# %%
# NBVAL_CHECK_OUTPUT
tfx.set_seed(0)
h = torch.randn(2, L, 64)  # (B, L, d): the attention sub-layer's output
gaps = {}
for mode in ("eval", "train"):
    for name, ours in (
        ("ff_inner_dropout=False", ours_bert),
        ("ff_inner_dropout=True", ours_torch),
    ):
        hl.train(mode == "train")
        ours.train(mode == "train")
        tfx.set_seed(1)
        theirs = hl.output(hl.intermediate(h), h)  # (B, L, d)
        tfx.set_seed(1)
        mine = ours.norm2(h + ours.drop2(ours.ff(h)))  # (B, L, d)
        gaps[mode, name] = (mine - theirs).abs().max().item()
        print(
            f"{mode:<5}  tfx {name:<22} vs Hugging Face BertLayer FFN: "
            f"max |Δ| {tfx.core.stable.below(gaps[mode, name], 1e-5)}"
        )
show(h=h, intermediate=hl.intermediate(h), output=theirs)
assert (
    gaps["eval", "ff_inner_dropout=False"] < 1e-5 and gaps["eval", "ff_inner_dropout=True"] < 1e-5
)
assert gaps["train", "ff_inner_dropout=False"] < 1e-5  # BERT's layout: equal in training too
assert gaps["train", "ff_inner_dropout=True"] > 0.01  # torch's layout: a different function

# %% [markdown]
# ## Inside the hidden units: GELU against ReLU
#
# :::{admonition} A preview of chapter 07
# This section trains before the book has built training: two short masked-LM runs, long enough to
# give the hidden units something to show. {doc}`Chapter 07 <07_masked_lm>` builds the objective and
# the loop; here, read only what the trained units do.
# :::
#
# An untrained model's hidden units are random projections, and the book model of the next section
# was trained with GELU only. So, to compare the two activations in training, we briefly train two
# tiny BERTs
# ($d = 64$, 2 layers, 4 heads, $d_{ff} = 256$): masked-LM on 34k Chinese sentences from Tatoeba (one
# token per character, the 1,500 most frequent), AdamW, batch 64, no dropout, **150 steps each**, with
# GELU and with ReLU, on one thread so that every number below is independent of the core count. That
# is seconds of training: the held-out loss is still falling at the end, and the numbers describe this
# model only.

# %%
from tfx.learn import TATOEBA, load_tatoeba

L_MAX, STEPS, BATCH = 24, 150, 64
zh = sorted({z for z, _ in load_tatoeba()})
counts = {}
for s in zh:
    for c in s:
        counts[c] = counts.get(c, 0) + 1
chars = sorted(counts, key=lambda c: (-counts[c], c))[:1500]
tv = build_vocab(tokens + chars)  # the running example keeps its place; specials first
sents = [s for s in zh if len(s) <= L_MAX - 2 and all(c in tv for c in s)]
corpus = torch.zeros(len(sents), L_MAX, dtype=torch.long)  # (N, L_MAX), [PAD] = 0
for i, s in enumerate(sents):
    row = [tv["[CLS]"], *(tv[c] for c in s), tv["[SEP]"]]
    corpus[i, : len(row)] = torch.tensor(row)
split = torch.randperm(len(corpus), generator=torch.Generator().manual_seed(0))
train_ids, held_ids = corpus[split[500:]], corpus[split[:500]]  # (N-500, 24), (500, 24)
print(f"{len(sents):,} sentences, vocabulary {len(tv):,}; {len(train_ids):,} train, 500 held out")
print(TATOEBA.credit)

# %% [markdown]
# The loss masks 15% of the real characters and scores the predictions there only: a bare version of
# chapter 07's masked-LM recipe, `tfx.learn.mlm`, which adds BERT's 80/10/10 replacement.


# %%
def brief_mlm_loss(model, batch: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Mask 15% of the real tokens (never [CLS], [SEP], [PAD]) and score only those positions."""
    real = batch >= len(tfx.core.example.SPECIAL_TOKENS)  # (B, L)
    picked = (torch.rand(batch.shape, generator=gen) < 0.15) & real  # (B, L) bool
    masked = batch.masked_fill(picked, tv["[MASK]"])
    logits = model(masked, attention_mask=(batch != 0).long(), positions=picked)  # (N, V)
    return F.cross_entropy(logits, batch[picked])


def held_out_loss(model) -> float:
    with torch.no_grad():
        return brief_mlm_loss(model.eval(), held_ids, torch.Generator().manual_seed(1)).item()


# %% [markdown]
# The loop also records the total gradient norm $\|\nabla\theta\|$ of every step, for claim A47.


# %%
def train_brief_mlm(act: str) -> tuple:
    """Train a tiny BERT for STEPS steps; (model, untrained loss, held-out loss every 50 steps,
    total gradient norm of every step)."""
    tfx.set_seed(0)
    cfg = BertConfig.tiny(
        vocab_size=len(tv), max_len=L_MAX, activation=act, dropout=0.0, attn_dropout=0.0
    )
    model = BertForMaskedLM(cfg)
    untrained = held_out_loss(model)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    gen = torch.Generator().manual_seed(0)
    curve, gnorms = {}, []
    model.train()
    for step in range(1, STEPS + 1):
        batch = train_ids[torch.randint(len(train_ids), (BATCH,), generator=gen)]  # (B, L_MAX)
        loss = brief_mlm_loss(model, batch, gen)
        opt.zero_grad()
        loss.backward()
        gnorms.append(torch.stack([p.grad.norm() for p in model.parameters()]).norm().item())
        opt.step()
        if step % 50 == 0:
            curve[step] = held_out_loss(model)  # evaluation draws from its own generator
            model.train()
    return model.eval(), untrained, curve, torch.tensor(gnorms)


# %%
with threads(1):  # one thread: the trained weights do not depend on the machine's core count
    trained = {act: train_brief_mlm(act) for act in ("gelu", "relu")}
for act, (_, before, curve, _) in trained.items():
    losses = " → ".join(f"{v:.2f} ({k})" for k, v in curve.items())
    print(f"{act}: held-out masked-LM loss {before:.2f} untrained → {losses}")
assert all(c[STEPS] < before - 1.0 for _, before, c, _ in trained.values())  # it learned something
assert all(c[100] > c[STEPS] for _, _, c, _ in trained.values())  # still falling at the end

# %% [markdown]
# (claim-a47)=
# ### Claim A47: GELU is smoother than ReLU, with a steadier gradient
#
# **Holds only when "steadier" means a continuous derivative.** GELU's derivative changes by at most
# about $10^{-4}$ between grid points $10^{-4}$ apart where ReLU's jumps by 1, and every negative input
# but GELU's minimum gets a gradient. But GELU is not monotonic, and the article means training: there
# the median step-to-step change of the total gradient norm,
# $|\log(\|\nabla\theta_{t}\| / \|\nabla\theta_{t-1}\|)|$, is not reliably smaller for GELU, since the noise
# comes from the random batches and masks. One seed and a tiny model decide nothing about BERT.

# %%
# CLAIM A47: holds only when "steadier" means a continuous derivative; not steadier in training here
gn = {act: run[3] for act, run in trained.items()}  # (STEPS,) total gradient norm per step
wobble = {act: (g[1:] / g[:-1]).log().abs().median().item() for act, g in gn.items()}
for act, g in gn.items():
    print(
        f"{act}: gradient norm {g.min():.2f} to {g.max():.2f} over {STEPS} steps, "
        f"median step-to-step change {wobble[act]:.2f} (in log)"
    )
assert jump["relu"] == 1.0 and jump["gelu"] < 1e-3  # ReLU′ jumps, GELU′ is continuous
assert (d_relu[grid < 0] == 0).all() and abs(d_at_min.item()) < 1e-12  # zero: all vs one point
band = (grid > -3) & (grid < 0)  # beyond -3 both Φ(x) and x·φ(x) fade, GELU′ with them
assert (d_gelu[band].abs() < 1e-3).double().mean() < 0.01  # in the band, GELU′ ≈ 0 only at x_min
assert d_gelu.min() < 0 < d_gelu.max() and d_gelu.max() > 1  # non-monotonic, and over 1
assert abs(x_min + 0.7518) < 1e-3 and abs(g_min + 0.1700) < 1e-3
assert wobble["gelu"] > 0.8 * wobble["relu"]  # in training, GELU's gradient is not steadier

# %% [markdown]
# ### One token's hidden units
#
# The hidden units of 苹 (position 5) at both layers. "Near zero" means $|a| < 0.05$, a unit
# contributing almost nothing to the output.


# %%
def hidden_units(model, ids_: torch.Tensor) -> list:
    """Per layer, the FFN's hidden activations act(h W₁ + b₁), (1, L, d_ff), via key_value_view."""
    h_in = []
    hooks = [
        layer.ff.register_forward_hook(lambda m, inp, out: h_in.append(inp[0]))
        for layer in model.bert.layers
    ]
    with torch.no_grad():
        model(ids_)
    for hk in hooks:
        hk.remove()
    with torch.no_grad():
        return [key_value_view(layer.ff, h)[0] for layer, h in zip(model.bert.layers, h_in)]


# %%
ids_tv = running_example_ids(tv)  # (1, 8) in the training vocabulary
stats = {}
print(
    f"{'model':<5} {'layer':>5}  {'exactly 0':>9}  {'|a| < 0.05':>10}  {'negative':>8}  "
    f"{'mean a':>7}"
)
for act, (model, *_) in trained.items():
    for i, a in enumerate(hidden_units(model, ids_tv)):
        u = a[0, PING]  # (d_ff,) the units of 苹
        stats[act, i] = dict(
            zero=(u == 0).float().mean().item(),
            near=(u.abs() < 0.05).float().mean().item(),
            neg=(u < 0).float().mean().item(),
        )
        s = stats[act, i]
        print(
            f"{act:<5} {i:>5}  {s['zero']:>9.1%}  {s['near']:>10.1%}  {s['neg']:>8.1%}  "
            f"{u.mean():>7.3f}"
        )
assert all(stats["relu", i]["zero"] > 0.2 for i in range(2))  # many ReLU units are off
assert all(stats["gelu", i]["zero"] == 0 and stats["gelu", i]["neg"] > 0.2 for i in range(2))

# %%
# Figure 4.5: Histogram (density) of the 256 hidden activations of 苹 (position 5) in layer 0 of the
#   two briefly trained tiny BERTs, one with GELU and one with ReLU. ReLU's is a tall spike at
#   exactly 0, a large share of units switched off, and a thin positive tail; GELU's has no unit at
#   exactly 0, and many units sit in its small negative dip, down to its minimum of about -0.17.
units = {act: hidden_units(m, ids_tv)[0][0, PING] for act, (m, *_) in trained.items()}
fig = tfx.book.viz.plot_histograms(
    {f"{act} (layer 0)": u for act, u in units.items()},
    xlabel="hidden activation of 苹 (position 5)",
    title="one token's 256 hidden units after brief training",
)

# %% [markdown]
# ## The FFN in a model that learned
#
# The two tiny models, still above 5 nats of held-out loss after 150 steps, are enough to compare
# activations, not to ask what the FFN contributes to a prediction. For that we load the book model
# that {doc}`chapter 07 <07_masked_lm>` pre-trains with the repository's own recipe and commits
# (`models/book-mlm`): the same architecture at $d = 128$, 4 layers, 4 heads, $d_{ff} = 512$, GELU,
# trained for 12,000 steps. It is scored here as chapter 07 scores it, by cross-entropy and accuracy at
# held-out `[MASK]` positions, on the first three of its nine held-out batches to keep the chapter
# fast.

# %%
from tfx.learn import evaluate, held_out, load_book_model

book, book_vocab = load_book_model()
held, special = held_out()  # the held-out positions of the book model's manifest
held = held[:3]  # (inputs, labels) batches of (64, 64)
MASK_ID = book_vocab["[MASK]"]


def book_score() -> tuple:
    """(cross-entropy, accuracy) of the book model at the held-out [MASK] positions."""
    r = evaluate(book, held, MASK_ID, exclude=special)["mask"]
    return r["cross_entropy"], r["accuracy"]


base_scores = evaluate(book, held, MASK_ID, exclude=special)["mask"]
book_base = base_scores["cross_entropy"], base_scores["accuracy"]
cfg_book = book.cfg
print(
    f"book model: d = {cfg_book.d_model}, {cfg_book.n_layers} layers, d_ff = {cfg_book.d_ff}, "
    f"{cfg_book.activation}"
)
print(
    f"{base_scores['n']:,} held-out [MASK] positions: cross-entropy {book_base[0]:.3f}, "
    f"accuracy {book_base[1]:.3f}"
)
assert book_base[1] > 0.4  # a model that learned: right at two masks in five or more

# %% [markdown]
# **Its biases.** After 12,000 steps the biases are no longer near their zero initialisation. Set
# $b_1$ or $b_2$ of every FFN to zero and score again; removing the mean of $b_2$, the one direction
# LayerNorm removes, is the control.

# %%
saved = [(lay.ff.fc1.bias.clone(), lay.ff.fc2.bias.clone()) for lay in book.bert.layers]
bias_rows = {"none": book_base}
for what in ("b₂ − mean(b₂)", "b₂ = 0", "b₁ = 0"):
    with torch.no_grad():
        for lay, (b1_, b2_) in zip(book.bert.layers, saved):
            lay.ff.fc1.bias.copy_(torch.zeros_like(b1_) if what == "b₁ = 0" else b1_)
            new_b2 = {"b₂ − mean(b₂)": b2_ - b2_.mean(), "b₂ = 0": torch.zeros_like(b2_)}
            lay.ff.fc2.bias.copy_(new_b2.get(what, b2_))
    bias_rows[what] = book_score()
with torch.no_grad():
    for lay, (b1_, b2_) in zip(book.bert.layers, saved):
        lay.ff.fc1.bias.copy_(b1_)
        lay.ff.fc2.bias.copy_(b2_)
rms = {k: torch.cat([b[k] for b in saved]).pow(2).mean().sqrt().item() for k in (0, 1)}
print(f"b₁ RMS {rms[0]:.3f}, b₂ RMS {rms[1]:.3f}")
for what, (ce, acc) in bias_rows.items():
    print(f"biases: {what:<14} cross-entropy {ce:.4f}  accuracy {acc:.3f}")
assert abs(bias_rows["b₂ − mean(b₂)"][0] - book_base[0]) < 1e-4  # LayerNorm removes the mean
assert all(abs(ce - book_base[0]) < 0.01 for ce, _ in bias_rows.values())  # the rest: little
assert all(  # restored
    torch.equal(lay.ff.fc1.bias, b1_) and torch.equal(lay.ff.fc2.bias, b2_)
    for lay, (b1_, b2_) in zip(book.bert.layers, saved)
)

# %% [markdown]
# The trained biases are real, $b_1$ at an RMS of about 0.2, yet removing either moves the loss by
# less than a hundredth of a nat: the model does its work through $W_1$ and $W_2$. The constructed layer of
# claim A8 showed that biases *can* change the output; this one shows that, trained, they barely do.
#
# The gradient that one backward pass of the held-out masked-LM loss sends to the FFN of layer 0
# (`fc1.weight` is $W_1^{\mathsf T}$, $(d_{ff}, d)$; `fc2.weight` is $W_2^{\mathsf T}$), and the sum of
# $b_2$'s gradient over its 128 entries in every layer. LayerNorm right after the FFN cannot see a
# constant added to all features, so no gradient can ask for one: the sum is zero, up to rounding.

# %%
inputs, labels = held[0]  # (64, 64) each
scored = labels != -100  # (64, 64) bool
book.zero_grad()
logits = book(inputs, attention_mask=(inputs != 0).long(), positions=scored)  # (N, V)
F.cross_entropy(logits, labels[scored]).backward()
print(grad_norms(book.bert.layers[0].ff))
b2_sums = []
for i, lay in enumerate(book.bert.layers):
    g = lay.ff.fc2.bias.grad  # (d,)
    b2_sums.append(g.sum().abs().item() / g.norm().item())
    print(
        f"layer {i}: ‖∇b₂‖ {g.norm():.4f}, |Σ ∇b₂| / ‖∇b₂‖ {tfx.core.stable.below(b2_sums[-1], 1e-5)}"
    )
assert all(r.norm > 0 for r in grad_norms(book.bert.layers[0].ff))
assert max(b2_sums) < 1e-5  # LayerNorm removes the mean of b₂ from the gradient too
book.zero_grad(set_to_none=True)

# %% [markdown]
# ### The FFN as a key–value memory
#
# Geva et al. (2021) read trained models with the keys and values of "The block, by hand": a unit
# fires when its key matches a pattern in the input and adds its value to the output. The
# decomposition is exact (`key_value_view`); how many of its 512 units does 苹's FFN output at layer 0
# rest on?

# %%
ids_book = running_example_ids(book_vocab)  # (1, 8) in the book model's vocabulary
lay0 = book.bert.layers[0]
with torch.no_grad():
    seen = []
    hk = lay0.ff.register_forward_hook(lambda m, inp, out: seen.append(inp[0]))
    book(ids_book)
    hk.remove()
    h_layer0 = seen[0]  # (1, L, 128): the FFN inputs of the running example at layer 0
    coeffs, values = key_value_view(lay0.ff, h_layer0[0, PING])  # (512,), (512, 128)
    full = coeffs @ values  # (128,) Σᵢ aᵢ vᵢ, without b₂
    assert_close(full + lay0.ff.fc2.bias, lay0.ff(h_layer0[0, PING]))  # exact
    order = (coeffs[:, None] * values).norm(dim=-1).argsort(descending=True)  # units by ‖aᵢ vᵢ‖
    shares = {}
    for k in (1, 10, 50, 100, 512):
        part = coeffs[order[:k]] @ values[order[:k]]  # the k largest terms
        shares[k] = F.cosine_similarity(part, full, dim=0).item()
        print(f"the {k:>3} largest units: cosine to the whole sum {shares[k]:.2f}")
assert shares[512] > 0.9999 and shares[1] < shares[10] < shares[50] < shares[100] < shares[512]
assert shares[10] < 0.8 < shares[50]  # not a handful: tens of units make the direction

# %% [markdown]
# No single unit gives 苹's output its direction; about fifty of the 512 do, and the rest refine it.
# Whether a unit stores something nameable, as Geva et al. found for some units of larger models,
# needs a corpus to search for what makes it fire.
#
# ## Widget: width, activation and hidden units
#
# The widget runs an FFN on the running example's layer-0 FFN inputs in the book model ($d = 128$)
# and compares its output with the unperturbed one:
#
# - **FFN**: `trained`, the layer-0 FFN just analysed ($d_{ff} = 512$), or `fresh`, a new FFN at
#   $d_{ff}$ = **width ×** $\cdot\, d$ with torch's default init (seed 0), the only one the width slider
#   acts on;
# - **activation**: exact GELU, the tanh form, $x\sigma(1.702x)$, the article's formula, or ReLU;
# - **zeroed fraction**: zero that share of the units in the **zero order**, `random` or
#   `largest first` (by $\|a_i v_i\|$ over the eight tokens);
# - **zero unit**: zero one chosen unit as well ($-1$: none).
#
# It prints the parameter count, the relative change of the output and its cosine to the unperturbed
# output (same weights, exact GELU, nothing zeroed).

# %%
tfx.book.widgets.ffn_widget(h_layer0, ff=lay0.ff)

# %% [markdown]
# What the widget prints at a few settings:

# %%
# NBVAL_CHECK_OUTPUT
trained_ff = dict(ff=lay0.ff)
settings = {
    "trained, unperturbed": trained_ff,
    "trained, tanh form": dict(activation_name="gelu_tanh", **trained_ff),
    "trained, article's formula": dict(activation_name="article", **trained_ff),
    "trained, zero 10% at random": dict(zero_fraction=0.1, **trained_ff),
    "trained, zero the largest 10%": dict(zero_fraction=0.1, order="largest first", **trained_ff),
    "fresh, zero unit 7": dict(unit=7),
    "fresh, zero all, 8×": dict(mult=8, zero_fraction=1.0),
}
probes = {name: width_probe(h_layer0, **kw) for name, kw in settings.items()}
for name, r in probes.items():
    print(f"--- {name}\n{r.report()}")
unperturbed = probes["trained, unperturbed"]
assert unperturbed.change == 0 and unperturbed.cosine > 0.9999
assert probes["trained, tanh form"].change < 1e-3  # the tanh form barely moves the output
assert probes["trained, article's formula"].cosine < probes["trained, tanh form"].cosine  # the dip
largest, at_random = probes["trained, zero the largest 10%"], probes["trained, zero 10% at random"]
assert largest.change > 2 * at_random.change  # the top units carry the output
assert probes["fresh, zero unit 7"].change > 0
zeroed_out = probes["fresh, zero all, 8×"].out  # (1, L, 128)
assert (zeroed_out == zeroed_out[:, :1]).all()  # the same vector, b₂, at every token

# %% [markdown]
# ### What zeroing does to the prediction
#
# Zeroing the largest tenth of the units moves the FFN's output several times as far as zeroing as
# many at random. Does it move what the model predicts? The same units (`unit_order`, the widget's
# orders) are zeroed inside the book model while it guesses a masked 苹:


# %%
masked_book = ids_book.clone()  # (1, 8)
masked_book[0, PING] = MASK_ID
d_ff0 = lay0.ff.fc1.out_features  # 512


def guess_at_ping(zero_order=None, fraction=0.0) -> torch.Tensor:
    """The book model's distribution at the masked 苹, (V,), with layer 0's FFN units zeroed."""
    keep = torch.ones(d_ff0)  # (d_ff,)
    if zero_order is not None:
        keep[unit_order(h_layer0, lay0.ff, zero_order)[: round(fraction * d_ff0)]] = 0
    hook = lay0.ff.fc2.register_forward_pre_hook(lambda m, inp: (inp[0] * keep,))
    try:
        with torch.no_grad():
            return book(masked_book)[0, PING].softmax(-1)  # (V,)
    finally:
        hook.remove()


print(" ".join(book_vocab.itos[i] for i in masked_book[0].tolist()))
zeroings = {
    "nothing zeroed": (None, 0.0),
    "largest 10%": ("largest first", 0.1),
    "largest 50%": ("largest first", 0.5),
    "random 50%": ("random", 0.5),
    "all 512": ("random", 1.0),
}
guess = {name: guess_at_ping(*z) for name, z in zeroings.items()}
for name, p in guess.items():
    top = p.topk(4)
    shown = "  ".join(f"{book_vocab.itos[i]} {v:.3f}" for v, i in zip(top.values, top.indices))
    print(f"{name:<15} top-4 at the masked 苹: {shown}")
top3 = set(guess["nothing zeroed"].topk(3).indices.tolist())
assert {book_vocab.itos[i] for i in top3} == {"水", "糖", "苹"}  # things one eats or drinks
assert all(set(p.topk(3).indices.tolist()) == top3 for p in guess.values())  # the same three
assert all((p - guess["nothing zeroed"]).abs().max() < 0.15 for p in guess.values())

# %% [markdown]
# The model reads 吃 and 果 and guesses food: 水 (as in 水果, fruit), 糖 and 苹 itself. Zeroing
# units of layer 0, even all 512, reshuffles those three, by up to a tenth in probability, and never
# drops one.
# The held-out positions say the same at scale. Per layer: take out the FFN's output, leaving
# $\mathrm{LN}_2(h)$, or take out instead the residual path around it, leaving
# $\mathrm{LN}_2(\mathrm{FFN}(h))$ (`ffn_sublayer_without`, hooks that leave the weights alone):

# %%
tfx.book.source.show_source(ffn_sublayer_without)

# %%
removed = {}
for i, lay in enumerate(book.bert.layers):
    for part in ("ffn", "skip"):
        with ffn_sublayer_without(lay, part):
            removed[i, part] = book_score()
with ffn_sublayer_without(book.bert.layers, "ffn"):
    removed["all", "ffn"] = book_score()
print(f"{'taken out':<24} {'cross-entropy':>13}  {'accuracy':>8}")
print(f"{'nothing':<24} {book_base[0]:>13.3f}  {book_base[1]:>8.3f}")
for (i, part), (ce, acc) in removed.items():
    what = f"FFN of {'all 4 layers' if i == 'all' else f'layer {i}'}" if part == "ffn" else ""
    what = what or f"skip around FFN {i}"
    print(f"{what:<24} {ce:>13.3f}  {acc:>8.3f}")
one_ffn = [removed[i, "ffn"][0] - book_base[0] for i in range(4)]
one_skip = [removed[i, "skip"][0] - book_base[0] for i in range(4)]
assert max(one_ffn) < 0.25  # any one FFN: a fraction of a nat
assert min(one_skip) > 2.0  # any one skip: the model is lost
assert removed["all", "ffn"][0] - book_base[0] > 1.5 * max(one_ffn)  # together the FFNs count

# %% [markdown]
# Why so little from one FFN? In a post-LN layer the FFN's output is *added* to its input $h$ before
# $\mathrm{LN}_2$, and $h$ already carries what the layers below computed. The cell measures, over the
# real tokens of the held-out rows, how large the FFN's write is next to $h$, and how far it turns the
# layer's output: the cosine between $\mathrm{LN}_2(h + \mathrm{FFN}(h))$ and $\mathrm{LN}_2(h)$.

# %%
ffn_io = {}
hooks = [
    lay.ff.register_forward_hook(
        lambda m, inp, out, i=i: ffn_io.setdefault(i, []).append((inp[0], out))
    )
    for i, lay in enumerate(book.bert.layers)
]
with torch.no_grad():
    for x, _ in held:
        book(x, attention_mask=(x != 0).long())
for hk in hooks:
    hk.remove()
real = torch.cat([x for x, _ in held]) != 0  # (3·64, 64): not [PAD]
write, turn = [], []
with torch.no_grad():
    for i, lay in enumerate(book.bert.layers):
        h = torch.cat([a for a, _ in ffn_io[i]])[real]  # (N, d) the FFN's input
        f = torch.cat([o for _, o in ffn_io[i]])[real]  # (N, d) its output
        write.append((f.norm(dim=-1) / h.norm(dim=-1)).median().item())
        turn.append(F.cosine_similarity(lay.norm2(h + f), lay.norm2(h), dim=-1).mean().item())
        print(
            f"layer {i}: median ‖FFN(h)‖ / ‖h‖ {write[-1]:.2f}; "
            f"cos(LN₂(h + FFN(h)), LN₂(h)) {turn[-1]:.2f}"
        )
assert max(write) < 0.5 and min(turn) > 0.85  # a correction to the stream, not a replacement

# %% [markdown]
# Each FFN writes a vector 0.15 to 0.37 times as long as the stream it is added to (medians over the
# tokens), and the layer's output without it still points almost the same way (cosine 0.92 to 0.98).
# The prediction rides on the residual path: take that away around any one FFN and the cross-entropy
# rises by 3 to 5 nats, the accuracy falls from 0.48 to between 0.03 and 0.18; take the FFN away
# instead and the next layers receive almost the same vector, and the loss rises by nothing (layer 0)
# to an eighth of a nat (layer 2). The FFNs are not idle (all four together cost four tenths of a
# nat), but each is a correction to the stream, which is why a single one can be zeroed at little
# cost. Chapter 05 builds the residual path and its LayerNorms.

# %% [markdown]
# ## Beyond BERT, briefly
#
# **Gated FFNs.** Later models use $(\mathrm{act}(xW_g) \odot xW_u) W_d$, where one projection decides,
# unit by unit, how much of the other passes (Shazeer, 2020; SwiGLU, with $\mathrm{act} = \mathrm{SiLU}$,
# is the FFN of PaLM and LLaMA). With three matrices, the same parameter count needs $d_{ff}$ a third
# smaller, 2048 instead of 3072 at $d = 768$; LLaMA's $\tfrac{8}{3}d$ is the same rule applied to $4d$.
# `GatedFeedForward` against its formula:

# %%
# NBVAL_CHECK_OUTPUT
tfx.set_seed(0)
swiglu = GatedFeedForward(768, 2048, gate="swiglu")
with torch.no_grad():
    by_hand = (
        F.silu(x_base @ swiglu.w_gate.weight.T) * (x_base @ swiglu.w_up.weight.T)
    ) @ swiglu.w_down.weight.T  # (1, L, 768)
    assert_close(swiglu(x_base), by_hand)
n_swiglu = sum(p.numel() for p in swiglu.parameters())
n_plain = ffn_param_count(768, 3072, bias=False)
print(f"SwiGLU 768 → 2048 → 768, no biases: {n_swiglu:,} parameters")
print(f"GELU FFN 768 → 3072 → 768, no biases: {n_plain:,} parameters")
show(x=x_base, gate=swiglu.w_gate(x_base), up=swiglu.w_up(x_base), out=by_hand)
assert n_swiglu == n_plain == ffn_param_count(768, 2048, bias=False, gated=True)

# %% [markdown]
# **Mixture of experts.** A router sends each token to one or two of several FFNs ("experts"), so the
# parameters grow with the number of experts while each token's FLOPs stay those of one or two FFNs
# (Switch Transformer, Fedus et al. 2021; Mixtral, 2024). It relies on the FFN acting on each token
# alone.

# %% [markdown]
# ## Summary
#
# - The FFN, $\mathrm{act}(xW_1 + b_1)W_2 + b_2$, acts on every position alone; it combines 吃 with 苹
#   non-additively only after attention has brought 吃 into 苹's row (A46 holds only when read so).
# - Columns of $W_1$ are pattern detectors, $b_1$ their thresholds, the activation their gate, rows of
#   $W_2$ what they write back; in the book model about fifty of 512 units give a token's FFN output
#   its direction.
# - At BERT-base it holds two thirds of each layer's parameters, and more than half of its FLOPs while
#   $L < 1536$.
# - BERT's GELU is the exact erf form, Hugging Face's `"gelu"`; the tanh form is within
#   $5 \cdot 10^{-4}$, $x\sigma(1.702x)$ within 0.021, and the article's $\max(0, x)\sigma(1.702x)$ loses
#   the negative dip. GELU's derivative is continuous, but its training gradient was not steadier
#   than ReLU's (A47).
# - BERT's FFN has biases; LayerNorm removes only the mean of $b_2$ (A8 fails).
# - With `ff_inner_dropout=False` tfx equals Hugging Face's `BertLayer` FFN in both modes.
# - In the briefly trained model most ReLU units of a token are exactly zero; GELU units never are.
# - In the book model, taking out any one layer's FFN costs a fraction of a nat at the held-out masks,
#   taking out the residual path around it several nats: the FFN corrects a stream that carries the
#   prediction past it.
#
# **The article's other claims on this chapter's material** are settled in appendix
# {doc}`93 <93_ledger_layers>`: that the original paper set $d_{ff} = 768 \times 4$
# ({ref}`A45 <claim-a45>`, holds only as the ratio 4), that GELU equals $\max(0, x)\,\sigma(1.702x)$
# ({ref}`A7 <claim-a7>`, fails) and that BERT's FFN is $\max(0, xW_1 + b_1)W_2 + b_2$
# ({ref}`A44 <claim-a44>`, fails for BERT).
#
# ## What you can now do
#
# - Write the FFN by hand, show that it acts on every position alone, and find where it still mixes.
# - Count its parameters and FLOPs against attention's.
# - Choose between exact GELU, its approximations and ReLU, and check a layer against Hugging Face's
#   `BertLayer` in eval and in training mode.
# - Look inside the hidden units of a trained model: which fire for a token, how many are zero, and what
#   each writes back; take an FFN or its skip out and score what the model loses.
#
# Next, chapter 05 asks what LayerNorm computes, where BERT puts it, and what post-LN, pre-LN and
# the residual path do over 12 or 24 layers.
#
# ## Exercises
#
# Tiers: *warm-up* checks what the chapter showed, *core* applies it to a new case, *build it*
# has you write the code, *open* has no single answer.
#
# 1. *(warm-up)* **Permutation.** Show that FFN(x[:, perm]) equals FFN(x)[:, perm]. Does an encoder
#    layer (with attention and no positions) do the same?
# 2. *(warm-up)* **When is the FFN as large as attention?** Find the smallest $d_{ff}$ at which one
#    FFN has at least as many parameters as one attention sub-layer ($4d^2 + 4d$) at $d = 768$.
# 3. *(core)* **The tanh form in the book model.** Predict first: will the held-out cross-entropy
#    move by more or less than 0.01? Switch every FFN of the book model to the tanh form
#    (`layer.ff.activation = "gelu_tanh"`) and measure the change with `book_score`.
# 4. *(core)* **Dead units.** In the trained ReLU model, which share of layer 0's 256 units is zero
#    for all eight tokens of the running example? Compare it with the share if every token's zero
#    units were the same ones, and if each token's zeros were drawn independently.
# 5. *(open)* **Open question.** The ReLU model learns as fast as the GELU model although most of
#    its units are zero for any one token. Why is that not a contradiction? (Hint: are they the same
#    units for every token?)
# 6. *(build it)* **Two experts.** Build a mixture-of-experts FFN: two `FeedForward` experts and a
#    linear router that sends each token to the expert with the larger score. Check that a router
#    with zero weights (a tie, which `argmax` breaks towards expert 0) reproduces expert 0, and
#    compare its parameters and its matmul work per token with one FFN's. Predict both first.

# %% [markdown]
# :::{admonition} Solution to exercise 1
# :class: dropdown
# The FFN computes row $i$ from row $i$ alone, so $\mathrm{FFN}(Px) = P\,\mathrm{FFN}(x)$ for any
# permutation matrix $P$. Attention without positions too: the scores become $P S P^{\mathsf T}$, the
# row-wise softmax permutes them alike, and $(P A P^{\mathsf T})(P V) = P A V$. The residual sums and
# LayerNorms act per token, so a whole encoder layer commutes with any reordering: without positions it
# cannot tell word order (chapter 02's reason for adding them).
# :::

# %% tags=["hide-cell"]
# 1. The FFN and an encoder layer without positions commute with a permutation of the tokens
perm = torch.tensor([3, 0, 7, 1, 6, 2, 5, 4])
tfx.set_seed(0)
with torch.no_grad():
    assert_close(base_ff(x_base[:, perm]), base_ff(x_base)[:, perm])
    layer_np = EncoderLayer(64, 4, 256, dropout=0.0).eval()
    x64 = torch.randn(1, L, 64)
    assert_close(layer_np(x64[:, perm]), layer_np(x64)[:, perm])

# %% [markdown]
# :::{admonition} Solution to exercise 2
# :class: dropdown
# The FFN's $2 d\, d_{ff} + d_{ff} + d$ parameters reach attention's $4d^2 + 4d$ when
# $d_{ff} \ge (4d^2 + 3d)/(2d + 1)$. At $d = 768$ the bound is 1536.5, so the smallest whole $d_{ff}$ is
# 1537: about $2d$, half of BERT's 3072. The code scans $d_{ff}$ with `ffn_param_count` to confirm.
# :::

# %% tags=["hide-cell"]
# 2. The smallest d_ff at which the FFN has as many parameters as attention, d = 768
d = 768
attn_params = 4 * d * d + 4 * d
smallest = next(f for f in range(1, 4 * d) if ffn_param_count(d, f) >= attn_params)
bound = (4 * d * d + 3 * d) / (2 * d + 1)
print(
    f"exercise 2: smallest d_ff = {smallest} "
    f"(the bound (4d² + 3d)/(2d + 1) = {bound:.2f}), about 2d"
)
assert smallest == math.ceil(bound) == 1537 and ffn_param_count(d, smallest - 1) < attn_params

# %% [markdown]
# :::{admonition} Solution to exercise 3
# :class: dropdown
# The tanh form is within $5 \cdot 10^{-4}$ of the exact GELU, so each hidden unit moves by at most
# that much, and the held-out cross-entropy by less than $10^{-3}$ nats, nothing next to the 0.4 nats
# that taking out all four FFNs costs: a model trained with one form can run with the other.
# :::

# %% tags=["hide-cell"]
# 3. The held-out cross-entropy of the book model with the tanh form
for lay in book.bert.layers:
    lay.ff.activation = "gelu_tanh"
tanh_scores = book_score()
for lay in book.bert.layers:
    lay.ff.activation = "gelu"
print(f"exercise 3: held-out cross-entropy erf {book_base[0]:.5f}, tanh {tanh_scores[0]:.5f}")
assert abs(tanh_scores[0] - book_base[0]) < 1e-3
assert all(lay.ff.activation == "gelu" for lay in book.bert.layers)  # switched back

# %% [markdown]
# :::{admonition} Solution to exercise 4
# :class: dropdown
# If the tokens' zero units were the same ones, as far as their counts allow, the dead share would be
# the smallest per-token zero share; if drawn independently, their product. The measured share lies
# strictly between: the zeros overlap across tokens more than independent draws would, but they are not
# the same units for every token.
# :::

# %% tags=["hide-cell"]
# 4. Units of layer 0 that are zero for every token of the running example
a_relu = hidden_units(trained["relu"][0], ids_tv)[0][0]  # (L, 256)
zero_share = (a_relu == 0).float().mean(dim=1)  # (L,) each token's share of zero units
dead = (a_relu == 0).all(dim=0).float().mean().item()
same_units, independent = zero_share.min().item(), zero_share.prod().item()
print(
    f"exercise 4: {dead:.1%} of layer 0's ReLU units are zero for all 8 tokens; "
    f"same units for every token: {same_units:.1%}, independent tokens: {independent:.1%}"
)
assert independent < dead < same_units  # the zeros overlap across tokens, but they move

# %% [markdown]
# :::{admonition} Solution to exercise 5
# :class: dropdown
# Sparse for each token is not sparse overall. A ReLU unit that is zero for a token passes no gradient
# to its column of $W_1$ for that token, but the zero units change from token to token (exercise 4), so
# over a batch of 64 sentences almost every unit is active for some tokens and learns from them. Each
# token still keeps dozens of its 256 units, enough rows of $W_2$ to write into a 64-wide vector.
# :::

# %% tags=["hide-cell"]
# 5. Few ReLU units per token, but different units for different tokens
relu_model = trained["relu"][0]
held = held_ids[:100]  # (100, L_MAX)
seen = []
hk = relu_model.bert.layers[0].ff.register_forward_hook(lambda m, inp, out: seen.append(inp[0]))
with threads(1), torch.no_grad():  # one thread, as in training: no core-count rounding
    relu_model(held, attention_mask=(held != 0).long())
    a_held = key_value_view(relu_model.bert.layers[0].ff, seen[0])[0]  # (100, L_MAX, 256)
hk.remove()
real = held >= len(tfx.core.example.SPECIAL_TOKENS)  # (100, L_MAX): not [CLS], [SEP] or [PAD]
active = a_held[real] > 0  # (N, 256): which units fire for each real token
per_token = active.float().mean().item()
any_token = active.any(dim=0).float().mean().item()
final = {act: run[2][STEPS] for act, run in trained.items()}
print(
    f"exercise 5: on {active.shape[0]} held-out tokens, {per_token:.1%} of layer 0's ReLU units "
    f"fire per token on average, {any_token:.1%} fire for at least one token"
)
print(f"   held-out loss after {STEPS} steps: GELU {final['gelu']:.2f}, ReLU {final['relu']:.2f}")
assert per_token < 0.5 and any_token > 2 * per_token  # sparse per token, not overall
assert abs(final["relu"] - final["gelu"]) < 0.2  # and the two learn about as fast

# %% [markdown]
# :::{admonition} Solution to exercise 6
# :class: dropdown
# Each token goes through one expert only, so the work per token is one FFN's plus the router's
# $2d$ multiply-adds, while the parameters double (plus the router's $2d$): a mixture of experts
# buys capacity without buying compute per token. Real routers also multiply each expert's
# output by its softmax weight, so that the router itself receives a gradient; the hard choice
# here has none.
# :::


# %% tags=["hide-cell"]
# 6. A top-1 mixture of two FeedForward experts
class TwoExperts(nn.Module):
    def __init__(self, d_model, d_ff):
        super().__init__()
        self.experts = nn.ModuleList(FeedForward(d_model, d_ff) for _ in range(2))
        self.router = nn.Linear(d_model, 2, bias=False)

    def forward(self, x):  # (B, L, d_model)
        choice = self.router(x).argmax(dim=-1)  # (B, L): each token's expert
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            rows = choice == e  # (B, L) bool
            out[rows] = expert(x[rows])  # (N_e, d_model): only its own tokens
        return out


tfx.set_seed(0)
moe = TwoExperts(64, 256).eval()
x6 = torch.randn(2, 8, 64)  # (B, L, d)
with torch.no_grad():
    moe.router.weight.zero_()
    assert_close(moe(x6), moe.experts[0](x6))
one = sum(p.numel() for p in moe.experts[0].parameters())
both = sum(p.numel() for p in moe.parameters())
# multiply-adds per token: every weight matrix a token passes through, each weight used once
macs_one = sum(lin.weight.numel() for lin in (moe.experts[0].fc1, moe.experts[0].fc2))
macs_moe = moe.router.weight.numel() + macs_one  # the router, then one expert only
print(f"exercise 6: parameters {both:,} against one FFN's {one:,}")
print(f"   multiply-adds per token {macs_moe:,} against {macs_one:,} (router: 2·d)")
assert both == 2 * one + 2 * 64  # the prediction: twice the parameters, plus the router's 2d
assert macs_moe == macs_one + 2 * 64  # and one FFN's work per token, plus the router's 2d
