"""The digest's Triton kernels run by Triton's interpreter on the CPU, against the torch
reference: the arithmetic checked before a lent GPU is at hand (no GPU, no CI: Triton is a
gigabyte).

    pip install triton && TRITON_INTERPRET=1 PYTHONPATH=. python3 bench/gpu/interpret.py
"""

from __future__ import annotations

import sys

import torch
import triton

from forensics.probes import kernels
from forensics.probes.digest import lane_sums_torch, page_sums_torch


def main() -> int:
    g = torch.Generator().manual_seed(0)
    bad = 0
    for n in (1, 5, 257, 3000, 70_000):
        w = torch.randint(-(2**62), 2**62, (n,), generator=g, dtype=torch.int64)
        out = torch.zeros(6, dtype=torch.int64)
        blocks = triton.cdiv(n, kernels.BLOCK)
        nprog = min(blocks, 4)
        head, tail = min(n, 100), max(0, n - 300)
        kernels._regions_kernel[(nprog,)](w, n, triton.cdiv(blocks, nprog), head, tail, out,
                                          BLOCK=kernels.BLOCK)  # fmt: skip
        want = torch.stack([lane_sums_torch(w[:head]), lane_sums_torch(w[tail:], tail),
                            lane_sums_torch(w)]).reshape(-1)  # fmt: skip
        ok = torch.equal(out, want)
        if n >= 16:
            pages = w[: n // 16 * 16].view(-1, 16)
            sig = torch.empty(pages.shape[0], dtype=torch.int64)
            kernels._pages_kernel[(pages.shape[0],)](pages, 16, sig, BLOCK=16)
            ok &= torch.equal(sig, page_sums_torch(pages))
        print(f"{n:>7} words: {'ok' if ok else 'FAIL'}")
        bad += not ok
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
