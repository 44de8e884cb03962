"""Item analysis after grading: which test cells and exercises work as tests, as an HTML report per lab.

    python -m autograder.term.items [--course-dir DIR] [--lab NAME ...] [--out DIR]

Read from the course gradebook (every autograded test cell's score per submission; no notebook is opened). For each
test cell and each exercise (its test cells together) of a lab, over the students who submitted it:
- pass rate: the share with full points (an exercise: full points on every one of its cells);
- mean points, and as a share of the item's points;
- discrimination: the point-biserial correlation of passing with the rest of the lab's score (the lab's autograded
  total less this item), so an item does not correlate with itself. Near 0 or negative: passing it says nothing
  about how well a student did elsewhere;
- the pass rates of the top and the bottom quarter by the rest of the score.
Flags: "strong students fail" (the top quarter passes less often than the bottom quarter: suspect the test, or what
it asks), "everyone passes" and "nobody passes" (98 % or more, 2 % or less: it separates nobody).

Judgement exercises (test cells that load the grader's unseen variants) are listed with their band cells, and with
the pass rate of each variant, the grader's unseen ones and the visible ones: a variant nobody passes points at the
variant, not at the class. Those come from what each graded kernel recorded (autograder/term/variants.py), with the
same statistics and flags, the variant's pass against the lab's total.

Writes ``<out>/index.html`` and ``<out>/<lab>.html`` (default ``grades/items/``): self-contained pages (plots inline
as PNG data URIs, no script, nothing fetched), sized for a class of hundreds: summaries, distributions and tables per
item, no row per student. Written answers (graded by hand) are left out: their scores may still be pending.
"""
from __future__ import annotations

import argparse
import base64
import html
import io
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from autograder.grade import gradebook
from autograder.notebooks import loads_unseen
from autograder.term import variants
from autograder.term.canvas import require_gradebook

EVERYONE_PASSES = 0.98    # "everyone passes": this share or more has full points ("nobody passes": 1 - this or less)
QUARTER = 0.25            # strong (weak) students: the rest of their score is in the top (bottom) quarter
FULL = 1e-9               # a score within this of the maximum is full points
PLOTTED = 80              # variants per exercise in the plot at most (the table lists them all)

PER_VARIANT_NOTE = (
    "Each variant's pass rate comes from what the submission's kernel recorded while its band cells ran "
    "(trainkit.checks.record_outcomes): a statistic for you, never a grade. A submission could write its own record; "
    "one that is not a record is dropped. Submissions graded before the records existed have none: grade again.")


@dataclass
class Stats:
    """One item's statistics over the students who submitted (module docstring)."""
    n: int
    max_score: float
    pass_rate: float
    mean: float
    discrimination: float | None      # None where passing or the rest of the score does not vary
    strong_pass_rate: float           # the top quarter by the rest of the score
    weak_pass_rate: float             # the bottom quarter
    flags: list[str] = field(default_factory=list)


def point_biserial(passed: np.ndarray, rest: np.ndarray) -> float | None:
    """Pearson's correlation of a 0/1 outcome with a score (the point-biserial); None where either is constant."""
    x, y = passed.astype(float), rest.astype(float)
    if len(x) < 2 or x.std() == 0 or y.std() == 0:
        return None
    return float(np.corrcoef(x, y)[0, 1])


def item_stats(scores: np.ndarray, max_score: float, rest: np.ndarray) -> Stats:
    """The statistics and flags of one item: its score per student, its maximum, the rest of each student's score."""
    scores, rest = np.asarray(scores, float), np.asarray(rest, float)
    passed = scores >= max_score - FULL
    strong, weak = rest >= np.quantile(rest, 1 - QUARTER), rest <= np.quantile(rest, QUARTER)
    stats = Stats(n=len(scores), max_score=max_score, pass_rate=float(passed.mean()), mean=float(scores.mean()),
                  discrimination=point_biserial(passed, rest), strong_pass_rate=float(passed[strong].mean()),
                  weak_pass_rate=float(passed[weak].mean()))
    if stats.strong_pass_rate < stats.weak_pass_rate:
        stats.flags.append("strong students fail")
    if stats.pass_rate >= EVERYONE_PASSES:
        stats.flags.append("everyone passes")
    if stats.pass_rate <= 1 - EVERYONE_PASSES:
        stats.flags.append("nobody passes")
    return stats


def exercise_of(grade_id: str) -> str:
    """The exercise a test cell belongs to, by the course's naming rule (CONTRIBUTING.md: test_<name>[__<part>])."""
    return grade_id[len("test_"):].partition("__")[0] if grade_id.startswith("test_") else grade_id


