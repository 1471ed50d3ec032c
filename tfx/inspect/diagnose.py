"""Diagnostics a reader runs on their own model: each names one way a Transformer quietly breaks.

Every function returns a Finding: `fired` says whether the bug is there, `detail` names what was
found (the module, the position pair, the parameters). They work on plain PyTorch modules, on tfx's
models and on Hugging Face's BERT, seed their own generator, and print no raw float noise, so a
chapter can show their verdicts on any CPU. The catalogue of bugs they confirm is tfx.zoo.bugzoo.

Built in chapter 11.
"""

import math
import numbers
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn

from tfx.core.checks import check_int, check_tensor
from tfx.core.shapes import fmt_shape, hooked
from tfx.inspect.grads import (
    diagnose_missing_grads,
    explain_missing_grads,
    param_owners,
    watch_grad_breaks,
)


@dataclass(frozen=True)
class Finding:
    """The verdict of one diagnostic: check (its name), fired, and a line or two of detail."""

    check: str
    fired: bool
    detail: str

    def __str__(self) -> str:
        return f"{'FIRED' if self.fired else 'quiet'} {self.check}: {self.detail}"


def _output(result) -> torch.Tensor:
    """The tensor a module or function returned: the first of a tuple, a Hugging Face output's
    logits or last hidden state."""
    for key in ("logits", "last_hidden_state"):
        if hasattr(result, key) and isinstance(getattr(result, key), torch.Tensor):
            return getattr(result, key)
    if isinstance(result, (tuple, list)):
        result = result[0]
    if not isinstance(result, torch.Tensor):
        raise TypeError(f"expected the call to return a tensor, got {type(result).__name__}")
    return result


def _names(names, most: int = 4) -> str:
    names = list(names)
    shown = ", ".join(names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


class _eval:
    """Run a module in eval mode (dropout off), restoring its mode afterwards."""

    def __init__(self, model):
        self.model = model if isinstance(model, nn.Module) else None

    def __enter__(self):
        if self.model is not None:
            self.was = self.model.training
            self.model.eval()

    def __exit__(self, *exc):
        if self.model is not None:
            self.model.train(self.was)


# ---- the attention kernel ------------------------------------------------------------------


def _reference(q, k, v, mask=None, scale=None, dim=-1):
    """softmax(q kᵀ · scale) v over `dim`, a fully masked row giving zeros (the suspects are
    this with one thing changed)."""
    scale = 1.0 / math.sqrt(q.size(-1)) if scale is None else scale
    scores = q @ k.transpose(-2, -1) * scale  # (B, H, L, L)
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    w = scores.softmax(dim=dim)  # (B, H, L, L)
    if mask is not None:
        w = w * mask
    return w @ v  # (B, H, L, d_k)


_KERNEL_TOL = 1e-6  # q, k, v are float64: a right kernel's rounding noise is far below it


def _max_err(a, b) -> float:
    """The largest entry of |a − b|, or inf when a holds a non-finite value: every comparison with
    NaN is False, so a NaN would otherwise pass as close."""
    return (a - b).abs().max().item() if torch.isfinite(a).all() else math.inf


def attention_kernel(fn, d_k: int = 16, L: int = 6) -> Finding:
    """Differential diagnosis of an attention function fn(q, k, v, mask) that returns the output
    (or (output, weights)), run on random float64 q, k, v of shape (2, 2, L, d_k).

    The mask is boolean, True = may attend (tfx's and torch.nn.functional's convention), passed as
    the fourth positional argument. The output is compared with softmax(q kᵀ/√d_k) v and, when it
    differs, with each known bug: scores not divided by √d_k (or divided by d_k), softmax over the
    query dimension; with a causal mask, a mask ignored, off by one (position i sees i + 1) or read
    the other way round (True = masked). A fully masked row must stay finite (zeros, or any finite
    value): NaN there is the −inf mask bug.
    """
    if not callable(fn):
        raise TypeError(f"fn must be a callable fn(q, k, v, mask), got {type(fn).__name__}")
    d_k, L = check_int(d_k, "d_k"), check_int(L, "L", minimum=2)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, L, d_k, generator=g, dtype=torch.float64) for _ in range(3))
    out = _output(fn(q, k, v))  # (2, 2, L, d_k)
    if tuple(out.shape) != (2, 2, L, d_k):
        raise ValueError(f"fn returned shape {fmt_shape(out.shape)}, expected (2, 2, {L}, {d_k})")
    return (
        _unmasked_bug(out, q, k, v)
        or _causal_bug(fn, q, k, v)
        or _empty_row_bug(fn, q, k, v)
        or Finding(
            "attention_kernel",
            False,
            f"matches softmax(q kᵀ/√d_k) v within {_KERNEL_TOL:.0e} with and without a causal "
            "mask; a fully masked row stays finite",
        )
    )


