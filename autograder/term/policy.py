"""Deadlines, the late policy and extensions of a term, from one course file (``term.toml`` at the course root).

The course file (format: ``term.example.toml``, docs/term_policy.md) holds each lab's due date, the late policy
(grace, a penalty per started hour or day with a cap, a cut-off, a bank of late days per student) and per-student
extensions. It is applied through nbgrader's own late-penalty mechanism, and only there:

- ``sync`` writes the due dates into the gradebook (``Assignment.duedate``) and each submission's own deadline
  (``SubmittedAssignment.extension``: the student's extension plus the late days drawn from their bank, in
  submission order), then sets every submission's ``late_submission_penalty`` anew. ``make grade``
  (autograder/grade.py) runs it before grading and again after, so a changed deadline or a new extension changes
  every penalty it affects, graded again or not;
- ``TermLatePenalty``, nbgrader's ``AssignLatePenalties.plugin_class`` (nbgrader_config.py), turns the seconds
  nbgrader counts past that deadline into the penalty; ``sync`` uses the same ``Policy.penalty``.

A submission's time is the one the exchange wrote at submit (``timestamp.txt``, read by nbgrader and checked by
autograder/collect.py), never a date inside a notebook. The gradebook, the Formgrader, the CSV and the feedback all
read nbgrader's fields, so they agree.
"""
from __future__ import annotations

import datetime as dt
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from nbgrader.plugins import LateSubmissionPlugin
from traitlets import Unicode

COURSE_FILE = "term.toml"
VERSION = 1
DUE_NOTE = "DUE.md"   # written into each released lab folder by `make labs` (publish/release.py)
DAY = dt.timedelta(days=1)
POLICY_KEYS = {"grace_minutes", "penalty_per_hour", "penalty_per_day", "cap", "cutoff_hours", "cutoff_days",
               "late_days", "final"}
FINAL = ("latest", "last_on_time")   # which submission the instructor's collect takes (autograder/collect.py)
EXTENSION_KEYS = {"student", "lab", "until", "hours", "note"}
ON_SUBMIT_KEYS = {"per_hour", "labs"}
# What the feedback of a submission graded on submit shows (autograder/on_submit.py, autograder/feedback.py), in the
# words students read before they submit.
SHOWS = {
    "visible": "whether the tests you can already see in the lab pass; the score of a test cell with hidden tests, "
               "and the judgement exercises (their unseen variants), are graded after the deadline",
    "bands": "whether the tests you can already see in the lab pass, and the band each judgement exercise reached "
             "(not which of its unseen variants failed); the score of a test cell with hidden tests is graded after "
             "the deadline",
    "everything": "every test, hidden tests and judgement exercises included",
}


class TermFileError(ValueError):
    """The course file is malformed; the message is one sentence that names the key."""


@dataclass(frozen=True)
class Policy:
    """The late policy. Lateness is counted from the student's own deadline (due date, extension, late days)."""
    grace_minutes: float = 0.0
    per_hour: float | None = None     # fraction of the score per started hour late
    per_day: float | None = None      # fraction of the score per started day late
    cap: float | None = None          # at most this fraction is taken off
    cutoff_hours: float | None = None  # later than this, the score is 0
    late_days: int = 0                # whole days per student for the term, drawn in submission order
    final: str = "latest"             # the submission graded: the latest, or the last one made on time (if any)

    def fraction(self, seconds_late: float) -> float:
        """The fraction of the score a submission this late loses (0 on time or within the grace period)."""
        if seconds_late <= self.grace_minutes * 60:
            return 0.0
        if self.cutoff_hours is not None and seconds_late > self.cutoff_hours * 3600:
            return 1.0
        rate, unit = (self.per_hour, 3600) if self.per_hour is not None else (self.per_day, 86400)
        if not rate:
            return 0.0
        lost = math.ceil(seconds_late / unit) * rate
        return min(lost, self.cap if self.cap is not None else 1.0, 1.0)

    def penalty(self, score: float, seconds_late: float) -> float | None:
        """nbgrader's late_submission_penalty (points) for a notebook that scored ``score``; None when on time."""
        if seconds_late <= 0:
            return None
        return round(self.fraction(seconds_late) * max(score or 0.0, 0.0), 6)

    def describe(self) -> str:
        """The policy in words, for students."""
        parts = []
        if self.grace_minutes:
            parts.append(f"{self.grace_minutes:g} minutes' grace")
        if self.per_hour or self.per_day:
            rate, unit = (self.per_hour, "hour") if self.per_hour else (self.per_day, "day")
            parts.append(f"then {_pct(rate)} of the score per started {unit} late"
                         + (f", at most {_pct(self.cap)}" if self.cap is not None else ""))
        if self.cutoff_hours is not None:
            parts.append(f"a submission more than {_duration(self.cutoff_hours * 3600)} late scores 0")
        text = ("Late work: " + "; ".join(parts) + ".") if parts else "Late work is not penalised."
        if self.final == "last_on_time":
            text += (" If you submit again after your deadline, the last submission you made on time is the one "
                     "graded.")
        if self.late_days:
            text += (f" You have {self.late_days} late day{'s' if self.late_days != 1 else ''} for the term: each "
                     "late submission uses whole days from it automatically, in the order you submit, before any "
                     "penalty.")
        return text


