"""nbgrader's Submit on the course's JupyterHub: a size cap, and only a student's last few submissions kept.

nbgrader keeps every submission in the exchange forever, each up to 100 MB, so a student clicking Submit fills the
server's disk; and a submission nbgrader refuses reaches the student as a raw traceback. On the hub (`make hub`
writes the students' nbgrader configuration, publish/hub.py), Submit is ``CappedSubmit``:

- a lab folder larger than ``max_mb`` is refused with one sentence that says what to do (no traceback: the
  Assignment List shows it through ``AssignmentListWithRefusals``, this module's Jupyter server extension);
- after each submission only the student's last ``keep`` submissions of that lab stay in the exchange: it deletes
  the student's own older folders there (and their copies in the student's nbgrader cache, so the Assignment
  List shows what the exchange holds). The instructor collects the latest one, as before.

A student can still write to the world-writable exchange by hand; the operating system's disk quotas are the wall
for that (publish/jupyterhub/README.md).

Labs graded on submit (autograder/on_submit.py, the grading service on the hub) add two things:

- Submit refuses, in one sentence that says when the next one may be made, a submission past the lab's limit of
  graded submissions per hour (the service publishes the limits in ``<exchange>/<course>/on_submit/limits.json``).
  The service enforces the same limit on its side (a folder written into the exchange by hand is not graded);
  this is where a student is told;
- the Assignment List shows each submission's state beside its time: queued (and how many are ahead), being
  graded, graded, or why not (the service's ``on_submit/<folder name>.json``; that folder cannot be listed, so a
  student reads only the states of the submissions whose folder names their own nbgrader cache records).
"""
from __future__ import annotations

import datetime as dt
import glob
import json
import os
import shutil
import stat

from nbgrader.exchange import ExchangeError, ExchangeFactory
from nbgrader.exchange.default.submit import ExchangeSubmit
from nbgrader.server_extensions.assignment_list.handlers import AssignmentList
from traitlets import Float, Integer

RECORD = ".inbound"   # in each cached submission: the name of its folder in the exchange's inbound
STATUS_DIR, LIMITS = "on_submit", "limits.json"   # the grading service's (autograder/on_submit.py) public files
COUNTS = ("queued", "grading", "graded", "failed")   # states that use one of a student's graded submissions
STATES = {   # what the Assignment List says beside a submission's time
    "queued": "queued for grading", "grading": "being graded now", "graded": "graded on submit",
    "failed": "not graded", "grader_error": "the grader failed, not your fault",
    "over_limit": "not graded on submit (past the hourly limit)", "superseded": "not graded (a newer one was)",
    "before": "not graded on submit (made before it was turned on)", "refused": "not graded (not made by you)",
    "late": "not graded on submit (after your deadline: your instructor grades it)",
}


def status_dir(exchange_root: str, course_id: str) -> str:
    return os.path.join(exchange_root, course_id, STATUS_DIR)


def read_json(path: str) -> dict | None:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def submission_state(cached_folder: str, exchange_root: str, course_id: str) -> dict | None:
    """The grading service's state of one of this student's submissions (its cache folder), or None."""
    try:
        with open(os.path.join(cached_folder, RECORD)) as fh:
            inbound = os.path.basename(fh.read().strip())
    except OSError:
        return None
    return read_json(os.path.join(status_dir(exchange_root, course_id), inbound + ".json"))


def hourly_refusal(exchange_root: str, course: str, lab: str, student: str, cache_path: str,
                   now: dt.datetime | None = None) -> str | None:
    """The sentence refusing one more submission of ``lab`` this hour, or None where it may be made: the student's
    own cached submissions of the last hour count, but for those the grading service did not grade on their
    account (its fault, past the limit, superseded)."""
    limits = read_json(os.path.join(status_dir(exchange_root, course), LIMITS)) or {}
    if lab not in limits:
        return None
    per_hour = int(limits[lab]["per_hour"])
    now = now or dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
    used = []
    for cached in glob.glob(os.path.join(glob.escape(cache_path), glob.escape(f"{student}+{lab}") + "+*")):
        try:
            when = dt.datetime.strptime(os.path.basename(cached).split("+")[2], "%Y-%m-%d %H:%M:%S.%f %Z")
        except (IndexError, ValueError):
            continue
        state = submission_state(cached, exchange_root, course)
        if now - when < dt.timedelta(hours=1) and (state is None or state.get("state") in COUNTS):
            used.append(when)
    if len(used) < per_hour:
        return None
    again = min(used) + dt.timedelta(hours=1)
    # The dialog shows one line without wrapping: what to do comes first.
    times = "once" if per_hour == 1 else f"{per_hour} times"
    return (f"Not submitted: you can submit {lab} again from {again:%H:%M} UTC. It is graded when you submit, at "
            f"most {times} an hour, and you submitted it {len(used)} time(s) since {min(used):%H:%M} UTC. Your work "
            f"is as you left it.")


