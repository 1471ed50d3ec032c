"""Gradient reports: where the gradient went, how big it was, and why some parameter got none."""

import re
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn as nn

from tfx.core.shapes import fmt_shape, hooked


@dataclass
class GradRow:
    name: str
    shape: tuple
    norm: float  # None when the parameter has no .grad
    kind: str = "parameter"  # or "activation" (a tensor the gradient passes through)


class GradTable(list):
    """A list of GradRow that prints as an aligned table; missing gradients print as 'None'.

    A table that mixes activations and parameters (trace_backward) gets a first column saying which.
    """

    def __str__(self) -> str:
        return self.table()

    def table(self, digits: int = 4) -> str:
        """The aligned table, norms to `digits` significant digits (a float16 gradient carries
        about three, so its table is printed with fewer: more would print rounding noise)."""
        if isinstance(digits, bool) or not isinstance(digits, int) or not 1 <= digits <= 17:
            raise ValueError(f"digits must be an int from 1 to 17, got {digits!r}")
        mixed = any(r.kind != "parameter" for r in self)
        rows = [("parameter", "shape", "grad norm")]
        rows += [
            (r.name, fmt_shape(r.shape), "None" if r.norm is None else f"{r.norm:.{digits}g}")
            for r in self
        ]
        if mixed:
            rows = [("", "name", "shape", "grad norm")] + [
                (r.kind, *row) for r, row in zip(self, rows[1:])
            ]
        w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = [
            "  ".join(
                f"{c:>{w[i]}}" if i == len(row) - 1 else f"{c:<{w[i]}}" for i, c in enumerate(row)
            )
            for row in rows
        ]
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
    """Total gradient norm per layer index: sqrt(Σ‖g‖²) over the parameters whose name matches
    pattern (group 1 is the layer index).

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

    Parameters only show where the gradient ended up; activations show it on its way through the
    network.
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
    with hooked(handles):
        yield rec


@dataclass
class GradIssue:
    name: str
    reason: str


def diagnose_missing_grads(model: nn.Module, loss_fn) -> list:
    """Run loss_fn() and backward, then name every parameter left without a gradient, and why.

    The causes a reader meets in practice: a frozen parameter, a module run under torch.no_grad(),
    a module never called, a module output cut off by detach() or .data (seen by watching every
    torch call of the forward), or an output that is never used.
    """
    watch = _ForwardWatch()
    handles = [m.register_forward_hook(watch.on_forward) for m in model.modules()]
    model.zero_grad(set_to_none=True)
    with hooked(handles), _BreakMode(watch.on_break):
        loss = loss_fn()
    if loss.requires_grad:
        loss.backward()
    owners = param_owners(model)
    return [
        GradIssue(name, _why_no_grad(p, owners[name][1], loss, watch))
        for name, p in model.named_parameters()
        if p.grad is None
    ]


class _ForwardWatch:
    """What diagnose_missing_grads sees of the forward pass, through a hook on every module and a
    watch on every torch call, and of the backward after it. Once backward is over, a module never
    called, one run under no_grad and one whose output was detached all leave the same trace (no
    .grad); only the forward tells them apart."""

    def __init__(self):
        self.calls = defaultdict(list)  # module → [(grad enabled?, output has grad_fn?)]
        self.reached = set()  # modules whose output received a gradient
        # autograd node of a module's output → the modules that returned it
        self.owner_of = defaultdict(list)
        self.cut = {}  # module → how a tensor computed from its output was cut off autograd

    def on_forward(self, module, inputs, output):
        out = _first_tensor(output)
        tracked = isinstance(out, torch.Tensor) and out.requires_grad
        self.calls[module].append((torch.is_grad_enabled(), tracked))
        if tracked:
            if out.grad_fn is not None:
                self.owner_of[out.grad_fn].append(module)
            out.register_hook(lambda g: self.reached.add(module))

    def on_break(self, src, out, cause):
        # every module upstream of the tensor that was cut: walk its autograd graph back
        seen, todo = set(), [src.grad_fn]
        while todo:
            node = todo.pop()
            if node is None or node in seen:
                continue
            seen.add(node)
            for m in self.owner_of.get(node, ()):
                self.cut.setdefault(m, cause)
            todo.extend(n for n, _ in node.next_functions)


def _why_no_grad(p, m, loss, watch: _ForwardWatch) -> str:
    """Why parameter p, owned by module m, got no gradient. The causes are tried from the one that
    decides regardless of the forward pass (frozen, a loss with no graph) to the ones only the
    forward shows (never called, no_grad, a cut output, an unused one)."""
    kind = type(m).__name__
    if not p.requires_grad:
        return "requires_grad is False (frozen)"
    if not loss.requires_grad:
        return "the loss itself has no grad_fn: it was computed under no_grad or detached"
    if not watch.calls[m]:
        return f"its module ({kind}) was never called in the forward pass"
    if not any(enabled for enabled, _ in watch.calls[m]):
        return f"its module ({kind}) ran under torch.no_grad()"
    if m not in watch.reached and m in watch.cut:
        return (
            f"the output of its module ({kind}) was cut off on its way to the loss "
            f"by {watch.cut[m]}"
        )
    if m not in watch.reached:
        return f"the output of its module ({kind}) never reached the loss (unused)"
    return "its gradient path was cut inside the module"


def param_owners(model: nn.Module) -> dict:
    """{parameter name: (module name, the module that owns it)}, for the names of
    model.named_parameters(): a parameter's own module is the one whose calls, kind and block say
    why it got no gradient (diagnose_missing_grads) or what it is (tfx.inspect.diagnose)."""
    by_id = {}
    for mname, m in model.named_modules():
        for p in m.parameters(recurse=False):
            by_id.setdefault(id(p), (mname, m))
    return {name: by_id[id(p)] for name, p in model.named_parameters()}


# ---- chapter 06: following the gradient backwards, and naming where it stopped -------------------


class BackwardTrace:
    """Filled by trace_backward: every watched activation and parameter, in the order its gradient
    arrived during backward, which is the order from the loss back to the input."""

    def __init__(self):
        self.rows = []  # GradRow, appended as each gradient arrives

    def table(self) -> GradTable:
        return GradTable(self.rows)


@contextmanager
def trace_backward(model: nn.Module, modules: dict = None, tensors: dict = None):
    """Record the gradient of each module's output, of each named tensor and of each parameter of
    model, in the order backward reaches them.

    modules: {name: module}, the output of each (its first tensor) is watched on every call;
    tensors: {name: tensor} that requires grad (the input, say). A parameter row's norm is that of
    its accumulated .grad. One forward and one backward inside the `with`: the hooks are removed at
    its end. The printed table then reads top to bottom as the gradient travels.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    for name, t in (tensors or {}).items():
        if not isinstance(t, torch.Tensor) or not t.requires_grad:
            raise ValueError(
                f"tensors[{name!r}] must be a tensor that requires grad, got {t!r:.60}"
            )
    trace, handles = BackwardTrace(), []

    def on_grad(name, kind):
        def hook(g):
            trace.rows.append(GradRow(name, tuple(g.shape), g.norm().item(), kind))

        return hook

    def on_forward(name):
        def hook(module, inputs, output):
            out = _first_tensor(output)
            if isinstance(out, torch.Tensor) and out.requires_grad:
                out.register_hook(on_grad(name, "activation"))

        return hook

    for name, module in (modules or {}).items():
        handles.append(module.register_forward_hook(on_forward(name)))
    for name, t in (tensors or {}).items():
        handles.append(t.register_hook(on_grad(name, "activation")))
    for name, p in model.named_parameters():
        if p.requires_grad:
            handles.append(
                p.register_post_accumulate_grad_hook(
                    lambda p, name=name: trace.rows.append(
                        GradRow(name, tuple(p.shape), p.grad.norm().item(), "parameter")
                    )
                )
            )
    with hooked(handles):
        yield trace


