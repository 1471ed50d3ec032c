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
# # 08 · Performance tuning
#
# The model works; this chapter asks **what it costs, where that cost goes, and which of the usual
# tricks really lower it on the machine at hand**. Every speed number here is a ratio against a
# reference measured in the same run, on a machine that is named, because absolute times do not
# travel: the machines this book is written on are shared, 2-core CPUs whose absolute times swing
# by several times with the load of other jobs.
#
# Two kinds of numbers appear. Small **live** measurements run in this notebook (each timing cell
# starts `# NBVAL_IGNORE_OUTPUT`, and asserts only margins noise cannot flip). The **full-size**
# results come from the scripts in `bench/`, which write results files naming machine, date, torch
# version, threads and the load average at the time; the chapter reads and plots those. The source
# articles' claims N8, N22, N29, N24, A65, A66, N9, A14, A18, A64 and A67 are settled on the way.

# %%
import tfx  # first: importing tfx quiets torchao's import-time log lines (tfx/__init__.py)

# isort: split
import copy
import subprocess
import sys
import warnings

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.benchmark as benchmark

from tfx.attention import chunked_attention, scaled_dot_product_attention
from tfx.bert import BertForMaskedLM
from tfx.efficient import linear_attention, peak_memory, sliding_window_mask
from tfx.layers import EncoderLayer
from tfx.perf import RESULTS, alternate, latest, quiet_stderr
from tfx.shapes import show
from tfx.timing import loglog_slope, machine, threads

tfx.banner()

# %% [markdown]
# ## How we measure
#
# - **Time:** `torch.utils.benchmark.Timer(...).blocked_autorange()` runs a statement in blocks
#   until a minimum run time has passed and reports the median and the interquartile range;
#   `benchmark.Compare` lays several measurements out as a table. `tfx.timing` stays for two things
#   the benchmark module lacks: `threads(n)` sets torch's *and* numpy's BLAS thread counts and
#   restores both (a chapter never changes them globally), and `machine()` names the CPU in one line.
#   `tfx.perf.alternate` times several variants in turn, round after round, so a burst of load from
#   another job slows every variant alike and their ratio survives.
# - **Where the time goes:** `torch.profiler` with a table of the top ops.
# - **Memory:** `tfx.efficient.peak_memory` records every allocation and free of a call with
#   `torch.profiler(profile_memory=True)` and returns the largest running total: the most the call
#   held at once, the inputs (allocated before) excluded. It is exact and repeatable, so memory
#   ratios can be asserted where time ratios cannot.
#
# One thread is used for the live timings: on a busy 2-core machine a 2-thread op waits for its
# slower thread, and small ops then take erratic turns many times their usual length.

# %%
# NBVAL_IGNORE_OUTPUT
print(machine())

# %% [markdown]
# ## Memory-efficient attention
#
# Plain attention builds the whole $(L_q, L_k)$ score matrix, and its softmax builds another. Each
# output row needs only its own row of scores, and softmax runs along the keys, so nothing stops us
# from taking the queries a block at a time: $\mathrm{softmax}(Q_b K^\top/\sqrt{d_k})\,V$ for each
# block $Q_b$ of `block_size` rows is exactly those rows of the full result. Here is the idea on
# small tensors, two blocks of 4 queries.

# %%
# NBVAL_CHECK_OUTPUT
tfx.set_seed(0)
q, k, v = (torch.randn(1, 1, 8, 4) for _ in range(3))  # (B, H, L, d_k)
rows = []
for i in range(0, 8, 4):
    scores = q[..., i : i + 4, :] @ k.transpose(-2, -1) / 2.0  # (1, 1, 4, 8): one block of rows
    show(scores=scores)
    rows.append(scores.softmax(-1) @ v)  # (1, 1, 4, 4)
blocks = torch.cat(rows, dim=-2)  # (1, 1, 8, 4)
full = scaled_dot_product_attention(q, k, v)[0]
print(f"largest difference from full attention: {(blocks - full).abs().max().item():.1e}")
assert torch.allclose(blocks, full, atol=1e-6)

# %% [markdown]
# `tfx.attention.chunked_attention(q, k, v, mask=None, block_size=256)` is that loop with masks:
# it calls the book's `scaled_dot_product_attention` on each block, slicing a per-query mask with
# the queries, so every mask that function accepts works here too, including a fully masked row
# (zeros, not NaN). It returns only the output: the weights are what it avoids keeping.

# %%
tfx.source.show_source(chunked_attention)

# %%
# NBVAL_CHECK_OUTPUT
tfx.set_seed(0)
q, k, v = (torch.randn(2, 4, 300, 16) for _ in range(3))  # (B, H, L, d_k)
pad = torch.ones(2, 1, 1, 300, dtype=torch.bool)
pad[1, ..., 250:] = False  # the second sequence has 50 padding keys
dead = torch.ones(300, 300, dtype=torch.bool)
dead[5] = False  # query 5 may attend to nothing
masks = {
    "none": None,
    "causal (L, L)": tfx.attention.causal_mask(300),
    "padding (B, 1, 1, L)": pad,
    "sliding window ±16": sliding_window_mask(300, 16),
    "query 5 fully masked": dead,
}
for name, m in masks.items():
    out = chunked_attention(q, k, v, m, block_size=64)
    ref = scaled_dot_product_attention(q, k, v, m)[0]
    torch_ref = F.scaled_dot_product_attention(q, k, v, attn_mask=m)
    finite = bool(torch.isfinite(out).all())
    gap = (out - ref).abs().max().item()
    print(f"{name:22s} gap to tfx {gap:.1e}  finite {finite}")
    assert gap < 1e-5 and finite
    if m is not dead:  # torch returns NaN for a fully masked row; tfx returns zeros
        assert torch.allclose(out, torch_ref, atol=1e-5)
print("query 5's output:", out[0, 0, 5, :4].tolist())

# %% [markdown]
# Local (sliding-window) attention, which the articles list among efficient variants, is ordinary
# attention with a band mask: position $i$ may attend to $j$ when $|i-j| \le w$. As a mask it saves
# nothing by itself; only a kernel that skips the masked blocks turns it into less work.

# %%
# NBVAL_CHECK_OUTPUT
print(sliding_window_mask(8, 1).int())

# %% [markdown]
# Now the memory. `peak_memory` counts what each call allocates, live, up to L = 2048; the plot
# adds the full results of `bench/attention_memory.py` (L up to 8192, batch 1, one head,
# $d_k = 64$).

# %%
# NBVAL_CHECK_OUTPUT
live_mem = {}
for L in (256, 512, 1024, 2048):
    tfx.set_seed(0)
    q, k, v = (torch.randn(1, 1, L, 64) for _ in range(3))  # (B, H, L, d_k)
    with torch.inference_mode():
        live_mem[L] = {
            "naive": peak_memory(lambda q=q, k=k, v=v: scaled_dot_product_attention(q, k, v)[0])[1],
            "chunked": peak_memory(chunked_attention, q, k, v)[1],
            "torch sdpa": peak_memory(F.scaled_dot_product_attention, q, k, v)[1],
        }
    print(f"L={L:5d} " + "  ".join(f"{n} {b / 2**20:7.2f} MiB" for n, b in live_mem[L].items()))
# naive holds two L² float32 matrices: its peak grows 4× per doubling of L; chunked only 2×
assert live_mem[2048]["naive"] >= 2 * 2048**2 * 4
assert live_mem[2048]["chunked"] / live_mem[1024]["chunked"] < 2.5

# %%
# NBVAL_IGNORE_OUTPUT
tfx.set_seed(0)
q, k, v = (torch.randn(1, 1, 2048, 64) for _ in range(3))  # (B, H, L, d_k)
with torch.inference_mode(), threads(1):
    live_t = alternate(
        {
            "naive": lambda: scaled_dot_product_attention(q, k, v)[0],
            "chunked": lambda: chunked_attention(q, k, v),
            "torch sdpa": lambda: F.scaled_dot_product_attention(q, k, v),
        },
        rounds=3,
    )
