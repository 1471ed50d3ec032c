"""A stack of encoder layers whose wiring is switchable, and one probe that reads it layer by layer.

Chapters 05 and 06 ask one question from two sides: given where the LayerNorm sits (after the
residual sum, before the sub-layer, or nowhere) and whether the residual path is there, what happens
to the activations going up the stack (05) and to the gradients coming down it (06)? Both widgets
are thin shells over `probe_stack`, which builds a fresh stack, runs the running example through it,
runs one backward pass and returns everything both chapters read, so the two cannot disagree.
Built in chapter 05.

The stack is small (d_model 64 by default) and runs in float64: at the extreme settings (no
LayerNorm, init_scale 100, 12 layers or more) the activations overflow even so, and the probe then
reports inf / nan values instead of raising; the text renderers print them as "inf" and "n/a".
"""

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from tfx.core.example import RUNNING_EXAMPLE, build_vocab, running_example_ids
from tfx.inspect.timing import threads
from tfx.model.layers import EncoderLayer, LayerNorm

NORMS = ("post", "pre", "none")
MAX_DEPTH = 48  # the widgets' depth sliders stop here; twice BERT-large
INIT_SCALE_RANGE = (0.01, 100.0)  # the widgets' init-scale sliders stay inside this range
# init rules for the Linear weights (chapter 06): std = init_scale × INITS[init](fan_in, fan_out)
INITS = {
    "fan_in": lambda fan_in, fan_out: 1 / math.sqrt(fan_in),
    "xavier": lambda fan_in, fan_out: math.sqrt(2 / (fan_in + fan_out)),
    "he": lambda fan_in, fan_out: math.sqrt(2 / fan_in),
    "fixed": lambda fan_in, fan_out: 1.0,  # init_scale is the std itself: BERT's 0.02, 0.01
}


@dataclass
class StackConfig:
    """The switches of the stack. Every field is validated, with a message that names it.

    norm: "post" (x = LN(x + f(x)), BERT), "pre" (x = x + f(LN(x))) or "none" (no LayerNorm at all).
    residual: False drops the "x +" of both sub-layers, leaving x = f(x) (post: x = LN(f(x))).
    init_scale: every Linear weight is drawn from N(0, init_scale² / fan_in), biases are zero; at 1
        a Linear map keeps the size of its input, so what changes with depth comes from the wiring.
    final_norm: a LayerNorm after the last layer; None means "as the placement needs": True for
        pre-LN (whose residual stream is never normalised otherwise), False for post and none.
    init: the rule init_scale multiplies (INITS): "fan_in" (the default, 1/sqrt(fan_in)), "xavier"
        (sqrt(2/(fan_in + fan_out))), "he" (sqrt(2/fan_in)) or "fixed" (1: init_scale is the std).
    """

    depth: int = 12
    norm: str = "post"
    residual: bool = True
    init_scale: float = 1.0
    final_norm: bool | None = None
    d_model: int = 64
    n_heads: int = 4
    d_ff: int = 256
    seed: int = 0
    init: str = "fan_in"

    def __post_init__(self):
        if self.init not in INITS:
            raise ValueError(f"init must be one of {tuple(INITS)}, got {self.init!r}")
        if isinstance(self.depth, bool) or not isinstance(self.depth, int):
            raise TypeError(
                f"depth must be an int, got {type(self.depth).__name__}: {self.depth!r}"
            )
        if not 1 <= self.depth <= MAX_DEPTH:
            raise ValueError(f"depth must be in 1..{MAX_DEPTH}, got {self.depth}")
        if self.norm not in NORMS:
            raise ValueError(f"norm must be one of {NORMS}, got {self.norm!r}")
        if not isinstance(self.residual, bool):
            raise TypeError(f"residual must be a bool, got {type(self.residual).__name__}")
        lo, hi = INIT_SCALE_RANGE
        if not (isinstance(self.init_scale, (int, float)) and lo <= self.init_scale <= hi):
            raise ValueError(
                f"init_scale must be a number in [{lo}, {hi}], got {self.init_scale!r}"
            )
        if self.final_norm is None:
            self.final_norm = self.norm == "pre"
        if not isinstance(self.final_norm, bool):
            raise TypeError(f"final_norm must be a bool or None, got {self.final_norm!r}")
        if self.final_norm and self.norm == "none":
            raise ValueError("final_norm=True needs a LayerNorm placement, but norm is 'none'")
        for name in ("d_model", "n_heads", "d_ff"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        if self.d_model % self.n_heads:
            raise ValueError(
                f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})"
            )


