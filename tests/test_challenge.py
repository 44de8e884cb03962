"""Lab 8's challenge: the rules hold, the score is the same measure for everyone, the grader trusts only weights, and
the grader's seed is the course's own secret: in no file of the repository and named in no feedback or leaderboard.

The runs here are short entries (20 steps), seconds each; the preset's own scores are measured by
``benchmarks/challenge.py``, not here (a minute of CPU per seed).
"""
from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import pickle
import stat
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import autograder
from autograder import challenge_check, lending
from autograder import notebooks as nbu
from trainkit.labs.lab08_infra_lab import challenge
from trainkit.capstone.gpt import GPT, GPTConfig
from trainkit.train import Trainer

ROOT = Path(__file__).resolve().parents[1]
SHORT = {"steps": 20, "batch_size": 4, "warmup": 2}
SEED = challenge_check.course_seed()      # this checkout's own (drawn on first use): no test depends on its value


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("entry,words", [
    (({"steps": 400}, Trainer), "budget is 204,800"),
    (({"steps": 801, "batch_size": 2}, Trainer), "at most 800"),
    (({"seed": 3}, Trainer), "fixes ['seed']"),
    (({"device": "cuda"}, Trainer), "fixes ['device']"),
    (({"data": "other.txt"}, Trainer), "fixes ['data']"),
    (({"model": {"block_size": 128}, "batch_size": 8}, Trainer), "block_size 64"),
    (({"model": {"n_layer": 6}}, Trainer), "at most 197,248"),
    (({"precision": "auto"}, Trainer), "'fp32' or 'bf16'"),
    (({"learning_rate": 1e-3}, Trainer), "not TrainConfig fields: ['learning_rate']"),
    (({"lr": -1.0}, Trainer), "valid TrainConfig"),
    (({}, object), "subclass"),
    (({}, Trainer, 1), "pair"),
    (({"model": 3}, Trainer), "dict of GPTConfig fields"),
])
def test_an_entry_that_breaks_a_rule_is_refused_by_name(entry, words):
    with pytest.raises(challenge.ChallengeError, match=None) as info:
        challenge.check_entry(entry)
    assert words in str(info.value)


def test_the_preset_is_a_valid_entry_and_the_caps_are_what_the_lab_says():
    challenge.check_entry(({}, Trainer))
    preset = GPTConfig(**challenge.PRESET_MODEL)
    assert challenge.MAX_NON_EMBEDDING == 2 * challenge.non_embedding(preset)
    assert challenge.TOKEN_BUDGET == challenge.PRESET["steps"] * challenge.PRESET["batch_size"] * 64 == 204_800
    cfg = challenge.build_config({"model": {"n_layer": 3}}, seed=5, out_dir="/tmp/x")
    assert (cfg.model.n_layer, cfg.model.d_model, cfg.seed, cfg.device, cfg.logger) == (3, 64, 5, "cpu", "none")


def test_evaluate_is_the_mean_loss_over_the_whole_validation_split():
    torch.manual_seed(0)
    model = GPT(GPTConfig(**challenge.PRESET_MODEL)).train()
    inputs, targets = challenge._val_windows()
    with torch.no_grad():
        model.eval()
        per_window = [model(inputs[i:i + 1], targets[i:i + 1])[1].item() for i in range(len(inputs))]
        model.train()
    assert len(inputs) == (46_620 - 1) // 64
    assert challenge.evaluate(model) == pytest.approx(sum(per_window) / len(per_window), rel=1e-5)
    assert model.training, "evaluate must leave the model in the mode it found it in"


def test_a_run_counts_its_budget_and_saves_weights_the_grader_verifies(tmp_path):
    path = tmp_path / challenge_check.RUN_FILE
    run = challenge.run_entry((SHORT, Trainer), SEED, save_to=path)
    assert (run.steps, run.tokens, run.seed, run.trainer) == (20, 20 * 4 * 64, SEED, "Trainer")
    assert run.overrides == SHORT and run.val_loss < 5.6
    record = challenge_check.verify(path)
    assert record["status"] == "verified"
    assert record["val_loss"] == pytest.approx(run.val_loss, abs=1e-6)
    again = challenge.run_entry((SHORT, Trainer), SEED)
    assert again.val_loss == run.val_loss, "a run is a pure function of the entry and the seed"
    other = challenge.run_entry((SHORT, Trainer), 0)
    assert other.val_loss != run.val_loss


