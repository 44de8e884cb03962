"""The course on one Linux server, for a class: set up and start JupyterHub (`make hub`, as root).

    sudo make hub STUDENTS="ann bob" INSTRUCTORS="cy"                        # PAM: the accounts' own passwords
    sudo HUB_PASSWORD=… make hub STUDENTS="ann bob" INSTRUCTORS="cy" AUTH=shared   # to try it: one password

Run it from the instructor's checkout, which belongs to the grader account (the instructor's own, or one made for
grading; never root). Everything is a standard part: JupyterHub with its proxy (pinned in pyproject.toml), PAM or
JupyterHub's shared-password authenticator, the LocalProcessSpawner (each user's server runs as that user),
nbgrader's exchange, and the Formgrader as a hub service running as the grader account in the checkout.

`setup` (every start runs it; it is idempotent) puts in place, under the hub folder (default /srv/training-infra):
- ``state/``: the hub's database, cookie secret and settings (root only);
- ``exchange/``: nbgrader's exchange (mode 1777, as nbgrader requires); the checkout's ``.nbgrader_exchange``
  becomes a link to it, so the course's own nbgrader_config.py needs no change;
- ``student-edition/`` and ``student-env/``: the student edition built from this checkout and a Python
  environment with it installed, which every user's server runs (the instructors' too: they grade through the
  Formgrader service, which runs the checkout's own ``.venv``);
- ``jupyter/<role>/``: a Jupyter configuration folder per role (students, instructors, the Formgrader service):
  which nbgrader panels each gets, and the students' nbgrader configuration (course, exchange). A user's server
  finds its role's folder on JUPYTER_CONFIG_PATH.
and makes the checkout (0700) and every course member's home (0700) private: a student can read neither the
reference solutions nor another student's work. `setup` creates missing accounts only with AUTH=shared.
"""
from __future__ import annotations

import argparse
import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COURSE_ID = "training-infra"        # = c.CourseDirectory.course_id in nbgrader_config.py
CONFIG = Path(__file__).resolve().parent / "jupyterhub" / "jupyterhub_config.py"
DEFAULT_HUB_DIR = Path("/srv/training-infra")
DEFAULT_BIND_URL = "http://127.0.0.1:8000"   # loopback: put TLS (nginx, Caddy) in front to open it
SETTINGS = "settings.json"          # in <hub>/state/: what jupyterhub_config.py reads
NBGRADER = "@jupyter/nbgrader"

# The nbgrader panels (server extensions, JupyterLab plugins) each role gets; every one is named either way, so
# that what the environment enabled for a laptop (the student edition turns the assignment list off) never matters.
PANELS = {
    "student": {"assignment_list", "validate_assignment"},
    "instructor": {"assignment_list", "validate_assignment", "course_list"},
    "formgrader": {"formgrader", "validate_assignment"},
}
SERVER_EXTENSIONS = ("formgrader", "assignment_list", "course_list", "validate_assignment")
LAB_PLUGINS = {"formgrader": ("formgrader", "create-assignment"), "assignment_list": ("assignment-list",),
               "course_list": ("course-list",), "validate_assignment": ("validate-assignment",)}


class SetupError(SystemExit):
    """A reason the hub cannot be set up as asked, for the person running `make hub`."""

    def __init__(self, message: str):
        super().__init__(f"make hub: {message}")


def first_closed_folder(path: Path) -> Path | None:
    """The outermost folder on the way to ``path`` that other accounts cannot enter (None: all of them can)."""
    for folder in [*reversed(path.parents), path]:
        if folder.is_dir() and not folder.stat().st_mode & stat.S_IXOTH:
            return folder
    return None


def check_reachable(python: Path, what: str) -> None:
    """Every user's server runs ``python``: its interpreter and standard library must be reachable by all."""
    probe = subprocess.run([str(python), "-c", "import sys, sysconfig; print(sys.base_prefix); "
                            "print(sysconfig.get_path('stdlib'))"], capture_output=True, text=True, check=True)
    for path in [Path(os.path.realpath(python)), *map(Path, probe.stdout.split())]:
        closed = first_closed_folder(path)
        if closed is not None:
            raise SetupError(f"{what} uses {path}, but other accounts cannot enter {closed} "
                             f"({stat.filemode(closed.stat().st_mode)}), so no student's server could start. "
                             f"Use a Python all accounts can run, e.g. PYTHON=/usr/bin/python3 (python3-venv).")