class Stack(nn.Module):
    """Token embedding, `depth` tfx EncoderLayers wired as the config says, an optional final LN.

    With the residual on, each layer runs its own EncoderLayer.forward (norm "none" swaps its two
    LayerNorms for identities), so the stack is made of the layer every chapter uses, not a copy
    of it. With the residual off the two sub-layers are applied without the "x +", in the layer's
    own order.
    """

    def __init__(self, cfg: StackConfig):
        super().__init__()
        self.cfg = cfg
        self.vocab = build_vocab(RUNNING_EXAMPLE)
        self.embed = nn.Embedding(len(self.vocab), cfg.d_model)
        self.layers = nn.ModuleList(
            EncoderLayer(
                cfg.d_model, cfg.n_heads, cfg.d_ff, dropout=0.0, norm_first=cfg.norm == "pre"
            )
            for _ in range(cfg.depth)
        )
        if cfg.norm == "none":
            for layer in self.layers:
                layer.norm1, layer.norm2 = nn.Identity(), nn.Identity()
        self.final_norm = LayerNorm(cfg.d_model) if cfg.final_norm else nn.Identity()
        # an untrained MLM head: a fixed random read-out, so the loss starts near ln(vocab) whatever
        # the wiring, instead of a tied embedding that an identity stack would solve outright
        self.register_buffer("readout", torch.zeros(cfg.d_model, len(self.vocab)))
        self._init(cfg.init_scale, cfg.seed, cfg.init)

    @torch.no_grad()
    def _init(self, scale: float, seed: int, rule: str = "fan_in") -> None:
        g = torch.Generator().manual_seed(seed)
        self.embed.weight.copy_(torch.randn(self.embed.weight.shape, generator=g))  # N(0, 1)
        self.readout.copy_(
            torch.randn(self.readout.shape, generator=g) / math.sqrt(self.cfg.d_model)
        )
        for m in self.layers.modules():
            if isinstance(m, nn.Linear):
                std = scale * INITS[rule](m.in_features, m.out_features)
                m.weight.copy_(torch.randn(m.weight.shape, generator=g) * std)
                m.bias.zero_()

    def layer_forward(self, layer: EncoderLayer, x: torch.Tensor) -> torch.Tensor:
        """One layer on x: (B, L, d_model) → (B, L, d_model). Shown in chapter 05."""
        if self.cfg.residual:
            return layer(x)
        if layer.norm_first:  # pre-LN without the residual: x = f(LN(x))
            x = layer.attn(layer.norm1(x))[0]
            return layer.ff(layer.norm2(x))
        x = layer.norm1(layer.attn(x)[0])  # post-LN (or no LN) without the residual: x = LN(f(x))
        return layer.norm2(layer.ff(x))

    def forward(self, ids: torch.Tensor):
        """ids: (B, L) → (output (B, L, d_model), [x_0, x_1, …, x_depth]): x_0 is the embedding and
        x_l the residual stream after layer l, before any final LayerNorm."""
        xs = [self.embed(ids)]  # (B, L, d_model)
        for layer in self.layers:
            xs.append(self.layer_forward(layer, xs[-1]))  # (B, L, d_model)
        return self.final_norm(xs[-1]), xs

    def logits(self, out: torch.Tensor) -> torch.Tensor:
        """Scores of every vocabulary token at every position: (B, L, d) → (B, L, vocab)."""
        return out @ self.readout  # (B, L, vocab)


