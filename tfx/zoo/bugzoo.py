"""The bug zoo: the ways a Transformer quietly breaks, each injected into tfx's own parts beside
its healthy twin (tfx.zoo.bugs), with the symptom a person meets and the tfx.inspect.diagnose call
that confirms it.

BUGS is the catalogue (an ordered dict id → Bug); demo(bug_id, injected) runs one bug's symptom and
its diagnostic on a tiny model in well under two seconds, and prints only what holds on any CPU
(verdicts, counts, bounds, values rounded far above rounding noise). The injections are small on
purpose: a chapter shows each buggy line next to the correct one with tfx.book.source.show_source.

Built in chapter 11.
"""

import warnings
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from tfx.core.stable import below
from tfx.inspect import diagnose
from tfx.learn.mlm import mask_tokens
from tfx.model.attention import MultiHeadAttention, causal_mask
from tfx.model.bert import BertConfig, BertForMaskedLM, BertModel
from tfx.model.layers import EncoderLayer
from tfx.zoo.bugs import (
    PAD,
    ContiguousMergeAttention,
    GradCutNet,
    GradNet,
    KernelAttention,
    TinyCausalLM,
    ViewHeadsAttention,
    ViewMergeAttention,
    attention,
    attention_additive_mask,
    attention_fill_1e9,
    attention_inf_mask,
    attention_softmax_queries,
    attention_unscaled,
    bert_without_positions,
    causal_mask_off_by_one,
    freeze_bottom,
    freeze_norms,
    loss_counting_pad,
    loss_ignoring_pad,
    mlm_batch_all_positions,
    smoothing_onto_pad,
    smoothing_without_pad,
    to_half_precision,
)


@dataclass(frozen=True)
class Bug:
    """One entry of the catalogue: what a person meets, why, how to confirm it, how to fix it, and
    what the confirming diagnostic cannot tell apart (blind)."""

    id: str
    title: str
    symptom: str
    cause: str
    confirm: str
    fix: str
    claims: tuple = ()
    blind: str = ""


@dataclass
class Demo:
    """What demo() returns: the text (symptom and finding), the Finding, an optional figure."""

    text: str
    finding: diagnose.Finding
    figure: object = None


