"""Grade on submit's service (autograder/on_submit.py) without a hub: its queue, the hourly limit, the states students
read, a kill mid-grade and a restart, and the lock it shares with make grade. The grading run is a stand-in that
records its calls (seconds); tests/test_hub.py grades real submissions through the real pipeline on a real hub."""
from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from autograder import grade, on_submit
from trainkit import submit

LAB = "02_lr_schedules"
COURSE_ID = "training-infra"
# Submission times spread over hours (the limit's window), while every folder is made now: the queue's tests widen the
# skew allowed between a folder's time and its making (test_a_folder_dated_before_it_was_made_is_refused keeps it).
T0 = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None, microsecond=0) - dt.timedelta(hours=3)
WIDE_SKEW_S = 2 * 86400
TERM = f"""version = 1
[labs]
{LAB} = 2026-12-20T23:59:00Z
[on_submit]
per_hour = 2
[on_submit.labs]
{LAB} = "bands"
"""
# The stand-in for `python -m autograder.grade`: records each call, waits while a file named hold exists, and reports
# each student graded 7 / 10, except "broken" (not gradable) and "unlucky" (the grader's fault, the first time).
FAKE = """\
import json, os, sys, time
from pathlib import Path
args = sys.argv[3:]
get = lambda flag: [args[i + 1] for i, a in enumerate(args) if a == flag]
here = Path(os.environ["FAKE_DIR"])
with open(here / "calls.log", "a") as fh:
    fh.write(json.dumps({"students": get("--student"), "show": get("--show"), "flags": args}) + "\\n")
while (here / "hold").exists():
    time.sleep(0.05)
out = []
for s in get("--student"):
    first = not (here / f"seen-{s}").exists()
    (here / f"seen-{s}").touch()
    fault = s == "unlucky" and first
    out.append({"student": s, "assignment": get("--assignment")[0], "graded": s not in ("broken",) and not fault,
                "error": "the submission folder holds none of the assignment's notebooks; log: /secret/x.log"
                         if s == "broken" else "a kernel died" if fault else "",
                "graders_fault": fault, "score": 7.0, "max_score": 10.0})
Path(get("--report")[0]).write_text(json.dumps(out))
"""


def inbound_name(student: str, when: dt.datetime, lab: str = LAB, tag: str = "r4nd0m") -> str:
    return f"{student}+{lab}+{when:%Y-%m-%d %H:%M:%S.%f} UTC+{tag}{student}"


@pytest.fixture
def course(tmp_path, monkeypatch):
    monkeypatch.setattr(on_submit, "CLOCK_SKEW_S", WIDE_SKEW_S)
    course, exchange = tmp_path / "course", tmp_path / "exchange"
    (course / "solutions" / LAB).mkdir(parents=True)
    # One account here plays every student, as on a laptop: it opts in to its own folders, as collect does.
    (course / "nbgrader_config.py").write_text(f"c = get_config()\nc.CourseDirectory.course_id = {COURSE_ID!r}\n"
                                               "c.OwnerCheckedCollect.accept_own_folders = True\n")
    (course / "term.toml").write_text(TERM)
    (exchange / COURSE_ID / "inbound").mkdir(parents=True)
    fake = tmp_path / "fake_python"
    fake.write_text(f"#!{sys.executable}\n{FAKE}")
    fake.chmod(0o755)
    before = hand_in(exchange, "ann", T0 - dt.timedelta(days=1))   # in the exchange before the lab was turned on
    svc = on_submit.Service(course, exchange, python=str(fake))
    assert not svc.step() and states(svc) == {before: "before"}, "left to the instructor: not graded, not counted"
    assert status(exchange, before)["state"] == "before" and not calls(fake)
    svc.queue.db.execute("DELETE FROM submission")          # out of the way of the tests' own counts
    shutil.rmtree(exchange / COURSE_ID / "inbound" / before)
    return course, exchange, fake


