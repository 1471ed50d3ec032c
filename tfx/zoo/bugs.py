"""Bugs injected into tfx's own parts, each beside its healthy twin: the buggy line is marked
`# BUG` so that a chapter can show it next to the correct one (tfx.book.source.show_source). Small
on purpose: they are teaching material. tfx.zoo.bugzoo catalogues them and runs their symptoms.

Built in chapter 11.
"""

import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from tfx.learn.mlm import mask_tokens
from tfx.model.attention import MultiHeadAttention, causal_mask
from tfx.model.bert import BertEmbeddings, BertForMaskedLM, BertModel
from tfx.model.layers import EncoderLayer

# ---- attention kernels: the healthy one and its buggy variations -------------------------------


def attention(q, k, v, mask=None):
    """softmax(q kᵀ/√d_k) v, the minimal correct kernel; mask: bool, True = may attend."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (…, L_q, L_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)  # finite: no NaN row
    return scores.softmax(dim=-1) @ v  # (…, L_q, d_v)


def attention_unscaled(q, k, v, mask=None):
    """Bug: the scores are not divided by √d_k."""
    scores = q @ k.transpose(-2, -1)  # (…, L_q, L_k)   BUG: no / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    return scores.softmax(dim=-1) @ v  # (…, L_q, d_v)


def attention_softmax_queries(q, k, v, mask=None):
    """Bug: the softmax normalises over the queries (dim=-2), not over the keys."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (…, L_q, L_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    return scores.softmax(dim=-2) @ v  # (…, L_q, d_v)   BUG: dim=-2


def attention_inf_mask(q, k, v, mask=None):
    """Bug: masked scores set to −inf; a row with every key masked is softmax(−inf, …) = 0/0."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (…, L_q, L_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))  # BUG: a fully masked row → NaN
    return scores.softmax(dim=-1) @ v  # (…, L_q, d_v)


def attention_additive_mask(q, k, v, mask=None):
    """Bug: an additive −1e9 mask, fine in float32, cast to float16 becomes −inf (max 65 504)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (…, L_q, L_k)
    if mask is not None:
        bias = torch.zeros(mask.shape).masked_fill(~mask, -1e9)  # float32: fine
        scores = scores + bias.to(scores.dtype)  # BUG: in float16, −1e9 → −inf
    return scores.softmax(dim=-1) @ v  # (…, L_q, d_v)


def attention_fill_1e9(q, k, v, mask=None):
    """Bug: masked_fill with −1e9 raises on a float16 tensor (the value overflows float16)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (…, L_q, L_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, -1e9)  # BUG: RuntimeError in float16
    return scores.softmax(dim=-1) @ v  # (…, L_q, d_v)


def causal_mask_off_by_one(L: int) -> torch.Tensor:
    """Bug: (L, L) mask where position i may attend to 0..i + 1: one step of the future."""
    return torch.ones(L, L, dtype=torch.bool).tril(diagonal=1)  # BUG: tril(), not tril(1)


# ---- attention modules -------------------------------------------------------------------------


class KernelAttention(MultiHeadAttention):
    """tfx's MultiHeadAttention with its kernel swapped for `kernel`: where kernel bugs go in."""

    def __init__(self, d_model: int, n_heads: int, kernel=attention):
        super().__init__(d_model, n_heads)
        self.kernel = kernel

    def forward(self, x, mask=None, *unused):  # unused: EncoderLayer's head_scale and the rest
        q, k, v = self.qkv(x).split(self.d_model, dim=-1)  # 3 × (B, L, d_model)
        q, k, v = self.split_heads(q), self.split_heads(k), self.split_heads(v)  # (B, H, L, d_k)
        return self.out(self.merge_heads(self.kernel(q, k, v, mask))), None  # (B, L, d_model)


class ViewHeadsAttention(MultiHeadAttention):
    """Bug: heads merged with view alone, where a transpose was needed. Every shape is right;
    each output row holds pieces of several positions."""

    def merge_heads(self, t):
        B, H, L, d_k = t.shape
        return t.view(B, L, H * d_k)  # (B, L, d_model)   BUG: no transpose(1, 2) first


class ViewMergeAttention(MultiHeadAttention):
    """Bug: view of a transposed, hence non-contiguous, tensor: raises RuntimeError (A50)."""

    def merge_heads(self, t):
        B, H, L, d_k = t.shape
        return t.transpose(1, 2).view(B, L, H * d_k)  # (B, L, d_model)   BUG: raises


class ContiguousMergeAttention(MultiHeadAttention):
    """The fix of ViewMergeAttention (A50): .contiguous() before .view (or .reshape, as tfx)."""

    def merge_heads(self, t):
        B, H, L, d_k = t.shape
        return t.transpose(1, 2).contiguous().view(B, L, H * d_k)  # (B, L, d_model)


