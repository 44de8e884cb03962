"""The course's logger (trainkit.runlog): one call, three back ends, read back from disk, no network."""
from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from trainkit.runlog import RunLogger, read_series, read_tensorboard, read_wandb, read_wandb_config, same_series

ROOT = Path(__file__).resolve().parents[1]


def write_run(logger: RunLogger, steps: int = 12) -> None:
    for step in range(steps):
        logger.log({"train/loss": 2.0 / (step + 1), "lr": 1e-3 * step / 7, "grad_norm": torch.tensor(0.5 + step)},
                   step=step)
        if step % 4 == 3:
            logger.log({"val/loss": 3.0 / (step + 1)}, step=step)     # a second call at the same step


def expected(steps: int = 12) -> dict[str, list[tuple[int, float]]]:
    return {"train/loss": [(s, 2.0 / (s + 1)) for s in range(steps)],
            "lr": [(s, 1e-3 * s / 7) for s in range(steps)],
            "grad_norm": [(s, 0.5 + s) for s in range(steps)],
            "val/loss": [(s, 3.0 / (s + 1)) for s in range(steps) if s % 4 == 3]}


@pytest.mark.parametrize("backend", ["wandb", "tensorboard"])
def test_each_backend_writes_what_was_logged_exactly(backend, tmp_path):
    with RunLogger(backend, dir=tmp_path, config={"seed": 3, "model": {"d": 8}}) as log:
        write_run(log)
    assert log.path is not None and log.path.is_dir() and tmp_path in log.path.parents
    want = expected()
    assert same_series(log.history, want), log.history
    back = read_series(log.path)
    assert same_series(back, want), f"{backend} read back {back}"   # float64 all the way: bit for bit
    reader = read_wandb if backend == "wandb" else read_tensorboard
    assert same_series(reader(log.path), want)


def test_wandb_config_and_file_reader(tmp_path):
    with RunLogger("wandb", dir=tmp_path, name="cfg-run", config={"seed": 3, "model": {"d": 8}}) as log:
        log.log({"x": 1.0}, step=0)
    assert read_wandb_config(log.path) == {"seed": 3, "model": {"d": 8}}
    (wandb_file,) = log.path.glob("run-*.wandb")
    assert read_wandb(wandb_file) == {"x": [(0, 1.0)]}
    assert log.path.parent == tmp_path / "wandb"


def test_none_backend_keeps_history_in_memory_only(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with RunLogger("none") as log:
        write_run(log)
    assert log.path is None and same_series(log.history, expected())
    assert list(tmp_path.iterdir()) == [], "the 'none' back end must not write files"


def test_non_finite_values_survive_the_round_trip(tmp_path):
    for backend in ["wandb", "tensorboard"]:
        with RunLogger(backend, dir=tmp_path) as log:
            log.log({"loss": math.nan, "g": math.inf}, step=0)
            log.log({"loss": 1.0, "g": -math.inf}, step=1)
        back = read_series(log.path)
        assert math.isnan(back["loss"][0][1]) and back["loss"][1] == (1, 1.0), (backend, back)
        assert back["g"] == [(0, math.inf), (1, -math.inf)], (backend, back)


def test_bad_input_is_refused_with_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="backend"):
        RunLogger("mlflow")
    log = RunLogger("none")
    log.log({"a": 1.0}, step=5)
    log.log({"b": 1.0}, step=5)                        # the same step again is fine
    with pytest.raises(ValueError, match="smaller than the last"):
        log.log({"a": 1.0}, step=4)
    with pytest.raises(ValueError, match=">= 0"):
        RunLogger("none").log({"a": 1.0}, step=-1)
    with pytest.raises(TypeError, match="step must be an int"):
        log.log({"a": 1.0}, step=5.0)
    with pytest.raises(TypeError, match="must be a number"):
        log.log({"a": "high"}, step=6)
    log.log({"a": 2.0}, step=torch.tensor(6))         # an integer tensor is an int
    log.close()
    log.close()                                        # idempotent
    with pytest.raises(RuntimeError, match="after close"):
        log.log({"a": 1.0}, step=7)