print("L = 2048, 1 thread, median of 3 rounds in alternation:")
for name, s in live_t.items():
    print(f"  {name:10s} {s * 1e3:7.1f} ms   {s / live_t['naive']:.2f}× naive")

# %%
am = latest("attention-memory")
Ls = [r["L"] for r in am["rows"]]
names = ["naive", "chunked", "torch sdpa", "linear"]
fig, axes = plt.subplots(1, 2, figsize=(11, 4))
for n in names:
    axes[0].loglog(Ls, [r["peak_bytes"][n] / 2**20 for r in am["rows"]], "o-", label=n)
    axes[1].loglog(Ls, [r["median_s"][n] * 1e3 for r in am["rows"]], "o-", label=n)
axes[0].set(xlabel="L", ylabel="peak memory (MiB), inputs excluded", title="memory")
axes[1].set(xlabel="L", ylabel="median time (ms)", title="time")
for ax in axes:
    ax.legend()
fig.suptitle(
    f"bench/attention_memory.py: {am['info']['machine']}, {am['info']['date']}, "
    f"load {am['info']['load_average_1_5_15min'][0]}",
    fontsize=9,
)
plt.tight_layout()
plt.show()

# %% [markdown]
# (claim-n8)=
# ### Claim N8: chunked attention brings memory below O(L²)
#
# **Holds.** Chunked attention keeps a (block_size, L) slab of scores instead of (L, L): its peak
# grows linearly in L at a fixed block size. In the recorded run at L = 8192 it allocates about
# 1/28 of naive attention's peak, and is faster, not slower (the slabs fit in cache; the 256 MiB
# score matrices do not). PyTorch's own `F.scaled_dot_product_attention` goes further, with a
# fused kernel that never writes a score block to memory. The target was ≤ 1/16 of naive's memory
# at ≤ 1.0× its time; the cell checks both on the recorded file and the memory part live.

# %%
# CLAIM N8: holds: peak memory grows linearly in L at a fixed block size (1/28 of naive at L = 8192)
row = {r["L"]: r for r in am["rows"]}[8192]
mem_ratio = row["peak_bytes"]["chunked"] / row["peak_bytes"]["naive"]
time_ratio = row["median_s"]["chunked"] / row["median_s"]["naive"]
print(f"recorded, L = 8192: chunked / naive peak memory {mem_ratio:.4f}, time {time_ratio:.2f}×")
slope_naive = loglog_slope(Ls, [r["peak_bytes"]["naive"] for r in am["rows"]])
slope_chunked = loglog_slope(Ls[2:], [r["peak_bytes"]["chunked"] for r in am["rows"][2:]])
print(
    f"log-log slope of peak memory against L: naive {slope_naive:.2f}, chunked {slope_chunked:.2f}"
)
assert mem_ratio <= 1 / 16 and time_ratio <= 1.0
assert slope_naive > 1.9 and slope_chunked < 1.2
# live, this kernel: the same ratio at L = 2048 is far below 1 too
assert live_mem[2048]["chunked"] / live_mem[2048]["naive"] < 1 / 4

# %% [markdown]
# (claim-n22)=
# ### Claim N22: chunked attention gives the same result as full attention
#
# **Holds.** The article's `memory_efficient_attention` (numpy, `chunk_size=64`) loops over query
# blocks exactly as above, but calls a `softmax` it never defines, and takes no mask. With a
# row-wise softmax supplied, its loop equals full attention to float rounding; and
# `tfx.attention.chunked_attention` equals the full computation for every mask above, fully masked
# rows included.

# %%
# CLAIM N22: holds: the article's numpy loop (with a softmax supplied) and tfx's equal full attention


def softmax(x):  # the article calls softmax() without defining it; row-wise, stabilised
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def memory_efficient_attention(Q, K, V, chunk_size=64):  # the article's loop
    batch, n_heads, seq_len, d_k = Q.shape
    output = np.zeros((batch, n_heads, seq_len, d_k))
    for i in range(0, seq_len, chunk_size):
        Q_chunk = Q[:, :, i : i + chunk_size]
        scores = np.matmul(Q_chunk, K.transpose(0, 1, 3, 2)) / np.sqrt(d_k)
        attn = softmax(scores)
        output[:, :, i : i + chunk_size] = np.matmul(attn, V)
    return output


tfx.set_seed(0)
q, k, v = (torch.randn(2, 3, 200, 16, dtype=torch.float64) for _ in range(3))  # (B, H, L, d_k)
ref = scaled_dot_product_attention(q, k, v)[0]
art = memory_efficient_attention(q.numpy(), k.numpy(), v.numpy())
gap_article = np.abs(art - ref.numpy()).max()
gap_tfx = (chunked_attention(q, k, v, block_size=64) - ref).abs().max().item()
print(f"article's loop vs full: {gap_article:.1e}; tfx chunked vs full: {gap_tfx:.1e}")
assert gap_article < 1e-12 and gap_tfx < 1e-12
# and a wrong blocking (a softmax over the block's own columns only) does not agree
wrong = torch.cat(
    [
        scaled_dot_product_attention(
            q[..., i : i + 64, :], k[..., i : i + 64, :], v[..., i : i + 64, :]
        )[0]
        for i in range(0, 200, 64)
    ],
    dim=-2,
)
assert (wrong - ref).abs().max() > 0.1

# %% [markdown]
# ## Linear attention
#
# Chunking computes the same function in less memory but the same $O(L^2 d)$ time. Linear attention
# changes the function: with a positive feature map $\phi$ in place of $\exp(q\cdot k)$, the sum over
# keys $\sum_j \phi(k_j) v_j^\top$ is a $(d_k, d_v)$ matrix computed once, so the cost is
# $O(L\,d_k d_v)$. `tfx.efficient.linear_attention` uses $\phi(x) = \mathrm{elu}(x) + 1$ (Katharopoulos
# et al., 2020).

# %%
# NBVAL_CHECK_OUTPUT
tfx.set_seed(0)
q, k, v = (torch.randn(1, 1, 512, 64) for _ in range(3))  # (B, H, L, d_k)
lin = linear_attention(q, k, v)
soft = scaled_dot_product_attention(q, k, v)[0]
show(lin=lin)
rel = ((lin - soft).norm() / soft.norm()).item()
cos = F.cosine_similarity(lin.flatten(), soft.flatten(), dim=0).item()
print(f"relative gap from softmax attention {rel:.2f}, cosine {cos:.2f}")

# %% [markdown]
# (claim-n29)=
# ### Claim N29: linear attention lowers the cost by approximating softmax attention
#
# **Holds only when "approximating" means "replacing".** The cost falls: in the recorded run
# linear attention's time grows about linearly in L while naive attention's grows about as L², and
# at L = 8192 it is two orders of magnitude faster. But it is a different function, not an
# approximation that tends to softmax attention: on random inputs its output is as far from
# softmax attention's as the outputs themselves are large. Models built on it are trained with it.

# %%
# CLAIM N29: holds only when approximating means replacing: cost linear in L, outputs far apart
t_lin = [r["median_s"]["linear"] for r in am["rows"]]
t_naive = [r["median_s"]["naive"] for r in am["rows"]]
s_lin, s_naive = loglog_slope(Ls, t_lin), loglog_slope(Ls, t_naive)
print(f"recorded time slopes against L: linear {s_lin:.2f}, naive {s_naive:.2f}")
print(f"L = 8192: naive / linear time {t_naive[-1] / t_lin[-1]:.0f}×")
assert s_naive > 1.6 and s_lin < s_naive - 0.4 and t_naive[-1] / t_lin[-1] > 10
assert rel > 0.5  # the live relative gap above: not an approximation of softmax attention