def hand_in(exchange: Path, student: str, when: dt.datetime, lab: str = LAB, tag: str = "r4nd0m") -> str:
    """A submission folder as Submit leaves it: named with its time, which its timestamp.txt repeats."""
    name = inbound_name(student, when, lab, tag)
    (exchange / COURSE_ID / "inbound" / name).mkdir()
    (exchange / COURSE_ID / "inbound" / name / "timestamp.txt").write_text(f"{when:%Y-%m-%d %H:%M:%S.%f} UTC")
    return name


def service(course, exchange, fake, jobs=1) -> on_submit.Service:
    return on_submit.Service(course, exchange, jobs=jobs, python=str(fake))


def states(svc) -> dict[str, str]:
    return {r["name"]: r["state"] for r in svc.queue.rows()}


def status(exchange: Path, name: str) -> dict:
    return json.loads((exchange / COURSE_ID / on_submit.STATUS_DIR / f"{name}.json").read_text())


def calls(fake: Path) -> list[dict]:
    log = fake.parent / "calls.log"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_each_submission_is_graded_once_in_order_within_the_hourly_limit(course, monkeypatch):
    course, exchange, fake = course
    monkeypatch.setenv("FAKE_DIR", str(fake.parent))
    svc = service(course, exchange, fake)
    now = [time.time()]          # the service's clock, which the limit counts by
    monkeypatch.setattr(on_submit.Queue, "clock", staticmethod(lambda: now[0]))

    def at(minutes: float, student: str, dated: float | None = None) -> str:
        now[0] = now0 + 60 * minutes
        return hand_in(exchange, student, T0 + dt.timedelta(minutes=minutes if dated is None else dated),
                       tag=f"t{minutes}")

    now0 = now[0]
    ann1, bob = at(0, "ann"), at(1, "bob")
    svc.run(poll=0, once=True)
    ann2 = at(20, "ann")
    svc.run(poll=0, once=True)
    ann3 = at(40, "ann")                  # her third within the hour: past the limit
    svc.run(poll=0, once=True)
    again = at(45, "ann", dated=0)        # dated like her first (a folder made by hand): the clock still counts it
    svc.run(poll=0, once=True)
    ann4 = at(61, "ann")                  # an hour after her first: counts again
    svc.run(poll=0, once=True)
    got = states(svc)
    assert got[again] == "over_limit", "the folder's own date does not slip under the limit"
    assert got[ann3] == "over_limit" and "at most 2 time(s) an hour" in status(exchange, ann3)["detail"]
    assert got[ann1] == got[ann2] == got[bob] == got[ann4] == "graded"
    assert [c["students"] for c in calls(fake)] == [["ann"], ["bob"], ["ann"], ["ann"]], "in submission order, once"
    flags = calls(fake)[0]["flags"]
    assert {"--collect", "--release-feedback", "--exclusive"} <= set(flags) and calls(fake)[0]["show"] == ["bands"]
    assert status(exchange, ann1) == {**status(exchange, ann1), "state": "graded"}
    limits = json.loads((exchange / COURSE_ID / on_submit.STATUS_DIR / on_submit.LIMITS).read_text())
    assert limits[LAB]["per_hour"] == 2 and "graded when you submit, 2 times an hour at most" in limits[LAB]["text"]
    folder = exchange / COURSE_ID / on_submit.STATUS_DIR
    assert folder.stat().st_mode & 0o777 == 0o711, "students may read a state by name, never list the folder"
    svc.run(poll=0, once=True)
    assert len(calls(fake)) == 4, "a second pass grades nothing again"


def test_a_graders_fault_does_not_count_and_is_tried_again_a_bad_submission_is_told_why(course, monkeypatch):
    course, exchange, fake = course
    monkeypatch.setenv("FAKE_DIR", str(fake.parent))
    monkeypatch.setattr(on_submit, "RETRY_AFTER_S", 0)
    broken = hand_in(exchange, "broken", T0)
    unlucky = hand_in(exchange, "unlucky", T0 + dt.timedelta(seconds=1))
    svc = service(course, exchange, fake, jobs=2)
    svc.step()                                      # one run for both (two jobs, one lab)
    assert [c["students"] for c in calls(fake)] == [["broken", "unlucky"]]
    assert states(svc) == {broken: "failed", unlucky: "grader_error"}
    told = status(exchange, broken)["detail"]
    assert told == "the submission folder holds none of the assignment's notebooks", "in words, no grader's path"
    assert svc.queue.used("unlucky", LAB, time.time()) == [], "the grader's fault costs nothing"
    assert status(exchange, unlucky)["detail"].endswith("this does not count, and it will try again")
    svc.run(poll=0, once=True)
    assert states(svc)[unlucky] == "graded" and len(calls(fake)) == 2


