"""Every import a released lab or lesson has ever made still resolves: students' own copies in my-work/ keep the
imports of the term they were copied in, and nothing rewrites them (old module names stay as aliases for one term).

tests/released_imports.json holds, per module, the names imported from it by any version of labs/ and lessons/ in the
course's history (made by walking `git log`; ``python tests/test_released_imports.py`` adds today's). The second test
keeps it complete: an import the current notebooks make must be in the file, so a later rename cannot drop it
unnoticed.
"""
from __future__ import annotations

import ast
import importlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "tests" / "released_imports.json"
PACKAGES = ("trainkit", "autograder")


def notebook_imports(paths) -> dict[str, set[str]]:
    """{module: names imported from it} over the code cells of these notebooks ("" for a plain ``import module``)."""
    found: dict[str, set[str]] = {}
    for path in paths:
        for cell in json.loads(Path(path).read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] != "code":
                continue
            source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            source = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
            for node in ast.walk(ast.parse(source)):
                if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module.split(".")[0] in PACKAGES:
                    found.setdefault(node.module, set()).update(a.name for a in node.names)
                elif isinstance(node, ast.Import):
                    for alias in node.names:
                        if alias.name.split(".")[0] in PACKAGES:
                            found.setdefault(alias.name, set()).add("")
    return found


def current_notebooks() -> list[Path]:
    return sorted([*ROOT.glob("labs/*/*.ipynb"), *ROOT.glob("lessons/*.ipynb")])


def test_every_import_ever_released_still_resolves():
    record = json.loads(RECORD.read_text())
    assert sum(len(names) for names in record.values()) > 100, "the record of released imports looks truncated"
    broken = []
    for module, names in sorted(record.items()):
        try:
            loaded = importlib.import_module(module)
        except ImportError as exc:
            broken.append(f"import {module}: {exc}")
            continue
        for name in names:
            if name and not hasattr(loaded, name):
                try:
                    importlib.import_module(f"{module}.{name}")
                except ImportError:
                    broken.append(f"from {module} import {name}")
    assert not broken, "imports that students' copies make no longer resolve:\n" + "\n".join(broken)


def test_the_record_holds_every_import_the_notebooks_make_today():
    record = {module: set(names) for module, names in json.loads(RECORD.read_text()).items()}
    missing = [f"{module}: {sorted(names - record.get(module, set()))}"
               for module, names in notebook_imports(current_notebooks()).items() if names - record.get(module, set())]
    assert not missing, ("tests/released_imports.json lacks imports the notebooks make (run "
                         "`python tests/test_released_imports.py` to add them):\n" + "\n".join(missing))


if __name__ == "__main__":
    merged = {module: set(names) for module, names in json.loads(RECORD.read_text()).items()}
    for module, names in notebook_imports(current_notebooks()).items():
        merged.setdefault(module, set()).update(names)
    RECORD.write_text(json.dumps({m: sorted(n) for m, n in sorted(merged.items())}, indent=1) + "\n")
    print(f"{RECORD.relative_to(ROOT)}: {sum(len(n) for n in merged.values())} names in {len(merged)} modules",
          file=sys.stderr)
