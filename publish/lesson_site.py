"""A readable edition of the lessons: execute each lesson and write a static HTML site with a contents page.

    python -m publish.lesson_site [--out build/site] [--jobs N] [--force] [lessons/NN_topic_lesson.ipynb ...]

(``make site`` runs it on every lesson.) Each lesson is executed from scratch, in its own kernel, in the
lessons/ folder (JOBS lessons at once): the pages show what the code really printed and plotted on this machine,
and a lesson that raises, or writes to stderr, fails the build. A page is rebuilt only when its lesson, trainkit,
this file or autograder/feedback.py changed (``--force`` rebuilds all). The site is self-contained: relative links,
plots embedded as data URIs, CSS inline, no JavaScript of its own. Formulas are MathML, converted from the lessons'
TeX when a page is built (autograder.feedback.MathMLExporter, as for the feedback): browsers render it natively, so
the pages load nothing from the network; a formula the converter cannot read stays TeX (``--mathjax-url`` adds a
MathJax to typeset those). Self-check questions show as the question, its options and a "Show answer" reveal
(trainkit.selfcheck writes that HTML form next to the live widget).
"""
from __future__ import annotations

import argparse
import html
import os
import platform
import re
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; max-width: 52em; margin: 2em auto;
       padding: 0 1em; line-height: 1.5; color: #1f2328; }
