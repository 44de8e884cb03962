"""nbgrader's collect, for this course: a submission is a student's only if the exchange says that student made it.

Every account may create folders in the exchange's ``<course>/inbound/`` (nbgrader needs it world-writable), and
nbgrader's own collect takes a folder's name, ``<student>+<assignment>+<timestamp>[+<random>]``, at its word: a
folder made by someone else only earns a warning ("cheating attempt?") and is graded as the student it names; a
timestamp in the future makes it that student's latest submission until then, so their real ones are never
collected ("No newer submission to collect"). ``OwnerCheckedCollect`` (``nbgrader_config.py``, used by
``nbgrader collect`` and the Formgrader's Collect button alike) refuses, before nbgrader picks each student's
latest submission, every folder that

- is not owned by the Unix account of the student its name claims (a name with no account is refused too), or
  holds anything not owned by that account or that is neither a plain file nor a folder (collect runs as the
  instructor and follows symbolic links: a link to the solutions would be collected as the student's notebook);
- has a timestamp earlier than the folder itself (or its ``timestamp.txt``) by more than ``clock_skew`` (their
  status-change times, which no account can set back: Submit writes the time as it makes the folder, so only a
  folder written or rewritten by hand with an earlier time, to look on time, differs), or a ``timestamp.txt`` that
  is missing or says another time than the name (nbgrader charges lateness from that file), or
- has a timestamp later than now plus ``clock_skew``, or one that cannot be read (nbgrader would stop the whole
  collect on it).

A refused folder is never collected nor graded: a copy is kept in ``<course>/refused/<folder name>/``, with
``<folder name>.txt`` saying whose it is and why, and the folder stays in the exchange (only root may delete
it). Every genuine submission is collected as usual, then the collect fails with one paragraph naming each
refused folder, so ``nbgrader collect`` exits with status 1 and the Formgrader's Collect dialog says "Error"
with that paragraph, not "Success".

Which submission of a student is collected: the latest, as nbgrader does, unless the course file (term.toml,
autograder/term/policy.py) says ``final = "last_on_time"``: then the last one made by the student's own deadline
(due date and extension), if there is one, and it replaces a newer one collected before (grade on submit collects
each new one: ``take_latest``).

Where the exchange is used without an account per student (one account on a laptop, a demo), every folder is
the instructor's own and all are refused: ``c.OwnerCheckedCollect.accept_own_folders = True`` also accepts
folders owned by the account that runs collect, whatever student they name. Anyone who can run as that account
can then submit as any student; the timestamp and link checks still hold.
"""
from __future__ import annotations

import datetime
import os
import pwd
import shutil
import stat
import textwrap

from nbgrader.exchange.default.collect import ExchangeCollect
from traitlets import Bool, Float


def account(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _raise(error: OSError) -> None:
    raise error   # os.walk would skip what it cannot read: here that is a reason to refuse


def timestamp_problem(path: str, claimed: datetime.datetime, skew_s: float, trust: bool = False) -> str | None:
    """Why an inbound folder's timestamp (naive UTC) cannot be its submission time, or None: later than now, or (unless
    ``trust``) earlier than the folder's own status-change time, both beyond ``skew_s`` seconds. Shared with grade on
    submit (autograder/on_submit.py), which orders and counts submissions by it."""
    from nbgrader.utils import parse_utc

    now = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)   # naive UTC, as nbgrader's
    skew = datetime.timedelta(seconds=skew_s)
    if claimed > now + skew:
        return f"its timestamp, {claimed:%Y-%m-%d %H:%M} UTC, is in the future"
    # nbgrader charges lateness from timestamp.txt, which Submit writes with the name's time: one rewritten later (its
    # own status-change time moves) or saying another time is a claim too.
    stamp = os.path.join(path, "timestamp.txt")
    try:
        if not stat.S_ISREG(os.lstat(stamp).st_mode):
            return "its timestamp.txt is not a plain file"
        with open(stamp, encoding="utf-8", errors="replace") as fh:
            written = parse_utc(fh.read(200).strip()).replace(tzinfo=None)
        changed = [os.lstat(p).st_ctime for p in (path, stamp)]
    except FileNotFoundError:
        return "it holds no timestamp.txt (Submit writes one)"
    except (OSError, ValueError, OverflowError):
        return "its timestamp.txt cannot be read"
    if abs(written - claimed) > datetime.timedelta(seconds=1):
        return f"its timestamp.txt says {written:%Y-%m-%d %H:%M:%S} UTC, its name {claimed:%Y-%m-%d %H:%M:%S} UTC"
    made = datetime.datetime.fromtimestamp(max(changed), datetime.timezone.utc).replace(tzinfo=None)
    if not trust and claimed < made - skew:
        return (f"its timestamp, {claimed:%Y-%m-%d %H:%M} UTC, is earlier than the folder itself (made or changed "
                f"{made:%Y-%m-%d %H:%M} UTC): Submit writes the time as it makes the folder")
    return None


