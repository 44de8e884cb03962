"""JupyterHub for the course on one Linux server: what `make hub` starts (publish/hub.py writes the settings).

    sudo make hub STUDENTS="ann bob" INSTRUCTORS="cy"

Every part is a standard one: JupyterHub and its proxy, PAM (or the shared-password authenticator, to try it),
the LocalProcessSpawner (each user's server is a process of that user), nbgrader's exchange, and nbgrader's
Formgrader as a hub service. README.md beside this file says how the same settings scale out.
"""
import json
import os
import pwd
import subprocess
from pathlib import Path
from secrets import compare_digest

from jupyterhub.authenticators.shared import SharedPasswordAuthenticator
from traitlets import Set, Unicode

c = get_config()  # noqa: F821 (injected by JupyterHub)

HUB = Path(os.environ.get("TRAINING_INFRA_HUB", "/srv/training-infra"))
S = json.loads((HUB / "state" / "settings.json").read_text())
COURSE_ID, STUDENTS, INSTRUCTORS = S["course_id"], S["students"], S["instructors"]
STUDENT_BIN = str(Path(S["student_env"]) / "bin")
COURSE_BIN = str(Path(S["course_python"]).parent)

c.JupyterHub.bind_url = S["bind_url"]                  # loopback unless make hub was told otherwise
PORTS = S["internal_ports"]                            # all on loopback
c.JupyterHub.hub_bind_url = f"http://127.0.0.1:{PORTS['hub']}"
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{PORTS['proxy_api']}"
c.JupyterHub.db_url = f"sqlite:///{HUB / 'state' / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(HUB / "state" / "jupyterhub_cookie_secret")
c.ConfigurableHTTPProxy.command = [str(Path(COURSE_BIN) / "configurable-http-proxy")]  # pinned: pyproject.toml
c.ConfigurableHTTPProxy.pid_file = str(HUB / "state" / "proxy.pid")

# --- Who may log in: the server's own accounts (PAM), or, to try the course, one password for the students and
# another for the instructors (make hub stored them in <hub>/state, root only; never in the environment).
class CoursePasswords(SharedPasswordAuthenticator):
    """JupyterHub's shared password for the students (``user_password``), and the instructors' own password: the
    students' password never opens an instructor's account (make hub refuses two equal passwords)."""

    instructors = Set(Unicode(), config=True, help="The accounts that log in with instructor_password only.")
    instructor_password = Unicode("", config=True, help="The instructors' password.")

    async def authenticate(self, handler, data):
        name = self.normalize_username(data["username"])
        if name in self.instructors:
            given, expected = data["password"].encode(), self.instructor_password.encode()
            return {"name": name} if expected and compare_digest(given, expected) else None
        return await super().authenticate(handler, data)


if S["auth"] == "shared":
    PASSWORDS = json.loads((HUB / "state" / "passwords.json").read_text())
    c.JupyterHub.authenticator_class = CoursePasswords
    c.CoursePasswords.user_password = PASSWORDS["students"]
    c.CoursePasswords.instructor_password = PASSWORDS["instructors"]
    c.CoursePasswords.instructors = set(INSTRUCTORS)
else:
    c.JupyterHub.authenticator_class = "pam"
    c.PAMAuthenticator.open_sessions = False           # LocalProcessSpawner does not need PAM sessions
c.Authenticator.allowed_users = set(STUDENTS + INSTRUCTORS)

# --- Each user's server: a process of that user, running the student edition's environment, in their home.
# LocalProcessSpawner enforces no memory or CPU limit (mem_limit/cpu_limit are ignored by it): one lab's kernel
# needs about 1 GB and 2 cores for a minute. For enforced limits, use systemdspawner, DockerSpawner or KubeSpawner.
c.JupyterHub.spawner_class = "localprocess"
c.Spawner.cmd = [str(Path(STUDENT_BIN) / "jupyterhub-singleuser")]
c.Spawner.notebook_dir = "~"
c.Spawner.default_url = "/lab"


def copy_lessons(spawner) -> None:
    """A student's own copy of the student edition's lessons (the labs point to them), made once and never
    overwritten. Copied by the student's own account (not as root, then chowned): in a home its owner controls,
    root would follow whatever links the owner placed there."""
    account = pwd.getpwnam(spawner.user.name)
    target = Path(account.pw_dir) / "lessons"
    if os.path.lexists(target):
        return
    copy = subprocess.run(["cp", "-R", "--no-target-directory", S["lessons"], str(target)], user=account.pw_uid,
                          group=account.pw_gid, extra_groups=[], umask=0o077, cwd=account.pw_dir,
                          capture_output=True, text=True, timeout=60)
    if copy.returncode != 0:
        spawner.log.warning("the lessons were not copied to %s: %s", target, copy.stderr.strip())


