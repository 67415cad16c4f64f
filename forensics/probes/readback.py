"""The canary's readback on CUDA, off the step's path: each watch takes a slot of a ring
(its device buffers and a pinned host buffer, allocated once), and the changed page ids
come back by a non-blocking copy on a side stream that waits on an event recorded after
the watch's second pass. The step's thread only replays the two passes and hands the slot
over: the writer thread, whose current stream is the side stream, queues the copy, waits
for it with the GIL released (a blocking event: it sleeps, it does not spin), writes the
lines and frees the slot. A slot whose lines are not written yet is not reused: a watch
that finds every slot busy is counted as not read. `flush()` waits for the rest (an exit
hook calls it)."""

from __future__ import annotations

import ctypes
import inspect
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

SLOTS = 4
CODE_BUF_SHIFT = 40  # a changed page's code: buffer << 40 | page << 1 | unexpected
CAP = 1 << 13  # changed pages a watch can report (over all buffers); more are counted
EXPECTED_CAP = 1 << 13  # expected pages a watch marks and copies back for its record
POLL_S = 0.0005  # under torch's sync debug mode: how often the copy's event is looked at
FLUSH_S = 1.0  # flush: how long to wait for the writer thread between checks that it lives
IN = 1 + CAP  # where a slot's `out` holds what the watch hands the kernels


@dataclass
class Slot:
    sigs: torch.Tensor  # device: the before pass's signatures, every buffer's pages
    mask: torch.Tensor  # device int32: the watch's number where a page is expected
    out: torch.Tensor  # device: the count, CAP codes, then (from IN) what a watch hands the
    # kernels: its expected ids' count, its number, their address (0: in `out`), their
    # width, then the ids
    staged: torch.Tensor  # pinned: those four and ids given on the host, where the first
    # pass's graph reads them (a slot is written again only once its lines are)
    host: torch.Tensor  # pinned: what `out` held after the watch
    ready: torch.cuda.Event | None = None  # the second pass done (the copy waits on it);
    # recorded by the second pass's graph where torch captures external events
    done: torch.cuda.Event | None = None  # the copy done
    gen: int = 0  # this slot's watches so far: the number its mask marks pages with
    meta: dict | None = None  # the pending watch's step, names, … (None: free)
    graphs: tuple | None = None  # captured once: (first pass, second pass, readback)
    staged_np: object = None  # `staged` as numpy: four numbers set for a µs, not a launch


EXTERNAL: bool | None = None  # None: where torch can (external_events); False: the host


def external_events() -> bool:
    """Whether torch can capture an event's record into a CUDA graph as a node of its own
    (torch.cuda.Event(external=True)): then the second pass's graph records `ready`, and
    the step's thread makes no call for it."""
    if EXTERNAL is not None:
        return EXTERNAL
    return "external" in inspect.signature(torch.cuda.Event.__new__).parameters


