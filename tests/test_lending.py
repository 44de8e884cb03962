"""The grader's unseen variants stay out of a submission's reach (autograder/lending.py).

- Every instructor module a hidden test imports is lent (and so hidden by the sandbox), with every data file it reads.
- In the grading sandbox those files cannot be read (nor their modules imported).
- A snooping submission of lab 7, which first tries to keep the grader from taking back what it lends, and whose
  answers look for the true answer everywhere a student's code could look (the notebook's variables, an import of the
  grader's module, its data file or a lent copy, every object in memory), finds it
  for the visible runs (which come with their answers: the snooping works) and for none of the unseen ones: it
  scores 0 on both judgement exercises, while the visible part of their first band passes.
"""
from __future__ import annotations

import ast
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from autograder import lending, sandbox
from autograder import notebooks as nbu
from autograder.feedback import HIDDEN
from course import ROOT, cell_scores, make_course, release_nb, run_grade, source_nb, submit

SNOOPED_LAB = "07_monitoring_reproducibility"


def hidden_parts(cell_source: str) -> str:
    return "\n".join(m.group(0) for m in HIDDEN.finditer(cell_source))


def test_every_instructor_module_a_hidden_test_imports_is_lent_with_its_data():
    imported = set()
    for nb in sorted((ROOT / "solutions").glob("*/*.ipynb")):
        for cell in nbu.read(nb).cells:
            if cell.cell_type == "code":
                found = re.findall(r"(?:from|import)\s+autograder\.(\w+)", hidden_parts(cell.source))
                imported |= set(found)
    assert {"repro_check", "runbank_check", "init_check"} <= imported, f"the hidden tests' imports were not found: {imported}"
    assert imported - {"checks", "lending"} <= set(lending.SECRET_MODULES), \
        f"hidden tests import instructor modules that are not lent: {imported - {'checks', 'lending'} - set(lending.SECRET_MODULES)}"
    package = lending.unseen_dir()
    for name, data in lending.secret_modules().items():
        source = (package / f"{name}.py").read_text(encoding="utf-8")
        read = set(re.findall(r"with_name\(\"([\w.]+)\"\)", source))
        assert read == set(data), f"autograder/{name}.py reads {sorted(read)}; lending lends it {sorted(data)}"
        assert all((package / f).is_file() for f in data), name
    assert lending.imported_by("x = 1\nfrom autograder.repro_check import unseen as l\n"
                               "import autograder.init_check\nfrom trainkit.checks import expect") == \
        ["init_check", "repro_check"]


# Test cells that hold a lent module while they call student code on purpose, and why that is safe enough (docs/security.md,
# "The unseen variants").
MAY_RUN_STUDENT_CODE = {
    "test_find_broken_part__repaired_70": "trains the repaired setups, whose parts are the student's (not protected)",
    "test_find_broken_part__repaired_85": "as repaired_70",
    "test_find_broken_part__repaired_95": "as repaired_70",
    "test_save_interval__sound": "the student's interval for the grader's fault settings, which hold no answer",
    "test_save_interval__near_best": "as save_interval__sound",
    "test_save_interval__best": "as save_interval__sound",
    "test_challenge_entry__learns": "the student's challenge entry, run on the grader's seed, which holds no answer",
    "test_challenge_entry__preset": "as challenge_entry__learns",
    "test_challenge_entry__tuned": "as challenge_entry__learns",
}


