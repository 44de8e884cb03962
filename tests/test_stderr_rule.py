"""The root conftest's rule: a lesson or solution notebook cell that writes anything to stderr fails nbval.

Each test runs pytest + nbval, as the suite does, on a tiny notebook in a temporary folder, with the
repository's conftest.py loaded as a plugin (the folder lies outside the repository, so pytest would not
find the conftest by itself).
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_nbval(tmp_path: Path, *cells: str) -> subprocess.CompletedProcess:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in cells]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, tmp_path / "probe.ipynb")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider", "--nbval-lax",
         "--nbval-current-env", "--nbval-cell-timeout=120", "-q", "probe.ipynb"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )


@pytest.mark.parametrize("source", [
    'import sys\nprint("a message", file=sys.stderr)',
    'import logging\nlogging.getLogger("matplotlib.font_manager").warning("findfont: Font family not found")',
], ids=["print-to-stderr", "logged-warning"])
def test_a_cell_that_writes_to_stderr_fails_with_a_clear_message(tmp_path, source):
    result = run_nbval(tmp_path, 'print("stdout is fine")', source)
    report = result.stdout + result.stderr
    assert result.returncode == 1, f"nbval should fail on a cell that writes to stderr; got rc {result.returncode}:\n{report}"
    assert "1 failed, 1 passed" in report, f"only the stderr cell should fail:\n{report}"
    assert "Cell wrote to stderr" in report, f"the failure should say what is wrong:\n{report}"
    assert ("a message" in report) or ("findfont" in report), f"the failure should show what was written:\n{report}"


def test_a_notebook_that_writes_nothing_to_stderr_passes(tmp_path):
    result = run_nbval(tmp_path, 'print("stdout is fine")', "x = 1 + 1\nx")
    report = result.stdout + result.stderr
    assert result.returncode == 0, f"a clean notebook should pass; got rc {result.returncode}:\n{report}"
    assert "2 passed" in report, report
