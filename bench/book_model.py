"""Train the book model (tfx.learn.book_model.recipe) with the book's own MLMTrainer, pick the
checkpoint by held-out loss, and write models/book-mlm: a Hugging Face folder with its training log
and a manifest, plus a results file that compares the model with the copy rule and the bigram on the
same held-out positions.

  python bench/book_model.py           the whole recipe, about an hour on 2 cores (make book-model)
  python bench/book_model.py --check   the same, then the final metrics against the committed
                                       manifest's, within --tolerance
  python bench/book_model.py --steps 40 --out /tmp/x   the recipe's first steps only (tests)

Held-out evaluation every eval_every steps: accuracy and cross-entropy at [MASK], random and
unchanged positions (tfx.learn.mlm_eval), on the 4,031 positions that MLMTrainer masks once with
seed
12345. The checkpoint kept is the one with the lowest cross-entropy at the held-out [MASK]
positions. Segments go through MLMTrainer's cache (.cache/tfx-models), so an interrupted run
resumes where it stopped.
"""

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing tfx

import torch  # noqa: E402

from tfx.inspect.timing import cpu_model, threads  # noqa: E402
from tfx.learn import book_model  # noqa: E402
from tfx.learn.corpus import TATOEBA_TSV_SHA256, load_mlm_data  # noqa: E402
from tfx.learn.mlm_eval import baselines, evaluate  # noqa: E402
from tfx.learn.train import MLMTrainer  # noqa: E402

# The issue's targets for the [MASK] positions of the held-out set.
TARGETS = {"accuracy": 0.50, "cross_entropy": 2.7}
PROBES = [
    ("我喜欢吃[MASK]果。", ("苹", "蘋", "水")),
    ("你叫什么名[MASK]？", ("字",)),
    ("他是我的朋[MASK]。", ("友",)),
    ("我[MASK]你。", ("爱",)),
    ("今天天[MASK]很好。", ("气",)),
]


class BookTrainer(MLMTrainer):
    """MLMTrainer whose evaluation also records held-out cross-entropy and accuracy by kind of
    position (log["held_out"], one dict per evaluation); the accuracy it returns (log["accuracy"])
    is over all scored positions, as chapter 07's."""

    def evaluate(self) -> float:
        m = evaluate(self.model, self.held_out, self.mask_id, exclude=self.special)
        self.log.setdefault("held_out", []).append({"step": self.step, **m})
        return m["all"]["accuracy"]


def probe(model, vocab, k: int = 5) -> list:
    """Top-k (excluding special tokens) at the [MASK] of each probe sentence."""
    from tfx.learn.mlm import top_k

    out = []
    for text, ok in PROBES:
        seq = torch.tensor([[vocab["[CLS]"], *vocab.encode(text), vocab["[SEP]"]]])  # (1, L)
        pos = seq[0].tolist().index(vocab["[MASK]"])
        top = top_k(model, seq, pos, k, exclude=vocab.special_ids)
        tokens = [vocab.itos[i] for i, _ in top]
        out.append(
            {
                "text": text,
                "top": [[vocab.itos[i], round(p, 4)] for i, p in top],
                "expected": list(ok),
                "top1_ok": tokens[0] in ok,
            }
        )
    return out


def train(steps: int = None, n_threads: int = None, cache: bool = True, echo=print):
    """Run the recipe (its first `steps` steps when given; the schedule stays the full run's).
    Returns (trainer, data, best_step, best_state_dict)."""
    n_threads = n_threads or book_model.THREADS
    data = load_mlm_data()
    model_cfg, train_cfg = book_model.recipe(len(data.vocab), data.train.size(1))
    trainer = BookTrainer(model_cfg, train_cfg, data, cache=cache, n_threads=n_threads)
    until_last = steps or train_cfg.steps
    best = (float("inf"), None, None)
    t0 = time.perf_counter()
    marks = list(range(train_cfg.eval_every, until_last + 1, train_cfg.eval_every))
    for until in marks + ([until_last] if until_last not in marks else []):
        trainer.run(until, progress=False)
        last = trainer.log.get("held_out", [])
        if last and last[-1]["step"] == until:
            h = last[-1]
            ce = h["mask"]["cross_entropy"]
            if ce < best[0]:
                state = {k: v.clone() for k, v in trainer.model.state_dict().items()}
                best = (ce, until, state)
            loss = statistics.mean(trainer.log["loss"][max(0, until - train_cfg.eval_every) :])
            echo(
                f"step {until}: training loss {loss:.3f}, held-out [MASK] cross-entropy "
                f"{ce:.3f}, accuracy {h['mask']['accuracy']:.4f} (all scored "
                f"{h['all']['accuracy']:.4f}), {time.perf_counter() - t0:.0f} s"
            )
    if best[2] is None:  # no evaluation in a very short run: keep the last weights
        best = (None, trainer.step, {k: v.clone() for k, v in trainer.model.state_dict().items()})
    return trainer, data, best[1], best[2]


