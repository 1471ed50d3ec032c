"""The position-wise feed-forward block, taken apart: GELU and its approximations, the gated
variants of later models, the key–value reading of the FFN, and the width/ablation probe behind
chapter 04's widget.

The block itself, `FeedForward` in `tfx.model.layers`, is two linear maps with an activation
between; everything here is either a formula it can use or a way of looking inside it. Built in
chapter 04.
"""

import math
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache

import torch
import torch.nn as nn
import torch.nn.functional as F

from tfx.core.checks import check_int, check_probability, check_tensor
from tfx.model.layers import EncoderLayer, FeedForward


def _check_float(x, name: str = "x") -> None:
    check_tensor(x, name, floating=True)


def gelu_exact(x: torch.Tensor) -> torch.Tensor:
    """GELU(x) = x·Φ(x), Φ the standard normal CDF: the input scaled by the chance that a standard
    normal variable lies below it (Hendrycks & Gimpel, 2016). Hugging Face's "gelu"."""
    _check_float(x)
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    """The tanh approximation, 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), from the GELU paper:
    OpenAI GPT's, and Google's BERT repository's since February 2019 (Hugging Face's "gelu_new").
    The original BERT release (October 2018), which trained the checkpoints, used the exact erf
    form, gelu_exact; it is kept here because approximations of it are everywhere."""
    _check_float(x)
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def gelu_sigmoid(x: torch.Tensor) -> torch.Tensor:
    """x·σ(1.702·x): the cheaper approximation, since σ(1.702·x) ≈ Φ(x)."""
    _check_float(x)
    return x * torch.sigmoid(1.702 * x)


def article_gelu(x: torch.Tensor) -> torch.Tensor:
    """max(0, x)·σ(1.702·x), the source article's formula (claim A7). The max(0, ·) makes it 0 for
    every x < 0, where GELU is negative."""
    _check_float(x)
    return F.relu(x) * torch.sigmoid(1.702 * x)


def relu(x: torch.Tensor) -> torch.Tensor:
    """max(0, x), the activation of the original Transformer's FFN."""
    _check_float(x)
    return F.relu(x)


ACTIVATIONS = {
    "relu": relu,
    "gelu": gelu_exact,
    "gelu_tanh": gelu_tanh,
    "gelu_sigmoid": gelu_sigmoid,
    "article": article_gelu,
}


def activation(name: str):
    """The activation function called `name` (one of ACTIVATIONS)."""
    if name not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {name!r}")
    return ACTIVATIONS[name]


def gelu_minimum(dtype=torch.float64) -> tuple:
    """(x, GELU(x)) at GELU's minimum, where d/dx x·Φ(x) = Φ(x) + x·φ(x) = 0, by Newton's method.

    GELU is not monotonic: it dips below zero left of the origin and comes back up towards 0.
    """
    x = torch.tensor(-0.75, dtype=dtype)
    for _ in range(50):
        phi = torch.exp(-0.5 * x**2) / math.sqrt(2 * math.pi)  # φ(x)
        Phi = 0.5 * (1 + torch.erf(x / math.sqrt(2.0)))  # Φ(x)
        g, dg = Phi + x * phi, 2 * phi - x**2 * phi  # f'(x), f''(x)
        x = x - g / dg
    return x.item(), gelu_exact(x).item()


def ffn_param_count(d_model: int, d_ff: int, bias: bool = True, gated: bool = False) -> int:
    """Parameters of one FFN: two (gated: three) d_model × d_ff matrices, plus the biases."""
    check_int(d_model, "d_model")
    check_int(d_ff, "d_ff")
    n_in = 2 if gated else 1  # gate and up projection, or one expansion
    weights = (n_in + 1) * d_model * d_ff
    return weights + (bias * (n_in * d_ff + d_model))


GATES = {"glu": torch.sigmoid, "reglu": F.relu, "geglu": F.gelu, "swiglu": F.silu}