@contextmanager
def _seeded(seed: int = 0):
    """Draw from torch's global generator (module initialisation) without disturbing the
    reader's: fork it, seed it, restore it."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


# ---- the catalogue ------------------------------------------------------------------------------

_D = "tfx.inspect.diagnose."
BUGS = {
    b.id: b
    for b in [
        Bug(
            "unscaled-scores",
            "Scores not divided by √d_k",
            "attention rows peaked from the start (at BERT's initialisation, L = 128: largest "
            "weight 0.35 per row against 0.02 scaled), nearly one-hot once q and k grow to unit "
            "size",
            "q kᵀ has a spread of √d_k times q's and k's; unscaled, the softmax saturates as they "
            "grow, and its gradient vanishes",
            _D + "attention_kernel(my_attention)",
            "divide the scores by math.sqrt(d_k)",
            blind="a right kernel with another interface (an additive mask, True = hidden as in "
            "nn.MultiheadAttention): wrap it as fn(q, k, v, mask), True = may attend, first",
        ),
        Bug(
            "inf-mask-nan",
            "−inf mask on a fully padded row",
            "with pad positions left out of the loss, the first loss is finite but every "
            "parameter's gradient is nan, and from the second step on the loss is nan (a batch "
            "with an all-padding row, or a left-padded causal row)",
            "softmax of a row that is −inf everywhere is 0/0 = nan; the loss skips the row, its "
            "backward does not",
            _D + "first_nonfinite(model, x, mask)",
            "fill with torch.finfo(dtype).min, not −inf, and zero fully masked rows",
            blind="a nan born in the backward pass or the loss: it hooks the forward pass only",
        ),
        Bug(
            "fp16-mask-overflow",
            "−1e9 mask in float16",
            "float16 run: masked_fill raises 'value cannot be converted', or nan appears where "
            "float32 was fine",
            "−1e9 is beyond float16's range (65 504): an additive mask cast to half becomes −inf",
            _D + "first_nonfinite(model.half(), x.half(), mask)",
            "mask with torch.finfo(scores.dtype).min, or compute the scores in float32",
            blind="the fill that raises (forward_error names that one); a nan born in the backward",
        ),
        Bug(
            "causal-off-by-one",
            "Causal mask off by one",
            "a next-token model's training loss falls far below what the data allows; generation "
            "is gibberish",
            "tril(1) instead of tril(): position i sees token i + 1, the one it must predict",
            _D + "future_leak(model, ids)",
            "torch.ones(L, L, dtype=torch.bool).tril() (tfx.model.attention.causal_mask)",
            blind="a model meant to see both ways (BERT) 'leaks' too: run it on causal models only",
        ),
        Bug(
            "view-not-transpose",
            "view where transpose was needed (heads)",
            "shapes all right, training works but worse; outputs differ from a reference "
            "implementation with the same weights",
            "view(B, L, H·d_k) on (B, H, L, d_k) reads the memory in the wrong order: each row "
            "mixes positions",
            _D + "permutation_test(attn_layer, x)",
            "t.view(B, L, H, d_k).transpose(1, 2), and back with transpose(1, 2).reshape",
            blind="a healthy layer with positions inside (RoPE, a relative bias) fires too; a "
            "causal layer is tested on its last row only",
        ),
        Bug(
            "view-not-contiguous",
            "view without .contiguous()",
            "RuntimeError: view size is not compatible with input tensor's size and stride",
            "transpose makes a tensor non-contiguous; view cannot reinterpret its memory",
            _D + "forward_error(model, x)",
            ".transpose(1, 2).contiguous().view(…) or .reshape(…)",
            ("A50",),
            "which line of the module raised: it names the innermost module running",
        ),
        Bug(
            "softmax-wrong-dim",
            "Softmax over the wrong dimension",
            "attention rows do not sum to 1 (its columns do); a token's output depends on the "
            "other queries",
            "softmax(dim=-2) normalises over the queries instead of the keys",
            _D + "attention_kernel(my_attention)",
            "softmax(dim=-1): over the keys, the last dimension of (…, L_q, L_k)",
            blind="a bug outside its list: it then says the output differs, and names nothing",
        ),
        Bug(
            "missing-positions",
            "Position embeddings missing",
            "the model gives the same answer for a sentence and its reversal; fill-mask guesses "
            "ignore word order",
            "without positions, self-attention is permutation-equivariant: a bag of tokens",
            _D + "position_test(model, input_ids)",
            "add the position embedding (or RoPE / ALiBi) before the first layer",
            blind="positions present but too weak to move the other rows by 1e-5 of their size",
        ),
        Bug(
            "frozen-layernorm",
            "Only the LayerNorms frozen while fine-tuning",
            "every tensor moves but the LayerNorms' γ and β: the run follows another recipe than "
            "the one written",
            'a freeze by name (\'norm\', or the weight-decay list ["bias", "LayerNorm.weight"] '
            "reused as a freeze list) caught the norms; LayerNorm keeps no statistics, so only "
            "γ, β stop",
            _D + "frozen_parameters(model, optimizer)",
            "freeze by module (block.requires_grad_(False)), not by name; rebuild the optimizer "
            "after freezing",
            blind="intent: a recipe that freezes only the norms on purpose fires too (chapter 10 "
            "measured LayerNorm's trainability within noise, A10)",
        ),
        Bug(
            "grad-cut",
            "Gradient cut: requires_grad=False, no_grad, detach, non-leaf",
            "a parameter's .grad is None, or its gradient-norm row is missing; x.grad is None",
            "a frozen parameter, a module run under torch.no_grad(), a .detach(), or .grad read on "
            "a non-leaf tensor (x = leaf.float() of a leaf that is not float32 already)",
            _D + "missing_grads(model, loss_fn, {'x': x})",
            "unfreeze, take the module out of no_grad, drop detach(); read the leaf's .grad, or "
            "call retain_grad()",
            ("A53",),
            "a forgotten freeze from a deliberate one (BitFit, LoRA): frozen parameters are "
            "listed, and only the other three cuts fire",
        ),
        Bug(
            "pad-in-loss",
            "Padding counted in the loss",
            "the loss depends on how much a batch is padded; the model learns to predict [PAD]",
            "cross-entropy without ignore_index scores the [PAD] targets too",
            _D + "loss_support(loss_fn, logits, targets, pad_id=0)",
            "F.cross_entropy(…, ignore_index=pad_id) (or labels of -100 at pad)",
            ("N26",),
            "which positions are padding: it trusts pad_id and the targets",
        ),
        Bug(
            "smoothing-on-pad",
            "Label smoothing puts mass on <pad>",
            "a trained model gives <pad> probability ε/V at every real position (0.0125 at V = 8)",
            "the smoothed target spreads ε over all V classes, <pad> included",
            _D + "loss_support(loss_fn, logits, targets, pad_id=0)",
            "spread ε over the classes that are not <pad>, and set the pad column to 0",
            ("N26",),
            "intent: it fires when <pad> gets 1e-3 or more, whoever wrote the loss; torch's "
            "label_smoothing at 21,128 tokens (5e-06) is noted and quiet",
        ),
        Bug(
            "mlm-all-positions",
            "MLM loss over all positions",
            "the MLM loss drops fast, fill-mask stays poor: most scored tokens are visible in the "
            "input",
            "labels = ids.clone() scores every position, so copying the input pays",
            _D + "mlm_labels(inputs, labels, special_ids)",
            "labels = -100 except at the ~15% selected positions (tfx.learn.mlm.mask_tokens)",
            blind="an objective meant to score most tokens (ELECTRA's discriminator scores all)",
        ),
        Bug(
            "no-warmup-post-ln",
            "No warm-up on a post-LN stack",
            "the loss jumps about and stalls far above where a warmed-up run converges",
            "post-LN at a large rate from step 1: early Adam steps move every weight by about the "
            "rate, too far for it",
            _D + "warmup_check(lrs, model)",
            "a linear warm-up over the first steps (or pre-LN, or RAdam)",
            blind="a run that needed warm-up at a first step under 1% of its weights: the 1% line "
            "is a rule of thumb that passes fine-tuning rates, not a measured edge",
        ),
        Bug(
            "fp16-no-loss-scaling",
            "float16 without loss scaling",
            "under autocast to float16 the weights stop moving though the loss is not 0: every "
            "weight gradient is exactly 0",
            "autocast runs the backward in float16, where small gradients (below 6e-08) flush to "
            "0 before they reach the float32 weights",
            _D + "grad_health(model)",
            "scale the loss (torch.amp.GradScaler, grad_health(model, scaler) after unscale_), "
            "or use bfloat16",
            blind="a Linear fed one-hot or sparse inputs (most of its gradient exactly 0, "
            "rightly); an underflow of fewer than 90% of the entries",
        ),
        Bug(
            "dead-layer",
            "A dead layer, and the max/min printout",
            "one layer never changes; a max/min gradient printout shows max=0.0000 lines for it "
            "and also for healthy query/key projections",
            "every unit of an FFN inactive (bias pushed far negative) gives an exactly zero "
            "gradient; 4 decimals also round BERT's small but healthy W_Q, W_K gradients to 0",
            _D + "dead_layers(model)",
            "re-initialise the layer; compare per-module gradient norms, not printed extremes",
            ("N28",),
            "a partly dead FFN (its live units carry the gradient); a LoRA adapter's A at its "
            "first step; under BitFit it judges only the head",
        ),
        Bug(
            "half-casts-nothing",
            "'Casting to half' that casts nothing",
            "the model is no smaller after to_half_precision; nothing changed",
            "the conversion tests for float32, and every array is float64 (numpy's default)",
            _D + "dtype_census(params, expected='float16')",
            "convert whatever float dtype is there, and check the census afterwards",
            ("N23",),
            "which arrays should have been cast: it counts dtypes, it does not know the intent",
        ),
    ]
}


def _code(text: str) -> str:
    """A table cell's code span: one line, and a `|` would split the cell."""
    return " ".join(text.split()).replace("|", "\\|")


