"""Chinese word segmentation as a token-level transfer test: does what the book model learned by
filling in masked characters help it tag each character with its place in a word?

Why segmentation: Chinese is written without spaces, so where one word ends is a question about
characters and their neighbours, exactly what masked-LM pre-training asks the body to model, and
the People's Daily file is annotated with words. Each character gets a tag: B (begins a word of two
or more), M (inside one), E (ends one) or S (a word by itself); `bmes` writes the tags of a
segmentation and `words_from` reads a segmentation back from tags.

Why word F1 and not only tag accuracy: a sentence is mostly easy characters, so tag accuracy is
high for any reasonable tagger and hides the errors that matter; the standard score counts a
predicted word as right only when both its boundaries match a gold word (`score`), and
recall on the words outside the training dictionary (`oov_recall`) shows what a dictionary cannot.

Why this split (`task_split`): the labelled data come from the news the book model never read
(tfx.learn.corpus.news_split's held-out side, the last days of January 1998). The first two thirds
of those sentences, in order, are the labelled pool and the last third the test: by order, not at
random, because the news repeats a story over several days, and a random split would test on
sentences whose neighbours were trained on. The pool's last tenth is a validation slice, where
steps, learning rate and the probe's layer are chosen; the test is read only for the final numbers.
Of the 4,137 held-out sentences that gives 2,482 for training, 276 for validation and 1,379 for the
test; the 48 longer than the book model's 126 characters (128 positions less [CLS] and [SEP]) are
split into pieces at punctuation (`split_long`), not cut, so every test character is scored: 2,507,
277 and 1,402 rows. The labelled budgets (`BUDGETS`) are 200, 1,000 and all 2,507 training rows,
nested, each drawn over the whole training part (`SegmentData.budget`).

Why a paired comparison (`tagger_from`): a tagger built from the pre-trained body and one built
from BERT's random initialisation with the same seed get the same head, the same batches and the
same schedule, so the difference between them is the body's starting point alone. The frozen-body
probe (`probe`) asks the same question without any training of the body: how much of a word's
boundaries can a linear map read off the vectors that pre-training left?
"""

import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from tfx.core.checks import check_int, check_positive_float, check_probability
from tfx.learn.finetuning import freeze, layer_states, param_groups, warmup_decay
from tfx.learn.mlm import IGNORE
from tfx.model.bert import BertConfig, BertForMaskedLM, BertModel

TAGS = "BMES"
BUDGETS = (200, 1000, None)  # labelled training sentences; None: all of the training part
PUNCTUATION_TAG = "w"  # the People's Daily tag of a punctuation mark


# ---- tags, words and scores -------------------------------------------------------------------


def _check_words(words, name: str = "words") -> list:
    if not isinstance(words, (list, tuple)):
        raise TypeError(f"{name} must be a list of str, got {type(words).__name__}")
    for i, w in enumerate(words):
        if not isinstance(w, str) or not w or any(c.isspace() for c in w):
            raise ValueError(f"{name}[{i}] must be a non-empty str without spaces, got {w!r}")
    return list(words)


def bmes(words) -> str:
    """The tags of a segmentation, one per character: ["我", "喜欢"] → "SBE"."""
    words = _check_words(words)
    return "".join("S" if len(w) == 1 else "B" + "M" * (len(w) - 2) + "E" for w in words)


def words_from(text: str, tags: str) -> list:
    """The words that `tags` cut `text` into. A tagger can emit a sequence no segmentation has (B
    then S, or M first), so the reading is lenient: a word ends after E or S and before B or S,
    and nowhere else. bmes and words_from invert each other on every valid sequence."""
    if not isinstance(text, str) or not isinstance(tags, str):
        raise TypeError(
            f"text and tags must be str, got {type(text).__name__} and {type(tags).__name__}"
        )
    if len(text) != len(tags):
        raise ValueError(
            f"tags must have one tag per character: {len(text)} chars, got {len(tags)}"
        )
    bad = set(tags) - set(TAGS)
    if bad:
        raise ValueError(f"tags must be letters of {TAGS!r}, got {''.join(sorted(bad))!r}")
    words, start = [], 0
    for i in range(1, len(text) + 1):
        if i == len(text) or tags[i - 1] in "ES" or tags[i] in "BS":
            words.append(text[start:i])
            start = i
    return words


