"""Plotly figures of an incident and the offline HTML dashboard built from them.

import forensics.dashboards as fd
fd.timeline("incident.duckdb", run="flag-on").show()   # the step-aligned panels
fd.runs_compared("incident.duckdb").show()             # corruption rate per run
"""

from __future__ import annotations

from typing import Any

__all__ = ["runs_compared", "timeline"]
# The dashboard's file name when --out is not given (here, not in write.py: the CLI
# names it in its help, and write.py loads every analysis).
DEFAULT_NAME = "forensics-dashboard.html"


def __getattr__(name: str) -> Any:
    # Plotly loads only when a figure is asked for: `forensics` commands that import the
    # dashboard writer's constants must not pay for it.
    if name in __all__:
        from . import figures, panels

        return getattr(panels if name == "timeline" else figures, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
