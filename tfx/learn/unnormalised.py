"""What the softmax's normalisation buys: attention whose weights are not divided by their sum,
trained on a small task next to softmax attention.

The first source article says that without the normalisation the gradients explode and the model
cannot train. The growth is real (an unnormalised output is a sum of L terms, not a mean), but
"cannot train" is a statement about training, so it needs a training run: one attention layer,
learned positions, a task that needs attention (write the sequence backwards), and the same
optimiser and steps for every weighting.
"""

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

# score (…, L, L) -> weights (…, L, L); only "softmax" makes each row sum to 1
WEIGHTINGS = {
    "softmax": lambda s: s.softmax(-1),
    "exp, no sum": torch.exp,
    # sigmoid attention: the −log L bias keeps a row's total near 1 at the start (no sum taken)
    "sigmoid − log L": lambda s: torch.sigmoid(s - math.log(s.shape[-1])),
}


class ReverseAttention(nn.Module):
    """One attention layer with learned positions and a classifier over the vocabulary."""

    def __init__(self, weighting: str, L: int, vocab: int, d: int):
        super().__init__()
        if weighting not in WEIGHTINGS:
            raise ValueError(f"weighting must be one of {sorted(WEIGHTINGS)}, got {weighting!r}")
        self.weigh = WEIGHTINGS[weighting]
        self.emb = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(0.5 * torch.randn(L, d))
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        self.head = nn.Linear(d, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, L) ids → (B, L, vocab) logits."""
        h = self.emb(x) + self.pos  # (B, L, d)
        s = self.q(h) @ self.k(h).transpose(1, 2) / math.sqrt(h.shape[-1])  # (B, L, L)
        return self.head(self.o(self.weigh(s) @ self.v(h)))  # (B, L, vocab)


@dataclass
class ReverseRun:
    weighting: str
    losses: list  # training loss per step
    accuracy: float  # on 512 fresh sequences
    first_grad_norm: float  # gradient norm of all parameters at step 0

    @property
    def finite(self) -> bool:
        return all(math.isfinite(x) for x in self.losses)


def train_reverse(
    weighting: str,
    L: int = 64,
    vocab: int = 16,
    d: int = 32,
    steps: int = 400,
    lr: float = 3e-3,
    seed: int = 0,
    optimizer: str = "adam",
) -> ReverseRun:
    """Train ReverseAttention to write random sequences backwards (target i is token L−1−i, so
    each query must find one key by position), with Adam or plain SGD. Adam divides each step by
    the gradient's own running size, so a gradient that is large by a constant factor does not
    change its steps; SGD's steps scale with it. Deterministic for a seed on one CPU."""
    for name, value in (("L", L), ("vocab", vocab), ("d", d), ("steps", steps)):
        if not isinstance(value, int) or value < 2:
            raise ValueError(f"{name} must be an int >= 2, got {value!r}")
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed)
    model = ReverseAttention(weighting, L, vocab, d)
    if optimizer not in ("adam", "sgd"):
        raise ValueError(f"optimizer must be 'adam' or 'sgd', got {optimizer!r}")
    make = torch.optim.Adam if optimizer == "adam" else torch.optim.SGD
    opt = make(model.parameters(), lr=lr)
    losses, first_grad_norm = [], None
    for _ in range(steps):
        x = torch.randint(0, vocab, (64, L), generator=g)  # (64, L)
        loss = F.cross_entropy(model(x).flatten(0, 1), x.flip(1).flatten())
        opt.zero_grad()
        loss.backward()
        if first_grad_norm is None:
            grads = [p.grad.norm() for p in model.parameters()]
            first_grad_norm = torch.stack(grads).norm().item()
        opt.step()
        losses.append(loss.item())
    x = torch.randint(0, vocab, (512, L), generator=g)  # (512, L)
    with torch.no_grad():
        accuracy = (model(x).argmax(-1) == x.flip(1)).float().mean().item()
    return ReverseRun(weighting, losses, accuracy, first_grad_norm)
