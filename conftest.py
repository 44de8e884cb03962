"""Shared setup for the course's own test suite (at the root so it also applies to nbval runs of
lessons/ and solutions/ alone).

- Notebook kernels inherit this process's environment: every warning a lesson or solution notebook
  emits becomes an error (TRAINKIT_STRICT_WARNINGS), and wandb never reaches for the network.
- nbval runs a notebook's cells in one kernel, so all cells of a notebook must go to the same
  pytest-xdist worker: they are put in one xdist group (run with --dist loadgroup).
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
            item.add_marker(pytest.mark.xdist_group(name=str(item.path.relative_to(ROOT))))
