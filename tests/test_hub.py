"""The class path through a real JupyterHub: `make hub`'s setup and configuration, started for real, used through
the hub's and the users' own servers' HTTP APIs (what the browser panels call).

Throw-away Unix accounts (as tests/test_exchange.py: needs root, skips saying why without it): an instructor who
owns a scratch checkout of the course (one lab), and two students. `python -m autograder.hub` (make hub's CLI) sets
up and starts the hub on loopback with the shared-password authenticator; the users' servers run this checkout's
environment (`--student-env`: building the student edition's own environment is `make hub`'s default and is
left out here for time; the edition itself is tests/test_student_edition.py's). Then:

    instructor  logs in, starts her server: the Course List links to the Formgrader service; Formgrader: release
    students    log in, start their servers (the student panels only), Fetch; one answers an exercise; Submit
    instructor  Formgrader: collect; `make grade`'s CLI as her own account (sandboxed); Formgrader: release feedback
    students    Fetch feedback: each sees their own score
and a student cannot read the checkout's solutions or the other student's home.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import pytest
import requests

from autograder import notebooks as nbu
from course import ROOT, light_release, light_source, notebook_name, place_light_lab
from test_exchange import COURSE_ID, LAB, reachable, two_users  # noqa: F401 (two_users: the fixture)

PASSWORD = "a-class-password"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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

    def __init__(self, hub: str, name: str, home: Path):
        self.hub, self.name, self.home = hub, name, home
        self.session = requests.Session()
        self.session.get(f"{hub}/hub/login")
        form = {"username": name, "password": PASSWORD, "_xsrf": self.session.cookies.get("_xsrf")}
        reply = self.session.post(f"{hub}/hub/login", data=form, allow_redirects=False)
        assert reply.status_code == 302, f"{name} could not log in: {reply.status_code} {reply.text[:300]}"
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

    def action(self, action: str) -> list:
        reply = self.own("POST", f"/assignments/{action}", data={"course_id": COURSE_ID, "assignment_id": LAB})
        assert reply.status_code == 200, f"{self.name}: {action}: {reply.status_code} {reply.text[:500]}"
        return reply.json()

    def formgrader(self, method: str, path: str) -> dict | list:
        reply = self.api(method, f"/services/{COURSE_ID}/formgrader/api{path}")
        assert reply.status_code == 200, f"Formgrader {path}: {reply.status_code} {reply.text[:500]}"
        return reply.json()


def page_config(member: Member) -> dict:
    html = member.own("GET", "/lab").text
    found = re.search(r'<script id="jupyter-config-data" type="application/json">(.*?)</script>', html, re.S)
    assert found, html[:500]
    return json.loads(found.group(1))


@pytest.fixture(scope="module")
def hub(two_users):  # noqa: F811
    base, users = two_users
    instructor, instructor_home = users.add("inst")
    students = [users.add("stud") for _ in range(2)]
    course = instructor_home / "course"
    place_light_lab(course)
    for name in ("nbgrader_config.py", "Makefile", "pyproject.toml"):   # timestamps kept: the venv is up to date
        shutil.copy2(ROOT / name, course)
    (course / ".venv").symlink_to(Path(sys.prefix).resolve())
    subprocess.run(["chown", "-R", "--no-dereference", f"{instructor}:{instructor}", str(course)], check=True)

    # The hub's folder outside /tmp (which the grading sandbox empties anyway), as /srv/training-infra would be.
    hub_dir = Path(tempfile.mkdtemp(prefix="training-infra-hub-", dir="/var/tmp"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "autograder.hub", "--hub-dir", str(hub_dir), "--course", str(course),
               "--students", " ".join(n for n, _ in students), "--instructors", instructor, "--auth", "shared",
               "--bind-url", url, "--student-env", sys.prefix,
               "--internal-ports", ",".join(str(free_port()) for _ in range(3))]
    env = {**os.environ, "HUB_PASSWORD": PASSWORD, "PYTHONPATH": str(ROOT)}
    log = (base / "hub.log").open("w")
    proc = subprocess.Popen(reachable(command), cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        started = time.monotonic()
        wait_for("the hub", lambda: requests.get(f"{url}/hub/api", timeout=5).ok, proc=proc)
        yield {"url": url, "base": base, "hub_dir": hub_dir, "course": course, "users": users, "instructor": (instructor, instructor_home),
               "students": students, "log": base / "hub.log", "start_s": time.monotonic() - started}
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
        instructor = Member(url, *hub["instructor"])
        students = [Member(url, *s) for s in hub["students"]]
        started = time.monotonic()
        for member in [instructor, *students]:
            member.start_server()
        print(f"hub up in {hub['start_s']:.1f} s; three servers started in {time.monotonic() - started:.1f} s")

        # The instructor's Lab: the Course List leads to the course's Formgrader service (no consent page).
        courses = instructor.own("GET", "/formgraders").json()
        assert courses["success"] and [c["course_id"] for c in courses["value"]] == [COURSE_ID], courses
        assert courses["value"][0]["url"].endswith(f"/services/{COURSE_ID}/lab?formgrader=true"), courses
        page = instructor.session.get(f"{url}/services/{COURSE_ID}/formgrader")
        assert page.status_code == 200 and "Authorize access" not in page.text, page.text[:300]

        # Students get the assignment list and Validate, not the instructor's panels.
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
        source, release = light_source(), light_release()
        reference = nbu.reference_answers(source)
        first = next(iter(reference))
        for i, student in enumerate(students):
            listed = student.own("GET", "/assignments", params={"course_id": COURSE_ID}).json()
            assert [a["assignment_id"] for a in listed["value"]] == [LAB], listed
            student.action("fetch")
            fetched = student.home / COURSE_ID / LAB / notebook_name(LAB)
            assert fetched.is_file(), f"Fetch did not put the lab in {fetched.parent}"
            if i == 0:   # the answer also tries to read the other submissions in the exchange, as graded
                probe = (f"import os\ntry:\n    print(os.listdir({str(hub['hub_dir'] / 'exchange' / COURSE_ID)!r}))\n"
                         f"    print('EXCHANGE-' + 'LEAKED')\nexcept OSError:\n    print('EXCHANGE-' + 'HIDDEN')\n")
                answer = nbu.fill(nbu.read(fetched), {first: probe + reference[first]})
                nbformat.write(answer, str(fetched))   # as root: the file keeps its owner
            student.action("submit")

        # A student can read neither the checkout's solutions, nor another student's home, nor list the submissions.
        solution = course / "solutions" / LAB / notebook_name(LAB)
        for target in (solution, students[1].home, hub["hub_dir"] / "exchange" / COURSE_ID / "inbound"):
            proc = hub["users"].attempt(students[0].name, students[0].home, students[0].home, "ls", str(target))
            assert proc.returncode != 0 and "Permission denied" in proc.stderr, (target, proc.stdout, proc.stderr)

        instructor.formgrader("POST", f"/assignment/{LAB}/collect")
        name, home = hub["instructor"]
        proc = hub["users"].run(name, home, course, sys.executable, "-m", "autograder.grade", "--course-dir",
                                str(course), "--assignment", LAB, "--jobs", "2")
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
    except AssertionError:
        print(hub["log"].read_text(encoding="utf-8")[-6000:])
        raise


def test_the_hub_configuration_loads_listens_on_loopback_and_names_the_course(tmp_path, monkeypatch):
    """Without root too: the configuration make hub starts, read with settings as setup writes them."""
    from traitlets.config.loader import PyFileConfigLoader

    from autograder import hub

    (tmp_path / "state").mkdir()
    (tmp_path / "state" / hub.SETTINGS).write_text(json.dumps({
        "course_id": hub.COURSE_ID, "course": str(ROOT), "grader": "grader", "course_python": sys.executable,
        "student_env": sys.prefix, "config_path": str(tmp_path / "jupyter"), "students": ["ann", "bob"],
        "instructors": ["cy"], "auth": "pam", "bind_url": hub.DEFAULT_BIND_URL,
        "internal_ports": {"hub": 8081, "formgrader": 9999, "proxy_api": 8001}}))
    monkeypatch.setenv("TRAINING_INFRA_HUB", str(tmp_path))
    config = PyFileConfigLoader(hub.CONFIG.name, path=str(hub.CONFIG.parent)).load_config()
    course_id = PyFileConfigLoader("nbgrader_config.py", path=str(ROOT)).load_config().CourseDirectory.course_id
    assert course_id == hub.COURSE_ID
    assert config.JupyterHub.load_groups == {f"nbgrader-{course_id}": {"users": ["ann", "bob"]},
                                             f"formgrade-{course_id}": {"users": ["cy"]}}
    assert [s["name"] for s in config.JupyterHub.services] == [course_id]
    assert config.JupyterHub.bind_url.startswith("http://127.0.0.1:")
    assert config.Authenticator.allowed_users == {"ann", "bob", "cy"}