def _text(text: str) -> str:
    """A table cell's prose: `<pad>` would be read as an HTML tag and vanish, so < and > become
    entities."""
    return _code(text).replace("<", "&lt;").replace(">", "&gt;")


def table(link=None, bugs: dict = None) -> str:
    """The catalogue (or `bugs`) as a markdown table: symptom, likely cause, the call that confirms
    it, what that call cannot tell apart, the fix, and a link to each bug's section of chapter 11
    (labelled (bug-<id>)=): `link(bug)` gives that cell, by default `[§](#bug-<id>)` (the
    Troubleshooting page passes a cross-page one)."""
    link = link or (lambda b: f"[§](#bug-{b.id})")
    rows = [
        "| symptom | likely cause | the call that confirms it | it cannot tell apart | fix | |",
        "|---|---|---|---|---|---|",
    ]
    for b in (BUGS if bugs is None else bugs).values():
        rows.append(
            f"| {_text(b.symptom)} | {_text(b.cause)} | `{_code(b.confirm)}` | "
            f"{_text(b.blind) or '—'} | {_text(b.fix)} | {link(b)} |"
        )
    return "\n".join(rows)


def demo(bug_id: str, injected: bool = True) -> Demo:
    """Run bug_id's symptom and its diagnostic, on the buggy version (injected) or the healthy
    one; the healthy version's finding is quiet."""
    if bug_id not in BUGS:
        raise ValueError(f"bug_id must be one of {', '.join(BUGS)}, got {bug_id!r}")
    if not isinstance(injected, bool):
        raise TypeError(f"injected must be True or False, got {injected!r}")
    with _seeded(0):
        lines, finding, figure = _DEMOS[bug_id](injected)
    state = "injected" if injected else "healthy"
    text = "\n".join([f"{BUGS[bug_id].title} ({state})", *lines, str(finding)])
    return Demo(text, finding, figure)


