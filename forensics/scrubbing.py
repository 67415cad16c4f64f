"""Secrets out of what leaves the tool (the bundle; `dashboard --scrub`, `trace --scrub`).

Scrubbed at the rows, before any encoding: every stored table and catalog table is seen
through a view whose every text value (VARCHAR, JSON, lists, maps, structs) went through
the patterns below — a column of a type this module does not know is left out (NULL),
so a column added later fails closed. The text members are scrubbed once more as text,
where a separator may be escaped (`:\\/\\/`, `\\u002f`, `&#x2F;`, `%2F`).

The patterns run in RE2 on both sides (DuckDB's, and google-re2 in Python): linear in the
text, which Python's backtracking engine was not (one log line of 64 KiB of `-` took 128 s).
They are written after gitleaks' default rules for value-shaped secrets.
"""

from __future__ import annotations

import re

import duckdb
import re2

from .store.overlay import _CREATE, overlay

_SLASH = r"(?:/|\\/|\\u002[fF]|&#x2[fF];|&#47;|%2[fF])"
_COLON = r"(?::|\\u003[aA]|&#x3[aA];|&#58;|%3[aA])"
_AT = r"(?:@|\\u0040|&#x40;|&#64;|%40)"
# written as key=value, key: value, "key": "value", --key value or key='value'
# a name that holds a secret: a secret word anywhere in it (token, passwd, password,
# secret…, a key after a separator: api-key, x_api_key; cookie) with any further parts
# (`password_db`, `passwd_file`, `token_db`; never `tokens`), matched from the word (a
# name's head is left as it is). Possessive runs (`*+`, Python's; RE2 has no backtracking
# to limit and reads them as plain runs): a run that gave back its characters one at a
# time was retried at every position of a long line (64 KiB of `-`: 128 s).
_WORD = r"(?:token|passw(?:or)?d|secret[A-Za-z0-9]*+|[_-]key|apikey|cookie)"
_NAME = rf"(?i:{_WORD}(?:[_.-][A-Za-z0-9]++)*+)"
# a captured HTTP header's name (OpenTelemetry: http.request.header.<name>) or any secret
# name, as a map's key or a JSON record's `"key"`
_KEY_NAME = rf"(?i:[A-Za-z0-9_.-]*?(?:authorization|{_NAME}))"
_VALUE_END = r"[^\s\"'`,;&)}\]<>\\]"
# a value with a letter in it: `#new-token: 896` is a count, not a secret
_VALUE = rf"{_VALUE_END}*?[A-Za-z]{_VALUE_END}*+"


def _re2(pattern: str) -> str:
    """A pattern as RE2 reads it: a possessive run as a plain one (RE2 never backtracks)."""
    return pattern.replace("*+", "*").replace("++", "+")


