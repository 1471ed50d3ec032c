"""INT8 and the other inference speed-ups of chapter 08, with their accuracy cost, on the CPU.

  python bench/int8.py           the book model and a BERT-base encoder; bench/results/
  python bench/int8.py --tiny    (or --quick) a tiny random model, a few seconds: checks every
                                 path runs (CI); results int8-<date>-quick

Measured (torch threads: --threads, default 1; variants timed in alternation, medians):
  chain    the article's speed-up chain on the book model (tfx.learn.book_model, chapter 07's
           shape trained by `make book-model`), one held-out batch of 64 × 64: three Q/K/V
           projections → fused QKV → bf16 autocast → INT8 (torchao, eager and under
           torch.compile), and ONNX Runtime fp32 and its
           quantize_dynamic INT8 copy; held-out masked-token accuracy of every variant
  base     a BERT-base-sized encoder (12 layers, d 768, random weights) at batch 8 and lengths
           32, 128, 512: fp32, bf16 autocast, fp16 autocast (length 32 only: no fast path on this
           CPU), INT8 torchao eager and compiled
  sharing  ALBERT's cross-layer sharing: parameters, and chapter 07's training run repeated with
           every layer sharing one set of weights (equal steps), held-out accuracy of both
"""

import os
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout without installing tfx
os.environ.setdefault("TORCHAO_FORCE_SKIP_LOADING_SO_FILES", "1")

import tfx  # noqa: E402
from bench._common import arguments, save  # noqa: E402
from tfx.inspect.flops import n_params  # noqa: E402
from tfx.inspect.perf import alternate, header_md, run_info  # noqa: E402
from tfx.inspect.timing import threads  # noqa: E402
from tfx.learn import compress  # noqa: E402
from tfx.model.bert import BertConfig, BertForMaskedLM, BertModel  # noqa: E402

FULL = dict(rounds=5, base_rounds=3, base_batch=8, base_lengths=[32, 128, 512],
            base=dict(n_layers=12, d_model=768, n_heads=12, d_ff=3072, vocab_size=21128),
            compile=True, share=True)  # fmt: skip
TINY = dict(rounds=1, base_rounds=1, base_batch=2, base_lengths=[8, 16],
            base=dict(n_layers=2, d_model=64, n_heads=2, d_ff=128, vocab_size=100),
            compile=False, share=True)  # fmt: skip


def toy_mlm(steps: int = 3):
    """--tiny: a small random model and held-out batches of random ids (paths, not numbers)."""
    tfx.set_seed(0)
    cfg = BertConfig.tiny(
        vocab_size=64, max_len=16, dropout=0.0, attn_dropout=0.0, attn_impl="sdpa"
    )
    model = BertForMaskedLM(cfg).eval()
    ids = torch.randint(5, 64, (6, 16))  # (N, L)
    ids[::2, 12:] = 0  # padding, as in chapter 07's batches
    labels = torch.where((torch.rand(6, 16) < 0.3) & (ids != 0), ids, torch.full_like(ids, -100))
    inputs = torch.where(labels != -100, torch.full_like(ids, 4), ids)
    return model, list(zip(inputs.split(4), labels.split(4))), (0, 1, 2, 3, 4)


def bench_chain(cfg, model, batches, exclude, tmp: Path) -> dict:
    """Every step of the chain: time on one held-out batch, accuracy on all of them, bytes."""
    ids = batches[0][0]  # (B, L)
    mask = (ids != 0).long()  # (B, L)
    int8 = compress.quantize_int8(model)
    onnx32, exporter = compress.export_onnx(model, tmp / "mlm.onnx", ids[:4])
    onnx8 = compress.quantize_onnx(onnx32, tmp / "mlm-int8.onnx")
    predict = {
        "three projections, fp32": compress.tfx_predict(compress.unfuse_qkv(model)),
        "fused QKV, fp32": compress.tfx_predict(model),
        "fused QKV, bf16 autocast": compress.tfx_predict(model, bf16=True),
        "INT8 torchao, eager": compress.tfx_predict(int8),
        "ONNX Runtime fp32": compress.ort_predict(compress.ort_session(onnx32)),
        "ONNX Runtime INT8 (quantize_dynamic)": compress.ort_predict(compress.ort_session(onnx8)),
    }
    res = {"batch": list(ids.shape), "compile_s": None, "onnx_exporter": exporter}
    if cfg["compile"]:
        compiled = torch.compile(int8)
        t0 = time.perf_counter()
        with torch.inference_mode():
            compiled(ids, attention_mask=mask)
        res["compile_s"] = time.perf_counter() - t0
        predict["INT8 torchao, torch.compile"] = compress.tfx_predict(compiled)
    with torch.inference_mode():
        res["median_s"] = alternate(
            {k: (lambda p=p: p(ids, mask)) for k, p in predict.items()}, rounds=cfg["rounds"]
        )
        ref = model(ids, attention_mask=mask)  # (B, L, V)
        res["max_abs_logit_gap"] = {
            k: (p(ids, mask).float() - ref).abs().max().item() for k, p in predict.items()
        }
    res["accuracy"] = {
        k: compress.held_out_accuracy(p, batches, exclude) for k, p in predict.items()
    }
    res["scored_positions"] = int(sum(int((lab != -100).sum()) for _, lab in batches))
    res["stored_bytes"] = {
        "tfx fp32": compress.stored_bytes(model),
        "tfx INT8 torchao": compress.stored_bytes(int8),
        "ONNX fp32": onnx32.stat().st_size,
        "ONNX INT8": onnx8.stat().st_size,
    }
    return res


