"""Probes of attention and position: why scores are divided by sqrt(d_k), heads built by hand, the
perturbations that the widgets of chapters 02 and 03 apply. Pure functions, so tests can push every
control to its extremes.
"""

import copy
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from tfx.model.attention import MultiHeadAttention


def qk_variance(d_k: int, n: int = 20000, seed: int = 0) -> float:
    """Variance of q·k over n pairs with N(0, 1) entries: d_k in theory, since it sums d_k
    unit-variance terms. Built in chapter 03."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(n, d_k, generator=g, dtype=torch.float64)  # (n, d_k)
    k = torch.randn(n, d_k, generator=g, dtype=torch.float64)  # (n, d_k)
    return (q * k).sum(-1).var().item()


def softmax_jacobian(p: torch.Tensor) -> torch.Tensor:
    """d softmax / d scores = diag(p) − p pᵀ, for probabilities p of shape (…, L).

    Returns (…, L, L). Built in chapter 03."""
    return torch.diag_embed(p) - p.unsqueeze(-1) * p.unsqueeze(-2)  # (…, L, L)


@dataclass
class Saturation:
    d_k: int
    scaled: bool
    max_weight: float  # mean over queries of the largest weight: 1/L is uniform, 1 is one-hot
    jacobian_norm: (
        float  # mean Frobenius norm of the softmax Jacobian: the gradient the scores receive
    )


def softmax_saturation(
    d_k: int, scaled: bool, L: int = 8, n: int = 2000, seed: int = 0
) -> Saturation:
    """Softmax of q·k over L random keys (N(0, 1) entries), with or without the 1/sqrt(d_k)
    scale. Built in chapter 03."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(n, 1, d_k, generator=g, dtype=torch.float64)  # (n, 1, d_k)
    k = torch.randn(n, L, d_k, generator=g, dtype=torch.float64)  # (n, L, d_k)
    scores = (q @ k.transpose(-2, -1)).squeeze(1)  # (n, L)
    if scaled:
        scores = scores / math.sqrt(d_k)
    p = scores.softmax(-1)  # (n, L)
    jac = softmax_jacobian(p).flatten(1).norm(dim=-1)  # (n,)
    return Saturation(d_k, scaled, p.max(-1).values.mean().item(), jac.mean().item())


# Which key each query attends to, for the hand-built heads: (query i, L) → key index.
PATTERNS = {
    "previous": lambda i, L: max(i - 1, 0),
    "next": lambda i, L: min(i + 1, L - 1),
    "self": lambda i, L: i,
    "first": lambda i, L: 0,
}


def pattern_attention(
    L: int,
    patterns=("previous", "next", "self", "first"),
    sharpness: float = 12.0,
    d_content: int = 0,
    seed: int = 0,
):
    """A bias-free MultiHeadAttention whose heads are set by hand to attend by position, and its
    input.

    The input's first L features are a one-hot of the position; head h reads them through
    W_Q = sharpness·I and W_K = M_h, with M_h[i, j] = 1 where query i should look at key j, so
    score(i, j) = sharpness·M_h[i, j] / sqrt(d_k). W_V copies the position one-hot and W_O is the
    identity, so each head's output says where it looked. d_content further features are random
    token content that Q and K ignore.
    Returns (mha, x): d_k = L, d_model = len(patterns) · L, x of shape (1, L, d_model).
    Built in chapter 03.
    """
    unknown = [p for p in patterns if p not in PATTERNS]
    if unknown or not patterns:
        raise ValueError(
            f"patterns must be a non-empty subset of {sorted(PATTERNS)}, got {list(patterns)}"
        )
    if L < 2:
        raise ValueError(f"L must be at least 2, got {L}")
    H = len(patterns)
    d_model = H * L  # d_k = L: each head's query, key and value live in the position one-hot space
    if not 0 <= d_content <= d_model - L:
        raise ValueError(f"d_content must be in [0, {d_model - L}], got {d_content}")
    mha = MultiHeadAttention(d_model, H, bias=False)
    wq, wk, wv = torch.zeros(
        3, d_model, d_model
    )  # each (d_model out, d_model in), as nn.Linear stores them
    for h, name in enumerate(patterns):
        rows = slice(h * L, (h + 1) * L)  # head h's d_k = L output features
        target = torch.zeros(L, L)
        for i in range(L):
            target[i, PATTERNS[name](i, L)] = 1.0
        wq[rows, :L] = sharpness * torch.eye(L)  # q_i = sharpness · e_i
        wk[rows, :L] = target  # k_j = M[:, j]  ⇒  q_i · k_j = sharpness · M[i, j]
        wv[rows, :L] = torch.eye(L)  # v_j = e_j
    with torch.no_grad():
        mha.qkv.weight.copy_(torch.cat([wq, wk, wv]))  # (3·d_model, d_model)
        mha.out.weight.copy_(torch.eye(d_model))
    g = torch.Generator().manual_seed(seed)
    x = torch.zeros(1, L, d_model)  # (1, L, d_model)
    x[0, :, :L] = torch.eye(L)
    x[0, :, L : L + d_content] = torch.randn(L, d_content, generator=g)
    return mha.eval(), x