class GatedFeedForward(nn.Module):
    """FFN(x) = (act(x W_g) ⊙ x W_u) W_d, the gated variants of Shazeer (2020), "GLU Variants
    Improve Transformer": one projection decides how much of the other passes, per hidden unit.
    SwiGLU (act = SiLU) is the FFN of LLaMA and PaLM. Three matrices instead of two, so a model that
    keeps the parameter count shrinks d_ff to 2/3 of its width, by a third (Shazeer: 3072 → 2048;
    LLaMA's 8/3·d, rounded, is the same rule). No biases, as in those models.
    """

    def __init__(self, d_model: int, d_ff: int, gate: str = "swiglu"):
        super().__init__()
        ffn_param_count(d_model, d_ff)  # validates the sizes
        if gate not in GATES:
            raise ValueError(f"gate must be one of {sorted(GATES)}, got {gate!r}")
        self.d_model, self.gate = d_model, gate
        self.w_gate = nn.Linear(d_model, d_ff, bias=False)
        self.w_up = nn.Linear(d_model, d_ff, bias=False)
        self.w_down = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_float(x)
        if x.dim() == 0 or x.size(-1) != self.d_model:
            raise ValueError(f"x: expected last dim {self.d_model}, got shape {tuple(x.shape)}")
        hidden = GATES[self.gate](self.w_gate(x)) * self.w_up(x)  # (…, d_ff)
        return self.w_down(hidden)  # (…, d_model)


def key_value_view(ff: FeedForward, x: torch.Tensor) -> tuple:
    """(coefficients, values): FFN(x) = Σᵢ coefficientsᵢ · valuesᵢ + b₂.

    Geva et al. (2021), "Transformer Feed-Forward Layers Are Key-Value Memories": row i of
    fc1.weight (column i of W₁ in the chapter's x·W₁ notation) is a key matched against the token
    (its coefficient is act(x·kᵢ + b₁ᵢ)); column i of fc2.weight (row i of W₂) is the value that
    unit adds to the output. coefficients: (…, d_ff); values: (d_ff, d_model).
    """
    if not isinstance(ff, FeedForward):
        raise TypeError(f"ff must be a tfx.model.layers.FeedForward, got {type(ff).__name__}")
    _check_float(x)
    if x.dim() == 0 or x.size(-1) != ff.d_model:
        raise ValueError(f"x: expected last dim {ff.d_model}, got shape {tuple(x.shape)}")
    coeffs = activation(ff.activation)(ff.fc1(x))  # (…, d_ff)
    return coeffs, ff.fc2.weight.T  # (…, d_ff), (d_ff, d_model)


SUBLAYER_PARTS = ("ffn", "skip")


@contextmanager
def ffn_sublayer_without(layers, part: str):
    """Run post-LN encoder layers with one branch of their FFN sub-layer, LN₂(h + FFN(h)), taken
    out: part="ffn" gives LN₂(h), the layer without its FFN; part="skip" gives LN₂(FFN(h)), the
    FFN without the residual path around it. Hooks on the sub-layer's dropout and LayerNorm do it,
    so the weights are never touched and leaving the block restores the layers exactly.

    Why both: zeroing an FFN in a trained model barely moves its predictions (chapter 04), which
    could mean the FFN does little, or that the residual path carries the prediction past it;
    removing the skip instead is the measurement that tells the two apart. Built in chapter 04.
    """
    if part not in SUBLAYER_PARTS:
        raise ValueError(f"part must be one of {SUBLAYER_PARTS}, got {part!r}")
    layers = [layers] if isinstance(layers, EncoderLayer) else list(layers)
    for layer in layers:
        if not isinstance(layer, EncoderLayer):
            raise TypeError(
                f"layers must be tfx.model.layers.EncoderLayer objects, got {type(layer).__name__}"
            )
        if layer.norm_first:
            raise ValueError("ffn_sublayer_without needs post-LN layers (norm_first=False)")
    handles = []
    for layer in layers:
        if part == "ffn":  # drop₂(FFN(h)) → 0: LN₂ sees h alone
            handles.append(
                layer.drop2.register_forward_hook(lambda m, i, out: torch.zeros_like(out))
            )
        else:  # LN₂'s input h + drop₂(FFN(h)) → drop₂(FFN(h)), the FFN's branch alone
            branch = {}
            handles.append(
                layer.drop2.register_forward_hook(lambda m, i, out, b=branch: b.update(f=out))
            )
            handles.append(layer.norm2.register_forward_pre_hook(lambda m, i, b=branch: (b["f"],)))
    try:
        yield
    finally:
        for h in handles:
            h.remove()


