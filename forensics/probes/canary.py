"""PageCanary: which pages of chosen buffers changed around a region (a CUDA-graph
replay), against the pages the region was expected to write.

On CUDA a watch is two launches on the region's stream, each over every watched buffer
(a table of base addresses and page counts): before the region, each page's 8-byte
signature; right after it, each page's signature again, compared with the first and with
the expected pages (a device mask, never copied to the host), the changed ones appended
through an atomic counter to a fixed-capacity buffer. Nothing on the step's path waits:
the ids come back by a non-blocking copy on a side stream into pinned memory, and a
background thread writes the lines when the copy has landed (readback.py); `flush()`
writes what is left (an exit hook calls it). A watch entered while its stream captures a
graph is refused. Memory: 8 bytes per page per buffer and per readback slot, never a
clone of the buffers.

Synchronisation: with sync="stream" (default) the canary sees the writes of the watched
region and of anything ordered before it; a kernel still running on another stream may
be missed. sync="device" waits for every stream of the device before the second pass — a
debugging mode, off the targets: it sees such a kernel's finished writes (the writes have
landed where they landed). Neither waits for a NIC's RDMA writes, which CUDA does not
order: a transfer still landing shows as it is. Buffers the table cannot describe (pages
not along dim 0, pages not a whole number of 8-byte words) and CPU buffers take the
reference path: signatures compared on the host, synchronously.

Each record carries `t_us`, the host's wall time when the watch ended (read without
waiting for the device): lines written later, out of step order, keep their watch's time.
"""

from __future__ import annotations

import atexit
import logging
import time
import weakref
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from .digest import page_signatures
from .lines import emit, enabled, pages, record

if TYPE_CHECKING:
    from .readback import Slot


@dataclass
class Watched:
    """What one watch() found, per layer: (changed pages, unexpected pages)."""

    step: int
    expected: list[int]
    layers: dict[int, tuple[list[int], list[int]]]
    lines: list[str]


