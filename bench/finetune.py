"""Chapter 10's sweep: the book model fine-tuned on the reviews under each scheme, over seeds.

  python bench/finetune.py                  every scheme × 3 seeds: bench/results/finetune-<date>.*
  python bench/finetune.py --schemes core   the schemes chapter 10's argument rests on (CORE), 3
                                            seeds, no Trainer or review-adapted body:
                                            finetune-<date>-core.*
  python bench/finetune.py --quick          two schemes, one seed, 20 steps, evaluated once on the
                                            first QUICK_EVAL texts of each split: checks that it
                                            runs (on a random body when the book model is missing)
  python bench/finetune.py --random-body    a randomly initialised body of the book model's shape
                                            instead of the book model: to time or test the sweep
  python bench/finetune.py --out DIR

Every run has the same steps, batch, schedule and data order for a given seed, so two schemes
with one seed differ only in the scheme (paired). Accuracy is on the test split, which no choice
was made on. Two worker processes of one torch thread each: the runs are small, and two at once
use this 2-core machine fully. Texts are read up to the model's own positions (its cfg.max_len).

Also measured: majority class, bag-of-characters logistic regression, and the two strongest cheap
baselines, TF-IDF of character 1–3-grams with logistic regression and NB-SVM on character
1–3-grams (C chosen on validation, 95% bootstrap interval over the test texts); linear probes
fitted to convergence on the frozen body's mean vectors at every depth, for the book model and the
random bodies the random-init runs start from; transformers' Trainer on the exported book model;
and, for the full fine-tuning runs, truncation against sliding windows on the test texts longer
than the model's positions. Chapter 10 reads the committed results file.

A sweep takes about two hours here, so each fine-tuning run's row is kept as it finishes, in
<out>/.finetune-runs/, under a key of its job, the fine-tuning code (tfx/learn/finetuning.py) and
the body (the book model's weights digest): an interrupted sweep resumes where it stopped, and a
full sweep reuses the runs of an earlier --schemes core one. A full sweep removes the folder once
its results file is written; a changed recipe, scheme or model never matches an old row.
"""

import hashlib
import json
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
LOW_DATA_SEED = 0  # the sample they are drawn by (low_data_index)
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
    "layer-wise decay 0.8": ({"layer_decay": 0.8}, None),
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
# --schemes core: what chapter 10's argument needs most (does pre-training beat random
# initialisation, with all labels and with few; are the frozen features any good; does holding
# the body back help), about half the sweep's time
CORE = (
    "full",
    "random init",
    f"full, {LOW_DATA} labels",
    f"random init, {LOW_DATA} labels",
    "linear probe",
    "linear probe, random body",
    "freeze bottom 2",
    "layer-wise decay 0.6",
    "layer-wise decay 0.8",
)
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
QUICK_PROBE_TRAIN = 600  # --quick: training texts the fitted probes read


def low_data_index(size: int, n) -> list:
    """Indices into a training split of `size` texts of the runs with n labels (None: all): a
    sample drawn once with seed LOW_DATA_SEED and kept in the split's order, so every low-data run,
    probe and baseline reads the same texts. A sample, not the first n: load_reviews sorts by
    text, and texts that open with digits, brackets or Latin letters sort first (36% of the first
    500 are positive against 48% of the split)."""
    if not n:
        return list(range(size))
    if not 0 < n <= size:
        raise ValueError(f"n must be between 1 and the split's {size} texts, got {n}")
    import random

    return sorted(random.Random(LOW_DATA_SEED).sample(range(size), n))


def low_data(train: list, n) -> list:
    """The labelled texts of a run with n labels (None: all): train at low_data_index."""
    return [train[i] for i in low_data_index(len(train), n)]


def _random_body(data):
    """(body, vocab): a body of the book model's shape (tfx.learn.book_model.recipe) at BERT's
    random initialisation, seed 0, with a vocabulary of the training reviews' characters (seen
    twice or more). What --random-body and a --quick run without the book model fine-tune."""
    from tfx.learn.book_model import recipe
    from tfx.learn.corpus import CharVocab
    from tfx.model.bert import BertForMaskedLM

    vocab = CharVocab.build([t for t, _ in data.train], min_count=2)
    cfg, _ = recipe(len(vocab))
    torch.manual_seed(0)
    return BertForMaskedLM(cfg).eval(), vocab


