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
"""
from __future__ import annotations

import glob
import os
import shutil
import stat

from nbgrader.exchange import ExchangeError
from nbgrader.exchange.default.submit import ExchangeSubmit
from nbgrader.server_extensions.assignment_list.handlers import AssignmentList
from traitlets import Float, Integer

RECORD = ".inbound"   # in each cached submission: the name of its folder in the exchange's inbound


class SubmitRefused(ExchangeError):
    """A submission this course does not take, with the sentence the student reads."""


class CappedSubmit(ExchangeSubmit):
    keep = Integer(5, help="How many of a student's submissions of one lab stay in the exchange.").tag(config=True)
    max_mb = Float(20.0, help="The most a submitted lab folder may hold, in MB.").tag(config=True)

    def copy_files(self):
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
