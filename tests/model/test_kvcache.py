"""tfx.model.kvcache: step-by-step decoding with cached keys and values gives what the whole causal
stack gives, checked against tfx's own full forward and against torch's nn.TransformerEncoderLayer
run with a causal mask (weights copied across), in float64 and for both LayerNorm placements."""

import pytest
import torch
import torch.nn as nn

from tfx.model.attention import causal_mask
from tfx.model.kvcache import KVCache, cache_bytes, decode_step
from tfx.model.layers import EncoderLayer

D, H, D_FF = 32, 4, 64


def _stack(norm_first, n=3):
    torch.manual_seed(0)
    torch_layers = [
        nn.TransformerEncoderLayer(
            D, H, D_FF, dropout=0.0, batch_first=True, norm_first=norm_first, activation="gelu"
        ).double()
        for _ in range(n)
    ]
    ours = [EncoderLayer.from_torch(m).eval() for m in torch_layers]
    return torch_layers, ours


def _generate(layers, x, chunks):
    cache, outs, start = KVCache(), [], 0
    for size in chunks:
        outs.append(decode_step(layers, x[:, start : start + size], cache))
        start += size
    return torch.cat(outs, dim=1), cache


@pytest.mark.parametrize("norm_first", [False, True])
def test_cached_steps_equal_the_full_causal_run(norm_first):
    torch_layers, ours = _stack(norm_first)
    x = torch.randn(2, 9, D, dtype=torch.float64)
    stepped, cache = _generate(ours, x, [5, 1, 1, 2])
    full = x
    for layer in ours:
        full = layer(full, causal_mask(9))
    ref = x
    for m in torch_layers:
        ref = m(ref, src_mask=nn.Transformer.generate_square_subsequent_mask(9, dtype=x.dtype))
    torch.testing.assert_close(stepped, full, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(stepped, ref, rtol=1e-10, atol=1e-10)
    assert cache.length == 9 and len(cache.keys) == 3
    assert tuple(cache.keys[0].shape) == (2, H, 9, D // H)
    assert cache.nbytes() == cache_bytes(3, 2, 9, D, bytes_per_value=8)


def test_an_encoder_changes_the_past_and_a_decoder_does_not():
    _, ours = _stack(norm_first=False, n=2)
    x = torch.randn(1, 6, D, dtype=torch.float64)

    def second_layer_keys(inp, mask):
        h = ours[0](inp, mask)
        return ours[1].attn.qkv(h).split(D, dim=-1)[1]  # (1, L, D)

    for mask, moves in ((causal_mask, False), (lambda L: None, True)):
        before = second_layer_keys(x[:, :5], mask(5))
        after = second_layer_keys(x, mask(6))[:, :5]
        assert bool((before - after).abs().max() > 1e-6) == moves


def test_bad_input_is_named():
    _, ours = _stack(norm_first=False, n=1)
    x = torch.randn(1, 2, D, dtype=torch.float64)
    with pytest.raises(TypeError, match="cache"):
        decode_step(ours, x, cache={})
    with pytest.raises(TypeError, match="layers"):
        decode_step([nn.Linear(D, D)], x, KVCache())
    with pytest.raises(ValueError, match=r"x_new: expected \(B, T, 32\)"):
        decode_step(ours, torch.randn(1, 2, D + 1, dtype=torch.float64), KVCache())
    with pytest.raises(ValueError, match="x_new has dtype torch.float32"):
        decode_step(ours, torch.randn(1, 2, D), KVCache())
    assert decode_step(iter(ours), x, KVCache()).shape == x.shape  # any iterable of layers
    with pytest.raises(ValueError, match="T = 0"):
        decode_step(ours, torch.randn(1, 0, D, dtype=torch.float64), KVCache())
    cache = KVCache()
    decode_step(ours, x, cache)
    with pytest.raises(ValueError, match="batch of 3"):
        decode_step(ours, torch.randn(3, 1, D, dtype=torch.float64), cache)
    ours[0].train()
    with pytest.raises(ValueError, match=r"layers\[0\] is in training mode"):
        decode_step(ours, x, KVCache())
    with pytest.raises(ValueError, match="length must be an int >= 1"):
        cache_bytes(2, 1, 0, D)
    with pytest.raises(TypeError, match="d_model must be an int"):
        cache_bytes(2, 1, 8, 32.0)
    rope = EncoderLayer(D, H, D_FF, rope_base=10000.0).eval()
    with pytest.raises(ValueError, match="RoPE"):
        decode_step([rope], torch.randn(1, 2, D), KVCache())
