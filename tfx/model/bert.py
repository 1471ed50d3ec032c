"""BERT: embeddings, a stack of post-LN encoder layers, a pooler, and the masked-LM head."""

from dataclasses import asdict, dataclass

import torch
import torch.nn as nn

from tfx.core.checks import (
    check_ids,
    check_int,
    check_positive_float,
    check_probability,
    check_tensor,
)
from tfx.core.shapes import check_shape, fmt_shape
from tfx.model.attention import padding_mask
from tfx.model.layers import ACTIVATIONS, EncoderLayer, LayerNorm
from tfx.model.position import (
    POSITION_TYPES,
    SINUSOIDAL_SCALE,
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
    alibi_bias,
)


@dataclass
class BertConfig:
    """BERT's sizes and options. position chooses how the model sees order (chapter 07):
    "learned" (BERT's table of max_len rows, the only one Hugging Face's BERT has), "sinusoidal"
    (the fixed table, added like the learned one, no parameters, any length), "rope" (q and k
    rotated inside every attention layer, no table), "alibi" (a distance bias −m_h·|i − j| on every
    layer's scores, no table). max_len is the size of the learned table and limits only "learned".
    """

    vocab_size: int = 30522
    d_model: int = 768
    n_layers: int = 12
    n_heads: int = 12
    d_ff: int = 3072
    max_len: int = 512
    type_vocab_size: int = 2
    dropout: float = 0.1
    attn_dropout: float = 0.1
    eps: float = 1e-12
    activation: str = "gelu"
    attn_impl: str = "naive"
    pad_token_id: int = 0
    position: str = "learned"

    @classmethod
    def base(cls, **overrides) -> "BertConfig":
        return cls(**overrides)

    @classmethod
    def large(cls, **overrides) -> "BertConfig":
        return cls(**{"d_model": 1024, "n_layers": 24, "n_heads": 16, "d_ff": 4096, **overrides})

    @classmethod
    def tiny(cls, **overrides) -> "BertConfig":
        """Small enough to train on a laptop CPU in seconds, same wiring as base."""
        return cls(
            **{
                "vocab_size": 1000,
                "d_model": 64,
                "n_layers": 2,
                "n_heads": 4,
                "d_ff": 256,
                "max_len": 128,
                **overrides,
            }
        )

    _HF_NAMES = {
        "vocab_size": "vocab_size",
        "d_model": "hidden_size",
        "n_layers": "num_hidden_layers",
        "n_heads": "num_attention_heads",
        "d_ff": "intermediate_size",
        "max_len": "max_position_embeddings",
        "type_vocab_size": "type_vocab_size",
        "dropout": "hidden_dropout_prob",
        "attn_dropout": "attention_probs_dropout_prob",
        "eps": "layer_norm_eps",
        "activation": "hidden_act",
        "pad_token_id": "pad_token_id",
    }
    _HF_ACT = {
        "gelu": "gelu",
        "gelu_new": "gelu_tanh",
        "gelu_pytorch_tanh": "gelu_tanh",
        "relu": "relu",
    }

    @classmethod
    def from_hf(cls, hf_config) -> "BertConfig":
        """Read a transformers.BertConfig; refuse what tfx lacks rather than diverge."""
        if getattr(hf_config, "position_embedding_type", "absolute") != "absolute":
            raise ValueError("tfx implements absolute (learned) position embeddings only")
        if hf_config.hidden_act not in cls._HF_ACT:
            raise ValueError(f"unsupported hidden_act {hf_config.hidden_act!r}")
        kw = {ours: getattr(hf_config, theirs) for ours, theirs in cls._HF_NAMES.items()}
        kw["activation"] = cls._HF_ACT[kw["activation"]]
        return cls(**kw)

    def to_hf_kwargs(self) -> dict:
        """The keyword arguments of the equivalent transformers.BertConfig."""
        if self.position != "learned":
            raise ValueError(
                f"Hugging Face's BERT has only a learned position table (position_embedding_type="
                f"'absolute'); a tfx config with position={self.position!r} has no equivalent "
                "transformers.BertConfig: only position='learned' can be exported"
            )
        kw = {theirs: getattr(self, ours) for ours, theirs in self._HF_NAMES.items()}
        kw["hidden_act"] = {v: k for k, v in reversed(list(self._HF_ACT.items()))}[self.activation]
        return kw

    _SIZES = ("vocab_size", "d_model", "n_layers", "n_heads", "d_ff", "max_len", "type_vocab_size")

    def __post_init__(self):
        """Check every field now: a bad value would otherwise surface only when a model is built
        (or, for a negative dropout, never)."""
        for name in self._SIZES:
            check_int(getattr(self, name), name)
        check_probability(self.dropout, "dropout")
        check_probability(self.attn_dropout, "attn_dropout")
        check_positive_float(self.eps, "eps")
        if self.attn_impl not in ("naive", "sdpa"):
            raise ValueError(f"attn_impl must be 'naive' or 'sdpa', got {self.attn_impl!r}")
        pad = self.pad_token_id
        if pad is not None and check_int(pad, "pad_token_id", minimum=0) >= self.vocab_size:
            raise ValueError(
                f"pad_token_id must be an id below vocab_size ({self.vocab_size}) or None, "
                f"got {self.pad_token_id}"
            )
        if self.d_model % self.n_heads != 0:
            raise ValueError(
                f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})"
            )
        if self.activation not in ACTIVATIONS:
            raise ValueError(
                f"activation must be one of {sorted(ACTIVATIONS)}, got {self.activation!r}"
            )
        if not (isinstance(self.position, str) and self.position in POSITION_TYPES):
            raise ValueError(
                f"position must be one of {', '.join(map(repr, POSITION_TYPES))}, "
                f"got {self.position!r}"
            )
        if self.position == "rope" and (self.d_model // self.n_heads) % 2:
            raise ValueError(
                f"position='rope' turns pairs of dims: the head size d_model / n_heads must be "
                f"even, got {self.d_model} / {self.n_heads} = {self.d_model // self.n_heads}"
            )
        if self.position == "sinusoidal" and self.d_model % 2:
            raise ValueError(
                f"position='sinusoidal' needs an even d_model (sin/cos pairs), got {self.d_model}"
            )

    def to_dict(self) -> dict:
        """The fields as a dict. position is left out when it is "learned" (the default), so a
        config keeps the dict, and a trained-weights cache key (tfx.learn.train.run_key), it had
        before the field existed; BertConfig(**d) restores it either way."""
        d = asdict(self)
        if d["position"] == "learned":
            del d["position"]
        return d


class BertEmbeddings(nn.Module):
    """token + segment + position embedding, then LayerNorm and dropout.

    The position term is the learned table (BERT's), the fixed sinusoidal table, or nothing at all
    (self.pos is None) for "rope" and "alibi", which act inside attention instead.
    """

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.tok = nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=cfg.pad_token_id)
        self.seg = nn.Embedding(cfg.type_vocab_size, cfg.d_model)
        if cfg.position == "learned":
            self.pos = LearnedPositionalEmbedding(cfg.max_len, cfg.d_model)
        elif cfg.position == "sinusoidal":
            self.pos = SinusoidalPositionalEncoding(cfg.d_model, scale=SINUSOIDAL_SCALE)
        else:
            self.pos = None
        self.norm = LayerNorm(cfg.d_model, cfg.eps)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        # an out-of-range id would fail as "index out of range in self", a negative one worse
        check_ids(input_ids, "input_ids", self.tok.num_embeddings, "the vocabulary (vocab_size)")
        check_ids(token_type_ids, "token_type_ids", self.seg.num_embeddings, "type_vocab_size")
        L = input_ids.size(1)
        x = self.tok(input_ids) + self.seg(token_type_ids)  # (B, L, d) + (B, L, d)
        if self.pos is not None:
            x = x + self.pos(L).to(x.device, x.dtype)  # (B, L, d) + (L, d)
        return self.drop(self.norm(x))  # (B, L, d_model)


