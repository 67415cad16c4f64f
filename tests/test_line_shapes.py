"""The 2026 stack's line shapes read as structure (issue 52), on public lines: a transfer
failure whose exception is a bare transport code, NIXL's room-scoped transport error, the
rank tag of SGLang's prefix as columns, and a column added after a catalog's shards were
written."""

from __future__ import annotations

from pathlib import Path

import forensics
from forensics.store import connect_read_only

# ai-dynamo/nixl#1983 (SGLang 0.5 prefill, UCX SRD over EFA, 2026-07)
NIXL_1983 = """\
[2026-07-21 08:04:41 TP1 EP1] NIXL transport error for room 6555093254675405189: NIXL_ERR_REMOTE_DISCONNECT
[2026-07-21 08:04:41 TP7 EP7] Prefill transfer failed for request rank=7 req.rid='a04107cc-ff53-49ba-b428-03eb77df5cd5' req.bootstrap_room=6555093254675405189 with exception NIXL_ERR_REMOTE_DISCONNECT
E0721 08:06:26.781179    4330 nixl_agent.cpp:866] createXferReq: metadata for remote agent 'def7d2f1-d482-4cd2-b6de-f238da5a9c70' not found
[2026-07-21 08:04:41 TP0 EP0] Prefill batch, #new-seq: 1, #new-token: 64, #cached-token: 10048, token usage: 0.00, #running-req: 0, #queue-req: 0
"""
# sgl-project/sglang#30609 (nightly 2026-07, DSA prefill context parallel): the newer tag
ATTN_CP = "[2026-07-09 10:21:07 ATTN_CP7 TP7 EP7] Load weight end. elapsed=38.71 s\n"


def _ingest(tmp: Path, text: str) -> Path:
    log = tmp / "prefill-0.log"
    log.write_text(text, encoding="utf-8")
    db = tmp / "db.duckdb"
    forensics.ingest([str(log)], db, host="prefill-0")
    return db


def test_a_bare_transport_code_is_a_transfer_failure_with_its_code(tmp_path: Path) -> None:
    con = connect_read_only(_ingest(tmp_path, NIXL_1983))
    rows = con.execute("""SELECT pattern, rank, rid, room, reason_code, reason, tp, ep
                          FROM transfers ORDER BY entry_no""").fetchall()
    assert rows == [
        ("nixl_transport_error", None, None, 6555093254675405189,
         "NIXL_ERR_REMOTE_DISCONNECT", "NIXL transport error", 1, 1),
        ("transfer_failed", 7, "a04107cc-ff53-49ba-b428-03eb77df5cd5", 6555093254675405189,
         "NIXL_ERR_REMOTE_DISCONNECT", None, 7, 7),
    ]  # fmt: skip


def test_the_rank_tag_is_columns_on_every_row_of_a_prefixed_line(tmp_path: Path) -> None:
    db = _ingest(tmp_path, NIXL_1983 + ATTN_CP)
    con = connect_read_only(db)
    assert con.execute("SELECT tp, ep, dp FROM batches").fetchall() == [(0, 0, None)]
    lines = con.execute("""SELECT text, tp, ep, attn_cp, named FROM lines
                           ORDER BY entry_no""").fetchall()  # fmt: skip
    glog, attn = lines[2], lines[4]
    assert glog[1:4] == (None, None, None)  # glog's prefix states no rank tag
    assert glog[0] == "createXferReq: metadata for remote agent '<str>' not found"
    assert glog[4] == {"agent": "def7d2f1-d482-4cd2-b6de-f238da5a9c70"}
    assert attn[0] == "Load weight end. elapsed=<n> s" and attn[1:4] == (7, 7, 7)


def test_a_column_declared_after_the_shards_were_written_reads_null(
    tmp_path: Path, monkeypatch
) -> None:
    import dataclasses

    from forensics.parsers import tables

    db = _ingest(tmp_path, NIXL_1983)
    later = tables.C("added_later", "VARCHAR", "a column no shard has")
    t = tables.SHARDED["transfers"]
    monkeypatch.setitem(tables.SHARDED, "transfers",
                        dataclasses.replace(t, columns=(*t.columns, later)))  # fmt: skip
    con = connect_read_only(db)
    assert con.execute("SELECT count(*), count(added_later) FROM transfers").fetchall() == [(2, 0)]


