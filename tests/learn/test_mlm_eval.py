"""tfx.learn.mlm_eval: kinds of scored positions, scores by kind, the copy rule, the
bidirectional bigram and the window count model on hand-made rows whose answers are known, and bad
arguments."""

import math

import pytest
import torch

from tfx.learn import mlm_eval
from tfx.learn.mlm import IGNORE

PAD, UNK, CLS, SEP, MASK = range(5)
SPECIAL = [PAD, UNK, CLS, SEP, MASK]
V = 9


def rows():
    """Training rows where 5 is always followed by 6, 6 by 7, and 8 appears once."""
    return torch.tensor(
        [
            [CLS, 5, 6, 7, SEP, PAD],
            [CLS, 5, 6, 7, SEP, PAD],
            [CLS, 8, 5, 6, 7, SEP],
        ]
    )


def held_out():
    # row 0: 6 masked between 5 and 7; 7 replaced by 8 (random); 5 kept (unchanged)
    inputs = torch.tensor([[CLS, 5, MASK, 8, SEP, PAD], [CLS, 5, 6, 7, SEP, PAD]])
    labels = torch.full_like(inputs, IGNORE)
    labels[0, 2], labels[0, 3], labels[1, 1] = 6, 7, 5
    return inputs, labels


def test_position_kinds():
    inputs, labels = held_out()
    assert mlm_eval.position_kinds(inputs, labels, MASK).tolist() == [0, 1, 2]


def test_score_by_kind_and_predictions():
    targets = torch.tensor([6, 7, 5])
    kinds = torch.tensor([0, 1, 2])
    logp = torch.full((3, V), -20.0)
    logp[0, 6] = logp[1, 8] = logp[2, 5] = 0.0  # right, wrong, right
    logp = logp.log_softmax(-1)
    s = mlm_eval.score(logp, targets, kinds)
    assert s["all"]["n"] == 3 and s["all"]["accuracy"] == pytest.approx(2 / 3)
    assert s["mask"]["accuracy"] == 1.0 and s["random"]["accuracy"] == 0.0
    assert s["mask"]["cross_entropy"] == pytest.approx(-float(logp[0, 6]))
    ids = mlm_eval.score(torch.tensor([6, 7, 0]), targets, kinds)
    assert ids["unchanged"]["accuracy"] == 0.0 and ids["mask"]["cross_entropy"] is None


def test_copy_rule_copies_and_falls_back():
    inputs, labels = held_out()
    assert mlm_eval.copy_rule(inputs, labels, MASK, fallback_id=7).tolist() == [7, 8, 5]


def test_bigram_reads_both_neighbours():
    log_next = mlm_eval.bigram_log_probs(rows(), V)
    assert log_next.shape == (V, V)
    assert torch.allclose(log_next.exp().sum(1), torch.ones(V, dtype=torch.float64))
    inputs, labels = held_out()
    post = mlm_eval.bigram_posterior(log_next, inputs, labels, MASK, exclude=SPECIAL)
    assert post.shape == (3, V)
    assert post[0].argmax() == 6  # 5 _ 8: only 6 follows 5
    assert post[2].argmax() == 5  # [CLS] _ 6: 5 follows [CLS] and precedes 6
    assert math.isinf(float(post[0, MASK]))


def one_scored(inputs: list, col: int, label: int):
    """One held-out row with a single scored position."""
    x = torch.tensor([inputs])
    y = torch.full_like(x, IGNORE)
    y[0, col] = label
    return x, y


def window(inputs, labels, **kw):
    return mlm_eval.window_log_probs(rows(), inputs, labels, V, MASK, SPECIAL, **kw)


def test_window_is_a_distribution_over_ordinary_ids():
    inputs, labels = held_out()
    logp = window(inputs, labels)
    assert logp.shape == (3, V) and logp.dtype == torch.float32
    assert torch.allclose(logp.double().exp().sum(1), torch.ones(3, dtype=torch.float64))
    assert torch.isinf(logp[:, SPECIAL]).all() and torch.isfinite(logp[:, 5:]).all()


