"""The course on one Linux server, for a class: set up and start JupyterHub (`make hub`, as root).

    sudo make hub STUDENTS="ann bob" INSTRUCTORS="cy"                 # PAM: the accounts' own passwords
    sudo make hub STUDENTS="ann bob" INSTRUCTORS="cy" AUTH=shared     # to try it: asks for two passwords

Run it from the instructor's checkout, which belongs to the grader account (the instructor's own, or one made for
grading; never root). Everything is a standard part: JupyterHub with its proxy (pinned in pyproject.toml), PAM or
JupyterHub's shared-password authenticator, the LocalProcessSpawner (each user's server runs as that user),
nbgrader's exchange, and the Formgrader as a hub service running as the grader account in the checkout.

AUTH=shared takes two passwords, the students' and the instructors' (never equal), and never from a command line
(where every account's `ps` would show them): asked for on the terminal, or read from a file only root can read
(HUB_PASSWORD_FILE: lines `students = ...` and `instructors = ...`), or, for a script already running as root,
from the environment (HUB_PASSWORD, HUB_INSTRUCTOR_PASSWORD). A later start keeps the stored ones unless given new.

`setup` (every start runs it; it is idempotent) puts in place, under the hub folder (default /srv/training-infra):
- ``state/``: the hub's database, cookie secret, settings and AUTH=shared's passwords (root only);
- ``exchange/``: nbgrader's exchange (mode 1777, as nbgrader requires); the checkout's ``.nbgrader_exchange``
  becomes a link to it, so the course's own nbgrader_config.py needs no change;
- ``student-edition/`` and ``student-env/``: the student edition built from this checkout and a Python
  environment with it installed, which every user's server runs (the instructors' too: they grade through the
  Formgrader service, which runs the checkout's own ``.venv``); each student's server starts with a copy of the
  edition's lessons in the student's home (``~/lessons``, made once, never overwritten);
- ``jupyter/<role>/``: a Jupyter configuration folder per role (students, instructors, the Formgrader service):
  which nbgrader panels each gets, the terminal's shell, and the members' nbgrader configuration (course,
  exchange, Submit's limits: trainkit/submit.py). A user's server finds its role's folder on JUPYTER_CONFIG_PATH;
- ``runtime/<course>/``: the Formgrader service's Jupyter runtime files (its server token, cookie secret), the
  grader account's own (0700), outside every home.
and makes the checkout (0700) and every course member's home (0700) private: a student can read neither the
reference solutions nor another student's work. `setup` creates missing accounts only with AUTH=shared.
"""
from __future__ import annotations

import argparse
import getpass
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
PASSWORDS = "passwords.json"        # in <hub>/state/ (root only): AUTH=shared's passwords, read by the hub's config
MIN_PASSWORD = 8                    # JupyterHub's SharedPasswordAuthenticator asks for at least 8 characters
KEEP_SUBMISSIONS, MAX_SUBMISSION_MB = 5, 20.0   # Submit's limits on the hub (trainkit/submit.py)
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


def role_config(folder: Path, role: str, exchange: Path, keep: int, max_mb: float) -> None:
    """A Jupyter configuration folder: the role's nbgrader panels, and for members their terminal and nbgrader."""
    on = PANELS[role]
    server = {f"nbgrader.server_extensions.{ext}": ext in on for ext in SERVER_EXTENSIONS}
    disabled = {f"{NBGRADER}:{plugin}": ext not in on for ext, plugins in LAB_PLUGINS.items() for plugin in plugins}
    disabled[f"{NBGRADER}:menu"] = False
    disabled["@jupyterlab/apputils-extension:announcements"] = True     # the news pop-up needs the network
    settings: dict = {"jpserver_extensions": server}
    if role == "formgrader":
        # JupyterHub >= 4.1 forbids framing a server's pages; the Formgrader panel frames the service's own pages.
        settings["tornado_settings"] = {"headers": {"Content-Security-Policy": "frame-ancestors 'self'"}}
    else:
        server["trainkit.submit"] = True    # a refused Submit says why in one sentence, not a traceback
        # Under a spawner the terminal would run a login shell, whose /etc/profile resets PATH: `python` would no
        # longer be the course's. An interactive, non-login shell keeps the server's PATH (the course's env first).
        shell = "/bin/bash" if Path("/bin/bash").exists() else "/bin/sh"
        settings["terminado_settings"] = {"shell_command": [shell, "-i"]}
    (folder / "labconfig").mkdir(parents=True, exist_ok=True)
    (folder / "jupyter_server_config.json").write_text(json.dumps({"ServerApp": settings}, indent=1) + "\n")
    (folder / "labconfig" / "page_config.json").write_text(json.dumps({"disabledExtensions": disabled}, indent=1) + "\n")
    if role != "formgrader":   # the service reads the checkout's own nbgrader_config.py
        (folder / "nbgrader_config.py").write_text(
            '"""nbgrader for the course\'s hub users (written by make hub: publish/hub.py)."""\n'
            "c = get_config()  # noqa: F821\n"
            f"c.CourseDirectory.course_id = {COURSE_ID!r}\n"
            f"c.Exchange.root = {str(exchange)!r}\n"
            "c.Exchange.path_includes_course = True\n"
            "# Submit keeps a student's last few submissions of a lab and refuses a too-big one (trainkit/submit.py).\n"
            'c.ExchangeFactory.submit = "trainkit.submit.CappedSubmit"\n'
            f"c.CappedSubmit.keep = {keep}\n"
            f"c.CappedSubmit.max_mb = {max_mb}\n")
    for path in [folder, *folder.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)


