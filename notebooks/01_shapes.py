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
# vocabulary scores. What is the shape of every tensor on the way, which matrix makes each one,
# where do the hundred million parameters sit, where does the gradient go, and where does the compute go
# as the sentence grows?
#
# We answer three ways and make them agree: by hand, one matrix product at a time; by hooking every
# module of a real `tfx.model.bert.BertModel`; and by formula, from the config alone. The running
# example `[CLS] 我 喜 欢 吃 苹 果 [SEP]` ("I like eating apples") has one token per
# character, so L = 8.
#
# **Which BERT.** The article's vocabulary of 30,522 is that of English **BERT-base**
# (`bert-base-uncased`, the paper's 110M-parameter model). A Chinese sentence would be read by
# **bert-base-chinese**: the same layers, a vocabulary of 21,128 (nothing is downloaded here). Where a
# count depends on the vocabulary, the chapter prints both.

# %%
import tfx  # first: importing tfx quiets torchao's import-time log lines (tfx/__init__.py)

# isort: split
import random
import tempfile
import unicodedata
from collections import Counter
from pathlib import Path

import torch
import torch.nn as nn
import transformers
from torch.testing import assert_close
from torch.utils.flop_counter import FlopCounterMode

from tfx.book import embedding_diagram, show_source
from tfx.core import RUNNING_EXAMPLE, build_vocab, padded_example, running_example_ids, show
from tfx.inspect import (
    crossover_lengths,
    grad_norms,
    layer_flops,
    n_params,
    param_counts,
    shape_rows,
)
from tfx.learn import SPECIAL_TOKENS, WordPiece, is_cjk, load_bert_chinese_vocab, load_tatoeba
from tfx.model import BertConfig, BertForMaskedLM, BertModel, from_huggingface

tfx.banner()

# %% [markdown]
# ## From text to token ids
#
# BERT reads integers, each the row number of one entry in a fixed vocabulary, and its first matrix
# is a table with one row per entry. What are the entries, and how is text cut into them? Sorted by
# kind, the 21,128 entries of bert-base-chinese's `vocab.txt` show what the model was built to read.

# %%
# NBVAL_CHECK_OUTPUT
print(tfx.learn.data.BERT_CHINESE_VOCAB.credit)
zh_vocab = load_bert_chinese_vocab()


def entry_kind(token):
    if token in SPECIAL_TOKENS:
        return "special ([PAD] [UNK] [CLS] [SEP] [MASK])"
    if token.startswith("[unused"):
        return "[unused…] (free rows for a later task)"
    word = token.removeprefix("##")
    cjk = len(word) == 1 and is_cjk(word)
    if token.startswith("##"):
        return "## + one CJK character" if cjk else "## continuation of a word"
    return "one CJK character" if cjk else "word or word start (latin, digits, other)"


