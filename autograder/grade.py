"""Grade every submission under ``submitted/<student>/<assignment>/`` (the CLI behind ``make grade``).

    python -m autograder.grade [--course-dir DIR] [--assignment NAME ...] [--jobs N] [--cell-timeout S]

Submissions are graded in parallel (``--jobs``, default: the number of cores), each on its own:
- in a scratch copy that holds only that submission and a gradebook with no other student in it;
- by one of ``--jobs`` long-lived worker processes that run nbgrader's autograde in-process (its Python API),
  one submission after another, so a submission does not pay for starting Python and nbgrader again;
- with the student's code only in that submission's own kernel, started in a sandbox (no network, the
  instructor's files out of reach, memory/CPU/file-size limits, no root needed: see ``autograder/sandbox.py``);
  where none can be made it grades nothing and says why, unless told ``--no-sandbox``;
- with a wall-clock limit, so a submission that hangs cannot hold up the batch.
The results are then written into the course gradebook one submission at a time (so it is never written
concurrently), the autograded notebooks copied to ``autograded/``, feedback HTML written to ``feedback/``,
a grades CSV to ``grades/grades.csv`` (nbgrader's export format), and a table printed.

Grade on submit (autograder/on_submit.py) runs this same pipeline for one lab's waiting submissions: ``--collect``
(nbgrader's owner-checked collect of those students' latest submissions), ``--release-feedback``, ``--show`` (what the
feedback shows), ``--exclusive`` (a whole run holds the course's grading-run lock alone; `make grade` holds it
shared, so the two never grade at once) and ``--report`` (each submission's outcome as JSON).

Due dates, late penalties and extensions come from the course file, term.toml (autograder/term/policy.py): it is
written into the course gradebook before grading and again after, so every penalty it affects is recomputed; a
malformed course file stops it before anything is graded.

Regrading keeps manual grades: a written answer that a grader already scored, and that the student has not
changed since, keeps its score and is not flagged for manual grading again.

A submission that could not be graded at all is listed as FAILED with the reason and its log. Whose fault it
was decides its grade: a submission that cannot be graded (not a notebook, no notebook, a run past the wall-clock
limit) scores 0 until it is fixed; a failure of the grader's own (a kernel that could not start, a file it could
not write, a full disk, a worker that died) never costs a grade: the previous grade and feedback are kept as they
were, and the table says so. Exit status: 0 if every submission was graded, 1 if some failed, 2 if there was
nothing to grade or the course file is malformed, 3 if it graded nothing because no sandbox could be made.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import warnings
from concurrent.futures import as_completed
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from autograder import lending, sandbox
from autograder.term import policy, variants

# Assignments are generated into this scratch release folder (not labs/) so grading never rewrites
# the committed student notebooks; the gradebook gets the same cells and checksums either way.
SCRATCH_RELEASE = ".nbgrader_release"
CONFIG = "nbgrader_config.py"


def put_venv_on_path() -> None:
    """Put this interpreter's bin/ first on PATH (for this process and every subprocess).

    nbgrader runs the `alembic` executable when it creates a gradebook, and notebook kernels are found
    through PATH: both must work even when the virtual environment is not activated.
    """
    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])


def alembic_head() -> str:
    """The gradebook schema's revision that nbgrader writes into a new gradebook, read in this process.

    nbgrader's own ``get_alembic_version`` asks a new ``alembic`` process for it (2-3 s of CPU, for every new
    gradebook: the course's and one scratch template per assignment); it is the head of the migrations that ship with
    nbgrader, which alembic reads here in a millisecond (tests/test_grading_shards.py checks both agree)."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory
    from nbgrader import dbutil

    config = Config()
    config.set_main_option("script_location", dbutil.ALEMBIC_DIR)
    return ScriptDirectory.from_config(config).get_current_head()


def read_alembic_head_in_process() -> None:
    """New gradebooks made by this process get their schema revision from alembic_head()."""
    import nbgrader.api

    nbgrader.api.get_alembic_version = alembic_head


def nbgrader_api(root: Path, **overrides):
    """nbgrader's Python API on the course folder ``root`` (its nbgrader_config.py, plus ``overrides`` given as
    ``{"Section.trait": value}``), in this process: no new Python and nbgrader imports (2-3 s of CPU each)."""
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config.loader import PyFileConfigLoader

    read_alembic_head_in_process()
    config = PyFileConfigLoader(CONFIG, path=str(root)).load_config()
    for dotted, value in overrides.items():
        section, trait = dotted.rsplit(".", 1)
        config[section][trait] = value
    return NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)


def nbgrader_in_process(root: Path, method: str, *args, log: Path, **overrides) -> bool:
    """``nbgrader_api(root, **overrides).<method>(*args)``, its log written to ``log``; did it succeed?"""
    with nbgrader_quiet():
        result = getattr(nbgrader_api(root, **overrides), method)(*args)
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(f"[{method} {' '.join(map(str, args))}]\n{result.get('log', '')}\n{result.get('error', '')}",
                   encoding="utf-8")
    return bool(result.get("success"))


