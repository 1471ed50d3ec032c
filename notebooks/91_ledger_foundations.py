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
# # 91 · Ledger: RNNs, shapes and positions
#
# The first three chapters settle the source articles' claims that teach something about their
# material, each where its idea is taught: [chapter 00](00_why_not_rnn.ipynb) the RNN's chain and
# its vanishing gradient ({ref}`A19 <claim-a19>`) and position in an RNN ({ref}`A29 <claim-a29>`),
# [chapter 01](01_shapes.ipynb) the encoder's input ({ref}`A41 <claim-a41>`) and the per-head shapes
# ({ref}`A5 <claim-a5>`), [chapter 02](02_positional_encoding.ipynb) blindness to order
# ({ref}`A33 <claim-a33>`), which dimensions carry fine position ({ref}`A34 <claim-a34>`) and
# periodicity ({ref}`A2 <claim-a2>`). This appendix holds the articles' other claims on the same
# material, so that the chapters read as a course: counts and configuration numbers, figures that
# cannot be reproduced on this machine, what a paper reported, facts about other libraries' code,
# the numpy article's own construction, and one long digression (the order of the embedding sum).
# They are settled by the same rules as in the chapters: a label and a heading, the verdict and
# why, and a cell that computes the evidence and ends in `assert`s. Each section first rebuilds,
# with tfx, the state its claims use, as the chapter builds it. Nothing here downloads anything;
# the slowest cell trains four small LSTMs in a few seconds.

# %%
import tfx  # first: importing tfx quiets torchao's import-time log lines (tfx/__init__.py)

# isort: split
import inspect
import itertools
import math

import numpy as np
import torch
import torch.nn as nn
import transformers
from torch.testing import assert_close
from torch.utils.flop_counter import FlopCounterMode
from transformers.models.bloom.modeling_bloom import build_alibi_tensor
from transformers.models.llama.modeling_llama import (
    LlamaAttention,
    LlamaRotaryEmbedding,
    apply_rotary_pos_emb,
)

from tfx.book import show_source
from tfx.core import RUNNING_EXAMPLE, build_vocab, running_example_ids, show
from tfx.inspect import diagonal_spread, layer_flops, param_counts
from tfx.learn import cell_from_lstm, graph_depth, lstm_step_loop
from tfx.model import (
    BertConfig,
    BertForMaskedLM,
    BertModel,
    MultiHeadAttention,
    alibi_bias,
    alibi_slopes,
    apply_rope,
    from_huggingface,
    hf_bert_torch_settings,
    sinusoidal_encoding,
    torch_layer_from_hf_bert,
)

tfx.banner()

# %% [markdown]
# ## From chapter 00: why not an RNN?
#
# The claims below use chapter 00's first model: the running example embedded into $d = 16$
# dimensions and an LSTM with the same weights as an `nn.LSTMCell` (`tfx.learn.rnn.cell_from_lstm`), built
# in the same order from the same seed.

# %%
# NBVAL_CHECK_OUTPUT
tfx.set_seed(0)
vocab = build_vocab(RUNNING_EXAMPLE)
d = 16
embed = nn.Embedding(len(vocab), d)
cell = cell_from_lstm(nn.LSTM(d, d, batch_first=True))  # chapter 00's LSTM, one step at a time
with torch.no_grad():
    x = embed(running_example_ids(vocab))  # (1, 8, 16): the running example, embedded
show(x=x)

# %% [markdown]
# (claim-a26)=
# ### Claim A26: at which step does 果 arrive in the walk-through, and how many transformations from h₁?
#
# **Fails by counting.** The article reads 我喜欢吃苹果 one character per step and says 果 arrives at step
# 5, so that information from 我 ($h_1$) reaches it through 4 transformations. The sentence has six
# characters: 果 arrives at step 6, and $h_1 \to h_6$ takes 5 applications of the cell. The cell below
# runs the article's construction (the LSTM cell over the six characters, no `[CLS]`), counts the
# cell's calls with a hook, and checks with autograd that $h_6$ depends on $h_1$ through exactly those
# calls. The conclusion the article draws is unchanged, only shifted by one: for the token at step $t$
# the path from step 1 is $t-1$ transformations long, against 1 attention step.

