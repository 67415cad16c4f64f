"""The Triton kernels behind digest() and page_signatures() on CUDA: one read of the
buffer, lane sums per block, summed by torch. Same arithmetic as the torch reference in
digest.py (uint64 here, so shifts are logical and products wrap)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .digest import F1, F2, LANES

BLOCK = 4096
_F1 = tl.constexpr(F1)
_F2 = tl.constexpr(F2)


@triton.jit
def _fmix(x):
    x = x ^ (x >> 33)
    x = x * _F1
    x = x ^ (x >> 33)
    x = x * _F2
    return x ^ (x >> 33)


@triton.jit
def _lanes_kernel(words_ptr, n, out_ptr, C0, K0, C1, K1, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    w = tl.load(words_ptr + offs, mask=mask, other=0).to(tl.uint64, bitcast=True)
    i = offs.to(tl.uint64)
    c0, k0 = C0.to(tl.uint64, bitcast=True), K0.to(tl.uint64, bitcast=True)
    c1, k1 = C1.to(tl.uint64, bitcast=True), K1.to(tl.uint64, bitcast=True)
    v0 = tl.where(mask, _fmix(w + (i * c0 + k0)), 0)
    v1 = tl.where(mask, _fmix(w + (i * c1 + k1)), 0)
    tl.store(out_ptr + pid * 2, tl.sum(v0, axis=0).to(tl.int64, bitcast=True))
    tl.store(out_ptr + pid * 2 + 1, tl.sum(v1, axis=0).to(tl.int64, bitcast=True))


@triton.jit
def _pages_kernel(words_ptr, per, out_ptr, blocks, C0, K0, BLOCK: tl.constexpr):
    page = tl.program_id(0)
    blk = tl.program_id(1)
    j = blk.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = j < per
    base = page.to(tl.int64) * per
    w = tl.load(words_ptr + base + j, mask=mask, other=0).to(tl.uint64, bitcast=True)
    i = (base + j).to(tl.uint64)
    c0, k0 = C0.to(tl.uint64, bitcast=True), K0.to(tl.uint64, bitcast=True)
    v = tl.where(mask, _fmix(w + (i * c0 + k0)), 0)
    tl.store(out_ptr + page * blocks + blk, tl.sum(v, axis=0).to(tl.int64, bitcast=True))


def _u64(x: int) -> int:
    # As signed int64 arguments: Triton types an int >= 2**63 as uint64 and one below as
    # int64; the kernel bitcasts both to uint64.
    x &= (1 << 64) - 1
    return x - (1 << 64) if x >= 1 << 63 else x


def lane_sums_triton(words: torch.Tensor) -> torch.Tensor:
    n = words.numel()
    blocks = max(1, triton.cdiv(n, BLOCK))
    partial = torch.empty(blocks * 2, dtype=torch.int64, device=words.device)
    (c0, k0), (c1, k1) = LANES
    _lanes_kernel[(blocks,)](words, n, partial, _u64(c0), _u64(k0), _u64(c1), _u64(k1),
                             BLOCK=BLOCK)  # fmt: skip
    return partial.view(blocks, 2).sum(dim=0)


def page_sums_triton(words: torch.Tensor) -> torch.Tensor:
    pages, per = words.shape
    words = words.contiguous()
    blocks = max(1, triton.cdiv(per, BLOCK))
    partial = torch.empty(pages * blocks, dtype=torch.int64, device=words.device)
    c0, k0 = LANES[0]
    _pages_kernel[(pages, blocks)](words, per, partial, blocks, _u64(c0), _u64(k0), BLOCK=BLOCK)
    return partial.view(pages, blocks).sum(dim=1)
