"""Position information: attention alone is blind to order, so something must add it."""

import math

import torch
import torch.nn as nn

from tfx.core.checks import check_int, check_positive_float, check_tensor
from tfx.core.shapes import check_shape, fmt_shape

# The ways tfx.model.bert.BertConfig(position=...) can give a model its positions (chapter 07):
# "learned" adds a trained table (BERT's), "sinusoidal" adds the fixed table, "rope" rotates q and k
# inside every attention layer, "alibi" adds a distance bias to every layer's scores.
POSITION_TYPES = ("learned", "sinusoidal", "rope", "alibi")
# BERT initialises every embedding row as N(0, 0.02²). The raw sinusoids have entries ±1 (RMS 1/√2),
# which would outweigh such a token vector about 70 to 1 (claim N13, settled in appendix 91);
# scaled by this factor their RMS per entry is 0.02, the same as a learned position row at
# initialisation.
SINUSOIDAL_SCALE = 0.02 * math.sqrt(2)


def _frequencies(d_model: int, base: float) -> torch.Tensor:
    """Angular frequencies base^(-2i/d_model), i = 0..d/2-1, in float64: one per (sin, cos) pair."""
    check_int(d_model, "d_model", minimum=0)
    if d_model % 2 != 0 or d_model < 2:
        raise ValueError(f"d_model must be even for sin/cos pairs, got {d_model}")
    if check_positive_float(base, "base") <= 1:
        raise ValueError(f"base must be > 1, got {base}")
    return torch.exp(
        -math.log(base) * torch.arange(0, d_model, 2, dtype=torch.float64) / d_model
    )  # (d/2,)