def folder_problem(path: str, student: str, claimed: datetime.datetime, *, accept_own: bool = False,
                   skew_s: float = 300.0, trust: bool = False) -> str | None:
    """Why the inbound folder at ``path`` is not ``student``'s submission made at ``claimed`` (naive UTC), or None
    where it is (the module doc's rules). Collect and grade on submit (autograder/on_submit.py) both ask it."""
    allowed = {os.geteuid()} if accept_own else set()
    try:
        allowed.add(pwd.getpwnam(student).pw_uid)
    except KeyError:
        if not allowed:
            return f"no account here is named '{student}'"
    try:
        top = os.lstat(path)
    except OSError:
        return "it is gone"
    if top.st_uid not in allowed:
        return f"it was not made by {student}'s account"
    if not stat.S_ISDIR(top.st_mode):
        return "it is not a folder"
    try:
        for folder, dirs, files in os.walk(path, onerror=_raise):
            for name in dirs + files:
                st = os.lstat(os.path.join(folder, name))
                inside = os.path.relpath(os.path.join(folder, name), path)
                if st.st_uid not in allowed:
                    return f"it holds '{inside}', made by account '{account(st.st_uid)}'"
                if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
                    return f"it holds '{inside}', which is neither a plain file nor a folder"
    except OSError as error:
        return f"part of it cannot be read ({error.strerror})"
    return timestamp_problem(path, claimed, skew_s, trust)


