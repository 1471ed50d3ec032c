"""Masked-LM: choose positions, corrupt them, score the model only there.

BERT's recipe (Devlin et al. 2019, section 3.1 and the ablation of appendix C.2): each token is
selected with probability 0.15; a selected token becomes [MASK] 80% of the time, a random token 10%,
and stays unchanged 10%, so the model cannot learn that only [MASK] needs predicting. Hugging Face
draws the selection per token (a Bernoulli trial), as here; Google's original script masks an exact
count per sequence (`google_mask_count`). Padding and special tokens are never selected, and unlike
Hugging Face's collator our random replacements never draw a special token.

Built in chapter 07.
"""

import math
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from tfx.core.checks import check_probability, check_tensor

IGNORE = -100  # label of a position that is not scored (torch's and Hugging Face's convention)


@dataclass
class Masking:
    """The corruption recipe. mask + random must not exceed 1; the rest is left unchanged."""

    select: float = 0.15
    mask: float = 0.8
    random: float = 0.1

    def __post_init__(self):
        for name in ("select", "mask", "random"):
            check_probability(getattr(self, name), name)
        if self.mask + self.random > 1.0 + 1e-12:
            raise ValueError(
                f"mask + random must be at most 1 (the rest stays unchanged), got "
                f"{self.mask} + {self.random}"
            )


def mask_tokens(
    ids: torch.Tensor,
    special_ids,
    mask_id: int,
    vocab_size: int,
    masking: Masking = None,
    generator: torch.Generator = None,
) -> tuple:
    """(inputs, labels) for one batch. ids: (B, L) long. labels hold the original id at the
    selected positions and IGNORE (-100) elsewhere; inputs are ids with the selected positions
    corrupted by the 80/10/10 rule.

    special_ids (including [PAD]) are never selected, and random replacements are drawn uniformly
    from the ids that are not special.
    """
    masking = masking or Masking()
    check_tensor(ids, "ids")
    if ids.dim() != 2 or ids.dtype != torch.long:
        raise ValueError(f"ids must be a (B, L) long tensor, got {tuple(ids.shape)} {ids.dtype}")
    special = torch.as_tensor(list(special_ids), dtype=torch.long)
    if mask_id not in special.tolist():
        raise ValueError(f"mask_id {mask_id} must be one of special_ids {special.tolist()}")
    if ids.numel() and (ids.min() < 0 or ids.max() >= vocab_size):
        raise ValueError(
            f"ids must lie in [0, vocab_size={vocab_size}), got values from {ids.min().item()} "
            f"to {ids.max().item()}"
        )
    normal = torch.ones(vocab_size, dtype=torch.bool)
    normal[special] = False
    candidates = normal.nonzero().squeeze(1)  # (V_normal,) ids a random replacement may take
    if candidates.numel() == 0:
        raise ValueError("every id is special: there is nothing to predict or to draw")

    g = generator
    u = torch.rand(ids.shape, generator=g)  # (B, L)
    selected = (u < masking.select) & normal[ids]  # (B, L) bool: specials and [PAD] never
    labels = torch.where(selected, ids, torch.full_like(ids, IGNORE))  # (B, L)
    action = torch.rand(ids.shape, generator=g)  # (B, L): which of the three treatments
    to_mask = selected & (action < masking.mask)
    to_random = selected & (action >= masking.mask) & (action < masking.mask + masking.random)
    pick = torch.randint(len(candidates), ids.shape, generator=g)  # (B, L)
    inputs = torch.where(to_mask, torch.full_like(ids, mask_id), ids)
    inputs = torch.where(to_random, candidates[pick], inputs)  # (B, L)
    return inputs, labels


def masking_frequencies(ids, inputs, labels, special_ids, mask_id: int) -> dict:
    """Measured rates: selected / maskable tokens, then [MASK] / random / unchanged among selected.

    "random" counts a replacement that differs from the original; a replacement that happens to
    draw the original counts as unchanged, as it would for any observer (Hugging Face's rates are
    measured the same way in chapter 07).
    """
    maskable = ~torch.isin(ids, torch.as_tensor(list(special_ids)))  # (B, L)
    sel = labels != IGNORE  # (B, L)
    masked = sel & (inputs == mask_id)
    unchanged = sel & (inputs == ids)
    random = sel & ~masked & ~unchanged
    n = int(sel.sum())
    d = max(n, 1)
    return {
        "selected": n / max(int(maskable.sum()), 1),
        "mask": int(masked.sum()) / d,
        "random": int(random.sum()) / d,
        "unchanged": int(unchanged.sum()) / d,
        "n_selected": n,
    }