def read_password_file(path: Path) -> dict:
    """HUB_PASSWORD_FILE: ``students = ...`` and ``instructors = ...``, in a file only root can read or change."""
    info = path.stat()
    if info.st_uid != 0 or info.st_mode & 0o077:
        raise SetupError(f"{path} must belong to root and be readable by root only "
                         f"(`chown root: {path} && chmod 600 {path}`): it holds the course's passwords")
    found = {}
    for line in path.read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() in ("students", "instructors"):
            found[key.strip()] = value.strip()
    return found


def ask_password(role: str) -> str:
    first = getpass.getpass(f"make hub: AUTH=shared: the {role}' password (at least {MIN_PASSWORD} characters): ")
    if getpass.getpass(f"make hub: the {role}' password again: ") != first:
        raise SetupError(f"the two {role}' passwords you typed differ")
    return first


def shared_passwords(state: Path, password_file: Path | None) -> dict:
    """AUTH=shared's two passwords, never from a command line: a root-only file, the environment (a script already
    running as root), the ones an earlier start stored, or asked for on the terminal, in that order."""
    stored = state / PASSWORDS
    if password_file is not None:
        found = read_password_file(password_file)
    elif os.environ.get("HUB_PASSWORD") or os.environ.get("HUB_INSTRUCTOR_PASSWORD"):
        found = {"students": os.environ.get("HUB_PASSWORD", ""),
                 "instructors": os.environ.get("HUB_INSTRUCTOR_PASSWORD", "")}
    elif stored.exists():
        found = json.loads(stored.read_text())
    elif sys.stdin.isatty():
        found = {role: ask_password(role) for role in ("students", "instructors")}
    else:
        raise SetupError("AUTH=shared needs the students' and the instructors' passwords: run it on a terminal (it "
                         "asks), or give HUB_PASSWORD_FILE=<a file only root can read> with lines "
                         "`students = ...` and `instructors = ...`")
    for role in ("students", "instructors"):
        if len(found.get(role) or "") < MIN_PASSWORD:
            raise SetupError(f"AUTH=shared: the {role}' password is missing or shorter than {MIN_PASSWORD} "
                             f"characters; instructors and students each need their own")
    if found["students"] == found["instructors"]:
        raise SetupError("AUTH=shared: the instructors' password must differ from the students', or any student "
                         "could log in as an instructor")
    return {role: found[role] for role in ("students", "instructors")}


def student_edition(hub: Path) -> Path:
    """The student edition of this checkout (a few seconds): what the students' environment installs, and the
    lessons each student's server starts with."""
    edition = hub / "student-edition"
    subprocess.run([sys.executable, "-m", "publish.edition", "--out", str(edition), "--quiet"], check=True, cwd=ROOT)
    return edition


