"""Run one submission's kernel in a sandbox: no network, the instructor's files out of reach, limits.

The grading workers (``autograder/grade.py``) run nbgrader outside; what they start in here is the kernel that
runs the student's code (``kernel_manager_class``), and it talks to them over unix sockets in its scratch folder.
Linux namespaces (util-linux ``unshare``) as root, which is how the course's grading machines run:
- a network namespace with only its own loopback: nothing is reachable over the network, not even the
  grading machine's loopback (the kernel's ZMQ sockets are unix sockets, ``ipc`` transport, not TCP);
- a PID namespace (the student's code cannot see or signal the grader or other submissions);
- a mount namespace in which the course folder is read-only and the reference solutions, the other
  submissions, the gradebook, the tests (bug catalogue, alternatives), feedback, grades and git history are
  replaced by empty folders; /tmp and the other submissions' scratch folders are hidden too;
- every capability dropped before the kernel starts, so the student's code cannot undo any of this;
- resource limits (``prlimit``): address space, CPU seconds and file size per process.

Where namespaces are not available (not root, a container without them) grading still works, without
this isolation, and ``make grade`` says so once. What is and is not protected is listed in the README.
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

# Runs inside the new namespaces (bash), as root, before capabilities are dropped.
# $1 course root, $2 folder of all scratch dirs, $3 number of kept paths, then the kept paths, then the command.
# /tmp and the scratch folder are replaced by empty ones (other submissions, the test suite's course copies
# and anything else left in /tmp are out of sight); the kept paths that lived there (this submission's
# scratch dir, the Python environment, the course's packages) are put back through file descriptors opened
# before (mount must not canonicalize those paths: they would resolve to the new, empty folders). Only then is
# the course made read-only and its instructor folders hidden.
SETUP = r'''
set -eu
course=$1 batch=$2 nkeep=$3; shift 3
keep=("${@:1:$nkeep}"); shift "$nkeep"
ip link set lo up
fds=()
for p in "${keep[@]}"; do exec {fd}<"$p"; fds+=("$fd"); done
mount -t tmpfs -o mode=1777 tmpfs /tmp
case "$batch/" in /tmp/*) ;; *) mount -t tmpfs -o mode=755 tmpfs "$batch" ;; esac
for i in "${!keep[@]}"; do
  p=${keep[$i]}
  case "$p/" in /tmp/*|"$batch"/*) mkdir -p "$p"; mount --no-canonicalize --bind "/proc/self/fd/${fds[$i]}" "$p" ;; esac
  exec {fds[$i]}<&-
done
mount --bind "$course" "$course"
mount -o remount,bind,ro "$course"
for rel in {hidden}; do
  p="$course/$rel"
  if [ -d "$p" ]; then mount -t tmpfs -o size=64k,mode=755 tmpfs "$p"
  elif [ -e "$p" ]; then mount --bind /dev/null "$p"; fi
done
exec "$@"
'''


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


@lru_cache(maxsize=1)
def available() -> tuple[bool, str]:
    """(can we sandbox here?, why not). Tried once per process with a harmless command."""
    for tool in ("unshare", "setpriv", "prlimit", "ip", "mount", "bash"):
        if shutil.which(tool) is None:
            return False, f"`{tool}` is not installed"
    probe = ["unshare", "--mount", "--net", "--pid", "--fork", "--kill-child", "sh", "-c",
             "ip link set lo up && mount -t tmpfs tmpfs /mnt && setpriv --bounding-set -all --inh-caps -all true"]
    try:
        proc = subprocess.run(probe, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, str(exc)
    if proc.returncode != 0:
        return False, (proc.stderr.strip() or f"exit status {proc.returncode}").splitlines()[-1]
    return True, ""


def wrap(cmd: list[str], course: Path, batch: Path, scratch: Path, limits: Limits) -> list[str]:
    """``cmd`` wrapped so that it runs isolated and limited (call only when ``available()``)."""
    setup = SETUP.replace("{hidden}", " ".join(HIDDEN))
    keep = kept_paths(course, scratch)
    limited = ["prlimit", f"--as={int(limits.memory_gb * 2**30)}", f"--cpu={limits.cpu_seconds}",
               f"--fsize={limits.file_mb * 2**20}", "--",
               "setpriv", "--bounding-set", "-all", "--inh-caps", "-all", "--no-new-privs", "--", *cmd]
    return ["unshare", "--mount", "--net", "--pid", "--fork", "--kill-child", "--mount-proc",
            "bash", "-c", setup, "sandbox", str(course), str(batch), str(len(keep)), *keep, *limited]


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
            cmd = ["env", *(f"{k}={v}" for k, v in self.kernel_env.items()), *cmd]
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
