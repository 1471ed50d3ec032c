"""The encoder layer in numpy alone, with a backward pass derived by hand, checked against autograd.

Every op is a pair: `op_forward(...) -> (out, cache)` and `op_backward(d_out, cache) -> gradients`,
and the layer only composes them. `params` is keyed like
`tfx.model.layers.EncoderLayer.state_dict()`, in torch's Linear layout (y = x Wᵀ + b, W is (out,
in)). Masks follow tfx.model.attention: boolean, True = may attend, broadcast to (B, H, L, L). Built
in chapter 09.
"""

import math

import numpy as np

from tfx.core.checks import check_ids
from tfx.core.shapes import check_shape, fmt_shape
from tfx.core.stable import below

LAYER_KEYS = (
    "attn.qkv.weight",
    "attn.qkv.bias",
    "attn.out.weight",
    "attn.out.bias",
    "ff.fc1.weight",
    "ff.fc1.bias",
    "ff.fc2.weight",
    "ff.fc2.bias",
    "norm1.weight",
    "norm1.bias",
    "norm2.weight",
    "norm2.bias",
)


# ---- linear --------------------------------------------------------------------------------------


def linear_forward(x, W, b):
    """y = x Wᵀ + b on the last axis, for any number of leading axes. Built in chapter 09."""
    x2 = x.reshape(
        -1, x.shape[-1]
    )  # (N, in): one matrix product for all positions, the fast path in BLAS
    return (x2 @ W.T + b).reshape(*x.shape[:-1], W.shape[0]), (x2, W)  # (…, out)


def linear_backward(dy, cache):
    """dx = dy W; dW = dyᵀ x and db = Σ dy, both summed over every leading position (the weights are
    shared by every position). Built in chapter 09."""
    x2, W = cache
    dy2 = dy.reshape(-1, dy.shape[-1])  # (N, out)
    dx = (dy2 @ W).reshape(*dy.shape[:-1], W.shape[1])  # (…, in)
    return dx, dy2.T @ x2, dy2.sum(axis=0)  # (…, in), (out, in), (out,)


# ---- softmax -------------------------------------------------------------------------------------


def softmax_forward(s):
    """Softmax over the last axis; subtracting the row max changes nothing but keeps exp from
    overflowing. Built in chapter 09."""
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    p = e / e.sum(axis=-1, keepdims=True)
    return p, p


def softmax_backward(dp, p):
    """The Jacobian diag(p) − p pᵀ applied row by row without building it: ds = p ⊙ (dp − ⟨dp, p⟩).
    Built in chapter 09."""
    return p * (dp - (dp * p).sum(axis=-1, keepdims=True))


# ---- scaled dot-product attention ----------------------------------------------------------------


def check_mask(mask, scores_shape):
    """A mask must be boolean and broadcast to the (…, L_q, L_k) scores; returns it as an array."""
    mask = np.asarray(mask)
    if mask.dtype != np.bool_:
        raise ValueError(f"mask must be a bool array (True = may attend), got dtype {mask.dtype}")
    try:
        broadcast = np.broadcast_shapes(mask.shape, tuple(scores_shape))
    except ValueError:
        broadcast = None
    if broadcast != tuple(scores_shape):
        raise ValueError(
            f"mask of shape {fmt_shape(mask.shape)} does not broadcast to the scores of shape "
            f"{fmt_shape(scores_shape)}"
        )
    return mask


