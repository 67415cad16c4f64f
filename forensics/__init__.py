"""pd-forensics: post-mortem forensics for PD-disaggregated LLM inference.

The Python API the CLI is a thin layer over:

    import forensics
    res = forensics.ingest(["decode.log", "prefill/"], "incident.duckdb", run="flag-on")
    df = forensics.query("SELECT host, count(*) FROM entries GROUP BY host", res.db)  # polars

Names are imported when first used: `forensics.probes`, which runs inside an inference
server, must import with torch alone, without polars, DuckDB or scipy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_WHERE = {
    "ForensicsError": ".errors",
    "IngestResult": ".store.ingest",
    "SourceResult": ".store.ingest",
    "bundle": ".artifacts.bundle",
    "canary": ".analyses.canary",
    "compare": ".analyses.compare",
    "copy_incident": ".store.relocate",
    "connect": ".store",
    "connect_read_only": ".store",
    "correlate": ".analyses.correlate",
    "dashboard": ".dashboards.write",
    "demo": ".synthetic.demo",
    "export": ".sql",
    "follow": ".analyses.follow",
    "ingest": ".writing",
    "list_queries": ".named",
    "list_sources": ".store.sources",
    "move_incident": ".store.relocate",
    "query": ".sql",
    "query_rows": ".sql",
    "report": ".analyses.report",
    "rooms": ".analyses.rooms",
    "run_named": ".named",
    "skew": ".analyses.skew",
    "summarize": ".store.summary",
    "trace": ".artifacts.trace",
    "suspects": ".analyses.suspects",
    "verdict": ".analyses.report",
    "verify": ".store.integrity",
}
__all__ = [
    "ForensicsError",
    "IngestResult",
    "SourceResult",
    "__version__",
    "bundle",
    "canary",
    "compare",
    "connect",
    "connect_read_only",
    "copy_incident",
    "correlate",
    "dashboard",
    "demo",
    "export",
    "follow",
    "ingest",
    "list_queries",
    "list_sources",
    "move_incident",
    "query",
    "query_rows",
    "report",
    "rooms",
    "run_named",
    "skew",
    "summarize",
    "suspects",
    "trace",
    "verdict",
    "verify",
]


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'forensics' has no attribute {name!r}")
    value = getattr(importlib.import_module(where, __name__), name)
    globals()[name] = value  # once: later lookups skip this function
    return value


if TYPE_CHECKING:
    from .analyses.canary import canary
    from .analyses.compare import compare
    from .analyses.correlate import correlate
    from .analyses.follow import follow
    from .analyses.report import report, verdict
    from .analyses.rooms import rooms
    from .analyses.skew import skew
    from .analyses.suspects import suspects
    from .artifacts.bundle import bundle
    from .artifacts.trace import trace
    from .dashboards.write import dashboard
    from .errors import ForensicsError
    from .named import list_queries, run_named
    from .sql import export, query, query_rows
    from .store import connect, connect_read_only
    from .store.ingest import IngestResult, SourceResult
    from .store.integrity import verify
    from .store.relocate import copy_incident, move_incident
    from .store.sources import list_sources
    from .store.summary import summarize
    from .synthetic.demo import demo
    from .writing import ingest
