"""Word segmentation as a transfer test (tfx.learn.segment): BMES tags and back, the word score on
hand-made cases, the split of long sentences and of the task, maximum matching and the tag counts
on a tiny dictionary, the tagger's shapes and its copy of the pre-trained body, the frozen probe,
clear errors, and bench/transfer.py end to end on a tiny random model."""

import math

import numpy as np
import pytest
import torch

from tfx.core.example import SPECIAL_TOKENS
from tfx.learn import segment as sg
from tfx.learn.corpus import CharVocab
from tfx.model.bert import BertConfig, BertForMaskedLM

VOCAB = CharVocab(SPECIAL_TOKENS + list("我喜欢吃苹果他们在北京工作，。"), {})
SENTENCES = [
    ["我", "喜欢", "吃", "苹果", "。"],
    ["他们", "在", "北京", "工作", "。"],
    ["我们", "喜欢", "北京", "，", "他", "喜欢", "苹果", "。"],
    ["他", "在", "工作", "。"],
]


def tiny_body(seed=0, max_len=16):
    torch.manual_seed(seed)
    cfg = BertConfig(
        vocab_size=len(VOCAB), d_model=16, n_layers=2, n_heads=2, d_ff=32, max_len=max_len
    )
    return BertForMaskedLM(cfg).eval()


# ---- tags and scores


def test_bmes_and_words_from_invert_each_other():
    words = ["我", "喜欢", "吃", "北京烤鸭", "。"]
    tags = sg.bmes(words)
    assert tags == "SBESBMMES"
    assert sg.words_from("".join(words), tags) == words


def test_words_from_reads_an_invalid_sequence_leniently():
    # B then S, and an M with no B: a word ends after E or S and before B or S, nowhere else
    assert sg.words_from("我喜欢吃", "BSMM") == ["我", "喜", "欢吃"]


def test_score_perfect_and_one_split_wrong():
    gold = [["我", "喜欢", "吃", "苹果"]]
    perfect = sg.score(gold, gold)
    assert perfect["precision"] == perfect["recall"] == perfect["f1"] == 1.0
    assert perfect["tag_accuracy"] == 1.0 and perfect["words"] == 4 and perfect["chars"] == 6
    # 喜欢 split in two: 3 of 5 predicted words right, 3 of 4 gold words found, 2 of 6 tags wrong
    wrong = sg.score(gold, [["我", "喜", "欢", "吃", "苹果"]], dictionary={"我", "吃"})
    assert wrong["precision"] == pytest.approx(3 / 5) and wrong["recall"] == pytest.approx(3 / 4)
    assert wrong["f1"] == pytest.approx(2 * 0.6 * 0.75 / 1.35)
    assert wrong["tag_accuracy"] == pytest.approx(4 / 6)
    assert wrong["oov_words"] == 2 and wrong["oov_recall"] == pytest.approx(1 / 2)  # 苹果 found


def test_score_reads_a_taggers_own_tags():
    # B B E reads as 我 | 喜欢, every word right, but the first tag was wrong as emitted
    raw = sg.score([["我", "喜欢"]], ["BBE"])
    assert raw["f1"] == 1.0 and raw["tag_accuracy"] == pytest.approx(2 / 3)


def test_split_long_cuts_after_punctuation_then_at_a_word():
    sentence = [("我们", "r"), ("喜欢", "v"), ("，", "w"), ("北京", "ns"), ("。", "w")]
    assert sg.split_long(sentence, 6) == [["我们", "喜欢", "，"], ["北京", "。"]]
    assert sg.split_long(["我们", "喜欢", "北京"], 4) == [["我们", "喜欢"], ["北京"]]
    assert sg.split_long(sentence, 100) == [["我们", "喜欢", "，", "北京", "。"]]


def test_task_split_is_by_order_and_budgets_are_nested():
    held = [[(f"词{i}", "n"), ("。", "w")] for i in range(30)]
    data = sg.task_split(held, max_chars=10)
    assert (len(data.train), len(data.validation), len(data.test)) == (18, 2, 10)
    assert data.test[0] == ["词20", "。"] and data.validation[-1] == ["词19", "。"]
    small, large = data.budget(5), data.budget(12)
    assert small == large[:5] and len(set(map(tuple, large))) == 12
    assert data.budget(None) == data.train


