"""The canary's readback on CUDA, off the step's path: each watch takes a slot of a ring
(its device buffers and a pinned host buffer, allocated once), and the changed page ids
come back by a non-blocking copy on a side stream that waits on an event recorded after
the watch's second pass. The host never waits: a slot whose copy has not completed is not
reused (the step is counted as not read), a background thread emits a slot's lines once
its copy's event completes, the next watch emits what has completed, and `flush()` the
rest (an exit hook calls it)."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import torch

SLOTS = 4
CODE_BUF_SHIFT = 40  # a changed page's code: buffer << 40 | page << 1 | unexpected
CAP = 1 << 13  # changed pages a watch can report (over all buffers); more are counted
EXPECTED_CAP = 1 << 13  # expected pages a watch marks and copies back for its record
POLL_S = 0.0005  # how often the writer thread looks at the oldest copy's event
IN = 1 + CAP  # where a slot's `out` holds what the watch hands the kernels


@dataclass
class Slot:
    sigs: torch.Tensor  # device: the before pass's signatures, every buffer's pages
    mask: torch.Tensor  # device int32: the watch's number where a page is expected
    out: torch.Tensor  # device: the count, CAP codes, then (from IN) what a watch hands the
    # kernels: its expected ids' count, its number, their address (0: in `out`), their
    # width, then the ids
    staged: torch.Tensor  # pinned: those four and ids given on the host, on their way in
    host: torch.Tensor  # pinned: what `out` held after the watch
    ready: torch.cuda.Event | None = None  # the second pass done (the copy waits on it)
    done: torch.cuda.Event | None = None  # the copy done
    gen: int = 0  # this slot's watches so far: the number its mask marks pages with
    meta: dict | None = None  # the pending watch's step, names, … (None: free)
    graphs: tuple | None = None  # captured once: (first pass, second pass, readback)
    staged_np: object = None  # `staged` as numpy: four numbers set for a µs, not a launch

    @property
    def expected(self) -> torch.Tensor:
        return self.out[IN + 4 :]


class Ring:
    def __init__(self, device: torch.device, sig_words: int, max_pages: int,
                 emit: Callable[[dict, int, list[int], list[int]], None]) -> None:  # fmt: skip
        self.device = device
        self.side = torch.cuda.Stream(device)
        self.emit = emit  # (meta, count, codes, expected ids) -> the lines said
        self.lock = threading.Lock()
        self.pending: deque[Slot] = deque()
        self.wake = threading.Condition(self.lock)
        self.not_read = 0
        self.slots = [self._slot(sig_words, max_pages) for _ in range(SLOTS)]
        self.thread = threading.Thread(target=self._run, name="forensics-canary", daemon=True)
        self.thread.start()

    def _slot(self, sig_words: int, max_pages: int) -> Slot:
        d = self.device
        size = IN + 4 + EXPECTED_CAP
        slot = Slot(
            torch.empty(max(sig_words, 1), dtype=torch.int64, device=d),
            torch.zeros(max(max_pages, 1), dtype=torch.int32, device=d),
            torch.zeros(size, dtype=torch.int64, device=d),
            torch.zeros(4 + EXPECTED_CAP, dtype=torch.int64, pin_memory=True),
            torch.empty(size, dtype=torch.int64, pin_memory=True),
            torch.cuda.Event(),
            torch.cuda.Event(),
        )
        slot.staged_np = slot.staged.numpy()
        return slot

    def take(self) -> Slot | None:
        """A free slot, or None (every slot's copy still running: the step is not read).
        What has come back meanwhile is emitted first."""
        self.drain(wait=False)
        with self.lock:
            for s in self.slots:
                if s.meta is None:
                    return s
            self.not_read += 1
            return None

    def send(self, slot: Slot, stream: torch.cuda.Stream, n_expected: int, meta: dict) -> None:
        """After the second pass: the count, the codes and the expected ids to the host in
        one copy (the slot's third graph) on the side stream, once `stream` has got
        there; the host goes on."""
        assert slot.ready is not None and slot.done is not None and slot.graphs is not None
        slot.ready.record(stream)
        self.side.wait_event(slot.ready)
        with torch.cuda.stream(self.side):
            slot.graphs[2].replay()
            slot.done.record(self.side)
        with self.lock:
            slot.meta = meta | {"n_expected": min(n_expected, EXPECTED_CAP)}
            self.pending.append(slot)
            self.wake.notify()

    def drain(self, wait: bool) -> None:
        """Emit every pending slot whose copy is done, in watch order (`wait`: every
        pending slot, waiting for each: flush, at shutdown)."""
        while True:
            with self.lock:
                if not self.pending:
                    return
                slot = self.pending[0]
                assert slot.done is not None
                if not wait and not slot.done.query():
                    return
                self.pending.popleft()
            if wait:
                slot.done.synchronize()
            self._emit(slot)

    def _emit(self, slot: Slot) -> None:
        meta = slot.meta
        assert meta is not None
        host = slot.host.numpy()
        count = int(host[0])
        codes = host[1 : 1 + min(count, CAP)].tolist()
        n = meta["n_expected"]
        given = meta.get("expected")
        expected = given if given is not None else host[IN + 4 : IN + 4 + n].tolist()
        try:
            self.emit(meta, count, codes, expected)
        finally:
            with self.lock:
                slot.meta = None

    def _run(self) -> None:
        # Polls the oldest copy's event rather than waiting on it: an event's wait would
        # be a synchronisation torch's sync debug mode may count against the step's path.
        while True:
            with self.lock:
                while not self.pending:
                    self.wake.wait()
            self.drain(wait=False)
            time.sleep(POLL_S)


def decode(code: int) -> tuple[int, int, bool]:
    """(buffer index, page, unexpected) of a changed page's code."""
    return code >> CODE_BUF_SHIFT, (code >> 1) & ((1 << (CODE_BUF_SHIFT - 1)) - 1), bool(code & 1)
