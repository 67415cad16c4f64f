"""Records in the probes' canonical form: their keys cut out by one regex, no pivot.

The probes write every record the same way: `forensics:<kind>` then `key=value` pairs in
one fixed key order, values bare. For such a body one regex match with a group per key
yields the record's row of values directly; the general reader (contract.py) splits
every body into pairs, explodes them into rows and pivots them back, several times the
work. Only the tokenising differs: both feed the same checks (contract._VALIDATE), so a
record gives the same row, or the same reject, either way (tested). Any other body
(another key order, a key twice, an unknown key, a stray word, quotes) is the general
reader's.
"""

from __future__ import annotations

import polars as pl

# Every key the contract knows per kind, in the order the probes write them
# (forensics/probes: record_checksum, PageCanary); contract.KNOWN is these as sets.
ORDER = {
    "checksum": ("side", "room", "rid", "buf", "layer", "tp", "dtype", "nbytes",
                 "head", "tail", "full", "alg"),
    "canary": ("step", "layer", "bs", "mode", "expected", "changed", "unexpected", "t_us"),
    "step": ("step", "bs", "rids", "rooms", "t_us"),
}  # fmt: skip
# A value as the general reader cuts it from a body without quotes: the rest of a
# space-separated token after its first "=" (possibly empty).
_VALUE = r'[^ "]*'


def form(kind: str) -> str:
    """Regex of a canonical body (with one leading space): each key at most once, in order."""
    return "^" + "".join(f"(?: {k}=(?P<{k}>{_VALUE}))?" for k in ORDER[kind]) + "$"


def leading(kind: str) -> str:
    """Regex of a canonical body that gives the first key and any number of the keys after
    it, in order and without a gap (the probes write every key; older probes and forks
    leave trailing ones out, e.g. a canary's `unexpected`). Each optional part opens with
    a space that only it can take, so the regex is one-pass: captures cost one scan."""
    keys = ORDER[kind]
    rest = ""
    for k in reversed(keys[1:]):
        rest = f"(?: {k}=(?P<{k}>{_VALUE}){rest})?"
    return f"^{keys[0]}=(?P<{keys[0]}>{_VALUE}){rest}$"


FORMS = {kind: form(kind) for kind in ORDER}
LEADING = {kind: leading(kind) for kind in ORDER}


def split(kind: str, rows: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(canonical rows as `row` + one column per key, the other rows) of `rows` (`row`,
    `body`: a body of `kind` without quotes, stripped as the general reader strips it).

    Records with the first keys in order (all of them, as the probes write them) are cut
    by one match; for the others the form is checked by a match without captures (a DFA:
    cheap), and the values are the space-separated fields in order, each key at the place
    the check allows it. (The mixed benchmark journal's canaries, without `unexpected`,
    took that second path: 0.37 CPU-s per 154 k records, 0.12 by the first.)
    """
    keys = ORDER[kind]
    whole = rows.select(pl.col("body").str.extract_groups(LEADING[kind])).to_series()
    whole = whole.struct.unnest()
    done = whole[keys[0]].is_not_null()
    if done.all():
        return pl.concat([rows.select("row"), whole], how="horizontal"), rows.clear()
    first = pl.concat([rows.select("row"), whole], how="horizontal").filter(done)
    found, rest = _fields(kind, rows.filter(~done))
    return (pl.concat([first, found]).sort("row") if len(found) else first), rest


def _fields(kind: str, rows: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """split() for the other records in the form (a key left out before the last given)."""
    lead = pl.lit(" ") + pl.col("body")
    hit = rows.select(lead.str.contains(FORMS[kind]).fill_null(False)).to_series()
    if not hit.any():
        return pl.DataFrame(), rows
    mine = rows.filter(hit)
    keys = ORDER[kind]
    fields = mine.select(lead.str.splitn(" ", len(keys) + 1)).to_series().struct.unnest()
    # Field 0 is the empty text before the leading space; field i + 1 holds the i-th pair.
    pairs = fields.select(_pair(f, i) for i, f in enumerate(fields.columns[1:])).unnest(
        [f"p{i}" for i in range(len(keys))]
    )
    # A key left out moves the ones after it forward: key i is among pairs 0 … i.
    values = pairs.select(
        pl.coalesce(
            pl.when(pl.col(f"k{j}") == k).then(pl.col(f"v{j}")) for j in range(i + 1)
        ).alias(k)
        for i, k in enumerate(keys)
    )
    return pl.concat([mine.select("row"), values], how="horizontal"), rows.filter(~hit)


def _pair(field: str, i: int) -> pl.Expr:
    """A `key=value` field as struct {k<i>, v<i>}: split at its first "="."""
    eq = pl.col(field).str.find("=", literal=True)
    return pl.struct(
        pl.col(field).str.slice(0, eq).alias(f"k{i}"),
        pl.col(field).str.slice(eq + 1).alias(f"v{i}"),
    ).alias(f"p{i}")
