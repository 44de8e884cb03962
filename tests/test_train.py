"""The capstone's reference loop (trainkit.train): exact resume (one process and 2 ranks under torchrun), the
skip of an injected non-finite step, atomic checkpoints, the compile fallback, what reaches the logger and the
manifest (the git state with untracked files), per-rank seeds, the presets, the schedule, what the command line
says when it ends and its clear errors for bad input, and the throughput benchmark's table of peak FLOP/s.
Micro configurations: seconds each."""
from __future__ import annotations

import ast
import copy
import importlib.util
import json
import math
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

import trainkit.train as train_mod
from trainkit.corpus import TokenData
from trainkit.gpt import GPT, GPTConfig
from trainkit.gpt import param_counts
from trainkit.precision import fp32_matmul_precision
from trainkit.train import NOT_A_GIT_REPOSITORY, ConfigError, Trainer, TrainConfig, git_sha, main, rank_seeds

ROOT = Path(__file__).resolve().parents[1]
MICRO_MODEL = dict(vocab_size=256, block_size=32, n_layer=1, d_model=32, n_heads_q=2, n_heads_kv=1, d_ff=64)


def micro(tmp_path, **kw) -> TrainConfig:
    base = dict(model=GPTConfig(**MICRO_MODEL), steps=8, batch_size=4, lr=3e-3, warmup=2, eval_every=4,
                eval_batches=2, logger="none", progress=False, out_dir=str(tmp_path), device="cpu")
    return TrainConfig(**{**base, **kw})


def run_env() -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", WANDB_MODE="offline", TRAINKIT_FORCE_CPU="1")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


# ------------------------------------------------------------------------------------------- exact resume
@pytest.mark.parametrize("stop", [3, 4])   # between evaluations, and exactly on one
def test_exact_resume_single_process(tmp_path, stop):
    kw = dict(grad_accum=2, model=GPTConfig(**MICRO_MODEL, dropout=0.1))  # dropout: the RNG state must resume too
    straight = Trainer(micro(tmp_path / "straight", **kw)).fit()
    Trainer(micro(tmp_path / "stopped", **kw)).fit(steps=stop)      # "killed" once `stop` steps have run
    resumed_trainer = Trainer(micro(tmp_path / "stopped", resume=True, **kw))  # a new trainer, from disk
    assert resumed_trainer.step == stop and resumed_trainer.resumed_from == stop
    resumed = resumed_trainer.fit()
    assert resumed["step"] == list(range(8))
    for key in ("loss", "grad_norm", "lr", "val_loss"):
        assert resumed[key] == straight[key], f"{key} differs after resuming at step {stop}"
    assert all(math.isfinite(v) for v in straight["loss"])
    a = torch.load(tmp_path / "straight" / "latest.pt", weights_only=False)
    b = torch.load(tmp_path / "stopped" / "latest.pt", weights_only=False)
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), f"parameter {name} differs after resume"


def torchrun(tmp_path, out: str, *extra: str) -> subprocess.CompletedProcess:
    cfg = micro(tmp_path, steps=6, eval_every=3).to_dict()
    cfg.update(out_dir=str(tmp_path / out), device="auto")
    config = tmp_path / f"{out}.json"
    config.write_text(json.dumps(cfg))
    # --standalone: the launcher binds a free port itself (no race with other programs for a port chosen here)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "trainkit.train", "--config", str(config), *extra]
    done = subprocess.run(cmd, capture_output=True, text=True, env=run_env(), cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def test_two_rank_ddp_resume_is_exact(tmp_path):
    torchrun(tmp_path, "straight", "--set", "logger=tensorboard")
    torchrun(tmp_path, "stopped", "--stop-at", "2")
    torchrun(tmp_path, "stopped", "--set", "resume=true")
    a = torch.load(tmp_path / "straight" / "latest.pt", weights_only=False)
    b = torch.load(tmp_path / "stopped" / "latest.pt", weights_only=False)
    assert a["world_size"] == 2 and a["step"] == 6 == b["step"]
    for key in ("loss", "grad_norm", "val_loss"):
        assert a["history"][key] == b["history"][key], f"2-rank {key} differs after resuming at step 2"
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), f"parameter {name} differs after the 2-rank resume"
    assert len(a["rng"]) == 2   # every rank's RNG state is kept
    # the logged loss is the mean over the two ranks, each on its own slice of the step's windows
    cfg = micro(tmp_path)
    data = TokenData.default()
    torch.manual_seed(cfg.seed)
    model = GPT(cfg.model)
    with torch.no_grad():
        losses = [model(*data.get_batch("train", 4, 32, step=0, seed=0, rank=r, world_size=2))[1] for r in range(2)]
    xs = [data.get_batch("train", 4, 32, step=0, seed=0, rank=r, world_size=2)[0] for r in range(2)]
    assert not any(torch.equal(r0, r1) for r0 in xs[0] for r1 in xs[1]), "the two ranks read the same window"
    assert abs(a["history"]["loss"][0] - float(torch.stack(losses).mean())) < 1e-5
    manifest = json.loads((tmp_path / "straight" / "manifest.json").read_text())
    assert manifest["world_size"] == 2
    # only rank 0 writes: one manifest, two checkpoints, one log run holding every rank's step time
    assert sorted(p.name for p in (tmp_path / "straight").iterdir()) == ["best.pt", "latest.pt", "manifest.json",
                                                                         "runs"]
    from trainkit.runlog import read_series

    (run,) = (tmp_path / "straight" / "runs").iterdir()
    series = read_series(run)
    for key in ("step_time/rank0", "step_time/rank1", "ready_time/rank0", "ready_time/rank1", "train/loss"):
        assert [s for s, _ in series[key]] == list(range(6)), key
    assert [v for _, v in series["train/loss"]] == pytest.approx(a["history"]["loss"], rel=1e-12)
    # a rank is ready for the gradient sync before its step ends: ready time is part of the step time
    for r in (0, 1):
        assert all(0 < ready <= total for (_, ready), (_, total) in zip(series[f"ready_time/rank{r}"],
                                                                       series[f"step_time/rank{r}"]))


