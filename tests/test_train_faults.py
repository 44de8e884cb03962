"""The capstone trainer (trainkit.train) under faults and bad input, as an operator meets them: what a resume may
change and what it refuses, damaged checkpoints (fallback to best.pt, or a refusal), lasting non-finite values (the
run stops, no ruined checkpoint), a second run in the same folder, SIGTERM / SIGINT, the manifest's history,
temporaries of killed runs, the command line's one-line errors, and resuming on another machine (fewer GPUs, a GPU
after a CPU: CUDA stood in for where a CPU cannot run it). Where a fault is survived, the proof is the one
trusted trainers use: the resumed run's losses are bit-identical to a run that never stopped. Micro configurations:
a second or two each."""
from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from trainkit.checkpoint import DamagedCheckpoint, open_checkpoint, seal
from trainkit.gpt import GPTConfig
from trainkit.train import (ConfigError, Interrupted, Trainer, TrainConfig, TrainingStopped, main,
                            resolve_precision)

ROOT = Path(__file__).resolve().parents[1]
MICRO_MODEL = dict(vocab_size=256, block_size=32, n_layer=1, d_model=32, n_heads_q=2, n_heads_kv=1, d_ff=64)


def micro(out_dir, **kw) -> TrainConfig:
    base = dict(model=GPTConfig(**MICRO_MODEL, dropout=0.1), steps=8, batch_size=4, lr=3e-3, warmup=2, eval_every=4,
                eval_batches=2, logger="none", progress=False, out_dir=str(out_dir), device="cpu")
    return TrainConfig(**{**base, **kw})


def run(cfg: TrainConfig, steps=None, cls=Trainer) -> dict:
    with cls(cfg) as trainer:
        return trainer.fit(steps=steps)


def run_env() -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", WANDB_MODE="offline", TRAINKIT_FORCE_CPU="1")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


@pytest.fixture(scope="module")
def straight(tmp_path_factory) -> dict:
    """The uninterrupted run every survived fault is compared with."""
    return run(micro(tmp_path_factory.mktemp("straight")))


def assert_same_run(history: dict, straight: dict, what: str) -> None:
    assert history["step"] == list(range(8)), what
    for key in ("loss", "grad_norm", "lr", "val_loss"):
        assert history[key] == straight[key], f"{what}: {key} differs from the uninterrupted run"


def one_error_line(capsys, code_expected, argv) -> str:
    assert main(argv) == code_expected
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err.strip()


