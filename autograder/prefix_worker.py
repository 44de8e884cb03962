"""The worker process behind ``autograder.notebooks.PrefixGrader``: runs a notebook's cells once, forks per variant.

Its own module, importing only IPython (and, for the fingerprint, torch and ``autograder.guard``), so that starting
one costs an interpreter and the notebook's own imports, not nbformat, jsonschema and nbgrader (about 5 s on a
CPU). It reports what each test cell did (the error it raised, or the value the shell displayed); the grader
turns that into nbgrader's score in the parent process.
"""
from __future__ import annotations

import sys

from autograder import cellflow


class _CellTimeout(Exception):
    pass


def serve(fd: int) -> None:
    """Serve ``PrefixGrader`` on the socket ``fd``: the notebook's cells first, then one variant per request."""
    import os
    import pickle
    import select
    import signal
    from multiprocessing.connection import Connection

    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    conn = Connection(fd)
    cells, timeout = conn.recv()

    def warm_imports():
        """Imported once, before the first fork, rather than in every forked child: torch's optimisers import
        torch._dynamo when the first one is made (about 2 s on a CPU) and IPython its traceback formatter at the
        first error, and most variants' test cells do both after the fork. Only sys.modules differs from a fresh
        kernel's: no cell's result depends on when a module was imported."""
        import stack_data  # noqa: F401
        if "torch" in sys.modules:            # a notebook that uses torch (not a test's tiny notebook)
            import torch._dynamo  # noqa: F401

    config = Config()
    config.HistoryManager.enabled = False          # no history thread or sqlite file to share across forks
    shell = InteractiveShell.instance(config=config)
    timed_out: list[int] = []

    def on_alarm(signum, frame):
        timed_out.append(1)
        raise _CellTimeout(f"the cell ran longer than {timeout} s")

    signal.signal(signal.SIGALRM, on_alarm)

    def run(index: int, source: str) -> dict[str, tuple[int, dict]]:
        """Run one cell; for a graded test cell, {grade_id: (index, outcome)}: outcome["error"] is (class name,
        message) of what it raised, outcome["result"] the mime bundle of the value it displayed (else None)."""
        signal.alarm(timeout)
        try:
            result = shell.run_cell(source, store_history=True, silent=False)
        finally:
            signal.alarm(0)
        if timed_out:
            raise _CellTimeout(f"cell {cells[index]['nbgrader'].get('grade_id')} ran longer than {timeout} s")
        if cells[index]["exercise"] is None:
            return {}
        error = result.error_before_exec or result.error_in_exec
        outcome = {"error": None if error is None else (type(error).__name__, str(error)), "result": None}
        if error is None and result.result is not None:   # set only when the shell displayed the value
            outcome["result"] = shell.display_formatter.format(result.result)[0]
        return {cells[index]["nbgrader"]["grade_id"]: (index, outcome)}

    def rest_of_variant(sources, first, stop, stop_first):
        """In the child: run cells first..stop (with ``stop_first``, only up to a failed own-exercise test cell
        followed by nothing but own-exercise test cells); if state that the data-flow cannot see changed meanwhile,
        the rest of the cells too. Returns (their test cells' outcomes, the last cell covered, the cells left
        unscored)."""
        names = set().union(set(), *(uses for i in range(stop + 1, len(cells)) for uses, _, _ in
                                     cellflow.statements(sources[i])))
        before = _state_fingerprint(shell.user_ns, names) if stop + 1 < len(cells) else None
        own = _own_tests(cells, sources) if stop_first else set()
        out, last = {}, stop
        for i in range(first, stop + 1):
            got = run(i, sources[i])
            out.update(got)
            # an error scores 0 under nbgrader's rule: a cell with points surely lost them
            lost = any(o["error"] for _, o in got.values()) and float(cells[i]["nbgrader"].get("points") or 0) > 0
            if i in own and lost and all(j in own for j in range(i + 1, stop + 1)):
                last = i
                break
        if before is not None and _state_changed(before, _state_fingerprint(shell.user_ns, names)):
            for i in range(last + 1, len(cells)):
                out.update(run(i, sources[i]))
            return out, len(cells) - 1, []
        return out, stop, [cells[j]["nbgrader"]["grade_id"] for j in range(last + 1, stop + 1)]

    position, done = 0, {}      # cells run in this process so far; their test cells' outcomes
    while True:
        request = conn.recv()
        if request is None:
            break
        sources, skip_unaffected, stop_first = request
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
            outcomes, skipped, unscored = dict(done), [], []
            if first < len(cells):
                warm_imports()
                stop = _last_needed(cells, sources, first) if skip_unaffected else len(cells) - 1
                ran, stop, unscored = _in_child(lambda: rest_of_variant(sources, first, stop, stop_first),
                                                timeout * (len(cells) - first) + 60, os, pickle, select)
                outcomes.update(ran)
                skipped = [cells[i]["nbgrader"]["grade_id"] for i in range(stop + 1, len(cells))
                           if cells[i]["exercise"] is not None]
            conn.send(("ok", (outcomes, skipped, unscored)))
        except Exception as exc:   # noqa: BLE001 -- reported to the test, which fails with it
            conn.send(("error", f"{type(exc).__name__}: {exc}"))


def _own_tests(cells: list[dict], sources: list[str]) -> set[int]:
    """The test cells of the exercises whose cells a variant changed."""
    exercises = {c["nbgrader"].get("grade_id") for c, src in zip(cells, sources) if c["source"] != src}
    return {i for i, c in enumerate(cells) if c["exercise"] is not None and c["exercise"] in exercises}


def _last_needed(cells: list[dict], sources: list[str], first: int) -> int:
    """The last cell a variant's changes can reach: an affected cell, or a test cell of a changed exercise."""
    changed = {i for i, (c, src) in enumerate(zip(cells, sources)) if c["source"] != src}
    return max(cellflow.affected_cells(sources, changed) | _own_tests(cells, sources) | {first})


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
                                torch.backends.cudnn.benchmark, torch.backends.cuda.matmul.fp32_precision,
                                torch.backends.cudnn.conv.fp32_precision)}   # the current TF32 API: the legacy
    # getters raise once the new one was used (the Trainer does, trainkit.precision.use_tf32)
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
        except BaseException as exc:   # noqa: BLE001 -- a forked child reports anything, even SystemExit
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