# %%
# CLAIM A26: fails by counting: 我喜欢吃苹果 has six characters, so 果 arrives at step 6 and h₁ → h₆ takes 5 transformations (the path is t − 1 steps long, against 1 for attention)
sentence = list("我喜欢吃苹果")
x6 = embed(torch.tensor([[vocab[c] for c in sentence]]))  # (1, 6, 16): the embedding from above
seen = []  # the input of every call of the cell, in order
hook = cell.register_forward_hook(lambda mod, inp, out: seen.append(inp[0]))
h1, c1 = cell(x6[:, 0])  # step 1: 我
h1 = h1.detach().requires_grad_(True)  # (1, 16): a leaf, to ask what depends on it
state, calls_after_h1 = (h1, c1), 0
for t in range(1, len(sentence)):
    state = cell(x6[:, t], state)  # (1, 16), (1, 16)
    calls_after_h1 += 1
hook.remove()
step_of_guo = 1 + next(
    i for i, xi in enumerate(seen) if torch.equal(xi, x6[:, sentence.index("果")])
)
(dh1,) = torch.autograd.grad(state[0].sum(), h1)
print(f"characters: {len(sentence)}; step at which 果 arrives: {step_of_guo}")
print(
    f"cell applications from h_1 to h_{len(seen)}: {calls_after_h1}; |∂h_6/∂h_1| = {dh1.norm():.2e}"
)
print(f"step 5 reads {sentence[4]}, not 果")
assert len(seen) == 6 and step_of_guo == 6 and calls_after_h1 == 5 and dh1.norm() > 0

# %% [markdown]
# (claim-a27)=
# ### Claim A27: does an LSTM at length 512, batch 32, keep a V100's utilisation below 40%?
#
# **Not reproducible here.** There is no GPU on the machines this book runs on, and the article gives no
# source or setup for the figure (hidden size, cuDNN or not, how utilisation was read). What can be
# measured anywhere is the cause the article points to: how much work the hardware gets per dependent
# step. The cell below counts, at the article's shape (batch 32, $L = 512$) and BERT-base width
# $d = 768$, the forward FLOPs with torch's FLOP counter (on the `meta` device: shapes only, no memory)
# and the chain depth with `graph_depth`, for the LSTM step loop and for one attention layer. A GPU keeps
# busy only when each step offers it enough parallel work; the LSTM offers over a hundred times less per
# step than attention. Chapter 00's GPU timing cell measures the consequence when a GPU is present.

# %%
# CLAIM A27: not reproducible here: no GPU and no source for the 40%; the measurable cause, work per dependent step at batch 32 and L = 512, is over 100 times smaller for the LSTM than for attention
B27, L27, d27 = 32, 512, 768
with torch.device("meta"):  # FLOPs depend on shapes only
    cell27, attn27 = nn.LSTMCell(d27, d27), MultiHeadAttention(d27, n_heads=12)
    x27 = torch.randn(B27, L27, d27)  # (32, 512, 768)
    with FlopCounterMode(display=False) as fc_lstm:
        lstm_step_loop(cell27, x27)
    with FlopCounterMode(display=False) as fc_attn:
        attn27(x27)
tfx.set_seed(0)  # depth depends on L only, so measure it at a small width and batch
x_depth = torch.randn(1, L27, 8, requires_grad=True)  # (1, 512, 8)
depth_lstm = graph_depth(lstm_step_loop(nn.LSTMCell(8, 8), x_depth)[0])
depth_attn = graph_depth(MultiHeadAttention(8, n_heads=2)(x_depth)[0])
per_step = {
    "LSTM step loop": (fc_lstm.get_total_flops(), depth_lstm),
    "self-attention": (fc_attn.get_total_flops(), depth_attn),
}
for name, (flops, depth) in per_step.items():
    print(
        f"{name:<15} {flops / 1e9:7.1f} GFLOPs over a chain of {depth:>5} ops: "
        f"{flops / depth / 1e6:9.1f} MFLOPs per dependent step"
    )