def _unmasked_bug(out, q, k, v):
    """The first step of attention_kernel: without a mask, out must match the reference. When it
    does not, each suspect is the reference with one thing changed (the scale, the softmax's
    dimension), and the suspect that out matches names the bug; None when out is right."""
    if _max_err(out, _reference(q, k, v)) <= _KERNEL_TOL:
        return None
    suspects = {
        "scores not divided by √d_k": dict(scale=1.0),
        "scores divided by d_k instead of √d_k": dict(scale=1.0 / q.size(-1)),
        "softmax over the query dimension (dim=-2) instead of the keys": dict(dim=-2),
    }
    for cause, kw in suspects.items():
        if _max_err(out, _reference(q, k, v, **kw)) < _KERNEL_TOL:
            return Finding("attention_kernel", True, f"without a mask: {cause}")
    return Finding("attention_kernel", True, _unknown(out, _reference(q, k, v), "no mask"))


def _causal_bug(fn, q, k, v):
    """The second step: a kernel right without a mask can still mishandle one. With a causal mask
    the suspects are the reference under a wrong mask (none, shifted by one, inverted); a row that
    is not finite or sees no key under the suspect's mask says nothing about it and is left out of
    the comparison. None when fn applies the mask as tfx does."""
    L = q.size(-2)
    causal = torch.ones(L, L, dtype=torch.bool).tril()  # (L, L): True = may attend
    out = _output(fn(q, k, v, causal)).to(q.dtype)
    if _max_err(out, _reference(q, k, v, causal)) <= _KERNEL_TOL:
        return None
    masks = {
        "the mask is ignored (every position sees the future)": None,
        "causal mask off by one: position i sees position i + 1": torch.ones_like(causal).tril(1),
        "the mask is read the other way round (True taken as 'masked')": ~causal,
    }
    for cause, m in masks.items():
        ref = _reference(q, k, v, m)
        rows = torch.isfinite(out).all(-1)  # (2, 2, L): compare finite rows that see a key
        if m is not None:
            rows = rows & m.any(-1)
        if rows.any() and (out - ref)[rows].abs().max().item() < _KERNEL_TOL:
            return Finding("attention_kernel", True, f"with a causal mask: {cause}")
    return Finding(
        "attention_kernel", True, _unknown(out, _reference(q, k, v, causal), "causal mask")
    )


def _empty_row_bug(fn, q, k, v):
    """The last step: a padded sequence can leave a query no key at all. Masking with −inf makes
    that row's softmax 0/0, NaN; None when the row stays finite."""
    L = q.size(-2)
    empty = torch.ones(2, 1, 1, L, dtype=torch.bool)  # (2, 1, 1, L): batch 1 is all padding
    empty[1] = False
    out = _output(fn(q, k, v, empty))
    if torch.isfinite(out).all():
        return None
    bad = "nan" if out.isnan().any() else "inf"
    return Finding(
        "attention_kernel",
        True,
        f"a fully masked row gives {bad} (a −inf mask: softmax of a row of −inf is 0/0); "
        "mask with the dtype's most negative finite value, then zero the row",
    )


def _unknown(out, ref, case) -> str:
    e = (out - ref).abs().max().item()
    how = "is not finite" if not math.isfinite(e) else f"differs by up to {e:.2g}"
    return f"{case}: the output {how} from softmax(q kᵀ/√d_k) v, and matches no known bug"


# ---- order: permutations, positions, the future ----------------------------------------------


def _close(a, b, rel: float = 1e-4) -> bool:
    scale = max(a.abs().max().item(), b.abs().max().item(), 1.0)
    return (a - b).abs().max().item() <= rel * scale


def permutation_test(module, x: torch.Tensor) -> Finding:
    """A self-attention layer without positions is permutation-equivariant: permuting the tokens of
    x (B, L, d) must permute the rows of module(x) the same way. Heads split or merged with view
    where a transpose was needed keep every shape and break this. A causal layer (one whose earlier
    rows ignore a change to the last token) is equivariant only within a prefix: row L − 1 sees the
    first L − 1 tokens as a set, so permuting them must leave that row alone, and that is what is
    tested there. Positions inside the layer (RoPE, a relative bias) break the symmetry of a
    healthy layer too: test a layer without them. module: called as module(x); the first tensor
    of what it returns is the output. Eval mode during the test."""
    if not callable(module):
        raise TypeError(f"module must be callable as module(x), got {type(module).__name__}")
    check_tensor(x, "x", floating=True)
    if x.dim() != 3 or x.size(1) < 3:
        raise ValueError(f"x must be (B, L, d) with L >= 3, got {fmt_shape(x.shape)}")
    L = x.size(1)
    g = torch.Generator().manual_seed(0)
    last = x.clone()
    last[:, -1] += torch.randn(last[:, -1].shape, generator=g, dtype=x.dtype)  # (B, d)
    with _eval(module), torch.no_grad():
        out = _output(module(x))  # (B, L, d)
        causal = _close(_output(module(last))[:, :-1], out[:, :-1])
        if causal:
            perm = torch.cat([torch.arange(L - 1).roll(1), torch.tensor([L - 1])])  # (L,)
            moved = _output(module(x[:, perm]))[:, -1:]  # (B, 1, d): the last row only
            want, what = out[:, -1:], f"causal: permuting the first {L - 1} tokens"
        else:
            perm = torch.arange(L).roll(1)  # (L,): every token moves
            moved = _output(module(x[:, perm]))  # (B, L, d)
            want, what = out[:, perm], f"permuting the {L} tokens"
    if _close(moved, want):
        alike = "leaves the last row alone" if causal else "permutes the output rows alike"
        return Finding("permutation_test", False, f"{what} {alike}")
    rows = int((~torch.isclose(moved, want, atol=1e-5, rtol=1e-4)).any(-1).any(0).sum())
    return Finding(
        "permutation_test",
        True,
        f"{what} does not permute the output ({rows} of {want.size(1)} rows differ): tokens "
        "are mixed across positions (heads split or merged with view where transpose was needed?)",
    )