def attention_forward(q, k, v, mask=None):
    """softmax(q kᵀ / √d_k) v. Masked scores get the dtype's most negative finite value, and the
    weights are multiplied by the mask afterwards, so a fully masked row gives zeros instead of NaN
    (as tfx.model.attention). Built in chapter 09."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    scores = q @ k.swapaxes(-1, -2) * scale  # (B, H, L, L)
    if mask is not None:
        mask = check_mask(mask, scores.shape)
        scores = np.where(mask, scores, np.finfo(scores.dtype).min)  # (B, H, L, L)
    p, _ = softmax_forward(scores)
    w = p if mask is None else p * mask  # (B, H, L, L)
    return w @ v, (q, k, v, p, w, mask, scale)  # (B, H, L, d_k)


def attention_backward(dout, cache):
    """Back through out = w v, w = p ⊙ mask, p = softmax(s), s = q kᵀ · scale; masked scores were
    constants, so they get no gradient. Built in chapter 09."""
    q, k, v, p, w, mask, scale = cache
    dw = dout @ v.swapaxes(-1, -2)  # (B, H, L, L)
    dv = w.swapaxes(-1, -2) @ dout  # (B, H, L, d_k)
    dp = dw if mask is None else dw * mask
    ds = softmax_backward(dp, p)  # (B, H, L, L)
    if mask is not None:
        ds = ds * mask  # a filled-in constant has no gradient
    return ds @ k * scale, ds.swapaxes(-1, -2) @ q * scale, dv  # dq, dk, dv: (B, H, L, d_k) each


# ---- heads ---------------------------------------------------------------------------------------
# Both are permutations of the entries, so each one's backward is the other.


def split_heads(t, n_heads):
    """(B, L, d) → (B, H, L, d_k): head h owns features h·d_k … (h+1)·d_k − 1 of every token."""
    B, L, d = t.shape
    return t.reshape(B, L, n_heads, d // n_heads).transpose(0, 2, 1, 3)  # (B, H, L, d_k)


def merge_heads(t):
    """(B, H, L, d_k) → (B, L, H·d_k), the inverse of split_heads."""
    B, H, L, d_k = t.shape
    return t.transpose(0, 2, 1, 3).reshape(B, L, H * d_k)  # (B, L, d)


# ---- LayerNorm -----------------------------------------------------------------------------------


def layer_norm_forward(x, gamma, beta, eps=1e-5):
    """(x − mean) / sqrt(var + eps) · γ + β per token, with the biased variance, as torch.
    Built in chapter 09."""
    mean = x.mean(axis=-1, keepdims=True)  # (…, 1)
    rstd = 1.0 / np.sqrt(x.var(axis=-1, keepdims=True) + eps)  # (…, 1)
    xhat = (x - mean) * rstd
    return xhat * gamma + beta, (xhat, rstd, gamma)


def layer_norm_backward(dy, cache):
    """dx = rstd · (g − mean(g) − x̂ · mean(g ⊙ x̂)) with g = dy ⊙ γ: the two means undo the
    centring and the scaling. Built in chapter 09."""
    xhat, rstd, gamma = cache
    g = dy * gamma
    dx = rstd * (
        g - g.mean(axis=-1, keepdims=True) - xhat * (g * xhat).mean(axis=-1, keepdims=True)
    )
    d = dy.shape[-1]
    return dx, (dy * xhat).reshape(-1, d).sum(axis=0), dy.reshape(-1, d).sum(axis=0)  # dx, dγ, dβ


def _layer_norm_backward_uncentred(dy, cache):
    """layer_norm_backward with the bug "LN mean term dropped" (BACKWARD_BUGS): the − mean(g) term
    added back, as if the centring x − μ had no gradient."""
    dx, dgamma, dbeta = layer_norm_backward(dy, cache)
    _, rstd, gamma = cache
    return dx + rstd * (dy * gamma).mean(axis=-1, keepdims=True), dgamma, dbeta


def layer_norm_std_eps(x, gamma, beta, eps=1e-6):
    """The source article's variant, (x − mean) / (std + eps): eps sits outside the square root."""
    return (x - x.mean(axis=-1, keepdims=True)) / (
        x.std(axis=-1, keepdims=True) + eps
    ) * gamma + beta


# ---- activations ---------------------------------------------------------------------------------


def erf(x):
    """Elementwise math.erf: numpy has no erf, and libm's is correct to the last bits in float64,
    which a cheap polynomial (error ~1e-7, measured in chapter 09) is not; the book's arrays are
    small enough for a loop."""
    flat = [math.erf(v) for v in np.asarray(x, dtype=np.float64).ravel().tolist()]  # (x.size,)
    out = np.array(flat, dtype=np.float64).reshape(np.shape(x))  # x's shape
    return out.astype(np.result_type(x, np.float32))


