"""nbgrader's exchange, end to end, as different local users would use it, with nbgrader's own commands.

An instructor account and two student accounts are created for the test (useradd; the test needs root and
skips, saying why, without it). In a scratch course (the config, one lab's source and release notebooks)
and a scratch exchange folder (world-writable, sticky bit, as `make install` creates the course's own):

    instructor  nbgrader release_assignment
    student     nbgrader fetch_assignment   -> ~/training-infra/<lab>/ (their own copy, owned by them)
    student     edits the notebook (one exercise and the written question answered), nbgrader submit
    another     forges a submission in the student's name (dated 2030); the student makes one dated tomorrow
    instructor  nbgrader collect (refuses both, collects the genuine one, fails saying so: autograder/collect.py),
                `python -m autograder.grade` (make grade's CLI: sandboxed with no root, the
                student's code cannot read the instructor's solutions), release_feedback
    student     nbgrader fetch_feedback     -> the feedback HTML with their score, the written answer
                                               marked as awaiting grading

Each command runs as its user (runuser) with that user's HOME. Nothing of the course copy's labs/ or
solutions/ may change on the way.
"""
from __future__ import annotations

import datetime
import hashlib
import os
import pwd
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import nbformat
import pytest

from autograder import notebooks as nbu
from course import FASTEST_LAB, ROOT, light_release, light_source, notebook_name, place_light_lab

LAB = FASTEST_LAB
COURSE_ID = "training-infra"

# Runs as root in a private mount namespace before switching user. Where a folder the test users need (the Python
# interpreter, the virtual environment, the checkout itself) lies under a folder other users cannot enter (a pyenv
# build in /root, a checkout in a 0700 `mktemp -d` folder), that blocked folder is covered by an empty, enterable
# one into which only the folder on the way is put back. Arguments: the number N of pairs, N pairs (blocked folder,
# its child on the way), outermost first, then the command. Every child is opened before anything is covered.
REACH = r'''
set -eu
n=$1; shift
blocked=() child=() fds=()
for ((i = 0; i < n; i++)); do
  blocked+=("$1") child+=("$2"); shift 2
  exec {fd}<"${child[i]}"; fds+=("$fd")
done
declare -A covered
for ((i = 0; i < n; i++)); do
  if [ -z "${covered[${blocked[i]}]:-}" ]; then
    mount -t tmpfs -o mode=755 tmpfs "${blocked[i]}"; covered[${blocked[i]}]=1
  fi
  mkdir -p "${child[i]}"
  mount --no-canonicalize --bind "/proc/self/fd/${fds[i]}" "${child[i]}"
done
for fd in "${fds[@]}"; do exec {fd}<&-; done
exec "$@"
'''


def blocked_ancestors(path: Path) -> list[tuple[Path, Path]]:
    """Every ancestor of ``path`` that others cannot enter, outermost first, each with its child on the way."""
    parts = path.parts
    pairs = []
    for i in range(1, len(parts) - 1):
        folder = Path(*parts[: i + 1])
        if not folder.stat().st_mode & stat.S_IXOTH:
            pairs.append((folder, Path(*parts[: i + 2])))
    return pairs


def folders_to_reach() -> list[tuple[Path, Path]]:
    """The (blocked folder, child) pairs that keep the interpreter, the venv and the checkout reachable."""
    needed = [Path(os.path.realpath(sys.executable)).parent, Path(sys.prefix).resolve(), ROOT.resolve()]
    pairs = {pair for path in needed for pair in blocked_ancestors(path)}
    return sorted(pairs, key=lambda pair: (len(pair[0].parts), str(pair[1])))


def reachable(cmd: list[str]) -> list[str]:
    """``cmd`` (run as root) in a private mount namespace where the interpreter, the venv and the checkout are
    reachable by every account (REACH), when a folder on the way is closed to them; ``cmd`` itself otherwise."""
    blocked = folders_to_reach()
    if not blocked:
        return cmd
    return ["unshare", "--mount", "--propagation", "private", "bash", "-c", REACH, "reach",
            str(len(blocked)), *[str(p) for pair in blocked for p in pair], *cmd]