def test_max_match_forward_backward_and_bidirectional():
    words = {"研究", "研究生", "生命", "起源"}
    text = "研究生命起源"
    assert sg.max_match(text, words) == ["研究生", "命", "起源"]
    assert sg.max_match(text, words, backward=True) == ["研究", "生命", "起源"]
    # the same number of words, fewer single characters: backward
    assert sg.bidirectional_max_match(text, words) == ["研究", "生命", "起源"]
    assert sg.max_match("研究猫", words) == ["研究", "猫"]


def test_char_tag_counts_read_the_neighbours_and_back_off():
    counts = sg.CharTagCounts(SENTENCES)
    assert counts.segment("我喜欢吃苹果。") == ["我", "喜欢", "吃", "苹果", "。"]
    assert len(counts.tags("猫狗")) == 2  # unseen characters get a tag all the same


# ---- the tagger


def test_encode_tagged_labels_only_the_characters():
    ids, mask, labels = sg.encode_tagged(SENTENCES[:2], VOCAB, max_len=16)
    assert ids.shape == mask.shape == labels.shape == (2, 10)  # the longest: 8 characters + 2
    # [CLS] S B E S B E S [SEP] [PAD]
    assert labels[0].tolist() == [-100, 3, 0, 2, 3, 0, 2, 3, -100, -100]
    assert mask[0].tolist() == [1] * 9 + [0]


def test_tagger_shapes_and_weights_copied_from_the_body():
    body = tiny_body()
    model = sg.tagger_from(body, seed=3)
    ids, mask, _ = sg.encode_tagged(SENTENCES, VOCAB, max_len=16)
    assert model(ids, mask).shape == (len(SENTENCES), ids.shape[1], 4)
    for name, t in body.bert.state_dict().items():
        assert torch.equal(model.bert.state_dict()[name], t), name
    control = sg.tagger_from(body, seed=3, pretrained=False)
    assert not torch.equal(control.bert.embeddings.tok.weight, body.bert.embeddings.tok.weight)
    # the same seed draws the same head, whatever the body's starting point
    assert torch.equal(control.classifier.weight, model.classifier.weight)


def test_finetune_tagger_learns_the_tiny_corpus():
    cfg = sg.TaggerConfig(steps=60, batch_size=4, lr=3e-3, warmup=5, dropout=0.0)
    run = sg.finetune_tagger(tiny_body(), VOCAB, SENTENCES, cfg)
    assert len(run.loss) == 60 and run.loss[-1] < run.loss[0] / 2
    assert not run.model.training
    assert sg.score(SENTENCES, sg.segment(run.model, VOCAB, SENTENCES))["tag_accuracy"] > 0.9


def test_finetune_tagger_freezes_and_decays_as_configured():
    """freeze_bottom=1 leaves the embeddings and layer 1 as the body had them while the rest
    trains; layer_decay gives the optimizer's groups rates a factor apart by depth."""
    body = tiny_body()
    cfg = sg.TaggerConfig(steps=5, batch_size=4, warmup=1, freeze_bottom=1)
    run = sg.finetune_tagger(body, VOCAB, SENTENCES, cfg)
    after = dict(run.model.bert.named_parameters())
    for name, p in body.bert.named_parameters():
        frozen = name.startswith(("embeddings.", "layers.0."))
        assert torch.equal(after[name], p) == frozen, name
    groups = sg.param_groups(sg.tagger_from(body), 1e-3, layer_decay=0.5)
    assert sorted({g["lr"] for g in groups}) == [1e-3 * 0.5**k for k in (3, 2, 1, 0)]


def test_probe_reads_a_frozen_body_in_eval_mode():
    body = tiny_body()
    body.train()  # dropout on: the probe must read the body without it
    before = {k: v.clone() for k, v in body.state_dict().items()}
    x = sg.char_features(body, VOCAB, SENTENCES, layers=(0, 2))
    assert x.shape == (sum(len("".join(s)) for s in SENTENCES), 32)
    assert np.array_equal(x, sg.char_features(body, VOCAB, SENTENCES, layers=(0, 2)))
    result = sg.probe(body, VOCAB, SENTENCES, SENTENCES[:2], test=SENTENCES[2:])
    assert result["C"] == 1.0 and 0 <= result["test"]["tag_accuracy"] <= 1
    assert result["validation"]["words"] == 10 and result["test"]["oov_words"] == 0
    assert body.training and all(p.grad is None for p in body.parameters())
    assert all(torch.equal(before[k], v) for k, v in body.state_dict().items())