# ------------------------------------------------------------------------------------ 1. settings on resume
@pytest.fixture(scope="module")
def stopped_at_4(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("stopped")
    run(micro(out), steps=4)
    return out


@pytest.mark.parametrize("change, key", [
    (dict(seed=1), "seed"), (dict(batch_size=2), "batch_size"), (dict(grad_accum=2), "grad_accum"),
    (dict(val_fraction=0.2), "val_fraction"), (dict(optimizer="lion"), "optimizer"),
    (dict(eval_batches=3), "eval_batches"), (dict(model=GPTConfig(**MICRO_MODEL, dropout=0.0)), "model.dropout"),
])
def test_resume_refuses_a_setting_that_makes_another_run(stopped_at_4, change, key):
    with pytest.raises(ConfigError) as e:
        Trainer(micro(stopped_at_4, resume=True, **change))
    message = str(e.value)
    assert re.match(rf"cannot resume from latest.pt: {re.escape(key)} is .+ there and .+ here, and a resumed run must "
                    r"keep it \(.+\); set it back, or start afresh in another out_dir$", message), message
    assert open_checkpoint(stopped_at_4 / "latest.pt")["step"] == 4, "a refused resume must not touch the checkpoint"


def test_resume_refuses_other_data_and_fewer_steps(stopped_at_4, tmp_path, capsys):
    other = tmp_path / "other.txt"
    other.write_text("def f(x):\n    return x + 1\n" * 400)
    with pytest.raises(ConfigError, match=r"cannot resume from latest.pt: the data are not the checkpoint's \(token "):
        Trainer(micro(stopped_at_4, resume=True, data=str(other)))
    with pytest.raises(ConfigError, match=r"cannot resume from latest.pt: it has run 4 steps, more than steps=3"):
        Trainer(micro(stopped_at_4, resume=True, steps=3, warmup=1))
    config = tmp_path / "c.json"
    config.write_text(json.dumps(micro(stopped_at_4).to_dict()))
    line = one_error_line(capsys, 2, ["--config", str(config), "--set", "resume=true", "--set", "seed=7"])
    assert line.startswith("error: cannot resume from latest.pt: seed is 0 there and 7 here"), line


def test_resume_applies_changed_optimizer_settings_everywhere(tmp_path):
    """weight_decay, betas and eps changed on resume act exactly as if a live run had changed them at that step (the
    checkpoint's optimiser state used to overwrite them silently), and the manifest records the change."""
    changed = dict(weight_decay=0.0, betas=(0.8, 0.9), eps=1e-6)
    live = Trainer(micro(tmp_path / "live"))
    live.fit(steps=4)
    decay, no_decay = live.optimizer.param_groups
    decay.update(weight_decay=0.0, betas=(0.8, 0.9), eps=1e-6)
    no_decay.update(betas=(0.8, 0.9), eps=1e-6)
    want = live.fit()
    live.close()

    run(micro(tmp_path / "resumed"), steps=4)
    resumed = Trainer(micro(tmp_path / "resumed", resume=True, **changed))
    assert [g["weight_decay"] for g in resumed.optimizer.param_groups] == [0.0, 0.0]
    assert all(g["betas"] == (0.8, 0.9) and g["eps"] == 1e-6 for g in resumed.optimizer.param_groups)
    assert resumed.resume_changes == {"weight_decay": [0.1, 0.0], "betas": [[0.9, 0.95], [0.8, 0.9]],
                                      "eps": [1e-8, 1e-6]}
    assert any(n.startswith("resuming from latest.pt with changed settings, applied from step 4 on: ")
               for n in resumed.notes)
    got = resumed.fit()
    resumed.close()
    for key in ("loss", "grad_norm", "val_loss"):
        assert got[key] == want[key], f"{key}: a change on resume must equal the same change in a live run"
    manifest = json.loads((tmp_path / "resumed" / "manifest.json").read_text())
    assert manifest["changed_on_resume"]["weight_decay"] == [0.1, 0.0]
    assert manifest["config"]["weight_decay"] == 0.0


def test_resume_with_the_same_settings_stays_exact(tmp_path, straight):
    """Restoring the optimiser's hyperparameters from the config must not disturb an unchanged resume."""
    run(micro(tmp_path), steps=3)
    with Trainer(micro(tmp_path, resume=True)) as trainer:
        assert trainer.resume_changes == {} and trainer.resumed_file == "latest.pt"
        assert_same_run(trainer.fit(), straight, "resume at 3")


# ------------------------------------------------------------------------------------ 2. damaged checkpoints
def flip_a_weight_bit(path: Path) -> None:
    """Flip one bit inside a stored weight (not in the zip's bookkeeping): torch.load reads the file silently."""
    state = torch.load(path, weights_only=False)
    weight = state["model"]["transformer.wte.weight"]
    needle = weight.reshape(-1)[:8].numpy().tobytes()
    data = bytearray(path.read_bytes())
    at = data.find(needle)
    assert at > 0, "the weight's bytes were not found in the file"
    data[at + 2] ^= 0x10
    path.write_bytes(bytes(data))
    torch.load(path, weights_only=False)   # loads without a word: only the checksum can tell


def not_a_dict(path: Path) -> None:
    torch.save([1, 2, 3], path)


def lacks_a_key(path: Path) -> None:
    state = torch.load(path, weights_only=False)
    del state["optimizer"]
    torch.save(state, path)


def nan_weights(path: Path) -> None:
    from trainkit.checkpoint import seal

    state = torch.load(path, weights_only=False)
    state.pop("checksum")
    state["model"]["transformer.wte.weight"][0, 0] = math.nan
    torch.save(seal(state), path)   # a correct checksum: the NaN itself must be refused


DAMAGE = {
    "truncated": (lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]), "cannot be read"),
    "empty": (lambda p: p.write_bytes(b""), "cannot be read"),
    "garbage": (lambda p: p.write_bytes(bytes(range(256)) * 16), "cannot be read"),
    "flipped bit": (flip_a_weight_bit, "fails its checksum"),
    "not a dict": (not_a_dict, "is not a checkpoint (it holds a list, not a dict)"),
    "lacks a key": (lacks_a_key, "lacks optimizer"),
    "NaN weights": (nan_weights, "holds a non-finite value in model.transformer.wte.weight"),
}