def find_submissions(course: Path, only: list[str] | None, students: list[str] | None = None) -> list[tuple[str, str]]:
    root = course / "submitted"
    subs = []
    for student in sorted(p for p in root.glob("*") if p.is_dir()):
        if students and student.name not in students:
            continue
        for assignment in sorted(p for p in student.glob("*") if p.is_dir()):
            if not only or assignment.name in only:
                subs.append((student.name, assignment.name))
    return subs


# ---------------------------------------------------------------------------------------------------
# 1. Per assignment: a template scratch course whose gradebook knows the assignment and no student.
# ---------------------------------------------------------------------------------------------------
def make_template(course: Path, assignment: str, batch: Path, logs: Path) -> Path | None:
    """Generate ``assignment`` into a fresh course folder, then remove the reference notebooks from it.

    What is left (config, a gradebook with the assignment's locked cells and tests, an empty source
    folder) is all ``nbgrader autograde`` needs; each submission is graded in a copy of it.
    """
    template = batch / "templates" / assignment
    (template / "solutions").mkdir(parents=True)
    shutil.copy(course / CONFIG, template / CONFIG)
    if (course / policy.COURSE_FILE).is_file():     # the late policy, read by nbgrader's AssignLatePenalties
        shutil.copy(course / policy.COURSE_FILE, template / policy.COURSE_FILE)
    with open(template / CONFIG, "a", encoding="utf-8") as config:
        config.write(SCRATCH_GRADEBOOK)
    shutil.copytree(course / "solutions" / assignment, template / "solutions" / assignment)
    if not nbgrader_in_process(template, "generate_assignment", assignment, log=logs / f"template_{assignment}.log",
                               **{"CourseDirectory.release_directory": SCRATCH_RELEASE}):
        return None
    shutil.rmtree(template / "solutions" / assignment)
    shutil.rmtree(template / SCRATCH_RELEASE)
    (template / "solutions" / assignment).mkdir()
    _copy_due_date(course, template, assignment)
    return template


def _copy_due_date(course: Path, template: Path, assignment: str) -> None:
    """Late penalties are computed in the scratch gradebook: it needs the instructor's due date."""
    with gradebook(course) as gb:
        duedate = gb.find_assignment(assignment).duedate
    if duedate is not None:
        with gradebook(template) as gb:
            gb.update_or_create_assignment(assignment, duedate=duedate)


def db_url(course: Path) -> str:
    """The gradebook of the course folder ``course``: its nbgrader_config.py's CourseDirectory.db_url (a database
    server, when several grading shards share one course), else gradebook.db in the folder. Scratch copies always
    have their own (make_template)."""
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader(CONFIG, path=str(course)).load_config()
    return config.CourseDirectory.get("db_url") or f"sqlite:///{course / 'gradebook.db'}"


@contextmanager
def nbgrader_quiet():
    """nbgrader's own SQLAlchemy autoflush warnings (harmless, and not ours to fix) silenced for one block: the one
    place this is done."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


@contextmanager
def gradebook(course: Path):
    """The gradebook of the course folder ``course`` (db_url), opened with nbgrader's own warnings silenced."""
    from nbgrader.api import Gradebook

    with nbgrader_quiet(), Gradebook(db_url(course)) as gb:
        yield gb


# Appended to each scratch copy's nbgrader_config.py: its own SQLite gradebook, whatever the course's db_url says.
SCRATCH_GRADEBOOK = ('\n# autograder/grade.py: a scratch copy grades into its own gradebook\nimport os\n'
                     'c.CourseDirectory.db_url = "sqlite:///" + os.path.join(os.path.dirname(os.path.abspath(__file__)), '
                     '"gradebook.db")\n')


