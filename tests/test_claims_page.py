"""The Claims page is generated from the chapters' claim cells (tools/claims.py): every claim id of
the source articles is listed once, a settled claim links to its label, an unsettled one is open
with its planned chapter, and a malformed claim cell is reported rather than silently dropped."""

import re

import nbformat
import pytest

from tools import claims
from tools.chapters import chapter_notebooks

IDS = [f"A{i}" for i in range(1, 70)] + [f"N{i}" for i in range(1, 31)]


@pytest.fixture(scope="module")
def plan():
    return claims.load_plan()


def test_plan_lists_every_claim_once(plan):
    assert list(plan["claims"]) == IDS
    for cid, spec in plan["claims"].items():
        assert spec["claim"].strip(), cid
        assert spec["chapter"] in plan["chapters"], (
            f"{cid}: chapter {spec['chapter']} is not in the plan"
        )
    assert list(plan["chapters"]) == [f"{i:02d}" for i in range(12)]


def test_real_chapters_have_well_formed_claims(plan):
    _, errors = claims.collect(chapter_notebooks(), plan)
    assert not errors, "\n".join(errors)


def _chapter(tmp_path, name, cells):
    nb = nbformat.v4.new_notebook(cells=cells)
    path = tmp_path / f"{name}.ipynb"
    nbformat.write(nb, path)
    return path


def _settle(cid, verdict, executed=True):
    md = nbformat.v4.new_markdown_cell(f"(claim-{cid.lower()})=\n### Claim {cid}: a title\n\nWhy.")
    code = nbformat.v4.new_code_cell(
        f"# CLAIM {cid}: {verdict}\nassert True", execution_count=1 if executed else None
    )
    return [md, code]


def test_page_links_settled_claims_and_lists_open_ones(tmp_path, plan):
    nb = _chapter(
        tmp_path,
        "03_attention",
        _settle("A11", "holds only when W_O has no bias")
        + _settle("A12", "fails: the softmax runs along rows"),
    )
    by_id, errors = claims.collect([nb], plan)
    assert errors == []
    page = claims.render(by_id, plan, [nb])
    assert "| A11 |" in page and "holds only when W_O has no bias" in page
    assert "{ref}`chapter 03 <claim-a11>`" in page
    assert re.search(r"\| A1 \|.*\| open \| chapter 03 \|", page), (
        "A1's chapter exists, so no 'not written yet'"
    )
    assert re.search(
        r"\| N9 \|.*\| open \| chapter 08 \(Performance tuning, not written yet\) \|", page
    )
    assert "99 claims: 97 open, 1 holds only when, 1 fails." in page
    assert len(re.findall(r"^\| [AN]\d+ \|", page, re.M)) == 99


@pytest.mark.parametrize(
    "cells,message",
    [
        (_settle("A11", "holds")[1:], "no markdown cell starts with the label"),
        (_settle("A11", "holds")[:1], "no code cell starts with"),
        (_settle("A11", "probably true"), "does not begin with one of"),
        (_settle("A11", "holds", executed=False), "has not been executed"),
        (_settle("A99", "holds"), "unknown claim id"),
    ],
)
def test_malformed_claims_are_reported(tmp_path, plan, cells, message):
    _, errors = claims.collect([_chapter(tmp_path, "03_attention", cells)], plan)
    assert any(message in e for e in errors), errors


def test_verdict_kinds():
    s = claims.Settlement("A1", "03_x", verdict="Holds only when d_k is large")
    assert s.kind == "holds only when"
    assert claims.Settlement("A1", "03_x", verdict="fails twice").kind == "fails"
    assert (
        claims.Settlement("A1", "03_x", verdict="not reproducible here: BLEU").kind
        == "not reproducible here"
    )