# %% [markdown]
# ## float16 in numpy
#
# The first article's "mixed precision" section casts a numpy parameter dictionary to float16
# and back. Storage halves, of course; but numpy has no float16 arithmetic kernels on a CPU (it
# converts element by element), so the matmuls get slower, not faster.

# %%
# NBVAL_IGNORE_OUTPUT
rng = np.random.default_rng(0)
a32 = rng.standard_normal((256, 256), dtype=np.float32)
a16 = a32.astype(np.float16)
with threads(1):
    t = alternate({"float32": lambda: a32 @ a32, "float16": lambda: a16 @ a16}, rounds=3)
print(f"256×256 matmul: float32 {t['float32'] * 1e3:.2f} ms, float16 {t['float16'] * 1e3:.2f} ms")
print(f"float16 is {t['float16'] / t['float32']:.0f}× slower")
assert t["float16"] > 2 * t["float32"]

# %% [markdown]
# (claim-n24)=
# ### Claim N24: float16 greatly reduces memory
#
# **Holds for storage only.** The article's `to_half_precision` halves the bytes of every float32
# array, and its round trip back loses the low bits of every value (a relative error up to
# $2^{-11}$). It is a storage format here, not a speed-up: numpy's float16 matmul above ran many
# times slower than float32.

# %%
# CLAIM N24: holds for storage only: bytes halve, values lose their low bits, numpy matmuls slow down


def to_half_precision(params):  # the article's
    return {k: v.astype(np.float16) if v.dtype == np.float32 else v for k, v in params.items()}


def to_full_precision(params):  # the article's
    return {k: v.astype(np.float32) if v.dtype == np.float16 else v for k, v in params.items()}


tfx.set_seed(0)
params = {n: p.detach().numpy() for n, p in EncoderLayer(64, 4, 256).named_parameters()}
half = to_half_precision(params)
back = to_full_precision(half)
b32 = sum(p.nbytes for p in params.values())
b16 = sum(p.nbytes for p in half.values())
rel_err = max(
    np.abs(back[n] - p).max() / np.abs(p).max() for n, p in params.items() if np.abs(p).max() > 0
)
print(
    f"bytes: float32 {b32}, float16 {b16} ({b16 / b32:.2f}); largest relative error {rel_err:.1e}"
)
assert b16 / b32 == 0.5 and 0 < rel_err <= 2**-11

# %% [markdown]
# ## The encoder layer at BERT-base shapes
#
# Four implementations of one post-LN encoder layer (d = 768, 12 heads, d_ff = 3072): tfx's
# `EncoderLayer` with explicit softmax attention (`naive`) and with `F.scaled_dot_product_attention`
# (`sdpa`), `nn.TransformerEncoderLayer`, whose **fast path** (one fused op,
# `_transformer_encoder_layer_fwd`) runs only in eval mode without gradients, and Hugging Face's
# `BertLayer`. The live run below uses batch 2 × 128 and one thread; the recorded run batch 8 × 128.

# %%
# NBVAL_IGNORE_OUTPUT
from transformers import BertConfig as HFConfig  # noqa: E402
from transformers import BertModel as HFBert  # noqa: E402

tfx.set_seed(0)
torch_layer = nn.TransformerEncoderLayer(
    768, 12, 3072, dropout=0.0, activation="gelu", batch_first=True
).eval()
variants = {
    "tfx naive": EncoderLayer.from_torch(torch_layer, attn_impl="naive").eval(),
    "tfx sdpa": EncoderLayer.from_torch(torch_layer, attn_impl="sdpa").eval(),
    "torch fast path": torch_layer,
}
hf_layer = (
    HFBert(
        HFConfig(
            hidden_size=768,
            num_hidden_layers=1,
            num_attention_heads=12,
            intermediate_size=3072,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
        )
    )
    .eval()
    .encoder.layer[0]
)
x = torch.randn(2, 128, 768)  # (B, L, d)
with torch.inference_mode():
    for name in ("tfx naive", "tfx sdpa"):
        assert torch.allclose(variants[name](x), torch_layer(x), atol=1e-4)

    def hf_call(t):
        out = hf_layer(t)
        return out[0] if isinstance(out, tuple) else out

    variants["HF BertLayer"] = hf_call
    results = []
    with threads(1):
        for name, m in variants.items():
            timer = benchmark.Timer(
                "m(x)",
                globals={"m": m, "x": x},
                num_threads=1,
                label="inference 2×128",
                sub_label=name,
                description="fp32, 1 thread",
            )
            results.append(timer.blocked_autorange(min_run_time=0.3))
benchmark.Compare(results).print()

# %% [markdown]
# Where does the time of tfx's sdpa layer go, against the fast path? The profiler's top ops:

# %%
# NBVAL_IGNORE_OUTPUT
from torch.profiler import ProfilerActivity, profile  # noqa: E402

with torch.inference_mode(), threads(1):
    for name in ("tfx sdpa", "torch fast path"):
        with quiet_stderr(), profile(activities=[ProfilerActivity.CPU]) as prof:
            variants[name](x)
        print(name)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=6))

# %% [markdown]
# Both spend most of their time in the same matmuls (`aten::addmm`, the four projections and the
# FFN). tfx's layer adds a few separate ops the fused path avoids: GELU and the residual adds are
# separate passes over the activations, and heads are split and merged with copies. Its LayerNorm
# is one call of the fused `F.layer_norm` kernel, not the formula written out as chapter 05 derives
# it (mean, variance, normalise: several passes); the recorded run below times both versions.
#
# The recorded run of `bench/encoder.py` (batch 8 × 128), in `torch.utils.benchmark`'s tables:

# %%
enc = latest("encoder")
print(
    f"{enc['info']['machine']}, {enc['info']['date']}, load {enc['info']['load_average_1_5_15min']}"
)
print(enc["compare"])

# %% [markdown]
# The targets for the eager tfx layer were: within 1.05× of the fast path in fp32 inference, and
# a tuned (compiled) tfx path at or below 1.00× of it. The recorded run timed them in alternation
# (7 rounds, one thread, the thread's CPU time, medians), the steadiest comparison a shared machine
# allows, together with tfx's layer whose LayerNorm is the written-out formula:

# %%
comp = enc["compile"]
alt = comp["alternating_median_s"]
eager_ratio = alt["tfx sdpa eager"] / alt["torch fast path"]
compiled_ratio = alt["tfx sdpa inductor"] / alt["torch fast path"]
formula_ratio = alt["tfx sdpa eager, written-out LayerNorm"] / alt["torch fast path"]
print(f"clock: {enc['config']['clock']}")
print(f"tfx sdpa eager / fast path:          {eager_ratio:.2f}  (target <= 1.05)")
print(f"tfx sdpa torch.compile / fast path:  {compiled_ratio:.2f}  (target <= 1.00)")
print(f"the same, LayerNorm written out:     {formula_ratio:.2f}")
print(f"load average during the run: {enc['info']['load_average_1_5_15min']}")

# %% [markdown]
# Both targets are met in this run, the compiled one by a hair. The written-out LayerNorm alone
# costs the eager layer several percent: its passes over the activations are the difference
# between meeting the 1.05× target and missing it, which is why the module calls the fused kernel.
# What is left between tfx's eager layer and the fast path is in the profile above: separate GELU
# and residual passes and the head split/merge copies, each a full pass over the activations.
# `torch.compile` fuses exactly those element-wise passes. The ratios come from one recorded run on
# a machine other jobs shared, timed by CPU time to keep the other jobs' time out; they are
# reported, not asserted.
#
# ## A roofline
#
# How close does each layer come to what the machine can do? The recorded run measured the fp32
# and bf16 matmul peaks and the bandwidth of a large copy. A layer whose arithmetic intensity
# (FLOPs per byte moved) is low is held by the bandwidth line, one whose intensity is high by the
# compute peak. The bytes are an estimate: weights once plus every activation written and read
# once (and, for naive attention, its two score matrices). Peaks and layers are both taken from
# their fastest block of calls: on a shared machine that is the closest we get to an undisturbed
# run.

