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
# # 01 · Shapes: BERT-base, one tensor at a time
#
# **The question.** A sentence of eight tokens goes into BERT-base and comes out as eight rows of
# 30,522 vocabulary scores. What is the shape of every tensor on the way, which matrix makes each one,
# where do the 109.5 million parameters sit, and where does the compute go as the sentence grows?
#
# We answer it three times, and make the answers agree:
# 1. by hand: we run the forward pass one matrix product at a time and print every shape;
# 2. by the machine: `tfx.shapes.trace` hooks every module of a real `tfx.bert.BertModel`;
# 3. by formula: `tfx.flops` counts parameters and FLOPs from the config alone, and we check those
#    counts against real modules, Hugging Face's `BertModel` and torch's FLOP counter.
#
# The running example of the whole book is `[CLS] 我 喜 欢 吃 苹 果 [SEP]` ("I like eating apples"),
# one token per character, so L = 8.

# %%
import platform

import torch
import transformers
from torch.testing import assert_close
from torch.utils.flop_counter import FlopCounterMode

import tfx
from tfx.bert import BertConfig, BertForMaskedLM, BertModel
from tfx.data import RUNNING_EXAMPLE, build_vocab, running_example_ids
from tfx.flops import crossover_lengths, layer_flops, param_counts, shape_rows
from tfx.shapes import show

print(
    platform.python_version(), "torch", torch.__version__, "transformers", transformers.__version__
)

# %% [markdown]
# ## Token ids
#
# The book uses a tiny vocabulary built from the example itself (special tokens first, so `[PAD]` is 0 as
# in BERT). A released Chinese BERT would look the characters up in its own, much larger vocabulary; the shapes
# do not care which integer a token gets, only that it is below `vocab_size`.

# %%
# NBVAL_CHECK_OUTPUT
vocab = build_vocab(RUNNING_EXAMPLE)
ids = running_example_ids(vocab)  # (1, 8)
print(list(zip(RUNNING_EXAMPLE, ids[0].tolist())))
show(ids=ids)

# %% [markdown]
# ## The whole path by hand
#
# Two configurations with the same wiring: BERT-base ($d_{model}=768$, $H=12$ heads of $d_k=64$,
# $d_{ff}=3072$, 12 layers, vocabulary 30,522) and `BertConfig.tiny()` ($d_{model}=64$, 4 heads,
# $d_{ff}=256$, 2 layers, vocabulary 1,000), small enough to print whole.
#
# `walk` below re-does the forward pass of a `tfx.bert.BertForMaskedLM` with explicit matrix products,
# reading the weights out of the model, and keeps every intermediate tensor under a readable name.
# For one layer, with $X$ of shape $(L, d_{model})$ and head $h$:
#
# $$Q_h = X W_Q^{(h)},\quad K_h = X W_K^{(h)},\quad V_h = X W_V^{(h)} \qquad W^{(h)} \in \mathbb{R}^{d_{model}\times d_k}$$
# $$\text{context}_h = \operatorname{softmax}\!\Big(\tfrac{Q_h K_h^\top}{\sqrt{d_k}}\Big) V_h \in \mathbb{R}^{L\times d_k}$$
# $$\text{MHA}(X) = [\text{context}_1, \dots, \text{context}_H]\, W_O + b_O,\qquad W_O \in \mathbb{R}^{d_{model}\times d_{model}}$$
#
# then BERT's post-LN sub-layers, $X \leftarrow \text{LN}(X + \text{MHA}(X))$ and
# $X \leftarrow \text{LN}(X + \text{FFN}(X))$ with $\text{FFN}(x) = \text{GELU}(x W_1 + b_1) W_2 + b_2$.


