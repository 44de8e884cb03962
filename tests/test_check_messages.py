"""A failing check in a notebook shows the check's sentence and the student's line, not the grader's frames."""
from __future__ import annotations

import re

import nbformat
from nbclient import NotebookClient

ANSI = re.compile(r"\x1b\[[0-9;]*m")


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