@pytest.mark.parametrize("repeat", range(2))
def test_two_rank_runs_end_cleanly(tmp_path, repeat):
    """About once in 45 two-rank runs a rank used to abort (SIGABRT) at exit after it had finished, so torchrun exited
    1: gloo's threads outlive destroy_process_group() (DDP imports torch._dynamo, which keeps the process group) and
    were torn down with the interpreter. A multi-rank command line now ends with os._exit after closing everything.
    Together with the three runs above, every test run starts five 2-rank runs that must all exit 0."""
    done = torchrun(tmp_path, f"run{repeat}", "--set", "steps=2", "--set", "warmup=1")
    assert "SIGABRT" not in done.stderr and "Signal 6" not in done.stderr, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1].startswith("done: ran steps 0..1 (2 steps)")
    assert torch.load(tmp_path / f"run{repeat}" / "latest.pt", weights_only=True)["step"] == 2


# ------------------------------------------------------------------------------------------- non-finite skip
class PoisonAt(Trainer):
    def __init__(self, cfg, at: int, value: float):
        self.at, self.value = at, value
        super().__init__(cfg)

    def before_clip(self, step: int) -> None:
        if step == self.at:
            p = next(self.raw_model.parameters())
            p.grad.view(-1)[0] = self.value


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_injected_non_finite_gradient_is_skipped_once(tmp_path, value):
    trainer = PoisonAt(micro(tmp_path, optimizer="adamw"), at=3, value=value)
    trainer.fit(steps=3)
    params = {k: v.clone() for k, v in trainer.raw_model.state_dict().items()}
    opt_state = copy.deepcopy(trainer.optimizer.state_dict())
    trainer.fit(steps=4)                                          # the poisoned step
    assert trainer.history["skipped"] == [False, False, False, True]
    assert not math.isfinite(trainer.history["grad_norm"][3])
    for k, v in trainer.raw_model.state_dict().items():
        assert torch.equal(v, params[k]), f"{k} changed on the skipped step"
    after = trainer.optimizer.state_dict()
    for idx, st in opt_state["state"].items():
        for name, value_before in st.items():
            assert torch.equal(after["state"][idx][name], value_before), f"optimizer state {name} changed"
    assert all(p.grad is None for p in trainer.raw_model.parameters())
    history = trainer.fit()                                       # and training goes on
    assert history["skipped"].count(True) == 1
    assert all(math.isfinite(x) for x in history["loss"])
    assert not torch.equal(next(trainer.raw_model.parameters()), next(iter(params.values())))
    assert trainer.optimizer.state_dict()["state"][0]["step"] == 7   # 8 steps, one skipped


def test_should_skip_reference():
    trainer = Trainer.__new__(Trainer)
    assert trainer.should_skip(torch.tensor(1e30)) is False
    assert trainer.should_skip(torch.tensor(0.0)) is False
    for bad in (math.nan, math.inf, -math.inf):
        assert trainer.should_skip(torch.tensor(bad)) is True


