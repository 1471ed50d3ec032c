"""The Claims page, generated from the chapters' claim cells so that it cannot drift from them.

A claim is settled in a chapter by a markdown cell starting `(claim-a11)=` and a code cell whose
first line is `# CLAIM A11: <verdict>` (CONTRIBUTING.md). Each row links to the label with {ref}, so
a strict book build fails when a label is missing. Run `python -m tools.claims` to check the
chapters only.
"""

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import yaml

from tools.chapters import ROOT, chapter_notebooks

CLAIMS_YML = ROOT / "book" / "claims.yml"
VERDICTS = ("holds only when", "not reproducible here", "holds", "fails")  # longest prefix first
LABEL_RE = re.compile(r"^\(claim-([an]\d+)\)=\s*$", re.M)
CODE_RE = re.compile(r"^# CLAIM ([AN]\d+):\s*(.*\S)\s*$")


@dataclass
class Settlement:
    """One claim as one chapter settles it."""

    claim_id: str
    chapter: str  # notebook stem, e.g. "03_attention"
    verdict: str = ""
    label: bool = False
    errors: list = field(default_factory=list)

    @property
    def kind(self) -> str:
        return next((v for v in VERDICTS if self.verdict.lower().startswith(v)), "")


def load_plan(path: Path = CLAIMS_YML) -> dict:
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)


def scan(nb_path: Path) -> list:
    """Every claim a chapter settles, with the problems found (missing label or verdict, unexecuted
    cell)."""
    nb = nbformat.read(nb_path, as_version=4)
    found = {}
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for cid in LABEL_RE.findall(cell.source):
                s = found.setdefault(cid.upper(), Settlement(cid.upper(), nb_path.stem))
                s.label = True
        elif cell.cell_type == "code":
            first = cell.source.split("\n", 1)[0]
            m = CODE_RE.match(first)
            if not m:
                continue
            s = found.setdefault(m[1], Settlement(m[1], nb_path.stem))
            s.verdict = m[2]
            if cell.get("execution_count") is None:
                s.errors.append("its claim cell has not been executed")
            if any(o.get("output_type") == "error" for o in cell.get("outputs", [])):
                s.errors.append("its claim cell stored an error")
    for s in found.values():
        if not s.label:
            s.errors.append(f"no markdown cell starts with the label (claim-{s.claim_id.lower()})=")
        if not s.verdict:
            s.errors.append(f"no code cell starts with '# CLAIM {s.claim_id}: <verdict>'")
        elif not s.kind:
            s.errors.append(
                f"verdict {s.verdict!r} does not begin with one of {', '.join(VERDICTS)}"
            )
    return list(found.values())


def collect(notebooks: list, plan: dict) -> tuple:
    """(settlements by claim id, list of error strings) over all chapters."""
    by_id, errors = {}, []
    for nb_path in notebooks:
        for s in scan(nb_path):
            if s.claim_id not in plan["claims"]:
                s.errors.append(
                    f"unknown claim id (book/claims.yml has {', '.join(plan['claims'])})"
                )
            errors += [f"{nb_path.name}: claim {s.claim_id}: {e}" for e in s.errors]
            by_id.setdefault(s.claim_id, []).append(s)
    return by_id, errors


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render(by_id: dict, plan: dict, notebooks: list) -> str:
    """The Claims page in MyST markdown."""
    titles = {p.stem[:2]: p.stem for p in notebooks}
    counts = {}
    rows = []
    for cid, spec in plan["claims"].items():
        settled = by_id.get(cid, [])
        if settled:
            verdict = "<br>".join(_cell(s.verdict) for s in settled)
            where = ", ".join(
                f"{{ref}}`chapter {s.chapter[:2]} <claim-{cid.lower()}>`" for s in settled
            )
            for s in settled:
                counts[s.kind] = counts.get(s.kind, 0) + 1
        else:
            planned = str(spec["chapter"])
            name = titles.get(planned)
            verdict = "open"
            where = f"chapter {planned}" + (
                "" if name else f" ({plan['chapters'][planned]}, not written yet)"
            )
            counts["open"] = counts.get("open", 0) + 1
        rows.append(f"| {cid} | {_cell(spec['claim'])} | {verdict} | {where} |")
    summary = ", ".join(f"{n} {k}" for k, n in sorted(counts.items(), key=lambda kv: -kv[1]))
    return "\n".join(
        [
            "# Claims",
            "",
            "The source articles make claims about the Transformer and BERT. The book",
            "restates each one (in its own words, below) and settles it in a chapter cell",
            "that computes the evidence and ends in `assert`s, so every verdict is re-checked",
            "each time CI executes the book. A verdict is *holds*, *fails*, *holds only when",
            "…* or *not reproducible here*; a claim whose chapter is not written yet is *open*.",
            "This page is generated from the chapters' claim cells by `tools/claims.py`.",
            "",
            f"{len(plan['claims'])} claims: {summary}.",
            "",
            "| Id | Claim (paraphrased) | Verdict | Settled in |",
            "|---|---|---|---|",
            *rows,
            "",
        ]
    )


def write_page(out: Path, notebooks: list = None, plan: dict = None) -> list:
    """Write the page; return the errors (the page is written either way, so a build shows what is
    there)."""
    notebooks = chapter_notebooks() if notebooks is None else notebooks
    plan = load_plan() if plan is None else plan
    by_id, errors = collect(notebooks, plan)
    Path(out).write_text(render(by_id, plan, notebooks), encoding="utf-8")
    return errors


def main() -> int:
    _, errors = collect(chapter_notebooks(), load_plan())
    for e in errors:
        print(e, file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
