"""The book's running example: the sentence every chapter follows, a short padded twin, and the
small vocabulary they are encoded in (special tokens first, as in BERT).

It lives below every other layer because the model's probes, the widgets and the training
chapters all start from the same eight tokens. Built in chapter 01.
"""

import torch

# The sentence the whole book follows, one token per character, as BERT's Chinese tokenizer splits
# it.
RUNNING_EXAMPLE = ["[CLS]", "我", "喜", "欢", "吃", "苹", "果", "[SEP]"]
SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def running_example_ids(vocab: dict = None) -> torch.Tensor:
    """The running example as a (1, 8) id tensor, in a small book vocabulary (specials first)."""
    vocab = vocab or build_vocab(RUNNING_EXAMPLE)
    return torch.tensor([[vocab[t] for t in RUNNING_EXAMPLE]])  # (1, 8)


# The book's padded batch: the running example and a shorter sentence padded to the same length.
SHORT_EXAMPLE = ["[CLS]", "我", "吃", "苹", "果", "[SEP]"]


def padded_example(vocab: dict = None) -> tuple:
    """(ids, attention_mask), both (2, 8): the running example, then SHORT_EXAMPLE padded with
    [PAD].

    Every chapter that needs a batch with padding uses this one, so the padded example never
    differs.
    attention_mask is Hugging Face's convention: 1 = real token, 0 = padding.
    """
    vocab = vocab or build_vocab(RUNNING_EXAMPLE)
    L = len(RUNNING_EXAMPLE)
    rows = [RUNNING_EXAMPLE, SHORT_EXAMPLE + ["[PAD]"] * (L - len(SHORT_EXAMPLE))]
    ids = torch.tensor([[vocab[t] for t in row] for row in rows])  # (2, 8)
    return ids, (ids != vocab["[PAD]"]).long()  # (2, 8), (2, 8)


def build_vocab(tokens) -> dict:
    """Special tokens at ids 0..4 (so [PAD] = 0, as in BERT), then each new token in order of first
    use."""
    vocab = {t: i for i, t in enumerate(SPECIAL_TOKENS)}
    for t in tokens:
        vocab.setdefault(t, len(vocab))
    return vocab
