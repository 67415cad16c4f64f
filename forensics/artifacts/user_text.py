"""What the users wrote, as far as the incident holds it, for `bundle --redact-prompts`:
the prompts and replies of the harness results and of SGLang's `Receive`/`Finish` lines.

A log template is evidence and stays readable in a redacted bundle; but the masker only
masks what looks variable (numbers, ids, quoted values), so a prompt pasted into an
unquoted error line survives it. A template (or a named value) that shares a run of
four words with a known user text, or holds a short one whole, is therefore HMAC'd like
the user text itself: it fails closed where the two meet.
"""

from __future__ import annotations

import re

import duckdb
import orjson

RUN = 4  # words in a row shared with a user text: the template holds a piece of it
SHORT = 12  # a user text of fewer words is matched whole, from this many characters
_WORD = re.compile(r"\w+")
# a quoted literal in a Receive/Finish line (Python's repr or JSON): text=, out's text …
_QUOTED = re.compile(rf"'((?:[^'\\]|\\.){{{SHORT},}})'|\"((?:[^\"\\]|\\.){{{SHORT},}})\"")


def _strings(doc: object) -> list[str]:
    if isinstance(doc, str):
        return [doc]
    if isinstance(doc, list):
        return [s for v in doc for s in _strings(v)]
    if isinstance(doc, dict):
        return [s for v in doc.values() for s in _strings(v)]
    return []


class UserText:
    """The word runs of every known user text, and the short texts whole."""

    def __init__(self, texts: list[str]) -> None:
        self.runs: set[tuple[str, ...]] = set()
        self.short: set[str] = set()
        for text in dict.fromkeys(texts):
            words = _WORD.findall(text.lower())
            if len(words) >= RUN:
                self.runs.update(zip(*(words[i:] for i in range(RUN)), strict=False))
            elif len(text.strip()) >= SHORT:
                self.short.add(text.strip().lower())

    def holds(self, text: str) -> bool:
        """Whether the text holds a piece of a user text."""
        low = text.lower()
        words = _WORD.findall(low)
        if any(run in self.runs for run in zip(*(words[i:] for i in range(RUN)), strict=False)):
            return True
        return any(s in low for s in self.short)

    @classmethod
    def of(cls, con: duckdb.DuckDBPyConnection) -> UserText:
        """The user texts stored in the incident (read before any shadow is put over it)."""
        texts: list[str] = []
        for reason, extra in con.execute("SELECT reason, extra FROM results").fetchall():
            texts += [reason] if reason else []
            if extra:
                try:
                    texts += _strings(orjson.loads(extra))
                except orjson.JSONDecodeError:
                    texts.append(extra)
        lines = con.execute(
            """SELECT message FROM entries WHERE message LIKE '%Receive: obj=%'
               OR message LIKE '%Finish: obj=%' OR message LIKE '%"obj"%'"""
        ).fetchall()
        for (message,) in lines:
            texts += [a or b for a, b in _QUOTED.findall(message or "")]
        return cls(texts)
