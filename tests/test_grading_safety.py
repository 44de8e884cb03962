"""Grading a class safely: hostile and careless submissions, graded in parallel, each with its expected outcome.

One grading run of the light edition (course.light) of the fastest lab (course.FASTEST_LAB) holds the whole catalogue
below, graded with `make grade`'s CLI, two submissions at a time, in a course folder outside /tmp (the sandbox hides all
of /tmp, which would make "the solutions are hidden" trivially true). For each submission: the score it must get, and
that nothing else was harmed (the other submissions' scores, the gradebook, the course folder, the grading machine).
Then regrading: idempotent, parallel == sequential, a resubmission replaces the old grade, and a manual grade
survives a regrade while the written answer is unchanged.
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from autograder import notebooks as nbu
from autograder import sandbox
from course import (FASTEST_LAB, cell_scores, first_bug, light_release, light_source, make_course, run_grade,
                    submit)

ASSIGNMENT = FASTEST_LAB
CELL_TIMEOUT = 15  # seconds before a cell that hangs is interrupted (it then scores 0)
HIDDEN_MARK, LEAK_MARK = "SOLUTIONS-HIDDEN", "SOLUTIONS-LEAKED"
# Secrets planted where the grading account keeps its own (its environment, its Jupyter runtime folder in its home,
# a file beside the course): the snooping submission looks everywhere it can and prints what it finds.
PLANTED = "planted-secret"
SNOOP = f'''
import os, stat, sys
_found = set()
def _look(text):
    if {PLANTED!r} in text:
        _found.add(text[text.index({PLANTED!r}):][:40])
for _key, _value in os.environ.items():
    _look(_key + "=" + _value)
_seen = 0
_skip = ("/usr", "/sys", "/dev", "/proc/sys", sys.prefix, sys.base_prefix)   # programs, and what may block
for _folder, _dirs, _files in os.walk("/"):
    if _folder.startswith(_skip) or _seen > 20000:
        _dirs[:] = []
        continue
    for _name in _files:
        _path = os.path.join(_folder, _name)
        try:
            if not stat.S_ISREG(os.stat(_path).st_mode):
                continue
            _seen += 1
            with open(_path, "rb") as _f:
                _look(_f.read(1 << 20).decode("latin-1"))
        except OSError:
            pass
print("SNOOPED", _seen, "files, found:", sorted(_found))
'''
# Fills what the kernel may write: its /tmp (which holds its home and working folder) until the sandbox's size limit
# refuses, then leaves a file beside the notebook (never copied back into the course).
FILL_TMP = """
import os
def _fill(path, most=3 * 2**30):
    n = 0
    try:
        with open(path, "wb") as f:
            while n < most:
                f.write(bytes(2**24)); n += 2**24
    except OSError as e:
        print("FILL-STOPPED", path, n // 2**20, "MB:", type(e).__name__)
    finally:
        os.remove(path)
_fill("/tmp/fill.bin")
_fill(os.path.expanduser("~/fill.bin"))
open("left_behind.bin", "wb").write(bytes(2**20))
"""
# Writes past the disk limit into the folder the grader reads lab 8's weights from (on the grader's disk).
FILL_SCRATCH = """
import os
with open(os.path.join(os.environ["TRAINKIT_CHALLENGE_DIR"], "fill.bin"), "wb") as f:
    for _ in range(24):
        f.write(bytes(2**24))
import time
time.sleep(3)
"""
# Every test here reads the one graded batch: one xdist group, so the batch is graded once, by one worker.
pytestmark = pytest.mark.xdist_group("grading-safety")


def code_solution_ids(source) -> list[str]:
    return [g for g, c in nbu.solution_cells(source).items() if c.cell_type == "code"]


def exercise_points(course: Path, student: str) -> dict[str, tuple[float, float]]:
    return nbu.by_exercise({k: v for k, v in cell_scores(course, student, ASSIGNMENT).items() if k.startswith("test_")})


class LoopbackServer:
    """A TCP server on the grading machine's loopback, and (as root) a unix socket under /run, that count
    connections: a sandboxed submission must reach neither (its own network, with nothing on it; /run empty)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        # And a unix socket where system services keep theirs (/run: a database's, Docker's), when the test may.
        self.unix_path = f"/run/grading-safety-{os.getpid()}.sock" if os.access("/run", os.W_OK) else ""
        self.socks = [self.sock]
        if self.unix_path:
            unix = socket.socket(socket.AF_UNIX)
            unix.bind(self.unix_path)
            os.chmod(self.unix_path, 0o777)
            self.socks.append(unix)
        self.connections = 0
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._serve, args=(s,), daemon=True) for s in self.socks]
        for sock, thread in zip(self.socks, self._threads):
            sock.listen()
            sock.settimeout(0.2)
            thread.start()

    def _serve(self, sock):
        while not self._stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.close()

    def close(self):
        self._stop.set()
        for sock, thread in zip(self.socks, self._threads):
            thread.join()
            sock.close()
        if self.unix_path:
            os.unlink(self.unix_path)


