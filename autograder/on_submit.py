"""Grade on submit: a hub service that grades each new submission of the labs the course file lists under
``[on_submit]`` and gives that student their feedback, through the same sandboxed pipeline as `make grade`.

    python -m autograder.on_submit --course-dir DIR --exchange DIR    # the service (make hub starts it)
    python -m autograder.on_submit --once                             # grade what is waiting, then stop
    python -m autograder.on_submit --status                           # the queue, for the instructor

make hub runs it as a JupyterHub service, as the grader account in the instructor's checkout, with no command to
type; it idles while the course file turns nothing on. Each pass it:

1. reads term.toml (autograder/term/policy.py): which labs, what their feedback shows, how many graded submissions
   a student may make of one lab in any hour; it publishes that (no extension, nothing per student) in
   ``<exchange>/<course>/on_submit/limits.json``, which the students' Submit reads to refuse a submission past the
   limit in words before it is made (trainkit/submit.py);
2. records every new submission folder of those labs in the exchange's inbound, in submission order (the
   exchange's timestamp), in its queue: ``grades/on_submit/queue.db`` (SQLite; every change is one transaction);
3. grades the oldest waiting ones, up to ``--jobs`` students of one lab at a time, by running
   ``python -m autograder.grade --collect --release-feedback --exclusive --show MODE`` for them: nbgrader's collect
   (owner-checked), the sandboxed grading, the feedback as the lab's mode says, and its release to the student.
   ``--exclusive`` holds the course's grading-run lock alone, so this service and the instructor's `make grade`
   never grade at the same time (each waits for the other's run).

A submission's state, which the student's Assignment List shows beside it (trainkit/submit.py reads
``<exchange>/<course>/on_submit/<folder name>.json``; that folder lets nobody list it, so only who knows a
submission's folder name, its student, can read its state):

- ``queued`` -> ``grading`` -> ``graded`` (feedback released), or ``failed`` (not gradable, in words: no notebook of
  the lab, a run past the time limit, ...);
- ``grader_error``: the grader failed through its own fault (a kernel that did not start, a full disk): it does not
  count against the limit and is tried again, up to ``TRIES`` times;
- ``over_limit``: made past the limit (Submit refuses it; only a folder written into the exchange by hand gets
  here): not graded on submit, and it does not count;
- ``superseded``: a newer submission of the same student and lab was waiting too: collect takes the newest, so that
  one is graded instead, and the older one does not count;
- ``refused``: a folder in a student's name that their account did not make (every account may write into the
  inbound), or one dated earlier than it was made (collect refuses both): never graded on submit and never
  counted;
- ``late``: made after the student's own deadline (due date and extension): the grade is then the instructor's,
  and grading here would replace what they collected in the shared gradebook; it does not count;
- ``before``: made before the lab was turned on here (the submissions in the exchange when the service first sees
  a lab listed): left to the instructor's grading; it does not count.

Crash-safe: a row is ``grading`` only while its run is on. Killed mid-grade (the run dies with it), the service
finds those rows at its next start and queues them again; a graded row is never graded again. One service runs per
course (a lock in ``grades/on_submit/``): JupyterHub restarts a managed service that dies, within its 30-second
poll, and a second one started by hand waits for the first to end. The grade itself is
idempotent (the same notebook gets the same grade), so a run cut short and repeated records one grade.
"""
from __future__ import annotations

import argparse
import ctypes
import datetime as dt
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import traceback
from contextlib import closing
from pathlib import Path

from autograder.collect import folder_problem
from autograder.term import policy
from trainkit.submit import COUNTS, LIMITS, STATUS_DIR

STATE_DIR = Path("grades") / "on_submit"
TRIES = 3                             # a submission the grader fails on through its own fault is tried this often
RETRY_AFTER_S = 60
WINDOW = dt.timedelta(hours=1)
CLOCK_SKEW_S = 300.0                  # as collect's (autograder/collect.py)

