"""The capstone trainer (trainkit.train) under faults and bad input, as an operator meets them: what a resume may
change and what it refuses, damaged checkpoints (fallback to best.pt, or a refusal; sealed files with a bad key too,
and the earlier trainer's files named), lasting non-finite values (the run stops, no ruined checkpoint), a second run
in the same folder, SIGTERM / SIGINT (twice, and before training starts), the manifest's history, temporaries of
killed runs, the command line's one-line errors, resuming on another machine (fewer GPUs, a GPU after a CPU: CUDA
stood in for where a CPU cannot run it), and a full disk (faked, and a real tmpfs where the tests run as root). Where a fault is survived, the proof is the one
trusted trainers use: the resumed run's losses are bit-identical to a run that never stopped. Micro configurations:
a second or two each."""
from __future__ import annotations

import contextlib
import errno
import io
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


# A sealed checkpoint (its checksum is right) can still hold what this trainer never writes: a key missing, or a value
# of the wrong type or range. Each is refused at open time like a damaged file, naming the key, and resume falls back to
# best.pt. `at_open` False: only the trainer can tell (the optimiser state against its own parameters).
def _cut_moment(state):
    moments = state["optimizer"]["state"][0]
    moments["exp_avg"] = moments["exp_avg"][:3]


def _cut(model, name):
    model[name] = model[name][:99]


SEALED_BUT_BAD = {
    "no data": (lambda s: s.pop("data"), "lacks data", True),
    "no skips_in_a_row": (lambda s: s.pop("skips_in_a_row"), "lacks skips_in_a_row", True),
    "step -5": (lambda s: s.update(step=-5),
                "has a bad 'step': must be an int (optimiser steps run) in [0, 8], got -5", True),
    "step '60'": (lambda s: s.update(step="60"),
                  "has a bad 'step': must be an int (optimiser steps run) in [0, 8], got '60'", True),
    "config []": (lambda s: s.update(config=[]), "has a bad 'config': must be the run's settings (a dict), got []",
                  True),
    "history None": (lambda s: s.update(history=None), "has a bad 'history': must be a dict of the lists step, ", True),
    "rng []": (lambda s: s.update(rng=[]),
               "has a bad 'rng': must hold the random states of each of its 1 rank(s), got []", True),
    "data {}": (lambda s: s.update(data={}), "has a bad 'data': must describe the training data (a dict with its token "
                                             "sha256), got {}", True),
    "model {}": (lambda s: s.update(model={}), "has a bad 'model': does not hold the weights of the model its config "
                                               "describes: lacks ", True),
    "cut embedding": (lambda s: _cut(s["model"], "transformer.wte.weight"),
                      "has a bad 'model': transformer.wte.weight has shape [99, 32], the model its config describes "
                      "[256, 32]", True),
    "best_val 'low'": (lambda s: s.update(best_val="low"), "has a bad 'best_val': must be the best validation loss so "
                                                           "far (a number; inf before the first evaluation), got 'low'",
                       True),
    "skips_in_a_row 'x'": (lambda s: s.update(skips_in_a_row="x"),
                           "has a bad 'skips_in_a_row': must be an int (skipped steps in a row) in [0, 6], got 'x'",
                           True),
    "optimizer {}": (lambda s: s.update(optimizer={}), "has a bad 'optimizer': must be an optimiser's state dict",
                     True),
    "empty optimizer state": (lambda s: s["optimizer"].update(state={}),
                              "has a bad 'optimizer': holds no state (moments) though 6 optimiser updates ran", True),
    "unknown key": (lambda s: s.update(extra=1), "holds keys this trainer does not write: extra", True),
    "cut moment": (_cut_moment, "has a bad 'optimizer': its exp_avg of parameter 0 has shape [3, 32], the parameter "
                                "[256, 32]", False),
}


