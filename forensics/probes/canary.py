"""PageCanary: which pages of chosen buffers changed around a region (a CUDA-graph
replay), against the pages the region was expected to write.

Memory: 8 bytes per page per buffer for the signatures taken before the region, as many
after, and a byte per page for the comparison; never a clone of the buffers. On CUDA one
program reads one page (a Triton kernel per buffer), so the cost is one read of the
watched buffers before and one after, plus one transfer of the changed page ids.

Synchronisation: signatures are computed on the current stream, ordered after the work
queued there before them. With sync="stream" (default) the canary sees the writes of the
watched region and of anything ordered before it; a kernel still running on another
stream may be missed. sync="device" waits for every stream of the device before the
second signature: slower, and it sees such a kernel's finished writes (it does not make
the race go away: the writes have already landed where they landed). Neither waits for a
NIC's RDMA writes, which CUDA does not order: a transfer still landing shows as it is —
a partial landing is seen, not hidden. Reading the changed pages copies a few bytes to
the host, which waits for the stream.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from .digest import page_signatures
from .lines import emit, enabled, pages, record


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

    def due(self, step: int) -> bool:
        if not enabled() or step % self.every:
            return False
        return self.limit is None or self.recorded < self.limit

    def signatures(self) -> dict[int, torch.Tensor]:
        return {layer: page_signatures(b, self.page_dim) for layer, b in self.buffers.items()}

    @contextmanager
    def watch(
        self,
        step: int,
        expected_pages: Iterable[int] | torch.Tensor,
        *,
        rids: Sequence[str] | None = None,
        rooms: Sequence[int] | None = None,
        bs: int | None = None,
        mode: str = "replay",
    ) -> Iterator[None]:
        """Signatures before and after the block; one canary line per buffer and one
        step line. A step that is not due (every, limit, FORENSICS_PROBES=0) costs nothing."""
        if not self.due(step):
            yield
            return
        before = self.signatures()
        yield
        if self.sync == "device":
            for b in {b.device for b in self.buffers.values() if b.is_cuda}:
                torch.cuda.synchronize(b)
        after = self.signatures()
        if isinstance(expected_pages, torch.Tensor):
            expected = sorted(int(p) for p in torch.unique(expected_pages).tolist())
        else:
            expected = sorted({int(p) for p in expected_pages})
        exp = set(expected)
        bs = bs if bs is not None else (len(rids) if rids is not None else None)
        # One transfer to the host for every layer's changed pages.
        names = list(self.buffers)
        diff = torch.cat([after[layer] != before[layer] for layer in names])
        sizes = [after[layer].numel() for layer in names]
        hits = torch.nonzero(diff).flatten().tolist()
        layers, lines = {}, []
        offset, k = 0, 0
        for layer, size in zip(names, sizes, strict=True):
            changed = []
            while k < len(hits) and hits[k] < offset + size:
                changed.append(hits[k] - offset)
                k += 1
            offset += size
            unexpected = [p for p in changed if p not in exp]
            layers[layer] = (changed, unexpected)
            lines.append(record("canary", {
                "step": step, "layer": layer, "bs": bs, "mode": mode,
                "expected": pages(expected), "changed": pages(changed),
                "unexpected": pages(unexpected),
            }))  # fmt: skip
        lines.append(record("step", {
            "step": step, "bs": bs,
            "rids": ",".join(rids) if rids is not None else None,
            "rooms": ",".join(str(r) for r in rooms) if rooms is not None else None,
        }))  # fmt: skip
        for line in lines:
            emit(line, self.logger)
        self.recorded += 1
        self.last = Watched(step, expected, layers, lines)