class BertPooler(nn.Module):
    """tanh(W h_[CLS] + b): the sentence vector that next-sentence prediction and classifiers
    read."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.dense = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(hidden[:, 0]))  # (B, d_model)


def _check_inputs(input_ids, token_type_ids, attention_mask):
    check_tensor(input_ids, "input_ids")
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids must be (B, L), got {fmt_shape(input_ids.shape)}")
    if input_ids.numel() == 0:
        raise ValueError(
            f"input_ids must hold at least one token, got {fmt_shape(input_ids.shape)}"
        )
    for name, t in (("token_type_ids", token_type_ids), ("attention_mask", attention_mask)):
        if t is not None:
            check_tensor(t, name)
            check_shape(t, tuple(input_ids.shape), name=name)


class BertModel(nn.Module):
    """The BERT encoder. forward returns the last hidden state; self.pooler(hidden) gives the
    pooled output. Dropout sits where BERT has it: no dropout inside the FFN."""

    def __init__(self, cfg: BertConfig, add_pooler: bool = True):
        super().__init__()
        if not isinstance(cfg, BertConfig):
            raise TypeError(f"cfg must be a tfx.model.bert.BertConfig, got {type(cfg).__name__}")
        self.cfg = cfg
        self.embeddings = BertEmbeddings(cfg)
        self.layers = nn.ModuleList(
            EncoderLayer(
                cfg.d_model,
                cfg.n_heads,
                cfg.d_ff,
                dropout=cfg.dropout,
                norm_first=False,
                activation=cfg.activation,
                attn_impl=cfg.attn_impl,
                eps=cfg.eps,
                attn_dropout=cfg.attn_dropout,
                ff_inner_dropout=False,  # BERT: dropout after the FFN only, not inside it
                rope_base=10000.0 if cfg.position == "rope" else None,
            )
            for _ in range(cfg.n_layers)
        )
        self.pooler = BertPooler(cfg) if add_pooler else None
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(m: nn.Module) -> None:
        """BERT's init: N(0, 0.02) weights, zero biases, LayerNorm at identity."""
        if isinstance(m, (nn.Linear, nn.Embedding, LearnedPositionalEmbedding)):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)
        if isinstance(m, nn.Embedding) and m.padding_idx is not None:
            with torch.no_grad():
                m.weight[m.padding_idx].zero_()

    def forward(
        self,
        input_ids,
        token_type_ids=None,
        attention_mask=None,
        head_scale=None,
        output_attentions: bool = False,
    ):
        """input_ids: (B, L) → (B, L, d_model); with output_attentions also one (B, H, L, L) per
        layer. attention_mask: (B, L), 1 or True = real token, 0 = padding.

        head_scale: (n_layers, H) multipliers on each head's context, for ablation experiments.
        """
        _check_inputs(input_ids, token_type_ids, attention_mask)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        mask = None if attention_mask is None else padding_mask(attention_mask)  # (B, 1, 1, L)
        if head_scale is not None:
            check_tensor(head_scale, "head_scale")
            check_shape(head_scale, (self.cfg.n_layers, self.cfg.n_heads), name="head_scale")
        x = self.embeddings(input_ids, token_type_ids)  # (B, L, d_model)
        bias = None
        if self.cfg.position == "alibi":  # once per forward, shared by every layer
            L = input_ids.size(1)
            bias = alibi_bias(self.cfg.n_heads, L).to(x.device)  # (H, L, L): −m_h |i − j|
        attentions = []
        for i, layer in enumerate(self.layers):
            hs = None if head_scale is None else head_scale[i]
            x, w = layer(
                x, mask, head_scale=hs, return_weights=True, attn_bias=bias
            )  # (B, L, d_model)
            attentions.append(w)
        return (x, attentions) if output_attentions else x