# %%
def walk(model: BertForMaskedLM, ids: torch.Tensor) -> dict:
    """BERT's forward pass with every matrix product spelled out; returns the named intermediates."""
    cfg, emb = model.cfg, model.bert.embeddings
    B, L = ids.shape
    H, dk = cfg.n_heads, cfg.d_model // cfg.n_heads
    t = {"token ids": ids}
    t["token embeddings"] = emb.tok.weight[ids]  # (B, L, d): one row of the table per token
    t["segment embeddings"] = emb.seg.weight[
        torch.zeros_like(ids)
    ]  # (B, L, d): segment A everywhere
    t["position embeddings"] = emb.pos.weight[:L]  # (L, d): broadcast over the batch
    x = emb.norm(
        t["token embeddings"] + t["segment embeddings"] + t["position embeddings"]
    )  # (B, L, d)
    t["sum, LayerNorm"] = x
    for i, layer in enumerate(model.bert.layers):
        W, b = (
            layer.attn.qkv.weight,
            layer.attn.qkv.bias,
        )  # (3d, d), (3d,): rows are [W_Q; W_K; W_V]
        Wq, Wk, Wv = W.view(3, H, dk, cfg.d_model).transpose(-2, -1)  # 3 × (H, d, dk)
        bq, bk, bv = b.view(3, H, 1, dk)  # 3 × (H, 1, dk)
        q = x[:, None] @ Wq + bq  # (B, 1, L, d) @ (H, d, dk) → (B, H, L, dk)
        k = x[:, None] @ Wk + bk  # (B, H, L, dk)
        v = x[:, None] @ Wv + bv  # (B, H, L, dk)
        scores = q @ k.transpose(-2, -1) / dk**0.5  # (B, H, L, L)
        ctx = scores.softmax(dim=-1) @ v  # (B, H, L, dk)
        concat = ctx.transpose(1, 2).reshape(B, L, cfg.d_model)  # (B, L, d): heads side by side
        WO = layer.attn.out.weight.T  # (d, d), so that concat @ WO is nn.Linear's x Wᵀ
        x = layer.norm1(x + concat @ WO + layer.attn.out.bias)  # (B, L, d)
        hidden = torch.nn.functional.gelu(
            x @ layer.ff.fc1.weight.T + layer.ff.fc1.bias
        )  # (B, L, d_ff)
        x_out = layer.norm2(x + hidden @ layer.ff.fc2.weight.T + layer.ff.fc2.bias)  # (B, L, d)
        if i == 0:  # every layer has the same shapes; keep the first one's
            t.update(
                {
                    "W_Q (also W_K, W_V) of one head": Wq[0],
                    "Q, K, V per head": q,
                    "scores Q Kᵀ / √d_k": scores,
                    "context per head": ctx,
                    "heads concatenated": concat,
                    "W_O": WO,
                    "attention out, add & LayerNorm": x,
                    "FFN hidden": hidden,
                    "FFN out, add & LayerNorm": x_out,
                }
            )
        x = x_out
    t[f"after {cfg.n_layers} layers"] = x  # (B, L, d)
    t["MLM logits"] = model.head(x)  # (B, L, V): dense, GELU, LayerNorm, then the tied decoder
    return t


# %% [markdown]
# First the tiny model, then BERT-base. Dropout is off (`eval()`), so the hand-made path and the module
# must agree to float rounding, and the shapes must be exactly what `tfx.flops.shape_rows` predicts
# from the config alone (the widget at the end of the chapter prints those predictions).

# %%
# NBVAL_CHECK_OUTPUT
tfx.set_seed(0)
tiny_cfg = BertConfig.tiny()
tiny = BertForMaskedLM(tiny_cfg).eval()
with torch.no_grad():
    steps = walk(tiny, ids)
    assert_close(steps["MLM logits"], tiny(ids), rtol=1e-5, atol=1e-5)
assert {k: tuple(v.shape) for k, v in steps.items()} == dict(shape_rows(tiny_cfg, L=8))
show(**steps)

# %%
# NBVAL_CHECK_OUTPUT
tfx.set_seed(0)
base_cfg = BertConfig.base()
base = BertForMaskedLM(
    base_cfg
).eval()  # random weights: shapes and counts do not need trained ones
with torch.no_grad():
    steps = walk(base, ids)
    logits = base(ids)  # (1, 8, 30522)
assert_close(steps["MLM logits"], logits, rtol=1e-4, atol=1e-4)
assert {k: tuple(v.shape) for k, v in steps.items()} == dict(shape_rows(base_cfg, L=8))
show(**steps)

