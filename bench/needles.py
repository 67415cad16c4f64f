"""The needle pass of pattern matching (parsers/patterns._lines_holding): which lines hold
which pattern's needle, on 1.5 M lines with a 4 kB prompt in every twelfth — against the
designs it was measured with, in the same run.

    python3 bench/needles.py [--repeat 3]

Lines, two sets: the suspects benchmark's incident (bench/suspects.py builds and caches it:
1.4 M noise lines, the planted requests' lines) plus its Receive lines three more times
with a 4 kB prompt each, shuffled; and the messages of the mixed benchmark journal's first
400 k lines (bench/generate.py, as bench/run.py uses it: batches, access lines, prompts,
probe records). Designs:
- halving: the alternation of every needle over all lines, then each half of the set
  only in the lines holding one of it, down to single needles (the design before)
- one pass (kept): the alternation over all lines, `extract_all` of it on the lines that
  hold one, a needle overlapping another's match sought alone in its partner's lines
- Aho-Corasick: the alternation, then `extract_many(overlapping=True)` on those lines
Each is checked equal to the kept design on the first 200 k lines.
"""

from __future__ import annotations

import argparse
import glob
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def halving(messages, needles):
    import polars as pl
    from forensics.parsers.patterns import _literal

    out = []

    def split(lines, idx, needles):
        regex = "|".join(_literal(n) for n in needles)
        hit = lines.str.contains(regex).fill_null(False)
        if not hit.any():
            out.extend(idx.clear() for _ in needles)
            return
        if not hit.all():
            lines, idx = lines.filter(hit), idx.filter(hit)
        if len(needles) == 1:
            out.append(idx)
            return
        half = len(needles) // 2
        split(lines, idx, needles[:half])
        split(lines, idx, needles[half:])

    distinct = list(dict.fromkeys(needles))
    split(messages, pl.int_range(len(messages), eager=True, dtype=pl.UInt32), distinct)
    found = dict(zip(distinct, out, strict=True))
    return [found[n] for n in needles]


def aho_corasick(messages, needles):
    import polars as pl
    from forensics.parsers.patterns import _literal

    distinct = list(dict.fromkeys(needles))
    idx = pl.int_range(len(messages), eager=True, dtype=pl.UInt32)
    hit = messages.str.contains("|".join(_literal(n) for n in distinct)).fill_null(False)
    lines, idx = messages.filter(hit), idx.filter(hit)
    pairs = (
        pl.DataFrame({"row": idx, "n": lines.str.extract_many(distinct, overlapping=True)})
        .explode("n").drop_nulls("n").group_by("n").agg(pl.col("row").unique().sort())
    )  # fmt: skip
    found = dict(zip(pairs["n"].to_list(), pairs["row"], strict=True))
    return [found.get(n, pl.Series([], dtype=pl.UInt32)) for n in needles]


def lines():
    import polars as pl
    import pyarrow.parquet as pq
    from suspects import build

    db = build(10_000, 1_400_000, 500)
    files = glob.glob(str(db.with_suffix(".shards") / "*" / "entries-*.parquet"))
    msgs = pl.concat([pl.from_arrow(pq.read_table(f, columns=["message"])["message"])
                      for f in files])  # fmt: skip
    receive = msgs.filter(msgs.str.contains("Receive: obj=", literal=True))
    prompt = receive.str.replace("text='", "text='" + "lorem ipsum dolor sit amet " * 150,
                                 literal=True)  # fmt: skip
    return pl.concat([msgs, prompt, prompt, prompt]).sample(fraction=1.0, shuffle=True, seed=1)


def mixed_lines(n: int = 400_000):
    """The messages of the mixed benchmark journal's first `n` lines (its text rendering,
    the prefix cut off)."""
    import itertools

    import generate
    import polars as pl

    log = generate.build(HERE / "out", 1_500_000)["short-iso-precise"]
    with open(log, encoding="utf-8", errors="replace") as fh:
        head = list(itertools.islice(fh, n))
    text = pl.Series(head).str.strip_chars_end("\n")
    return text.str.extract(r"^\S+ \S+ [^:\[]+(?:\[\d+\])?: (.*)$", 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    from forensics.parsers.patterns import _lines_holding, builtin

    needles = [p.needle for p in builtin()]
    designs = {"halving": halving, "one pass": _lines_holding, "Aho-Corasick": aho_corasick}
    for label, data in (("suspects incident + prompts", lines()), ("mixed journal", mixed_lines())):
        _measure(label, data, needles, designs, args.repeat)


def _measure(label, mixed, needles, designs, repeat: int) -> None:
    from forensics.parsers.patterns import _lines_holding

    head = mixed[:200_000]
    want = [s.to_list() for s in _lines_holding(head, needles)]
    for name, f in designs.items():
        assert [s.to_list() for s in f(head, needles)] == want, name
    times: dict[str, list[float]] = {n: [] for n in designs}
    for _ in range(repeat):  # interleaved
        for name, f in designs.items():
            t = time.perf_counter()
            f(mixed, needles)
            times[name].append(time.perf_counter() - t)
    base = statistics.median(times["halving"])
    mb = mixed.str.len_bytes().sum() / 1e6
    print(
        f"\n{label}: {len(mixed):,} lines, {mb:,.0f} MB, {len(set(needles))} needles; "
        f"medians of {repeat}"
    )
    print("| design | s | vs halving |\n|---|---|---|")
    for name in designs:
        m = statistics.median(times[name])
        print(f"| {name} | {m:.2f} | {base / m:.2f}× |")


if __name__ == "__main__":
    main()
