"""Shared setup for the course's own test suite (at the root so it also applies to nbval runs of
lessons/ and solutions/ alone).

- Notebook kernels inherit this process's environment: every warning a lesson or solution notebook
  emits becomes an error (TRAINKIT_STRICT_WARNINGS), and wandb never reaches for the network.
- nbval runs a notebook's cells in one kernel, so all cells of a notebook must go to the same
  pytest-xdist worker: they are put in one xdist group (run with --dist loadgroup).
- Nothing a notebook cell writes to stderr passes: a warning, a logged message (matplotlib's
  "findfont" lines, its "building the font cache" notice), a progress bar that fell back to the
  terminal. nbval keeps the outputs it received while running a cell (``IPyNbCell.test_outputs``);
  after the cell has run, any stream output named "stderr" fails it, so the check costs no second
  execution.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from autograder.grade import put_venv_on_path

ROOT = Path(__file__).resolve().parent
os.environ["TRAINKIT_STRICT_WARNINGS"] = "1"
os.environ.setdefault("WANDB_MODE", "offline")
# Two xdist workers already fill the two cores: one PyTorch/BLAS thread per kernel avoids oversubscription.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# nbgrader and the notebook kernels are started as subprocesses: the venv's executables come first.
put_venv_on_path()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.suffix == ".ipynb":  # nbval cells (their nodeids look like "lessons/x::ipynb::Cell 3")
            item.add_marker(pytest.mark.xdist_group(name=os.path.relpath(item.path, ROOT)))


def stderr_written(outputs) -> str:
    """Everything a cell's outputs (nbformat output dicts) wrote to stderr, joined ('' if nothing)."""
    return "".join(out.get("text", "") for out in outputs or []
                   if out.get("output_type") == "stream" and out.get("name") == "stderr")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """Fail an nbval cell that ran without error but wrote anything to stderr."""
    result = yield   # nbval's IPyNbCell.runtest has executed the cell; an error in it propagates here
    text = stderr_written(getattr(item, "test_outputs", None)) if item.path.suffix == ".ipynb" else ""
    if text:
        from nbval.plugin import NbCellError
        shown = text if len(text) <= 2000 else text[:2000] + f"\n... ({len(text) - 2000} more characters)"
        raise NbCellError(item.cell_num, "Cell wrote to stderr (notebooks must write nothing there: fix the "
                          "cause, do not hide it)", item.cell.source, "\nwhat it wrote to stderr:\n" + shown)
    return result


@pytest.fixture
def one_thread():
    """One PyTorch thread for the test (training runs whose numbers a test compares), restored after."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