def gelu_forward(x):
    """Exact GELU, x · Φ(x), with Φ the standard normal CDF. Built in chapter 09."""
    cdf = 0.5 * (1.0 + erf(x / math.sqrt(2.0)))
    return x * cdf, (x, cdf)


def gelu_backward(dy, cache):
    """d/dx x·Φ(x) = Φ(x) + x·φ(x), with φ the standard normal density. Built in chapter 09."""
    x, cdf = cache
    pdf = np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
    return dy * (cdf + x * pdf)


def relu_forward(x):
    return np.maximum(x, 0.0), x


def relu_backward(dy, x):
    """Gradient 1 where x > 0 and 0 elsewhere, including x = 0, as torch."""
    return dy * (x > 0)


ACTIVATIONS = {"gelu": (gelu_forward, gelu_backward), "relu": (relu_forward, relu_backward)}


# ---- bugs to find --------------------------------------------------------------------------------
# Slips that pass every shape check, each one line of the composed backward. `bug=` of
# encoder_layer_backward (and of mha_backward and ffn_backward, which it passes it to) injects one,
# so chapter 09's widget can show which gradients the finite-difference check then flags.

BACKWARD_BUGS = {
    "q/k swapped": "the q and k thirds of the fused QKV gradient change places (mha_backward)",
    "W_O transposed": "attn.out.weight's gradient comes back transposed (mha_backward)",
    "activation skipped": "the FFN's backward treats the activation as the identity (ffn_backward)",
    "residual dropped": "the FFN residual's identity branch is left out (encoder_layer_backward)",
    "LN mean term dropped": "LayerNorm's backward forgets − mean(g) (encoder_layer_backward)",
}


def check_bug(bug):
    """None (the correct backward) or a key of BACKWARD_BUGS."""
    if bug is not None and bug not in BACKWARD_BUGS:
        raise ValueError(f"bug must be None or one of {list(BACKWARD_BUGS)}, got {bug!r}")


# ---- the two sub-layers --------------------------------------------------------------------------


def mha_forward(x, params, n_heads, mask=None):
    """Fused QKV projection, split into heads, attention, merge, output projection W_O. The fused
    weight's rows are [W_Q; W_K; W_V], so np.split cuts its output into q, k and v in that order.
    Built in chapter 09."""
    qkv, c_qkv = linear_forward(x, params["attn.qkv.weight"], params["attn.qkv.bias"])  # (B, L, 3d)
    q, k, v = (split_heads(t, n_heads) for t in np.split(qkv, 3, axis=-1))  # 3 × (B, H, L, d_k)
    ctx, c_att = attention_forward(q, k, v, mask)  # (B, H, L, d_k)
    out, c_out = linear_forward(
        merge_heads(ctx), params["attn.out.weight"], params["attn.out.bias"]
    )  # (B, L, d)
    return out, (c_qkv, c_att, c_out, n_heads)


def mha_backward(dout, cache, bug=None):
    """mha_forward read bottom-up: merge's backward is split, split's is merge, and np.split's is a
    concatenate in the same q, k, v order. `bug`: see BACKWARD_BUGS. Built in chapter 09."""
    check_bug(bug)
    c_qkv, c_att, c_out, n_heads = cache
    dctx, dWo, dbo = linear_backward(dout, c_out)  # (B, L, d)
    dq, dk, dv = attention_backward(split_heads(dctx, n_heads), c_att)  # merge's backward is split
    if bug == "q/k swapped":
        dq, dk = dk, dq
    if bug == "W_O transposed":
        dWo = dWo.T
    dqkv = np.concatenate(
        [merge_heads(t) for t in (dq, dk, dv)], axis=-1
    )  # (B, L, 3d): np.split's backward
    dx, dWqkv, dbqkv = linear_backward(dqkv, c_qkv)
    return dx, {
        "attn.qkv.weight": dWqkv,
        "attn.qkv.bias": dbqkv,
        "attn.out.weight": dWo,
        "attn.out.bias": dbo,
    }