def test_an_older_waiting_submission_is_superseded_by_the_newer_one(course, monkeypatch):
    course, exchange, fake = course
    monkeypatch.setenv("FAKE_DIR", str(fake.parent))
    old = hand_in(exchange, "ann", T0)
    new = hand_in(exchange, "ann", T0 + dt.timedelta(minutes=2))
    svc = service(course, exchange, fake)
    svc.run(poll=0, once=True)
    assert states(svc) == {old: "superseded", new: "graded"} and len(calls(fake)) == 1
    assert len(svc.queue.used("ann", LAB, time.time())) == 1, "only the one graded counts"


def test_killed_mid_grade_the_service_loses_nothing_and_grades_nothing_twice(course, tmp_path):
    course, exchange, fake = course
    (fake.parent / "hold").touch()
    first = hand_in(exchange, "ann", T0)
    second = hand_in(exchange, "bob", T0 + dt.timedelta(minutes=1))
    env = {**os.environ, "FAKE_DIR": str(fake.parent), "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    code = textwrap.dedent(f"""
        from pathlib import Path
        from autograder import on_submit
        on_submit.CLOCK_SKEW_S = {WIDE_SKEW_S}
        on_submit.Service(Path({str(course)!r}), Path({str(exchange)!r}), python={str(fake)!r}).run(0.05, False)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], env=env)
    for _ in range(200):                     # until ann's run is under way (it waits on the hold file)
        if calls(fake):
            break
        time.sleep(0.05)
    assert status(exchange, first)["state"] == "grading" and status(exchange, second)["state"] == "queued"
    assert status(exchange, second)["ahead"] == 1
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    time.sleep(0.3)
    alive = subprocess.run(["pgrep", "-f", str(fake)], capture_output=True, text=True).stdout.split()
    assert not alive, "the grading run died with the service"
    (fake.parent / "hold").unlink()
    svc = on_submit.Service(course, exchange, python=str(fake))
    os.environ["FAKE_DIR"] = str(fake.parent)
    try:
        svc.run(poll=0, once=True)
    finally:
        del os.environ["FAKE_DIR"]
    assert states(svc) == {first: "graded", second: "graded"}
    assert [c["students"] for c in calls(fake)] == [["ann"], ["ann"], ["bob"]], "ann's cut run again, bob once"


def test_the_service_and_make_grade_never_grade_at_once(tmp_path):
    """make grade holds the run lock shared (its shards run side by side), the service exclusive."""
    probe = ("import fcntl, sys\nh = open(sys.argv[1], 'a')\n"
             "try:\n    fcntl.flock(h, (fcntl.LOCK_EX if sys.argv[2] == 'ex' else fcntl.LOCK_SH) | fcntl.LOCK_NB)\n"
             "except BlockingIOError:\n    sys.exit(1)\n")
    lock = tmp_path / grade.RUN_LOCK

    def could(mode: str) -> bool:
        return subprocess.run([sys.executable, "-c", probe, str(lock), mode]).returncode == 0

    with grade.grading_run(tmp_path, exclusive=False):
        assert could("sh") and not could("ex"), "a shard may run beside make grade; the service waits"
    with grade.grading_run(tmp_path, exclusive=True):
        assert not could("sh") and not could("ex"), "make grade waits for the service's run"
    assert could("ex")


