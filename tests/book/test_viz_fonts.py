"""tfx.book.viz's font lookup for token labels: a fixed order of font files (matplotlib's default,
then WenQuanYi Micro Hei, the font the stored outputs were drawn with, then the rest by path), the
first file that draws every glyph wins, and no file means "#i" labels. Tested with fake font lists
on any machine, and against the fonts installed here."""

from types import SimpleNamespace

import pytest

pytest.importorskip("matplotlib")
from matplotlib import font_manager  # noqa: E402

import tfx  # noqa: E402
from tfx.book import viz  # noqa: E402

CJK = "我喜欢吃苹果"
DEFAULT = font_manager.findfont(font_manager.FontProperties())


def test_font_files_order_is_fixed(monkeypatch):
    fake = ["/z/NotoSansCJK-Regular.ttc", "/usr/share/fonts/wqy/wqy-microhei.ttc", "/a/Other.ttf"]
    for order in (fake, fake[::-1]):  # whatever order matplotlib's cache lists them in
        ttflist = [SimpleNamespace(fname=f) for f in order + [DEFAULT, fake[0]]]
        monkeypatch.setattr(font_manager.fontManager, "ttflist", ttflist)
        assert viz.font_files() == [DEFAULT, fake[1], fake[2], fake[0]]


def test_first_font_with_every_glyph_wins(monkeypatch):
    both = {ord(c) for c in "[CLS]SEP" + CJK}
    charmaps = {"default.ttf": set(range(32, 127)), "wqy-microhei.ttc": both, "a-cjk.ttf": both}
    monkeypatch.setattr(viz, "_charmap", lambda path: charmaps.get(path, set()))
    tokens = tfx.core.example.RUNNING_EXAMPLE
    font = viz._token_font(tokens, ["default.ttf", "wqy-microhei.ttc", "a-cjk.ttf"])
    assert font.get_file() == "wqy-microhei.ttc"
    assert viz._token_font(tokens, ["default.ttf", "a-cjk.ttf"]).get_file() == "a-cjk.ttf"
    assert viz._token_font(["[CLS]"], ["default.ttf", "a-cjk.ttf"]).get_file() == "default.ttf"
    assert viz._token_font(tokens, ["default.ttf", "missing.ttf"]) is None
    assert viz._token_font(tokens, []) is None


def test_labels_without_a_cjk_font_are_indices():
    labels, font = viz.token_labels(tfx.core.example.RUNNING_EXAMPLE, candidates=[DEFAULT])
    assert font is None
    assert labels == ["[CLS]", "#1", "#2", "#3", "#4", "#5", "#6", "[SEP]"]


def test_labels_with_a_font_are_the_tokens():
    tokens = ["[CLS]", "α", "β", "[SEP]"]  # DejaVu Sans, shipped with matplotlib, draws Greek
    labels, font = viz.token_labels(tokens, candidates=[DEFAULT])
    assert labels == tokens and font.get_file() == DEFAULT


def test_unreadable_font_file_is_skipped(tmp_path):
    bad = tmp_path / "broken.ttf"
    bad.write_bytes(b"not a font")
    assert viz._charmap(bad) == set() and viz._charmap(tmp_path / "absent.ttf") == set()
    assert ord("A") in viz._charmap(DEFAULT)


def test_installed_cjk_font_is_wenquanyi_micro_hei():
    """On CI `.ci/run` installs fonts-wqy-microhei, the font the stored outputs were drawn with."""
    if not any("wqy-microhei" in f for f in viz.font_files()):
        pytest.skip(
            "fonts-wqy-microhei is not installed (`.ci/run` installs it; then delete "
            "~/.cache/matplotlib so matplotlib sees it)"
        )
    labels, font = viz.token_labels(tfx.core.example.RUNNING_EXAMPLE)
    assert labels == tfx.core.example.RUNNING_EXAMPLE
    assert "wqy-microhei" in font.get_file()


def test_any_plot_text_falls_back_to_the_cjk_font():
    """Importing tfx.book.viz puts the CJK font behind the default one, so an axis label with
    Chinese characters draws them (site review F2: chapter 07's label was drawn as tofu boxes)."""
    import warnings

    import matplotlib.pyplot as plt

    if not viz.CJK_FAMILY:
        pytest.skip("no installed font draws 我喜欢吃苹果")
    assert plt.rcParams["font.family"][-1] == viz.CJK_FAMILY
    assert viz.use_cjk_fallback() == viz.CJK_FAMILY  # idempotent
    assert plt.rcParams["font.family"].count(viz.CJK_FAMILY) == 1
    fig, ax = plt.subplots()
    ax.set(xlabel=f"hidden activation of {CJK[4]}", title="Latin text")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "Glyph ... missing from font(s)" is a UserWarning
        fig.canvas.draw()
    plt.close(fig)


def test_bad_arguments_are_refused():
    with pytest.raises(TypeError, match="tokens must be a list of strings"):
        viz.token_labels("我喜欢")
    with pytest.raises(TypeError, match="tokens must be a list of strings"):
        viz.token_labels(["[CLS]", 7])
    with pytest.raises(TypeError, match="candidates must be a list of font file paths"):
        viz.token_labels(["[CLS]"], candidates=DEFAULT)
