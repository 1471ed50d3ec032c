"""tfx.learn.corpus: Tatoeba's Chinese sentences deduplicated, split without leaks, a character
vocabulary from the training split, packing, and clear errors when the file is missing or
damaged."""

import shutil

import pytest
import torch

from tfx.core.example import SPECIAL_TOKENS
from tfx.learn import corpus
from tfx.learn.data import CorpusMissingError


@pytest.fixture(scope="module")
def data():
    return corpus.load_mlm_data()


def test_sentences_are_deduplicated(data):
    sentences = corpus.chinese_sentences()
    assert len(sentences) == len(set(sentences)) == 50_504  # from 56,578 pairs, simplified
    assert len(data.train_text) + len(data.held_out_text) == len(sentences)


def test_simplified_by_default():
    """Traditional characters are converted before deduplicating: a sentence written in both
    scripts counts once, and the vocabulary has 气 but not 氣."""
    simplified = corpus.chinese_sentences()
    written = corpus.chinese_sentences(script="as written")
    assert len(simplified) < len(written)
    assert any("氣" in s for s in written) and not any("氣" in s for s in simplified)
    assert corpus.to_simplified(["今天天氣很好。", "头发", "頭髮"]) == [
        "今天天气很好。",
        "头发",
        "头发",
    ]
    with pytest.raises(ValueError, match="script must be one of"):
        corpus.chinese_sentences(script="traditional")


def test_split_does_not_leak_and_ignores_order(data):
    assert not set(data.train_text) & set(data.held_out_text)
    assert 0.04 < len(data.held_out_text) / len(corpus.chinese_sentences()) < 0.06
    train, held = corpus.split(list(reversed(data.train_text + data.held_out_text)))
    assert set(held) == set(data.held_out_text)
    with pytest.raises(ValueError, match="deduplicated"):
        corpus.split(["我", "我"])
    with pytest.raises(ValueError, match="held_out"):
        corpus.split(["我"], held_out=1.5)


def test_vocabulary_from_training_split_with_cut_off(data):
    v = data.vocab
    assert v.itos[: len(SPECIAL_TOKENS)] == SPECIAL_TOKENS and v["[PAD]"] == 0
    assert all(n >= 3 for n in v.counts.values())
    counts = [v.counts[c] for c in v.itos[len(SPECIAL_TOKENS) :]]
    assert counts == sorted(counts, reverse=True)
    # traditional characters were converted: one token for 们, none for 們
    assert "们" in v.stoi and "們" not in v.stoi
    # a character only in the held-out split is [UNK]
    train_chars = {c for s in data.train_text for c in corpus.chars(s)}
    only_held = {c for s in data.held_out_text for c in corpus.chars(s)} - train_chars
    assert only_held and all(c not in v.stoi for c in only_held)
    assert v.encode("我喜欢吃[MASK]果") == [v[c] for c in "我喜欢吃"] + [v["[MASK]"], v["果"]]
    assert v.encode("我 \u2603") == [v["我"], v["[UNK]"]]
    with pytest.raises(TypeError, match="min_count"):
        corpus.CharVocab.build(["我"], min_count=1.5)


def test_pack():
    rows = corpus.pack([[10, 11, 12], [13], [14, 15, 16, 17, 18, 19, 20]], 8, 2, 3)
    assert rows.tolist() == [
        [2, 10, 11, 12, 3, 13, 3, 0],
        [2, 14, 15, 16, 17, 18, 19, 3],  # cut to max_len - 2, then [SEP]
    ]
    with pytest.raises(ValueError, match="at least one"):
        corpus.pack([], 8, 2, 3)
    with pytest.raises(ValueError, match="max_len"):
        corpus.pack([[1]], 2, 2, 3)


def test_packed_data(data):
    L = data.train.size(1)
    assert L == 64 and data.train.dtype == torch.long
    assert (data.train[:, 0] == 2).all()  # every row starts with [CLS]
    real = (data.train != 0).float().mean().item()
    assert real > 0.85  # packing leaves few pads
    again = corpus.load_mlm_data()
    assert again.checksum == data.checksum and torch.equal(again.train, data.train)


def test_missing_file_says_make_setup(tmp_path, monkeypatch):
    monkeypatch.setenv("TFX_DATA_DIR", str(tmp_path))
    with pytest.raises(CorpusMissingError, match="make setup"):
        corpus.chinese_sentences()
    with pytest.raises(CorpusMissingError, match="make setup"):
        corpus.load_mlm_data()


