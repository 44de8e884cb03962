"""Feedback people can act on (autograder/feedback.py), checked without grading anything (seconds).

The graded end of it (labels, pending marks and hidden tests in real feedback HTML, the CSV's manual_grading
column, make grade's table) is checked on the graded submissions of tests/test_autograder.py.
"""
from __future__ import annotations

import copy
import re
from pathlib import Path

import nbformat
import pytest
from traitlets.config.loader import PyFileConfigLoader

from autograder import notebooks as nbu
from autograder.feedback import (HIDDEN, CsvWithPending, FeedbackExporter, FeedbackLabels, judgement_exercises, label,
                                 tex_to_mathml)
from course import ASSIGNMENTS, ROOT, source_nb


def test_every_test_cell_is_named_by_its_exercise_and_behaviour():
    for assignment in ASSIGNMENTS:
        tests = nbu.graded_test_cells(source_nb(assignment))
        labels = {gid: label(gid, "code", False) for gid in tests}
        for gid, text in labels.items():
            exercise, _, part = gid[len("test_"):].partition("__")
            assert text.startswith(exercise) and part in text, f"{assignment}: {gid} is labelled {text!r}"
        assert len(set(labels.values())) == len(labels), f"{assignment}: two test cells share a label: {labels}"
    assert label("test_calculate_gain__leaky_relu", "code", False) == "calculate_gain — leaky_relu"
    assert label("written_linear_default", "markdown", True) == "written answer — linear_default"


def hidden_only_lines(cell_source: str, release_text: str) -> list[str]:
    """Lines of the hidden tests that appear nowhere in the student's release notebook."""
    hidden = [m.group(0) for m in HIDDEN.finditer(cell_source)]
    lines = [ln.strip() for block in hidden for ln in block.splitlines()[1:-1]]
    return [ln for ln in lines if len(ln) >= 20 and ln not in release_text]


def run_labels(nb, **config):
    pre = FeedbackLabels(**config)
    pre._pending, pre._judgement = {}, judgement_exercises(nb)
    return [pre.preprocess_cell(cell, {}, i)[0] for i, cell in enumerate(nb.cells)]


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_hidden_tests_source_is_left_out_by_default_and_shown_on_request(assignment):
    source = source_nb(assignment)
    release_text = "\n".join(c.source for c in nbu.read(ROOT / "labs" / assignment / f"{assignment}.ipynb").cells)
    with_hidden = {gid: c for gid, c in nbu.graded_test_cells(source).items() if HIDDEN.search(c.source)}
    assert with_hidden, f"{assignment} has no hidden tests to leave out"
    graded = copy.deepcopy(source)
    for cell in graded.cells:  # a failed hidden check, as autograde records it
        if nbu.grade_id(cell) in with_hidden:
            cell.outputs = [nbformat.v4.new_output("error", ename="AssertionError", evalue="the hidden check's message",
                                                   traceback=["Traceback ...", f"----> 9 {cell.source.splitlines()[-2]}"])]
    shown = {nbu.grade_id(c): c for c in run_labels(copy.deepcopy(graded), show_hidden_tests=True)}
    hidden = {nbu.grade_id(c): c for c in run_labels(copy.deepcopy(graded))}
    for gid, original in with_hidden.items():
        secret = hidden_only_lines(original.source, release_text)
        visible = HIDDEN.sub("", original.source).strip().splitlines()
        default = hidden[gid]
        assert "BEGIN HIDDEN TESTS" not in default.source and not [ln for ln in secret if ln in default.source], \
            f"{assignment}/{gid}: hidden test source is shown in the feedback by default"
        assert all(ln in default.source for ln in visible), f"{assignment}/{gid}: the visible tests must stay"
        assert "hidden tests: not shown" in default.source
        assert default.metadata.nbgrader["label"].endswith("(+ hidden tests)")
        (err,) = default.outputs
        assert err["evalue"] == "the hidden check's message" and "the hidden check's message" in err["traceback"][0]
        assert not any(ln in "".join(err["traceback"]) for ln in secret), "the traceback quotes a hidden line"
        assert shown[gid].source == original.source, "show_hidden_tests=True must show the whole test cell"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_feedback_graded_on_submit_withholds_what_the_labs_mode_says(assignment):
    """show = visible: a test cell with hidden tests, and every cell of a judgement exercise, lose their score and
    output; bands: a judgement exercise's cells worth points show their score, never their output; everything:
    the feedback make grade writes."""
    graded = copy.deepcopy(source_nb(assignment))
    secret = "unseen variant 'sgd-wide-7' failed"
    for cell in graded.cells:   # every cell printed something (the student's own may print what the tests ran)
        if cell.cell_type == "code":
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=secret)]
    judgement = judgement_exercises(graded)
    assert judgement, f"{assignment} has a judgement exercise"
    tests = nbu.graded_test_cells(graded)
    for show in ("visible", "bands", "everything"):
        cells = {nbu.grade_id(c): c for c in run_labels(copy.deepcopy(graded), show=show)}
        for gid, original in tests.items():
            cell, meta = cells[gid], cells[gid].metadata.nbgrader
            in_judgement, hidden = nbu.exercise_of(gid) in judgement, bool(HIDDEN.search(original.source))
            withheld = show != "everything" and (hidden or in_judgement) and not (
                show == "bands" and in_judgement and meta["points"])
            assert bool(meta.get("withheld")) == withheld, (show, gid)
            assert bool(cell.outputs) == (show == "everything"), (show, gid, "output")
            assert "BEGIN HIDDEN TESTS" not in cell.source
        others = [c for c in cells.values()] + [c for c in run_labels(copy.deepcopy(graded), show=show)
                                                if c.cell_type == "code" and nbu.grade_id(c) not in tests]
        assert all(bool(c.outputs) == (show == "everything") for c in others if c.cell_type == "code"), \
            f"{show}: a solution or plain cell's output could carry what the hidden tests ran"
    info = {"notebook": assignment, "score": 9.0, "max_score": 14.0, "pending_count": 0, "late_penalty": 1.5,
            "withheld_count": 2, "withheld_points": 4.0, "shown_score": 3.0, "shown_points": 10.0,
            "visible_passed": 1, "visible_checked": 2}
    page = feedback_html(nbformat.v4.new_notebook(), info)
    body = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", page.split("<body", 1)[1]))
    assert (f"{assignment} (graded on submit: visible tests pass in 1 of 2 test cells, score so far 3 / 10, 4 points "
            "graded later)") in body, body[:600]
    assert "Score:" not in body and "9 / 14" not in body and "1.5" not in body, "neither the whole score nor the " \
        "penalty in points (either would tell what is withheld)"