class Users:
    """Throw-away local accounts, removed afterwards."""

    def __init__(self, base: Path):
        self.base = base
        self.names: list[str] = []

    def add(self, role: str) -> tuple[str, Path]:
        name = f"nbx{role[:4]}{uuid.uuid4().hex[:6]}"
        home = self.base / name
        subprocess.run(["useradd", "--create-home", "--home-dir", str(home), "--shell", "/bin/sh",
                        "--user-group", name], check=True, capture_output=True)
        self.names.append(name)
        return name, home

    def attempt(self, user: str, home: Path, cwd: Path, *cmd: str) -> subprocess.CompletedProcess:
        """``cmd`` as ``user``, with that user's HOME and nothing else of root's environment."""
        env = {"HOME": str(home), "USER": user, "LOGNAME": user, "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
               "WANDB_MODE": "offline", "OMP_NUM_THREADS": "1", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}
        full = reachable(["runuser", "-u", user, "--", "env", "-i", *[f"{k}={v}" for k, v in env.items()], *cmd])
        return subprocess.run(full, cwd=cwd, capture_output=True, text=True, timeout=300)

    def run(self, user: str, home: Path, cwd: Path, *cmd: str) -> subprocess.CompletedProcess:
        proc = self.attempt(user, home, cwd, *cmd)
        assert proc.returncode == 0, f"`{' '.join(cmd[2:] if cmd[:2] == (sys.executable, '-m') else cmd)}` as " \
                                     f"{user} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        return proc

    def nbgrader(self, user: str, home: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
        return self.run(user, home, cwd, sys.executable, "-m", "nbgrader", *args)

    def remove(self) -> None:
        for name in self.names:
            subprocess.run(["userdel", name], capture_output=True)


def tree_digest(folder: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(folder)).encode() + p.read_bytes())
    return h.hexdigest()


def owner(path: Path) -> str:
    return pwd.getpwuid(path.stat().st_uid).pw_name


@pytest.fixture(scope="module")
def two_users():
    if os.geteuid() != 0:
        pytest.skip("the exchange round trip creates two local users: it needs root")
    for tool in ("useradd", "userdel", "runuser", "unshare"):
        if shutil.which(tool) is None:
            pytest.skip(f"the exchange round trip needs `{tool}`, which is not installed")
    for folder in (Path(sys.prefix).resolve(), ROOT.resolve()):
        if not folder.stat().st_mode & stat.S_IXOTH:   # a covered ancestor can be put back, the folder itself not
            pytest.skip(f"the test users must enter {folder}, whose own mode is {stat.filemode(folder.stat().st_mode)}: "
                        f"`chmod o+x {folder}` (its parents may stay private)")
    base = Path(tempfile.mkdtemp(prefix="nbgrader-exchange-"))
    base.chmod(0o755)
    users = Users(base)
    try:
        yield base, users
    finally:
        users.remove()
        shutil.rmtree(base, ignore_errors=True)


