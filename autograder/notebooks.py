"""Notebook utilities shared by the grading CLI, the test suite and authors.

    python -m autograder.notebooks normalize FILE...   # strip outputs, stable metadata (commit these)
    python -m autograder.notebooks check FILE...       # exit 1 if any file is not normalized

Conventions the course relies on (see README, "Writing a lab"):
- a solution cell ``<name>`` is graded by test cells ``test_<name>`` (and ``test_<name>__<suffix>``);
  the exercise of a test cell is the part of its grade_id between ``test_`` and ``__``;
- cells without nbgrader metadata are free cells (demos, scratch): grading ignores them and the quick
  grader below skips them.
"""
from __future__ import annotations

import copy
import re
import sys
from pathlib import Path

import nbformat

KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
SOLUTION_MARKERS = re.compile(r"^\s*(###|#) (BEGIN|END) SOLUTION\s*$")
KEEP_CELL_METADATA = ("nbgrader", "tags", "deletable", "editable")


def read(path) -> nbformat.NotebookNode:
    return nbformat.read(str(path), as_version=4)


def normalize(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Outputs stripped, execution counts cleared, stable ids and metadata: readable diffs."""
    nb = copy.deepcopy(nb)
    nb.nbformat, nb.nbformat_minor = 4, 5
    nb.metadata = nbformat.NotebookNode(kernelspec=dict(KERNELSPEC), language_info={"name": "python"})
    for i, cell in enumerate(nb.cells):
        cell.id = f"cell-{i:03d}"
        cell.metadata = nbformat.NotebookNode({k: v for k, v in cell.metadata.items() if k in KEEP_CELL_METADATA})
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return nb


def is_normalized(path) -> bool:
    raw = Path(path).read_text(encoding="utf-8")
    return raw == nbformat.writes(normalize(nbformat.reads(raw, as_version=4))) + "\n"


def write_normalized(nb: nbformat.NotebookNode, path) -> None:
    Path(path).write_text(nbformat.writes(normalize(nb)) + "\n", encoding="utf-8")


def grade_id(cell) -> str | None:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def exercise_of(test_grade_id: str) -> str:
    """``test_kaiming__edges`` -> ``kaiming``."""
    if not test_grade_id.startswith("test_"):
        raise ValueError(f"test cell grade_id must start with 'test_': {test_grade_id!r}")
    return test_grade_id[len("test_"):].split("__")[0]


def strip_solution_markers(source: str) -> str:
    """What a student who wrote the reference answer would have in the cell."""
    return "\n".join(line for line in source.splitlines() if not SOLUTION_MARKERS.match(line))


def solution_cells(nb) -> dict[str, nbformat.NotebookNode]:
    return {grade_id(c): c for c in nb.cells if c.get("metadata", {}).get("nbgrader", {}).get("solution")}


def graded_test_cells(nb) -> dict[str, nbformat.NotebookNode]:
    """Autograded test cells (grade=True, solution=False), by grade_id."""
    out = {}
    for c in nb.cells:
        meta = c.get("metadata", {}).get("nbgrader", {})
        if c.cell_type == "code" and meta.get("grade") and not meta.get("solution"):
            out[meta["grade_id"]] = c
    return out


def fill(release_nb, answers: dict[str, str]) -> nbformat.NotebookNode:
    """A copy of a notebook with the given solution cells' sources replaced (a "submission")."""
    nb = copy.deepcopy(release_nb)
    unknown = set(answers) - set(solution_cells(nb))
    if unknown:
        raise KeyError(f"no solution cells named {sorted(unknown)}")
    for gid, cell in solution_cells(nb).items():
        if gid in answers:
            cell.source = answers[gid]
    return nb


def reference_answers(source_nb) -> dict[str, str]:
    """The reference solution of every solution cell, markers removed."""
    return {gid: strip_solution_markers(c.source) for gid, c in solution_cells(source_nb).items()}


def quick_grade(source_nb, answers: dict[str, str] | None = None, timeout: int = 300, km=None) -> dict[str, tuple[float, float]]:
    """Grade a variant of the source notebook fast, the way nbgrader would.

    Only cells with nbgrader metadata run (setup, solutions, tests; free demo cells are skipped),
    test cells keep their hidden tests (as nbgrader's autograde restores them), and each test cell is
    scored with nbgrader's own rule after the same stderr handling as ``make grade``.
    ``km``: an already started jupyter_client KernelManager to reuse (the variant then runs in a
    namespace cleared with ``%reset -f``); by default a fresh kernel is started and stopped.
    Returns {test grade_id: (score, max_points)}.
    """
    from nbclient import NotebookClient
    from nbgrader.utils import determine_grade

    from autograder.preprocessors import StderrToStdout

    nb = fill(source_nb, answers or {})
    nb.cells = [c for c in nb.cells if c.cell_type == "code" and "nbgrader" in c.get("metadata", {})]
    if km is not None:
        nb.cells.insert(0, nbformat.v4.new_code_cell("%reset -f"))
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=True, km=km)
    client.execute()
    fixer = StderrToStdout()
    for i, cell in enumerate(nb.cells):
        fixer.preprocess_cell(cell, {}, i)
    scores = {}
    for gid, cell in graded_test_cells(nb).items():
        score, max_points = determine_grade(cell)
        scores[gid] = (float(score), float(max_points))
    return scores


def by_exercise(scores: dict[str, tuple[float, float]]) -> dict[str, tuple[float, float]]:
    """Sum test-cell scores per exercise."""
    out: dict[str, tuple[float, float]] = {}
    for gid, (s, m) in scores.items():
        ex = exercise_of(gid)
        s0, m0 = out.get(ex, (0.0, 0.0))
        out[ex] = (s0 + s, m0 + m)
    return out


def _main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] not in {"normalize", "check"}:
        print(__doc__)
        return 2
    command, files = argv[0], argv[1:]
    if command == "normalize":
        for f in files:
            write_normalized(read(f), f)
        return 0
    bad = [f for f in files if not is_normalized(f)]
    for f in bad:
        print(f"not normalized (run: python -m autograder.notebooks normalize {f})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