def position_test(model, input_ids: torch.Tensor, attention_mask=None) -> Finding:
    """A model with positions must notice order: swapping two tokens must change more than the
    two swapped output rows. Fires when every other row stays the same (position embeddings
    missing or zeroed). input_ids: (B, L); model(input_ids[, attention_mask=…]); eval mode."""
    check_tensor(input_ids, "input_ids")
    if input_ids.dim() != 2 or input_ids.size(1) < 3:
        raise ValueError(f"input_ids must be (B, L) with L >= 3, got {fmt_shape(input_ids.shape)}")
    real = torch.ones_like(input_ids, dtype=torch.bool)
    if attention_mask is not None:
        real = attention_mask.bool()
    cols = [j for j in range(input_ids.size(1)) if bool(real[:, j].all())]
    pair = next(
        (
            (i, j)
            for i in cols
            for j in cols
            if i < j and (input_ids[:, i] != input_ids[:, j]).any()
        ),
        None,
    )
    if pair is None or len(cols) < 3:
        raise ValueError("input_ids needs at least 3 real positions, two of them different tokens")
    i, j = pair
    swapped = input_ids.clone()
    swapped[:, [i, j]] = input_ids[:, [j, i]]
    kw = {} if attention_mask is None else {"attention_mask": attention_mask}
    with _eval(model), torch.no_grad():
        out, new = _output(model(input_ids, **kw)), _output(model(swapped, **kw))  # (B, L, …)
    others = [c for c in cols if c not in (i, j)]
    changed = sum(not _close(new[:, c], out[:, c], 1e-5) for c in others)
    if changed:
        return Finding(
            "position_test",
            False,
            f"swapping the tokens at positions {i} and {j} changes {changed} of the "
            f"{len(others)} other rows: the model sees order",
        )
    return Finding(
        "position_test",
        True,
        f"swapping the tokens at positions {i} and {j} changes none of the {len(others)} other "
        "rows: the model is blind to order (position embeddings missing or zeroed?)",
    )


def future_leak(model_or_fn, x: torch.Tensor) -> Finding:
    """For a causal model: change the token at position j and look for an output i < j that moves.
    x: token ids (B, L) or vectors (B, L, d); the first tensor returned is (B, L, …). Fires with the
    first leaking pair (smallest j, then smallest i): a causal mask off by one leaks i = j − 1."""
    if not callable(model_or_fn):
        raise TypeError(f"model_or_fn must be callable, got {type(model_or_fn).__name__}")
    check_tensor(x, "x")
    if x.dim() not in (2, 3) or x.size(1) < 2:
        raise ValueError(f"x must be (B, L) ids or (B, L, d) vectors, L >= 2, got {x.shape}")
    if not x.is_floating_point():
        ids = x.unique()
        if len(ids) < 2:
            raise ValueError("x (token ids) must hold at least two different ids to swap between")
        a, b = ids[0], ids[1]
    g = torch.Generator().manual_seed(0)
    with _eval(model_or_fn), torch.no_grad():
        out = _output(model_or_fn(x))
        for j in range(1, x.size(1)):
            y = x.clone()
            if x.is_floating_point():
                y[:, j] += torch.randn(y[:, j].shape, generator=g, dtype=x.dtype)
            else:
                y[:, j] = torch.where(x[:, j] == a, b, a)
            new = _output(model_or_fn(y))
            for i in range(j):
                if not _close(new[:, i], out[:, i], 1e-5):
                    return Finding(
                        "future_leak",
                        True,
                        f"output {i} moves when token {j} changes: position {i} sees the future "
                        f"{'(causal mask off by one)' if i == j - 1 else ''}".rstrip(),
                    )
    return Finding("future_leak", False, "no output moves when a later token changes")


