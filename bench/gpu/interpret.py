"""The probes' Triton kernels run by Triton's interpreter on the CPU: the digest's against
the torch reference, the canary's two passes against pages changed by hand. The arithmetic
checked before a lent GPU is at hand (no GPU, no CI: Triton is a gigabyte).

    pip install triton && TRITON_INTERPRET=1 PYTHONPATH=. python3 bench/gpu/interpret.py
"""

from __future__ import annotations

import sys

import torch

from forensics.probes import kernels
from forensics.probes.digest import lane_sums_torch, page_sums_torch
from forensics.probes.readback import CAP, EXPECTED_CAP, IN, decode


def main() -> int:
    g = torch.Generator().manual_seed(0)
    bad = 0
    for n in (1, 5, 257, 1024, 3000, 9 * 1024, 70_000):
        w = torch.randint(-(2**62), 2**62, (n,), generator=g, dtype=torch.int64)
        out = torch.zeros(6, dtype=torch.int64)
        nprog = max(1, min(n // kernels.BLOCK, 4))  # as region_sums_device, 4 "SMs"
        head, tail = min(n, 100), max(0, n - 300)
        want = torch.stack([lane_sums_torch(w[:head]), lane_sums_torch(w[tail:], tail),
                            lane_sums_torch(w)]).reshape(-1)  # fmt: skip
        ok = True
        for stages in (1, 3):  # without and with Triton's pipelining
            out.zero_()
            kernels._regions_kernel[(nprog + 2,)](w, n, nprog, head, tail, out,
                                                  BLOCK=kernels.BLOCK, STAGES=stages)  # fmt: skip
            ok &= torch.equal(out, want)
        if n >= 16:
            pages = w[: n // 16 * 16].view(-1, 16)
            sig = torch.empty(pages.shape[0], dtype=torch.int64)
            kernels._pages_kernel[(pages.shape[0],)](pages, 16, sig, BLOCK=16)
            ok &= torch.equal(sig, page_sums_torch(pages))
        print(f"{n:>7} words: {'ok' if ok else 'FAIL'}")
        bad += not ok
    return 1 if bad or not watch() else 0


def watch() -> bool:
    """Three buffers of 40 pages, pages 3-5 expected (read where they lie); one byte
    changed in page 3 of the first, 7 of the second, 4 of the third."""
    bufs = [torch.randint(0, 256, (40, 64), dtype=torch.uint8) for _ in range(3)]
    rows, at, origin = [], 0, bufs[0].data_ptr()
    for b in bufs:
        rows.append([(b.data_ptr() - origin) // 8, b.shape[0], 8, 8, at])
        at += b.shape[0]
    table = torch.tensor(rows)
    sigs, mask = torch.zeros(at, dtype=torch.int64), torch.zeros(40, dtype=torch.int32)
    out = torch.zeros(IN + 4 + EXPECTED_CAP, dtype=torch.int64)
    exp = torch.tensor([3, 4, 5])
    staged = torch.tensor([3, 1, exp.data_ptr(), 8] + [0] * EXPECTED_CAP)
    kernels.stage_pass(staged, out, IN)  # the numbers, read where the host left them
    kernels.watch_pass(bufs[0], table, 40, True, sigs, mask, out, CAP, after=False)
    bufs[0][3, 5] += 1
    bufs[1][7, 0] += 1
    bufs[2][4, 63] += 1
    kernels.watch_pass(bufs[0], table, 40, True, sigs, mask, out, CAP, after=True)
    bufs, at, odd = decode(out[1 : 1 + int(out[0])].numpy())
    got = sorted(zip(bufs.tolist(), at.tolist(), odd.tolist(), strict=True))
    ok = got == [(0, 3, False), (1, 7, True), (2, 4, False)]
    listed = torch.tensor([2, 5, 0, 8, 9, 4] + [0] * EXPECTED_CAP)  # ids given on the host
    kernels.stage_pass(listed, out, IN)
    ok &= out[IN : IN + 6].tolist() == [2, 5, 0, 8, 9, 4]
    print(f"canary passes: {got} {'ok' if ok else 'FAIL'}")
    return ok


if __name__ == "__main__":
    sys.exit(main())