# %%
cfg, roof = enc["config"], enc["roofline"]
B, L, d, d_ff, H = cfg["batch"], cfg["L"], cfg["d"], cfg["d_ff"], cfg["heads"]
weights = 4 * (4 * d * d + 2 * d * d_ff)
acts = 4 * 2 * B * L * (3 * d + 3 * d + 4 * d + 2 * d_ff)
score_bytes = 4 * 2 * 2 * B * H * L * L
bytes_moved = {
    "tfx naive": weights + acts + score_bytes,
    "tfx sdpa": weights + acts,
    "torch fast path": weights + acts,
    "HF BertLayer": weights + acts,
}
peak32, peak16 = roof["matmul float32 GFLOP/s"], roof["matmul bfloat16 GFLOP/s"]
bw = roof["copy GB/s (read + write)"]
ai = np.logspace(-1, 3, 100)
fig, ax = plt.subplots(figsize=(7, 4.5))
ax.loglog(ai, np.minimum(peak32, bw * ai), "k-", label=f"fp32 roof ({peak32:.0f} GFLOP/s)")
ax.loglog(ai, np.minimum(peak16, bw * ai), "k--", label=f"bf16 roof ({peak16:.0f} GFLOP/s)")
for name, nbytes in bytes_moved.items():
    gflops = enc["flops"] / enc["layer"]["inference"][f"{name}, 1 threads"]["min_s"] / 1e9
    ax.loglog(enc["flops"] / nbytes, gflops, "o", label=f"{name}: {gflops:.0f} GFLOP/s")
ax.set(xlabel="arithmetic intensity (FLOP / byte)", ylabel="GFLOP/s")
ax.set_title(f"{enc['info']['machine']}\n{enc['info']['date']}, 1 thread", fontsize=8)
ax.legend(fontsize=8)
plt.show()
achieved = {
    n: enc["flops"] / enc["layer"]["inference"][f"{n}, 1 threads"]["min_s"] / 1e9
    for n in bytes_moved
}
print(f"memory bandwidth {bw:.1f} GB/s; ridge point {peak32 / bw:.1f} FLOP/byte (fp32)")
for n, g in achieved.items():
    print(f"{n:16s} {g:5.1f} GFLOP/s = {g / peak32:.0%} of the fp32 matmul peak")

# %% [markdown]
# Read this plot with the load in mind: the peak and the layers were measured seconds apart on a
# machine whose other jobs come and go, so a percentage from it says as much about the noise as
# about the layers. For the target of ≥ 85% of the fp32 matmul peak the recorded run therefore
# also timed the layers *in alternation* with a large matmul (2048³) and a matmul at the FFN's own
# shape, each by its thread's CPU time:

# %%
share = enc["peak_share"]
for n, g in share["gflop_per_s"].items():
    print(f"{n:42s} {g:5.1f} GFLOP/s = {share['share_of_fp32_peak'][n]:.0%} of the 2048³ matmul")

# %% [markdown]
# tfx's sdpa layer reaches the 85% target, and only just, as does the fast path: neither can go
# much higher, because a matmul of the FFN's own shape already stops short of the large square
# one. What the plot does show robustly: at batch 8 × 128 every layer sits far to the right of the
# ridge point, in the compute-bound region, so its speed is set by its matmuls, and bf16 raises
# that roof.
#
# One against two threads, from the same recorded run (inference, median times; a ratio below 1
# means two threads were faster). On a machine that other jobs share, the second thread is often
# busy, and a multi-threaded op waits for its slowest thread.

# %%
inf = enc["layer"]["inference"]
for n in bytes_moved:
    r = inf[f"{n}, 2 threads"]["median_s"] / inf[f"{n}, 1 threads"]["median_s"]
    print(f"{n:16s} 2 threads / 1 thread: {r:.2f}")

# %% [markdown]
# (claim-a65)=
# ### Claim A65: one x @ W_qkv followed by a split equals three separate projections
#
# **Holds exactly when $W_{qkv}$ is the three matrices side by side**, `cat([w_q, w_k, w_v], dim=1)`
# for the article's `x @ w` layout, and the split takes equal chunks in the same order. Then each
# output column is the same dot product. The fused matmul is one large op instead of three; its
# speed on the CPU is recorded below, within noise of the three: three large matmuls already keep
# the core busy, and there is no kernel launch to save, which is the GPU's argument.

# %%
# CLAIM A65: holds exactly when W_qkv = cat([w_q, w_k, w_v], dim=1) and the split keeps that order
tfx.set_seed(0)
x = torch.randn(8, 64, 768)  # (B, L, d)
w_q, w_k, w_v = (torch.randn(768, 768) / 768**0.5 for _ in range(3))
q, k, v = x @ w_q, x @ w_k, x @ w_v  # the article's three matmuls
w_qkv = torch.cat([w_q, w_k, w_v], dim=1)  # (768, 2304)
qf, kf, vf = (x @ w_qkv).chunk(3, dim=-1)  # the article's fused form
gap = max((a - b).abs().max().item() for a, b in ((q, qf), (k, kf), (v, vf)))
w_bad = torch.stack([w_q, w_k, w_v], dim=-1).reshape(768, 2304)  # interleaved columns
qb = (x @ w_bad).chunk(3, dim=-1)[0]
print(
    f"fused vs three: largest gap {gap:.1e}; interleaved layout: {(qb - q).abs().max().item():.2f}"
)
assert gap < 1e-4 and (qb - q).abs().max() > 1.0
qkv_rec = enc["qkv"]
print(
    f"recorded (batch 8 × 128, 1 thread): three / fused time "
    f"{qkv_rec['three']['median_s'] / qkv_rec['fused']['median_s']:.2f}"
)
assert qkv_rec["max_abs_gap"] < 1e-4  # nn.Linear form, same weights, in the recorded run

# %% [markdown]
# ## Mixed precision on the CPU
#
# The CPU the results were recorded on has AVX-512 with bf16 dot-product instructions (no AMX),
# so bf16 matmuls are a real speed-up here, not only a GPU lesson. The recorded bf16 numbers (tfx
# sdpa layer, batch 8 × 128, one thread):

# %%
bf = enc["bf16"]
try:
    cpu_flags = open("/proc/cpuinfo").read().split()
except OSError:
    cpu_flags = []
print(f"CPU flags: avx512_bf16 {'avx512_bf16' in cpu_flags}, amx_bf16 {'amx_bf16' in cpu_flags}")
print(f"matmul peaks: fp32 {peak32:.0f}, bf16 {peak16:.0f} GFLOP/s ({peak16 / peak32:.1f}×)")
print(
    f"inference: bf16 autocast / fp32 time {bf['inference bf16 autocast']['median_s'] / bf['inference fp32']['median_s']:.2f}"
)
print(
    f"train step: bf16 autocast / fp32 time {bf['train bf16 autocast']['median_s'] / bf['train fp32']['median_s']:.2f}"
)
print(f"largest error of the bf16 layer output: {bf['inference_max_abs_error']:.4f}")

# %% [markdown]
# (claim-a66)=
# ### Claim A66: torch.cuda.amp.autocast gives fp16 mixed precision and halves memory
#
# **Fails here.** `torch.cuda.amp.autocast` is deprecated, and on a machine without CUDA it warns
# and switches itself off: the matmul below still runs in float32. The CPU form is
# `torch.autocast("cpu", dtype=torch.bfloat16)`, which does run the matmul in bf16. Neither halves
# the model's memory: autocast casts copies of the weights for each op and leaves the parameters
# in float32 (the master weights), so the parameter bytes stay the same.

# %%
# CLAIM A66: fails here: torch.cuda.amp.autocast switches itself off without CUDA; parameters stay fp32
tfx.set_seed(0)
lin = nn.Linear(64, 64)
x = torch.randn(4, 64)
bytes_before = sum(p.nbytes for p in lin.parameters())
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    with torch.cuda.amp.autocast():
        y_cuda_amp = lin(x)
