"""Proof of the autograder, per assignment, through the real `make grade` pipeline (nbgrader).

A grading run (the parallel grader, as `make grade` runs it) holds, for each assignment, three submissions:
  buggy        the reference solution typed into the student notebook,  -> loses points in that exercise only; every
               except for the first exercise's first catalogued bug,       other exercise keeps full marks, and no
               after which a chatty library's hook writes a warning        cell the bug cannot reach raises (lab 8:
               from every later cell (nbgrader alone would give such       its challenge re-run verified by the
               cells 0)                                                    grader and on the leaderboard)
  blank        the release notebook untouched                          -> 0, and the run completes
  broken       not a notebook at all (invalid JSON)                    -> listed as FAILED, others graded
The buggy submission also cross-checks the fast grader of tests/test_catalogue.py against nbgrader itself: the forked
run scores every test cell it runs exactly as nbgrader did, and the cells it left out scored full marks. (That fast
grader is how the catalogue proves its correct alternative keeps full marks, and, in every bug of a later exercise,
that the reference's first exercise scores full marks: the reference there is the fork's prefix.)
One submission is both the reference's proof and the bug's, so each lab's notebook is graded twice, not three times:
what a separate reference submission would add is that the cells the bug reaches do not raise for the reference, and
nbval runs every cell of every solution notebook (`make test-notebooks`, which CI runs after `make test`).
The assignments are graded in two batches, one xdist group each (BATCHES: about the same grading time), so the two
halves run on two workers at once; the tests of an assignment share its batch's run.
"""
from __future__ import annotations

import csv
import html
import re

import pytest

from autograder import lending
from autograder import notebooks as nbu
from autograder.cellflow import affected_cells
from autograder.feedback import label
from autograder.term import variants
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


STUDENTS = {"blank", "buggy", "broken"}
# Labs 6-8 train the most (their demos, the challenge's run): about half of the grading time on their own.
BATCHES = {"labs-1-5": ASSIGNMENTS[:5], "labs-6-8": ASSIGNMENTS[5:]}
BATCH_OF = {a: name for name, members in BATCHES.items() for a in members}


def buggy_answer(assignment: str) -> dict[str, str]:
    """{cell: source} of the buggy submission's one changed cell: the first catalogued bug, then the chatty hook."""
    ((cell, source),) = first_bug(assignment)[1].items()
    return {cell: source + "\n" + WARNING_PREAMBLE}


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
                submit(course, "blank", assignment, release)
                submit(course, "buggy", assignment, nbu.fill(release, {**nbu.reference_answers(source),
                                                                       **buggy_answer(assignment)}))
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


