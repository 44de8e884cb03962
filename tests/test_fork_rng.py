"""Code that draws with ``torch.manual_seed`` inside a fork gives back every device's generator, checked on a CPU too.

``torch.manual_seed`` seeds the CPU's generator and every CUDA device's; ``torch.random.fork_rng(devices=[])`` gives
back only the CPU's. On a GPU such code leaves the CUDA generators on the seed it drew with (lab 8's
``OtherInitTrainer``: the run's dropout then draws from ``init_seed``'s stream). A CPU has no CUDA generator to look
at, so there these tests stand one in (``torch.cuda.device_count()`` is 1, its generator only records how it was
seeded); on a GPU they look at the real ones. They check that what the lab teaches, and what trainkit does, leaves them
as they were:
- lab 8's test of ``OtherInitTrainer`` passes the reference and fails a fork of the CPU's generator alone, saying so;
- ``trainkit.tuning.run_config`` leaves the caller's generators, CPU and CUDA, where it found them.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import tempfile
from pathlib import Path

import pytest
import torch

from autograder import notebooks as nbu
from autograder.checks import expect
from trainkit import tuning
from trainkit.gpt import GPT, GPTConfig
from trainkit.runlog import RunLogger
from trainkit.train import TrainConfig, Trainer

ROOT = Path(__file__).resolve().parents[1]
LAB = ROOT / "solutions" / "08_infra_lab" / "08_infra_lab.ipynb"
FORK_ALL = "fork_rng(devices=range(torch.cuda.device_count()))"

ON_GPU = torch.cuda.is_available()
pytestmark = [pytest.mark.usefixtures("one_thread"),
              pytest.mark.skipif(not ON_GPU and torch.accelerator.current_accelerator() is not None,
                                 reason="another accelerator (Apple's MPS): fork_rng forks its generator, not CUDA's")]


@pytest.fixture
def cuda_generators(monkeypatch):
    """A reader of the CUDA generators' states, and the seeds torch.cuda.manual_seed_all is given from now on: the
    real generators on a GPU; without one, a stand-in device (the test cell's own stand-in is tested through the
    cell): torch.cuda.device_count() is 1, and its generator only records how it was seeded."""
    seeds = []
    if ON_GPU:
        real = torch.cuda.manual_seed_all

        def spy(seed):
            seeds.append(int(seed))
            real(seed)

        monkeypatch.setattr(torch.cuda, "manual_seed_all", spy)
        return torch.cuda.get_rng_state_all, seeds
    state = [torch.zeros(8, dtype=torch.uint8)]

    def seeded(seed):
        seeds.append(int(seed))
        state[0] = torch.tensor(list((int(seed) % 2 ** 64).to_bytes(8, "little")), dtype=torch.uint8)

    def restored(new_state, device="cuda"):
        state[0] = new_state.clone()

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "manual_seed_all", seeded)
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device="cuda": state[0].clone())
    monkeypatch.setattr(torch.cuda, "set_rng_state", restored)
    return (lambda: [state[0].clone()]), seeds


def _same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


def _other_init_cell(bf16_source: str) -> dict:
    """Lab 8's helpers, an answer to exercise 5, and the OtherInitTrainer test cell's own helpers (not its cases)."""
    cells = {nbu.grade_id(c): c.source for c in nbu.read(LAB).cells}
    ns = {"contextlib": contextlib, "dataclasses": dataclasses, "math": math, "tempfile": tempfile, "Path": Path,
          "torch": torch, "expect": expect, "GPT": GPT, "GPTConfig": GPTConfig, "TrainConfig": TrainConfig,
          "Trainer": Trainer, "RunLogger": RunLogger}
    exec(cells["lab_checks"], ns)
    exec(bf16_source, ns)
    helpers, cases = cells["test_bf16__other_init"].split("\nwith tempfile.TemporaryDirectory() as tmp:", 1)
    assert "def other_init_case" in helpers and "other_init_case(" in cases
    exec(helpers, ns)
    return ns


def test_the_other_init_test_fails_a_fork_of_the_cpu_generator_alone_and_says_why(tmp_path):
    reference = nbu.strip_solution_markers({nbu.grade_id(c): c.source for c in nbu.read(LAB).cells}["bf16"])
    assert reference.count(FORK_ALL) == 1, "the reference forks every device's generator"
    real = {name: getattr(torch.cuda, name) for name in ("device_count", "manual_seed_all", "get_rng_state")}

    ns = _other_init_cell(reference)
    dropout = dataclasses.replace(ns["micro"](tmp_path).model, dropout=0.1)
    ns["other_init_case"](str(tmp_path / "ref"), 2, steps=3, model=dropout)

    ns = _other_init_cell(reference.replace(FORK_ALL, "fork_rng(devices=[])"))
    with pytest.raises(AssertionError) as failed:
        ns["other_init_case"](str(tmp_path / "bug"), 2, steps=3, model=dropout)
    words = str(failed.value)
    assert "the CUDA generator is not where Trainer(cfg) leaves it" in words and FORK_ALL in words, words
    assert ON_GPU or "stood in one CUDA device" in words, "a CPU-only student is told why a CPU test speaks of CUDA"
    assert {name: getattr(torch.cuda, name) for name in real} == real, "the stand-in is taken back, even on a failure"


def test_the_references_init_seeds_cuda_which_only_the_fork_of_every_device_gives_back(tmp_path, cuda_generators):
    """The spy: building the reference's OtherInitTrainer seeds the CUDA generators with init_seed (the mistake has
    something to break), and leaves them as Trainer(cfg) does."""
    cuda_state, seeds = cuda_generators
    ns = _other_init_cell(nbu.strip_solution_markers({nbu.grade_id(c): c.source
                                                     for c in nbu.read(LAB).cells}["bf16"]))
    cfg = ns["micro"](tmp_path)
    Trainer(cfg).close()
    want = cuda_state()
    del seeds[:]
    ns["OtherInitTrainer"](cfg, 7).close()
    assert 7 in seeds, "torch.manual_seed(init_seed) seeds the CUDA generators too"
    assert _same(cuda_state(), want)


def test_tuning_runs_leave_every_devices_generator_as_they_found_it(cuda_generators):
    cuda_state, seeds = cuda_generators
    torch.manual_seed(123)
    cpu, cuda = torch.get_rng_state(), cuda_state()
    spec = tuning.load_visible_tasks()[0]
    tuning.run_config(spec, "adamw", {"lr": 3e-3}, 2, seed=5)
    assert 5 in seeds, "run_config seeds through torch.manual_seed (every device)"
    assert torch.equal(torch.get_rng_state(), cpu) and _same(cuda_state(), cuda)
