"""Shared setup for the course's own test suite.

- Notebook kernels inherit this process's environment: every warning a lesson or solution notebook
  emits becomes an error (TRAINKIT_STRICT_WARNINGS), and wandb never reaches for the network.
- nbval runs a notebook's cells in one kernel, so all cells of a notebook must go to the same
  pytest-xdist worker: they are put in one xdist group (run with --dist loadgroup).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ["TRAINKIT_STRICT_WARNINGS"] = "1"
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("MPLBACKEND", "Agg")
# nbgrader and the notebook kernels are started as subprocesses: the venv's executables come first.
os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])

ASSIGNMENTS = sorted(p.name for p in (ROOT / "solutions").iterdir() if p.is_dir() and not p.name.startswith("."))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.nodeid.endswith(".ipynb") or ".ipynb::" in item.nodeid:
            item.add_marker(pytest.mark.xdist_group(name=item.nodeid.split("::")[0]))
