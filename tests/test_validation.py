"""Bad input gets a clear error that names the argument, what was expected and what was given.

Each row is one invalid input found by a sweep over tfx (issue 8): a silent wrong answer or an
obscure error (ZeroDivisionError, "index out of range in self", a matmul dtype error) before.
"""

import numpy as np
import pytest
import torch

from tfx.model.attention import (
    MultiHeadAttention,
    causal_mask,
    padding_mask,
    scaled_dot_product_attention,
)
from tfx.model.bert import BertConfig, BertEmbeddings, BertForMaskedLM, BertModel
from tfx.model.layers import EncoderLayer, FeedForward, LayerNorm
from tfx.model.position import (
    LearnedPositionalEmbedding,
    alibi_bias,
    alibi_slopes,
    apply_rope,
    sinusoidal_encoding,
    sinusoidal_rotation,
)
from tfx.numpy import numpy_ref as nr

CONSTRUCTORS = [
    # sizes <= 0, and zero heads without a ZeroDivisionError
    (lambda: MultiHeadAttention(0, 2), ValueError, r"d_model must be an int >= 1, got 0"),
    (lambda: MultiHeadAttention(-8, 2), ValueError, r"d_model must be an int >= 1, got -8"),
    (lambda: MultiHeadAttention(8, 0), ValueError, r"n_heads must be an int >= 1, got 0"),
    (lambda: MultiHeadAttention(8, -2), ValueError, r"n_heads must be an int >= 1, got -2"),
    (lambda: MultiHeadAttention(8.0, 2), TypeError, r"d_model must be an int, got 8.0 \(float\)"),
    (lambda: MultiHeadAttention(8, 2, dropout=-0.1), ValueError, r"0 <= dropout <= 1, got -0.1"),
    (lambda: MultiHeadAttention(8, 2, dropout=1.5), ValueError, r"0 <= dropout <= 1, got 1.5"),
    (lambda: MultiHeadAttention(8, 2, attn_impl="flash"), ValueError, r"'naive' or 'sdpa'"),
    (lambda: MultiHeadAttention(8, 2, bias="yes"), TypeError, r"bias must be True or False"),
    (lambda: LayerNorm(0), ValueError, r"d must be an int >= 1, got 0"),
    (lambda: LayerNorm(8, eps=-1e-5), ValueError, r"eps must be a finite float > 0, got -1e-05"),
    (lambda: LayerNorm(8, eps=0.0), ValueError, r"eps must be a finite float > 0, got 0.0"),
    (
        lambda: LayerNorm(8, eps=float("nan")),
        ValueError,
        r"eps must be a finite float > 0, got nan",
    ),
    (lambda: FeedForward(8, 0), ValueError, r"d_ff must be an int >= 1, got 0"),
    (lambda: FeedForward(0, 8), ValueError, r"d_model must be an int >= 1, got 0"),
    (lambda: FeedForward(8, 16, dropout=2), ValueError, r"0 <= dropout <= 1, got 2"),
    (lambda: EncoderLayer(8, 2, 0), ValueError, r"d_ff must be an int >= 1, got 0"),
    (lambda: EncoderLayer(8, 0, 16), ValueError, r"n_heads must be an int >= 1, got 0"),
    (lambda: EncoderLayer(8, 2, 16, dropout=-0.1), ValueError, r"0 <= dropout <= 1, got -0.1"),
    (
        lambda: EncoderLayer(8, 2, 16, attn_dropout=1.1),
        ValueError,
        r"0 <= attn_dropout <= 1, got 1.1",
    ),
    (lambda: EncoderLayer(8, 2, 16, eps=-1.0), ValueError, r"eps must be a finite float > 0"),
    (
        lambda: EncoderLayer(8, 2, 16, ff_inner_dropout="no"),
        TypeError,
        r"ff_inner_dropout must be True or False, got 'no'",
    ),
    (lambda: BertConfig.tiny(n_layers=-1), ValueError, r"n_layers must be an int >= 1, got -1"),
    (lambda: BertConfig.tiny(d_ff=0), ValueError, r"d_ff must be an int >= 1, got 0"),
    (lambda: BertConfig.tiny(n_heads=0), ValueError, r"n_heads must be an int >= 1, got 0"),
    (lambda: BertConfig.tiny(d_model=0), ValueError, r"d_model must be an int >= 1, got 0"),
    (lambda: BertConfig.tiny(vocab_size=0), ValueError, r"vocab_size must be an int >= 1"),
    (lambda: BertConfig.tiny(max_len=0), ValueError, r"max_len must be an int >= 1, got 0"),
    (lambda: BertConfig.tiny(type_vocab_size=0), ValueError, r"type_vocab_size must be an int"),
    (lambda: BertConfig.tiny(d_model=64.5), TypeError, r"d_model must be an int, got 64.5"),
    (lambda: BertConfig.tiny(eps=-1e-12), ValueError, r"eps must be a finite float > 0"),
    (lambda: BertConfig.tiny(dropout=-0.1), ValueError, r"0 <= dropout <= 1, got -0.1"),
    (lambda: BertConfig.tiny(attn_dropout=1.5), ValueError, r"0 <= attn_dropout <= 1, got 1.5"),
    (lambda: BertConfig.tiny(attn_impl="flash"), ValueError, r"attn_impl must be"),
    (
        lambda: BertConfig.tiny(pad_token_id=1000),
        ValueError,
        r"pad_token_id must be an id below vocab_size \(1000\) or None, got 1000",
    ),
    (lambda: BertModel(dict(d_model=64)), TypeError, r"cfg must be a tfx.model.bert.BertConfig"),
    (lambda: LearnedPositionalEmbedding(0, 4), ValueError, r"max_len must be an int >= 1"),
    (lambda: LearnedPositionalEmbedding(4, 0), ValueError, r"d_model must be an int >= 1"),
    (lambda: sinusoidal_encoding(0, 8), ValueError, r"max_len must be an int >= 1, got 0"),
    (lambda: sinusoidal_encoding(4, 8.0), TypeError, r"d_model must be an int, got 8.0"),
    (lambda: sinusoidal_encoding(4, 8, base=1.0), ValueError, r"base must be > 1, got 1.0"),
    (lambda: sinusoidal_encoding(4, 8, base=-5.0), ValueError, r"base must be a finite float > 0"),
    (
        lambda: sinusoidal_encoding(4, 8, dtype=torch.long),
        ValueError,
        r"dtype must be a floating torch.dtype, got torch.int64",
    ),
    (lambda: sinusoidal_rotation(1.5, 8), TypeError, r"k must be an int, got 1.5"),
    (lambda: alibi_slopes(2.5), TypeError, r"n_heads must be an int, got 2.5"),
    (lambda: alibi_bias(4, 0), ValueError, r"L_q must be an int >= 1, got 0"),
    (lambda: alibi_bias(4, 3, -1), ValueError, r"L_k must be an int >= 1, got -1"),
    (lambda: causal_mask(0), ValueError, r"L must be an int >= 1, got 0"),
    (lambda: causal_mask(2.0), TypeError, r"L must be an int, got 2.0"),
]


