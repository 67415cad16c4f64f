"""Plotly figure functions and the offline HTML dashboard (filled by a later issue)."""