def bench_base(cfg) -> dict:
    """A BERT-base-sized encoder (random weights: speed does not depend on them) at batch 8."""
    tfx.set_seed(0)
    bcfg = BertConfig.base(**cfg["base"], attn_impl="sdpa", dropout=0.0, attn_dropout=0.0)
    enc = BertModel(bcfg, add_pooler=False).eval()
    int8 = compress.quantize_int8(enc)
    compiled = torch.compile(int8) if cfg["compile"] else None
    rows = {}
    for L in cfg["base_lengths"]:
        ids = torch.randint(5, bcfg.vocab_size, (cfg["base_batch"], L))  # (B, L)

        def run(m, dtype=None, ids=ids):
            with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
                return m(ids)  # (B, L, d)

        fns = {
            "fp32": lambda: run(enc),
            "bf16 autocast": lambda: run(enc, torch.bfloat16),
            "INT8 torchao, eager": lambda: run(int8),
        }
        if L == min(cfg["base_lengths"]):
            fns["fp16 autocast"] = lambda: run(enc, torch.float16)
        row = {"compile_s": None}
        if compiled is not None:
            t0 = time.perf_counter()
            with torch.inference_mode():
                run(compiled)
            row["compile_s"] = time.perf_counter() - t0
            fns["INT8 torchao, torch.compile"] = lambda: run(compiled)
        with torch.inference_mode():
            ref = run(enc)
            row["max_abs_gap"] = {k: (f().float() - ref).abs().max().item() for k, f in fns.items()}
            row["median_s"] = alternate(fns, rounds=cfg["base_rounds"], warmup=1)
        rows[str(L)] = row
        print(f"base L={L}", {k: f"{v * 1e3:.0f} ms" for k, v in row["median_s"].items()})
    return {"batch": cfg["base_batch"], "layers": bcfg.n_layers, "rows": rows}


