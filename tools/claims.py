"""The Claims page and its export, generated from the chapters' claim cells so that neither can
drift from them.

A claim is settled in a chapter by a markdown cell starting `(claim-a11)=` and a code cell whose
first line is `# CLAIM A11: <verdict>` (CONTRIBUTING.md). The verdict line is read against a
controlled vocabulary (`VOCABULARY`): it begins with `holds` (alone, or followed by `:` or `;`),
with a condition (`holds only when …`, or the scoped forms `holds only for/in/as …`,
`holds exactly when …`, `holds when/if/for/on …`, all counted as *holds only when*), with
`fails …`, or with `not reproducible here …`; anything else fails the build. The evidence kind
(measured here, or by reading) comes from `book/claims.yml`.

`write_page` writes the page (MyST with build-time HTML: summary chart, filterable table, one
row per settlement or open claim) and `claims.json` / `claims.csv` next to it. Run
`python -m tools.claims` to check the chapters only (`--share` also prints the share of each
chapter's reading spent on claims, `claim_share`).
"""

import csv
import html
import io
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import yaml

from tools.chapters import ROOT, chapter_notebooks, is_appendix

CLAIMS_YML = ROOT / "book" / "claims.yml"
# the verdict classes, in the order the page shows them, with a symbol that reads without colour
CLASSES = {
    "holds": "✓",
    "holds only when": "◐",
    "fails": "✗",
    "not reproducible here": "∅",
    "open": "○",
}
# How a verdict line may begin (matched at its start, case-insensitive), and the class it means.
VOCABULARY = (
    (re.compile(r"not reproducible here\b", re.I), "not reproducible here"),
    (
        re.compile(r"holds (only (when|for|in|as)|exactly when|when|if|for|on)\b", re.I),
        "holds only when",
    ),
    (re.compile(r"fails\b", re.I), "fails"),
    (re.compile(r"holds\s*($|[:;])", re.I), "holds"),
)
VOCABULARY_TEXT = (
    "'holds' (alone or followed by ':' or ';'), 'holds only when …' (or a scoped form: "
    "'holds only for/in/as …', 'holds exactly when …', 'holds when/if/for/on …'), 'fails …' "
    "or 'not reproducible here …'"
)
EVIDENCE = {None: "measured here", "reading": "by reading"}
EVIDENCE_SYMBOLS = {"measured here": "⚙", "by reading": "¶"}
LABEL_RE = re.compile(r"^\(claim-([an]\d+)\)=\s*$", re.M)
CODE_RE = re.compile(r"^# CLAIM ([AN]\d+):\s*(.*\S)\s*$")
FIELDS = (
    "id",
    "article",
    "section",
    "section_heading",
    "chapter",
    "chapter_title",
    "paraphrase",
    "verdict",
    "verdict_class",
    "evidence",
    "link",
    "notebook",
)


def classify(verdict: str) -> str:
    """The verdict class of a verdict line, or "" when the line is outside the vocabulary."""
    return next((c for rx, c in VOCABULARY if rx.match(verdict.strip())), "")


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
        """The verdict class (see VOCABULARY)."""
        return classify(self.verdict)


def load_plan(path: Path = CLAIMS_YML) -> dict:
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)


def scan(nb_path: Path) -> list:
    """Every claim a chapter settles, with the problems found (missing label or verdict, a verdict
    outside the vocabulary, unexecuted cell)."""
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
                f"verdict {s.verdict!r} is outside the vocabulary: a verdict line begins with "
                f"{VOCABULARY_TEXT}"
            )
    return list(found.values())


def plan_errors(plan: dict) -> list:
    """Problems in book/claims.yml itself: an unknown article section or evidence kind."""
    errors = []
    for cid, spec in plan["claims"].items():
        sections = plan.get("articles", {}).get(cid[0], {}).get("sections", {})
        if str(spec.get("section")) not in sections:
            errors.append(
                f"book/claims.yml: claim {cid}: section {spec.get('section')!r} is not a section "
                f"of article {cid[0]} (articles: {cid[0]}: sections:)"
            )
        if spec.get("evidence") not in EVIDENCE:
            errors.append(
                f"book/claims.yml: claim {cid}: evidence {spec.get('evidence')!r}: leave it out "
                "(measured here) or write `evidence: reading`"
            )
    return errors