@pytest.fixture(scope="module")
def stopped_at_6(tmp_path_factory) -> Path:
    """best.pt after 4 steps (the first evaluation), latest.pt after 6 (save_every=2)."""
    out = tmp_path_factory.mktemp("stopped6")
    run(micro(out, save_every=2), steps=6)
    assert open_checkpoint(out / "best.pt")["step"] == 4 and open_checkpoint(out / "latest.pt")["step"] == 6
    return out


def copy_run(src: Path, dst: Path) -> Path:
    dst.mkdir()
    for name in ("latest.pt", "best.pt", "manifest.json"):
        (dst / name).write_bytes((src / name).read_bytes())
    return dst


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_damaged_latest_falls_back_to_best(stopped_at_6, tmp_path, damage, straight, capsys):
    out = copy_run(stopped_at_6, tmp_path / "run")
    harm, reason = DAMAGE[damage]
    harm(out / "latest.pt")
    with pytest.raises(DamagedCheckpoint, match=re.escape(reason)):
        open_checkpoint(out / "latest.pt")
    with Trainer(micro(out, save_every=2, resume=True)) as trainer:
        assert trainer.resumed_file == "best.pt" and trainer.step == 4
        note = f"latest.pt {reason}"
        assert any(n.startswith(note) and n.endswith("; resuming from best.pt (step 4) instead") for n in trainer.notes)
        assert capsys.readouterr().out.count("note: latest.pt ") == 1, "the fallback is said in one line"
        if damage == "flipped bit":   # the redone steps 4..5 and the rest are the uninterrupted run's
            assert_same_run(trainer.fit(), straight, "resumed from best.pt")


def test_no_trustworthy_checkpoint_refuses_in_one_line(stopped_at_6, tmp_path, capsys):
    out = copy_run(stopped_at_6, tmp_path / "run")
    flip_a_weight_bit(out / "latest.pt")
    (out / "best.pt").write_bytes(b"")
    config = tmp_path / "c.json"
    config.write_text(json.dumps(micro(out, save_every=2).to_dict()))
    line = one_error_line(capsys, 2, ["--config", str(config), "--set", "resume=true"])
    assert line == (f"error: cannot resume from {out}: latest.pt fails its checksum (its contents changed after it was "
                    "written); best.pt cannot be read (EOFError: empty or truncated); move the files away to start "
                    "afresh"), line
    with pytest.raises(ValueError, match="fails its checksum"):   # the Python API says the same
        Trainer(micro(tmp_path / "fresh")).load_checkpoint(out / "latest.pt")


# ------------------------------------------------------------------------------------ 3. lasting non-finite values
class PoisonWeightAt(Trainer):
    """A NaN written into a weight after step `at`'s gradients: from then on every gradient is NaN."""
    at = 2

    def before_clip(self, step):
        if step == self.at:
            with torch.no_grad():
                self.raw_model.transformer.wte.weight[0, 0] = math.nan