def hostile_submissions(course: Path, port: int, unix_path: str) -> dict[str, dict[str, str] | str]:
    """{student: {solution cell: hostile code}}; the rest of the notebook is the reference solution.

    The code goes before the reference answer of its cell (the cell fails before defining anything), except in
    the last cell, where it goes after (kernel deaths: the cells graded before it must keep their scores)."""
    source = light_source()
    first, *_, last = code_solution_ids(source)
    solution_path = course / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    return {
        "perfect": {},
        "syntax_error": {first: "def broken(:\n"},
        "infinite_loop": {first: "while True:\n    pass\n"},
        "memory_bomb": {first: "hog = [bytearray(2**30) for _ in range(64)]\n"},
        "sys_exit": {first: "import sys\nsys.exit(3)\n"},
        "os_exit": {last: "import os\nos._exit(0)\n"},
        "crash": {last: "import ctypes\nctypes.string_at(0)\n"},
        "stderr_spam": {first: "import sys\nfor i in range(20000):\n    print('spam', i, file=sys.stderr)\n"},
        "huge_output": {first: "print('x' * 10_000_000)\nfor i in range(100000):\n    print(i)\n"},
        "write_outside": {first: f"open({str(course / 'labs' / 'pwned.txt')!r}, 'w').write('x')\n"},
        # First a service's unix socket under /run (caught), then the grading machine's loopback (raises).
        "network": {first: (f"import socket\ntry:\n    socket.socket(socket.AF_UNIX).connect({unix_path!r})\n"
                            f"except OSError:\n    pass\n" if unix_path else "import socket\n")
                    + f"socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"},
        "snoop": {first: SNOOP},
        "fill_tmp": {first: FILL_TMP},
        "fill_scratch": {first: FILL_SCRATCH},
        "read_solutions": {first: (f"try:\n    open({str(solution_path)!r}).read()\n    print({LEAK_MARK!r})\n"
                                   f"except OSError:\n    print({HIDDEN_MARK!r})\n")},
    }


