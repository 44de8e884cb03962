"""Which Python a student may have: pyproject.toml, the README and environment.yml state one range, and every
pin resolves to binary wheels for each Python version in it.

The resolver test NEEDS THE PACKAGE INDEX and takes minutes (pip fetches the metadata of every pin for every
version: about 5 minutes on 2 busy cores). It runs with ``make check-pythons`` (TRAINKIT_CHECK_PYTHONS=1) and
SKIPS, saying why, otherwise and wherever the index cannot be reached, so ``make test`` stays fast and passes
offline. The offline agreement test always runs.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def supported_versions() -> list[str]:
    """The minor versions ``requires-python`` allows, e.g. ['3.11', '3.12', '3.13', '3.14']."""
    spec = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    match = re.fullmatch(r">=3\.(\d+),\s*<3\.(\d+)", spec)
    assert match, f"requires-python should read '>=3.X,<3.Y' (a closed range the pins were checked for), got {spec!r}"
    low, high = int(match.group(1)), int(match.group(2))
    return [f"3.{minor}" for minor in range(low, high)]


def test_python_versions_agree_in_pyproject_readme_and_environment_yml():
    versions = supported_versions()
    assert versions[0] == "3.11" and sys.version.startswith(tuple(versions)), (versions, sys.version)
    span = f"{versions[0]} to {versions[-1]}"
    readme = (ROOT / "README.md").read_text()
    assert f"Python {span}" in readme, f"README.md should say which Pythons work: 'Python {span}'"
    stated = set(re.findall(r"Python (3\.\d+) to (3\.\d+)", readme))
    assert stated == {(versions[0], versions[-1])}, f"README.md states other ranges too: {stated}"
    low, high = versions[0], f"3.{int(versions[-1].split('.')[1]) + 1}"
    env = (ROOT / "environment.yml").read_text()
    assert re.search(rf"^\s*-\s*python>={re.escape(low)},<{re.escape(high)}\s*$", env, re.M), (
        f"environment.yml should ask for python>={low},<{high}, as pyproject.toml's requires-python does")


def _index_url() -> str:
    out = subprocess.run([sys.executable, "-m", "pip", "config", "get", "global.index-url"],
                         capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else "https://pypi.org/simple/"


def _reachable(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/pip/", timeout=10) as reply:
            reply.read(1)
        return None
    except Exception as exc:  # noqa: BLE001 -- offline, DNS, proxy, TLS: any of these means "cannot check here"
        return f"{type(exc).__name__}: {exc}"


def _resolve(version: str, pins: list[str]) -> subprocess.CompletedProcess:
    # --isolated: this machine's pip configuration (local wheel folders, caps) must not decide the answer.
    return subprocess.run(
        [sys.executable, "-m", "pip", "install", "--isolated", "--dry-run", "--ignore-installed", "--quiet",
         "--only-binary=:all:", "--python-version", version, "--index-url", _index_url(), *pins],
        capture_output=True, text=True, timeout=600)


@pytest.mark.xdist_group("network")
def test_every_pin_resolves_to_wheels_for_every_supported_python():
    """NEEDS THE PACKAGE INDEX (make check-pythons): skips, with the reason, where it is not asked for or unreachable."""
    if os.environ.get("TRAINKIT_CHECK_PYTHONS") != "1":
        pytest.skip("resolving the pins for every Python takes minutes and needs the package index: "
                    "run `make check-pythons` (TRAINKIT_CHECK_PYTHONS=1)")
    problem = _reachable(_index_url())
    if problem:
        pytest.skip(f"needs the package index ({_index_url()}), unreachable here: {problem}")
    pins = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    versions = supported_versions()
    with ThreadPoolExecutor(len(versions)) as pool:  # waiting on the network, not the CPU
        results = dict(zip(versions, pool.map(lambda v: _resolve(v, pins), versions)))
    failed = {v: r.stderr.strip().splitlines()[-3:] for v, r in results.items() if r.returncode != 0}
    assert not failed, f"these Pythons cannot install the pins from binary wheels: {failed}"