def test_window_matches_witten_bell_by_hand():
    # 5 _ 7 with one character a side: P_L(c | 5) · P_R(c | before 7) / P(c), each side
    # Witten-Bell: 5 was followed by 6 three times (C = 3, T = 1), 7 preceded by 6 three times
    inputs, labels = one_scored([CLS, 5, MASK, 7, SEP, PAD], 2, 6)
    logp = window(inputs, labels, width=1, exponent=1.0)
    counts = torch.tensor([0, 0, 0, 0, 0, 3, 3, 3, 1], dtype=torch.float64)  # ordinary ids 5..8
    uniform = torch.tensor([0.0] * 5 + [0.25] * 4, dtype=torch.float64)
    unigram = (counts + 4 * uniform) / (10 + 4)  # T = 4 distinct characters
    one_hot = torch.zeros(V, dtype=torch.float64)
    one_hot[6] = 1.0
    side = (3 * one_hot + unigram) / (3 + 1)
    want = side * side / unigram.clamp(min=1e-300)
    want = want * (uniform > 0) / (want * (uniform > 0)).sum()
    assert torch.allclose(logp[0].double().exp(), want, atol=1e-6)
    assert float(logp[0, 6].exp()) > 0.9  # a context seen only with 6 predicts 6


def test_window_backs_off_from_an_unseen_context():
    # "7 5 _" never occurs in training, "5 _" does: the longer context adds nothing
    unseen, labels = one_scored([CLS, 7, 5, MASK, MASK, PAD], 3, 6)
    short, _ = one_scored([MASK, MASK, 5, MASK, MASK, PAD], 3, 6)
    a, b = window(unseen, labels), window(short, labels)
    assert torch.allclose(a, b) and int(a.argmax()) == 6


def test_window_reads_neither_masked_neighbours_nor_the_target():
    # past a [MASK] a side ends; at a random or unchanged position the input token is not read
    a, labels = one_scored([CLS, 5, MASK, MASK, SEP, PAD], 3, 7)
    b, _ = one_scored([CLS, 8, 6, MASK, SEP, PAD], 3, 7)
    c, _ = one_scored([CLS, 8, 6, 8, SEP, PAD], 3, 7)
    d, _ = one_scored([CLS, 8, 6, 7, SEP, PAD], 3, 7)
    assert torch.allclose(window(a, labels), window(a.where(a != 5, 8), labels))
    assert torch.equal(window(b, labels), window(c, labels))
    assert torch.equal(window(c, labels), window(d, labels))
    assert int(window(d, labels).argmax()) == 7  # 8 6 _ [SEP]: 7 comes after 6, before [SEP]


def test_window_gives_an_unseen_character_a_finite_cross_entropy():
    inputs, labels = one_scored([CLS, 5, MASK, 7, SEP, PAD], 2, 9)  # id 9: never in training
    logp = mlm_eval.window_log_probs(rows(), inputs, labels, 10, MASK, SPECIAL)
    s = mlm_eval.score(logp, labels[labels != IGNORE], torch.zeros(1, dtype=torch.long))
    assert math.isfinite(s["mask"]["cross_entropy"]) and s["mask"]["cross_entropy"] > 2


def test_baselines_on_hand_made_rows():
    inputs, labels = held_out()
    b = mlm_eval.baselines(rows(), inputs, labels, MASK, SPECIAL)
    assert b["copy rule"]["unchanged"]["accuracy"] == 1.0
    assert b["copy rule"]["random"]["accuracy"] == 0.0
    assert b["bigram"]["mask"]["accuracy"] == 1.0
    assert b["bigram"]["mask"]["cross_entropy"] < 0.1
    assert b["window counts"]["mask"]["accuracy"] == 1.0
    assert b["window counts"]["all"]["n"] == 3