class Ring:
    def __init__(self, device: torch.device, sig_words: int, max_pages: int,
                 emit: Callable[[dict, int, np.ndarray, list[int] | np.ndarray], None],
                 ) -> None:  # fmt: skip
        self.device = device
        self.side = torch.cuda.Stream(device)
        self.emit = emit  # (meta, count, codes, expected ids) -> the lines said
        self.external = external_events()
        self.lock = threading.Lock()
        self.pending: deque[Slot] = deque()  # handed over, lines not written yet
        self.wake = threading.Condition(self.lock)  # the writer thread: a slot handed over
        self.idle = threading.Condition(self.lock)  # flush: a slot's lines written
        self.not_read = 0
        self.open = False  # a watch between its two passes: the writer thread holds off
        self.slots = [self._slot(sig_words, max_pages) for _ in range(SLOTS)]
        self.thread = threading.Thread(target=self._run, name="forensics-canary", daemon=True)
        self.thread.start()

    def _slot(self, sig_words: int, max_pages: int) -> Slot:
        d = self.device
        size = IN + 4 + EXPECTED_CAP
        ready = (torch.cuda.Event(external=True) if self.external  # type: ignore[call-arg]
                 else torch.cuda.Event())  # fmt: skip
        slot = Slot(
            torch.empty(max(sig_words, 1), dtype=torch.int64, device=d),
            torch.zeros(max(max_pages, 1), dtype=torch.int32, device=d),
            torch.zeros(size, dtype=torch.int64, device=d),
            torch.zeros(4 + EXPECTED_CAP, dtype=torch.int64, pin_memory=True),
            torch.empty(size, dtype=torch.int64, pin_memory=True),
            ready,
            torch.cuda.Event(blocking=True),
        )
        slot.staged_np = slot.staged.numpy()
        return slot

    def take(self) -> Slot | None:
        """A free slot, or None (every slot's lines still on their way: the step is not
        read). Never waits."""
        with self.lock:
            for s in self.slots:
                if s.meta is None:
                    self.open = True
                    return s
            self.not_read += 1
            return None

    def abandon(self) -> None:
        """A watch whose region raised: its slot stays free, the writer thread goes on."""
        with self.lock:
            self.open = False
            self.wake.notify()

    def send(self, slot: Slot, n_expected: int, meta: dict) -> None:
        """After the second pass: the slot to the writer thread (where torch cannot
        capture `ready` into the second pass's graph, it is recorded here first)."""
        if not self.external:
            assert slot.ready is not None
            slot.ready.record(torch.cuda.current_stream(self.device))
        with self.lock:
            slot.meta = meta | {"n_expected": min(n_expected, EXPECTED_CAP)}
            self.pending.append(slot)
            self.open = False
            self.wake.notify()

    def drain(self) -> None:
        """Wait until every handed-over slot's lines are written (flush, at shutdown).
        Should the writer thread be gone, the rest is read here."""
        with self.lock:
            while self.pending and self.thread.is_alive():
                self.idle.wait(FLUSH_S)
            left = list(self.pending)
        for slot in left:
            self._read(slot)

    def _read(self, slot: Slot) -> None:
        """The slot's copy queued on the side stream after its second pass, waited for,
        its lines written, the slot freed."""
        assert slot.ready is not None and slot.done is not None and slot.graphs is not None
        try:
            with torch.cuda.stream(self.side):
                self.side.wait_event(slot.ready)
                slot.graphs[2].replay()
                slot.done.record(self.side)
            _wait(slot.done)
            with self.lock:  # a watch's replays wait for the GIL the lines would hold
                self.wake.wait_for(lambda: not self.open, FLUSH_S)
            self._emit(slot)
        except Exception:  # a bad logger must not stop the readback of later watches
            logging.getLogger(__name__).exception("forensics canary: a watch's lines")
        finally:
            with self.lock:
                slot.meta = None
                if self.pending and self.pending[0] is slot:
                    self.pending.popleft()
                self.idle.notify_all()

    def _emit(self, slot: Slot) -> None:
        meta = slot.meta
        assert meta is not None
        host = slot.host.numpy()
        count = int(host[0])
        codes = host[1 : 1 + min(count, CAP)]  # read before the slot is freed: no copy
        n = meta["n_expected"]
        given = meta.get("expected")
        expected = given if given is not None else host[IN + 4 : IN + 4 + n]
        self.emit(meta, count, codes, expected)

    def _run(self) -> None:
        torch.cuda.set_device(self.device)
        relax_capture_mode()
        while True:
            with self.lock:
                while not self.pending:
                    self.wake.wait()
                slot = self.pending[0]
            self._read(slot)


def relax_capture_mode() -> bool:
    """This thread's CUDA calls allowed while another thread captures a graph in global
    mode (torch's default, SGLang's startup capture): a wait for a copy must not
    invalidate the server's capture. cudaThreadExchangeStreamCaptureMode(relaxed), from
    the CUDA runtime torch loaded (False: none found, the thread keeps the default)."""
    exchange = capture_mode_exchange()
    if exchange is None:
        return False
    mode = ctypes.c_int(2)  # cudaStreamCaptureModeRelaxed
    return exchange(ctypes.byref(mode)) == 0


def capture_mode_exchange() -> Callable | None:
    """cudaThreadExchangeStreamCaptureMode of the CUDA runtime this process has loaded."""
    try:
        with open("/proc/self/maps") as f:
            maps = f.read().splitlines()
    except OSError:
        return None
    path = next((line.split()[-1] for line in maps if "libcudart.so" in line), None)
    try:
        return ctypes.CDLL(path).cudaThreadExchangeStreamCaptureMode if path else None
    except (OSError, AttributeError):
        return None


def _wait(event: torch.cuda.Event) -> None:
    """Until the event has completed, the GIL released (a blocking event sleeps). Under
    torch's sync debug mode the event is polled instead, so that the mode, which is meant
    for the step's path, says nothing of this thread's waits."""
    if torch.cuda.get_sync_debug_mode() == 0:
        event.synchronize()
        return
    while not event.query():
        time.sleep(POLL_S)


def decode(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(buffer index, page, unexpected) of changed pages' codes, each an array."""
    page = (codes >> 1) & ((1 << (CODE_BUF_SHIFT - 1)) - 1)
    return codes >> CODE_BUF_SHIFT, page, (codes & 1).astype(bool)