def graded_cell(source: str, failing_line: int | None, count: int = 7):
    """A test cell as autograde leaves it: stopped by an AssertionError on ``failing_line`` (None: it passed)."""
    cell = nbformat.v4.new_code_cell(source, execution_count=count)
    cell.metadata["nbgrader"] = {"grade": True, "grade_id": "test_thing__part", "points": 2, "solution": False,
                                 "locked": True}
    if failing_line:
        frame = f"\x1b[36mCell\x1b[39m\x1b[36m \x1b[39m\x1b[32mIn[{count}]\x1b[39m\x1b[32m, line {failing_line}\x1b[39m\n"
        inner = "\x1b[36mCell\x1b[39m In[3], line 2, in helper()\n"
        cell.outputs = [nbformat.v4.new_output("error", ename="AssertionError", evalue=f"line {failing_line} says no",
                                               traceback=["---", frame, inner, f"AssertionError: line {failing_line}"])]
    return cell


def test_visible_mode_tells_how_the_visible_tests_went_and_nothing_of_the_hidden_ones():
    source = "x = 1\nexpect(x == 1, 'visible one')\nhelper()\n### BEGIN HIDDEN TESTS\nhelper()\nexpect(False, 'hid')\n" \
             "### END HIDDEN TESTS\n"
    outcomes = {}
    for failing in (None, 2, 3, 5, 6):
        (cell,) = run_labels(nbformat.v4.new_notebook(cells=[graded_cell(source, failing)]), show="visible")
        meta = cell.metadata.nbgrader
        outcomes[failing] = meta["visible_outcome"]
        assert meta["withheld"] and "BEGIN HIDDEN" not in cell.source
        assert cell.outputs == [], "no output: the message of even a visible failure is the student's code's to write"
    assert outcomes == {None: "passed", 2: "failed", 3: "failed", 5: "passed", 6: "passed"}
    no_frame = graded_cell(source, 2)
    no_frame.outputs[0]["traceback"] = ["Timeout: the cell ran past its limit"]
    (cell,) = run_labels(nbformat.v4.new_notebook(cells=[no_frame]), show="visible")
    assert cell.metadata.nbgrader["visible_outcome"] == "" and cell.outputs == [], "unknown: say nothing"


