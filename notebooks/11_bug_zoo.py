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
# # 11 · The bug zoo
#
# A Transformer with a bug rarely crashes: the shapes line up, the loss goes down a little, and the
# model is quietly worse than it should be, or wrong in one case out of a thousand. The first source
# article promises a table of frequent failures and how to locate them, and leaves it empty; this
# chapter fills it. The question: **when a Transformer is wrong, what does a person actually see,
# and which test says exactly what broke?**
#
# Each section injects one bug into a working model, shows the symptom and runs the diagnostic (from
# `tfx.inspect.diagnose`) that pinpoints it; the closing table is also the book's Troubleshooting
# page.

# %%
import tfx  # first: importing tfx quiets torchao's import-time log lines (tfx/__init__.py)

# isort: split
import importlib.util
import warnings

import numpy as np
import torch
import transformers
from IPython.display import Markdown

from tfx.book import book_figures, bug_zoo_widget, show_source
from tfx.core import below
from tfx.inspect import diagnose, dtype_census, grad_norms
from tfx.learn import (
    evaluate,
    fill_mask,
    load_book_model,
    load_mlm_data,
    lr_at,
    mask_tokens,
    recipe,
)
from tfx.model import ArticleEncoderLayer, BertConfig
from tfx.zoo import BUGS, HEALTHY, bugs, bugzoo, healthy, pair

transformers.logging.set_verbosity_error()
book_figures()  # figures as the site shows them: sharp, and checked for text too small there
tfx.banner()

# %% [markdown]
# ## How a diagnostic earns its name
#
# "The loss looks wrong" has a hundred causes. A useful check names one, and passes two tests: it
# **fires** on a model with the bug and stays **quiet** on healthy models, even ones it has never
# seen. A check that fires on healthy models trains you to ignore it; one that never fires is
# decoration.
#
# The bugs live in `tfx.zoo.bugs`, each beside its healthy twin, the faulty line marked `# BUG`.
# `tfx.zoo.bugzoo.demo(bug_id)` injects one into a small working model and runs its diagnostic,
# whose `Finding` says whether it fired and what it found. The catalogue `tfx.zoo.bugzoo.BUGS` holds
# seventeen:

# %%
# NBVAL_CHECK_OUTPUT
for bug in BUGS.values():
    print(f"{bug.id:<22} {bug.title}")
print(f"\n{len(BUGS)} bugs; each diagnostic is one call:", BUGS["view-not-transpose"].confirm)

# %% [markdown]
# The book's own healthy model is the easy test of quiet: the diagnostics were written against it.
# The hard test is what practitioners do every day and the book never does. `tfx.zoo.healthy`
# holds six such set-ups, each on a tiny model: BitFit (only the biases train), LoRA (the body
# frozen, low-rank adapters on the query and value projections), Hugging Face Trainer's default
# schedule (5e-5, no warm-up, linear decay), torch's own label smoothing, a causal attention layer,
# and autocast to float16 with a GradScaler. Every diagnostic that applies runs on each. All
# fourteen stay quiet, and each finding says why:

# %%
# NBVAL_CHECK_OUTPUT
# magnitudes: ε/V = 0.1/21,128 on <pad> is arithmetic on the loss's target, not a measurement
found = {setup: healthy.check(setup) for setup in HEALTHY}
for setup, findings in found.items():
    print(f"{HEALTHY[setup].title}")
    for f in findings:
        print(f"  {f}")
checks = {f.check for fs in found.values() for f in fs}
print(f"\n{len(checks)} diagnostics run, {sum(f.fired for fs in found.values() for f in fs)} fired")
assert not any(f.fired for fs in found.values() for f in fs)
assert checks == {b.confirm.split("(")[0].split(".")[-1] for b in BUGS.values()}

# %% [markdown]
# Three of them fired on these set-ups before they were narrowed, and the narrowing is in each
# finding above: `frozen_parameters` fires only when a block's LayerNorms are its *only* frozen
# tensors (BitFit and LoRA freeze weights too); `warmup_check` fires only when the first step is at
# least 1% of the typical weight (Adam's first steps move every weight by about the rate; the
# Trainer's 5e-5 is 0.25% of BERT's 0.02-sized weights); `loss_support` fires only when the loss
# asks for $10^{-3}$ or more on `<pad>` (torch's smoothing at 21,128 tokens asks $5 \cdot 10^{-6}$).
# `permutation_test` recognises a causal layer and tests it on the rows the symmetry still binds.
# What each diagnostic still cannot tell apart is a column of the closing table.

# %% [markdown]
# ## The attention kernel: five ways to break ten lines
#
# Five of the commonest bugs live in attention's ten lines (chapter 03).
# `diagnose.attention_kernel(fn)` finds them by *differential diagnosis*: it compares your function
# on random float64 $q, k, v$ with $\mathrm{softmax}(q k^{\mathsf T}/\sqrt{d_k})\,v$ and, if they
# differ, with each known mistake (no scale, softmax over the queries, a mask ignored, off by one or
# read backwards), naming the one that matches to a millionth. A fully masked row must stay finite.
# The healthy kernel:

# %%
show_source(bugs.attention)

# %% [markdown]
# (bug-unscaled-scores)=
# ### Scores not divided by $\sqrt{d_k}$
#
# A dot product of $d_k$ terms has $d_k$ times the variance of one (chapter 03). How peaked the
# unscaled softmax is depends on the size of $q$ and $k$: at BERT's initialisation (weights
# $\mathcal N(0, 0.02^2)$ on unit-variance inputs) the rows are peaked but far from one-hot; once
# training grows $q$ and $k$ to unit size they are nearly one-hot, and the softmax's gradient,
# $\mathrm{diag}(p) - pp^{\mathsf T}$, nearly vanishes. The symptom: the largest weight of each
# row, for one head at $d_k = 64$ and $L = 128$, at both sizes.

