"""Run one submission's grading in a sandbox: no network, the instructor's files out of reach, limits.

Linux namespaces (util-linux ``unshare``) as root, which is how the course's grading machines run:
- a network namespace with only its own loopback (the kernel talks to nbgrader over it; nothing else is
  reachable);
- a PID namespace (the student's code cannot see or signal the grader or other submissions);
- a mount namespace in which the course folder is read-only and the reference solutions, the other
  submissions, the gradebook, the tests (bug catalogue, alternatives), feedback, grades and git history are
  replaced by empty folders; /tmp and the other submissions' scratch folders are hidden too;
- every capability dropped before nbgrader starts, so the student's code cannot undo any of this;
- resource limits (``prlimit``): address space, CPU seconds and file size per process.

Where namespaces are not available (not root, a container without them) grading still works, without
this isolation, and ``make grade`` says so once. What is and is not protected is listed in the README.
"""
from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

# Paths of the course that a submission must not see (relative to the course root).
HIDDEN = ("solutions", "submitted", "autograded", "feedback", "grades", "tests", ".git", ".nbgrader_release",
          ".nbgrader_exchange", "gradebook.db")

# Runs inside the new namespaces, as root, before capabilities are dropped.
# $1 course root, $2 folder of all scratch dirs, $3 this submission's scratch dir; the rest is the command.
# /tmp and the scratch folder are replaced by empty ones (other submissions, the test suite's course copies
# and anything else left in /tmp are out of sight), then this submission's scratch dir is put back through
# a file descriptor opened before (mount must not canonicalize that path: it would resolve to the new, empty one).
SETUP = r'''
set -eu
course=$1 batch=$2 scratch=$3; shift 3
ip link set lo up
mount --bind "$course" "$course"
mount -o remount,bind,ro "$course"
for rel in {hidden}; do
  p="$course/$rel"
  if [ -d "$p" ]; then mount -t tmpfs -o size=64k,mode=755 tmpfs "$p"
  elif [ -e "$p" ]; then mount --bind /dev/null "$p"; fi
done
exec 3<"$scratch"
mount -t tmpfs -o mode=1777 tmpfs /tmp
case "$batch" in /tmp/*) ;; *) mount -t tmpfs -o mode=755 tmpfs "$batch" ;; esac
mkdir -p "$scratch"
mount --no-canonicalize --bind /proc/self/fd/3 "$scratch"
exec 3<&-
exec "$@"
'''


@dataclass(frozen=True)
class Limits:
    memory_gb: float = 8.0      # address space per process (torch itself needs under 1 GB)
    cpu_seconds: int = 1800     # CPU time per process
    file_mb: int = 512          # largest file a process may write


@lru_cache(maxsize=1)
def available() -> tuple[bool, str]:
    """(can we sandbox here?, why not). Tried once per process with a harmless command."""
    for tool in ("unshare", "setpriv", "prlimit", "ip", "mount"):
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
    limited = ["prlimit", f"--as={int(limits.memory_gb * 2**30)}", f"--cpu={limits.cpu_seconds}",
               f"--fsize={limits.file_mb * 2**20}", "--",
               "setpriv", "--bounding-set", "-all", "--inh-caps", "-all", "--no-new-privs", "--", *cmd]
    return ["unshare", "--mount", "--net", "--pid", "--fork", "--kill-child", "--mount-proc",
            "sh", "-c", setup, "sandbox", str(course), str(batch), str(scratch), *limited]