def attention_grad_norms(mha) -> dict:
    """Gradient norms of W_Q, W_K, W_V, W_O and their biases, read out of the fused qkv projection.

    tfx stores [W_Q; W_K; W_V] as one (3d, d) Linear, so a plain table shows one number for all
    three; the chapter needs them apart (W_Q and W_K get far smaller gradients than W_V at
    initialisation).
    """
    for name in ("qkv", "out"):
        if not isinstance(getattr(mha, name, None), nn.Linear):
            raise TypeError(
                f"mha must be a tfx MultiHeadAttention (with .qkv and .out), got {mha!r:.60}"
            )
    if mha.qkv.weight.grad is None or mha.out.weight.grad is None:
        raise ValueError("mha has no gradients yet: run a backward pass first")
    d = mha.d_model
    gw, gb = mha.qkv.weight.grad, mha.qkv.bias
    norms = {f"W_{n}": gw[i * d : (i + 1) * d].norm().item() for i, n in enumerate("QKV")}
    norms["W_O"] = mha.out.weight.grad.norm().item()
    if gb is not None and gb.grad is not None:
        norms.update(
            {f"b_{n}": gb.grad[i * d : (i + 1) * d].norm().item() for i, n in enumerate("QKV")}
        )
        norms["b_O"] = mha.out.bias.grad.norm().item()
    return norms


