"""The grading sandbox's walls, each attacked cheaply without grading a notebook (tests/test_grading_safety.py grades
hostile submissions through the same sandbox; these pin down the rules themselves).

Deny by default: the kernel's environment is an allow-list, its file system holds only what a rule in
autograder/sandbox.py puts there, and what it may write is sized."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from autograder import grade, sandbox

# Things a grading account's environment holds on the hub (the Formgrader's terminal) or elsewhere.
SECRET_ENV = {"JUPYTERHUB_API_TOKEN": "t1", "JPY_API_TOKEN": "t2", "JUPYTERHUB_SERVICE_URL": "u",
              "AWS_SECRET_ACCESS_KEY": "k", "SSH_AUTH_SOCK": "/tmp/agent", "PYTHONPATH": "/elsewhere",
              "LD_PRELOAD": "/x.so", "SOME_NEW_TOKEN_NOBODY_LISTED": "s"}


def test_the_kernel_environment_is_an_allow_list(monkeypatch):
    for key, value in SECRET_ENV.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    env = sandbox.kernel_environment({"WANDB_MODE": "offline"})
    assert not set(SECRET_ENV) & set(env), env
    assert set(env) <= set(sandbox.ENV_KEPT) | {"PATH", "HOME", "TMPDIR", "MPLCONFIGDIR", "CUDA_VISIBLE_DEVICES",
                                               "PYTHONDONTWRITEBYTECODE", "WANDB_MODE"}, env
    assert env["OMP_NUM_THREADS"] == "1" and env["CUDA_VISIBLE_DEVICES"] == "" and env["HOME"] == sandbox.HOME


def test_bubblewrap_starts_with_an_empty_environment_and_shows_no_whole_file_system(tmp_path):
    cmd = sandbox.wrap(["true"], tmp_path / "scratch", sandbox.Limits())
    tool = cmd.index(sandbox.bwrap() or "bwrap")
    assert cmd[tool - 2:tool] == ["env", "-i"], cmd[:tool + 1]
    assert "--clearenv" in cmd
    binds = [(cmd[i + 1], cmd[i + 2]) for i, a in enumerate(cmd) if a in ("--bind", "--ro-bind", "--dev-bind")]
    assert ("/", "/") not in binds and not any(src in ("/home", "/root", "/var", "/srv", "/run", "/etc")
                                               for src, _ in binds), binds


def test_what_the_kernel_sees_is_what_a_rule_shows(tmp_path, monkeypatch):
    """A file planted outside the course and the packages, the grading account's home, the environment: none reach
    the kernel; the top of its file system is only the system's folders and the paths of what it needs."""
    if not sandbox.available()[0]:
        pytest.skip(f"grading sandbox unavailable here: {sandbox.available()[1]}")
    planted = Path(tempfile.mkdtemp(prefix="planted-", dir="/var/tmp"))
    try:
        (planted / "secret.txt").write_text("planted")
        for key, value in SECRET_ENV.items():
            monkeypatch.setenv(key, value)
        probe = (
            "import json, os, sys\n"
            "def readable(p):\n    try:\n        open(p).read(); return True\n    except OSError:\n        return False\n"
            "print(json.dumps({'top': sorted(os.listdir('/')), 'env': sorted(os.environ),\n"
            "    'pid1_env': open('/proc/1/environ', 'rb').read().decode(),\n"
            "    'planted': readable(sys.argv[1]), 'home': os.path.expanduser('~'), 'cwd': os.getcwd(),\n"
            "    'etc': sorted(os.listdir('/etc')),\n"
            "    'dev': sorted(os.listdir('/dev'))}))\n")
        scratch = tmp_path / "scratch"
        cmd = sandbox.wrap([sys.executable, "-c", probe, str(planted / "secret.txt")],
                           scratch, sandbox.Limits())
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    finally:
        (planted / "secret.txt").unlink()
        planted.rmdir()
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    assert not seen["planted"] and seen["pid1_env"] == "", seen
    assert not set(SECRET_ENV) & set(seen["env"]), seen["env"]
    allowed_top = {Path(d).name for d in sandbox.SYSTEM_DIRS} | {"etc", "proc", "dev", "tmp"} | {
        Path(p).parts[1] for p in [*sandbox.readable_paths(), str(scratch)]}
    assert set(seen["top"]) <= allowed_top, set(seen["top"]) - allowed_top
    assert set(seen["etc"]) <= set(sandbox.ETC_FILES), seen["etc"]
    assert not [d for d in seen["dev"] if d.startswith(("nvidia", "sd", "nvme", "vd", "dri"))], seen["dev"]
    assert (seen["home"], seen["cwd"]) == (sandbox.HOME, sandbox.WORK)


