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

from autograder import cellflow

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


def graded_code_cells(nb) -> list[nbformat.NotebookNode]:
    """The cells the quick graders run: code cells with nbgrader metadata (setup, solutions, tests), in order."""
    return [c for c in nb.cells if c.cell_type == "code" and "nbgrader" in c.get("metadata", {})]


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
    """

    def __init__(self, nb, timeout: int = 300):
        self.nb = nb
        self.cells = [{"source": c.source, "nbgrader": dict(c.metadata["nbgrader"])} for c in graded_code_cells(nb)]
        self.timeout = timeout
        self.skipped: list[str] = []      # test cells the last grade(skip_unaffected=True) did not need to run
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
            [sys.executable, "-c", "import sys; from autograder.notebooks import _prefix_worker; "
             "_prefix_worker(int(sys.argv[1]))", str(theirs.fileno())],
            pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, env=env)
        theirs.close()
        self._conn = Connection(ours.detach())
        self._conn.send((self.cells, self.timeout))

    def grade(self, answers: dict[str, str] | None = None, skip_unaffected: bool = False) -> dict[str, tuple[float, float]]:
        """{test grade_id: (score, max_points)} of the notebook with ``answers`` in its solution cells (with
        ``skip_unaffected``, without the test cells listed in ``self.skipped`` afterwards)."""
        sources = [c.source for c in graded_code_cells(fill(self.nb, answers or {}))]
        for _ in range(2):
            if self._proc is None:
                self._start()
            self._conn.send((sources, skip_unaffected))
            status, payload = self._conn.recv()
            if status == "behind":        # an earlier cell changed than the worker has run past: start over
                self.close()
                continue
            if status != "ok":
                raise RuntimeError(f"the prefix grader could not grade this variant: {payload}")
            scores, self.skipped = payload
            return scores
        raise RuntimeError("the prefix grader's worker could not start over")

    def close(self) -> None:
        if self._proc is not None:
            try:
                self._conn.send(None)
                self._conn.close()
                self._proc.wait(timeout=30)
            except Exception:
                self._proc.kill()
                self._proc.wait()
            self._proc = self._conn = None


class _CellTimeout(Exception):
    pass


def _prefix_worker(fd: int) -> None:
    """The worker behind ``PrefixGrader`` (its own process): runs cells, forks a child per variant."""
    import os
    import pickle
    import select
    import signal
    from multiprocessing.connection import Connection

    from IPython.core.interactiveshell import InteractiveShell
    from nbgrader.utils import determine_grade
    from traitlets.config import Config

    conn = Connection(fd)
    cells, timeout = conn.recv()
    # Imported once here rather than in every forked child: torch's optimisers import torch._dynamo when the first
    # one is made (about 2 s on a CPU) and IPython its traceback formatter at the first error, and most variants'
    # test cells do both after the fork. Only sys.modules differs from a fresh kernel's: no cell's result depends
    # on when a module was imported.
    import stack_data  # noqa: F401
    import torch._dynamo  # noqa: F401
    config = Config()
    config.HistoryManager.enabled = False          # no history thread or sqlite file to share across forks
    shell = InteractiveShell.instance(config=config)
    timed_out: list[int] = []

    def on_alarm(signum, frame):
        timed_out.append(1)
        raise _CellTimeout(f"the cell ran longer than {timeout} s")

    signal.signal(signal.SIGALRM, on_alarm)

    def run(index: int, source: str) -> dict[str, tuple[float, float, str]]:
        """Run one cell; for a graded test cell, {grade_id: (score, max, error)} by nbgrader's rule."""
        signal.alarm(timeout)
        try:
            result = shell.run_cell(source, store_history=True, silent=False)
        finally:
            signal.alarm(0)
        if timed_out:
            raise _CellTimeout(f"cell {cells[index]['nbgrader'].get('grade_id')} ran longer than {timeout} s")
        meta = cells[index]["nbgrader"]
        if not (meta.get("grade") and not meta.get("solution")):
            return {}
        error = result.error_before_exec or result.error_in_exec
        if error is not None:
            outputs = [nbformat.v4.new_output("error", ename=type(error).__name__, evalue=str(error), traceback=[])]
        elif result.result is not None:     # set only when the shell displayed the value (an execute_result)
            data, _ = shell.display_formatter.format(result.result)
            outputs = [nbformat.v4.new_output("execute_result", data=data, execution_count=1)]
        else:
            outputs = []
        cell = nbformat.v4.new_code_cell(source, metadata={"nbgrader": meta}, outputs=outputs)
        score, max_points = determine_grade(cell)
        return {meta["grade_id"]: (float(score), float(max_points), f"{type(error).__name__}: {error}" if error else "")}

    def rest_of_variant(sources, first, stop):
        """In the child: run cells first..stop; if state that the data-flow cannot see changed meanwhile, the rest
        of the cells too. Returns (their test cells' scores, the last cell run)."""
        names = set().union(set(), *(uses for i in range(stop + 1, len(cells)) for uses, _, _ in
                                     cellflow.statements(sources[i])))
        before = _state_fingerprint(shell.user_ns, names) if stop + 1 < len(cells) else None
        out = {}
        for i in range(first, stop + 1):
            out.update(run(i, sources[i]))
        if before is not None and _state_changed(before, _state_fingerprint(shell.user_ns, names)):
            for i in range(stop + 1, len(cells)):
                out.update(run(i, sources[i]))
            stop = len(cells) - 1
        return out, stop

    position, done = 0, {}      # cells run in this process so far; their test cells' scores
    while True:
        request = conn.recv()
        if request is None:
            break
        sources, skip_unaffected = request
        try:
            first = next((i for i, (c, s) in enumerate(zip(cells, sources)) if c["source"] != s), len(cells))
            if len(sources) != len(cells):
                raise ValueError("the variant does not have the notebook's cells")
            if first < position:
                conn.send(("behind", position))
                continue
            while position < first:
                done.update(run(position, cells[position]["source"]))
                position += 1
            scores, skipped = dict(done), []
            if first < len(cells):
                stop = _last_needed(cells, sources, first) if skip_unaffected else len(cells) - 1
                ran, stop = _in_child(lambda: rest_of_variant(sources, first, stop),
                                      timeout * (len(cells) - first) + 60, os, pickle, select)
                scores.update(ran)
                skipped = [cells[i]["nbgrader"]["grade_id"] for i in range(stop + 1, len(cells))
                           if cells[i]["nbgrader"].get("grade") and not cells[i]["nbgrader"].get("solution")]
            conn.send(("ok", ({k: v[:2] for k, v in scores.items()}, skipped)))
        except Exception as exc:   # reported to the test, which fails with it
            conn.send(("error", f"{type(exc).__name__}: {exc}"))


