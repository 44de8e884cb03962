"""The grades as a file an LMS imports: Canvas's gradebook import format, or a plain CSV for any other LMS.

    python -m autograder.term.canvas --roster roster.csv [--assignments canvas_assignments.csv] [--out FILE]
    python -m autograder.term.canvas --plain [--out FILE]

Scores come from the course gradebook, as nbgrader's own CSV export computes them (``grades/grades.csv``): per
student and lab the score after the late penalty, ``max(0, score - late_submission_penalty)``, and 0 for a lab the
student never submitted. A manual grade still pending counts as 0 until it is graded (the summary says how many).

The roster (``--roster``) maps each course username (nbgrader's student id) to Canvas's ids. It is a CSV with the
columns ``username,Student,ID,SIS User ID,SIS Login ID,Section``: Canvas's own gradebook export (Grades > Export)
with a ``username`` column added, or written by hand. Other columns (assignments, totals) and the export's
"Points Possible" row are ignored. Where the SIS Login ID is the course username, ``--username-column "SIS Login
ID"`` reads it from there and no column needs adding.

The assignment map (``--assignments``) is a small CSV, ``lab,name,id``: each lab's Canvas assignment name and id (the
number in the assignment's address, ``.../assignments/<id>``). A lab with an id updates that Canvas assignment in
place; a lab with no row, or no id, becomes a new Canvas assignment named after it.

Nobody is dropped silently: a student of the class missing from the roster (their row cannot be placed) and a roster
entry missing from the class (nothing to give them) are named, and the command exits 1 unless ``--allow-missing``
accepts them. The file is written either way, with every student it can place.
"""
from __future__ import annotations

import argparse
import csv
import sys
from dataclasses import dataclass, field
from pathlib import Path

from autograder.grade import db_url, gradebook

# Canvas's gradebook import format. Sources: Canvas Instructor Guide, "How do I import grades in the Gradebook?"
# (https://community.canvaslms.com/t5/Instructor-Guide/How-do-I-import-grades-in-the-Gradebook/ta-p/807) and Ohio
# State's guide to it ("Import a CSV file to Carmen grades", https://teaching.resources.osu.edu/toolsets/carmencanvas/
# guides/calculating-final-grades/import-csv-file-carmen-grades).
# The rules this file follows:
#   1. The header starts with the five columns a Canvas gradebook export starts with, in this order:
#      Student, ID, SIS User ID, SIS Login ID, Section. Canvas finds the student by ID, SIS User ID or SIS Login ID.
#   2. Then one column per assignment, titled "<assignment name> (<assignment id>)". A title with an existing
#      assignment's id updates that assignment's scores in place (an existing score is overwritten); a title without
#      an id creates a new assignment.
#   3. The second row is the points-possible row, as the export writes it: "Points Possible" under Student, the
#      four id columns blank, and each assignment's points possible.
#   4. Then one row per student; a score is a number. A blank cell would leave Canvas's score as it was: we write
#      none, since every student of the class has a score for every lab (0 for a lab not submitted).
CANVAS_ID_COLUMNS = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")
POINTS_POSSIBLE = "Points Possible"


@dataclass
class Export:
    """What an export wrote and whom it could not place."""
    rows: int = 0
    not_in_roster: list[str] = field(default_factory=list)     # in the class, not in the roster: no row
    not_in_class: list[str] = field(default_factory=list)      # in the roster, not in the class: nothing to give
    new_assignments: list[str] = field(default_factory=list)   # labs with no Canvas id: Canvas creates them
    pending: int = 0                                           # submissions still awaiting a manual grade
    points: dict[str, float] = field(default_factory=dict)     # each lab's points possible

    def problems(self) -> list[str]:
        """The missing people, in words; empty when everyone was placed."""
        out = []
        if self.not_in_roster:
            out.append(f"in the class but not in the roster ({len(self.not_in_roster)}), so they have no row in the "
                       f"file: {', '.join(self.not_in_roster)}")
        if self.not_in_class:
            out.append(f"in the roster but not in the class ({len(self.not_in_class)}; no student with that username "
                       f"in the gradebook), so they have no row in the file: {', '.join(self.not_in_class)}")
        return out


def fmt(score: float) -> str:
    """A score as Canvas shows it: at most two decimals, no trailing zeros."""
    return f"{round(score, 2):g}"


def require_gradebook(course: Path) -> None:
    """Stop with a sentence where the course has no gradebook yet: opening one would create an empty one."""
    url = db_url(course)
    if url.startswith("sqlite:///") and not Path(url[len("sqlite:///"):]).exists():
        raise SystemExit(f"no gradebook at {url[len('sqlite:///'):]}: grade the submissions first (make grade)")


