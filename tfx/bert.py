"""BERT: embeddings, a stack of post-LN encoder layers, a pooler, and the masked-LM head."""

from dataclasses import asdict, dataclass

import torch
import torch.nn as nn

from tfx.attention import padding_mask
from tfx.layers import ACTIVATIONS, EncoderLayer, LayerNorm
from tfx.position import LearnedPositionalEmbedding
from tfx.shapes import check_shape, fmt_shape


@dataclass
class BertConfig:
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
        """Read a transformers.BertConfig; refuse what tfx does not implement instead of diverging."""
        if getattr(hf_config, "position_embedding_type", "absolute") != "absolute":
            raise ValueError("tfx implements absolute (learned) position embeddings only")
        if hf_config.hidden_act not in cls._HF_ACT:
            raise ValueError(f"unsupported hidden_act {hf_config.hidden_act!r}")
        kw = {ours: getattr(hf_config, theirs) for ours, theirs in cls._HF_NAMES.items()}
        kw["activation"] = cls._HF_ACT[kw["activation"]]
        return cls(**kw)

    def to_hf_kwargs(self) -> dict:
        """The keyword arguments of the equivalent transformers.BertConfig."""
        kw = {theirs: getattr(self, ours) for ours, theirs in self._HF_NAMES.items()}
        kw["hidden_act"] = {v: k for k, v in reversed(list(self._HF_ACT.items()))}[self.activation]
        return kw

    def __post_init__(self):
        if self.d_model % self.n_heads != 0:
            raise ValueError(
                f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})"
            )
        if self.activation not in ACTIVATIONS:
            raise ValueError(
                f"activation must be one of {sorted(ACTIVATIONS)}, got {self.activation!r}"
            )

    def to_dict(self) -> dict:
        return asdict(self)


class BertEmbeddings(nn.Module):
    """token + segment + learned position embedding, then LayerNorm and dropout."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.tok = nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=cfg.pad_token_id)
        self.seg = nn.Embedding(cfg.type_vocab_size, cfg.d_model)
        self.pos = LearnedPositionalEmbedding(cfg.max_len, cfg.d_model)
        self.norm = LayerNorm(cfg.d_model, cfg.eps)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        L = input_ids.size(1)
        x = (
            self.tok(input_ids) + self.seg(token_type_ids) + self.pos(L)
        )  # (B, L, d) + (B, L, d) + (L, d)
        return self.drop(self.norm(x))  # (B, L, d_model)


class BertPooler(nn.Module):
    """tanh(W h_[CLS] + b): the sentence vector that next-sentence prediction and classifiers read."""

    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.dense = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(hidden[:, 0]))  # (B, d_model)


def _check_inputs(input_ids, token_type_ids, attention_mask):
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids must be (B, L), got {fmt_shape(input_ids.shape)}")
    for name, t in (("token_type_ids", token_type_ids), ("attention_mask", attention_mask)):
        if t is not None:
            check_shape(t, tuple(input_ids.shape), name=name)


class BertModel(nn.Module):
    """The BERT encoder. forward returns the last hidden state; self.pooler(hidden) gives the pooled output."""

    def __init__(self, cfg: BertConfig, add_pooler: bool = True):
        super().__init__()
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
        """input_ids: (B, L) → (B, L, d_model). With output_attentions, also one (B, H, L, L) per layer.

        head_scale: (n_layers, H) multipliers on each head's context, for ablation experiments.
        """
        _check_inputs(input_ids, token_type_ids, attention_mask)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        mask = None if attention_mask is None else padding_mask(attention_mask)  # (B, 1, 1, L)
        if head_scale is not None:
            check_shape(head_scale, (self.cfg.n_layers, self.cfg.n_heads), name="head_scale")
        x = self.embeddings(input_ids, token_type_ids)  # (B, L, d_model)
        attentions = []
        for i, layer in enumerate(self.layers):
            hs = None if head_scale is None else head_scale[i]
            x, w = layer(x, mask, head_scale=hs, return_weights=True)  # (B, L, d_model)
            attentions.append(w)
        return (x, attentions) if output_attentions else x


class MLMHead(nn.Module):
    """dense → gelu → LayerNorm → decoder to the vocabulary, the decoder sharing the word embeddings."""

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
            if positions.dtype != torch.bool:
                raise ValueError(
                    f"positions must be a bool (B, L) mask, got dtype {positions.dtype}"
                )
            check_shape(positions, tuple(input_ids.shape), name="positions")
            h = h[positions]  # (N, d_model)
        return self.head(h)  # (B, L, V) or (N, V)


def _copy(dst: nn.Module, src: nn.Module) -> None:
    dst.weight.copy_(src.weight)
    dst.bias.copy_(src.bias)


def _copy_encoder(ours: BertModel, hf) -> None:
    """Map Hugging Face parameter names onto tfx modules; q, k, v are concatenated into one qkv."""
    e, he = ours.embeddings, hf.embeddings
    e.tok.weight.copy_(he.word_embeddings.weight)
    e.seg.weight.copy_(he.token_type_embeddings.weight)
    e.pos.weight.copy_(he.position_embeddings.weight)
    _copy(e.norm, he.LayerNorm)
    for layer, hl in zip(ours.layers, hf.encoder.layer):
        s = hl.attention.self
        layer.attn.qkv.weight.copy_(
            torch.cat([s.query.weight, s.key.weight, s.value.weight])
        )  # (3d, d)
        layer.attn.qkv.bias.copy_(torch.cat([s.query.bias, s.key.bias, s.value.bias]))  # (3d,)
        _copy(layer.attn.out, hl.attention.output.dense)
        _copy(layer.norm1, hl.attention.output.LayerNorm)
        _copy(layer.ff.fc1, hl.intermediate.dense)
        _copy(layer.ff.fc2, hl.output.dense)
        _copy(layer.norm2, hl.output.LayerNorm)
    if ours.pooler is not None:
        _copy(ours.pooler.dense, hf.pooler.dense)


@torch.no_grad()
def from_huggingface(hf_model) -> nn.Module:
    """A transformers BertModel or BertForMaskedLM → its tfx twin, same config, weights copied."""
    kind = type(hf_model).__name__
    if kind not in ("BertModel", "BertForMaskedLM"):
        raise ValueError(f"from_huggingface takes a BertModel or BertForMaskedLM, got {kind}")
    cfg = BertConfig.from_hf(hf_model.config)
    if kind == "BertModel":
        ours = BertModel(cfg, add_pooler=hf_model.pooler is not None)
        _copy_encoder(ours, hf_model)
    else:
        ours = BertForMaskedLM(cfg)
        _copy_encoder(ours.bert, hf_model.bert)
        t = hf_model.cls.predictions
        _copy(ours.head.dense, t.transform.dense)
        _copy(ours.head.norm, t.transform.LayerNorm)
        ours.head.decoder.bias.copy_(t.decoder.bias if t.decoder.bias is not None else t.bias)
    return ours.eval()
