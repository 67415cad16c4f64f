"""`forensics demo`: a small incident written as real inputs, ingested, summarised."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..dashboards.write import DashboardResult, dashboard
from ..store.ingest import IngestResult
from ..writing import ingest
from . import incident
from .journal_writer import journal_remote_available, render, write_journal
from .profile import write_profile
from .stock import generate_stock


@dataclass
class DemoResult:
    dir: Path
    files: list[Path]
    ingest: IngestResult
    truth: dict
    real_journal: bool  # decode rendered by the real journalctl from a real .journal
    dashboard: DashboardResult


def demo(
    out_dir: str | Path = "demo-incident", db: str | Path | None = None, stock: bool = False
) -> DemoResult:
    """The demo incident written as real inputs and ingested; `stock`: as stock SGLang
    prints it (time stats, Finish lines, retractions, aborts), with no probe records."""
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    inc = generate_stock() if stock else incident.generate()
    prefill = incident.write_export(inc.prefill, d / "prefill-0.export")
    decode_export = incident.write_export(inc.decode, d / "decode-0.export.tmp")
    decode = d / "decode-0.log"
    real = journal_remote_available()
    if real:
        journals = write_journal(decode_export, d / "journal" / "decode-0.journal")
        render(journals, "short-iso-precise", decode)
        for j in journals:
            j.unlink()
        (d / "journal").rmdir()
    else:
        incident.write_short_iso_precise(inc.decode, decode)
    decode_export.unlink()
    results = incident.write_results(inc.results, d / "results.jsonl")
    # not an input: a profiler trace of decode's window, to open beside `forensics trace`
    write_profile(inc.decode, d / "decode-0.pt.trace.json", "decode-0")
    metrics = []
    for name, lines in inc.metrics.items():  # decode's folder names its host
        (d / "decode-0").mkdir(exist_ok=True)
        metrics.append(d / "decode-0" / name)
        metrics[-1].write_text("".join(f"{ln}\n" for ln in lines), encoding="utf-8")
    dbp = Path(db) if db is not None else d / "forensics.duckdb"
    for p in (dbp, dbp.with_name(dbp.name + ".wal")):
        p.unlink(missing_ok=True)  # the demo starts from nothing each time
    res = ingest(
        [str(prefill), str(decode), str(results), *map(str, metrics)],
        dbp,
        run="demo",
        tags={"source": "forensics demo --stock" if stock else "forensics demo"},
    )
    board = dashboard(dbp, out=d / "dashboard.html")
    return DemoResult(d, [prefill, decode, results, *metrics], res, inc.truth, real, board)
