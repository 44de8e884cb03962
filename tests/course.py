"""Helpers for the autograder proofs: a throw-away copy of the course and submissions in it."""
from __future__ import annotations

import contextlib
import copy
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat

from autograder import notebooks as nbu

ROOT = Path(__file__).resolve().parents[1]
CATALOGUE = ROOT / "tests" / "catalogue"
ASSIGNMENTS = sorted(p.name for p in (ROOT / "solutions").iterdir() if p.is_dir() and not p.name.startswith("."))
# The lab whose reference grades fastest, for the tests that grade one lab many times (grading safety, shards, the
# exchange, the hub). Measured (its solution notebook in a fresh kernel, one at a time, 2 cores): lab 5 12.0 s, lab 2
# 12.8 s, lab 3 14.0 s, lab 7 16.9 s (since its exercise 7 reproduces 32 runs), lab 1 18 s, labs 6 and 8 about 40 s.
# It has every part those tests need: a catalogued bug in its first exercise, a written answer worth 2 points and a
# last code cell.
FASTEST_LAB = "05_mixed_precision"
# Those tests prove things about the grader, not about the lab, so they grade a light edition of it (light()): without
# its judgement exercise (LIGHT_CUT: from the cell that opens it to the one that opens the next), which trains about 50
# runs and is most of the lab's grading time. The whole lab is graded by tests/test_autograder.py.
LIGHT_CUT = ("## Exercise 5", "## Exercise 6")


def light(nb):
    """A copy of one of FASTEST_LAB's notebooks (source or release) without the cells of LIGHT_CUT."""
    out = copy.deepcopy(nb)
    start, end = (next(i for i, c in enumerate(out.cells) if c.cell_type == "markdown" and c.source.startswith(heading))
                  for heading in LIGHT_CUT)
    out.cells = out.cells[:start] + out.cells[end:]
    return out


def light_source():
    return light(source_nb(FASTEST_LAB))


def light_release():
    return light(release_nb(FASTEST_LAB))


def place_light_lab(course: Path) -> None:
    """Put the light edition of FASTEST_LAB in course/solutions and course/labs (over the whole one, if there)."""
    name = notebook_name(FASTEST_LAB)
    for folder, nb in (("solutions", light_source()), ("labs", light_release())):
        (course / folder / FASTEST_LAB).mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, str(course / folder / FASTEST_LAB / name))


def notebook_name(assignment: str) -> str:
    (nb,) = sorted((ROOT / "solutions" / assignment).glob("*.ipynb"))
    return nb.name


def source_nb(assignment: str):
    return nbu.read(ROOT / "solutions" / assignment / notebook_name(assignment))


def release_nb(assignment: str):
    return nbu.read(ROOT / "labs" / assignment / notebook_name(assignment))


def load_catalogue(assignment: str):
    """The module tests/catalogue/<assignment>.py: BUGS = {name: {cell: source}}, ALTERNATIVE = {cell: source}."""
    path = CATALOGUE / f"{assignment}.py"
    spec = importlib.util.spec_from_file_location(f"catalogue_{assignment}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def first_bug(assignment: str) -> tuple[str, dict[str, str]]:
    """(name, cells) of the first catalogued bug of the notebook's first exercise that has one: the bug whose grading
    by the catalogue's fast grader is checked against nbgrader's (tests/test_autograder.py)."""
    bugs = load_catalogue(assignment).BUGS
    for cell in nbu.solution_cells(source_nb(assignment)):
        for name, cells in bugs.items():
            if set(cells) == {cell}:
                return name, cells
    raise AssertionError(f"{assignment}: no catalogued bug changes a single solution cell")


def make_course(tmp: Path, light_lab: bool = False) -> Path:
    """A copy of the course's grading inputs (config, solutions, labs) in ``tmp``; with ``light_lab``, FASTEST_LAB is
    its light edition."""
    course = tmp / "course"
    course.mkdir()
    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copytree(ROOT / "solutions", course / "solutions")
    shutil.copytree(ROOT / "labs", course / "labs")
    if light_lab:
        place_light_lab(course)
    return course


def submit(course: Path, student: str, assignment: str, nb=None, raw: str | None = None) -> Path:
    """Place a submission the way nbgrader expects: submitted/<student>/<assignment>/<notebook>."""
    path = course / "submitted" / student / assignment / notebook_name(assignment)
    path.parent.mkdir(parents=True, exist_ok=True)
    if raw is not None:
        path.write_text(raw, encoding="utf-8")
    else:
        nbformat.write(nb, str(path))
    return path


def run_grade(course: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """The CLI behind `make grade`, run on the copy (with ``env`` added to this process's environment)."""
    return subprocess.run([sys.executable, "-m", "autograder.grade", "--course-dir", str(course), *args],
                          capture_output=True, text=True, cwd=course, env={**os.environ, **(env or {})})


def cell_scores(course: Path, student: str, assignment: str) -> dict[str, tuple[float | None, float]]:
    """{grade_id: (score, max)} for every graded cell of a graded submission, from the gradebook."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        sub = gb.find_submission(assignment, student)
        return {g.name: (g.score, g.max_score) for nb in sub.notebooks for g in nb.grades}


def lost_points(scores: dict[str, tuple[float, float]]) -> dict[str, tuple[float, float]]:
    """The entries (cells or exercises) that scored less than their maximum."""
    return {k: v for k, v in scores.items() if v[0] != v[1]}


def assert_bug_isolated(per_exercise: dict[str, tuple[float, float]], exercise: str, what: str) -> None:
    """A bug in ``exercise`` must lose points there and nowhere else."""
    assert exercise in per_exercise, f"{what} targets {exercise!r}, which has no test cell"
    got, out_of = per_exercise[exercise]
    assert got < out_of, f"{what} in {exercise!r} was not caught: {got}/{out_of}"
    others = {k: v for k, v in lost_points(per_exercise).items() if k != exercise}
    assert not others, f"{what} in {exercise!r} also cost points elsewhere: {others}"


@contextlib.contextmanager
def bookkeeping_gradebook(root: Path):
    """The gradebook of a course folder that holds only an empty nbgrader config: for tests that fill it through
    nbgrader's API (no kernel, no grading run), where the point is bookkeeping. Skips nbgrader's 2-3 s `alembic heads`
    subprocess."""
    from autograder.grade import gradebook, read_alembic_head_in_process

    (root / "nbgrader_config.py").write_text("c = get_config()\n")
    read_alembic_head_in_process()
    with gradebook(root) as gb:
        yield gb
