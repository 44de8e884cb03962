"""Packaging and repository hygiene: pins agree, labs/ is generated, notebooks are committed clean."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from autograder import notebooks as nbu
from course import make_course

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted([*ROOT.glob("lessons/*.ipynb"), *ROOT.glob("solutions/*/*.ipynb")])


def pip_pins() -> dict[str, str]:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pins = {}
    for dep in deps:
        name, sep, version = dep.split(";")[0].partition("==")   # "; sys_platform == ..." markers aside
        assert sep, f"pyproject.toml: {dep!r} is not pinned with =="
        pins[name.strip().lower()] = version.strip()
    return pins


def conda_pins() -> dict[str, str]:
    text = (ROOT / "environment.yml").read_text()
    return {m[1].lower(): m[2] for m in re.finditer(r"^\s*-\s*([A-Za-z0-9_.\-]+)==([^\s#]+)", text, re.M)}


def test_environment_yml_matches_pip_pins():
    assert pip_pins() == conda_pins(), "environment.yml and pyproject.toml pin different packages or versions"
    # the Python range agrees with pyproject.toml: tests/test_python_versions.py


def test_torch_is_pinned_to_the_course_version():
    assert pip_pins()["torch"] == "2.13.0"


def test_installed_versions_match_the_pins():
    from importlib.metadata import version

    wrong = {n: (v, version(n)) for n, v in pip_pins().items() if version(n).split("+")[0] != v}
    assert not wrong, f"installed versions differ from the pins (pinned, installed): {wrong}"


def test_labs_are_exactly_what_make_labs_generates(tmp_path):
    course = make_course(tmp_path)
    shutil.rmtree(course / "labs")
    proc = subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", "*", "--force"],
                          cwd=course, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    generated = sorted(p.relative_to(course / "labs") for p in (course / "labs").rglob("*.ipynb"))
    committed = sorted(p.relative_to(ROOT / "labs") for p in (ROOT / "labs").rglob("*.ipynb"))
    assert generated == committed, ("labs/ holds different notebooks from what solutions/ generates. Instructor: run "
                                    "`make labs` (it stops rather than overwrite hand edits) and commit. Students never "
                                    "edit labs/ or run `make labs`: they work in my-work/ (see README)")
    for rel in generated:
        assert (course / "labs" / rel).read_text() == (ROOT / "labs" / rel).read_text(), \
            (f"labs/{rel} differs from what solutions/ generates. Instructor: run `make labs` (it stops rather than "
             "overwrite a hand-edited lab) and commit the result. A student who edited labs/: keep your edits by copying "
             "the notebook into my-work/ first; your own copies live there (see README)")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_notebooks_are_committed_normalized(path):
    assert nbu.is_normalized(path), (f"{path.relative_to(ROOT)} is not committed clean. Maintainer: run `make normalize` "
                                      "(outputs stripped, stable metadata) before committing. A student who ran a lesson "
                                      "here has lost nothing: this check is for the course's own commits")


DEPRECATED = {
    "torch.cuda.amp": "use torch.amp.autocast / torch.amp.GradScaler",
    "from torch.cuda.amp": "use torch.amp",
    ".data.": "use torch.no_grad() instead of .data",
}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_notebooks_use_modern_apis(path):
    for cell in nbu.read(path).cells:
        if cell.cell_type != "code":
            continue
        source = cell.source.replace("torch.utils.data.", "torch.utils.")  # the data package is not Tensor.data
        for bad, fix in DEPRECATED.items():
            assert bad not in source, f"{path.name}: {bad!r} in a code cell: {fix}"


def test_every_solution_follows_the_lab_conventions():
    for path in ROOT.glob("solutions/*/*.ipynb"):
        nb = nbu.read(path)
        first_code = next(c for c in nb.cells if c.cell_type == "code")
        meta = first_code.metadata.get("nbgrader", {})
        assert meta.get("locked") and meta.get("grade_id") == "setup", f"{path.name}: the first code cell is the locked setup"
        assert "setup_notebook(" in first_code.source and "quiet_warnings=True" in first_code.source
        tests = nbu.graded_test_cells(nb)
        solutions = nbu.solution_cells(nb)
        assert tests, f"{path.name}: no autograded test cells"
        for gid in tests:
            assert nbu.exercise_of(gid) in solutions, f"{path.name}: test cell {gid} names no solution cell"
        assert any("BEGIN HIDDEN TESTS" in c.source for c in tests.values()), f"{path.name}: no hidden tests"
        manual = [c for c in nb.cells if c.cell_type == "markdown" and c.metadata.get("nbgrader", {}).get("grade")]
        assert manual, f"{path.name}: no manually graded written answer"


def test_every_lesson_has_a_matching_lab_and_a_self_check():
    # A lesson is lessons/NN_topic_lesson.ipynb: its own name, so its tab never looks like the lab's.
    lessons = sorted(p.stem.removesuffix("_lesson") for p in ROOT.glob("lessons/*_lesson.ipynb"))
    assert len(lessons) == len(list(ROOT.glob("lessons/*.ipynb"))), "every lesson is named NN_topic_lesson.ipynb"
    assert lessons == sorted(p.name for p in (ROOT / "solutions").iterdir() if p.is_dir())
    for name in lessons:
        source = "\n".join(c.source for c in nbu.read(ROOT / "lessons" / f"{name}_lesson.ipynb").cells)
        assert "selfcheck." in source, f"lessons/{name}_lesson.ipynb has no self-check questions"


def test_nbgrader_extensions_are_enabled():
    server = subprocess.run([sys.executable, "-m", "jupyter", "server", "extension", "list"],
                            capture_output=True, text=True)
    text = server.stdout + server.stderr
    assert re.search(r"nbgrader\.server_extensions\.formgrader\s+\S*enabled", text), text
    lab = subprocess.run([sys.executable, "-m", "jupyter", "labextension", "list"], capture_output=True, text=True)
    assert re.search(r"@jupyter/nbgrader\s+v\S+\s+\S*enabled", lab.stdout + lab.stderr), lab.stdout + lab.stderr


def test_readme_starts_with_the_two_commands():
    readme = (ROOT / "README.md").read_text()
    head = readme[:1500]
    assert "make lab" in head and "make test" in head
    assert "make test" in (ROOT / ".ci" / "run").read_text()
