"""Proof of the autograder, per assignment, through the real `make grade` pipeline (nbgrader).

A grading run (the parallel grader, as `make grade` runs it) holds, for each assignment, four submissions:
  perfect      the reference solution typed into the student notebook,  -> full autograded marks, no cell raises
               with a warning emitted from every test cell (a chatty       (lab 8: its challenge re-run verified
               library's: nbgrader alone would give such cells 0)          by the grader and on the leaderboard)
  blank        the release notebook untouched                          -> 0, and the run completes
  buggy        the first exercise's first catalogued bug               -> loses points in its exercise only
  broken       not a notebook at all (invalid JSON)                    -> listed as FAILED, others graded
The buggy submission cross-checks the fast grader of tests/test_catalogue.py against nbgrader itself: the forked
run scores every test cell it runs exactly as nbgrader did, and the cells it left out scored full marks. (That
fast grader is how the catalogue proves its correct alternative keeps full marks.)
The assignments are graded in two batches, one xdist group each (BATCHES: about the same grading time), so the two
halves run on two workers at once; the tests of an assignment share its batch's run.
"""
from __future__ import annotations

import csv
import html
import re

import pytest

from autograder import notebooks as nbu
from autograder.feedback import label
from test_feedback import hidden_only_lines
from course import (ASSIGNMENTS, assert_bug_isolated, cell_scores, first_bug, lost_points, make_course,
                    release_nb, run_grade, source_nb, submit)

# Write a warning to stderr at the start of every later cell, test cells included, the way a chatty library's
# hook would (a pre-run callback: the grading guard restores the check helpers a solution cell rebinds, so a
# rebound `expect` would warn in no test cell). nbgrader alone gives any cell that wrote to stderr 0 points.
WARNING_PREAMBLE = '''
import sys as _sys


def _chatty_library_hook(*_args):
    print("UserWarning: a harmless library warning", file=_sys.stderr)


get_ipython().events.register("pre_run_cell", _chatty_library_hook)
'''


STUDENTS = {"perfect", "blank", "buggy", "broken"}
# Labs 6-8 train the most (their demos, the challenge's run): about half of the grading time on their own.
BATCHES = {"labs-1-5": ASSIGNMENTS[:5], "labs-6-8": ASSIGNMENTS[5:]}
BATCH_OF = {a: name for name, members in BATCHES.items() for a in members}


def autograded(scores):
    """Only the autograded cells: test cells (manual cells have no automatic score)."""
    return {k: v for k, v in scores.items() if k.startswith("test_")}


class _Batches:
    """Each batch's course copy, graded once, on the worker that runs the batch's tests (selected ones only:
    `-k 03_gradient_clipping` grades lab 3 alone)."""

    def __init__(self, request, tmp_path_factory):
        self.request, self.tmp, self.done = request, tmp_path_factory, {}

    def get(self, batch: str):
        if batch not in self.done:
            selected = {item.callspec.params["graded"] for item in self.request.session.items
                        if "graded" in getattr(getattr(item, "callspec", None), "params", {})}
            course = make_course(self.tmp.mktemp(f"autograder-{batch}"))
            for assignment in [a for a in BATCHES[batch] if a in selected]:
                release, source = release_nb(assignment), source_nb(assignment)
                reference = nbu.reference_answers(source)
                first = next(iter(reference))
                submit(course, "perfect", assignment,
                       nbu.fill(release, {**reference, first: reference[first] + WARNING_PREAMBLE}))
                submit(course, "blank", assignment, release)
                submit(course, "buggy", assignment, nbu.fill(release, {**reference, **first_bug(assignment)[1]}))
                submit(course, "broken", assignment, raw='{"this is": "not a notebook"')
            # One grading job per batch: the two batches already keep both cores busy.
            self.done[batch] = course, run_grade(course, "--jobs", "1")
        return self.done[batch]


@pytest.fixture(scope="session")
def graded_batches(request, tmp_path_factory):
    return _Batches(request, tmp_path_factory)


@pytest.fixture(params=[pytest.param(a, marks=pytest.mark.xdist_group(f"autograder-proofs::{BATCH_OF[a]}"))
                        for a in ASSIGNMENTS])
def graded(request, graded_batches):
    return (request.param, *graded_batches.get(BATCH_OF[request.param]))