def spans(words) -> set:
    """{(start, end)}: each word as the character offsets of its two boundaries."""
    out, at = set(), 0
    for w in words:
        out.add((at, at + len(w)))
        at += len(w)
    return out


def score(gold, predicted, dictionary=None) -> dict:
    """Word precision, recall and F1 over a corpus (a predicted word counts when both its
    boundaries match a gold word: the standard segmentation score), tag accuracy, and, given the
    training `dictionary` (a set of words), the recall of gold words outside it (oov_recall).
    `gold`: segmentations (lists of words). `predicted`, one per gold text: the predicted words,
    or a tagger's own tags as a str of BMES, read into words by words_from. Tag accuracy is of
    what was predicted: a tagger's raw tags (a sequence no segmentation has counts as it was
    emitted, not as words_from repaired it), or the tags of the predicted words."""
    if not isinstance(gold, (list, tuple)) or not isinstance(predicted, (list, tuple)):
        raise TypeError("gold and predicted must be lists (of segmentations, or of tag strings)")
    if len(gold) != len(predicted) or not gold:
        raise ValueError(
            f"gold and predicted must be of the same non-empty list of texts, got "
            f"{len(gold)} and {len(predicted)} predictions"
        )
    hit = n_gold = n_pred = right_tags = n_chars = oov = oov_hit = 0
    for i, (g, p) in enumerate(zip(gold, predicted)):
        g = _check_words(g, f"gold[{i}]")
        tags = p if isinstance(p, str) else None
        p = words_from("".join(g), p) if tags is not None else _check_words(p, f"predicted[{i}]")
        if "".join(g) != "".join(p):
            raise ValueError(
                f"predicted[{i}] must segment the text of gold[{i}], {''.join(g)!r}, "
                f"got {''.join(p)!r}"
            )
        gs, ps = spans(g), spans(p)
        hit, n_gold, n_pred = hit + len(gs & ps), n_gold + len(gs), n_pred + len(ps)
        right_tags += sum(a == b for a, b in zip(bmes(g), tags or bmes(p)))
        n_chars += sum(map(len, g))
        if dictionary is not None:
            at = 0
            for w in g:
                if w not in dictionary:
                    oov, oov_hit = oov + 1, oov_hit + ((at, at + len(w)) in ps)
                at += len(w)
    precision, recall = hit / n_pred, hit / n_gold
    out = dict(
        precision=precision,
        recall=recall,
        f1=2 * precision * recall / (precision + recall) if hit else 0.0,
        tag_accuracy=right_tags / n_chars,
        words=n_gold,
        chars=n_chars,
    )
    if dictionary is not None:
        out.update(oov_words=oov, oov_recall=oov_hit / oov if oov else float("nan"))
    return out


# ---- the task's data ---------------------------------------------------------------------------


def split_long(sentence, max_chars: int) -> list:
    """A sentence (list of words) of more than max_chars characters as consecutive pieces that
    fit: each piece ends after the last punctuation mark that fits past half the width (a
    word on its own in any segmentation standard, so the cut gives nothing away), or, when none
    does, after the last word that fits. Split rather than cut, so every character of the test
    is scored. `sentence` may hold (word, tag) pairs, as news_split gives, or words."""
    check_int(max_chars, "max_chars")
    pairs = [(w, "") if isinstance(w, str) else tuple(w) for w in sentence]
    for i, (w, _) in enumerate(pairs):
        if len(w) > max_chars:
            raise ValueError(
                f"word {i} of the sentence is longer than max_chars={max_chars}: {w!r}"
            )
    pieces = []
    while pairs:
        at, fits, cut = 0, 0, 0
        for i, (w, tag) in enumerate(pairs):
            at += len(w)
            if at > max_chars:
                break
            fits = i + 1
            if tag == PUNCTUATION_TAG and at >= max_chars // 2:  # no stub of a piece
                cut = i + 1
        cut = fits if at <= max_chars or not cut else cut  # the rest fits: take it all
        pieces.append([w for w, _ in pairs[:cut]])
        pairs = pairs[cut:]
    return pieces