# (pattern, replacement), in the order applied
SECRETS: list[tuple[str, str]] = [
    # PEM private keys: from BEGIN to END, or to the end of the text when END is elsewhere
    (r"-----BEGIN[ A-Z0-9_-]*PRIVATE KEY( BLOCK)?-----(?s:.*?)(?:-----END[ A-Z0-9_-]*PRIVATE"
     r" KEY( BLOCK)?-----|$)", "-----PRIVATE KEY ***-----"),
    # URL user-info of any scheme, with or without a user, up to the last @ of the word
    (rf"({_COLON}{_SLASH}{_SLASH})[^\s\"'<>`]*{_AT}", r"\1***@"),
    (r"(?i)(authorization[\"']?\s*[:=]\s*[\"']?)(bearer\s+|basic\s+|token\s+)?[^\s\"',;}]+",
     r"\1\2***"),
    (r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]{8,}", r"\1***"),
    # a JSON record's key and value apart (OTLP's attributes: {"key": "db.password",
    # "value": {"stringValue": "…"}}): the value under a secret's name, whatever it holds
    (rf"(\"key\"\s*:\s*\"{_KEY_NAME}\"\s*,\s*\"value\"\s*:\s*(?:\{{\s*\"\w+\"\s*:\s*)?"
     r"(?:\[\s*)?)(?:\"(?:[^\"\\]|\\.)*+\"|-?[0-9][0-9.eE+-]*+|true|false)", r'\1"***"'),
    # key=value, key: value, "key": "value", key='value', ?key=value&
    (rf"({_NAME}\\?[\"']?\s*[:=]\s*\\?[\"']?){_VALUE}", r"\1***"),
    # --key value, --key=value (ServerArgs as a command line): the flag's parts a run each
    (rf"(--(?:[A-Za-z0-9]++[_.-])*?(?:[A-Za-z0-9]++)?{_NAME}(?:=|\s+))[^-\s\"',]{_VALUE_END}*+",
     r"\1***"),
    # value-shaped, whatever the key
    (r"\bhf_[A-Za-z0-9]{20,}", "hf_***"),
    (r"\bsk-[A-Za-z0-9_-]{16,}", "sk-***"),
    (r"\b(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{12,}", "AKIA***"),
    (r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{30,}", "gh_***"),
    (r"\bgithub_pat_[A-Za-z0-9_]{22,}", "github_pat_***"),
    (r"\bglpat-[A-Za-z0-9_-]{20,}", "glpat-***"),
    (r"\bxox[baprs]-[A-Za-z0-9-]{10,}", "xox-***"),
    (r"\bAIza[0-9A-Za-z_-]{35}", "AIza***"),
    (r"\bey[A-Za-z0-9_-]{10,}\.ey[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}", "jwt-***"),
]  # fmt: skip


def _python(pattern: str, replacement: str, kind: type):
    """A pattern's substitution in Python, through RE2 (google-re2) as DuckDB runs it:
    linear in the text, where Python's engine retried long runs at every position."""
    rx = re2.compile(_re2(pattern).encode() if kind is bytes else _re2(pattern))
    rep = replacement.encode() if kind is bytes else replacement
    return lambda text: rx.sub(rep, text)


_SUBS = [_python(p, r, str) for p, r in SECRETS]
_SUBS_B = [_python(p, r, bytes) for p, r in SECRETS]


def scrub(text: str) -> str:
    for sub in _SUBS:
        text = sub(text)
    return text


def scrub_bytes(data: bytes) -> bytes:
    for sub in _SUBS_B:
        data = sub(data)
    return data


_SPANS = [
    (re2.compile(_re2(p)), [int(g) for g in re.findall(r"\\(\d)", r.split("*")[0])])
    for p, r in SECRETS
]  # fmt: skip


def _crossing(text: str, cut: int) -> tuple[int, int]:
    """The part of `text` a secret straddling `cut` covers: (its start, its end), or (cut,
    cut) when none does. A secret's start is past the groups its replacement keeps (the
    key of `key=value`, the scheme of a URL)."""
    lo, hi = cut, cut
    for rx, kept in _SPANS:
        for m in rx.finditer(text, max(0, cut - 4096), min(len(text), cut + 4096)):
            start = max([m.end(g) for g in kept if m.group(g) is not None] or [m.start()])
            if start < cut < m.end():
                lo, hi = min(lo, start), max(hi, m.end())
    return lo, hi


def scrub_split(head: str, tail: str) -> tuple[str, str]:
    """Two pieces of one message journald split at LineMax, each scrubbed, and a secret
    the split cut through masked on both sides (alone, neither piece's part of a token
    looks like one)."""
    lo, hi = _crossing(head + tail, len(head))
    if lo == hi:
        return scrub(head), scrub(tail)
    return scrub(head[:lo]) + "***", "***" + scrub(tail[hi - len(head) :])


def scrub_input(data: bytes, line_max: int) -> bytes:
    """A raw input scrubbed, a secret split across journald's LineMax pieces included: a
    text rendering's piece is a message of exactly `line_max` bytes, a JSON one's says
    `_LINE_BREAK=line-max`; the next line continues it. Only lines that long are looked
    at one by one: the rest is scrubbed whole, as fast as before."""
    from .linemax import message_of

    lines = data.split(b"\n")
    fixed: dict[int, bytes] = {}
    for first in (j for j, line in enumerate(lines) if len(line) >= line_max):
        if first in fixed:
            continue
        j, carried = first, None
        while j + 1 < len(lines):
            view, nxt = message_of(lines[j]), message_of(lines[j + 1])
            if view is None or nxt is None or not view.piece(line_max):
                break
            head, carried = scrub_split(carried if carried is not None else view.message,
                                        nxt.message)  # fmt: skip
            fixed[j] = scrub_bytes(view.with_message(head))  # the rest of the line too
            j += 1
        last = message_of(lines[j]) if carried is not None else None
        if last is not None and carried is not None:
            fixed[j] = scrub_bytes(last.with_message(carried))
    if not fixed:
        return scrub_bytes(data)
    out: list[bytes] = []
    plain: list[bytes] = []
    for k, line in enumerate(lines):
        if k not in fixed:
            plain.append(line)
            continue
        if plain:
            out.append(scrub_bytes(b"\n".join(plain)))
            plain = []
        out.append(fixed[k])
    if plain:
        out.append(scrub_bytes(b"\n".join(plain)))
    return b"\n".join(out)


def _quoted(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


# Any pattern at all, in one RE2 pass: a value it does not match (nearly every log line)
# is left as it is without running each pattern over it.
_ANY = "|".join(f"(?:{_re2(p)})" for p, _ in SECRETS)


def sql_scrub(expr: str) -> str:
    """A VARCHAR expression with every pattern applied (DuckDB); the patterns one by one
    only where one of them matches."""
    chain = expr
    for pat, rep in SECRETS:
        chain = f"regexp_replace({chain}, {_quoted(_re2(pat))}, {_quoted(rep)}, 'g')"
    return f"CASE WHEN regexp_matches({expr}, {_quoted(_ANY)}) THEN {chain} ELSE {expr} END"


# Types with no text in them: shown as they are.
_PLAIN = re.compile(
    r"^(BOOLEAN|TINYINT|SMALLINT|INTEGER|BIGINT|HUGEINT|UTINYINT|USMALLINT|UINTEGER|UBIGINT"
    r"|UHUGEINT|FLOAT|DOUBLE|DECIMAL\(\d+,\d+\)|DATE|TIME|TIMESTAMP|TIMESTAMP WITH TIME ZONE"
    r"|TIMESTAMP_NS|TIMESTAMP_MS|TIMESTAMP_S|INTERVAL|UUID)$"
)


def scrubbed(expr: str, typ: str, depth: int = 0) -> str | None:
    """`expr` of DuckDB type `typ` with its text scrubbed, or None where the type holds
    text this cannot reach (the column is then left out: fail closed)."""
    typ = typ.strip()
    if _PLAIN.match(typ):
        return expr
    if typ in ("VARCHAR", "JSON"):
        return f"{sql_scrub(f'{expr}::VARCHAR')}::{typ}"
    if depth > 3:
        return None
    if typ.endswith("[]"):
        inner = scrubbed(f"x{depth}", typ[:-2], depth + 1)
        return None if inner is None else f"list_transform({expr}, lambda x{depth}: {inner})"
    if typ.startswith("MAP(") and typ.endswith(")"):
        k, v = _split_top(typ[4:-1])
        if k != "VARCHAR":
            return None
        value = scrubbed(f"e{depth}.value", v, depth + 1)
        if value is None:
            return None
        # a value under a secret's name goes whatever it looks like (hf_token, password …)
        named = f"regexp_full_match(e{depth}.key, {_quoted(_re2(_KEY_NAME))})"
        return (f"map_from_entries(list_transform(map_entries({expr}), lambda e{depth}: "
                f"{{'key': e{depth}.key, 'value': CASE WHEN {named} THEN '***' ELSE {value} "
                f"END}}))")  # fmt: skip
    return None


def _split_top(inner: str) -> tuple[str, str]:
    """`K, V` of a MAP(K, V) type, split at its top-level comma."""
    level = 0
    for i, ch in enumerate(inner):
        level += ch == "("
        level -= ch == ")"
        if ch == "," and level == 0:
            return inner[:i].strip(), inner[i + 1 :].strip()
    return inner, ""


CATALOG_TABLES = ("runs", "sources", "meta")


def shadow(con: duckdb.DuckDBPyConnection, extra=None, keep: bool = False) -> None:
    """Every stored table (the shards' views and the catalog's runs, sources, meta) behind
    a view that scrubs every text value; the named views recomputed over them. `extra`:
    (table, column, type) -> an expression that replaces the scrubbed one (or None).
    `keep`, for the many queries of a bundle: each table scrubbed once, not at every
    query — the shards' tables kept scrubbed in temporary tables (of the message tables
    only the rows a pattern matches), and the named views read from their stored rows,
    scrubbed, where those are fresh (without `extra`)."""
    _catalog_views(con)

    def wrap(name: str, cols: list[tuple[str, str]]) -> tuple[str, str]:
        out = []
        for col, typ in cols:
            q = f'"{col}"'
            own = extra(name, col, typ) if extra else None
            expr = own if own is not None else scrubbed(q, typ)
            out.append(f"{expr if expr is not None else f'NULL::{typ}'} AS {q}")
        return ", ".join(out), "TRUE"

    kept = _keep(con, wrap, extra is None) if keep else set()

    def stored(name: str, table: str) -> str | None:
        """A named view over its stored rows (computed at ingest), scrubbed: the rows
        hold no secret once every text value of them is scrubbed, and are not computed
        again. With `extra` (HMACs of user text) the view is computed over its inputs."""
        if extra is not None:
            return None
        cols = [(c, t) for c, t, *_ in con.execute(f"DESCRIBE {table}").fetchall()]
        select, _ = wrap(name, cols)
        return f"SELECT {select} FROM {table}"

    overlay(con, lambda name, cols: ("*", "TRUE") if name in kept else wrap(name, cols),
            stored if keep else None)  # fmt: skip


def _catalog_views(con: duckdb.DuckDBPyConnection) -> None:
    """The catalog's tables as temporary views of themselves, so that the overlay, which
    wraps views, wraps them too."""
    db = con.execute("SELECT current_database()").fetchall()[0][0].replace('"', '""')
    for table in CATALOG_TABLES:
        # runs keep their insertion order (analyses/runs.py orders ties by rowid)
        order = ", rowid AS rowid" if table == "runs" else ""
        con.execute(f'CREATE OR REPLACE TEMP VIEW {table} AS SELECT *{order} '
                    f'FROM "{db}".main.{table}')  # fmt: skip


def _keep(con: duckdb.DuckDBPyConnection, wrap, plain_scrub: bool) -> set[str]:
    """The shards' tables scrubbed once, from their declared columns (no schema read to
    find them): the tables they are kept in. With `plain_scrub` (no HMACs) a message
    table keeps only its rows that a pattern matches."""
    from .parsers.tables import SHARDED

    for name, t in SHARDED.items():
        cols = [(c.name, c.type) for c in t.all_columns]
        if plain_scrub and name in KEYED and _keep_changed(con, name, cols, wrap):
            continue
        select, _ = wrap(name, cols)
        con.execute(f"CREATE OR REPLACE TEMP TABLE fx_kept_{name} AS "
                    f"SELECT {select} FROM {name}")  # fmt: skip
        con.execute(f"CREATE OR REPLACE TEMP VIEW {name} AS SELECT * FROM fx_kept_{name}")
    return set(SHARDED)


# The message tables, by the columns that name a row: their few rows that hold a secret
# are kept scrubbed, the rest read from the shards as they are (a 593 MB incident: all its
# entries copied scrubbed took 5 s and 1.6 GB at the peak of a bundle).
KEYED = {"entries": ("source_id", "entry_no"), "dropped_entries": ("source_id", "entry_no")}


def _keep_changed(con: duckdb.DuckDBPyConnection, name: str, cols, wrap) -> bool:
    """`name` as its rows, the ones any pattern matches replaced by their scrubbed copy
    (kept in a temporary table). False where a column is of a type this cannot test."""
    texts, plain = [], []
    for col, typ in cols:
        q = f'"{col}"'
        expr = scrubbed(q, typ)
        if expr == q:
            plain.append(q)
        elif typ in ("VARCHAR", "JSON"):
            texts.append(q)
            plain.append(q)
        elif expr is None:
            plain.append(f"NULL::{typ} AS {q}")  # left out: fail closed
        else:
            return False
    (body,) = con.execute(
        "SELECT sql FROM duckdb_views() WHERE temporary AND view_name = ?", [name]
    ).fetchall()[0]
    raw = f"fx_rows_{name}"
    con.execute(f"CREATE OR REPLACE TEMP VIEW {raw} AS {_CREATE.sub('', body.strip().rstrip(';'))}")
    guard = " OR ".join(f"coalesce(regexp_matches({q}, {_quoted(_ANY)}), false)" for q in texts)
    select, _ = wrap(name, cols)
    con.execute(f"CREATE OR REPLACE TEMP TABLE fx_changed_{name} AS SELECT {select} "
                f"FROM {raw} WHERE {guard or 'false'}")  # fmt: skip
    key = ", ".join(KEYED[name])
    con.execute(
        f"""CREATE OR REPLACE TEMP VIEW {name} AS
            SELECT {", ".join(plain)} FROM {raw} ANTI JOIN fx_changed_{name} USING ({key})
            UNION ALL SELECT * FROM fx_changed_{name}"""
    )
    return True
