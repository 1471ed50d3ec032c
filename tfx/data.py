"""Text for the book: the running example and, for training chapters, real text installed offline."""

import torch

# The sentence the whole book follows, one token per character, as BERT's Chinese tokenizer splits it.
RUNNING_EXAMPLE = ["[CLS]", "我", "喜", "欢", "吃", "苹", "果", "[SEP]"]
SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def running_example_ids(vocab: dict = None) -> torch.Tensor:
    """The running example as a (1, 8) id tensor, in a small book vocabulary (specials first)."""
    vocab = vocab or build_vocab(RUNNING_EXAMPLE)
    return torch.tensor([[vocab[t] for t in RUNNING_EXAMPLE]])  # (1, 8)


def build_vocab(tokens) -> dict:
    """Special tokens at ids 0..4 (so [PAD] = 0, as in BERT), then each new token in order of first use."""
    vocab = {t: i for i, t in enumerate(SPECIAL_TOKENS)}
    for t in tokens:
        vocab.setdefault(t, len(vocab))
    return vocab