@contextmanager
def shared_course_lock(course: Path):
    """Grading shards (`python -m autograder.grade --shard K/N`, N at once on one course: one shared folder and
    database) take turns where they write what all of them share: the assignment's rows in the gradebook, the CSV
    export and the challenge leaderboard."""
    import fcntl

    with open(course / ".grading.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


RUN_LOCK = ".grading-run.lock"


@contextmanager
def grading_run(course: Path, exclusive: bool):
    """Held for a whole run: shared by `make grade` (its shards and `make regrade` run side by side), exclusive for
    grade on submit (autograder/on_submit.py), so the service and the instructor never grade at the same time: each
    waits for the other's run to end."""
    import fcntl

    with open(course / RUN_LOCK, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# ---------------------------------------------------------------------------------------------------
# 2. Per submission, in parallel: grade in a scratch copy, read the results back.
# ---------------------------------------------------------------------------------------------------
@dataclass
class Result:
    student: str
    assignment: str
    scratch: Path
    log: Path
    error: str = ""                      # why it could not be graded; "" when it was
    graders_fault: bool = False          # the failure was the grader's, not the submission's: keep the old grade
    grades: dict = field(default_factory=dict)     # (notebook, cell) -> (auto_score, needs_manual_grade)
    comments: dict = field(default_factory=dict)   # (notebook, cell) -> auto_comment
    penalties: dict = field(default_factory=dict)  # notebook -> late_submission_penalty
    timestamp: object = None
    grader_files: list = field(default_factory=list)   # files the grader itself wrote beside the graded notebooks
    outcomes: dict | None = None   # which variants of each judgement exercise passed (autograder/term/variants.py)


def grade_one(course: Path, template: Path, batch: Path, key: str, student: str, assignment: str, *, logs: Path,
              cell_timeout: int | None, wall_timeout: int, limits: sandbox.Limits, isolate: bool,
              extension=None) -> Result:
    scratch = batch / "subs" / key
    shutil.copytree(template, scratch)
    if extension:     # this student's own deadline (extension, late days): nbgrader's penalty counts from it
        with gradebook(scratch) as gb:
            gb.update_or_create_student(student)
            gb.update_or_create_submission(assignment, student, extension=extension)
    shutil.copytree(course / "submitted" / student / assignment, scratch / "submitted" / student / assignment)
    grader_dir = scratch / ".grader"
    for d in ("home", "runtime", "challenge"):
        (grader_dir / d).mkdir(parents=True)
    log = logs / f"autograde_{student}_{assignment}.log"
    result = Result(student, assignment, scratch, log)

    # The kernel's settings; in the sandbox its home is its own, in memory (sandbox.HOME), otherwise a scratch folder.
    home = sandbox.HOME if isolate else str(grader_dir / "home")
    # On the CPU by design, sandboxed or not (docs/security.md): the same grade whatever the machine has.
    kernel_env = {"WANDB_MODE": "offline", "WANDB_DIR": home, "JUPYTER_RUNTIME_DIR": str(grader_dir / "runtime"),
                  "TRAINKIT_CHALLENGE_DIR": str(grader_dir / "challenge"), "CUDA_VISIBLE_DEVICES": "",
                  variants.OUTCOMES_ENV: str(grader_dir / "challenge" / variants.FILE)}
    if not isolate:
        kernel_env.update({"HOME": home, "MPLCONFIGDIR": home})
    overrides = {
        "Execute.kernel_manager_class": sandbox.kernel_manager_class(),
        "GradingKernelManager.isolate": isolate, "GradingKernelManager.scratch": str(scratch),
        "GradingKernelManager.memory_gb": limits.memory_gb, "GradingKernelManager.cpu_seconds": limits.cpu_seconds,
        "GradingKernelManager.file_mb": limits.file_mb, "GradingKernelManager.tmp_mb": limits.tmp_mb,
        "GradingKernelManager.kernel_env": kernel_env,
    }
    if cell_timeout is not None:
        overrides["Execute.timeout"] = cell_timeout
    out, timed_out = "", False

    def stop(signum, frame):
        raise TimeoutError(f"grading took longer than {wall_timeout} s and was stopped")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(wall_timeout)
    try:
        with nbgrader_quiet(), sandbox.disk_watch(sandbox.writable_paths(scratch), limits.disk_mb * 2**20) as disk:
            answer = nbgrader_api(scratch, **overrides).autograde(assignment, student, force=True, create=True)
        out = f"{answer.get('log', '')}\n{answer.get('error', '')}"
        ok = bool(answer.get("success"))
    except TimeoutError as exc:
        out, ok, timed_out = str(exc), False, True
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
        sandbox.kill_leftover_kernels()
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(f"[autograde {assignment} --student {student}, {'sandboxed' if isolate else 'not sandboxed'}]\n{out}",
                   encoding="utf-8")
    if timed_out:
        result.error = f"grading took longer than {wall_timeout} s and was stopped"
    elif disk["exceeded"]:
        result.error = (f"the submission wrote more than {limits.disk_mb} MB into the grader's folders while graded "
                        f"and was stopped")
    elif not ok:
        result.error = _nbgrader_error(out) or "nbgrader could not grade it (see the log)"
        graders = graders_fault(out)
        if graders:
            result.error, result.graders_fault = graders, True
    if not result.error:
        _read_results(result)
        result.outcomes = variants.read_outbox(grader_dir / variants.FILE)   # what SafeExecute took from the outbox
    if not result.error:     # e.g. lab 8's challenge: its cells earn at most what the grader's own scoring gives
        for after_grading in lab_hooks("after_grading"):
            after_grading(result, scratch / ".grader" / "challenge")
    return result


THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")   # PyTorch's CPU thread pools read these at start


def cores() -> int:
    """The cores this process may run on (its affinity: a container or taskset gets fewer than the machine has)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:     # not on Linux
        return os.cpu_count() or 1


def share_the_cores(jobs: int, submissions: int) -> int:
    """Give each kernel that runs at once its share of the cores, as its CPU thread count; returns the share.

    PyTorch starts one CPU thread per core in every process. With ``jobs`` kernels at once that is jobs x cores threads
    spinning on the same cores: on the first 16-core machine the course met (the GPU check), 16 kernels at 16 threads
    each graded lab 1 and lab 5 so slowly that neither finished in 268 s (2 cores, 2 at a time: 15 s). The kernels
    inherit these variables (autograder/sandbox.py keeps them). A thread count the instructor set (either variable)
    is left as it is: PyTorch takes MKL_NUM_THREADS over OMP_NUM_THREADS, so filling in only the other one would
    override the instructor's.
    """
    chosen = [os.environ[name] for name in THREAD_VARIABLES if name in os.environ]
    if chosen:
        return int(chosen[-1]) if chosen[-1].isdigit() else 0
    share = max(1, cores() // max(1, min(jobs, submissions)))
    for name in THREAD_VARIABLES:
        os.environ[name] = str(share)
    return share


def graded_in_workers(tasks: list[dict], jobs: int):
    """``grade_one(**task)`` for every task, ``jobs`` at a time, in long-lived worker processes; yields Results.

    The workers are forked from this process once nbgrader is imported, and each grades one submission after
    another in-process (nbgrader's API): a submission costs its kernel and its notebook, not a new nbgrader.
    Student code never runs in a worker, only in the submission's own sandboxed kernel. Should a worker die all
    the same, its submissions are retried once in fresh workers, then listed as FAILED.
    """
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    import nbgrader.apps.api  # noqa: F401 (imported before the fork, so no worker imports it again)
    import nbgrader.converters.autograde  # noqa: F401

    share_the_cores(jobs, len(tasks))
    attempts = {t["key"]: 0 for t in tasks}
    pending = list(tasks)
    while pending:
        retry = []
        with ProcessPoolExecutor(max_workers=max(1, jobs), mp_context=multiprocessing.get_context("fork")) as pool:
            futures = {pool.submit(grade_one, **task): task for task in pending}
            for future in as_completed(futures):
                task = futures[future]
                try:
                    yield future.result()
                    continue
                except BrokenProcessPool:
                    why = "the grading worker died"
                except Exception as exc:      # noqa: BLE001 -- a bug in grade_one itself: report it, keep grading the others
                    why = f"{type(exc).__name__}: {exc}"
                attempts[task["key"]] += 1
                if attempts[task["key"]] < 2 and why == "the grading worker died":
                    retry.append(task)
                else:
                    result = Result(task["student"], task["assignment"], task["batch"] / "subs" / task["key"],
                                    task["logs"] / f"autograde_{task['student']}_{task['assignment']}.log")
                    result.error, result.graders_fault = why, True   # student code never runs in a worker
                    yield result
        pending = retry


def export_grades(course: Path, csv: Path, log: Path) -> bool:
    """``nbgrader export --to=csv`` in this process (the command would start Python and import nbgrader again, 2-3 s):
    the exporter nbgrader_config.py names (ExportApp.plugin_class), on the course gradebook."""
    from nbgrader.api import Gradebook
    from nbgrader.apps.exportapp import ExportApp
    from traitlets.utils.importstring import import_item

    try:
        api = nbgrader_api(course, **{"ExportPlugin.to": str(csv)})
        plugin_class = api.config.ExportApp.get("plugin_class", ExportApp.class_traits()["plugin_class"].default_value)
        plugin = (import_item(plugin_class) if isinstance(plugin_class, str) else plugin_class)(config=api.config)
        with nbgrader_quiet(), Gradebook(api.coursedir.db_url, api.coursedir.course_id) as gb:
            plugin.export(gb)
    except Exception as exc:   # noqa: BLE001 -- reported as a warning; the grades are in the gradebook either way
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(f"[export --to={csv}]\n{type(exc).__name__}: {exc}\n", encoding="utf-8")
        return False
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(f"[export --to={csv}] with {plugin_class}\n", encoding="utf-8")
    return True


def feedback_one(course: Path, student: str, assignment: str, log: Path, show: str = "everything") -> bool:
    """nbgrader's generate_feedback for one graded submission (reads the course gradebook, writes its HTML); ``show``:
    what it shows (autograder/feedback.py's FeedbackLabels.show)."""
    return nbgrader_in_process(course, "generate_feedback", assignment, student, log=log,
                               **{"FeedbackLabels.show": show})


def in_workers(function, tasks: list[dict], jobs: int) -> list:
    """``[function(**task) for task in tasks]``, ``jobs`` at a time in forked worker processes, in order."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    if not tasks:
        return []
    with ProcessPoolExecutor(max_workers=max(1, jobs), mp_context=multiprocessing.get_context("fork")) as pool:
        futures = [pool.submit(function, **task) for task in tasks]
        out = []
        for future in futures:
            try:
                out.append(future.result())
            except Exception:   # noqa: BLE001 -- any failure of the check means: not this one
                out.append(False)
        return out


def _nbgrader_error(log_text: str) -> str:
    """The reason nbgrader gave, in one line: its own ERROR line, else the exception at the end of the log."""
    if "No notebooks found" in log_text:
        return "the submission folder holds none of the assignment's notebooks"
    exceptions = [ln.strip() for ln in log_text.splitlines() if re.match(r"^\w+(\.\w+)*(Error|Exception): ", ln.strip())]
    errors = [re.sub(r"^\[.*?\|\s*ERROR\]\s*", "", ln.strip()) for ln in log_text.splitlines() if "| ERROR]" in ln]
    found = exceptions[-1:] or errors[:1]
    return found[0][:300] if found else ""


# Failures that are the grader's own, recognised by the exceptions in nbgrader's log: the kernel did not start (no
# student code has run yet: an interpreter or venv the grading account cannot reach, a broken sandbox), or a file
# the grader could not read or write. Student code runs in the kernel, whose errors are the cells' outputs, not
# exceptions in nbgrader's log.
GRADERS_FAULTS = ("Kernel died before replying to kernel_info", "Kernel didn't respond", "PermissionError",
                  "Permission denied", "No space left on device", "Read-only file system", "Disk quota exceeded",
                  "database is locked", "unable to open database file")


def graders_fault(log_text: str) -> str:
    """The first exception line of nbgrader's log that shows a failure of the grader's own ("" if none)."""
    for line in log_text.splitlines():
        line = line.strip()
        if re.match(r"^\w+(\.\w+)*(Error|Exception): ", line) and any(m in line for m in GRADERS_FAULTS):
            return line[:300]
    return ""


def _read_results(result: Result) -> None:
    from nbgrader.api import MissingEntry

    with gradebook(result.scratch) as gb:
        try:
            sub = gb.find_submission(result.assignment, result.student)
        except MissingEntry:
            result.error = "nbgrader recorded no submission (see the log)"
            return
        result.timestamp = sub.timestamp
        for nb in sub.notebooks:
            result.penalties[nb.name] = nb.late_submission_penalty
            for g in nb.grades:
                result.grades[nb.name, g.name] = (g.auto_score, g.needs_manual_grade)
            for c in nb.comments:
                result.comments[nb.name, c.name] = c.auto_comment


# ---------------------------------------------------------------------------------------------------
# 3. Serially, in the main process: write each result into the course gradebook and folders.
# ---------------------------------------------------------------------------------------------------
def merge(course: Path, result: Result) -> None:
    """Record one graded submission in the course: gradebook rows, autograded notebooks."""
    with nbgrader_quiet():     # update_or_create_submission trips them
        _merge(course, result)


def _merge(course: Path, result: Result) -> None:
    src = result.scratch / "autograded" / result.student / result.assignment
    dest = course / "autograded" / result.student / result.assignment
    unchanged = _unchanged_written_answers(dest, src)
    # The autograded copy is staged first: if the grader cannot write it, nothing in the course has changed yet.
    staged = dest.with_name(dest.name + ".new")
    shutil.rmtree(staged, ignore_errors=True)
    staged.parent.mkdir(parents=True, exist_ok=True)
    copy_graded(src, staged, {nb for nb, _ in result.grades} | set(result.penalties), result.grader_files)
    try:
        _record_grades(course, result, unchanged)
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    if dest.exists():
        shutil.rmtree(dest)
    staged.rename(dest)
    try:     # a statistic for the item analysis: never what decides whether a grade was recorded
        variants.keep(course, result.student, result.assignment, result.outcomes)
    except OSError as exc:
        print(f"warning: {result.student}/{result.assignment}: the variants record was not kept ({exc})",
              file=sys.stderr)


def copy_graded(src: Path, dest: Path, notebooks: set[str], grader_files: list[str] = ()) -> None:
    """What of a graded scratch copy reaches the course (and from there the feedback): the assignment's graded
    notebooks, nbgrader's own records (when it was submitted; the secret release_feedback files it under) and what
    the grader wrote there itself (lab 8's verified challenge record); nothing else a submission brought or wrote."""
    dest.mkdir()
    for name in [f"{nb}.ipynb" for nb in sorted(notebooks)] + ["timestamp.txt", "submission_secret.txt",
                                                                *grader_files]:
        path = src / name
        if path.is_file() and not path.is_symlink():
            shutil.copyfile(path, dest / name)


def _record_grades(course: Path, result: Result, unchanged: set[tuple[str, str]]) -> None:
    with gradebook(course) as gb:
        gb.update_or_create_student(result.student)
        sub = gb.update_or_create_submission(result.assignment, result.student, timestamp=result.timestamp)
        for nb in sub.notebooks:
            nb.late_submission_penalty = result.penalties.get(nb.name)
            for g in nb.grades:
                auto, needs_manual = result.grades.get((nb.name, g.name), (0.0, False))
                g.auto_score = auto
                if g.manual_score is not None and (nb.name, g.name) in unchanged:
                    needs_manual = False             # graded by hand, answer unchanged: keep that grade
                elif g.manual_score is not None:
                    g.manual_score = None            # the answer changed: the old manual grade no longer applies
                    needs_manual = True
                g.needs_manual_grade = bool(needs_manual)
            for c in nb.comments:
                c.auto_comment = result.comments.get((nb.name, c.name))
        gb.db.commit()


def _unchanged_written_answers(old_dir: Path, new_dir: Path) -> set[tuple[str, str]]:
    """(notebook, grade_id) of manually graded cells whose source is the same in both autograded copies."""
    same = set()
    for new_path in new_dir.glob("*.ipynb"):
        old_path = old_dir / new_path.name
        if not old_path.exists():
            continue
        old, new = (_manual_cells(p) for p in (old_path, new_path))
        same |= {(new_path.stem, gid) for gid, src in new.items() if old.get(gid) == src}
    return same


def _manual_cells(path: Path) -> dict[str, str]:
    try:
        nb = nbformat.read(str(path), as_version=4)
    except Exception:   # noqa: BLE001 -- an unreadable notebook has no metadata to read
        return {}
    out = {}
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("grade") and meta.get("solution"):
            out[meta["grade_id"]] = cell.source
    return out


def record_failure(course: Path, student: str, assignment: str) -> None:
    """A submission nbgrader could not grade at all: 0 in the gradebook (not a stale old score)."""
    with gradebook(course) as gb:
        gb.update_or_create_student(student)
        sub = gb.update_or_create_submission(assignment, student)
        for nb in sub.notebooks:
            for g in nb.grades:
                g.auto_score = 0.0 if g.cell.cell_type == "code" else g.auto_score
        gb.db.commit()


def scores(course: Path, student: str, assignment: str) -> tuple[float, float, bool]:
    """(autograded score, autogradable max, needs manual grading) from the gradebook."""
    from nbgrader.api import MissingEntry

    with gradebook(course) as gb:
        try:
            sub = gb.find_submission(assignment, student)
        except MissingEntry:
            return 0.0, 0.0, False
        auto_max = sum(g.max_score for nb in sub.notebooks for g in nb.grades if g.cell.cell_type == "code")
        auto_score = sum((g.score or 0.0) for nb in sub.notebooks for g in nb.grades if g.cell.cell_type == "code")
        return float(auto_score), float(auto_max), bool(sub.needs_manual_grade)


def written_column(course: Path, student: str, assignment: str) -> str:
    """The table's "written" column: the points still awaiting manual grading ("pending 2"), else the manual
    score ("1.5 / 2"), or "-" when the assignment has nothing graded by hand."""
    from nbgrader.api import MissingEntry

    with gradebook(course) as gb:
        try:
            sub = gb.find_submission(assignment, student)
        except MissingEntry:
            return "-"
        manual = [g for nb in sub.notebooks for g in nb.grades if g.cell.cell_type != "code"]
        pending = sum(g.max_score for nb in sub.notebooks for g in nb.grades if g.needs_manual_grade)
        if pending:
            return f"pending {pending:g}"
        if not manual:
            return "-"
        return f"{sum(g.score or 0.0 for g in manual):g} / {sum(g.max_score for g in manual):g}"


def late_column(course: Path, student: str, assignment: str) -> str:
    """The table's "late" column: the late penalty the course file charged ("-1.5"), "" when none (the Formgrader's
    own tables show the score before it; the CSV, the feedback and the LMS export charge it)."""
    from nbgrader.api import MissingEntry

    with gradebook(course) as gb:
        try:
            penalty = gb.find_submission(assignment, student).late_submission_penalty
        except MissingEntry:
            return ""
    return f"-{penalty:g}" if penalty else ""


BATCH_PREFIX = "nbgrade-"


def remove_leftover_batches(tmp: Path | None = None) -> list[Path]:
    """Remove the scratch folders of earlier runs of this account that were killed before they could (their
    grader.pid names a process that is gone); a folder of a run still going on is left alone."""
    removed = []
    for folder in Path(tmp or tempfile.gettempdir()).glob(f"{BATCH_PREFIX}*"):
        try:
            if folder.stat().st_uid != os.getuid() or not folder.is_dir() or folder.is_symlink():
                continue
            pid = int((folder / "grader.pid").read_text())
        except (OSError, ValueError):
            continue
        try:
            os.kill(pid, 0)
            continue                     # still running (or another account's process: not ours to judge)
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


# A lab whose grading needs more than its test cells says so in its grader's module (autograder/unseen/) with any of
# these functions, so that this pipeline names no lab (lab 8's challenge: a trusted re-scoring and a leaderboard):
#   after_grading(result, grader_dir)        adjust a graded Result before it is merged (in the grading worker)
#   forget_submission(course, student, lab)  a submission that scored 0 for its own fault
#   after_batch(course) -> str | None        once per make grade, under the course lock; a line to print
LAB_HOOKS = ("after_grading", "forget_submission", "after_batch")


def lab_hooks(name: str) -> list:
    """The functions called ``name`` (one of LAB_HOOKS) of the grader's modules that define one. A module's text is
    read first, so that modules without hooks are not imported into every grading worker."""
    assert name in LAB_HOOKS, name
    found = []
    for module in sorted(lending.SECRET_MODULES):
        if f"\ndef {name}(" in (lending.unseen_dir() / f"{module}.py").read_text(encoding="utf-8"):
            found.append(getattr(importlib.import_module(f"autograder.{module}"), name))
    return found


def sync_term(course: Path, term) -> dict:
    """The course file's due dates, deadlines and late penalties written into the course gradebook
    (autograder/term/policy.py); nothing without a course file."""
    if term is None:
        return {}
    read_alembic_head_in_process()
    with shared_course_lock(course), gradebook(course) as gb:
        return policy.sync(gb, term, course)


def shard_spec(text: str) -> tuple[int, int]:
    try:
        shard, shards = (int(part) for part in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shard {text!r}: write K/N, e.g. 0/4") from None
    if not 0 <= shard < shards:
        raise argparse.ArgumentTypeError(f"--shard {text!r}: K must be 0 to N-1")
    return shard, shards


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--course-dir", type=Path, default=Path.cwd(), help="course root (holds nbgrader_config.py)")
    ap.add_argument("--assignment", action="append", help="grade only this assignment (repeatable)")
    ap.add_argument("--student", action="append", help="grade only this student (repeatable)")
    ap.add_argument("--shard", type=shard_spec, metavar="K/N",
                    help="grade only shard K of N (0 <= K < N): every N-th student, in name order, from the K-th; N "
                         "shards at once on a shared course folder and gradebook database grade the class once")
    ap.add_argument("--jobs", type=int, default=int(os.environ.get("JOBS") or os.cpu_count() or 1),
                    help="submissions graded at once (default: $JOBS, else the number of cores)")
    ap.add_argument("--cell-timeout", type=int, default=None,
                    help="seconds a cell may run before it is interrupted and scores 0 (default: nbgrader_config.py)")
    ap.add_argument("--submission-timeout", type=int, default=1800,
                    help="seconds one submission may take in all before it is stopped (default 1800)")
    ap.add_argument("--memory-gb", type=float, default=sandbox.Limits.memory_gb, help="address space per process")
    ap.add_argument("--no-sandbox", action="store_true",
                    help="grade without the isolation of autograder/sandbox.py (only where none can be had; never "
                         "for a class: each submission's code then runs with your rights and network access)")
    # Grade on submit (autograder/on_submit.py) runs this same pipeline for one student's submission:
    ap.add_argument("--collect", action="store_true",
                    help="first collect the latest submission of each --student of each --assignment from the exchange "
                         "(nbgrader collect, owner-checked: autograder/collect.py)")
    ap.add_argument("--release-feedback", action="store_true", help="then release the feedback of what was graded")
    ap.add_argument("--show", choices=list(policy.SHOWS), default="everything",
                    help="what the feedback shows (default everything; see autograder/term/policy.py's SHOWS)")
    ap.add_argument("--exclusive", action="store_true",
                    help="run alone: wait for every other grading run to end, and make them wait (grade on submit)")
    ap.add_argument("--report", type=Path, help="also write each submission's outcome to this JSON file")
    args = ap.parse_args(argv)
    if args.collect and not (args.assignment and args.student):
        ap.error("--collect needs --assignment and --student")
    put_venv_on_path()
    course = args.course_dir.resolve()
    with grading_run(course, args.exclusive):
        return run(args, course)


def collect_latest(course: Path, assignments: list[str], students: list[str], logs: Path) -> list[str]:
    """nbgrader's collect (the course's owner-checked one) of these students' latest submissions; the problems."""
    problems = []
    for assignment in assignments:
        for student in students:
            log = logs / f"collect_{student}_{assignment}.log"
            if not nbgrader_in_process(course, "collect", assignment, log=log,   # the one just made
                                       **{"CourseDirectory.student_id": student, "OwnerCheckedCollect.take_latest": True}):
                problems.append(f"collect of {student}/{assignment} failed, see {log}")
    return problems


def run(args, course: Path) -> int:
    logs = course / "autograded" / "_logs"
    if args.collect:
        for problem in collect_latest(course, args.assignment, args.student, logs):
            print(f"warning: {problem}", file=sys.stderr)

    subs = find_submissions(course, args.assignment, args.student)
    if args.shard:
        shard, shards = args.shard
        names = sorted({student for student, _ in subs})
        mine = {name for i, name in enumerate(names) if i % shards == shard}
        subs = [(student, assignment) for student, assignment in subs if student in mine]
    if not subs:
        print(f"Nothing to grade: put submissions under {course / 'submitted'}/<student>/<assignment>/<notebook>.ipynb")
        return 2
    isolate, why = (False, "--no-sandbox") if args.no_sandbox else sandbox.available()
    if not isolate and not args.no_sandbox:
        print(f"make grade stopped, nothing was graded: the grading sandbox cannot be made here ({why}).\n"
              "Without it each submission's code would run with your rights: it could read the solutions and the other "
              "submissions and reach the network. Fix the cause, or grade unsandboxed on purpose with "
              "`make grade UNSANDBOXED=1` (python -m autograder.grade --no-sandbox).", file=sys.stderr)
        return 3
    if not isolate:
        print("note: grading without isolation (--no-sandbox): submissions run with your rights and network access")
    limits = sandbox.Limits(memory_gb=args.memory_gb)
    try:
        term = policy.load(course)
    except policy.TermFileError as exc:
        print(f"make grade stopped, nothing was graded: {exc}", file=sys.stderr)
        return 2
    deadlines = sync_term(course, term)     # due dates, extensions, late days into the gradebook: before grading

    failed: dict[tuple[str, str], str] = {}  # (student, assignment) -> why
    graders_faults: set[tuple[str, str]] = set()
    remove_leftover_batches()
    batch = Path(tempfile.mkdtemp(prefix=BATCH_PREFIX))
    (batch / "grader.pid").write_text(str(os.getpid()))
    try:
        templates = {}
        for assignment in sorted({a for _, a in subs}):
            students = [s for s, a in subs if a == assignment]
            if not (course / "solutions" / assignment).is_dir():
                failed.update({(s, assignment): f"no assignment {assignment!r} in solutions/" for s in students})
                continue
            log = logs / f"generate_{assignment}.log"
            template = None
            with shared_course_lock(course):
                generated = nbgrader_in_process(course, "generate_assignment", assignment, log=log,
                                                **{"CourseDirectory.release_directory": SCRATCH_RELEASE})
            if generated:
                template = make_template(course, assignment, batch, logs)
            if template is None:
                failed.update({(s, assignment): f"could not generate the assignment, see {log}" for s in students})
                graders_faults.update((s, assignment) for s in students)
                continue
            templates[assignment] = template

        todo = [(s, a) for s, a in subs if a in templates]
        print(f"grading {len(todo)} submission(s), {args.jobs} at a time ...", flush=True)
        tasks = [dict(course=course, template=templates[a], batch=batch, key=f"{i:05d}", student=s, assignment=a,
                      logs=logs, cell_timeout=args.cell_timeout, wall_timeout=args.submission_timeout, limits=limits,
                      isolate=isolate, extension=deadlines[s, a].moved_by if (s, a) in deadlines else None)
                 for i, (s, a) in enumerate(todo)]
        for result in graded_in_workers(tasks, args.jobs):
            key = (result.student, result.assignment)
            if result.error and result.graders_fault:
                failed[key] = f"{result.error} (the grader's fault: any previous grade is kept); log: {result.log}"
                graders_faults.add(key)
            elif result.error:
                failed[key] = f"{result.error}; log: {result.log}"
                record_failure(course, *key)
                try:
                    variants.forget(course, *key)
                except OSError:
                    pass
                for forget_submission in lab_hooks("forget_submission"):
                    forget_submission(course, *key)
            else:
                try:
                    merge(course, result)
                except Exception as exc:   # noqa: BLE001 -- the grader could not record it: keep the old grade
                    failed[key] = (f"the grade could not be recorded ({type(exc).__name__}: {str(exc)[:200]}; the "
                                   f"grader's fault: any previous grade is kept)")
                    graders_faults.add(key)
            print(f"  {result.student}/{result.assignment}: {'FAILED' if key in failed else 'graded'}", flush=True)
            shutil.rmtree(result.scratch, ignore_errors=True)
    finally:
        shutil.rmtree(batch, ignore_errors=True)

    # Every penalty the course file affects, on the grades now in (manual ones included), before feedback and CSV.
    sync_term(course, term)
    # Feedback after every grade is in (it shows manual grades too), one submission per task, ``--jobs`` at a time.
    graded = [(s, a) for s, a in subs if a in templates and (s, a) not in failed]
    for (student, assignment), ok in zip(graded, in_workers(feedback_one, [
            dict(course=course, student=s, assignment=a, log=logs / f"feedback_{s}_{a}.log", show=args.show)
            for s, a in graded], args.jobs)):
        if not ok:
            print(f"warning: feedback for {student}/{assignment} was not (fully) written, "
                  f"see {logs / f'feedback_{student}_{assignment}.log'}")
        elif args.release_feedback:
            released = nbgrader_in_process(course, "release_feedback", assignment, student,
                                           log=logs / f"release_feedback_{student}_{assignment}.log")
            if not released:
                failed[student, assignment] = "its feedback could not be released (the grader's fault)"
                graders_faults.add((student, assignment))
    (course / "grades").mkdir(exist_ok=True)
    csv = course / "grades" / "grades.csv"
    with shared_course_lock(course):
        exported = export_grades(course, csv, log=logs / "export.log")
        notes = [note for after_batch in lab_hooks("after_batch") if (note := after_batch(course))]
    if not exported:
        print(f"warning: {csv} was not written, see {logs / 'export.log'}")

    # "written": points that still await manual grading (Formgrader), or the manual score once graded.
    print(f"\n{'student':<20} {'assignment':<28} {'auto score':>12}  {'written':<10}  {'late':<6}  status")
    for student, assignment in subs:
        got, out_of, _ = scores(course, student, assignment)
        status = f"FAILED: {failed[(student, assignment)]}" if (student, assignment) in failed else "ok"
        written, late = written_column(course, student, assignment), late_column(course, student, assignment)
        print(f"{student:<20} {assignment:<28} {got:>5g} / {out_of:<5g}  {written:<10}  {late:<6}  {status}")
    pending = [f"{s}/{a}" for s, a in subs if scores(course, s, a)[2]]
    if pending:
        print(f"\n{len(pending)} submission(s) await manual grading (Formgrader); then `make grade` again "
              "refreshes feedback and the CSV (manual grades are kept).")
    print(f"\nfeedback: {course / 'feedback'}\ngrades:   {csv}\nlogs:     {logs}")
    for note in notes:
        print(note)
    if args.report:
        outcome = []
        for student, assignment in subs:
            got, out_of, _ = scores(course, student, assignment)
            key = (student, assignment)
            outcome.append({"student": student, "assignment": assignment, "graded": key not in failed,
                            "error": failed.get(key, ""), "graders_fault": key in graders_faults,
                            "score": got, "max_score": out_of})
        args.report.write_text(json.dumps(outcome, indent=1) + "\n", encoding="utf-8")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