ratio27 = (per_step["self-attention"][0] / depth_attn) / (
    per_step["LSTM step loop"][0] / depth_lstm
)
print(
    f"attention offers {ratio27:.0f}× more work per dependent step; CUDA here: {torch.cuda.is_available()}"
)
assert depth_lstm > 8 * L27 and ratio27 > 100

# %% [markdown]
# (claim-a30)=
# ### Claim A30: did contextual vectors depend only on the preceding words before the Transformer?
#
# **Holds only for one-way RNNs.** A left-to-right LSTM's output at a token depends only on the tokens up
# to it. But bidirectional LSTMs (ELMo, 2018, and BiLSTM taggers before it) run a second LSTM from right to
# left and concatenate the two, so every output depends on the whole sentence. The cell changes the last
# token of the running example and compares the first output of each kind of LSTM.

# %%
# CLAIM A30: holds only for one-way RNNs: a bidirectional LSTM's first output changes when the last token changes, a one-way LSTM's does not
tfx.set_seed(0)
uni, bi = nn.LSTM(d, d, batch_first=True), nn.LSTM(d, d, batch_first=True, bidirectional=True)
x_last = x.clone()  # (1, 8, 16): the embedded running example
x_last[0, -1] = torch.randn(d)  # another token at the last position ([SEP])
with torch.no_grad():
    first_uni = (uni(x_last)[0] - uni(x)[0])[0, 0].abs().max().item()
    out_bi, out_bi_changed = bi(x)[0], bi(x_last)[0]  # (1, 8, 32): forward half, then backward half
    first_fwd = (out_bi_changed - out_bi)[0, 0, :d].abs().max().item()
    first_bwd = (out_bi_changed - out_bi)[0, 0, d:].abs().max().item()
print(f"change of the first output when the last token changes: one-way LSTM {first_uni:.1e}")
print(f"bidirectional LSTM: left-to-right half {first_fwd:.1e}, right-to-left half {first_bwd:.1e}")
assert first_uni == 0 and first_fwd == 0 and first_bwd > 1e-4

# %% [markdown]
# ## From chapter 01: shapes
#
# These claims use chapter 01's models, rebuilt in the same way from the same seed: the tiny
# `BertForMaskedLM` ($d_{model} = 64$, 2 layers) and one at English BERT-base's size, both with
# random weights (shapes and counts do not need trained ones), and the running example's ids in the
# book's small vocabulary.

# %%
# NBVAL_CHECK_OUTPUT
vocab = build_vocab(RUNNING_EXAMPLE)
ids = running_example_ids(vocab)  # (1, 8)
tfx.set_seed(0)
tiny = BertForMaskedLM(BertConfig.tiny()).eval()
tfx.set_seed(0)
base = BertForMaskedLM(BertConfig.base()).eval()  # random weights: shapes need no trained ones
show(ids=ids, token_table=base.bert.embeddings.tok.weight)

# %% [markdown]
# (claim-a39)=
# ### Claim A39: BERT-base has d = 768, 512 positions and a vocabulary of 30,522; the example has L = 8; [CLS] and [SEP] have embeddings
#
# **Holds for English BERT-base.** Hugging Face's default `BertConfig` (that of `bert-base-uncased`) has
# these three numbers. The running example, though, is Chinese: its model is bert-base-chinese, with a
# vocabulary of 21,128 and the same 768 and 512. $L = 8$ holds: BERT's own tokenizer class
# (`transformers.BertTokenizer`, given the book's small vocabulary) splits every CJK character into its
# own token and adds `[CLS]` and `[SEP]`. Those two are ordinary rows of the token table: the cell checks
# that their lookups are rows of the table, and chapter 01's backward pass gives both rows a
# gradient, so they are trained like any other token.

# %%
# CLAIM A39: holds for English BERT-base (Hugging Face's default config); the Chinese example's model is bert-base-chinese, vocabulary 21,128; the tokenizer gives L = 8
en = transformers.BertConfig()  # bert-base-uncased's configuration
print(
    f"English BERT-base config: hidden_size {en.hidden_size}, max_position_embeddings "
    f"{en.max_position_embeddings}, vocab_size {en.vocab_size}"
)
pair_vocab = build_vocab(RUNNING_EXAMPLE + list("苹果很甜"))  # the book's vocabulary + 很 甜
tokenizer = transformers.BertTokenizer(vocab=pair_vocab)
encoded = tokenizer("我喜欢吃苹果")
tokens = tokenizer.convert_ids_to_tokens(encoded["input_ids"])
print(f"BertTokenizer: {tokens}, L = {len(tokens)}")
emb0 = base.bert.embeddings
with torch.no_grad():
    cls_sep = emb0.tok(torch.tensor([vocab["[CLS]"], vocab["[SEP]"]]))  # (2, 768)
