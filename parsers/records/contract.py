"""`forensics:<kind> key=value …` / `forensics:<kind> {json}` / FORENSICS_* fields → records.

The common form (key=value) is split for all rows at once by polars; the JSON body and
structured-field forms, and quoted values, are rare and read in Python. Every kind is
validated column-wise; a row that breaks the contract becomes a reject with its reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import orjson
import polars as pl

from . import canonical as canonical_form

TOKEN = r"forensics:([A-Za-z_][A-Za-z0-9_]*)"
_KIND = r"^([A-Za-z_][A-Za-z0-9_]*)"  # TOKEN's name, read where the token was found
_KIND_SLICE = 64
_PAIR = r'[A-Za-z_][A-Za-z0-9_]*=(?:"(?:[^"\\]|\\.)*"|[^\s"]\S*|)'
ROOM_MAX = (1 << 63) - 1
# A canary record names at most this many pages: a range beyond it ("1-100000000") is
# quarantined before it is expanded, never materialised.
MAX_PAGES = 1 << 20
# The kinds and their keys, as the probes order them (canonical.ORDER): one list for both.
KINDS = tuple(canonical_form.ORDER)
KNOWN = {kind: set(keys) for kind, keys in canonical_form.ORDER.items()}


@dataclass
class Records:
    checksum: pl.DataFrame
    canary: pl.DataFrame
    step: pl.DataFrame
    rejects: list[tuple[int, str]] = field(default_factory=list)  # (row, reason)


def _unquote(v: str) -> str:
    try:
        out = orjson.loads(v)
        if isinstance(out, str):
            return out
    except orjson.JSONDecodeError:
        pass
    return re.sub(r"\\(.)", r"\1", v[1:-1])


def _json_value(v: object) -> str:
    if isinstance(v, list):
        return "[" + ",".join(_json_value(x) for x in v) + "]"
    if isinstance(v, bool):
        return str(v).lower()
    if v is None:
        return ""
    return v if isinstance(v, str) else str(v)


def _long_kv(df: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(row, key, value) of key=value bodies, and (row, rest) where other text was left.

    Bodies without a quote split on spaces (cheap); quoted ones need the pair regex.
    """
    quoted = df["body"].str.contains('"', literal=True)
    toks = (
        df.filter(~quoted)
        .select("row", tok=pl.col("body").str.split(" "))
        .explode("tok")
        .filter(pl.col("tok") != "")
    )
    pairs = (
        df.filter(quoted)
        .select("row", tok=pl.col("body").str.extract_all(_PAIR))
        .explode("tok")
        .drop_nulls("tok")
    )
    leftover = (
        df.filter(quoted)
        .select("row", rest=pl.col("body").str.replace_all(_PAIR, "").str.strip_chars())
        .filter(pl.col("rest") != "")
    )
    eq = pl.col("tok").str.find("=", literal=True)
    toks = toks.with_columns(is_pair=pl.col("tok").str.contains(r"^[A-Za-z_][A-Za-z0-9_]*="))
    stray = (
        toks.filter(~pl.col("is_pair"))
        .group_by("row", maintain_order=True)
        .agg(rest=pl.col("tok").str.join(" "))
    )
    long = pl.concat([toks.filter("is_pair").select("row", "tok"), pairs]).select(
        "row", key=pl.col("tok").str.slice(0, eq), value=pl.col("tok").str.slice(eq + 1)
    )
    quoted_v = long["value"].str.starts_with('"')
    if quoted_v.any():
        idx = quoted_v.arg_true()
        plain = [_unquote(v) for v in long["value"].gather(idx).to_list()]
        long = long.with_columns(long["value"].scatter(idx, pl.Series(plain, dtype=pl.String)))
    return long, pl.concat([leftover, stray])