def mlm_loss(logits: torch.Tensor, labels: torch.Tensor, label_smoothing: float = 0.0):
    """Mean cross-entropy over the scored positions only.

    logits: (B, L, V) with labels (B, L), or already gathered rows (N, V) with labels (N,).
    With no position selected the loss is 0 (connected to the graph, so backward still works), not
    the NaN that a mean over zero elements gives.
    """
    check_probability(label_smoothing, "label_smoothing")
    if logits.shape[:-1] != labels.shape:
        raise ValueError(
            f"logits {tuple(logits.shape)} and labels {tuple(labels.shape)} do not match: "
            "expected logits (…, V) with labels (…)"
        )
    logits, labels = logits.reshape(-1, logits.size(-1)), labels.reshape(-1)  # (N, V), (N,)
    keep = labels != IGNORE
    if not bool(keep.any()):
        return logits.sum() * 0.0
    return F.cross_entropy(
        logits[keep].float(), labels[keep], label_smoothing=label_smoothing
    )  # scalar


def mlm_forward(model, inputs, labels, attention_mask=None, label_smoothing: float = 0.0):
    """Loss and number of scored rows; the decoder runs on the selected rows only (positions=)."""
    positions = labels != IGNORE  # (B, L)
    if attention_mask is None:
        attention_mask = (inputs != model.cfg.pad_token_id).long()  # (B, L)
    n = int(positions.sum())
    if n == 0:  # decode one row and weight it 0: a zero loss that backward still accepts
        first = torch.zeros_like(positions)
        first[0, 0] = True
        return model(inputs, attention_mask=attention_mask, positions=first).sum() * 0.0, 0
    logits = model(inputs, attention_mask=attention_mask, positions=positions)  # (N, V)
    return mlm_loss(logits, labels[positions], label_smoothing), n


def google_mask_count(n_tokens: int, select: float = 0.15, max_predictions: int = 20) -> int:
    """How many tokens Google's create_pretraining_data.py masks in a sequence of n_tokens tokens
    ([CLS] and [SEP] included in the count): min(max_predictions, max(1, round(n · p)))."""
    return min(max_predictions, max(1, int(round(n_tokens * select))))


def bernoulli_count_pmf(n: int, p: float = 0.15) -> list:
    """P(k of n tokens selected) for k = 0..n, when each is selected independently with p."""
    return [math.comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(n + 1)]


@torch.no_grad()
def top_k(model, ids: torch.Tensor, position: int, k: int = 5, exclude=()) -> list:
    """[(id, probability)] of the k most likely tokens at one position of a (1, L) sequence.

    exclude: ids never to propose (the special tokens); the softmax runs over the others.
    """
    was = model.training
    model.eval()
    logits = model(ids, attention_mask=(ids != model.cfg.pad_token_id).long())  # (1, L, V)
    model.train(was)
    scores = logits[0, position].float()  # (V,)
    scores[list(exclude)] = -float("inf")
    p = scores.softmax(-1)  # (V,)
    values, idx = p.topk(k)
    return list(zip(idx.tolist(), values.tolist()))


@torch.no_grad()
def masked_predictions(model, batches, exclude=()) -> tuple:
    """(predicted ids, label ids), both (N,), at every scored position of (inputs, labels) batches:
    the most likely token, never one of `exclude` (the special tokens). Eval mode, restored."""
    was = model.training
    model.eval()
    preds, targets = [], []
    for inputs, labels in batches:
        positions = labels != IGNORE
        logits = model(
            inputs, attention_mask=(inputs != model.cfg.pad_token_id).long(), positions=positions
        ).float()  # (N_batch, V)
        if len(exclude):
            logits[:, list(exclude)] = -float("inf")
        preds.append(logits.argmax(-1))
        targets.append(labels[positions])
    model.train(was)
    if not preds or sum(len(t) for t in targets) == 0:
        raise ValueError("no position is scored in these batches (every label is IGNORE)")
    return torch.cat(preds), torch.cat(targets)  # (N,), (N,)


def masked_accuracy(model, batches, exclude=()) -> float:
    """Fraction of scored positions whose most likely token is the label, over (inputs, labels)
    batches. exclude: ids the model is not allowed to predict (the special tokens)."""
    pred, target = masked_predictions(model, batches, exclude)
    return int((pred == target).sum()) / len(target)


def baseline_accuracies(train_ids: torch.Tensor, labels: torch.Tensor, special_ids) -> dict:
    """Held-out accuracy of two guesses that ignore the context, from training-split counts:
    always the most frequent token; a token drawn from the unigram distribution (its expected
    accuracy, sum_t p_train(t) · p_held_out(t), computed exactly rather than sampled)."""
    V = int(max(train_ids.max(), labels.max())) + 1
    counts = torch.bincount(train_ids.reshape(-1), minlength=V).double()  # (V,)
    counts[list(special_ids)] = 0
    p_train = counts / counts.sum()  # (V,)
    target = labels[labels != IGNORE]  # (N,)
    if target.numel() == 0:
        raise ValueError("baseline_accuracies: no scored position in labels")
    p_held = torch.bincount(target, minlength=V).double() / target.numel()  # (V,)
    top = int(p_train.argmax())
    return {
        "most frequent": float(p_held[top]),
        "unigram": float((p_train * p_held).sum()),
        "most frequent id": top,
    }


PROJECTIONS = ("W_Q", "W_K", "W_V", "W_O")
BIASES = ("b_Q", "b_K", "b_V", "b_O")  # their biases, for the article's bias-free layer