assert (en.hidden_size, en.max_position_embeddings, en.vocab_size) == (768, 512, 30522)
assert tokens == RUNNING_EXAMPLE and encoded["input_ids"] == ids[0].tolist()
assert torch.equal(cls_sep, emb0.tok.weight[[vocab["[CLS]"], vocab["[SEP]"]]].detach())
assert cls_sep.norm(dim=-1).min() > 0 and emb0.tok.weight.requires_grad

# %% [markdown]
# (claim-a40)=
# ### Claim A40: a single sentence has segment ids all 0; segments exist for sentence pairs and next-sentence prediction
#
# **Holds.** The tokenizer gives a single sentence `token_type_ids` of all 0. For a pair,
# `[CLS] A [SEP] B [SEP]` with A = 我喜欢吃苹果 and B = 苹果很甜 ("apples are sweet"), the first segment and
# its `[SEP]` get 0 and the second segment and its `[SEP]` get 1. The segment ids are not decoration: fed
# to the tiny model, they change its output at every position (attention spreads the second segment's
# different embedding to the first).

# %%
# CLAIM A40: holds: one sentence has segment ids all 0; the pair [CLS] A [SEP] B [SEP] has 0 on A and 1 on B, and the ids change the model's output
pair = tokenizer("我喜欢吃苹果", "苹果很甜", return_tensors="pt")
pair_ids, pair_types = pair["input_ids"], pair["token_type_ids"]  # (1, 13) each
print(" ".join(tokenizer.convert_ids_to_tokens(pair_ids[0])))
print("token_type_ids:", pair_types[0].tolist())
with torch.no_grad():
    h_pair = tiny.bert(pair_ids, pair_types)  # (1, 13, 64)
    h_zero = tiny.bert(pair_ids, torch.zeros_like(pair_types))  # every token in segment A
changed = (h_pair - h_zero).abs().amax(dim=-1)[0]  # (13,)
print("largest change per position when all ids are 0:", [f"{c:.2f}" for c in changed.tolist()])
assert set(encoded["token_type_ids"]) == {0}
assert pair_types[0].tolist() == [0] * 8 + [1] * 5
assert tokenizer.convert_ids_to_tokens(pair_ids[0])[7::5] == ["[SEP]", "[SEP]"]
assert changed.min() > 1e-3

# %% [markdown]
# (claim-a21)=
# ### Claim A21: Hugging Face's BertModel is a PreTrainedModel, and BERT is a Transformer encoder
#
# **Holds.** The first half is Python's class chain. For the second, the cell copies the weights of a
# one-layer Hugging Face `BertModel` at BERT-base width (the one chapter 01 checks
# {ref}`A5 <claim-a5>` on) into PyTorch's own `nn.TransformerEncoderLayer` (post-LN, GELU, BERT's
# $\varepsilon = 10^{-12}$) and checks that both compute the same function; and that the layer has no
# causal mask: its output at the first token changes when the last token changes, as an encoder's must
# (a decoder's could not). The copy is `tfx.model.layers.torch_layer_from_hf_bert` (chapter 05 uses it
# again, for claim A23); the settings come from the layer itself, and $W_Q$, $W_K$, $W_V$ are
# stacked into PyTorch's one `in_proj_weight`:

# %%
show_source(hf_bert_torch_settings, torch_layer_from_hf_bert)

# %%
tfx.set_seed(0)
hf_one = transformers.BertModel(
    transformers.BertConfig(num_hidden_layers=1, attn_implementation="eager")
).eval()  # BERT-base width, one layer, as chapter 01 builds it for A5

