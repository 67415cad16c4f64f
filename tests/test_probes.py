"""The probes (forensics.probes) on the CPU: which signatures a flipped byte changes, the
canary on planted writes, and the round trip through `forensics ingest`."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest
import torch

import forensics
from forensics.probes import PageCanary, digest, record_checksum
from forensics.probes.digest import ALG, POS, lane_sums_torch

DTYPES = [torch.bfloat16, torch.float16, torch.float32, torch.int8, torch.int32, torch.int64,
          torch.uint8, torch.float8_e4m3fn, torch.bool]  # fmt: skip
HEAD = TAIL = 4096


def _random(dtype: torch.dtype, nbytes: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    raw = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, generator=g)
    if dtype == torch.bool:
        return (raw & 1).to(torch.bool)
    return raw.view(dtype)


def _flip(t: torch.Tensor, at: int) -> torch.Tensor:
    out = t.clone()
    b = out.view(torch.uint8)
    b[at] ^= 1
    return out


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_a_flipped_byte_changes_exactly_the_signatures_of_its_region(dtype) -> None:
    size = torch.empty(0, dtype=dtype).element_size()
    n = (5 * HEAD + 3) // size * size  # not a multiple of 8: the last word is padded
    t = _random(dtype, n, seed=n)
    base = digest(t, head_bytes=HEAD, tail_bytes=TAIL)
    assert base.nbytes == n
    for at, changes in [(0, "head"), (HEAD - 1, "head"), (n // 2, None), (n - 1, "tail"),
                        (n - TAIL, "tail")]:  # fmt: skip
        d = digest(_flip(t, at), head_bytes=HEAD, tail_bytes=TAIL)
        assert d.full != base.full, (dtype, at)
        assert (d.head != base.head) == (changes == "head"), (dtype, at)
        assert (d.tail != base.tail) == (changes == "tail"), (dtype, at)


def test_every_single_byte_of_a_small_buffer_changes_full() -> None:
    t = _random(torch.uint8, 203, seed=1)
    base = digest(t).full
    assert len({digest(_flip(t, i)).full for i in range(203)} | {base}) == 204


def test_views_hash_their_logical_bytes() -> None:
    t = _random(torch.float32, 4 * 64 * 48, seed=2).view(64, 48)
    view = t[:, ::2].T  # not contiguous
    assert not view.is_contiguous()
    assert digest(view) == digest(view.contiguous())
    assert digest(view).full != digest(t).full
    assert digest(t[3]).full == digest(t[3].clone()).full


def test_torch_arithmetic_matches_a_plain_python_reference() -> None:
    """Algorithm 2 as digest.py's docstring states it, in plain integers: the torch
    reference (which the GPU kernel is checked against on the lent GPU) computes it, at
    indexes past 2^32 too."""
    words = _random(torch.uint8, 8 * 1000, seed=3).view(torch.int64)
    m, m32 = (1 << 64) - 1, (1 << 32) - 1

    def fmix32(h: int) -> int:
        h ^= h >> 16
        h = (h * 0x85EBCA6B) & m32
        h ^= h >> 13
        h = (h * 0xC2B2AE35) & m32
        return h ^ (h >> 16)

    for first in (0, (1 << 32) - 400):
        v_sum = ab_sum = 0
        for i, w in enumerate((x & m for x in words.tolist()), start=first):
            a = fmix32((w & m32) ^ ((i * POS[0] + (i >> 32)) & m32))
            b = fmix32((w >> 32) ^ ((i * POS[1] + (i >> 32)) & m32))
            v_sum += (a << 32) | b
            ab_sum += a * b
        got = [x & m for x in lane_sums_torch(words, first).tolist()]
        assert got == [v_sum & m, ab_sum & m], first


def test_the_digest_says_its_algorithm() -> None:
    t = torch.arange(100, dtype=torch.int32)
    assert digest(t).alg == ALG == 2
    assert f"alg={ALG}" in record_checksum("src", 1, t, logger=False)


def test_record_checksum_line_and_switch(monkeypatch, caplog) -> None:
    t = torch.arange(100, dtype=torch.int32)
    with caplog.at_level(logging.INFO, logger="forensics.probes"):
        line = record_checksum("src", 7301934425522180813, t, rid="r1", buf="kv", layer=3, tp=0)
    assert caplog.messages == [line]
    d = digest(t)
    assert line == (
        f"forensics:checksum side=src room=7301934425522180813 rid=r1 buf=kv layer=3 tp=0 "
        f"dtype=int32 nbytes=400 head={d.head} tail={d.tail} full={d.full} alg=2"
    )
    monkeypatch.setenv("FORENSICS_PROBES", "0")
    assert record_checksum("dst", 1, t, logger=False) is None
    with pytest.raises(ValueError):
        record_checksum("up", 1, t)


def test_canary_finds_exactly_the_planted_pages() -> None:
    g = torch.Generator().manual_seed(4)
    layers = {0: torch.randn(512, 64, 8, generator=g), 30: torch.randn(512, 64, 8, generator=g)}
    canary = PageCanary(layers, logger=False)
    expected = torch.tensor([10, 10, 11, 200])  # like out_cache_loc // page_size
    with canary.watch(1812, expected, rids=["a", "b"], rooms=[1, 2]):
        layers[0][[10, 11]] += 1.0  # what the step should write
        layers[0][[300, 301, 302, 17]] *= -1.0  # aliasing writes
        layers[30][200] += 1.0
        layers[30][5, 3, 1] = 42.0  # one element of one page
    w = canary.last
    assert w is not None and w.expected == [10, 11, 200]
    assert w.layers[0] == ([10, 11, 17, 300, 301, 302], [17, 300, 301, 302])
    assert w.layers[30] == ([5, 200], [5])
    head, t_us = w.lines[0].rsplit(" t_us=", 1)
    assert head.endswith("expected=[10-11,200] changed=[10-11,17,300-302] unexpected=[17,300-302]")
    assert abs(int(t_us) - time.time_ns() // 1000) < 60_000_000  # the host's wall time, µs
    assert w.lines[-1] == f"forensics:step step=1812 bs=2 rids=a,b rooms=1,2 t_us={t_us}"


def test_canary_page_dim_sampling_and_switch(monkeypatch) -> None:
    buf = torch.zeros(4, 100)  # pages along dim 1
    canary = PageCanary([buf], page_dim=1, every=2, limit=2, logger=False)
    seen = []
    for step in range(8):
        with canary.watch(step, []):
            buf[:, step] = step + 1
        seen.append(canary.recorded)
    assert seen == [1, 1, 2, 2, 2, 2, 2, 2]  # steps 0 and 2, then the limit
    assert canary.last is not None and canary.last.layers[0] == ([2], [2])
    monkeypatch.setenv("FORENSICS_PROBES", "0")
    quiet = PageCanary([buf], logger=False)
    with quiet.watch(0, []):
        buf += 1
    assert quiet.last is None


def _log_to(path: Path, host_prefix: str) -> logging.Logger:
    logger = logging.getLogger(f"probe-test-{path.name}")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    h = logging.FileHandler(path)
    h.setFormatter(
        logging.Formatter(f"[%(asctime)s {host_prefix}] %(message)s", "%Y-%m-%d %H:%M:%S")
    )
    logger.addHandler(h)
    return logger


def test_round_trip_through_ingest(tmp_path: Path, db: Path) -> None:
    pre, dec = tmp_path / "prefill-0.log", tmp_path / "decode-0.log"
    lp, ld = _log_to(pre, "TP0"), _log_to(dec, "TP0")
    kv = {room: _random(torch.bfloat16, 3 * HEAD * 2, seed=room) for room in (1, 2, 3, 4)}
    common = {"buf": "index_k", "layer": "all", "head_bytes": HEAD, "tail_bytes": TAIL}
    for room, t in kv.items():
        record_checksum("src", room, t, rid=f"r{room}", logger=lp, **common)
    record_checksum("dst", 1, kv[1], rid="r1", logger=ld, **common)
    last = kv[2].numel() * 2 - 1
    record_checksum("dst", 2, _flip(kv[2], last), rid="r2", logger=ld, **common)  # tail late
    record_checksum("dst", 3, kv[4], rid="r3", logger=ld, **common)  # room 4's bytes: stale
    layers = [torch.zeros(64, 16), torch.zeros(64, 16)]
    canary = PageCanary(layers, logger=ld)
    with canary.watch(9, [3], rids=["r1", "r2"], rooms=[1, 2]):
        layers[1][[3, 40, 41]] = 1.0
    for lg in (lp, ld):
        for h in lg.handlers:
            h.close()
    forensics.ingest([str(pre), str(dec)], db)
    _, rows = forensics.query_rows("SELECT room, verdict, stale_of FROM rooms ORDER BY room", db)
    assert rows == [(1, "match", None), (2, "partial", None), (3, "stale", 4),
                    (4, "missing_dst", None)]  # fmt: skip
    _, canary_rows = forensics.query_rows(
        "SELECT step, layer, n_changed, unexpected FROM canary ORDER BY layer", db
    )
    assert canary_rows == [(9, 0, 0, []), (9, 1, 3, [40, 41])]
    _, writes = forensics.query_rows("SELECT step, layer, rids FROM canary_writes", db)
    assert writes == [(9, 1, ["r1", "r2"])]


def test_probes_load_with_torch_alone_and_the_api_resolves() -> None:
    import subprocess
    import sys

    code = (
        "import sys, forensics.probes;"
        "bad = {'polars', 'duckdb', 'scipy', 'pyarrow'} & set(sys.modules);"
        "assert not bad, bad"
    )
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
    for name in forensics.__all__:
        assert getattr(forensics, name) is not None
    assert callable(forensics.ingest)


def test_lines_written_late_and_out_of_order_keep_their_watch_time(tmp_path: Path) -> None:
    """The CUDA path writes a watch's lines when its ids are back: later than the watch,
    and steps out of order. Each record's t_us is its watch's wall time, and ingest takes
    it as the row's time; a record without t_us (older probes) keeps its line's time."""
    log = tmp_path / "decode-0.log"
    logger = _log_to(log, "TP0")
    buf = [torch.zeros(8, 4)]
    canary = PageCanary(buf, logger=logger)
    t0 = 1_780_000_000_000_000  # µs: the watches' own times, long before the lines' stamps
    for step in (3, 1, 2):  # as a background thread may write them
        meta = {"step": step, "bs": 1, "mode": "replay", "rids": [f"r{step}"], "rooms": [step],
                "t_us": t0 + step * 10_000}  # fmt: skip
        canary._said(meta, [step], {0: [step, 7]}, 0)
    logger.info("forensics:canary step=4 layer=0 expected=[4] changed=[4] unexpected=[]")
    for h in logger.handlers:
        h.close()
    db = tmp_path / "c.duckdb"
    forensics.ingest([str(log)], db)
    _, rows = forensics.query_rows("SELECT step, ts_us, unexpected FROM canary ORDER BY ts_us", db)
    assert [r[:2] for r in rows[:3]] == [(1, t0 + 10_000), (2, t0 + 20_000), (3, t0 + 30_000)]
    assert [r[2] for r in rows[:3]] == [[7], [7], [7]]
    assert rows[3][0] == 4 and rows[3][1] > t0 + 10**9  # its line's own time
    _, steps = forensics.query_rows("SELECT step, ts_us FROM steps ORDER BY step", db)
    assert steps == [(1, t0 + 10_000), (2, t0 + 20_000), (3, t0 + 30_000)]


def test_the_cuda_watch_path_never_synchronises(monkeypatch) -> None:
    """The CUDA path of a watch, run on the CPU with its graphs (the two passes) and its
    readback stood in: every torch entry point that waits for the device (nonzero,
    unique, item, tolist, cpu, numpy, synchronize) raises if the step's path calls it.
    The passes run in order around the region; what the first one reads — the expected
    ids' count, the watch's number, where the ids are (a device tensor's own address) —
    is in place; the readback gets the slot. None of it waited for."""
    from forensics.probes import canary as canary_mod
    from forensics.probes.readback import CAP, EXPECTED_CAP, IN, Slot

    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    passes: list[tuple] = []
    inside = [False]

    class Graph:
        def __init__(self, after: bool) -> None:
            self.after = after

        def replay(self) -> None:  # what the pass will read (looked at here, not there)
            was, inside[0] = inside[0], False
            four = [int(x) for x in slot.staged_np[:4]]
            listed = slot.staged[4 : 4 + four[0]].tolist() if four[2] == 0 else None
            passes.append((self.after, *four, listed))
            inside[0] = was

    size = IN + 4 + EXPECTED_CAP
    slot = Slot(torch.zeros(16, dtype=torch.int64), torch.zeros(8, dtype=torch.int32),
                torch.zeros(size, dtype=torch.int64), torch.zeros(4 + EXPECTED_CAP, dtype=torch.int64),
                torch.zeros(size, dtype=torch.int64), graphs=(Graph(False), Graph(True), None))  # fmt: skip
    slot.staged_np = slot.staged.numpy()
    assert size == 1 + CAP + 4 + EXPECTED_CAP
    sent: list[tuple] = []

    class Ring:
        not_read = 0

        def take(self) -> Slot:
            return slot

        def send(self, s, n, meta) -> None:
            sent.append((n, meta["step"]))

    dev = canary_mod._Device.__new__(canary_mod._Device)
    dev.max_pages, dev.device, dev.sync, dev.ring = 8, torch.device("cpu"), "stream", Ring()

    def waits(*_a, **_k):
        raise AssertionError("a synchronising call on the step's path")

    real = {n: getattr(torch.Tensor, n) for n in ("item", "tolist", "cpu", "numpy")}

    def guarded(name):
        def call(self, *a, **k):
            if inside[0]:
                raise AssertionError(f"{name}() on the step's path")
            return real[name](self, *a, **k)

        return call

    for name in ("nonzero", "unique"):
        monkeypatch.setattr(torch, name, waits)
    for name in real:
        monkeypatch.setattr(torch.Tensor, name, guarded(name))
    monkeypatch.setattr(torch.cuda, "synchronize", waits)
    on_device = torch.tensor([2, 3, 99])
    for expected in (on_device, [3, 2, -1]):
        inside[0] = True
        with canary_mod._DeviceWatch(dev, expected, {"step": 5}):
            assert passes[-1][0] is False  # the first pass ran before the region
        inside[0] = False
        assert passes[-1][0] is True
    monkeypatch.undo()
    # each watch marks its pages with a number of its own (the mask is never cleared); a
    # tensor's ids are read where they lie, a list's where the host staged them
    ptr = on_device.data_ptr()
    assert passes == [(False, 3, 1, ptr, 8, None), (True, 3, 1, ptr, 8, None),
                      (False, 3, 2, 0, 8, [-1, 2, 3]), (True, 3, 2, 0, 8, [-1, 2, 3])]  # fmt: skip
    assert sent == [(3, 5), (3, 5)]


def test_the_writer_thread_holds_off_while_a_watch_is_open(monkeypatch) -> None:
    """A copy landed while the next watch sits between its two passes: the writer thread
    writes that copy's lines only once the watch is closed (its Python would hold the GIL
    the watch's second replay waits for); a region that raised closes it too."""
    import threading
    from collections import deque

    from forensics.probes import readback
    from forensics.probes.readback import IN, Ring, Slot

    class Stub:
        def __getattr__(self, _name):
            return lambda *a, **k: None

    ring = Ring.__new__(Ring)
    ring.lock = threading.Lock()
    reached = threading.Event()

    class Watched(threading.Condition):
        def wait_for(self, predicate, timeout=None):
            reached.set()  # the writer thread has the lines and the lock's condition
            return super().wait_for(predicate, timeout)

    ring.wake = Watched(ring.lock)
    ring.idle = threading.Condition(ring.lock)
    ring.side, ring.pending, ring.open = Stub(), deque(), False
    said: list[int] = []
    ring.emit = lambda meta, count, codes, expected: said.append(meta["step"])
    monkeypatch.setattr(readback, "_wait", lambda event: None)
    monkeypatch.setattr(readback, "FLUSH_S", 60.0)
    size = IN + 4
    slot = Slot(*(torch.zeros(size, dtype=torch.int64) for _ in range(5)),
                ready=Stub(), done=Stub(), graphs=(None, None, Stub()))  # fmt: skip
    slot.meta, slot.host = (
        {"step": 7, "n_expected": 0, "expected": []},
        torch.zeros(size, dtype=torch.int64),
    )
    ring.pending.append(slot)
    ring.slots = [slot, Slot(*(torch.zeros(1) for _ in range(5)))]
    assert ring.take() is ring.slots[1] and ring.open  # the next watch entered
    writer = threading.Thread(target=ring._read, args=(slot,))
    writer.start()
    assert reached.wait(60)
    assert said == []  # the copy is in, the lines wait for the watch
    ring.abandon()  # the watch's region raised
    writer.join(60)
    assert said == [7] and slot.meta is None and not ring.pending and not ring.open


def test_a_watch_that_fails_to_start_frees_its_slot(monkeypatch) -> None:
    """Entering a watch that raises once its slot is taken (its graphs failed to capture)
    gives the slot back: the writer thread is not held off by a watch that never ran."""
    from forensics.probes import canary as canary_mod
    from forensics.probes.readback import EXPECTED_CAP, IN, Slot

    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    size = IN + 4 + EXPECTED_CAP
    slot = Slot(*(torch.zeros(size, dtype=torch.int64) for _ in range(5)))
    slot.staged_np = slot.staged.numpy()
    calls: list[str] = []

    class Ring:
        def take(self) -> Slot:
            calls.append("take")
            return slot

        def abandon(self) -> None:
            calls.append("abandon")

    def broken(_slot):
        raise RuntimeError("capture failed")

    dev = canary_mod._Device.__new__(canary_mod._Device)
    dev.device, dev.ring, dev._captured = torch.device("cpu"), Ring(), broken
    with (pytest.raises(RuntimeError, match="capture failed"),
          canary_mod._DeviceWatch(dev, [1, 2], {"step": 1})):  # fmt: skip
        calls.append("region")
    assert calls == ["take", "abandon"]


def test_the_writer_threads_lines_from_the_codes() -> None:
    """What the CUDA path's writer thread makes of a slot: the codes (buffer, page,
    unexpected bit) in the order the kernel's atomics left them, grouped by buffer and
    sorted; the expected ids deduplicated; more codes than the buffer holds said as lost."""
    import numpy as np

    from forensics.probes import canary as canary_mod
    from forensics.probes.readback import CAP, CODE_BUF_SHIFT

    can = PageCanary([torch.zeros(4, 2)], logger=False)
    dev = canary_mod._Device.__new__(canary_mod._Device)
    dev.canary, dev.names = (lambda: can), [10, 20, 30]

    def code(buf: int, page: int, unexpected: bool) -> int:
        return buf << CODE_BUF_SHIFT | page << 1 | int(unexpected)

    codes = np.array([code(2, 9, True), code(0, 5, False), code(2, 1, False), code(0, 4, False),
                      code(0, 700, True)], dtype=np.int64)  # fmt: skip
    meta = {"step": 7, "bs": 2, "mode": "replay", "rids": ["a", "b"], "rooms": None, "t_us": 5}
    dev._lines(meta, CAP + 3, codes, np.array([5, 4, 4, 1, 1], dtype=np.int64))
    got = can.last
    assert got is not None and got.expected == [1, 4, 5]
    assert got.layers == {10: ([4, 5, 700], [700]), 20: ([], []), 30: ([1, 9], [9])}
    assert got.lines[0] == ("forensics:canary step=7 layer=10 bs=2 mode=replay expected=[1,4-5] "
                            "changed=[4-5,700] unexpected=[700] t_us=5 lost=3")  # fmt: skip
    assert got.lines[-1] == "forensics:step step=7 bs=2 rids=a,b t_us=5"