@pytest.mark.parametrize("bad", list(SEALED_BUT_BAD))
def test_a_sealed_checkpoint_with_a_bad_key_falls_back_to_best(stopped_at_6, tmp_path, bad, capsys):
    out = copy_run(stopped_at_6, tmp_path / "run")
    change, reason, at_open = SEALED_BUT_BAD[bad]
    rewrite(out / "latest.pt", change)
    if at_open:
        with pytest.raises(DamagedCheckpoint) as e:
            open_checkpoint(out / "latest.pt")
        assert str(e.value).startswith(reason), str(e.value)
    with Trainer(micro(out, save_every=2, resume=True)) as trainer:
        assert trainer.resumed_file == "best.pt" and trainer.step == 4
        (fallback,) = [n for n in trainer.notes if n.startswith("latest.pt ")]
        assert fallback.startswith(f"latest.pt {reason}") and fallback.endswith("; resuming from best.pt (step 4) "
                                                                               "instead"), fallback
    assert capsys.readouterr().out.count("note: latest.pt ") == 1


def test_bad_keys_in_both_files_refuse_in_one_line(stopped_at_6, tmp_path, capsys):
    out = copy_run(stopped_at_6, tmp_path / "run")
    rewrite(out / "latest.pt", lambda s: s.update(step=-5))
    rewrite(out / "best.pt", lambda s: s.pop("data"))
    config = tmp_path / "c.json"
    config.write_text(json.dumps(micro(out, save_every=2).to_dict()))
    line = one_error_line(capsys, 2, ["--config", str(config), "--set", "resume=true"])
    assert line == (f"error: cannot resume from {out}: latest.pt has a bad 'step': must be an int (optimiser steps "
                    "run) in [0, 8], got -5; best.pt lacks data; move the files away to start afresh"), line


def test_the_writer_checks_what_it_writes_against_the_same_table(tmp_path):
    """One list of keys (trainkit.checkpoint.CONTENTS): every key the trainer writes is one open_checkpoint checks, and
    a checkpoint the table would refuse is never written (a bug in the writer, said at once, not at a resume)."""
    from trainkit.checkpoint import CONTENTS

    with Trainer(micro(tmp_path)) as trainer:
        assert set(trainer.state_dict()) == set(CONTENTS)
        dropped = type("Dropped", (Trainer,), {"state_dict": lambda self: {
            k: v for k, v in Trainer.state_dict(self).items() if k != "skips_in_a_row"}})
        trainer.__class__ = dropped
        with pytest.raises(RuntimeError, match=r"open_checkpoint would refuse: latest.pt lacks skips_in_a_row$"):
            trainer.save_checkpoint(tmp_path / "latest.pt")
    assert not (tmp_path / "latest.pt").exists()


def test_a_checkpoint_of_the_earlier_trainer_is_named_as_such(stopped_at_6, tmp_path, capsys):
    """Version 1 (the trainer before checksums) pickled NumPy's random state, which weights_only refuses: it used to be
    'cannot be read (UnpicklingError ...)'. Rebuilt here as that trainer wrote it."""
    import numpy as np

    out = copy_run(stopped_at_6, tmp_path / "run")
    for name in ("latest.pt", "best.pt"):
        state = torch.load(out / name, weights_only=False)
        for key in ("checksum", "data", "skips_in_a_row", "resolved"):
            state.pop(key)
        state["version"] = 1
        state["rng"][0]["numpy"] = np.random.get_state()   # a tuple holding an ndarray
        torch.save(state, out / name)
    said = ("was written by an earlier version of the trainer (checkpoint version 1, without a checksum); this one "
            "reads version 2 only")
    with pytest.raises(DamagedCheckpoint, match=re.escape(said)):
        open_checkpoint(out / "latest.pt")
    config = tmp_path / "c.json"
    config.write_text(json.dumps(micro(out).to_dict()))
    line = one_error_line(capsys, 2, ["--config", str(config), "--set", "resume=true"])
    assert line == f"error: cannot resume from {out}: latest.pt {said}; best.pt {said}; move the files away to start " \
                   "afresh", line


