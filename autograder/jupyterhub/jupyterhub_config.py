"""JupyterHub for the course on one Linux server: what `make hub` starts (autograder/hub.py writes the settings).

    sudo make hub STUDENTS="ann bob" INSTRUCTORS="cy"

Every part is a standard one: JupyterHub and its proxy, PAM (or the shared-password authenticator, to try it),
the LocalProcessSpawner (each user's server is a process of that user), nbgrader's exchange, and nbgrader's
Formgrader as a hub service. README.md beside this file says how the same settings scale out.
"""
import json
import os
from pathlib import Path

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

# --- Who may log in: the server's own accounts (PAM), or, to try the course, one shared password.
if S["auth"] == "shared":
    c.JupyterHub.authenticator_class = "shared-password"
    c.SharedPasswordAuthenticator.user_password = os.environ["HUB_PASSWORD"]
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


def role_environment(spawner):
    role = "instructor" if spawner.user.name in INSTRUCTORS else "student"
    spawner.environment = {**spawner.environment,    # a new dict: never the one other spawners may share
        "PATH": f"{STUDENT_BIN}:/usr/local/bin:/usr/bin:/bin",     # a terminal's python is the course's
        "JUPYTER_CONFIG_PATH": str(Path(S["config_path"]) / role),  # the role's panels and nbgrader config
        "WANDB_MODE": "offline",
    }


c.Spawner.pre_spawn_hook = role_environment
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
c.JupyterHub.load_roles = [
    {"name": f"formgrade-{COURSE_ID}", "groups": [f"formgrade-{COURSE_ID}"],
     "scopes": [f"access:services!service={COURSE_ID}"]},
    {"name": f"service-{COURSE_ID}", "services": [COURSE_ID],
     "scopes": ["list:users", "read:users:groups", "groups"]},
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
        "WANDB_MODE": "offline",
    },
}]
