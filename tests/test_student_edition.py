"""The student edition (`make student-edition`): built into a temporary folder, it holds what a student needs
and nothing of the instructor's side: no reference answers, no hidden tests, no bug catalogue, no grading tools."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import pytest

from publish import edition
from autograder import notebooks as nbu
from course import ASSIGNMENTS, load_catalogue

ROOT = Path(__file__).resolve().parents[1]
# What an edition holds at its top level, and nothing else.
TOP_LEVEL = {"lessons", "labs", "trainkit", "autograder", "README.md", "Makefile", "student.mk", ".gitignore", "pyproject.toml",
             "environment.yml", ".student-edition"}
# nbgrader's markers: the text between them is a reference answer or a hidden test.
BLOCK = re.compile(r"^[ \t]*#+ BEGIN (SOLUTION|HIDDEN TESTS)[ \t]*\n(.*?)^[ \t]*#+ END \1[ \t]*$", re.M | re.S)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("publish") / "student-edition"
    # The builder refuses to publish a leak itself; here it builds anyway so that the tests below, which do
    # not rely on its checks, can name any leak precisely.
    edition.build(out, archive=True, refuse_leaks=False)
    return out


def edition_files(out: Path) -> list[Path]:
    return sorted(p for p in out.rglob("*") if p.is_file())


def lines(text: str) -> list[str]:
    """Text compared line by line, indentation and blank lines aside (a re-indented copy still counts)."""
    return [line.strip() for line in text.splitlines() if line.strip()]


def readable_text(path: Path) -> str:
    """A file's text as a reader sees it: for a notebook, its cells' sources one after the other."""
    text = path.read_bytes().decode("utf-8", errors="replace")
    if path.suffix == ".ipynb":
        text = "\n".join(c.source for c in nbu.read(path).cells)
    return text


def secret_blocks(path: Path) -> tuple[list[str], set[str]]:
    """(the reference answers and hidden tests of a source notebook, the lines of everything else in it)."""
    secret, public = [], set()
    for cell in nbu.read(path).cells:
        secret += [m[2] for m in BLOCK.finditer(cell.source)]
        public |= set(lines(BLOCK.sub("", cell.source)))
    return secret, public


def test_edition_holds_only_what_a_student_needs(built):
    assert {p.name for p in built.iterdir()} == TOP_LEVEL
    for folder in ("lessons", "labs", "trainkit"):
        # The course's files there (committed or new), without what git ignores (caches, run artefacts).
        listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z", folder],
                                cwd=ROOT, capture_output=True, text=True, check=True).stdout.split("\0")
        want = {Path(name) for name in listed if name and (ROOT / name).is_file()
                and not any(s.startswith(".") for s in Path(name).parts)}
        got = {p.relative_to(built) for p in (built / folder).rglob("*") if p.is_file()}
        assert got == want, f"{folder}/ differs from the course's: {sorted(map(str, got ^ want))}"
        for rel in want:
            assert (built / rel).read_bytes() == (ROOT / rel).read_bytes(), f"{rel} is not the course's file"
    # Only the check helpers the labs import: no grading pipeline, sandbox, guard, preprocessors or tooling.
    assert {p.name for p in (built / "autograder").iterdir()} == {"__init__.py", "checks.py"}
    names = {p.name for p in edition_files(built)}
    for instructor_only in ("nbgrader_config.py", "gradebook.db", "CONTRIBUTING.md", "grade.py", "sandbox.py",
                            "guard.py", "preprocessors.py", "release.py", "edition.py", "conftest.py"):
        assert instructor_only not in names, f"{instructor_only} is in the student edition"


def test_no_solution_hidden_test_or_catalogue_text_leaks(built):
    files = {p.relative_to(built).as_posix(): readable_text(p) for p in edition_files(built) if p.suffix != ".gz"}
    flat = {rel: "\n" + "\n".join(lines(text)) + "\n" for rel, text in files.items()}
    # 1. No marker at all, anywhere.
    for rel, text in files.items():
        for marker in edition.FORBIDDEN + ("BEGIN SOLUTION", "HIDDEN TESTS"):
            assert marker not in text, f"{rel} contains {marker!r}"
    # 2. No file of solutions/ or tests/ (by content).
    instructor = [p for d in ("solutions", "tests") for p in (ROOT / d).rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts]
    contents = {p.read_bytes() for p in instructor}
    for path in edition_files(built):
        assert path.read_bytes() not in contents, f"{path.relative_to(built)} is a copy of an instructor file"
    # 3. No reference answer and no hidden test of any source notebook, even re-indented, in any file.
    n_blocks = 0
    for source in sorted(ROOT.glob("solutions/*/*.ipynb")):
        secret, public = secret_blocks(source)
        for block in secret:
            body = "\n" + "\n".join(lines(block)) + "\n"
            # Two lines or more, or one long line: a short one-line answer is dictated by its spec and may
            # appear legitimately (a visible reference helper of the tests, trainkit's loop that a lab extends).
            if body.count("\n") < 3 and len(body.strip()) < 80:
                continue
            n_blocks += 1
            for rel, text in flat.items():
                assert body not in text, f"{rel} contains a reference answer or hidden test of {source.name}:\n{block}"
        # 4. The lab itself holds no line of them that the source notebook does not also show publicly.
        lab_lines = set(lines(files.get(f"labs/{source.parent.name}/{source.name}", "")))
        leaked = {line for block in secret for line in lines(block)
                  if len(line) >= 20 and line not in public and line in lab_lines}
        assert not leaked, f"labs/{source.parent.name}/{source.name} shows hidden lines: {sorted(leaked)}"
    assert n_blocks >= 5 * len(ASSIGNMENTS), "the leak check found too few reference answers to be meaningful"
    # 5. No implementation from the bug catalogue (buggy variants and the correct alternatives).
    for assignment in [p.stem for p in sorted((ROOT / "tests" / "catalogue").glob("*.py"))]:
        catalogue = load_catalogue(assignment)
        variants = [*getattr(catalogue, "BUGS", {}).values(), getattr(catalogue, "ALTERNATIVE", {}),
                    getattr(catalogue, "VISIBLE_ONLY", {})]
        for cells in variants:
            for source in cells.values():
                body = "\n" + "\n".join(lines(source)) + "\n"
                if body.count("\n") < 3:
                    continue
                for rel, text in flat.items():
                    assert body not in text, f"{rel} contains a catalogue implementation of {assignment}"


def test_archive_holds_the_same_files(built):
    with tarfile.open(built.with_name(built.name + ".tar.gz")) as tar:
        names = {m.name for m in tar.getmembers() if m.isfile()}
    assert names == {f"{built.name}/{p.relative_to(built).as_posix()}" for p in edition_files(built)}


def test_pins_are_the_course_pins(built):
    import tomllib

    from publish.edition import INSTRUCTOR_ONLY_PACKAGES, student_dependencies

    mine = tomllib.loads((built / "pyproject.toml").read_text())["project"]
    course = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = student_dependencies(course["dependencies"])   # the course's, less the grading machine's sandbox
    assert mine["dependencies"] == wanted and len(wanted) == len(course["dependencies"]) - len(INSTRUCTOR_ONLY_PACKAGES)
    assert mine["requires-python"] == course["requires-python"]
    pins = re.findall(r"^\s*-\s*([A-Za-z0-9_.\-]+==\S+)", (built / "environment.yml").read_text(), re.M)
    assert sorted(pins) == sorted(wanted), "environment.yml pins differ from pyproject.toml's"


def run_make(built: Path, *args: str) -> str:
    proc = subprocess.run(["make", "-C", str(built), *args], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_make_lab_builds_the_pinned_venv_and_starts_jupyterlab(built):
    dry = run_make(built, "-n", "lab", "PORT=8899")
    steps = [
        "-m venv .venv",                              # a virtual environment of its own
        ".venv/bin/python -m pip install --quiet -e .",  # from the pins in pyproject.toml
        "server extension enable --sys-prefix nbgrader.server_extensions.validate_assignment",
        "labextension enable --level=sys_prefix @jupyter/nbgrader",
        ".venv/bin/python -m trainkit.workspace sync",     # the student's own copies before JupyterLab starts
        ".venv/bin/jupyter lab --no-browser --ip=127.0.0.1 --port=8899",
    ]
    positions = [dry.find(step) for step in steps]
    assert -1 not in positions, f"`make -n lab` misses {steps[positions.index(-1)]!r}:\n{dry}"
    assert positions == sorted(positions), f"`make -n lab` runs its steps out of order:\n{dry}"
    assert "127.0.0.1:8899/lab" in dry, "the printed hint names another port than PORT"
    # wandb stays offline in everything make starts.
    env = run_make(built, "-s", "--eval", "show-wandb: ; @echo WANDB_MODE=$$WANDB_MODE", "show-wandb")
    assert env.strip() == "WANDB_MODE=offline"
    # A student's help: their commands, none of the instructor's.
    help_text = run_make(built, "-s", "help")
    for target in ("make lab", "make validate", "make reset-lab", "make exercises"):
        assert target in help_text
    for instructor in ("make labs", "make grade", "make test", "make normalize", "student-edition"):
        assert instructor not in help_text


# This venv has the course installed in editable mode: its import hook would find the instructor's trainkit
# and autograder modules that the edition lacks. A student's venv has only the edition: so that every Python
# started here (and the kernels nbgrader starts) sees only the edition, a sitecustomize drops that hook.
ISOLATE = """import sys
sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, "__module__", "").startswith("__editable__")]
"""


def edition_env(built: Path) -> dict[str, str]:
    isolate = built.parent / "isolate"
    isolate.mkdir(exist_ok=True)
    (isolate / "sitecustomize.py").write_text(ISOLATE)
    env = dict(os.environ, PYTHONPATH=f"{built}{os.pathsep}{isolate}", WANDB_MODE="offline")
    env.pop("TRAINKIT_STRICT_WARNINGS", None)
    return env


def test_every_lab_setup_cell_runs_from_the_edition_alone(built, tmp_path):
    """With only the edition on the path: each lab's locked setup cell (imports, seed, device) runs, trainkit
    and the check helpers come from the edition, and the instructor's grader cannot be imported."""
    setups = []
    for lab in sorted(built.glob("labs/*/*.ipynb")):
        cell = next(c for c in nbu.read(lab).cells if c.cell_type == "code")
        assert nbu.grade_id(cell) == "setup", f"{lab.name}: the first code cell is not the setup cell"
        setups.append(f"# {lab.name}\n{cell.source}")
    code = "\n".join(setups) + (
        "\nimport trainkit, trainkit.workspace, trainkit.checks\n"
        "print('FILES', trainkit.__file__, trainkit.checks.__file__)\n"
        "try:\n    import autograder.grade\n    print('GRADER importable')\n"
        "except ImportError:\n    print('GRADER absent')\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=edition_env(built),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout.splitlines()
    files = next(line for line in out if line.startswith("FILES ")).split()[1:]
    assert all(Path(f).is_relative_to(built) for f in files), f"imported from outside the edition: {files}"
    assert out[-1] == "GRADER absent", "the edition's autograder package must not reach the instructor's grader"


def test_a_lab_in_the_edition_validates(built):
    """A student's copy in my-work/: the solved exercises pass, the one left untouched fails with its own tests."""
    lab = "02_lr_schedules"
    source = nbu.read(next((ROOT / "solutions" / lab).glob("*.ipynb")))
    released = next((built / "labs" / lab).glob("*.ipynb"))
    answers = nbu.reference_answers(source)
    blank = next(iter(nbu.solution_cells(source)))            # the first exercise stays as released
    answers.pop(blank)
    copy = built / "my-work" / lab / released.name
    copy.parent.mkdir(parents=True)
    nbu.write_normalized(nbu.fill(nbu.read(released), answers), copy)
    try:
        proc = subprocess.run([sys.executable, "-m", "nbgrader", "validate", str(copy)], cwd=built,
                              env=edition_env(built), capture_output=True, text=True, timeout=600)
    finally:
        shutil.rmtree(built / "my-work")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    for crash in ("ModuleNotFoundError", "ImportError", "Traceback (most recent call last):\n  File"):
        assert crash not in out, out[-3000:]
    n_blank_tests = sum(1 for gid in nbu.graded_test_cells(source) if nbu.exercise_of(gid) == blank)
    # nbgrader reports the solution cell of the blank exercise and each of its test cells.
    failed = re.search(r"VALIDATION FAILED ON (\d+) CELL", out)
    assert failed, f"the copy with exercise {blank!r} untouched should fail validation:\n{out[-3000:]}"
    assert int(failed[1]) == n_blank_tests, f"expected exactly {blank!r}'s {n_blank_tests} test cells to fail:\n{out[-4000:]}"
    assert "NotImplementedError" in out


def test_rebuild_keeps_git_and_refuses_a_foreign_folder(tmp_path):
    built = edition.build(tmp_path / "student-edition", refuse_leaks=False)   # leaks: the tests above
    (built / ".git").mkdir(exist_ok=True)
    (built / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (built / "stale.txt").write_text("from an older edition")
    edition.build(built, refuse_leaks=False)
    assert (built / ".git" / "HEAD").is_file() and not (built / "stale.txt").exists()
    foreign = tmp_path / "someone-elses"
    foreign.mkdir()
    (foreign / "thesis.tex").write_text("precious")
    with pytest.raises(SystemExit, match="not a student edition"):
        edition.build(foreign, refuse_leaks=False)
    assert (foreign / "thesis.tex").read_text() == "precious"


def test_contents_table_lists_every_topic():
    table = edition.contents_table()
    for lesson in ROOT.glob("lessons/*_lesson.ipynb"):
        assert f"lessons/{lesson.name}" in table
    for lab in ROOT.glob("labs/*/*.ipynb"):
        assert f"my-work/{lab.parent.name}/{lab.name}" in table


def small_course(course: Path, labs: list[str]) -> Path:
    """A course folder with the given labs and their solutions, the lessons, trainkit and the check helpers."""
    for folder in ("lessons", "trainkit"):
        shutil.copytree(ROOT / folder, course / folder, ignore=shutil.ignore_patterns("__pycache__"))
    for lab in labs:
        shutil.copytree(ROOT / "labs" / lab, course / "labs" / lab)
        shutil.copytree(ROOT / "solutions" / lab, course / "solutions" / lab)
    (course / "autograder").mkdir()
    shutil.copy(ROOT / "autograder" / "checks.py", course / "autograder")
    for name in ("pyproject.toml", "environment.yml"):
        shutil.copy(ROOT / name, course)
    return course


def test_the_builder_refuses_to_publish_a_leak(tmp_path):
    lab = sorted(p.name for p in (ROOT / "labs").iterdir() if p.is_dir())[0]
    course = small_course(tmp_path / "course", [lab])
    out = edition.build(tmp_path / "student-edition", root=course)     # clean: builds
    assert (out / "labs" / lab).is_dir()
    secret, _ = secret_blocks(next((course / "solutions" / lab).glob("*.ipynb")))
    answer = max(secret, key=len)
    (course / "trainkit" / "helpers.py").write_text("def handy():\n" + textwrap.indent(answer, "    "))
    with pytest.raises(SystemExit, match="(?s)NOT built.*trainkit/helpers.py"):
        edition.build(out, root=course)
    assert not (out / "labs").exists() and not (out / "trainkit").exists(), "a refused edition leaves nothing to publish"


def git(cwd: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "init.defaultBranch=main",
                           *args], cwd=cwd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_a_student_updates_with_git_pull_and_keeps_their_work(tmp_path, capsys):
    """The instructor publishes the edition as a repository, the student clones it and works; the instructor
    publishes a fixed lab and a new one; the student's `git pull` and `make lab` keep every edit."""
    from trainkit import workspace

    labs = sorted(p.name for p in (ROOT / "labs").iterdir() if p.is_dir())
    course = small_course(tmp_path / "course", labs[:2])   # two labs now, a third one later

    published = tmp_path / "course-student"
    edition.build(published, root=course)
    git(published, "init", "-q")
    git(published, "add", "-A")
    git(published, "commit", "-qm", "first edition")
    git(tmp_path, "clone", "-q", str(published), "student")
    student = tmp_path / "student"
    workspace.sync(student)
    mine = student / "my-work" / labs[0] / f"{labs[0]}.ipynb"
    nb = json.loads(mine.read_text())
    nb["cells"].append({"cell_type": "markdown", "id": "mine", "metadata": {}, "source": "my notes: an hour of work"})
    mine.write_text(json.dumps(nb, indent=1))
    work = mine.read_bytes()
    assert git(student, "status", "--porcelain") == "", "a student's copies must not show up as changes to the course"

    # The instructor fixes lab 1, adds lab 3, and publishes again into the same repository.
    released = course / "labs" / labs[0] / f"{labs[0]}.ipynb"
    nb = json.loads(released.read_text())
    nb["cells"][0]["source"] = "".join(nb["cells"][0]["source"]) + "\n\n(fixed)"
    released.write_text(json.dumps(nb, indent=1))
    shutil.copytree(ROOT / "labs" / labs[2], course / "labs" / labs[2])
    edition.build(published, root=course)
    git(published, "add", "-A")
    git(published, "commit", "-qm", "second edition")

    git(student, "pull", "-q", "--ff-only")
    capsys.readouterr()
    made = workspace.sync(student)
    out = capsys.readouterr().out
    assert mine.read_bytes() == work, "updating the course changed the student's copy"
    assert [p.parts[1] for p in made] == [labs[2]], "the new lab is copied into my-work/"
    assert "(fixed)" in (student / "labs" / labs[0] / f"{labs[0]}.ipynb").read_text()
    assert f"make reset-lab LAB={labs[0]}" in out, out
