"""Lab 8's challenge on the grader's side: the course's seed, the trusted re-scoring, the class leaderboard.

Instructor-only (not in the student edition). During ``make grade`` each submission's kernel, in its sandbox,
re-runs the student's entry with the course's seed (``graders_seed``, called by the hidden part of the challenge's
test cells) and writes the trained weights and the run's record into ``$TRAINKIT_CHALLENGE_DIR`` as ``RUN_FILE``.
Then, outside the sandbox, ``apply``:
- loads that file without running any of its code (``torch.load(weights_only=True)``), checks the model against
  the challenge's rules before building it, and scores the weights itself with ``trainkit.labs.lab08_infra_lab.challenge.evaluate``;
- gives each challenge test cell at most the points that trusted score earns (a kernel that reported a better
  number than its weights give, or no weights at all, earns nothing from the re-run's cells);
- writes ``challenge.json`` (the verified record) next to the autograded notebook.
``write_leaderboard`` ranks every graded submission's verified score into ``grades/challenge_leaderboard.csv`` and
``.html``. What this does not prove: that the entry's code stayed inside its budget by means the harness cannot
see from the kernel (training outside ``run_entry``, weights smuggled into the notebook); read the code of the
top entries, as every leaderboard that re-runs submissions does.

The course's seed (``course_seed``) is in no file of the repository: it is drawn with ``secrets`` the first time the
grader imports this module and kept in ``SEED_FILE`` next to it, in the instructor's checkout (git-ignored; the student
edition never ships this folder; the sandbox hides it; ``autograder.lending`` lends it, with this module, only to the
test cells that import this module). No message, file name, record or leaderboard names it. What that does not hide:
the student's code runs with it during grading (it is the run's ``cfg.seed``), so a determined student can print it
into their own graded notebook and tune on it before resubmitting. Delete the file to draw a new seed for a new class
(keep it while a class is graded: a new seed changes every challenge score at the next regrade).

Where the bands come from (``trainkit.labs.lab08_infra_lab.challenge.BANDS``; kept here, out of the student edition, because the figures name
tuned configurations): the top band, ``TUNED_LOSS`` = 2.25, is what careful tuning reaches. A trial student who tuned
for 27 minutes (one layer of width 160, one KV head, MLP 256, 800 steps of 4 sequences, lr 1e-3, warmup 80) scored
1.95-2.13 over seeds 0-7; the reference entry (the same with WSD) 1.86-2.04 over seeds 0-4, 7 and 1729; the preset's
model at 800 x 4 with lr 1.5e-3 and warmup 80 2.18-2.19 over six seeds. The first changes a hasty student makes stay
above it: 400 x 8 at 4e-3 2.42-2.47, 800 x 4 with WSD at the preset's lr 2.28-2.32. Measured on the native (AVX-512)
and ``default`` kernel paths, with the same scores.
"""
from __future__ import annotations

import csv
import html
import json
import math
import os
import secrets
from pathlib import Path

ASSIGNMENT = "08_infra_lab"
# The challenge's test cells and the band each one needs (trainkit.labs.lab08_infra_lab.challenge.BANDS).
CELLS = {"test_challenge_entry__learns": "learns", "test_challenge_entry__preset": "preset",
         "test_challenge_entry__tuned": "tuned"}
RUN_FILE = "graded_run.pt"     # = trainkit.labs.lab08_infra_lab.challenge.GRADED_RUN_FILE: a name that does not carry the seed
RECORD = "challenge.json"
# lending's convention (<stem>_unseen.json for <stem>_check.py): the file is lent with this module, and only with it
SEED_FILE = "challenge_unseen.json"
TOLERANCE = 1e-3     # the kernel's and the grader's evaluate() may differ in the last digits (thread counts)


# ------------------------------------------------------------------------------------------------ the seed
def _here() -> Path:
    return Path(__file__).resolve().parent


def _is_lent() -> bool:
    """Whether this is a copy the grader lent to a test cell (its own temporary folder), not the instructor's file."""
    import autograder

    return _here() != Path(autograder.UNSEEN_DIR).resolve()


def course_seed(folder: str | Path | None = None) -> int:
    """The course's challenge seed: the one in ``folder/SEED_FILE`` (default: next to this module), drawn there on
    first use. A lent copy only reads the seed the grader lent with it: drawing one there would grade on a seed that
    nobody keeps."""
    # the default is spelt out for tests/test_lending.py, which checks that a module reads only what is lent with it
    path = Path(__file__).resolve().with_name("challenge_unseen.json") if folder is None else Path(folder) / SEED_FILE
    if not path.is_file():
        if folder is None and _is_lent():
            raise RuntimeError("the grader lent this test no challenge seed (autograder/lending.py lends "
                               f"autograder/unseen/{SEED_FILE} with this module): the grader's fault, not yours")
        _draw(path)
    return int(json.loads(path.read_text(encoding="utf-8"))["seed"])


