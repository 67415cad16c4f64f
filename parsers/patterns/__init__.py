"""Log formats as data: regex patterns with named groups, each with sample lines.

A pattern file (TOML) holds `[[pattern]]` tables: `name`, `table` (where rows go),
`needle` (a literal every matching line contains), `regex` (named groups are fields),
optional `extract` (field → regex with one group, searched anywhere in the line),
optional `require_any` (fields of which one must be found), optional `pairs` (a group of
"key: value, …" spread into columns; `pair_sep` when pairs are not separated by ", ",
`rename` for keys that changed name across versions), optional `set` (fields with a
constant value, for lines that imply them), and
`[[pattern.samples]]` with a `line` and the `fields` it must yield. A file whose regex
does not compile, or whose samples do not match, is refused with the reason.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import polars as pl

from ..records.contract import KNOWN

BATCH_STATS = [
    "new_seq", "new_token", "cached_token", "token", "full_token", "swa_token",
    "token_usage", "full_token_usage", "swa_token_usage", "mamba_usage", "pre_allocated_usage",
    "running_req", "queue_req", "prealloc_req", "inflight_req", "transfer_req", "retracted_req",
    "pending_token", "accept_len", "accept_rate", "cuda_graph", "npu_graph",
    "input_throughput", "gen_throughput",
]  # fmt: skip
TABLE_COLUMNS = {
    "transfers": ["side", "rank", "rid", "room", "other_room", "exception", "reason"],
    "batches": ["phase", "ranks", "forward_ct", *BATCH_STATS, "extra"],
    "rid_rooms": ["event", "rid", "room"],
    "http": ["client", "method", "path", "status"],
}
# A user pattern may target a record kind of docs/log-contract.md: its named groups are
# that record's keys, validated as if the line had been written in the contract's form.
RECORD_KINDS = {kind: sorted(keys) for kind, keys in KNOWN.items()}
_PAIR = r"([^:,]+): ([^,]+)"


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

    def fields_of(self, lines: pl.Series) -> pl.DataFrame:
        """One row per line: the pattern's fields (all null where it does not match)."""
        caps = lines.str.extract_groups(self.regex).struct.unnest()
        matched = pl.any_horizontal(pl.col(c).is_not_null() for c in caps.columns)
        extra = {
            name: lines.str.extract(rx, 1) for name, rx in self.extract.items()
        }  # searched anywhere in the line
        out = caps.with_columns(**extra) if extra else caps
        if self.set:
            out = out.with_columns(**{k: pl.lit(v, pl.String) for k, v in self.set.items()})
        if self.require_any:
            matched = matched & pl.any_horizontal(pl.col(c).is_not_null() for c in self.require_any)
        out = out.with_columns(_matched=out.select(matched).to_series())
        if self.pairs is None:
            return out
        return self._spread(out)

    def _spread(self, out: pl.DataFrame) -> pl.DataFrame:
        """The `pairs` group as columns; keys the table lacks go to `extra` (JSON)."""
        assert self.pairs is not None
        known = set(TABLE_COLUMNS[self.table])
        sep = self.pair_sep
        pairs = out.select(
            _i=pl.int_range(pl.len()),
            p=pl.col(self.pairs).str.strip_chars_end(sep + " ").str.split(sep),
        ).explode("p")
        pairs = pairs.filter(pl.col("p").str.contains(": ", literal=True).fill_null(False))
        at = pl.col("p").str.find(": ", literal=True)
        long = pairs.select("_i", raw=pl.col("p").str.slice(0, at), v=pl.col("p").str.slice(at + 2))
        # Few distinct keys: normalise those, not every row's.
        keys = long["raw"].unique()
        normal = pl.select(pair_key(pl.lit(keys))).to_series().to_list()
        names = {
            raw: self.rename.get(key, key) for raw, key in zip(keys.to_list(), normal, strict=True)
        }
        long = long.select(
            "_i", k=pl.col("raw").replace_strict(names), v=pl.col("v").str.strip_chars()
        )
        base = out.drop(self.pairs).with_columns(_i=pl.int_range(pl.len()))
        if long.is_empty():
            return base.drop("_i")
        wide = long.filter(pl.col("k").is_in(list(known))).pivot(
            on="k", index="_i", values="v", aggregate_function="first"
        )
        # A key given twice in one line: the first counts (pivot takes the first of the
        # known ones; the rare unknown ones are made unique here, not every pair).
        unknown = long.filter(~pl.col("k").is_in(list(known)) & (pl.col("k") != "")).unique(
            ["_i", "k"], keep="first", maintain_order=True
        )
        if not unknown.is_empty():
            # JSON built column-wise: keys are [a-z0-9_] by construction, values escaped.
            value = (
                pl.col("v")
                .str.replace_all("\\", "\\\\", literal=True)
                .str.replace_all('"', '\\"', literal=True)
                .str.replace_all(r"[\x00-\x1f]", " ")
            )
            extra = (
                unknown.group_by("_i", maintain_order=True)
                .agg(
                    extra=pl.concat_str(
                        pl.lit('"'), "k", pl.lit('":"'), value, pl.lit('"')
                    ).str.join(",")
                )
                .with_columns(extra=pl.concat_str(pl.lit("{"), "extra", pl.lit("}")))
            )
            wide = (
                wide.join(extra, on="_i", how="full", coalesce=True)
                if len(wide.columns) > 1
                else extra
            )
        return base.join(wide, on="_i", how="left").drop("_i")


