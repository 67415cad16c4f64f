"""pd-forensics: post-mortem forensics for PD-disaggregated LLM inference.

The Python API the CLI is a thin layer over:

    import forensics
    res = forensics.ingest(["decode.log", "prefill/"], "incident.duckdb", run="flag-on")
    cols, rows = forensics.query("SELECT host, count(*) FROM entries GROUP BY host", res.db)
"""

__version__ = "0.1.0"

from .demo import demo
from .errors import ForensicsError
from .ingest import IngestResult, SourceResult, ingest
from .named import list_queries, run_named
from .sources import list_sources
from .sql import export, query
from .store import connect, connect_read_only
from .summary import summarize

__all__ = [
    "ForensicsError",
    "IngestResult",
    "SourceResult",
    "__version__",
    "connect",
    "connect_read_only",
    "demo",
    "export",
    "ingest",
    "list_queries",
    "list_sources",
    "query",
    "run_named",
    "summarize",
]