def collect(notebooks: list, plan: dict) -> tuple:
    """(settlements by claim id, list of error strings) over all chapters."""
    by_id, errors = {}, plan_errors(plan)
    for nb_path in notebooks:
        for s in scan(nb_path):
            if s.claim_id not in plan["claims"]:
                s.errors.append(
                    f"unknown claim id (book/claims.yml has {', '.join(plan['claims'])})"
                )
            errors += [f"{nb_path.name}: claim {s.claim_id}: {e}" for e in s.errors]
            by_id.setdefault(s.claim_id, []).append(s)
    return by_id, errors


def records(by_id: dict, plan: dict) -> list:
    """One record per settlement, or per open claim, in the plan's order: the rows of the page
    and of the export."""
    out = []
    for cid, spec in plan["claims"].items():
        section = str(spec.get("section", ""))
        base = {
            "id": cid,
            "article": cid[0],
            "section": section,
            "section_heading": plan.get("articles", {})
            .get(cid[0], {})
            .get("sections", {})
            .get(section, ""),
            "paraphrase": spec["claim"],
        }
        settled = [s for s in by_id.get(cid, []) if s.kind]
        for s in settled:
            number = s.chapter[:2]
            out.append(
                base
                | {
                    "chapter": number,
                    "chapter_title": plan["chapters"].get(number, ""),
                    "verdict": s.verdict,
                    "verdict_class": s.kind,
                    "evidence": EVIDENCE.get(spec.get("evidence"), ""),
                    "link": f"chapters/{s.chapter}.html#claim-{cid.lower()}",
                    "notebook": f"notebooks/{s.chapter}.ipynb",
                }
            )
        if not settled:
            planned = str(spec["chapter"])
            out.append(
                base
                | {
                    "chapter": planned,
                    "chapter_title": plan["chapters"].get(planned, ""),
                    "verdict": "",
                    "verdict_class": "open",
                    "evidence": "",
                    "link": "",
                    "notebook": "",
                }
            )
    return [{k: r[k] for k in FIELDS} for r in out]


def counts(rows: list, key: str) -> dict:
    """{value of key: {verdict class: count}}, in order of first appearance."""
    out = {}
    for r in rows:
        per = out.setdefault(r[key], {})
        per[r["verdict_class"]] = per.get(r["verdict_class"], 0) + 1
    return out


def row_anchor(rec: dict, rows: list) -> str:
    """The id of a record's row on the page: claims-a11 (claims-a11-2 for a second settlement)."""
    same = [r for r in rows if r["id"] == rec["id"]]
    n = next(i for i, r in enumerate(same) if r is rec)
    return f"claims-{rec['id'].lower()}" + (f"-{n + 1}" if n else "")


def place(number: str) -> str:
    """How the page names where a claim is settled: "chapter 03", or "appendix 90" for the claims
    ledger (tools/chapters.py, is_appendix)."""
    return f"{'appendix' if is_appendix(number) else 'chapter'} {number}"


def badge(verdict_class: str) -> str:
    slug = verdict_class.replace(" ", "-")
    return (
        f'<span class="tfx-badge tfx-v-{slug}">{CLASSES[verdict_class]} '
        f"{html.escape(verdict_class)}</span>"
    )


def _e(text: str) -> str:
    return html.escape(str(text), quote=True)