def _data(env: dict):
    """The body, its vocabulary and the reviews. env["body"]: "book" (the book model) or "random"
    (_random_body); env["quick"]: only the first QUICK_EVAL texts of the validation and test
    splits (all the training texts, so batches are drawn as in a full run)."""
    from tfx.learn.book_model import load_book_model
    from tfx.learn.reviews import load_reviews

    data = load_reviews()
    body, vocab = load_book_model() if env["body"] == "book" else _random_body(data)
    if env["quick"]:
        data.validation, data.test = data.validation[:QUICK_EVAL], data.test[:QUICK_EVAL]
    return body, vocab, data


def adapt_job(job) -> dict:
    """The book model's pre-training continued on the training reviews' text, saved to `path`;
    kept in env["runs"] (weights and record) like one_run's rows."""
    steps, path, env = job
    key = run_key(("adapt", {}, None, 0, steps, None, env))
    kept = Path(env["runs"]) / f"adapt-{key}"
    if kept.with_suffix(".json").exists():
        shutil.copyfile(kept.with_suffix(".pt"), path)
        return json.loads(kept.with_suffix(".json").read_text(encoding="utf-8"))
    record = _adapt(job)
    shutil.copyfile(path, kept.with_suffix(".pt"))
    partial = kept.with_suffix(".part")
    partial.write_text(json.dumps(record), encoding="utf-8")
    partial.replace(kept.with_suffix(".json"))  # written last: its presence means both are whole
    return record


def _adapt(job) -> dict:
    from tfx.learn.finetuning import adapt

    torch.set_num_threads(1)
    steps, path, env = job
    body, vocab, data = _data(env)
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