def account(name: str, create: bool) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        if not create:
            raise SetupError(f"there is no account {name!r}: with PAM every student and instructor logs in with an "
                             f"account of this server (create it, e.g. `adduser {name}`), or use AUTH=shared")
    subprocess.run(["useradd", "--create-home", "--user-group", "--shell", "/bin/bash", name], check=True)
    return pwd.getpwnam(name)


def make_private(path: Path) -> None:
    path.chmod(stat.S_IMODE(path.stat().st_mode) & 0o700)


def link_exchange(course: Path, exchange: Path) -> None:
    """The checkout's exchange folder (nbgrader_config.py) becomes the hub's shared one."""
    local = course / ".nbgrader_exchange"
    if local.is_symlink():
        local.unlink()
    elif local.is_dir():
        if any(local.iterdir()):
            raise SetupError(f"{local} holds released assignments from before the hub; move them into {exchange} "
                             f"(or remove them) and run make hub again")
        local.rmdir()
    local.symlink_to(exchange)


def role_config(folder: Path, role: str, exchange: Path) -> None:
    """A Jupyter configuration folder: the role's nbgrader panels and (not for the Formgrader) nbgrader config."""
    on = PANELS[role]
    server = {f"nbgrader.server_extensions.{ext}": ext in on for ext in SERVER_EXTENSIONS}
    disabled = {f"{NBGRADER}:{plugin}": ext not in on for ext, plugins in LAB_PLUGINS.items() for plugin in plugins}
    disabled[f"{NBGRADER}:menu"] = False
    disabled["@jupyterlab/apputils-extension:announcements"] = True     # the news pop-up needs the network
    settings: dict = {"jpserver_extensions": server}
    if role == "formgrader":
        # JupyterHub >= 4.1 forbids framing a server's pages; the Formgrader panel frames the service's own pages.
        settings["tornado_settings"] = {"headers": {"Content-Security-Policy": "frame-ancestors 'self'"}}
    (folder / "labconfig").mkdir(parents=True, exist_ok=True)
    (folder / "jupyter_server_config.json").write_text(json.dumps({"ServerApp": settings}, indent=1) + "\n")
    (folder / "labconfig" / "page_config.json").write_text(json.dumps({"disabledExtensions": disabled}, indent=1) + "\n")
    if role != "formgrader":   # the service reads the checkout's own nbgrader_config.py
        (folder / "nbgrader_config.py").write_text(
            '"""nbgrader for the course\'s hub users (written by make hub: autograder/hub.py)."""\n'
            "c = get_config()  # noqa: F821\n"
            f"c.CourseDirectory.course_id = {COURSE_ID!r}\n"
            f"c.Exchange.root = {str(exchange)!r}\n"
            "c.Exchange.path_includes_course = True\n")
    for path in [folder, *folder.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)


