"""tfx.inspect.probes for chapter 02: diagonal_spread (the offset-only test) and position_effect,
the pure function behind the positions widget, at every setting of its controls."""

import itertools
import math

import pytest
import torch

import tfx
from tfx.core.example import RUNNING_EXAMPLE, running_example_ids
from tfx.inspect.probes import POSITION_MODES, diagonal_spread, position_effect
from tfx.model.bert import BertConfig, BertModel
from tfx.model.position import alibi_bias, apply_rope, sinusoidal_encoding


def test_diagonal_spread_is_zero_exactly_for_toeplitz():
    offsets = torch.arange(5)[None] - torch.arange(5)[:, None]  # (5, 5): n − m
    toeplitz = torch.sin(offsets.double())  # depends on n − m only
    assert diagonal_spread(toeplitz) == 0.0
    bumped = toeplitz.clone()
    bumped[3, 1] += 0.25  # one entry off its diagonal's value
    assert diagonal_spread(bumped) == pytest.approx(0.25)
    assert diagonal_spread(alibi_bias(4, 6)) == 0.0  # batched (H, L, L)
    assert diagonal_spread(torch.ones(1, 1)) == 0.0


def test_diagonal_spread_tells_rope_from_additive_pe():
    tfx.set_seed(0)
    q, k = torch.randn(16, dtype=torch.float64), torch.randn(16, dtype=torch.float64)
    Q, K = q.expand(10, 16), k.expand(10, 16)  # (10, 16): the same vectors at every position
    assert diagonal_spread(apply_rope(Q) @ apply_rope(K).T) < 1e-12
    pe = sinusoidal_encoding(10, 16, dtype=torch.float64)
    assert diagonal_spread((Q + pe) @ (K + pe).T) > 0.5


def test_diagonal_spread_rejects_bad_input():
    with pytest.raises(TypeError, match="torch.Tensor"):
        diagonal_spread([[1.0, 2.0], [3.0, 4.0]])
    for bad in (torch.ones(3), torch.ones(2, 3), torch.ones(0, 0)):
        with pytest.raises(ValueError, match="square"):
            diagonal_spread(bad)


@pytest.fixture(scope="module")
def tiny():
    tfx.set_seed(0)
    return BertModel(BertConfig.tiny()).eval(), running_example_ids()


@pytest.mark.parametrize("mode,scale", list(itertools.product(POSITION_MODES, (0.0, 0.5, 4.0))))
def test_position_effect_every_setting(tiny, mode, scale):
    model, ids = tiny
    before = {k: v.clone() for k, v in model.state_dict().items()}
    e = position_effect(model, ids, mode, scale, RUNNING_EXAMPLE)
    text = e.report()
    assert text.startswith(f"positions {mode}") and "[CLS]" in text
    assert all(math.isfinite(c) for c in e.change) and len(e.change) == 8
    assert e.cosine is not None and -1 <= e.cosine <= 1
    for k, v in model.state_dict().items():  # the model itself is untouched
        assert torch.equal(v, before[k])
    blind = mode == "dropped" or scale == 0.0
    assert (e.backwards_gap < 1e-5) == blind
    assert ("backwards: yes" in text) == blind


def test_position_effect_values(tiny):
    model, ids = tiny
    kept = position_effect(model, ids, "kept", 1.0)
    assert max(kept.change) == 0 and kept.cosine == pytest.approx(1.0)
    assert kept.tokens == [str(i) for i in ids[0].tolist()]
    rev = position_effect(model, ids, "reversed")
    assert rev.order == list(range(7, -1, -1)) and min(rev.change) > 0.1
    shuf = position_effect(model, ids, "shuffled", seed=0)
    assert sorted(shuf.order) == list(range(8)) and shuf.order != list(range(8))
    own = [i for i, p in enumerate(shuf.order) if p == i]
    others = [c for i, c in enumerate(shuf.change) if i not in own]
    assert max(shuf.change[i] for i in own) < 0.1 * min(others)  # kept its position: barely moves
    dropped = position_effect(model, ids, "dropped", 3.0)
    assert dropped.order == [] and "zero vector" in dropped.report()


def test_position_effect_rejects_bad_settings(tiny):
    model, ids = tiny
    with pytest.raises(ValueError, match="mode must be one of"):
        position_effect(model, ids, "sorted")
    for bad in (-1.0, float("nan"), float("inf"), "2"):
        with pytest.raises(ValueError, match="scale"):
            position_effect(model, ids, "kept", bad)
    with pytest.raises(ValueError, match=r"ids must be a \(1, L\)"):
        position_effect(model, ids[0], "kept")
    with pytest.raises(ValueError, match="128 positions"):
        position_effect(model, torch.full((1, 129), 5), "kept")
    with pytest.raises(ValueError, match="tokens must name the 8 ids"):
        position_effect(model, ids, "kept", tokens=["a"])
