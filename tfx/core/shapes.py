"""Shape printing and tracing: the book's way of making the data flow visible."""

from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn


def fmt_shape(shape) -> str:
    """(2, 8, 768) rather than torch.Size([2, 8, 768]): shorter, and the same for numpy."""
    return (
        "("
        + ", ".join("*" if d is None else str(d) for d in shape)
        + (",)" if len(shape) == 1 else ")")
    )


def check_shape(t, expected, name: str = "tensor") -> None:
    """Raise ValueError naming both shapes unless t matches expected (None matches any size)."""
    shape = tuple(t.shape)
    ok = len(shape) == len(expected) and all(e is None or e == s for s, e in zip(shape, expected))
    if not ok:
        raise ValueError(f"{name}: expected shape {fmt_shape(expected)}, got {fmt_shape(shape)}")


def _describe(t) -> tuple:
    if isinstance(t, torch.Tensor):
        dtype = str(t.dtype).replace("torch.", "")
        has_grad = (t.is_leaf or t.retains_grad) and t.grad is not None  # .grad of a non-leaf warns
        grad = f"{t.grad.norm().item():.4g}" if has_grad else ""
        return fmt_shape(t.shape), dtype, grad
    if isinstance(t, np.ndarray):
        return fmt_shape(t.shape), str(t.dtype), ""
    raise TypeError(f"show() takes tensors or arrays, got {type(t).__name__}")


def show(**tensors) -> None:
    """Print one aligned line per tensor: name, shape, dtype and, where .grad exists, its norm."""
    rows = [(name, *_describe(t)) for name, t in tensors.items()]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for name, shape, dtype, grad in rows:
        line = f"{name:<{widths[0]}}  {shape:<{widths[1]}}  {dtype:<{widths[2]}}"
        print((line + (f"  grad norm {grad}" if grad else "")).rstrip())


def _shapes(obj) -> str:
    """Shapes of whatever a module takes or returns: a tensor, a tuple of them, None."""
    if isinstance(obj, torch.Tensor):
        return fmt_shape(obj.shape)
    if isinstance(obj, (tuple, list)):
        inner = [_shapes(o) for o in obj]
        return ", ".join(s for s in inner if s)
    return ""


@contextmanager
def hooked(handles: list):
    """Leave the hooks behind `handles` on for the `with` block and take them off however it ends:
    a hook left on a module fires on every later call and keeps its closure alive. trace (chapter
    01) and the instruments of chapters 06 and 11 run a model under hooks this way."""
    try:
        yield
    finally:
        for h in handles:
            h.remove()


@dataclass
class TraceRow:
    path: str
    inputs: str
    outputs: str
    params: int


class TraceTable(list):
    """A list of TraceRow that prints as an aligned table."""

    def __str__(self) -> str:
        head = ("module", "input shapes", "output shapes", "params")
        rows = [head] + [(r.path, r.inputs, r.outputs, f"{r.params:,}") for r in self]
        w = [max(len(r[i]) for r in rows) for i in range(4)]
        lines = [f"{a:<{w[0]}}  {b:<{w[1]}}  {c:<{w[2]}}  {d:>{w[3]}}" for a, b, c, d in rows]
        lines.insert(1, "-" * len(lines[0]))
        return "\n".join(lines)

    def __repr__(self) -> str:
        return str(self)


def trace(model: nn.Module, *args, max_depth: int = None, **kwargs) -> TraceTable:
    """Run model(*args, **kwargs) once with forward hooks and return each module call in order.

    params counts the module's parameters including its children (shared ones once).
    """
    table, handles, open_rows = TraceTable(), [], []

    def before(path):
        def record(module, inputs, kwargs):
            # a row is reserved when the call starts, so parents print above their children
            n = sum(p.numel() for p in module.parameters())
            open_rows.append(TraceRow(path, _shapes([*inputs, *kwargs.values()]), "", n))
            table.append(open_rows[-1])

        return record

    def after(module, inputs, kwargs, output):
        open_rows.pop().outputs = _shapes(output)

    for path, module in model.named_modules():
        depth = sum(not part.isdigit() for part in path.split(".") if part)  # layers.0 is depth 1
        if max_depth is None or depth <= max_depth:
            handles.append(
                module.register_forward_pre_hook(
                    before(path or type(model).__name__), with_kwargs=True
                )
            )
            handles.append(module.register_forward_hook(after, with_kwargs=True))
    with hooked(handles), torch.no_grad():
        model(*args, **kwargs)
    return table