class OwnerCheckedCollect(ExchangeCollect):
    accept_own_folders = Bool(
        False, help="Also accept inbound folders owned by the account that runs collect, whatever student they "
                    "name: only for an exchange used without an account per student (one account on a laptop).",
    ).tag(config=True)
    take_latest = Bool(
        False, help="Collect each student's latest submission whatever the course file's final rule (grade on "
                    "submit grades the submission just made).").tag(config=True)
    trust_timestamps = Bool(
        False, help="Take a submission's timestamp even when it is earlier than its folder: only to collect an "
                    "exchange restored from a backup (every folder then looks made after the time it claims).",
    ).tag(config=True)
    clock_skew = Float(
        300.0, help="Seconds a submission's timestamp may lie in the future (clocks of different machines differ) "
                    "before the submission is refused.",
    ).tag(config=True)

    def init_src(self):
        self.refused: list[dict] = []
        self.collected = 0
        if self.accept_own_folders:
            self.check_owner = False   # nbgrader's own warning would fire for every folder the opt-out accepts
        self.genuine: dict[str, list[dict]] = {}
        super().init_src()
        # _sort_by_timestamp offers nbgrader a refused folder only for a student with nothing else: dropped here
        self.src_records = [r for r in self.src_records if "refused" not in r]
        self.apply_final_rule()

    def apply_final_rule(self) -> None:
        """The course file's ``final = "last_on_time"``: each student's last submission made by their deadline."""
        from autograder.term import policy

        lab = self.coursedir.assignment_id
        term = policy.load(self.coursedir.root)
        if self.take_latest or term is None or term.policy.final != "last_on_time" or lab not in term.due:
            return
        chosen = []
        for record in self.src_records:
            student = record["username"]
            on_time = [r for r in self.genuine.get(student, []) if r["timestamp"] <= term.on_time_until(student, lab)]
            chosen.append(on_time[0] if on_time else record)
        self.src_records = chosen
        self.before_duedate = True   # nbgrader's copy then replaces a newer submission collected before

    def _path_to_record(self, path):
        try:
            record = super()._path_to_record(path)
        except (ValueError, OverflowError):   # dateutil could not read the timestamp
            name = os.path.basename(path)
            record = {"username": name.rsplit("+", 3)[0], "filename": name, "timestamp": datetime.datetime.min}
            self._refuse(record, path, "its timestamp cannot be read")
            return record
        reason = self._refusal(path, record)
        if reason:
            self._refuse(record, path, reason)
        return record

    def _sort_by_timestamp(self, records):
        # nbgrader picks the first of these as the student's latest submission: the refused take no part in that
        genuine = [r for r in records if "refused" not in r]
        if genuine:
            self.genuine[genuine[0]["username"]] = super()._sort_by_timestamp(genuine)
        return super()._sort_by_timestamp(genuine or records)

    def _refusal(self, path: str, record: dict) -> str | None:
        """Why the folder at ``path`` is not ``record``'s student's submission, or None where it is."""
        return folder_problem(path, record["username"], record["timestamp"], accept_own=self.accept_own_folders,
                              skew_s=self.clock_skew, trust=self.trust_timestamps)

    def _refuse(self, record: dict, path: str, reason: str) -> None:
        try:
            owner = account(os.lstat(path).st_uid)
        except OSError:
            owner = "unknown"
        record["refused"] = {"owner": owner, "reason": reason, "path": path}
        self.refused.append(record)

    def _keep_aside(self, record: dict) -> str:
        """Copies a refused folder to <course>/refused/ (links as links), with a note; returns the copy's path.
        A folder an earlier collect refused is already there (``record["refused"]["known"]``)."""
        path, info = record["refused"]["path"], record["refused"]
        kept = os.path.join(self.coursedir.root, "refused", record["filename"])
        os.makedirs(os.path.dirname(kept), exist_ok=True)
        note = (f"{record['filename']}\nin {os.path.dirname(path)}\nclaims to be {record['username']}'s submission, "
                f"was made by account '{info['owner']}' and was refused by collect: {info['reason']}.\n")
        try:
            if os.path.lexists(kept):
                info["known"] = True
                return kept
            elif self.get_size(path) > 1000 * self.coursedir.max_dir_size:
                note += "Too big to copy here: it is only in the exchange.\n"
            elif stat.S_ISDIR(os.lstat(path).st_mode):
                shutil.copytree(path, kept, symlinks=True)
            else:
                shutil.copy2(path, kept, follow_symlinks=False)
        except (OSError, shutil.Error) as error:
            note += f"It could not be copied here completely: {error}\n"
        with open(kept + ".txt", "w", encoding="utf-8") as fh:
            fh.write(note)
        return kept

    def do_copy(self, src, dest, log=None):
        super().do_copy(src, dest, log)
        self.collected += 1

    def copy_files(self):
        for record in self.refused:
            info = record["refused"]
            kept = self._keep_aside(record)
            if info.get("known"):   # told at an earlier collect; it stays in the exchange (only root can delete it)
                self.log.warning("Refused again (as at an earlier collect): %s, kept in %s/", info["path"], kept)
                continue
            self.log.error("Refused %s: it claims to be %s's submission and was made by account '%s', but %s. "
                           "Not collected; kept in %s/", info["path"], record["username"], info["owner"],
                           info["reason"], kept)
        super().copy_files()
        new = [r for r in self.refused if not r["refused"].get("known")]
        if new:
            claims = "; ".join(f"one that claims to be {r['username']}'s, made by account '{r['refused']['owner']}' "
                               f"({r['refused']['reason']})" for r in new)
            self.fail(textwrap.fill(
                f"Collected {self.collected} submission(s) of {self.coursedir.assignment_id}. Refused "
                f"{len(new)} new folder(s) in the exchange, neither collected nor graded: {claims}. Each "
                f"student's own latest submission was collected as usual. Each refused folder is kept, with the "
                f"reason, in {os.path.join(self.coursedir.root, 'refused')}/ (in the exchange's inbound folder, "
                f"only root can delete it).", 100))
