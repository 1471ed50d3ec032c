"""tfx.learn.mlm: the 80/10/10 corruption, its measured frequencies (also against Hugging Face's
collator), the loss over selected positions only, and the baselines."""

import math

import pytest
import torch

from tfx.learn import mlm
from tfx.model.bert import BertConfig, BertForMaskedLM

SPECIAL = [0, 1, 2, 3, 4]  # [PAD], [UNK], [CLS], [SEP], [MASK]
MASK, V = 4, 50


def batch(B=400, L=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, V, (B, L), generator=g)  # (B, L)
    ids[:, 0], ids[:, -1] = 2, 3
    ids[::3, 40:] = 0  # padding in a third of the rows
    return ids


def test_frequencies_within_tolerance():
    ids = batch()
    inputs, labels = mlm.mask_tokens(
        ids, SPECIAL, MASK, V, generator=torch.Generator().manual_seed(1)
    )
    f = mlm.masking_frequencies(ids, inputs, labels, SPECIAL, MASK)
    n = f["n_selected"]
    assert n > 3000
    se = math.sqrt(0.15 * 0.85 / (ids >= 5).sum().item())
    assert abs(f["selected"] - 0.15) < 4 * se
    # a random replacement equals the original 1 time in 45: "random" reads 0.1 · 44/45
    for key, p in (("mask", 0.8), ("random", 0.1 * 44 / 45), ("unchanged", 0.1 + 0.1 / 45)):
        assert abs(f[key] - p) < 4 * math.sqrt(p * (1 - p) / n), (key, f[key])


def test_specials_and_padding_never_selected_nor_drawn():
    ids = batch()
    inputs, labels = mlm.mask_tokens(
        ids, SPECIAL, MASK, V, generator=torch.Generator().manual_seed(2)
    )
    special = torch.isin(ids, torch.tensor(SPECIAL))
    assert (labels[special] == mlm.IGNORE).all()
    assert torch.equal(inputs[special], ids[special])
    changed = (labels != mlm.IGNORE) & (inputs != ids) & (inputs != MASK)
    assert changed.any() and (inputs[changed] >= 5).all()  # random ones are never special
    sel = labels != mlm.IGNORE
    assert torch.equal(labels[sel], ids[sel])


def test_same_generator_same_masks():
    ids = batch(B=8)
    a = mlm.mask_tokens(ids, SPECIAL, MASK, V, generator=torch.Generator().manual_seed(3))
    b = mlm.mask_tokens(ids, SPECIAL, MASK, V, generator=torch.Generator().manual_seed(3))
    assert all(torch.equal(x, y) for x, y in zip(a, b))


def test_bad_arguments():
    ids = batch(B=2)
    with pytest.raises(ValueError, match=r"\(B, L\) long"):
        mlm.mask_tokens(ids.float(), SPECIAL, MASK, V)
    with pytest.raises(ValueError, match="vocab_size"):
        mlm.mask_tokens(ids, SPECIAL, MASK, 10)
    with pytest.raises(ValueError, match="mask_id"):
        mlm.mask_tokens(ids, [0, 1, 2, 3], MASK, V)
    with pytest.raises(ValueError, match="mask \\+ random"):
        mlm.Masking(mask=0.8, random=0.3)
    with pytest.raises(ValueError, match="select"):
        mlm.Masking(select=1.5)
    with pytest.raises(TypeError, match="ids"):
        mlm.mask_tokens([[1, 2]], SPECIAL, MASK, V)


