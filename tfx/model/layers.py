"""LayerNorm, the position-wise feed-forward network, and the encoder layer that joins them to
attention."""

import torch
import torch.nn as nn
import torch.nn.functional as F

from tfx.core import checks
from tfx.core.shapes import check_shape
from tfx.model.attention import MultiHeadAttention

ACTIVATIONS = {
    "gelu": F.gelu,  # exact x·Φ(x), what BERT's "gelu" means
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "relu": F.relu,
}


class LayerNorm(nn.Module):
    """Normalise each token's features: (x − mean) / sqrt(var + eps), then scale and shift.

    `formula` is that definition written out, step by step (chapter 05 derives it); `forward`
    computes the same function with PyTorch's fused kernel, F.layer_norm, which is what
    nn.LayerNorm runs. Why not run the formula: it is about eight element-wise passes over x
    forward and as many backward, each a separate op with its own autograd node and (with several
    threads) its own synchronisation, where the kernel makes one pass each way. What that is worth
    in chapter 07's training step and in chapter 08's encoder layer is measured by
    bench/mlm_step.py --ablation and bench/encoder.py. tests/inspect/test_perf.py checks that the
    two agree, outputs and gradients, in float32, float16 and bfloat16.

    The statistics are computed in float32 (at least) and the result returned in the input dtype,
    as nn.LayerNorm does: in float16 the squares of a row with std ~250 overflow 65 504, and BERT's
    eps = 1e-12 rounds to 0, so a constant row would give 0 / 0.

    Built in chapter 05.
    """

    def __init__(self, d: int, eps: float = 1e-5):
        super().__init__()
        self.d, self.eps = checks.check_int(d, "d"), checks.check_positive_float(eps, "eps")
        self.weight = nn.Parameter(torch.ones(d))  # γ
        self.bias = nn.Parameter(torch.zeros(d))  # β

    def _check(self, x: torch.Tensor) -> torch.dtype:
        """Refuse what is not (…, d) floats; return the dtype the statistics are computed in."""
        checks.check_tensor(x, "x", floating=True)
        if x.dim() == 0 or x.size(-1) != self.d:
            raise ValueError(f"LayerNorm expected last dim {self.d}, got shape {tuple(x.shape)}")
        return torch.promote_types(x.dtype, torch.float32)  # float16/bfloat16 → float32

    def formula(self, x: torch.Tensor) -> torch.Tensor:
        """The definition, written out: the reference that `forward` is tested against."""
        work = self._check(x)
        xw = x.to(work)
        mean = xw.mean(dim=-1, keepdim=True)  # (…, 1)
        var = xw.var(dim=-1, keepdim=True, unbiased=False)  # (…, 1): biased, as nn.LayerNorm
        y = (xw - mean) / torch.sqrt(var + self.eps) * self.weight.to(work) + self.bias.to(work)
        return y.to(x.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        work = self._check(x)
        w, b = self.weight, self.bias
        if w.dtype not in (x.dtype, work):  # the kernel takes γ, β in x's dtype or float32
            w, b = w.to(work), b.to(work)
        return F.layer_norm(x, (self.d,), w, b, self.eps)  # (…, d), x's dtype

    def extra_repr(self) -> str:
        return f"{self.d}, eps={self.eps}"


class FeedForward(nn.Module):
    """Two linear maps with a non-linearity between, applied to every position independently.

    Built in chapter 04.
    """

    def __init__(self, d_model: int, d_ff: int, activation: str = "gelu", dropout: float = 0.0):
        super().__init__()
        checks.check_int(d_model, "d_model")
        checks.check_int(d_ff, "d_ff")
        checks.check_probability(dropout, "dropout")
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
        self.d_model, self.activation = d_model, activation
        self.fc1 = nn.Linear(d_model, d_ff)  # expand: d_model → d_ff
        self.fc2 = nn.Linear(d_ff, d_model)  # project back: d_ff → d_model
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        checks.check_tensor(x, "x", floating=True)
        check_shape(x, (None,) * (x.dim() - 1) + (self.d_model,), name="x")
        checks.check_dtype(x, self.fc1.weight.dtype, "x", "the module's parameters")
        return self.fc2(
            self.drop(ACTIVATIONS[self.activation](self.fc1(x)))
        )  # (…, d_ff) → (…, d_model)


class EncoderLayer(nn.Module):
    """Attention and FFN sub-layers, each wrapped in a residual and a LayerNorm.

    norm_first=False is post-LN, x = LN(x + f(x)), as in the original Transformer and in BERT;
    norm_first=True is pre-LN, x = x + f(LN(x)).

    Dropout sits on the attention weights, on each sub-layer's output before its residual (drop1,
    drop2), and, with ff_inner_dropout=True, also between the FFN's activation and its second
    projection: that is nn.TransformerEncoderLayer's layout. BERT (Google's and Hugging Face's) has
    no dropout inside the FFN, so tfx.model.bert builds its layers with ff_inner_dropout=False. In
    eval mode the two layouts are the same function.

    rope_base (None by default) makes the attention rotate q and k by position (RoPE); an additive
    score bias such as ALiBi's comes in through forward's attn_bias. Both: chapter 07.

    Built in chapter 05.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float = 0.1,
        norm_first: bool = False,
        activation: str = "gelu",
        attn_impl: str = "naive",
        eps: float = 1e-5,
        attn_dropout: float = None,
        ff_inner_dropout: bool = True,
        rope_base: float = None,
    ):
        super().__init__()
        checks.check_probability(dropout, "dropout")  # before nn.Dropout, which has its own message
        if attn_dropout is not None:
            checks.check_probability(attn_dropout, "attn_dropout")
        self.norm_first = checks.check_bool(norm_first, "norm_first")
        self.ff_inner_dropout = checks.check_bool(ff_inner_dropout, "ff_inner_dropout")
        self.attn = MultiHeadAttention(
            d_model,
            n_heads,
            attn_impl=attn_impl,
            dropout=dropout if attn_dropout is None else attn_dropout,
            rope_base=rope_base,
        )
        self.ff = FeedForward(d_model, d_ff, activation, dropout if ff_inner_dropout else 0.0)
        self.norm1 = LayerNorm(d_model, eps)
        self.norm2 = LayerNorm(d_model, eps)
        self.drop1 = nn.Dropout(dropout)
        self.drop2 = nn.Dropout(dropout)

    def forward(
        self,
        x: torch.Tensor,
        mask=None,
        head_scale=None,
        return_weights: bool = False,
        key_padding_mask=None,
        attn_bias=None,
    ):
        """x: (B, L, d_model) → (B, L, d_model); with return_weights also the (B, H, L, L) weights.

        mask, key_padding_mask and attn_bias (an additive score bias, e.g. ALiBi's) as in
        MultiHeadAttention.forward. The two branches are the two placements of LayerNorm: pre-LN
        normalises what enters each sub-layer and adds to an un-normalised stream; post-LN
        normalises the residual sum itself.

        Built in chapter 05.
        """
        if self.norm_first:
            a, weights = self.attn(self.norm1(x), mask, head_scale, key_padding_mask, attn_bias)
            x = x + self.drop1(a)
            x = x + self.drop2(self.ff(self.norm2(x)))
        else:
            a, weights = self.attn(x, mask, head_scale, key_padding_mask, attn_bias)
            x = self.norm1(x + self.drop1(a))
            x = self.norm2(x + self.drop2(self.ff(x)))
        return (x, weights) if return_weights else x

    @classmethod
    def from_torch(cls, m: nn.TransformerEncoderLayer, attn_impl: str = "naive") -> "EncoderLayer":
        """Copy a torch TransformerEncoderLayer (relu or exact-gelu activation) into a tfx layer.

        The copy keeps torch's dropout layout (ff_inner_dropout=True): it matches in training too.
        """
        if not isinstance(m, nn.TransformerEncoderLayer):
            raise TypeError(
                f"from_torch takes an nn.TransformerEncoderLayer, got {type(m).__name__}"
            )
        act = getattr(m, "activation_relu_or_gelu", 0)
        if act not in (1, 2):
            raise ValueError("from_torch supports the 'relu' and 'gelu' activations only")
        ours = cls(
            m.self_attn.embed_dim,
            m.self_attn.num_heads,
            m.linear1.out_features,
            dropout=m.dropout.p,
            norm_first=m.norm_first,
            activation="relu" if act == 1 else "gelu",
            attn_impl=attn_impl,
            eps=m.norm1.eps,
            attn_dropout=m.self_attn.dropout,
            ff_inner_dropout=True,
        )
        ours.attn = MultiHeadAttention.from_torch(m.self_attn, attn_impl=attn_impl)
        pairs = [
            (ours.ff.fc1, m.linear1),
            (ours.ff.fc2, m.linear2),
            (ours.norm1, m.norm1),
            (ours.norm2, m.norm2),
        ]
        with torch.no_grad():
            for dst, src in pairs:
                dst.weight.copy_(src.weight)
                dst.bias.copy_(src.bias)
        return ours.to(m.linear1.weight.device, m.linear1.weight.dtype)


_HF_BERT_PARTS = (
    "attention.self.query",
    "attention.self.key",
    "attention.self.value",
    "attention.output.dense",
    "attention.output.LayerNorm",
    "intermediate.dense",
    "output.dense",
    "output.LayerNorm",
)


def _hf_bert_parts(bert_layer) -> dict:
    """{dotted name: submodule} of a Hugging Face BertLayer; TypeError for anything else."""
    if not isinstance(bert_layer, nn.Module):
        raise TypeError(
            f"expected a Hugging Face BertLayer (an nn.Module), got {type(bert_layer).__name__}"
        )
    parts = {}
    for name in _HF_BERT_PARTS:
        try:
            parts[name] = bert_layer.get_submodule(name)
        except AttributeError:
            raise TypeError(
                f"expected a Hugging Face BertLayer, got a {type(bert_layer).__name__} without "
                f"'{name}' (transformers.models.bert.modeling_bert.BertLayer has it)"
            ) from None
    return parts


def hf_bert_torch_settings(bert_layer) -> dict:
    """The nn.TransformerEncoderLayer arguments that make PyTorch's layer compute what a Hugging
    Face BertLayer computes: its sizes and LayerNorm epsilon read from the layer, and the settings
    every BERT shares, where PyTorch's defaults differ (exact GELU, batch-first tensors) or agree
    (post-LN). dropout is the layer's hidden dropout (torch has one rate for all its dropouts).

    Built in chapter 01."""
    parts = _hf_bert_parts(bert_layer)
    act = bert_layer.intermediate.intermediate_act_fn
    t = torch.linspace(-4.0, 4.0, 33)
    with torch.no_grad():
        if torch.allclose(act(t), F.gelu(t), atol=1e-6):
            activation = "gelu"
        elif torch.allclose(act(t), F.relu(t), atol=1e-6):
            activation = "relu"
        else:
            raise ValueError(
                "nn.TransformerEncoderLayer has exact GELU and ReLU only; this BertLayer's "
                f"activation ({type(act).__name__}) is neither (hidden_act 'gelu_new' is the "
                "tanh form)"
            )
    return dict(
        d_model=parts["attention.self.query"].in_features,
        nhead=bert_layer.attention.self.num_attention_heads,
        dim_feedforward=parts["intermediate.dense"].out_features,
        dropout=bert_layer.output.dropout.p,
        activation=activation,
        layer_norm_eps=parts["attention.output.LayerNorm"].eps,
        batch_first=True,
        norm_first=False,
    )


def torch_layer_from_hf_bert(bert_layer, **settings) -> nn.TransformerEncoderLayer:
    """PyTorch's nn.TransformerEncoderLayer holding a Hugging Face BertLayer's weights, eval mode.

    Why it exists: "BERT is a Transformer encoder" can be checked as a function, not a diagram:
    built with BERT's settings and holding BERT's weights, PyTorch's own layer must compute what
    BertLayer computes (claim A21, appendix 91); and setting one of those back to PyTorch's default
    shows what each default changes (chapter 05, claim A23). Both chapters use this one copy.

    The constructor arguments are hf_bert_torch_settings(bert_layer), each overridable by keyword
    (e.g. activation="relu"). W_Q, W_K, W_V and their biases are stacked into in_proj_weight and
    in_proj_bias in that order (torch splits them back as q, k, v). A setting that changes a
    weight's shape (d_model, dim_feedforward) raises ValueError naming the weight.

    Built in chapter 01."""
    parts = _hf_bert_parts(bert_layer)
    m = nn.TransformerEncoderLayer(**{**hf_bert_torch_settings(bert_layer), **settings})
    q, k, v = (parts[f"attention.self.{n}"] for n in ("query", "key", "value"))
    sources = {
        "self_attn.in_proj_weight": torch.cat([q.weight, k.weight, v.weight]),  # (3d, d)
        "self_attn.in_proj_bias": torch.cat([q.bias, k.bias, v.bias]),  # (3d,)
    }
    for dst, src in [
        ("self_attn.out_proj", "attention.output.dense"),
        ("linear1", "intermediate.dense"),
        ("linear2", "output.dense"),
        ("norm1", "attention.output.LayerNorm"),
        ("norm2", "output.LayerNorm"),
    ]:
        sources[f"{dst}.weight"] = parts[src].weight
        sources[f"{dst}.bias"] = parts[src].bias
    params = dict(m.named_parameters())
    for name, src in sources.items():
        if params[name].shape != src.shape:
            raise ValueError(
                f"the settings give {name} the shape {tuple(params[name].shape)}, but the "
                f"BertLayer's weight has {tuple(src.shape)}"
            )
    with torch.no_grad():
        for name, src in sources.items():
            params[name].copy_(src)
    return m.to(q.weight.device, q.weight.dtype).eval()


class ArticleEncoderLayer(nn.Module):
    """The first source article's "BERT encoder layer" class (its section 4.2), rebuilt from its
    description on tfx parts, so that the chapters test the article's own construction rather than
    a corrected one: a multi-head attention with one fused, bias-free W_qkv and a bias-free W_O and
    no dropout on the attention weights; nn.LayerNorm with PyTorch's default eps = 1e-5; an FFN of
    two biased linear maps (d → 4d → d) with exact GELU; dropout after each sub-layer; post-LN; no
    attention mask (forward takes x alone).

    Built in chapter 05."""

    def __init__(self, d_model: int = 768, n_heads: int = 12, dropout: float = 0.1):
        super().__init__()
        self.attention = MultiHeadAttention(d_model, n_heads, bias=False)  # no Q/K/V/O biases
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)  # eps 1e-5
        self.ffn = nn.Sequential(
            nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model)
        )
        self.dropout1, self.dropout2 = nn.Dropout(dropout), nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (B, L, d) → (B, L, d)."""
        x = self.norm1(x + self.dropout1(self.attention(x)[0]))  # (B, L, d): post-LN
        return self.norm2(x + self.dropout2(self.ffn(x)))  # (B, L, d)
