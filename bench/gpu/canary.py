"""The page canary and the digest on the lent GPU (issue 55), in one run: exactness against
the buffers' own before/after clones, no synchronisation under torch's sync debug mode,
and what a watch costs against a plain read of the watched bytes.

    PYTHONPATH=. python3 bench/gpu/canary.py [--sweep] [--reps 50]

Timing: every number is the median of `reps` calls, each bracketed by a device
synchronisation (events around the call). A watch's cost is the region with the watch
minus the region alone; the floor is two plain reads (`view(int64).sum()`) of the watched
bytes. Host time: the host's clock in making, entering and leaving the watch, the GPU
work left queued (and, apart, the whole block less the region's own host time). Prints a
table; exits non-zero when a check fails.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time

import torch

from forensics.probes import PageCanary, digest, kernels
from forensics.probes.digest import lane_sums_torch

failures: list[str] = []
PAGE_BYTES = 8448  # DeepSeek's index-K page: 64 tokens × (128 fp8 + scales)
LAYERS = 3


def check(ok: bool, what: str) -> str:
    if not ok:
        failures.append(what)
    return "ok" if ok else "FAIL"


def timed(fn, reps: int, before=None) -> float:
    """Median ms of fn(), each call bracketed by a device synchronisation (`before`, if
    given, runs ahead of each, outside the bracket)."""
    for _ in range(5):
        if before is not None:
            before()
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if before is not None:
            before()
        torch.cuda.synchronize()
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        out.append(a.elapsed_time(b))
    return statistics.median(out)


def host_held(fn, reps: int, before=None) -> float:
    """Median ms the host spends in fn() with the device's work left queued."""
    out = []
    for _ in range(reps):
        if before is not None:
            before()
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1e3)
    torch.cuda.synchronize()
    return statistics.median(out)


def host_in_watch(can: PageCanary, exp: torch.Tensor, region, reps: int) -> float:
    """Median ms the host spends making, entering and leaving a watch (the region's own
    launches between not counted), the writer thread done with the last watch's lines."""
    out = []
    for _ in range(reps):
        can.flush()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        w = can.watch(1, exp)
        w.__enter__()
        t1 = time.perf_counter()
        region()
        t2 = time.perf_counter()
        w.__exit__(None, None, None)
        out.append((time.perf_counter() - t2 + t1 - t0) * 1e3)
    torch.cuda.synchronize()
    return statistics.median(out)


def buffers(total_bytes: int, gen: torch.Generator) -> list[torch.Tensor]:
    pages = total_bytes // (LAYERS * PAGE_BYTES)
    return [torch.randint(0, 256, (pages, PAGE_BYTES), dtype=torch.uint8, device="cuda",
                          generator=gen) for _ in range(LAYERS)]  # fmt: skip


def exactness(gen: torch.Generator) -> None:
    print("1. the pages found, against clones of the buffers")
    bufs = buffers(207_600_000, gen)
    expected = torch.arange(100, 164, device="cuda")
    planted_cases(bufs, expected)
    s = torch.cuda.Stream()
    vals = torch.zeros(len(expected), PAGE_BYTES, dtype=torch.uint8, device="cuda")
    with torch.cuda.stream(s):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            bufs[0].index_copy_(0, expected, vals)
    torch.cuda.synchronize()
    vals.random_(0, 256)
    race(bufs[0], expected, graph)
    can = PageCanary(bufs, logger=False)
    no_sync_under_debug_mode(can, expected, graph)
    capture_refused(can, expected, s)
    capture_beside_the_writer(bufs, expected)
    torch.cuda.synchronize()


