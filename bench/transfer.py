"""Does the book model's pre-training transfer to a token-level task? Word segmentation of the
People's Daily news that pre-training never read (tfx.learn.segment).

  python bench/transfer.py                    bench/results/transfer-<date>.json and .md
  python bench/transfer.py --quick            one seed, QUICK_STEPS steps, QUICK_EVAL sentences of
                                              each split: checks that it runs
  python bench/transfer.py --random-body-only the random twin alone (no book model needed): its
                                              fine-tuning, its probe and the baselines
  python bench/transfer.py --tune             the validation check behind STEPS and LR: seed 0 of
                                              each body, the TUNE grid of budgets, peak rates and
                                              steps, scored on the validation slice (no test);
                                              about as long as a full run
  python bench/transfer.py --out DIR

Fine-tuning: at each budget of labelled sentences (200, 1,000, all of the training part), seed s
of the pre-trained body and seed s of the random initialisation get the same head, batches and
schedule (tfx.learn.segment.tagger_from), so each pair differs only in the body's starting point;
paired_interval gives the mean difference of word F1 and of tag accuracy ± 95%. Probe: the frozen
body's vectors of each character, from each layer and from the last two concatenated, fed to
logistic regression on the training part; the layer is chosen on validation, then scored on test.
Baselines that read no model: maximum matching with the dictionary of the budget's labelled words,
and with those plus the words of the pre-training news (text the model read, whose segmentation
it never saw), and per-character tag counts. Two worker processes of one torch thread each, as
bench/finetune.py: the runs are small, and two at once use this 2-core machine fully.
"""

import statistics
import sys
import time
from functools import partial
from multiprocessing import get_context
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing tfx

from bench._common import arguments, save  # noqa: E402
from tfx.inspect.perf import run_info  # noqa: E402
from tfx.learn.segment import BUDGETS  # noqa: E402

# budget -> (steps, seeds). Batch 32, peak rate LR, a tenth of the steps as warm-up. The steps
# grow more slowly than the data (200 rows see 24 epochs, all 2,507 about 4), and the smallest
# budget, the noisiest, gets five seeds: what fits the 10-minute budget of a run on 2 cores. The
# rate and steps were checked on the validation slice (tfx.learn.segment.TaggerConfig; --tune).
STEPS = dict(zip(BUDGETS, [(150, [0, 1, 2, 3, 4]), (200, [0, 1, 2]), (300, [0, 1, 2])]))
LR = 1e-3
# --tune: (budget, steps, peak rate), seed 0 of each body, scored on validation
TUNE = [
    (200, 150, 5e-4),
    (200, 150, 1e-3),
    (200, 150, 2e-3),
    (200, 300, 1e-3),
    (1000, 200, 1e-3),
    (1000, 400, 1e-3),
    (None, 300, 1e-3),
    (None, 300, 2e-3),
    (None, 600, 1e-3),
]
QUICK_STEPS = 10
QUICK_EVAL = 40  # --quick: sentences of validation and test read, training sentences of the probe
WORKERS = 2


def budget_name(n) -> str:
    return "all" if n is None else f"{n:,}"


# ---- loading ------------------------------------------------------------------------------------


def load(random_body_only: bool, quick: bool):
    """(body or None, random twin, vocab, task data, pre-training news words). The random twin is
    seed 0's random initialisation of the book model's configuration (what tagger_from draws with
    pretrained=False); with random_body_only its configuration is the recipe's for the
    pre-training corpus's rows, as load_book_model would give it (sdpa attention). Sentences are
    split to the model's positions less [CLS] and [SEP]."""
    import dataclasses

    from tfx.learn.book_model import BookModelError, load_book_model, recipe
    from tfx.learn.corpus import news_split
    from tfx.learn.segment import tagger_from, task_split
    from tfx.model.bert import BertForMaskedLM

    if random_body_only:
        from tfx.learn.corpus import load_pretraining_data

        corpus = load_pretraining_data()
        vocab, rows = corpus.vocab, corpus.train.shape[1]  # the book model's positions
        cfg = dataclasses.replace(recipe(len(vocab), rows)[0], attn_impl="sdpa")
        body = None
        shape = BertForMaskedLM(cfg)
    else:
        try:
            body, vocab = load_book_model()
        except BookModelError as e:
            sys.exit(
                f"bench/transfer.py needs the book model: {e}\n"
                "Run it with --random-body-only to measure the random twin and the baselines alone."
            )
        shape = body
    news_train, held = news_split()
    data = task_split(held, max_chars=shape.cfg.max_len - 2)
    if quick:
        data.validation, data.test = data.validation[:QUICK_EVAL], data.test[:QUICK_EVAL]
    twin = BertForMaskedLM(shape.cfg).eval()
    twin.bert.load_state_dict(tagger_from(shape, seed=0, pretrained=False).bert.state_dict())
    return body, twin, vocab, data, {w for s in news_train for w, _ in s}


