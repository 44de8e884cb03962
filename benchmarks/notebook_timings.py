"""Time every notebook and one autograde per assignment on this machine (speed figures live here, not in tests).

    .venv/bin/python benchmarks/notebook_timings.py [--skip-grading]

Prints a table: wall-clock seconds to execute each lesson and solution notebook in a fresh kernel, and
to autograde one perfect submission per assignment through `python -m autograder.grade`.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from autograder import notebooks as nbu  # noqa: E402
from autograder.grade import put_venv_on_path  # noqa: E402


def time_notebook(path: Path) -> float:
    nb = nbu.read(path)
    start = time.perf_counter()
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    return time.perf_counter() - start


def time_autograde(assignment: str) -> float:
    from course import make_course, release_nb, run_grade, source_nb, submit

    with tempfile.TemporaryDirectory() as tmp:
        course = make_course(Path(tmp))
        submit(course, "perfect", assignment, nbu.fill(release_nb(assignment), nbu.reference_answers(source_nb(assignment))))
        start = time.perf_counter()
        proc = run_grade(course, "--assignment", assignment)
        elapsed = time.perf_counter() - start
        if proc.returncode != 0:
            raise RuntimeError(proc.stdout + proc.stderr)
        return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--skip-grading", action="store_true")
    args = ap.parse_args()
    os.environ.setdefault("WANDB_MODE", "offline")
    put_venv_on_path()
    rows = []
    for path in sorted([*ROOT.glob("lessons/*.ipynb"), *ROOT.glob("solutions/*/*.ipynb")]):
        rows.append((str(path.relative_to(ROOT)), time_notebook(path)))
        print(f"{rows[-1][0]:<60} {rows[-1][1]:7.1f} s", flush=True)
    if not args.skip_grading:
        for assignment in sorted(p.name for p in (ROOT / "solutions").iterdir() if p.is_dir()):
            rows.append((f"autograde 1 submission: {assignment}", time_autograde(assignment)))
            print(f"{rows[-1][0]:<60} {rows[-1][1]:7.1f} s", flush=True)
    print(f"\n{os.cpu_count()} CPUs; total {sum(t for _, t in rows):.1f} s")


if __name__ == "__main__":
    main()