# ------------------------------------------------------------------------------------------- checkpoints
def test_checkpoint_write_is_atomic(tmp_path, monkeypatch):
    trainer = Trainer(micro(tmp_path))
    trainer.fit(steps=3)
    latest = tmp_path / "latest.pt"
    before = latest.read_bytes()
    trainer.train_step(3)
    trainer.step = 4

    def torn_save(obj, f, *a, **k):       # a crash half-way through the write
        f.write(b"PK\x03\x04 partial bytes")
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(train_mod.torch, "save", torn_save)
    with pytest.raises(OSError, match="disk full"):
        trainer.save_checkpoint(latest)
    monkeypatch.undo()
    assert latest.read_bytes() == before, "the previous checkpoint was overwritten by a failed write"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest.pt", "manifest.json"], "a temp file was left"
    state = torch.load(latest, weights_only=False)
    assert state["step"] == 3
    resumed = Trainer(micro(tmp_path, resume=True))
    assert resumed.step == 3


def test_checkpoint_kill_during_write_keeps_previous(tmp_path):
    """A process killed (SIGKILL) while writing leaves the previous checkpoint loadable."""
    script = f"""
import os, signal, torch, trainkit.train as t
t.atomic_save({{"step": 1, "w": torch.zeros(10)}}, {str(tmp_path / 'latest.pt')!r})
real_save = torch.save
def dying_save(obj, f, *a, **k):
    f.write(b"PK partial"); f.flush(); os.kill(os.getpid(), signal.SIGKILL)
torch.save = dying_save
t.atomic_save({{"step": 2, "w": torch.ones(10)}}, {str(tmp_path / 'latest.pt')!r})
"""
    done = subprocess.run([sys.executable, "-c", script], env=run_env(), capture_output=True, timeout=120)
    assert done.returncode == -9, done.stderr
    assert torch.load(tmp_path / "latest.pt", weights_only=False)["step"] == 1


def test_best_and_latest_checkpoints(tmp_path):
    trainer = Trainer(micro(tmp_path))
    history = trainer.fit()
    best = torch.load(tmp_path / "best.pt", weights_only=False)
    latest = torch.load(tmp_path / "latest.pt", weights_only=False)
    assert history["val_step"] == [3, 7] and latest["step"] == 8
    assert best["best_val"] == min(history["val_loss"]) == trainer.best_val
    assert best["step"] == 4 * (1 + history["val_loss"].index(min(history["val_loss"])))


# ------------------------------------------------------------------------------------------- compile, logs
def test_compile_failure_falls_back_to_eager(tmp_path, monkeypatch):
    def no_compile(*a, **k):
        raise RuntimeError("no C++ compiler on this platform (simulated)")

    monkeypatch.setattr(train_mod.torch, "compile", no_compile)
    trainer = Trainer(micro(tmp_path / "c", compile=True, steps=4))
    assert trainer.compile_status == {"requested": True, "active": False,
                                      "reason": "RuntimeError: no C++ compiler on this platform (simulated)"}
    manifest = json.loads((tmp_path / "c" / "manifest.json").read_text())
    assert manifest["compile"]["reason"].startswith("RuntimeError: no C++ compiler")
    eager = Trainer(micro(tmp_path / "e", steps=4)).fit()
    assert trainer.fit()["loss"] == eager["loss"]


def test_logger_series_and_manifest(tmp_path):
    from trainkit.runlog import read_series

    trainer = Trainer(micro(tmp_path, logger="tensorboard", steps=4, eval_every=2))
    trainer.fit()
    series = read_series(next((tmp_path / "runs").iterdir()))
    for key in ("train/loss", "lr", "grad_norm", "tokens_per_s", "step_time", "skipped"):
        assert [s for s, _ in series[key]] == [0, 1, 2, 3], key
    assert [s for s, _ in series["val/loss"]] == [1, 3]
    assert [v for _, v in series["train/loss"]] == pytest.approx(trainer.history["loss"], rel=1e-12)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["config"]["lr"] == 3e-3 and manifest["seed"] == 0
    assert manifest["tokenizer"]["version"] == "bytes-utf8-v1"
    assert len(manifest["data"]["sha256"]) == 64 and manifest["torch"] == torch.__version__
    assert manifest["git_sha"] == NOT_A_GIT_REPOSITORY or re.fullmatch(r"[0-9a-f]{40}(\+dirty)?", manifest["git_sha"])
    assert manifest["params"]["total"] == sum(p.numel() for p in trainer.raw_model.parameters())
    # the machine: threads always; CUDA, cuDNN and the GPU only describe a CUDA run (this one is on the CPU), whose
    # fp32 matmuls are IEEE fp32
    assert manifest["threads"] == torch.get_num_threads()
    assert manifest["cuda"] is None and manifest["cudnn"] is None and manifest["gpu"] is None
    assert manifest["fp32_matmul"] == "ieee"