def test_against_hugging_face_collator(tmp_path):
    from transformers import BertTokenizer, DataCollatorForLanguageModeling

    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"c{i}" for i in range(5, V)]
    (tmp_path / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")
    tok = BertTokenizer(vocab=str(tmp_path / "vocab.txt"))
    assert len(tok) == V and tok.mask_token_id == MASK
    collator = DataCollatorForLanguageModeling(tok, mlm_probability=0.15, seed=0)
    ids = batch()
    hf = collator([{"input_ids": row.tolist()} for row in ids])
    theirs = mlm.masking_frequencies(ids, hf["input_ids"], hf["labels"], SPECIAL, MASK)
    inputs, labels = mlm.mask_tokens(
        ids, SPECIAL, MASK, V, generator=torch.Generator().manual_seed(0)
    )
    ours = mlm.masking_frequencies(ids, inputs, labels, SPECIAL, MASK)
    for key in ("selected", "mask", "random", "unchanged"):
        assert abs(ours[key] - theirs[key]) < 0.03, (key, ours[key], theirs[key])
    # Hugging Face selects neither padding nor [CLS]/[SEP] either
    assert (hf["labels"][torch.isin(ids, torch.tensor(SPECIAL))] == -100).all()


def test_loss_counts_selected_positions_only():
    torch.manual_seed(0)
    logits = torch.randn(2, 5, V)
    labels = torch.full((2, 5), mlm.IGNORE)
    labels[0, 1], labels[1, 3] = 7, 9
    loss = mlm.mlm_loss(logits, labels)
    want = torch.nn.functional.cross_entropy(logits[[0, 1], [1, 3]], torch.tensor([7, 9]))
    torch.testing.assert_close(loss, want)
    logits2 = logits.clone()
    logits2[0, 0] += 100  # an unselected position does not count
    torch.testing.assert_close(mlm.mlm_loss(logits2, labels), want)
    with pytest.raises(ValueError, match="do not match"):
        mlm.mlm_loss(logits, labels[:, :4])


def test_nothing_selected_gives_zero_not_nan():
    cfg = BertConfig.tiny(vocab_size=V, dropout=0.0, attn_dropout=0.0)
    model = BertForMaskedLM(cfg)
    ids = batch(B=2, L=8)
    labels = torch.full_like(ids, mlm.IGNORE)
    loss, n = mlm.mlm_forward(model, ids, labels)
    assert n == 0 and loss.item() == 0.0 and not torch.isnan(loss)
    loss.backward()  # still differentiable: all gradients are zero
    assert all(p.grad is None or not p.grad.isnan().any() for p in model.parameters())


def test_mlm_forward_matches_full_logits():
    torch.manual_seed(0)
    cfg = BertConfig.tiny(vocab_size=V, dropout=0.0, attn_dropout=0.0)
    model = BertForMaskedLM(cfg).eval()
    ids = batch(B=4, L=16)
    inputs, labels = mlm.mask_tokens(
        ids, SPECIAL, MASK, V, generator=torch.Generator().manual_seed(0)
    )
    loss, n = mlm.mlm_forward(model, inputs, labels)
    full = model(inputs, attention_mask=(inputs != 0).long())  # (B, L, V)
    torch.testing.assert_close(loss, mlm.mlm_loss(full, labels), rtol=1e-5, atol=1e-6)
    assert n == int((labels != mlm.IGNORE).sum())


def test_google_count_and_bernoulli():
    assert mlm.google_mask_count(8) == 1  # 6 characters + [CLS] + [SEP]: round(1.2)
    assert mlm.google_mask_count(200) == 20  # max_predictions_per_seq
    pmf = mlm.bernoulli_count_pmf(6)
    assert abs(sum(pmf) - 1) < 1e-12 and abs(pmf[0] - 0.85**6) < 1e-12
    assert 0.37 < pmf[0] < 0.39


def test_baselines_and_accuracy():
    train = torch.tensor([[2, 5, 5, 5, 6, 3, 0]])
    labels = torch.tensor([[-100, 5, 6, -100, 6, -100, -100]])
    b = mlm.baseline_accuracies(train, labels, SPECIAL)
    assert b["most frequent id"] == 5
    assert b["most frequent"] == pytest.approx(1 / 3)
    assert b["unigram"] == pytest.approx(0.75 * 1 / 3 + 0.25 * 2 / 3)
    with pytest.raises(ValueError, match="no scored"):
        mlm.baseline_accuracies(train, torch.full_like(labels, -100), SPECIAL)


def small_model_and_vocab():
    from tfx.learn.corpus import CharVocab

    vocab = CharVocab.build(["我喜欢吃苹果。", "你喜欢吃什么？"], min_count=1)
    torch.manual_seed(0)
    cfg = BertConfig.tiny(vocab_size=len(vocab), max_len=64, dropout=0.0, attn_dropout=0.0)
    return BertForMaskedLM(cfg).eval(), vocab


def test_zeroed_projections_restore_and_validate():
    model, _ = small_model_and_vocab()
    before = {n: p.clone() for n, p in model.named_parameters()}
    with mlm.zeroed_projections(model, [(1, "W_Q"), (0, "W_O")]):
        attn = model.bert.layers[1].attn
        assert (attn.qkv.weight[: attn.d_model] == 0).all()
        assert (attn.qkv.weight[attn.d_model :] != 0).any()
        assert (model.bert.layers[0].attn.out.weight == 0).all()
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())
    with pytest.raises(ValueError, match="projection"):
        with mlm.zeroed_projections(model, [(0, "W_X")]):
            pass
    with pytest.raises(ValueError, match="layer"):
        with mlm.zeroed_projections(model, [(5, "W_Q")]):
            pass
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())


def test_zeroed_biases_give_the_bias_free_layer():
    model, vocab = small_model_and_vocab()
    attn, d = model.bert.layers[1].attn, model.bert.layers[1].attn.d_model
    with torch.no_grad():
        for layer in model.bert.layers:  # BERT's init zeroes biases: give them values
            layer.attn.qkv.bias.normal_()
            layer.attn.out.bias.normal_()
    before = {n: p.clone() for n, p in model.named_parameters()}
    ids = torch.tensor([[2, *vocab.encode("我喜欢吃苹果"), 3]])  # (1, 8)
    names = mlm.PROJECTIONS[:3] + mlm.BIASES
    with mlm.zeroed_projections(model, [(1, n) for n in names]):
        assert (attn.qkv.weight[: 2 * d] == 0).all() and (attn.qkv.bias == 0).all()
        assert (attn.out.bias == 0).all() and (attn.out.weight != 0).any()
        out = {}
        hook = attn.register_forward_hook(lambda m, i, o: out.update(a=o[0]))
        with torch.no_grad():
            model(ids)
        hook.remove()
        assert (out["a"] == 0).all()  # no weights, no biases: the sub-layer adds exactly 0
    with mlm.zeroed_projections(model, [(0, "b_V")]):
        layer0 = model.bert.layers[0].attn
        assert (layer0.qkv.bias[2 * d :] == 0).all() and (layer0.qkv.bias[: 2 * d] != 0).any()
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())
    with pytest.raises(ValueError, match="projection"):
        with mlm.zeroed_projections(model, [(0, "b_X")]):
            pass


