"""Training pieces in numpy: Adam, the Noam warm-up schedule, cross-entropy with label smoothing.

Each is written to match a reference we did not write (torch.optim.Adam, transformers'
get_inverse_sqrt_schedule, torch's CrossEntropyLoss), and the book checks that it does.
"""

import math

import numpy as np

from tfx.core.shapes import fmt_shape


class Adam:
    """torch.optim.Adam's update on a dict of numpy arrays, in place, with bias-corrected first and
    second moments.

    p ← p − lr · m̂ / (sqrt(v̂) + eps), with m̂ = m / (1 − β1ᵗ) and v̂ = v / (1 − β2ᵗ). An `lr`
    given to step overrides the constructor's, so a schedule can set it at every step.
    Built in chapter 09.
    """

    def __init__(self, params: dict, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8):
        self.params, self.lr, self.betas, self.eps = params, lr, betas, eps
        self.m = {k: np.zeros_like(v) for k, v in params.items()}
        self.v = {k: np.zeros_like(v) for k, v in params.items()}
        self.t = 0

    def step(self, grads: dict, lr: float = None) -> None:
        lr = self.lr if lr is None else lr
        b1, b2 = self.betas
        self.t += 1
        for k, p in self.params.items():
            g = grads[k]
            if g.shape != p.shape:
                raise ValueError(
                    f"grad {k!r}: expected shape {fmt_shape(p.shape)}, got {fmt_shape(g.shape)}"
                )
            self.m[k] = b1 * self.m[k] + (1 - b1) * g
            self.v[k] = b2 * self.v[k] + (1 - b2) * g * g
            m_hat = self.m[k] / (1 - b1**self.t)
            v_hat = self.v[k] / (1 - b2**self.t)
            p -= lr * m_hat / (np.sqrt(v_hat) + self.eps)


def noam_lr(step, d_model: int, warmup_steps: int, factor: float = 1.0):
    """The "Attention Is All You Need" schedule, for steps ≥ 1:
    factor · d^-0.5 · min(step^-0.5, step · warmup^-1.5), a linear rise for warmup_steps steps, then
    a 1/sqrt(step) decay. Works on ints and arrays. Built in chapter 09."""
    step = np.asarray(step, dtype=np.float64)
    if np.any(step < 1):
        raise ValueError("noam_lr counts steps from 1 (step 0 would divide by zero)")
    return factor * d_model**-0.5 * np.minimum(step**-0.5, step * warmup_steps**-1.5)


def log_softmax(z):
    """log softmax(z) over the last axis, as z − max − log Σ exp(z − max): finite where softmax
    itself underflows to 0. Built in chapter 09."""
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def cross_entropy(logits, targets, label_smoothing: float = 0.0):
    """Mean cross-entropy between softmax(logits) and the smoothed target q = (1 − ε)·one_hot + ε/K.

    logits: (N, K), targets: (N,) ints. Returns (loss, dlogits) with dlogits = (softmax − q) / N,
    the same loss as torch.nn.CrossEntropyLoss(label_smoothing=ε). Built in chapter 09.
    """
    if logits.ndim != 2 or targets.shape != logits.shape[:1]:
        raise ValueError(
            f"expected logits (N, K) and targets (N,), got {fmt_shape(logits.shape)} and "
            f"{fmt_shape(targets.shape)}"
        )
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
    N, K = logits.shape
    q = np.full((N, K), label_smoothing / K)  # (N, K)
    q[np.arange(N), targets] += 1.0 - label_smoothing
    logp = log_softmax(logits)  # (N, K)
    loss = -(q * logp).sum() / N
    return loss, (np.exp(logp) - q) / N


def grad_norms_by_part(grads: dict) -> dict:
    """The gradient norm of each part of a model whose keys look like "tok_emb",
    "layers.0.attn.qkv.weight", "head.bias": one number per embedding, layer and head, the cheapest
    way to see a gradient vanish or explode."""
    sq = {}
    for name, g in grads.items():
        part = ".".join(name.split(".")[:2]) if name.startswith("layers.") else name.split(".")[0]
        sq[part] = sq.get(part, 0.0) + float(np.square(g).sum())
    return {part: math.sqrt(v) for part, v in sq.items()}