def ffn_forward(x, params, activation="gelu"):
    """fc1 (d → d_ff), activation, fc2 (d_ff → d), at every position. Built in chapter 09."""
    h, c1 = linear_forward(x, params["ff.fc1.weight"], params["ff.fc1.bias"])  # (B, L, d_ff)
    a, c_act = ACTIVATIONS[activation][0](h)
    y, c2 = linear_forward(a, params["ff.fc2.weight"], params["ff.fc2.bias"])  # (B, L, d)
    return y, (c1, c_act, c2, activation)


def ffn_backward(dy, cache, bug=None):
    """fc2's backward, the activation's, fc1's. `bug`: see BACKWARD_BUGS. Built in chapter 09."""
    check_bug(bug)
    c1, c_act, c2, activation = cache
    da, dW2, db2 = linear_backward(dy, c2)  # (B, L, d_ff)
    dh = da if bug == "activation skipped" else ACTIVATIONS[activation][1](da, c_act)
    dx, dW1, db1 = linear_backward(dh, c1)  # (B, L, d)
    return dx, {"ff.fc1.weight": dW1, "ff.fc1.bias": db1, "ff.fc2.weight": dW2, "ff.fc2.bias": db2}


# ---- the encoder layer ---------------------------------------------------------------------------


def _check_layer(x, params, n_heads, activation):
    missing = [k for k in LAYER_KEYS if k not in params]
    if missing:
        raise ValueError(
            f"params is missing {missing}; it must be keyed like EncoderLayer.state_dict()"
        )
    d = params["attn.qkv.weight"].shape[-1]
    d_ff = params["ff.fc1.weight"].shape[0]
    expected = {
        "attn.qkv.weight": (3 * d, d),
        "attn.qkv.bias": (3 * d,),
        "attn.out.weight": (d, d),
        "attn.out.bias": (d,),
        "ff.fc1.weight": (d_ff, d),
        "ff.fc1.bias": (d_ff,),
        "ff.fc2.weight": (d, d_ff),
        "ff.fc2.bias": (d,),
        "norm1.weight": (d,),
        "norm1.bias": (d,),
        "norm2.weight": (d,),
        "norm2.bias": (d,),
    }
    for key, shape in expected.items():
        check_shape(params[key], shape, name=key)
    check_shape(x, (None, None, d), name="x")
    if d % n_heads != 0:
        raise ValueError(f"d_model ({d}) must be divisible by n_heads ({n_heads})")
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")


def encoder_layer_forward(
    x, params, n_heads, mask=None, norm_first=False, activation="gelu", eps=1e-5
):
    """x: (B, L, d) → (y, cache). Post-LN: y = LN(h + FFN(h)), h = LN(x + MHA(x)); pre-LN:
    h = x + MHA(LN(x)), y = h + FFN(LN(h)). Dropout is left out: this is the layer in eval mode.
    Built in chapter 09."""
    _check_layer(x, params, n_heads, activation)
    ln1 = (params["norm1.weight"], params["norm1.bias"], eps)
    ln2 = (params["norm2.weight"], params["norm2.bias"], eps)
    if norm_first:
        n1, c_ln1 = layer_norm_forward(x, *ln1)
        a, c_mha = mha_forward(n1, params, n_heads, mask)
        h = x + a  # (B, L, d)
        n2, c_ln2 = layer_norm_forward(h, *ln2)
        f, c_ffn = ffn_forward(n2, params, activation)
        y = h + f
    else:
        a, c_mha = mha_forward(x, params, n_heads, mask)
        h, c_ln1 = layer_norm_forward(x + a, *ln1)  # (B, L, d)
        f, c_ffn = ffn_forward(h, params, activation)
        y, c_ln2 = layer_norm_forward(h + f, *ln2)
    return y, (norm_first, c_mha, c_ln1, c_ffn, c_ln2, y.shape)


