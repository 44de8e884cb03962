"""Student work is never overwritten: own copies in my-work/ (trainkit/workspace.py), and an instructor's
`make labs` that stops rather than overwrite a released notebook a person changed (publish/release.py)."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from autograder import notebooks as nbu
from publish import release
from trainkit import workspace

ROOT = Path(__file__).resolve().parents[1]
LABS = sorted(p.name for p in (ROOT / "labs").iterdir() if p.is_dir())


def released(root: Path, lab: str) -> Path:
    (nb,) = sorted((root / "labs" / lab).glob("*.ipynb"))
    return nb


def student_edit(path: Path, exercise: str, text: str) -> None:
    """Type ``text`` into the answer cell ``exercise`` of the notebook at ``path``, as a student would."""
    nb = json.loads(path.read_text())
    cell = next(c for c in nb["cells"] if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == exercise)
    cell["source"] = text
    path.write_text(json.dumps(nb, indent=1) + "\n")


def answer(path: Path, exercise: str) -> str:
    nb = json.loads(path.read_text())
    cell = next(c for c in nb["cells"] if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == exercise)
    return "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]


@pytest.fixture
def course(tmp_path) -> Path:
    """A course folder with the first two released labs (the third arrives later, as a course update)."""
    for lab in LABS[:2]:
        shutil.copytree(ROOT / "labs" / lab, tmp_path / "labs" / lab)
    return tmp_path


def test_sync_copies_new_labs_and_never_overwrites_a_copy(course, capsys):
    first, second = LABS[:2]
    made = workspace.sync(course)
    assert sorted(p.parts[1] for p in made) == [first, second]
    mine = course / "my-work" / first / released(course, first).name
    assert mine.read_bytes() == released(course, first).read_bytes()
    exercise = workspace.exercises(course, first)[0]
    student_edit(mine, exercise, "def my_answer():\n    return 42  # a student's work")
    work = mine.read_bytes()

    # The course updates: the released lab changes, and a new lab arrives.
    student_edit(released(course, first), exercise, "# YOUR CODE HERE\nraise NotImplementedError()  # fixed typo")
    shutil.copytree(ROOT / "labs" / LABS[2], course / "labs" / LABS[2])
    capsys.readouterr()
    made = workspace.sync(course)
    out = capsys.readouterr().out
    assert [p.parts[1] for p in made] == [LABS[2]], "only the new lab is copied"
    assert mine.read_bytes() == work, "sync wrote to a student's copy"
    assert f"updated by the course: labs/{first}/" in out and f"make reset-lab LAB={first}" in out, out
    assert workspace.sync(course) == [] and mine.read_bytes() == work


def test_reset_one_exercise_keeps_the_rest_and_a_backup(course):
    lab = LABS[0]
    workspace.sync(course)
    mine = course / "my-work" / lab / released(course, lab).name
    first, second = workspace.exercises(course, lab)[:2]
    student_edit(mine, first, "def first(): return 'mine, wrong'")
    student_edit(mine, second, "def second(): return 'mine, right'")
    before = mine.read_bytes()
    backup = course / workspace.reset(course, lab[:2], first)   # "01" names the lab too
    assert backup.read_bytes() == before, "the backup is the copy as it was"
    assert backup.parent == course / "my-work" / "backups" / lab
    assert answer(mine, first) == answer(released(course, lab), first), "the exercise is back to its starting text"
    assert answer(mine, second) == "def second(): return 'mine, right'", "the other exercises are untouched"
    with pytest.raises(SystemExit, match="no exercise 'nope'"):
        workspace.reset(course, lab, "nope")
    assert answer(mine, second) == "def second(): return 'mine, right'"


def test_reset_whole_lab_moves_the_copy_to_backups(course):
    lab = LABS[1]
    workspace.sync(course)
    mine = course / "my-work" / lab / released(course, lab).name
    student_edit(mine, workspace.exercises(course, lab)[0], "x = 1")
    before = mine.read_bytes()
    backups = [course / workspace.reset(course, lab) for _ in range(2)]   # twice in the same second: two backups
    assert backups[0] != backups[1] and backups[0].read_bytes() == before
    assert mine.read_bytes() == released(course, lab).read_bytes()


def git(course: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args], cwd=course,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_make_labs_refuses_to_overwrite_hand_edits(tmp_path, capsys):
    lab = "02_lr_schedules"   # one assignment keeps it fast (each nbgrader generate_assignment takes seconds)
    course = tmp_path / "course"
    (course / "solutions").mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copytree(ROOT / "solutions" / lab, course / "solutions" / lab)
    shutil.copytree(ROOT / "labs" / lab, course / "labs" / lab)
    (course / ".gitignore").write_text((ROOT / ".gitignore").read_text())
    git(course, "init", "-q")
    git(course, "add", "-A")
    git(course, "commit", "-qm", "course")
    assert release.hand_edited(course) == [], "a committed, unchanged labs/ is safe to regenerate"

    # A student filled in the released lab in place: `make labs` stops and names it.
    nb_path = released(course, lab)
    rel = nb_path.relative_to(course)
    exercise = next(iter(nbu.solution_cells(nbu.read(nb_path))))
    student_edit(nb_path, exercise, "def mine(): return 'an hour of work'")
    work = nb_path.read_bytes()
    capsys.readouterr()
    assert release.main(["--course-dir", str(course)]) == 2
    err = capsys.readouterr().err
    assert nb_path.read_bytes() == work, "make labs overwrote a hand-edited notebook"
    assert f"  {rel.as_posix()}" in err and "FORCE=1" in err and "my-work/" in err, err

    # The instructor edits the source and overwrites the hand edit with FORCE=1: labs/ is the generator's output.
    source = next((course / "solutions" / lab).glob("*.ipynb"))
    nb = nbu.read(source)
    first_md = next(c for c in nb.cells if c.cell_type == "markdown")
    first_md.source += "\n\nUpdated by the instructor."
    nbu.write_normalized(nb, source)
    assert release.main(["--course-dir", str(course), "--force"]) == 0
    assert "Updated by the instructor." in nb_path.read_text() and "an hour of work" not in nb_path.read_text()
    # labs/ now differs from the commit but is what the last `make labs` wrote (.labs_generated.json): safe,
    # so the next `make labs` goes through without a check that generates anything.
    assert "labs/" in git(course, "status", "--porcelain")
    assert release.hand_edited(course) == []


def make_dry(*args: str) -> str:
    proc = subprocess.run(["make", "-n", "-C", str(ROOT), *args], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_makefile_routes_students_to_their_copies_and_guards_labs():
    assert "-m trainkit.workspace sync" in make_dry("lab", "PORT=8899")
    assert "--port=8899" in make_dry("lab", "PORT=8899")
    assert "-m trainkit.workspace reset 03 clip_grad_norm" in make_dry("reset-lab", "LAB=03", "EXERCISE=clip_grad_norm")
    labs = make_dry("labs")
    assert "-m publish.release" in labs and "--force" not in labs and "generate_assignment" not in labs
    assert "-m publish.release --force" in make_dry("labs", "FORCE=1")
    help_text = subprocess.run(["make", "-s", "-C", str(ROOT), "help"], capture_output=True, text=True).stdout
    student_part, _, instructor_part = help_text.partition("For instructors")
    assert "make lab " in student_part and "make reset-lab" in student_part and "make validate" in student_part
    for target in ("make labs", "make grade", "make normalize", "make student-edition"):
        assert target in instructor_part and target not in student_part, f"`make help` must list {target} as an instructor command"
    assert "my-work/" in (ROOT / ".gitignore").read_text().split()