@pytest.mark.parametrize("make, error, message", CONSTRUCTORS)
def test_bad_constructor_arguments(make, error, message):
    with pytest.raises(error, match=message):
        make()


def _qkv(*shape, dtype=torch.float32):
    return [torch.randn(*shape, dtype=dtype) for _ in range(3)]


MHA = MultiHeadAttention(8, 2)
LAYER = EncoderLayer(8, 2, 16)
X = torch.randn(3, 4, 8)  # B = 3 differs from L = 4, so a (B, L) mask is recognisable
PAD = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]])  # (B, L), 1 = real token
ADDITIVE = (1.0 - PAD.float()) * torch.finfo(torch.float32).min  # HF's internal form
BERT = BertModel(BertConfig.tiny())  # vocab_size 1000, type_vocab_size 2, max_len 128
IDS = torch.tensor([[2, 5, 7, 3]])

CALLS = [
    # scaled_dot_product_attention
    (
        lambda: scaled_dot_product_attention(*_qkv(1, 3, 4), dropout_p=-0.1),
        ValueError,
        r"0 <= dropout_p <= 1, got -0.1",
    ),
    (
        lambda: scaled_dot_product_attention(*_qkv(1, 3, 4), dropout_p=1.5),
        ValueError,
        r"0 <= dropout_p <= 1, got 1.5",
    ),
    (
        lambda: scaled_dot_product_attention(np.ones((3, 4)), *_qkv(3, 4)[:2]),
        TypeError,
        r"q must be a torch.Tensor, got numpy.ndarray \(convert it with torch.as_tensor\)",
    ),
    (
        lambda: scaled_dot_product_attention(*_qkv(3, 4)[:2], [[1.0] * 4] * 3),
        TypeError,
        r"v must be a torch.Tensor, got list",
    ),
    (
        lambda: scaled_dot_product_attention(*[torch.ones(3, 4, dtype=torch.long)] * 3),
        ValueError,
        r"q must be a floating-point tensor, got dtype torch.int64",
    ),
    (
        lambda: scaled_dot_product_attention(
            torch.randn(3, 4), torch.randn(3, 4).half(), torch.randn(3, 4)
        ),
        ValueError,
        r"q, k, v must share a dtype, got torch.float32, torch.float16, torch.float32",
    ),
    (
        lambda: scaled_dot_product_attention(
            torch.randn(2, 5, 4), torch.randn(3, 5, 4), torch.randn(3, 5, 4)
        ),
        ValueError,
        r"leading \(batch, head\) dims of q, k, v differ: \(2, 5, 4\), \(3, 5, 4\), \(3, 5, 4\)",
    ),
    (
        lambda: scaled_dot_product_attention(*_qkv(2, 0, 4)),
        ValueError,
        r"L >= 1 and d >= 1 .* got \(2, 0, 4\)",
    ),
    (
        lambda: scaled_dot_product_attention(*_qkv(3, 4), scale=float("nan")),
        ValueError,
        r"scale must be a finite float or None, got nan",
    ),
    (
        lambda: scaled_dot_product_attention(*_qkv(3, 4), mask=np.ones((3, 3), dtype=bool)),
        TypeError,
        r"mask must be a torch.Tensor, got numpy.ndarray",
    ),
    # padding_mask: only bool or 0/1, never HF's additive mask (which .bool() would invert)
    (
        lambda: padding_mask(ADDITIVE),
        ValueError,
        r"attention_mask must be a bool or integer 0/1 mask .* got dtype torch.float32: .*"
        r"an additive mask .* with `attention_mask == 0`",
    ),
    (
        lambda: padding_mask(torch.zeros(2, 4)),  # additive, no padding: all 0, read as all pad
        ValueError,
        r"attention_mask must be a bool or integer 0/1 mask",
    ),
    (lambda: padding_mask(PAD * 2), ValueError, r"bool or 0/1 values .* got the value 2"),
    (lambda: padding_mask(PAD.numpy()), TypeError, r"attention_mask must be a torch.Tensor"),
    # MultiHeadAttention / EncoderLayer
    (lambda: MHA(X.numpy()), TypeError, r"x must be a torch.Tensor, got numpy.ndarray"),
    (
        lambda: MHA(X.double()),
        ValueError,
        r"x has dtype torch.float64 but the module's parameters have dtype torch.float32",
    ),
    (
        lambda: MHA(X.long()),
        ValueError,
        r"x must be a floating-point tensor, got dtype torch.int64",
    ),
    (lambda: MHA(X[:, :0]), ValueError, r"x must hold at least one token, got shape \(3, 0, 8\)"),
    (lambda: MHA(X[:0]), ValueError, r"x must hold at least one token, got shape \(0, 4, 8\)"),
    (
        lambda: MHA(X, PAD.bool()),
        ValueError,
        r"mask of shape \(3, 4\) is \(B, L\), but a 2-D mask is \(L_q, L_k\) = \(4, 4\); "
        r"pass a padding mask as key_padding_mask=",
    ),
    (
        lambda: LAYER(X, PAD.bool()),
        ValueError,
        r"mask of shape \(3, 4\) is \(B, L\).*key_padding_mask=",
    ),
    (
        lambda: MHA(X, key_padding_mask=PAD[:2]),
        ValueError,
        r"key_padding_mask: expected shape \(3, 4\), got \(2, 4\)",
    ),
    (
        lambda: LAYER(X, key_padding_mask=ADDITIVE),
        ValueError,
        r"key_padding_mask must be a bool or integer 0/1 mask",
    ),
    (lambda: LAYER(X, key_padding_mask=PAD.tolist()), TypeError, r"key_padding_mask must be a"),
    (
        lambda: MHA(X, torch.ones(3, 2, 4, 5, dtype=torch.bool)),
        ValueError,
        r"mask of shape \(3, 2, 4, 5\) does not broadcast to the scores of shape \(3, 2, 4, 4\)",
    ),
    (lambda: LayerNorm(8)(X.numpy()), TypeError, r"x must be a torch.Tensor, got numpy.ndarray"),
    (lambda: LayerNorm(8)(X.long()), ValueError, r"x must be a floating-point tensor"),
    (
        lambda: FeedForward(8, 16)(X.double()),
        ValueError,
        r"x has dtype torch.float64 but the module's parameters have dtype torch.float32",
    ),
    # BERT: ids outside the tables name the value and the table's size
    (
        lambda: BERT(torch.tensor([[2, 1000, 3]])),
        ValueError,
        r"input_ids holds the id 1000, outside the vocabulary \(vocab_size\) of size 1000 "
        r"\(valid ids: 0..999\)",
    ),
    (lambda: BERT(torch.tensor([[2, -1, 3]])), ValueError, r"input_ids holds the id -1"),
    (
        lambda: BERT(IDS, token_type_ids=torch.tensor([[0, 0, 1, 2]])),
        ValueError,
        r"token_type_ids holds the id 2, outside type_vocab_size of size 2",
    ),
    (
        lambda: BERT(IDS, token_type_ids=torch.tensor([[0, -1, 0, 0]])),
        ValueError,
        r"token_type_ids holds the id -1",
    ),
    (
        lambda: BertEmbeddings(BertConfig.tiny())(-IDS, torch.zeros_like(IDS)),
        ValueError,
        r"input_ids holds the id -7",
    ),
    (lambda: BERT(IDS.float()), ValueError, r"input_ids must hold integer ids, got dtype"),
    (lambda: BERT(IDS.numpy()), TypeError, r"input_ids must be a torch.Tensor, got numpy.ndarray"),
    (lambda: BERT(IDS.tolist()), TypeError, r"input_ids must be a torch.Tensor, got list"),
    (lambda: BERT(IDS[:, :0]), ValueError, r"input_ids must hold at least one token, got \(1, 0\)"),
    (
        lambda: BERT(IDS, attention_mask=(1.0 - torch.ones(1, 4)) * -10000.0),
        ValueError,
        r"attention_mask must be a bool or integer 0/1 mask",
    ),
    (lambda: BERT(IDS, attention_mask=[[1, 1, 1, 1]]), TypeError, r"attention_mask must be a"),
    (lambda: BERT(IDS, head_scale=[[1.0] * 4] * 2), TypeError, r"head_scale must be a"),
    (
        lambda: BertForMaskedLM(BertConfig.tiny())(IDS, positions=[[True] * 4]),
        TypeError,
        r"positions must be a torch.Tensor",
    ),
    # positions: whole numbers >= 0 only
    (
        lambda: apply_rope(torch.randn(4, 8), positions=torch.tensor([0, 1, -2, 3])),
        ValueError,
        r"positions must be >= 0, got -2",
    ),
    (
        lambda: apply_rope(torch.randn(4, 8), positions=torch.tensor([0.0, 0.5, 1.0, 1.5])),
        ValueError,
        r"positions must be integers, got dtype torch.float32",
    ),
    (lambda: apply_rope(np.ones((4, 8))), TypeError, r"x must be a torch.Tensor"),
    (lambda: LearnedPositionalEmbedding(16, 4)(-3), ValueError, r"L must be an int >= 1, got -3"),
    (lambda: LearnedPositionalEmbedding(16, 4)(0), ValueError, r"L must be an int >= 1, got 0"),
    (lambda: LearnedPositionalEmbedding(16, 4)(2.5), TypeError, r"L must be an int, got 2.5"),
    # numpy_ref: numpy would take a negative id from the end of the table
    (
        lambda: nr.embedding_forward(np.array([[0, -1]]), np.zeros((5, 3))),
        ValueError,
        r"ids holds the id -1, outside the embedding table of size 5 \(valid ids: 0..4\)",
    ),
    (
        lambda: nr.embedding_forward(np.array([[0, 5]]), np.zeros((5, 3))),
        ValueError,
        r"ids holds the id 5, outside the embedding table of size 5",
    ),
    (
        lambda: nr.embedding_forward(np.array([[0.0, 1.0]]), np.zeros((5, 3))),
        ValueError,
        r"ids must hold integer ids, got dtype float64",
    ),
    (
        lambda: nr.char_lm_forward(
            np.array([[1, -2, 3]]),
            nr.init_char_lm(5, 8, 4, 2, 8, 1, np.random.default_rng(0)),
            2,
            1,
        ),
        ValueError,
        r"ids holds the id -2",
    ),
]


@pytest.mark.parametrize("call, error, message", CALLS)
def test_bad_call_arguments(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_accepted_edge_cases_still_work():
    """The checks refuse only what is wrong: these inputs are valid and keep working."""
    assert torch.equal(padding_mask(PAD), padding_mask(PAD.bool()))
    assert torch.equal(padding_mask(PAD.to(torch.uint8)), padding_mask(PAD.bool()))
    one = MHA(X[:1], PAD[:1].bool())[0]  # B = 1: a (1, L) mask is the same key mask either way
    assert torch.equal(one, MHA(X[:1], key_padding_mask=PAD[:1])[0])
    assert scaled_dot_product_attention(*_qkv(3, 4), dropout_p=0.0)[0].shape == (3, 4)
    assert sinusoidal_rotation(-3, 8).shape == (8, 8)  # an offset may be negative
    assert BertConfig.tiny(pad_token_id=None).pad_token_id is None
    ids = torch.tensor([[0, 999]])  # both ends of the vocabulary
    assert BERT(ids, token_type_ids=torch.tensor([[0, 1]])).shape == (1, 2, 64)
