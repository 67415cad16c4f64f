"""Log formats as data: regex patterns with named groups, each with sample lines.

A pattern file (TOML) holds `[[pattern]]` tables: `name`, `table` (where rows go),
`needle` (a literal every matching line contains), `regex` (named groups are fields),
optional `extract` (field → regex with one group, searched anywhere in the line),
optional `require_any` (fields of which one must be found), optional `pairs` (a group of
"key: value, …" spread into columns; `pair_sep` when pairs are not separated by ", ",
`rename` for keys that changed name across versions), optional `set` (fields with a
constant value, for lines that imply them), optional `kv` (a group of "key=value" and
"key(value)" tokens spread into columns, renamed by `rename`), optional `lower` (fields
stored in lower case), optional `component` (the part of the stack its lines come from:
sglang unless given), optional `meta_info = true` (the line's brace-matched meta_info
object read as a literal into request_meta's columns, see meta_info.py; `"line"`: the
whole line is that object, as in --export-metrics-to-file records), optional
`payload = true` (its lines carry a request's or a reply's text: see `classify`), optional
`json` (field → a JSONPath into the line, for records that are one JSON object a line:
`ttft_ms = "$.request.ttft_ms"`; `"$.a | $.b"`: the first that holds a value), optional
`json_rest` (a MAP field that takes every other leaf of such a record, under its dotted
path), and
`[[pattern.samples]]` with a `line` and the `fields` it must yield (`matches = false`: a
line it must not read). Groups named with a leading `_` only anchor the regex. A file
whose regex does not compile, or whose samples fail, is refused with the reason.
"""

from __future__ import annotations

import functools
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import orjson
import polars as pl

from ..records.contract import KNOWN
from ..tables import MAP, PATTERN_TABLES, RANK_TAGS, map_entries
from .meta_info import meta_columns
from .quoted import outside_strings

TABLE_COLUMNS = {name: t.fields for name, t in PATTERN_TABLES.items()}
RANK_NAMES = tuple(c.name for c in RANK_TAGS)  # a pattern may state a rank the prefix does not
# A user pattern may target a record kind of docs/log-contract.md: its named groups are
# that record's keys, validated as if the line had been written in the contract's form.
RECORD_KINDS = {kind: sorted(keys) for kind, keys in KNOWN.items()}
# "key: value, …" where splitting at ", " and at each first ": " can go one way only.
_PLAIN_PAIRS = r"^[^:,]+: [^,]*(?:, [^:,]+: [^,]*)*$"
_NONE = pl.Series([], dtype=pl.UInt32)
HEAD = 512  # characters of a line the needle pass reads match by match (_matches)
_SEQUENCES = 8  # key sequences read by their own regex before the rest takes the general way
# "key=value" or "key(value)": a key starts with a letter, "_" or "#" and may hold spaces
# ("input len" of older versions); a value runs to the next , ; ( or ).
_KV = r"#?[A-Za-z_][\w ]*?\s*(?:=|\()[^,;()]*"
_KV_SPLIT = r"^(#?[A-Za-z_][\w ]*?)\s*(?:=|\()([^,;()]*)$"


def pair_key(key: pl.Expr) -> pl.Expr:
    """ "#new-seq" -> new_seq, "input throughput (token/s)" -> input_throughput."""
    return (
        key.str.replace(r"\(token/s\)", "")
        .str.strip_chars(" #")
        .str.to_lowercase()
        .str.replace_all(r"[^a-z0-9]+", "_")
        .str.strip_chars("_")
    )


class PatternError(ValueError):
    pass


@dataclass(frozen=True)
class Sample:
    line: str
    fields: dict[str, str]
    matches: bool = True  # False: a line the pattern must not read


