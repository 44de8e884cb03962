"""The files of a run folder (``out_dir``): how the trainer writes them so that no crash ruins them, and how it checks
what it reads back.

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
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from trainkit.gpt import GPT, GPTConfig
from trainkit.train_config import ConfigError, TrainConfig

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
    """One rank's random states (what ``trainkit.train._rng_state`` saves), tried on throwaway generators."""
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