def test_the_reference_scores_full_marks_and_no_cell_it_holds_fails(graded):
    """Every exercise but the bug's scores full marks under nbgrader, and every cell the bug cannot reach (by the
    data-flow of autograder.cellflow: hidden tests and demo cells included) runs without an error (what nbval checks of
    solutions/: make test-notebooks, which CI runs on another kernel path, runs all of them)."""
    assignment, course, _ = graded
    scores = autograded(cell_scores(course, "buggy", assignment))
    assert scores, "no autograded cells found"
    (exercise,) = buggy_answer(assignment)
    lost = {k for k in lost_points(nbu.by_exercise(scores)) if k != exercise}
    assert not lost, f"the reference solution lost points in {lost}"
    graded_nb = nbu.read(next((course / "autograded" / "buggy" / assignment).glob("*.ipynb")))
    code = [c for c in graded_nb.cells if c.cell_type == "code"]
    bug_cell = next(i for i, c in enumerate(code) if nbu.grade_id(c) == exercise)
    reached = affected_cells([c.source for c in code], {bug_cell}) | {bug_cell}
    assert len(reached) < len(code) / 2, f"the bug reaches {len(reached)} of {len(code)} cells: the proof covers too few"
    failed = [(nbu.grade_id(c) or f"cell {i}", o.get("ename"), (o.get("evalue") or "")[:200])
              for i, c in enumerate(code) if i not in reached
              for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not failed, f"cells of the reference solution raised under nbgrader: {failed}"


# The judgement exercises whose band checks record each variant's outcome at grading (trainkit.checks.record_outcomes).
RECORDED = {"01_signal_propagation": {"initialise"}, "02_lr_schedules": {"choose_schedule"},
            "03_gradient_clipping": {"make_guard"}, "04_optimizers": {"tune"}, "05_mixed_precision": {"fp16_recipe"},
            "06_debugging_protocol": {"diagnose", "find_broken_part"},
            "07_monitoring_reproducibility": {"why_not_reproducible", "reproduce"}, "08_infra_lab": {"save_interval"}}


def test_the_graded_kernel_records_which_unseen_variants_passed(graded):
    """What the item analysis reads per variant (autograder/term/variants.py), kept in grades/, not beside the graded
    notebook (the feedback copies that folder); the reference passes its unseen variants where it earns full marks."""
    assignment, course, _ = graded
    kept = variants.load(course, assignment)
    assert "broken" not in kept
    record = kept.get("buggy")
    assert record is not None and set(record) == RECORDED[assignment], record and set(record)
    (bug,) = buggy_answer(assignment)
    for exercise, groups in record.items():
        unseen = {what: rows for what, rows in groups.items() if variants.is_unseen(what)}
        assert unseen and all(rows for rows in unseen.values()), (exercise, list(groups))
        if exercise != bug:
            for what, rows in unseen.items():
                share = sum(r["passed"] for r in rows) / len(rows)
                assert share >= 0.9, f"{exercise}, {what}: the reference passed {share:.0%} of {len(rows)}"
    assert not list((course / "autograded" / "buggy" / assignment).glob("*variant*"))
    assert not list((course / "feedback").rglob(variants.FILE))


def test_the_reference_makes_the_guard_restore_nothing(graded):
    """The guard's "[grader] restored before this test" note is for what a submission changed (docs/security.md: read
    any submission that shows one). The reference and its bug change nothing the tests rely on: no test cell says so, though
    the grader's lending, temporary files and torch's own lazy imports change module state as they run."""
    assignment, course, _ = graded
    graded_nb = nbu.read(next((course / "autograded" / "buggy" / assignment).glob("*.ipynb")))
    noted = {nbu.grade_id(c): o["text"].strip() for c in graded_nb.cells if c.cell_type == "code"
             for o in c.get("outputs", []) if "[grader] restored" in o.get("text", "")}
    assert not noted, f"an honest submission's feedback says the grader restored something: {noted}"


def test_blank_release_scores_zero(graded):
    assignment, course, _ = graded
    scores = autograded(cell_scores(course, "blank", assignment))
    earned = {k: v for k, v in scores.items() if v[0]}
    assert not earned, f"the untouched release earned points in {earned}"


def test_warnings_from_every_test_cell_cost_no_points_and_stay_in_the_feedback(graded):
    """The hook warns in every test cell after it, except those the grader lends its unseen variants to: hooks on
    IPython's events are put aside while they are lent (autograder/lending.py), so they warn in none of those."""
    assignment, course, _ = graded
    html = next((course / "feedback" / "buggy" / assignment).glob("*.html")).read_text(encoding="utf-8")
    assert "a harmless library warning" in html, "the warning text should stay visible in the feedback"
    graded_nb = nbu.read(next((course / "autograded" / "buggy" / assignment).glob("*.ipynb")))
    tests, (exercise,) = nbu.graded_test_cells(source_nb(assignment)), buggy_answer(assignment)
    ids = [nbu.grade_id(c) for c in graded_nb.cells]
    after_hook = [c for c in graded_nb.cells[ids.index(exercise) + 1:] if nbu.grade_id(c) in tests]  # the hook's cell on

    def warned(cell):
        return any("a harmless library warning" in o.get("text", "") for o in cell.get("outputs", []))

    lent = [c for c in after_hook if lending.imported_by(tests[nbu.grade_id(c)].source)]
    quiet = [nbu.grade_id(c) for c in after_hook if c not in lent and not warned(c)]
    assert after_hook and not quiet, f"these test cells emitted no warning, so the proof does not cover them: {quiet}"
    hooked = [nbu.grade_id(c) for c in lent if warned(c)]
    assert not hooked, f"a hook on IPython's events ran while the unseen variants were lent, in {hooked}"
    lost = lost_points(nbu.by_exercise(autograded(cell_scores(course, "buggy", assignment))))
    assert set(lost) == {exercise}, f"test cells that wrote a warning to stderr lost points: {lost}"


def test_a_catalogued_bug_loses_only_its_exercise_points_under_nbgrader(graded):
    assignment, course, _ = graded
    (exercise,) = buggy_answer(assignment)
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
        forked = grader.grade(buggy_answer(assignment), skip_unaffected=True)
        skipped = grader.skipped
    finally:
        grader.close()
    by_nbgrader = autograded(cell_scores(course, "buggy", assignment))
    assert {k: v for k, v in by_nbgrader.items() if k not in skipped} == forked
    assert not lost_points({k: v for k, v in by_nbgrader.items() if k in skipped}), \
        "a test cell the catalogue's data-flow left out lost points under nbgrader"


def test_feedback_and_csv_are_written(graded):
    assignment, course, proc = graded
    for student in ["blank", "buggy"]:
        assert list((course / "feedback" / student / assignment).glob("*.html")), f"no feedback for {student}"
    rows = list(csv.DictReader((course / "grades" / "grades.csv").open()))
    by_student = {r["student_id"]: float(r["raw_score"]) for r in rows if r["assignment"] == assignment}
    buggy = sum(v[0] for v in autograded(cell_scores(course, "buggy", assignment)).values())
    assert 0 < by_student.get("buggy") == pytest.approx(buggy), by_student
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
    text = feedback_text(course, "buggy", assignment)
    for gid, cell in written.items():
        name = label(gid, cell.cell_type, True)
        assert re.search(re.escape(name) + r"\s*\(awaiting grading", text), \
            f"{name} should show as awaiting grading (not a score of 0) until graded by hand"
    rows = {r["student_id"]: r for r in csv.DictReader((course / "grades" / "grades.csv").open())
            if r["assignment"] == assignment}
    assert rows["buggy"]["manual_grading"] == "pending", rows["buggy"]
    row = next(ln for ln in proc.stdout.splitlines() if ln.split()[:2] == ["buggy", assignment])
    points = sum(float(c.metadata["nbgrader"]["points"]) for c in written.values())
    assert f"pending {points:g}" in row, f"make grade's table should say what awaits manual grading: {row}"


def test_the_challenge_is_rerun_scored_by_the_grader_and_ranked(graded):
    """Lab 8's challenge: every submission that ran is re-scored from its saved weights and on the leaderboard."""
    from autograder.challenge_check import ASSIGNMENT
    from trainkit.labs.lab08_infra_lab.challenge import BANDS

    assignment, course, _ = graded
    if assignment != ASSIGNMENT:
        pytest.skip("only lab 8 has a challenge")
    with open(course / "grades" / "challenge_leaderboard.csv", encoding="utf-8") as f:
        rows = {row["student"]: row for row in csv.DictReader(f)}
    assert rows["buggy"]["status"] == "verified", rows["buggy"]
    assert float(rows["buggy"]["val_loss"]) <= BANDS["tuned"], rows["buggy"]
    assert rows["buggy"]["tokens"] == "204800" and rows["buggy"]["rank"]
    assert "no run saved" in rows["blank"]["status"] and not rows["blank"]["rank"]
    assert "broken" not in rows
    assert (course / "grades" / "challenge_leaderboard.html").is_file()