kinds = Counter(entry_kind(t) for t in zh_vocab)
for kind, n in kinds.most_common():
    of_kind = [t for t in zh_vocab if entry_kind(t) == kind]
    examples = " ".join(of_kind[len(of_kind) // 2 :][:4])
    print(f"{kind:<44} {n:>6,}   e.g. {examples}")
print(f"{'all':<44} {len(zh_vocab):>6,}")
cjk_entries = {t for t in zh_vocab if entry_kind(t) == "one CJK character"}
assert len(zh_vocab) == 21_128
assert {t[2:] for t in zh_vocab if entry_kind(t) == "## + one CJK character"} == cjk_entries

# %% [markdown]
# **Two steps** turn text into entries, as in Google's BERT code and Hugging Face's `BertTokenizer`
# (`tfx.learn.wordpiece.WordPiece` writes them out in about a hundred lines):
#
# 1. **Words.** Clean the text, put a space on both sides of every CJK character, split on spaces,
#    lower-case and strip accents (the uncased models' rule, and `WordPiece`'s default; the section on
#    casing below shows what bert-base-chinese's own configuration does), and cut every punctuation
#    mark off as a word of its own.
# 2. **Pieces.** Look each word up whole. If it is not in the vocabulary, take its *longest* prefix
#    that is, then the longest entry `##…` that continues from there, and so on to the end. If at
#    some point no entry fits, the whole word becomes one `[UNK]`.
#
# Predict before you run the next cell: how many tokens does "The transformers were playing
# unbelievably well." become with this Chinese model's vocabulary?

# %%
# NBVAL_CHECK_OUTPUT
wordpiece = WordPiece(zh_vocab)
for text in [
    "我喜欢吃苹果",
    "The transformers were playing unbelievably well.",
    "天气很好😀，“真的”",
]:
    print(f"{text}\n  words:  {wordpiece.words(text)}\n  pieces: {wordpiece.tokenize(text)}")
zh_ids, zh_segments = wordpiece.encode("我喜欢吃苹果")
print(f"encode: ids {zh_ids}, segments {zh_segments}")
assert [zh_vocab[i] for i in zh_ids] == RUNNING_EXAMPLE  # L = 8, one token per character
assert wordpiece.tokenize("playing") == ["play", "##ing"]

# %% [markdown]
# Chinese is the easy case: every character is a word, and nearly every character is one of the
# vocabulary's 7,322 character entries (the rare ones are not: Tatoeba's are counted below), so the
# running example is one token per character. The 7,322 entries `##` + character are
# never produced, since a character is always a word of its own and a word's first piece has no `##`.
# English, in this vocabulary built mostly for Chinese, falls apart: greedy cuts `transformers` into
# five pieces starting with `t`, because it always takes the longest prefix there is, and `trans` is
# not an entry. An emoji becomes `[UNK]`, and so do the curly quotes “ ” that Chinese text uses: the
# model reads all of them as one and the same token.
#
# The book's tokeniser gives the same ids as Hugging Face's `BertTokenizer` here, both lower-casing
# (the default of each) and not, and, in the unit tests, on 800 real texts (Tatoeba sentences in both
# languages, and reviews) and on generated text full of odd characters.

# %%
# NBVAL_CHECK_OUTPUT
with tempfile.TemporaryDirectory() as tmp:
    (Path(tmp) / "vocab.txt").write_text("\n".join(zh_vocab) + "\n", encoding="utf-8")
    hf_tokenizer = transformers.BertTokenizer(vocab=str(Path(tmp) / "vocab.txt"))
    hf_cased = transformers.BertTokenizer(vocab=str(Path(tmp) / "vocab.txt"), do_lower_case=False)
cased = WordPiece(zh_vocab, lowercase=False)
for text in [
    "我喜欢吃苹果",
    "The transformers were playing unbelievably well.",
    "天气很好😀，“真的”",
    "我喜欢吃[MASK]果",
    "我用iPhone看NBA",
    "Café résumé",
]:
    assert wordpiece.encode(text)[0] == hf_tokenizer(text)["input_ids"], text
    assert cased.encode(text)[0] == hf_cased(text)["input_ids"], text
print(
    "tfx.learn.wordpiece and Hugging Face's BertTokenizer give the same ids on all six, "
    "lower-casing and not"
)

# %% [markdown]
# **512 tokens are not 512 words.** BERT's position table has 512 rows, one per token. How many words
# fit depends on how well the vocabulary fits the language; two thousand seeded sentence pairs from
# Tatoeba (the corpus chapter 07 pre-trains on) measure it:

# %%
# NBVAL_CHECK_OUTPUT
print(tfx.learn.data.TATOEBA.credit)
tatoeba = load_tatoeba()  # every sentence pair, (Chinese, English)
pairs = random.Random(0).sample(tatoeba, 2000)
en_words = sum(len(en.split()) for _, en in pairs)
en_tokens = sum(len(wordpiece.tokenize(en)) for _, en in pairs)
zh_chars = sum(len(zh.replace(" ", "")) for zh, _ in pairs)
zh_tokens = sum(len(wordpiece.tokenize(zh)) for zh, _ in pairs)
print(
    f"English: {en_words:,} words → {en_tokens:,} tokens, {en_tokens / en_words:.2f} per word; "
    f"512 positions hold about {512 * en_words / en_tokens:.0f} words"
)
print(
    f"Chinese: {zh_chars:,} characters → {zh_tokens:,} tokens, {zh_tokens / zh_chars:.3f} per "
    "character (a run of digits or latin letters is one word, so slightly under 1)"
)
assert en_tokens / en_words > 1.5 and abs(zh_tokens / zh_chars - 1) < 0.02
assert not any(
    t.startswith("##") and is_cjk(t[-1]) for zh, _ in pairs for t in wordpiece.tokenize(zh)
)

# %% [markdown]
# English BERT's own vocabulary, learned from English text, keeps most common words whole; the book
# does not fetch it, so the ratio above is this vocabulary's. Either way, every word the vocabulary
# lacks costs positions.

# %% [markdown]
# ### Casing: the tokeniser as bert-base-chinese ships it
#
# Everything above lower-cases first, as `BertTokenizer` does by default. bert-base-chinese's own
# tokenizer configuration does not: it sets `do_lower_case` to false (its `tokenizer_config.json` on
# the Hugging Face Hub, and the table of defaults in transformers 4.x's `tokenization_bert.py`). Its
# vocabulary, though, has no upper-case entries and no accented letters at all, so with the
# configuration as shipped every word that contains a capital letter finds no first piece and becomes
# one `[UNK]`, and so does a word with an accent, which is no longer stripped. The next cell checks
# the vocabulary, compares the two settings, and counts what they do to the 2,000 Tatoeba pairs
# above; it also counts the CJK characters of the whole corpus that the vocabulary lacks.

# %%
# NBVAL_CHECK_OUTPUT
upper = [t for t in zh_vocab if t != t.lower() and t not in SPECIAL_TOKENS]
accented = [  # a letter with a mark: é is e plus a combining accent once decomposed
    t for t in zh_vocab if any(unicodedata.combining(c) for c in unicodedata.normalize("NFD", t))
]
print(
    f"vocabulary entries with an upper-case letter, besides [PAD] [UNK] [CLS] [SEP] [MASK]: {upper}"
)
print(f"vocabulary entries with an accented letter: {len(accented)}")
for text in ["我用iPhone看NBA", "Café résumé", "The transformers were playing unbelievably well."]:
    print(
        f"{text}\n  lower-cased: {wordpiece.tokenize(text)}\n  as shipped:  {cased.tokenize(text)}"
    )
print(f"{'2,000 Tatoeba pairs':<24} {'[UNK] tokens':>13} {'sentences with [UNK]':>21}")
unk = {}
for side, column in (("English", 1), ("Chinese", 0)):
    for name, tok in (("lower-cased", wordpiece), ("as shipped", cased)):
        pieces = [tok.tokenize(pair[column]) for pair in pairs]
        unk[side, name] = (
            sum(p.count("[UNK]") for p in pieces),
            sum("[UNK]" in p for p in pieces),
        )
        print(f"{side + ', ' + name:<24} {unk[side, name][0]:>13,} {unk[side, name][1]:>21,}")
cjk_counts = Counter(c for zh, _ in tatoeba for c in zh if is_cjk(c))
in_vocab = set(zh_vocab)
missing = {c: n for c, n in cjk_counts.items() if c not in in_vocab}
print(
    f"Tatoeba: {len(cjk_counts):,} distinct CJK characters, {len(missing)} not in the vocabulary "
    f"({sum(missing.values())} occurrences), e.g. {' '.join(sorted(missing, key=missing.get)[-5:])}"
)
assert upper == ["<S>", "<T>"] and not accented  # two markers, no word
assert cased.tokenize("我用iPhone看NBA") == ["我", "用", "[UNK]", "看", "[UNK]"]
assert unk["English", "as shipped"][1] > 0.9 * len(pairs) > 100 * unk["English", "lower-cased"][1]
assert unk["Chinese", "as shipped"][0] > unk["Chinese", "lower-cased"][0]
assert 0 < len(missing) < 0.02 * len(cjk_counts)

# %% [markdown]
# With the configuration as shipped, all 2,000 English sentences of the sample have an `[UNK]`,
# against 5 lower-cased (an English sentence starts with a capital), and 46 Chinese sentences against
# 11: a name or a brand in Latin letters is lost. Lower-casing the text first, or loading the tokenizer
# with `do_lower_case=True`, lets those words through. The rare characters are a separate gap,
# whatever the casing: 44 of Tatoeba's 4,397 distinct CJK characters (64 occurrences) are not in the
# vocabulary, and all of them read as the same `[UNK]`.

# %% [markdown]
# The book's own models use a tiny vocabulary built from their text, special tokens first so that
# `[PAD]` is 0 as in BERT; the shapes only need each id below `vocab_size`.

# %%
# NBVAL_CHECK_OUTPUT
vocab = build_vocab(RUNNING_EXAMPLE)
ids = running_example_ids(vocab)  # (1, 8)
print(list(zip(RUNNING_EXAMPLE, ids[0].tolist())))
show(ids=ids)

# %% [markdown]
# ## The whole path by hand
#
# Two configurations with the same wiring: English BERT-base ($d_{model}=768$, $H=12$ heads of $d_k=64$,
# $d_{ff}=3072$, 12 layers, vocabulary 30,522) and `BertConfig.tiny()` ($d_{model}=64$, 4 heads,
# $d_{ff}=256$, 2 layers, vocabulary 1,000), small enough to print whole.
#
# `walk` below re-does the forward pass of a `tfx.model.bert.BertForMaskedLM` with explicit matrix
# products, reading the weights out of the model, and keeps every intermediate tensor under a name.
# For one layer, with $X$ of shape $(L, d_{model})$ and head $h$:
#
# $$Q_h = X W_Q^{(h)},\quad K_h = X W_K^{(h)},\quad V_h = X W_V^{(h)} \qquad W^{(h)} \in \mathbb{R}^{d_{model}\times d_k}$$
# $$\text{context}_h = \operatorname{softmax}\!\Big(\tfrac{Q_h K_h^{\mathsf T}}{\sqrt{d_k}}\Big) V_h \in \mathbb{R}^{L\times d_k}$$
# $$\text{MHA}(X) = [\text{context}_1, \dots, \text{context}_H]\, W_O + b_O,\qquad W_O \in \mathbb{R}^{d_{model}\times d_{model}}$$
#
# then BERT's post-LN sub-layers, $X \leftarrow \text{LN}(X + \text{MHA}(X))$ and
# $X \leftarrow \text{LN}(X + \text{FFN}(X))$ with $\text{FFN}(x) = \text{GELU}(x W_1 + b_1) W_2 + b_2$.


# %%
def layer_by_hand(layer, x: torch.Tensor, cfg: BertConfig) -> tuple:
    """One encoder layer with every matrix product spelled out: (its output, the intermediates)."""
    B, L = x.shape[:2]
    H, dk = cfg.n_heads, cfg.d_model // cfg.n_heads
    W, b = layer.attn.qkv.weight, layer.attn.qkv.bias  # (3d, d), (3d,): rows are [W_Q; W_K; W_V]
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
    hidden = torch.nn.functional.gelu(x @ layer.ff.fc1.weight.T + layer.ff.fc1.bias)  # (B, L, d_ff)
    x_out = layer.norm2(x + hidden @ layer.ff.fc2.weight.T + layer.ff.fc2.bias)  # (B, L, d)
    return x_out, {
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


# %% [markdown]
# `walk` puts the embeddings in front of the layers and the MLM head after them:


# %%
def walk(model: BertForMaskedLM, ids: torch.Tensor) -> dict:
    """BERT's forward pass with every matrix product spelled out; returns the named intermediates."""
    cfg, emb = model.cfg, model.bert.embeddings
    L = ids.shape[1]
    t = {"token ids": ids}
    t["token embeddings"] = emb.tok.weight[ids]  # (B, L, d): one row of the table per token
    # (B, L, d): segment A everywhere
    t["segment embeddings"] = emb.seg.weight[torch.zeros_like(ids)]
    t["position embeddings"] = emb.pos.weight[:L]  # (L, d): broadcast over the batch
    x = emb.norm(
        t["token embeddings"] + t["segment embeddings"] + t["position embeddings"]
    )  # (B, L, d)
    t["sum, LayerNorm"] = x
    for i, layer in enumerate(model.bert.layers):
        x, inside = layer_by_hand(layer, x, cfg)
        if i == 0:  # every layer has the same shapes; keep the first one's
            t.update(inside)
    t[f"after {cfg.n_layers} layers"] = x  # (B, L, d)
    t["MLM logits"] = model.head(x)  # (B, L, V): dense, GELU, LayerNorm, then the tied decoder
    return t


# %% [markdown]
# First the tiny model, then BERT-base. Dropout is off (`eval()`), so the hand-made path and the module
# must agree to float rounding, and the shapes must be exactly what `tfx.inspect.flops.shape_rows`
# predicts from the config alone.

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
# The three embeddings are three lookups of the same shape, summed (the position table is $(L, d)$ and
# broadcasts over the batch). Attention keeps the width at 768 but passes through a
# $12 \times 8 \times 8$ block of scores: one $8\times 8$ matrix per head, row $i$ holding how much
# token $i$ looks at each token. The FFN is the only place the width changes inside a layer, and the
# last step the only place the vocabulary appears.
#
# ## The input embedding, drawn from the config
#
# Figure 1.1 is drawn from `base_cfg` by `tfx.book.viz.embedding_diagram`: three tables looked up by
# three index tensors, summed, then a LayerNorm and dropout.

# %%
# Figure 1.1: BERT-base's input embedding for the running example (d_model = 768, L = 8, B = 1),
#   drawn from its config: token ids, segment ids and positions 0 to 7 each index their own table
#   (30,522, 2 and 512 rows of width 768); the three (1, 8, 768) lookups are summed, the position
#   rows broadcast over the batch, and LayerNorm then dropout give the input of encoder layer 1.
fig = embedding_diagram(base_cfg, L=ids.size(1), B=ids.size(0))

# %% [markdown]
# (claim-a41)=
# ### Claim A41: is the encoder's input E_tok + E_seg + E_pos?
#
# **Fails as the encoder input.** In Hugging Face's `BertEmbeddings` (and tfx's, Figure 1.1) a
# LayerNorm and a dropout follow the sum, and the first layer sees their output: in eval mode exactly
# LayerNorm(sum), far from the sum; in train mode dropout zeroes about 10% of the entries, differently
# on every call.

# %%
# CLAIM A41: fails as the encoder input: Hugging Face's BertEmbeddings returns dropout(LayerNorm(E_tok + E_seg + E_pos)), not the sum
tfx.set_seed(0)
he = transformers.BertModel(transformers.BertConfig(**BertConfig.tiny().to_hf_kwargs())).embeddings
seg = torch.zeros_like(ids)  # (1, 8): one sentence, segment 0 everywhere
with torch.no_grad():
    summed = (
        he.word_embeddings(ids) + he.token_type_embeddings(seg) + he.position_embeddings.weight[:8]
    )  # (1, 8, 64): the article's encoder input
    he.eval()
    out_eval = he(input_ids=ids, token_type_ids=seg)  # (1, 8, 64)
    he.train()
    out_a, out_b = (he(input_ids=ids, token_type_ids=seg) for _ in range(2))
    he.eval()
gap = (out_eval - summed).abs().max().item()
zeros = (out_a == 0).float().mean().item()
print(
    f"max |BertEmbeddings(x) − sum| = {gap:.2f} (eval); entries zeroed in train mode: {zeros:.1%}"
)
assert_close(out_eval, he.LayerNorm(summed))  # eval: exactly LayerNorm of the sum
assert gap > 1.0 and 0.03 < zeros < 0.2 and not torch.equal(out_a, out_b)

# %% [markdown]
# (claim-a5)=
# ### Claim A5: per-head $W_Q, W_K, W_V$ are 768×64, the scores are 8×8, the concatenated heads are 768 wide, $W_O$ is 768×768
#
# **Holds**, checked against Hugging Face rather than tfx's own shapes. Its `query`, `key`, `value`
# are separate $768 \times 768$ projections cut into 12 heads of 64: head $h$'s $W_Q$ is columns
# $64h \dots 64h+63$ of $W_Q^{\mathsf T}$, and head 0's $8 \times 8$ weights recomputed from that slice
# alone match. tfx's fused $(2304, 768)$ weight, with the weights copied across, gives the same
# per-head weights.

# %%
# CLAIM A5: holds: Hugging Face's BERT-base-width BertModel has separate 768×768 query, key, value weights cut into 12 heads of 64, attention weights of shape (1, 12, 8, 8), and a 768×768 output projection
tfx.set_seed(0)
hf_one = transformers.BertModel(
    transformers.BertConfig(num_hidden_layers=1, attn_implementation="eager")
).eval()  # BERT-base width, one layer
ours_one = from_huggingface(hf_one)  # the same weights in tfx: Q, K, V fused into one (2304, 768)
sa, W_O = hf_one.encoder.layer[0].attention.self, hf_one.encoder.layer[0].attention.output.dense
with torch.no_grad():
    hf_att = hf_one(ids, output_attentions=True).attentions[0]  # (1, 12, 8, 8)
    _, our_att = ours_one(ids, output_attentions=True)  # one (1, 12, 8, 8) per layer
    x0 = hf_one.embeddings(ids)  # (1, 8, 768): the layer's input
    dk = sa.attention_head_size
    Wq0, Wk0 = sa.query.weight.T[:, :dk], sa.key.weight.T[:, :dk]  # (768, 64) each: head 0
    q0, k0 = x0 @ Wq0 + sa.query.bias[:dk], x0 @ Wk0 + sa.key.bias[:dk]  # (1, 8, 64) each
    head0 = (q0 @ k0.transpose(-2, -1) / dk**0.5).softmax(dim=-1)  # (1, 8, 8)
show(query=sa.query.weight, W_Q_head0=Wq0, weights=hf_att, W_O=W_O.weight)
assert all(tuple(m.weight.shape) == (768, 768) for m in (sa.query, sa.key, sa.value))
assert (sa.num_attention_heads, dk, tuple(Wq0.shape)) == (12, 64, (768, 64))
assert tuple(hf_att.shape) == (1, 12, 8, 8)
assert_close(head0, hf_att[:, 0])  # a head is a 64-column slice of the projection
assert_close(our_att[0], hf_att)  # tfx's fused weight, viewed per head, gives the same weights
assert tuple(W_O.weight.shape) == (768, 768)
assert tuple(ours_one.layers[0].attn.qkv.weight.shape) == (2304, 768)

# %% [markdown]
# ## The same path, from the machine
#
# `tfx.core.shapes.trace` runs the model once with a forward hook on every module and records what
# went in, what came out and how many parameters each module holds. The tiny model, every module:

# %%
# NBVAL_CHECK_OUTPUT
print(tfx.core.shapes.trace(tiny, ids))

# %% [markdown]
# BERT-base, two levels deep. The `head.decoder` row's 23.5M parameters include the
# $30522 \times 768$ word-embedding matrix, shared with `bert.embeddings.tok` (weight tying): the model
# total counts it once, the per-module rows twice.

# %%
# NBVAL_CHECK_OUTPUT
table = tfx.core.shapes.trace(base, ids, max_depth=2)
print(table)
assert table[0].outputs == "(1, 8, 30522)"
assert base.head.decoder.weight is base.bert.embeddings.tok.weight

# %% [markdown]
# ## Where the parameters are
#
# With $V$ the vocabulary size (in "Q, K, V" below, V is the values), $P$ positions, $S$ segments
# and biases included, `tfx.inspect.flops.param_counts` adds up:
#
# | component | count |
# |---|---|
# | token / segment / position embeddings | $Vd$, $Sd$, $Pd$ |
# | each LayerNorm | $2d$ (scale $\gamma$ and shift $\beta$) |
# | attention per layer | $3(d^2 + d)$ for Q, K, V and $d^2 + d$ for $W_O$ |
# | FFN per layer | $2 d\, d_{ff} + d_{ff} + d$ |
# | pooler | $d^2 + d$ |
#
# The formula is checked against tfx's and Hugging Face's BERT-base and BERT-large (24 layers of
# width 1024), built on PyTorch's `meta` device (shapes, no memory); `tfx.inspect.flops.n_params`
# counts the tied decoder's shared tensor once. The table is English BERT-base as a `BertModel` with
# its pooler, the paper's "110M".

# %%
show_source(param_counts)

# %%
# NBVAL_CHECK_OUTPUT
counts = param_counts(base_cfg)
total = sum(counts.values())
for name, n in counts.items():
    print(f"{name:<20} {n:>12,}  {n / total:6.1%}")
print(f"{'total':<20} {total:>12,}")

# %%
# NBVAL_CHECK_OUTPUT
with torch.device("meta"):  # shapes only, no memory
    hf_base = transformers.BertModel(transformers.BertConfig())
    hf_large = transformers.BertModel(transformers.BertConfig(**BertConfig.large().to_hf_kwargs()))
    tfx_base, tfx_large = BertModel(base_cfg), BertModel(BertConfig.large())
print(
    f"English BERT-base, BertModel with pooler: formula {total:,}  tfx {n_params(tfx_base):,}"
    f"  Hugging Face {n_params(hf_base):,}"
)
large_total = sum(param_counts(BertConfig.large()).values())
print(
    f"BERT-large: formula {large_total:,}  tfx {n_params(tfx_large):,}  Hugging Face {n_params(hf_large):,}"
)
assert total == n_params(tfx_base) == n_params(hf_base) == 109_482_240
mlm_total = sum(param_counts(base_cfg, pooler=False, mlm_head=True).values())
print(
    f"English BertForMaskedLM-base (no pooler, MLM head, tied decoder): formula {mlm_total:,}"
    f"  real model {n_params(base):,}"
)
assert mlm_total == n_params(base)
assert large_total == n_params(tfx_large) == n_params(hf_large) == 335_141_888

# %%
# NBVAL_CHECK_OUTPUT
attn = sum(n for name, n in counts.items() if name.startswith("attention"))
ffn = counts["FFN"] + counts["FFN LayerNorm"]
print(
    f"the {base_cfg.n_layers} layers: {attn + ffn:,} = attention {attn:,} ({attn / (attn + ffn):.1%})"
    f" + FFN {ffn:,} ({ffn / (attn + ffn):.1%}); FFN / attention = {ffn / attn:.3f}"
)
assert round((attn + ffn) / 1e6, 1) == 85.1 and abs(ffn / attn - 2) < 0.01
assert round(counts["token embeddings"] / total, 2) == 0.21  # about a fifth

# %% [markdown]
# bert-base-chinese differs only in its vocabulary, which changes the token table and the MLM decoder's
# bias. Both models, as a `BertModel` with pooler and as a `BertForMaskedLM` (no pooler; an MLM head
# whose decoder weight is tied to the token table):

# %%
# NBVAL_CHECK_OUTPUT
print(f"{'model':<20} {'vocabulary':>10} {'BertModel + pooler':>19} {'BertForMaskedLM':>16}")
by_model = {}
for name, V in (("English BERT-base", 30522), ("bert-base-chinese", 21128)):
    cfg_v = BertConfig.base(vocab_size=V)
    with torch.device("meta"):
        hf_kw = transformers.BertConfig(**cfg_v.to_hf_kwargs())
        hf_counts = (
            n_params(transformers.BertModel(hf_kw)),
            n_params(transformers.BertForMaskedLM(hf_kw)),
        )
    ours = (
        sum(param_counts(cfg_v).values()),
        sum(param_counts(cfg_v, pooler=False, mlm_head=True).values()),
    )
    assert ours == hf_counts  # the formula agrees with Hugging Face's classes
    by_model[name] = ours
    print(f"{name:<20} {V:>10,} {ours[0]:>19,} {ours[1]:>16,}")
assert by_model["bert-base-chinese"] == (102_267_648, 102_290_312)
assert by_model["English BERT-base"][0] == 109_482_240

# %% [markdown]
# The paper's "110M" is 109,482,240 rounded, and its "340M" for BERT-large is 335,141,888 rounded. A
# fifth of BERT-base is the token embedding table; in the 12 layers the FFNs hold two thirds and
# attention one third ($8d^2$ against $4d^2$ weights per layer when $d_{ff}=4d$).

# %% [markdown]
# ## One backward pass: where the gradient goes
#
# :::{admonition} A preview of chapter 06
# This section runs a backward pass before the book has taken one apart. Read it for *where* the
# gradient lands; {doc}`chapter 06 <06_gradient_flow>` follows it through a layer and explains *why*.
# :::
#
# Where does a training signal land? One masked-LM step on the running example, with 苹 replaced by
# `[MASK]`, on fresh models (BERT's initialisation, dropout off); `tfx.inspect.grads.grad_norms`
# prints the norm of every parameter's gradient. The tiny model:

# %%
# NBVAL_CHECK_OUTPUT
masked = ids.clone()  # (1, 8)
masked[0, 5] = vocab["[MASK]"]  # [CLS] 我 喜 欢 吃 [MASK] 果 [SEP]
attn_weights = []  # per model, each layer's (1, H, 8, 8) weights, keeping their gradient
for m in (tiny, base):
    m.zero_grad(set_to_none=True)
    hidden_m, weights_m = m.bert(
        masked, output_attentions=True
    )  # (1, 8, d), n_layers × (1, H, 8, 8)
    for w_m in weights_m:
        w_m.retain_grad()  # the gradient reaching the attention weights, read below
    attn_weights.append(weights_m)
    logits_m = m.head(hidden_m)  # (1, 8, V): what m(masked) returns
    nn.functional.cross_entropy(logits_m[0, 5:6], ids[0, 5:6]).backward()  # predict 苹 only
print(grad_norms(tiny))

# %% [markdown]
# Two things stand out, measured next for both models.
#
# * **Q and K get far smaller gradients than V and O** (the cell splits the fused `qkv.weight` to
#   show it). The gradient to $W_Q$ passes through $K$, and the gradient to $W_K$ through $Q$; at
#   initialisation $Q$ and $K$ are small, while $W_V$ and $W_O$ act on the output directly. The
#   softmax's scores are small, so it is far from saturated; it still takes a share. From the
#   gradient $\bar P$ that reaches a row of weights $p$, it passes on to the scores
#   $\bar S = p \odot (\bar P - \langle \bar P, p \rangle)$ ({doc}`chapter 03 <03_attention>` derives it): it
#   subtracts the part every key shares. The last column prints how much of $p \odot \bar P$ that
#   centring removes, in norm.
# * **The tied decoder reaches every word.** The decoder's weight *is* the token table, and the
#   softmax gives every word a non-zero probability, so every row gets a gradient. The position
#   table has no such second use: only the rows used get one.

# %%
# NBVAL_CHECK_OUTPUT
ratios, centring = {}, {}
for (name, m), weights_m in zip(
    (("tiny (d = 64)", tiny), ("BERT-base (d = 768)", base)), attn_weights, strict=True
):
    d_m = m.cfg.d_model
    print(f"{name}: per layer ‖∇W_Q‖ ‖∇W_K‖ ‖∇W_V‖ ‖∇W_O‖, (V + O) / (Q + K), centring removes")
    ratios[name], centring[name] = [], []
    for i, (layer, p) in enumerate(zip(m.bert.layers, weights_m, strict=True)):
        g_q, g_k, g_v = layer.attn.qkv.weight.grad.view(3, d_m, d_m).norm(dim=(1, 2))  # 3 × ()
        g_o = layer.attn.out.weight.grad.norm()
        ratios[name].append(((g_v + g_o) / (g_q + g_k)).item())
        S_bar = p * (p.grad - (p * p.grad).sum(-1, keepdim=True))  # (1, H, 8, 8)
        centring[name].append(1 - (S_bar.norm() / (p * p.grad).norm()).item())
        print(
            f"  layer {i:>2}: {g_q:.2e} {g_k:.2e} {g_v:.2e} {g_o:.2e}   {ratios[name][-1]:6.1f}×"
            f"   {centring[name][-1]:4.0%}"
        )
    emb_m = m.bert.embeddings
    rows = [
        (t.grad.abs().sum(dim=-1) > 0).sum().item()
        for t in (emb_m.tok.weight, emb_m.pos.weight, emb_m.seg.weight)
    ]
    print(
        f"  rows with a gradient: token table {rows[0]:,} of {m.cfg.vocab_size:,}, position table "
        f"{rows[1]} of {m.cfg.max_len}, segment table {rows[2]} of {m.cfg.type_vocab_size}"
    )
    assert rows == [m.cfg.vocab_size, 8, 1]
    cls_sep_grad = emb_m.tok.weight.grad[[vocab["[CLS]"], vocab["[SEP]"]]].norm(dim=-1)  # (2,)
    assert cls_sep_grad.min() > 0  # [CLS] and [SEP] are trained like any token (claim A39)
base_r, tiny_r = ratios["BERT-base (d = 768)"], ratios["tiny (d = 64)"]
print(f"BERT-base: V and O get {min(base_r):.1f}× to {max(base_r):.1f}× the gradient of Q and K")
print(f"tiny: {min(tiny_r):.0f}× to {max(tiny_r):.0f}×")
base_c = centring["BERT-base (d = 768)"]
print(
    f"the softmax's centring removes {min(base_c):.0%} to {max(base_c):.0%} of the gradient reaching"
    f" BERT-base's scores, most in layer {base_c.index(max(base_c))}"
)
assert 8 < min(base_r) and max(base_r) < 30  # about 10–20× at BERT-base width
assert 40 < min(tiny_r) and max(tiny_r) < 300  # about 100× at d = 64
assert 0.1 < min(base_c) and max(base_c) < 0.6  # a share, not saturation: never near all of it
assert base_c.index(max(base_c)) == base_r.index(max(base_r)) == 11  # both peak in the top layer

# %% [markdown]
# The gap grows with depth, and its size depends on the set-up as well as the width: chapter 06
# compares five set-ups at $d = 768$ and finds what sets it (how much the token vectors resemble each
# other). The centring is part of that story: it removes 14% to 47% of what reaches BERT-base's
# scores, most in the top layer, where the gap is widest, but at most about half, against a gap of
# 10.9× to 20.7×. Training still moves $W_Q$ and $W_K$, more slowly at first.

# %% [markdown]
# ## Where the compute goes, and how it grows with L
#
# Count the forward matmul FLOPs of one layer on one sequence, a multiply and an add being 2 FLOPs
# (softmax, GELU, LayerNorm and the additions are $O(L\,d)$ and too small to matter):
#
# | component | FLOPs | grows like |
# |---|---|---|
# | Q, K, V projections | $2 \cdot L \cdot d \cdot 3d = 6Ld^2$ | $L$ |
# | scores $QK^{\mathsf T}$ (all heads) | $2L^2 d$ | $L^2$ |
# | weights · V (all heads) | $2L^2 d$ | $L^2$ |
# | $W_O$ | $2Ld^2$ | $L$ |
# | FFN | $4 L\, d\, d_{ff}$ | $L$ |
#
# The two $L^2$ terms together, $4L^2d$, equal the projections' $8Ld^2$ when $L = 2d$, the FFN's
# $4L\,d\,d_{ff}$ when $L = d_{ff}$, and all the linear terms, $8Ld^2 + 4Ld\,d_{ff}$, when
# $L = 2d + d_{ff}$. For BERT-base that is L = 1536, 3072 and 4608, all beyond BERT's 512 positions:
# within BERT's range, attention's quadratic part is never the main cost in FLOPs. Memory is another
# story: every layer's $(B, H, L, L)$ scores and weights grow like $L^2$, and chapter
# {doc}`08 <08_performance>` measures what that costs and how chunked attention avoids it.
#
# The formula against torch's own FLOP counter on the real base layer:

# %%
show_source(layer_flops)

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
# NBVAL_CHECK_OUTPUT
Ls = [2**i for i in range(3, 15)]
flops = [layer_flops(768, 3072, L) for L in Ls]
curves = {
    "attention L² terms (QKᵀ and weights·V)": [f["scores Q Kᵀ"] + f["weights · V"] for f in flops],
    "Q, K, V and W_O projections": [f["Q, K, V projections"] + f["W_O"] for f in flops],
    "FFN": [f["FFN"] for f in flops],
    "all linear terms (projections + FFN)": [
        f["Q, K, V projections"] + f["W_O"] + f["FFN"] for f in flops
    ],
}
marks = {  # each marked L is where the L² line meets one drawn curve
    "L = 2d": ("Q, K, V and W_O projections", cross["vs attention projections"]),
    "L = d_ff": ("FFN", cross["vs FFN"]),
    "L = 2d + d_ff": ("all linear terms (projections + FFN)", cross["vs all projections"]),
}
for label, (curve, L_x) in marks.items():
    f = layer_flops(768, 3072, L_x)
    quad_x = f["scores Q Kᵀ"] + f["weights · V"]
    linear = {
        "Q, K, V and W_O projections": f["Q, K, V projections"] + f["W_O"],
        "FFN": f["FFN"],
        "all linear terms (projections + FFN)": f["Q, K, V projections"] + f["W_O"] + f["FFN"],
    }
    assert quad_x == linear[curve], label  # the L² line crosses exactly this curve here
    print(f"{label:<14} L = {L_x:>5,}: the L² terms equal the {curve}, {quad_x:,} FLOPs")

# %%
# Figure 1.2: Forward FLOPs of one BERT-base layer against sequence length L from 8 to 16384, both
#   axes log scale: attention's L² terms (QKᵀ and weights times V), the Q, K, V and W_O projections,
#   the FFN, and all linear terms together. The linear costs are lines of slope 1 and the L² terms a
#   line of slope 2, which crosses them at the dashed marks L = 2d, L = d_ff and L = 2d + d_ff, all
#   to the right of BERT's maximum of 512 positions.
fig = tfx.book.viz.plot_curves(
    Ls,
    curves,
    xlabel="sequence length L",
    ylabel="forward FLOPs per layer",
    logx=True,
    logy=True,
    title="BERT-base layer: FLOPs against L",
    vlines={"BERT max 512": 512, **{k: L_x for k, (_, L_x) in marks.items()}},
)

# %% [markdown]
# In Figure 1.2 the linear terms are lines of slope 1 and the attention term a line of slope 2,
# crossing them at the three lengths the previous cell checks.

# %% [markdown]
# ## Try it: the shape table for any size
#
# The sliders set L, $d_{model}$, the number of heads and $d_{ff}$ of a 12-layer BERT; the widget
# prints every shape, the parameter count and the FLOPs per layer. A setting BERT cannot have, such
# as 13 heads for $d_{model}$ = 768, is refused. Try L beyond 3072 to watch the attention / FFN ratio
# pass 1.

# %%
tfx.book.widgets.shapes_widget()

# %% [markdown]
# ## The article's other claims on this material
#
# The article's other claims here are settled in the [ledger](91_ledger_foundations.ipynb): BERT-base's configuration numbers and the example's length
# ({ref}`A39 <claim-a39>`), segment ids for one sentence and for a pair ({ref}`A40 <claim-a40>`),
# that Hugging Face's `BertModel` is a `PreTrainedModel` and BERT a Transformer encoder
# ({ref}`A21 <claim-a21>`), and that a feed-forward width of $4 d_{model}$ is a good trade-off
# against 2× and 8× ({ref}`A6 <claim-a6>`, which fails on the Transformer paper's own Table 3).

# %% [markdown]
# ## Summary
#
# - Text becomes ids in two steps, words then greedy longest-match pieces; with bert-base-chinese's
#   vocabulary every CJK character is one token, and English takes 1.75 tokens per word.
# - BERT's forward path: ids $(B, L)$ → embeddings $(B, L, d)$ → per head $Q, K, V$ $(B, H, L, d_k)$ →
#   scores $(B, H, L, L)$ → context → concatenated $(B, L, d)$ → $W_O$ → FFN through $(B, L, d_{ff})$ →
#   $(B, L, d)$, 12 times → logits $(B, L, V)$.
# - English BERT-base has 109,482,240 parameters as a `BertModel` with pooler (bert-base-chinese
#   102,267,648), a fifth of them in the token table; in each layer the FFN holds twice the
#   parameters of attention. The encoder's input is LayerNorm and dropout of the embeddings' sum.
# - At initialisation $W_V$ and $W_O$ get 11–21× the gradient of $W_Q$ and $W_K$ at BERT-base width;
#   the tied decoder gives every vocabulary row a gradient.
# - Per layer the FLOPs are $8Ld^2 + 4L\,d\,d_{ff} + 4L^2d$; the $L^2$ term overtakes the projections at
#   $L = 2d$ and the FFN at $L = d_{ff}$, beyond BERT's 512 positions.
#
# ## What you can now do
#
# - Cut text into WordPiece tokens, and say why a sequence length counts pieces, not words.
# - Follow token ids through BERT shape by shape, by hand and with `tfx.core.shapes.trace`, and name
#   the matrix that makes each tensor.
# - Count a BERT's parameters from its configuration alone (`tfx.inspect.flops.param_counts`).
# - Read from a gradient-norm table which parameters a backward pass reaches.
# - Count a layer's FLOPs from its shapes, and find where the $L^2$ term takes over.
#
# Next, chapter 02 asks how far attention alone ignores order, and what sinusoids, BERT's learned
# positions, RoPE and ALiBi add.
#
# ## Exercises
#
# Tiers: *warm-up* checks what the chapter showed, *core* applies it to a new case, *build it*
# has you write the code, *open* has no single answer.
#
# 1. *(warm-up)* How many parameters does one BERT-large layer have, and what fraction of them is
#    the FFN?
# 2. *(core)* With $d_{ff} = 4d$, at which L, as a function of $d$, does the $L^2$ attention term
#    overtake the FFN? And all the linear terms?
# 3. *(warm-up)* How many parameters would `BertForMaskedLM` at base size have if the MLM decoder
#    did not share its weight with the token embeddings?
# 4. *(core)* Predict first, then check. Trace the tiny model on the book's padded batch
#    (`tfx.core.example.padded_example()`, two sentences with an `attention_mask`). Which shapes
#    change?
# 5. *(build it)* Greedy longest-match is not always the fewest pieces. Write a dynamic program for
#    the fewest (the first piece plain, the rest `##`) and list the Tatoeba sample's English words
#    where greedy uses more. Predict first: how many words, and how many pieces wasted?

# %% [markdown]
# :::{admonition} Solution to exercise 1
# :class: dropdown
# With $d = 1024$ and $d_{ff} = 4096$: weights $4d^2$ for $W_Q, W_K, W_V, W_O$ and
# $2 d\, d_{ff} = 8d^2$ for the FFN; biases $4d$ for attention and $d_{ff} + d$ for the FFN; $2 \cdot 2d$
# for the two LayerNorms. In all $12 d^2 + 9d + d_{ff} = 12{,}596{,}224$ parameters, of which the FFN
# (without its LayerNorm) has $8{,}393{,}728$, that is 66.6%: two thirds, because its weights are
# $8d^2$ of the $12d^2$.
# :::

# %% tags=["hide-cell"]
# NBVAL_CHECK_OUTPUT
# 1. The parameters of one BERT-large layer, and the FFN's share
large = BertConfig.large()
per_layer = {
    k: v // large.n_layers
    for k, v in param_counts(large).items()
    if k.startswith(("attention", "FFN"))
}
layer_total = sum(per_layer.values())
print(
    f"exercise 1: one BERT-large layer has {layer_total:,} parameters, "
    f"FFN share {per_layer['FFN'] / layer_total:.1%}"
)
assert (
    layer_total == 12 * 1024**2 + 9 * 1024 + 4096
)  # weights 4d² + 8d²; biases 4d + d + d_ff; two LayerNorms 4d

# %% [markdown]
# :::{admonition} Solution to exercise 2
# :class: dropdown
# Per layer the $L^2$ terms cost $4L^2 d$ FLOPs, the FFN $4L\,d\,d_{ff} = 16Ld^2$ and the projections
# $8Ld^2$. Divide every term by $4Ld$: the $L^2$ terms overtake the FFN when $L > 4d$, and all the
# linear terms, $24Ld^2$, when $L > 6d$; for BERT-base 3072 and 4608.
# :::

# %% tags=["hide-cell"]
# NBVAL_CHECK_OUTPUT
# 2. Where the L² terms overtake the FFN and all linear terms, with d_ff = 4d
print("exercise 2: 4L²d = 4L·d·4d gives L = 4d; 4L²d = 8Ld² + 16Ld² gives L = 6d")
for d in (256, 768, 1024):
    cross_d = crossover_lengths(d, 4 * d)
    assert (cross_d["vs FFN"], cross_d["vs all projections"]) == (4 * d, 6 * d)

# %% [markdown]
# :::{admonition} Solution to exercise 3
# :class: dropdown
# Tied, the decoder's $(V, d)$ matrix is the token table, counted once, and the decoder adds only its
# bias of $V$ entries. Untied, it would add $V d = 30{,}522 \times 768 = 23{,}440{,}896$ weights:
# $109{,}514{,}298 + 23{,}440{,}896 = 132{,}955{,}194$ parameters, about 21% more. The code gives a
# `meta`-device model's decoder a separate weight and counts.
# :::

# %% tags=["hide-cell"]
# NBVAL_CHECK_OUTPUT
# 3. BertForMaskedLM-base with a decoder weight of its own
untied = mlm_total + base_cfg.vocab_size * base_cfg.d_model
with torch.device("meta"):  # build the model and give the decoder its own (V, d) weight
    untied_model = BertForMaskedLM(base_cfg)
    untied_model.head.decoder.weight = torch.nn.Parameter(
        torch.empty(base_cfg.vocab_size, base_cfg.d_model)
    )
assert n_params(untied_model) == untied
print(
    f"exercise 3: untied, BertForMaskedLM-base would have {untied:,} parameters "
    f"instead of {n_params(base):,}"
)

# %% [markdown]
# :::{admonition} Solution to exercise 4
# :class: dropdown
# Only the batch size changes, from 1 to 2: the batch is padded to its longest sentence, the running
# example, so $L$ stays 8 and the scores keep their shape $(B, 4, 8, 8)$. Each layer gets one more
# input, the padding mask as $(B, 1, 1, L)$, broadcast over the heads and the query rows. It zeroes the
# weights on the `[PAD]` keys, so the short sentence's real tokens get the same outputs as unpadded.
# :::

# %% tags=["hide-cell"]
# NBVAL_CHECK_OUTPUT
# 4. The tiny model traced on the padded batch, against the single sentence
batch, mask = padded_example(vocab)  # (2, 8) each: 1 in mask for real tokens, 0 for padding
short = batch[1:, : int(mask[1].sum())]  # (1, 6): [CLS] 我 吃 苹 果 [SEP] without its padding
padded = tfx.core.shapes.trace(tiny, batch, attention_mask=mask, max_depth=2)
single = tfx.core.shapes.trace(tiny, ids, max_depth=2)
print(padded)
for row_b, row_1 in zip(padded, single):
    assert row_b.path == row_1.path and row_b.outputs == row_1.outputs.replace("(1, ", "(2, ")
assert padded[3].path == "bert.layers.0" and padded[3].inputs == "(2, 8, 64), (2, 1, 1, 8)"
with torch.no_grad():  # the padding changes no real token's output
    assert_close(tiny(batch, attention_mask=mask)[1, :6], tiny(short)[0], rtol=1e-5, atol=1e-5)
print(
    "exercise 4: only B changes (1 → 2), and each layer gets one more input, "
    "the mask as (B, 1, 1, L);"
    "\nL is the padded length 8, the scores stay (·, 4, 8, 8), "
    "and the mask zeroes the weights on [PAD]"
    "\nkeys, so the short sentence's 6 outputs equal those of an unpadded run"
)


# %% [markdown]
# :::{admonition} Solution to exercise 5
# :class: dropdown
# Let `best[i]` be the fewest pieces that spell the word's first `i` characters: `best[0]` is empty,
# and `best[end]` is the shortest `best[start] + [piece]` over every spelled `start` whose slice to
# `end` is an entry (plain when `start` is 0, `##` otherwise). Greedy is rarely worse, and then by a
# piece or two: it takes `co ##ul ##d` where `c ##ould` would do, because `co` is the longer prefix.
# The waste is small, and greedy is fast.
# :::


# %% tags=["hide-cell"]
# NBVAL_CHECK_OUTPUT
# 5. The fewest pieces by dynamic programming, against greedy longest-match
def fewest_pieces(word):
    best = {0: []}  # best[i]: the fewest pieces spelling word[:i]
    for end in range(1, len(word) + 1):
        for start in sorted(best):
            piece = word[start:end] if start == 0 else "##" + word[start:end]
            if piece in wordpiece.ids and (
                end not in best or len(best[start]) + 1 < len(best[end])
            ):
                best[end] = best[start] + [piece]
    return best.get(len(word), ["[UNK]"])


en_vocab = sorted({w for _, en in pairs for w in wordpiece.words(en)})
worse = [w for w in en_vocab if len(wordpiece.pieces(w)) > len(fewest_pieces(w))]
for w in worse[:4]:
    print(f"{w:<12} greedy {' '.join(wordpiece.pieces(w)):<22} fewest {' '.join(fewest_pieces(w))}")
total_greedy = sum(len(wordpiece.pieces(w)) for w in en_vocab)
total_fewest = sum(len(fewest_pieces(w)) for w in en_vocab)
print(
    f"exercise 5: greedy is worse on {len(worse)} of {len(en_vocab):,} words "
    f"({total_greedy:,} pieces against {total_fewest:,})"
)
assert worse and total_fewest < total_greedy
assert all(len(fewest_pieces(w)) <= len(wordpiece.pieces(w)) for w in en_vocab)
unknown = [w for w in en_vocab if wordpiece.pieces(w) == ["[UNK]"]]
assert unknown == ["bronisław", "’"] and all(fewest_pieces(w) == ["[UNK]"] for w in unknown)