def sinusoidal_encoding(
    max_len: int, d_model: int, base: float = 10000.0, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """The fixed encoding of "Attention Is All You Need": sin on even dims, cos on odd dims.

    Returns (max_len, d_model); dims 2i and 2i+1 share the angular frequency base^(-2i/d_model).
    Built in chapter 02.
    """
    check_int(max_len, "max_len")
    if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise ValueError(f"dtype must be a floating torch.dtype, got {dtype!r}")
    freq = _frequencies(d_model, base)  # (d/2,)
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]  # (max_len, 1)
    pe = torch.zeros(max_len, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(pos * freq)  # (max_len, d/2)
    pe[:, 1::2] = torch.cos(pos * freq)  # (max_len, d/2)
    return pe.to(dtype)


def sinusoidal_wavelengths(d_model: int, base: float = 10000.0) -> torch.Tensor:
    """Period in positions of each (sin, cos) pair: 2π·base^(2i/d), from 2π up to almost 2π·base."""
    return 2 * math.pi / _frequencies(d_model, base)  # (d/2,)


def sinusoidal_rotation(k: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """The (d, d) block-diagonal R_k with PE(p + k) = R_k PE(p) for every p: it depends on k only.

    Each (sin, cos) pair turns by the angle k·ω_i, by the angle-addition formulas. k is an offset,
    not a position: a negative k is allowed and gives the inverse rotation, R_(−k) = R_kᵀ.
    """
    check_int(k, "k", minimum=-(2**62))
    angle = k * _frequencies(d_model, base)  # (d/2,)
    c, s = torch.cos(angle), torch.sin(angle)
    blocks = torch.stack([torch.stack([c, s], -1), torch.stack([-s, c], -1)], -2)  # (d/2, 2, 2)
    return torch.block_diag(*blocks)  # (d, d)


def pe_report(position: int, dim: int, base: float = 10000.0, d_model: int = 128) -> str:
    """What the chapter-02 widget prints: one entry of the sinusoidal table and the wavelength of
    its dim."""
    if not 0 <= dim < d_model:
        return f"dim must be in 0..{d_model - 1}, got {dim}"
    if position < 0:
        return f"position must be >= 0, got {position}"
    try:
        pe = sinusoidal_encoding(
            position + 1, d_model, base, dtype=torch.float64
        )  # (position+1, d)
    except ValueError as e:
        return f"impossible setting: {e}"
    i = dim // 2
    fn = "sin" if dim % 2 == 0 else "cos"
    wavelength = sinusoidal_wavelengths(d_model, base)[i].item()
    return (
        f"PE[{position}, {dim}] = {fn}({position} · {base:g}^(-{2 * i}/{d_model})) = "
        f"{pe[position, dim].item():.4f}\n"
        f"wavelength of dims {2 * i},{2 * i + 1}: {wavelength:,.1f} positions"
    )


def apply_rope(
    x: torch.Tensor, positions: torch.Tensor = None, base: float = 10000.0
) -> torch.Tensor:
    """Rotary position embedding: turn each (2i, 2i+1) pair of x at position p by the angle p·ω_i.

    x: (…, L, d), e.g. the (B, H, L, d_k) heads inside MultiHeadAttention (built with rope_base).
    Rotating both q and k makes q_m·k_n = qᵀ R_(n−m) k: the score sees only the offset.
    positions: (L,) integer positions >= 0, by default 0..L-1.
    Built in chapter 02.
    """
    check_tensor(x, "x", floating=True)
    if x.dim() < 2:
        raise ValueError(f"x must be (…, L, d), got {fmt_shape(x.shape)}")
    L, d = x.shape[-2:]
    freq = _frequencies(d, base)  # (d/2,)
    if positions is None:
        positions = torch.arange(L)
    check_tensor(positions, "positions")
    check_shape(positions, (L,), name="positions")
    if positions.is_floating_point() or positions.is_complex() or positions.dtype == torch.bool:
        raise ValueError(f"positions must be integers, got dtype {positions.dtype}")
    if L and positions.min() < 0:
        raise ValueError(f"positions must be >= 0, got {positions.min().item()}")
    angle = positions.to("cpu", torch.float64)[:, None] * freq  # (L, d/2)
    c = torch.cos(angle).to(x.device, x.dtype)  # (L, d/2)
    s = torch.sin(angle).to(x.device, x.dtype)  # (L, d/2)
    x0, x1 = x[..., 0::2], x[..., 1::2]  # (…, L, d/2) each
    out = torch.stack([x0 * c - x1 * s, x0 * s + x1 * c], dim=-1)  # (…, L, d/2, 2)
    return out.flatten(-2)  # (…, L, d)


def alibi_slopes(n_heads: int) -> torch.Tensor:
    """ALiBi's per-head slopes: the geometric sequence 2^(-8/H), 2^(-16/H), …; for H not a power
    of two, the paper's recipe (slopes of the next lower power of two, then every other one of the
    next higher)."""
    check_int(n_heads, "n_heads")

    def geometric(n):
        return [2 ** (-8 * (h + 1) / n) for h in range(n)]

    p = 2 ** math.floor(math.log2(n_heads))
    slopes = geometric(p) + geometric(2 * p)[0::2][: n_heads - p]
    return torch.tensor(slopes)  # (H,)


def alibi_bias(n_heads: int, L_q: int, L_k: int = None) -> torch.Tensor:
    """(H, L_q, L_k) bias −m_h·|i − j| added to the attention scores; no position vectors at all.

    This is the symmetric form used by encoders; a causal model only sees j ≤ i, where it is the
    paper's.
    Built in chapter 02.
    """
    check_int(L_q, "L_q")
    L_k = L_q if L_k is None else check_int(L_k, "L_k")
    offset = (torch.arange(L_k)[None, :] - torch.arange(L_q)[:, None]).abs()  # (L_q, L_k)
    return -alibi_slopes(n_heads)[:, None, None] * offset  # (H, L_q, L_k)


class LearnedPositionalEmbedding(nn.Module):
    """BERT's way: one trained vector per position, so there is a hard maximum length."""

    def __init__(self, max_len: int, d_model: int):
        super().__init__()
        self.max_len = check_int(max_len, "max_len")
        check_int(d_model, "d_model")
        self.weight = nn.Parameter(torch.randn(max_len, d_model) * 0.02)

    def forward(self, L: int) -> torch.Tensor:
        """Position vectors for positions 0..L-1, shape (L, d_model)."""
        check_int(L, "L")
        if L > self.max_len:
            raise ValueError(
                f"sequence length {L} exceeds the {self.max_len} learned positions "
                f"(embedding table {fmt_shape(self.weight.shape)})"
            )
        return self.weight[:L]  # (L, d_model)


class SinusoidalPositionalEncoding(nn.Module):
    """The fixed sinusoidal table as a module with LearnedPositionalEmbedding's interface: no
    parameters and no maximum length, the table is computed for whatever L is asked.

    scale multiplies the table (tfx.model.bert uses SINUSOIDAL_SCALE, so that a position vector
    starts at the size of a token vector). Built in chapter 07.
    """

    def __init__(self, d_model: int, scale: float = 1.0, base: float = 10000.0):
        super().__init__()
        _frequencies(d_model, base)  # checks d_model (even) and base now, not at the first call
        self.d_model = d_model
        self.scale = check_positive_float(scale, "scale")
        self.base = base

    def forward(self, L: int) -> torch.Tensor:
        """Position vectors for positions 0..L-1, shape (L, d_model), float32."""
        check_int(L, "L")
        return sinusoidal_encoding(L, self.d_model, self.base) * self.scale  # (L, d_model)

    def extra_repr(self) -> str:
        return f"{self.d_model}, scale={self.scale:g}, base={self.base:g}"
