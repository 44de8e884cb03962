"""The catalogue of plausible buggy implementations: each loses its own exercise's points, nothing else.

tests/catalogue/<assignment>.py defines BUGS = {bug name: {solution cell grade_id: buggy source}}.
The exercise a bug belongs to is the (single) cell it replaces. Each variant is graded with
``autograder.notebooks.quick_grade`` (setup, solution and test cells only, nbgrader's scoring rule);
test_quick_grader_agrees_with_reference checks that this quick grader gives the reference full marks.
"""
from __future__ import annotations

import pytest

from jupyter_client.manager import KernelManager

from autograder import notebooks as nbu
from course import ASSIGNMENTS, CATALOGUE, assert_bug_isolated, load_catalogue, lost_points, release_nb, source_nb

CASES = [(a, bug) for a in ASSIGNMENTS if (CATALOGUE / f"{a}.py").exists() for bug in load_catalogue(a).BUGS]
# CONTRIBUTING.md, "Tests that are fair to students": a catalogue's VISIBLE_ONLY = {solution cell: source} holds the
# answers a student stopped at once the visible tests of an earlier edition were silent.
VISIBLE_ONLY_CASES = [(a, cell) for a in ASSIGNMENTS if (CATALOGUE / f"{a}.py").exists()
                      for cell in getattr(load_catalogue(a), "VISIBLE_ONLY", {})]


def test_every_assignment_has_a_catalogue_of_three_bugs_per_exercise():
    for assignment in ASSIGNMENTS:
        assert (CATALOGUE / f"{assignment}.py").exists(), f"tests/catalogue/{assignment}.py is missing"
        bugs = load_catalogue(assignment).BUGS
        exercises = set(nbu.by_exercise({g: (0, 0) for g in nbu.graded_test_cells(source_nb(assignment))}))
        for exercise in exercises:
            n = sum(1 for cells in bugs.values() if set(cells) == {exercise})
            assert n >= 3, f"{assignment}: exercise {exercise!r} has {n} catalogued bugs, want at least 3"


@pytest.fixture(scope="session")
def kernel():
    """One kernel per pytest worker; each variant runs in a namespace cleared with %reset -f and
    starts with the lab's own setup cell (imports, seeds, warning filters). Saves ~2 s per variant."""
    km = KernelManager(kernel_name="python3")
    km.start_kernel()
    yield km
    km.shutdown_kernel(now=True)


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_quick_grader_agrees_with_reference(assignment):
    scores = nbu.quick_grade(source_nb(assignment))  # a fresh kernel, as nbgrader would use
    assert scores and not lost_points(scores), f"the reference solution should score full marks, lost {lost_points(scores)}"


@pytest.mark.parametrize("assignment,bug", CASES)
def test_bug_loses_exactly_its_exercise_points(assignment, bug, kernel):
    cells = load_catalogue(assignment).BUGS[bug]
    (exercise,) = set(cells)
    per_exercise = nbu.by_exercise(nbu.quick_grade(source_nb(assignment), cells, km=kernel))
    assert_bug_isolated(per_exercise, exercise, f"bug {bug!r}")


@pytest.mark.parametrize("assignment,cell", VISIBLE_ONLY_CASES)
def test_visible_tests_catch_the_visible_tests_only_answer(assignment, cell, kernel):
    """In the student's lab (visible tests only), a VISIBLE_ONLY answer fails a test of its own exercise."""
    answer = {cell: load_catalogue(assignment).VISIBLE_ONLY[cell]}
    per_exercise = nbu.by_exercise(nbu.quick_grade(release_nb(assignment), answer, km=kernel))
    got, out_of = per_exercise[cell]
    assert got < out_of, (f"{assignment}: every visible test of {cell!r} passes for its visible-tests-only answer; "
                          "a visible test must show the behaviour it misses")
