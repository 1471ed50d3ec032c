"""Attention that does not hold the whole (L_q, L_k) score matrix.

Plain attention materialises softmax(q kᵀ) at once: at L = 8192 that is 64 M floats (256 MiB) for
the scores and as much again for the weights, per head. Nothing forces that: each output row needs
only its own row of scores. `chunked_attention` walks the queries block by block, so only a
(block_size, L_k) slab exists at a time, and returns the same numbers; `online_softmax_attention`
cuts the keys too (FlashAttention's online softmax), so only a (block_size, block_size) tile does.
`linear_attention` changes the function instead (the feature map elu + 1 replaces softmax),
which makes the cost linear in L.
`performer_attention` is linear in L too but approximates softmax attention: its positive random
features (Performer's FAVOR+) estimate exp(q·k/√d) without bias, and the estimate converges as
their number grows. What each of them saves is measured by tfx.inspect.memory.

Built in chapter 08.
"""

import torch
import torch.nn.functional as F

from tfx.core.checks import check_int, check_positive_float, check_tensor
from tfx.core.shapes import fmt_shape
from tfx.model.attention import check_mask, check_qkv, scaled_dot_product_attention

DEFAULT_BLOCK_SIZE = 256


def chunked_attention(q, k, v, mask=None, block_size: int = DEFAULT_BLOCK_SIZE, scale=None):
    """softmax(q kᵀ / sqrt(d_k)) v computed block_size query rows at a time.

    q: (…, L_q, d_k), k: (…, L_k, d_k), v: (…, L_k, d_v); mask is bool (True = may attend) and
    broadcasts to (…, L_q, L_k), as for `tfx.model.attention.scaled_dot_product_attention`, which
    each
    block calls, so a fully masked row gives zeros, not NaN. Returns the (…, L_q, d_v) output only:
    the weights are exactly what this function avoids keeping. Softmax runs along keys, so cutting
    the queries into blocks changes nothing in the arithmetic; peak memory falls from two
    (L_q, L_k) matrices to two (block_size, L_k) slabs. No dropout: this is an inference kernel.
    """
    scores_shape = check_qkv(q, k, v)
    block_size = check_int(block_size, "block_size")
    if mask is not None:
        check_mask(mask, scores_shape)
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


