"""Similarity: the pairs of submissions whose answer cells are unusually similar, as evidence for a person to read.

    python -m autograder.term.similarity LAB [--course DIR] [--out DIR] [--from submitted|autograded] [--top N]

Reads every student's notebooks of one lab (``<course>/submitted/<student>/<lab>/*.ipynb``, or ``autograded/``),
keeps only the answer cells (nbgrader solution cells, code), and compares every pair of students cell by cell with
copydetect's k-gram fingerprints (MOSS-style: comments and whitespace dropped, names, functions and strings
normalised). What the course dictates is left out before anything is compared:

- every line that appears verbatim (whitespace aside) in the released lab (any cell, code or markdown, inline code
  spans included) or in the solution notebook's markdown: the starter code, the signatures, the spec's formulas;
- the fingerprints of the released lab's code (the starter code reformatted still counts as starter code);
- the fingerprints that more than ``common`` of the class share in one cell (what the spec makes everyone write).

A pair's similarity is the share of both students' remaining answer tokens that match the other's. It is ranked
against the class's own pairs (a z-score: distance from the median in the class's standard deviations; and a percentile), so a lab whose
spec dictates much of the code does not flag everyone. The report (``similarity.html``, self-contained, no script;
``pairs.csv``, every pair) shows the class distribution, the top pairs and their matching code side by side. It is
evidence to read, not a verdict and not a grade: nothing here reads or writes the gradebook.
"""
from __future__ import annotations

import argparse
import csv
import html
import io
import itertools
import json
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from copydetect import CodeFingerprint, compare_files
from copydetect.utils import get_token_coverage, highlight_overlap

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("submitted", "autograded")
NOTE = ("This report is evidence for a person to read, not a verdict and not a grade. Similar answers also arise "
        "honestly: the spec dictates much of the code, students study together, the lessons show the same idioms. "
        "Read the code side by side before drawing any conclusion. Nothing here is written into the gradebook.")


