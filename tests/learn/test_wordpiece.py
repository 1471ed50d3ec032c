"""tfx.learn.wordpiece against Hugging Face's two BERT tokenisers (the Python one,
BertTokenizerLegacy, and the Rust `tokenizers` one, BertTokenizer) on bert-base-chinese's
vocabulary: real Chinese and English sentences, shop reviews, and generated text full of the awkward
characters (accents, controls, odd spaces, punctuation, kana, emoji)."""

import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers.models.bert import BertTokenizer, BertTokenizerLegacy

from tfx.learn.data import load_bert_chinese_vocab, load_sentiment_reviews, load_tatoeba
from tfx.learn.wordpiece import WordPiece


@pytest.fixture(scope="module")
def vocab():
    return load_bert_chinese_vocab()


@pytest.fixture(scope="module")
def refs(vocab, tmp_path_factory):
    path = Path(tmp_path_factory.mktemp("vocab")) / "vocab.txt"
    path.write_text("\n".join(vocab) + "\n", encoding="utf-8")
    return {
        "legacy": BertTokenizerLegacy(str(path), do_lower_case=True),
        "rust": BertTokenizer(vocab=str(path), do_lower_case=True),
    }


@pytest.fixture(scope="module")
def texts():
    rng = random.Random(0)
    pairs = rng.sample(load_tatoeba(), 300)
    pos, neg = load_sentiment_reviews()
    return [zh for zh, _ in pairs] + [en for _, en in pairs] + rng.sample(pos + neg, 200)


def test_the_running_example_is_one_token_per_character(vocab):
    wp = WordPiece(vocab)
    assert wp.tokenize("我喜欢吃苹果") == list("我喜欢吃苹果")
    ids, segments = wp.encode("我喜欢吃苹果")
    assert [vocab[i] for i in ids] == ["[CLS]", *"我喜欢吃苹果", "[SEP]"] and segments == [0] * 8


def test_pieces_are_greedy_longest_first_with_continuations(vocab):
    wp = WordPiece(vocab)
    assert wp.pieces("playing") == ["play", "##ing"]
    pieces = wp.pieces("transformers")
    assert len(pieces) > 1 and pieces[0] != "[UNK]"
    assert all(p.startswith("##") for p in pieces[1:])
    assert "".join(p.removeprefix("##") for p in pieces) == "transformers"
    toy = WordPiece(["[UNK]", "[CLS]", "[SEP]", "a", "ab", "##c", "##bc"])
    assert toy.pieces("abc") == ["ab", "##c"]  # longest prefix first, although a ##bc would also do
    assert toy.pieces("abd") == ["[UNK]"]  # one unspellable position: the whole word is [UNK]


def test_typed_special_tokens_stay_whole(vocab):
    wp = WordPiece(vocab)
    assert wp.tokenize("我喜欢吃[MASK]果") == ["我", "喜", "欢", "吃", "[MASK]", "果"]


def test_pair_segments(vocab):
    ids, segments = WordPiece(vocab).encode("我喜欢吃苹果", "苹果很甜")
    assert [vocab[i] for i in ids].count("[SEP]") == 2 and segments == [0] * 8 + [1] * 5


@pytest.mark.parametrize("impl", ["legacy", "rust"])
def test_matches_hugging_face_on_real_text(vocab, refs, texts, impl):
    wp = WordPiece(vocab)
    ref = refs[impl]
    differ = [t for t in texts if wp.encode(t)[0] != ref(t)["input_ids"]]
    assert not differ, f"{len(differ)} of {len(texts)} differ from {impl}, e.g. {differ[:3]}"
    assert any("##" in p for t in texts for p in wp.tokenize(t))  # the test saw continuations
    assert any(p == "[UNK]" for t in texts for p in wp.tokenize(t))  # and unknown words


ALPHABET = st.sampled_from(
    list("abcdefghij ABC playingtransformer ,.!?'-$^`")
    + list("我喜欢吃苹果。，！")
    + list("éÅñüß")
    + ["\t", "\n", "\u00a0", "\u3000", "\x00", "\x07", "\ufffd", "\u200b"]
    + list("カナ한글")
    + ["😀", "\u0301", "١٢"]
)


@settings(max_examples=300, deadline=None)
@given(text=st.lists(ALPHABET, max_size=40).map("".join))
def test_matches_the_python_reference_on_awkward_text(vocab, refs, text):
    assert WordPiece(vocab).encode(text)[0] == refs["legacy"](text)["input_ids"]


def test_cased_lookup_keeps_capitals(vocab):
    assert WordPiece(vocab, lowercase=False).words("Café") == ["Café"]
    assert WordPiece(vocab).words("Café") == ["cafe"]


def test_long_words_are_unknown_without_a_search(vocab):
    assert WordPiece(vocab, max_chars=5).tokenize("playing") == ["[UNK]"]


def test_bad_input_is_named():
    with pytest.raises(TypeError, match="vocab"):
        WordPiece({"[UNK]": 0})
    with pytest.raises(ValueError, match=r"vocab: has no \['\[CLS\]'"):
        WordPiece(["[UNK]", "[SEP]", "a"])
    with pytest.raises(ValueError, match="max_chars"):
        WordPiece(["[UNK]", "[CLS]", "[SEP]"], max_chars=0)
    with pytest.raises(TypeError, match="text"):
        WordPiece(["[UNK]", "[CLS]", "[SEP]"]).tokenize(b"bytes")
    with pytest.raises(TypeError, match="word"):
        WordPiece(["[UNK]", "[CLS]", "[SEP]"]).pieces(12)
    with pytest.raises(ValueError, match="word: expected at least one character"):
        WordPiece(["[UNK]", "[CLS]", "[SEP]"]).pieces("")