# ------------------------------------------------------------------------------------------- CUDA, seen from a CPU
LEGACY_TF32 = {"allow_tf32", "set_float32_matmul_precision", "get_float32_matmul_precision"}
LEGACY_WARNING = ("Please use the new API settings to control TF32 behavior (a legacy TF32 setting, as PyTorch "
                  "2.9-2.11 CUDA builds say)")


@pytest.fixture
def tf32_settings(monkeypatch):
    """torch's legacy TF32 setters warn, as on PyTorch 2.9-2.11 CUDA builds (this CPU wheel, 2.13, is silent); and the
    process-wide TF32 settings are given back as they were after the test."""
    def warns(setter):
        def wrapped(*args):
            warnings.warn(LEGACY_WARNING, UserWarning, stacklevel=2)
            return setter(*args)
        return wrapped

    # torch.backends.cuda.matmul.allow_tf32 = ... and torch.set_float32_matmul_precision(...) call these at call time
    monkeypatch.setattr(torch._C, "_set_cublas_allow_tf32", warns(torch._C._set_cublas_allow_tf32))
    monkeypatch.setattr(torch._C, "_set_float32_matmul_precision", warns(torch._C._set_float32_matmul_precision))
    cudnn = type(torch.backends.cudnn)                  # torch.backends.cudnn.allow_tf32: a descriptor on the class
    legacy = cudnn.__dict__["allow_tf32"]
    monkeypatch.setattr(cudnn, "allow_tf32", property(lambda self: legacy.__get__(self, cudnn),
                                                      lambda self, value: warns(legacy.__set__)(self, value)))
    b = torch.backends
    saved = b.cuda.matmul.fp32_precision, b.cudnn.conv.fp32_precision
    yield
    b.cuda.matmul.fp32_precision, b.cudnn.conv.fp32_precision = saved


def test_tf32_is_set_and_read_through_the_current_api_only(tf32_settings, monkeypatch):
    """The Trainer's CUDA precision set-up and the manifest's reading run under warnings-as-errors (as lessons do):
    a legacy setter would warn on PyTorch 2.9-2.11, and after a write through the current API torch's legacy getters
    raise (mixed APIs), so neither may be used."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(UserWarning, match="new API settings"):    # the stand-in warns as those builds do
            torch.backends.cudnn.allow_tf32 = True
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)
    monkeypatch.setattr(torch.cuda, "is_tf32_supported", lambda: True)
    gpu = torch.device("cuda", 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert train_mod._setup_precision("fp32", gpu) == "fp32"
        assert train_mod._setup_precision("auto", gpu) == "bf16"
        assert torch.backends.cuda.matmul.fp32_precision == "tf32" == torch.backends.cudnn.conv.fp32_precision
        assert fp32_matmul_precision(gpu) == "tf32"          # the manifest's "fp32_matmul" of a CUDA run
        assert fp32_matmul_precision("cpu") == "ieee"        # the CPU's matmuls are untouched
        monkeypatch.setattr(torch.cuda, "is_tf32_supported", lambda: False)   # a V100 or T4: no TF32 to turn on
        assert fp32_matmul_precision(gpu) == "ieee"


def test_no_legacy_tf32_api_in_course_code():
    """The CUDA branches never run on a CPU, so read them: trainkit/, autograder/, benchmarks/ and the lessons' and
    solutions' code cells use no legacy TF32 setting or getter (see trainkit.precision.use_tf32 for why)."""
    def legacy_uses(source: str) -> list[int]:
        tree = ast.parse(source)
        return [n.lineno for n in ast.walk(tree)
                if isinstance(n, ast.Attribute) and n.attr in LEGACY_TF32 or isinstance(n, ast.Name) and n.id in
                LEGACY_TF32 or isinstance(n, ast.alias) and n.name in LEGACY_TF32]

    found = []
    for path in sorted([*ROOT.glob("trainkit/**/*.py"), *ROOT.glob("autograder/**/*.py"), *ROOT.glob("publish/*.py"),
                        *ROOT.glob("benchmarks/*.py")]):
        found += [f"{path.relative_to(ROOT)}:{line}" for line in legacy_uses(path.read_text())]
    for path in sorted([*ROOT.glob("lessons/*.ipynb"), *ROOT.glob("solutions/*/*.ipynb")]):
        for i, cell in enumerate(json.loads(path.read_text())["cells"]):
            if cell["cell_type"] == "code":   # IPython's magics and shell lines are not Python
                lines = "".join(cell["source"]).splitlines()
                code = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in lines)
                found += [f"{path.relative_to(ROOT)} cell {i}" for _ in legacy_uses(code)]
    assert found == [], f"legacy TF32 API used at {found}"


