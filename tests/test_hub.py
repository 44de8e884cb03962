"""The class path through a real JupyterHub: `make hub`'s setup and configuration, started for real, used through
the hub's and the users' own servers' HTTP APIs (what the browser panels call).

Throw-away Unix accounts (as tests/test_exchange.py: needs root, skips saying why without it): an instructor who
owns a scratch checkout of the course (one lab), and two students. `python -m publish.hub` (make hub's CLI) sets
up and starts the hub on loopback with the shared passwords (students', instructors') from a root-only file; it
builds the student edition (the students' lessons come from it), but the users' servers run this checkout's
environment (`--student-env`: installing the edition into an environment of its own is `make hub`'s default and
is left out here for time; the edition itself is tests/test_student_edition.py's). Then:

    instructor  logs in, starts her server: the Course List links to the Formgrader service; Formgrader: release
    students    log in, start their servers (the student panels only), Fetch; one answers an exercise; Submit
    instructor  Formgrader: collect; `make grade`'s CLI as her own account (sandboxed); Formgrader: release feedback
    students    Fetch feedback: each sees their own score
and on the way, each wall is attacked as a hostile student would: the checkout's solutions, the other student's
home and the exchange's submissions are unreadable; the students' password does not open the instructor's account;
the Formgrader service's own token (stolen: read as root from its process) cannot put a student into the
instructors' group; the service's runtime files are outside every home; a student's Submit keeps only the last
few submissions and refuses a too-big one in one sentence. And what students need is there: their own copy of the
lessons, and a terminal whose `python` is the course's.
"""
from __future__ import annotations

import asyncio
import json
import os
import pwd
import re
import shutil
import signal
import socket
import sqlite3
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import pytest
import requests

from autograder import notebooks as nbu
from course import ROOT, light_source, notebook_name, place_light_lab
from test_exchange import COURSE_ID, LAB, reachable, two_users  # noqa: F401 (two_users: the fixture)

STUDENT_PASSWORD = "a-class-password"
INSTRUCTOR_PASSWORD = "the-teachers-own-password"
KEEP, MAX_MB = 2, 1          # Submit's limits on this hub (make hub's defaults are 5 and 20 MB)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def log_in(hub: str, name: str, password: str) -> requests.Session:
    """A session through the hub's login page (raises, saying so, when the hub refuses the password)."""
    session = requests.Session()
    session.get(f"{hub}/hub/login")
    form = {"username": name, "password": password, "_xsrf": session.cookies.get("_xsrf")}
    reply = session.post(f"{hub}/hub/login", data=form, allow_redirects=False)
    if reply.status_code != 302:
        raise PermissionError(f"{name} could not log in: {reply.status_code} {reply.text[:300]}")
    return session


def wait_for(what: str, check, timeout: float = 90.0, proc: subprocess.Popen | None = None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"{what}: the hub exited ({proc.returncode})")
        try:
            result = check()
        except requests.ConnectionError:
            result = None
        if result:
            return result
        time.sleep(0.5)
    raise AssertionError(f"{what}: not within {timeout:.0f} s")