@dataclass
class Lab:
    """One lab's autograded test cells and each submission's score on them."""
    name: str
    cells: list[str]                  # grade ids, in notebook order ("notebook/grade id" when a lab has several)
    max_scores: np.ndarray            # per cell
    scores: np.ndarray                # submissions x cells
    judgement: set[str]               # exercises that load unseen variants
    students: list[str] = field(default_factory=list)     # the rows of scores
    outcomes: dict[str, dict] = field(default_factory=dict)   # student -> the variants record (term/variants.py)

    def exercises(self) -> dict[str, list[int]]:
        """{exercise: the indices of its cells}, in notebook order."""
        out: dict[str, list[int]] = {}
        for i, cell in enumerate(self.cells):
            out.setdefault(exercise_of(cell.rpartition("/")[2]), []).append(i)
        return out

    def cell_stats(self) -> dict[str, Stats]:
        total = self.scores.sum(axis=1)
        return {cell: item_stats(self.scores[:, i], float(self.max_scores[i]), total - self.scores[:, i])
                for i, cell in enumerate(self.cells)}

    def exercise_stats(self) -> dict[str, Stats]:
        """An exercise as one item: its cells' points summed; passed when every cell has full points."""
        total = self.scores.sum(axis=1)
        out = {}
        for exercise, idx in self.exercises().items():
            points = self.scores[:, idx].sum(axis=1)   # full points on the sum = on every cell (none exceeds its max)
            out[exercise] = item_stats(points, float(self.max_scores[idx].sum()), total - points)
        return out


def read_lab(gb, lab: str) -> Lab:
    """A lab from an open gradebook: its autograded test cells worth points, and every submission's scores."""
    assignment = gb.find_assignment(lab)
    several = len(assignment.notebooks) > 1
    cells, keys, maxima, judgement = [], [], [], set()
    for nb in assignment.notebooks:
        sources = {sc.name: sc.source or "" for sc in nb.source_cells}
        for gc in nb.grade_cells:                               # in the order nbgrader stored them: the notebook's
            if gc.cell_type != "code" or not gc.max_score:      # written answers; 0-point cells that load variants
                continue
            cells.append(f"{nb.name}/{gc.name}" if several else gc.name)
            keys.append((nb.name, gc.name))
            maxima.append(float(gc.max_score))
        judgement |= {exercise_of(name) for name, source in sources.items() if loads_unseen(source)}
    # Every grade of the lab in one query (nbgrader's own column for the score: manual, else auto, plus extra credit):
    # walking the submissions object by object loads each lazily: 14.5 s instead of 0.6 s for 300 students, 8 labs.
    from nbgrader.api import Grade, GradeCell, Notebook, SubmittedAssignment, SubmittedNotebook

    grades = (gb.db.query(SubmittedAssignment.student_id, Notebook.name, GradeCell.name, Grade.score)
              .select_from(Grade)
              .join(SubmittedNotebook, Grade.notebook_id == SubmittedNotebook.id)
              .join(SubmittedAssignment, SubmittedNotebook.assignment_id == SubmittedAssignment.id)
              .join(GradeCell, Grade.cell_id == GradeCell.id)
              .join(Notebook, GradeCell.notebook_id == Notebook.id)
              .filter(Notebook.assignment_id == assignment.id))
    column = {key: i for i, key in enumerate(keys)}
    rows: dict[str, np.ndarray] = {}
    for student, notebook, cell, score in grades:
        row = rows.setdefault(student, np.zeros(len(keys)))
        if (notebook, cell) in column:
            row[column[notebook, cell]] = score or 0.0
    scores = np.array(list(rows.values())).reshape(len(rows), len(keys))
    return Lab(lab, cells, np.array(maxima), scores, judgement & {exercise_of(c.rpartition("/")[2]) for c in cells},
               students=list(rows))


def variant_stats(lab: Lab) -> dict[tuple[str, str], dict[str, Stats]]:
    """{(exercise, which variants): {variant: Stats}} from the recorded outcomes: a variant as an item worth 1 point,
    passed or not, against the student's autograded total (the statistics and flags of any item)."""
    total = dict(zip(lab.students, lab.scores.sum(axis=1))) if len(lab.scores) else {}
    seen: dict[tuple[str, str], dict[str, list[tuple[float, float]]]] = {}
    for student, record in lab.outcomes.items():
        if student not in total:
            continue
        for exercise, groups in record.items():
            if exercise not in lab.judgement:     # a record names only the lab's own judgement exercises
                continue
            for what, rows in groups.items():
                group = seen.setdefault((exercise, what), {})
                for row in rows:
                    group.setdefault(row["name"], []).append((float(row["passed"]), float(total[student])))
    out = {}
    for key in sorted(seen, key=lambda k: (k[0], not variants.is_unseen(k[1]), k[1])):
        out[key] = {}
        for name, pairs in seen[key].items():
            passed, rest = np.array(pairs).T
            out[key][name] = item_stats(passed, 1.0, rest)   # a variant is no part of the total
    return out


