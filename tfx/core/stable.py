"""Numbers a checked cell can print on any CPU.

PyTorch, oneDNN and numpy pick their kernels by instruction set (AVX2, AVX-512, AMX), and each
rounds differently. A difference between two ways of computing the same thing (an implementation
against a formula, autograd against a hand-written backward pass) is made of that rounding alone:
`4.8e-07` on one CPU is `5.1e-07` or `0.0e+00` on the next. What the reader needs from such a
number is that it is below a tolerance, which holds everywhere; so a cell that nbval checks prints
the bound it asserts, not the noise (CONTRIBUTING.md, "Outputs that hold on any CPU").
"""

import math

import torch

from tfx.core.checks import check_positive_float


def below(value, bound: float) -> str:
    """'< 1e-05' when |value| < bound, else the value itself ('3.2e-04'), which the cell's own
    assert then rejects. value: a float or a one-element tensor or array; NaN is never below."""
    check_positive_float(bound, "bound")
    if isinstance(value, torch.Tensor):
        value = value.detach()  # a residual of a graph: its value, without autograd's warning
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise TypeError(
            f"value must be a number or a one-element tensor, got {type(value).__name__}"
        ) from None
    if not math.isnan(v) and abs(v) < bound:
        return f"< {bound:.0e}"
    return f"{v:.1e}"
