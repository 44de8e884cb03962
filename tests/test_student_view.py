"""What a student reads: the static site of executed lessons, and a failing check's message in a notebook.

Both start one small kernel (a few seconds each); no real lesson is executed here (``make site`` does that).
"""
from __future__ import annotations

import re
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from autograder import lesson_site
from trainkit import selfcheck

ROOT = Path(__file__).resolve().parents[1]
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _small_lesson(folder: Path) -> Path:
    nb = nbformat.v4.new_notebook()
    answer, why = selfcheck.encode("b"), selfcheck.encode("because the second option is right")
    nb.cells = [
        nbformat.v4.new_markdown_cell("# Lesson 99: a tiny lesson\n\nIt plots one line and asks one question, "
                                      "with math $x^2$."),
        nbformat.v4.new_code_cell("import matplotlib.pyplot as plt\nfrom trainkit import selfcheck\n"
                                  "fig, ax = plt.subplots(figsize=(3, 2))\nax.plot([0, 1], [0, 1])\nplt.show()"),
        nbformat.v4.new_code_cell(f"selfcheck.choice('1. Which one?', ['first', 'second'], answer={answer!r}, "
                                  f"explanation={why!r})"),
    ]
    path = folder / "99_tiny_lesson.ipynb"
    nbformat.write(nb, path)
    return path


def test_site_of_one_lesson_is_self_contained_with_a_contents_page_and_a_reveal(tmp_path):
    lesson = _small_lesson(tmp_path)
    out = tmp_path / "site"
    pages = lesson_site.build([lesson], out, jobs=1, log=lambda *_: None)
    assert [p["title"] for p in pages] == ["Lesson 99: a tiny lesson"]
    index = (out / "index.html").read_text()
    assert 'href="99_tiny_lesson.html"' in index and "Lesson 99: a tiny lesson" in index
    page = (out / "99_tiny_lesson.html").read_text()
    assert "data:image/png;base64," in page, "the plot is embedded in the page"
    assert "<details>" in page and "Show answer" in page and "because the second option is right" in page, (
        "a self-check shows as the question with a 'Show answer' reveal")
    assert "application/vnd.jupyter.widget-state+json" not in page, "no widget state: the page needs no widget JS"
    assert 'href="index.html"' in page and (out / "notebooks" / lesson.name).exists()
    for html in (index, page):
        assert str(tmp_path) not in html and str(ROOT) not in html, "no absolute paths of the build machine"
        links = re.findall(r'(?:src|href)="([^"]*)"', html)
        remote = {link for link in links if re.match(r"[a-z]+://", link) and "mathjax" not in link.lower()}
        assert not remote, f"a page links to the network for more than MathJax: {remote}"
        assert "require.js" not in html and "require.min.js" not in html


def test_a_failing_check_shows_its_sentence_without_the_graders_frames(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("import torch\nfrom autograder.checks import expect, expect_close, substitute"),
        nbformat.v4.new_code_cell("expect_close(torch.ones(3), torch.zeros(3), 'init_zero(w)', hint='use zeros_')"),
        nbformat.v4.new_code_cell("with substitute(globals(), x=1):\n    expect(False, 'the gain should be 5/3')"),
    ]
    NotebookClient(nb, allow_errors=True, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    for cell, sentence in ((nb.cells[1], "init_zero(w): expected 0, got 1"), (nb.cells[2], "the gain should be 5/3")):
        (error,) = [o for o in cell.outputs if o.output_type == "error"]  # still an error: the grader sees it
        text = ANSI.sub("", "\n".join(error.traceback))
        assert error.ename == "AssertionError" and sentence in text, text
        assert "checks.py" not in text and "contextlib" not in text, f"the grader's own frames show:\n{text}"
        assert "Cell In[" in text, "the student's line is still shown"
