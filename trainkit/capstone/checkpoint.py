"""Checkpoint and resume, one component: the files of a run folder (``out_dir``), how the trainer writes them so that
no crash ruins them, what a checkpoint holds (ONE key list, ``CONTENTS``), and the rules a resume follows.

- ``atomic_save`` / ``atomic_write_text``: write a temporary file next to the target, fsync it, ``os.replace`` it over
  the target. A crash at any moment leaves the old file or the new one, never a torn one; a failed write removes its
  temporary and raises the ``OSError`` of the write (torch's zip writer wraps it in a RuntimeError: unwrapped here,
  so that a full disk is a full disk). A SIGKILL cannot run that clean-up, so ``remove_stale_temporaries`` does it
  when the next run starts. ``disk_full`` says whether a folder's file system has (next to) no space left.
- ``seal`` / ``open_checkpoint``: a checkpoint carries a SHA-256 of everything in it (every tensor's bytes, every
  number, string and key). ``open_checkpoint`` recomputes it: a truncated, empty, foreign or bit-flipped file, one
  that lacks a key, one whose weights are not finite, or one with a key of the wrong type or value (``CONTENTS``:
  one table of key -> check, which the trainer also runs on every checkpoint before it writes it) raises
  ``DamagedCheckpoint`` instead of loading silently. It loads with ``weights_only=True``, PyTorch's loader that is
  designed to run no code from a file that is not ours (it had bypasses, fixed in 2.6 and 2.10: keep torch current);
  a checkpoint of the earlier trainer (version 1, with NumPy's pickled random state) is recognised
  as such.
- ``lock_out_dir``: one run per folder at a time. It holds an exclusive ``flock`` on the folder itself (no lock file
  to go stale: the kernel drops the lock when the process ends, SIGKILL included). Trainers of one process share it:
  a notebook builds several on one folder, one after the other.
- ``rng_state`` / ``set_rng_state``: one rank's random states, as a checkpoint holds them.
- The trainer's side (``Trainer.state_dict``, ``save_checkpoint``, ``load_checkpoint`` and ``resume=True`` call these):
  ``trainer_state`` builds the dict ``CONTENTS`` checks, ``save`` writes it, ``resume`` / ``restore`` read it back
  under the resume rules (``MUST_MATCH_ON_RESUME``, the world size, the data, the device kind, precision "auto").
"""
from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import importlib
import math
import os
import pickle
import random
import re
import tempfile
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
import torch.distributed as dist

from trainkit.capstone.config import ConfigError, TrainConfig
from trainkit.capstone.gpt import GPT, GPTConfig
from trainkit.capstone.precision import resolve_precision
from trainkit.capstone.signals import Interrupted

try:
    import fcntl
except ImportError:  # Windows: no flock; runs there are not locked
    fcntl = None

CHECKPOINT_VERSION = 2       # 2: a checksum inside, weights_only-loadable RNG states
# what the trainer records per step ("step" .. "tokens", one entry each) and per evaluation ("val_step", "val_loss");
# Trainer.history starts with these keys and a checkpoint's history must hold exactly them
HISTORY_KEYS = ("step", "loss", "lr", "grad_norm", "skipped", "step_time", "tokens", "val_step", "val_loss")


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


def _os_error_within(e: BaseException) -> OSError | None:
    """The OSError behind an exception: itself, or one in its chain of causes and contexts."""
    seen = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, OSError):
            return e
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return None


def disk_full(folder: str | os.PathLike) -> bool:
    """Whether the file system holding ``folder`` has less than 1 MiB left for this user (root may use the blocks
    reserved for it): too little for any checkpoint or log. False where it cannot be told (no statvfs, a file system
    that reports no size)."""
    try:
        st = os.statvfs(folder)
    except (AttributeError, OSError):
        return False
    free = st.f_bfree if hasattr(os, "geteuid") and os.geteuid() == 0 else st.f_bavail
    return st.f_blocks > 0 and free * st.f_frsize < 2 ** 20