def class_scores(course: Path, labs: list[str] | None
                 ) -> tuple[list[str], dict[str, float], dict[str, dict[str, float]], int]:
    """(labs, their points possible, {student: {lab: score after the late penalty}}, submissions pending manual grading)
    from the gradebook: nbgrader's export rule (nbgrader/plugins/export.py), 0 for a lab not submitted."""
    from nbgrader.api import Assignment, Grade, SubmittedAssignment, SubmittedNotebook

    with gradebook(course) as gb:
        known = [a.name for a in gb.assignments]
        chosen = labs or known
        unknown = [lab for lab in chosen if lab not in known]
        if unknown:
            raise SystemExit(f"not in the gradebook: {', '.join(unknown)} (labs there: {', '.join(known) or 'none'})")
        points = {lab: float(gb.find_assignment(lab).max_score) for lab in chosen}
        scores = {student.id: dict.fromkeys(chosen, 0.0) for student in gb.students}
        # Summed here from plain joins: nbgrader's per-submission columns (score, late_submission_penalty,
        # needs_manual_grade) are correlated subqueries that SQLite took 14 s over for 300 students and 8 labs.
        # Grade.score is nbgrader's own column for a cell's score (manual, else auto, plus extra credit).
        base = (gb.db.query(SubmittedNotebook.id).join(SubmittedAssignment, SubmittedNotebook.assignment_id ==
                                                       SubmittedAssignment.id)
                .join(Assignment, SubmittedAssignment.assignment_id == Assignment.id)
                .filter(Assignment.name.in_(chosen)))
        notebooks = base.with_entities(SubmittedNotebook.id, SubmittedAssignment.student_id, Assignment.name,
                                       SubmittedNotebook.late_submission_penalty)
        owner, penalty, raw, waiting = {}, {}, {}, set()
        for notebook, student, lab, late in notebooks:
            owner[notebook] = (student, lab)
            penalty[student, lab] = penalty.get((student, lab), 0.0) + float(late or 0.0)
            raw.setdefault((student, lab), 0.0)
        grades = base.join(Grade, Grade.notebook_id == SubmittedNotebook.id).with_entities(
            SubmittedNotebook.id, Grade.score, Grade.needs_manual_grade)
        for notebook, score, needs_manual in grades:
            raw[owner[notebook]] += float(score or 0.0)
            if needs_manual:
                waiting.add(owner[notebook])
        for (student, lab), total in raw.items():
            scores[student][lab] = max(0.0, total - penalty[student, lab])   # nbgrader's export rule
        pending = len(waiting)
    return chosen, points, scores, pending


def read_roster(path: Path, username_column: str = "username") -> dict[str, dict[str, str]]:
    """{course username: {Student, ID, SIS User ID, SIS Login ID, Section}} from a roster CSV (module docstring)."""
    with open(path, newline="", encoding="utf-8-sig") as fh:   # -sig: a spreadsheet's byte-order mark
        reader = csv.DictReader(fh)
        columns = [c.strip() for c in reader.fieldnames or []]
        needed = [username_column, *CANVAS_ID_COLUMNS]
        missing = [c for c in needed if c not in columns]
        if missing:
            raise SystemExit(f"{path}: the roster has no column {', '.join(repr(c) for c in missing)} "
                             f"(it needs {', '.join(needed)})")
        roster: dict[str, dict[str, str]] = {}
        for row in reader:
            row = {(k or "").strip(): (v or "").strip() for k, v in row.items()}
            if row["Student"] == POINTS_POSSIBLE or not any(row.values()):   # a Canvas export's second row; blanks
                continue
            user = row[username_column]
            if not user:
                raise SystemExit(f"{path}: {row['Student'] or 'a row'} has no {username_column}")
            if user in roster:
                raise SystemExit(f"{path}: {user} appears twice")
            roster[user] = {c: row[c] for c in CANVAS_ID_COLUMNS}
    return roster


def read_assignment_map(path: Path | None) -> dict[str, tuple[str, str]]:
    """{lab: (Canvas assignment name, Canvas assignment id)} from a ``lab,name,id`` CSV; {} without one."""
    if path is None:
        return {}
    with open(path, newline="", encoding="utf-8-sig") as fh:
        reader = csv.DictReader(fh)
        if not {"lab", "name", "id"} <= set(reader.fieldnames or []):
            raise SystemExit(f"{path}: the assignment map needs the columns lab,name,id")
        return {row["lab"].strip(): ((row["name"] or "").strip() or row["lab"].strip(), (row["id"] or "").strip())
                for row in reader if (row["lab"] or "").strip()}


