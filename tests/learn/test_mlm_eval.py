"""tfx.learn.mlm_eval: kinds of scored positions, scores by kind, the copy rule and the
bidirectional bigram on hand-made rows whose answers are known, and bad arguments."""

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


def test_baselines_on_hand_made_rows():
    inputs, labels = held_out()
    b = mlm_eval.baselines(rows(), inputs, labels, MASK, SPECIAL)
    assert b["copy rule"]["unchanged"]["accuracy"] == 1.0
    assert b["copy rule"]["random"]["accuracy"] == 0.0
    assert b["bigram"]["mask"]["accuracy"] == 1.0
    assert b["bigram"]["mask"]["cross_entropy"] < 0.1


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
    from tfx.model.bert import BertConfig, BertForMaskedLM

    model = BertForMaskedLM(BertConfig.tiny(vocab_size=V, d_model=16, n_heads=2, d_ff=32))
    with pytest.raises(ValueError, match="no scored position"):
        mlm_eval.model_log_probs(model, [(inputs, torch.full_like(labels, IGNORE))], MASK)