def test_release_fetch_submit_collect_grade_feedback_round_trip(two_users):
    base, users = two_users
    instructor, instructor_home = users.add("inst")
    student, student_home = users.add("stud")

    # The exchange, as `make install` makes the course's: world-writable with the sticky bit.
    exchange = base / "exchange"
    exchange.mkdir()
    exchange.chmod(0o1777)
    # The instructor's course: the config (pointed at this exchange), one lab's source and release notebooks.
    course = instructor_home / "course"
    (course / "solutions").mkdir(parents=True)
    (course / "labs").mkdir()
    place_light_lab(course)
    config = (ROOT / "nbgrader_config.py").read_text(encoding="utf-8")
    (course / "nbgrader_config.py").write_text(config + f"\nc.Exchange.root = {str(exchange)!r}\n", encoding="utf-8")
    subprocess.run(["chown", "-R", f"{instructor}:{instructor}", str(course)], check=True)
    # The student's nbgrader config names the course and the exchange (docs/instructors.md).
    (student_home / "nbgrader_config.py").write_text(
        "c = get_config()  # noqa: F821\n"
        f"c.CourseDirectory.course_id = {COURSE_ID!r}\n"
        f"c.Exchange.root = {str(exchange)!r}\n"
        "c.Exchange.path_includes_course = True\n", encoding="utf-8")
    # What the student will type in: an answer to the first exercise and to the written question, nothing else.
    source, release = light_source(), light_release()
    reference = nbu.reference_answers(source)
    first = next(iter(reference))
    written = next(g for g, c in nbu.solution_cells(source).items() if c.cell_type == "markdown")
    edited = base / "edited.ipynb"
    # The student's answer also tries to read the instructor's reference solution (the grader's account can).
    solution = course / "solutions" / LAB / notebook_name(LAB)
    probe = (f"try:\n    open({str(solution)!r}).read()\n    print('SOLUTIONS-' + 'LEAKED')\n"
             f"except OSError:\n    print('SOLUTIONS-' + 'HIDDEN')\n")
    nbformat.write(nbu.fill(release, {first: probe + reference[first], written: "Because of the default init."}),
                   str(edited))
    edited.chmod(0o644)

    # instructor: release
    labs_before, solutions_before = tree_digest(course / "labs"), tree_digest(course / "solutions")
    users.nbgrader(instructor, instructor_home, course, "release_assignment", LAB)

    # student: fetch into their own folder, edit, submit
    proc = users.nbgrader(student, student_home, student_home, "fetch_assignment", LAB)
    fetched = student_home / COURSE_ID / LAB / notebook_name(LAB)
    assert fetched.is_file(), f"fetch_assignment did not put the lab in {fetched.parent}:\n{proc.stderr}"
    assert owner(fetched) == student, "the fetched copy must belong to the student"
    assert [c.source for c in nbu.read(fetched).cells] == [c.source for c in nbu.read(course / "labs" / LAB / fetched.name).cells]
    users.run(student, student_home, student_home, "cp", str(edited), str(fetched))
    users.nbgrader(student, student_home, student_home, "submit", LAB)

    # A second student forges a submission in this one's name (a blank notebook dated 2030, which nbgrader's own
    # collect would take as her latest until then), and she herself makes one dated tomorrow. Collect refuses both:
    # it collects her real one, keeps them aside and fails saying why; grading and feedback below are hers.
    forger, forger_home = users.add("forg")
    inbound = exchange / COURSE_ID / "inbound"
    (genuine,) = inbound.iterdir()
    blank = base / "blank.ipynb"
    nbformat.write(release, str(blank))
    blank.chmod(0o644)
    plant = 'mkdir "$1" && cp "$2" "$1/$3" && echo "$4" > "$1/timestamp.txt"'
    tomorrow = stamp(datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=1))
    forged, ahead = (f"{student}+{LAB}+{when}+{tag}" for when, tag in (("2030-01-01 00:00:00.000000 UTC", "x"),
                                                                        (tomorrow, "y")))
    users.run(forger, forger_home, forger_home, "sh", "-c", plant, "plant", str(inbound / forged), str(blank),
              fetched.name, "2030-01-01 00:00:00.000000 UTC")
    users.run(student, student_home, student_home, "sh", "-c", plant, "plant", str(inbound / ahead), str(fetched),
              fetched.name, tomorrow)

    # instructor: collect, grade with the course's grader, release the feedback
    proc = users.attempt(instructor, instructor_home, course, sys.executable, "-m", "nbgrader", "collect", LAB)
    said = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 1 and "Collected 1 submission(s)" in said and "Refused 2 new folder(s)" in said, said
    assert any("ERROR" in line and forged in line and f"made by account '{forger}'" in line and f"{student}'s" in line
               for line in proc.stderr.splitlines()), proc.stderr
    collected = course / "submitted" / student / LAB / fetched.name
    assert collected.is_file(), "collect did not put the submission where make grade looks for it"
    assert sorted(os.listdir(course / "submitted")) == [student]
    assert any(probe in c.source for c in nbu.read(collected).cells), "collect took the blank, not her work"
    assert (collected.parent / "timestamp.txt").read_text() == (genuine / "timestamp.txt").read_text()
    for name, made_by, why in ((forged, forger, f"it was not made by {student}'s account"), (ahead, student, "in the future")):
        note = (course / "refused" / f"{name}.txt").read_text(encoding="utf-8")
        assert f"made by account '{made_by}'" in note and why in note, note
        assert (course / "refused" / name / fetched.name).is_file() and (inbound / name).is_dir()
    proc = users.run(instructor, instructor_home, course, sys.executable, "-m", "autograder.grade",
                     "--course-dir", str(course), "--assignment", LAB, "--jobs", "1")
    row = next((ln for ln in proc.stdout.splitlines() if ln.startswith(student)), "")
    assert row, proc.stdout
    # Graded in the sandbox by an ordinary account: the student's code saw no solutions, and what grading wrote
    # belongs to the instructor (nbgrader's Formgrader, run as the instructor, can still write it).
    assert "without isolation" not in proc.stdout + proc.stderr, proc.stdout
    log = (course / "autograded" / "_logs" / f"autograde_{student}_{LAB}.log").read_text(encoding="utf-8")
    assert log.startswith(f"[autograde {LAB} --student {student}, sandboxed]"), log[:300]
    graded_nb = course / "autograded" / student / LAB / fetched.name
    outputs = graded_nb.read_text(encoding="utf-8")
    assert "SOLUTIONS-HIDDEN" in outputs and "SOLUTIONS-LEAKED" not in outputs, \
        "the student's code, graded as the instructor's account, could read the instructor's solutions"
    written_by_grading = [p for d in ("autograded", "feedback", "grades") for p in (course / d).rglob("*")]
    assert written_by_grading and {owner(p) for p in written_by_grading} == {instructor}, \
        {str(p): owner(p) for p in written_by_grading if owner(p) != instructor}
    assert owner(course / "gradebook.db") == instructor
    users.nbgrader(instructor, instructor_home, course, "release_feedback", LAB)

    # student: fetch the feedback and see the score
    users.nbgrader(student, student_home, student_home, "fetch_feedback", LAB)
    feedback = sorted((student_home / COURSE_ID / LAB / "feedback").glob("*/*.html"))
    assert feedback, f"fetch_feedback brought nothing into {student_home / COURSE_ID / LAB}"
    html = feedback[-1].read_text(encoding="utf-8")

    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        assert [s.id for s in gb.students] == [student], "the forged submission reached the gradebook"
        sub = gb.find_submission(LAB, student)
        got, out_of, pending = sub.score, sub.max_score, sub.needs_manual_grade
        exercise = sum(g.score for nb in sub.notebooks for g in nb.grades
                       if g.name.startswith("test_") and nbu.exercise_of(g.name) == first)
        exercise_max = sum(g.max_score for nb in sub.notebooks for g in nb.grades
                       if g.name.startswith("test_") and nbu.exercise_of(g.name) == first)
    assert exercise == exercise_max > 0 and 0 < got < out_of, \
        f"one exercise answered should earn its points ({exercise}/{exercise_max}) and only those ({got}/{out_of})"
    assert re.search(rf"Score:\s*{got:g}\s*/\s*{out_of:g}\b", html), \
        f"the student's feedback should show their score {got:g} / {out_of:g}"
    assert pending and "awaiting grading" in html, "the written answer should show as awaiting grading"
    assert f"{got:g} / " in row and "pending" in row, f"make grade's table should show the score and pending: {row}"
    # nothing of the instructor's course was overwritten by the round trip
    assert tree_digest(course / "labs") == labs_before and tree_digest(course / "solutions") == solutions_before