SCHEMA = """
CREATE TABLE IF NOT EXISTS submission (
    name TEXT PRIMARY KEY,            -- the folder in the exchange's inbound: student+lab+timestamp+random
    student TEXT NOT NULL,
    lab TEXT NOT NULL,
    submitted TEXT NOT NULL,          -- the exchange's timestamp, naive UTC, ISO format
    state TEXT NOT NULL,
    detail TEXT NOT NULL DEFAULT '',
    tries INTEGER NOT NULL DEFAULT 0,
    score REAL, max_score REAL,
    seen REAL NOT NULL DEFAULT 0,     -- when the service first saw it (its clock: the limit counts by this)
    updated REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS lab_on (lab TEXT PRIMARY KEY, since REAL NOT NULL);
"""


def parse_name(name: str) -> tuple[str, str, dt.datetime] | None:
    """(student, lab, submitted as naive UTC) of an inbound folder name, or None for one that is not a submission."""
    from nbgrader.utils import parse_utc

    parts = name.split("+")
    if len(parts) < 3 or not name.isprintable():
        return None
    try:
        name.encode("utf-8")           # a name with undecodable bytes (surrogates) cannot be stored: not a submission
        when = parse_utc(parts[2]).replace(tzinfo=None)
    except (ValueError, OverflowError, UnicodeError):
        return None
    return (parts[0], parts[1], when) if dt.datetime(2000, 1, 1) <= when <= dt.datetime(2200, 1, 1) else None