def planted_cases(bufs: list[torch.Tensor], expected: torch.Tensor) -> None:
    """Each case's pages, found by the new watch and by today's, against clones."""
    pages = bufs[0].shape[0]
    fresh = PageCanary(bufs, logger=False)
    ref = PageCanary(bufs, logger=False)
    ref._device = None  # today's implementation: signatures compared on the host
    cases = {
        "writes expected + 2 unexpected a layer": lambda: [
            b.index_fill_(
                0,
                torch.cat([expected, torch.tensor([7, pages - 1], device="cuda")]),
                int(torch.randint(0, 256, (1,))),
            )
            for b in bufs
        ],
        "one byte of one page": lambda: bufs[1][pages // 2, 4321].add_(1),
        "nothing": lambda: None,
        "every page of a layer": lambda: bufs[2].add_(1),
    }
    for name, region in cases.items():
        for which, can in (("new", fresh), ("today", ref)):
            before = [b.clone() for b in bufs]
            with can.watch(1, expected):
                region()
            can.flush()
            want = [sorted((b != c).flatten(1).any(1).nonzero().flatten().tolist())
                    for b, c in zip(bufs, before, strict=True)]  # fmt: skip
            got = [can.last.layers[i][0] for i in range(LAYERS)] if can.last else None
            n = sum(map(len, want))
            print(f"   {name:42} {which:5} {n:>5} pages {check(got == want, f'{name} {which}')}")
            del before


def race(buf: torch.Tensor, expected: torch.Tensor, graph: torch.cuda.CUDAGraph) -> None:
    """A second stream racing a replayed graph: its writes are the unexpected pages."""
    side_pages = torch.tensor([77, 2048, 2049, buf.shape[0] - 1], device="cuda")
    side = torch.cuda.Stream()
    can = PageCanary([buf], logger=False, sync="device")
    with can.watch(2, expected):
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            buf.index_fill_(0, side_pages, 171)
        graph.replay()
    can.flush()
    got = can.last.layers[0][1] if can.last else None
    want = sorted(side_pages.tolist())
    print(f"   race (sync=device): unexpected {got}: {check(got == want, 'race')}")


def no_sync_under_debug_mode(can: PageCanary, expected: torch.Tensor,
                             graph: torch.cuda.CUDAGraph) -> None:  # fmt: skip
    """Under torch's sync debug mode "error", three watched replays raise nothing."""
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        ok, why = True, ""
        for step in range(3):
            with can.watch(10 + step, expected):
                graph.replay()
    except RuntimeError as exc:
        ok, why = False, str(exc).splitlines()[0]
    finally:
        torch.cuda.set_sync_debug_mode(0)
    can.flush()
    print(f"   sync debug mode 'error', 3 watched replays: {check(ok, 'sync debug ' + why)} {why}")


def capture_refused(can: PageCanary, expected: torch.Tensor, s: torch.cuda.Stream) -> None:
    refused = False
    with torch.cuda.stream(s):
        try:
            with torch.cuda.graph(torch.cuda.CUDAGraph()):
                try:
                    with can.watch(20, expected):
                        pass
                except RuntimeError as exc:
                    refused = "captures a CUDA graph" in str(exc)
        except Exception:  # an empty capture may complain on its way out
            pass
    print(f"   a watch inside a capture refused: {check(refused, 'capture refusal')}")


def capture_beside_the_writer(bufs: list[torch.Tensor], expected: torch.Tensor) -> None:
    """A server's own graph captured (torch's default, global mode) on the step's thread
    while the writer thread waits on watches' copies, and a fresh canary's first watches
    queued behind a busy GPU (its slots captured while the writer thread waits): neither
    capture is invalidated, every watch is read."""
    from forensics.probes.readback import capture_mode_exchange

    can = PageCanary(bufs, logger=False)
    spin = 100_000_000  # cycles: about 50 ms
    ok, why = True, ""
    try:
        for step in range(3):
            with can.watch(30 + step, expected):
                torch.cuda._sleep(spin)
        g, s = torch.cuda.CUDAGraph(), torch.cuda.Stream()
        with torch.cuda.stream(s), torch.cuda.graph(g):
            bufs[1].index_fill_(0, expected, 3)
            time.sleep(0.2)  # the writer thread reads the queued watches meanwhile
        g.replay()
        can.flush()
    except RuntimeError as exc:
        ok, why = False, str(exc).splitlines()[0]
    torch.cuda.synchronize()
    ok = ok and can.not_read == 0 and can.last is not None and can.last.step == 32
    print(
        f"   captures beside the writer thread (relaxed: {capture_mode_exchange() is not None}): "
        f"{check(ok, 'capture beside the writer ' + why)} {why}"
    )


def costs(gen: torch.Generator, reps: int) -> None:
    print("2. a watch's cost (ms; the region alone subtracted) against two plain reads")
    print("   new, host: the writer thread done with the last watch's lines (flush() ahead of")
    print("   each call); host: making, entering and leaving the watch; host+: the whole block")
    print("   less the region alone's host time (the region's launches beside a watch's);")
    print("   new*, host*: as it comes, its lines written while the next watch runs (unread:")
    print("   of those, the watches that found every slot taken)")
    print(f"   {'size':>9} {'writes':>6} {'read':>7} {'floor':>7} {'today':>7} {'new':>7} "
          f"{'new/floor':>9} {'host':>7} {'host/gpu':>8} {'host+':>7} {'new*':>7} "
          f"{'new*/fl':>7} {'host*':>7} {'unread':>6}")  # fmt: skip
    for total in (50_000_000, 207_600_000, 1_000_000_000):
        bufs = buffers(total, gen)
        pages = bufs[0].shape[0]
        exp = torch.arange(0, 64, device="cuda")
        bad = torch.tensor([pages // 3, pages // 2], device="cuda")
        t_read = timed(lambda bufs=bufs: [b.view(torch.int64).sum() for b in bufs], reps)
        new = PageCanary(bufs, logger=False)
        old = PageCanary(bufs, logger=False)
        old._device = None
        for writes in (False, True):
            tick = [0]

            def region(bufs=bufs, exp=exp, bad=bad, writes=writes, tick=tick) -> None:
                if writes:  # a new value each call: the pages really change
                    tick[0] += 1
                    for b in bufs:
                        b.index_fill_(0, exp, tick[0] % 250)
                        b.index_fill_(0, bad, tick[0] % 250 + 1)

            row = cost_row(new, old, exp, region, reps, f"{total} {writes}")
            floor = 2 * t_read
            t_new, held, held_all, t_busy, busy, unread, t_old = row
            print(f"   {total / 1e6:>6.1f} MB {writes!s:>6} {t_read:>7.3f} {floor:>7.3f} "
                  f"{t_old:>7.3f} {t_new:>7.3f} {t_new / floor:>9.2f} {held:>7.3f} "
                  f"{held / max(t_new, 1e-9):>8.2f} {held_all:>7.3f} {t_busy:>7.3f} "
                  f"{t_busy / floor:>7.2f} {busy:>7.3f} {unread:>6}")  # fmt: skip
        del bufs
        torch.cuda.empty_cache()


def cost_row(new: PageCanary, old: PageCanary, exp: torch.Tensor, region, reps: int,
             what: str) -> tuple:  # fmt: skip
    """One row's times (ms), the region alone subtracted: the new watch with the writer
    thread done, its host time (making, entering, leaving) and the whole block's less the
    region's, the new watch as it comes and its host time, the watches of those that
    found every slot taken, today's watch."""

    def with_watch(can) -> None:
        with can.watch(1, exp):
            region()

    alone, alone_host = timed(region, reps), host_held(region, reps)
    skipped = new.not_read
    watched = lambda: with_watch(new)  # noqa: E731
    t_new = timed(watched, reps, before=new.flush) - alone
    held = host_in_watch(new, exp, region, reps)
    held_all = host_held(watched, reps, before=new.flush) - alone_host
    # a step not read costs nothing: every timed watch must have been one
    check(new.not_read == skipped, f"{what}: {new.not_read - skipped} not read")
    skipped = new.not_read
    t_busy = timed(watched, reps) - alone
    busy = host_held(watched, reps) - alone_host
    new.flush()
    unread = new.not_read - skipped  # as it comes: the slots may all be taken
    t_old = timed(lambda: with_watch(old), reps) - alone
    return t_new, held, held_all, t_busy, busy, unread, t_old


def digests(reps: int) -> None:
    print("3. the digest against a plain read and a device copy of the same bytes")
    for n in (1, 4099, 3 * (1 << 20) + 5, 64 << 20):  # the kernel's sums are the reference's
        raw = torch.randint(0, 256, (n,), dtype=torch.uint8, device="cuda")
        same = digest(raw) == digest(raw.cpu())
        print(f"   digest on the GPU == on the CPU, {n:>10,} B: {check(same, f'digest {n}')}")
    crossing(torch.Generator(device="cuda").manual_seed(1))
    print("   on the device: the lane sums left there, against view(int64).sum()")
    print("   end to end: digest() (its 48 bytes to the host, blake2b), against .sum().item()")
    print(f"   {'size':>6} {'read GB/s':>10} {'copy GB/s':>10} {'sums GB/s':>10} {'÷read':>6} "
          f"{'read+item':>10} {'digest()':>10} {'÷':>6}")  # fmt: skip
    for mb in (256, 1024, 4096):
        n = mb << 20
        src = torch.randint(0, 256, (n,), dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        words = src.view(torch.int64)
        t_read = timed(lambda words=words: words.sum(), reps)
        t_copy = timed(lambda src=src, dst=dst: dst.copy_(src), reps)
        t_sums = timed(lambda w=words: kernels.region_sums_device(w, 0, w.numel()), reps)
        t_item = timed(lambda words=words: words.sum().item(), reps)
        t_dig = timed(lambda src=src: digest(src, head_bytes=0, tail_bytes=0), reps)
        print(f"   {mb:>4}MB {n / t_read / 1e6:>10.0f} {n / t_copy / 1e6:>10.0f} "
              f"{n / t_sums / 1e6:>10.0f} {t_read / t_sums:>6.2f} {n / t_item / 1e6:>10.0f} "
              f"{n / t_dig / 1e6:>10.0f} {t_item / t_dig:>6.2f}")  # fmt: skip
        del src, dst, words
        torch.cuda.empty_cache()


def sweep(gen: torch.Generator, reps: int) -> None:
    print("4. the watch kernel's block and warps at 207.6 MB, the digest's at 1 GB (the best kept)")
    bufs = buffers(207_600_000, gen)
    t_read = timed(lambda: [b.view(torch.int64).sum() for b in bufs], reps)
    exp = torch.arange(0, 64, device="cuda")
    can = PageCanary(bufs, logger=False)
    best = (float("inf"), kernels.WATCH_BLOCK, kernels.WATCH_WARPS)
    for block in (128, 256, 512):
        for warps in (1, 2, 4):
            kernels.WATCH_BLOCK, kernels.WATCH_WARPS = block, warps
            can.flush()
            for slot in can._device.ring.slots:  # the passes captured again, as configured
                slot.graphs = None

            def w() -> None:
                with can.watch(1, exp):
                    pass

            t = timed(w, reps, before=can.flush)
            can.flush()
            best = min(best, (t, block, warps))
            rel = t / (2 * t_read)
            print(f"   watch block {block:>4} warps {warps}: {t:.3f} ms = {rel:.2f}× floor")
    _, kernels.WATCH_BLOCK, kernels.WATCH_WARPS = best
    print(f"   kept: watch block {kernels.WATCH_BLOCK}, warps {kernels.WATCH_WARPS}")
    src = torch.randint(0, 256, (1 << 30,), dtype=torch.uint8, device="cuda")
    words = src.view(torch.int64)
    t_r = timed(lambda: words.sum(), reps)
    names = ("BLOCK", "DIGEST_WARPS", "PROGRAMS_PER_SM", "STAGES")
    best = (float("inf"), *(getattr(kernels, k) for k in names))
    for config in itertools.product((512, 1024, 2048), (4, 8), (4, 8, 16), (1, 3)):
        for k, v in zip(names, config, strict=True):
            setattr(kernels, k, v)
        try:
            t = timed(lambda: kernels.region_sums_device(words, 0, words.numel()), reps)
        except Exception as exc:  # a config past the SM's shared memory or registers
            print(f"   digest {config}: {str(exc).splitlines()[0][:60]}")
            continue
        best = min(best, (t, *config))
        print(f"   digest block {config[0]:>4} warps {config[1]} programs/SM {config[2]:>2} "
              f"stages {config[3]}: {t_r / t:.2f} of a read")  # fmt: skip
    for k, v in zip(names, best[1:], strict=True):
        setattr(kernels, k, v)
    print("   kept: digest " + ", ".join(f"{k} {v}" for k, v in zip(names, best[1:], strict=True)))


def host_parts(gen: torch.Generator, reps: int) -> None:
    """Where the host's time in a watch goes (µs, median): entering and leaving the watch
    and their parts timed alone, the device synchronised and the lines written between
    watches (every slot free); the writer thread's time a watch, off the step's path."""
    print("5. the host's time in a watch, step by step (µs)")
    bufs = buffers(207_600_000, gen)
    can = PageCanary(bufs, logger=False)
    dev, exp = can._device, torch.arange(0, 64, device="cuda")
    with can.watch(0, exp):
        pass
    can.flush()
    slot = dev.ring.slots[0]
    first, second, _ = slot.graphs
    ring = dev.ring
    emitted: list[float] = []
    real_emit = ring.emit

    def timed_emit(*a) -> None:
        t = time.perf_counter()
        real_emit(*a)
        emitted.append((time.perf_counter() - t) * 1e6)

    ring.emit = timed_emit
    parts: dict[str, list[float]] = {}

    def lap(name: str, fn) -> None:
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        parts.setdefault(name, []).append((time.perf_counter() - t) * 1e6)

    for i in range(reps):
        w = can.watch(i, exp)
        lap("enter (all)", w.__enter__)
        lap("leave (all)", lambda w=w: w.__exit__(None, None, None))
        can.flush()
        lap("  is the stream capturing", torch.cuda.is_current_stream_capturing)
        lap("  take a slot", lambda: ring.slots[0].meta is None)
        lap("  first pass (replay)", first.replay)
        lap("  second pass (replay)", second.replay)
        lap("  the clock", time.time_ns)
    for name, xs in parts.items():
        print(f"   {name:28} {statistics.median(xs):8.1f}")
    print(
        f"   {'writer thread: lines a watch':28} {statistics.median(emitted):8.1f}"
        f"  (off the step's path; queueing the copy and waiting for it not counted)"
    )
    ring.emit = real_emit
    can.flush()


def crossing(gen: torch.Generator) -> None:
    """The digest kernel past 2^32 words (a 32 GiB buffer): its tail's sums against the
    torch reference of the same words, read on the CPU at their indexes."""
    n = (1 << 32) + (1 << 16)
    try:
        words = torch.empty(n, dtype=torch.int64, device="cuda")
    except torch.OutOfMemoryError:
        print("   past 2^32 words: no room on this card")
        return
    words.random_(generator=gen)
    tail = 1 << 18
    got = kernels.region_sums_device(words, 0, n - tail).cpu().tolist()[2:4]
    want = lane_sums_torch(words[n - tail :].cpu(), n - tail).tolist()
    print(f"   digest kernel past 2^32 words == reference: {check(got == want, 'past 2^32')}")
    del words
    torch.cuda.empty_cache()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--host-ready", action="store_true", help="the host records `ready`")
    a = ap.parse_args()
    if a.host_ready:
        from forensics.probes import readback

        readback.EXTERNAL = False
    from forensics.probes.readback import external_events

    print(
        f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}, "
        f"ready recorded {'in the graph' if external_events() else 'by the host'}"
    )
    gen = torch.Generator(device="cuda").manual_seed(0)
    exactness(gen)
    if a.sweep:
        sweep(gen, a.reps)
    host_parts(gen, a.reps)
    costs(gen, a.reps)
    digests(a.reps)
    print("FAILED: " + "; ".join(failures) if failures else "all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