def test_grading_run_completes_and_reports_the_broken_submission(graded):
    assignment, course, proc = graded
    assert proc.returncode == 1, f"one submission is broken, so grade should exit 1:\n{proc.stdout}\n{proc.stderr}"
    lines = {line.split()[0]: line for line in proc.stdout.splitlines()
             if len(line.split()) > 1 and line.split()[0] in STUDENTS and line.split()[1] == assignment}
    assert set(lines) == STUDENTS, proc.stdout
    assert "FAILED" in lines["broken"] and all("FAILED" not in lines[s] for s in lines if s != "broken"), proc.stdout


def test_reference_solution_scores_full_marks_and_no_cell_fails(graded):
    """Every cell of the reference, hidden tests and demo cells included, runs without an error under nbgrader (what
    nbval would check of solutions/: make test-notebooks, which CI runs on another kernel path, runs them so too)."""
    assignment, course, _ = graded
    scores = autograded(cell_scores(course, "perfect", assignment))
    assert scores, "no autograded cells found"
    assert not lost_points(scores), f"reference solution lost points in {lost_points(scores)}"
    graded_nb = nbu.read(next((course / "autograded" / "perfect" / assignment).glob("*.ipynb")))
    failed = [(nbu.grade_id(c) or f"cell {i}", o.get("ename"), (o.get("evalue") or "")[:200])
              for i, c in enumerate(graded_nb.cells) if c.cell_type == "code"
              for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not failed, f"cells of the reference solution raised under nbgrader: {failed}"


def test_blank_release_scores_zero(graded):
    assignment, course, _ = graded
    scores = autograded(cell_scores(course, "blank", assignment))
    earned = {k: v for k, v in scores.items() if v[0]}
    assert not earned, f"the untouched release earned points in {earned}"


def test_warnings_from_every_test_cell_cost_no_points_and_stay_in_the_feedback(graded):
    assignment, course, _ = graded
    html = next((course / "feedback" / "perfect" / assignment).glob("*.html")).read_text(encoding="utf-8")
    assert "a harmless library warning" in html, "the warning text should stay visible in the feedback"
    graded_nb = nbu.read(next((course / "autograded" / "perfect" / assignment).glob("*.ipynb")))
    tests, first = nbu.graded_test_cells(source_nb(assignment)), next(iter(nbu.reference_answers(source_nb(assignment))))
    ids = [nbu.grade_id(c) for c in graded_nb.cells]
    after_hook = [c for c in graded_nb.cells[ids.index(first) + 1:] if nbu.grade_id(c) in tests]  # the hook's cell on
    quiet = [nbu.grade_id(c) for c in after_hook
             if not any("a harmless library warning" in o.get("text", "") for o in c.get("outputs", []))]
    assert after_hook and not quiet, f"these test cells emitted no warning, so the proof does not cover them: {quiet}"
    lost = lost_points(autograded(cell_scores(course, "perfect", assignment)))
    assert not lost, f"test cells that wrote a warning to stderr lost points: {lost}"


def test_a_catalogued_bug_loses_only_its_exercise_points_under_nbgrader(graded):
    assignment, course, _ = graded
    (exercise,) = set(first_bug(assignment)[1])
    per_exercise = nbu.by_exercise(autograded(cell_scores(course, "buggy", assignment)))
    assert_bug_isolated(per_exercise, exercise, "the first catalogued bug, graded by nbgrader,")


def test_the_catalogues_fast_grader_scores_the_bug_as_nbgrader_does(graded):
    """tests/test_catalogue.py grades each bug with PrefixGrader: forked after the reference's cells before the bug's,
    setup, solution and test cells only, stopped after the last cell the bug can reach. For the buggy submission
    (forked right after the setup cell) that gives every test cell it runs nbgrader's own score, and nbgrader gave
    full marks to every test cell it left out."""
    assignment, course, _ = graded
    grader = nbu.PrefixGrader(source_nb(assignment))
    try:
        forked = grader.grade(first_bug(assignment)[1], skip_unaffected=True)
        skipped = grader.skipped
    finally:
        grader.close()
    by_nbgrader = autograded(cell_scores(course, "buggy", assignment))
    assert {k: v for k, v in by_nbgrader.items() if k not in skipped} == forked
    assert not lost_points({k: v for k, v in by_nbgrader.items() if k in skipped}), \
        "a test cell the catalogue's data-flow left out lost points under nbgrader"


def test_feedback_and_csv_are_written(graded):
    assignment, course, proc = graded
    for student in ["perfect", "blank", "buggy"]:
        assert list((course / "feedback" / student / assignment).glob("*.html")), f"no feedback for {student}"
    rows = list(csv.DictReader((course / "grades" / "grades.csv").open()))
    by_student = {r["student_id"]: float(r["raw_score"]) for r in rows if r["assignment"] == assignment}
    perfect = sum(v[1] for v in autograded(cell_scores(course, "perfect", assignment)).values())
    assert by_student.get("perfect") == pytest.approx(perfect), by_student
    assert by_student.get("blank") == 0.0, by_student


def feedback_text(course, student, assignment) -> str:
    """The feedback page as a reader sees it (tags stripped)."""
    page = next((course / "feedback" / student / assignment).glob("*.html")).read_text(encoding="utf-8")
    return html.unescape(re.sub(r"<[^>]+>", "", page))


def test_feedback_names_each_test_cell_and_keeps_hidden_tests_source_out(graded):
    """Labels by exercise, no hidden test source, but the hidden checks' results and messages are there."""
    assignment, course, _ = graded
    text = feedback_text(course, "buggy", assignment)
    source = source_nb(assignment)
    # A line the student's own notebook holds is theirs to see (the reference answer in a submission may share a
    # line with a hidden test's oracle): only lines found nowhere in the submission would be a leak.
    submitted = nbu.read(next((course / "submitted" / "buggy" / assignment).glob("*.ipynb")))
    release_text = "\n".join(c.source for nb in (release_nb(assignment), submitted) for c in nb.cells)
    assert "Test cell" not in text, "feedback should name test cells by exercise, not 'Test cell'"
    for gid, cell in nbu.graded_test_cells(source).items():
        assert label(gid, "code", False) in text, f"feedback does not name {gid}"
        leaked = [ln for ln in hidden_only_lines(cell.source, release_text) if ln in text]
        assert not leaked, f"hidden test source of {gid} is in the feedback: {leaked[:2]}"
    graded_nb = nbu.read(next((course / "autograded" / "buggy" / assignment).glob("*.ipynb")))
    messages = [o["evalue"].splitlines()[0] for c in graded_nb.cells if nbu.grade_id(c) in nbu.graded_test_cells(source)
                for o in c.get("outputs", []) if o.get("output_type") == "error" and o.get("evalue")]
    assert messages, "the catalogued bug should fail a test cell"
    assert all(m in text for m in messages), "a failed check's message must stay in the feedback"


def test_pending_written_answers_are_marked_in_feedback_csv_and_table(graded):
    assignment, course, proc = graded
    written = {gid: c for gid, c in nbu.solution_cells(source_nb(assignment)).items()
               if c.metadata["nbgrader"].get("grade")}
    if not written:
        pytest.skip(f"{assignment} has nothing graded by hand")
    text = feedback_text(course, "perfect", assignment)
    for gid, cell in written.items():
        name = label(gid, cell.cell_type, True)
        assert re.search(re.escape(name) + r"\s*\(awaiting grading", text), \
            f"{name} should show as awaiting grading (not a score of 0) until graded by hand"
    rows = {r["student_id"]: r for r in csv.DictReader((course / "grades" / "grades.csv").open())
            if r["assignment"] == assignment}
    assert rows["perfect"]["manual_grading"] == "pending", rows["perfect"]
    row = next(ln for ln in proc.stdout.splitlines() if ln.split()[:2] == ["perfect", assignment])
    points = sum(float(c.metadata["nbgrader"]["points"]) for c in written.values())
    assert f"pending {points:g}" in row, f"make grade's table should say what awaits manual grading: {row}"


def test_the_challenge_is_rerun_scored_by_the_grader_and_ranked(graded):
    """Lab 8's challenge: every submission that ran is re-scored from its saved weights and on the leaderboard."""
    from autograder.challenge_check import ASSIGNMENT
    from trainkit.challenge import BANDS

    assignment, course, _ = graded
    if assignment != ASSIGNMENT:
        pytest.skip("only lab 8 has a challenge")
    with open(course / "grades" / "challenge_leaderboard.csv", encoding="utf-8") as f:
        rows = {row["student"]: row for row in csv.DictReader(f)}
    for student in ("perfect", "buggy"):
        assert rows[student]["status"] == "verified", rows[student]
        assert float(rows[student]["val_loss"]) <= BANDS["tuned"], rows[student]
        assert rows[student]["tokens"] == "204800" and rows[student]["rank"]
    assert "no run saved" in rows["blank"]["status"] and not rows["blank"]["rank"]
    assert "broken" not in rows
    assert (course / "grades" / "challenge_leaderboard.html").is_file()
