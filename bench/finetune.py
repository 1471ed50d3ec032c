"""Chapter 10's sweep: the book model fine-tuned on the reviews under each scheme, over seeds.

  python bench/finetune.py           every scheme × 3 seeds: bench/results/finetune-<date>.*
  python bench/finetune.py --quick   two schemes, one seed, 20 steps, evaluated once on the first
                                     QUICK_EVAL texts of each split: checks that it runs
  python bench/finetune.py --out DIR

Every run has the same steps, batch, schedule and data order for a given seed, so two schemes
with one seed differ only in the scheme (paired). Accuracy is on the test split, which no choice
was made on. Two worker processes of one torch thread each: the runs are small, and two at once
use this 2-core machine fully. Also measured: majority class and bag-of-characters logistic
regression on the same split, transformers' Trainer on the exported book model, and, for the full
fine-tuning runs, truncation against sliding windows on the test texts longer than the model's
64 positions. Chapter 10 reads the committed results file.
"""

import shutil
import statistics
import sys
import time
from multiprocessing import get_context
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing tfx

from bench._common import arguments, save  # noqa: E402
from tfx.inspect.perf import run_info  # noqa: E402

SEEDS = [0, 1, 2]
STEPS = 300
LOW_DATA = 500  # labelled texts in the low-data runs
# name -> (FinetuneConfig overrides, training texts or None for all); the first is the reference
SCHEMES = {
    "full": ({}, None),
    "random init": ({"pretrained": False}, None),
    "[CLS], no pooler": ({"pool": "cls"}, None),
    "mean pooling": ({"pool": "mean"}, None),
    "freeze bottom 1": ({"freeze_bottom": 1}, None),
    "freeze bottom 2": ({"freeze_bottom": 2}, None),
    "freeze bottom 2, LayerNorm trainable": ({"freeze_bottom": 2, "keep_layernorm": True}, None),
    "freeze bottom 3": ({"freeze_bottom": 3}, None),
    "layer-wise decay 0.6": ({"layer_decay": 0.6}, None),
    # a linear probe reads the mean of the frozen body's vectors (the [CLS] vector of a model
    # pre-trained without next-sentence prediction barely varies between texts) and, with a
    # thousandth of the parameters to move, takes a ten times larger step
    "linear probe": ({"freeze_bottom": 4, "pool": "mean", "lr": 1e-2}, None),
    "linear probe, random body": (
        {"freeze_bottom": 4, "pool": "mean", "lr": 1e-2, "pretrained": False},
        None,
    ),
    f"full, {LOW_DATA} labels": ({}, LOW_DATA),
    f"random init, {LOW_DATA} labels": ({"pretrained": False}, LOW_DATA),
}
# Schemes fine-tuned from the book model after its pre-training continued on the training reviews'
# text (tfx.learn.finetuning.adapt: no labels read), ADAPT_STEPS steps of batch 64
ADAPTED = {
    "review-adapted body": ({}, None),
    f"review-adapted body, {LOW_DATA} labels": ({}, LOW_DATA),
}
ADAPT_STEPS = 1200
QUICK_EVAL = 300  # --quick: validation and test texts read (the full splits take a minute more)
QUICK = {
    "full": ({}, None),
    "linear probe": ({"freeze_bottom": 4, "pool": "mean", "lr": 1e-2}, None),
}


def _data(quick: bool = False):
    """The book model, its vocabulary and the reviews; `quick`: only the first QUICK_EVAL texts of
    the validation and test splits (all the training texts, so batches are drawn as in a full
    run)."""
    from tfx.learn.book_model import load_book_model
    from tfx.learn.reviews import load_reviews

    body, vocab = load_book_model()
    data = load_reviews()
    if quick:
        data.validation, data.test = data.validation[:QUICK_EVAL], data.test[:QUICK_EVAL]
    return body, vocab, data


def adapt_job(job) -> dict:
    """The book model's pre-training continued on the training reviews' text, saved to `path`."""
    from tfx.learn.finetuning import adapt

    torch.set_num_threads(1)
    steps, path, quick = job
    body, vocab, data = _data(quick)
    start = time.perf_counter()
    model, log = adapt(
        body, vocab, [t for t, _ in data.train], [t for t, _ in data.validation], steps
    )
    torch.save(model.state_dict(), path)
    print(f"adapted for {steps} steps: held-out accuracy {log['accuracy'][-1]:.4f}", flush=True)
    return dict(
        steps=steps,
        seconds=round(time.perf_counter() - start, 1),
        held_out_accuracy_before=log["accuracy_before"],
        held_out=list(zip(log["eval_step"], log["accuracy"])),
        loss_every_10=[round(x, 4) for x in log["loss"][::10]],
    )


