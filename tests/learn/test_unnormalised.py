"""tfx.learn.unnormalised: the A69 training harness (chapter 03)."""

import pytest
import torch

from tfx.learn.unnormalised import WEIGHTINGS, ReverseAttention, train_reverse


def test_only_softmax_rows_sum_to_one():
    s = torch.randn(2, 5, 5, dtype=torch.float64)
    for name, weigh in WEIGHTINGS.items():
        sums = weigh(s).sum(-1)
        assert torch.allclose(sums, torch.ones_like(sums)) == (name == "softmax")


def test_reversal_is_learnable_and_runs_are_deterministic():
    a = train_reverse("softmax", L=8, steps=150, lr=1e-2)
    b = train_reverse("softmax", L=8, steps=150, lr=1e-2)
    assert a.losses == b.losses and a.accuracy == b.accuracy
    assert a.finite and a.accuracy > 0.9 and a.losses[-1] < a.losses[0] / 4


def test_exp_without_sum_has_a_larger_first_gradient():
    soft = train_reverse("softmax", L=16, steps=2)
    exp = train_reverse("exp, no sum", L=16, steps=2)
    assert exp.first_grad_norm > 10 * soft.first_grad_norm


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="weighting must be one of"):
        ReverseAttention("relu", 4, 4, 4)
    with pytest.raises(ValueError, match="optimizer must be"):
        train_reverse("softmax", optimizer="lbfgs")
    with pytest.raises(ValueError, match="L must be an int >= 2, got 1"):
        train_reverse("softmax", L=1)