# ---------------------------------------------------------------------------------------------------------------- input
def resolve_lab(course: Path, lab: str) -> str:
    """The lab's folder name from "02", "2" or "02_lr_schedules" (as in labs/)."""
    names = sorted(p.name for p in (course / "labs").iterdir() if p.is_dir()) if (course / "labs").is_dir() else []
    if lab in names:
        return lab
    matches = [n for n in names if lab.isdigit() and n.split("_")[0].isdigit() and int(n.split("_")[0]) == int(lab)]
    if len(matches) == 1:
        return matches[0]
    raise SystemExit(f"no lab {lab!r} in {course / 'labs'} (labs: {', '.join(names) or 'none'})")


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _read(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def answer_cells(nb: dict) -> dict[str, str]:
    """grade_id -> source of the notebook's code answer cells (nbgrader ``solution: true``)."""
    out = {}
    for cell in nb.get("cells", []):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.get("cell_type") == "code" and meta.get("solution"):
            out[meta.get("grade_id") or f"cell{len(out)}"] = _source(cell)
    return out


def _norm(line: str) -> str:
    return " ".join(line.split())


def dictated_lines(released: list[dict], solutions: list[dict]) -> set[str]:
    """Whitespace-normalised lines the course dictates: every line of the released lab (code and markdown, and the
    inline code spans of its markdown) and of the solution notebook's markdown (the specs)."""
    lines: set[str] = set()
    cells = [c for nb in released for c in nb.get("cells", [])]
    cells += [c for nb in solutions for c in nb.get("cells", []) if c.get("cell_type") == "markdown"]
    for cell in cells:
        text = _source(cell)
        lines.update(_norm(line) for line in text.splitlines())
        if cell.get("cell_type") == "markdown":
            lines.update(_norm(span) for span in re.findall(r"`([^`\n]+)`", text))
    lines.discard("")
    return lines


def strip_dictated(code: str, dictated: set[str]) -> str:
    """The code without its dictated lines (and blank lines)."""
    return "\n".join(line for line in code.splitlines() if _norm(line) and _norm(line) not in dictated)


@dataclass
class Lab:
    """What the course gives every student for one lab: its answer cells' keys and what counts as dictated."""
    name: str
    cells: list[str]                      # "notebook.ipynb:grade_id", in notebook order
    dictated: set[str]
    starter_code: str                     # every code cell of the released lab, for the boilerplate fingerprints


def load_lab(course: Path, lab: str) -> Lab:
    released = {p.name: _read(p) for p in sorted((course / "labs" / lab).glob("*.ipynb"))}
    if not released:
        raise SystemExit(f"no released notebook in {course / 'labs' / lab}")
    solutions = [_read(p) for p in sorted((course / "solutions" / lab).glob("*.ipynb"))]
    cells = [f"{name}:{gid}" for name, nb in released.items() for gid in answer_cells(nb)]
    starter = "\n".join(_source(c) for nb in released.values() for c in nb["cells"] if c.get("cell_type") == "code")
    return Lab(lab, cells, dictated_lines(list(released.values()), solutions), starter)


def load_submissions(course: Path, lab: str, source: str = "submitted") -> tuple[dict[str, dict[str, str]], list[str]]:
    """student -> {cell key: answer code} from <course>/<source>/<student>/<lab>/*.ipynb; and the unreadable ones."""
    subs, problems = {}, []
    base = course / source
    for folder in sorted(base.glob(f"*/{lab}")) if base.is_dir() else []:
        student, cells = folder.parent.name, {}
        for path in sorted(folder.glob("*.ipynb")):
            try:
                cells.update({f"{path.name}:{gid}": code for gid, code in answer_cells(_read(path)).items()})
            except (OSError, ValueError) as exc:
                problems.append(f"{student}: {path.name} could not be read ({exc.__class__.__name__})")
        if cells:
            subs[student] = cells
    return subs, problems


# ---------------------------------------------------------------------------------------------------- fingerprints
def fingerprint(code: str, k: int) -> CodeFingerprint:
    """copydetect's fingerprint of Python code: every k-gram of the filtered tokens (window 1, copydetect's default
    when its noise and guarantee thresholds agree), hashes as Python ints."""
    fp = CodeFingerprint("answer.py", k, 1, language="python", fp=io.StringIO(code))
    fp.hash_idx = {int(h): idx for h, idx in fp.hash_idx.items()}
    fp.hashes = set(fp.hash_idx)
    return fp


def drop(fp: CodeFingerprint, hashes: set[int]) -> None:
    """Leave fingerprints out as boilerplate (copydetect's own boilerplate option mishandles k-grams repeated in
    one document, so it is done here on the result)."""
    gone = fp.hashes & hashes
    if gone:
        fp.hashes -= gone
        for h in gone:
            del fp.hash_idx[h]
        fp.token_coverage = get_token_coverage(fp.hash_idx, fp.k, len(fp.filtered_code))


@dataclass
class PairCell:
    cell: str
    overlap: int                      # matching tokens, both sides
    coverage: int                     # compared tokens, both sides

    @property
    def similarity(self) -> float:
        return min(1.0, self.overlap / self.coverage) if self.coverage else 0.0


@dataclass
class Pair:
    a: str
    b: str
    overlap: int = 0
    coverage: int = 0
    cells: dict[str, PairCell] = field(default_factory=dict)
    z: float = 0.0
    percentile: float = 0.0
    flagged: str = ""

    @property
    def similarity(self) -> float:
        return min(1.0, self.overlap / self.coverage) if self.coverage else 0.0

    def best_cell(self) -> PairCell | None:
        return max(self.cells.values(), key=lambda c: (c.similarity, c.overlap), default=None)


@dataclass
class Result:
    lab: Lab
    students: list[str]
    fps: dict[str, dict[str, CodeFingerprint]]
    pairs: list[Pair]                 # ranked, most unusual first
    median: float
    scale: float
    cell_stats: dict[str, tuple[float, float, float]]    # cell -> (median, 90th percentile, max)
    settings: dict
    problems: list[str]
    seconds: float


def class_z(values: np.ndarray, floor: float) -> tuple[np.ndarray, float, float]:
    """(value - the class's median) / scale, scale = the class's standard deviation, at least floor. The standard
    deviation, not a MAD: most pairs share nothing once the dictated code is left out, so the MAD is often 0 (and
    the few copies in a class barely move the standard deviation of its many pairs)."""
    if values.size == 0:
        return values, 0.0, floor
    med = float(np.median(values))
    scale = max(float(np.std(values)), floor)
    return (values - med) / scale, med, scale


def analyse(course: Path, lab: str, source: str = "submitted", k: int = 25, common: float = 0.5, z_flag: float = 3.5,
            min_similarity: float = 0.3, cell_z_flag: float = 5.0, cell_min_similarity: float = 0.6,
            scale_floor: float = 0.05) -> Result:
    """Fingerprint every student's answer cells, compare every pair, rank the pairs against the class."""
    start = time.perf_counter()
    spec = load_lab(course, lab)
    subs, problems = load_submissions(course, lab, source)
    students = sorted(subs)
    starter = fingerprint(strip_dictated(spec.starter_code, set()), k).hashes
    fps: dict[str, dict[str, CodeFingerprint]] = {s: {} for s in students}
    for cell in spec.cells:
        for s in students:
            fp = fingerprint(strip_dictated(subs[s].get(cell, ""), spec.dictated), k)
            drop(fp, starter)
            fps[s][cell] = fp
        # what more than `common` of the class writes in this cell is what the spec makes everyone write
        counts: dict[int, int] = {}
        for s in students:
            for h in fps[s][cell].hashes:
                counts[h] = counts.get(h, 0) + 1
        shared = {h for h, n in counts.items() if n > max(2, common * len(students))}
        for s in students:
            drop(fps[s][cell], shared)

    pairs = []
    for a, b in itertools.combinations(students, 2):
        pair = Pair(a, b)
        for cell in spec.cells:
            fa, fb = fps[a][cell], fps[b][cell]
            cov = int(fa.token_coverage + fb.token_coverage)
            pair.coverage += cov
            if not cov or fa.hashes.isdisjoint(fb.hashes):
                continue
            overlap, (_, sim_b), _ = compare_files(fa, fb)
            # matching tokens of both: compare_files counts the first's, and the second's as a share of its own
            ov = int(overlap) + int(round(sim_b * fb.token_coverage))
            pair.overlap += ov
            pair.cells[cell] = PairCell(cell, ov, cov)
        pairs.append(pair)

    sims = np.array([p.similarity for p in pairs])
    zs, med, scale = class_z(sims, scale_floor)
    order = np.argsort(sims, kind="stable")
    ranks = np.empty(len(pairs))
    ranks[order] = np.arange(1, len(pairs) + 1)
    cell_stats, cell_z = {}, {}
    for cell in spec.cells:
        values = np.array([p.cells[cell].similarity if cell in p.cells else 0.0 for p in pairs])
        czs, cmed, _ = class_z(values, scale_floor)
        cell_z[cell] = czs
        cell_stats[cell] = (cmed, float(np.percentile(values, 90)) if values.size else 0.0,
                            float(values.max()) if values.size else 0.0)
    for i, pair in enumerate(pairs):
        pair.z, pair.percentile = float(zs[i]), 100.0 * ranks[i] / len(pairs)
        reasons = []
        if pair.z >= z_flag and pair.similarity >= min_similarity:
            reasons.append("whole lab")
        for cell, pc in pair.cells.items():
            if cell_z[cell][i] >= cell_z_flag and pc.similarity >= cell_min_similarity and pc.overlap >= 4 * k:
                reasons.append(cell.split(":", 1)[1])
        pair.flagged = ", ".join(reasons)
    pairs.sort(key=lambda p: (not p.flagged, -p.similarity, p.a, p.b))
    settings = dict(source=source, k=k, common=common, z_flag=z_flag, min_similarity=min_similarity,
                    cell_z_flag=cell_z_flag, cell_min_similarity=cell_min_similarity, scale_floor=scale_floor)
    return Result(spec, students, fps, pairs, med, scale, cell_stats, settings, problems, time.perf_counter() - start)


# --------------------------------------------------------------------------------------------------------- report
def _histogram(values: np.ndarray, bins: int = 20) -> list[tuple[float, float, int]]:
    counts, edges = np.histogram(values, bins=bins, range=(0.0, 1.0))
    return [(float(edges[i]), float(edges[i + 1]), int(counts[i])) for i in range(bins)]


def _side(fp: CodeFingerprint, other: CodeFingerprint) -> str:
    _, _, (slices, _) = compare_files(fp, other)
    if len(slices) == 0 or slices.shape[-1] == 0:
        return html.escape(fp.raw_code)
    text, _ = highlight_overlap(fp.raw_code, slices, "<mark>", "</mark>", escape_html=True)
    return text


CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:120em;color:#222}
.note{background:#fff6d5;border:1px solid #e0c050;padding:.8em 1em;border-radius:4px}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left}
td.n{text-align:right;font-variant-numeric:tabular-nums}.bar{background:#7a9cc6;height:.8em;display:inline-block}
.flag{color:#a03000;font-weight:bold}pre{background:#f6f6f6;padding:.6em;overflow-x:auto;font-size:.85em;margin:0}
.sbs{display:grid;grid-template-columns:1fr 1fr;gap:1em;margin-bottom:1.5em}mark{background:#ffd27a}
h3{margin-top:2em}"""


def write_report(result: Result, out: Path, top: int = 20) -> tuple[Path, Path]:
    """similarity.html (self-contained) and pairs.csv (every pair, ranked) in out."""
    out.mkdir(parents=True, exist_ok=True)
    pairs = result.pairs
    sims = np.array([p.similarity for p in pairs]) if pairs else np.zeros(0)
    csv_path = out / "pairs.csv"
    with csv_path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["student_a", "student_b", "similarity", "z", "percentile", "flagged", "most_similar_cell",
                    "cell_similarity"])
        for p in pairs:
            best = p.best_cell()
            w.writerow([p.a, p.b, f"{p.similarity:.3f}", f"{p.z:.2f}", f"{p.percentile:.1f}", p.flagged,
                        best.cell if best else "", f"{best.similarity:.3f}" if best else ""])
    e = html.escape
    flagged = [p for p in pairs if p.flagged]
    shown = flagged + [p for p in pairs if not p.flagged][:max(0, top - len(flagged))]
    s = result.settings
    h = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>Similarity: {e(result.lab.name)}</title>"
         f"<style>{CSS}</style></head><body>",
         f"<h1>Similarity of answer cells: {e(result.lab.name)}</h1>",
         f"<p class='note'><strong>Not a grade.</strong> {e(NOTE)}</p>",
         f"<p>{len(result.students)} students ({e(s['source'])}/), {len(pairs)} pairs, "
         f"{len(result.lab.cells)} answer cells. {len(flagged)} pair(s) stand out from the class.</p>",
         "<h2>How it is measured</h2><ul>",
         "<li>Only the answer cells (nbgrader solution cells) count. Left out before comparing: every line that "
         "appears verbatim in the released lab or in the specs, the fingerprints of the released starter code, and in "
         f"each cell the fingerprints that more than {s['common']:.0%} of the class share.</li>",
         f"<li>Matching: copydetect's fingerprints of {s['k']} filtered characters (comments and whitespace dropped, "
         "names and strings normalised, so renamed variables still match; reordered lines match line by line).</li>",
         "<li>Similarity: the share of both students' remaining answer tokens that match the other's. "
         f"z: how far a pair lies above the class's median ({result.median:.3f}), in the class's standard "
         f"deviations ({result.scale:.3f}, taken as at least {s['scale_floor']}).</li>",
         f"<li>A pair stands out when z &ge; {s['z_flag']} and similarity &ge; {s['min_similarity']} over the lab, or "
         f"when one cell's z among that cell's pairs is &ge; {s['cell_z_flag']} with similarity "
         f"&ge; {s['cell_min_similarity']}.</li></ul>"]
    if result.problems:
        h.append("<h2>Not read</h2><ul>" + "".join(f"<li>{e(x)}</li>" for x in result.problems) + "</ul>")
    h.append("<h2>The class's distribution</h2><table><tr><th>similarity</th><th>pairs</th><th></th></tr>")
    hist = _histogram(sims)
    peak = max([c for _, _, c in hist] + [1])
    for lo, hi, c in hist:
        h.append(f"<tr><td>{lo:.2f}&ndash;{hi:.2f}</td><td class='n'>{c}</td>"
                 f"<td><span class='bar' style='width:{20 * c / peak:.2f}em'></span></td></tr>")
    h.append("</table>")
    if sims.size:
        q = np.percentile(sims, [50, 90, 99])
        h.append(f"<p>Median {q[0]:.3f}, 90th percentile {q[1]:.3f}, 99th percentile {q[2]:.3f}, "
                 f"highest {sims.max():.3f}.</p>")
    h.append("<h3>Per answer cell</h3><table><tr><th>cell</th><th>median</th><th>90th percentile</th><th>highest</th></tr>")
    for cell, (med, p90, mx) in result.cell_stats.items():
        h.append(f"<tr><td>{e(cell)}</td><td class='n'>{med:.3f}</td><td class='n'>{p90:.3f}</td>"
                 f"<td class='n'>{mx:.3f}</td></tr>")
    h.append("</table><h2>Top pairs</h2><table><tr><th>#</th><th>student</th><th>student</th><th>similarity</th>"
             "<th>z</th><th>percentile</th><th>most similar cell</th><th>stands out</th></tr>")
    for i, p in enumerate(shown, 1):
        best = p.best_cell()
        h.append(f"<tr><td class='n'><a href='#pair{i}'>{i}</a></td><td>{e(p.a)}</td><td>{e(p.b)}</td>"
                 f"<td class='n'>{p.similarity:.3f}</td><td class='n'>{p.z:.1f}</td><td class='n'>{p.percentile:.1f}</td>"
                 f"<td>{e(best.cell.split(':', 1)[1]) + f' ({best.similarity:.2f})' if best else ''}</td>"
                 f"<td class='flag'>{e(p.flagged)}</td></tr>")
    h.append("</table><h2>Side by side</h2><p>Each cell's answer lines with the dictated lines left out; "
             "<mark>marked</mark>: the code that matches the other student's.</p>")
    for i, p in enumerate(shown, 1):
        h.append(f"<h3 id='pair{i}'>{i}. {e(p.a)} and {e(p.b)}: similarity {p.similarity:.3f}, z {p.z:.1f}</h3>")
        for pc in sorted(p.cells.values(), key=lambda c: -c.similarity):
            fa, fb = result.fps[p.a][pc.cell], result.fps[p.b][pc.cell]
            h.append(f"<p><strong>{e(pc.cell)}</strong>: similarity {pc.similarity:.2f}</p><div class='sbs'>"
                     f"<div><em>{e(p.a)}</em><pre>{_side(fa, fb)}</pre></div>"
                     f"<div><em>{e(p.b)}</em><pre>{_side(fb, fa)}</pre></div></div>")
        if not p.cells:
            h.append("<p>No matching code outside what the course dictates.</p>")
    h.append(f"<p><small>autograder/term/similarity.py, {result.seconds:.1f} s. {e(NOTE)}</small></p></body></html>")
    html_path = out / "similarity.html"
    html_path.write_text("\n".join(h), encoding="utf-8")
    return html_path, csv_path


# ------------------------------------------------------------------------------------------------------------- CLI
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m autograder.term.similarity",
        description="Report the pairs of students whose answer cells of one lab are unusually similar, ranked against "
                    "the class's own pairs, starter code and the spec's dictated lines left out. Evidence for a person "
                    "to read, never a grade: it reads submissions and writes only its report.")
    ap.add_argument("lab", help="the lab: 02 or 02_lr_schedules")
    ap.add_argument("--course", type=Path, default=ROOT, help="the course folder (default: this checkout)")
    ap.add_argument("--out", type=Path, help="where to write similarity.html and pairs.csv "
                                             "(default: <course>/grades/similarity/<lab>/, git-ignored)")
    ap.add_argument("--from", dest="source", choices=SOURCES, default="submitted",
                    help="read <course>/submitted/ (default) or autograded/")
    ap.add_argument("--top", type=int, default=20, help="pairs shown side by side besides those that stand out")
    ap.add_argument("--k", type=int, default=25, help="fingerprint length in filtered characters (default 25, copydetect's noise threshold)")
    ap.add_argument("--common", type=float, default=0.5,
                    help="leave out fingerprints more than this share of the class has in one cell (default 0.5)")
    ap.add_argument("--z", type=float, default=3.5, help="z (against the class) at which a pair stands out (default 3.5)")
    ap.add_argument("--min-similarity", type=float, default=0.3,
                    help="and the similarity it needs at least (default 0.3)")
    args = ap.parse_args(argv)
    course = args.course.resolve()
    lab = resolve_lab(course, args.lab)
    result = analyse(course, lab, args.source, k=args.k, common=args.common, z_flag=args.z,
                     min_similarity=args.min_similarity)
    if len(result.students) < 2:
        print(f"{lab}: {len(result.students)} submission(s) in {course / args.source}: nothing to compare",
              file=sys.stderr)
        return 1
    out = args.out or course / "grades" / "similarity" / lab
    html_path, csv_path = write_report(result, out, args.top)
    flagged = [p for p in result.pairs if p.flagged]
    print(f"{lab}: {len(result.students)} students, {len(result.pairs)} pairs in {result.seconds:.1f} s; "
          f"{len(flagged)} pair(s) stand out from the class (median similarity {result.median:.3f})")
    for p in flagged[:10]:
        print(f"  {p.a} / {p.b}: similarity {p.similarity:.3f}, z {p.z:.1f} ({p.flagged})")
    print(f"report: {html_path}\n        {csv_path}\nEvidence to read side by side, not a verdict and not a grade.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