# ---- non-finite values and errors in the forward pass ------------------------------------------


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict) or hasattr(obj, "to_tuple"):
        for v in obj.values():
            yield from _tensors(v)
    elif isinstance(obj, (tuple, list)):
        for v in obj:
            yield from _tensors(v)


def _has(obj, test) -> bool:
    return any(t.is_floating_point() and bool(test(t).any()) for t in _tensors(obj))


def first_nonfinite(model: nn.Module, *args, **kwargs) -> Finding:
    """Run model(*args, **kwargs) with a forward hook on every submodule and name the first
    module, in the order they finish, whose output holds a nan (or inf) its inputs did not hold:
    where the non-finite value was born. A −inf mask on a fully masked row, a float16 overflow."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    found = []

    def hook(name):
        def on_forward(module, inputs, kw, output):
            if found:
                return
            for kind, test in (("nan", torch.isnan), ("inf", torch.isinf)):
                if _has(output, test) and not _has((inputs, kw), test):
                    finite = not _has((inputs, kw), lambda t: ~torch.isfinite(t))
                    was = "were finite" if finite else f"held no {kind}"
                    where = f"{name or 'the model'} ({type(module).__name__})"
                    found.append(f"{where} produced {kind} first (its inputs {was})")
                    return

        return on_forward

    handles = [m.register_forward_hook(hook(n), with_kwargs=True) for n, m in model.named_modules()]
    with hooked(handles), torch.no_grad():
        model(*args, **kwargs)
    if found:
        return Finding("first_nonfinite", True, found[0])
    return Finding("first_nonfinite", False, "every module's output is finite")


def forward_error(model: nn.Module, *args, **kwargs) -> Finding:
    """Run model(*args, **kwargs) and, if it raises, name the innermost module that was running
    and the error's first line (a view of a non-contiguous tensor, a fill value that overflows
    float16)."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    stack, handles = [], []  # the names of the modules running, outermost first

    def enter(name):
        def hook(module, args):
            stack.append(name)  # returns None: the input is left as it is

        return hook

    def leave(module, args, output):
        stack.pop()  # a hook must return None, or its value replaces the output

    for name, m in model.named_modules():
        handles.append(m.register_forward_pre_hook(enter(name)))
        handles.append(m.register_forward_hook(leave))
    try:
        with hooked(handles), torch.no_grad():
            model(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 (naming any error is the point)
        name = stack[-1] if stack else ""
        where = f"{name or 'the model'} ({type(model.get_submodule(name)).__name__})"
        line = str(e).strip().split("\n")[0]
        return Finding("forward_error", True, f"{where} raised {type(e).__name__}: {line}")
    return Finding("forward_error", False, "the forward pass runs")


# ---- parameters, optimiser, gradients ----------------------------------------------------------


def _is_norm(module) -> bool:
    return isinstance(module, nn.LayerNorm) or type(module).__name__.endswith(("LayerNorm", "Norm"))


def _block(name: str) -> str:
    """The block a parameter belongs to: up to its first layer index (layers.1, encoder.layer.3),
    else its module's parent (embeddings, head)."""
    parts = name.split(".")
    for i, p in enumerate(parts):
        if p.isdigit():
            return ".".join(parts[: i + 1])
    return ".".join(parts[:-2]) or parts[0]


def frozen_parameters(model: nn.Module, optimizer=None) -> Finding:
    """Which parameters are frozen (requires_grad False), by kind of module. Fires on a block whose
    only frozen tensors are its LayerNorms' γ and β while every other tensor of it trains: the mark
    of a freeze by name ('norm', or the weight-decay list ["bias", "LayerNorm.weight"] used as a
    freeze list) that caught more than was meant. LayerNorm keeps no statistics (it recomputes
    mean and variance for every token), so only γ and β stop; the harm is a recipe other than the
    one intended. Freezing whole blocks, BitFit (only biases train) and LoRA (the body frozen,
    adapters train) freeze other tensors of the block too, and stay quiet. Given the optimizer,
    fires when a trainable tensor is missing from it (it gets gradients and never moves), or when
    a frozen tensor in it still holds a gradient (the step would move it); frozen tensors without
    one are skipped by every torch optimizer, and only noted."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(
            f"optimizer must be a torch.optim.Optimizer or None, got {type(optimizer).__name__}"
        )
    owners, params = param_owners(model), dict(model.named_parameters())
    frozen = [n for n, p in params.items() if not p.requires_grad]
    blocks = {}  # block → ([frozen norm tensors], a non-norm tensor frozen?, one trains?)
    for n, p in params.items():
        norms, other_frozen, trains = blocks.get(_block(n), ([], False, False))
        if p.requires_grad:
            trains = trains or not _is_norm(owners[n][1])
        elif _is_norm(owners[n][1]):
            norms = norms + [n]
        else:
            other_frozen = True
        blocks[_block(n)] = (norms, other_frozen, trains)
    trap = {
        b: norms for b, (norms, other, trains) in blocks.items() if norms and trains and not other
    }
    problems, notes = [], []
    if trap:
        n = sum(map(len, trap.values()))
        problems.append(
            f"only the LayerNorms are frozen while the rest of their block trains: {n} tensors in "
            f"{_names(trap)} (e.g. {next(iter(trap.values()))[0]})"
        )
    if optimizer is not None:
        held = {id(p) for group in optimizer.param_groups for p in group["params"]}
        missing = [n for n, p in params.items() if p.requires_grad and id(p) not in held]
        stale = [n for n, p in params.items() if not p.requires_grad and id(p) in held]
        if missing:
            problems.append(
                f"{len(missing)} trainable tensors not in the optimizer: {_names(missing, 3)}"
            )
        moving = [n for n in stale if params[n].grad is not None]
        if moving:
            problems.append(
                f"{len(moving)} frozen tensors in the optimizer still hold a gradient, and its "
                f"step will move them: {_names(moving, 3)}"
            )
        elif stale:
            notes.append(f"{len(stale)} frozen tensors in the optimizer, without gradients")
    if problems:
        return Finding("frozen_parameters", True, "; ".join(problems))
    if not frozen:
        return Finding("frozen_parameters", False, f"all {len(params)} parameter tensors train")
    kinds = {}
    for n in frozen:
        kind = type(owners[n][1]).__name__
        kinds[kind] = kinds.get(kind, 0) + 1
    by_kind = ", ".join(f"{k} {c}" for k, c in kinds.items())
    return Finding(
        "frozen_parameters",
        False,
        "; ".join(
            [f"{len(frozen)} of {len(params)} tensors frozen ({by_kind}), not norms alone", *notes]
        ),
    )


def missing_grads(model: nn.Module, loss_fn, tensors: dict = None) -> Finding:
    """Run loss_fn() and backward, and name every parameter left without a gradient, and why
    (tfx.inspect.grads.diagnose_missing_grads: torch.no_grad, detach, never called); tensors,
    {name: tensor} whose .grad the reader means to read, are explained too (a non-leaf tensor never
    gets .grad: tfx.inspect.grads.explain_missing_grads). Fires on those silent cuts. A frozen
    parameter (requires_grad False) is listed but does not fire: a freeze forgotten and a freeze on
    purpose (BitFit, LoRA) look the same from the model, and frozen_parameters judges freezes."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    if not callable(loss_fn):
        raise TypeError(f"loss_fn must be a callable taking no arguments, got {loss_fn!r:.60}")
    if tensors is not None and not isinstance(tensors, dict):
        raise TypeError(f"tensors must be a dict {{name: tensor}}, got {type(tensors).__name__}")
    with watch_grad_breaks() as breaks:
        issues = diagnose_missing_grads(model, loss_fn)
    params = dict(model.named_parameters())
    frozen = [i.name for i in issues if not params[i.name].requires_grad]
    issues = [i for i in issues if params[i.name].requires_grad]
    if tensors:
        issues += explain_missing_grads(tensors, breaks)
    aside = f"{len(frozen)} frozen (requires_grad False: {_names(frozen, 2)})" if frozen else ""
    if not issues:
        return Finding(
            "missing_grads",
            False,
            "; ".join(["every trainable parameter received a gradient", *[aside] * bool(frozen)]),
        )
    by_reason = {}
    for issue in issues:
        by_reason.setdefault(issue.reason.split(":")[0], []).append(issue.name)
    lines = [f"{_names(names, 2)}: {reason}" for reason, names in by_reason.items()]
    cut = f"{len(issues)} cut off the gradient; " + "; ".join(lines)
    return Finding("missing_grads", True, "; ".join([cut, *[aside] * bool(frozen)]))


def _weight_grads(model, owners) -> dict:
    """{name: gradient} of the weight matrices: at least 2-D, embeddings left out (an unused
    token's row gets exactly zero, legitimately), and so are the 1-D biases (BERT's key bias gets
    exactly zero: softmax ignores a constant per row)."""
    return {
        n: p.grad
        for n, p in model.named_parameters()
        if p.grad is not None and p.dim() >= 2 and not isinstance(owners[n][1], nn.Embedding)
    }


def grad_health(model: nn.Module, scaler=None) -> Finding:
    """After backward (under a GradScaler, after scaler.unscale_(optimizer)): fires on a
    non-finite gradient (an overflow), and on gradients that underflowed: more than 90% of the
    weight matrices' gradient entries exactly 0, whatever their dtype. That is the realistic
    float16 bug: autocast to float16 runs the backward in float16, small gradients flush to zero
    there, and the float32 parameters receive float32 zeros. Given the scaler, a non-finite
    gradient is its business (it skips the step and halves its scale) while its scale stays at 1
    or more; below 1 it has skipped step after step, and the finding fires."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    if scaler is not None and not isinstance(scaler, torch.amp.GradScaler):
        raise TypeError(
            f"scaler must be a torch.amp.GradScaler or None, got {type(scaler).__name__}"
        )
    owners = param_owners(model)
    grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    if not grads:
        raise ValueError("model has no gradients: run a backward pass first")
    bad = [n for n, g in grads.items() if not torch.isfinite(g).all()]
    if bad and (scaler is None or scaler.get_scale() < 1):
        why = (
            ""
            if scaler is None
            else f", and the GradScaler's scale is down to {scaler.get_scale():.1g}"
        )
        return Finding(
            "grad_health", True, f"non-finite gradients (overflow) in {_names(bad, 3)}{why}"
        )
    weights = _weight_grads(model, owners)
    zeros = sum(int((g == 0).sum()) for g in weights.values())
    total = sum(g.numel() for g in weights.values())
    if total and zeros > 0.9 * total:
        return Finding(
            "grad_health",
            True,
            f"{100 * zeros // total}% of the weight gradients are exactly 0: they underflowed "
            "(float16's smallest step is 6e-08); scale the loss (torch.amp.GradScaler)",
        )
    dtypes = sorted({str(g.dtype).replace("torch.", "") for g in grads.values()})
    skip = f"; non-finite in {len(bad)}, a step the GradScaler skips" if bad else ", all finite"
    share = (
        f"{100 * zeros // total}% of the weight gradient entries exactly 0"
        if total
        else "no weight matrix has a gradient"
    )
    return Finding(
        "grad_health", False, f"{len(grads)} gradients ({', '.join(dtypes)}){skip}; {share}"
    )


def dead_layers(model: nn.Module, threshold: float = 1e-4) -> Finding:
    """After backward: the gradient of each module's own parameters (RMS over their entries),
    against the median module, for the modules that hold a weight matrix with a gradient (norms
    and bias-only modules are left out: BERT's key bias gets exactly 0 by design, and under BitFit
    it is the key projection's only gradient); fires on a module whose gradient is 0 or below
    threshold × the median (an FFN whose ReLU/GELU units are all dead, a layer cut off). The
    small but real gradients of BERT's query and key projections at initialisation stay far
    above it (about 1e-2 of the median in a freshly initialised Hugging Face BERT, the smallest
    healthy ratio measured). A partly dead FFN does not fire (its live units carry the
    gradient); a LoRA adapter's A does at the very first step (its gradient is exactly 0 while B
    is still 0), so run it after a step or two."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    if (
        isinstance(threshold, bool)
        or not isinstance(threshold, numbers.Real)
        or not (0 < threshold < 1)
    ):
        raise ValueError(f"threshold must be a number in (0, 1), got {threshold!r}")
    owners, sq, count = param_owners(model), {}, {}
    judged = {owners[n][0] for n in _weight_grads(model, owners)}  # modules with a weight matrix
    for n, p in model.named_parameters():
        if p.grad is not None and owners[n][0] in judged:
            mname = owners[n][0] or "(model)"
            sq[mname] = sq.get(mname, 0.0) + p.grad.double().pow(2).sum().item()
            count[mname] = count.get(mname, 0) + p.numel()
    if not sq:
        raise ValueError("model has no weight-matrix gradients: run a backward pass first")
    rms = {m: math.sqrt(sq[m] / count[m]) for m in sq}
    median = float(np.median(list(rms.values())))
    dead = [m for m, r in rms.items() if r == 0.0 or r < threshold * median]
    if dead:
        zero = all(rms[m] == 0.0 for m in dead)
        how = "exactly 0" if zero else f"below {threshold:.0e} of the median module's"
        return Finding(
            "dead_layers", True, f"{_names(dead, 3)}: gradient {how} ({len(rms)} modules)"
        )
    return Finding(
        "dead_layers",
        False,
        f"every module with a weight gradient ({len(rms)}) is above {threshold:.0e} of the median",
    )