@dataclass
class Perturbation:
    """What chapter 03's widget changes. Defaults leave the module as it is."""

    zero_wo: bool = False  # set W_O (the output projection's weight, not its bias) to zero
    head: int = None  # the head that head_scale multiplies; None = no head touched
    head_scale: float = 1.0  # 0 ablates the head
    temperature: float = 1.0  # softmax(scores / T): T → 0 sharpens towards one-hot, T → ∞ flattens
    wq_noise: float = 0.0  # Gaussian noise on W_Q, relative to W_Q's own RMS
    seed: int = 0


def perturb(mha: MultiHeadAttention, p: Perturbation):
    """A perturbed copy of mha and the head_scale to pass to its forward; mha itself is untouched.

    Temperature is folded into W_Q (and its bias): q/T gives scores/T, so the module's own forward
    runs. Built in chapter 03.
    """
    if not p.temperature > 0 or not math.isfinite(p.temperature):
        raise ValueError(f"temperature must be a positive finite number, got {p.temperature}")
    if p.wq_noise < 0:
        raise ValueError(f"wq_noise must be >= 0, got {p.wq_noise}")
    if p.head is not None and not 0 <= p.head < mha.n_heads:
        raise ValueError(f"head must be in [0, {mha.n_heads - 1}] or None, got {p.head}")
    m, d = copy.deepcopy(mha), mha.d_model
    with torch.no_grad():
        w_q = m.qkv.weight[:d]  # (d_model, d_model): the W_Q rows of the fused projection (a view)
        if p.wq_noise > 0:
            g = torch.Generator().manual_seed(p.seed)
            rms = w_q.pow(2).mean().sqrt().clamp_min(1e-12)
            w_q += p.wq_noise * rms * torch.randn(w_q.shape, generator=g, dtype=w_q.dtype)
        w_q /= p.temperature
        if m.qkv.bias is not None:
            m.qkv.bias[:d] /= p.temperature
        if p.zero_wo:
            m.out.weight.zero_()
    scale = torch.ones(mha.n_heads)
    if p.head is not None:
        scale[p.head] = p.head_scale
    return m, scale


@dataclass
class PerturbResult:
    out: torch.Tensor  # (B, L, d_model), the perturbed output
    weights: torch.Tensor  # (B, H, L, L), the perturbed attention weights
    output_norm: float
    cosine: float  # mean over tokens of the cosine to the unperturbed output; None where undefined
    max_weight_change: float  # max |Δ weight| against the unperturbed weights

    def report(self) -> str:
        cos = "n/a" if self.cosine is None else f"{self.cosine:.4f}"
        return (
            f"output norm: {self.output_norm:.4f} | cosine to unperturbed: {cos} | "
            f"max |Δ attention weight|: {self.max_weight_change:.4f}"
        )