def test_nbgrader_config_wires_feedback_export_and_exchange():
    config = PyFileConfigLoader("nbgrader_config.py", path=str(ROOT)).load_config()
    names = [p.__name__ for p in config.GenerateFeedback.preprocessors]
    assert names.index("GetGrades") < names.index("FeedbackLabels"), names
    assert config.GenerateFeedback.exporter_class is FeedbackExporter
    assert (Path(config.FeedbackExporter.extra_template_basedirs[0]) / config.FeedbackExporter.template_name
            / "index.html.j2").is_file()
    assert config.FeedbackLabels.show_hidden_tests is False, "hidden tests' source must be hidden by default"
    assert config.ExportApp.plugin_class is CsvWithPending
    assert config.Exchange.root == str(ROOT / ".nbgrader_exchange")
    assert config.Exchange.path_includes_course is True, "fetched labs must land in <course>/<lab>, not beside labs/"


def test_make_install_creates_the_exchange_world_writable_with_the_sticky_bit():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    install = makefile.split("\ninstall:", 1)[1].split("\n\n", 1)[0]
    assert "mkdir -p .nbgrader_exchange" in install and "chmod 1777 .nbgrader_exchange" in install, install
    # Ignored as a folder (make install) and as the link make hub puts there: a pattern without the trailing slash.
    assert ".nbgrader_exchange" in (ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()


def feedback_html(nb, info: dict | None = None) -> str:
    """The feedback page of ``nb`` as generate_feedback's exporter writes it, configured by nbgrader_config.py (no
    gradebook: the grades the template shows are given here)."""
    config = PyFileConfigLoader("nbgrader_config.py", path=str(ROOT)).load_config()
    info = info or {"notebook": "maths", "score": 1.0, "max_score": 3.0, "pending_count": 0, "late_penalty": 0}
    body, _ = FeedbackExporter(config=config).from_notebook_node(nb, resources={"nbgrader": info})
    return body


def test_feedback_formulas_are_mathml_and_the_page_loads_nothing_from_the_network():
    nb = nbformat.v4.new_notebook()
    written = nbformat.v4.new_markdown_cell("Scale by $\\frac{1}{\\sqrt{d}}$ here.")
    written.metadata.nbgrader = {"grade": True, "solution": True, "grade_id": "written_scale", "points": 2,
                                 "score": 1, "comment": "Almost: it is $\\sqrt{d_k}$."}
    nb.cells = [
        nbformat.v4.new_markdown_cell("Inline $\\sqrt{d}$ and display:\n\n$$\\mathrm{lr}_t = \\eta\\,"
                                      "\\min(1, t/W)$$\n\nA GPU hour costs $5 and a TPU $10 (prose). Shell: "
                                      "`echo $OUT $x$`. Broken: $\\frac{1}{$ and $\\foo{x}$ stay TeX."),
        written,
        nbformat.v4.new_code_cell("price = '$5'  # $\\alpha$ in code stays as it is"),
    ]
    page = feedback_html(nb)
    text = re.sub(r"<math.*?</math>", "", page, flags=re.S)
    assert page.count("<math") == 4, "inline, display, the written answer's and its comment's formula"
    assert 'display="block"' in page and "<msqrt>" in page
    assert "$\\sqrt{d}$" not in page and "$$" not in text, "converted formulas leave no TeX behind"
    assert "costs $5 and a TPU $10 (prose)" in text, "a dollar in prose is not math"
    assert "<code>echo $OUT $x$</code>" in text, "a code span is not math"
    assert "$\\frac{1}{$" in text and "$\\foo{x}$" in text, "TeX the converter cannot read stays as it was"
    assert "&#39;$5&#39;" in text or "'$5'" in text, "code cells are not touched"
    scripts = re.findall(r"<script[^>]*>", page)
    remote = [u for u in re.findall(r'(?:src|href)="([^"]*)"', page) if re.match(r"[a-z]+://", u)]
    assert not scripts and not remote, f"the feedback page loads something: {scripts} {remote}"


def test_tex_to_mathml_never_raises_and_refuses_what_it_cannot_convert():
    assert tex_to_mathml("x^2").startswith("<math")
    assert 'display="block"' in tex_to_mathml("x^2", display=True)
    for bad in ("\\frac{1}{", "x^", "\\left(", "\\begin{foo} x", "\\foo x", "\\text{a<b}", "\\text{<img src=x>}"):
        assert tex_to_mathml(bad) is None, bad
