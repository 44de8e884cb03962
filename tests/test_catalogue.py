"""The catalogue of plausible buggy implementations: each loses its own exercise's points, nothing else.

tests/catalogue/<assignment>.py defines BUGS = {bug name: {solution cell grade_id: buggy source}}.
The exercise a bug belongs to is the (single) cell it replaces. Each variant is graded like
``autograder.notebooks.quick_grade`` (setup, solution and test cells only, hidden tests included, nbgrader's
scoring rule), by ``autograder.notebooks.PrefixGrader``: the cells before the bug's own cell are the
reference's, so they run once per assignment and each bug runs from there on in a forked copy of that state,
up to the last cell the bug's cell can reach (``autograder.cellflow``; its own exercise's tests always run). The
later test cells read nothing the bug changed, so they score what the reference scores: full marks.
That this fast grading is the real one is proved against nbgrader itself: tests/test_autograder.py grades each
lab's first bug with `make grade` and checks that the forked run scored every test cell it ran as nbgrader did and
that the cells it left out scored full marks there; the same file proves that the reference scores full marks
under nbgrader (and nbval runs every source notebook, hidden tests included, in a fresh kernel).
"""
from __future__ import annotations

import copy
import re

import pytest

from autograder import notebooks as nbu
from course import ASSIGNMENTS, CATALOGUE, assert_bug_isolated, load_catalogue, lost_points, release_nb, source_nb

CATALOGUES = {a: load_catalogue(a) for a in ASSIGNMENTS if (CATALOGUE / f"{a}.py").exists()}


def _cell_order(assignment: str) -> dict[str, int]:
    return {gid: i for i, gid in enumerate(nbu.solution_cells(source_nb(assignment)))}


def _cases():
    """(assignment, bug) in notebook order of the bug's cell, one xdist group per assignment: one worker runs
    the notebook's cells once, front to back, forking at each exercise for its bugs (no restarts)."""
    out = []
    for assignment, module in CATALOGUES.items():
        order = _cell_order(assignment)
        for bug, cells in sorted(module.BUGS.items(), key=lambda kv: min(order.get(c, -1) for c in kv[1])):
            out.append(pytest.param(assignment, bug, id=f"{assignment}-{bug}",
                                    marks=pytest.mark.xdist_group(f"catalogue::{assignment}")))
    return out


def _visible_only_cases():
    out = []
    for assignment, module in CATALOGUES.items():
        order = _cell_order(assignment)
        for cell in sorted(getattr(module, "VISIBLE_ONLY", {}), key=lambda c: order.get(c, -1)):
            out.append(pytest.param(assignment, cell, id=f"{assignment}-{cell}",
                                    marks=pytest.mark.xdist_group(f"catalogue-visible::{assignment}")))
    return out


CASES = _cases()
# CONTRIBUTING.md, "Tests that are fair to students": a catalogue's VISIBLE_ONLY = {solution cell: source} holds the
# answers a student stopped at once the visible tests of an earlier edition were silent.
VISIBLE_ONLY_CASES = _visible_only_cases()


def test_every_assignment_has_a_catalogue_of_three_bugs_per_exercise():
    for assignment in ASSIGNMENTS:
        assert (CATALOGUE / f"{assignment}.py").exists(), f"tests/catalogue/{assignment}.py is missing"
        bugs = load_catalogue(assignment).BUGS
        exercises = set(nbu.by_exercise({g: (0, 0) for g in nbu.graded_test_cells(source_nb(assignment))}))
        for exercise in exercises:
            n = sum(1 for cells in bugs.values() if set(cells) == {exercise})
            assert n >= 3, f"{assignment}: exercise {exercise!r} has {n} catalogued bugs, want at least 3"


def _previews_as_checks(nb):
    """The notebook with every visible ``preview(check, ...)`` written as ``check(...)``: it fails exactly where the
    student's copy prints that a band is not reached yet (``trainkit.checks.preview`` prints when, and only when,
    the check raises AssertionError), so "a visible test shows the miss" covers the band cells that preview."""
    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.source = re.sub(r"^preview\((\w+), ", r"\1(", cell.source, flags=re.M)
    return nb


class _Graders:
    """One PrefixGrader alive per pytest worker (each holds a Python process with the notebook's state)."""

    def __init__(self):
        self.key, self.grader = None, None

    def get(self, kind: str, assignment: str) -> nbu.PrefixGrader:
        if self.key != (kind, assignment):
            self.close()
            nb = source_nb(assignment) if kind == "source" else _previews_as_checks(release_nb(assignment))
            self.key, self.grader = (kind, assignment), nbu.PrefixGrader(nb)
        return self.grader

    def close(self):
        if self.grader is not None:
            self.grader.close()
        self.key, self.grader = None, None


@pytest.fixture(scope="session")
def graders():
    g = _Graders()
    yield g
    g.close()


# Defined before the bug test: in each assignment's group it runs first, where the worker has run nothing yet (a
# correct alternative usually rewrites the first exercise too, and the worker only moves forward).
@pytest.mark.parametrize("assignment", [pytest.param(a, marks=pytest.mark.xdist_group(f"catalogue::{a}"))
                                        for a in CATALOGUES])
def test_the_correct_alternative_keeps_every_point(assignment, graders):
    """The catalogue's ALTERNATIVE (a correct solution written differently, in many exercises at once) scores full
    marks in every test cell, hidden tests included, graded as the bugs are (test_autograder's buggy submission
    proves that this grading scores as nbgrader does)."""
    scores = graders.get("source", assignment).grade(CATALOGUES[assignment].ALTERNATIVE, skip_unaffected=True)
    assert scores and not lost_points(scores), \
        f"{assignment}: the catalogue's correct alternative lost points in {lost_points(scores)}"


@pytest.mark.parametrize("assignment,bug", CASES)
def test_bug_loses_exactly_its_exercise_points(assignment, bug, graders):
    cells = CATALOGUES[assignment].BUGS[bug]
    (exercise,) = set(cells)
    # Stopping at the first lost points leaves out only the exercise's own later test cells: whether it lost points
    # is then decided, and every cell of another exercise that the bug can reach still runs.
    grader = graders.get("source", assignment)
    per_exercise = nbu.by_exercise(grader.grade(cells, skip_unaffected=True, stop_at_first_failure=True))
    assert_bug_isolated(per_exercise, exercise, f"bug {bug!r}")


@pytest.mark.parametrize("assignment,cell", VISIBLE_ONLY_CASES)
def test_visible_tests_catch_the_visible_tests_only_answer(assignment, cell, graders):
    """In the student's lab (visible tests only), a VISIBLE_ONLY answer fails a test of its own exercise, or, in a
    judgement exercise, is told by a band cell that it has not reached that band yet (_previews_as_checks)."""
    answer = {cell: CATALOGUES[assignment].VISIBLE_ONLY[cell]}
    per_exercise = nbu.by_exercise(graders.get("release", assignment).grade(answer, skip_unaffected=True,
                                                                            stop_at_first_failure=True))
    got, out_of = per_exercise[cell]
    assert got < out_of, (f"{assignment}: every visible test of {cell!r} passes, and says nothing is missing, for its "
                          "visible-tests-only answer; a visible test must show the behaviour it misses")