# ---- bad input


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda: sg.bmes("我喜欢"), TypeError, "words must be a list of str"),
        (lambda: sg.bmes(["我", ""]), ValueError, "words[1] must be a non-empty str"),
        (lambda: sg.words_from("我喜", "S"), ValueError, "2 chars, got 1"),
        (lambda: sg.words_from("我喜", "SX"), ValueError, "tags must be letters of 'BMES'"),
        (lambda: sg.score([["我"]], [["我"], ["他"]]), ValueError, "got 1 and 2"),
        (lambda: sg.score([["我喜"]], [["我", "吃"]]), ValueError, "must segment the text"),
        (lambda: sg.split_long(["我们"], 1), ValueError, "longer than max_chars=1"),
        (lambda: sg.encode_tagged(SENTENCES, VOCAB, 6), ValueError, "at most max_len - 2 = 4"),
        (lambda: sg.max_match("我", ["我"]), TypeError, "dictionary must be a set"),
        (lambda: sg.tagger_from(tiny_body().bert), TypeError, "body must be a tfx"),
        (lambda: sg.TaggerConfig(steps=0), ValueError, "steps must be an int >= 1"),
        (lambda: sg.TaggerConfig(lr=-1.0), ValueError, "lr must be a finite float > 0"),
        (lambda: sg.TaggerConfig(layer_decay=0.0), ValueError, "layer_decay must be in (0, 1]"),
        (lambda: sg.TaggerConfig(freeze_bottom=-1), ValueError, "freeze_bottom must be an int"),
        (lambda: sg.char_features(tiny_body(), VOCAB, SENTENCES, 2), TypeError, "layers must"),
        (lambda: sg.char_features(tiny_body(), VOCAB, SENTENCES, (3,)), ValueError, "in 0..2"),
        (
            lambda: sg.fit_tag_probe(np.zeros((3, 4)), SENTENCES, None, SENTENCES),
            ValueError,
            "one row per character (33), got (3, 4)",
        ),
    ],
)
def test_bad_input_raises_clearly(call, error, words):
    with pytest.raises(error) as info:
        call()
    assert words in str(info.value)


# ---- bench/transfer.py


def test_bench_transfer_runs_on_a_tiny_random_model():
    from bench import transfer  # tests/conftest.py puts the repository root on sys.path
    from tfx.inspect.perf import run_info

    held = [[(w, "w" if w in "，。" else "n") for w in s] for s in SENTENCES * 6]
    data = sg.task_split(held, max_chars=14)
    body, twin = tiny_body(), tiny_body(seed=1)
    measured = transfer.measure(body, twin, VOCAB, data, {"苹果", "北京"}, quick=True, workers=1)
    rows, probes, base = measured
    assert [(r["body"], r["steps"]) for r in rows] == [
        ("pre-trained", transfer.QUICK_STEPS),
        ("random init", transfer.QUICK_STEPS),
    ]
    assert all(0 <= r["test"]["f1"] <= 1 for r in rows)
    assert [p["body"] for p in probes] == ["pre-trained", "random twin"]
    assert probes[0]["chosen"] in probes[0]["validation"] and "all" in probes[0]["test"]
    (methods,) = base["baselines"].values()
    assert len(methods) == 5 and all(not math.isnan(m["f1"]) for m in methods.values())
    results = dict(info=run_info(), command="test", workers=1, seconds=0.0)
    md = transfer.markdown({**results, **transfer.results_of(data, *measured, tune=False)})
    assert f"| all | pre-trained | {transfer.QUICK_STEPS} | 1 |" in md and "Baselines" in md
    tuned = transfer.measure(body, twin, VOCAB, data, set(), quick=True, tune=True, workers=1)
    assert tuned[1:] == ([], None) and "test" not in tuned[0][0]
    md = transfer.markdown({**results, **transfer.results_of(data, *tuned, tune=True)})
    assert "Validation check" in md


def test_bench_transfer_pairs_seeds_of_the_two_bodies():
    from bench import transfer

    def row(body, seed, f1):
        test = dict(f1=f1, tag_accuracy=f1 + 0.1, oov_recall=0.5)
        return dict(body=body, budget=200, seed=seed, seconds=1.0, test=test)

    rows = [row("pre-trained", s, 0.8 + s / 100) for s in range(3)]
    rows += [row("random init", s, 0.6 + s / 50) for s in range(3)]
    summary = transfer.summarise(rows)["200"]
    diff = summary["pre-trained minus random init"]
    assert diff["f1"]["mean"] == pytest.approx(0.19) and diff["f1"]["n"] == 3
    assert diff["tag_accuracy"]["half_width_95"] == pytest.approx(diff["f1"]["half_width_95"])
    assert summary["random init"]["f1"]["max"] == pytest.approx(0.64)