@dataclass(frozen=True)
class Deadline:
    """One student's deadline for one lab: the due date (naive UTC, as nbgrader stores it) moved by their extension
    and the late days drawn from their bank."""
    due: dt.datetime
    extension: dt.timedelta = dt.timedelta(0)
    late_days: int = 0

    @property
    def moved_by(self) -> dt.timedelta | None:
        """What nbgrader's ``SubmittedAssignment.extension`` holds (None for no move)."""
        total = self.extension + self.late_days * DAY
        return total if total > dt.timedelta(0) else None


@dataclass(frozen=True)
class OnSubmit:
    """Grade on submit (autograder/on_submit.py): which labs, what their feedback shows, and how many graded
    submissions a student may make of one lab in any hour."""
    per_hour: int
    show: dict[str, str]              # lab -> a key of SHOWS

    def describe(self, lab: str) -> str:
        """For students, before they submit (DUE.md, make validate, the Submit refusal)."""
        times = "once" if self.per_hour == 1 else f"{self.per_hour} times"
        return (f"On the course's hub this lab is graded when you submit, {times} an hour at most (a Submit past "
                f"that is refused and says when you can submit again; a submission the grader fails on through its "
                f"own fault does not count). Its feedback comes back to your Assignment List by itself and shows "
                f"{SHOWS[self.show[lab]]}. Written answers are graded by hand later, and the final grade is the "
                f"instructor's, under the late policy. After your deadline a submission is not graded on submit: "
                f"your instructor grades it.")


@dataclass(frozen=True)
class Term:
    policy: Policy
    due: dict[str, dt.datetime]                       # lab -> due date, with its time zone
    extensions: dict[tuple[str, str], dt.timedelta] = field(default_factory=dict)   # (student, lab) -> extension
    on_submit: OnSubmit | None = None

    def due_utc(self, lab: str) -> dt.datetime:
        return to_utc(self.due[lab])

    def on_time_until(self, student: str, lab: str) -> dt.datetime:
        """The student's own deadline (naive UTC): the due date moved by their extension (late days are for late
        work: they do not make a submission on time)."""
        return self.due_utc(lab) + self.extensions.get((student, lab), dt.timedelta(0))

    def deadlines(self, times: dict[tuple[str, str], dt.datetime]) -> dict[tuple[str, str], Deadline]:
        """Each (student, lab) deadline, from the submission times (naive UTC) of the labs this file lists.

        Late days: a student's submissions are taken in the order they were made; each that is late past the grace
        period draws as many whole days as it needs, or all that are left, unless they could not save it from the
        cut-off (then it draws none)."""
        out = {key: Deadline(self.due_utc(key[1]), ext) for key, ext in self.extensions.items() if key[1] in self.due}
        by_student: dict[str, list[tuple[dt.datetime, str]]] = {}
        for (student, lab), when in times.items():
            if lab in self.due and when is not None:
                by_student.setdefault(student, []).append((when, lab))
        p = self.policy
        for student, subs in by_student.items():
            left = p.late_days
            for when, lab in sorted(subs):
                base = Deadline(self.due_utc(lab), self.extensions.get((student, lab), dt.timedelta(0)))
                late = (when - base.due - base.extension).total_seconds()
                need = math.ceil((late - p.grace_minutes * 60) / 86400) if late > p.grace_minutes * 60 else 0
                use = min(need, left)
                if use and p.cutoff_hours is not None and late - use * 86400 > p.cutoff_hours * 3600:
                    use = 0
                left -= use
                out[student, lab] = Deadline(base.due, base.extension, use)
        return out


