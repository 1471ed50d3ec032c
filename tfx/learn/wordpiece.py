"""WordPiece: how BERT turns text into token ids (built in chapter 01).

BERT never sees characters or words. It sees ids from a fixed vocabulary of word pieces: whole
words where the vocabulary has them, otherwise a word's longest known prefix followed by
continuation pieces marked `##` (`playing` -> `play ##ing`). A word that cannot be spelled from the
vocabulary at all becomes one `[UNK]`. Chinese needs no segmentation: every CJK character is split
off as a word of its own, and almost every one is in the vocabulary, so the running example is one
token per character.

Two steps, as in Google's BERT code and Hugging Face's `BertTokenizer`:
1. `words`: clean the text, put spaces around CJK characters, split on whitespace, lower-case and
   strip accents (the uncased models), and split punctuation off as words of its own;
2. `pieces`: greedy longest-match-first over each word. Greedy, not optimal: the tokeniser takes the
   longest prefix in the vocabulary even when a shorter one would spell the word in fewer pieces.

Special tokens written in the text (`[MASK]`) stay whole, so `我喜欢吃[MASK]果` reads as the reader
means it. The test checks every step against Hugging Face's two implementations on real text.
"""

import re
import unicodedata
from dataclasses import dataclass, field

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")

# The CJK blocks BERT splits character by character (the CJK Unified Ideographs, their extensions
# and the compatibility ideographs); kana and hangul are not among them and go through WordPiece.
CJK_RANGES = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)


def is_cjk(ch: str) -> bool:
    cp = ord(ch)
    return any(lo <= cp <= hi for lo, hi in CJK_RANGES)


def is_punctuation(ch: str) -> bool:
    """Unicode punctuation, and every ASCII symbol (`$`, `^`, `` ` ``: BERT splits them too)."""
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def _clean(text: str) -> str:
    """Control characters (and NUL and U+FFFD) dropped; every kind of space made a plain space."""
    out = []
    for ch in text:
        if ch in "\t\n\r" or unicodedata.category(ch) == "Zs":
            out.append(" ")
        elif ord(ch) in (0, 0xFFFD) or unicodedata.category(ch).startswith("C"):
            continue
        else:
            out.append(ch)
    return "".join(out)


def _strip_accents(word: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFD", word) if unicodedata.category(c) != "Mn")


@dataclass
class WordPiece:
    """A WordPiece tokeniser over `vocab`, the list of tokens in id order (a `vocab.txt`, one token
    per line). `lowercase=True` is the uncased models' rule: lower-case and strip accents before the
    lookup. Words longer than `max_chars` characters become `[UNK]` without a search."""

    vocab: list
    lowercase: bool = True
    max_chars: int = 100
    ids: dict = field(init=False, repr=False)

    def __post_init__(self):
        if not isinstance(self.vocab, (list, tuple)) or not all(
            isinstance(t, str) for t in self.vocab
        ):
            raise TypeError(
                "vocab: expected a list of token strings in id order, got "
                f"{type(self.vocab).__name__}"
            )
        missing = [t for t in ("[UNK]", "[CLS]", "[SEP]") if t not in self.vocab]
        if missing:
            raise ValueError(f"vocab: has no {missing}; a BERT vocabulary lists its special tokens")
        if not isinstance(self.max_chars, int) or self.max_chars < 1:
            raise ValueError(f"max_chars: expected a positive int, got {self.max_chars!r}")
        self.ids = {t: i for i, t in enumerate(self.vocab)}

    def words(self, text: str) -> list:
        """Step 1: the text cut into words, before any vocabulary lookup."""
        if not isinstance(text, str):
            raise TypeError(f"text: expected a str, got {type(text).__name__}")
        special = [t for t in SPECIAL_TOKENS if t in self.ids]
        out = []
        for part in re.split("(" + "|".join(map(re.escape, special)) + ")", text):
            if part in special:
                out.append(part)  # written by the reader, kept whole
                continue
            spaced = "".join(f" {c} " if is_cjk(c) else c for c in _clean(part))
            for word in spaced.split():
                if self.lowercase:
                    word = _strip_accents(word.lower())
                out.extend(_split_punctuation(word))
        return out

    def pieces(self, word: str) -> list:
        """Step 2: one word as the longest vocabulary prefix, then the longest `##` piece, and so
        on; `[UNK]` if some position has no piece at all."""
        if not isinstance(word, str):
            raise TypeError(f"word: expected a str, got {type(word).__name__}")
        if not word:
            raise ValueError("word: expected at least one character, got ''")
        if word in self.ids:
            return [word]
        if len(word) > self.max_chars:
            return ["[UNK]"]
        out, start = [], 0
        while start < len(word):
            for end in range(len(word), start, -1):  # longest first
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.ids:
                    out.append(piece)
                    start = end
                    break
            else:
                return ["[UNK]"]  # one unspellable position loses the whole word
        return out

    def tokenize(self, text: str) -> list:
        return [p for w in self.words(text) for p in self.pieces(w)]

    def encode(self, text: str, pair: str = None) -> tuple:
        """(input ids, segment ids) as BERT reads them: `[CLS] text [SEP]`, or
        `[CLS] text [SEP] pair [SEP]` with the pair's tokens in segment 1."""
        first = ["[CLS]", *self.tokenize(text), "[SEP]"]
        second = [] if pair is None else [*self.tokenize(pair), "[SEP]"]
        ids = [self.ids[t] for t in first + second]
        return ids, [0] * len(first) + [1] * len(second)


def _split_punctuation(word: str) -> list:
    """`don't!` -> `don`, `'`, `t`, `!`: every punctuation character a word of its own."""
    out, current = [], ""
    for ch in word:
        if is_punctuation(ch):
            if current:
                out.append(current)
            out.append(ch)
            current = ""
        else:
            current += ch
    return out + ([current] if current else [])
