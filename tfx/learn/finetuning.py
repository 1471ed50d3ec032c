"""Fine-tuning a pre-trained BERT body for classification: the head, the freezing schemes,
layer-wise learning-rate decay, the training loop, long inputs and what drives a prediction.
Built in chapter 10.

Why a head this small: fine-tuning keeps everything the body learned and adds one linear map from a
sentence vector to the classes (plus BERT's pooler, d² + d more). What to read the sentence vector
from is a choice (`pool`): BERT's pooler over [CLS], [CLS] itself, or the mean of the real tokens.
The book model was pre-trained without next-sentence prediction, so its pooler starts as random as
the classifier does; chapter 10 measures what that costs.

Why a run can be cached (`finetune(..., cache=True)`): a run is a function of the body's weights,
the texts, the config, the code and the arithmetic (torch version, instruction set, thread count),
so a file named by a hash of exactly those holds the same model and log a rerun would compute.
Chapter 10's widget needs the trained model: the browser test and the site's static frames read the
run that executing the chapter saved instead of training it twice more (tfx.learn.train's cache, the
same idea, holds chapter 07's model).

Why freezing is spelled out per parameter: "freeze the bottom k layers" leaves open the embeddings,
the LayerNorms inside frozen layers and the pooler. `freeze` decides each explicitly and returns
the names it left trainable, so a chapter can print them, and the gradient-norm table shows that
nothing else moved.
"""

import copy
import hashlib
import json
import math
import time
from dataclasses import asdict, dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

from tfx.core.checks import check_int, check_positive_float, check_probability
from tfx.learn.reviews import LABELS, encode, labels_of
from tfx.learn.train import cache_dir, code_digest, write_checkpoint
from tfx.model.attention import padding_mask
from tfx.model.bert import BertConfig, BertForMaskedLM, BertModel
from tfx.model.layers import LayerNorm

# The modules whose code decides a fine-tuning run: the model, this loop, the encoding of the texts.
_RUN_MODULES = (
    "model/attention",
    "model/bert",
    "model/layers",
    "model/position",
    "learn/finetuning",
    "learn/reviews",
)

POOLS = ("pooler", "cls", "mean")


class BertForSequenceClassification(nn.Module):
    """A BERT body, a sentence vector (`pool`), dropout, and a linear classifier."""

    def __init__(self, cfg: BertConfig, n_classes: int = 2, pool: str = "pooler", dropout=0.1):
        super().__init__()
        if pool not in POOLS:
            raise ValueError(f"pool must be one of {POOLS}, got {pool!r}")
        check_int(n_classes, "n_classes", minimum=2)
        check_probability(dropout, "dropout")
        self.cfg, self.pool = cfg, pool
        self.bert = BertModel(cfg, add_pooler=pool == "pooler")
        self.drop = nn.Dropout(dropout)
        self.classifier = nn.Linear(cfg.d_model, n_classes)
        BertModel._init_weights(self.classifier)

    def features(self, input_ids, attention_mask=None) -> torch.Tensor:
        """The sentence vector the classifier reads, (B, d_model)."""
        h = self.bert(input_ids, attention_mask=attention_mask)  # (B, L, d_model)
        if self.pool == "pooler":
            return self.bert.pooler(h)  # (B, d_model): tanh(W h_[CLS] + b)
        if self.pool == "cls":
            return h[:, 0]  # (B, d_model)
        m = torch.ones_like(input_ids) if attention_mask is None else attention_mask  # (B, L)
        m = m.unsqueeze(-1).to(h.dtype)  # (B, L, 1)
        return (h * m).sum(1) / m.sum(1)  # (B, d_model): mean over real tokens

    def forward(self, input_ids, attention_mask=None) -> torch.Tensor:
        """Logits (B, n_classes)."""
        return self.classifier(self.drop(self.features(input_ids, attention_mask)))