def pair(bug_id: str) -> tuple:
    """(injected, healthy): demo(bug_id) both ways, their texts printed one after the other, the
    form each section of chapter 11 takes before it asserts that the first fires and the second
    stays quiet."""
    bad, good = demo(bug_id), demo(bug_id, injected=False)
    print(bad.text, good.text, sep="\n\n")
    return bad, good


def frame(bug: str, injected: bool):
    """The bug-zoo widget's frame: demo's text, or (text, figure)."""
    d = demo(bug, injected)
    return d.text if d.figure is None else (d.text, d.figure)


# ---- the demos: (lines of symptom, Finding, figure or None) ------------------------------------


def _qkv(d_k=64, L=8):
    g = torch.Generator().manual_seed(0)
    return (torch.randn(1, 1, L, d_k, generator=g, dtype=torch.float64) for _ in range(3))


def _row_max(q, k, scale):
    """The largest attention weight of each row, on average: softmax(q kᵀ · scale)."""
    return (q @ k.transpose(-2, -1) * scale).softmax(-1).max(-1).values.mean().item()


def _demo_unscaled(injected):
    fn = attention_unscaled if injected else attention
    g = torch.Generator().manual_seed(0)
    x = torch.randn(128, 768, generator=g, dtype=torch.float64)  # (L, d_model): LayerNorm'd
    w_q, w_k = (0.02 * torch.randn(768, 64, generator=g, dtype=torch.float64) for _ in range(2))
    q, k = x @ w_q, x @ w_k  # (L, d_k) each, one head at BERT's initialisation
    scale = 1.0 if injected else 1 / 8.0
    w = (q @ k.transpose(-2, -1) * scale).softmax(-1)  # (L, L)
    unit_q, unit_k = (torch.randn(128, 64, generator=g, dtype=torch.float64) for _ in range(2))
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(3.4, 2.8))
    ax.imshow(w.numpy(), cmap="viridis", vmin=0, vmax=1)
    ax.set(title=f"BERT's init, L = 128 ({'unscaled' if injected else 'scaled'})")
    ax.set(xlabel="key", ylabel="query")
    fig.tight_layout()
    lines = [
        f"d_k = 64, L = 128 (uniform weights would be {1 / 128:.3f}); the largest weight in each "
        "row, on average:",
        f"  q, k at BERT's initialisation (weights N(0, 0.02²)): {_row_max(q, k, scale):.2f}",
        f"  q, k of unit variance (training can grow them): {_row_max(unit_q, unit_k, scale):.2f}",
    ]
    return lines, diagnose.attention_kernel(fn), fig


