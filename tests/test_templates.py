"""Every line a template: the masker's rules and their samples, ids pinned across
dependency versions, one id per labelled shape of the PD stack's real lines (and never two
shapes merged), idempotence and bounds on hostile input, the same templates in every
rendering of one real journal, and `forensics templates` (new since a run or a time,
compare, a pattern stub that passes `patterns --check`)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
from forensics.parsers import namer
from forensics.parsers import templates as T
from forensics.parsers.patterns import load_file
from hypothesis import given, settings
from hypothesis import strategies as st

import forensics
from forensics.analyses.templates import as_pattern, templates
from forensics.store import connect_read_only

from .helpers import cli

DATA = Path(__file__).parent / "data" / "pd-stack-lines.tsv"


def _labelled() -> list[tuple[str, str, str]]:
    rows = []
    for raw in DATA.read_text(encoding="utf-8").splitlines():
        if raw.startswith("#") or not raw.strip():
            continue
        label, origin, line = raw.split("\t", 2)
        rows.append((label, origin, line))
    return rows


def _ids(lines: list[str]) -> list[int]:
    return T.template_ids(T.mask(pl.Series(lines, dtype=pl.String))).to_list()


def test_every_rule_does_what_its_samples_say() -> None:
    checked = 0
    for r in T.rules():
        for s in r.samples:
            line = pl.Series([s["line"]])
            if r.kind in ("prefix", "mask"):
                assert T.mask(line)[0] == s["masked"], (r.name, s)
            elif r.kind == "level":
                assert T.levels(line)[0] == s["level"], (r.name, s)
            elif r.kind == "value":
                got = {d["key"]: d["value"] for d in T.named(line).to_list()[0] or []}
                assert all(got.get(k) == v for k, v in s["named"].items()), (r.name, s, got)
            else:
                assert T.components(line)[0] == s["component"], (r.name, s)
            checked += 1
    assert checked >= 30


def test_ids_are_pinned() -> None:
    # a hash of the masked text and the masker's version: the same in every polars,
    # DuckDB and machine (a dataframe library's hash would change between versions)
    assert _ids(["Worker: Process failed for slice (opcode: 1, length: 65536)",
                 "Decode out of memory happened. #retracted_reqs: 3"]) == [
        6273885768549572670, 9130639934931094669]  # fmt: skip
    assert T.pattern_id("batch_stats") == 10819645838311234510


def test_real_lines_one_id_per_label_and_labels_never_merged() -> None:
    rows = _labelled()
    assert len(rows) >= 15 and all(origin for _, origin, _ in rows)
    ids = _ids([line for _, _, line in rows])
    by_label: dict[str, set[int]] = {}
    for (label, _, _), i in zip(rows, ids, strict=True):
        by_label.setdefault(label, set()).add(i)
    assert all(len(v) == 1 for v in by_label.values()), by_label
    assert len({next(iter(v)) for v in by_label.values()}) == len(by_label)


def test_named_values_of_a_mooncake_slice_failure() -> None:
    line = next(ln for label, _, ln in _labelled() if label == "mc_slice")
    got = dict((d["key"], d["value"]) for d in T.named(pl.Series([line]))[0])
    assert got["local_nic"] == "mlx5_7"
    assert got["peer_nic"] == "115.182.224.13:15004@mlx5_7"
    assert got["length"] == "3584"
    assert T.named(pl.Series(["Worker: Process failed"]))[0] is None  # no digit: no pair


SHAPES = [
    "Worker: Process failed for slice (opcode: {i}, source_addr: 0x{h}, length: {i}): {w}",
    "[2025-09-17 16:23:13 DP{i} TP{i}] Decode out of memory happened. #retracted_reqs: {i}",
    "{host}:{i}:{i} [{i}] NCCL WARN Call to ibv_reg_mr failed with error {w}",
    "Failed to get kvcache from prefill instance {ip}:{port}, room {i}",
    "Dumped {i} finished and {i} unfinished requests before crash to /tmp/{w}/{h}.pkl",
]


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(
        st.tuples(st.integers(0, 10**12), st.text("0123456789abcdef", min_size=6, max_size=16),
                  st.sampled_from(["local protection error", "timeout", "EIO"]),
                  st.from_regex(r"[a-z]{2,6}-[0-9]{1,3}", fullmatch=True),
                  st.tuples(*[st.integers(0, 255)] * 4)),
        min_size=2, max_size=4,
    )
)  # fmt: skip
def test_values_vary_one_id_per_shape(values: list) -> None:
    lines, labels = [], []
    for k, shape in enumerate(SHAPES):
        for i, h, w, host, ip in values:
            if "{w}" in shape and k != 0:
                w = "x"  # a word of the text, not a value, except the slice's status
            lines.append(
                shape.format(i=i, h=h, w=w, host=host, ip=".".join(map(str, ip)), port=i % 65536)
            )
            labels.append((k, w if k == 0 else ""))
    ids = _ids(lines)
    per = {}
    for lab, i in zip(labels, ids, strict=True):
        per.setdefault(lab, set()).add(i)
    assert all(len(v) == 1 for v in per.values())
    assert len({min(v) for v in per.values()}) == len(per)


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=300))
def test_masking_is_idempotent_and_a_function_of_the_text(text: str) -> None:
    once = T.mask(pl.Series([text, text]))
    assert once[0] == once[1]
    assert T.mask(once)[0] == once[0]
    assert len(once[0]) <= T.MAX_TEXT


def test_hostile_lines_are_bounded() -> None:
    big = " ".join(f"k{i}={i}" for i in range(12_000))  # 100 kB
    binary = "\ufffd\x00\x01\x7f" * 50
    rule = "=" * 100_000
    n = 200_000
    distinct = pl.Series([f"value {i} seen" for i in range(n)])
    out = T.lines(pl.concat([pl.Series([big, binary, rule]), distinct]),
                  pl.Series([None] * (n + 3), dtype=pl.String), {})  # fmt: skip
    assert out["text"].str.len_chars().max() <= T.MAX_TEXT
    assert out["text"][2] == "===="
    assert out["template"][3:].n_unique() == 1  # a million numbers, one template
    assert len(out["named"][0]) == namer.MAX_PAIRS + 1  # and how many were left out
    assert out["named"][0][-1]["key"] == "(left out)"


def _stock(tmp: Path) -> Path:
    from forensics.synthetic.demo import demo

    demo(tmp / "inc", stock=True)
    return tmp / "inc" / "forensics.duckdb"


def test_every_entry_has_its_template_and_patterns_name_theirs(tmp_path: Path) -> None:
    db = _stock(tmp_path)
    con = connect_read_only(db)
    try:
        assert con.execute("SELECT count(*) FROM entries").fetchone() == con.execute(
            "SELECT count(*) FROM lines").fetchone()  # fmt: skip
        named = dict(con.execute(
            "SELECT pattern, any_value(text) FROM lines WHERE pattern IS NOT NULL GROUP BY 1"
        ).fetchall())  # fmt: skip
        assert named["batch_stats"] == "batch_stats"
        hosts = con.execute(
            "SELECT hosts['decode-0'] FROM templates WHERE text = 'retract'"
        ).fetchone()
        assert hosts == (5,)
    finally:
        con.close()


def test_templates_equal_in_every_rendering(renderings: dict[str, Path], tmp_path: Path) -> None:
    from .test_rendering_pairs import PAIRED, _ingest

    seen = {}
    for fmt in PAIRED:
        db = tmp_path / f"{fmt}.duckdb"
        _ingest(db, renderings[fmt], fmt)
        con = connect_read_only(db)
        try:
            seen[fmt] = sorted(con.execute(
                "SELECT template, text, count(*) FROM lines GROUP BY ALL").fetchall())  # fmt: skip
        finally:
            con.close()
    first = seen[PAIRED[0]]
    assert len(first) >= 5
    assert all(v == first for v in seen.values())


def test_new_since_a_run_finds_the_new_line(tmp_path: Path) -> None:
    db = tmp_path / "t.duckdb"

    def batch(minute: int) -> list[str]:  # another minute: not the same entries (dedupe)
        return [f"[2026-11-29 07:{minute:02d}:{i % 60:02d}] Decode batch. #running-req: {i}"
                for i in range(200)]  # fmt: skip

    base = batch(0)
    new = batch(1) + [f"[2026-11-29 07:01:{i:02d}] KV receiver saw a stale page {i} on "
                      f"mlx5_{i % 4}" for i in range(12)]  # fmt: skip
    for name, lines in (("before", base), ("after", new)):
        path = tmp_path / f"{name}.log"
        path.write_text("\n".join(lines) + "\n")
        forensics.ingest([str(path)], db, run=name, host="decode-0", fmt="sglang")
    got = templates(db, new_since="before")
    assert [t.text for t in got.templates] == ["KV receiver saw a stale page <n> on <id>"]
    top = got.templates[0]
    assert top.baseline == 0 and top.lines == 12 and top.q is not None and top.q < 0.05
    same = templates(db, compare=("before", "after"))
    assert [t.template for t in same.templates] == [top.template]
    assert templates(db, compare=("after", "before")).templates == []
    stub = as_pattern(db, top.template)
    path = tmp_path / "stub.toml"
    path.write_text(stub)
    pats = load_file(path)  # refused unless its samples pass
    assert pats[0].table == "events" and len(pats[0].samples) == 3
    res = cli("patterns", "--check", str(path))
    assert res.returncode == 0, res.stderr
    listed = cli("templates", "--db", str(db), "--new-since", "before", "--json")
    doc = json.loads(listed.stdout)
    assert doc["templates"][0]["template"] == str(top.template)
    assert re.search(r"1 of \d+ templates new", cli(
        "templates", "--db", str(db), "--new-since", "before").stdout.decode())  # fmt: skip


def test_texts_past_a_sources_cap_keep_their_ids(tmp_path: Path, monkeypatch) -> None:
    from forensics.store import records

    monkeypatch.setattr(records, "MAX_TEXTS", 3)
    monkeypatch.setattr("forensics.store.stage.MAX_TEXTS", 3)
    path = tmp_path / "x.log"
    path.write_text("\n".join(f"shape{'ABCDEFGHIJ'[i]} happened" for i in range(10)) + "\n")
    db = tmp_path / "t.duckdb"
    res = forensics.ingest([str(path)], db, host="h", fmt="cat")
    assert any("7 templates past the first 3" in n for n in res.sources[0].notes)
    con = connect_read_only(db)
    try:
        assert con.execute(
            "SELECT count(DISTINCT template), count(text) FROM lines"
        ).fetchone() == (10, 3)
    finally:
        con.close()


def test_follow_a_template_lists_its_lines(tmp_path: Path) -> None:
    db = _stock(tmp_path)
    con = connect_read_only(db)
    try:
        (tid,) = con.execute("SELECT template FROM templates WHERE text = 'retract'").fetchone()
    finally:
        con.close()
    from forensics.analyses.follow import follow_template

    f = follow_template(db, tid)
    assert len(f.lines) == 5 and all("Retract requests" in ln.message for ln in f.lines)
    assert f.headline() == f"template {tid:016x}: retract — 5 lines"
    res = cli("follow", "--template", f"{tid:016x}", "--db", str(db), "--json")
    assert res.returncode == 0 and len(json.loads(res.stdout)["lines"]) == 5
    both = cli("follow", "abc123456", "--template", f"{tid:016x}", "--db", str(db))
    assert both.returncode != 0 and b"one of them" in both.stderr


def test_the_dashboard_draws_lines_per_host(tmp_path: Path) -> None:
    db = _stock(tmp_path)
    page = forensics.dashboard(db, out=tmp_path / "d.html").path.read_text()
    assert "Templates: lines per host" in page and "retract" in page


def test_host_hours_are_counted_in_words() -> None:
    from forensics.analyses.templates import Templates

    def said(hours: tuple[float, float]) -> str:
        return Templates(["inc"], "run base", hours, [], 9, 9).sentences()[0]

    assert said((1.0, 0.5)).endswith("; 1 host-hour against 0.5)")
    assert said((2.0, 1.0)).endswith("; 2 host-hours against 1)")


def test_every_older_corpus_lines_id_is_pinned_and_each_move_says_why() -> None:
    """Ids are the user's handles: a hash of the text alone. The masker of issue 52 moved
    the ids of the lines whose text it changed (identifiers one <id>, a Rust target taken
    off), each listed with why; every other line keeps its id (tests/data/template-ids.tsv)."""
    pinned = [ln.split("\t") for ln in (DATA.parent / "template-ids.tsv").read_text().splitlines()
              if ln and not ln.startswith("#")]  # fmt: skip
    lines = {}
    for name in ("pd-stack-lines.tsv", "sglang-real-lines.tsv"):
        for no, raw in enumerate((DATA.parent / name).read_text().splitlines(), 1):
            if raw and not raw.startswith("#"):
                lines[(name, no)] = raw.split("\t", 2)[2]
    assert len(pinned) == len(lines) >= 130
    ids = _ids([lines[(name, int(no))] for name, no, *_ in pinned])
    assert [f"{i:016x}" for i in ids] == [row[2] for row in pinned]
    moved = [row for row in pinned if len(row) > 3 and row[3]]
    assert 0 < len(moved) < len(pinned) / 4 and all(row[3].strip() for row in moved)
    assert (
        T.lines(pl.Series(["x"]), pl.Series([None], dtype=pl.String), {})["masker"][0] == T.MASKER
    )


def test_a_baseline_of_an_older_masker_is_said_and_removes_cleanly(
    tmp_path: Path, monkeypatch
) -> None:
    """One run ingested under the masker before issue 52 (mlx5_3 was mlx<n>_<n>), one
    under this one: the NIC line reads as new against it, and `templates --new-since`
    says why; the old run's source removes cleanly and its ids stay the stored ones."""
    from forensics.parsers import masks

    db = tmp_path / "m.duckdb"
    old = tuple(r for r in masks.rules() if r.name != "identifier")
    line = "[2026-11-29 07:0{m}:{s:02d}] KV receiver saw a stale page on mlx5_{n}"
    for name, minute, rules, masker in (("before", 0, old, 1), ("after", 1, None, T.MASKER)):
        if rules is not None:
            monkeypatch.setattr(T, "rules", lambda rules=rules: rules)
        monkeypatch.setattr(T, "MASKER", masker)
        path = tmp_path / f"{name}.log"
        path.write_text("".join(line.format(m=minute, s=i, n=i % 4) + "\n" for i in range(20)))
        forensics.ingest([str(path)], db, run=name, host="decode-0", fmt="sglang")
        monkeypatch.undo()
    got = templates(db, new_since="before")
    assert [t.text for t in got.templates] == ["KV receiver saw a stale page on <id>"]
    assert any("masked by masker 1, these by 2" in n for n in got.notes), got.notes
    from forensics.store import connect_read_only

    con = connect_read_only(db)
    before = con.execute("SELECT DISTINCT text, masker FROM lines WHERE run = 'before'").fetchall()
    # every stored id is its stored text's hash, whichever masker wrote it: an upgrade
    # has nothing to re-derive
    stored = con.execute("SELECT DISTINCT template, text FROM lines ORDER BY text").fetchall()
    con.close()
    assert len(stored) == 2
    texts = pl.Series([t for _, t in stored])
    assert [i for i, _ in stored] == T.template_ids(texts).to_list()
    assert before == [("KV receiver saw a stale page on mlx<n>_<n>", 1)]
    from forensics.writing import remove_source

    remove_source(db, 1)
    assert templates(db).total == 1