def test_resuming_a_copied_folder_changes_no_setting(stopped_at_4, tmp_path, straight, capsys):
    """The checkpoint records the out_dir it was written in; a copy (or a moved folder) is the same run."""
    out = tmp_path / "copy"
    out.mkdir()
    for name in ("latest.pt", "manifest.json"):
        (out / name).write_bytes((stopped_at_4 / name).read_bytes())
    with Trainer(micro(out, resume=True)) as trainer:
        assert trainer.resume_changes == {} and trainer.notes == []
        assert_same_run(trainer.fit(), straight, "resumed in a copied folder")
    assert "note:" not in capsys.readouterr().out
    assert json.loads((out / "manifest.json").read_text())["changed_on_resume"] == {}


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
    (["--set", "data=empty.txt"], "data file empty.txt is empty"),
    (["--set", "data=/dev/null"], "data /dev/null is not a regular file (a device, a pipe or a socket); data must be "
                                  "a UTF-8 text file or 'pydoc'"),
])
def test_cli_bad_settings_are_one_line_exit_2(args, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a_file").write_text("not a folder")
    (tmp_path / "empty.txt").write_text("")
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


def test_cli_a_config_file_that_is_not_utf8_is_named(tmp_path, capsys):
    config = tmp_path / "latin1.json"
    config.write_bytes('{"out_dir": "caf\u00e9"}'.encode("latin-1"))
    line = one_error_line(capsys, 2, ["--config", str(config)])
    assert line == f"error: config file {config} is not UTF-8 text: invalid continuation byte at byte 16", line


def test_a_model_beyond_the_address_space_limit_is_refused_at_once(tmp_path):
    """Under RLIMIT_AS (ulimit -v) a model that fits the machine but not the limit used to build for about two minutes
    and end "out of memory building the model: " with nothing after the colon. 3.2 GB to train, 2 GiB of address
    space (the interpreter and torch take about 0.7 GB of it)."""
    import resource

    if os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") < 4 * 2 ** 30:
        pytest.skip("the machine itself has too little memory: its own limit would refuse the model first")
    hard = resource.getrlimit(resource.RLIMIT_AS)[1]
    big = [f"model.{k}={v}" for k, v in dict(d_model=1024, n_layer=12, d_ff=4096, n_heads_q=16, n_heads_kv=16).items()]
    done = subprocess.run([sys.executable, "-m", "trainkit.train", "--config", "tiny", "--set", "logger=none",
                           "--set", f"out_dir={tmp_path / 'run'}", *(a for kv in big for a in ("--set", kv))],
                          capture_output=True, text=True, env=run_env(), cwd=tmp_path, timeout=120,
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (2 * 2 ** 30, hard)))
    assert done.returncode == 2, done.stderr[-2000:]
    assert re.fullmatch(r"error: the model is too large: 201_745_408 parameters need about 3\.2 GB for weights, "
                        r"gradients and optimiser state, and RLIMIT_AS \(ulimit -v\) leaves this process \d\.\d GB; "
                        r"choose smaller model\.\* settings\n", done.stderr), done.stderr


def test_out_of_memory_while_building_says_something_after_the_colon(tmp_path, capsys, monkeypatch):
    """A MemoryError usually carries no message: the line names it instead of ending at the colon."""
    import trainkit.capstone.trainer as trainer_module   # the module whose names the Trainer looks up

    def no_memory(cfg):
        raise MemoryError()

    monkeypatch.setattr(trainer_module, "GPT", no_memory)
    monkeypatch.setattr(trainer_module, "check_model_fits", lambda cfg, device: "about 1 GB to train")
    config = tmp_path / "c.json"
    config.write_text(json.dumps(micro(tmp_path / "run").to_dict()))
    line = one_error_line(capsys, 2, ["--config", str(config)])
    assert line == "error: out of memory building the model (about 1 GB to train): MemoryError (no detail given)", line


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


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_second_signal_during_the_write_waits_for_it(tmp_path, signum, straight, capsys, monkeypatch):
    """Ctrl-C pressed twice: the first during step 3, the second in the middle of the checkpoint write that follows
    (torch's zip writer calls back into Python for every record: the hook sends it from the third). It used to come out
    of the writer as a RuntimeError (exit 1) or abort the process (134), or exit 143 saying "latest.pt written" while
    latest.pt held the step before. Now the write finishes, and so does latest.pt after best.pt, then the run stops."""
    real_save, sent = torch.save, []

    def save_and_signal(obj, f, *args, **kwargs):
        class Writer:
            records = 0

            def write(self, data):
                Writer.records += 1
                if Writer.records == 3 and not sent:
                    sent.append(os.kill(os.getpid(), signum))
                return f.write(data)

            def flush(self):
                f.flush()
        return real_save(obj, Writer(), *args, **kwargs)

    monkeypatch.setattr(torch, "save", save_and_signal)
    monkeypatch.setattr(Trainer, "signum", signum, raising=False)
    monkeypatch.setattr(Trainer, "before_clip", SignalAt.before_clip)
    config = tmp_path / "c.json"
    config.write_text(json.dumps(micro(tmp_path).to_dict()))
    line = one_error_line(capsys, 128 + signum, ["--config", str(config)])
    monkeypatch.undo()
    assert sent, "the second signal was not sent during a write"
    assert line == f"stopped by {signal.Signals(signum).name} after 4 steps: latest.pt written: resume with --set " \
                   "resume=true", line
    assert open_checkpoint(tmp_path / "latest.pt")["step"] == 4 and open_checkpoint(tmp_path / "best.pt")["step"] == 4
    assert not list(tmp_path.glob(".*.tmp-*")), "a temporary was left"
    with Trainer(micro(tmp_path, resume=True)) as resumed:
        assert_same_run(resumed.fit(), straight, "resumed after a second signal during the write")


