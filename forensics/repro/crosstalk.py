"""`cross_talk`: a reply that holds another session's text.

Every session's system message carries a marker of its own, after the system text all
sessions share, and the harness writes each session's long context and tool results. A
reply holding another session's marker, or a stretch of text that only one other
session's prompts hold, shows that session's tokens reaching this one: the KV pages of an
aborted request reused, a HiCache slot freed early. Only sessions in flight, or finished
within `WINDOW_S`, count: pages of a session long gone have been rewritten many times.

Text shared between sessions says nothing about where it came from (the common system
prompt, a corpus two contexts were cut from, a tool result two sessions got), so only
`GRAM`-character n-grams held by one session's prompts count. Each session's text is
indexed by the hashes of its n-grams at every `STRIDE`-th position and a reply's n-grams
are looked up at every position, so any stretch of GRAM + STRIDE - 1 characters copied
from one prompt is found; each hit is then checked exactly against every session's text
(strided hashes alone cannot see text shared at another alignment).
"""

from __future__ import annotations

import hashlib
import re

GRAM = 64
STRIDE = 16
WINDOW_S = 30.0
_SHARED = -1  # an n-gram hash indexed from two or more sessions
_MARKER = re.compile(r"\[session marker ([0-9a-f]{16})\]")


def marker(seed: int, session: int) -> str:
    """The session's own marker: a pure function of (seed, session), like its context."""
    tag = hashlib.blake2b(f"{seed}/marker/{session}".encode(), digest_size=8).hexdigest()
    return f"[session marker {tag}]"


class CrossTalk:
    """The prompts of one run's sessions, and when each was in flight."""

    def __init__(self) -> None:
        self._owner: dict[int, int] = {}  # n-gram hash -> session, or _SHARED
        self._texts: dict[int, list[str]] = {}
        self._markers: dict[str, int] = {}  # marker tag -> session
        self._began: dict[int, float] = {}
        self._ended: dict[int, float] = {}

    def begin(self, session: int, seed: int, now: float) -> None:
        tag = _MARKER.search(marker(seed, session))
        assert tag is not None
        self._markers[tag.group(1)] = session
        self._began[session] = now
        self._ended.pop(session, None)
        self._texts.setdefault(session, [])

    def end(self, session: int, now: float) -> None:
        self._ended[session] = now

    def add(self, session: int, text: str) -> None:
        """Text the harness put into the session's prompt (system message, tool result)."""
        self._texts.setdefault(session, []).append(text)
        owner = self._owner
        for i in range(0, len(text) - GRAM + 1, STRIDE):
            h = hash(text[i : i + GRAM])
            o = owner.get(h)
            if o is None:
                owner[h] = session
            elif o != session:
                owner[h] = _SHARED

    def _near(self, other: int, start: float, end: float) -> bool:
        """Was `other` in flight while the request was, or finished within WINDOW_S of it?"""
        began = self._began.get(other)
        if began is None or began > end:
            return False
        ended = self._ended.get(other)
        return ended is None or ended >= start - WINDOW_S

    def _holders(self, gram: str) -> list[int]:
        return [s for s, texts in self._texts.items() if any(gram in t for t in texts)]

    def check(self, reply: str, session: int, start: float, end: float) -> str | None:
        """Which other session's text the reply holds (None: none)."""
        for m in _MARKER.finditer(reply):
            other = self._markers.get(m.group(1))
            if other is not None and other != session and self._near(other, start, end):
                return f"session {other}'s marker at offset {m.start()}"
        n = len(reply) - GRAM + 1
        # the set's intersection with the index runs in C: the one pass over every
        # position is the validator's whole cost on a clean reply
        owner = self._owner
        hits = {hash(reply[i : i + GRAM]) for i in range(n)} & owner.keys()
        hits = {h for h in hits if owner[h] not in (session, _SHARED)}
        if not hits:
            return None
        own = self._texts.get(session, [])
        for i in range(n):
            gram = reply[i : i + GRAM]
            if hash(gram) not in hits or any(gram in t for t in own):
                continue
            holders = self._holders(gram)
            if len(holders) == 1 and self._near(holders[0], start, end):
                return (f"session {holders[0]}'s text at offset {i} "
                        f"({gram[:24]!r}…, held by no other session)")  # fmt: skip
        return None
