"""The files of a run folder (``out_dir``): how the trainer writes them so that no crash ruins them, and how it checks
what it reads back.

- ``atomic_save`` / ``atomic_write_text``: write a temporary file next to the target, fsync it, ``os.replace`` it over
  the target. A crash at any moment leaves the old file or the new one, never a torn one; a failed write removes its
  temporary. A SIGKILL cannot run that clean-up, so ``remove_stale_temporaries`` does it when the next run starts.
- ``seal`` / ``open_checkpoint``: a checkpoint carries a SHA-256 of everything in it (every tensor's bytes, every
  number, string and key). ``open_checkpoint`` recomputes it: a truncated, empty, foreign or bit-flipped file, one
  that lacks a key, or one whose weights are not finite raises ``DamagedCheckpoint`` instead of loading silently.
  It loads with ``weights_only=True``, so a file that is not ours cannot run code.
- ``lock_out_dir``: one run per folder at a time. It holds an exclusive ``flock`` on the folder itself (no lock file
  to go stale: the kernel drops the lock when the process ends, SIGKILL included). Trainers of one process share it:
  a notebook builds several on one folder, one after the other.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import os
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

try:
    import fcntl
except ImportError:  # Windows: no flock; runs there are not locked
    fcntl = None

CHECKPOINT_VERSION = 2       # 2: a checksum inside, weights_only-loadable RNG states
REQUIRED_KEYS = ("version", "step", "best_val", "model", "optimizer", "rng", "world_size", "history", "config")


class DamagedCheckpoint(Exception):
    """A checkpoint file that cannot be trusted; the message says why (it follows the file's name)."""


# --------------------------------------------------------------------------------------------- atomic writes
def _temporary(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


def _replace_durably(tmp: Path, path: Path) -> None:
    os.replace(tmp, path)
    with contextlib.suppress(OSError):  # make the rename itself durable
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_save(obj: Any, path: str | os.PathLike) -> None:
    """``torch.save`` to a temporary file next to ``path``, fsync it, then ``os.replace`` it over ``path``: a crash
    at any moment leaves either the old file or the new one, never a torn one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temporary(path)
    try:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        _replace_durably(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise


def atomic_write_text(text: str, path: str | os.PathLike) -> None:
    """``atomic_save`` for a text file (the manifest)."""
    path = Path(path)
    tmp = _temporary(path)
    try:
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        _replace_durably(tmp, path)
    except BaseException:    # a full disk or a file-size limit: leave no temporary behind
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise


def remove_stale_temporaries(out_dir: str | os.PathLike) -> list[tuple[str, int]]:
    """Delete the temporaries (``.<name>.tmp-<pid>``) that killed runs left in ``out_dir``; returns (name, bytes) of
    each. Call it only while holding the folder's lock: then no other run can be writing one."""
    removed = []
    for tmp in Path(out_dir).glob(".*.tmp-*"):
        with contextlib.suppress(OSError):
            size = tmp.stat().st_size
            tmp.unlink()
            removed.append((tmp.name, size))
    return removed


# --------------------------------------------------------------------------------------------- checksums
def checksum(obj: Any) -> str:
    """SHA-256 of a checkpoint's contents: dicts (keys in sorted order), lists, tuples, tensors (dtype, shape and
    bytes), NumPy arrays, and Python scalars and strings. The same contents give the same digest after a save and a
    load; any changed bit of a value gives another."""
    h = hashlib.sha256()
    _feed(h, obj)
    return h.hexdigest()


def _feed(h, obj: Any) -> None:
    if isinstance(obj, torch.Tensor):
        t = obj.detach().to("cpu").contiguous()
        h.update(f"tensor {t.dtype} {tuple(t.shape)}:".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())   # raw bytes, whatever the dtype (bf16 too)
    elif isinstance(obj, np.ndarray):
        h.update(f"ndarray {obj.dtype} {obj.shape}:".encode())
        h.update(np.ascontiguousarray(obj).tobytes())
    elif isinstance(obj, dict):
        h.update(f"dict {len(obj)}:".encode())
        for key in sorted(obj, key=repr):
            _feed(h, key)
            _feed(h, obj[key])
    elif isinstance(obj, (list, tuple)):
        h.update(f"{type(obj).__name__} {len(obj)}:".encode())
        for item in obj:
            _feed(h, item)
    elif obj is None or isinstance(obj, (bool, int, float, str, bytes)):
        h.update(f"{type(obj).__name__} {obj!r};".encode())
    else:
        raise TypeError(f"checksum: cannot hash a {type(obj).__name__} in a checkpoint")


def seal(state: dict) -> dict:
    """``state`` with its checksum added under "checksum" (what ``open_checkpoint`` verifies)."""
    return {**state, "checksum": checksum(state)}


def _non_finite(tree: Any, where: str = "") -> str | None:
    """The path of the first floating-point tensor in ``tree`` that holds a NaN or an infinity, else None."""
    if isinstance(tree, torch.Tensor):
        return where if tree.is_floating_point() and not bool(torch.isfinite(tree).all()) else None
    items = tree.items() if isinstance(tree, dict) else enumerate(tree) if isinstance(tree, (list, tuple)) else ()
    for key, value in items:
        found = _non_finite(value, f"{where}.{key}" if where else str(key))
        if found is not None:
            return found
    return None


def first_non_finite(model_state: dict, optimizer_state: dict) -> str | None:
    """Where the weights or the optimiser state first hold a non-finite value ("model.<name>" or
    "optimizer.state.<i>.<moment>"), else None."""
    where = _non_finite(model_state)
    if where is not None:
        return "model." + where
    where = _non_finite(optimizer_state.get("state", {}))
    return None if where is None else "optimizer.state." + where


def open_checkpoint(path: str | os.PathLike) -> dict:
    """The state saved in ``path`` (on the CPU), once it has passed every check; else ``DamagedCheckpoint``."""
    path = Path(path)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 -- truncated, empty, garbage, or a pickle that is not plain data
        first = (str(e).strip().splitlines() or [""])[0].split(". ")[0][:120] or "empty or truncated"
        raise DamagedCheckpoint(f"cannot be read ({type(e).__name__}: {first})") from None
    if not isinstance(state, dict):
        raise DamagedCheckpoint(f"is not a checkpoint (it holds a {type(state).__name__}, not a dict)")
    if state.get("version") != CHECKPOINT_VERSION:
        raise DamagedCheckpoint(f"has checkpoint version {state.get('version')!r}, this trainer reads "
                                f"{CHECKPOINT_VERSION}")
    missing = [key for key in (*REQUIRED_KEYS, "checksum") if key not in state]
    if missing:
        raise DamagedCheckpoint(f"lacks {', '.join(missing)}")
    stored = state.pop("checksum")
    if stored != checksum(state):
        raise DamagedCheckpoint("fails its checksum (its contents changed after it was written)")
    where = first_non_finite(state["model"], state["optimizer"])
    if where is not None:
        raise DamagedCheckpoint(f"holds a non-finite value in {where}")
    return state


# --------------------------------------------------------------------------------------------- one run per folder
class OutDirInUse(Exception):
    """Another process holds the folder's lock."""


_HELD: dict[tuple[int, int], list] = {}   # (device, inode) of a folder -> [its open descriptor, how many hold it]


def lock_out_dir(out_dir: str | os.PathLike) -> tuple[Callable[[], None], str | None]:
    """Lock ``out_dir`` for this process; returns (release, problem). ``problem`` is None, or why the folder could not
    be locked here (a file system without flock): the run then goes on unlocked. Raises ``OutDirInUse`` when another
    process holds the lock. ``release()`` may be called more than once."""
    if fcntl is None:
        return (lambda: None), "no flock on this platform"
    fd = os.open(out_dir, os.O_RDONLY)
    st = os.fstat(fd)
    key = (st.st_dev, st.st_ino)              # not the path: a folder deleted and made again is another folder
    if key in _HELD:                          # this process holds it already: share it
        os.close(fd)
    else:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise OutDirInUse(str(out_dir)) from None
            return (lambda: None), f"flock failed: {e.strerror}"
        _HELD[key] = [fd, 0]
    _HELD[key][1] += 1
    released = False

    def release() -> None:
        nonlocal released
        if released or key not in _HELD:
            return
        released = True
        _HELD[key][1] -= 1
        if _HELD[key][1] == 0:
            os.close(_HELD.pop(key)[0])       # closing the last descriptor drops the lock
    return release, None