# %% [markdown]
# Read the table top to bottom. The three embeddings are three lookups of the same shape, summed (the
# position table is $(L, d)$ and broadcasts over the batch). Attention keeps the width at 768 but
# passes through a $12 \times 8 \times 8$ block of scores: one $8\times 8$ matrix per head, row $i$ holding
# how much token $i$ looks at each of the 8 tokens. The FFN is the only place the width changes inside a
# layer (768 → 3072 → 768), and the last step is the only place the vocabulary appears.

# %% [markdown]
# (claim-a5)=
# ### Claim A5: per-head $W_Q, W_K, W_V$ are 768×64, the scores are 8×8, the concatenated heads are 768 wide, $W_O$ is 768×768
#
# **Holds.** The cell reads the shapes off the real base model: each head's slice of the fused
# $(2304, 768)$ QKV weight is a $768 \times 64$ matrix (as $x W$), the scores of each head are
# $8 \times 8$, the 12 heads of 64 concatenate to 768, and $W_O$ is $768 \times 768$.

# %%
# CLAIM A5: holds
layer0 = base.bert.layers[0].attn
print("fused QKV weight", tuple(layer0.qkv.weight.shape), "= [W_Q; W_K; W_V] for all 12 heads")
per_head = layer0.qkv.weight.view(3, 12, 64, 768).transpose(-2, -1)  # (3, H, d, dk)
assert per_head.shape[-2:] == (768, 64) and steps["W_Q (also W_K, W_V) of one head"].shape == (
    768,
    64,
)
assert steps["scores Q Kᵀ / √d_k"].shape[-2:] == (8, 8)
assert steps["heads concatenated"].shape[-1] == 12 * 64 == 768
assert layer0.out.weight.shape == (768, 768)

# %% [markdown]
# ## The same path, from the machine
#
# `tfx.shapes.trace` runs the model once with a forward hook on every module and records what went in,
# what came out and how many parameters each module holds. For the tiny model we show every module:

# %%
# NBVAL_CHECK_OUTPUT
print(tfx.shapes.trace(tiny, ids))

# %% [markdown]
# For BERT-base, two levels deep (the 12 layers look alike). Each layer also returns its
# $(1, 12, 8, 8)$ attention weights. Note the `head.decoder` row: its 23.5M parameters include the
# $30522 \times 768$ word-embedding matrix, which it shares with `bert.embeddings.tok` (weight tying), so the
# model total counts that matrix once, while the per-module rows count it in both places.

# %%
# NBVAL_CHECK_OUTPUT
table = tfx.shapes.trace(base, ids, max_depth=2)
print(table)
assert table[0].outputs == "(1, 8, 30522)"
assert base.head.decoder.weight is base.bert.embeddings.tok.weight

# %% [markdown]
# ## Where the parameters are
#
# With $V$ the vocabulary, $P$ the number of positions, $S$ the number of segments, $N$ layers and biases
# included, `tfx.flops.param_counts` adds up:
#
# | component | count |
# |---|---|
# | token / segment / position embeddings | $Vd$, $Sd$, $Pd$ |
# | each LayerNorm | $2d$ (scale $\gamma$ and shift $\beta$) |
# | attention per layer | $3(d^2 + d)$ for Q, K, V and $d^2 + d$ for $W_O$ |
# | FFN per layer | $2 d\, d_{ff} + d_{ff} + d$ |
# | pooler | $d^2 + d$ |
#
# The formula is checked against three independent counts: our real base model, Hugging Face's
# `BertModel` built from its default config, and (for BERT-large, 24 layers of width 1024) both again.
# The models for counting are built on PyTorch's `meta` device: parameters with shapes but no memory,
# so even BERT-large costs nothing to "build".


# %%
# NBVAL_CHECK_OUTPUT
def n_params(m):
    return sum(p.numel() for p in m.parameters())


counts = param_counts(base_cfg)
total = sum(counts.values())
for name, n in counts.items():
    print(f"{name:<20} {n:>12,}  {n / total:6.1%}")
print(f"{'total':<20} {total:>12,}")

with torch.device("meta"):  # shapes only, no memory
    hf_base = transformers.BertModel(transformers.BertConfig())
    hf_large = transformers.BertModel(transformers.BertConfig(**BertConfig.large().to_hf_kwargs()))
    tfx_base, tfx_large = BertModel(base_cfg), BertModel(BertConfig.large())