def _kinds(msg: pl.Series) -> pl.Series:
    """TOKEN's kind in each message: read right after the first `forensics:` (a short
    anchored match: the unanchored regex cost 0.06 s a 250 k-record group), by TOKEN
    itself where that reads none (no name follows the first token, a later one may
    have one), the name may run past the slice, or the line has letters of more than
    one byte (`find` counts bytes, `slice` characters)."""
    at = msg.str.find("forensics:", literal=True)
    kind = msg.str.slice(at.fill_null(0) + 10, _KIND_SLICE).str.extract(_KIND, 1)
    ascii_ = msg.str.len_bytes() == msg.str.len_chars()
    none = at.is_null()  # no token: no kind
    sure = (kind.is_not_null() & (kind.str.len_bytes() < _KIND_SLICE) & ascii_).fill_null(False)
    frame = pl.DataFrame({"m": msg, "k": kind, "sure": sure | none, "none": none})
    if frame["sure"].all():
        return frame.select(pl.when(~pl.col("none")).then("k")).to_series()
    return frame.select(
        pl.when("none")
        .then(pl.lit(None, pl.String))
        .when("sure")
        .then("k")
        .otherwise(pl.col("m").str.extract(TOKEN, 1))
    ).to_series()


def _bodies(entries: pl.DataFrame) -> pl.DataFrame:
    """(row, kind, body, fields) of each entry: the token's kind and what follows it."""
    msg = entries["message"].cast(pl.String)
    kind = _kinds(msg)
    # The body is what follows the token: sliced by position (a regex capturing the rest
    # of the line costs several times more). `find` counts bytes and `slice` characters,
    # so a message with letters of more than one byte (a logger's prefix before the
    # token, say) takes that regex instead. Series, not expressions of one select: an
    # eager select computed the token's regex once for each expression using it.
    start = msg.str.find("forensics:", literal=True) + 10 + kind.str.len_bytes()
    wide = ((msg.str.len_bytes() != msg.str.len_chars()) & kind.is_not_null()).fill_null(False)
    df = pl.DataFrame(
        {
            "row": pl.int_range(len(entries), eager=True, dtype=pl.Int64),
            "kind": kind,
            "body": msg.str.slice(start.fill_null(0)).str.strip_chars(),
            "fields": entries["fields"].cast(pl.String),
            "wide": wide,
        }
    )
    if df["wide"].any():
        at = df["wide"].arg_true()
        rest = msg.gather(at).str.extract(TOKEN + "(?s:(.*))", 2).str.strip_chars()
        df = df.with_columns(df["body"].scatter(at, rest))
    return df.drop("wide")


def parse_records(
    entries: pl.DataFrame, matched: pl.DataFrame | None = None, *, canonical: bool = True
) -> Records:
    """Records of entries (columns `message`, `fields`); `row` in the output indexes them.

    `matched` adds records found by user patterns: (row, kind, key, value) rows for
    entries whose own text carries no `forensics:` token. `canonical`: bodies in the
    probes' form skip the pair split (canonical.py); False only to test that both agree.
    """
    df = _bodies(entries)
    structured = df.filter(
        pl.col("fields").str.contains('"FORENSICS_KIND"', literal=True).fill_null(False)
    )
    srows = set(structured["row"].to_list())
    kv = df.filter(pl.col("kind").is_not_null() & ~pl.col("row").is_in(list(srows)))
    is_json = kv["body"].str.starts_with("{")
    rows_py, rejects = _json_rows(kv.filter(is_json))
    rows_py += _structured_rows(structured)
    plain = kv.filter(~is_json)
    fast: dict[str, pl.DataFrame] = {}
    if canonical:
        plain, fast = _canonical(plain)
    long, leftover = _long_kv(plain)
    parts = [long.join(plain.select("row", "kind"), on="row").select("row", "kind", "key", "value")]
    if rows_py:
        parts.append(pl.DataFrame(rows_py, schema=["row", "kind", "key", "value"], orient="row"))
    if matched is not None and not matched.is_empty():
        taken = set(kv["row"].to_list()) | srows  # the contract's own forms come first
        matched = matched.filter(~pl.col("row").is_in(list(taken)))
        parts.append(matched.select("row", "kind", "key", "value"))
    kinds = _record_kinds(plain, kv.filter(is_json), rows_py, matched, rejects)
    out = _by_kind(kinds, pl.concat(parts), fast, dict(leftover.iter_rows()), rejects)
    return Records(out["checksum"], out["canary"], out["step"], sorted(rejects))


