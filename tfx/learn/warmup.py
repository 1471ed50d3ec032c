"""The warm-up race of chapter 06: post-LN and pre-LN stacks trained with and without learning-rate
warm-up, timed in optimiser steps to a loss threshold (steps, not seconds, so the result travels).

The task is small on purpose: every position of a random 8-token sequence must output the first
token, which a stack can only do by attending to position 0 (it needs its position embedding and
its attention). A few hundred steps settle it on a CPU, so the chapter runs the race live and
bench/warmup.py repeats it over seeds, depths and learning rates.
"""

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from tfx.model.layers import EncoderLayer, LayerNorm

OPTIMIZERS = ("adam", "radam")
INITS = ("default", "bert")
BERT_INIT_STD = 0.02  # BERT's initializer_range


@dataclass
class RaceConfig:
    """One training run. warmup = 0 means the full learning rate from step 1; otherwise the rate
    rises linearly over `warmup` steps and then stays. optimizer: "adam" (the chapter's race) or
    "radam" (Liu et al., 2020: Adam whose adaptive step is switched on only once the running
    estimate of the gradients' second moment has enough samples to be trusted; a built-in warm-up
    of Adam's own variance, which is how chapter 06 tells the two explanations of warm-up apart).
    init: "default" keeps PyTorch's initialisation (nn.Linear's uniform weights and biases of std
    1/sqrt(3 fan-in), token and position embeddings from N(0, 1)); "bert" draws every linear
    weight and both embeddings from N(0, 0.02²) and zeroes the linear biases, as BERT does (its
    LayerNorms start at γ = 1, β = 0 either way). The race's verdicts depend on it, so the bench
    runs both."""

    norm: str = "post"  # "post" (BERT, x = LN(x + f(x))) or "pre" (x = x + f(LN(x)))
    warmup: int = 0
    lr: float = 1e-2
    depth: int = 6
    d_model: int = 32
    n_heads: int = 4
    vocab: int = 16
    length: int = 8  # tokens per sequence; the target at every position is the first
    batch: int = 16
    max_steps: int = 200
    threshold: float = 0.1  # cross-entropy in nats; chance is ln(vocab) = 2.77
    seed: int = 0
    optimizer: str = "adam"
    init: str = "default"

    def __post_init__(self):
        if self.norm not in ("post", "pre"):
            raise ValueError(f"norm must be 'post' or 'pre', got {self.norm!r}")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {self.optimizer!r}")
        if self.init not in INITS:
            raise ValueError(f"init must be one of {INITS}, got {self.init!r}")
        for name in ("depth", "d_model", "n_heads", "vocab", "length", "batch", "max_steps"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        if isinstance(self.warmup, bool) or not isinstance(self.warmup, int) or self.warmup < 0:
            raise ValueError(f"warmup must be an int >= 0, got {self.warmup!r}")
        if not (isinstance(self.lr, (int, float)) and self.lr > 0):
            raise ValueError(f"lr must be a positive number, got {self.lr!r}")
        if not (isinstance(self.threshold, (int, float)) and self.threshold > 0):
            raise ValueError(f"threshold must be a positive number, got {self.threshold!r}")
        if self.d_model % self.n_heads:
            raise ValueError(
                f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})"
            )


class RaceModel(nn.Module):
    """Token + learned position embedding, `depth` tfx EncoderLayers, a final LayerNorm for pre-LN
    (its residual stream is never normalised otherwise), and a linear read-out to the vocabulary.
    Initialised as cfg.init says (RaceConfig); "default" draws exactly what it drew before the
    option existed, so results with the default init stay comparable."""

    def __init__(self, cfg: RaceConfig):
        super().__init__()
        d = cfg.d_model
        self.embed = nn.Embedding(cfg.vocab, d)
        self.pos = nn.Parameter(torch.randn(cfg.length, d))  # (L, d)
        self.layers = nn.ModuleList(
            EncoderLayer(d, cfg.n_heads, 2 * d, dropout=0.0, norm_first=cfg.norm == "pre")
            for _ in range(cfg.depth)
        )
        self.final_norm = LayerNorm(d) if cfg.norm == "pre" else nn.Identity()
        self.head = nn.Linear(d, cfg.vocab)
        if cfg.init == "bert":
            bert_init_(self)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """ids: (B, L) → logits (B, L, vocab)."""
        x = self.embed(ids) + self.pos  # (B, L, d)
        for layer in self.layers:
            x = layer(x)  # (B, L, d)
        return self.head(self.final_norm(x))  # (B, L, vocab)