class TwoSignalsAt(Trainer):
    """Both signals during step 3, between checkpoints: the second stops at once, and says what latest.pt holds."""

    def before_clip(self, step):
        if step == 3:
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)


def test_a_second_signal_between_writes_says_what_latest_holds(tmp_path, straight, capsys, monkeypatch):
    with pytest.raises(Interrupted) as e:
        run(micro(tmp_path, save_every=2), cls=TwoSignalsAt)
    assert (e.value.step, e.value.saved_at) == (3, 2)
    assert str(e.value) == "stopped by SIGINT after 3 steps (a second signal): latest.pt holds step 2"
    assert open_checkpoint(tmp_path / "latest.pt")["step"] == 2
    fresh = tmp_path / "fresh"      # no checkpoint yet: the line says so, and does not offer a resume
    monkeypatch.setattr(Trainer, "before_clip", TwoSignalsAt.before_clip)
    config = tmp_path / "c.json"
    config.write_text(json.dumps(micro(fresh).to_dict()))
    line = one_error_line(capsys, 130, ["--config", str(config)])
    assert line == "stopped by SIGINT after 3 steps (a second signal), before latest.pt was written", line
    assert not (fresh / "latest.pt").exists()
    monkeypatch.undo()
    with Trainer(micro(tmp_path, save_every=2, resume=True)) as resumed:
        assert_same_run(resumed.fit(), straight, "resumed after two signals")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_before_training_starts_is_one_line(tmp_path, signum, capsys, monkeypatch):
    """Ctrl-C while the data load (a KeyboardInterrupt traceback before), SIGTERM there (a silent death before)."""
    import trainkit.capstone.trainer as trainer_module   # the module whose names the Trainer looks up

    real_load = trainer_module.load_data

    def load_then_signal(cfg):
        os.kill(os.getpid(), signum)
        return real_load(cfg)

    monkeypatch.setattr(trainer_module, "load_data", load_then_signal)
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    config = tmp_path / "c.json"
    config.write_text(json.dumps(micro(tmp_path / "run").to_dict()))
    line = one_error_line(capsys, 128 + signum, ["--config", str(config)])
    assert line == (f"stopped by {signal.Signals(signum).name} before training started: no step ran and no checkpoint "
                    "was written"), line
    assert {sig: signal.getsignal(sig) for sig in before} == before, "main() must restore the handlers it replaced"


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


# ------------------------------------------------------------------------------------ 10. a full disk
class FillsUp(io.FileIO):
    """A file on a disk with `room` bytes left (None: plenty): a write past them fails with ENOSPC, as the kernel's
    would, in the middle of a checkpoint."""
    room = None

    def write(self, data):
        if FillsUp.room is not None and self.tell() + len(memoryview(data)) > FillsUp.room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return super().write(data)


class FullFromStep3(Trainer):
    def before_clip(self, step):
        if step == 3:
            FillsUp.room = 20_000