# %%
# NBVAL_CHECK_OUTPUT
# Figure 11.1: The bug: attention weights of one head at BERT's initialisation, d_k = 64, L = 128,
#   with the scores left unscaled, query rows against key columns on a scale from 0 to 1; each row
#   shows a few bright keys.
# Figure 11.2: The healthy twin: the same queries and keys with the scores divided by 8, the square
#   root of d_k; every row spreads its weight so thinly that the map is uniformly dark.
show_source(bugs.attention_unscaled)
bad, good = pair("unscaled-scores")
assert bad.finding.fired and "not divided by √d_k" in bad.finding.detail
assert not good.finding.fired

# %% [markdown]
# (bug-softmax-wrong-dim)=
# ### Softmax over the wrong dimension
#
# The scores are $(\ldots, L_q, L_k)$, a row per query. `softmax(dim=-2)` normalises each *column*
# instead, so a query's row sums to anything. Shapes are unchanged, the loss is finite, and the
# model even learns something. The cheapest symptom: the row sums of one attention map.

# %%
# NBVAL_CHECK_OUTPUT
show_source(bugs.attention_softmax_queries)
bad, good = pair("softmax-wrong-dim")
assert bad.finding.fired and "query dimension" in bad.finding.detail
assert not good.finding.fired

# %% [markdown]
# (bug-inf-mask-nan)=
# ### A $-\infty$ mask on a fully padded row
#
# A row whose keys are *all* masked (pure padding, or a left-padded position under a causal mask)
# gives $\mathrm{softmax}(-\infty, \ldots, -\infty) = 0/0 = $ nan. A loss that leaves the pad
# positions out, as it should, stays finite at the first step, which makes the bug easy to miss:
# its backward pass still runs through the nan rows, every gradient is nan, and after one optimiser
# step so is every weight and the next loss. `first_nonfinite(model, *inputs)` hooks every
# submodule and names the first whose output is not finite while its inputs were. tfx masks with
# `torch.finfo(dtype).min` and zeroes rows with no key.

# %%
# NBVAL_CHECK_OUTPUT
show_source(bugs.attention_inf_mask)
bad, good = pair("inf-mask-nan")
assert bad.finding.fired and "attn" in bad.finding.detail and not good.finding.fired
assert "step 1: loss finite; parameter tensors with a nan gradient: 14 of 14" in bad.text
assert "loss nan" in bad.text and "nan gradient: 0 of 14" in good.text

# %% [markdown]
# (bug-fp16-mask-overflow)=
# ### A $-10^9$ mask in float16
#
# The usual cure, $-10^9$, does not exist in float16 (largest finite value 65,504):
# `masked_fill(-1e9)` on a half tensor raises, and an additive $-10^9$ mask cast from float32
# *silently* becomes $-\infty$, bringing the nan back once someone switches on half precision.
# `forward_error` names the module that raised; `first_nonfinite` finds the silent case. The fix:
# `torch.finfo(scores.dtype).min`.

# %%
# NBVAL_CHECK_OUTPUT
print(
    f"float16: largest finite {torch.finfo(torch.float16).max:,.0f}; -1e9 as float16 is "
    f"{torch.tensor(-1e9).half().item()}"
)
bad, good = pair("fp16-mask-overflow")
assert bad.finding.fired and not good.finding.fired

# %% [markdown]
# (bug-causal-off-by-one)=
# ### A causal mask off by one
#
# `tril(diagonal=1)` instead of `tril()` lets position $i$ see $i + 1$, the token it predicts, and
# the loss becomes *too good*: on uniformly random tokens no model can beat $\ln 16 \approx 2.77$
# nats, and the leaky one goes far below. `future_leak(model, ids)` needs no training: it changes
# one token at a time and reports earlier outputs that move.

# %%
# NBVAL_CHECK_OUTPUT
show_source(bugs.causal_mask_off_by_one)
bad, good = pair("causal-off-by-one")
assert bad.finding.fired and not good.finding.fired

# %% [markdown]
# ## Heads: `view`, `transpose` and memory
#
# Splitting into heads and merging them back are pure reshapes, where shapes stop protecting you. A
# tensor is memory plus a *stride* per dimension: `view` reads the same memory with new strides, so
# it needs it in the new shape's order; `transpose` swaps two strides and moves nothing.
#
# (bug-view-not-transpose)=
# ### `view` where `transpose` was needed
#
# `t.view(B, L, H * d_k)` on the heads' output $(B, H, L, d_k)$ runs with the right shape but reads
# memory head by head: output row 0 holds *several positions* of head 0. The diagnostic needs no
# reference, only a symmetry: without positions, self-attention is permutation-equivariant (permuted
# tokens permute the output rows alike); a layer that mixes positions is not.

# %%
# NBVAL_CHECK_OUTPUT
show_source(bugs.ViewHeadsAttention)
bad, good = pair("view-not-transpose")
assert bad.finding.fired and not good.finding.fired

# %% [markdown]
# (bug-view-not-contiguous)=
# ### `view` without `.contiguous()`
#
# Transposing back to $(B, L, H, d_k)$ first leaves the memory in the old order, so `view` raises a
# `RuntimeError` about size and stride. `.contiguous()` copies it into order first; `.reshape`
# copies only when it must (tfx uses `reshape`).

