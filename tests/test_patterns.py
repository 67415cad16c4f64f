"""Log formats as data: built-in SGLang patterns, their samples, user pattern files."""

from __future__ import annotations

import random
from pathlib import Path

import polars as pl
import pytest
from forensics.parsers.patterns import (
    _PLAIN_PAIRS,
    PatternError,
    _lines_holding,
    apply,
    builtin,
    check,
    load_file,
)

import forensics

from .helpers import cli

# A copy of ../shared/samples/sglang-lines.txt (the team's sample of every SGLang line variant).
SHARED_SAMPLES = Path(__file__).resolve().parent / "data" / "sglang-lines.txt"


def test_builtin_samples_pass() -> None:
    pats = builtin()
    assert {p.name for p in pats} >= {
        "transfer_failed",
        "context_corruption",
        "kv_checksum_mismatch",
    }
    assert all(check(p) == [] and p.samples for p in pats)


def test_team_sample_lines_yield_every_transfer_event() -> None:
    lines = [ln for ln in SHARED_SAMPLES.read_text().splitlines() if ln and not ln.startswith("#")]
    found = apply(builtin(), pl.Series(lines))["transfers"]
    assert sorted(found["pattern"].to_list()) == ["context_corruption"] + ["transfer_failed"] * 3
    timeouts = found.filter(pl.col("reason").str.contains("KVPoll.WaitingForInput"))
    assert timeouts["room"].to_list() == ["5512093348812734411"]


def _write(tmp_path: Path, body: str) -> Path:
    f = tmp_path / "p.toml"
    f.write_text(body)
    return f


GOOD = """
[[pattern]]
name = "fork_abort"
table = "transfers"
needle = "fork abort"
regex = \'\'\'fork abort room=(?P<room>\\d+) because (?P<reason>.*)$\'\'\'
[[pattern.samples]]
line = "fork abort room=12 because torn page"
fields = { room = "12", reason = "torn page" }
"""


def test_user_pattern_file_checked(tmp_path: Path) -> None:
    assert [p.name for p in load_file(_write(tmp_path, GOOD))] == ["fork_abort"]
    proc = cli("patterns", "--check", str(tmp_path / "p.toml"))
    assert proc.returncode == 0 and "fork_abort" in proc.stdout.decode()


@pytest.mark.parametrize(
    "edit,message",
    [
        (("(?P<room>\\d+)", "(?P<room>\\d+"), "regex does not compile"),
        (('reason = "torn page"', 'reason = "other"'), "sample field reason: want 'other'"),
        (('line = "fork abort room=12', 'line = "nothing room=12'), "sample lacks the needle"),
        (('table = "transfers"', 'table = "nope"'), "unknown table 'nope'"),
        (("[[pattern.samples]]", "[[pattern.nosamples]]"), "has no sample lines"),
    ],
)
def test_bad_pattern_files_refused_with_reason(tmp_path: Path, edit, message: str) -> None:
    f = _write(tmp_path, GOOD.replace(*edit))
    with pytest.raises(PatternError, match=message.replace("(", "\\(")):
        load_file(f)
    proc = cli("patterns", "--check", str(f))
    assert proc.returncode == 2 and message in proc.stderr.decode()
    assert "Traceback" not in proc.stderr.decode()


def test_transfers_attached_to_rooms(tmp_path: Path) -> None:
    res = forensics.demo(tmp_path / "inc")
    _, rows = forensics.query_rows(
        "SELECT verdict, transfer_events, transfer_reasons FROM rooms WHERE transfer_events > 0"
        " ORDER BY verdict DESC",
        res.ingest.db,
    )
    assert [r[0] for r in rows] == ["missing_dst", "conflict"]
    assert rows[1][2].startswith("context_corruption: Metadata buffer index: 17")
    assert (
        rows[0][2].startswith("transfer_failed: Request ")
        and "KVPoll.WaitingForInput" in rows[0][2]
    )


