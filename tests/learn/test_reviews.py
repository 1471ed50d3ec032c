"""Chapter 10's cheap baselines (tfx.learn.reviews.fit_baseline): TF-IDF + logistic regression and
NB-SVM on character n-grams, on hand-made reviews: a separable toy is classified perfectly, the
log-count ratio is the formula's, C is chosen on validation, bad input raises; and the bootstrap
interval of a test accuracy."""

import math

import numpy as np
import pytest

from tfx.learn import reviews

GOOD = ["服务很好", "房间很好", "早餐很好吃", "很好，推荐", "位置好，很满意", "很满意"]
BAD = ["服务很差", "房间很差", "早餐太差了", "很差，失望", "位置差，不满意", "太失望"]
TRAIN = [(t, 1) for t in GOOD] + [(t, 0) for t in BAD]
HELD_OUT = [("价格很好", 1), ("前台很满意", 1), ("价格很差", 0), ("前台太失望", 0)]


@pytest.mark.parametrize("kind", reviews.BASELINES)
def test_a_separable_toy_is_classified_perfectly(kind):
    model = reviews.fit_baseline(kind, TRAIN, HELD_OUT)
    assert model.accuracy(HELD_OUT) == 1.0 and model.accuracy(TRAIN) == 1.0
    assert model.predict(["很好很满意", "很差很失望"]).tolist() == [1, 0]
    assert model.correct(HELD_OUT).dtype == bool
    assert model.C in reviews.BASELINE_CS[kind]
    assert set(model.validation) == {
        (C, b)
        for C in reviews.BASELINE_CS[kind]
        for b in (reviews.NBSVM_BETAS if kind == "nbsvm" else (1.0,))
    }


def test_pairs_of_characters_decide_what_single_characters_cannot():
    """Each text of one class holds the other's characters in another order: only pairs tell."""
    train = [("很好", 1), ("好很", 0), ("不错", 1), ("错不", 0)] * 3
    test = [("很好不错", 1), ("好很错不", 0)]
    for kind in reviews.BASELINES:
        assert reviews.fit_baseline(kind, train, test, ngrams=(1, 2)).accuracy(test) == 1.0
        assert reviews.fit_baseline(kind, train, test, ngrams=(1, 1)).accuracy(test) == 0.5


def test_log_count_ratio_is_wang_and_mannings_formula():
    x = np.array([[1, 0, 1], [1, 1, 0], [0, 1, 0]])  # rows 0, 1 positive; row 2 negative
    r = reviews.log_count_ratio(x, [1, 1, 0])
    p, q = np.array([3, 2, 2]), np.array([1, 2, 1])  # α = 1 plus the counts per class
    np.testing.assert_allclose(r, np.log(p / 7) - np.log(q / 4))
    with pytest.raises(ValueError, match="x has 3 rows but y has 2 labels"):
        reviews.log_count_ratio(x, [1, 0])
    with pytest.raises(ValueError, match="alpha must be positive"):
        reviews.log_count_ratio(x, [1, 1, 0], alpha=0)


def test_c_is_chosen_on_validation_and_ties_go_to_the_smaller():
    model = reviews.fit_baseline("tfidf", TRAIN, HELD_OUT, Cs=[100.0, 1.0, 10.0])
    assert list(model.validation) == [(1.0, 1.0), (10.0, 1.0), (100.0, 1.0)]
    assert model.C == 1.0  # all three are perfect on the toy


def test_nbsvm_interpolation_beta_one_is_the_plain_svm():
    model = reviews.fit_baseline("nbsvm", TRAIN, HELD_OUT, Cs=[1.0], betas=[1.0])
    assert model.beta == 1.0 and model.ratio.shape == model.weights.shape


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        (dict(kind="svm"), ValueError, "kind must be one of"),
        (dict(train=[]), ValueError, "train must be a non-empty list"),
        (dict(train="服务很好"), ValueError, "train must be a non-empty list"),
        (dict(validation=None), ValueError, "validation must be a non-empty list"),
        (dict(train=[(t, 1) for t in GOOD]), ValueError, "both classes"),
        (dict(train=TRAIN + [(3, 1)]), TypeError, r"train\[12\] must hold a non-empty str"),
        (dict(train=TRAIN + [("  ", 1)]), TypeError, r"train\[12\] must hold a non-empty str"),
        (dict(train=TRAIN + ["服务很好"]), TypeError, r"train\[12\] must be a \(text, label\)"),
        (dict(train=TRAIN + [("服务很好", 2)]), ValueError, r"pairs\[12\] has label 2"),
        (dict(ngrams=(2, 1)), ValueError, "ngrams must be a"),
        (dict(ngrams=[1, 3]), ValueError, "ngrams must be a"),
        (dict(Cs=[]), ValueError, "Cs must hold at least one"),
        (dict(Cs=1.0), TypeError, "Cs must be a list or tuple"),
        (dict(Cs=[1.0, -1.0]), ValueError, "each C must be a finite float > 0"),
        (dict(kind="nbsvm", betas=[1.5]), ValueError, r"betas must be numbers in \[0, 1\]"),
        (dict(kind="nbsvm", betas=0.25), TypeError, "betas must be a list or tuple"),
    ],
)
def test_fit_baseline_refuses_bad_input(kwargs, error, words):
    args = dict(kind="tfidf", train=TRAIN, validation=HELD_OUT) | kwargs
    with pytest.raises(error, match=words):
        reviews.fit_baseline(**args)


def test_a_fitted_baseline_refuses_a_bare_string():
    model = reviews.fit_baseline("tfidf", TRAIN, HELD_OUT, Cs=[1.0])
    with pytest.raises(TypeError, match="texts must be a list of str"):
        model.predict("服务很好")


def test_bootstrap_interval_brackets_the_accuracy():
    correct = np.arange(1000) % 5 != 0  # accuracy 0.8
    lo, hi = reviews.bootstrap_interval(correct)
    half = 1.96 * math.sqrt(0.8 * 0.2 / 1000)  # the normal approximation: about 0.025
    assert lo < 0.8 < hi and abs((hi - lo) / 2 - half) < 0.005
    assert reviews.bootstrap_interval(correct) == (lo, hi)  # seeded
    assert reviews.bootstrap_interval([True] * 10) == (1.0, 1.0)
    with pytest.raises(ValueError, match="1-d sequence of at least 2"):
        reviews.bootstrap_interval([True])
    with pytest.raises(ValueError, match=r"level must be in \(0, 1\)"):
        reviews.bootstrap_interval(correct, level=95)
