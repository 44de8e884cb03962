"""Grading throughput: `make grade` (parallel, each submission isolated) against plain `nbgrader autograde`.

    python benchmarks/grading.py [--students 16] [--assignment 01_signal_propagation] [--jobs 1 2 ...]

Both grade the same submissions (the reference solution under N student names) of one assignment in
throw-away copies of the course: plain nbgrader in one process for the whole batch (no isolation: one
crashing notebook stops it, every notebook runs with the instructor's rights and network), and the
course's grader with each job count asked for. Prints submissions per minute and the CPU time spent per
submission (all processes). Wall times depend on the machine and on what else runs on it (the load average is
printed): this is a script, not a test.
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from autograder import notebooks as nbu  # noqa: E402
from autograder.grade import SCRATCH_RELEASE, put_venv_on_path  # noqa: E402
from course import make_course, release_nb, source_nb, submit  # noqa: E402


def course_with_submissions(tmp: Path, assignment: str, students: int) -> Path:
    tmp.mkdir(parents=True)
    course = make_course(tmp)
    nb = nbu.fill(release_nb(assignment), nbu.reference_answers(source_nb(assignment)))
    for i in range(students):
        submit(course, f"student{i:03d}", assignment, nb)
    return course


def timed(cmd: list[str], cwd: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the command and everything it started): CPU time is what a busy machine
    inflates least."""
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return elapsed, (after.ru_utime - cpu.ru_utime) + (after.ru_stime - cpu.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--assignment", default="01_signal_propagation")
    ap.add_argument("--students", type=int, default=16)
    ap.add_argument("--jobs", type=int, nargs="+", default=sorted({1, os.cpu_count() or 1}))
    args = ap.parse_args()
    put_venv_on_path()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    rows = []
    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        course = course_with_submissions(Path(tmp) / "plain", args.assignment, args.students)
        nbg = [sys.executable, "-m", "nbgrader"]
        timed([*nbg, "generate_assignment", args.assignment, "--force",
               f"--CourseDirectory.release_directory={SCRATCH_RELEASE}"], course)
        rows.append(("plain `nbgrader autograde`, one process, no isolation",
                     timed([*nbg, "autograde", args.assignment, "--force"], course)))
    for jobs in args.jobs:
        with tempfile.TemporaryDirectory() as tmp:
            course = course_with_submissions(Path(tmp) / f"jobs{jobs}", args.assignment, args.students)
            rows.append((f"`make grade` with {jobs} job(s), each submission isolated",
                         timed([sys.executable, "-m", "autograder.grade", "--assignment", args.assignment,
                                "--jobs", str(jobs)], course)))
    print(f"\n{args.students} submissions of {args.assignment}, {os.cpu_count()} cores, "
          f"load average before {load[0]:.1f}, after {os.getloadavg()[0]:.1f}\n")
    print("| grader | wall time (s) | submissions / min | CPU s / submission |\n|---|---|---|---|")
    for name, (seconds, cpu) in rows:
        print(f"| {name} | {seconds:.1f} | {60 * args.students / seconds:.1f} | {cpu / args.students:.2f} |")


if __name__ == "__main__":
    main()
