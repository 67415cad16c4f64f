"""pd-forensics: post-mortem forensics for PD-disaggregated LLM inference.

The Python API the CLI is a thin layer over:

    import forensics
    res = forensics.ingest(["decode.log", "prefill/"], "incident.duckdb", run="flag-on")
    cols, rows = forensics.query("SELECT host, count(*) FROM entries GROUP BY host", res.db)
"""

__version__ = "0.1.0"

from .canary import canary
from .compare import compare
from .correlate import correlate
from .dashboard import dashboard
from .demo import demo
from .errors import ForensicsError
from .ingest import IngestResult, SourceResult, ingest
from .named import list_queries, run_named
from .report import report
from .rooms import rooms
from .skew import skew
from .sources import list_sources
from .sql import export, query
from .store import connect, connect_read_only
from .summary import summarize

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
