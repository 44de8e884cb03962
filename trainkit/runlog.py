"""One logger for the course: wandb (offline), TensorBoard, or nothing, behind one call.

    from trainkit.runlog import RunLogger, read_series

    with RunLogger("wandb", dir=tmp, config=cfg) as log:      # or "tensorboard", or "none"
        for step in range(steps):
            ...
            log.log({"train/loss": loss, "lr": lr, "grad_norm": gn}, step=step)
    curves = read_series(log.path)       # {"train/loss": [(0, 2.3), (1, 2.1), ...], ...} read from disk

Conventions (the same for every back end):
- Every value is logged against ``step``, the optimiser step: an int >= 0 that never decreases. Several
  calls with the same step add series to that step (train loss and, every N steps, validation loss).
- Values are stored as Python floats; every back end also keeps them in ``log.history`` (in memory).
- Nothing touches the network. wandb always runs in offline mode (``wandb sync`` later is the user's
  choice) and prints nothing (``silent``, console capture off, no system-metrics sampling).
- Files go under ``dir`` (default: the current directory): wandb writes ``<dir>/wandb/offline-run-*/``,
  TensorBoard ``<dir>/runs/<name>/``. ``log.path`` is that run directory. Both ``wandb/`` and ``runs/``
  are git-ignored; notebooks and tests pass a temporary directory.

Readers, for notebooks and tests that check what really reached the disk:
- ``read_tensorboard(path)``: TensorBoard event files, through tensorboard's ``EventAccumulator``.
- ``read_wandb(path)``: a wandb offline run, through wandb's own reader of its ``.wandb`` transaction
  log (``wandb leet inspect --json``, run in a subprocess).
- ``read_series(path)``: whichever of the two ``path`` holds.
Each returns ``{series name: [(step, value), ...]}`` sorted by step; wandb's own bookkeeping keys
(``_step``, ``_runtime``, ...) are left out.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Mapping

BACKENDS = ("wandb", "tensorboard", "none")
Series = dict[str, list[tuple[int, float]]]


def _as_float(name: str, value) -> float:
    try:
        return float(value)  # Python numbers, NumPy scalars and 0-dim / one-element tensors
    except (TypeError, ValueError):
        raise TypeError(f"log(): {name!r} must be a number, got {type(value).__name__}") from None


class RunLogger:
    """Log scalar series against the optimiser step to wandb (offline), TensorBoard, or memory only.

    backend: "wandb" (default), "tensorboard" or "none".
    dir: where the run's files go (default: the current directory).
    project, name: the wandb project and the run's name (also the TensorBoard sub-directory; default:
        a time stamp and a random suffix, so two runs never share a directory).
    config: a flat or nested dict saved with the run (wandb's config; TensorBoard gets it as a text
        summary "config" in JSON).
    """

    def __init__(self, backend: str = "wandb", dir: str | os.PathLike | None = None, project: str = "trainkit",
                 name: str | None = None, config: Mapping | None = None):
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
        self.backend = backend
        self.dir = Path(dir) if dir is not None else Path.cwd()
        self.name = name or f"{time.strftime('run-%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
        self.config = dict(config or {})
        self.history: Series = {}
        self.path: Path | None = None     # the run's directory on disk (None for "none")
        self.last_step: int | None = None
        self._flushed_step: int | None = None
        self._run = self._writer = None
        self.closed = False
        if backend == "wandb":
            self._open_wandb(project)
        elif backend == "tensorboard":
            self._open_tensorboard()

    def _open_wandb(self, project: str) -> None:
        os.environ["WANDB_MODE"] = "offline"          # also for anything else in this process that reads it
        os.environ.setdefault("WANDB_SILENT", "true")
        os.environ.setdefault("WANDB_ERROR_REPORTING", "false")
        import wandb

        self.dir.mkdir(parents=True, exist_ok=True)
        # x_transaction_log_flush_interval: wandb's service writes the run's .wandb file every 15 s by default, so a
        # crash loses up to 15 s of steps; flush() below waits for the next write, 0.1 s away instead
        settings = wandb.Settings(silent=True, console="off", x_disable_stats=True, x_disable_meta=True,
                                  disable_git=True, save_code=False, x_transaction_log_flush_interval=0.1)
        self._run = wandb.init(mode="offline", dir=str(self.dir), project=project, name=self.name,
                               config=self.config, settings=settings, reinit="create_new")
        self.path = Path(self._run.settings.sync_dir)
        self._wandb_scan = (7, None)    # flush(): where to read the .wandb file on from, the last step found so far

    def _open_tensorboard(self) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.path = self.dir / "runs" / self.name
        self._writer = SummaryWriter(log_dir=str(self.path))
        if self.config:
            self._writer.add_text("config", json.dumps(self.config, sort_keys=True, default=str), 0)

    def log(self, metrics: Mapping[str, float], step: int) -> None:
        """Record every ``name: value`` in ``metrics`` at optimiser step ``step`` (an int >= 0, never
        smaller than the previous call's step)."""
        if self.closed:
            raise RuntimeError("log() after close(): open a new RunLogger")
        if isinstance(step, bool) or not isinstance(step, int) and not hasattr(step, "__index__"):
            raise TypeError(f"step must be an int (the optimiser step), got {type(step).__name__}")
        step = int(step)
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        if self.last_step is not None and step < self.last_step:
            raise ValueError(f"step {step} is smaller than the last logged step {self.last_step}: "
                             "log against the optimiser step, which never goes back")
        if step == self._flushed_step:
            raise ValueError(f"step {step} was flushed: flush() ends a step (wandb drops values logged to a step it "
                             "has written); log at a later step")
        values = {str(k): _as_float(k, v) for k, v in metrics.items()}
        for key, value in values.items():
            self.history.setdefault(key, []).append((step, value))
        if self._run is not None:
            self._run.log(values, step=step)
        elif self._writer is not None:
            for key, value in values.items():
                self._writer.add_scalar(key, value, step, new_style=True, double_precision=True)
        self.last_step = step

    def flush(self, timeout: float = 60.0) -> None:
        """Put everything logged so far on disk, so that a crash (even SIGKILL) after this returns loses none of it.
        It ends the current step: log nothing more at ``last_step`` afterwards (later steps are fine). TensorBoard:
        its writer's flush. wandb (offline): commit the step's row, then wait until the run's .wandb file holds it
        (read back here; ``TimeoutError`` after ``timeout`` seconds)."""
        if self.closed or self.last_step is None:
            return
        self._flushed_step = self.last_step
        if self._writer is not None:
            self._writer.flush()
        elif self._run is not None:
            self._run.log({}, step=self.last_step, commit=True)   # wandb holds a step's row until the next step
            file = self.path / f"run-{self._run.id}.wandb"
            deadline = time.monotonic() + timeout
            while True:
                self._wandb_scan = _scan_wandb_steps(file, *self._wandb_scan)
                if self._wandb_scan[1] is not None and self._wandb_scan[1] >= self.last_step:
                    return
                if time.monotonic() > deadline:
                    raise TimeoutError(f"wandb did not write step {self.last_step} to {file} within {timeout:.0f} s")
                time.sleep(0.02)

    def close(self) -> None:
        """Flush and close the back end (idempotent). The files are complete once this returns."""
        if self.closed:
            return
        self.closed = True
        if self._run is not None:
            self._run.finish()
        if self._writer is not None:
            self._writer.close()

    def __enter__(self) -> "RunLogger":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RunLogger(backend={self.backend!r}, path={str(self.path) if self.path else None!r})"


def _scan_wandb_steps(file: Path, start: int, last: int | None) -> tuple[int, int | None]:
    """Read a wandb transaction log (.wandb) on from byte ``start`` (where a record begins); return where the
    records read end and the last history step seen (``last`` if none). The file is LevelDB's log format after a
    7-byte header: 32 KiB blocks of chunks, each a 7-byte header (CRC, length, type: 1 whole record, 2 first
    piece, 3 middle, 4 last) and its bytes; a block's last < 7 bytes are padding. Only complete records count."""
    from wandb.proto import wandb_internal_pb2 as pb

    block = 32 * 1024
    with open(file, "rb") as f:
        f.seek(start)
        data = f.read()
    pos, pieces, record_start = start, [], start
    while True:
        if block - pos % block < 7:                       # padding at the end of a block
            pos += block - pos % block
            continue
        i = pos - start
        if i + 7 > len(data):
            break
        length, kind = int.from_bytes(data[i + 4:i + 6], "little"), data[i + 6]
        if kind == 0 or i + 7 + length > len(data):     # not written yet
            break
        pieces.append(data[i + 7:i + 7 + length])
        pos += 7 + length
        if kind in (1, 4):                                # a record is complete
            record = pb.Record.FromString(b"".join(pieces))
            pieces, record_start = [], pos
            if record.WhichOneof("record_type") == "history":
                last = record.history.step.num
    return record_start, last


def _sorted(series: Series) -> Series:
    return {k: sorted(v, key=lambda sv: sv[0]) for k, v in sorted(series.items())}


def read_tensorboard(path: str | os.PathLike) -> Series:
    """Every scalar series in the TensorBoard event files under ``path`` (a run's log directory)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util import tensor_util

    path = Path(path)
    if not any(path.glob("events.out.tfevents.*")):
        raise FileNotFoundError(f"no TensorBoard event file in {path}")
    acc = EventAccumulator(str(path), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    tags = acc.Tags()
    out: Series = {}
    for tag in tags.get("scalars", []):                 # old-style float32 scalars (add_scalar's default)
        out[tag] = [(int(e.step), float(e.value)) for e in acc.Scalars(tag)]
    for tag in tags.get("tensors", []):                 # new-style scalars (what RunLogger writes: float64)
        events = acc.Tensors(tag)
        values = [tensor_util.make_ndarray(e.tensor_proto) for e in events]
        if all(v.ndim == 0 and v.dtype.kind == "f" for v in values):
            out[tag] = [(int(e.step), float(v)) for e, v in zip(events, values)]
    return _sorted(out)


def _wandb_file(path: Path) -> Path:
    if path.is_file() and path.suffix == ".wandb":
        return path
    found = sorted(path.glob("run-*.wandb")) if path.is_dir() else []
    if len(found) != 1:
        raise FileNotFoundError(f"expected one run-*.wandb file in {path}, found {len(found)}")
    return found[0]


def wandb_records(path: str | os.PathLike) -> list[dict]:
    """The records of a wandb offline run (its ``.wandb`` file, or the run directory holding it), as dicts,
    decoded by wandb's own reader (``wandb leet inspect --json``)."""
    file = _wandb_file(Path(path))
    env = dict(os.environ, WANDB_MODE="offline", WANDB_SILENT="true", WANDB_ERROR_REPORTING="false")
    done = subprocess.run([sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(file)],
                          capture_output=True, text=True, env=env, cwd=file.parent, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"wandb could not read {file}: {done.stderr.strip() or done.stdout.strip()}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def _number(value) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and value in {"NaN", "Infinity", "-Infinity", "nan", "inf", "-inf"}:
        return float(value.replace("Infinity", "inf"))
    return None


def read_wandb(path: str | os.PathLike) -> Series:
    """Every numeric series of a wandb offline run (the run directory or its ``.wandb`` file)."""
    out: Series = {}
    for record in wandb_records(path):
        if record.get("type") != "history":
            continue
        history = record["history"]
        item = history.get("item", {})
        step = int(history.get("step", {}).get("num", item.get("_step", 0)))
        for key, value in item.items():
            number = _number(value)
            if key.startswith("_") or number is None:
                continue
            out.setdefault(key, []).append((step, number))
    return _sorted(out)


def read_wandb_config(path: str | os.PathLike) -> dict:
    """The config saved with a wandb offline run (wandb's own ``_wandb`` entry left out)."""
    config: dict = {}
    for record in wandb_records(path):
        update = None
        if record.get("type") == "run":
            update = record["run"].get("config", {}).get("update")
        elif record.get("type") == "config":
            update = record["config"].get("update")
        if update:
            config.update({k: v for k, v in update.items() if k != "_wandb"})
    return config


def read_series(path: str | os.PathLike) -> Series:
    """Read back a run written by ``RunLogger``: a wandb run directory (or .wandb file) or a TensorBoard
    log directory."""
    path = Path(path)
    if path.suffix == ".wandb" or (path.is_dir() and any(path.glob("run-*.wandb"))):
        return read_wandb(path)
    return read_tensorboard(path)


def same_series(a: Series, b: Series, rel_tol: float = 0.0) -> bool:
    """True if two read-backs hold the same series at the same steps (values within ``rel_tol``)."""
    if set(a) != set(b):
        return False
    for key in a:
        if [s for s, _ in a[key]] != [s for s, _ in b[key]]:
            return False
        if not all(math.isclose(x, y, rel_tol=rel_tol) or (math.isnan(x) and math.isnan(y))
                   for (_, x), (_, y) in zip(a[key], b[key])):
            return False
    return True
