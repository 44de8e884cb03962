"""nbgrader preprocessors used by nbgrader_config.py."""
from __future__ import annotations

from pathlib import Path

from nbclient.exceptions import DeadKernelError
from nbformat import NotebookNode
from nbgrader.preprocessors import Execute, NbGraderPreprocessor

from autograder import lending
from autograder.term import variants

KERNEL_DIED = "KernelDied"
# Starts the line the guard prints in the hidden cell before a test cell: what it had to restore.
RESTORED = "[grader-guard restored] "


class StderrToStdout(NbGraderPreprocessor):
    """Turn stderr text into stdout text after execution, before grading.

    nbgrader gives 0 points to a test cell that wrote anything to stderr, so a harmless library
    warning (a DeprecationWarning, a tqdm bar) would zero a correct answer. Real failures are
    ``error`` outputs, not stderr text, so grading still sees them; the warning text stays visible
    in the feedback, marked as such.
    """

    def preprocess_cell(self, cell, resources, cell_index):
        if cell.cell_type == "code":
            for output in cell.get("outputs", []):
                if output.get("output_type") == "stream" and output.get("name") == "stderr":
                    output["name"] = "stdout"
                    output["text"] = "[stderr] " + output.get("text", "")
        return cell, resources


class SafeExecute(Execute):
    """nbgrader's Execute, made safe against a kernel that dies and against tampering with the tests.

    - A kernel that dies (``os._exit``, a segfault, the memory limit) does not stop the grading of the notebook:
      with plain Execute nbgrader gives up and records nothing. Here the cell where the kernel died and every
      code cell after it get an error output that says so: those cells score 0 with a reason the student can
      read in the feedback, the cells that ran before keep their scores.
    - Hidden cells run ``autograder.guard`` in the kernel: a snapshot before the first cell, a record of what
      each locked cell (setup, tests) binds, and a restore right before each test cell, so a solution cell that
      rebinds or patches what the tests rely on does not change their verdict (see autograder/guard.py). What
      had to be restored is printed in the test cell's output. If the restore itself fails, the test cell is
      not run and scores 0 (fail closed).
    - A test cell that imports the grader's unseen variants gets them lent for that cell only, and taken back
      right after it (autograder/lending.py); the sandbox hides their files from every cell.
    """

    def preprocess(self, nb, resources=None, km=None):
        self._died_in = None
        self._guarded = False
        return super().preprocess(nb, resources, km)

    def _hidden(self, code: str, index: int) -> tuple[bool, str]:
        """Run ``code`` in the kernel outside the notebook; (succeeded, its stdout or error)."""
        cell = NotebookNode(cell_type="code", source=code, metadata={}, outputs=[], execution_count=None)
        real = self.nb.cells[index]
        try:
            self.execute_cell(cell, index, store_history=False)  # not counted: the student's In [n] stay as they were
        finally:
            self.nb.cells[index] = real       # nbclient stores the executed cell back at its index
        errors = [o for o in cell.outputs if o.get("output_type") == "error"]
        if errors:
            return False, f"{errors[0].get('ename')}: {errors[0].get('evalue')}"
        return True, "".join(o.get("text", "") for o in cell.outputs if o.get("output_type") == "stream")

    def _run_guarded(self, cell, resources, index):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        is_test = bool(meta.get("grade")) and not meta.get("solution")
        locked = bool(meta.get("locked")) or is_test
        if not self._guarded:   # before the first code cell, whoever wrote it
            self._guarded = True
            self._hidden("import autograder.guard as _grader_guard\n_grader_guard.snapshot()", index)
        if not locked:
            return super().preprocess_cell(cell, resources, index)
        note = ""
        if is_test:   # restore, then remember the namespace: one round trip to the kernel, not two
            ok, out = self._hidden(f"print({RESTORED!r} + ', '.join(_grader_guard.restore())); "
                                   "_grader_guard.before_locked()", index)
            if not ok:
                return self._refuse(cell, resources, f"restore the grading environment before this test ({out})")
            # only the guard's own line: a hook on IPython's events may print in this hidden cell too
            note = out.partition(RESTORED)[2].split("\n", 1)[0].strip()
        else:
            self._hidden("_grader_guard.before_locked()", index)
        lent = lending.imported_by(cell.source)
        if lent:   # the unseen variants this cell loads, for this cell only (autograder/lending.py)
            ok, out = self._hidden(lending.lend_code(lent), index)
            if not ok:
                self._hidden(lending.FORGET_CODE, index)
                return self._refuse(cell, resources, f"lend this test the grader's unseen variants ({out})")
        cell, resources = super().preprocess_cell(cell, resources, index)
        if lent:
            self._hidden(lending.FORGET_CODE, index)
        outbox = (getattr(getattr(self, "km", None), "kernel_env", None) or {}).get(variants.OUTCOMES_ENV)
        if outbox:   # what the band checks recorded leaves the kernel's reach before any student code runs again
            variants.take(Path(outbox))
        self._hidden("_grader_guard.after_locked()", index)
        if note:
            cell.outputs.insert(0, NotebookNode(output_type="stream", name="stdout",
                                                text=f"[grader] restored before this test: {note}\n"))
        return cell, resources

    @staticmethod
    def _refuse(cell, resources, what: str):
        """The test cell is not run and scores 0 (fail closed): the grader could not do ``what``."""
        why = f"the grader could not {what}"
        cell.outputs = [NotebookNode(output_type="error", ename="GraderGuardError", evalue=why,
                                     traceback=[f"GraderGuardError: {why}"])]
        return cell, resources

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type != "code":
            return cell, resources
        if self._died_in is None:
            try:
                return self._run_guarded(cell, resources, index)
            except DeadKernelError:
                self._died_in = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") or f"cell {index}"
                why = (f"the kernel died while running {self._died_in} (os._exit or sys.exit in a kernel thread, "
                       "a crash, or the grader's memory limit); this cell did not finish")
        else:
            why = f"not run: the kernel died earlier, in {self._died_in}"
        cell.outputs = list(cell.get("outputs", [])) + [
            NotebookNode(output_type="error", ename=KERNEL_DIED, evalue=why, traceback=[f"{KERNEL_DIED}: {why}"])]
        return cell, resources

    def setup_kernel(self, **kwargs):
        return _tolerate_dead_kernel_on_exit(super().setup_kernel(**kwargs))


class _tolerate_dead_kernel_on_exit:
    """Wrap nbclient's setup_kernel context so that shutting down an already dead kernel is not an error."""

    def __init__(self, ctx):
        self._ctx = ctx

    def __enter__(self):
        return self._ctx.__enter__()

    def __exit__(self, *exc):
        try:
            return self._ctx.__exit__(*exc)
        except DeadKernelError:
            return False