def atomic_save(obj: Any, path: str | os.PathLike) -> None:
    """``torch.save`` to a temporary file next to ``path``, fsync it, then ``os.replace`` it over ``path``: a crash
    at any moment leaves either the old file or the new one, never a torn one. A write that fails raises an OSError
    (``errno.ENOSPC`` for a full disk), also where torch reports it as a RuntimeError."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temporary(path)
    try:
        with open(tmp, "wb") as f:
            try:
                torch.save(obj, f)
            except RuntimeError as e:
                # torch's zip writer calls f.write from C++: the OSError of a failed write (a full disk, a file-size
                # limit) comes back as "[enforce fail at inline_container.cc] unexpected pos", with the OSError as
                # its context, or with none where the writer lost it; say what the disk says
                cause = _os_error_within(e)
                if cause is not None:
                    raise cause from None
                if "No space left" in str(e) or disk_full(path.parent):
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)) from None
                raise
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


# --------------------------------------------------------------------------------------------- what a checkpoint holds
# Every key a checkpoint holds, with the check its value must pass: ONE table, run by open_checkpoint on every file it
# opens and by the trainer on every checkpoint before it writes it (Trainer.save_checkpoint), so that what the writer
# writes and what the reader accepts cannot drift apart. A check returns None, or what is wrong ("must be ..., got
# ..."); it may read keys listed before its own (they have passed by then). Only "resolved" may be missing: the
# trainer writes it since it keeps what precision "auto" became, and checkpoints of version 2 written before lack it.
def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _show(v) -> str:
    """A short description of a value for a one-line message."""
    if isinstance(v, torch.Tensor):
        return f"a tensor of shape {list(v.shape)}"
    if isinstance(v, (dict, list, tuple)) and len(repr(v)) > 40:
        return f"a {type(v).__name__} of {len(v)} items"
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _need_int(v, low: int, high: int | None = None, what: str = "an int") -> str | None:
    if _is_int(v) and v >= low and (high is None or v <= high):
        return None
    bound = f">= {low}" if high is None else f"in [{low}, {high}]"
    return f"must be {what} {bound}, got {_show(v)}"


def _check_version(v, state) -> str | None:
    return None if _is_int(v) and v == CHECKPOINT_VERSION else f"must be {CHECKPOINT_VERSION}, got {_show(v)}"


def _check_config(v, state) -> str | None:
    if not isinstance(v, dict):
        return f"must be the run's settings (a dict), got {_show(v)}"
    try:
        TrainConfig.from_dict(v)
    except (ConfigError, TypeError, ValueError) as e:
        return str(e).split(" (known keys")[0]
    return None


def _check_step(v, state) -> str | None:
    steps = TrainConfig.from_dict(state["config"]).steps   # as a resume reads the config (checked above)
    return _need_int(v, 0, steps, "an int (optimiser steps run)")


def _check_best_val(v, state) -> str | None:
    if _is_num(v) and not math.isnan(v) and v != -math.inf:
        return None
    return f"must be the best validation loss so far (a number; inf before the first evaluation), got {_show(v)}"


def _check_skips(v, state) -> str | None:
    return _need_int(v, 0, state["step"], "an int (skipped steps in a row)")


def _check_world_size(v, state) -> str | None:
    return _need_int(v, 1)


def _check_data(v, state) -> str | None:
    sha = v.get("sha256") if isinstance(v, dict) else None
    if isinstance(sha, str) and re.fullmatch(r"[0-9a-f]{64}", sha):
        return None
    return f"must describe the training data (a dict with its token sha256), got {_show(v)}"


def _check_history(v, state) -> str | None:
    if not isinstance(v, dict) or set(v) != set(HISTORY_KEYS) or not all(isinstance(x, list) for x in v.values()):
        return f"must be a dict of the lists {', '.join(HISTORY_KEYS)}, got {_show(v)}"
    n = len(v["step"])
    if any(len(v[key]) != n for key in HISTORY_KEYS[:7]) or v["step"] != list(range(n)):
        return f"must hold one entry per step in each of {', '.join(HISTORY_KEYS[:7])} (steps 0, 1, ...)"
    if len(v["val_step"]) != len(v["val_loss"]) or not all(_is_int(s) and 0 <= s < n for s in v["val_step"]) \
            or not all(_is_num(x) for x in v["val_loss"]):
        return "must pair every val_step (a step run) with a val_loss (a number)"
    return None


@functools.lru_cache(maxsize=8)
def _model_shapes(model_config: tuple) -> tuple[dict[str, tuple[int, ...]], int]:
    """The shape of every tensor in the state dict of the GPT these settings describe, and its number of parameters
    (built on the meta device: shapes only, no memory; cached, as every checkpoint write checks them)."""
    with torch.device("meta"):
        model = GPT(GPTConfig(**dict(model_config)))
    return {name: tuple(t.shape) for name, t in model.state_dict().items()}, len(list(model.parameters()))


def _expected_model(state) -> tuple[dict[str, tuple[int, ...]], int]:
    model = TrainConfig.from_dict(state["config"]).model.to_dict()   # as a resume would read it (checked above)
    return _model_shapes(tuple(sorted(model.items())))


def _check_model(v, state) -> str | None:
    if not isinstance(v, dict) or not all(isinstance(k, str) and isinstance(t, torch.Tensor) for k, t in v.items()):
        return f"must be the model's weights (a dict of named tensors), got {_show(v)}"
    want = _expected_model(state)[0]
    missing, unknown = sorted(set(want) - set(v)), sorted(set(v) - set(want))
    if missing or unknown:
        return ("does not hold the weights of the model its config describes: "
                + "; ".join(part for part in (f"lacks {', '.join(missing[:3])}" if missing else "",
                                               f"holds unknown {', '.join(unknown[:3])}" if unknown else "") if part))
    for name, shape in want.items():
        if tuple(v[name].shape) != shape:
            return f"{name} has shape {list(v[name].shape)}, the model its config describes {list(shape)}"
        if not v[name].is_floating_point():
            return f"{name} holds {v[name].dtype}, not floating-point weights"
    return None


def _check_optimizer(v, state) -> str | None:
    groups = v.get("param_groups") if isinstance(v, dict) else None
    if not isinstance(v, dict) or not isinstance(v.get("state"), dict) or not isinstance(groups, list) or not groups \
            or not all(isinstance(g, dict) and isinstance(g.get("params"), list) for g in groups):
        return f"must be an optimiser's state dict (its state and param_groups), got {_show(v)}"
    ids = [i for g in groups for i in g["params"]]
    n = _expected_model(state)[1]
    if not all(_is_int(i) for i in ids) or sorted(ids) != list(range(n)):
        return f"its param_groups must list the model's {n} parameters once each, they list {len(ids)}"
    entries = v["state"]
    if not set(entries) <= set(ids) or not all(
            isinstance(e, dict) and all(isinstance(x, (torch.Tensor, int, float)) for x in e.values())
            for e in entries.values()):
        return "its state must map parameter numbers to dicts of tensors and numbers"
    updates = sum(1 for skipped in state["history"]["skipped"] if not skipped)
    if updates and not entries:
        # an optimiser that stepped has moments; without them a resume would silently start them afresh
        return f"holds no state (moments) though {updates} optimiser updates ran"
    return None


def _check_rng_entry(entry) -> str | None:
    """One rank's random states (what ``rng_state`` saves), tried on throwaway generators."""
    if not isinstance(entry, dict) or not {"torch", "python", "numpy"} <= set(entry):
        return f"must hold the torch, python and numpy states, got {_show(entry)}"
    try:
        torch.Generator().set_state(entry["torch"])
        random.Random().setstate(entry["python"])
        n = entry["numpy"]
        np.random.RandomState().set_state((n["kind"], n["key"].numpy().astype(np.uint32), n["pos"], n["has_gauss"],
                                           n["gauss"]))
    except Exception as e:  # noqa: BLE001 -- any state a generator refuses
        return f"holds a random state its generator refuses ({type(e).__name__})"
    cuda = entry.get("cuda", [])
    if not isinstance(cuda, list) or not all(isinstance(t, torch.Tensor) and t.dtype == torch.uint8 for t in cuda):
        return "its cuda states must be a list of byte tensors"
    return None


