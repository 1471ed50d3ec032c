"""Gradient reports: where the gradient went, how big it was, and why some parameter got none."""

import re
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn as nn

from tfx.shapes import fmt_shape


@dataclass
class GradRow:
    name: str
    shape: tuple
    norm: float  # None when the parameter has no .grad


class GradTable(list):
    """A list of GradRow that prints as an aligned table; missing gradients print as 'None'."""

    def __str__(self) -> str:
        rows = [("parameter", "shape", "grad norm")]
        rows += [
            (r.name, fmt_shape(r.shape), "None" if r.norm is None else f"{r.norm:.4g}")
            for r in self
        ]
        w = [max(len(r[i]) for r in rows) for i in range(3)]
        lines = [f"{a:<{w[0]}}  {b:<{w[1]}}  {c:>{w[2]}}" for a, b, c in rows]
        lines.insert(1, "-" * len(lines[0]))
        return "\n".join(lines)

    def __repr__(self) -> str:
        return str(self)


def grad_norms(model: nn.Module) -> GradTable:
    """The L2 norm of every parameter's gradient, in registration order."""
    return GradTable(
        GradRow(name, tuple(p.shape), None if p.grad is None else p.grad.norm().item())
        for name, p in model.named_parameters()
    )


def layer_grad_norms(model: nn.Module, pattern: str = r"layers\.(\d+)\.") -> dict:
    """Total gradient norm per layer index, sqrt(Σ‖g‖²) over the parameters whose name matches pattern.

    The per-layer view is what tells post-LN from pre-LN at depth, so it gets its own helper.
    """
    sq = defaultdict(float)
    for name, p in model.named_parameters():
        m = re.search(pattern, name)
        if m and p.grad is not None:
            sq[int(m.group(1))] += p.grad.pow(2).sum().item()
    return {i: sq[i] ** 0.5 for i in sorted(sq)}


class ActivationGrads:
    """Filled by record_activation_grads: .grads[name] is d(loss)/d(output of that module)."""

    def __init__(self):
        self.grads = {}

    def norms(self) -> dict:
        return {name: g.norm().item() for name, g in self.grads.items()}


def _first_tensor(output):
    return output[0] if isinstance(output, (tuple, list)) else output


@contextmanager
def record_activation_grads(modules: dict):
    """Record the gradient of each module's output (the first tensor it returns) during backward.

    Parameters only show where the gradient ended up; activations show it on its way through the network.
    """
    rec, handles = ActivationGrads(), []

    def hook(name):
        def on_forward(module, inputs, output):
            out = _first_tensor(output)
            if isinstance(out, torch.Tensor) and out.requires_grad:
                out.register_hook(lambda g: rec.grads.__setitem__(name, g.detach()))

        return on_forward

    for name, module in modules.items():
        handles.append(module.register_forward_hook(hook(name)))
    try:
        yield rec
    finally:
        for h in handles:
            h.remove()


@dataclass
class GradIssue:
    name: str
    reason: str


def diagnose_missing_grads(model: nn.Module, loss_fn) -> list:
    """Run loss_fn() and backward, then name every parameter left without a gradient, and why.

    The causes a reader meets in practice: a frozen parameter, a module run under torch.no_grad(),
    a module never called, or an output cut off from the loss (detach(), .item(), unused).
    """
    calls = defaultdict(list)  # module → [(grad enabled?, output has grad_fn?)]
    reached = set()  # modules whose output received a gradient
    handles = []

    def on_forward(module, inputs, output):
        out = _first_tensor(output)
        tracked = isinstance(out, torch.Tensor) and out.requires_grad
        calls[module].append((torch.is_grad_enabled(), tracked))
        if tracked:
            out.register_hook(lambda g: reached.add(module))

    for m in model.modules():
        handles.append(m.register_forward_hook(on_forward))
    model.zero_grad(set_to_none=True)
    try:
        loss = loss_fn()
    finally:
        for h in handles:
            h.remove()
    if loss.requires_grad:
        loss.backward()

    owner = {}  # parameter name → the innermost module that owns it
    for mname, m in model.named_modules():
        for pname, _ in m.named_parameters(recurse=False):
            owner[f"{mname}.{pname}" if mname else pname] = m
    issues = []
    for name, p in model.named_parameters():
        if p.grad is not None:
            continue
        m = owner[name]
        if not p.requires_grad:
            reason = "requires_grad is False (frozen)"
        elif not loss.requires_grad:
            reason = "the loss itself has no grad_fn: it was computed under no_grad or detached"
        elif not calls[m]:
            reason = f"its module ({type(m).__name__}) was never called in the forward pass"
        elif not any(enabled for enabled, _ in calls[m]):
            reason = f"its module ({type(m).__name__}) ran under torch.no_grad()"
        elif m not in reached:
            reason = f"the output of its module ({type(m).__name__}) never reached the loss (detach() or unused)"
        else:
            reason = "its gradient path was cut inside the module"
        issues.append(GradIssue(name, reason))
    return issues