print(
    f"\nBERT-base : formula {total:,}  tfx {n_params(tfx_base):,}  Hugging Face {n_params(hf_base):,}"
)
large_total = sum(param_counts(BertConfig.large()).values())
print(
    f"BERT-large: formula {large_total:,}  tfx {n_params(tfx_large):,}  Hugging Face {n_params(hf_large):,}"
)
assert total == n_params(tfx_base) == n_params(hf_base) == 109_482_240
mlm_total = sum(param_counts(base_cfg, pooler=False, mlm_head=True).values())
print(
    f"BertForMaskedLM-base (no pooler, MLM head, tied decoder): formula {mlm_total:,}  real model {n_params(base):,}"
)
assert mlm_total == n_params(base)
assert large_total == n_params(tfx_large) == n_params(hf_large) == 335_141_888
attn = sum(n for name, n in counts.items() if name.startswith("attention"))
ffn = counts["FFN"] + counts["FFN LayerNorm"]
print(
    f"\nthe {base_cfg.n_layers} layers: {attn + ffn:,} = attention {attn:,} ({attn / (attn + ffn):.1%})"
    f" + FFN {ffn:,} ({ffn / (attn + ffn):.1%}); FFN / attention = {ffn / attn:.3f}"
)
assert round((attn + ffn) / 1e6, 1) == 85.1 and abs(ffn / attn - 2) < 0.01
assert round(counts["token embeddings"] / total, 2) == 0.21  # about a fifth

# %% [markdown]
# The paper's "110M" is 109,482,240 rounded, and its "340M" for BERT-large is 335,141,888 rounded. A fifth
# of BERT-base is the token embedding table; the 12 layers hold 85.1M, of which the FFNs hold two
# thirds and attention one third (per layer: $4d^2$ against $8d^2$ weights when $d_{ff}=4d$; the last
# printed line of the cell above counts biases and LayerNorms too).

# %% [markdown]
# ## Where the compute goes, and how it grows with L
#
# Count the forward matmul FLOPs of one layer on one sequence, a multiply and an add being 2 FLOPs
# (softmax, GELU, LayerNorm and the additions are $O(L\,d)$ and too small to matter here):
#
# | component | FLOPs | grows like |
# |---|---|---|
# | Q, K, V projections | $2 \cdot L \cdot d \cdot 3d = 6Ld^2$ | $L$ |
# | scores $QK^\top$ (all heads) | $2L^2 d$ | $L^2$ |
# | weights · V (all heads) | $2L^2 d$ | $L^2$ |
# | $W_O$ | $2Ld^2$ | $L$ |
# | FFN | $4 L\, d\, d_{ff}$ | $L$ |
#
# The two $L^2$ terms together, $4L^2d$, equal the FFN's $4L\,d\,d_{ff}$ exactly when $L = d_{ff}$, and equal
# all the linear terms, $8Ld^2 + 4Ld\,d_{ff}$, when $L = 2d + d_{ff}$. For BERT-base that is L = 3072 and
# L = 4608: far beyond BERT's 512 positions. Within BERT's range, attention's quadratic part is never the
# main cost of the FLOPs (memory is another story, chapter 03 and the performance chapter).
#
# First we check the formula against torch's own FLOP counter on the real base layer:

# %%
# NBVAL_CHECK_OUTPUT
tfx.set_seed(0)
for L in (8, 512):
    with FlopCounterMode(display=False) as fc, torch.no_grad():
        base.bert.layers[0](torch.randn(1, L, 768))
    formula = layer_flops(768, 3072, L)
    assert fc.get_total_flops() == sum(formula.values())
    print(
        f"L = {L}: torch counts {fc.get_total_flops():,} FLOPs per layer, the formula gives {sum(formula.values()):,}"
    )
    for name, f in formula.items():
        print(f"   {name:<20} {f:>15,}  {f / sum(formula.values()):6.1%}")

# %%
# NBVAL_CHECK_OUTPUT
cross = crossover_lengths(768, 3072)
print(cross)


def quadratic_vs_ffn(L):
    f = layer_flops(768, 3072, L)
    return f["scores Q Kᵀ"] + f["weights · V"], f["FFN"]


