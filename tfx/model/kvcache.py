"""The KV cache: how a decoder generates one token at a time without redoing the past, and why an
encoder such as BERT cannot (built in chapter 08).

A decoder-only language model (GPT's layout) is a stack of the book's `EncoderLayer`s run with a
causal mask: each position attends to itself and the positions before it. To generate, it appends
one token and runs again. Run naively, every step recomputes every earlier position in every layer.
But under the causal mask an earlier position's output never depends on a later token, so its keys
and values in every layer are the same at every step: keep them (the cache), and each step computes
only the new position's q, k and v, one row of scores against the cached keys, and the new row of
the FFN. The cost of a step falls from all L positions to one; the price is memory, two (B, H, L,
d_k) tensors per layer.

BERT reads its whole input at once with no causal mask, so appending a token changes every earlier
position from the first layer's output on: nothing could be cached.
"""

from dataclasses import dataclass, field

import torch

from tfx.core.checks import check_dtype, check_int
from tfx.model.attention import causal_mask, scaled_dot_product_attention
from tfx.model.layers import EncoderLayer


@dataclass
class KVCache:
    """The keys and values of every layer for the positions generated so far: `keys[i]` and
    `values[i]` are layer i's (B, H, L_past, d_k); empty until the first `decode_step`."""

    keys: list = field(default_factory=list)
    values: list = field(default_factory=list)

    @property
    def length(self) -> int:
        return self.keys[0].shape[2] if self.keys else 0

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.keys + self.values)


def cache_bytes(n_layers: int, batch: int, length: int, d_model: int, bytes_per_value: int = 4):
    """What a full cache holds: a key and a value of width d_model (all heads together) for every
    layer, sequence and position."""
    sizes = (n_layers, batch, length, d_model, bytes_per_value)
    names = ("n_layers", "batch", "length", "d_model", "bytes_per_value")
    n_layers, batch, length, d_model, bytes_per_value = map(check_int, sizes, names)
    return 2 * n_layers * batch * length * d_model * bytes_per_value


def decode_step(layers, x_new: torch.Tensor, cache: KVCache) -> torch.Tensor:
    """Run the causal stack `layers` on the new positions `x_new` (B, T, d_model) only, reading the
    earlier positions' keys and values from `cache` and appending the new ones to it. Returns the
    new positions' outputs (B, T, d_model): the same as the last T rows of the whole stack run with
    a causal mask on the past and the new positions together.

    T may be more than 1: a prompt is read in one step, then one token per step."""
    layers = list(layers)  # a generator would be spent by the checks
    _check(layers, x_new, cache)
    first = not cache.keys
    x = x_new
    for i, layer in enumerate(layers):
        past = None if first else (cache.keys[i], cache.values[i])
        attend = layer.norm1(x) if layer.norm_first else x
        a, (k, v) = _attend_new(layer.attn, attend, past)
        if first:
            cache.keys.append(k)
            cache.values.append(v)
        else:
            cache.keys[i], cache.values[i] = k, v
        if layer.norm_first:
            x = x + a
            x = x + layer.ff(layer.norm2(x))
        else:
            x = layer.norm1(x + a)
            x = layer.norm2(x + layer.ff(x))
    return x


def _attend_new(attn, x: torch.Tensor, past):
    """Causal self-attention for the new positions: their q against the past keys and their own."""
    q, k, v = attn.qkv(x).split(attn.d_model, dim=-1)  # 3 × (B, T, d_model)
    q, k, v = attn.split_heads(q), attn.split_heads(k), attn.split_heads(v)  # (B, H, T, d_k)
    if past is not None:
        k = torch.cat([past[0], k], dim=2)  # (B, H, P + T, d_k)
        v = torch.cat([past[1], v], dim=2)  # (B, H, P + T, d_k)
    T, total = q.shape[2], k.shape[2]
    mask = causal_mask(total, device=x.device)[total - T :]  # (T, P + T): new row i sees 0..P + i
    ctx, _ = scaled_dot_product_attention(q, k, v, mask)  # (B, H, T, d_k)
    return attn.out(attn.merge_heads(ctx)), (k, v)  # (B, T, d_model)


def _check(layers, x_new, cache) -> None:
    if not isinstance(cache, KVCache):
        raise TypeError(f"cache: expected a tfx.model.kvcache.KVCache, got {type(cache).__name__}")
    if not layers or not all(isinstance(m, EncoderLayer) for m in layers):
        raise TypeError("layers: expected a non-empty sequence of tfx.model.layers.EncoderLayer")
    for i, m in enumerate(layers):
        if m.training:
            raise ValueError(
                f"layers[{i}] is in training mode: dropout would make each step differ from the "
                "full run; call .eval() on the stack"
            )
        if m.attn.rope_base is not None:
            raise ValueError(f"layers[{i}] uses RoPE, which decode_step does not rotate")
    d = layers[0].attn.d_model
    if not isinstance(x_new, torch.Tensor) or x_new.dim() != 3 or x_new.shape[-1] != d:
        got = tuple(x_new.shape) if isinstance(x_new, torch.Tensor) else type(x_new).__name__
        raise ValueError(f"x_new: expected (B, T, {d}) with T >= 1, got {got}")
    if x_new.shape[1] == 0:
        raise ValueError("x_new: expected at least one new position, got T = 0")
    check_dtype(x_new, layers[0].attn.out.weight.dtype, "x_new", "the layers' parameters")
    if cache.keys and (len(cache.keys) != len(layers) or cache.keys[0].shape[0] != x_new.shape[0]):
        raise ValueError(
            f"cache: holds {len(cache.keys)} layers for batch {cache.keys[0].shape[0]}, but the "
            f"stack has {len(layers)} layers and x_new a batch of {x_new.shape[0]}"
        )