class MLMHead(nn.Module):
    """dense → gelu → LayerNorm → decoder to the vocabulary; the decoder shares the word
    embeddings."""

    def __init__(self, cfg: BertConfig, word_embeddings: nn.Embedding):
        super().__init__()
        self.dense = nn.Linear(cfg.d_model, cfg.d_model)
        self.act = cfg.activation
        self.norm = LayerNorm(cfg.d_model, cfg.eps)
        self.decoder = nn.Linear(cfg.d_model, cfg.vocab_size)
        self.decoder.weight = word_embeddings.weight  # tied: (V, d_model), one tensor, counted once

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.norm(ACTIVATIONS[self.act](self.dense(h))))  # (…, V)


class BertForMaskedLM(nn.Module):
    """BERT without the pooler, plus the masked-LM head."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.cfg = cfg
        self.bert = BertModel(cfg, add_pooler=False)
        self.head = MLMHead(cfg, self.bert.embeddings.tok)
        BertModel._init_weights(self.head.dense)
        nn.init.zeros_(
            self.head.decoder.bias
        )  # the decoder weight is the (already initialised) embedding

    def forward(self, input_ids, token_type_ids=None, attention_mask=None, positions=None):
        """Logits (B, L, V); or, with a (B, L) bool `positions`, only the selected rows, (N, V).

        Scoring only the masked positions skips most of the (d_model × V) decoder work in training.
        """
        h = self.bert(input_ids, token_type_ids, attention_mask)  # (B, L, d_model)
        if positions is not None:
            check_tensor(positions, "positions")
            if positions.dtype != torch.bool:
                raise ValueError(
                    f"positions must be a bool (B, L) mask, got dtype {positions.dtype}"
                )
            check_shape(positions, tuple(input_ids.shape), name="positions")
            h = h[positions]  # (N, d_model)
        return self.head(h)  # (B, L, V) or (N, V)


def _put(dst: torch.Tensor, src: torch.Tensor, name: str) -> None:
    """Copy one Hugging Face tensor, refusing a shape its config did not announce."""
    if dst.shape != src.shape:
        raise ValueError(
            f"hf_model's {name} is {fmt_shape(src.shape)}, but its config gives "
            f"{fmt_shape(dst.shape)}: the config does not describe the modules"
        )
    dst.copy_(src)


def _copy(dst: nn.Module, src: nn.Module, name: str) -> None:
    _put(dst.weight, src.weight, f"{name}.weight")
    _put(dst.bias, src.bias, f"{name}.bias")


def _check_modules(hf_bert, cfg: BertConfig) -> None:
    """Count layers and heads in the modules themselves: a config edited after the model was
    built, or a decoder, would otherwise convert without a word into a different function."""
    layers = hf_bert.encoder.layer
    if len(layers) != cfg.n_layers:
        raise ValueError(
            f"hf_model has {len(layers)} encoder layers, but its config says "
            f"num_hidden_layers={cfg.n_layers}"
        )
    for i, hl in enumerate(layers):
        s = hl.attention.self
        if hasattr(hl, "crossattention") or getattr(s, "is_causal", False):
            raise ValueError(
                f"hf_model's layer {i} has causal self-attention or cross-attention; tfx's BERT "
                "is a bidirectional encoder"
            )
        heads = s.query.out_features // s.attention_head_size  # what its forward's view makes
        if heads != cfg.n_heads:
            raise ValueError(
                f"hf_model's layer {i} runs {heads} attention heads, but its config says "
                f"num_attention_heads={cfg.n_heads}"
            )


def _copy_encoder(ours: BertModel, hf) -> None:
    """Map Hugging Face parameter names onto tfx modules; q, k, v are concatenated into one qkv."""
    e, he = ours.embeddings, hf.embeddings
    _put(e.tok.weight, he.word_embeddings.weight, "embeddings.word_embeddings.weight")
    _put(e.seg.weight, he.token_type_embeddings.weight, "embeddings.token_type_embeddings.weight")
    _put(e.pos.weight, he.position_embeddings.weight, "embeddings.position_embeddings.weight")
    _copy(e.norm, he.LayerNorm, "embeddings.LayerNorm")
    for i, (layer, hl) in enumerate(zip(ours.layers, hf.encoder.layer)):
        s, n = hl.attention.self, f"encoder.layer.{i}"
        qkv_w = torch.cat([s.query.weight, s.key.weight, s.value.weight])  # (3d, d)
        _put(layer.attn.qkv.weight, qkv_w, f"{n}.attention.self.query/key/value.weight")
        qkv_b = torch.cat([s.query.bias, s.key.bias, s.value.bias])  # (3d,)
        _put(layer.attn.qkv.bias, qkv_b, f"{n}.attention.self.query/key/value.bias")
        _copy(layer.attn.out, hl.attention.output.dense, f"{n}.attention.output.dense")
        _copy(layer.norm1, hl.attention.output.LayerNorm, f"{n}.attention.output.LayerNorm")
        _copy(layer.ff.fc1, hl.intermediate.dense, f"{n}.intermediate.dense")
        _copy(layer.ff.fc2, hl.output.dense, f"{n}.output.dense")
        _copy(layer.norm2, hl.output.LayerNorm, f"{n}.output.LayerNorm")
    if ours.pooler is not None:
        _copy(ours.pooler.dense, hf.pooler.dense, "pooler.dense")


@torch.no_grad()
def from_huggingface(hf_model) -> nn.Module:
    """A transformers BertModel or BertForMaskedLM → its tfx twin, same config, weights copied.

    Refused, because tfx cannot represent them: a decoder (is_decoder, cross-attention), other
    position embeddings, and a BertForMaskedLM whose decoder is not tied to the word embeddings
    (tfx's MLMHead always shares that tensor). Layer and head counts are read from the modules and
    must agree with the config; every tensor's shape is checked as it is copied.
    """
    kind = type(hf_model).__name__
    if kind not in ("BertModel", "BertForMaskedLM"):
        raise ValueError(f"from_huggingface takes a BertModel or BertForMaskedLM, got {kind}")
    hf_cfg = hf_model.config
    if getattr(hf_cfg, "is_decoder", False) or getattr(hf_cfg, "add_cross_attention", False):
        raise ValueError(
            "hf_model is configured as a decoder (is_decoder or add_cross_attention), with a "
            "causal mask; tfx's BERT is a bidirectional encoder"
        )
    cfg = BertConfig.from_hf(hf_cfg)
    hf_bert = hf_model if kind == "BertModel" else hf_model.bert
    _check_modules(hf_bert, cfg)
    if kind == "BertModel":
        ours = BertModel(cfg, add_pooler=hf_model.pooler is not None)
        _copy_encoder(ours, hf_model)
    else:
        t = hf_model.cls.predictions
        if t.decoder.weight is not hf_bert.embeddings.word_embeddings.weight:
            raise ValueError(
                "hf_model's MLM decoder has its own weight, not tied to the word embeddings "
                "(tie_word_embeddings=False); tfx's MLMHead always shares them, so the decoder "
                "would be lost"
            )
        ours = BertForMaskedLM(cfg)
        _copy_encoder(ours.bert, hf_bert)
        _copy(ours.head.dense, t.transform.dense, "cls.predictions.transform.dense")
        _copy(ours.head.norm, t.transform.LayerNorm, "cls.predictions.transform.LayerNorm")
        bias = t.decoder.bias if t.decoder.bias is not None else t.bias  # what its forward adds
        _put(ours.head.decoder.bias, bias, "cls.predictions.decoder.bias")
    return ours.eval()


@torch.no_grad()
def to_huggingface(model: nn.Module):
    """A tfx BertForMaskedLM → transformers.BertForMaskedLM with the same weights (eval mode):
    the inverse of from_huggingface, so a model trained here can be saved with save_pretrained
    and read by any Hugging Face tool (the book model, models/book-mlm, is written this way).

    Only a learned position table exists in Hugging Face's BERT (BertConfig.to_hf_kwargs refuses
    the others); the fused qkv weight is cut back into query, key and value; the decoder stays
    tied to the word embeddings, as in tfx.
    """
    import transformers

    if not isinstance(model, BertForMaskedLM):
        raise TypeError(
            f"model must be a tfx.model.bert.BertForMaskedLM, got {type(model).__name__}"
        )
    cfg = model.cfg
    hf = transformers.BertForMaskedLM(transformers.BertConfig(**cfg.to_hf_kwargs()))
    hb, ob = hf.bert, model.bert
    pairs = [
        (hb.embeddings.word_embeddings.weight, ob.embeddings.tok.weight),
        (hb.embeddings.token_type_embeddings.weight, ob.embeddings.seg.weight),
        (hb.embeddings.position_embeddings.weight, ob.embeddings.pos.weight),
    ]

    def lin(theirs, ours):
        pairs.extend([(theirs.weight, ours.weight), (theirs.bias, ours.bias)])

    lin(hb.embeddings.LayerNorm, ob.embeddings.norm)
    d = cfg.d_model
    for hl, layer in zip(hb.encoder.layer, ob.layers):
        s, a = hl.attention.self, layer.attn
        for i, proj in enumerate((s.query, s.key, s.value)):
            pairs.append((proj.weight, a.qkv.weight[i * d : (i + 1) * d]))  # (d, d) of (3d, d)
            pairs.append((proj.bias, a.qkv.bias[i * d : (i + 1) * d]))  # (d,) of (3d,)
        lin(hl.attention.output.dense, a.out)
        lin(hl.attention.output.LayerNorm, layer.norm1)
        lin(hl.intermediate.dense, layer.ff.fc1)
        lin(hl.output.dense, layer.ff.fc2)
        lin(hl.output.LayerNorm, layer.norm2)
    t = hf.cls.predictions
    lin(t.transform.dense, model.head.dense)
    lin(t.transform.LayerNorm, model.head.norm)
    pairs.append(
        (t.decoder.bias if t.decoder.bias is not None else t.bias, model.head.decoder.bias)
    )
    for theirs, ours in pairs:
        _put(theirs, ours, "to_huggingface")
    if t.decoder.weight is not hb.embeddings.word_embeddings.weight:
        hf.tie_weights()
    return hf.eval()
