"""Healthy, standard set-ups that every diagnostic of tfx.inspect.diagnose must stay quiet on: not
the book's own healthy model, which the diagnostics were written against, but what practitioners
do every day. A diagnostic that fires on one of them trains its reader to ignore it.

HEALTHY is the catalogue (id → Healthy); check(id) builds the set-up on a tiny model, runs every
diagnostic that applies to it and returns their Findings, in about a second, printing only what
holds on any CPU. tests/zoo/test_healthy.py asserts that each stays quiet, and that together they
cover every diagnostic; the bug zoo (tfx.zoo.bugzoo) shows each firing on its bug.

Built in chapter 11.
"""

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from tfx.inspect import diagnose
from tfx.learn.mlm import mask_tokens
from tfx.model.attention import causal_mask
from tfx.zoo.bugs import TinyCausalLM


@dataclass(frozen=True)
class Healthy:
    """One healthy set-up: what it is, and the function that builds it and runs the diagnostics."""

    id: str
    title: str
    run: object  # () → [Finding]


class LoRALinear(nn.Module):
    """A frozen nn.Linear plus a trainable low-rank update, as PEFT's LoRA builds it: lora_A, then
    lora_B (zero at first, so the model starts as the base), scaled by alpha / r."""

    def __init__(self, base: nn.Linear, r: int = 4, alpha: int = 8):
        super().__init__()
        self.base, self.scale = base.requires_grad_(False), alpha / r
        self.lora_A = nn.Linear(base.in_features, r, bias=False)
        self.lora_B = nn.Linear(r, base.out_features, bias=False)
        nn.init.zeros_(self.lora_B.weight)

    def forward(self, x):
        return self.base(x) + self.lora_B(self.lora_A(x)) * self.scale  # (…, out_features)


def _hf_classifier():
    """A tiny Hugging Face BertForSequenceClassification (post-LN, BERT's N(0, 0.02) init)."""
    import transformers

    from tfx.zoo.bugzoo import hf_small_config

    cfg = hf_small_config(
        hidden_size=64,
        num_hidden_layers=2,
        intermediate_size=128,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    return transformers.BertForSequenceClassification(cfg)


def _batch():
    g = torch.Generator().manual_seed(0)
    return torch.randint(5, 100, (4, 12), generator=g), torch.randint(0, 2, (4,), generator=g)


def _fine_tune(model, opt, steps: int = 3):
    """`steps` optimizer steps on one batch, then a last backward (no step) to read gradients;
    returns the loss function the diagnostics rerun."""
    ids, labels = _batch()

    def loss_fn():
        return F.cross_entropy(model(ids).logits, labels)

    for _ in range(steps):
        opt.zero_grad()
        loss_fn().backward()
        opt.step()
    opt.zero_grad()
    loss_fn().backward()
    return ids, loss_fn


def _peft_findings(model, opt):
    ids, loss_fn = _fine_tune(model, opt)
    found = [
        diagnose.frozen_parameters(model, opt),
        diagnose.grad_health(model),
        diagnose.dead_layers(model),
        diagnose.position_test(model.bert, ids),
        diagnose.first_nonfinite(model, ids),
        diagnose.forward_error(model, ids),
    ]
    return found + [diagnose.missing_grads(model, loss_fn)]


def _bitfit():
    model = _hf_classifier()
    for name, p in model.named_parameters():
        p.requires_grad_(name.endswith("bias") or name.startswith("classifier"))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    return _peft_findings(model, opt)


def _lora():
    model = _hf_classifier()
    model.bert.requires_grad_(False)
    for layer in model.bert.encoder.layer:
        att = layer.attention.self
        att.query, att.value = LoRALinear(att.query), LoRALinear(att.value)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)  # PEFT's examples pass them all
    return _peft_findings(model, opt)


def _hf_schedule():
    import transformers

    model = _hf_classifier()
    opt = torch.optim.AdamW(model.parameters(), lr=5e-5)
    sched = transformers.get_linear_schedule_with_warmup(opt, 0, 1000)  # Trainer's default
    lrs = []
    for _ in range(1000):
        lrs.append(sched.get_last_lr()[0])
        opt.step()
        sched.step()
    return [diagnose.warmup_check(lrs, model)]