class SubmitRefused(ExchangeError):
    """A submission this course does not take, with the sentence the student reads."""


class CappedSubmit(ExchangeSubmit):
    keep = Integer(5, help="How many of a student's submissions of one lab stay in the exchange.").tag(config=True)
    max_mb = Float(20.0, help="The most a submitted lab folder may hold, in MB.").tag(config=True)

    def copy_files(self):
        self.check_hourly_limit()
        size = self.get_size(self.src_path)
        if size > self.max_mb * 1e6:
            folder = os.path.relpath(self.src_path, self.assignment_dir)
            message = (f"Not submitted: your folder {folder}/ holds {size / 1e6:.1f} MB, more than the "
                       f"{self.max_mb:g} MB a submission may hold, so remove large files (data, checkpoints, "
                       f"outputs) from it and submit again; only your last {self.keep} submissions of a lab are kept.")
            self.log.error(message)
            raise SubmitRefused(message)
        super().copy_files()
        cached = os.path.join(self.cache_path, self.assignment_filename.rsplit("+", 1)[0]
                              if self.add_random_string else self.assignment_filename)
        with open(os.path.join(cached, RECORD), "w") as fh:
            fh.write(self.assignment_filename)
        self.keep_last()

    def check_hourly_limit(self) -> None:
        """Refuse, in words, a submission past the lab's limit of graded submissions per hour (graded on submit)."""
        message = hourly_refusal(self.root, self.coursedir.course_id, self.coursedir.assignment_id,
                                 self.assignment_filename.split("+")[0], self.cache_path)
        if message:
            self.log.error(message)
            raise SubmitRefused(message)

    def keep_last(self) -> None:
        """Delete this student's submissions of this lab but the last ``keep``, in the exchange and the cache."""
        student_lab = "+".join(self.assignment_filename.split("+")[:2])
        cached = sorted(glob.glob(os.path.join(glob.escape(self.cache_path), glob.escape(student_lab) + "+*")))
        # The names end in nbgrader's timestamp (one fixed format, UTC): name order is submission order.
        for old in cached[:-max(self.keep, 1)]:
            record = os.path.join(old, RECORD)
            if os.path.isfile(record):   # submissions from before this course's Submit have no record: left as is
                with open(record) as fh:
                    self.remove_own(os.path.join(self.inbound_path, os.path.basename(fh.read().strip())))
                shutil.rmtree(old, ignore_errors=True)

    def remove_own(self, path: str) -> None:
        """The exchange is shared: delete only a real folder that this account owns."""
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid():
            shutil.rmtree(path)
            self.log.info("Removed an older submission: %s", os.path.basename(path))


class AssignmentListWithRefusals(AssignmentList):
    """nbgrader's Assignment List, but a refused Submit shows the refusal's sentence instead of a traceback."""

    def submit_assignment(self, course_id, assignment_id):
        result = super().submit_assignment(course_id, assignment_id)
        last_line = str(result.get("value", "")).rstrip().rpartition("\n")[2]
        prefix = f"{SubmitRefused.__module__}.{SubmitRefused.__qualname__}: "
        if not result["success"] and last_line.startswith(prefix):
            result["value"] = last_line[len(prefix):]
        return result

    def list_submitted_assignments(self, course_id=None):
        """nbgrader's list, with the grading service's state of each submission beside its time."""
        result = super().list_submitted_assignments(course_id=course_id)
        if not result.get("success"):
            return result
        with self.get_assignment_dir_config() as config:
            root = ExchangeFactory(config=config).List(config=config).root
        for assignment in result["value"]:
            for submission in assignment.get("submissions", []):
                state = submission_state(submission.get("path") or "", root, submission.get("course_id", ""))
                if state and state.get("state") in STATES:
                    words = STATES[state["state"]]
                    if state["state"] == "queued" and state.get("ahead"):
                        words += f", {state['ahead']} ahead"
                    elif state["state"] in ("failed", "over_limit", "grader_error") and state.get("detail"):
                        words += f": {state['detail']}"
                    submission["timestamp"] = f"{submission['timestamp']} ({words})"
        return result


def _jupyter_server_extension_points():
    return [{"module": "trainkit.submit"}]


def _load_jupyter_server_extension(serverapp):
    """Replace the Assignment List's manager (jupyter_server loads extensions in name order: nbgrader's first)."""
    settings = serverapp.web_app.settings
    if "assignment_list_manager" not in settings:
        serverapp.log.warning("trainkit.submit: nbgrader's assignment_list extension is not loaded; nothing to do")
        return
    manager = AssignmentListWithRefusals(parent=serverapp)
    manager.root_dir = serverapp.root_dir
    settings["assignment_list_manager"] = manager
