"""The LMS export (autograder/term/canvas.py): Canvas's gradebook import file, rule by rule, and the plain CSV, on a
small class built directly in a gradebook (no kernel, no grading run)."""
from __future__ import annotations

import csv
import re

import pytest

from autograder.term import canvas
from course import bookkeeping_gradebook

# Twelve students. Lab 1 (two cells, 1 + 2 points) is in Canvas as assignment 4401; lab 2 (one 5-point cell) is not.
STUDENTS = [f"s{i:02d}" for i in range(1, 13)]
LAB1, LAB2 = "01_demo", "02_other"
LATE = "s03"          # lab 1 late: 1 point off its 3
NO_LAB2 = "s05"       # never submitted lab 2: 0
NOT_IN_ROSTER = "s12"
NOT_IN_CLASS = "zed"
PENDING = "s02"       # lab 2 awaits a manual grade


def lab1_score(i: int) -> tuple[float, float]:
    return float(i % 2), float(2 * (i % 3 == 0))   # cell a, cell b


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("course")
    with bookkeeping_gradebook(tmp_path) as gb:
        for lab, cells in ((LAB1, {"test_a": 1, "test_b": 2}), (LAB2, {"test_c": 5})):
            gb.add_assignment(lab)
            gb.update_or_create_notebook(lab, lab)
            for name, points in cells.items():
                gb.update_or_create_grade_cell(name, lab, lab, max_score=points, cell_type="code")
        for i, student in enumerate(STUDENTS, 1):
            gb.add_student(student, first_name=f"First{i}", last_name=f"Last{i}")
            sub = gb.add_submission(LAB1, student)
            a, b = lab1_score(i)
            for cell, score in (("test_a", a), ("test_b", b)):   # as autograde leaves them: scored, nothing pending
                grade = gb.find_grade(cell, LAB1, LAB1, student)
                grade.auto_score, grade.needs_manual_grade = score, False
            if student == LATE:
                sub.notebooks[0].late_submission_penalty = 1.0
            if student != NO_LAB2:
                gb.add_submission(LAB2, student)
                grade = gb.find_grade("test_c", LAB2, LAB2, student)
                grade.auto_score, grade.needs_manual_grade = 5.0, student == PENDING
        gb.db.commit()
    roster = tmp_path / "roster.csv"
    with open(roster, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["username", "Student", "ID", "SIS User ID", "SIS Login ID", "Section"])
        for i, student in enumerate(STUDENTS, 1):
            if student != NOT_IN_ROSTER:
                w.writerow([student, f"Last{i}, First{i}", 1000 + i, f"U{i:04d}", f"{student}@uni.example", "Sec 1"])
        w.writerow([NOT_IN_CLASS, "Zed, Zoe", 2000, "U9999", "zed@uni.example", "Sec 2"])
    assignments = tmp_path / "canvas_assignments.csv"
    assignments.write_text(f"lab,name,id\n{LAB1},Lab 1: Demo,4401\n")
    return tmp_path


def read(path):
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.reader(fh))


def test_the_canvas_file_follows_the_import_format_rule_by_rule(course):
    out = course / "canvas.csv"
    result = canvas.write_canvas(course, course / "roster.csv", out, assignments=course / "canvas_assignments.csv")
    rows = read(out)
    # Rule 1: the five id columns first, in Canvas's order. Rule 2: "<name> (<id>)" for an existing assignment
    # (updated in place), the bare name for one Canvas is to create.
    assert rows[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Lab 1: Demo (4401)", LAB2]
    assert re.fullmatch(r".+ \((\d+)\)", rows[0][5]).group(1) == "4401"
    assert result.new_assignments == [LAB2]
    assert result.pending == 1
    # Rule 3: the points-possible row second, ids blank.
    assert rows[1] == ["Points Possible", "", "", "", "", "3", "5"]
    # Rule 4: a row per placed student, with the roster's ids and a number in every score cell.
    body = {row[1]: row for row in rows[2:]}
    assert len(rows) - 2 == len(body) == result.rows == len(STUDENTS) - 1
    for i, student in enumerate(STUDENTS, 1):
        if student == NOT_IN_ROSTER:
            assert str(1000 + i) not in body
            continue
        row = body[str(1000 + i)]
        assert row[:5] == [f"Last{i}, First{i}", str(1000 + i), f"U{i:04d}", f"{student}@uni.example", "Sec 1"]
        a, b = lab1_score(i)
        assert float(row[5]) == max(0.0, a + b - (1.0 if student == LATE else 0.0))
        assert float(row[6]) == (0.0 if student == NO_LAB2 else 5.0)
    # Nobody dropped silently: each missing person is named.
    assert result.not_in_roster == [NOT_IN_ROSTER] and result.not_in_class == [NOT_IN_CLASS]
    problems = " ".join(result.problems())
    assert NOT_IN_ROSTER in problems and NOT_IN_CLASS in problems


def test_the_command_names_the_missing_and_fails_unless_told_to_accept(course, capsys):
    args = ["--course-dir", str(course), "--roster", str(course / "roster.csv"),
            "--assignments", str(course / "canvas_assignments.csv")]
    assert canvas.main(args) == 1
    err = capsys.readouterr().err
    assert NOT_IN_ROSTER in err and NOT_IN_CLASS in err
    assert len(read(course / "grades" / "canvas_import.csv")) == 2 + len(STUDENTS) - 1   # still everyone it can place
    assert canvas.main([*args, "--allow-missing"]) == 0


def test_a_canvas_export_serves_as_the_roster(course):
    """Canvas's own export (its Points Possible row, assignment and total columns) with the login as the username."""
    export = course / "export.csv"
    export.write_text("Student,ID,SIS User ID,SIS Login ID,Section,Lab 1: Demo (4401),Current Score\n"
                      "    Points Possible,,,,,3,(read only)\n"
                      "\"Last1, First1\",1001,U0001,s01,Sec 1,,\n")
    roster = canvas.read_roster(export, username_column="SIS Login ID")
    assert roster == {"s01": {"Student": "Last1, First1", "ID": "1001", "SIS User ID": "U0001",
                              "SIS Login ID": "s01", "Section": "Sec 1"}}


def test_the_plain_csv_has_a_row_per_student_of_the_class(course):
    out = course / "plain.csv"
    canvas.write_plain(course, out)
    rows = read(out)
    assert rows[0] == ["student_id", LAB1, LAB2]
    assert [row[0] for row in rows[1:]] == STUDENTS
    late = rows[1 + STUDENTS.index(LATE)]
    assert float(late[1]) == sum(lab1_score(3)) - 1.0
