"""The build backend: setuptools' own, with the packages found in the tree rather than
listed by hand (a hand-kept list once shipped a wheel without `forensics.experiment`).

setuptools' finder cannot put a folder under another name (`parsers/` is installed as
`forensics.parsers`), so the mapping stays in pyproject.toml's `package-dir` and this
module walks each mapped folder: every folder under it but caches and dotfiles is a
package, data-only ones included, so that package data by pattern ships every file.
pyproject.toml names this module as the backend (`backend-path`); nothing imports it at
run time.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

from setuptools import build_meta
from setuptools.build_meta import *  # noqa: F403  # the PEP 517 hooks, overridden below

ROOT = Path(__file__).resolve().parents[2]
SKIPPED = ("__pycache__", ".")  # caches and dotfiles


def package_dirs(root: Path = ROOT) -> dict[str, str]:
    """pyproject.toml's package-dir: the import name of each mapped folder."""
    conf = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    return dict(conf["tool"]["setuptools"]["package-dir"])


def find_packages(root: Path = ROOT) -> list[str]:
    """Every package under the mapped folders, by its import name, sorted."""
    mapped = package_dirs(root)
    found = set()
    for name, folder in mapped.items():
        for here, dirs, _ in os.walk(root / folder):
            dirs[:] = [d for d in dirs if not d.startswith(SKIPPED)]
            rel = Path(here).relative_to(root / folder)
            found.add(".".join((name, *rel.parts)))
    return sorted(found)


class _Backend(build_meta._BuildMetaBackend):
    def run_setup(self, setup_script: str = "setup.py") -> None:
        from setuptools import setup

        setup(packages=find_packages())


_BACKEND = _Backend()
get_requires_for_build_wheel = _BACKEND.get_requires_for_build_wheel
get_requires_for_build_sdist = _BACKEND.get_requires_for_build_sdist
get_requires_for_build_editable = _BACKEND.get_requires_for_build_editable
prepare_metadata_for_build_wheel = _BACKEND.prepare_metadata_for_build_wheel
prepare_metadata_for_build_editable = _BACKEND.prepare_metadata_for_build_editable
build_wheel = _BACKEND.build_wheel
build_sdist = _BACKEND.build_sdist
build_editable = _BACKEND.build_editable