# %%
# CLAIM A21: holds: BertModel's class chain reaches PreTrainedModel, and its layer computes what torch's post-LN nn.TransformerEncoderLayer computes with the same weights, without a causal mask
print(" → ".join(c.__name__ for c in transformers.BertModel.__mro__[:3]))
hl = hf_one.encoder.layer[0]
ref = torch_layer_from_hf_bert(hl)  # nn.TransformerEncoderLayer, BERT's settings and weights, eval
print(f"nn.TransformerEncoderLayer settings: {hf_bert_torch_settings(hl)}")
with torch.no_grad():
    tfx.set_seed(0)
    xr = torch.randn(1, 8, 768)  # (1, 8, 768)
    hf_y, ref_y = hl(xr), ref(xr)  # (1, 8, 768) each
    xr_last = xr.clone()
    xr_last[0, -1] = torch.randn(768)  # another last token
    first_change = (hl(xr_last) - hf_y)[0, 0].abs().max().item()
print(f"max |BertLayer − nn.TransformerEncoderLayer| = {(hf_y - ref_y).abs().max():.1e}")
print(f"change of the first output when the last token changes: {first_change:.2f}")
assert issubclass(transformers.BertModel, transformers.PreTrainedModel)
assert not hf_one.config.is_decoder
assert_close(hf_y, ref_y, rtol=1e-4, atol=1e-4)
assert first_change > 1e-2

# %% [markdown]
# (claim-a6)=
# ### Claim A6: is an FFN of width 4·d_model (3072) a good trade-off against 2× and 8×?
#
# **Fails on the evidence it cites.** The article backs the claim with WMT translation results: 4×
# "beats 2× by 0.8 BLEU" and "saves 35% of memory" against 8×. The Transformer paper (Vaswani et al.
# 2017) reports this experiment on WMT: its Table 3, rows (C), varies exactly this width on the base model
# ($d_\text{model}$ = 512, English–German development set newstest2013): $d_{ff}$ = 1024 / 2048 / 4096
# gave 25.4 / 25.8 / 26.2 BLEU with 53M / 65M / 90M parameters. So 4× beats 2× by 0.4 BLEU, not 0.8;
# 8× beats 4× by another 0.4, so 4× is no peak. The "35% of memory" cannot be checked against the
# paper, which reports no memory (显存, GPU memory, is the article's word); its parameter counts give
# 28% fewer for 4× than 8×. Chapter 04 (A45) reads the same table. Whether 4× is a *good* trade-off is then a judgement the
# numbers leave open; the article's numbers for it are wrong. Retraining a translation model for days
# is out of reach here, so the BLEU side is read, not reproduced. The cost side for BERT-base is
# measured below: going from 4× to 8× adds 56.7M parameters, and 4× has 34.1% fewer parameters than
# 8×, so the article's "35%" is near BERT-base's parameter count. The verdict rests on the BLEU.

# %%
# CLAIM A6: fails on the Transformer paper's own Table 3(C): 4× beats 2× by 0.4 BLEU (not 0.8) and 8× beats 4×; the paper reports no memory (parameters: 4× has 28% fewer than 8× on its model, 34% on BERT-base)
table3c = {1024: (25.4, 53e6), 2048: (25.8, 65e6), 4096: (26.2, 90e6)}  # d_ff: (BLEU, parameters)
gain_2_to_4 = table3c[2048][0] - table3c[1024][0]
fewer = 1 - table3c[2048][1] / table3c[4096][1]
print(
    f"Table 3(C), read: 4× − 2× = {gain_2_to_4:+.1f} BLEU; 8× − 4× = "
    f"{table3c[4096][0] - table3c[2048][0]:+.1f} BLEU; 4× has {fewer:.0%} fewer parameters than 8×"
)
assert round(gain_2_to_4, 1) == 0.4 != 0.8 and table3c[4096][0] > table3c[2048][0]
assert round(fewer, 2) == 0.28  # the paper's parameter counts (not memory)
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
# ## From chapter 02: positional encoding
#
# These claims use the running example's ids in the book's default vocabulary and, for RoPE, chapter
# 02's score matrix of one query and one key repeated at 16 positions, rebuilt from the same seed.

