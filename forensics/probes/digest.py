"""Digests of a tensor's bytes, computed where the tensor lives.

What is hashed: the tensor's logical bytes in row-major order (a non-contiguous view is
made contiguous on its device first: a device copy, never a copy to the host), as 64-bit
little-endian words, the last one zero-padded; the byte count is part of the digest.

Algorithm 2 (ALG; the records say `alg=2`; records without `alg` are algorithm 1, two
lanes of fmix64, which cost four 64-bit multiplies a word and ran at 0.67 of a plain read
on an H100). Word w_i (i its index) is two 32-bit halves; each half, xored with its
position p = (i mod 2^32)·K + (i >> 32) (32-bit arithmetic, a constant K per half), goes
through murmur3's fmix32, a bijection: a = fmix32(lo ^ p_lo), b = fmix32(hi ^ p_hi). The
first lane is the sum of v_i = a·2^32 + b (mod 2^64), v_i a bijection of w_i: a change of
any one word changes its v, and so the sum — any single changed byte changes `full`
(always, not just with high probability). The second lane is the sum of the 64-bit
products a·b, a nonlinear companion against several changes cancelling (about 2^-64 per
lane by chance). Every multiply is a 32-bit one. The host receives 8 bytes per lane and
region and finishes with blake2b over (lane sums, byte count).

Two implementations compute the same numbers: a Triton kernel on CUDA (one read of the
buffer, the lane sums added on the device) and a chunked torch one (any device, the
reference).
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

import torch

M32 = (1 << 32) - 1
ALG = 2  # the records' `alg`: which arithmetic made the digest (both sides must agree)
# murmur3's fmix32 constants; the two halves' position constants (odd).
F1 = 0x85EBCA6B
F2 = 0xC2B2AE35
POS = (0x9E3779B1, 0x27D4EB2F)
CHUNK_WORDS = 1 << 22  # torch path: temporaries of 32 MiB at most
DEFAULT_HEAD = DEFAULT_TAIL = 64 << 10


@dataclass(frozen=True)
class Digest:
    head: str
    tail: str
    full: str
    nbytes: int
    alg: int = ALG


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


def _fmix32(h: torch.Tensor) -> torch.Tensor:
    """murmur3's fmix32 of int64 tensors holding 32-bit values (products wrap in int64;
    their low 32 bits are the 32-bit product's)."""
    h = h ^ (h >> 16)
    h = (h * F1) & M32
    h = h ^ (h >> 13)
    h = (h * F2) & M32
    return h ^ (h >> 16)


def mixed(words: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(v, a·b) of int64 words at indexes idx (int64, same shape), as int64 bit patterns."""
    lo, hi = words & M32, (words >> 32) & M32
    p_lo = (idx * POS[0] + (idx >> 32)) & M32
    p_hi = (idx * POS[1] + (idx >> 32)) & M32
    a, b = _fmix32(lo ^ p_lo), _fmix32(hi ^ p_hi)
    return (a << 32) | b, a * b


def lane_sums_torch(words: torch.Tensor, first: int = 0) -> torch.Tensor:
    """(2,) int64: the two lane sums of int64 words whose first has index `first`, in
    chunks (the reference)."""
    out = torch.zeros(2, dtype=torch.int64, device=words.device)
    for start in range(0, words.numel(), CHUNK_WORDS):
        w = words[start : start + CHUNK_WORDS]
        idx = torch.arange(first + start, first + start + w.numel(), dtype=torch.int64,
                           device=w.device)  # fmt: skip
        v, ab = mixed(w, idx)
        out[0] += v.sum()
        out[1] += ab.sum()
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
    step = max(1, CHUNK_WORDS // max(per, 1))
    for p0 in range(0, pages, step):
        w = words[p0 : p0 + step]
        idx = torch.arange(p0 * per, (p0 + w.shape[0]) * per, dtype=torch.int64, device=w.device)
        out[p0 : p0 + w.shape[0]] = mixed(w, idx.view(w.shape))[0].sum(dim=1)
    return out