def _sha256(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def run_key(job) -> str:
    """What one_run's row depends on: the job itself, the fine-tuning code, the body's weights
    (the book model's recorded digest; the adapted body's file) and the evaluation split sizes."""
    import tfx.learn.finetuning as code

    name, overrides, n_train, seed, steps, weights, env = job
    if env["body"] == "book":
        from tfx.learn.book_model import read_manifest

        body = json.dumps(read_manifest(), sort_keys=True)
    else:
        body = "random"
    parts = dict(
        job=[name, overrides, n_train, seed, steps, env["quick"]],
        code=_sha256(code.__file__),
        body=hashlib.sha256(body.encode()).hexdigest(),
        weights=_sha256(weights) if weights is not None else None,
    )
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def one_run(job) -> dict:
    """One scheme, one seed, in a worker with one torch thread; `weights`: a state dict file that
    replaces the book model's weights (the adapted body), or None. Its row is read from, or
    written to, env["runs"] under run_key(job)."""
    name, overrides, n_train, seed, steps, weights, env = job
    kept = Path(env["runs"]) / f"{run_key(job)}.json"
    if kept.exists():
        row = json.loads(kept.read_text(encoding="utf-8"))
        print(f"{name} seed {seed}: test {row['test_accuracy']:.4f} (kept from {kept.name})")
        return row
    row = _fine_tune(job)
    partial = kept.with_suffix(".part")
    partial.write_text(json.dumps(row), encoding="utf-8")
    partial.replace(kept)  # atomic: a killed sweep never leaves half a row
    return row


def _fine_tune(job) -> dict:
    from tfx.learn.finetuning import FinetuneConfig, accuracy, finetune, predict_long
    from tfx.learn.reviews import encode

    torch.set_num_threads(1)
    name, overrides, n_train, seed, steps, weights, env = job
    body, vocab, data = _data(env)
    if weights is not None:
        body.load_state_dict(torch.load(weights, weights_only=True))
    train = low_data(data.train, n_train)
    every = steps if env["quick"] else max(steps // 6, 1)
    cfg = FinetuneConfig(
        steps=steps, seed=seed, eval_every=every, max_len=body.cfg.max_len, **overrides
    )
    run = finetune(body, vocab, train, data.validation, cfg)
    row = dict(
        scheme=name,
        seed=seed,
        train_texts=len(train),
        test_accuracy=accuracy(run.model, data.test, vocab, cfg.max_len),
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


# the cheap baselines fitted_baselines adds: result key -> tfx.learn.reviews.fit_baseline kind
STRONG_BASELINES = {
    "TF-IDF of character 1–3-grams": "tfidf",
    "NB-SVM on character 1–3-grams": "nbsvm",
}


def baselines(env: dict) -> tuple:
    """(accuracies, details): majority class, bag-of-characters logistic regression (unigrams;
    unigrams + bigrams) and the STRONG_BASELINES (C on validation; details: C, β, validation
    accuracy and a 95% bootstrap interval over the test texts), each on all the training texts and
    on the low-data subset."""
    from sklearn.feature_extraction.text import CountVectorizer
    from sklearn.linear_model import LogisticRegression

    from tfx.learn.reviews import bootstrap_interval, fit_baseline

    _, _, data = _data(env)
    start = time.perf_counter()
    test_x, test_y = [t for t, _ in data.test], [y for _, y in data.test]
    majority = max((0, 1), key=lambda c: sum(y == c for _, y in data.train))
    out = {"majority class": sum(y == majority for y in test_y) / len(test_y)}
    for ngrams, label in (((1, 1), "characters"), ((1, 2), "characters + pairs")):
        for n in (None, LOW_DATA):
            train = low_data(data.train, n)
            vec = CountVectorizer(analyzer="char", ngram_range=ngrams, binary=True)
            x = vec.fit_transform([t for t, _ in train])
            clf = LogisticRegression(max_iter=2000).fit(x, [y for _, y in train])
            key = f"bag of {label}" + (f", {n} labels" if n else "")
            out[key] = float(clf.score(vec.transform(test_x), test_y))
    details = {}
    grid = dict(Cs=[0.1], betas=[0.25]) if env["quick"] else {}  # --quick: one fit each
    for label, kind in STRONG_BASELINES.items():
        for n in (None, LOW_DATA):
            key = label + (f", {n} labels" if n else "")
            model = fit_baseline(kind, low_data(data.train, n), data.validation, **grid)
            correct = model.correct(data.test)
            out[key] = float(correct.mean())
            details[key] = dict(
                C=model.C,
                beta=model.beta if kind == "nbsvm" else None,
                validation_accuracy=model.validation[(model.C, model.beta)],
                test_interval_95=list(bootstrap_interval(correct)),
            )
    print(f"baselines ({time.perf_counter() - start:.0f} s)", flush=True)
    return out, details


def probe_job(job) -> dict:
    """Linear probes fitted to convergence (tfx.learn.finetuning.fit_probe, C on validation) on
    the frozen body's mean vectors at every depth (0: the embeddings), with all the training
    labels and with the low-data subset. The body: the book model (pretrained) or the random
    initialisation that the "linear probe, random body" run of `seed` starts from."""
    from tfx.learn.finetuning import classifier_from, fit_probe, mean_states
    from tfx.learn.reviews import labels_of

    torch.set_num_threads(1)
    pretrained, seed, env = job
    body, vocab, data = _data(env)
    bert = classifier_from(body, pool="mean", seed=seed, pretrained=pretrained).bert
    train = data.train[:QUICK_PROBE_TRAIN] if env["quick"] else data.train
    start = time.perf_counter()
    splits = {"train": train, "validation": data.validation, "test": data.test}
    x = {
        k: mean_states(bert, [t for t, _ in v], vocab, body.cfg.max_len) for k, v in splits.items()
    }
    y = {k: labels_of(v) for k, v in splits.items()}  # x: (depths, N, d); y: (N,)
    depths = []
    for depth in range(len(x["train"])):
        entry = dict(depth=depth)
        for n in (None, LOW_DATA):
            rows = torch.tensor(low_data_index(len(train), n))
            clf, C, scores = fit_probe(
                x["train"][depth, rows], y["train"][rows], x["validation"][depth], y["validation"]
            )
            suffix = f"_{n}" if n else ""
            entry["C" + suffix] = C
            entry["validation_accuracy" + suffix] = scores[C]
            entry["test_accuracy" + suffix] = float(
                clf.score(x["test"][depth].double().numpy(), y["test"].numpy())
            )
        depths.append(entry)
    body_name = "book model" if pretrained else "random body"
    last = depths[-1]["test_accuracy"]
    print(f"fitted probe, {body_name} seed {seed}: last layer test {last:.4f}", flush=True)
    return dict(
        body=body_name,
        seed=seed,
        train_texts=len(train),
        depths=depths,
        seconds=round(time.perf_counter() - start, 1),
    )


def trainer_run(job) -> dict:
    """transformers' Trainer on the exported book model folder, the same steps, batch, peak rate,
    warm-up, decay, clipping and dropout as tfx's `full` run."""
    import transformers

    from tfx.learn.book_model import FOLDER
    from tfx.learn.finetuning import FinetuneConfig
    from tfx.learn.reviews import encode

    torch.set_num_threads(1)
    seed, steps, out_dir, env = job
    body, vocab, data = _data(env)
    cfg = FinetuneConfig(steps=steps, seed=seed, max_len=body.cfg.max_len)
    folder = FOLDER if env["body"] == "book" else env["random_folder"]
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    transformers.set_seed(seed)  # the new pooler and classifier are drawn here, before the Trainer
    model = transformers.BertForSequenceClassification.from_pretrained(
        str(folder), num_labels=2, classifier_dropout=cfg.dropout, local_files_only=True
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
        f"Command: `{results['command']}`. Body: {results['body']}, {results['max_len']} "
        f"positions (texts up to {results['max_len'] - 2} characters read whole). "
        f"{results['steps']} steps of batch 32 per run, seeds {results['seeds']}; accuracy on the "
        f"test split ({results['test_texts']} texts).",
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
    a = results.get("adaptation")
    if a:
        lines += [
            "",
            f"Review-adapted body: the book model's masked-LM training continued for "
            f"{a['steps']} steps of 64 rows on the training reviews' text ({a['seconds']:.0f} s); "
            f"held-out masked-token accuracy on validation reviews "
            f"{a['held_out_accuracy_before']:.4f} before, {a['held_out'][-1][1]:.4f} after.",
        ]
    lines += ["", "Baselines on the same test split:", ""]
    details = results.get("baseline_details", {})
    for k, v in results["baselines"].items():
        d = details.get(k)
        extra = ""
        if d:
            lo, hi = d["test_interval_95"]
            beta = "" if d["beta"] is None else f", β {d['beta']}"
            extra = (
                f" (95% bootstrap over test texts {lo:.4f}–{hi:.4f}; C {d['C']}{beta} on "
                f"validation, {d['validation_accuracy']:.4f} there)"
            )
        lines.append(f"- {k}: {v:.4f}{extra}")
    probes = results.get("probes")
    if probes:
        n = len(probes[0]["depths"])
        lines += [
            "",
            f"Linear probes fitted to convergence (logistic regression on standardised mean "
            f"vectors, C on validation; {probes[0]['train_texts']} training texts, and the "
            f"{LOW_DATA}-label subset), test accuracy by depth (0: embeddings):",
            "",
            "| body | seed | labels | " + " | ".join(f"depth {i}" for i in range(n)) + " | s |",
            "|---|---|---|" + "---|" * (n + 1),
        ]
        for p in probes:
            for suffix, labels in (("", "all"), (f"_{LOW_DATA}", str(LOW_DATA))):
                accs = " | ".join(f"{d['test_accuracy' + suffix]:.4f}" for d in p["depths"])
                lines.append(
                    f"| {p['body']} | {p['seed']} | {labels} | {accs} | {p['seconds']:.0f} |"
                )
    longs = [r["long"] for r in results["rows"] if "long" in r]
    if longs:
        lines += [
            "",
            f"Texts longer than {results['max_len'] - 2} characters ({longs[0]['n']} of the test "
            "split), full runs: truncation "
            + ", ".join(f"{x['truncation']:.4f}" for x in longs)
            + "; sliding windows (half-window stride, mean of probabilities) "
            + ", ".join(f"{x['windows']:.4f}" for x in longs),
        ]
    return "\n".join(lines) + "\n"


def _body(args) -> str:
    """ "book" when the book model loads, "random" for --random-body; --quick falls back to
    "random" when the book model is missing or from another recipe, a full sweep stops."""
    from tfx.learn.book_model import BookModelError, load_book_model

    if args.random_body:
        return "random"
    try:
        load_book_model()
    except BookModelError as e:
        if not args.quick:
            raise SystemExit(
                f"{e}\n(--random-body runs the sweep on a random body instead)"
            ) from None
        print(f"the book model is not available ({e}); --quick runs on a random body", flush=True)
        return "random"
    return "book"


def main(argv=None) -> dict:
    parser = arguments(__doc__.splitlines()[0], "--quick")
    parser.add_argument(
        "--schemes",
        choices=("all", "core"),
        default="all",
        help="all: every scheme, the Trainer and the review-adapted body; core: CORE only",
    )
    parser.add_argument(
        "--random-body",
        action="store_true",
        help="a randomly initialised body of the book model's shape instead of the book model",
    )
    args = parser.parse_args(argv)
    core = args.schemes == "core"
    if args.quick:
        schemes, seeds, steps = QUICK, [0], 20
    else:
        schemes = {k: SCHEMES[k] for k in CORE} if core else SCHEMES
        seeds, steps = SEEDS, STEPS
    adapt_steps = 20 if args.quick else ADAPT_STEPS
    adapted = {k: ADAPTED[k] for k in list(ADAPTED)[:1]} if args.quick else ADAPTED
    runs = args.out / ".finetune-runs"
    runs.mkdir(parents=True, exist_ok=True)
    env = dict(quick=args.quick, body=_body(args), runs=str(runs))
    tmp = args.out / ".finetune-tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    body, _, data = _data(env)
    if env["body"] == "book":
        from tfx.learn.book_model import read_manifest

        body_name = f"the book model ({read_manifest()['recipe_version']})"
    else:
        from transformers.utils import logging as hf_logging

        from tfx.model.bert import to_huggingface

        hf_logging.disable_progress_bar()  # save_pretrained's bar would only clutter the log
        body_name = "a random body of the book model's shape (--random-body or no book model)"
        env["random_folder"] = str(tmp / "random-body")  # what the Trainer loads
        to_huggingface(body).save_pretrained(env["random_folder"])
    jobs = [(n, o, t, s, steps, None, env) for s in seeds for n, (o, t) in schemes.items()]
    probes = [(True, 0, env)] + [(False, s, env) for s in seeds]
    workers = 2
    info = run_info()
    weights = tmp / "adapted.pt"
    with get_context("spawn").Pool(workers) as pool:
        if not core:  # the longest job first, so the other worker fills in around it
            adapting = pool.apply_async(adapt_job, ((adapt_steps, weights, env),))
        fitted = pool.apply_async(baselines, (env,))
        probing = pool.map_async(probe_job, probes, chunksize=1)
        pending = pool.map_async(one_run, jobs, chunksize=1)
        rows, adaptation = [], None
        if not core:
            trainer = pool.map_async(trainer_run, [(s, steps, tmp / "trainer", env) for s in seeds])
            adaptation = adapting.get()
            later = [
                (n, o, t, s, steps, weights, env) for s in seeds for n, (o, t) in adapted.items()
            ]
            after = pool.map_async(one_run, later, chunksize=1)
            rows = trainer.get() + after.get()
        rows = pending.get() + rows
        accuracies, details = fitted.get()
        probe_rows = probing.get()
    flags = [f for f, on in (("--schemes core", core), ("--random-body", args.random_body)) if on]
    results = dict(
        info=info,
        command=" ".join(
            ["python bench/finetune.py", *flags] + (["--quick"] if args.quick else [])
        ),
        workers=workers,
        schemes="core" if core else "all",
        body=body_name,
        max_len=body.cfg.max_len,
        steps=steps,
        seeds=seeds,
        test_texts=len(data.test),
        rows=rows,
        baselines=accuracies,
        baseline_details=details,
        probes=probe_rows,
    )
    if adaptation is not None:
        results["adaptation"] = adaptation
    results["summary"] = summarise(rows)
    shutil.rmtree(tmp)
    if not core:  # every row is in the results file now
        shutil.rmtree(runs)
    tags = ["core" if core else "", "random-body" if env["body"] == "random" else ""]
    path = save(results, "finetune", markdown(results), args.out, *tags, "quick" * args.quick)
    print(f"wrote {path} and .md")
    return results


if __name__ == "__main__":
    main()
