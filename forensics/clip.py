"""Text shown to a user, cut to fit: at a word boundary, with an ellipsis, never inside a
word or a placeholder (`(generation <*> p` said nothing)."""

from __future__ import annotations


def clip(text: str, limit: int, cut: bool = False) -> str:
    """`text` in at most `limit` characters; `cut`: it was cut before (a stored template
    at its cap) and says so even when it fits."""
    if len(text) <= limit and not cut:
        return text
    head = text[: max(limit - 1, 1)]
    if len(text) > limit - 1:
        space = head.rfind(" ")
        if space >= limit // 2:  # a word boundary not too far back
            head = head[:space]
        lt, gt = head.rfind("<"), head.rfind(">")
        if lt > gt:  # inside a placeholder: before it
            head = head[:lt]
    return head.rstrip(" ,;:([{") + "…"