def test_torchrun_with_more_processes_than_gpus_is_one_line(tmp_path, capsys, monkeypatch):
    """The README's 2-process torchrun on a 1-GPU machine: every rank refuses in one line (exit 2) before touching a
    GPU or the process group; rank 0 too, so that it does not wait in the rendezvous for a rank that left."""
    def must_not_run(*args, **kwargs):
        raise AssertionError("touched a GPU or the process group before refusing")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "set_device", must_not_run)
    monkeypatch.setattr(train_mod.dist, "init_process_group", must_not_run)
    config = tmp_path / "c.json"
    config.write_text(json.dumps(micro(tmp_path / "run", device="cuda").to_dict()))
    for rank in ("0", "1"):
        for key, value in (("WORLD_SIZE", "2"), ("LOCAL_WORLD_SIZE", "2"), ("RANK", rank), ("LOCAL_RANK", rank)):
            monkeypatch.setenv(key, value)
        assert main(["--config", str(config)]) == 2
        assert capsys.readouterr().err == (
            "error: 2 processes on this machine train on CUDA, one GPU each, and it has 1 GPU(s): start at most 1 "
            "(torchrun --nproc_per_node 1), or train on the CPU with gloo (--set device=cpu, or "
            "CUDA_VISIBLE_DEVICES='')\n")
    assert not (tmp_path / "run").exists()


def test_cuda_random_state_is_the_ranks_own_gpus(monkeypatch):
    """A rank saves the one CUDA generator it draws from (its GPU's), not every visible GPU's, and restores it into
    its own GPU: the checkpoint does not depend on how many GPUs the machine had."""
    calls = []
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device: calls.append(("get", device)) or
                        torch.full((16,), 7, dtype=torch.uint8))
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, device: calls.append(("set", device, state)))
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: pytest.fail("saved every GPU's generator"))
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", lambda states: pytest.fail("restored every GPU's"))
    gpu1 = torch.device("cuda", 1)
    cpu_before = torch.get_rng_state()
    state = train_mod._rng_state(gpu1)
    assert len(state["cuda"]) == 1 and calls == [("get", gpu1)]
    assert train_mod._rng_state(torch.device("cpu"))["cuda"] == []
    calls.clear()
    train_mod._set_rng_state(state, torch.device("cuda", 0))     # resumed where this rank has another GPU index
    assert [c[:2] for c in calls] == [("set", torch.device("cuda", 0))] and torch.equal(calls[0][2], state["cuda"][0])
    assert torch.equal(torch.get_rng_state(), cpu_before)
    calls.clear()
    train_mod._set_rng_state(state, torch.device("cpu"))         # on a CPU, CUDA's generators are not touched
    assert calls == []


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=test", "-c", "user.email=test@example.com", "-c", "commit.gpgsign=false",
                    *args], cwd=repo, check=True, capture_output=True, timeout=60)


def test_git_sha_counts_untracked_files(tmp_path, monkeypatch):
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))  # tmp_path must not look inside an outer checkout
    repo = tmp_path / "repo"
    repo.mkdir()
    assert git_sha(repo) == NOT_A_GIT_REPOSITORY, "a plain directory is not a git checkout"
    git(repo, "init", "-q")
    assert git_sha(repo) == NOT_A_GIT_REPOSITORY, "a repository with no commit has no SHA to record"
    (repo / "model.py").write_text("x = 1\n")
    (repo / ".gitignore").write_text("runs/\n")
    git(repo, "add", "model.py", ".gitignore")
    git(repo, "commit", "-q", "-m", "first")
    sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    assert git_sha(repo) == sha, "a clean checkout is not dirty"
    (repo / "runs").mkdir()
    (repo / "runs" / "latest.pt").write_bytes(b"ignored")
    assert git_sha(repo) == sha, "an ignored file is not part of the code"
    (repo / "new_module.py").write_text("y = 2\n")
    assert git_sha(repo) == sha + "+dirty", "an untracked module is code the commit does not hold"
    (repo / "new_module.py").unlink()
    (repo / "model.py").write_text("x = 2\n")
    assert git_sha(repo) == sha + "+dirty", "a changed tracked file"
    assert git_sha(tmp_path / "no" / "such" / "dir") == NOT_A_GIT_REPOSITORY


