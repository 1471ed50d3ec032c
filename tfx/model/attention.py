"""Scaled dot-product attention and multi-head attention, written out so every matrix is visible.

Mask convention everywhere in tfx: a boolean tensor where True means "may attend".
"""

import math
import numbers

import torch
import torch.nn as nn
import torch.nn.functional as F

from tfx.core.checks import (
    check_bool,
    check_dtype,
    check_int,
    check_positive_float,
    check_probability,
    check_tensor,
)
from tfx.core.shapes import check_shape, fmt_shape
from tfx.model.position import apply_rope


def check_mask(mask, scores_shape) -> None:
    """A mask must be boolean and broadcast to the (…, L_q, L_k) score matrix."""
    check_tensor(mask, "mask")
    if mask.dtype != torch.bool:
        raise ValueError(f"mask must be a bool tensor (True = may attend), got dtype {mask.dtype}")
    _check_broadcasts(mask, "mask", scores_shape)


def _check_broadcasts(t, name: str, scores_shape) -> None:
    """One check for the mask and the bias: t must broadcast to the scores' shape as it stands.
    torch's own error would name neither argument, and a t that grows the scores (a batch size
    they lack) would not fail at all."""
    try:
        broadcast = torch.broadcast_shapes(t.shape, scores_shape)
    except RuntimeError:
        broadcast = None
    if broadcast != tuple(scores_shape):
        raise ValueError(
            f"{name} of shape {fmt_shape(t.shape)} does not broadcast to the scores of shape "
            f"{fmt_shape(scores_shape)}"
        )


def _check_bias(bias, scores_shape) -> None:
    """An additive bias must be a finite float tensor that broadcasts to the (…, L_q, L_k) scores.

    Finite, because a row whose every entry is −inf has no softmax (NaN): forbidding a position is
    the bool mask's job, and the mask's fully masked rows are made zero on purpose.
    """
    check_tensor(bias, "attn_bias")
    if not bias.is_floating_point():
        raise ValueError(
            f"attn_bias must be a floating-point tensor added to the scores, got dtype "
            f"{bias.dtype}; a bool tensor (True = may attend) goes in mask="
        )
    _check_broadcasts(bias, "attn_bias", scores_shape)
    if not torch.isfinite(bias).all():
        raise ValueError(
            "attn_bias must be finite (no inf or NaN); forbid positions with the bool mask "
            "(True = may attend) instead of −inf"
        )


