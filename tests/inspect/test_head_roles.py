"""tfx.inspect.probes.head_roles (chapter 07): per-head roles read from attention maps built by
hand, the rows it counts, and its errors."""

import pytest
import torch

from tfx.inspect.probes import HEAD_ROLES, head_roles

CLS, SEP, PAD = 2, 3, 0


def maps_and_ids():
    ids = torch.tensor([[CLS, 7, 8, 9, SEP, 10, SEP, PAD], [CLS, 11, 12, SEP, PAD, PAD, PAD, PAD]])
    B, L = ids.shape
    real = (ids != PAD).float()  # (B, L)
    w = torch.zeros(2, B, 4, L, L)  # (layers, B, H, L, L)
    for b in range(B):
        n = int(real[b].sum())
        for i in range(L):
            w[0, b, 0, i, max(i - 1, 0)] = 1.0  # previous (row 0: itself)
            w[0, b, 1, i, min(i + 1, n - 1)] = 1.0  # next (the last real row: itself)
            w[0, b, 2, i, i] = 1.0  # self
            w[0, b, 3, i, 0] = 1.0  # all on [CLS]
    w[1] = real[:, None, None, :] / real.sum(1)[:, None, None, None]  # uniform over real keys
    return w, ids


def test_roles_of_hand_built_heads():
    w, ids = maps_and_ids()
    roles = head_roles(list(w), ids, sink_ids=(CLS, SEP))
    assert tuple(roles) == HEAD_ROLES
    assert all(r.shape == (2, 4) for r in roles.values())
    # counted rows: the 6 ordinary tokens (7, 8, 9, 10, 11, 12), none first or last in its row
    # the [CLS] head's rows for 7 and 11 also count as "previous": [CLS] is the key before them
    torch.testing.assert_close(roles["previous"][0], torch.tensor([1.0, 0, 0, 2 / 6]).double())
    torch.testing.assert_close(roles["next"][0], torch.tensor([0, 1.0, 0, 0]).double())
    torch.testing.assert_close(roles["self"][0], torch.tensor([0, 0, 1.0, 0]).double())
    sink = roles["[CLS]/[SEP]"][0]
    # previous: 7 and 11 look at [CLS], 10 at the [SEP] before it; next: 9, 10 and 12 at a [SEP]
    torch.testing.assert_close(sink, torch.tensor([3 / 6, 3 / 6, 0, 1.0]).double())
    # uniform rows: weight on sinks = sinks / real keys (3 of 7, 2 of 4), averaged over rows
    want = (4 * 3 / 7 + 2 * 2 / 4) / 6
    assert abs(roles["[CLS]/[SEP]"][1].mean().item() - want) < 1e-6
    torch.testing.assert_close(roles["max weight"][0], torch.ones(4).double())
    want = (4 / 7 + 2 / 4) / 6  # uniform rows: 1/n, n = 7 and 4 real keys
    assert abs(roles["max weight"][1].mean().item() - want) < 1e-6
    assert head_roles(w, ids, sink_ids=(CLS, SEP))["self"].equal(roles["self"])  # stacked input


def test_errors():
    w, ids = maps_and_ids()
    with pytest.raises(ValueError, match="weights"):
        head_roles(w[0], ids, (CLS, SEP))
    with pytest.raises(ValueError, match="ids"):
        head_roles(w, ids[:, :5], (CLS, SEP))
    with pytest.raises(ValueError, match="no ordinary token"):
        head_roles(w, torch.full_like(ids, PAD), (CLS, SEP))