# ---- the HTML ---------------------------------------------------------------------------------------------------

CSS = """
body { font-family: system-ui, sans-serif; max-width: 70rem; margin: 1.5rem auto; padding: 0 1rem; color: #222; }
h1 { margin-bottom: .2rem; } h2 { margin-top: 2rem; border-bottom: 1px solid #ddd; }
.summary { color: #444; } .note { background: #fff7e0; border-left: 4px solid #e0a800; padding: .5rem .8rem; }
table { border-collapse: collapse; margin: .5rem 0 1rem; font-size: .9rem; }
th, td { padding: .2rem .6rem; border-bottom: 1px solid #eee; text-align: right; } td { white-space: nowrap; }
th { background: #f4f4f4; position: sticky; top: 0; } td.name, th.name { text-align: left; font-family: monospace; }
.flag { color: #b00020; font-weight: 600; text-align: left; } td.none { color: #999; }
img { max-width: 100%; } nav a { margin-right: 1rem; }
"""


def pct(x: float) -> str:
    return f"{100 * x:.0f} %"


def figure_uri(fig) -> str:
    """A matplotlib figure as an inline PNG (a data URI), closed after."""
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def plots(lab: Lab, cells: dict[str, Stats], exercises: dict[str, Stats]) -> list[str]:
    """The lab's plots: the distribution of totals with each exercise's pass rate; each cell's pass rate against its
    discrimination, flagged cells marked and named."""
    from trainkit.plotting import label, subplots

    total_max = float(lab.max_scores.sum())
    fig, (left, right) = subplots(1, 2, width=11, height=max(3.4, 0.28 * len(exercises) + 1.2))
    step = max(1, math.ceil(total_max / 40))   # whole points per bin: a bin per score where there are few
    left.hist(lab.scores.sum(axis=1), bins=np.arange(-0.5, total_max + step, step), color="C0")
    label(left, f"autograded total ({len(lab.scores)} submissions)", f"points (of {total_max:g})", "students")
    names = list(exercises)[::-1]
    right.barh(names, [100 * exercises[e].pass_rate for e in names],
               color=["C3" if exercises[e].flags else "C0" for e in names])
    right.set_xlim(0, 100)
    label(right, "exercise pass rate (red: flagged)", "% with full points")
    out = [figure_uri(fig)]

    fig, ax = subplots(width=11, height=4.2)
    x = np.array([100 * s.pass_rate for s in cells.values()])
    y = np.array([np.nan if s.discrimination is None else s.discrimination for s in cells.values()])
    flagged = np.array([bool(s.flags) for s in cells.values()])
    ax.scatter(x[~flagged], y[~flagged], s=18, color="C0", label="cell")
    ax.scatter(x[flagged], y[flagged], s=30, color="C3", marker="D", label="flagged cell")
    for name, xi, yi, f in zip(cells, x, y, flagged):
        if f and np.isfinite(yi):
            ax.annotate(name.rpartition("/")[2].removeprefix("test_"), (xi, yi), fontsize=7, xytext=(3, 3),
                        textcoords="offset points")
    ax.axhline(0, color="k", lw=0.6)
    ax.set_xlim(-3, 103)
    label(ax, "test cells: pass rate against discrimination (cells where nobody or everyone passes have none)",
          "pass rate %", "point-biserial r")
    out.append(figure_uri(fig))
    return out


def stats_table(rows: dict[str, Stats], first: str, judgement: set[str] = frozenset()) -> str:
    head = (f"<tr><th class=name>{first}</th><th>points</th><th>pass rate</th><th>mean points</th>"
            "<th>discrimination r</th><th>top quarter passes</th><th>bottom quarter passes</th>"
            "<th class=flag>flags</th></tr>")
    body = []
    for name, s in rows.items():
        r = "<td class=none>—</td>" if s.discrimination is None else f"<td>{s.discrimination:+.2f}</td>"
        mark = " (judgement)" if name in judgement else ""
        body.append(f"<tr><td class=name>{html.escape(name)}{mark}</td><td>{s.max_score:g}</td><td>{pct(s.pass_rate)}"
                    f"</td><td>{s.mean:.2f} ({pct(s.mean / s.max_score if s.max_score else 0)})</td>{r}"
                    f"<td>{pct(s.strong_pass_rate)}</td><td>{pct(s.weak_pass_rate)}</td>"
                    f"<td class=flag>{html.escape(', '.join(s.flags))}</td></tr>")
    return f"<table>{head}{''.join(body)}</table>"