def student_env(hub: Path, python: str) -> Path:
    """The student edition of this checkout, installed into a Python environment every user's server runs."""
    edition, env = hub / "student-edition", hub / "student-env"
    subprocess.run([sys.executable, "-m", "autograder.edition", "--out", str(edition)], check=True, cwd=ROOT)
    if not (env / "bin" / "python").exists():
        subprocess.run([python, "-m", "venv", str(env)], check=True)
    pip = [str(env / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    subprocess.run([*pip, "--upgrade", "pip"], check=True)
    subprocess.run([*pip, str(edition)], check=True)
    subprocess.run([str(env / "bin" / "python"), "-c", "import matplotlib.pyplot"], check=True)
    return env


def setup(hub: Path, course: Path, students: list[str], instructors: list[str], auth: str, env: Path | None,
          python: str, bind_url: str, internal_ports: list[int]) -> dict:
    if os.geteuid() != 0:
        raise SetupError("run it as root (sudo make hub ...): the hub starts each user's server as that user")
    if auth not in ("pam", "shared"):
        raise SetupError(f"AUTH={auth!r}: use pam (the accounts' own passwords) or shared (one password, to try it)")
    if auth == "shared" and len(os.environ.get("HUB_PASSWORD", "")) < 8:
        raise SetupError("AUTH=shared needs HUB_PASSWORD=... (at least 8 characters): every course member logs in with it")
    if not students and not instructors:
        raise SetupError('say who takes the course: STUDENTS="ann bob" INSTRUCTORS="cy"')
    if set(students) & set(instructors):
        raise SetupError(f"{sorted(set(students) & set(instructors))} listed as both student and instructor")
    grader = pwd.getpwuid(course.stat().st_uid)
    if grader.pw_uid == 0:
        raise SetupError(f"{course} belongs to root: clone the course as the account that grades (the instructor's "
                         f"or one made for it), not as root; the Formgrader and make grade run as that account")
    venv_python = course / ".venv" / "bin" / "python"
    if not venv_python.exists():
        raise SetupError(f"{course}/.venv is missing: run `make install` as {grader.pw_name} first")

    os.umask(0o022)   # what setup writes for everyone (the students' environment, the config folders) is readable
    check_reachable(venv_python, f"the checkout's .venv (the Formgrader and make grade run it as {grader.pw_name})")
    members = {name: account(name, create=auth == "shared") for name in [*students, *instructors]}
    for user in [*members.values(), grader]:
        make_private(Path(user.pw_dir))
    make_private(course)

    for sub in ("state", "exchange", "jupyter"):
        (hub / sub).mkdir(parents=True, exist_ok=True)
    hub.chmod(0o755)
    (hub / "state").chmod(0o700)
    (hub / "exchange").chmod(0o1777)
    link_exchange(course, hub / "exchange")
    for role in PANELS:
        role_config(hub / "jupyter" / role, role, hub / "exchange")

    env = env or student_env(hub, python)
    check_reachable(env / "bin" / "python", "the students' environment")
    settings = {
        "course_id": COURSE_ID, "course": str(course), "grader": grader.pw_name,
        "course_python": str(venv_python), "student_env": str(env), "config_path": str(hub / "jupyter"),
        "students": students, "instructors": instructors, "auth": auth, "bind_url": bind_url,
        "internal_ports": dict(zip(("hub", "formgrader", "proxy_api"), internal_ports)),
    }
    (hub / "state" / SETTINGS).write_text(json.dumps(settings, indent=1) + "\n")
    return settings


def start(hub: Path) -> None:
    """The hub in the foreground, as root, in its state folder (Ctrl-C stops it and every server it started)."""
    jupyterhub = Path(sys.executable).parent / "jupyterhub"
    env = {**os.environ, "TRAINING_INFRA_HUB": str(hub),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}"}
    os.chdir(hub / "state")
    os.execve(str(jupyterhub), [str(jupyterhub), "-f", str(CONFIG)], env)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder.hub", description=__doc__.split("\n\n")[0])
    parser.add_argument("--hub-dir", type=Path, default=DEFAULT_HUB_DIR)
    parser.add_argument("--course", type=Path, default=ROOT, help="the instructor's checkout (default: this one)")
    parser.add_argument("--students", default="", help="account names, separated by spaces or commas")
    parser.add_argument("--instructors", default="")
    parser.add_argument("--auth", default="pam", help="pam (default) or shared (HUB_PASSWORD: one password)")
    parser.add_argument("--bind-url", default=DEFAULT_BIND_URL,
                        help="where the hub listens (default: loopback only; put TLS in front to open it)")
    parser.add_argument("--internal-ports", default="8081,9999,8001", type=lambda t: [int(p) for p in t.split(",")],
                        help="loopback ports of the hub's API, the Formgrader service and the proxy's API")
    parser.add_argument("--python", default=shutil.which("python3") or sys.executable,
                        help="the Python the students' environment is built with")
    parser.add_argument("--student-env", type=Path, help="an existing environment to run users' servers with "
                        "(default: build the student edition into <hub-dir>/student-env)")
    parser.add_argument("--setup-only", action="store_true", help="set everything up, do not start the hub")
    args = parser.parse_args(argv)
    names = lambda text: [n for n in text.replace(",", " ").split() if n]  # noqa: E731
    settings = setup(args.hub_dir.resolve(), args.course.resolve(), names(args.students), names(args.instructors),
                     args.auth, args.student_env, args.python, args.bind_url, args.internal_ports)
    print(f"make hub: {len(settings['students'])} students, {len(settings['instructors'])} instructors; "
          f"Formgrader as {settings['grader']} in {settings['course']}; open {settings['bind_url']}", flush=True)
    if not args.setup_only:
        start(args.hub_dir.resolve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