def test_rank_seeds_differ_for_every_seed_and_rank(tmp_path):
    pairs = [(seed, rank) for seed in range(8) for rank in range(4)]
    for library in ("torch", "python", "numpy"):
        seen = [repr(rank_seeds(seed, rank)[library]) for seed, rank in pairs]
        assert len(set(seen)) == len(pairs), f"two (seed, rank) pairs share a {library} seed"
    assert rank_seeds(0, 1) != rank_seeds(1, 0)          # what seed + rank gets wrong
    assert rank_seeds(3, 2) == rank_seeds(3, 2)          # and a pure function of (seed, rank)
    s = rank_seeds(0, 0)
    assert s["torch"] != s["python"], "torch and Python should not start from one seed"
    Trainer(micro(tmp_path, seed=5))
    assert torch.initial_seed() == rank_seeds(5, 0)["torch"], "the Trainer seeds dropout from rank_seeds"


# ------------------------------------------------------------------------------------------- schedule
def test_schedule_warmup_cosine_and_wsd(tmp_path):
    t = Trainer(micro(tmp_path, steps=100, warmup=10, lr=1.0, min_lr_ratio=0.1))
    assert t.lr_at(0) == pytest.approx(0.1) and t.lr_at(10) == pytest.approx(1.0)
    assert t.lr_at(5) == pytest.approx(0.55)
    assert t.lr_at(99) == pytest.approx(0.1) and t.lr_at(500) == pytest.approx(0.1)
    mid = 10 + (99 - 10) / 2
    assert t.lr_at(int(mid)) == pytest.approx(0.1 + 0.45 * (1 + math.cos(math.pi * (int(mid) - 10) / 89)))
    w = Trainer(micro(tmp_path, steps=100, warmup=10, lr=1.0, min_lr_ratio=0.0, schedule="wsd", decay_frac=0.2))
    assert w.lr_at(10) == w.lr_at(79) == pytest.approx(1.0)
    assert w.lr_at(80) == pytest.approx(1.0) and w.lr_at(99) == pytest.approx(0.0, abs=1e-12)
    assert w.lr_at(90) == pytest.approx(1.0 - 10 / 19)


def test_lion_and_weight_decay_groups(tmp_path):
    t = Trainer(micro(tmp_path, optimizer="lion", lr=3e-4))
    assert type(t.optimizer).__name__ == "Lion"
    decay, no_decay = t.optimizer.param_groups
    assert all(p.dim() >= 2 for p in decay["params"]) and all(p.dim() == 1 for p in no_decay["params"])
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(math.isfinite(x) for x in t.fit()["loss"])


# ------------------------------------------------------------------------------------------- config and CLI
def test_presets():
    recipe = TrainConfig.seed_recipe()
    assert (recipe.model.d_model, recipe.model.n_layer, recipe.model.n_heads_q, recipe.model.n_heads_kv,
            recipe.model.d_ff, recipe.model.block_size, recipe.model.vocab_size) == (512, 8, 8, 4, 1536, 1024, 50257)
    assert (recipe.steps, recipe.warmup, recipe.lr, recipe.betas, recipe.weight_decay) == (20_000, 200, 3e-4,
                                                                                            (0.9, 0.95), 0.1)
    assert TrainConfig.for_device("cpu") == TrainConfig.tiny()
    assert TrainConfig.for_device("cuda") == TrainConfig.gpu()


def test_gpu_preset_fits_the_corpus(tmp_path):
    """The CUDA default reads the training split tens of times, not the recipe's ~1 560, and its docstring's
    numbers are the preset's own."""
    train_tokens = len(TokenData.default().train)
    epochs = {}
    for name, preset in (("gpu", TrainConfig.gpu()), ("recipe", TrainConfig.seed_recipe())):
        tokens = preset.steps * preset.batch_size * preset.grad_accum * preset.model.block_size
        epochs[name] = tokens / train_tokens
    assert 1500 < epochs["recipe"] < 1600
    assert 10 <= epochs["gpu"] <= 30, f"the gpu preset reads the training split {epochs['gpu']:.1f} times"
    gpu = TrainConfig.gpu()
    counts = param_counts(GPT(gpu.model))
    assert counts["total"] < 10e6, "a model sized for 0.42M bytes, not the recipe's 51.4M"
    doc = " ".join(TrainConfig.gpu.__doc__.split())
    assert f"{counts['total'] / 1e6:.2f}M parameters" in doc and f"{epochs['gpu']:.1f} epochs" in doc, doc
    tokens = gpu.steps * gpu.batch_size * gpu.model.block_size
    assert f"{tokens / 1e6:.2f}M tokens" in doc and f"{gpu.steps:,}".replace(",", " ") + " steps" in doc
    # the preset's model trains (on the CPU, with a small batch): valid config, finite losses, dropout on
    short = TrainConfig.gpu(steps=2, warmup=1, batch_size=2, eval_batches=1, logger="none", progress=False,
                            out_dir=str(tmp_path), device="cpu")
    assert all(math.isfinite(x) for x in Trainer(short).fit()["loss"])