def metrics(model, trainer, data) -> dict:
    v = data.vocab
    inputs = torch.cat([i for i, _ in trainer.held_out])  # (N_rows, L)
    labels = torch.cat([lab for _, lab in trainer.held_out])  # (N_rows, L)
    with threads(trainer.n_threads):
        ours = evaluate(model, trainer.held_out, v["[MASK]"], exclude=v.special_ids)
    return {"model": ours, **baselines(data.train, inputs, labels, v["[MASK]"], v.special_ids)}


def verdict(m: dict) -> dict:
    mine, bigram = m["model"]["mask"], m["bigram"]["mask"]
    return {
        "accuracy >= 0.50": mine["accuracy"] >= TARGETS["accuracy"],
        "cross-entropy <= 2.7": mine["cross_entropy"] <= TARGETS["cross_entropy"],
        "accuracy past the bigram": mine["accuracy"] > bigram["accuracy"],
        "cross-entropy past the bigram": mine["cross_entropy"] < bigram["cross_entropy"],
    }


def markdown(record: dict) -> str:
    m = record["metrics"]
    lines = [
        f"# The book model ({record['recipe_version']}), {record['date']}",
        "",
        f"machine: {record['machine']}; training threads {record['threads']}; "
        f"wall time {record['train_wall_s'] / 60:.1f} min (on a shared machine)",
        "",
        f"command: `{record['command']}`",
        "",
        f"checkpoint: step {record['checkpoint_step']} of {record['train']['steps']} "
        "(lowest held-out [MASK] cross-entropy)",
        "",
        "Held-out positions (MLMTrainer's seed-12345 masking of the held-out sentences):",
        "",
        "| predictor | [MASK] accuracy | [MASK] cross-entropy | random acc. | unchanged acc. "
        "| all scored acc. |",
        "|---|---|---|---|---|---|",
    ]
    for name in ("model", "bigram", "copy rule"):
        r = m[name]
        ce = r["mask"]["cross_entropy"]
        lines.append(
            f"| {name} | {r['mask']['accuracy']:.4f} | "
            + (f"{ce:.3f} nats" if ce is not None else "–")
            + f" | {r['random']['accuracy']:.4f} | {r['unchanged']['accuracy']:.4f} "
            f"| {r['all']['accuracy']:.4f} |"
        )
    n = m["model"]
    lines += [
        "",
        f"positions: {n['all']['n']} scored, {n['mask']['n']} [MASK], {n['random']['n']} "
        f"random, {n['unchanged']['n']} unchanged",
        "",
        "Targets (issue 19): "
        + "; ".join(f"{k}: {'met' if ok else 'NOT met'}" for k, ok in record["verdict"].items()),
        "",
        "Probes (top 5, special tokens excluded):",
        "",
    ]
    for p in record["probes"]:
        top = " ".join(f"{t} {q:.3f}" for t, q in p["top"])
        lines.append(
            f"- `{p['text']}` → {top} ({'ok' if p['top1_ok'] else 'not'} {'/'.join(p['expected'])})"
        )
    lines += [
        "",
        "Held-out curve ([MASK] positions):",
        "",
        "| step | cross-entropy | accuracy |",
        "|---|---|---|",
    ]
    for h in record["curve"]:
        lines.append(f"| {h['step']} | {h['ce']:.3f} | {h['acc']:.4f} |")
    return "\n".join(lines) + "\n"


