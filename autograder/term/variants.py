"""Which variants of each judgement exercise a graded submission passed, for the item analysis (autograder/term/items.py).

A judgement exercise's band checks (the locked helper cells of each lab) call ``trainkit.checks.record_outcomes`` with
every variant they judged. That writes only where ``make grade`` set ``OUTCOMES_ENV``: into a file in the kernel's
outbox folder (the one lab 8's challenge writes its run into). Right after each locked cell the grader takes the file
out of the kernel's reach (``take``, called by autograder/preprocessors.py's SafeExecute): the unseen variants' names
and, in labs 6 and 7, their causes must not be readable by the student's code in a later cell. After the notebook ran,
the grading worker reads what was taken; the main process keeps it in the course (``keep``) as
``grades/variants/<lab>/<student>.json``.

Where it is kept, and why there: not beside the autograded notebook, because nbgrader's generate_feedback copies
every other file of that folder into the student's feedback, and the unseen variants' names describe them.
``grades/`` reaches no student.

What it is worth: the record comes from the student's own kernel, so a submission can write its own. It is a statistic
for the instructor, never a grade. A forged record adds that student's rows (the report shows only the lab's own
judgement exercises); what the file holds is checked for shape and size (``read_outbox``), and a file that is not a
record is dropped.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

# = trainkit.checks.OUTCOMES_ENV (not imported: that module brings torch into every grading process); a test holds
# the two equal.
OUTCOMES_ENV = "TRAINKIT_OUTCOMES_FILE"
FILE = "variant_outcomes.json"       # its name in the kernel's outbox folder
FOLDER = Path("grades") / "variants"  # in the course: <lab>/<student>.json
MAX_BYTES = 512 * 1024
MAX_EXERCISES, MAX_GROUPS, MAX_VARIANTS, MAX_NAME = 32, 16, 2000, 200


def read_outbox(path: Path) -> dict | None:
    """The record a graded kernel wrote at ``path``: {exercise: {what: [{"name", "passed"}, ...]}}, or None where
    there is none or it is not such a record (too large, not JSON, another shape)."""
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_BYTES:
            return None
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if well_formed(record) else None


def take(outbox: Path) -> None:
    """Move what a test cell just recorded out of the kernel's reach (SafeExecute calls this after every locked cell):
    merged into ``FILE`` one folder up (the scratch copy's .grader/, which the sandbox does not show), the outbox
    emptied. Left in the outbox, the record of lab 6's and 7's unseen variants (which names their causes) would be
    readable by the student's code in every later cell."""
    record = read_outbox(outbox)
    try:
        if outbox.exists() or outbox.is_symlink():
            outbox.unlink()
    except OSError:
        pass
    if record is None:
        return
    kept = outbox.parent.parent / FILE
    merged = read_outbox(kept) or {}
    for exercise, groups in record.items():
        merged.setdefault(exercise, {}).update(groups)
    if well_formed(merged):
        staged = kept.with_name(f".{kept.name}.new")
        staged.write_text(json.dumps(merged), encoding="utf-8")
        staged.replace(kept)     # never through a link


def well_formed(record) -> bool:
    def name(x) -> bool:
        return isinstance(x, str) and 0 < len(x) <= MAX_NAME

    if not isinstance(record, dict) or len(record) > MAX_EXERCISES:
        return False
    for exercise, groups in record.items():
        if not name(exercise) or not isinstance(groups, dict) or len(groups) > MAX_GROUPS:
            return False
        for what, rows in groups.items():
            if not name(what) or not isinstance(rows, list) or len(rows) > MAX_VARIANTS:
                return False
            if not all(isinstance(r, dict) and set(r) == {"name", "passed"} and isinstance(r["name"], str)
                       and len(r["name"]) <= MAX_NAME and isinstance(r["passed"], bool) for r in rows):
                return False
    return True


def path(course: Path, student: str, lab: str) -> Path:
    return course / FOLDER / lab / f"{student}.json"


def keep(course: Path, student: str, lab: str, record: dict | None) -> None:
    """Keep a graded submission's record (written whole, then renamed into place); None removes an older one, so a
    regraded submission that recorded nothing does not keep the last grading's outcomes."""
    dest = path(course, student, lab)
    if record is None:
        forget(course, student, lab)
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    staged = dest.with_name(f".{dest.name}.{os.getpid()}")
    staged.write_text(json.dumps(record, indent=1), encoding="utf-8")
    staged.replace(dest)


def forget(course: Path, student: str, lab: str) -> None:
    """A submission that scored 0 for its own fault: its earlier outcomes no longer describe it."""
    path(course, student, lab).unlink(missing_ok=True)


def load(course: Path, lab: str, students=None) -> dict[str, dict]:
    """{student: record} of a lab, of ``students`` only where given (those the gradebook holds a grade for)."""
    found = {}
    for file in sorted((course / FOLDER / lab).glob("*.json")):
        if students is not None and file.stem not in students:
            continue
        record = read_outbox(file)
        if record is not None:
            found[file.stem] = record
    return found


def is_unseen(what: str) -> bool:
    """Whether a group of variants is the grader's (the band checks name them "the grader's ...")."""
    return "grader" in what or "unseen" in what