class Queue:
    """The service's queue of submissions, in SQLite (one transaction per change: a kill loses nothing)."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(path, isolation_level=None, timeout=30)
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.executescript(SCHEMA)

    def close(self) -> None:
        self.db.close()

    def rows(self, where: str = "1", *args) -> list[sqlite3.Row]:
        return self.db.execute(f"SELECT * FROM submission WHERE {where} ORDER BY submitted, name", args).fetchall()

    def set(self, name: str, state: str, detail: str = "", **values) -> None:
        fields = ", ".join(f"{k} = ?" for k in values)
        self.db.execute(f"UPDATE submission SET state = ?, detail = ?, updated = ?{', ' + fields if fields else ''} "
                        "WHERE name = ?", (state, detail, time.time(), *values.values(), name))

    def recover(self) -> list[str]:
        """Rows left ``grading`` by a service that was killed mid-grade: queued again. Returns their names."""
        names = [r["name"] for r in self.rows("state = 'grading'")]
        for name in names:
            self.set(name, "queued", "queued again: the grading service restarted")
        return names

    def used(self, student: str, lab: str, now: float) -> list[float]:
        """When (the service's clock) this student's submissions of this lab that count against the limit were seen,
        in the hour before ``now``. By the service's clock, not the folder's date: that one is the student's to
        write (within collect's skew), so dating folders alike or earlier would slip under the limit."""
        marks = ",".join("?" * len(COUNTS))
        rows = self.rows(f"student = ? AND lab = ? AND seen > ? AND seen <= ? AND state IN ({marks})",
                         student, lab, now - WINDOW.total_seconds(), now, *COUNTS)
        return [r["seen"] for r in rows]

    def add(self, name: str, student: str, lab: str, when: dt.datetime, per_hour: int, state: str = "queued",
            detail: str = "") -> str:
        """Record a new submission: queued, or over the limit (or ``state``). Returns its state."""
        now = self.clock()
        used = self.used(student, lab, now)
        if state == "queued" and len(used) >= per_hour:
            again = dt.datetime.fromtimestamp(min(used), dt.timezone.utc) + WINDOW
            state = "over_limit"
            detail = (f"{lab} is graded on submit at most {per_hour} time(s) an hour; the next could be made from "
                      f"{again:%H:%M} UTC. It is still your latest submission for the final grading")
        self.db.execute("INSERT OR IGNORE INTO submission (name, student, lab, submitted, state, detail, seen, "
                        "updated) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        (name, student, lab, when.isoformat(), state, detail, now, time.time()))
        return state

    clock = staticmethod(time.time)   # the service's clock (tests move it)

    def next_batch(self, jobs: int) -> list[sqlite3.Row]:
        """The oldest waiting submissions of one lab, one per student, at most ``jobs``; an older one of a student
        who has a newer one waiting is superseded (collect takes the newest)."""
        retry = time.time() - RETRY_AFTER_S
        waiting = self.rows("state = 'queued' OR (state = 'grader_error' AND tries < ? AND updated < ?)", TRIES, retry)
        newest: dict[tuple[str, str], sqlite3.Row] = {}
        for row in waiting:
            key = (row["student"], row["lab"])
            if key in newest:
                self.set(newest[key]["name"], "superseded",
                         "not graded: a newer submission of yours was waiting, and that one is graded instead")
            newest[key] = row
        rows = sorted(newest.values(), key=lambda r: (r["submitted"], r["name"]))
        if not rows:
            return []
        lab = rows[0]["lab"]
        return [r for r in rows if r["lab"] == lab][:max(1, jobs)]


class Service:
    def __init__(self, course: Path, exchange: Path, jobs: int = 1, sandbox: bool = True,
                 python: str = sys.executable):
        self.course, self.exchange, self.jobs, self.sandbox, self.python = course, exchange, jobs, sandbox, python
        self.queue = Queue(course / STATE_DIR / "queue.db")
        from traitlets.config.loader import PyFileConfigLoader

        config = PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config()
        self.course_id = config.CourseDirectory.course_id
        # As collect (autograder/collect.py): an exchange without an account per student opts in explicitly.
        self.accept_own = bool(config.OwnerCheckedCollect.get("accept_own_folders", False))
        self.status_dir = exchange / self.course_id / STATUS_DIR
        self.child: subprocess.Popen | None = None
        self.skipped: set[str] = set()   # folders that could not be recorded (told once in the log)

    # -- what students see ------------------------------------------------------------------------------------
    def publish_limits(self, on: policy.OnSubmit | None) -> None:
        """limits.json: what Submit checks and says before a submission is made (no student's data in it)."""
        self.status_dir.mkdir(parents=True, exist_ok=True)
        self.status_dir.chmod(0o711)   # readable by name, not listable: a student reads only their own states
        limits = {lab: {"per_hour": on.per_hour, "show": mode, "text": on.describe(lab)}
                  for lab, mode in (on.show.items() if on else [])}
        self.write_public(LIMITS, limits)

    def write_public(self, name: str, data: dict) -> None:
        """An atomic write of a world-readable file in the status folder."""
        fd, tmp = tempfile.mkstemp(dir=self.status_dir, prefix=".tmp-")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh)
        os.chmod(tmp, 0o644)
        try:
            os.replace(tmp, self.status_dir / name)
        except OSError:
            os.unlink(tmp)
            raise

    def tell(self, row_name: str) -> None:
        (row,) = self.queue.rows("name = ?", row_name)
        ahead = 0
        if row["state"] == "queued":
            ahead = len(self.queue.rows("state IN ('queued', 'grading') AND submitted < ?", row["submitted"]))
        try:   # the name is the student's (a folder they made): one the file system refuses costs only its state
            self.write_public(f"{row_name}.json", {"state": row["state"], "detail": row["detail"], "ahead": ahead,
                                                   "updated": row["updated"]})
        except OSError as exc:
            print(f"on_submit: no state file for {row_name[:80]!r}...: {exc}", flush=True)

    def tell_queued(self) -> None:
        for row in self.queue.rows("state = 'queued'"):
            self.tell(row["name"])

    # -- one pass ---------------------------------------------------------------------------------------------
    def scan(self, on: policy.OnSubmit, term: policy.Term) -> int:
        """Record the new submissions of the labs graded on submit; returns how many."""
        inbound = self.exchange / self.course_id / "inbound"
        known = {r["name"] for r in self.queue.rows()}
        already_on = {r["lab"] for r in self.queue.db.execute("SELECT lab FROM lab_on")}
        new = []
        for path in inbound.iterdir() if inbound.is_dir() else []:
            if path.name in known:
                continue
            parsed = parse_name(path.name)
            if parsed and parsed[1] in on.show:
                new.append((parsed[2], path.name, parsed))
        for _, name, (student, lab, when) in sorted(new):
            try:
                self.record(inbound / name, student, lab, when, on, term, lab in already_on)
                self.tell(name)
            except Exception:   # noqa: BLE001 -- one folder must not stop the service for the class
                if name not in self.skipped:
                    print(f"on_submit: {name[:80]!r}... left aside:\n{traceback.format_exc()}", flush=True)
                self.skipped.add(name)
        for lab in set(on.show) - already_on:
            self.queue.db.execute("INSERT INTO lab_on (lab, since) VALUES (?, ?)", (lab, time.time()))
        return len(new)

    def record(self, path: Path, student: str, lab: str, when: dt.datetime, on: policy.OnSubmit,
               term: policy.Term, lab_was_on: bool) -> None:
        """Queue one new submission folder, or record why it is not graded on submit."""
        name = path.name
        # Someone else's folder in this student's name (it must not use up their hourly limit), or one dated earlier
        # than it was made (to jump the queue, or to look on time): refused, as collect refuses them.
        forged = folder_problem(str(path), student, when, accept_own=self.accept_own, skew_s=CLOCK_SKEW_S)
        if forged:
            self.queue.add(name, student, lab, when, on.per_hour, state="refused",
                           detail=f"{forged}: not graded, and it does not count")
        elif not lab_was_on:   # made before the lab was turned on: the instructor's grading takes it, at no cost
            self.queue.add(name, student, lab, when, on.per_hour, state="before",
                           detail="made before this lab was graded on submit")
        elif when > term.on_time_until(student, lab):
            # Past the student's own deadline the grade is the instructor's: grading here would replace what they
            # collected (and maybe graded and released) in the shared gradebook.
            self.queue.add(name, student, lab, when, on.per_hour, state="late",
                           detail="made after your deadline: your instructor's grading takes it, under the late "
                                  "policy")
        else:
            self.queue.add(name, student, lab, when, on.per_hour)

    def grade(self, rows: list, on: policy.OnSubmit) -> None:
        lab = rows[0]["lab"]
        for row in rows:
            self.queue.set(row["name"], "grading", "being graded now", tries=row["tries"] + 1)
            self.tell(row["name"])
        self.tell_queued()
        report = self.course / STATE_DIR / "last_report.json"
        report.unlink(missing_ok=True)
        command = [self.python, "-m", "autograder.grade", "--course-dir", str(self.course), "--assignment", lab,
                   *[a for r in rows for a in ("--student", r["student"])], "--jobs", str(self.jobs), "--collect",
                   "--release-feedback", "--exclusive", "--show", on.show.get(lab, "visible"),
                   "--report", str(report), *([] if self.sandbox else ["--no-sandbox"])]
        log = self.course / STATE_DIR / "grade.log"
        with open(log, "a", encoding="utf-8") as out:
            out.write(f"\n--- {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M:%S} UTC: {' '.join(command)}\n")
            out.flush()
            self.child = subprocess.Popen(command, cwd=self.course, stdout=out, stderr=subprocess.STDOUT,
                                          preexec_fn=die_with_parent)
            code = self.child.wait()
            self.child = None
        outcome = {}
        if report.is_file():
            outcome = {(o["student"], o["assignment"]): o for o in json.loads(report.read_text(encoding="utf-8"))}
        for row in rows:
            got = outcome.get((row["student"], lab))
            again = ("it will try again" if row["tries"] + 1 < TRIES else
                     f"it gave up after {TRIES} tries, and your instructor's grading will take it")
            if got is None and code == 2:
                self.queue.set(row["name"], "failed",
                               "no submission of yours could be collected from the exchange (refused or missing)")
            elif got is None or (not got["graded"] and got["graders_fault"]):
                self.queue.set(row["name"], "grader_error",
                               f"the grader failed through its own fault; this does not count, and {again}")
            elif got["graded"]:
                self.queue.set(row["name"], "graded", "graded: its feedback is ready to fetch",
                               score=got["score"], max_score=got["max_score"])
            else:
                self.queue.set(row["name"], "failed", got["error"].split("; log:")[0])
            self.tell(row["name"])

    def step(self) -> bool:
        """One pass: read the course file, record what is new, grade one batch. True if it graded something."""
        try:
            term = policy.load(self.course)
        except policy.TermFileError as exc:
            print(f"on_submit: the course file is malformed, nothing is graded until it is fixed: {exc}", flush=True)
            return False
        on = term.on_submit if term else None
        self.publish_limits(on)
        if not on or not on.show:
            return False
        self.scan(on, term)
        rows = self.queue.next_batch(self.jobs)
        if not rows:
            return False
        self.grade(rows, on)
        return True

    def run(self, poll: float, once: bool, wait: bool = True) -> bool:
        """Grade what comes in (``once``: what is waiting), as the one service of this course: another one running
        makes this one wait for it to end (or, without ``wait``, return False at once)."""
        import fcntl

        with open(self.course / STATE_DIR / "service.lock", "a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                return False
            for name in self.queue.recover():     # left 'grading' by a service that was killed: queued again
                self.tell(name)
            while True:
                try:
                    graded = self.step()
                except Exception:   # noqa: BLE001 -- the service outlives any one pass; the queue keeps its place
                    print(f"on_submit: a pass failed, the next one goes on:\n{traceback.format_exc()}", flush=True)
                    graded = False
                    for name in self.queue.recover():   # no run of ours is on now: its rows wait again
                        self.tell(name)
                    if once:
                        raise
                if once and not graded:
                    return True
                if not graded:
                    time.sleep(poll)

    def stop(self, *_) -> None:
        """SIGTERM (the hub stopping): end the run under way; its rows are queued again at the next start."""
        if self.child and self.child.poll() is None:
            self.child.terminate()
        raise SystemExit(0)


def die_with_parent() -> None:
    """In the grading run's process: the kernel kills it when the service dies (even by SIGKILL), so a killed
    service leaves no run behind to race the next one."""
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def show_status(course: Path) -> int:
    path = course / STATE_DIR / "queue.db"
    if not path.is_file():
        print("Nothing has been graded on submit yet.")
        return 0
    with closing(Queue(path)) as queue:
        print(f"{'submitted (UTC)':<20} {'student':<16} {'lab':<28} {'state':<13} score")
        for row in queue.rows():
            score = f"{row['score']:g} / {row['max_score']:g}" if row["score"] is not None else ""
            print(f"{row['submitted'][:19]:<20} {row['student']:<16} {row['lab']:<28} {row['state']:<13} {score}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m autograder.on_submit", description=__doc__.split("\n\n")[0])
    ap.add_argument("--course-dir", type=Path, default=Path.cwd())
    ap.add_argument("--exchange", type=Path, help="nbgrader's exchange root (default: the course's .nbgrader_exchange)")
    ap.add_argument("--jobs", type=int, default=int(os.environ.get("JOBS") or 1),
                    help="submissions graded at once (default $JOBS, else 1)")
    ap.add_argument("--poll", type=float, default=2.0, help="seconds between looks at the exchange (default 2)")
    ap.add_argument("--once", action="store_true", help="grade what is waiting, then stop")
    ap.add_argument("--status", action="store_true", help="print the queue and stop")
    ap.add_argument("--no-sandbox", action="store_true", help="as make grade's (never for a class)")
    args = ap.parse_args(argv)
    course = args.course_dir.resolve()
    if args.status:
        return show_status(course)
    exchange = (args.exchange or course / ".nbgrader_exchange").resolve()
    service = Service(course, exchange, jobs=args.jobs, sandbox=not args.no_sandbox)
    signal.signal(signal.SIGTERM, service.stop)
    print(f"on_submit: watching {exchange / service.course_id / 'inbound'} for {course}", flush=True)
    if not service.run(args.poll, args.once, wait=not args.once):
        print("on_submit: another grading service of this course is running; it grades what is waiting")
    return 0


if __name__ == "__main__":
    sys.exit(main())