def _json_rows(
    bodies: pl.DataFrame,
) -> tuple[list[tuple[int, str, str, str]], list[tuple[int, str]]]:
    """(row, kind, key, value) of `forensics:<kind> {json}` bodies, and the bodies that
    are no JSON object (rejects)."""
    rows: list[tuple[int, str, str, str]] = []
    rejects: list[tuple[int, str]] = []
    for row, kind, body in bodies.select("row", "kind", "body").iter_rows():
        try:
            obj = orjson.loads(body)
        except orjson.JSONDecodeError:
            rejects.append((row, f"{kind}: JSON body does not parse"))
            continue
        if not isinstance(obj, dict):
            rejects.append((row, f"{kind}: JSON body is not an object"))
            continue
        rows += [(row, kind, str(k), _json_value(v)) for k, v in obj.items()]
    return rows, rejects


def _structured_rows(structured: pl.DataFrame) -> list[tuple[int, str, str, str]]:
    """(row, kind, key, value) of records in journald fields (FORENSICS_KIND, FORENSICS_*)."""
    rows: list[tuple[int, str, str, str]] = []
    for row, fields in structured.select("row", "fields").iter_rows():
        obj = orjson.loads(fields)
        kind = str(obj.get("FORENSICS_KIND", "")).lower()
        for k, v in obj.items():
            if k.startswith("FORENSICS_") and k != "FORENSICS_KIND":
                rows.append((row, kind, k.removeprefix("FORENSICS_").lower(), _json_value(v)))
        if not any(k != "FORENSICS_KIND" and k.startswith("FORENSICS_") for k in obj):
            rows.append((row, kind, "_", ""))  # a record with no keys still is one
    return rows


def _record_kinds(
    plain: pl.DataFrame,
    json_bodies: pl.DataFrame,
    rows_py: list[tuple[int, str, str, str]],
    matched: pl.DataFrame | None,
    rejects: list[tuple[int, str]],
) -> pl.DataFrame:
    """(row, kind) of every record, those with no pairs too (they fail validation with a
    reason); a kind the contract does not know is a reject (added to `rejects`)."""
    kinds = pl.concat(
        [
            plain.select("row", "kind"),
            json_bodies.select("row", "kind"),
            pl.DataFrame(
                [(r, k) for r, k in {(x[0], x[1]) for x in rows_py}],
                schema=["row", "kind"],
                orient="row",
            ).cast({"row": pl.Int64}),
            *([matched.select("row", "kind")] if matched is not None and len(matched) else []),
        ]
    ).unique("row")
    failed = [row for row, _ in rejects]  # JSON bodies that did not parse: rejected once
    kinds = kinds.filter(~pl.col("row").is_in(failed))
    for kind in kinds["kind"].unique().to_list():
        if kind not in KINDS:
            for row in kinds.filter(pl.col("kind") == kind)["row"].to_list():
                rejects.append((row, f"unknown record kind {kind!r}"))
    return kinds


def _by_kind(
    kinds: pl.DataFrame,
    allkv: pl.DataFrame,
    fast: dict[str, pl.DataFrame],
    leftovers: dict[int, str],
    rejects: list[tuple[int, str]],
) -> dict[str, pl.DataFrame]:
    """Each kind's records, one row each (its pairs pivoted to columns, the probes' form
    beside them), validated: the rows that pass, those that fail added to `rejects`."""
    out = {}
    for kind in KINDS:
        rows = kinds.filter(pl.col("kind") == kind).select("row").sort("row")
        sub = allkv.filter(pl.col("kind") == kind).drop("kind")
        # A key given twice in one record: the first counts.
        pivoted = sub.pivot(on="key", index="row", values="value", aggregate_function="first")
        wide = rows.join(pivoted if len(sub) else rows, on="row", how="left")
        for k in KNOWN[kind]:
            if k not in wide.columns:
                wide = wide.with_columns(pl.lit(None, pl.String).alias(k))
        if kind in fast:
            wide = pl.concat([wide, fast[kind]], how="diagonal").sort("row")
        extra = _extra(wide, KNOWN[kind], leftovers)
        out[kind], bad = _VALIDATE[kind](wide.with_columns(extra=extra))
        rejects += bad
    return out