def canvas_title(lab: str, mapping: dict[str, tuple[str, str]]) -> str:
    """The column title of one lab: "<name> (<id>)" for an existing Canvas assignment, else its name alone (rule 2)."""
    name, canvas_id = mapping.get(lab, (lab, ""))
    return f"{name} ({canvas_id})" if canvas_id else name


def write_canvas(course: Path, roster_path: Path, out: Path, *, assignments: Path | None = None,
                 labs: list[str] | None = None, username_column: str = "username") -> Export:
    """Write Canvas's gradebook import file (the rules above) for every student it can place."""
    labs, points, scores, pending = class_scores(course, labs)
    roster = read_roster(roster_path, username_column)
    mapping = read_assignment_map(assignments)
    result = Export(pending=pending, points=points)
    result.not_in_roster = sorted(s for s in scores if s not in roster)
    result.not_in_class = sorted(u for u in roster if u not in scores)
    result.new_assignments = [lab for lab in labs if not mapping.get(lab, ("", ""))[1]]
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow([*CANVAS_ID_COLUMNS, *(canvas_title(lab, mapping) for lab in labs)])
        writer.writerow([POINTS_POSSIBLE, "", "", "", "", *(fmt(points[lab]) for lab in labs)])
        for user in sorted(roster, key=lambda u: (roster[u]["Student"].casefold(), u)):
            if user in scores:
                writer.writerow([*(roster[user][c] for c in CANVAS_ID_COLUMNS),
                                 *(fmt(scores[user][lab]) for lab in labs)])
                result.rows += 1
    return result


def write_plain(course: Path, out: Path, *, labs: list[str] | None = None) -> Export:
    """A plain CSV for any other LMS: ``student_id`` and one column per lab (the score after the late penalty), a row
    per student of the class. Points possible are in the summary the command prints, not in the file."""
    labs, points, scores, pending = class_scores(course, labs)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["student_id", *labs])
        for student in sorted(scores):
            writer.writerow([student, *(fmt(scores[student][lab]) for lab in labs)])
    return Export(rows=len(scores), pending=pending, points=points)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder.term.canvas", description=__doc__.split("\n\n")[0],
                                     epilog="Exit status: 0 when every student was placed, 1 when someone is "
                                            "missing from the roster or the class (unless --allow-missing).")
    parser.add_argument("--course-dir", type=Path, default=Path("."), help="the course folder (default: here)")
    parser.add_argument("--roster", type=Path, help="CSV: username,Student,ID,SIS User ID,SIS Login ID,Section")
    parser.add_argument("--assignments", type=Path, help="CSV: lab,name,id (Canvas assignment name and id per lab)")
    parser.add_argument("--username-column", default="username",
                        help="the roster column holding the course username (default: username)")
    parser.add_argument("--lab", action="append", help="export only this lab (repeat for several; default: all)")
    parser.add_argument("--plain", action="store_true", help="write the plain CSV instead (no roster needed)")
    parser.add_argument("--out", type=Path, help="where to write (default: grades/canvas_import.csv, or "
                                                 "grades/lms_grades.csv with --plain)")
    parser.add_argument("--allow-missing", action="store_true",
                        help="exit 0 even when someone is missing from the roster or the class")
    args = parser.parse_args(argv)
    course = args.course_dir.resolve()
    require_gradebook(course)
    if args.plain:
        out = args.out or course / "grades" / "lms_grades.csv"
        result = write_plain(course, out, labs=args.lab)
    else:
        if args.roster is None:
            parser.error("--roster is needed for the Canvas file (or --plain for a plain CSV)")
        out = args.out or course / "grades" / "canvas_import.csv"
        result = write_canvas(course, args.roster, out, assignments=args.assignments, labs=args.lab,
                              username_column=args.username_column)
    print(f"wrote {out}: {result.rows} student(s); points possible: "
          + ", ".join(f"{lab} {fmt(p)}" for lab, p in result.points.items()))
    if result.new_assignments:
        print(f"no Canvas id for {', '.join(result.new_assignments)}: Canvas creates a new assignment for each on "
              "import (give its id in --assignments to update the existing one)")
    if result.pending:
        print(f"{result.pending} submission(s) await manual grading: their written answers count 0 until graded")
    problems = result.problems()
    for line in problems:
        print(line, file=sys.stderr)
    if problems and not args.allow_missing:
        print("the file holds everyone else; fix the roster, or pass --allow-missing to accept this", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
