"""The wheel is what is tracked: every module and every data file under the four package
folders, found by the build backend rather than listed (a hand-kept list once shipped a
wheel without `forensics.experiment` and `echoes.toml`). `.ci/wheel` installs such a
wheel into a fresh venv and runs the commands from it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {"forensics": "forensics", "parsers": "forensics/parsers",
           "queries": "forensics/queries", "dashboards": "forensics/dashboards"}  # fmt: skip


def _tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z", "--", *FOLDERS, "pyproject.toml", "README.md"],
                         cwd=ROOT, capture_output=True, check=True).stdout  # fmt: skip
    return [p for p in out.decode().split("\0") if p]


def test_the_wheel_holds_every_tracked_file_of_the_packages(tmp_path: Path) -> None:
    tree = tmp_path / "tree"  # the tracked files alone: what a clean clone builds from
    tracked = _tracked()
    for rel in tracked:
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, tree / rel)
    dist = tmp_path / "dist"
    build = (
        "import sys; sys.path.insert(0, 'forensics/_build'); import wheel_layout; "
        f"print(wheel_layout.build_wheel({str(dist)!r}))"
    )
    got = subprocess.run([sys.executable, "-c", build], cwd=tree, capture_output=True, text=True)
    assert got.returncode == 0, got.stderr[-2000:]
    name = got.stdout.strip().splitlines()[-1]
    with zipfile.ZipFile(dist / name) as whl:
        shipped = {n for n in whl.namelist() if ".dist-info/" not in n}
    top = ("pyproject.toml", "README.md")
    expected = set()
    for rel in tracked:
        if rel in top:
            continue
        folder, rest = rel.split("/", 1)
        expected.add(f"{FOLDERS[folder]}/{rest}")
    assert shipped == expected
    assert {"forensics/experiment/__init__.py", "forensics/analyses/echoes.toml",
            "forensics/queries/failures.sql"} <= shipped  # fmt: skip


def test_every_folder_of_the_packages_is_found() -> None:
    sys.path.insert(0, str(ROOT / "forensics" / "_build"))
    try:
        import wheel_layout
    finally:
        sys.path.remove(str(ROOT / "forensics" / "_build"))
    found = set(wheel_layout.find_packages(ROOT))
    folders = {str(Path(p).parent) for p in _tracked() if "/" in p}
    for folder in folders:
        top, _, rest = folder.partition("/")
        name = ".".join([FOLDERS[top].replace("/", "."), *(rest.split("/") if rest else [])])
        assert name in found, folder
    assert "forensics.experiment" in found and "forensics.parsers.journald" in found
    assert not any("__pycache__" in p for p in found)