with torch.autocast("cpu", dtype=torch.bfloat16):
    y_cpu_amp = lin(x)
bytes_after = sum(p.nbytes for p in lin.parameters())
messages = " ".join(str(w.message) for w in caught)
print(f"torch.cuda.amp.autocast: output {y_cuda_amp.dtype}; warned: {'deprecated' in messages}")
print(f"torch.autocast('cpu', bf16): output {y_cpu_amp.dtype}")
print(f"parameter bytes before {bytes_before}, after {bytes_after}, dtype {lin.weight.dtype}")
assert y_cuda_amp.dtype == torch.float32 and "deprecated" in messages
assert y_cpu_amp.dtype == torch.bfloat16 and bytes_after == bytes_before

# %% [markdown]
# (claim-n9)=
# ### Claim N9: mixed precision means casting the parameters to float16
#
# **Fails.** A bare cast makes the *update* happen in float16: a weight of 1.0 has float16
# neighbours $2^{-10}$ apart, so any step smaller than half of that is rounded away and training
# silently stops moving. Mixed-precision training computes in 16 bits but keeps fp32 **master
# weights** that receive the update, and multiplies the loss by a **scale** so that small gradients
# do not underflow to zero in float16 (then divides the gradient by it before the update).

# %%
# CLAIM N9: fails: a bare fp16 cast loses small updates and gradients; master weights and scaling keep them
w16 = torch.tensor([1.0], dtype=torch.float16)
w32 = torch.tensor([1.0], dtype=torch.float32)  # the fp32 master copy
step = 1e-4  # lr × grad
for _ in range(100):
    w16 -= step
    w32 -= step
print(f"after 100 steps of {step}: bare fp16 {w16.item():.6f}, fp32 master {w32.item():.6f}")
assert w16.item() == 1.0 and abs(w32.item() - 0.99) < 1e-5
# a small gradient underflows in float16 unless the loss is scaled first
tfx.set_seed(0)
p = torch.randn(256, dtype=torch.float16, requires_grad=True)
(p * 1e-8).sum().backward()
unscaled = p.grad.clone()
p.grad = None
scale = 2.0**14  # 2**16 would overflow: the scaled loss gradient itself must fit (max 65504)
((p * 1e-8).sum() * scale).backward()
rescued = p.grad.float() / scale
print(
    f"gradient 1e-8 in fp16: unscaled {unscaled[0].item()}, scaled then unscaled {rescued[0].item():.2e}"
)
assert (unscaled == 0).all() and torch.allclose(rescued, torch.full((256,), 1e-8), rtol=0.01)

# %% [markdown]
# ## torch.compile and varying lengths
#
# `torch.compile` traces the model into graphs (dynamo) and generates fused kernels for them
# (inductor, 15–35 s of C++ compilation per graph on this CPU, cold). Each new input shape may
# mean a new graph. Counting graphs needs no code generation: a backend that only counts what
# dynamo hands it answers in seconds. Five lengths, three settings of `dynamic`, and padding to
# two buckets:

# %%
from tfx.perf import count_graphs  # noqa: E402

tfx.source.show_source(count_graphs)

# %%
# NBVAL_CHECK_OUTPUT
tfx.set_seed(0)
small = EncoderLayer(64, 4, 256, attn_impl="sdpa").eval()
lengths = [20, 33, 47, 64, 90]
xs = [torch.randn(2, n, 64) for n in lengths]  # (B, L, d) at five lengths


def to_bucket(t, buckets=(64, 128)):
    n = next(b for b in buckets if b >= t.size(1))
    return F.pad(t, (0, 0, 0, n - t.size(1)))  # (B, bucket, d)


graphs = {
    "dynamic=False": count_graphs(small, xs, dynamic=False),
    "default": count_graphs(small, xs),
    "dynamic=True": count_graphs(small, xs, dynamic=True),
    "buckets 64/128, dynamic=False": count_graphs(small, [to_bucket(t) for t in xs], dynamic=False),
}
for k_, n in graphs.items():
    print(f"{k_:32s} {n} graphs for lengths {lengths}")

# %% [markdown]
# (claim-a14)=
# ### Claim A14: torch.compile gives about 30%, but varying lengths cause recompiles, so pad
#
# **Fails as advice.** The recompiles are real but bounded: with `dynamic=False` every new
# length is a new graph (5 for 5 lengths); by default the second length makes dynamo mark the
# length symbolic, and one more graph serves all the rest (2); `dynamic=True` needs one. Padding to
# a few buckets bounds the count too (2), at the price of computing on padding: the recorded run
# shows what padding 32 tokens to 512 costs (far more than any compile gain). The speed-up itself
# is printed from the recorded inductor run (in alternation with the eager layer); with single
# timings moving by ±30% under this machine's load it is reported, not asserted, and the article's
# "about 30%" stays unconfirmed here.

# %%
# CLAIM A14: fails as advice: by default recompiles stop after the second length; padding costs more
print(graphs)
assert graphs["dynamic=False"] == len(lengths)
assert graphs["default"] == 2 and graphs["dynamic=True"] == 1
assert graphs["buckets 64/128, dynamic=False"] == 2
comp = enc["compile"]
assert (
    comp["graphs"]["dynamic=False"] == len(comp["lengths"])
    and comp["graphs"]["default (dynamic=None)"] == 2
)
pad_cost = comp["padding"]["long"]["median_s"] / comp["padding"]["short"]["median_s"]
print(f"recorded: padding 32 tokens to 512 costs {pad_cost:.0f}× the time of the 32-token batch")
assert pad_cost > 8  # 16× the tokens, and the attention part grows with L²
speedup = alt["tfx sdpa eager"] / alt["tfx sdpa inductor"]
print(
    f"recorded: inductor speed-up over eager tfx sdpa {speedup:.2f}× (in alternation); "
    f"compile took {comp['inductor_compile_s']:.0f} s"
)
assert comp["inductor_max_abs_error"] < 1e-3
assert pad_cost > 2 * speedup  # padding 32 → 512 costs far more than compiling gains

# %% [markdown]
# ## INT8, ONNX Runtime and the article's speed-up chain
#
# The first article closes with a chain of inference speed-ups for BERT-base (fused QKV, then fp16
# mixed precision, then INT8 through ONNX Runtime), with times from a V100. We run the same chain on
# **chapter 07's trained model**, where a held-out score says what each step costs in accuracy, and
# time a BERT-base-sized encoder for the article's absolute numbers.
#
# **Dynamic INT8 quantization** stores each `nn.Linear` weight as int8, one scale per output row,
# and quantizes each row of activations to int8 as it arrives; the matmul runs on int8 (VNNI
# instructions on this CPU) and the result is scaled back to float. Only the weights are prepared
# ahead, so it needs no calibration data. PyTorch's current home for it is **torchao**
# (`quantize_(model, Int8DynamicActivationInt8WeightConfig())`); `tfx.compress.quantize_int8` applies
# it to a copy and leaves the trained model alone.

# %%
from tfx import compress  # noqa: E402

tfx.source.show_source(compress.quantize_int8)

# %% [markdown]
# `bench/int8.py` recorded the chain on the chapter-07 model (one held-out batch of 64 sequences of
# 64 tokens, one thread, every variant timed in alternation) and scored every variant on all of
# chapter 07's held-out masked tokens with one function, `tfx.compress.held_out_accuracy`:

# %%
int8 = latest("int8")
chain = int8["chain"]
print(
    f"{int8['info']['machine']}, {int8['info']['date']}, load {int8['info']['load_average_1_5_15min']}"
)
print(
    f"torch {int8['info']['torch']}, torchao {int8['torchao']}, onnxruntime {int8['onnxruntime']}"
)
ref_s, ref_acc = chain["median_s"]["fused QKV, fp32"], chain["accuracy"]["fused QKV, fp32"]
n_scored = chain["scored_positions"]
print(f"{'variant':38s} {'s':>6s} {'× fp32':>7s} {'accuracy':>9s} {'Δ tokens':>9s}")
for name, s in chain["median_s"].items():
    acc = chain["accuracy"][name]
    print(
        f"{name:38s} {s:6.3f} {ref_s / s:7.2f} {acc:9.4f} {round((acc - ref_acc) * n_scored):+9d}"
    )
