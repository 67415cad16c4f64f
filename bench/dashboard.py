"""Dashboard benchmark: HTML size, build time and browser render time at 10 k, 100 k and
1 M canary rows.

    python3 bench/dashboard.py [--rows 10000 100000 1000000]

Each database is filled straight in SQL (the records an incident of that size would
have: canary rows over 4 layers, a quarter of them with unexpected pages, step records,
rooms, harness results, decode batch lines), then `forensics dashboard` builds the page
(timed in-process) and, when Debian's chromium is installed, Playwright opens it with the
network blocked and times until every plot has drawn.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import duckdb
from forensics.dashboards.write import dashboard

import forensics
from forensics.store.legacy import create_legacy
from forensics.store.upgrade import upgrade

CHROMIUM = "/usr/bin/chromium"
LAYERS = 4
STEPS_PER_REQUEST = 50


def fill(db: Path, rows: int) -> None:
    """An incident with `rows` canary records, written in SQL into schema 6's tables, then
    upgraded to a catalog and shards as any old database is."""
    steps = rows // LAYERS
    requests = max(1, steps // STEPS_PER_REQUEST)
    con = duckdb.connect(str(db))
    try:
        create_legacy(con)
        con.execute("BEGIN")
        con.execute("INSERT INTO runs (run, tags) VALUES ('bench', MAP {'rows': ?})", [str(rows)])
        con.execute(
            "INSERT INTO sources (source_id, run, path, sha256, bytes, format, lines, entries,"
            " duplicates, rejoined, quarantined, markers) VALUES"
            " (1, 'bench', 'bench', 'x', 0, 'sql', 0, 0, 0, 0, 0, 0)"
        )
        t0 = 1_795_935_600_000_000
        con.execute(
            f"""INSERT INTO canary (run, host, ts_us, source_id, entry_no, step, layer, bs, mode,
                                    expected, changed, unexpected, n_expected, n_changed,
                                    n_unexpected)
                SELECT 'bench', 'decode-0', {t0} + s * 10000 + l, 1, i, s, l * 20, 48, 'replay',
                       [s % 4000, s % 4000 + 1], ch, list_filter(ch, lambda x: x > s % 4000 + 1),
                       2, len(ch), len(ch) - 2
                FROM (SELECT i, i // {LAYERS} AS s, i % {LAYERS} AS l,
                             CASE WHEN h % 4 = 0
                                  THEN [i // {LAYERS} % 4000, i // {LAYERS} % 4000 + 1]
                                       || range(5000 + h % 300, 5000 + h % 300 + 2 + h % 38)
                                  ELSE [i // {LAYERS} % 4000, i // {LAYERS} % 4000 + 1] END AS ch
                      FROM (SELECT i, (hash(i) % 1000000)::BIGINT AS h FROM range({rows}) t(i)))"""
        )
        con.execute(
            f"""INSERT INTO steps (run, host, ts_us, source_id, entry_no, step, bs, rids, rooms)
                SELECT 'bench', 'decode-0', {t0} + s * 10000, 1, {rows} + s, s, 1,
                       'r' || q, (q + 1)::VARCHAR
                FROM (SELECT s, s // {STEPS_PER_REQUEST} AS q FROM range({steps}) t(s))"""
        )
        for side, host, lag in (("src", "prefill-0", 0), ("dst", "decode-0", 4000)):
            con.execute(
                f"""INSERT INTO checksums (run, host, ts_us, source_id, entry_no, side, room, rid,
                                           buf, layer, tp, head, tail, "full")
                    SELECT 'bench', '{host}',
                           {t0} + q * {STEPS_PER_REQUEST} * 10000 - 50000 + {lag},
                           1, {rows + steps} + q, '{side}', q + 1, 'r' || q, 'index_k', 'all', 0,
                           'h' || q, 't' || q,
                           CASE WHEN '{side}' = 'dst' AND q % 37 = 0 THEN 'torn' ELSE 'f' || q END
                    FROM range({requests}) t(q)"""
            )
        con.execute(
            f"""INSERT INTO results (run, source_id, line, session, round, rid, room, corrupted,
                                     reason)
                SELECT 'bench', 1, q, (q % 64)::VARCHAR, q // 64, 'r' || q, q + 1,
                       q % 37 = 0 OR (hash(q) % 20)::BIGINT = 0, ''
                FROM range({requests}) t(q)"""
        )
        con.execute(
            f"""INSERT INTO batches (run, host, ts_us, source_id, entry_no, pattern, phase,
                                     running_req)
                SELECT 'bench', 'decode-0', {t0} + s * 10000, 1, {2 * rows} + s, 'batch_stats',
                       'Decode', 40 + (hash(s) % 40)::BIGINT
                FROM range(0, {steps}, 10) t(s)"""
        )
        con.execute("COMMIT")
    finally:
        con.close()
    upgrade(db)
    for old in db.parent.glob(db.name + ".v*"):
        old.unlink()


def render_seconds(path: Path) -> float | None:
    if not os.path.exists(CHROMIUM):
        return None
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        page = b.new_page(viewport={"width": 1600, "height": 1000})
        page.route(
            "**/*", lambda r: r.continue_() if r.request.url.startswith("file:") else r.abort()
        )
        t = time.perf_counter()
        page.goto(path.resolve().as_uri(), timeout=120_000)
        page.wait_for_function(
            "() => ['timeline', 'runs'].every(id => { const gd = document.getElementById(id);"
            " return gd && gd._fullLayout && gd.querySelector('.main-svg'); })",
            timeout=120_000,
        )
        seconds = time.perf_counter() - t
        b.close()
    return seconds


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    args = ap.parse_args(argv)
    print("| canary rows | with unexpected writes | HTML MB | build s | render s | aggregated |")
    print("|---:|---:|---:|---:|---:|---|")
    with tempfile.TemporaryDirectory(prefix="forensics-dash-") as tmp:
        for rows in args.rows:
            db = Path(tmp) / f"d{rows}.duckdb"
            fill(db, rows)
            _, hit = forensics.query_rows("SELECT count(*) FROM canary_writes", db)
            res = dashboard(db, out=Path(tmp) / f"d{rows}.html")
            shown = render_seconds(res.path)
            rs = f"{shown:.1f}" if shown is not None else "no chromium"
            notes = "; ".join(n.split(":")[0] for n in res.notes) or "-"
            print(f"| {rows:,} | {hit[0][0]:,} | {res.bytes / 1e6:.1f} | {res.seconds:.1f} | "
                  f"{rs} | {notes} |")  # fmt: skip
            sys.stdout.flush()


if __name__ == "__main__":
    main()
