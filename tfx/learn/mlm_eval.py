"""Reading a masked-LM run: accuracy and cross-entropy split by the kind of scored position, and
the count baselines a model must beat before it can be said to have learned anything.

Why split by kind: BERT's 80/10/10 rule scores three different tasks at once. At a [MASK]
position the answer must come from the context. At an unchanged position (10 % of the scored
ones) the answer is in the input, so a rule that copies the visible token is right there without
reading any context; at a random position the input is a decoy. One accuracy over all three mixes
a real task with a free one, so the book reports the [MASK] positions on their own.

Why these baselines: a model that copies what it sees and otherwise guesses the most frequent
character has learned no context (the copy rule). A model that cannot beat counting neighbouring
characters (the bidirectional bigram, P(c | left) · P(right | c), counted on the training split)
has learned no more than a table of pairs would. The review of chapter 07 (issue 19) found its
800-step model below the bigram; these numbers are how the book model is held to account.

Cross-entropies here are over the ordinary tokens: the special tokens are never a label, so both
the model's and the bigram's probabilities are renormalised over the others.
"""

import math

import torch

from tfx.core.checks import check_tensor
from tfx.learn.mlm import IGNORE

KINDS = ("mask", "random", "unchanged")


def _check_pair(inputs, labels) -> None:
    check_tensor(inputs, "inputs")
    check_tensor(labels, "labels")
    if inputs.dim() != 2 or inputs.dtype != torch.long:
        raise ValueError(f"inputs must be a (B, L) long tensor, got {tuple(inputs.shape)}")
    if labels.shape != inputs.shape or labels.dtype != torch.long:
        raise ValueError(
            f"labels must be a long tensor of the shape of inputs {tuple(inputs.shape)}, got "
            f"{tuple(labels.shape)} {labels.dtype}"
        )


def position_kinds(inputs: torch.Tensor, labels: torch.Tensor, mask_id: int) -> torch.Tensor:
    """(N,) codes, one per scored position in row-major order: 0 = [MASK] in the input, 1 = a
    random replacement (input differs from label), 2 = unchanged (input equals label). A random
    draw that happens to pick the original counts as unchanged, as
    tfx.learn.mlm.masking_frequencies."""
    _check_pair(inputs, labels)
    sel = labels != IGNORE  # (B, L)
    x, y = inputs[sel], labels[sel]  # (N,), (N,)
    kinds = torch.full_like(y, 1)
    kinds[x == y] = 2
    kinds[x == mask_id] = 0
    return kinds  # (N,)


def score(log_probs: torch.Tensor, targets: torch.Tensor, kinds: torch.Tensor) -> dict:
    """{"all" | "mask" | "random" | "unchanged": {"n", "accuracy", "cross_entropy"}} from (N, V)
    log-probabilities (or (N,) predicted ids, then no cross-entropy) and (N,) targets and kinds."""
    check_tensor(log_probs, "log_probs")
    check_tensor(targets, "targets")
    check_tensor(kinds, "kinds")
    n = targets.numel()
    if n == 0:
        raise ValueError("targets is empty: no scored position")
    if log_probs.size(0) != n or kinds.numel() != n:
        raise ValueError(
            f"log_probs, targets and kinds must have one row each per position, got "
            f"{log_probs.size(0)}, {n}, {kinds.numel()}"
        )
    if log_probs.dim() == 2:
        pred = log_probs.argmax(-1)  # (N,)
        nll = -log_probs.gather(1, targets[:, None]).squeeze(1).double()  # (N,)
    elif log_probs.dim() == 1:
        pred, nll = log_probs, None
    else:
        raise ValueError(f"log_probs must be (N, V) or (N,), got {tuple(log_probs.shape)}")
    right = (pred == targets).double()  # (N,)
    out = {}
    for name, keep in [("all", torch.ones_like(right, dtype=torch.bool))] + [
        (k, kinds == i) for i, k in enumerate(KINDS)
    ]:
        m = int(keep.sum())
        out[name] = {
            "n": m,
            "accuracy": float(right[keep].mean()) if m else math.nan,
            "cross_entropy": float(nll[keep].mean()) if (m and nll is not None) else None,
        }
    return out