def test_config_file_and_flags(tmp_path):
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"lr": 1, "model": {"n_layer": 2}, "betas": [0.9, 0.99]}))
    cfg = TrainConfig.from_file(path).with_flags(["steps=50", "model.d_model=64", "max_grad_norm=inf",
                                                  "compile=true"])
    assert cfg.lr == 1.0 and isinstance(cfg.lr, float) and cfg.model.n_layer == 2 and cfg.betas == (0.9, 0.99)
    assert cfg.steps == 50 and cfg.model.d_model == 64 and cfg.max_grad_norm == math.inf and cfg.compile is True
    assert TrainConfig.from_dict(cfg.to_dict()) == cfg


@pytest.mark.parametrize("args, message", [
    (["--set", "learning_rate=1e-3"], "unknown config key 'learning_rate'"),
    (["--set", "model.n_embd=64"], "unknown config key 'model.n_embd'"),
    (["--config", "no/such/file.json"], "config file not found: no/such/file.json"),
    (["--set", "data=no/such/corpus.txt"], "data file not found: no/such/corpus.txt"),
    (["--set", "lr=-0.001"], "lr must be a number > 0, got -0.001"),
    (["--set", "lr=0"], "lr must be a number > 0, got 0.0"),
    (["--set", "steps=0"], "steps must be an int >= 1, got 0"),
    (["--set", "warmup=300"], "warmup (300) must be smaller than steps (300)"),
    (["--set", "precision=fp16"], "precision must be one of fp32, bf16, auto; got 'fp16'"),
    (["--set", "model.n_heads_kv=3"], "n_heads_q (4) must be a multiple of n_heads_kv (3)"),
    (["--set", "lr"], "--set expects key=value, got 'lr'"),
    (["--stop-at", "301"], "--stop-at must be between 0 and steps (300), got 301"),
])
def test_cli_bad_input_is_one_clear_line(args, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["--config", "tiny", "--set", "logger=none", *args]) == 2
    out = capsys.readouterr()
    assert out.err == f"error: {message}\n" or out.err.startswith(f"error: {message}"), out.err
    assert out.err.count("\n") == 1 and "Traceback" not in out.err
    assert not (tmp_path / "runs").exists()


def test_cli_exit_code_in_a_subprocess(tmp_path):
    done = subprocess.run([sys.executable, "-m", "trainkit.train", "--config", "tiny", "--set", "lr=-1"],
                          capture_output=True, text=True, env=run_env(), cwd=tmp_path, timeout=120)
    assert done.returncode == 2
    assert done.stderr == "error: lr must be a number > 0, got -1.0\n"


def last_line(capsys) -> str:
    out = capsys.readouterr()
    assert out.err == "", out.err
    return out.out.strip().splitlines()[-1]


def summary(first: int, last: int, seconds=r"\d+\.\d", evaluation: str | None = None, out_dir="") -> str:
    """The CLI's last line as a regular expression; ``evaluation``: the step count of the last evaluation."""
    ev = (r"no evaluation yet" if evaluation is None else
          rf"last evaluation \(after {evaluation} steps\): val loss \d+\.\d{{4}} \(best \d+\.\d{{4}}, "
          rf"unigram \d+\.\d{{4}}\)")
    return (rf"done: ran steps {first}\.\.{last} \({last - first + 1} steps\) in {seconds} s \| {ev} \| "
            rf"checkpoints in {re.escape(out_dir)}")


def test_cli_trains(tmp_path, capsys):
    cfg = micro(tmp_path, steps=4, eval_every=2).to_dict()
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    assert main(["--config", str(tmp_path / "c.json")]) == 0
    line = last_line(capsys)
    assert re.fullmatch(summary(0, 3, evaluation="4", out_dir=str(tmp_path)), line), line
    latest = torch.load(tmp_path / "latest.pt", weights_only=False)
    assert latest["step"] == 4
    h = latest["history"]
    assert f"val loss {h['val_loss'][-1]:.4f} (best {min(h['val_loss']):.4f}, " in line