@dataclass
class SegmentData:
    """The task's sentences as lists of words: the labelled training part, the validation slice
    (the choice of steps, learning rate and probe layer) and the test (the reported numbers)."""

    train: list
    validation: list
    test: list
    max_chars: int

    def budget(self, n) -> list:
        """The first n training sentences of a fixed shuffle (seed 0), so the budgets are nested
        (the 200 are among the 1,000) and each spreads over the whole pool rather than over its
        first day; n None: all of them."""
        if n is None:
            return list(self.train)
        check_int(n, "n")
        if n > len(self.train):
            raise ValueError(f"n must be at most the {len(self.train)} training sentences, got {n}")
        order = np.random.default_rng(0).permutation(len(self.train))
        return [self.train[i] for i in order[:n]]


def task_split(held, max_chars: int = 126, pool: float = 2 / 3, validation: float = 0.1):
    """SegmentData from the held-out news sentences (lists of (word, tag) pairs, in order): the
    first `pool` of them the labelled pool, whose last `validation` share is the validation slice,
    the rest the test; a sentence longer than max_chars (the model's positions less [CLS] and
    [SEP]) is split into pieces by split_long after the split, so a sentence's pieces stay on
    one side."""
    if not isinstance(held, (list, tuple)) or len(held) < 3:
        raise ValueError(f"held must be a list of at least 3 sentences, got {type(held).__name__}")
    for name, share in (("pool", pool), ("validation", validation)):
        if not 0 < share < 1:
            raise ValueError(f"{name} must be a fraction in (0, 1), got {share!r}")
    n_pool = round(len(held) * pool)
    n_train = n_pool - round(n_pool * validation)

    def pieces(sentences):
        return [p for s in sentences for p in split_long(s, max_chars)]

    return SegmentData(
        pieces(held[:n_train]), pieces(held[n_train:n_pool]), pieces(held[n_pool:]), max_chars
    )


def load_task(max_chars: int = 126) -> SegmentData:
    """task_split of the People's Daily sentences that the book model's pre-training never read
    (tfx.learn.corpus.news_split's held-out side)."""
    from tfx.learn.corpus import news_split

    return task_split(news_split()[1], max_chars)


def encode_tagged(sentences, vocab, max_len: int) -> tuple:
    """(input_ids, attention_mask, labels), each (N, L): [CLS] characters [SEP] [PAD]…, the tag
    ids of the characters as labels and IGNORE at [CLS], [SEP] and padding. L is the longest
    sentence + 2; a sentence longer than max_len − 2 raises (split it with split_long)."""
    check_int(max_len, "max_len", minimum=3)
    if not isinstance(sentences, (list, tuple)) or not sentences:
        raise ValueError("sentences must be a non-empty list of segmentations (lists of words)")
    rows = []
    for i, words in enumerate(sentences):
        text, tags = "".join(_check_words(words, f"sentences[{i}]")), bmes(words)
        if len(text) > max_len - 2:
            raise ValueError(
                f"sentences[{i}] must have at most max_len - 2 = {max_len - 2} characters, got "
                f"{len(text)}: split it with split_long"
            )
        ids = vocab.encode(text)
        if len(ids) != len(text):
            raise ValueError(f"sentences[{i}] must encode to one id per character: {text!r}")
        rows.append((ids, [TAGS.index(t) for t in tags]))
    L = max(len(ids) for ids, _ in rows) + 2
    input_ids = torch.full((len(rows), L), vocab["[PAD]"], dtype=torch.long)  # (N, L)
    labels = torch.full((len(rows), L), IGNORE, dtype=torch.long)  # (N, L)
    for r, (ids, tags) in enumerate(rows):
        input_ids[r, : len(ids) + 2] = torch.tensor([vocab["[CLS]"], *ids, vocab["[SEP]"]])
        labels[r, 1 : len(ids) + 1] = torch.tensor(tags)
    return input_ids, (input_ids != vocab["[PAD]"]).long(), labels


# ---- the tagger ----------------------------------------------------------------------------------