def variants_section(lab: Lab) -> str:
    """Each judgement exercise's variants: a plot of the unseen ones' pass rates, a table per group of variants."""
    groups = variant_stats(lab)
    recorded = sum(1 for s in lab.outcomes if s in set(lab.students))
    head = (f"<h3>Pass rate of each variant</h3><p class=note>{html.escape(PER_VARIANT_NOTE)}</p>"
            f"<p>Records from {recorded} of {len(lab.students)} submissions.</p>")
    if not groups:
        return head
    parts = [head]
    unseen = {k: v for k, v in groups.items() if variants.is_unseen(k[1])}
    if unseen:
        parts.append(f"<p><img alt='plot' src='{variants_plot(unseen)}'></p>")
    for (exercise, what), rows in groups.items():
        flagged = sum(bool(s.flags) for s in rows.values())
        parts.append(f"<h4>{html.escape(exercise)}: {html.escape(what)} ({len(rows)} variants, {flagged} flagged)</h4>"
                     + stats_table(rows, "variant"))
    return "".join(parts)


def plain(text: str) -> str:
    """Text for matplotlib as it is: a name from a record must not be read as TeX ("$...$" can stop the report)."""
    return text.replace("$", r"\$")


def variants_plot(groups: dict[tuple[str, str], dict[str, Stats]]) -> str:
    """The unseen variants' pass rates, one panel per exercise, flagged variants in red."""
    from trainkit.plotting import label, subplots

    heights = [max(1.6, 0.2 * min(len(rows), PLOTTED) + 0.9) for rows in groups.values()]
    fig, axes = subplots(len(groups), 1, width=11, height=sum(heights), squeeze=False,
                         gridspec_kw={"height_ratios": heights})
    for ax, ((exercise, what), rows) in zip(axes[:, 0], groups.items()):
        names = list(rows)[:PLOTTED][::-1]      # the table below lists every variant
        ax.barh(range(len(names)), [100 * rows[n].pass_rate for n in names],
                color=["C3" if rows[n].flags else "C0" for n in names])
        for y, n in enumerate(names):   # named, not only coloured: a variant nobody passes has no bar to colour
            if rows[n].flags:
                ax.text(100 * rows[n].pass_rate + 1, y, ", ".join(rows[n].flags), color="C3", fontsize=7, va="center")
        ax.set_yticks(range(len(names)), [plain(n[:60]) for n in names], fontsize=7)
        ax.set_xlim(0, 100)
        label(ax, plain(f"{exercise}: {what} (red: flagged)"), "% of submissions that pass it")
    return figure_uri(fig)