def test_attention_weights_are_rows_of_a_softmax():
    model, vocab = small_model_and_vocab()
    ids = torch.tensor([[2, *vocab.encode("我喜欢吃苹果"), 3, 0, 0]])  # (1, 10)
    ws = mlm.attention_weights(model, ids)
    assert len(ws) == 2 and ws[0].shape == (1, 4, 10, 10)
    torch.testing.assert_close(ws[0].sum(-1), torch.ones(1, 4, 10))
    assert (ws[0][..., -2:] == 0).all()  # no weight on [PAD] keys
    assert all(a.attn_impl == "naive" for a in [layer.attn for layer in model.bert.layers])


def test_mlm_report_messages_and_extremes():
    model, vocab = small_model_and_vocab()
    ok = mlm.mlm_report(model, vocab, "我喜欢吃[MASK]果")
    assert "position 5" in ok and ok.count("\n") == 5
    assert not any(t in ok for t in ("[CLS]", "[UNK]", "[PAD]", "[SEP]"))  # never predicted
    assert "was 苹" in mlm.mlm_report(model, vocab, "我喜欢吃苹果", position=5)
    assert "Type a sentence" in mlm.mlm_report(model, vocab, "")
    assert "Type a sentence" in mlm.mlm_report(model, vocab, "   ")
    assert "Too long" in mlm.mlm_report(model, vocab, "我" * 63)
    assert "Choose a position from 1 to 6" in mlm.mlm_report(model, vocab, "我喜欢吃苹果")
    assert "Choose a position" in mlm.mlm_report(model, vocab, "我喜欢吃苹果", position=99)
    assert "one [MASK]" in mlm.mlm_report(model, vocab, "[MASK]喜[MASK]")
    assert "unknown characters, read as [UNK]: ☃" in mlm.mlm_report(model, vocab, "我☃[MASK]")
    z = mlm.mlm_report(model, vocab, "我喜欢吃[MASK]果", zeroed=[(1, "W_Q"), (0, "W_O")])
    assert "zeroed: layer 1 W_O, layer 2 W_Q" in z
    # every projection of every layer zeroed at once still gives a report
    everything = [(i, p) for i in range(2) for p in mlm.PROJECTIONS]
    assert mlm.mlm_report(model, vocab, "[MASK]", zeroed=everything).count("\n") >= 5


def test_widget_is_a_thin_shell(capsys):
    from tfx.book.widgets import masked_lm_widget

    model, vocab = small_model_and_vocab()
    w = masked_lm_widget(model, vocab)

    def printed():  # outside a kernel the Output widget lets the text through to stdout
        return capsys.readouterr().out + "".join(o.get("text", "") for o in w.children[-1].outputs)

    assert "position 5" in printed()
    presets, (text, position) = w.children[0], w.children[1].children
    assert presets.description == "sentence" and len(presets.options) == 5
    boxes = [c for row in w.children[2:-1] for c in row.children]
    assert len(boxes) == 2 * 4 and boxes[2].description == "layer 1 W_V"
    boxes[2].value = True
    assert "zeroed: layer 1 W_V" in printed()
    for label in presets.options[1:-1]:  # every preset sentence has its one [MASK]
        presets.value = label
        assert f"(position {label.index('[MASK]') + 1})" in printed()
    presets.value = "your text"  # the text box, empty: a message, no traceback
    assert "Type a sentence" in printed()
    text.value, position.value = "我喜欢吃苹果", 5
    assert "was 苹" in printed()


def test_masked_predictions_agree_with_accuracy_and_never_propose_specials():
    torch.manual_seed(0)
    model = BertForMaskedLM(BertConfig.tiny(vocab_size=V, d_model=16, n_heads=2, d_ff=32))
    ids = batch(B=8, L=16)
    g = torch.Generator().manual_seed(3)
    inputs, labels = mlm.mask_tokens(ids, SPECIAL, MASK, V, generator=g)
    batches = list(zip(inputs.split(4), labels.split(4)))
    pred, target = mlm.masked_predictions(model.train(), batches, exclude=SPECIAL)
    assert model.training  # restored
    assert pred.shape == target.shape == (int((labels != -100).sum()),)
    assert (
        torch.equal(target, labels[labels != -100])
        and not torch.isin(pred, torch.tensor(SPECIAL)).any()
    )
    acc = mlm.masked_accuracy(model, batches, exclude=SPECIAL)
    assert acc == (pred == target).float().mean().item()
    with pytest.raises(ValueError, match="no position is scored"):
        mlm.masked_accuracy(model, [(inputs, torch.full_like(labels, -100))])
