"""Recognisers over stored message text: the forensic record contract (docs/log-contract.md)."""

from .contract import Records, parse_records

__all__ = ["Records", "parse_records"]
