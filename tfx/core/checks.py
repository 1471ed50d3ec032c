"""Input checks shared by the model modules: one clear message for each kind of mistake.

A wrong size, probability or id rarely fails where it is made: a negative dropout is skipped, a
negative id picks a row from the end of a table, a (B, L) mask is read as (L, L) when B == L. These
helpers refuse such input where it enters, and every message names the argument, what was expected
and what was given.
"""

import math
import numbers

import numpy as np
import torch


def _type_name(value) -> str:
    t = type(value)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__name__}"


def check_int(value, name: str, minimum: int = 1) -> int:
    """An integer (not a bool, not a float) of at least `minimum`: sizes, counts, lengths."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {value!r} ({_type_name(value)})")
    if value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value}")
    return int(value)


def check_probability(p, name: str) -> float:
    """A dropout probability: a real number with 0 <= p <= 1."""
    if isinstance(p, bool) or not isinstance(p, numbers.Real):
        raise TypeError(f"{name} must be a float in [0, 1], got {p!r} ({_type_name(p)})")
    if not 0.0 <= p <= 1.0:  # also refuses NaN
        raise ValueError(f"{name} must be a probability, 0 <= {name} <= 1, got {p}")
    return float(p)


def check_positive_float(x, name: str) -> float:
    """A finite real number > 0, such as LayerNorm's eps."""
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise TypeError(f"{name} must be a positive float, got {x!r} ({_type_name(x)})")
    if not (x > 0 and math.isfinite(x)):
        raise ValueError(f"{name} must be a finite float > 0, got {x}")
    return float(x)


def check_bool(x, name: str) -> bool:
    if not isinstance(x, bool):
        raise TypeError(f"{name} must be True or False, got {x!r} ({_type_name(x)})")
    return x


def check_tensor(t, name: str, floating: bool = False) -> torch.Tensor:
    """A torch.Tensor, not a numpy array or a list (which would fail deep inside a matmul)."""
    if not isinstance(t, torch.Tensor):
        hint = " (convert it with torch.as_tensor)" if isinstance(t, (np.ndarray, list)) else ""
        raise TypeError(f"{name} must be a torch.Tensor, got {_type_name(t)}{hint}")
    if floating and not t.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor, got dtype {t.dtype}")
    return t


def check_dtype(t: torch.Tensor, dtype: torch.dtype, name: str, what: str) -> None:
    """t must have the dtype of `what` (e.g. "the module's parameters"), unless autocast is on."""
    if t.dtype != dtype and not torch.is_autocast_enabled(t.device.type):
        raise ValueError(
            f"{name} has dtype {t.dtype} but {what} have dtype {dtype}; convert one to the other"
        )


def check_ids(ids, name: str, size: int, what: str = "the vocabulary") -> None:
    """Integer ids with 0 <= id < size, for a torch tensor or a numpy array.

    An embedding lookup fails on a large id with "index out of range in self", and numpy takes a
    negative id silently from the end of the table: name the value and the table's size instead.
    """
    if isinstance(ids, torch.Tensor):
        integer = not (ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool)
    elif isinstance(ids, np.ndarray):
        integer = np.issubdtype(ids.dtype, np.integer)
    else:
        raise TypeError(f"{name} must be a tensor of integer ids, got {_type_name(ids)}")
    if not integer:
        raise ValueError(f"{name} must hold integer ids, got dtype {ids.dtype}")
    if ids.reshape(-1).shape[0] == 0:
        return  # nothing to look up
    lo, hi = int(ids.min()), int(ids.max())
    if lo < 0 or hi >= size:
        bad = lo if lo < 0 else hi
        raise ValueError(
            f"{name} holds the id {bad}, outside {what} of size {size} (valid ids: 0..{size - 1})"
        )