_DATA_GET = torch.Tensor.data.__get__


class _BreakMode(torch.overrides.TorchFunctionMode):
    """Sees every torch call of a forward pass and notes the ones that cut a tensor off autograd."""

    def __init__(self, on_break):
        super().__init__()
        self.on_break = on_break

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        ins = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
        if ins and isinstance(out, torch.Tensor) and not out.requires_grad:
            if func is torch.Tensor.detach:
                cause = "detach()"
            elif func == _DATA_GET:
                cause = ".data"
            elif not torch.is_grad_enabled():
                cause = f"{getattr(func, '__name__', 'an op')} under torch.no_grad()"
            else:
                cause = f"{getattr(func, '__name__', 'an op')} (not differentiable)"
            self.on_break(ins[0], out, cause)
        return out


class GradBreaks:
    """Filled by watch_grad_breaks: each tensor cut off autograd inside the `with`, and why."""

    def __init__(self):
        self._cause = torch.utils.weak.WeakIdKeyDictionary()  # tensor → cause
        self.events = []  # causes in the order they happened

    def cause(self, t: torch.Tensor):
        """Why t does not require grad although it was computed from a tensor that does; None if
        the watcher did not see it cut."""
        return self._cause.get(t)


@contextmanager
def watch_grad_breaks():
    """Instrument a forward pass: every op whose inputs require grad but whose output does not is
    recorded with its cause (detach(), .data, an op under torch.no_grad()).

    After the fact a tensor cut by detach() and one computed under no_grad look the same (no
    grad_fn, requires_grad False); only watching the forward tells them apart, as this does.
    """
    rec = GradBreaks()

    def on_break(src, out, cause):
        rec._cause[out] = cause
        rec.events.append(cause)

    with _BreakMode(on_break):
        yield rec


def explain_missing_grads(tensors: dict, breaks: GradBreaks = None) -> list:
    """After backward: name every tensor in {name: tensor} whose .grad is None, and the cause.

    What can be told from the tensor alone: a non-leaf (x * 2, x.to(torch.float64)) never gets .grad
    (autograd fills leaves only); a leaf with requires_grad False was never tracked; a tracked leaf
    with no .grad never reached the loss. Whether a tensor was cut by detach() or computed under
    no_grad cannot be told afterwards: pass the GradBreaks of watch_grad_breaks() to get that too.
    """
    if not isinstance(tensors, dict):
        raise TypeError(f"tensors must be a dict {{name: tensor}}, got {type(tensors).__name__}")
    issues = []
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"tensors[{name!r}] must be a tensor, got {type(t).__name__}")
        if t.is_leaf or t.retains_grad:  # reading .grad of a plain non-leaf only warns
            if t.grad is not None:
                continue
        seen = breaks.cause(t) if breaks is not None else None
        if not t.is_leaf and not t.retains_grad:
            reason = (
                f"non-leaf tensor (grad_fn={type(t.grad_fn).__name__}): autograd fills .grad of "
                "leaves only; call .retain_grad() before backward, or read the leaf it came from"
            )
        elif seen is not None:
            reason = f"cut off autograd by {seen} in the forward pass"
        elif not t.requires_grad:
            reason = (
                "requires_grad is False: never set, or produced by detach() or under "
                "torch.no_grad() (indistinguishable after the fact; watch the forward with "
                "watch_grad_breaks())"
            )
        else:
            reason = "requires grad but never reached the loss (unused, or its path was cut later)"
        issues.append(GradIssue(name, reason))
    return issues


def max_min_report(model: nn.Module) -> str:
    """The source article's gradient check (N28), ported from TensorFlow to PyTorch unchanged: for
    each parameter, "No gradient" or its gradient's max and min printed to 4 decimals.

    Kept to show what it misses: the extremes of one tensor at a fixed 4 decimals say little about a
    layer's gradient as a whole; per-layer norms (layer_grad_norms) are the diagnostic.
    """
    lines = []
    for name, p in model.named_parameters():
        if p.grad is None:
            lines.append(f"No gradient for {name}")
        else:
            lines.append(f"{name}: max={p.grad.max().item():.4f}, min={p.grad.min().item():.4f}")
    return "\n".join(lines)