def test_damaged_file_says_make_setup(tmp_path, monkeypatch):
    src = corpus.tatoeba_path()
    monkeypatch.setenv("TFX_DATA_DIR", str(tmp_path))
    shutil.copy(src, tmp_path / "tatoeba.tsv")
    with open(tmp_path / "tatoeba.tsv", "ab") as f:
        f.write(b"x")
    with pytest.raises(corpus.CorpusCorruptError, match="sha256.*make setup"):
        corpus.chinese_sentences()
    (tmp_path / "tatoeba.tsv").write_text("no tabs here\n", encoding="utf-8")
    with pytest.raises(corpus.CorpusCorruptError, match="no tab-separated.*make setup"):
        corpus.chinese_sentences(check=False)


def test_pad_counts_chinese_characters_as_two_columns():
    """Tables of Chinese text line up in a monospace font only when a wide character counts as two
    columns (site review F17): pad fills to the same display width whatever the script."""
    from tfx.learn.corpus import columns, pad

    assert columns("我喜欢吃[MASK]果。") == 2 * 6 + 6 and columns("abc") == 3
    assert columns("你叫什么名？") == 12  # the full-width question mark too
    rows = [pad(t, 20) + "|" for t in ("我喜欢吃[MASK]果。", "[MASK]们是学生。", "abc")]
    assert len({columns(r) for r in rows}) == 1
    assert pad("苹果", 6, ">") == "  苹果" and pad("苹果苹果", 3) == "苹果苹果"
    with pytest.raises(ValueError, match="align"):
        pad("x", 3, "^")
    with pytest.raises(ValueError, match="width"):
        pad("x", -1)
    with pytest.raises(TypeError, match="text must be a str"):
        columns(3)


def test_news_sentences_cut_after_sentence_ends():
    words = [[("他", "r"), ("来", "v"), ("。", "w"), ("好", "a"), ("！", "w"), ("再见", "v")]]
    assert corpus.news_sentences(words) == [
        [("他", "r"), ("来", "v"), ("。", "w")],
        [("好", "a"), ("！", "w")],
        [("再见", "v")],
    ]
    assert corpus.news_sentences([]) == []


@pytest.fixture(scope="module")
def news():
    return corpus.news_split()


def test_news_split_holds_out_the_end_of_the_month(news):
    """The held-out side is the paragraphs from NEWS_HELD_OUT_FROM on, less every sentence that
    also occurs in the training paragraphs; nothing of the gap is on either side."""
    from tfx.learn.data import load_peoples_daily

    train, held = news
    text = lambda s: "".join(w for w, _ in s)  # noqa: E731
    paragraphs = load_peoples_daily()
    assert len(paragraphs) == 19484
    expected_held = corpus.news_sentences(paragraphs[corpus.NEWS_HELD_OUT_FROM :])
    train_text = {text(s) for s in train}
    assert len(train_text) == len(train)  # deduplicated
    assert not train_text & {text(s) for s in held}  # no held-out sentence was read in training
    assert held == [s for s in expected_held if text(s) not in train_text]
    assert 0.9 * len(expected_held) < len(held) < len(expected_held)
    # the training side is the paragraphs before the gap, deduplicated in order
    before_gap = corpus.news_sentences(paragraphs[: corpus.NEWS_HELD_OUT_FROM - corpus.NEWS_GAP])
    assert [text(s) for s in train] == list(dict.fromkeys(text(s) for s in before_gap))
    assert sum(len(text(s)) for s in train) > 1_500_000  # about three times Tatoeba's text


def test_pretraining_data_parts(news):
    d = corpus.load_pretraining_data()
    assert d.train.size(1) == d.held_out.size(1) == 128
    (t0, t1), (n0, n1) = d.parts["tatoeba"], d.parts["news"]
    assert t0 == 0 and t1 == n0 and n1 == len(d.held_out)
    (a0, a1), (b0, b1) = d.train_parts["tatoeba"], d.train_parts["news"]
    assert a0 == 0 and a1 == b0 and b1 == len(d.train)
    # the news rows hold the held-out news sentences in order, packed
    first = "".join(w for w, _ in news[1][0])
    row = d.vocab.decode(d.held_out[n0][1 : 1 + len(first)])
    assert "".join(t if t != "[UNK]" else "?" for t in row) == "".join(
        c if c in d.vocab.stoi else "?" for c in first
    )
    tatoeba = corpus.load_mlm_data()
    assert set(d.held_out_text) >= set(tatoeba.held_out_text)  # the same Tatoeba split
    assert set(tatoeba.vocab.itos) - set(d.vocab.itos) == set()  # a superset of chapter 07's