# %%
# NBVAL_CHECK_OUTPUT
t = torch.arange(2 * 3 * 4).view(1, 2, 3, 4)  # (B, H, L, d_k) = (1, 2, 3, 4)
for name, u in (("t", t), ("t.transpose(1, 2)", t.transpose(1, 2))):
    print(f"{name:<18} shape {tuple(u.shape)} stride {u.stride()} contiguous {u.is_contiguous()}")
bad, good = pair("view-not-contiguous")
assert bad.finding.fired and "view size is not compatible" in bad.finding.detail
assert not good.finding.fired

# %% [markdown]
# (claim-a50)=
# ### Claim A50: `transpose(1, 2).contiguous().view(...)` is the right way to merge the heads
#
# **Holds, and both steps are needed.** Without `.contiguous()` the `view` raises; without the
# `transpose` it scrambles positions; with both, the merge matches `nn.MultiheadAttention` given the
# same weights.

# %%
# CLAIM A50: holds: with both steps the merge matches nn.MultiheadAttention; without contiguous view raises, without transpose it silently scrambles positions
tfx.set_seed(0)
ref = torch.nn.MultiheadAttention(32, 4, batch_first=True)
x_m = torch.randn(2, 6, 32)  # (B, L, d)
with torch.no_grad():
    expected = ref(x_m, x_m, x_m)[0]  # (B, L, d)
    merged = bugs.ContiguousMergeAttention.from_torch(ref)(x_m)[0]  # (B, L, d)
    scrambled = bugs.ViewHeadsAttention.from_torch(ref)(x_m)[0]  # (B, L, d)
raised = diagnose.forward_error(bugs.ViewMergeAttention.from_torch(ref), x_m)
err_ok, err_bad = (merged - expected).abs().max().item(), (scrambled - expected).abs().max().item()
bad_text = "> 0.01" if err_bad > 0.01 else below(err_bad, 0.01)
print(f"max |difference| from nn.MultiheadAttention: {below(err_ok, 1e-5)}; view alone {bad_text}")
print(f"transpose + view: {raised}")
assert err_ok < 1e-5 and err_bad > 0.01 and raised.fired

# %% [markdown]
# (bug-missing-positions)=
# ## Positions missing
#
# Without positions, self-attention sees a *set* of tokens (chapter 02): the model trains on a bag
# of characters and answers the same in any order. `position_test` swaps two tokens and checks that
# the other rows notice. Without its position embeddings, the book model predicts the same for the
# running example and its reversal:

# %%
# NBVAL_CHECK_OUTPUT
show_source(bugs.EmbeddingsWithoutPositions)
book, book_vocab = load_book_model()
sentence, reverse = "我喜欢吃[MASK]果。", "。果[MASK]吃欢喜我"
ids_b = torch.tensor([[book_vocab["[CLS]"], *book_vocab.encode(sentence), book_vocab["[SEP]"]]])
healthy_finding = diagnose.position_test(book, ids_b)
blind = load_book_model()[0]
blind.bert = bugs.bert_without_positions(blind.bert)
blind_finding = diagnose.position_test(blind, ids_b)
for name, m in (("book model", book), ("without positions", blind)):
    tops = [
        " ".join(t for t, _ in fill_mask(m, book_vocab.itos, s, k=3)) for s in (sentence, reverse)
    ]
    print(f"{name:<18} {sentence}: {tops[0]}   {reverse}: {tops[1]}")
print(healthy_finding, blind_finding, sep="\n")
bad, good = pair("missing-positions")
assert blind_finding.fired and not healthy_finding.fired
assert bad.finding.fired and not good.finding.fired

# %% [markdown]
# ## Gradients that never arrive
#
# Four bugs stop the gradient on its way, and only one of them raises an error.
#
# (bug-grad-cut)=
# ### A cut gradient: `requires_grad=False`, `no_grad`, `detach`, a non-leaf tensor
#
# Each leaves `.grad` as `None`, silently: a frozen parameter, forgotten; a module run under
# `torch.no_grad()`; a `.detach()` added to silence a warning; `.grad` read on a non-leaf such as
# `x = leaf.float()` when the leaf is not float32 already (of a float32 leaf, `.float()` returns
# the leaf itself; {ref}`A53 <claim-a53>`). `missing_grads` runs the loss once, watching the graph,
# and names which of the four cut each tensor. It fires on the three silent cuts and only lists
# the frozen parameters: a freeze forgotten and a freeze on purpose (BitFit, LoRA) look the same.

# %%
# NBVAL_CHECK_OUTPUT
show_source(bugs.GradCutNet)
bad, good = pair("grad-cut")
for cause in ("frozen", "no_grad", "detach", "non-leaf"):
    assert cause in bad.finding.detail
assert not good.finding.fired

# %% [markdown]
# The gradient-norm table (chapter 06) shows it as a reader first meets it: three branches have no
# gradient at all, not a small one.

# %%
tfx.set_seed(0)
cut_net, x_cut = bugs.GradCutNet(), torch.randn(4, 8)
cut_net(x_cut).pow(2).mean().backward()
print(grad_norms(cut_net))
assert [r.norm is None for r in grad_norms(cut_net)] == [True] * 6 + [False] * 2