# ---- the loss and its labels -------------------------------------------------------------------


PAD_SHARE = 1e-3  # loss_support fires when the loss's target gives <pad> at least this


def loss_support(loss_fn, logits: torch.Tensor, targets: torch.Tensor, pad_id=None) -> Finding:
    """Which positions' logits receive gradient from loss_fn(logits, targets). logits (…, V),
    targets (…). With pad_id: fires when a padded position (target == pad_id) gets gradient (pad
    counted in the loss), and when the loss's target gives <pad> a share of at least PAD_SHARE
    (1e-3) at real positions, so that a fitted model would predict <pad> about that often (N26).
    The share is read from the gradient: a cross-entropy against a target q has gradient w (p − q)
    at each position; the pad logit is set far below the others (p ≈ 0 there, as in a trained
    model), and a second gradient at other logits gives each position's weight w, hence q at
    <pad>. torch's label_smoothing=ε spreads ε/V over every class, <pad> included: 5e-06 at a
    vocabulary of 21,128, noted and quiet; at a toy vocabulary of 8 it is 0.0125, and fires."""
    if not callable(loss_fn):
        raise TypeError(f"loss_fn must be callable as loss_fn(logits, targets), got {loss_fn!r}")
    check_tensor(logits, "logits", floating=True)
    check_tensor(targets, "targets")
    if logits.shape[:-1] != targets.shape:
        raise ValueError(
            f"logits {fmt_shape(logits.shape)} must be (…, V) for targets "
            f"{fmt_shape(targets.shape)}"
        )
    V = logits.size(-1)
    if pad_id is not None and not (isinstance(pad_id, numbers.Integral) and 0 <= pad_id < V):
        raise ValueError(f"pad_id must be an int in [0, {V}) or None, got {pad_id!r}")

    def gradient(z):
        z = z.clone().requires_grad_(True)
        loss_fn(z, targets).backward()
        return z.grad  # (…, V)

    work = logits.detach().to(torch.float64).clone()  # (…, V)
    if pad_id is not None:
        work[..., pad_id] = work.min() - 30.0
    g = gradient(work)  # (…, V)
    gets = g.abs().sum(-1) > 0  # (…,)
    if pad_id is None:
        return Finding(
            "loss_support", False, f"{int(gets.sum())} of {gets.numel()} positions get gradient"
        )
    pad = targets == pad_id  # (…,)
    problems = []
    if (gets & pad).any():
        problems.append(
            f"{int((gets & pad).sum())} of {int(pad.sum())} padded positions get gradient: "
            "the pad target is counted in the loss (use ignore_index=pad_id)"
        )
    pushes = (g[..., pad_id] < -1e-12) & ~pad  # (…,)
    share = 0.0
    if pushes.any():
        gen = torch.Generator().manual_seed(0)
        other = work + torch.randn(work.shape, generator=gen, dtype=work.dtype)  # (…, V)
        other[..., pad_id] = work[..., pad_id]
        dp = work.softmax(-1) - other.softmax(-1)  # (…, V)
        w = ((g - gradient(other)) * dp).sum(-1) / (dp * dp).sum(-1)  # (…,): each weight
        share = (work.softmax(-1)[..., pad_id] - g[..., pad_id] / w)[pushes].max().item()
    where = f"at {int(pushes.sum())} of {int((~pad).sum())} real positions"
    if share >= PAD_SHARE:
        problems.append(
            f"{where} the loss's target gives <pad> {share:.3g} (label smoothing spreads ε over "
            "the pad class): a fitted model predicts <pad> about that often"
        )
    if problems:
        return Finding("loss_support", True, "; ".join(problems))
    onto = (
        f"{where} its target gives <pad> only {share:.2g}, below {PAD_SHARE:g}"
        if pushes.any()
        else "none is pushed towards <pad>"
    )
    return Finding(
        "loss_support",
        False,
        f"{int((gets & ~pad).sum())} of {int((~pad).sum())} real positions get gradient, no "
        f"padded one; {onto}",
    )