def student_env(hub: Path, edition: Path, python: str) -> Path:
    """A Python environment with the student edition installed, which every user's server runs."""
    env = hub / "student-env"
    if not (env / "bin" / "python").exists():
        subprocess.run([python, "-m", "venv", str(env)], check=True)
    pip = [str(env / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    subprocess.run([*pip, "--upgrade", "pip"], check=True)
    subprocess.run([*pip, str(edition)], check=True)
    subprocess.run([str(env / "bin" / "python"), "-c", "import matplotlib.pyplot"], check=True)
    return env


def setup(hub: Path, course: Path, students: list[str], instructors: list[str], auth: str, env: Path | None,
          python: str, bind_url: str, internal_ports: list[int], password_file: Path | None = None,
          keep: int = KEEP_SUBMISSIONS, max_mb: float = MAX_SUBMISSION_MB) -> dict:
    if os.geteuid() != 0:
        raise SetupError("run it as root (sudo make hub ...): the hub starts each user's server as that user")
    if auth not in ("pam", "shared"):
        raise SetupError(f"AUTH={auth!r}: use pam (the accounts' own passwords) or shared (two passwords, to try it)")
    if not students and not instructors:
        raise SetupError('say who takes the course: STUDENTS="ann bob" INSTRUCTORS="cy"')
    if set(students) & set(instructors):
        raise SetupError(f"{sorted(set(students) & set(instructors))} listed as both student and instructor")
    if keep < 1 or max_mb <= 0:
        raise SetupError(f"--keep-submissions {keep} and --max-submission-mb {max_mb:g} must both be positive")
    grader = pwd.getpwuid(course.stat().st_uid)
    if grader.pw_uid == 0:
        raise SetupError(f"{course} belongs to root: clone the course as the account that grades (the instructor's "
                         f"or one made for it), not as root; the Formgrader and make grade run as that account")
    venv_python = course / ".venv" / "bin" / "python"
    if not venv_python.exists():
        raise SetupError(f"{course}/.venv is missing: run `make install` as {grader.pw_name} first")
    os.umask(0o022)   # what setup writes for everyone (the students' environment, the config folders) is readable
    for sub in ("state", "exchange", "jupyter", "runtime"):
        (hub / sub).mkdir(parents=True, exist_ok=True)
    hub.chmod(0o755)
    (hub / "state").chmod(0o700)
    stored = hub / "state" / PASSWORDS
    if auth == "shared":   # asked before anything slow, so that a mistyped password costs nothing
        passwords = shared_passwords(hub / "state", password_file)
        stored.touch(mode=0o600)
        stored.chmod(0o600)
        stored.write_text(json.dumps(passwords) + "\n")
    else:
        stored.unlink(missing_ok=True)

    check_reachable(venv_python, f"the checkout's .venv (the Formgrader and make grade run it as {grader.pw_name})")
    members = {name: account(name, create=auth == "shared") for name in [*students, *instructors]}
    for user in [*members.values(), grader]:
        make_private(Path(user.pw_dir))
    make_private(course)

    (hub / "exchange").chmod(0o1777)
    link_exchange(course, hub / "exchange")
    for role in PANELS:
        role_config(hub / "jupyter" / role, role, hub / "exchange", keep, max_mb)
    # The Formgrader's runtime files (its server's token, cookie secret) in a folder of its own, not in a home.
    runtime = hub / "runtime" / COURSE_ID
    runtime.mkdir(exist_ok=True)
    os.chown(runtime, grader.pw_uid, grader.pw_gid)
    runtime.chmod(0o700)

    edition = student_edition(hub)
    env = env or student_env(hub, edition, python)
    check_reachable(env / "bin" / "python", "the students' environment")
    settings = {
        "course_id": COURSE_ID, "course": str(course), "grader": grader.pw_name,
        "course_python": str(venv_python), "student_env": str(env), "config_path": str(hub / "jupyter"),
        "lessons": str(edition / "lessons"), "service_runtime": str(runtime),
        "students": students, "instructors": instructors, "auth": auth, "bind_url": bind_url,
        "internal_ports": dict(zip(("hub", "formgrader", "proxy_api"), internal_ports)),
    }
    (hub / "state" / SETTINGS).write_text(json.dumps(settings, indent=1) + "\n")
    return settings


def start(hub: Path) -> None:
    """The hub in the foreground, as root, in its state folder (Ctrl-C stops it and every server it started)."""
    jupyterhub = Path(sys.executable).parent / "jupyterhub"
    # AUTH=shared's passwords are in <hub>/state (root only), not in the environment of the hub and its children.
    env = {**{k: v for k, v in os.environ.items() if k not in ("HUB_PASSWORD", "HUB_INSTRUCTOR_PASSWORD")},
           "TRAINING_INFRA_HUB": str(hub),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}"}
    os.chdir(hub / "state")
    os.execve(str(jupyterhub), [str(jupyterhub), "-f", str(CONFIG)], env)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m publish.hub", description=__doc__.split("\n\n")[0])
    parser.add_argument("--hub-dir", type=Path, default=DEFAULT_HUB_DIR)
    parser.add_argument("--course", type=Path, default=ROOT, help="the instructor's checkout (default: this one)")
    parser.add_argument("--students", default="", help="account names, separated by spaces or commas")
    parser.add_argument("--instructors", default="")
    parser.add_argument("--auth", default="pam", help="pam (default) or shared (two passwords: the students' and "
                        "the instructors'; asked for on the terminal unless the file or the environment gives them)")
    parser.add_argument("--password-file", type=Path, default=os.environ.get("HUB_PASSWORD_FILE") or None,
                        help="AUTH=shared: a file only root can read, with lines `students = ...`, `instructors = ...`")
    parser.add_argument("--keep-submissions", type=int, default=KEEP_SUBMISSIONS,
                        help=f"a student's submissions of a lab kept in the exchange (default {KEEP_SUBMISSIONS})")
    parser.add_argument("--max-submission-mb", type=float, default=MAX_SUBMISSION_MB,
                        help=f"the most a submission may hold, in MB (default {MAX_SUBMISSION_MB:g})")
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
                     args.auth, args.student_env, args.python, args.bind_url, args.internal_ports,
                     args.password_file, args.keep_submissions, args.max_submission_mb)
    print(f"make hub: {len(settings['students'])} students, {len(settings['instructors'])} instructors; "
          f"Formgrader as {settings['grader']} in {settings['course']}; open {settings['bind_url']}", flush=True)
    if not args.setup_only:
        start(args.hub_dir.resolve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
