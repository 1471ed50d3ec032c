"""tfx.bert against Hugging Face transformers, built from a config (no download), weights copied across."""

import pytest
import torch
import transformers
from torch.testing import assert_close

import tfx
from tfx.bert import BertConfig, BertForMaskedLM, BertModel, from_huggingface

transformers.logging.set_verbosity_error()

CONFIGS = [
    BertConfig.tiny(),
    BertConfig.tiny(d_model=48, n_heads=3, n_layers=3, d_ff=96, vocab_size=301, type_vocab_size=3),
    BertConfig.tiny(n_layers=1, activation="gelu_tanh", eps=1e-6),
    BertConfig.tiny(n_layers=2, n_heads=1, d_model=32, d_ff=32, activation="relu"),
]


def _hf(cls, cfg: BertConfig):
    tfx.set_seed(0)
    model = cls(transformers.BertConfig(**cfg.to_hf_kwargs())).eval()
    with (
        torch.no_grad()
    ):  # HF initialises LayerNorm at identity; perturb it so a mis-copied norm shows
        for name, p in model.named_parameters():
            if "LayerNorm" in name:
                p.normal_(1.0 if name.endswith("weight") else 0.0, 0.1)
    return model


def _batch(cfg: BertConfig, B=3, L=11):
    tfx.set_seed(1)
    ids = torch.randint(5, cfg.vocab_size, (B, L))
    am = torch.ones(B, L, dtype=torch.long)
    am[1, 7:] = 0  # padding at the end of two sequences
    am[2, 3:] = 0
    tt = torch.zeros(B, L, dtype=torch.long)
    tt[:, L // 2 :] = 1  # sentence A then sentence B
    tt[0, -1] = cfg.type_vocab_size - 1
    return ids, tt, am


@pytest.mark.parametrize(
    "cfg", CONFIGS, ids=lambda c: f"d{c.d_model}-h{c.n_heads}-l{c.n_layers}-{c.activation}"
)
def test_bert_model_matches_huggingface(cfg):
    hf = _hf(transformers.BertModel, cfg)
    ours = from_huggingface(hf)
    ids, tt, am = _batch(cfg)
    with torch.no_grad():
        want = hf(input_ids=ids, token_type_ids=tt, attention_mask=am)
        got = ours(ids, tt, am)
    keep = am.bool()  # HF gives padded positions numbers that mean nothing; compare real tokens
    assert_close(got[keep], want.last_hidden_state[keep], atol=2e-5, rtol=1e-4)
    assert_close(ours.pooler(got), want.pooler_output, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("cfg", CONFIGS[:2], ids=["tiny", "odd"])
def test_masked_lm_matches_huggingface(cfg):
    hf = _hf(transformers.BertForMaskedLM, cfg)
    ours = from_huggingface(hf)
    ids, tt, am = _batch(cfg)
    with torch.no_grad():
        want = hf(input_ids=ids, token_type_ids=tt, attention_mask=am).logits
        got = ours(ids, tt, am)
        picked = ours(ids, tt, am, positions=am.bool())
    keep = am.bool()
    assert got.shape == (3, 11, cfg.vocab_size)
    assert_close(got[keep], want[keep], atol=5e-5, rtol=1e-4)
    assert_close(picked, got[keep])
    assert ours.head.decoder.weight is ours.bert.embeddings.tok.weight  # tied, as in BERT
    assert ours.bert.pooler is None


@pytest.mark.parametrize(
    "preset, hf_kwargs",
    [
        ("base", {}),
        (
            "large",
            dict(
                hidden_size=1024,
                num_hidden_layers=24,
                num_attention_heads=16,
                intermediate_size=4096,
            ),
        ),
    ],
)
def test_parameter_counts_equal_huggingface(preset, hf_kwargs):
    with torch.device("meta"):  # shapes only: no memory, no init time
        hf_cfg = transformers.BertConfig(**hf_kwargs)
        cfg = getattr(BertConfig, preset)()
        pairs = [
            (BertModel(cfg), transformers.BertModel(hf_cfg)),
            (BertForMaskedLM(cfg), transformers.BertForMaskedLM(hf_cfg)),
        ]
    for ours, theirs in pairs:
        assert sum(p.numel() for p in ours.parameters()) == sum(
            p.numel() for p in theirs.parameters()
        )
    if preset == "base":
        assert sum(p.numel() for p in pairs[0][0].parameters()) == 109_482_240


def test_config_round_trip_and_presets():
    for cfg in CONFIGS + [BertConfig.base(), BertConfig.large()]:
        assert BertConfig.from_hf(transformers.BertConfig(**cfg.to_hf_kwargs())) == cfg
    with pytest.raises(ValueError, match=r"d_model \(100\).*n_heads \(12\)"):
        BertConfig(d_model=100)
    with pytest.raises(ValueError, match="absolute"):
        BertConfig.from_hf(transformers.BertConfig(position_embedding_type="relative_key"))


def test_training_step_reaches_every_parameter():
    cfg = BertConfig.tiny(dropout=0.0, attn_dropout=0.0)
    tfx.set_seed(0)
    model = BertForMaskedLM(cfg)
    ids, tt, am = _batch(cfg)
    logits = model(ids, tt, am, positions=am.bool())
    loss = torch.nn.functional.cross_entropy(logits, ids[am.bool()])
    loss.backward()
    assert [n for n, p in model.named_parameters() if p.grad is None] == []
    assert model.bert.embeddings.pos.weight.grad.norm() > 0  # BERT's positions are learned


def test_output_attentions_and_head_scale():
    cfg = BertConfig.tiny()
    tfx.set_seed(0)
    model = BertModel(cfg).eval()
    ids, tt, am = _batch(cfg)
    hidden, attn = model(ids, tt, am, output_attentions=True)
    assert len(attn) == cfg.n_layers and attn[0].shape == (3, cfg.n_heads, 11, 11)
    assert_close(attn[0][2, :, :, 3:], torch.zeros(cfg.n_heads, 11, 8))  # nobody attends to padding
    ones = torch.ones(cfg.n_layers, cfg.n_heads)
    assert_close(model(ids, tt, am, head_scale=ones), hidden)


def test_bad_input():
    model = BertModel(BertConfig.tiny())
    with pytest.raises(ValueError, match=r"\(B, L\), got \(7,\)"):
        model(torch.arange(7))
    with pytest.raises(ValueError, match=r"attention_mask: expected shape \(2, 7\), got \(2, 6\)"):
        model(torch.ones(2, 7, dtype=torch.long), attention_mask=torch.ones(2, 6))
    with pytest.raises(ValueError, match=r"129 exceeds the 128"):
        model(torch.ones(1, 129, dtype=torch.long))
    with pytest.raises(ValueError, match="BertModel or BertForMaskedLM"):
        from_huggingface(torch.nn.Linear(2, 2))