def _last_needed(cells: list[dict], sources: list[str], first: int) -> int:
    """The last cell a variant's changes can reach: an affected cell, or a test cell of a changed exercise."""
    changed = {i for i, (c, src) in enumerate(zip(cells, sources)) if c["source"] != src}
    exercises = {cells[i]["nbgrader"].get("grade_id") for i in changed}
    own = {i for i, c in enumerate(cells) if c["nbgrader"].get("grade") and not c["nbgrader"].get("solution")
           and exercise_of(c["nbgrader"]["grade_id"]) in exercises}
    return max(cellflow.affected_cells(sources, changed) | own | {first})


def _state_fingerprint(namespace: dict, names: set[str]) -> dict:
    """What later cells could read outside the names the data-flow follows: global torch settings, the attributes
    of the modules and classes the grading guard watches (and their functions' code), and a shallow view of the
    notebook objects ``names``. Compare with ``_state_changed``."""
    import os
    import types

    import torch

    from autograder import guard

    def ident(value):
        return (id(value), id(value.__code__)) if isinstance(value, types.FunctionType) else (id(value),)

    def attribute(value):
        """Its identity, and whether the notebook made it (a library that patches itself once, as torch's
        optimisers wrap their class's step on first use, changes the identity too: that is the same in every run)."""
        code = getattr(value, "__code__", None) if isinstance(value, (types.FunctionType, types.MethodType)) else None
        made_here = (isinstance(code, types.CodeType) and not os.path.isfile(code.co_filename)) or \
            getattr(value if isinstance(value, type) else type(value), "__module__", None) == "__main__"
        return ident(value), made_here

    def shallow(obj):
        if isinstance(obj, dict):
            return tuple((id(k), id(v)) for k, v in obj.items())
        if isinstance(obj, (list, tuple)):
            return tuple(map(id, obj))
        if isinstance(obj, (set, frozenset)):
            return tuple(sorted(map(id, obj)))
        attrs = getattr(obj, "__dict__", None) if not isinstance(obj, (type, types.ModuleType)) else None
        if isinstance(attrs, dict):
            return ident(obj) + tuple((k, id(v)) for k, v in attrs.items())
        return ident(obj)

    out = {("torch", "flags"): (torch.get_default_dtype(), torch.is_grad_enabled(),
                                torch.are_deterministic_algorithms_enabled(), torch.is_anomaly_enabled(),
                                torch.get_num_threads(), torch.backends.cudnn.deterministic,
                                torch.backends.cudnn.benchmark, torch.backends.cuda.matmul.allow_tf32,
                                torch.get_float32_matmul_precision())}
    for name in guard.MODULES:
        module = sys.modules.get(name)
        if module is not None:
            out.update({("module", name, k): attribute(v) for k, v in vars(module).items()})
    for module_name, cls_name in guard.CLASSES:
        cls = getattr(sys.modules.get(module_name), cls_name, None)
        if isinstance(cls, type):
            out.update({("class", cls_name, k): attribute(v) for k, v in vars(cls).items()})
    out.update({("object", n): shallow(namespace[n]) for n in names if n in namespace})
    return out


def _state_changed(before: dict, after: dict) -> bool:
    """Something that was there before is gone, or different; a module or class attribute counts as different only
    where the notebook made the new value (modules also gain attributes: lazy imports)."""
    for key, value in before.items():
        now = after.get(key)
        if now is None:
            return True
        if key[0] in ("module", "class"):
            if now[0] != value[0] and now[1]:
                return True
        elif now != value:
            return True
    return False


def _in_child(work, wall_timeout: float, os, pickle, select):
    """``work()`` in a forked child; its pickled result, or an exception if it died or hung."""
    import sys as _sys

    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        try:
            payload = pickle.dumps(("ok", work()))
        except BaseException as exc:
            payload = pickle.dumps(("error", f"{type(exc).__name__}: {exc}"))
        try:
            view = memoryview(payload)
            while view:
                view = view[os.write(write_end, view):]
        finally:
            _sys.stdout.flush()
            os._exit(0)
    import time

    os.close(write_end)
    chunks, deadline = [], time.monotonic() + wall_timeout
    try:
        while True:
            ready, _, _ = select.select([read_end], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                os.kill(pid, 9)
                raise TimeoutError(f"the variant did not finish within {wall_timeout:.0f} s")
            chunk = os.read(read_end, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(read_end)
        os.waitpid(pid, 0)
    if not chunks:
        raise RuntimeError("the forked run died before it reported (os._exit, a crash, or out of memory)")
    status, value = pickle.loads(b"".join(chunks))
    if status != "ok":
        raise RuntimeError(value)
    return value


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