def test_submit_refuses_past_the_limit_in_words_and_the_list_shows_each_state(tmp_path):
    """The student's side (trainkit/submit.py): counts their own cached submissions of the last hour that count."""
    root, cache = tmp_path / "exchange", tmp_path / "cache"
    folder = root / COURSE_ID / submit.STATUS_DIR
    folder.mkdir(parents=True)
    (folder / submit.LIMITS).write_text(json.dumps({LAB: {"per_hour": 2, "show": "visible", "text": "..."}}))
    now = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
    for minutes, state in ((50, "graded"), (30, "grader_error"), (10, "queued"), (90, "graded")):
        when = now - dt.timedelta(minutes=minutes)
        cached = cache / COURSE_ID / f"ann+{LAB}+{when:%Y-%m-%d %H:%M:%S.%f} UTC"
        cached.mkdir(parents=True)
        inbound = inbound_name("ann", when)
        (cached / submit.RECORD).write_text(inbound)
        (folder / f"{inbound}.json").write_text(json.dumps({"state": state, "detail": "", "ahead": 0}))

    refusal = submit.hourly_refusal(str(root), COURSE_ID, LAB, "ann", str(cache / COURSE_ID), now)
    first = now - dt.timedelta(minutes=50)
    again = first + dt.timedelta(hours=1)
    assert refusal.startswith(f"Not submitted: you can submit {LAB} again from {again:%H:%M} UTC. It is graded when "
                              f"you submit, at most 2 times an hour, and you submitted it 2 time(s) since "
                              f"{first:%H:%M} UTC."), refusal
    assert "\n" not in refusal
    assert submit.hourly_refusal(str(root), COURSE_ID, LAB, "bob", str(cache / COURSE_ID), now) is None
    (folder / submit.LIMITS).write_text(json.dumps({LAB: {"per_hour": 3, "show": "visible", "text": "..."}}))
    assert submit.hourly_refusal(str(root), COURSE_ID, LAB, "ann", str(cache / COURSE_ID), now) is None, \
        "the grader's failure and the submission of 90 minutes ago did not count: a third is fine"


def test_a_folder_forged_in_another_students_name_uses_none_of_their_limit(course, monkeypatch):
    """Every account may write into the inbound: a folder named for ann that ann's account did not make is refused
    by the service (and by collect), and ann's own submissions within her limit are graded."""
    course, exchange, fake = course
    monkeypatch.setenv("FAKE_DIR", str(fake.parent))
    svc = service(course, exchange, fake)
    forged = [hand_in(exchange, "ann", T0 + dt.timedelta(minutes=i)) for i in range(3)]
    for name in forged:
        os.chown(exchange / COURSE_ID / "inbound" / name, 65534, 65534)     # made by another account (nobody)
    own = hand_in(exchange, "ann", T0 + dt.timedelta(minutes=5))
    svc.run(poll=0, once=True)
    got = states(svc)
    assert [got[n] for n in forged] == ["refused"] * 3 and got[own] == "graded", got
    assert "not made by ann's account" in status(exchange, forged[0])["detail"]
    assert [c["students"] for c in calls(fake)] == [["ann"]]


def test_a_folder_name_the_file_system_cannot_mirror_costs_only_its_state_file(course, monkeypatch):
    course, exchange, fake = course
    monkeypatch.setenv("FAKE_DIR", str(fake.parent))
    svc = service(course, exchange, fake)
    long = f"ann+{LAB}+{T0:%Y-%m-%d %H:%M:%S.%f} UTC+" + "x" * (254 - len(f"ann+{LAB}+{T0} UTC+.000000"))
    (exchange / COURSE_ID / "inbound" / long).mkdir()          # 254 characters: the .json beside it, 259, is too long
    (exchange / COURSE_ID / "inbound" / long / "timestamp.txt").write_text(f"{T0:%Y-%m-%d %H:%M:%S}.000000 UTC")
    svc.run(poll=0, once=True)
    assert states(svc) == {long: "graded"}, "graded all the same; the service did not stop"
    left = sorted(p.name for p in (exchange / COURSE_ID / on_submit.STATUS_DIR).iterdir())
    assert not [name for name in left if name.startswith(".tmp-")], f"a half-written state file is left: {left}"