def classifier_from(
    body, n_classes: int = 2, pool: str = "pooler", dropout=0.1, seed: int = 0, pretrained=True
):
    """A classifier with `body`'s configuration: the body's weights copied in (pretrained=True) or
    BERT's random initialisation (pretrained=False, the control). `body` is a tfx BertForMaskedLM
    (the book model). The pooler and the classifier start from BERT's initialisation under `seed`,
    so two pools or two schemes with one seed differ in nothing else."""
    if not isinstance(body, BertForMaskedLM):
        raise TypeError(f"body must be a tfx.model.bert.BertForMaskedLM, got {type(body).__name__}")
    check_int(seed, "seed", minimum=0)
    torch.manual_seed(seed)
    model = BertForSequenceClassification(body.cfg, n_classes, pool, dropout)
    if pretrained:
        missing, unexpected = model.bert.load_state_dict(body.bert.state_dict(), strict=False)
        if unexpected or not all(k.startswith("pooler.") for k in missing):
            raise ValueError(
                f"body's weights do not fit the classifier's body: missing {missing}, "
                f"unexpected {unexpected}"
            )
    return model


def _is_layernorm(model: nn.Module, name: str) -> bool:
    module = model.get_submodule(name.rsplit(".", 1)[0])
    return isinstance(module, (LayerNorm, nn.LayerNorm))


def freeze(model: nn.Module, bottom: int = 0, keep_layernorm=False) -> list:
    """Freeze the embeddings and the bottom `bottom` encoder layers (0: nothing; n_layers: the whole
    body, a probe); with keep_layernorm every LayerNorm's γ and β in the body stays trainable.
    Pooler and classifier always train. `model` is a classifier or a tagger
    (tfx.learn.segment.BertForTokenClassification): any module whose body is a tfx BertModel at
    `.bert`. Returns the names of the trainable parameters."""
    if not isinstance(getattr(model, "bert", None), BertModel):
        raise TypeError(
            f"model must be a BertForSequenceClassification or another module with a tfx "
            f"BertModel at .bert, got {type(model).__name__}"
        )
    n = model.cfg.n_layers
    check_int(bottom, "bottom", minimum=0)
    if bottom > n:
        raise ValueError(f"bottom must be at most the model's {n} layers, got {bottom}")
    frozen = [f"bert.layers.{i}." for i in range(bottom)] + (["bert.embeddings."] if bottom else [])
    for name, p in model.named_parameters():
        p.requires_grad = not any(name.startswith(f) for f in frozen)
        if keep_layernorm and name.startswith("bert.") and _is_layernorm(model, name):
            p.requires_grad = True
    return [name for name, p in model.named_parameters() if p.requires_grad]


def layer_of(name: str, n_layers: int) -> int:
    """Depth of a parameter for layer-wise decay: 0 embeddings, 1..n the encoder layers, n + 1 the
    pooler and classifier."""
    if name.startswith("bert.embeddings."):
        return 0
    if name.startswith("bert.layers."):
        return int(name.split(".")[2]) + 1
    return n_layers + 1


def param_groups(model, lr: float, weight_decay=0.01, layer_decay=1.0) -> list:
    """AdamW groups for the trainable parameters: learning rate lr · layer_decay^(n + 1 − depth)
    (layer-wise decay: the head at lr, each layer below a factor smaller; 1.0 turns it off), and
    weight decay on matrices only (as tfx.learn.train.bert_adamw)."""
    check_positive_float(lr, "lr")
    if not 0 < layer_decay <= 1:
        raise ValueError(f"layer_decay must be in (0, 1], got {layer_decay}")
    n = model.cfg.n_layers
    groups = {}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        depth = layer_of(name, n)
        key = (depth, p.dim() >= 2)
        g = groups.setdefault(
            key,
            {
                "params": [],
                "lr": lr * layer_decay ** (n + 1 - depth),
                "weight_decay": weight_decay if p.dim() >= 2 else 0.0,
            },
        )
        g["params"].append(p)
    if not groups:
        raise ValueError("model has no trainable parameters: every parameter is frozen")
    for g in groups.values():
        g["base_lr"] = g["lr"]
    return [groups[k] for k in sorted(groups)]