# ---------------------------------------------------------------------------------------------------
# The course file
# ---------------------------------------------------------------------------------------------------
def load(course: Path | str) -> Term | None:
    """The course's term (None when it has no course file). Raises TermFileError on a malformed one."""
    return load_file(Path(course) / COURSE_FILE)


def load_file(path: Path | str) -> Term | None:
    path = Path(path)
    if not path.is_file():
        return None
    labs = None
    solutions = path.parent / "solutions"
    if solutions.is_dir():
        labs = {p.name for p in solutions.iterdir() if p.is_dir() and not p.name.startswith(".")}
    return parse(path.read_text(encoding="utf-8"), name=path.name, labs=labs)


def parse(text: str, name: str = COURSE_FILE, labs: set[str] | None = None) -> Term:
    """Read a course file; ``labs``, when given, are the lab names it may use (the folders of solutions/)."""
    def bad(key: str, why: str) -> TermFileError:
        return TermFileError(f"{name}: {key} {why}.")

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TermFileError(f"{name}: not valid TOML ({exc}).") from None
    if "version" not in data:
        raise bad("version", f"is missing (write `version = {VERSION}` at the top)")
    if data["version"] != VERSION:
        raise bad("version", f"is {data['version']!r}; this course reads version {VERSION}")
    for key in data:
        if key not in {"version", "policy", "labs", "extension", "on_submit"}:
            raise bad(key, "is not a key of the course file (it has version, policy, labs, [[extension]] and "
                           "on_submit)")

    raw = data.get("policy", {})
    if not isinstance(raw, dict):
        raise bad("policy", "must be a table ([policy])")
    for key in raw:
        if key not in POLICY_KEYS:
            raise bad(f"policy.{key}", f"is not a policy option (they are {', '.join(sorted(POLICY_KEYS))})")

    def number(key: str, high: float | None = None) -> float | None:
        value = raw.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or (
                high is not None and value > high):
            rng = f"between 0 and {high:g}" if high is not None else "0 or more"
            raise bad(f"policy.{key}", f"must be a number {rng}, not {value!r}")
        return float(value)

    if "penalty_per_hour" in raw and "penalty_per_day" in raw:
        raise bad("policy.penalty_per_hour", "and policy.penalty_per_day cannot both be set: choose one")
    if "cutoff_hours" in raw and "cutoff_days" in raw:
        raise bad("policy.cutoff_hours", "and policy.cutoff_days cannot both be set: choose one")
    late_days = raw.get("late_days", 0)
    if isinstance(late_days, bool) or not isinstance(late_days, int) or late_days < 0:
        raise bad("policy.late_days", f"must be a whole number of days, 0 or more, not {late_days!r}")
    cutoff = number("cutoff_hours")
    if "cutoff_days" in raw:
        cutoff = number("cutoff_days") * 24
    final = raw.get("final", "latest")
    if final not in FINAL:
        raise bad("policy.final", f"must be one of {', '.join(repr(f) for f in FINAL)}, not {final!r}")
    policy = Policy(grace_minutes=number("grace_minutes") or 0.0, per_hour=number("penalty_per_hour", 1),
                    per_day=number("penalty_per_day", 1), cap=number("cap", 1), cutoff_hours=cutoff,
                    late_days=late_days, final=final)

    due_table = data.get("labs", {})
    if not isinstance(due_table, dict):
        raise bad("labs", "must be a table ([labs]) of lab = due date")
    due = {}
    for lab, when in due_table.items():
        if labs is not None and lab not in labs:
            raise bad(f"labs.{lab}", "names no lab in solutions/")
        due[lab] = _aware(when, f"labs.{lab}", bad)

    extensions = {}
    entries = data.get("extension", [])
    if not isinstance(entries, list):
        raise bad("extension", "must be a list of [[extension]] tables")
    for i, entry in enumerate(entries, 1):
        where = f"extension #{i}"
        if not isinstance(entry, dict):
            raise bad(where, "must be an [[extension]] table")
        for key in entry:
            if key not in EXTENSION_KEYS:
                raise bad(f"{where}.{key}", f"is not an extension key (they are {', '.join(sorted(EXTENSION_KEYS))})")
        student, lab = entry.get("student"), entry.get("lab")
        if not isinstance(student, str) or not student:
            raise bad(f"{where}.student", "must name the student (their user name)")
        if lab not in due:
            raise bad(f"{where}.lab", f"must be a lab listed under [labs], not {lab!r}")
        if ("until" in entry) == ("hours" in entry):
            raise bad(f"{where} ({student}, {lab})", "needs exactly one of until (a date) or hours")
        if "until" in entry:
            until = _aware(entry["until"], f"{where}.until", bad)
            length = until - due[lab]
        else:
            hours = entry["hours"]
            if isinstance(hours, bool) or not isinstance(hours, (int, float)) or hours <= 0:
                raise bad(f"{where}.hours", f"must be a number of hours above 0, not {hours!r}")
            length = dt.timedelta(hours=hours)
        if length <= dt.timedelta(0):
            raise bad(f"{where}.until", "must be later than the lab's due date")
        if (student, lab) in extensions:
            raise bad(f"{where} ({student}, {lab})", "repeats an extension given above: keep one")
        extensions[student, lab] = length
    return Term(policy, due, extensions, parse_on_submit(data.get("on_submit"), due, labs, bad))


