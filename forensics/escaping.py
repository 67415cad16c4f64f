"""User values shown in a terminal as text, never as instructions to it.

Hosts, runs, rids, paths and log messages come from the incident, and an incident can be
hostile: rich would read `[/x]` as markup (a MarkupError after the commit) and `:warning:`
as an emoji, and the terminal itself would obey ESC/OSC sequences (a hyperlink, a cleared
screen) and bidi overrides (text that reads in another order than it runs). Every such
character is shown as its JSON escape (`\\u001b`), so JSON output stays valid JSON with
the same values, and every string rich renders is taken literally."""

from __future__ import annotations

import re
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

# C0 but tab and newline, DEL, C1; the bidi marks, embeddings, overrides and isolates
# (U+061C, U+200E/F, U+202A–202E, U+2066–2069).
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def visible(text: str) -> str:
    """`text` with every control and bidi character written as `\\uXXXX`."""
    return UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


class SafeConsole(Console):
    """A rich Console that renders every string literally: no markup, no emoji codes,
    controls and bidi characters escaped. Styling goes through `style=` arguments and
    Text objects, whose text the caller has made `visible`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("markup", False)
        kwargs.setdefault("emoji", False)
        kwargs.setdefault("highlight", False)
        super().__init__(*args, **kwargs)

    def print(self, *objects: Any, **kwargs: Any) -> None:  # type: ignore[override]
        for obj in objects:
            if isinstance(obj, Table):  # a table wraps a long cell, never cuts it ("…")
                for column in obj.columns:
                    column.overflow = "fold"
        super().print(*objects, **kwargs)

    def render_str(self, text: str, **kwargs: Any) -> Text:  # type: ignore[override]
        kwargs["markup"] = False
        kwargs["emoji"] = False
        return super().render_str(visible(text), **kwargs)