def mlm_labels(inputs: torch.Tensor, labels: torch.Tensor, special_ids=(), ignore_index=-100):
    """Masked-LM labels must score ~15% of the tokens, most of them corrupted in the input. Fires
    when more than half of the non-special tokens are scored (the loss over all positions, which
    the model lowers by copying its input), or when a special token ([PAD], [CLS]) is scored."""
    check_tensor(inputs, "inputs")
    check_tensor(labels, "labels")
    if inputs.shape != labels.shape:
        raise ValueError(
            f"inputs {fmt_shape(inputs.shape)} and labels {fmt_shape(labels.shape)} must match"
        )
    special = torch.as_tensor(list(special_ids), dtype=torch.long)
    scored = labels != ignore_index
    original = torch.where(scored, labels, inputs)
    normal = ~torch.isin(original, special)
    n_normal, n_scored = int(normal.sum()), int((scored & normal).sum())
    if n_normal == 0:
        raise ValueError("inputs hold no token outside special_ids")
    frac = n_scored / n_normal
    same = int((scored & (inputs == labels)).sum()) / max(int(scored.sum()), 1)
    text = (
        f"labels score {100 * frac:.0f}% of the non-special tokens (BERT: ~15%), "
        f"{100 * same:.0f}% of the scored ones unchanged in the input (BERT: ~10%)"
    )
    problems = []
    if frac > 0.5:
        problems.append(text + ": the loss is over all positions, not the masked ones")
    if (scored & ~normal).any():
        problems.append(f"{int((scored & ~normal).sum())} special-token positions are scored")
    if problems:
        return Finding("mlm_labels", True, "; ".join(problems))
    return Finding("mlm_labels", False, text)