def test_a_nan_weight_stops_the_run_and_keeps_the_finite_checkpoint(tmp_path):
    trainer = PoisonWeightAt(micro(tmp_path, eval_every=100, max_consecutive_skips=3))
    trainer.fit(steps=2)                                        # latest.pt: 2 steps, finite
    with pytest.raises(TrainingStopped) as e:
        trainer.fit()
    trainer.close()
    assert trainer.history["skipped"] == [False, False, False, True, True, True]
    assert str(e.value) == ("stopping after step 5: the last 3 steps (3..5) were all skipped (non-finite gradient "
                            "norm, max_consecutive_skips=3), so a weight or the optimiser state is not finite or a "
                            "setting makes it so; latest.pt keeps step 2, the last finite state")
    assert open_checkpoint(tmp_path / "latest.pt")["step"] == 2


class PoisonMomentAt(Trainer):
    def before_clip(self, step):
        if step == 3:
            state = self.optimizer.state[self.raw_model.transformer.wte.weight]
            state["exp_avg_sq"][0, 0] = math.nan


def test_no_checkpoint_is_written_with_non_finite_state(tmp_path, straight):
    """A NaN in the optimiser state (the weights turn NaN at the next update): the evaluation's checkpoint is refused,
    latest.pt and best.pt keep step 2's state, and resuming from them is the uninterrupted run."""
    cfg = micro(tmp_path, save_every=2)
    with pytest.raises(TrainingStopped, match=r"^not writing latest.pt after 4 steps: model\.transformer\.wte\.weight "
                                              r"is not finite; latest.pt on disk keeps its last finite state$"):
        run(cfg, cls=PoisonMomentAt)
    assert open_checkpoint(tmp_path / "latest.pt")["step"] == 2
    with Trainer(micro(tmp_path, save_every=2, resume=True)) as trainer:
        assert_same_run(trainer.fit(), straight, "resumed after the refused checkpoint")


def test_cli_huge_weight_decay_stops_with_exit_3(tmp_path, capsys):
    config = tmp_path / "c.json"
    config.write_text(json.dumps(micro(tmp_path, weight_decay=1e30).to_dict()))
    line = one_error_line(capsys, 3, ["--config", str(config)])
    assert re.fullmatch(r"error: not writing latest.pt after 4 steps: model\..+ is not finite; no file was written",
                        line), line
    assert not (tmp_path / "latest.pt").exists() and not (tmp_path / "best.pt").exists()


# ------------------------------------------------------------------------------------ 4. one run per out_dir
def flock_free(folder: Path) -> bool:
    """Whether another process could lock `folder` now."""
    probe = ("import fcntl, os, sys\nfd = os.open(sys.argv[1], os.O_RDONLY)\n"
             "try:\n    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\nexcept BlockingIOError:\n    sys.exit(1)")
    return subprocess.run([sys.executable, "-c", probe, str(folder)], timeout=60).returncode == 0


def test_a_second_run_in_the_same_out_dir_refuses(tmp_path):
    first = Trainer(micro(tmp_path))
    first.fit(steps=2)
    again = Trainer(micro(tmp_path))    # the same process may build another (lab notebooks do)
    assert not flock_free(tmp_path)
    manifest, latest = (tmp_path / "manifest.json").read_bytes(), (tmp_path / "latest.pt").read_bytes()
    config = tmp_path / "c.json"
    config.write_text(json.dumps(micro(tmp_path).to_dict()))
    done = subprocess.run([sys.executable, "-m", "trainkit.train", "--config", str(config)], capture_output=True,
                          text=True, env=run_env(), cwd=tmp_path, timeout=300)
    assert done.returncode == 2 and done.stderr == (
        f"error: out_dir {str(tmp_path)!r} is in use by another run (it holds the folder's lock); wait for it to end "
        "or choose another out_dir\n"), done.stderr
    assert (tmp_path / "manifest.json").read_bytes() == manifest and (tmp_path / "latest.pt").read_bytes() == latest
    first.close()
    assert not flock_free(tmp_path), "the other Trainer of this process still holds it"
    again.close()
    assert flock_free(tmp_path), "closing the last Trainer lets go of the folder"