@dataclass
class FinetuneConfig:
    """One fine-tuning run. The defaults are the chapter's full fine-tuning (bench/finetune.py
    measured the choices: results in bench/results/finetune-*.md)."""

    steps: int = 300
    batch_size: int = 32
    lr: float = 1e-3  # peak, for the head; layers below get lr · layer_decay^k
    warmup: int = 30  # linear warm-up, then linear decay to 0 (BERT's schedule)
    weight_decay: float = 0.01
    clip: float = 1.0
    dropout: float = 0.1  # on the sentence vector
    pool: str = "pooler"
    freeze_bottom: int = 0
    keep_layernorm: bool = False
    layer_decay: float = 1.0
    pretrained: bool = True
    seed: int = 0
    max_len: int = 64
    eval_every: int = 50
    # "float64" makes a run repeat on any CPU: float32 rounds differently on each instruction set,
    # and over a few hundred steps those differences grow into another model (as another seed
    # would); float64's are ten orders of magnitude smaller. About 2.5 times slower on a CPU.
    dtype: str = "float32"

    def __post_init__(self):
        for name in ("steps", "batch_size", "eval_every"):
            check_int(getattr(self, name), name)
        check_int(self.warmup, "warmup", minimum=0)
        check_int(self.seed, "seed", minimum=0)
        check_int(self.freeze_bottom, "freeze_bottom", minimum=0)
        check_int(self.max_len, "max_len", minimum=3)
        check_positive_float(self.lr, "lr")
        if self.pool not in POOLS:
            raise ValueError(f"pool must be one of {POOLS}, got {self.pool!r}")
        if self.dtype not in ("float32", "float64"):
            raise ValueError(f"dtype must be 'float32' or 'float64', got {self.dtype!r}")


@dataclass
class FinetuneRun:
    """What a run leaves: the model, its loss per step, validation accuracy every eval_every
    steps, the trainable names, the last step's gradient norms per parameter, and wall time."""

    model: BertForSequenceClassification
    cfg: FinetuneConfig
    loss: list = field(default_factory=list)
    val: list = field(default_factory=list)  # (step, accuracy)
    trainable: list = field(default_factory=list)
    grad_norms: dict = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def trainable_params(self) -> int:
        return sum(p.numel() for p in self.model.parameters() if p.requires_grad)


def _tensors(pairs, vocab, max_len):
    ids, mask = encode([t for t, _ in pairs], vocab, max_len)  # (N, L), (N, L)
    return ids, mask, labels_of(pairs)


@torch.no_grad()
def predict_proba(model, ids, mask, batch_size: int = 256) -> torch.Tensor:
    """Class probabilities (N, n_classes) of encoded texts, in eval mode (restored after)."""
    for name, t in (("ids", ids), ("mask", mask)):
        if not isinstance(t, torch.Tensor) or t.dim() != 2:
            raise ValueError(f"{name} must be a (N, L) tensor, got {getattr(t, 'shape', type(t))}")
    if ids.shape != mask.shape:
        raise ValueError(
            f"ids and mask must have the same shape, got {tuple(ids.shape)} and {tuple(mask.shape)}"
        )
    was = model.training
    model.eval()
    out = []
    for s in range(0, len(ids), batch_size):
        m = mask[s : s + batch_size]
        L = int(m.sum(1).max())
        out.append(model(ids[s : s + batch_size, :L], m[:, :L]).float().softmax(-1))  # (b, C)
    model.train(was)
    return torch.cat(out)  # (N, C)


def accuracy(model, pairs, vocab, max_len: int = 64) -> float:
    """Share of (text, label) pairs whose most likely class is the label."""
    ids, mask, y = _tensors(pairs, vocab, max_len)
    return float((predict_proba(model, ids, mask).argmax(-1) == y).float().mean())