class BertForTokenClassification(nn.Module):
    """A BERT body, dropout, and a linear map from each position's vector to the tag logits."""

    def __init__(self, cfg: BertConfig, n_tags: int = len(TAGS), dropout=0.1):
        super().__init__()
        check_int(n_tags, "n_tags", minimum=2)
        check_probability(dropout, "dropout")
        self.cfg = cfg
        self.bert = BertModel(cfg, add_pooler=False)
        self.drop = nn.Dropout(dropout)
        self.classifier = nn.Linear(cfg.d_model, n_tags)
        BertModel._init_weights(self.classifier)

    def forward(self, input_ids, attention_mask=None) -> torch.Tensor:
        """Logits (B, L, n_tags), one row per position ([CLS], [SEP] and padding included)."""
        h = self.bert(input_ids, attention_mask=attention_mask)  # (B, L, d_model)
        return self.classifier(self.drop(h))  # (B, L, n_tags)


def tagger_from(body, seed: int = 0, pretrained: bool = True, dropout=0.1):
    """A tagger with `body`'s configuration (a tfx BertForMaskedLM, the book model): the body's
    weights copied in (pretrained=True) or BERT's random initialisation (pretrained=False, the
    control). The body is drawn first under `seed`, then the head, so the head starts the same
    either way and a pair with one seed differs only in the body."""
    if not isinstance(body, BertForMaskedLM):
        raise TypeError(f"body must be a tfx.model.bert.BertForMaskedLM, got {type(body).__name__}")
    check_int(seed, "seed", minimum=0)
    if not isinstance(pretrained, bool):
        raise TypeError(f"pretrained must be True or False, got {pretrained!r}")
    torch.manual_seed(seed)
    model = BertForTokenClassification(body.cfg, dropout=dropout)
    if pretrained:
        model.bert.load_state_dict(body.bert.state_dict())  # strict: same modules, no pooler
    return model


@dataclass
class TaggerConfig:
    """One fine-tuning run of a tagger: batch 32, peak rate 1e-3, a tenth of the steps as warm-up,
    as chapter 10's classifier. Checked on the validation slice with the random body at 200
    labels (seed 0, word F1): 0.521 after 75 steps and 0.533 after 150 at 1e-3, 0.527 after 150
    at 2e-3, 0.496 after 75 at 3e-4. bench/transfer.py --tune repeats the check for both
    bodies."""

    steps: int = 300
    batch_size: int = 32
    lr: float = 1e-3
    warmup: int = 30  # linear warm-up, then linear decay to 0 (BERT's schedule)
    weight_decay: float = 0.01
    clip: float = 1.0
    dropout: float = 0.1  # on each position's vector, before the tag layer
    pretrained: bool = True
    seed: int = 0
    freeze_bottom: int = 0  # embeddings and the bottom k layers frozen (finetuning.freeze)
    layer_decay: float = 1.0  # each layer's rate this factor of the one above (param_groups)

    def __post_init__(self):
        for name in ("steps", "batch_size"):
            check_int(getattr(self, name), name)
        check_int(self.warmup, "warmup", minimum=0)
        check_int(self.freeze_bottom, "freeze_bottom", minimum=0)
        if not 0 < self.layer_decay <= 1:
            raise ValueError(f"layer_decay must be in (0, 1], got {self.layer_decay!r}")
        check_int(self.seed, "seed", minimum=0)
        check_positive_float(self.lr, "lr")
        check_probability(self.dropout, "dropout")


@dataclass
class TaggerRun:
    """What a run leaves: the model (in eval mode), its loss per step, and wall time."""

    model: BertForTokenClassification
    cfg: TaggerConfig
    loss: list = field(default_factory=list)
    seconds: float = 0.0