@torch.no_grad()
def perturbation_effect(
    mha: MultiHeadAttention, x: torch.Tensor, p: Perturbation, mask=None
) -> PerturbResult:
    """Run mha on x as it is and perturbed by p; compare the outputs and the attention weights.

    Built in chapter 03.
    """
    if mha.attn_impl != "naive":
        raise ValueError("perturbation_effect needs attn_impl='naive', which returns the weights")
    ref, ref_w = mha(x, mask)  # (B, L, d_model), (B, H, L, L)
    m, scale = perturb(mha, p)
    out, w = m(x, mask, head_scale=scale)  # (B, L, d_model), (B, H, L, L)
    # the cosine of a zero vector is undefined (torch would return 0): report None, printed "n/a"
    zero = (out.norm(dim=-1) == 0).any() or (ref.norm(dim=-1) == 0).any()
    cos = None if zero else F.cosine_similarity(out, ref, dim=-1).mean().item()
    return PerturbResult(out, w, out.norm().item(), cos, (w - ref_w).abs().max().item())


def diagonal_spread(S: torch.Tensor) -> float:
    """Largest spread (max − min) along any diagonal of the square (…, L, L) matrix S.

    It is 0 exactly when S[m, n] depends on the offset n − m only (a Toeplitz matrix): the test that
    chapter 02 applies to the scores of RoPE, ALiBi and additive position encodings.
    Built in chapter 02.
    """
    if not isinstance(S, torch.Tensor):
        raise TypeError(f"S must be a torch.Tensor, got {type(S).__name__}")
    if S.dim() < 2 or S.size(-1) != S.size(-2) or S.size(-1) == 0:
        raise ValueError(
            f"S must be a non-empty square (…, L, L) matrix, got shape {tuple(S.shape)}"
        )
    L = S.size(-1)
    spreads = []
    for o in range(-L + 1, L):
        diag = torch.diagonal(S, o, -2, -1)  # (…, L − |o|)
        spreads.append((diag.amax(-1) - diag.amin(-1)).max().item())
    return max(spreads)


# What chapter 02's widget does to the position vectors of a BERT model.
POSITION_MODES = ("kept", "dropped", "shuffled", "reversed")


@dataclass
class PositionEffect:
    """How a model's output moves when its position vectors are changed (see position_effect)."""

    mode: str
    scale: float
    order: list  # the position each token is given; empty when the positions are dropped
    change: list  # per token: norm of the change of its output vector
    cosine: float  # mean cosine to the unmodified output; None where an output is zero
    backwards_gap: float  # max |f(reversed ids) − reversed f(ids)|: 0 when the model is order-blind
    tokens: list

    def report(self) -> str:
        if self.order:
            given = (
                f"scale {self.scale:g}: token i gets position [{' '.join(map(str, self.order))}]"
            )
        else:
            given = "every token gets the zero vector (the scale has nothing to scale)"
        cos = "n/a" if self.cosine is None else f"{self.cosine:.4f}"
        blind = (
            "yes (largest gap below 1e-05)"
            if self.backwards_gap < 1e-5
            else f"no (largest gap {self.backwards_gap:.2f})"
        )
        changes = "  ".join(f"{t} {c:.3f}" for t, c in zip(self.tokens, self.change))
        return (
            f"positions {self.mode}, {given}\n"
            f"change of each token's output vector: {changes}\n"
            f"mean cosine to the unmodified output: {cos}\n"
            f"sentence read backwards gives the same vectors backwards: {blind}"
        )


def _position_rows(model, mode: str, scale: float, L: int, seed: int):
    """The (L, d) position vectors and the position order given to the tokens under `mode`."""
    table = model.embeddings.pos.weight[:L]  # (L, d)
    if mode == "kept":
        order = list(range(L))
    elif mode == "shuffled":
        order = torch.randperm(L, generator=torch.Generator().manual_seed(seed)).tolist()
    elif mode == "reversed":
        order = list(range(L - 1, -1, -1))
    else:  # dropped
        return torch.zeros_like(table), []
    return scale * table[order], order  # (L, d)