def model_card(manifest: dict) -> str:
    """models/book-mlm/README.md, written from the manifest (every number is the recipe's)."""
    from tfx.learn.data import TATOEBA

    m, cfg, tr, d = manifest["metrics"], manifest["model"], manifest["train"], manifest["data"]
    mine, bigram, copy = m["model"]["mask"], m["bigram"]["mask"], m["copy rule"]["mask"]
    n_params = manifest.get("n_params")
    threads = f"{manifest['threads']} thread" + ("s" if manifest["threads"] > 1 else "")
    met = "; ".join(f"{k}: {'met' if ok else 'not met'}" for k, ok in manifest["verdict"].items())
    probes = "\n".join(
        f"| `{p['text']}` | {' '.join(t for t, _ in p['top'])} | {'/'.join(p['expected'])} |"
        for p in manifest["probes"]
    )
    return f"""---
language: zh
license: cc-by-2.0
library_name: transformers
pipeline_tag: fill-mask
tags: [bert, masked-lm, chinese, character-level, textbook]
---

# book-mlm: the tfx book's small Chinese BERT

A character-level BERT masked-language model, {cfg["n_layers"]} layers × {cfg["n_heads"]} heads,
d_model {cfg["d_model"]}, d_ff {cfg["d_ff"]}, {cfg["max_len"]} positions, a vocabulary of
{cfg["vocab_size"]:,} characters{f", {n_params:,} parameters" if n_params else ""}. It was
pre-trained from scratch by the book's own training loop (`tfx.learn.train.MLMTrainer`), recipe
`{manifest["recipe_version"]}` (`tfx/learn/book_model.py`, `bench/book_model.py`, `make
book-model`), for {tr["steps"]:,} steps of {tr["batch_size"]} sequences of {cfg["max_len"]} tokens,
peak learning rate {tr["lr"]:g}, dropout {cfg["dropout"]:g} on the hidden states and
{cfg["attn_dropout"]:g} on the attention weights, on {manifest["machine"]}
({manifest["cpu_capability"]}), {threads}, torch {manifest["torch"]}. The checkpoint is step
{manifest["checkpoint_step"]:,}, the one with the lowest held-out cross-entropy at [MASK]
positions.

```python
from transformers import pipeline
pipeline("fill-mask", model="models/book-mlm")("我喜欢吃[MASK]果。")
```

or, as a tfx model: `model, vocab = tfx.learn.book_model.load_book_model()`.

## Data, licence and attribution

{TATOEBA.credit} The {d["train_rows"] + d["held_out_rows"]:,} packed rows come from Tatoeba's
distinct Chinese sentences, split by a hash of each sentence (5 % held out), one token per
character, traditional characters converted to simplified with OpenCC's t2s table before
deduplication (`tfx.learn.corpus.load_mlm_data`;
tatoeba.tsv sha256 `{d["tatoeba_tsv_sha256"]}`, packed data checksum `{d["packed_checksum"]}`).
Tatoeba's sentences are © their contributors, under CC BY 2.0 FR
(https://creativecommons.org/licenses/by/2.0/fr/); the weights are derived from them and are
shared under the same licence, with this attribution.

## Held-out results

{mine["n"]:,} held-out [MASK] positions (the recipe masks the held-out sentences once, seed
12345); the baselines are computed on the same positions (`tfx.learn.mlm_eval`):

| predictor | accuracy at [MASK] | cross-entropy at [MASK] |
|---|---|---|
| this model | {mine["accuracy"]:.3f} | {mine["cross_entropy"]:.2f} nats |
| bidirectional bigram, P(c given left) · P(right given c), training-split counts | \
{bigram["accuracy"]:.3f} | {bigram["cross_entropy"]:.2f} nats |
| copy rule (no context: the most frequent character) | {copy["accuracy"]:.3f} | – |

Targets of issue 19 (accuracy ≥ 0.50, cross-entropy ≤ 2.7 nats, both past the bigram): {met}.

| probe | top 5 | expected |
|---|---|---|
{probes}

`manifest.json` holds every number above, the configurations, versions and the weights' sha256;
`training_log.json` holds the loss of every step, the held-out evaluations (by [MASK], random and
unchanged positions) and each layer's gradient norm every {tr["grad_every"]} steps.

## What it is for, and what it cannot do

It is a teaching model: small enough to run and inspect on a laptop CPU, trained far enough that
its attention and its predictions show what masked-LM pre-training learns. It is not a general
Chinese language model. It knows only the short conversational sentences of Tatoeba, at most
{cfg["max_len"] - 2} characters at a time; characters outside its {cfg["vocab_size"]:,}-character
vocabulary (and any Latin letters or digits that the tokenizer does not split into known
characters) are [UNK]; it has no word segmentation, no next-sentence objective and no pooler; and
its predictions carry the biases of a small crowd-sourced corpus. Do not use it for anything that
matters.
"""


