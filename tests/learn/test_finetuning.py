"""Chapter 10's helpers: the review data (cleaning, hash split, encoding, clear errors), the
classifier head against Hugging Face's BertForSequenceClassification with weights copied across,
the freezing schemes (exactly the parameters they name train, and only those get gradients),
layer-wise learning rates, windows for long inputs, leave-one-out, and the paired interval."""

import math

import pytest
import torch

from tfx.core.example import SPECIAL_TOKENS
from tfx.learn import finetuning as ft
from tfx.learn import reviews
from tfx.learn.corpus import CharVocab
from tfx.model.bert import BertConfig, BertForMaskedLM, to_huggingface

VOCAB = CharVocab(SPECIAL_TOKENS + list("我喜欢吃苹果很好差不服务酒店"), {})


def tiny_body(seed=0):
    torch.manual_seed(seed)
    cfg = BertConfig(
        vocab_size=len(VOCAB), d_model=16, n_layers=3, n_heads=2, d_ff=32, max_len=12, dropout=0.0
    )
    return BertForMaskedLM(cfg)


# ---- data


def test_clean_drops_short_repeats_and_texts_in_both_files():
    pos = ["服务很好很好", "服务很好很好", "优点:", "酒店很好，喜欢", "两边都有的一句话"]
    neg = ["服务很差很差", "两边都有的一句话", "  服务很差很差  "]
    pairs, removed = reviews.clean(pos, neg)
    assert pairs == sorted([("服务很好很好", 1), ("酒店很好，喜欢", 1), ("服务很差很差", 0)])
    assert removed == {"too short": 1, "repeat": 2, "in both files": 2}


def test_split_is_decided_by_the_text_alone():
    texts = [f"第{i}条评论很好" for i in range(2000)]
    first = [reviews.split_of(t) for t in texts]
    assert first == [reviews.split_of(t) for t in reversed(texts)][::-1]
    share = {s: first.count(s) / len(first) for s in reviews.SPLITS}
    assert abs(share["train"] - 0.8) < 0.04 and abs(share["test"] - 0.1) < 0.03


def test_encode_truncates_pads_and_maps_unknown_characters():
    ids, mask = reviews.encode(["我喜欢吃苹果", "好 猫"], VOCAB, max_len=6)
    assert ids.shape == mask.shape == (2, 6)
    assert VOCAB.decode(ids[0]) == ["[CLS]", "我", "喜", "欢", "吃", "[SEP]"]
    assert VOCAB.decode(ids[1]) == ["[CLS]", "好", "[UNK]", "[SEP]", "[PAD]", "[PAD]"]
    assert mask[1].tolist() == [1, 1, 1, 1, 0, 0]


@pytest.mark.parametrize(
    "texts, error, words",
    [
        ("我喜欢", TypeError, "texts must be a list"),
        ([], ValueError, "at least one text"),
        (["好", ""], ValueError, "texts[1] has no characters"),
        (["好", 3], TypeError, "texts[1] must be a str"),
    ],
)
def test_encode_bad_input_names_the_argument(texts, error, words):
    with pytest.raises(error) as e:
        reviews.encode(texts, VOCAB)
    assert words in str(e.value)


def test_unknown_label_is_a_clear_error():
    with pytest.raises(ValueError, match=r"pairs\[1\] has label 2"):
        reviews.labels_of([("好", 1), ("差", 2)])
    with pytest.raises(ValueError, match=r"pairs\[0\] has label True"):
        reviews.labels_of([("好", True)])


def test_fetched_reviews_are_cleaned_and_balanced():
    data = reviews.load_reviews()
    sizes = {s: len(data.split(s)) for s in reviews.SPLITS}
    assert sizes["train"] > 10_000 and sizes["validation"] > 1_000 and sizes["test"] > 1_000
    texts = [t for s in reviews.SPLITS for t, _ in data.split(s)]
    assert len(texts) == len(set(texts))  # no text in two splits or two classes
    assert all(reviews.han_count(t) >= reviews.MIN_HAN for t in texts)
    for s in reviews.SPLITS:
        share = sum(label for _, label in data.split(s)) / sizes[s]
        assert 0.4 < share < 0.6
    with pytest.raises(ValueError, match="split must be one of"):
        data.split("dev")