def test_prefixes_gated_take_off_what_every_rule_in_turn_does() -> None:
    """The prefix rules a gate skips (parsers/prefixes.py) leave every real line's text as
    trying each rule on every line in turn does, for the masker and for the namer (whose
    `keep` differs), stacked prefixes included."""
    from forensics.parsers import masks, prefixes

    from tests.named_values import load

    rules = [r for r in masks.rules() if r.kind == "prefix"]
    assert any(r.every for r in rules) and not all(r.every for r in rules)
    lines = [row.line for row in load()] + [s["line"] for r in rules for s in r.samples]
    for name in ("pd-stack-lines.tsv", "sglang-real-lines.tsv"):
        lines += [raw.split("\t", 2)[2] for raw in (DATA.parent / name).read_text().splitlines()
                  if raw and not raw.startswith("#")]  # fmt: skip
    stacked = ["[2025-06-21 20:59:57,672] LMCache INFO: hit (a.py:1:lmcache.x)",
               "[2026-01-02 03:04:05 TP0] [scheduler.py:12][WARNING] LMCache ERROR: x"]  # fmt: skip
    text = pl.Series(lines + stacked)
    for keep in (False, True):
        each = text
        for r in rules:
            each = each.str.replace(r.regex, r.keep if keep and r.keep is not None else r.to)
        got = prefixes.strip(text, rules, keep)
        assert got.to_list() == each.to_list()
        assert (got != text).sum() > len(lines) / 4  # the prefixes were there to take off
    assert prefixes.strip(text, rules).to_list()[-2:] == ["hit", "x"]