# Each runs after a catalogued wrong answer to the first exercise, in the same cell: the wrong answer must
# still lose its points (autograder/guard.py undoes these before every test cell).
TAMPERING = {
    "tamper_rebind": "expect = expect_close = expect_raises = expect_std = lambda *a, **k: None\n",
    "tamper_code": ("for _f in (expect, expect_close, expect_raises):\n"
                    "    _f.__code__ = (lambda *a, **k: None).__code__\n"),
    "tamper_torch": ("import math\nmath.isclose = lambda *a, **k: True\n"
                     "torch.isclose = lambda a, b, **k: torch.ones(torch.broadcast_shapes(torch.as_tensor(a).shape, "
                     "torch.as_tensor(b).shape), dtype=torch.bool)\n"
                     "torch.allclose = lambda *a, **k: True\n"),
    # The student's own functions put where the references are (wherever a name matches), and a reference wrapped
    # around itself, functools.wraps-style (the guard says nothing of torch's own such wrappers: this one is not).
    "tamper_reference": ("import functools, torch.nn.init, torch.nn.utils, torch.optim\n"
                         "for _mod in (torch.nn.init, torch.nn.utils, torch.optim):\n"
                         "    for _name, _value in list(globals().items()):\n"
                         "        if callable(_value) and hasattr(_mod, _name):\n"
                         "            setattr(_mod, _name, _value)\n"
                         "torch.finfo = functools.wraps(torch.finfo)(lambda *a, **k: torch.finfo.__wrapped__(*a, **k))\n"),
    "tamper_shell": ("_ip = get_ipython()\n_run = _ip.run_cell\n"
                     "def _quiet_run_cell(*a, **k):\n    r = _run(*a, **k)\n    r.error_in_exec = None\n    return r\n"
                     "_ip.run_cell = _quiet_run_cell\n_ip.showtraceback = lambda *a, **k: None\n"),
    "tamper_builtins": "import builtins\nbuiltins.AssertionError = type('AssertionError', (Warning,), {})\n",
}


def first_exercise_bug() -> tuple[str, str]:
    """(solution cell, wrong source) of the catalogue's first bug of the first exercise (course.first_bug)."""
    ((first, wrong),) = first_bug(ASSIGNMENT)[1].items()
    assert first == code_solution_ids(light_source())[0], f"{ASSIGNMENT}'s first exercise should have a catalogued bug"
    return first, wrong


@pytest.fixture(scope="module")
def graded_class():
    if not sandbox.available()[0]:
        pytest.skip(f"grading sandbox unavailable here: {sandbox.available()[1]}")
    base = Path(tempfile.mkdtemp(prefix="grading-safety-", dir="/var/tmp"))
    server = LoopbackServer()
    try:
        course = make_course(base, light_lab=True)
        release, source = light_release(), light_source()
        reference = nbu.reference_answers(source)
        last = code_solution_ids(source)[-1]
        for student, extra in hostile_submissions(course, server.port, server.unix_path).items():
            answers = dict(reference)
            for cell, code in extra.items():
                answers[cell] = reference[cell] + "\n" + code if cell == last else code + "\n" + reference[cell]
            submit(course, student, ASSIGNMENT, nbu.fill(release, answers))
        submit(course, "blank", ASSIGNMENT, release)
        first, wrong = first_exercise_bug()
        submit(course, "wrong_answer", ASSIGNMENT, nbu.fill(release, {**reference, first: wrong}))
        for student, code in TAMPERING.items():
            submit(course, student, ASSIGNMENT, nbu.fill(release, {**reference, first: wrong + "\n" + code}))
        submit(course, "not_json", ASSIGNMENT, raw='{"this is": "not a notebook"')
        (course / "submitted" / "no_notebook" / ASSIGNMENT).mkdir(parents=True)
        extra_nb = submit(course, "extra_notebook", ASSIGNMENT, nbu.fill(release, reference))
        shutil.copy(extra_nb, extra_nb.with_name("scratch_work.ipynb"))
        tampered = nbu.fill(release, {**reference, **{g: "" for g in code_solution_ids(source)}})
        tests = [c for c in tampered.cells if nbu.grade_id(c) in nbu.graded_test_cells(tampered)]
        tests[0].source = "pass"                         # an edited test cell: nbgrader restores it
        tampered.cells.remove(tests[1])                  # a deleted test cell: must not count as passed
        submit(course, "tampered_tests", ASSIGNMENT, tampered)
        grader_home = base / "grader-home"
        runtime = grader_home / ".local" / "share" / "jupyter" / "runtime"
        runtime.mkdir(parents=True)
        (runtime / "jpserver-1.json").write_text(f'{{"token": "{PLANTED}-runtime"}}')
        (base / "beside-the-course.txt").write_text(f"{PLANTED}-file")
        planted_env = {"HOME": str(grader_home), "JUPYTERHUB_API_TOKEN": f"{PLANTED}-hub-token",
                       "GRADER_OWN_SETTING": f"{PLANTED}-env"}
        proc = run_grade(course, "--assignment", ASSIGNMENT, "--jobs", "2", "--cell-timeout", str(CELL_TIMEOUT),
                         "--memory-gb", "4", env=planted_env)
        yield course, proc, server.connections
    finally:
        server.close()
        shutil.rmtree(base, ignore_errors=True)