class Member:
    """A course member logged in through the hub's login page, with an API token for scripted requests."""

    def __init__(self, hub: str, name: str, home: Path, password: str = STUDENT_PASSWORD):
        self.hub, self.name, self.home = hub, name, home
        self.session = log_in(hub, name, password)
        reply = self.session.post(f"{hub}/hub/api/users/{name}/tokens", json={"note": "test_hub"},
                                  headers={"X-XSRFToken": self.session.cookies.get("_xsrf")})
        assert reply.status_code == 201, reply.text
        self.headers = {"Authorization": f"token {reply.json()['token']}"}

    def api(self, method: str, path: str, **kw) -> requests.Response:
        return requests.request(method, f"{self.hub}{path}", headers=self.headers, timeout=120, **kw)

    def start_server(self) -> None:
        reply = self.api("POST", f"/hub/api/users/{self.name}/server")
        assert reply.status_code in (201, 202), reply.text
        wait_for(f"{self.name}'s server", lambda: self.api("GET", f"/hub/api/users/{self.name}").json()
                 ["servers"].get("", {}).get("ready"))

    def own(self, method: str, path: str, **kw) -> requests.Response:
        """A request to the member's own Jupyter server (nbgrader's server extensions, JupyterLab)."""
        return self.api(method, f"/user/{self.name}{path}", **kw)

    def action(self, action: str, refused: bool = False) -> dict:
        reply = self.own("POST", f"/assignments/{action}", data={"course_id": COURSE_ID, "assignment_id": LAB})
        assert reply.status_code == 200, f"{self.name}: {action}: {reply.status_code} {reply.text[:500]}"
        result = reply.json()
        assert result["success"] != refused, f"{self.name}: {action}: {result}"
        return result

    def submissions(self) -> list:
        """The Assignment List's submissions of the lab (from the student's nbgrader cache)."""
        listed = self.own("GET", "/assignments", params={"course_id": COURSE_ID}).json()["value"]
        return [s for a in listed if a["status"] == "submitted" for s in a["submissions"]]

    def terminal(self, command: str, until: str) -> str:
        """What a new JupyterLab terminal prints for ``command``, up to the regular expression ``until``."""
        name = self.own("POST", "/api/terminals").json()["name"]

        async def talk() -> str:
            from tornado.httpclient import HTTPRequest
            from tornado.websocket import websocket_connect
            url = f"{self.hub.replace('http', 'ws', 1)}/user/{self.name}/terminals/websocket/{name}"
            ws = await websocket_connect(HTTPRequest(url, headers=self.headers))
            await ws.write_message(json.dumps(["stdin", command + "\r"]))
            shown = ""
            while not re.search(until, shown):
                message = await asyncio.wait_for(ws.read_message(), 30)
                if message is None:
                    break
                kind, *data = json.loads(message)
                shown += data[0] if kind == "stdout" else ""
            ws.close()
            return shown
        try:
            return asyncio.run(talk())
        finally:
            self.own("DELETE", f"/api/terminals/{name}")

    def formgrader(self, method: str, path: str) -> dict | list:
        reply = self.api(method, f"/services/{COURSE_ID}/formgrader/api{path}")
        assert reply.status_code == 200, f"Formgrader {path}: {reply.status_code} {reply.text[:500]}"
        return reply.json()


def page_config(member: Member) -> dict:
    html = member.own("GET", "/lab").text
    found = re.search(r'<script id="jupyter-config-data" type="application/json">(.*?)</script>', html, re.S)
    assert found, html[:500]
    return json.loads(found.group(1))


def service_pid(course: Path) -> int:
    """The Formgrader service's process (the hub started it as the grader account, in the checkout)."""
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0") if entry.name.isdigit() else []
        except OSError:
            continue
        if f"--ServerApp.root_dir={course}".encode() in argv and any(a.endswith(b"-singleuser") for a in argv):
            return int(entry.name)
    raise AssertionError(f"no Formgrader service process for {course}")


def environ(pid: int) -> dict:
    """A process's environment, read as root (the account that runs the process can read it too)."""
    raw = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
    return dict(item.split("=", 1) for item in raw.split("\0") if "=" in item)


def attack_logins(hub, students: list[Member]) -> None:
    """AUTH=shared: the students' password does not open an instructor's account (nor the other way round)."""
    with pytest.raises(PermissionError):
        log_in(hub["url"], hub["instructor"][0], STUDENT_PASSWORD)
    with pytest.raises(PermissionError):
        log_in(hub["url"], students[0].name, INSTRUCTOR_PASSWORD)
    stored = hub["hub_dir"] / "state" / "passwords.json"
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600 and stored.stat().st_uid == 0
    for pid in (hub["pid"], service_pid(hub["course"].resolve())):
        seen = json.dumps(environ(pid))
        assert STUDENT_PASSWORD not in seen and INSTRUCTOR_PASSWORD not in seen, f"a password is in {pid}'s environment"


# Graded, the first student's answer searches everything its kernel can reach for secrets of the grading account (its
# environment, the files it can read anywhere) and prints what it finds into its own feedback.
SNOOP = r'''
import os, re, stat, sys
_found = set()
for _key, _value in os.environ.items():
    if re.search("TOKEN|SECRET|KEY|PASS|JUPYTERHUB|JPY_API", _key):
        _found.add(f"{_key}={_value}")
_seen = 0
for _folder, _dirs, _files in os.walk("/"):
    if _folder.startswith(("/usr", "/sys", "/dev", "/proc/sys", sys.prefix, sys.base_prefix)) or _seen > 20000:
        _dirs[:] = []
        continue
    for _name in _files:
        _path = os.path.join(_folder, _name)
        try:
            if stat.S_ISREG(os.stat(_path).st_mode):
                _seen += 1
                _text = open(_path, "rb").read(1 << 20).decode("latin-1")
                _found.update(re.findall(r"\b[0-9a-f]{32,64}\b|planted-hub-[a-z]+", _text))
        except OSError:
            pass
print("SNOOP-FOUND", _seen, sorted(_found)[:200])
'''


