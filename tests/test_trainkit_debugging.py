"""trainkit.digits: scikit-learn's bundled digits as tensors, and the plain training run of lesson/lab 6."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from trainkit.digits import DigitsSplit, chance_loss, evaluate, load_digits_split, train_run
from trainkit.models import mlp


def test_digits_split_shapes_dtypes_and_disjoint_split():
    d = load_digits_split()
    assert d.x_train.shape == (1348, 64) and d.x_val.shape == (449, 64)
    assert d.x_train.dtype == torch.float32 and d.y_train.dtype == torch.int64
    assert set(d.y_train.tolist()) == set(range(10)) and set(d.y_val.tolist()) == set(range(10))
    raw = load_digits_split(standardize=False)
    rows = {tuple(r) for r in raw.x_train.tolist()}
    assert sum(tuple(r) in rows for r in raw.x_val.tolist()) < 5, "train and validation should be (nearly) disjoint"
    assert float(raw.x_train.min()) == 0.0 and float(raw.x_train.max()) == 16.0


def test_standardisation_uses_training_statistics_and_never_divides_by_zero():
    d = load_digits_split(seed=3)
    raw = load_digits_split(seed=3, standardize=False)
    assert torch.allclose(d.x_train.mean(0), torch.zeros(64), atol=1e-5)
    nonconstant = raw.x_train.std(0) > 0
    assert torch.allclose(d.x_train.std(0)[nonconstant], torch.ones(int(nonconstant.sum())), atol=1e-4)
    assert torch.isfinite(d.x_train).all() and torch.isfinite(d.x_val).all()
    assert (d.std[~nonconstant] == 1).all()
    assert torch.allclose(d.x_val, (raw.x_val - raw.mean) / raw.std)


def test_split_depends_on_the_seed_only():
    a, b, c = load_digits_split(seed=0), load_digits_split(seed=0), load_digits_split(seed=1)
    assert torch.equal(a.x_train, b.x_train) and not torch.equal(a.y_val, c.y_val)
    with pytest.raises(ValueError):
        load_digits_split(val_fraction=1.0)


def test_train_run_records_curves_and_learns():
    d = load_digits_split()
    torch.manual_seed(0)
    run = train_run(mlp(64, 32, 1, 10), d, steps=60, lr=3e-3, eval_every=20, max_norm=1.0)
    assert len(run.train_loss) == len(run.grad_norm) == len(run.lr) == 60
    assert run.val_steps == [0, 20, 40, 60] and len(run.val_loss) == 4
    assert all(type(v) is float for v in run.train_loss + run.val_loss)
    assert abs(run.train_loss[0] - chance_loss(10)) < 0.3, "an nn.Linear-initialised MLP starts near log 10"
    assert run.val_loss[-1] < 0.6 * run.val_loss[0] and run.val_acc[-1] > 0.8


def test_train_run_follows_lr_at_and_is_deterministic():
    d = load_digits_split()
    runs = []
    for _ in range(2):
        torch.manual_seed(1)
        runs.append(train_run(mlp(64, 16, 1, 10), d, steps=12, lr=0.0, optimizer="sgd",
                              lr_at=lambda s: 0.01 * (s + 1), seed=5))
    assert runs[0].lr == pytest.approx([0.01 * (s + 1) for s in range(12)])
    assert runs[0].train_loss == runs[1].train_loss
    with pytest.raises(ValueError):
        train_run(mlp(64, 4, 1, 10), d, steps=1, lr=1e-3, optimizer="lamb")


def test_evaluate_restores_the_mode_and_matches_cross_entropy():
    d = load_digits_split()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 10), torch.nn.Dropout(0.5))
    loss, acc = evaluate(model, d.x_val, d.y_val)
    assert model.training
    model.eval()
    with torch.no_grad():
        assert math.isclose(loss, F.cross_entropy(model(d.x_val), d.y_val).item(), rel_tol=1e-6)
    assert 0.0 <= acc <= 1.0
    assert isinstance(d, DigitsSplit) and chance_loss() == math.log(10)