def outputs_text(course: Path, student: str) -> str:
    """Everything the graded notebook printed (not its sources, which name the markers too)."""
    nb = nbu.read(next((course / "autograded" / student / ASSIGNMENT).glob("*.ipynb")))
    return "".join(str(o.get("text", "")) + str(o.get("evalue", "")) for c in nb.cells if c.cell_type == "code"
                   for o in c.outputs)


def full(points):
    return all(got == out_of for got, out_of in points.values())


def test_the_batch_completes_and_lists_only_the_ungradable(graded_class):
    course, proc, _ = graded_class
    assert proc.returncode == 1, proc.stdout + proc.stderr
    table = [ln.split() for ln in proc.stdout.splitlines() if ASSIGNMENT in ln.split()[1:2]]
    failed = {row[0] for row in table if "FAILED:" in row}
    assert failed == {"not_json", "no_notebook", "fill_scratch"}, proc.stdout


def test_the_grades_csv_is_what_nbgrader_export_writes(graded_class):
    """make grade exports in its own process (autograder.grade.export_grades); nbgrader's command, on the same
    gradebook, writes the same file (the course's exporter: nbgrader's columns plus manual_grading)."""
    course, _, _ = graded_class
    by_nbgrader = course / "grades" / "by_nbgrader.csv"
    subprocess.run([sys.executable, "-m", "nbgrader", "export", f"--to={by_nbgrader}"], cwd=course, check=True,
                   capture_output=True)
    ours = (course / "grades" / "grades.csv").read_text(encoding="utf-8")
    assert ours == by_nbgrader.read_text(encoding="utf-8") and ours.count("\n") > 20, ours[:500]


@pytest.mark.parametrize("student", ["perfect", "stderr_spam", "huge_output", "extra_notebook", "snoop", "fill_tmp"])
def test_harmless_oddities_keep_full_marks(graded_class, student):
    course, _, _ = graded_class
    points = exercise_points(course, student)
    assert points and full(points), f"{student}: {points}"


@pytest.mark.parametrize("student", ["syntax_error", "infinite_loop", "memory_bomb", "sys_exit", "write_outside",
                                     "network"])
def test_a_failure_in_the_first_exercise_costs_only_that_exercise(graded_class, student):
    course, _, _ = graded_class
    points = exercise_points(course, student)
    first = code_solution_ids(light_source())[0]
    assert points[first][0] == 0, f"{student}: {first} should score 0, got {points[first]}"
    others = {k: v for k, v in points.items() if k != first}
    assert full(others), f"{student}: the other exercises should keep full marks: {others}"


@pytest.mark.parametrize("student", ["os_exit", "crash"])
def test_a_dead_kernel_costs_the_cells_from_there_on_with_a_reason(graded_class, student):
    course, _, _ = graded_class
    points = exercise_points(course, student)
    last = code_solution_ids(light_source())[-1]
    assert points[last][0] == 0, f"{student}: {points}"
    before = {k: v for k, v in points.items() if k != last}
    assert full(before), f"{student}: exercises graded before the kernel died should keep their marks: {before}"
    assert "the kernel died while running" in outputs_text(course, student)


@pytest.mark.parametrize("student", ["wrong_answer", *TAMPERING])
def test_tampering_cannot_turn_a_wrong_answer_into_marks(graded_class, student):
    course, _, _ = graded_class
    points = exercise_points(course, student)
    first = code_solution_ids(light_source())[0]
    assert points[first][0] < points[first][1], f"{student}: a wrong {first} kept full marks: {points[first]}"
    assert full({k: v for k, v in points.items() if k != first}), f"{student}: {points}"
    if student != "wrong_answer":
        assert "[grader] restored before this test" in outputs_text(course, student), \
            "the feedback should say what the grader had to restore"