def finetune_tagger(body, vocab, train, cfg: TaggerConfig = None) -> TaggerRun:
    """Fine-tune a tagger built from `body` (tagger_from) on `train` (lists of words): AdamW (decay
    on matrices only; cfg.layer_decay scales each layer's rate, cfg.freeze_bottom freezes the
    embeddings and the bottom layers), linear warm-up then decay, gradient clipping, batches drawn
    by cfg.seed (epoch by epoch, each a fresh shuffle), so two runs with one seed see the same
    batches."""
    cfg = TaggerConfig() if cfg is None else cfg
    if not isinstance(cfg, TaggerConfig):
        raise TypeError(f"cfg must be a TaggerConfig, got {type(cfg).__name__}")
    model = tagger_from(body, cfg.seed, cfg.pretrained, cfg.dropout)
    freeze(model, cfg.freeze_bottom)  # 0: every parameter trains
    ids, mask, labels = encode_tagged(train, vocab, model.cfg.max_len)  # (N, L) each
    run = TaggerRun(model, cfg)
    opt = torch.optim.AdamW(param_groups(model, cfg.lr, cfg.weight_decay, cfg.layer_decay))
    gen = torch.Generator().manual_seed(cfg.seed)
    lengths = mask.sum(1)  # (N,)
    batches = []
    start = time.perf_counter()
    model.train()
    for step in range(1, cfg.steps + 1):
        if not batches:
            batches = _epoch(lengths, cfg.batch_size, gen)
        b = batches.pop()
        L = int(lengths[b].max())
        logits = model(ids[b, :L], mask[b, :L])  # (B, L, T)
        flat = logits.flatten(0, 1)  # (B·L, T): one row per position
        loss = F.cross_entropy(flat, labels[b, :L].flatten(), ignore_index=IGNORE)  # (B·L,) → ()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.clip:
            nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)
        scale = warmup_decay(step, cfg.steps, cfg.warmup)
        for g in opt.param_groups:
            g["lr"] = g["base_lr"] * scale
        opt.step()
        run.loss.append(loss.item())
    run.seconds = time.perf_counter() - start
    model.eval()
    return run


def _epoch(lengths, batch_size: int, gen) -> list:
    """One pass over the sentences as batches of indices, drawn by `gen`: shuffled, then sorted by
    length within windows of 8 batches, so a batch holds sentences of similar length, and the
    batches' order shuffled again. A random batch of 32 of the task's sentences pads to 2.5 times
    their tokens (it is as long as its longest), a batch of this one to 1.2 times, and a step
    costs about in proportion."""
    order = torch.randperm(len(lengths), generator=gen)  # (N,)
    window = 8 * batch_size
    chunks = [order[s : s + window] for s in range(0, len(order), window)]
    ordered = torch.cat([c[lengths[c].argsort(descending=True, stable=True)] for c in chunks])
    batches = list(ordered.split(batch_size))  # (batch_size,) each, the last one shorter
    return [batches[i] for i in torch.randperm(len(batches), generator=gen).tolist()]


def _by_length(sentences, batch_size: int):
    """Batches of indices of similar length (little padding), longest first."""
    order = sorted(range(len(sentences)), key=lambda i: -sum(map(len, sentences[i])))
    return [order[s : s + batch_size] for s in range(0, len(order), batch_size)]


@torch.no_grad()
def predict_tags(model, vocab, sentences, batch_size: int = 128) -> list:
    """The tagger's most likely tag of each character, one str of BMES per sentence (the words of
    `sentences` are read only for their text and length), in eval mode (restored after)."""
    if not isinstance(model, BertForTokenClassification):
        raise TypeError(f"model must be a BertForTokenClassification, got {type(model).__name__}")
    was, out = model.training, [None] * len(sentences)
    model.eval()
    for idx in _by_length(sentences, batch_size):
        ids, mask, labels = encode_tagged([sentences[i] for i in idx], vocab, model.cfg.max_len)
        best = model(ids, mask).argmax(-1)  # (b, L)
        for i, row, lab in zip(idx, best, labels):
            out[i] = "".join(TAGS[t] for t in row[lab != IGNORE].tolist())  # (n_chars,)
    model.train(was)
    return out


def segment(model, vocab, sentences, batch_size: int = 128) -> list:
    """The tagger's segmentation of each sentence's text (words_from of predict_tags)."""
    tags = predict_tags(model, vocab, sentences, batch_size)
    return [words_from("".join(s), t) for s, t in zip(sentences, tags)]


# ---- the frozen-body probe -------------------------------------------------------------------