def plant_secrets(hub) -> dict[str, str]:
    """Where the grading account keeps secrets of its own: a key in its home, and the environment of a shell opened
    in the Formgrader (the service's: its hub API token), with which the test runs `make grade`."""
    name, home = hub["instructor"]
    ssh = home / ".ssh"
    ssh.mkdir(exist_ok=True)
    (ssh / "id_planted").write_text("planted-hub-sshkey\n")
    subprocess.run(["chown", "-R", f"{name}:{name}", str(ssh)], check=True)
    ssh.chmod(0o700)
    service = environ(service_pid(hub["course"].resolve()))
    return {k: v for k, v in service.items() if k.startswith(("JUPYTERHUB_", "JPY_", "JUPYTER_"))}


def attack_with_what_grading_leaked(hub, feedback: str, service_env: dict[str, str]) -> None:
    """The snooping submission's feedback holds no secret of the grading account, and no token it found works."""
    printed = re.search(r"SNOOP-FOUND (\d+) (\[.*?\])", feedback, re.S)     # its output (the source names it too)
    assert printed, "the snooping answer did not run"
    seen = printed.group(2)
    assert int(printed.group(1)) > 20, f"the snoop read too little to mean anything: {printed.group(0)[:300]}"
    print(f"the graded snoop read {printed.group(1)} files and found {seen[:300]}")
    secrets = [v for k, v in service_env.items() if "TOKEN" in k] + ["planted-hub-sshkey"]
    assert not [s for s in secrets if s in feedback], f"a secret of the grading account reached the feedback: {seen}"
    for candidate in set(re.findall(r"\b[0-9a-f]{32,64}\b", seen)):
        reply = requests.get(f"{hub['url']}/hub/api/user", headers={"Authorization": f"token {candidate}"}, timeout=30)
        assert reply.status_code in (401, 403), f"a string the submission found opens the hub's API: {reply.text}"


def attack_with_the_service_token(hub, students: list[Member]) -> None:
    """The Formgrader service's own token, stolen: it cannot make a student an instructor (or change any group)."""
    pid = service_pid(hub["course"].resolve())
    stolen = {"Authorization": f"token {environ(pid)['JUPYTERHUB_API_TOKEN']}"}
    api = f"{hub['url']}/hub/api"
    assert requests.get(f"{api}/user", headers=stolen, timeout=30).json()["kind"] == "service", "not its token"
    for group in (f"formgrade-{COURSE_ID}", f"nbgrader-{COURSE_ID}"):
        reply = requests.post(f"{api}/groups/{group}/users", json={"users": [students[0].name]}, headers=stolen,
                              timeout=30)
        assert reply.status_code == 403, f"the service's token changed {group}: {reply.status_code} {reply.text}"
    assert requests.get(f"{api}/users", headers=stolen, timeout=30).status_code == 403, "it lists the accounts"


def check_service_runtime(hub) -> None:
    """The service's Jupyter runtime files (its server's token) are in <hub>/runtime/<course>, not in a home."""
    pid = service_pid(hub["course"].resolve())
    runtime = hub["hub_dir"] / "runtime" / COURSE_ID
    assert environ(pid)["JUPYTER_RUNTIME_DIR"] == str(runtime)
    info = runtime.stat()
    assert stat.S_IMODE(info.st_mode) == 0o700 and info.st_uid == pwd.getpwnam(hub["instructor"][0]).pw_uid
    assert (runtime / f"jpserver-{pid}.json").is_file(), sorted(p.name for p in runtime.iterdir())
    in_home = hub["instructor"][1] / ".local" / "share" / "jupyter" / "runtime"
    assert not list(in_home.glob(f"jpserver-{pid}*")), f"the service's runtime files are in {in_home}"


def check_lessons_and_terminal(hub, students: list[Member]) -> None:
    """Each student's server starts with their own lessons/ (an existing folder of that name is left alone), and
    a terminal whose `python` is the course's environment's (a login shell would have reset PATH)."""
    edition = sorted(p.name for p in (hub["hub_dir"] / "student-edition" / "lessons").iterdir())
    assert any(name.endswith("_lesson.ipynb") for name in edition), edition
    listed = students[0].own("GET", "/api/contents/lessons").json()
    assert sorted(item["name"] for item in listed["content"]) == edition, listed
    assert (students[0].home / "lessons" / edition[0]).stat().st_uid == pwd.getpwnam(students[0].name).pw_uid
    kept = students[1].own("GET", "/api/contents/lessons").json()
    assert [item["name"] for item in kept["content"]] == ["mine.txt"], kept

    config = json.loads((hub["hub_dir"] / "jupyter" / "student" / "jupyter_server_config.json").read_text())
    assert config["ServerApp"]["terminado_settings"]["shell_command"][1:] == ["-i"], config
    shown = students[0].terminal("echo PY=$(command -v python)=END", r"PY=(\S*)=END")
    found = re.search(r"PY=(\S*)=END", shown)
    assert found and found.group(1) == f"{sys.prefix}/bin/python", f"the terminal's python: {shown[-500:]!r}"