def _canonical(plain: pl.DataFrame) -> tuple[pl.DataFrame, dict[str, pl.DataFrame]]:
    """The key=value bodies in the probes' form, as rows of values per kind, and the rest."""
    quoted = plain["body"].str.contains('"', literal=True).fill_null(True)
    fast: dict[str, pl.DataFrame] = {}
    for kind in KINDS:
        sub = plain.filter(~quoted & (pl.col("kind") == kind))
        if not sub.is_empty():
            wide, _ = canonical_form.split(kind, sub.select("row", "body"))
            if not wide.is_empty():
                fast[kind] = wide
    if not fast:
        return plain, fast
    taken = pl.concat([f.select("row") for f in fast.values()])["row"]
    return plain.filter(~pl.col("row").is_in(taken.implode())), fast


def _extra(wide: pl.DataFrame, known: set[str], leftovers: dict[int, str]) -> pl.Series:
    unknown = [c for c in wide.columns if c not in known and c not in ("row", "_")]
    out = pl.repeat(None, len(wide), dtype=pl.String, eager=True)
    # Only rows with something extra become Python objects: one odd record in a group
    # made every row of every kind take this loop (+40 % on a clean group of canaries).
    need = pl.any_horizontal(pl.col(c).is_not_null() for c in unknown) if unknown else None
    if leftovers:
        near = pl.col("row").is_in(list(leftovers))
        need = near if need is None else need | near
    if need is None:
        return out
    at = wide.select(need.fill_null(False)).to_series().arg_true()
    if not len(at):
        return out
    vals: list[str | None] = []
    for r in wide.select(["row", *unknown])[at].iter_rows():
        d = {k: v for k, v in zip(unknown, r[1:], strict=True) if v is not None}
        if r[0] in leftovers:
            d["_unparsed"] = leftovers[r[0]]
        vals.append(orjson.dumps(d).decode() if d else None)
    return out.scatter(at, pl.Series(vals, dtype=pl.String))


def _first_failure(wide: pl.DataFrame, checks: list[tuple[pl.Expr, str]]) -> pl.Series:
    expr = pl.lit(None, pl.String)
    for ok, reason in reversed(checks):
        expr = pl.when(~ok.fill_null(False)).then(pl.lit(reason)).otherwise(expr)
    return wide.select(expr.alias("reason")).to_series()


def _split(wide: pl.DataFrame, reason: pl.Series) -> tuple[pl.DataFrame, list[tuple[int, str]]]:
    bad = wide.with_columns(reason=reason).filter(pl.col("reason").is_not_null())
    return wide.filter(reason.is_null()), list(bad.select("row", "reason").iter_rows())


def _int(name: str) -> pl.Expr:
    return pl.col(name).cast(pl.Int64, strict=False)


def _checksum(wide: pl.DataFrame):
    room = pl.col("room").cast(pl.UInt64, strict=False)
    reason = _first_failure(
        wide,
        [
            (pl.col("side").is_in(["src", "dst"]), "checksum: side must be src or dst"),
            (pl.col("room").is_not_null(), "checksum: no room"),
            (
                room.is_not_null() & (room <= ROOM_MAX),
                "checksum: room is not an unsigned 63-bit number",
            ),
            (
                pl.any_horizontal(pl.col(c).is_not_null() for c in ("head", "tail", "full")),
                "checksum: no head, tail or full digest",
            ),
            (pl.col("tp").is_null() | _int("tp").is_not_null(), "checksum: tp is not a number"),
            (
                pl.col("nbytes").is_null() | _int("nbytes").is_not_null(),
                "checksum: nbytes is not a number",
            ),
            (pl.col("alg").is_null() | _int("alg").is_not_null(), "checksum: alg is not a number"),
        ],
    )
    ok, bad = _split(wide, reason)
    ok = ok.select(
        "row",
        "side",
        room=room,
        rid="rid",
        buf=pl.col("buf").fill_null("index_k"),
        layer="layer",
        tp=_int("tp"),
        dtype="dtype",
        nbytes=_int("nbytes"),
        head="head",
        tail="tail",
        full="full",
        alg=_int("alg"),
        extra="extra",
    )
    return ok, bad