@contextmanager
def zeroed_projections(model, zeroed):
    """Temporarily zero attention weight matrices, or their biases, of a BertForMaskedLM.

    zeroed: iterable of (layer index, name), name one of "W_Q", "W_K", "W_V", "W_O" (the three
    row blocks of the fused qkv weight (3d, d), and attn.out.weight) or "b_Q", "b_K", "b_V", "b_O"
    (the matching blocks of qkv.bias (3d,), and attn.out.bias). Zeroing a weight leaves its bias;
    zeroing all eight of a layer gives the layer of a model built without attention biases (the
    source article's `bias=False`) with its projections zeroed. Restored on exit.
    """
    saved = []
    n_layers = len(model.bert.layers)
    with torch.no_grad():
        try:
            for layer, name in zeroed:
                if name not in PROJECTIONS + BIASES:
                    raise ValueError(
                        f"projection must be one of {PROJECTIONS + BIASES}, got {name!r}"
                    )
                if not (isinstance(layer, int) and 0 <= layer < n_layers):
                    raise ValueError(f"layer must be an int in [0, {n_layers}), got {layer!r}")
                attn = model.bert.layers[layer].attn
                bias = name in BIASES
                if name[2] == "O":
                    w = attn.out.bias if bias else attn.out.weight  # (d,) or (d, d)
                else:
                    i, d = "QKV".index(name[2]), attn.d_model
                    full = attn.qkv.bias if bias else attn.qkv.weight  # (3d,) or (3d, d)
                    if full is None:
                        continue  # a bias-free layer: nothing to zero
                    w = full[i * d : (i + 1) * d]  # (d,) or (d, d): a view
                if w is None:
                    continue
                saved.append((w, w.clone()))
                w.zero_()
            yield model
        finally:
            for w, old in reversed(saved):
                w.copy_(old)


@contextmanager
def naive_attention(model):
    """Run a model's attention through tfx's explicit softmax(QKᵀ/√d)V so the weights come back
    (the fused sdpa kernel does not return them); the same function, restored on exit."""
    layers = [layer.attn for layer in model.bert.layers]
    old = [a.attn_impl for a in layers]
    for a in layers:
        a.attn_impl = "naive"
    try:
        yield model
    finally:
        for a, impl in zip(layers, old):
            a.attn_impl = impl


@torch.no_grad()
def attention_weights(model, ids: torch.Tensor) -> list:
    """One (B, H, L, L) attention tensor per layer, in eval mode."""
    was = model.training
    model.eval()
    with naive_attention(model):
        _, weights = model.bert(
            ids, attention_mask=(ids != model.cfg.pad_token_id).long(), output_attentions=True
        )
    model.train(was)
    return weights


MAX_CHARS = 62  # a [CLS] … [SEP] sequence of the chapter's model holds 64 tokens


def mlm_report(model, vocab, text: str, position: int = 0, zeroed=(), k: int = 5) -> str:
    """What the chapter's widget prints: the top-k tokens with probabilities at the masked position.

    text: a sentence; a "[MASK]" in it is the position to predict, else `position` (1-based, over
    the characters) is masked. zeroed: (layer, projection) pairs zeroed for this prediction.
    Bad input (empty, too long, no position, unknown characters) gives a message, not an error.
    """
    text = (text or "").strip()
    ids = vocab.encode(text)
    if not ids:
        return "Type a sentence (Chinese characters), then mask one position."
    if len(ids) > MAX_CHARS:
        return f"Too long: {len(ids)} characters; the model reads at most {MAX_CHARS}."
    mask_id, unk = vocab["[MASK]"], vocab["[UNK]"]
    n_masks = ids.count(mask_id)
    if n_masks > 1:
        return f"Use one [MASK] at a time (found {n_masks})."
    if n_masks == 0:
        if not 1 <= position <= len(ids):
            return f"Choose a position from 1 to {len(ids)} to mask, or type [MASK] in the text."
        original = vocab.itos[ids[position - 1]]
        ids[position - 1] = mask_id
    else:
        position, original = ids.index(mask_id) + 1, None
    chars = [c for c in text.replace("[MASK]", "\0") if not c.isspace()]
    unknown = sorted({c for c, i in zip(chars, ids) if i == unk})
    seq = torch.tensor([[vocab["[CLS]"], *ids, vocab["[SEP]"]]])  # (1, L)
    with zeroed_projections(model, zeroed):
        top = top_k(model, seq, position, k, exclude=vocab.special_ids)
    shown = "".join("[MASK]" if i == mask_id else vocab.itos[i] for i in ids)
    lines = [f"input: {shown}   (position {position}" + (f", was {original})" if original else ")")]
    if unknown:
        lines.append(f"unknown characters, read as [UNK]: {' '.join(unknown)}")
    if zeroed:
        lines.append("zeroed: " + ", ".join(f"layer {i + 1} {n}" for i, n in sorted(zeroed)))
    lines += [f"{r}. {vocab.itos[i]}  {p:.3f}" for r, (i, p) in enumerate(top, 1)]
    return "\n".join(lines)
