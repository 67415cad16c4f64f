"""The probes on a real GPU (not part of CI): prints a table, exits non-zero on failure.

    PYTHONPATH=. python3 bench/gpu/probes.py [--quick]

1. digest() on the GPU (Triton) equals the CPU reference (torch) on random buffers of
   several dtypes; a flipped byte changes the signatures of its region only.
2. digest() throughput in GB/s against a device-to-device copy of the same buffer
   (target: >= 50 % of copy for buffers >= 256 MB).
3. A real race: a CUDA graph writes the expected pages while a kernel on another stream,
   not synchronised with it, writes other pages; the canary must report exactly those as
   unexpected, and nothing on a control run without the side kernel.
4. What the probes cost: a digest per room and the canary per step at DeepSeek-like sizes
   (3 layers of index-K pages), against a stand-in decode step (one read of the KV
   latents of a 64-request batch over 61 layers: the memory floor of a step).
Needs only torch (with Triton) and this repository.
"""

from __future__ import annotations

import argparse
import statistics
import sys

import torch

from forensics.probes import PageCanary, digest, page_signatures
from forensics.probes.digest import byte_view, lane_sums_torch

GB = 1e9
failures: list[str] = []


def check(ok: bool, what: str) -> str:
    if not ok:
        failures.append(what)
    return "ok" if ok else "FAIL"


def timed(fn, reps: int = 20, warm: int = 3) -> float:
    """Median seconds of fn() on the current stream, by CUDA events."""
    for _ in range(warm):
        fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    return statistics.median(times)


def correctness(quick: bool) -> None:
    print("1. correctness against the CPU reference")
    g = torch.Generator(device="cuda").manual_seed(0)
    sizes = [1, 7, 4096, 65_543, 1 << 20, 3 * (1 << 20) + 5] + ([] if quick else [64 << 20])
    for dtype in (torch.uint8, torch.bfloat16, torch.float8_e4m3fn, torch.int32, torch.float32):
        for n in sizes:
            size = torch.empty(0, dtype=dtype).element_size()
            raw = torch.randint(0, 256, (n // size * size or size,), dtype=torch.uint8,
                                device="cuda", generator=g)  # fmt: skip
            t = raw.view(dtype)
            gpu, cpu = digest(t), digest(t.cpu())
            ok = gpu == cpu
            flip = raw.clone()
            flip[flip.numel() // 2] ^= 1
            ok = ok and digest(flip.view(dtype)).full != gpu.full
            print(f"   {dtype!s:24} {raw.numel():>10,} B  gpu == cpu: {check(ok, f'{dtype} {n}')}")
    buf = torch.randint(0, 256, (512, 64, 132), dtype=torch.uint8, device="cuda", generator=g)
    ok = torch.equal(page_signatures(buf).cpu(), page_signatures(buf.cpu()))
    print(f"   page signatures, 512 pages of 8448 B: gpu == cpu: {check(ok, 'pages')}")
    words = byte_view(buf).view(torch.int64)
    ok = torch.equal(lane_sums_torch(words).cpu(), lane_sums_torch(words.cpu()))
    print(f"   torch reference on GPU == on CPU: {check(ok, 'torch reference')}")


def throughput(quick: bool) -> None:
    print("2. digest throughput against a device-to-device copy")
    print(f"   {'buffer':>8} {'copy GB/s':>10} {'digest GB/s':>12} {'ratio':>6}")
    for mb in [256, 1024] if quick else [64, 256, 1024, 4096]:
        n = mb << 20
        src = torch.randint(0, 256, (n,), dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        t_copy = timed(lambda src=src, dst=dst: dst.copy_(src))
        t_dig = timed(lambda src=src: digest(src, head_bytes=0, tail_bytes=0))
        ratio = t_copy / t_dig
        ok = ratio >= 0.5 or mb < 256
        print(f"   {mb:>6} MB {n / t_copy / GB:>10.0f} {n / t_dig / GB:>12.0f} {ratio:>6.2f}"
              f"  {check(ok, f'throughput {mb} MB')}")  # fmt: skip
        del src, dst


def race() -> None:
    print("3. a real race: graph replay + unsynchronised side-stream writes")
    pages, page_bytes = 4096, 8448
    buf = torch.zeros(pages, page_bytes, dtype=torch.uint8, device="cuda")
    expected = torch.tensor([5, 6, 7, 1000, 1001], device="cuda")
    side_pages = torch.tensor([77, 2048, 2049, 4095], device="cuda")
    vals = torch.zeros(len(expected), page_bytes, dtype=torch.uint8, device="cuda")
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):  # capture on a side stream, as CUDA graphs require
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            buf.index_copy_(0, expected, vals)
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    canary = PageCanary([buf], logger=False, sync="device")
    for run, with_side in (("race", True), ("control", False)):
        with canary.watch(1, expected):
            vals.random_(0, 256)
            side.wait_stream(torch.cuda.current_stream())  # after the first signatures
            if with_side:
                with torch.cuda.stream(side):  # no ordering against the replay below
                    buf.index_fill_(0, side_pages, 171)
            graph.replay()
        got = canary.last.layers[0] if canary.last else ([], [])
        want = sorted(side_pages.tolist()) if with_side else []
        ok = got[1] == want and set(expected.tolist()) <= set(got[0])
        print(f"   {run:8} changed {len(got[0]):>3} pages, unexpected {got[1]}: {check(ok, run)}")
        buf.zero_()
        torch.cuda.synchronize()


def cost(quick: bool) -> None:
    print("4. what the probes cost (DeepSeek-like sizes)")
    pages, page_bytes, layers = 8192, 64 * 132, 3  # index-K: 64 tokens x (128 fp8 + scale)
    bufs = [torch.randint(0, 256, (pages, page_bytes), dtype=torch.uint8, device="cuda")
            for _ in range(layers)]  # fmt: skip
    canary = PageCanary(bufs, logger=False)
    expected = torch.arange(0, 64, device="cuda")
    step_n = [0]

    def one_canary() -> None:
        step_n[0] += 1
        with canary.watch(step_n[0], expected):
            pass

    t_canary = timed(one_canary, reps=10)
    room = torch.randint(0, 256, (8192 * 61 * 132,), dtype=torch.uint8, device="cuda")
    t_digest = timed(lambda: digest(room), reps=10)
    # Stand-in step: one read of 64 requests x 4096 tokens x 61 layers of MLA latents
    # (576 bf16): the least memory traffic a decode step of such a batch makes.
    kv = torch.empty(64 * 4096 * 61 * 576 // (1 if not quick else 4), dtype=torch.bfloat16,
                     device="cuda")  # fmt: skip
    t_step = timed(lambda: kv.sum(dtype=torch.float32), reps=10)
    mem = layers * pages * 8 * 2
    print(f"   stand-in decode step (read {kv.numel() * 2 / GB:.1f} GB): {t_step * 1e3:.2f} ms")
    print(f"   canary, {layers} layers x {pages} pages ({layers * pages * page_bytes / GB:.2f} GB),"
          f" per step: {t_canary * 1e3:.3f} ms = {t_canary / t_step:.1%} of the step;"
          f" signature memory {mem / 1e3:.0f} kB")  # fmt: skip
    print(
        f"   digest of one room ({room.numel() / 1e6:.0f} MB of index-K): "
        f"{t_digest * 1e3:.3f} ms = {t_digest / t_step:.1%} of a step"
    )


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    quick = ap.parse_args().quick
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    correctness(quick)
    throughput(quick)
    race()
    cost(quick)
    print("FAILED: " + "; ".join(failures) if failures else "all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