def _pages_column(values: pl.Series) -> tuple[pl.Series, pl.Series, pl.Series]:
    """(list, count, error) per value: a bare integer is a count, anything else a list
    of page ids with ranges (docs/log-contract.md)."""
    # A step's layers report the same pages: each distinct text is read once.
    distinct = values.unique()
    if len(distinct) * 4 > len(values):
        return _pages_of(values)
    lst, count, err = _pages_of(distinct)
    if len(distinct) == 1:  # e.g. every record's `unexpected=[]`: no join needed
        first = pl.repeat(0, len(values), dtype=pl.Int64, eager=True)
        return lst.gather(first), count.gather(first), err.gather(first)
    read = pl.DataFrame({"v": distinct, "lst": lst, "count": count, "err": err})
    out = values.to_frame("v").join(
        read, on="v", how="left", nulls_equal=True, maintain_order="left"
    )
    return out["lst"], out["count"], out["err"]


def _pages_like(
    values: pl.Series, same: pl.Series, ref_pages: tuple[pl.Series, pl.Series, pl.Series]
) -> tuple[pl.Series, pl.Series, pl.Series]:
    """_pages_column(values), taking the pages of a reference column where `same` says the
    value is its text (a canary's `changed` is mostly its `expected`, written the same
    way): only the others are read."""
    if same.all():
        return ref_pages
    if not same.any():
        return _pages_column(values)
    at = (~same).arg_true()
    lst, count, err = _pages_column(values.gather(at))
    return (
        _place(~same, lst, ref_pages[0]),
        ref_pages[1].clone().scatter(at, count),
        ref_pages[2].clone().scatter(at, err),
    )


def _pages_of(values: pl.Series) -> tuple[pl.Series, pl.Series, pl.Series]:
    """_pages_column over every value as given (no text read once)."""
    n = len(values)
    v = values.str.strip_chars()
    is_count = v.str.contains(r"^\d+$").fill_null(False)
    body = v.str.strip_chars("[] ")
    empty = body.is_in(["", "-"]).fill_null(False)
    as_list = ~is_count & values.is_not_null() & ~empty
    # Most lists are plain "3,4,9": cast in place. Ranges, spaces and junk leave a null
    # element; only those rows take the general path.
    lst = body.str.split(",").list.eval(pl.element().cast(pl.Int64, strict=False))
    general = as_list & lst.list.eval(pl.element().is_null()).list.any().fill_null(False)
    lst = pl.select(
        pl.when(pl.lit(empty))
        .then(pl.lit([], pl.List(pl.Int64)))
        .when(pl.lit(as_list & ~general))
        .then(pl.lit(lst))
    ).to_series()
    err = pl.repeat(False, n, dtype=pl.Boolean, eager=True)
    if general.any():
        idx = general.arg_true()
        slow, bad_rows = _page_ranges(body.gather(idx))
        lst = slow if len(idx) == n else _place(general, slow, lst)
        if len(bad_rows):
            err = err.scatter(idx.gather(bad_rows), True)
    count = pl.select(
        pl.when(pl.lit(is_count))
        .then(v.cast(pl.Int64, strict=False))
        .otherwise(lst.list.len().cast(pl.Int64))
    ).to_series()
    return lst, count, err


