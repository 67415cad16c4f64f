"""The conclusions drawn from the stored evidence: rooms, correlate, compare, skew, canary
and the report that tells them together (the maths on numpy alone, in stats.py)."""