def _draw(path: Path) -> None:
    """Write a fresh seed to ``path`` unless one is there: the first writer wins, so graders that start at once
    (parallel workers, shards) keep one seed."""
    # 63 random bits: far too many seeds to find this one by re-running an entry until its score matches one that
    # a feedback or the leaderboard shows (a run is seconds)
    text = json.dumps({"seed": secrets.randbits(63),
                       "about": "lab 8's challenge seed for this course (autograder/unseen/challenge_check.py): "
                                "never commit or publish it"}) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)   # the instructor's only
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    try:
        os.link(tmp, path)          # atomic, and fails where another grader's seed is already in place
    except FileExistsError:
        pass
    finally:
        tmp.unlink(missing_ok=True)


def graders_seed() -> int:
    """The seed a challenge test cell re-runs the entry with at grading (the hidden part binds this function, not the
    number, so that ``lending.forget`` takes it out of the notebook after the cell, and the checks cell knows to name
    it "the grader's seed" and never print it)."""
    return course_seed()


# Drawn now, outside any sandbox, when the grader imports this module from the instructor's folder (autograder/grade.py
# does, before it lends anything): lending lists the data files it lends with a module by what is in the folder.
if not _is_lent():
    try:
        course_seed()
    except OSError:      # a read-only checkout: apply() (the grader, before it trusts a run) raises it again
        pass


# ------------------------------------------------------------------------------------------------ the re-scoring
def verify(path: Path, seed: int | None = None) -> dict:
    """The trusted record of one saved run with the course's seed (or ``seed``): {"status": "verified" | reason,
    "val_loss", "claimed", ...}. The record holds no seed: it reaches the leaderboard."""
    import torch

    from trainkit.labs.lab08_infra_lab import challenge
    from trainkit.capstone.gpt import GPT, GPTConfig

    if not path.is_file():
        return {"status": "no run saved (the entry did not run to the end with the grader's seed)"}
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)
        record, model_fields, state = saved["record"], saved["model"], saved["state_dict"]
        claimed = float(record["val_loss"])
        tokens, steps = int(record["tokens"]), int(record["steps"])
    except Exception as exc:   # noqa: BLE001 -- not our file format: nothing of it is trusted
        return {"status": f"unreadable run file ({type(exc).__name__})"}
    out = {"claimed": claimed, "tokens": tokens, "steps": steps, "wall_s": record.get("wall_s"),
           "overrides": record.get("overrides"), "trainer": str(record.get("trainer", ""))[:80]}
    if record.get("seed") != (course_seed() if seed is None else seed):
        return {**out, "status": "the run did not use the grader's seed"}
    if tokens > challenge.TOKEN_BUDGET or steps > challenge.MAX_STEPS:
        return {**out, "status": f"over budget: {tokens:,} tokens in {steps} steps"}
    try:
        cfg = GPTConfig(**model_fields)
        if cfg.vocab_size != 256 or cfg.block_size != challenge.BLOCK_SIZE:
            return {**out, "status": "the model's vocabulary or context is not the challenge's"}
        if challenge.non_embedding(cfg) > challenge.MAX_NON_EMBEDDING:
            return {**out, "status": "the model is larger than the challenge allows"}
        model = GPT(cfg)
        model.load_state_dict(state, strict=True)
        val_loss = challenge.evaluate(model.float())
    except Exception as exc:   # noqa: BLE001 -- a submission's weights: any failure is its fault
        return {**out, "status": f"the weights do not load into the model they claim ({type(exc).__name__})"}
    out["val_loss"] = val_loss
    if not math.isfinite(val_loss):
        return {**out, "status": "the weights score a non-finite loss"}
    if abs(val_loss - claimed) > TOLERANCE:
        return {**out, "status": f"the kernel reported {claimed:.4f}, its weights score {val_loss:.4f}"}
    return {**out, "status": "verified"}


def reaches(record: dict, band: str) -> bool:
    """Whether a trusted record's loss reaches a band (trainkit.labs.lab08_infra_lab.challenge.BANDS)."""
    from trainkit.labs.lab08_infra_lab.challenge import BANDS

    return record.get("status") == "verified" and record["val_loss"] <= BANDS[band]