# ---- the head


@pytest.mark.parametrize("pool", ft.POOLS)
def test_head_shapes_and_features(pool):
    model = ft.classifier_from(tiny_body(), pool=pool).eval()
    ids, mask = reviews.encode(["我喜欢吃苹果", "很差"], VOCAB, max_len=12)
    assert model(ids, mask).shape == (2, 2)
    f = model.features(ids, mask)
    h = model.bert(ids, attention_mask=mask)
    if pool == "cls":
        torch.testing.assert_close(f, h[:, 0])
    if pool == "mean":  # row 1's padding does not count
        torch.testing.assert_close(f[1], h[1, :4].mean(0))


def test_classifier_matches_hugging_face_with_copied_weights():
    transformers = pytest.importorskip("transformers")
    body = tiny_body()
    ours = ft.classifier_from(body, pool="pooler", seed=3).eval()
    hf_mlm = to_huggingface(body)
    hf = transformers.BertForSequenceClassification(
        hf_mlm.config.__class__(
            **{**hf_mlm.config.to_dict(), "num_labels": 2, "classifier_dropout": 0.0}
        )
    ).eval()
    hf.bert.load_state_dict(hf_mlm.bert.state_dict(), strict=False)
    with torch.no_grad():
        hf.bert.pooler.dense.weight.copy_(ours.bert.pooler.dense.weight)
        hf.bert.pooler.dense.bias.copy_(ours.bert.pooler.dense.bias)
        hf.classifier.weight.copy_(ours.classifier.weight)
        hf.classifier.bias.copy_(ours.classifier.bias)
    ids, mask = reviews.encode(["我喜欢吃苹果", "很差"], VOCAB, max_len=12)
    with torch.no_grad():
        torch.testing.assert_close(ours(ids, mask), hf(input_ids=ids, attention_mask=mask).logits)


def test_pretrained_copies_the_body_and_random_does_not():
    body = tiny_body()
    warm = ft.classifier_from(body, pretrained=True)
    cold = ft.classifier_from(body, pretrained=False)
    w = body.bert.layers[0].attn.qkv.weight
    assert torch.equal(warm.bert.layers[0].attn.qkv.weight, w)
    assert not torch.equal(cold.bert.layers[0].attn.qkv.weight, w)
    with pytest.raises(TypeError, match="body must be a tfx.model.bert.BertForMaskedLM"):
        ft.classifier_from(warm)
    with pytest.raises(ValueError, match="pool must be one of"):
        ft.classifier_from(body, pool="max")


# ---- freezing and learning rates