# ---- training set-up: warm-up, dtypes ----------------------------------------------------------


def _layer_norms(model) -> tuple:
    """(post-LN layers, pre-LN layers, what they are) among model's modules."""
    post, pre, kinds = 0, 0, set()
    for m in model.modules():
        name = type(m).__name__
        if hasattr(m, "norm_first") and isinstance(m.norm_first, bool):
            post, pre = post + (not m.norm_first), pre + m.norm_first
            kinds.add(name)
        elif name in ("BertLayer", "ArticleEncoderLayer"):  # post-LN by construction
            post, kinds = post + 1, kinds | {name}
    return post, pre, ", ".join(sorted(kinds))


STEP_SHARE = 1e-2  # warmup_check fires when the first step's rate is this share of the weights


def warmup_check(lrs, model: nn.Module) -> Finding:
    """lrs: the learning rate at each step (what the scheduler will give). Fires on a post-LN stack
    (tfx EncoderLayer or nn.TransformerEncoderLayer with norm_first=False, Hugging Face's
    BertLayer) when the schedule starts at half its peak or more *and* that first rate is at
    least STEP_SHARE (1%) of the typical weight (the median RMS of the weight matrices): Adam's
    first steps move every weight by about the rate, and post-LN diverges or stalls under steps
    that large. Fine-tuning rates are far smaller than that (Hugging Face Trainer's default, 5e-5
    with no warm-up, is 0.25% of BERT's 0.02-sized weights), and pass. A pre-LN stack tolerates
    no warm-up, and the finding says so."""
    try:
        rates = [float(r) for r in lrs]
    except (TypeError, ValueError):
        raise TypeError(f"lrs must be a sequence of numbers, got {lrs!r:.60}") from None
    if not rates or not all(math.isfinite(r) and r >= 0 for r in rates) or max(rates) == 0:
        raise ValueError("lrs must be a non-empty sequence of finite rates >= 0, not all 0")
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    post, pre, kinds = _layer_norms(model)
    peak = max(rates)
    start = rates[0] / peak
    reach = next(i for i, r in enumerate(rates) if r == peak) + 1  # steps count from 1
    ramp = f"the rate starts at {100 * start:.1f}% of its peak"
    if post == 0 and pre == 0:
        return Finding("warmup_check", False, f"{ramp}; no encoder layer recognised in model")
    stack = f"post-LN ({post} {kinds})" if post else f"pre-LN ({pre} {kinds})"
    if start < 0.5:
        return Finding(
            "warmup_check", False, f"{ramp} and peaks at step {reach}: warm-up on a {stack}"
        )
    if not post:
        return Finding("warmup_check", False, f"{ramp}, but a {stack} stack tolerates no warm-up")
    owners = param_owners(model)
    sizes = [
        p.detach().double().pow(2).mean().sqrt().item()
        for n, p in model.named_parameters()
        if p.dim() >= 2 and not isinstance(owners[n][1], nn.Embedding)
    ]
    size = float(np.median(sizes))
    share = rates[0] / size
    step = (
        f"{ramp}, and its first step, {rates[0]:.2g}, is {100 * share:.2g}% of the typical "
        f"weight ({size:.2g})"
    )
    if share >= STEP_SHARE:
        return Finding(
            "warmup_check",
            True,
            f"{step} on a {stack} stack: no warm-up; ramp it up over the first steps",
        )
    return Finding(
        "warmup_check",
        False,
        f"{step}, below {100 * STEP_SHARE:g}%: steps small enough for a {stack} stack",
    )