# ---- the jobs, each in a worker of one torch thread ---------------------------------------------

_SHARED = {}


def _init(shared: dict) -> None:
    torch.set_num_threads(1)
    _SHARED.update(shared)


def _body(name: str):
    return _SHARED["body" if name == "pre-trained" else "twin"]


def finetune_job(job) -> dict:
    """One budget, one seed, one starting point: fine-tune, then score validation and test."""
    from tfx.learn.segment import TaggerConfig, finetune_tagger, predict_tags, score

    budget, seed, pretrained, steps, lr, *scheme = job  # scheme: TaggerConfig overrides, if any
    overrides = scheme[0] if scheme else {}
    vocab, data = _SHARED["vocab"], _SHARED["data"]
    train = data.budget(budget)
    cfg = TaggerConfig(
        steps=steps,
        lr=lr,
        warmup=max(steps // 10, 1),
        seed=seed,
        pretrained=pretrained,
        **overrides,
    )
    body = _SHARED["body"] if pretrained else _SHARED["twin"]  # the twin's weights are not read
    run = finetune_tagger(body, vocab, train, cfg)
    dictionary = {w for s in train for w in s}
    row = dict(
        body="pre-trained" if pretrained else "random init",
        budget=budget,
        seed=seed,
        steps=steps,
        lr=lr,
        validation=score(
            data.validation, predict_tags(run.model, vocab, data.validation), dictionary
        ),
        seconds=round(run.seconds, 1),
        loss_every_10=[round(x, 4) for x in run.loss[::10]],
    )
    if overrides:
        row["scheme"] = overrides
    if not _SHARED["tune"]:
        row["test"] = score(data.test, predict_tags(run.model, vocab, data.test), dictionary)
    at = row.get("test", row["validation"])
    print(
        f"{row['body']}, {budget_name(budget)} labels, seed {seed}, {steps} steps, lr {lr:g}: "
        f"F1 {at['f1']:.4f}, tag accuracy {at['tag_accuracy']:.4f} ({row['seconds']} s)",
        flush=True,
    )
    return row


def probe_job(name: str) -> dict:
    """The frozen body's probe: each layer alone and the last two concatenated, fitted on all the
    training sentences and scored on validation; the best on validation is scored on test, fitted
    on all the training sentences and on each smaller budget."""
    from tfx.learn.segment import char_features, fit_tag_probe, probe_score

    start = time.perf_counter()
    body, vocab, data = _body(name), _SHARED["vocab"], _SHARED["data"]
    n, d = body.cfg.n_layers, body.cfg.d_model
    quick = _SHARED["quick"]
    train = data.budget(min(QUICK_EVAL, len(data.train))) if quick else data.train
    every = tuple(range(n + 1))
    x_train = char_features(body, vocab, train, every)  # (n_chars, (n + 1) · d), one pass
    x_val = char_features(body, vocab, data.validation, every)
    x_test = char_features(body, vocab, data.test, every)

    def cols(layers):
        return [c for k in layers for c in range(k * d, (k + 1) * d)]

    # each depth alone, and the last two together; all five concatenated (640 features) took the
    # solver more than 150 s to converge on the random body, more than this run can spend
    choices = {f"layer {k}": (k,) for k in every} | {f"layers {n - 1}+{n}": (n - 1, n)}
    words = {w for s in train for w in s}
    validation, fitted = {}, {}
    for label, ks in choices.items():
        fitted[label], _ = fit_tag_probe(
            x_train[:, cols(ks)], train, x_val[:, cols(ks)], data.validation
        )
        validation[label] = probe_score(fitted[label], x_val[:, cols(ks)], data.validation, words)
    best = max(validation, key=lambda k: validation[k]["f1"])
    chosen = cols(choices[best])
    test = {}
    for budget in [None] if quick else budgets(data):
        if budget is None:
            sub, clf = train, fitted[best]
        else:
            sub = data.budget(budget)
            x = char_features(body, vocab, sub, choices[best])  # (n_chars, f)
            clf, _ = fit_tag_probe(x, sub, x_val[:, chosen], data.validation)
        test[budget_name(budget)] = probe_score(
            clf, x_test[:, chosen], data.test, {w for s in sub for w in s}
        )
    seconds = round(time.perf_counter() - start, 1)
    print(
        f"probe of the {name} body ({best}, chosen on validation): test tag accuracy "
        f"{test['all']['tag_accuracy']:.4f}, F1 {test['all']['f1']:.4f} ({seconds} s)",
        flush=True,
    )
    return dict(body=name, validation=validation, chosen=best, test=test, seconds=seconds)


def baselines_job(_=None) -> dict:
    """Maximum matching (forward, bidirectional) with the budget's dictionary and with it plus the
    pre-training news's words; per-character tag counts of the budget's sentences. OOV recall is
    always against the budget's labelled dictionary."""
    from tfx.learn.segment import CharTagCounts, bidirectional_max_match, max_match, score

    start = time.perf_counter()
    data, news = _SHARED["data"], _SHARED["news_words"]
    texts = ["".join(s) for s in data.test]
    out = {}
    for budget in budgets(data):
        train = data.budget(budget)
        labelled = {w for s in train for w in s}
        both = labelled | news
        longest = max(map(len, both))
        methods = {
            "forward max matching, labelled words": partial(
                max_match, dictionary=labelled, max_word=longest
            ),
            "bidirectional max matching, labelled words": partial(
                bidirectional_max_match, dictionary=labelled, max_word=longest
            ),
            "forward max matching, labelled + pre-training news words": partial(
                max_match, dictionary=both, max_word=longest
            ),
            "bidirectional max matching, labelled + pre-training news words": partial(
                bidirectional_max_match, dictionary=both, max_word=longest
            ),
            "character tag counts (neighbours, backing off)": CharTagCounts(train).tags,
        }
        out[budget_name(budget)] = {
            name: score(data.test, [f(t) for t in texts], labelled) for name, f in methods.items()
        }
    return dict(baselines=out, seconds=round(time.perf_counter() - start, 1))


# ---- the plan and its summary --------------------------------------------------------------------


def budgets(data) -> list:
    """The budgets of STEPS the training part holds (all of them, but for a test's tiny data)."""
    return [b for b in STEPS if b is None or b <= len(data.train)]


def plan(data, quick: bool, tune: bool, has_body: bool) -> list:
    """The fine-tuning jobs (budget, seed, pretrained, steps, lr), longest first, so the two
    workers finish together."""
    starts = [True, False] if has_body else [False]
    if quick:
        return [(budgets(data)[0], 0, p, QUICK_STEPS, LR) for p in starts]
    if tune:
        jobs = [(b, 0, p, st, lr) for b, st, lr in TUNE for p in starts]
    else:
        jobs = [
            (b, s, p, st, LR)
            for b, (st, seeds) in STEPS.items()
            if b in budgets(data)
            for s in seeds
            for p in starts
        ]
    return sorted(jobs, key=lambda j: -j[3])


def measure(body, twin, vocab, data, news_words, quick=False, tune=False, workers=WORKERS):
    """(fine-tuning rows, probes, baselines) of a run on loaded data: body None for the random
    twin alone; tune: the validation check only. workers 1 runs every job in this process (a
    test's tiny run, no interpreter to start); more, in spawned workers of one torch thread."""
    shared = dict(
        body=body, twin=twin, vocab=vocab, data=data, news_words=news_words, quick=quick, tune=tune
    )
    jobs = plan(data, quick, tune, body is not None)
    names = [] if tune else (["pre-trained"] if body is not None else []) + ["random twin"]
    if workers == 1:
        _SHARED.update(shared)
        try:
            probes = [probe_job(n) for n in names]
            base = None if tune else baselines_job()
            rows = [finetune_job(j) for j in jobs]
        finally:
            _SHARED.clear()
        return rows, probes, base
    with get_context("spawn").Pool(workers, _init, (shared,)) as pool:
        pending = [pool.apply_async(probe_job, (n,)) for n in names]
        base = None if tune else pool.apply_async(baselines_job)
        rows = pool.map(finetune_job, jobs, chunksize=1)
        return rows, [p.get() for p in pending], base and base.get()


def summarise(rows) -> dict:
    """Per budget: each body's test F1, tag accuracy and OOV recall (mean, min, max over seeds) and
    the paired difference pre-trained − random init (mean ± 95%) where both ran the same seeds."""
    from tfx.learn.finetuning import paired_interval

    out = {}
    for budget in dict.fromkeys(r["budget"] for r in rows):
        by = {}
        for r in rows:
            if r["budget"] == budget:
                by.setdefault(r["body"], {})[r["seed"]] = r
        entry = {}
        for body, seeds in by.items():
            entry[body] = {
                k: dict(
                    mean=statistics.mean(seeds[s]["test"][k] for s in seeds),
                    min=min(seeds[s]["test"][k] for s in seeds),
                    max=max(seeds[s]["test"][k] for s in seeds),
                    n=len(seeds),
                )
                for k in ("f1", "tag_accuracy", "oov_recall")
            }
            entry[body]["seconds_median"] = statistics.median(seeds[s]["seconds"] for s in seeds)
        shared = sorted(set(by.get("pre-trained", {})) & set(by.get("random init", {})))
        if len(shared) >= 2:
            a, b = (
                {s: r["test"] for s, r in by[k].items()} for k in ("pre-trained", "random init")
            )
            for k in ("f1", "tag_accuracy"):
                d, half = paired_interval([a[s][k] for s in shared], [b[s][k] for s in shared])
                entry.setdefault("pre-trained minus random init", {})[k] = dict(
                    mean=d, half_width_95=half, n=len(shared)
                )
        out[budget_name(budget)] = entry
    return out


def markdown(results: dict) -> str:
    info, split = results["info"], results["split"]
    lines = [
        f"# Word segmentation of the held-out news: does pre-training transfer? {info['date']}",
        "",
        f"Machine: {info['machine']}; {results['workers']} worker processes of 1 torch thread; "
        f"{results['seconds']:.0f} s in all.",
        "",
        f"Command: `{results['command']}`. Held-out People's Daily sentences (never pre-trained "
        f"on), in order: training {split['train']}, validation {split['validation']}, test "
        f"{split['test']} ({split['test_chars']:,} characters, {split['test_words']:,} words); a "
        f"sentence over {split['max_chars']} characters split at punctuation. Batch 32, peak "
        f"rate {results['lr']:g}, a tenth of the steps as warm-up, then linear decay.",
        "",
        "Word F1 counts a predicted word when both its boundaries match a gold word. Tag accuracy "
        "is of the B/M/E/S tags as predicted: a tagger's or probe's own, before an impossible "
        "sequence is read into words; for maximum matching, the tags of its words. OOV recall: "
        "the share of test words outside the labelled training words that were found.",
    ]
    if results["tune"]:
        lines += ["", "Validation check (seed 0; F1, tag accuracy on the validation slice):", ""]
        lines += [
            "| body | labels | steps | peak rate | F1 | tag accuracy |",
            "|---|---|---|---|---|---|",
        ]
        for r in results["rows"]:
            v = r["validation"]
            lines.append(
                f"| {r['body']} | {budget_name(r['budget'])} | {r['steps']} | {r['lr']:g} | "
                f"{v['f1']:.4f} | {v['tag_accuracy']:.4f} |"
            )
        return "\n".join(lines) + "\n"
    lines += [
        "",
        "| labels | body | steps | seeds | word F1, mean (min–max) | tag accuracy | OOV recall "
        "| s per run |",
        "|---|---|---|---|---|---|---|---|",
    ]
    steps = {budget_name(r["budget"]): r["steps"] for r in results["rows"]}
    for budget, entry in results["summary"].items():
        for body, e in entry.items():
            if body.startswith("pre-trained minus"):
                continue
            f, t, o = e["f1"], e["tag_accuracy"], e["oov_recall"]
            lines.append(
                f"| {budget} | {body} | {steps[budget]} | {f['n']} | {f['mean']:.4f} "
                f"({f['min']:.4f}–{f['max']:.4f}) | {t['mean']:.4f} | {o['mean']:.4f} | "
                f"{e['seconds_median']:.0f} |"
            )
    diffs = [
        (b, e["pre-trained minus random init"])
        for b, e in results["summary"].items()
        if "pre-trained minus random init" in e
    ]
    if diffs:
        lines += ["", "Pre-trained − random init, paired by seed (mean ± 95% t interval):", ""]
        lines += ["| labels | word F1 | tag accuracy |", "|---|---|---|"]
        for b, d in diffs:
            lines.append(
                f"| {b} | {d['f1']['mean']:+.4f} ± {d['f1']['half_width_95']:.4f} | "
                f"{d['tag_accuracy']['mean']:+.4f} ± {d['tag_accuracy']['half_width_95']:.4f} |"
            )
    lines += ["", "Frozen-body linear probe (logistic regression on each character's vector):", ""]
    for p in results["probe"]:
        v = ", ".join(f"{k} {x['f1']:.4f}" for k, x in p["validation"].items())
        lines.append(f"- {p['body']} body, validation F1 by layer: {v}; chosen: {p['chosen']}.")
        for budget, x in p["test"].items():
            lines.append(
                f"  - test, {budget} labelled sentences: tag accuracy {x['tag_accuracy']:.4f}, "
                f"word F1 {x['f1']:.4f}, OOV recall {x['oov_recall']:.4f}"
            )
    lines += ["", "Baselines that read no model (test; OOV recall against the labelled words):", ""]
    lines += [
        "| labels | baseline | word F1 | tag accuracy | OOV recall |",
        "|---|---|---|---|---|",
    ]
    for budget, methods in results["baselines"].items():
        for name, x in methods.items():
            lines.append(
                f"| {budget} | {name} | {x['f1']:.4f} | {x['tag_accuracy']:.4f} | "
                f"{x['oov_recall']:.4f} |"
            )
    return "\n".join(lines) + "\n"


def results_of(data, rows, probes, base, tune: bool) -> dict:
    """The results file's measurements: the split's sizes, every fine-tuning row (by budget,
    body, seed), and, but for --tune, the summary, the probes and the baselines."""
    order = list(STEPS)
    out = dict(
        lr=LR,
        tune=tune,
        split=dict(
            train=len(data.train),
            validation=len(data.validation),
            test=len(data.test),
            test_chars=sum(len(w) for s in data.test for w in s),
            test_words=sum(map(len, data.test)),
            max_chars=data.max_chars,
        ),
        rows=sorted(
            rows, key=lambda r: (order.index(r["budget"]), r["body"], r["seed"], r["steps"])
        ),
    )
    if not tune:
        out.update(
            summary=summarise(out["rows"]),
            probe=probes,
            baselines=base["baselines"],
            baseline_seconds=base["seconds"],
        )
    return out


def main(argv=None) -> dict:
    parser = arguments(__doc__.splitlines()[0], "--quick")
    parser.add_argument("--random-body-only", action="store_true", help="no book model needed")
    parser.add_argument("--tune", action="store_true", help="the validation check, no test")
    parser.add_argument("--workers", type=int, default=WORKERS, help="worker processes")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    info = run_info()
    body, twin, vocab, data, news_words = load(args.random_body_only, args.quick)
    rows, probes, base = measure(
        body, twin, vocab, data, news_words, args.quick, args.tune, args.workers
    )
    results = dict(
        info=info,
        command="python bench/transfer.py"
        + "".join(
            f" --{k.replace('_', '-')}"
            for k in ("quick", "random_body_only", "tune")
            if getattr(args, k)
        ),
        workers=args.workers,
        **results_of(data, rows, probes, base, args.tune),
    )
    results["seconds"] = round(time.perf_counter() - start, 1)
    tags = [
        "quick" if args.quick else "",
        "tune" if args.tune else "",
        "random-body" if args.random_body_only else "",
    ]
    path = save(results, "transfer", markdown(results), args.out, *tags)
    print(f"wrote {path} and .md ({results['seconds']:.0f} s)")
    return results


if __name__ == "__main__":
    main()
