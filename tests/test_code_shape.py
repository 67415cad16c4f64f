"""The code's shape, checked: no import circle through the upgrade, few long functions,
scipy not needed at run time."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("forensics", "parsers", "queries", "dashboards")
LONG = 50  # lines: a function this long wants a step named
MAX_LONG = 20


def _imports(folder: Path) -> dict[str, set[str]]:
    """module -> sibling modules it imports, at the top or inside a function."""
    mods = {p.stem for p in folder.glob("*.py")}
    out = {}
    for p in folder.glob("*.py"):
        deps: set[str] = set()
        for n in ast.walk(ast.parse(p.read_text())):
            if isinstance(n, ast.ImportFrom) and n.level == 1:
                deps |= {n.module.split(".")[0]} if n.module else {a.name for a in n.names}
        out[p.stem] = deps & mods
    return out


def _cycles(g: dict[str, set[str]]) -> set[tuple[str, ...]]:
    found = set()

    def walk(start: str, node: str, path: list[str]) -> None:
        for d in g.get(node, ()):
            if d == start:
                i = path.index(min(path))
                found.add(tuple(path[i:] + path[:i]))
            elif d not in path:
                walk(start, d, [*path, d])

    for m in g:
        walk(m, m, [m])
    return found


def test_opening_a_database_never_upgrades_it() -> None:
    """database → legacy → stage → database was a circle: a writable open upgraded by
    itself. Upgrading is upgrade.py's; no circle passes through it, legacy or stage.
    (Left: database's late imports of shards and integrity to install views.)"""
    cycles = _cycles(_imports(ROOT / "forensics" / "store"))
    assert not [c for c in cycles if {"legacy", "stage", "upgrade"} & set(c)], cycles
    assert cycles <= {("database", "shards"), ("database", "integrity"),
                      ("database", "integrity", "shards")}  # fmt: skip


def _long_functions() -> list[str]:
    out = []
    for top in PRODUCT:
        for p in (ROOT / top).rglob("*.py"):
            for n in ast.walk(ast.parse(p.read_text())):
                long = isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and (
                    n.end_lineno - n.lineno + 1 >= LONG
                )
                if long:
                    out.append(f"{p.relative_to(ROOT)}:{n.lineno} {n.name}")
    return out


def test_few_functions_are_long() -> None:
    long = _long_functions()
    assert len(long) <= MAX_LONG, "\n".join(long)


def test_scipy_is_not_a_runtime_dependency(tmp_path: Path) -> None:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert not [d for d in deps if d.startswith("scipy")]
    code = (
        "import sys, forensics\n"
        f"r = forensics.demo({str(tmp_path / 'inc')!r})\n"
        "forensics.report(r.ingest.db); forensics.suspects(r.ingest.db)\n"
        "assert 'scipy' not in sys.modules, 'scipy imported'\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_verdicts_and_statuses_are_declared_once() -> None:
    """Every verdict the rooms view can give and every status the harness writes is in
    forensics/statuses.py, with one meaning; the lists elsewhere are drawn from it."""
    import re

    from forensics.dashboards.figures import VERDICT_COLOURS

    from forensics import statuses
    from forensics.analyses import correlate, rooms

    sql = (ROOT / "queries" / "rooms.sql").read_text()
    given = set(re.findall(r"THEN '(\w+)'", sql)) | set(re.findall(r"ELSE '(\w+)'", sql))
    assert given == set(statuses.SEVERITY)
    assert set(VERDICT_COLOURS) == set(statuses.SEVERITY)
    assert rooms.SEVERITY is statuses.SEVERITY and correlate.BAD_VERDICTS is statuses.BAD_VERDICTS
    # one meaning each: "uncompared" got a reply, so it is unjudged but not "no reply"
    assert "uncompared" in statuses.UNJUDGED and "uncompared" not in statuses.NO_REPLY
    assert "'uncompared'" not in statuses.NO_REPLY_SQL and "'uncompared'" in statuses.UNJUDGED_SQL
    assert len({v.name for v in statuses.VERDICT_TABLE}) == len(statuses.VERDICT_TABLE)


_MAPPED = {"forensics": "forensics", "parsers": "forensics.parsers",
           "queries": "forensics.queries", "dashboards": "forensics.dashboards"}  # fmt: skip


def _unit_imports() -> dict[str, set[str]]:
    """forensics.X -> the other forensics.Y it imports (X a package or a top module),
    relative and absolute imports resolved, inside functions too."""
    out: dict[str, set[str]] = {}
    for top, pkg in _MAPPED.items():
        for p in (ROOT / top).rglob("*.py"):
            parts = [*pkg.split("."), *p.relative_to(ROOT / top).with_suffix("").parts]
            base = parts[:-1]  # the module's package (an __init__'s is its own)
            unit = ".".join(parts[:2])
            for n in ast.walk(ast.parse(p.read_text())):
                names = []
                if isinstance(n, ast.ImportFrom) and n.level:
                    up = base[: len(base) - (n.level - 1)]
                    names = [".".join([*up, *(n.module or "").split(".")]).rstrip(".")]
                    if not n.module:
                        names = [".".join([*up, a.name]) for a in n.names]
                elif isinstance(n, ast.ImportFrom) and (n.module or "").startswith("forensics."):
                    names = [n.module or ""]
                elif isinstance(n, ast.Import):
                    names = [a.name for a in n.names if a.name.startswith("forensics.")]
                for name in names:
                    other = ".".join(name.split(".")[:2])
                    if other != unit and "." in other:
                        out.setdefault(unit, set()).add(other)
    return out


def test_the_store_imports_nothing_above_it() -> None:
    """The store is the bottom layer but the readers: it is handed what the analyses
    derive (writing.py), never imports them, the read scope or anything else above."""
    below = {"forensics.errors", "forensics.parsers", "forensics.plural", "forensics.queries",
             "forensics.statuses", "forensics.timefmt"}  # fmt: skip
    assert _unit_imports()["forensics.store"] <= below


def test_no_circle_between_or_within_packages() -> None:
    """Between the units of the product (packages and top modules; the package's own lazy
    __init__ and __main__ aside) no import circle, and within every package none but the
    two known ones (the catalog's late imports; the probes' kernels and digest)."""
    units = {
        u: d
        for u, d in _unit_imports().items()
        if u not in ("forensics.__init__", "forensics.__main__")
    }
    units.pop("forensics", None)
    assert not _cycles(units)
    known = {("database", "shards"), ("database", "integrity"),
             ("database", "integrity", "shards"), ("digest", "kernels")}  # fmt: skip
    for top in PRODUCT:
        for d in [
            ROOT / top,
            *(p for p in (ROOT / top).rglob("*") if (p / "__init__.py").exists()),
        ]:
            assert _cycles(_imports(d)) <= known, d