def test_team_samples_ingested_as_plain_sglang_log(tmp_path: Path, db: Path) -> None:
    res = forensics.ingest([str(SHARED_SAMPLES)], db, host="mixed")
    assert res.sources[0].format == "sglang"  # SGLang's stdout: a plain log
    assert res.sources[0].records["batch"] == 9 and res.sources[0].records["transfer"] == 4
    _, rows = forensics.query_rows(
        "SELECT phase, ranks, forward_ct, running_req, token_usage, full_token_usage,"
        " cuda_graph, gen_throughput FROM batches ORDER BY entry_no",
        db,
    )
    assert rows[0] == ("Prefill", "TP0", None, 0, 0.29, None, None, None)
    assert rows[3][:3] == ("Prefill", "DP0 TP0 EP0", 88123)
    assert rows[-1] == ("Decode", "DP0 TP0 EP0", 884213, 64, 0.24, None, True, 2410.77)
    assert rows[-2][5] == 0.22  # full token usage


def test_rid_room_from_log_requests_links_requests(tmp_path: Path, db: Path) -> None:
    log = tmp_path / "d.log"
    log.write_text(
        "[2026-09-20 14:03:12] Receive: obj=GenerateReqInput(rid='r9', text=None, bootstrap_room=77, stream=False)\n"
        "[2026-09-20 14:03:14] Finish: obj=GenerateReqInput(rid='r9', bootstrap_room=77), out={}\n"
    )
    results = tmp_path / "results.jsonl"
    results.write_text('{"session": 1, "round": 0, "rid": "r9", "corrupted": false}\n')
    forensics.ingest([str(log), str(results)], db, host="decode-0")
    _, rows = forensics.query_rows("SELECT event, rid, room FROM rid_rooms ORDER BY entry_no", db)
    assert rows == [("Receive", "r9", 77), ("Finish", "r9", 77)]
    _, req = forensics.query_rows("SELECT rid, room, verdict FROM requests", db)
    assert req == [("r9", 77, None)]


def test_http_access_lines(tmp_path: Path, db: Path) -> None:
    forensics.ingest([str(SHARED_SAMPLES)], db, host="mixed")
    _, rows = forensics.query_rows("SELECT method, path, status FROM http ORDER BY entry_no", db)
    assert rows == [
        ("POST", "/v1/chat/completions", 200),
        ("POST", "/v1/chat/completions", 500),
        ("POST", "/generate", 200),
    ]


FORK = """
[[pattern]]
name = "dsv4_idxk_checksum"
table = "checksum"
needle = "dsv4_idxk_checksum"
regex = \'\'\'dsv4_idxk_checksum side=(?P<side>\\w+) room=(?P<room>\\S+) sig=(?P<full>[0-9a-f]+)\'\'\'
[[pattern.samples]]
line = "[2026-11-29 07:00:01 TP0] dsv4_idxk_checksum side=src room=7 sig=abc"
fields = { side = "src", room = "7", full = "abc" }
"""


def test_fork_format_mapped_onto_checksum_records(tmp_path: Path, db: Path) -> None:
    pats = _write(tmp_path, FORK)
    log = tmp_path / "fork.log"
    log.write_text(
        "2026-11-29T07:00:01.000000+0000 p python3[1]: dsv4_idxk_checksum side=src room=7 sig=abc\n"
        "2026-11-29T07:00:02.000000+0000 d python3[2]: dsv4_idxk_checksum side=dst room=7 sig=abd\n"
        "2026-11-29T07:00:03.000000+0000 d python3[2]: dsv4_idxk_checksum side=dst room=x sig=abd\n"
    )
    proc = cli("ingest", str(log), "--patterns", str(pats), "--db", str(db))
    assert proc.returncode == 0, proc.stderr
    _, rows = forensics.query_rows(
        'SELECT side, room, buf, "full" FROM checksums ORDER BY entry_no', db
    )
    assert rows == [("src", 7, "index_k", "abc"), ("dst", 7, "index_k", "abd")]
    _, verdict = forensics.query_rows("SELECT verdict FROM rooms", db)
    assert verdict == [("mismatch",)]
    _, q = forensics.query_rows("SELECT line, reason FROM quarantine", db)
    assert q == [(3, "checksum: room is not an unsigned 63-bit number")]


