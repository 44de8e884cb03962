"""What a person reads: the static site of executed lessons, and `make help`.

The site test executes one tiny lesson in one kernel (a few seconds); no real lesson is executed here
(``make site`` does that).
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import nbformat

from publish import lesson_site
from trainkit import selfcheck

ROOT = Path(__file__).resolve().parents[1]


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


def test_make_help_lists_every_target():
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z][a-z0-9-]*):(?!=)", makefile, re.M)) - {"help"}
    shown = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    missing = sorted(t for t in targets if not re.search(rf"^make {re.escape(t)}\b", shown, re.M))
    assert not missing, f"make help does not list: {missing}"