@torch.no_grad()
def model_log_probs(model, batches, mask_id: int, exclude=()) -> tuple:
    """(log-probabilities (N, V), targets (N,), kinds (N,)) at every scored position of
    (inputs, labels) batches, in eval mode (restored). exclude: ids given probability 0 (the
    special tokens), the softmax renormalised over the rest."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    was = model.training
    model.eval()
    logps, targets, kinds = [], [], []
    try:
        for inputs, labels in batches:
            _check_pair(inputs, labels)
            positions = labels != IGNORE  # (B, L)
            if not bool(positions.any()):
                continue
            logits = model(
                inputs,
                attention_mask=(inputs != model.cfg.pad_token_id).long(),
                positions=positions,
            ).float()  # (N_batch, V)
            if len(exclude):
                logits[:, list(exclude)] = -math.inf
            logps.append(logits.log_softmax(-1))
            targets.append(labels[positions])
            kinds.append(position_kinds(inputs, labels, mask_id))
    finally:
        model.train(was)
    if not targets:
        raise ValueError("batches hold no scored position (every label is IGNORE)")
    return torch.cat(logps), torch.cat(targets), torch.cat(kinds)


def evaluate(model, batches, mask_id: int, exclude=()) -> dict:
    """The model's accuracy and cross-entropy by kind of position (see score) on held-out
    (inputs, labels) batches; the most likely token is never one of `exclude`."""
    return score(*model_log_probs(model, batches, mask_id, exclude))


def bigram_log_probs(train_ids: torch.Tensor, vocab_size: int, pad_id: int = 0, smoothing=0.01):
    """(V, V) log P(next = b | current = a), counted over the adjacent pairs of the packed training
    rows ([CLS] and [SEP] included, pairs with [PAD] left out), add-`smoothing` per cell."""
    check_tensor(train_ids, "train_ids")
    if train_ids.dim() != 2 or train_ids.dtype != torch.long:
        raise ValueError(f"train_ids must be a (N, L) long tensor, got {tuple(train_ids.shape)}")
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 1:
        raise TypeError(f"vocab_size must be an int >= 1, got {vocab_size!r}")
    if train_ids.numel() and int(train_ids.max()) >= vocab_size:
        raise ValueError(
            f"train_ids holds id {int(train_ids.max())}, not below vocab_size={vocab_size}"
        )
    if not (isinstance(smoothing, (int, float)) and smoothing > 0):
        raise ValueError(f"smoothing must be a number > 0, got {smoothing!r}")
    a, b = train_ids[:, :-1].reshape(-1), train_ids[:, 1:].reshape(-1)  # (N·(L−1),) each
    keep = (a != pad_id) & (b != pad_id)
    counts = torch.bincount(a[keep] * vocab_size + b[keep], minlength=vocab_size * vocab_size)
    counts = counts.double().view(vocab_size, vocab_size) + smoothing  # (V, V)
    return (counts / counts.sum(1, keepdim=True)).log()  # (V, V)


def bigram_posterior(
    log_next: torch.Tensor,
    inputs: torch.Tensor,
    labels: torch.Tensor,
    mask_id: int,
    pad_id: int = 0,
    exclude=(),
) -> torch.Tensor:
    """(N, V) log P(c | left, right) ∝ P(c | left) · P(right | c) at every scored position, from
    the visible neighbours only (a neighbour that is [MASK] or [PAD], or past the row's end, adds
    nothing). Like the model, it does not look at the position's own input token."""
    _check_pair(inputs, labels)
    check_tensor(log_next, "log_next", floating=True)
    V = log_next.size(0)
    if log_next.shape != (V, V):
        raise ValueError(f"log_next must be a square (V, V) table, got {tuple(log_next.shape)}")
    B, L = inputs.shape
    rows, cols = (labels != IGNORE).nonzero(as_tuple=True)  # (N,), (N,) in row-major order
    left = inputs[rows, (cols - 1).clamp(min=0)]  # (N,)
    right = inputs[rows, (cols + 1).clamp(max=L - 1)]  # (N,)
    s = torch.zeros(len(rows), V, dtype=torch.float64)  # (N, V)
    lm = (cols > 0) & (left != mask_id) & (left != pad_id)
    s[lm] += log_next[left[lm]]  # log P(c | left)
    rm = (cols + 1 < L) & (right != mask_id) & (right != pad_id)
    s[rm] += log_next[:, right[rm]].T  # log P(right | c), (N_r, V)
    if len(exclude):
        s[:, list(exclude)] = -math.inf
    return s.log_softmax(-1)  # (N, V)


def copy_rule(inputs: torch.Tensor, labels: torch.Tensor, mask_id: int, fallback_id: int):
    """(N,) guesses that read no context: the visible input token, or fallback_id (the most
    frequent training token) where the input is [MASK]."""
    _check_pair(inputs, labels)
    x = inputs[labels != IGNORE]  # (N,)
    return torch.where(x == mask_id, torch.full_like(x, fallback_id), x)


def baselines(train_ids, inputs, labels, mask_id: int, special_ids, pad_id: int = 0) -> dict:
    """{"copy rule": score, "bigram": score} on the scored positions of (inputs, labels), both
    counted on train_ids alone (see copy_rule and bigram_posterior)."""
    check_tensor(train_ids, "train_ids")
    special = list(special_ids)
    V = int(max(train_ids.max(), labels.max(), inputs.max())) + 1
    counts = torch.bincount(train_ids.reshape(-1), minlength=V)  # (V,)
    counts[special] = 0
    kinds = position_kinds(inputs, labels, mask_id)
    targets = labels[labels != IGNORE]
    copy = copy_rule(inputs, labels, mask_id, int(counts.argmax()))
    bigram = bigram_posterior(
        bigram_log_probs(train_ids, V, pad_id), inputs, labels, mask_id, pad_id, special
    )
    return {"copy rule": score(copy, targets, kinds), "bigram": score(bigram, targets, kinds)}