class PageCanary:
    def __init__(
        self,
        buffers: Mapping[int, torch.Tensor] | Sequence[torch.Tensor],
        page_dim: int = 0,
        every: int = 1,
        limit: int | None = None,
        logger: logging.Logger | bool | None = None,
        sync: str = "stream",
    ) -> None:
        if sync not in ("stream", "device"):
            raise ValueError("sync is 'stream' or 'device'")
        self.buffers = dict(buffers) if isinstance(buffers, Mapping) else dict(enumerate(buffers))
        self.page_dim = page_dim
        self.every = max(1, every)
        self.limit = limit
        self.logger = logger
        self.sync = sync
        self.recorded = 0
        self.last: Watched | None = None
        self.enabled = enabled()  # FORENSICS_PROBES, read once: a watch is on the step's path
        self._device = _Device.of(self)  # None: the reference path

    @property
    def not_read(self) -> int:
        """Steps due but not watched: every readback slot's copy was still running."""
        return self._device.ring.not_read if self._device else 0

    def due(self, step: int) -> bool:
        if not self.enabled or step % self.every:
            return False
        return self.limit is None or self.recorded < self.limit

    def signatures(self) -> dict[int, torch.Tensor]:
        return {layer: page_signatures(b, self.page_dim) for layer, b in self.buffers.items()}

    def flush(self) -> None:
        """Write the lines of every watch whose ids are still on their way (at shutdown:
        the exit hook calls it too)."""
        if self._device is not None:
            self._device.ring.drain()

    def watch(
        self,
        step: int,
        expected_pages: Iterable[int] | torch.Tensor,
        *,
        rids: Sequence[str] | None = None,
        rooms: Sequence[int] | None = None,
        bs: int | None = None,
        mode: str = "replay",
    ) -> AbstractContextManager[None]:
        """Signatures before and after the block; one canary line per buffer and one
        step line (on CUDA written once the ids are back, see the module's doc). A step
        that is not due (every, limit, FORENSICS_PROBES=0 when the canary was made) costs
        nothing."""
        if not self.due(step):
            return _NOTHING
        bs = bs if bs is not None else (len(rids) if rids is not None else None)
        meta = {"step": step, "bs": bs, "mode": mode, "rids": rids, "rooms": rooms}
        if self._device is not None:
            self.recorded += 1  # counted when watched: its lines come later (`limit`)
            return _DeviceWatch(self._device, expected_pages, meta)
        return self._reference(expected_pages, meta)

    @contextmanager
    def _reference(self, expected_pages: Iterable[int] | torch.Tensor,
                   meta: dict) -> Iterator[None]:  # fmt: skip
        """CPU buffers and CUDA buffers the table cannot describe: signatures compared on
        the host, synchronously."""
        before = self.signatures()
        yield
        if self.sync == "device":  # CUDA buffers the table cannot describe come here too
            for d in {b.device for b in self.buffers.values() if b.is_cuda}:
                torch.cuda.synchronize(d)
        after = self.signatures()
        if isinstance(expected_pages, torch.Tensor):
            expected = sorted(int(p) for p in torch.unique(expected_pages).tolist())
        else:
            expected = sorted({int(p) for p in expected_pages})
        names = list(self.buffers)
        diff = torch.cat([after[layer] != before[layer] for layer in names])
        hits = torch.nonzero(diff).flatten().tolist()
        changed: dict[int, list[int]] = {layer: [] for layer in names}
        offset, k = 0, 0
        for layer in names:
            size = after[layer].numel()
            while k < len(hits) and hits[k] < offset + size:
                changed[layer].append(hits[k] - offset)
                k += 1
            offset += size
        changed = {layer: sorted(set(ps)) for layer, ps in changed.items()}
        self._said(meta | {"t_us": time.time_ns() // 1000}, expected, changed, 0)

    def _said(self, meta: dict, expected: list[int], changed: dict[int, list[int]],
              lost: int, counted: bool = False) -> None:  # fmt: skip
        """The watch's lines written: a canary line per buffer, then the step line. The
        lists come sorted and distinct; the expected pages are written out once."""
        exp, exp_text = set(expected), pages(expected, ordered=True)
        layers, lines = {}, []
        for layer, pages_changed in changed.items():
            unexpected = [p for p in pages_changed if p not in exp]
            layers[layer] = (pages_changed, unexpected)
            lines.append(record("canary", {
                "step": meta["step"], "layer": layer, "bs": meta["bs"], "mode": meta["mode"],
                "expected": exp_text, "changed": pages(pages_changed, ordered=True),
                "unexpected": pages(unexpected, ordered=True), "t_us": meta["t_us"],
                "lost": lost or None,
            }))  # fmt: skip
        rids, rooms = meta["rids"], meta["rooms"]
        lines.append(record("step", {
            "step": meta["step"], "bs": meta["bs"],
            "rids": ",".join(rids) if rids is not None else None,
            "rooms": ",".join(str(r) for r in rooms) if rooms is not None else None,
            "t_us": meta["t_us"],
        }))  # fmt: skip
        for line in lines:
            emit(line, self.logger)
        if not counted:
            self.recorded += 1
        self.last = Watched(meta["step"], expected, layers, lines)


_NOTHING = nullcontext()  # a step not due
_ID_DTYPES = (torch.int64, torch.int32)


class _DeviceWatch:
    """One watch on the CUDA path: a plain object, not a generator (a watch's host time is
    what the step pays)."""

    __slots__ = ("device", "expected", "meta", "slot")

    def __init__(self, device: _Device, expected: Iterable[int] | torch.Tensor,
                 meta: dict) -> None:  # fmt: skip
        self.device, self.expected, self.meta = device, expected, meta
        self.slot: Slot | None = None

    def __enter__(self) -> None:
        self.slot = self.device.begin(self.expected, self.meta)

    def __exit__(self, kind: object, *_: object) -> None:
        if self.slot is None:
            return
        if kind is None:
            self.device.end(self.slot, self.meta)
        else:  # a region that raised: nothing to read
            self.device.ring.abandon()


class _Device:
    """The CUDA path of one canary: the buffers' table, the readback ring."""

    def __init__(self, canary: PageCanary, table: torch.Tensor, max_pages: int,
                 sig_words: int, aligned: bool) -> None:  # fmt: skip
        from .readback import Ring

        self.canary = weakref.ref(canary)
        self.base = next(iter(canary.buffers.values()))  # the pointer the table's offsets start at
        self.aligned = aligned  # 16-byte pages and buffers: the kernel loads 16 bytes at once
        self.table = table
        self.max_pages = max_pages
        self.names = list(canary.buffers)
        self.device = table.device
        self.sync = canary.sync
        self.ring = Ring(self.device, sig_words, max_pages, self._lines)
        atexit.register(self.ring.drain)

    @classmethod
    def of(cls, canary: PageCanary) -> _Device | None:
        """The CUDA path where every buffer is on one GPU, its pages along dim 0, each a
        whole number of 8-byte words (else None: the reference path)."""
        bufs = list(canary.buffers.values())
        if not bufs or canary.page_dim != 0 or not all(b.is_cuda for b in bufs):
            return None
        if len({b.device for b in bufs}) != 1:
            return None
        rows, at, origin = [], 0, bufs[0].data_ptr()
        for b in bufs:
            size = b.element_size()
            page_bytes = b[0].numel() * size if b.dim() else 0
            stride_bytes = b.stride(0) * size if b.dim() else 0
            if (b.dim() == 0 or not b[0].is_contiguous() or page_bytes % 8 or stride_bytes % 8
                    or b.data_ptr() % 8):  # fmt: skip
                return None
            rows.append([(b.data_ptr() - origin) // 8, b.shape[0], page_bytes // 8,
                         stride_bytes // 8, at])  # fmt: skip
            at += b.shape[0]
        aligned = all(b.data_ptr() % 16 == 0 for b in bufs) and all(
            r[0] % 2 == 0 and r[2] % 2 == 0 and r[3] % 2 == 0 for r in rows
        )
        table = torch.tensor(rows, dtype=torch.int64, device=bufs[0].device)
        return cls(canary, table, max(r[1] for r in rows), at, aligned)

    def _captured(self, slot: Slot) -> tuple:
        """Every slot's graphs, captured at the first watch (a replay costs the host a few
        µs where a Triton launch and a copy cost tens), all at once so that no capture
        runs while the writer thread waits on a copy; in thread-local mode, so that the
        writer thread's calls never invalidate it. The kernels are compiled outside the
        capture first."""
        from .kernels import stage_pass, watch_pass
        from .readback import IN

        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            stage_pass(slot.staged, slot.out, IN)
            watch_pass(*self._pass_args(slot), after=False)
            watch_pass(*self._pass_args(slot), after=True)
        torch.cuda.current_stream(self.device).wait_stream(side)
        for s in self.ring.slots:
            s.graphs = s.graphs or self._capture(s, side)
        assert slot.graphs is not None
        return slot.graphs

    def _capture(self, slot: Slot, side: torch.cuda.Stream) -> tuple:
        """One slot's graphs: the four numbers in and the first pass; the second pass
        (recording `ready` where torch can); the readback to pinned memory (replayed on
        the side stream)."""
        from .kernels import stage_pass, watch_pass
        from .readback import IN

        run = self._pass_args(slot)
        graphs = [torch.cuda.CUDAGraph() for _ in range(3)]
        with torch.cuda.graph(graphs[0], stream=side, capture_error_mode="thread_local"):
            stage_pass(slot.staged, slot.out, IN)
            watch_pass(*run, after=False)
        with torch.cuda.graph(graphs[1], stream=side, capture_error_mode="thread_local"):
            watch_pass(*run, after=True)
            if self.ring.external:  # a node of the graph: the step's thread records nothing
                assert slot.ready is not None
                slot.ready.record()
        with torch.cuda.graph(graphs[2], stream=side, capture_error_mode="thread_local"):
            slot.host.copy_(slot.out, non_blocking=True)
        return graphs[0], graphs[1], graphs[2]

    def _pass_args(self, slot: Slot) -> tuple:
        """What both passes of a slot are launched with (kernels.watch_pass)."""
        from .readback import CAP

        return (self.base, self.table, self.max_pages, self.aligned, slot.sigs, slot.mask,
                slot.out, CAP)  # fmt: skip

    def begin(self, expected_pages: Iterable[int] | torch.Tensor, meta: dict) -> Slot | None:
        """Before the region: a slot taken, what the first pass reads staged, the first
        pass queued (None: every slot busy, the step is not read)."""
        if torch.cuda.is_current_stream_capturing():
            raise RuntimeError("PageCanary.watch while its stream captures a CUDA graph: "
                               "watch the graph's replay, not its capture")  # fmt: skip
        slot = self.ring.take()
        if slot is None:
            return None
        try:
            self._stage(slot, expected_pages, meta)
            (slot.graphs or self._captured(slot))[0].replay()
        except BaseException:  # the slot stays free, the writer thread is not held off
            self.ring.abandon()
            raise
        return slot

    def _stage(self, slot: Slot, expected_pages: Iterable[int] | torch.Tensor,
               meta: dict) -> None:  # fmt: skip
        """The four numbers the first pass reads, in the slot's pinned buffer: the expected
        ids' count, the watch's number, where the ids are, their width."""
        from .readback import EXPECTED_CAP

        slot.gen = slot.gen % (1 << 30) + 1  # the mask's mark for this watch
        staged = slot.staged_np
        if isinstance(expected_pages, torch.Tensor):
            exp = expected_pages
            if (exp.device != self.device or exp.dtype not in _ID_DTYPES
                    or not exp.is_contiguous()):  # fmt: skip
                exp = exp.to(self.device, torch.int64, non_blocking=True).contiguous()
            n = min(exp.numel(), EXPECTED_CAP)
            # the kernel reads the ids where they are: their address goes in, not they
            staged[:4] = (n, slot.gen, exp.data_ptr(), exp.element_size())
            meta["exp"] = exp  # kept alive until the first pass has read it
        else:
            given = sorted({int(p) for p in expected_pages})
            n = min(len(given), EXPECTED_CAP)
            staged[:4] = (n, slot.gen, 0, 8)
            staged[4 : 4 + n] = given[:n]  # the first pass's graph reads them here
            meta["expected"] = given
        meta["n"] = n

    def end(self, slot: Slot, meta: dict) -> None:
        """Right after the region: the second pass queued, the slot to the writer thread."""
        if self.sync == "device":
            torch.cuda.synchronize(self.device)
        assert slot.graphs is not None
        slot.graphs[1].replay()
        meta["t_us"] = time.time_ns() // 1000
        self.ring.send(slot, meta.pop("n"), meta)

    def _lines(self, meta: dict, count: int, codes: np.ndarray,
               expected: list[int] | np.ndarray) -> None:  # fmt: skip
        """On the writer thread: the codes grouped by buffer and sorted in numpy (a watch's
        lines are Python time the step's thread waits for at the GIL)."""
        from .readback import CAP, decode

        canary = self.canary()
        if canary is None:
            return
        bufs, at, _ = decode(codes)
        order = np.lexsort((at, bufs))
        bufs, at = bufs[order], at[order]
        bounds = np.searchsorted(bufs, np.arange(len(self.names) + 1)).tolist()
        changed = {name: at[bounds[i] : bounds[i + 1]].tolist()
                   for i, name in enumerate(self.names)}  # fmt: skip
        expected = np.unique(np.asarray(expected, dtype=np.int64)).tolist()
        canary._said(meta, expected, changed, max(count - CAP, 0), counted=True)
