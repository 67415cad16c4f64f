"""Plotly figures of an incident and the offline HTML dashboard built from them.

import forensics.dashboards as fd
fd.timeline("incident.duckdb", run="flag-on").show()   # the step-aligned panels
fd.runs_compared("incident.duckdb").show()             # corruption rate per run
"""

from .figures import runs_compared, timeline

__all__ = ["runs_compared", "timeline"]