def _chart(title: str, groups: dict, labels: dict, kinds: dict = CLASSES, what="verdicts") -> list:
    """A stacked bar per group, drawn at build time as HTML (no script, no picture): the segments
    carry their counts as text (`kinds`: each kind's symbol), so the chart reads without colour."""
    biggest = max(sum(g.values()) for g in groups.values()) or 1
    lines = [
        f'<table class="tfx-chart"><caption>{_e(title)}</caption>',
        f'<thead><tr><th scope="col"></th><th scope="col">{what}</th>'
        '<th scope="col">total</th></tr></thead><tbody>',
    ]
    for key, per in groups.items():
        total = sum(per.values())
        segments = "".join(
            f'<span class="tfx-seg tfx-v-{c.replace(" ", "-")}" style="flex-grow: {per[c]}" '
            f'title="{per[c]} {_e(c)}">{kinds[c]} {per[c]}</span>'
            for c in kinds
            if per.get(c)
        )
        lines.append(
            f'<tr><th scope="row">{_e(labels.get(key, key))}</th><td><div class="tfx-bar" '
            f'style="width: {100 * total / biggest:.1f}%">{segments}</div></td>'
            f"<td>{total}</td></tr>"
        )
    return lines + ["</tbody></table>"]


def _options(name: str, values: list) -> str:
    opts = "".join(f'<option value="{_e(v)}">{_e(t)}</option>' for v, t in values)
    return f'<select name="{name}"><option value="">all</option>{opts}</select>'


