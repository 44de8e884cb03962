"""A regrade with a diff (autograder/term/regrade.py): the tests change, the class is regraded, nothing given by hand
is lost, the change is reported cell by cell, and no feedback reaches a student until the instructor releases it.

A class of two graded once (the light lab, tests/course.py): ada with the reference answers, bo with the catalogue's
first bug. The instructor grades ada's written answer by hand with a comment, overrides one of ada's test cells (a
grade `make grade` alone resets to "needs grading" on every regrade) and comments on bo's answer. Then one test cell
that bo failed is loosened in the source notebook (its failures no longer cost the point), and the lab is regraded.
"""
from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from autograder import grade
from autograder import notebooks as nbu
from autograder import sandbox
from autograder.term.regrade import NOTE_MARK
from course import FASTEST_LAB, cell_scores, first_bug, light_release, light_source, make_course, notebook_name, \
    run_grade, submit

LAB = FASTEST_LAB
REASON = "a test of the first exercise was stricter than its specification"


def regrade(course: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autograder.term.regrade", *args, "--course-dir", str(course)],
                          capture_output=True, text=True, cwd=course)


def test_a_regrade_keeps_manual_grades_reports_the_changed_cell_and_releases_nothing(tmp_path):
    from nbgrader.api import Gradebook

    if not sandbox.available()[0]:
        pytest.skip(f"grading sandbox unavailable here: {sandbox.available()[1]}")
    course = make_course(tmp_path, light_lab=True)
    release, source = light_release(), light_source()
    reference = nbu.reference_answers(source)
    submit(course, "ada", LAB, nbu.fill(release, reference))
    submit(course, "bo", LAB, nbu.fill(release, {**reference, **first_bug(LAB)[1]}))
    for student in ("ada", "bo"):    # what nbgrader submit writes beside a submission (release_feedback needs both)
        folder = course / "submitted" / student / LAB
        (folder / "timestamp.txt").write_text("2026-01-05 10:00:00.000000 UTC", encoding="utf-8")
        (folder / "submission_secret.txt").write_text(f"secret-of-{student}", encoding="utf-8")
    proc = run_grade(course, "--jobs", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr

    bo_before = cell_scores(course, "bo", LAB)
    loosened = next(g for g, (got, out_of) in bo_before.items() if g.startswith("test_") and got < out_of)
    written = next(g for g, c in nbu.solution_cells(source).items() if c.cell_type == "markdown")
    overridden = [g for g in nbu.graded_test_cells(source) if g != loosened][-1]
    (bug_cell,) = first_bug(LAB)[1]
    db = f"sqlite:///{course / 'gradebook.db'}"
    with Gradebook(db) as gb:
        g = gb.find_grade(written, LAB, LAB, "ada")
        g.manual_score, g.needs_manual_grade = 1.5, False
        g = gb.find_grade(overridden, LAB, LAB, "ada")
        g.manual_score, g.needs_manual_grade = 0.5, False
        gb.find_comment(written, LAB, LAB, "ada").manual_comment = "clear argument, one claim missing"
        gb.find_comment(bug_cell, LAB, LAB, "bo").manual_comment = "check the exponent bias"
        gb.db.commit()
    ada_before = cell_scores(course, "ada", LAB)

    # the instructor loosens one test cell that bo failed, in the source notebook
    path = course / "solutions" / LAB / notebook_name(LAB)
    nb = nbformat.read(str(path), as_version=4)
    cell = next(c for c in nb.cells if nbu.grade_id(c) == loosened)
    # what it defines (later test cells use its helpers) stays defined; what it asserts no longer costs the point
    cell.source = "try:\n" + "".join(f"    {line}" for line in cell.source.splitlines(True)) + \
        "\nexcept Exception:  # loosened by the instructor\n    pass\n"
    nbformat.write(nb, str(path))

    proc = regrade(course, LAB[:2], "--reason", REASON, "--jobs", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr

    # every grade and comment given by hand is kept, the one make grade alone resets included
    with Gradebook(db) as gb:
        g = gb.find_grade(written, LAB, LAB, "ada")
        assert (g.manual_score, g.needs_manual_grade) == (1.5, False), "the written answer's manual grade was lost"
        g = gb.find_grade(overridden, LAB, LAB, "ada")
        assert (g.manual_score, g.needs_manual_grade) == (0.5, False), "the override of a test cell was lost"
        assert gb.find_comment(written, LAB, LAB, "ada").manual_comment == "clear argument, one claim missing"
        assert gb.find_comment(bug_cell, LAB, LAB, "bo").manual_comment == "check the exponent bias"
    assert cell_scores(course, "ada", LAB) == ada_before, "ada's grades should not change"
    bo_after = cell_scores(course, "bo", LAB)
    assert bo_after[loosened] == (1.0, 1.0) and {k: v for k, v in bo_after.items() if k != loosened} == \
        {k: v for k, v in bo_before.items() if k != loosened}, f"only {loosened} should change: {bo_after}"

    # the diff names exactly that cell, old -> new, and the summary counts it
    (folder,) = (course / "grades").glob(f"regrade-{LAB}-*")
    rows = list(csv.DictReader(open(folder / "changes.csv", encoding="utf-8")))
    assert [(r["student"], r["cell"], float(r["auto_old"]), float(r["auto_new"])) for r in rows] == \
        [("bo", loosened, 0.0, 1.0)], rows
    bo_txt = (folder / "bo.txt").read_text(encoding="utf-8")
    assert f"/ {loosened} (" in bo_txt and ": 0 -> 1 of 1" in bo_txt and REASON in bo_txt, bo_txt
    assert "(+1)" in bo_txt and "restored" not in bo_txt and "kept" in bo_txt, bo_txt
    ada_txt = (folder / "ada.txt").read_text(encoding="utf-8")
    assert "no change" in ada_txt and f"restored {LAB}/{overridden}: manual grade 0.5" in ada_txt, ada_txt
    summary = (folder / "summary.txt").read_text(encoding="utf-8")
    for line in ("students regraded: 2; changed: 1 (up 1, down 0", "cell changes: 1", f"{loosened}: 1 student(s) (0 -> 1: 1)",
                 "largest change: bo +1", "distribution of the change in total: +0: 1, +1: 1", "1 put back"):
        assert line in summary, f"{line!r} not in the summary:\n{summary}"

    # the note is in bo's feedback only; ada's feedback shows her manual grades, not "awaiting grading"
    (bo_page,) = (course / "feedback" / "bo" / LAB).glob("*.html")
    (ada_page,) = (course / "feedback" / "ada" / LAB).glob("*.html")
    bo_html, ada_html = bo_page.read_text(encoding="utf-8"), ada_page.read_text(encoding="utf-8")
    assert NOTE_MARK in bo_html and REASON in bo_html and "regraded" in bo_html
    assert NOTE_MARK not in ada_html and "awaiting grading" not in ada_html and "1.5 / 2" in ada_html
    (ada_row,) = [r for r in csv.DictReader(open(course / "grades" / "grades.csv", encoding="utf-8"))
                  if r["student_id"] == "ada"]
    assert ada_row["manual_grading"] == "", f"the CSV should not flag ada's kept manual grades as pending: {ada_row}"

    # nothing is released until the instructor says
    exchange = course / ".nbgrader_exchange"
    assert not list(exchange.rglob("*.html")), "the regrade must not release feedback"
    exchange.mkdir(mode=0o1777, exist_ok=True)
    os.chmod(exchange, 0o1777)
    # a `make grade` between the regrade and its release writes bo's feedback again, without the note; his grades are
    # what the regrade left, so the release puts the note back
    rewrite_feedback(course, "bo")
    assert NOTE_MARK not in bo_page.read_text(encoding="utf-8")
    proc = regrade(course, LAB, "--release")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    released = list(exchange.rglob("*.html"))
    assert len(released) == 1 and NOTE_MARK in released[0].read_text(encoding="utf-8"), released
    assert "released the regraded feedback of" in proc.stdout and "bo" in proc.stdout, proc.stdout

    # once a grade has changed since (a grade given by hand), the note no longer describes it: refused, and why
    with grade.gradebook(course) as gb:
        graded_cell = next(g for nb in gb.find_submission(LAB, "bo").notebooks for g in nb.grades if g.max_score)
        graded_cell.extra_credit = 0.5
        gb.db.commit()
    rewrite_feedback(course, "bo")
    proc = regrade(course, LAB, "--release")
    assert proc.returncode == 1 and "not released: bo" in proc.stdout and "its grades changed" in proc.stdout, proc.stdout
    assert NOTE_MARK not in bo_page.read_text(encoding="utf-8")


def rewrite_feedback(course: Path, student: str) -> None:
    """What `make grade` does to a graded student's feedback: nbgrader's generate_feedback, the note gone."""
    code = ("import sys; from pathlib import Path; from autograder import grade; c = Path(sys.argv[1]); "
            "sys.exit(0 if grade.feedback_one(c, sys.argv[2], sys.argv[3], c / 'feedback.log') else 1)")
    proc = subprocess.run([sys.executable, "-c", code, str(course), student, LAB], capture_output=True, text=True,
                          cwd=course)
    assert proc.returncode == 0, proc.stdout + proc.stderr