print(f"({n_scored} held-out masked tokens; Δ tokens: right answers gained or lost against fp32)")

# %% [markdown]
# Read the chain as a person tuning this model would. Fusing Q, K and V changes nothing in
# accuracy (the same function) and little in time: on a CPU three large matmuls already keep the
# core busy, and there is no kernel launch to save. bf16 autocast is the big step on this CPU.
# INT8 in eager torchao is *slower* than fp32 for a model this small (d = 128): quantizing every
# activation row on the fly costs separate passes that a 128-wide matmul does not repay. Compiled,
# or in ONNX Runtime, whose INT8 kernels fuse that work, it gets faster. The accuracy column moves
# by a handful of the held-out tokens at most.
#
# The BERT-base-sized encoder (12 layers, d = 768, random weights: speed does not depend on them),
# batch 8, at the article's length 32 and at 512:

# %%
base = int8["base"]
cpu_flags = set(open("/proc/cpuinfo").read().split()) if sys.platform == "linux" else set()
print(
    "fp16 matmul instructions (avx512_fp16 / amx_fp16):",
    bool({"avx512_fp16", "amx_fp16"} & cpu_flags),
    "| bf16 (avx512_bf16 / amx_bf16):",
    bool({"avx512_bf16", "amx_bf16"} & cpu_flags),
    "| int8 (avx512_vnni / amx_int8):",
    bool({"avx512_vnni", "amx_int8"} & cpu_flags),
)
for L, row in base["rows"].items():
    t32 = row["median_s"]["fp32"]
    print(f"batch {base['batch']} × {L}:")
    for name, s in row["median_s"].items():
        print(
            f"  {name:28s} {s:7.3f} s  {t32 / s:5.2f}× fp32  largest change {row['max_abs_gap'][name]:.3f}"
        )

# %% [markdown]
# The widget reads the same results file: pick a precision and a length, and it prints the recorded
# encoder time against fp32 and what that precision did to the chapter-07 model's held-out
# accuracy. It shows recorded numbers on purpose: a live timing on a shared machine would change at
# every click (the live cells below measure again, on this machine, now).

# %%
tfx.widgets.precision_widget(int8)

# %% [markdown]
# Now live, on this machine. Chapter 07's model comes from its cache (or is trained again to the
# same weights); the INT8 copy and the bf16 variant are scored on the same held-out tokens.

# %%
model07, data07, trainer07 = tfx.train.pretrained_mlm()
held, special = trainer07.held_out, data07.vocab.special_ids
q07 = compress.quantize_int8(model07)
w = q07.bert.layers[0].ff.fc1.weight
print(f"a quantized weight: {type(w).__name__}, shape {tuple(w.shape)}")
print(f"stored bytes: fp32 {compress.stored_bytes(model07):,}, INT8 {compress.stored_bytes(q07):,}")
live_acc = {
    "fp32": compress.held_out_accuracy(compress.tfx_predict(model07), held, special),
    "bf16 autocast": compress.held_out_accuracy(
        compress.tfx_predict(model07, bf16=True), held, special
    ),
    "INT8 torchao": compress.held_out_accuracy(compress.tfx_predict(q07), held, special),
}
n_live = int(sum(int((lab != -100).sum()) for _, lab in held))
for name, acc in live_acc.items():
    print(
        f"{name:14s} held-out accuracy {acc:.4f} ({round((acc - live_acc['fp32']) * n_live):+d} of {n_live} tokens)"
    )

# %% [markdown]
# The older route, `torch.ao.quantization.quantize_dynamic`, still exists in torch 2.13 and warns
# that it is deprecated in favour of torchao (its warning names 2.10 for the removal, a release
# already past), and it does not run tfx's model: it swaps every `nn.Linear`
# for a module whose `weight` is a method, and tfx's layers read `weight.dtype` to check their
# input.

# %%
print(compress.deprecation_message())
try:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        old = torch.ao.quantization.quantize_dynamic(
            copy.deepcopy(model07), {nn.Linear}, dtype=torch.qint8
        )
        old(held[0][0][:2])
    print("torch.ao's quantized model ran")
except AttributeError as e:
    print(f"torch.ao's quantized model fails: AttributeError: {e}")

# %% [markdown]
# ### ONNX Runtime
#
# The article exports the model to ONNX and quantizes it with ONNX Runtime's tools. Exporting tfx's
# model needs a small wrapper, `tfx.compress.OnnxMLM`: the exporter traces the model with symbolic
# inputs and cannot follow a Python `if` on the *values* of a tensor, and tfx checks its inputs'
# values (ids inside the vocabulary, a 0/1 attention mask). `export_onnx` tries the current exporter
# (`torch.export`) first and falls back to the TorchScript tracer when an `if` on values remains,
# then we compare ONNX Runtime's logits with tfx's on a padded batch of another size.

# %%
import os  # noqa: E402
import tempfile  # noqa: E402

onnx_dir = tempfile.mkdtemp()
ids07 = held[0][0]  # (64, 64), padded
mask07 = (ids07 != 0).long()  # (B, L)
onnx_path, exporter = compress.export_onnx(model07, os.path.join(onnx_dir, "mlm.onnx"), ids07[:4])
onnx_int8 = compress.quantize_onnx(onnx_path, os.path.join(onnx_dir, "mlm-int8.onnx"))
ort32 = compress.ort_predict(compress.ort_session(onnx_path))
ort8 = compress.ort_predict(compress.ort_session(onnx_int8))
with torch.inference_mode():
    logits_tfx = model07(ids07, attention_mask=mask07)  # (B, L, V)
gap_onnx = (ort32(ids07, mask07) - logits_tfx).abs().max().item()
print(f"exported with: {exporter}")
print(f"ONNX Runtime fp32 against tfx, batch {tuple(ids07.shape)}: largest gap {gap_onnx:.1e}")
print(f"file sizes: fp32 {onnx_path.stat().st_size:,} B, INT8 {onnx_int8.stat().st_size:,} B")
live_acc["ONNX Runtime fp32"] = compress.held_out_accuracy(ort32, held, special)
live_acc["ONNX Runtime INT8"] = compress.held_out_accuracy(ort8, held, special)
for name in ("ONNX Runtime fp32", "ONNX Runtime INT8"):
    acc = live_acc[name]
    print(
        f"{name:18s} held-out accuracy {acc:.4f} ({round((acc - live_acc['fp32']) * n_live):+d} tokens)"
    )
assert gap_onnx < 1e-4

# %%
# NBVAL_IGNORE_OUTPUT
with torch.inference_mode(), threads(1):
    live_chain = alternate(
        {
            "fp32": lambda: model07(ids07, attention_mask=mask07),
            "bf16 autocast": lambda: compress.tfx_predict(model07, bf16=True)(ids07, mask07),
            "INT8 torchao": lambda: q07(ids07, attention_mask=mask07),
            "ONNX Runtime fp32": lambda: ort32(ids07, mask07),
            "ONNX Runtime INT8": lambda: ort8(ids07, mask07),
        },
        rounds=3,
    )
print("batch 64 × 64, 1 thread, median of 3 rounds in alternation:")
for name, s in live_chain.items():
    print(f"  {name:18s} {s * 1e3:6.0f} ms  {live_chain['fp32'] / s:.2f}× fp32")