def run_key(body, vocab, train, validation, cfg: FinetuneConfig) -> str:
    """A name for one fine-tuning run: a hash of everything that decides its model and log (the
    body's weights, the vocabulary, the texts and labels, the config, the code of _RUN_MODULES,
    the torch version, the instruction set and the thread count the run computes with)."""
    h = hashlib.sha256()
    for name, t in body.state_dict().items():
        h.update(name.encode("utf-8"))
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    blob = {
        "vocab": list(vocab.itos),
        "train": list(train),
        "validation": list(validation),
        "cfg": asdict(cfg),
        "code": code_digest(_RUN_MODULES),
        "torch": torch.__version__.split("+")[0],
        "cpu": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
    }
    h.update(json.dumps(blob, ensure_ascii=False, sort_keys=True).encode("utf-8"))
    return h.hexdigest()[:16]


def finetune(
    body, vocab, train, validation, cfg: FinetuneConfig = None, cache: bool = False
) -> FinetuneRun:
    """Fine-tune a classifier built from `body` (classifier_from) on `train` pairs with cfg's
    scheme; validation accuracy every cfg.eval_every steps. Batches are drawn by cfg.seed, so a run
    repeats exactly on one CPU. `cache`: read the run from `.cache/tfx-models/` when this exact run
    (run_key) was saved there, else train it and save it."""
    cfg = cfg or FinetuneConfig()
    if not isinstance(cfg, FinetuneConfig):
        raise TypeError(f"cfg must be a FinetuneConfig, got {type(cfg).__name__}")
    for name, pairs in (("train", train), ("validation", validation)):
        if not isinstance(pairs, (list, tuple)) or not pairs:
            raise ValueError(f"{name} must be a non-empty list of (text, label) pairs")
    if not isinstance(cache, bool):
        raise TypeError(f"cache must be True or False, got {cache!r}")
    if cfg.max_len > body.cfg.max_len:
        raise ValueError(
            f"cfg.max_len {cfg.max_len} is more than the body's {body.cfg.max_len} positions"
        )
    model = classifier_from(body, len(LABELS), cfg.pool, cfg.dropout, cfg.seed, cfg.pretrained)
    model = model.to(getattr(torch, cfg.dtype))
    run = FinetuneRun(model, cfg)
    run.trainable = freeze(model, cfg.freeze_bottom, cfg.keep_layernorm)
    if cache:
        path = cache_dir() / f"finetune-{run_key(body, vocab, train, validation, cfg)}.pt"
        if _load(run, path):
            return run
    _train(run, vocab, train, validation)
    if cache:
        log = {k: getattr(run, k) for k in ("loss", "val", "grad_norms", "seconds")}
        write_checkpoint({"model": model.state_dict(), "log": log}, path)
    return run


def _load(run: FinetuneRun, path) -> bool:
    """Fill `run` from a saved run at `path`; False when there is none or it cannot be read."""
    try:
        state = torch.load(path, weights_only=True)
    except Exception:  # missing or damaged: trained anew and overwritten, never trusted
        return False
    run.model.load_state_dict(state["model"])
    run.model.eval()
    for k, v in state["log"].items():
        setattr(run, k, v)
    run.val = [tuple(sv) for sv in run.val]
    return True


def warmup_decay(step: int, steps: int, warmup: int) -> float:
    """The multiplier of the peak learning rate at `step` (from 1): up linearly over `warmup`
    steps, then down linearly to 0 at `steps`, BERT's fine-tuning schedule (chapter 07's lr_at
    for pre-training, which also offers Noam's)."""
    if step <= warmup:
        return step / max(warmup, 1)
    return max(0.0, (steps - step) / max(steps - warmup, 1))