# %% [markdown]
# (bug-frozen-layernorm)=
# ### Only the LayerNorms frozen while fine-tuning
#
# A freeze *by name* (`"norm" in name`, or the weight-decay list `["bias", "LayerNorm.weight"]`
# reused as a freeze list) catches every LayerNorm while the layers around them train. LayerNorm
# keeps no statistics: it recomputes mean and variance for every token, so only $\gamma$ and
# $\beta$ stop. The harm is a recipe other than the one written, not a broken model (chapter 10
# measured LayerNorm's trainability within noise, {ref}`A10 <claim-a10>`). Freezing whole blocks,
# BitFit and LoRA freeze other tensors of the block too and stay quiet; the diagnostic fires when a
# block's norms are its only frozen tensors, and on an optimizer missing a trainable tensor.

# %%
# NBVAL_CHECK_OUTPUT
show_source(bugs.freeze_norms)
bad, good = pair("frozen-layernorm")
assert bad.finding.fired and not good.finding.fired
assert "LayerNorm 0 of 12, the others 22 of 22" in bad.text

# %% [markdown]
# (bug-dead-layer)=
# ### A dead layer, and the printout that hides it
#
# Push an FFN's first bias far below zero and its ReLU or GELU is off for every input: the layer's
# gradient is exactly zero. The numpy article's max/min printout ({ref}`N28 <claim-n28>`) already
# shows `max=0.0000` for 16 of 74 tensors of a fresh, healthy Hugging Face BERT (query and key
# projections, small at initialisation); a dead layer adds 3: 19 alarms, one real. `dead_layers`
# compares each module's gradient with the median module's.

# %%
# NBVAL_CHECK_OUTPUT
bad, good = pair("dead-layer")
assert "intermediate" in bad.finding.detail and bad.finding.fired and not good.finding.fired

# %% [markdown]
# (bug-fp16-no-loss-scaling)=
# ### float16 without loss scaling
#
# float16 has nothing between 0 and about $6 \cdot 10^{-8}$. Under `torch.autocast` to float16 the
# weights stay float32, but the backward pass of each matmul runs in float16: gradients late in
# training or far from the loss are often that small, *underflow* to zero there, and the float32
# weights receive exact zeros and stop moving, silently. Loss scaling multiplies the loss by a
# large factor before the backward pass and divides the gradients by it afterwards, in float32
# (`torch.amp.GradScaler`, below on the same model and step). bfloat16, with float32's range, needs
# none of it. `grad_health` fires when nine in ten weight-gradient entries are exactly zero,
# whatever their dtype; given the scaler, it leaves the scaler's skipped steps to the scaler:

# %%
# NBVAL_CHECK_OUTPUT
# magnitudes: float16's smallest steps are constants of the format, not measurements
print(
    f"float16's smallest positive value: {torch.finfo(torch.float16).smallest_normal:.1e} "
    f"(normal), {2.0**-24:.1e} (subnormal)"
)
show_source(diagnose.grad_health)
bad, good = pair("fp16-no-loss-scaling")
assert bad.finding.fired and not good.finding.fired
assert "exactly 0: all; tensors the step moved: 0 of 4" in bad.text
assert "exactly 0: under 10%; tensors the step moved: 4 of 4" in good.text

# %% [markdown]
# ## Losses that score the wrong thing
#
# `loss_support(loss_fn, logits, targets, pad_id)` reads from the gradient which positions a loss
# scores and which way it pushes the pad class. Two bugs show there.
#
# (bug-pad-in-loss)=
# ### Padding counted in the loss
#
# Without `ignore_index`, cross-entropy scores the `[PAD]` targets too: the model learns to predict
# padding (easy, and rewarded), and a sentence's loss depends on how much its batch was padded.

# %%
# NBVAL_CHECK_OUTPUT
show_source(bugs.loss_counting_pad)
bad, good = pair("pad-in-loss")
assert bad.finding.fired and not good.finding.fired

# %% [markdown]
# (bug-smoothing-on-pad)=
# ### Label smoothing that puts mass on `<pad>`
#
# Label smoothing (chapter 09) spreads $\varepsilon$ of the target over the other classes; over
# *all* $V$ of them that includes `<pad>`, and a fitted model gives `<pad>` about $\varepsilon / V$
# everywhere. PyTorch's `F.cross_entropy(..., label_smoothing=ε)` does the same, `ignore_index` or
# not. Whether that matters is a question of size: at the numpy article's eight classes a fitted
# model predicts `<pad>` once in 80 tokens; at BERT-base-chinese's 21,128, once in 200,000.
# `loss_support` reads the share the loss's target gives `<pad>` and fires from $10^{-3}$ up. To
# keep `<pad>` out entirely, write the target distribution yourself, with a zero in the pad column.

# %%
# NBVAL_CHECK_OUTPUT
show_source(bugs.smoothing_onto_pad)
bad, good = pair("smoothing-on-pad")
logits_s, targets_s = torch.randn(1, 5, 8, dtype=torch.float64), torch.tensor([[3, 4, 5, 2, 0]])


def torch_smoothing(lg, t):
    return torch.nn.functional.cross_entropy(
        lg.flatten(0, 1), t.flatten(), ignore_index=0, label_smoothing=0.1
    )


torch_ls = diagnose.loss_support(torch_smoothing, logits_s, targets_s, pad_id=0)
print("F.cross_entropy(ignore_index=0, label_smoothing=0.1), V = 8:", torch_ls)
assert bad.finding.fired and not good.finding.fired and torch_ls.fired

# %% [markdown]
# (claim-n26)=
# ### Claim N26: the loss handles the padded target `[3, 4, 5, 2, 0]`
#
# **Fails, twice.** The numpy article's target ends in its pad id 0, and its smoothed loss sums over
# every position and class: the pad position is scored, and every real position puts
# $\varepsilon / V$ on `<pad>`. `loss_support` names both faults.


