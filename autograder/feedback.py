"""Feedback and grade export people can act on (plugged into nbgrader through ``nbgrader_config.py``).

- ``FeedbackLabels``, a preprocessor in ``nbgrader generate_feedback``'s pipeline (after nbgrader's GetGrades):
  names each test cell by its exercise and behaviour (``test_calculate_gain__leaky_relu`` ->
  "calculate_gain — leaky_relu", "+ hidden tests" when it has some), marks every grade that still awaits
  manual grading, and leaves out the source of hidden tests (their results and messages stay) unless
  ``FeedbackLabels.show_hidden_tests`` is True (``nbgrader generate_feedback --FeedbackLabels.show_hidden_tests=True``).
  It also says when the lab was due (with the student's extension and late days), when the exchange recorded the
  submission, how late it was and what that cost (``autograder.term.policy.lateness_note``, from the gradebook and
  the course file ``FeedbackLabels.course_file``).
  ``FeedbackLabels.show`` chooses what a submission graded on submit shows before the instructor's own grading
  (autograder/on_submit.py; the modes are ``autograder.term.policy.SHOWS``): "everything" (the default, and
  what `make grade` writes), "visible" (the test cells students already have, without hidden tests; a judgement
  exercise's cells are withheld) or "bands" (also each judgement exercise's band cells' scores, without their
  output, which names the unseen variants). A withheld cell shows "graded later" and no score; a test cell
  with hidden tests says whether its visible tests passed (``visible_outcome``: read from where the cell stopped,
  which tells nothing of the hidden part), with the visible failure's message. The page's score counts only what
  it shows.
- ``FeedbackExporter``, the HTML exporter of generate_feedback, whose template (``templates/course_feedback``,
  built on nbgrader's own feedback template) shows those labels, and "awaiting grading" instead of a score of 0
  for a written answer nobody has graded yet. It is a ``MathMLExporter``: formulas in markdown (``$...$``,
  ``$$...$$``, ``\begin{align}...``) become MathML when the page is built, which browsers render natively, so the
  page loads nothing from the network (no MathJax; a class hub may have none). ``publish/lesson_site.py`` uses
  the same exporter for the lessons' pages.
- ``CsvWithPending``, nbgrader's CSV export with one more column, ``manual_grading``: "pending" while some
  answer of that submission awaits manual grading.
"""
from __future__ import annotations

import csv
import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import nbgrader
from jinja2 import DictLoader, pass_context
from latex2mathml.converter import convert as _latex2mathml
from nbconvert.exporters import HTMLExporter
from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath
from nbgrader.api import Gradebook, MissingEntry
from nbgrader.plugins.export import CsvExportPlugin
from nbconvert.preprocessors import Preprocessor
from traitlets import Bool, Enum, Unicode, default

from autograder.notebooks import exercise_of, loads_unseen
from autograder.term import policy

TEMPLATES = str(Path(__file__).resolve().parent / "templates")
_FORMGRADER = os.path.join(os.path.dirname(nbgrader.__file__), "server_extensions", "formgrader")
NBGRADER_TEMPLATES = os.path.join(_FORMGRADER, "templates")
BOOTSTRAP_CSS = os.path.join(_FORMGRADER, "static", "node_modules", "bootstrap", "dist", "css")

HIDDEN = re.compile(r"^[ \t]*### BEGIN HIDDEN TESTS[^\n]*\n.*?^[ \t]*### END HIDDEN TESTS[^\n]*(\n|$)", re.S | re.M)
HIDDEN_PLACEHOLDER = "# (hidden tests: not shown; their results are below)\n"


def label(grade_id: str, cell_type: str, is_solution: bool) -> str:
    """What the feedback calls a graded cell: the exercise (and behaviour) rather than "Test cell"."""
    if is_solution:
        name = grade_id[len("written_"):] if grade_id.startswith("written_") else grade_id
        kind = "written answer" if cell_type == "markdown" else "answer"
        return f"{kind} — {name}"
    if grade_id.startswith("test_"):
        exercise, _, part = grade_id[len("test_"):].partition("__")
        return f"{exercise} — {part}" if part else exercise
    return grade_id


ANSI = re.compile(r"\x1b\[[0-9;]*m")


def visible_outcome(cell) -> str | None:
    """How the visible part of a graded test cell with hidden tests went, without telling how the hidden part did:
    "failed" when the cell stopped on a statement before ``### BEGIN HIDDEN TESTS`` (the student's own run of the
    released lab fails there too), "passed" when it stopped on a hidden statement or did not stop, None when the
    traceback does not say where (a timeout, a kernel that died)."""
    found = HIDDEN.search(cell.source)
    errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    if not found or not errors:
        return "passed" if found else None
    first_hidden = cell.source[:found.start()].count("\n") + 1
    trace = ANSI.sub("", "\n".join(errors[0].get("traceback", [])))
    # The outermost frame in this cell is the top-level statement that was running (cells run them in order).
    lines = re.findall(rf"Cell In\[{cell.get('execution_count')}\], line (\d+)", trace)
    if not lines:
        return None
    return "failed" if int(lines[0]) < first_hidden else "passed"