def after_grading(result, challenge_dir: Path) -> None:
    """Cap the challenge cells of a graded ``autograder.grade.Result`` at what the trusted score earns: a cell keeps
    its points only where the grader's own scoring of the re-run's weights reaches the cell's band."""
    cells = {key: CELLS[key[1]] for key in result.grades if key[1] in CELLS}
    if result.assignment != ASSIGNMENT or not cells:
        return
    seed = course_seed()    # raises (the grader's fault: grade.py keeps the old grade) where there is none to read
    record = verify(challenge_dir / RUN_FILE, seed)
    for key, band in cells.items():
        auto, needs_manual = result.grades[key]
        result.grades[key] = (auto if reaches(record, band) else 0.0, needs_manual)
    record["points"] = {cell: result.grades[nb, cell][0] for (nb, cell) in cells}
    dest = result.scratch / "autograded" / result.student / result.assignment / RECORD
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(record, indent=1, default=str), encoding="utf-8")
    result.grader_files.append(RECORD)     # the course keeps it (grade.copy_graded): the grader wrote it, not the kernel


def forget_submission(course: Path, student: str, assignment: str) -> None:
    """A submission that scored 0 for its own fault: its earlier verified run leaves the leaderboard."""
    (course / "autograded" / student / assignment / RECORD).unlink(missing_ok=True)


# --------------------------------------------------------------------------------------------- leaderboard
COLUMNS = ["rank", "student", "val_loss", "status", "tokens", "steps", "wall_s", "trainer", "changes_from_preset"]


def leaderboard_rows(course: Path) -> list[dict]:
    """One row per graded submission, verified scores first, lowest loss first."""
    rows = []
    for path in sorted((course / "autograded").glob(f"*/{ASSIGNMENT}/{RECORD}")):
        try:
            rec = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        loss = rec.get("val_loss") if rec.get("status") == "verified" else None
        rows.append({"student": path.parent.parent.name, "val_loss": loss, "status": rec.get("status", ""),
                     "tokens": rec.get("tokens", ""), "steps": rec.get("steps", ""), "wall_s": rec.get("wall_s", ""),
                     "trainer": rec.get("trainer", ""),
                     "changes_from_preset": json.dumps(rec.get("overrides") or {}, sort_keys=True)})
    rows.sort(key=lambda r: (r["val_loss"] is None, r["val_loss"] if r["val_loss"] is not None else 0, r["student"]))
    for i, row in enumerate(rows, 1):
        row["rank"] = i if row["val_loss"] is not None else ""
        row["val_loss"] = f"{row['val_loss']:.4f}" if row["val_loss"] is not None else ""
    return rows


def write_leaderboard(course: Path) -> Path | None:
    """grades/challenge_leaderboard.csv and .html from the verified records; None when nobody has one."""
    rows = leaderboard_rows(course)
    if not rows:
        return None
    out = course / "grades"
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "challenge_leaderboard.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    from trainkit.labs.lab08_infra_lab.challenge import BANDS, TOKEN_BUDGET

    head = "".join(f"<th>{html.escape(c)}</th>" for c in COLUMNS)
    body = "\n".join("<tr>" + "".join(f"<td>{html.escape(str(r[c]))}</td>" for c in COLUMNS) + "</tr>" for r in rows)
    bands = ", ".join(f"{html.escape(k)} &le; {v:.2f}" for k, v in BANDS.items())
    (out / "challenge_leaderboard.html").write_text(
        "<!doctype html><html><head><meta charset='utf-8'><title>Lab 8 challenge: leaderboard</title>"
        "<style>body{font-family:sans-serif}td,th{padding:2px 8px;border-bottom:1px solid #ddd}</style></head><body>"
        "<h1>Lab 8 challenge: leaderboard</h1>"
        f"<p>Validation loss of each entry re-run by the grader with a seed drawn at random for this course and "
        f"published nowhere (not in the lab, the feedback or this page), scored by the grader from the weights the run "
        f"saved (budget {TOKEN_BUDGET:,} training tokens). Each entry's own code ran with that seed while it was "
        f"graded, so the seed is unpublished, not unknowable. Bands: {bands}.</p>"
        f"<table><tr>{head}</tr>\n{body}</table></body></html>\n", encoding="utf-8")
    return out / "challenge_leaderboard.csv"


def after_batch(course: Path) -> str | None:
    """Once per ``make grade``: the class leaderboard from the verified records (a line to print, or None)."""
    board = write_leaderboard(course)
    return None if board is None else f"lab 8 challenge leaderboard: {board} (and .html)"