def _dtype_name(dtype, name: str) -> str:
    if isinstance(dtype, torch.dtype):
        return str(dtype).replace("torch.", "")
    try:
        return np.dtype(dtype).name
    except TypeError:
        raise TypeError(f"{name} must be a dtype or its name, got {dtype!r}") from None


def dtype_census(obj, expected=None) -> Finding:
    """Count a model's parameters, or a dict/list of numpy arrays or tensors, by dtype. With
    expected (a dtype or its name), fires when no array has it: the numpy article's
    to_half_precision turns float32 arrays into float16, and its arrays are all float64 (N23)."""
    if isinstance(obj, nn.Module):
        arrays = [p for _, p in obj.named_parameters()]
    elif isinstance(obj, dict):
        arrays = list(obj.values())
    elif isinstance(obj, (list, tuple)):
        arrays = list(obj)
    else:
        raise TypeError(
            f"obj must be an nn.Module, dict or list of arrays, got {type(obj).__name__}"
        )
    counts = {}
    for a in arrays:
        if not isinstance(a, (np.ndarray, torch.Tensor)):
            raise TypeError(f"obj must hold numpy arrays or tensors, got {type(a).__name__}")
        name = _dtype_name(a.dtype, "obj")
        n, size = counts.get(name, (0, 0))
        counts[name] = (n + 1, size + int(np.prod(a.shape)))
    census = ", ".join(f"{k}: {n} arrays ({size:,} values)" for k, (n, size) in counts.items())
    census = census or "no arrays"
    if expected is None:
        return Finding("dtype_census", False, census)
    want = _dtype_name(expected, "expected")
    if want not in counts:
        return Finding("dtype_census", True, f"no {want} array: {census}")
    return Finding("dtype_census", False, census)