# %%
# NBVAL_CHECK_OUTPUT
ids = running_example_ids()  # (1, 8)
tfx.set_seed(0)
L, d = 16, 64
q, k = torch.randn(d, dtype=torch.float64), torch.randn(d, dtype=torch.float64)
Q, K = q.expand(L, d), k.expand(L, d)  # (L, d): the same vector at every position
S_rope = apply_rope(Q) @ apply_rope(K).T  # (L, L)
show(ids=ids, S_rope=S_rope)

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

# %% [markdown]
# (claim-n13)=
# ### Claim N13: does adding position encodings to 0.01-scaled embeddings keep both position and token?
#
# **Fails in effect.** The encoding is *added* to the token embeddings, so the two have to be of
# comparable size: if one is much larger, the sum is mostly that one. The numpy article draws its
# embedding table as $0.01\cdot\mathcal{N}(0, 1)$ with
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
# (claim-a4)=
# ### Claim A4: what BERT adds to the token and segment embeddings, and whether the order of the three terms matters
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
# The cells below settle all of it on a fresh model. The first builds a
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

# %%
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

# %%
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
# (claim-a61)=
# ### Claim A61: can BERT's positions be extended beyond 512?
#
# **Holds only when nothing is trained.** A 512-row table has no row 512 (chapter 02 shows tfx
# refusing 513 tokens), and Hugging Face's `BertModel`
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
# ### Claim A35: do fixed positions generalise better than learned ones (DocRED, 1.2 F1)?
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
table3e = {"sinusoids (base)": 25.8, "learned positions": 25.7}  # Vaswani et al., Table 3 (E), BLEU
print(f"Transformer paper, Table 3 (E), dev BLEU: {table3e}")
assert round(table3e["sinusoids (base)"] - table3e["learned positions"], 1) <= 0.1  # nearly equal
assert n_learned == 512 * 768 == 393_216
assert torch.equal(as_learned(torch.arange(512)), sinusoidal_encoding(512, 768))

# %% [markdown]
# (claim-a63)=
# ### Claim A63: RoPE encodes position as a rotation, and LLaMA uses it
#
# **Holds.** RoPE works on a whole batch of heads at once, `(B, H, L, d_k)`, never changes a vector's
# length (a rotation), leaves position 0 alone, and makes the score depend on the offset alone (chapter
# 02's diagonal test, rebuilt at the top of this section). For the second half we check Hugging Face's Llama code: `LlamaAttention.forward`
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
assert diagonal_spread(S_rope) < 1e-12  # the score sees the offset only (top of this section)
print("tfx apply_rope = Hugging Face Llama's apply_rotary_pos_emb, dims reordered")
print("LlamaAttention.forward calls apply_rotary_pos_emb on its queries and keys")

# %% [markdown]
# (claim-a62)=
# ### Claim A62: does ALiBi, a bias proportional to distance, work at any length?
#
# **Holds only when the bias is symmetric (in an encoder), and as far as it was measured: to 8× the
# training length.** The bias is $-m_h$ times the distance, the model has no position vectors, and the bias is
# defined for any length (chapter 02 computes it at offset 1000). Whether a model trained on short
# inputs *works* on long ones appendix 95 measured (claim A17): trained at 32 tokens, the ALiBi model kept
# all of its accuracy above chance on positions up to 256, where learned and sinusoidal positions fell
# to chance. "Any length" is untested beyond 8×, and ALiBi's accuracy at the training length was the
# lowest of the four kinds there. Nothing failed at 8×: that is where the measurement stops, not a
# limit it found. The reference is Hugging Face's BLOOM, a causal model that uses
# ALiBi: its `build_alibi_tensor` adds $m_h \cdot j$ (the key's position) to every row. Under a causal
# mask that differs from the paper's $-m_h(i - j)$ by $m_h i$, a constant per row, which the softmax
# ignores, so the weights agree exactly. Without the causal mask (an encoder) they do not: BLOOM's form
# would *reward* distant keys to the right. That is why an encoder needs the symmetric form.

# %%
# CLAIM A62: holds only when the bias is symmetric (an encoder; BLOOM's causal form differs there by 0.7), as far as measured: a distance bias with no position vectors, defined at any length, kept its accuracy to 8x the training length (appendix 95, A17)
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