def test_a_trainer_that_steps_past_its_budget_or_the_clock_is_stopped(monkeypatch):
    class Greedy(Trainer):
        def fit(self, steps=None):
            for s in range(self.cfg.steps + 5):
                self.train_step(s)
            return {}

    with pytest.raises(challenge.ChallengeError, match="more than its 20 steps"):
        challenge.run_entry((SHORT, Greedy), 0)
    monkeypatch.setattr(challenge, "WALL_CAP_S", -1.0)
    with pytest.raises(challenge.ChallengeError, match="wall clock"):
        challenge.run_entry((SHORT, Trainer), 0)


def _saved(tmp_path, **changes):
    """A saved run file of an untrained preset model, with its record (and parts) changed."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(**challenge.PRESET_MODEL))
    run = challenge.ChallengeRun(seed=SEED, val_loss=challenge.evaluate(model), tokens=1024,
                                 steps=4, wall_s=1.0, non_embedding=0, overrides={}, trainer="Trainer")
    path = tmp_path / "run.pt"
    challenge.save_run(path, replace(run, **changes), model)
    return path


def test_the_grader_trusts_the_weights_not_the_record(tmp_path):
    assert challenge_check.verify(_saved(tmp_path))["status"] == "verified"
    assert "reported 1.0000" in challenge_check.verify(_saved(tmp_path, val_loss=1.0))["status"]
    assert "did not use the grader's seed" in challenge_check.verify(_saved(tmp_path, seed=0))["status"]
    assert "over budget" in challenge_check.verify(_saved(tmp_path, tokens=10**6))["status"]
    assert "no run saved" in challenge_check.verify(tmp_path / "missing.pt")["status"]
    saved = torch.load(_saved(tmp_path), weights_only=True)
    saved["model"]["d_model"] = 32                        # the weights are not this model's
    torch.save(saved, tmp_path / "other.pt")
    assert "do not load" in challenge_check.verify(tmp_path / "other.pt")["status"]
    saved["model"].update(d_model=512, d_ff=2048)          # larger than the rules allow: refused before it is built
    torch.save(saved, tmp_path / "large.pt")
    assert "larger" in challenge_check.verify(tmp_path / "large.pt")["status"]


class _Payload:
    def __reduce__(self):
        return (Path.write_text, (Path("/tmp/challenge-pwned"), "ran"))


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")   # torch.load's note on the hand-made pickle
def test_a_run_file_that_carries_code_is_not_run(tmp_path):
    Path("/tmp/challenge-pwned").unlink(missing_ok=True)
    (tmp_path / "evil.pt").write_bytes(pickle.dumps({"record": _Payload()}))
    torch.save({"record": _Payload(), "model": {}, "state_dict": {}}, tmp_path / "evil2.pt")
    for name in ("evil.pt", "evil2.pt"):
        assert "unreadable" in challenge_check.verify(tmp_path / name)["status"]
    assert not Path("/tmp/challenge-pwned").exists()


def _result(tmp_path, student, grades):
    return SimpleNamespace(assignment=challenge_check.ASSIGNMENT, student=student, scratch=tmp_path / student,
                           grades=dict(grades), grader_files=[])


def test_apply_keeps_a_cells_points_only_where_the_trusted_score_reaches_its_band(tmp_path):
    nb = challenge_check.ASSIGNMENT
    kernel_says = {(nb, "test_challenge_entry__learns"): (1.0, False), (nb, "test_challenge_entry__preset"): (1.0, False),
                   (nb, "test_challenge_entry__tuned"): (2.0, False), (nb, "test_other"): (1.0, False)}
    honest = _result(tmp_path, "honest", kernel_says)
    run_dir = tmp_path / "honest-runs"
    run_dir.mkdir()
    challenge.run_entry((SHORT, Trainer), SEED, save_to=run_dir / challenge_check.RUN_FILE)
    challenge_check.after_grading(honest, run_dir)
    # 20 steps learn little: the trusted score misses every band, whatever the kernel claimed
    assert honest.grades == {**kernel_says, (nb, "test_challenge_entry__learns"): (0.0, False),
                             (nb, "test_challenge_entry__preset"): (0.0, False), (nb, "test_challenge_entry__tuned"): (0.0, False)}
    record = json.loads((honest.scratch / "autograded" / "honest" / nb / challenge_check.RECORD).read_text())
    assert record["status"] == "verified" and record["val_loss"] > challenge.BANDS["learns"]

    missing = _result(tmp_path, "missing", kernel_says)
    challenge_check.after_grading(missing, tmp_path / "nothing-here")
    assert missing.grades[nb, "test_challenge_entry__learns"] == (0.0, False) and missing.grades[nb, "test_other"] == (1.0, False)

    record = {"status": "verified", "val_loss": challenge.BANDS["preset"]}
    assert challenge_check.reaches(record, "learns") and challenge_check.reaches(record, "preset")
    assert not challenge_check.reaches(record, "tuned")


def test_the_leaderboard_ranks_verified_scores_and_escapes_names(tmp_path):
    def record(student, **rec):
        path = tmp_path / "autograded" / student / challenge_check.ASSIGNMENT / challenge_check.RECORD
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(rec))

    record("bea", status="verified", val_loss=2.41, tokens=204800, steps=400, overrides={"steps": 400, "batch_size": 8})
    record("<al>&co", status="verified", val_loss=2.35, tokens=204800, steps=800, overrides={"batch_size": 4})
    record("cy", status="the kernel reported 1.0000, its weights score 2.9000", tokens=204800, steps=200)
    assert challenge_check.write_leaderboard(tmp_path) == tmp_path / "grades" / "challenge_leaderboard.csv"
    import csv

    rows = list(csv.DictReader(open(tmp_path / "grades" / "challenge_leaderboard.csv", encoding="utf-8")))
    assert [(r["rank"], r["student"], r["val_loss"]) for r in rows] == [
        ("1", "<al>&co", "2.3500"), ("2", "bea", "2.4100"), ("", "cy", "")]
    assert json.loads(rows[1]["changes_from_preset"]) == {"batch_size": 8, "steps": 400}
    page = (tmp_path / "grades" / "challenge_leaderboard.html").read_text()
    assert "&lt;al&gt;&amp;co" in page and "<al>" not in page
    assert challenge_check.write_leaderboard(tmp_path / "empty") is None


# ------------------------------------------------------------------------------------------------ the course's seed
def test_each_course_folder_draws_its_own_seed_once_and_keeps_it(tmp_path):
    first, again = challenge_check.course_seed(tmp_path / "a"), challenge_check.course_seed(tmp_path / "a")
    other = challenge_check.course_seed(tmp_path / "b")
    assert first == again and first != other, "a course keeps its seed; another course draws its own"
    assert 0 <= first < 2 ** 63 and 0 <= other < 2 ** 63
    path = tmp_path / "a" / challenge_check.SEED_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600, "the seed file is the instructor's only"
    challenge_check._draw(path)           # a second grader that drew at the same moment: the first seed stays
    assert challenge_check.course_seed(tmp_path / "a") == first
    assert sorted(p.name for p in path.parent.iterdir()) == [challenge_check.SEED_FILE], "no temporary file is left"


def test_the_seed_is_in_no_file_of_the_repository():
    assert not hasattr(challenge_check, "HIDDEN_SEED"), "the seed is drawn per course, not a constant"
    assert challenge_check.RUN_FILE == challenge.GRADED_RUN_FILE and str(SEED) not in challenge_check.RUN_FILE
    seed_file = Path(autograder.UNSEEN_DIR) / challenge_check.SEED_FILE
    assert json.loads(seed_file.read_text())["seed"] == SEED
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    git = ["git", "-C", str(ROOT)]
    ignored = subprocess.run([*git, "check-ignore", "-q", str(seed_file)])
    assert ignored.returncode == 0, f"{seed_file} must be git-ignored: it is the course's secret"
    found = subprocess.run([*git, "grep", "-l", "-F", str(SEED)], capture_output=True, text=True)
    assert found.returncode == 1 and not found.stdout, f"the course's seed is in tracked files: {found.stdout}"


def test_the_seed_is_lent_with_the_module_and_a_lent_copy_never_draws_one():
    """What a challenge test cell gets at grading (autograder/lending.py): the module and the course's seed file, in a
    temporary folder of the kernel. Without the file, the lent copy refuses rather than grade on a seed of its own."""
    name = "autograder.challenge_check"
    assert lending.secret_modules()["challenge_check"] == (challenge_check.SEED_FILE,)
    code = lending.lend_code(["challenge_check"])
    assert challenge_check.SEED_FILE in code
    source = Path(challenge_check.__file__).read_text(encoding="utf-8")
    try:
        exec(code, {})
        lent = sys.modules[name]
        assert lent is not challenge_check and Path(lent.__file__).parent != Path(challenge_check.__file__).parent
        assert lent.graders_seed() == SEED
        lending.forget()
        lending.lend(["challenge_check"], {"challenge_check.py": source})      # the module without its seed
        lent = sys.modules[name]
        with pytest.raises(RuntimeError, match="lent this test no challenge seed"):
            lent.graders_seed()
        assert not Path(lent.__file__).with_name(challenge_check.SEED_FILE).exists()
    finally:
        lending.forget()
    assert challenge_check.course_seed() == SEED


def _challenge_cells() -> dict[str, str]:
    """The source notebook's challenge cells by grade_id (hidden tests included), and the demo cell after them."""
    cells = nbu.read(ROOT / "solutions" / challenge_check.ASSIGNMENT / f"{challenge_check.ASSIGNMENT}.ipynb").cells
    index = {nbu.grade_id(c): i for i, c in enumerate(cells)}
    out = {gid: cells[index[gid]].source for gid in ("lab_checks", "challenge_checks", *challenge_check.CELLS)}
    out["demo"] = next(c.source for c in cells[index["test_challenge_entry__tuned"] + 1:] if c.cell_type == "code")
    return out