# %%
# CLAIM N26: fails: the pad position of [3, 4, 5, 2, 0] is scored, and label smoothing puts ε/V on <pad> at every real position
def article_smoothed_loss(logits, targets, eps=0.1):  # every position, every class
    V = logits.size(-1)
    q = torch.nn.functional.one_hot(targets, V) * (1 - eps) + eps / V  # (…, V)
    return -(q * logits.log_softmax(-1)).sum()


finding_n26 = diagnose.loss_support(article_smoothed_loss, logits_s, targets_s, pad_id=0)
print(finding_n26)
assert "padded positions get gradient" in finding_n26.detail
assert "target gives <pad> 0.0125" in finding_n26.detail

# %% [markdown]
# (bug-mlm-all-positions)=
# ### The MLM loss over all positions
#
# Chapter 07's masked-LM loss scores only the ~15% of positions selected, most hidden behind
# `[MASK]`. Labels built as `ids.clone()` score every position, 85% of them visible in the input:
# the model learns to copy, and the loss falls fast. `mlm_labels` checks a batch: the share of
# tokens scored, and how many of those the input shows unchanged.

# %%
# NBVAL_CHECK_OUTPUT
show_source(bugs.mlm_batch_all_positions)
bad, good = pair("mlm-all-positions")
assert bad.finding.fired and not good.finding.fired

# %% [markdown]
# On the book model: twenty more pre-training steps on chapter 07's sentences, with BERT's labels
# and with labels everywhere, scored on the same held-out positions. One run each; the numbers move
# a little between CPUs, so the cell asserts only wide margins.

# %% tags=["widget-test-skip"]
data = load_mlm_data()
special, mask_id, V = list(book_vocab.special_ids), book_vocab["[MASK]"], len(book_vocab.itos)
assert data.vocab.itos == book_vocab.itos
g = torch.Generator().manual_seed(12345)
held = [mask_tokens(data.held_out[i : i + 64], special, mask_id, V, generator=g) for i in (0, 64)]
before = evaluate(book, held, mask_id, exclude=special)
print(
    f"held out: {len(held)} batches of {tuple(held[0][0].shape)}; the book model's [MASK] "
    f"accuracy {before['mask']['accuracy']:.3f}"
)