def lab_page(lab: Lab) -> str:
    """One lab's self-contained HTML page."""
    title = html.escape(lab.name)
    if not len(lab.scores) or not lab.cells:
        return (f"<!doctype html><html lang=en><meta charset=utf-8><title>{title}</title><style>{CSS}</style>"
                f"<nav><a href=index.html>all labs</a></nav><h1>{title}</h1><p>No graded submissions yet.</p></html>")
    cells, exercises = lab.cell_stats(), lab.exercise_stats()
    totals = lab.scores.sum(axis=1)
    total_max = float(lab.max_scores.sum())
    flagged = {**{f"exercise {e}": s for e, s in exercises.items() if s.flags},
               **{c: s for c, s in cells.items() if s.flags}}
    hardest_first = dict(sorted(cells.items(), key=lambda kv: (kv[1].pass_rate, kv[0])))
    images = "".join(f"<p><img alt='plot' src='{uri}'></p>" for uri in plots(lab, cells, exercises))
    judgement = ""
    if lab.judgement or lab.outcomes:
        bands = {c: s for c, s in cells.items() if exercise_of(c.rpartition("/")[2]) in lab.judgement}
        judgement = (f"<h2>Judgement exercises: {html.escape(', '.join(sorted(lab.judgement)) or 'see below')}</h2>"
                     + (f"<p>Their band cells, in notebook order:</p>{stats_table(bands, 'test cell')}" if bands else "")
                     + variants_section(lab))
    return f"""<!doctype html><html lang=en><meta charset=utf-8><title>Item analysis: {title}</title>
<style>{CSS}</style>
<nav><a href=index.html>all labs</a></nav>
<h1>Item analysis: {title}</h1>
<p class=summary>{len(totals)} submissions; autograded total: mean {totals.mean():.1f} / {total_max:g},
median {np.median(totals):.1f}; {len(exercises)} exercises, {len(cells)} test cells worth points;
{len(flagged)} flagged.</p>
{images}
<h2>Flagged ({len(flagged)})</h2>
{stats_table(flagged, 'item') if flagged else '<p>Nothing flagged.</p>'}
<h2>Exercises (notebook order)</h2>
{stats_table(exercises, 'exercise', lab.judgement)}
{judgement}
<h2>Test cells, hardest first</h2>
{stats_table(hardest_first, 'test cell')}
<h2>How these are computed</h2>
<p>Over the students who submitted this lab. <b>Pass rate</b>: the share with full points on the item (an exercise:
on all of its test cells). <b>Discrimination r</b>: the point-biserial correlation of passing the item with the rest
of the lab's autograded score (the total less the item's points); "—" where passing or the rest does not vary.
<b>Top (bottom) quarter</b>: the students whose rest of the score is at or above its {pct(1 - QUARTER)} quantile
(at or below its {pct(QUARTER)} quantile). <b>Flags</b>: "strong students fail" when the top quarter passes less often
than the bottom quarter (suspect the test or what it asks); "everyone passes" at {pct(EVERYONE_PASSES)} or more and
"nobody passes" at {pct(1 - EVERYONE_PASSES)} or less (it separates nobody). Written answers, graded by hand, are not
included.</p>
</html>
"""


def index_page(labs: list[Lab]) -> str:
    rows = []
    for lab in labs:
        n = len(lab.scores)
        flagged = (sum(bool(s.flags) for s in lab.cell_stats().values()) +
                   sum(bool(s.flags) for s in lab.exercise_stats().values())) if n and lab.cells else 0
        mean = f"{100 * lab.scores.sum(axis=1).mean() / lab.max_scores.sum():.0f} %" if n and lab.cells else "—"
        rows.append(f"<tr><td class=name><a href='{html.escape(lab.name)}.html'>{html.escape(lab.name)}</a></td>"
                    f"<td>{n}</td><td>{mean}</td><td>{len(lab.cells)}</td><td>{flagged}</td></tr>")
    return f"""<!doctype html><html lang=en><meta charset=utf-8><title>Item analysis</title><style>{CSS}</style>
<h1>Item analysis</h1>
<table><tr><th class=name>lab</th><th>submissions</th><th>mean autograded score</th><th>test cells</th>
<th>flagged items</th></tr>{''.join(rows)}</table>
</html>
"""


def write_report(course: Path, out: Path, labs: list[str] | None = None) -> list[Lab]:
    """Read the gradebook and write the index and one page per lab into ``out``; return the labs read."""
    with gradebook(course) as gb:
        known = [a.name for a in gb.assignments]
        unknown = [lab for lab in labs or [] if lab not in known]
        if unknown:
            raise SystemExit(f"not in the gradebook: {', '.join(unknown)} (labs there: {', '.join(known) or 'none'})")
        read = [read_lab(gb, lab) for lab in labs or known]
    for lab in read:
        lab.outcomes = variants.load(course, lab.name, set(lab.students))
    out.mkdir(parents=True, exist_ok=True)
    for lab in read:
        (out / f"{lab.name}.html").write_text(lab_page(lab), encoding="utf-8")
    (out / "index.html").write_text(index_page(read), encoding="utf-8")
    return read


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder.term.items", description=__doc__.split("\n\n")[0])
    parser.add_argument("--course-dir", type=Path, default=Path("."), help="the course folder (default: here)")
    parser.add_argument("--lab", action="append", help="only this lab (repeat for several; default: all)")
    parser.add_argument("--out", type=Path, help="the report's folder (default: grades/items/)")
    args = parser.parse_args(argv)
    course = args.course_dir.resolve()
    require_gradebook(course)
    out = args.out or course / "grades" / "items"
    for lab in write_report(course, out, args.lab):
        flagged = [c for c, s in lab.cell_stats().items() if s.flags] if len(lab.scores) and lab.cells else []
        print(f"{lab.name}: {len(lab.scores)} submissions, {len(flagged)} flagged test cell(s)")
    print(f"wrote {out / 'index.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