def test_no_feedback_record_or_leaderboard_names_the_seed(tmp_path, monkeypatch):
    """The challenge's cells run as at grading (their hidden parts, $TRAINKIT_CHALLENGE_DIR set) on a short entry that
    misses every band: every message says "the grader's seed" and none holds the number; the run the grader scores is
    the course's; its record and the leaderboard hold no seed either."""
    import dataclasses

    from trainkit.checks import expect

    cells = _challenge_cells()
    run_dir = tmp_path / "challenge"
    run_dir.mkdir()
    monkeypatch.setenv("TRAINKIT_CHALLENGE_DIR", str(run_dir))
    ns = {"contextlib": contextlib, "math": math, "dataclasses": dataclasses, "Path": Path, "expect": expect,
          "Trainer": Trainer, "TrainConfig": challenge.TrainConfig, "GPTConfig": GPTConfig,
          "challenge_entry": lambda: (dict(SHORT), Trainer)}
    exec(cells["lab_checks"], ns)
    exec(cells["challenge_checks"], ns)
    shown, messages = io.StringIO(), []
    with contextlib.redirect_stdout(shown):
        for gid in challenge_check.CELLS:
            with pytest.raises(AssertionError) as failed:
                exec(nbu.strip_solution_markers(cells[gid]), ns)
            messages.append(str(failed.value))
        exec(cells["demo"], ns)
    assert all("the grader's seed" in m for m in messages), messages
    assert str(SEED) not in "\n".join([*messages, shown.getvalue()]) and "grader's seed" in shown.getvalue()
    assert [r.seed for r in ns["_challenge_runs"].values()] == [None], "one run, kept without its seed"
    assert sorted(p.name for p in run_dir.iterdir()) == [challenge_check.RUN_FILE]

    nb = challenge_check.ASSIGNMENT
    result = _result(tmp_path, "ann", {(nb, cell): (1.0, False) for cell in challenge_check.CELLS})
    challenge_check.after_grading(result, run_dir)
    record_file = result.scratch / "autograded" / "ann" / nb / challenge_check.RECORD
    assert json.loads(record_file.read_text())["status"] == "verified", "the cells' run is the one the grader scores"
    course = tmp_path / "course"
    (course / "autograded" / "ann" / nb).mkdir(parents=True)
    (course / "autograded" / "ann" / nb / challenge_check.RECORD).write_text(record_file.read_text())
    challenge_check.write_leaderboard(course)
    page = (course / "grades" / "challenge_leaderboard.html").read_text()
    board = (course / "grades" / "challenge_leaderboard.csv").read_text()
    for what in (record_file.read_text(), page, board):
        assert str(SEED) not in what
    assert "published nowhere" in page and "nobody saw" not in page
    assert next(csv.DictReader(io.StringIO(board)))["status"] == "verified"