def _place(mask: pl.Series, values: pl.Series, other: pl.Series | None = None) -> pl.Series:
    """values[k] at the k-th row where mask holds (somewhere: values is not empty), `other`
    (or null) elsewhere: a scatter, which polars lacks for lists."""
    at = (mask.cast(pl.Int64).cum_sum() - 1).clip(0)
    picked = pl.when(pl.lit(mask)).then(values.gather(at))
    return pl.select(picked.otherwise(pl.lit(other)) if other is not None else picked).to_series()


def _page_ranges(body: pl.Series) -> tuple[pl.Series, pl.Series]:
    """Lists with ranges ("3-5, 9"): (pages per value, indexes of values that are not
    page lists)."""
    # One range alone ("14-15": what the probes write for a step's pages) is expanded in
    # place; lists of several take the token split below.
    one = body.str.contains(r"^\d+-\d+$").fill_null(False)
    if not one.any():
        return _token_ranges(body)
    n = len(body)
    ends = body.str.split_exact("-", 1).struct.unnest()
    lo = ends["field_0"].cast(pl.Int64, strict=False)
    hi = ends["field_1"].cast(pl.Int64, strict=False)
    # hi - lo, not hi - lo + 1: "0-9223372036854775807" must not wrap around to a small span.
    ok = one & lo.is_not_null() & hi.is_not_null() & (hi >= lo) & (hi - lo < MAX_PAGES)
    ok = ok.fill_null(False)
    # Expanded only where the range is sound: "1-99999999999" is never materialised.
    pages = pl.repeat(None, n, dtype=pl.List(pl.Int64), eager=True)
    if ok.any():
        at = ok.arg_true()
        lists = pl.select(pl.int_ranges(lo.gather(at), hi.gather(at) + 1)).to_series()
        pages = _place(ok, lists)
    bad = (one & ~ok).arg_true()
    if one.all():
        return pages, bad
    rest = (~one).arg_true()
    more, more_bad = _token_ranges(body.gather(rest))
    return _place(~one, more, pages), pl.concat([bad, rest.gather(more_bad)]).sort()


def _token_ranges(body: pl.Series) -> tuple[pl.Series, pl.Series]:
    """_page_ranges for lists of several tokens."""
    n = len(body)
    toks = (
        pl.DataFrame({"i": pl.int_range(n, eager=True), "b": body})
        .with_columns(tok=pl.col("b").str.split(","))
        .explode("tok")
        .with_columns(tok=pl.col("tok").str.strip_chars())
        .with_columns(
            lo=pl.col("tok").str.extract(r"^(\d+)(?:-\d+)?$", 1).cast(pl.Int64, strict=False),
            hi=pl.coalesce(
                pl.col("tok").str.extract(r"^\d+-(\d+)$", 1),
                pl.col("tok").str.extract(r"^(\d+)$", 1),
            ).cast(pl.Int64, strict=False),
        )
    )
    span = (pl.col("hi") - pl.col("lo") + 1).sum().over("i")
    bad_rows = toks.filter(
        pl.col("lo").is_null()
        | pl.col("hi").is_null()
        | (pl.col("hi") < pl.col("lo"))
        # One huge range on its own first: its span + 1, or a sum of such, would wrap.
        | (pl.col("hi") - pl.col("lo") >= MAX_PAGES)
        | (span > MAX_PAGES)
    )["i"].unique()
    good = toks.filter(~pl.col("i").is_in(bad_rows.implode()))
    lists = (
        good.with_columns(p=pl.int_ranges("lo", pl.col("hi") + 1))
        .explode("p")
        .group_by("i", maintain_order=True)
        .agg(pl.col("p"))
    )
    frame = pl.DataFrame({"i": pl.int_range(n, eager=True)}).join(lists, on="i", how="left")
    return frame["p"], bad_rows