def _train(run: FinetuneRun, vocab, train, validation) -> None:
    """The training loop of `finetune`: AdamW, warm-up then linear decay, clipping."""
    model, cfg = run.model, run.cfg
    opt = torch.optim.AdamW(param_groups(model, cfg.lr, cfg.weight_decay, cfg.layer_decay))
    ids, mask, y = _tensors(train, vocab, cfg.max_len)
    val = _tensors(validation, vocab, cfg.max_len)
    gen = torch.Generator().manual_seed(cfg.seed)
    order, at = torch.randperm(len(ids), generator=gen), 0
    start = time.perf_counter()
    model.train()
    for step in range(1, cfg.steps + 1):
        if at + cfg.batch_size > len(order):
            order, at = torch.randperm(len(ids), generator=gen), 0
        b = order[at : at + cfg.batch_size]
        at += cfg.batch_size
        L = int(mask[b].sum(1).max())
        loss = F.cross_entropy(model(ids[b, :L], mask[b, :L]), y[b])  # (B, L) → (B, C) → ()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.clip:
            nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)
        scale = warmup_decay(step, cfg.steps, cfg.warmup)
        for g in opt.param_groups:
            g["lr"] = g["base_lr"] * scale
        if step == cfg.steps:
            run.grad_norms = {
                n: float(p.grad.norm()) for n, p in model.named_parameters() if p.grad is not None
            }
        opt.step()
        run.loss.append(loss.item())
        if step % cfg.eval_every == 0 or step == cfg.steps:
            p = predict_proba(model, *val[:2])
            run.val.append((step, float((p.argmax(-1) == val[2]).float().mean())))
    run.seconds = time.perf_counter() - start
    model.eval()


def windows(text: str, vocab, max_len: int = 64, stride: int = None) -> tuple:
    """A text longer than the model's max_len as overlapping windows of max_len − 2 characters,
    `stride` apart (default: half a window), each its own [CLS] … [SEP] row: (input_ids,
    attention_mask), (W, L). A text that fits gives one row, as encode would."""
    check_int(max_len, "max_len", minimum=3)
    ids = vocab.encode(text) if isinstance(text, str) else None
    if not ids:
        raise ValueError(f"text must be a non-empty str, got {text!r}")
    width = max_len - 2
    stride = width // 2 if stride is None else check_int(stride, "stride")
    if stride > width:
        raise ValueError(f"stride must be at most the window's {width} characters, got {stride}")
    starts = list(range(0, max(len(ids) - width, 0) + 1, stride))
    if starts[-1] + width < len(ids):  # the last window ends at the text's end
        starts.append(len(ids) - width)
    rows = [[vocab["[CLS]"], *ids[s : s + width], vocab["[SEP]"]] for s in starts]
    L = max(map(len, rows))
    out = torch.full((len(rows), L), vocab["[PAD]"], dtype=torch.long)  # (W, L)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row)
    return out, (out != vocab["[PAD]"]).long()


def predict_long(model, text: str, vocab, max_len: int = 64, stride: int = None) -> torch.Tensor:
    """Class probabilities (n_classes,) of a text of any length: the mean of its windows'
    probabilities (one window, so the same as truncation, when it fits)."""
    ids, mask = windows(text, vocab, max_len, stride)  # (W, L)
    return predict_proba(model, ids, mask).mean(0)  # (C,)


def leave_one_out(model, text: str, vocab, max_len: int = 64) -> tuple:
    """(probabilities (n_classes,), [(character, drop)]): for each character of the text (as the
    model sees it, cut at max_len − 2), how much the predicted class's probability falls when that
    character alone is replaced by [MASK]; negative when hiding it makes the class more likely."""
    ids, mask = encode([text], vocab, max_len)  # (1, L)
    n = int(mask.sum()) - 2  # characters between [CLS] and [SEP]
    batch = ids.repeat(n + 1, 1)  # (n + 1, L): row 0 intact, row i masks character i
    for i in range(n):
        batch[i + 1, i + 1] = vocab["[MASK]"]
    p = predict_proba(model, batch, mask.repeat(n + 1, 1))  # (n + 1, C)
    c = int(p[0].argmax())
    chars = vocab.decode(ids[0, 1 : n + 1])
    return p[0], [(ch, float(p[0, c] - p[i + 1, c])) for i, ch in enumerate(chars)]


# Student's t, two-sided 95%, by degrees of freedom: with a handful of seeds the normal 1.96
# would make intervals too narrow by up to half.
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}