def bench_sharing(cfg, tiny: bool) -> dict:
    """Chapter 07's run with every layer sharing one set of weights, against the unshared run."""
    from tfx.learn.train import MLMTrainer, TrainConfig, default_configs, pretrained_mlm

    if tiny:
        from tfx.learn.corpus import load_mlm_data

        data = load_mlm_data()
        model_cfg, _ = default_configs(len(data.vocab))
        train_cfg = TrainConfig(steps=3, eval_every=3, grad_every=3)
        plain = MLMTrainer(model_cfg, train_cfg, data, cache=False).run(3, progress=False)
    else:
        _, data, plain = pretrained_mlm()
        model_cfg, train_cfg = plain.model_cfg, plain.cfg
    shared = MLMTrainer(model_cfg, train_cfg, data, cache=False)  # same seed, same batches
    compress.share_layers(shared.model)
    params = list(shared.model.parameters())  # the shared layer once: an optimizer as chapter 07's
    shared.opt = torch.optim.AdamW(
        [
            {"params": [p for p in params if p.dim() >= 2], "weight_decay": train_cfg.weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
        ],
        lr=train_cfg.lr,
        foreach=True,
    )
    t0 = time.perf_counter()
    shared.run(train_cfg.steps, progress=False)
    return {
        "steps": train_cfg.steps,
        "train_s_shared": time.perf_counter() - t0,
        "params": {"unshared": n_params(plain.model), "shared": n_params(shared.model)},
        "encoder_params": {
            "unshared": n_params(plain.model.bert.layers),
            "shared": n_params(shared.model.bert.layers),
        },
        "accuracy": {"unshared": plain.log["accuracy"][-1], "shared": shared.log["accuracy"][-1]},
        "accuracy_curve": {
            "steps": plain.log["eval_step"],
            "unshared": plain.log["accuracy"],
            "shared": shared.log["accuracy"],
        },
    }


def to_markdown(res: dict) -> str:
    md = header_md("INT8, ONNX Runtime and shared layers (bench/int8.py)", res["info"])
    md += (
        f"torch {res['info']['torch']}, torchao {res['torchao']}, onnxruntime {res['onnxruntime']}"
    )
    md += f", threads {res['info']['threads']}  \nCommand: `{res['command']}`\n\n"
    ch = res["chain"]
    model = ch.get("model", "a tiny random model")
    md += f"## The speed-up chain, {model}, batch {ch['batch']}\n\n"
    md += "| variant | median ms | × fp32 fused | held-out accuracy | largest logit gap |\n"
    md += "|---|---|---|---|---|\n"
    ref = ch["median_s"]["fused QKV, fp32"]
    for k, s in ch["median_s"].items():
        md += (
            f"| {k} | {s * 1e3:.1f} | {ref / s:.2f} | {ch['accuracy'][k]:.4f} | "
            f"{ch['max_abs_logit_gap'][k]:.3f} |\n"
        )
    md += f"\n{ch['scored_positions']} scored positions; stored bytes: {ch['stored_bytes']}\n\n"
    base = res["base"]
    md += f"## BERT-base-sized encoder ({base['layers']} layers), batch {base['batch']}\n\n"
    md += "| length | variant | median ms | × fp32 | largest gap |\n|---|---|---|---|---|\n"
    for L, row in base["rows"].items():
        for k, s in row["median_s"].items():
            md += (
                f"| {L} | {k} | {s * 1e3:.1f} | {row['median_s']['fp32'] / s:.2f} | "
                f"{row['max_abs_gap'][k]:.3f} |\n"
            )
    sh = res.get("sharing")
    if sh:
        md += f"\n## Shared layers (ALBERT), {sh['steps']} steps each\n\n"
        md += "| model | parameters | encoder-layer parameters | held-out accuracy |\n"
        md += "|---|---|---|---|\n"
        for k in ("unshared", "shared"):
            md += (
                f"| {k} | {sh['params'][k]} | {sh['encoder_params'][k]} | "
                f"{sh['accuracy'][k]:.4f} |\n"
            )
    return md


def main(argv=None) -> Path:
    parser = arguments(
        __doc__.split("\n\n")[0],
        "--tiny",
        "--quick",
        help="tiny random sizes, for CI (results: -quick)",
    )
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--no-sharing", action="store_true", help="skip the shared-layer run")
    args = parser.parse_args(argv)
    cfg = dict(TINY if args.tiny else FULL)
    cfg["share"] = cfg["share"] and not args.no_sharing
    import onnxruntime
    import torchao

    if args.tiny:
        model, batches, exclude = toy_mlm()
    else:  # the book model, scored on the held-out positions of its manifest
        from tfx.learn.book_model import held_out, load_book_model

        model, _ = load_book_model()
        batches, exclude = held_out()
    res = {
        "mode": "tiny" if args.tiny else "full",
        "config": cfg,
        "torchao": torchao.__version__,
        "onnxruntime": onnxruntime.__version__,
        "command": " ".join(
            ["python bench/int8.py", *(argv if argv is not None else sys.argv[1:])]
        ),
    }
    with threads(args.threads), tempfile.TemporaryDirectory() as tmp:
        res["info"] = run_info()
        res["chain"] = bench_chain(cfg, model, batches, exclude, Path(tmp))
        if not args.tiny:
            from tfx.learn.book_model import RECIPE_VERSION

            res["chain"]["model"] = f"the book model ({RECIPE_VERSION})"
        print("chain", {k: f"{v * 1e3:.0f} ms" for k, v in res["chain"]["median_s"].items()})
        print("accuracy", res["chain"]["accuracy"])
        res["base"] = bench_base(cfg)
        if cfg["share"]:
            res["sharing"] = bench_sharing(cfg, args.tiny)
            print("sharing", res["sharing"]["accuracy"], res["sharing"]["params"])
    res["info"]["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    path = save(res, "int8", to_markdown(res), args.out, "quick" if args.tiny else "")
    print(f"wrote {path}")
    return path


if __name__ == "__main__":
    main()