def write_deadlines(spawner) -> None:
    """~/<course>/DEADLINES.md: each lab's due date with this student's own extension (autograder/term/policy.py),
    from the course file in the checkout (students cannot read it), rewritten at each server start. Written by the
    student's own account, private to them (umask 077): the only place an extension shows before a submission."""
    try:
        from autograder.term import policy
        term = policy.load(S["course"])
    except Exception as exc:   # noqa: BLE001 -- a malformed course file must not stop anyone's server
        spawner.log.warning("no DEADLINES.md for %s: %s", spawner.user.name, exc)
        return
    if term is None or not term.due:
        return
    account = pwd.getpwnam(spawner.user.name)
    folder = Path(account.pw_dir) / COURSE_ID
    # Into a new file (mktemp: never one the student placed, such as a FIFO that would hold the hub), then renamed over
    # the old one; a few seconds at most, since the hook holds up the hub's other requests.
    script = 'mkdir -p "$1" && t=$(mktemp "$1/.deadlines.XXXXXX") && cat > "$t" && mv -f "$t" "$1/$2"'
    try:
        write = subprocess.run(["sh", "-c", script, "sh", str(folder), policy.DEADLINES],
                               input=policy.deadlines_note(term, spawner.user.name, COURSE_ID), user=account.pw_uid,
                               group=account.pw_gid, extra_groups=[], umask=0o077, cwd=account.pw_dir,
                               capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError) as exc:
        spawner.log.warning("no DEADLINES.md for %s: %s", spawner.user.name, exc)
        return
    if write.returncode != 0:
        spawner.log.warning("no DEADLINES.md for %s: %s", spawner.user.name, write.stderr.strip())


def before_spawn(spawner):
    role = "instructor" if spawner.user.name in INSTRUCTORS else "student"
    spawner.environment = {**spawner.environment,    # a new dict: never the one other spawners may share
        "PATH": f"{STUDENT_BIN}:/usr/local/bin:/usr/bin:/bin",     # a terminal's python is the course's
        "JUPYTER_CONFIG_PATH": str(Path(S["config_path"]) / role),  # the role's panels and nbgrader config
        "WANDB_MODE": "offline",
    }
    if role == "student":
        copy_lessons(spawner)
        write_deadlines(spawner)


c.Spawner.pre_spawn_hook = before_spawn
# What a server's own token may do: the default (post activity), plus what nbgrader's panels ask the hub: the
# user's groups (the course list), the services (where the Formgrader is) and access to the Formgrader. A token
# gets only the part its user holds, so a student's server gets no access to the Formgrader.
c.Spawner.server_token_scopes = ["users:activity!user", "read:users:groups!user", "read:services",
                                 f"access:services!service={COURSE_ID}"]

# --- Roles: nbgrader reads course membership from the groups nbgrader-<course> (students) and
# formgrade-<course> (instructors).
c.JupyterHub.load_groups = {
    f"nbgrader-{COURSE_ID}": {"users": STUDENTS},
    f"formgrade-{COURSE_ID}": {"users": INSTRUCTORS},
}
# Instructors reach the Formgrader. The Formgrader service itself holds no scope on the hub (no role): the course's
# nbgrader_config.py names no auth plugin (nbgrader's NoAuthPlugin), so the Formgrader never calls the hub's API, and
# course membership is the two groups above, which only make hub (root) sets. A stolen service token thus changes no
# group (tests/test_hub.py tries). Were nbgrader's JupyterHubAuthPlugin turned on, the service would need scopes
# filtered to the students' group only (`list:groups`, `read:groups` and `groups`, each `!group=nbgrader-<course>`,
# to add and remove students), never one on formgrade-<course>.
c.JupyterHub.load_roles = [
    {"name": f"formgrade-{COURSE_ID}", "groups": [f"formgrade-{COURSE_ID}"],
     "scopes": [f"access:services!service={COURSE_ID}"]},
]

# --- The Formgrader: one server for the course, as the grader account, in the instructor's checkout, on the
# checkout's own environment (its PATH first: nbgrader runs its helpers, alembic among them, by name).
c.JupyterHub.services = [{
    "name": COURSE_ID,
    "url": f"http://127.0.0.1:{PORTS['formgrader']}",
    "command": [str(Path(COURSE_BIN) / "jupyterhub-singleuser"), f"--ServerApp.root_dir={S['course']}"],
    "user": S["grader"],
    "cwd": S["course"],
    "oauth_no_confirm": True,        # instructors reach it from their own Lab without a consent page
    "environment": {
        "PATH": f"{COURSE_BIN}:/usr/local/bin:/usr/bin:/bin",
        "JUPYTER_CONFIG_PATH": str(Path(S["config_path"]) / "formgrader"),
        "JUPYTERHUB_DEFAULT_URL": "/lab",
        "JUPYTER_RUNTIME_DIR": S["service_runtime"],   # its server token and cookie secret: <hub>/runtime, 0700
        "WANDB_MODE": "offline",
    },
}, {
    # Grade on submit (autograder/on_submit.py): grades each new submission of the labs term.toml's [on_submit]
    # lists, in the same sandbox as make grade, and releases that student's feedback; idle while none is listed.
    # No URL (nothing reaches it through the proxy) and no role (its token may do nothing on the hub).
    "name": "grade-on-submit",
    "command": [S["course_python"], "-m", "autograder.on_submit", "--course-dir", S["course"]],
    "user": S["grader"],
    "cwd": S["course"],
    "environment": {
        "PATH": f"{COURSE_BIN}:/usr/local/bin:/usr/bin:/bin",
        "JOBS": str(max(1, (os.cpu_count() or 2) // 2)),   # the other half of the cores for the class's servers
        "WANDB_MODE": "offline",
    },
}]