def encoder_layer_backward(dy, cache, bug=None):
    """dy: (B, L, d) → (dx, grads keyed like params). A residual x + f(x) passes dy to both
    branches, and the two contributions add where the branches meet. `bug` injects one of
    BACKWARD_BUGS (None: the correct backward). Built in chapter 09."""
    norm_first, c_mha, c_ln1, c_ffn, c_ln2, y_shape = cache
    check_shape(dy, y_shape, name="dy")
    check_bug(bug)
    ln_backward = (
        _layer_norm_backward_uncentred if bug == "LN mean term dropped" else layer_norm_backward
    )
    keep = 0.0 if bug == "residual dropped" else 1.0  # the FFN residual's identity branch
    if norm_first:
        df, g_ffn = ffn_backward(dy, c_ffn, bug)
        dn2, dg2, db2 = ln_backward(df, c_ln2)
        dh = keep * dy + dn2  # residual: identity branch + FFN branch
        dn1, g_mha = mha_backward(dh, c_mha, bug)
        dx1, dg1, db1 = ln_backward(dn1, c_ln1)
        dx = dh + dx1  # residual: identity branch + attention branch
    else:
        dr2, dg2, db2 = ln_backward(dy, c_ln2)
        df, g_ffn = ffn_backward(dr2, c_ffn, bug)
        dh = keep * dr2 + df  # residual: identity branch + FFN branch
        dr1, dg1, db1 = ln_backward(dh, c_ln1)
        dxa, g_mha = mha_backward(dr1, c_mha, bug)
        dx = dr1 + dxa  # residual: identity branch + attention branch
    grads = {
        **g_mha,
        **g_ffn,
        "norm1.weight": dg1,
        "norm1.bias": db1,
        "norm2.weight": dg2,
        "norm2.bias": db2,
    }
    return dx, {k: grads[k] for k in LAYER_KEYS}


def init_layer_params(d_model, d_ff, rng, std=None):
    """Random layer parameters: Xavier-normal weights (std = sqrt(2 / (fan_in + fan_out))) unless
    std is given, zero biases, LayerNorm γ = 1 and β = 0."""

    def w(out, inp):
        return rng.standard_normal((out, inp)) * (
            math.sqrt(2.0 / (inp + out)) if std is None else std
        )

    d = d_model
    return {
        "attn.qkv.weight": w(3 * d, d),
        "attn.qkv.bias": np.zeros(3 * d),
        "attn.out.weight": w(d, d),
        "attn.out.bias": np.zeros(d),
        "ff.fc1.weight": w(d_ff, d),
        "ff.fc1.bias": np.zeros(d_ff),
        "ff.fc2.weight": w(d, d_ff),
        "ff.fc2.bias": np.zeros(d),
        "norm1.weight": np.ones(d),
        "norm1.bias": np.zeros(d),
        "norm2.weight": np.ones(d),
        "norm2.bias": np.zeros(d),
    }


# ---- a tiny character language model built from the layer ---------------------------------------


def embedding_forward(ids, table):
    """Row lookup: (B, L) ids → (B, L, d). numpy would take a negative id from the end of the
    table, so ids outside 0..V-1 are refused. Built in chapter 09."""
    check_ids(ids, "ids", table.shape[0], "the embedding table")
    return table[ids], (ids, table.shape)


def embedding_backward(dy, cache):
    """Each id's row gets the sum of the gradients at every position where it occurs: np.add.at adds
    repeated ids, where `dtable[ids] += dy` would keep only one of them. Built in chapter 09."""
    ids, shape = cache
    dtable = np.zeros(shape, dtype=dy.dtype)
    np.add.at(dtable, ids, dy)
    return dtable


def init_char_lm(vocab_size, max_len, d_model, n_heads, d_ff, n_layers, rng):
    """Token and learned position embeddings, n_layers encoder layers, a linear head to logits."""
    params = {
        "tok_emb": rng.standard_normal((vocab_size, d_model)) * 0.1,
        "pos_emb": rng.standard_normal((max_len, d_model)) * 0.1,
    }
    for i in range(n_layers):
        params.update(
            {f"layers.{i}.{k}": v for k, v in init_layer_params(d_model, d_ff, rng).items()}
        )
    params["head.weight"] = rng.standard_normal((vocab_size, d_model)) * math.sqrt(1.0 / d_model)
    params["head.bias"] = np.zeros(vocab_size)
    return params