def online_softmax_attention(q, k, v, mask=None, block_size: int = DEFAULT_BLOCK_SIZE, scale=None):
    """softmax(q kᵀ / sqrt(d_k)) v computed in (block_size × block_size) tiles of queries and keys:
    the online softmax that FlashAttention runs in a GPU's on-chip memory.

    Why the keys can be cut too: a row's softmax needs its maximum (for a stable exp) and its sum
    of exponentials, and both can be updated one block of keys at a time. Keep, per query row, the
    running maximum m, the running sum l of exp(s − m) and the running acc = Σ exp(s − m) v; a new
    block whose maximum raises m to m' first rescales l and acc by exp(m − m'), then adds its own
    terms. After the last block acc / l is exactly the softmax-weighted sum. So no score row is
    ever whole, and the scratch memory is one tile, whatever L is (`chunked_attention` still holds
    (block_size, L_k)). The running statistics and sums are kept in float32 at least, as
    FlashAttention keeps them for 16-bit inputs: rescaling a bf16 sum block after block would add
    a rounding error per block. Same arguments and mask convention as `chunked_attention`; a fully
    masked row gives zeros, not NaN. No dropout: an inference kernel.
    """
    scores_shape = check_qkv(q, k, v)
    block_size = check_int(block_size, "block_size")
    if mask is not None:
        check_mask(mask, scores_shape)
    scale = q.size(-1) ** -0.5 if scale is None else check_positive_float(scale, "scale")
    L_q, L_k = q.size(-2), k.size(-2)
    lead = scores_shape[:-2]
    out = q.new_empty(*lead, L_q, v.size(-1))  # (…, L_q, d_v), in the inputs' dtype
    work = torch.promote_types(q.dtype, torch.float32)  # float32, or float64 for float64 inputs
    q, k, v = q.to(work), k.to(work), v.to(work)
    per_query = mask is not None and mask.dim() >= 2 and mask.size(-2) != 1
    for i in range(0, L_q, block_size):
        rows = slice(i, i + block_size)
        n = min(block_size, L_q - i)
        m = q.new_full((*lead, n, 1), float("-inf"))  # (…, n, 1): running maximum
        total = q.new_zeros(*lead, n, 1)  # (…, n, 1): running Σ exp(s − m)
        acc = q.new_zeros(*lead, n, v.size(-1))  # (…, n, d_v): running Σ exp(s − m) v
        for j in range(0, L_k, block_size):
            cols = slice(j, j + block_size)
            s = q[..., rows, :] @ k[..., cols, :].transpose(-2, -1) * scale  # (…, n, b): a tile
            if mask is not None:
                tile = mask[..., rows, cols] if per_query else mask[..., cols]
                s = s.masked_fill(~tile, float("-inf"))
            m_new = torch.maximum(m, s.amax(-1, keepdim=True))  # (…, n, 1)
            shift = torch.where(torch.isinf(m_new), 0.0, m_new)  # no key seen yet: exp(−inf) = 0
            p = torch.exp(s - shift)  # (…, n, b)
            rescale = torch.exp(m - shift)  # (…, n, 1): the old terms, to the new maximum
            total = total * rescale + p.sum(-1, keepdim=True)
            acc = acc * rescale + p @ v[..., cols, :]  # (…, n, d_v)
            m = m_new
        # a row whose every key was masked has total 0: zeros, as scaled_dot_product_attention
        out[..., rows, :] = torch.where(total > 0, acc / total.clamp_min(1e-30), 0.0).to(out.dtype)
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
    instead of once per query: O(L·d_k·d_v) time and memory instead of O(L_q·L_k). With this
    feature map it is a different function from softmax attention, not an approximation that
    converges to it (performer_attention's random features are one that does).
    q: (…, L_q, d_k), k: (…, L_k, d_k), v: (…, L_k, d_v); key_mask: bool (…, L_k), True = a real
    key (padding keys contribute nothing). Returns (…, L_q, d_v).
    """
    check_qkv(q, k, v)
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


def random_features(n_features: int, d: int, seed: int = 0, orthogonal: bool = True):
    """(n_features, d) projection rows for performer_attention, each distributed as N(0, I_d).

    Orthogonal (the default, as in Performer): blocks of d mutually orthogonal directions, each
    row rescaled to the norm of a Gaussian vector, so every row keeps its N(0, I_d) law (the
    estimate stays unbiased) while the rows of a block cannot repeat one another, which lowers
    the variance. Seeded by `seed`, so a feature count means the same features on every run.
    """
    n_features = check_int(n_features, "n_features")
    d = check_int(d, "d")
    gen = torch.Generator().manual_seed(check_int(seed, "seed", minimum=0))
    if not orthogonal:
        return torch.randn(n_features, d, generator=gen)
    blocks = []
    for _ in range(0, n_features, d):
        rot, _ = torch.linalg.qr(torch.randn(d, d, generator=gen))  # (d, d), orthonormal columns
        norms = torch.randn(d, d, generator=gen).norm(dim=1)  # (d,): chi-distributed, as N(0, I_d)
        blocks.append(rot.T * norms[:, None])  # (d, d): orthogonal rows of Gaussian norms
    return torch.cat(blocks)[:n_features]  # (n_features, d)


def performer_attention(q, k, v, n_features: int = 256, seed: int = 0, orthogonal: bool = True):
    """Softmax attention approximated with positive random features (FAVOR+, Choromanski et al.,
    2021, 'Rethinking Attention with Performers'), in O(L·m·(d_k + d_v)) for m = n_features.

    With x = q / d_k^¼, y = k / d_k^¼ and rows w of random_features, the features
    φ(x) = exp(w·x − |x|²/2) / √m are positive and E[φ(x)·φ(y)] = exp(x·y) = exp(q·k/√d_k): each
    softmax weight is estimated without bias, and the estimate's error falls as m grows (its
    variance grows as exp(|x + y|²), so peaked attention needs many features). Then the sum over
    keys is done once, as in linear_attention. q: (…, L_q, d_k), k: (…, L_k, d_k),
    v: (…, L_k, d_v). Returns (…, L_q, d_v). No mask, no dropout: a demonstration kernel.
    """
    check_qkv(q, k, v)
    d = q.size(-1)
    w = random_features(n_features, d, seed, orthogonal).to(q.dtype)  # (m, d_k)
    x, y = q * d**-0.25, k * d**-0.25

    def log_features(t):  # (…, L, m): w·t − |t|²/2, the log of √m·φ(t)
        return t @ w.T - (t * t).sum(-1, keepdim=True) / 2

    lq, lk = log_features(x), log_features(y)
    # constant factors cancel between numerator and denominator: one per query row, and one
    # for all the keys of a head, so subtracting those maxima only keeps exp() finite
    phi_q = torch.exp(lq - lq.amax(dim=-1, keepdim=True))  # (…, L_q, m)
    phi_k = torch.exp(lk - lk.amax(dim=(-2, -1), keepdim=True))  # (…, L_k, m)
    num = phi_q @ (phi_k.transpose(-2, -1) @ v)  # (…, L_q, d_v)
    den = phi_q @ phi_k.sum(dim=-2).unsqueeze(-1)  # (…, L_q, 1)
    return num / den
