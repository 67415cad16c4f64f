"""Digests of a tensor's bytes, computed where the tensor lives.

What is hashed: the tensor's logical bytes in row-major order (a non-contiguous view is
made contiguous on its device first: a device copy, never a copy to the host), as 64-bit
little-endian words, the last one zero-padded; the byte count is part of the digest.

Each word w_i (i its index) goes through a bijection, v = fmix64(w_i + s_i), with
s_i = i * C + K, in two lanes with different constants; a lane's signature is the sum of
its v (mod 2^64). A change of any one word changes its v, and so the sum: any single
changed byte changes `full` (always, not just with high probability). Several changes
cancel only by chance (about 2^-64 per lane). The host receives 8 bytes per lane and
region and finishes with blake2b over (lane sums, byte count).

Two implementations compute the same numbers: a Triton kernel on CUDA (one read of the
buffer, partial sums per block) and a chunked torch one (any device, the reference).
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

import torch

MASK64 = (1 << 64) - 1
# murmur3's fmix64 constants and two lanes' position constants (odd).
F1 = 0xFF51AFD7ED558CCD
F2 = 0xC4CEB9FE1A85EC53
LANES = ((0x9E3779B97F4A7C15, 0x632BE59BD9B4E019), (0xD6E8FEB86659FD93, 0x8CB92BA72F3D8DD7))
CHUNK_WORDS = 1 << 22  # torch path: temporaries of 32 MiB at most
DEFAULT_HEAD = DEFAULT_TAIL = 64 << 10


def _signed(x: int) -> int:
    x &= MASK64
    return x - (1 << 64) if x >= 1 << 63 else x


@dataclass(frozen=True)
class Digest:
    head: str
    tail: str
    full: str
    nbytes: int


def byte_view(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's logical bytes as a flat uint8 tensor on its own device."""
    t = tensor.detach()
    if not t.is_contiguous():
        t = t.contiguous()
    t = t.reshape(-1)
    return t if t.dtype == torch.uint8 else t.view(torch.uint8)


def _words(data: torch.Tensor) -> torch.Tensor:
    """uint8 bytes -> int64 words (zero-padded to a multiple of 8 bytes). A buffer that does
    not start on an 8-byte boundary (an odd slice) is copied on its device first."""
    pad = (-data.numel()) % 8
    if pad:
        data = torch.cat([data, data.new_zeros(pad)])
    elif data.storage_offset() % 8:
        data = data.clone()
    return data.view(torch.int64)


def _shr(x: torch.Tensor, k: int) -> torch.Tensor:
    """Logical right shift of int64 (torch shifts arithmetically)."""
    return (x >> k) & ((1 << (64 - k)) - 1)


def _fmix(x: torch.Tensor) -> torch.Tensor:
    x = x ^ _shr(x, 33)
    x = x * _signed(F1)
    x = x ^ _shr(x, 33)
    x = x * _signed(F2)
    return x ^ _shr(x, 33)


def lane_sums_torch(words: torch.Tensor, first: int = 0) -> torch.Tensor:
    """(2,) int64: the two lane sums of int64 words whose first has index `first`, in
    chunks (the reference)."""
    out = torch.zeros(2, dtype=torch.int64, device=words.device)
    for start in range(0, words.numel(), CHUNK_WORDS):
        w = words[start : start + CHUNK_WORDS]
        idx = torch.arange(first + start, first + start + w.numel(), dtype=torch.int64,
                           device=w.device)  # fmt: skip
        for lane, (c, k) in enumerate(LANES):
            s = idx * _signed(c) + _signed(k)
            out[lane] += _fmix(w + s).sum()
    return out


def region_sums(words: torch.Tensor, head_words: int, tail_first: int) -> torch.Tensor:
    """(3, 2) int64 on the host: lane sums of the words before `head_words`, from
    `tail_first` on, and of all; one pass over the buffer on CUDA."""
    if words.is_cuda:
        from .kernels import region_sums_triton

        return region_sums_triton(words, head_words, tail_first)
    return torch.stack([
        lane_sums_torch(words[:head_words]),
        lane_sums_torch(words[tail_first:], tail_first),
        lane_sums_torch(words),
    ]).cpu()  # fmt: skip


def _finish(sums: list[int], nbytes: int) -> str:
    raw = struct.pack("<qqQ", sums[0], sums[1], nbytes)
    return hashlib.blake2b(raw, digest_size=16).hexdigest()


def digest(
    tensor: torch.Tensor, *, head_bytes: int = DEFAULT_HEAD, tail_bytes: int = DEFAULT_TAIL
) -> Digest:
    """Signatures of the first head_bytes (`head`), the last tail_bytes (`tail`) and all
    (`full`) of the tensor's bytes, computed on its device in one pass; one transfer of 48
    bytes to the host. The regions are counted in whole 8-byte words of the buffer (a
    region's partial word is included), so a change inside a region always changes it."""
    data = byte_view(tensor)
    n = data.numel()
    h, t = min(head_bytes, n), min(tail_bytes, n)
    words = _words(data)
    sums = region_sums(words, -(-h // 8), (n - t) // 8).tolist()
    return Digest(_finish(sums[0], h), _finish(sums[1], t), _finish(sums[2], n), n)


def page_signatures(buffer: torch.Tensor, page_dim: int = 0) -> torch.Tensor:
    """(pages,) int64: lane one of each page's bytes (a page is one index along page_dim).
    8 bytes a page; equal pages at different indexes differ (the page index is mixed in)."""
    b = buffer.detach().movedim(page_dim, 0)
    pages = b.shape[0]
    flat = byte_view(b).reshape(pages, -1)
    if flat.shape[1] % 8:
        flat = torch.nn.functional.pad(flat, (0, 8 - flat.shape[1] % 8))
    words = flat.view(torch.int64)  # (pages, words a page)
    if words.is_cuda:
        from .kernels import page_sums_triton

        return page_sums_triton(words)
    return page_sums_torch(words)


def page_sums_torch(words: torch.Tensor) -> torch.Tensor:
    pages, per = words.shape
    out = torch.empty(pages, dtype=torch.int64, device=words.device)
    c, k = LANES[0]
    step = max(1, CHUNK_WORDS // max(per, 1))
    for p0 in range(0, pages, step):
        w = words[p0 : p0 + step]
        idx = torch.arange(p0 * per, (p0 + w.shape[0]) * per, dtype=torch.int64, device=w.device)
        s = idx.view(w.shape) * _signed(c) + _signed(k)
        out[p0 : p0 + w.shape[0]] = _fmix(w + s).sum(dim=1)
    return out