def _layer_and_mask(kernel, dtype=torch.float32):
    layer = EncoderLayer(16, 2, 32, dropout=0.0)
    layer.attn = KernelAttention(16, 2, kernel)
    x = torch.randn(2, 4, 16)  # (B, L, d)
    mask = torch.ones(2, 1, 1, 4, dtype=torch.bool)  # (B, 1, 1, L): batch 1 is all padding
    mask[1] = False
    return layer.to(dtype), x.to(dtype), mask


def _demo_inf_mask(injected):
    layer, x, mask = _layer_and_mask(attention_inf_mask if injected else attention)
    head = nn.Linear(16, 8)  # a read-out to 8 classes
    targets = torch.tensor([[1, 2, 3, 4], [-100] * 4])  # (B, L): the padding is not scored
    params = [*layer.parameters(), *head.parameters()]
    finding = diagnose.first_nonfinite(layer, x, mask)  # before training: where nan is born
    opt = torch.optim.SGD(params, lr=0.1)
    losses = []
    for _ in range(2):
        loss = F.cross_entropy(head(layer(x, mask)).flatten(0, 1), targets.flatten())
        losses.append("finite" if torch.isfinite(loss) else "nan")
        if len(losses) == 1:
            opt.zero_grad()
            loss.backward()
            nan = sum(not torch.isfinite(p.grad).all() for p in params)
            opt.step()
    lines = [
        "a batch of 2 sequences of 4 tokens, the second all padding, left out of the loss",
        f"step 1: loss {losses[0]}; parameter tensors with a nan gradient: {nan} of {len(params)}",
        f"step 2, after one SGD step: loss {losses[1]}",
    ]
    return lines, finding, None


def _demo_fp16_mask(injected):
    kernel = attention_additive_mask if injected else attention
    layer, x, mask = _layer_and_mask(kernel, torch.half)
    lines = ["float16, a batch whose second sequence is all padding"]
    if injected:
        layer.attn.kernel = attention_fill_1e9
        lines.append(f"masked_fill(-1e9): {diagnose.forward_error(layer, x, mask).detail}")
        layer.attn.kernel = kernel
        lines.append("an additive −1e9 mask made in float32 instead, cast to float16: −inf")
    with torch.no_grad():
        out = layer(x, mask)  # (B, L, d)
    lines.append(f"output rows holding nan: {int(out.isnan().any(-1).sum())} of 8")
    return lines, diagnose.first_nonfinite(layer, x, mask), None


def _demo_causal(injected):
    model = TinyCausalLM(mask_fn=causal_mask_off_by_one if injected else causal_mask)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(0)
    for _ in range(60):
        ids = torch.randint(0, 16, (16, 9), generator=g)  # (B, L + 1): uniform random tokens
        logits = model(ids[:, :-1])  # (B, L, vocab)
        loss = F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
    leaks = loss.item() < 1.5  # the leaky model is near 0.8 and falling, the healthy one ~2.8
    lines = [
        "next-token training on uniformly random tokens: no model can beat ln 16 = 2.77",
        "loss after 60 steps: "
        + ("below 1.5, impossible without seeing the answer" if leaks else "above 1.5, as it must"),
    ]
    return lines, diagnose.future_leak(model, ids[:2, :-1]), None