def bert_init_(model: nn.Module, std: float = BERT_INIT_STD) -> nn.Module:
    """BERT's initialisation, in place: every nn.Linear weight, every nn.Embedding and every
    parameter owned directly by `model` itself (RaceModel's positions) from N(0, std²), every
    nn.Linear bias zero. LayerNorms are left as built (γ = 1, β = 0)."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.Linear):
                m.weight.normal_(0.0, std)
                if m.bias is not None:
                    m.bias.zero_()
            elif isinstance(m, nn.Embedding):
                m.weight.normal_(0.0, std)
        for p in model.parameters(recurse=False):
            p.normal_(0.0, std)
    return model


@dataclass
class RaceResult:
    config: RaceConfig
    steps: int  # steps until the loss first fell below the threshold; None if it never did
    losses: list  # the training loss at every step taken
    grad_norms: list  # the total gradient norm at every step (before the optimiser step)
    model: nn.Module  # the trained model, its .grad still holding the last step's gradients


def steps_by_cell(bench: dict) -> dict:
    """The warm-up bench's rows (bench/warmup.py's results JSON) grouped for reading:
    {init: {(depth, lr, norm, warm-up): [steps to the target per seed, None where it never got
    there]}}, init being "default" (PyTorch's) or "bert" (N(0, 0.02²)). Built in chapter 06."""
    if not isinstance(bench, dict) or "rows" not in bench:
        raise TypeError("bench must be a bench/warmup.py results dict (with its 'rows')")
    cells = {"default": {}, "bert": {}}
    for row in bench["rows"]:
        key = (row["depth"], row["lr"], row["norm"], row["warmup"])
        cells[row["init"]].setdefault(key, []).append(row["steps"])
    return cells


def race(cfg: RaceConfig) -> RaceResult:
    """Train a fresh RaceModel with Adam or RAdam (β = 0.9, 0.98, as in the Transformer paper) until
    the loss falls below cfg.threshold or cfg.max_steps pass. Seeds only its own generators."""
    if not isinstance(cfg, RaceConfig):
        raise TypeError(f"cfg must be a RaceConfig, got {type(cfg).__name__}")
    torch.manual_seed(cfg.seed)
    model = RaceModel(cfg)
    optimizer = torch.optim.Adam if cfg.optimizer == "adam" else torch.optim.RAdam
    opt = optimizer(model.parameters(), lr=cfg.lr, betas=(0.9, 0.98))
    ramp = (lambda t: min(1.0, (t + 1) / cfg.warmup)) if cfg.warmup else (lambda t: 1.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, ramp)
    g = torch.Generator().manual_seed(cfg.seed)
    losses, norms = [], []
    for step in range(1, cfg.max_steps + 1):
        ids = torch.randint(0, cfg.vocab, (cfg.batch, cfg.length), generator=g)  # (B, L)
        target = ids[:, :1].expand_as(ids)  # (B, L): the first token, everywhere
        loss = F.cross_entropy(model(ids).flatten(0, 1), target.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        norms.append(torch.cat([p.grad.flatten() for p in model.parameters()]).norm().item())
        opt.step()
        sched.step()
        losses.append(loss.item())
        if loss.item() < cfg.threshold:
            return RaceResult(cfg, step, losses, norms, model)
    return RaceResult(cfg, None, losses, norms, model)