def judgement_exercises(nb) -> set[str]:
    """The exercises graded on unseen variants: those with a test cell whose hidden part loads them."""
    return {exercise_of(c.metadata.nbgrader["grade_id"]) for c in nb.cells
            if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("grade_id", "").startswith("test_")
            and loads_unseen(c.source)}


class FeedbackLabels(Preprocessor):
    """Labels, pending marks and hidden-test sources of the feedback (see the module docstring)."""

    enabled = Bool(True, help="Whether generate_feedback runs it.").tag(config=True)

    show_hidden_tests = Bool(False, help="Show the source of hidden tests in the feedback (their results are "
                                         "always shown).").tag(config=True)
    hidden_placeholder = Unicode(HIDDEN_PLACEHOLDER, help="What replaces hidden tests in the feedback.").tag(config=True)
    course_file = Unicode("", help="The course file (term.toml), for the line on due date and lateness.").tag(config=True)
    show = Enum(list(policy.SHOWS), "everything", help="What the feedback shows: every test, or (graded on submit, "
                "before the deadline) only the visible tests, or those and the judgement exercises' bands."
                ).tag(config=True)

    def preprocess(self, nb, resources):
        info = resources["nbgrader"]
        self._judgement = judgement_exercises(nb)
        with Gradebook(info["db_url"]) as gb:
            try:
                notebook = gb.find_submission_notebook(info["notebook"], info["assignment"], info["student"])
                self._pending = {g.name: bool(g.needs_manual_grade) for g in notebook.grades}
            except MissingEntry:
                self._pending = {}
            term = policy.load_file(self.course_file) if self.course_file else None
            info["lateness"] = policy.lateness_note(gb, info.get("student"), info.get("assignment"), term,
                                                    points=self.show == "everything")
            nb, resources = super().preprocess(nb, resources)
        pending = [c.metadata.nbgrader for c in nb.cells if c.metadata.get("nbgrader", {}).get("pending")]
        info["pending_points"] = float(sum(m.get("points") or 0 for m in pending))
        info["pending_count"] = len(pending)
        graded = [c.metadata.nbgrader for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]
        withheld = [m for m in graded if m.get("withheld")]
        info["withheld_points"] = float(sum(m.get("points") or 0 for m in withheld))
        info["withheld_count"] = len(withheld)
        if withheld:   # the page's score is what it shows: a withheld cell's score would tell its result
            shown = [m for m in graded if not m.get("withheld") and not m.get("pending")]
            info["shown_score"] = float(sum(m.get("score") or 0 for m in shown))
            info["shown_points"] = float(sum(m.get("points") or 0 for m in shown))
            outcomes = [m["visible_outcome"] for m in withheld if m.get("visible_outcome")]
            info["visible_passed"], info["visible_checked"] = outcomes.count("passed"), len(outcomes)
        return nb, resources

    def withholds(self, cell) -> str:
        """"" where this feedback shows the cell whole; "all" where it withholds its score and output; "output"
        where it shows the score only (a judgement exercise's band, under show = "bands")."""
        meta = cell.metadata.get("nbgrader", {})
        gid = meta.get("grade_id", "")
        if self.show == "everything" or not meta.get("grade") or meta.get("solution") or not gid.startswith("test_"):
            return ""
        if exercise_of(gid) in self._judgement:   # its cells worth points are its bands (and its validity check)
            return "output" if self.show == "bands" and meta.get("points") else "all"
        return "all" if HIDDEN.search(cell.source) else ""

    def preprocess_cell(self, cell, resources, index):
        meta = cell.metadata.get("nbgrader", {})
        withholding = self.show != "everything"
        if not (meta.get("grade") or meta.get("task")):
            if withholding and cell.cell_type == "code":
                cell.outputs = []   # see below: the student's own cells print what the hidden tests ran beside them
            return cell, resources
        gid = meta.get("grade_id", "")
        meta["label"] = label(gid, cell.cell_type, bool(meta.get("solution")))
        meta["pending"] = self._pending.get(gid, False)
        withhold = self.withholds(cell)
        if withhold:
            outcome = visible_outcome(cell) if withhold == "all" and exercise_of(gid) not in self._judgement else None
            cell.source = HIDDEN.sub(self.hidden_placeholder, cell.source)
            meta["withheld"] = withhold == "all"
            meta["visible_outcome"] = outcome or ""
        if withholding and cell.cell_type == "code":
            # Hidden tests run in the same kernel as the student's code, so anything printed (a test's message, a
            # solution or any later cell printing In[-1], the arguments the hidden tests passed, an exception whose
            # text the student's code chose) could carry them: feedback that withholds prints no output at all. A
            # visible failure is named without its message; the student's own run of the cell shows it.
            cell.outputs = []
        if withhold:
            return cell, resources
        if cell.cell_type == "code" and not meta.get("solution") and HIDDEN.search(cell.source):
            meta["label"] += " (+ hidden tests)"
            if not self.show_hidden_tests:
                cell.source = HIDDEN.sub(self.hidden_placeholder, cell.source)
                for out in cell.get("outputs", []):
                    # a traceback quotes the failing line, which may be a hidden one: keep the message only
                    if out.get("output_type") == "error":
                        out["traceback"] = [f"{out.get('ename', 'Error')}: {out.get('evalue', '')}"]
        return cell, resources