def stamp(when: datetime.datetime) -> str:
    """A timestamp as nbgrader submit writes it (its default format, in UTC)."""
    return f"{when:%Y-%m-%d %H:%M:%S.%f} UTC"


def test_collect_refuses_a_name_without_an_account_a_future_timestamp_and_a_link(tmp_path):
    """No root needed: the account running the test plays the student. The course's own config and the Formgrader's
    collect (nbgrader's API, as its Collect button calls it): what is refused is neither collected nor hidden."""
    from nbgrader.apps import NbGraderAPI
    from traitlets.config.loader import PyFileConfigLoader

    me = pwd.getpwuid(os.geteuid()).pw_name
    inbound = tmp_path / "exchange" / COURSE_ID / "inbound"
    inbound.mkdir(parents=True)
    course = tmp_path / "course"
    secret = tmp_path / "solution.ipynb"   # what a link in a submission would have collect copy as the student's
    secret.write_text("SOLUTION", encoding="utf-8")
    now = datetime.datetime.now(datetime.timezone.utc)

    def submission(student: str, when: datetime.datetime, text: str, tag: str) -> str:
        folder = inbound / f"{student}+{LAB}+{stamp(when)}+{tag}"
        (folder / "nb").mkdir(parents=True)
        (folder / "timestamp.txt").write_text(stamp(when), encoding="utf-8")
        if text == "link":
            (folder / "nb" / "lab.ipynb").symlink_to(secret)
        else:
            (folder / "nb" / "lab.ipynb").write_text(text, encoding="utf-8")
        return folder.name

    submission(me, now - datetime.timedelta(minutes=2), "GENUINE", "a")
    ahead = submission(me, now + datetime.timedelta(days=1), "TOMORROW", "b")
    linked = submission(me, now - datetime.timedelta(minutes=1), "link", "c")
    nameless = submission("nbx-no-such-account", now - datetime.timedelta(minutes=1), "FORGED", "d")
    # Written by hand after the deadline, dated before it to look on time: the folder itself is newer than its claim.
    backdated = submission(me, now - datetime.timedelta(hours=2), "BACKDATED", "e")

    def collect(**extra) -> dict:
        config = PyFileConfigLoader("nbgrader_config.py", path=str(ROOT)).load_config()
        config.CourseDirectory.root = str(course)
        config.CourseDirectory.db_url = f"sqlite:///{tmp_path / 'gradebook.db'}"
        config.Exchange.root = str(tmp_path / "exchange")
        for key, value in extra.items():
            setattr(config.OwnerCheckedCollect, key, value)
        return NbGraderAPI(config=config).collect(LAB)

    result = collect()
    message = " ".join(result.get("error", "").split())
    assert not result["success"] and "Collected 1 submission(s)" in message and "Refused 4 new folder(s)" in message, \
        result
    assert (course / "submitted" / me / LAB / "nb" / "lab.ipynb").read_text(encoding="utf-8") == "GENUINE"
    assert sorted(os.listdir(course / "submitted")) == [me]
    notes = {name: (course / "refused" / f"{name}.txt").read_text(encoding="utf-8")
             for name in (ahead, linked, nameless, backdated)}
    assert "is in the future" in notes[ahead] and "neither a plain file nor a folder" in notes[linked] \
        and "no account here is named 'nbx-no-such-account'" in notes[nameless], notes
    assert "is earlier than the folder itself" in notes[backdated], notes[backdated]
    assert (course / "refused" / linked / "nb" / "lab.ipynb").is_symlink(), "kept aside, a link stays a link"
    assert all((inbound / name).is_dir() for name in notes), "refused folders stay in the exchange"
    log = result.get("log", "")
    assert sum(line.startswith("[ERROR] Refused") for line in log.splitlines()) == 4, log

    # An exchange without an account per student opts out, explicitly: the account's own folders are then taken.
    # The two still refused were told at the first collect: a warning now, not a failed collect every time.
    result = collect(accept_own_folders=True)
    again = [line for line in result.get("log", "").splitlines() if "Refused again" in line]
    assert result["success"] and len(again) == 3, result
    assert (course / "submitted" / "nbx-no-such-account" / LAB / "nb" / "lab.ipynb").read_text(encoding="utf-8") == "FORGED"