def _smoothing():
    V = 21128  # bert-base-chinese's vocabulary (tfx.learn.data.load_bert_chinese_vocab)
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 5, V, generator=g, dtype=torch.float64)  # (B, L, V)
    targets = torch.tensor([[3, 4, 5, 2, 0], [6, 7, 0, 0, 0]])  # (B, L), 0 = [PAD]

    def torch_smoothing(lg, t):
        return F.cross_entropy(lg.flatten(0, 1), t.flatten(), ignore_index=0, label_smoothing=0.1)

    ids = torch.randint(5, V, (8, 32), generator=g)  # (B, L)
    ids[:, 0], ids[:, -1] = 2, 3  # [CLS], [SEP]
    inputs, labels = mask_tokens(ids, range(5), 4, V, generator=g)  # BERT's 15%, 80/10/10
    return [
        diagnose.loss_support(torch_smoothing, logits, targets, pad_id=0),
        diagnose.mlm_labels(inputs, labels, range(5)),
    ]


class CausalSelfAttention(nn.Module):
    """nn.MultiheadAttention under a causal mask (True = may not attend, torch's convention)."""

    def __init__(self, d: int = 32, n_heads: int = 4):
        super().__init__()
        self.mha = nn.MultiheadAttention(d, n_heads, batch_first=True)

    def forward(self, x):
        hidden = ~causal_mask(x.size(1))  # (L, L): True = the future, hidden
        return self.mha(x, x, x, attn_mask=hidden, need_weights=False)[0]  # (B, L, d)


def _causal():
    layer = CausalSelfAttention()
    x = torch.randn(2, 6, 32)  # (B, L, d)

    def sdpa(q, k, v, mask=None):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    return [
        diagnose.permutation_test(layer, x),
        diagnose.future_leak(layer, x),
        diagnose.attention_kernel(sdpa),
    ]


def _autocast():
    model = TinyCausalLM()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cpu")
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 16, (16, 9), generator=g)  # (B, L + 1)

    def loss_fn():
        with torch.autocast("cpu", dtype=torch.float16):
            logits = model(ids[:, :-1])  # (B, L, vocab)
        return F.cross_entropy(logits.float().flatten(0, 1), ids[:, 1:].flatten())

    for step in range(4):
        opt.zero_grad()
        scaler.scale(loss_fn()).backward()
        scaler.unscale_(opt)
        if step == 3:  # read the gradients after unscale_, as GradScaler's docs say
            found = [diagnose.grad_health(model, scaler), diagnose.dead_layers(model)]
        scaler.step(opt)
        scaler.update()
    with torch.autocast("cpu", dtype=torch.float16):
        found.append(diagnose.first_nonfinite(model, ids[:, :-1]))
    return found + [
        diagnose.dtype_census(model, expected=torch.float32),
        diagnose.missing_grads(model, loss_fn),
    ]


HEALTHY = {
    h.id: h
    for h in [
        Healthy("bitfit", "BitFit: only the biases and the classifier train", _bitfit),
        Healthy("lora", "LoRA: the body frozen, rank-4 adapters on query and value", _lora),
        Healthy(
            "hf-trainer-schedule",
            "Hugging Face Trainer's default: 5e-5, no warm-up, linear decay",
            _hf_schedule,
        ),
        Healthy(
            "label-smoothing",
            "torch's label_smoothing=0.1 at 21,128 tokens; BERT's masking labels",
            _smoothing,
        ),
        Healthy("causal-attention", "causal self-attention (nn.MultiheadAttention)", _causal),
        Healthy("autocast-gradscaler", "autocast to float16 with a GradScaler", _autocast),
    ]
}


def check(setup_id: str) -> list:
    """Build the healthy set-up setup_id and return the Findings of every diagnostic that applies
    to it (seeded: the same on every call, the global generator left alone)."""
    if setup_id not in HEALTHY:
        raise ValueError(f"setup_id must be one of {', '.join(HEALTHY)}, got {setup_id!r}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return HEALTHY[setup_id].run()