# torch's watchdog, three wordings (hiyouga/LlamaFactory#7396; lancedb/lance-deeplearning-
# recipes' distributed-training README, torch 2.7; sgl-project/sglang#1693)
WATCHDOG = """\
[80746] [rank0]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=466119168, NumelOut=466119168, Timeout(ms)=600000) ran for 600060 milliseconds before timing out.
[rank0]:[E709 17:05:38.162814866 ProcessGroupNCCL.cpp:2271] [PG ID 0 PG GUID 0(default_pg) Rank 0]  failure detected by watchdog at work sequence id: 20585 PG status: last enqueued work: 20589, last completed work: 20584
[rank4]:[E1016 03:31:38.929234295 ProcessGroupNCCL.cpp:1709] [PG 3 Rank 4] Timeout at NCCL work: 9141, last enqueued NCCL work: 9141, last completed NCCL work: 9140.
"""


def test_the_watchdogs_wordings_are_collectives_with_their_sequence_ids(tmp_path: Path) -> None:
    """torch's newer `failure detected by watchdog at work sequence id` was no collective
    timeout at all; each wording is now a row with rank, group and sequence ids."""
    con = connect_read_only(_ingest(tmp_path, WATCHDOG))
    rows = con.execute("""SELECT pattern, state, rank, pg, seq, op, timeout_ms, ran_ms,
                                 last_enqueued, last_completed
                          FROM collectives ORDER BY entry_no""").fetchall()
    assert rows == [
        ("collective_timeout", "timeout", 0, None, 1580, "ALLREDUCE", 600000, 600060, None, None),
        ("collective_failed", "failed", 0, 0, 20585, None, None, None, 20589, 20584),
        ("collective_timeout_at", "timeout", 4, 3, 9141, None, None, None, 9141, 9140),
    ]  # fmt: skip


def test_who_raised_a_traceback_and_the_peer_of_a_dead_session(tmp_path: Path) -> None:
    """`Scheduler hit an exception:` said who raised it only in text (sglang#6133); the
    peer of `remote mooncake session H:P is not alive` (sglang#10560's wording) stayed in
    the reason."""
    text = (
        "[2025-05-08 23:42:50] Scheduler hit an exception: Traceback (most recent call last):\n"
        "[2025-09-17 16:23:13 TP0] Prefill transfer failed for request rank=0 "
        "req.rid='3ce84ffb82764f45b028dd8e6c4beed1' req.bootstrap_room=1655955501905217457 "
        "with exception KVTransferError(bootstrap_room=1655955501905217457): Decode instance "
        "could be dead, remote mooncake session 10.10.11.3:16581 is not alive\n"
    )  # fmt: skip
    con = connect_read_only(_ingest(tmp_path, text))
    assert con.execute("SELECT kind, raised_by FROM events").fetchall() == [
        ("traceback", "Scheduler")]  # fmt: skip
    assert con.execute("SELECT peer, tp FROM transfers").fetchall() == [("10.10.11.3:16581", 0)]


def test_nccls_warn_lines_with_their_source_and_226s_timestamp(tmp_path: Path) -> None:
    """NCCL's WARN lines carry `file:line` after the CUDA device, and NCCL >= 2.26 stamps
    them (`[%F %T] `, NCCL_DEBUG_TIMESTAMP_FORMAT's default): the stamp is the line's time,
    both prefixes come off the template, the bracket is named the CUDA device (debug.cc
    prints cudaDev there, not the rank). The line is NVIDIA/nccl#1710's, stamped."""
    warn = ("node023:10214:10303 [0] transport/net_ib.cc:1909 NCCL WARN NET/IB : Got completion "
            "from peer 10.1.3.201<33057> with status=9 opcode=0 len=0 vendor err 138 (Send) "
            "localGid ::ffff:10.206.1.23 remoteGids::ffff:10.206.1.11")  # fmt: skip
    db = _ingest(tmp_path, f"[2025-06-02 10:11:12] {warn}\n{warn.replace('[0]', '[3]')}\n")
    con = connect_read_only(db)
    got = con.execute("SELECT ts_us, template, named FROM lines ORDER BY entry_no").fetchall()
    con.close()
    assert got[0][0] == 1748859072_000000 and got[0][1] == got[1][1]
    assert got[0][2]["cuda_dev"] == "0" and got[1][2]["cuda_dev"] == "3"
    assert got[0][2]["peer"] == "10.1.3.201<33057>" and got[0][2]["vendor_err"] == "138"
    assert "rank" not in got[0][2]
