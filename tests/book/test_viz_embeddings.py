"""tfx.book.viz.embedding_diagram: BERT's input embedding drawn from the config, read back from the
figure, and clear errors on bad input."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from tfx.book.viz import drawn_labels, embedding_diagram, embedding_labels  # noqa: E402
from tfx.model.bert import BertConfig, BertEmbeddings  # noqa: E402


@pytest.mark.parametrize(
    "cfg,L,B",
    [
        (BertConfig.base(), 8, 1),
        (BertConfig.base(vocab_size=21128), 8, 2),
        (BertConfig.tiny(type_vocab_size=3, dropout=0.25, eps=1e-5), 5, 3),
    ],
)
def test_the_figure_shows_the_config_and_the_module_shapes(cfg, L, B):
    fig = embedding_diagram(cfg, L=L, B=B)
    labels = drawn_labels(fig)
    plt.close(fig)
    assert labels == embedding_labels(cfg, L=L, B=B)  # every box drawn, with its text
    d = cfg.d_model
    assert labels["token table"].endswith(f"{cfg.vocab_size:,} × {d}")
    assert labels["segment table"].endswith(f"{cfg.type_vocab_size} × {d}")
    assert labels["position table"].endswith(f"{cfg.max_len} × {d}")
    assert labels["norm"] == f"LayerNorm({d}, ε = {cfg.eps:g})"
    assert labels["dropout"] == f"Dropout(p = {cfg.dropout:g})"
    # the shapes printed are the shapes tfx's BertEmbeddings really produces
    emb = BertEmbeddings(cfg)
    ids = torch.zeros(B, L, dtype=torch.long)
    with torch.no_grad():
        tok, seg, pos, out = emb.tok(ids), emb.seg(ids), emb.pos(L), emb(ids, ids)
    assert labels["token output"] == str(tuple(tok.shape))
    assert labels["segment output"] == str(tuple(seg.shape))
    assert labels["position output"].startswith(str(tuple(pos.shape)))
    assert labels["output"].startswith(str(tuple(out.shape)))
    assert tuple(emb.tok.weight.shape) == (cfg.vocab_size, d)
    assert tuple(emb.pos.weight.shape) == (cfg.max_len, d)


def test_bad_input_is_named():
    with pytest.raises(TypeError, match="cfg must be a tfx.model.bert.BertConfig, got dict"):
        embedding_diagram({"d_model": 768})
    with pytest.raises(ValueError, match="L must be an int >= 1, got 0"):
        embedding_labels(BertConfig.tiny(), L=0)
    with pytest.raises(ValueError, match="B must be an int >= 1, got 1.5"):
        embedding_labels(BertConfig.tiny(), B=1.5)
    with pytest.raises(ValueError, match="at most max_len = 128"):
        embedding_labels(BertConfig.tiny(), L=129)


def test_extremes_draw():
    for L in (1, BertConfig.tiny().max_len):
        plt.close(embedding_diagram(BertConfig.tiny(), L=L, B=1))