def check_qkv(q, k, v) -> tuple:
    """Tensors of one floating dtype, (…, L, d) with L, d >= 1; returns the scores' shape."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(t, name, floating=True)
    if not q.dtype == k.dtype == v.dtype:
        raise ValueError(f"q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    shapes = f"{fmt_shape(q.shape)}, {fmt_shape(k.shape)}, {fmt_shape(v.shape)}"
    if q.dim() < 2 or k.dim() < 2 or v.dim() < 2:
        raise ValueError(f"q, k, v need at least 2 dims (…, L, d), got {shapes}")
    if q.size(-1) != k.size(-1):
        raise ValueError(
            f"q and k must share d_k: q is {fmt_shape(q.shape)}, k is {fmt_shape(k.shape)}"
        )
    if k.size(-2) != v.size(-2):
        raise ValueError(
            f"k and v must share L_k: k is {fmt_shape(k.shape)}, v is {fmt_shape(v.shape)}"
        )
    if min(q.shape[-2:] + k.shape[-2:] + v.shape[-1:]) < 1:
        raise ValueError(f"q, k, v need L >= 1 and d >= 1 (an empty softmax), got {shapes}")
    try:
        batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except RuntimeError:
        raise ValueError(f"the leading (batch, head) dims of q, k, v differ: {shapes}") from None
    return (*batch, q.size(-2), k.size(-2))


def scaled_dot_product_attention(
    q, k, v, mask=None, dropout_p: float = 0.0, scale=None, attn_bias=None
):
    """softmax(q kᵀ / sqrt(d_k)) v, returning the weights too, because the book looks at them.

    q: (…, L_q, d_k), k: (…, L_k, d_k), v: (…, L_k, d_v); mask broadcasts to (…, L_q, L_k).
    A fully masked row gets zero weights and a zero output instead of NaN. In float16 and bfloat16
    the scores, softmax and weighted sum run in float32, as PyTorch's kernels accumulate: a 16-bit
    q kᵀ overflows past 65 504. Outputs come back in the input dtype.
    attn_bias: a finite float tensor broadcasting to (…, L_q, L_k), added to the scaled scores
    before the mask and the softmax (ALiBi's distance bias, chapter 07).
    """
    scores_shape = check_qkv(q, k, v)
    dropout_p = check_probability(dropout_p, "dropout_p")
    if scale is None:
        scale = 1.0 / math.sqrt(q.size(-1))
    elif isinstance(scale, bool) or not isinstance(scale, numbers.Real) or not math.isfinite(scale):
        raise ValueError(f"scale must be a finite float or None, got {scale!r}")
    if mask is not None:
        check_mask(mask, scores_shape)
    if attn_bias is not None:
        _check_bias(attn_bias, scores_shape)
    work = torch.promote_types(q.dtype, torch.float32)  # float16/bfloat16 → float32, else as is
    scores = q.to(work) @ k.to(work).transpose(-2, -1) * scale  # (…, L_q, L_k)
    if attn_bias is not None:
        scores = scores + attn_bias.to(scores.dtype)  # (…, L_q, L_k)
    if mask is not None:
        # the most negative finite value, not -inf: a fully masked row then stays finite
        # (finfo of the scores, not of `work`: under autocast the matmul returns bfloat16)
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = scores.softmax(dim=-1)  # (…, L_q, L_k)
    if mask is not None:
        weights = weights * mask  # a fully masked row was uniform; this makes it exactly zero
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p)
    out = weights @ v.to(work)  # (…, L_q, d_v)
    return out.to(q.dtype), weights.to(q.dtype)  # (…, L_q, d_v), (…, L_q, L_k)


def causal_mask(L: int, device=None) -> torch.Tensor:
    """(L, L) lower-triangular mask: position i may attend to positions 0..i."""
    check_int(L, "L")
    return torch.ones(L, L, dtype=torch.bool, device=device).tril()


def padding_mask(attention_mask: torch.Tensor, name: str = "attention_mask") -> torch.Tensor:
    """Hugging Face's (B, L) 1 = token / 0 = pad, turned into a (B, 1, 1, L) key mask.

    Only bool or integer 0/1 values. A floating mask is refused: it may be the *additive* mask of
    Hugging Face's internals (0 = keep, a large negative number = pad), which .bool() would invert,
    and whose rows without padding, all 0, would read as "all padding".
    """
    check_tensor(attention_mask, name)
    if attention_mask.dim() != 2:
        raise ValueError(f"{name} must be (B, L), got {fmt_shape(attention_mask.shape)}")
    if attention_mask.is_floating_point() or attention_mask.is_complex():
        raise ValueError(
            f"{name} must be a bool or integer 0/1 mask (1 = real token, 0 = padding), got dtype "
            f"{attention_mask.dtype}: convert a 0/1 mask with .long(), an additive mask "
            f"(0 = keep, large negative = pad) with `{name} == 0`"
        )
    if attention_mask.dtype != torch.bool:
        bad = attention_mask[(attention_mask != 0) & (attention_mask != 1)]  # (N,)
        if bad.numel():
            raise ValueError(
                f"{name} must hold bool or 0/1 values (1 = real token, 0 = padding), got the "
                f"value {bad[0].item()}"
            )
    return attention_mask.bool()[:, None, None, :]  # (B, 1, 1, L)


class MultiHeadAttention(nn.Module):
    """Multi-head self-attention: one fused (d, 3d) QKV projection, then an output map W_O.

    Built in chapter 03.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        bias: bool = True,
        attn_impl: str = "naive",
        dropout: float = 0.0,
        rope_base: float = None,
    ):
        super().__init__()
        check_int(d_model, "d_model")
        check_int(n_heads, "n_heads")
        if d_model % n_heads != 0:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        if rope_base is not None:
            if check_positive_float(rope_base, "rope_base") <= 1:
                raise ValueError(f"rope_base must be > 1, got {rope_base}")
            if (d_model // n_heads) % 2:
                raise ValueError(
                    f"RoPE turns pairs of dims: the head size d_model / n_heads must be even, got "
                    f"{d_model} / {n_heads} = {d_model // n_heads}"
                )
        self.rope_base = rope_base  # None: no rotary positions; else RoPE on q and k, chapter 07
        if attn_impl not in ("naive", "sdpa"):
            raise ValueError(f"attn_impl must be 'naive' or 'sdpa', got {attn_impl!r}")
        check_bool(bias, "bias")
        self.d_model, self.n_heads, self.d_k = d_model, n_heads, d_model // n_heads
        self.attn_impl, self.dropout = attn_impl, check_probability(dropout, "dropout")
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=bias)  # rows: [W_Q; W_K; W_V]
        self.out = nn.Linear(d_model, d_model, bias=bias)  # W_O

    def split_heads(self, t: torch.Tensor) -> torch.Tensor:
        B, L, _ = t.shape
        return t.view(B, L, self.n_heads, self.d_k).transpose(1, 2)  # (B, H, L, d_k)

    def merge_heads(self, t: torch.Tensor) -> torch.Tensor:
        B, H, L, d_k = t.shape
        return t.transpose(1, 2).reshape(B, L, H * d_k)  # (B, L, d_model)

    def forward(
        self, x: torch.Tensor, mask=None, head_scale=None, key_padding_mask=None, attn_bias=None
    ):
        """x: (B, L, d_model). Returns (out, weights); weights is None for attn_impl="sdpa".

        mask: bool, True = may attend, broadcast to (B, H, L, L); a 2-D mask is (L_q, L_k).
        key_padding_mask: (B, L), True/1 = real token, 0 = padding (Hugging Face's attention_mask).
        head_scale: (H,) or (B, H) multiplies each head's context (1 = keep, 0 = ablate).
        attn_bias: finite floats broadcasting to (B, H, L, L), added to the scaled scores (ALiBi).
        With rope_base set, q and k are rotated by their positions 0..L-1 after the head split.
        """
        check_tensor(x, "x", floating=True)
        check_shape(x, (None, None, self.d_model), name="x")
        B, L, _ = x.shape
        if B == 0 or L == 0:
            raise ValueError(f"x must hold at least one token, got shape {fmt_shape(x.shape)}")
        check_dtype(x, self.out.weight.dtype, "x", "the module's parameters")
        mask = self._mask(mask, key_padding_mask, B, L)  # None or broadcasts to (B, H, L, L)
        if attn_bias is not None:
            _check_bias(attn_bias, (B, self.n_heads, L, L))
        q, k, v = self.qkv(x).split(self.d_model, dim=-1)  # 3 × (B, L, d_model)
        q, k, v = self.split_heads(q), self.split_heads(k), self.split_heads(v)  # (B, H, L, d_k)
        if self.rope_base is not None:
            q = apply_rope(q, base=self.rope_base)  # (B, H, L, d_k)
            k = apply_rope(k, base=self.rope_base)  # (B, H, L, d_k)
        p = self.dropout if self.training else 0.0
        if self.attn_impl == "naive":
            ctx, weights = scaled_dot_product_attention(
                q, k, v, mask, dropout_p=p, attn_bias=attn_bias
            )  # (B, H, L, d_k)
        else:
            if mask is not None and bool(mask.all()):  # nothing masked: sdpa's mask-free path
                mask = None  # skips passes over the scores; the result is bit for bit the same
            attn_mask = mask
            if attn_bias is not None:  # one float mask: the bias, and the dtype's minimum where
                attn_mask = attn_bias.to(q.dtype)  # the bool mask forbids (finite: no NaN rows)
                if mask is not None:
                    attn_mask = torch.where(mask, attn_mask, torch.finfo(q.dtype).min)
            ctx = F.scaled_dot_product_attention(
                q, k, v, attn_mask=attn_mask, dropout_p=p
            )  # (B, H, L, d_k)
            if mask is not None:  # a fully masked query row: zeros, as in the naive path
                empty = ~mask.any(dim=-1, keepdim=True)  # (…, L or 1, 1): rows with no key
                if empty.any():  # (torch >= 2.5 gives 0 there already, but not with attn_bias)
                    ctx = ctx.masked_fill(empty, 0.0)  # (B, H, L, d_k)
            weights = None
        if head_scale is not None:
            ctx = ctx * self._head_scale(head_scale, B)  # (B, H, L, d_k)
        return self.out(self.merge_heads(ctx)), weights  # (B, L, d_model)

    def _mask(self, mask, key_padding_mask, B: int, L: int):
        """Check both masks and join them into one bool mask that broadcasts to (B, H, L, L)."""
        if mask is not None:
            check_tensor(mask, "mask")
            if mask.dim() == 2 and tuple(mask.shape) == (B, L) and B not in (1, L):
                raise ValueError(
                    f"mask of shape {fmt_shape(mask.shape)} is (B, L), but a 2-D mask is "
                    f"(L_q, L_k) = ({L}, {L}); pass a padding mask as key_padding_mask="
                )
            check_mask(mask, (B, self.n_heads, L, L))
        if key_padding_mask is not None:
            check_tensor(key_padding_mask, "key_padding_mask")
            check_shape(key_padding_mask, (B, L), name="key_padding_mask")
            keys = padding_mask(key_padding_mask, name="key_padding_mask")  # (B, 1, 1, L)
            mask = keys if mask is None else mask & keys  # (B, H or 1, L, L)
        return mask

    def _head_scale(self, s, B: int) -> torch.Tensor:
        s = torch.as_tensor(s, dtype=self.out.weight.dtype, device=self.out.weight.device)
        if s.shape not in ((self.n_heads,), (B, self.n_heads)):
            raise ValueError(
                f"head_scale must be ({self.n_heads},) or ({B}, {self.n_heads}), "
                f"got {fmt_shape(s.shape)}"
            )
        return s.reshape(-1, self.n_heads, 1, 1)  # (1 or B, H, 1, 1)

    @classmethod
    def from_torch(cls, m: nn.MultiheadAttention, attn_impl: str = "naive") -> "MultiHeadAttention":
        """Copy a torch MultiheadAttention (same-size q, k, v), whose in_proj is our qkv."""
        if not isinstance(m, nn.MultiheadAttention):
            raise TypeError(f"from_torch takes an nn.MultiheadAttention, got {type(m).__name__}")
        if not m._qkv_same_embed_dim:
            raise ValueError("from_torch needs kdim == vdim == embed_dim")
        ours = cls(
            m.embed_dim,
            m.num_heads,
            bias=m.in_proj_bias is not None,
            attn_impl=attn_impl,
            dropout=m.dropout,
        )
        with torch.no_grad():
            ours.qkv.weight.copy_(m.in_proj_weight)
            ours.out.weight.copy_(m.out_proj.weight)
            if m.in_proj_bias is not None:
                ours.qkv.bias.copy_(m.in_proj_bias)
                ours.out.bias.copy_(m.out_proj.bias)
        return ours.to(m.in_proj_weight.device, m.in_proj_weight.dtype)