def char_lm_forward(ids, params, n_heads, n_layers, norm_first=False, activation="gelu"):
    """ids: (B, L) → logits (B, L, V) for the next character; a causal mask keeps position t from
    seeing t+1… Built in chapter 09."""
    B, L = ids.shape
    if L > params["pos_emb"].shape[0]:
        raise ValueError(
            f"ids: expected at most {params['pos_emb'].shape[0]} positions, "
            f"got shape {fmt_shape(ids.shape)}"
        )
    x, c_emb = embedding_forward(ids, params["tok_emb"])  # (B, L, d)
    x = x + params["pos_emb"][:L]  # (B, L, d)
    mask = np.tril(np.ones((L, L), dtype=bool))  # (L, L)
    c_layers = []
    for i in range(n_layers):
        layer = {k: params[f"layers.{i}.{k}"] for k in LAYER_KEYS}
        x, c = encoder_layer_forward(x, layer, n_heads, mask, norm_first, activation)
        c_layers.append(c)
    logits, c_head = linear_forward(x, params["head.weight"], params["head.bias"])  # (B, L, V)
    return logits, (c_emb, c_layers, c_head, params["pos_emb"].shape)


def char_lm_backward(dlogits, cache):
    """dlogits: (B, L, V) → gradients for every entry of params: the head, the layers top down, then
    the two embeddings. Built in chapter 09."""
    c_emb, c_layers, c_head, pos_shape = cache
    dx, dWh, dbh = linear_backward(dlogits, c_head)  # (B, L, d)
    grads = {"head.weight": dWh, "head.bias": dbh}
    for i in reversed(range(len(c_layers))):
        dx, g = encoder_layer_backward(dx, c_layers[i])
        grads.update({f"layers.{i}.{k}": v for k, v in g.items()})
    grads["tok_emb"] = embedding_backward(dx, c_emb)
    grads["pos_emb"] = np.zeros(pos_shape, dtype=dx.dtype)
    grads["pos_emb"][: dx.shape[1]] = dx.sum(
        axis=0
    )  # (L, d): the same position row serves every sequence
    return grads


# ---- gradient check ------------------------------------------------------------------------------

FD_LAYOUTS = {"post-LN": False, "pre-LN": True}  # name -> norm_first
FD_TOL = 1e-6  # the relative error below which the check counts a tensor as agreeing


def gradient_check(h=1e-6, dtype=np.float64, seed=0, bug=None):
    """Central differences against encoder_layer_backward, for every parameter tensor and the
    input x, in both LayerNorm placements. Each tensor θ gets one random unit direction u, and
    (ℓ(θ + h·u) − ℓ(θ − h·u)) / 2h is compared with ⟨∂ℓ/∂θ, u⟩, for ℓ = Σ y ⊙ ȳ: every entry of
    the gradient feeds that one number, so two forward passes check the whole tensor. The layer is
    16 wide with 4 heads, every parameter moved off its initial value, under a padding mask
    (sequence 1 ends in two pads, sequence 2 is all padding). The differences trust only the
    forward pass; their error is about h² (truncation) plus machine-eps / h (rounding). `bug`
    injects one of BACKWARD_BUGS into the backward. Returns rows (name, layout, analytic, numeric).
    Built in chapter 09."""
    check_bug(bug)
    return [
        (name, layout, analytic, numeric)
        for layout, norm_first in FD_LAYOUTS.items()
        for name, analytic, numeric in layer_directional_checks(norm_first, h, dtype, seed, bug)
    ]


def layer_directional_checks(norm_first, h, dtype, seed, bug):
    """gradient_check for one layout: rows (name, analytic, numeric). Built in chapter 09."""
    rng = np.random.default_rng(seed)
    params = {
        k: (v + 0.1 * rng.standard_normal(v.shape)).astype(dtype)
        for k, v in init_layer_params(16, 32, rng).items()
    }
    x = rng.standard_normal((3, 6, 16)).astype(dtype)  # (B, L, d)
    dy = rng.standard_normal(x.shape).astype(dtype)
    mask = np.ones((3, 1, 1, 6), dtype=bool)  # (B, 1, 1, L): a key mask
    mask[1, ..., 4:] = False
    mask[2] = False

    def loss(arrays):
        layer = {k: arrays[k] for k in LAYER_KEYS}
        y, _ = encoder_layer_forward(arrays["x"], layer, 4, mask, norm_first)
        return float((y * dy).sum())

    _, cache = encoder_layer_forward(x, params, 4, mask, norm_first)
    dx, grads = encoder_layer_backward(dy, cache, bug)
    return directional_checks(loss, dict(params, x=x), dict(grads, x=dx), h, rng)


