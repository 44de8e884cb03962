"""Grade every submission under ``submitted/<student>/<assignment>/`` (the CLI behind ``make grade``).

    python -m autograder.grade [--course-dir DIR] [--assignment NAME ...]

For each submission it runs ``nbgrader autograde`` on its own, so one broken or crashing notebook
cannot stop the others; then it writes feedback HTML (``feedback/``), a grades CSV
(``grades/grades.csv``, nbgrader's export format) and prints a table. A submission that could not be
graded is listed as FAILED with the path of its log, and scores 0 in the table until it is fixed.
Exit status: 0 if every submission was graded, 1 if some failed, 2 if there was nothing to grade.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

# Assignments are generated into this scratch release folder (not labs/) so grading never rewrites
# the committed student notebooks; the gradebook gets the same cells and checksums either way.
SCRATCH_RELEASE = ".nbgrader_release"


def put_venv_on_path() -> None:
    """Put this interpreter's bin/ first on PATH (for this process and every subprocess).

    nbgrader runs the `alembic` executable when it creates a gradebook, and notebook kernels are found
    through PATH: both must work even when the virtual environment is not activated.
    """
    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])


def nbgrader(course: Path, *args: str, log: Path | None = None) -> bool:
    cmd = [sys.executable, "-m", "nbgrader", *args]
    proc = subprocess.run(cmd, cwd=course, capture_output=True, text=True)
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(f"$ {' '.join(cmd[1:])}\n{proc.stdout}\n{proc.stderr}", encoding="utf-8")
    return proc.returncode == 0


def find_submissions(course: Path, only: list[str] | None) -> list[tuple[str, str]]:
    root = course / "submitted"
    subs = []
    for student in sorted(p for p in root.glob("*") if p.is_dir()):
        for assignment in sorted(p for p in student.glob("*") if p.is_dir()):
            if not only or assignment.name in only:
                subs.append((student.name, assignment.name))
    return subs


def scores(course: Path, student: str, assignment: str) -> tuple[float, float, bool]:
    """(autograded score, autogradable max, needs manual grading) from the gradebook."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        try:
            sub = gb.find_submission(assignment, student)
        except MissingEntry:
            return 0.0, 0.0, False
        auto_max = sum(g.max_score for nb in sub.notebooks for g in nb.grades if g.cell.cell_type == "code")
        auto_score = sum((g.score or 0.0) for nb in sub.notebooks for g in nb.grades if g.cell.cell_type == "code")
        return float(auto_score), float(auto_max), bool(sub.needs_manual_grade)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--course-dir", type=Path, default=Path.cwd(), help="course root (holds nbgrader_config.py)")
    ap.add_argument("--assignment", action="append", help="grade only this assignment (repeatable)")
    args = ap.parse_args(argv)
    put_venv_on_path()
    course = args.course_dir.resolve()
    logs = course / "autograded" / "_logs"

    subs = find_submissions(course, args.assignment)
    if not subs:
        print(f"Nothing to grade: put submissions under {course / 'submitted'}/<student>/<assignment>/<notebook>.ipynb")
        return 2

    failed: dict[tuple[str, str], str] = {}  # (student, assignment) -> why
    for assignment in sorted({a for _, a in subs}):
        students = [s for s, a in subs if a == assignment]
        if not (course / "solutions" / assignment).is_dir():
            failed.update({(s, assignment): f"no assignment {assignment!r} in solutions/" for s in students})
            continue
        log = logs / f"generate_{assignment}.log"
        if not nbgrader(course, "generate_assignment", assignment, "--force",
                        f"--CourseDirectory.release_directory={SCRATCH_RELEASE}", log=log):
            failed.update({(s, assignment): f"see {log}" for s in students})
            continue
        for student in students:
            log = logs / f"autograde_{student}_{assignment}.log"
            print(f"grading {student}/{assignment} ...", flush=True)
            if not nbgrader(course, "autograde", assignment, "--student", student, "--force", log=log):
                failed[(student, assignment)] = f"see {log}"
        nbgrader(course, "generate_feedback", assignment, "--force", log=logs / f"feedback_{assignment}.log")

    (course / "grades").mkdir(exist_ok=True)
    csv = course / "grades" / "grades.csv"
    nbgrader(course, "export", f"--to={csv}", log=logs / "export.log")

    print(f"\n{'student':<20} {'assignment':<28} {'auto score':>12}  status")
    for student, assignment in subs:
        got, out_of, manual = scores(course, student, assignment)
        if (student, assignment) in failed:
            status = f"FAILED, {failed[(student, assignment)]}"
        else:
            status = "ok" + (" (written answers await manual grading)" if manual else "")
        print(f"{student:<20} {assignment:<28} {got:>5g} / {out_of:<5g}  {status}")
    print(f"\nfeedback: {course / 'feedback'}\ngrades:   {csv}\nlogs:     {logs}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