def paired_interval(a, b) -> tuple:
    """(mean of a − b, half-width of its 95% t interval) for paired measurements (one pair per
    seed: same data order and head initialisation), so the seeds' shared luck cancels in the
    differences. A difference is called real only when the interval excludes 0."""
    if len(a) != len(b) or len(a) < 2:
        raise ValueError(f"a and b must be paired lists of at least 2, got {len(a)} and {len(b)}")
    d = [x - y for x, y in zip(a, b)]
    mean = sum(d) / len(d)
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (len(d) - 1))
    return mean, T95.get(len(d) - 1, 1.96) * sd / math.sqrt(len(d))


def sentiment_report(model, vocab, text, max_len: int = 64, top: int = 8) -> str:
    """What chapter 10's widget prints for a text: the class probabilities and the characters whose
    hiding moves the predicted class most (leave_one_out), as text bars. An empty text, or one
    that is too long for the model, gets a message instead of an error (a long text is read by
    sliding windows, and the bars cover its first window)."""
    if not isinstance(text, str) or not vocab.encode(text.replace("[MASK]", "")):
        return "Type a review: there are no characters to classify yet."
    n = len(vocab.encode(text))
    lines = []
    if n > max_len - 2:
        p = predict_long(model, text, vocab, max_len)
        lines.append(
            f"{n} characters: more than the model's {max_len - 2}, so it reads "
            f"{len(windows(text, vocab, max_len)[0])} overlapping windows and averages them."
        )
        _, drops = leave_one_out(model, text, vocab, max_len)
    else:
        p, drops = leave_one_out(model, text, vocab, max_len)
    c = int(p.argmax())
    lines.append("   ".join(f"{name} {float(q):.3f}" for name, q in zip(LABELS, p)))
    lines.append(
        f'what moves "{LABELS[c]}" most (its probability lost when the character is hidden):'
    )
    scale = max((abs(d) for _, d in drops), default=0.0) or 1.0
    ranked = sorted(enumerate(drops), key=lambda x: (-abs(x[1][1]), x[0]))[:top]
    for i, (ch, d) in sorted(ranked):
        bar = "█" * max(1, round(12 * abs(d) / scale))
        lines.append(f"  {i + 1:>2} {ch}  {d:+.3f} {bar if d > 0 else '·' * len(bar)}")
    return "\n".join(lines)


def body_parts(model: BertForSequenceClassification) -> list:
    """The names of a classifier's body parts, bottom first: "embeddings", "layer 1", …"""
    if not isinstance(model, BertForSequenceClassification):
        raise TypeError(
            f"model must be a tfx BertForSequenceClassification, got {type(model).__name__}"
        )
    return ["embeddings"] + [f"layer {i + 1}" for i in range(len(model.bert.layers))]


def _part(bert: BertModel, name: str) -> nn.Module:
    return bert.embeddings if name == "embeddings" else bert.layers[int(name.split()[1]) - 1]


@torch.no_grad()
def weight_change(model: BertForSequenceClassification, body) -> dict:
    """How far fine-tuning moved each body part from the pre-trained `body` it started from:
    part -> ‖W_fine-tuned − W_pre-trained‖ / ‖W_pre-trained‖ over all the part's tensors."""
    if not isinstance(body, BertForMaskedLM):
        raise TypeError(f"body must be a tfx.model.bert.BertForMaskedLM, got {type(body).__name__}")
    out = {}
    for name in body_parts(model):
        after = dict(_part(model.bert, name).named_parameters())
        before = dict(_part(body.bert, name).named_parameters())
        if after.keys() != before.keys() or any(after[k].shape != before[k].shape for k in after):
            raise ValueError(f"body's {name} does not have the shapes of model's {name}")
        moved = sum(float((after[k] - before[k]).pow(2).sum()) for k in after)
        size = sum(float(before[k].pow(2).sum()) for k in after)
        out[name] = math.sqrt(moved / size)
    return out


def restore_parts(model: BertForSequenceClassification, body, parts) -> nn.Module:
    """A copy of the fine-tuned `model` in which the listed body `parts` (names from body_parts)
    hold the pre-trained `body`'s weights again, the rest and the head as fine-tuned: a part whose
    restoring costs accuracy is one whose change the task needed (chapter 10's widget)."""
    names = body_parts(model)
    if isinstance(parts, str) or not all(p in names for p in parts):
        raise ValueError(f"parts must be a list of names from {names}, got {parts!r}")
    weight_change(model, body)  # the shapes must match
    restored = copy.deepcopy(model).eval()
    for name in parts:
        _part(restored.bert, name).load_state_dict(_part(body.bert, name).state_dict())
    return restored