below, above = quadratic_vs_ffn(cross["vs FFN"] - 1), quadratic_vs_ffn(cross["vs FFN"] + 1)
assert below[0] < below[1] and above[0] > above[1]
print(
    f"at L = 512 the L² terms are {quadratic_vs_ffn(512)[0] / quadratic_vs_ffn(512)[1]:.1%} of the FFN's FLOPs"
)

# %%
Ls = [2**i for i in range(3, 15)]
flops = [layer_flops(768, 3072, L) for L in Ls]
fig = tfx.viz.plot_curves(
    Ls,
    {
        "attention L² terms (QKᵀ and weights·V)": [
            f["scores Q Kᵀ"] + f["weights · V"] for f in flops
        ],
        "FFN": [f["FFN"] for f in flops],
        "Q, K, V and W_O projections": [f["Q, K, V projections"] + f["W_O"] for f in flops],
    },
    xlabel="sequence length L",
    ylabel="forward FLOPs per layer",
    logx=True,
    logy=True,
    title="BERT-base layer: FLOPs against L",
    vlines={
        "BERT max 512": 512,
        "L = d_ff": cross["vs FFN"],
        "L = 2d + d_ff": cross["vs all projections"],
    },
)

# %% [markdown]
# On log–log axes the linear terms are lines of slope 1 and the attention term a line of slope 2; they cross
# at L = 3072.

# %% [markdown]
# (claim-a6)=
# ### Claim A6: an FFN of width 4·d_model (3072) is a good trade-off against 2× and 8×
#
# **Not reproducible here.** The article backs the claim with WMT translation BLEU scores (4× beats 2× by
# 0.8 BLEU) and a memory figure (4× "saves 35%" against 8×). BLEU needs a translation model trained for
# days on data we do not have offline, so no BLEU number is given here. The cost side can be measured: the
# cell below counts parameters and FLOPs of BERT-base with $d_{ff}$ = 2×, 4× and 8× $d_{model}$. Going from 4×
# to 8× adds 56.7M parameters; 4× has 34.1% fewer parameters than 8×, close to the article's "35%" if it
# meant parameter memory.

# %%
# CLAIM A6: not reproducible here: the BLEU half needs WMT training; parameters and FLOPs are measured
rows = {}
for mult in (2, 4, 8):
    cfg = BertConfig.base(d_ff=mult * 768)
    p = sum(param_counts(cfg).values())
    f = sum(layer_flops(768, cfg.d_ff, 128).values()) * cfg.n_layers
    rows[mult] = (p, f)
    print(
        f"d_ff = {mult}×768 = {cfg.d_ff:>4}: {p:>12,} parameters, {f / 1e9:6.2f} GFLOPs for L = 128"
    )
saving = 1 - rows[4][0] / rows[8][0]
print(
    f"4× has {saving:.1%} fewer parameters than 8×; 2× has {1 - rows[2][0] / rows[4][0]:.1%} fewer than 4×"
)
print(f"going from 4× to 8× adds {rows[8][0] - rows[4][0]:,} parameters")
assert round((rows[8][0] - rows[4][0]) / 1e6, 1) == 56.7
assert rows[2][0] < rows[4][0] < rows[8][0] and rows[2][1] < rows[4][1] < rows[8][1]
assert abs(saving - 0.341) < 0.001

# %% [markdown]
# ## Try it: the shape table for any size
#
# The sliders set L, $d_{model}$, the number of heads and $d_{ff}$ of a 12-layer BERT; the kernel prints the
# shape of every step, the parameter count and the FLOPs per layer (all from `tfx.flops`, the functions
# checked above). A setting BERT cannot have, such as 13 heads for $d_{model}$ = 768, is refused with a
# message. Try L beyond 3072 to watch the attention / FFN ratio pass 1.

# %%
tfx.widgets.shapes_widget()