def steady_memory() -> None:
    """Fix glibc's mmap threshold at 1 MiB. glibc raises the threshold each time a large block is
    freed, after which the (N, V) logits of every step, a different N each time, are carved from
    the heap and fragment it: observed here, a batch-128 version of this run grew from 0.9 to
    1.8 GB in its first 250 steps without it, and runs with it stayed near 0.5 GB. Where and how
    memory is allocated does not change what is computed. No-op off glibc."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD = -3
    except (OSError, AttributeError):
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, help="stop after this many steps (tests)")
    parser.add_argument(
        "--threads",
        type=int,
        default=book_model.THREADS,
        help=f"torch threads (default {book_model.THREADS}, the recipe's: another count trains "
        "other weights in the last bits)",
    )
    parser.add_argument("--out", type=Path, default=book_model.FOLDER)
    parser.add_argument("--results", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--no-cache", action="store_true", help="do not read or write segments")
    parser.add_argument(
        "--check",
        action="store_true",
        help="compare the final metrics with the committed manifest's",
    )
    parser.add_argument(
        "--tolerance",
        type=float,
        default=0.02,
        help="--check: largest difference in [MASK] accuracy and cross-entropy",
    )
    parser.add_argument(
        "--card", action="store_true", help="only write --out's README.md from its manifest"
    )
    args = parser.parse_args()
    if args.card:
        manifest = json.loads((args.out / book_model.MANIFEST).read_text(encoding="utf-8"))
        (args.out / "README.md").write_text(model_card(manifest), encoding="utf-8")
        return
    steady_memory()
    committed = None
    if args.check:
        committed = json.loads((book_model.FOLDER / book_model.MANIFEST).read_text())
        if args.out == book_model.FOLDER:
            args.out = ROOT / ".cache" / "book-model-check"
    started = datetime.datetime.now(datetime.timezone.utc)
    t0 = time.perf_counter()
    trainer, data, best_step, best_state = train(
        args.steps, args.threads, not args.no_cache, lambda s: print(s, flush=True)
    )
    wall = time.perf_counter() - t0
    model = trainer.model
    model.load_state_dict(best_state)
    model.eval()
    m = metrics(model, trainer, data)
    with threads(trainer.n_threads):
        probes = probe(model, data.vocab)
    cfg = trainer.cfg
    command = "python bench/book_model.py " + " ".join(sys.argv[1:])
    record = {
        "recipe_version": book_model.RECIPE_VERSION,
        "date": started.isoformat(timespec="seconds"),
        "command": command.strip(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "machine": f"{cpu_model()}, {os.cpu_count()} cores",
        "threads": trainer.n_threads,
        "data": {
            "tatoeba_tsv_sha256": TATOEBA_TSV_SHA256,
            "packed_checksum": data.checksum,
            "script": "simplified (opencc t2s)",
            "train_rows": data.train.size(0),
            "held_out_rows": data.held_out.size(0),
            "vocab_size": len(data.vocab),
        },
        "model": trainer.model_cfg.to_dict(),
        "train": {k: v for k, v in vars(cfg).items() if k != "masking"}
        | {"masking": vars(cfg.masking)},
        "steps_run": trainer.step,
        "checkpoint_step": best_step,
        "train_wall_s": round(wall, 1),
        "metrics": m,
        "probes": probes,
        "curve": [
            {"step": h["step"], "ce": h["mask"]["cross_entropy"], "acc": h["mask"]["accuracy"]}
            for h in trainer.log.get("held_out", [])
        ],
    }
    record["verdict"] = verdict(m)
    log = {
        "loss": trainer.log["loss"],
        "lr": trainer.log["lr"],
        "held_out": trainer.log.get("held_out", []),
        "grad_norms_per_layer": {str(k): v for k, v in sorted(trainer.log["grad"].items())},
        "grad_every": cfg.grad_every,
    }
    manifest = {k: v for k, v in record.items() if k not in ("curve",)}
    manifest["n_params"] = sum(p.numel() for p in model.parameters())
    manifest = book_model.save_folder(model, data.vocab.itos, args.out, manifest, log)
    (args.out / "README.md").write_text(model_card(manifest), encoding="utf-8")
    day = started.date().isoformat()
    if args.out == book_model.FOLDER:
        args.results.mkdir(parents=True, exist_ok=True)
        stem = args.results / f"{book_model.RECIPE_VERSION}-{day}"  # one file per recipe
        stem.with_suffix(".json").write_text(
            json.dumps(record, indent=1, ensure_ascii=False) + "\n"
        )
        stem.with_suffix(".md").write_text(markdown(record))
    print(markdown(record))
    if committed is not None:
        bad = []
        for key in ("accuracy", "cross_entropy"):
            a, b = m["model"]["mask"][key], committed["metrics"]["model"]["mask"][key]
            if abs(a - b) > args.tolerance:
                bad.append(f"[MASK] {key} {a:.4f}, committed {b:.4f}")
        if bad:
            sys.exit(
                "the rerun differs from the committed model by more than "
                f"{args.tolerance}: " + "; ".join(bad)
            )
        print(f"--check: final metrics within {args.tolerance} of the committed manifest's")


if __name__ == "__main__":
    main()
