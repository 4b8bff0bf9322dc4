"""The installed package holds every module: pyproject.toml lists its packages one by one (so that
`codemods/` installs as `pallas_fix.codemods`, never as a top-level `codemods`), and a folder left
off that list is missing from a wheel while the tests, run from the checkout, still import it.
`pallas_fix.verify.device` was missing that way: a wheel's `verify.runner` failed to import."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_package_folder_is_listed_in_pyproject() -> None:
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    folders = {".".join(init.parent.relative_to(ROOT).parts) for init in (ROOT / "pallas_fix").rglob("__init__.py")}
    assert folders - listed == set(), "package folders missing from pyproject.toml's packages"
    mapped = set(setuptools.get("package-dir", {}))
    assert listed - folders - mapped == set(), "packages listed in pyproject.toml with no folder"