def test_bad_patterns_file_stops_ingest_before_reading(tmp_path: Path, db: Path) -> None:
    bad = _write(tmp_path, FORK.replace('full = "abc"', 'full = "zzz"'))
    log = tmp_path / "x.log"
    log.write_text("2026-11-29T07:00:01.000000+0000 p a[1]: hi\n")
    proc = cli("ingest", str(log), "--patterns", str(bad), "--db", str(db))
    assert proc.returncode == 2 and "sample field full" in proc.stderr.decode()
    assert not db.exists()


def _pair_lines(n: int, seed: int) -> list[str | None]:
    """Stats of batch lines: SGLang's keys, renamed, unknown, repeated and odd ones."""
    rng = random.Random(seed)
    keys = [
        "#new-seq", "#running-req", "token usage", "#token", "token", "cuda graph",
        "input throughput (token/s)", "#bootstrap-req", "est. prefill TFLOPS/s (per GPU)",
        "fwd occupancy", "#", " spaced key", "Übergröße", "a:b", "",
    ]  # fmt: skip
    values = ["0", "12.5", "True", "91.37%", "", " padded ", 'q"uo\\te', "ctl\x01x", "a: b", "1,2"]
    out: list[str | None] = []
    for _ in range(n):
        if rng.random() < 0.05:
            out.append(None)
            continue
        pieces = []
        for _ in range(rng.randint(1, 6)):
            if rng.random() < 0.05:
                pieces.append("no pair here")
            else:
                pieces.append(f"{rng.choice(keys)}: {rng.choice(values)}")
        tail = rng.choice(["", ", ", ",", " ", ": "])
        out.append(", ".join(pieces) + tail)
    return out


@pytest.mark.parametrize("seed", range(4))
def test_plain_pairs_read_as_the_general_split_reads_them(seed: int) -> None:
    # The shortcut for lines whose pairs split one way only (one regex per key sequence)
    # gives every row the columns and `extra` JSON the split/explode/pivot reading gives.
    (pat,) = [p for p in builtin() if p.name == "batch_stats"]
    lines = _pair_lines(400, seed)
    frame = pl.DataFrame({"phase": ["Decode"] * len(lines), "stats": lines})
    got = pat._spread(frame)
    stats = frame["stats"].str.strip_chars_end(", ")
    wide = pat._spread_general(stats)
    want = frame.drop("stats").with_columns(_i=pl.int_range(pl.len()))
    want = want.join(wide, on="_i", how="left").drop("_i")
    assert sorted(got.columns) == sorted(want.columns)
    assert got.select(sorted(got.columns)).equals(want.select(sorted(want.columns)))
    plain = stats.str.contains(_PLAIN_PAIRS).fill_null(False)
    assert 0 < plain.sum() < plain.len() - 20  # both readings were exercised
    assert got["extra"].drop_nulls().len() > 0


def test_pair_keys_cut_at_their_separator_whatever_their_letters() -> None:
    # A value with a comma takes the general reading; a key with letters of two bytes was
    # cut by a byte offset counted as characters there.
    (pat,) = [p for p in builtin() if p.name == "batch_stats"]
    frame = pl.DataFrame({"stats": ["Größe: 1,5, #new-seq: 2", "Größe: 7, #new-seq: 3"]})
    got = pat._spread(frame)
    assert got["new_seq"].to_list() == ["2", "3"]
    assert got["extra"].to_list() == ['{"gr_e":"1,5"}', '{"gr_e":"7"}']