def _check_rng(v, state) -> str | None:
    if not isinstance(v, list) or len(v) != state["world_size"]:
        return f"must hold the random states of each of its {state['world_size']} rank(s), got {_show(v)}"
    for rank, entry in enumerate(v):
        problem = _check_rng_entry(entry)
        if problem is not None:
            return f"rank {rank}: {problem}"
    return None


def _check_schedule(v, state) -> str | None:   # a record of the schedule at that step; resume recomputes it
    if isinstance(v, dict) and isinstance(v.get("kind"), str) and _is_num(v.get("lr_next")):
        return None
    return f"must be a dict with the schedule's kind and next lr, got {_show(v)}"


def _check_compile_status(v, state) -> str | None:   # a record; resume compiles (or not) as this run's config says
    return None if isinstance(v, dict) else f"must be a dict, got {_show(v)}"


def _check_resolved(v, state) -> str | None:
    if isinstance(v, dict) and v.get("precision") in ("fp32", "bf16") and isinstance(v.get("device"), str):
        return None
    return f"must say what precision and device the run resolved to, got {_show(v)}"


# key -> (required, check), in the order they are checked
CONTENTS: dict[str, tuple[bool, Callable[[Any, dict], str | None]]] = {
    "version": (True, _check_version),
    "config": (True, _check_config),
    "step": (True, _check_step),
    "best_val": (True, _check_best_val),
    "skips_in_a_row": (True, _check_skips),
    "world_size": (True, _check_world_size),
    "data": (True, _check_data),
    "history": (True, _check_history),
    "model": (True, _check_model),
    "optimizer": (True, _check_optimizer),
    "rng": (True, _check_rng),
    "schedule": (True, _check_schedule),
    "compile_status": (True, _check_compile_status),
    "resolved": (False, _check_resolved),
}