def test_a_full_disk_during_a_checkpoint_write_is_one_line_exit_3(tmp_path, straight, capsys, monkeypatch):
    """torch's zip writer turns the ENOSPC of a failed write into a RuntimeError ("unexpected pos"): it used to be a
    traceback and exit 1. It is the disk-full line and exit 3, and the files on disk are the last good ones."""
    import trainkit.checkpoint as checkpoint_module

    monkeypatch.setattr(FillsUp, "room", 20_000)
    with pytest.raises(RuntimeError, match="unexpected pos"):      # what atomic_save has to see through
        with FillsUp(tmp_path / "probe.pt", "wb") as f:
            torch.save({"w": torch.zeros(10_000)}, f)
    monkeypatch.setattr(FillsUp, "room", None)
    real_open = open

    def open_on_a_filling_disk(path, mode="r", *args, **kwargs):   # the checkpoints' temporaries only
        if mode == "wb" and Path(path).name.startswith("."):
            return FillsUp(path, mode)
        return real_open(path, mode, *args, **kwargs)

    monkeypatch.setattr(checkpoint_module, "open", open_on_a_filling_disk, raising=False)
    monkeypatch.setattr(Trainer, "before_clip", FullFromStep3.before_clip)
    config = tmp_path / "c.json"
    config.write_text(json.dumps(micro(tmp_path / "run", save_every=2).to_dict()))
    line = one_error_line(capsys, 3, ["--config", str(config)])
    monkeypatch.undo()
    assert line == (f"error: cannot write {tmp_path / 'run' / 'best.pt'} after 4 steps: the disk is full (No space "
                    "left on device): free some space; latest.pt on disk keeps step 2"), line
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["latest.pt", "manifest.json"]
    with Trainer(micro(tmp_path / "run", save_every=2, resume=True)) as resumed:
        assert resumed.step == 2
        assert_same_run(resumed.fit(), straight, "resumed after a full disk")


@pytest.fixture
def small_disk(tmp_path):
    """A 4 MB tmpfs: a disk that really fills up (root only)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    disk = tmp_path / "disk"
    disk.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    yield disk
    subprocess.run(["umount", "-l", str(disk)], capture_output=True)   # lazy: a writer may still hold a file


class FillTheDisk(Trainer):
    """Fills the disk during step 2, leaving `leave` bytes free."""
    leave = 0

    def before_clip(self, step):
        if step != 2:
            return
        filler = self.out_dir / "filler"
        with open(filler, "wb", buffering=0) as f:
            with contextlib.suppress(OSError):
                while True:
                    f.write(bytes(65536))
        if self.leave:
            os.truncate(filler, filler.stat().st_size - self.leave)


@pytest.mark.parametrize("logger, leave, what", [
    ("none", 100_000, r"{disk}/best\.pt after 4 steps"),   # room for the log, not for the checkpoint
    ("tensorboard", 0, r"the tensorboard log in {disk}/runs/\S+"),   # its writer thread fails first
    ("wandb", 0, r"the wandb log in {disk}/wandb/\S+"),   # its flush used to wait 60 s, then not say why
])
def test_a_really_full_disk_is_one_line_exit_3(small_disk, logger, leave, what, capsys, monkeypatch):
    import threading
    import time

    thread_tracebacks = []   # what would print a thread's traceback on stderr (pytest turns it into a warning)
    monkeypatch.setattr(threading, "excepthook", lambda args: thread_tracebacks.append(args.thread.name))
    monkeypatch.setattr(Trainer, "before_clip", FillTheDisk.before_clip)
    monkeypatch.setattr(Trainer, "leave", leave, raising=False)
    config = small_disk / "c.json"
    config.write_text(json.dumps(micro(small_disk, logger=logger, steps=16, eval_every=4, warmup=1).to_dict()))
    start = time.monotonic()
    line = one_error_line(capsys, 3, ["--config", str(config)])    # one line: no thread's traceback before it
    assert time.monotonic() - start < 15, "the run waited for a disk that had no room"
    assert re.fullmatch(r"error: cannot write " + what.format(disk=re.escape(str(small_disk))) + r": the disk is full "
                        r"\(No space left on device\): free some space; no checkpoint of this run was written",
                        line), line
    assert not list(small_disk.glob("*.pt")) and not list(small_disk.glob(".*.tmp-*"))
    assert thread_tracebacks == [], f"a writer thread's traceback came before the line: {thread_tracebacks}"