def _demo_view_heads(injected):
    ref = nn.MultiheadAttention(32, 4, batch_first=True)
    cls = ViewHeadsAttention if injected else MultiHeadAttention
    attn = cls.from_torch(ref)
    x = torch.randn(2, 6, 32)  # (B, L, d)
    with torch.no_grad():
        ours, theirs = attn(x)[0], ref(x, x, x)[0]  # (B, L, d) each
    err = (ours - theirs).abs().max().item()
    lines = [
        f"shapes: x {tuple(x.shape)} → output {tuple(ours.shape)}, as expected",
        "largest difference from nn.MultiheadAttention with the same weights: "
        + (below(err, 1e-5) if err < 1e-5 else "more than 0.01" if err > 0.01 else "noticeable"),
    ]
    return lines, diagnose.permutation_test(attn, x), None


def _demo_contiguous(injected):
    attn = (ViewMergeAttention if injected else ContiguousMergeAttention)(32, 4)
    x = torch.randn(2, 6, 32)
    return ["attn(x) on x of shape (2, 6, 32)"], diagnose.forward_error(attn, x), None


def _demo_softmax_dim(injected):
    q, k, v = _qkv(16)
    scores = q @ k.transpose(-2, -1) / 4.0
    w = scores.softmax(-2 if injected else -1)[0, 0]  # (L, L)
    sums = w.sum(-1)
    lines = [f"attention row sums: from {sums.min():.2f} to {sums.max():.2f} (must all be 1)"]
    fn = attention_softmax_queries if injected else attention
    return lines, diagnose.attention_kernel(fn), None


def _tiny_bert(**kw):
    cfg = BertConfig.tiny(vocab_size=100, n_layers=2, dropout=0.0, attn_dropout=0.0, **kw)
    return BertModel(cfg).eval()


def _demo_positions(injected):
    model = _tiny_bert()
    if injected:
        model = bert_without_positions(model)
    ids = torch.tensor([[2, 10, 11, 12, 13, 14, 15, 3]])  # (1, L): [CLS] … [SEP]
    rev = torch.cat([ids[:, :1], ids[:, 1:-1].flip(1), ids[:, -1:]], 1)  # reversed between
    with torch.no_grad():
        a, b = model(ids)[0, 0], model(rev)[0, 0]  # (d,): the [CLS] vectors
    err = (a - b).abs().max().item()
    lines = [
        "[CLS] output for a sentence and for its reversal: "
        + (f"the same ({below(err, 1e-5)})" if err < 1e-5 else "different (> 0.01)")
    ]
    return lines, diagnose.position_test(model, ids), None