# ---- the probe behind chapter 04's widget ------------------------------------------------------


@lru_cache(maxsize=16)
def _probe_ffn(d_model: int, d_ff: int, seed: int) -> FeedForward:
    """A fresh FFN with torch's default init, from its own seed (the global RNG is untouched)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        ff = FeedForward(d_model, d_ff).eval()
    for p in ff.parameters():
        p.requires_grad_(False)
    return ff


ZERO_ORDERS = ("random", "largest first")


@dataclass
class WidthProbe:
    """What the chapter-04 widget prints for one setting."""

    d_model: int
    mult: int
    activation: str
    zeroed: int  # hidden units forced to zero
    params: int
    out: torch.Tensor  # (…, d_model) the perturbed output
    ref: torch.Tensor  # (…, d_model) exact GELU, no unit zeroed, same weights
    change: float  # ‖out − ref‖ / ‖ref‖
    cosine: float  # mean over tokens of cos(out, ref)
    source: str = "fresh"  # "fresh" (torch's default init) or "given" (an FFN passed in)
    order: str = "random"  # the order zero_fraction removes units in (ZERO_ORDERS)

    @property
    def d_ff(self) -> int:
        return self.mult * self.d_model

    def report(self) -> str:
        d, f = self.d_model, self.d_ff
        ffn = "a fresh FFN, torch's default init" if self.source == "fresh" else "the given FFN"
        lines = [
            f"{ffn}; units zeroed in {self.order} order"
            + (" (by ‖aᵢvᵢ‖, unperturbed)" if self.order == "largest first" else ""),
            f"d_ff = {f} ({self.mult} × {d}), activation: {self.activation}, "
            f"hidden units zeroed: {self.zeroed} of {f}",
            f"parameters: {self.params:,} (W₁ {d * f:,} + b₁ {f:,} + W₂ {f * d:,} + b₂ {d:,})",
            f"output change ‖Δy‖/‖y‖: {self.change:.4f}",
            f"cosine to the unperturbed output: {self.cosine:.4f}",
        ]
        if self.zeroed == f:
            lines.append("every hidden unit is zero: the output is b₂ at every token")
        return "\n".join(lines)


def unit_order(
    x: torch.Tensor, ff: FeedForward, order: str = "largest first", seed: int = 0
) -> torch.Tensor:
    """The order in which width_probe (and chapter 04's widget) zeroes ff's hidden units, (d_ff,):
    "random", a fixed random permutation (seed), or "largest first", by ‖aᵢvᵢ‖ summed over x's
    tokens (aᵢ the exact-GELU coefficient of unit i, vᵢ its value, row i of W₂). Chapter 04 uses
    it to zero the same units inside the whole model and watch its masked-LM guess."""
    _check_float(x)
    if not isinstance(ff, FeedForward):
        raise TypeError(f"ff must be a tfx.model.layers.FeedForward, got {type(ff).__name__}")
    if x.dim() < 1 or x.size(-1) != ff.d_model:
        raise ValueError(f"x must be (…, {ff.d_model}), got shape {tuple(x.shape)}")
    if order not in ZERO_ORDERS:
        raise ValueError(f"order must be one of {ZERO_ORDERS}, got {order!r}")
    d_ff = ff.fc1.out_features
    if order == "random":
        return torch.randperm(d_ff, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        coeffs = gelu_exact(ff.fc1(x.to(ff.fc1.weight.dtype)))  # (…, d_ff)
        a = coeffs.reshape(-1, d_ff).abs().sum(dim=0)  # (d_ff,) Σ over tokens of |aᵢ|
        contrib = a * ff.fc2.weight.norm(dim=0)  # (d_ff,) ‖aᵢ vᵢ‖ summed over tokens
    return contrib.argsort(descending=True, stable=True)  # (d_ff,)


def width_probe(
    x: torch.Tensor,
    mult: int = 4,
    activation_name: str = "gelu",
    zero_fraction: float = 0.0,
    unit: int = -1,
    seed: int = 0,
    ff: FeedForward = None,
    order: str = "random",
) -> WidthProbe:
    """Run an FFN of width mult·d_model on x with one activation and some hidden units zeroed.

    The FFN is `ff` when given (a trained one: chapter 04 passes its trained layer 0, so the reader
    ablates the units the chapter has just ranked), else a fresh one with torch's default init.
    The reference is the same weights with exact GELU and nothing zeroed, so the cosine says how
    far the activation and the ablation moved the output. zero_fraction zeroes that share of the
    units, in a fixed random order ("random") or the units with the largest contribution ‖aᵢvᵢ‖
    first ("largest first", aᵢ the unperturbed GELU coefficient summed over x's tokens, vᵢ the
    unit's value): either way 0.2 zeroes a superset of 0.1. unit ≥ 0 zeroes that one unit as well.
    """
    _check_float(x)
    if x.dim() < 1 or x.size(-1) < 1:
        raise ValueError(f"x must be (…, d_model) with d_model ≥ 1, got shape {tuple(x.shape)}")
    check_int(mult, "mult")  # d_ff = mult·d_model
    act = activation(activation_name)
    check_probability(zero_fraction, "zero_fraction")
    d_model = x.size(-1)
    d_ff = mult * d_model
    check_int(unit, "unit", minimum=-1)
    if unit >= d_ff:
        raise ValueError(f"unit must be an int in [-1, {d_ff - 1}] (-1 = none), got {unit}")
    if order not in ZERO_ORDERS:
        raise ValueError(f"order must be one of {ZERO_ORDERS}, got {order!r}")
    ff, source = _ffn_to_probe(ff, d_model, mult, seed)
    out, ref, keep = _ablated_run(x, ff, act, zero_fraction, unit, order, seed)
    cos = F.cosine_similarity(out, ref, dim=-1).mean().item()
    change = ((out - ref).norm() / ref.norm().clamp_min(1e-12)).item()
    params = sum(p.numel() for p in ff.parameters())
    zeroed = int((keep == 0).sum())
    return WidthProbe(
        d_model, mult, activation_name, zeroed, params, out, ref, change, cos, source, order
    )


def _ffn_to_probe(ff, d_model: int, mult: int, seed: int) -> tuple:
    """(the FFN width_probe runs, "fresh" or "given"): a given FFN must have x's width and the
    asked-for d_ff, or the probe would report on a layer the reader did not choose."""
    d_ff = mult * d_model
    if ff is None:
        return _probe_ffn(d_model, d_ff, seed), "fresh"
    if not isinstance(ff, FeedForward):
        raise TypeError(
            f"ff must be a tfx.model.layers.FeedForward or None, got {type(ff).__name__}"
        )
    if (ff.d_model, ff.fc1.out_features) != (d_model, d_ff):
        raise ValueError(
            f"ff: expected d_model {d_model} and d_ff {d_ff} (mult {mult}), "
            f"got {ff.d_model} and {ff.fc1.out_features}"
        )
    return ff, "given"


def _ablated_run(x, ff: FeedForward, act, zero_fraction: float, unit: int, order: str, seed: int):
    """(out, ref, keep) for width_probe: one pass through W₁ serves both the reference (exact GELU,
    every unit kept) and the probed output (act, the units of keep = 0 zeroed), so the two differ
    only by what the reader switched."""
    d_ff = ff.fc1.out_features
    with torch.no_grad():
        pre = ff.fc1(x.to(ff.fc1.weight.dtype))  # (…, d_ff)
        ref_coeffs = gelu_exact(pre)  # (…, d_ff)
        ref = ff.fc2(ref_coeffs)  # (…, d_model)
        ranked = unit_order(x, ff, order, seed)  # (d_ff,)
        keep = torch.ones(d_ff)  # (d_ff,) 1 = unit kept
        keep[ranked[: round(zero_fraction * d_ff)]] = 0
        if unit >= 0:
            keep[unit] = 0
        out = ff.fc2(act(pre) * keep.to(pre.dtype))  # (…, d_model)
    return out, ref, keep