h1 { font-size: 1.7em; } li { margin: 0.5em 0; } .muted { color: #57606a; font-size: 0.9em; }
a { color: #0b57d0; }
"""
NAV_STYLE = ("position:sticky;top:0;z-index:10;background:#f6f8fa;border-bottom:1px solid #d0d7de;"
             "padding:0.5em 1.5em;font-family:system-ui,sans-serif;font-size:0.95em")


def _title(nb) -> str:
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return ""


def _summary(nb, limit: int = 260) -> str:
    """The first sentences after the title, as plain text (for the contents page)."""
    for cell in nb.cells:
        if cell.cell_type == "markdown" and cell.source.lstrip().startswith("# "):
            paragraphs = [p.strip() for p in cell.source.split("\n\n")[1:] if p.strip()]
            for p in paragraphs:
                if not p.startswith(("#", "|", "-", "*", ">")):
                    text = re.sub(r"[*`]", "", " ".join(p.split()))
                    if len(text) <= limit:
                        return text
                    cut = text.rfind(". ", 0, limit)
                    return text[:cut + 1] if cut > 0 else text[:limit].rsplit(" ", 1)[0] + " …"
    return ""


def _stderr_outputs(nb) -> list[str]:
    found = []
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream" and out.get("name") == "stderr":
                found.append(f"cell {i}: {out.get('text', '')[:300]}")
            elif out.get("output_type") == "error":
                found.append(f"cell {i}: {out.get('ename')}: {out.get('evalue')}")
    return found


def execute(path: str, timeout: int = 900) -> dict:
    """Execute one lesson in a fresh kernel (its own folder as working directory); return it as JSON."""
    import nbformat
    from nbclient import NotebookClient

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("WANDB_MODE", "offline")
    os.environ.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    try:
        NotebookClient(nb, timeout=timeout, kernel_name="python3",
                       resources={"metadata": {"path": str(Path(path).parent)}}).execute()
    except Exception as exc:   # noqa: BLE001 -- re-raised with the notebook's name
        raise RuntimeError(f"{Path(path).name} failed: {type(exc).__name__}: {exc}") from None
    # No widget state in the page: widget outputs fall back to their static forms (a self-check's HTML reveal;
    # to_html drops those with none, such as tqdm's bars), so the page needs no widget JavaScript from a CDN.
    nb.metadata.pop("widgets", None)
    problems = _stderr_outputs(nb)
    if problems:
        raise RuntimeError(f"{path} wrote to stderr or raised:\n" + "\n".join(problems))
    return {"nb": nbformat.writes(nb), "seconds": time.perf_counter() - start}


def _nav(pages: list[dict], i: int) -> str:
    links = ['<a href="index.html">Contents</a>',
             f'<a href="notebooks/{pages[i]["lesson"].name}" download>this lesson as a notebook (.ipynb)</a>']
    if i > 0:
        links.append(f'<a href="{pages[i - 1]["href"]}">← {html.escape(pages[i - 1]["title"])}</a>')
    if i + 1 < len(pages):
        links.append(f'<a href="{pages[i + 1]["href"]}">{html.escape(pages[i + 1]["title"])} →</a>')
    return f'<nav style="{NAV_STYLE}">' + " &nbsp;·&nbsp; ".join(links) + "</nav>"


def to_html(nb_json: str, title: str, nav: str, mathjax_url: str = "") -> str:
    import nbformat
    from bs4 import BeautifulSoup

    from autograder.feedback import MathMLExporter

    nb = nbformat.reads(nb_json, as_version=4)
    nb.metadata["title"] = title
    for cell in nb.cells:  # a live widget with no static form (a tqdm bar) would show as "0%| 0/600" text
        cell["outputs"] = [out for out in cell.get("outputs", [])
                           if "application/vnd.jupyter.widget-view+json" not in out.get("data", {})
                           or "text/html" in out["data"]]
    extra = {"mathjax": True, "mathjax_url": mathjax_url} if mathjax_url else {}  # MathJax only when asked for
    exporter = MathMLExporter(template_name="lab", **extra)
    body, _ = exporter.from_notebook_node(nb)
    soup = BeautifulSoup(body, "html.parser")
    for script in soup.find_all("script", src=True):  # require.js from a CDN: nothing on these pages uses it
        if "require" in script["src"]:
            script.decompose()
    soup.body.insert(0, BeautifulSoup(nav, "html.parser"))
    soup.body.append(BeautifulSoup(nav, "html.parser"))
    return str(soup)


def index_html(pages: list[dict], built: str) -> str:
    items = "\n".join(
        f'<li><a href="{p["href"]}"><b>{html.escape(p["title"])}</b></a>'
        + (f'<br><span class="muted">{html.escape(p["summary"])}</span>' if p["summary"] else "")
        + "</li>" for p in pages)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1.0">
<title>Neural-network training infrastructure: lessons</title><style>{CSS}</style></head>
<body>
<h1>Neural-network training infrastructure: the lessons</h1>
<p>Every lesson, executed. The numbers, tables and plots are what the code printed when this edition was built;
run the notebooks yourself (<code>make lab</code>) to change the code and answer the self-check questions
interactively. Here a self-check shows its answer behind a <i>Show answer</i> button: try first.</p>
<ol>
{items}
</ol>
<p class="muted">{html.escape(built)} Formulas are MathML, which the browser typesets itself: the pages need no
network.</p>
</body></html>
"""


def _stale(lesson: Path, page: Path) -> bool:
    if not page.exists():
        return True
    inputs = [lesson, Path(__file__), ROOT / "autograder" / "feedback.py",  # feedback.py: its MathMLExporter
              *(ROOT / "trainkit").rglob("*.py"), *(ROOT / "trainkit").rglob("*.json")]
    return page.stat().st_mtime < max(p.stat().st_mtime for p in inputs)


def build(lessons: list[Path], out: Path, jobs: int = 2, force: bool = False, log=print,
          mathjax_url: str = "") -> list[dict]:
    import nbformat

    out.mkdir(parents=True, exist_ok=True)
    cache = out / "notebooks"  # the executed notebooks, linked from each page for download
    cache.mkdir(exist_ok=True)
    pages = []
    for lesson in sorted(lessons):
        nb = nbformat.read(lesson, as_version=4)
        pages.append({"lesson": lesson, "href": lesson.stem + ".html", "title": _title(nb) or lesson.stem,
                      "summary": _summary(nb), "executed": cache / lesson.name})
    todo = [p for p in pages if force or _stale(p["lesson"], out / p["href"]) or not p["executed"].exists()]
    start = time.perf_counter()
    if todo:
        log(f"executing {len(todo)} lesson(s), {jobs} at a time")
        with ProcessPoolExecutor(max_workers=max(1, min(jobs, len(todo)))) as pool:
            futures = {pool.submit(execute, str(p["lesson"])): p for p in todo}
            for future, page in futures.items():
                result = future.result()
                page["executed"].write_text(result["nb"], encoding="utf-8")
                log(f"  {page['lesson'].name}: executed in {result['seconds']:.0f} s")
    for i, page in enumerate(pages):
        target = out / page["href"]
        if page in todo or not target.exists():
            executed = page["executed"].read_text(encoding="utf-8")
            target.write_text(to_html(executed, page["title"], _nav(pages, i), mathjax_url), encoding="utf-8")
    import torch
    built = (f"Built {time.strftime('%Y-%m-%d', time.gmtime())} with Python {platform.python_version()}, "
             f"PyTorch {torch.__version__}, on {'a CUDA GPU' if torch.cuda.is_available() else 'CPU'}.")
    (out / "index.html").write_text(index_html(pages, built), encoding="utf-8")
    log(f"site: {out / 'index.html'} ({len(pages)} lessons; {time.perf_counter() - start:.0f} s)")
    return pages


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("lessons", nargs="*", type=Path, help="lesson notebooks (default: lessons/*_lesson.ipynb)")
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "site")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--force", action="store_true", help="execute every lesson again")
    parser.add_argument("--mathjax-url", default="", help="also load this MathJax 2 script, to typeset any formula "
                        "the MathML converter left as TeX (e.g. a copy published next to the site, as a relative URL)")
    args = parser.parse_args(argv)
    lessons = args.lessons or sorted((ROOT / "lessons").glob("*_lesson.ipynb"))
    build([p.resolve() for p in lessons], args.out, jobs=args.jobs, force=args.force, mathjax_url=args.mathjax_url)
    return 0


if __name__ == "__main__":
    sys.exit(main())
