"""Named queries: one documented .sql file each, installed as views of the same name.

A file's header says what one row is and documents every column with a line
`-- @column NAME TYPE description`; the body is one SELECT. Tests check that the
documented columns are exactly the view's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

_COLUMN = re.compile(r"^-- @column\s+(\w+)\s+(\S+)\s+(.*)$", re.M)


@dataclass(frozen=True)
class NamedQuery:
    name: str
    sql: str  # the SELECT
    summary: str  # first header line
    columns: list[tuple[str, str, str]]  # (name, type, description)


def load(name: str) -> NamedQuery:
    text = resources.files(__name__).joinpath(f"{name}.sql").read_text()
    header = [ln for ln in text.splitlines() if ln.startswith("--")]
    summary = header[0].removeprefix("--").strip() if header else name
    body = "\n".join(ln for ln in text.splitlines() if not ln.startswith("--")).strip()
    return NamedQuery(name, body.rstrip(";"), summary, _COLUMN.findall(text))


def names() -> list[str]:
    return sorted(
        p.name.removesuffix(".sql")
        for p in resources.files(__name__).iterdir()
        if p.name.endswith(".sql")
    )


def all_queries() -> list[NamedQuery]:
    return [load(n) for n in names()]