def one_run(job) -> dict:
    """One scheme, one seed, in a worker with one torch thread; `weights`: a state dict file that
    replaces the book model's weights (the adapted body), or None."""
    from tfx.learn.finetuning import FinetuneConfig, accuracy, finetune, predict_long
    from tfx.learn.reviews import encode

    torch.set_num_threads(1)
    name, overrides, n_train, seed, steps, weights, quick = job
    body, vocab, data = _data(quick)
    if weights is not None:
        body.load_state_dict(torch.load(weights, weights_only=True))
    train = data.train[:n_train] if n_train else data.train
    every = steps if quick else max(steps // 6, 1)
    cfg = FinetuneConfig(steps=steps, seed=seed, eval_every=every, **overrides)
    run = finetune(body, vocab, train, data.validation, cfg)
    row = dict(
        scheme=name,
        seed=seed,
        train_texts=len(train),
        test_accuracy=accuracy(run.model, data.test, vocab),
        validation=run.val,
        loss_every_10=[round(x, 4) for x in run.loss[::10]],
        trainable_params=run.trainable_params,
        seconds=round(run.seconds, 1),
    )
    if name == "full":  # long inputs: truncation against sliding windows
        long = [(t, y) for t, y in data.test if len(vocab.encode(t)) > cfg.max_len - 2]
        ids, mask = encode([t for t, _ in long], vocab, cfg.max_len)
        from tfx.learn.finetuning import predict_proba

        trunc = predict_proba(run.model, ids, mask).argmax(-1).tolist()
        win = [int(predict_long(run.model, t, vocab, cfg.max_len).argmax()) for t, _ in long]
        row["long"] = dict(
            n=len(long),
            truncation=sum(p == y for p, (_, y) in zip(trunc, long)) / len(long),
            windows=sum(p == y for p, (_, y) in zip(win, long)) / len(long),
        )
    print(f"{name} seed {seed}: test {row['test_accuracy']:.4f} ({row['seconds']} s)", flush=True)
    return row


def baselines(quick: bool) -> dict:
    """Majority class and bag-of-characters logistic regression (unigrams; unigrams + bigrams), on
    all the training texts and on the low-data subset."""
    from sklearn.feature_extraction.text import CountVectorizer
    from sklearn.linear_model import LogisticRegression

    _, _, data = _data(quick)
    test_x, test_y = [t for t, _ in data.test], [y for _, y in data.test]
    majority = max((0, 1), key=lambda c: sum(y == c for _, y in data.train))
    out = {"majority class": sum(y == majority for y in test_y) / len(test_y)}
    for ngrams, label in (((1, 1), "characters"), ((1, 2), "characters + pairs")):
        for n in (None, LOW_DATA):
            train = data.train[:n] if n else data.train
            vec = CountVectorizer(analyzer="char", ngram_range=ngrams, binary=True)
            x = vec.fit_transform([t for t, _ in train])
            clf = LogisticRegression(max_iter=2000).fit(x, [y for _, y in train])
            key = f"bag of {label}" + (f", {n} labels" if n else "")
            out[key] = float(clf.score(vec.transform(test_x), test_y))
    return out


def trainer_run(job) -> dict:
    """transformers' Trainer on the exported book model folder, the same steps, batch, peak rate,
    warm-up, decay, clipping and dropout as tfx's `full` run."""
    import transformers

    from tfx.learn.book_model import FOLDER
    from tfx.learn.finetuning import FinetuneConfig
    from tfx.learn.reviews import encode

    torch.set_num_threads(1)
    seed, steps, out_dir, quick = job
    cfg = FinetuneConfig(steps=steps, seed=seed)
    _, vocab, data = _data(quick)
    transformers.logging.set_verbosity_error()
    transformers.set_seed(seed)  # the new pooler and classifier are drawn here, before the Trainer
    model = transformers.BertForSequenceClassification.from_pretrained(
        str(FOLDER), num_labels=2, classifier_dropout=cfg.dropout, local_files_only=True
    )

    def rows(pairs):
        ids, mask = encode([t for t, _ in pairs], vocab, cfg.max_len)
        return [
            {"input_ids": i[m.bool()].tolist(), "labels": y}
            for i, m, (_, y) in zip(ids, mask, pairs)
        ]

    def collate(batch):
        L = max(len(b["input_ids"]) for b in batch)
        ids = torch.zeros(len(batch), L, dtype=torch.long)  # (B, L), [PAD] = 0
        for i, b in enumerate(batch):
            ids[i, : len(b["input_ids"])] = torch.tensor(b["input_ids"])
        labels = torch.tensor([b["labels"] for b in batch])
        return {"input_ids": ids, "attention_mask": (ids != 0).long(), "labels": labels}

    args = transformers.TrainingArguments(
        output_dir=str(out_dir),
        max_steps=steps,
        per_device_train_batch_size=cfg.batch_size,
        per_device_eval_batch_size=256,
        learning_rate=cfg.lr,
        warmup_steps=cfg.warmup,
        lr_scheduler_type="linear",
        weight_decay=cfg.weight_decay,
        max_grad_norm=cfg.clip,
        seed=seed,
        report_to=[],
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
        use_cpu=True,
    )
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    trainer = transformers.Trainer(
        model=model, args=args, train_dataset=rows(data.train), data_collator=collate
    )
    start = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - start
    pred = trainer.predict(rows(data.test)).predictions.argmax(-1)
    acc = float((torch.tensor(pred) == torch.tensor([y for _, y in data.test])).float().mean())
    print(f"Trainer seed {seed}: test {acc:.4f}", flush=True)
    return dict(
        scheme="transformers Trainer",
        seed=seed,
        test_accuracy=acc,
        trainable_params=trainable,
        seconds=round(seconds, 1),
    )


def summarise(rows) -> dict:
    from tfx.learn.finetuning import paired_interval

    by = {}
    for r in rows:
        by.setdefault(r["scheme"], {})[r["seed"]] = r
    ref = by["full"]
    out = {}
    for name, seeds in by.items():
        acc = [seeds[s]["test_accuracy"] for s in sorted(seeds)]
        entry = dict(
            mean=statistics.mean(acc),
            min=min(acc),
            max=max(acc),
            n=len(acc),
            trainable_params=seeds[min(seeds)]["trainable_params"],
            seconds_median=statistics.median(seeds[s]["seconds"] for s in seeds),
        )
        shared = sorted(set(seeds) & set(ref))
        if name != "full" and len(shared) >= 2:
            d, half = paired_interval(
                [seeds[s]["test_accuracy"] for s in shared],
                [ref[s]["test_accuracy"] for s in shared],
            )
            entry["minus_full"] = dict(mean=d, half_width_95=half)
        out[name] = entry
    return out


def markdown(results: dict) -> str:
    info = results["info"]
    lines = [
        f"# Fine-tuning the book model on the reviews, {info['date']}",
        "",
        f"Machine: {info['machine']}; {results['workers']} worker processes of 1 torch thread",
        "",
        f"Command: `{results['command']}`. {results['steps']} steps of batch 32 per run, seeds "
        f"{results['seeds']}; accuracy on the test split ({results['test_texts']} texts).",
        "",
        "| scheme | test accuracy, mean (min–max) | − full: mean ± 95% (paired) | trainable "
        "parameters | s per run |",
        "|---|---|---|---|---|",
    ]
    for name, e in results["summary"].items():
        diff = e.get("minus_full")
        diff = "–" if diff is None else f"{diff['mean']:+.4f} ± {diff['half_width_95']:.4f}"
        lines.append(
            f"| {name} | {e['mean']:.4f} ({e['min']:.4f}–{e['max']:.4f}) | {diff} | "
            f"{e['trainable_params']:,} | {e['seconds_median']:.0f} |"
        )
    a = results["adaptation"]
    lines += [
        "",
        f"Review-adapted body: the book model's masked-LM training continued for {a['steps']} "
        f"steps of 64 rows on the training reviews' text ({a['seconds']:.0f} s); held-out "
        f"masked-token accuracy on validation reviews {a['held_out_accuracy_before']:.4f} before, "
        f"{a['held_out'][-1][1]:.4f} after.",
    ]
    lines += ["", "Baselines on the same test split:", ""]
    lines += [f"- {k}: {v:.4f}" for k, v in results["baselines"].items()]
    longs = [r["long"] for r in results["rows"] if "long" in r]
    if longs:
        lines += [
            "",
            f"Texts longer than 62 characters ({longs[0]['n']} of the test split), full runs: "
            "truncation "
            + ", ".join(f"{x['truncation']:.4f}" for x in longs)
            + "; sliding windows (half-window stride, mean of probabilities) "
            + ", ".join(f"{x['windows']:.4f}" for x in longs),
        ]
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
    args = arguments(__doc__.splitlines()[0], "--quick").parse_args(argv)
    schemes, seeds, steps = (QUICK, [0], 20) if args.quick else (SCHEMES, SEEDS, STEPS)
    adapt_steps = 20 if args.quick else ADAPT_STEPS
    adapted = {k: ADAPTED[k] for k in list(ADAPTED)[:1]} if args.quick else ADAPTED
    quick = args.quick
    jobs = [(n, o, t, s, steps, None, quick) for s in seeds for n, (o, t) in schemes.items()]
    workers = 2
    info = run_info()
    tmp = args.out / ".finetune-tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    weights = tmp / "adapted.pt"
    with get_context("spawn").Pool(workers) as pool:
        adapting = pool.apply_async(adapt_job, ((adapt_steps, weights, quick),))
        pending = pool.map_async(one_run, jobs, chunksize=1)
        trainer = pool.map_async(trainer_run, [(s, steps, tmp / "trainer", quick) for s in seeds])
        adaptation = adapting.get()
        later = [
            (n, o, t, s, steps, weights, quick) for s in seeds for n, (o, t) in adapted.items()
        ]
        after = pool.map_async(one_run, later, chunksize=1)
        rows = pending.get() + trainer.get() + after.get()
    _, _, data = _data(quick)
    results = dict(
        info=info,
        command="python bench/finetune.py" + (" --quick" if args.quick else ""),
        workers=workers,
        steps=steps,
        seeds=seeds,
        test_texts=len(data.test),
        adaptation=adaptation,
        rows=rows,
        baselines=baselines(quick),
    )
    results["summary"] = summarise(rows)
    shutil.rmtree(tmp)
    path = save(results, "finetune", markdown(results), args.out, "quick" if args.quick else "")
    print(f"wrote {path} and .md")
    return results


if __name__ == "__main__":
    main()