def directional_checks(loss, arrays, grads, h, rng):
    """For each array θ of the dict `arrays`, a random unit direction u of its shape: the central
    difference (loss(θ + h·u) − loss(θ − h·u)) / 2h against ⟨grads[θ], u⟩, the others held fixed.
    Rows (name, analytic, numeric). Built in chapter 09."""
    rows = []
    for name, value in arrays.items():
        u = rng.standard_normal(value.shape)
        u /= np.linalg.norm(u)  # a unit direction, in float64
        plus, minus = ((value + s * h * u).astype(value.dtype) for s in (1, -1))  # θ ± h·u
        numeric = (loss({**arrays, name: plus}) - loss({**arrays, name: minus})) / (2 * h)
        rows.append((name, float((grads[name] * u).sum()), numeric))
    return rows


def char_lm_gradient_check(h=1e-6, seed=0):
    """gradient_check for char_lm_backward, the backward chapter 09 trains with: every array of a
    small two-layer character model (vocabulary 7, 8 wide, 2 heads, 6 positions of which 5 are
    used), for ℓ = Σ logits ⊙ ḡ with a random ḡ, in float64. Rows (name, "char LM", analytic,
    numeric), as gradient_check's."""
    rng = np.random.default_rng(seed)
    params = init_char_lm(7, 6, 8, 2, 16, 2, rng)
    ids = rng.integers(0, 7, size=(2, 5))  # (B, L)
    dlogits = rng.standard_normal((2, 5, 7))  # (B, L, V)

    def loss(arrays):
        return float((char_lm_forward(ids, arrays, 2, 2)[0] * dlogits).sum())

    grads = char_lm_backward(dlogits, char_lm_forward(ids, params, 2, 2)[1])
    rows = directional_checks(loss, params, grads, h, rng)
    return [(name, "char LM", analytic, numeric) for name, analytic, numeric in rows]


def relative_errors(rows):
    """{(name, layout): |numeric − analytic| / |analytic|} from gradient_check's rows."""
    return {(name, layout): abs(n - a) / max(abs(a), 1e-30) for name, layout, a, n in rows}


def gradient_check_report(log10_h: int = 6, float32: bool = False, bug: str = "none") -> str:
    """The text of chapter 09's widget: with `bug` injected into the backward ("none" or a key of
    BACKWARD_BUGS), the relative error of each tensor's directional derivative in both layouts,
    and which tensors the check flags (relative error FD_TOL or more)."""
    h = 10.0**-log10_h
    dtype = np.float32 if float32 else np.float64
    rel = relative_errors(gradient_check(h, dtype, bug=None if bug == "none" else bug))
    lines = [
        f"h = 1e-{log10_h}, {'float32' if float32 else 'float64'}, backward bug: {bug}",
        f"{'tensor':<16} " + "  ".join(f"{layout:>9}" for layout in FD_LAYOUTS),
    ]
    flagged = {layout: 0 for layout in FD_LAYOUTS}
    for name in (*LAYER_KEYS, "x"):
        errors = [rel[name, layout] for layout in FD_LAYOUTS]
        bad = [not e < FD_TOL for e in errors]  # NaN counts as flagged
        for layout, b in zip(FD_LAYOUTS, bad):
            flagged[layout] += b
        cells = "  ".join(f"{below(e, FD_TOL):>9}" for e in errors)
        lines.append(f"{name:<16} {cells}" + ("  flagged" if any(bad) else ""))
    n = len(LAYER_KEYS) + 1
    lines.append(
        f"flagged (relative error {FD_TOL:.0e} or more): "
        + ", ".join(f"{layout} {k} of {n}" for layout, k in flagged.items())
    )
    verdict = "no" if any(flagged.values()) else "yes"
    lines.append(f"every tensor agrees to {FD_TOL:.0e} relative: {verdict}")
    return "\n".join(lines)
