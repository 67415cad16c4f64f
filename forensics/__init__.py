"""pd-forensics: post-mortem forensics for PD-disaggregated LLM inference.

The Python API the CLI is a thin layer over:

    import forensics
    res = forensics.ingest(["decode.log", "prefill/"], "incident.duckdb", run="flag-on")
    cols, rows = forensics.query("SELECT host, count(*) FROM entries GROUP BY host", res.db)
"""

__version__ = "0.1.0"

from .analyses.canary import canary
from .analyses.compare import compare
from .analyses.correlate import correlate
from .analyses.report import report
from .analyses.rooms import rooms
from .analyses.skew import skew
from .dashboards.write import dashboard
from .errors import ForensicsError
from .ingest import IngestResult, SourceResult, ingest
from .named import list_queries, run_named
from .sources import list_sources
from .sql import export, query
from .store import connect, connect_read_only
from .summary import summarize
from .synthetic.demo import demo

__all__ = [
    "ForensicsError",
    "IngestResult",
    "SourceResult",
    "__version__",
    "canary",
    "compare",
    "connect",
    "connect_read_only",
    "correlate",
    "dashboard",
    "demo",
    "export",
    "ingest",
    "list_queries",
    "list_sources",
    "query",
    "report",
    "rooms",
    "run_named",
    "skew",
    "summarize",
]