def contents_problem(state: dict) -> str | None:
    """What is wrong with a checkpoint's contents (without its "checksum"), as the end of a sentence that starts with
    the file's name ("lacks data", "has a bad 'step': must be ..."); None when every key passes ``CONTENTS``."""
    missing = [key for key, (required, _) in CONTENTS.items() if required and key not in state]
    if missing:
        return f"lacks {', '.join(missing)}"
    unknown = sorted(set(state) - set(CONTENTS), key=str)
    if unknown:
        return f"holds keys this trainer does not write: {', '.join(map(str, unknown))}"
    for key, (_, check) in CONTENTS.items():
        if key in state:
            problem = check(state[key], state)
            if problem is not None:
                return f"has a bad {key!r}: {problem}"
    return None


# The earlier trainer (checkpoint version 1) pickled NumPy's random state as an ndarray, which weights_only refuses.
# These NumPy globals only rebuild arrays: allowed for reading such a file's version, so that it can be named.
_VERSION_1_GLOBALS = {"numpy.dtype", "numpy.ndarray", "numpy._core.multiarray._reconstruct",
                      "numpy.core.multiarray._reconstruct", "numpy.dtypes.UInt32DType"}


def _earlier_version(path: Path) -> int | None:
    """The version of a checkpoint that weights_only could not read, where it is one of the earlier trainer's (its
    only unusual globals are NumPy's array rebuilders); else None."""
    try:
        names = set(torch.serialization.get_unsafe_globals_in_checkpoint(path))
        if not names or not names <= _VERSION_1_GLOBALS:
            return None
        allowed = []
        for name in _VERSION_1_GLOBALS:   # all of them: the dtype's class is met only while unpickling
            module, _, attr = name.rpartition(".")
            with contextlib.suppress(ImportError, AttributeError):   # numpy 1 and 2 name them differently
                allowed.append((getattr(importlib.import_module(module), attr), name))
        with torch.serialization.safe_globals(allowed):
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # noqa: BLE001 -- not even that: an unreadable file, said as such by the caller
        return None
    version = state.get("version") if isinstance(state, dict) else None
    return version if _is_int(version) and version < CHECKPOINT_VERSION else None


def open_checkpoint(path: str | os.PathLike) -> dict:
    """The state saved in ``path`` (on the CPU), once it has passed every check; else ``DamagedCheckpoint``."""
    path = Path(path)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 -- truncated, empty, garbage, or a pickle that is not plain data
        old = _earlier_version(path) if isinstance(e, pickle.UnpicklingError) else None
        if old is not None:
            raise DamagedCheckpoint(f"was written by an earlier version of the trainer (checkpoint version {old}, "
                                    f"without a checksum); this one reads version {CHECKPOINT_VERSION} only") from None
        first = (str(e).strip().splitlines() or [""])[0].split(". ")[0][:120] or "empty or truncated"
        raise DamagedCheckpoint(f"cannot be read ({type(e).__name__}: {first})") from None
    if not isinstance(state, dict):
        raise DamagedCheckpoint(f"is not a checkpoint (it holds a {type(state).__name__}, not a dict)")
    if state.get("version") != CHECKPOINT_VERSION:
        raise DamagedCheckpoint(f"has checkpoint version {state.get('version')!r}, this trainer reads "
                                f"{CHECKPOINT_VERSION}")
    missing = [key for key, (required, _) in CONTENTS.items() if required and key not in state]
    missing += ["checksum"] if "checksum" not in state else []
    if missing:   # said before the checksum: a file that lost a key fails its checksum too, which says less
        raise DamagedCheckpoint(f"lacks {', '.join(missing)}")
    stored = state.pop("checksum")
    if stored != checksum(state):
        raise DamagedCheckpoint("fails its checksum (its contents changed after it was written)")
    problem = contents_problem(state)   # a sealed file can still hold what this trainer never writes
    if problem is not None:
        raise DamagedCheckpoint(problem)
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