# %% tags=["widget-test-skip"]
after, final_loss = {}, {}
for labels_on, make in (("masked", mask_tokens), ("all", bugs.mlm_batch_all_positions)):
    tfx.set_seed(0)
    model, _ = load_book_model()
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=5e-4)
    gen = torch.Generator().manual_seed(0)
    for _ in range(20):
        ids = data.train[torch.randint(0, len(data.train), (32,), generator=gen)]  # (32, 64)
        inputs, labels = make(ids, special, mask_id, V, generator=gen)  # (32, 64) each
        loss = torch.nn.functional.cross_entropy(model(inputs).flatten(0, 1), labels.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
    final_loss[labels_on] = loss.item()
    after[labels_on] = evaluate(model.eval(), held, mask_id, exclude=special)
print(f"{'':<26}{'train loss':>11}{'[MASK] CE':>11}{'[MASK] acc':>12}{'random acc':>12}")
for name, m, train_loss in (
    ("book model", before, float("nan")),
    ("+20 steps, labels masked", after["masked"], final_loss["masked"]),
    ("+20 steps, labels all", after["all"], final_loss["all"]),
):
    print(
        f"{name:<26}{train_loss:>11.2f}{m['mask']['cross_entropy']:>11.2f}"
        f"{m['mask']['accuracy']:>12.3f}{m['random']['accuracy']:>12.3f}"
    )
assert final_loss["all"] < 0.5 * final_loss["masked"]  # the loss looks much better...
assert after["all"]["mask"]["cross_entropy"] > after["masked"]["mask"]["cross_entropy"] + 0.1
# it copies: where a random character replaced the original, worse than the healthy twin
assert after["all"]["random"]["accuracy"] < after["masked"]["random"]["accuracy"] - 0.03

# %% [markdown]
# Twenty steps with a fresh AdamW at 5e-4 shake the converged book model either way: with BERT's
# labels too, `[MASK]` cross-entropy rose and accuracy on the replaced characters fell, to 0.315.
# So the bug is read against that healthy continuation, not against the book model. With labels
# everywhere the training loss is more than four times lower, and the model got *worse* than its
# twin: held-out `[MASK]` cross-entropy 2.82 nats against 2.63, and where a random character
# replaced the original, accuracy 0.26 against 0.315. It learnt to copy what it sees. A loss that
# looks too good is a symptom.

# %% [markdown]
# (bug-no-warmup-post-ln)=
# ## No warm-up on a post-LN stack
#
# Post-LN trained from scratch at a large rate from the first step stalls or diverges, where pre-LN
# needs no ramp (chapter 06); fine-tuning a pre-trained BERT at 5e-5 without warm-up is routine
# (Hugging Face Trainer's default, quiet above). Without warm-up, the post-LN stack below (BERT's
# layout, Adam at $10^{-2}$) shows a loss curve that jumps and stalls; `warmup_check(lrs, model)`
# reads the schedule, the layout and the size of the weights before a step is spent. Each
# curve is one run whose path differs between CPUs, so the printed verdict is only whether it
# reaches a loss of 0.1.

# %%
# Figure 11.3: The bug: the training loss of a 6-layer post-LN stack trained with Adam at a learning
#   rate of 0.01 from the first step, on a log scale; the dotted line is the loss of 0.1 a healthy
#   run reaches.
# Figure 11.4: The healthy twin: the same stack and rate with a 20-step warm-up, against the same
#   dotted line at a loss of 0.1.
bad, good = pair("no-warmup-post-ln")
assert bad.finding.fired and not good.finding.fired

# %% [markdown]
# ## Perturb it
#
# Switch any bug on and off: the widget runs the same `demo` and prints the symptom and the
# diagnostic's verdict. On the site every bug is precomputed in both states.

# %%
bug_zoo_widget()
# %% [markdown]
# ## The articles' own code
#
# The first article promises that all its code runs on PyTorch 2.0 or later; the second builds a
# numpy encoder whose class, half-precision helper and loss each hide a bug above. tfx rebuilds the
# first article's layer (`ArticleEncoderLayer`, chapter 05); the cells below reproduce the numpy
# article's mechanisms in our own code.

# %% [markdown]
# (claim-a24)=
# ### Claim A24: every line of the article's code runs as written on PyTorch 2.0 or later
#
# **Fails.** Of the article's ten code blocks, three run on their own; seven need names no block
# defines (`model`, `output`, `x`, `w_q`, `input_ids`, the file `bert.onnx`: read from the article,
# not run). Given those, three do not do what the article says: the gradient check prints about
# 1e-6, not 1.23 ({ref}`A52 <claim-a52>`); `onnxruntime.quantization.quantize_static` is no module
# ({ref}`A67 <claim-a67>`); the LayerNorm line re-enables one tensor ({ref}`A49 <claim-a49>`). Two
# cannot be judged here: `torch.cuda.amp.autocast` needs the CUDA card the article wrote for (on a
# CPU it switches itself off, {ref}`A66 <claim-a66>`), and `torch.compile`'s promise is speed, which
# chapter 08 times.

# %%
tfx.set_seed(0)
article_layer = ArticleEncoderLayer(768, 12, dropout=0.1)  # §4.1 and §4.2, rebuilt (chapter 05)
x_a = torch.randn(1, 8, 768)
_, attn_a = article_layer.attention(x_a)
x_g = torch.randn(1, 8, 768, requires_grad=True)
article_layer(x_g).sum().backward()  # §4.2's gradient check
# a small BERT as Hugging Face builds it: 64 wide, 1 layer, 4 heads, FFN 128, 512 positions
hf_cfg = transformers.BertConfig(
    **BertConfig.tiny(vocab_size=2000, n_layers=1, d_ff=128, max_len=512).to_hf_kwargs()
)
hf_mlm = transformers.BertForMaskedLM(hf_cfg).eval()  # the "complete BERT" §4.3 assumes
ids_a = torch.tensor([[101, 5, 6, 7, 103, 8, 9, 102]])  # (1, 8), [MASK] at 4
h_a = hf_mlm.bert(ids_a).last_hidden_state[:, 4, :]  # (1, 64)
logits_a = hf_mlm.cls.predictions.decoder(hf_mlm.cls.predictions.transform(h_a))  # (1, 2000)
print(f"§4.1 attention weights {tuple(attn_a.shape)}; §4.3 logits {tuple(logits_a.shape)}")
print(f"§4.2 gradient check: |x.grad| = {x_g.grad.norm().item():.0e}, not 1.23")

# %%
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    with torch.cuda.amp.autocast():  # §5.3, as written
        amp_out = hf_mlm.bert(ids_a).last_hidden_state
amp_warned = any(issubclass(w.category, FutureWarning) for w in caught)
modules = ("onnxruntime.quantization.preprocess", "onnxruntime.quantization.quantize_static")
onnx_found = all(importlib.util.find_spec(m) is not None for m in modules)
print(f"§5.3 autocast without CUDA: {amp_out.dtype}, FutureWarning {amp_warned}")
print(f"§5.3 quantization modules found: {onnx_found}")

# %%
tfx.set_seed(0)
seq_a = transformers.BertForSequenceClassification(hf_cfg)
seq_a.bert.requires_grad_(False)  # the bottom frozen, then §3.4's line:
seq_a.bert.encoder.layer[-1].attention.output.LayerNorm.weight.requires_grad = True
ln_all = [n for n, _ in seq_a.bert.named_parameters() if "LayerNorm" in n]
ln_on = [n for n, p in seq_a.bert.named_parameters() if "LayerNorm" in n and p.requires_grad]
w_q, w_k, w_v = (torch.randn(64, 64, dtype=torch.float64) for _ in range(3))
x_q = torch.randn(8, 64, dtype=torch.float64)
q_f, k_f, v_f = (x_q @ torch.cat([w_q, w_k, w_v], 1)).chunk(3, dim=-1)  # (8, 64) each
fused_same = all(torch.allclose(a, x_q @ w) for a, w in ((q_f, w_q), (k_f, w_k), (v_f, w_v)))
print(f"§3.4 LayerNorm line: {len(ln_on)} of {len(ln_all)} LayerNorm tensors trainable")
print(f"§5.3 fused QKV equals the three projections: {fused_same}")

# %%
# CLAIM A24: fails: 3 of its 10 code blocks run on their own, 7 need a model, tensors or a file that no block defines (by reading), and 3 do not do what the article says (the gradient check, a module that does not exist, the LayerNorm line)
tfx.set_seed(0)  # the article's layer is in training mode: its dropout draws
# (section, what, names it needs from the reader (read from the article), does what it says:
#  True, False, or None where this machine cannot tell)
blocks = [
    ("4.1", "attention class, shapes", "", tuple(attn_a.shape) == (1, 12, 8, 8)),
    ("4.2", "encoder layer", "", tuple(article_layer(x_a).shape) == (1, 8, 768)),
    ("4.2", "gradient check", "", abs(x_g.grad.norm().item() - 1.23) < 0.5),
    ("4.3", "MLM head and loss", "model, output", tuple(logits_a.shape) == (1, 2000)),
    ("5.2", "torch.compile", "model", None),  # its promise is speed: chapter 08 times it
    ("5.2", "three debug lines", "attn_weights (inside forward)", bool(attn_a.isfinite().all())),
    ("5.3", "fused QKV", "x, w_q, w_k, w_v, w_qkv", fused_same),
    ("5.3", "autocast", "model, input_ids", None),  # written for a CUDA card (the V100)
    ("5.3", "ONNX quantization", "bert.onnx (no block writes it)", onnx_found),
    ("3.4", "LayerNorm kept trainable", "model", ln_on == ln_all),
]
verdicts = {True: "as promised", False: "NOT as promised", None: "not judged here"}
for sec, what, needs, ok in blocks:
    print(f"§{sec} {what:<26} {'needs ' + needs if needs else 'self-contained':<40} {verdicts[ok]}")
assert [b[1] for b in blocks if b[3] is False] == [
    "gradient check",
    "ONNX quantization",
    "LayerNorm kept trainable",
]
assert amp_out.dtype == torch.float32 and amp_warned  # here, without CUDA, it switches off (A66)

# %% [markdown]
# (claim-n18)=
# ### Claim N18: the numpy article's `TransformerEncoderLayer` class can be instantiated
#
# **Fails.** Its constructor's `self.d_k = d_v = d_model // n_heads` binds `self.d_k` and a *local*
# `d_v`, so the next line's `self.d_v` raises `AttributeError`. Past that, its `__call__` calls
# `layer_norm(x, gamma, beta)` where the article defines `layer_norm(x)`. The cell reproduces both
# in our own code; chapter 09 builds the layer meant.


# %%
# CLAIM N18: fails: AttributeError on self.d_v (a chained assignment makes d_v a local), and its layer_norm is called with three arguments but defined with one
class ChainedAssignment:
    def __init__(self, d_model: int, n_heads: int):
        self.d_k = d_v = d_model // n_heads  # noqa: F841  binds self.d_k and a *local* d_v
        self.width = self.d_v * n_heads  # reads an attribute that was never set


def one_argument_norm(x):  # the article's signature: gamma and beta built inside
    return (x - x.mean(-1, keepdims=True)) / (x.std(-1, keepdims=True) + 1e-6)


errors = {}
for name, build in {
    "constructor": lambda: ChainedAssignment(512, 8),
    "layer_norm(x, gamma, beta)": lambda: one_argument_norm(
        np.ones((3, 4)), np.ones(4), np.zeros(4)
    ),
}.items():
    try:
        build()
    except (AttributeError, TypeError) as e:
        errors[name] = f"{type(e).__name__}: {e}"
        print(f"{name}: {errors[name]}")
assert errors["constructor"].startswith("AttributeError") and "'d_v'" in errors["constructor"]
assert errors["layer_norm(x, gamma, beta)"].startswith("TypeError")


# %% [markdown]
# (bug-half-casts-nothing)=
# ### "Casting to half" that casts nothing
#
# The numpy article's `to_half_precision` casts only float32 arrays to float16, but its arrays come
# from `np.random.randn`, `np.zeros` and `np.ones`, which return float64: nothing is cast, and
# nothing warns. Count the dtypes after a conversion (`tfx.inspect.diagnose.dtype_census`); the fix
# casts every floating array, or builds the parameters as float32.

# %%
# NBVAL_CHECK_OUTPUT
show_source(bugs.to_half_precision)
bad, good = pair("half-casts-nothing")
assert bad.finding.fired and not good.finding.fired

# %% [markdown]
# (claim-n23)=
# ### Claim N23: `to_half_precision` converts the model's parameters
#
# **Fails.** Built as the article builds them, the parameters are all float64, and its helper
# returns them unchanged; casting every floating array takes them to a quarter of the bytes.


# %%
# CLAIM N23: fails: every array of the article's model is float64, so a cast of the float32 arrays converts none of them
params = tfx.numpy.numpy_ref.init_layer_params(
    512, 2048, np.random.default_rng(0)
)  # as the article
halves = {
    "as built": params,
    "article's cast": bugs.to_half_precision(params),
    "every float cast": {
        k: v.astype(np.float16) if np.issubdtype(v.dtype, np.floating) else v
        for k, v in params.items()
    },
}
for name, p in halves.items():
    mib = sum(v.nbytes for v in p.values()) / 2**20
    print(f"{name:<17} {dtype_census(p, expected='float16')}   {mib:.2f} MiB")
assert dtype_census(halves["article's cast"], expected="float16").fired
assert not dtype_census(halves["every float cast"], expected="float16").fired


# %% [markdown]
# ## The troubleshooting table
#
# What you see, the likely cause, and the call that confirms it. The site's Troubleshooting page is
# generated from the same catalogue, linked to each section above.

# %%
# NBVAL_CHECK_OUTPUT
Markdown(bugzoo.table())

# %% [markdown]
# ## What you can now do
#
# - Turn "the model is worse than it should be" into suspects, each tested by a check that fires on
#   the bug and stays quiet on a healthy model: differential diagnosis, a broken symmetry, a hook
#   for the first nan, the gradient's support.
# - Recognise attention's quiet failures: an unscaled or wrongly normalised softmax, a mask that
#   gives nan, overflows in float16 or leaks the future, heads merged with `view`.
# - Say which of four mechanisms cut a missing gradient, and tell a dead layer from a small healthy
#   gradient, which a max/min printout cannot.
# - Check a loss's support: no padding scored, nothing pushed onto `<pad>`, MLM labels on the
#   selected positions only.
# - Read an article's code block by block, as the A24 table does.
#
# This is the book's last chapter. The Troubleshooting page keeps its table at hand; the Claims page
# lists every claim of the two source articles with the cell that settles it.
#
# ## Exercises
#
# Tiers: *warm-up* checks what the chapter showed, *core* applies it to a new case, *build it*
# has you write the code, *open* has no single answer.
#
# 1. *(warm-up)* Run `diagnose.attention_kernel` on PyTorch's `F.scaled_dot_product_attention`.
#    Does it stay quiet? What does its boolean mask mean?
# 2. *(build it)* Write an attention kernel that divides the scores by $d_k$ instead of
#    $\sqrt{d_k}$, and one that reads its causal mask the other way round (`True` = hidden). What
#    does `attention_kernel` say about each?
# 3. *(core)* Predict first, then check. The book model is post-LN. Does `warmup_check` fire on the
#    schedule `tfx.learn.book_model.recipe` trains it with?
# 4. *(open)* Pick a bug that is not in the zoo (say, dropout left on at evaluation). Write its
#    symptom, a diagnostic, and the two tests it must pass.

# %% [markdown]
# :::{admonition} Solution to exercise 1
# :class: dropdown
# `F.scaled_dot_product_attention` reads a boolean `attn_mask` with `True` = "may be attended to",
# as tfx and `attention_kernel` do: it matches the reference with and without the causal mask, keeps
# the fully masked row finite, and the diagnostic stays quiet. In `nn.MultiheadAttention`, boolean
# masks mean the opposite (`True` = may *not* be attended to), so a mask passed from one API to the
# other is read backwards, like exercise 2's second kernel.
# :::

# %% tags=["hide-cell"]
# 1. PyTorch's attention kernel under attention_kernel
print(diagnose.attention_kernel(torch.nn.functional.scaled_dot_product_attention))
assert not diagnose.attention_kernel(torch.nn.functional.scaled_dot_product_attention).fired

# %% [markdown]
# :::{admonition} Solution to exercise 2
# :class: dropdown
# Dividing by $d_k$ shrinks every score by a further $\sqrt{d_k}$ (4 at the diagnostic's
# $d_k = 16$): a flatter softmax, nearer a plain average of the values; nothing fails. The inverted
# mask shows each position only its future and leaves the last query no key. Both run with the right
# shape; `attention_kernel` names each exactly, since it compares with the reference under each
# known mistake: a scale of $1/d_k$ without a mask, and the inverted mask on every row that has a
# key.
# :::


# %% tags=["hide-cell"]
# 2. Two more broken kernels: scores over d_k, and a mask read backwards
def divided_by_d_k(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / q.size(-1)  # (…, L, L): d_k, not √d_k
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    return scores.softmax(-1) @ v


def mask_read_backwards(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / q.size(-1) ** 0.5  # (…, L, L)
    if mask is not None:
        scores = scores.masked_fill(mask, torch.finfo(scores.dtype).min)  # True = hidden
    return scores.softmax(-1) @ v


for fn in (divided_by_d_k, mask_read_backwards):
    print(fn.__name__, "→", diagnose.attention_kernel(fn))
    assert diagnose.attention_kernel(fn).fired

# %% [markdown]
# :::{admonition} Solution to exercise 3
# :class: dropdown
# `recipe` uses BERT's linear schedule (`lr_at`): 200 warm-up steps up to a peak of
# $2 \cdot 10^{-3}$, then linear decay to 0 at step 12,000. The first step's rate, $1/200$ of the
# peak (0.5%), is far below the half of the peak from which `warmup_check` fires on a post-LN stack,
# so the check stays quiet.
# :::

# %% tags=["hide-cell"]
# 3. The book model's schedule under warmup_check
model_cfg, train_cfg = recipe(len(book_vocab))
lrs = [lr_at(step, train_cfg, model_cfg.d_model) for step in range(1, train_cfg.steps + 1)]
print(diagnose.warmup_check(lrs, book))
assert not diagnose.warmup_check(lrs, book).fired

# %% [markdown]
# :::{admonition} Solution to exercise 4
# :class: dropdown
# A sketch for dropout left on at evaluation. The symptom: the same input gives different outputs
# from call to call, and validation scores sit a little below what the model can do; nothing raises.
# The diagnostic: run the model twice on one input under `torch.no_grad()` and compare the outputs
# bit for bit. It fires on the book model (dropout 0.1) in `train()` mode and stays quiet after
# `eval()`. Reading the modules' `training` flags would also fire on a harmless model in training
# mode with dropout 0; comparing outputs measures the symptom itself.
# :::


# %% tags=["hide-cell"]
# 4. A diagnostic for dropout left on at evaluation, and its two tests
def dropout_active(model, ids):
    """True when two forward passes on the same ids differ: a random layer is still on."""
    with torch.no_grad():
        first, second = model(ids), model(ids)  # (B, L, V) each
    return not torch.equal(first, second)


tfx.set_seed(0)
was_training = book.training
book.train()  # the bug: evaluation without model.eval()
fires = dropout_active(book, ids_b)
book.eval()  # the healthy twin
quiet = not dropout_active(book, ids_b)
book.train(was_training)
print(f"book model in train mode: fired {fires}; in eval mode: fired {not quiet}")
assert fires and quiet