def test_a_killed_runs_scratch_is_removed_by_the_next_and_a_running_ones_is_kept(tmp_path):
    dead = subprocess.Popen(["true"])
    dead.wait()
    for name, pid in (("dead", dead.pid), ("alive", os.getpid())):
        folder = tmp_path / f"{grade.BATCH_PREFIX}{name}"
        (folder / "subs").mkdir(parents=True)
        (folder / "grader.pid").write_text(str(pid))
    (tmp_path / f"{grade.BATCH_PREFIX}unmarked").mkdir()     # not ours to judge: no pid file
    removed = grade.remove_leftover_batches(tmp_path)
    assert [p.name for p in removed] == [f"{grade.BATCH_PREFIX}dead"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{grade.BATCH_PREFIX}alive", f"{grade.BATCH_PREFIX}unmarked"]


def test_the_disk_watch_stops_a_kernel_that_writes_past_its_limit(tmp_path):
    folder = tmp_path / "challenge"
    folder.mkdir()
    writer = subprocess.Popen([sys.executable, "-c", "import sys, time\nf = open(sys.argv[1], 'wb')\n"
                               "for _ in range(40):\n    f.write(bytes(2**20)); f.flush(); time.sleep(0.05)\n"
                               "time.sleep(30)\n", str(folder / "fill.bin")], start_new_session=True)
    sandbox._LAUNCHED.append(writer)
    try:
        with sandbox.disk_watch([folder], 8 * 2**20, every_s=0.1) as state:
            writer.wait(timeout=20)
    finally:
        sandbox.kill_leftover_kernels()
    assert state["exceeded"] and writer.returncode != 0 and not folder.exists()


def test_a_checkout_whose_venv_is_a_link_still_starts_its_kernel(tmp_path, monkeypatch):
    """make grade from a checkout whose .venv links to an environment elsewhere (as the hub's grading service runs
    course/.venv/bin/python): the checkout is hidden, the link with it; the kernel starts by the resolved path."""
    if not sandbox.available()[0]:
        pytest.skip(f"grading sandbox unavailable here: {sandbox.available()[1]}")
    checkout = Path(tempfile.mkdtemp(prefix="checkout-", dir="/var/tmp"))
    environment = Path(sys.prefix).resolve()
    try:
        (checkout / ".venv").symlink_to(environment)
        monkeypatch.setattr(sys, "executable", str(checkout / ".venv" / "bin" / Path(sys.executable).name))
        monkeypatch.setattr(sys, "prefix", str(checkout / ".venv"))
        cmd = sandbox.wrap([sys.executable, "-c", "import sys, ipykernel; print(sys.prefix)"], tmp_path / "scratch",
                           sandbox.Limits())
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    finally:
        (checkout / ".venv").unlink()
        checkout.rmdir()
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(environment), "the kernel runs the same environment, reached by its real path"


def test_kernels_graded_at_once_share_the_cores_and_the_sandboxed_torch_uses_its_share(tmp_path, monkeypatch):
    """jobs kernels at once each take cores // jobs CPU threads (on a 16-core GPU machine, 16 kernels at 16 threads
    each graded two labs past 268 s); one submission alone takes every core; a count the instructor set stays."""
    for name in grade.THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(grade, "cores", lambda: 16)
    assert grade.share_the_cores(jobs=16, submissions=40) == 1
    for name in grade.THREAD_VARIABLES:
        monkeypatch.delenv(name)
    assert grade.share_the_cores(jobs=8, submissions=1) == 16      # one submission: no one to share with
    for name in grade.THREAD_VARIABLES:
        monkeypatch.delenv(name)
    assert grade.share_the_cores(jobs=3, submissions=10) == 5
    monkeypatch.delenv("MKL_NUM_THREADS")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert grade.share_the_cores(jobs=1, submissions=1) == 1       # the instructor's choice, also for MKL's pool
    assert "MKL_NUM_THREADS" not in os.environ
    if not sandbox.available()[0]:
        pytest.skip(f"grading sandbox unavailable here: {sandbox.available()[1]}")
    # the kernel gets it through the sandbox's allow-list (1: not torch's default of one thread per core)
    cmd = sandbox.wrap([sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
                       tmp_path / "scratch", sandbox.Limits())
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.split() == ["1"], (proc.stdout, proc.stderr[-2000:])