def _demo_frozen_ln(injected):
    model = BertForMaskedLM(BertConfig.tiny(vocab_size=100, dropout=0.0, attn_dropout=0.0))
    (freeze_norms if injected else freeze_bottom)(model)
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.Adam(trainable, lr=1e-3)
    start = {n: p.detach().clone() for n, p in model.named_parameters()}
    norms = {n: p for n, p in start.items() if "norm" in n}
    rest = {n: p for n, p in start.items() if "norm" not in n}
    ids = torch.randint(5, 100, (4, 12))
    for _ in range(3):
        loss = F.cross_entropy(model(ids).flatten(0, 1), ids.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
    now = dict(model.named_parameters())
    moved = sum(not torch.equal(p, now[n]) for n, p in norms.items())
    others = sum(not torch.equal(p, now[n]) for n, p in rest.items())
    lines = [
        f"after 3 fine-tuning steps, tensors that moved: LayerNorm {moved} of {len(norms)}, "
        f"the others {others} of {len(rest)}"
    ]
    return lines, diagnose.frozen_parameters(model, opt), None


def _demo_grad_cut(injected):
    model = GradCutNet() if injected else GradNet()
    leaf = torch.randn(4, 8, dtype=torch.float64, requires_grad=True)
    x = leaf.float() if injected else leaf.float().detach().requires_grad_()  # non-leaf vs leaf
    finding = diagnose.missing_grads(model, lambda: model(x).pow(2).mean(), {"x": x})
    none = [n for n, p in model.named_parameters() if p.grad is None]
    with warnings.catch_warnings():  # reading .grad of a non-leaf warns: that is the bug here
        warnings.simplefilter("ignore")
        x_grad = x.grad
    lines = [f"parameters with .grad None: {len(none)} of 8; x.grad is None: {x_grad is None}"]
    return lines, finding, None


def _pad_batch():
    targets = torch.tensor([[3, 4, 5, 2, 0]])  # (1, L): the numpy article's padded target
    logits = torch.randn(1, 5, 8, dtype=torch.float64)  # (1, L, V)
    return logits, targets


def _demo_pad_loss(injected):
    loss_fn = loss_counting_pad if injected else loss_ignoring_pad
    logits, targets = _pad_batch()
    longer = torch.cat([targets, torch.zeros(1, 4, dtype=torch.long)], 1)  # 4 more [PAD]
    more = torch.cat([logits, logits[:, -1:].expand(1, 4, 8)], 1)
    a, b = loss_fn(logits, targets).item(), loss_fn(more, longer).item()
    lines = [
        "target [3, 4, 5, 2, 0] (0 = <pad>), then padded with 4 more <pad>",
        f"loss: {a:.3f} → {b:.3f} ({'changes' if abs(a - b) > 1e-9 else 'unchanged'})",
    ]
    return lines, diagnose.loss_support(loss_fn, logits, targets, pad_id=PAD), None


def _demo_smoothing(injected):
    loss_fn = smoothing_onto_pad if injected else smoothing_without_pad
    logits, targets = _pad_batch()
    # the target distribution q the loss is minimised by: p = softmax(logits) = q at the optimum
    logits_opt = torch.zeros_like(logits, requires_grad=True)
    opt = torch.optim.LBFGS([logits_opt], max_iter=200)

    def closure():
        opt.zero_grad()
        loss = loss_fn(logits_opt, targets)
        loss.backward()
        return loss

    opt.step(closure)
    p_pad = logits_opt.detach().softmax(-1)[0, :4, PAD].mean().item()
    lines = [f"a model fitted to this loss gives <pad> p = {p_pad:.3f} at the real positions"]
    return lines, diagnose.loss_support(loss_fn, logits, targets, pad_id=PAD), None


def _demo_mlm(injected):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 100, (8, 32), generator=g)  # (B, L); ids 0-4 are special
    ids[:, 0], ids[:, -1] = 2, 3  # [CLS], [SEP]
    make = mlm_batch_all_positions if injected else mask_tokens
    inputs, labels = make(ids, range(5), 4, 100, generator=g)
    scored = labels != -100
    copy = int((scored & (inputs == labels)).sum()) / int(scored.sum())
    lines = [
        f"a model that only copies its input scores {100 * copy:.0f}% accuracy on these labels"
    ]
    return lines, diagnose.mlm_labels(inputs, labels, range(5)), None


def _demo_warmup(injected):
    from tfx.learn.warmup import RaceConfig, race

    cfg = RaceConfig(norm="post", warmup=0 if injected else 20, max_steps=75)
    r = race(cfg)
    lrs = [cfg.lr * (min(1.0, (t + 1) / cfg.warmup) if cfg.warmup else 1.0) for t in range(75)]
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4.4, 2.8))
    ax.plot(range(1, len(r.losses) + 1), r.losses)
    ax.axhline(cfg.threshold, color="grey", linestyle=":")
    ax.set(xlabel="step", ylabel="loss", yscale="log", xlim=(0, 75))
    ax.set(title=f"post-LN, 6 layers, {'no warm-up' if injected else '20-step warm-up'}")
    fig.tight_layout()
    reached = "reaches" if r.steps is not None else "does not reach"
    lines = [f"post-LN stack (6 layers), Adam at lr 1e-2: {reached} a loss of 0.1 in 75 steps"]
    return lines, diagnose.warmup_check(lrs, r.model), fig


