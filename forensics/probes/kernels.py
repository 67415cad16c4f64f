"""The Triton kernels behind digest() and page_signatures() on CUDA: one read of the
buffer, lane sums per program added on the device. Same arithmetic as the torch reference
in digest.py (unsigned here: shifts are logical, products wrap)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .digest import F1, F2, POS
from .readback import CODE_BUF_SHIFT

BLOCK = 2048  # words a program reads at a time (bench/gpu/canary.py --sweep)
DIGEST_WARPS = 8
PAGE_BLOCK = 1024
PROGRAMS_PER_SM = 4
STAGES = 3  # blocks a program has in flight (Triton's pipelining of the loads)
_F1 = tl.constexpr(F1)
_F2 = tl.constexpr(F2)
_K0 = tl.constexpr(POS[0])
_K1 = tl.constexpr(POS[1])


@triton.jit
def _fmix32(h):
    h = h ^ (h >> 16)
    h = h * _F1
    h = h ^ (h >> 13)
    h = h * _F2
    return h ^ (h >> 16)


@triton.jit
def _mixed(w, p_lo, p_hi):
    # (v, a·b) of uint64 words whose halves' positions are p_lo, p_hi (uint32)
    a = _fmix32(w.to(tl.uint32) ^ p_lo)
    b = _fmix32((w >> 32).to(tl.uint32) ^ p_hi)
    a64 = a.to(tl.uint64)
    b64 = b.to(tl.uint64)
    return (a64 << 32) | b64, a64 * b64


@triton.jit
def _sums(words_ptr, first, last, step, n, lanes, lane_lo, lane_hi, BLOCK: tl.constexpr):
    # The two lane sums of the blocks first, first + step, … below last (block indexes);
    # only a block that runs past n is masked. A block never straddles a multiple of 2^32
    # words, so a word's position is its block's (a scalar) plus its lane's.
    f0 = tl.zeros([BLOCK], dtype=tl.uint64)
    f1 = tl.zeros([BLOCK], dtype=tl.uint64)
    for b in range(first, last, step):
        start = tl.cast(b, tl.int64) * BLOCK
        offs = start + lanes
        low = start.to(tl.uint32)
        high = (start >> 32).to(tl.uint32)
        p_lo = low * _K0 + high + lane_lo
        p_hi = low * _K1 + high + lane_hi
        if start + BLOCK <= n:
            w = tl.load(words_ptr + offs).to(tl.uint64, bitcast=True)
            v, ab = _mixed(w, p_lo, p_hi)
        else:
            mask = offs < n
            w = tl.load(words_ptr + offs, mask=mask, other=0).to(tl.uint64, bitcast=True)
            v, ab = _mixed(w, p_lo, p_hi)
            v = tl.where(mask, v, 0)
            ab = tl.where(mask, ab, 0)
        f0 += v
        f1 += ab
    return tl.sum(f0, axis=0), tl.sum(f1, axis=0)


@triton.jit
def _full_sums(words_ptr, first, last, step, lanes, lane_lo, lane_hi, BLOCK: tl.constexpr,
               STAGES: tl.constexpr):  # fmt: skip
    # The lane sums of whole blocks first, first + step, … below last: no mask, no branch,
    # so that Triton pipelines the loads (through shared memory, STAGES blocks in flight;
    # 1: none). Loading the next block into registers by hand measured no better.
    f0 = tl.zeros([BLOCK], dtype=tl.uint64)
    f1 = tl.zeros([BLOCK], dtype=tl.uint64)
    for b in tl.range(first, last, step, num_stages=STAGES):
        start = tl.cast(b, tl.int64) * BLOCK
        low = start.to(tl.uint32)
        high = (start >> 32).to(tl.uint32)
        w = tl.load(words_ptr + start + lanes).to(tl.uint64, bitcast=True)
        v, ab = _mixed(w, low * _K0 + high + lane_lo, low * _K1 + high + lane_hi)
        f0 += v
        f1 += ab
    return tl.sum(f0, axis=0), tl.sum(f1, axis=0)


@triton.jit
def _regions_kernel(words_ptr, n, nprog, head_words, tail_first, out_ptr,
                    BLOCK: tl.constexpr, STAGES: tl.constexpr):  # fmt: skip
    # Programs below nprog stride over the whole blocks, unmasked and without a branch
    # (so that Triton pipelines the loads, STAGES blocks in flight); program nprog sums
    # the head and the last, partial block; nprog + 1 the tail, each over its own words
    # (a region's partial blocks bounded by n = its end, the tail's first block shifted
    # by its start). The sums are added to `out` (mod 2^64: any order gives the same).
    pid = tl.program_id(0)
    lanes = tl.arange(0, BLOCK)
    lane_lo = lanes.to(tl.uint32) * _K0
    lane_hi = lanes.to(tl.uint32) * _K1
    if pid < nprog:
        s0, s1 = _full_sums(words_ptr, pid, n // BLOCK, nprog, lanes, lane_lo, lane_hi, BLOCK,
                            STAGES)  # fmt: skip
        tl.atomic_add(out_ptr + 4, s0.to(tl.int64, bitcast=True))
        tl.atomic_add(out_ptr + 5, s1.to(tl.int64, bitcast=True))
    elif pid == nprog:
        s0, s1 = _sums(words_ptr, 0, tl.cdiv(head_words, BLOCK), 1, head_words, lanes,
                       lane_lo, lane_hi, BLOCK)  # fmt: skip
        tl.atomic_add(out_ptr + 0, s0.to(tl.int64, bitcast=True))
        tl.atomic_add(out_ptr + 1, s1.to(tl.int64, bitcast=True))
        s0, s1 = _sums(words_ptr, n // BLOCK, tl.cdiv(n, BLOCK), 1, n, lanes, lane_lo, lane_hi,
                       BLOCK)  # fmt: skip
        tl.atomic_add(out_ptr + 4, s0.to(tl.int64, bitcast=True))
        tl.atomic_add(out_ptr + 5, s1.to(tl.int64, bitcast=True))
    else:
        # the tail's words from tail_first: whole blocks of the buffer, the words before
        # tail_first in its first block masked out by a second pass over that block
        first = tail_first // BLOCK
        s0, s1 = _sums(words_ptr, first, tl.cdiv(n, BLOCK), 1, n, lanes, lane_lo, lane_hi,
                       BLOCK)  # fmt: skip
        c0, c1 = _sums(words_ptr, first, first + 1, 1, tail_first, lanes, lane_lo, lane_hi,
                       BLOCK)  # fmt: skip
        tl.atomic_add(out_ptr + 2, (s0 - c0).to(tl.int64, bitcast=True))
        tl.atomic_add(out_ptr + 3, (s1 - c1).to(tl.int64, bitcast=True))


@triton.jit
def _pages_kernel(words_ptr, per, out_ptr, BLOCK: tl.constexpr):
    # One program a page: no partial sums to add up afterwards (the reference path).
    page = tl.program_id(0)
    base = page.to(tl.int64) * per
    acc = tl.zeros([BLOCK], dtype=tl.uint64)
    for j0 in range(0, per, BLOCK):
        j = j0 + tl.arange(0, BLOCK)
        mask = j < per
        w = tl.load(words_ptr + base + j, mask=mask, other=0).to(tl.uint64, bitcast=True)
        i = base + j
        low = i.to(tl.uint32)
        high = (i >> 32).to(tl.uint32)
        v, _ = _mixed(w, low * _K0 + high, low * _K1 + high)
        acc += tl.where(mask, v, 0)
    tl.store(out_ptr + page, tl.sum(acc, axis=0).to(tl.int64, bitcast=True))


def _u64(x: int) -> int:
    # As signed int64 arguments: Triton types an int >= 2**63 as uint64 and one below as
    # int64; the kernel bitcasts both to uint64.
    x &= (1 << 64) - 1
    return x - (1 << 64) if x >= 1 << 63 else x


def region_sums_device(words: torch.Tensor, head_words: int, tail_first: int) -> torch.Tensor:
    """(6,) int64 on the words' device: head, tail and full lane sums, nothing waited for."""
    n = words.numel()
    sms = torch.cuda.get_device_properties(words.device).multi_processor_count
    nprog = max(1, min(n // BLOCK, sms * PROGRAMS_PER_SM))
    out = torch.zeros(6, dtype=torch.int64, device=words.device)
    _regions_kernel[(nprog + 2,)](words, n, nprog, head_words, tail_first, out, BLOCK=BLOCK,
                                  STAGES=STAGES, num_warps=DIGEST_WARPS)  # fmt: skip
    return out


def region_sums_triton(words: torch.Tensor, head_words: int, tail_first: int) -> torch.Tensor:
    """(3, 2) int64 on the host: 48 bytes come back."""
    return region_sums_device(words, head_words, tail_first).cpu().view(3, 2)


def page_sums_triton(words: torch.Tensor) -> torch.Tensor:
    pages, per = words.shape
    words = words.contiguous()
    out = torch.empty(pages, dtype=torch.int64, device=words.device)
    _pages_kernel[(pages,)](words, per, out, BLOCK=PAGE_BLOCK)
    return out


# -- the canary's two passes: every watched buffer in one launch each ------------------
WATCH_BLOCK = 256  # words a page's loop reads at a time (a 8,448-byte page: 4 loads + 32)
WATCH_WARPS = 2
# a page signature's constants: C odd (a multiply by it is a bijection of a word)
WATCH_C, WATCH_K = 0xD6E8FEB86659FD93, 0x8CB92BA72F3D8DD7


@triton.jit
def _stage_kernel(src_addr, out_ptr, at, BLOCK: tl.constexpr):
    # What a watch hands the passes, read where the host left it: pinned memory, which
    # the device reads directly (no copy node in the first pass's graph: it cost the host
    # as much as the pass). The four numbers, then the ids given as a list (address 0).
    src = src_addr.to(tl.pointer_type(tl.int64))
    lanes = tl.arange(0, BLOCK)
    four = lanes < 4
    tl.store(out_ptr + at + lanes, tl.load(src + lanes, mask=four), mask=four)
    n = tl.load(src)
    if tl.load(src + 2) == 0:
        for j in range(0, n, BLOCK):
            m = j + lanes < n
            tl.store(out_ptr + at + 4 + j + lanes, tl.load(src + 4 + j + lanes, mask=m), mask=m)


def stage_pass(staged: torch.Tensor, out: torch.Tensor, at: int) -> None:
    """The watch's numbers (and ids given on the host) from pinned `staged` into `out`
    from `at`, read by the device where they lie."""
    _stage_kernel[(1,)](staged.data_ptr(), out, at, BLOCK=256, num_warps=4)


@triton.jit
def _mark_expected(out_ptr, mask_ptr, cap, max_pages, n_exp, gen, page):
    # The expected pages marked with the watch's number (no clearing between watches),
    # the ids read where they lie and kept in `out` for the record; the count zeroed.
    src = tl.load(out_ptr + 3 + cap)
    wide = tl.load(out_ptr + 4 + cap) == 8
    ids = out_ptr + 5 + cap
    for e in range(page, n_exp, tl.num_programs(0)):
        if src == 0:
            p = tl.load(ids + e)
        elif wide:
            p = tl.load(src.to(tl.pointer_type(tl.int64)) + e)
        else:
            p = tl.load(src.to(tl.pointer_type(tl.int32)) + e).to(tl.int64)
        tl.store(ids + e, p)
        if (p >= 0) & (p < max_pages):
            tl.store(mask_ptr + p, gen)
    if page == 0:
        tl.store(out_ptr, 0)


@triton.jit
def _watch_kernel(base_ptr, table_ptr, sig_ptr, mask_ptr, out_ptr, cap, max_pages,
                  C, K, AFTER: tl.constexpr, BLOCK: tl.constexpr, SHIFT: tl.constexpr,
                  ALIGNED: tl.constexpr):  # fmt: skip
    # Program (page, buffer). A buffer's row: its first word's offset from base_ptr (one
    # real pointer, so that loads keep its alignment), its pages, words a page, words
    # between pages, its first signature's index. `out`: the count, CAP codes, then what
    # the watch hands over (the passes are replayed from CUDA graphs: nothing is passed):
    # its expected ids' count, its number, where the ids are (an address, 0: in `out`
    # after these four) and their width in bytes, then the ids as the kernel read them.
    # A page's signature: the sum of (w ^ i·K)·C over its words (i the word's index): a
    # bijection of each word, so any one changed word changes it.
    page = tl.program_id(0)
    buf = tl.program_id(1)
    row = table_ptr + buf * 5
    n_exp = tl.load(out_ptr + 1 + cap)
    gen = tl.load(out_ptr + 2 + cap).to(tl.int32)
    if not AFTER:  # noqa: SIM102 - a compile-time branch around a run-time one
        if buf == 0:
            _mark_expected(out_ptr, mask_ptr, cap, max_pages, n_exp, gen, page)
    pages = tl.load(row + 1)
    if page < pages:
        per = tl.load(row + 2)
        first = tl.load(row) + page.to(tl.int64) * tl.load(row + 3)
        at = tl.load(row + 4) + page
        c, k = C.to(tl.uint64, bitcast=True), K.to(tl.uint64, bitcast=True)
        words = base_ptr.to(tl.pointer_type(tl.int64))  # whatever the first buffer's dtype
        lanes = tl.arange(0, BLOCK)
        step = lanes.to(tl.uint64) * k
        acc = tl.zeros([BLOCK], dtype=tl.uint64)
        for j0 in range(0, per, BLOCK):
            offs = first + j0 + lanes
            if ALIGNED:
                offs = tl.max_contiguous(tl.multiple_of(offs, 2), BLOCK)
            m = j0 + lanes < per
            w = tl.load(words + offs, mask=m, other=0).to(tl.uint64, bitcast=True)
            s = (page.to(tl.int64) * per + j0).to(tl.uint64) * k + step
            acc += tl.where(m, (w ^ s) * c, 0)
        sig = tl.sum(acc, axis=0).to(tl.int64, bitcast=True)
        if AFTER:
            if sig != tl.load(sig_ptr + at):
                unexpected = (tl.load(mask_ptr + page) != gen).to(tl.int64)
                slot = tl.atomic_add(out_ptr, 1)
                if slot < cap:
                    code = (buf.to(tl.int64) << SHIFT) | (page.to(tl.int64) << 1) | unexpected
                    tl.store(out_ptr + 1 + slot, code)
        else:
            tl.store(sig_ptr + at, sig)


def watch_pass(base: torch.Tensor, table: torch.Tensor, max_pages: int, aligned: bool,
               sigs: torch.Tensor, mask: torch.Tensor, out: torch.Tensor, cap: int,
               after: bool) -> None:  # fmt: skip
    """One pass over every watched buffer on the current stream: the expected pages
    marked and the page signatures stored (before), or compared with them and the changed
    pages appended to `out` (after). Nothing waits."""
    _watch_kernel[(max_pages, table.shape[0])](
        base, table, sigs, mask, out, cap, max_pages, _u64(WATCH_C), _u64(WATCH_K),
        AFTER=after, BLOCK=WATCH_BLOCK, SHIFT=CODE_BUF_SHIFT, ALIGNED=aligned,
        num_warps=WATCH_WARPS,
    )  # fmt: skip