@torch.no_grad()
def position_effect(
    model, ids: torch.Tensor, mode: str = "kept", scale: float = 1.0, tokens=None, seed: int = 0
) -> PositionEffect:
    """Run a tfx BertModel with its position vectors kept, dropped, shuffled or reversed, and
    scaled.

    The model is copied and its position table's first L rows are replaced, so the model's own
    forward runs; the original is untouched. Besides the change of every output vector, it reports
    whether reading the sentence backwards gives the same vectors backwards: true exactly when the
    model no longer sees order. Built in chapter 02.
    """
    if mode not in POSITION_MODES:
        raise ValueError(f"mode must be one of {POSITION_MODES}, got {mode!r}")
    if not (isinstance(scale, (int, float)) and math.isfinite(scale) and scale >= 0):
        raise ValueError(f"scale must be a finite number >= 0, got {scale!r}")
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.size(0) != 1:
        raise ValueError(f"ids must be a (1, L) tensor, got {getattr(ids, 'shape', type(ids))}")
    L = ids.size(1)
    if not 1 <= L <= model.embeddings.pos.max_len:
        raise ValueError(f"ids has L = {L}; the model has {model.embeddings.pos.max_len} positions")
    tokens = [str(i) for i in ids[0].tolist()] if tokens is None else list(tokens)
    if len(tokens) != L:
        raise ValueError(f"tokens must name the {L} ids, got {len(tokens)} names")
    m = copy.deepcopy(model).eval()
    ref = model.eval()(ids)  # (1, L, d)
    rows, order = _position_rows(model, mode, scale, L, seed)  # (L, d)
    m.embeddings.pos.weight[:L] = rows
    out = m(ids)  # (1, L, d)
    back = m(ids.flip(1)).flip(1)  # (1, L, d): read backwards, flipped back
    zero = (out.norm(dim=-1) == 0).any() or (ref.norm(dim=-1) == 0).any()
    cos = None if zero else F.cosine_similarity(out, ref, dim=-1).mean().item()
    return PositionEffect(
        mode,
        float(scale),
        order,
        (out - ref).norm(dim=-1)[0].tolist(),
        cos,
        (back - out).abs().max().item(),
        tokens,
    )


HEAD_ROLES = ("previous", "next", "self", "[CLS]/[SEP]", "max weight")


def head_roles(weights, ids: torch.Tensor, sink_ids, pad_id: int = 0) -> dict:
    """What each head of a trained model does, measured over real sentences.

    weights: one (B, H, L, L) attention tensor per layer (tfx.learn.mlm.attention_weights), or their
    stack (layers, B, H, L, L); ids: the (B, L) inputs they were computed on. The query rows
    counted are the ordinary tokens (not [PAD], not one of sink_ids). Returns {role: (layers, H)
    tensor} for the roles of HEAD_ROLES: the fraction of those rows whose largest weight is on
    the key just before the query ("previous"), just after it ("next"), on the query itself
    ("self"), the mean total weight the rows put on sink_ids keys ("[CLS]/[SEP]": packed rows
    hold several [SEP]), and the mean of each row's largest weight ("max weight": 1/n for a
    uniform row over n keys, 1 for a row on one key). Built in chapter 07.
    """
    w = torch.stack(list(weights)) if isinstance(weights, (list, tuple)) else weights
    if not isinstance(w, torch.Tensor) or w.dim() != 5:
        raise ValueError(
            f"weights must be a (layers, B, H, L, L) tensor or a list of (B, H, L, L), got "
            f"{getattr(w, 'shape', type(w))}"
        )
    n_layers, B, H, L, L2 = w.shape
    if L != L2 or tuple(ids.shape) != (B, L):
        raise ValueError(
            f"ids must be (B, L) = ({B}, {L}) with square maps, got {tuple(ids.shape)}"
        )
    sink = torch.isin(ids, torch.as_tensor(list(sink_ids), dtype=ids.dtype))  # (B, L)
    query = (ids != pad_id) & ~sink  # (B, L): the rows counted
    n = int(query.sum())
    if n == 0:
        raise ValueError("no ordinary token among ids: no query row to count")
    top = w.argmax(-1)  # (layers, B, H, L): the key each row weighs most
    i = torch.arange(L)  # (L,)
    q = query[None, :, None, :]  # (1, B, 1, L)

    def share(hit):  # (layers, B, H, L) bool → (layers, H) fraction of counted rows
        return (hit & q).sum(dim=(1, 3)).double() / n

    on_sink = (w * sink[None, :, None, None, :]).sum(-1)  # (layers, B, H, L)
    return {
        "previous": share(top == i - 1),
        "next": share(top == i + 1),
        "self": share(top == i),
        "[CLS]/[SEP]": (on_sink * q).sum(dim=(1, 3)).double() / n,
        "max weight": (w.amax(-1) * q).sum(dim=(1, 3)).double() / n,
    }
