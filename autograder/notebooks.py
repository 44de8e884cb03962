"""Notebook utilities shared by the grading CLI, the test suite and authors.

    python -m autograder.notebooks normalize FILE...   # strip outputs, stable metadata (commit these)
    python -m autograder.notebooks check FILE...       # exit 1 if any file is not normalized

Conventions the course relies on (see CONTRIBUTING.md):
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


def loads_unseen(source: str) -> bool:
    """Whether a test cell's hidden part loads the grader's unseen variants: the mark of a judgement exercise."""
    _, _, hidden = source.partition("### BEGIN HIDDEN TESTS")
    return "unseen" in hidden.lower()


def strip_solution_markers(source: str) -> str:
    """What a student who wrote the reference answer would have in the cell."""
    return "\n".join(line for line in source.splitlines() if not SOLUTION_MARKERS.match(line))


def solution_cells(nb) -> dict[str, nbformat.NotebookNode]:
    return {grade_id(c): c for c in nb.cells if c.get("metadata", {}).get("nbgrader", {}).get("solution")}


def _is_test(meta: dict) -> bool:
    """An autograded test cell's nbgrader metadata: graded, not a solution."""
    return bool(meta.get("grade")) and not meta.get("solution")


def graded_test_cells(nb) -> dict[str, nbformat.NotebookNode]:
    """Autograded test cells (grade=True, solution=False), by grade_id."""
    out = {}
    for c in nb.cells:
        meta = c.get("metadata", {}).get("nbgrader", {})
        if c.cell_type == "code" and _is_test(meta):
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


def graded_code_cells(nb) -> list[nbformat.NotebookNode]:
    """The cells the quick graders run: code cells with nbgrader metadata (setup, solutions, tests), in order."""
    return [c for c in nb.cells if c.cell_type == "code" and "nbgrader" in c.get("metadata", {})]


def _score(meta: dict, outcome: dict) -> tuple[float, float]:
    """nbgrader's score of a test cell (``determine_grade``) from what running it gave: an error, or the value the
    shell displayed (nbgrader gives partial credit for a number), or nothing."""
    from nbgrader.utils import determine_grade

    if outcome["error"] is not None:
        ename, evalue = outcome["error"]
        outputs = [nbformat.v4.new_output("error", ename=ename, evalue=evalue, traceback=[])]
    elif outcome["result"] is not None:
        outputs = [nbformat.v4.new_output("execute_result", data=outcome["result"], execution_count=1)]
    else:
        outputs = []
    score, max_points = determine_grade(nbformat.v4.new_code_cell("", metadata={"nbgrader": meta}, outputs=outputs))
    return float(score), float(max_points)


class PrefixGrader:
    """Grade many variants of one notebook, each as ``quick_grade`` would, without re-running their common start.

    A variant differs from the notebook only in some solution cells, so everything before its first changed cell
    is the notebook's own cells in the notebook's own order. A worker process runs those cells once, in an
    IPython shell (as a kernel does), and for each variant forks: the child starts from exactly the state a fresh
    run of the variant would have reached there (same cells, same RNG draws, same imports), runs the rest of the
    variant, and reports its test cells' scores; the test cells before the fork scored in the worker itself, on
    the same cells and state. Scores use nbgrader's rule (``determine_grade``): an error scores 0, a numeric
    result partial credit, anything else full marks; stderr text does not count (as with ``make grade``).

    Variants are fastest in the order of their first changed cell (the worker only moves forward; a variant
    that changes an earlier cell restarts it). The worker hides CUDA (forked children cannot use a CUDA context
    made before the fork): the grading is the CPU run that CI does. Not for hostile code: no sandbox, no guard.

    ``grade(answers, skip_unaffected=True)`` stops after the last cell the changed cells can reach (their own
    exercises' test cells included; ``autograder.cellflow``): the later test cells are left out of the scores and
    listed in ``skipped``, and they would score exactly as the reference does. That holds unless the variant
    changed state the data-flow cannot see: the child compares a fingerprint of it (global torch settings, the
    attributes of the modules and classes ``autograder.guard`` watches, the objects the skipped cells read)
    before and after, and where it changed runs the remaining cells after all.

    ``stop_at_first_failure=True`` (with ``skip_unaffected``) also ends the run at the first test cell of a changed
    exercise that loses points when every cell still needed after it is a test cell of a changed exercise: those
    are listed in ``unscored``. Their scores cannot change whether the exercise lost points, only how many, so a
    question of the form "does this variant lose points in its exercise and nowhere else" has its answer already.
    """

    def __init__(self, nb, timeout: int = 300):
        self.nb = nb
        self.cells = [{"source": c.source, "nbgrader": dict(c.metadata["nbgrader"]),
                       "exercise": exercise_of(grade_id(c)) if _is_test(c.metadata["nbgrader"]) else None}
                      for c in graded_code_cells(nb)]
        self.timeout = timeout
        self.skipped: list[str] = []      # test cells the last grade(skip_unaffected=True) did not need to run
        self.unscored: list[str] = []     # own-exercise test cells the last grade(stop_at_first_failure=True) left out
        self._proc = self._conn = None

    def _start(self) -> None:
        import os
        import socket
        import subprocess
        from multiprocessing.connection import Connection

        ours, theirs = socket.socketpair()
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
        env.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")   # what ipykernel sets
        self._proc = subprocess.Popen(
            [sys.executable, "-c", "import sys; from autograder.prefix_worker import serve; serve(int(sys.argv[1]))",
             str(theirs.fileno())],
            pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, env=env)
        theirs.close()
        self._conn = Connection(ours.detach())
        self._conn.send((self.cells, self.timeout))

    def grade(self, answers: dict[str, str] | None = None, skip_unaffected: bool = False,
              stop_at_first_failure: bool = False) -> dict[str, tuple[float, float]]:
        """{test grade_id: (score, max_points)} of the notebook with ``answers`` in its solution cells (with
        ``skip_unaffected``, without the test cells listed in ``self.skipped`` and ``self.unscored`` afterwards)."""
        if stop_at_first_failure and not skip_unaffected:
            raise ValueError("stop_at_first_failure needs skip_unaffected")
        sources = [c.source for c in graded_code_cells(fill(self.nb, answers or {}))]
        for _ in range(2):
            if self._proc is None:
                self._start()
            self._conn.send((sources, skip_unaffected, stop_at_first_failure))
            status, payload = self._conn.recv()
            if status == "behind":        # an earlier cell changed than the worker has run past: start over
                self.close()
                continue
            if status != "ok":
                raise RuntimeError(f"the prefix grader could not grade this variant: {payload}")
            outcomes, self.skipped, self.unscored = payload
            return {gid: _score(self.cells[index]["nbgrader"], outcome) for gid, (index, outcome) in outcomes.items()}
        raise RuntimeError("the prefix grader's worker could not start over")

    def close(self) -> None:
        if self._proc is not None:
            try:
                self._conn.send(None)
                self._conn.close()
                self._proc.wait(timeout=30)
            except Exception:   # noqa: BLE001 -- a worker that does not close cleanly is killed
                self._proc.kill()
                self._proc.wait()
            self._proc = self._conn = None


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