def test_tampered_test_cells_are_restored_or_score_zero(graded_class):
    course, _, _ = graded_class
    scores = {k: v for k, v in cell_scores(course, "tampered_tests", ASSIGNMENT).items() if k.startswith("test_")}
    assert not any(got for got, _ in scores.values()), f"blank answers with edited/deleted tests earned {scores}"


def test_the_submission_cannot_read_the_solutions_write_the_course_or_reach_the_network(graded_class):
    course, _, connections = graded_class
    printed = outputs_text(course, "read_solutions")
    assert HIDDEN_MARK in printed and LEAK_MARK not in printed, printed[-2000:]
    assert not (course / "labs" / "pwned.txt").exists(), "a submission wrote into the course folder"
    assert connections == 0, "a submission reached a server on the grading machine"


def test_the_kernel_sees_no_secret_of_the_grading_account(graded_class):
    """Deny by default: the kernel's environment is an allow-list and its file system holds only what it needs, so
    nothing planted in the grader's environment, home or beside the course reaches it (or its feedback)."""
    course, _, _ = graded_class
    printed = outputs_text(course, "snoop")
    assert "SNOOPED" in printed, printed[-2000:]
    files = int(printed.split("SNOOPED", 1)[1].split()[0])
    assert files > 20, f"the snoop should have read the files it can see (the system's, the packages'): {files}"
    assert "found: []" in printed, printed[printed.index("SNOOPED"):][:600]
    for folder in (course / "autograded", course / "feedback"):
        for path in folder.rglob("*"):
            if path.is_file() and path.suffix in (".ipynb", ".html", ".log"):
                text = path.read_text(encoding="utf-8", errors="replace")
                assert f"{PLANTED}-" not in text, path
    feedback = next((course / "feedback" / "perfect" / ASSIGNMENT).glob("*.html")).read_text(encoding="utf-8")
    assert "Graded on the CPU" in feedback, "the feedback should say where grading runs"


def test_what_a_submission_writes_stays_in_the_sandbox_within_its_limits(graded_class):
    course, proc, _ = graded_class
    printed = outputs_text(course, "fill_tmp")
    stops = [ln for ln in printed.splitlines() if ln.startswith("FILL-STOPPED")]
    assert len(stops) == 2 and all(int(ln.split()[2]) <= sandbox.Limits.tmp_mb for ln in stops), printed[-1500:]
    for student in ("fill_tmp", "perfect"):
        kept = sorted(p.name for p in (course / "autograded" / student / ASSIGNMENT).iterdir())
        assert f"{ASSIGNMENT}.ipynb" in kept and set(kept) <= {f"{ASSIGNMENT}.ipynb", "timestamp.txt", "submission_secret.txt"}, \
            f"{student}: copied back {kept}"
    row = next(ln for ln in proc.stdout.splitlines() if ln.startswith("fill_scratch "))
    assert f"wrote more than {sandbox.Limits.disk_mb} MB" in row, row
    assert not list(Path(tempfile.gettempdir()).glob("nbgrade-*/subs/*/.grader/challenge/fill.bin"))


