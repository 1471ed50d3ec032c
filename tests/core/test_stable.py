"""tfx.core.stable.below: a checked cell prints the bound it asserts, never rounding noise."""

import warnings

import numpy as np
import pytest
import torch

from tfx.core.stable import below


def test_below_prints_the_bound_for_noise_and_the_value_otherwise():
    assert below(4.8e-07, 1e-5) == "< 1e-05"
    assert below(-4.8e-07, 1e-5) == "< 1e-05"  # a signed residual is judged by its size
    assert below(0.0, 1e-12) == "< 1e-12"
    assert below(torch.tensor(3.2e-4), 1e-5) == "3.2e-04"  # too big: the cell's assert says so
    assert below(np.float64(1e-5), 1e-5) == "1.0e-05"  # the bound itself is not below it
    assert below(float("nan"), 1e-5) == "nan"  # NaN is never below anything
    assert below(torch.tensor([2e-9]), 1e-6) == "< 1e-06"


def test_below_reads_a_tensor_of_a_graph_without_a_warning():
    x = torch.tensor([1.0], requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert below((x * 1e-8).sum(), 1e-6) == "< 1e-06"


def test_below_refuses_bad_input():
    with pytest.raises(TypeError, match="value must be a number"):
        below(torch.ones(3), 1e-5)
    with pytest.raises(TypeError, match="value must be a number"):
        below("small", 1e-5)
    with pytest.raises(ValueError, match="bound must be a finite float > 0"):
        below(1e-7, 0.0)
    with pytest.raises(TypeError, match="bound must be a positive float"):
        below(1e-7, "1e-5")