@pytest.mark.parametrize("seed", range(3))
def test_needles_found_in_halves_as_one_by_one(seed: int) -> None:
    # Needles sought a set at a time (one regex of literals, then each half in the lines
    # that hold one) find the lines a search per needle finds: overlapping needles, one
    # inside another, regex characters, letters of two bytes, nulls.
    rng = random.Random(seed)
    needles = [p.needle for p in builtin()] + ["a.b", "(x)", "Größe", "b", "batch b"]
    rng.shuffle(needles)
    words = [*needles, "new fill batch", " batc", "zzz", "a+b", "GRÖSSE", "\\"]
    lines = [
        None
        if rng.random() < 0.03
        else "".join(rng.choice(words) for _ in range(rng.randint(0, 4)))
        for _ in range(3000)
    ]
    messages = pl.Series(lines, dtype=pl.String)
    got = _lines_holding(messages, needles)
    for needle, idx in zip(needles, got, strict=True):
        want = [i for i, line in enumerate(lines) if line is not None and needle in line]
        assert idx.to_list() == want, needle
    assert sum(len(i) > 0 for i in got) > len(needles) // 2


def _corpus_lines() -> list[str]:
    data = Path(__file__).parent / "data"
    lines = [ln.split("\t")[-1] for name in ("sglang-real-lines.tsv", "pd-stack-lines.tsv")
             for ln in (data / name).read_text().splitlines() if ln and not ln.startswith("#")]  # fmt: skip
    return lines + [s.line for p in builtin() for s in p.samples]


def _naive(messages: pl.Series, needles: list[str]) -> list[list[int]]:
    return [messages.str.contains(n, literal=True).fill_null(False).arg_true().to_list()
            for n in needles]  # fmt: skip


def test_one_pass_finds_every_needle_a_line_holds() -> None:
    """The needle pass (one alternation, then overlapping Aho-Corasick on the lines that
    hold one) against each needle sought alone: the real lines and every sample, and
    lines made of needles run together (one inside or across another)."""
    from forensics.parsers.patterns import _lines_holding

    needles = [p.needle for p in builtin()]
    rng = random.Random(7)
    glued = []
    for _ in range(400):  # needles cut and overlapped: a suffix of one the prefix of the next
        parts = rng.sample(needles, 3)
        glued.append("".join(p[: rng.randrange(1, len(p) + 1)] if rng.random() < 0.3 else p
                             for p in parts))  # fmt: skip
    glued += ["abcefg", "Decode batch" * 3, "", "\u00e9\u4e2d" + needles[0]]
    messages = pl.Series([*_corpus_lines(), *glued, None], dtype=pl.String)
    got = [s.to_list() for s in _lines_holding(messages, needles)]
    assert got == _naive(messages, needles)
    assert sum(map(len, got)) > len(needles)  # most needles are found somewhere


@pytest.mark.parametrize("seed", range(2))
def test_needles_past_the_head_and_across_its_cut_are_found(seed: int) -> None:
    """Long lines are read match by match only in their head (_matches): needles just
    before, across and after the cut, hidden by a match across it, after letters of two
    bytes (the cut counts characters), and deep in a 4 kB tail."""
    from forensics.parsers.patterns import HEAD, _lines_holding

    rng = random.Random(seed)
    needles = [p.needle for p in builtin()]
    lines = []
    for _ in range(600):
        n = rng.choice(needles)
        at = HEAD + rng.randint(-len(n) - 2, 2)  # its start around the cut
        pad = rng.choice(["x", "é", "中"]) * max(at, 0)
        tail = "".join(rng.choice([*needles, " word", "ü"]) for _ in range(rng.randint(0, 200)))
        lines.append(pad + n + tail)
    for n, m in ((a, b) for a in needles for b in needles if a != b):
        for i in range(1, min(len(n), len(m))):
            if n.endswith(m[:i]):  # n's match across the cut hides m just after it
                lines.append("y" * (HEAD - len(n) + 2) + n + m[i:])
                break
        if len(lines) > 900:
            break
    messages = pl.Series(lines, dtype=pl.String)
    got = [s.to_list() for s in _lines_holding(messages, needles)]
    assert got == _naive(messages, needles)


def test_the_tables_read_at_start_up_are_the_patterns_tables() -> None:
    from forensics.parsers.pattern_names import builtin_tables

    assert builtin_tables() == {p.name: p.table for p in builtin()}