def test_regrading_is_idempotent_parallel_equals_sequential_and_keeps_manual_grades(graded_class):
    from nbgrader.api import Gradebook

    course, _, _ = graded_class
    before = {s: cell_scores(course, s, ASSIGNMENT) for s in ("perfect", "blank", "syntax_error")}
    written = next(g for g, c in nbu.solution_cells(light_source()).items() if c.cell_type == "markdown")
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        grade = gb.find_grade(written, ASSIGNMENT, ASSIGNMENT, "perfect")
        grade.manual_score, grade.needs_manual_grade = 1.5, False
        gb.db.commit()
    # the blank student resubmits a complete notebook; everyone else is regraded unchanged, one at a time
    release, reference = light_release(), nbu.reference_answers(light_source())
    submit(course, "blank", ASSIGNMENT, nbu.fill(release, reference))
    for student in [p.name for p in (course / "submitted").iterdir()]:
        if student not in before:
            shutil.rmtree(course / "submitted" / student)
    proc = run_grade(course, "--assignment", ASSIGNMENT, "--jobs", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    after = {s: cell_scores(course, s, ASSIGNMENT) for s in before}
    manual = after["perfect"].pop(written)
    before["perfect"].pop(written)
    assert manual == (1.5, 2.0) or manual[0] == 1.5, f"the manual grade was lost on regrade: {manual}"
    assert after["perfect"] == before["perfect"] and after["syntax_error"] == before["syntax_error"]
    assert after["blank"] != before["blank"] and full(exercise_points(course, "blank")), "the resubmission should replace the old grade"
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        assert not gb.find_grade(written, ASSIGNMENT, ASSIGNMENT, "perfect").needs_manual_grade, \
            "an unchanged written answer that was graded by hand must not be flagged again"
    row = next(ln for ln in proc.stdout.splitlines() if ln.startswith("perfect "))
    assert "pending" not in row and "1.5 / 2" in row, f"the table should show the manual grade, not pending: {row}"
    feedback = next((course / "feedback" / "perfect" / ASSIGNMENT).glob("*.html")).read_text(encoding="utf-8")
    assert "awaiting grading" not in feedback and "1.5 / 2" in feedback, "feedback should show the manual grade"


def test_a_failure_of_the_graders_own_keeps_the_previous_grade_and_feedback(graded_class):
    """A regrade whose kernel cannot start (here: an address-space limit too small for Python, as a grader
    misconfigured for its machine would set) is the grader's fault: the student's earlier grade, feedback and CSV
    row stay exactly as they were, and the table says FAILED with the reason."""
    course, _, _ = graded_class
    student = "perfect"
    before = cell_scores(course, student, ASSIGNMENT)
    assert full(exercise_points(course, student)), "the first grading run should have given full marks"
    feedback = next((course / "feedback" / student / ASSIGNMENT).glob("*.html"))
    feedback_before = feedback.read_bytes()
    csv = course / "grades" / "grades.csv"
    row_before = next(ln for ln in csv.read_text(encoding="utf-8").splitlines() if f",{student}," in ln)
    proc = run_grade(course, "--assignment", ASSIGNMENT, "--student", student, "--jobs", "1", "--memory-gb", "0.02")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    row = next(ln for ln in proc.stdout.splitlines() if ln.startswith(f"{student} "))
    assert "FAILED" in row and "previous grade is kept" in row, row
    assert cell_scores(course, student, ASSIGNMENT) == before, "a failure of the grader's own must not change the grade"
    assert feedback.read_bytes() == feedback_before, "nor the feedback the student has"
    row_after = next(ln for ln in csv.read_text(encoding="utf-8").splitlines() if f",{student}," in ln)
    assert row_after == row_before, f"nor the grades CSV: {row_before!r} became {row_after!r}"


@pytest.mark.xdist_group("grading-refusal")
def test_where_no_sandbox_can_be_made_grade_grades_nothing_and_says_why(tmp_path):
    """Never silently unsandboxed: a bwrap that cannot make the sandbox (here: one that always fails) stops make grade
    before any submission runs; the gradebook, feedback and grades stay as they were (none yet)."""
    course = make_course(tmp_path, light_lab=True)
    submit(course, "someone", ASSIGNMENT, light_release())
    proc = subprocess.run([sys.executable, "-m", "autograder.grade", "--course-dir", str(course)], capture_output=True,
                          text=True, cwd=course, env={**os.environ, "GRADER_BWRAP": shutil.which("false")})
    assert proc.returncode == 3, (proc.returncode, proc.stdout, proc.stderr)
    assert "grading sandbox cannot be made here" in proc.stderr and "UNSANDBOXED=1" in proc.stderr, proc.stderr
    assert not any((course / d).exists() for d in ("gradebook.db", "autograded", "feedback", "grades")), \
        sorted(p.name for p in course.iterdir())