def render(rows: list, plan: dict) -> str:
    """The Claims page in MyST markdown (HTML blocks generated here, at build time)."""
    by_class = {c: sum(r["verdict_class"] == c for r in rows) for c in CLASSES}
    summary = ", ".join(f"{n} {c}" for c, n in by_class.items() if n)
    settled = [r for r in rows if r["verdict_class"] != "open"]
    evidence = {e: sum(r["evidence"] == e for r in settled) for e in EVIDENCE.values()}
    articles = plan.get("articles", {})
    chapter_names = {k: f"{k} · {v}" for k, v in plan["chapters"].items()}
    article_names = {
        k: f"{k}: {a.get('title') or 'the numpy article'}" for k, a in articles.items()
    }
    legend = " ".join(badge(c) for c in CLASSES)

    table = [
        '<div class="tfx-claims">',
        '<form class="tfx-claims-filters" hidden role="search" aria-label="Filter the claims">',
        '<label>Search <input type="search" name="q" placeholder="id, words of the claim or '
        'verdict"></label>',
        "<label>Verdict "
        + _options("verdict", [(c, f"{CLASSES[c]} {c}") for c in CLASSES if by_class[c]])
        + "</label>",
        "<label>Chapter "
        + _options(
            "chapter",
            [
                (k, chapter_names[k])
                for k in plan["chapters"]
                if any(r["chapter"] == k for r in rows)
            ],
        )
        + "</label>",
        "<label>Article " + _options("article", list(article_names.items())) + "</label>",
        # only the kinds some row has: an option that always shows 0 rows reads as broken
        "<label>Evidence "
        + _options(
            "evidence",
            [(e, e) for e in EVIDENCE.values() if evidence[e]]
            + [("none", "none (open)")] * (len(settled) < len(rows)),
        )
        + "</label>",
        '<output class="tfx-claims-count" aria-live="polite"></output>',
        "</form>",
        '<table class="tfx-claims-table">',
        "<thead><tr>"
        + "".join(
            f'<th scope="col">{h}</th>'
            for h in (
                "Claim",
                "Claim (paraphrased)",
                "Verdict",
                "Where in the article",
                "Settled in",
                "Evidence",
            )
        )
        + "</tr></thead>",
        "<tbody>",
    ]
    for r in rows:
        heading = f"§{r['section']} {r['section_heading']}".strip()
        if r["link"]:
            where = (
                f'<a class="tfx-claim-link" href="{_e(r["link"])}">{place(r["chapter"])}: '
                f"{_e(r['chapter_title'])} ›</a>"
            )
        else:
            written = any(r2["chapter"] == r["chapter"] and r2["link"] for r2 in rows)
            where = f"open: {place(r['chapter'])} ({_e(r['chapter_title'])}" + (
                ")" if written else ", not written yet)"
            )
        table.append(
            f'<tr id="{row_anchor(r, rows)}" data-verdict="{_e(r["verdict_class"])}" '
            f'data-chapter="{r["chapter"]}" data-article="{r["article"]}" '
            f'data-evidence="{_e(r["evidence"] or "none")}">'
            f'<td data-label="Claim"><strong>{r["id"]}</strong> {badge(r["verdict_class"])}</td>'
            f'<td data-label="Claim (paraphrased)">{_e(r["paraphrase"])}</td>'
            f'<td data-label="Verdict">{_e(r["verdict"]) or "—"}</td>'
            f'<td data-label="Where in the article" lang="zh">{_e(heading)}</td>'
            f'<td data-label="Settled in">{where}</td>'
            f'<td data-label="Evidence">{EVIDENCE_SYMBOLS.get(r["evidence"], "")} '
            f"{_e(r['evidence'] or '—')}</td></tr>"
        )
    table += ["</tbody></table>", "</div>"]

    chart = (
        ['<div class="tfx-charts">']
        + _chart(
            "Verdicts per chapter", dict(sorted(counts(rows, "chapter").items())), chapter_names
        )
        + ['<div class="tfx-charts-side">']
        + _chart("Verdicts per article", counts(rows, "article"), article_names)
        + _chart(
            "Evidence of the settled claims",
            {
                k: {
                    e: sum(r["evidence"] == e for r in settled if r["article"] == k)
                    for e in EVIDENCE_SYMBOLS
                }
                for k in articles
            },
            article_names,
            EVIDENCE_SYMBOLS,
            "evidence",
        )
        + ["</div>", "</div>"]
    )
    n_settled = len(settled) or 1
    about = []
    for k, a in articles.items():
        ids = [cid for cid in plan["claims"] if cid[0] == k]
        title = f", *{a['title']}*" if a.get("title") else ""
        about.append(f"**{ids[0]}–{ids[-1]}** come from article {k}{title}: {a['about'].strip()}")
    return "\n".join(
        [
            "---",
            "html_theme.sidebar_secondary.remove: true",
            "---",
            "",
            "# Claims",
            "",
            "Every claim of the book's two source articles (Chinese blog posts), restated in the",
            "book's own words and settled by a cell of a chapter (or of the claims ledger, the",
            "appendix) that computes the evidence and ends in",
            "`assert`s, re-checked each time CI executes the book. "
            + "; ".join(about)
            + ". Each row names the section of the article the claim comes from, so the",
            "paraphrase can be checked against the source, and links to the cell that settles",
            "it. The page and its export are generated from the chapters' claim cells by",
            "`tools/claims.py`; a verdict line outside the vocabulary below fails the build.",
            "",
            "```{raw} html",
            f'<p class="tfx-claims-legend">Verdicts: {legend}. <em>Holds only when</em> also '
            "counts the verdicts that name a scope (<em>holds for …</em>, <em>holds on this "
            "probe</em>); <em>open</em> means the chapter planned to settle the claim is not "
            "written yet. Evidence is ⚙ <em>measured here</em> when the cell computes it, "
            "¶ <em>by reading</em> when the verdict rests on reading a paper, a source file or "
            "the article itself.</p>",
            '<p class="tfx-claims-export">Download every row: '
            '<a href="claims.json" download>claims.json</a> · '
            '<a href="claims.csv" download>claims.csv</a> (id, article, section, chapter, '
            "paraphrase, verdict, verdict class, evidence, link to the settling cell).</p>",
            "```",
            "",
            "## Summary",
            "",
            f"{len(plan['claims'])} claims, {len(rows)} rows: {summary}. Of the "
            f"{len(settled)} settled, {evidence['measured here']} "
            f"({evidence['measured here'] / n_settled:.0%}) are measured here and "
            f"{evidence['by reading']} ({evidence['by reading'] / n_settled:.0%}) settled by "
            "reading.",
            "",
            "```{raw} html",
            *chart,
            "```",
            "",
            "## All claims",
            "",
            "```{raw} html",
            *table,
            "```",
            "",
        ]
    )


def export(rows: list, out_dir: Path) -> None:
    """claims.json and claims.csv (one row per settlement or open claim) into out_dir."""
    out_dir.mkdir(parents=True, exist_ok=True)
    payload = {
        "generated_by": "tools/claims.py from the chapters' claim cells and book/claims.yml",
        "fields": list(FIELDS),
        "claims": rows,
    }
    (out_dir / "claims.json").write_text(
        json.dumps(payload, ensure_ascii=False, indent=1) + "\n", encoding="utf-8"
    )
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=FIELDS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    (out_dir / "claims.csv").write_text(buf.getvalue(), encoding="utf-8")