def grads_after_one_step(model):
    ids, mask = reviews.encode(["我喜欢吃苹果", "很差"], VOCAB, max_len=12)
    model.train()
    torch.nn.functional.cross_entropy(model(ids, mask), torch.tensor([1, 0])).backward()
    return {n for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("bottom, keep", [(0, False), (1, False), (2, True), (3, False), (3, True)])
def test_freeze_trains_exactly_what_it_names(bottom, keep):
    model = ft.classifier_from(tiny_body())
    trainable = ft.freeze(model, bottom, keep_layernorm=keep)
    assert grads_after_one_step(model) == set(trainable)
    for name in dict(model.named_parameters()):
        frozen_layer = any(name.startswith(f"bert.layers.{i}.") for i in range(bottom))
        frozen = frozen_layer or (bottom > 0 and name.startswith("bert.embeddings."))
        is_ln = ft._is_layernorm(model, name)
        assert (name in trainable) == (not frozen or (keep and is_ln)), name
    assert "classifier.weight" in trainable and "bert.pooler.dense.weight" in trainable


def test_freeze_refuses_more_layers_than_the_model_has():
    model = ft.classifier_from(tiny_body())
    with pytest.raises(ValueError, match="at most the model's 3 layers, got 4"):
        ft.freeze(model, 4)


def test_layer_decay_scales_each_depth():
    model = ft.classifier_from(tiny_body())
    groups = ft.param_groups(model, lr=1.0, layer_decay=0.5)
    by_depth = {}
    for g in groups:
        for p in g["params"]:
            name = next(n for n, q in model.named_parameters() if q is p)
            by_depth[name] = g["lr"]
    assert by_depth["classifier.weight"] == 1.0
    assert by_depth["bert.layers.2.attn.qkv.weight"] == 0.5
    assert by_depth["bert.layers.0.attn.qkv.weight"] == 0.125
    assert by_depth["bert.embeddings.tok.weight"] == 0.0625
    ft.freeze(model, 3)
    with pytest.raises(ValueError, match="layer_decay must be in"):
        ft.param_groups(model, lr=1.0, layer_decay=1.5)


def test_finetune_learns_a_toy_task_and_reports_its_gradients():
    body = tiny_body()
    train = [("很好很好", 1), ("服务好", 1), ("喜欢", 1), ("很差", 0), ("差差差", 0), ("不好差", 0)]
    cfg = ft.FinetuneConfig(steps=60, batch_size=6, lr=3e-3, warmup=5, eval_every=20, max_len=12)
    run = ft.finetune(body, VOCAB, train * 4, train, cfg)
    assert run.val[-1] == (60, 1.0)
    assert set(run.grad_norms) == set(run.trainable)
    assert run.loss[-1] < run.loss[0] / 2
    with pytest.raises(ValueError, match="train must be a non-empty list"):
        ft.finetune(body, VOCAB, [], train, cfg)
    with pytest.raises(TypeError, match="cfg must be a FinetuneConfig"):
        ft.finetune(body, VOCAB, train, train, {"steps": 3})
    with pytest.raises(ValueError, match="cfg.max_len 64 is more than the body's 12 positions"):
        ft.finetune(body, VOCAB, train, train, ft.FinetuneConfig(steps=3))
    with pytest.raises(ValueError, match="pool must be one of"):
        ft.FinetuneConfig(pool="max")
    with pytest.raises(ValueError, match="dtype must be 'float32' or 'float64'"):
        ft.FinetuneConfig(dtype="float16")


def test_float64_run_trains_in_float64_and_predicts():
    body = tiny_body()
    train = [("很好很好", 1), ("服务好", 1), ("很差", 0), ("差差差", 0)]
    cfg = ft.FinetuneConfig(
        steps=5, batch_size=4, warmup=1, eval_every=5, max_len=12, dtype="float64"
    )
    run = ft.finetune(body, VOCAB, train, train, cfg)
    assert all(p.dtype == torch.float64 for p in run.model.parameters())
    assert ft.predict_long(run.model, "很好", VOCAB, max_len=12).dtype == torch.float32
    assert "positive" in ft.sentiment_report(run.model, VOCAB, "很好")


def test_a_cached_run_is_the_run(tmp_path, monkeypatch):
    """cache=True saves the run under its key; the second call reads it: the same weights, loss,
    validation, gradient norms and frozen parameters, with no step trained. Another config, other
    texts or another body are other keys; a damaged file is trained anew."""
    monkeypatch.setattr(ft, "cache_dir", lambda: tmp_path)
    body = tiny_body()
    train = [("很好很好", 1), ("服务好", 1), ("很差", 0), ("差差差", 0)]
    cfg = ft.FinetuneConfig(steps=6, batch_size=4, warmup=1, eval_every=3, max_len=12, seed=1)
    first = ft.finetune(body, VOCAB, train, train, cfg, cache=True)
    (saved,) = tmp_path.glob("finetune-*.pt")
    monkeypatch.setattr(ft, "_train", lambda *a: pytest.fail("a cached run trained again"))
    again = ft.finetune(body, VOCAB, train, train, cfg, cache=True)
    for a, b in zip(first.model.state_dict().values(), again.model.state_dict().values()):
        assert torch.equal(a, b)
    assert (again.loss, again.val, again.grad_norms) == (first.loss, first.val, first.grad_norms)
    assert again.trainable == first.trainable and not again.model.training
    key = ft.run_key(body, VOCAB, train, train, cfg)
    assert saved.name == f"finetune-{key}.pt"
    others = {
        ft.run_key(body, VOCAB, train, train, ft.FinetuneConfig(**{**vars(cfg), "seed": 2})),
        ft.run_key(body, VOCAB, train[:3], train, cfg),
        ft.run_key(tiny_body(seed=1), VOCAB, train, train, cfg),
    }
    assert key not in others and len(others) == 3
    monkeypatch.undo()
    monkeypatch.setattr(ft, "cache_dir", lambda: tmp_path)
    saved.write_bytes(b"not a torch file")
    third = ft.finetune(body, VOCAB, train, train, cfg, cache=True)
    assert third.loss == first.loss
    with pytest.raises(TypeError, match="cache must be True or False, got 'yes'"):
        ft.finetune(body, VOCAB, train, train, cfg, cache="yes")


# ---- long inputs, attribution, statistics


def test_windows_cover_the_whole_text():
    text = "我喜欢吃苹果很好差不服务酒店" * 2  # 28 characters
    ids, mask = ft.windows(text, VOCAB, max_len=12, stride=5)  # width 10
    assert ids.shape == (5, 12)  # starts 0, 5, 10, 15 and 18 (the end)
    covered = set()
    for row in ids:
        chars = VOCAB.decode(row[1:-1])
        covered |= {c for c in chars if c != "[PAD]"}
    assert covered == set(text)
    one, _ = ft.windows("我喜欢", VOCAB, max_len=12)
    assert one.shape == (1, 5)
    with pytest.raises(ValueError, match="stride must be at most"):
        ft.windows(text, VOCAB, max_len=12, stride=11)
    with pytest.raises(ValueError, match="text must be a non-empty str"):
        ft.windows("", VOCAB)


def test_predict_long_averages_windows_and_matches_truncation_when_it_fits():
    model = ft.classifier_from(tiny_body()).eval()
    ids, mask = reviews.encode(["我喜欢吃"], VOCAB, max_len=12)
    torch.testing.assert_close(
        ft.predict_long(model, "我喜欢吃", VOCAB, max_len=12), ft.predict_proba(model, ids, mask)[0]
    )
    assert ft.predict_long(model, "我喜欢吃苹果很好差不服务酒店", VOCAB, max_len=8).shape == (2,)


def test_leave_one_out_masks_each_character_once():
    model = ft.classifier_from(tiny_body()).eval()
    p, drops = ft.leave_one_out(model, "我喜欢吃苹果", VOCAB, max_len=12)
    assert [c for c, _ in drops] == list("我喜欢吃苹果")
    assert math.isclose(float(p.sum()), 1.0, rel_tol=1e-6)
    assert any(d != 0 for _, d in drops)


def test_paired_interval():
    mean, half = ft.paired_interval([0.8, 0.82, 0.81], [0.7, 0.71, 0.73])
    assert math.isclose(mean, 0.0966666, rel_tol=1e-4)
    assert math.isclose(half, 4.303 * 0.0152753 / math.sqrt(3), rel_tol=1e-3)
    with pytest.raises(ValueError, match="paired lists of at least 2"):
        ft.paired_interval([0.8], [0.7])


def test_layer_states_end_at_the_body_output():
    body = tiny_body().eval()
    ids, mask = reviews.encode(["我喜欢吃苹果", "很差"], VOCAB, max_len=12)
    states = ft.layer_states(body.bert, ids, mask)
    assert len(states) == 4 and all(s.shape == (2, 8, 16) for s in states)
    torch.testing.assert_close(states[-1], body.bert(ids, attention_mask=mask))
    with pytest.raises(TypeError, match="bert must be a tfx.model.bert.BertModel"):
        ft.layer_states(body, ids, mask)


def test_mean_states_are_each_depths_mean_over_the_real_tokens():
    body = tiny_body().eval()
    texts = ["我喜欢吃苹果很好", "很差", "服务很好"]
    out = ft.mean_states(body.bert, texts, VOCAB, max_len=12, batch_size=2)
    assert out.shape == (4, 3, 16) and not body.training
    ids, mask = reviews.encode(texts, VOCAB, max_len=12)
    for depth, h in enumerate(ft.layer_states(body.bert, ids, mask)):  # (3, L, 16) each
        for i in range(3):
            torch.testing.assert_close(out[depth, i], h[i, : int(mask[i].sum())].mean(0))
    model = ft.classifier_from(body, pool="mean").eval()
    torch.testing.assert_close(out[-1], model.features(ids, mask))  # what pool="mean" reads
    torch.testing.assert_close(ft.mean_states(body.bert, texts, VOCAB), out)  # max_len: 12
    with pytest.raises(TypeError, match="bert must be a tfx.model.bert.BertModel"):
        ft.mean_states(body, texts, VOCAB)
    with pytest.raises(ValueError, match="max_len 13 is more than the body's 12 positions"):
        ft.mean_states(body.bert, texts, VOCAB, max_len=13)


def test_fit_probe_separates_separable_vectors_and_picks_c_on_validation():
    g = torch.Generator().manual_seed(0)
    y = torch.arange(60) % 2  # (60,)
    x = torch.randn(60, 5, generator=g)  # (60, 5)
    x[:, 2] += 3 * (2 * y - 1)  # one direction separates the classes
    clf, C, scores = ft.fit_probe(x[:40], y[:40], x[40:], y[40:], Cs=(10.0, 0.1, 1.0))
    assert list(scores) == [0.1, 1.0, 10.0] and scores[C] == max(scores.values()) == 1.0
    assert C == min(c for c, a in scores.items() if a == 1.0)  # ties: the smaller C
    assert clf.score(x[40:].numpy(), y[40:].numpy()) == 1.0
    with pytest.raises(ValueError, match="train_x must be \\(N, d\\) with N = len"):
        ft.fit_probe(x[:40], y[:30], x[40:], y[40:])
    with pytest.raises(ValueError, match="differ in width"):
        ft.fit_probe(x[:40], y[:40], x[40:, :3], y[40:])
    with pytest.raises(TypeError, match="Cs must be a non-empty list"):
        ft.fit_probe(x[:40], y[:40], x[40:], y[40:], Cs=())
    with pytest.raises(ValueError, match="each C must be a finite float > 0"):
        ft.fit_probe(x[:40], y[:40], x[40:], y[40:], Cs=(1.0, 0.0))


def test_sentiment_report_handles_empty_and_long_text():
    model = ft.classifier_from(tiny_body()).eval()
    assert "no characters to classify" in ft.sentiment_report(model, VOCAB, "   ")
    assert "no characters to classify" in ft.sentiment_report(model, VOCAB, "[MASK]")
    long = ft.sentiment_report(model, VOCAB, "我喜欢吃苹果很好" * 5, max_len=12)
    assert "40 characters: more than the model's 10" in long and "windows" in long
    short = ft.sentiment_report(model, VOCAB, "很好", max_len=12)
    assert short.splitlines()[0].startswith("negative 0.") and "what moves" in short


def test_bench_finetune_quick_writes_results(tmp_path, run_bench):
    """bench/finetune.py --quick runs every stage (schemes, adaptation, the Trainer, baselines, long
    inputs) at tiny size, on 300 validation and test texts; no accuracy threshold: 20 steps learn
    nothing."""
    import json

    path = run_bench("finetune.py", tmp_path, "--quick")
    res = json.loads(path.read_text())
    schemes = {r["scheme"] for r in res["rows"]}
    assert schemes == {"full", "linear probe", "transformers Trainer", "review-adapted body"}
    assert res["summary"]["linear probe"]["trainable_params"] == 258
    assert 0 < res["baselines"]["bag of characters"] < 1 and res["adaptation"]["steps"] == 20
    assert next(r for r in res["rows"] if r["scheme"] == "full")["long"]["n"] > 20
    strong = ("TF-IDF of character 1–3-grams", "NB-SVM on character 1–3-grams")
    assert set(res["baseline_details"]) == {f"{k}{n}" for k in strong for n in ("", ", 500 labels")}
    assert all(0 < res["baselines"][k] < 1 for k in res["baseline_details"])
    assert {p["body"] for p in res["probes"]} == {"book model", "random body"}
    assert all(len(p["depths"]) == 5 for p in res["probes"])  # embeddings and 4 layers
    assert not (tmp_path / ".finetune-tmp").exists()
    assert path.with_suffix(".md").read_text().startswith("# Fine-tuning the book model")


def test_predict_proba_refuses_mismatched_shapes():
    model = ft.classifier_from(tiny_body()).eval()
    ids, mask = reviews.encode(["我喜欢吃苹果", "很差"], VOCAB, max_len=12)
    with pytest.raises(ValueError, match=r"ids and mask must have the same shape, got \(2, 8\)"):
        ft.predict_proba(model, ids, mask[:, :5])
    with pytest.raises(ValueError, match="ids must be a \\(N, L\\) tensor"):
        ft.predict_proba(model, ids[0], mask[0])


def test_bench_finetune_core_schemes_are_sweep_schemes_and_print_without_adaptation():
    """--schemes core runs a subset of the sweep's schemes with the same settings, and its results
    (no Trainer, no review-adapted body) still make a markdown table."""
    from bench import finetune as fb  # tests/conftest.py puts the repository root on sys.path

    assert set(fb.CORE) <= set(fb.SCHEMES) and "full" in fb.CORE
    assert fb.SCHEMES["layer-wise decay 0.8"] == ({"layer_decay": 0.8}, None)
    sample = fb.low_data(list(range(900)), 500)
    assert sample == sorted(set(sample)) and len(sample) == 500 and sample[-1] < 900
    assert sample != list(range(500)) and sample == fb.low_data(list(range(900)), 500)
    assert fb.low_data(list(range(9)), None) == list(range(9))
    with pytest.raises(ValueError, match="n must be between 1 and the split's 9 texts, got 10"):
        fb.low_data(list(range(9)), 10)
    rows = [
        dict(scheme=s, seed=seed, test_accuracy=0.7 + 0.01 * seed, trainable_params=9, seconds=1)
        for s in ("full", "random init")
        for seed in (0, 1)
    ]
    results = dict(
        info={"date": "today", "machine": "here"},
        command="python bench/finetune.py --schemes core",
        workers=2,
        body="a body",
        max_len=128,
        steps=300,
        seeds=[0, 1],
        test_texts=10,
        rows=rows,
        baselines={"majority class": 0.5},
        summary=fb.summarise(rows),
    )
    md = fb.markdown(results)
    assert "| random init | 0.7050 (0.7000–0.7100) | +0.0000 ± 0.0000 |" in md
    assert "128 positions (texts up to 126 characters read whole)" in md
    assert "Review-adapted" not in md


def test_warmup_decay_rises_then_falls_to_zero():
    assert [ft.warmup_decay(s, 10, 4) for s in (1, 2, 4, 7, 10)] == [0.25, 0.5, 1.0, 0.5, 0.0]
    assert ft.warmup_decay(3, 10, 0) == 7 / 10  # no warm-up: decay from the first step


# ---- where fine-tuning put its changes (chapter 10's widget)


def nudged(model, part_of):
    """model with every parameter of the named body part moved by 0.1."""
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.startswith(part_of):
                p.add_(0.1)
    return model


def test_weight_change_measures_each_part_and_restore_parts_puts_it_back():
    body = tiny_body()
    model = nudged(ft.classifier_from(body), "bert.layers.1.")
    assert ft.body_parts(model) == ["embeddings", "layer 1", "layer 2", "layer 3"]
    moved = ft.weight_change(model, body)
    assert moved["layer 2"] > 0.1 and all(moved[k] == 0 for k in moved if k != "layer 2")
    back = ft.restore_parts(model, body, ["layer 2"])
    assert all(v == 0 for v in ft.weight_change(back, body).values())
    assert torch.equal(back.classifier.weight, model.classifier.weight)  # the head stays tuned
    assert moved == ft.weight_change(model, body)  # the model itself is not touched


def test_restore_parts_and_weight_change_refuse_bad_input():
    body = tiny_body()
    model = ft.classifier_from(body)
    with pytest.raises(ValueError, match=r"parts must be a list of names from \['embeddings'"):
        ft.restore_parts(model, body, ["layer 9"])
    with pytest.raises(ValueError, match="parts must be a list of names"):
        ft.restore_parts(model, body, "layer 1")
    with pytest.raises(TypeError, match="body must be a tfx.model.bert.BertForMaskedLM"):
        ft.weight_change(model, model)
    with pytest.raises(TypeError, match="model must be a tfx BertForSequenceClassification"):
        ft.body_parts(body)
    other = BertForMaskedLM(
        BertConfig(vocab_size=len(VOCAB), d_model=8, n_layers=3, n_heads=2, d_ff=16, max_len=12)
    )
    with pytest.raises(ValueError, match="body's embeddings does not have the shapes"):
        ft.weight_change(model, other)


def test_restored_report_prints_each_part_and_the_accuracy_it_costs():
    body = tiny_body()
    model = nudged(ft.classifier_from(body), "bert.").eval()
    check = [("我喜欢吃苹果", 1), ("很差", 0), ("服务很好", 1)]
    text = ft.restored_report(model, body, VOCAB, ["embeddings", "layer 3"], check)
    lines = text.splitlines()
    assert lines[1].startswith("embeddings") and lines[1].endswith("pre-trained (restored)")
    assert lines[2].startswith("layer 1") and lines[2].endswith("fine-tuned")
    assert lines[-1].startswith("accuracy on 3 test reviews: ")
    with pytest.raises(ValueError, match="check must be a non-empty list"):
        ft.restored_report(model, body, VOCAB, [], [])


def test_bench_finetune_keeps_each_run_and_resumes(tmp_path, monkeypatch):
    """An interrupted sweep resumes: one_run writes its row under run_key(job) and reads it back
    without training; another seed, step count or fine-tuning code is another key."""
    from bench import finetune as fb

    env = dict(quick=True, body="random", runs=str(tmp_path))
    job = ("full", {}, None, 0, 20, None, env)
    calls = []
    monkeypatch.setattr(fb, "_fine_tune", lambda j: calls.append(j) or {"test_accuracy": 0.5})
    assert fb.one_run(job) == {"test_accuracy": 0.5} and len(calls) == 1
    assert [p.name for p in tmp_path.iterdir()] == [f"{fb.run_key(job)}.json"]
    assert fb.one_run(job) == {"test_accuracy": 0.5} and len(calls) == 1  # kept, not re-run
    others = [job[:3] + (1,) + job[4:], job[:4] + (21,) + job[5:]]
    assert len({fb.run_key(j) for j in [job, *others]}) == 3
    monkeypatch.setattr(fb, "_sha256", lambda path: "changed code")
    assert fb.run_key(job) not in {p.stem for p in tmp_path.iterdir()}