def restored_report(model, body, vocab, parts, check) -> str:
    """What chapter 10's widget prints above a review's report: how far fine-tuning moved each
    body part, which parts are back at their pre-trained weights, and the accuracy on `check`
    ((text, label) pairs) with those parts restored against the fine-tuned model's."""
    if not check:
        raise ValueError("check must be a non-empty list of (text, label) pairs, got none")
    moved = weight_change(model, body)
    restored = restore_parts(model, body, parts)
    lines = ["part         moved by fine-tuning   now"]
    for name, r in moved.items():
        now = "pre-trained (restored)" if name in parts else "fine-tuned"
        lines.append(f"{name:<12} {r:>8.1%}               {now}")
    n = model.cfg.max_len
    tuned, back = accuracy(model, check, vocab, n), accuracy(restored, check, vocab, n)
    lines.append(
        f"accuracy on {len(check)} test reviews: {back:.3f} (all fine-tuned: {tuned:.3f}, "
        f"{back - tuned:+.3f})"
    )
    return "\n".join(lines)


@torch.no_grad()
def layer_states(bert: BertModel, input_ids, attention_mask) -> list:
    """The vectors after the embeddings and after each encoder layer: n_layers + 1 tensors of
    (B, L, d_model), the last equal to bert(input_ids, attention_mask=attention_mask). What a
    probe of each depth reads (chapter 10)."""
    if not isinstance(bert, BertModel):
        raise TypeError(f"bert must be a tfx.model.bert.BertModel, got {type(bert).__name__}")
    x = bert.embeddings(input_ids, torch.zeros_like(input_ids))  # (B, L, d)
    mask = padding_mask(attention_mask)  # (B, 1, 1, L)
    states = [x]
    for layer in bert.layers:
        x = layer(x, mask)  # (B, L, d)
        states.append(x)
    return states


@torch.no_grad()
def mean_states(bert: BertModel, texts, vocab, max_len: int = None, batch_size: int = 256):
    """(n_layers + 1, N, d_model): each text's mean vector over its real tokens ([CLS] and [SEP]
    included, as pool="mean" reads them) after the embeddings and after each encoder layer, the
    body in eval mode. Texts are cut at max_len tokens (default: all the body's positions) and
    batched by length, so short ones are not padded to long ones."""
    if not isinstance(bert, BertModel):
        raise TypeError(f"bert must be a tfx.model.bert.BertModel, got {type(bert).__name__}")
    check_int(batch_size, "batch_size")
    max_len = bert.cfg.max_len if max_len is None else max_len
    if max_len > bert.cfg.max_len:
        raise ValueError(f"max_len {max_len} is more than the body's {bert.cfg.max_len} positions")
    ids, mask = encode(texts, vocab, max_len)  # (N, L)
    order = mask.sum(1).argsort()  # (N,): shortest first
    was = bert.training
    bert.eval()
    out = torch.empty(bert.cfg.n_layers + 1, len(ids), bert.cfg.d_model)
    for s in range(0, len(ids), batch_size):
        b = order[s : s + batch_size]
        L = int(mask[b].sum(1).max())
        m = mask[b, :L].unsqueeze(-1).float()  # (b, L, 1)
        for depth, h in enumerate(layer_states(bert, ids[b, :L], mask[b, :L])):  # (b, L, d)
            out[depth, b] = (h.float() * m).sum(1) / m.sum(1)  # (b, d)
    bert.train(was)
    return out


# The inverse regularisation strengths a probe tries on the validation split, a factor 10 apart.
PROBE_CS = (0.001, 0.01, 0.1, 1.0, 10.0, 100.0)