def _bert_of(body) -> BertModel:
    if isinstance(body, (BertForMaskedLM, BertForTokenClassification)):
        return body.bert
    if isinstance(body, BertModel):
        return body
    raise TypeError(
        f"body must be a tfx BertForMaskedLM, BertForTokenClassification or BertModel, got "
        f"{type(body).__name__}"
    )


@torch.no_grad()
def char_features(body, vocab, sentences, layers=None, batch_size: int = 128) -> np.ndarray:
    """(n_chars, d · len(layers)): the frozen body's vector of every character of `sentences`, in
    order, from the given layers (0: the embeddings' output, k: after encoder layer k; None: the
    last layer alone), concatenated. Read in eval mode (no dropout), with no gradient, and the
    body's mode is restored: the body is not changed."""
    bert = _bert_of(body)
    n = bert.cfg.n_layers
    layers = (n,) if layers is None else layers
    if (
        not isinstance(layers, (tuple, list))
        or not layers
        or any(isinstance(k, bool) or not isinstance(k, int) for k in layers)
    ):
        raise TypeError(f"layers must be a non-empty tuple of ints, got {layers!r}")
    layers = tuple(layers)
    if not all(0 <= k <= n for k in layers):
        raise ValueError(f"layers must be in 0..{n} (the body's {n} layers), got {layers}")
    was, rows = bert.training, [None] * len(sentences)
    bert.eval()
    for idx in _by_length(sentences, batch_size):
        ids, mask, labels = encode_tagged([sentences[i] for i in idx], vocab, bert.cfg.max_len)
        states = layer_states(bert, ids, mask)  # n + 1 tensors of (b, L, d)
        h = torch.cat([states[k] for k in layers], -1)  # (b, L, d · len(layers))
        for i, x, lab in zip(idx, h, labels):
            rows[i] = x[lab != IGNORE].numpy()  # (chars, d · len(layers))
    bert.train(was)
    return np.concatenate(rows).astype(np.float32)


def tag_ids(sentences) -> np.ndarray:
    """(n_chars,): the gold tag id of every character of `sentences`, in order."""
    return np.array([TAGS.index(t) for s in sentences for t in bmes(s)], dtype=np.int64)


# One L2 strength: with about 10^5 training characters and at most a few hundred features the
# probe barely depends on it (the random body's last layer: validation tag accuracy 0.4989 at
# C = 0.01, 0.4987 at C = 1), and each C is a fit to convergence.
PROBE_C = (1.0,)


def fit_tag_probe(x_train, train, x_val, validation, Cs=PROBE_C) -> tuple:
    """(classifier, C): tfx.learn.finetuning.fit_probe (logistic regression fitted to convergence
    on standardised features, C chosen by validation tag accuracy) on features already read by
    char_features, one row per character of `train` and of `validation`, the gold tags of those
    characters as the classes."""
    from tfx.learn.finetuning import fit_probe

    _check_rows(x_train, train, "x_train")
    _check_rows(x_val, validation, "x_val")
    clf, C, _ = fit_probe(x_train, tag_ids(train), x_val, tag_ids(validation), Cs)
    return clf, C


def probe_score(clf, x, sentences, dictionary=None) -> dict:
    """score() of a probe's tags: the classifier's tag of each character (rows of x, as
    char_features reads `sentences`)."""
    _check_rows(x, sentences, "x")
    pred = clf.predict(np.asarray(x, dtype=np.float64))  # (n_chars,)
    tags, at = [], 0
    for s in sentences:
        n = sum(map(len, s))
        tags.append("".join(TAGS[t] for t in pred[at : at + n]))
        at += n
    return score(sentences, tags, dictionary)


def _check_rows(x, sentences, name: str) -> None:
    n = sum(len(w) for s in sentences for w in s)
    if not isinstance(x, np.ndarray) or x.ndim != 2 or len(x) != n:
        raise ValueError(
            f"{name} must be a (n_chars, features) array with one row per character ({n}), "
            f"got {getattr(x, 'shape', type(x).__name__)}"
        )