# %% [markdown]
# (claim-a67)=
# ### Claim A67: two onnxruntime command-line calls produce INT8 weights
#
# **Fails as written.** The first command, `python -m onnxruntime.quantization.preprocess`, exists
# (it optimises the graph and infers shapes before quantization). The second,
# `python -m onnxruntime.quantization.quantize_static`, does not: `quantize_static` is a *function*
# in `onnxruntime.quantization`, not a module, so Python answers "No module named". And that function
# is static quantization: it needs a `calibration_data_reader` that feeds representative inputs, so
# that it can fix the activations' scales ahead of time; the article gives none, and called
# without one it stops with an error that asks for it. The call that
# needs no data is `quantize_dynamic`, which stores int8 weights and quantizes activations at run
# time: with it the exported model above runs with ONNX Runtime, its file is a little over a
# quarter of the fp32 one, and its held-out accuracy stays within a few tokens of fp32.

# %%
# CLAIM A67: fails as written: the second module does not exist; quantize_static needs calibration data
from onnxruntime.quantization import quantize_static  # noqa: E402

cli = {}
for module in ("onnxruntime.quantization.preprocess", "onnxruntime.quantization.quantize_static"):
    run = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True)
    cli[module] = (run.returncode, (run.stderr.strip().splitlines() or [""])[-1])
    print(f"python -m {module} --help: exit {cli[module][0]} {cli[module][1][:60]}")
try:  # static quantization without calibration data
    quantize_static(onnx_path, os.path.join(onnx_dir, "static.onnx"))
    static_error = ""
except Exception as e:  # whatever it raises, its message is the evidence
    static_error = f"{type(e).__name__}: {e}"
print(f"quantize_static without calibration data: {static_error}")
size_ratio = onnx_int8.stat().st_size / onnx_path.stat().st_size
print(f"quantize_dynamic: file {size_ratio:.2f} of fp32")
assert cli["onnxruntime.quantization.preprocess"][0] == 0
assert cli["onnxruntime.quantization.quantize_static"][0] != 0
assert "No module named" in cli["onnxruntime.quantization.quantize_static"][1]
assert "calibration_data_reader" in static_error  # it needs calibration data
assert size_ratio < 0.5
assert abs(live_acc["ONNX Runtime INT8"] - live_acc["fp32"]) < 0.01

# %% [markdown]
# (claim-a18)=
# ### Claim A18: fused QKV, then mixed precision, then INT8 each make inference faster at a small accuracy cost
#
# **Holds only when INT8 runs on fused kernels, and the accuracy cost is nil here.** On this CPU,
# with chapter 07's model: fusing Q, K and V is the same function and about the same speed (the
# article's reason, fewer kernel launches, is a GPU reason); bf16 autocast is the large step; eager
# torchao INT8 is *slower* than fp32 for a 128-wide model, and becomes faster only compiled or in
# ONNX Runtime, and even there only about as fast as bf16 autocast. No step moves the held-out
# accuracy by more than a few of the masked tokens: the "small accuracy cost" holds, as a cost of
# about zero. On BERT-base-sized layers INT8 does beat bf16 (next claim): the chain's last step
# pays off only at a width where the int8 matmuls outweigh quantizing the activations.

# %%
# CLAIM A18: holds only when INT8 runs on fused kernels (compiled or ONNX Runtime); accuracy barely moves
t = chain["median_s"]
steps = [
    "three projections, fp32",
    "fused QKV, fp32",
    "fused QKV, bf16 autocast",
    "INT8 torchao, eager",
    "INT8 torchao, torch.compile",
    "ONNX Runtime INT8 (quantize_dynamic)",
]
for a, b in zip(steps, steps[1:]):
    print(f"{a:27s} → {b:38s} speed × {t[a] / t[b]:.2f}")
delta = {k: abs(acc - ref_acc) for k, acc in chain["accuracy"].items()}
print(f"largest recorded accuracy change: {max(delta.values()):.4f}")
assert t["fused QKV, fp32"] / t["fused QKV, bf16 autocast"] > 1.3  # bf16: the large step
assert t["INT8 torchao, eager"] > t["fused QKV, bf16 autocast"]  # eager INT8 loses to bf16
assert t["INT8 torchao, eager"] > 0.9 * t["fused QKV, fp32"]  # and does not beat fp32 here
assert chain["accuracy"]["three projections, fp32"] == ref_acc  # fusing: the same function
assert max(delta.values()) < 0.01
assert all(abs(a - live_acc["fp32"]) < 0.01 for a in live_acc.values())  # live, this machine

# %% [markdown]
# (claim-a64)=
# ### Claim A64: BERT-base at length 32 takes 30 s a batch on a V100, and INT8 is 3.5× faster than FP16
#
# **Fails by orders of magnitude, and the 3.5× is not reproduced.** A BERT-base-sized encoder runs
# a batch of 8 sequences of 32 tokens in about a second on *one thread* of this shared CPU, let alone
# a V100; 30 s would take an enormous batch or a broken setup. (The article's own 12 s → 3.2 s is
# 3.75×, not 3.5×.) The 16-bit comparison here has to be bf16: this CPU has no fp16 matmul
# instructions, so fp16 autocast runs through conversions and is several times *slower* than fp32,
# while bf16 has a fast path (`avx512_bf16`; AMX on recent Xeons). Against bf16, INT8 is faster at
# BERT-base width (unlike on the 128-wide chapter-07 model), most of all compiled and at short
# lengths; at 512 the attention itself, which dynamic quantization leaves in float, grows as L² and
# takes a larger share. Nowhere does it come near 3.5× over the 16-bit path.

# %%
# CLAIM A64: fails by orders of magnitude: BERT-base, batch 8 × 32 takes about a second on one CPU thread
r32, r512 = base["rows"]["32"], base["rows"]["512"]
print(
    f"batch 8 × 32, fp32, 1 thread: {r32['median_s']['fp32']:.2f} s (the article: 30 s on a V100)"
)
speedup8 = {}
for L, r in base["rows"].items():
    best8 = min(v for k, v in r["median_s"].items() if k.startswith("INT8"))
    speedup8[L] = r["median_s"]["bf16 autocast"] / best8
    print(f"L = {L:>3s}: fastest INT8 is {speedup8[L]:.2f}× as fast as bf16 autocast")
fp16_ratio = r32["median_s"]["fp16 autocast"] / r32["median_s"]["fp32"]
print(f"L = 32: fp16 autocast takes {fp16_ratio:.1f}× the time of fp32")
assert r32["median_s"]["fp32"] < 3.0  # 30 s / 10: an order of magnitude, with margin
assert max(speedup8.values()) < 3.0  # nowhere near 3.5× over the 16-bit path
assert fp16_ratio > 1.5  # no fp16 fast path on this CPU; bf16 has one

# %% [markdown]
# ### Sharing layers (ALBERT) and distillation
#
# ALBERT shrinks BERT by using **one** set of encoder-layer weights for every layer. The compute per
# token stays the same (the layer still runs n_layers times); only the parameters shrink. On chapter
# 07's model (`tfx.compress.share_layers`):

# %%
# NBVAL_CHECK_OUTPUT
tfx.set_seed(0)
plain = BertForMaskedLM(model07.cfg)
shared = compress.share_layers(BertForMaskedLM(model07.cfg))
n_plain, n_shared = tfx.flops.n_params(plain), tfx.flops.n_params(shared)
n_layer = tfx.flops.n_params(plain.bert.layers[0])
print(f"one encoder layer: {n_layer:,} parameters")
print(f"unshared model {n_plain:,}; shared {n_shared:,} ({n_shared / n_plain:.2f})")
assert n_plain - n_shared == (model07.cfg.n_layers - 1) * n_layer

# %% [markdown]
# The embedding table (3414 × 128) is much of this small model, so sharing saves less here than at
# BERT-base size, where the twelve layers hold most of the parameters. Does the shared model learn
# as well? `bench/int8.py` repeated chapter 07's training run, same seed, same batches and the same
# number of steps, with the layers shared:

# %%
sh = int8["sharing"]
print(f"{sh['steps']} steps each; held-out masked-token accuracy at each evaluation:")
for s, a, b in zip(
    sh["accuracy_curve"]["steps"], sh["accuracy_curve"]["unshared"], sh["accuracy_curve"]["shared"]
):
    print(f"  step {s:4d}: unshared {a:.4f}  shared {b:.4f}")
print(f"parameters: unshared {sh['params']['unshared']:,}, shared {sh['params']['shared']:,}")

# %% [markdown]
# With the same steps, the shared model ends within a few held-out tokens of the unshared one, at
# about half the parameters. Read that with this run's limits in mind: both models are small and
# far from converged (about one masked token in six right), so neither is short of capacity yet;
# at BERT-base size, where the layers hold most of the parameters, ALBERT's authors found that
# sharing everything does cost accuracy, and they spent the savings on wider layers.
#
# **Distillation** would train a smaller student (fewer or narrower layers) to match the trained
# model's output distribution: at the masked positions, the KL divergence between the teacher's and
# the student's softmax at a temperature above 1, usually mixed with the ordinary masked-LM loss. It
# needs the teacher (chapter 07's model, which we have), a student configuration, and a training run
# of its own, as long as chapter 07's, with one teacher forward pass per step on top. That did not
# fit this chapter's budget, so no distillation number is claimed here.

# %% [markdown]
# ## On a GPU
#
# `bench/gpu.py` runs every GPU measurement of this chapter in one call of a few minutes: matmul
# throughput in fp32, TF32, bf16 and fp16; `F.scaled_dot_product_attention` with each backend
# forced (flash, memory-efficient, math); a BERT-base encoder's inference in fp32, TF32 and
# bf16/fp16 autocast, and its bf16 training step eager and under `torch.compile`, with model FLOP
# utilisation against the datasheet peak. It depends on torch and the standard library only, since
# a GPU machine's versions may differ from this book's pins.

# %%
gpu = latest("gpu")
if not torch.cuda.is_available():
    print("GPU cells skipped: no CUDA device on this machine.")
if gpu is None:
    print("No GPU results are recorded yet: run `python bench/gpu.py` on a CUDA machine.")
else:
    print(f"latest GPU results: {gpu['device_name']}, {gpu['date']}, torch {gpu['torch']}")
    for section in ("matmul", "sdpa", "bert"):
        for name, r in gpu[section]["rows"].items():
            print(f"  {section}: {name}: {r.get('pct_of_peak') or r.get('error', '')}")

# %% [markdown]
# ## Scaling out: DDP on two processes
#
# `torch.nn.parallel.DistributedDataParallel` runs one copy of the model per process, gives each a
# shard of the batch, and averages the gradients across processes (an all-reduce, here over the
# `gloo` backend on the CPU) during the backward pass. The average is the full batch's gradient
# only if each rank's loss is scaled right. A masked-LM loss is a mean over *masked tokens*, and the
# shards hold different numbers of them, so each rank must divide its summed loss by the **global**
# count (and multiply by the world size, which DDP's average divides back out). `bench/ddp.py`
# checks both normalisations against the single-process gradient, with dropout 0 so the forward
# passes agree. Rank 0 prints. The chapter runs the tiny version live with `torchrun`:

# %%
# NBVAL_IGNORE_OUTPUT
proc = subprocess.run(
    [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
     str(RESULTS.parent / "ddp.py"), "--quick"],
    capture_output=True, text=True, timeout=300,
)  # fmt: skip
print(proc.stdout)
assert proc.returncode == 0, proc.stderr[-2000:]

# %% [markdown]
# And the recorded run at chapter 07's model shape (4 layers, d = 128, batch 16 × 64, a fresh
# seeded model: the check is about gradients, not about what the model has learnt):

# %%
ddp = latest("ddp")
print(
    f"{ddp['info']['machine']}, {ddp['info']['date']}, load {ddp['info']['load_average_1_5_15min']}"
)
print(f"masked tokens per rank {ddp['masked_per_rank']}, largest gradient {ddp['max_grad']:.3e}")
for norm, g in ddp["max_gap"].items():
    print(f"  loss / {norm}: largest gap to the full-batch gradient {g:.1e}")
print(
    f"step time: DDP {ddp['ddp_step_s'] / ddp['single_process_step_s']:.2f}× one process on the full batch"
)
assert ddp["max_gap"]["global count"] < 1e-5 * ddp["max_grad"]
assert ddp["max_gap"]["per-rank mean"] > 1e-2 * ddp["max_grad"]
n_base = sum(tfx.flops.param_counts(tfx.bert.BertConfig.base()).values())
# fp32 parameters, gradients and Adam's two moments: 16 bytes per parameter on every DDP rank
print(f"BERT-base: {n_base / 1e6:.0f} M parameters, {16 * n_base / 1e9:.1f} GB per rank with Adam")

# %% [markdown]
# DDP keeps a full copy of the parameters, gradients and optimizer state on every rank; it scales
# the batch, not the model. When those copies no longer fit, **FSDP** (fully sharded data
# parallel) shards them across ranks and gathers each layer's parameters just before it runs, at
# the price of more communication. At BERT-base size (the count above, under 2 GB per rank with
# Adam's state in fp32) DDP fits easily; sharding pays once those copies approach a device's
# memory, which for 16 bytes a parameter means models of billions of parameters.
#
# ## Summary
#
# - Measure ratios in one run, name the machine, record the load, and assert only margins that
#   noise cannot flip: memory counts, graph counts, large ratios.
# - Chunked attention computes exactly full attention (N22) in memory linear in L (N8); PyTorch's
#   fused `scaled_dot_product_attention` goes further. Linear attention is linear in time too, but
#   it is a different function (N29). Local attention is a mask.
# - numpy float16 halves storage and slows arithmetic (N24). On this CPU bf16 autocast is the fast
#   16-bit path; `torch.cuda.amp.autocast` does nothing without CUDA (A66), and a bare cast to
#   16 bits is not mixed precision (N9). A fused QKV projection equals three (A65).
# - `torch.compile` recompiles a bounded number of times (A14); padding trades graphs for wasted
#   work. DDP's averaged gradient equals the full batch's only with the loss normalised by the
#   global token count.
# - INT8 dynamic quantization (torchao) leaves chapter 07's held-out accuracy where it was; its
#   speed depends on the width and on fused kernels: slower than fp32 in eager mode on the small
#   model, faster compiled and on BERT-base-sized layers. The article's chain (A18) holds only in
#   that sense, its V100 times are off by orders of magnitude (A64), and its ONNX Runtime commands
#   do not run as written (A67); `quantize_dynamic` in ONNX Runtime does. Sharing layers (ALBERT)
#   cuts parameters, not compute. No GPU results are recorded yet.
#
# ## Exercises
#
# 1. **Block size.** Measure `chunked_attention`'s peak memory at L = 1024 for block sizes 32, 128
#    and 512. Predict the ratio between the largest and the smallest first.
# 2. **Where does linear attention lose?** At what length L does linear attention's FLOP count
#    $4 L d_k d_v$ fall below softmax attention's $4 L^2 d_k$ for $d_k = d_v = 64$?

# %% tags=["hide-cell"]
# 1. two (block, L) slabs: the peak grows about linearly with the block size
tfx.set_seed(0)
q, k, v = (torch.randn(1, 1, 1024, 64) for _ in range(3))  # (B, H, L, d_k)
peaks = {bs: peak_memory(chunked_attention, q, k, v, block_size=bs)[1] for bs in (32, 128, 512)}
print({bs: f"{p / 2**20:.2f} MiB" for bs, p in peaks.items()})
assert 6 < peaks[512] / peaks[32] < 16

# %% tags=["hide-cell"]
# 2. 4 L d² < 4 L² d  ⇔  L > d: from L = 65 on, for d = 64
d_ex = 64
crossover = next(n for n in range(1, 1000) if 4 * n * d_ex * d_ex < 4 * n * n * d_ex)
print(crossover)
assert crossover == 65
