"""tfx.model.bert against Hugging Face transformers, built from a config (no download), weights
copied across."""

import pytest
import torch
import transformers
from torch.testing import assert_close

import tfx
from tfx.model.bert import BertConfig, BertForMaskedLM, BertModel, from_huggingface

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


def _train_pair(cls, cfg: BertConfig):
    """A Hugging Face model with eager attention (its dropout on the weights is explicit, as
    tfx's) and its tfx twin, both in training mode."""
    tfx.set_seed(0)
    hf = cls(transformers.BertConfig(**cfg.to_hf_kwargs(), attn_implementation="eager"))
    ours = from_huggingface(hf)
    return hf.train(), ours.train()


@pytest.mark.parametrize("cls", [transformers.BertModel, transformers.BertForMaskedLM])
def test_training_mode_matches_huggingface(cls):
    """Dropout sits where BERT's does: after the embeddings, on the attention weights, and after
    each sub-layer before its residual, but not inside the FFN. Both models then draw the same
    masks in the same order from one seed, so outputs and gradients agree in training mode.

    The control rebuilds the FFNs with torch's inner dropout (ff_inner_dropout=True): one extra
    draw per layer moves every later mask, and the outputs part."""
    cfg = BertConfig.tiny(dropout=0.3, attn_dropout=0.2)
    hf, ours = _train_pair(cls, cfg)
    ids, tt, am = _batch(cfg)
    keep = am.bool()
    tfx.set_seed(7)
    out = hf(input_ids=ids, token_type_ids=tt, attention_mask=am)
    want = out.last_hidden_state if cls is transformers.BertModel else out.logits
    tfx.set_seed(7)
    got = ours(ids, tt, am)
    assert_close(got[keep], want[keep], atol=2e-5, rtol=1e-4)
    want[keep].pow(2).sum().backward()
    got[keep].pow(2).sum().backward()
    bert = ours if cls is transformers.BertModel else ours.bert
    hf_bert = hf if cls is transformers.BertModel else hf.bert
    assert_close(
        bert.layers[0].ff.fc1.weight.grad,
        hf_bert.encoder.layer[0].intermediate.dense.weight.grad,
        atol=1e-4,
        rtol=1e-3,
    )
    assert_close(
        bert.embeddings.tok.weight.grad,
        hf_bert.embeddings.word_embeddings.weight.grad,
        atol=1e-4,
        rtol=1e-3,
    )
    for layer in bert.layers:
        assert not layer.ff_inner_dropout
        layer.ff.drop.p = cfg.dropout  # torch's layout: dropout between activation and fc2
    tfx.set_seed(7)
    assert (ours(ids, tt, am)[keep] - want[keep]).abs().max() > 1e-2
    hf.eval(), ours.eval()
    with torch.no_grad():  # eval mode ignores every dropout, wherever it sits
        want = hf(input_ids=ids, token_type_ids=tt, attention_mask=am)
        want = want.last_hidden_state if cls is transformers.BertModel else want.logits
        assert_close(ours(ids, tt, am)[keep], want[keep], atol=5e-5, rtol=1e-4)


def _hf_bert(cfg=None, cls=transformers.BertModel, **hf_kwargs):
    tfx.set_seed(0)
    cfg = cfg or BertConfig.tiny(n_layers=2)
    return cls(transformers.BertConfig(**{**cfg.to_hf_kwargs(), **hf_kwargs}))


def _edit_config(**changes):
    def make():
        hf = _hf_bert()
        for k, v in changes.items():
            setattr(hf.config, k, v)  # the config no longer describes the modules
        return hf

    return make


def _untied_mlm():
    return _hf_bert(cls=transformers.BertForMaskedLM, tie_word_embeddings=False)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: _hf_bert(is_decoder=True), r"configured as a decoder .* bidirectional encoder"),
        (
            lambda: _hf_bert(is_decoder=True, add_cross_attention=True),
            r"configured as a decoder",
        ),
        (_edit_config(is_decoder=True), r"configured as a decoder"),
        (
            _edit_config(num_hidden_layers=3),
            r"hf_model has 2 encoder layers, but its config says num_hidden_layers=3",
        ),
        (
            _edit_config(num_attention_heads=2),
            r"layer 0 runs 4 attention heads, but its config says num_attention_heads=2",
        ),
        (
            _edit_config(intermediate_size=128),
            r"encoder.layer.0.intermediate.dense.weight is \(256, 64\), but its config gives "
            r"\(128, 64\)",
        ),
        (
            _edit_config(vocab_size=999),
            r"embeddings.word_embeddings.weight is \(1000, 64\), but its config gives \(999, 64\)",
        ),
        (_untied_mlm, r"MLM decoder has its own weight, not tied .*\(tie_word_embeddings=False\)"),
    ],
)
def test_from_huggingface_refuses_what_tfx_cannot_represent(make, message):
    hf = make()
    with pytest.raises(ValueError, match=message):
        from_huggingface(hf)


def test_a_decoder_really_differs():
    """The refusal above is not pedantry: is_decoder=True makes Hugging Face's BERT causal. In one
    layer the last token sees every key either way; the first sees only itself as a decoder."""
    one = BertConfig.tiny(n_layers=1)
    enc, dec = _hf_bert(one).eval(), _hf_bert(one, is_decoder=True).eval()
    dec.load_state_dict(enc.state_dict())
    ids = torch.tensor([[2, 7, 9, 4, 3]])
    with torch.no_grad():
        diff = enc(input_ids=ids).last_hidden_state - dec(input_ids=ids).last_hidden_state
    assert diff[0, -1].abs().max() < 1e-5 and diff[0, 0].abs().max() > 1e-3