def _load_text(text: str, origin: str) -> list[Pattern]:
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PatternError(f"{origin}: not TOML: {exc}") from None
    out = []
    for i, p in enumerate(doc.get("pattern", [])):
        where = f"{origin}: pattern {p.get('name', i)!r}"
        missing = [k for k in ("name", "table", "needle", "regex") if not p.get(k)]
        if missing:
            raise PatternError(f"{where}: missing {', '.join(missing)}")
        if p["table"] not in TABLE_COLUMNS and p["table"] not in RECORD_KINDS:
            known = ", ".join([*TABLE_COLUMNS, *RECORD_KINDS])
            raise PatternError(f"{where}: unknown table {p['table']!r}; known: {known}")
        samples = tuple(Sample(s["line"], {k: str(v) for k, v in s.get("fields", {}).items()})
                        for s in p.get("samples", []))  # fmt: skip
        pat = Pattern(
            p["name"], p["table"], p["needle"], p["regex"], dict(p.get("extract", {})), samples,
            p.get("pairs"), tuple(p.get("require_any", ())), p.get("pair_sep", ", "),
            dict(p.get("rename", {})), {k: str(v) for k, v in p.get("set", {}).items()},
        )  # fmt: skip
        problems = check(pat)
        if problems:
            raise PatternError(f"{where}: {problems[0]}")
        out.append(pat)
    return out


def check(pat: Pattern) -> list[str]:
    """What is wrong with a pattern (empty when its samples pass)."""
    if not pat.samples:
        return ["has no sample lines"]
    try:
        got = pat.fields_of(pl.Series([s.line for s in pat.samples], dtype=pl.String))
    except pl.exceptions.ComputeError as exc:
        return [f"regex does not compile: {str(exc).splitlines()[0]}"]
    problems = []
    allowed = set(TABLE_COLUMNS.get(pat.table) or RECORD_KINDS[pat.table])
    unknown = [c for c in got.columns if c != "_matched" and c not in allowed]
    if unknown:
        problems.append(f"fields {unknown} are not columns of {pat.table}")
    for s, row in zip(pat.samples, got.iter_rows(named=True), strict=True):
        if pat.needle not in s.line:
            problems.append(f"sample lacks the needle {pat.needle!r}: {s.line[:80]}")
        elif not row["_matched"]:
            problems.append(f"sample does not match: {s.line[:80]}")
        else:
            for k, v in s.fields.items():
                if row.get(k) != v:
                    problems.append(f"sample field {k}: want {v!r}, got {row.get(k)!r}")
    return problems


def builtin() -> list[Pattern]:
    text = resources.files(__name__).joinpath("sglang.toml").read_text()
    return _load_text(text, "built-in sglang.toml")


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


def apply(patterns: list[Pattern], messages: pl.Series) -> dict[str, pl.DataFrame]:
    """Rows per table: `row` (index into messages), `pattern`, and the table's columns."""
    out: dict[str, list[pl.DataFrame]] = {}
    if not patterns:
        return {}
    # One pass for every needle (Aho-Corasick), then each pattern on those lines only.
    near = messages.str.contains_any([p.needle for p in patterns]).fill_null(False).arg_true()
    # Through a frame: Series.gather holds the GIL (60 against 37 ms for 120 MB of lines).
    lines = messages.to_frame("m").select(pl.col("m").gather(near)).to_series()
    for pat in patterns:
        hit = lines.str.contains(pat.needle, literal=True).fill_null(False)
        if not hit.any():
            continue
        idx = near.gather(hit.arg_true())
        f = pat.fields_of(lines.filter(hit)).with_columns(
            row=idx.cast(pl.Int64), pattern=pl.lit(pat.name)
        )
        f = f.filter("_matched").drop("_matched")
        cols = TABLE_COLUMNS.get(pat.table) or RECORD_KINDS[pat.table]
        f = f.select(
            "row",
            "pattern",
            *(pl.col(c) if c in f.columns else pl.lit(None, pl.String).alias(c) for c in cols),
        )
        out.setdefault(pat.table, []).append(f)
    return {t: pl.concat(fs) for t, fs in out.items()}