def _calls_student_code(nb) -> set[str]:
    """The names of the notebook's functions that may call a student's: the solution cells' functions, and every
    function of a read-only cell whose body names one of those (to a fixed point)."""
    defs = {}
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        try:
            tree = ast.parse(nbu.strip_solution_markers(cell.source))
        except SyntaxError:
            continue
        solution = bool(cell.get("metadata", {}).get("nbgrader", {}).get("solution"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
                defs[node.name] = (solution, names)
    tainted = {name for name, (solution, _) in defs.items() if solution}
    while True:
        more = {name for name, (_, names) in defs.items() if names & tainted} - tainted
        if not more:
            return tainted
        tainted |= more


def test_no_test_cell_calls_student_code_while_it_holds_a_lent_module():
    """A test cell that imports a lent module calls no function that may run the student's code before it calls
    forget() (lending.forget: the module leaves the kernel), or at all if it never does (unless listed above)."""
    for path in sorted((ROOT / "solutions").glob("*/*.ipynb")):
        nb = nbu.read(path)
        tainted = _calls_student_code(nb)
        for cell in nb.cells:
            gid = nbu.grade_id(cell)
            if cell.cell_type != "code" or not lending.imported_by(cell.source) or gid in MAY_RUN_STUDENT_CODE:
                continue
            tree = ast.parse(cell.source)
            calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
            forgets = [n.lineno for n in calls if isinstance(n.func, ast.Name) and n.func.id == "forget"]
            until = min(forgets) if forgets else math.inf
            early = sorted({n.func.id for n in calls if isinstance(n.func, ast.Name) and n.func.id in tainted
                            and n.lineno < until})
            assert not early, f"{path.parent.name} {gid}: calls {early} while the grader's module is lent"
    assert set(MAY_RUN_STUDENT_CODE) <= {nbu.grade_id(c) for p in (ROOT / "solutions").glob("*/*.ipynb")
                                         for c in nbu.read(p).cells}, "MAY_RUN_STUDENT_CODE names cells that are gone"


def test_the_sandbox_shows_no_lent_file_and_no_new_file_of_the_unseen_folder(tmp_path):
    """The unseen folder is hidden whole: its modules and data, and a file nobody listed anywhere (one added later)."""
    if not sandbox.available()[0]:
        pytest.skip(f"grading sandbox unavailable here: {sandbox.available()[1]}")
    scratch = tmp_path / "batch" / "scratch"
    scratch.mkdir(parents=True)
    planted = lending.unseen_dir() / f"zz_planted_{os.getpid()}_unseen.json"
    planted.write_text('{"answer": 42}')
    try:
        files = [str(p) for p in lending.secret_files()]
        assert str(planted) in files
        probe = ("import sys\n"
                 "def size(f):\n    try:\n        return len(open(f, 'rb').read())\n    except OSError:\n        return 0\n"
                 "try:\n    import autograder.repro_check as m\n    found = hasattr(m, 'unseen')\n"
                 "except Exception:\n    found = False\n"
                 "print([size(f) for f in sys.argv[1:]], found)")
        cmd = sandbox.wrap([sys.executable, "-c", probe, *files], scratch, sandbox.Limits())
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    finally:
        planted.unlink()
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"{[0] * len(files)} False", f"unreadable or empty, and not importable: {proc.stdout}"
    assert all(Path(f).stat().st_size > 0 for f in files if f != str(planted)), "outside the sandbox the files are there"
    from publish import edition
    assert not [f for f in edition.plan() if f.startswith("autograder/unseen")], "the student edition ships none of it"


# What a snooping student could write: look for the answer to the run in hand wherever it might be, and answer with it.
SNOOP = '''
import gc as _gc
import glob as _glob
import importlib as _importlib
import json as _json
import shutil as _shutil
import sys as _sys
import types as _types

# (It also hooks IPython's events, below, to write the answers over its own while they are lent.)
# First keep what the grader lends from being taken back: a stand-in for its lending module whose forget does
# nothing, and no deleting or collecting (the grader puts all of these back before each test cell).
_stand_in = _types.ModuleType("autograder.lending")
_stand_in.lend, _stand_in.forget = getattr(_sys.modules.get("autograder.lending"), "lend", None), lambda: None
_sys.modules["autograder.lending"] = _stand_in
_shutil.rmtree, _gc.collect = (lambda *a, **k: None), (lambda *a, **k: 0)

_FOUND, _SCANS, _LOOKED = {}, [], []


def _places():
    yield from globals().values()                                      # the notebook's variables
    try:                                                               # the grader's module, by name
        _module = _importlib.import_module("autograder.repro_check")
        yield _module.unseen()
        yield _module.unseen_targets()
    except Exception:
        pass
    import autograder as _package
    for _path in _glob.glob(_package.__path__[0] + "/repro_unseen.json") + _glob.glob("/tmp/**/repro_unseen.json",
                                                                                      recursive=True):
        try:                                                           # its data file, or a lent copy of it
            from trainkit.labs.lab07_monitoring_reproducibility.repro_runs import load_pairs as _load_pairs
            yield _load_pairs(_path)
        except Exception:
            pass
    yield [o for o in _gc.get_objects() if type(o).__name__ in ("Pair", "Target")]   # everything in memory


def _key(*parts):
    return _json.dumps(parts, sort_keys=True, default=str)


def _snoop(key):
    """The answer for what `key` names, from everything found; looks again (at most 3 times) on a miss."""
    if key not in _FOUND and len(_SCANS) < 3:
        _SCANS.append(1)
        for _place in _places():
            for _item in (_place if isinstance(_place, (list, tuple)) else [_place]):
                _pair_label = getattr(_item, "label", None)
                _settings = getattr(_item, "settings", None)
                if _pair_label and hasattr(_item, "a"):
                    _FOUND[_key(_item.a.manifest, _item.a.log, _item.b.manifest, _item.b.log)] = _pair_label
                elif _settings and hasattr(_item, "log"):
                    _FOUND[_key(_item.manifest, _item.log)] = _settings
    return _FOUND.get(key)


def _rebind_answers(*_args):
    """A hook on IPython's events: while the grader's module is lent, its answers written over the notebook's."""
    _module = _sys.modules.get("autograder.repro_check")
    if _module is not None and "UNSEEN_VERDICTS" in globals():
        try:
            globals()["UNSEEN_VERDICTS"] = tuple(_pair.label for _pair in _module.unseen())
        except Exception:
            pass


for _event in ("pre_run_cell", "post_run_cell", "pre_execute", "post_execute"):
    get_ipython().events.register(_event, _rebind_answers)


def why_not_reproducible(run_a, run_b):
    return _snoop(_key(run_a.manifest, run_a.log, run_b.manifest, run_b.log)) or "reproducible"


def _outbox():
    """What the grader's record of the variants holds when this runs (after the first exercise's band cells)."""
    import os as _os
    try:
        with open(_os.environ.get("TRAINKIT_OUTCOMES_FILE", "")) as _f:
            return _f.read()
    except Exception:
        return ""


def reproduce(manifest, log):
    if not _LOOKED:
        _LOOKED.append(1)
        print("[snoop] outbox:", repr(_outbox()[:300]))
    return _snoop(_key(manifest, log)) or {}
'''


@pytest.mark.xdist_group("lending")
def test_a_snooping_submission_finds_the_answers_to_the_visible_runs_only():
    if not sandbox.available()[0]:
        pytest.skip(f"grading sandbox unavailable here: {sandbox.available()[1]}")
    base = Path(tempfile.mkdtemp(prefix="lending-", dir="/var/tmp"))   # outside /tmp, which the sandbox empties
    try:
        course = make_course(base)
        release, reference = release_nb(SNOOPED_LAB), nbu.reference_answers(source_nb(SNOOPED_LAB))
        submit(course, "snoop", SNOOPED_LAB, nbu.fill(release, {**reference, "why_not_reproducible": SNOOP,
                                                                "reproduce": SNOOP}))
        proc = run_grade(course, "--assignment", SNOOPED_LAB, "--jobs", "1")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        scores = cell_scores(course, "snoop", SNOOPED_LAB)
        for exercise in ("why_not_reproducible", "reproduce"):
            bands = {k: v for k, v in scores.items() if k.startswith(f"test_{exercise}__") and v[1]}
            assert bands and not any(got for got, _ in bands.values()), f"{exercise}: snooping earned {bands}"
        graded = nbu.read(next((course / "autograded" / "snoop" / SNOOPED_LAB).glob("*.ipynb")))
        first_bands = {nbu.grade_id(c): "".join(str(o.get("evalue", "")) for o in c.outputs) for c in graded.cells
                       if nbu.grade_id(c) in ("test_why_not_reproducible__accuracy_70", "test_reproduce__share_60")}
        for gid, error in first_bands.items():   # the visible part passed (snooping found those answers)
            assert "the grader's unseen" in error and "the visible" not in error, f"{gid}: {error[:600]}"
        assert len(first_bands) == 2
        # the record of which unseen pairs passed (it names their causes) was out of the kernel's reach by then
        looked = [line for c in graded.cells for o in c.get("outputs", []) for line in str(o.get("text", "")).splitlines()
                  if line.startswith("[snoop] outbox:")]
        assert looked and all(line == "[snoop] outbox: ''" for line in looked), looked[:3]
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_the_grading_pipeline_names_no_lab():
    """autograder/grade.py imports none of the grader's per-lab modules: a lab that needs more than its test cells
    (lab 8's challenge) plugs in through grade.LAB_HOOKS, which are found in the modules themselves."""

    from autograder import grade

    tree = ast.parse(Path(grade.__file__).read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) for alias in node.names}
    imported |= {alias.name.split(".")[-1] for node in ast.walk(tree) if isinstance(node, ast.Import)
                 for alias in node.names}
    assert not imported & set(lending.SECRET_MODULES), imported & set(lending.SECRET_MODULES)
    assert {f.__name__ for name in grade.LAB_HOOKS for f in grade.lab_hooks(name)} == set(grade.LAB_HOOKS)
