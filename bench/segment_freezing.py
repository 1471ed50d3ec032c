"""Freezing and layer-wise decay where pre-training pays: the book model fine-tuned as a word
segmentation tagger (bench/transfer.py's task, recipe and seeds) under each scheme of SCHEMES.

  python bench/segment_freezing.py          bench/results/segment-freezing-<date>.json and .md
  python bench/segment_freezing.py --quick  one seed, QUICK_STEPS steps, QUICK_EVAL sentences
  python bench/segment_freezing.py --out DIR

Why this exists: chapter 10's sweep compares freezing with layer-wise decay on review sentiment,
where pre-training buys little, so freezing pre-trained layers can only cost accuracy there, and
the claims it settles ("fine-tune only the top layers", "freezing beats layer-wise decay") are
about keeping features worth keeping. Segmentation is where the book model's features transfer
(+22 points of word F1 over its random twin at 200 labels), so the comparison is run here too: the
pre-trained body at BUDGET labelled sentences, every scheme with the same seeds, batches, head and
schedule as `full` (paired), word F1 on the test part, paired_interval against `full`.
"""

import sys
import time
from multiprocessing import get_context
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing tfx

from bench import transfer  # noqa: E402
from bench._common import arguments, save  # noqa: E402
from tfx.inspect.perf import header_md, run_info  # noqa: E402

BUDGET = 200  # labelled sentences: the few-label regime freezing is recommended for
STEPS = transfer.STEPS[BUDGET][0]
SEEDS = transfer.STEPS[BUDGET][1]
# name -> TaggerConfig overrides; the first is the reference
SCHEMES = {
    "full": {},
    "freeze bottom 2": {"freeze_bottom": 2},
    "layer-wise decay 0.8": {"layer_decay": 0.8},
    "layer-wise decay 0.6": {"layer_decay": 0.6},
}


def summarise(rows, seeds) -> dict:
    """Per scheme: test word F1 (mean, min, max) and, against `full`, the paired difference."""
    from tfx.learn.finetuning import paired_interval

    f1 = {
        name: [
            next(r["test"]["f1"] for r in rows if r["name"] == name and r["seed"] == s)
            for s in seeds
        ]
        for name in dict.fromkeys(r["name"] for r in rows)
    }
    out = {}
    for name, scores in f1.items():
        out[name] = dict(mean=sum(scores) / len(scores), min=min(scores), max=max(scores))
        if name != "full" and len(seeds) >= 2:
            d, half = paired_interval(scores, f1["full"])
            out[name]["minus_full"] = dict(mean=d, half_width_95=half)
    return out


def markdown(results: dict) -> str:
    lines = [
        header_md("Freezing and layer-wise decay on word segmentation", results["info"]),
        f"Command: `{results['command']}`. The book model fine-tuned as a tagger on "
        f"{results['budget']} labelled sentences, {results['steps']} steps, seeds "
        f"{results['seeds']}; word F1 on the test part ({results['test_sentences']} sentences).",
        "",
        "| scheme | word F1, mean (min–max) | − full: mean ± 95% (paired) |",
        "|---|---|---|",
    ]
    for name, e in results["summary"].items():
        d = e.get("minus_full")
        diff = f"{d['mean']:+.4f} ± {d['half_width_95']:.4f}" if d else "–"
        lines.append(f"| {name} | {e['mean']:.4f} ({e['min']:.4f}–{e['max']:.4f}) | {diff} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
    args = arguments(__doc__.splitlines()[0], "--quick").parse_args(argv)
    start = time.perf_counter()
    info = run_info()
    body, twin, vocab, data, news_words = transfer.load(False, args.quick)
    steps, seeds = (transfer.QUICK_STEPS, [0]) if args.quick else (STEPS, SEEDS)
    jobs = [(BUDGET, s, True, steps, transfer.LR, o) for s in seeds for o in SCHEMES.values()]
    shared = dict(body=body, twin=twin, vocab=vocab, data=data, news_words=news_words, tune=False)
    with get_context("spawn").Pool(transfer.WORKERS, transfer._init, (shared,)) as pool:
        rows = pool.map(transfer.finetune_job, jobs, chunksize=1)
    names = {tuple(sorted(o.items())): n for n, o in SCHEMES.items()}
    for r in rows:
        r["name"] = names[tuple(sorted(r.pop("scheme", {}).items()))]
    results = dict(
        info=info,
        command="python bench/segment_freezing.py" + (" --quick" if args.quick else ""),
        budget=BUDGET,
        steps=steps,
        seeds=seeds,
        test_sentences=len(data.test),
        schemes=SCHEMES,
        rows=rows,
        summary=summarise(rows, seeds),
    )
    results["seconds"] = round(time.perf_counter() - start, 1)
    path = save(results, "segment-freezing", markdown(results), args.out, "quick" * args.quick)
    print(f"wrote {path} and .md ({results['seconds']:.0f} s)")
    return results


if __name__ == "__main__":
    main()