# The MathML elements latex2mathml writes: anything else in its output (raw HTML that \text{...} passed through)
# means the formula stays TeX.
MATHML_TAGS = frozenset(
    "math mrow mi mn mo mtext ms mspace msub msup msubsup munder mover munderover mmultiscripts mprescripts none "
    "mfrac msqrt mroot mstyle merror mpadded mphantom menclose mtable mtr mtd mlabeledtr maction semantics "
    "annotation".split())
UNKNOWN_COMMAND = re.compile(r"^\\[A-Za-z]")  # latex2mathml keeps a command it does not know as text: "\foo"


def tex_to_mathml(tex: str, display: bool = False) -> str | None:
    """The MathML of one TeX formula (no delimiters), or None where latex2mathml cannot convert it: a syntax error,
    a command it does not know, or anything but MathML in its output. Never raises."""
    try:
        mathml = _latex2mathml(tex.strip(), display="block" if display else "inline")
        root = ET.fromstring(mathml)
    except Exception:  # noqa: BLE001 -- latex2mathml's own errors and whatever else a malformed formula makes it raise
        return None
    for el in root.iter():
        if el.tag.rpartition("}")[2] not in MATHML_TAGS or UNKNOWN_COMMAND.match(el.text or ""):
            return None
    return mathml


class MathMLRenderer(IPythonRenderer):
    """nbconvert's markdown renderer, with each formula it finds written as MathML.

    The markdown parser decides what is math, as for MathJax: code spans and code blocks are never math, nor is a
    lone dollar ("$5"). One more rule, pandoc's: inline math neither starts nor ends with a space, so "costs $5 and
    $10" is prose. What is not converted is written as nbconvert writes it, TeX between its dollars."""

    def inline_math(self, body: str) -> str:
        if body[:1].isspace() or body[-1:].isspace():
            return super().inline_math(body)
        return tex_to_mathml(body) or super().inline_math(body)

    def block_math(self, body: str) -> str:
        return tex_to_mathml(body, display=True) or super().block_math(body)

    def latex_environment(self, name: str, body: str) -> str:
        env = f"\\begin{{{name}}}{body}\\end{{{name}}}"
        return tex_to_mathml(env, display=True) or super().latex_environment(name, body)


# Replaces nbconvert's mathjax.html.j2 (the templates' `mathjax` macro): no script.
NO_MATHJAX = "{%- macro mathjax(url='') -%}{%- endmacro -%}"


class MathMLExporter(HTMLExporter):
    """An HTML exporter whose formulas need no network: markdown (cells, markdown outputs, the feedback's comments;
    all go through the ``markdown2html`` filter) is rendered by ``MathMLRenderer``, and the templates' MathJax script
    is left out unless ``mathjax`` is True (then it loads from ``mathjax_url``, for any TeX left unconverted)."""

    mathjax = Bool(False, help="Also load MathJax from mathjax_url (for formulas latex2mathml cannot convert).").tag(
        config=True)

    @default("extra_loaders")
    def _without_mathjax(self):
        return [] if self.mathjax else [DictLoader({"mathjax.html.j2": NO_MATHJAX})]

    @pass_context
    def markdown2html(self, context, source):
        """nbconvert's HTMLExporter.markdown2html, with MathMLRenderer."""
        cell = context.get("cell", {})
        renderer = MathMLRenderer(
            escape=False,
            attachments=cell.get("attachments", {}),
            embed_images=self.embed_images,
            path=context.get("resources", {}).get("metadata", {}).get("path", ""),
            anchor_link_text=self.anchor_link_text,
            exclude_anchor_links=self.exclude_anchor_links,
            **self.lexer_options,
        )
        return MarkdownWithMath(renderer=renderer).render(source)


class FeedbackExporter(MathMLExporter):
    """generate_feedback's exporter: nbgrader's feedback page with the course's labels and pending marks.

    Its template is set in nbgrader_config.py (``c.FeedbackExporter.template_name``): config for this class
    wins over the ``HTMLExporter`` settings that nbgrader and the Formgrader apply, so feedback generated from
    the Formgrader's button looks the same as `make grade`'s. Formulas are MathML and the page loads no MathJax
    (``MathMLExporter``)."""


class CsvWithPending(CsvExportPlugin):
    """nbgrader's CSV export plus a ``manual_grading`` column: "pending" while an answer awaits manual grading."""

    def export(self, gradebook: Gradebook) -> None:
        super().export(gradebook)
        dest = self.to or "grades.csv"
        with open(dest, newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            rows, fields = list(reader), list(reader.fieldnames or [])
        for row in rows:
            try:
                sub = gradebook.find_submission(row["assignment"], row["student_id"])
            except MissingEntry:
                row["manual_grading"] = ""
            else:
                row["manual_grading"] = "pending" if sub.needs_manual_grade else ""
        with open(dest, "w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=[*fields, "manual_grading"])
            writer.writeheader()
            writer.writerows(rows)