def _demo_fp16(injected):
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16))  # float32 weights
    x = torch.randn(64, 16)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.float16):
        y = model(x).float() + 3e-6 * torch.randn(64, 16)  # nearly fitted: d(loss)/d(out) ~ 1e-8
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    scaler = None if injected else torch.amp.GradScaler("cpu")
    before = [p.detach().clone() for p in model.parameters()]
    with torch.autocast("cpu", dtype=torch.float16):
        out = model(x)  # (64, 16), float16: the backward of the Linears runs in float16 too
    loss = F.mse_loss(out.float(), y)
    if injected:
        loss.backward()
        finding = diagnose.grad_health(model)
        opt.step()
    else:
        scaler.scale(loss).backward()
        scaler.unscale_(opt)  # the gradients divided back, in float32
        finding = diagnose.grad_health(model, scaler)
        scaler.step(opt)
        scaler.update()
    zeros = sum(int((p.grad == 0).sum()) for p in model.parameters())
    total = sum(p.numel() for p in model.parameters())
    moved = sum(not torch.equal(a, p) for a, p in zip(before, model.parameters()))
    share = "all" if zeros == total else "under 10%" if zeros < total / 10 else "some"
    lines = [
        "float32 weights, autocast to float16, a nearly fitted target, Adam; loss scaling: "
        + ("none" if injected else f"GradScaler (scale {scaler.get_scale():g})"),
        f"gradient entries exactly 0: {share}; tensors the step moved: {moved} of {len(before)}",
    ]
    return lines, finding, None


def hf_small_config(**changes):
    """A small Hugging Face BertConfig, the review's N28 setting (d 128, 4 layers, 4 heads, FFN
    512, 64 positions, 100 tokens), with `changes` applied: the one size the bug zoo's and the
    healthy set-ups' Hugging Face models start from."""
    import transformers

    sizes = dict(
        vocab_size=100,
        hidden_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        intermediate_size=512,
        max_position_embeddings=64,
    )
    return transformers.BertConfig(**(sizes | changes))


def hf_small_bert():
    """A freshly initialised small Hugging Face BERT (hf_small_config): the healthy model the
    dead-layer bug is injected into, and the Hugging Face model every diagnostic must stay quiet
    on (tests/inspect/test_diagnose.py), so the two cannot drift apart. Built in chapter 11."""
    import transformers

    return transformers.BertForMaskedLM(hf_small_config()).eval()


def _demo_dead(injected):
    from tfx.inspect.grads import max_min_report

    model = hf_small_bert()
    if injected:
        with torch.no_grad():
            model.bert.encoder.layer[2].intermediate.dense.bias.fill_(-100.0)  # every unit dead
    ids = torch.randint(5, 100, (4, 16))
    model(ids, labels=ids).loss.backward()
    report = max_min_report(model).splitlines()
    zero = [line for line in report if "max=0.0000" in line]
    lines = [
        f"max/min printout: {len(zero)} of {len(report)} lines read max=0.0000 "
        "(query and key weights and biases among them)"
    ]
    return lines, diagnose.dead_layers(model), None


def _demo_half(injected):
    rng = np.random.default_rng(0)
    params = {n: rng.standard_normal((8, 8)) for n in ("W_q", "W_k", "W_v", "W_o")}  # float64
    if not injected:
        params = {n: p.astype(np.float32) for n, p in params.items()}
    half = to_half_precision(params)
    b0, b1 = sum(p.nbytes for p in params.values()), sum(p.nbytes for p in half.values())
    lines = [f"bytes before: {b0}, after to_half_precision: {b1}"]
    return lines, diagnose.dtype_census(half, expected="float16"), None


_DEMOS = {
    "unscaled-scores": _demo_unscaled,
    "inf-mask-nan": _demo_inf_mask,
    "fp16-mask-overflow": _demo_fp16_mask,
    "causal-off-by-one": _demo_causal,
    "view-not-transpose": _demo_view_heads,
    "view-not-contiguous": _demo_contiguous,
    "softmax-wrong-dim": _demo_softmax_dim,
    "missing-positions": _demo_positions,
    "frozen-layernorm": _demo_frozen_ln,
    "grad-cut": _demo_grad_cut,
    "pad-in-loss": _demo_pad_loss,
    "smoothing-on-pad": _demo_smoothing,
    "mlm-all-positions": _demo_mlm,
    "no-warmup-post-ln": _demo_warmup,
    "fp16-no-loss-scaling": _demo_fp16,
    "dead-layer": _demo_dead,
    "half-casts-nothing": _demo_half,
}
