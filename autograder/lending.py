"""The grader's unseen variants: out of the sandbox's sight, lent to the test cells that load them, and taken back.

The judgement exercises grade a student's code on variants the student never sees (``SECRET_MODULES``: the modules
that build them and the data files they read). Inside the grading sandbox those files cannot be read
(``autograder.sandbox`` hides them), so no cell can import or open them. The grader (``SafeExecute``) lends them to
each test cell whose code imports one: right before that cell it writes the modules and their data into a private
temporary folder of the kernel and imports them from there (``lend``); right after it, it takes them back
(``forget``): the folder is deleted, the modules leave ``sys.modules`` and the ``autograder`` package, the names the
cell bound to their functions or classes leave the notebook, and the garbage is collected.

So at no time can a solution cell import or open them, and the unseen variants' answers (a run's cause, a run's true
settings) are in the kernel only while a test cell that calls no student function holds them: a hidden test that
calls student code first strips the answers from the variants and calls ``forget`` itself (see lab 7). What cannot be
protected inside one Python process: student code that runs during such a cell anyway (a thread started earlier, an
audit hook) can read whatever is in memory then. Hooks on IPython's events and trace or profile functions are put aside
while a module is lent (``lend`` to ``forget``), so they do not run then. docs/security.md says what is and is not protected.
"""
from __future__ import annotations

import gc
import re
import sys
import types
from pathlib import Path
from shutil import rmtree

# Everything in autograder/unseen/ is secret (deny by default: a new module there is hidden and lent without a list):
# module (autograder.<name>, from <name>.py) -> the data files it reads next to it (<stem>_unseen.json for
# <stem>_check.py). tests/test_lending.py checks that every module a hidden test imports, except the check helpers and
# this one, lives there.
def secret_modules(folder: Path | None = None) -> dict[str, tuple[str, ...]]:
    """Read now: a data file written since this module was imported (a course's challenge seed) is in it."""
    folder = folder or unseen_dir()
    out = {}
    for module in sorted(folder.glob("*.py")):
        data = folder / f"{module.stem.removesuffix('_check')}_unseen.json"
        out[module.stem] = (data.name,) if data.is_file() else ()
    return out


def unseen_dir() -> Path:
    import autograder

    return Path(autograder.UNSEEN_DIR).resolve()


# The names are fixed at import; their data files may not be (the challenge seed is drawn on first use): ask
# secret_modules() for those.
SECRET_MODULES = secret_modules()    # read outside the sandbox; in it the folder is empty
_IMPORT = re.compile(r"^\s*(?:from\s+autograder\.(\w+)\s+import|import\s+autograder\.(\w+))", re.M)
_LENT: dict[str, Path] = {}    # in the kernel: module name -> the folder it was lent from
_ASIDE: dict = {}              # in the kernel, while a module is lent: IPython's event callbacks, the trace and profile


def secret_files() -> list[Path]:
    """Every file the sandbox hides with the folder (modules, data, compiled caches)."""
    return sorted(p for p in unseen_dir().rglob("*") if p.is_file())


def imported_by(source: str) -> list[str]:
    """The secret modules a cell's code imports (``from autograder.X import ...`` or ``import autograder.X``)."""
    names = {a or b for a, b in _IMPORT.findall(source)}
    return sorted(n for n in names if n in SECRET_MODULES)


def lend_code(modules: list[str], folder: Path | None = None) -> str:
    """The hidden cell the grader runs before a test cell that imports ``modules``: read here (outside the sandbox),
    handed to the kernel's ``lend``."""
    folder = folder or unseen_dir()
    secret = secret_modules(folder)    # now: a data file written since this module was imported (a course's seed) too
    files = {f: (folder / f).read_text(encoding="utf-8")
             for name in modules for f in (f"{name}.py", *secret[name])}
    return f"import autograder.lending as _grader_lending\n_grader_lending.lend({list(modules)!r}, {files!r})"


FORGET_CODE = "import autograder.lending as _grader_lending\n_grader_lending.forget()"


def lend(modules: list[str], files: dict[str, str]) -> None:
    """In the kernel: write ``files`` to a private temporary folder and import ``modules`` from it as autograder.X."""
    import importlib.util
    import tempfile

    import autograder

    _put_hooks_aside()
    folder = Path(tempfile.mkdtemp(prefix="lent-"))
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    for name in modules:
        full = f"autograder.{name}"
        spec = importlib.util.spec_from_file_location(full, folder / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        _LENT[name] = folder
        sys.modules[full] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(full, None)
            raise
        setattr(autograder, name, module)


def _shell():
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    return get_ipython()


def _put_hooks_aside() -> None:
    """Until ``forget``: no callback on IPython's events (pre/post_run_cell, pre/post_execute) and no trace or profile
    function, so code a solution cell registered there does not run while a module is lent."""
    if "trace" in _ASIDE:
        return
    _ASIDE["trace"], _ASIDE["profile"] = sys.gettrace(), sys.getprofile()
    sys.settrace(None)
    sys.setprofile(None)
    shell = _shell()
    if shell is not None:
        _ASIDE["events"] = {event: list(callbacks) for event, callbacks in shell.events.callbacks.items()}
        for callbacks in shell.events.callbacks.values():
            callbacks.clear()


def _bring_hooks_back() -> None:
    if "trace" not in _ASIDE:
        _ASIDE.clear()
        return
    shell = _shell()
    if shell is not None:
        for event, callbacks in _ASIDE.get("events", {}).items():
            shell.events.callbacks[event][:0] = callbacks
    sys.settrace(_ASIDE["trace"])
    sys.setprofile(_ASIDE["profile"])
    _ASIDE.clear()


def _from_lent(value, lent_names: set[str]) -> bool:
    """A function, class or module that belongs to a lent module (what a hidden test's import bound)."""
    if isinstance(value, types.ModuleType):
        return value.__name__ in lent_names
    return isinstance(value, (types.FunctionType, type)) and getattr(value, "__module__", None) in lent_names


def _loaded_from(module, folder: Path) -> bool:
    path = getattr(module, "__file__", None)
    return bool(path) and Path(path).resolve().parent == folder


def forget() -> None:
    """In the kernel: take back every lent module (also the ones a cell imported from disk outside grading, so a
    hidden test behaves the same everywhere): out of ``sys.modules`` and the package, the names bound to their
    functions, classes or the modules themselves out of the notebook, their folder deleted, the garbage collected;
    then the hooks ``lend`` put aside are back."""
    import autograder

    unseen = unseen_dir()
    lent = set(_LENT) | {full.split(".", 1)[1] for full, module in list(sys.modules.items())
                         if full.startswith("autograder.") and _loaded_from(module, unseen)}
    names = {f"autograder.{n}" for n in lent}
    for full in names:
        sys.modules.pop(full, None)
    for name in lent:
        vars(autograder).pop(name, None)
    shell = _shell()
    if shell is not None:
        ns = shell.user_ns
        for key in [k for k, v in ns.items() if _from_lent(v, names)]:
            del ns[key]
    for folder in set(_LENT.values()):
        rmtree(folder, ignore_errors=True)
    _LENT.clear()
    gc.collect()
    _bring_hooks_back()