def test_two_runs_in_one_process_do_not_share_a_directory(tmp_path):
    paths = []
    for backend in ["tensorboard", "tensorboard", "wandb", "wandb"]:
        with RunLogger(backend, dir=tmp_path) as log:
            log.log({"a": float(len(paths))}, step=0)
        paths.append(log.path)
    assert len(set(paths)) == 4
    assert [read_series(p)["a"] for p in paths] == [[(0, float(i))] for i in range(4)]


SCRIPT = textwrap.dedent("""
    import socket, sys
    from trainkit.runlog import RunLogger, read_series
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(2)
    offline = s.connect_ex(("93.184.215.14", 443)) != 0           # any outside address
    s.close()
    out = {}
    for backend in ["wandb", "tensorboard"]:
        with RunLogger(backend, dir=sys.argv[1], config={"seed": 0}) as log:
            for step in range(5):
                log.log({"loss": 1.0 / (step + 1), "lr": 0.1 * step}, step=step)
        out[backend] = read_series(log.path)
    print(offline, out["wandb"] == out["tensorboard"] == log.history)
""")


def run_script(tmp_path: Path, prefix: list[str]) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("WANDB_MODE", None)                          # the logger must choose offline mode by itself
    return subprocess.run([*prefix, sys.executable, "-c", SCRIPT, str(tmp_path / "logs")], cwd=tmp_path,
                          capture_output=True, text=True, env=env, timeout=300)


def test_the_logger_prints_nothing_and_writes_only_under_its_dir(tmp_path):
    done = run_script(tmp_path, [])
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("True"), done.stdout
    assert done.stderr == "", f"the logger wrote to stderr: {done.stderr!r}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["logs"], "files were written outside dir"


def test_the_logger_works_with_the_network_unavailable(tmp_path):
    """Run in a new network namespace (only a loopback device, down): nothing outside can be reached."""
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("`unshare` (util-linux) is not installed: cannot take the network away from a process")
    for flags in (["-n"], ["-rn"]):                       # -n as root; -rn maps an unprivileged user to root
        probe = subprocess.run([unshare, *flags, "true"], capture_output=True)
        if probe.returncode == 0:
            break
    else:
        pytest.skip("this machine does not allow new network namespaces (unshare -n / -rn failed: "
                    f"{probe.stderr.decode(errors='replace').strip()})")
    done = run_script(tmp_path, [unshare, *flags])
    assert done.returncode == 0, done.stderr
    offline, same = done.stdout.split()[-2:]
    assert offline == "True", "the namespace still reached the network: the test proves nothing"
    assert same == "True", f"wandb and TensorBoard read back differently without a network: {done.stdout}"
    assert done.stderr == "", done.stderr


@pytest.mark.parametrize("backend", ["wandb", "tensorboard"])
def test_flush_puts_every_logged_step_on_disk_before_a_kill(backend, tmp_path):
    """What the trainer relies on before each checkpoint: after flush() returns, a SIGKILL loses nothing logged so
    far. (Without it wandb offline writes its file every 15 s and loses the steps since; the trainer lost 37-48.)"""
    script = textwrap.dedent(f"""
        import os, signal
        from trainkit.runlog import RunLogger
        log = RunLogger({backend!r}, dir={str(tmp_path)!r})
        print(log.path, flush=True)
        for step in range(150):
            log.log({{"train/loss": 1.0 / (step + 1)}}, step=step)
        log.flush()
        os.kill(os.getpid(), signal.SIGKILL)     # without the flush: wandb loses the last step, TensorBoard a few
    """)
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == -9, done.stderr
    steps = [s for s, _ in read_series(done.stdout.strip())["train/loss"]]
    assert steps == list(range(150)), f"{backend}: steps on disk after flush() and a kill: {steps[:3]}..{steps[-3:]}"


def test_flush_ends_the_step(tmp_path):
    """wandb drops values logged to a step it has written; every back end refuses them instead, so no run differs."""
    with RunLogger("none", dir=tmp_path) as log:
        log.flush()                                   # nothing logged yet: a no-op
        log.log({"train/loss": 1.0}, step=3)
        log.flush()
        with pytest.raises(ValueError, match="step 3 was flushed: flush\\(\\) ends a step"):
            log.log({"val/loss": 2.0}, step=3)
        log.log({"train/loss": 0.5}, step=4)          # later steps are fine
    assert log.history == {"train/loss": [(3, 1.0), (4, 0.5)]}