def test_model_log_probs_and_evaluate():
    from tfx.model.bert import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    model = BertForMaskedLM(BertConfig.tiny(vocab_size=V, d_model=16, n_heads=2, d_ff=32))
    inputs, labels = held_out()
    logp, targets, kinds = mlm_eval.model_log_probs(model, [(inputs, labels)], MASK, SPECIAL)
    assert logp.shape == (3, V) and targets.tolist() == [6, 7, 5] and kinds.tolist() == [0, 1, 2]
    assert math.isinf(float(logp[0, PAD])) and model.training  # train mode restored
    s = mlm_eval.evaluate(model, [(inputs, labels)], MASK, SPECIAL)
    assert s["all"]["n"] == 3 and s["mask"]["cross_entropy"] > 0


def test_bad_arguments():
    inputs, labels = held_out()
    with pytest.raises(TypeError, match="inputs"):
        mlm_eval.position_kinds(inputs.tolist(), labels, MASK)
    with pytest.raises(ValueError, match="labels"):
        mlm_eval.position_kinds(inputs, labels[:1], MASK)
    with pytest.raises(ValueError, match="targets is empty"):
        mlm_eval.score(torch.zeros(0, V), torch.zeros(0, dtype=torch.long), torch.zeros(0))
    with pytest.raises(ValueError, match="one row each"):
        mlm_eval.score(torch.zeros(2, V), torch.zeros(3, dtype=torch.long), torch.zeros(3))
    with pytest.raises(TypeError, match="vocab_size"):
        mlm_eval.bigram_log_probs(rows(), 9.0)
    with pytest.raises(ValueError, match="vocab_size=4"):
        mlm_eval.bigram_log_probs(rows(), 4)
    with pytest.raises(ValueError, match="smoothing"):
        mlm_eval.bigram_log_probs(rows(), V, smoothing=0)
    with pytest.raises(ValueError, match="log_next"):
        mlm_eval.bigram_posterior(torch.zeros(3, 4), inputs, labels, MASK)
    with pytest.raises(TypeError, match="model"):
        mlm_eval.model_log_probs(None, [(inputs, labels)], MASK)
    w = mlm_eval.window_log_probs
    with pytest.raises(TypeError, match="train_ids"):
        w(rows().tolist(), inputs, labels, V, MASK, SPECIAL)
    with pytest.raises(ValueError, match="train_ids must be a \\(N, L\\) long"):
        w(rows()[0], inputs, labels, V, MASK, SPECIAL)
    with pytest.raises(ValueError, match="train_ids holds the id 8"):
        w(rows(), inputs, labels, 8, MASK, SPECIAL)
    with pytest.raises(TypeError, match="vocab_size"):
        w(rows(), inputs, labels, 9.0, MASK, SPECIAL)
    with pytest.raises(ValueError, match="labels"):
        w(rows(), inputs, labels[:, :3], V, MASK, SPECIAL)
    with pytest.raises(ValueError, match="width must be an int >= 1, got 0"):
        w(rows(), inputs, labels, V, MASK, SPECIAL, width=0)
    with pytest.raises(ValueError, match="exponent"):
        w(rows(), inputs, labels, V, MASK, SPECIAL, exponent=0.0)
    with pytest.raises(ValueError, match="mask_id"):
        w(rows(), inputs, labels, V, V, SPECIAL)
    with pytest.raises(ValueError, match="no scored position"):
        w(rows(), inputs, torch.full_like(labels, IGNORE), V, MASK, SPECIAL)
    with pytest.raises(ValueError, match="special id 3"):
        w(rows(), inputs, labels.where(labels != 7, SEP), V, MASK, SPECIAL)
    with pytest.raises(ValueError, match="no ordinary id"):
        w(torch.full((2, 4), PAD), inputs, labels, V, MASK, SPECIAL)
    from tfx.model.bert import BertConfig, BertForMaskedLM

    model = BertForMaskedLM(BertConfig.tiny(vocab_size=V, d_model=16, n_heads=2, d_ff=32))
    with pytest.raises(ValueError, match="no scored position"):
        mlm_eval.model_log_probs(model, [(inputs, torch.full_like(labels, IGNORE))], MASK)