def fit_probe(train_x, train_y, val_x, val_y, Cs=PROBE_CS) -> tuple:
    """(classifier, C, {C: validation accuracy}): a linear probe fitted to convergence, as the
    probing papers fit one. Logistic regression (L2, L-BFGS until its gradient is ~0) on
    standardised features (N, d), its C chosen by validation accuracy (ties: the smaller C).

    Why besides the 300-step AdamW probe of the sweep: that probe stops where the schedule ends,
    not where the loss does, so it measures the step budget as much as the features; this one
    measures how linearly separable the classes are in the body's vectors."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    xs = [torch.as_tensor(x).double().numpy() for x in (train_x, val_x)]
    ys = [torch.as_tensor(y).long().numpy() for y in (train_y, val_y)]
    for name, x, y in (("train", xs[0], ys[0]), ("val", xs[1], ys[1])):
        if x.ndim != 2 or len(x) != len(y) or not len(x):
            raise ValueError(
                f"{name}_x must be (N, d) with N = len({name}_y) > 0, got {x.shape} and {y.shape}"
            )
    if xs[0].shape[1] != xs[1].shape[1]:
        raise ValueError(f"train_x and val_x differ in width: {xs[0].shape} and {xs[1].shape}")
    if not isinstance(Cs, (list, tuple)) or not Cs:
        raise TypeError(f"Cs must be a non-empty list or tuple of numbers, got {Cs!r}")
    for c in Cs:
        check_positive_float(c, "each C")
    best, scores = None, {}
    for C in sorted(Cs):
        clf = make_pipeline(StandardScaler(), LogisticRegression(C=C, max_iter=10_000))
        clf.fit(xs[0], ys[0])
        scores[C] = float(clf.score(xs[1], ys[1]))
        if best is None or scores[C] > scores[best[1]]:
            best = (clf, C)
    return best[0], best[1], scores


def adapt(body, vocab, texts, held_out, steps: int = 600, lr: float = 1e-3, seed: int = 0):
    """(model, log): a copy of `body` whose masked-LM pre-training continued on unlabelled texts
    of the task's own kind (domain-adaptive pre-training, Gururangan et al. 2020, "Don't Stop
    Pretraining"), with chapter 07's trainer and masking at batch 64. Texts longer than the
    model's rows are cut into pieces, so nothing is dropped; `held_out` texts give the log's
    held-out masked-token accuracy (also before the first step: `accuracy_before`). Labels are
    never read."""
    import hashlib

    from tfx.learn.corpus import MLMData, pack
    from tfx.learn.train import MLMTrainer, TrainConfig

    if not isinstance(body, BertForMaskedLM):
        raise TypeError(f"body must be a tfx.model.bert.BertForMaskedLM, got {type(body).__name__}")
    width = body.cfg.max_len - 2
    g = torch.Generator().manual_seed(seed)
    rows = []
    for part in (texts, held_out):
        pieces = [
            ids[i : i + width]
            for t in part
            for ids in [vocab.encode(t)]
            for i in range(0, len(ids), width)
        ]
        order = torch.randperm(len(pieces), generator=g).tolist()
        rows.append(
            pack(
                [pieces[i] for i in order],
                body.cfg.max_len,
                vocab["[CLS]"],
                vocab["[SEP]"],
                vocab["[PAD]"],
            )
        )  # (N, max_len)
    digest = hashlib.sha256(rows[0].numpy().tobytes()).hexdigest()[:16]
    data = MLMData(list(texts), list(held_out), vocab, rows[0], rows[1], digest)
    cfg = TrainConfig(
        steps=steps,
        batch_size=64,
        lr=lr,
        warmup=max(steps // 10, 1),
        eval_every=max(steps // 4, 1),
        grad_every=max(steps // 4, 1),
        seed=seed,
    )
    trainer = MLMTrainer(body.cfg, cfg, data, cache=False, n_threads=torch.get_num_threads())
    trainer.model.load_state_dict(body.state_dict())  # in place: the optimizer keeps its tensors
    before = trainer.evaluate()
    trainer.run(steps, progress=False)
    return trainer.model.eval(), {**trainer.log, "accuracy_before": before}
