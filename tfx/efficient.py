"""Attention that does not hold the whole (L_q, L_k) score matrix, and a way to measure that.

Plain attention materialises softmax(q kᵀ) at once: at L = 8192 that is 64 M floats (256 MiB) for
the scores and as much again for the weights, per head. Nothing forces that: each output row needs
only its own row of scores. `chunked_attention` walks the queries block by block, so only a
(block_size, L_k) slab exists at a time, and returns the same numbers. `linear_attention` changes
the function instead (a kernel feature map replaces softmax), which makes the cost linear in L.
`peak_memory` measures what a call allocates, from the profiler's allocation events.

Built in chapter 08.
"""

import torch
import torch.nn.functional as F

from tfx.checks import check_int, check_positive_float, check_tensor
from tfx.shapes import fmt_shape

DEFAULT_BLOCK_SIZE = 256


def chunked_attention(q, k, v, mask=None, block_size: int = DEFAULT_BLOCK_SIZE, scale=None):
    """softmax(q kᵀ / sqrt(d_k)) v computed block_size query rows at a time.

    q: (…, L_q, d_k), k: (…, L_k, d_k), v: (…, L_k, d_v); mask is bool (True = may attend) and
    broadcasts to (…, L_q, L_k), as for `tfx.attention.scaled_dot_product_attention`, which each
    block calls, so a fully masked row gives zeros, not NaN. Returns the (…, L_q, d_v) output only:
    the weights are exactly what this function avoids keeping. Softmax runs along keys, so cutting
    the queries into blocks changes nothing in the arithmetic; peak memory falls from two
    (L_q, L_k) matrices to two (block_size, L_k) slabs. No dropout: this is an inference kernel.
    """
    # imported here, not at the top: tfx.attention re-exports this module's functions
    from tfx.attention import _check_mask, _check_qkv, scaled_dot_product_attention

    scores_shape = _check_qkv(q, k, v)
    block_size = check_int(block_size, "block_size")
    if mask is not None:
        _check_mask(mask, scores_shape)
    L_q = q.size(-2)
    out = q.new_empty(*scores_shape[:-2], L_q, v.size(-1))  # (…, L_q, d_v)
    # a mask with a query axis of length L_q is sliced with the queries; one of length 1 (a key
    # padding mask) or without a query axis applies to every block as it is
    per_query = mask is not None and mask.dim() >= 2 and mask.size(-2) != 1
    for i in range(0, L_q, block_size):
        rows = slice(i, i + block_size)
        m = mask[..., rows, :] if per_query else mask  # (…, block, L_k) or broadcastable
        # assigning [0] at once frees this block's scores and weights before the next block
        out[..., rows, :] = scaled_dot_product_attention(q[..., rows, :], k, v, m, scale=scale)[0]
    return out


def sliding_window_mask(L: int, window: int, device=None) -> torch.Tensor:
    """(L, L) bool mask of local attention: position i may attend to j when |i - j| <= window.

    Local attention is ordinary attention with this mask; the cost falls below O(L²) only in a
    kernel that skips the masked blocks (chunked_attention with it still computes every score).
    """
    check_int(L, "L")
    check_int(window, "window", minimum=0)
    i = torch.arange(L, device=device)
    return (i[:, None] - i[None, :]).abs() <= window  # (L, L)


def elu_feature_map(x: torch.Tensor) -> torch.Tensor:
    """φ(x) = elu(x) + 1 > 0: the feature map of Katharopoulos et al. (2020), 'Transformers are
    RNNs'. Positive features keep every weight φ(q)·φ(k) positive, as softmax's exp does."""
    return F.elu(x) + 1.0


def linear_attention(q, k, v, key_mask=None, eps: float = 1e-6):
    """Non-causal linear attention: out_i = φ(q_i) (Σ_j φ(k_j) v_jᵀ) / (φ(q_i) · Σ_j φ(k_j)).

    Replacing exp(q·k) by φ(q)·φ(k) lets the sum over keys be done once, as a (d_k, d_v) matrix,
    instead of once per query: O(L·d_k·d_v) time and memory instead of O(L_q·L_k). It is a
    different function from softmax attention, not an approximation that converges to it.
    q: (…, L_q, d_k), k: (…, L_k, d_k), v: (…, L_k, d_v); key_mask: bool (…, L_k), True = a real
    key (padding keys contribute nothing). Returns (…, L_q, d_v).
    """
    from tfx.attention import _check_qkv

    _check_qkv(q, k, v)
    eps = check_positive_float(eps, "eps")
    phi_q, phi_k = elu_feature_map(q), elu_feature_map(k)  # (…, L_q, d_k), (…, L_k, d_k)
    if key_mask is not None:
        check_tensor(key_mask, "key_mask")
        if key_mask.dtype != torch.bool:
            raise ValueError(f"key_mask must be a bool tensor, got dtype {key_mask.dtype}")
        if key_mask.size(-1) != k.size(-2):
            raise ValueError(
                f"key_mask must be (…, L_k) with L_k = {k.size(-2)}, got "
                f"{fmt_shape(key_mask.shape)}"
            )
        phi_k = phi_k * key_mask[..., :, None]  # (…, L_k, d_k)
    kv = phi_k.transpose(-2, -1) @ v  # (…, d_k, d_v)
    z = phi_k.sum(dim=-2)  # (…, d_k)
    num = phi_q @ kv  # (…, L_q, d_v)
    den = (phi_q * z[..., None, :]).sum(dim=-1, keepdim=True)  # (…, L_q, 1)
    return num / (den + eps)  # (…, L_q, d_v)


def peak_memory(fn, *args, **kwargs) -> tuple:
    """Call fn(*args, **kwargs) under torch.profiler and return (result, peak bytes it allocated).

    The profiler records every CPU allocation (+bytes) and free (-bytes) as a '[memory]' event;
    the running sum over time, from 0 at the call, peaks at the most the call held at once. So
    the inputs, allocated before, do not count, and the result, alive at the end, does. The count
    is exact and repeatable, unlike the process's resident size (tens of MiB of allocator noise).
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    from torch.profiler import ProfilerActivity, profile

    from tfx.perf import quiet_stderr

    with quiet_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = fn(*args, **kwargs)
    # the kineto trace holds every '[memory]' event; prof.events() keeps only those outside an op
    trace = prof.profiler.kineto_results.events()
    events = sorted((e.start_ns(), e.nbytes()) for e in trace if e.name() == "[memory]")
    running = peak = 0
    for _, nbytes in events:
        running += nbytes
        peak = max(peak, running)
    return result, peak
