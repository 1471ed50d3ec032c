"""The Transformer and BERT, written out: attention and the attention that avoids the full score
matrix, positions, LayerNorm and the feed-forward block, the encoder layer, BERT itself, the KV
cache of a decoder.

May import: tfx.core. Never an instrument, data, training, plotting or widget module.
"""

from tfx import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "attention": [
            "causal_mask",
            "MultiHeadAttention",
            "padding_mask",
            "scaled_dot_product_attention",
        ],
        "bert": [
            "BertConfig",
            "BertEmbeddings",
            "BertForMaskedLM",
            "BertModel",
            "from_huggingface",
            "MLMHead",
        ],
        "efficient": [
            "chunked_attention",
            "linear_attention",
            "online_softmax_attention",
            "performer_attention",
            "sliding_window_mask",
        ],
        "ffn": [
            "ACTIVATIONS",
            "article_gelu",
            "ffn_param_count",
            "ffn_sublayer_without",
            "GatedFeedForward",
            "gelu_exact",
            "gelu_minimum",
            "gelu_tanh",
            "key_value_view",
            "unit_order",
            "width_probe",
        ],
        "kvcache": ["cache_bytes", "decode_step", "KVCache"],
        "layers": [
            "ArticleEncoderLayer",
            "EncoderLayer",
            "FeedForward",
            "hf_bert_torch_settings",
            "LayerNorm",
            "torch_layer_from_hf_bert",
        ],
        "position": [
            "alibi_bias",
            "alibi_slopes",
            "apply_rope",
            "POSITION_TYPES",
            "sinusoidal_encoding",
            "sinusoidal_rotation",
            "SINUSOIDAL_SCALE",
            "sinusoidal_wavelengths",
        ],
    },
)
