"""queries/rooms.sql: verdicts per transfer, on the planted incident and by hand."""

from __future__ import annotations

from pathlib import Path

import forensics
from forensics.synthetic.incident import generate


def _rooms(db: Path) -> dict[int, dict]:
    cols, rows = forensics.run_named("rooms", db)
    return {r[cols.index("room")]: dict(zip(cols, r, strict=True)) for r in rows}


def test_demo_rooms_hold_the_planted_truth(tmp_path: Path) -> None:
    res = forensics.demo(tmp_path / "inc")
    truth = generate().truth
    rooms = _rooms(res.ingest.db)
    assert {room: r["verdict"] for room, r in rooms.items()} == truth["verdicts"]
    assert {room: r["stale_of"] for room, r in rooms.items() if r["stale_of"]} == truth["stale_of"]
    ok = next(r for r in rooms.values() if r["verdict"] == "match")
    assert (ok["src_count"], ok["dst_count"], ok["src_host"], ok["dst_host"]) == (
        1,
        1,
        "prefill-0",
        "decode-0",
    )
    assert ok["dst_ts_us"] > ok["src_ts_us"] and ok["rid"]


def _line(i: int, host: str, body: str) -> str:
    return f"2026-11-29T07:00:{i:02d}.000000+0000 {host} python3[1]: forensics:checksum {body}\n"


def test_every_verdict_by_hand(tmp_path: Path, db: Path) -> None:
    p, d = "prefill-0", "decode-0"
    lines = [
        _line(1, p, "side=src room=1 head=a tail=b full=c nbytes=8"),
        _line(2, d, "side=dst room=1 head=a tail=b full=c nbytes=8"),  # match
        _line(3, d, "side=dst room=1 head=a tail=b full=c nbytes=8"),  # identical duplicate
        _line(4, p, "side=src room=2 head=h2 tail=t2"),
        _line(5, d, "side=dst room=2 head=h2 tail=XX"),  # partial
        _line(6, p, "side=src room=3 head=h3"),
        _line(7, d, "side=dst room=3 head=a tail=b full=c"),  # stale: room 1's bytes
        _line(8, p, "side=src room=4 head=h4"),
        _line(9, d, "side=dst room=4 head=zz"),  # mismatch
        _line(10, p, "side=src room=5 head=h5"),  # missing_dst
        _line(11, d, "side=dst room=6 head=h6"),  # missing_src
        _line(12, p, "side=src room=7 head=h7"),
        _line(13, d, "side=dst room=7 head=h7"),
        _line(14, d, "side=dst room=7 head=other"),  # conflict
        _line(15, p, "side=src room=8 head=h8"),
        _line(16, d, "side=dst room=8 full=f8"),  # nothing in common: mismatch
        _line(17, p, "side=src room=9 head=h9 nbytes=8"),
        _line(18, d, "side=dst room=9 head=h9 nbytes=4"),  # nbytes differ: mismatch
        _line(19, p, "side=src room=10 head=h10"),
        _line(20, d, "side=dst room=10 head=h10"),
        _line(21, d, "side=dst room=10 head=h10 tail=t10"),  # conflict: a part only one has
        _line(22, p, "side=src room=11 head=h11 nbytes=8"),
        _line(23, p, "side=src room=11 head=h11 nbytes=9"),  # conflict: nbytes (src side)
        _line(24, d, "side=dst room=11 head=h11 nbytes=8"),
        _line(25, p, "side=src room=12 full=f12"),
        _line(26, p, "side=src room=12 full=f12"),
        _line(27, d, "side=dst room=12 full=f12"),  # identical duplicates without head: match
        _line(28, p, "side=src room=13 head=h13"),  # algorithm 1 (no alg: older probes)
        _line(29, d, "side=dst room=13 head=x13 alg=2"),  # incomparable, not a mismatch
        _line(30, p, "side=src room=14 head=h14 alg=1"),
        _line(31, d, "side=dst room=14 head=h14"),  # alg=1 said or not: match
    ]
    f = tmp_path / "x.log"
    f.write_text("".join(lines))
    forensics.ingest([str(f)], db)
    rooms = _rooms(db)
    verdicts = {room: r["verdict"] for room, r in rooms.items()}
    assert verdicts == {
        1: "match", 2: "partial", 3: "stale", 4: "mismatch", 5: "missing_dst",
        6: "missing_src", 7: "conflict", 8: "mismatch", 9: "mismatch", 10: "conflict",
        11: "conflict", 12: "match", 13: "incomparable", 14: "match",
    }  # fmt: skip
    assert rooms[1]["dst_count"] == 2 and rooms[3]["stale_of"] == 1
    assert all(r["stale_of"] is None for room, r in rooms.items() if room != 3)


def test_sglang_own_kv_checksum_is_a_verdict_without_probes(tmp_path: Path, db: Path) -> None:
    # stock SGLang with --disaggregation-enable-kv-checksum: no checksum records, one room
    # aborted for a mismatch; a room the probes judged keeps the probes' verdict
    log = tmp_path / "decode-0.log"
    log.write_text(
        "[2026-11-29 07:00:01 TP0] Decode transfer failed for request rank=0 "
        "decode_req.req.rid='r7' decode_req.req.bootstrap_room=77 with exception "
        "KVTransferError(bootstrap_room=77): KV checksum mismatch\n"
        "[2026-11-29 07:00:02 TP0] Decode transfer failed for request rank=0 "
        "decode_req.req.rid='r1' decode_req.req.bootstrap_room=1 with exception "
        "KVTransferError(bootstrap_room=1): KV checksum mismatch\n"
    )
    probes = tmp_path / "probes.log"
    probes.write_text(
        _line(1, "prefill-0", "side=src room=1 head=a tail=b full=c nbytes=8")
        + _line(2, "decode-0", "side=dst room=1 head=a tail=b full=c nbytes=8")
    )
    forensics.ingest([str(log), str(probes)], db)
    rooms = _rooms(db)
    sg = rooms[77]
    assert (sg["verdict"], sg["source"], sg["rid"], sg["dst_host"]) == (
        "mismatch", "sglang", "r7", "decode-0")  # fmt: skip
    assert sg["transfer_events"] == 2  # decode's failure line, and its checksum phrase
    assert (rooms[1]["verdict"], rooms[1]["source"]) == ("match", "probes")
    report = forensics.rooms(db)
    assert report.counts == {"default": {"mismatch": 1, "match": 1}}
    assert report.worst[0]["source"] == "sglang"
