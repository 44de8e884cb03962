"""The capstone's manifest (``out_dir/manifest.json``): what each start of a run ran with, down to the commit of the
code (``git_sha``), so that a result can be traced back and a resumed run says what each part of it ran with."""
from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import torch

from trainkit.capstone.checkpoint import atomic_write_text
from trainkit.capstone.config import ConfigError
from trainkit.precision import fp32_matmul_precision

NOT_A_GIT_REPOSITORY = "not a git repository"


def git_sha(repo_dir: str | os.PathLike | None = None) -> str:
    """The commit of the code that trains (default: the git checkout holding this file), with ``+dirty`` when the
    work tree differs from it: a change to a tracked file, staged or not, or an untracked file that is not ignored
    (a new module the run imports is code the commit does not hold). ``"not a git repository"`` outside a checkout,
    in a repository with no commit yet, or where git cannot run."""
    repo_dir = repo_dir or Path(__file__).resolve().parent
    try:
        head = subprocess.run(["git", "rev-parse", "--verify", "HEAD"], cwd=repo_dir, capture_output=True,
                              text=True, timeout=10)
        if head.returncode != 0:
            return NOT_A_GIT_REPOSITORY
        status = subprocess.run(["git", "status", "--porcelain"], cwd=repo_dir, capture_output=True, text=True,
                                timeout=10)
    except (OSError, subprocess.SubprocessError):   # no git, a repo_dir that does not exist, a hung git
        return NOT_A_GIT_REPOSITORY
    # a status that cannot be read is not proof of a clean tree: count it as dirty
    dirty = status.returncode != 0 or status.stdout.strip() != ""
    return head.stdout.strip() + ("+dirty" if dirty else "")


def package_version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def build_manifest(trainer) -> dict:
    """This start's manifest: the settings, the code and its versions, the machine, the data, what "auto" and compile
    became, what a resume changed, and the notes of this start."""
    on_cuda = trainer.device.type == "cuda"
    return {"config": trainer.cfg.to_dict(), "git_sha": git_sha(), "torch": torch.__version__,
            "python": platform.python_version(), "platform": platform.platform(),
            "versions": {name: package_version(name) for name in ("numpy", "wandb", "tensorboard", "lion-pytorch")},
            "command": list(sys.argv), "threads": torch.get_num_threads(),
            # None on a CPU run
            "cuda": torch.version.cuda if on_cuda else None,
            "cudnn": torch.backends.cudnn.version() if on_cuda else None,
            "gpu": torch.cuda.get_device_name(trainer.device) if on_cuda else None,
            # how this run's fp32 matmuls compute: "tf32" on a GPU that has it (turned on by setup_precision), else
            # "ieee"
            "fp32_matmul": fp32_matmul_precision(trainer.device),
            "tokenizer": trainer.data.tokenizer.describe(),
            "data": {"source": trainer.cfg.data, **trainer.data.describe()},
            "seed": trainer.cfg.seed, "world_size": trainer.world_size, "device": str(trainer.device),
            "precision": trainer.precision, "compile": dict(trainer.compile_status), "params": trainer.counts,
            "unigram_val_loss": trainer.unigram_loss, "resumed_from_step": trainer.resumed_from,
            "resumed_from_file": trainer.resumed_file, "changed_on_resume": trainer.resume_changes,
            "out_dir_lock": trainer._lock_problem or "held", "notes": list(trainer.notes),
            "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def write_manifest(trainer) -> None:
    """manifest.json: this start's manifest (``trainer.manifest``), and under "previous_starts" those of the starts it
    resumed (oldest first), so a resumed run says what each part of it ran with."""
    path = trainer.out_dir / "manifest.json"
    previous = []
    if trainer.resumed_from is not None:
        try:
            before = json.loads(path.read_text())
            previous = before.pop("previous_starts", []) + [before]
        except (OSError, ValueError, AttributeError):   # missing or unreadable: the history starts here
            trainer.note(f"{path.name} of the run resumed from was missing or unreadable: its history is lost")
    text = json.dumps({**trainer.manifest, "previous_starts": previous}, indent=2, sort_keys=True, default=str)
    try:
        atomic_write_text(text + "\n", path)
    except OSError as e:   # a full disk, a file-size limit: no temporary is left behind
        raise ConfigError(f"cannot write {path}: {e.strerror or e}") from None