def attack_with_resubmissions(hub, student: Member) -> None:
    """Submitting again and again keeps only the last KEEP submissions; a too-big one is refused in one sentence."""
    for _ in range(KEEP):     # KEEP + 1 submissions in all
        student.action("submit")
    inbound = hub["hub_dir"] / "exchange" / COURSE_ID / "inbound"
    mine = lambda: sorted(p.name for p in inbound.glob(f"{student.name}+{LAB}+*"))  # noqa: E731
    kept = mine()
    assert len(kept) == KEEP and len(student.submissions()) == KEEP, (kept, student.submissions())

    big = student.home / COURSE_ID / LAB / "data.bin"
    big.write_bytes(b"\0" * int(MAX_MB * 1.5e6))
    os.chown(big, pwd.getpwnam(student.name).pw_uid, pwd.getpwnam(student.name).pw_gid)
    refusal = student.action("submit", refused=True)["value"]
    big.unlink()
    assert "Traceback" not in refusal and "\n" not in refusal.strip(), refusal
    assert f"more than the {MAX_MB:g} MB" in refusal and f"last {KEEP} submissions" in refusal, refusal
    assert mine() == kept, "a refused submission changed the exchange"


@pytest.fixture(scope="module")
def hub(two_users):  # noqa: F811
    base, users = two_users
    instructor, instructor_home = users.add("inst")
    students = [users.add("stud") for _ in range(2)]
    course = instructor_home / "course"
    place_light_lab(course)
    # What the Makefile reads (it includes the students' targets); timestamps kept: the venv is up to date.
    for name in ("nbgrader_config.py", "Makefile", "pyproject.toml", "publish/student_edition/student.mk"):
        (course / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, course / name)
    (course / ".venv").symlink_to(Path(sys.prefix).resolve())
    subprocess.run(["chown", "-R", "--no-dereference", f"{instructor}:{instructor}", str(course)], check=True)

    # The second student already has a folder named lessons: the hub must leave it as it is.
    own_lessons = students[1][1] / "lessons"
    own_lessons.mkdir()
    (own_lessons / "mine.txt").write_text("my notes\n")
    subprocess.run(["chown", "-R", f"{students[1][0]}:{students[1][0]}", str(own_lessons)], check=True)

    # AUTH=shared's two passwords from a file only root can read (make hub's HUB_PASSWORD_FILE), as a script would.
    password_file = base / "hub-passwords"
    password_file.touch(mode=0o600)
    password_file.write_text(f"students = {STUDENT_PASSWORD}\ninstructors = {INSTRUCTOR_PASSWORD}\n")
    # The hub's folder outside /tmp (which the grading sandbox empties anyway), as /srv/training-infra would be.
    hub_dir = Path(tempfile.mkdtemp(prefix="training-infra-hub-", dir="/var/tmp"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "publish.hub", "--hub-dir", str(hub_dir), "--course", str(course),
               "--students", " ".join(n for n, _ in students), "--instructors", instructor, "--auth", "shared",
               "--password-file", str(password_file), "--keep-submissions", str(KEEP),
               "--max-submission-mb", str(MAX_MB), "--bind-url", url, "--student-env", sys.prefix,
               "--internal-ports", ",".join(str(free_port()) for _ in range(3))]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    log = (base / "hub.log").open("w")
    proc = subprocess.Popen(reachable(command), cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        started = time.monotonic()
        wait_for("the hub", lambda: requests.get(f"{url}/hub/api", timeout=5).ok, proc=proc)
        yield {"url": url, "base": base, "hub_dir": hub_dir, "course": course, "users": users,
               "instructor": (instructor, instructor_home), "students": students, "log": base / "hub.log",
               "start_s": time.monotonic() - started, "pid": proc.pid}
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        else:
            print((base / "hub.log").read_text(encoding="utf-8")[-6000:])
        log.close()
        shutil.rmtree(hub_dir, ignore_errors=True)


def test_a_class_round_trip_through_the_hub(hub):
    url, course = hub["url"], hub["course"]
    try:
        # The instructor's own commands still work in the checkout make hub set up (its exchange is now a link).
        hub["users"].run(*hub["instructor"], course, "make", "--no-print-directory", "install")
        instructor = Member(url, *hub["instructor"], password=INSTRUCTOR_PASSWORD)
        students = [Member(url, *s) for s in hub["students"]]
        term = course / "term.toml"      # a due date far ahead, and an extension for the second student
        term.write_text(f'version = 1\n[labs]\n{LAB} = 2099-01-01T00:00:00Z\n[[extension]]\n'
                        f'student = "{students[1].name}"\nlab = "{LAB}"\nhours = 48\nnote = "doctor"\n')
        subprocess.run(["chown", f"{hub['instructor'][0]}:{hub['instructor'][0]}", str(term)], check=True)
        started = time.monotonic()
        for member in [instructor, *students]:
            member.start_server()
        check_deadlines(students)
        print(f"hub up in {hub['start_s']:.1f} s; three servers started in {time.monotonic() - started:.1f} s")
        attack_logins(hub, students)
        attack_with_the_service_token(hub, students)
        check_service_runtime(hub)
        check_lessons_and_terminal(hub, students)

        # The instructor's Lab: the Course List leads to the course's Formgrader service (no consent page).
        courses = instructor.own("GET", "/formgraders").json()
        assert courses["success"] and [c["course_id"] for c in courses["value"]] == [COURSE_ID], courses
        assert courses["value"][0]["url"].endswith(f"/services/{COURSE_ID}/lab?formgrader=true"), courses
        page = instructor.session.get(f"{url}/services/{COURSE_ID}/formgrader")
        assert page.status_code == 200 and "Authorize access" not in page.text, page.text[:300]

        # Students get the assignment list and Validate, not the instructor's panels, nor (after the stolen service
        # token's attempt above) the Formgrader.
        for student in students:
            disabled = set(page_config(student)["disabledExtensions"])
            assert "@jupyter/nbgrader:assignment-list" not in disabled, disabled
            assert {"@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:create-assignment",
                    "@jupyter/nbgrader:course-list"} <= disabled, disabled
            assert student.own("GET", "/formgrader/api/status").status_code == 404
            assert student.api("GET", f"/services/{COURSE_ID}/formgrader/api/assignments").status_code in (302, 403)

        instructor.formgrader("POST", f"/assignment/{LAB}/release")
        assert LAB in [a["name"] for a in instructor.formgrader("GET", "/assignments")]

        # Students fetch through their Assignment List; the first answers the first exercise; both submit.
        source = light_source()
        reference = nbu.reference_answers(source)
        first = next(iter(reference))
        for i, student in enumerate(students):
            listed = student.own("GET", "/assignments", params={"course_id": COURSE_ID}).json()
            assert [a["assignment_id"] for a in listed["value"]] == [LAB], listed
            student.action("fetch")
            fetched = student.home / COURSE_ID / LAB / notebook_name(LAB)
            assert fetched.is_file(), f"Fetch did not put the lab in {fetched.parent}"
            if i == 0:   # the answer also snoops (SNOOP) and tries to read the exchange's submissions, as graded
                probe = (f"import os\ntry:\n    print(os.listdir({str(hub['hub_dir'] / 'exchange' / COURSE_ID)!r}))\n"
                         f"    print('EXCHANGE-' + 'LEAKED')\nexcept OSError:\n    print('EXCHANGE-' + 'HIDDEN')\n"
                         + SNOOP)
                answer = nbu.fill(nbu.read(fetched), {first: probe + reference[first]})
                nbformat.write(answer, str(fetched))   # as root: the file keeps its owner
            student.action("submit")
        attack_with_resubmissions(hub, students[1])

        # A student can read neither the checkout's solutions, nor another student's home, nor list the submissions,
        # nor the hub's state (AUTH=shared's passwords).
        solution = course / "solutions" / LAB / notebook_name(LAB)
        for target in (solution, students[1].home, hub["hub_dir"] / "exchange" / COURSE_ID / "inbound",
                       hub["hub_dir"] / "state" / "passwords.json"):
            proc = hub["users"].attempt(students[0].name, students[0].home, students[0].home, "ls", str(target))
            assert proc.returncode != 0 and "Permission denied" in proc.stderr, (target, proc.stdout, proc.stderr)

        instructor.formgrader("POST", f"/assignment/{LAB}/collect")
        name, home = hub["instructor"]
        service_env = plant_secrets(hub)      # make grade as if typed in a terminal of the Formgrader's Lab
        proc = hub["users"].run(name, home, course, "env", *[f"{k}={v}" for k, v in service_env.items()],
                                sys.executable, "-m", "autograder.grade", "--course-dir", str(course), "--assignment",
                                LAB, "--jobs", "2")
        assert "without isolation" not in proc.stdout + proc.stderr, proc.stdout
        graded = (course / "autograded" / students[0].name / LAB / notebook_name(LAB)).read_text(encoding="utf-8")
        assert "EXCHANGE-HIDDEN" in graded and "EXCHANGE-LEAKED" not in graded, \
            "graded in the sandbox, a submission could read the exchange (every student's submissions)"
        instructor.formgrader("POST", f"/assignment/{LAB}/release_feedback")

        from nbgrader.api import Gradebook
        with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
            scores = {s.name: gb.find_submission(LAB, s.name).score for s in students}
            out_of = gb.find_submission(LAB, students[0].name).max_score
        assert scores[students[0].name] > 0 and scores[students[1].name] == 0, scores
        for student in students:
            student.action("fetch_feedback")
            feedback = sorted((student.home / COURSE_ID / LAB / "feedback").glob("*/*.html"))
            assert feedback, f"{student.name}: Fetch feedback brought nothing"
            html = feedback[-1].read_text(encoding="utf-8")
            assert re.search(rf"Score:\s*{scores[student.name]:g}\s*/\s*{out_of:g}\b", html), \
                f"{student.name} should see their score {scores[student.name]:g} / {out_of:g}"
            if student is students[0]:
                attack_with_what_grading_leaked(hub, html, service_env)
        check_grade_on_submit(hub, students, scores, out_of)
    except AssertionError:
        print(hub["log"].read_text(encoding="utf-8")[-6000:])
        for log in (course / "grades" / "on_submit").glob("*.log"):   # grade on submit's runs
            print(f"--- {log}\n{log.read_text(encoding='utf-8')[-4000:]}")
        raise


def check_deadlines(students: list[Member]) -> None:
    """Each student's server start wrote their own deadlines, extension included, readable by them alone."""
    mine, theirs = ((s.home / COURSE_ID / "DEADLINES.md") for s in students)
    assert f"- {LAB}: due Thu 1 Jan 2099, 00:00 (UTC)." in mine.read_text(encoding="utf-8")
    text = theirs.read_text(encoding="utf-8")
    assert "your extension moves it to Sat 3 Jan 2099, 00:00 (UTC)" in text and "doctor" not in text, text
    assert theirs.stat().st_uid == pwd.getpwnam(students[1].name).pw_uid and theirs.stat().st_mode & 0o077 == 0
    assert "extension" not in mine.read_text(encoding="utf-8").split("\n\n", 2)[2], "no one else's extension"


def latest_state(student: Member) -> str:
    """What the Assignment List shows beside the student's newest submission: its time and the grading state."""
    listed = student.submissions()
    return listed[-1]["timestamp"] if listed else ""


def newest_feedback_score(student: Member) -> str:
    student.action("fetch_feedback")
    newest = max((student.home / COURSE_ID / LAB / "feedback").glob("*/*.html"), key=lambda p: p.parent.name)
    found = re.search(r"Score:\s*([\d.]+\s*/\s*[\d.]+)", newest.read_text(encoding="utf-8"))
    return re.sub(r"\s+", "", found.group(1)) if found else ""


def check_grade_on_submit(hub, students: list[Member], batch: dict, out_of: float) -> None:
    """Grade on submit (autograder/on_submit.py), the service make hub started, idle until now: the instructor turns
    it on in the course file; a submission is graded and its feedback comes back by itself with the batch grader's
    score; the next one within the hour is refused in words; the service killed mid-grade and started again loses
    nothing and grades the cut submission once more, nothing else."""
    course, (grader, grader_home) = hub["course"], hub["instructor"]
    term = course / "term.toml"
    term.write_text(f'version = 1\n[labs]\n{LAB} = 2099-01-01T00:00:00Z\n[on_submit]\nper_hour = 1\n'
                    f'[on_submit.labs]\n{LAB} = "everything"\n')
    subprocess.run(["chown", f"{grader}:{grader}", str(term)], check=True)
    limits = hub["hub_dir"] / "exchange" / COURSE_ID / "on_submit" / "limits.json"
    wait_for("the service's limits", lambda: limits.is_file() and LAB in json.loads(limits.read_text()), 30)

    ann, bob = students
    started = time.monotonic()
    ann.action("submit")
    wait_for("ann's feedback", lambda: "graded on submit" in latest_state(ann), 120)
    print(f"grade on submit: Submit to feedback ready in {time.monotonic() - started:.1f} s")
    assert ann.submissions()[-1]["has_exchange_feedback"], ann.submissions()[-1]
    assert newest_feedback_score(ann) == f"{batch[ann.name]:g}/{out_of:g}", "the batch grader's score"
    refusal = ann.action("submit", refused=True)["value"]
    assert refusal.startswith(f"Not submitted: you can submit {LAB} again from ") and \
        "It is graded when you submit, at most once an hour" in refusal and "Traceback" not in refusal, refusal

    bob.action("submit")
    wait_for("bob's grading", lambda: "being graded now" in latest_state(bob), 60)
    # This hub's service only (another test session's hub on the machine has its own)
    subprocess.run(["pkill", "-KILL", "-f", f"autograder.on_submit --course-dir {course}"], check=True)
    time.sleep(1)
    assert "being graded now" in latest_state(bob), "killed mid-grade"
    # Started again (JupyterHub restarts it within its 30-second poll; here at once, by hand, as the grader):
    proc = hub["users"].run(grader, grader_home, course, sys.executable, "-m", "autograder.on_submit",
                            "--course-dir", str(course), "--once")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "graded on submit" in latest_state(bob), latest_state(bob)
    assert newest_feedback_score(bob) == f"{batch[bob.name]:g}/{out_of:g}"
    with sqlite3.connect(course / "grades" / "on_submit" / "queue.db") as db:
        rows = {student: (state, tries) for student, state, tries in
                db.execute("SELECT student, state, tries FROM submission")}
    assert rows == {ann.name: ("graded", 1), bob.name: ("graded", 2)}, rows
    term.unlink()


def load_hub_config(hub_dir: Path, auth: str, monkeypatch):
    """The configuration make hub starts, read with settings (and passwords) as setup writes them."""
    from traitlets.config.loader import PyFileConfigLoader

    from publish import hub

    (hub_dir / "state").mkdir(exist_ok=True)
    (hub_dir / "state" / hub.SETTINGS).write_text(json.dumps({
        "course_id": hub.COURSE_ID, "course": str(ROOT), "grader": "grader", "course_python": sys.executable,
        "student_env": sys.prefix, "config_path": str(hub_dir / "jupyter"), "lessons": str(hub_dir / "lessons"),
        "service_runtime": str(hub_dir / "runtime" / hub.COURSE_ID), "students": ["ann", "bob"],
        "instructors": ["cy"], "auth": auth, "bind_url": hub.DEFAULT_BIND_URL,
        "internal_ports": {"hub": 8081, "formgrader": 9999, "proxy_api": 8001}}))
    (hub_dir / "state" / hub.PASSWORDS).write_text(json.dumps({"students": STUDENT_PASSWORD,
                                                                "instructors": INSTRUCTOR_PASSWORD}))
    monkeypatch.setenv("TRAINING_INFRA_HUB", str(hub_dir))
    return PyFileConfigLoader(hub.CONFIG.name, path=str(hub.CONFIG.parent)).load_config()


def test_the_hub_configuration_loads_listens_on_loopback_and_names_the_course(tmp_path, monkeypatch):
    """Without root too: the service holds no scope on the hub, its runtime files go to the hub's folder."""
    from traitlets.config.loader import PyFileConfigLoader

    from publish import hub

    config = load_hub_config(tmp_path, "pam", monkeypatch)
    course_id = PyFileConfigLoader("nbgrader_config.py", path=str(ROOT)).load_config().CourseDirectory.course_id
    assert course_id == hub.COURSE_ID
    assert config.JupyterHub.load_groups == {f"nbgrader-{course_id}": {"users": ["ann", "bob"]},
                                             f"formgrade-{course_id}": {"users": ["cy"]}}
    assert [s["name"] for s in config.JupyterHub.services] == [course_id, "grade-on-submit"]
    assert config.JupyterHub.services[0]["environment"]["JUPYTER_RUNTIME_DIR"] == str(tmp_path / "runtime" / course_id)
    on_submit = config.JupyterHub.services[1]
    assert on_submit["user"] == "grader" and "url" not in on_submit, "no route through the proxy"
    assert on_submit["command"][1:3] == ["-m", "autograder.on_submit"]
    assert not [r for r in config.JupyterHub.load_roles if r.get("services")], "the service holds a role"
    assert config.JupyterHub.bind_url.startswith("http://127.0.0.1:")
    assert config.Authenticator.allowed_users == {"ann", "bob", "cy"}

    # A member's role configuration: a terminal that keeps the server's PATH, and Submit with its limits.
    folder = tmp_path / "jupyter" / "student"
    hub.role_config(folder, "student", tmp_path / "exchange", keep=3, max_mb=7.5)
    server = json.loads((folder / "jupyter_server_config.json").read_text())["ServerApp"]
    assert server["terminado_settings"]["shell_command"][1:] == ["-i"]
    assert server["jpserver_extensions"]["trainkit.submit"] is True
    nbgrader = PyFileConfigLoader("nbgrader_config.py", path=str(folder)).load_config()
    assert nbgrader.ExchangeFactory.submit == "trainkit.submit.CappedSubmit"
    assert (nbgrader.CappedSubmit.keep, nbgrader.CappedSubmit.max_mb) == (3, 7.5)


def test_shared_passwords_one_for_students_another_for_instructors(tmp_path, monkeypatch):
    """AUTH=shared: the students' password does not open an instructor's account; make hub refuses a missing or
    equal instructors' password and a password file others can read, and asks on the terminal otherwise."""
    from publish import hub

    config = load_hub_config(tmp_path, "shared", monkeypatch)
    authenticator = config.JupyterHub.authenticator_class(config=config)
    def login(name: str, password: str):
        return asyncio.run(authenticator.authenticate(None, {"username": name, "password": password}))
    assert login("cy", INSTRUCTOR_PASSWORD) == {"name": "cy"} and login("cy", STUDENT_PASSWORD) is None
    assert login("ann", STUDENT_PASSWORD)["name"] == "ann" and login("ann", INSTRUCTOR_PASSWORD) is None

    state = tmp_path / "fresh-state"
    state.mkdir()
    for students, instructors in ((STUDENT_PASSWORD, ""), (STUDENT_PASSWORD, STUDENT_PASSWORD), ("short", "x" * 9)):
        monkeypatch.setenv("HUB_PASSWORD", students)
        monkeypatch.setenv("HUB_INSTRUCTOR_PASSWORD", instructors)
        with pytest.raises(hub.SetupError, match="password"):
            hub.shared_passwords(state, None)
    monkeypatch.delenv("HUB_PASSWORD")
    monkeypatch.delenv("HUB_INSTRUCTOR_PASSWORD")
    password_file = tmp_path / "passwords"
    password_file.write_text(f"students = {STUDENT_PASSWORD}\ninstructors = {INSTRUCTOR_PASSWORD}\n")
    password_file.chmod(0o644)
    with pytest.raises(hub.SetupError, match="readable by root only"):
        hub.shared_passwords(state, password_file)
    password_file.chmod(0o600)
    if os.geteuid() == 0:
        assert hub.shared_passwords(state, password_file) == {"students": STUDENT_PASSWORD,
                                                              "instructors": INSTRUCTOR_PASSWORD}
    typed = iter([STUDENT_PASSWORD, STUDENT_PASSWORD, INSTRUCTOR_PASSWORD, INSTRUCTOR_PASSWORD])
    monkeypatch.setattr(hub.getpass, "getpass", lambda prompt: next(typed))
    monkeypatch.setattr(hub.sys.stdin, "isatty", lambda: True)
    assert hub.shared_passwords(state, None) == {"students": STUDENT_PASSWORD, "instructors": INSTRUCTOR_PASSWORD}


def test_submit_keeps_the_last_few_and_refuses_a_big_one_in_one_sentence(tmp_path, monkeypatch):
    """Without root too: the hub's Submit (trainkit/submit.py) run through nbgrader's own exchange classes."""
    import traceback

    from nbgrader.auth import Authenticator
    from nbgrader.coursedir import CourseDirectory
    from nbgrader.server_extensions.assignment_list.handlers import AssignmentList
    from traitlets.config import Config

    from trainkit.submit import AssignmentListWithRefusals, CappedSubmit, SubmitRefused

    exchange, home = tmp_path / "exchange", tmp_path / "home"
    (exchange / COURSE_ID / "inbound").mkdir(parents=True)
    for folder in (exchange / COURSE_ID / "outbound" / "lab", home / COURSE_ID / "lab"):   # released, fetched
        folder.mkdir(parents=True)
        (folder / "lab.ipynb").write_text("{}")
    config = Config()
    config.CourseDirectory.course_id, config.CourseDirectory.assignment_id = COURSE_ID, "lab"
    config.Exchange.root, config.Exchange.cache = str(exchange), str(tmp_path / "cache")
    config.Exchange.assignment_dir, config.Exchange.path_includes_course = str(home), True
    config.CappedSubmit.keep, config.CappedSubmit.max_mb = 2, 0.01

    def submit() -> None:
        CappedSubmit(coursedir=CourseDirectory(config=config), authenticator=Authenticator(config=config),
                     config=config).start()
    for _ in range(3):
        submit()
    assert len(list((exchange / COURSE_ID / "inbound").iterdir())) == 2
    assert len(list((tmp_path / "cache" / COURSE_ID).iterdir())) == 2

    (home / COURSE_ID / "lab" / "data.bin").write_bytes(b"\0" * 20_000)
    with pytest.raises(SubmitRefused) as refused:
        submit()
    message = str(refused.value)
    assert "more than the 0.01 MB" in message and "last 2 submissions" in message, message
    assert len(list((exchange / COURSE_ID / "inbound").iterdir())) == 2
    # What the Assignment List shows for it: that sentence, not nbgrader's traceback.
    shown = "".join(traceback.format_exception(refused.value))
    monkeypatch.setattr(AssignmentList, "submit_assignment", lambda *a: {"success": False, "value": shown})
    assert AssignmentListWithRefusals().submit_assignment(COURSE_ID, "lab") == {"success": False, "value": message}