def test_cli_stop_at_and_resume_say_what_ran(tmp_path, capsys):
    config = tmp_path / "c.json"
    config.write_text(json.dumps(micro(tmp_path, steps=8, eval_every=4).to_dict()))   # evaluations after 4 and 8
    run = ["--config", str(config)]
    resume = [*run, "--set", "resume=true"]
    early = " | stopped early at {} of 8 steps: resume with --set resume=true"

    assert main([*run, "--stop-at", "2"]) == 0            # steps 0 and 1, before any evaluation
    line = last_line(capsys)
    assert re.fullmatch(summary(0, 1, out_dir=str(tmp_path)) + re.escape(early.format(2)), line), line
    state = torch.load(tmp_path / "latest.pt", weights_only=False)
    assert state["step"] == 2 and state["history"]["step"] == [0, 1], "--stop-at 2 runs exactly steps 0..1"

    assert main([*resume, "--stop-at", "6"]) == 0         # 2..5, evaluating after 4 steps
    line = last_line(capsys)
    assert re.fullmatch(summary(2, 5, evaluation="4", out_dir=str(tmp_path)) + re.escape(early.format(6)), line), line

    assert main([*resume, "--stop-at", "7"]) == 0         # 6 only: the last evaluation is the checkpoint's
    line = last_line(capsys)
    assert re.fullmatch(summary(6, 6, evaluation="4", out_dir=str(tmp_path)) + re.escape(early.format(7)), line), line

    assert main(resume) == 0                              # 7, the last step, then the final evaluation
    line = last_line(capsys)
    assert re.fullmatch(summary(7, 7, evaluation="8", out_dir=str(tmp_path)), line), line

    assert main(resume) == 0                              # nothing left to run
    assert last_line(capsys) == f"done: no step ran: 8 of 8 optimiser steps had already run | checkpoints in {tmp_path}"
    assert main([*resume, "--stop-at", "3"]) == 0
    assert last_line(capsys) == (f"done: no step ran: 8 of 8 optimiser steps had already run (--stop-at 3) | "
                                 f"checkpoints in {tmp_path}")


def test_cli_stop_at_help_says_how_many_steps_run(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "stop once K optimiser steps have run (steps 0..K-1)" in " ".join(capsys.readouterr().out.split())


def test_config_errors_from_python(tmp_path):
    with pytest.raises(ConfigError, match="betas"):
        micro(tmp_path, betas=(0.9, 1.0))
    with pytest.raises(ConfigError, match="unknown config key 'nope'"):
        TrainConfig.from_dict({"nope": 1})
    with pytest.raises(ConfigError, match="batch_size 20000 x 1 rank"):
        Trainer(micro(tmp_path, batch_size=20000))   # 13 110 windows of 32 tokens in the train split
    # the validation split (1 455 windows) takes smaller evaluation batches instead of failing
    assert Trainer(micro(tmp_path, batch_size=4000)).eval_batch_size == 1455


# ------------------------------------------------------------------------------------------- benchmark peaks
def test_benchmark_peak_flops_match_the_exact_chip():
    spec = importlib.util.spec_from_file_location("train_throughput", ROOT / "benchmarks" / "train_throughput.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    cases = {   # torch.cuda.get_device_name() -> dense (bf16, fp32-matmul) peak, None where unknown or not native
        "NVIDIA H100 80GB HBM3": (989.5e12, 494.5e12), "NVIDIA H100 PCIe": (756.5e12, 378e12),
        "NVIDIA H100 NVL": (835.5e12, 417.5e12), "NVIDIA H100": (None, None),
        "NVIDIA H200": (989.5e12, 494.5e12), "NVIDIA H200 NVL": (835.5e12, 417.5e12),
        "NVIDIA A100-SXM4-80GB": (312e12, 156e12), "NVIDIA A100-PCIE-40GB": (312e12, 156e12),
        "NVIDIA A10": (125e12, 62.5e12), "NVIDIA A10G": (None, None),
        "NVIDIA L4": (121e12, 60e12), "NVIDIA L40S": (362e12, 183e12), "NVIDIA L40": (181e12, 90.5e12),
        "Tesla V100-SXM2-16GB": (None, 15.7e12), "Tesla V100-PCIE-32GB": (None, 14e12),
        "Tesla V100S-PCIE-32GB": (None, 16.4e12), "Tesla T4": (None, 8.1e12),
        "NVIDIA GeForce RTX 4090": (None, None),
    }
    for name, (bf16, fp32) in cases.items():
        got = (bench.peak_flops("bf16", name), bench.peak_flops("fp32", name))
        assert got == (bf16, fp32), f"{name}: peak (bf16, fp32) {got}, expected {(bf16, fp32)}"
