"""A failing check in a notebook shows the check's sentence and the student's line, not the grader's frames."""
from __future__ import annotations

import re

import nbformat
import pytest
from nbclient import NotebookClient

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def test_a_failing_check_shows_its_sentence_without_the_graders_frames(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("import torch\nfrom trainkit.checks import expect, expect_close, substitute"),
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


def test_preview_prints_how_far_a_band_is_and_never_fails_the_cell(capsys):
    from trainkit.checks import expect, preview

    def band(share, need):
        expect(share >= need, f"passed {share:.0%} of the visible runs; this test cell needs {need:.0%}")

    preview(band, 0.7, 0.8)
    printed = capsys.readouterr().out
    assert "Not reached yet" in printed and "passed 70% of the visible runs; this test cell needs 80%" in printed, printed
    preview(band, 0.7, need=0.6)
    assert capsys.readouterr().out == "", "a band reached on the visible variants prints nothing, as a passing cell"
    with pytest.raises(ZeroDivisionError):       # the answer's own error is not a band missed: the cell fails
        preview(lambda: 1 / 0)


def _judgement_band_cells():
    """{(lab, exercise): [(grade_id, visible source, hidden source)]} of the test cells that preview a band."""
    from autograder import notebooks as nbu
    from course import ASSIGNMENTS, source_nb

    out = {}
    for lab in ASSIGNMENTS:
        for gid, cell in nbu.graded_test_cells(source_nb(lab)).items():
            visible, _, hidden = cell.source.partition("### BEGIN HIDDEN TESTS")
            out.setdefault((lab, nbu.exercise_of(gid)), []).append((gid, visible, hidden))
    return out


def test_a_judgement_exercise_fails_visibly_only_below_its_first_band():
    """The rule of trainkit.checks.preview: a cell that previews a band on the visible variants asserts it on the
    unseen ones (hidden), and an earlier cell of the same exercise asserts that check's first band visibly."""
    previewing = 0
    for (lab, exercise), cells in _judgement_band_cells().items():
        for i, (gid, visible, hidden) in enumerate(cells):
            call = re.search(r"^preview\((expect_\w+),", visible, re.M)
            assert "preview(" not in hidden, f"{lab} {gid}: a hidden check that previews can never fail"
            if not call:
                continue
            previewing += 1
            check = call.group(1)
            assert re.search(rf"^{check}\(", hidden, re.M), f"{lab} {gid}: the unseen variants must assert {check}"
            assert any(re.search(rf"^{check}\(", v, re.M) for _, v, _ in cells[:i]), \
                f"{lab} {gid}: no earlier cell of {exercise} asserts {check}'s first band on the visible variants"
    assert previewing >= 15, f"only {previewing} band cells preview; the judgement exercises of labs 1-7 have 19"