BACK_RE = re.compile(r"^(\(claim-([an]\d+)\)=[ \t]*\n#+ [^\n]*)(?:\n|$)", re.M)


def annotate_chapter(nb_path: Path, rows: list) -> int:
    """In the book's copy of a chapter, put under each claim heading its verdict badge and a link
    back to its row on the Claims page; return how many claims were annotated."""
    nb = nbformat.read(nb_path, as_version=4)
    by_id = {}
    for r in rows:
        if r["link"].startswith(f"chapters/{nb_path.stem}.html#"):
            by_id.setdefault(r["id"].lower(), (r, row_anchor(r, rows)))
    n = 0

    def add(m):
        nonlocal n
        found = by_id.get(m[2])
        if found is None:
            return m[1]
        r, anchor = found
        n += 1
        return (
            f'{m[1]}\n\n<p class="tfx-claim-meta tfx-claim-{r["verdict_class"].replace(" ", "-")}">'
            f'{badge(r["verdict_class"])} <a class="tfx-claim-back" href="../claims.html#{anchor}">'
            f"↩ {r['id']} among all claims</a></p>\n\n"
        )

    for cell in nb.cells:
        if cell.cell_type == "markdown" and "(claim-" in cell.source:
            cell.source = BACK_RE.sub(add, cell.source)
    nbformat.write(nb, nb_path)
    return n


def write_page(
    out: Path,
    notebooks: list = None,
    plan: dict = None,
    export_dir: Path = None,
    copies: list = None,
) -> list:
    """Write the page, the export into export_dir and the claim annotations into the book's copies
    of the chapters (each when given); return the errors (the page is written either way, so a
    build shows what is there)."""
    notebooks = chapter_notebooks() if notebooks is None else notebooks
    plan = load_plan() if plan is None else plan
    by_id, errors = collect(notebooks, plan)
    rows = records(by_id, plan)
    Path(out).write_text(render(rows, plan), encoding="utf-8")
    if export_dir is not None:
        export(rows, Path(export_dir))
    for copy in copies or []:
        annotate_chapter(Path(copy), rows)
    return errors


HEADING_RE = re.compile(r"^(#{1,6}) ", re.M)
# A chapter spends at most about this share of its reading on claims (issue 22); the rest of the
# article's claims live in the ledger appendices.
CHAPTER_CLAIM_SHARE = 0.15
# Chapters the limit does not apply to, and why.
SHARE_EXEMPT = {
    "11_bug_zoo": "the bug zoo is where the claims that the articles' code is broken are settled "
    "(issue 22); running that code and finding what breaks is the chapter's subject",
}


def claim_share(nb_path: Path) -> float:
    """The share of a notebook's reading, in characters of cell source (markdown and code), that
    sits in claim sections. A claim section starts at a markdown cell holding a claim label and
    runs to the next markdown cell with a heading at the claim's heading level or above (any
    heading, for a claim written as a box without one) or with another claim's label."""
    nb = nbformat.read(nb_path, as_version=4)
    total = inside = 0
    level = None  # the open claim section's heading level, None outside one
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            heads = [len(h) for h in HEADING_RE.findall(cell.source)]
            if LABEL_RE.search(cell.source):
                level = min(heads) if heads else 6
            elif level is not None and heads and min(heads) <= level:
                level = None
        total += len(cell.source)
        inside += len(cell.source) if level is not None else 0
    return inside / total if total else 0.0


def main() -> int:
    _, errors = collect(chapter_notebooks(), load_plan())
    for e in errors:
        print(e, file=sys.stderr)
    if "--share" in sys.argv[1:]:
        for nb in chapter_notebooks():
            share = claim_share(nb)
            over = share > CHAPTER_CLAIM_SHARE and not is_appendix(nb)
            note = "  exempt" if nb.stem in SHARE_EXEMPT else "  over" if over else ""
            print(f"{nb.stem:32s} {share:6.1%}{note}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