# %% [markdown]
# ## Summary
#
# - BERT's forward path, shape by shape: ids $(B, L)$ → three embeddings $(B, L, d)$ summed → per head
#   $Q, K, V$ $(B, H, L, d_k)$ → scores $(B, H, L, L)$ → context $(B, H, L, d_k)$ → concatenated
#   $(B, L, d)$ → $W_O$ → FFN through $(B, L, d_{ff})$ → back to $(B, L, d)$, 12 times → logits $(B, L, V)$.
# - A hand-made path, the hooked modules and the config-only formulas agree on every shape.
# - BERT-base has 109,482,240 parameters (HF and tfx agree), BERT-large 335,141,888. A fifth of base is
#   the token embedding table; in each layer the FFN holds twice the parameters of attention.
# - Per layer the FLOPs are $8Ld^2 + 4L\,d\,d_{ff} + 4L^2d$; the $L^2$ term overtakes the FFN at $L = d_{ff}$
#   (3072 for base), far beyond BERT's 512 positions.
#
# ## Exercises
#
# 1. How many parameters does one BERT-large layer have, and what fraction of them is the FFN?
#    (Solution hidden below.)
# 2. With $d_{ff} = 4d$, at which L does the $L^2$ attention term overtake the FFN, as a function of $d$?
#    And overtake all the linear terms? (Solution hidden below.)
# 3. If the MLM decoder did not share its weight with the token embeddings, how many parameters would
#    `BertForMaskedLM` at base size have? (Solution hidden below.)
# 4. Trace the tiny model on a batch of two sentences of different lengths, padded, with an
#    `attention_mask`. Which shapes change, and which do not? (Solution hidden below.)

# %% tags=["hide-input"]
# NBVAL_CHECK_OUTPUT
large = BertConfig.large()
per_layer = {
    k: v // large.n_layers
    for k, v in param_counts(large).items()
    if k.startswith(("attention", "FFN"))
}
layer_total = sum(per_layer.values())
print(
    f"exercise 1: one BERT-large layer has {layer_total:,} parameters, FFN share {per_layer['FFN'] / layer_total:.1%}"
)
assert (
    layer_total == 12 * 1024**2 + 9 * 1024 + 4096
)  # weights 4d² + 8d²; biases 4d + d + d_ff; two LayerNorms 4d
print("exercise 2: 4L²d = 4L·d·4d gives L = 4d; 4L²d = 8Ld² + 16Ld² gives L = 6d")
for d in (256, 768, 1024):
    assert crossover_lengths(d, 4 * d) == {"vs FFN": 4 * d, "vs all projections": 6 * d}
untied = mlm_total + base_cfg.vocab_size * base_cfg.d_model
with torch.device("meta"):  # build the model and give the decoder its own (V, d) weight
    untied_model = BertForMaskedLM(base_cfg)
    untied_model.head.decoder.weight = torch.nn.Parameter(
        torch.empty(base_cfg.vocab_size, base_cfg.d_model)
    )
assert n_params(untied_model) == untied
print(
    f"exercise 3: untied, BertForMaskedLM-base would have {untied:,} parameters instead of {n_params(base):,}"
)

# %% tags=["hide-input"]
# NBVAL_CHECK_OUTPUT
short = torch.tensor([[2, 5, 8, 9, 10, 3]])  # [CLS] 我 吃 苹 果 [SEP], L = 6
batch = torch.cat([ids, torch.nn.functional.pad(short, (0, 2), value=vocab["[PAD]"])])  # (2, 8)
mask = (batch != vocab["[PAD]"]).long()  # (2, 8): 1 for real tokens, 0 for padding
padded = tfx.shapes.trace(tiny, batch, attention_mask=mask, max_depth=2)
single = tfx.shapes.trace(tiny, ids, max_depth=2)
print(padded)
for row_b, row_1 in zip(padded, single):
    assert row_b.path == row_1.path and row_b.outputs == row_1.outputs.replace("(1, ", "(2, ")
assert padded[3].path == "bert.layers.0" and padded[3].inputs == "(2, 8, 64), (2, 1, 1, 8)"
with torch.no_grad():  # the padding changes no real token's output
    assert_close(tiny(batch, attention_mask=mask)[1, :6], tiny(short)[0], rtol=1e-5, atol=1e-5)
print(
    "exercise 4: only B changes (1 → 2), and each layer gets one more input, the mask as (B, 1, 1, L);"
    "\nL is the padded length 8, the scores stay (·, 4, 8, 8), and the mask zeroes the weights on [PAD]"
    "\nkeys, so the short sentence's 6 outputs equal those of an unpadded run"
)
