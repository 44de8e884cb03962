"""Proof of the autograder, per assignment, through the real `make grade` pipeline (nbgrader).

One grading run per assignment holds five submissions:
  perfect      the reference solution typed into the student notebook   -> full autograded marks
  blank        the release notebook untouched                          -> 0, and the run completes
  alternative  a correct solution written differently (catalogue)      -> full autograded marks
  warning      the reference, with a warning emitted in every test cell -> full marks all the same
  buggy        the first catalogued bug                                -> loses points in its exercise only
  broken       not a notebook at all (invalid JSON)                    -> listed as FAILED, others graded
The buggy submission cross-checks the fast grader of tests/test_catalogue.py against nbgrader itself.
"""
from __future__ import annotations

import csv

import pytest

from autograder import notebooks as nbu
from course import ASSIGNMENTS, assert_bug_isolated, cell_scores, lost_points, load_catalogue, make_course, release_nb, run_grade, source_nb, submit

# Undo the locked setup cell's warning filter and emit a warning from every test cell (each calls expect),
# the way a chatty library would. nbgrader alone would give those cells 0 points.
WARNING_PREAMBLE = '''
import warnings as _w
_w.simplefilter("always")
_expect_quiet = expect
def expect(condition, message):
    _w.warn("a harmless library warning", DeprecationWarning)
    _expect_quiet(condition, message)
'''


STUDENTS = {"perfect", "blank", "alternative", "warning", "buggy", "broken"}


def autograded(scores):
    """Only the autograded cells: test cells (manual cells have no automatic score)."""
    return {k: v for k, v in scores.items() if k.startswith("test_")}


@pytest.fixture(scope="module", params=ASSIGNMENTS)
def graded(request, tmp_path_factory):
    assignment = request.param
    course = make_course(tmp_path_factory.mktemp(assignment))
    release, source = release_nb(assignment), source_nb(assignment)
    reference = nbu.reference_answers(source)
    first = next(iter(reference))
    submit(course, "perfect", assignment, nbu.fill(release, reference))
    submit(course, "blank", assignment, release)
    submit(course, "alternative", assignment, nbu.fill(release, {**reference, **load_catalogue(assignment).ALTERNATIVE}))
    submit(course, "warning", assignment, nbu.fill(release, {**reference, first: reference[first] + WARNING_PREAMBLE}))
    bug = next(iter(load_catalogue(assignment).BUGS.values()))
    submit(course, "buggy", assignment, nbu.fill(release, {**reference, **bug}))
    submit(course, "broken", assignment, raw='{"this is": "not a notebook"')
    proc = run_grade(course, "--assignment", assignment)
    return assignment, course, proc


def test_grading_run_completes_and_reports_the_broken_submission(graded):
    assignment, course, proc = graded
    assert proc.returncode == 1, f"one submission is broken, so grade should exit 1:\n{proc.stdout}\n{proc.stderr}"
    lines = {line.split()[0]: line for line in proc.stdout.splitlines() if line.split() and line.split()[0] in
             STUDENTS}
    assert set(lines) == STUDENTS, proc.stdout
    assert "FAILED" in lines["broken"] and all("FAILED" not in lines[s] for s in lines if s != "broken"), proc.stdout


def test_reference_solution_scores_full_marks(graded):
    assignment, course, _ = graded
    scores = autograded(cell_scores(course, "perfect", assignment))
    assert scores, "no autograded cells found"
    assert not lost_points(scores), f"reference solution lost points in {lost_points(scores)}"


def test_blank_release_scores_zero(graded):
    assignment, course, _ = graded
    scores = autograded(cell_scores(course, "blank", assignment))
    earned = {k: v for k, v in scores.items() if v[0]}
    assert not earned, f"the untouched release earned points in {earned}"


def test_correct_alternative_keeps_full_marks(graded):
    assignment, course, _ = graded
    scores = autograded(cell_scores(course, "alternative", assignment))
    assert not lost_points(scores), f"a correct alternative implementation lost points in {lost_points(scores)}"


def test_harmless_warning_does_not_zero_a_test_cell(graded):
    assignment, course, _ = graded
    scores = autograded(cell_scores(course, "warning", assignment))
    assert not lost_points(scores), f"warnings in test cells cost points in {lost_points(scores)}"
    html = next((course / "feedback" / "warning" / assignment).glob("*.html")).read_text(encoding="utf-8")
    assert "a harmless library warning" in html, "the warning text should stay visible in the feedback"


def test_a_catalogued_bug_loses_only_its_exercise_points_under_nbgrader(graded):
    assignment, course, _ = graded
    (exercise,) = set(next(iter(load_catalogue(assignment).BUGS.values())))
    per_exercise = nbu.by_exercise(autograded(cell_scores(course, "buggy", assignment)))
    assert_bug_isolated(per_exercise, exercise, "the first catalogued bug, graded by nbgrader,")


def test_feedback_and_csv_are_written(graded):
    assignment, course, proc = graded
    for student in ["perfect", "blank", "alternative", "warning"]:
        assert list((course / "feedback" / student / assignment).glob("*.html")), f"no feedback for {student}"
    rows = list(csv.DictReader((course / "grades" / "grades.csv").open()))
    by_student = {r["student_id"]: float(r["raw_score"]) for r in rows if r["assignment"] == assignment}
    perfect = sum(v[1] for v in autograded(cell_scores(course, "perfect", assignment)).values())
    assert by_student.get("perfect") == pytest.approx(perfect), by_student
    assert by_student.get("blank") == 0.0, by_student