class TinyCausalLM(nn.Module):
    """Next-token model: embeddings, one pre-LN tfx EncoderLayer under mask_fn(L), a read-out."""

    def __init__(self, vocab: int = 16, d: int = 32, L: int = 8, mask_fn=causal_mask):
        super().__init__()
        self.embed, self.pos = nn.Embedding(vocab, d), nn.Parameter(torch.randn(L, d) * 0.1)
        self.layer = EncoderLayer(d, 4, 2 * d, dropout=0.0, norm_first=True)
        self.head, self.mask_fn = nn.Linear(d, vocab), mask_fn

    def forward(self, ids):
        L = ids.size(1)
        x = self.embed(ids) + self.pos[:L]  # (B, L, d)
        return self.head(self.layer(x, self.mask_fn(L)))  # (B, L, vocab)


class EmbeddingsWithoutPositions(BertEmbeddings):
    """Bug: BERT's embeddings with the position term forgotten: the model reads a bag of tokens."""

    def forward(self, input_ids, token_type_ids):
        x = self.tok(input_ids) + self.seg(token_type_ids)  # (B, L, d)   BUG: + self.pos(L)
        return self.drop(self.norm(x))  # (B, L, d_model)


def bert_without_positions(model: BertModel) -> BertModel:
    """The same BertModel with its embeddings swapped for EmbeddingsWithoutPositions."""
    emb = EmbeddingsWithoutPositions(model.cfg)
    emb.load_state_dict(model.embeddings.state_dict())
    model.embeddings = emb
    return model


# ---- training set-up: freezing, losses, labels --------------------------------------------------


def freeze_norms(model: nn.Module) -> nn.Module:
    """Bug: a fine-tuning recipe that freezes every LayerNorm while the rest trains."""
    for name, p in model.named_parameters():
        if "norm" in name.lower():
            p.requires_grad_(False)  # BUG: the norms keep pre-training statistics
    return model


def freeze_bottom(model: BertForMaskedLM, n_layers: int = 1) -> BertForMaskedLM:
    """Healthy: freeze whole blocks (embeddings and the first n layers, LayerNorms included)."""
    for block in [model.bert.embeddings, *model.bert.layers[:n_layers]]:
        block.requires_grad_(False)
    return model


class GradCutNet(nn.Module):
    """Bug, four times: each branch's gradient is cut a different way."""

    def __init__(self, d: int = 8):
        super().__init__()
        self.a, self.b, self.c, self.d = (nn.Linear(d, d) for _ in range(4))
        self.a.requires_grad_(False)  # BUG 1: frozen

    def forward(self, x):
        with torch.no_grad():  # BUG 2: no graph for b
            h = self.b(x)
        return self.a(x) + h + self.c(x).detach() + self.d(x)  # BUG 3: detach


class GradNet(GradCutNet):
    """Healthy: the same four branches, every one on the graph."""

    def __init__(self, d: int = 8):
        super().__init__(d)
        self.a.requires_grad_(True)

    def forward(self, x):
        return self.a(x) + self.b(x) + self.c(x) + self.d(x)


PAD = 0  # the pad id of the numpy article's target [3, 4, 5, 2, 0] (N26)


def loss_counting_pad(logits, targets):
    """Bug: cross-entropy over every position, [PAD] targets included."""
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())  # BUG: no ignore_index


def loss_ignoring_pad(logits, targets):
    """Healthy: [PAD] targets are not scored."""
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=PAD)


def smoothing_onto_pad(logits, targets, eps: float = 0.1):
    """Bug: label smoothing that spreads ε over all V classes, <pad> included (N26)."""
    V = logits.size(-1)
    q = torch.full_like(logits, eps / V)  # (…, V)   BUG: <pad> gets ε/V too
    q.scatter_(-1, targets.unsqueeze(-1), 1 - eps + eps / V)  # (…, V)
    keep = targets != PAD
    return -(q * logits.log_softmax(-1)).sum(-1)[keep].mean()


def smoothing_without_pad(logits, targets, eps: float = 0.1):
    """Healthy: ε spread over the V − 1 classes that are not <pad>; pad positions not scored."""
    V = logits.size(-1)
    q = torch.full_like(logits, eps / (V - 1))  # (…, V)
    q[..., PAD] = 0.0
    q.scatter_(-1, targets.unsqueeze(-1), 1 - eps + eps / (V - 1))  # (…, V)
    keep = targets != PAD
    return -(q * logits.log_softmax(-1)).sum(-1)[keep].mean()


def mlm_batch_all_positions(ids, special_ids, mask_id: int, vocab_size: int, generator=None):
    """Bug: the inputs are corrupted as BERT's, but the labels score every position."""
    inputs, _ = mask_tokens(ids, special_ids, mask_id, vocab_size, generator=generator)
    return inputs, ids.clone()  # BUG: labels = ids, the 85% left unchanged included


def to_half_precision(params: dict) -> dict:
    """The numpy article's conversion (N23): float32 arrays to float16, the others as they are."""
    return {k: v.astype(np.float16) if v.dtype == np.float32 else v for k, v in params.items()}
