"""tfx.zoo.healthy: every diagnostic stays quiet on standard healthy set-ups (BitFit, LoRA, Hugging
Face Trainer's default schedule, torch's label smoothing, causal attention, autocast with a
GradScaler), and each fires on its bug in the zoo; together they cover every diagnostic."""

import inspect

import pytest
import torch

from tfx.inspect import diagnose
from tfx.zoo import bugzoo, healthy

torch.set_num_threads(1)

DIAGNOSTICS = {
    name
    for name, fn in inspect.getmembers(diagnose, inspect.isfunction)
    if fn.__module__ == diagnose.__name__
    and not name.startswith("_")
    and "return" in fn.__annotations__
    and fn.__annotations__["return"] is diagnose.Finding
} | {"mlm_labels"}


@pytest.fixture(scope="module")
def findings():
    return {setup: healthy.check(setup) for setup in healthy.HEALTHY}


@pytest.mark.parametrize("setup", list(healthy.HEALTHY))
def test_every_diagnostic_is_quiet_on_healthy_practice(findings, setup):
    for f in findings[setup]:
        assert not f.fired, (setup, str(f))


def test_healthy_set_and_bug_zoo_cover_every_diagnostic(findings):
    assert len(DIAGNOSTICS) == 14
    quiet = {f.check for fs in findings.values() for f in fs}
    assert quiet == DIAGNOSTICS
    # each bug's confirming call; tests/zoo/test_bugzoo.py asserts that its demo fires
    fired = {
        b.confirm.split("(")[0].removeprefix("tfx.inspect.diagnose.") for b in bugzoo.BUGS.values()
    }
    assert fired == DIAGNOSTICS


def test_the_narrowed_diagnostics_still_fire_on_their_bugs():
    # frozen_parameters: the norms alone frozen, in a model that BitFit would leave quiet
    model = healthy._hf_classifier()
    for name, p in model.named_parameters():
        p.requires_grad_("LayerNorm" not in name)
    assert diagnose.frozen_parameters(model).fired
    # permutation_test on a causal layer whose heads are merged with view: still fires
    from tfx.model.attention import causal_mask
    from tfx.zoo.bugs import ViewHeadsAttention

    bad = ViewHeadsAttention(32, 4)
    f = diagnose.permutation_test(lambda x: bad(x, causal_mask(x.size(1))), torch.randn(2, 6, 32))
    assert f.fired, f  # its earlier rows see later tokens: tested as a full layer
    # loss_support: torch's own label smoothing at a toy vocabulary puts 0.0125 on <pad>
    logits, targets = torch.randn(1, 5, 8), torch.tensor([[3, 4, 5, 2, 0]])

    def torch_smoothing(lg, t):
        return torch.nn.functional.cross_entropy(
            lg.flatten(0, 1), t.flatten(), ignore_index=0, label_smoothing=0.1
        )

    f = diagnose.loss_support(torch_smoothing, logits, targets, pad_id=0)
    assert f.fired and "<pad> 0.0125" in f.detail, f


def test_check_bad_input():
    with pytest.raises(ValueError, match="setup_id must be one of bitfit"):
        healthy.check("typo")


def test_lora_linear_starts_as_its_base():
    base = torch.nn.Linear(8, 8)
    lora = healthy.LoRALinear(base)
    x = torch.randn(3, 8)
    assert torch.equal(lora(x), base(x))
    assert [n for n, p in lora.named_parameters() if p.requires_grad] == [
        "lora_A.weight",
        "lora_B.weight",
    ]
