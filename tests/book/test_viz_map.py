"""tfx.book.viz.bert_map, the map at the top of each chapter on the site: drawn from a
configuration, with the named parts lit and the rest grey."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from tfx.book.viz import MAP_PARTS, bert_map, lit_parts  # noqa: E402
from tfx.model.bert import BertConfig  # noqa: E402


def _labels(fig) -> str:
    return " | ".join(t.get_text() for t in fig.axes[0].texts)


@pytest.mark.parametrize("part", MAP_PARTS)
def test_one_part_lit(part):
    fig = bert_map(BertConfig.base(), part)
    assert lit_parts(fig) == {part}
    plt.close(fig)


def test_groups_light_their_parts():
    fig = bert_map(BertConfig.base(), "encoder")
    assert lit_parts(fig) == {"attention", "ffn", "norm"}
    plt.close(fig)
    fig = bert_map(BertConfig.base(), "all")
    assert lit_parts(fig) == set(MAP_PARTS)
    plt.close(fig)
    fig = bert_map(BertConfig.base(), ["mlm", "classifier"])
    assert lit_parts(fig) == {"mlm", "classifier"}
    plt.close(fig)


def test_sizes_come_from_the_config():
    base = _labels(bert_map(BertConfig.base(), "all"))
    assert "30,522 × 768" in base and "12 heads × d_k 64" in base and "768 → 3072 → 768" in base
    assert "× 12" in base and "L ≤ 512" in base
    tiny = BertConfig(vocab_size=100, d_model=32, n_layers=3, n_heads=4, d_ff=64, max_len=16)
    text = _labels(bert_map(tiny, "attention"))
    assert "100 × 32" in text and "4 heads × d_k 8" in text and "× 3" in text and "L ≤ 16" in text
    plt.close("all")


def test_an_unknown_part_is_refused():
    with pytest.raises(ValueError, match="here: each part must be one of"):
        bert_map(BertConfig.base(), "decoder")


def test_bad_arguments_are_named():
    with pytest.raises(TypeError, match="cfg must be a tfx.model.bert.BertConfig, got dict"):
        bert_map({"d_model": 768}, "attention")
    with pytest.raises(TypeError, match="here must be a part name or a list of them, got int"):
        bert_map(BertConfig.base(), 3)


def test_saved_map_is_the_same_bytes_every_time_and_says_what_it_draws(tmp_path):
    from tfx.book.viz import save_bert_map

    first, second = tmp_path / "a.svg", tmp_path / "b.svg"
    words = save_bert_map("attention", first)
    assert save_bert_map("attention", second) == words
    assert first.read_bytes() == second.read_bytes() and first.read_bytes().startswith(b"<?xml")
    assert "12 encoder layers" in words  # BERT-base's, by default
    assert "2 encoder layers" in save_bert_map("ffn", tmp_path / "c.svg", BertConfig.tiny())
    with pytest.raises(ValueError, match="here"):
        save_bert_map("decoder", tmp_path / "d.svg")
