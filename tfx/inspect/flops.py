"""Parameter and FLOP counts of a BERT encoder, per component, from the config alone.

Counting by formula, not by running a model, is what lets a widget answer for any size at once; the
tests check every formula against real modules and torch's FLOP counter.
FLOPs are forward matmul FLOPs for one sequence: a multiply and an add count as 2, as in
torch.utils.flop_counter. Softmax, GELU, LayerNorm and the adds are O(L·d) and left out.
"""

import torch.nn as nn

from tfx.core.shapes import fmt_shape
from tfx.model.bert import BertConfig


def n_params(module: nn.Module) -> int:
    """The number of parameters of a module, each tensor counted once: a weight shared by two
    modules (BERT's tied decoder and word embeddings) is one tensor, so it counts once, as in
    Hugging Face's and the paper's totals. Works on the meta device (shapes only).
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
    return sum(p.numel() for p in module.parameters())  # parameters() yields a shared tensor once


def param_counts(cfg: BertConfig, pooler: bool = True, mlm_head: bool = False) -> dict:
    """Parameters per component; the sum is the size of tfx.model.bert.BertModel (or
    BertForMaskedLM).

    Built in chapter 01.
    """
    d, n = cfg.d_model, cfg.n_layers
    counts = {
        "token embeddings": cfg.vocab_size * d,
        "segment embeddings": cfg.type_vocab_size * d,
        "position embeddings": cfg.max_len * d,
        "embedding LayerNorm": 2 * d,
        "attention Q, K, V": n * 3 * (d * d + d),
        "attention W_O": n * (d * d + d),
        "attention LayerNorm": n * 2 * d,
        "FFN": n * (2 * d * cfg.d_ff + cfg.d_ff + d),
        "FFN LayerNorm": n * 2 * d,
    }
    if pooler:
        counts["pooler"] = d * d + d
    if mlm_head:  # the decoder weight is the token embedding (tied), so only its bias is new
        counts["MLM head"] = d * d + d + 2 * d + cfg.vocab_size
    return counts


def layer_flops(d_model: int, d_ff: int, L: int) -> dict:
    """Forward matmul FLOPs of one encoder layer on one sequence of length L, per component.

    Built in chapter 01.
    """
    d = d_model
    return {
        "Q, K, V projections": 2 * L * d * 3 * d,  # (L, d) @ (d, 3d)
        "scores Q Kᵀ": 2 * L * L * d,  # H heads × (L, d_k) @ (d_k, L)
        "weights · V": 2 * L * L * d,  # H heads × (L, L) @ (L, d_k)
        "W_O": 2 * L * d * d,  # (L, d) @ (d, d)
        "FFN": 2 * 2 * L * d * d_ff,  # (L, d) @ (d, d_ff), then (L, d_ff) @ (d_ff, d)
    }


QUADRATIC = ("scores Q Kᵀ", "weights · V")  # the two terms that grow with L²


def crossover_lengths(d_model: int, d_ff: int) -> dict:
    """The L at which the L² attention terms (4·L²·d) equal the Q, K, V and W_O projections
    (8·L·d²), the FFN (4·L·d·d_ff), and all the linear-in-L terms together (8·L·d² + 4·L·d·d_ff).
    Each follows from dividing by 4·L·d."""
    return {
        "vs attention projections": 2 * d_model,
        "vs FFN": d_ff,
        "vs all projections": 2 * d_model + d_ff,
    }


def shape_rows(cfg: BertConfig, L: int, B: int = 1) -> list:
    """(step, shape) along BERT's forward path, for a batch of B sequences of length L."""
    d, H, dk = cfg.d_model, cfg.n_heads, cfg.d_model // cfg.n_heads
    return [
        ("token ids", (B, L)),
        ("token embeddings", (B, L, d)),
        ("segment embeddings", (B, L, d)),
        ("position embeddings", (L, d)),
        ("sum, LayerNorm", (B, L, d)),
        ("W_Q (also W_K, W_V) of one head", (d, dk)),
        ("Q, K, V per head", (B, H, L, dk)),
        ("scores Q Kᵀ / √d_k", (B, H, L, L)),
        ("context per head", (B, H, L, dk)),
        ("heads concatenated", (B, L, d)),
        ("W_O", (d, d)),
        ("attention out, add & LayerNorm", (B, L, d)),
        ("FFN hidden", (B, L, cfg.d_ff)),
        ("FFN out, add & LayerNorm", (B, L, d)),
        (f"after {cfg.n_layers} layers", (B, L, d)),
        ("MLM logits", (B, L, cfg.vocab_size)),
    ]


def _format_rows(rows) -> str:
    """Align (step, shape) pairs in two columns."""
    w = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{w}}  {fmt_shape(shape)}" for name, shape in rows)


def shapes_report(
    L: int,
    d_model: int,
    n_heads: int,
    d_ff: int,
    n_layers: int = 12,
    vocab_size: int = 30522,
    max_len: int = 512,
) -> str:
    """What the chapter-01 widget prints: shapes, parameters and FLOPs, or why the setting is
    impossible."""
    try:
        cfg = BertConfig(
            vocab_size=vocab_size,
            d_model=d_model,
            n_layers=n_layers,
            n_heads=n_heads,
            d_ff=d_ff,
            max_len=max_len,
        )
    except ValueError as e:
        return f"impossible setting: {e}"
    if L < 1:
        return f"impossible setting: L must be at least 1, got {L}"
    params = param_counts(cfg)
    flops = layer_flops(d_model, d_ff, L)
    quad = sum(flops[k] for k in QUADRATIC)
    lines = [_format_rows(shape_rows(cfg, L)), ""]
    if L > max_len:
        lines.append(
            f"note: L = {L} > {max_len}: BERT's learned position table has no row past "
            f"{max_len - 1}"
        )
    layers = sum(v for k, v in params.items() if k.startswith(("attention", "FFN")))
    lines += [
        f"parameters: {sum(params.values()):,} (of which the {n_layers} layers: {layers:,})",
        f"FLOPs per layer: {sum(flops.values()):,}",
        f"  attention L² terms: {quad:,}  FFN: {flops['FFN']:,}",
        f"  L² attention / FFN: {quad / flops['FFN']:.3f} (= L / d_ff; crosses 1 at L = {d_ff})",
    ]
    return "\n".join(lines)