def build_stack(cfg: StackConfig) -> Stack:
    """A fresh float64 stack in eval mode, its weights drawn from cfg.seed only (no global RNG)."""
    if not isinstance(cfg, StackConfig):
        raise TypeError(f"cfg must be a StackConfig, got {type(cfg).__name__}")
    with torch.random.fork_rng(devices=[]):  # nn.Linear's own init draws from the global RNG
        return Stack(cfg).double().eval()


@dataclass
class StackProbe:
    """What one forward and one backward pass of a fresh stack on the running example show.

    Activation lists have depth + 1 entries: index 0 is the embedding x_0, index l the residual
    stream x_l after layer l (before the final LayerNorm). Gradient lists have depth entries: index
    l - 1 is layer l. Statistics are over every entry of the (1, 8, d_model) tensor; a value that
    overflowed is inf or nan (the renderers print "inf" and "n/a").
    """

    config: StackConfig
    act_mean: list  # mean of all entries of x_l
    act_std: list  # population std of all entries of x_l
    act_norm: list  # mean over the 8 tokens of ‖x_l[token]‖ (the L2 norm of one token's vector)
    act_cos: list  # mean over tokens of cos(x_l[token], x_0[token]): how much of the input survives
    grad_norm: list  # sqrt(Σ ‖∂loss/∂θ‖²) over the parameters θ of layer l
    input_grad_norm: list  # ‖∂loss/∂x_{l-1}‖: the gradient arriving at layer l's input
    out_mean: float  # mean of the final output (after the final LayerNorm, if any)
    out_std: float  # its population std
    out_norm: float  # its mean per-token L2 norm
    loss: float  # cross-entropy of reading each token back out through the fixed random read-out

    @property
    def finite(self) -> bool:
        """True when no activation, output statistic, loss or gradient overflowed."""
        vals = self.act_norm + self.grad_norm + [self.out_norm, self.out_std, self.loss]
        return all(math.isfinite(v) for v in vals)


def stack_loss(model: Stack):
    """The forward pass every probe runs: the running example through the stack, then the
    cross-entropy of reading each token back out. Returns (loss, output, [x_0, …, x_depth])."""
    if not isinstance(model, Stack):
        raise TypeError(f"model must be a tfx.inspect.stack.Stack, got {type(model).__name__}")
    ids = running_example_ids(model.vocab)  # (1, 8)
    out, xs = model(ids)  # (1, 8, d_model), depth + 1 × (1, 8, d_model)
    logits = model.logits(out)  # (1, 8, vocab)
    return F.cross_entropy(logits.flatten(0, 1), ids.flatten()), out, xs


def probe_stack(cfg: StackConfig) -> StackProbe:
    """Build a fresh stack from cfg, run the running example through it, backpropagate the loss of
    reading every token back out, and return the per-layer activation and gradient readouts.

    Pure: the same cfg gives the same numbers, and the global RNG is left alone. It runs on one
    thread (restored afterwards): the tensors are (1, 8, 64), where splitting an op across threads
    costs more than it saves, and on a busy machine waiting for a second thread made a 24-layer
    probe about ten times slower (measured: 5 s against 0.4 s).
    """
    with threads(1):
        model = build_stack(cfg)
        with torch.autograd.set_grad_enabled(True):
            loss, out, xs = stack_loss(model)
            for x in xs[:-1]:
                x.retain_grad()
            loss.backward()
    with threads(1), torch.no_grad():
        x0 = xs[0]
        act_mean = [x.mean().item() for x in xs]
        act_std = [x.std(unbiased=False).item() for x in xs]
        act_norm = [x.norm(dim=-1).mean().item() for x in xs]
        act_cos = [F.cosine_similarity(x, x0, dim=-1).mean().item() for x in xs]
        grad_norm = []
        for layer in model.layers:
            sq = sum(p.grad.pow(2).sum() for p in layer.parameters() if p.grad is not None)
            grad_norm.append(float(torch.as_tensor(sq).sqrt()))
        input_grad_norm = [x.grad.norm().item() for x in xs[:-1]]
        return StackProbe(
            cfg,
            act_mean,
            act_std,
            act_norm,
            act_cos,
            grad_norm,
            input_grad_norm,
            out.mean().item(),
            out.std(unbiased=False).item(),
            out.norm(dim=-1).mean().item(),
            loss.item(),
        )