def _canary(wide: pl.DataFrame):
    reason = _first_failure(
        wide,
        [
            (_int("step").is_not_null(), "canary: no step (or not a number)"),
            (_int("layer").is_not_null(), "canary: no layer (or not a number)"),
        ],
    )
    ok, bad = _split(wide, reason)
    # changed and expected read the same (nearly every record): what both shortcuts use
    same_text = (ok["changed"] == ok["expected"]).fill_null(False)
    parsed = {k: _pages_column(ok[k]) for k in ("expected", "unexpected")}
    parsed["changed"] = _pages_like(ok["changed"], same_text, parsed["expected"])
    err = parsed["expected"][2] | parsed["changed"][2] | parsed["unexpected"][2]
    bad += [
        (row, f"canary: bad page list (not page ids and ranges, or over {MAX_PAGES:,} pages)")
        for row in ok.filter(err)["row"].to_list()
    ]
    el, en, _ = parsed["expected"]
    cl, cn, _ = parsed["changed"]
    ul, un = _unexpected(ok["unexpected"], el, cl, parsed["unexpected"], same_text)
    out = ok.select(
        "row", t_us=_int("t_us"), step=_int("step"), layer=_int("layer"), bs=_int("bs"),
        mode="mode",
    ).with_columns(
        expected=el, changed=cl, unexpected=ul, n_expected=en, n_changed=cn, n_unexpected=un,
        extra=ok["extra"],
    )  # fmt: skip
    return out.filter(~err), bad


def _unexpected(
    given: pl.Series,
    el: pl.Series,
    cl: pl.Series,
    read: tuple[pl.Series, pl.Series, pl.Series],
    same_text: pl.Series,
) -> tuple[pl.Series, pl.Series]:
    """(pages, count) that changed outside what was expected: as given, or, where not given
    but both lists are, computed for those rows only (the probes give it, and a set
    operation per row is not free)."""
    ul, un, _ = read
    derive = (given.is_null() & el.is_not_null() & cl.is_not_null()).fill_null(False)
    if not derive.any():
        return ul, un
    # The same text on both sides (a step that wrote just what it should: nearly every
    # record) has nothing outside; the set operation is for the others (160 k canaries:
    # 0.11 CPU-s for all of them).
    same = derive & same_text
    other = derive & ~same
    if other.any():
        at = other.arg_true()
        outside = cl.gather(at).list.set_difference(el.gather(at)).list.sort()
        ul = _place(other, outside, ul)
    if same.any():
        none = pl.when(pl.lit(same)).then(pl.lit([], pl.List(pl.Int64)))
        ul = pl.select(none.otherwise(pl.lit(ul))).to_series()
    un = pl.select(pl.when(pl.lit(derive)).then(ul.list.len().cast(pl.Int64)).otherwise(un))
    return ul, un.to_series()


def _list(col: str) -> pl.Expr:
    v = pl.col(col).str.strip_chars("[] ")
    return (
        pl.when(v.is_in(["", "-"]))
        .then(pl.lit([], pl.List(pl.String)))
        .otherwise(v.str.split(",").list.eval(pl.element().str.strip_chars()))
    )


def _text_list(col: str) -> pl.Expr:
    """A list as comma-separated text, as stored: `[a, b]`, `a,b` → `a,b`; `[]`, `-` → ``.
    (Text, not a list column: millions of rids in a VARCHAR[] cost more to append and to
    commit than everything else a step record holds; queries split the few they need.)"""
    v = pl.col(col).str.strip_chars("[] ")
    return (
        pl.when(v.is_in(["", "-"])).then(pl.lit("")).otherwise(v.str.replace_all(r"\s*,\s*", ","))
    )


def _step(wide: pl.DataFrame):
    rooms = _list("rooms").list.eval(pl.element().cast(pl.UInt64, strict=False))
    reason = _first_failure(
        wide,
        [
            (_int("step").is_not_null(), "step: no step (or not a number)"),
            (
                pl.col("rooms").is_null() | ~rooms.list.eval(pl.element().is_null()).list.any(),
                "step: rooms must be numbers",
            ),
        ],
    )
    ok, bad = _split(wide, reason)
    out = ok.select(
        "row", step=_int("step"), bs=_int("bs"), rids=_text_list("rids"),
        rooms=_text_list("rooms"), extra="extra", t_us=_int("t_us"),
    )  # fmt: skip
    return out, bad


_VALIDATE = {"checksum": _checksum, "canary": _canary, "step": _step}
