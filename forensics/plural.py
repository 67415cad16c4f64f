"""Counts in words: "1 source", "2 sources" (a single bad line read "1 lines quarantined")."""


def counted(n: int, one: str, many: str | None = None) -> str:
    """`n` and its noun; `many` is `one` + "s" unless given."""
    return f"{n:,} {one if n == 1 else many or one + 's'}"
