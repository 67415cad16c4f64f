"""Probes for an SGLang PD fork: the checksum and canary records `forensics ingest` reads.

    from forensics.probes import record_checksum, PageCanary
    record_checksum("src", req.bootstrap_room, kv_bytes, rid=req.rid, buf="index_k")
    canary = PageCanary([index_k[l] for l in (0, 30, 60)], page_dim=0, every=1)
    with canary.watch(step, out_cache_loc // page_size, rids=rids):
        graph.replay()

Needs torch (extra `pd-forensics[probes]`); imports neither polars nor DuckDB. Set
FORENSICS_PROBES=0 to turn every probe into a no-op. docs/instrumenting-sglang.md says
where the calls go.
"""

from __future__ import annotations

import logging

import torch

from .canary import PageCanary, Watched
from .digest import DEFAULT_HEAD, DEFAULT_TAIL, Digest, digest, page_signatures
from .lines import ENV, LOGGER, emit, enabled, record


def record_checksum(
    side: str,
    room: int,
    tensor: torch.Tensor,
    *,
    rid: str | None = None,
    logger: logging.Logger | bool | None = None,
    head_bytes: int = DEFAULT_HEAD,
    tail_bytes: int = DEFAULT_TAIL,
    **fields: object,
) -> str | None:
    """Digest `tensor` on its device and emit one `forensics:checksum` line through
    logging (logger "forensics.probes" unless one is given; False: only return it).
    Extra fields (buf, layer, tp, …) are written as given. None when disabled."""
    if side not in ("src", "dst"):
        raise ValueError("side is 'src' (prefill, sending) or 'dst' (decode, received)")
    if not enabled():
        return None
    d = digest(tensor, head_bytes=head_bytes, tail_bytes=tail_bytes)
    line = record("checksum", {
        "side": side, "room": int(room), "rid": rid, **fields,
        "dtype": str(tensor.dtype).removeprefix("torch."), "nbytes": d.nbytes,
        "head": d.head, "tail": d.tail, "full": d.full, "alg": d.alg,
    })  # fmt: skip
    emit(line, logger)
    return line


__all__ = [
    "ENV",
    "LOGGER",
    "Digest",
    "PageCanary",
    "Watched",
    "digest",
    "page_signatures",
    "record_checksum",
]