def test_a_folder_dated_before_it_was_made_is_refused(course, monkeypatch):
    """Written by hand with an earlier time (to jump the queue, slip under the limit or look on time): the folder's own
    making says otherwise; collect refuses it too (tests/test_exchange.py)."""
    course, exchange, fake = course
    monkeypatch.setenv("FAKE_DIR", str(fake.parent))
    monkeypatch.setattr(on_submit, "CLOCK_SKEW_S", 300.0)      # the service's own
    now = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None)
    svc = service(course, exchange, fake)
    backdated = hand_in(exchange, "ann", now - dt.timedelta(hours=2))
    honest = hand_in(exchange, "bob", now - dt.timedelta(seconds=5))
    svc.run(poll=0, once=True)
    assert states(svc) == {backdated: "refused", honest: "graded"}
    assert "earlier than the folder itself" in status(exchange, backdated)["detail"]
    assert [c["students"] for c in calls(fake)] == [["bob"]]


def test_past_the_students_deadline_the_grade_is_the_instructors(course, monkeypatch):
    """A submission after the student's own deadline is not graded on submit: it would replace, in the shared gradebook,
    what the instructor collected and graded. An extension moves the deadline."""
    course, exchange, fake = course
    monkeypatch.setenv("FAKE_DIR", str(fake.parent))
    due = T0 + dt.timedelta(minutes=30)
    (course / "term.toml").write_text(TERM.replace("2026-12-20T23:59:00Z", f"{due:%Y-%m-%dT%H:%M:%SZ}")
                                      + f'[[extension]]\nstudent = "bob"\nlab = "{LAB}"\nhours = 1\n')
    svc = service(course, exchange, fake)
    on_time = hand_in(exchange, "ann", T0 + dt.timedelta(minutes=10))
    late = hand_in(exchange, "ann", T0 + dt.timedelta(minutes=40), tag="late")
    extended = hand_in(exchange, "bob", T0 + dt.timedelta(minutes=40))
    svc.run(poll=0, once=True)
    assert states(svc) == {on_time: "graded", late: "late", extended: "graded"}
    assert "your instructor's grading takes it" in status(exchange, late)["detail"]


def test_a_folder_whose_name_cannot_be_stored_stops_nothing(course, monkeypatch):
    course, exchange, fake = course
    monkeypatch.setenv("FAKE_DIR", str(fake.parent))
    inbound = exchange / COURSE_ID / "inbound"
    os.mkdir(bytes(inbound) + f"/ann+{LAB}+{T0:%Y-%m-%d %H:%M:%S}.000000 UTC+".encode() + b"\xff\xfe")
    (inbound / f"ann+{LAB}+0001-01-01 00:00:00.000000 UTC+year1").mkdir()
    honest = hand_in(exchange, "bob", T0)
    svc = service(course, exchange, fake)
    svc.run(poll=0, once=True)
    assert states(svc) == {honest: "graded"}, "the two others are no submission; the class is graded"


def test_a_timestamp_file_that_disagrees_with_its_folder_is_refused(course, monkeypatch):
    """nbgrader charges lateness from timestamp.txt: one that says another time than the folder's name (written late
    with an on-time date), or none at all, is refused here as by collect."""
    course, exchange, fake = course
    monkeypatch.setenv("FAKE_DIR", str(fake.parent))
    svc = service(course, exchange, fake)
    claims = hand_in(exchange, "ann", T0)
    (exchange / COURSE_ID / "inbound" / claims / "timestamp.txt").write_text("2026-01-01 00:00:00.000000 UTC")
    missing = hand_in(exchange, "bob", T0)
    (exchange / COURSE_ID / "inbound" / missing / "timestamp.txt").unlink()
    svc.run(poll=0, once=True)
    assert states(svc) == {claims: "refused", missing: "refused"}
    assert "its timestamp.txt says 2026-01-01" in status(exchange, claims)["detail"]
    assert "no timestamp.txt" in status(exchange, missing)["detail"] and not calls(fake)