@dataclass(frozen=True)
class Pattern:
    name: str
    table: str
    needle: str
    regex: str
    extract: dict[str, str] = field(default_factory=dict)
    samples: tuple[Sample, ...] = ()
    pairs: str | None = None  # a group of "key: value, …" pairs, one column per key
    require_any: tuple[str, ...] = ()  # a match counts only with one of these fields
    pair_sep: str = ", "  # what separates the pairs
    rename: dict[str, str] = field(default_factory=dict)  # pair key -> column (old names)
    set: dict[str, str] = field(default_factory=dict)  # constant fields
    kv: str | None = None  # a group of key=value / key(value) tokens, one column per key
    lower: tuple[str, ...] = ()  # fields stored in lower case
    meta_info: str | None = None  # "span" / "line": meta_info into request_meta's columns
    component: str = "sglang"  # the part of the stack its lines come from (lines.component)
    payload: bool = False  # its lines hold a client's text: no other pattern reads them
    json: dict[str, str] = field(default_factory=dict)  # field -> JSONPath into the line
    json_rest: str | None = None  # a MAP field: every other leaf of the record, by its path

    def fields_of(
        self, lines: pl.Series, found: dict[str, pl.Series] | None = None
    ) -> pl.DataFrame:
        """One row per line: the pattern's fields (all null where it does not match).
        `found`: `extract` regexes already run over these same lines, by regex (patterns
        sharing a needle share their lines: Receive's and Finish's rid and room, the batch
        lines' ranks were each extracted twice)."""
        found = {} if found is None else found
        caps = lines.str.extract_groups(self.regex).struct.unnest()
        matched = pl.any_horizontal(pl.col(c).is_not_null() for c in caps.columns)
        for rx in self.extract.values():  # searched anywhere in the line
            if rx not in found:  # a payload line's: outside the client's text
                found[rx] = outside_strings(lines, rx) if self.payload else lines.str.extract(rx, 1)
        extra = {name: found[rx] for name, rx in self.extract.items()}
        if self.json:
            extra |= _json_fields(lines, self.json, self._json_types(), self.json_rest)
        out = caps.with_columns(**extra) if extra else caps
        if self.set:
            out = out.with_columns(**{k: pl.lit(v, pl.String) for k, v in self.set.items()})
        if self.require_any:
            matched = matched & pl.any_horizontal(pl.col(c).is_not_null() for c in self.require_any)
        out = out.with_columns(_matched=out.select(matched).to_series())
        out = out.drop([c for c in caps.columns if c.startswith("_")])
        if self.meta_info:
            meta = meta_columns(lines, whole=self.meta_info == "line")
            rid = pl.coalesce(out["rid"], meta["rid"]) if "rid" in out.columns else meta["rid"]
            out = out.with_columns(meta.drop("rid").get_columns()).with_columns(rid=rid)
        if self.lower:
            out = out.with_columns(
                pl.col(c).str.to_lowercase() for c in self.lower if c in out.columns
            )
        if self.pairs is None and self.kv is None:
            return out
        return self._spread(out)

    def _json_types(self) -> dict[str, pl.DataType]:
        """A JSON path's leaf decoded as its column's form where that is not text: a
        MAP's list of {key, value}."""
        table = PATTERN_TABLES.get(self.table)
        cols = {c.name: c.type for c in table.columns} if table else {}
        return {f: map_entries() for f in self.json if cols.get(f) == MAP}

    def _spread(self, out: pl.DataFrame) -> pl.DataFrame:
        """The `pairs` (or `kv`) group as columns; keys the table lacks go to `extra` (JSON)."""
        group = self.pairs or self.kv
        assert group is not None
        sep = self.pair_sep
        stats = out[group].str.strip_chars_end(sep + " ") if self.pairs else out[group]
        # Selected from `out` itself: a frame of the pairs alone keeps its height so.
        base = out.select(pl.all().exclude(group), _i=pl.int_range(pl.len()))
        # Lines whose pairs split one way only (no ":" in a key, no "," in a value) are
        # read by one regex per key sequence: the split, explode and pivot cost 11 µs a
        # batch-stats line. Any other line takes the general reading.
        lines = pl.DataFrame({"_i": pl.int_range(len(stats), eager=True), "s": stats})
        lines = lines.filter(pl.col("s").is_not_null())
        parts = []
        if self.pairs and sep == ", ":
            plain = lines["s"].str.contains(_PLAIN_PAIRS)
            if plain.any():
                wide, left = self._spread_plain(lines.filter(plain))
                parts.append(wide)
                lines = pl.concat([lines.filter(~plain), left])
        if not lines.is_empty():
            rest = self._spread_general(lines["s"])
            parts.append(rest.with_columns(_i=lines["_i"].gather(rest["_i"])))
        parts = [w for w in parts if len(w.columns) > 1]
        if not parts:
            return base.drop("_i")
        wide = parts[0] if len(parts) == 1 else pl.concat(parts, how="diagonal_relaxed")
        return base.join(wide, on="_i", how="left").drop("_i")

    def _names(self, raw: list[str]) -> list[str]:
        """Pair keys as columns: normalised, then renamed (keys of older versions)."""
        normal = pl.select(pair_key(pl.lit(pl.Series(raw, dtype=pl.String)))).to_series()
        return [self.rename.get(k, k) for k in normal.to_list()]

    def _spread_plain(self, left: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
        """Lines (`_i`, `s`) of plain pairs, by their key sequence: the first line left
        names one, one regex reads every line with it (a log has a few such sequences,
        they repeat). The columns read, and the lines past _SEQUENCES sequences."""
        known = set(TABLE_COLUMNS[self.table])
        wides = []
        for _ in range(_SEQUENCES):
            if left.is_empty():
                break
            raw = [p.split(": ", 1)[0] for p in left["s"][0].split(", ")]
            regex = "^" + ", ".join(f"{_literal(k)}: ([^,]*)" for k in raw) + "$"
            vals = left["s"].str.extract_groups(regex).struct.unnest()
            vals.columns = [f"v{j}" for j in range(len(raw))]
            hit = vals["v0"].is_not_null()
            cols: dict[str, pl.Expr] = {}
            extra: dict[str, pl.Expr] = {}
            for j, name in enumerate(self._names(raw)):
                # A key given twice in one line: the first counts, as in the general case.
                if name in cols or name in extra:
                    continue
                value = pl.col(f"v{j}").str.strip_chars()
                if name in known:
                    cols[name] = value
                elif name:
                    extra[name] = pl.concat_str(
                        pl.lit(f'"{name}":"'), _json_text(value), pl.lit('"')
                    )
            if extra:
                joined = pl.concat_str(list(extra.values()), separator=",")
                cols["extra"] = pl.concat_str(pl.lit("{"), joined, pl.lit("}"))
            wides.append(vals.filter(hit).select(_i=left["_i"].filter(hit), **cols))
            left = left.filter(~hit)
        return pl.concat(wides, how="diagonal_relaxed"), left

    def _cut(self, stats: pl.Series) -> pl.DataFrame:
        """(`_i`, `raw` key, `v` value) of each pair: `pairs` split by the separator, each
        piece key ": " value; `kv` tokens key=value or key(value)."""
        pairs = pl.DataFrame({"_i": pl.int_range(len(stats), eager=True), "p": stats})
        if self.kv is not None:
            pairs = pairs.with_columns(pl.col("p").str.extract_all(_KV)).explode("p")
            kv = pairs["p"].str.extract_groups(_KV_SPLIT).struct.unnest()
            long = pl.DataFrame({"_i": pairs["_i"], "raw": kv["1"], "v": kv["2"]})
            return long.drop_nulls("raw")
        pairs = pairs.with_columns(pl.col("p").str.split(self.pair_sep)).explode("p")
        pairs = pairs.filter(pl.col("p").str.contains(": ", literal=True).fill_null(False))
        # splitn, not find + slice: find counts bytes, slice characters (a key "Größe"
        # was cut two characters late).
        cut = pl.col("p").str.splitn(": ", 2)
        return pairs.select("_i", raw=cut.struct.field("field_0"), v=cut.struct.field("field_1"))

    def _spread_general(self, stats: pl.Series) -> pl.DataFrame:
        """Pairs cut into keys and values (`_cut`), one column per key the table has."""
        known = set(TABLE_COLUMNS[self.table])
        long = self._cut(stats)
        if long.is_empty():
            return long.select("_i")
        # Few distinct keys: normalise those, not every row's.
        keys = long["raw"].unique()
        names = dict(zip(keys.to_list(), self._names(keys.to_list()), strict=True))
        long = long.select(
            "_i", k=pl.col("raw").replace_strict(names), v=pl.col("v").str.strip_chars()
        )
        wide = long.filter(pl.col("k").is_in(list(known))).pivot(
            on="k", index="_i", values="v", aggregate_function="first"
        )
        # A key given twice in one line: the first counts (pivot takes the first of the
        # known ones; the rare unknown ones are made unique here, not every pair).
        unknown = long.filter(~pl.col("k").is_in(list(known)) & (pl.col("k") != "")).unique(
            ["_i", "k"], keep="first", maintain_order=True
        )
        if not unknown.is_empty():
            extra = (
                unknown.group_by("_i", maintain_order=True)
                .agg(
                    extra=pl.concat_str(
                        pl.lit('"'), "k", pl.lit('":"'), _json_text(pl.col("v")), pl.lit('"')
                    ).str.join(",")
                )
                .with_columns(extra=pl.concat_str(pl.lit("{"), "extra", pl.lit("}")))
            )
            wide = (
                wide.join(extra, on="_i", how="full", coalesce=True)
                if len(wide.columns) > 1
                else extra
            )
        return wide


def _literal(text: str) -> str:
    """`text` as a regex that matches it alone (every other character by its code point)."""
    return "".join(c if c.isascii() and c.isalnum() else f"\\x{{{ord(c):x}}}" for c in text)


def _json_text(value: pl.Expr) -> pl.Expr:
    """A JSON string's inside; keys need none of this: they are [a-z0-9_] by construction."""
    return (
        value.str.replace_all("\\", "\\\\", literal=True)
        .str.replace_all('"', '\\"', literal=True)
        .str.replace_all(r"[\x00-\x1f]", " ")
    )


REST_SAMPLE = 256  # lines whose keys name a record's other fields (`json_rest`)
REST_DEPTH, REST_LEAVES = 64, 4096  # a sampled line's levels and values at most


def _json_fields(
    lines: pl.Series,
    paths: dict[str, str],
    types: dict[str, pl.DataType] | None = None,
    rest: str | None = None,
) -> dict[str, pl.Series]:
    """Each field's value at its JSONPath (`$.a.b`), as text (`types`: a field's other
    form), and under `rest` every other leaf a sample of the lines names: the lines
    decoded once into the struct all of them make (27 path matches parsed each line 27
    times: 7× slower; a second decode for the rest cost a Dynamo trace 20 %), a path at a
    time where a line is not JSON (the rest then null)."""
    tree: dict = {}
    alts = {name: [a.strip() for a in path.split("|")] for name, path in paths.items()}
    for name, each in alts.items():
        for path in each:
            _put(tree, path.removeprefix("$.").split("."), (types or {}).get(name, pl.String))
    read = {a for each in alts.values() for a in each}
    others = _sampled_leaves(lines, read) if rest else []
    for path, leaf in others:
        _put(tree, path.split("."), leaf)
    try:
        decoded = lines.str.json_decode(_dtype(tree))
    except pl.exceptions.ComputeError:
        out = {name: _first([lines.str.json_path_match(a) for a in each])
               for name, each in alts.items()}  # fmt: skip
        return out | ({rest: pl.Series([None] * len(lines), dtype=map_entries())} if rest else {})
    out = {name: _first([_at(decoded, a.removeprefix("$.")) for a in each])
           for name, each in alts.items()}  # fmt: skip
    if rest:
        parts = [pl.struct(key=pl.lit(path), value=_as_text(pl.col("d"), path, leaf))
                 for path, leaf in others]  # fmt: skip
        kept = pl.element().struct.field("value").is_not_null()
        got = (pl.DataFrame({"d": decoded}).select(rest=pl.concat_list(parts).list.eval(
            pl.element().filter(kept)))["rest"] if parts
            else pl.Series([[]] * len(lines), dtype=map_entries()))  # fmt: skip
        out[rest] = got
    return out


def _first(values: list[pl.Series]) -> pl.Series:
    """The first of `values` that is not null, row by row (`a | b`: a path, else the next)."""
    out = values[0]
    for v in values[1:]:
        out = out.fill_null(v)
    return out


def _put(tree: dict, keys: list[str], leaf: pl.DataType) -> None:
    node = tree
    for k in keys[:-1]:
        node = node.setdefault(k, {})
        if not isinstance(node, dict):  # a path the record has as a leaf and a parent
            return
    node.setdefault(keys[-1], leaf)


def _dtype(node: dict) -> pl.Struct:
    return pl.Struct({k: _dtype(v) if isinstance(v, dict) else v for k, v in node.items()})


def _at(decoded: pl.Series, path: str) -> pl.Series:
    col = decoded
    for k in path.split("."):
        col = col.struct.field(k)
    return col


def _sampled_leaves(lines: pl.Series, read: set[str]) -> list[tuple[str, pl.DataType]]:
    """The leaves the first lines hold that no path reads: scalars as text, lists as
    themselves (none where the sample does not decode)."""
    head = [t for t in lines.head(REST_SAMPLE).to_list() if t is not None and _plain_shape(t)]
    try:
        sample = pl.Series(head, dtype=pl.String).str.json_decode(infer_schema_length=None).dtype
    except pl.exceptions.PolarsError:
        return []
    if not isinstance(sample, pl.Struct):
        return []
    return [(path, leaf if isinstance(leaf, pl.List | pl.Array) else pl.String)
            for path, leaf in _leaves(sample, "") if f"$.{path}" not in read]  # fmt: skip


def _plain_shape(text: str) -> bool:
    """A line that may name the record's fields: JSON of at most REST_DEPTH levels and
    REST_LEAVES leaves (a hostile record, 600 arrays deep or 10⁵ keys wide, made the
    inferred type take gigabytes, or a struct of 10⁵ fields)."""
    try:
        todo = [(orjson.loads(text), 0)]
    except orjson.JSONDecodeError:
        return False
    seen = 0
    while todo:
        v, depth = todo.pop()
        seen += 1
        if depth > REST_DEPTH or seen > REST_LEAVES:
            return False
        if isinstance(v, dict | list):
            todo.extend((x, depth + 1) for x in (v.values() if isinstance(v, dict) else v))
    return True


def _leaves(dtype: pl.DataType, prefix: str) -> Iterator[tuple[str, pl.DataType]]:
    """(dotted path, type) of each leaf of a decoded struct."""
    if isinstance(dtype, pl.Struct):
        for f in dtype.fields:
            yield from _leaves(f.dtype, f"{prefix}.{f.name}" if prefix else f.name)
    else:
        yield prefix, dtype


def _as_text(col: pl.Expr, path: str, leaf: pl.DataType) -> pl.Expr:
    expr = col
    for k in path.split("."):
        expr = expr.struct.field(k)
    if isinstance(leaf, pl.List | pl.Array):  # as JSON: {"v":[…]} without its wrapper
        text = pl.struct(v=expr).struct.json_encode().str.slice(5).str.strip_suffix("}")
        return pl.when(expr.is_not_null()).then(text)
    return expr


def _load_text(text: str, origin: str, checked: bool = True) -> list[Pattern]:
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PatternError(f"{origin}: not TOML: {exc}") from None
    out = []
    names: set[str] = set()
    for i, p in enumerate(doc.get("pattern", [])):
        where = f"{origin}: pattern {p.get('name', i)!r}"
        if p.get("name") in names:
            raise PatternError(f"{where}: a second pattern of that name (names key the rows)")
        names.add(p.get("name"))
        missing = [k for k in ("name", "table", "needle", "regex") if not p.get(k)]
        if missing:
            raise PatternError(f"{where}: missing {', '.join(missing)}")
        if p["table"] not in TABLE_COLUMNS and p["table"] not in RECORD_KINDS:
            known = ", ".join([*TABLE_COLUMNS, *RECORD_KINDS])
            raise PatternError(f"{where}: unknown table {p['table']!r}; known: {known}")
        samples = tuple(Sample(s["line"], {k: str(v) for k, v in s.get("fields", {}).items()},
                               bool(s.get("matches", True)))
                        for s in p.get("samples", []))  # fmt: skip
        raw = p.get("meta_info", False)
        meta = "span" if raw is True else "line" if raw == "line" else None if raw is False else "?"
        if meta == "?":
            raise PatternError(f'{where}: meta_info is true or "line", not {p["meta_info"]!r}')
        if meta and p["table"] != "request_meta":
            raise PatternError(f"{where}: meta_info fills request_meta, not {p['table']}")
        pat = Pattern(
            p["name"], p["table"], p["needle"], p["regex"], dict(p.get("extract", {})), samples,
            p.get("pairs"), tuple(p.get("require_any", ())), p.get("pair_sep", ", "),
            dict(p.get("rename", {})), {k: str(v) for k, v in p.get("set", {}).items()},
            p.get("kv"), tuple(p.get("lower", ())), meta, p.get("component", "sglang"),
            _flag(p, "payload", where), {k: str(v) for k, v in p.get("json", {}).items()},
            p.get("json_rest"),
        )  # fmt: skip
        problems = check(pat) if checked else []
        if problems:
            raise PatternError(f"{where}: {problems[0]}")
        out.append(pat)
    return out


def _flag(p: dict, key: str, where: str) -> bool:
    value = p.get(key, False)
    if not isinstance(value, bool):
        raise PatternError(f"{where}: {key} is true or false, not {value!r}")
    return value


def check(pat: Pattern) -> list[str]:
    """What is wrong with a pattern (empty when its samples pass)."""
    if not pat.samples:
        return ["has no sample lines"]
    try:
        got = pat.fields_of(pl.Series([s.line for s in pat.samples], dtype=pl.String))
    except pl.exceptions.ComputeError as exc:
        return [f"regex does not compile: {str(exc).splitlines()[0]}"]
    problems = []
    allowed = set(TABLE_COLUMNS.get(pat.table) or RECORD_KINDS[pat.table]) | set(RANK_NAMES)
    unknown = [c for c in got.columns if c != "_matched" and c not in allowed]
    if unknown:
        problems.append(f"fields {unknown} are not columns of {pat.table}")
    for s, row in zip(pat.samples, got.iter_rows(named=True), strict=True):
        if not s.matches:
            if pat.needle in s.line and row["_matched"]:
                problems.append(f"sample matches but must not: {s.line[:80]}")
        elif pat.needle not in s.line:
            problems.append(f"sample lacks the needle {pat.needle!r}: {s.line[:80]}")
        elif not row["_matched"]:
            problems.append(f"sample does not match: {s.line[:80]}")
        else:
            for k, v in s.fields.items():
                if row.get(k) != v:
                    problems.append(f"sample field {k}: want {v!r}, got {row.get(k)!r}")
    return problems


def builtin(check_samples: bool = False) -> list[Pattern]:
    """The built-in patterns. Their samples are checked by the tests and by `forensics
    patterns`, not each time they load: the check ran every pattern over its samples,
    0.22 s of every ingest's start on one core."""
    text = resources.files(__name__).joinpath("sglang.toml").read_text()
    return _load_text(text, "built-in sglang.toml", checked=check_samples)


def load_text(text: str, origin: str) -> list[Pattern]:
    """Patterns from TOML text (a source's stored user patterns), checked as a file's."""
    return _load_text(text, origin)


@functools.cache
def builtin_names() -> frozenset[str]:
    """The names of the built-in patterns (a record's pattern not among them: a user's)."""
    return frozenset(p.name for p in builtin())


def load_file(path: str | Path) -> list[Pattern]:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise PatternError(f"cannot read {p}: {exc.strerror}") from None
    return _load_text(text, str(p))


def record_rows(patterns: list[Pattern], messages: pl.Series) -> pl.DataFrame | None:
    """(row, kind, key, value) of the record kinds user patterns find in messages."""
    found = apply([p for p in patterns if p.table in RECORD_KINDS], messages)
    parts = [
        df.unpivot(index="row", on=[c for c in df.columns if c not in ("row", "pattern")],
                   variable_name="key", value_name="value")
        .drop_nulls("value")
        .with_columns(kind=pl.lit(table))
        for table, df in found.items()
    ]  # fmt: skip
    return pl.concat(parts).select("row", "kind", "key", "value") if parts else None


def _shadows(n: str, m: str) -> bool:
    """Whether a match of `n` can hide an occurrence of `m` from a leftmost-first scan
    that tries longer needles first: `m` inside `n`, or a suffix of `n` a prefix of `m`
    (`n` starting first). A match starting after `m`'s start cannot: the scan meets `m`
    first."""
    return m in n or any(n.endswith(m[:i]) for i in range(1, min(len(n), len(m))))


def _matches(
    lines: pl.DataFrame,
    alternation: str,
    longest: int,
    payload: dict[str, list[str]] | None = None,
) -> pl.DataFrame:
    """(`row`, `n`: the alternation's matches) of lines (`row`, `m`): matches starting in
    a line's first HEAD characters by `extract_all` there, the rest of a longer line
    scanned (a literal scan, SIMD) and read the same way only where it holds one. A 4 kB
    prompt's rest rarely does: extract_all over it cost 2.5× the scan. Every match found
    is an occurrence; what the cut hides, the caller's repair finds as before. A line
    whose head holds a `payload` needle (needle -> its patterns' regex) that its regex
    confirms is a payload line (classify): no needle past its head is read there, so
    its rest is not scanned."""
    head = lines.select("row", n=pl.col("m").str.slice(0, HEAD + longest - 1).str.extract_all(
        alternation))  # fmt: skip
    rest = lines.filter(pl.col("m").str.len_bytes() > HEAD)
    if payload and not rest.is_empty():
        rest = rest.filter(~pl.col("row").is_in(_payload_heads(rest, head, payload).implode()))
    rest = rest.select("row", t=pl.col("m").str.slice(HEAD))
    rest = rest.filter(pl.col("t").str.contains(alternation).fill_null(False))
    if rest.is_empty():
        return head
    return pl.concat([head, rest.select("row", n=pl.col("t").str.extract_all(alternation))])


def _payload_heads(
    lines: pl.DataFrame, head: pl.DataFrame, payload: dict[str, list[str]]
) -> pl.Series:
    """The rows of lines (`row`, `m`) whose head (`row`, `n`) holds a payload needle one
    of whose patterns' regexes matches the line."""
    found = (
        head.join(lines.select("row"), on="row", how="semi")
        .explode("n")
        .filter(pl.col("n").is_in(list(payload)))
    )
    rows = [_NONE]
    for needle, regexes in payload.items():
        at = found.filter(pl.col("n") == needle)["row"].unique()
        held = lines.filter(pl.col("row").is_in(at.implode()))
        hit = pl.any_horizontal(pl.col("m").str.contains(rx).fill_null(False) for rx in regexes)
        rows.append(held.filter(hit)["row"])
    return pl.concat(rows)


def _joined(
    messages: pl.Series, found: dict[str, pl.Series], distinct: list[str]
) -> tuple[dict[str, list[str]], pl.Series]:
    """Each needle's partners (found needles whose match can hide it, not holding it),
    and the lines where one may. A match of n hides m only where the text reads n then
    m's rest past their overlap: the lines holding such a join, found by one scan for all
    of them, are the only ones a needle is then sought in alone (a 1-character overlap,
    `…: ` then ` batch`, made six needles each scan every batch line)."""
    partners_of = {m: [n for n in found if n != m and m not in n and _shadows(n, m)]
                   for m in distinct}  # fmt: skip
    joins = {n + m[k:] for m, ns in partners_of.items() for n in ns
             for k in range(1, min(len(n), len(m))) if n.endswith(m[:k])}  # fmt: skip
    if not joins:
        return partners_of, pl.Series([], dtype=pl.UInt32)
    rows = pl.concat([found[n] for ns in partners_of.values() for n in ns]).unique()
    either = "|".join(_literal(j) for j in sorted(joins, key=len, reverse=True))
    return partners_of, rows.filter(messages.gather(rows).str.contains(either).fill_null(False))


def _lines_holding(
    messages: pl.Series, needles: list[str], payload: dict[str, list[str]] | None = None
) -> list[pl.Series]:
    """Each needle's lines (indices into messages, ascending); a needle several patterns
    share is sought once.

    One pass over every line: a regex of every needle's literal (many at once, SIMD)
    finds the lines holding any, and `extract_all` of it, on only those lines, says which.
    Its matches do not overlap, so a needle whose every occurrence a match hides is missed
    there: inside a longer needle's match it is taken from that needle's lines, after a
    needle whose suffix is its prefix it is sought again, alone, in those of that
    needle's lines that read the two joined at their overlap.
    Measured against the halving it replaces (each half of the set sought in the lines
    holding one of it: a 4 kB prompt line scanned once a level) and overlapping
    Aho-Corasick on the same lines: bench/README.md. `payload`: see _matches.
    """
    distinct = list(dict.fromkeys(needles))
    alternation = "|".join(_literal(n) for n in sorted(distinct, key=len, reverse=True))
    idx = pl.int_range(len(messages), eager=True, dtype=pl.UInt32)
    hit = messages.str.contains(alternation).fill_null(False)
    lines = pl.DataFrame({"row": idx.filter(hit), "m": messages.filter(hit)})
    pairs = (
        _matches(lines, alternation, max(map(len, distinct)), payload)
        .explode("n")
        .drop_nulls("n")
        .group_by("n")
        .agg(pl.col("row").unique().sort())
    )
    found = dict(zip(pairs["n"].to_list(), pairs["row"], strict=True))
    none = pl.Series([], dtype=pl.UInt32)
    partners_of, suspect = _joined(messages, found, distinct)
    out: dict[str, pl.Series] = {}
    for m in distinct:
        have = found.get(m, none)
        inside = [found[n] for n in found if n != m and m in n]  # they hold m: no scan
        partners = [found[n] for n in partners_of[m]]
        if inside:
            have = pl.concat([have, *inside]).unique().sort()
        if partners:
            maybe = (
                pl.DataFrame({"r": pl.concat(partners)})
                .join(pl.DataFrame({"r": have}), on="r", how="anti")
                .join(pl.DataFrame({"r": suspect}), on="r", how="semi")
                .unique()["r"]
            )
            held = messages.gather(maybe).str.contains(m, literal=True).fill_null(False)
            more = maybe.filter(held)
            have = pl.concat([have, more]).sort() if len(more) else have
        out[m] = have
    return [out[n] for n in needles]


def apply(patterns: list[Pattern], messages: pl.Series) -> dict[str, pl.DataFrame]:
    """Rows per table: `row` (index into messages), `pattern`, and the table's columns."""
    return classify(patterns, messages)[0]


def classify(
    patterns: list[Pattern], messages: pl.Series
) -> tuple[dict[str, pl.DataFrame], pl.Series]:
    """apply's rows per table, and the payload lines (ascending indices into messages).

    A payload line holds a client's text: a Receive or Finish line's request repr (the
    prompt, the reply), their JSON forms, a metrics record's request. A prompt that
    quotes a log line (an agent reading its own server's logs, a pasted traceback, a
    probe's checksum) would otherwise be read as that line: a batch, a retraction, a
    checksum no server wrote. A payload pattern's needle in a line and its regex
    matching make the line a payload line; the payload patterns of the needle that comes
    first in it read it, no other pattern does (nor the probes' contract: the caller
    leaves these rows out)."""
    out: dict[str, list[pl.DataFrame]] = {}
    if not patterns:
        return {}, _NONE
    heads: dict[str, list[str]] = {}  # payload needle -> its patterns' regexes
    for p in patterns:
        if p.payload:
            heads.setdefault(p.needle, []).append(p.regex)
    holding = _lines_holding(messages, [p.needle for p in patterns], heads)
    rows_of = {p.needle: idx for p, idx in zip(patterns, holding, strict=True) if p.payload}
    owned, payload = _payload_lines(heads, rows_of, messages)
    by_needle: dict[tuple[str, bool], tuple[pl.Series, pl.Series, dict[str, pl.Series]]] = {}
    for pat, idx in zip(patterns, holding, strict=True):
        key = (pat.needle, pat.payload)
        if key not in by_needle:
            if pat.payload:
                idx = owned.get(pat.needle, _NONE)
            elif len(payload):
                idx = idx.filter(~idx.is_in(payload.implode()))
            by_needle[key] = (idx, messages.filter(_mask(idx, len(messages))), {})
        idx, lines, found = by_needle[key]
        if idx.is_empty():
            continue
        f = pat.fields_of(lines, found).with_columns(row=idx.cast(pl.Int64),
                                                     pattern=pl.lit(pat.name))  # fmt: skip
        f = f.filter("_matched").drop("_matched")
        cols = TABLE_COLUMNS.get(pat.table) or RECORD_KINDS[pat.table]
        f = f.select(
            "row",
            "pattern",
            *(pl.col(c) if c in f.columns else pl.lit(None, pl.String).alias(c) for c in cols),
            *(c for c in RANK_NAMES if c in f.columns),  # a rank the record states itself
        )
        out.setdefault(pat.table, []).append(f)
    return {t: pl.concat(fs, how="diagonal") for t, fs in out.items()}, payload


def _payload_lines(
    regexes: dict[str, list[str]], rows_of: dict[str, pl.Series], messages: pl.Series
) -> tuple[dict[str, pl.Series], pl.Series]:
    """The payload lines each payload needle reads (the first payload needle in a line
    one of whose patterns' `regexes` matches it), and every payload line; `rows_of`:
    each payload needle's lines."""
    owned = {}
    for needle, rxs in regexes.items():
        idx = rows_of[needle]
        if idx.is_empty():
            continue
        text = pl.DataFrame({"row": idx, "m": messages.filter(_mask(idx, len(messages)))})
        hit = pl.any_horizontal(pl.col("m").str.contains(rx).fill_null(False) for rx in rxs)
        owned[needle] = text.filter(hit)["row"]
    if len(owned) < 2:
        return owned, next(iter(owned.values()), _NONE)
    both = pl.concat(list(owned.values()))
    payload = both.unique().sort()
    several = both.filter(both.is_duplicated()).unique()
    if several.is_empty():  # a line holds one payload needle: that is its reader
        return owned, payload
    # where several do, the one that comes first in it
    text = messages.filter(_mask(several, len(messages)))
    at = pl.DataFrame({n: text.str.find(n, literal=True) for n in owned})
    first = at.select(pl.min_horizontal(pl.all())).to_series()
    for n in owned:
        late = several.filter((at[n] != first).fill_null(True))
        owned[n] = owned[n].filter(~owned[n].is_in(late.implode()))
    return owned, payload


def _mask(idx: pl.Series, n: int) -> pl.Series:
    """Rows `idx` of n as a mask: filtering by it, not gathering, keeps a 4 kB prompt
    where it is (a gather copied the lines)."""
    return pl.repeat(False, n, eager=True).scatter(idx, True)