# ------------------------------------------------------------------------------------ 5. logs flushed first
def test_the_logger_is_flushed_before_every_checkpoint(tmp_path):
    """What a checkpoint covers is in the log on disk before the checkpoint exists (RunLogger.flush puts it there:
    tests/test_runlog.py kills a process after a flush, for both back ends)."""
    from trainkit.runlog import RunLogger

    seen = []

    class Spy(RunLogger):
        def flush(self, timeout=60.0):
            latest = tmp_path / "run" / "latest.pt"
            seen.append((self.last_step, open_checkpoint(latest)["step"] if latest.exists() else None))
            super().flush(timeout)

    with Spy("none", dir=tmp_path) as log:
        with Trainer(micro(tmp_path / "run", steps=6, save_every=1, eval_every=3), logger=log) as trainer:
            trainer.fit()
    # best.pt and latest.pt after each evaluation (steps 2 and 5), latest.pt after every other step
    assert [s for s, _ in seen] == [0, 1, 2, 2, 3, 4, 5, 5] or [s for s, _ in seen] == [0, 1, 2, 2, 3, 4, 5], seen
    assert all(on_disk is None or on_disk <= step for step, on_disk in seen), "a checkpoint came before its flush"


# ------------------------------------------------------------------------------------ 6. manifest history
def test_manifest_keeps_every_start(tmp_path, capsys):
    config = tmp_path / "c.json"
    config.write_text(json.dumps(micro(tmp_path).to_dict()))
    assert main(["--config", str(config), "--stop-at", "2"]) == 0
    assert main(["--config", str(config), "--set", "resume=true", "--set", "lr=1e-3", "--stop-at", "5"]) == 0
    assert main(["--config", str(config), "--set", "resume=true", "--set", "lr=1e-3"]) == 0
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    starts = manifest["previous_starts"] + [manifest]
    assert [s["resumed_from_step"] for s in starts] == [None, 2, 5]
    assert [s["config"]["lr"] for s in starts] == [3e-3, 1e-3, 1e-3]
    assert [s["changed_on_resume"] for s in starts] == [{}, {"lr": [3e-3, 1e-3]}, {}]
    assert all("previous_starts" not in s for s in manifest["previous_starts"])
    # what else a start records: library versions and the command line
    assert set(manifest["versions"]) == {"numpy", "wandb", "tensorboard", "lion-pytorch"}
    import numpy
    assert manifest["versions"]["numpy"] == numpy.__version__
    assert isinstance(manifest["command"], list) and manifest["out_dir_lock"] == "held"


# ------------------------------------------------------------------------------------ 7. one line, exit 2
def _read_only_folder(tmp_path: Path) -> Path:
    if os.geteuid() != 0:
        folder = tmp_path / "ro"
        folder.mkdir()
        folder.chmod(0o555)
        return folder
    for candidate in (Path("/sys/kernel"), Path("/proc/self")):   # root ignores permissions, not a read-only mount
        if candidate.is_dir() and not os.access(candidate, os.W_OK):
            return candidate
        if candidate.is_dir():
            try:
                import tempfile
                with tempfile.TemporaryFile(dir=candidate):
                    pass
            except OSError:
                return candidate
    pytest.skip("no read-only folder on this machine for root")


