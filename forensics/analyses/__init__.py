"""The conclusions drawn from the stored evidence: rooms, correlate, compare, skew, canary
and the report that tells them together (scipy.stats for the maths, in stats.py)."""
