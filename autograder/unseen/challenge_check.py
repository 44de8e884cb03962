"""Lab 8's challenge on the grader's side: the hidden seed, the trusted re-scoring, the class leaderboard.

Instructor-only (not in the student edition). During ``make grade`` each submission's kernel, in its sandbox,
re-runs the student's entry with ``HIDDEN_SEED`` (the hidden part of the challenge's test cells) and writes the
trained weights and the run's record into ``$TRAINKIT_CHALLENGE_DIR``. Then, outside the sandbox, ``apply``:
- loads that file without running any of its code (``torch.load(weights_only=True)``), checks the model against
  the challenge's rules before building it, and scores the weights itself with ``trainkit.challenge.evaluate``;
- gives each challenge test cell at most the points that trusted score earns (a kernel that reported a better
  number than its weights give, or no weights at all, earns nothing from the re-run's cells);
- writes ``challenge.json`` (the verified record) next to the autograded notebook.
``write_leaderboard`` ranks every graded submission's verified score into ``grades/challenge_leaderboard.csv`` and
``.html``. What this does not prove: that the entry's code stayed inside its budget by means the harness cannot
see from the kernel (training outside ``run_entry``, weights smuggled into the notebook); read the code of the
top entries, as every leaderboard that re-runs submissions does.

Where the bands come from (``trainkit.challenge.BANDS``; kept here, out of the student edition, because the figures name
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
from pathlib import Path

ASSIGNMENT = "08_infra_lab"
HIDDEN_SEED = 1729
# The challenge's test cells and the band each one needs (trainkit.challenge.BANDS).
CELLS = {"test_challenge_entry__learns": "learns", "test_challenge_entry__preset": "preset",
         "test_challenge_entry__tuned": "tuned"}
RUN_FILE = f"seed{HIDDEN_SEED}.pt"
RECORD = "challenge.json"
TOLERANCE = 1e-3     # the kernel's and the grader's evaluate() may differ in the last digits (thread counts)


def verify(path: Path) -> dict:
    """The trusted record of one saved run: {"status": "verified" | reason, "val_loss", "claimed", ...}."""
    import torch

    from trainkit import challenge
    from trainkit.gpt import GPT, GPTConfig

    if not path.is_file():
        return {"status": "no run saved (the entry did not run to the end with the hidden seed)"}
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True)
        record, model_fields, state = saved["record"], saved["model"], saved["state_dict"]
        claimed = float(record["val_loss"])
        tokens, steps = int(record["tokens"]), int(record["steps"])
    except Exception as exc:          # not our file format: nothing of it is trusted
        return {"status": f"unreadable run file ({type(exc).__name__})"}
    out = {"claimed": claimed, "tokens": tokens, "steps": steps, "wall_s": record.get("wall_s"),
           "overrides": record.get("overrides"), "trainer": str(record.get("trainer", ""))[:80],
           "seed": record.get("seed")}
    if record.get("seed") != HIDDEN_SEED:
        return {**out, "status": f"the run used seed {record.get('seed')!r}, not the grader's"}
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
    except Exception as exc:
        return {**out, "status": f"the weights do not load into the model they claim ({type(exc).__name__})"}
    out["val_loss"] = val_loss
    if not math.isfinite(val_loss):
        return {**out, "status": "the weights score a non-finite loss"}
    if abs(val_loss - claimed) > TOLERANCE:
        return {**out, "status": f"the kernel reported {claimed:.4f}, its weights score {val_loss:.4f}"}
    return {**out, "status": "verified"}


def reaches(record: dict, band: str) -> bool:
    """Whether a trusted record's loss reaches a band (trainkit.challenge.BANDS)."""
    from trainkit.challenge import BANDS

    return record.get("status") == "verified" and record["val_loss"] <= BANDS[band]


def apply(result, challenge_dir: Path) -> None:
    """Cap the challenge cells of a graded ``autograder.grade.Result`` at what the trusted score earns: a cell keeps
    its points only where the grader's own scoring of the re-run's weights reaches the cell's band."""
    cells = {key: CELLS[key[1]] for key in result.grades if key[1] in CELLS}
    if result.assignment != ASSIGNMENT or not cells:
        return
    record = verify(challenge_dir / RUN_FILE)
    for key, band in cells.items():
        auto, needs_manual = result.grades[key]
        result.grades[key] = (auto if reaches(record, band) else 0.0, needs_manual)
    record["points"] = {cell: result.grades[nb, cell][0] for (nb, cell) in cells}
    dest = result.scratch / "autograded" / result.student / result.assignment / RECORD
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(json.dumps(record, indent=1, default=str), encoding="utf-8")


def forget(course: Path, student: str, assignment: str) -> None:
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
    from trainkit.challenge import BANDS, TOKEN_BUDGET

    head = "".join(f"<th>{html.escape(c)}</th>" for c in COLUMNS)
    body = "\n".join("<tr>" + "".join(f"<td>{html.escape(str(r[c]))}</td>" for c in COLUMNS) + "</tr>" for r in rows)
    bands = ", ".join(f"{html.escape(k)} &le; {v:.2f}" for k, v in BANDS.items())
    (out / "challenge_leaderboard.html").write_text(
        "<!doctype html><html><head><meta charset='utf-8'><title>Lab 8 challenge: leaderboard</title>"
        "<style>body{font-family:sans-serif}td,th{padding:2px 8px;border-bottom:1px solid #ddd}</style></head><body>"
        "<h1>Lab 8 challenge: leaderboard</h1>"
        f"<p>Validation loss of each entry re-run by the grader with a seed nobody saw, scored from its weights "
        f"(budget {TOKEN_BUDGET:,} training tokens). Bands: {bands}.</p>"
        f"<table><tr>{head}</tr>\n{body}</table></body></html>\n", encoding="utf-8")
    return out / "challenge_leaderboard.csv"