@pytest.mark.parametrize("args, message", [
    (["--set", "out_dir=5"], "out_dir must be a folder path (a non-empty string), got 5"),
    (["--set", "out_dir=true"], "out_dir must be a folder path (a non-empty string), got True"),
    (["--set", "out_dir="], "out_dir must be a folder path (a non-empty string), got ''"),
    (["--set", "out_dir=a_file"], "out_dir 'a_file' is a file, not a folder"),
    (["--set", "out_dir=a_file/sub"], "out_dir 'a_file/sub' is inside a file, not a folder"),
    (["--set", "steps=1000000000"], "steps must be at most 1_000_000 (the schedule is tabulated up front), got "
                                    "1_000_000_000"),
    (["--set", "model.tie_weights=maybe"], "model.tie_weights must be true or false, got 'maybe'"),
    (["--set", "model.tie_weights=0"], "model.tie_weights must be true or false, got 0"),
    (["--set", "model.tie_weights=null"], "model.tie_weights must be true or false, got None"),
    (["--set", "model.dropout=false"], "model.dropout must be a number, got False"),
    (["--set", "model.dropout=null"], "model.dropout must be a number, got None"),
    (["--set", "eps=inf"], "eps must be a finite number > 0, got inf"),
    (["--set", "weight_decay=inf"], "weight_decay must be a finite number >= 0, got inf"),
    (["--set", "seed=18446744073709551616"], "seed must be below 2**64 (torch.manual_seed takes 64 bits), got "
                                             "18446744073709551616"),
    (["--set", "seed=-1"], "seed must be an int >= 0, got -1"),
    (["--set", "max_consecutive_skips=0"], "max_consecutive_skips must be an int >= 1, got 0"),
    (["--set", "model.d_model=1048576"], "the model is too large: "),
])
def test_cli_bad_settings_are_one_line_exit_2(args, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a_file").write_text("not a folder")
    line = one_error_line(capsys, 2, ["--config", "tiny", "--set", "logger=none", *args])
    assert line == f"error: {message}" or message.endswith(": ") and line.startswith(f"error: {message}"), line
    assert not (tmp_path / "runs").exists()


def test_cli_read_only_out_dir_is_one_line(capsys, tmp_path):
    folder = _read_only_folder(tmp_path)
    line = one_error_line(capsys, 2, ["--config", "tiny", "--set", "logger=none", "--set", f"out_dir={folder}"])
    assert re.fullmatch(rf"error: out_dir {re.escape(repr(str(folder)))} is not writable: .+", line), line


def test_the_largest_seed_trains(tmp_path):
    assert len(run(micro(tmp_path, seed=2 ** 64 - 1, steps=2, warmup=1))["loss"]) == 2


def test_resume_without_a_checkpoint_says_so(tmp_path, capsys):
    config = tmp_path / "c.json"
    config.write_text(json.dumps(micro(tmp_path / "empty", steps=2, warmup=1).to_dict()))
    assert main(["--config", str(config), "--set", "resume=true"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"note: resume=true, but {tmp_path / 'empty'} holds no checkpoint: starting from step 0", out
    assert out[-1].startswith("done: ran steps 0..1 ")


def test_manifest_write_failure_is_one_line_and_leaves_no_temporary(tmp_path):
    """A file-size limit hit while writing the manifest (RLIMIT_FSIZE: a real EFBIG from the kernel)."""
    import resource

    config = tmp_path / "c.json"
    config.write_text(json.dumps(micro(tmp_path / "run").to_dict()))

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048))   # the manifest is ~4 KB, the config < 1 KB

    done = subprocess.run([sys.executable, "-m", "trainkit.train", "--config", str(config)], capture_output=True,
                          text=True, env=run_env(), cwd=tmp_path, timeout=300, preexec_fn=small_files)
    assert done.returncode == 2, done.stderr
    assert done.stderr == f"error: cannot write {tmp_path / 'run' / 'manifest.json'}: File too large\n", done.stderr
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [], "a temporary or a torn manifest was left"


# ------------------------------------------------------------------------------------ 8. kills and signals
def test_a_killed_write_leaves_a_temporary_that_the_next_run_removes(tmp_path, capsys):
    script = f"""
import os, signal, torch, trainkit.checkpoint as c
def dying_save(obj, f, *a, **k):
    f.write(b"PK partial" * 1000); f.flush(); os.kill(os.getpid(), signal.SIGKILL)
torch.save = dying_save
c.atomic_save({{"step": 2}}, {str(tmp_path / 'latest.pt')!r})
"""
    done = subprocess.run([sys.executable, "-c", script], env=run_env(), capture_output=True, timeout=120)
    assert done.returncode == -9, done.stderr
    (stale,) = tmp_path.glob(".latest.pt.tmp-*")
    with Trainer(micro(tmp_path)) as trainer:
        assert not stale.exists()
        assert trainer.notes == [f"removed 1 temporary file(s) of killed runs from {tmp_path} (0.0 MB)"]
    assert capsys.readouterr().out == f"note: {trainer.notes[0]}\n"


class SignalAt(Trainer):
    """Sends itself `signum` during step 3, as a cluster's pre-emption or a Ctrl-C would."""
    signum = signal.SIGTERM

    def before_clip(self, step):
        if step == 3:
            os.kill(os.getpid(), self.signum)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_sigterm_and_sigint_save_then_stop(tmp_path, signum, straight):
    before = signal.getsignal(signum)
    trainer = type("Sig", (SignalAt,), {"signum": signum})(micro(tmp_path))
    with pytest.raises(KeyboardInterrupt) as e:        # Interrupted is a KeyboardInterrupt: Ctrl-C code catches it
        trainer.fit()
    trainer.close()
    assert isinstance(e.value, Interrupted) and e.value.signum == signum and e.value.step == 4
    assert signal.getsignal(signum) is before, "fit() must restore the signal handler it replaced"
    assert open_checkpoint(tmp_path / "latest.pt")["step"] == 4, "the step in progress finishes and is saved"
    with Trainer(micro(tmp_path, resume=True)) as resumed:
        assert_same_run(resumed.fit(), straight, f"resumed after {signal.Signals(signum).name}")


def test_cli_exit_code_after_sigterm(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(Trainer, "signum", signal.SIGTERM, raising=False)
    monkeypatch.setattr(Trainer, "before_clip", SignalAt.before_clip)
    config = tmp_path / "c.json"
    config.write_text(json.dumps(micro(tmp_path).to_dict()))
    line = one_error_line(capsys, 128 + signal.SIGTERM, ["--config", str(config)])
    assert line == "stopped by SIGTERM after 4 steps: latest.pt written: resume with --set resume=true", line


# ------------------------------------------------------------------------------------ 9. resume on another machine
def rewrite(path: Path, change) -> None:
    """Change a checkpoint as another machine's trainer would have written it, with a valid checksum."""
    state = torch.load(path, weights_only=False)
    state.pop("checksum")
    change(state)
    torch.save(seal(state), path)


def as_gpu(monkeypatch, gpus: int, bf16: bool = True) -> None:
    """This process looks like a machine with `gpus` CUDA GPUs; nothing CUDA's may actually run."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: bf16)
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda *a, **k: pytest.fail("restored a CUDA state"))


@pytest.fixture(scope="module")
def cpu_checkpoint(tmp_path_factory) -> Path:
    """latest.pt of a CPU run with precision "auto", after 2 steps."""
    out = tmp_path_factory.mktemp("cpu_run")
    run(micro(out), steps=2)
    return out / "latest.pt"


def test_the_checkpoint_records_what_auto_became(cpu_checkpoint):
    state = open_checkpoint(cpu_checkpoint)
    assert state["config"]["precision"] == "auto"
    assert state["resolved"] == {"precision": "fp32", "device": "cpu"}
    assert state["rng"][0]["cuda"] == []


def test_fewer_gpus_than_the_checkpoints_cuda_states_is_one_line(cpu_checkpoint, tmp_path, monkeypatch):
    """A checkpoint of the earlier trainer, written on a 2-GPU machine (it kept every visible GPU's generator, and
    no "resolved"), resumed on CUDA where one GPU is visible: refused in one line (ConfigError: exit 2 on the command
    line) before anything is loaded, not a traceback from torch.cuda.set_rng_state_all."""
    path = tmp_path / "latest.pt"
    path.write_bytes(cpu_checkpoint.read_bytes())

    def two_gpus(state):
        state.pop("resolved")
        state["rng"][0]["cuda"] = [torch.zeros(16, dtype=torch.uint8), torch.ones(16, dtype=torch.uint8)]

    rewrite(path, two_gpus)
    with Trainer(micro(cpu_checkpoint.parent)) as trainer:
        before = {k: v.clone() for k, v in trainer.raw_model.state_dict().items()}
        as_gpu(monkeypatch, gpus=1)
        trainer.device = torch.device("cuda", 0)     # stands in for a run on this machine's one GPU
        with pytest.raises(ConfigError) as e:
            trainer.load_checkpoint(path)
        assert str(e.value) == ("cannot resume from latest.pt: its rank 0 holds the random states of 2 CUDA GPUs and "
                                "this machine has 1; an exact resume needs the same GPUs: resume where 2 are visible, "
                                "or start afresh in another out_dir")
        assert all(torch.equal(v, before[k]) for k, v in trainer.raw_model.state_dict().items()), "loaded anyway"
        restored = []                                 # where there are enough GPUs, every state goes back
        monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
        monkeypatch.setattr(torch.cuda, "set_rng_state_all", restored.append)
        trainer.load_checkpoint(path)
        assert len(restored) == 1 and len(restored[0]) == 2


def test_a_cpu_run_resumed_on_a_gpu_keeps_fp32(cpu_checkpoint, tmp_path, monkeypatch):
    """precision="auto" is bf16 for a new run on a GPU with bf16, but a CPU run resumed there stays fp32, and the
    device change is recorded: a resume never changes the numerics without a word."""
    as_gpu(monkeypatch, gpus=1, bf16=True)
    gpu = torch.device("cuda", 0)
    assert resolve_precision("auto", gpu) == "bf16"                        # a new run on that GPU
    assert resolve_precision("auto", gpu, kept="fp32") == "fp32"           # the resumed one
    assert resolve_precision("bf16", gpu, kept="fp32") == "bf16"           # asked for explicitly: a recorded change
    with Trainer(micro(cpu_checkpoint.parent)) as trainer:   # the same settings: only the device differs
        trainer.device = gpu
        trainer.load_checkpoint(cpu_checkpoint)
        assert trainer.precision == "fp32"
        assert trainer.resume_changes == {"resolved.device": ["cpu", "cuda"]}
        assert any(n.startswith("precision auto stays fp32, what this run has trained in since its first start (a "
                                "new run here would pick bf16); set precision=bf16 to change it from step 2 on")
                   for n in trainer.notes), trainer.notes
    as_gpu(monkeypatch, gpus=1, bf16=False)
    with pytest.raises(ConfigError, match=r"^precision 'auto' keeps bf16, .+ this GPU has no bf16 support; set "
                                          r"precision=fp32"):
        resolve_precision("auto", gpu, kept="bf16")


def test_a_gpu_run_resumed_on_a_cpu_keeps_bf16(cpu_checkpoint, tmp_path):
    """The other way, end to end on this CPU: a checkpoint of a GPU run where "auto" became bf16 resumes in bf16
    (its CUDA random state left alone), says so, and the manifest records the device change."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "latest.pt").write_bytes(cpu_checkpoint.read_bytes())

    def from_a_gpu(state):
        state["config"]["out_dir"] = str(out)
        state["resolved"] = {"precision": "bf16", "device": "cuda"}
        state["rng"][0]["cuda"] = [torch.zeros(16, dtype=torch.uint8)]

    rewrite(out / "latest.pt", from_a_gpu)
    with Trainer(micro(out, resume=True)) as trainer:
        assert trainer.step == 2 and trainer.precision == "bf16"
        assert any(n.startswith("precision auto stays bf16") for n in trainer.notes), trainer.notes
        assert any("on cpu a run that ran on cuda until step 2" in n for n in trainer.notes), trainer.notes
        history = trainer.fit(steps=3)
    assert all(math.isfinite(x) for x in history["loss"])
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["precision"] == "bf16" and manifest["changed_on_resume"] == {"resolved.device": ["cuda", "cpu"]}
    assert open_checkpoint(out / "latest.pt")["resolved"] == {"precision": "bf16", "device": "cpu"}
