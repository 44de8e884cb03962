"""Instructor side of lab 6's blind setups: the grader's unseen setups, and which of them show their bug.

The unseen setups break the same six parts as the visible ones (``trainkit.labs.lab06_debugging_protocol.broken_setups``), on other widths, depths,
dropout rates and data splits, and also with bugs of their own (``UNSEEN_BUGS``): each of the same kind as a visible
bug (``SHOWN_BY``) but another mechanism, size or place of it, so a method that only recognises the visible bugs misses
them and one that checks each part against what it is meant to do finds them. This module is instructor-only (not in the student edition) for the same reason as ``runbank_check``: with the hidden
variants in sight, a student could look for them instead of checking the parts.

A setup is graded only if its bug matters: the run it produces reports a final validation loss clearly worse than the
sound run's (``shows_bug``, at least 8 % above it, on two seeds). ``python -m autograder.banks build setups`` checks
every unseen spec and stores the ones that pass (autograder/unseen/setups_unseen.json); grading builds them from their specs,
which takes milliseconds, and never trains them. tests/test_broken_setups.py checks that the stored ones still show.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from trainkit.labs.lab06_debugging_protocol import broken_setups as bs

UNSEEN_FILE = Path(__file__).with_name("setups_unseen.json")


def _label_smoothing(s: bs.Setup):
    return lambda out, y: F.cross_entropy(out, y, label_smoothing=0.95)


def _scaled_targets(s: bs.Setup):
    return lambda out, y: F.mse_loss(out, 0.2 * y)               # targets "normalised" by the wrong factor


def _one_batch(s: bs.Setup):
    batch = s.intent["batch_size"]
    fixed = torch.randperm(len(s.data.y_train), generator=torch.Generator().manual_seed(7))[:batch]
    return lambda targets, epoch, generator: fixed.clone()       # the same minibatch every step


def _warmup_forever(s: bs.Setup):
    lr0 = s.intent["lr"]
    return lambda step, steps_per_epoch: lr0 * min(1.0, step / (100 * steps_per_epoch))


def _sum_eval(s: bs.Setup):
    sound = s.loss
    return lambda m, x, y: bs.eval_mode_loss(m, x, y, sound)[0] * len(y)      # a sum over the examples, not a mean


def _shuffled_eval(s: bs.Setup):
    sound = s.loss
    perm = torch.randperm(len(s.data.y_val), generator=torch.Generator().manual_seed(0))
    return lambda m, x, y: bs.eval_mode_loss(m, x, y[perm], sound)[0]         # targets shuffled apart from inputs


def _shuffled_targets(s: bs.Setup):
    perm = torch.randperm(len(s.data.y_train), generator=torch.Generator().manual_seed(11))
    return bs._with_data(s, y_train=s.data.y_train[perm])


def _noisy_leak(s: bs.Setup):
    d = s.data
    g = torch.Generator().manual_seed(3)
    y = d.y_train.float()
    x = d.x_train.clone()
    column = 39 if s.task == "digits" else 5
    x[:, column] = (y - y.mean()) / y.std() + 0.3 * torch.randn(len(y), generator=g)
    return bs._with_data(s, x_train=x)


def _dead_units(s: bs.Setup):
    sound = s.model

    def model():
        m = sound()
        with torch.no_grad():
            for layer in m.trunk.modules():
                if isinstance(layer, nn.Linear):
                    layer.bias.fill_(-30.0)                     # every hidden unit starts (and stays) off
        return m
    return model


def _frozen_trunk(s: bs.Setup):
    sound = s.model

    def model():
        m = sound()
        m.trunk.requires_grad_(False)
        return m
    return model


def _detached_loss(s: bs.Setup):
    sound = s.loss
    return lambda out, y: sound(out.detach(), y) + 0.0 * out.sum()   # the right value, and no gradient at all


def _stale_eval(s: bs.Setup):
    sound = s.evaluate
    seen = {}

    def evaluate(m, x, y):                                  # a metric cached once per model: the first value forever
        if id(m) not in seen:
            seen[id(m)] = (m, sound(m, x, y))
        return seen[id(m)][1]
    return evaluate


class Net(bs.Net):
    """A model whose forward calls F.dropout without training=self.training: dropout on in eval mode too."""

    def forward(self, x):
        return self.head(F.dropout(self.trunk(x), 0.5))


def _functional_dropout(s: bs.Setup):
    sound = s.model

    def model():
        m = sound()
        return Net(m.trunk, m.head)
    return model


def _narrow(s: bs.Setup):
    spec = s.spec

    def model():                                        # an eighth of the width the intent says
        return bs._net(*bs.NET_ARGS[s.task](max(2, spec["width"] // 8), spec["depth"], spec["dropout"]))
    return model


def _two_classes_per_batch(s: bs.Setup):
    batch = s.intent["batch_size"]

    def order(targets, epoch, generator):              # a fresh permutation of all examples every epoch, but each
        ranked = torch.argsort(targets.float() + 0.01 * torch.rand(len(targets), generator=generator))
        blocks = ranked[:len(ranked) // batch * batch].view(-1, batch // 2)    # minibatch holds two runs of
        pick = torch.randperm(len(blocks), generator=generator)              # neighbouring targets only,
        pairs = blocks[pick].view(-1, 2, batch // 2).transpose(1, 2)          # interleaved one by one
        rest = ranked[len(ranked) // batch * batch:]
        return torch.cat([pairs.reshape(-1), rest])
    return order


UNSEEN_BUGS = {
    ("data", "shuffled_targets"): _shuffled_targets,
    ("data", "noisy_leak"): _noisy_leak,
    ("model", "init_x6"): lambda s: bs._scaled_init(s, 6.0),
    ("model", "dead_units"): _dead_units,
    ("model", "frozen_trunk"): _frozen_trunk,
    ("model", "functional_dropout"): _functional_dropout,
    ("model", "narrow"): _narrow,
    ("loss", "detached"): _detached_loss,
    ("loss", "label_smoothing"): _label_smoothing,
    ("loss", "scaled_targets"): _scaled_targets,
    ("order", "one_batch"): _one_batch,
    ("order", "two_classes_per_batch"): _two_classes_per_batch,
    ("lr", "warmup_forever"): _warmup_forever,
    ("lr", "x1000"): lambda s: bs._lr_times(s, 1000.0),
    ("evaluate", "sum"): _sum_eval,
    ("evaluate", "shuffled_targets"): _shuffled_eval,
    ("evaluate", "stale"): _stale_eval,
}
# The visible bug that shows each hidden one's kind of breakage (another mechanism, size or place of the same kind), so
# that a careful student's visible setups show every kind the grader's use: a method that passes the visible setups by
# checking each part against the table's contract passes these too (tests/test_broken_setups.py).
SHOWN_BY = {
    ("data", "shuffled_targets"): ("data", "misaligned"),             # targets that do not belong to their inputs
    ("data", "noisy_leak"): ("data", "noisy_column"),                 # an input that carries the target, with noise
    ("model", "init_x6"): ("model", "init_x10"),                      # weights far from nn.Linear's default scale
    ("model", "dead_units"): ("model", "biased_off"),                 # hidden units that start off or saturated
    ("model", "frozen_trunk"): ("model", "frozen_head"),              # parameters that do not require a gradient
    ("model", "functional_dropout"): ("model", "input_dropout"),      # random in eval mode
    ("model", "narrow"): ("model", "thin"),                           # fewer units than the intent says
    ("loss", "detached"): ("loss", "reversed_gradient"),              # the right value, the wrong gradient
    ("loss", "label_smoothing"): ("loss", "smoothed"),                # another loss of the logits
    ("loss", "scaled_targets"): ("loss", "tripled_targets"),          # the targets rescaled inside the loss
    ("order", "one_batch"): ("order", "first_tenth"),                 # a part of the training set only
    ("order", "two_classes_per_batch"): ("order", "class_blocks"),    # minibatches of neighbouring targets
    ("lr", "warmup_forever"): ("lr", "x0.01"),                        # far below the intended rate
    ("lr", "x1000"): ("lr", "x300"),                                  # far above it
    ("evaluate", "sum"): ("evaluate", "chunk_sum"),                   # a sum, not a mean
    ("evaluate", "shuffled_targets"): ("evaluate", "rolled_targets"),  # targets apart from their inputs
    ("evaluate", "stale"): ("evaluate", "snapshot"),                  # an old model's loss
}
UNSEEN_TASK_BUGS = {
    "digits": [k for k in UNSEEN_BUGS if k[1] != "scaled_targets"],
    "regression": [k for k in UNSEEN_BUGS if k[1] != "label_smoothing"],
}
SETTINGS = [dict(width=128, depth=1, dropout=0.0, data_seed=1), dict(width=48, depth=2, dropout=0.5, data_seed=2)]


def unseen_specs() -> list[dict]:
    """Every hidden bug on each task in two settings, and every visible bug not in ``bs.ONCE`` in one (alternating),
    all on other widths, depths and data splits than the visible setups (a train-mode evaluation only where there is
    dropout)."""
    specs = []
    for task in bs.TASKS:
        for part, kind in UNSEEN_TASK_BUGS[task]:
            specs += [{"task": task, "part": part, "kind": kind, **setting} for setting in SETTINGS]
        for k, (part, kind) in enumerate(k for k in bs.TASK_BUGS[task] if k not in bs.ONCE):
            setting = SETTINGS[1] if kind == "train_mode" else SETTINGS[k % 2]
            specs.append({"task": task, "part": part, "kind": kind, **setting})
    return specs


def make(spec: dict) -> bs.Setup:
    return bs.make_setup(spec, UNSEEN_BUGS)


def shows_bug(spec: dict, seeds=(0, 1)) -> bool:
    """Whether the broken setup's run reports a final validation loss at least 8 % above the sound run's, on every
    seed (a non-finite loss counts as above)."""
    sound = bs.make_setup({k: v for k, v in spec.items() if k not in ("part", "kind")})
    for seed in seeds:
        broken = bs.train_setup(make(spec), seed)[1].val_loss[-1]
        good = bs.train_setup(sound, seed)[1].val_loss[-1]
        if math.isfinite(broken) and broken < 1.08 * good:
            return False
    return True


def build(path: Path = UNSEEN_FILE) -> list[dict]:
    """Check every unseen spec and store those whose bug shows; refuses if a part would be left with none
    (``python -m autograder.banks build setups``)."""
    torch.set_num_threads(1)
    specs = unseen_specs()
    kept = [spec for spec in specs if shows_bug(spec)]
    missing = set(bs.PARTS) - {spec["part"] for spec in kept}
    if missing:
        raise SystemExit(f"no unseen setup of part(s) {sorted(missing)} shows its bug; change their settings")
    path.write_text(json.dumps({"version": 1, "specs": kept}, indent=0) + "\n")
    dropped = [s for s in specs if s not in kept]
    print(f"stored {len(kept)} of {len(specs)} unseen setups in {path}; left out: {dropped}")
    return kept


def unseen() -> list[bs.Setup]:
    """The grader's unseen setups (``build``'s specs), each with ``.part`` and ``.spec``."""
    return [make(spec) for spec in json.loads(UNSEEN_FILE.read_text())["specs"]]
