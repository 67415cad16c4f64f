"""Readers (journald renderings) and, later, record recognisers over message text."""