def parse_on_submit(raw, due: dict, labs: set[str] | None, bad) -> OnSubmit | None:
    """[on_submit]: ``per_hour`` (graded submissions of one lab per student in any hour) and a table ``labs`` of
    lab = what its feedback shows (a key of SHOWS). Absent: nothing is graded on submit."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise bad("on_submit", "must be a table ([on_submit])")
    for key in raw:
        if key not in ON_SUBMIT_KEYS:
            raise bad(f"on_submit.{key}", f"is not an on_submit option (they are {', '.join(sorted(ON_SUBMIT_KEYS))})")
    per_hour = raw.get("per_hour")
    if isinstance(per_hour, bool) or not isinstance(per_hour, int) or per_hour < 1:
        raise bad("on_submit.per_hour", f"must be a whole number of graded submissions an hour, 1 or more, not "
                                        f"{per_hour!r}")
    table = raw.get("labs", {})
    if not isinstance(table, dict):
        raise bad("on_submit.labs", "must be a table ([on_submit.labs]) of lab = what its feedback shows")
    show = {}
    for lab, mode in table.items():
        if labs is not None and lab not in labs:
            raise bad(f"on_submit.labs.{lab}", "names no lab in solutions/")
        if lab not in due:
            raise bad(f"on_submit.labs.{lab}", "needs the lab's due date under [labs]")
        if mode not in SHOWS:
            raise bad(f"on_submit.labs.{lab}", f"must be one of {', '.join(repr(m) for m in SHOWS)}, not {mode!r}")
        show[lab] = mode
    return OnSubmit(per_hour, show)


def _aware(value, key: str, bad) -> dt.datetime:
    if not isinstance(value, dt.datetime):
        raise bad(key, f"must be a date and time with a time zone, e.g. 2025-10-06T23:59:00+01:00, not {value!r}")
    if value.tzinfo is None:
        raise bad(key, f"needs a time zone: write {value.isoformat()}+01:00 (your offset from UTC) or "
                       f"{value.isoformat()}Z for UTC")
    return value


def to_utc(when: dt.datetime) -> dt.datetime:
    """Naive UTC, as nbgrader stores times."""
    return when.astimezone(dt.timezone.utc).replace(tzinfo=None) if when.tzinfo else when


# ---------------------------------------------------------------------------------------------------
# Into nbgrader's gradebook
# ---------------------------------------------------------------------------------------------------
def submission_times(course: Path | str, gb) -> dict[tuple[str, str], dt.datetime]:
    """When each submission was made, as nbgrader reads it: the gradebook's times, replaced by the exchange's
    ``submitted/<student>/<lab>/timestamp.txt`` where there is one. Nothing inside a notebook is read."""
    from nbgrader.utils import parse_utc

    times = {}
    for assignment in gb.assignments:
        for sub in assignment.submissions:
            if sub.timestamp is not None:
                times[sub.student.id, assignment.name] = sub.timestamp
    for stamp in sorted(Path(course).glob("submitted/*/*/timestamp.txt")):
        try:
            text = stamp.read_text(encoding="utf-8").strip()
            times[stamp.parent.parent.name, stamp.parent.name] = parse_utc(text) if text else None
        except (OSError, ValueError, OverflowError):
            continue      # nbgrader itself refuses to grade it; collect refuses such a submission
    return {key: when for key, when in times.items() if when is not None}


def sync(gb, term: Term | None, course: Path | str) -> dict[tuple[str, str], Deadline]:
    """Write the term into the gradebook ``gb``: every lab's due date, every submission's deadline (extension plus
    late days) and its late penalty, recomputed from its score (manual grades included) as nbgrader would."""
    if term is None:
        return {}
    for lab in term.due:
        gb.update_or_create_assignment(lab, duedate=term.due_utc(lab))
    plan = term.deadlines(submission_times(course, gb))
    for lab in term.due:
        for sub in gb.find_assignment(lab).submissions:
            deadline = plan.get((sub.student.id, lab))
            sub.extension = deadline.moved_by if deadline else None
            late = sub.total_seconds_late
            for nb in sub.notebooks:
                penalty = term.policy.penalty(nb.score, late)
                nb.late_submission_penalty = None if penalty is None else min(max(penalty, 0.0), nb.score)
    gb.db.commit()
    return plan


class TermLatePenalty(LateSubmissionPlugin):
    """nbgrader's late-penalty plugin for this course: the course file's policy, for the labs it lists (others: no
    penalty, as nbgrader's default). nbgrader gives it the seconds past the student's own deadline."""

    course_file = Unicode("", help="The course file (term.toml); no file: no penalty.").tag(config=True)

    def late_submission_penalty(self, student_id: str, score: float, total_seconds_late: float) -> float | None:
        term = load_file(self.course_file) if self.course_file else None
        lab = getattr(self.parent, "assignment_id", None)
        if term is None or lab not in term.due:
            return None
        return term.policy.penalty(score, total_seconds_late)


# ---------------------------------------------------------------------------------------------------
# What students read: the due note of a released lab, the feedback's lateness line
# ---------------------------------------------------------------------------------------------------
def when_text(when: dt.datetime) -> str:
    """"Mon 6 Oct 2025, 23:59 (UTC+01:00)"."""
    offset = when.strftime("%z")
    zone = "UTC" if offset in ("", "+0000") else f"UTC{offset[:3]}:{offset[3:]}"
    return f"{when:%a} {when.day} {when:%b %Y, %H:%M} ({zone})"


def due_note(term: Term, lab: str) -> str:
    """DUE.md of a released lab: its due date and the policy, the same for every student (no extension in it)."""
    due = term.due[lab]
    utc = "" if due.utcoffset() == dt.timedelta(0) else f", that is {to_utc(due):%Y-%m-%d %H:%M} UTC"
    return (f"{lab} is due {when_text(due)}{utc}.\n\n"
            f"{term.policy.describe()}\n\n"
            "The time that counts is the one the exchange records when you submit (the Submit button or `nbgrader "
            "submit`), not any time written in the notebook. An extension moves your own due date: your instructor "
            "tells you when one is granted, and your feedback shows it.\n"
            + (f"\n{term.on_submit.describe(lab)}\n" if term.on_submit and lab in term.on_submit.show else ""))


DEADLINES = "DEADLINES.md"   # in each student's ~/<course>/ on the hub (publish/jupyterhub/jupyterhub_config.py)


def deadlines_note(term: Term, student: str, course_id: str) -> str:
    """One student's own deadlines, extensions included: what the hub writes into that student's home (only they can
    read it) each time their server starts, so that they see an extension before they submit."""
    lines = [f"# Your deadlines ({course_id})", "",
             f"Written for {student} when your server started, from the course's course file: your own due dates, "
             "with any extension your instructor granted you. Only you can read this file; it is rewritten at each "
             "start (File > Hub Control Panel > Stop My Server, then Start, shows a new extension).", ""]
    for lab in sorted(term.due):
        line = f"- {lab}: due {when_text(term.due[lab])}"
        extension = term.extensions.get((student, lab))
        if extension:
            moved = (term.due_utc(lab) + extension).replace(tzinfo=dt.timezone.utc).astimezone(term.due[lab].tzinfo)
            line += f"; your extension moves it to {when_text(moved)}"
        lines.append(line + ".")
        if term.on_submit and lab in term.on_submit.show:
            lines.append(f"  {term.on_submit.describe(lab)}")
    return "\n".join([*lines, "", term.policy.describe(), ""])


def write_due_notes(course: Path | str, release: str = "labs", into: Path | str | None = None) -> list[Path]:
    """Write DUE.md into each released lab folder the course file lists (under ``into``, default the course: make
    labs' check of hand edits writes them into its scratch copy); returns the files written."""
    course = Path(course)
    term = load(course)
    written = []
    if term is None:
        return written
    for lab in sorted(term.due):
        folder = Path(into or course) / release / lab
        if folder.is_dir():
            (folder / DUE_NOTE).write_text(due_note(term, lab), encoding="utf-8")
            written.append(folder / DUE_NOTE)
    return written


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes = rest // 60
    parts = [f"{days} day{'s' if days != 1 else ''}"] if days else []
    parts += [f"{hours} h"] if hours else []
    parts += [f"{minutes} min"] if minutes and not days else []
    return " ".join(parts) or f"{seconds} s"


def _pct(fraction: float) -> str:
    return f"{fraction * 100:g} %"


def lateness_note(gb, student: str, lab: str, term: Term | None, points: bool = True) -> str:
    """The feedback's line on time: the due date (and the student's extension and late days), when the exchange
    recorded the submission, how late that was and what it cost. "" when the lab has no due date or no time.
    Without ``points`` it names the share of the score lost, not the points (feedback that withholds part of the
    grading: the points would tell the whole score)."""
    from nbgrader.api import MissingEntry

    try:
        sub = gb.find_submission(lab, student)
    except MissingEntry:
        return ""
    if sub.timestamp is None or sub.assignment.duedate is None:
        return ""
    zone = term.due[lab].tzinfo if term and lab in term.due else dt.timezone.utc

    def local(naive_utc: dt.datetime) -> str:
        return when_text(naive_utc.replace(tzinfo=dt.timezone.utc).astimezone(zone))

    moved = sub.extension or dt.timedelta(0)
    explicit = term.extensions.get((student, lab), dt.timedelta(0)) if term and lab in term.due else moved
    late_days = max(0, round((moved - explicit) / DAY)) if term else 0
    text = f"Due {local(sub.assignment.duedate)}"
    if explicit:
        text += f"; your extension moved it to {local(sub.assignment.duedate + explicit)}"
    if late_days:
        text += (f"; {late_days} of your late days moved it to "
                 f"{local(sub.assignment.duedate + explicit + late_days * DAY)}")
    text += f". Submitted {local(sub.timestamp)} (the time the exchange recorded)."
    late = sub.total_seconds_late
    policy = term.policy if term and lab in term.due else None
    penalty = sub.late_submission_penalty or 0.0
    if late <= 0:
        text += " On time: no penalty."
    elif policy is None:
        text += f" {_duration(late)} late; penalty {penalty:g} points." if points else f" {_duration(late)} late."
    elif policy.fraction(late) == 0:
        text += (f" {_duration(late)} late, within the {policy.grace_minutes:g}-minute grace period: no penalty."
                 if late <= policy.grace_minutes * 60 else f" {_duration(late)} late: no penalty.")
    elif policy.fraction(late) == 1.0 and policy.cutoff_hours is not None and late > policy.cutoff_hours * 3600:
        text += (f" {_duration(late)} late, past the cut-off of {_duration(policy.cutoff_hours * 3600)}: the "
                 f"score is 0" + (f" (a penalty of {penalty:g} points)." if points else "."))
    else:
        text += (f" {_duration(late)} late: {_pct(policy.fraction(late))} of the score"
                 + (f", a penalty of {penalty:g} points." if points else ", taken off the final score."))
    if term and policy and policy.late_days:
        used = 0
        for other in gb.find_student(student).submissions:
            if other.assignment.name in term.due:
                extra = (other.extension or dt.timedelta(0)) - term.extensions.get((student, other.assignment.name),
                                                                                    dt.timedelta(0))
                used += max(0, round(extra / DAY))
        text += f" Late days left for the term: {max(policy.late_days - used, 0)} of {policy.late_days}."
    return text
