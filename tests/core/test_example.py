"""The running example every chapter follows."""

from tfx.core import example


def test_running_example_ids():
    ids = example.running_example_ids()
    assert ids.shape == (1, 8)
    assert ids[0, 0].item() == example.build_vocab([])["[CLS]"]


def test_padded_example_pads_the_short_sentence():
    ids, mask = example.padded_example()
    assert ids.shape == mask.shape == (2, 8)
    assert mask[0].tolist() == [1] * 8
    assert mask[1].tolist() == [1] * len(example.SHORT_EXAMPLE) + [0] * 2
    assert (ids[1, len(example.SHORT_EXAMPLE) :] == example.build_vocab([])["[PAD]"]).all()
