"""JupyterHub configuration for running the course for a class (a starting point to adapt, not run as is).

Every part is a well-known component: JupyterHub and its proxy, an authenticator, a spawner, nbgrader's
exchange and its formgrader as a hub service. Nothing here is the course's own. See README.md beside this file.

    jupyterhub -f autograder/jupyterhub/jupyterhub_config.py
"""
import os

c = get_config()  # noqa: F821 (injected by JupyterHub)

COURSE_ID = "training-infra"             # must equal c.CourseDirectory.course_id in nbgrader_config.py
GRADER = f"grader-{COURSE_ID}"           # a system account that owns the instructor repository
INSTRUCTORS = os.environ.get("COURSE_INSTRUCTORS", "").split()
STUDENTS = os.environ.get("COURSE_STUDENTS", "").split()

# --- Who may log in: your institution's single sign-on (OAuthenticator / LTIAuthenticator) in production;
# PAM (system accounts) on a single teaching server.
c.JupyterHub.authenticator_class = os.environ.get("HUB_AUTHENTICATOR", "pam")
c.Authenticator.allowed_users = set(INSTRUCTORS + STUDENTS)
c.Authenticator.admin_users = set(INSTRUCTORS)

# --- Where each user's server runs: one container per user from the course image (the student edition with
# `pip install -e .` done at build time), so everyone has the pinned stack. DockerSpawner on one machine,
# KubeSpawner (Zero to JupyterHub) past one machine.
c.JupyterHub.spawner_class = os.environ.get("HUB_SPAWNER", "dockerspawner.DockerSpawner")
c.DockerSpawner.image = os.environ.get("COURSE_IMAGE", "training-infra-student:latest")
c.Spawner.default_url = "/lab"
c.Spawner.mem_limit = "4G"               # every notebook runs in about a minute on 2 CPU cores
c.Spawner.cpu_limit = 2
c.Spawner.environment = {"WANDB_MODE": "offline", "TRAINKIT_FORCE_CPU": os.environ.get("TRAINKIT_FORCE_CPU", "0")}
# nbgrader's exchange: one shared folder (NFS or a ReadWriteMany volume) mounted at the same path everywhere,
# world-writable with the sticky bit (mode 1777), as nbgrader's docs describe.
EXCHANGE = "/srv/nbgrader/exchange"
c.DockerSpawner.volumes = {"/srv/nbgrader/exchange": EXCHANGE, "jupyterhub-user-{username}": "/home/jovyan/work"}

# --- Roles: nbgrader reads course membership from hub groups named nbgrader-<course> (students) and
# formgrade-<course> (instructors).
c.JupyterHub.load_groups = {
    f"nbgrader-{COURSE_ID}": {"users": STUDENTS},
    f"formgrade-{COURSE_ID}": {"users": INSTRUCTORS},
}
# The formgrader runs once for the course, as the grader account, in the instructor repository; instructors
# reach it through the hub. Its server needs to read group membership to list students' courses.
c.JupyterHub.services = [{
    "name": COURSE_ID,
    "url": "http://127.0.0.1:9999",
    "command": ["jupyterhub-singleuser", "--port=9999", f"--ServerApp.root_dir=/home/{GRADER}/course"],
    "user": GRADER,
    "cwd": f"/home/{GRADER}/course",
    "environment": {"JUPYTERHUB_DEFAULT_URL": "/lab", "WANDB_MODE": "offline"},
}]
c.JupyterHub.load_roles = [
    {"name": f"formgrade-{COURSE_ID}", "groups": [f"formgrade-{COURSE_ID}"],
     "scopes": [f"access:services!service={COURSE_ID}"]},
    {"name": f"service-{COURSE_ID}", "services": [COURSE_ID],
     "scopes": ["read:users:groups", "list:users", "groups", "users"]},
]
