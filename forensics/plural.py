"""Counts in words: "1 source", "2 sources" (a single bad line read "1 lines quarantined")."""


def counted(n: int, one: str, many: str | None = None) -> str:
    """`n` and its noun; `many` is `one` + "s" unless given."""
    return amount(f"{n:,}", one, many)


def amount(shown: str, one: str, many: str | None = None) -> str:
    """A number as printed ("1", "0.5", "2") and its noun: singular for "1" alone."""
    return f"{shown} {one if shown == '1' else many or one + 's'}"
