"""Which runs an analysis looks at: the scope (forensics/scope.py) checks them once a
command; these are its helpers, importable where analyses always found them."""

from __future__ import annotations

from ..scope import Runs, all_runs, run_filter

__all__ = ["Runs", "all_runs", "run_filter"]