# --------------------------------------------------------------------------------------------- the run folder
class TrainingStopped(RuntimeError):
    """The run stopped itself while training (a lasting non-finite value); the last good checkpoint is kept. The
    command line prints it as one line and exits with 3."""


class WriteFailed(OSError):
    """A checkpoint or the log could not be written (a full disk, a file-size limit): the message names the file,
    says why and what the disk still holds. The command line prints it as one line and exits with 3."""

    def __init__(self, message: str, cause: OSError | None = None):
        super().__init__(message)
        self.cause_errno = getattr(cause, "errno", None)


def why_not_written(e: OSError, folder: Path) -> str:
    """Why a write failed, in words: a full disk said as such, also where the error has no errno to say it (a log
    that was never written: wandb's service hit the full disk, not this process)."""
    if e.errno in (errno.ENOSPC, errno.EDQUOT) or (e.errno is None and disk_full(folder)):
        return ("the disk is full" if e.errno != errno.EDQUOT else "the disk quota is used up") + \
               f" ({e.strerror or 'No space left on device'}): free some space"
    return e.strerror or str(e) or type(e).__name__


def prepare_out_dir(out_dir: Path) -> None:
    """Create ``out_dir`` and check that files can be written in it: one line now rather than a traceback at the first
    checkpoint."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise ConfigError(f"out_dir {str(out_dir)!r} is a file, not a folder") from None
    except NotADirectoryError:
        raise ConfigError(f"out_dir {str(out_dir)!r} is inside a file, not a folder") from None
    except OSError as e:
        raise ConfigError(f"cannot create out_dir {str(out_dir)!r}: {e.strerror}") from None
    try:
        with tempfile.TemporaryFile(dir=out_dir):   # the way to know: permissions, a read-only disk, root's rights
            pass
    except OSError as e:
        raise ConfigError(f"out_dir {str(out_dir)!r} is not writable: {e.strerror}") from None


# --------------------------------------------------------------------------------------------- random states
def rng_state(device: torch.device) -> dict:
    """This process's random states, as tensors and plain numbers (loadable with ``weights_only=True``).

    "cuda" holds one state, that of the generator this rank draws from on a GPU (its own device's; [] off CUDA),
    not ``get_rng_state_all()``: the states of GPUs the run never touched would tie the checkpoint to the number of
    GPUs of the machine that wrote it, and resuming where fewer are visible could not restore them."""
    kind, key, pos, has_gauss, gauss = np.random.get_state()
    return {"torch": torch.get_rng_state(), "python": random.getstate(),
            "numpy": {"kind": kind, "key": torch.from_numpy(key.astype(np.int64)), "pos": int(pos),
                      "has_gauss": int(has_gauss), "gauss": float(gauss)},
            "cuda": [torch.cuda.get_rng_state(device)] if device.type == "cuda" else []}


def set_rng_state(state: dict, device: torch.device) -> None:
    """Restore what ``rng_state`` saved. A CUDA state is restored only on CUDA: into this rank's device where the
    checkpoint holds one (the generator it drew from, whichever GPU index it has here), into every GPU where it
    holds several (a checkpoint of an earlier trainer, which kept every visible GPU's; ``resume`` first checks that
    this machine has that many). Off CUDA, or from a CPU checkpoint, nothing CUDA's is touched: the device kind
    changed, and the resume records that (``check_resume_settings``)."""
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    n = state["numpy"]
    np.random.set_state((n["kind"], n["key"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"]))
    cuda = list(state.get("cuda") or [])
    if device.type == "cuda" and len(cuda) == 1:
        torch.cuda.set_rng_state(cuda[0], device)
    elif device.type == "cuda" and cuda:
        torch.cuda.set_rng_state_all(cuda)


# --------------------------------------------------------------------------------------------- the trainer's state
# The functions below take the Trainer (``trainer``) whose state they write or restore; the Trainer's own methods
# (state_dict, save_checkpoint, load_checkpoint) and its resume=True call them.
def trainer_state(trainer) -> dict:
    """What a checkpoint of ``trainer`` holds: every key of ``CONTENTS`` (checked before it is written). Under DDP
    every rank must call it: the random states are gathered."""
    rng = rng_state(trainer.device)
    if trainer.ddp:
        every = [None] * trainer.world_size
        dist.all_gather_object(every, rng)
    else:
        every = [rng]
    return {"version": CHECKPOINT_VERSION, "step": trainer.step, "best_val": trainer.best_val,
            "model": trainer.raw_model.state_dict(), "optimizer": trainer.optimizer.state_dict(),
            "schedule": {"kind": trainer.cfg.schedule, "lr_next": trainer.lr_at(trainer.step)},
            "rng": every, "world_size": trainer.world_size, "history": trainer.history,
            "skips_in_a_row": trainer._skips_in_a_row, "data": trainer.data.describe(),
            "config": trainer.cfg.to_dict(), "compile_status": dict(trainer.compile_status),
            # the precision this run trains in (what "auto" became at its first start: a resume with "auto"
            # keeps it) and the kind of device it ran on
            "resolved": {"precision": trainer.precision, "device": trainer.device.type}}


def save(trainer, path: str | os.PathLike) -> None:
    """``Trainer.save_checkpoint``: write everything needed to resume exactly, with its checksum, atomically; under
    DDP only rank 0 writes (every rank must call it). See that method for what it raises."""
    path = Path(path)
    bad = first_non_finite(trainer.raw_model.state_dict(), trainer.optimizer.state_dict())
    if bad is not None:   # the same on every rank (DDP keeps the weights equal), so all ranks stop together
        kept = f"{path.name} on disk keeps its last finite state" if path.exists() else "no file was written"
        raise TrainingStopped(f"not writing {path.name} after {trainer.step} steps: {bad} is not finite; {kept}")
    # A second SIGTERM / SIGINT from here on waits (see Trainer._stop_on_signals) until the save is done, on every rank
    # (each holds it at the barrier, where they stop together); raised mid-write, it would come out of torch's zip
    # writer as a RuntimeError, or abort the process.
    trainer._writing = True
    try:
        state = trainer.state_dict()
        if trainer.is_main:
            problem = contents_problem(state)   # the table open_checkpoint checks: what is written can be read
            if problem is not None:
                raise RuntimeError(f"the trainer built a checkpoint that open_checkpoint would refuse: "
                                   f"{path.name} {problem}")
            try:
                trainer._flush_logger()
                atomic_save(seal(state), path)
            except OSError as e:   # the file on disk is the previous one, whole (atomic_save)
                if isinstance(e, WriteFailed):
                    raise
                raise WriteFailed(f"cannot write {path} after {trainer.step} steps: "
                                  f"{why_not_written(e, path.parent)}; {trainer._kept()}", e) from None
        if path.name == "latest.pt":
            trainer._latest_saved_at = trainer.step
        if trainer.ddp:
            dist.barrier()
    finally:
        trainer._writing = False
    if trainer._late_signal is not None and path.name != "best.pt":
        # a second signal came during the save, now finished; best.pt is always followed by latest.pt: the stop
        # comes after that one, so that latest.pt holds the step
        raise Interrupted(trainer._late_signal, trainer.step, trainer._latest_saved_at)


def load(trainer, path: str | os.PathLike) -> None:
    """``Trainer.load_checkpoint``: restore a checkpoint that passes its checks and the resume rules."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    try:
        state = open_checkpoint(path)
        check_optimizer_fits(trainer, state)
    except DamagedCheckpoint as e:
        raise ValueError(f"{path} {e}") from None
    restore(trainer, state, path.name)


def resume(trainer) -> None:
    """resume=True: continue from latest.pt; from best.pt, saying so, when latest.pt cannot be trusted; refuse
    when neither can; say so when out_dir holds no checkpoint at all."""
    damaged = []
    for name in ("latest.pt", "best.pt"):
        path = trainer.out_dir / name
        if not path.exists():
            continue
        try:
            state = open_checkpoint(path)
            check_optimizer_fits(trainer, state)
        except DamagedCheckpoint as e:   # a file that fails a check is treated alike, whichever check it fails
            damaged.append(f"{name} {e}")
            continue
        if damaged:
            trainer.note(f"{damaged[0]}; resuming from {name} (step {state['step']}) instead")
        restore(trainer, state, name)
        trainer.resumed_from, trainer.resumed_file = trainer.step, name
        return
    if damaged:
        raise ConfigError(f"cannot resume from {trainer.cfg.out_dir}: {'; '.join(damaged)}; move the files away "
                          "to start afresh")
    trainer.note(f"resume=true, but {trainer.cfg.out_dir} holds no checkpoint: starting from step 0")


def check_optimizer_fits(trainer, state: dict) -> None:
    """What open_checkpoint cannot check alone: that the optimiser state pairs with this trainer's parameters
    (torch's load_state_dict pairs them by position and checks only the counts; a moment of the wrong shape would
    fail at the first step, mid-run). Raises ``DamagedCheckpoint``. A checkpoint of another model or optimiser
    is left to ``check_resume_settings``, which refuses it naming the setting."""
    then = state["config"]
    if then.get("model") != trainer.cfg.model.to_dict() or then.get("optimizer") != trainer.cfg.optimizer:
        return
    saved, live = state["optimizer"]["param_groups"], trainer.optimizer.param_groups
    if [len(g["params"]) for g in saved] != [len(g["params"]) for g in live]:
        raise DamagedCheckpoint(f"has a bad 'optimizer': its parameter groups hold "
                                f"{[len(g['params']) for g in saved]} parameters, this trainer's "
                                f"{[len(g['params']) for g in live]}")
    params = dict(zip((i for g in saved for i in g["params"]), (p for g in live for p in g["params"])))
    kinds = {frozenset(entry) for entry in state["optimizer"]["state"].values()}
    if len(kinds) > 1:
        raise DamagedCheckpoint("has a bad 'optimizer': its parameters hold different kinds of state "
                                f"({' / '.join(sorted(','.join(sorted(k)) for k in kinds))})")
    for i, entry in state["optimizer"]["state"].items():
        for key, value in entry.items():
            if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape != params[i].shape:
                raise DamagedCheckpoint(f"has a bad 'optimizer': its {key} of parameter {i} has shape "
                                        f"{list(value.shape)}, the parameter {list(params[i].shape)}")


def restore(trainer, state: dict, name: str) -> None:
    """Put a checked checkpoint's state into ``trainer``, once the resume rules allow it."""
    check_optimizer_fits(trainer, state)
    check_resume_settings(trainer, state, name)
    keep_precision(trainer, state, name)
    # the checkpoint gives the optimiser's state (moments, step counts); its hyperparameters (lr, betas, eps,
    # weight decay) are this run's, which load_state_dict would otherwise overwrite with the checkpoint's
    hyper = [{k: v for k, v in group.items() if k != "params"} for group in trainer.optimizer.param_groups]
    trainer.raw_model.load_state_dict(state["model"])
    trainer.optimizer.load_state_dict(state["optimizer"])
    for group, settings in zip(trainer.optimizer.param_groups, hyper):
        group.update(settings)
    trainer.step = int(state["step"])
    trainer.best_val = float(state["best_val"])
    trainer.history = state["history"]
    trainer._skips_in_a_row = int(state["skips_in_a_row"])
    trainer._latest_saved_at = trainer.step
    set_rng_state(state["rng"][trainer.rank], trainer.device)


# --------------------------------------------------------------------------------------------- the resume rules
# On resume, these settings must equal the checkpoint's (the reason is the message's); with another value the resumed
# run would silently be another run. Every other setting may change: it applies from the resumed step on (the
# schedule, the optimiser's betas, eps and weight decay, clipping, precision, the cadence of evaluation, checkpoints
# and logs) and the manifest records it under "changed_on_resume". The data are compared by content.
MUST_MATCH_ON_RESUME = {
    "model": "the checkpoint's weights are this model's",
    "seed": "it fixes every step's batches",
    "batch_size": "it fixes every step's batches",
    "grad_accum": "it fixes every step's batches",
    "val_fraction": "it fixes the split into training and validation text",
    "optimizer": "the checkpoint's optimiser state belongs to this optimiser",
    "eval_batches": "best.pt was chosen by validation losses over this many batches",
}


def checkpoint_device(state: dict) -> str | None:
    """The kind of device ("cpu", "cuda") a checkpoint's run trained on: recorded since the trainer keeps it; for an
    earlier checkpoint, "cpu" where no rank holds a CUDA random state (that trainer saved them wherever CUDA was
    available), else unknown (None)."""
    recorded = state.get("resolved", {}).get("device")
    if recorded is not None:
        return recorded
    return "cpu" if not any(rank.get("cuda") for rank in state["rng"]) else None


def _flatten(config: dict) -> dict:
    """{"lr": ..., "model.n_layer": ...}: a config dict with the model's settings as "model.<field>"."""
    flat = {k: v for k, v in config.items() if k != "model"}
    flat.update({f"model.{k}": v for k, v in config.get("model", {}).items()})
    return flat


def check_resume_settings(trainer, state: dict, name: str) -> None:
    """Refuse (one line naming the setting) a resume that would silently be another run; record every other
    changed setting in ``trainer.resume_changes`` (and say so)."""
    if state["world_size"] != trainer.world_size:
        raise ConfigError(f"cannot resume from {name}: it was written by {state['world_size']} rank(s) and this "
                          f"run has {trainer.world_size}; exact resume needs the same world size")
    then, now = _flatten(state["config"]), _flatten(trainer.cfg.to_dict())
    changes = {}
    for key in sorted(set(then) | set(now)):
        old, new = then.get(key), now.get(key)
        # where the run lives is not a setting of the run: a copied or moved folder resumes the same run
        if key in ("resume", "out_dir") or old == new:
            continue
        why = MUST_MATCH_ON_RESUME.get(key.split(".")[0])
        if why is not None:
            raise ConfigError(f"cannot resume from {name}: {key} is {old!r} there and {new!r} here, and a resumed "
                              f"run must keep it ({why}); set it back, or start afresh in another out_dir")
        changes[key] = [old, new]
    if state["data"]["sha256"] != trainer.data.sha256():   # the same text under another path is fine
        raise ConfigError(f"cannot resume from {name}: the data are not the checkpoint's (token sha256 "
                          f"{state['data']['sha256'][:12]}... there, {trainer.data.sha256()[:12]}... here)")
    if trainer.cfg.steps < state["step"]:
        raise ConfigError(f"cannot resume from {name}: it has run {state['step']} steps, more than "
                          f"steps={trainer.cfg.steps}")
    cuda_states = len(state["rng"][trainer.rank].get("cuda") or [])
    if trainer.device.type == "cuda" and cuda_states > torch.cuda.device_count():
        # only a checkpoint of an earlier trainer, which saved every visible GPU's generator, holds several
        raise ConfigError(f"cannot resume from {name}: its rank {trainer.rank} holds the random states of "
                          f"{cuda_states} CUDA GPUs and this machine has {torch.cuda.device_count()}; an exact "
                          f"resume needs the same GPUs: resume where {cuda_states} are visible, or start afresh "
                          "in another out_dir")
    ran_on = checkpoint_device(state)
    if ran_on is not None and ran_on != trainer.device.type:
        # the config may say "auto" both times: the device kind is compared as resolved, and recorded
        changes["resolved.device"] = [ran_on, trainer.device.type]
        trainer.note(f"resuming from {name} on {trainer.device.type} a run that ran on {ran_on} until step "
                     f"{state['step']}: from here on it is not bit-identical to a run that never stopped (other "
                     "kernels, other random generators); an exact resume needs the same kind of device")
    trainer.resume_changes = changes
    if changes:
        trainer.note(f"resuming from {name} with changed settings, applied from step {state['step']} on: "
                     + ", ".join(f"{k} {old!r} -> {new!r}" for k, (old, new) in changes.items()))


def keep_precision(trainer, state: dict, name: str) -> None:
    """precision="auto" keeps what it became at the run's first start (the checkpoint's), so that resuming on
    another machine never changes the numerics without a word; an explicit precision applies as asked (a
    change from the checkpoint's config is recorded like any other)."""
    kept = state.get("resolved", {}).get("precision")
    if kept is None and checkpoint_device(state) == "cpu":
        kept = "fp32"   # a checkpoint of an earlier trainer, from a CPU run: "auto" meant fp32 there
    try:
        precision = resolve_precision(trainer.cfg.precision, trainer.device, kept=kept)
    except ConfigError as e:
        raise ConfigError(f"cannot resume from {name}: {e}") from None
    if trainer.cfg.precision == "auto" and kept is not None:
        fresh = resolve_precision("auto", trainer.device)
        if fresh != kept:
            trainer.note(f"precision auto stays {kept}, what this run has trained in since its first start (a new "
                         f"run here would pick {fresh}); set precision={fresh} to change it from step "
                         f"{state['step']} on (the manifest records the change)")
    trainer.precision = precision