def fmt(v: float, spec: str = ".4g") -> str:
    """A number as text; an overflowed value prints as "inf" (±∞) or "n/a" (nan), never raises.
    A fixed-point spec ("+.4f") switches to powers of ten from a million on: a stack that blows up
    without reaching inf (it depends on the CPU's rounding) prints 1.367e+109, not 110 digits."""
    if math.isnan(v):
        return "n/a"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if spec.endswith("f") and abs(v) >= 1e6:
        spec = spec[:-1] + "e"
    text = format(v, spec)
    if (
        float(text) == 0.0
    ):  # a tiny negative rounds to "-0.0000": print the zero without a sign flip
        text = format(0.0, spec)
    return text


def describe(cfg: StackConfig) -> str:
    """One line naming the wiring, e.g. "12 layers · pre-LN + final LN · residual on ·
    init ×1/√fan_in": the init names its rule, so a reader never takes the default fan-in scaling
    for BERT's fixed N(0, 0.02²)."""
    norm = {"post": "post-LN", "pre": "pre-LN", "none": "no LN"}[cfg.norm]
    if cfg.final_norm:
        norm += " + final LN"
    res = "on" if cfg.residual else "off"
    layers = f"{cfg.depth} layer" + ("s" if cfg.depth != 1 else "")
    init = (
        f"init ×{cfg.init_scale:g}/√fan_in"
        if cfg.init == "fan_in"
        else f"init {cfg.init} ×{cfg.init_scale:g}"
    )
    return f"{layers} · {norm} · residual {res} · {init}"


def activation_report(p: StackProbe) -> str:
    """Chapter 05's readout: per-layer activation statistics and the final output's."""
    lines = [describe(p.config), "layer      mean       std    ‖x‖/token   cos(x, x_0)"]
    for i, (m, s, n, c) in enumerate(zip(p.act_mean, p.act_std, p.act_norm, p.act_cos)):
        name = "embed" if i == 0 else str(i)
        lines.append(
            f"{name:>5}  {fmt(m, '+.4f'):>9} {fmt(s, '.4f'):>9} {fmt(n, '.4g'):>12}"
            f" {fmt(c, '+.4f'):>13}"
        )
    final = "after final LN" if p.config.final_norm else "= last layer"
    lines.append(
        f"output ({final}): mean {fmt(p.out_mean, '+.4f')}, std {fmt(p.out_std, '.4f')}, "
        f"‖x‖/token {fmt(p.out_norm, '.4g')}"
    )
    if not p.finite:
        lines.append("overflow: values beyond float64 print as inf, undefined ones as n/a")
    return "\n".join(lines)


def gradient_report(p: StackProbe) -> str:
    """Chapter 06's readout: per-layer parameter-gradient norms and the gradient at each input."""
    lines = [describe(p.config), f"loss {fmt(p.loss, '.4f')}", "layer   ‖∂loss/∂θ‖   ‖∂loss/∂x_in‖"]
    for i, (g, gi) in enumerate(zip(p.grad_norm, p.input_grad_norm), start=1):
        lines.append(f"{i:>5}  {fmt(g, '.4g'):>11}  {fmt(gi, '.4g'):>14}")
    ok = [g for g in p.grad_norm if math.isfinite(g) and g > 0]
    if len(ok) == len(p.grad_norm) and len(ok) > 1:
        lines.append(f"first / last layer: {fmt(ok[0] / ok[-1], '.4g')}")
    if not p.finite:
        lines.append("overflow: values beyond float64 print as inf, undefined ones as n/a")
    return "\n".join(lines)
