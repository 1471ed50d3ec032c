"""tfx.zoo.bugzoo: every bug's demo fires when injected and is quiet when healthy; the catalogue and
its table are complete; the widget's frame runs in both states."""

import dataclasses

import matplotlib
import pytest
import torch

from tfx.zoo import bugzoo

matplotlib.use("Agg")
torch.set_num_threads(1)


@pytest.mark.parametrize("bug_id", list(bugzoo.BUGS))
def test_demo_fires_when_injected_quiet_when_healthy(bug_id):
    import matplotlib.pyplot as plt

    for injected in (True, False):
        d = bugzoo.demo(bug_id, injected)
        if d.figure is not None:
            plt.close(d.figure)
        assert d.finding.fired is injected, d.text
        assert d.finding.check == bugzoo.BUGS[bug_id].confirm.split("(")[0].split(".")[-1]
        assert d.text.endswith(str(d.finding))
        assert "nan" not in d.text.split("\n")[0]


def test_demo_is_reproducible_and_leaves_the_global_generator_alone():
    torch.manual_seed(123)
    before = torch.rand(3)
    torch.manual_seed(123)
    a = bugzoo.demo("missing-positions").text
    assert torch.equal(torch.rand(3), before)
    assert bugzoo.demo("missing-positions").text == a


def test_every_bug_is_complete():
    assert len(bugzoo.BUGS) >= 17
    for bug_id, bug in bugzoo.BUGS.items():
        assert bug.id == bug_id
        for field in dataclasses.fields(bug):
            if field.name != "claims":  # a bug that settles no claim has ()
                assert getattr(bug, field.name), (bug_id, field.name)
        assert isinstance(bug.claims, tuple)
        assert bug.confirm.startswith("tfx.inspect.diagnose.")
        fn = bug.confirm.split("(")[0].removeprefix("tfx.inspect.diagnose.")
        assert callable(getattr(bugzoo.diagnose, fn))
    assert {"A50", "N23", "N26", "N28"} <= {c for b in bugzoo.BUGS.values() for c in b.claims}


def test_table_has_one_row_per_bug():
    rows = bugzoo.table().splitlines()
    assert rows[0].startswith(
        "| symptom | likely cause | the call that confirms it | it cannot tell apart | fix |"
    )
    assert len(rows) == 2 + len(bugzoo.BUGS)
    for row, bug_id in zip(rows[2:], bugzoo.BUGS):
        assert row.endswith(f"[§](#bug-{bug_id}) |")
        assert row.count(" | ") == 5  # no stray | inside a cell
        assert "<pad>" not in row  # an HTML tag to a Markdown renderer: it would vanish
    assert "&lt;pad&gt;" in bugzoo.table()


def test_demo_bad_input():
    with pytest.raises(ValueError, match="bug_id must be one of unscaled-scores"):
        bugzoo.demo("typo")
    with pytest.raises(TypeError, match="injected must be True or False"):
        bugzoo.demo("unscaled-scores", injected=1)


def test_widget_frames():
    import matplotlib.pyplot as plt

    from tfx.book.widgets import bug_zoo_widget, frame_parts

    box = bug_zoo_widget()
    assert set(box.tfx_controls) == {"bug", "injected"}
    assert box.tfx_controls["bug"].description == "bug"
    assert box.tfx_controls["injected"].value is True
    for bug_id in bugzoo.BUGS:
        for injected in (True, False):
            text, fig = frame_parts(box.tfx_frame(bug=bug_id, injected=injected))
            assert ("FIRED" if injected else "quiet") in text.splitlines()[-1]
            if fig is not None:
                plt.close(fig)


def test_pair_prints_both_states(capsys):
    bad, good = bugzoo.pair("pad-in-loss")
    out = capsys.readouterr().out
    assert bad.finding.fired and not good.finding.fired
    assert out == f"{bad.text}\n\n{good.text}\n"