def probe(body, vocab, train, validation, test=None, layers=None, Cs=PROBE_C) -> dict:
    """A linear probe of the frozen body: each character's vector from `layers` (char_features:
    eval mode, no gradient, the body unchanged), a logistic regression fitted on the characters
    of `train` (fit_tag_probe), scored by score() on `validation` and, given, `test` (OOV recall
    against the words of `train`). Returns {"C", "validation", "test"}."""
    x_train = char_features(body, vocab, train, layers)  # (n_train_chars, f)
    x_val = char_features(body, vocab, validation, layers)  # (n_val_chars, f)
    clf, C = fit_tag_probe(x_train, train, x_val, validation, Cs)
    words = {w for s in train for w in s}
    out = {"C": C, "validation": probe_score(clf, x_val, validation, words)}
    if test is not None:
        out["test"] = probe_score(clf, char_features(body, vocab, test, layers), test, words)
    return out


# ---- baselines that read no model ---------------------------------------------------------------


def max_match(text: str, dictionary, backward: bool = False, max_word: int = None) -> list:
    """Maximum matching: from the start (or, backward, the end) take the longest dictionary word
    that fits, else one character; max_word: the longest length tried (default: the longest word
    of the dictionary)."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    if not isinstance(dictionary, (set, frozenset, dict)):
        raise TypeError(f"dictionary must be a set of words, got {type(dictionary).__name__}")
    # the longest word is a pass over the dictionary: a caller segmenting many texts passes it
    k = (
        max(map(len, dictionary), default=1)
        if max_word is None
        else check_int(max_word, "max_word")
    )
    words, i, j = [], 0, len(text)
    while i < j:
        for n in range(min(k, j - i), 0, -1):
            w = text[j - n : j] if backward else text[i : i + n]
            if n == 1 or w in dictionary:
                break
        words.append(w)
        i, j = (i, j - n) if backward else (i + n, j)
    return words[::-1] if backward else words


def bidirectional_max_match(text: str, dictionary, max_word: int = None) -> list:
    """Forward and backward maximum matching, keeping the one with fewer words, then fewer single
    characters; on a tie the backward one (right to left is the better guess for Chinese, whose
    ambiguous overlaps more often resolve towards the end)."""
    if max_word is None and isinstance(dictionary, (set, frozenset, dict)):
        max_word = max(map(len, dictionary), default=1)
    fw = max_match(text, dictionary, False, max_word)
    bw = max_match(text, dictionary, True, max_word)

    def cost(ws):
        return len(ws), sum(len(w) == 1 for w in ws)

    return fw if cost(fw) < cost(bw) else bw


class CharTagCounts:
    """Per-character counts: the most frequent tag of a character given its left and right
    neighbours, backing off to the two pairs (their counts summed), then to the character alone,
    then to the most frequent tag overall. A table, no model: what reading the neighbours alone
    gives."""

    def __init__(self, sentences):
        if not isinstance(sentences, (list, tuple)) or not sentences:
            raise ValueError("sentences must be a non-empty list of segmentations (lists of words)")
        # (l, c, r), (l, c), (c, r), c → Counter of tags
        self.tables = [defaultdict(Counter) for _ in range(4)]
        overall = Counter()
        for s in sentences:
            text, tags = "".join(s), bmes(s)
            for i, t in enumerate(tags):
                for table, key in zip(self.tables, self._keys(text, i)):
                    table[key][t] += 1
                overall[t] += 1
        self.tables = [dict(t) for t in self.tables]  # a lookup of an unseen key adds nothing
        self.default = overall.most_common(1)[0][0]

    @staticmethod
    def _keys(text, i):
        left = text[i - 1] if i else "<s>"
        right = text[i + 1] if i + 1 < len(text) else "</s>"
        return (left, text[i], right), (left, text[i]), (text[i], right), text[i]

    def tags(self, text: str) -> str:
        """The predicted tags of `text`, one per character."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        out = []
        for i in range(len(text)):
            tri, left, right, one = self._keys(text, i)
            c = self.tables[0].get(tri)
            if c is None:
                c = self.tables[1].get(left, Counter()) + self.tables[2].get(right, Counter())
            c = c or self.tables[3].get(one)
            out.append(max(TAGS, key=lambda t: (c[t], -TAGS.index(t))) if c else self.default)
        return "".join(out)

    def segment(self, text: str) -> list:
        return words_from(text, self.tags(text))