def test_collect_takes_the_last_submission_on_time_when_the_course_file_says_so(tmp_path):
    """term.toml's final = "last_on_time": the instructor's collect takes each student's last submission made by their
    own deadline (an extension moves it), replacing a newer one collected before; grade on submit takes the latest."""
    from nbgrader.apps import NbGraderAPI
    from traitlets.config.loader import PyFileConfigLoader

    me = pwd.getpwuid(os.geteuid()).pw_name
    inbound = tmp_path / "exchange" / COURSE_ID / "inbound"
    inbound.mkdir(parents=True)
    course = tmp_path / "course"
    (course / "solutions" / LAB).mkdir(parents=True)
    # Times within minutes of now: a folder dated earlier than it was made is refused (the previous test).
    due = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0) + datetime.timedelta(minutes=2)
    for minutes, text in ((-4, "EARLY"), (-1, "ON TIME"), (2, "LATE")):
        when = due + datetime.timedelta(minutes=minutes)
        folder = inbound / f"{me}+{LAB}+{stamp(when)}+{text.replace(' ', '')}"
        (folder / "nb").mkdir(parents=True)
        (folder / "timestamp.txt").write_text(stamp(when), encoding="utf-8")
        (folder / "nb" / "lab.ipynb").write_text(text, encoding="utf-8")
    term = f'version = 1\n[policy]\nfinal = "last_on_time"\n[labs]\n{LAB} = {due:%Y-%m-%dT%H:%M:%SZ}\n'

    def collect(text: str, **extra) -> str:
        (course / "term.toml").write_text(text, encoding="utf-8")
        config = PyFileConfigLoader("nbgrader_config.py", path=str(ROOT)).load_config()
        config.CourseDirectory.root = str(course)
        config.CourseDirectory.db_url = f"sqlite:///{tmp_path / 'gradebook.db'}"
        config.Exchange.root = str(tmp_path / "exchange")
        for key, value in {"accept_own_folders": True, **extra}.items():
            setattr(config.OwnerCheckedCollect, key, value)
        assert NbGraderAPI(config=config).collect(LAB)["success"]
        return (course / "submitted" / me / LAB / "nb" / "lab.ipynb").read_text(encoding="utf-8")

    assert collect(term, take_latest=True) == "LATE", "grade on submit collects the one just made"
    assert collect(term) == "ON TIME", "the course file's rule replaces the newer one collected before"
    extended = term + f'[[extension]]\nstudent = "{me}"\nlab = "{LAB}"\nhours = 1\n'
    assert collect(extended) == "LATE", "on time by the student's own extension"
    assert collect(term.replace("last_on_time", "latest")) == "LATE", "nbgrader's rule: the latest"
