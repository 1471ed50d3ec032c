"""tfx.inspect.flops: every count checked against real modules and torch's FLOP counter, not against
itself."""

import pytest
import torch
import transformers
from torch.utils.flop_counter import FlopCounterMode

import tfx
from tfx.inspect.flops import crossover_lengths, layer_flops, n_params, param_counts, shape_rows
from tfx.model.bert import BertConfig, BertForMaskedLM, BertModel
from tfx.model.layers import EncoderLayer


def test_n_params_counts_a_tied_weight_once():
    lin = torch.nn.Linear(3, 4)
    assert n_params(lin) == 3 * 4 + 4
    tied = torch.nn.Sequential(torch.nn.Embedding(10, 3), torch.nn.Linear(3, 10, bias=False))
    assert n_params(tied) == 30 + 30
    tied[1].weight = tied[0].weight  # (10, 3): one tensor in two modules
    assert n_params(tied) == 30
    with torch.device("meta"):
        assert n_params(torch.nn.Linear(1000, 1000)) == 1_001_000


def test_n_params_refuses_what_is_not_a_module():
    with pytest.raises(TypeError, match="module must be a torch.nn.Module, got Tensor"):
        n_params(torch.ones(3))


@pytest.mark.parametrize(
    "vocab,model,expected",
    [
        (30522, "BertModel", 109_482_240),
        (21128, "BertModel", 102_267_648),
        (21128, "BertForMaskedLM", 102_290_312),
    ],
)
def test_english_and_chinese_bert_base_against_hugging_face(vocab, model, expected):
    cfg = BertConfig.base(vocab_size=vocab)
    with torch.device("meta"):
        hf = getattr(transformers, model)(transformers.BertConfig(**cfg.to_hf_kwargs()))
    mlm = model == "BertForMaskedLM"
    assert n_params(hf) == expected
    assert sum(param_counts(cfg, pooler=not mlm, mlm_head=mlm).values()) == expected


@pytest.mark.parametrize(
    "cfg", [BertConfig.tiny(), BertConfig.tiny(d_ff=96, n_heads=2, type_vocab_size=3)]
)
def test_param_counts_match_tfx_modules(cfg):
    assert sum(param_counts(cfg).values()) == n_params(BertModel(cfg))
    assert sum(param_counts(cfg, pooler=False, mlm_head=True).values()) == n_params(
        BertForMaskedLM(cfg)
    )
    layer = EncoderLayer(cfg.d_model, cfg.n_heads, cfg.d_ff)
    per_layer = {
        k: v // cfg.n_layers
        for k, v in param_counts(cfg).items()
        if k.startswith(("attention", "FFN"))
    }
    assert sum(per_layer.values()) == n_params(layer)
    assert per_layer["FFN"] == n_params(layer.ff)


@pytest.mark.parametrize("cfg", [BertConfig.base(), BertConfig.large()])
def test_param_counts_match_hugging_face(cfg):
    with torch.device("meta"):  # counts only: no memory, no init time
        hf = transformers.BertModel(transformers.BertConfig(**cfg.to_hf_kwargs()))
    assert sum(param_counts(cfg).values()) == n_params(hf)


def test_bert_base_total_is_109_48M():
    assert sum(param_counts(BertConfig.base()).values()) == 109_482_240


@pytest.mark.parametrize(
    "d_model,n_heads,d_ff,L", [(64, 4, 256, 10), (32, 2, 64, 1), (48, 3, 96, 33)]
)
def test_layer_flops_match_flop_counter(d_model, n_heads, d_ff, L):
    layer = EncoderLayer(d_model, n_heads, d_ff, dropout=0.0).eval()
    with FlopCounterMode(display=False) as fc:
        layer(torch.randn(1, L, d_model))
    assert fc.get_total_flops() == sum(layer_flops(d_model, d_ff, L).values())


def test_crossover_is_where_the_terms_meet():
    d, d_ff = 768, 3072
    cross = crossover_lengths(d, d_ff)

    def quad(L):
        f = layer_flops(d, d_ff, L)
        return f["scores Q Kᵀ"] + f["weights · V"], f

    q, f = quad(cross["vs attention projections"])
    assert q == f["Q, K, V projections"] + f["W_O"]
    q, f = quad(cross["vs FFN"])
    assert q == f["FFN"]
    q, f = quad(cross["vs all projections"])
    assert q == f["FFN"] + f["Q, K, V projections"] + f["W_O"]
    q, f = quad(cross["vs FFN"] - 1)
    assert q < f["FFN"]


def test_shape_rows_match_a_real_forward():
    cfg = BertConfig.tiny(n_layers=1)
    tfx.set_seed(0)
    model = BertForMaskedLM(cfg).eval()
    ids = torch.randint(0, cfg.vocab_size, (2, 7))
    rows = dict(shape_rows(cfg, L=7, B=2))
    emb = model.bert.embeddings
    assert tuple(emb.tok(ids).shape) == rows["token embeddings"]
    assert tuple(emb.pos(7).shape) == rows["position embeddings"]
    x = emb(ids, torch.zeros_like(ids))
    assert tuple(x.shape) == rows["sum, LayerNorm"]
    attn = model.bert.layers[0].attn
    q = attn.split_heads(attn.qkv(x).split(cfg.d_model, dim=-1)[0])
    assert tuple(q.shape) == rows["Q, K, V per head"]
    assert tuple(attn.qkv.weight[: attn.d_k].T.shape) == rows["W_Q (also W_K, W_V) of one head"]
    _, w = attn(x)
    assert tuple(w.shape) == rows["scores Q Kᵀ / √d_k"]
    assert tuple(model.bert.layers[0].ff.fc1(x).shape) == rows["FFN hidden"]
    assert tuple(model(ids).shape) == rows["MLM logits"]
