"""Reading an OTLP trace file (parsers/otlp.py says what is read): chunks of lines through
Arrow, a line Arrow cannot take put in the one form first, protobuf requests one by one;
the spans yielded as frames of (line, host, ts_us, text) — entries built a column at a
time, not a row — a span that is not one (no ids, no start) and a line or request that
holds none quarantined with its line (a protobuf request: its index, its byte offset in
the reason)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import BinaryIO

import orjson
import polars as pl
import pyarrow as pa

from . import otlp
from .bounded import lines, read_whole, too_long
from .journald.context import ReadContext

LINE_BYTES = 128 << 20  # a collector line read through Arrow at most (held once, as a table)
CANONICAL_BYTES = 16 << 20  # a line put in the one form first, at most
PROTO_FILE_BYTES = 512 << 20  # a protobuf file read at most (the exporter rotates at 100 MB)


def read_otlp(
    stream: BinaryIO, fmt: str, ctx: ReadContext, host: str | None
) -> Iterator[pl.DataFrame]:
    if fmt == "otlp-proto":
        yield from _proto(stream, ctx, host)
    elif fmt == "otlp-logs":
        from .otlp_logs import read_logs

        yield from read_logs(stream, ctx, host)
    else:
        yield from _json(stream, ctx, host)


def _json(stream: BinaryIO, ctx: ReadContext, host: str | None) -> Iterator[pl.DataFrame]:
    chunk: list[tuple[int, bytes]] = []
    size = n = 0
    for raw in lines(stream, ctx, LINE_BYTES):
        n += 1
        line = raw[:-1] if raw.endswith(b"\n") else raw  # a slice of a whole line: a copy
        raw = b""
        line = line[:-1] if line.endswith(b"\r") else line
        if n == 1 and line.strip() == b"{":  # pretty-printed documents (the spec's examples)
            yield from _documents(line + b"\n", stream, ctx, host)
            return
        if not line.strip():
            ctx.markers += 1
            continue
        chunk.append((n, line))
        size += len(line)
        if size >= otlp.MAX_CHUNK:
            # the lines go before their spans are rendered: one 100 MB collector line is
            # then held once, as Arrow's table
            tables, chunk, size, line = _chunk(chunk, ctx), [], 0, b""
            yield from _spans(tables, ctx, host)
    if chunk:
        tables, chunk = _chunk(chunk, ctx), []
        yield from _spans(tables, ctx, host)
    ctx.lines = n


def _documents(first: bytes, stream: BinaryIO, ctx: ReadContext, host: str | None
               ) -> Iterator[pl.DataFrame]:  # fmt: skip
    """Pretty-printed requests one after another (`jq . traces.jsonl`, the spec's example
    twice): each document a request, numbered by the line it starts on."""
    rest = read_whole(stream, ctx)
    ctx.lines = 1
    if rest is None:
        return
    text = (first + rest).decode("utf-8", "replace")
    decoder, at, line = json.JSONDecoder(), 0, 1
    while at < len(text):
        start = len(text) - len(text[at:].lstrip())
        if start >= len(text):
            break
        line += text.count("\n", at, start)
        try:
            _, end = decoder.raw_decode(text, start)
        except (ValueError, RecursionError):  # no document: quarantined from here on
            ctx.reject(line, "otlp-json: not JSON from this line on", text[start : start + 400])
            end = len(text)
        else:
            yield from _spans(_one(line, text[start:end].encode(), ctx), ctx, host)
        ctx.lines = line + text.count("\n", start, end)
        line, at = ctx.lines, end


def _chunk(lines: list[tuple[int, bytes]], ctx: ReadContext) -> list[tuple[pa.Table, list[int]]]:
    """The chunk as tables of the one form: read at once where Arrow takes every line as
    it is, else a line at a time."""
    odd: list[tuple[int, bytes]] = []
    plain = lines
    blob = b"\n".join(b for _, b in lines)  # joined once: checked, then read
    if otlp.needs_canonical(blob):  # rare: a line at a time
        plain = [(n, b) for n, b in lines if not otlp.needs_canonical(b)]
        odd = [(n, b) for n, b in lines if otlp.needs_canonical(b)]
        blob = b"\n".join(b for _, b in plain)
    out: list[tuple[pa.Table, list[int]]] = []
    if plain:
        try:
            longest = max(len(b) for _, b in plain)
            out.append((otlp.read_lines(blob, longest), [n for n, _ in plain]))
        except pa.ArrowInvalid:
            odd = lines
            out = []
    for n, b in sorted(odd):
        out += _one(n, b, ctx)
    return out


def _one(n: int, line: bytes, ctx: ReadContext) -> list[tuple[pa.Table, list[int]]]:
    """One line as a table of the one form, or quarantined with the reason (one past
    CANONICAL_BYTES that Arrow cannot read as it is: its Python objects take ~15 times its
    bytes)."""
    if not otlp.needs_canonical(line):
        try:
            return [(otlp.read_lines(line.replace(b"\n", b" ")), [n])]
        except pa.ArrowInvalid:
            pass
    if len(line) > CANONICAL_BYTES:
        ctx.reject(
            n,
            f"otlp-json: {too_long(len(line), CANONICAL_BYTES)} in the form that is "
            "read a line at a time (arrays, maps, bytes or snake_case keys)",
            line[:400],
        )
        return []
    try:
        req = otlp.canonical(orjson.loads(line))
    except orjson.JSONDecodeError as exc:
        ctx.reject(n, f"otlp-json: not JSON ({exc})", line[:400])
        return []
    except ValueError as exc:
        ctx.reject(n, f"otlp-json: {exc}", line[:400])
        return []
    return [(otlp.read_lines(orjson.dumps(req)), [n])]


def _proto(stream: BinaryIO, ctx: ReadContext, host: str | None) -> Iterator[pl.DataFrame]:
    data = read_whole(stream, ctx, PROTO_FILE_BYTES)  # requests over MAX_REQUEST: each said
    if data is None:
        ctx.lines = 1
        return
    tables: list[tuple[pa.Table, list[int]]] = []
    i = 0
    try:
        for i, (offset, req) in enumerate(otlp.proto_requests(data), 1):
            if isinstance(req, str):
                ctx.reject(i, f"otlp-proto: request {i} at byte {offset:,}: {req}",
                           data[offset : offset + 200].hex())  # fmt: skip
                continue
            tables.append((otlp.read_lines(orjson.dumps(req)), [i]))
    except otlp.NoProtobuf as exc:
        ctx.reject(1, f"otlp-proto: {exc}", data[:200].hex())
        i = 1
    ctx.lines = i
    yield from _spans(tables, ctx, host)


def _spans(tables: list[tuple[pa.Table, list[int]]], ctx: ReadContext, host: str | None
           ) -> Iterator[pl.DataFrame]:  # fmt: skip
    while tables:
        lines = tables[0][1]
        seen: set[int] = set()
        # handed over, not kept here: otlp.spans lets the table go with its last span
        for rows in otlp.spans(*tables.pop(0), host):
            bad = rows.filter(pl.col("bad").is_not_null())
            for line, index, text, why in bad.select("line", "index", "text", "bad").iter_rows():
                ctx.reject(line, f"otlp: span {index} of line {line}: {why}", text[:400])
            seen.update(rows["line"].unique().to_list())
            good = rows.filter(pl.col("bad").is_null())
            ctx.tally("spans that end before they start (kept)", int(good["backwards"].sum()))
            ctx.tally("spans with an id of the wrong length (a trace id is 32 hex digits, a "
                      "span id 16; kept)", int(good["odd_id"].sum()))  # fmt: skip
            if not good.is_empty():
                yield good.select("line", "host", "ts_us", "text")
        ctx.markers += len(set(lines) - seen)  # requests without spans (empty batches)
